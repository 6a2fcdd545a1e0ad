# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""Sample dicts and columns built straight from MDS records, and records packed straight
from sample dicts (compiled).

Slicing records into columns with numpy and zipping the column lists into dicts costs
several Python objects per value; here each record's column bounds are computed in C and
each value object is created once, directly from the record bytes.  Only the value kinds
whose construction is fixed (``str``, ``bytes``, ``int``, ``json``) are handled; the
caller keeps its general path for everything else and for every error, so messages stay
exact.  :class:`RecordPacker` is the same bargain for writing.
"""

from cpython.buffer cimport PyBUF_FORMAT
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_New, PyDict_SetItem, PyDict_Size
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLong, PyLong_FromLongLong
from cpython.ref cimport Py_INCREF
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy
from posix.types cimport off_t
from posix.uio cimport iovec, preadv

import json as _py_json

import numpy as np
import orjson

_orjson_loads = orjson.loads

from ._chpcio cimport (
    HPCIO_E_NOMEM, HPCIO_JSON_BOOL, HPCIO_JSON_FLOAT, HPCIO_JSON_INT, HPCIO_JSON_LIST,
    HPCIO_JSON_MAX_KEYS, HPCIO_JSON_NONE, HPCIO_JSON_RAW, HPCIO_JSON_STR, HPCIO_MDS_MAX_COLUMNS,
    HPCIO_OK, hpcio_error, hpcio_error_clear, hpcio_json_fill, hpcio_json_key, hpcio_json_scan,
    hpcio_mds_column_copy, hpcio_mds_column_lengths, hpcio_mds_column_offsets,
    hpcio_mds_prefetch_values, hpcio_pread_full, hpcio_json_wide_int, hpcio_status,
    hpcio_utf8_lengths,
)
from ._utils cimport byte_view, check, data_ptr

cdef enum:
    _MAXCOL = HPCIO_MDS_MAX_COLUMNS

# Value kinds: C constants in the builders, which compare them for every value (a module
# attribute would be looked up and compared as a Python object each time), and their
# Python names for the callers.
cdef enum:
    _STR = 0
    _BYTES = 1
    _INT = 2
    _JSON = 3
    _VIEW = 4

KIND_STR = _STR
KIND_BYTES = _BYTES
KIND_INT = _INT
KIND_JSON = _JSON
KIND_VIEW = _VIEW
MAX_COLUMNS = _MAXCOL


cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil

# mds_samples asks the CPU to fetch the record this many ahead (up to _PREFETCH_BYTES of
# it) while it builds the current one.  A shuffled batch reads records scattered over
# the shard, so each would otherwise start with cache and TLB misses that the hardware
# prefetcher cannot predict; fetched ahead, a shuffled pass runs as fast as one in
# storage order.
DEF _PREFETCH_AHEAD = 4
DEF _PREFETCH_BYTES = 4096
# A record larger than that (an image between its metadata) is fetched _LARGE_HEAD bytes
# at first (its column sizes and small leading values), and _VALUE_AHEAD records ahead,
# once those have arrived, the values the samples need (hpcio_mds_prefetch_values, up to
# 4 KiB each): not 4 KiB of an image that is viewed in place, but the chat transcript
# after it that is parsed.
DEF _LARGE_HEAD = 128
DEF _VALUE_AHEAD = 2


cdef struct _Columns:
    # A record layout unpacked for the sample builders, and one record's column bounds.
    Py_ssize_t ncols, nsel, nvar
    int64_t fixed[_MAXCOL]  # fixed size, or -1: a u32 size in the record header
    int kind[_MAXCOL]
    int sel[_MAXCOL]  # the columns selected, in output order
    int64_t lo[_MAXCOL]
    int64_t hi[_MAXCOL]


cdef int _unpack_layout(str who, Py_ssize_t m, Py_ssize_t m_ends, tuple sizes, tuple kinds,
                        tuple cols, _Columns *L) except -1:
    """Fill ``L`` from the layout tuples, checked."""
    cdef Py_ssize_t c
    L.ncols, L.nsel, L.nvar = len(sizes), len(cols), 0
    if L.ncols > _MAXCOL or L.nsel > _MAXCOL or m_ends != m:
        raise ValueError(f"{who}: {L.ncols} columns (at most {_MAXCOL}), {L.nsel} selected, "
                         f"{m} starts and {m_ends} ends")
    for c in range(L.ncols):
        L.fixed[c] = sizes[c]
        L.kind[c] = kinds[c]
        if L.fixed[c] < 0:
            L.nvar += 1
    for c in range(L.nsel):
        L.sel[c] = cols[c]
        if not 0 <= L.sel[c] < L.ncols:
            raise ValueError(f"{who}: column {L.sel[c]} of {L.ncols}")
    return 0


cdef inline int64_t _bounds(const uint8_t *head, int64_t pos, _Columns *L) noexcept nogil:
    """Set ``L.lo``/``L.hi`` of a record whose u32 sizes are at ``head`` and whose values
    start at ``pos``, in column order; returns where the last one ends."""
    cdef uint32_t n32
    cdef Py_ssize_t c, var_i = 0
    for c in range(L.ncols):
        L.lo[c] = pos
        if L.fixed[c] < 0:
            memcpy(&n32, head + 4 * var_i, 4)
            var_i += 1
            pos += n32
        else:
            pos += L.fixed[c]
        L.hi[c] = pos
    return pos


cdef inline void _prefetch_ahead(const uint8_t *base, int64_t size, const int64_t *starts,
                                 const int64_t *ends, Py_ssize_t m, Py_ssize_t j, _Columns *L,
                                 const int32_t *fetch, size_t nfetch) noexcept nogil:
    """Ask the CPU for the records after record j of the m at ``starts``/``ends`` that
    its builder will read next (see _PREFETCH_AHEAD and _VALUE_AHEAD)."""
    cdef int64_t p, stop
    if j + _PREFETCH_AHEAD < m:
        p = starts[j + _PREFETCH_AHEAD]
        stop = ends[j + _PREFETCH_AHEAD]
        stop = min(stop, p + (_PREFETCH_BYTES if stop - p <= _PREFETCH_BYTES else _LARGE_HEAD), size)
        while 0 <= p < stop:
            __builtin_prefetch(base + p)
            p += 64
    if j + _VALUE_AHEAD < m:
        p = starts[j + _VALUE_AHEAD]
        stop = ends[j + _VALUE_AHEAD]
        if 0 <= p and stop <= size and stop - p > _PREFETCH_BYTES:
            hpcio_mds_prefetch_values(base + p, stop - p, L.fixed, L.ncols, fetch, nfetch)


cdef size_t _built_columns(_Columns *L, int32_t *fetch):
    """The selected columns whose values are built from the record's bytes (not viewed)
    into ``fetch``; returns how many."""
    cdef size_t n = 0
    cdef Py_ssize_t c
    for c in range(L.nsel):
        if L.kind[L.sel[c]] != _VIEW:
            fetch[n] = L.sel[c]
            n += 1
    return n


cdef inline object _sample(const uint8_t *base, int64_t size, object whole, int64_t a, int64_t b,
                    _Columns *L, list key_of, json_loads):
    """The dict of the record ``base[a:b]`` (``whole`` is the same bytes as a read-only
    memoryview, sliced for KIND_VIEW values), or None when the record is malformed or a
    value cannot be built."""
    cdef Py_ssize_t c
    cdef int k, col
    cdef dict d
    cdef object value
    cdef int64_t head = 4 * L.nvar
    if a < 0 or b > size or b - a < head or _bounds(base + a, a + head, L) != b:
        return None
    d = PyDict_New()
    for c in range(L.nsel):
        col = L.sel[c]
        k = L.kind[col]
        try:
            if k == _VIEW:
                value = whole[L.lo[col]:L.hi[col]]
            else:
                value = _value(k, <const char *>(base + L.lo[col]), L.hi[col] - L.lo[col], json_loads)
        except Exception:
            return None
        PyDict_SetItem(d, key_of[col], value)
    return d


cdef class RecordSamples:
    """An iterator of the sample dicts of records ``buf[starts[j]:ends[j]]`` (the
    arguments of :func:`mds_samples`, which builds a batch of them with it), built one at
    a time.

    A sequential pass then holds one sample at a time instead of a list of them: a fresh
    process reuses one sample's memory instead of growing its heap, and no batch list or
    generator stands between the kernel and the caller.  A record the kernel cannot build
    is handed to ``fallback(j)``, which returns its sample from the general decoder or
    raises the exact error.
    """
    cdef _Columns L
    cdef object whole  # the bytes as a read-only memoryview, sliced for KIND_VIEW values
    cdef const uint8_t *base
    cdef int64_t size
    cdef const int64_t[::1] starts
    cdef const int64_t[::1] ends
    cdef Py_ssize_t j
    cdef list key_of
    cdef object json_loads, fallback
    cdef int32_t fetch[_MAXCOL]
    cdef size_t nfetch

    def __cinit__(self, buf, const int64_t[::1] starts, const int64_t[::1] ends, tuple names,
                  tuple sizes, tuple kinds, tuple cols, json_loads, fallback):
        cdef const uint8_t[::1] view
        _unpack_layout("RecordSamples", starts.shape[0], ends.shape[0], sizes, kinds, cols, &self.L)
        self.key_of = list(names)
        self.whole = byte_view(buf).toreadonly()
        view = self.whole
        self.base = data_ptr(view)  # valid while self.whole holds the buffer
        self.size = view.shape[0]
        self.starts = starts
        self.ends = ends
        self.j = 0
        self.json_loads = json_loads
        self.fallback = fallback
        self.nfetch = _built_columns(&self.L, self.fetch)

    cdef object _build(self, Py_ssize_t j):
        """Record j's dict, or None when the kernel cannot build it."""
        _prefetch_ahead(self.base, self.size, &self.starts[0], &self.ends[0], self.starts.shape[0], j,
                        &self.L, self.fetch, self.nfetch)
        return _sample(self.base, self.size, self.whole, self.starts[j], self.ends[j], &self.L,
                       self.key_of, self.json_loads)

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t j = self.j
        if j >= self.starts.shape[0]:
            raise StopIteration
        self.j = j + 1
        d = self._build(j)
        return self.fallback(j) if d is None else d


