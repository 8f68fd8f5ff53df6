/*
 * cpu_ops.c -- see cpu_ops.h.
 */
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "engine/profile.h"
#include "gguf/gguf.h"

mat_t mat_of(const ds4_tensor *t) {
    mat_t m = { t->data, t->type, (int)t->ne[0], (int)t->ne[1], t->row_bytes, t->q8_sym };
    return m;
}

mat_t mat_expert(const ds4_tensor *t, int e) {
    mat_t m = mat_of(t);
    /* a part of an experts split holds experts [e0, e0 + ne[2]) only;
     * --dist experts asks for those alone (engine/transport.h: expert_range) */
    m.w += (size_t)(e - t->e0) * (size_t)t->ne[1] * t->row_bytes;
    return m;
}

mat_t mat_rows(mat_t m, int r0, int n) {
    m.w += (size_t)r0 * m.row_bytes;
    m.n_out = n;
    return m;
}

act_kind act_kind_for(uint32_t wtype, int no_qat) {
    if (no_qat) return ACT_F32;
    switch (wtype) {
    case GGML_Q8_0: case GGML_MXFP4: return ACT_Q8_0A;   /* ggml pairs MXFP4 with Q8_0 */
    case GGML_Q2_K: case GGML_Q3_K: case GGML_Q4_K: case GGML_Q5_K: case GGML_Q6_K:
    case GGML_IQ2_XXS: case GGML_IQ4_XS: return ACT_Q8_K;
    default: return ACT_F32;
    }
}

int act_block_elems(act_kind k) {
    return k == ACT_Q8_0A ? QK8_0 : k == ACT_Q8_K ? QK_K : 1;
}

size_t act_row_bytes(act_kind k, int n) {
    const size_t blocks = (size_t)(n / act_block_elems(k));
    switch (k) {
    case ACT_Q8_0A: return blocks * sizeof(block_q8_0a);
    case ACT_Q8_K: return blocks * sizeof(block_q8_K);
    default: return blocks * sizeof(float);
    }
}

/* Activation quantization: the kernel table's quantizers (scalar, or the
 * avx512 table's, which give the same bytes: src/kernels/quant_vnni.c). */
void act_quantize_row(const ds4_kernels *k, act_kind kind, const float *x, int n, void *out) {
    switch (kind) {
    case ACT_Q8_0A: k->quantize_q8_0a(x, out, n); break;
    case ACT_Q8_K: k->quantize_q8_K(x, out, n); break;
    default: memcpy(out, x, (size_t)n * sizeof(float)); break;
    }
}

/* ---------------------------------------------------------------------- */
/* Grouped matmul                                                          */
/* ---------------------------------------------------------------------- */

typedef float (*dotq_fn)(int n, const void *w, const void *a);
typedef float (*dotf_fn)(int n, const void *w, const float *x);

static dotq_fn pick_q(const ds4_kernels *k, uint32_t type, act_kind kind) {
    if (kind == ACT_Q8_0A && type == GGML_Q8_0) return k->q8_0_q8_0a;
    if (kind == ACT_Q8_0A && type == GGML_MXFP4) return k->mxfp4_q8_0a;
    if (kind == ACT_Q8_K) {
        if (type == GGML_Q2_K) return k->q2_K_q8_K;
        if (type == GGML_Q4_K) return k->q4_K_q8_K;
        if (type == GGML_IQ2_XXS) return k->iq2_xxs_q8_K;
        if (type == GGML_Q3_K) return k->q3_K_q8_K;
        if (type == GGML_Q5_K) return k->q5_K_q8_K;
        if (type == GGML_Q6_K) return k->q6_K_q8_K;
        if (type == GGML_IQ4_XS) return k->iq4_xs_q8_K;
    }
    return NULL;
}

static dotf_fn pick_f(const ds4_kernels *k, uint32_t type) {
    switch (type) {
    case GGML_F32: return k->f32_f32;
    case GGML_F16: return k->f16_f32;
    case GGML_BF16: return k->bf16_f32;
    case GGML_Q8_0: return k->q8_0_f32;
    case GGML_Q2_K: return k->q2_K_f32;
    case GGML_Q4_K: return k->q4_K_f32;
    case GGML_IQ2_XXS: return k->iq2_xxs_f32;
    case GGML_Q3_K: return k->q3_K_f32;
    case GGML_Q5_K: return k->q5_K_f32;
    case GGML_Q6_K: return k->q6_K_f32;
    case GGML_IQ4_XS: return k->iq4_xs_f32;
    case GGML_MXFP4: return k->mxfp4_f32;
    }
    return NULL;
}

