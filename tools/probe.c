/*
 * probe.c -- STREAM-style bandwidth and compute peaks of this machine (see
 * probe.h).  Each measurement runs the same loop on N persistent threads,
 * every pass started together behind a barrier and timed to the slowest
 * thread, and keeps the best of the passes: a bandwidth or a peak is what
 * the machine can do, so the ratios the benchmarks derive from them are
 * conservative.  The loops are built to saturate what they measure (read:
 * 64-byte loads, eight accumulators, a buffer far above the L3; peaks:
 * more independent accumulators than latency x ports, ~10-20 ms a pass;
 * AMX: four accumulator tiles of full-shape TDPBUSD), because a probe that
 * reads low makes every "% of roofline" above it overstate.
 */
#include "probe.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAXTHR 256

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------- */
/* running one function on N persistent threads                            */
/* ---------------------------------------------------------------------- */

/* Runs fn on nth threads (the caller is thread 0) 1 + reps times: one
 * warm-up pass, then reps timed passes, every pass started together
 * behind a barrier and timed from its start to the last thread's end.  The
 * threads persist over the passes (no thread start or join inside a
 * timing).  Returns the best (shortest) pass time, or -1 when the threads
 * cannot be started. */
typedef struct {
    void (*fn)(void *ctx, int ith, int nth);
    void *ctx;
    int nth, reps;
    int cpu_clock;       /* time each thread's own CPU time, not the wall */
    _Atomic int state;   /* 0 wait, 1 go, 2 abort (a thread failed to start) */
    pthread_barrier_t bar;
    double t0, best;
    double cpu[MAXTHR];
} pteam;

typedef struct { pteam *t; int ith; } pmember;

static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pteam_loop(pteam *t, int ith) {
    for (int r = 0; r <= t->reps; r++) {
        pthread_barrier_wait(&t->bar);
        if (ith == 0) t->t0 = now();
        pthread_barrier_wait(&t->bar);
        double c0 = t->cpu_clock ? thread_cpu() : 0;
        t->fn(t->ctx, ith, t->nth);
        if (t->cpu_clock) t->cpu[ith] = thread_cpu() - c0;
        pthread_barrier_wait(&t->bar);
        if (ith == 0 && r > 0) {
            double dt = now() - t->t0;
            if (t->cpu_clock) {   /* the slowest thread's own busy time */
                dt = 0;
                for (int i = 0; i < t->nth; i++) if (t->cpu[i] > dt) dt = t->cpu[i];
            }
            if (t->best == 0 || dt < t->best) t->best = dt;
        }
    }
}

static void *pmember_main(void *p) {
    pmember *m = p;
    int st;
    while ((st = atomic_load(&m->t->state)) == 0) sched_yield();
    if (st == 1) pteam_loop(m->t, m->ith);
    return NULL;
}

static double best_time_clock(void (*fn)(void *, int, int), void *ctx, int nth, int reps, int cpu_clock) {
    if (nth < 1) nth = 1;
    if (nth > MAXTHR) nth = MAXTHR;
    if (reps < 1) reps = 1;
    pteam t = { .fn = fn, .ctx = ctx, .nth = nth, .reps = reps, .cpu_clock = cpu_clock };
    if (pthread_barrier_init(&t.bar, NULL, (unsigned)nth)) return -1;
    pthread_t th[MAXTHR];
    pmember mb[MAXTHR];
    int started = 1;
    for (int i = 1; i < nth; i++) {
        mb[i] = (pmember){ &t, i };
        if (pthread_create(&th[i], NULL, pmember_main, &mb[i])) break;
        started++;
    }
    atomic_store(&t.state, started == nth ? 1 : 2);
    if (started == nth) pteam_loop(&t, 0);
    for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&t.bar);
    return started == nth && t.best > 0 ? t.best : -1;
}

/* wall time: bandwidth (the memory system is what is measured, shared or
 * not) */
static double best_time(void (*fn)(void *, int, int), void *ctx, int nth, int reps) {
    return best_time_clock(fn, ctx, nth, reps, 0);
}

