/* JSON shredding (json_scan.c, json_fill.c, json_text.c) as the MDS "json" column split
 * calls it: the documents are the lines of the input (scan.c), scanned into keys, then
 * every key filled into arrays sized from the scan's counts. */
#include "fuzz_input.h"

static void fill_key(const uint8_t *data, const uint64_t *spans, size_t n, size_t nkeys,
                     size_t k, const hpcio_json_key *key)
{
    const int type = key->type, elem = type & ~HPCIO_JSON_LIST;
    const uint64_t count = (type & HPCIO_JSON_LIST) ? key->items : n;
    const uint64_t nbytes = type == HPCIO_JSON_RAW ? key->raw_bytes : key->bytes;
    uint8_t *bytes = NULL;
    int64_t *text_offsets = NULL, *offsets = NULL, *item_offsets = NULL;
    void *values = NULL;
    hpcio_error err;
    hpcio_status st;

    if (type == HPCIO_JSON_RAW || elem == HPCIO_JSON_STR) {
        bytes = malloc(nbytes ? nbytes : 1);
        text_offsets = malloc(sizeof(int64_t) * (count + 1));
        if (type & HPCIO_JSON_LIST)
            item_offsets = text_offsets;
        else
            offsets = text_offsets;
    } else if (elem != HPCIO_JSON_NONE) {
        values = malloc(8 * (count ? count : 1));
    }
    if (type & HPCIO_JSON_LIST)
        offsets = malloc(sizeof(int64_t) * (n + 1));
    hpcio_error_clear(&err);
    st = hpcio_json_fill(data, spans, n, nkeys, k, type, bytes, offsets, item_offsets,
                         values, &err);
    check_status(st, &err);
    FUZZ_CHECK(st == HPCIO_OK); /* the scan accepted these values */
    if (text_offsets != NULL) {
        for (uint64_t j = 0; j < count; j++)
            FUZZ_CHECK(text_offsets[j] <= text_offsets[j + 1]);
        FUZZ_CHECK((uint64_t)text_offsets[count] == nbytes);
    }
    if (type & HPCIO_JSON_LIST) {
        for (size_t j = 0; j < n; j++)
            FUZZ_CHECK(offsets[j] <= offsets[j + 1]);
        FUZZ_CHECK((uint64_t)offsets[n] == key->items);
        if (offsets != text_offsets)
            free(offsets);
    }
    free(bytes);
    free(text_offsets);
    free(values);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t lines = 0, nkeys = 0;
    uint64_t *offsets, key_spans[2 * HPCIO_JSON_MAX_KEYS], *spans = NULL;
    hpcio_json_key keys[HPCIO_JSON_MAX_KEYS];
    hpcio_error err;
    hpcio_status st;

    (void)hpcio_json_wide_int(data, size);
    hpcio_error_clear(&err);
    st = hpcio_scan_lines(data, size, 0, NULL, 0, &lines, &err);
    check_status(st, &err);
    if (st != HPCIO_OK || lines == 0)
        return 0;
    offsets = malloc(sizeof(uint64_t) * (lines + 1));
    st = hpcio_scan_lines(data, size, 0, offsets, lines + 1, &lines, &err);
    check_status(st, &err);
    FUZZ_CHECK(st == HPCIO_OK && offsets[0] == 0 && offsets[lines] == size);
    for (size_t j = 0; j < lines; j++)
        FUZZ_CHECK(offsets[j] < offsets[j + 1]);
    st = hpcio_json_scan(data, size, offsets, lines, &nkeys, key_spans, keys, &spans, &err);
    check_status(st, &err);
    if (st == HPCIO_OK) {
        FUZZ_CHECK(nkeys <= HPCIO_JSON_MAX_KEYS);
        for (size_t k = 0; k < nkeys; k++)
            FUZZ_CHECK(key_spans[2 * k] < key_spans[2 * k + 1] && key_spans[2 * k + 1] <= size);
        for (size_t j = 0; j < lines * nkeys; j++)
            FUZZ_CHECK(spans[2 * j] <= spans[2 * j + 1] && spans[2 * j + 1] <= size);
        for (size_t k = 0; k < nkeys; k++)
            fill_key(data, spans, lines, nkeys, k, &keys[k]);
    } else {
        FUZZ_CHECK(err.item >= 0 && (size_t)err.item < lines);
    }
    free(spans);
    free(offsets);
    return 0;
}
