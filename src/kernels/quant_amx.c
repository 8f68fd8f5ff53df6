/*
 * quant_amx.c -- the "amx" kernel table: Intel AMX-INT8 tiles (TDPBSSD) for
 * the batched matmuls of Q8_0 and MXFP4 weights with Q8_0a activations and
 * of Q2_K, Q4_K and IQ2_XXS weights with Q8_K activations; every other
 * entry (single rows, i.e. decode, the float tiles) and every batch below
 * its format's threshold (DS4_AMX_MIN_TOK*, quant.h) is the avx512 table's.
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
 * are 361 KiB of static TLS in every thread, the union with the K-quant
 * buffers below); the transpose is paid once per
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
 * step (Q2_K, IQ2_XXS, Q4_K) amortize the store 8x: see the K-quant
 * section below.
 *
 * GCC 12 implements the AMX intrinsics as asm statements without memory
 * operands, so it may drop or reorder the stores they read (the tile
 * configuration, staging and pack buffers) or the loads of what tilestored
 * wrote.  The tile instructions are therefore written here as asm with a
 * "memory" clobber, and the configuration is a const object in memory.
 */
#include "kernels/quant.h"
#include "kernels/iq2_avx512.h"

#include <string.h>

#if defined(__x86_64__) && defined(__linux__)

#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define VT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2,prfchw")))

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

/* A strip's first stores into y (the first K chunk) go to lines no one
 * has touched, and each store first reads its line (write-allocate) at
 * DRAM latency, one 64-byte piece per token row: prefetching the next
 * strip's lines for writing (prefetchw) while this one computes takes
 * those reads off the stores' path.  Measured (amx, medium q2, chunk 2048,
 * 2 threads, three alternated pairs): most dense Q8_0 products 6-16 %
 * faster, attn_output_b within the noise, the routed Q2_K down 3-12 %
 * (docs/PERF_KERNELS.md).  nt rows from y, ys apart.
 * prfchw: PREFETCHW, which every AMX CPU has (the table is picked only
 * there); VT and VK name it too, so that this inlines into them. */
#define VPF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2,prfchw"), always_inline)) inline
VPF static void y_prefetchw(const float *y, size_t ys, int nt)
{
    for (int t = 0; t < nt; t++) __builtin_prefetch(y + (size_t)t * ys, 1, 3);
}

/* One 16-row strip x KC blocks of weights in the B layout. */
typedef struct {
    int8_t b[KC][8][64];   /* b[blk][s]: dword r = codes 4s..4s+3 of row r */
    float wd[KC][16];      /* weight block scale per row (0 for missing rows) */
} amx_pack;

/* Activations of a token group and K chunk in tile order: 16-token tiles,
 * per block the 16 x 32 codes (one dense A tile) and the 16 scales. */
typedef struct {
    int8_t q[KC][16][32];
    float d[KC][16];
} amx_act;

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

/* ------------------------------------------------------------------------ */
/* K-quants and IQ2_XXS x Q8_K: one C tile per 256-element block            */
/* ------------------------------------------------------------------------ */

/* The scalar orders (quant.c) first form an exact integer sum over a whole
 * 256-element block -- Q2_K sum_k (sc_k & 15) * sum(q * a), Q4_K
 * sum_j sc_j * sum(q * a), IQ2_XXS sum_g ls_g * sumi_g -- and only then
 * one float term per block.  So the weights are packed with their
 * sub-block scale folded in (w_e = scale * code, signed), and the block's
 * integer sum is one C tile accumulated over four TDPBSSD of K = 64 (A: 16
 * tokens x 64 activation bytes, B: 16 rows x 64 weight bytes in the VNNI
 * layout): one tile store and one float step per 256 elements, not per 32.
 *   Q2_K:    w = (sc & 15) * q <= 45: one int8 plane;
 *   Q4_K:    w = sc * q <= 945: two int8 planes, sc split as 8 sh + sl
 *            (q * sl, q * sh <= 105), isum = 8 C_hi + C_lo;
 *   IQ2_XXS: w = +-g * ls <= 1333 (g in {8, 25, 43}, ls odd <= 31): two
 *            planes, w = 128 hi + lo (lo = w & 127, hi = w >> 7 in
 *            [-11, 10]), bsum = 128 C_hi + C_lo.
 * Every partial sum fits int32 (|C| <= 256 * 127 * 127), so the combined
 * sums are the scalar integers exactly.  The K-quant mins are the scalar
 * summs = sum_j min_j * bsums_j, from the activation's bsums themselves (8
 * vpdpwssd per token and block); the float step then is the scalar
 * expression in AVX-512 (dall * (float)isum - dmin * (float)summs, product
 * and sum rounded separately; IQ2_XXS d * (float)bsum and the final
 * 0.125f * sumf).  Q8_K activation codes are never -128, so every product
 * is in range for the signed x signed TDPBSSD.
 *
 * IQ2_XXS codes are packed as the avx512 table does (quant_vnni.c): within
 * a 32-element group, dword s of the packed row holds element s of each of
 * the group's four grid entries, and the staged activations are permuted
 * the same way (byte 4s + k = element 8k + s), so that each dword takes one
 * two-bit grid code from each of four code bytes; the code, the group
 * scale and the sign select the two weight bytes from four 64-entry vpermb
 * tables.
 *
 * Weights are packed per call (per 16-row strip and K chunk, reused by
 * every 16-token tile), not repacked at load: a repacked Q2_K row would
 * take 256 (Q4_K and IQ2_XXS: 512) bytes per 256 elements against 84, 144
 * and 66, i.e. 3-8x the resident expert weights. */

#define VK __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg,avx2,fma,f16c,bmi2,prfchw")))
#define VKI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg,avx2,fma,f16c,bmi2,prfchw"), always_inline)) inline

/* 256-element blocks per K chunk, and tokens per group */
#define KCK 4
#define TGK 256

/* every tile 16 rows x 64 bytes: 0..3 C (two sets of lo/hi), 4..5 A,
 * 6..7 B */
static const tilecfg_t amx_kcfg __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 },
};

enum { F_Q2_K, F_Q4_K, F_IQ2_XXS };