/* one pass of fn on nth fresh threads (probe_read_buffer) */
static double run_team(void (*fn)(void *, int, int), void *ctx, int nth) {
    return best_time(fn, ctx, nth, 1);
}

static void split(long n, int ith, int nth, long *lo, long *hi) {
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

/* ---------------------------------------------------------------------- */
/* STREAM-style bandwidth                                                  */
/* ---------------------------------------------------------------------- */

typedef struct {
    float *a, *b, *c;
    size_t n;
    volatile double sink[MAXTHR];
} stream_job;

#if defined(__x86_64__)
/* The read probe: each thread sums its contiguous slice with 64-byte
 * loads (zmm, or two ymm without AVX-512) into eight independent
 * accumulators, so that neither the load ports nor the add latency limit
 * it before the memory system does. */
__attribute__((target("avx512f")))
static void read_task512(void *ctx, int ith, int nth) {
    stream_job *j = ctx;
    long lo, hi;
    split((long)(j->n / 128), ith, nth, &lo, &hi);
    const float *p = j->a;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (long i = lo * 128; i < hi * 128; i += 128) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + i));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + i + 32));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + i + 48));
        s4 = _mm512_add_ps(s4, _mm512_loadu_ps(p + i + 64));
        s5 = _mm512_add_ps(s5, _mm512_loadu_ps(p + i + 80));
        s6 = _mm512_add_ps(s6, _mm512_loadu_ps(p + i + 96));
        s7 = _mm512_add_ps(s7, _mm512_loadu_ps(p + i + 112));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)),
                             _mm512_add_ps(_mm512_add_ps(s4, s5), _mm512_add_ps(s6, s7)));
    j->sink[ith] = _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma")))
static void read_task256(void *ctx, int ith, int nth) {
    stream_job *j = ctx;
    long lo, hi;
    split((long)(j->n / 128), ith, nth, &lo, &hi);
    const float *p = j->a;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
    for (long i = lo * 128; i < hi * 128; i += 64) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
        s4 = _mm256_add_ps(s4, _mm256_loadu_ps(p + i + 32));
        s5 = _mm256_add_ps(s5, _mm256_loadu_ps(p + i + 40));
        s6 = _mm256_add_ps(s6, _mm256_loadu_ps(p + i + 48));
        s7 = _mm256_add_ps(s7, _mm256_loadu_ps(p + i + 56));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                             _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
    float t[8];
    _mm256_storeu_ps(t, s);
    j->sink[ith] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

static void read_task(void *ctx, int ith, int nth) {
    if (__builtin_cpu_supports("avx512f")) read_task512(ctx, ith, nth);
    else read_task256(ctx, ith, nth);
}
#else
static void read_task(void *ctx, int ith, int nth) {
    stream_job *j = ctx;
    long lo, hi;
    split((long)j->n, ith, nth, &lo, &hi);
    float s = 0;
    for (long i = lo; i < hi; i++) s += j->a[i];
    j->sink[ith] = s;
}
#endif

static void triad_task(void *ctx, int ith, int nth) {
    stream_job *j = ctx;
    long lo, hi;
    split((long)j->n, ith, nth, &lo, &hi);
    float *a = j->a;
    const float *b = j->b, *c = j->c;
    const float s = 3.0f;
    for (long i = lo; i < hi; i++) a[i] = b[i] + s * c[i];
}

double probe_read_buffer(const void *p, size_t bytes, int nthreads) {
    stream_job *j = calloc(1, sizeof *j);
    if (!j) return 0;
    j->a = (float *)p;
    j->n = bytes / sizeof(float) / 128 * 128;
    double t = run_team(read_task, j, nthreads);
    double gbs = t > 0 ? (double)j->n * sizeof(float) / t * 1e-9 : 0;
    free(j);
    return gbs;
}

size_t probe_read_size(void) {
    size_t want = (size_t)2 << 30, avail = 0;
    FILE *fp = fopen("/proc/meminfo", "r");
    if (fp) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, fp))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (size_t)kb * 1024;
                break;
            }
        fclose(fp);
    }
    if (avail && avail / 4 < want) want = avail / 4;
    if (want < ((size_t)256 << 20)) want = (size_t)256 << 20;
    return want;
}

