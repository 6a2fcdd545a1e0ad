/* blosc2 chunks: content size, batch decode on several threads, compression. */
#include <pthread.h>
#include <string.h>

#include <blosc2.h>

#include "internal.h"

static pthread_once_t blosc2_once = PTHREAD_ONCE_INIT;

/* This library instance is separate from the one inside the blosc2 Python package,
 * so it needs its own one-time set-up (codec registry). */
static void blosc2_setup(void)
{
    blosc2_init();
}

hpcio_status hpcio_blosc2_content_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                       hpcio_error *err)
{
    /* blosc2_cbuffer_sizes reads a fixed-size header without a length: give it a
     * zero-padded copy so a short input cannot make it read past the end. */
    uint8_t header[BLOSC_EXTENDED_HEADER_LENGTH] = {0};
    int32_t nbytes = 0, cbytes = 0, blocksize = 0;

    if (len < BLOSC_MIN_HEADER_LENGTH)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1,
                          "%llu bytes are too short for a blosc2 chunk header (%d bytes)",
                          (unsigned long long)len, BLOSC_MIN_HEADER_LENGTH);
    memcpy(header, src, len < sizeof header ? (size_t)len : sizeof header);
    pthread_once(&blosc2_once, blosc2_setup);
    if (blosc2_cbuffer_sizes(header, &nbytes, &cbytes, &blocksize) < 0 || nbytes < 0 ||
        cbytes < BLOSC_MIN_HEADER_LENGTH)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1, "not a blosc2 chunk (bad header)");
    if ((uint64_t)cbytes > len)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1,
                          "blosc2 chunk truncated: header promises %d bytes, %llu present",
                          cbytes, (unsigned long long)len);
    *size = (uint64_t)nbytes;
    return HPCIO_OK;
}

static void *dctx_new(void)
{
    blosc2_dparams dparams = BLOSC2_DPARAMS_DEFAULTS;

    dparams.nthreads = 1; /* parallelism comes from decoding many chunks at once */
    return blosc2_create_dctx(dparams);
}

static void dctx_free(void *ctx)
{
    blosc2_free_ctx(ctx);
}

static hpcio_status decode_known_one(void *shared, void *ctx, size_t j, hpcio_error *err)
{
    const hpcio_known_batch *k = shared;
    const uint64_t a = k->starts[j], b = k->ends[j];
    const uint64_t want = k->dst_offsets[j + 1] - k->dst_offsets[j];
    uint64_t declared;
    hpcio_status st;
    int got;

    st = hpcio_check_frame(a, b, k->src_len, j, "chunk", err);
    if (st != HPCIO_OK)
        return st;
    if (b - a > INT32_MAX || want > INT32_MAX)
        return hpcio_fail(err, HPCIO_E_CODEC, (int64_t)j, (int64_t)a,
                          "blosc2 chunk larger than 2 GiB");
    st = hpcio_blosc2_content_size(k->src + a, b - a, &declared, err);
    if (st == HPCIO_OK && declared != want)
        st = hpcio_fail(err, HPCIO_E_CODEC, -1, -1,
                        "blosc2 chunk declares %llu bytes, %llu expected",
                        (unsigned long long)declared, (unsigned long long)want);
    if (st != HPCIO_OK) {
        err->item = (int64_t)j;
        err->offset = (int64_t)a;
        return st;
    }
    got = blosc2_decompress_ctx(ctx, k->src + a, (int32_t)(b - a), k->dst + k->dst_offsets[j],
                                (int32_t)want);
    if (got < 0)
        return hpcio_fail(err, HPCIO_E_CODEC, (int64_t)j, (int64_t)a,
                          "blosc2 chunk does not decode: %s", blosc2_error_string(got));
    if ((uint64_t)got != want)
        return hpcio_fail(err, HPCIO_E_CODEC, (int64_t)j, (int64_t)a,
                          "blosc2 chunk decodes to %d bytes, its header declares %llu", got,
                          (unsigned long long)want);
    return HPCIO_OK;
}

hpcio_status hpcio_blosc2_decode_known(const uint8_t *src, uint64_t src_len,
                                       const uint64_t *starts, const uint64_t *ends,
                                       size_t m, uint8_t *dst,
                                       const uint64_t *dst_offsets, int nthreads,
                                       hpcio_error *err)
{
    hpcio_known_batch k = {src, src_len, starts, ends, dst, dst_offsets};
    hpcio_status st = hpcio_check_outputs(dst_offsets, m, "chunk", err);

    if (st != HPCIO_OK)
        return st;
    pthread_once(&blosc2_once, blosc2_setup);
    return hpcio_parallel_for(m, nthreads, dctx_new, dctx_free, decode_known_one, &k, err);
}

uint64_t hpcio_blosc2_bound(uint64_t len)
{
    return len + BLOSC2_MAX_OVERHEAD;
}

hpcio_status hpcio_blosc2_compress(const uint8_t *src, uint64_t len, const char *codec,
                                   int clevel, int typesize, int shuffle, uint8_t *dst,
                                   uint64_t cap, uint64_t *written, hpcio_error *err)
{
    blosc2_cparams cparams = BLOSC2_CPARAMS_DEFAULTS;
    blosc2_context *cctx;
    int compcode, r;

    pthread_once(&blosc2_once, blosc2_setup);
    compcode = blosc2_compname_to_compcode(codec);
    if (compcode < 0)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1,
                          "unknown blosc2 codec '%.40s' (blosclz, lz4, lz4hc, zlib, zstd)",
                          codec);
    if (clevel < 0 || clevel > 9)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1, "clevel must be 0..9, got %d", clevel);
    if (typesize < 1 || typesize > 255)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1, "typesize must be 1..255, got %d",
                          typesize);
    if (shuffle < 0 || shuffle > 2)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1,
                          "shuffle must be 0 (none), 1 (byte) or 2 (bit), got %d", shuffle);
    if (len > BLOSC2_MAX_BUFFERSIZE)
        return hpcio_fail(err, HPCIO_E_ARG, -1, -1,
                          "%llu bytes exceed the blosc2 chunk maximum of %d",
                          (unsigned long long)len, (int)BLOSC2_MAX_BUFFERSIZE);
    cparams.compcode = (uint8_t)compcode;
    cparams.clevel = (uint8_t)clevel;
    cparams.typesize = typesize;
    cparams.nthreads = 1;
    cparams.filters[BLOSC2_MAX_FILTERS - 1] = (uint8_t)shuffle;
    cctx = blosc2_create_cctx(cparams);
    if (cctx == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate a blosc2 context");
    r = blosc2_compress_ctx(cctx, src, (int32_t)len, dst,
                            cap > INT32_MAX ? INT32_MAX : (int32_t)cap);
    blosc2_free_ctx(cctx);
    if (r <= 0)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1, "blosc2 compression failed: %s",
                          r == 0 ? "output buffer too small" : blosc2_error_string(r));
    *written = (uint64_t)r;
    return HPCIO_OK;
}

const char *hpcio_blosc2_version(void)
{
    return blosc2_get_version_string();
}
