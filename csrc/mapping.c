/* How cheaply a file mapping maps its pages: a probe of the page-cache state. */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"

#define REGION ((uint64_t)2 << 20) /* a huge page */
#define STRIDE ((uint64_t)1 << 20) /* past any fault-around window of small pages */

static long faults_so_far(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        return -1;
    return ru.ru_minflt + ru.ru_majflt;
}

/* Both pages at base + a and base + b are in the page cache (no I/O to touch them). */
static int resident(const uint8_t *base, uint64_t a, uint64_t b)
{
    unsigned char in_a = 0, in_b = 0;
    long page = sysconf(_SC_PAGESIZE);

    if (page <= 0 || mincore((void *)(base + a), (size_t)page, &in_a) != 0 ||
        mincore((void *)(base + b), (size_t)page, &in_b) != 0)
        return 0;
    return (in_a & 1) && (in_b & 1);
}

int hpcio_map_probe(const uint8_t *base, uint64_t size, int regions, int *probed)
{
    int cheap = 0;
    uint64_t nregions = size / REGION;

    *probed = 0;
    if (nregions == 0 || regions <= 0)
        return 0;
    for (int r = 0; r < regions; r++) {
        /* evenly spread whole regions, each probed at its start and 1 MiB in */
        uint64_t a = ((uint64_t)r * nregions / (uint64_t)regions) * REGION;
        uint64_t b = a + STRIDE;
        volatile const uint8_t *p = base;
        long before, after;

        if (r > 0 && a == ((uint64_t)(r - 1) * nregions / (uint64_t)regions) * REGION)
            continue; /* fewer regions than probes */
        if (!resident(base, a, b))
            continue;
        (void)p[a];
        before = faults_so_far();
        (void)p[b];
        after = faults_so_far();
        if (before < 0 || after < 0)
            return cheap;
        (*probed)++;
        cheap += after == before;
    }
    return cheap;
}

/* Pages asked about per mincore call: the answer vector stays on the stack. */
#define RESIDENT_CHUNK 4096

int64_t hpcio_map_resident(const uint8_t *base, uint64_t size)
{
    unsigned char vec[RESIDENT_CHUNK];
    long page = sysconf(_SC_PAGESIZE);
    uint64_t cached = 0, step;

    if (page <= 0)
        return -1;
    step = (uint64_t)page * RESIDENT_CHUNK;
    for (uint64_t at = 0; at < size; at += step) {
        uint64_t len = size - at < step ? size - at : step;
        size_t pages = (size_t)((len + (uint64_t)page - 1) / (uint64_t)page);

        if (mincore((void *)(base + at), (size_t)len, vec) != 0)
            return -1;
        for (size_t p = 0; p < pages; p++)
            cached += vec[p] & 1;
    }
    cached *= (uint64_t)page;
    return (int64_t)(cached < size ? cached : size);
}