def mds_samples(buf, const int64_t[::1] starts, const int64_t[::1] ends, tuple names,
                tuple sizes, tuple kinds, tuple cols, json_loads):
    """Dicts ``{names[c]: value}`` for ``c`` in ``cols`` of records ``buf[starts[j]:ends[j]]``.

    ``sizes[c]`` is column c's fixed size or -1 (variable: its u32 size is in the record
    header); ``kinds[c]`` is one of KIND_STR, KIND_BYTES, KIND_INT (8-byte little-endian
    signed), KIND_JSON (``json_loads(bytes)``), KIND_VIEW (a read-only memoryview of
    ``buf``, which it keeps alive).  Returns ``(samples, bad)``: ``bad`` is
    -1, or the first record that is malformed or whose value cannot be built (then
    ``samples`` is None and the caller decodes the batch its general way to report it).
    """
    cdef RecordSamples records = RecordSamples(buf, starts, ends, names, sizes, kinds, cols, json_loads, None)
    cdef Py_ssize_t m = starts.shape[0], j
    cdef list out = PyList_New(m)
    cdef object d
    for j in range(m):
        d = records._build(j)
        if d is None:
            return None, j
        _place(out, j, d)
    return out, -1


def loads_json_values(buf, const int64_t[::1] offsets, json_loads):
    """The JSON values ``buf[offsets[j]:offsets[j + 1]]``, each decoded by its own
    ``json_loads`` call from C, or None when one of them does not decode or holds an
    integer orjson would read as a float (:func:`json_wide_int`): the caller then decodes
    them one by one its own way, which reports the bad one.

    Parsing each value alone cannot merge neighbours or split a value, and it costs less
    than checking that the values can be joined into one array and parsing that."""
    cdef const uint8_t[::1] view = byte_view(buf)
    cdef const char *base = <const char *>data_ptr(view)
    cdef Py_ssize_t m = offsets.shape[0] - 1, j
    if m < 0:
        raise ValueError("loads_json_values: no offsets")
    for j in range(m + 1):
        if not 0 <= offsets[j] <= view.shape[0]:
            raise ValueError(f"loads_json_values: offset {offsets[j]} outside the {view.shape[0]} bytes")
        if j and offsets[j] < offsets[j - 1]:
            raise ValueError(f"loads_json_values: offset {offsets[j]} below the one before it")
    values = PyList_New(m)
    try:
        for j in range(m):
            if hpcio_json_wide_int(<const uint8_t *>base + offsets[j], offsets[j + 1] - offsets[j]):
                return None  # an integer orjson would read as a float
            value = json_loads(PyBytes_FromStringAndSize(base + offsets[j], offsets[j + 1] - offsets[j]))
            Py_INCREF(value)
            PyList_SET_ITEM(values, j, value)
    except Exception:
        return None
    return values


