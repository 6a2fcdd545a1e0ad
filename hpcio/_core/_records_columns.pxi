# Included by _records.pyx: columns built from records in memory (one buffer per
# column, pooled), UTF-8 lengths, and JSON columns split into one column per key.

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
    if ncols > _MAXCOL or nsel > _MAXCOL or ends.shape[0] != m or buf_of.shape[0] != m:
        raise InvalidArgumentError(f"mds_columns: {ncols} columns and {nsel} selected (at most {_MAXCOL} "
                                   f"each), {m} starts, {ends.shape[0]} ends and {buf_of.shape[0]} "
                                   "buffer numbers")
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
        raise InvalidArgumentError(f"mds_lengths: {ncols} columns (at most {_MAXCOL}), {m} starts, "
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
        raise InvalidArgumentError("utf8_lengths: offsets must hold at least one position")
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
        raise InvalidArgumentError("json_columns: offsets must hold at least one position")
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