/* One 16-row strip x one block, packed. */
typedef struct {
    int8_t b[2][64][64];  /* plane, quad s: dword r = the four weights of row r
                             at quad s (B tile k = quads 16k..16k+15) */
    __m512i m[8];         /* K-quants: words (min of bsum 2p, min of bsum 2p+1) */
    float d[16], dm[16];  /* f16 d and dmin of each row */
} kq_blk;

typedef struct {
    kq_blk blk[KCK];
} kq_pack;

/* A token tile's activations of one K chunk: codes in tile order (IQ2_XXS:
 * permuted), scales, bsums. */
typedef struct {
    int8_t q[KCK][16][256];
    float d[KCK][16];
    int32_t bs[KCK][16][8];   /* bsums, two int16 per int32 (vpdpwssd pairs) */
} kq_act;

/* IQ2_XXS tables: two-bit grid codes (8 -> 0, 25 -> 1, 43 -> 2) of
 * elements 0..3 and 4..7 of each grid entry; the weight bytes lo/hi of
 * +-g * ls indexed by negative << 6 | code << 4 | (ls - 1) / 2 (one
 * 128-entry vpermi2b each: the sign costs no masked second lookup). */
static const uint8_t *iq2_codes;   /* ds4_iq2xxs_codes(): lo 0..255, hi 256..511 */
static int8_t iq2_wlo[2][64] __attribute__((aligned(64)));   /* [negative] */
static int8_t iq2_whi[2][64] __attribute__((aligned(64)));
static uint8_t iq2_act_perm[64] __attribute__((aligned(64)));

static void iq2_init(void)
{
    iq2_codes = ds4_iq2xxs_codes();
    static const int gv[3] = { 8, 25, 43 };
    for (int i = 0; i < 64; i++) {
        const int c = i >> 4, ls = 2 * (i & 15) + 1;
        const int w = c < 3 ? gv[c] * ls : 0;
        for (int neg = 0; neg < 2; neg++) {
            const int v = neg ? -w : w;
            iq2_wlo[neg][i] = (int8_t)(v & 127);
            iq2_whi[neg][i] = (int8_t)(v >> 7);   /* arithmetic: floor(v / 128) */
        }
    }
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 8; s++)
            for (int k = 0; k < 4; k++) iq2_act_perm[32 * h + 4 * s + k] = (uint8_t)(32 * h + 8 * k + s);
}

/* 16 x 4 dwords (z[c] lanes L: dword c of rows 4L..4L+3 after the two
 * unpack stages) helper: rows r0..r3 (one 128-bit lane each of z0..z3)
 * -> v[c] = dword c of the four rows in each 128-bit lane. */
VKI static void tr4x4(__m512i z0, __m512i z1, __m512i z2, __m512i z3, __m512i *v)
{
    const __m512i a0 = _mm512_unpacklo_epi32(z0, z1), a1 = _mm512_unpackhi_epi32(z0, z1);
    const __m512i a2 = _mm512_unpacklo_epi32(z2, z3), a3 = _mm512_unpackhi_epi32(z2, z3);
    v[0] = _mm512_unpacklo_epi64(a0, a2);
    v[1] = _mm512_unpackhi_epi64(a0, a2);
    v[2] = _mm512_unpacklo_epi64(a1, a3);
    v[3] = _mm512_unpackhi_epi64(a1, a3);
}

/* 64 bytes at p[r] + off of 16 rows -> t[s]: lane r = dword s of row r. */
VKI static void rows_tr16(const uint8_t *const *p, size_t off, __m512i *t)
{
    __m512i v[4][4];   /* v[q][c] 128-bit lane L: dword 4L + c of rows 4q..4q+3 */
    for (int q = 0; q < 4; q++)
        tr4x4(_mm512_loadu_si512(p[4 * q] + off), _mm512_loadu_si512(p[4 * q + 1] + off),
              _mm512_loadu_si512(p[4 * q + 2] + off), _mm512_loadu_si512(p[4 * q + 3] + off), v[q]);
    for (int c = 0; c < 4; c++) {
        const __m512i s0 = _mm512_shuffle_i32x4(v[0][c], v[1][c], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i s1 = _mm512_shuffle_i32x4(v[0][c], v[1][c], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i s2 = _mm512_shuffle_i32x4(v[2][c], v[3][c], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i s3 = _mm512_shuffle_i32x4(v[2][c], v[3][c], _MM_SHUFFLE(3, 2, 3, 2));
        t[c] = _mm512_shuffle_i32x4(s0, s2, _MM_SHUFFLE(2, 0, 2, 0));
        t[4 + c] = _mm512_shuffle_i32x4(s0, s2, _MM_SHUFFLE(3, 1, 3, 1));
        t[8 + c] = _mm512_shuffle_i32x4(s1, s3, _MM_SHUFFLE(2, 0, 2, 0));
        t[12 + c] = _mm512_shuffle_i32x4(s1, s3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* 16 bytes at p[r] + off of 16 rows -> t[c]: lane r = dword c of row r. */
VKI static void rows_tr4(const uint8_t *const *p, size_t off, __m512i *t)
{
    __m512i z[4];
    for (int i = 0; i < 4; i++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p[i] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[4 + i] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[8 + i] + off)), 2);
        z[i] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[12 + i] + off)), 3);
    }
    tr4x4(z[0], z[1], z[2], z[3], t);
}

/* vpshufb control: bytes (b0, b1, b2, b3) of every dword from bytes
 * 4p + i of the same dword p (i >= 0x80: zero) */
VKI static __m512i dw_ctl(unsigned b0, unsigned b1, unsigned b2, unsigned b3)
{
    uint32_t c[4];
    for (unsigned p = 0; p < 4; p++) {
        const unsigned o = 4 * p;
        c[p] = (b0 & 0x80 ? 0x80 : b0 + o) | (b1 & 0x80 ? 0x80 : b1 + o) << 8 | (b2 & 0x80 ? 0x80 : b2 + o) << 16 |
               (b3 & 0x80 ? 0x80u : b3 + o) << 24;
    }
    return _mm512_set4_epi32((int)c[3], (int)c[2], (int)c[1], (int)c[0]);
}

/* f16 pair (d at off, dmin at off + 2) of every strip row (F16C: exact,
 * as ds4_f16_to_f32, without a call per value) */
