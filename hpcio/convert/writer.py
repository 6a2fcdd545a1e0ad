"""Writing shards on one rank, a round at a time.

In a round every rank reads one contiguous share of the round's samples, maps and
filters them, and hands them to the shards' files by one of three routes
(:class:`WriteRoute`), chosen for the round by the format's hooks, the rank count and
``$HPCIO_CONVERT_PLACED_RUN_BYTES``:

``SAMPLES``
    The samples travel to each shard's owner (:mod:`.exchange`, pickled), whose format
    ``Writer`` writes them.  On one rank, and for formats without the encoded-record hook
    (``record_encoder``).
``RECORDS``
    Each rank encodes the samples it read as the shards' writers would store them; the
    records travel to the owner as raw bytes and are appended with
    ``Writer.write_record``.  Formats with the encoded-record hook, on several ranks.
``PLACED``
    Each rank writes its records straight to their offset in the shard's file and only
    their lengths travel.  Formats with the placed-record hook too (``record_layout``),
    while the mean run a rank writes into a shard is at least
    ``$HPCIO_CONVERT_PLACED_RUN_BYTES``; a round whose shards the format does not store
    as records in place (``record_layout`` returns None: compressed whole, hashed) takes
    ``RECORDS`` instead.

The routes write the same bytes: every shard's writer meets the same samples, or the
records made of them with the same writer options, in the plan's order, so the output is
the same at any rank count and through any route (``tests/convert/test_convert_mpi.py``
converts one input by each).  Each shard is written into a private temporary directory,
then published into the staging directory with its index part (:mod:`.resume`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import numpy as np

from .._core._io import start_writeback
from .._fileio import write_pieces
from ..distributed.comm import Comm
from ..errors import BadSampleError, CorruptShardError, DecodeError, HpcioError
from ..tuning import gc_paused
from . import plan as planning
from .exchange import Parcel, exchange_parcels
from .faults import BadSample, bad_sample_from
from .resume import part_path, publish_files, start_writeback_files, state_dir, write_json_atomic
from .sizes import Measured
from .spec import ConvertOptions
from .spill import PASS_SAMPLES, Piece, RoundShare, RoundSpill

__all__ = ["ShardWriter", "WriteRoute", "SLOW_SHARD_ENV"]

# Test aid: seconds to sleep after publishing each shard, so a test can kill -9 a run
# part-way through and check that --resume completes it.
SLOW_SHARD_ENV = "HPCIO_CONVERT_SLOW_SHARD_SECONDS"


class WriteRoute(enum.Enum):
    """How a round's samples reach their shards' files (the module's docstring compares
    them); every route writes the same bytes."""

    SAMPLES = "samples"
    RECORDS = "records"
    PLACED = "placed"


class ShardWriter:
    """Writes shards on one rank, a round at a time: read this rank's share of the round's
    samples, map/filter them, exchange them, write this rank's shards and publish them."""

    def __init__(self, *, fmt, staging: str, options: ConvertOptions, map_fn, filter_fn, placed_run_bytes: int,
                 sources, measured: Measured, num_shards: int, progress, readers, clock):
        """``options`` the conversion's, with the ``map_fn``, ``filter_fn`` and
        ``placed_run_bytes`` they name looked up (:func:`.driver.run_conversion`)."""
        self.fmt = fmt
        self.staging = staging
        self.sources = sources
        self.first_id = measured.first_id
        self.block_first = measured.block_first
        self.sizes = measured.sizes
        self.fields = options.fields
        self.map_fn = map_fn
        self.filter_fn = filter_fn
        self.skip_bad = options.skip_bad
        self.writer_options = options.output_writer_options
        self.num_shards = num_shards
        self.progress = progress
        self.readers = readers
        self.clock = clock
        self.slow = float(os.environ.get(SLOW_SHARD_ENV, "0") or 0)
        # Formats with the encoded-record hook get their samples encoded where they were
        # read: the owners of the shards then receive record bytes, which cross between
        # ranks in one raw message, not as pickled Python objects.
        self.encodes = hasattr(fmt, "record_encoder")
        # Formats with the placed-record hook as well get those records written by the
        # rank that made them, straight to where they end up in their shard's file: only
        # their lengths cross between ranks.  Then every rank writes into every shard of a
        # round, ranks x shards runs each opening the file: worth it while the runs are
        # large.  On many ranks they get small (the round's bytes over ranks x shards)
        # and the opens many, and the records are sent to the owners instead.
        self.places = self.encodes and hasattr(fmt, "record_layout")
        self.placed_run_bytes = placed_run_bytes
        self.spill: RoundSpill | None = None

    def close(self):
        self.readers.close()
        self.sizes.close()
        if self.spill is not None:
            self.spill.close()

    def _bad(self, exc, gid: int, stage: str, shard: int) -> tuple[int, BadSample]:
        """The record of a failed sample (``gid`` its global id), or BadSampleError."""
        src = int(np.searchsorted(self.first_id, gid, side="right")) - 1
        rec = bad_sample_from(exc, source=self.sources[src].path, sample=gid - int(self.first_id[src]),
                              stage=stage, shard=shard)
        if rec.file is not None and Path(os.path.abspath(rec.file)).is_relative_to(os.path.abspath(self.staging)):
            # A writer names its temporary shard, which is gone by the time anyone reads
            # the report: the source sample is where to look.
            rec = dataclasses.replace(rec, file=None, offset=None)
        if not self.skip_bad:
            raise BadSampleError(rec) from exc
        return gid, rec

    def fields_per_sample(self) -> int:
        """The fields of the sources' first sample as the rounds will read it (the same
        on every rank), for :func:`.plan.held_bytes`; 1 when it cannot be read.  Its
        pages are left to the rounds, which read the sources from it on and let them go."""
        if self.fields is not None or not len(self.sizes):
            return len(self.fields or ()) or 1
        reader = self.readers.get(int(np.searchsorted(self.first_id, 0, side="right")) - 1)
        try:
            return len(reader.read(0))
        except Exception:  # noqa: BLE001 -- the rounds read it again and report it
            return 1

    def _read(self, reader, base: int, gids: np.ndarray, shards: np.ndarray, bad: list):
        """(position in ``gids``, sample) pairs; failures become bad samples."""
        try:
            return list(enumerate(reader.read_many(gids - base, self.fields)))
        except Exception as exc:
            if not _is_sample_error(exc):
                raise
        out = []  # find the failing sample(s) one by one
        for k, gid in enumerate(gids.tolist()):
            try:
                out.append((k, reader.read(gid - base, self.fields)))
            except Exception as exc:
                if not _is_sample_error(exc):
                    raise
                bad.append(self._bad(exc, gid, "read", int(shards[k])))
        return out

    def round_share(self, comm: Comm, round_shards: list[int], plan) -> tuple[RoundShare, dict]:
        """This rank's contiguous share of the round's samples, and each shard's owner."""
        members = [plan.shard(k) for k in round_shards]
        gids = np.concatenate(members)
        shard_of = np.repeat(np.asarray(round_shards, dtype=np.int64), [len(m) for m in members])
        order = np.argsort(gids, kind="stable")
        gids, shard_of = gids[order], shard_of[order]
        # Rounds start at a multiple of comm.size, so a shard's owner is its position here.
        owner = {k: t % comm.size for t, k in enumerate(round_shards)}
        blocks = np.searchsorted(self.block_first, gids, side="right") - 1
        cuts = planning.read_shares(blocks, self.sizes[gids], comm.size)
        lo, hi = int(cuts[comm.rank]), int(cuts[comm.rank + 1])
        return RoundShare(gids[lo:hi], shard_of[lo:hi], blocks[lo:hi]), owner

    def spill_rounds(self, comm: Comm, rounds: list[list[int]], plan, buffer_bytes: int) -> None:
        """Read this rank's share of every round once, in source order, into the round's
        file (:mod:`.spill`); :meth:`write_round` then reads the file, not the sources."""
        # A rank's share of a round is a contiguous range of the round's global ids: the
        # pass keeps those ranges, and finds each sample's shard from the plan as it goes.
        first, last = np.zeros(len(rounds), np.int64), np.full(len(rounds), -1, np.int64)
        round_of_shard = np.full(plan.num_shards + 1, -1, np.int32)  # [-1]: no shard
        for t, round_shards in enumerate(rounds):
            share, _owner = self.round_share(comm, round_shards, plan)
            if len(share.gids):
                first[t], last[t] = share.gids[0], share.gids[-1]
            round_of_shard[round_shards] = t
        self.spill = RoundSpill(os.path.join(state_dir(self.staging), "tmp", f"spill-{comm.rank:06d}"),
                                len(rounds), buffer_bytes)
        read_runs = functools.partial(self.read_runs, portable=True, run_bytes=buffer_bytes)
        with gc_paused():
            for start in range(0, len(self.sizes), PASS_SAMPLES):
                ids = np.arange(start, min(start + PASS_SAMPLES, len(self.sizes)), dtype=np.int64)
                shards = plan.shard_of(ids)
                round_of = round_of_shard[shards]
                keep = (round_of >= 0) & (ids >= first[round_of]) & (ids <= last[round_of])
                gids = ids[keep]
                blocks = np.searchsorted(self.block_first, gids, side="right") - 1
                self.spill.fill(gids, shards[keep].astype(np.int64), blocks, round_of[keep], read_runs)
            self.spill.finish()
        self.clock.lap("read")

    def write_round(self, comm: Comm, round_shards: list[int], plan, number: int = 0) -> None:
        """Collective: every rank calls it with the same round (``number`` counts the
        rounds from 0)."""
        share, owner = self.round_share(comm, round_shards, plan)
        parcels = [{k: Parcel() for k in round_shards if owner[k] == r} for r in range(comm.size)]
        run_bytes = sum(int(plan.shard_bytes[k]) for k in round_shards) / (comm.size * len(round_shards))
        route = self.route(comm.size, run_bytes)
        encoded = route is not WriteRoute.SAMPLES
        # A round's samples all stay alive until written: collections meanwhile would
        # scan them and free nothing.
        with gc_paused():
            pieces = (self.spill.pieces(number) if self.spill is not None
                      else self.read_runs(share.gids, share.shard_of, share.blocks))
            self._route(comm.rank, pieces, owner, parcels, encoded)
            self.clock.lap("read")
            fixed = {}
            if encoded:
                fixed = self._encode(comm, parcels)
                self.clock.lap("encode")
            # Every rank writes its shards before any rank fsyncs: on a local file system
            # a write waits behind another process's fsync for the journal.
            written = self._place(comm, round_shards, owner, parcels, fixed) if route is WriteRoute.PLACED else None
            if written is None:  # SAMPLES or RECORDS
                received = exchange_parcels(comm, parcels, encoded)
                self.clock.lap("exchange")
                written = [self.write_shard(k, [theirs[k] for theirs in received], fixed.get(k, {}))
                           for k in round_shards if owner[k] == comm.rank]
        self.clock.lap("write")
        comm.barrier()
        self.clock.lap("wait")
        for shard, part in written:
            self.publish_shard(shard, part)
            if self.slow > 0:
                time.sleep(self.slow)
        self.clock.lap("publish")

    def route(self, ranks: int, run_bytes: float) -> WriteRoute:
        """The route of a round on ``ranks`` ranks in which a rank writes a mean run of
        ``run_bytes`` into each shard (the same on every rank)."""
        if not self.encodes or ranks == 1:
            return WriteRoute.SAMPLES
        if self.places and run_bytes >= self.placed_run_bytes:
            return WriteRoute.PLACED
        return WriteRoute.RECORDS

    def _encode(self, comm: Comm, parcels: list[dict[int, Parcel]]) -> dict:
        """Turn every parcel's samples into ``records`` as the shards' writers would
        store them; returns ``{shard: writer options}`` fixed from each shard's first
        sample that fixes them, the same on every rank.  Collective."""
        first = {}  # shard -> (gid, options) of this rank's first sample that fixes them
        failed = {}  # gid -> the error of a sample that could not fix them
        for theirs in parcels:
            for k, parcel in theirs.items():
                for gid, sample in parcel.samples:
                    try:
                        first[k] = (gid, self.fmt.record_options(sample, **self.writer_options))
                        break
                    except Exception as exc:
                        if not _is_sample_error(exc):
                            raise
                        failed[gid] = exc
        chosen = {}
        for share in comm.allgather(first):
            for k, (gid, options) in share.items():
                if k not in chosen or gid < chosen[k][0]:
                    chosen[k] = (gid, options)
        for theirs in parcels:
            for k, parcel in theirs.items():
                first_gid, options = chosen.get(k, (None, {}))
                encoder = None if first_gid is None else self.fmt.record_encoder(
                    _shard_tmpdir(self.staging, k), **self.writer_options, **options)
                records = []
                samples = parcel.samples
                for number, (gid, sample) in enumerate(samples):
                    samples[number] = None  # freed as encoded: its record reuses the memory
                    try:
                        if first_gid is None or gid < first_gid:
                            # The writer would have tried to fix its options from this
                            # sample, and failed.
                            raise failed[gid]
                        records.append(encoder.record(sample, number))
                    except Exception as exc:
                        if not _is_sample_error(exc):
                            raise
                        parcel.bad.append(self._bad(exc, gid, _write_stage(exc), k))
                parcel.samples, parcel.records = None, records
        return {k: options for k, (_gid, options) in chosen.items()}

    def _place(self, comm: Comm, round_shards: list[int], owner: dict, parcels: list[dict[int, Parcel]],
               fixed: dict) -> list[tuple[int, dict]] | None:
        """Write this rank's records of every shard of the round into the shard's file at
        the offset where they belong, the owner adding the file's head; returns the
        ``(shard, part)`` of this rank's shards, as :meth:`write_shard` does.  None, with
        nothing written, when the format does not store these shards as records in place
        (they are exchanged instead).  Collective.

        The records of a shard from rank ``r`` follow those from the ranks before it (each
        rank reads a contiguous share of the round, and a shard keeps source order), so
        each rank writes one contiguous run per shard, which needs every rank's record
        lengths but none of their bytes."""
        mine = {k: parcel for theirs in parcels for k, parcel in theirs.items()}
        for k in round_shards:
            if owner[k] == comm.rank:
                tmpdir = _shard_tmpdir(self.staging, k)
                shutil.rmtree(tmpdir, ignore_errors=True)
                os.makedirs(tmpdir)
        # After this every owner has made its shards' directories.
        shares = comm.allgather({k: (np.fromiter(map(len, parcel.records), np.int64, len(parcel.records)),
                                     parcel.filtered, parcel.bad, parcel.dropped) for k, parcel in mine.items()})
        self.clock.lap("exchange")
        placed = {}  # shard -> (file, head, index part, where this rank's records start)
        for k in round_shards:
            lengths = [share[k][0] for share in shares]
            if not sum(map(len, lengths)):
                continue  # every sample filtered or bad: the shard has no file
            layout = self.fmt.record_layout(k, np.concatenate(lengths), **self.writer_options, **fixed[k])
            if layout is None:
                return None
            name, head, index = layout
            start = len(head) + sum(int(lengths[r].sum()) for r in range(comm.rank))
            placed[k] = (os.path.join(_shard_tmpdir(self.staging, k), name), head, index, start)
        # Each rank starts with another shard, so the ranks rarely write one file at once.
        turn = round_shards.index(next((k for k in round_shards if owner[k] == comm.rank), round_shards[0]))
        for k in round_shards[turn:] + round_shards[:turn]:
            if k not in placed:
                continue
            path, head, _index, start = placed[k]
            records = mine[k].records
            if not records and owner[k] != comm.rank:
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
            try:
                if owner[k] == comm.rank:
                    write_pieces(fd, [head], 0)
                write_pieces(fd, cast(list, records), start)
            finally:
                os.close(fd)
            start_writeback(path)
        return [(k, _shard_part(k, sum(len(share[k][0]) for share in shares), sum(share[k][1] for share in shares),
                                [item for share in shares for item in share[k][2]],
                                placed[k][2] if k in placed else None,
                                [gid for share in shares for gid in share[k][3]]))
                for k in round_shards if owner[k] == comm.rank]

    def read_runs(self, gids, shard_of, blocks, portable: bool = False, run_bytes: int = 0) -> Iterator[Piece]:
        """Read the samples ``gids`` a block at a time: one :data:`.spill.Piece` per run of a
        block, or of at most about ``run_bytes`` of it when given.  ``portable`` samples
        can be pickled (:func:`_portable`).  Once a run is read its reader lets go of the
        pages it mapped, so a rank's resident memory does not grow with the sources."""
        edges = np.diff(blocks) != 0
        if run_bytes > 0 and len(gids):
            parts = (np.cumsum(self.sizes[gids]) - 1) // run_bytes
            edges |= np.diff(parts) != 0
        for run in np.split(np.arange(len(gids)), np.flatnonzero(edges) + 1):
            if not len(run):
                continue
            src = int(np.searchsorted(self.first_id, gids[run[0]], side="right")) - 1
            reader = self.readers.get(src)
            bad: list = []
            pairs = self._read(reader, int(self.first_id[src]), gids[run], shard_of[run], bad)
            if portable:
                pairs = [(k, _portable(sample)) for k, sample in pairs]
            reader.drop_pages()
            yield gids[run], shard_of[run], pairs, bad

    def _route(self, rank, pieces, owner, parcels, encoded) -> None:
        """Map and filter the samples of ``pieces`` into the parcels of their shards' owners."""
        for gids, shard_of, pairs, bad in pieces:
            for k, sample in pairs:
                gid, shard = int(gids[k]), int(shard_of[k])
                parcel = parcels[owner[shard]][shard]
                stage = "read"
                try:
                    if owner[shard] != rank and not encoded:
                        sample = _portable(sample)
                    stage = "map"
                    if self.map_fn is not None:
                        sample = self.map_fn(sample)
                    stage = "filter"
                    if sample is None or (self.filter_fn is not None and not self.filter_fn(sample)):
                        parcel.filtered += 1
                        parcel.dropped.append(gid)
                        continue
                except Exception as exc:
                    parcel.bad.append(self._bad(exc, gid, stage, shard))
                    continue
                parcel.samples.append((gid, sample))
            for gid, rec in bad:
                parcels[owner[rec.shard]][rec.shard].bad.append((gid, rec))
            self.progress.advance(len(gids), int(self.sizes[gids].sum()))

    def write_shard(self, shard: int, parcels: list[Parcel], fixed: dict) -> tuple[int, dict]:
        """Write ``shard`` into its temporary directory from the parcels every rank read
        for it (in rank order, so its samples come in the plan's order): their samples, or
        their records made with the writer options ``fixed``.  Returns the shard and its
        part, still without its files (:meth:`publish_shard`)."""
        tmpdir = _shard_tmpdir(self.staging, shard)
        shutil.rmtree(tmpdir, ignore_errors=True)
        os.makedirs(tmpdir)
        bad = [item for parcel in parcels for item in parcel.bad]
        filtered = sum(parcel.filtered for parcel in parcels)
        dropped = [gid for parcel in parcels for gid in parcel.dropped]
        written = 0
        writer = self.fmt.Writer(tmpdir, shard_id=shard, num_shards=self.num_shards,
                                 **self.writer_options, **fixed)
        with writer:
            for parcel in parcels:
                if parcel.samples is None:
                    for record in parcel.records:
                        writer.write_record(record)
                    written += len(parcel.records)
                    continue
                samples = parcel.samples
                for at, (gid, sample) in enumerate(samples):
                    samples[at] = None  # freed as written: the records reuse its memory
                    try:
                        writer.write(sample)
                    except Exception as exc:
                        if not _is_sample_error(exc):
                            raise
                        bad.append(self._bad(exc, gid, _write_stage(exc), shard))
                        continue
                    written += 1
        start_writeback_files(tmpdir)
        return shard, _shard_part(shard, written, filtered, bad, writer.index_part(), dropped)

    def publish_shard(self, shard: int, part: dict) -> None:
        """Make the files :meth:`write_shard` left durable, move them into the staging
        directory and record the shard's part (what ``--resume`` trusts)."""
        part["files"] = publish_files(_shard_tmpdir(self.staging, shard), self.staging)
        digests = getattr(self.fmt, "record_digests", None)
        if digests is not None and part["index"] is not None:
            part["index"] = digests(part["index"], part["files"])
        write_json_atomic(part_path(self.staging, shard), part)