static ds4_tile_fn pick_tile(const ds4_kernels *k, mat_t W, act_kind kind) {
    const uint32_t type = W.type;
    if (kind == ACT_Q8_0A && type == GGML_Q8_0)
        return W.sym && k->q8_0_q8_0a_tile_sym ? k->q8_0_q8_0a_tile_sym : k->q8_0_q8_0a_tile;
    if (kind == ACT_Q8_0A && type == GGML_MXFP4) return k->mxfp4_q8_0a_tile;
    if (kind == ACT_Q8_K) {
        if (type == GGML_Q2_K) return k->q2_K_q8_K_tile;
        if (type == GGML_Q4_K) return k->q4_K_q8_K_tile;
        if (type == GGML_IQ2_XXS) return k->iq2_xxs_q8_K_tile;
        if (type == GGML_Q3_K) return k->q3_K_q8_K_tile;
        if (type == GGML_Q5_K) return k->q5_K_q8_K_tile;
        if (type == GGML_Q6_K) return k->q6_K_q8_K_tile;
        if (type == GGML_IQ4_XS) return k->iq4_xs_q8_K_tile;
    }
    if (kind == ACT_F32) {
        if (type == GGML_F32) return k->f32_f32_tile;
        if (type == GGML_F16) return k->f16_f32_tile;
    }
    return NULL;
}

/* Work is split in strips of STRIP rows: the packed integer tiles work on
 * 16 rows at a time, so a strip boundary never splits one of their blocks
 * between threads, and each thread streams its own contiguous rows. */
#define STRIP 16
/* Cost of a row: its tokens plus the weight streaming / packing that every
 * row pays once whatever the batch (about four tokens' worth of work). */
#define ROW_FIXED 4.0
/* Fewer multiply-adds than this run on the calling thread alone. */
#define MIN_PARALLEL_MACS (1 << 20)
#define AP_MAX 256

/* A thread's range of chunks: front (low 32 bits) and back (high 32). */
typedef struct {
    _Atomic long long fb;
    char pad[64 - sizeof(long long)];
} mm_range;

#define MM_MAXRANGE 64
#define MM_PROF_THREADS 512   /* DS4_PROFILE idle accounting up to this many threads */

typedef struct {
    const cpu_ctx *c;
    const mm_group *g;
    int ng;
    double total;
    const double *start;   /* cost prefix per group */
    double chunk;          /* cost of one work chunk */
    long nchunk;
    _Atomic long next;     /* next chunk to take (shared counter) */
    int tok_split;         /* chunks are token ranges, not row strips */
    long nrc;              /* row chunks: nchunk = nrc * ntb */
    int ntb;               /* token ranges per row chunk (1: all tokens) */
    long ntblk;            /* AP_MAX-token blocks, split over the ntb ranges */
    int nrange;            /* > 0: per-thread ranges instead */
    mm_range *range;
    uint64_t *busy;        /* DS4_PROFILE: ns each thread spent taking chunks, or NULL */
} mm_job;