VKI static void strip_f16(const uint8_t *const *p, size_t off, int two, float *d, float *dm)
{
    for (int r = 0; r < 16; r++) {
        uint16_t h[2];
        memcpy(h, p[r] + off, two ? 4 : 2);
        d[r] = _cvtsh_ss(h[0]);
        if (two) dm[r] = _cvtsh_ss(h[1]);
    }
}

/* Q2_K: element h*128 + j*32 + l = bits 2j of qs[h*32 + l]; quad (4
 * elements) h*32 + j*8 + m comes from qs dword h*8 + m; its 16-element
 * scale is scales[h*8 + 2j + m/4]. */
VK static void kpack_q2_K(const uint8_t *const *p, kq_blk *pk)
{
    __m512i sr[4], t[16];
    rows_tr4(p, 0, sr);
    rows_tr16(p, 16, t);
    /* scale i & 15 in both words of each dword (vpmullw: a byte code x the
     * scale word, no carry between the two bytes as 3 * 15 < 256) */
    __m512i scw[16];
    const __m512i lo4w = _mm512_set1_epi32(0x000f000f);
    for (int i = 0; i < 16; i++)
        scw[i] = _mm512_and_si512(_mm512_shuffle_epi8(sr[i / 4], dw_ctl((unsigned)i % 4, 0x80, (unsigned)i % 4, 0x80)), lo4w);
    const __m512i k3 = _mm512_set1_epi8(3);
    for (int s = 0; s < 16; s++) {
        const int h = s / 8, m = s % 8;
        for (int j = 0; j < 4; j++) {
            const __m512i c = _mm512_and_si512(_mm512_srli_epi16(t[s], 2 * j), k3);
            _mm512_store_si512((void *)pk->b[0][h * 32 + j * 8 + m],
                               _mm512_mullo_epi16(c, scw[h * 8 + 2 * j + m / 4]));
        }
    }
    /* mins: words (scales[2p] >> 4, scales[2p + 1] >> 4) */
    for (int q = 0; q < 8; q++) {
        const unsigned i = 2 * ((unsigned)q % 2);
        pk->m[q] = _mm512_srli_epi16(_mm512_shuffle_epi8(sr[q / 2], dw_ctl(i, 0x80, i + 1, 0x80)), 4);
    }
    strip_f16(p, 80, 1, pk->d, pk->dm);
}

/* Q4_K: qs byte c*32 + l holds element c*64 + l (low nibble) and
 * c*64 + 32 + l (high); 6-bit scales and mins as the scalar q4_K_scales. */
VK static void kpack_q4_K(const uint8_t *const *p, kq_blk *pk)
{
    __m512i hd[4], t[32];
    rows_tr4(p, 0, hd);
    rows_tr16(p, 16, t);
    rows_tr16(p, 80, t + 16);
    const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i k03 = _mm512_set1_epi32(0x03030303);
    const __m512i sc03 = _mm512_and_si512(hd[1], k3f);
    const __m512i sc47 = _mm512_or_si512(_mm512_and_si512(hd[3], k0f),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[1], 6), k03), 4));
    const __m512i mn03 = _mm512_and_si512(hd[2], k3f);
    const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hd[3], 4), k0f),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hd[2], 6), k03), 4));
    __m512i sl[8], sh[8];
    const __m512i k7w = _mm512_set1_epi32(0x00070007);
    for (int j = 0; j < 8; j++) {
        const unsigned i = (unsigned)j % 4;
        const __m512i ctl = dw_ctl(i, 0x80, i, 0x80);
        const __m512i sw = _mm512_shuffle_epi8(j < 4 ? sc03 : sc47, ctl);   /* sc_j in both words */
        sl[j] = _mm512_and_si512(sw, k7w);
        sh[j] = _mm512_srli_epi16(sw, 3);
        pk->m[j] = _mm512_shuffle_epi8(j < 4 ? mn03 : mn47, ctl);          /* (m_j, m_j) */
    }
    const __m512i k15 = _mm512_set1_epi8(15);
    for (int s = 0; s < 32; s++) {
        const int c = s / 8, m = s % 8;
        const __m512i lo = _mm512_and_si512(t[s], k15);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(t[s], 4), k15);
        _mm512_store_si512((void *)pk->b[0][16 * c + m], _mm512_mullo_epi16(lo, sl[2 * c]));
        _mm512_store_si512((void *)pk->b[1][16 * c + m], _mm512_mullo_epi16(lo, sh[2 * c]));
        _mm512_store_si512((void *)pk->b[0][16 * c + 8 + m], _mm512_mullo_epi16(hi, sl[2 * c + 1]));
        _mm512_store_si512((void *)pk->b[1][16 * c + 8 + m], _mm512_mullo_epi16(hi, sh[2 * c + 1]));
    }
    strip_f16(p, 0, 1, pk->d, pk->dm);
}

/* IQ2_XXS: after the transpose, dword 2g of lane r holds the four grid
 * indices of group g of row r, dword 2g + 1 its four 7-bit sign fields
 * and the 4-bit scale.  Packed quad 8g + s: byte k = element s of grid
 * entry k (the permuted order, see above). */
/* The IQ2_XXS pack of one strip and block in pieces, so that a tile pass
 * can interleave it with its products (kq_pjob): piece 0 transposes the
 * 16 rows' dwords into t, pieces 1..8 expand group g = piece - 1 (32
 * elements of the 16 rows: 16 of the 64 B rows of each plane), piece 9
 * converts the row scales.  kpack_iq2_xxs runs them in order. */
typedef struct {
    const uint8_t *p[16];   /* the block of each strip row */
    kq_blk *pk;
    int next;               /* next piece, KQ_PIECES when done */
    __m512i t[16];          /* piece 0's transpose: t[2g] grid indices, t[2g + 1] signs and scale */
} kq_pjob;

#define KQ_PIECES 10

