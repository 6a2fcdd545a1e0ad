"""The conversion driver: the same call on every rank, one dataset at the end.

1. Rank 0 lists the sources once and broadcasts them; every rank measures a share of
   them (sample counts and sizes) and the shares are exchanged.
2. Rank 0 makes the plan (:mod:`.plan`) and broadcasts it; on ``resume`` the shards
   already complete are found (each rank verifies a share).
3. Each rank writes whole shards, shard ``todo[rank::size]``, in rounds of a bounded
   size (:func:`.plan.write_rounds`).  In a round every rank reads one contiguous share of
   the round's samples (:func:`.plan.read_shares`), so each block of the sources (a
   Parquet row group) is read by one rank once, not by every rank for every shard; in
   a seeded plan of several rounds the shares of every round are read once, ahead of
   the rounds, into a file per round (:mod:`.spill`).  The rank maps and filters them,
   and they reach their shards' files by one of three routes (:class:`.writer.WriteRoute`):
   the samples, or the records the shards' writers store, are exchanged so each rank
   holds its shards', whose format writer puts each shard into a private temporary
   directory; or every rank writes its records straight into the shard's file there and
   only their lengths are exchanged.  The files are fsynced and renamed into the staging
   directory, then the shard's index part is written (:mod:`.resume`).
4. Rank 0 merges the index parts into the format's dataset index, writes the bad-sample
   report and the lineage record, and renames the staging directory to the destination
   (:mod:`.publish`): the dataset appears whole or not at all.

The options come as one :class:`.spec.ConvertOptions`, checked against the output format
before any source is read.

A rank that fails while writing prints the error and aborts every rank (``MPI_Abort``)
rather than leaving the others waiting; errors found while planning are raised on every
rank alike.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from types import ModuleType

import numpy as np

from ..distributed.comm import Comm, get_comm
from ..errors import HpcioError, PlanError, ResumeError, TargetFormatError, UnknownFormatError
from ..registry import available_formats, get_format
from ..sources import ReaderCache, Source, expand_sources, load_libraries
from ..sources.fields import warn_binary_text
from ..sources.inputs import check_options_taken, size_windows
from ..units import format_bytes
from . import jobstate, plan as planning
from .affinity import share_node_cpus
from .clock import PhaseClock, peak_rss_bytes
from .lock import OutputLock
from .progress import Progress
from .publish import PLAN_VERSION, digest_share, lineage_record, publish_dataset
from .resume import (
    array_fingerprint,
    fingerprint,
    load_part,
    plan_file,
    scan_dir,
    staging_path,
    state_dir,
    verify_part,
    write_json_atomic,
)
from .sizes import Measured, SampleSizes
from .spec import PLACED_RUN_BYTES_ENV, ROUND_BYTES_ENV, ConvertOptions, placed_run_bytes, resolve_callable, spec_name
from .writer import SLOW_SHARD_ENV, ShardWriter

__all__ = ["run_conversion", "PhaseClock", "SLOW_SHARD_ENV", "ROUND_BYTES_ENV", "PLACED_RUN_BYTES_ENV"]

_ABORT_GRACE_SECONDS = 0.5


def conversion_targets() -> list[str]:
    """The registered formats hpcio convert writes: those with the sharded-writing hook."""
    out = []
    for name in available_formats():
        try:
            if hasattr(get_format(name), "merge_index"):
                out.append(name)
        except (HpcioError, ImportError):
            continue  # a format that cannot load writes nothing
    return out


def _sharded_format(name: str) -> ModuleType:
    """The format ``name``, which must have the hooks parallel conversion needs."""
    try:
        fmt = get_format(name)
    except UnknownFormatError:
        fmt = None
    if fmt is None or not hasattr(fmt, "merge_index"):
        what = "is not a known format" if fmt is None else "is a format hpcio convert reads but cannot write"
        raise TargetFormatError(f"output format {name!r} (--to, or to= in Python) {what}; "
                                f"choose one of {', '.join(conversion_targets())}")
    return fmt


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


#: What an interrupted conversion says to do: its partial output is kept and resumes.
RESUME_HINT = "the partial output is kept: run the same command with --resume to finish it"


def _fail_rank(comm: Comm, exc: BaseException) -> None:
    """Print ``exc`` and end every rank (under MPI); a lone process re-raises."""
    if comm.size == 1:
        raise exc
    if isinstance(exc, KeyboardInterrupt):
        what = f"interrupted (Ctrl-C); {RESUME_HINT}"
    else:
        what = "failed: " + (" ".join(str(exc).split()) or type(exc).__name__)
    print(f"hpcio convert: rank {comm.rank} of {comm.size} {what}", file=sys.stderr, flush=True)
    # Launchers forward output asynchronously and drop what is in flight when they tear
    # the job down: give the message a moment to reach the log before aborting.
    time.sleep(_ABORT_GRACE_SECONDS)
    comm.abort(1)


def _arrow_memory_pool() -> Callable[[], None]:
    """Make jemalloc Arrow's default memory pool for the job, if the job's formats
    imported pyarrow (:func:`hpcio.tuning.switch_arrow_pool`, when the user opted in); returns the function
    that puts the previous one back.  The whole job: its mapping and writing allocate
    from the pool too, not only the Parquet reads."""
    if "pyarrow" not in sys.modules:
        return lambda: None
    from ..tuning import switch_arrow_pool

    return switch_arrow_pool()


def run_conversion(src, dst, to: str, options: ConvertOptions, comm=None) -> dict:
    """Convert the datasets ``src`` into the sharded dataset ``dst`` in format ``to`` as
    ``options`` say (:func:`hpcio.convert`, which builds them from keyword arguments).

    ``comm``: an mpi4py communicator or :class:`~hpcio.distributed.comm.Comm`, else the
    group :func:`~hpcio.distributed.comm.get_comm` finds.  Every rank calls it with the
    same arguments; the options are checked, and the functions and sizes they name
    looked up, before any source is read.
    """
    comm = get_comm(comm)
    fmt = _sharded_format(to)
    options.check_against(fmt)
    job = _Job(
        comm=comm, fmt=fmt, src=src, dst=os.path.abspath(os.fspath(dst)), options=options,
        round_bytes=options.resolved_round_bytes(), placed_run_bytes=placed_run_bytes(),
        map_fn=resolve_callable(options.map), filter_fn=resolve_callable(options.filter),
    )
    return job.run()


@dataclasses.dataclass
class _Job:
    """One conversion as one rank runs it: its options, what they name looked up, and
    its phases, in order."""

    comm: Comm
    fmt: ModuleType
    src: object
    dst: str
    options: ConvertOptions
    round_bytes: int  # the options' or the environment's
    placed_run_bytes: int  # the environment's (:class:`.writer.WriteRoute`)
    map_fn: Callable | None
    filter_fn: Callable | None

    @property
    def staging(self) -> str:
        return staging_path(self.dst)

    def run(self) -> dict:
        """Every phase, in order, with the output's lock held on rank 0 (:mod:`.lock`);
        returns the summary (the same on every rank)."""
        lock = OutputLock(self.dst)
        try:
            _collective(self.comm, lock.acquire)
            return self.run_locked()
        finally:
            lock.release()

    def run_locked(self) -> dict:
        comm = self.comm
        opts = self.options
        if opts.resume and (finished := jobstate.finished_output(
                comm, self.dst, self.staging, self.fmt.NAME)) is not None:
            return finished  # a requeue of a job that had finished: nothing to write
        sources: list[Source] = _collective(comm, self.list_sources)
        # The formats' libraries are imported on every rank before the clock starts: like
        # the interpreter's start-up they are the process's, not the job's.  The clock
        # starts when every rank is past that point: launchers start ranks at different
        # times, and the job's own time should not count another rank's start-up.
        _collective(comm, lambda: load_libraries([self.fmt.NAME, *(s.format for s in sources)]), root_only=False)
        restore_pool = _arrow_memory_pool()
        started = time.monotonic()
        clock = PhaseClock(started)
        # The readers opened to measure stay open for writing (opening may scan a file).
        readers = ReaderCache(sources, reader_options=opts.reader_options,
                              index_dir=os.path.join(scan_dir(self.staging), "indexes"))
        measured = None
        try:
            measured = self.measure(sources, readers)
            clock.lap("measure")
            plan = _collective(comm, lambda: self.make_plan(sources, measured))
            kept = self.complete_shards(plan.num_shards)
        except BaseException:
            readers.close()
            if measured is not None:
                measured.sizes.close()
            restore_pool()
            if comm.rank == 0 and not os.path.exists(plan_file(self.staging)):
                shutil.rmtree(self.staging, ignore_errors=True)  # nothing in it to resume
            raise
        todo = sorted(set(range(plan.num_shards)) - set(kept))
        bar = Progress(comm, int(np.diff(plan.bounds)[todo].sum()),
                       int(plan.shard_bytes[todo].sum()), enabled=opts.progress)
        writer = ShardWriter(
            fmt=self.fmt, staging=self.staging, options=opts, map_fn=self.map_fn, filter_fn=self.filter_fn,
            placed_run_bytes=self.placed_run_bytes, sources=sources, measured=measured,
            num_shards=plan.num_shards, progress=bar, readers=readers, clock=clock,
        )
        try:
            self.write(writer, bar, plan, todo, decodes_parquet=any(s.format == "parquet" for s in sources))
        finally:
            restore_pool()
        summary = self.publish(clock, plan, sources, measured.first_id)
        if comm.rank == 0:
            summary.update(shards_written=len(todo), shards_kept=len(kept), ranks=comm.size,
                           seconds=round(time.monotonic() - started, 3), imbalance=round(plan.imbalance(), 5))
        return comm.bcast(summary)

    def list_sources(self) -> list[Source]:
        """The sources, once the destination is known to be free (rank 0), and an empty
        directory in the staging directory for what measuring them writes."""
        dst, staging = self.dst, self.staging
        if os.path.exists(dst) and not (os.path.isdir(dst) and not os.listdir(dst)):
            raise ResumeError("the destination already exists; remove it or choose another", path=dst)
        if os.path.exists(staging) and not self.options.resume:
            if jobstate.recorded_failure(staging) is None:
                raise ResumeError(
                    "an interrupted conversion left this partial output; run the same command with "
                    "--resume to finish it, or delete it to start over",
                    path=staging,
                )
            warnings.warn(f"starting over: removed the partial output that a failed conversion left "
                          f"({staging})", stacklevel=2)
            shutil.rmtree(staging)
        sources = expand_sources(self.src, self.options.from_format)
        check_options_taken(sources, self.options.reader_options)
        scan = scan_dir(staging)
        shutil.rmtree(scan, ignore_errors=True)
        os.makedirs(scan)
        return sources

    def measure(self, sources: list[Source], readers: ReaderCache) -> Measured:
        """Every rank counts and sizes a share of the sources, writing the sizes into one
        file that every rank then maps (:mod:`.sizes`); the readers of JSON Lines keep
        their line indexes beside it, so that no other rank reads a source to build one."""
        comm = self.comm
        path = os.path.join(scan_dir(self.staging), "sizes.i64")

        def count_share():
            return {i: len(readers.get(i)) for i in range(comm.rank, len(sources), comm.size)}

        counts = {i: n for share in _collective(comm, count_share, root_only=False) for i, n in share.items()}
        first_id = np.concatenate([[0], np.cumsum([counts[i] for i in range(len(sources))])]).astype(np.int64)
        _collective(comm, lambda: SampleSizes.create(path, int(first_id[-1])))

        def measure_share():
            blocks = {}
            for i in range(comm.rank, len(sources), comm.size):
                blocks[i] = self.measure_source(sources[i], readers.get(i), path, int(first_id[i]))
            return blocks

        blocks = {i: b for share in _collective(comm, measure_share, root_only=False) for i, b in share.items()}
        block_first = np.concatenate(
            [blocks[i] + first_id[i] for i in range(len(sources))] or [np.zeros(0, np.int64)]
        ).astype(np.int64)
        return Measured(SampleSizes(path, int(first_id[-1])), first_id, block_first)

    @staticmethod
    def measure_source(source: Source, reader, path: str, first: int) -> np.ndarray:
        """Write the sizes of ``source``'s samples (global ids from ``first``) into the
        sizes file a window at a time; returns the first sample of each of its blocks."""
        warn_binary_text(reader, source.path, source.format)  # one rank measures each source
        blocks = [np.zeros(0, np.int64)]
        for start, sizes, starts in size_windows(source, reader):
            SampleSizes.write(path, first + start, sizes)
            blocks.append(starts)
        return np.concatenate(blocks)

    def make_plan(self, sources: list[Source], measured: Measured) -> planning.ShardPlan:
        """The plan (rank 0); a fresh run makes the staging directory, a resumed one
        checks that it was made from the same inputs."""
        sizes = measured.sizes
        opts = self.options
        first, count, sel = self.selected(len(sizes))
        weighing = planning.weigh(sizes, opts.seed, selection=sel, first=first, count=count, order=opts.order)
        shards = planning.shard_count(weighing.total_bytes, count, shard_size=opts.shard_size,
                                      num_shards=opts.num_shards, multiple_of=opts.shards_multiple)
        plan = planning.cut(weighing, sizes, shards)
        sizes.drop_pages()
        self.prepare_staging(self.identity(sources, shards, plan))
        return plan

    def selected(self, num_samples: int) -> tuple[int, int, np.ndarray | None]:
        """The samples to convert: ``(first, count, None)`` for the ids ``first ..
        first + count``, else ``(0, len(selection), selection)``."""
        opts = self.options
        if opts.selection is not None:
            sel = np.asarray(opts.selection, dtype=np.int64)
            first, count = 0, len(sel)
        else:
            sel = None
            first = min(opts.skip, num_samples)
            stop = num_samples if opts.take is None else min(num_samples, opts.skip + opts.take)
            count = max(0, stop - first)
        if count == 0:
            raise PlanError("no samples selected to convert")
        return first, count, sel

    def identity(self, sources: list[Source], count: int, plan: planning.ShardPlan) -> dict:
        """What a resumed run must share with the run it continues."""
        opts = self.options
        return {
            "sources": [s.to_json() for s in sources],
            "to": self.fmt.NAME,
            "writer_options": {k: repr(v) for k, v in sorted(opts.output_writer_options.items())},
            "reader_options": {k: repr(v) for k, v in sorted((opts.reader_options or {}).items())},
            "num_shards": count,
            "seed": opts.seed,
            "order": opts.order,
            "plan_version": PLAN_VERSION,
            "selection": ([plan.first, plan.num_samples] if plan.selection is None
                          else array_fingerprint(plan.selection)),
            "fields": opts.fields,
            "map": spec_name(opts.map),
            "filter": spec_name(opts.filter),
        }

    def prepare_staging(self, identity: dict) -> None:
        """Record the plan's fingerprint in a new staging directory, or check it against
        the one a resumed run recorded; empty the shards' temporary directory."""
        staging = self.staging
        digest = fingerprint(identity)
        plan_path = plan_file(staging)
        if self.options.resume and os.path.exists(plan_path):
            with open(plan_path, encoding="utf-8") as f:
                saved = json.load(f)
            if saved.get("fingerprint") != digest:
                raise ResumeError(
                    "the partial output was made from other inputs or options"
                    + (" by a conversion that failed; run the same command without --resume to start over"
                       if jobstate.recorded_failure(staging) is not None
                       else "; delete it or convert with the original ones"),
                    path=staging,
                )
        else:
            _empty_except(staging, state_dir(staging))
            _empty_except(state_dir(staging), scan_dir(staging))
            os.makedirs(os.path.join(state_dir(staging), "parts"))
            write_json_atomic(plan_path, {"fingerprint": digest, "identity": identity})
        shutil.rmtree(os.path.join(state_dir(staging), "tmp"), ignore_errors=True)
        os.makedirs(os.path.join(state_dir(staging), "tmp"))

    def complete_shards(self, shards: int) -> list[int]:
        """The shards a resumed run keeps: each rank verifies a share of the parts."""
        comm = self.comm

        def complete_share():
            done = []
            if self.options.resume:
                for k in range(comm.rank, shards, comm.size):
                    part = load_part(self.staging, k)
                    if part is not None and part.get("shard") == k and verify_part(self.staging, part):
                        done.append(k)
            return done

        return sorted(k for share in _collective(comm, complete_share, root_only=False) for k in share)

    def write(self, writer: ShardWriter, bar: Progress, plan, todo: list[int], decodes_parquet: bool) -> None:
        """Write the shards ``todo`` in rounds; a failure on any rank ends every rank."""
        comm = self.comm
        held = planning.held_bytes(plan, writer.fields_per_sample())
        rounds = planning.write_rounds(todo, held, comm.size, self.round_bytes)
        biggest = int(held[todo].max()) if todo else 0
        if comm.rank == 0 and biggest > self.round_bytes:
            warnings.warn(f"a shard holds about {format_bytes(biggest)} in memory while it is written, more "
                          f"than --round-size ({format_bytes(self.round_bytes)}): a round holds at least one "
                          f"shard per rank; a smaller --shard-size holds less", stacklevel=2)
        restore_cpus = share_node_cpus(comm, decodes_parquet=decodes_parquet)
        writer.clock.lap("plan")
        written = 0
        try:
            if plan.order == "seeded" and len(rounds) > 1:
                # Every round of a seeded plan draws on every block of the sources.
                writer.spill_rounds(comm, rounds, plan, buffer_bytes=self.round_bytes // 4)
            for number, round_shards in enumerate(rounds):
                if jobstate.stop_requested(comm):
                    break
                writer.write_round(comm, round_shards, plan, number)
                written += len(round_shards)
            writer.close()
            bar.finish()
        except BaseException as exc:  # noqa: BLE001 -- every failure must end all ranks
            writer.close()
            jobstate.record_failure(self.staging, exc)
            _fail_rank(comm, exc)
        finally:
            restore_cpus()
        jobstate.raise_if_stopped(self.staging, written, len(todo))

    def publish(self, clock: PhaseClock, plan, sources: list[Source], first_id: np.ndarray) -> dict | None:
        """Merge and publish the dataset on rank 0; returns its summary there (None on
        the other ranks) with every rank's phases and peak memory.  The sources are
        hashed for the lineage record first, each rank a share."""
        comm = self.comm
        digests = _collective(comm, lambda: digest_share(sources, comm.rank, comm.size), root_only=False)
        comm.barrier()
        clock.lap("wait")
        summary = None
        if comm.rank == 0:
            try:
                lineage = lineage_record(self.fmt, self.src, self.options, sources, first_id, plan,
                                         {i: d for share in digests for i, d in share.items()})
                summary = publish_dataset(self.fmt, self.staging, self.dst, plan.num_shards,
                                          self.options.output_writer_options, plan, lineage)
            except BaseException as exc:  # noqa: BLE001
                jobstate.record_failure(self.staging, exc)
                _fail_rank(comm, exc)
            clock.lap("merge")
        # Gathered after the merge, so rank 0's own time includes it; the other ranks'
        # clocks stopped when they reached this point.
        ranks = comm.gather((clock.seconds, peak_rss_bytes()))
        if comm.rank == 0:
            summary["phases"] = {name: [round(p[name], 4) for p, _rss in ranks] for name in PhaseClock.PHASES}
            summary["peak_rss_bytes"] = [rss for _p, rss in ranks]
        return summary


def _empty_except(directory: str, keep: str) -> None:
    """Delete everything in ``directory`` but its entry ``keep``."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if path == keep:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
