/*
 * threadpool.h -- a fixed pool of worker threads for the compute graph.
 *
 * Owns: worker threads and the dispatch of one parallel section at a time.
 * A section runs fn(ctx, ith, nth) on every thread (the caller is thread 0)
 * and returns when all are done.  Workers spin briefly between sections
 * (decode issues thousands of microsecond-long sections per token, so waking
 * sleeping threads would dominate) and then sleep on a condition variable.
 * Must not: know about tensors; allocate per section.
 */
#ifndef DS4_THREADPOOL_H
#define DS4_THREADPOOL_H

typedef struct ds4_pool ds4_pool;
typedef void (*ds4_task_fn)(void *ctx, int ith, int nth);

ds4_pool *ds4_pool_new(int n_threads);   /* n_threads >= 1 (caller included) */
void ds4_pool_free(ds4_pool *p);
int ds4_pool_size(const ds4_pool *p);
void ds4_pool_run(ds4_pool *p, ds4_task_fn fn, void *ctx);

/* Static split of [0, n) into nth nearly equal ranges: range of thread ith. */
static inline void ds4_split(long n, int ith, int nth, long *lo, long *hi) {
    long q = n / nth, r = n % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

#endif
