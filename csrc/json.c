/* A batch of JSON documents (an MDS "json" column) split into one column per key.
 *
 * The documents of a column are usually objects with the same keys, each key holding
 * values of one type.  Then a key's values fit one array (numbers, booleans), one
 * buffer of UTF-8 strings, or such an array of list elements, and nobody needs a Python
 * dict per document.  hpcio_json_scan parses every document once, records where each
 * key's value lies and what it holds; hpcio_json_fill then writes one key's values into
 * arrays sized from what the scan counted.
 *
 * Values are typed as Python's json module reads them: an integer that int64 cannot
 * hold, null, a nested object, a string that is not valid UTF-8 or holds a lone
 * surrogate, or a key whose values differ in type makes that key "raw": its values are
 * copied as JSON text, for a JSON decoder to turn into objects.
 */
#define _GNU_SOURCE
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 1024 /* nesting a JSON decoder accepts (orjson's limit) */

typedef struct {
    const uint8_t *data; /* the whole column: offsets in errors are relative to it */
    size_t doc;
    hpcio_error *err;
} scan_ctx;

static hpcio_status bad_json(scan_ctx *s, const uint8_t *at, const char *what)
{
    return hpcio_fail(s->err, HPCIO_E_CODEC, (int64_t)s->doc, (int64_t)(at - s->data),
                      "not a JSON document: %s", what);
}

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
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

/* The string whose opening quote is at *pp.  Sets *pp past the closing quote, *len to
 * its UTF-8 length once unescaped (written to out unless out is NULL), and *plain to 0
 * when Python would decode it to a str that UTF-8 cannot hold (a lone surrogate) or the
 * bytes are not UTF-8: such a value stays raw JSON. */
static hpcio_status json_string(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
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

/* The number at *pp (JSON grammar, plus NaN, Infinity and -Infinity as Python reads
 * them): *type is HPCIO_JSON_INT for an integer int64 holds, HPCIO_JSON_RAW for a
 * larger one, HPCIO_JSON_FLOAT otherwise. */
static hpcio_status json_number(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
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

static int literal(const uint8_t **pp, const uint8_t *end, const char *word, size_t n)
{
    if ((size_t)(end - *pp) < n || memcmp(*pp, word, n) != 0)
        return 0;
    *pp += n;
    return 1;
}

/* Per-value findings the scan adds up per key. */
typedef struct {
    int type;       /* HPCIO_JSON_* (LIST flag with the element type) */
    uint64_t bytes; /* unescaped string bytes (strings, list elements) */
    uint64_t items; /* list elements */
} value_info;

static hpcio_status json_value(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                               int depth, value_info *v);

/* Element types merge as key types do: NONE (no element yet) gives way to any. */
static int merge_type(int a, int b)
{
    if (a == b || b == HPCIO_JSON_NONE)
        return a;
    if (a == HPCIO_JSON_NONE)
        return b;
    if ((a & HPCIO_JSON_LIST) && (b & HPCIO_JSON_LIST)) {
        const int e = merge_type(a & ~HPCIO_JSON_LIST, b & ~HPCIO_JSON_LIST);

        return e == HPCIO_JSON_RAW ? HPCIO_JSON_RAW : (HPCIO_JSON_LIST | e);
    }
    return HPCIO_JSON_RAW;
}

static hpcio_status json_array(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                               int depth, value_info *v)
{
    const uint8_t *p = skip_ws(*pp + 1, end);
    int elem = HPCIO_JSON_NONE;
    hpcio_status st;

    v->bytes = v->items = 0;
    if (p < end && *p == ']') {
        *pp = p + 1;
        v->type = HPCIO_JSON_LIST | HPCIO_JSON_NONE;
        return HPCIO_OK;
    }
    for (;;) {
        value_info e;

        if ((st = json_value(s, &p, end, depth + 1, &e)) != HPCIO_OK)
            return st;
        elem = merge_type(elem, (e.type & HPCIO_JSON_LIST) ? HPCIO_JSON_RAW : e.type);
        v->bytes += e.bytes;
        v->items++;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == ']')
            break;
        return bad_json(s, p, "expected ',' or ']' in an array");
    }
    *pp = p + 1;
    v->type = elem == HPCIO_JSON_RAW ? HPCIO_JSON_RAW : (HPCIO_JSON_LIST | elem);
    return HPCIO_OK;
}

/* The scan of a document's top-level members (below): st NULL for a nested object,
 * which is only checked. */
typedef struct scan_state scan_state;
static const uint8_t *scan_hint(const scan_state *st, size_t *len);
static hpcio_status scan_member(scan_state *st, scan_ctx *s, const uint8_t *key,
                                const uint8_t *key_end, int hinted, const uint8_t *value,
                                const uint8_t *value_end, const value_info *v);

/* Checks the object at *pp; with st, passes each member's key (quotes included) and
 * value to scan_member.  scan_hint says which key's text the next member most likely
 * starts with: bytes that match it are that whole string, and need no parse. */
static hpcio_status json_object(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                                int depth, scan_state *st)
{
    const uint8_t *p = skip_ws(*pp + 1, end);
    hpcio_status status;

    if (p < end && *p == '}') {
        *pp = p + 1;
        return HPCIO_OK;
    }
    for (;;) {
        const uint8_t *key = p, *key_end, *value, *expect;
        uint64_t klen;
        int plain, hinted = 0;
        size_t elen;
        value_info v;

        if (p >= end || *p != '"')
            return bad_json(s, p, "expected a string key in an object");
        if (st != NULL && (expect = scan_hint(st, &elen)) != NULL && (size_t)(end - p) >= elen
            && memcmp(p, expect, elen) == 0) {
            p += elen;
            hinted = 1;
        } else if ((status = json_string(s, &p, end, NULL, &klen, &plain)) != HPCIO_OK) {
            return status;
        }
        key_end = p;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return bad_json(s, p, "expected ':' after an object key");
        value = p = skip_ws(p + 1, end);
        if ((status = json_value(s, &p, end, depth + 1, &v)) != HPCIO_OK)
            return status;
        if (st != NULL
            && (status = scan_member(st, s, key, key_end, hinted, value, p, &v)) != HPCIO_OK)
            return status;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}')
            break;
        return bad_json(s, p, "expected ',' or '}' in an object");
    }
    *pp = p + 1;
    return HPCIO_OK;
}

