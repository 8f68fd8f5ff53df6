/*
 * dispatch.c -- choosing a kernel table (quant.h): by name (DS4_KERNELS,
 * --kernels, the tests' and benches' comparisons) or the best one this CPU
 * runs.
 *
 * Owns: the order of preference amx > avx512 > avx2 > scalar and the
 * cached choice.  Must not: compute anything.  Kept out of quant.c because
 * it names every SIMD table (quant_*.c) while those use quant.c's format
 * data and scalar kernels: in one file the two would call each other.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"

const ds4_kernels *ds4_kernels_by_name(const char *name)
{
    if (!name) return NULL;
    if (strcmp(name, "scalar") == 0) return ds4_kernels_scalar();
    if (strcmp(name, "avx2") == 0) return ds4_kernels_avx2();
    if (strcmp(name, "avx512") == 0) return ds4_kernels_avx512();
    if (strcmp(name, "avx512-packed") == 0) return ds4_kernels_avx512_packed();
    if (strcmp(name, "amx") == 0) return ds4_kernels_amx();
    if (strcmp(name, "best") == 0) return ds4_kernels_best();
    return NULL;
}

const ds4_kernels *ds4_kernels_best(void)
{
    /* Cached after the first call; racing first calls compute the same
     * answer, so a relaxed atomic is enough. */
    static _Atomic(const ds4_kernels *) best;
    const ds4_kernels *k = atomic_load_explicit(&best, memory_order_relaxed);
    if (k)
        return k;
    /* DS4_KERNELS names any table of ds4_kernels_by_name; the engine
     * refuses a name that is unknown or unavailable here before calling
     * this (engine.c), so the fallback below only serves other callers. */
    const char *env = getenv("DS4_KERNELS");
    if (env && *env && strcmp(env, "best") != 0)
        k = ds4_kernels_by_name(env);
    if (!k)
        k = ds4_kernels_amx();
    if (!k)
        k = ds4_kernels_avx512();
    if (!k)
        k = ds4_kernels_avx2();
    if (!k)
        k = ds4_kernels_scalar();
    atomic_store_explicit(&best, k, memory_order_relaxed);
    return k;
}
