/* hpcio C kernels: plain C99, no Python headers.
 *
 * Every kernel returns an hpcio_status; on failure it fills the caller's hpcio_error
 * with the item (sample/record) and byte offset where it stopped.  Kernels never abort,
 * never read outside the buffers they are given, and allocate only where documented.
 * They are called with the GIL released.
 */
#ifndef HPCIO_H
#define HPCIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    HPCIO_OK = 0,
    HPCIO_E_RANGE = 1,     /* an index outside the valid range */
    HPCIO_E_CORRUPT = 2,   /* structure contradicts itself (offsets decreasing, bad header) */
    HPCIO_E_TRUNCATED = 3, /* data ends before the bytes a header/offset promises */
    HPCIO_E_IO = 4,        /* a system call failed; sys_errno is set */
    HPCIO_E_NOMEM = 5,     /* allocation failed */
    HPCIO_E_CODEC = 6,     /* a decoder rejected its input */
    HPCIO_E_LIMIT = 7,     /* decompressed size would exceed the caller's limit */
    HPCIO_E_BUFFER = 8,    /* the caller's output buffer is too small */
    HPCIO_E_ARG = 9        /* invalid argument (width not 4/8, ...) */
} hpcio_status;

typedef struct {
    int64_t item;     /* record/sample index where the failure happened, -1 if none */
    int64_t offset;   /* byte offset (in the file/buffer) where it happened, -1 if none */
    int sys_errno;    /* errno for HPCIO_E_IO, else 0 */
    char msg[192];    /* human-readable detail: expected vs got */
} hpcio_error;

void hpcio_error_clear(hpcio_error *err);

/* ---- index bisection (bisect.c) ------------------------------------------------------
 * cum[0..nshards] are cumulative sample counts: cum[0] == 0, non-decreasing,
 * cum[nshards] == total.  For each id in ids[0..n): shard = the last k with
 * cum[k] <= id (empty shards are skipped), local = id - cum[shard].
 * Ids >= total give HPCIO_E_RANGE with err->item = position in ids. */
hpcio_status hpcio_bisect(const uint64_t *cum, size_t nshards, const uint64_t *ids,
                          size_t n, int64_t *shard_out, uint64_t *local_out,
                          hpcio_error *err);

/* ---- keyed bijection (order.c) --------------------------------------------------------
 * A permutation of [0, n) (0 <= n < 2**63) computed, not stored: a balanced Feistel
 * network of HPCIO_BIJECTION_ROUNDS rounds over 2 * half bits (bits = max(2, bit length of
 * n - 1), half = ceil(bits / 2)) whose round function is splitmix64's finaliser of
 * right + keys[r], cut to half bits; an output >= n is passed through the network again
 * (cycle walking) until it falls inside.  hpcio_bijection_forward writes out[j] = f(in[j])
 * and hpcio_bijection_inverse out[j] = f^-1(in[j]) for j < count (in == out allowed);
 * hpcio_bijection_forward_range out[j] = f(first + j).  A value outside [0, n) is
 * HPCIO_E_RANGE with err->item = j (out is then partly written), n >= 2**63 HPCIO_E_ARG.
 * Nothing is allocated. */
#define HPCIO_BIJECTION_ROUNDS 6
hpcio_status hpcio_bijection_forward(const uint64_t keys[HPCIO_BIJECTION_ROUNDS], uint64_t n,
                                     const int64_t *in, int64_t *out, size_t count,
                                     hpcio_error *err);
hpcio_status hpcio_bijection_inverse(const uint64_t keys[HPCIO_BIJECTION_ROUNDS], uint64_t n,
                                     const int64_t *in, int64_t *out, size_t count,
                                     hpcio_error *err);
hpcio_status hpcio_bijection_forward_range(const uint64_t keys[HPCIO_BIJECTION_ROUNDS],
                                           uint64_t n, int64_t first, int64_t *out,
                                           size_t count, hpcio_error *err);

