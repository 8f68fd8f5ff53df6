/*
 * threadpool.c -- see threadpool.h.
 *
 * Dispatch protocol: the caller publishes (fn, ctx), bumps `gen`, runs its
 * own share, then waits until `done` reaches nth-1.  Workers watch `gen`.
 *
 * Waiting is in three stages, by elapsed time rather than by iteration
 * count (a `pause` costs anywhere from 10 to 140 cycles depending on the
 * core):
 *   1. spin with `pause` for SPIN_NS: back-to-back sections (decode issues
 *      thousands per token, microseconds apart) then cost well under a
 *      microsecond to hand over;
 *   2. spin with sched_yield() until YIELD_NS: if the machine is
 *      oversubscribed (other processes, more threads than free cores), the
 *      thread we wait for may be runnable but not running -- yielding gives
 *      it this core instead of burning the time slice it needs;
 *   3. workers then sleep on the condition variable, so an idle engine uses
 *      no CPU.  The caller never sleeps: a section is short.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"   /* ds4_default_threads, ds4_thread_attr */
#include "kernels/threadpool.h"

#define SPIN_NS 50000        /* 50 us of pause-spinning */
#define YIELD_NS 2000000     /* then yield until 2 ms, then sleep (workers) */
#define CHECK_EVERY 64       /* pause iterations between clock reads */

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

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin/yield waiter state: call wait_step() in a loop while the condition
 * is false; it returns 0 once the wait has passed `limit_ns` (-1: never). */
typedef struct {
    int64_t t0;
    unsigned n;
} waiter;

static inline int wait_step(waiter *w, int64_t limit_ns) {
    if (++w->n % CHECK_EVERY) {
        cpu_relax();
        return 1;
    }
    int64_t t = now_ns();
    if (w->t0 == 0) { w->t0 = t; return 1; }
    int64_t el = t - w->t0;
    if (el < SPIN_NS) { cpu_relax(); return 1; }
    if (limit_ns >= 0 && el >= limit_ns) return 0;
    sched_yield();
    return 1;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    ds4_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        waiter wt = { 0, 0 };
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->quit, memory_order_relaxed)) return NULL;
            if (wait_step(&wt, YIELD_NS)) continue;
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            wt.t0 = 0;
            wt.n = 0;
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        p->fn(p->ctx, w->ith, p->nth);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

/* ds4.h.  DS4_THREADS sets it for every program that takes its default
 * from here; otherwise the CPUs this process may run on (taskset, a
 * container's cpuset), not every online CPU of the machine: a pool larger
 * than its CPUs waits on descheduled threads at every section. */
int ds4_default_threads(void) {
    const char *e = getenv("DS4_THREADS");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end == 0 && v >= 1 && v <= 4096) return (int)v;
        static _Atomic int warned;
        if (!atomic_exchange(&warned, 1))
            fprintf(stderr, "ds4: DS4_THREADS='%s' is not a thread count (1-4096); ignored\n", e);
    }
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int ds4_thread_attr(pthread_attr_t *attr) {
    int e = pthread_attr_init(attr);
    if (e) return e;
    size_t sz = 0;
    if (pthread_attr_getstacksize(attr, &sz) == 0 && sz < DS4_THREAD_STACK_MIN)
        e = pthread_attr_setstacksize(attr, DS4_THREAD_STACK_MIN);
    if (e) pthread_attr_destroy(attr);
    return e;
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
    pthread_attr_t attr;   /* the kernels' stack (ds4.h) */
    const int have_attr = n_threads > 1 && ds4_thread_attr(&attr) == 0;
    for (int i = 1; i < n_threads; i++) {
        p->w[i].pool = p;
        p->w[i].ith = i;
        if (pthread_create(&p->w[i].th, have_attr ? &attr : NULL, worker_main, &p->w[i]) != 0) {
            p->nth = i;   /* run with the threads we got */
            break;
        }
    }
    if (have_attr) pthread_attr_destroy(&attr);
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
    waiter wt = { 0, 0 };
    while (atomic_load_explicit(&p->done, memory_order_acquire) != p->nth - 1)
        wait_step(&wt, -1);
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
