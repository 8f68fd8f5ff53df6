/*
 * quant_avx2.c -- AVX2/FMA/F16C versions of every kernel of ds4_kernels.
 *
 * Owns: the "avx2" kernel table and the run-time check that the CPU can run
 * it.  Shapes: one token (decode) runs rows-wide kernels reduced 8 rows at
 * a time; a few tokens run tiles that share each row's unpacking among up
 * to 4 or 8 tokens; batches (prefill, from 8 or 16 tokens) run tiles with
 * tokens in the 8 lanes, activations repacked per slice on the stack.
 * Every function is compiled with target("avx2,fma,f16c"), so the table
 * exists even in a build without -march=native; ds4_kernels_avx2() hands it
 * out only when __builtin_cpu_supports says so.
 * Must not: change results at all: every kernel keeps the operation order
 * of the scalar table (quant.h, docs/NUMERICS.md), so the two give the same
 * bits (tests/test_kernels.c); know about models or threads, or allocate.
 * Integer formats: the integer sum of every block is exact in any order,
 * so only its float work is pinned: reduce the block to one integer, then
 * scale and add it to the running sum in block order with the scalar
 * kernel's separate roundings.
 *
 * Activation contract (true for every quantizer in quant.c): Q8_K
 * activations never contain -128, because the kernels apply signs with
 * _mm256_sign_epi8 to the activation bytes.  Q8_0 / Q8_0a activations may
 * (ds4's rule allows -128 for subnormal blocks); the Q8_0 kernels detect it
 * and fall back to the scalar kernel for that row -- except the tile for
 * weights without -128 codes (q8_0_q8_0a_tile_sym), which puts the signs
 * on the weights and takes any activation.
 */
#include "kernels/quant.h"

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))

TGT static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

TGT static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

/* ------------------------------------------------------------------------ */
/* Q8_0 x Q8_0 / Q8_0a                                                      */
/* ------------------------------------------------------------------------ */

#define TGTI __attribute__((target("avx2,fma,f16c"), always_inline)) inline

TGT static inline int32_t hsum_i32x4(__m128i s)
{
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The exact lane sums of two vectors at once (one shared reduction). */
TGT static inline void hsum2_i32(__m256i a, __m256i b, int32_t *sa, int32_t *sb)
{
    const __m256i t = _mm256_hadd_epi32(a, b);   /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    u = _mm_hadd_epi32(u, u);                      /* a b a b */
    *sa = _mm_cvtsi128_si32(u);
    *sb = _mm_extract_epi32(u, 1);
}

/* Eight blocks' lane vectors -> one vector whose lane b is block b's total
 * (integer, exact): each folded to 128 bits, then two rounds of 128-bit
 * vphaddd.  (256-bit vphaddd rounds and a vperm2i128 to finish cost twice
 * the uops on cores that split 256-bit work, Zen 1: 8 uops a vperm2i128.) */
TGT static inline __m256i red8_i32(const __m256i *s)
{
    __m128i x[8];
    for (int r = 0; r < 8; r++) x[r] = _mm_add_epi32(_mm256_castsi256_si128(s[r]), _mm256_extracti128_si256(s[r], 1));
    const __m128i t0 = _mm_hadd_epi32(_mm_hadd_epi32(x[0], x[1]), _mm_hadd_epi32(x[2], x[3]));
    const __m128i t1 = _mm_hadd_epi32(_mm_hadd_epi32(x[4], x[5]), _mm_hadd_epi32(x[6], x[7]));
    return _mm256_set_m128i(t1, t0);
}

/* Q8_0 weights x Q8_0 (f16 scale, fa = 0) or Q8_0a (float scale, fa = 1)
 * activations, one row and one token, in the scalar order: per block
 * sumf += (float)sumi * (d_w * d_a), blocks in order.  Blocks go in groups
 * of 8: their integer sums reduced together (red8_i32), the 8 float terms
 * made in one vector (the same two roundings per lane as the scalar
 * expression), then added to sumf one by one.  Block products: maddubs
 * needs an unsigned operand, so |w| (128 for w = -128 is fine as u8) times
 * a with w's sign; exact unless a = -128 meets a negative w (the negation
 * wraps).  Returns 1 when an activation code is -128 (the caller then runs
 * the scalar kernel, which gives the same order anyway). */
TGTI static int q8_row(int n, const block_q8_0 *w, const void *va, int fa, float *out)
{
    const int nb = n / QK8_0;
    const size_t astride = fa ? sizeof(block_q8_0a) : sizeof(block_q8_0);
    const uint8_t *ab = va;
    const __m256i ones = _mm256_set1_epi16(1), m128 = _mm256_set1_epi8(-128);
    __m256i bad = _mm256_setzero_si256();
    float sumf = 0.0f;
    for (int i0 = 0; i0 < nb; i0 += 8) {
        const int g = nb - i0 < 8 ? nb - i0 : 8;
        __m256i s[8];
        float dw[8], da[8];
        for (int b = 0; b < 8; b++) {
            if (b >= g) { s[b] = _mm256_setzero_si256(); dw[b] = da[b] = 0.0f; continue; }
            const block_q8_0 *wb = w + i0 + b;
            const uint8_t *a = ab + (size_t)(i0 + b) * astride;
            const int8_t *aq = (const int8_t *)(a + (fa ? 4 : 2));
            const __m256i qw = _mm256_loadu_si256((const __m256i *)wb->qs);
            const __m256i qa = _mm256_loadu_si256((const __m256i *)aq);
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(qa, m128));
            s[b] = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qa, qw)), ones);
            dw[b] = h2f(wb->d);
            if (fa) memcpy(&da[b], a, 4);
            else { uint16_t h; memcpy(&h, a, 2); da[b] = h2f(h); }
        }
        const __m256 tot = _mm256_cvtepi32_ps(red8_i32(s));
        float t[8];
        _mm256_storeu_ps(t, _mm256_mul_ps(tot, _mm256_mul_ps(_mm256_loadu_ps(dw), _mm256_loadu_ps(da))));
        for (int b = 0; b < g; b++) sumf += t[b];
    }
    *out = sumf;
    return !_mm256_testz_si256(bad, bad);
}

TGT static float v_q8_0_q8_0(int n, const void *vw, const void *va)
{
    float y;
    if (q8_row(n, vw, va, 0, &y))
        return ds4_kernels_scalar()->q8_0_q8_0(n, vw, va);
    return y;
}

/* The tiles: each token's dot is the single-row kernel's (a row of Q8_0 is
 * at most a few KB, so the C tokens after the first read it from L1). */
TGTI static void q8_0a_tok(int n, const void *vw, const void *const *va, float *out, int C)
{
    for (int j = 0; j < C; j++)
        if (q8_row(n, vw, va[j], 1, &out[j]))
            out[j] = ds4_kernels_scalar()->q8_0_q8_0a(n, vw, va[j]);
}

TGT static float v_q8_0_q8_0a(int n, const void *vw, const void *va)
{
    float y;
    q8_0a_tok(n, vw, &va, &y, 1);
    return y;
}

/* ------------------------------------------------------------------------ */
/* Q2_K x Q8_K                                                              */
/* ------------------------------------------------------------------------ */

/* pshufb patterns that put, within each 128-bit lane of a vector holding
 * the 16 sub-block scale bytes (low nibbles) in both lanes, scale 8h + 2j
 * in every int16 word of the low lane and 8h + 2j + 1 in the high lane
 * (the two 16-element halves of chunk j of half h), high bytes zeroed:
 * vpmaddwd operands straight from the block's bytes (no widening, no lane
 * crossing: vperm2i128 is 8 uops on Zen 1). */
#define SC_PAIR(k) _mm256_setr_epi8( \
    (k), -1, (k), -1, (k), -1, (k), -1, (k), -1, (k), -1, (k), -1, (k), -1, \
    (k)+1, -1, (k)+1, -1, (k)+1, -1, (k)+1, -1, (k)+1, -1, (k)+1, -1, (k)+1, -1, (k)+1, -1)

/* Prefetch into L1 every line of pf up to byte `end` not yet asked for
 * (pl: the next line), so that a row streams in step with the one being
 * computed and both ends of each block are covered; pf NULL: nothing. */
#define PF_SPREAD(pf, pl, end)                                                        \
    do {                                                                              \
        if (pf)                                                                       \
            for (const uintptr_t pe_ = (uintptr_t)(pf) + (end); (pl) < pe_; (pl) += 64) \
                _mm_prefetch((const char *)(pl), _MM_HINT_T0);                        \
    } while (0)

/* a Q2_K block's 16 mins (high nibbles of its scale bytes) as int16 */
TGT static inline __m256i q2k_mins(__m128i raw)
{
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
}

/* vout != NULL (one token): instead of the float step, store block i's
 * two lane vectors (sums, min sums) at vout[2i], vout[2i+1] for kq_rows8. */
TGTI static void q2_K_tok(int n, const void *vw, const void *const *va, float *out, int C, __m256i *vout,
                          const uint8_t *pf)
{
    const block_q2_K *w = vw;
    const int nb = n / QK_K;
    uintptr_t pl = (uintptr_t)pf & ~(uintptr_t)63;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sumf[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    __m256i pms[4];

    for (int i = 0; i < nb; i++) {
        PF_SPREAD(pf, pl, (size_t)(i + 1) * sizeof(block_q2_K));
        const float wd = h2f(w[i].d), wdmin = h2f(w[i].dmin);
        /* min term: sum_j (scales[j] >> 4) * bsums[j] */
        const __m128i raw = _mm_loadu_si128((const __m128i *)w[i].scales);
        const __m256i mins = q2k_mins(raw);
        /* the 16 scales (low nibbles) in both lanes */
        const __m256i sc = _mm256_and_si256(_mm256_broadcastsi128_si256(raw), _mm256_set1_epi8(0x0f));
        __m256i sumi[4];
        for (int j = 0; j < C; j++) {
            const block_q8_K *a = va[j];
            const __m256i pm = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)a[i].bsums));
            pms[j] = pm;
            sumi[j] = _mm256_setzero_si256();
        }
        for (int h = 0; h < 2; h++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            const __m256i c0 = _mm256_and_si256(bits, m3);
            const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(bits, 2), m3);
            const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m3);
            const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(bits, 6), m3);
            const __m256i s0 = _mm256_shuffle_epi8(sc, SC_PAIR(8 * h + 0)), s1 = _mm256_shuffle_epi8(sc, SC_PAIR(8 * h + 2));
            const __m256i s2 = _mm256_shuffle_epi8(sc, SC_PAIR(8 * h + 4)), s3 = _mm256_shuffle_epi8(sc, SC_PAIR(8 * h + 6));
            for (int j = 0; j < C; j++) {
                const int8_t *q8 = ((const block_q8_K *)va[j])[i].qs + 128 * h;
                __m256i p0 = _mm256_maddubs_epi16(c0, _mm256_loadu_si256((const __m256i *)(q8 + 0)));
                __m256i p1 = _mm256_maddubs_epi16(c1, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
                __m256i p2 = _mm256_maddubs_epi16(c2, _mm256_loadu_si256((const __m256i *)(q8 + 64)));
                __m256i p3 = _mm256_maddubs_epi16(c3, _mm256_loadu_si256((const __m256i *)(q8 + 96)));
                p0 = _mm256_madd_epi16(p0, s0);
                p1 = _mm256_madd_epi16(p1, s1);
                p2 = _mm256_madd_epi16(p2, s2);
                p3 = _mm256_madd_epi16(p3, s3);
                sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(_mm256_add_epi32(p0, p1),
                                                                     _mm256_add_epi32(p2, p3)));
            }
        }
        if (vout) { vout[2 * i] = sumi[0]; vout[2 * i + 1] = pms[0]; continue; }
        /* the scalar kernel's float step, its roundings in its order */
        for (int j = 0; j < C; j++) {
            const block_q8_K *a = va[j];
            const float dall = a[i].d * wd, dmin = a[i].d * wdmin;
            int32_t isum, summs;
            hsum2_i32(sumi[j], pms[j], &isum, &summs);
            sumf[j] += dall * (float)isum - dmin * (float)summs;
        }
    }
    if (!vout)
        for (int j = 0; j < C; j++) out[j] = sumf[j];
}

TGT static float v_q2_K_q8_K(int n, const void *vw, const void *va)
{
    float y;
    q2_K_tok(n, vw, &va, &y, 1, NULL, NULL);
    return y;
}

/* ------------------------------------------------------------------------ */
/* Q4_K x Q8_K                                                              */
/* ------------------------------------------------------------------------ */

/* Broadcast int16 word k of each 128-bit lane to the whole lane. */
#define SC_ONE(k) _mm256_setr_epi8( \
    2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, \
    2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, \
    2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, \
    2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1, 2*(k), 2*(k)+1)

/* the 12 packed bytes of a Q4_K block into 8 scales (u[0..1]) and 8 mins
 * (u[2..3]) of 6 bits, one byte each */
