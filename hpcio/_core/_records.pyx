# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, cdivision=True, initializedcheck=False, nonecheck=False
# distutils: language = c
"""Sample dicts built straight from MDS records (compiled).

Slicing records into columns with numpy and zipping the column lists into dicts costs
several Python objects per value; here each record's column bounds are computed in C and
each value object is created once, directly from the record bytes.  Only the value kinds
whose construction is fixed (``str``, ``bytes``, ``int``, ``json``) are handled; the
caller keeps its general path for everything else and for every error, so messages stay
exact.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_New, PyDict_SetItem
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

from ._utils cimport byte_view, data_ptr

cdef enum:
    _MAXCOL = 64

KIND_STR = 0
KIND_BYTES = 1
KIND_INT = 2
KIND_JSON = 3
MAX_COLUMNS = _MAXCOL


def mds_samples(buf, const int64_t[::1] starts, const int64_t[::1] ends, tuple names,
                tuple sizes, tuple kinds, tuple cols, json_loads):
    """Dicts ``{names[c]: value}`` for ``c`` in ``cols`` of records ``buf[starts[j]:ends[j]]``.

    ``sizes[c]`` is column c's fixed size or -1 (variable: its u32 size is in the record
    header); ``kinds[c]`` is one of KIND_STR, KIND_BYTES, KIND_INT (8-byte little-endian
    signed), KIND_JSON (``json_loads(bytes)``).  Returns ``(samples, bad)``: ``bad`` is
    -1, or the first record that is malformed or whose value cannot be built (then
    ``samples`` is None and the caller decodes the batch its general way to report it).
    """
    cdef Py_ssize_t m = starts.shape[0]
    cdef Py_ssize_t ncols = len(sizes)
    cdef Py_ssize_t nsel = len(cols)
    if ncols > _MAXCOL or ends.shape[0] != m:
        raise ValueError(f"mds_samples: {ncols} columns (at most {_MAXCOL}), "
                         f"{m} starts and {ends.shape[0]} ends")
    cdef int64_t fixed[_MAXCOL]
    cdef int kind_of[_MAXCOL]
    cdef int sel[_MAXCOL]
    cdef int64_t lo[_MAXCOL]
    cdef int64_t hi[_MAXCOL]
    cdef Py_ssize_t c, j, nvar = 0
    for c in range(ncols):
        fixed[c] = sizes[c]
        kind_of[c] = kinds[c]
        if fixed[c] < 0:
            nvar += 1
    for c in range(nsel):
        sel[c] = cols[c]
        if not 0 <= sel[c] < ncols:
            raise ValueError(f"mds_samples: column {sel[c]} of {ncols}")
    cdef list key_of = [names[c] for c in range(ncols)]
    cdef const uint8_t[::1] view = byte_view(buf)
    cdef const uint8_t *base = data_ptr(view)
    cdef int64_t size = view.shape[0]
    cdef int64_t a, b, pos, head = 4 * nvar, v
    cdef uint32_t n32
    cdef Py_ssize_t var_i
    cdef int k
    cdef list out = PyList_New(m)
    cdef dict d
    cdef object value
    cdef const char *p
    for j in range(m):
        a = starts[j]
        b = ends[j]
        if a < 0 or b > size or b - a < head:
            return None, j
        pos = a + head
        var_i = 0
        for c in range(ncols):
            if fixed[c] < 0:
                memcpy(&n32, base + a + 4 * var_i, 4)
                var_i += 1
                lo[c] = pos
                pos += n32
            else:
                lo[c] = pos
                pos += fixed[c]
            hi[c] = pos
        if pos != b:
            return None, j
        d = PyDict_New()
        for c in range(nsel):
            p = <const char *>(base + lo[sel[c]])
            try:
                k = kind_of[sel[c]]
                if k == KIND_STR:
                    value = PyUnicode_DecodeUTF8(p, hi[sel[c]] - lo[sel[c]], NULL)
                elif k == KIND_BYTES:
                    value = PyBytes_FromStringAndSize(p, hi[sel[c]] - lo[sel[c]])
                elif k == KIND_INT:
                    if hi[sel[c]] - lo[sel[c]] != 8:
                        return None, j
                    memcpy(&v, p, 8)
                    value = PyLong_FromLongLong(v)
                elif k == KIND_JSON:
                    value = json_loads(PyBytes_FromStringAndSize(p, hi[sel[c]] - lo[sel[c]]))
                else:
                    return None, j
            except Exception:
                return None, j
            PyDict_SetItem(d, key_of[sel[c]], value)
        Py_INCREF(d)
        PyList_SET_ITEM(out, j, d)
    return out, -1
