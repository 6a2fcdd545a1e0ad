# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""Tar header parsing and member indexing (compiled); see csrc/tar.c."""

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, realloc, free

import numpy as np

from ..errors import CorruptShardError, TruncatedShardError


cdef extern from "hpcio.h" nogil:
    ctypedef enum hpcio_status:
        HPCIO_OK
        HPCIO_E_CORRUPT
        HPCIO_E_TRUNCATED
        HPCIO_E_BUFFER
    ctypedef struct hpcio_error:
        int64_t item
        int64_t offset
        int sys_errno
        char msg[192]
    ctypedef struct hpcio_tar_header:
        char name[257]
        uint32_t name_len
        uint64_t size
        char type
        int end
    ctypedef struct hpcio_tar_member:
        uint64_t header_offset
        uint64_t data_offset
        uint64_t size
        uint64_t name_offset
        uint32_t name_len
    hpcio_status hpcio_tar_parse_header(const uint8_t *block, uint64_t offset,
                                        hpcio_tar_header *out, hpcio_error *err)
    hpcio_status hpcio_tar_scan(const uint8_t *buf, uint64_t len, uint64_t start,
                                hpcio_tar_member *members, size_t cap, uint8_t *names,
                                uint64_t names_cap, size_t *count, uint64_t *names_len,
                                uint64_t *next, hpcio_error *err)


cdef object _error(hpcio_status st, hpcio_error *err, object path):
    cls = TruncatedShardError if st == HPCIO_E_TRUNCATED else CorruptShardError
    msg = err.msg.decode("utf-8", "replace")
    exc = cls(msg, path=path, offset=err.offset)
    exc.member = err.item
    return exc


def parse_header(const uint8_t[::1] block, uint64_t offset=0, *, path=None):
    """One 512-byte header: ``(name bytes, size, type char)``, or None for a zero block."""
    cdef hpcio_tar_header h
    cdef hpcio_error err
    cdef hpcio_status st
    if block.shape[0] < 512:
        raise TruncatedShardError(
            f"tar header truncated: expected 512 bytes, got {block.shape[0]}",
            path=path, offset=offset)
    with nogil:
        st = hpcio_tar_parse_header(&block[0], offset, &h, &err)
    if st != HPCIO_OK:
        raise _error(st, &err, path)
    if h.end:
        return None
    return h.name[:h.name_len], h.size, chr(<unsigned char>h.type)


def scan(const uint8_t[::1] buf, *, path=None, bint partial=False):
    """Index the regular-file members of the tar archive in ``buf``.

    Returns ``(names, header_offsets, data_offsets, sizes, end, error)``: names as a
    list of bytes, the offsets and sizes as uint64 arrays, ``end`` the offset of the
    end-of-archive block.  A damaged archive raises CorruptShardError or
    TruncatedShardError (path, byte offset, ``.member`` = members indexed before it);
    with ``partial=True`` the members before the damage are returned with the error
    (not raised) as the last item, and ``end`` is the damaged header's offset.
    """
    cdef uint64_t n = buf.shape[0]
    cdef size_t cap = 1024, count = 0, total = 0
    cdef uint64_t names_cap = 65536, names_used = 0, names_total = 0, start = 0, nxt = 0
    cdef hpcio_tar_member *members = <hpcio_tar_member *>malloc(cap * sizeof(hpcio_tar_member))
    cdef uint8_t *names = <uint8_t *>malloc(names_cap)
    cdef void *grown
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    cdef const uint8_t *data = &buf[0] if n else NULL
    cdef uint8_t empty = 0
    if data == NULL:
        data = &empty
    error = None
    try:
        if members == NULL or names == NULL:
            raise MemoryError()
        while True:
            with nogil:
                st = hpcio_tar_scan(data, n, start, members + total, cap - total,
                                    names + names_total, names_cap - names_total,
                                    &count, &names_used, &nxt, &err)
            # names are stored relative to each call's names pointer: rebase them
            for j in range(total, total + count):
                members[j].name_offset += names_total
            total += count
            names_total += names_used
            if st == HPCIO_E_BUFFER:
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
                continue
            break
        end = nxt
        if st != HPCIO_OK:
            err.item += <int64_t>(total - count)
            error = _error(st, &err, path)
            error.member = total
            end = err.offset
            if not partial:
                raise error
        header_offsets = np.empty(total, dtype=np.uint64)
        data_offsets = np.empty(total, dtype=np.uint64)
        sizes = np.empty(total, dtype=np.uint64)
        names_list = []
        for j in range(total):
            header_offsets[j] = members[j].header_offset
            data_offsets[j] = members[j].data_offset
            sizes[j] = members[j].size
            names_list.append(names[members[j].name_offset:members[j].name_offset + members[j].name_len])
        return names_list, header_offsets, data_offsets, sizes, end, error
    finally:
        free(members)
        free(names)