def loads_exact(buf):
    """The JSON document in ``buf`` (UTF-8 bytes-like) as Python's json reads it: orjson,
    unless the text may hold an integer orjson would turn into a float
    (:func:`json_wide_int`), which Python's json reads.  Raises ValueError for text that
    is not JSON (``json.JSONDecodeError``, of which orjson's is a subclass) or, read by
    Python's json, not UTF-8."""
    cdef const uint8_t[::1] view = byte_view(buf)
    if hpcio_json_wide_int(data_ptr(view), view.shape[0]):
        return _py_json.loads(bytes(buf))
    return _orjson_loads(buf)


def json_wide_int(buf) -> bool:
    """Whether the JSON text in ``buf`` may hold an integer below -2^63 or of 2^64 or
    more, which orjson reads as a float where Python's json (and so streaming's MDS
    reader) keeps the int: a run of digits (after a minus sign or not) out of that
    range, inside a string or a fraction too."""
    cdef const uint8_t[::1] view = byte_view(buf)
    cdef int wide
    with nogil:
        wide = hpcio_json_wide_int(data_ptr(view), view.shape[0])
    return wide != 0


cdef inline void _place(list out, Py_ssize_t j, dict d):
    """Put ``d`` at slot j of a list made by PyList_New (the slot steals a reference)."""
    Py_INCREF(d)
    PyList_SET_ITEM(out, j, d)


cdef object _value(int k, const char *p, int64_t n, json_loads):
    """The value of kind ``k`` (not KIND_VIEW) held in the ``n`` bytes at ``p``; raises
    ValueError when it cannot be built."""
    cdef int64_t v
    if k == _STR:
        return PyUnicode_DecodeUTF8(p, n, NULL)
    if k == _BYTES:
        return PyBytes_FromStringAndSize(p, n)
    if k == _INT:
        if n != 8:
            raise ValueError("an int column value is not 8 bytes")
        memcpy(&v, p, 8)
        return PyLong_FromLongLong(v)
    if k == _JSON:
        if hpcio_json_wide_int(<const uint8_t *>p, n):
            raise ValueError("an integer orjson would read as a float")
        return json_loads(PyBytes_FromStringAndSize(p, n))
    raise ValueError(f"no direct construction for value kind {k}")


# Bytes read at the start of each record by mds_samples_pread: the column sizes and the
# small values stored first, in one call.
DEF _HEAD_WINDOW = 512


cdef int _pread_all(int fd, char *dst, int64_t n, int64_t offset) noexcept nogil:
    """Read exactly ``n`` bytes at ``offset`` (hpcio_pread_full); 0, or -1 on an error or
    end of file, which the sample builder's caller then reports its general way."""
    cdef hpcio_error err
    if hpcio_pread_full(fd, <uint8_t *>dst, <uint64_t>n, <uint64_t>offset, &err) != HPCIO_OK:
        return -1
    return 0


cdef int _pread_with_ahead(int fd, char *dst, int64_t n, char *ahead, int64_t extra,
                           int64_t offset) noexcept nogil:
    """Read the ``n`` bytes at ``offset`` into ``dst`` and, in the same call, the ``extra``
    bytes after them into ``ahead``.  1 when both came, 0 when only the value did (the
    caller reads that head again), -1 on an error or end of file before the value ends."""
    cdef iovec iov[2]
    cdef ssize_t got
    iov[0].iov_base = dst
    iov[0].iov_len = <size_t>n
    iov[1].iov_base = ahead
    iov[1].iov_len = <size_t>extra
    got = preadv(fd, iov, 2, <off_t>offset)
    if got < 0:
        return -1
    if got >= n + extra:
        return 1
    if got >= n:
        return 0
    return _pread_all(fd, dst + got, n - got, offset + got)


cdef struct _Spill:
    char *buf  # holds a non-bytes value read past a record's first bytes, until decoded
    int64_t cap


