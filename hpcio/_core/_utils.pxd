# cython: language_level=3, boundscheck=False, wraparound=False
"""Inline helpers shared by the _core modules: buffer access and the one place where C
status codes become hpcio exceptions."""

from libc.stdint cimport int64_t, uint8_t, uint64_t

from ._chpcio cimport (
    HPCIO_E_ARG, HPCIO_E_BUFFER, HPCIO_E_CODEC, HPCIO_E_CORRUPT, HPCIO_E_IO,
    HPCIO_E_LIMIT, HPCIO_E_NOMEM, HPCIO_E_RANGE, HPCIO_E_TRUNCATED, HPCIO_OK,
    hpcio_error, hpcio_status,
)

cdef inline const uint8_t *data_ptr(const uint8_t[::1] view) noexcept nogil:
    # Kernels get a valid pointer even for empty buffers (memchr/memcpy must not see NULL).
    if view.shape[0] == 0:
        return <const uint8_t *><const char *>b""
    return &view[0]


cdef inline const uint64_t *u64_ptr(const uint64_t[::1] view) noexcept nogil:
    if view.shape[0] == 0:
        return NULL
    return &view[0]


cdef inline object byte_view(object obj):
    """A C-contiguous unsigned-byte view of any buffer (bytes, bytearray, mmap, numpy)."""
    cdef object mv = memoryview(obj)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


cdef inline int raise_error(hpcio_status status, const hpcio_error *err, object path,
                            int64_t offset, int64_t sample) except -1:
    """Raise the hpcio exception for a failed kernel, located at path/offset/sample."""
    from hpcio import errors
    import errno

    cdef str msg = (<const char *>err.msg).decode("utf-8", "replace")
    where = dict(path=path, offset=offset if offset >= 0 else None,
                 sample=sample if sample >= 0 else None)
    if status == HPCIO_E_RANGE:
        raise errors.IndexOutOfRangeError(msg, **where)
    if status == HPCIO_E_TRUNCATED:
        raise errors.TruncatedShardError(msg, **where)
    if status == HPCIO_E_CORRUPT:
        raise errors.CorruptShardError(msg, **where)
    if status == HPCIO_E_LIMIT:
        raise errors.DecompressionLimitError(msg, **where)
    if status == HPCIO_E_CODEC:
        raise errors.DecodeError(msg, **where)
    if status == HPCIO_E_IO:
        cls = (errors.ShardNotFoundError if err.sys_errno == errno.ENOENT
               else errors.ShardReadError)
        exc = cls(msg, **where)
        # errno only: with strerror set too, OSError.__str__ would drop the location.
        exc.errno = err.sys_errno
        raise exc
    if status == HPCIO_E_NOMEM:
        raise errors.OutOfMemoryError(msg or "out of memory", **where)
    if status == HPCIO_E_BUFFER:
        raise BufferError(msg)
    if status == HPCIO_E_ARG:
        raise errors.InvalidArgumentError(msg)
    raise SystemError(f"hpcio kernel returned unknown status {<int>status}: {msg}")


cdef inline int check(hpcio_status status, const hpcio_error *err, object path,
                      int64_t offset_base, int64_t sample_base) except -1:
    """Raise for a failed status; err.offset/err.item are relative to the bases.

    A base of -1 means unknown: a relative position then stands alone, and with no
    relative position either the location is left out."""
    cdef int64_t offset = offset_base, sample = sample_base
    if status == HPCIO_OK:
        return 0
    if err.offset >= 0:
        offset = (offset_base if offset_base > 0 else 0) + err.offset
    if err.item >= 0:
        sample = (sample_base if sample_base > 0 else 0) + err.item
    return raise_error(status, err, path, offset, sample)
