"""Copy a dataset to another storage tier: planned, parallel, verified, atomic, resumable.

The guarantees are those of mpiFileUtils' ``dcp``/``dsync`` plus what they lack:

* **plan first**: bytes *and* inodes are summed and compared with ``statvfs`` and the
  tier's known quota before anything is written;
* **atomic visibility**: every file is written as ``name.tmp.<jobid>``, ``fsync``\\ ed and
  renamed; directories are ``fsync``\\ ed and the manifest is published last.  On a
  node-local destination nothing is fsynced by default: its contents do not outlive the
  node's jobs, and a resumed run re-verifies every file it keeps, so a crash cannot leave
  a torn file trusted (``fsync=True`` asks for durability anyway);
* **verification** against checksums recorded by the dataset itself (MDS ``index.json``
  ``hashes``, xxh64 / xxh3_64) or by the source's own staging manifest, computed on the
  fly while copying instead of a second full compare;
* **resume**: files whose size and checksum already match are kept; stale temporary
  files are removed; finished files are journaled as they land;
* **fresh times**: copies get the current mtime (purge policies look at it); the source
  mtime is kept in the manifest;
* **compact MDS index**: an MDS dataset's copy gets an up-to-date ``index.hpcio``
  (written when the source has none, its record of ``index.json``'s fresh mtime updated
  otherwise), so that its readers open it with one ``stat`` of ``index.json``;
* **parallel**: threads in each process; under MPI, files and chunks of large files
  are spread across ranks, or, for a node-local destination, one leader per node copies.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import time
import warnings
from collections.abc import Callable
from typing import Any

from .._durable import fsync_dir
from ..distributed.comm import SerialComm, get_comm
from ..distributed.launcher import launcher_rank, launcher_world_size
from ..errors import HpcioError, InsufficientSpaceError, StagingError
from ..progress import ProgressDisplay
from ..units import format_bytes
from .engine import CopyEngine, Item, assign_items, io_errors, split_items, unlink_quiet
from .manifest import (
    MANIFEST_NAME,
    Digest,
    FileRecord,
    Journal,
    Manifest,
    journal_paths,
    write_manifest,
)
from .plan import DEFAULT_CHUNK_BYTES, StagePlan, plan_stage
from .scan import make_real_dir, place_links
from .tiers import Tier, is_node_local, resolve_tiers

__all__ = ["stage", "StageResult", "default_threads"]

# Seconds between two progress lines when stderr is not a terminal.
_PROGRESS_INTERVAL = 10.0


def default_threads(env=None) -> int:
    """Copy threads: :func:`hpcio.distributed.context.cpus_per_task` (``SLURM_CPUS_PER_TASK``,
    else the CPUs this process may run on), at least 1."""
    from ..distributed.context import cpus_per_task

    return max(1, cpus_per_task(env))


def _job_suffix(env=None) -> str:
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID", "").strip()
    return job if job else f"{socket.gethostname()}-{os.getpid()}"


@dataclasses.dataclass
class StageResult:
    """Outcome of :func:`stage` (on every rank)."""

    plan: StagePlan
    copied: list[str] = dataclasses.field(default_factory=list)
    kept: list[str] = dataclasses.field(default_factory=list)
    recopied: list[str] = dataclasses.field(default_factory=list)
    bytes_copied: int = 0
    seconds: float = 0.0
    manifest: str | None = None
    indexed: list[str] = dataclasses.field(default_factory=list)  # compact MDS indexes written
    dry_run: bool = False
    copier: bool = True
    durable: bool = True  # copies, directories and manifest were fsynced

    def summary(self) -> str:
        if self.dry_run:
            return "dry run: " + self.plan.summary()
        if not self.copier:
            return f"{self.plan.dst}: staged by this node's or job's leader"
        rate = self.bytes_copied / self.seconds if self.seconds > 0 else 0.0
        return (
            f"staged {self.plan.src} -> {self.plan.dst}: copied {len(self.copied)} files "
            f"({format_bytes(self.bytes_copied)}, {format_bytes(rate)}/s), kept {len(self.kept)} verified, "
            f"re-copied {len(self.recopied)} that failed verification, in {self.seconds:.2f} s"
            f"{'' if self.durable else ' (not fsynced: node-local destination)'}; manifest {self.manifest}"
        )


def _collective(comm, fn, *args, **kwargs):
    """Run ``fn`` on every rank; if it fails anywhere, raise on every rank."""
    try:
        value, error = fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - shared with every rank, then re-raised
        value, error = None, exc
    errors = comm.allgather(None if error is None else (type(error).__name__, str(error)))
    if error is not None:
        raise error
    for failure in errors:
        if failure is not None:
            raise StagingError(f"staging failed on another rank: {failure[0]}: {failure[1]}")
    return value


def _on_root(comm, fn, *args, **kwargs):
    """Run ``fn`` on rank 0 and broadcast its value, or its error to every rank."""
    if comm.rank == 0:
        try:
            payload = (fn(*args, **kwargs), None)
        except Exception as exc:  # noqa: BLE001 - broadcast, then re-raised everywhere
            payload = (None, exc)
    else:
        payload = None
    value, error = comm.bcast(payload, root=0)
    if error is not None:
        raise error
    return value


def _run(plan_args: dict, comm, *, threads: int, dry_run: bool, method: str, chunk_bytes: int,
         show_progress: bool, tmp_suffix: str | None, fsync: bool | None) -> StageResult:
    """The staging run shared by one process (``SerialComm``) and by MPI ranks."""
    t0 = time.perf_counter()
    plan = _on_root(comm, plan_stage, *plan_args["pos"], **plan_args["kw"])
    result = StageResult(plan=plan, dry_run=dry_run)
    if not plan.fits:
        raise InsufficientSpaceError(plan.refusal(), path=plan.dst)
    if dry_run:
        return result
    tmp_suffix = comm.bcast(tmp_suffix or _job_suffix() if comm.rank == 0 else None, root=0)
    durable = not plan.node_local if fsync is None else bool(fsync)
    result.durable = durable
    engine = CopyEngine(plan, threads, method, tmp_suffix, None, None, durable)

    # 1. verify what an earlier run left, spread across ranks; re-copy what fails.
    kept, bad = _verify_present(comm, engine, plan)
    to_copy = sorted(plan.to_copy + bad)
    items, chunked = split_items(plan, to_copy, chunk_bytes)
    _on_root(comm, _wrap_io(functools.partial(_prepare, engine, kept, chunked), plan.dst))
    comm.barrier()

    # 2. copy: whole files are published by the rank that copied them; chunked files by
    #    rank 0 once every chunk has landed.
    records, chunks = _copy(comm, engine, items, show_progress)
    publish = functools.partial(_publish, engine, records, chunks, chunked, kept, tmp_suffix, result.indexed)
    result.manifest = _on_root(comm, _wrap_io(publish, plan.dst))
    result.indexed = comm.bcast(result.indexed if comm.rank == 0 else None, root=0)
    result.copied = sorted(plan.to_copy)
    result.recopied = sorted(bad)
    result.kept = sorted(kept)
    result.bytes_copied = sum(plan.by_rel()[rel].size for rel in to_copy)
    result.seconds = time.perf_counter() - t0
    return result


def _verify_present(comm, engine: CopyEngine, plan: StagePlan) -> tuple[list[str], list[str]]:
    """Check the files an earlier run left, each rank a share; returns those kept and
    those to copy again (whose bytes the plan then needs)."""
    check_items = [Item(rel, 0, plan.by_rel()[rel].size, None) for rel in plan.to_check]
    checked = _collective(comm, engine.map, engine.check, assign_items(check_items, comm.size, comm.rank))
    verdicts = dict(v for part in comm.allgather(checked) for v in part if v is not None)
    kept = [rel for rel in plan.to_check if verdicts[rel]]
    bad = [rel for rel in plan.to_check if not verdicts[rel]]
    if bad:
        plan.need_bytes += sum(plan.by_rel()[rel].size for rel in bad)
        if not plan.fits:
            raise InsufficientSpaceError(plan.refusal(), path=plan.dst)
    return kept, bad


def _sync_dir(engine: CopyEngine, path: str) -> None:
    if engine.durable:
        fsync_dir(path)


def _prepare(engine: CopyEngine, kept: list[str], chunked: dict[str, int]) -> None:
    """Make the destination ready for the copies (rank 0): journal the files kept, withdraw
    the old manifest, remove stale temporary files, make the directories and the
    temporary files that chunks are written into."""
    plan = engine.plan
    # The verified files go into the journal before the old manifest is withdrawn,
    # so an interruption from here on still resumes without re-reading them.
    os.makedirs(plan.dst, exist_ok=True)
    journal = Journal(plan.dst, 0, engine.durable)
    for rel in kept:
        journal.append(_kept_record(plan, rel))
    # What the destination's copies of changed sources were made from stays on record
    # until they are replaced: a run after this one fails still copies them again.
    for rel, rec in plan.changed.items():
        if os.path.isfile(engine.dst_path(rel)):
            journal.append(rec)
    journal.close()
    if plan.old_manifest:
        unlink_quiet(os.path.join(plan.dst, MANIFEST_NAME))
    for rel in plan.stale:
        unlink_quiet(os.path.join(plan.dst, rel))
    for d in plan.dirs:
        make_real_dir(plan.dst, d)
    for rel in plan.replace:
        unlink_quiet(os.path.join(plan.dst, rel))  # the link itself, never its target
    place_links(plan.dst, plan.links)
    for rel in chunked:
        fd = os.open(engine.tmp_path(rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, plan.by_rel()[rel].size)
        finally:
            os.close(fd)
    # Re-staging must not hand a purge policy the times of the first copy.
    for rel in kept:
        os.utime(engine.dst_path(rel), follow_symlinks=False)
    _sync_dir(engine, plan.dst)


def _copy(comm, engine: CopyEngine, items: list[Item], show_progress: bool):
    """Copy this rank's share of ``items``; returns every rank's records of whole files
    and digests of chunks (``{file: {chunk: digest}}``)."""
    mine = assign_items(items, comm.size, comm.rank)
    progress = _progress(sum(it.length for it in mine), show_progress and comm.rank == 0)
    engine.progress = progress
    engine.journal = Journal(engine.plan.dst, comm.rank, engine.durable)
    try:
        outputs = _collective(
            comm, engine.map, lambda it: engine.copy_whole(it) if it.chunk is None else engine.copy_chunk(it), mine
        )
    finally:
        engine.journal.close()
        if progress is not None:
            progress.close()
    gathered = [o for part in comm.allgather(outputs) for o in part]
    records = {r.path: r for r in gathered if isinstance(r, FileRecord)}
    chunks: dict[str, dict[int, bytes]] = {}
    for o in gathered:
        if isinstance(o, tuple):
            chunks.setdefault(o[0], {})[o[1]] = o[2]
    return records, chunks


def _publish(engine: CopyEngine, records: dict, chunks: dict, chunked: dict[str, int], kept: list[str],
             tmp_suffix: str, indexed: list[str]) -> str:
    """Publish the chunked files, the compact MDS indexes (their paths appended to
    ``indexed``) and the manifest (rank 0); returns the manifest's path."""
    plan = engine.plan
    engine.journal = Journal(plan.dst, 0, engine.durable)
    try:
        for rel, cb in chunked.items():
            digests = [chunks[rel][k] for k in range(len(chunks[rel]))]
            records[rel] = engine.finish_chunked(rel, digests, cb)
    finally:
        engine.journal.close()
    for rel in kept:
        records[rel] = _kept_record(plan, rel)
    for rel in _index_compact(plan, records):
        indexed.append(os.path.join(plan.dst, rel))
    # Renames and new directories become durable before the manifest says "complete".
    for d in [os.path.join(plan.dst, d) for d in reversed(plan.dirs)] + [plan.dst]:
        _sync_dir(engine, d)
    manifest = Manifest(source=plan.src, files=list(records.values()), job_id=os.environ.get("SLURM_JOB_ID"),
                        links=list(plan.links))
    path = write_manifest(plan.dst, manifest, tmp_suffix, engine.durable)
    for journal in journal_paths(plan.dst):
        unlink_quiet(journal)
    return path


