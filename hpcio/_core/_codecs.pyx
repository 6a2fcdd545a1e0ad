# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""zstd and blosc2 codecs, batch decode with the GIL released (compiled, private)."""

import numpy as np

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint64_t, UINT64_MAX
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from ._chpcio cimport (
    HPCIO_E_CORRUPT, HPCIO_E_LIMIT, HPCIO_E_TRUNCATED, HPCIO_OK, hpcio_blosc2_bound,
    hpcio_blosc2_compress, hpcio_blosc2_content_size, hpcio_blosc2_decode_known,
    hpcio_blosc2_version, hpcio_build_debug, hpcio_build_flags, hpcio_build_sanitize,
    hpcio_compiler, hpcio_error, hpcio_error_clear, hpcio_kernels, hpcio_simd,
    hpcio_status, hpcio_zstd_bound, hpcio_zstd_compress, hpcio_zstd_content_size,
    hpcio_zstd_decode_fd, hpcio_zstd_decode_known, hpcio_zstd_decode_stream,
    hpcio_zstd_decode_stream_many,
    hpcio_zstd_version_string,
)
from ._utils cimport byte_view, check, data_ptr, u64_ptr

from ..errors import InvalidArgumentError

DEFAULT_LIMIT = 1 << 30  # limit=None accepts any size (trusted data only)

ctypedef hpcio_status (*content_size_fn)(const uint8_t *, uint64_t, uint64_t *,
                                         hpcio_error *) noexcept nogil
ctypedef hpcio_status (*decode_known_fn)(const uint8_t *, uint64_t, const uint64_t *,
                                         const uint64_t *, size_t, uint8_t *,
                                         const uint64_t *, int, hpcio_error *) noexcept nogil


cdef uint64_t _limit(object limit) except? 0:
    if limit is None:
        return UINT64_MAX
    if limit < 0:
        raise InvalidArgumentError(f"limit must be >= 0, got {limit}")
    return limit


cdef hpcio_status _sizes(content_size_fn content_size, const uint8_t *src, uint64_t src_len,
                         const uint64_t *starts, const uint64_t *ends, size_t m,
                         uint64_t limit, uint64_t batch_limit, const char *codec,
                         uint64_t *sizes, bint *all_known, hpcio_error *err) noexcept nogil:
    """Check every range and read every declared size, enforcing both limits up front:
    ``limit`` on each frame's size, ``batch_limit`` on their sum (the one allocation)."""
    cdef size_t j
    cdef uint64_t total = 0
    cdef hpcio_status st
    all_known[0] = True
    for j in range(m):
        err.item = j
        err.offset = starts[j]
        if ends[j] < starts[j]:
            err.offset = starts[j]
            _set_msg(err, b"frame range ends before it starts")
            return HPCIO_E_CORRUPT
        if ends[j] > src_len:
            _set_msg(err, b"frame range passes the end of the data")
            return HPCIO_E_TRUNCATED
        st = content_size(src + starts[j], ends[j] - starts[j], &sizes[j], err)
        if st != HPCIO_OK:
            err.item = j
            err.offset = starts[j]
            return st
        if sizes[j] == UINT64_MAX:
            all_known[0] = False
        elif sizes[j] > limit:
            err.item = j
            err.offset = starts[j]
            _limit_msg(err, codec, sizes[j], limit)
            return HPCIO_E_LIMIT
        elif sizes[j] > batch_limit - total:
            snprintf(err.msg, sizeof(err.msg),
                     "%llu %ss of one batch declare more than %llu decompressed bytes in all, "
                     "the limit for one batch", <unsigned long long>(j + 1), codec,
                     <unsigned long long>batch_limit)
            return HPCIO_E_LIMIT
        else:
            total += sizes[j]
    return HPCIO_OK


cdef extern from "<stdio.h>" nogil:
    int snprintf(char *buf, size_t n, const char *fmt, ...)


cdef inline void _set_msg(hpcio_error *err, const char *msg) noexcept nogil:
    snprintf(err.msg, sizeof(err.msg), "%s", msg)


