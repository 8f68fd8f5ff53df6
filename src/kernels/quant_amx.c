/*
 * quant_amx.c -- the "amx" kernel table: Intel AMX-INT8 tiles (TDPBSSD) for
 * the batched matmuls of Q8_0 and MXFP4 weights with Q8_0a activations;
 * every other entry (single rows, i.e. decode, the K-quant and IQ2_XXS
 * tiles, the float tiles) and every batch of fewer than DS4_AMX_MIN_TOK
 * (64) tokens is the avx512 table's.
 *
 * Owns: the run-time AMX check (CPUID leaf 7 AMX-TILE/AMX-INT8 plus the
 * Linux permission request arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)),
 * the tile configuration, per-thread pack buffers, and the tile kernels.
 * Must not: change results against the single-row kernels (every output
 * equals the scalar table bit for bit, quant.h), know about models or
 * threads, or allocate.
 *
 * Bit-identity.  The float order of Q8_0 and MXFP4 is: per 32-element
 * block the exact integer sum, then sumf += (float)sumi * (wd * ad) in
 * block order, starting from 0 (quant.c).  One TDPBSSD with K = 32 (an A
 * tile of 16 tokens x 32 bytes, a B tile of 8 x 64 bytes = 16 weight rows
 * x 32 codes in the VNNI layout) gives exactly the 16 x 16 block integer
 * sums (signed x signed: the -128 that Q8_0a activations may hold is
 * fine, |sum| <= 32 * 128 * 128); the tile is stored and the float step
 * is done in AVX-512 with the scalar expression (no FMA, -ffp-contract=off).
 * The float step per 16 x 16 x 32 block costs 4 vector ops per token
 * (cvt, mul, mul, add), which, not the tile unit, bounds the kernel: a
 * larger K per TDP would mix blocks of different scales.
 *
 * Layout.  Tokens are the A operand: per call and K chunk of KC blocks,
 * the activation codes are copied into tile order (per 16-token tile and
 * block one dense 16 x 32-byte A tile, plus the 16 scales; zero past the
 * last token) in a per-thread buffer -- measured 15 % faster than
 * tileloadd straight from the activation rows, whose 16 rows each touch
 * another cache line.  Weights are the B operand: per 16-row strip and K
 * chunk, the codes are transposed into the VNNI layout (row s of block b
 * = dword s of each of the 16 weight rows; one 16-lane gather per 64
 * bytes) with the 16 weight scales as floats, into an 18 KiB per-thread
 * buffer reused by every token tile.  Weights are not repacked at load,
 * so the table costs no resident weight memory (the per-thread buffers
 * are 313 KiB of static TLS in every thread); the transpose is paid once per
 * strip, K chunk and call, against ntok / 16 TDPs.  C (16 tokens x 16
 * rows) rows are y rows: the running float sums live in 16 zmm
 * accumulators over a K chunk and wait in y between chunks (stored and
 * reloaded as float32, so unchanged).  Two tile sets are software
 * pipelined two deep (tile_blocks).
 *
 * Where the time goes: the tile unit is mostly idle.  Per 16 x 16 x 32
 * block the float step is 16 x (load, cvt, mul, mul, add) after a 1 KiB
 * tilestored, against one TDPBSSD; the kernel reaches about 1.6x the
 * avx512 tile (docs/PERF_KERNELS.md), not the 8x ratio of the two units'
 * peaks.  Formats whose integer sums span 256 elements before any float
 * step (Q2_K, IQ2_XXS, Q4_K) would amortize the store 8x; they are not
 * done yet and run the avx512 tiles.
 *
 * GCC 12 implements the AMX intrinsics as asm statements without memory
 * operands, so it may drop or reorder the stores they read (the tile
 * configuration, staging and pack buffers) or the loads of what tilestored
 * wrote.  The tile instructions are therefore written here as asm with a
 * "memory" clobber, and the configuration is a const object in memory.
 */
#include "kernels/quant.h"

#include <string.h>

#if defined(__x86_64__) && defined(__linux__)

#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define VT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")))

/* Fewer tokens than this: the avx512 tile (an A tile would be mostly
 * padding, and the weight transpose would not be amortized; quant.h). */
