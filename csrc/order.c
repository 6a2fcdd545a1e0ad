/* Keyed bijection of [0, n): the epoch order of every read, evaluated position by position. */
#include "internal.h"

/* splitmix64's finaliser constants. */
#define GOLDEN 0x9E3779B97F4A7C15ULL
#define MIX1 0xBF58476D1CE4E5B9ULL
#define MIX2 0x94D049BB133111EBULL

/* Values are cycle-walked a block at a time: each pass steps every value of the block
 * that is still outside [0, n), gathered together, with no branch on the data. */
#define BLOCK 256
#define LANES 8

typedef struct {
    uint64_t keys[HPCIO_BIJECTION_ROUNDS];
    uint64_t n;
    unsigned half; /* bits of the right part; the network covers 2 * half bits */
    uint64_t mask;
} bijection;

static hpcio_status setup(bijection *b, const uint64_t *keys, uint64_t n, hpcio_error *err)
{
    unsigned bits = 0;

    if (HPCIO_UNLIKELY(n > (uint64_t)INT64_MAX))
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1,
                          "a bijection covers 0 <= n < 2**63 values, got n = %llu",
                          (unsigned long long)n);
    /* bits = max(2, bit length of n - 1), half = ceil(bits / 2): half <= 32, so every
     * shift below is by less than 64 and the joined halves fit in 64 bits. */
    for (uint64_t v = n ? n - 1 : 0; v; v >>= 1)
        bits++;
    if (bits < 2)
        bits = 2;
    b->half = (bits + 1) / 2;
    b->mask = (1ULL << b->half) - 1;
    b->n = n;
    memcpy(b->keys, keys, sizeof b->keys);
    return HPCIO_OK;
}

/* splitmix64's finaliser of h + key (mod 2**64), cut to a half's bits. */
static inline uint64_t mix(uint64_t h, uint64_t key, uint64_t mask)
{
    uint64_t z = (h + key) * GOLDEN;

    z ^= z >> 30;
    z *= MIX1;
    z ^= z >> 27;
    z *= MIX2;
    z ^= z >> 31;
    return z & mask;
}

/* One pass of the network over x[0..m), m a multiple of LANES: the rounds of LANES values
 * are interleaved, so their multiply chains overlap instead of each waiting on the last
 * (one value's six rounds are a chain of 18 dependent multiplies). */
static void step_block(const bijection *b, int inverse, uint64_t *x, size_t m)
{
    const unsigned half = b->half;
    const uint64_t mask = b->mask;

    for (size_t i = 0; i < m; i += LANES) {
        uint64_t l[LANES], r[LANES];

        for (int j = 0; j < LANES; j++) {
            l[j] = x[i + j] >> half;
            r[j] = x[i + j] & mask;
        }
        if (inverse) {
            for (int k = HPCIO_BIJECTION_ROUNDS - 1; k >= 0; k--)
                for (int j = 0; j < LANES; j++) {
                    uint64_t t = r[j] ^ mix(l[j], b->keys[k], mask);
                    r[j] = l[j];
                    l[j] = t;
                }
        } else {
            for (int k = 0; k < HPCIO_BIJECTION_ROUNDS; k++)
                for (int j = 0; j < LANES; j++) {
                    uint64_t t = l[j] ^ mix(r[j], b->keys[k], mask);
                    l[j] = r[j];
                    r[j] = t;
                }
        }
        for (int j = 0; j < LANES; j++)
            x[i + j] = (l[j] << half) | r[j];
    }
}

/* Step each of x[0..m) (all in [0, n); x holds BLOCK entries) through the network until
 * it lands in [0, n) again.  The network permutes [0, 2**(2 * half)), so the cycle through
 * a value in [0, n) returns to [0, n): every walk ends, and the walked map is a bijection. */