/* Output rows [o0, o1) of one group, token rows [t0, t1). */
static void mm_group_rows(const cpu_ctx *c, const mm_group *g, int o0, int o1, int t0, int t1) {
    const int n = g->W.n_in;
    const size_t rb = g->W.row_bytes;
    ds4_tile_fn tile = pick_tile(c->k, g->W, g->kind);
    if (tile) {
        const void *ap[AP_MAX];
        for (int j0 = t0; j0 < t1; j0 += AP_MAX) {
            int nt = t1 - j0 < AP_MAX ? t1 - j0 : AP_MAX;
            for (int j = 0; j < nt; j++) {
                int row = g->rows ? g->rows[j0 + j] : j0 + j;
                ap[j] = g->act + (size_t)row * g->act_stride;
            }
            tile(n, g->W.w + (size_t)o0 * rb, rb, o1 - o0, ap, nt,
                 g->out + (size_t)j0 * g->out_stride + o0, g->out_stride);
        }
        return;
    }
    /* formats without a tile (float activations on quantized weights, the
     * --no-qat diagnostic; BF16): the single-row kernels */
    dotq_fn fq = NULL;
    dotf_fn ff = NULL;
    if (g->kind == ACT_F32) ff = pick_f(c->k, g->W.type);
    else fq = pick_q(c->k, g->W.type, g->kind);
    for (int r0 = o0; r0 < o1; r0 += STRIP) {
        int r1 = r0 + STRIP < o1 ? r0 + STRIP : o1;
        for (int j = t0; j < t1; j++) {
            int row = g->rows ? g->rows[j] : j;
            const uint8_t *a = g->act + (size_t)row * g->act_stride;
            float *y = g->out + (size_t)j * g->out_stride;
            for (int r = r0; r < r1; r++) {
                const uint8_t *w = g->W.w + (size_t)r * rb;
                y[r] = ff ? ff(n, w, (const float *)a) : fq(n, w, a);
            }
        }
    }
}

static inline double row_cost(const mm_group *g) {
    return (double)g->n_rows + ROW_FIXED;
}

/* Chunk ci owns the strips whose first row's cost lies in [c0, c1);
 * neighbouring chunks compute their shared boundary from the same
 * expression, and the last one takes everything up to the end, so every
 * strip is computed exactly once. */
static void mm_chunk(mm_job *jb, long ci) {
    if (jb->tok_split) {
        /* chunk ci: token rows [T ci / n, T (ci + 1) / n) of every group */
        for (int gi = 0; gi < jb->ng; gi++) {
            const mm_group *g = &jb->g[gi];
            long t0, t1;
            ds4_split(g->n_rows, (int)ci, (int)jb->nchunk, &t0, &t1);
            if (t0 < t1 && g->W.n_out > 0) mm_group_rows(jb->c, g, 0, g->W.n_out, (int)t0, (int)t1);
        }
        return;
    }
    /* chunk ci: row chunk rc, token range tb of it (ntb > 1: the dense
     * batches, every group with the same token rows) */
    const long rc = ci / jb->ntb;
    int t0 = 0, t1 = INT_MAX;
    if (jb->ntb > 1) {
        long b0, b1;
        ds4_split(jb->ntblk, (int)(ci % jb->ntb), jb->ntb, &b0, &b1);
        t0 = (int)(b0 * AP_MAX);
        t1 = (int)(b1 * AP_MAX);
    }
    const int last = rc == jb->nrc - 1;
    const double c0 = jb->chunk * (double)rc, c1 = jb->chunk * (double)(rc + 1);
    for (int gi = 0; gi < jb->ng; gi++) {
        const mm_group *g = &jb->g[gi];
        if (g->n_rows <= 0 || g->W.n_out <= 0) continue;
        double s = jb->start[gi], k = row_cost(g) * STRIP;
        double e = s + row_cost(g) * g->W.n_out;
        if (e <= c0 || (!last && s >= c1)) continue;
        long o0 = c0 <= s ? 0 : (long)ceil((c0 - s) / k) * STRIP;
        long o1 = last ? g->W.n_out : (long)ceil((c1 - s) / k) * STRIP;
        if (o1 > g->W.n_out) o1 = g->W.n_out;
        int u1 = t1 < g->n_rows ? t1 : g->n_rows;
        if (o0 < o1 && t0 < u1) mm_group_rows(jb->c, g, (int)o0, (int)o1, t0, u1);
    }
}

/* Next chunk of a range, from its front (the owner) or its back (a thief);
 * -1 when empty. */
static long range_take(mm_range *r, int back) {
    long long v = atomic_load_explicit(&r->fb, memory_order_relaxed);
    for (;;) {
        long f = (long)(v & 0xffffffffll), b = (long)(v >> 32);
        if (f >= b) return -1;
        long long nv = back ? ((long long)(b - 1) << 32) | f : ((long long)b << 32) | (f + 1);
        if (atomic_compare_exchange_weak_explicit(&r->fb, &v, nv, memory_order_relaxed, memory_order_relaxed))
            return back ? b - 1 : f;
    }
}