VKI static void kpiece_iq2_xxs(kq_pjob *j, int g)
{
    iq2_code_tab ct;
    iq2_code_tab_load(&ct, iq2_codes);
    const __m512i sg0 = _mm512_loadu_si512(ds4_iq2xxs_signs), sg1 = _mm512_loadu_si512(ds4_iq2xxs_signs + 64);
    const __m512i wlp = _mm512_load_si512(iq2_wlo[0]), wln = _mm512_load_si512(iq2_wlo[1]);
    const __m512i whp = _mm512_load_si512(iq2_whi[0]), whn = _mm512_load_si512(iq2_whi[1]);
    /* vpmultishiftqb controls (per qword: two rows' dwords): byte k of a
     * dword <- sign field k (bits 7k..), and <- the scale (bits 28..31) */
    uint64_t shs = 0, shl = 0;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++) {
            shs |= (uint64_t)(32 * h + 7 * k) << (8 * (4 * h + k));
            shl |= (uint64_t)(32 * h + 28) << (8 * (4 * h + k));
        }
    const __m512i msel = _mm512_set1_epi64((long long)shs), lsel = _mm512_set1_epi64((long long)shl);
    const __m512i k7f = _mm512_set1_epi8(0x7f), k0f = _mm512_set1_epi8(0x0f), k30 = _mm512_set1_epi8(0x30);
    const __m512i k70 = _mm512_set1_epi8(0x70);
    const __m512i idx = j->t[2 * g], aux = j->t[2 * g + 1];
    __m512i clo, chi;
    iq2_idx_codes(&ct, idx, &clo, &chi);
    /* sign byte of each entry (ds4_iq2xxs_signs: 128 entries) */
    const __m512i sf = _mm512_and_si512(_mm512_multishift_epi64_epi8(msel, aux), k7f);
    const __m512i sb = _mm512_permutex2var_epi8(sg0, sf, sg1);
    /* (ls - 1) / 2 in all four bytes */
    const __m512i lsb = _mm512_and_si512(_mm512_multishift_epi64_epi8(lsel, aux), k0f);
    kq_blk *pk = j->pk;
    for (int s = 0; s < 8; s++) {
        const __m512i cs = s < 4 ? clo : chi;
        const int e = s % 4;   /* code bits 2e, 2e + 1 -> bits 4, 5 */
        const __m512i cb = e == 0   ? _mm512_slli_epi16(cs, 4)
                           : e == 1 ? _mm512_slli_epi16(cs, 2)
                           : e == 2 ? cs
                                    : _mm512_srli_epi16(cs, 2);
        /* sign bit s of each entry -> bit 6 (word shifts: what crosses
         * a byte boundary is masked off below) */
        const __m512i ss = s < 6 ? _mm512_slli_epi16(sb, 6 - s) : s == 6 ? sb : _mm512_srli_epi16(sb, 1);
        const __m512i cx = _mm512_ternarylogic_epi32(cb, ss, k30, 0xe4);    /* bits 4-5 of cb, others of ss */
        const __m512i ix = _mm512_ternarylogic_epi32(cx, k70, lsb, 0xea);   /* (cx & 0x70) | lsb */
        _mm512_store_si512((void *)pk->b[0][8 * g + s], _mm512_permutex2var_epi8(wlp, ix, wln));
        _mm512_store_si512((void *)pk->b[1][8 * g + s], _mm512_permutex2var_epi8(whp, ix, whn));
    }
}

/* the job's pieces up to (not including) `upto` */
VKI static void kq_pjob_run(kq_pjob *j, int upto)
{
    for (; j->next < upto && j->next < KQ_PIECES; j->next++) {
        if (j->next == 0) rows_tr16(j->p, 2, j->t);
        else if (j->next <= 8) kpiece_iq2_xxs(j, j->next - 1);
        else strip_f16(j->p, 0, 0, j->pk->d, j->pk->dm);
    }
}

/* one strip and block at once: every piece in order */
VK static void kpack_iq2_xxs(const uint8_t *const *p, kq_blk *pk)
{
    kq_pjob j;
    memcpy(j.p, p, sizeof j.p);
    j.pk = pk;
    j.next = 0;
    kq_pjob_run(&j, KQ_PIECES);
}

/* The product of one block into C set s (lo C = 2s, hi C = 2s + 1): four
 * K = 64 steps, A alternating tmm4/5, B lo tmm6, hi tmm7. */
#define KSTEP1(c, a, bt, k) do { TLOAD(a, ap + 64 * (k), 256); TLOAD(bt, bp + 1024 * (k), 64); \
                                 TDPBSSD(c, a, bt); } while (0)
#define KPROD1(c) do { TZERO(c); KSTEP1(c, 4, 6, 0); KSTEP1(c, 5, 7, 1); KSTEP1(c, 4, 6, 2); \
                       KSTEP1(c, 5, 7, 3); } while (0)
#define KSTEP2(c, ch, a, k) do { TLOAD(a, ap + 64 * (k), 256); TLOAD(6, bp + 1024 * (k), 64); \
                                 TDPBSSD(c, a, 6); TLOAD(7, bp + 4096 + 1024 * (k), 64); \
                                 TDPBSSD(ch, a, 7); } while (0)
#define KPROD2(c, ch) do { TZERO(c); TZERO(ch); KSTEP2(c, ch, 4, 0); KSTEP2(c, ch, 5, 1); \
                           KSTEP2(c, ch, 4, 2); KSTEP2(c, ch, 5, 3); } while (0)

/* The float step of one block from its stored C tile(s) (c, ch: 16 x 16
 * int32, token rows), in the scalar expression of each format. */
