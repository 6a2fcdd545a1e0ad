"""Parcels between ranks: the samples (or encoded records) each rank read for the others.

A parcel is ``{shard: {"samples" | "records", "filtered", "dropped", "bad"}}``, the part of one
round that one rank read for the owner of those shards.
"""

from __future__ import annotations

import numpy as np

from ..distributed.comm import Comm

__all__ = ["exchange_parcels"]


def exchange_parcels(comm: Comm, parcels: list[dict], encoded: bool) -> list[dict]:
    """Send ``parcels[r]`` to rank ``r``; returns the parcels every rank sent this one.

    This rank's own parcel stays here rather than being pickled to itself.  Encoded
    parcels travel as pickled bookkeeping plus their records' raw bytes; the records
    received are memoryviews of one buffer per sender."""
    mine = parcels[comm.rank]
    parcels[comm.rank] = None
    if not encoded:
        received = comm.alltoall(parcels)
        received[comm.rank] = mine
        return received
    pieces = [[] for _ in range(comm.size)]
    for r, parcel in enumerate(parcels):
        if parcel is not None:
            pieces[r] = [rec for part in parcel.values() for rec in part["records"]]
            for part in parcel.values():
                part["records"] = np.array([len(rec) for rec in part["records"]], np.int64)
    received = comm.alltoall(parcels)
    data = comm.exchange_bytes(pieces)
    del pieces
    for r, parcel in enumerate(received):
        if r != comm.rank:
            _split_records(parcel, data[r])
    received[comm.rank] = mine
    return received


def _split_records(parcel: dict, view: memoryview) -> None:
    """Replace each part's record lengths by views of its records in ``view``."""
    at = 0
    for part in parcel.values():
        records = []
        for length in part["records"].tolist():
            records.append(view[at : at + length])
            at += length
        part["records"] = records