static void walk(const bijection *b, int inverse, uint64_t *x, size_t m)
{
    uint64_t y[BLOCK];
    uint32_t pending[BLOCK];
    size_t k = 0, padded = (m + LANES - 1) / LANES * LANES;

    /* The lanes past m are stepped too and ignored: zero, not uninitialised. */
    for (size_t i = m; i < padded; i++)
        x[i] = 0;
    step_block(b, inverse, x, padded);
    for (size_t i = 0; i < m; i++) {
        pending[k] = (uint32_t)i;
        y[k] = x[i];
        k += x[i] >= b->n;
    }
    while (k) {
        size_t kept = 0;

        padded = (k + LANES - 1) / LANES * LANES;
        for (size_t j = k; j < padded; j++)
            y[j] = 0;
        step_block(b, inverse, y, padded);
        for (size_t j = 0; j < k; j++) {
            uint32_t i = pending[j];

            x[i] = y[j];
            pending[kept] = i;
            y[kept] = y[j];
            kept += y[j] >= b->n;
        }
        k = kept;
    }
}

static hpcio_status apply(const uint64_t *keys, uint64_t n, int inverse, const int64_t *in,
                          int64_t *out, size_t count, hpcio_error *err)
{
    bijection b;
    uint64_t x[BLOCK];
    hpcio_status st = setup(&b, keys, n, err);

    if (st != HPCIO_OK)
        return st;
    for (size_t lo = 0; lo < count; lo += BLOCK) {
        size_t m = count - lo < BLOCK ? count - lo : BLOCK;

        for (size_t i = 0; i < m; i++) {
            /* A negative value, cast, is >= 2**63 > n: one comparison rejects both. */
            x[i] = (uint64_t)in[lo + i];
            if (HPCIO_UNLIKELY(x[i] >= n))
                return hpcio_fail(err, HPCIO_E_RANGE, (int64_t)(lo + i), -1,
                                  "%s %lld out of range [0, %llu)",
                                  inverse ? "index" : "position", (long long)in[lo + i],
                                  (unsigned long long)n);
        }
        walk(&b, inverse, x, m);
        for (size_t i = 0; i < m; i++)
            out[lo + i] = (int64_t)x[i];
    }
    return HPCIO_OK;
}

hpcio_status hpcio_bijection_forward(const uint64_t keys[HPCIO_BIJECTION_ROUNDS], uint64_t n,
                                     const int64_t *in, int64_t *out, size_t count,
                                     hpcio_error *err)
{
    return apply(keys, n, 0, in, out, count, err);
}

hpcio_status hpcio_bijection_inverse(const uint64_t keys[HPCIO_BIJECTION_ROUNDS], uint64_t n,
                                     const int64_t *in, int64_t *out, size_t count,
                                     hpcio_error *err)
{
    return apply(keys, n, 1, in, out, count, err);
}

hpcio_status hpcio_bijection_forward_range(const uint64_t keys[HPCIO_BIJECTION_ROUNDS],
                                           uint64_t n, int64_t first, int64_t *out,
                                           size_t count, hpcio_error *err)
{
    bijection b;
    hpcio_status st = setup(&b, keys, n, err);

    if (st != HPCIO_OK || count == 0)
        return st;
    /* Checked before anything is written: the first bad position is first itself or n. */
    if (HPCIO_UNLIKELY(first < 0 || (uint64_t)first >= n || count > n - (uint64_t)first))
        return hpcio_fail(err, HPCIO_E_RANGE, first < 0 || (uint64_t)first >= n
                          ? 0 : (int64_t)(n - (uint64_t)first), -1,
                          "position %lld out of range [0, %llu)",
                          first < 0 || (uint64_t)first >= n ? (long long)first : (long long)n,
                          (unsigned long long)n);
    for (size_t lo = 0; lo < count; lo += BLOCK) {
        size_t m = count - lo < BLOCK ? count - lo : BLOCK;
        uint64_t x[BLOCK];

        for (size_t i = 0; i < m; i++)
            x[i] = (uint64_t)first + lo + i;
        walk(&b, 0, x, m);
        for (size_t i = 0; i < m; i++)
            out[lo + i] = (int64_t)x[i];
    }
    return HPCIO_OK;
}
