/* Newline scanning: record offsets of the lines of a JSONL buffer. */
#include <string.h>

#include "internal.h"

hpcio_status hpcio_scan_lines(const uint8_t *buf, uint64_t len, uint64_t base,
                              uint64_t *out, size_t cap, size_t *count,
                              hpcio_error *err)
{
    const uint8_t *p = buf, *const end = buf + len;
    size_t k = 0;

    if (out != NULL && cap < 1)
        return hpcio_fail(err, HPCIO_E_BUFFER, -1, -1, "output needs at least 1 entry");
    if (out != NULL)
        out[0] = base;
    /* memchr is vectorised in every libc we target, far ahead of a byte loop. */
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *next = nl == NULL ? end : nl + 1;

        k++;
        if (out != NULL) {
            if (HPCIO_UNLIKELY(k >= cap))
                return hpcio_fail(err, HPCIO_E_BUFFER, (int64_t)k, (int64_t)(p - buf),
                                  "output of %zu entries too small", cap);
            out[k] = base + (uint64_t)(next - buf);
        }
        p = next;
    }
    assert(out == NULL || out[k] == base + len);
    *count = k;
    return HPCIO_OK;
}