/* ---- offset tables (offsets.c) -------------------------------------------------------
 * table: nrec+1 little-endian unsigned integers of `width` bytes (4 or 8), unaligned OK.
 * Record i spans [off[i], off[i+1]).  Checks that the used entries are non-decreasing
 * and <= limit (the file/buffer size).  With indices == NULL, all nrec records are
 * produced in order (m must equal nrec); otherwise record indices[j] for j < m
 * (indices >= nrec give HPCIO_E_RANGE).  err->item is the record, err->offset the byte
 * offset of the bad table entry relative to the table start. */
hpcio_status hpcio_offset_ranges(const uint8_t *table, int width, size_t nrec,
                                 uint64_t limit, const uint64_t *indices, size_t m,
                                 uint64_t *starts, uint64_t *ends, hpcio_error *err);

/* ---- record gather (offsets.c) -------------------------------------------------------
 * Copy src[starts[j]:ends[j]] for j < m back to back into out (capacity out_cap) and
 * write out_offsets[0..m] (out_offsets[0] = 0).  Ranges must lie within src_len. */
hpcio_status hpcio_gather(const uint8_t *src, uint64_t src_len, const uint64_t *starts,
                          const uint64_t *ends, size_t m, uint8_t *out, uint64_t out_cap,
                          uint64_t *out_offsets, hpcio_error *err);

/* ---- records of a batch across shards (offsets.c) ------------------------------------
 * Sample j of a batch is record local[j] of shard shard[j].  tables[k] is shard k's
 * offset table, counts[k] + 1 little-endian u32 entries already checked to be
 * non-decreasing and within the shard (NULL: the shard is not open), bases[k] its bytes
 * (sizes[k] of them).  hpcio_batch_extents writes each record's extent [starts[j], ends[j]):
 * a shard not open is HPCIO_E_ARG, a record past counts[k] HPCIO_E_RANGE, err->item = j.
 * hpcio_batch_gather copies record j to out + out_offsets[j] (out_cap bytes in all), in
 * batch order; records of shards whose base is NULL are left for the caller to read. */
hpcio_status hpcio_batch_extents(const uint8_t *const *tables, const uint64_t *counts,
                                 size_t nshards, const int64_t *shard, const uint64_t *local,
                                 size_t m, uint64_t *starts, uint64_t *ends, hpcio_error *err);
hpcio_status hpcio_batch_gather(const uint8_t *const *bases, const uint64_t *sizes,
                                size_t nshards, const int64_t *shard, const uint64_t *starts,
                                const uint64_t *ends, size_t m, uint8_t *out, uint64_t out_cap,
                                const uint64_t *out_offsets, hpcio_error *err);

/* ---- MDS record columns (columns.c) ---------------------------------------------------
 * An MDS record holds one little-endian u32 size per variable-size column (in column
 * order), then every column's bytes in column order.  fixed[c] is column c's size, or -1
 * when it is variable (ncols <= HPCIO_MDS_MAX_COLUMNS).  For the m records
 * rec[j][0..len[j]) and the nsel selected columns sel[s]:
 * hpcio_mds_column_offsets writes offsets[s*(m+1) + j], the position of record j's value
 * of column sel[s] in that column's output (offsets[s*(m+1)] = 0, offsets[s*(m+1)+m] the
 * column's total); a record whose sizes do not add up to its length is HPCIO_E_CORRUPT
 * with err->item = j.  hpcio_mds_column_copy then copies the values of column sel[s]
 * back to back into out[s], which holds at least offsets[s*(m+1)+m] bytes. */
#define HPCIO_MDS_MAX_COLUMNS 64
hpcio_status hpcio_mds_column_offsets(const uint8_t *const *rec, const uint64_t *len,
                                      size_t m, const int64_t *fixed, size_t ncols,
                                      const int32_t *sel, size_t nsel, uint64_t *offsets,
                                      hpcio_error *err);
hpcio_status hpcio_mds_column_copy(const uint8_t *const *rec, const uint64_t *len, size_t m,
                                   const int64_t *fixed, size_t ncols, const int32_t *sel,
                                   size_t nsel, const uint64_t *offsets, uint8_t *const *out,
                                   hpcio_error *err);
