/* A batch of compressed frames cut from the fuzzer's input, decoded as
 * hpcio/_core/_codecs.pyx decodes a batch: ranges checked and declared sizes read and
 * held to a limit first, then one output buffer sized from them. */
#ifndef HPCIO_FUZZ_FRAMES_H
#define HPCIO_FUZZ_FRAMES_H

#include "fuzz_input.h"

#define MAX_FRAMES 4
#define LIMIT (1u << 16) /* decoded bytes allowed per frame */

typedef hpcio_status (*content_size_fn)(const uint8_t *, uint64_t, uint64_t *, hpcio_error *);
typedef hpcio_status (*decode_known_fn)(const uint8_t *, uint64_t, const uint64_t *,
                                        const uint64_t *, size_t, uint8_t *,
                                        const uint64_t *, int, hpcio_error *);

typedef struct {
    size_t m;
    int nthreads;
    uint64_t starts[MAX_FRAMES], ends[MAX_FRAMES];
    const uint8_t *src;
    uint64_t len;
} frame_batch;

/* Parameters: a byte for the frame count and threads, then a u16 per frame cut; the rest
 * is the data the frames lie in (ranges may overlap or lie outside it, as a corrupt
 * index would make them). */
static inline frame_batch take_frames(fuzz_input *in)
{
    frame_batch b;
    const uint8_t head = take_u8(in);

    b.m = 1 + head % MAX_FRAMES;
    b.nthreads = 1 + (head >> 4) % 2;
    uint16_t cuts[2 * MAX_FRAMES];
    for (size_t j = 0; j < 2 * b.m; j++)
        cuts[j] = take_u16(in);
    b.src = in->p;
    b.len = in->n;
    if (head & 0x80) { /* frames back to back at the cuts, as a shard stores them */
        uint64_t at = 0;
        for (size_t j = 0; j < b.m; j++) {
            b.starts[j] = at;
            at = j + 1 == b.m ? b.len : at + cuts[j] % (b.len - at + 1);
            b.ends[j] = at;
        }
    } else {
        for (size_t j = 0; j < b.m; j++) {
            b.starts[j] = cuts[2 * j];
            b.ends[j] = cuts[2 * j + 1];
        }
    }
    return b;
}

/* Declared sizes of every frame (UINT64_MAX: not declared); HPCIO_E_LIMIT past LIMIT. */
static inline hpcio_status frame_sizes(const frame_batch *b, content_size_fn content_size,
                                       uint64_t *sizes, int *all_known, hpcio_error *err)
{
    *all_known = 1;
    for (size_t j = 0; j < b->m; j++) {
        hpcio_status st;

        if (b->ends[j] < b->starts[j] || b->ends[j] > b->len)
            return HPCIO_E_CORRUPT;
        hpcio_error_clear(err);
        st = content_size(b->src + b->starts[j], b->ends[j] - b->starts[j], &sizes[j], err);
        check_status(st, err);
        if (st != HPCIO_OK)
            return st;
        if (sizes[j] == UINT64_MAX)
            *all_known = 0;
        else if (sizes[j] > LIMIT)
            return HPCIO_E_LIMIT;
    }
    return HPCIO_OK;
}

/* decode_known into one buffer sized from the declared sizes. */
static inline void decode_known_batch(const frame_batch *b, decode_known_fn decode_known,
                                      const uint64_t *sizes)
{
    uint64_t positions[MAX_FRAMES + 1] = {0};
    uint8_t *dst;
    hpcio_error err;
    hpcio_status st;

    for (size_t j = 0; j < b->m; j++)
        positions[j + 1] = positions[j] + sizes[j];
    dst = malloc(positions[b->m] ? positions[b->m] : 1);
    hpcio_error_clear(&err);
    st = decode_known(b->src, b->len, b->starts, b->ends, b->m, dst, positions, b->nthreads,
                      &err);
    check_status(st, &err);
    if (st != HPCIO_OK)
        FUZZ_CHECK(err.item >= 0 && (size_t)err.item < b->m);
    free(dst);
}

#endif /* HPCIO_FUZZ_FRAMES_H */
