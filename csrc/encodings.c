/* Ascii85, the text encoding of JINX binary values, and the JINX tail locator.
 *
 * JINX stores every binary value inline as text, so the decoder runs once per accessed
 * value: it validates strictly (a corrupt file must fail, not decode to garbage) and
 * writes into an exactly-sized caller buffer after a sizing pass.  Base64 and hex are
 * decoded by Python's binascii, which is faster than a scalar loop here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hpcio.h"

static hpcio_status enc_fail(hpcio_error *err, hpcio_status status, int64_t offset,
                             const char *fmt, ...)
{
    va_list ap;

    err->item = -1;
    err->offset = offset;
    err->sys_errno = 0;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return status;
}

/* The whitespace Python's base64.a85decode skips. */
static int a85_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v';
}

/* One pass serves both sizing (dst == NULL) and decoding, so the two can never
 * disagree about what is valid. */
static hpcio_status a85_run(const uint8_t *src, uint64_t len, uint8_t *dst, uint64_t cap,
                            uint64_t *size, hpcio_error *err)
{
    uint64_t out = 0, group_start = 0;
    uint32_t acc = 0;
    int k = 0;

    for (uint64_t i = 0; i < len; i++) {
        uint8_t c = src[i];
        if (c >= '!' && c <= 'u') {
            uint64_t next;
            if (k == 0)
                group_start = i;
            next = (uint64_t)acc * 85u + (uint64_t)(c - '!');
            if (k == 4 && next > 0xFFFFFFFFu)
                return enc_fail(err, HPCIO_E_CODEC, (int64_t)group_start,
                                "invalid base85: group '%.5s' exceeds 32 bits",
                                (const char *)src + group_start);
            acc = (uint32_t)next;
            if (++k == 5) {
                if (dst) {
                    if (out + 4 > cap)
                        return enc_fail(err, HPCIO_E_BUFFER, (int64_t)i, "output buffer too small");
                    dst[out] = (uint8_t)(acc >> 24);
                    dst[out + 1] = (uint8_t)(acc >> 16);
                    dst[out + 2] = (uint8_t)(acc >> 8);
                    dst[out + 3] = (uint8_t)acc;
                }
                out += 4;
                acc = 0;
                k = 0;
            }
        } else if (c == 'z' || c == 'y') {
            /* z: four zero bytes; y: four spaces (foldspaces=True, as mldataforge reads) */
            if (k != 0)
                return enc_fail(err, HPCIO_E_CODEC, (int64_t)i,
                                "invalid base85: '%c' inside a 5-character group", c);
            if (dst) {
                if (out + 4 > cap)
                    return enc_fail(err, HPCIO_E_BUFFER, (int64_t)i, "output buffer too small");
                memset(dst + out, c == 'z' ? 0 : ' ', 4);
            }
            out += 4;
        } else if (!a85_space(c)) {
            if (c >= 0x20 && c < 0x7f)
                return enc_fail(err, HPCIO_E_CODEC, (int64_t)i,
                                "invalid base85 character '%c'", c);
            return enc_fail(err, HPCIO_E_CODEC, (int64_t)i,
                            "invalid base85 character 0x%02x", c);
        }
    }
    if (k == 1)
        return enc_fail(err, HPCIO_E_CODEC, (int64_t)group_start,
                        "invalid base85: a final group of one character");
    if (k > 1) {
        /* A final group of k characters carries k-1 bytes: pad with 'u' (84). */
        uint64_t v = acc;
        for (int j = k; j < 5; j++)
            v = v * 85u + 84u;
        if (v > 0xFFFFFFFFu)
            return enc_fail(err, HPCIO_E_CODEC, (int64_t)group_start,
                            "invalid base85: final group exceeds 32 bits");
        if (dst) {
            if (out + (uint64_t)(k - 1) > cap)
                return enc_fail(err, HPCIO_E_BUFFER, (int64_t)len, "output buffer too small");
            for (int j = 0; j < k - 1; j++)
                dst[out + j] = (uint8_t)(v >> (24 - 8 * j));
        }
        out += (uint64_t)(k - 1);
    }
    *size = out;
    return HPCIO_OK;
}

