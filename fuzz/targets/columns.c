/* MDS record columns (columns.c) as batch column reads use them: records cut from the
 * input under a column table from the input, each selected column's offsets computed,
 * its values copied, its lengths (bytes and UTF-8 characters) counted, and the copied
 * values' UTF-8 lengths counted again by hpcio_utf8_lengths. */
#include "fuzz_input.h"

#define MAX_COLS 8
#define MAX_RECS 16

typedef struct {
    size_t ncols, nsel, m;
    int64_t fixed[MAX_COLS];
    int32_t sel[MAX_COLS];
    const uint8_t *rec[MAX_RECS];
    uint64_t len[MAX_RECS];
} batch;

static batch take_batch(fuzz_input *in)
{
    batch b;

    b.ncols = 1 + take_u8(in) % MAX_COLS;
    for (size_t c = 0; c < b.ncols; c++) {
        const uint8_t f = take_u8(in);
        /* variable size, a small fixed size, or a huge one (a sum that wraps) */
        b.fixed[c] = f >= 0x80 ? -1 : f >= 0x70 ? (int64_t)1 << (62 - (f & 0xf)) : f % 16;
    }
    b.nsel = take_u8(in) % (MAX_COLS + 1);
    for (size_t s = 0; s < b.nsel; s++)
        b.sel[s] = (int32_t)(take_u8(in) % (b.ncols + 1)); /* ncols: not a column */
    b.m = take_u8(in) % (MAX_RECS + 1);
    for (size_t j = 0; j < b.m; j++)
        b.len[j] = take_u8(in);
    for (size_t j = 0; j < b.m; j++) { /* records back to back in what is left */
        b.len[j] = b.len[j] < in->n ? b.len[j] : in->n;
        b.rec[j] = in->p;
        in->p += b.len[j];
        in->n -= b.len[j];
    }
    return b;
}

static void copy_columns(const batch *b, const uint64_t *offsets)
{
    uint8_t *out[MAX_COLS];
    hpcio_error err;
    hpcio_status st;

    for (size_t s = 0; s < b->nsel; s++) {
        const uint64_t total = offsets[s * (b->m + 1) + b->m];
        out[s] = malloc(total ? total : 1);
    }
    hpcio_error_clear(&err);
    st = hpcio_mds_column_copy(b->rec, b->len, b->m, b->fixed, b->ncols, b->sel, b->nsel,
                               offsets, out, &err);
    check_status(st, &err);
    FUZZ_CHECK(st == HPCIO_OK); /* the offsets pass accepted the same records */
    for (size_t s = 0; s < b->nsel; s++) {
        const uint64_t *o = offsets + s * (b->m + 1);
        int64_t *chars = malloc(sizeof(int64_t) * (b->m ? b->m : 1));

        st = hpcio_utf8_lengths(out[s], o[b->m], o, b->m, chars, &err);
        check_status(st, &err);
        free(chars);
        free(out[s]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    batch b = take_batch(&in);
    uint64_t *offsets = malloc(sizeof(uint64_t) * (b.nsel ? b.nsel : 1) * (b.m + 1));
    int64_t lengths[MAX_RECS], first[MAX_RECS];
    hpcio_error err;
    hpcio_status st;

    for (size_t j = 0; j < b.m; j++)
        hpcio_mds_prefetch_values(b.rec[j], b.len[j], b.fixed, b.ncols, b.sel, b.nsel);
    hpcio_error_clear(&err);
    st = hpcio_mds_column_offsets(b.rec, b.len, b.m, b.fixed, b.ncols, b.sel, b.nsel, offsets,
                                  &err);
    check_status(st, &err);
    for (size_t s = 0; st == HPCIO_OK && s < b.nsel; s++)
        for (size_t j = 0; j < b.m; j++) /* a value lies within its record */
            FUZZ_CHECK(offsets[s * (b.m + 1) + j + 1] - offsets[s * (b.m + 1) + j] <= b.len[j]);
    if (st == HPCIO_OK)
        copy_columns(&b, offsets);
    for (size_t c = 0; c < b.ncols; c++) {
        for (int utf8 = 0; utf8 < 2; utf8++) {
            hpcio_error_clear(&err);
            st = hpcio_mds_column_lengths(b.rec, b.len, b.m, b.fixed, b.ncols, (int32_t)c, utf8,
                                          lengths, first, &err);
            check_status(st, &err);
            for (size_t j = 0; st == HPCIO_OK && j < b.m; j++)
                FUZZ_CHECK(first[j] >= 0 && (uint64_t)first[j] <= b.len[j] && lengths[j] >= 0
                           && (uint64_t)lengths[j] <= b.len[j] - (uint64_t)first[j]);
        }
    }
    free(offsets);
    return 0;
}
