"""The conversion driver: the same call on every rank, one dataset at the end.

1. Rank 0 lists the sources once and broadcasts them; every rank measures a share of
   them (sample counts and sizes) and the shares are exchanged.
2. Rank 0 makes the plan (:mod:`.plan`) and broadcasts it; on ``resume`` the shards
   already complete are found (each rank verifies a share).
3. Each rank writes whole shards, shard ``todo[rank::size]``, in rounds of a bounded
   size (:func:`.plan.write_rounds`).  In a round every rank reads one contiguous share of
   the round's samples (:func:`.plan.read_shares`), so each block of the sources (a
   Parquet row group) is read by one rank once, not by every rank for every shard; it
   maps and filters them, and the samples are exchanged so each rank holds its shards'
   (as the records the shards' writers store, for formats with the encoded-record hook).
   The format's writer puts each shard into a private temporary directory; or, for
   formats with the placed-record hook too, every rank writes its records straight into
   the shard's file there and only their lengths are exchanged.  The files are fsynced
   and renamed into the staging directory, then the shard's index part is written
   (:mod:`.resume`).
4. Rank 0 merges the index parts into the format's dataset index, writes the bad-sample
   report, and renames the staging directory to the destination: the dataset appears
   whole or not at all.

A rank that fails while writing prints the error and aborts every rank (``MPI_Abort``)
rather than leaving the others waiting; errors found while planning are raised on every
rank alike.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from .._core._io import start_writeback
from .._durable import fsync_dir
from .._fileio import write_pieces
from ..tuning import gc_paused
from ..distributed.context import cpus_per_task
from ..errors import CapabilityError, CorruptShardError, DecodeError, HpcioError
from ..registry import get_format, load_libraries
from . import plan as planning
from ._comm import Comm, get_comm
from .faults import BadSample, BadSampleError, bad_sample_from, write_report
from .inputs import ReaderCache, Source, block_starts, expand_sources, measure_source
from .progress import Progress
from .resume import (
    ResumeError,
    array_fingerprint,
    fingerprint,
    load_part,
    part_path,
    publish_files,
    staging_path,
    start_writeback_files,
    state_dir,
    verify_part,
    write_json_atomic,
)

__all__ = ["convert", "resolve_callable", "PhaseClock", "SLOW_SHARD_ENV", "ROUND_BYTES_ENV", "PLACED_RUN_BYTES_ENV"]

# Test aid: seconds to sleep after publishing each shard, so a test can kill -9 a run
# part-way through and check that --resume completes it.
SLOW_SHARD_ENV = "HPCIO_CONVERT_SLOW_SHARD_SECONDS"
# Bytes of samples a rank holds in one round when ``round_bytes`` is not given.
ROUND_BYTES_ENV = "HPCIO_CONVERT_ROUND_BYTES"
# The smallest mean run of records a rank writes into a shard's file for the ranks to
# place their records (:meth:`_ShardWriter._place`) rather than send them to its owner.
PLACED_RUN_BYTES_ENV = "HPCIO_CONVERT_PLACED_RUN_BYTES"
_ABORT_GRACE_SECONDS = 0.5


def resolve_callable(spec: str | Callable | None) -> Callable | None:
    """``"package.module:function"`` (or a callable) as a callable."""
    if spec is None or callable(spec):
        return spec
    module, sep, name = str(spec).partition(":")
    if not sep or not module or not name:
        raise ValueError(f"expected module:function, got {spec!r}")
    obj = importlib.import_module(module)
    for attr in name.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TypeError(f"{spec} is not callable")
    return obj


def _spec_name(spec) -> str | None:
    if spec is None:
        return None
    if callable(spec):
        return f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', repr(spec))}"
    return str(spec)


def _round_bytes(value: int | None) -> int:
    """``round_bytes``, else ``$HPCIO_CONVERT_ROUND_BYTES``, else the default; positive."""
    if value is None:
        return _env_bytes(ROUND_BYTES_ENV, planning.DEFAULT_ROUND_BYTES, minimum=1)
    if value < 1:
        raise planning.PlanError(f"round_bytes (--round-size) must be positive, got {value}")
    return value


def _env_bytes(name: str, default: int, minimum: int) -> int:
    """The number of bytes in ``$name``, else ``default``; at least ``minimum``."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise planning.PlanError(f"${name} must be a number of bytes, got {text!r}") from None
    if value < minimum:
        raise planning.PlanError(f"${name} must be {'positive' if minimum == 1 else f'at least {minimum}'}, "
                                 f"got {value}")
    return value


