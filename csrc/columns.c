/* MDS records sliced into columns: each selected column's values back to back.
 *
 * A record is one little-endian u32 size per variable-size column (in column order),
 * then every column's bytes in column order.  The first pass computes where each value
 * goes (and checks every record's sizes add up); the second copies.  Two passes over
 * the small record headers cost less than growing output buffers.
 */
#include <string.h>

#include "internal.h"

/* Records of a shuffled batch lie anywhere in the shard: each costs a wait on memory
 * the hardware prefetcher cannot guess.  The header pass asks for the header a few records
 * ahead.  The copy asks for the next record whole when it is at most 4 KiB.  Of a larger
 * record it asks, two records ahead, for the selected values only (the first 4 KiB of
 * each), found from its header, which the first pass brought into cache: a vlm record's
 * id and chat transcript lie on either side of an image that a zero-copy batch leaves in
 * place. */
enum { HEADER_AHEAD = 8, COPY_AHEAD_BYTES = 4096, LARGE_COPY_AHEAD = 2 };

/* Bounds [lo[c], hi[c]) of every column of record r (length n) relative to its start;
 * HPCIO_E_CORRUPT when the sizes in its header do not add up to n. */
static hpcio_status column_bounds(const uint8_t *r, uint64_t n, const int64_t *fixed,
                                  size_t ncols, size_t nvar, uint64_t *lo, uint64_t *hi,
                                  size_t j, hpcio_error *err)
{
    const uint64_t head = 4 * (uint64_t)nvar;
    uint64_t pos = head;
    size_t var_i = 0;

    if (HPCIO_UNLIKELY(n < head))
        return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, 0,
                          "malformed record: a record of %llu bytes cannot hold the %zu "
                          "column sizes", (unsigned long long)n, nvar);
    for (size_t c = 0; c < ncols; c++) {
        uint64_t size;

        if (fixed[c] < 0)
            size = hpcio_load_le32(r + 4 * var_i++);
        else
            size = (uint64_t)fixed[c];
        /* checked before adding: fixed sizes near 2^62 would wrap the sum back to n */
        if (HPCIO_UNLIKELY(size > n - pos))
            return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, 0,
                              "malformed record: the record is %llu bytes but column %zu "
                              "ends past it", (unsigned long long)n, c);
        lo[c] = pos;
        pos += size;
        hi[c] = pos;
    }
    if (HPCIO_UNLIKELY(pos != n))
        return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, 0,
                          "malformed record: the record is %llu bytes but its columns add "
                          "up to %llu", (unsigned long long)n, (unsigned long long)pos);
    return HPCIO_OK;
}

/* Check the column table and the selection; *nvar = the number of variable columns. */
static hpcio_status check_columns(const int64_t *fixed, size_t ncols, const int32_t *sel,
                                  size_t nsel, size_t *nvar, hpcio_error *err)
{
    if (ncols > HPCIO_MDS_MAX_COLUMNS)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1, "%zu columns, at most %d", ncols,
                          HPCIO_MDS_MAX_COLUMNS);
    for (size_t s = 0; s < nsel; s++)
        if (sel[s] < 0 || (size_t)sel[s] >= ncols)
            return hpcio_fail(err, HPCIO_E_ARG, -1, -1, "column %d of %zu", (int)sel[s],
                              ncols);
    *nvar = 0;
    for (size_t c = 0; c < ncols; c++)
        *nvar += fixed[c] < 0;
    return HPCIO_OK;
}

