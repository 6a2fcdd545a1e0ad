# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""Tar header parsing and member indexing (compiled, private); see csrc/tar.c."""

import numpy as np

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc

from ._chpcio cimport (
    HPCIO_E_BUFFER, HPCIO_OK, hpcio_error, hpcio_error_clear, hpcio_status,
    hpcio_tar_header, hpcio_tar_member, hpcio_tar_parse_header, hpcio_tar_scan,
)
from ._utils cimport byte_view, data_ptr, raise_error


cdef object _error(hpcio_status status, const hpcio_error *err, object path, int64_t member):
    """The hpcio exception for a failed tar kernel, with ``.member`` set."""
    from hpcio.errors import HpcioError

    try:
        raise_error(status, err, path, err.offset, -1)
    except HpcioError as exc:
        exc.member = member
        return exc


def parse_header(block, uint64_t offset=0, *, path=None):
    """One 512-byte header: ``(name bytes, size, type char)``, or None for a zero block."""
    cdef const uint8_t[::1] view = byte_view(block)
    cdef hpcio_tar_header h
    cdef hpcio_error err
    cdef hpcio_status st
    if view.shape[0] < 512:
        from hpcio.errors import TruncatedShardError

        raise TruncatedShardError(f"tar header truncated: expected 512 bytes, got {view.shape[0]}",
                                  path=path, offset=offset)
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_tar_parse_header(data_ptr(view), offset, &h, &err)
    if st != HPCIO_OK:
        raise _error(st, &err, path, -1)
    if h.end:
        return None
    return h.name[:h.name_len], h.size, chr(<unsigned char>h.type)


def scan(buf, *, path=None, bint partial=False):
    """Index the regular-file members of the tar archive in ``buf``.

    Returns ``(names, header_offsets, data_offsets, sizes, end, error)``; see _tar.pyi.
    """
    cdef const uint8_t[::1] view = byte_view(buf)
    cdef uint64_t n = view.shape[0]
    cdef size_t cap = 1024, count = 0, total = 0, j
    cdef uint64_t names_cap = 65536, names_used = 0, names_total = 0, start = 0, nxt = 0
    cdef hpcio_tar_member *members = <hpcio_tar_member *>malloc(cap * sizeof(hpcio_tar_member))
    cdef uint8_t *names = <uint8_t *>malloc(names_cap)
    cdef void *grown
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    cdef const uint8_t *data = data_ptr(view)
    error = None
    try:
        if members == NULL or names == NULL:
            raise MemoryError()
        hpcio_error_clear(&err)
        while True:
            with nogil:
                st = hpcio_tar_scan(data, n, start, members + total, cap - total,
                                    names + names_total, names_cap - names_total,
                                    &count, &names_used, &nxt, &err)
            # each call stores name offsets relative to the names pointer it was given
            for j in range(total, total + count):
                members[j].name_offset += names_total
            total += count
            names_total += names_used
            if st != HPCIO_E_BUFFER:
                break
            start = nxt
            if total == cap:
                grown = realloc(members, 2 * cap * sizeof(hpcio_tar_member))
                if grown == NULL:
                    raise MemoryError()
                members = <hpcio_tar_member *>grown
                cap *= 2
            else:
                grown = realloc(names, 2 * names_cap + 65536)
                if grown == NULL:
                    raise MemoryError()
                names = <uint8_t *>grown
                names_cap = 2 * names_cap + 65536
        end = nxt
        if st != HPCIO_OK:
            error = _error(st, &err, path, <int64_t>total)
            end = err.offset
            if not partial:
                raise error
        header_offsets = np.empty(total, dtype=np.uint64)
        data_offsets = np.empty(total, dtype=np.uint64)
        sizes = np.empty(total, dtype=np.uint64)
        member_names = []
        for j in range(total):
            header_offsets[j] = members[j].header_offset
            data_offsets[j] = members[j].data_offset
            sizes[j] = members[j].size
            member_names.append(names[members[j].name_offset:members[j].name_offset + members[j].name_len])
        return member_names, header_offsets, data_offsets, sizes, end, error
    finally:
        free(members)
        free(names)
