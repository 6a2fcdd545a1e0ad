# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""Index kernels: bisection, offset tables, newline scanning, the keyed bijection of epoch
orders (compiled, private)."""

import operator

import numpy as np

from libc.stdint cimport int64_t, uint8_t, uint64_t

from ._chpcio cimport (
    HPCIO_BIJECTION_ROUNDS, HPCIO_OK, hpcio_bijection_forward, hpcio_bijection_forward_range,
    hpcio_bijection_inverse, hpcio_bisect, hpcio_error, hpcio_error_clear, hpcio_offset_ranges,
    hpcio_scan_lines, hpcio_status,
)
from ._utils cimport byte_view, check, data_ptr, raise_error, u64_ptr

from ..errors import InvalidArgumentError, WrongTypeError


def _as_ids(ids, str what):
    """Non-negative integer ids as a contiguous uint64 array (negative ones rejected)."""
    from hpcio.errors import IndexOutOfRangeError

    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            arr = arr.astype(np.uint64)
        else:
            raise WrongTypeError(f"{what} must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        flat = arr.ravel()
        bad = int(flat[np.argmax(flat < 0)])
        raise IndexOutOfRangeError(f"{what} must be non-negative, got {bad}")
    return np.ascontiguousarray(arr, dtype=np.uint64)


def bisect_ids(cum, ids, *, path=None):
    """Global sample ids -> (shard, local index) over cumulative counts ``cum``.

    ``cum[0] == 0``, non-decreasing, ``cum[-1]`` the total; empty shards are skipped.
    Returns int64 shard numbers and uint64 local indices shaped like ``ids``.
    Raises IndexOutOfRangeError for an id >= cum[-1] and CorruptShardError for
    cumulative counts that do not start at 0 or decrease.  Releases the GIL.
    """
    from hpcio.errors import CorruptShardError

    cdef const uint64_t[::1] c = np.ascontiguousarray(cum, dtype=np.uint64).ravel()
    cdef size_t nshards, k, bad = 0
    if c.shape[0] == 0:
        raise InvalidArgumentError("cumulative counts need at least one entry (cum[0] == 0)")
    nshards = c.shape[0] - 1
    if c[0] != 0:
        raise CorruptShardError(f"cumulative sample counts start at {c[0]}, not 0", path=path)
    with nogil:
        for k in range(nshards):
            if c[k + 1] < c[k]:
                bad = k + 1
                break
    if bad:
        raise CorruptShardError(
            f"cumulative sample counts decrease at shard {bad - 1}: {c[bad - 1]} then {c[bad]}",
            path=path)

    id_arr = _as_ids(ids, "sample ids")
    shape = id_arr.shape
    cdef const uint64_t[::1] idv = id_arr.ravel()
    cdef size_t n = idv.shape[0]
    shard = np.empty(n, dtype=np.int64)
    local = np.empty(n, dtype=np.uint64)
    cdef int64_t[::1] shard_v = shard
    cdef uint64_t[::1] local_v = local
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    hpcio_error_clear(&err)
    if n:
        with nogil:
            st = hpcio_bisect(&c[0], nshards, &idv[0], n, &shard_v[0], &local_v[0], &err)
    if st != HPCIO_OK:
        raise_error(st, &err, path, -1, <int64_t>idv[err.item])
    return shard.reshape(shape), local.reshape(shape)


def offset_ranges(table, int width, nrec, limit, indices=None, *, path=None,
                  table_offset=0, sample_base=0):
    """(starts, ends) of records from a little-endian offset table.

    ``table`` holds nrec+1 unsigned integers of ``width`` bytes (4 or 8).  Entries
    must be non-decreasing and <= limit; errors name path, byte offset
    (table_offset + entry position) and sample (sample_base + record).  With
    ``indices``, only those records are returned, in that order.
    """
    from hpcio.errors import TruncatedShardError

    if nrec < 0:
        raise InvalidArgumentError(f"record count must be >= 0, got {nrec}")
    if limit < 0:
        raise InvalidArgumentError(f"limit must be >= 0, got {limit}")
    if width not in (4, 8):
        raise InvalidArgumentError(f"offset width must be 4 or 8 bytes, got {width}")
    cdef const uint8_t[::1] tab = byte_view(table)
    cdef size_t n = nrec
    cdef uint64_t lim = limit
    need = (nrec + 1) * width
    if <size_t>tab.shape[0] < need:
        raise TruncatedShardError(
            f"offset table of {nrec} records needs {need} bytes, only {tab.shape[0]} present",
            path=path, offset=table_offset)
    cdef const uint64_t[::1] idx
    cdef const uint64_t *idx_ptr = NULL
    cdef size_t m = n
    if indices is not None:
        idx = _as_ids(indices, "record indices").ravel()
        idx_ptr = u64_ptr(idx)
        m = idx.shape[0]
    starts = np.empty(m, dtype=np.uint64)
    ends = np.empty(m, dtype=np.uint64)
    cdef uint64_t[::1] sv = starts, ev = ends
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    hpcio_error_clear(&err)
    if m:
        with nogil:
            st = hpcio_offset_ranges(&tab[0], width, n, lim, idx_ptr, m, &sv[0], &ev[0], &err)
        # An index out of range has no byte position: the table base alone is no place.
        check(st, &err, path, table_offset if err.offset >= 0 else -1, sample_base)
    return starts, ends


def scan_lines(buf, base=0):
    """Line start offsets of ``buf`` plus its end: count+1 uint64 entries (+ base).

    A final line without a newline still counts; an empty buffer has no lines.
    """
    cdef const uint8_t[::1] b = byte_view(buf)
    cdef uint64_t off = base
    cdef size_t count = 0
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_scan_lines(data_ptr(b), b.shape[0], off, NULL, 0, &count, &err)
    check(st, &err, None, -1, -1)
    out = np.empty(count + 1, dtype=np.uint64)
    cdef uint64_t[::1] ov = out
    with nogil:
        st = hpcio_scan_lines(data_ptr(b), b.shape[0], off, &ov[0], count + 1, &count, &err)
    check(st, &err, None, -1, -1)
    return out


# ---- keyed bijection ---------------------------------------------------------------------

BIJECTION_ROUNDS = HPCIO_BIJECTION_ROUNDS

_INT64_MAX = 2**63 - 1


def _bijection_keys(keys):
    """The round keys as a contiguous uint64 array of one word per round."""
    arr = np.asarray(keys)
    if arr.dtype != np.uint64:
        raise WrongTypeError(f"bijection keys must be a uint64 array, got dtype {arr.dtype}")
    if arr.shape != (HPCIO_BIJECTION_ROUNDS,):
        raise InvalidArgumentError(
            f"bijection keys must be {HPCIO_BIJECTION_ROUNDS} words (one per round), "
            f"got shape {arr.shape}")
    return np.ascontiguousarray(arr)


def _bijection_n(n):
    n = operator.index(n)
    if n < 0 or n > _INT64_MAX:
        raise InvalidArgumentError(f"a bijection covers 0 <= n < 2**63 values, got n = {n}")
    return n


def _bijection_values(values, str what, str plural, n):
    """Integer values as a contiguous int64 array; unsigned ones past int64 are out of range
    (cast, they would be reported as negative numbers they are not)."""
    from hpcio.errors import IndexOutOfRangeError

    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        if arr.size == 0:
            return np.empty(arr.shape, dtype=np.int64)
        raise WrongTypeError(f"{plural} must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
        flat = arr.ravel()
        bad = int(flat[np.argmax(flat > _INT64_MAX)])
        raise IndexOutOfRangeError(f"{what} {bad} out of range [0, {n})")
    # ascontiguousarray makes a 0-d array 1-d: its shape is put back.
    return np.ascontiguousarray(arr, dtype=np.int64).reshape(arr.shape)


def _bijection_apply(keys, n, values, bint inverse):
    key_arr = _bijection_keys(keys)
    n = _bijection_n(n)
    arr = (_bijection_values(values, "index", "indices", n) if inverse
           else _bijection_values(values, "position", "positions", n))
    shape = arr.shape
    out = np.empty(shape, dtype=np.int64)
    cdef const uint64_t[::1] kv = key_arr
    cdef const int64_t[::1] inv = arr.reshape(-1)
    cdef int64_t[::1] ov = out.reshape(-1)
    cdef size_t count = inv.shape[0]
    cdef uint64_t cn = n
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    hpcio_error_clear(&err)
    if count:
        with nogil:
            if inverse:
                st = hpcio_bijection_inverse(&kv[0], cn, &inv[0], &ov[0], count, &err)
            else:
                st = hpcio_bijection_forward(&kv[0], cn, &inv[0], &ov[0], count, &err)
    if st != HPCIO_OK:
        # The message names the value; its place in the array is no sample number.
        raise_error(st, &err, None, -1, -1)
    return out


def bijection_forward(keys, n, positions):
    """The keyed bijection of ``[0, n)`` at each of ``positions``: an int64 array shaped
    like them.  ``keys``: a uint64 array of one word per round.  A position outside
    ``[0, n)`` raises IndexOutOfRangeError naming it.  Releases the GIL."""
    return _bijection_apply(keys, n, positions, False)


def bijection_inverse(keys, n, indices):
    """The position at which the bijection ``bijection_forward(keys, n, .)`` gives each of
    ``indices``.  Releases the GIL."""
    return _bijection_apply(keys, n, indices, True)


def bijection_forward_range(keys, n, start, count):
    """``bijection_forward(keys, n, arange(start, start + count))`` without the positions
    array: every position must lie in ``[0, n)`` (none is read when ``count`` is 0).
    Releases the GIL."""
    from hpcio.errors import IndexOutOfRangeError

    key_arr = _bijection_keys(keys)
    n = _bijection_n(n)
    start, count = operator.index(start), operator.index(count)
    if count < 0:
        raise InvalidArgumentError(f"count must be >= 0, got {count}")
    out = np.empty(count, dtype=np.int64)
    if count == 0:
        return out
    if start < 0 or start >= n:
        raise IndexOutOfRangeError(f"position {start} out of range [0, {n})")
    cdef const uint64_t[::1] kv = key_arr
    cdef int64_t[::1] ov = out
    cdef int64_t first = start
    cdef size_t cc = count
    cdef uint64_t cn = n
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_bijection_forward_range(&kv[0], cn, first, &ov[0], cc, &err)
    if st != HPCIO_OK:
        raise_error(st, &err, None, -1, -1)
    return out
