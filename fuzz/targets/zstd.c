/* zstd frames (zstd.c) as MDS "sample::zstd" values and the JINX sidecar (BINX) hold them:
 * a batch of frames with declared sizes decoded into one buffer, frames without a size
 * stream-decoded under a limit, and the whole input stream-decoded as one value. */
#include "frames.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    frame_batch b = take_frames(&in);
    uint64_t sizes[MAX_FRAMES], out_len = 0, lens[MAX_FRAMES];
    uint8_t *out = NULL, *outs[MAX_FRAMES];
    int all_known;
    hpcio_error err;
    hpcio_status st;

    hpcio_error_clear(&err);
    st = hpcio_zstd_decode_stream(b.src, b.len, LIMIT, &out, &out_len, &err);
    check_status(st, &err);
    FUZZ_CHECK(st == HPCIO_OK ? out_len <= LIMIT : out == NULL);
    free(out);
    if (frame_sizes(&b, hpcio_zstd_content_size, sizes, &all_known, &err) != HPCIO_OK)
        return 0;
    if (all_known) {
        decode_known_batch(&b, hpcio_zstd_decode_known, sizes);
        return 0;
    }
    hpcio_error_clear(&err);
    st = hpcio_zstd_decode_stream_many(b.src, b.len, b.starts, b.ends, b.m, LIMIT, outs, lens,
                                       b.nthreads, &err);
    check_status(st, &err);
    for (size_t j = 0; j < b.m; j++) {
        if (st == HPCIO_OK) {
            FUZZ_CHECK(lens[j] <= LIMIT);
            free(outs[j]);
        } else {
            FUZZ_CHECK(outs[j] == NULL);
        }
    }
    return 0;
}
