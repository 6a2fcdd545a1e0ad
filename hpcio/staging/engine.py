"""The copy engine: copies and verifies files with a thread pool inside one process.

Work is cut into items (whole files, or chunks of files checked by a tree checksum);
each is copied through a cache-sized buffer and hashed in the same pass, or copied in
the kernel (``copy_file_range``) while a second thread hashes the source.  A file is
written under a temporary name and renamed once its checksum agrees with the one the
source records.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import xxhash

from .._core._io import start_writeback
from ..errors import ChecksumMismatchError, SourceChangedError, StagingError
from ..progress import ProgressDisplay
from .manifest import TMP_MARK, TREE_ALGO, Digest, FileRecord, Journal, new_hasher
from .plan import SourceFile, StagePlan, digest_scheme

__all__ = ["CopyEngine", "Item", "split_items", "assign_items", "io_errors", "unlink_quiet"]

BLOCK_BYTES = 16 * 2**20  # one copy_file_range call
# Bytes that pass through user space (read/write copies, hashing) go through a buffer that
# stays in the CPU caches: a larger one is evicted by every pass, with the page cache's
# pages.
BUFFER_BYTES = 2**20
# Starting a thread pool costs a few milliseconds, more than copying a few megabytes:
# items are copied on the calling thread when all but the largest add up to less than
# this.
PARALLEL_MIN_BYTES = 8 * 2**20
# A durable copy has the kernel start writing each this many bytes to storage as soon as
# they are copied, so storage works during the copy and the fsync waits only for the tail.
WRITEBACK_BYTES = 8 * 2**20
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# copy_file_range refusals that mean "this pair of filesystems cannot": use read/write.
_CFR_UNSUPPORTED = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.EPERM)


class _Cancelled(Exception):
    """Ends a copy or check once another item has failed; :meth:`CopyEngine.map` catches
    it, so it never reaches the caller."""


@dataclasses.dataclass(frozen=True)
class Item:
    rel: str
    offset: int
    length: int
    chunk: int | None  # None: the whole file in one piece


class CopyEngine:
    """Copies and verifies items with a thread pool inside one process."""

    def __init__(self, plan: StagePlan, threads: int, method: str, tmp_suffix: str, journal: Journal | None,
                 progress: ProgressDisplay | None, durable: bool = True):
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
        # in-kernel copy plus a second read of the source to hash it.  copy_file_range is
        # for filesystems that copy on the server or share extents (NFS 4.2, XFS and btrfs
        # reflinks).
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
        return self.files[rel].origin or os.path.join(self.src_root, rel)

    def _open_source(self, rel: str) -> int:
        """The source file, never through a link that appeared since the plan (a
        followed link was resolved then, into ``origin``)."""
        return os.open(self.src_path(rel), os.O_RDONLY | os.O_NOFOLLOW)

    def dst_path(self, rel: str) -> str:
        return os.path.join(self.plan.dst, rel)

    def tmp_path(self, rel: str) -> str:
        return f"{self.dst_path(rel)}{TMP_MARK}{self.tmp_suffix}"

    def _tick(self, n: int) -> None:
        if self.cancel.is_set():
            raise _Cancelled()
        if self.progress is not None:
            self.progress.advance(n)

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

    def check(self, item: Item) -> tuple[str, bool]:
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

    def copy_whole(self, item: Item) -> FileRecord:
        """Copy a whole file, re-copied once if it changes (same size, new mtime) while
        being copied; a source that changes again, or changes size, is refused, so a
        torn copy is never published with a digest that matches it."""
        rel, sf = item.rel, self.files[item.rel]
        try:
            return self._copy_whole_once(rel, sf)
        except SourceChangedError as exc:
            if exc.now is None or exc.now.st_size != sf.size:
                raise
            sf = dataclasses.replace(sf, mtime_ns=exc.now.st_mtime_ns)
        return self._copy_whole_once(rel, sf)

    def _copy_whole_once(self, rel: str, sf: SourceFile) -> FileRecord:
        algo, _ = digest_scheme(sf.size, self.plan.reference.get(rel), 1 << 62)
        h = new_hasher(algo)
        tmp = self.tmp_path(rel)
        with io_errors(self.src_path(rel), tmp):
            src_fd = self._open_source(rel)
            try:
                check_unchanged(src_fd, sf, self.src_path(rel), "since it was planned")
                dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                try:
                    self._copy_range(src_fd, dst_fd, 0, sf.size, h)
                    check_unchanged(src_fd, sf, self.src_path(rel), "while it was copied")
                    os.fchmod(dst_fd, sf.mode)
                    if self.durable:
                        os.fsync(dst_fd)
                finally:
                    os.close(dst_fd)
            except BaseException:
                unlink_quiet(tmp)
                raise
            finally:
                os.close(src_fd)
        digest = Digest(algo, h.hexdigest())
        return self._publish(rel, sf, digest)

    def copy_chunk(self, item: Item) -> tuple[str, int, bytes]:
        tmp = self.tmp_path(item.rel)
        h = xxhash.xxh3_64()
        sf = self.files[item.rel]
        with io_errors(self.src_path(item.rel), tmp):
            src_fd = self._open_source(item.rel)
            try:
                dst_fd = os.open(tmp, os.O_WRONLY | os.O_NOFOLLOW)
                try:
                    check_unchanged(src_fd, sf, self.src_path(item.rel), "since it was planned")
                    self._copy_range(src_fd, dst_fd, item.offset, item.length, h)
                    check_unchanged(src_fd, sf, self.src_path(item.rel), "while it was copied")
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
        with io_errors(self.src_path(rel), tmp):
            # a chunk copied early may predate a change that a later chunk saw after
            try:
                check_unchanged(None, sf, self.src_path(rel), "while it was copied")
            except SourceChangedError:
                unlink_quiet(tmp)
                raise
            os.chmod(tmp, sf.mode)
        return self._publish(rel, sf, Digest.from_tree(chunk_digests, chunk_bytes))

    def _publish(self, rel: str, sf: SourceFile, digest: Digest) -> FileRecord:
        tmp = self.tmp_path(rel)
        expected = self.plan.reference.get(rel)
        if expected is not None and expected.digest != digest.digest:
            unlink_quiet(tmp)
            raise ChecksumMismatchError(
                f"{digest.algo} of the copied bytes is {digest.digest}, but the source "
                f"{self.plan.reference_origin[rel]} records {expected.digest}",
                path=self.src_path(rel),
            )
        with io_errors(self.src_path(rel), tmp):
            os.rename(tmp, self.dst_path(rel))
        record = FileRecord(rel, sf.size, digest, sf.mtime_ns)
        if self.journal is not None:
            with self._journal_lock:
                self.journal.append(record)
        return record


def check_unchanged(fd: int | None, sf: SourceFile, path: str, when: str) -> None:
    """SourceChangedError when the source (open as ``fd``, else at ``path``) no longer
    has the size and modification time (ns) the plan recorded; ``now`` holds its stat."""
    st = os.fstat(fd) if fd is not None else os.stat(path, follow_symlinks=False)
    if (st.st_size, st.st_mtime_ns) != (sf.size, sf.mtime_ns):
        error = SourceChangedError(
            f"source file changed {when}: {sf.size} bytes, mtime {sf.mtime_ns} ns planned, "
            f"{st.st_size} bytes, mtime {st.st_mtime_ns} ns now; stage again once it is stable",
            path=path)
        error.now = st
        raise error


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
    and xxhash holds it only for one buffer's hash at a time.
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


class io_errors:
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


def unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def split_items(plan: StagePlan, rels: Iterable[str], chunk_bytes: int) -> tuple[list[Item], dict[str, int]]:
    """Work items: whole files, or chunks for files copied under the tree checksum."""
    items, chunked = [], {}
    files = plan.by_rel()
    for rel in rels:
        size = files[rel].size
        algo, cb = digest_scheme(size, plan.reference.get(rel), chunk_bytes)
        if algo == TREE_ALGO:
            chunked[rel] = cb
            for k, offset in enumerate(range(0, max(size, 1), cb)):
                items.append(Item(rel, offset, min(cb, size - offset), k))
        else:
            items.append(Item(rel, 0, size, None))
    return items, chunked


def assign_items(items: list[Item], size: int, rank: int) -> list[Item]:
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