cdef inline void _limit_msg(hpcio_error *err, const char *codec, uint64_t size,
                            uint64_t limit) noexcept nogil:
    snprintf(err.msg, sizeof(err.msg),
             "%s declares %llu decompressed bytes, more than the limit of %llu",
             codec, <unsigned long long>size, <unsigned long long>limit)


cdef object _decode_one(content_size_fn content_size, decode_known_fn decode_known,
                        const char *codec, object data, object limit, object path,
                        int64_t offset, int64_t sample):
    cdef const uint8_t[::1] src = byte_view(data)
    cdef uint64_t lim = _limit(limit), size = 0, out_len = 0
    cdef uint64_t start = 0, end = src.shape[0]
    cdef uint64_t positions[2]
    cdef uint8_t *out = NULL
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = content_size(data_ptr(src), src.shape[0], &size, &err)
        if st == HPCIO_OK and size != UINT64_MAX and size > lim:
            _limit_msg(&err, codec, size, lim)
            st = HPCIO_E_LIMIT
    check(st, &err, path, offset, sample)
    if size == UINT64_MAX:
        # No declared size (JINX frames): stream-decode under the limit.
        with nogil:
            st = hpcio_zstd_decode_stream(data_ptr(src), src.shape[0], lim, &out, &out_len,
                                          &err)
        check(st, &err, path, offset, sample)
        try:
            return PyBytes_FromStringAndSize(<char *>out, out_len)
        finally:
            free(out)
    result = PyBytes_FromStringAndSize(NULL, size)
    cdef uint8_t *dst = <uint8_t *>PyBytes_AS_STRING(result)
    positions[0] = 0
    positions[1] = size
    with nogil:
        st = decode_known(data_ptr(src), src.shape[0], &start, &end, 1, dst, positions, 1,
                          &err)
    # The batch kernel names item 0 and the frame start; here the caller's place counts.
    err.item = -1
    err.offset = -1
    check(st, &err, path, offset, sample)
    return result


cdef hpcio_status _batch_total(const uint64_t *sizes, size_t m, uint64_t batch_limit,
                               const char *codec, hpcio_error *err) noexcept nogil:
    """Frames without declared sizes are bounded one by one while decoding; their sum is
    checked against ``batch_limit`` afterwards."""
    cdef size_t j
    cdef uint64_t total = 0
    for j in range(m):
        if sizes[j] > batch_limit - total:
            err.item = j
            snprintf(err.msg, sizeof(err.msg),
                     "%llu %ss of one batch decompress to more than %llu bytes in all, "
                     "the limit for one batch", <unsigned long long>(j + 1), codec,
                     <unsigned long long>batch_limit)
            return HPCIO_E_LIMIT
        total += sizes[j]
    return HPCIO_OK


cdef bytearray _sized_output(const uint64_t[::1] sizes, uint64_t[::1] positions):
    """Sets positions[j + 1] to the end of output j; a bytearray of their total size."""
    cdef size_t j
    cdef uint64_t total = 0
    for j in range(<size_t>sizes.shape[0]):
        total += sizes[j]
        positions[j + 1] = total
    return PyByteArray_FromStringAndSize(NULL, total)