/* Ask the CPU for the first 4 KiB of the values of columns sel[s] of record r (length n),
 * found from its header.  A prefetch never faults: sizes in the header that do not add up
 * cost nothing here (a record too short for its header is skipped). */
void hpcio_mds_prefetch_values(const uint8_t *r, uint64_t n, const int64_t *fixed,
                               size_t ncols, const int32_t *sel, size_t nsel);

/* Characters of the UTF-8 values data[offsets[j]..offsets[j+1]) for j < m, as Python's
 * len(str) counts them, counted without decoding.  A range outside data is HPCIO_E_ARG,
 * a value that Python's strict decoder refuses HPCIO_E_CODEC (err->item = j, err->offset
 * = the byte in data where the bad sequence starts). */
hpcio_status hpcio_utf8_lengths(const uint8_t *data, uint64_t len, const uint64_t *offsets,
                                size_t m, int64_t *out, hpcio_error *err);

/* len() of column col's value in each of the m records (as hpcio_mds_column_offsets
 * reads them): its bytes, or with utf8 set its characters, checked as hpcio_utf8_lengths
 * does, without copying or decoding.  err->item = j for a malformed record
 * (HPCIO_E_CORRUPT) or a value that is not UTF-8 (HPCIO_E_CODEC; err->offset is then
 * the byte within the record).  With first not NULL, first[j] = where the value starts
 * within record j (zero-copy column views). */
hpcio_status hpcio_mds_column_lengths(const uint8_t *const *rec, const uint64_t *len,
                                      size_t m, const int64_t *fixed, size_t ncols,
                                      int32_t col, int utf8, int64_t *out, int64_t *first,
                                      hpcio_error *err);

/* ---- JSON documents split by key (json.c) ----------------------------------------------
 * hpcio_json_scan parses the n documents data[offsets[j]..offsets[j+1]): each must be a
 * JSON object holding the keys of document 0 (in any order, each once; at most
 * HPCIO_JSON_MAX_KEYS).  It writes *nkeys, key_spans[2k..2k+1] (key k's name in data,
 * quotes included, escapes kept) and keys[k]: the type its values share and what they
 * add up to.  *spans (malloc'd, NULL for no document; the caller frees it) holds
 * [j][k][2], where document j's value of key k lies in data.  A document that is not JSON is HPCIO_E_CODEC, one that
 * is not such an object HPCIO_E_CORRUPT (too many keys: HPCIO_E_LIMIT); err->item is the
 * document and err->offset the byte in data.
 * hpcio_json_fill then writes key k's values, by type:
 *   STR, RAW (values as JSON text): bytes and offsets[0..n] (byte positions);
 *   INT (int64), FLOAT (double), BOOL (uint8): values[0..n);
 *   LIST | e: offsets[0..n] (positions in the elements), the elements as values (or,
 *   for STR elements, bytes and item_offsets[0..items]). */
#define HPCIO_JSON_MAX_KEYS 256
enum {
    HPCIO_JSON_NONE = 0,  /* element type of lists that were all empty */
    HPCIO_JSON_STR = 1,
    HPCIO_JSON_INT = 2,   /* integers that int64 holds */
    HPCIO_JSON_FLOAT = 3, /* numbers with a fraction or exponent, NaN, Infinity */
    HPCIO_JSON_BOOL = 4,
    HPCIO_JSON_RAW = 5,   /* anything else, or values of different types */
    HPCIO_JSON_LIST = 8   /* flag: flat lists of the element type in the low bits */
};
typedef struct {
    int type;           /* HPCIO_JSON_* */
    uint64_t bytes;     /* UTF-8 bytes of the strings (values or list elements) */
    uint64_t items;     /* list elements */
    uint64_t raw_bytes; /* bytes of the values as JSON text */
} hpcio_json_key;
hpcio_status hpcio_json_scan(const uint8_t *data, uint64_t len, const uint64_t *offsets,
                             size_t n, size_t *nkeys, uint64_t *key_spans,
                             hpcio_json_key *keys, uint64_t **spans, hpcio_error *err);