def _collective(comm: Comm, fn, root_only: bool = True):
    """Run ``fn`` on rank 0 (or every rank) and hand the result, or the same error, to all."""
    if root_only:
        outcome = None
        if comm.rank == 0:
            try:
                outcome = ("ok", fn())
            except Exception as exc:  # re-raised on every rank below
                outcome = ("error", exc)
        outcome = comm.bcast(outcome)
        if outcome[0] == "error":
            raise outcome[1]
        return outcome[1]
    try:
        mine = ("ok", fn())
    except Exception as exc:
        mine = ("error", exc)
    everyone = comm.allgather(mine)
    for status, value in everyone:
        if status == "error":
            raise value
    return [value for _, value in everyone]


def _fail_rank(comm: Comm, exc: BaseException) -> None:
    """Print ``exc`` and end every rank (under MPI); a lone process re-raises."""
    if comm.size == 1:
        raise exc
    print(f"hpcio convert: rank {comm.rank} of {comm.size} failed: {exc}", file=sys.stderr, flush=True)
    # Launchers forward output asynchronously and drop what is in flight when they tear
    # the job down: give the message a moment to reach the log before aborting.
    time.sleep(_ABORT_GRACE_SECONDS)
    comm.abort(1)


def convert(
    src,
    dst,
    to: str,
    *,
    from_format: str | None = None,
    compression: str | None = None,
    shard_size: int | None = None,
    num_shards: int | None = None,
    ngpus: int = 1,
    nworkers: int = 1,
    shards_multiple_of: int | None = None,
    fields: list[str] | None = None,
    map: str | Callable | None = None,
    filter: str | Callable | None = None,
    skip: int = 0,
    take: int | None = None,
    selection: np.ndarray | None = None,
    order: str = "seeded",
    skip_bad: bool = False,
    resume: bool = False,
    seed: int = 0,
    round_bytes: int | None = None,
    writer_options: Mapping | None = None,
    reader_options: Mapping | None = None,
    progress: bool = True,
    comm=None,
) -> dict:
    """Convert the datasets ``src`` into the sharded dataset ``dst`` in format ``to``.

    Every MPI rank calls this with the same arguments (under ``mpiexec``/``srun`` the
    ranks share the work; without a launcher one process does it all).  The output is
    byte-identical whatever the number of ranks.

    Parameters
    ----------
    src
        A path or list of paths: files or directories of a readable format.
    dst
        The output directory; it must not exist (or be empty).
    to
        Output format name (``mds``, ``jinx``, ``webdataset``, ``zarr``, ``hdf5``).
    from_format
        Read every source as this format instead of sniffing.
    compression
        Passed to the output writer (e.g. ``sample::zstd`` for MDS).
    shard_size, num_shards
        Target bytes per shard, or an exact shard count.
    ngpus, nworkers, shards_multiple_of
        The shard count is a multiple of ``shards_multiple_of`` if given, else of
        ``ngpus * nworkers``.
    fields
        Keep only these fields.
    map, filter
        ``module:function`` (or callables): ``map(sample)`` returns the sample to write
        (or None to drop it); ``filter(sample)`` keeps the sample when true.
    skip, take, selection
        Convert samples ``skip .. skip+take`` of the sources in order, or exactly the
        global sample ids ``selection``.
    order
        ``"seeded"`` (samples spread over shards by ``seed``) or ``"source"``.
    skip_bad
        Leave out samples that fail, listing them in ``<dst>.bad-samples.jsonl``.
    resume
        Continue an interrupted run: only missing or damaged shards are written.
    seed
        Seed of the sample-to-shard assignment.
    round_bytes
        Bytes of samples each rank reads, exchanges and holds in one round (default
        ``$HPCIO_CONVERT_ROUND_BYTES``, else 512 MiB).  Each block of the sources is read
        once per round, so larger rounds read less; smaller ones use less memory.
    writer_options
        Further keyword arguments for the output format's writer.
    reader_options
        Keyword arguments for the sources' readers (e.g. which JSONL fields hold base64).
    progress
        Show progress on rank 0 (a bar on a terminal, plain lines otherwise).
    comm
        An mpi4py communicator to use instead of ``COMM_WORLD``.

    Returns
    -------
    dict
        The summary (same on every rank): shard and sample counts, bad samples,
        bytes, ranks, and seconds from the moment every rank had the sources listed and
        their formats' libraries imported; ``phases``, each rank's seconds in each
        phase of that time (:class:`PhaseClock`).
    """
    comm = get_comm(comm)
    fmt = get_format(to)
    if not hasattr(fmt, "merge_index"):
        raise CapabilityError(
            f"format {fmt.NAME!r} does not implement the sharded-writing hook "
            "(Writer(shard_id=...), merge_index) that parallel conversion needs"
        )
    dst = os.path.abspath(os.fspath(dst))
    staging = staging_path(dst)
    multiple = shards_multiple_of if shards_multiple_of is not None else ngpus * nworkers
    round_bytes = _round_bytes(round_bytes)
    placed_run_bytes = _env_bytes(PLACED_RUN_BYTES_ENV, planning.DEFAULT_PLACED_RUN_BYTES, minimum=0)
    map_fn = resolve_callable(map)
    filter_fn = resolve_callable(filter)
    opts = dict(writer_options or {})
    if compression is not None:
        opts["compression"] = compression

    # --- 1. sources, listed once -------------------------------------------------------
    def list_sources():
        if os.path.exists(dst) and not (os.path.isdir(dst) and not os.listdir(dst)):
            raise ResumeError("the destination already exists; remove it or choose another", path=dst)
        if os.path.exists(staging) and not resume:
            raise ResumeError(
                "an interrupted conversion left this partial output; pass --resume to "
                "finish it, or delete it to start over",
                path=staging,
            )
        return expand_sources(src, from_format)

    sources: list[Source] = _collective(comm, list_sources)
    # The formats' libraries are imported on every rank before the clock starts (pyarrow:
    # 35-50 ms): like the interpreter's start-up they are the process's, not the job's.
    # The clock starts when every rank is past that point: launchers start ranks at
    # different times, and the job's own time should not count another rank's start-up.
    _collective(comm, lambda: load_libraries([fmt.NAME, *(s.format for s in sources)]), root_only=False)
    restore_pool = _arrow_memory_pool()
    started = time.monotonic()
    clock = PhaseClock(started)
    mine = list(range(comm.rank, len(sources), comm.size))
    # The readers opened to measure stay open for writing (opening may scan a file).
    readers = ReaderCache(sources, reader_options=reader_options)

    def closing_readers_on_error(call):
        try:
            return call()
        except BaseException:
            readers.close()
            restore_pool()
            raise

    def measure(i):
        reader = readers.get(i)
        sizes = measure_source(sources[i], reader=reader)
        return sizes, block_starts(reader, sizes)

    def measure_share():
        return {i: measure(i) for i in mine}

    measured = closing_readers_on_error(lambda: _collective(comm, measure_share, root_only=False))
    by_source: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # source -> (sizes, block starts)
    for part in measured:
        by_source.update(part)
    clock.lap("measure")
    counts = np.array([len(by_source[i][0]) for i in range(len(sources))], dtype=np.int64)
    first_id = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    # The global id of the first sample of every block of every source, ascending.
    block_first = np.concatenate(
        [by_source[i][1] + first_id[i] for i in range(len(sources))] or [np.zeros(0, np.int64)]
    ).astype(np.int64)

    # --- 2. plan, made once ------------------------------------------------------------
    def make_plan():
        sizes = (np.concatenate([by_source[i][0] for i in range(len(sources))])
                 if sources else np.zeros(0, np.int64))
        sel = selection
        if sel is None:
            stop = len(sizes) if take is None else min(len(sizes), skip + take)
            sel = np.arange(min(skip, len(sizes)), stop, dtype=np.int64)
        sel = np.asarray(sel, dtype=np.int64)
        if len(sel) == 0:
            raise planning.PlanError("no samples selected to convert")
        total = int(sizes[sel].sum())
        count = planning.shard_count(total, len(sel), shard_size=shard_size,
                                     num_shards=num_shards, multiple_of=multiple)
        plan = planning.assign_shards(sizes, count, seed, selection=sel, order=order)
        identity = {
            "sources": [s.to_json() for s in sources],
            "to": fmt.NAME,
            "writer_options": {k: repr(v) for k, v in sorted(opts.items())},
            "reader_options": {k: repr(v) for k, v in sorted((reader_options or {}).items())},
            "num_shards": count,
            "seed": seed,
            "order": order,
            "selection": array_fingerprint(sel),
            "fields": fields,
            "map": _spec_name(map),
            "filter": _spec_name(filter),
        }
        digest = fingerprint(identity)
        plan_file = os.path.join(state_dir(staging), "plan.json")
        if resume and os.path.exists(plan_file):
            with open(plan_file, encoding="utf-8") as f:
                saved = json.load(f)
            if saved.get("fingerprint") != digest:
                raise ResumeError(
                    "the partial output was made from other inputs or options; delete it "
                    "or convert with the original ones",
                    path=staging,
                )
        else:
            if os.path.exists(staging):
                shutil.rmtree(staging)
            os.makedirs(os.path.join(state_dir(staging), "parts"))
            write_json_atomic(plan_file, {"fingerprint": digest, "identity": identity})
        shutil.rmtree(os.path.join(state_dir(staging), "tmp"), ignore_errors=True)
        os.makedirs(os.path.join(state_dir(staging), "tmp"))
        return plan, sizes

    plan, sizes = closing_readers_on_error(lambda: _collective(comm, make_plan))
    shards = plan.num_shards

    # --- 3. which shards are left to write ----------------------------------------------
    def complete_share():
        done = []
        if resume:
            for k in range(comm.rank, shards, comm.size):
                part = load_part(staging, k)
                if part is not None and part.get("shard") == k and verify_part(staging, part):
                    done.append(k)
        return done

    shares = closing_readers_on_error(lambda: _collective(comm, complete_share, root_only=False))
    kept = sorted(k for share in shares for k in share)
    todo = sorted(set(range(shards)) - set(kept))
    rounds = planning.write_rounds(todo, plan.shard_bytes, comm.size, round_bytes)

    total_samples = int(sum(len(plan.shard(k)) for k in todo))
    total_bytes = int(sum(int(plan.shard_bytes[k]) for k in todo))
    bar = Progress(comm, total_samples, total_bytes, enabled=progress)
    writer = _ShardWriter(
        fmt=fmt, staging=staging, sources=sources, first_id=first_id, block_first=block_first,
        sizes=sizes, fields=fields, map_fn=map_fn, filter_fn=filter_fn, skip_bad=skip_bad,
        writer_options=opts, num_shards=shards, progress=bar, readers=readers, clock=clock,
        placed_run_bytes=placed_run_bytes,
    )
    restore_cpus = _share_node_cpus(comm, decodes_parquet=any(s.format == "parquet" for s in sources))
    clock.lap("plan")
    try:
        for round_shards in rounds:
            writer.write_round(comm, round_shards, plan)
        writer.close()
        bar.finish()
    except BaseException as exc:  # noqa: BLE001 -- every failure must end all ranks
        writer.close()
        _fail_rank(comm, exc)
    finally:
        restore_cpus()
        restore_pool()

    # --- 4. merge and publish, on rank 0 ------------------------------------------------
    comm.barrier()
    clock.lap("wait")
    summary = None
    if comm.rank == 0:
        try:
            summary = _publish(fmt, staging, dst, shards, opts, plan)
        except BaseException as exc:  # noqa: BLE001
            _fail_rank(comm, exc)
        clock.lap("merge")
    # Gathered after the merge, so rank 0's own time includes it; the other ranks' clocks
    # stopped when they reached this point.
    phases = comm.gather(clock.seconds)
    if comm.rank == 0:
        summary.update(
            phases={name: [round(p[name], 4) for p in phases] for name in PhaseClock.PHASES},
            shards_written=len(todo),
            shards_kept=len(kept),
            ranks=comm.size,
            seconds=round(time.monotonic() - started, 3),
            imbalance=round(plan.imbalance(), 5),
        )
    return comm.bcast(summary)