VKI static void kfloat(int f, const kq_blk *pk, const kq_act *ak, int blk, const int32_t (*c)[16],
                       const int32_t (*ch)[16], __m512 acc[16])
{
    const __m512 wd = _mm512_load_ps(pk->d);
    if (f == F_IQ2_XXS) {
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++) {
            const __m512i is = _mm512_add_epi32(_mm512_load_si512((const void *)c[t]),
                                                _mm512_slli_epi32(_mm512_load_si512((const void *)ch[t]), 7));
            const __m512 d = _mm512_mul_ps(wd, _mm512_set1_ps(ak->d[blk][t]));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(d, _mm512_cvtepi32_ps(is)));
        }
        return;
    }
    const __m512 wm = _mm512_load_ps(pk->dm);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++) {
        __m512i is = _mm512_load_si512((const void *)c[t]);
        if (f == F_Q4_K) is = _mm512_add_epi32(is, _mm512_slli_epi32(_mm512_load_si512((const void *)ch[t]), 3));
        const int32_t *bp = ak->bs[blk][t];
        __m512i mn = _mm512_madd_epi16(_mm512_set1_epi32(bp[0]), pk->m[0]);
        __m512i mn1 = _mm512_madd_epi16(_mm512_set1_epi32(bp[1]), pk->m[1]);
        mn = _mm512_dpwssd_epi32(mn, _mm512_set1_epi32(bp[2]), pk->m[2]);
        mn1 = _mm512_dpwssd_epi32(mn1, _mm512_set1_epi32(bp[3]), pk->m[3]);
        mn = _mm512_dpwssd_epi32(mn, _mm512_set1_epi32(bp[4]), pk->m[4]);
        mn1 = _mm512_dpwssd_epi32(mn1, _mm512_set1_epi32(bp[5]), pk->m[5]);
        mn = _mm512_dpwssd_epi32(mn, _mm512_set1_epi32(bp[6]), pk->m[6]);
        mn1 = _mm512_dpwssd_epi32(mn1, _mm512_set1_epi32(bp[7]), pk->m[7]);
        mn = _mm512_add_epi32(mn, mn1);
        const __m512 ad = _mm512_set1_ps(ak->d[blk][t]);
        const __m512 dall = _mm512_mul_ps(wd, ad), dmin = _mm512_mul_ps(wm, ad);
        acc[t] = _mm512_add_ps(acc[t], _mm512_sub_ps(_mm512_mul_ps(dall, _mm512_cvtepi32_ps(is)),
                                                     _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn))));
    }
}

/* One token tile x one packed strip, kn >= 1 blocks, pipelined as
 * tile_blocks: block b's C stored, block b + 1's product issued, then the
 * float step of block b - 1 from a C stored an iteration earlier. */
VKI static void ktile_blocks(int f, const kq_pack *pk, int kn, const kq_act *ak, __m512 acc[16],
                             int32_t cb[2][2][16][16])
{
    const int two = f != F_Q2_K;
    const int8_t *ap, *bp;
#define KPRODUCT(set, bi)                                         \
    do {                                                           \
        ap = &ak->q[bi][0][0];                                    \
        bp = &pk->blk[bi].b[0][0][0];                             \
        if (two) {                                                 \
            if (set) KPROD2(2, 3); else KPROD2(0, 1);              \
        } else {                                                   \
            if (set) KPROD1(2); else KPROD1(0);                    \
        }                                                          \
    } while (0)
#define KSTORE(set)                                                \
    do {                                                           \
        if (set) { TSTORE(2, cb[1][0], 64); if (two) TSTORE(3, cb[1][1], 64); } \
        else { TSTORE(0, cb[0][0], 64); if (two) TSTORE(1, cb[0][1], 64); }     \
    } while (0)
#define KFLOAT(set, bi) kfloat(f, &pk->blk[bi], ak, bi, cb[set][0], cb[set][1], acc)
    KPRODUCT(0, 0);
    KSTORE(0);
    if (kn == 1) {
        KFLOAT(0, 0);
        return;
    }
    KPRODUCT(1, 1);
    for (int b = 1;; b += 2) {
        KSTORE(1);
        if (b + 1 < kn) KPRODUCT(0, b + 1);
        KFLOAT(0, b - 1);
        if (b + 1 >= kn) {
            KFLOAT(1, b);
            break;
        }
        KSTORE(0);
        if (b + 2 < kn) KPRODUCT(1, b + 2);
        KFLOAT(1, b);
        if (b + 2 >= kn) {
            KFLOAT(0, b + 1);
            break;
        }
    }
#undef KPRODUCT
#undef KSTORE
#undef KFLOAT
}

/* Two token tiles x one packed strip, kn >= 1 blocks: the B tiles of each
 * K step are loaded once for both, and the products of a block form two
 * (Q2_K) or four (lo/hi planes) independent TDPBSSD chains instead of one
 * or two -- four dependent TDPBSSD on one C wait for each other's
 * latency.  All eight tiles are in use (C 0..3: tile 0 lo/hi, tile 1
 * lo/hi; A 4, 5; B 6, 7), so the pipeline is one deep: block b's C
 * stored, block b + 1's product issued, block b's float step. */
#define KSTEPP(k, two)                                                           \
    do {                                                                         \
        TLOAD(4, ap0 + 64 * (k), 256); TLOAD(5, ap1 + 64 * (k), 256);           \
        TLOAD(6, bp + 1024 * (k), 64); TDPBSSD(0, 4, 6); TDPBSSD(2, 5, 6);      \
        if (two) { TLOAD(7, bp + 4096 + 1024 * (k), 64); TDPBSSD(1, 4, 7); TDPBSSD(3, 5, 7); } \
    } while (0)
VKI static void ktile2_blocks(int f, const kq_pack *pk, int kn, const kq_act *ak0, const kq_act *ak1,
                              __m512 acc0[16], __m512 acc1[16], int32_t cb[4][16][16])
{
    const int two = f != F_Q2_K;
    const int8_t *ap0, *ap1, *bp;
#define KPRODP(bi)                                                        \
    do {                                                                  \
        ap0 = &ak0->q[bi][0][0]; ap1 = &ak1->q[bi][0][0];                 \
        bp = &pk->blk[bi].b[0][0][0];                                     \
        TZERO(0); TZERO(2); if (two) { TZERO(1); TZERO(3); }              \
        KSTEPP(0, two); KSTEPP(1, two); KSTEPP(2, two); KSTEPP(3, two);   \
    } while (0)
    KPRODP(0);
    for (int b = 0; b < kn; b++) {
        TSTORE(0, cb[0], 64); TSTORE(2, cb[2], 64);
        if (two) { TSTORE(1, cb[1], 64); TSTORE(3, cb[3], 64); }
        if (b + 1 < kn) KPRODP(b + 1);
        kfloat(f, &pk->blk[b], ak0, b, cb[0], cb[1], acc0);
        kfloat(f, &pk->blk[b], ak1, b, cb[2], cb[3], acc1);
    }
#undef KPRODP
}

/* IQ2_XXS, one block a K chunk (kn == 1): np (1 or 2) token tiles x one
 * packed strip, tile registers as ktile2_blocks.  The float sums are read
 * from y only after the products are issued and written back after the
 * float step, so no accumulator is live across the products, and the
 * pieces of the next strip's pack (job, or NULL; up to piece `upto`) run
 * between the K steps: vector work the core overlaps with the tile unit
 * (bench_kernels, one thread, expert_up: 32 tokens +18-27 %, 48 +2-10 %,
 * 64 +9-12 %, against the whole pack before the strip's passes).  Each sum gets
 * the operations of ktile(2)_blocks with kn = 1 and kamx_group's
 * load/store, so the same bits. */
