/* Offset tables -> record byte ranges, and gathering many ranges into one buffer. */
#include <string.h>

#include "internal.h"

static inline uint64_t table_entry(const uint8_t *table, int width, size_t i)
{
    return width == 4 ? hpcio_load_le32(table + i * 4) : hpcio_load_le64(table + i * 8);
}

/* Check record i of the table and return its range. */
static hpcio_status record_range(const uint8_t *table, int width, size_t i, uint64_t limit,
                                  uint64_t *start, uint64_t *end, hpcio_error *err)
{
    const uint64_t a = table_entry(table, width, i);
    const uint64_t b = table_entry(table, width, i + 1);

    if (HPCIO_UNLIKELY(a > limit))
        return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)i, (int64_t)(i * (size_t)width),
                          "record starts at byte %llu, past the end of the data (%llu bytes)",
                          (unsigned long long)a, (unsigned long long)limit);
    if (HPCIO_UNLIKELY(b < a))
        return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)i,
                          (int64_t)((i + 1) * (size_t)width),
                          "offset table decreases: record ends at byte %llu before it "
                          "starts at byte %llu",
                          (unsigned long long)b, (unsigned long long)a);
    if (HPCIO_UNLIKELY(b > limit))
        return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)i,
                          (int64_t)((i + 1) * (size_t)width),
                          "record ends at byte %llu, past the end of the data (%llu bytes)",
                          (unsigned long long)b, (unsigned long long)limit);
    *start = a;
    *end = b;
    return HPCIO_OK;
}

hpcio_status hpcio_offset_ranges(const uint8_t *table, int width, size_t nrec,
                                 uint64_t limit, const uint64_t *indices, size_t m,
                                 uint64_t *starts, uint64_t *ends, hpcio_error *err)
{
    if (width != 4 && width != 8)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1,
                          "offset width must be 4 or 8 bytes, got %d", width);
    if (indices == NULL && m != nrec)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1,
                          "%zu outputs requested for all %zu records", m, nrec);
    for (size_t j = 0; j < m; j++) {
        const size_t i = indices == NULL ? j : (size_t)indices[j];
        hpcio_status st;

        if (indices != NULL && HPCIO_UNLIKELY(indices[j] >= nrec))
            return hpcio_fail(err, HPCIO_E_RANGE, (int64_t)indices[j], -1,
                              "record %llu out of range: the table has %zu records",
                              (unsigned long long)indices[j], nrec);
        st = record_range(table, width, i, limit, &starts[j], &ends[j], err);
        if (st != HPCIO_OK)
            return st;
    }
    return HPCIO_OK;
}

hpcio_status hpcio_gather(const uint8_t *src, uint64_t src_len, const uint64_t *starts,
                          const uint64_t *ends, size_t m, uint8_t *out, uint64_t out_cap,
                          uint64_t *out_offsets, hpcio_error *err)
{
    uint64_t pos = 0;

    out_offsets[0] = 0;
    for (size_t j = 0; j < m; j++) {
        const uint64_t a = starts[j], b = ends[j];

        if (HPCIO_UNLIKELY(b < a))
            return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)a,
                              "record range ends at byte %llu before it starts",
                              (unsigned long long)b);
        if (HPCIO_UNLIKELY(b > src_len))
            return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)j, (int64_t)a,
                              "record ends at byte %llu, past the end of the data "
                              "(%llu bytes)",
                              (unsigned long long)b, (unsigned long long)src_len);
        if (HPCIO_UNLIKELY(b - a > out_cap - pos))
            return hpcio_fail(err, HPCIO_E_BUFFER, (int64_t)j, (int64_t)a,
                              "output buffer of %llu bytes too small",
                              (unsigned long long)out_cap);
        if (b > a)
            memcpy(out + pos, src + a, (size_t)(b - a));
        pos += b - a;
        assert(pos <= out_cap);
        out_offsets[j + 1] = pos;
    }
    return HPCIO_OK;
}

hpcio_status hpcio_batch_extents(const uint8_t *const *tables, const uint64_t *counts,
                                 size_t nshards, const int64_t *shard, const uint64_t *local,
                                 size_t m, uint64_t *starts, uint64_t *ends, hpcio_error *err)
{
    for (size_t j = 0; j < m; j++) {
        const int64_t k = shard[j];
        const uint8_t *table;

        if (HPCIO_UNLIKELY(k < 0 || (uint64_t)k >= nshards || tables[k] == NULL))
            return hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, -1, "shard %lld is not open",
                              (long long)k);
        if (HPCIO_UNLIKELY(local[j] >= counts[k]))
            return hpcio_fail(err, HPCIO_E_RANGE, (int64_t)j, -1,
                              "record %llu out of range: shard %lld has %llu records",
                              (unsigned long long)local[j], (long long)k,
                              (unsigned long long)counts[k]);
        table = tables[k] + 4 * (size_t)local[j];
        starts[j] = hpcio_load_le32(table);
        ends[j] = hpcio_load_le32(table + 4);
    }
    return HPCIO_OK;
}

hpcio_status hpcio_batch_gather(const uint8_t *const *bases, const uint64_t *sizes,
                                size_t nshards, const int64_t *shard, const uint64_t *starts,
                                const uint64_t *ends, size_t m, uint8_t *out, uint64_t out_cap,
                                const uint64_t *out_offsets, hpcio_error *err)
{
    for (size_t j = 0; j < m; j++) {
        const int64_t k = shard[j];
        const uint64_t a = starts[j], b = ends[j];

        if (HPCIO_UNLIKELY(k < 0 || (uint64_t)k >= nshards))
            return hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, -1, "shard %lld is not open",
                              (long long)k);
        if (bases[k] == NULL)
            continue; /* read from the file by the caller */
        if (HPCIO_UNLIKELY(b < a))
            return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)a,
                              "record range ends at byte %llu before it starts",
                              (unsigned long long)b);
        if (HPCIO_UNLIKELY(b > sizes[k]))
            return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)j, (int64_t)a,
                              "record ends at byte %llu, past the end of the shard (%llu bytes)",
                              (unsigned long long)b, (unsigned long long)sizes[k]);
        if (HPCIO_UNLIKELY(out_offsets[j] > out_cap || b - a > out_cap - out_offsets[j]))
            return hpcio_fail(err, HPCIO_E_BUFFER, (int64_t)j, (int64_t)a,
                              "output buffer of %llu bytes too small",
                              (unsigned long long)out_cap);
        if (b > a)
            memcpy(out + out_offsets[j], bases[k] + a, (size_t)(b - a));
    }
    return HPCIO_OK;
}