static inline void q4k_scales_mins(const uint8_t *scales, uint32_t u[4])
{
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
    u[1] = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3fu;
}

TGTI static void q4_K_tok(int n, const void *vw, const void *const *va, float *out, int C, __m256i *vout,
                          const uint8_t *pf)
{
    const block_q4_K *w = vw;
    const int nb = n / QK_K;
    uintptr_t pl = (uintptr_t)pf & ~(uintptr_t)63;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i sh[8] = { SC_ONE(0), SC_ONE(1), SC_ONE(2), SC_ONE(3),
                            SC_ONE(4), SC_ONE(5), SC_ONE(6), SC_ONE(7) };
    float sumf[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    __m128i pms[4];

    for (int i = 0; i < nb; i++) {
        PF_SPREAD(pf, pl, (size_t)(i + 1) * sizeof(block_q4_K));
        const float wd = h2f(w[i].d), wdmin = h2f(w[i].dmin);

        uint32_t u[4];
        q4k_scales_mins(w[i].scales, u);
        const __m256i ms = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
        const __m128i mhi = _mm256_extracti128_si256(ms, 1);

        /* min term: mins[j] times the sum of the 32 activations of
         * sub-block j (pairs of bsums) */
        __m256i sumi[4];
        for (int j = 0; j < C; j++) {
            const block_q8_K *a = va[j];
            const __m256i bs = _mm256_loadu_si256((const __m256i *)a[i].bsums);
            const __m128i bs32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m128i pm = _mm_madd_epi16(mhi, bs32);
            pms[j] = pm;
            sumi[j] = _mm256_setzero_si256();
        }

        const __m128i sc128 = _mm256_castsi256_si128(ms);
        const __m256i sc = _mm256_set_m128i(sc128, sc128);
        for (int c = 0; c < 4; c++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const __m256i sl = _mm256_shuffle_epi8(sc, sh[2 * c]), shh = _mm256_shuffle_epi8(sc, sh[2 * c + 1]);
            for (int j = 0; j < C; j++) {
                const int8_t *q8 = ((const block_q8_K *)va[j])[i].qs;
                __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c)));
                __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32)));
                pl = _mm256_madd_epi16(pl, sl);
                ph = _mm256_madd_epi16(ph, shh);
                sumi[j] = _mm256_add_epi32(sumi[j], _mm256_add_epi32(pl, ph));
            }
        }
        if (vout) { vout[2 * i] = sumi[0]; vout[2 * i + 1] = _mm256_zextsi128_si256(pms[0]); continue; }
        /* ds4_q4_K_q8_K_blockwise's float step */
        for (int j = 0; j < C; j++) {
            const block_q8_K *a = va[j];
            const float d = wd * a[i].d, dmin = wdmin * a[i].d;
            int32_t isum, summ;
            hsum2_i32(sumi[j], _mm256_zextsi128_si256(pms[j]), &isum, &summ);
            sumf[j] += d * (float)isum - dmin * (float)summ;
        }
    }
    if (!vout)
        for (int j = 0; j < C; j++) out[j] = sumf[j];
}

TGT static float v_q4_K_q8_K(int n, const void *vw, const void *va)
{
    float y;
    q4_K_tok(n, vw, &va, &y, 1, NULL, NULL);
    return y;
}

/* ------------------------------------------------------------------------ */
/* IQ2_XXS x Q8_K                                                           */
/* ------------------------------------------------------------------------ */

#define KQ_MAXB 32   /* blocks per row (n <= 8192); longer rows go row by row */

/* The per-group work is the bottleneck of the routed experts.  On cores
 * that issue ~4 instructions a cycle and split 256-bit work (Zen 1) the
 * former formulation -- grid rows by four vpbroadcastq + three vpblendd,
 * signs spread with shifts and shuffles per block -- took ~12 cycles a
 * group, a third of the multiplier's rate.  Now every group is table
 * loads, in 128-bit halves (no lane crossing):
 *   grid  -- entries b0, b1 / b2, b3 by vmovq + vmovhpd (ld2q);
 *   signs -- the 7-bit indices s0..s3 pick qwords of iq2_sgn, +1 / -1 per
 *            element (the eighth by the parity of the seven), which
 *            vpsignb applies to the activation bytes (Q8_K has no -128);
 *   scale -- vpmaddwd with iq2_lsx[ls], (2 ls + 1) in every int16 lane.
 * Products grid (u8) x signed activation go through vpmaddubsw (pair sums
 * <= 2 * 43 * 127); the two halves' sums add in int16 (<= 21844, no
 * overflow) before the one vpmaddwd, so a group costs three multiplier
 * uops instead of four.  The block's integer sum is exact and the
 * float step is the scalar kernel's: the same bits.  Zen 1, one thread,
 * matrix in L2: one token 1.8 -> 2.75 GB/s, 4 tokens 0.77 -> 1.0. */
#define IQ2S_B(s, k) ((((s) >> (k)) & 1 ? 0xffull : 0x01ull) << (8 * (k)))
#define IQ2S_PAR(s) (((s) ^ (s) >> 1 ^ (s) >> 2 ^ (s) >> 3 ^ (s) >> 4 ^ (s) >> 5 ^ (s) >> 6) & 1)
#define IQ2S(s) (IQ2S_B(s, 0) | IQ2S_B(s, 1) | IQ2S_B(s, 2) | IQ2S_B(s, 3) | IQ2S_B(s, 4) | IQ2S_B(s, 5) | \
                 IQ2S_B(s, 6) | (IQ2S_PAR(s) ? 0xffull : 0x01ull) << 56)
#define IQ2S4(s) IQ2S(s), IQ2S((s) + 1), IQ2S((s) + 2), IQ2S((s) + 3)
#define IQ2S16(s) IQ2S4(s), IQ2S4((s) + 4), IQ2S4((s) + 8), IQ2S4((s) + 12)
static const uint64_t iq2_sgn[128] __attribute__((aligned(64))) = {
    IQ2S16(0), IQ2S16(16), IQ2S16(32), IQ2S16(48), IQ2S16(64), IQ2S16(80), IQ2S16(96), IQ2S16(112)
};
#define IQ2L(l) { 2 * (l) + 1, 2 * (l) + 1, 2 * (l) + 1, 2 * (l) + 1, 2 * (l) + 1, 2 * (l) + 1, 2 * (l) + 1, 2 * (l) + 1 }
static const int16_t iq2_lsx[16][8] __attribute__((aligned(16))) = {
    IQ2L(0), IQ2L(1), IQ2L(2), IQ2L(3), IQ2L(4), IQ2L(5), IQ2L(6), IQ2L(7),
    IQ2L(8), IQ2L(9), IQ2L(10), IQ2L(11), IQ2L(12), IQ2L(13), IQ2L(14), IQ2L(15)
};

/* two qwords of a table, by index, as one xmm (vmovq + vmovhps) */
TGT static inline __m128i ld2q(const uint64_t *t, unsigned i0, unsigned i1)
{
    return _mm_castpd_si128(_mm_loadh_pd(_mm_castsi128_pd(_mm_loadl_epi64((const __m128i *)(t + i0))),
                                         (const double *)(t + i1)));
}

/* 64-bit rotate (rorx where the compiler may use BMI2): the field
 * extraction below needs only the low bits, which a rotate and a shift
 * give alike, and rorx leaves its source intact */
#define ROR64(x, k) ((uint64_t)(((x) >> (k)) | ((x) << (64 - (k)))))

/* The weight side of one group from its 8 bytes, read as one qword: the
 * grid halves, the sign qwords, and the byte offset of the scale row in
 * iq2_lsx ((v >> 60) * 16).  Each field is a rorx and an and/movzx, which
 * GCC folds into the scaled table offsets: ~34 instructions and 11 loads
 * per group and row instead of ~45 and 12 with two dword loads (the same
 * speed on Zen 1, docs/perf/kernels-diary.md "fifth session"). */
#define IQ2_WSIDE(v, g0, g1, s0, s1, lsoff)                                              \
    const __m128i g0 = ld2q(ds4_iq2xxs_grid, (v) & 255, ROR64(v, 8) & 255);             \
    const __m128i g1 = ld2q(ds4_iq2xxs_grid, ROR64(v, 16) & 255, ROR64(v, 24) & 255);   \
    const __m128i s0 = ld2q(iq2_sgn, ROR64(v, 32) & 127, ROR64(v, 39) & 127);           \
    const __m128i s1 = ld2q(iq2_sgn, ROR64(v, 46) & 127, ROR64(v, 53) & 127);           \
    const size_t lsoff = ROR64(v, 56) & 0xf0

/* one group (32 elements) of one row: q -> its 8 bytes (grid indices, then
 * signs and scale), a0 / a1 the activation's 16-byte halves */
TGT static inline __m128i iq2_group1(const uint8_t *q, __m128i a0, __m128i a1, __m128i acc)
{
    uint64_t v;
    memcpy(&v, q, 8);
    IQ2_WSIDE(v, g0, g1, s0, s1, lsoff);
    const __m128i p = _mm_add_epi16(_mm_maddubs_epi16(g0, _mm_sign_epi8(a0, s0)),
                                    _mm_maddubs_epi16(g1, _mm_sign_epi8(a1, s1)));
    return _mm_add_epi32(acc, _mm_madd_epi16(p, _mm_load_si128((const __m128i *)((const char *)iq2_lsx + lsoff))));
}

/* One row, C tokens (1..8; the tiles and the single-row kernel): the
 * group step of iq2_group1 with the weight side (grid, signs, scale) done
 * once for the C tokens.  Same block sums, same float step as
 * iq2_xxs_tok, so the same bits. */
TGTI static void iq2_xxs_tokt(int n, const void *vw, const void *const *va, float *out, int C)
{
    const uint8_t *w = vw;
    const int nb = n / QK_K;
    float sumf[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
    for (int i = 0; i < nb; i++) {
        const uint8_t *q = w + (size_t)i * sizeof(block_iq2_xxs) + 2;
        __m128i acc[8];
        for (int j = 0; j < C; j++) acc[j] = _mm_setzero_si128();
        for (int g = 0; g < 8; g++) {
            uint64_t v;
            memcpy(&v, q + 8 * g, 8);
            IQ2_WSIDE(v, g0, g1, s0, s1, lsoff);
            const __m128i ls = _mm_load_si128((const __m128i *)((const char *)iq2_lsx + lsoff));
            for (int j = 0; j < C; j++) {
                const int8_t *q8 = ((const block_q8_K *)va[j])[i].qs + 32 * g;
                const __m128i p = _mm_add_epi16(
                    _mm_maddubs_epi16(g0, _mm_sign_epi8(_mm_loadu_si128((const __m128i *)q8), s0)),
                    _mm_maddubs_epi16(g1, _mm_sign_epi8(_mm_loadu_si128((const __m128i *)(q8 + 16)), s1)));
                acc[j] = _mm_add_epi32(acc[j], _mm_madd_epi16(p, ls));
            }
        }
        const float wd = h2f(((const block_iq2_xxs *)w)[i].d);
        for (int j = 0; j < C; j++) {
            const block_q8_K *a = va[j];
            sumf[j] += (wd * a[i].d) * (float)hsum_i32x4(acc[j]);
        }
    }
    for (int j = 0; j < C; j++) out[j] = 0.125f * sumf[j];
}

TGT static float v_iq2_xxs_q8_K(int n, const void *vw, const void *va)
{
    float y;
    iq2_xxs_tokt(n, vw, &va, &y, 1);
    return y;
}

/* rows r0 .. r0 + 3 (ws apart) over nb blocks: v0..v3[i] <- block i's four
 * int32 lanes (their sum: the block's exact integer sum) of each row.  Four
 * rows share the activation loads and give four independent chains (Zen 1,
 * one thread, from DRAM: two rows a pass 2.34, four 2.6 GB/s). */
TGTI static void iq2_d1_quad(const uint8_t *r0, size_t ws, int nb, const block_q8_K *a, __m128i *v0, __m128i *v1,
                             __m128i *v2, __m128i *v3, const uint8_t *pf)
{
    for (int i = 0; i < nb; i++) {
        /* the next 4 rows, linearly: 4 blocks' bytes (264) a step */
        for (int k = 0; k < 5; k++) _mm_prefetch((const char *)pf + 4 * sizeof(block_iq2_xxs) * (size_t)i + 64 * k, _MM_HINT_T0);
        const uint8_t *q0 = r0 + (size_t)i * sizeof(block_iq2_xxs) + 2;
        const int8_t *q8 = a[i].qs;
        __m128i c0 = _mm_setzero_si128(), c1 = c0, c2 = c0, c3 = c0;
        for (int g = 0; g < 8; g++) {
            const __m128i a0 = _mm_loadu_si128((const __m128i *)(q8 + 32 * g));
            const __m128i a1 = _mm_loadu_si128((const __m128i *)(q8 + 32 * g + 16));
            c0 = iq2_group1(q0 + 8 * g, a0, a1, c0);
            c1 = iq2_group1(q0 + ws + 8 * g, a0, a1, c1);
            c2 = iq2_group1(q0 + 2 * ws + 8 * g, a0, a1, c2);
            c3 = iq2_group1(q0 + 3 * ws + 8 * g, a0, a1, c3);
        }
        v0[i] = c0;
        v1[i] = c1;
        v2[i] = c2;
        v3[i] = c3;
    }
}

/* one token, 8 rows: the block sums of iq2_d1_quad, reduced as in
 * kq_rows8, and the scalar float step in the 8 row lanes: same bits */
TGT static void iq2_d1_rows8(int n, const uint8_t *w, size_t ws, const void *va, float *y)
{
    const int nb = n / QK_K;
    const block_q8_K *a = va;
    __m128i v[8][KQ_MAXB];
    for (int r = 0; r < 8; r += 4)
        iq2_d1_quad(w + (size_t)r * ws, ws, nb, a, v[r], v[r + 1], v[r + 2], v[r + 3], w + (size_t)(8 + r) * ws);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        uint16_t hd[8];
        for (int r = 0; r < 8; r++) memcpy(&hd[r], w + (size_t)r * ws + (size_t)i * sizeof(block_iq2_xxs), 2);
        const __m128i t0 = _mm_hadd_epi32(_mm_hadd_epi32(v[0][i], v[1][i]), _mm_hadd_epi32(v[2][i], v[3][i]));
        const __m128i t1 = _mm_hadd_epi32(_mm_hadd_epi32(v[4][i], v[5][i]), _mm_hadd_epi32(v[6][i], v[7][i]));
        const __m256 isum = _mm256_cvtepi32_ps(_mm256_set_m128i(t1, t0));
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
        /* sumf += (wd * a.d) * (float)bsum */
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[i].d)), isum));
    }
    _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_set1_ps(0.125f), acc));
}