class PhaseClock:
    """Wall seconds one rank spends in each phase of a conversion, from the job's start.

    ``measure``: sizing the sources; ``plan``: the plan and the shards left to write;
    ``read``: reading, mapping and filtering this rank's share; ``encode``: making the
    records of what it read, on more than one rank; ``exchange``: sending and receiving
    them (or only their lengths, where each rank places its records); ``write``: writing
    this rank's shards (or its records of every shard); ``publish``: making them durable
    and recording them;
    ``wait``: waiting for the slowest rank; ``merge``: the dataset index and the rename
    (rank 0).  Collective steps count their wait in their own phase (``encode`` agrees on
    the writers' options, ``exchange`` waits for every rank's parcels).
    """

    PHASES = ("measure", "plan", "read", "encode", "exchange", "write", "wait", "publish", "merge")
    # Half a millisecond, below what the printed figures resolve: shorter phases are left
    # out of them, and ranks closer than this are shown as one figure.
    SHOWN = 5e-4

    def __init__(self, start: float):
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self._at = start

    def lap(self, phase: str) -> None:
        """Count the time since the last lap as ``phase``."""
        now = time.monotonic()
        self.seconds[phase] += now - self._at
        self._at = now


def cpu_share(task_cpus: int, shared_cpus: int, sharing: int) -> int:
    """Threads for one of ``sharing`` processes that may all run on the same
    ``shared_cpus`` CPUs, at most ``task_cpus`` (what the task was given), at least 1.

    >>> cpu_share(2, 2, 2), cpu_share(8, 64, 8), cpu_share(4, 4, 1), cpu_share(4, 4, 8)
    (1, 8, 4, 1)
    """
    return max(1, min(task_cpus, shared_cpus // max(1, sharing)))


def _share_node_cpus(comm: Comm, decodes_parquet: bool) -> Callable[[], None]:
    """Give each rank its own share of the CPUs it would otherwise share with other ranks
    on its node, for the job; returns the function that gives them back.  Collective
    (every rank calls it).

    Ranks a launcher left on the same CPUs (``mpiexec`` without ``-bind-to``) are bound
    each to a slice of them, as ``-bind-to core`` or ``srun --cpu-bind=cores`` would have
    done: unbound, the two ranks of the text bench conversion read, encoded and exchanged
    slower (job 0.17-0.23 s against 0.16 s bound, medians of 9-11 alternating runs).
    Parquet decoding is capped to the same share: every rank would otherwise decode with
    as many threads as it has CPUs (vlm: 0.55-0.61 s against 0.35-0.38 s with one thread
    each).  Ranks a launcher binds to CPUs of their own share nothing and keep theirs.
    Afterwards every thread gets back the CPUs it had.
    """
    import socket

    if comm.size == 1:
        return lambda: None
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    me = (socket.gethostname(), cpus)
    everyone = comm.allgather(me)
    sharing = everyone.count(me)
    if sharing == 1:
        return lambda: None
    share = cpu_share(cpus_per_task(), len(cpus), sharing)
    undo = []
    if sharing * share <= len(cpus):  # else too few CPUs for a slice each: left as they are
        local = everyone[: comm.rank].count(me)
        affinities = _bind_threads(cpus[local * share : (local + 1) * share])
        undo.append(lambda: _restore_threads(affinities, cpus))
    if decodes_parquet:
        import pyarrow as pa

        before = pa.cpu_count()
        if share < before:
            pa.set_cpu_count(share)
            undo.append(lambda: pa.set_cpu_count(before))
    return lambda: [step() for step in reversed(undo)]


def _arrow_memory_pool() -> Callable[[], None]:
    """Make jemalloc Arrow's default memory pool for the job, if the job's formats
    imported pyarrow (:func:`hpcio.formats.parquet.use_jemalloc`); returns the function
    that puts the previous one back.  The whole job: its mapping and writing too, not
    only the Parquet reads (one rank, vlm: the read phase 10-15 % longer with 4 KB pages
    where mimalloc's were huge, the two-rank jobs 10-40 % shorter)."""
    if "pyarrow" not in sys.modules:
        return lambda: None
    from ..tuning import switch_arrow_pool

    return switch_arrow_pool()


def _threads() -> list[int]:
    """The thread ids of this process (0, the calling thread, without procfs)."""
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def _bind_threads(cpus) -> dict:
    """Set the CPU affinity of every thread of this process to ``cpus``
    (``sched_setaffinity(0)`` sets only the calling thread's, and thread pools, pyarrow's,
    may already run); returns each thread's affinity before."""
    before = {}
    for tid in _threads():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended meanwhile
            pass
    return before


def _restore_threads(before: dict, default) -> None:
    """Give every thread back its affinity in ``before``; threads started since get
    ``default``."""
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, before.get(tid, default))
        except OSError:  # the thread ended meanwhile
            pass


class _ShardWriter:
    """Writes shards on one rank, a round at a time: read this rank's share of the round's
    samples, map/filter them, exchange them, write this rank's shards and publish them."""

    def __init__(self, *, fmt, staging, sources, first_id, block_first, sizes, fields, map_fn,
                 filter_fn, skip_bad, writer_options, num_shards, progress, readers, clock, placed_run_bytes):
        self.fmt = fmt
        self.staging = staging
        self.sources = sources
        self.first_id = first_id
        self.block_first = block_first
        self.sizes = sizes
        self.fields = fields
        self.map_fn = map_fn
        self.filter_fn = filter_fn
        self.skip_bad = skip_bad
        self.writer_options = writer_options
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

    def close(self):
        self.readers.close()

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

    def write_round(self, comm: Comm, round_shards: list[int], plan) -> None:
        """Collective: every rank calls it with the same round."""
        lengths = [len(plan.shard(k)) for k in round_shards]
        gids = np.concatenate([plan.shard(k) for k in round_shards])
        shard_of = np.repeat(np.asarray(round_shards, dtype=np.int64), lengths)
        order = np.argsort(gids, kind="stable")
        gids, shard_of = gids[order], shard_of[order]
        # Rounds start at a multiple of comm.size, so a shard's owner is its position here.
        owner = {k: t % comm.size for t, k in enumerate(round_shards)}
        blocks = np.searchsorted(self.block_first, gids, side="right") - 1
        cuts = planning.read_shares(blocks, self.sizes[gids], comm.size)
        lo, hi = int(cuts[comm.rank]), int(cuts[comm.rank + 1])
        parcels = [{k: {"samples": [], "filtered": 0, "bad": []} for k in round_shards if owner[k] == r}
                   for r in range(comm.size)]
        encoded = self.encodes and comm.size > 1
        run_bytes = sum(int(plan.shard_bytes[k]) for k in round_shards) / (comm.size * len(round_shards))
        places = encoded and self.places and run_bytes >= self.placed_run_bytes
        # A round's samples all stay alive until written: collections meanwhile free
        # nothing (a quarter of a text round's reading time).
        with gc_paused():
            self._read_share(comm.rank, gids[lo:hi], shard_of[lo:hi], blocks[lo:hi], owner, parcels, encoded)
            self.clock.lap("read")
            fixed = {}
            if encoded:
                fixed = self._encode(comm, parcels)
                self.clock.lap("encode")
            # Every rank writes its shards before any rank fsyncs: on a local file system
            # a write that waits behind another process's fsync for the journal took 6-10
            # times as long.
            written = self._place(comm, round_shards, owner, parcels, fixed) if places else None
            if written is None:
                received = _exchange(comm, parcels, encoded)
                self.clock.lap("exchange")
                written = [self.write_shard(k, [parcel[k] for parcel in received], fixed.get(k, {}))
                           for k in round_shards if owner[k] == comm.rank]
        self.clock.lap("write")
        comm.barrier()
        self.clock.lap("wait")
        for shard, part in written:
            self.publish_shard(shard, part)
            if self.slow > 0:
                time.sleep(self.slow)
        self.clock.lap("publish")

    def _encode(self, comm: Comm, parcels: list[dict]) -> dict:
        """Turn every parcel's samples into ``records`` as the shards' writers would
        store them; returns ``{shard: writer options}`` fixed from each shard's first
        sample that fixes them, the same on every rank.  Collective."""
        first = {}  # shard -> (gid, options) of this rank's first sample that fixes them
        failed = {}  # gid -> the error of a sample that could not fix them
        for parcel in parcels:
            for k, part in parcel.items():
                for gid, sample in part["samples"]:
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
        for parcel in parcels:
            for k, part in parcel.items():
                first_gid, options = chosen.get(k, (None, {}))
                encoder = None if first_gid is None else self.fmt.record_encoder(
                    _shard_tmpdir(self.staging, k), **self.writer_options, **options)
                records = []
                samples = part["samples"]
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
                        part["bad"].append(self._bad(exc, gid, _write_stage(exc), k))
                part.update(samples=None, records=records)
        return {k: options for k, (_gid, options) in chosen.items()}

    def _place(self, comm: Comm, round_shards: list[int], owner: dict, parcels: list[dict],
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
        mine = {k: part for parcel in parcels for k, part in parcel.items()}
        for k in round_shards:
            if owner[k] == comm.rank:
                tmpdir = _shard_tmpdir(self.staging, k)
                shutil.rmtree(tmpdir, ignore_errors=True)
                os.makedirs(tmpdir)
        # After this every owner has made its shards' directories.
        shares = comm.allgather({k: (np.fromiter(map(len, part["records"]), np.int64, len(part["records"])),
                                     part["filtered"], part["bad"]) for k, part in mine.items()})
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
            records = mine[k]["records"]
            if not records and owner[k] != comm.rank:
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
            try:
                if owner[k] == comm.rank:
                    write_pieces(fd, [head], 0)
                write_pieces(fd, records, start)
            finally:
                os.close(fd)
            start_writeback(path)
        return [(k, _shard_part(k, sum(len(share[k][0]) for share in shares), sum(share[k][1] for share in shares),
                                [item for share in shares for item in share[k][2]],
                                placed[k][2] if k in placed else None))
                for k in round_shards if owner[k] == comm.rank]

    def _read_share(self, rank, gids, shard_of, blocks, owner, parcels, encoded) -> None:
        """Read, map and filter this rank's samples into the parcels of their shards' owners."""
        runs = np.flatnonzero(np.diff(blocks)) + 1
        for run in np.split(np.arange(len(gids)), runs):
            if not len(run):
                continue
            src = int(np.searchsorted(self.first_id, gids[run[0]], side="right")) - 1
            base = int(self.first_id[src])
            bad: list = []
            for k, sample in self._read(self.readers.get(src), base, gids[run], shard_of[run], bad):
                gid, shard = int(gids[run[k]]), int(shard_of[run[k]])
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
                        parcel["filtered"] += 1
                        continue
                except Exception as exc:
                    parcel["bad"].append(self._bad(exc, gid, stage, shard))
                    continue
                parcel["samples"].append((gid, sample))
            for gid, rec in bad:
                parcels[owner[rec.shard]][rec.shard]["bad"].append((gid, rec))
            self.progress.advance(len(run), int(self.sizes[gids[run]].sum()))

    def write_shard(self, shard: int, parcels: list[dict], fixed: dict) -> tuple[int, dict]:
        """Write ``shard`` into its temporary directory from the parcels every rank read
        for it (in rank order, so its samples come in the plan's order): their samples, or
        their records made with the writer options ``fixed``.  Returns the shard and its
        part, still without its files (:meth:`publish_shard`)."""
        tmpdir = _shard_tmpdir(self.staging, shard)
        shutil.rmtree(tmpdir, ignore_errors=True)
        os.makedirs(tmpdir)
        bad = [item for parcel in parcels for item in parcel["bad"]]
        filtered = sum(parcel["filtered"] for parcel in parcels)
        written = 0
        writer = self.fmt.Writer(tmpdir, shard_id=shard, num_shards=self.num_shards,
                                 **self.writer_options, **fixed)
        with writer:
            for parcel in parcels:
                if parcel["samples"] is None:
                    for record in parcel["records"]:
                        writer.write_record(record)
                    written += len(parcel["records"])
                    continue
                samples = parcel["samples"]
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
        return shard, _shard_part(shard, written, filtered, bad, writer.index_part())

    def publish_shard(self, shard: int, part: dict) -> None:
        """Make the files :meth:`write_shard` left durable, move them into the staging
        directory and record the shard's part (what ``--resume`` trusts)."""
        part["files"] = publish_files(_shard_tmpdir(self.staging, shard), self.staging)
        write_json_atomic(part_path(self.staging, shard), part)


def _shard_part(shard: int, samples: int, filtered: int, bad: list, index: dict | None) -> dict:
    """The part of a written shard, still without its files: ``bad`` holds the ``(global
    id, BadSample)`` of its failed samples, reported in the shard's sample order."""
    bad = sorted(bad, key=lambda item: item[0])
    return {"shard": shard, "samples": samples, "filtered": filtered, "bad": [rec.to_json() for _gid, rec in bad],
            "index": index}


def _shard_tmpdir(staging: str, shard: int) -> str:
    """Where ``shard`` is written before it is published.  The same name on every rank
    (one rank writes a shard per run), so a format that records its own path in a shard
    still writes the same bytes at any rank count."""
    return os.path.join(state_dir(staging), "tmp", f"shard-{shard:06d}")


def _write_stage(exc: BaseException) -> str:
    """The stage a failure to write a sample belongs to.  Lazy samples (JINX) decode
    while they are encoded: a decode error there is still a bad source value."""
    return "read" if isinstance(exc, (DecodeError, CorruptShardError)) else "write"


def _exchange(comm: Comm, parcels: list[dict], encoded: bool) -> list[dict]:
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
        if r == comm.rank:
            continue
        view, at = data[r], 0
        for part in parcel.values():
            records = []
            for length in part["records"].tolist():
                records.append(view[at : at + length])
                at += length
            part["records"] = records
    received[comm.rank] = mine
    return received


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


def _publish(fmt, staging: str, dst: str, shards: int, opts: dict, plan) -> dict:
    parts = []
    for k in range(shards):
        part = load_part(staging, k)
        if part is None:
            raise ResumeError(f"shard {k} has no index part after writing", path=staging)
        parts.append(part)
    fmt.merge_index(staging, [p["index"] for p in parts], **opts)
    bad = [rec for p in parts for rec in p["bad"]]
    report = write_report(dst, bad)
    shutil.rmtree(state_dir(staging))
    fsync_dir(staging)
    if os.path.isdir(dst):
        os.rmdir(dst)  # an empty directory made by the user for the output
    os.rename(staging, dst)
    fsync_dir(os.path.dirname(dst))
    return {
        "output": dst,
        "format": fmt.NAME,
        "num_shards": shards,
        "samples_planned": plan.num_samples,
        "samples_written": sum(p["samples"] for p in parts),
        "filtered": sum(p["filtered"] for p in parts),
        "bad_samples": len(bad),
        "report": report,
        "bytes_written": sum(f["bytes"] for p in parts for f in p["files"].values()),
    }
