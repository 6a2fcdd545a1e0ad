/* zstd frames (zstd.c) as MDS "sample::zstd" values and the JINX sidecar (BINX) hold them:
 * a batch of frames with declared sizes decoded into one buffer, frames without a size
 * stream-decoded under a limit, and the whole input stream-decoded as one value, and as a
 * file (a .jsonl.zst) decoded into another, which must give the same bytes. */
#define _GNU_SOURCE /* memfd_create */
#include <sys/mman.h>
#include <unistd.h>

#include "frames.h"

/* The file-to-file decode of src agrees with the in-memory one (status, bytes). */
static void decode_as_file(const uint8_t *src, uint64_t len, hpcio_status want,
                           const uint8_t *want_out, uint64_t want_len)
{
    int in_fd = memfd_create("zstd-in", 0), out_fd = memfd_create("zstd-out", 0);
    uint64_t out_len = 0;
    hpcio_error err;
    hpcio_status st;

    FUZZ_CHECK(in_fd >= 0 && out_fd >= 0);
    FUZZ_CHECK(len == 0 || write(in_fd, src, (size_t)len) == (ssize_t)len);
    FUZZ_CHECK(lseek(in_fd, 0, SEEK_SET) == 0);
    hpcio_error_clear(&err);
    st = hpcio_zstd_decode_fd(in_fd, out_fd, LIMIT, &out_len, &err);
    check_status(st, &err);
    FUZZ_CHECK((st == HPCIO_OK) == (want == HPCIO_OK));
    if (st == HPCIO_OK) {
        uint8_t *got = malloc(out_len ? (size_t)out_len : 1);

        FUZZ_CHECK(got != NULL && out_len == want_len);
        FUZZ_CHECK(out_len == 0 || pread(out_fd, got, (size_t)out_len, 0) == (ssize_t)out_len);
        FUZZ_CHECK(out_len == 0 || memcmp(got, want_out, (size_t)out_len) == 0);
        free(got);
    }
    close(in_fd);
    close(out_fd);
}

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
    decode_as_file(b.src, b.len, st, out, out_len);
    free(out);
    if (frame_sizes(&b, hpcio_zstd_content_size, sizes, &all_known, &err) != HPCIO_OK)
        return 0;
    if (all_known) {
        decode_known_batch(&b, hpcio_zstd_decode_known, sizes);
        return 0;
    }
    hpcio_error_clear(&err);
    /* the batch bound: twice the per-frame limit, so both bounds are exercised */
    st = hpcio_zstd_decode_stream_many(b.src, b.len, b.starts, b.ends, b.m, LIMIT, 2 * LIMIT, outs,
                                       lens, &err);
    check_status(st, &err);
    uint64_t total = 0;
    for (size_t j = 0; j < b.m; j++) {
        if (st == HPCIO_OK) {
            FUZZ_CHECK(lens[j] <= LIMIT);
            total += lens[j];
            free(outs[j]);
        } else {
            FUZZ_CHECK(outs[j] == NULL);
        }
    }
    FUZZ_CHECK(total <= 2 * LIMIT);
    return 0;
}