/* ------------------------------------------------------------------------ */
/* Float activations.  Weights are dequantized in registers to their exact  */
/* values (the same floats ds4_dequantize_row gives) and fused-multiply-    */
/* added into 8-lane accumulators; every lane sees about n/32 terms, the    */
/* final reduction adds 5 levels, so the error stays within the bound the   */
/* tests use, (n/32 + 40) * 2^-24 * sum|w_i x_i|.                           */
/* ------------------------------------------------------------------------ */

TGT static inline float finish4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

TGTI static __m256 ldw_f(const void *w, int f16, int i)
{
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)))
               : _mm256_loadu_ps((const float *)w + i);
}

/* F32/F16 x float for C tokens: four 8-lane accumulators per token (the
 * 32-lane order of quant.h), weights converted once for all C. */
TGTI static void f_tok(int n, const void *vw, int f16, const float *const *x, float *out, int C)
{
    __m256 a0[3], a1[3], a2[3], a3[3];
    for (int j = 0; j < C; j++) a0[j] = a1[j] = a2[j] = a3[j] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 w0 = ldw_f(vw, f16, i), w1 = ldw_f(vw, f16, i + 8);
        const __m256 w2 = ldw_f(vw, f16, i + 16), w3 = ldw_f(vw, f16, i + 24);
        for (int j = 0; j < C; j++) {
            a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[j] + i), a0[j]);
            a1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[j] + i + 8), a1[j]);
            a2[j] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x[j] + i + 16), a2[j]);
            a3[j] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x[j] + i + 24), a3[j]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 w0 = ldw_f(vw, f16, i);
        for (int j = 0; j < C; j++) a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[j] + i), a0[j]);
    }
    for (int j = 0; j < C; j++) {
        float s = finish4(a0[j], a1[j], a2[j], a3[j]);
        for (int k = i; k < n; k++)
            s += (f16 ? h2f(((const uint16_t *)vw)[k]) : ((const float *)vw)[k]) * x[j][k];
        out[j] = s;
    }
}

TGT static float v_f32_f32(int n, const void *vw, const float *x)
{
    float y;
    f_tok(n, vw, 0, &x, &y, 1);
    return y;
}

TGT static inline __m256 ld_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

TGT static float v_f16_f32(int n, const void *vw, const float *x)
{
    float y;
    f_tok(n, vw, 1, &x, &y, 1);
    return y;
}

TGT static inline __m256 ld_bf16(const uint16_t *p)
{
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

TGT static float v_bf16_f32(int n, const void *vw, const float *x)
{
    const uint16_t *w = vw;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(ld_bf16(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(ld_bf16(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(ld_bf16(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(ld_bf16(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(ld_bf16(w + i), _mm256_loadu_ps(x + i), a0);
    float s = finish4(a0, a1, a2, a3);
    for (; i < n; i++) s += ds4_bf16_to_f32(w[i]) * x[i];
    return s;
}

/* 8 signed bytes -> 8 floats */
TGT static inline __m256 i8x8_ps(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 8 unsigned bytes -> 8 int32 */
TGT static inline __m256i u8x8_epi32(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

TGT static float v_q8_0_f32(int n, const void *vw, const float *x)
{
    const block_q8_0 *w = vw;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int ib = 0; ib < n / QK8_0; ib++, x += QK8_0) {
        const __m256 d = _mm256_set1_ps(h2f(w[ib].d));
        const int8_t *q = w[ib].qs;
        /* d*q is exact: the same value the dequantizer produces */
        a0 = _mm256_fmadd_ps(_mm256_mul_ps(d, i8x8_ps(q)), _mm256_loadu_ps(x), a0);
        a1 = _mm256_fmadd_ps(_mm256_mul_ps(d, i8x8_ps(q + 8)), _mm256_loadu_ps(x + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_mul_ps(d, i8x8_ps(q + 16)), _mm256_loadu_ps(x + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_mul_ps(d, i8x8_ps(q + 24)), _mm256_loadu_ps(x + 24), a3);
    }
    return finish4(a0, a1, a2, a3);
}

TGT static float v_q2_K_f32(int n, const void *vw, const float *x)
{
    const block_q2_K *w = vw;
    const __m256i m3 = _mm256_set1_epi32(3);
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int ib = 0; ib < n / QK_K; ib++, x += QK_K) {
        const float d = h2f(w[ib].d), dmin = h2f(w[ib].dmin);
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 4; j++) {
                for (int half = 0; half < 2; half++) {
                    /* 16 elements of sub-block 8h + 2j + half */
                    const uint8_t s = w[ib].scales[8 * h + 2 * j + half];
                    const __m256 dl = _mm256_set1_ps(d * (float)(s & 15));
                    const __m256 ml = _mm256_set1_ps(dmin * (float)(s >> 4));
                    const uint8_t *qb = w[ib].qs + 32 * h + 16 * half;
                    const float *xb = x + 128 * h + 32 * j + 16 * half;
                    for (int k = 0; k < 2; k++) {
                        const __m256i c = _mm256_and_si256(_mm256_srli_epi32(u8x8_epi32(qb + 8 * k), 2 * j), m3);
                        /* dl*q exact, so the fused form rounds like dl*q - ml */
                        const __m256 v = _mm256_fmsub_ps(dl, _mm256_cvtepi32_ps(c), ml);
                        acc[2 * half + k] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xb + 8 * k), acc[2 * half + k]);
                    }
                }
            }
        }
    }
    return finish4(acc[0], acc[1], acc[2], acc[3]);
}

TGT static float v_q4_K_f32(int n, const void *vw, const float *x)
{
    const block_q4_K *w = vw;
    const __m256i m4 = _mm256_set1_epi32(15);
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int ib = 0; ib < n / QK_K; ib++, x += QK_K) {
        const float d = h2f(w[ib].d), dmin = h2f(w[ib].dmin);
        const uint8_t *b = w[ib].scales;
        for (int c = 0; c < 4; c++) {
            for (int hi = 0; hi < 2; hi++) {
                const int j = 2 * c + hi;
                int sc, m;
                if (j < 4) {
                    sc = b[j] & 63;
                    m = b[j + 4] & 63;
                } else {
                    sc = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4);
                    m = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
                }
                const __m256 dl = _mm256_set1_ps(d * (float)sc);
                const __m256 ml = _mm256_set1_ps(dmin * (float)m);
                const uint8_t *qb = w[ib].qs + 32 * c;
                const float *xb = x + 64 * c + 32 * hi;
                for (int k = 0; k < 4; k++) {
                    const __m256i q = _mm256_and_si256(_mm256_srli_epi32(u8x8_epi32(qb + 8 * k), 4 * hi), m4);
                    const __m256 v = _mm256_fmsub_ps(dl, _mm256_cvtepi32_ps(q), ml);
                    acc[k] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xb + 8 * k), acc[k]);
                }
            }
        }
    }
    return finish4(acc[0], acc[1], acc[2], acc[3]);
}

TGT static float v_iq2_xxs_f32(int n, const void *vw, const float *x)
{
    const block_iq2_xxs *w = vw;
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int ib = 0; ib < n / QK_K; ib++, x += QK_K) {
        const float d = h2f(w[ib].d);
        for (int g = 0; g < 8; g++) {
            uint32_t aux[2];
            memcpy(aux, w[ib].qs + 4 * g, 8);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(aux[1] >> 28)) * 0.25f);
            for (int l = 0; l < 4; l++) {
                const uint8_t *grid = (const uint8_t *)&ds4_iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
                const int signs = ds4_iq2xxs_signs[(aux[1] >> (7 * l)) & 127];
                /* sign bit i -> bit 31 of lane i, flipped with xor (exact) */
                const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(signs), bits), bits);
                const __m256 mag = _mm256_mul_ps(db, _mm256_cvtepi32_ps(u8x8_epi32(grid)));
                const __m256 v = _mm256_xor_ps(mag, _mm256_castsi256_ps(_mm256_slli_epi32(neg, 31)));
                acc[l] = _mm256_fmadd_ps(v, _mm256_loadu_ps(x + 32 * g + 8 * l), acc[l]);
            }
        }
    }
    return finish4(acc[0], acc[1], acc[2], acc[3]);
}

TGT static void v_f16_to_f32_row(const uint16_t *src, float *dst, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, ld_f16(src + i));
    for (; i < n; i++)
        dst[i] = h2f(src[i]);
}

/* Float tiles (F32/F16 weights, float activations): the tokens are taken
 * in blocks whose activations (n floats each) fit in ~192 KiB, and every
 * row meets one block before the next block starts, so a block stays in
 * L2 while the rows pass; with all tokens at once a row re-read every
 * token's activations: the HC matrices (24 rows of 16384) at 256 tokens
 * streamed 16 MB per row from DRAM (Zen 1, one thread: 10.5 GFLOP/s at
 * T = 256 against 25 at T = 32).  Results do not depend on the blocking
 * (each token's sum is computed alone). */
static inline int ftok_block(int n, int cmax)
{
    const long fit = (192L * 1024) / ((long)n * (long)sizeof(float));
    return fit < cmax ? cmax : (int)(fit / cmax * cmax);
}

/* Tiles: each weight row meets the tokens in groups of up to 4 (3 where
 * a token needs 3-4 accumulators): the weight-side work of a row (loads,
 * unpacking, grid expansion, scale shuffles) is done once per group instead
 * of once per token, and each result is the single-row kernel's bit for
 * bit (same per-token operations, see q8_0a_tok).  FMT >= 0 (K-quants):
 * one token (decode) runs 8 rows at a time through kq_rows8. */
#define TOK_TILE(name, tok, CMAX, FMT)                                                      \
    TGT static void name(int n, const void *w, size_t ws, int nrows,                       \
                         const void *const *a, int ntok, float *y, size_t ys)              \
    {                                                                                       \
        float out[4] = { 0, 0, 0, 0 };                                                      \
        int r0 = 0;                                                                         \
        if (FMT >= 0 && ntok == 1 && n / QK_K <= KQ_MAXB)                                   \
            for (; r0 + 8 <= nrows; r0 += 8)                                                \
                kq_rows8(FMT, n, (const uint8_t *)w + (size_t)r0 * ws, ws, a[0], y + r0);   \
        const int tb = FMT >= 0 ? ntok : ftok_block(n, CMAX);                               \
        for (int jb = 0; jb < ntok; jb += tb) {                                             \
            const int je = ntok - jb < tb ? ntok : jb + tb;                                 \
            for (int r = r0; r < nrows; r++) {                                              \
                const uint8_t *wr = (const uint8_t *)w + (size_t)r * ws;                    \
                int j0 = jb;                                                                \
                for (; j0 + CMAX <= je; j0 += CMAX) {                                       \
                    tok(n, wr, a + j0, out, CMAX, NULL, NULL);                              \
                    for (int j = 0; j < CMAX; j++) y[(size_t)(j0 + j) * ys + r] = out[j];   \
                }                                                                           \
                const int rest = je - j0;                                                   \
                if (rest == 1) tok(n, wr, a + j0, out, 1, NULL, NULL);                      \
                else if (rest == 2) tok(n, wr, a + j0, out, 2, NULL, NULL);                 \
                else if (rest == 3) tok(n, wr, a + j0, out, 3, NULL, NULL);                 \
                for (int j = 0; j < rest; j++) y[(size_t)(j0 + j) * ys + r] = out[j];       \
            }                                                                               \
        }                                                                                   \
    }

