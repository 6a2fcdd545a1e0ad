/* zstd frames: content size, batch decode (known sizes, several threads), streaming
 * decode of frames without a declared size under a size limit, file-to-file decode, and
 * compression. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zstd.h>

#include "internal.h"

hpcio_status hpcio_zstd_content_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                     hpcio_error *err)
{
    unsigned long long cs;

    if (len == 0)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1, "empty input is not a zstd frame");
    cs = ZSTD_getFrameContentSize(src, (size_t)len);
    if (cs == ZSTD_CONTENTSIZE_ERROR && len >= 4 && hpcio_load_le32(src) == ZSTD_MAGICNUMBER)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1,
                          "zstd frame header is truncated or invalid (%llu bytes)",
                          (unsigned long long)len);
    if (cs == ZSTD_CONTENTSIZE_ERROR)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1,
                          "not a zstd frame (header bytes %02x %02x %02x %02x)",
                          src[0], len > 1 ? src[1] : 0, len > 2 ? src[2] : 0,
                          len > 3 ? src[3] : 0);
    *size = cs == ZSTD_CONTENTSIZE_UNKNOWN ? UINT64_MAX : (uint64_t)cs;
    return HPCIO_OK;
}

static void *dctx_new(void)
{
    return ZSTD_createDCtx();
}

static void dctx_free(void *ctx)
{
    ZSTD_freeDCtx(ctx);
}

static hpcio_status decode_known_one(void *shared, void *ctx, size_t j, hpcio_error *err)
{
    const hpcio_known_batch *k = shared;
    const uint64_t a = k->starts[j], b = k->ends[j];
    const uint64_t want = k->dst_offsets[j + 1] - k->dst_offsets[j];
    hpcio_status st = hpcio_check_frame(a, b, k->src_len, j, "frame", err);
    size_t got;

    if (st != HPCIO_OK)
        return st;
    got = ZSTD_decompressDCtx(ctx, k->dst + k->dst_offsets[j], (size_t)want, k->src + a,
                              (size_t)(b - a));
    if (ZSTD_isError(got))
        return hpcio_fail(err, HPCIO_E_CODEC, (int64_t)j, (int64_t)a,
                          "zstd frame does not decode: %s", ZSTD_getErrorName(got));
    if (got != want)
        return hpcio_fail(err, HPCIO_E_CODEC, (int64_t)j, (int64_t)a,
                          "zstd frame decodes to %zu bytes, its header declares %llu", got,
                          (unsigned long long)want);
    return HPCIO_OK;
}

hpcio_status hpcio_zstd_decode_known(const uint8_t *src, uint64_t src_len,
                                     const uint64_t *starts, const uint64_t *ends,
                                     size_t m, uint8_t *dst, const uint64_t *dst_offsets,
                                     int nthreads, hpcio_error *err)
{
    hpcio_known_batch k = {src, src_len, starts, ends, dst, dst_offsets};
    hpcio_status st = hpcio_check_outputs(dst_offsets, m, "frame", err);

    if (st != HPCIO_OK)
        return st;
    return hpcio_parallel_for(m, nthreads, dctx_new, dctx_free, decode_known_one, &k, err);
}

/* The first output size of a streaming decode: a declared size (within the limit) is
 * the exact size of a single frame; otherwise four times the input, at least 4 KiB. */
static uint64_t first_capacity(const uint8_t *src, uint64_t len, uint64_t ceiling)
{
    const unsigned long long cs = ZSTD_getFrameContentSize(src, (size_t)len);
    uint64_t cap;

    if (cs != ZSTD_CONTENTSIZE_ERROR && cs != ZSTD_CONTENTSIZE_UNKNOWN && cs < ceiling)
        cap = cs + 1;
    else
        cap = len < (UINT64_MAX / 4) ? 4 * len : len;
    if (cap < 4096)
        cap = 4096;
    return cap > ceiling ? ceiling : cap;
}

/* Doubles *buf (of *cap bytes) up to ceiling; the caller frees *buf on failure. */
static hpcio_status grow_output(uint8_t **buf, uint64_t *cap, uint64_t ceiling,
                                uint64_t limit, hpcio_error *err)
{
    const uint64_t ncap = *cap > ceiling / 2 ? ceiling : *cap * 2;
    uint8_t *nbuf;

    if (ncap == *cap)
        return hpcio_fail(err, HPCIO_E_LIMIT, -1, -1,
                          "zstd frame decodes to more than the limit of %llu bytes",
                          (unsigned long long)limit);
    nbuf = realloc(*buf, (size_t)ncap);
    if (nbuf == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate %llu bytes",
                          (unsigned long long)ncap);
    *buf = nbuf;
    *cap = ncap;
    return HPCIO_OK;
}

/* Streaming decode with a caller-owned context; the output grows by doubling from a
 * guess and never beyond limit + 1 bytes (one more than allowed proves the excess). */