static hpcio_status json_value(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                               int depth, value_info *v)
{
    const uint8_t *p = *pp;
    hpcio_status st;

    v->bytes = v->items = 0;
    if (depth > MAX_DEPTH)
        return bad_json(s, p, "nested too deep");
    if (p >= end)
        return bad_json(s, p, "expected a value");
    switch (*p) {
    case '"': {
        int plain;

        if ((st = json_string(s, pp, end, NULL, &v->bytes, &plain)) != HPCIO_OK)
            return st;
        v->type = plain ? HPCIO_JSON_STR : HPCIO_JSON_RAW;
        return HPCIO_OK;
    }
    case '[':
        return json_array(s, pp, end, depth, v);
    case '{':
        v->type = HPCIO_JSON_RAW;
        return json_object(s, pp, end, depth, NULL);
    case 't':
    case 'f':
        v->type = HPCIO_JSON_BOOL;
        if (literal(pp, end, "true", 4) || literal(pp, end, "false", 5))
            return HPCIO_OK;
        return bad_json(s, p, "bad literal");
    case 'n':
        v->type = HPCIO_JSON_RAW;
        if (literal(pp, end, "null", 4))
            return HPCIO_OK;
        return bad_json(s, p, "bad literal");
    default:
        return json_number(s, pp, end, &v->type);
    }
}

/* ---- the scan ------------------------------------------------------------------------ */

struct scan_state {
    const uint8_t *data;
    size_t nkeys, member;  /* keys known; members seen in the current document */
    int first;             /* scanning document 0, which names the keys */
    uint64_t *key_spans;   /* [k][2]: key k's name (quotes included) in document 0 */
    uint64_t *spans;       /* [j][k][2]: where document j's value of key k lies */
    size_t stride;         /* keys per document in spans */
    uint64_t *seen;        /* [k]: 1 + the last document that held key k */
    hpcio_json_key *keys;
};

