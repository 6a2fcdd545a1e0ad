# cython: language_level=3
"""Declarations of the C kernel contract (csrc/hpcio.h), shared by every _core module."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef extern from "hpcio.h" nogil:
    ctypedef enum hpcio_status:
        HPCIO_OK
        HPCIO_E_RANGE
        HPCIO_E_CORRUPT
        HPCIO_E_TRUNCATED
        HPCIO_E_IO
        HPCIO_E_NOMEM
        HPCIO_E_CODEC
        HPCIO_E_LIMIT
        HPCIO_E_BUFFER
        HPCIO_E_ARG

    ctypedef struct hpcio_error:
        int64_t item
        int64_t offset
        int sys_errno
        char msg[192]

    void hpcio_error_clear(hpcio_error *err)

    hpcio_status hpcio_bisect(const uint64_t *cum, size_t nshards, const uint64_t *ids,
                              size_t n, int64_t *shard_out, uint64_t *local_out,
                              hpcio_error *err)

    enum: HPCIO_BIJECTION_ROUNDS
    hpcio_status hpcio_bijection_forward(const uint64_t *keys, uint64_t n, const int64_t *inp,
                                         int64_t *out, size_t count, hpcio_error *err)
    hpcio_status hpcio_bijection_inverse(const uint64_t *keys, uint64_t n, const int64_t *inp,
                                         int64_t *out, size_t count, hpcio_error *err)
    hpcio_status hpcio_bijection_forward_range(const uint64_t *keys, uint64_t n, int64_t first,
                                               int64_t *out, size_t count, hpcio_error *err)

    hpcio_status hpcio_offset_ranges(const uint8_t *table, int width, size_t nrec,
                                     uint64_t limit, const uint64_t *indices, size_t m,
                                     uint64_t *starts, uint64_t *ends, hpcio_error *err)
    hpcio_status hpcio_gather(const uint8_t *src, uint64_t src_len, const uint64_t *starts,
                              const uint64_t *ends, size_t m, uint8_t *out, uint64_t out_cap,
                              uint64_t *out_offsets, hpcio_error *err)

    enum: HPCIO_MDS_MAX_COLUMNS
    hpcio_status hpcio_mds_column_offsets(const uint8_t *const *rec, const uint64_t *len,
                                          size_t m, const int64_t *fixed, size_t ncols,
                                          const int32_t *sel, size_t nsel, uint64_t *offsets,
                                          hpcio_error *err)
    hpcio_status hpcio_mds_column_copy(const uint8_t *const *rec, const uint64_t *len, size_t m,
                                       const int64_t *fixed, size_t ncols, const int32_t *sel,
                                       size_t nsel, const uint64_t *offsets, uint8_t *const *out,
                                       hpcio_error *err)
    void hpcio_mds_prefetch_values(const uint8_t *r, uint64_t n, const int64_t *fixed,
                                   size_t ncols, const int32_t *sel, size_t nsel)
    hpcio_status hpcio_utf8_lengths(const uint8_t *data, uint64_t len, const uint64_t *offsets,
                                    size_t m, int64_t *out, hpcio_error *err)
    hpcio_status hpcio_mds_column_lengths(const uint8_t *const *rec, const uint64_t *len,
                                          size_t m, const int64_t *fixed, size_t ncols,
                                          int32_t col, int utf8, int64_t *out, int64_t *first,
                                          hpcio_error *err)

    enum: HPCIO_JSON_MAX_KEYS
    enum:
        HPCIO_JSON_NONE
        HPCIO_JSON_STR
        HPCIO_JSON_INT
        HPCIO_JSON_FLOAT
        HPCIO_JSON_BOOL
        HPCIO_JSON_RAW
        HPCIO_JSON_LIST
    ctypedef struct hpcio_json_key:
        int type
        uint64_t bytes
        uint64_t items
        uint64_t raw_bytes
    hpcio_status hpcio_json_scan(const uint8_t *data, uint64_t len, const uint64_t *offsets,
                                 size_t n, size_t *nkeys, uint64_t *key_spans,
                                 hpcio_json_key *keys, uint64_t **spans, hpcio_error *err)
    hpcio_status hpcio_json_fill(const uint8_t *data, const uint64_t *spans, size_t n,
                                 size_t nkeys, size_t k, int type, uint8_t *bytes,
                                 int64_t *offsets, int64_t *item_offsets, void *values,
                                 hpcio_error *err)
    int hpcio_json_wide_int(const uint8_t *p, size_t n) nogil

    hpcio_status hpcio_pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t offset,
                                  hpcio_error *err)
    hpcio_status hpcio_pread_records(int fd, const uint64_t *starts, const uint64_t *ends,
                                     size_t m, uint8_t *buf, uint64_t cap,
                                     uint64_t *out_offsets, size_t *n_done,
                                     hpcio_error *err)
    hpcio_status hpcio_read_extents(const int *fds, size_t nfiles, const uint32_t *file,
                                    const uint64_t *off, const uint64_t *len, const uint64_t *out,
                                    size_t m, uint8_t *dst, uint64_t dst_cap, uint64_t max_gap,
                                    uint64_t max_request, int depth, uint64_t *requests,
                                    uint64_t *bytes, hpcio_error *err)
    ctypedef struct hpcio_readahead:
        pass
    hpcio_status hpcio_readahead_start(int fd, uint64_t offset, uint64_t length, int depth,
                                       hpcio_readahead **out, hpcio_error *err)
    hpcio_status hpcio_readahead_extents_start(const int *fds, size_t nfiles, const uint32_t *file,
                                               const uint64_t *off, const uint64_t *len,
                                               const uint64_t *rank, size_t m, uint64_t max_gap,
                                               int depth, hpcio_readahead **out, hpcio_error *err)
    int hpcio_readahead_done(const hpcio_readahead *ra)
    uint64_t hpcio_readahead_finish(hpcio_readahead *ra, int cancel)
    hpcio_status hpcio_batch_extents(const uint8_t *const *tables, const uint64_t *counts,
                                     size_t nshards, const int64_t *shard, const uint64_t *local,
                                     size_t m, uint64_t *starts, uint64_t *ends, hpcio_error *err)
    hpcio_status hpcio_batch_gather(const uint8_t *const *bases, const uint64_t *sizes,
                                    size_t nshards, const int64_t *shard, const uint64_t *starts,
                                    const uint64_t *ends, size_t m, uint8_t *out, uint64_t out_cap,
                                    const uint64_t *out_offsets, hpcio_error *err)
    hpcio_status hpcio_start_writeback(int fd, uint64_t offset, uint64_t nbytes, hpcio_error *err)

    int hpcio_map_probe(const uint8_t *base, uint64_t size, int regions, int *probed)
    int64_t hpcio_map_resident(const uint8_t *base, uint64_t size)

    hpcio_status hpcio_scan_lines(const uint8_t *buf, uint64_t len, uint64_t base,
                                  uint64_t *out, size_t cap, size_t *count,
                                  hpcio_error *err)

    hpcio_status hpcio_zstd_content_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                         hpcio_error *err)
    hpcio_status hpcio_zstd_decode_known(const uint8_t *src, uint64_t src_len,
                                         const uint64_t *starts, const uint64_t *ends,
                                         size_t m, uint8_t *dst, const uint64_t *dst_offsets,
                                         int nthreads, hpcio_error *err)
    hpcio_status hpcio_zstd_decode_stream(const uint8_t *src, uint64_t len, uint64_t limit,
                                          uint8_t **out, uint64_t *out_len,
                                          hpcio_error *err)
    hpcio_status hpcio_zstd_decode_fd(int in_fd, int out_fd, uint64_t limit, uint64_t *out_len,
                                      hpcio_error *err)
    hpcio_status hpcio_zstd_decode_stream_many(const uint8_t *src, uint64_t src_len,
                                               const uint64_t *starts, const uint64_t *ends,
                                               size_t m, uint64_t limit, uint64_t batch_limit,
                                               uint8_t **outs, uint64_t *out_lens,
                                               hpcio_error *err)
    uint64_t hpcio_zstd_bound(uint64_t len)
    hpcio_status hpcio_zstd_compress(const uint8_t *src, uint64_t len, int level,
                                     int content_size, int checksum, uint8_t *dst, uint64_t cap,
                                     uint64_t *written, hpcio_error *err)
    unsigned hpcio_zstd_version()
    const char *hpcio_zstd_version_string()

    hpcio_status hpcio_blosc2_content_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                           hpcio_error *err)
    hpcio_status hpcio_blosc2_decode_known(const uint8_t *src, uint64_t src_len,
                                           const uint64_t *starts, const uint64_t *ends,
                                           size_t m, uint8_t *dst,
                                           const uint64_t *dst_offsets, int nthreads,
                                           hpcio_error *err)
    uint64_t hpcio_blosc2_bound(uint64_t len)
    hpcio_status hpcio_blosc2_compress(const uint8_t *src, uint64_t len, const char *codec,
                                       int clevel, int typesize, int shuffle, uint8_t *dst,
                                       uint64_t cap, uint64_t *written, hpcio_error *err)
    const char *hpcio_blosc2_version()

    # ---- text encodings and the JINX tail (encodings.c) ----
    hpcio_status hpcio_a85_decoded_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                        hpcio_error *err)
    hpcio_status hpcio_a85_decode(const uint8_t *src, uint64_t len, uint8_t *dst,
                                  uint64_t cap, uint64_t *written, hpcio_error *err)
    uint64_t hpcio_a85_encoded_bound(uint64_t len)
    hpcio_status hpcio_a85_encode(const uint8_t *src, uint64_t len, uint8_t *dst,
                                  uint64_t cap, uint64_t *written, hpcio_error *err)
    hpcio_status hpcio_jinx_footer(const uint8_t *buf, uint64_t len, uint64_t *footer_offset,
                                   uint64_t *footer_end, hpcio_error *err)

    void hpcio_free(void *p)
    void hpcio_keep_freed_heap(size_t nbytes)

    const char *hpcio_build_flags()
    const char *hpcio_compiler()
    const char *hpcio_simd()
    int hpcio_build_debug()
    int hpcio_build_sanitize()
    const char *hpcio_kernels()

    # ---- tar member index (tar.c) ----
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