/* Q8_0 x Q8_0a tiles, 8 rows at a time, vectorized across the rows.  For
 * one block and one token the 8 rows' lane vectors fold to 128 bits and
 * reduce by two rounds of vphaddd into one vector of 8 exact block sums,
 * and the float step of the scalar order runs in the 8 row lanes:
 * acc = acc + (float)tot * (dw * da), blocks in order -- per lane exactly
 * the scalar kernel's roundings, with no horizontal float work.  Rows left
 * over (fewer than 8) and tokens with a -128 code run the single-row
 * kernels (same bits).
 *
 * One pass over the rows (up to 4 tokens, the decode matvec among them):
 * each weight vector is used straight from the load (the former token loop
 * kept the 8 rows' vectors across tokens and spilled them); the next 8
 * rows are prefetched into L1 linearly, 5 lines
 * a block step (272 bytes of weights a step): for short rows (attn_q_b,
 * 1088 bytes) each row is a stream too short for the hardware prefetcher
 * (Zen 1, one thread, DRAM: 8.0 -> 13.6 GB/s at n = 1024, 8.8 -> 13.3 at
 * 4096). */
/* 1..4 tokens, 8 rows (decode, few-token passes: speculative drafts,
 * batched sessions; and the prefill tile in groups of 4): per block, each weight
 * vector is loaded and made unsigned once, then meets the C tokens; each
 * (token, 4 rows) reduces to 4 totals right away, so what stays live is
 * 2 x C vectors of totals (the former loop kept the 8 rows' vectors across
 * the tokens and spilled them: 2 tokens cost 2.1 one-token passes on
 * Zen 1, now 1.8). */
TGTI static void q8_0a_rows8_c(int n, const uint8_t *w, size_t ws, const void *const *va, float *y, size_t ys,
                               const int C, int pf, const int sym)
{
    const int nb = n / QK8_0;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int j = 0; j < C; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * sizeof(block_q8_0);
        if (pf)   /* the next 8 rows, linearly (above) */
            for (int k = 0; k < 5; k++) _mm_prefetch((const char *)w + 8 * ws + 8 * sizeof(block_q8_0) * (size_t)b + 64 * k, _MM_HINT_T0);
        __m256i qa[4], ua[4];
        if (sym)
            for (int j = 0; j < C; j++) {
                qa[j] = _mm256_loadu_si256((const __m256i *)((const block_q8_0a *)va[j])[b].qs);
                ua[j] = _mm256_abs_epi8(qa[j]);   /* |a| as u8: 128 for -128 */
            }
        __m128i t[2][4];
        for (int q = 0; q < 2; q++) {
            __m128i x[4][4];
            for (int r = 0; r < 4; r++) {
                const __m256i qw = _mm256_loadu_si256((const __m256i *)(wb + (size_t)(4 * q + r) * ws + 2));
                if (sym) {   /* w in [-127, 127]: w with a's sign never wraps */
                    for (int j = 0; j < C; j++) {
                        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ua[j], _mm256_sign_epi8(qw, qa[j])), ones);
                        x[j][r] = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                    }
                    continue;
                }
                const __m256i aw = _mm256_sign_epi8(qw, qw);
                for (int j = 0; j < C; j++) {
                    const __m256i qaj = _mm256_loadu_si256((const __m256i *)((const block_q8_0a *)va[j])[b].qs);
                    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(qaj, qw)), ones);
                    x[j][r] = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                }
            }
            for (int j = 0; j < C; j++)
                t[q][j] = _mm_hadd_epi32(_mm_hadd_epi32(x[j][0], x[j][1]), _mm_hadd_epi32(x[j][2], x[j][3]));
        }
        uint16_t h[8];
        for (int r = 0; r < 8; r++) memcpy(&h[r], wb + (size_t)r * ws, 2);
        const __m256 dw = _mm256_cvtph_ps(_mm_set_epi16((short)h[7], (short)h[6], (short)h[5], (short)h[4],
                                                        (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
        for (int j = 0; j < C; j++) {
            const __m256 tot = _mm256_cvtepi32_ps(_mm256_set_m128i(t[1][j], t[0][j]));
            acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(tot, _mm256_mul_ps(dw, _mm256_set1_ps(((const block_q8_0a *)va[j])[b].d))));
        }
    }
    for (int j = 0; j < C; j++) _mm256_storeu_ps(y + (size_t)j * ys, acc[j]);
}

TGTI static void q8_0a_rows8_n(int n, const uint8_t *w, size_t ws, const void *const *va, int ntok, float *y,
                               size_t ys, const int sym)
{
    /* one pass over the rows (up to 4 tokens): prefetch the next rows; more
     * passes re-read these rows from cache, the prefetches would repeat */
    const int pf = ntok <= 4;
    for (int j0 = 0; j0 < ntok; j0 += 4) {
        const void *const *a = va + j0;
        float *yj = y + (size_t)j0 * ys;
        switch (ntok - j0 < 4 ? ntok - j0 : 4) {   /* C a constant in each call */
        case 1: q8_0a_rows8_c(n, w, ws, a, yj, ys, 1, pf, sym); break;
        case 2: q8_0a_rows8_c(n, w, ws, a, yj, ys, 2, pf, sym); break;
        case 3: q8_0a_rows8_c(n, w, ws, a, yj, ys, 3, pf, sym); break;
        default: q8_0a_rows8_c(n, w, ws, a, yj, ys, 4, pf, sym); break;
        }
    }
}

/* Batches of 8 tokens and more (prefill), weights without -128 codes:
 * tokens in the 8 lanes.  The 4-row tiles above spend, per row, token and
 * block, a 128-bit fold and a share of three vphaddd to reduce the block's
 * lanes to one exact sum (on Zen 1, ~6.4 cycles where the two multiplier
 * instructions take 4).  Here the activations of 8 tokens are repacked
 * once per call, step s of block b holding each token's bytes 4s..4s+3 in
 * its lane; a row's 4 weight bytes are broadcast (vpbroadcastd from the
 * row itself, no weight packing), and vpmaddubsw + vpmaddwd leave in every
 * lane the sum of 4 products of that token.  After the 8 steps of a block
 * each lane holds the token's exact block sum, so nothing is reduced
 * across lanes, and the float step of the scalar order runs in the token
 * lanes: acc = acc + (float)tot * (dw * da), blocks in order: the same
 * bits as the single-row kernel.  4 rows share each activation load and
 * its |a| (vpabsb); the 4 rows' weights (~17 KB at n = 4096) stay in L1
 * while the token groups pass.  The repacked activations of a slice of
 * tokens (TL_BUF / n, a multiple of 8) live on the stack; rows longer than
 * TL_BUF / 8 elements take the 4-row tiles. */
#define TL_BUF (128 * 1024)
#define KTL_BLK (2048 + 256 + 32)   /* Q8_K: codes, bsums pairs, scales of 8 tokens a block */
#define TL_MAXG (TL_BUF / KTL_BLK)  /* token groups a slice holds at most (K-quants; MXFP4 capped) */

/* 4 rows x 8 token lanes: pa / pd the group's packed codes and scales */
TGTI static void q8_0a_tl4(int nb, const uint8_t *w, size_t ws, const int8_t *pa, const float *pd, __m256 *f)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * sizeof(block_q8_0) + 2;
        const int8_t *ab = pa + (size_t)b * 256;
        __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
        for (int st = 0; st < 8; st++) {
            const __m256i av = _mm256_load_si256((const __m256i *)(ab + 32 * st));
            const __m256i ua = _mm256_abs_epi8(av);   /* |a| as u8: 128 for -128 */
            int32_t q0, q1, q2, q3;
            memcpy(&q0, wb + 4 * st, 4);
            memcpy(&q1, wb + ws + 4 * st, 4);
            memcpy(&q2, wb + 2 * ws + 4 * st, 4);
            memcpy(&q3, wb + 3 * ws + 4 * st, 4);
            /* w in [-127, 127] with a's sign never wraps */
            i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(_mm256_set1_epi32(q0), av)), ones));
            i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(_mm256_set1_epi32(q1), av)), ones));
            i2 = _mm256_add_epi32(i2, _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(_mm256_set1_epi32(q2), av)), ones));
            i3 = _mm256_add_epi32(i3, _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(_mm256_set1_epi32(q3), av)), ones));
            /* keep the four sums in registers: without this GCC 12 reassociates
             * the 8 steps' adds into a tree and spills its 32 terms (36 -> 30
             * GFLOP/s on Zen 1) */
            __asm__("" : "+x"(i0), "+x"(i1), "+x"(i2), "+x"(i3));
        }
        const __m256 da = _mm256_load_ps(pd + 8 * b);
        uint16_t h;
        memcpy(&h, wb - 2, 2);
        f0 = _mm256_add_ps(f0, _mm256_mul_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps(_mm256_set1_ps(h2f(h)), da)));
        memcpy(&h, wb + ws - 2, 2);
        f1 = _mm256_add_ps(f1, _mm256_mul_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(_mm256_set1_ps(h2f(h)), da)));
        memcpy(&h, wb + 2 * ws - 2, 2);
        f2 = _mm256_add_ps(f2, _mm256_mul_ps(_mm256_cvtepi32_ps(i2), _mm256_mul_ps(_mm256_set1_ps(h2f(h)), da)));
        memcpy(&h, wb + 3 * ws - 2, 2);
        f3 = _mm256_add_ps(f3, _mm256_mul_ps(_mm256_cvtepi32_ps(i3), _mm256_mul_ps(_mm256_set1_ps(h2f(h)), da)));
    }
    f[0] = f0;
    f[1] = f1;
    f[2] = f2;
    f[3] = f3;
}

/* the token-lane tiles' sums f[r][g] (4 rows from r0, ng groups of 8
 * tokens from j0) into y, each times scale */
static void tl_store(float (*f)[TL_MAXG][8], int ng, int r0, int j0, float scale, float *y, size_t ys)
{
    for (int g = 0; g < ng; g++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 8; l++) y[(size_t)(j0 + 8 * g + l) * ys + r0 + r] = scale * f[r][g][l];
}

/* A token-lane tile (whole groups of 8 tokens, rows in fours) and the
 * few-token tile that takes the rest: rows beyond a multiple of 4, tokens
 * beyond a multiple of 8, and everything when there are fewer than min_tok
 * tokens or the rows do not fit a slice.  The same bits either way. */
typedef void (*tl_fn)(int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok, float *y,
                      size_t ys);

static void tl_split(tl_fn tl, ds4_tile_fn few, int min_tok, int fits, int n, const void *vw, size_t ws, int nrows,
                     const void *const *a, int ntok, float *y, size_t ys)
{
    const uint8_t *w = vw;
    if (ntok < min_tok || nrows < 4 || !fits) {
        few(n, vw, ws, nrows, a, ntok, y, ys);
        return;
    }
    const int j0 = ntok / 8 * 8, r4 = nrows / 4 * 4;
    tl(n, w, ws, r4, a, j0, y, ys);
    if (r4 < nrows) few(n, w + (size_t)r4 * ws, ws, nrows - r4, a, j0, y + r4, ys);
    if (j0 < ntok) few(n, vw, ws, nrows, a + j0, ntok - j0, y + (size_t)j0 * ys, ys);
}

/* the Q8_0a activations of ng groups of 8 tokens (a[0 .. 8 ng)), nb blocks
 * each, into pa ([group][block][step][token lane] dwords) and pd
 * ([group][block][token lane] scales) */
TGTI static void q8a_pack(int nb, const void *const *a, int ng, int8_t *pa, float *pd)
{
    for (int g = 0; g < ng; g++)
        for (int l = 0; l < 8; l++) {
            const block_q8_0a *src = a[8 * g + l];
            int8_t *dst = pa + (size_t)g * nb * 256 + 4 * l;
            float *dd = pd + (size_t)g * nb * 8 + l;
            for (int b = 0; b < nb; b++) {
                dd[8 * b] = src[b].d;
                for (int st = 0; st < 8; st++) memcpy(dst + (size_t)b * 256 + 32 * st, src[b].qs + 4 * st, 4);
            }
        }
}