hpcio_status hpcio_json_fill(const uint8_t *data, const uint64_t *spans, size_t n,
                             size_t nkeys, size_t k, int type, uint8_t *bytes,
                             int64_t *offsets, int64_t *item_offsets, void *values,
                             hpcio_error *err);

/* 1 when the JSON text p[0..n) may hold an integer below -2^63 or of 2^64 or more (a run
 * of digits, after a minus sign or not, out of that range), which orjson reads as a float
 * and Python's json as an int; else 0.  Runs inside strings and fractions count too: a
 * caller then decodes with Python's json, which reads those the same way. */
int hpcio_json_wide_int(const uint8_t *p, size_t n);

/* ---- buffered file reads (fileio.c) --------------------------------------------------
 * pread exactly len bytes at offset, retrying on EINTR and short reads.  Reaching EOF
 * early is HPCIO_E_TRUNCATED with err->offset = the file offset where data ended. */
hpcio_status hpcio_pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t offset,
                              hpcio_error *err);

/* Read records [starts[j], ends[j]) for j < m into buf (capacity cap) back to back,
 * merging ranges that touch into single preads.  Stops before the first record that
 * does not fit; *n_done is the number of records read and out_offsets[0..*n_done]
 * their positions in buf.  A single record larger than cap is HPCIO_E_BUFFER with
 * err->item = j (the caller grows the buffer and retries). */
hpcio_status hpcio_pread_records(int fd, const uint64_t *starts, const uint64_t *ends,
                                 size_t m, uint8_t *buf, uint64_t cap,
                                 uint64_t *out_offsets, size_t *n_done,
                                 hpcio_error *err);

/* ---- planned reads (readplan.c) -----------------------------------------------------
 * Read m extents into dst (capacity dst_cap): extent j is len[j] bytes at byte off[j] of
 * fds[file[j]], delivered to dst + out[j].  The extents are planned as storage requests:
 * sorted by file and offset; an extent joins the previous request when it lies in the same
 * file at or after its end with a gap of at most max_gap bytes (read and dropped) and the
 * request stays within max_request bytes (0: no limit); up to `depth` requests are read at
 * once by that many threads, so storage with a latency per request is kept busy.
 * *requests and *bytes (gaps included) say what was read.  On failure: the status of the
 * lowest failing request, err->item the first extent of that request, err->offset the
 * file offset. */
hpcio_status hpcio_read_extents(const int *fds, size_t nfiles, const uint32_t *file,
                                const uint64_t *off, const uint64_t *len, const uint64_t *out,
                                size_t m, uint8_t *dst, uint64_t dst_cap, uint64_t max_gap,
                                uint64_t max_request, int depth, uint64_t *requests,
                                uint64_t *bytes, hpcio_error *err);

/* ---- background read-ahead (readahead.c) ---------------------------------------------
 * Start reading bytes [offset, offset + length) of fd in HPCIO_READAHEAD_CHUNK pieces,
 * `depth` at once, on threads of its own, into scratch memory: the bytes enter the page
 * cache, where the caller's mapping or reads find them.  Pieces already cached are
 * skipped.  Returns at once with *out, which hpcio_readahead_finish releases: it waits for
 * the reads (with cancel, only those in flight; the rest are skipped) and returns the
 * bytes read.  Read errors
 * are ignored (the caller's own reads report them); where no thread can be created,
 * nothing is read ahead. */
#define HPCIO_READAHEAD_CHUNK (1u << 20)
typedef struct hpcio_readahead hpcio_readahead;
hpcio_status hpcio_readahead_start(int fd, uint64_t offset, uint64_t length, int depth,
                                   hpcio_readahead **out, hpcio_error *err);
/* The same for extents j < m, bytes [off[j], off[j] + len[j]) of fds[file[j]]: sorted by
 * rank[j] (all 0 when rank is NULL), file and offset, and read in that order, neighbours
 * of one rank closer than max_gap (at most half a chunk) as one range: ranks put a pass's
 * records in the order it needs them.  Used to read records ahead of the batches that
 * need them; nothing is skipped as cached (the caller passes the extents of files that
 * were not). */
