/* The JSON text layer shared by the column scan (json_scan.c) and fill (json_fill.c):
 * strings, numbers and literals, with errors that name the document and byte offset. */
#ifndef HPCIO_JSON_TEXT_H
#define HPCIO_JSON_TEXT_H

#include "internal.h"

typedef struct {
    const uint8_t *data; /* the whole column: offsets in errors are relative to it */
    size_t doc;
    hpcio_error *err;
} scan_ctx;

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* Fails document s->doc at byte `at` with "not a JSON document: what". */
hpcio_status bad_json(scan_ctx *s, const uint8_t *at, const char *what);

/* The string whose opening quote is at *pp.  Sets *pp past the closing quote, *len to
 * its UTF-8 length once unescaped (written to out unless out is NULL), and *plain to 0
 * when Python would decode it to a str that UTF-8 cannot hold (a lone surrogate) or the
 * bytes are not UTF-8: such a value stays raw JSON. */
hpcio_status json_string(scan_ctx *s, const uint8_t **pp, const uint8_t *end,
                         uint8_t *out, uint64_t *len, int *plain);

/* The number at *pp (JSON grammar, plus NaN, Infinity and -Infinity as Python reads
 * them): *type is HPCIO_JSON_INT for an integer int64 holds, HPCIO_JSON_RAW for a
 * larger one, HPCIO_JSON_FLOAT otherwise. */
hpcio_status json_number(scan_ctx *s, const uint8_t **pp, const uint8_t *end, int *type);

/* 1 and *pp past the word when the n bytes at *pp are word, else 0. */
int json_literal(const uint8_t **pp, const uint8_t *end, const char *word, size_t n);

#endif /* HPCIO_JSON_TEXT_H */