/* Threads take chunks dynamically: a thread that runs slower (another
 * process on its core, a busier memory channel) simply takes fewer,
 * instead of the whole section waiting for its fixed share.
 *   batches: from a shared counter;
 *   matvecs: each thread owns a contiguous range of chunks and takes them
 *     in order, so its weight stream stays one sequential read (the
 *     kernels prefetch past the end of a chunk into the next); when its
 *     range is done it takes chunks from the back of the others'. */
static void mm_take_chunks(mm_job *jb, int ith) {
    if (jb->nrange > 0) {
        for (;;) {
            long ci = range_take(&jb->range[ith], 0);
            if (ci < 0) {
                for (int k = 1; k < jb->nrange && ci < 0; k++) ci = range_take(&jb->range[(ith + k) % jb->nrange], 1);
                if (ci < 0) break;
            }
            mm_chunk(jb, ci);
        }
        return;
    }
    for (;;) {
        long ci = atomic_fetch_add_explicit(&jb->next, 1, memory_order_relaxed);
        if (ci >= jb->nchunk) break;
        mm_chunk(jb, ci);
    }
}

/* The pool's task; under DS4_PROFILE it also records how long this thread
 * worked, for the idle share (cpu_matmul_groups). */
static void mm_task(void *ctx, int ith, int nth) {
    (void)nth;
    mm_job *jb = ctx;
    if (!jb->busy) { mm_take_chunks(jb, ith); return; }
    uint64_t t0 = prof_clk_ns(CLOCK_MONOTONIC);
    mm_take_chunks(jb, ith);
    jb->busy[ith] = prof_clk_ns(CLOCK_MONOTONIC) - t0;
}

/* Chunks per thread when the work allows it, and the smallest chunk.
 * Matvecs (up to 8 tokens): 6 per thread of at least 2 strips, fine
 * enough to even out a thread slowed by the memory system or another
 * process.  Batches: up to 16 per thread of at least 32 strips (512
 * rows): every chunk starts cold (activation preparation, first packs
 * from DRAM), and measured at T = 256 on 2 threads (1024 rows) 8-strip
 * chunks gave 545 (Q8_0) / 606 (Q2_K) GFLOP/s, 32-strip ones 590 / 707.
 * With only 2 per thread, the prefill's big sections (attn_q_b, the 512
 * gate/up groups of a layer) ended with one thread idle for a quarter of
 * the call, 12-15 % of the matmul thread time on medium q2 at chunk 2048
 * (the cost model does not see cold experts or a slowed core); with 8-64
 * per thread 2.5-3.5 % (DS4_PROFILE's "thread idle" line), and the
 * matmul stage 0-4 % shorter (five of six alternated pairs; one +1 %). */
#define CHUNKS_PER_THREAD_DECODE 6
#define CHUNKS_PER_THREAD_BATCH 16
#define MIN_CHUNK_STRIPS_DECODE 2
#define MIN_CHUNK_STRIPS_BATCH 32

/* Dense batches of more than AP_MAX tokens whose row chunks come to fewer
 * than TOK_RANGE_BELOW per thread (16 threads: the 4096-row products of a
 * 2048-token chunk make 256 strips, so 16 chunks, one a thread; a thread
 * slowed by anything made the others wait, 14-16 % of the matmul thread
 * time on a 16-core Xeon) split each row chunk's tokens too, in whole
 * AP_MAX blocks: the tiles already take AP_MAX tokens a call, so this adds
 * no packing, only one more read of the chunk's weights per range. */
#define TOK_RANGE_BELOW 8

/* Few strips (< TOK_SPLIT_STRIPS per thread) and at least TOK_SPLIT_MIN
 * tokens per thread: chunks of token rows, at least TOK_SPLIT_MIN each
 * (the packed tiles' 16-token tiles, the AMX thresholds). */
#define TOK_SPLIT_STRIPS 4
#define TOK_SPLIT_MIN 64

/* Run the job's chunks on the pool; under DS4_PROFILE also count the
 * threads' idle time. */
