/* MDS shard header and offset table (offsets.c) as the MDS reader reads a shard: a count,
 * then count + 1 offsets (u32, or u64 as in a JINX index) limited by the file size, every
 * record gathered into one buffer, a selection of records looked up, and the sample ids
 * of a dataset split into shards by bisection (bisect.c) over counts from the input. */
#include "fuzz_input.h"

static void gather_all(const uint8_t *shard, uint64_t size, const uint64_t *starts,
                       const uint64_t *ends, size_t m)
{
    uint64_t total = 0, *pos = malloc(sizeof(uint64_t) * (m + 1));
    uint8_t *out;
    hpcio_error err;
    hpcio_status st;

    for (size_t j = 0; j < m; j++)
        total += ends[j] - starts[j];
    out = malloc(total ? total : 1);
    hpcio_error_clear(&err);
    st = hpcio_gather(shard, size, starts, ends, m, out, total, pos, &err);
    check_status(st, &err);
    FUZZ_CHECK(st == HPCIO_OK && pos[m] == total);
    if (total > 0) { /* one byte short is refused, not overrun */
        st = hpcio_gather(shard, size, starts, ends, m, out, total - 1, pos, &err);
        FUZZ_CHECK(st == HPCIO_E_BUFFER);
    }
    free(out);
    free(pos);
}

static void bisect_ids(fuzz_input *in)
{
    const size_t nshards = 1 + take_u8(in) % 16, n = take_u8(in) % 32;
    uint64_t cum[17] = {0}, ids[32], local[32];
    int64_t shard[32];
    hpcio_error err;
    hpcio_status st;

    for (size_t k = 0; k < nshards; k++)
        cum[k + 1] = cum[k] + take_u8(in) % 8;
    for (size_t j = 0; j < n; j++)
        ids[j] = take_u8(in) % (cum[nshards] + 2);
    hpcio_error_clear(&err);
    st = hpcio_bisect(cum, nshards, ids, n, shard, local, &err);
    check_status(st, &err);
    for (size_t j = 0; st == HPCIO_OK && j < n; j++)
        FUZZ_CHECK(shard[j] >= 0 && (size_t)shard[j] < nshards
                   && cum[shard[j]] + local[j] == ids[j] && ids[j] < cum[shard[j] + 1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    const int width = take_u8(&in) & 1 ? 8 : 4;
    const size_t nsel = take_u8(&in) % 16;
    uint64_t sel[16], *starts, *ends, nrec;
    const uint8_t *shard;
    hpcio_error err;
    hpcio_status st;

    for (size_t j = 0; j < nsel; j++)
        sel[j] = take_u16(&in);
    bisect_ids(&in);
    shard = in.p;
    if (in.n < (size_t)width)
        return 0;
    nrec = width == 4 ? hpcio_load_le32(shard) : hpcio_load_le64(shard);
    /* the reader reads count + 1 entries only when the file holds them */
    if (nrec >= in.n / width || (nrec + 1) * width > in.n - width)
        return 0;
    starts = malloc(sizeof(uint64_t) * (nrec + nsel + 1));
    ends = malloc(sizeof(uint64_t) * (nrec + nsel + 1));
    hpcio_error_clear(&err);
    st = hpcio_offset_ranges(shard + width, width, nrec, in.n, NULL, nrec, starts, ends, &err);
    check_status(st, &err);
    if (st == HPCIO_OK) {
        for (size_t j = 0; j < nrec; j++)
            FUZZ_CHECK(starts[j] <= ends[j] && ends[j] <= in.n);
        gather_all(shard, in.n, starts, ends, nrec);
    }
    for (size_t j = 0; j < nsel; j++)
        sel[j] %= nrec + 2; /* some past the end */
    st = hpcio_offset_ranges(shard + width, width, nrec, in.n, sel, nsel, starts, ends, &err);
    check_status(st, &err);
    for (size_t j = 0; st == HPCIO_OK && j < nsel; j++)
        FUZZ_CHECK(sel[j] < nrec && starts[j] <= ends[j] && ends[j] <= in.n);
    free(starts);
    free(ends);
    return 0;
}
