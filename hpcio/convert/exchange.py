"""Parcels between ranks: the samples (or encoded records) each rank read for the others.

In a round every rank fills one :class:`Parcel` per shard of the round with what it read
of that shard; ``parcels[r]``, ``{shard: Parcel}``, holds those of the shards rank ``r``
owns, and :func:`exchange_parcels` hands each owner its own.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import numpy as np

from ..distributed.comm import Comm

__all__ = ["Parcel", "exchange_parcels"]


@dataclasses.dataclass(slots=True)
class Parcel:
    """What one rank read in a round for one shard, in the plan's order."""

    # (global id, sample) pairs; None once encoded into ``records``.
    samples: list | None = dataclasses.field(default_factory=list)
    # The samples as the shard's writer stores them (bytes-like), when encoded where
    # they were read; their lengths (an int64 array) while they travel.
    records: list | np.ndarray | None = None
    filtered: int = 0  # samples the map or the filter left out
    dropped: list[int] = dataclasses.field(default_factory=list)  # their global ids
    bad: list = dataclasses.field(default_factory=list)  # (global id, BadSample) of the samples that failed


def exchange_parcels(comm: Comm, parcels: list[dict[int, Parcel]], encoded: bool) -> list[dict[int, Parcel]]:
    """Send ``parcels[r]`` to rank ``r``; returns the parcels every rank sent this one.

    This rank's own parcels stay here rather than being pickled to itself.  Encoded
    parcels travel as pickled bookkeeping plus their records' raw bytes; the records
    received are memoryviews of one buffer per sender."""
    mine = parcels[comm.rank]
    parcels[comm.rank] = None
    if not encoded:
        received = comm.alltoall(parcels)
        received[comm.rank] = mine
        return received
    pieces = [[] for _ in range(comm.size)]
    for r, theirs in enumerate(parcels):
        if theirs is not None:
            pieces[r] = [rec for parcel in theirs.values() for rec in parcel.records]
            for parcel in theirs.values():
                parcel.records = np.array([len(rec) for rec in parcel.records], np.int64)
    received = comm.alltoall(parcels)
    data = comm.exchange_bytes(pieces)
    del pieces
    for r, ours in enumerate(received):
        if r != comm.rank:
            _split_records(ours, data[r])
    received[comm.rank] = mine
    return received


def _split_records(parcels: dict[int, Parcel], view: memoryview) -> None:
    """Replace each parcel's record lengths by views of its records in ``view``."""
    at = 0
    for parcel in parcels.values():
        records = []
        for length in cast(np.ndarray, parcel.records).tolist():
            records.append(view[at : at + length])
            at += length
        parcel.records = records