static void mm_run_job(const cpu_ctx *c, mm_job *jb, int nth) {
    uint64_t busy[MM_PROF_THREADS];
    if (PROF_ON() && nth <= MM_PROF_THREADS) {
        jb->busy = busy;
        for (int i = 0; i < nth; i++) busy[i] = 0;
        uint64_t t0 = prof_clk_ns(CLOCK_MONOTONIC);
        ds4_pool_run(c->pool, mm_task, jb);
        uint64_t w = prof_clk_ns(CLOCK_MONOTONIC) - t0, idle = 0;
        for (int i = 0; i < nth; i++) idle += busy[i] < w ? w - busy[i] : 0;
        ds4_prof_mm_idle(idle, w * (uint64_t)nth);
        return;
    }
    ds4_pool_run(c->pool, mm_task, jb);
}

void cpu_matmul_groups(const cpu_ctx *c, const mm_group *g, int ng) {
    enum { MAXG = 1024 };
    double start[MAXG];
    if (ng > MAXG) {   /* very many groups: run them in slices */
        for (int i = 0; i < ng; i += MAXG)
            cpu_matmul_groups(c, g + i, ng - i < MAXG ? ng - i : MAXG);
        return;
    }
    double t = 0, macs = 0;
    int maxtok = 0, mintok = INT_MAX;
    long strips = 0;
    for (int i = 0; i < ng; i++) {
        start[i] = t;
        strips += (g[i].W.n_out + STRIP - 1) / STRIP;
        if (g[i].n_rows < mintok) mintok = g[i].n_rows;
        if (g[i].n_rows <= 0) continue;
        t += row_cost(&g[i]) * g[i].W.n_out;
        macs += ((double)g[i].n_rows + ROW_FIXED) * g[i].W.n_out * g[i].W.n_in;
        if (g[i].n_rows > maxtok) maxtok = g[i].n_rows;
    }
    if (t == 0) return;
    mm_job jb = { .c = c, .g = g, .ng = ng, .total = t, .start = start, .ntb = 1 };
    const int nth = ds4_pool_size(c->pool);
    if (macs < MIN_PARALLEL_MACS || nth == 1) {
        jb.chunk = t;
        jb.nchunk = jb.nrc = 1;
        mm_chunk(&jb, 0);
        return;
    }
    const int batch = maxtok > 8;
    /* Few rows and many tokens (the HC mixing: 24 rows of 16384 for every
     * token of a prefill): strips would leave a thread one strip of two
     * (24 rows = 16 + 8) and every thread would stream all the tokens'
     * activations; so the chunks are token ranges instead, each over every
     * row.  Only where every group has the same token rows (dense leaves;
     * routed experts differ).  Any token split gives the same bits (the
     * tiles' contract, quant.h). */
    if (batch && mintok == maxtok && strips < (long)TOK_SPLIT_STRIPS * nth && maxtok >= TOK_SPLIT_MIN * nth) {
        long n = maxtok / TOK_SPLIT_MIN;
        if (n > (long)nth * CHUNKS_PER_THREAD_BATCH) n = (long)nth * CHUNKS_PER_THREAD_BATCH;
        jb.tok_split = 1;
        jb.nchunk = n;
        atomic_init(&jb.next, 0);
        mm_run_job(c, &jb, nth);
        return;
    }
    double minc = (batch ? MIN_CHUNK_STRIPS_BATCH : MIN_CHUNK_STRIPS_DECODE) * STRIP *
                  ((double)maxtok + ROW_FIXED);
    long n = (long)nth * (batch ? CHUNKS_PER_THREAD_BATCH : CHUNKS_PER_THREAD_DECODE);
    if (t / n < minc) n = (long)(t / minc);
    if (n < nth) n = nth;
    jb.chunk = t / (double)n;
    jb.nrc = n;
    if (batch && mintok == maxtok && maxtok > AP_MAX && n < (long)TOK_RANGE_BELOW * nth) {
        jb.ntblk = (maxtok + AP_MAX - 1) / AP_MAX;
        long want = ((long)TOK_RANGE_BELOW * nth + n - 1) / n;
        jb.ntb = (int)(jb.ntblk < want ? jb.ntblk : want);
        n *= jb.ntb;
    }
    jb.nchunk = n;
    atomic_init(&jb.next, 0);
    mm_range rng[MM_MAXRANGE];
    if (!batch && nth <= MM_MAXRANGE) {
        jb.nrange = nth;
        jb.range = rng;
        for (int i = 0; i < nth; i++) {
            long lo, hi;
            ds4_split(n, i, nth, &lo, &hi);
            atomic_init(&rng[i].fb, ((long long)hi << 32) | lo);
        }
    }
    mm_run_job(c, &jb, nth);
}