#define AMX_MIN_TOK DS4_AMX_MIN_TOK
/* 32-element blocks per K chunk: pack = KC * (512 + 64) bytes. */
#define KC 32
/* Tokens staged per group (the staging buffer holds TG x KC blocks). */
#define TG 256

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Tile registers: 0 and 3 C (16 x 64 B), 1 and 4 A (16 x 32 B), 2 and 5 B
 * (8 x 64 B); two sets so that block b + 1's product overlaps block b's
 * float step. */
typedef struct {
    uint8_t palette, start_row, rsv[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;
_Static_assert(sizeof(tilecfg_t) == 64, "tilecfg");

static const tilecfg_t amx_cfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = { 64, 32, 64, 64, 32, 64 },
    .rows = { 16, 16, 8, 16, 16, 8 },
};

#define TCFG(p) __asm__ volatile("ldtilecfg %0" ::"m"(*(const tilecfg_t *)(p)) : "memory")
#define TRELEASE() __asm__ volatile("tilerelease" ::: "memory")
#define TZERO(t) __asm__ volatile("tilezero %%tmm" #t ::: "memory")
#define TLOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"((long)(stride)) : "memory")
#define TSTORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"((long)(stride)) : "memory")
/* Intel: tdpbssd tmm_c, tmm_a, tmm_b (AT&T reverses the operands) */
#define TDPBSSD(c, a, b) __asm__ volatile("tdpbssd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")

/* One 16-row strip x KC blocks of weights in the B layout. */
typedef struct {
    int8_t b[KC][8][64];   /* b[blk][s]: dword r = codes 4s..4s+3 of row r */
    float wd[KC][16];      /* weight block scale per row (0 for missing rows) */
} amx_pack;

static _Thread_local amx_pack tl_pack __attribute__((aligned(64)));
/* Activations of a token group and K chunk in tile order: 16-token tiles,
 * per block the 16 x 32 codes (one dense A tile) and the 16 scales. */
typedef struct {
    int8_t q[KC][16][32];
    float d[KC][16];
} amx_act;
static _Thread_local amx_act tl_act[TG / 16] __attribute__((aligned(64)));

enum { F_Q8_0, F_MXFP4 };

/* 16 rows of 32 int8 codes (row r at src + r * stride, rows >= nr taken
 * as zero) -> the 8 x 64-byte B layout. */
VT static void transpose_rows(const uint8_t *src, size_t stride, int nr, int8_t dst[8][64])
{
    const __mmask16 m = (__mmask16)((1u << nr) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)stride));
    for (int s = 0; s < 8; s++)
        _mm512_store_si512((void *)dst[s],
                           _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, src + 4 * s, 1));
}

/* Pack rows [0, nr) of a strip (w: its first row, blocks [kb, kb + kn)). */
VT static void pack_strip(int f, const uint8_t *w, size_t ws, int nr, int kb, int kn, amx_pack *pk)
{
    const __mmask16 m = (__mmask16)((1u << nr) - 1);
    const __m512i ridx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)ws));
    if (f == F_Q8_0) {
        for (int b = 0; b < kn; b++) {
            const uint8_t *blk = w + (size_t)(kb + b) * sizeof(block_q8_0);
            transpose_rows(blk + 2, ws, nr, pk->b[b]);
            /* the f16 scale: low half of the dword at the block start */
            __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, ridx, blk, 1);
            _mm512_store_ps(pk->wd[b], _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
        }
        return;
    }
    /* MXFP4: codes -> int8 values (ds4_kvalues_mxfp4) into row-major
     * scratch, then the same transpose; scale 2^(e - 128) (exact) */
    const __m128i lut = _mm_loadu_si128((const __m128i *)ds4_kvalues_mxfp4);
    const __m128i lo4 = _mm_set1_epi8(15);
    uint8_t tmp[16][32] __attribute__((aligned(64)));
    for (int b = 0; b < kn; b++) {
        float wd[16] __attribute__((aligned(64)));
        for (int r = 0; r < 16; r++) {
            if (r >= nr) {
                memset(tmp[r], 0, 32);
                wd[r] = 0.0f;
                continue;
            }
            const block_mxfp4 *blk = (const block_mxfp4 *)(w + (size_t)r * ws) + kb + b;
            __m128i q = _mm_loadu_si128((const __m128i *)blk->qs);
            _mm_store_si128((__m128i *)tmp[r], _mm_shuffle_epi8(lut, _mm_and_si128(q, lo4)));
            _mm_store_si128((__m128i *)(tmp[r] + 16), _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), lo4)));
            wd[r] = ds4_e8m0_to_f32_half(blk->e);
        }
        transpose_rows(&tmp[0][0], 32, 16, pk->b[b]);
        memcpy(pk->wd[b], wd, sizeof wd);
    }
}