void *probe_map(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

probe_stream_res probe_stream(size_t bytes, int nthreads, int reps) {
    probe_stream_res r = { 0, 0 };
    bytes = bytes / 4096 * 4096;
    if (bytes < (1u << 20)) return r;
    void *mem = probe_map(bytes);
    if (!mem) return r;
    stream_job *j = calloc(1, sizeof *j);
    if (!j) {
        munmap(mem, bytes);
        return r;
    }
    /* read: the whole array */
    j->a = mem;
    j->n = bytes / sizeof(float) / 128 * 128;
    for (size_t i = 0; i < j->n; i += 1024) j->a[i] = 1.0f;
    double t = best_time(read_task, j, nthreads, reps);
    if (t > 0) r.read_gbs = (double)j->n * sizeof(float) / t * 1e-9;
    /* triad: three arrays of a third each */
    size_t each = bytes / 3 / 64 * 64;
    j->n = each / sizeof(float);
    j->a = mem;
    j->b = (float *)((char *)mem + each);
    j->c = (float *)((char *)mem + 2 * each);
    for (size_t i = 0; i < j->n; i++) {
        j->b[i] = 1.0f;
        j->c[i] = 2.0f;
    }
    t = best_time(triad_task, j, nthreads, reps);
    if (t > 0) r.triad_gbs = 3.0 * (double)j->n * sizeof(float) / t * 1e-9;
    free(j);
    munmap(mem, bytes);
    return r;
}

/* ---------------------------------------------------------------------- */
/* compute peaks                                                           */
/* ---------------------------------------------------------------------- */

/* Iterations of the register-only loops: about 10 to 20 ms per pass, so
 * that timer, barrier and frequency-transition costs stay below 1 %. */
#define PEAK_ITERS 8000000
#define AMX_ITERS 1000000

typedef struct {
    int kind;
    volatile double sink[MAXTHR];
} peak_job;

static const char *KIND_NAMES[PROBE_NKIND] = {
    "int8 vpdpbusd zmm (avx512vnni)", "int8 vpdpbusd ymm (avx-vnni)",
    "int8 vpmaddubsw+vpmaddwd+vpaddd ymm (avx2)", "fp32 fma zmm (avx512f)", "fp32 fma ymm (avx2)",
    "int8 tdpbusd (amx-int8)"
};

const char *probe_kind_name(int kind) {
    return kind >= 0 && kind < PROBE_NKIND ? KIND_NAMES[kind] : "?";
}

#if defined(__x86_64__)
/* Twelve independent accumulators: more than latency x ports for each of
 * these instructions, so the loops run at the issue limit.  The empty asm
 * keeps the compiler from hoisting the products out of the loop. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static double peak_vnni512(void) {
    __m512i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
    __m512i a = _mm512_set1_epi32(0x01020304), b = _mm512_set1_epi32(0x05060708);
    for (long it = 0; it < PEAK_ITERS; it++) {
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512i s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, acc[i]);
    /* lanes summed as doubles: the counters wrap, and an int reduction
     * (_mm512_reduce_add_epi32) would be signed overflow (UBSan) */
    int t[16];
    _mm512_storeu_si512((void *)t, s);
    return (double)t[0] + (double)t[15];
}

