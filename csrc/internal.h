/* Helpers shared by the hpcio kernels; not part of the public contract (hpcio.h). */
#ifndef HPCIO_INTERNAL_H
#define HPCIO_INTERNAL_H

#include <assert.h>
#include <string.h>

#include "hpcio.h"

#if defined(__GNUC__)
#define HPCIO_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define HPCIO_LIKELY(x) __builtin_expect(!!(x), 1)
#define HPCIO_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define HPCIO_PRINTF(fmt, args)
#define HPCIO_LIKELY(x) (x)
#define HPCIO_UNLIKELY(x) (x)
#endif

/* Fill err (item, offset, formatted message) and return status, so kernels can
 * `return hpcio_fail(err, HPCIO_E_..., item, offset, "...", ...)`. */
hpcio_status hpcio_fail(hpcio_error *err, hpcio_status status, int64_t item,
                        int64_t offset, const char *fmt, ...) HPCIO_PRINTF(5, 6);

/* Little-endian unaligned loads: offset tables come straight from files. */
static inline uint32_t hpcio_load_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline uint64_t hpcio_load_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* Length of the multi-byte UTF-8 sequence at p (avail bytes readable, p[0] >= 0x80) when
 * Python's strict decoder accepts it (no overlong forms, surrogates or code points past
 * U+10FFFF), else 0. */
static inline int hpcio_utf8_seq(const uint8_t *p, uint64_t avail)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    uint64_t need;

    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0;
    }
    if (avail - 1 < need || p[1] < lo || p[1] > hi)
        return 0;
    for (uint64_t k = 2; k <= need; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    return (int)need + 1;
}

/* ---- batches of compressed frames (zstd.c, blosc.c) ------------------------------------
 * Frame j is src[starts[j], ends[j]) and decodes to dst[dst_offsets[j], dst_offsets[j + 1]). */
typedef struct {
    const uint8_t *src;
    uint64_t src_len;
    const uint64_t *starts, *ends;
    uint8_t *dst;
    const uint64_t *dst_offsets;
} hpcio_known_batch;

/* Checks that frame j, [a, b), lies within the src_len bytes; unit names it in errors
 * ("frame", "chunk"). */
static inline hpcio_status hpcio_check_frame(uint64_t a, uint64_t b, uint64_t src_len,
                                             size_t j, const char *unit, hpcio_error *err)
{
    if (HPCIO_UNLIKELY(b < a))
        return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)a,
                          "%s ends at byte %llu before it starts", unit,
                          (unsigned long long)b);
    if (HPCIO_UNLIKELY(b > src_len))
        return hpcio_fail(err, HPCIO_E_TRUNCATED, (int64_t)j, (int64_t)a,
                          "%s ends at byte %llu, past the end of the data (%llu bytes)", unit,
                          (unsigned long long)b, (unsigned long long)src_len);
    return HPCIO_OK;
}

/* Checks that the m + 1 output positions of a batch do not decrease. */
static inline hpcio_status hpcio_check_outputs(const uint64_t *dst_offsets, size_t m,
                                               const char *unit, hpcio_error *err)
{
    for (size_t j = 0; j < m; j++)
        if (dst_offsets[j + 1] < dst_offsets[j])
            return hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, -1,
                              "output positions decrease at %s %zu", unit, j);
    return HPCIO_OK;
}

/* ---- parallel loop over items (threads.c) ---------------------------------------------
 * Runs task(shared, thread_ctx, j, err) for every j < m on up to nthreads threads (the
 * calling thread is one of them).  Each thread gets its own context from ctx_new (freed
 * with ctx_free), e.g. a decoder context.  Items are claimed in increasing order, and
 * when tasks fail the reported error is the one of the lowest failing item, so the
 * result does not depend on scheduling. */
typedef hpcio_status (*hpcio_task_fn)(void *shared, void *thread_ctx, size_t j,
                                      hpcio_error *err);

hpcio_status hpcio_parallel_for(size_t m, int nthreads, void *(*ctx_new)(void),
                                void (*ctx_free)(void *), hpcio_task_fn task,
                                void *shared, hpcio_error *err);

#endif /* HPCIO_INTERNAL_H */