cdef object _decode_many(content_size_fn content_size, decode_known_fn decode_known,
                         const char *codec, object src_obj, object starts, object ends,
                         object limit, object batch_limit, int nthreads, object path,
                         int64_t sample_base):
    cdef const uint8_t[::1] src = byte_view(src_obj)
    s = np.ascontiguousarray(starts, dtype=np.uint64).ravel()
    e = np.ascontiguousarray(ends, dtype=np.uint64).ravel()
    if s.shape[0] != e.shape[0]:
        raise InvalidArgumentError(f"{s.shape[0]} starts but {e.shape[0]} ends")
    if nthreads < 1:
        raise InvalidArgumentError(f"nthreads must be >= 1, got {nthreads}")
    cdef const uint64_t[::1] sv = s, ev = e
    cdef size_t m = sv.shape[0], j
    cdef uint64_t lim = _limit(limit), batch_lim = _limit(batch_limit)
    positions = np.zeros(m + 1, dtype=np.uint64)
    cdef uint64_t[::1] pv = positions
    sizes = np.empty(m, dtype=np.uint64)
    cdef uint64_t[::1] szv = sizes
    cdef bint all_known = True
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    cdef uint8_t **outs = NULL
    cdef uint8_t *dst
    hpcio_error_clear(&err)
    if m == 0:
        return bytearray(), positions
    with nogil:
        st = _sizes(content_size, data_ptr(src), src.shape[0], &sv[0], &ev[0], m, lim, batch_lim,
                    codec, &szv[0], &all_known, &err)
    check(st, &err, path, -1, sample_base)
    if all_known:
        out = _sized_output(szv, pv)
        dst = <uint8_t *>PyByteArray_AS_STRING(out)
        with nogil:
            st = decode_known(data_ptr(src), src.shape[0], &sv[0], &ev[0], m, dst, &pv[0],
                              nthreads, &err)
        check(st, &err, path, -1, sample_base)
        return out, positions
    # Some frames lack a declared size (only zstd): stream-decode each, then join.
    cdef bint decoded = False
    outs = <uint8_t **>malloc(m * sizeof(uint8_t *))
    if outs == NULL:
        raise MemoryError()
    try:
        with nogil:
            st = hpcio_zstd_decode_stream_many(data_ptr(src), src.shape[0], &sv[0], &ev[0], m,
                                               lim, batch_lim, outs, &szv[0], &err)
            decoded = st == HPCIO_OK
            if decoded:
                st = _batch_total(&szv[0], m, batch_lim, codec, &err)
        check(st, &err, path, -1, sample_base)
        out = _sized_output(szv, pv)
        dst = <uint8_t *>PyByteArray_AS_STRING(out)
        with nogil:
            for j in range(m):
                if szv[j]:
                    memcpy(dst + pv[j], outs[j], szv[j])
        return out, positions
    finally:
        if decoded:
            for j in range(m):
                free(outs[j])
        free(outs)


ctypedef struct _Settings:
    # One codec's compression settings, for _compress
    int level, typesize, shuffle
    bint content_size, checksum
    const char *codec

ctypedef hpcio_status (*_compress_fn)(const uint8_t *src, uint64_t n, const _Settings *s,
                                      uint8_t *dst, uint64_t cap, uint64_t *written,
                                      hpcio_error *err) noexcept nogil
ctypedef uint64_t (*_bound_fn)(uint64_t n) noexcept nogil


cdef hpcio_status _zstd_frame(const uint8_t *src, uint64_t n, const _Settings *s, uint8_t *dst,
                              uint64_t cap, uint64_t *written, hpcio_error *err) noexcept nogil:
    return hpcio_zstd_compress(src, n, s.level, s.content_size, s.checksum, dst, cap, written, err)


cdef hpcio_status _blosc2_chunk(const uint8_t *src, uint64_t n, const _Settings *s,
                                uint8_t *dst, uint64_t cap, uint64_t *written,
                                hpcio_error *err) noexcept nogil:
    return hpcio_blosc2_compress(src, n, s.codec, s.level, s.typesize, s.shuffle, dst, cap,
                                 written, err)


cdef bytes _compress(data, _bound_fn bound, _compress_fn compress, const _Settings *s):
    """data compressed by ``compress`` into at most ``bound(len(data))`` bytes."""
    cdef const uint8_t[::1] src = byte_view(data)
    cdef uint64_t cap = bound(src.shape[0]), written = 0
    cdef uint8_t *dst = <uint8_t *>malloc(cap if cap else 1)
    cdef hpcio_error err
    cdef hpcio_status st
    if dst == NULL:
        raise MemoryError()
    hpcio_error_clear(&err)
    try:
        with nogil:
            st = compress(data_ptr(src), src.shape[0], s, dst, cap, &written, &err)
        check(st, &err, None, -1, -1)
        return PyBytes_FromStringAndSize(<char *>dst, written)
    finally:
        free(dst)