__attribute__((target("avx2,avxvnni")))
static double peak_vnni256(void) {
    __m256i acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_epi32(i);
    __m256i a = _mm256_set1_epi32(0x01020304), b = _mm256_set1_epi32(0x05060708);
    for (long it = 0; it < PEAK_ITERS; it++) {
        for (int i = 0; i < 12; i++) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256i s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_epi32(s, acc[i]);
    int t[8];
    _mm256_storeu_si256((__m256i *)t, s);
    return (double)t[0] + (double)t[7];   /* no int overflow */
}

/* Six accumulators, each with its own unsigned operand: with a shared one
 * the compiler would compute the product once per iteration. */
__attribute__((target("avx2")))
static double peak_avx2_i8(void) {
    __m256i acc[6], a[6];
    for (int i = 0; i < 6; i++) {
        acc[i] = _mm256_set1_epi32(i);
        a[i] = _mm256_set1_epi32(0x01020304 + i);
    }
    __m256i b = _mm256_set1_epi32(0x05060708);
    const __m256i one = _mm256_set1_epi16(1);
    for (long it = 0; it < PEAK_ITERS; it++) {
        for (int i = 0; i < 6; i++)
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a[i], b), one));
        __asm__ volatile("" : "+x"(a[0]), "+x"(a[1]), "+x"(a[2]), "+x"(a[3]), "+x"(a[4]), "+x"(a[5]), "+x"(b));
    }
    __m256i s = acc[0];
    for (int i = 1; i < 6; i++) s = _mm256_add_epi32(s, acc[i]);
    int t[8];
    _mm256_storeu_si256((__m256i *)t, s);
    return (double)t[0] + (double)t[7];   /* no int overflow */
}

__attribute__((target("avx512f")))
static double peak_fma512(void) {
    __m512 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (long it = 0; it < PEAK_ITERS; it++) {
        for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
        __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, acc[i]);
    return (double)_mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma")))
static double peak_fma256(void) {
    __m256 acc[12];
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (long it = 0; it < PEAK_ITERS; it++) {
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
        __asm__ volatile("" : "+x"(a), "+x"(b));
    }
    __m256 s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    float t[8];
    _mm256_storeu_ps(t, s);
    return (double)t[0] + (double)t[7];   /* no int overflow */
}

/* AMX: four independent 16 x 16 int32 accumulator tiles (tmm0-3), each
 * TDPBUSD a 16 x 64 by 64 x 16 product of tmm4/5 and tmm6/7 (16384
 * multiply-adds), the unit's full shape.  The configuration is a const
 * object and the tile instructions are asm with a "memory" clobber: GCC 12
 * may drop the stores that fill a configuration block before an
 * intrinsic ldtilecfg. */
typedef struct {
    uint8_t palette, start_row, rsv[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} probe_tilecfg;

static const probe_tilecfg amx_peak_cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

static double peak_amx(void) {
    static const uint8_t src[1024] __attribute__((aligned(64))) = { 1, 2, 3, 4 };
    __asm__ volatile("ldtilecfg %0" ::"m"(amx_peak_cfg) : "memory");
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::: "memory");
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
                     "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7"
                     ::"r"(src), "r"(64L) : "memory");
    for (long it = 0; it < AMX_ITERS; it++)
        __asm__ volatile("tdpbusd %%tmm6, %%tmm4, %%tmm0\n\ttdpbusd %%tmm7, %%tmm4, %%tmm1\n\t"
                         "tdpbusd %%tmm6, %%tmm5, %%tmm2\n\ttdpbusd %%tmm7, %%tmm5, %%tmm3" ::: "memory");
    int32_t out[256] __attribute__((aligned(64)));
    __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(out), "r"(64L) : "memory");
    __asm__ volatile("tilerelease" ::: "memory");
    return (double)out[0];
}

/* The tile unit beside vector floating point (probe_amx_overlap): 64
 * independent fp32 multiplies a step (16 registers, four each: more than
 * latency x ports), alone or with one tile instruction issued per step --
 * a TDPBUSD on tmm0 (its operands loaded once) or a TILESTORED of tmm0 to
 * a 1 KiB buffer (what the exact Q8_0 tile does once per 32-element
 * block).  The multiplies never wait for the tile instruction, so any
 * slowdown is the core's: ports or power the two share. */