hpcio_status hpcio_readahead_extents_start(const int *fds, size_t nfiles, const uint32_t *file,
                                           const uint64_t *off, const uint64_t *len,
                                           const uint64_t *rank, size_t m, uint64_t max_gap,
                                           int depth, hpcio_readahead **out, hpcio_error *err);
/* 1 once every read of the read-ahead has ended (or where it has no thread: none ran, or
 * this process is a fork of its owner), else 0; it does not wait. */
int hpcio_readahead_done(const hpcio_readahead *ra);
uint64_t hpcio_readahead_finish(hpcio_readahead *ra, int cancel);

/* Ask the kernel to start writing the dirty pages of bytes [offset, offset + nbytes) of
 * fd (nbytes 0: to the end of the file) to storage and return without waiting (Linux
 * sync_file_range, SYNC_FILE_RANGE_WRITE), so a later fsync waits only for what is still
 * in flight.  Where the call does not exist or does not apply to fd, nothing is done and
 * HPCIO_OK returned. */
hpcio_status hpcio_start_writeback(int fd, uint64_t offset, uint64_t nbytes, hpcio_error *err);

/* ---- mapping state (mapping.c) -------------------------------------------------------
 * Probe how a read-only mapping base[0..size) of a file maps its pages, in up to `regions`
 * 2 MiB regions spread over it whose first page and the page 1 MiB further are both in
 * the page cache (regions not cached are skipped: probing them would read the disk).
 * Each probed region is touched at both pages; it counts as cheap when the second touch
 * took no page fault (the first mapped a huge page, or a large folio mapped whole).
 * *probed = regions probed; returns the cheap ones.  Touches only pages not touched
 * before by this thread count correctly: probe a fresh mapping. */
int hpcio_map_probe(const uint8_t *base, uint64_t size, int regions, int *probed);

/* Bytes of base[0..size) (a mapping of a file, page aligned) whose pages are in the page
 * cache (mincore); -1 when the kernel cannot say. */
int64_t hpcio_map_resident(const uint8_t *base, uint64_t size);

/* ---- newline scanning (scan.c) -------------------------------------------------------
 * Record starts of the lines in buf[0..len): out[0] = 0, out[k] = byte after the k-th
 * '\n'; a final line without '\n' still counts, and out[count] = len.  With out == NULL
 * only *count (number of lines) is computed.  Otherwise cap is out's capacity in
 * entries and must be >= count+1.  base is added to every offset written. */
hpcio_status hpcio_scan_lines(const uint8_t *buf, uint64_t len, uint64_t base,
                              uint64_t *out, size_t cap, size_t *count,
                              hpcio_error *err);

/* ---- zstd (zstd.c) -------------------------------------------------------------------
 * Content size of the zstd frame at src: *size = declared size, or UINT64_MAX when the
 * frame does not declare it (JINX frames).  Not a zstd frame: HPCIO_E_CODEC. */
hpcio_status hpcio_zstd_content_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                     hpcio_error *err);

/* Decode frames src[starts[j]:ends[j]] (j < m) whose content sizes are all declared
 * into dst at dst_offsets[j] .. dst_offsets[j+1] (the caller sized them from
 * hpcio_zstd_content_size).  A frame that decodes to another size is HPCIO_E_CODEC.
 * nthreads > 1 splits the frames over that many threads. */
hpcio_status hpcio_zstd_decode_known(const uint8_t *src, uint64_t src_len,
                                     const uint64_t *starts, const uint64_t *ends,
                                     size_t m, uint8_t *dst, const uint64_t *dst_offsets,
                                     int nthreads, hpcio_error *err);

/* Stream-decode one frame (or concatenated frames) of unknown content size into a
 * buffer allocated with malloc (*out, *out_len; free with hpcio_free).  More than
 * limit output bytes is HPCIO_E_LIMIT. */