VKI static void ktile_one_iq2(const kq_pack *pk, int np, const kq_act *ak0, const kq_act *ak1, kq_pjob *job,
                              int upto, float *y, size_t ys, __mmask16 m, const int nt[2], int first, int last,
                              int32_t cb[4][16][16])
{
    const int from = job ? job->next : 0;
    const int8_t *bp = &pk->blk[0].b[0][0][0], *ap0 = &ak0->q[0][0][0], *ap1 = &ak1->q[0][0][0];
    TZERO(0);
    TZERO(1);
    if (np == 2) {
        TZERO(2);
        TZERO(3);
    }
    for (int k = 0; k < 4; k++) {
        TLOAD(4, ap0 + 64 * k, 256);
        TLOAD(6, bp + 1024 * k, 64);
        TDPBSSD(0, 4, 6);
        if (np == 2) {
            TLOAD(5, ap1 + 64 * k, 256);
            TDPBSSD(2, 5, 6);
        }
        TLOAD(7, bp + 4096 + 1024 * k, 64);
        TDPBSSD(1, 4, 7);
        if (np == 2) TDPBSSD(3, 5, 7);
        if (job) kq_pjob_run(job, from + (upto - from) * (k + 1) / 4);
    }
    TSTORE(0, cb[0], 64);
    TSTORE(1, cb[1], 64);
    if (np == 2) {
        TSTORE(2, cb[2], 64);
        TSTORE(3, cb[3], 64);
    }
    for (int u = 0; u < np; u++) {
        float *yu = y + (size_t)(16 * u) * ys;
        __m512 acc[16];
#pragma GCC unroll 16
        for (int t = 0; t < 16; t++)
            acc[t] = first || t >= nt[u] ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, yu + (size_t)t * ys);
        kfloat(F_IQ2_XXS, &pk->blk[0], u ? ak1 : ak0, 0, cb[2 * u], cb[2 * u + 1], acc);
        if (last)
            for (int t = 0; t < 16; t++) acc[t] = _mm512_mul_ps(_mm512_set1_ps(0.125f), acc[t]);
        for (int t = 0; t < nt[u]; t++) _mm512_mask_storeu_ps(yu + (size_t)t * ys, m, acc[t]);
    }
}

/* Blocks per K chunk for ntile token tiles.  A chunk's working set is
 * ntile x kc x 4.6 KiB of staged activations (A tiles) plus kc x 8.6 KiB
 * of packed weights: at KCK = 4 and 3 token tiles (the routed experts'
 * ~48 tokens a call) that is about 90 KiB, and every tile load came from L2.
 * One block per chunk keeps a few tiles' working set in L1 for the
 * price of reloading the float sums from y once per block instead of
 * once per KCK blocks (what makes it slower for many tiles).  Measured
 * (bench_kernels --cached, one thread, amx, expert_up, Intel AMX VM,
 * docs/PERF_KERNELS.md): kc = 1 is faster up to 96 tokens for IQ2_XXS
 * (48 tokens: -17 %), up to 80 for Q4_K, up to 48 for Q2_K (-11 %), and
 * KCK beyond; the float order per block is the same either way (the sums
 * wait in y as float32 between chunks), so the results are too. */
static int kq_chunk(int f, int ntile)
{
    const int lim = f == F_IQ2_XXS ? 6 : f == F_Q4_K ? 5 : 3;
    return ntile <= lim ? 1 : KCK;
}

/* Bytes [off, off + len) of strip r0's rows into L2, if there is such a
 * strip: the one after the strip being packed, while it is computed (the
 * Q8_0/MXFP4 and K-quant paths alike). */
static void strip_prefetch(const uint8_t *w, size_t ws, int nrows, int r0, size_t off, size_t len)
{
    const int nx = nrows - r0 < 16 ? nrows - r0 : 16;
    for (int r = 0; r < nx; r++) {
        const char *pp = (const char *)w + (size_t)(r0 + r) * ws + off;
        for (size_t o = 0; o < len; o += 64) _mm_prefetch(pp + o, _MM_HINT_T1);
    }
}

/* Pack strip r0 (rows r0 .. r0 + 15; rows past nrows repeat the last one:
 * computed, never stored) of K chunk [kb, kb + kn), and prefetch the
 * strip after it into L2. */
VK static void kpack_strip(int f, const uint8_t *w, size_t ws, int nrows, int r0, int kb, int kn, size_t bsz,
                           kq_pack *pk)
{
    const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
    const uint8_t *rows[16];
    for (int r = 0; r < 16; r++) rows[r] = w + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws + (size_t)kb * bsz;
    strip_prefetch(w, ws, nrows, r0 + 16, (size_t)kb * bsz, (size_t)kn * bsz);
    for (int b = 0; b < kn; b++) {
        const uint8_t *p[16];
        for (int r = 0; r < 16; r++) p[r] = rows[r] + (size_t)b * bsz;
        if (f == F_Q2_K) kpack_q2_K(p, &pk->blk[b]);
        else if (f == F_Q4_K) kpack_q4_K(p, &pk->blk[b]);
        else kpack_iq2_xxs(p, &pk->blk[b]);
    }
}

/* A pack job for block kb of strip r0 (rows past nrows repeat the last
 * one), with the strip after it prefetched into L2 as kpack_strip does. */
static void kq_pjob_init(kq_pjob *j, const uint8_t *w, size_t ws, int nrows, int r0, int kb, size_t bsz, kq_blk *pk)
{
    const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
    for (int r = 0; r < 16; r++) j->p[r] = w + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws + (size_t)kb * bsz;
    strip_prefetch(w, ws, nrows, r0 + 16, (size_t)kb * bsz, bsz);
    j->pk = pk;
    j->next = 0;
}

/* Token group [0, ntok) (ntok <= TGK) of the tile contract in quant.h;
 * pk: the thread's two strip packs, act: its staged token tiles. */