#define OVL_ITERS 400000
#define OVL_MUL4(w) "vmulps %%" w "16, %%" w "0, %%" w "0\n\tvmulps %%" w "16, %%" w "1, %%" w "1\n\t" \
    "vmulps %%" w "16, %%" w "2, %%" w "2\n\tvmulps %%" w "16, %%" w "3, %%" w "3\n\t" \
    "vmulps %%" w "16, %%" w "4, %%" w "4\n\tvmulps %%" w "16, %%" w "5, %%" w "5\n\t" \
    "vmulps %%" w "16, %%" w "6, %%" w "6\n\tvmulps %%" w "16, %%" w "7, %%" w "7\n\t" \
    "vmulps %%" w "16, %%" w "8, %%" w "8\n\tvmulps %%" w "16, %%" w "9, %%" w "9\n\t" \
    "vmulps %%" w "16, %%" w "10, %%" w "10\n\tvmulps %%" w "16, %%" w "11, %%" w "11\n\t" \
    "vmulps %%" w "16, %%" w "12, %%" w "12\n\tvmulps %%" w "16, %%" w "13, %%" w "13\n\t" \
    "vmulps %%" w "16, %%" w "14, %%" w "14\n\tvmulps %%" w "16, %%" w "15, %%" w "15\n\t"
#define OVL_STEP(w) OVL_MUL4(w) OVL_MUL4(w) OVL_MUL4(w) OVL_MUL4(w)
#define OVL_CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
    "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "memory"

/* one pass: wide 0 = ymm, 1 = zmm; tile 0 none, 1 TDPBUSD, 2 TILESTORED */
__attribute__((target("avx512f")))
static double ovl_pass(int wide, int tile) {
    static int32_t cbuf[256] __attribute__((aligned(64)));
    static const float one = 1.0f;
    __asm__ volatile("vbroadcastss %0, %%zmm16\n\t"
                     "vmovaps %%zmm16, %%zmm0\n\tvmovaps %%zmm16, %%zmm1\n\tvmovaps %%zmm16, %%zmm2\n\t"
                     "vmovaps %%zmm16, %%zmm3\n\tvmovaps %%zmm16, %%zmm4\n\tvmovaps %%zmm16, %%zmm5\n\t"
                     "vmovaps %%zmm16, %%zmm6\n\tvmovaps %%zmm16, %%zmm7\n\tvmovaps %%zmm16, %%zmm8\n\t"
                     "vmovaps %%zmm16, %%zmm9\n\tvmovaps %%zmm16, %%zmm10\n\tvmovaps %%zmm16, %%zmm11\n\t"
                     "vmovaps %%zmm16, %%zmm12\n\tvmovaps %%zmm16, %%zmm13\n\tvmovaps %%zmm16, %%zmm14\n\t"
                     "vmovaps %%zmm16, %%zmm15" ::"m"(one) : OVL_CLOBBER);
    const double c0 = thread_cpu();
    for (long it = 0; it < OVL_ITERS; it++) {
        if (tile == 1) __asm__ volatile("tdpbusd %%tmm6, %%tmm4, %%tmm0" ::: "memory");
        if (tile == 2) __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(cbuf), "r"(64L) : "memory");
        if (wide) __asm__ volatile(OVL_STEP("zmm") ::: OVL_CLOBBER);
        else __asm__ volatile(OVL_STEP("ymm") ::: OVL_CLOBBER);
    }
    const double t = thread_cpu() - c0;
    __asm__ volatile("vzeroupper" ::: "memory");
    return t;
}

static int amx_usable(void);

probe_amx_share probe_amx_overlap(int reps) {
    probe_amx_share r = { 0, 0, 0, 0 };
    if (!amx_usable() || !__builtin_cpu_supports("avx512f")) return r;
    static const uint8_t src[1024] __attribute__((aligned(64))) = { 1, 2, 3, 4 };
    __asm__ volatile("ldtilecfg %0" ::"m"(amx_peak_cfg) : "memory");
    __asm__ volatile("tilezero %%tmm0\n\ttileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm6"
                     ::"r"(src), "r"(64L) : "memory");
    if (reps < 1) reps = 1;
    double best[2][3] = { { 0 } };
    for (int rep = 0; rep <= reps; rep++)   /* the first round warms up */
        for (int wide = 0; wide < 2; wide++)
            for (int tile = 0; tile < 3; tile++) {
                const double t = ovl_pass(wide, tile);
                if (rep > 0 && t > 0 && (best[wide][tile] == 0 || t < best[wide][tile])) best[wide][tile] = t;
            }
    __asm__ volatile("tilerelease" ::: "memory");
    if (best[1][1] > 0) r.zmm_tdp = best[1][0] / best[1][1];
    if (best[1][2] > 0) r.zmm_store = best[1][0] / best[1][2];
    if (best[0][1] > 0) r.ymm_tdp = best[0][0] / best[0][1];
    if (best[0][2] > 0) r.ymm_store = best[0][0] / best[0][2];
    return r;
}

