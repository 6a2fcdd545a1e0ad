/* The JINX tail (encodings.c): "<footer json>\n<decimal footer offset>\n" located in a
 * whole file, as hpcio.formats.jinx.shard does before parsing the footer. */
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t footer_offset = 0, footer_end = 0;
    hpcio_error err;
    hpcio_status st;

    hpcio_error_clear(&err);
    st = hpcio_jinx_footer(data, size, &footer_offset, &footer_end, &err);
    check_status(st, &err);
    if (st == HPCIO_OK) {
        FUZZ_CHECK(footer_offset <= footer_end && footer_end < size);
        FUZZ_CHECK(data[footer_end] == '\n');
        FUZZ_CHECK(footer_offset == 0 || data[footer_offset - 1] == '\n');
    }
    return 0;
}
