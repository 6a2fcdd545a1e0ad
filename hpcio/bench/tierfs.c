/* tierfs: a FUSE passthrough that makes a local directory behave like a remote storage
 * tier, for tests and benchmarks on machines without a parallel filesystem.
 *
 * Every read request the kernel sends waits `latency_us` before it is served, and all
 * reads share a bandwidth cap of `bandwidth` bytes per second (a single virtual clock:
 * a request of n bytes occupies the tier for n / bandwidth seconds after the requests
 * before it).  Requests run on FUSE's worker threads, so concurrent requests overlap their
 * latency as they do on Lustre or Spectrum Scale: a reader with one request in flight sees
 * latency + size / bandwidth per request, a reader with many in flight sees the cap.
 * Writes and metadata pass through undelayed.  Read data is spliced from the source file
 * to the kernel where it allows, so the emulator's own copies take little of the CPU the
 * reader it serves needs.
 *
 * The file `.tierfs-stats` at the mount's root reads as "requests N\nbytes M\n": the read
 * requests served and their bytes, so a benchmark can report what the storage was made to
 * read.  This is an emulation of a tier's latency and bandwidth, not of its caching,
 * striping or metadata server.
 *
 * `max_background` bounds the read-ahead requests the kernel keeps in flight (FUSE's
 * default is 12; a Lustre client keeps 8 RPCs per storage target, times the targets a
 * file is striped over); the kernel's read-ahead window, and so the size of those
 * requests, is the mount's `read_ahead_kb` (128 KiB by default), set by the caller.
 * `client_cache=0` drops a file's pages from the client's page cache whenever it is opened,
 * so that each fetch of a whole file reaches the tier, however much memory the node has.
 *
 *   tierfs SOURCE MOUNTPOINT -o latency_us=1000,bandwidth=500000000[,max_threads=64]
 *          [,max_background=64] [,client_cache=0] [-f]
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define STATS_NAME "/.tierfs-stats"

struct tier_options {
    char *source;
    unsigned long latency_us;
    unsigned long long bandwidth; /* bytes per second; 0 = no cap */
    unsigned max_background;      /* 0 = FUSE's default */
    unsigned client_cache;        /* 0: a file's cached pages are dropped when it is opened */
};

static struct tier_options opts;
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static double tier_free_at;  /* when the tier has sent every byte asked for so far */
static unsigned long long served_requests, served_bytes;

static const struct fuse_opt option_spec[] = {
    {"latency_us=%lu", offsetof(struct tier_options, latency_us), 0},
    {"bandwidth=%llu", offsetof(struct tier_options, bandwidth), 0},
    {"max_background=%u", offsetof(struct tier_options, max_background), 0},
    {"client_cache=%u", offsetof(struct tier_options, client_cache), 0},
    FUSE_OPT_END,
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double when) {
    double left = when - now_seconds();
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Wait as the tier would before `n` bytes arrive: the latency, then this request's turn
 * on the shared bandwidth. */
static void tier_wait(size_t n) {
    double start = now_seconds() + (double)opts.latency_us * 1e-6;
    double done = start;
    pthread_mutex_lock(&clock_lock);
    if (opts.bandwidth) {
        double begin = tier_free_at > start ? tier_free_at : start;
        done = begin + (double)n / (double)opts.bandwidth;
        tier_free_at = done;
    }
    served_requests++;
    served_bytes += n;
    pthread_mutex_unlock(&clock_lock);
    sleep_until(done);
}

static int source_path(char out[PATH_MAX], const char *path) {
    int n = snprintf(out, PATH_MAX, "%s%s", opts.source, path);
    return (n < 0 || n >= PATH_MAX) ? -ENAMETOOLONG : 0;
}

static int stats_text(char *buf, size_t size) {
    pthread_mutex_lock(&clock_lock);
    int n = snprintf(buf, size, "requests %llu\nbytes %llu\n", served_requests, served_bytes);
    pthread_mutex_unlock(&clock_lock);
    return n;
}

#define WITH_SOURCE(path, full)                 \
    char full[PATH_MAX];                        \
    do {                                        \
        int rc_ = source_path(full, path);      \
        if (rc_) return rc_;                    \
    } while (0)

static int tier_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    if (strcmp(path, STATS_NAME) == 0) {
        char text[128];
        memset(st, 0, sizeof *st);
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = stats_text(text, sizeof text);
        return 0;
    }
    WITH_SOURCE(path, full);
    return lstat(full, st) == 0 ? 0 : -errno;
}

static int tier_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t offset,
                        struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)offset, (void)fi, (void)flags;
    WITH_SOURCE(path, full);
    DIR *dir = opendir(full);
    if (!dir) return -errno;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        struct stat st = {.st_ino = entry->d_ino, .st_mode = (mode_t)DTTOIF(entry->d_type)};
        if (fill(buf, entry->d_name, &st, 0, 0)) break;
    }
    closedir(dir);
    return 0;
}

static int tier_open(const char *path, struct fuse_file_info *fi) {
    if (strcmp(path, STATS_NAME) == 0) {
        fi->direct_io = 1; /* fresh figures on every read */
        fi->fh = (uint64_t)-1;
        return 0;
    }
    WITH_SOURCE(path, full);
    int fd = open(full, fi->flags & ~O_NOFOLLOW);
    if (fd < 0) return -errno;
    fi->fh = (uint64_t)fd;
    /* a client page cache, as Lustre and Spectrum Scale clients keep; without it every
     * open reads the file from the tier again, as on a node whose memory is far smaller
     * than the datasets it reads */
    fi->keep_cache = opts.client_cache ? 1 : 0;
    return 0;
}