/* CPUID.(7,0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), and the Linux
 * permission for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA = 18), asked once. */
static int amx_usable(void) {
    static int state = -1;
    if (state >= 0) return state;
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    state = ((d >> 24) & 1) && ((d >> 25) & 1) && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    return state;
}

int probe_kind_supported(int kind) {
    __builtin_cpu_init();
    switch (kind) {
    case PROBE_VNNI512: return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
    case PROBE_VNNI256: {
        unsigned a, b, c, d;   /* CPUID.(7,1):EAX bit 4 = AVX-VNNI */
        __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
        return __builtin_cpu_supports("avx2") && ((a >> 4) & 1);
    }
    case PROBE_AVX2_I8: return __builtin_cpu_supports("avx2");
    case PROBE_FMA512: return __builtin_cpu_supports("avx512f");
    case PROBE_FMA256: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PROBE_AMX_INT8: return amx_usable();
    }
    return 0;
}

/* operations (2 per multiply-add) of one call on one thread */
static double kind_ops(int kind) {
    switch (kind) {
    case PROBE_VNNI512: return 2.0 * 64 * 12 * PEAK_ITERS;
    case PROBE_VNNI256: return 2.0 * 32 * 12 * PEAK_ITERS;
    case PROBE_AVX2_I8: return 2.0 * 32 * 6 * PEAK_ITERS;
    case PROBE_FMA512: return 2.0 * 16 * 12 * PEAK_ITERS;
    case PROBE_FMA256: return 2.0 * 8 * 12 * PEAK_ITERS;
    case PROBE_AMX_INT8: return 2.0 * 16 * 16 * 64 * 4 * AMX_ITERS;
    }
    return 0;
}

static void peak_task(void *ctx, int ith, int nth) {
    (void)nth;
    peak_job *j = ctx;
    double s = 0;
    switch (j->kind) {
    case PROBE_VNNI512: s = peak_vnni512(); break;
    case PROBE_VNNI256: s = peak_vnni256(); break;
    case PROBE_AVX2_I8: s = peak_avx2_i8(); break;
    case PROBE_FMA512: s = peak_fma512(); break;
    case PROBE_FMA256: s = peak_fma256(); break;
    case PROBE_AMX_INT8: s = peak_amx(); break;
    }
    j->sink[ith] = s;
}
#else
probe_amx_share probe_amx_overlap(int reps) { (void)reps; return (probe_amx_share){ 0, 0, 0, 0 }; }
int probe_kind_supported(int kind) { (void)kind; return 0; }
static double kind_ops(int kind) { (void)kind; return 0; }
static void peak_task(void *ctx, int ith, int nth) { (void)ctx; (void)ith; (void)nth; }
#endif

double probe_peak(int kind, int nthreads, int reps) {
    if (!probe_kind_supported(kind)) return 0;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > MAXTHR) nthreads = MAXTHR;
    peak_job *j = calloc(1, sizeof *j);
    if (!j) return 0;
    j->kind = kind;
    /* a peak is what the unit does while the thread runs: timed on each
     * thread's own CPU clock, so other jobs on a shared machine (which
     * take the core away, not the unit's speed) do not lower it; then
     * kernels timed on the wall clock can only look worse against it */
    double t = best_time_clock(peak_task, j, nthreads, reps, 1);
    free(j);
    return t > 0 ? kind_ops(kind) * nthreads / t * 1e-9 : 0;
}

double probe_int8_peak(int nthreads, int reps, int *kind) {
    double best = 0;
    int bk = -1;
    for (int k = PROBE_VNNI512; k <= PROBE_AVX2_I8; k++) {
        if (!probe_kind_supported(k)) continue;
        double p = probe_peak(k, nthreads, reps);
        if (p > best) {
            best = p;
            bk = k;
        }
    }
    if (kind) *kind = bk;
    return best;
}
