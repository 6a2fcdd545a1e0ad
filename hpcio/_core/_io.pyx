# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""Shard file access: buffered pread and mmap (compiled, private)."""

import mmap
import os

import numpy as np

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.errno cimport errno
from libc.string cimport memcpy
from posix.types cimport off_t
from posix.unistd cimport SEEK_END, close as c_close, lseek

from ._chpcio cimport (
    HPCIO_E_BUFFER, HPCIO_OK, hpcio_error, hpcio_error_clear, hpcio_gather, hpcio_keep_freed_heap,
    hpcio_map_probe, hpcio_map_resident, hpcio_pread_full, hpcio_pread_records, hpcio_read_extents, hpcio_readahead,
    hpcio_readahead_done, hpcio_readahead_extents_start, hpcio_readahead_finish, hpcio_readahead_start,
    hpcio_start_writeback,
    hpcio_status,
)
from ._utils cimport byte_view, check, data_ptr, u64_ptr

from ..errors import ClosedError, InvalidArgumentError

DEFAULT_BUFFER_SIZE = 8 << 20


def _open_shard(path):
    from hpcio.errors import ShardNotFoundError

    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ShardNotFoundError("shard file does not exist", path=path) from None


# Mappings at least this large are advised for huge pages.
_HUGE_PAGE = 2 << 20


def map_file(fd):
    """A read-only mmap of the whole (non-empty) file open on ``fd``.

    A mapping of 2 MiB or more is advised for huge pages (``MADV_HUGEPAGE``): what it
    reads from disk enters the page cache as 2 MiB pages, which every later mapping of
    the file (each DataLoader worker's, each epoch's) maps with one page fault per 2 MiB
    instead of one per 64 KiB.  Pages already cached
    keep their size: the advice costs nothing where the kernel cannot follow it.
    """
    m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    if len(m) >= _HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages
            pass
    return m


def _ranges(starts, ends):
    s = np.ascontiguousarray(starts, dtype=np.uint64).ravel()
    e = np.ascontiguousarray(ends, dtype=np.uint64).ravel()
    if s.shape[0] != e.shape[0]:
        raise InvalidArgumentError(f"{s.shape[0]} starts but {e.shape[0]} ends")
    return s, e


cdef int _check_records(hpcio_status st, hpcio_error *err, object path,
                        object sample_base) except -1:
    """check() for batch reads, where err.item is a position in the request: a sample
    only when the caller numbers them."""
    if sample_base is None:
        err.item = -1
        return check(st, err, path, -1, -1)
    return check(st, err, path, -1, sample_base)


cdef object _gather(object src, object starts, object ends, object path, object sample_base):
    cdef const uint8_t[::1] data = byte_view(src)
    s, e = _ranges(starts, ends)
    cdef const uint64_t[::1] sv = s, ev = e
    cdef size_t m = sv.shape[0], j
    cdef uint64_t total = 0, src_len = data.shape[0]
    # Only valid ranges count towards the size; the kernel reports the invalid ones
    # before copying anything past them.
    with nogil:
        for j in range(m):
            if sv[j] <= ev[j] and ev[j] <= src_len:
                total += ev[j] - sv[j]
    out = PyByteArray_FromStringAndSize(NULL, total)
    positions = np.empty(m + 1, dtype=np.uint64)
    cdef uint64_t[::1] pv = positions
    cdef uint8_t *dst = <uint8_t *>PyByteArray_AS_STRING(out)
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_gather(data_ptr(data), src_len, u64_ptr(sv), u64_ptr(ev), m, dst, total,
                          &pv[0], &err)
    _check_records(st, &err, path, sample_base)
    return out, positions


def gather(src, starts, ends, *, path=None, sample_base=None):
    """Copy src[starts[j]:ends[j]] back to back in one GIL-free call.

    Returns (data, positions): a bytearray and m+1 uint64 positions of the records in it.
    Ranges past the end of ``src`` raise TruncatedShardError, decreasing ones
    CorruptShardError, naming ``path``, the byte offset of the range and, when
    ``sample_base`` is given, sample ``sample_base + j``.
    """
    return _gather(src, starts, ends, path, sample_base)


# Pieces pack_pieces takes per pass: their pointers are gathered with the GIL, then
# copied without it.
DEF _PACK_BATCH = 64