cdef object _value_read(int fd, int k, int64_t lo, int64_t n, char *ahead, int64_t next_got,
                        _Spill *spill, json_loads, int *status):
    """The value of kind ``k`` at file offset ``lo`` (``n`` bytes), read straight into its
    ``bytes`` object (KIND_BYTES) or through ``spill``; with ``next_got`` > 0 the next
    record's first ``next_got`` bytes come into ``ahead`` in the same call.  ``status``:
    1 when they did, 0 when not, -1 when the read failed (the value is then None)."""
    cdef object value
    cdef char *dst
    cdef char *grown
    cdef int failed
    if k == _BYTES:
        value = PyBytes_FromStringAndSize(NULL, n)
        dst = PyBytes_AS_STRING(value)
    else:
        if n > spill.cap:
            grown = <char *>realloc(spill.buf, n)
            if grown == NULL:
                raise MemoryError("mds_samples_pread: no memory for a value")
            spill.buf, spill.cap = grown, n
        dst = spill.buf
    with nogil:
        if next_got > 0:
            failed = _pread_with_ahead(fd, dst, n, ahead, next_got, lo)
        else:
            failed = _pread_all(fd, dst, n, lo)
    if failed < 0:
        status[0] = -1
        return None
    status[0] = failed
    if k != _BYTES:
        value = _value(k, spill.buf, n, json_loads)
    return value


def mds_samples_pread(int fd, whole, const int64_t[::1] starts, const int64_t[::1] ends,
                      tuple names, tuple sizes, tuple kinds, tuple cols, json_loads):
    """:func:`mds_samples` for records of the file ``fd`` whose read-only mapping is ``whole``.

    Each record's first bytes (its column sizes and the values stored first) come in one
    ``pread``, each selected value past them in another, straight into its ``bytes`` object
    where the value is bytes.  KIND_VIEW values slice ``whole`` without touching it.  When
    the record ends with a value read this way and the next record starts there (a pass
    in storage order), the next record's first bytes come in the same call: a record
    read for its first and last columns then costs one read, not two.
    Reading a mapped file instead takes a page fault for every page first touched, and a
    fault costs more than a small read.
    Returns ``(samples, bad)`` as mds_samples; ``bad`` is also set when a read fails or
    ends early, and the caller's general path then reports the record.
    """
    cdef Py_ssize_t m = starts.shape[0], c, j
    cdef _Columns L
    _unpack_layout("mds_samples_pread", m, ends.shape[0], sizes, kinds, cols, &L)
    cdef list key_of = list(names)
    cdef object view_of = byte_view(whole).toreadonly()  # sliced for KIND_VIEW values
    cdef int64_t size = len(view_of)
    cdef int64_t a, b, head = 4 * L.nvar, got, n, window = max(_HEAD_WINDOW, head)
    cdef int64_t ahead_at = -1, ahead_got = 0, next_got
    cdef int k, col, failed, status
    cdef char *first = <char *>malloc(window)
    cdef char *ahead = <char *>malloc(window)  # the next record's first bytes, read early
    cdef _Spill spill = _Spill(NULL, 0)
    cdef list out = PyList_New(m)
    cdef dict d
    cdef object value
    try:
        if first == NULL or ahead == NULL:
            raise MemoryError("mds_samples_pread: no memory for the read buffer")
        for j in range(m):
            a = starts[j]
            b = ends[j]
            if a < 0 or b > size or b - a < head:
                return None, j
            got = min(window, b - a)
            if ahead_at == a and ahead_got == got:
                first, ahead = ahead, first
            else:
                with nogil:
                    failed = _pread_all(fd, first, got, a)
                if failed:
                    return None, j
            ahead_at = -1
            next_got = 0
            if j + 1 < m and starts[j + 1] == b and ends[j + 1] <= size:
                next_got = min(window, ends[j + 1] - b)
            if _bounds(<const uint8_t *>first, a + head, &L) != b:
                return None, j
            d = PyDict_New()
            for c in range(L.nsel):
                col = L.sel[c]
                k = L.kind[col]
                n = L.hi[col] - L.lo[col]
                try:
                    if k == _VIEW:
                        value = view_of[L.lo[col]:L.hi[col]]
                    elif L.hi[col] <= a + got:
                        value = _value(k, first + (L.lo[col] - a), n, json_loads)
                    else:
                        value = _value_read(fd, k, L.lo[col], n, ahead, next_got if L.hi[col] == b else 0,
                                            &spill, json_loads, &status)
                        if status < 0:
                            return None, j
                        if status == 1:
                            ahead_at, ahead_got = b, next_got
                except MemoryError:
                    raise
                except Exception:
                    return None, j
                PyDict_SetItem(d, key_of[col], value)
            _place(out, j, d)
        return out, -1
    finally:
        free(first)
        free(ahead)
        free(spill.buf)


cdef struct _Copies:
    uint8_t *data[_MAXCOL]  # each copied column's values back to back
    int64_t used[_MAXCOL]
    int64_t cap[_MAXCOL]
    int64_t *offsets[_MAXCOL]  # each copied column's m + 1 value offsets


cdef int _copy_values(int fd, const uint8_t *first, int64_t a, int64_t got, Py_ssize_t j,
                      Py_ssize_t ncopy, _Columns *L, _Copies *C, hpcio_status *st,
                      hpcio_error *err) noexcept nogil:
    """Append record ``j``'s values of the copied columns to their columns: from ``first``
    (the record's first ``got`` bytes, read at ``a``) where they lie there, else read from
    ``fd``.  0; 1 when out of memory; 2 when a read failed (``st`` and ``err`` say why)."""
    cdef Py_ssize_t c
    cdef int col
    cdef int64_t lo, hi, n, grown_cap
    cdef uint8_t *grown
    for c in range(ncopy):
        col = L.sel[c]
        lo, hi = L.lo[col], L.hi[col]
        n = hi - lo
        if C.used[c] + n > C.cap[c]:
            grown_cap = max(2 * C.cap[c], C.used[c] + n, 4096)
            grown = <uint8_t *>realloc(C.data[c], grown_cap)
            if grown == NULL:
                return 1
            C.data[c], C.cap[c] = grown, grown_cap
        if hi <= a + got:
            memcpy(C.data[c] + C.used[c], first + (lo - a), n)
        else:
            st[0] = hpcio_pread_full(fd, C.data[c] + C.used[c], <uint64_t>n, <uint64_t>lo, err)
            if st[0] != HPCIO_OK:
                return 2
        C.used[c] += n
        C.offsets[c][j + 1] = C.used[c]
    return 0