/* ntok a multiple of 8, n <= TL_BUF / 8, nrows a multiple of 4 */
TGT static void q8_0a_tlanes_sym(int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    const int nb = n / QK8_0;
    _Alignas(32) int8_t pa[TL_BUF];
    _Alignas(32) float pd[TL_BUF / 8 / sizeof(float)];
    const int ts = TL_BUF / n / 8 * 8;   /* tokens per slice: >= 8 */
    for (int j0 = 0; j0 < ntok; j0 += ts) {
        const int ng = (ntok - j0 < ts ? ntok - j0 : ts) / 8;
        q8a_pack(nb, a + j0, ng, pa, pd);
        for (int r = 0; r < nrows; r += 4)
            for (int g = 0; g < ng; g++) {
                __m256 f[4];
                q8_0a_tl4(nb, w + (size_t)r * ws, ws, pa + (size_t)g * nb * 256, pd + (size_t)g * nb * 8, f);
                for (int k = 0; k < 4; k++) {
                    float o[8];
                    _mm256_storeu_ps(o, f[k]);
                    float *yr = y + (size_t)(j0 + 8 * g) * ys + r + k;
                    for (int l = 0; l < 8; l++) yr[(size_t)l * ys] = o[l];
                }
            }
    }
}

/* Weights with no -128 code (the q8_0_q8_0a_tile_sym contract, quant.h):
 * |a| is made once per block and token, and each row needs one vpsignb
 * (w with a's sign, which cannot wrap) instead of two (|w|, and a with w's
 * sign).  The activations may hold -128 (|a| = 128 as u8 is fine), so no
 * token needs the scalar kernel.  Same block sums, same float step: the
 * same bits.  Zen 1, one token, Q8_0 Flash shapes: one thread 12.7 ->
 * 13.8 GB/s from DRAM (medians; cached 13.1 -> 14.5), two threads 22.1 ->
 * 23.4 and 23.1 -> 23.7 (means of four alternated rounds, two sets). */
TGT static void q8_0_sym_tile4(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                               float *y, size_t ys)
{
    const uint8_t *w = vw;
    int r = 0;
    for (; r + 8 <= nrows; r += 8) q8_0a_rows8_n(n, w + (size_t)r * ws, ws, a, ntok, y + r, ys, 1);
    for (; r < nrows; r++)
        for (int j = 0; j < ntok; j++)
            y[(size_t)j * ys + r] = v_q8_0_q8_0a(n, w + (size_t)r * ws, a[j]);
}

/* 8 tokens and more through the token lanes (above) */
TGT static void v_q8_0_q8_0a_tile_sym(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                                      float *y, size_t ys)
{
    tl_split(q8_0a_tlanes_sym, q8_0_sym_tile4, 8, n <= TL_BUF / 8, n, vw, ws, nrows, a, ntok, y, ys);
}

TGT static void v_q8_0_q8_0a_tile(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                                  float *y, size_t ys)
{
    const uint8_t *w = vw;
    const int nb = n / QK8_0;
    const __m256i m128 = _mm256_set1_epi8(-128);
    /* tokens with a -128 code: their outputs come from the scalar kernel */
    int any_bad = 0;
    for (int j = 0; j < ntok && !any_bad; j++) {
        const block_q8_0a *aj = a[j];
        __m256i bad = _mm256_setzero_si256();
        for (int b = 0; b < nb; b++)
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)aj[b].qs), m128));
        any_bad = !_mm256_testz_si256(bad, bad);
    }
    int r = 0;
    if (!any_bad)
        for (; r + 8 <= nrows; r += 8) {
            q8_0a_rows8_n(n, w + (size_t)r * ws, ws, a, ntok, y + r, ys, 0);
        }
    for (; r < nrows; r++)
        for (int j = 0; j < ntok; j++)
            y[(size_t)j * ys + r] = v_q8_0_q8_0a(n, w + (size_t)r * ws, a[j]);
}
/* One token, 8 rows of a K-quant (fmt 0 Q2_K, 1 Q4_K; IQ2_XXS: iq2_d1_rows8):
 * the rows' block lane vectors (the *_tok kernels with vout) reduce
 * together into 8 exact block sums (red8_i32), and the scalar kernel's
 * float step runs in the 8 row lanes, blocks in order: the single-row bits
 * without a horizontal sum and a scalar float chain per row and block
 * (decode cost: see docs/NUMERICS.md). */
TGTI static void kq_rows8(int fmt, int n, const uint8_t *w, size_t ws, const void *va, float *y)
{
    const int nb = n / QK_K;
    const block_q8_K *a = va;
    __m256i v[8][2 * KQ_MAXB];
    for (int r = 0; r < 8; r++) {
        const uint8_t *wr = w + (size_t)r * ws;
        /* row r of the next 8, block by block as row r goes (short rows
         * are short streams for the hardware prefetcher; a whole 4096-
         * element row at once -- 36 Q4_K lines -- outran the core's miss
         * buffers: Q4_K 6.0 -> 7.4 GB/s from DRAM on the Zen 1 VM) */
        if (fmt == 0) q2_K_tok(n, wr, &va, NULL, 1, v[r], wr + 8 * ws);
        else q4_K_tok(n, wr, &va, NULL, 1, v[r], wr + 8 * ws);
    }
    const size_t bsz = fmt == 0 ? sizeof(block_q2_K) : sizeof(block_q4_K);
    const size_t doff = fmt == 0 ? offsetof(block_q2_K, d) : offsetof(block_q4_K, d);
    const size_t moff = fmt == 0 ? offsetof(block_q2_K, dmin) : offsetof(block_q4_K, dmin);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i s[8];
        uint16_t hd[8], hm[8];
        for (int r = 0; r < 8; r++) {
            s[r] = v[r][2 * i];
            memcpy(&hd[r], w + (size_t)r * ws + (size_t)i * bsz + doff, 2);
        }
        const __m256 isum = _mm256_cvtepi32_ps(red8_i32(s));
        const __m256 ad = _mm256_set1_ps(a[i].d);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hd));
        for (int r = 0; r < 8; r++) {
            s[r] = v[r][2 * i + 1];
            memcpy(&hm[r], w + (size_t)r * ws + (size_t)i * bsz + moff, 2);
        }
        const __m256 msum = _mm256_cvtepi32_ps(red8_i32(s));
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hm));
        /* sumf += d * (float)isum - dmin * (float)summ, d = wd * a.d */
        acc = _mm256_add_ps(acc, _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(dw, ad), isum),
                                               _mm256_mul_ps(_mm256_mul_ps(dm, ad), msum)));
    }
    _mm256_storeu_ps(y, acc);
}

/* Q2_K and Q4_K x Q8_K, batches of 8 tokens and more: tokens in the lanes,
 * as the Q8_0 prefill tile above.  Per row, token and 128 elements the
 * 4-token tiles spend four vpmaddubsw and four vpmaddwd (the sub-block
 * scales as int16), then a horizontal sum and a scalar float step per
 * block and token.  Here each row's block is unpacked once per slice of
 * tokens into 256 bytes, and step s of the tokens' activations (bytes
 * 4s..4s+3 of each token in its lane) meets the broadcast dword s of it:
 *   Q2_K: the bytes are code x sub-block scale (<= 3 x 15 = 45, by a
 *     vpshufb table per 16-element lane); two vpmaddubsw (pair sums <= 2 x
 *     45 x 127) add in int16 (<= 22860) before one vpmaddwd: 3 multiplier
 *     instructions per 64 products instead of 4;
 *   Q4_K: the bytes are the codes (<= 15); the 8 steps of a 32-element
 *     sub-block add in int16 (<= 8 x 2 x 15 x 127 = 30480) and one vpmaddwd
 *     applies its scale: 9 multiplier instructions per 256 products
 *     instead of 16.
 * The min term sum_j m_j bsums_j is one vpmaddwd per pair of bsums (the
 * mins as int16 pairs broadcast, the tokens' bsums pairs in the lanes).
 * Each lane ends with the token's exact isum and summs, and the scalar
 * kernel's float step runs in the lanes, blocks in order:
 * sumf = sumf + (d * isum - dmin * summs), d = w.d * a.d: the same bits.
 * A slice's repacked activations (KTL_BLK bytes per block and 8 tokens)
 * live on the stack (TL_BUF bytes). */

/* one block of 4 rows, unpacked */
typedef struct {
    _Alignas(32) uint8_t wq[4][256];   /* Q2_K: code x scale; Q4_K: code */
    _Alignas(32) int32_t mp[4][8];     /* mins as int16 pairs: Q2_K (m_2k, m_2k+1), Q4_K (m_k, m_k) */
    _Alignas(32) int32_t sp[4][8];     /* Q4_K: scales as int16 pairs (sc_j, sc_j) */
    float wd[4], wdm[4];
} kq_unp;

/* the min terms and the float step of 4 rows (i0..i3: the isums in the
 * token lanes), into f[0..3] */
TGTI static void ktl_finish(const kq_unp *u, const int8_t *ab, __m256i i0, __m256i i1, __m256i i2, __m256i i3,
                            float *const *f)
{
    const int8_t *bp = ab + 2048;
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    for (int k = 0; k < 8; k++) {
        const __m256i bs = _mm256_load_si256((const __m256i *)(bp + 32 * k));
        m0 = _mm256_add_epi32(m0, _mm256_madd_epi16(_mm256_set1_epi32(u->mp[0][k]), bs));
        m1 = _mm256_add_epi32(m1, _mm256_madd_epi16(_mm256_set1_epi32(u->mp[1][k]), bs));
        m2 = _mm256_add_epi32(m2, _mm256_madd_epi16(_mm256_set1_epi32(u->mp[2][k]), bs));
        m3 = _mm256_add_epi32(m3, _mm256_madd_epi16(_mm256_set1_epi32(u->mp[3][k]), bs));
    }
    const __m256 ad = _mm256_load_ps((const float *)(ab + 2048 + 256));
#define KTL_F(r, ii, mm)                                                                                       \
    _mm256_store_ps(f[r], _mm256_add_ps(_mm256_load_ps(f[r]),                                                  \
        _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(u->wd[r]), ad), _mm256_cvtepi32_ps(ii)),      \
                      _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(u->wdm[r]), ad), _mm256_cvtepi32_ps(mm)))))
    KTL_F(0, i0, m0);
    KTL_F(1, i1, m1);
    KTL_F(2, i2, m2);
    KTL_F(3, i3, m3);
#undef KTL_F
}

/* Q2_K: 4 rows x 8 tokens, one block */
TGTI static void q2_K_tl4(const kq_unp *u, const int8_t *ab, float *const *f)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
    for (int s2 = 0; s2 < 32; s2++) {
        const __m256i a0 = _mm256_load_si256((const __m256i *)(ab + 64 * s2));
        const __m256i a1 = _mm256_load_si256((const __m256i *)(ab + 64 * s2 + 32));
        int32_t p, q;
#define Q2TL_ROW(r, acc)                                                                                   \
        memcpy(&p, u->wq[r] + 8 * s2, 4);                                                                 \
        memcpy(&q, u->wq[r] + 8 * s2 + 4, 4);                                                             \
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(                                   \
                  _mm256_maddubs_epi16(_mm256_set1_epi32(p), a0), _mm256_maddubs_epi16(_mm256_set1_epi32(q), a1)), ones))
        Q2TL_ROW(0, i0);
        Q2TL_ROW(1, i1);
        Q2TL_ROW(2, i2);
        Q2TL_ROW(3, i3);
#undef Q2TL_ROW
        __asm__("" : "+x"(i0), "+x"(i1), "+x"(i2), "+x"(i3));   /* no add tree, no spills */
    }
    ktl_finish(u, ab, i0, i1, i2, i3, f);
}

/* Q4_K: 4 rows x 8 tokens, one block */
TGTI static void q4_K_tl4(const kq_unp *u, const int8_t *ab, float *const *f)
{
    __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
    for (int j = 0; j < 8; j++) {
        __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
        for (int st = 0; st < 8; st++) {
            const __m256i av = _mm256_load_si256((const __m256i *)(ab + 32 * (8 * j + st)));
            int32_t p;
#define Q4TL_ROW(r, acc)                                                                                   \
            memcpy(&p, u->wq[r] + 32 * j + 4 * st, 4);                                                    \
            acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(_mm256_set1_epi32(p), av))
            Q4TL_ROW(0, s0);
            Q4TL_ROW(1, s1);
            Q4TL_ROW(2, s2);
            Q4TL_ROW(3, s3);
#undef Q4TL_ROW
            __asm__("" : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3));
        }
        i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(s0, _mm256_set1_epi32(u->sp[0][j])));
        i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(s1, _mm256_set1_epi32(u->sp[1][j])));
        i2 = _mm256_add_epi32(i2, _mm256_madd_epi16(s2, _mm256_set1_epi32(u->sp[2][j])));
        i3 = _mm256_add_epi32(i3, _mm256_madd_epi16(s3, _mm256_set1_epi32(u->sp[3][j])));
    }
    ktl_finish(u, ab, i0, i1, i2, i3, f);
}