static int tier_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    WITH_SOURCE(path, full);
    int fd = open(full, fi->flags, mode);
    if (fd < 0) return -errno;
    fi->fh = (uint64_t)fd;
    return 0;
}

/* A read answered with the source file's bytes by reference (spliced by libfuse where
 * the kernel allows, else copied once), after the tier's latency and bandwidth turn. */
static int tier_read_buf(const char *path, struct fuse_bufvec **bufp, size_t size, off_t offset,
                         struct fuse_file_info *fi) {
    struct fuse_bufvec *src = malloc(sizeof *src);
    (void)path;
    if (src == NULL) return -ENOMEM;
    *src = FUSE_BUFVEC_INIT(size);
    if (fi->fh == (uint64_t)-1) {
        char text[128];
        int n = stats_text(text, sizeof text);
        size_t len = offset >= n ? 0 : ((size_t)(n - offset) < size ? (size_t)(n - offset) : size);
        src->buf[0].mem = malloc(len ? len : 1);
        if (src->buf[0].mem == NULL) {
            free(src);
            return -ENOMEM;
        }
        memcpy(src->buf[0].mem, text + offset, len);
        src->buf[0].size = len;
    } else {
        tier_wait(size);
        src->buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
        src->buf[0].fd = (int)fi->fh;
        src->buf[0].pos = offset;
    }
    *bufp = src;
    return 0;
}

static int tier_write(const char *path, const char *buf, size_t size, off_t offset,
                      struct fuse_file_info *fi) {
    (void)path;
    ssize_t put = pwrite((int)fi->fh, buf, size, offset);
    return put < 0 ? -errno : (int)put;
}

static int tier_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    if (fi->fh != (uint64_t)-1) close((int)fi->fh);
    return 0;
}

static int tier_fsync(const char *path, int datasync, struct fuse_file_info *fi) {
    (void)path;
    int rc = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
    return rc == 0 ? 0 : -errno;
}

static int tier_statfs(const char *path, struct statvfs *st) {
    WITH_SOURCE(path, full);
    return statvfs(full, st) == 0 ? 0 : -errno;
}

static int tier_mkdir(const char *path, mode_t mode) {
    WITH_SOURCE(path, full);
    return mkdir(full, mode) == 0 ? 0 : -errno;
}

static int tier_unlink(const char *path) {
    WITH_SOURCE(path, full);
    return unlink(full) == 0 ? 0 : -errno;
}

static int tier_rmdir(const char *path) {
    WITH_SOURCE(path, full);
    return rmdir(full) == 0 ? 0 : -errno;
}

static int tier_rename(const char *from, const char *to, unsigned int flags) {
    if (flags) return -EINVAL;
    WITH_SOURCE(from, full_from);
    WITH_SOURCE(to, full_to);
    return rename(full_from, full_to) == 0 ? 0 : -errno;
}

static int tier_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    if (fi) return ftruncate((int)fi->fh, size) == 0 ? 0 : -errno;
    WITH_SOURCE(path, full);
    return truncate(full, size) == 0 ? 0 : -errno;
}

static int tier_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi) {
    (void)fi;
    WITH_SOURCE(path, full);
    return utimensat(AT_FDCWD, full, tv, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

static int tier_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    (void)fi;
    WITH_SOURCE(path, full);
    return chmod(full, mode) == 0 ? 0 : -errno;
}

static void *tier_init(struct fuse_conn_info *conn, struct fuse_config *cfg) {
    if (opts.max_background) {
        conn->max_background = opts.max_background;
        conn->congestion_threshold = opts.max_background * 3 / 4;
    }
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE | (conn->capable & FUSE_CAP_SPLICE_MOVE);
    cfg->use_ino = 1;
    cfg->entry_timeout = cfg->attr_timeout = 1.0;
    return NULL;
}

static const struct fuse_operations tier_ops = {
    .init = tier_init,
    .getattr = tier_getattr,
    .readdir = tier_readdir,
    .open = tier_open,
    .create = tier_create,
    .read_buf = tier_read_buf,
    .write = tier_write,
    .release = tier_release,
    .fsync = tier_fsync,
    .statfs = tier_statfs,
    .mkdir = tier_mkdir,
    .unlink = tier_unlink,
    .rmdir = tier_rmdir,
    .rename = tier_rename,
    .truncate = tier_truncate,
    .utimens = tier_utimens,
    .chmod = tier_chmod,
};

int main(int argc, char *argv[]) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    opts.client_cache = 1;
    if (fuse_opt_parse(&args, &opts, option_spec, NULL) != 0) return 2;
    /* The first non-option argument is the source; fuse_main takes the mount point. */
    for (int i = 1; i < args.argc; i++) {
        if (args.argv[i][0] != '-' && (i == 1 || strcmp(args.argv[i - 1], "-o") != 0)) {
            opts.source = realpath(args.argv[i], NULL);
            if (!opts.source) {
                fprintf(stderr, "tierfs: source %s: %s\n", args.argv[i], strerror(errno));
                return 2;
            }
            for (int j = i; j + 1 < args.argc; j++) args.argv[j] = args.argv[j + 1];
            args.argc--;
            break;
        }
    }
    if (!opts.source) {
        fprintf(stderr, "usage: tierfs SOURCE MOUNTPOINT -o latency_us=N,bandwidth=BYTES_PER_S [-f]\n");
        return 2;
    }
    int rc = fuse_main(args.argc, args.argv, &tier_ops, NULL);
    fuse_opt_free_args(&args);
    free(opts.source);
    return rc;
}