cdef list _column_copies(_Copies *C, Py_ssize_t ncopy, list offsets):
    """``(uint8 data, int64 offsets)`` of each copied column, the data copied out of ``C``."""
    cdef Py_ssize_t c
    cdef uint8_t[::1] arr8
    copies = []
    for c in range(ncopy):
        values = np.empty(C.used[c], np.uint8)
        if C.used[c]:
            arr8 = values
            memcpy(&arr8[0], C.data[c], C.used[c])
        copies.append((values, offsets[c]))
    return copies


def mds_columns_pread(int fd, const int64_t[::1] starts, const int64_t[::1] ends, tuple sizes,
                      tuple copied, tuple viewed, path=None):
    """Columns of the records ``[starts[j], ends[j])`` of file ``fd``, read with ``pread``:
    for each column of ``copied`` its values back to back, for each of ``viewed`` where
    its values lie in the file.

    Each record's first bytes (its column sizes and the values stored first) come in one
    read and each copied value past them in another, straight into its column: a record
    costs one read plus one per copied value stored after the first bytes.
    Returns ``(copies, spans, bad)``: ``copies`` a ``(uint8 data, int64 offsets)`` pair per
    copied column, ``spans`` an ``(int64 begin, int64 end)`` pair of file offsets per viewed
    column, ``bad`` -1 or the first malformed record (then both lists are None and the
    caller's general path reports it).  A read that fails or ends early raises, naming
    ``path`` and the byte offset.
    """
    cdef Py_ssize_t m = starts.shape[0], ncopy = len(copied), nview = len(viewed), c, j
    cdef _Columns L
    _unpack_layout("mds_columns_pread", m, ends.shape[0], sizes, (0,) * len(sizes),
                   copied + viewed, &L)
    cdef int64_t head = 4 * L.nvar, window = max(_HEAD_WINDOW, head)
    cdef int64_t a, b, got
    cdef Py_ssize_t bad = -1
    cdef int col, failed = 0
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    cdef uint8_t *first = NULL
    cdef _Copies C
    cdef int64_t *beginp[_MAXCOL]
    cdef int64_t *endp[_MAXCOL]
    cdef int64_t[::1] arr
    cdef list offsets = [np.zeros(m + 1, np.int64) for _ in range(ncopy)]
    begins = [np.empty(m, np.int64) for _ in range(nview)]
    ends_out = [np.empty(m, np.int64) for _ in range(nview)]
    for c in range(ncopy):
        arr = offsets[c]
        C.offsets[c] = &arr[0]
        C.data[c], C.used[c], C.cap[c] = NULL, 0, 0
    for c in range(nview):
        if m:
            arr = begins[c]
            beginp[c] = &arr[0]
            arr = ends_out[c]
            endp[c] = &arr[0]
    hpcio_error_clear(&err)
    try:
        first = <uint8_t *>malloc(window)
        if first == NULL:
            raise MemoryError("mds_columns_pread: no memory for the read buffer")
        with nogil:
            for j in range(m):
                a, b = starts[j], ends[j]
                if a < 0 or b - a < head:
                    bad = j
                    break
                got = min(window, b - a)
                st = hpcio_pread_full(fd, first, <uint64_t>got, <uint64_t>a, &err)
                if st != HPCIO_OK:
                    break
                if _bounds(first, a + head, &L) != b:
                    bad = j
                    break
                failed = _copy_values(fd, first, a, got, j, ncopy, &L, &C, &st, &err)
                if failed:
                    break
                for c in range(nview):
                    col = L.sel[ncopy + c]
                    beginp[c][j] = L.lo[col]
                    endp[c][j] = L.hi[col]
        if failed == 1:
            raise MemoryError("mds_columns_pread: no memory for a column")
        if st != HPCIO_OK:
            err.item = -1
            check(st, &err, path, -1, -1)
        if bad >= 0:
            return None, None, bad
        return _column_copies(&C, ncopy, offsets), list(zip(begins, ends_out)), -1
    finally:
        free(first)
        for c in range(ncopy):
            free(C.data[c])


cdef Py_ssize_t _record_table(list views, const int32_t[::1] buf_of, const int64_t[::1] starts,
                              const int64_t[::1] ends, const uint8_t **rec,
                              uint64_t *length) except -2:
    """Point ``rec[j]``/``length[j]`` at record j, ``views[buf_of[j]][starts[j]:ends[j]]``;
    -1, or the first j whose record lies outside its buffer."""
    cdef Py_ssize_t m = starts.shape[0], nbufs = len(views), j
    cdef const uint8_t[::1] v
    cdef const uint8_t **base = <const uint8_t **>malloc((nbufs + 1) * sizeof(uint8_t *))
    cdef int64_t *size = <int64_t *>malloc((nbufs + 1) * sizeof(int64_t))
    cdef int32_t which
    try:
        if base == NULL or size == NULL:
            raise MemoryError("no memory for the record table")
        for j in range(nbufs):
            v = views[j]
            base[j] = data_ptr(v)
            size[j] = v.shape[0]
        for j in range(m):
            which = buf_of[j]
            if which < 0 or which >= nbufs or starts[j] < 0 or ends[j] < starts[j] or ends[j] > size[which]:
                return j
            rec[j] = base[which] + starts[j]
            length[j] = <uint64_t>(ends[j] - starts[j])
        return -1
    finally:
        free(base)
        free(size)


cdef Py_ssize_t _failed_record(hpcio_status st, const hpcio_error *err) except -1:
    """The record a record-table kernel failed on (``err.item``); raises when the failure
    is not one record's (an argument or memory error)."""
    if err.item >= 0:
        return err.item
    check(st, err, None, -1, -1)
    return -1  # not reached: check raises for every status but HPCIO_OK