/* IQ2_XXS: 4 rows x 8 tokens, one block.  The unpacked bytes are the
 * signed weights (grid x sign, |w| <= 43); each meets |a| with a's sign
 * moved onto it (vpsignb; Q8_K has no -128): pair sums <= 2 x 127 x 43,
 * two steps added in int16 (<= 21844) before the vpmaddwd that applies
 * the group's 2 ls + 1: 3 multiplier instructions per 64 products, as in
 * the 8-token tile, without its per-token reduction and float step. */
TGTI static void iq2_tl4(const kq_unp *u, const int8_t *ab, float *const *f)
{
    __m256i i0 = _mm256_setzero_si256(), i1 = i0, i2 = i0, i3 = i0;
    for (int g = 0; g < 8; g++)
        for (int s2 = 0; s2 < 4; s2++) {
            const __m256i a0 = _mm256_load_si256((const __m256i *)(ab + 32 * (8 * g + 2 * s2)));
            const __m256i a1 = _mm256_load_si256((const __m256i *)(ab + 32 * (8 * g + 2 * s2) + 32));
            const __m256i u0 = _mm256_abs_epi8(a0), u1 = _mm256_abs_epi8(a1);
            int32_t p, q;
#define IQTL_ROW(r, acc)                                                                                   \
            memcpy(&p, u->wq[r] + 32 * g + 8 * s2, 4);                                                    \
            memcpy(&q, u->wq[r] + 32 * g + 8 * s2 + 4, 4);                                                \
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_add_epi16(                               \
                      _mm256_maddubs_epi16(u0, _mm256_sign_epi8(_mm256_set1_epi32(p), a0)),                \
                      _mm256_maddubs_epi16(u1, _mm256_sign_epi8(_mm256_set1_epi32(q), a1))),               \
                  _mm256_set1_epi32(u->sp[r][g])))
            IQTL_ROW(0, i0);
            IQTL_ROW(1, i1);
            IQTL_ROW(2, i2);
            IQTL_ROW(3, i3);
#undef IQTL_ROW
            __asm__("" : "+x"(i0), "+x"(i1), "+x"(i2), "+x"(i3));
        }
    const __m256 ad = _mm256_load_ps((const float *)(ab + 2048 + 256));
#define IQTL_F(r, ii)                                                                                      \
    _mm256_store_ps(f[r], _mm256_add_ps(_mm256_load_ps(f[r]),                                              \
        _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(u->wd[r]), ad), _mm256_cvtepi32_ps(ii))))
    IQTL_F(0, i0);
    IQTL_F(1, i1);
    IQTL_F(2, i2);
    IQTL_F(3, i3);
#undef IQTL_F
}

/* block i of rows r0..r0+3 into u */
TGTI static void ktl_unpack(int fmt, const uint8_t *w, size_t ws, int i, kq_unp *u)
{
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    /* [0, s, 2s, 3s] from s in every byte of a lane: (s & ka) + (2s & kb) */
    const __m256i ka = _mm256_setr_epi8(0, -1, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, -1, 0, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i kb = _mm256_setr_epi8(0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int r = 0; r < 4; r++) {
        if (fmt == 0) {
            const block_q2_K *b = (const block_q2_K *)(w + (size_t)r * ws) + i;
            u->wd[r] = h2f(b->d);
            u->wdm[r] = h2f(b->dmin);
            const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales);
            _mm256_store_si256((__m256i *)u->mp[r], q2k_mins(raw));
            const __m256i sc = _mm256_and_si256(_mm256_broadcastsi128_si256(raw), m15);
            for (int h = 0; h < 2; h++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                for (int sh = 0; sh < 4; sh++) {
                    /* lane 0: sub-block 8h + 2sh, lane 1: the next */
                    const int j = 8 * h + 2 * sh;
                    const __m256i sj = _mm256_shuffle_epi8(sc, _mm256_setr_epi8(
                        j, j, j, j, j, j, j, j, j, j, j, j, j, j, j, j,
                        j + 1, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1,
                        j + 1, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1, j + 1));
                    const __m256i tbl = _mm256_add_epi8(_mm256_and_si256(sj, ka),
                                                        _mm256_and_si256(_mm256_add_epi8(sj, sj), kb));
                    const __m256i c = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * sh), m3);
                    _mm256_store_si256((__m256i *)(u->wq[r] + 128 * h + 32 * sh), _mm256_shuffle_epi8(tbl, c));
                }
            }
        } else if (fmt == 2) {
            const uint8_t *b = w + (size_t)r * ws + (size_t)i * sizeof(block_iq2_xxs);
            uint16_t h;
            memcpy(&h, b, 2);
            u->wd[r] = h2f(h);
            for (int g = 0; g < 8; g++) {
                uint64_t v;
                memcpy(&v, b + 2 + 8 * g, 8);
                IQ2_WSIDE(v, g0, g1, s0, s1, lsoff);
                memcpy(&u->sp[r][g], (const char *)iq2_lsx + lsoff, 4);   /* (2 ls + 1) x 2 */
                _mm_store_si128((__m128i *)(u->wq[r] + 32 * g), _mm_sign_epi8(g0, s0));
                _mm_store_si128((__m128i *)(u->wq[r] + 32 * g + 16), _mm_sign_epi8(g1, s1));
            }
        } else {
            const block_q4_K *b = (const block_q4_K *)(w + (size_t)r * ws) + i;
            u->wd[r] = h2f(b->d);
            u->wdm[r] = h2f(b->dmin);
            uint32_t v[4];
            q4k_scales_mins(b->scales, v);
            uint8_t sm[16];
            memcpy(sm, v, 16);
            for (int j = 0; j < 8; j++) {
                u->sp[r][j] = (int32_t)((uint32_t)sm[j] * 0x10001u);
                u->mp[r][j] = (int32_t)((uint32_t)sm[8 + j] * 0x10001u);
            }
            for (int c = 0; c < 4; c++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
                _mm256_store_si256((__m256i *)(u->wq[r] + 64 * c), _mm256_and_si256(bits, m15));
                _mm256_store_si256((__m256i *)(u->wq[r] + 64 * c + 32),
                                   _mm256_and_si256(_mm256_srli_epi16(bits, 4), m15));
            }
        }
    }
}

/* fmt 0 Q2_K, 1 Q4_K, 2 IQ2_XXS; ntok a multiple of 8, nrows of 4, nb <= TL_MAXG */
TGTI static void kq_tlanes(int fmt, int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok,
                           float *y, size_t ys)
{
    const int nb = n / QK_K;
    _Alignas(32) int8_t pa[TL_BUF];
    _Alignas(32) float facc[4][TL_MAXG][8];
    kq_unp u;
    const int gs = TL_MAXG / nb;   /* token groups per slice: >= 1 */
    for (int j0 = 0; j0 < ntok; j0 += 8 * gs) {
        const int ng = (ntok - j0) / 8 < gs ? (ntok - j0) / 8 : gs;
        for (int g = 0; g < ng; g++)
            for (int l = 0; l < 8; l++) {
                const block_q8_K *src = a[j0 + 8 * g + l];
                for (int i = 0; i < nb; i++) {
                    int8_t *ab = pa + ((size_t)g * nb + i) * KTL_BLK;
                    for (int st = 0; st < 64; st++) memcpy(ab + 32 * st + 4 * l, src[i].qs + 4 * st, 4);
                    for (int k = 0; k < 8; k++) memcpy(ab + 2048 + 32 * k + 4 * l, src[i].bsums + 2 * k, 4);
                    memcpy(ab + 2048 + 256 + 4 * l, &src[i].d, 4);
                }
            }
        for (int r0 = 0; r0 < nrows; r0 += 4) {
            for (int g = 0; g < ng; g++)
                for (int r = 0; r < 4; r++) _mm256_store_ps(facc[r][g], _mm256_setzero_ps());
            for (int i = 0; i < nb; i++) {
                ktl_unpack(fmt, w + (size_t)r0 * ws, ws, i, &u);
                for (int g = 0; g < ng; g++) {
                    float *const f[4] = { facc[0][g], facc[1][g], facc[2][g], facc[3][g] };
                    const int8_t *ab = pa + ((size_t)g * nb + i) * KTL_BLK;
                    if (fmt == 0) q2_K_tl4(&u, ab, f);
                    else if (fmt == 1) q4_K_tl4(&u, ab, f);
                    else iq2_tl4(&u, ab, f);
                }
            }
            tl_store(facc, ng, r0, j0, fmt == 2 ? 0.125f : 1.0f, y, ys);   /* IQ2_XXS: the scalar final 1/8 */
        }
    }
}

TGT static void q2_K_tlanes(int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok, float *y,
                            size_t ys)
{
    kq_tlanes(0, n, w, ws, nrows, a, ntok, y, ys);
}

TGT static void iq2_xxs_tlanes(int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok,
                               float *y, size_t ys)
{
    kq_tlanes(2, n, w, ws, nrows, a, ntok, y, ys);
}

TGT static void q4_K_tlanes(int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok, float *y,
                            size_t ys)
{
    kq_tlanes(1, n, w, ws, nrows, a, ntok, y, ys);
}

TOK_TILE(q2_K_q8_K_tile4, q2_K_tok, 4, 0)
TOK_TILE(q4_K_q8_K_tile4, q4_K_tok, 4, 1)

/* MIN tokens and more through the token-lane tiles (tl_split).  IQ2_XXS
 * starts at 16: its 8-token tile already shares the weight side (grid and
 * sign lookups) among 8 tokens, and for one group of 8 the unpacking costs
 * about as much as the group (Zen 1, one thread, T = 8: 30.5-34 against
 * 34-40 GFLOP/s; T = 48: 40-41 against 33-39). */
#define KQ_TILE(name, tl, tile4, MIN)                                                                   \
    TGT static void name(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,  \
                         float *y, size_t ys)                                                           \
    {                                                                                                   \
        tl_split(tl, tile4, MIN, n / QK_K <= TL_MAXG, n, vw, ws, nrows, a, ntok, y, ys);                \
    }
KQ_TILE(v_q2_K_q8_K_tile, q2_K_tlanes, q2_K_q8_K_tile4, 8)
KQ_TILE(v_q4_K_q8_K_tile, q4_K_tlanes, q4_K_q8_K_tile4, 8)
/* IQ2_XXS tile: one token through iq2_d1_rows8, 8 rows at a time; else
 * each row meets the tokens 8 at a time (the weight side of a group --
 * 8 table loads, the field extraction -- costs about as much as 3 tokens'
 * products, so it is shared as widely as the 16 registers allow). */
TGT static void iq2_xxs_tile8(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                              float *y, size_t ys)
{
    int r0 = 0;
    if (ntok == 1 && n / QK_K <= KQ_MAXB)
        for (; r0 + 8 <= nrows; r0 += 8) iq2_d1_rows8(n, (const uint8_t *)w + (size_t)r0 * ws, ws, a[0], y + r0);
    for (int r = r0; r < nrows; r++) {
        const uint8_t *wr = (const uint8_t *)w + (size_t)r * ws;
        for (int j0 = 0; j0 < ntok; j0 += 8) {
            float out[8];
            const int C = ntok - j0 < 8 ? ntok - j0 : 8;
            switch (C) {   /* C a constant in each call: acc[] in registers */
            case 1: iq2_xxs_tokt(n, wr, a + j0, out, 1); break;
            case 2: iq2_xxs_tokt(n, wr, a + j0, out, 2); break;
            case 3: iq2_xxs_tokt(n, wr, a + j0, out, 3); break;
            case 4: iq2_xxs_tokt(n, wr, a + j0, out, 4); break;
            case 5: iq2_xxs_tokt(n, wr, a + j0, out, 5); break;
            case 6: iq2_xxs_tokt(n, wr, a + j0, out, 6); break;
            case 7: iq2_xxs_tokt(n, wr, a + j0, out, 7); break;
            default: iq2_xxs_tokt(n, wr, a + j0, out, 8); break;
            }
            for (int j = 0; j < C; j++) y[(size_t)(j0 + j) * ys + r] = out[j];
        }
    }
}
KQ_TILE(v_iq2_xxs_q8_K_tile, iq2_xxs_tlanes, iq2_xxs_tile8, 16)

TGTI static void f32_tok(int n, const void *w, const void *const *a, float *out, int C, __m256i *unused,
                         const uint8_t *unused_pf)
{
    (void)unused;
    (void)unused_pf;
    f_tok(n, w, 0, (const float *const *)a, out, C);
}
TGTI static void f16_tok(int n, const void *w, const void *const *a, float *out, int C, __m256i *unused,
                         const uint8_t *unused_pf)
{
    (void)unused;
    (void)unused_pf;
    f_tok(n, w, 1, (const float *const *)a, out, C);
}
TOK_TILE(v_f32_f32_tile, f32_tok, 3, -1)
TOK_TILE(v_f16_f32_tile, f16_tok, 3, -1)