double mm_groups_flops(const mm_group *g, int ng) {
    double f = 0;
    for (int i = 0; i < ng; i++)
        if (g[i].n_rows > 0) f += 2.0 * g[i].n_rows * g[i].W.n_in * g[i].W.n_out;
    return f;
}

void cpu_matmul(const cpu_ctx *c, mat_t W, int no_qat, const float *x,
                size_t xs, int T, float *y, size_t ys, void *scratch) {
    act_kind kind = act_kind_for(W.type, no_qat);
    mm_group g = { .W = W, .kind = kind, .n_rows = T, .out = y, .out_stride = ys };
    if (kind == ACT_F32) {
        g.act = (const uint8_t *)x;
        g.act_stride = xs * sizeof(float);
    } else {
        size_t rb = act_row_bytes(kind, W.n_in);
        for (int t = 0; t < T; t++)
            act_quantize_row(c->k, kind, x + (size_t)t * xs, W.n_in, (uint8_t *)scratch + (size_t)t * rb);
        g.act = scratch;
        g.act_stride = rb;
    }
    cpu_matmul_groups(c, &g, 1);
}

/* ---------------------------------------------------------------------- */
/* Norms                                                                   */
/* ---------------------------------------------------------------------- */

/* Sum of squares in double, scale in float: the original engine's rule
 * (docs/MODEL.md §1). */
float rms_scale(const float *x, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return 1.0f / sqrtf((float)(ss / n) + eps);
}

void rms_norm(const float *x, const float *w, int n, float eps, float *out) {
    float s = rms_scale(x, n, eps);
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * s * w[i];
    else for (int i = 0; i < n; i++) out[i] = x[i] * s;
}

/* rms_scale's sum is one serial chain of double adds: each add waits for
 * the previous one (4 cycles), so a 16K-wide HC row costs ~65K cycles
 * while the core could issue two adds per cycle.  Reordering the sum
 * would change the bits, so instead the rows are summed side by side, one
 * row per SIMD lane (vk->sumsq_rows): each row keeps its own chain in
 * exactly rms_scale's order (same products, same adds, same final float
 * steps), and the chains of different rows overlap. */
#define RMS_ROWS_MAX 32

void rms_scale_rows(const vec_kernels *vk, const float *x, size_t xs, int nr, int n, float eps, float *out) {
    double ss[RMS_ROWS_MAX];
    for (int r0 = 0; r0 < nr; r0 += RMS_ROWS_MAX) {
        const int nb = nr - r0 < RMS_ROWS_MAX ? nr - r0 : RMS_ROWS_MAX;
        vk->sumsq_rows(x + (size_t)r0 * xs, xs, nb, n, ss);
        for (int r = 0; r < nb; r++) out[r0 + r] = 1.0f / sqrtf((float)(ss[r] / n) + eps);
    }
}

/* Rows a pass sums side by side before scaling them: enough to fill four
 * groups of lanes (32 rows) where they stay in L2 for the scaling pass
 * (<= 128 KB), fewer for long rows (the 16K-wide HC rows: 8, 512 KB). */
static int rms_rows_for(int n) {
    return n <= 1024 ? 32 : n <= 4096 ? 16 : 8;
}

