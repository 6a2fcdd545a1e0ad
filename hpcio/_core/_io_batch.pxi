# Included by _io.pyx: the open shards of a dataset as one table for batch reads.

from cpython.mem cimport PyMem_Free, PyMem_Malloc

from ._chpcio cimport hpcio_batch_extents, hpcio_batch_gather


cdef class ShardTable:
    """The shards a reader has open, as C arrays indexed by shard number, so that a batch
    of samples spread over any number of shards is located and read by one GIL-free
    call: no Python work per shard the batch touches.

    Each attached shard gives its bytes (a mapping or decompressed memory, kept alive
    here), its offset table (checked when the shard was opened), its sample count, and a
    descriptor.  A shard attached with ``planned=True`` has its records read from the
    descriptor with planned requests (``hpcio_read_extents``), the others are copied
    from their bytes.
    """

    cdef readonly Py_ssize_t nshards
    cdef list _keep
    cdef list _paths
    cdef const uint8_t **_bases
    cdef const uint8_t **_tables
    cdef const uint8_t **_mapped
    cdef uint64_t *_sizes
    cdef uint64_t *_counts
    cdef int *_fds

    def __cinit__(self, Py_ssize_t nshards):
        self.nshards = nshards
        cdef size_t n = <size_t>(nshards if nshards > 0 else 1)
        self._bases = <const uint8_t **>PyMem_Malloc(n * sizeof(uint8_t *))
        self._tables = <const uint8_t **>PyMem_Malloc(n * sizeof(uint8_t *))
        self._mapped = <const uint8_t **>PyMem_Malloc(n * sizeof(uint8_t *))
        self._sizes = <uint64_t *>PyMem_Malloc(n * sizeof(uint64_t))
        self._counts = <uint64_t *>PyMem_Malloc(n * sizeof(uint64_t))
        self._fds = <int *>PyMem_Malloc(n * sizeof(int))
        if not (self._bases and self._tables and self._mapped and self._sizes and self._counts and self._fds):
            raise MemoryError()
        cdef size_t k
        for k in range(n):
            self._bases[k] = self._tables[k] = self._mapped[k] = NULL
            self._sizes[k] = self._counts[k] = 0
            self._fds[k] = -1
        self._keep = [None] * nshards
        self._paths = [None] * nshards

    def __dealloc__(self):
        PyMem_Free(self._bases)
        PyMem_Free(self._tables)
        PyMem_Free(self._mapped)
        PyMem_Free(self._sizes)
        PyMem_Free(self._counts)
        PyMem_Free(self._fds)

    def attach(self, Py_ssize_t k, buf, uint64_t count, int fd, path, bint planned):
        """Shard ``k``: ``buf`` its bytes, starting with the u32 count and ``count + 1``
        checked u32 offsets; ``fd`` (or -1) the file they were mapped from."""
        self._check(k)
        view = byte_view(buf)
        cdef const uint8_t[::1] data = view
        if <uint64_t>data.shape[0] < 8 + 4 * count:
            raise InvalidArgumentError(f"shard {k}: {data.shape[0]} bytes cannot hold {count} offsets")
        if planned and fd < 0:
            raise InvalidArgumentError(f"shard {k}: planned reads need a file descriptor")
        self._keep[k] = view
        self._paths[k] = path
        self._mapped[k] = &data[0]
        self._tables[k] = &data[4]
        self._bases[k] = NULL if planned else &data[0]
        self._sizes[k] = data.shape[0]
        self._counts[k] = count
        self._fds[k] = fd

    def detach(self, Py_ssize_t k):
        """Forget shard ``k`` (before it is closed)."""
        self._check(k)
        self._bases[k] = self._tables[k] = self._mapped[k] = NULL
        self._fds[k] = -1
        self._keep[k] = None
        self._paths[k] = None

    cdef int _check(self, Py_ssize_t k) except -1:
        if not 0 <= k < self.nshards:
            raise InvalidArgumentError(f"shard {k} out of range for {self.nshards} shards")
        return 0

    def shrunk(self, const int64_t[::1] shards):
        """The first of ``shards`` whose file is now shorter than when it was attached,
        with its current size, as ``(shard, size)``; None when none shrank.  Reading
        the lost part of a mapping would raise SIGBUS: one ``lseek`` per shard."""
        cdef Py_ssize_t j, k
        cdef off_t end = 0
        cdef int bad = -1
        with nogil:
            for j in range(shards.shape[0]):
                k = shards[j]
                if 0 <= k < self.nshards and self._fds[k] >= 0:
                    end = lseek(self._fds[k], 0, SEEK_END)
                    if end >= 0 and <uint64_t>end < self._sizes[k]:
                        bad = <int>k
                        break
        return None if bad < 0 else (bad, int(end))

    def extents(self, const int64_t[::1] shard, const uint64_t[::1] local):
        """``(starts, ends)``: the byte extent of record ``local[j]`` of shard ``shard[j]``."""
        cdef size_t m = shard.shape[0]
        if <size_t>local.shape[0] != m:
            raise InvalidArgumentError(f"{m} shards but {local.shape[0]} records")
        starts = np.empty(m, np.uint64)
        ends = np.empty(m, np.uint64)
        cdef uint64_t[::1] sv = starts, ev = ends
        cdef hpcio_error err
        cdef hpcio_status st = HPCIO_OK
        hpcio_error_clear(&err)
        if m:
            with nogil:
                st = hpcio_batch_extents(self._tables, self._counts, self.nshards, &shard[0], &local[0],
                                         m, &sv[0], &ev[0], &err)
        check(st, &err, None, -1, -1)
        return starts, ends

    def read(self, const int64_t[::1] shard, const uint64_t[::1] starts, const uint64_t[::1] ends,
             int depth=1, uint64_t max_gap=0):
        """Records ``[starts[j], ends[j])`` of shards ``shard[j]`` back to back, in batch
        order: ``(data, positions)``.  Records of shards held as bytes are copied; those
        of planned shards are read from their files as planned requests, sorted by file
        and offset, neighbours closer than ``max_gap`` coalesced, ``depth`` of them in
        flight.  A failure raises the hpcio error with ``err.item`` the record's
        position in the batch (``exc.batch_item``) and its shard's path."""
        cdef size_t m = shard.shape[0], j, p = 0
        if not (<size_t>starts.shape[0] == <size_t>ends.shape[0] == m):
            raise InvalidArgumentError(f"{m} shards, {starts.shape[0]} starts, {ends.shape[0]} ends")
        positions = np.empty(m + 1, np.uint64)
        cdef uint64_t[::1] pos = positions
        cdef uint64_t total = 0
        cdef size_t planned = 0
        cdef int64_t k
        cdef int bad = -1
        with nogil:
            for j in range(m):
                pos[j] = total
                k = shard[j]
                if k < 0 or k >= self.nshards or self._tables[k] == NULL or ends[j] < starts[j]:
                    bad = <int>j
                    break
                total += ends[j] - starts[j]
                planned += self._bases[k] == NULL
            pos[m] = total
        if bad >= 0:
            raise InvalidArgumentError(f"record {bad} of the batch names no open shard or a bad extent")
        out = PyByteArray_FromStringAndSize(NULL, total)
        cdef uint8_t *dst = <uint8_t *>PyByteArray_AS_STRING(out)
        cdef hpcio_error err
        cdef hpcio_status st
        hpcio_error_clear(&err)
        with nogil:
            st = hpcio_batch_gather(self._bases, self._sizes, self.nshards, &shard[0], &starts[0],
                                    &ends[0], m, dst, total, &pos[0], &err)
        if st != HPCIO_OK:
            self._raise(st, &err, shard, err.item)
        if planned:
            self._read_planned(shard, starts, ends, pos, planned, dst, total, depth, max_gap)
        return out, positions

    cdef int _read_planned(self, const int64_t[::1] shard, const uint64_t[::1] starts,
                           const uint64_t[::1] ends, const uint64_t[::1] pos, size_t planned,
                           uint8_t *dst, uint64_t total, int depth, uint64_t max_gap) except -1:
        """The records of planned shards read into ``dst`` by ``hpcio_read_extents``."""
        which = np.empty(planned, np.intp)
        file = np.empty(planned, np.uint32)
        offsets = np.empty(planned, np.uint64)
        lengths = np.empty(planned, np.uint64)
        out = np.empty(planned, np.uint64)
        cdef Py_ssize_t[::1] wv = which
        cdef uint32_t[::1] fv = file
        cdef uint64_t[::1] ov = offsets, lv = lengths, dv = out
        cdef size_t j, q = 0, m = shard.shape[0]
        cdef int64_t k
        cdef uint64_t requests = 0, nbytes = 0
        cdef hpcio_error err
        cdef hpcio_status st
        with nogil:
            for j in range(m):
                k = shard[j]
                if self._bases[k] == NULL:
                    wv[q] = j
                    fv[q] = <uint32_t>k
                    ov[q] = starts[j]
                    lv[q] = ends[j] - starts[j]
                    dv[q] = pos[j]
                    q += 1
        hpcio_error_clear(&err)
        with nogil:
            st = hpcio_read_extents(self._fds, self.nshards, &fv[0], &ov[0], &lv[0], &dv[0], planned,
                                    dst, total, max_gap, 0, depth, &requests, &nbytes, &err)
        if st != HPCIO_OK:
            self._raise(st, &err, shard, which[err.item] if 0 <= err.item < <int64_t>planned else -1)
        return 0

    cdef int _raise(self, hpcio_status st, hpcio_error *err, const int64_t[::1] shard,
                    Py_ssize_t item) except -1:
        """Raise for a failed read of batch record ``item``: the error names its shard's
        file; the caller turns the position into a sample (``exc.batch_item``)."""
        path = self._paths[shard[item]] if 0 <= item < shard.shape[0] and 0 <= shard[item] < self.nshards else None
        err.item = -1
        try:
            check(st, err, path, -1, -1)
        except Exception as exc:
            exc.batch_item = item if item >= 0 else None
            raise
        return 0