VK static void kamx_group(int f, int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok,
                          float *y, size_t ys, kq_pack *pk, kq_act *act)
{
    const size_t bsz = f == F_Q2_K ? sizeof(block_q2_K) : f == F_Q4_K ? sizeof(block_q4_K) : sizeof(block_iq2_xxs);
    const int nb = n / QK_K;
    const int ntile = (ntok + 15) / 16;
    int32_t cb[2][2][16][16] __attribute__((aligned(64)));   /* C tiles, stored */
    int32_t cb2[4][16][16] __attribute__((aligned(64)));
    const __m512i perm = _mm512_load_si512(iq2_act_perm);
    const int kc = kq_chunk(f, ntile);
    for (int kb = 0; kb < nb; kb += kc) {
        const int kn = nb - kb < kc ? nb - kb : kc;
        const int last = kb + kn == nb;
        for (int t = 0; t < ntile * 16; t++) {
            kq_act *ak = &act[t / 16];
            const int tr = t % 16;
            for (int b = 0; b < kn; b++) {
                if (t < ntok) {
                    const block_q8_K *src = (const block_q8_K *)a[t] + kb + b;
                    for (int q = 0; q < 4; q++) {
                        __m512i v = _mm512_loadu_si512(src->qs + 64 * q);
                        if (f == F_IQ2_XXS) v = _mm512_permutexvar_epi8(perm, v);
                        _mm512_store_si512((void *)(ak->q[b][tr] + 64 * q), v);
                    }
                    ak->d[b][tr] = src->d;
                    memcpy(ak->bs[b][tr], src->bsums, sizeof src->bsums);
                } else {
                    for (int q = 0; q < 4; q++) _mm512_store_si512((void *)(ak->q[b][tr] + 64 * q), _mm512_setzero_si512());
                    ak->d[b][tr] = 0.0f;
                    memset(ak->bs[b][tr], 0, sizeof ak->bs[b][tr]);
                }
            }
        }
        /* the strips' packs alternate between two buffers, so that strip
         * r0 + 16 is packed while strip r0's token tiles still read theirs
         * (packing into the buffer the tile loads read made the pack wait
         * for them): vector work the core overlaps with the tile unit */
        kq_pack *pkc = &pk[0], *pkn = &pk[1];
        kpack_strip(f, w, ws, nrows, 0, kb, kn, bsz, pkc);
        for (int r0 = 0; r0 < nrows; r0 += 16) {
            const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
            const __mmask16 m = (__mmask16)((1u << nr) - 1);
            int packed = r0 + 16 >= nrows;
            if (kn == 1 && f == F_IQ2_XXS) {
                /* the next strip's pack in pieces spread over the passes */
                kq_pjob job, *jp = NULL;
                if (!packed) {
                    kq_pjob_init(&job, w, ws, nrows, r0 + 16, kb, bsz, &pkn->blk[0]);
                    jp = &job;
                }
                const int npass = (ntile + 1) / 2;
                for (int ti = 0, pass = 0; ti < ntile; pass++) {
                    const int np = ti + 1 < ntile ? 2 : 1;
                    const int nt[2] = { ntok - 16 * ti < 16 ? ntok - 16 * ti : 16,
                                        ntok - 16 * (ti + 1) < 16 ? ntok - 16 * (ti + 1) : 16 };
                    if (kb == 0 && r0 + 16 < nrows)
                        y_prefetchw(y + (size_t)(16 * ti) * ys + r0 + 16, ys, nt[0] + (np == 2 ? nt[1] : 0));
                    ktile_one_iq2(pkc, np, &act[ti], &act[ti + np - 1], jp, (pass + 1) * KQ_PIECES / npass,
                                  y + (size_t)(16 * ti) * ys + r0, ys, m, nt, kb == 0, last, cb2);
                    ti += np;
                }
                if (jp) kq_pjob_run(jp, KQ_PIECES);
                kq_pack *tmp = pkc; pkc = pkn; pkn = tmp;
                continue;
            }
            for (int ti = 0; ti < ntile;) {
                const int np = ti + 1 < ntile ? 2 : 1;   /* token tiles in this pass */
                __m512 acc[2][16];
                for (int u = 0; u < np; u++) {
                    const int t0 = (ti + u) * 16, nt = ntok - t0 < 16 ? ntok - t0 : 16;
#pragma GCC unroll 16
                    for (int t = 0; t < 16; t++)
                        acc[u][t] = kb == 0 || t >= nt ? _mm512_setzero_ps()
                                                       : _mm512_maskz_loadu_ps(m, y + (size_t)(t0 + t) * ys + r0);
                }
                if (kb == 0 && r0 + 16 < nrows) {
                    const int t0 = ti * 16, ntp = ntok - t0 < 16 * np ? ntok - t0 : 16 * np;
                    y_prefetchw(y + (size_t)t0 * ys + r0 + 16, ys, ntp);
                }
                if (np == 2) {
                    if (f == F_Q2_K) ktile2_blocks(F_Q2_K, pkc, kn, &act[ti], &act[ti + 1], acc[0], acc[1], cb2);
                    else if (f == F_Q4_K) ktile2_blocks(F_Q4_K, pkc, kn, &act[ti], &act[ti + 1], acc[0], acc[1], cb2);
                    else ktile2_blocks(F_IQ2_XXS, pkc, kn, &act[ti], &act[ti + 1], acc[0], acc[1], cb2);
                } else {
                    if (f == F_Q2_K) ktile_blocks(F_Q2_K, pkc, kn, &act[ti], acc[0], cb);
                    else if (f == F_Q4_K) ktile_blocks(F_Q4_K, pkc, kn, &act[ti], acc[0], cb);
                    else ktile_blocks(F_IQ2_XXS, pkc, kn, &act[ti], acc[0], cb);
                }
                /* the next strip whole: after the first pass for one
                 * block (overlapping its products' tail), after the last
                 * for more (a KCK-block pack between the passes pushed the
                 * current strip's tiles out of L1) */
                if (!packed && (kn == 1 || ti + np >= ntile)) {
                    kpack_strip(f, w, ws, nrows, r0 + 16, kb, kn, bsz, pkn);
                    packed = 1;
                }
                for (int u = 0; u < np; u++) {
                    const int t0 = (ti + u) * 16, nt = ntok - t0 < 16 ? ntok - t0 : 16;
                    if (last && f == F_IQ2_XXS)
                        for (int t = 0; t < 16; t++) acc[u][t] = _mm512_mul_ps(_mm512_set1_ps(0.125f), acc[u][t]);
                    for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * ys + r0, m, acc[u][t]);
                }
                ti += np;
            }
            kq_pack *tmp = pkc; pkc = pkn; pkn = tmp;
        }
    }
}