/* The unescaped name of the key string at [a, b) (quotes included) into out (which
 * holds b - a bytes); its length. */
static uint64_t key_name(const uint8_t *a, const uint8_t *b, uint8_t *out)
{
    scan_ctx quiet = {a, 0, NULL};
    hpcio_error ignored;
    const uint8_t *p = a;
    uint64_t n = 0;
    int plain;

    quiet.err = &ignored;
    json_string(&quiet, &p, b, out, &n, &plain);
    return n;
}

static int same_key(const uint8_t *a, const uint8_t *a_end, const uint8_t *b,
                    const uint8_t *b_end)
{
    const size_t la = (size_t)(a_end - a), lb = (size_t)(b_end - b);
    uint8_t *ua, *ub;
    int same;

    if (la == lb && memcmp(a, b, la) == 0)
        return 1;
    if (memchr(a, '\\', la) == NULL && memchr(b, '\\', lb) == NULL)
        return 0;
    ua = malloc(la + 1);
    ub = malloc(lb + 1);
    if (ua == NULL || ub == NULL) {
        free(ua);
        free(ub);
        return -1;
    }
    {
        const uint64_t na = key_name(a, a_end, ua), nb = key_name(b, b_end, ub);

        same = na == nb && memcmp(ua, ub, (size_t)na) == 0;
    }
    free(ua);
    free(ub);
    return same;
}

/* A key as errors show it: its JSON text, cut at 60 bytes. */
#define KEY_SHOWN(key, key_end) (int)((key_end) - (key) < 60 ? (key_end) - (key) : 60), (const char *)(key)

static hpcio_status twice(scan_ctx *s, const uint8_t *key, const uint8_t *key_end)
{
    return hpcio_fail(s->err, HPCIO_E_CORRUPT, (int64_t)s->doc, (int64_t)(key - s->data),
                      "key %.*s appears twice", KEY_SHOWN(key, key_end));
}

/* Member st->member of document s->doc: key [key, key_end) (hinted: known to be that
 * member's key in document 0), value [value, value_end). */
static hpcio_status scan_member(scan_state *st, scan_ctx *s, const uint8_t *key,
                                const uint8_t *key_end, int hinted, const uint8_t *value,
                                const uint8_t *value_end, const value_info *v)
{
    size_t k = st->member, found = st->nkeys;

    if (st->first) {
        for (size_t i = 0; i < st->nkeys; i++) {
            const int same = same_key(st->data + st->key_spans[2 * i],
                                      st->data + st->key_spans[2 * i + 1], key, key_end);
            if (same < 0)
                return hpcio_fail(s->err, HPCIO_E_NOMEM, (int64_t)s->doc, -1, "no memory");
            if (same)
                return twice(s, key, key_end);
        }
        if (st->nkeys == HPCIO_JSON_MAX_KEYS)
            return hpcio_fail(s->err, HPCIO_E_LIMIT, (int64_t)s->doc,
                              (int64_t)(key - st->data), "more than %d keys",
                              HPCIO_JSON_MAX_KEYS);
        found = st->nkeys++;
        st->key_spans[2 * found] = (uint64_t)(key - st->data);
        st->key_spans[2 * found + 1] = (uint64_t)(key_end - st->data);
        st->keys[found].type = -1;
    } else if (hinted) {
        found = k;
        if (st->seen[found] == s->doc + 1)
            return twice(s, key, key_end);
    } else {
        /* documents usually list their keys in the same order: try that one first */
        for (size_t t = 0; t < st->nkeys && found == st->nkeys; t++) {
            const size_t i = (k + t) % st->nkeys;
            const int same = same_key(st->data + st->key_spans[2 * i],
                                      st->data + st->key_spans[2 * i + 1], key, key_end);
            if (same < 0)
                return hpcio_fail(s->err, HPCIO_E_NOMEM, (int64_t)s->doc, -1, "no memory");
            if (same)
                found = i;
        }
        if (found == st->nkeys)
            return hpcio_fail(s->err, HPCIO_E_CORRUPT, (int64_t)s->doc,
                              (int64_t)(key - st->data),
                              "key %.*s is not in the first document", KEY_SHOWN(key, key_end));
        if (st->seen[found] == s->doc + 1)
            return twice(s, key, key_end);
    }
    st->seen[found] = s->doc + 1;
    st->member++;
    {
        hpcio_json_key *kk = &st->keys[found];
        uint64_t *span = st->spans + 2 * (s->doc * st->stride + found);

        span[0] = (uint64_t)(value - st->data);
        span[1] = (uint64_t)(value_end - st->data);
        kk->type = kk->type < 0 ? v->type : merge_type(kk->type, v->type);
        kk->bytes += v->bytes;
        kk->items += v->items;
        kk->raw_bytes += (uint64_t)(value_end - value);
    }
    return HPCIO_OK;
}