hpcio_status hpcio_zstd_decode_stream(const uint8_t *src, uint64_t len, uint64_t limit,
                                      uint8_t **out, uint64_t *out_len, hpcio_error *err);

/* Decode the zstd frames read from in_fd (from its position to its end) into out_fd
 * through buffers of a few MiB, whatever the size; *out_len counts the bytes written.
 * More than limit output bytes is HPCIO_E_LIMIT; input ending inside a frame
 * HPCIO_E_TRUNCATED (err->offset: the input's size); read or write failures HPCIO_E_IO. */
hpcio_status hpcio_zstd_decode_fd(int in_fd, int out_fd, uint64_t limit, uint64_t *out_len,
                                  hpcio_error *err);

/* hpcio_zstd_decode_stream for frames src[starts[j]:ends[j]] (j < m), one after the
 * other: outs[j] (malloc'd, free with hpcio_free) holds out_lens[j] bytes.  Each frame's
 * output is bounded by limit, and their sum by batch_limit while they decode: a frame
 * without a declared size is capped at what the frames before it left, so a batch of
 * such frames never holds more than batch_limit (plus one growth step).  On failure
 * every outs[j] is freed and NULL. */
hpcio_status hpcio_zstd_decode_stream_many(const uint8_t *src, uint64_t src_len,
                                           const uint64_t *starts, const uint64_t *ends,
                                           size_t m, uint64_t limit, uint64_t batch_limit,
                                           uint8_t **outs, uint64_t *out_lens,
                                           hpcio_error *err);

/* Compress src into dst (capacity from hpcio_zstd_bound).  content_size = 0 omits the
 * size from the frame header, as streaming compressors do; checksum = 1 appends the
 * frame checksum that decoders verify. */
uint64_t hpcio_zstd_bound(uint64_t len);
hpcio_status hpcio_zstd_compress(const uint8_t *src, uint64_t len, int level,
                                 int content_size, int checksum, uint8_t *dst, uint64_t cap,
                                 uint64_t *written, hpcio_error *err);
unsigned hpcio_zstd_version(void);
const char *hpcio_zstd_version_string(void);

/* ---- blosc2 (blosc.c) ----------------------------------------------------------------
 * Same shape as the zstd functions, for blosc2 chunks (whose header always carries
 * the uncompressed size). */
hpcio_status hpcio_blosc2_content_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                       hpcio_error *err);
hpcio_status hpcio_blosc2_decode_known(const uint8_t *src, uint64_t src_len,
                                       const uint64_t *starts, const uint64_t *ends,
                                       size_t m, uint8_t *dst,
                                       const uint64_t *dst_offsets, int nthreads,
                                       hpcio_error *err);
uint64_t hpcio_blosc2_bound(uint64_t len);
/* codec: "blosclz", "lz4", "lz4hc", "zlib", "zstd"; shuffle: 0 none, 1 byte, 2 bit */
hpcio_status hpcio_blosc2_compress(const uint8_t *src, uint64_t len, const char *codec,
                                   int clevel, int typesize, int shuffle, uint8_t *dst,
                                   uint64_t cap, uint64_t *written, hpcio_error *err);
const char *hpcio_blosc2_version(void);

/* ---- text encodings and the JINX tail (encodings.c) ----------------------------------
 * The strict Ascii85 decoder of JINX inline binary values.  *_decoded_size
 * validates src and gives the exact output size; *_decode writes into dst (capacity
 * cap) and sets *written.  Invalid input is HPCIO_E_CODEC with err->offset = the
 * position of the bad character in src.
 * Ascii85 is Python's base64.a85decode(foldspaces=True) alphabet: '!'..'u' groups,
 * 'z' (4 zero bytes), 'y' (4 spaces), whitespace ignored, no <~ ~> frame. */
hpcio_status hpcio_a85_decoded_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                    hpcio_error *err);
hpcio_status hpcio_a85_decode(const uint8_t *src, uint64_t len, uint8_t *dst, uint64_t cap,
                              uint64_t *written, hpcio_error *err);
/* Python's base64.a85encode(data) (no folding but 'z', no wrapping) into dst of at
 * least hpcio_a85_encoded_bound(len) bytes. */
