/* Ascii85 (encodings.c), the JINX inline value encoding: decode the input as text, and
 * encode it then decode the result back to the same bytes. */
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t need = 0, written = 0, cap = hpcio_a85_encoded_bound(size);
    uint8_t *text = malloc(cap ? cap : 1), *back;
    hpcio_error err;
    hpcio_status st;

    hpcio_error_clear(&err);
    st = hpcio_a85_decoded_size(data, size, &need, &err);
    check_status(st, &err);
    if (st == HPCIO_OK) {
        uint8_t *out = malloc(need ? need : 1);

        FUZZ_CHECK(need <= 4 * (uint64_t)size);
        st = hpcio_a85_decode(data, size, out, need, &written, &err);
        check_status(st, &err);
        FUZZ_CHECK(st == HPCIO_OK && written == need);
        if (need > 0) { /* one byte short of the size it gave must not overflow */
            st = hpcio_a85_decode(data, size, out, need - 1, &written, &err);
            FUZZ_CHECK(st != HPCIO_OK);
        }
        free(out);
    } else {
        FUZZ_CHECK(err.offset >= 0 && (uint64_t)err.offset <= size);
    }
    st = hpcio_a85_encode(data, size, text, cap, &written, &err);
    check_status(st, &err);
    FUZZ_CHECK(st == HPCIO_OK && written <= cap);
    back = malloc(size ? size : 1);
    st = hpcio_a85_decoded_size(text, written, &need, &err);
    FUZZ_CHECK(st == HPCIO_OK && need == size);
    st = hpcio_a85_decode(text, written, back, size, &need, &err);
    FUZZ_CHECK(st == HPCIO_OK && need == size && memcmp(back, data, size) == 0);
    free(back);
    free(text);
    return 0;
}
