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

/* One read of the read-ahead: at most HPCIO_READAHEAD_CHUNK bytes of file `file`. */
struct piece {
    uint32_t file;
    uint64_t off;
    uint64_t len;
    uint64_t rank;     /* extents: read before those of a higher rank */
};

struct hpcio_readahead {
    int *fds;          /* our own descriptors of the files */
    size_t nfiles;
    struct piece *pieces;
    size_t npieces;
    int depth;
    int cancel;        /* set by finish: pieces not started are skipped */
    int running;       /* the coordinating thread exists */
    int finished;      /* every piece was read, skipped or failed (atomic) */
    pid_t owner;       /* the process whose thread it is: a forked child has none */
    pthread_t coordinator;
    uint8_t *map;      /* a single range's pages mapped (never touched), for mincore; or NULL */
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

/* Piece j read into the thread's scratch buffer unless cancelled or cached.  Errors are
 * dropped: read-ahead is a hint, and the reader's own read reports what is wrong. */
static hpcio_status read_piece(void *shared, void *scratch, size_t j, hpcio_error *err)
{
    hpcio_readahead *ra = shared;
    const struct piece *p = &ra->pieces[j];

    if (__atomic_load_n(&ra->cancel, __ATOMIC_RELAXED) || cached(ra, p->off, p->len))
        return HPCIO_OK;
    if (hpcio_pread_full(ra->fds[p->file], scratch, p->len, p->off, err) == HPCIO_OK)
        __atomic_fetch_add(&ra->read, p->len, __ATOMIC_RELAXED);
    hpcio_error_clear(err);
    return HPCIO_OK;
}

static void *coordinate(void *arg)
{
    hpcio_readahead *ra = arg;
    hpcio_error err;

    hpcio_error_clear(&err);
    hpcio_parallel_for(ra->npieces, ra->depth, scratch_new, free, read_piece, ra, &err);
    __atomic_store_n(&ra->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Bytes [off, off + len) of file `file` appended as pieces of at most a chunk each. */
static void add_pieces(hpcio_readahead *ra, uint32_t file, uint64_t off, uint64_t len)
{
    for (uint64_t at = off; at < off + len; at += HPCIO_READAHEAD_CHUNK) {
        struct piece *p = &ra->pieces[ra->npieces++];
        p->file = file;
        p->off = at;
        p->len = off + len - at < HPCIO_READAHEAD_CHUNK ? off + len - at : HPCIO_READAHEAD_CHUNK;
    }
}

static hpcio_readahead *readahead_new(size_t nfiles, hpcio_error *err)
{
    hpcio_readahead *ra = calloc(1, sizeof *ra);

    if (ra == NULL || (ra->fds = malloc((nfiles ? nfiles : 1) * sizeof *ra->fds)) == NULL) {
        free(ra);
        hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "no memory for a read-ahead");
        return NULL;
    }
    return ra;
}

static void readahead_free(hpcio_readahead *ra)
{
    if (ra->map != NULL)
        munmap(ra->map, ra->map_len);
    for (size_t f = 0; f < ra->nfiles; f++)
        close(ra->fds[f]);
    free(ra->fds);
    free(ra->pieces);
    free(ra);
}

/* Our own descriptors of fds[0..nfiles): the caller may close its own meanwhile. */
static hpcio_status dup_files(hpcio_readahead *ra, const int *fds, size_t nfiles,
                              hpcio_error *err)
{
    for (; ra->nfiles < nfiles; ra->nfiles++) {
        int fd = fcntl(fds[ra->nfiles], F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            err->sys_errno = errno;
            return hpcio_fail(err, HPCIO_E_IO, -1, -1, "cannot duplicate the descriptor: %s",
                              strerror(errno));
        }
        ra->fds[ra->nfiles] = fd;
    }
    return HPCIO_OK;
}

static hpcio_status begin(hpcio_readahead *ra, int depth, hpcio_readahead **out)
{
    ra->depth = depth < 1 ? 1 : depth;
    ra->owner = getpid();
    *out = ra;
    /* Without a thread there is no read-ahead, and reading works as before. */
    if (ra->npieces > 0)
        ra->running = pthread_create(&ra->coordinator, NULL, coordinate, ra) == 0;
    return HPCIO_OK;
}

hpcio_status hpcio_readahead_start(int fd, uint64_t offset, uint64_t length, int depth,
                                   hpcio_readahead **out, hpcio_error *err)
{
    hpcio_readahead *ra = readahead_new(1, err);
    size_t page = page_size();
    hpcio_status st;

    *out = NULL;
    if (ra == NULL)
        return HPCIO_E_NOMEM;
    if ((st = dup_files(ra, &fd, 1, err)) != HPCIO_OK) {
        readahead_free(ra);
        return st;
    }
    ra->pieces = malloc((length / HPCIO_READAHEAD_CHUNK + 1) * sizeof *ra->pieces);
    if (ra->pieces == NULL) {
        readahead_free(ra);
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "no memory for a read-ahead");
    }
    add_pieces(ra, 0, offset, length);
    ra->map_at = offset / page * page;
    ra->map_len = (size_t)(offset + length - ra->map_at);
    if (length > 0) {
        void *m = mmap(NULL, ra->map_len, PROT_READ, MAP_SHARED, ra->fds[0], (off_t)ra->map_at);
        ra->map = m == MAP_FAILED ? NULL : m;
    }
    return begin(ra, depth, out);
}

static int by_rank_and_place(const void *a, const void *b)
{
    const struct piece *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

hpcio_status hpcio_readahead_extents_start(const int *fds, size_t nfiles, const uint32_t *file,
                                           const uint64_t *off, const uint64_t *len,
                                           const uint64_t *rank, size_t m, uint64_t max_gap,
                                           int depth, hpcio_readahead **out, hpcio_error *err)
{
    hpcio_readahead *ra;
    struct piece *ext;
    size_t pieces = 1;
    hpcio_status st;

    *out = NULL;
    /* a merged range holds at most one gap per extent: with gaps up to half a chunk, the
     * pieces of all ranges stay within the bound below */
    if (max_gap > HPCIO_READAHEAD_CHUNK / 2)
        max_gap = HPCIO_READAHEAD_CHUNK / 2;
    for (size_t j = 0; j < m; j++) {
        if (file[j] >= nfiles)
            return hpcio_fail(err, HPCIO_E_ARG, (int64_t)j, -1,
                              "extent %zu names file %u of %zu", j, file[j], nfiles);
        pieces += len[j] / HPCIO_READAHEAD_CHUNK + 2;
    }
    if ((ra = readahead_new(nfiles, err)) == NULL)
        return HPCIO_E_NOMEM;
    ext = malloc((m ? m : 1) * sizeof *ext);
    ra->pieces = malloc(pieces * sizeof *ra->pieces);
    if (ext == NULL || ra->pieces == NULL) {
        free(ext);
        readahead_free(ra);
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "no memory for a read-ahead");
    }
    if ((st = dup_files(ra, fds, nfiles, err)) != HPCIO_OK) {
        free(ext);
        readahead_free(ra);
        return st;
    }
    for (size_t j = 0; j < m; j++)
        ext[j] = (struct piece){file[j], off[j], len[j], rank ? rank[j] : 0};
    qsort(ext, m, sizeof *ext, by_rank_and_place);
    /* neighbours of one rank closer than max_gap are read as one range, as planned reads are */
    for (size_t a = 0; a < m;) {
        uint64_t lo = ext[a].off, hi = lo + ext[a].len;
        size_t b = a + 1;
        for (; b < m && ext[b].rank == ext[a].rank && ext[b].file == ext[a].file &&
               ext[b].off <= hi + max_gap; b++)
            if (ext[b].off + ext[b].len > hi)
                hi = ext[b].off + ext[b].len;
        if (hi > lo)
            add_pieces(ra, ext[a].file, lo, hi - lo);
        a = b;
    }
    free(ext);
    return begin(ra, depth, out);
}

int hpcio_readahead_done(const hpcio_readahead *ra)
{
    return ra == NULL || !ra->running || ra->owner != getpid() ||
           __atomic_load_n(&ra->finished, __ATOMIC_ACQUIRE);
}

uint64_t hpcio_readahead_finish(hpcio_readahead *ra, int cancel)
{
    uint64_t read;

    if (ra == NULL)
        return 0;
    if (cancel)
        __atomic_store_n(&ra->cancel, 1, __ATOMIC_RELAXED);
    if (ra->running && ra->owner == getpid())
        pthread_join(ra->coordinator, NULL);
    read = ra->read;
    readahead_free(ra);
    return read;
}
