/* Read-ahead of a file range into the page cache, in the background (see
 * hpcio_readahead_start in hpcio.h): on storage with a latency per request, the kernel's
 * own read-ahead of a mapped or sequentially read file keeps one request in flight. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

struct hpcio_readahead {
    int fd;            /* our own descriptor of the file */
    uint64_t offset;   /* the range [offset, offset + length) */
    uint64_t length;
    int depth;
    int cancel;        /* set by finish: chunks not started are skipped */
    int running;       /* the coordinating thread exists */
    pthread_t coordinator;
    uint8_t *map;      /* the range's pages mapped (never touched), for mincore; or NULL */
    uint64_t map_at;   /* file offset of map[0], page-aligned */
    size_t map_len;
    uint64_t read;     /* bytes read that were not cached */
};

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* 1 when every page of bytes [off, off + len) of the file is in the page cache. */
static int cached(const hpcio_readahead *ra, uint64_t off, uint64_t len)
{
    size_t page = page_size();
    uint64_t first = (off - ra->map_at) / page, last = (off + len - ra->map_at + page - 1) / page;
    unsigned char vec[HPCIO_READAHEAD_CHUNK / 4096 + 2];

    if (ra->map == NULL || last - first > sizeof vec)
        return 0;
    if (mincore(ra->map + first * page, (size_t)(last - first) * page, vec) != 0)
        return 0;
    for (uint64_t p = 0; p < last - first; p++)
        if (!(vec[p] & 1))
            return 0;
    return 1;
}

static void *scratch_new(void) { return malloc(HPCIO_READAHEAD_CHUNK); }

/* Chunk j read into the thread's scratch buffer unless cancelled or cached.  Errors are
 * dropped: read-ahead is a hint, and the reader's own read reports what is wrong. */
static hpcio_status read_chunk(void *shared, void *scratch, size_t j, hpcio_error *err)
{
    hpcio_readahead *ra = shared;
    uint64_t off = ra->offset + (uint64_t)j * HPCIO_READAHEAD_CHUNK;
    uint64_t len = ra->offset + ra->length - off;

    if (len > HPCIO_READAHEAD_CHUNK)
        len = HPCIO_READAHEAD_CHUNK;
    if (__atomic_load_n(&ra->cancel, __ATOMIC_RELAXED) || cached(ra, off, len))
        return HPCIO_OK;
    if (hpcio_pread_full(ra->fd, scratch, len, off, err) == HPCIO_OK)
        __atomic_fetch_add(&ra->read, len, __ATOMIC_RELAXED);
    hpcio_error_clear(err);
    return HPCIO_OK;
}

static void *coordinate(void *arg)
{
    hpcio_readahead *ra = arg;
    hpcio_error err;
    size_t chunks = (size_t)((ra->length + HPCIO_READAHEAD_CHUNK - 1) / HPCIO_READAHEAD_CHUNK);

    hpcio_error_clear(&err);
    hpcio_parallel_for(chunks, ra->depth, scratch_new, free, read_chunk, ra, &err);
    return NULL;
}

hpcio_status hpcio_readahead_start(int fd, uint64_t offset, uint64_t length, int depth,
                                   hpcio_readahead **out, hpcio_error *err)
{
    hpcio_readahead *ra = calloc(1, sizeof *ra);
    size_t page = page_size();

    *out = NULL;
    if (ra == NULL)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "no memory for a read-ahead");
    ra->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (ra->fd < 0) {
        free(ra);
        err->sys_errno = errno;
        return hpcio_fail(err, HPCIO_E_IO, -1, -1, "cannot duplicate the descriptor: %s",
                          strerror(errno));
    }
    ra->offset = offset;
    ra->length = length;
    ra->depth = depth < 1 ? 1 : depth;
    ra->map_at = offset / page * page;
    ra->map_len = (size_t)(offset + length - ra->map_at);
    if (length > 0) {
        void *m = mmap(NULL, ra->map_len, PROT_READ, MAP_SHARED, ra->fd, (off_t)ra->map_at);
        ra->map = m == MAP_FAILED ? NULL : m;
    }
    *out = ra;
    if (length == 0)
        return HPCIO_OK;
    /* Without a thread there is no read-ahead, and reading works as before. */
    ra->running = pthread_create(&ra->coordinator, NULL, coordinate, ra) == 0;
    return HPCIO_OK;
}

uint64_t hpcio_readahead_finish(hpcio_readahead *ra, int cancel)
{
    uint64_t read;

    if (ra == NULL)
        return 0;
    if (cancel)
        __atomic_store_n(&ra->cancel, 1, __ATOMIC_RELAXED);
    if (ra->running)
        pthread_join(ra->coordinator, NULL);
    read = ra->read;
    if (ra->map != NULL)
        munmap(ra->map, ra->map_len);
    close(ra->fd);
    free(ra);
    return read;
}