hpcio_status hpcio_a85_decoded_size(const uint8_t *src, uint64_t len, uint64_t *size,
                                    hpcio_error *err)
{
    return a85_run(src, len, NULL, 0, size, err);
}

hpcio_status hpcio_a85_decode(const uint8_t *src, uint64_t len, uint8_t *dst, uint64_t cap,
                              uint64_t *written, hpcio_error *err)
{
    return a85_run(src, len, dst, cap, written, err);
}

hpcio_status hpcio_jinx_footer(const uint8_t *buf, uint64_t len, uint64_t *footer_offset,
                               uint64_t *footer_end, hpcio_error *err)
{
    uint64_t end, start, value = 0;

    if (len == 0)
        return enc_fail(err, HPCIO_E_TRUNCATED, 0, "empty file: no JINX offset line");
    if (buf[len - 1] != '\n')
        return enc_fail(err, HPCIO_E_CORRUPT, (int64_t)(len - 1),
                        "missing JINX offset line: the file does not end with a newline");
    end = len - 1;
    start = end;
    while (start > 0 && buf[start - 1] != '\n')
        start--;
    if (start == 0)
        return enc_fail(err, HPCIO_E_CORRUPT, 0,
                        "missing JINX offset line: the file has a single line");
    if (start == end)
        return enc_fail(err, HPCIO_E_CORRUPT, (int64_t)start,
                        "garbled JINX offset line: it is empty");
    for (uint64_t i = start; i < end; i++) {
        uint8_t c = buf[i];
        if (c < '0' || c > '9' || end - start > 19)
            return enc_fail(err, HPCIO_E_CORRUPT, (int64_t)start,
                            "garbled JINX offset line '%.*s': expected a decimal byte offset",
                            (int)(end - start > 40 ? 40 : end - start), (const char *)buf + start);
        value = value * 10u + (uint64_t)(c - '0');
    }
    /* the footer line is buf[value : start-1], so it must begin before that newline */
    if (value >= start - 1)
        return enc_fail(err, HPCIO_E_CORRUPT, (int64_t)start,
                        "footer offset %llu is not before the offset line at byte %llu",
                        (unsigned long long)value, (unsigned long long)start);
    if (value > 0 && buf[value - 1] != '\n')
        return enc_fail(err, HPCIO_E_CORRUPT, (int64_t)value,
                        "footer offset %llu does not start a line",
                        (unsigned long long)value);
    *footer_offset = value;
    *footer_end = start - 1;
    return HPCIO_OK;
}

uint64_t hpcio_a85_encoded_bound(uint64_t len)
{
    return (len + 3) / 4 * 5;
}

hpcio_status hpcio_a85_encode(const uint8_t *src, uint64_t len, uint8_t *dst, uint64_t cap,
                              uint64_t *written, hpcio_error *err)
{
    uint64_t out = 0;

    if (cap < hpcio_a85_encoded_bound(len))
        return enc_fail(err, HPCIO_E_BUFFER, 0, "output buffer too small");
    for (uint64_t i = 0; i < len; i += 4) {
        uint64_t rest = len - i;
        int k = rest >= 4 ? 4 : (int)rest;
        uint32_t word = 0;
        for (int j = 0; j < 4; j++)
            word = (word << 8) | (j < k ? src[i + j] : 0u);
        if (k == 4 && word == 0) {
            dst[out++] = 'z'; /* only whole zero groups fold, as base64.a85encode does */
            continue;
        }
        uint8_t group[5];
        for (int j = 4; j >= 0; j--) {
            group[j] = (uint8_t)('!' + word % 85u);
            word /= 85u;
        }
        memcpy(dst + out, group, (size_t)k + 1);
        out += (uint64_t)k + 1;
    }
    *written = out;
    return HPCIO_OK;
}
