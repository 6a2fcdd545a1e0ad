/* pread-based shard reading into caller buffers, and early writeback of written files. */
#define _GNU_SOURCE /* sync_file_range */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* pread(2) takes at most SSIZE_MAX and Linux moves at most ~2 GiB per call anyway. */
#define MAX_PREAD ((uint64_t)1 << 30)

hpcio_status hpcio_pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t offset,
                              hpcio_error *err)
{
    uint64_t done = 0;

    while (done < len) {
        uint64_t want = len - done < MAX_PREAD ? len - done : MAX_PREAD;
        ssize_t got = pread(fd, buf + done, (size_t)want, (off_t)(offset + done));

        if (got < 0) {
            if (errno == EINTR)
                continue;
            err->sys_errno = errno;
            return hpcio_fail(err, HPCIO_E_IO, -1, (int64_t)(offset + done),
                              "read of %llu bytes failed: %s", (unsigned long long)want,
                              strerror(errno));
        }
        if (got == 0)
            return hpcio_fail(err, HPCIO_E_TRUNCATED, -1, (int64_t)(offset + done),
                              "file ends after %llu of the %llu bytes expected at byte %llu",
                              (unsigned long long)done, (unsigned long long)len,
                              (unsigned long long)offset);
        done += (uint64_t)got;
    }
    return HPCIO_OK;
}

hpcio_status hpcio_pread_records(int fd, const uint64_t *starts, const uint64_t *ends,
                                 size_t m, uint8_t *buf, uint64_t cap,
                                 uint64_t *out_offsets, size_t *n_done,
                                 hpcio_error *err)
{
    uint64_t pos = 0;       /* bytes placed in buf */
    uint64_t run_file = 0;  /* file offset of the pending merged read */
    uint64_t run_buf = 0;   /* its position in buf */
    uint64_t run_len = 0;
    size_t j;

    *n_done = 0;
    out_offsets[0] = 0;
    for (j = 0; j < m; j++) {
        const uint64_t a = starts[j], b = ends[j];

        if (HPCIO_UNLIKELY(b < a))
            return hpcio_fail(err, HPCIO_E_CORRUPT, (int64_t)j, (int64_t)a,
                              "record range ends at byte %llu before it starts",
                              (unsigned long long)b);
        if (b - a > cap - pos) {
            if (j == 0)
                return hpcio_fail(err, HPCIO_E_BUFFER, 0, (int64_t)a,
                                  "record of %llu bytes does not fit a %llu-byte buffer",
                                  (unsigned long long)(b - a), (unsigned long long)cap);
            break;
        }
        /* A record that starts where the pending run ends joins it: one pread. */
        if (run_len > 0 && a != run_file + run_len) {
            hpcio_status st = hpcio_pread_full(fd, buf + run_buf, run_len, run_file, err);
            if (st != HPCIO_OK) {
                err->item = (int64_t)*n_done;
                return st;
            }
            *n_done = j;
            run_len = 0;
        }
        if (run_len == 0) {
            run_file = a;
            run_buf = pos;
        }
        run_len += b - a;
        pos += b - a;
        assert(pos <= cap && run_buf + run_len == pos);
        out_offsets[j + 1] = pos;
    }
    if (run_len > 0) {
        hpcio_status st = hpcio_pread_full(fd, buf + run_buf, run_len, run_file, err);
        if (st != HPCIO_OK) {
            err->item = (int64_t)*n_done;
            return st;
        }
    }
    *n_done = j;
    return HPCIO_OK;
}

hpcio_status hpcio_start_writeback(int fd, uint64_t offset, uint64_t nbytes, hpcio_error *err)
{
#ifdef SYNC_FILE_RANGE_WRITE
    while (sync_file_range(fd, (off64_t)offset, (off64_t)nbytes, SYNC_FILE_RANGE_WRITE) != 0) {
        if (errno == EINTR)
            continue;
        /* Not a file whose pages can be written back (a pipe, a file system without
         * the call): a later fsync does all the work, as it would have anyway. */
        if (errno == ESPIPE || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)
            return HPCIO_OK;
        err->sys_errno = errno;
        return hpcio_fail(err, HPCIO_E_IO, -1, (int64_t)offset, "starting writeback failed: %s",
                          strerror(errno));
    }
#else
    (void)fd;
    (void)offset;
    (void)nbytes;
    (void)err;
#endif
    return HPCIO_OK;
}