uint64_t hpcio_a85_encoded_bound(uint64_t len);
hpcio_status hpcio_a85_encode(const uint8_t *src, uint64_t len, uint8_t *dst, uint64_t cap,
                              uint64_t *written, hpcio_error *err);
/* A JINX file ends "<footer json>\n<decimal footer offset>\n".  Finds the footer line
 * buf[*footer_offset : *footer_end] (footer_end is its newline) from the last line,
 * checking that the offset line is decimal and the offset starts a line before it. */
hpcio_status hpcio_jinx_footer(const uint8_t *buf, uint64_t len, uint64_t *footer_offset,
                               uint64_t *footer_end, hpcio_error *err);

/* ---- tar member index (tar.c) ---------------------------------------------------------
 * One 512-byte header block parsed: checksum validated (unsigned or signed sum), size
 * (octal or GNU base-256), type flag ('\0' reported as '0'), name joined with the POSIX
 * ustar prefix.  An all-zero block sets end = 1 (end of archive).  Errors: HPCIO_E_CORRUPT
 * with err->offset = offset. */
typedef struct {
    char name[257];     /* NUL-terminated; GNU 'L' / pax 'x' headers may override it */
    uint32_t name_len;
    uint64_t size;
    char type;
    int end;
} hpcio_tar_header;

hpcio_status hpcio_tar_parse_header(const uint8_t *block, uint64_t offset,
                                    hpcio_tar_header *out, hpcio_error *err);

/* A regular-file member: header_offset is its first header block (a GNU long-name or
 * pax header when it has one); the name is names[name_offset .. +name_len). */
typedef struct {
    uint64_t header_offset;
    uint64_t data_offset;
    uint64_t size;
    uint64_t name_offset;
    uint32_t name_len;
} hpcio_tar_member;

/* Index the regular files of the archive buf[0..len) from header offset `start`, resolving
 * GNU long names and pax "path"/"size" records; other member types are skipped.  Returns
 * HPCIO_OK at the end-of-archive block (*next = its offset).  When members (cap entries) or
 * names (names_cap bytes) are full: HPCIO_E_BUFFER with *next = the header offset to resume
 * from.  A bad checksum is HPCIO_E_CORRUPT, data or headers past len HPCIO_E_TRUNCATED (also
 * a missing end-of-archive block); err->item = members indexed before the failure,
 * err->offset = the header's offset.  *count / *names_len say what was filled. */
hpcio_status hpcio_tar_scan(const uint8_t *buf, uint64_t len, uint64_t start,
                            hpcio_tar_member *members, size_t cap, uint8_t *names,
                            uint64_t names_cap, size_t *count, uint64_t *names_len,
                            uint64_t *next, hpcio_error *err);

void hpcio_free(void *p);

/* glibc gives the top of its heap back to the system whenever more than its trim
 * threshold (128 KiB at first) is free there, and takes it back page fault by page fault
 * at the next allocation.  A reader handing out batches of large values (80 KB images
 * copied into bytes objects) frees each batch at once, so every batch faulted its memory
 * in again.  glibc raises the threshold itself (to twice the block, and allocations up
 * to the block's size then come from the heap) the first time it frees a block it had
 * to map on its own; this allocates and frees one such block of nbytes.  With another C
 * library it allocates and frees a block, nothing more. */
void hpcio_keep_freed_heap(size_t nbytes);

/* Compiler and SIMD flags the kernels were built with, for `hpcio info`. */
const char *hpcio_build_flags(void);
const char *hpcio_compiler(void);  /* e.g. "gcc 12.2.0" */
const char *hpcio_simd(void);      /* SIMD macros seen at compile time, space-separated */
int hpcio_build_debug(void);       /* built with HPCIO_DEBUG=1 */
int hpcio_build_sanitize(void);    /* built with HPCIO_SANITIZE=1 */
const char *hpcio_kernels(void);   /* names of the kernels, space-separated */

#ifdef __cplusplus
}
#endif
#endif /* HPCIO_H */
