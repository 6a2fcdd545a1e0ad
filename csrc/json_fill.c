/* The fill half of the JSON column split (the scan is json_scan.c): one key's values,
 * at the spans the scan recorded, written into arrays sized from what it counted. */
#define _GNU_SOURCE
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "json_text.h"

/* The JSON number [p, end) as a double when it has at most 19 significant digits, their
 * value is below 2^53 and its power of ten is within 10^+-22: both are then exact
 * doubles, and one multiplication or division rounds correctly (the fast path of every
 * correctly rounding reader).  0 for other numbers, which strtod reads. */
static int fast_double(const uint8_t *p, const uint8_t *end, double *out)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const int neg = p < end && *p == '-';
    uint64_t m = 0;
    int digits = 0, exp10 = 0;
    double d;

    p += neg;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (m == 0 && *p == '0')
            continue;
        if (++digits > 19)
            return 0;
        m = m * 10 + (uint64_t)(*p - '0');
    }
    if (p < end && *p == '.') {
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            exp10--;
            if (m == 0 && *p == '0')
                continue;
            if (++digits > 19)
                return 0;
            m = m * 10 + (uint64_t)(*p - '0');
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        int eneg, e = 0;

        p++;
        eneg = p < end && *p == '-';
        p += p < end && (*p == '-' || *p == '+');
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (e > 1000)
                return 0;
            e = e * 10 + (*p - '0');
        }
        exp10 += eneg ? -e : e;
    }
    if (p != end || m > (1ULL << 53) || exp10 < -22 || exp10 > 22)
        return 0;
    d = (double)m;
    d = exp10 < 0 ? d / pow10[-exp10] : d * pow10[exp10];
    *out = neg ? -d : d;
    return 1;
}

/* Writes the value at *pp (of the scanned type) as value i, and sets *pp past it.  With
 * whole, the value is all of [*pp, end): a key's value, where the scan found its end. */
static hpcio_status put_scalar(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                               int whole, int type, locale_t c_locale, uint8_t *bytes,
                               uint64_t *used, void *values, uint64_t i)
{
    const uint8_t *p = *pp;

    switch (type) {
    case HPCIO_JSON_STR: {
        uint64_t n;
        int plain;
        hpcio_status st;
        const uint8_t *close = p + 1;

        /* a string without escapes is its bytes between the quotes */
        if (whole)
            close = memchr(p + 1, '\\', (size_t)(end - p - 2)) == NULL ? end - 1 : end;
        else
            while (close < end && *close != '"' && *close != '\\')
                close++;
        if (close < end && *close == '"') {
            memcpy(bytes + *used, p + 1, (size_t)(close - p - 1));
            *used += (uint64_t)(close - p - 1);
            *pp = close + 1;
            return HPCIO_OK;
        }
        st = json_string(s, pp, end, bytes + *used, &n, &plain);
        *used += n;
        return st;
    }
    case HPCIO_JSON_BOOL:
        ((uint8_t *)values)[i] = *p == 't';
        *pp += *p == 't' ? 4 : 5;
        return HPCIO_OK;
    case HPCIO_JSON_INT: {
        const int neg = *p == '-';
        uint64_t v = 0;

        for (p += neg; p < end && *p >= '0' && *p <= '9'; p++)
            v = v * 10 + (uint64_t)(*p - '0');
        ((int64_t *)values)[i] = neg ? (int64_t)(0 - v) : (int64_t)v;
        *pp = p;
        return HPCIO_OK;
    }
    case HPCIO_JSON_FLOAT: {
        char *stop;
        int t;
        const uint8_t *q = p;
        hpcio_status st = whole ? HPCIO_OK : json_number(s, &q, end, &t);

        if (st != HPCIO_OK)
            return st;
        if (whole)
            q = end;
        if (!fast_double(p, q, (double *)values + i)) {
            ((double *)values)[i] = strtod_l((const char *)p, &stop, c_locale);
            if ((const uint8_t *)stop != q)
                return bad_json(s, p, "number not read whole");
        }
        *pp = q;
        return HPCIO_OK;
    }
    default:
        return bad_json(s, p, "unexpected value type");
    }
}

hpcio_status hpcio_json_fill(const uint8_t *data, const uint64_t *spans, size_t n,
                             size_t nkeys, size_t k, int type, uint8_t *bytes, int64_t *offsets, int64_t *item_offsets,
                             void *values, hpcio_error *err)
{
    const int elem = type & ~HPCIO_JSON_LIST;
    locale_t c_locale = (locale_t)0;
    uint64_t used = 0, items = 0;
    hpcio_status st = HPCIO_OK;

    if (elem == HPCIO_JSON_FLOAT) {
        /* Python reads "1.5" whatever the process's locale says of decimal points */
        c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
        if (c_locale == (locale_t)0)
            return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "no C locale for numbers");
    }
    if (offsets != NULL)
        offsets[0] = 0;
    if (item_offsets != NULL)
        item_offsets[0] = 0;
    for (size_t j = 0; j < n && st == HPCIO_OK; j++) {
        scan_ctx s = {data, j, err};
        const uint64_t *span = spans + 2 * (j * nkeys + k);
        const uint8_t *p = data + span[0], *end = data + span[1];

        if (type == HPCIO_JSON_RAW) {
            memcpy(bytes + used, p, (size_t)(end - p));
            used += (uint64_t)(end - p);
            offsets[j + 1] = (int64_t)used;
        } else if (!(type & HPCIO_JSON_LIST)) {
            st = put_scalar(&s, &p, end, 1, type, c_locale, bytes, &used, values, j);
            if (offsets != NULL)
                offsets[j + 1] = (int64_t)used;
        } else {
            p = skip_ws(p + 1, end);
            while (st == HPCIO_OK && p < end && *p != ']') {
                st = put_scalar(&s, &p, end, 0, elem, c_locale, bytes, &used, values, items);
                items++;
                if (item_offsets != NULL)
                    item_offsets[items] = (int64_t)used;
                p = skip_ws(p, end);
                if (p < end && *p == ',')
                    p = skip_ws(p + 1, end);
            }
            offsets[j + 1] = (int64_t)items;
        }
    }
    if (c_locale != (locale_t)0)
        freelocale(c_locale);
    return st;
}