void rms_norm_rows(const vec_kernels *vk, const float *x, size_t xs, const float *w, int nr, int n, float eps,
                   float *out, size_t os, int stream) {
    float sc[RMS_ROWS_MAX];
    const int rb = rms_rows_for(n);
    for (int r0 = 0; r0 < nr; r0 += rb) {
        int nb = nr - r0 < rb ? nr - r0 : rb;
        rms_scale_rows(vk, x + (size_t)r0 * xs, xs, nb, n, eps, sc);
        for (int r = 0; r < nb; r++) {
            const float *xr = x + (size_t)(r0 + r) * xs;
            float *o = out + (size_t)(r0 + r) * os, s = sc[r];
            /* the same (x * s) * w as rms_norm; streamed 64 at a time */
            int i = 0;
            if (stream)
                for (; i + 64 <= n; i += 64) {
                    float v[64];
                    if (w) for (int k = 0; k < 64; k++) v[k] = xr[i + k] * s * w[i + k];
                    else for (int k = 0; k < 64; k++) v[k] = xr[i + k] * s;
                    rows_store64(o + i, v, 1);
                }
            if (w) for (; i < n; i++) o[i] = xr[i] * s * w[i];
            else for (; i < n; i++) o[i] = xr[i] * s;
        }
    }
    rows_store_fence(stream);
}

/* ---------------------------------------------------------------------- */
/* RoPE                                                                    */
/* ---------------------------------------------------------------------- */

/* Angles follow the original engine: the extrapolated angle of pair k is
 * built by repeated float32 multiplication, theta_e(k+1) = theta_e(k) *
 * base^(-2/r) with the step from powf (correctly rounded in glibc), and
 * YaRN blends it per pair: theta = theta_e * ((1 - ramp)/factor + ramp)
 * (docs/MODEL.md §4.2).  Matching this float32 recurrence bit for bit
 * keeps the FP8/Q8 rounding decisions identical to the golden engine's far
 * more often: a step one ulp off already doubles the flips (NOTES.md). */
void rope_init(rope_t *r, int n_rot, float base, int yarn, float factor,
               uint64_t orig_ctx, float beta_fast, float beta_slow) {
    r->n_rot = n_rot;
    int np = n_rot / 2;
    r->step = powf(base, -2.0f / (float)n_rot);
    double lo = 0, hi = 0;
    if (yarn) {
        double lb = log((double)base);
        double cf = n_rot * log((double)orig_ctx / (beta_fast * 2.0 * M_PI)) / (2.0 * lb);
        double cs = n_rot * log((double)orig_ctx / (beta_slow * 2.0 * M_PI)) / (2.0 * lb);
        lo = floor(cf); if (lo < 0) lo = 0;
        hi = ceil(cs); if (hi > n_rot - 1) hi = n_rot - 1;
    }
    for (int k = 0; k < np && k < DS4_MAX_ROT_DIM / 2; k++) {
        double m = 1.0;
        if (yarn) {
            double y = (k - lo) / fmax(0.001, hi - lo);
            double ramp = 1.0 - fmin(fmax(y, 0.0), 1.0);
            m = (1.0 - ramp) / factor + ramp;
        }
        r->mul[k] = m;
    }
}

void rope_angles(const rope_t *r, int64_t pos, float *cs, float *sn) {
    float th_e = (float)pos;
    for (int k = 0; k < r->n_rot / 2; k++) {
        double th = (double)th_e * r->mul[k];
        cs[k] = (float)cos(th);
        sn[k] = (float)sin(th);
        th_e *= r->step;
    }
}

void rope_apply(float *x, int dim, int n_rot, const float *cs,
                const float *sn, int inverse) {
    float *t = x + dim - n_rot;
    for (int k = 0; k < n_rot / 2; k++) {
        float c = cs[k], s = inverse ? -sn[k] : sn[k];
        float x0 = t[2 * k], x1 = t[2 * k + 1];
        t[2 * k] = x0 * c - x1 * s;
        t[2 * k + 1] = x0 * s + x1 * c;
    }
}

/* ---------------------------------------------------------------------- */
/* Storage roundings                                                       */
/* ---------------------------------------------------------------------- */

/* 2^ceil(log2(r)) for r > 0, exact. */
static float pow2_ceil(float r) {
    int e;
    float m = frexpf(r, &e);       /* r = m * 2^e, m in [0.5, 1) */
    return ldexpf(1.0f, m == 0.5f ? e - 1 : e);
}

/* Nearest FP8 E4M3FN value (ties to even), |v| <= 448. */
float e4m3_round(float v) {
    float a = fabsf(v);
    if (a == 0.0f) return 0.0f;
    int e;
    frexpf(a, &e);                 /* a in [2^(e-1), 2^e) */
    int ex = e - 1 < -6 ? -6 : e - 1;   /* subnormals share 2^-6 */
    float quantum = ldexpf(1.0f, ex - 3);
    float q = rintf(a / quantum) * quantum;
    if (q > 448.0f) q = 448.0f;
    return copysignf(q, v);
}