def _index_compact(plan: StagePlan, records: dict) -> list[str]:
    """Give each MDS dataset copied that has no compact index (``index.hpcio``) one, once
    every file is verified: a dataset written by streaming or mldataforge has none, and
    one copied from the source is left as its bytes.  Each one built, by this run or an
    earlier one, is recorded in ``records`` (the manifest then lists it, and ``unstage``
    removes it); returns the relative paths of those this run wrote.  A dataset
    whose index cannot be built (its shards disagree with ``index.json``) keeps its copy
    as it is, with a warning: its readers report the same error."""
    from ..formats import mds

    by_rel = plan.by_rel()
    written = []
    for rel in sorted(r for r in by_rel if os.path.basename(r) == mds.INDEX_NAME):
        directory = os.path.normpath(os.path.join(plan.dst, os.path.dirname(rel)))
        if not mds.sniff(directory):
            continue
        try:
            path = mds.update_compact_index(directory)
        except HpcioError as exc:
            warnings.warn(f"staged MDS dataset {directory} keeps no compact index: {exc}", stacklevel=2)
            continue
        built = path is not None
        if not built:
            path = os.path.join(directory, mds.COMPACT_NAME)
            if not os.path.exists(path) or os.path.relpath(path, plan.dst).replace(os.sep, "/") in by_rel:
                continue  # none, or the source's own copy (already in the manifest)
        compact_rel = os.path.relpath(path, plan.dst).replace(os.sep, "/")
        with open(path, "rb") as f:
            digest = Digest.compute_bytes(f.read(), "xxh3_64")
        source = by_rel.get(compact_rel) or by_rel[rel]
        records[compact_rel] = FileRecord(compact_rel, os.path.getsize(path), digest, source.mtime_ns)
        if built:
            written.append(compact_rel)
    return written


