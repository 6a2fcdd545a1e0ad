/* Planned reads for latency-bound storage: a batch's record extents become a queue of
 * large requests kept in flight together (see hpcio_read_extents in hpcio.h). */
#define _GNU_SOURCE /* qsort_r, preadv */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"

/* Pieces of one request (records and the gaps between them); IOV_MAX is 1024 on Linux. */
#define MAX_IOV 1024

typedef struct {
    size_t first;   /* position of its first extent in the sorted order */
    size_t count;   /* extents it covers */
    uint32_t file;
    uint64_t start; /* file range [start, end) it reads */
    uint64_t end;
} request;

typedef struct {
    const int *fds;
    const uint32_t *file;
    const uint64_t *off;
    const uint64_t *len;
    const uint64_t *out;
    uint8_t *dst;
    const size_t *order;
    const request *reqs;
    uint8_t *discard; /* gap bytes land here and are never read */
} plan;

static int by_file_offset(const void *a, const void *b, void *ctx)
{
    const plan *p = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;

    if (p->file[i] != p->file[j])
        return p->file[i] < p->file[j] ? -1 : 1;
    if (p->off[i] != p->off[j])
        return p->off[i] < p->off[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* preadv until every byte of iov[0..n) is filled, advancing past short reads. */
static hpcio_status preadv_full(int fd, struct iovec *iov, int n, uint64_t offset,
                                uint64_t total, int64_t item, hpcio_error *err)
{
    uint64_t done = 0;

    while (n > 0) {
        ssize_t got = preadv(fd, iov, n, (off_t)(offset + done));

        if (got < 0) {
            if (errno == EINTR)
                continue;
            err->sys_errno = errno;
            return hpcio_fail(err, HPCIO_E_IO, item, (int64_t)(offset + done),
                              "read of %llu bytes failed: %s",
                              (unsigned long long)(total - done), strerror(errno));
        }
        if (got == 0)
            return hpcio_fail(err, HPCIO_E_TRUNCATED, item, (int64_t)(offset + done),
                              "file ends after %llu of the %llu bytes expected at byte %llu",
                              (unsigned long long)done, (unsigned long long)total,
                              (unsigned long long)offset);
        done += (uint64_t)got;
        while (n > 0 && (size_t)got >= iov->iov_len) {
            got -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + got;
            iov->iov_len -= (size_t)got;
        }
    }
    return HPCIO_OK;
}

static hpcio_status read_request(void *shared, void *ctx, size_t r, hpcio_error *err)
{
    const plan *p = shared;
    const request *q = &p->reqs[r];
    struct iovec iov[MAX_IOV];
    uint64_t pos = q->start;
    int n = 0;

    (void)ctx;
    for (size_t k = 0; k < q->count; k++) {
        size_t j = p->order[q->first + k];

        if (p->off[j] > pos) {
            iov[n].iov_base = p->discard;
            iov[n++].iov_len = (size_t)(p->off[j] - pos);
        }
        if (p->len[j] > 0) {
            iov[n].iov_base = p->dst + p->out[j];
            iov[n++].iov_len = (size_t)p->len[j];
        }
        pos = p->off[j] + p->len[j];
    }
    return preadv_full(p->fds[q->file], iov, n, q->start, q->end - q->start,
                       (int64_t)p->order[q->first], err);
}

/* Group the sorted extents into requests: an extent joins the open request when it is in
 * the same file, starts at or after its end with a gap of at most max_gap, keeps the
 * request within max_request bytes and within MAX_IOV pieces; else it opens a new one. */
static size_t group(const plan *p, size_t m, uint64_t max_gap, uint64_t max_request,
                    request *reqs)
{
    size_t nreq = 0;
    int pieces = 0;

    for (size_t k = 0; k < m; k++) {
        size_t j = p->order[k];
        uint64_t a = p->off[j], b = a + p->len[j];
        request *q = nreq ? &reqs[nreq - 1] : NULL;

        if (q && q->file == p->file[j] && a >= q->end && a - q->end <= max_gap
            && b - q->start <= max_request && pieces + 2 <= MAX_IOV) {
            pieces += (a > q->end) + 1;
            q->end = b;
            q->count++;
            continue;
        }
        reqs[nreq++] = (request){k, 1, p->file[j], a, b};
        pieces = 1;
    }
    return nreq;
}

hpcio_status hpcio_read_extents(const int *fds, size_t nfiles, const uint32_t *file,
                                const uint64_t *off, const uint64_t *len, const uint64_t *out,
                                size_t m, uint8_t *dst, uint64_t dst_cap, uint64_t max_gap,
                                uint64_t max_request, int depth, uint64_t *requests,
                                uint64_t *bytes, hpcio_error *err)
{
    plan p = {fds, file, off, len, out, dst, NULL, NULL, NULL};
    size_t *order = NULL;
    request *reqs = NULL;
    size_t nreq;
    hpcio_status st;

    *requests = *bytes = 0;
    for (size_t j = 0; j < m; j++) {
        if (file[j] >= nfiles)
            return hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, -1, "extent names file %u of %zu",
                              file[j], nfiles);
        if (out[j] > dst_cap || len[j] > dst_cap - out[j] || off[j] > UINT64_MAX - len[j])
            return hpcio_fail(err, HPCIO_E_BUFFER, (int64_t)j, (int64_t)off[j],
                              "extent of %llu bytes does not fit the output at %llu (%llu bytes)",
                              (unsigned long long)len[j], (unsigned long long)out[j],
                              (unsigned long long)dst_cap);
    }
    if (m == 0)
        return HPCIO_OK;
    order = malloc(sizeof *order * m);
    reqs = malloc(sizeof *reqs * m);
    p.discard = malloc(max_gap ? (size_t)max_gap : 1);
    if (!order || !reqs || !p.discard) {
        st = hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot plan %zu extents", m);
        goto done;
    }
    for (size_t j = 0; j < m; j++)
        order[j] = j;
    p.order = order;
    qsort_r(order, m, sizeof *order, by_file_offset, &p);
    nreq = group(&p, m, max_gap, max_request ? max_request : UINT64_MAX, reqs);
    p.reqs = reqs;
    st = hpcio_parallel_for(nreq, depth, NULL, NULL, read_request, &p, err);
    if (st == HPCIO_OK) {
        *requests = nreq;
        for (size_t r = 0; r < nreq; r++)
            *bytes += reqs[r].end - reqs[r].start;
    }
done:
    free(order);
    free(reqs);
    free(p.discard);
    return st;
}