/* One token tile (A: tokens at abase + t * astride, blocks of the chunk
 * at 36-byte steps) x one packed strip, kn blocks.  acc is y's running
 * sum (first chunk: zeros). */
/* The float step of one block: acc[t] += (float)C[t][r] * (wd[r] * ad[t]),
 * the scalar kernel's expression (products and sum rounded separately). */
#define FLOAT_STEP(cbuf, blk)                                                                              \
    do {                                                                                                   \
        const __m512 wv = _mm512_load_ps(pk->wd[blk]);                                                     \
        _Pragma("GCC unroll 16") for (int t = 0; t < 16; t++)                                              \
        {                                                                                                  \
            const __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cbuf)[t])), \
                                           _mm512_mul_ps(wv, _mm512_set1_ps(ak->d[blk][t])));             \
            acc[t] = _mm512_add_ps(acc[t], p);                                                             \
        }                                                                                                  \
    } while (0)

/* block blk's product into tile set s (C = 3s, A = 3s + 1, B = 3s + 2) */
#define PRODUCT0(blk) do { TLOAD(1, ak->q[blk], 32); \
                           TLOAD(2, pk->b[blk], 64); TZERO(0); TDPBSSD(0, 1, 2); } while (0)
#define PRODUCT1(blk) do { TLOAD(4, ak->q[blk], 32); \
                           TLOAD(5, pk->b[blk], 64); TZERO(3); TDPBSSD(3, 4, 5); } while (0)

/* One packed token tile x one packed strip, kn >= 1 blocks; acc is y's
 * running sum (first chunk: zeros).  Software pipelined over the two tile
 * sets, two deep: block b's C is stored, block b + 1's product issued,
 * and only then is the float step of block b - 1 done, from a C stored an
 * iteration earlier -- the loads of a C that tilestored has just written
 * wait for that store to retire and commit (no forwarding); measured 7 %
 * faster than the one-deep pipeline (amx / avx512 1.52 -> 1.63, T = 256).  The tile registers are not renamed: a
 * set is reused only after its C was stored. */
VT __attribute__((always_inline)) static inline void tile_blocks(const amx_pack *pk, int kn, const amx_act *ak,
                                                                __m512 acc[16], int32_t cb[2][16][16])
{
    PRODUCT0(0);
    TSTORE(0, cb[0], 64);
    if (kn == 1) {
        FLOAT_STEP(cb[0], 0);
        return;
    }
    PRODUCT1(1);
    for (int b = 1;; b += 2) {
        /* block b (odd) is in set 1, block b - 1's C in cb[0] */
        TSTORE(3, cb[1], 64);
        if (b + 1 < kn) PRODUCT0(b + 1);
        FLOAT_STEP(cb[0], b - 1);
        if (b + 1 >= kn) {
            FLOAT_STEP(cb[1], b);
            break;
        }
        /* block b + 1 (even) is in set 0, block b's C in cb[1] */
        TSTORE(0, cb[0], 64);
        if (b + 2 < kn) PRODUCT1(b + 2);
        FLOAT_STEP(cb[1], b);
        if (b + 2 >= kn) {
            FLOAT_STEP(cb[0], b + 1);
            break;
        }
    }
}

static const ds4_kernels *amx_base;   /* the avx512 table */

