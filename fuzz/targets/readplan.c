/* Planned and buffered record reads (readplan.c, fileio.c) with extents from the input,
 * as a corrupt offset table would give them, over a file holding the rest of the input:
 * argument checks, request grouping and short reads at the end of the file. */
#define _GNU_SOURCE /* memfd_create */
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_input.h"

#define MAX_EXT 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_input in = {data, size};
    const size_t m = take_u8(&in) % (MAX_EXT + 1);
    const uint64_t dst_cap = take_u16(&in) % 4096, max_gap = take_u8(&in) * 8u;
    const uint64_t max_request = take_u16(&in);
    const int depth = 1 + take_u8(&in) % 3;
    uint32_t file[MAX_EXT];
    uint64_t off[MAX_EXT], len[MAX_EXT], out[MAX_EXT], requests, bytes, pos[MAX_EXT + 1];
    uint8_t *dst = malloc(dst_cap ? dst_cap : 1);
    int fds[2];
    size_t done = 0;
    hpcio_error err;
    hpcio_status st;

    for (size_t j = 0; j < m; j++) {
        file[j] = take_u8(&in) % 3; /* file 2 does not exist */
        off[j] = take_u16(&in) % 8192;
        len[j] = take_u8(&in) * 4u;
        out[j] = take_u16(&in) % 4096;
    }
    fds[0] = memfd_create("fuzz", 0);
    fds[1] = memfd_create("fuzz-empty", 0);
    FUZZ_CHECK(fds[0] >= 0 && fds[1] >= 0);
    FUZZ_CHECK(write(fds[0], in.p, in.n) == (ssize_t)in.n);
    hpcio_error_clear(&err);
    st = hpcio_read_extents(fds, 2, file, off, len, out, m, dst, dst_cap, max_gap, max_request,
                            depth, &requests, &bytes, &err);
    check_status(st, &err);
    if (st == HPCIO_OK)
        FUZZ_CHECK(requests <= m);
    for (size_t j = 0; j < m; j++)
        len[j] += off[j]; /* as ends */
    hpcio_error_clear(&err);
    st = hpcio_pread_records(fds[0], off, len, m, dst, dst_cap, pos, &done, &err);
    check_status(st, &err);
    FUZZ_CHECK(done <= m);
    for (size_t j = 0; st == HPCIO_OK && j < done; j++)
        FUZZ_CHECK(pos[j] <= pos[j + 1] && pos[j + 1] <= dst_cap);
    close(fds[0]);
    close(fds[1]);
    free(dst);
    return 0;
}