static hpcio_status decode_stream_ctx(ZSTD_DCtx *dctx, const uint8_t *src, uint64_t len,
                                      uint64_t limit, uint8_t **out, uint64_t *out_len,
                                      hpcio_error *err)
{
    ZSTD_inBuffer in = {src, (size_t)len, 0};
    uint64_t ceiling = limit == UINT64_MAX ? limit : limit + 1;
    uint64_t cap;
    uint8_t *buf;
    size_t ret = 1;

    *out = NULL;
    *out_len = 0;
    if (len == 0)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1, "empty input is not a zstd frame");
    cap = first_capacity(src, len, ceiling);
    buf = malloc(cap ? (size_t)cap : 1);
    if (buf == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate %llu bytes",
                          (unsigned long long)cap);
    ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
    for (;;) {
        ZSTD_outBuffer o = {buf, (size_t)cap, (size_t)*out_len};

        ret = ZSTD_decompressStream(dctx, &o, &in);
        *out_len = o.pos;
        if (ZSTD_isError(ret)) {
            free(buf);
            return hpcio_fail(err, HPCIO_E_CODEC, -1, (int64_t)in.pos,
                              "zstd frame does not decode: %s", ZSTD_getErrorName(ret));
        }
        if (*out_len > limit) {
            free(buf);
            return hpcio_fail(err, HPCIO_E_LIMIT, -1, -1,
                              "zstd frame decodes to more than the limit of %llu bytes",
                              (unsigned long long)limit);
        }
        if (ret == 0 && in.pos == in.size)
            break; /* last frame complete and flushed, input consumed */
        if (o.pos == o.size) {
            /* Output full: the decoder may hold more; grow and continue. */
            hpcio_status st = grow_output(&buf, &cap, ceiling, limit, err);

            if (st != HPCIO_OK) {
                free(buf);
                return st;
            }
            continue;
        }
        if (in.pos == in.size) {
            /* Input exhausted in the middle of a frame, with output room left. */
            free(buf);
            return hpcio_fail(err, HPCIO_E_CODEC, -1, (int64_t)in.pos,
                              "zstd frame truncated: input ends after %llu bytes",
                              (unsigned long long)len);
        }
        /* ret == 0 with input left: the next frame follows; keep going. */
    }
    *out = buf;
    return HPCIO_OK;
}

hpcio_status hpcio_zstd_decode_stream(const uint8_t *src, uint64_t len, uint64_t limit,
                                      uint8_t **out, uint64_t *out_len, hpcio_error *err)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    hpcio_status st;

    if (dctx == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate a zstd context");
    st = decode_stream_ctx(dctx, src, len, limit, out, out_len, err);
    ZSTD_freeDCtx(dctx);
    return st;
}

/* Buffers of the file-to-file decode: a few MiB, so each read(2) and write(2) is large
 * and the memory the decode holds does not depend on the file. */
#define FD_IN_BYTES ((size_t)4 << 20)
#define FD_OUT_BYTES ((size_t)4 << 20)

static hpcio_status write_all(int fd, const uint8_t *buf, size_t len, uint64_t at,
                              hpcio_error *err)
{
    size_t done = 0;

    while (done < len) {
        ssize_t put = write(fd, buf + done, len - done);

        if (put < 0) {
            if (errno == EINTR)
                continue;
            err->sys_errno = errno;
            return hpcio_fail(err, HPCIO_E_IO, -1, -1,
                              "cannot write the decoded bytes at byte %llu of the output: %s",
                              (unsigned long long)(at + done), strerror(errno));
        }
        done += (size_t)put;
    }
    return HPCIO_OK;
}

static hpcio_status decode_fd_ctx(ZSTD_DCtx *dctx, int in_fd, int out_fd, uint64_t limit,
                                  uint8_t *inb, uint8_t *outb, uint64_t *out_len,
                                  hpcio_error *err)
{
    uint64_t consumed = 0; /* input bytes before the current buffer */
    size_t ret = 0;

    for (;;) {
        ssize_t got = read(in_fd, inb, FD_IN_BYTES);
        ZSTD_inBuffer in = {inb, 0, 0};

        if (got < 0) {
            if (errno == EINTR)
                continue;
            err->sys_errno = errno;
            return hpcio_fail(err, HPCIO_E_IO, -1, (int64_t)consumed,
                              "read of the compressed input failed: %s", strerror(errno));
        }
        if (got == 0)
            break;
        in.size = (size_t)got;
        /* Until the buffer is consumed and the decoder has nothing more to flush (a
         * full output buffer may leave some). */
        for (;;) {
            ZSTD_outBuffer o = {outb, FD_OUT_BYTES, 0};
            hpcio_status st;

            ret = ZSTD_decompressStream(dctx, &o, &in);
            if (ZSTD_isError(ret))
                return hpcio_fail(err, HPCIO_E_CODEC, -1, (int64_t)(consumed + in.pos),
                                  "zstd frame does not decode: %s", ZSTD_getErrorName(ret));
            if (o.pos > limit - *out_len)
                return hpcio_fail(err, HPCIO_E_LIMIT, -1, -1,
                                  "zstd input decodes to more than the limit of %llu bytes",
                                  (unsigned long long)limit);
            st = write_all(out_fd, outb, o.pos, *out_len, err);
            if (st != HPCIO_OK)
                return st;
            *out_len += o.pos;
            if (in.pos == in.size && o.pos < o.size)
                break;
        }
        consumed += (uint64_t)got;
    }
    if (consumed == 0)
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1, "empty input is not a zstd frame");
    if (ret != 0)
        return hpcio_fail(err, HPCIO_E_TRUNCATED, -1, (int64_t)consumed,
                          "zstd frame truncated: input ends after %llu bytes",
                          (unsigned long long)consumed);
    return HPCIO_OK;
}