def _shard_part(shard: int, samples: int, filtered: int, bad: list, index: dict | None,
                dropped: list[int]) -> dict:
    """The part of a written shard, still without its files: ``bad`` holds the ``(global
    id, BadSample)`` of its failed samples, reported in the shard's sample order;
    ``dropped`` the global ids its filter or map left out.  The part keeps every id the
    shard did not write, as runs (:func:`hpcio.lineage.record.id_runs`), so the lineage
    record can tell which planned sample each written one is."""
    from ..lineage.record import id_runs

    bad = sorted(bad, key=lambda item: item[0])
    missing = np.asarray(sorted([*dropped, *(gid for gid, _rec in bad)]), dtype=np.int64)
    return {"shard": shard, "samples": samples, "filtered": filtered, "bad": [rec.to_json() for _gid, rec in bad],
            "index": index, "dropped": id_runs(missing).tolist()}


def _shard_tmpdir(staging: str, shard: int) -> str:
    """Where ``shard`` is written before it is published.  The same name on every rank
    (one rank writes a shard per run), so a format that records its own path in a shard
    still writes the same bytes at any rank count."""
    return os.path.join(state_dir(staging), "tmp", f"shard-{shard:06d}")


def _write_stage(exc: BaseException) -> str:
    """The stage a failure to write a sample belongs to.  Lazy samples (JINX) decode
    while they are encoded: a decode error there is still a bad source value."""
    return "read" if isinstance(exc, (DecodeError, CorruptShardError)) else "write"


def _portable(sample):
    """``sample`` as another rank can receive it: a lazy sample (JINX) decoded, memory
    views (zero-copy reads) copied out of the source's map."""
    if not isinstance(sample, dict) or any(isinstance(v, memoryview) for v in sample.values()):
        sample = {name: bytes(v) if isinstance(v, memoryview) else v for name, v in sample.items()}
    return sample


def _is_sample_error(exc: BaseException) -> bool:
    """Errors that belong to one sample's content, not to the machine (``OSError``, some
    of which are HpcioErrors too) or the code."""
    return isinstance(exc, (HpcioError, ValueError, KeyError, TypeError)) and not isinstance(exc, OSError)
