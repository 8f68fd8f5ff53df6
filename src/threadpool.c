/*
 * threadpool.c -- see threadpool.h.
 *
 * Dispatch protocol: the caller publishes (fn, ctx), bumps `gen`, runs its
 * own share, then waits until `done` reaches nth-1.  Workers watch `gen`:
 * spinning with a pause instruction for a bounded number of iterations
 * before falling back to the condition variable, so back-to-back sections
 * cost well under a microsecond while an idle engine uses no CPU.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "threadpool.h"

#define SPIN_ITERS 200000

typedef struct {
    ds4_pool *pool;
    int ith;
    pthread_t th;
} worker;

struct ds4_pool {
    int nth;
    worker *w;
    ds4_task_fn fn;
    void *ctx;
    _Atomic unsigned gen;
    _Atomic int done;
    _Atomic int sleepers;
    _Atomic int quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg) {
    worker *w = arg;
    ds4_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->quit, memory_order_relaxed)) return NULL;
            if (++spins < SPIN_ITERS) { cpu_relax(); continue; }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        p->fn(p->ctx, w->ith, p->nth);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

int ds4_ncpu(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

ds4_pool *ds4_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    ds4_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nth = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->w = calloc((size_t)n_threads, sizeof *p->w);
    if (!p->w) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        p->w[i].pool = p;
        p->w[i].ith = i;
        if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]) != 0) {
            p->nth = i;   /* run with the threads we got */
            break;
        }
    }
    return p;
}

int ds4_pool_size(const ds4_pool *p) { return p->nth; }

void ds4_pool_run(ds4_pool *p, ds4_task_fn fn, void *ctx) {
    if (p->nth == 1) { fn(ctx, 0, 1); return; }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    /* seq_cst: pairs with the sleepers/gen check in worker_main */
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->nth);
    while (atomic_load_explicit(&p->done, memory_order_acquire) != p->nth - 1)
        cpu_relax();
}

void ds4_pool_free(ds4_pool *p) {
    if (!p) return;
    atomic_store(&p->quit, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->nth; i++) pthread_join(p->w[i].th, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->w);
    free(p);
}
