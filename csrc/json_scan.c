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
#include <stdlib.h>
#include <string.h>

#include "json_text.h"

#define MAX_DEPTH 1024 /* nesting a JSON decoder accepts (orjson's limit) */

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
        if (json_literal(pp, end, "true", 4) || json_literal(pp, end, "false", 5))
            return HPCIO_OK;
        return bad_json(s, p, "bad literal");
    case 'n':
        v->type = HPCIO_JSON_RAW;
        if (json_literal(pp, end, "null", 4))
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