/* Documents list their keys in the first document's order, as a rule. */
static const uint8_t *scan_hint(const scan_state *st, size_t *len)
{
    if (st->first || st->member >= st->nkeys)
        return NULL;
    *len = (size_t)(st->key_spans[2 * st->member + 1] - st->key_spans[2 * st->member]);
    return st->data + st->key_spans[2 * st->member];
}

hpcio_status hpcio_json_scan(const uint8_t *data, uint64_t len, const uint64_t *offsets,
                             size_t n, size_t *nkeys, uint64_t *key_spans,
                             hpcio_json_key *keys, uint64_t **spans, hpcio_error *err)
{
    /* document 0 names the keys: its spans go to first_spans until their number is known */
    uint64_t first_spans[2 * HPCIO_JSON_MAX_KEYS];
    scan_state st = {data, 0, 0, 1, key_spans, first_spans, HPCIO_JSON_MAX_KEYS, NULL, keys};
    hpcio_status status = HPCIO_OK;

    *nkeys = 0;
    *spans = NULL;
    st.seen = calloc(HPCIO_JSON_MAX_KEYS, sizeof(uint64_t));
    if (st.seen == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "no memory to scan %zu documents", n);
    memset(keys, 0, HPCIO_JSON_MAX_KEYS * sizeof(hpcio_json_key));
    for (size_t j = 0; j < n; j++) {
        scan_ctx s = {data, j, err};
        const uint64_t a = offsets[j], b = offsets[j + 1];
        const uint8_t *p, *end = data + b;

        if (b < a || b > len) {
            status = hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, (int64_t)a,
                                "document %zu spans bytes %llu..%llu of %llu", j,
                                (unsigned long long)a, (unsigned long long)b,
                                (unsigned long long)len);
            goto done;
        }
        p = skip_ws(data + a, end);
        if (p >= end || *p != '{') {
            status = hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)(p - data),
                                "not a JSON object");
            goto done;
        }
        st.member = 0;
        st.first = j == 0;
        if ((status = json_object(&s, &p, end, 1, &st)) != HPCIO_OK)
            goto done;
        if (skip_ws(p, end) != end) {
            status = bad_json(&s, p, "data after the document");
            goto done;
        }
        if (st.member != st.nkeys) {
            status = hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)a,
                                "holds %zu of the first document's %zu keys", st.member,
                                st.nkeys);
            goto done;
        }
        if (j == 0) {
            st.stride = st.nkeys;
            st.spans = malloc((n * st.nkeys + 1) * 2 * sizeof(uint64_t));
            if (st.spans == NULL) {
                status = hpcio_fail(err, HPCIO_E_NOMEM, -1, -1,
                                    "no memory for %zu documents of %zu keys", n, st.nkeys);
                goto done;
            }
            memcpy(st.spans, first_spans, 2 * st.nkeys * sizeof(uint64_t));
        }
    }
    *nkeys = st.nkeys;
    if (n > 0) {
        *spans = st.spans;
        st.spans = NULL;
    }
done:
    if (st.spans != first_spans)
        free(st.spans);
    free(st.seen);
    return status;
}

/* ---- the fill ------------------------------------------------------------------------ */

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