def zstd_compress(data, int level=3, bint content_size=True, bint checksum=False):
    """One zstd frame; ``content_size=False`` leaves the size out of the header,
    ``checksum=True`` ends the frame with the checksum of its content."""
    cdef _Settings s = _Settings(level, 0, 0, content_size, checksum, NULL)
    return _compress(data, hpcio_zstd_bound, _zstd_frame, &s)


def zstd_decompress(data, limit=DEFAULT_LIMIT, *, path=None, offset=-1, sample=-1):
    """One frame, with or without the content size in its header (JINX frames lack it).

    A declared size above ``limit`` raises DecompressionLimitError before any
    allocation; without a declared size, decoding stops once the output passes it.
    """
    return _decode_one(hpcio_zstd_content_size, hpcio_zstd_decode_known, b"zstd frame",
                       data, limit, path, offset, sample)


def zstd_decompress_file(int in_fd, int out_fd, limit=DEFAULT_LIMIT, *, path=None):
    """Decode the zstd frames read from ``in_fd`` (to its end) into ``out_fd``, a few MiB
    at a time, so a file larger than memory decompresses; returns the bytes written.
    More than ``limit`` of them raises DecompressionLimitError; errors name ``path``."""
    cdef uint64_t lim = _limit(limit), written = 0
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_zstd_decode_fd(in_fd, out_fd, lim, &written, &err)
    check(st, &err, path, -1, -1)
    return written


def zstd_decode_many(src, starts, ends, limit=DEFAULT_LIMIT, int nthreads=1, *, path=None,
                     sample_base=0, batch_limit=None):
    """Decode frames src[starts[j]:ends[j]] into one buffer: (data, m+1 positions).

    Each frame's output is bounded by ``limit``, their sum by ``batch_limit``
    (DecompressionLimitError, raised before allocating when the frames declare their
    sizes); errors name ``path``, the frame's byte offset in ``src`` and sample
    ``sample_base + j``.
    """
    return _decode_many(hpcio_zstd_content_size, hpcio_zstd_decode_known, b"zstd frame",
                        src, starts, ends, limit, batch_limit, nthreads, path, sample_base)


def blosc2_compress(data, codec="zstd", int clevel=5, int typesize=1, int shuffle=1):
    """One blosc2 chunk (shuffle: 0 none, 1 byte, 2 bit)."""
    cdef bytes codec_b = codec.encode("ascii")
    cdef _Settings s = _Settings(clevel, typesize, shuffle, False, False, codec_b)
    return _compress(data, hpcio_blosc2_bound, _blosc2_chunk, &s)


def blosc2_decompress(data, limit=DEFAULT_LIMIT, *, path=None, offset=-1, sample=-1):
    """One blosc2 chunk; a declared size above ``limit`` raises DecompressionLimitError."""
    return _decode_one(hpcio_blosc2_content_size, hpcio_blosc2_decode_known, b"blosc2 chunk",
                       data, limit, path, offset, sample)


def blosc2_decode_many(src, starts, ends, limit=DEFAULT_LIMIT, int nthreads=1, *, path=None,
                       sample_base=0, batch_limit=None):
    """Decode chunks src[starts[j]:ends[j]] into one buffer: (data, m+1 positions); the
    limits are those of :func:`zstd_decode_many`."""
    return _decode_many(hpcio_blosc2_content_size, hpcio_blosc2_decode_known, b"blosc2 chunk",
                        src, starts, ends, limit, batch_limit, nthreads, path, sample_base)


def build_info():
    """Kernels built, compiler/SIMD flags, libzstd and C-Blosc2 versions, build switches."""
    return {
        "kernels": hpcio_kernels().decode().split(),
        "compiler": hpcio_compiler().decode(),
        "cflags": hpcio_build_flags().decode(),
        "simd": hpcio_simd().decode().split(),
        "zstd": hpcio_zstd_version_string().decode(),
        "blosc2": hpcio_blosc2_version().decode(),
        "debug": bool(hpcio_build_debug()),
        "sanitize": bool(hpcio_build_sanitize()),
    }
