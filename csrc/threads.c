/* A small parallel-for over items for batch decoding: no pool, threads live for one call
 * (batches are large enough that creating a few threads is negligible). */
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

typedef struct {
    size_t m;
    size_t next;         /* next item to claim (atomic) */
    size_t first_failed; /* lowest failing item so far, m if none (under lock) */
    size_t done;         /* items processed (atomic) */
    pthread_mutex_t lock;
    hpcio_status status;
    hpcio_error err;
    void *(*ctx_new)(void);
    void (*ctx_free)(void *);
    hpcio_task_fn task;
    void *shared;
} loop_state;

static void record_failure(loop_state *s, size_t j, hpcio_status st, const hpcio_error *e)
{
    pthread_mutex_lock(&s->lock);
    if (j < s->first_failed) {
        s->first_failed = j;
        s->status = st;
        s->err = *e;
    }
    pthread_mutex_unlock(&s->lock);
}

static size_t first_failed(loop_state *s)
{
    size_t f;
    pthread_mutex_lock(&s->lock);
    f = s->first_failed;
    pthread_mutex_unlock(&s->lock);
    return f;
}

static void *worker(void *arg)
{
    loop_state *s = arg;
    hpcio_error e;
    void *ctx = NULL;

    hpcio_error_clear(&e);
    if (s->ctx_new != NULL) {
        ctx = s->ctx_new();
        /* Other threads may still do all the work; the caller sees NOMEM only if
         * items are left undone. */
        if (ctx == NULL)
            return NULL;
    }
    for (;;) {
        size_t j = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
        hpcio_status st;

        /* Items are claimed in order, so every item below the final lowest failure
         * was claimed by some thread and is processed. */
        if (j >= s->m || j > first_failed(s))
            break;
        hpcio_error_clear(&e);
        st = s->task(s->shared, ctx, j, &e);
        if (st != HPCIO_OK)
            record_failure(s, j, st, &e);
        __atomic_fetch_add(&s->done, 1, __ATOMIC_RELAXED);
    }
    if (ctx != NULL)
        s->ctx_free(ctx);
    return NULL;
}

hpcio_status hpcio_parallel_for(size_t m, int nthreads, void *(*ctx_new)(void),
                                void (*ctx_free)(void *), hpcio_task_fn task,
                                void *shared, hpcio_error *err)
{
    loop_state s;
    pthread_t *threads = NULL;
    int nspawned = 0;

    assert(task != NULL && (ctx_new == NULL) == (ctx_free == NULL));
    if (m == 0)
        return HPCIO_OK;
    if (nthreads < 1)
        nthreads = 1;
    if ((size_t)nthreads > m)
        nthreads = (int)m;

    s.m = m;
    s.next = 0;
    s.done = 0;
    s.first_failed = m;
    s.status = HPCIO_OK;
    hpcio_error_clear(&s.err);
    s.ctx_new = ctx_new;
    s.ctx_free = ctx_free;
    s.task = task;
    s.shared = shared;
    if (pthread_mutex_init(&s.lock, NULL) != 0)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot create a mutex");

    if (nthreads > 1) {
        threads = malloc(sizeof *threads * (size_t)(nthreads - 1));
        /* Without thread storage or on pthread_create failure the calling thread
         * still processes everything: fewer threads, same result. */
        for (int t = 0; threads != NULL && t < nthreads - 1; t++) {
            if (pthread_create(&threads[t], NULL, worker, &s) != 0)
                break;
            nspawned++;
        }
    }
    worker(&s);
    for (int t = 0; t < nspawned; t++)
        pthread_join(threads[t], NULL);
    free(threads);
    pthread_mutex_destroy(&s.lock);

    if (s.first_failed < m) {
        *err = s.err;
        return s.status;
    }
    if (s.done < m)
        return hpcio_fail(err, HPCIO_E_NOMEM, -1, -1, "cannot allocate a decoder context");
    return HPCIO_OK;
}