# Column batches of the same fields come back at about the same size, call after call.
# Their bytes are kept, when freed, in a few slots for the next batch: memory the process
# has touched already, where a fresh allocation of megabytes costs a page fault per 4 KiB
# (a quarter of a text column batch's time).  A batch takes the smallest kept buffer that
# holds it, up to four times its size (a pass's short last batch).  Small buffers go to
# numpy as usual.
cdef enum:
    _POOL_SLOTS = 4
cdef size_t _POOL_MIN = 1 << 20    # smaller buffers are cheap to allocate
cdef size_t _POOL_MAX = 1 << 27    # larger ones are not kept
cdef uint8_t *_pool_ptr[_POOL_SLOTS]
cdef size_t _pool_cap[_POOL_SLOTS]


cdef class _ColumnBytes:
    """A column's bytes: memory taken from the pool, given back to it when freed."""

    cdef uint8_t *ptr
    cdef size_t cap
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    def __getbuffer__(self, Py_buffer *view, int flags):
        view.buf = self.ptr
        view.obj = self
        view.len = self.shape[0]
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = <char *>"B"
        view.ndim = 1
        view.shape = self.shape
        view.strides = self.strides
        view.suboffsets = NULL
        view.internal = NULL

    def __dealloc__(self):
        cdef int k, spot = -1
        if self.cap <= _POOL_MAX:
            for k in range(_POOL_SLOTS):
                if _pool_ptr[k] == NULL:
                    spot = k
                    break
        if spot < 0:
            free(self.ptr)
        else:
            _pool_ptr[spot] = self.ptr
            _pool_cap[spot] = self.cap


