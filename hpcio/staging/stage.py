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
* **parallel**: threads in each process; under MPI, files and chunks of large files
  are spread across ranks, or, for a node-local destination, one leader per node copies.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import json
import os
import socket
import stat
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import xxhash

from .._core._io import start_writeback
from .._durable import fsync_dir
from ..errors import (
    ChecksumMismatchError,
    HpcioError,
    InsufficientSpaceError,
    ShardNotFoundError,
    StagingError,
)
from . import _mpi
from .manifest import (
    JOURNAL_GLOB,
    MANIFEST_NAME,
    TREE_ALGO,
    Digest,
    FileRecord,
    Journal,
    Manifest,
    new_hasher,
    read_journals,
    read_manifest,
    write_manifest,
)
from ..units import format_bytes
from .tiers import Tier, fs_usage, is_node_local, resolve_tiers, tier_for_path

__all__ = ["stage", "plan_stage", "unstage", "StagePlan", "StageResult", "default_threads"]

BLOCK_BYTES = 16 * 2**20  # one copy_file_range call
# Bytes that pass through user space (read/write copies, hashing) go through a buffer that
# stays in the CPU caches: 46 MB read, hashed and written through 1 MiB took 13.5 ms,
# through 16 MiB 44 ms (every pass evicts the buffer and the page cache's pages alike).
BUFFER_BYTES = 2**20
DEFAULT_CHUNK_BYTES = 256 * 2**20
# Starting a thread pool costs a few milliseconds (two threads: about 5 ms, one 46 MB file
# staged in 16.2 ms with them, 14.8 ms without); items are copied on the calling thread
# when all but the largest add up to less than this.
PARALLEL_MIN_BYTES = 8 * 2**20
# A durable copy has the kernel start writing each this many bytes to storage as soon as
# they are copied, so storage works during the copy and the fsync waits only for the tail.
WRITEBACK_BYTES = 8 * 2**20
_CHUNK_ALIGN = 2**20
_TMP_MARK = ".tmp."
_OWN_FILES = (MANIFEST_NAME,)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# copy_file_range refusals that mean "this pair of filesystems cannot": use read/write.
_CFR_UNSUPPORTED = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.EPERM)


def default_threads(env=None) -> int:
    """Copy threads: :func:`hpcio.distributed.context.cpus_per_task` (``SLURM_CPUS_PER_TASK``,
    else the CPUs this process may run on), at least 1."""
    from ..distributed.context import cpus_per_task

    return max(1, cpus_per_task(env))