def pack_pieces(list pieces, Py_ssize_t index, Py_ssize_t offset, out):
    """Copy ``pieces[index][offset:]``, ``pieces[index + 1]``, ... back to back into the
    writable buffer ``out`` until it is full or the pieces end; the copies run without
    the GIL.

    Returns ``(index, offset, written)``: where the next call goes on (``index ==
    len(pieces)`` once every piece is packed) and the bytes written at the start of
    ``out``.  A piece is any C-contiguous buffer (bytes, bytearray, memoryview); a call
    with a full piece list packs them into chunks of ``len(out)`` bytes, the last one
    shorter, a piece split between two chunks where it crosses their boundary.
    """
    cdef uint8_t[::1] dst = byte_view(out)
    cdef Py_ssize_t cap = dst.shape[0], n = len(pieces), written = 0, at, count, held, k, length, take
    cdef const char *sources[_PACK_BATCH]
    cdef Py_ssize_t lengths[_PACK_BATCH]
    cdef Py_buffer views[_PACK_BATCH]
    cdef const char *ptr
    cdef object piece
    if index < 0 or offset < 0 or index > n:
        raise InvalidArgumentError(f"no piece {index} at byte {offset} among {n} pieces")
    while index < n and written < cap:
        count = held = 0
        at = written
        try:
            # Pointers into the pieces, which `pieces` keeps alive; buffers other than
            # bytes stay acquired until their bytes are copied.
            while count < _PACK_BATCH and index < n and written < cap:
                piece = pieces[index]
                if PyBytes_CheckExact(piece):
                    ptr = PyBytes_AS_STRING(piece)
                    length = PyBytes_GET_SIZE(piece)
                else:
                    PyObject_GetBuffer(piece, &views[held], PyBUF_SIMPLE)
                    held += 1
                    ptr = <const char *>views[held - 1].buf
                    length = views[held - 1].len
                if offset > length:
                    raise InvalidArgumentError(f"piece {index} has {length} bytes, fewer than the offset {offset}")
                take = min(length - offset, cap - written)
                sources[count] = ptr + offset
                lengths[count] = take
                count += 1
                written += take
                if offset + take == length:
                    index += 1
                    offset = 0
                else:
                    offset += take
            with nogil:
                for k in range(count):
                    if lengths[k]:
                        memcpy(&dst[at], sources[k], lengths[k])
                        at += lengths[k]
        finally:
            for k in range(held):
                PyBuffer_Release(&views[k])
    return index, offset, written


def start_writeback(target, uint64_t offset=0, uint64_t length=0):
    """Have the kernel start writing the dirty pages of a file to storage, without
    waiting for them (Linux ``sync_file_range``; elsewhere nothing is done).

    ``target`` is a path or an open file descriptor; ``offset`` and ``length`` bound the
    bytes concerned (``length`` 0: to the end of the file).  A later ``fsync`` then waits
    only for what is still in flight, so storage works while the caller goes on.  Errors
    name the path (or the descriptor) and the offset.
    """
    cdef hpcio_error err
    cdef hpcio_status st
    cdef int fd
    cdef bint own = not isinstance(target, int)
    fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC) if own else target
    try:
        hpcio_error_clear(&err)
        with nogil:
            st = hpcio_start_writeback(fd, offset, length, &err)
        check(st, &err, os.fspath(target) if own else f"file descriptor {fd}", -1, -1)
    finally:
        if own:
            os.close(fd)


# Heap that glibc keeps when it is freed, from keep_freed_heap() on: twice this.
DEF _KEPT_HEAP_BLOCK = 16 << 20
cdef bint _heap_kept = False


def keep_freed_heap():
    """Have glibc keep up to 32 MiB of freed heap for the next allocations instead of
    giving it back to the system at once (done once per process; forked workers inherit
    it).

    By default glibc returns the top of its heap whenever more than 128 KiB is free
    there, and the next allocations fault it in again page by page; a reader that hands
    out large values as copies frees them a batch at a time.  This changes the whole
    process, so hpcio calls it only on the user's request (:func:`hpcio.tune`).  glibc raises its thresholds itself the first time it frees a
    block it had to map on its own, as most programs soon do; this frees one such block
    (16 MiB, untouched) now.  With another C library it allocates and frees a block.
    """
    global _heap_kept
    if not _heap_kept:
        hpcio_keep_freed_heap(_KEPT_HEAP_BLOCK)
        _heap_kept = True