cdef object _column_bytes(size_t n):
    """An uninitialised uint8 array of n bytes, from the pool when n is large."""
    if n < _POOL_MIN:
        return np.empty(n, np.uint8)
    cdef int k, best = -1
    cdef _ColumnBytes buf = _ColumnBytes.__new__(_ColumnBytes)
    for k in range(_POOL_SLOTS):
        if _pool_ptr[k] != NULL and n <= _pool_cap[k] <= 4 * n and (
                best < 0 or _pool_cap[k] < _pool_cap[best]):
            best = k
    if best >= 0:
        buf.ptr, buf.cap = _pool_ptr[best], _pool_cap[best]
        _pool_ptr[best] = NULL
    else:
        # room for the next batch's few more bytes
        buf.cap = (n + n // 8 + 0xFFFF) & ~<size_t>0xFFFF
        buf.ptr = <uint8_t *>malloc(buf.cap)
        if buf.ptr == NULL:
            raise MemoryError(f"no memory for a column of {n} bytes")
    buf.shape[0] = n
    buf.strides[0] = 1
    return np.frombuffer(buf, np.uint8)


def mds_columns(list bufs, const int32_t[::1] buf_of, const int64_t[::1] starts,
                const int64_t[::1] ends, tuple sizes, tuple cols):
    """Columns ``cols`` of the records ``bufs[buf_of[j]][starts[j]:ends[j]]``, in order j.

    ``sizes[c]`` is column c's fixed size or -1 (variable).  Each selected column comes
    back as ``(data, offsets)``: a uint8 array holding its values back to back and m+1
    int64 positions (value j is ``data[offsets[j]:offsets[j + 1]]``).  Both passes run
    in C without the GIL.  Returns ``(columns, -1)``, or ``(None, j)`` when record j lies
    outside its buffer or is malformed (the caller then decodes its general way, which
    names the file, offset and sample).
    """
    cdef Py_ssize_t m = starts.shape[0], j, s, bad
    cdef Py_ssize_t ncols = len(sizes), nsel = len(cols)
    if ncols > _MAXCOL or ends.shape[0] != m or buf_of.shape[0] != m:
        raise ValueError(f"mds_columns: {ncols} columns (at most {_MAXCOL}), {m} starts, "
                         f"{ends.shape[0]} ends and {buf_of.shape[0]} buffer numbers")
    cdef int64_t fixed[_MAXCOL]
    cdef int32_t sel[_MAXCOL]
    for j in range(ncols):
        fixed[j] = sizes[j]
    for s in range(nsel):
        sel[s] = cols[s]
    cdef list views = [byte_view(buf) for buf in bufs]  # held while C reads the buffers
    cdef const uint8_t **rec = <const uint8_t **>malloc((m + 1) * sizeof(uint8_t *))
    cdef uint64_t *length = <uint64_t *>malloc((m + 1) * sizeof(uint64_t))
    cdef uint8_t **out = <uint8_t **>malloc((nsel + 1) * sizeof(uint8_t *))
    cdef hpcio_error err
    cdef hpcio_status st = HPCIO_OK
    cdef uint64_t[:, ::1] offsets
    cdef uint8_t[::1] data_view
    cdef list columns
    try:
        if rec == NULL or length == NULL or out == NULL:
            raise MemoryError("mds_columns: no memory for the record table")
        bad = _record_table(views, buf_of, starts, ends, rec, length)
        if bad >= 0:
            return None, bad
        offsets_array = np.empty((nsel, m + 1), np.uint64)
        offsets = offsets_array
        hpcio_error_clear(&err)
        with nogil:
            st = hpcio_mds_column_offsets(rec, length, m, fixed, ncols, sel, nsel,
                                          &offsets[0, 0] if nsel else NULL, &err)
        if st != HPCIO_OK:
            return None, _failed_record(st, &err)
        columns = []
        for s in range(nsel):
            data = _column_bytes(offsets[s, m])
            data_view = data
            out[s] = &data_view[0] if data_view.shape[0] else NULL
            columns.append((data, offsets_array[s].view(np.int64)))
        with nogil:
            st = hpcio_mds_column_copy(rec, length, m, fixed, ncols, sel, nsel,
                                       &offsets[0, 0] if nsel else NULL, out, &err)
        if st != HPCIO_OK:
            return None, _failed_record(st, &err)
        return columns, -1
    finally:
        free(rec)
        free(length)
        free(out)


def mds_lengths(list bufs, const int32_t[::1] buf_of, const int64_t[::1] starts,
                const int64_t[::1] ends, tuple sizes, int col, bint utf8,
                int64_t[::1] first=None):
    """``len()`` of column ``col``'s value in each record ``bufs[buf_of[j]][starts[j]:ends[j]]``:
    its bytes, or with ``utf8`` its characters (``len(str)``), read in place in C without
    the GIL; nothing is copied or decoded.  With ``first`` (m int64), ``first[j]`` is set to
    where the value starts within record j.  Returns ``(int64 lengths, -1)``, or
    ``(None, j)`` when record j lies outside its buffer, is malformed or holds a value
    Python would not decode as UTF-8 (the caller's general path then reports it).
    """
    cdef Py_ssize_t m = starts.shape[0], j, bad
    cdef Py_ssize_t ncols = len(sizes)
    if (ncols > _MAXCOL or ends.shape[0] != m or buf_of.shape[0] != m
            or (first is not None and first.shape[0] != m)):
        raise ValueError(f"mds_lengths: {ncols} columns (at most {_MAXCOL}), {m} starts, "
                         f"{ends.shape[0]} ends, {buf_of.shape[0]} buffer numbers and "
                         f"{m if first is None else first.shape[0]} first positions")
    cdef int64_t fixed[_MAXCOL]
    for j in range(ncols):
        fixed[j] = sizes[j]
    cdef list views = [byte_view(buf) for buf in bufs]  # held while C reads the buffers
    cdef const uint8_t **rec = <const uint8_t **>malloc((m + 1) * sizeof(uint8_t *))
    cdef uint64_t *length = <uint64_t *>malloc((m + 1) * sizeof(uint64_t))
    cdef hpcio_error err
    cdef hpcio_status st
    out = np.empty(m, np.int64)
    cdef int64_t[::1] counts = out
    cdef int64_t *first_ptr = &first[0] if first is not None and m else NULL
    try:
        if rec == NULL or length == NULL:
            raise MemoryError("mds_lengths: no memory for the record table")
        bad = _record_table(views, buf_of, starts, ends, rec, length)
        if bad >= 0:
            return None, bad
        hpcio_error_clear(&err)
        with nogil:
            st = hpcio_mds_column_lengths(rec, length, m, fixed, ncols, col, utf8,
                                          &counts[0] if m else NULL, first_ptr, &err)
        if st != HPCIO_OK:
            return None, _failed_record(st, &err)
        return out, -1
    finally:
        free(rec)
        free(length)


def utf8_lengths(data, const uint64_t[::1] offsets):
    """Characters (``len(str)``) of the UTF-8 values ``data[offsets[j]:offsets[j + 1]]``,
    counted without decoding: an int64 array of ``len(offsets) - 1`` values.  A value
    Python's strict decoder would refuse raises DecodeError naming it and the byte."""
    cdef const uint8_t[::1] view = byte_view(data)
    cdef Py_ssize_t m = offsets.shape[0] - 1
    if m < 0:
        raise ValueError("utf8_lengths: offsets must hold at least one position")
    out = np.empty(m, np.int64)
    cdef int64_t[::1] counts = out
    cdef hpcio_error err
    cdef hpcio_status st
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_utf8_lengths(data_ptr(view), view.shape[0], &offsets[0], m,
                                &counts[0] if m else NULL, &err)
    check(st, &err, None, -1, -1)
    return out


cdef object _json_error(hpcio_status st, hpcio_error *err):
    if st == HPCIO_E_NOMEM:
        return MemoryError(err.msg.decode("utf-8", "replace"))
    where = f"document {err.item}" if err.item >= 0 else "the documents"
    if err.offset >= 0:
        where += f" (byte {err.offset} of the column)"
    return ValueError(f"{where}: {err.msg.decode('utf-8', 'replace')}")


_JSON_SCALARS = {HPCIO_JSON_INT: ("int", np.int64), HPCIO_JSON_FLOAT: ("float", np.float64),
                 HPCIO_JSON_BOOL: ("bool", np.bool_)}


def json_columns(data, const int64_t[::1] offsets):
    """The JSON objects ``data[offsets[j]:offsets[j + 1]]`` split into one column per key,
    parsed in C without the GIL.

    Returns ``(names, parts)``: each key's name as it is written in the first document
    (JSON string, quotes included) and its values as ``("str" | "json", data, offsets)``
    (``"json"``: each value's JSON text), ``("int" | "float" | "bool", array)`` or
    ``("list", offsets, elements)`` with elements one of those (None when every list is
    empty).  Raises ValueError naming the document and byte when a document is not JSON
    or not an object with the first document's keys.
    """
    cdef const uint8_t[::1] view = byte_view(data)
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef size_t k
    if n < 0:
        raise ValueError("json_columns: offsets must hold at least one position")
    cdef const uint8_t *base = data_ptr(view)
    cdef size_t nkeys = 0
    cdef uint64_t key_spans[2 * HPCIO_JSON_MAX_KEYS]
    cdef hpcio_json_key keys[HPCIO_JSON_MAX_KEYS]
    cdef uint64_t *spans = NULL
    cdef hpcio_error err
    cdef hpcio_status st
    cdef int typ, elem
    cdef uint8_t[::1] bytes_out
    cdef int64_t[::1] offs_out
    cdef uint8_t *bytes_p
    cdef int64_t *offs_p
    cdef int64_t *items_p
    cdef void *values_p
    hpcio_error_clear(&err)
    with nogil:
        st = hpcio_json_scan(base, view.shape[0], <const uint64_t *>&offsets[0], n, &nkeys,
                             key_spans, keys, &spans, &err)
    if st != HPCIO_OK:
        raise _json_error(st, &err)
    try:
        names = [bytes(view[key_spans[2 * k]:key_spans[2 * k + 1]]) for k in range(nkeys)]
        parts = []
        for k in range(nkeys):
            typ = keys[k].type
            elem = typ & ~HPCIO_JSON_LIST
            bytes_p = offs_p = items_p = values_p = NULL
            count = keys[k].items if typ & HPCIO_JSON_LIST else n
            if typ == HPCIO_JSON_RAW or elem == HPCIO_JSON_STR:
                bytes_arr = np.empty(keys[k].raw_bytes if typ == HPCIO_JSON_RAW else keys[k].bytes,
                                     np.uint8)
                bytes_out = bytes_arr
                bytes_p = &bytes_out[0] if bytes_out.shape[0] else NULL
                text_offsets = np.empty(count + 1, np.int64)
                offs_out = text_offsets
                if typ & HPCIO_JSON_LIST:
                    items_p = &offs_out[0]
                else:
                    offs_p = &offs_out[0]
                elements = ("json" if typ == HPCIO_JSON_RAW else "str", bytes_arr, text_offsets)
            elif elem == HPCIO_JSON_NONE:
                elements = None
            else:
                name, dtype = _JSON_SCALARS[elem]
                values = np.empty(count, dtype)
                values_p = <void *><size_t>values.ctypes.data
                elements = (name, values)
            if typ & HPCIO_JSON_LIST:
                list_offsets = np.empty(n + 1, np.int64)
                offs_out = list_offsets
                offs_p = &offs_out[0]
            with nogil:
                st = hpcio_json_fill(base, spans, n, nkeys, k, typ, bytes_p, offs_p, items_p,
                                     values_p, &err)
            if st != HPCIO_OK:
                raise _json_error(st, &err)
            parts.append(("list", list_offsets, elements) if typ & HPCIO_JSON_LIST else elements)
        return names, parts
    finally:
        free(spans)


cdef class RecordPacker:
    """Packs the MDS record of a sample dict whose values all have the plain type of their
    column: ``str`` in a ``str`` column, ``int`` (within int64) in an ``int`` column, what
    ``json_dumps`` turns into text in a ``json`` column, and ``bytes``, stored as they are,
    in any column (streaming's rule).  ``pack`` returns None for anything else (another
    value type, a missing or extra field, a value ``json_dumps`` refuses, a size that does
    not fit): the caller's general encoder then packs it or raises its exact error.

    ``names`` are the columns in record order, ``kinds`` their KIND_STR, KIND_INT,
    KIND_JSON or KIND_BYTES (bytes values only), ``sizes`` their fixed sizes (None where
    variable, these lead the record as little-endian uint32 lengths).
    """
    cdef tuple names
    cdef int ncols
    cdef int nvar
    cdef int kinds[_MAXCOL]
    cdef Py_ssize_t sizes[_MAXCOL]
    cdef object json_dumps

    def __init__(self, tuple names, tuple kinds, tuple sizes, json_dumps):
        if not (len(names) == len(kinds) == len(sizes)) or len(names) > _MAXCOL:
            raise ValueError(f"{len(names)} names, {len(kinds)} kinds and {len(sizes)} sizes "
                             f"for at most {_MAXCOL} columns")
        self.names = names
        self.ncols = len(names)
        self.nvar = 0
        for c in range(self.ncols):
            if kinds[c] not in (_STR, _BYTES, _INT, _JSON):
                raise ValueError(f"kind {kinds[c]!r} cannot be packed")
            self.kinds[c] = kinds[c]
            self.sizes[c] = -1 if sizes[c] is None else sizes[c]
            if sizes[c] is None:
                self.nvar += 1
        self.json_dumps = json_dumps

    def pack(self, sample):
        """The record of ``sample`` as bytes, or None (see the class)."""
        cdef const char *ptr[_MAXCOL]
        cdef Py_ssize_t length[_MAXCOL]
        cdef int64_t ints[_MAXCOL]
        cdef Py_ssize_t total = 4 * self.nvar
        cdef Py_ssize_t n
        cdef PyObject *item
        cdef int c, kind
        cdef char *out
        cdef uint32_t head
        if type(sample) is not dict or PyDict_Size(sample) != self.ncols:
            return None
        made = []  # the JSON texts made here, alive until copied
        for c in range(self.ncols):
            item = PyDict_GetItem(sample, self.names[c])
            if item is NULL:
                return None
            value = <object>item
            kind = self.kinds[c]
            if type(value) is bytes:
                ptr[c] = PyBytes_AS_STRING(value)
                length[c] = len(<bytes>value)
            elif kind == _STR and type(value) is str:
                try:
                    ptr[c] = PyUnicode_AsUTF8AndSize(value, &n)
                except UnicodeEncodeError:  # a lone surrogate: the general path raises
                    return None
                length[c] = n
            elif kind == _INT and type(value) is int:
                try:
                    ints[c] = PyLong_AsLongLong(value)
                except OverflowError:  # beyond int64: the general path raises
                    return None
                ptr[c] = <const char *>&ints[c]  # little-endian, as every target of hpcio
                length[c] = 8
            elif kind == _JSON:
                try:
                    text = self.json_dumps(value)
                except Exception:  # the general path raises what it raises
                    return None
                if type(text) is not str:
                    return None
                made.append(text)
                ptr[c] = PyUnicode_AsUTF8AndSize(text, &n)
                length[c] = n
            else:
                return None
            if self.sizes[c] >= 0 and length[c] != self.sizes[c]:
                return None
            if self.sizes[c] < 0 and length[c] > 0xFFFFFFFF:
                return None
            total += length[c]
        record = PyBytes_FromStringAndSize(NULL, total)
        out = PyBytes_AS_STRING(record)
        for c in range(self.ncols):
            if self.sizes[c] < 0:
                head = <uint32_t>length[c]
                memcpy(out, &head, 4)
                out += 4
        for c in range(self.ncols):
            memcpy(out, ptr[c], length[c])
            out += length[c]
        return record
