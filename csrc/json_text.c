/* JSON text: strings, numbers and literals as Python's json module reads them, and the
 * integers too wide for orjson.  The column scan and fill (json_scan.c, json_fill.c)
 * build on these. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "json_text.h"

hpcio_status bad_json(scan_ctx *s, const uint8_t *at, const char *what)
{
    return hpcio_fail(s->err, HPCIO_E_CODEC, (int64_t)s->doc, (int64_t)(at - s->data),
                      "not a JSON document: %s", what);
}

static int hex4(const uint8_t *p, const uint8_t *end, uint32_t *cp)
{
    uint32_t v = 0;

    if (end - p < 4)
        return 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            v |= (uint32_t)((c | 0x20) - 'a' + 10);
        else
            return 0;
    }
    *cp = v;
    return 1;
}

static size_t put_utf8(uint8_t *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

hpcio_status json_string(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                         uint8_t *out, uint64_t *len, int *plain)
{
    const uint8_t *p = *pp + 1;
    uint64_t n = 0;

    *plain = 1;
    for (;;) {
        const uint8_t *run = p;

        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (out != NULL)
            memcpy(out + n, run, (size_t)(p - run));
        n += (uint64_t)(p - run);
        if (p >= end)
            return bad_json(s, *pp, "unterminated string");
        if (*p == '"')
            break;
        if (*p < 0x20)
            return bad_json(s, p, "control character in a string");
        if (*p >= 0x80) {
            int k = hpcio_utf8_seq(p, (uint64_t)(end - p));

            if (k == 0) {
                *plain = 0;
                k = 1;
            }
            if (out != NULL && *plain)
                memcpy(out + n, p, (size_t)k);
            n += (uint64_t)k;
            p += k;
            continue;
        }
        /* an escape */
        if (end - p < 2)
            return bad_json(s, p, "unterminated escape");
        switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': {
            static const uint8_t plainc[] = "\"\\/\b\f\n\r\t";
            static const char esc[] = "\"\\/bfnrt";

            if (out != NULL)
                out[n] = plainc[strchr(esc, p[1]) - esc];
            n++;
            p += 2;
            break;
        }
        case 'u': {
            uint32_t cp, lo;

            if (!hex4(p + 2, end, &cp))
                return bad_json(s, p, "bad \\u escape");
            p += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && end - p >= 6 && p[0] == '\\' && p[1] == 'u'
                && hex4(p + 2, end, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                *plain = 0;
            }
            if (*plain) {
                uint8_t tmp[4];
                size_t k = put_utf8(out != NULL ? out + n : tmp, cp);

                n += k;
            }
            break;
        }
        default:
            return bad_json(s, p, "bad escape");
        }
    }
    *pp = p + 1;
    *len = n;
    return HPCIO_OK;
}

hpcio_status json_number(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                         int *type)
{
    const uint8_t *p = *pp;
    const int neg = p < end && *p == '-';
    uint64_t v = 0;
    int overflow = 0;

    p += neg;
    if (end - p >= 8 && memcmp(p, "Infinity", 8) == 0) {
        *pp = p + 8;
        *type = HPCIO_JSON_FLOAT;
        return HPCIO_OK;
    }
    if (!neg && end - p >= 3 && memcmp(p, "NaN", 3) == 0) {
        *pp = p + 3;
        *type = HPCIO_JSON_FLOAT;
        return HPCIO_OK;
    }
    if (p >= end || *p < '0' || *p > '9')
        return bad_json(s, *pp, "bad number");
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            const uint64_t d = (uint64_t)(*p - '0');

            if (v > (UINT64_MAX - d) / 10)
                overflow = 1;
            else
                v = v * 10 + d;
            p++;
        }
    }
    *type = HPCIO_JSON_INT;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return bad_json(s, p, "bad number");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *type = HPCIO_JSON_FLOAT;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return bad_json(s, p, "bad number");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *type = HPCIO_JSON_FLOAT;
    }
    if (*type == HPCIO_JSON_INT && (overflow || v > (uint64_t)INT64_MAX + (uint64_t)neg))
        *type = HPCIO_JSON_RAW;
    *pp = p;
    return HPCIO_OK;
}

int json_literal(const uint8_t **pp, const uint8_t *end, const char *word, size_t n)
{
    if ((size_t)(end - *pp) < n || memcmp(*pp, word, n) != 0)
        return 0;
    *pp += n;
    return 1;
}

/* ---- integers orjson cannot hold ------------------------------------------------------ */

/* A word of eight ASCII digits: every byte is 0x30..0x39. */
static int all_digits(uint64_t w)
{
    const uint64_t t = w ^ 0x3030303030303030ULL;

    return ((t | (t + 0x0606060606060606ULL)) & 0xF0F0F0F0F0F0F0F0ULL) == 0;
}

/* Whether the n digits at p, after a minus sign when neg, are an integer orjson cannot
 * hold: below -2^63 = -9223372036854775808, or above 2^64 - 1 = 18446744073709551615. */
static int wide_digits(const uint8_t *p, size_t n, int neg)
{
    if (neg)
        return n > 19 || (n == 19 && memcmp(p, "9223372036854775808", 19) > 0);
    return n > 20 || (n == 20 && memcmp(p, "18446744073709551615", 20) > 0);
}

int hpcio_json_wide_int(const uint8_t *p, size_t n)
{
    /* Such a run has 19 digits or more, so it holds a whole aligned word of digits: find
     * such words eight bytes at a time, and only around them look at the run. */
    size_t i = 0;

    while (i + 8 <= n) {
        uint64_t w;
        size_t a, b;

        memcpy(&w, p + i, 8);
        if (!all_digits(w)) {
            i += 8;
            continue;
        }
        for (a = i; a > 0 && p[a - 1] >= '0' && p[a - 1] <= '9'; a--)
            ;
        for (b = i + 8; b < n && p[b] >= '0' && p[b] <= '9'; b++)
            ;
        if (wide_digits(p + a, b - a, a > 0 && p[a - 1] == '-'))
            return 1;
        i = b;
    }
    return 0;
}