/* ------------------------------------------------------------------------ */
/* MXFP4: exactly the scalar operation order (quant.h), so this table and   */
/* the scalar one agree bit for bit.  Eight weight rows sit in the eight    */
/* lanes: each row's block codes are expanded once per token group (pshufb */
/* on the doubled E2M1 table), the 8 rows' exact block sums are reduced     */
/* into one vector (hadd tree), and the per-block float work -- (float)sumi */
/* * (2^(e-128) * a.d), added in block order -- is then 8 rows wide.       */
/* maddubs takes |a| as the unsigned side and w with a's sign as the signed */
/* side: |w| <= 12 never overflows, and a = -128 (|a| = 128 as u8) is      */
/* exact too, so no fallback is needed.                                     */
/* ------------------------------------------------------------------------ */

#define MX_ROWS 8
#define MX_TOK 4

/* the 32 signed codes of a block: low nibbles (values 0..15), then high */
TGT static inline __m256i mx_expand(const uint8_t *qs, __m256i lut)
{
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m4 = _mm_set1_epi8(15);
    const __m256i idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    return _mm256_shuffle_epi8(lut, idx);
}

/* rows r of MX_ROWS (lane r) x tokens a[0..C) over the whole row length */
TGTI static void mx_strip(int n, const uint8_t *const *rows, const void *const *a, __m256 *facc, int C,
                         const uint8_t *pf)
{
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ds4_kvalues_mxfp4));
    for (int j = 0; j < C; j++) facc[j] = _mm256_setzero_ps();
    for (int ib = 0; ib < n / QK_MXFP4; ib++) {
        if (pf)   /* the next 8 rows, linearly (see the Q8_0 tiles) */
            for (int k = 0; k < 3; k++) _mm_prefetch((const char *)pf + MX_ROWS * sizeof(block_mxfp4) * (size_t)ib + 64 * k, _MM_HINT_T0);
        __m256i wq[MX_ROWS];
        float dw[MX_ROWS];
        for (int r = 0; r < MX_ROWS; r++) {
            const block_mxfp4 *b = (const block_mxfp4 *)rows[r] + ib;
            wq[r] = mx_expand(b->qs, lut);
            dw[r] = ds4_e8m0_to_f32_half(b->e);
        }
        const __m256 dwv = _mm256_loadu_ps(dw);
        for (int j = 0; j < C; j++) {
            const block_q8_0a *ab = (const block_q8_0a *)a[j] + ib;
            const __m256i qa = _mm256_loadu_si256((const __m256i *)ab->qs);
            const __m256i ua = _mm256_abs_epi8(qa);
            __m256i p[MX_ROWS];
            for (int r = 0; r < MX_ROWS; r++) p[r] = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(wq[r], qa));
            /* lane r <- the sum of row r's 16 pair sums (integer: any order).
             * |code| <= 12, |a| <= 128: a pair sum is <= 3072 and the sum of
             * the 8 in one 128-bit lane <= 24576, so three rounds of vphaddw
             * stay in int16; the two lanes add in int32.  This replaces a
             * vpmaddwd per row (on Zen 1's one multiplier pipe) and the int32
             * reduction: Zen 1, one thread, one token 4.8 -> 5.9 GB/s. */
            const __m256i h01 = _mm256_hadd_epi16(p[0], p[1]), h23 = _mm256_hadd_epi16(p[2], p[3]);
            const __m256i h45 = _mm256_hadd_epi16(p[4], p[5]), h67 = _mm256_hadd_epi16(p[6], p[7]);
            const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(h01, h23), _mm256_hadd_epi16(h45, h67));
            const __m256i isum = _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(h)),
                                                  _mm256_cvtepi16_epi32(_mm256_extracti128_si256(h, 1)));
            /* scalar order: sumf += (float)sumi * (dw * a.d) */
            const __m256 sc = _mm256_mul_ps(dwv, _mm256_set1_ps(ab->d));
            facc[j] = _mm256_add_ps(facc[j], _mm256_mul_ps(_mm256_cvtepi32_ps(isum), sc));
        }
    }
}

/* MXFP4 x Q8_0a, batches of 8 tokens and more: tokens in the lanes, as the
 * Q8_0 prefill tile (its activation packing).  The 8-row tile above spends
 * per block and token a vpmaddubsw per row and a vphaddw tree; here each
 * row's block is expanded once per slice of tokens into 32 signed codes,
 * step s (4 codes, broadcast) meets the 8 tokens' bytes 4s..4s+3, w with
 * a's sign against |a|, and the 8 steps of a block add in int16 (|code| <=
 * 12, |a| <= 128: <= 8 x 3072 = 24576) before one vpmaddwd: 9 multiplier
 * instructions per 256 products.  Each lane ends with its token's exact
 * block sum; the float step of the scalar order runs in the token lanes:
 * sumf = sumf + (float)sumi * (2^(e-128) * a.d). */

TGT static void mxfp4_tlanes(int n, const uint8_t *w, size_t ws, int nrows, const void *const *a, int ntok, float *y,
                             size_t ys)
{
    const int nb = n / QK_MXFP4;
    _Alignas(32) int8_t pa[TL_BUF];
    _Alignas(32) float pd[TL_BUF / 8 / sizeof(float)];
    _Alignas(32) float facc[4][TL_MAXG][8];
    _Alignas(32) int8_t wq[4][32];
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ds4_kvalues_mxfp4));
    const __m256i ones = _mm256_set1_epi16(1);
    int ts = TL_BUF / n / 8 * 8;   /* tokens per slice: >= 8 */
    if (ts > 8 * TL_MAXG) ts = 8 * TL_MAXG;
    for (int j0 = 0; j0 < ntok; j0 += ts) {
        const int ng = (ntok - j0 < ts ? ntok - j0 : ts) / 8;
        q8a_pack(nb, a + j0, ng, pa, pd);
        for (int r0 = 0; r0 < nrows; r0 += 4) {
            for (int g = 0; g < ng; g++)
                for (int r = 0; r < 4; r++) _mm256_store_ps(facc[r][g], _mm256_setzero_ps());
            for (int b = 0; b < nb; b++) {
                float dw[4];
                for (int r = 0; r < 4; r++) {
                    const block_mxfp4 *blk = (const block_mxfp4 *)(w + (size_t)(r0 + r) * ws) + b;
                    _mm256_store_si256((__m256i *)wq[r], mx_expand(blk->qs, lut));
                    dw[r] = ds4_e8m0_to_f32_half(blk->e);
                }
                for (int g = 0; g < ng; g++) {
                    const int8_t *ab = pa + ((size_t)g * nb + b) * 256;
                    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
                    for (int st = 0; st < 8; st++) {
                        const __m256i av = _mm256_load_si256((const __m256i *)(ab + 32 * st));
                        const __m256i ua = _mm256_abs_epi8(av);   /* |a| as u8: 128 for -128 */
                        int32_t p;
#define MXTL_ROW(r, acc)                                                                                   \
                        memcpy(&p, wq[r] + 4 * st, 4);                                                    \
                        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(ua, _mm256_sign_epi8(_mm256_set1_epi32(p), av)))
                        MXTL_ROW(0, s0);
                        MXTL_ROW(1, s1);
                        MXTL_ROW(2, s2);
                        MXTL_ROW(3, s3);
#undef MXTL_ROW
                        __asm__("" : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3));
                    }
                    const __m256 da = _mm256_load_ps(pd + ((size_t)g * nb + b) * 8);
#define MXTL_F(r, ss)                                                                                      \
                    _mm256_store_ps(facc[r][g], _mm256_add_ps(_mm256_load_ps(facc[r][g]),                 \
                        _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(ss, ones)),                    \
                                      _mm256_mul_ps(_mm256_set1_ps(dw[r]), da))))
                    MXTL_F(0, s0);
                    MXTL_F(1, s1);
                    MXTL_F(2, s2);
                    MXTL_F(3, s3);
#undef MXTL_F
                }
            }
            tl_store(facc, ng, r0, j0, 1.0f, y, ys);
        }
    }
}

TGT static void mxfp4_tile8(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                            float *y, size_t ys)
{
    for (int r0 = 0; r0 < nrows; r0 += MX_ROWS) {
        const int nr = nrows - r0 < MX_ROWS ? nrows - r0 : MX_ROWS;
        const uint8_t *rows[MX_ROWS];
        /* rows past nr repeat the last one (computed, never stored) */
        for (int r = 0; r < MX_ROWS; r++)
            rows[r] = (const uint8_t *)w + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws;
        for (int j0 = 0; j0 < ntok; j0 += MX_TOK) {
            const int C = ntok - j0 < MX_TOK ? ntok - j0 : MX_TOK;
            __m256 facc[MX_TOK];
            float out[MX_ROWS];
            /* one pass over these rows (up to 4 tokens): prefetch the next */
            const uint8_t *pf = ntok <= MX_TOK && nr == MX_ROWS ? rows[0] + MX_ROWS * ws : NULL;
            switch (C) {   /* C a constant in each call: facc[] in registers */
            case 1: mx_strip(n, rows, a + j0, facc, 1, pf); break;
            case 2: mx_strip(n, rows, a + j0, facc, 2, pf); break;
            case 3: mx_strip(n, rows, a + j0, facc, 3, pf); break;
            default: mx_strip(n, rows, a + j0, facc, 4, pf); break;
            }
            for (int j = 0; j < C; j++) {
                _mm256_storeu_ps(out, facc[j]);
                memcpy(y + (size_t)(j0 + j) * ys + r0, out, sizeof(float) * (size_t)nr);
            }
        }
    }
}

/* 16 tokens and more (rows <= TL_BUF / 8 elements) through the token
 * lanes (tl_split), the rest through the 8-row tile.  With one group
 * of 8 the expansion per row and block is not amortised (Zen 1, one
 * thread, T = 8: 29 against 32 GFLOP/s; T = 48: 41.5 against 33.6). */
TGT static void v_mxfp4_q8_0a_tile(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                                   float *y, size_t ys)
{
    tl_split(mxfp4_tlanes, mxfp4_tile8, 16, n <= TL_BUF / 8, n, vw, ws, nrows, a, ntok, y, ys);
}

TGT static float v_mxfp4_q8_0a(int n, const void *vw, const void *va)
{
    float y;
    mxfp4_tile8(n, vw, 0, 1, &va, 1, &y, 1);
    return y;
}

/* float activations in the scalar table's 32-lane order (quant.c, the same
 * order as v_q8_0_f32): four 8-lane accumulators fed with fmadd, block after
 * block, reduced once at the end.  The dequantized values are exact (a
 * small integer times a power of two), so every product is the scalar's. */
TGT static float v_mxfp4_f32(int n, const void *vw, const float *x)
{
    const block_mxfp4 *w = vw;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ds4_kvalues_mxfp4));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int ib = 0; ib < n / QK_MXFP4; ib++, x += QK_MXFP4) {
        const __m256i q = mx_expand(w[ib].qs, lut);
        const __m256 d = _mm256_set1_ps(ds4_e8m0_to_f32_half(w[ib].e));
        const __m128i qlo = _mm256_castsi256_si128(q), qhi = _mm256_extracti128_si256(q, 1);
        const __m256 w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qlo)), d);
        const __m256 w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(qlo, 8))), d);
        const __m256 w2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qhi)), d);
        const __m256 w3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(qhi, 8))), d);
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a1);
        a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), a2);
        a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), a3);
    }
    return finish4(a0, a1, a2, a3);
}

/* ------------------------------------------------------------------------ */
/* Q3_K, Q5_K, Q6_K, IQ4_XS x Q8_K (llama.cpp's mixes).  One row at a time:  */
/* per block the exact integer isum of the scalar reference (quant.c), then */
/* its float term, so the bits are the scalar table's.  The codes are made  */
/* unsigned (Q3_K: q + 4, Q6_K: q + 32) for vpmaddubsw, and the offset is    */
/* taken back through the activation's 16-element bsums, in integers.      */
/* vpmaddubsw pairs stay below 2^15 (63 * 127 * 2); the per-group scale     */
/* products and their sums stay far below 2^31 (quant.c).                  */
/* ------------------------------------------------------------------------ */

TGT static inline int32_t hsum_i32x8(__m256i v)
{
    return hsum_i32x4(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* 32 unsigned codes of two 16-groups times their 32 activations, each
 * group's pair sums times its scale: 8 int32 lanes */
TGT static inline __m256i kq_groups2(__m256i q, const int8_t *q8, int s0, int s1)
{
    const __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)q8));
    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16((short)s1), _mm_set1_epi16((short)s0));
    return _mm256_madd_epi16(p, sc);
}