hpcio_status hpcio_zstd_decode_fd(int in_fd, int out_fd, uint64_t limit, uint64_t *out_len,
                                  hpcio_error *err)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    uint8_t *inb = malloc(FD_IN_BYTES), *outb = malloc(FD_OUT_BYTES);
    hpcio_status st;

    *out_len = 0;
    if (dctx == NULL || inb == NULL || outb == NULL)
        st = hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate a zstd context and buffers");
    else
        st = decode_fd_ctx(dctx, in_fd, out_fd, limit, inb, outb, out_len, err);
    free(inb);
    free(outb);
    ZSTD_freeDCtx(dctx);
    return st;
}

hpcio_status hpcio_zstd_decode_stream_many(const uint8_t *src, uint64_t src_len,
                                           const uint64_t *starts, const uint64_t *ends,
                                           size_t m, uint64_t limit, uint64_t batch_limit,
                                           uint8_t **outs, uint64_t *out_lens,
                                           hpcio_error *err)
{
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    hpcio_status st = HPCIO_OK;
    uint64_t left = batch_limit;

    for (size_t j = 0; j < m; j++) {
        outs[j] = NULL;
        out_lens[j] = 0;
    }
    if (dctx == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate a zstd context");
    /* One after the other, each capped by what the batch has left: decoded in parallel,
     * every frame could reach the batch limit before their sum is known. */
    for (size_t j = 0; j < m && st == HPCIO_OK; j++) {
        const uint64_t a = starts[j], b = ends[j];
        const int batch_bound = left < limit;

        st = hpcio_check_frame(a, b, src_len, j, "frame", err);
        if (st == HPCIO_OK)
            st = decode_stream_ctx(dctx, src + a, b - a, batch_bound ? left : limit, &outs[j],
                                   &out_lens[j], err);
        if (st == HPCIO_E_LIMIT && batch_bound)
            snprintf(err->msg, sizeof(err->msg),
                     "%zu zstd frames of one batch decode to more than %llu bytes in all, the "
                     "limit for one batch", j + 1, (unsigned long long)batch_limit);
        if (st != HPCIO_OK) {
            err->item = (int64_t)j;
            err->offset = err->offset < 0 ? (int64_t)a : (int64_t)a + err->offset;
        } else {
            left -= out_lens[j];
        }
    }
    ZSTD_freeDCtx(dctx);
    if (st != HPCIO_OK) {
        for (size_t j = 0; j < m; j++) {
            free(outs[j]);
            outs[j] = NULL;
        }
    }
    return st;
}

uint64_t hpcio_zstd_bound(uint64_t len)
{
    return ZSTD_compressBound((size_t)len);
}

hpcio_status hpcio_zstd_compress(const uint8_t *src, uint64_t len, int level,
                                 int content_size, int checksum, uint8_t *dst, uint64_t cap,
                                 uint64_t *written, hpcio_error *err)
{
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    size_t r;

    if (cctx == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate a zstd context");
    r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
    /* With the flag off the size stays out of the header, as streaming writers do. */
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
    /* A frame checksum (xxh64 of the content) is verified by every decoder. */
    if (!ZSTD_isError(r))
        r = ZSTD_compress2(cctx, dst, (size_t)cap, src, (size_t)len);
    ZSTD_freeCCtx(cctx);
    if (ZSTD_isError(r))
        return hpcio_fail(err, HPCIO_E_CODEC, -1, -1, "zstd compression failed: %s",
                          ZSTD_getErrorName(r));
    *written = r;
    return HPCIO_OK;
}

unsigned hpcio_zstd_version(void)
{
    return ZSTD_versionNumber();
}

const char *hpcio_zstd_version_string(void)
{
    return ZSTD_versionString();
}