/* Token group [0, ntok) (ntok <= TG) of the tile contract in quant.h. */
VT static void amx_group(int f, int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok,
                         float *y, size_t ys)
{
    const int nb = n / 32;
    const int ntile = (ntok + 15) / 16;
    int32_t cb[2][16][16] __attribute__((aligned(64)));   /* C tiles, stored */
    for (int kb = 0; kb < nb; kb += KC) {
        const int kn = nb - kb < KC ? nb - kb : KC;
        /* the activations of this chunk in tile order (dense A tiles),
         * zero past the last token */
        for (int t = 0; t < ntile * 16; t++) {
            amx_act *ak = &tl_act[t / 16];
            if (t < ntok) {
                const block_q8_0a *src = (const block_q8_0a *)a[t] + kb;
                for (int b = 0; b < kn; b++) {
                    _mm256_store_si256((__m256i *)ak->q[b][t % 16], _mm256_loadu_si256((const __m256i *)src[b].qs));
                    ak->d[b][t % 16] = src[b].d;
                }
            } else {
                for (int b = 0; b < kn; b++) {
                    _mm256_store_si256((__m256i *)ak->q[b][t % 16], _mm256_setzero_si256());
                    ak->d[b][t % 16] = 0.0f;
                }
            }
        }
        for (int r0 = 0; r0 < nrows; r0 += 16) {
            const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
            const __mmask16 m = (__mmask16)((1u << nr) - 1);
            /* the next strip's rows of this chunk into L2 while this one
             * is computed: the gathers of pack_strip do not hide DRAM
             * latency as the streaming loads of the avx512 pack do */
            if (r0 + 16 < nrows) {
                const size_t bb = f == F_Q8_0 ? sizeof(block_q8_0) : sizeof(block_mxfp4);
                const int nx = nrows - r0 - 16 < 16 ? nrows - r0 - 16 : 16;
                for (int r = 0; r < nx; r++) {
                    const char *p = (const char *)w + (size_t)(r0 + 16 + r) * ws + (size_t)kb * bb;
                    for (size_t o = 0; o < (size_t)kn * bb; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
                }
            }
            pack_strip(f, w + (size_t)r0 * ws, ws, nr, kb, kn, &tl_pack);
            for (int ti = 0; ti < ntile; ti++) {
                const int t0 = ti * 16, nt = ntok - t0 < 16 ? ntok - t0 : 16;
                __m512 acc[16];
#pragma GCC unroll 16
                for (int t = 0; t < 16; t++)
                    acc[t] = kb == 0 || t >= nt ? _mm512_setzero_ps()
                                                : _mm512_maskz_loadu_ps(m, y + (size_t)(t0 + t) * ys + r0);
                tile_blocks(&tl_pack, kn, &tl_act[ti], acc, cb);
#pragma GCC unroll 16
                for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * ys + r0, m, acc[t]);
            }
        }
    }
}

VT static void amx_tile(int f, ds4_tile_fn fallback, int n, const void *w, size_t ws, int nrows,
                        const void *const *a, int ntok, float *y, size_t ys)
{
    /* small batches, and row strides the 32-bit gather indices cannot
     * hold: the avx512 tile */
    if (ntok < AMX_MIN_TOK || nrows <= 0 || ws > (size_t)INT32_MAX / 16) {
        fallback(n, w, ws, nrows, a, ntok, y, ys);
        return;
    }
    TCFG(&amx_cfg);
    for (int j0 = 0; j0 < ntok; j0 += TG) {
        const int nt = ntok - j0 < TG ? ntok - j0 : TG;
        amx_group(f, n, w, ws, nrows, a + j0, nt, y + (size_t)j0 * ys, ys);
    }
    TRELEASE();
}

static void amx_q8_0_q8_0a_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                float *y, size_t ys)
{
    amx_tile(F_Q8_0, amx_base->q8_0_q8_0a_tile, n, w, ws, nrows, a, ntok, y, ys);
}

static void amx_mxfp4_q8_0a_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    amx_tile(F_MXFP4, amx_base->mxfp4_q8_0a_tile, n, w, ws, nrows, a, ntok, y, ys);
}

static int amx_ok;
static ds4_kernels amx_kernels;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

/* CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8; then the kernel must
 * grant this process the tile data state (Linux >= 5.16), else the first
 * tile instruction faults. */
static void amx_init(void)
{
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 24) & 1) || !((d >> 25) & 1))
        return;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return;
    amx_base = ds4_kernels_avx512();
    if (!amx_base)
        return;
    amx_kernels = *amx_base;
    amx_kernels.name = "amx";
    amx_kernels.q8_0_q8_0a_tile = amx_q8_0_q8_0a_tile;
    amx_kernels.mxfp4_q8_0a_tile = amx_mxfp4_q8_0a_tile;
    amx_ok = 1;
}

const ds4_kernels *ds4_kernels_amx(void)
{
    pthread_once(&amx_once, amx_init);
    return amx_ok ? &amx_kernels : NULL;
}

#else  /* not x86-64 Linux */

const ds4_kernels *ds4_kernels_amx(void)
{
    return NULL;
}

#endif