def _progress(total: int, enabled: bool) -> ProgressDisplay | None:
    """Bytes copied by this process: a bar on a terminal, a line every 10 s otherwise."""
    if not enabled or total <= 0:
        return None

    def line(done: int, elapsed: float, _final: bool) -> str:
        rate = done / max(elapsed, 1e-9)
        return (f"stage: {format_bytes(done)} / {format_bytes(total)} ({100.0 * done / total:.0f}%), "
                f"{format_bytes(rate)}/s")

    return ProgressDisplay(total, label="stage", unit="B", unit_scale=True, line=line,
                           interval=_PROGRESS_INTERVAL)


def _kept_record(plan: StagePlan, rel: str) -> FileRecord:
    sf = plan.by_rel()[rel]
    digest = plan.reference.get(rel) or plan.prior[rel].digest
    return FileRecord(rel, sf.size, digest, sf.mtime_ns)


def _wrap_io(fn, dst):
    def wrapped():
        with io_errors("the staging metadata", dst):
            return fn()

    return wrapped


def stage(
    src,
    dst,
    *,
    threads: int | None = None,
    dry_run: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    node_local: bool | None = None,
    tiers: dict[str, Tier] | None = None,
    fs_stat: Callable = os.statvfs,
    comm=None,
    use_mpi: bool = True,
    method: str = "auto",
    progress: bool = True,
    tmp_suffix: str | None = None,
    fsync: bool | None = None,
    symlinks: str = "copy",
) -> StageResult:
    """Copy the dataset at ``src`` into directory ``dst``, verified and resumable.

    Parameters
    ----------
    src : path
        A dataset directory (any format, any tree of files) or a single-file dataset
        (a JINX file travels with its ``.binx`` sidecar).
    dst : path
        Destination directory, created if needed.  Running ``stage`` again on the same
        pair resumes: present files with the right size and checksum are kept.
    threads : int, optional
        Copy threads per process; default :func:`default_threads`.  Files are copied on
        the calling thread when all but the largest add up to less than 8 MiB.
    dry_run : bool
        Plan and check space only; write nothing.
    chunk_bytes : int
        Files larger than this (without a checksum recorded by the source) are copied
        in chunks of this size by several threads or ranks.  A multiple of 1 MiB.
    node_local : bool, optional
        Whether ``dst`` is private to each node.  Default: from the tier, else from the
        filesystem type.  Under MPI a node-local destination is filled by one leader per
        node (the node's first rank); a shared one by every rank together.
    tiers : dict, optional
        Named tiers (default :func:`hpcio.staging.tiers.resolve_tiers`), for quotas.
    fs_stat : callable
        Stand-in for :func:`os.statvfs` (tests simulate a full tier with it).
    comm : mpi4py communicator or :class:`hpcio.distributed.comm.Comm`, optional
        Default: ``COMM_WORLD`` when launched by mpiexec/srun with more than one process
        (:func:`hpcio.distributed.comm.get_comm`).
    use_mpi : bool
        Set False to never import mpi4py; several processes then elect a copier from
        the launcher's variables (the first task, or the first of each node).
    method : {"auto", "copy_file_range", "readwrite"}
        ``auto`` (= ``readwrite``) reads each file through a 1 MiB buffer, hashing it and
        writing it in the same pass.  ``copy_file_range`` copies inside the kernel (server
        side on NFS 4.2, reflinks on XFS and btrfs) while a second thread hashes the
        source, falling back to the buffered pass where the filesystems refuse.
    progress : bool
        Show a progress bar (terminal) or a line every 10 s (logs).
    tmp_suffix : str, optional
        Suffix of temporary names (default ``$SLURM_JOB_ID``, else host and pid).
    fsync : bool, optional
        Make the copies, directories and manifest durable before publishing.  Default:
        for a shared destination only.  A node-local one (job scratch, NVMe, ``/dev/shm``,
        ``$TMPDIR``) does not outlive the node's jobs, and a resumed run re-verifies every
        file it keeps, so its copies are published without waiting for the disk.
    symlinks : {"copy", "refuse", "follow", "follow-outside"}
        Symbolic links in ``src``: ``copy`` (default) recreates each as a link with the
        same relative target, which must lie inside ``src``; ``refuse`` refuses any;
        ``follow`` copies what each points to, which must lie inside ``src``;
        ``follow-outside`` copies it wherever it lies.  Links in ``dst`` are never
        written through (see :mod:`hpcio.staging.scan`).

    Returns
    -------
    StageResult

    Raises
    ------
    InsufficientSpaceError
        The plan needs more bytes or inodes than the destination has free.
    ChecksumMismatchError
        A copied file disagrees with the checksum its source records.
    SymlinkError
        A link in ``src`` the ``symlinks`` policy refuses, or one in ``dst`` that a copy
        would write through.
    SourceChangedError
        A source file changed while it was copied, and again when copied once more.
    StagingError
        Any I/O failure (``ENOSPC``/``EDQUOT`` named as such).
    """
    if method not in ("auto", "copy_file_range", "readwrite"):
        raise HpcioError(f"method must be 'auto', 'copy_file_range' or 'readwrite', got {method!r}")
    threads = default_threads() if threads is None else int(threads)
    if threads < 1:
        raise HpcioError(f"threads must be at least 1, got {threads}")
    plan_kw = dict(chunk_bytes=chunk_bytes, node_local=node_local, tiers=tiers, fs_stat=fs_stat, symlinks=symlinks)
    run_kw: dict[str, Any] = dict(threads=threads, dry_run=dry_run, method=method, chunk_bytes=chunk_bytes,
                  show_progress=progress, tmp_suffix=tmp_suffix, fsync=fsync)
    if comm is None:
        # Without a communicator of more than one process, the launcher's variables tell
        # several tasks apart.
        comm = get_comm(use_mpi=use_mpi, missing_ok=True)
        if comm.size == 1:
            return _stage_without_mpi(src, dst, plan_kw, run_kw)
    comm = get_comm(comm)
    if node_local is None:
        node_local = bool(comm.allgather(is_node_local(dst, tiers or resolve_tiers()))[0])
    plan_kw["node_local"] = node_local
    if not node_local:
        return _run({"pos": (src, dst), "kw": plan_kw}, comm, **run_kw)
    return _stage_per_node(comm, src, dst, plan_kw, run_kw)