TGT static float v_q6_K_q8_K(int n, const void *vw, const void *va)
{
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const int8_t *sc = w[i].scales;
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w[i].qh + 32 * h));
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            const int8_t *q8 = a[i].qs + 128 * h;
            const int8_t *s = sc + 8 * h;
            acc = _mm256_add_epi32(acc, kq_groups2(q0, q8, s[0], s[1]));
            acc = _mm256_add_epi32(acc, kq_groups2(q1, q8 + 32, s[2], s[3]));
            acc = _mm256_add_epi32(acc, kq_groups2(q2, q8 + 64, s[4], s[5]));
            acc = _mm256_add_epi32(acc, kq_groups2(q3, q8 + 96, s[6], s[7]));
        }
        int32_t off = 0;
        for (int j = 0; j < 16; j++) off += sc[j] * a[i].bsums[j];
        const int32_t isum = hsum_i32x8(acc) - 32 * off;
        sumf += (h2f(w[i].d) * a[i].d) * (float)isum;
    }
    return sumf;
}

TGT static float v_q3_K_q8_K(int n, const void *vw, const void *va)
{
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        /* the sixteen scales minus 32 (quant.c's q3_K_scales) */
        const uint8_t *b = w[i].scales;
        int s[16];
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? b[j] & 15 : b[j - 8] >> 4;
            int hi = (b[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            s[j] = (lo | (hi << 4)) - 32;
        }
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                /* q + 4 = the two low bits + 4 * the hmask bit */
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one);
                const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
                acc = _mm256_add_epi32(acc, kq_groups2(q, a[i].qs + 128 * h + 32 * k, s[8 * h + 2 * k],
                                                       s[8 * h + 2 * k + 1]));
            }
        }
        int32_t off = 0;
        for (int j = 0; j < 16; j++) off += s[j] * a[i].bsums[j];
        const int32_t isum = hsum_i32x8(acc) - 4 * off;
        sumf += (h2f(w[i].d) * a[i].d) * (float)isum;
    }
    return sumf;
}

TGT static float v_q5_K_q8_K(int n, const void *vw, const void *va)
{
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        /* the eight 6-bit (scale, min) pairs (quant.c's q4_K_scales) */
        const uint8_t *b = w[i].scales;
        int sc[8], m[8];
        for (int j = 0; j < 4; j++) { sc[j] = b[j] & 63; m[j] = b[j + 4] & 63; }
        for (int j = 4; j < 8; j++) {
            sc[j] = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4);
            m[j] = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
        }
        const __m256i qh = _mm256_loadu_si256((const __m256i *)w[i].qh);
        __m256i acc = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(w[i].qs + 32 * c));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(qs, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
            acc = _mm256_add_epi32(acc, kq_groups2(lo, a[i].qs + 64 * c, sc[2 * c], sc[2 * c]));
            acc = _mm256_add_epi32(acc, kq_groups2(hi, a[i].qs + 64 * c + 32, sc[2 * c + 1], sc[2 * c + 1]));
        }
        int32_t summ = 0;
        for (int j = 0; j < 8; j++) summ += m[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        const float d = h2f(w[i].d) * a[i].d, dmin = h2f(w[i].dmin) * a[i].d;
        sumf += d * (float)hsum_i32x8(acc) - dmin * (float)summ;
    }
    return sumf;
}

TGT static float v_iq4_xs_q8_K(int n, const void *vw, const void *va)
{
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    const __m128i kv128 = _mm_loadu_si128((const __m128i *)ds4_kvalues_iq4nl);
    const __m256i kv = _mm256_set_m128i(kv128, kv128), m4 = _mm256_set1_epi8(15);
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        __m256i acc = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const __m128i q4 = _mm_loadu_si128((const __m128i *)(w[i].qs + 16 * g));
            const __m256i q = _mm256_set_m128i(_mm_srli_epi16(q4, 4), q4);   /* low nibbles, then high */
            const __m256i v = _mm256_shuffle_epi8(kv, _mm256_and_si256(q, m4));
            const __m256i y = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * g));
            /* |v| * (y with v's sign): |v| <= 127, pairs <= 2 * 127 * 127 */
            const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
            const int ls = (((w[i].scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((w[i].scales_h >> (2 * g)) & 3) << 4)) - 32;
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
        }
        sumf += (h2f(w[i].d) * a[i].d) * (float)hsum_i32x8(acc);
    }
    return sumf;
}

/* Q3_K / Q5_K / Q6_K tiles: each 256-block of a row is unpacked once (8
 * vectors of 32 unsigned codes and the scale pair of each) and dotted
 * with up to 8 tokens' activation blocks; every (row, token) keeps its own
 * float sum in block order with the row kernel's expressions, and the
 * integer sums are exact in any order, so the outputs are the row
 * kernels' bits. */
enum { KQ_Q3, KQ_Q5, KQ_Q6 };

TGTI static void kq_unpack(int fmt, const uint8_t *blk, __m256i q[8], __m256i scv[8], int16_t gs[16],
                           float *d, float *dmin, int *m)
{
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    if (fmt == KQ_Q6) {
        const block_q6_K *b = (const block_q6_K *)blk;
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
            q[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
        }
        for (int j = 0; j < 16; j++) gs[j] = b->scales[j];
        *d = h2f(b->d);
    } else if (fmt == KQ_Q3) {
        const block_q3_K *b = (const block_q3_K *)blk;
        for (int j = 0; j < 16; j++) {
            int lo = j < 8 ? b->scales[j] & 15 : b->scales[j - 8] >> 4;
            int hi = (b->scales[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            gs[j] = (int16_t)((lo | (hi << 4)) - 32);
        }
        const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), m3);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one);
                q[4 * h + k] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));
            }
        }
        *d = h2f(b->d);
    } else {
        const block_q5_K *b = (const block_q5_K *)blk;
        const uint8_t *sb = b->scales;
        int sc[8];
        for (int j = 0; j < 4; j++) { sc[j] = sb[j] & 63; m[j] = sb[j + 4] & 63; }
        for (int j = 4; j < 8; j++) {
            sc[j] = (sb[j + 4] & 15) | ((sb[j - 4] >> 6) << 4);
            m[j] = (sb[j + 4] >> 4) | ((sb[j] >> 6) << 4);
        }
        const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
        for (int c = 0; c < 4; c++) {
            const __m256i qs = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
            q[2 * c] = _mm256_or_si256(_mm256_and_si256(qs, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
            q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
        }
        for (int j = 0; j < 8; j++) gs[2 * j] = gs[2 * j + 1] = (int16_t)sc[j];
        *d = h2f(b->d);
        *dmin = h2f(b->dmin);
    }
    for (int c = 0; c < 8; c++)
        scv[c] = _mm256_set_m128i(_mm_set1_epi16(gs[2 * c + 1]), _mm_set1_epi16(gs[2 * c]));
}

TGTI static void kq_tile(int fmt, size_t bbytes, int n, const void *w, size_t ws, int nrows,
                         const void *const *a, int ntok, float *y, size_t ys)
{
    const int nb = n / QK_K;
    for (int r = 0; r < nrows; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * ws;
        for (int j0 = 0; j0 < ntok; j0 += 8) {
            const int nt = ntok - j0 < 8 ? ntok - j0 : 8;
            float sumf[8] = { 0 };
            for (int i = 0; i < nb; i++) {
                __m256i q[8], scv[8];
                int16_t gs[16];
                float d = 0.0f, dmin = 0.0f;
                int m[8] = { 0 };
                kq_unpack(fmt, row + (size_t)i * bbytes, q, scv, gs, &d, &dmin, m);
                for (int t = 0; t < nt; t++) {
                    const block_q8_K *ab = (const block_q8_K *)a[j0 + t] + i;
                    __m256i acc = _mm256_setzero_si256();
                    for (int c = 0; c < 8; c++) {
                        const __m256i p = _mm256_maddubs_epi16(q[c], _mm256_loadu_si256((const __m256i *)(ab->qs + 32 * c)));
                        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv[c]));
                    }
                    int32_t isum = hsum_i32x8(acc);
                    if (fmt == KQ_Q5) {
                        int32_t summ = 0;
                        for (int j = 0; j < 8; j++) summ += m[j] * (ab->bsums[2 * j] + ab->bsums[2 * j + 1]);
                        const float dd = d * ab->d, dm = dmin * ab->d;
                        sumf[t] += dd * (float)isum - dm * (float)summ;
                    } else {
                        int32_t off = 0;
                        for (int j = 0; j < 16; j++) off += gs[j] * ab->bsums[j];
                        isum -= (fmt == KQ_Q6 ? 32 : 4) * off;
                        sumf[t] += (d * ab->d) * (float)isum;
                    }
                }
            }
            for (int t = 0; t < nt; t++) y[(size_t)(j0 + t) * ys + r] = sumf[t];
        }
    }
}

TGT static void v_q3_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    kq_tile(KQ_Q3, sizeof(block_q3_K), n, w, ws, nrows, a, ntok, y, ys);
}

TGT static void v_q5_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    kq_tile(KQ_Q5, sizeof(block_q5_K), n, w, ws, nrows, a, ntok, y, ys);
}

TGT static void v_q6_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    kq_tile(KQ_Q6, sizeof(block_q6_K), n, w, ws, nrows, a, ntok, y, ys);
}

/* IQ4_XS's tile: the row kernel, one (row, token) at a time (the same bits
 * by construction). */
#define ROW_TILE(name, dot)                                                     \
    TGT static void name(int n, const void *w, size_t ws, int nrows,           \
                         const void *const *a, int ntok, float *y, size_t ys)  \
    {                                                                           \
        for (int r = 0; r < nrows; r++)                                         \
            for (int j = 0; j < ntok; j++)                                      \
                y[(size_t)j * ys + r] = dot(n, (const uint8_t *)w + (size_t)r * ws, a[j]); \
    }
ROW_TILE(v_iq4_xs_q8_K_tile, v_iq4_xs_q8_K)

static const ds4_kernels avx2_kernels = {
    .name = "avx2",
    .q8_0_q8_0 = v_q8_0_q8_0,
    .q8_0_q8_0a = v_q8_0_q8_0a,
    .q2_K_q8_K = v_q2_K_q8_K,
    .q4_K_q8_K = v_q4_K_q8_K,
    .iq2_xxs_q8_K = v_iq2_xxs_q8_K,
    .q3_K_q8_K = v_q3_K_q8_K,
    .q5_K_q8_K = v_q5_K_q8_K,
    .q6_K_q8_K = v_q6_K_q8_K,
    .iq4_xs_q8_K = v_iq4_xs_q8_K,
    .f32_f32 = v_f32_f32,
    .f16_f32 = v_f16_f32,
    .bf16_f32 = v_bf16_f32,
    .q8_0_f32 = v_q8_0_f32,
    .q2_K_f32 = v_q2_K_f32,
    .q4_K_f32 = v_q4_K_f32,
    .iq2_xxs_f32 = v_iq2_xxs_f32,
    /* --no-qat on Q3_K, Q5_K, Q6_K, IQ4_XS: the scalar references */
    .q3_K_f32 = ds4_q3_K_f32_ref,
    .q5_K_f32 = ds4_q5_K_f32_ref,
    .q6_K_f32 = ds4_q6_K_f32_ref,
    .iq4_xs_f32 = ds4_iq4_xs_f32_ref,
    .f16_to_f32_row = v_f16_to_f32_row,
    .q8_0_q8_0a_tile = v_q8_0_q8_0a_tile,
    .q8_0_q8_0a_tile_sym = v_q8_0_q8_0a_tile_sym,
    .q2_K_q8_K_tile = v_q2_K_q8_K_tile,
    .q4_K_q8_K_tile = v_q4_K_q8_K_tile,
    .iq2_xxs_q8_K_tile = v_iq2_xxs_q8_K_tile,
    .q3_K_q8_K_tile = v_q3_K_q8_K_tile,
    .q5_K_q8_K_tile = v_q5_K_q8_K_tile,
    .q6_K_q8_K_tile = v_q6_K_q8_K_tile,
    .iq4_xs_q8_K_tile = v_iq4_xs_q8_K_tile,
    .f32_f32_tile = v_f32_f32_tile,
    .f16_f32_tile = v_f16_f32_tile,
    .mxfp4_q8_0a = v_mxfp4_q8_0a,
    .mxfp4_f32 = v_mxfp4_f32,
    .mxfp4_q8_0a_tile = v_mxfp4_q8_0a_tile,
    /* the scalar quantizers (the AVX-512 ones are the avx512 table's) */
    .quantize_q8_0a = ds4_quantize_q8_0a,
    .quantize_q8_K = ds4_quantize_q8_K,
};

/* F16C from CPUID leaf 1 (ECX bit 29): not every compiler accepts "f16c"
 * in __builtin_cpu_supports.  AVX2 being reported implies the OS saves the
 * YMM state, which F16C needs too. */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c >> 29) & 1;
}

const ds4_kernels *ds4_kernels_avx2(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
        return &avx2_kernels;
    return NULL;
}

#else  /* not x86 */

const ds4_kernels *ds4_kernels_avx2(void)
{
    return NULL;
}

#endif