cdef class ShardFile:
    """A file opened for reading with pread into a reusable buffer (default 8 MiB).

    ``pread`` may be called from several threads; ``read_records`` reuses one buffer,
    so each thread needs its own ShardFile.
    """

    cdef int fd
    cdef readonly str path
    cdef readonly uint64_t size
    cdef object _buf
    cdef uint64_t _buffer_size

    def __cinit__(self):
        self.fd = -1

    def __init__(self, path, buffer_size=DEFAULT_BUFFER_SIZE):
        if buffer_size < 1:
            raise InvalidArgumentError(f"buffer_size must be >= 1, got {buffer_size}")
        self.path = os.fspath(path)
        self._buffer_size = buffer_size
        self.fd = _open_shard(self.path)
        self.size = os.fstat(self.fd).st_size
        self._buf = None

    cdef int _check_open(self) except -1:
        if self.fd < 0:
            raise ClosedError(f"I/O operation on closed shard file ({self.path})")
        return 0

    def pread(self, offset, length):
        """Exactly ``length`` bytes at ``offset`` (TruncatedShardError if the file is shorter)."""
        from hpcio.errors import TruncatedShardError

        self._check_open()
        if offset < 0 or length < 0:
            raise InvalidArgumentError(f"offset and length must be >= 0, got {offset} and {length}")
        # Checked before allocating, so a hostile length cannot exhaust memory.
        if offset + length > self.size:
            raise TruncatedShardError(
                f"read of {length} bytes passes the end of the file ({self.size} bytes)",
                path=self.path, offset=offset)
        out = PyBytes_FromStringAndSize(NULL, length)
        cdef uint8_t *dst = <uint8_t *>PyBytes_AS_STRING(out)
        cdef uint64_t n = length, off = offset
        cdef hpcio_error err
        cdef hpcio_status st
        hpcio_error_clear(&err)
        with nogil:
            st = hpcio_pread_full(self.fd, dst, n, off, &err)
        check(st, &err, self.path, -1, -1)
        return out

    def read_records(self, starts, ends, *, sample_base=None):
        """Read as many records [starts[j], ends[j]) as fit the internal buffer.

        Ranges that touch are read with a single pread.  At least one record is read:
        the buffer grows for a single large record.  Returns (read-only view of the
        buffer, k+1 positions of the records in it, k); the view is valid until the
        next call.  Errors name the file, the byte offset and, when ``sample_base`` is
        given, sample ``sample_base + j``.
        """
        from hpcio.errors import TruncatedShardError

        self._check_open()
        s, e = _ranges(starts, ends)
        cdef const uint64_t[::1] sv = s, ev = e
        cdef size_t m = sv.shape[0], j, bad = 0
        cdef uint64_t size = self.size
        with nogil:
            for j in range(m):
                if ev[j] > size:
                    bad = j + 1
                    break
        if bad:
            raise TruncatedShardError(
                f"record ends at byte {ev[bad - 1]}, past the end of the file ({size} bytes)",
                path=self.path, offset=sv[bad - 1],
                sample=None if sample_base is None else sample_base + bad - 1)
        positions = np.zeros(m + 1, dtype=np.uint64)
        if m == 0:
            return memoryview(b""), positions, 0
        if self._buf is None:
            self._buf = np.empty(self._buffer_size, dtype=np.uint8)
        cdef uint64_t[::1] pv = positions
        cdef uint8_t[::1] buf
        cdef size_t n_done = 0
        cdef hpcio_error err
        cdef hpcio_status st
        while True:
            buf = self._buf
            hpcio_error_clear(&err)
            with nogil:
                st = hpcio_pread_records(self.fd, &sv[0], &ev[0], m, &buf[0], buf.shape[0],
                                         &pv[0], &n_done, &err)
            if st != HPCIO_E_BUFFER:
                break
            # The first record alone exceeds the buffer: grow it to fit and retry.
            self._buf = np.empty(max(ev[0] - sv[0], 2 * <uint64_t>buf.shape[0]),
                                 dtype=np.uint8)
        _check_records(st, &err, self.path, sample_base)
        view = memoryview(self._buf)[:positions[n_done]].toreadonly()
        return view, positions[:n_done + 1], n_done

    def close(self):
        """Close the file (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __dealloc__(self):
        if self.fd >= 0:
            os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"ShardFile({self.path!r}, size={self.size})"


def check_mapped_size(int fd, uint64_t size, path):
    """Raise ShardChangedError when the file open on ``fd`` is now shorter than the
    ``size`` bytes mapped from it: touching the lost pages would raise SIGBUS, which an
    I/O library may not catch (a handler is process-wide state).  One ``lseek`` to the
    end, cheaper than ``fstat``; the descriptor is only ever read with ``pread``."""
    cdef off_t end
    with nogil:
        end = lseek(fd, 0, SEEK_END)
    if end < 0:
        raise OSError(errno, os.strerror(errno), path)
    if <uint64_t>end < size:
        from hpcio.errors import ShardChangedError

        raise ShardChangedError(
            f"shard shrank to {end} bytes while mapped ({size} bytes when opened): "
            "it was truncated or rewritten in place under the reader; reopen the dataset",
            path=path, offset=end)


cdef class MappedShard:
    """A read-only mmap of a whole file; zero-copy record views.

    The file stays open (``fd``) so that :meth:`check_size` can tell, before a read
    touches the mapping, whether the file shrank under it."""

    cdef readonly str path
    cdef readonly uint64_t size
    cdef readonly int fd
    cdef object _map
    cdef object _view

    def __init__(self, path):
        self.path = os.fspath(path)
        self.fd = -1
        fd = _open_shard(self.path)
        try:
            self.size = os.fstat(fd).st_size
            # mmap refuses empty files; an empty view behaves the same for readers.
            if self.size:
                self._map = map_file(fd)
                self._view = memoryview(self._map)
            else:
                self._map = None
                self._view = memoryview(b"")
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def __dealloc__(self):
        if self.fd >= 0:
            c_close(self.fd)

    def check_size(self):
        """Raise ShardChangedError if the file is now shorter than its mapping."""
        if self.fd >= 0:
            check_mapped_size(self.fd, self.size, self.path)

    cdef int _check_open(self) except -1:
        if self._view is None:
            raise ClosedError(f"I/O operation on closed mapped shard ({self.path})")
        return 0

    def buffer(self):
        """The whole mapping (zero-copy, read-only)."""
        self._check_open()
        return self._view

    def view(self, start, end):
        """Zero-copy view of [start, end); bounds-checked (TruncatedShardError)."""
        from hpcio.errors import CorruptShardError, TruncatedShardError

        self._check_open()
        if start < 0 or end < start:
            raise CorruptShardError(
                f"record range [{start}, {end}) is not a valid byte range",
                path=self.path, offset=start if start >= 0 else None)
        if end > self.size:
            raise TruncatedShardError(
                f"record ends at byte {end}, past the end of the file ({self.size} bytes)",
                path=self.path, offset=start)
        return self._view[start:end]

    def probe_pages(self, int regions=8):
        """``(cheap, probed)``: of up to ``regions`` 2 MiB regions of the file that are in
        the page cache, how many map 1 MiB or more with one page fault (huge pages or
        large folios).  Call it on a fresh mapping, before reading through it.

        Reading many scattered records through the mapping then costs a page fault per
        megabyte or so, much less than a ``pread`` per record.  In small pages (a file
        read with small ``read`` calls, or split by the kernel's reclaim) every record
        costs a fault or two, and ``pread`` is cheaper.  Uncached regions are not probed:
        a huge-page mapping would read 2 MiB from disk for each record touched.
        """
        self._check_open()
        cdef int probed = 0, cheap = 0
        cdef const uint8_t[::1] data
        if self.size:
            data = self._map
            with nogil:
                cheap = hpcio_map_probe(&data[0], data.shape[0], regions, &probed)
        return cheap, probed

    def resident_bytes(self):
        """Bytes of the file in the page cache (``mincore`` over the mapping); the size
        when the kernel cannot say (the mapping is then read as if cached)."""
        self._check_open()
        cdef int64_t got = 0
        cdef const uint8_t[::1] data
        if self.size:
            data = self._map
            with nogil:
                got = hpcio_map_resident(&data[0], data.shape[0])
        return self.size if got < 0 else got

    def gather(self, starts, ends, *, sample_base=None):
        """Copy many records back to back in one GIL-free call: (data, m+1 positions)."""
        self._check_open()
        return _gather(self._view, starts, ends, self.path, sample_base)

    def close(self):
        """Unmap the file, or leave it to the views still alive (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._view is None:
            return
        try:
            self._view.release()
        except BufferError:
            pass
        self._view = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                # Record views handed out earlier keep the mapping; it goes with them.
                pass
            self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"MappedShard({self.path!r}, size={self.size})"


def read_extents(fds, paths, file, offsets, lengths, out, uint8_t[::1] dst, *,
                 uint64_t max_gap=0, uint64_t max_request=0, int depth=1):
    """Read the extents ``(file[j], offsets[j], lengths[j])`` into ``dst[out[j]:]`` as planned
    requests, ``depth`` of them in flight (see ``hpcio_read_extents``); ``fds[k]`` is open
    on ``paths[k]``, which errors name.  Returns ``(requests, bytes read)``."""
    cdef int[::1] fdv = np.ascontiguousarray(fds, dtype=np.intc)
    cdef const uint32_t[::1] fv = np.ascontiguousarray(file, dtype=np.uint32)
    cdef const uint64_t[::1] ov = np.ascontiguousarray(offsets, dtype=np.uint64)
    cdef const uint64_t[::1] lv = np.ascontiguousarray(lengths, dtype=np.uint64)
    cdef const uint64_t[::1] dv = np.ascontiguousarray(out, dtype=np.uint64)
    cdef size_t m = fv.shape[0]
    cdef uint64_t requests = 0, nbytes = 0
    cdef hpcio_error err
    cdef hpcio_status st
    if not (ov.shape[0] == lv.shape[0] == dv.shape[0] == m) or len(paths) != fdv.shape[0]:
        raise InvalidArgumentError("read_extents: file, offsets, lengths and out must have one entry per "
                         "extent, and paths one per file descriptor")
    if m == 0:
        return 0, 0
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_read_extents(&fdv[0], fdv.shape[0], &fv[0], &ov[0], &lv[0], &dv[0], m,
                                &dst[0] if dst.shape[0] else NULL, dst.shape[0], max_gap,
                                max_request, depth, &requests, &nbytes, &err)
    if st != HPCIO_OK:
        item = err.item
        # an extent may name a file that does not exist: that is the error being reported
        path = paths[fv[item]] if 0 <= item < <int64_t>m and fv[item] < <uint32_t>len(paths) else None
        err.item = -1  # the extent's position is not a sample number: the caller knows which
        check(st, &err, path, -1, -1)
    return requests, nbytes
cdef extern from "<fcntl.h>" nogil:
    int posix_fadvise(int fd, off_t offset, off_t length, int advice)
    enum: POSIX_FADV_WILLNEED


def will_need(int fd, starts, ends) -> None:
    """Ask the kernel to read ranges ``[starts[j], ends[j])`` of the file open on ``fd`` into
    the page cache now (``POSIX_FADV_WILLNEED``, all of them queued at once).  A batch read
    through a mapping of a cold file then takes minor faults: a major fault reads the
    kernel's whole read-around window (up to ``read_ahead_kb``) for each record, which
    in a shuffle larger than memory re-reads the dataset many times over."""
    cdef const int64_t[::1] a = np.ascontiguousarray(starts, dtype=np.int64)
    cdef const int64_t[::1] b = np.ascontiguousarray(ends, dtype=np.int64)
    cdef Py_ssize_t j, m = min(a.shape[0], b.shape[0])
    with nogil:
        for j in range(m):
            if b[j] > a[j]:
                posix_fadvise(fd, <off_t>a[j], <off_t>(b[j] - a[j]), POSIX_FADV_WILLNEED)


cdef extern from "<sys/vfs.h>" nogil:
    struct statfs:
        long f_type
    int fstatfs(int fd, statfs *buf)

# Filesystems whose own read-ahead keeps one request in flight (FUSE: the tier emulator,
# object stores and remote filesystems mounted through it).
_FUSE_SUPER_MAGIC = 0x65735546


def kernel_reads_ahead_alone(int fd) -> bool:
    """Whether the kernel's read-ahead of the file open on ``fd`` keeps a single request
    in flight: True on FUSE, where a pass in storage order then waits one latency per
    128 KiB unless :class:`ReadAhead` keeps more reads in flight; False elsewhere (block devices, tmpfs, Lustre and Spectrum Scale clients, which read ahead
    large and deep on their own, and where extra reads only compete)."""
    cdef statfs st
    if fstatfs(fd, &st) != 0:
        return False
    return <unsigned long>st.f_type == _FUSE_SUPER_MAGIC


cdef class ReadAhead:
    """Bytes ``[offset, offset + length)`` of the file open on ``fd`` read into the page cache
    in the background, ``depth`` MiB-sized reads at once (``hpcio_readahead_start``), where
    the kernel's own read-ahead keeps one request in flight: on storage with a latency per
    request, a pass in storage order then runs at the storage's bandwidth.  Pieces already
    cached are skipped.  :meth:`close` (or the object's end) stops the reads not started
    and waits for those in flight; ``close(wait=True)`` waits for every read.
    :func:`read_ahead_extents` reads scattered records ahead the same way."""
    cdef hpcio_readahead *_ra
    cdef readonly uint64_t bytes_read

    def __init__(self, int fd, uint64_t offset, uint64_t length, int depth=8):
        cdef hpcio_error err
        hpcio_error_clear(&err)
        cdef hpcio_status st = hpcio_readahead_start(fd, offset, length, depth, &self._ra, &err)
        check(st, &err, None, -1, -1)

    @property
    def done(self) -> bool:
        """Whether every read has ended (closed, or never started, counts as ended)."""
        return self._ra == NULL or hpcio_readahead_done(self._ra) != 0

    def close(self, bint wait=False) -> int:
        """Release the read-ahead, once its reads end (``wait``) or once those in flight
        do; returns the bytes it read that were not cached."""
        cdef hpcio_readahead *ra = self._ra
        cdef uint64_t got = 0
        cdef int cancel = not wait
        self._ra = NULL
        if ra != NULL:
            with nogil:
                got = hpcio_readahead_finish(ra, cancel)
            self.bytes_read = got
        return self.bytes_read

    def __dealloc__(self):
        if self._ra != NULL:
            with nogil:
                hpcio_readahead_finish(self._ra, 1)
            self._ra = NULL


def read_ahead_extents(fds, file_of, starts, ends, int depth=8, uint64_t max_gap=16384, ranks=None) -> ReadAhead:
    """Records ``[starts[j], ends[j])`` of the files open on ``fds[file_of[j]]`` read into the
    page cache in the background (``hpcio_readahead_extents_start``): sorted by file and
    offset, neighbours within ``max_gap`` bytes read as one range, in reads of at most
    1 MiB, ``depth`` at once.  A batch's records read this way while the batch before it
    is consumed are found cached when their turn comes.  With ``ranks``, records are read
    in order of ``ranks[j]`` first, and only those of one rank merged (a pass's order:
    each record read in its turn).  Descriptors are duplicated, so the caller may close
    its own."""
    cdef const int32_t[::1] f = np.ascontiguousarray(fds, dtype=np.int32)
    cdef const uint32_t[::1] w = np.ascontiguousarray(file_of, dtype=np.uint32)
    first = np.asarray(starts, dtype=np.int64)
    cdef const uint64_t[::1] a = np.ascontiguousarray(first, dtype=np.uint64)
    cdef const uint64_t[::1] n = np.maximum(np.asarray(ends, dtype=np.int64) - first, 0).astype(np.uint64)
    cdef const uint64_t[::1] r = None if ranks is None else np.ascontiguousarray(ranks, dtype=np.uint64)
    cdef Py_ssize_t m = w.shape[0]
    if a.shape[0] != m or n.shape[0] != m or (r is not None and r.shape[0] != m):
        raise InvalidArgumentError(f"file_of, starts, ends and ranks differ in length: {m}, {a.shape[0]}, "
                                   f"{n.shape[0]}, {m if r is None else r.shape[0]}")
    cdef const uint64_t *rp = NULL
    if r is not None and m:
        rp = &r[0]
    cdef ReadAhead ra = ReadAhead.__new__(ReadAhead)
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_readahead_extents_start(<const int *>&f[0] if f.shape[0] else NULL, f.shape[0],
                                           &w[0] if m else NULL, &a[0] if m else NULL,
                                           &n[0] if m else NULL, rp, m, max_gap, depth, &ra._ra, &err)
    check(st, &err, None, -1, -1)
    return ra


include "_io_batch.pxi"