hpcio_status hpcio_mds_column_offsets(const uint8_t *const *rec, const uint64_t *len,
                                      size_t m, const int64_t *fixed, size_t ncols,
                                      const int32_t *sel, size_t nsel, uint64_t *offsets,
                                      hpcio_error *err)
{
    uint64_t lo[HPCIO_MDS_MAX_COLUMNS], hi[HPCIO_MDS_MAX_COLUMNS];
    size_t nvar;
    hpcio_status st = check_columns(fixed, ncols, sel, nsel, &nvar, err);

    for (size_t s = 0; st == HPCIO_OK && s < nsel; s++)
        offsets[s * (m + 1)] = 0;
    for (size_t j = 0; st == HPCIO_OK && j < m; j++) {
        if (j + HEADER_AHEAD < m)
            __builtin_prefetch(rec[j + HEADER_AHEAD]);
        st = column_bounds(rec[j], len[j], fixed, ncols, nvar, lo, hi, j, err);
        for (size_t s = 0; st == HPCIO_OK && s < nsel; s++) {
            uint64_t *o = offsets + s * (m + 1);

            o[j + 1] = o[j] + (hi[sel[s]] - lo[sel[s]]);
        }
    }
    return st;
}

void hpcio_mds_prefetch_values(const uint8_t *r, uint64_t n, const int64_t *fixed,
                               size_t ncols, const int32_t *sel, size_t nsel)
{
    uint64_t lo[HPCIO_MDS_MAX_COLUMNS], hi[HPCIO_MDS_MAX_COLUMNS], pos = 0;
    size_t var_i = 0;

    for (size_t c = 0; c < ncols; c++)
        pos += 4 * (fixed[c] < 0);
    if (n < pos)
        return; /* too short for its header */
    for (size_t c = 0; c < ncols; c++) {
        lo[c] = pos;
        pos += fixed[c] < 0 ? hpcio_load_le32(r + 4 * var_i++) : (uint64_t)fixed[c];
        hi[c] = pos;
    }
    for (size_t s = 0; s < nsel; s++) {
        uint64_t a = lo[sel[s]] & ~(uint64_t)63, b = hi[sel[s]];

        if (b > n)
            b = n;
        if (b > a + COPY_AHEAD_BYTES)
            b = a + COPY_AHEAD_BYTES;
        for (; a < b; a += 64)
            __builtin_prefetch(r + a);
    }
}

hpcio_status hpcio_mds_column_copy(const uint8_t *const *rec, const uint64_t *len, size_t m,
                                   const int64_t *fixed, size_t ncols, const int32_t *sel,
                                   size_t nsel, const uint64_t *offsets, uint8_t *const *out,
                                   hpcio_error *err)
{
    uint64_t lo[HPCIO_MDS_MAX_COLUMNS], hi[HPCIO_MDS_MAX_COLUMNS];
    size_t nvar;
    hpcio_status st = check_columns(fixed, ncols, sel, nsel, &nvar, err);

    for (size_t j = 0; st == HPCIO_OK && j < m; j++) {
        if (j + 1 < m && len[j + 1] <= COPY_AHEAD_BYTES)
            for (uint64_t b = 0; b < len[j + 1]; b += 64)
                __builtin_prefetch(rec[j + 1] + b);
        if (j + LARGE_COPY_AHEAD < m && len[j + LARGE_COPY_AHEAD] > COPY_AHEAD_BYTES)
            hpcio_mds_prefetch_values(rec[j + LARGE_COPY_AHEAD], len[j + LARGE_COPY_AHEAD], fixed,
                                      ncols, sel, nsel);
        st = column_bounds(rec[j], len[j], fixed, ncols, nvar, lo, hi, j, err);
        for (size_t s = 0; st == HPCIO_OK && s < nsel; s++) {
            const uint64_t *o = offsets + s * (m + 1);
            const uint64_t size = hi[sel[s]] - lo[sel[s]];

            /* offsets come from hpcio_mds_column_offsets over the same records: a record
             * that changed in between (a file rewritten under a live map) must not write
             * past the column's buffer */
            if (HPCIO_UNLIKELY(o[j + 1] - o[j] != size))
                return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)lo[sel[s]],
                                  "record changed while it was read: column %d is %llu "
                                  "bytes, %llu before", (int)sel[s],
                                  (unsigned long long)size,
                                  (unsigned long long)(o[j + 1] - o[j]));
            if (size)
                memcpy(out[s] + o[j], rec[j] + lo[sel[s]], size);
        }
    }
    return st;
}

