# Included by _records.pyx: samples and columns read with pread from a shard file
# descriptor, for shards not mapped into memory.

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
    """:func:`mds_samples` for records of the file ``fd`` whose read-only mapping is ``whole``
    (:func:`mds_samples_pread_files` with one file)."""
    return mds_samples_pread_files(np.array([fd], np.int32), [whole], np.zeros(starts.shape[0], np.int32),
                                   starts, ends, names, sizes, kinds, cols, json_loads)


def mds_samples_pread_files(const int32_t[::1] fds, list wholes, const int32_t[::1] file_of,
                            const int64_t[::1] starts, const int64_t[::1] ends,
                            tuple names, tuple sizes, tuple kinds, tuple cols, json_loads):
    """:func:`mds_samples` for records ``[starts[j], ends[j])`` of the files
    ``fds[file_of[j]]``, whose read-only mappings are ``wholes[file_of[j]]``.

    Each record's first bytes (its column sizes and the values stored first) come in one
    ``pread``, each selected value past them in another, straight into its ``bytes`` object
    where the value is bytes.  KIND_VIEW values slice the mapping without touching it.
    When the record ends with a value read this way and the next record starts there in
    the same file (a pass in storage order), the next record's first bytes come in the
    same call: a record read for its first and last columns then costs one read, not two.
    Reading a mapped file instead takes a page fault for every page first touched, and a
    fault costs more than a small read; and a batch read this way copies each value once,
    into the memory the process freed last, where reading the batch into one buffer first
    copies it twice, the first time into fresh pages.
    Returns ``(samples, bad)`` as mds_samples; ``bad`` is also set when a read fails or
    ends early, and the caller's general path then reports the record.
    """
    cdef Py_ssize_t m = starts.shape[0], nfiles = fds.shape[0], c, j
    cdef _Columns L
    _unpack_layout("mds_samples_pread", m, ends.shape[0], sizes, kinds, cols, &L)
    if file_of.shape[0] != m or len(wholes) != nfiles:
        raise InvalidArgumentError(f"mds_samples_pread: {m} records, {file_of.shape[0]} file numbers, "
                                   f"{nfiles} descriptors, {len(wholes)} mappings")
    cdef list key_of = list(names)
    cdef list views = [byte_view(w).toreadonly() for w in wholes]  # sliced for KIND_VIEW values
    cdef int64_t[::1] file_size = np.array([len(v) for v in views], np.int64)
    cdef int64_t a, b, head = 4 * L.nvar, got, n, size, window = max(_HEAD_WINDOW, head)
    cdef int64_t ahead_at = -1, ahead_got = 0, next_got
    cdef int k, col, failed, status, fd
    cdef int32_t f, ahead_file = -1
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
            f = file_of[j]
            if f < 0 or f >= nfiles:
                return None, j
            fd, size = fds[f], file_size[f]
            a = starts[j]
            b = ends[j]
            if a < 0 or b > size or b - a < head:
                return None, j
            got = min(window, b - a)
            if ahead_at == a and ahead_file == f and ahead_got == got:
                first, ahead = ahead, first
            else:
                with nogil:
                    failed = _pread_all(fd, first, got, a)
                if failed:
                    return None, j
            ahead_at = -1
            next_got = 0
            if j + 1 < m and file_of[j + 1] == f and starts[j + 1] == b and ends[j + 1] <= size:
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
                        value = views[f][L.lo[col]:L.hi[col]]
                    elif L.hi[col] <= a + got:
                        value = _value(k, first + (L.lo[col] - a), n, json_loads)
                    else:
                        value = _value_read(fd, k, L.lo[col], n, ahead, next_got if L.hi[col] == b else 0,
                                            &spill, json_loads, &status)
                        if status < 0:
                            return None, j
                        if status == 1:
                            ahead_at, ahead_got, ahead_file = b, next_got, f
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