def _stage_without_mpi(src, dst, plan_kw: dict, run_kw: dict) -> StageResult:
    """One process copies; of several tasks a launcher started without MPI, the first (of
    the job, or of each node for a node-local destination) copies and the others plan."""
    if launcher_world_size() > 1:
        # Several tasks but no MPI: elect copiers from the launcher so they do not race.
        node_local = plan_kw["node_local"]
        local = node_local if node_local is not None else is_node_local(dst, plan_kw["tiers"] or resolve_tiers())
        if launcher_rank(local=local) != 0:
            plan = plan_stage(src, dst, **{**plan_kw, "node_local": local})
            return StageResult(plan=plan, dry_run=run_kw["dry_run"], copier=False)
    return _run({"pos": (src, dst), "kw": plan_kw}, SerialComm(), **run_kw)


def _stage_per_node(comm, src, dst, plan_kw: dict, run_kw: dict) -> StageResult:
    """Fill a node-local destination: the first rank of each node copies, alone."""
    node = comm.split_node()
    try:
        leader = node.rank == 0
        if leader:
            result = _collective(comm, _run, {"pos": (src, dst), "kw": plan_kw}, SerialComm(), **run_kw)
        else:
            result = _collective(comm, lambda: None)
        leader_result = node.bcast(result, root=0)
        if not leader:
            leader_result.copier = False
        return leader_result
    finally:
        node.free()
