# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""Sample dicts and columns built straight from MDS records, and records packed straight
from sample dicts (compiled).

Slicing records into columns with numpy and zipping the column lists into dicts costs
several Python objects per value; here each record's column bounds are computed in C and
each value object is created once, directly from the record bytes.  Only the value kinds
whose construction is fixed (``str``, ``bytes``, ``int``, ``json``, ``pkl``, and hpcio's
``list[bytes]`` and ``dict[bytes]``) are handled; the
caller keeps its general path for everything else and for every error, so messages stay
exact.  :class:`RecordPacker` is the same bargain for writing.
"""

from cpython.buffer cimport PyBUF_FORMAT, PyBUF_READ
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem, PyDict_New, PyDict_SetItem, PyDict_Size
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLong, PyLong_FromLongLong
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.ref cimport Py_INCREF
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy
from posix.types cimport off_t
from posix.uio cimport iovec, preadv

import json as _py_json
from _pickle import loads as _pickle_loads

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

from ..errors import DecodeError, InvalidArgumentError

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
    _BYTES_LIST = 5
    _BYTES_DICT = 6
    _PICKLE = 7

KIND_STR = _STR
KIND_BYTES = _BYTES
KIND_INT = _INT
KIND_JSON = _JSON
KIND_VIEW = _VIEW
KIND_BYTES_LIST = _BYTES_LIST
KIND_BYTES_DICT = _BYTES_DICT
KIND_PICKLE = _PICKLE
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
        raise InvalidArgumentError(f"{who}: {L.ncols} columns (at most {_MAXCOL}), {L.nsel} selected, "
                         f"{m} starts and {m_ends} ends")
    for c in range(L.ncols):
        L.fixed[c] = sizes[c]
        L.kind[c] = kinds[c]
        if L.fixed[c] < 0:
            L.nvar += 1
    for c in range(L.nsel):
        L.sel[c] = cols[c]
        if not 0 <= L.sel[c] < L.ncols:
            raise InvalidArgumentError(f"{who}: column {L.sel[c]} of {L.ncols}")
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
    ``buf``, which it keeps alive), KIND_BYTES_LIST (a list of ``bytes``), KIND_BYTES_DICT
    (a mapping holding ``bytes``; its JSON read exactly, whatever ``json_loads``),
    KIND_PICKLE (unpickled from the record's bytes where they lie, with no copy of them
    first).  Returns ``(samples, bad)``: ``bad`` is
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


def mds_samples_files(list wholes, const int32_t[::1] file_of, const int64_t[::1] starts,
                      const int64_t[::1] ends, tuple names, tuple sizes, tuple kinds, tuple cols, json_loads):
    """:func:`mds_samples` for records ``wholes[file_of[j]][starts[j]:ends[j]]`` of several
    mapped files, in the order given: a shuffled batch over many shards is built record by
    record where it lies, with no grouping by shard and no copy of the batch first.
    Returns ``(samples, bad)`` as mds_samples; a file number out of range is ``bad``."""
    cdef Py_ssize_t m = starts.shape[0], nfiles = len(wholes), j
    cdef _Columns L
    _unpack_layout("mds_samples_files", m, ends.shape[0], sizes, kinds, cols, &L)
    if file_of.shape[0] != m:
        raise InvalidArgumentError(f"mds_samples_files: {m} records, {file_of.shape[0]} file numbers")
    cdef list key_of = list(names)
    cdef list views = [byte_view(w).toreadonly() for w in wholes]  # held while their pointers are used
    cdef const uint8_t[::1] view
    cdef const uint8_t **base = <const uint8_t **>malloc(max(nfiles, 1) * sizeof(uint8_t *))
    cdef int64_t *size = <int64_t *>malloc(max(nfiles, 1) * sizeof(int64_t))
    cdef int32_t f
    cdef list out = PyList_New(m)
    cdef object d
    try:
        if base == NULL or size == NULL:
            raise MemoryError("mds_samples_files: no memory for the file table")
        for f in range(nfiles):
            view = views[f]
            base[f], size[f] = data_ptr(view), view.shape[0]
        for j in range(m):
            f = file_of[j]
            if f < 0 or f >= nfiles:
                return None, j
            d = _sample(base[f], size[f], views[f], starts[j], ends[j], &L, key_of, json_loads)
            if d is None:
                return None, j
            _place(out, j, d)
    finally:
        free(base)
        free(size)
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
        raise InvalidArgumentError("loads_json_values: no offsets")
    for j in range(m + 1):
        if not 0 <= offsets[j] <= view.shape[0]:
            raise InvalidArgumentError(f"loads_json_values: offset {offsets[j]} outside the {view.shape[0]} bytes")
        if j and offsets[j] < offsets[j - 1]:
            raise InvalidArgumentError(f"loads_json_values: offset {offsets[j]} below the one before it")
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
            raise DecodeError("an int column value is not 8 bytes")
        memcpy(&v, p, 8)
        return PyLong_FromLongLong(v)
    if k == _JSON:
        if hpcio_json_wide_int(<const uint8_t *>p, n):
            raise DecodeError("an integer orjson would read as a float")
        return json_loads(PyBytes_FromStringAndSize(p, n))
    if k == _BYTES_LIST:
        return _bytes_list(p, n)
    if k == _BYTES_DICT:
        return _bytes_dict(p, n)
    if k == _PICKLE:  # pickle copies what it builds out of the bytes; the view does not outlive it
        return _pickle_loads(PyMemoryView_FromMemory(<char *>p, n, PyBUF_READ))
    raise InvalidArgumentError(f"no direct construction for value kind {k}")


# Readers of shards by file descriptor, and column builders: textual includes, one
# extension.
include "_records_pread.pxi"
include "_records_columns.pxi"
include "_records_lists.pxi"


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
            raise InvalidArgumentError(f"{len(names)} names, {len(kinds)} kinds and {len(sizes)} sizes "
                             f"for at most {_MAXCOL} columns")
        self.names = names
        self.ncols = len(names)
        self.nvar = 0
        for c in range(self.ncols):
            if kinds[c] not in (_STR, _BYTES, _INT, _JSON):
                raise InvalidArgumentError(f"kind {kinds[c]!r} cannot be packed")
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