def _job_suffix(env=None) -> str:
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID", "").strip()
    return job if job else f"{socket.gethostname()}-{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """A file of the source dataset, by path relative to the dataset root."""

    rel: str
    size: int
    mtime_ns: int
    mode: int


@dataclasses.dataclass
class StagePlan:
    """What a staging run will do, and whether it fits.

    ``reference`` maps a relative path to the checksum the source vouches for (its index
    or manifest); ``prior`` to the checksum an earlier run recorded for the destination
    copy of an unchanged source file.
    """

    src: str
    dst: str
    files: list[SourceFile]
    dirs: list[str]
    reference: dict[str, Digest]
    reference_origin: dict[str, str]
    prior: dict[str, FileRecord]
    to_check: list[str]
    to_copy: list[str]
    stale: list[str]
    need_bytes: int
    need_inodes: int
    free_bytes: int
    free_inodes: int
    limited_by: str
    tier: str | None
    node_local: bool
    old_manifest: bool

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.free_bytes and self.need_inodes <= self.free_inodes

    def by_rel(self) -> dict[str, SourceFile]:
        return {f.rel: f for f in self.files}

    def refusal(self) -> str:
        short = [
            what
            for what, need, free in (("bytes", self.need_bytes, self.free_bytes),
                                     ("inodes", self.need_inodes, self.free_inodes))
            if need > free
        ]
        return (
            f"not enough room to stage {len(self.to_copy)} files: "
            f"need {format_bytes(self.need_bytes)} ({self.need_bytes} bytes) and {self.need_inodes} inodes, "
            f"free {format_bytes(self.free_bytes)} ({self.free_bytes} bytes) and {self.free_inodes} inodes "
            f"(short of {' and '.join(short)}; limit from {self.limited_by})"
        )

    def summary(self) -> str:
        tier = f" (tier {self.tier})" if self.tier else ""
        where = "node-local" if self.node_local else "shared"
        return (
            f"{self.src} -> {self.dst}{tier}, {where}: {len(self.files)} files, "
            f"{format_bytes(self.total_bytes)}; copy {len(self.to_copy)}, verify {len(self.to_check)} "
            f"already present, remove {len(self.stale)} stale temporary files; "
            f"need {format_bytes(self.need_bytes)} and {self.need_inodes} inodes, "
            f"free {format_bytes(self.free_bytes)} and {self.free_inodes} inodes ({self.limited_by})"
        )


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


# ---------------------------------------------------------------------------- planning


def _scan_source(src: str) -> tuple[list[SourceFile], list[str]]:
    if os.path.isfile(src):
        # A single-file dataset (a JINX file) travels with its binary sidecar.
        st = os.stat(src)
        names = [os.path.basename(src)]
        sidecar = os.path.splitext(src)[0] + ".binx"
        if sidecar != src and os.path.isfile(sidecar):
            names.append(os.path.basename(sidecar))
        base = os.path.dirname(src)
        files = []
        for name in names:
            st = os.stat(os.path.join(base, name))
            files.append(SourceFile(name, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode)))
        return files, []
    files, dirs = [], []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(src, rel_dir)) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_dir():
                dirs.append(rel)
                stack.append(rel)
            elif entry.is_file():
                if not rel_dir and (entry.name in _OWN_FILES or _is_journal(entry.name)):
                    continue
                st = entry.stat()
                files.append(SourceFile(rel, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode)))
    files.sort(key=lambda f: f.rel)
    dirs.sort()
    return files, dirs


def _is_journal(name: str) -> bool:
    return name.startswith(".hpcio-journal.") and name.endswith(".jsonl")


def _index_digests(src_root: str, files: list[SourceFile]) -> dict[str, Digest]:
    """Checksums an MDS ``index.json`` records (``raw_data``/``zip_data`` ``hashes``)."""
    present = {f.rel for f in files}
    out: dict[str, Digest] = {}
    for f in files:
        if os.path.basename(f.rel) != "index.json":
            continue
        try:
            with open(os.path.join(src_root, f.rel), "rb") as fh:
                index = json.loads(fh.read())
            shards = index.get("shards") if isinstance(index, dict) else None
        except (OSError, ValueError):
            continue
        if not isinstance(shards, list):
            continue
        rel_dir = os.path.dirname(f.rel)
        for shard in shards:
            if not isinstance(shard, dict):
                continue
            for key in ("zip_data", "raw_data"):
                data = shard.get(key)
                if not isinstance(data, dict) or not isinstance(data.get("hashes"), dict):
                    continue
                rel = f"{rel_dir}/{data.get('basename')}" if rel_dir else str(data.get("basename"))
                if rel not in present:
                    continue
                for algo in ("xxh64", "xxh3_64"):
                    if isinstance(data["hashes"].get(algo), str):
                        out[rel] = Digest(algo, data["hashes"][algo])
                        break
    return out


def _scan_destination(dst: str, planned: set[str]) -> tuple[dict[str, int], list[str]]:
    """Sizes of planned files already in ``dst`` and our stale temporary files there."""
    existing: dict[str, int] = {}
    stale: list[str] = []
    if not os.path.isdir(dst):
        return existing, stale
    for root, _dirs, names in os.walk(dst):
        rel_root = os.path.relpath(root, dst)
        for name in names:
            rel = name if rel_root == "." else f"{rel_root}/{name}".replace(os.sep, "/")
            if rel in planned:
                try:
                    existing[rel] = os.stat(os.path.join(root, name)).st_size
                except FileNotFoundError:
                    pass
                continue
            head, mark, _job = rel.rpartition(_TMP_MARK)
            if mark and (head in planned or head == MANIFEST_NAME):
                stale.append(rel)
    stale.sort()
    return existing, stale


def _digest_scheme(size: int, reference: Digest | None, chunk_bytes: int) -> tuple[str, int | None]:
    if reference is not None:
        return reference.algo, reference.chunk_bytes
    if size > chunk_bytes:
        return TREE_ALGO, chunk_bytes
    return "xxh3_64", None


def _round_up(n: int, block: int) -> int:
    return -(-n // block) * block if block > 0 else n


def plan_stage(
    src,
    dst,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    node_local: bool | None = None,
    tiers: dict[str, Tier] | None = None,
    fs_stat: Callable = os.statvfs,
) -> StagePlan:
    """Plan a staging run without writing anything.

    Parameters are those of :func:`stage`.  Files already in ``dst`` with the source's
    size are planned as "verify" (they are re-copied if their checksum disagrees); the
    space needed counts every other file, rounded up to the destination block size, plus
    one inode per file and directory to create and two for the manifest and journal.
    """
    src = os.path.abspath(os.fspath(src))
    dst = os.path.abspath(os.fspath(dst))
    if not os.path.exists(src):
        raise ShardNotFoundError("staging source does not exist", path=src)
    src_root = src if os.path.isdir(src) else os.path.dirname(src)
    if dst == src_root or dst.startswith(src_root.rstrip(os.sep) + os.sep) and os.path.isdir(src):
        raise StagingError(f"destination {dst} is inside the source dataset", path=src)
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise StagingError("staging destination exists and is not a directory", path=dst)
    if chunk_bytes <= 0 or chunk_bytes % _CHUNK_ALIGN:
        raise HpcioError(f"chunk_bytes must be a positive multiple of {_CHUNK_ALIGN}, got {chunk_bytes}")
    tiers = resolve_tiers() if tiers is None else tiers
    tier = tier_for_path(dst, tiers)
    if tier is not None and tier.read_only:
        raise StagingError(f"tier {tier.name!r} is read-only", path=dst)
    if node_local is None:
        node_local = is_node_local(dst, tiers)

    files, dirs = _scan_source(src)
    reference = _index_digests(src_root, files)
    origin = {rel: "index" for rel in reference}
    src_manifest = read_manifest(src_root) if os.path.isdir(src) else None
    if src_manifest is not None:
        sizes = {f.rel: f.size for f in files}
        for rec in src_manifest.files:
            if rec.path not in reference and sizes.get(rec.path) == rec.size:
                reference[rec.path] = rec.digest
                origin[rec.path] = "source manifest"

    planned = {f.rel for f in files}
    existing, stale = _scan_destination(dst, planned)
    prior: dict[str, FileRecord] = {}
    dst_manifest = read_manifest(dst) if os.path.isdir(dst) else None
    old_records = list(dst_manifest.files) if dst_manifest else []
    old_records += list(read_journals(dst).values()) if os.path.isdir(dst) else []
    by_rel = {f.rel: f for f in files}
    for rec in old_records:
        f = by_rel.get(rec.path)
        if f is not None and rec.size == f.size and rec.source_mtime_ns == f.mtime_ns:
            prior[rec.path] = rec

    to_check, to_copy = [], []
    for f in files:
        if existing.get(f.rel) == f.size and (f.rel in reference or f.rel in prior):
            to_check.append(f.rel)
        else:
            to_copy.append(f.rel)

    usage = fs_usage(dst, fs_stat=fs_stat)
    free_bytes, free_inodes, limited_by = usage.free_bytes, usage.free_inodes, "statvfs"
    if tier is not None:
        q_bytes, q_inodes = tier.quota_free()
        if q_bytes is not None and q_bytes < free_bytes:
            free_bytes, limited_by = q_bytes, tier.quota_label()
        if q_inodes is not None and q_inodes < free_inodes:
            free_inodes, limited_by = q_inodes, tier.quota_label()
    need_bytes = sum(_round_up(by_rel[rel].size, usage.block_size) for rel in to_copy)
    new_dirs = [d for d in dirs if not os.path.isdir(os.path.join(dst, d))]
    need_inodes = (
        sum(1 for rel in to_copy if rel not in existing) + len(new_dirs) + (0 if os.path.isdir(dst) else 1) + 2
    )
    return StagePlan(
        src=src, dst=dst, files=files, dirs=dirs, reference=reference, reference_origin=origin,
        prior=prior, to_check=to_check, to_copy=to_copy, stale=stale, need_bytes=need_bytes,
        need_inodes=need_inodes, free_bytes=free_bytes, free_inodes=free_inodes, limited_by=limited_by,
        tier=tier.name if tier else None, node_local=bool(node_local), old_manifest=dst_manifest is not None,
    )


# ---------------------------------------------------------------------------- progress


class _Progress:
    """A tqdm bar on a terminal, a plain line every ``interval`` seconds otherwise."""

    def __init__(self, total: int, enabled: bool, label: str, interval: float = 10.0, stream=None):
        self.total, self.done, self.label = total, 0, label
        self.stream = sys.stderr if stream is None else stream
        self.enabled, self.interval = enabled and total > 0, interval
        self._lock = threading.Lock()
        self._start = self._last = time.monotonic()
        self._bar = None
        if self.enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="B", unit_scale=True, desc=label, file=self.stream)

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)
                return
            now = time.monotonic()
            if now - self._last >= self.interval:
                self._last = now
                self._line(now)

    def _line(self, now: float) -> None:
        rate = self.done / max(now - self._start, 1e-9)
        pct = 100.0 * self.done / self.total
        print(f"{self.label}: {format_bytes(self.done)} / {format_bytes(self.total)} ({pct:.0f}%), "
              f"{format_bytes(rate)}/s", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            self._line(time.monotonic())


# ---------------------------------------------------------------------------- copying


class _Cancelled(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class _Item:
    rel: str
    offset: int
    length: int
    chunk: int | None  # None: the whole file in one piece


class _Engine:
    """Copies and verifies items with a thread pool inside one process."""

    def __init__(self, plan: StagePlan, threads: int, method: str, tmp_suffix: str, journal: Journal | None,
                 progress: _Progress | None, durable: bool = True):
        self.plan = plan
        self.durable = durable
        self.src_root = plan.src if os.path.isdir(plan.src) else os.path.dirname(plan.src)
        self.files = plan.by_rel()
        self.threads = max(1, threads)
        self.method = method
        self.tmp_suffix = tmp_suffix
        self.journal = journal
        self.progress = progress
        self.cancel = threading.Event()
        # auto reads, hashes and writes in one pass: the verification needs the bytes in
        # user space anyway, and a cache-sized buffer makes that pass cheaper than an
        # in-kernel copy plus a second read of the source to hash it (46 MB ext4 to ext4:
        # 0.72 of cp -r against 0.60).  copy_file_range is for filesystems that copy on the
        # server or share extents (NFS 4.2, XFS and btrfs reflinks).
        self._cfr_ok = method == "copy_file_range"
        self._local = threading.local()
        self._journal_lock = threading.Lock()

    # --- helpers
    def _buffer(self) -> bytearray:
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = bytearray(BUFFER_BYTES)
        return buf

    def src_path(self, rel: str) -> str:
        return os.path.join(self.src_root, rel)

    def dst_path(self, rel: str) -> str:
        return os.path.join(self.plan.dst, rel)

    def tmp_path(self, rel: str) -> str:
        return f"{self.dst_path(rel)}{_TMP_MARK}{self.tmp_suffix}"

    def _tick(self, n: int) -> None:
        if self.cancel.is_set():
            raise _Cancelled()
        if self.progress is not None:
            self.progress.update(n)

    def map(self, fn, items: list) -> list:
        """Run ``fn`` over ``items`` (largest first); the first error cancels the rest."""
        if not items:
            return []
        order = sorted(range(len(items)), key=lambda i: -items[i].length)
        results: list = [None] * len(items)
        errors: list[BaseException] = []

        def run(i):
            if self.cancel.is_set():
                return
            try:
                results[i] = fn(items[i])
            except _Cancelled:
                pass
            except BaseException as exc:  # noqa: BLE001 - re-raised below, first error wins
                errors.append(exc)
                self.cancel.set()

        if self.threads == 1 or sum(it.length for it in items) - items[order[0]].length < PARALLEL_MIN_BYTES:
            for i in order:
                run(i)
        else:
            with ThreadPoolExecutor(min(self.threads, len(items)), thread_name_prefix="hpcio-stage") as pool:
                list(pool.map(run, order))
        if errors:
            raise errors[0]
        return results

    # --- hashing existing files
    def hash_file(self, path: str, algo: str, chunk_bytes: int | None) -> Digest:
        buf = self._buffer()
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            if algo == TREE_ALGO:
                size = os.fstat(fd).st_size
                chunk_digests = []
                for offset in range(0, max(size, 1), chunk_bytes):
                    h = xxhash.xxh3_64()
                    _hash_range(fd, offset, min(chunk_bytes, size - offset), h, view,
                                "file shrank while being verified", self._tick_zero)
                    chunk_digests.append(h.digest())
                return Digest.from_tree(chunk_digests, chunk_bytes)
            h = new_hasher(algo)
            _hash_range(fd, 0, os.fstat(fd).st_size, h, view, "file shrank while being verified",
                        self._tick_zero)
            return Digest(algo, h.hexdigest())

    def _tick_zero(self) -> bool:
        """The cancellation check between two reads of a verification (raises)."""
        self._tick(0)
        return False

    def check(self, item: _Item) -> tuple[str, bool]:
        """Verify a destination file already present; True when it can be kept."""
        rel = item.rel
        expected = self.plan.reference.get(rel) or self.plan.prior[rel].digest
        got = self.hash_file(self.dst_path(rel), expected.algo, expected.chunk_bytes)
        return rel, got.digest == expected.digest

    # --- copying
    def _copy_range(self, src_fd: int, dst_fd: int, offset: int, length: int, h) -> None:
        if length == 0:
            return
        if self._cfr_ok and self._copy_range_kernel(src_fd, dst_fd, offset, length, h):
            return
        view = memoryview(self._buffer())
        pos = flushed = 0
        while pos < length:
            n = os.preadv(src_fd, [view[: min(len(view), length - pos)]], offset + pos)
            if n == 0:
                raise StagingError("source file shrank during the copy", offset=offset + pos)
            h.update(view[:n])
            done = 0
            while done < n:
                done += os.pwrite(dst_fd, view[done:n], offset + pos + done)
            pos += n
            if self.durable and pos - flushed >= WRITEBACK_BYTES:
                start_writeback(dst_fd, offset + flushed, pos - flushed)
                flushed = pos
            self._tick(n)

    def _copy_range_kernel(self, src_fd, dst_fd, offset, length, h) -> bool:
        """Copy inside the kernel while a second thread hashes the source range.

        The hasher reads the source's pages from the page cache through a small buffer of
        its own (a read-only map of the file measured slower: its page faults and unmap
        cost more than the hash), so a file costs about what the copy alone does.
        Returns False (nothing copied, ``h`` reset) when this filesystem pair refuses
        copy_file_range.
        """
        hasher = _RangeHasher(h, src_fd, offset, length)
        pos = 0
        try:
            while pos < length:
                try:
                    n = os.copy_file_range(src_fd, dst_fd, min(BLOCK_BYTES, length - pos),
                                           offset + pos, offset + pos)
                except OSError as exc:
                    if pos == 0 and exc.errno in _CFR_UNSUPPORTED:
                        self._cfr_ok = False
                        hasher.join(abandon=True)
                        h.reset()
                        return False
                    raise
                if n == 0:
                    raise StagingError("source file shrank during the copy", offset=offset + pos)
                if self.durable:
                    start_writeback(dst_fd, offset + pos, n)
                pos += n
                self._tick(n)
        finally:
            hasher.join(abandon=pos < length)
        return True

    def copy_whole(self, item: _Item) -> FileRecord:
        rel, sf = item.rel, self.files[item.rel]
        algo, _ = _digest_scheme(sf.size, self.plan.reference.get(rel), 1 << 62)
        h = new_hasher(algo)
        tmp = self.tmp_path(rel)
        with _io_errors(self.src_path(rel), tmp):
            src_fd = os.open(self.src_path(rel), os.O_RDONLY)
            try:
                dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    self._copy_range(src_fd, dst_fd, 0, sf.size, h)
                    os.fchmod(dst_fd, sf.mode)
                    if self.durable:
                        os.fsync(dst_fd)
                finally:
                    os.close(dst_fd)
            except BaseException:
                _unlink_quiet(tmp)
                raise
            finally:
                os.close(src_fd)
        digest = Digest(algo, h.hexdigest())
        return self._publish(rel, sf, digest)

    def copy_chunk(self, item: _Item) -> tuple[str, int, bytes]:
        tmp = self.tmp_path(item.rel)
        h = xxhash.xxh3_64()
        with _io_errors(self.src_path(item.rel), tmp):
            src_fd = os.open(self.src_path(item.rel), os.O_RDONLY)
            try:
                dst_fd = os.open(tmp, os.O_WRONLY)
                try:
                    self._copy_range(src_fd, dst_fd, item.offset, item.length, h)
                    if self.durable:
                        os.fsync(dst_fd)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
        return item.rel, item.chunk, h.digest()

    def finish_chunked(self, rel: str, chunk_digests: list[bytes], chunk_bytes: int) -> FileRecord:
        sf = self.files[rel]
        tmp = self.tmp_path(rel)
        with _io_errors(self.src_path(rel), tmp):
            os.chmod(tmp, sf.mode)
        return self._publish(rel, sf, Digest.from_tree(chunk_digests, chunk_bytes))

    def _publish(self, rel: str, sf: SourceFile, digest: Digest) -> FileRecord:
        tmp = self.tmp_path(rel)
        expected = self.plan.reference.get(rel)
        if expected is not None and expected.digest != digest.digest:
            _unlink_quiet(tmp)
            raise ChecksumMismatchError(
                f"{digest.algo} of the copied bytes is {digest.digest}, but the source "
                f"{self.plan.reference_origin[rel]} records {expected.digest}",
                path=self.src_path(rel),
            )
        with _io_errors(self.src_path(rel), tmp):
            os.rename(tmp, self.dst_path(rel))
        record = FileRecord(rel, sf.size, digest, sf.mtime_ns)
        if self.journal is not None:
            with self._journal_lock:
                self.journal.append(record)
        return record


def _hash_range(fd: int, offset: int, length: int, h, view: memoryview, shrank: str, stop) -> None:
    """Feed bytes ``offset .. offset + length`` of ``fd`` to ``h``, read through ``view``.

    ``stop()`` runs after each read: it may raise, or return True to end early.  A file
    that ends before ``length`` raises StagingError(``shrank``) at the offset reached.
    """
    pos = 0
    while pos < length:
        n = os.preadv(fd, [view[: min(len(view), length - pos)]], offset + pos)
        if n == 0:
            raise StagingError(shrank, offset=offset + pos)
        h.update(view[:n])
        pos += n
        if stop():
            return


class _RangeHasher:
    """Feeds bytes ``offset .. offset + length`` of ``fd`` to ``h``, in a thread of its own.

    It reads with ``pread`` through a BUFFER_BYTES buffer: the GIL is free while it reads,
    and xxhash holds it only for one buffer's hash (about 40 µs) at a time.
    """

    def __init__(self, h, fd: int, offset: int, length: int):
        self.h, self.fd, self.offset, self.length = h, fd, offset, length
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="hpcio-stage-hash", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            view = memoryview(bytearray(min(BUFFER_BYTES, max(self.length, 1))))
            _hash_range(self.fd, self.offset, self.length, self.h, view,
                        "source file shrank during the copy", self.stop.is_set)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def join(self, abandon: bool = False) -> None:
        """Wait for the digest (or, with ``abandon``, for the thread to stop reading)."""
        if abandon:
            self.stop.set()
        self.thread.join()
        if self.error is not None and not abandon:
            raise self.error


class _io_errors:
    """Turn OSError into StagingError naming the file, with ENOSPC/EDQUOT called out."""

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not isinstance(exc, OSError) or isinstance(exc, StagingError):
            return False
        if exc.errno in _NO_SPACE:
            what = "disk quota exceeded (EDQUOT)" if exc.errno == errno.EDQUOT else "no space left (ENOSPC)"
            raise StagingError(f"{what} while copying {self.src}", path=self.dst) from exc
        raise StagingError(f"{exc.strerror or exc} while copying {self.src}",
                           path=exc.filename or self.dst) from exc


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _split_items(plan: StagePlan, rels: Iterable[str], chunk_bytes: int) -> tuple[list[_Item], dict[str, int]]:
    """Work items: whole files, or chunks for files copied under the tree checksum."""
    items, chunked = [], {}
    files = plan.by_rel()
    for rel in rels:
        size = files[rel].size
        algo, cb = _digest_scheme(size, plan.reference.get(rel), chunk_bytes)
        if algo == TREE_ALGO:
            chunked[rel] = cb
            for k, offset in enumerate(range(0, max(size, 1), cb)):
                items.append(_Item(rel, offset, min(cb, size - offset), k))
        else:
            items.append(_Item(rel, 0, size, None))
    return items, chunked


def _assign(items: list[_Item], size: int, rank: int) -> list[_Item]:
    """This rank's share: largest item first to the least loaded rank (deterministic)."""
    if size == 1:
        return items
    loads = [0] * size
    mine = []
    for item in sorted(items, key=lambda it: (-it.length, it.rel, it.offset)):
        target = min(range(size), key=lambda r: (loads[r], r))
        loads[target] += max(item.length, 1)
        if target == rank:
            mine.append(item)
    return mine


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
    """The staging run shared by one process (``SelfComm``) and by MPI ranks."""
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
    sync_dir = fsync_dir if durable else (lambda _path: None)
    engine = _Engine(plan, threads, method, tmp_suffix, None, None, durable)

    # 1. verify what an earlier run left, spread across ranks; re-copy what fails.
    check_items = [_Item(rel, 0, plan.by_rel()[rel].size, None) for rel in plan.to_check]
    checked = _collective(comm, engine.map, engine.check, _assign(check_items, comm.size, comm.rank))
    verdicts = dict(v for part in comm.allgather(checked) for v in part if v is not None)
    kept = [rel for rel in plan.to_check if verdicts[rel]]
    bad = [rel for rel in plan.to_check if not verdicts[rel]]
    to_copy = sorted(plan.to_copy + bad)
    if bad:
        plan.need_bytes += sum(plan.by_rel()[rel].size for rel in bad)
        if not plan.fits:
            raise InsufficientSpaceError(plan.refusal(), path=plan.dst)
    items, chunked = _split_items(plan, to_copy, chunk_bytes)

    def prepare():
        # The verified files go into the journal before the old manifest is withdrawn,
        # so an interruption from here on still resumes without re-reading them.
        os.makedirs(plan.dst, exist_ok=True)
        journal = Journal(plan.dst, 0, durable)
        for rel in kept:
            journal.append(_kept_record(plan, rel))
        journal.close()
        if plan.old_manifest:
            _unlink_quiet(os.path.join(plan.dst, MANIFEST_NAME))
        for rel in plan.stale:
            _unlink_quiet(os.path.join(plan.dst, rel))
        for d in plan.dirs:
            os.makedirs(os.path.join(plan.dst, d), exist_ok=True)
        for rel, _cb in chunked.items():
            fd = os.open(engine.tmp_path(rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.ftruncate(fd, plan.by_rel()[rel].size)
            finally:
                os.close(fd)
        # Re-staging must not hand a purge policy the times of the first copy.
        for rel in kept:
            os.utime(engine.dst_path(rel))
        sync_dir(plan.dst)

    _on_root(comm, _wrap_io(prepare, plan.dst))
    comm.Barrier()

    # 2. copy: whole files are published by the rank that copied them; chunked files by
    #    rank 0 once every chunk has landed.
    mine = _assign(items, comm.size, comm.rank)
    progress = _Progress(sum(it.length for it in mine), show_progress and comm.rank == 0, "stage")
    engine.progress = progress
    engine.journal = Journal(plan.dst, comm.rank, durable)
    try:
        outputs = _collective(
            comm, engine.map, lambda it: engine.copy_whole(it) if it.chunk is None else engine.copy_chunk(it), mine
        )
    finally:
        engine.journal.close()
        progress.close()
    gathered = [o for part in comm.allgather(outputs) for o in part]
    records = {r.path: r for r in gathered if isinstance(r, FileRecord)}
    chunks: dict[str, dict[int, bytes]] = {}
    for o in gathered:
        if isinstance(o, tuple):
            chunks.setdefault(o[0], {})[o[1]] = o[2]

    def publish():
        engine.journal = Journal(plan.dst, 0, durable)
        try:
            for rel, cb in chunked.items():
                digests = [chunks[rel][k] for k in range(len(chunks[rel]))]
                records[rel] = engine.finish_chunked(rel, digests, cb)
        finally:
            engine.journal.close()
        for rel in kept:
            records[rel] = _kept_record(plan, rel)
        # Renames and new directories become durable before the manifest says "complete".
        for d in [os.path.join(plan.dst, d) for d in reversed(plan.dirs)] + [plan.dst]:
            sync_dir(d)
        manifest = Manifest(source=plan.src, files=list(records.values()), job_id=os.environ.get("SLURM_JOB_ID"))
        path = write_manifest(plan.dst, manifest, tmp_suffix, durable)
        for journal in _journal_paths(plan.dst):
            _unlink_quiet(journal)
        return path

    result.manifest = _on_root(comm, _wrap_io(publish, plan.dst))
    result.copied = sorted(plan.to_copy)
    result.recopied = sorted(bad)
    result.kept = sorted(kept)
    result.bytes_copied = sum(plan.by_rel()[rel].size for rel in to_copy)
    result.seconds = time.perf_counter() - t0
    return result


def _kept_record(plan: StagePlan, rel: str) -> FileRecord:
    sf = plan.by_rel()[rel]
    digest = plan.reference.get(rel) or plan.prior[rel].digest
    return FileRecord(rel, sf.size, digest, sf.mtime_ns)


def _journal_paths(dst: str) -> list[str]:
    return glob.glob(os.path.join(glob.escape(dst), JOURNAL_GLOB))


def _wrap_io(fn, dst):
    def wrapped():
        with _io_errors("the staging metadata", dst):
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
    comm : mpi4py communicator, optional
        Default: ``COMM_WORLD`` when launched by mpiexec/srun with more than one process.
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

    Returns
    -------
    StageResult

    Raises
    ------
    InsufficientSpaceError
        The plan needs more bytes or inodes than the destination has free.
    ChecksumMismatchError
        A copied file disagrees with the checksum its source records.
    StagingError
        Any I/O failure (``ENOSPC``/``EDQUOT`` named as such).
    """
    if method not in ("auto", "copy_file_range", "readwrite"):
        raise HpcioError(f"method must be 'auto', 'copy_file_range' or 'readwrite', got {method!r}")
    threads = default_threads() if threads is None else int(threads)
    if threads < 1:
        raise HpcioError(f"threads must be at least 1, got {threads}")
    plan_kw = dict(chunk_bytes=chunk_bytes, node_local=node_local, tiers=tiers, fs_stat=fs_stat)
    run_kw = dict(threads=threads, dry_run=dry_run, method=method, chunk_bytes=chunk_bytes,
                  show_progress=progress, tmp_suffix=tmp_suffix, fsync=fsync)
    if comm is None:
        comm = _mpi.get_comm(use_mpi)

    if comm is None:
        if _mpi.launcher_world() > 1:
            # Several tasks but no MPI: elect copiers from the launcher so they do not race.
            local = node_local if node_local is not None else is_node_local(dst, tiers or resolve_tiers())
            leader = _mpi.launcher_rank(local=local) == 0
            if not leader:
                plan = plan_stage(src, dst, **{**plan_kw, "node_local": local})
                return StageResult(plan=plan, dry_run=dry_run, copier=False)
        return _run({"pos": (src, dst), "kw": plan_kw}, _mpi.SelfComm(), **run_kw)

    if node_local is None:
        node_local = bool(comm.allgather(is_node_local(dst, tiers or resolve_tiers()))[0])
    plan_kw["node_local"] = node_local
    if not node_local:
        return _run({"pos": (src, dst), "kw": plan_kw}, comm, **run_kw)

    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        leader = node.Get_rank() == 0
        if leader:
            result = _collective(comm, _run, {"pos": (src, dst), "kw": plan_kw}, _mpi.SelfComm(), **run_kw)
        else:
            result = _collective(comm, lambda: None)
        leader_result = node.bcast(result, root=0)
        if not leader:
            leader_result.copier = False
        return leader_result
    finally:
        node.Free()


def unstage(path, *, dry_run: bool = False) -> list[str]:
    """Remove a staged copy made by :func:`stage`: the files its manifest lists, then
    the manifest, leftover journals and temporary files, and directories left empty.

    Files the manifest does not list are kept (with their directories).

    Returns
    -------
    list of str
        Paths removed (or that would be, with ``dry_run``).

    Raises
    ------
    StagingError
        ``path`` holds no staging manifest: it was not made by ``hpcio stage``.
    """
    path = os.path.abspath(os.fspath(path))
    manifest = read_manifest(path) if os.path.isdir(path) else None
    if manifest is None:
        raise StagingError(f"refusing to remove a directory without a staging manifest ({MANIFEST_NAME})",
                           path=path)
    listed = {rec.path for rec in manifest.files}
    targets = [os.path.join(path, rel) for rel in sorted(listed)]
    for root, _dirs, names in os.walk(path):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/")
            head, mark, _ = rel.rpartition(_TMP_MARK)
            if (mark and (head in listed or head == MANIFEST_NAME)) or (root == path and _is_journal(name)):
                targets.append(os.path.join(root, name))
    targets.append(os.path.join(path, MANIFEST_NAME))
    if dry_run:
        return targets
    removed = []
    for target in targets:
        try:
            os.unlink(target)
            removed.append(target)
        except FileNotFoundError:
            pass
    for root, _dirs, _names in sorted(os.walk(path, topdown=False), key=lambda t: -len(t[0])):
        try:
            os.rmdir(root)
        except OSError:
            pass  # not empty: holds files the manifest does not list
    return removed

