/* Helpers shared by the libFuzzer targets: the fuzzer's bytes read as a small stream of
 * parameters followed by the data a kernel parses, and a check that aborts (a finding)
 * when a kernel breaks its contract in hpcio.h. */
#ifndef HPCIO_FUZZ_INPUT_H
#define HPCIO_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h" /* hpcio.h and the little-endian loads */

typedef struct {
    const uint8_t *p;
    size_t n;
} fuzz_input;

/* The next byte (0 once the input is used up). */
static inline uint8_t take_u8(fuzz_input *in)
{
    uint8_t v = 0;

    if (in->n) {
        v = in->p[0];
        in->p++;
        in->n--;
    }
    return v;
}

/* The next 2 bytes, little-endian (missing bytes read as 0). */
static inline uint16_t take_u16(fuzz_input *in)
{
    uint16_t lo = take_u8(in);

    return (uint16_t)(lo | (uint16_t)take_u8(in) << 8);
}

/* Aborts with the condition's text when a kernel broke its contract. */
#define FUZZ_CHECK(cond)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: contract broken: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                     \
        }                                                                                \
    } while (0)

/* A failed kernel names a known status and a NUL-terminated message. */
static inline void check_status(hpcio_status st, const hpcio_error *err)
{
    FUZZ_CHECK(st >= HPCIO_OK && st <= HPCIO_E_ARG);
    if (st != HPCIO_OK)
        FUZZ_CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL);
}

#endif /* HPCIO_FUZZ_INPUT_H */
