/* Global sample id -> (shard, local index) over cumulative shard counts. */
#include "internal.h"

/* Last k in [0, nshards) with cum[k] <= id, given cum[0] <= id < cum[nshards]. */
static size_t find_shard(const uint64_t *cum, size_t nshards, uint64_t id)
{
    size_t lo = 0, n = nshards;

    /* Branch-light bisection: halve the window, moving lo only when the probe is
     * still <= id; the compiler turns the update into a conditional move. */
    while (n > 1) {
        size_t half = n / 2;
        lo = (cum[lo + half] <= id) ? lo + half : lo;
        n -= half;
    }
    return lo;
}

hpcio_status hpcio_bisect(const uint64_t *cum, size_t nshards, const uint64_t *ids,
                          size_t n, int64_t *shard_out, uint64_t *local_out,
                          hpcio_error *err)
{
    const uint64_t total = cum[nshards];
    size_t hint = 0;

    for (size_t j = 0; j < n; j++) {
        const uint64_t id = ids[j];
        size_t k;

        if (HPCIO_UNLIKELY(id >= total))
            return hpcio_fail(err, HPCIO_E_RANGE, (int64_t)j, -1,
                              "sample id %llu out of range: the dataset has %llu samples",
                              (unsigned long long)id, (unsigned long long)total);
        /* Sorted batches (sequential reads) mostly stay in the previous id's shard:
         * cum[hint] <= ids[j-1] <= id, so one comparison confirms it.  Gating on the
         * previous id keeps random batches free of a load chain through the hint, which
         * would cost them more than the sorted ones gain. */
        if (j > 0 && ids[j - 1] <= id && id < cum[hint + 1])
            k = hint;
        else
            k = find_shard(cum, nshards, id);
        assert(k < nshards && cum[k] <= id && id < cum[k + 1]);
        hint = k;
        shard_out[j] = (int64_t)k;
        local_out[j] = id - cum[k];
    }
    return HPCIO_OK;
}