/* Characters of p[0..n) when it is UTF-8 as Python's strict decoder accepts it (no
 * overlong forms, surrogates or code points past U+10FFFF); otherwise -1 minus the offset
 * of the sequence that is not.  ASCII runs are counted 32 bytes at a time (four
 * independent loads: twice the speed of one 8-byte word on text sort keys), then 8. */
static int64_t utf8_count(const uint8_t *p, uint64_t n)
{
    uint64_t i = 0;
    int64_t count = 0;

    while (i < n) {
        uint64_t word, w1, w2, w3;
        int k;

        if (n - i >= 32) {
            memcpy(&word, p + i, 8);
            memcpy(&w1, p + i + 8, 8);
            memcpy(&w2, p + i + 16, 8);
            memcpy(&w3, p + i + 24, 8);
            if (!((word | w1 | w2 | w3) & 0x8080808080808080ULL)) {
                i += 32;
                count += 32;
                continue;
            }
        }
        if (n - i >= 8) {
            memcpy(&word, p + i, 8);
            if (!(word & 0x8080808080808080ULL)) {
                i += 8;
                count += 8;
                continue;
            }
        }
        if (p[i] < 0x80) {
            i++;
            count++;
            continue;
        }
        k = hpcio_utf8_seq(p + i, n - i);
        if (k == 0)
            return -1 - (int64_t)i;
        i += (uint64_t)k;
        count++;
    }
    return count;
}

static hpcio_status invalid_utf8(hpcio_error *err, size_t j, uint64_t at)
{
    return hpcio_fail(err, HPCIO_E_CODEC, (int64_t)j, (int64_t)at, "value is not valid UTF-8");
}

hpcio_status hpcio_utf8_lengths(const uint8_t *data, uint64_t len, const uint64_t *offsets,
                                size_t m, int64_t *out, hpcio_error *err)
{
    for (size_t j = 0; j < m; j++) {
        const uint64_t a = offsets[j], b = offsets[j + 1];

        if (HPCIO_UNLIKELY(b < a || b > len))
            return hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, (int64_t)a,
                              "value %zu spans bytes %llu..%llu of %llu", j,
                              (unsigned long long)a, (unsigned long long)b,
                              (unsigned long long)len);
        out[j] = utf8_count(data + a, b - a);
        if (HPCIO_UNLIKELY(out[j] < 0))
            return invalid_utf8(err, j, a + (uint64_t)(-1 - out[j]));
    }
    return HPCIO_OK;
}

hpcio_status hpcio_mds_column_lengths(const uint8_t *const *rec, const uint64_t *len,
                                      size_t m, const int64_t *fixed, size_t ncols,
                                      int32_t col, int utf8, int64_t *out, int64_t *first,
                                      hpcio_error *err)
{
    uint64_t lo[HPCIO_MDS_MAX_COLUMNS], hi[HPCIO_MDS_MAX_COLUMNS];
    size_t nvar = 0;
    hpcio_status st = check_columns(fixed, ncols, &col, 1, &nvar, err);

    for (size_t j = 0; st == HPCIO_OK && j < m; j++) {
        st = column_bounds(rec[j], len[j], fixed, ncols, nvar, lo, hi, j, err);
        if (st != HPCIO_OK)
            break;
        if (first)
            first[j] = (int64_t)lo[col];
        if (!utf8) {
            out[j] = (int64_t)(hi[col] - lo[col]);
            continue;
        }
        out[j] = utf8_count(rec[j] + lo[col], hi[col] - lo[col]);
        if (HPCIO_UNLIKELY(out[j] < 0))
            st = invalid_utf8(err, j, lo[col] + (uint64_t)(-1 - out[j]));
    }
    return st;
}
