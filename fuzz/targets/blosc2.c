/* Blosc2 chunks (blosc.c) as MDS "sample::blosc2" values hold them: a batch whose
 * declared sizes are read, held to a limit, and decoded into one buffer. */
#include "frames.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    frame_batch b = take_frames(&in);
    uint64_t sizes[MAX_FRAMES];
    int all_known;
    hpcio_error err;

    if (frame_sizes(&b, hpcio_blosc2_content_size, sizes, &all_known, &err) == HPCIO_OK) {
        FUZZ_CHECK(all_known);
        decode_known_batch(&b, hpcio_blosc2_decode_known, sizes);
    }
    return 0;
}