/* Nearest E2M1 value {0,.5,1,1.5,2,3,4,6}, ties to the even code. */
float e2m1_round(float v) {
    float a = fabsf(v), q;
    if (a <= 0.25f) q = 0.0f;
    else if (a < 0.75f) q = 0.5f;
    else if (a <= 1.25f) q = 1.0f;
    else if (a < 1.75f) q = 1.5f;
    else if (a <= 2.5f) q = 2.0f;
    else if (a < 3.5f) q = 3.0f;
    else if (a <= 5.0f) q = 4.0f;
    else q = 6.0f;
    if (q == 0.0f) return 0.0f;
    return copysignf(q, v);
}

void fp8_kv_round(float *x, int n_nope) {
    for (int off = 0; off < n_nope; off += 64) {
        int end = off + 64 < n_nope ? off + 64 : n_nope;
        float amax = 0;
        for (int i = off; i < end; i++) amax = fmaxf(amax, fabsf(x[i]));
        amax = fmaxf(amax, 1.0e-4f);
        float scale = pow2_ceil(amax / 448.0f);
        for (int i = off; i < end; i++) {
            float v = x[i] / scale;
            v = fminf(fmaxf(v, -448.0f), 448.0f);
            x[i] = e4m3_round(v) * scale;
        }
    }
}

/* The FP4 step of indexer_qat for one block, written so that GCC turns it
 * into vector code (the scalar form, with libm fmaxf/fminf calls and a
 * chain of branches, was most of the indexer stage at 8K context): the
 * same values as `fminf(fmaxf(x / scale, -6), 6)` rounded by e2m1_round
 * and times scale.  Dividing by the power of two `scale` (2^-126 .. 2^126:
 * amax is at least 7.05e-38) equals multiplying by its exact inverse; the
 * clamps as comparisons send NaN to -6 as fmaxf does; the E2M1 value is a
 * sum of the steps its magnitude passes (each exact).  tests/test_rowops.c
 * checks it against that plain form bit for bit. */
static void fp4_block(float *x, int n, float scale) {
    const float inv = 1.0f / scale;
    for (int i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > -6.0f ? v : -6.0f;
        v = v < 6.0f ? v : 6.0f;
        const float a = fabsf(v);
        const float q = 0.5f * (float)(a > 0.25f) + 0.5f * (float)(a >= 0.75f) + 0.5f * (float)(a > 1.25f) +
                        0.5f * (float)(a >= 1.75f) + 1.0f * (float)(a > 2.5f) + 1.0f * (float)(a >= 3.5f) +
                        2.0f * (float)(a > 5.0f);
        x[i] = (q == 0.0f ? 0.0f : copysignf(q, v)) * scale;
    }
}

void hadamard_rotate(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    float s = (float)(1.0 / sqrt((double)n));
    for (int i = 0; i < n; i++) x[i] *= s;
}

void indexer_qat(float *x, int n) {
    hadamard_rotate(x, n);
    for (int off = 0; off < n; off += 32) {
        int end = off + 32 < n ? off + 32 : n;
        /* fmaxf's value: a NaN element is skipped */
        float amax = 0;
        for (int i = off; i < end; i++) {
            const float a = fabsf(x[i]);
            amax = a > amax ? a : amax;
        }
        amax = amax > 7.052966104933725e-38f ? amax : 7.052966104933725e-38f;
        float scale = pow2_ceil(amax / 6.0f);
        if (scale >= 0x1p-126f && scale <= 0x1p126f) {
            fp4_block(x + off, end - off, scale);
            continue;
        }
        /* an infinite element: the plain form (scale's exponent is then
         * frexpf's unspecified one) */
        for (int i = off; i < end; i++) {
            float v = x[i] / scale;
            v = fminf(fmaxf(v, -6.0f), 6.0f);
            x[i] = e2m1_round(v) * scale;
        }
    }
}

void f16_round_row(float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = ds4_f16_round(x[i]);
}