/* Per-thread buffers, shared by the two tile paths (a thread runs one
 * call at a time): Q8_0/MXFP4 313 kB, K-quants 370 kB (two strip packs). */
static _Thread_local union {
    struct { amx_pack pk; amx_act act[TG / 16]; } q8;
    struct { kq_pack pk[2]; kq_act act[TGK / 16]; } k;
} tl __attribute__((aligned(64)));

/* Token group [0, ntok) (ntok <= TG) of the tile contract in quant.h. */
VT static void amx_group(int f, int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok,
                         float *y, size_t ys, int nts)
{
    const int nb = n / 32;
    const int ntile = (ntok + 15) / 16;
    int32_t cb[2][16][16] __attribute__((aligned(64)));   /* C tiles, stored */
    for (int kb = 0; kb < nb; kb += KC) {
        const int kn = nb - kb < KC ? nb - kb : KC;
        /* the activations of this chunk in tile order (dense A tiles),
         * zero past the last token */
        for (int t = 0; t < ntile * 16; t++) {
            amx_act *ak = &tl.q8.act[t / 16];
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
            const size_t bb = f == F_Q8_0 ? sizeof(block_q8_0) : sizeof(block_mxfp4);
            strip_prefetch(w, ws, nrows, r0 + 16, (size_t)kb * bb, (size_t)kn * bb);
            pack_strip(f, w + (size_t)r0 * ws, ws, nr, kb, kn, &tl.q8.pk);
            for (int ti = 0; ti < ntile; ti++) {
                const int t0 = ti * 16, nt = ntok - t0 < 16 ? ntok - t0 : 16;
                __m512 acc[16];
#pragma GCC unroll 16
                for (int t = 0; t < 16; t++)
                    acc[t] = kb == 0 || t >= nt ? _mm512_setzero_ps()
                                                : _mm512_maskz_loadu_ps(m, y + (size_t)(t0 + t) * ys + r0);
                if (kb == 0 && !nts && r0 + 16 < nrows) y_prefetchw(y + (size_t)t0 * ys + r0 + 16, ys, nt);
                tile_blocks(&tl.q8.pk, kn, &tl.q8.act[ti], acc, cb);
                /* the last chunk's sums, streamed where ds4_stream_out says */
                if (nts && kb + kn == nb && nr == 16) {
#pragma GCC unroll 16
                    for (int t = 0; t < nt; t++) _mm512_stream_ps(y + (size_t)(t0 + t) * ys + r0, acc[t]);
                } else {
#pragma GCC unroll 16
                    for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * ys + r0, m, acc[t]);
                }
            }
        }
    }
}

VT static void amx_tile(int f, ds4_tile_fn fallback, int n, const void *w, size_t ws, int nrows,
                        const void *const *a, int ntok, float *y, size_t ys)
{
    /* small batches (an A tile would be mostly padding, and the weight
     * transpose would not be amortized; quant.h), and row strides the
     * 32-bit gather indices cannot hold: the avx512 tile */
    const int min_tok = f == F_Q8_0 ? DS4_AMX_MIN_TOK : DS4_AMX_MIN_TOK_MXFP4;
    if (ntok < min_tok || nrows <= 0 || ws > (size_t)INT32_MAX / 16) {
        fallback(n, w, ws, nrows, a, ntok, y, ys);
        return;
    }
    /* streamed only where the first chunk is the last: with more chunks
     * the sums pass through y, so its lines are read at the first anyway
     * (there y_prefetchw helps instead) */
    const int nts = ds4_stream_out(y, ys, ntok) && n / 32 <= KC;
    TCFG(&amx_cfg);
    for (int j0 = 0; j0 < ntok; j0 += TG) {
        const int nt = ntok - j0 < TG ? ntok - j0 : TG;
        amx_group(f, n, w, ws, nrows, a + j0, nt, y + (size_t)j0 * ys, ys, nts);
    }
    if (nts) _mm_sfence();   /* streamed stores visible before the pool's barrier */
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

VK static void kamx_tile(int f, ds4_tile_fn fallback, int min_tok, int n, const void *w, size_t ws, int nrows,
                         const void *const *a, int ntok, float *y, size_t ys)
{
    if (ntok < min_tok || nrows <= 0) {
        fallback(n, w, ws, nrows, a, ntok, y, ys);
        return;
    }
    TCFG(&amx_kcfg);
    for (int j0 = 0; j0 < ntok; j0 += TGK) {
        const int nt = ntok - j0 < TGK ? ntok - j0 : TGK;
        kamx_group(f, n, w, ws, nrows, a + j0, nt, y + (size_t)j0 * ys, ys, tl.k.pk, tl.k.act);
    }
    TRELEASE();
}

static void amx_q2_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                               float *y, size_t ys)
{
    kamx_tile(F_Q2_K, amx_base->q2_K_q8_K_tile, DS4_AMX_MIN_TOK_Q2_K, n, w, ws, nrows, a, ntok, y, ys);
}

static void amx_q4_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                               float *y, size_t ys)
{
    kamx_tile(F_Q4_K, amx_base->q4_K_q8_K_tile, DS4_AMX_MIN_TOK_Q4_K, n, w, ws, nrows, a, ntok, y, ys);
}

static void amx_iq2_xxs_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                  float *y, size_t ys)
{
    kamx_tile(F_IQ2_XXS, amx_base->iq2_xxs_q8_K_tile, DS4_AMX_MIN_TOK_IQ2_XXS, n, w, ws, nrows, a, ntok, y, ys);
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
    amx_kernels.q2_K_q8_K_tile = amx_q2_K_q8_K_tile;
    amx_kernels.q4_K_q8_K_tile = amx_q4_K_q8_K_tile;
    iq2_init();
    amx_kernels.iq2_xxs_q8_K_tile = amx_iq2_xxs_q8_K_tile;
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
