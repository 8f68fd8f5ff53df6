/*
 * quant_vnni.c -- the "avx512" kernel table: AVX-512 F/BW/VL/DQ + VNNI +
 * VBMI + BITALG + GFNI tiles for the four integer formats and the float
 * formats.
 *
 * Owns: packed int8 tiles on vpdpbusd, the IQ2_XXS grid expansion, the
 * AVX-512 float tiles, and the run-time check for all of it.  Entries it
 * does not specialise (the float-activation kernels of quantized weights,
 * bf16) are the avx2 table's.
 * Must not: change results against the single-row kernels of this table
 * (every tile is bit-identical to them, see quant.h), know about models or
 * threads, or allocate.
 *
 * Integer design.  A matmul y = W a over int8 codes is an "NT" product:
 * both operands have the reduction axis contiguous.  Summing each dot in
 * SIMD lanes along that axis would force a horizontal reduction per
 * 32-element block per (row, token) (the block scales are floats), which
 * costs more than the products.  Instead 16 weight rows are packed
 * transposed: packed vector s of a 32-element unit holds, in lane r, the
 * four codes (elements 4s..4s+3) of row r, biased to unsigned where
 * needed.  One vpdpbusd of such a vector with the broadcast four
 * activation bytes (an embedded-broadcast memory operand) adds 4 products
 * to each of 16 rows; eight of them finish the unit's exact integer sum
 * for 16 rows at once, with no reduction at all.  The float work per unit
 * and token is then 16 lanes wide too.  Packing (transposes, code
 * extraction, IQ2 grid expansion) is done once per 16 rows x 256 elements
 * into a 6 KB L1 buffer and reused by every token of the call.
 *
 * Per unit (16 rows x 32 elements x 1 token) the compute loop issues 8
 * vpdpbusd plus other vector ops: Q8_0 4 (the float work of its block),
 * Q4_K 4, IQ2_XXS 3.5 (vpmulld by the group scale: 2 uops), Q2_K 2
 * (its 16-element scales are folded into the packed codes, see
 * pack_q2_K); the ceiling of this scheme is 2/3 to 4/5 of the machine's
 * int8 peak.  Each register tile runs two units at a time where it can
 * (2 x 8 independent accumulator chains: a vpdpbusd waits 5 cycles for its
 * accumulator and two issue per cycle).  The activation side of IQ2_XXS
 * is biased to unsigned instead of the weights, so that the bias costs a
 * per-row constant made at packing, not work per token.  It keeps exactly
 * the scalar operation order (the block integer sums are exact, the float
 * terms are added per block in block order), which is what makes tiles,
 * decode and the scalar table agree bit for bit (Q4_K:
 * ds4_q4_K_q8_K_blockwise).
 *
 * Loop structure (tile_int).  One token: the reduction-axis kernels
 * (d1_*; MXFP4's is d1_matvec_mxfp4, beside its own tiles); 2..TOK_TILE
 * tokens of Q8_0 (verification passes, batched steps of a few sessions):
 * dn_matvec_q8_0, 8 rows transposed by qwords, no pack buffer.  Otherwise up to TOK_TILE tokens: strip by
 * strip (16 rows), every 256-element chunk packed and used at once, the
 * next strip prefetched into L2; one token of Q2_K/Q4_K skips the pack
 * buffer altogether (dec_k).  More tokens (prefill): token super-tiles of
 * TOK_SUPER, 256-row panels, and for each chunk: the activation side once
 * (Q8_0 corrections, IQ2_XXS permuted codes), then per strip one pack and
 * register tiles of up to 8 tokens, split evenly; the running float sums
 * wait in y between chunks (stored and reloaded as float32, so
 * unchanged).  Q8_0, Q2_K and IQ2_XXS take two strips per register tile
 * (up to 6 tokens x 32 rows, comp_*_x2): each broadcast activation dword
 * then feeds two vpdpbusd, which halves the broadcast loads per product
 * (+9-15 % at T = 256 on Zen 5, one thread).
 *
 * Float design (F32/F16 x float): the avx2 kernels' 32-lane order in zmm
 * pairs; decode 4 rows x 1 token with prefetch, batches in two 16-lane
 * passes over L1-resident f32 weight slices (fbatch).
 */
#include "kernels/quant.h"
#include "kernels/iq2_avx512.h"

#include <string.h>

#if defined(__x86_64__)

#include <immintrin.h>
#include <pthread.h>

#define VT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg,gfni,avx2,fma,f16c,bmi,bmi2")))
#define VTI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg,gfni,avx2,fma,f16c,bmi,bmi2"), always_inline)) inline

/* ------------------------------------------------------------------------ */
/* Packed 16-row x 256-element chunk                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
    __m512i w[64];    /* w[8u + s]: lane r = codes 4s..4s+3 of unit u (elements 32u..32u+31) of row r
                         (Q2_K: times their 16-element scale) */
    __m512i sc[16];   /* Q4_K: dword lane = scale of 16-element half k (low word); IQ2: ls of group k < 8 */
    __m512i m[8];     /* K: words (min of bsum 2p, min of bsum 2p+1); IQ2: m[0] = the bias constant */
    __m512 d[8];      /* Q8_0: weight scale per block; K: d[0] = d, d[1] = dmin; IQ2: d[0] = d */
} pack_t;

static inline int32_t ld_i32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline float ld_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

/* 16 rows x 32 bytes (p[r]) -> t[s] = dword s of every row (lane r).
 * Rows are paired (r, r+4) and (r+8, r+12) in 256-bit halves so that the
 * last 128-bit shuffle lands them in natural lane order. */
VTI static void tr16x8(const uint8_t *const *p, __m512i *t)
{
    __m512i z[8];
    for (int i = 0; i < 4; i++) {
        z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[i])),
                                  _mm256_loadu_si256((const __m256i *)p[i + 4]), 1);
        z[i + 4] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[i + 8])),
                                      _mm256_loadu_si256((const __m256i *)p[i + 12]), 1);
    }
    __m512i u[4], v[4];
    {
        const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
        const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
        u[0] = _mm512_unpacklo_epi64(a0, a2); u[1] = _mm512_unpackhi_epi64(a0, a2);
        u[2] = _mm512_unpacklo_epi64(a1, a3); u[3] = _mm512_unpackhi_epi64(a1, a3);
    }
    {
        const __m512i a0 = _mm512_unpacklo_epi32(z[4], z[5]), a1 = _mm512_unpackhi_epi32(z[4], z[5]);
        const __m512i a2 = _mm512_unpacklo_epi32(z[6], z[7]), a3 = _mm512_unpackhi_epi32(z[6], z[7]);
        v[0] = _mm512_unpacklo_epi64(a0, a2); v[1] = _mm512_unpackhi_epi64(a0, a2);
        v[2] = _mm512_unpacklo_epi64(a1, a3); v[3] = _mm512_unpackhi_epi64(a1, a3);
    }
    for (int s = 0; s < 4; s++) {
        t[s] = _mm512_shuffle_i32x4(u[s], v[s], _MM_SHUFFLE(2, 0, 2, 0));
        t[s + 4] = _mm512_shuffle_i32x4(u[s], v[s], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* 16 rows x 16 bytes (p[r]) -> t[q] = dword q of every row. */
VTI static void tr16x4(const uint8_t *const *p, __m512i *t)
{
    __m512i z[4];
    for (int i = 0; i < 4; i++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p[i]));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[i + 4]), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[i + 8]), 2);
        z[i] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)p[i + 12]), 3);
    }
    const __m512i a = _mm512_unpacklo_epi32(z[0], z[1]), b = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i c = _mm512_unpacklo_epi32(z[2], z[3]), e = _mm512_unpackhi_epi32(z[2], z[3]);
    t[0] = _mm512_unpacklo_epi64(a, c);
    t[1] = _mm512_unpackhi_epi64(a, c);
    t[2] = _mm512_unpacklo_epi64(b, e);
    t[3] = _mm512_unpackhi_epi64(b, e);
}

/* 16 vectors of 16 dwords (r[i] = row i) -> t[d] = dword d of every row. */
VTI static void tr16x16(const __m512i *r, __m512i *t)
{
    __m512i a[8], b[8];
    for (int i = 0; i < 8; i++) {
        a[i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        b[i] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    __m512i x[4][4];   /* x[q][k]: rows 4k..4k+3, dword 4L+q in 128-bit lane L */
    for (int k = 0; k < 4; k++) {
        x[0][k] = _mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]);
        x[1][k] = _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]);
        x[2][k] = _mm512_unpacklo_epi64(b[2 * k], b[2 * k + 1]);
        x[3][k] = _mm512_unpackhi_epi64(b[2 * k], b[2 * k + 1]);
    }
    for (int q = 0; q < 4; q++) {
        const __m512i p01 = _mm512_shuffle_i32x4(x[q][0], x[q][1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i p23 = _mm512_shuffle_i32x4(x[q][2], x[q][3], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i q01 = _mm512_shuffle_i32x4(x[q][0], x[q][1], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i q23 = _mm512_shuffle_i32x4(x[q][2], x[q][3], _MM_SHUFFLE(3, 2, 3, 2));
        t[q] = _mm512_shuffle_i32x4(p01, p23, _MM_SHUFFLE(2, 0, 2, 0));
        t[4 + q] = _mm512_shuffle_i32x4(p01, p23, _MM_SHUFFLE(3, 1, 3, 1));
        t[8 + q] = _mm512_shuffle_i32x4(q01, q23, _MM_SHUFFLE(2, 0, 2, 0));
        t[12 + q] = _mm512_shuffle_i32x4(q01, q23, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* Row pointers of a strip: rows past nr repeat the last one (their lanes
 * are computed and never stored), so no read goes past the matrix. */
static inline void strip_rows(const uint8_t *w, size_t ws, int nr, const uint8_t **rows)
{
    for (int r = 0; r < 16; r++) rows[r] = w + (size_t)(r < nr ? r : nr - 1) * ws;
}

/* Lane offsets of the strip rows from row 0, for gathers. */
VTI static __m512i strip_offsets(size_t ws, int nr)
{
    int32_t o[16];
    for (int r = 0; r < 16; r++) o[r] = (int32_t)((size_t)(r < nr ? r : nr - 1) * ws);
    return _mm512_loadu_si512(o);
}

/* f16 at byte offset `off` of every strip row (4 bytes read there). */
VTI static __m512 gather_f16(const uint8_t *row0, __m512i offs, size_t off, int shift16)
{
    __m512i v = _mm512_i32gather_epi32(offs, row0 + off, 1);
    if (shift16) v = _mm512_srli_epi32(v, 16);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

/* ------------------------------------------------------------------------ */
/* Packing                                                                  */
/* ------------------------------------------------------------------------ */

/* Q8_0: weights biased to unsigned (w + 128 = w ^ 0x80); the activation
 * side subtracts 128 * sum(a) per block (pre-computed per token). */
VT static void pack_q8_0(const uint8_t *w, size_t ws, int nr, int b0, int nbk, pack_t *pk)
{
    const uint8_t *rows[16], *p[16];
    strip_rows(w, ws, nr, rows);
    const __m512i offs = strip_offsets(ws, nr);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int b = 0; b < nbk; b++) {
        const size_t off = (size_t)(b0 + b) * sizeof(block_q8_0);
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 2;
        __m512i t[8];
        tr16x8(p, t);
        for (int s = 0; s < 8; s++) pk->w[8 * b + s] = _mm512_xor_si512(t[s], x80);
        pk->d[b] = gather_f16(w, offs, off, 0);
    }
}

/* Q2_K: codes 0..3 already unsigned, multiplied by their 16-element scale
 * (below); mins as word pairs for vpdpwssd against the activation's bsums. */
VT static void pack_q2_K(const uint8_t *w, size_t ws, int nr, int kb, pack_t *pk)
{
    const uint8_t *rows[16], *p[16];
    strip_rows(w, ws, nr, rows);
    const size_t off = (size_t)kb * sizeof(block_q2_K);
    /* element h*128 + j*32 + l is bits 2j..2j+1 of qs[h*32 + l]; one
     * gf2p8affineqb (port 0) moves them to bits 0..1 and clears the rest:
     * byte 7-k of the matrix selects the input bits of output bit k */
    __m512i sel[4];
    for (int j = 0; j < 4; j++)
        sel[j] = _mm512_set1_epi64((long long)(((uint64_t)1 << (2 * j)) << 56 | ((uint64_t)2 << (2 * j)) << 48));
    for (int r = 0; r < 16; r++) p[r] = rows[r] + off;
    __m512i sr[4];   /* sr[q]: scale bytes 4q..4q+3 */
    tr16x4(p, sr);
    /* scale k (low nibble of byte k) in both words of each dword lane:
     * vpshufb copies byte i of every dword to bytes 0 and 2 (vpshufb
     * indexes within 128-bit lanes: dword p of a lane starts at byte 4p) */
    const __m512i lo4w = _mm512_set1_epi32(0x000f000f);
    __m512i scw[16];
    for (int i = 0; i < 4; i++) {
        const uint32_t c = (uint32_t)i | (uint32_t)i << 16;
        const __m512i ctl = _mm512_set4_epi32((int)(c + 0x0c000c), (int)(c + 0x080008), (int)(c + 0x040004), (int)c);
        for (int q = 0; q < 4; q++) scw[4 * q + i] = _mm512_and_si512(_mm512_shuffle_epi8(sr[q], ctl), lo4w);
    }
    /* codes times their scale (0..45, still a byte): vpmullw of two code
     * bytes by the scale word gives both byte products with no carry
     * between them.  Then a whole 256-block is one exact integer sum
     * sum_k sc_k * sum(q*a) (comp_q2_K), with no per-16 scale step. */
    for (int h = 0; h < 2; h++) {
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 16 + 32 * h;
        __m512i t[8];
        tr16x8(p, t);
        for (int j = 0; j < 4; j++)
            for (int s = 0; s < 8; s++) {
                const int v = 8 * (4 * h + j) + s;
                pk->w[v] = _mm512_mullo_epi16(_mm512_gf2p8affine_epi64_epi8(t[s], sel[j], 0), scw[v >> 2]);
            }
    }
    for (int q = 0; q < 4; q++) {
        /* words (byte i >> 4, byte i+1 >> 4) for i = 0, 2 (vpshufb indexes
         * within 128-bit lanes: dword p of a lane starts at byte 4p) */
        for (int i = 0; i < 4; i += 2) {
            const __m512i ctl = _mm512_set4_epi32(
                (int)(0x80008000u | (uint32_t)(12 + i) | ((uint32_t)(13 + i) << 16)),
                (int)(0x80008000u | (uint32_t)(8 + i) | ((uint32_t)(9 + i) << 16)),
                (int)(0x80008000u | (uint32_t)(4 + i) | ((uint32_t)(5 + i) << 16)),
                (int)(0x80008000u | (uint32_t)i | ((uint32_t)(1 + i) << 16)));
            pk->m[2 * q + i / 2] = _mm512_srli_epi16(_mm512_shuffle_epi8(sr[q], ctl), 4);
        }
    }
    const __m512i offs = strip_offsets(ws, nr);
    pk->d[0] = gather_f16(w, offs, off + 80, 0);
    pk->d[1] = gather_f16(w, offs, off + 80, 1);
}

/* The 16-byte headers of 16 Q4_K blocks (p[r]), transposed: hd[0] lane r =
 * (d, dmin) of row r; the 6-bit scales and mins of sub-blocks 0..3 and
 * 4..7 unpacked with the same bit moves as the scalar q4_K_scales, one
 * byte per sub-block in each lane. */
VTI static void q4_K_headers(const uint8_t *const *p, __m512i *hd, __m512i *sc03, __m512i *sc47,
                             __m512i *mn03, __m512i *mn47)
{
    tr16x4(p, hd);
    const __m512i u0 = hd[1], u1 = hd[2], u2 = hd[3];
    const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i k03 = _mm512_set1_epi32(0x03030303);
    *sc03 = _mm512_and_si512(u0, k3f);
    *sc47 = _mm512_or_si512(_mm512_and_si512(u2, k0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), k03), 4));
    *mn03 = _mm512_and_si512(u1, k3f);
    *mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k0f),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k03), 4));
}

/* Q4_K: codes 0..15; 6-bit scales/mins unpacked with the same bit moves as
 * the scalar q4_K_scales, sixteen lanes at a time. */
VT static void pack_q4_K(const uint8_t *w, size_t ws, int nr, int kb, pack_t *pk)
{
    const uint8_t *rows[16], *p[16];
    strip_rows(w, ws, nr, rows);
    const size_t off = (size_t)kb * sizeof(block_q4_K);
    const __m512i m4 = _mm512_set1_epi8(15);
    /* output bit k = input bit k + 4 (the high nibble, shifted down) */
    const __m512i hi4 = _mm512_set1_epi64(0x1020408000000000ll);
    for (int c = 0; c < 4; c++) {
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 16 + 32 * c;
        __m512i t[8];
        tr16x8(p, t);
        for (int s = 0; s < 8; s++) {
            pk->w[8 * (2 * c) + s] = _mm512_and_si512(t[s], m4);
            pk->w[8 * (2 * c + 1) + s] = _mm512_gf2p8affine_epi64_epi8(t[s], hi4, 0);
        }
    }
    for (int r = 0; r < 16; r++) p[r] = rows[r] + off;
    __m512i hd[4], sc03, sc47, mn03, mn47;
    q4_K_headers(p, hd, &sc03, &sc47, &mn03, &mn47);
    const __m512i lo8 = _mm512_set1_epi32(0xff);
    for (int j = 0; j < 8; j++) {
        const __m512i src = j < 4 ? sc03 : sc47;
        const __m512i s = _mm512_and_si512(_mm512_srli_epi32(src, 8 * (j & 3)), lo8);
        pk->sc[2 * j] = s;
        pk->sc[2 * j + 1] = s;
        /* bsums 2j and 2j+1 both belong to sub-block j: words (m_j, m_j) */
        const __m512i ms = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? mn03 : mn47, 8 * (j & 3)), lo8);
        pk->m[j] = _mm512_or_si512(ms, _mm512_slli_epi32(ms, 16));
    }
    pk->d[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
    pk->d[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
}

/* IQ2_XXS tables: every grid magnitude is 8, 25 or 43, so a grid row is 8
 * two-bit codes; iq2_codes[e] / [256 + e] hold the codes of elements 0..3 / 4..7 of
 * entry e (256 bytes each = 4 zmm, looked up with vpermi2b). */
static const uint8_t *iq2_codes;   /* ds4_iq2xxs_codes(): lo 0..255, hi 256..511 */
/* d1_iq2_perm[s] byte 8g + 4h + l = 32g + 8l + s (the single-token path's
 * activation order, the same for both rows h of a pair: see d1_prep_iq2) */
static uint8_t d1_iq2_perm[8][64] __attribute__((aligned(64)));

static void iq2_tables_init(void)
{
    iq2_codes = ds4_iq2xxs_codes();
    for (int sv = 0; sv < 8; sv++)
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 8; g++)
                for (int l = 0; l < 4; l++) d1_iq2_perm[sv][8 * g + 4 * h + l] = (uint8_t)(32 * g + 8 * l + sv);
}

/* IQ2_XXS.  The packed vector s (0..7) of group g holds, in lane r, element
 * s of each of the group's four grid entries (elements 8k + s, k = 0..3),
 * not four consecutive elements: then the four bytes of a lane come from
 * the same two code bits of four different code bytes, at the same byte
 * positions as those code bytes, and a single gf2p8affineqb both extracts
 * the two bits and maps them to the weight (no byte shuffles at all).  The
 * activations are permuted the same way once per token (iq2_perm_act), so
 * each vpdpbusd still meets matching elements.
 *   layout: the raw 64 bytes of 16 rows are transposed first (dword 2g of
 *           lane r = the four grid indices of group g, dword 2g+1 = its
 *           signs and scale), so all the work below is 16 rows wide;
 *   codes:  every grid magnitude is 8, 25 or 43: iq2_codes[e] / [256 + e] hold the
 *           2-bit codes of elements 0..3 / 4..7 of entry e, looked up with
 *           vpermi2b (two 128-entry halves + blend);
 *   values: gf2p8affineqb (port 0) maps code c to {8, 25, 43} (the affine
 *           map 0x08 ^ c0*0x11 ^ c1*0x23 over GF(2));
 *   signs:  the 7 stored bits + parity (vpopcntb) per entry, bit-transposed
 *           per qword by one gf2p8affineqb with the data as the matrix, so
 *           byte s collects bit s of eight entries: gathered (vpermb) into
 *           eight 64-bit masks, one per packed vector; a masked negate then
 *           turns g into -g.
 * The weights are the signed operand of vpdpbusd and the activations the
 * unsigned one, biased by +128 (iq2_perm_act): the bias then costs a
 * constant per row and block, -128 * sum_g ls_g * (sum of group g's
 * weights), made here once (m[0], 64 vpdpbusd of the scales against the
 * weights) and used as the start of every token's sum, instead of 8
 * vpdpwssd of the mins against each token's bsums. */
VT static void pack_iq2_xxs(const uint8_t *w, size_t ws, int nr, int kb, pack_t *pk)
{
    const uint8_t *rows[16], *p[16];
    strip_rows(w, ws, nr, rows);
    const size_t off = (size_t)kb * sizeof(block_iq2_xxs);
    __m512i t[16];
    for (int q = 0; q < 4; q++) {
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 2 + 16 * q;
        tr16x4(p, t + 4 * q);
    }
    iq2_code_tab ct;
    iq2_code_tab_load(&ct, iq2_codes);
    /* value maps for code bits (2i, 2i+1): out bit 0 = c0^c1, bit 1 = c1,
     * bit 4 = c0, bit 5 = c1 (row of out bit k = matrix byte 7-k) */
    __m512i vmap[4];
    for (int i = 0; i < 4; i++)
        vmap[i] = _mm512_set1_epi64((long long)((uint64_t)(3u << (2 * i)) << 56 | (uint64_t)(2u << (2 * i)) << 48 |
                                                (uint64_t)(1u << (2 * i)) << 24 | (uint64_t)(2u << (2 * i)) << 16));
    /* sign fields (7 bits at 7k of the a1 word), bytes in reversed order
     * within each qword: byte 7 - (4h + k) = field k of lane 2q + h */
    uint64_t shs = 0;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++) shs |= (uint64_t)(32 * h + 7 * k) << (8 * (7 - (4 * h + k)));
    const __m512i sh_s7 = _mm512_set1_epi64((long long)shs);
    const __m512i bitsel = _mm512_set1_epi64(0x8040201008040201ll);
    /* qword s of the masks = byte s of each transposed qword */
    uint8_t gi[64];
    for (int i = 0; i < 64; i++) gi[i] = (uint8_t)(8 * (i & 7) + (i >> 3));
    const __m512i gidx = _mm512_loadu_si512(gi);
    const __m512i k7f = _mm512_set1_epi8(0x7f), k80 = _mm512_set1_epi8((char)0x80);
    const __m512i zero = _mm512_setzero_si512();
    /* all sign masks first: a 64-bit mask load right after the 64-byte
     * store that wrote it would stall on store forwarding */
    __mmask64 msk[8][8] __attribute__((aligned(64)));
    for (int g = 0; g < 8; g++) {
        const __m512i s1 = t[2 * g + 1];
        /* sign bytes: 7 stored bits | parity << 7 */
        const __m512i s7 = _mm512_and_si512(_mm512_multishift_epi64_epi8(sh_s7, s1), k7f);
        const __m512i par = _mm512_slli_epi16(_mm512_popcnt_epi8(s7), 7);
        const __m512i sg = _mm512_ternarylogic_epi32(s7, par, k80, 0xf8);   /* s7 | (par & 0x80) */
        /* byte j of each qword <- bit j of its 8 bytes (8x8 bit transpose) */
        const __m512i tb = _mm512_gf2p8affine_epi64_epi8(bitsel, sg, 0);
        _mm512_store_si512(msk[g], _mm512_permutexvar_epi8(gidx, tb));
    }
    /* ls_g in all four bytes of each dword (vpshufb: byte 0 of each dword) */
    const __m512i rep4 = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0x00000000);
    __m512i bias0 = zero, bias1 = zero;   /* sum_g ls_g * sum(w), two chains */
    for (int g = 0; g < 8; g++) {
        const __m512i idx = t[2 * g], s1 = t[2 * g + 1];
        __m512i clo, chi;
        iq2_idx_codes(&ct, idx, &clo, &chi);
        /* ls = 2 * (a1 >> 28) + 1 */
        const __m512i ls = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(s1, 28), 1), _mm512_set1_epi32(1));
        pk->sc[g] = ls;
        const __m512i lsb = _mm512_shuffle_epi8(ls, rep4);
        for (int sv = 0; sv < 8; sv++) {
            const __m512i v = _mm512_gf2p8affine_epi64_epi8(sv < 4 ? clo : chi, vmap[sv & 3], 0x08);
            const __m512i sw = _mm512_mask_sub_epi8(v, _load_mask64(&msk[g][sv]), zero, v);
            pk->w[8 * g + sv] = sw;
            if (sv & 1) bias1 = _mm512_dpbusd_epi32(bias1, lsb, sw);
            else bias0 = _mm512_dpbusd_epi32(bias0, lsb, sw);
        }
    }
    /* |bias| <= 128 * 8 * 31 * 32 * 43: fits */
    pk->m[0] = _mm512_sub_epi32(zero, _mm512_slli_epi32(_mm512_add_epi32(bias0, bias1), 7));
    pk->d[0] = gather_f16(w, strip_offsets(ws, nr), off, 0);
}

/* The 256 activation codes of a block_q8_K in the IQ2_XXS packed order:
 * within each 32-element group, byte 4s + k = element 8k + s; biased by
 * +128 to unsigned (a ^ 0x80), see pack_iq2_xxs. */
VTI static void iq2_perm_act(const uint8_t *blk, uint8_t *out)
{
    uint8_t pi[64];
    for (int h = 0; h < 2; h++)
        for (int sv = 0; sv < 8; sv++)
            for (int k = 0; k < 4; k++) pi[32 * h + 4 * sv + k] = (uint8_t)(32 * h + 8 * k + sv);
    const __m512i pidx = _mm512_loadu_si512(pi);
    for (int q = 0; q < 4; q++)
        _mm512_storeu_si512(out + 64 * q, _mm512_xor_si512(_mm512_permutexvar_epi8(pidx, _mm512_loadu_si512(blk + 4 + 64 * q)),
                                                           _mm512_set1_epi8((char)0x80)));
}

/* ------------------------------------------------------------------------ */
/* Compute on a packed chunk for C tokens (C a compile-time constant at     */
/* every call site, so facc[] lives in registers).                          */
/* ------------------------------------------------------------------------ */

#define BCAST32(p) _mm512_set1_epi32(ld_i32(p))
#define TOK_TILE 8          /* tokens per register tile */
/* The "#pragma GCC unroll" below: left rolled, GCC 12 copied every
 * accumulator of the s loop through a temporary register and back on each
 * iteration (two extra moves per vpdpbusd, measured slower). */

/* Q8_0 x Q8_0a: ab[j] -> token j's first block of the chunk; corr[j*8+b]
 * = -128 * sum of the activation codes of block b.  The loops run stage by
 * stage across the C tokens, so consecutive vpdpbusd are independent (one
 * token's eight form a 40-cycle dependency chain). */
VTI static void comp_q8_0(const pack_t *pk, int nbk, const uint8_t *const *ab, const int32_t *corr,
                          __m512 *facc, int C)
{
    int b = 0;
    /* two blocks at a time: 2C independent vpdpbusd chains instead of C
     * (a vpdpbusd waits 5 cycles for its accumulator, two issue per
     * cycle); each block's float terms are still added in block order */
    for (; b + 2 <= nbk; b += 2) {
        const size_t ob = (size_t)b * sizeof(block_q8_0a);
        __m512i a0[TOK_TILE], a1[TOK_TILE];
        for (int j = 0; j < C; j++) {
            a0[j] = _mm512_set1_epi32(corr[8 * j + b]);
            a1[j] = _mm512_set1_epi32(corr[8 * j + b + 1]);
        }
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i w0 = pk->w[8 * b + s], w1 = pk->w[8 * b + 8 + s];
            for (int j = 0; j < C; j++) {
                a0[j] = _mm512_dpbusd_epi32(a0[j], w0, BCAST32(ab[j] + ob + 4 + 4 * s));
                a1[j] = _mm512_dpbusd_epi32(a1[j], w1, BCAST32(ab[j] + ob + sizeof(block_q8_0a) + 4 + 4 * s));
            }
        }
        const __m512 dw0 = pk->d[b], dw1 = pk->d[b + 1];
        for (int j = 0; j < C; j++) {
            /* scalar order: sumf += (float)sumi * (dw * da), block by block */
            const __m512 sc0 = _mm512_mul_ps(dw0, _mm512_set1_ps(ld_f32(ab[j] + ob)));
            const __m512 sc1 = _mm512_mul_ps(dw1, _mm512_set1_ps(ld_f32(ab[j] + ob + sizeof(block_q8_0a))));
            facc[j] = _mm512_add_ps(facc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(a0[j]), sc0));
            facc[j] = _mm512_add_ps(facc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(a1[j]), sc1));
        }
    }
    for (; b < nbk; b++) {
        const size_t ob = (size_t)b * sizeof(block_q8_0a);
        __m512i acc[TOK_TILE];
        for (int j = 0; j < C; j++) acc[j] = _mm512_set1_epi32(corr[8 * j + b]);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i ws = pk->w[8 * b + s];
            for (int j = 0; j < C; j++)
                acc[j] = _mm512_dpbusd_epi32(acc[j], ws, BCAST32(ab[j] + ob + 4 + 4 * s));
        }
        const __m512 dw = pk->d[b];
        for (int j = 0; j < C; j++) {
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(ld_f32(ab[j] + ob)));
            facc[j] = _mm512_add_ps(facc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), sc));
        }
    }
}

/* Q8_0 over two strips (32 rows) at once: each broadcast activation dword
 * feeds two vpdpbusd (one per strip), so a block of C tokens takes 2 + C
 * loads per 2C products instead of 1 + C per C (plus the same corr and
 * scale broadcasts, now shared by both strips).  One block at a time: the
 * two strips give the 2C independent chains the block pairs give above.
 * C <= TOK_TILE2 keeps 4C accumulators (int and float) in the 32 zmm.
 * Every (row, token) sees comp_q8_0's operations in its order: the same
 * bits. */
#define TOK_TILE2 6
VTI static void comp_q8_0_x2(const pack_t *p0, const pack_t *p1, int nbk, const uint8_t *const *ab,
                             const int32_t *corr, __m512 *f0, __m512 *f1, int C)
{
    for (int b = 0; b < nbk; b++) {
        const size_t ob = (size_t)b * sizeof(block_q8_0a);
        __m512i a0[TOK_TILE2], a1[TOK_TILE2];
        for (int j = 0; j < C; j++) a1[j] = a0[j] = _mm512_set1_epi32(corr[8 * j + b]);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i w0 = p0->w[8 * b + s], w1 = p1->w[8 * b + s];
            for (int j = 0; j < C; j++) {
                const __m512i x = BCAST32(ab[j] + ob + 4 + 4 * s);
                a0[j] = _mm512_dpbusd_epi32(a0[j], w0, x);
                a1[j] = _mm512_dpbusd_epi32(a1[j], w1, x);
            }
        }
        const __m512 dw0 = p0->d[b], dw1 = p1->d[b];
        for (int j = 0; j < C; j++) {
            const __m512 da = _mm512_set1_ps(ld_f32(ab[j] + ob));
            f0[j] = _mm512_add_ps(f0[j], _mm512_mul_ps(_mm512_cvtepi32_ps(a0[j]), _mm512_mul_ps(dw0, da)));
            f1[j] = _mm512_add_ps(f1[j], _mm512_mul_ps(_mm512_cvtepi32_ps(a1[j]), _mm512_mul_ps(dw1, da)));
        }
    }
}

/* The min term and the float work of a K-quant block for C tokens:
 * isum[j] is token j's exact sum_k sc_k * sum(q*a). */
VTI static void k_finish(const pack_t *pk, const uint8_t *const *ab, const __m512i *isum, __m512 *facc, int C)
{
    const __m512i m0 = pk->m[0], m1 = pk->m[1], m2 = pk->m[2], m3 = pk->m[3];
    const __m512i m4 = pk->m[4], m5 = pk->m[5], m6 = pk->m[6], m7 = pk->m[7];
    const __m512 dv = pk->d[0], dmv = pk->d[1];
    for (int j = 0; j < C; j++) {
        const uint8_t *bs = ab[j] + 4 + QK_K;
        __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m0, BCAST32(bs));
        summ = _mm512_dpwssd_epi32(summ, m1, BCAST32(bs + 4));
        summ = _mm512_dpwssd_epi32(summ, m2, BCAST32(bs + 8));
        summ = _mm512_dpwssd_epi32(summ, m3, BCAST32(bs + 12));
        summ = _mm512_dpwssd_epi32(summ, m4, BCAST32(bs + 16));
        summ = _mm512_dpwssd_epi32(summ, m5, BCAST32(bs + 20));
        summ = _mm512_dpwssd_epi32(summ, m6, BCAST32(bs + 24));
        summ = _mm512_dpwssd_epi32(summ, m7, BCAST32(bs + 28));
        /* scalar order: sumf += dall*(float)isum - dmin*(float)summs */
        const __m512 ad = _mm512_set1_ps(ld_f32(ab[j]));
        const __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(ad, dv), _mm512_cvtepi32_ps(isum[j]));
        const __m512 t2 = _mm512_mul_ps(_mm512_mul_ps(ad, dmv), _mm512_cvtepi32_ps(summ));
        facc[j] = _mm512_add_ps(facc[j], _mm512_sub_ps(t1, t2));
    }
}

/* Q2_K x Q8_K, one 256-block (codes pre-multiplied by their scales, see
 * pack_q2_K): 64 vpdpbusd per token and nothing else per unit.  Two
 * accumulators per token (even / odd 32-element units), so that 2C
 * independent chains keep both vpdpbusd ports busy; |sum| <= 256*45*128
 * fits easily, and integer addition is exact in any order. */
VTI static void comp_q2_K(const pack_t *pk, const uint8_t *const *ab, __m512 *facc, int C)
{
    __m512i a0[TOK_TILE], a1[TOK_TILE];
    for (int j = 0; j < C; j++) a0[j] = a1[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int u = 0; u < 8; u += 2)
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i w0 = pk->w[8 * u + s], w1 = pk->w[8 * u + 8 + s];
            for (int j = 0; j < C; j++) {
                a0[j] = _mm512_dpbusd_epi32(a0[j], w0, BCAST32(ab[j] + 4 + 32 * u + 4 * s));
                a1[j] = _mm512_dpbusd_epi32(a1[j], w1, BCAST32(ab[j] + 4 + 32 * u + 32 + 4 * s));
            }
        }
    for (int j = 0; j < C; j++) a0[j] = _mm512_add_epi32(a0[j], a1[j]);
    k_finish(pk, ab, a0, facc, C);
}

/* Q4_K x Q8_K, one 256-block: ab[j] -> token j's block_q8_K. */
VTI static void comp_k(const pack_t *pk, const uint8_t *const *ab, __m512 *facc, int C)
{
    __m512i isum[TOK_TILE];
    for (int j = 0; j < C; j++) isum[j] = _mm512_setzero_si512();
    for (int k = 0; k < 16; k++) {
        __m512i acc[TOK_TILE];
        for (int j = 0; j < C; j++) acc[j] = _mm512_setzero_si512();
        for (int s = 0; s < 4; s++) {
            const __m512i ws = pk->w[4 * k + s];
            for (int j = 0; j < C; j++)
                acc[j] = _mm512_dpbusd_epi32(acc[j], ws, BCAST32(ab[j] + 4 + 16 * k + 4 * s));
        }
        /* |acc| <= 16*15*127 fits a word: the high word (its sign) meets a
         * zero scale word, so this adds acc * scale exactly */
        const __m512i sc = pk->sc[k];
        for (int j = 0; j < C; j++) isum[j] = _mm512_dpwssd_epi32(isum[j], acc[j], sc);
    }
    k_finish(pk, ab, isum, facc, C);
}

/* IQ2_XXS x Q8_K, one 256-block: aq[j] -> token j's codes in the packed
 * order, biased to unsigned (iq2_perm_act), ab[j] -> its block_q8_K (scale). */
VTI static void comp_iq2(const pack_t *pk, const uint8_t *const *ab, const uint8_t *const *aq, __m512 *facc, int C)
{
    /* each token's sum starts at the bias constant (see pack_iq2_xxs) */
    __m512i bsum[TOK_TILE];
    for (int j = 0; j < C; j++) bsum[j] = pk->m[0];
    /* two groups at a time: 2C independent vpdpbusd chains (see comp_q8_0) */
    for (int g = 0; g < 8; g += 2) {
        __m512i a0[TOK_TILE], a1[TOK_TILE];
        for (int j = 0; j < C; j++) a0[j] = a1[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i w0 = pk->w[8 * g + s], w1 = pk->w[8 * g + 8 + s];
            for (int j = 0; j < C; j++) {
                a0[j] = _mm512_dpbusd_epi32(a0[j], BCAST32(aq[j] + 32 * g + 4 * s), w0);
                a1[j] = _mm512_dpbusd_epi32(a1[j], BCAST32(aq[j] + 32 * g + 32 + 4 * s), w1);
            }
        }
        const __m512i ls0 = pk->sc[g], ls1 = pk->sc[g + 1];
        for (int j = 0; j < C; j++)
            bsum[j] = _mm512_add_epi32(bsum[j], _mm512_add_epi32(_mm512_mullo_epi32(a0[j], ls0),
                                                                 _mm512_mullo_epi32(a1[j], ls1)));
    }
    const __m512 dv = pk->d[0];
    for (int j = 0; j < C; j++) {
        /* scalar order: sumf += (f16(w.d) * a.d) * (float)bsum */
        const __m512 d = _mm512_mul_ps(dv, _mm512_set1_ps(ld_f32(ab[j])));
        facc[j] = _mm512_add_ps(facc[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(bsum[j])));
    }
}

/* Q2_K and IQ2_XXS over two strips, as comp_q8_0_x2: one broadcast per
 * two products.  Their per-token integer sums are exact in any order, so
 * only the float steps need comp_q2_K's / comp_iq2's order, and they run
 * per strip exactly as there. */
VTI static void comp_q2_K_x2(const pack_t *p0, const pack_t *p1, const uint8_t *const *ab, __m512 *f0,
                             __m512 *f1, int C)
{
    __m512i a0[TOK_TILE2], a1[TOK_TILE2];
    for (int j = 0; j < C; j++) a0[j] = a1[j] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int u = 0; u < 8; u++)
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i w0 = p0->w[8 * u + s], w1 = p1->w[8 * u + s];
            for (int j = 0; j < C; j++) {
                const __m512i x = BCAST32(ab[j] + 4 + 32 * u + 4 * s);
                a0[j] = _mm512_dpbusd_epi32(a0[j], w0, x);
                a1[j] = _mm512_dpbusd_epi32(a1[j], w1, x);
            }
        }
    k_finish(p0, ab, a0, f0, C);
    k_finish(p1, ab, a1, f1, C);
}

VTI static void comp_iq2_x2(const pack_t *p0, const pack_t *p1, const uint8_t *const *ab,
                            const uint8_t *const *aq, __m512 *f0, __m512 *f1, int C)
{
    __m512i b0[TOK_TILE2], b1[TOK_TILE2];
    for (int j = 0; j < C; j++) { b0[j] = p0->m[0]; b1[j] = p1->m[0]; }
    for (int g = 0; g < 8; g++) {
        __m512i a0[TOK_TILE2], a1[TOK_TILE2];
        for (int j = 0; j < C; j++) a0[j] = a1[j] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i w0 = p0->w[8 * g + s], w1 = p1->w[8 * g + s];
            for (int j = 0; j < C; j++) {
                const __m512i x = BCAST32(aq[j] + 32 * g + 4 * s);
                a0[j] = _mm512_dpbusd_epi32(a0[j], x, w0);
                a1[j] = _mm512_dpbusd_epi32(a1[j], x, w1);
            }
        }
        const __m512i l0 = p0->sc[g], l1 = p1->sc[g];
        for (int j = 0; j < C; j++) {
            b0[j] = _mm512_add_epi32(b0[j], _mm512_mullo_epi32(a0[j], l0));
            b1[j] = _mm512_add_epi32(b1[j], _mm512_mullo_epi32(a1[j], l1));
        }
    }
    const __m512 d0 = p0->d[0], d1 = p1->d[0];
    for (int j = 0; j < C; j++) {
        const __m512 ad = _mm512_set1_ps(ld_f32(ab[j]));
        f0[j] = _mm512_add_ps(f0[j], _mm512_mul_ps(_mm512_mul_ps(d0, ad), _mm512_cvtepi32_ps(b0[j])));
        f1[j] = _mm512_add_ps(f1[j], _mm512_mul_ps(_mm512_mul_ps(d1, ad), _mm512_cvtepi32_ps(b1[j])));
    }
}

/* ------------------------------------------------------------------------ */
/* Tile driver for the integer formats                                      */
/* ------------------------------------------------------------------------ */

enum { VF_Q8_0, VF_Q2_K, VF_Q4_K, VF_IQ2 };

#define TOK_SUPER 128       /* tokens per pass over the weights (bounds corr[], perm[]: 36 KB of stack) */
#define PANEL 256           /* rows whose outputs stay in L2 across chunks (256 x TOK_SUPER floats = 128 KB) */

/* -128 * sum of the 32 codes of a Q8_0a block */
VTI static int32_t q8_0a_corr(const uint8_t *blk)
{
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 4)), _mm256_set1_epi8((char)0x80));
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    return -128 * (_mm_cvtsi128_si32(t) - 32 * 128);
}

static inline size_t act_chunk_bytes(int f)
{
    return f == VF_Q8_0 ? 8 * sizeof(block_q8_0a) : sizeof(block_q8_K);
}

VTI static void pack_any(int f, const uint8_t *w, size_t ws, int nr, int kc, int nbk, pack_t *pk)
{
    switch (f) {
    case VF_Q8_0: pack_q8_0(w, ws, nr, 8 * kc, nbk, pk); break;
    case VF_Q2_K: pack_q2_K(w, ws, nr, kc, pk); break;
    case VF_Q4_K: pack_q4_K(w, ws, nr, kc, pk); break;
    default: pack_iq2_xxs(w, ws, nr, kc, pk); break;
    }
}

/* One register tile of C tokens over one packed chunk. */
VTI static void comp_any(int f, const pack_t *pk, int nbk, const uint8_t *const *ab, const uint8_t *const *aq,
                         const int32_t *corr, __m512 *facc, int C)
{
    switch (f) {
    case VF_Q8_0: comp_q8_0(pk, nbk, ab, corr, facc, C); break;
    case VF_Q2_K: comp_q2_K(pk, ab, facc, C); break;
    case VF_Q4_K: comp_k(pk, ab, facc, C); break;
    default: comp_iq2(pk, ab, aq, facc, C); break;
    }
}

/* Stores the 16 (or nr) lanes of each token's accumulator; the last chunk
 * of IQ2_XXS applies the final 1/8 (exact, as in the scalar kernel). */
VTI static void store_y(int f, int last, const __m512 *facc, int C, float *y, size_t ys, int nr)
{
    const __mmask16 km = (__mmask16)((1u << nr) - 1);
    for (int j = 0; j < C; j++) {
        __m512 v = facc[j];
        if (last && f == VF_IQ2) v = _mm512_mul_ps(_mm512_set1_ps(0.125f), v);
        _mm512_mask_storeu_ps(y + (size_t)j * ys, km, v);
    }
}

/* C tokens j0.. of a packed chunk, accumulators loaded from / stored to y
 * between chunks (float32 both ways: the running sums are unchanged). */
#define TILE_CASE(CC)                                                                   \
    case CC: {                                                                          \
        __m512 facc[CC];                                                                \
        for (int j = 0; j < CC; j++)                                                    \
            facc[j] = first ? _mm512_setzero_ps()                                       \
                            : _mm512_maskz_loadu_ps(km, y + (size_t)j * ys);             \
        comp_any(f, pk, nbk, ab, aq, corr, facc, CC);                                   \
        store_y(f, last, facc, CC, y, ys, nr);                                          \
        break;                                                                          \
    }

VTI static void run_tile(int f, const pack_t *pk, int nbk, const uint8_t *const *ab, const uint8_t *const *aq,
                         const int32_t *corr, int C, int first, int last, float *y, size_t ys, int nr)
{
    const __mmask16 km = (__mmask16)((1u << nr) - 1);
    switch (C) {
        TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4)
        TILE_CASE(5) TILE_CASE(6) TILE_CASE(7) TILE_CASE(8)
    }
}

/* The two-strip tiles (Q8_0, Q2_K, IQ2_XXS) for C tokens j0.. of two
 * packed strips (rows r0 and r0 + 16 of y; the second has nr1 valid rows),
 * accumulators through y as in run_tile. */
#define TILE2_CASE(CC)                                                                  \
    case CC: {                                                                          \
        __m512 f0[CC], f1[CC];                                                          \
        for (int j = 0; j < CC; j++) {                                                  \
            f0[j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)j * ys);  \
            f1[j] = first ? _mm512_setzero_ps()                                         \
                          : _mm512_maskz_loadu_ps(k1, y + (size_t)j * ys + 16);         \
        }                                                                               \
        if (f == VF_Q8_0) comp_q8_0_x2(p0, p1, nbk, ab, corr, f0, f1, CC);             \
        else if (f == VF_Q2_K) comp_q2_K_x2(p0, p1, ab, f0, f1, CC);                    \
        else comp_iq2_x2(p0, p1, ab, aq, f0, f1, CC);                                   \
        store_y(f, last, f0, CC, y, ys, 16);                                            \
        store_y(f, last, f1, CC, y + 16, ys, nr1);                                      \
        break;                                                                          \
    }

VTI static void run_tile_x2(int f, const pack_t *p0, const pack_t *p1, int nbk, const uint8_t *const *ab,
                            const uint8_t *const *aq, const int32_t *corr, int C, int first, int last,
                            float *y, size_t ys, int nr1)
{
    const __mmask16 k1 = (__mmask16)((1u << nr1) - 1);
    switch (C) {
        TILE2_CASE(1) TILE2_CASE(2) TILE2_CASE(3)
        TILE2_CASE(4) TILE2_CASE(5) TILE2_CASE(6)
    }
}

/* All nt tokens of a strip pair, in pair tiles as even as the count allows
 * (see the single-strip loop in the batched tile): chunk kc's part. */
VTI static void run_pair_tiles(int f, const pack_t *p0, const pack_t *p1, int nbk, const uint8_t *const *ab,
                               const uint8_t *const *aq, const int32_t *corr, int nt, int first, int last,
                               float *y, size_t ys, int nr1)
{
    for (int j0 = 0, C; j0 < nt; j0 += C) {
        const int ntile = (nt - j0 + TOK_TILE2 - 1) / TOK_TILE2;
        C = (nt - j0 + ntile - 1) / ntile;
        run_tile_x2(f, p0, p1, nbk, ab + j0, aq + j0, corr + 8 * j0, C, first, last, y + (size_t)j0 * ys, ys, nr1);
    }
}

/* Fused single-token K-quant block: the packing above and comp_k in one
 * pass, the packed vectors consumed from registers as they are made.  For
 * one token every packed vector is used once, so storing the 5.6 KB pack
 * and reading it back is pure overhead (the decode matvec is then bound by
 * packing work).  Same integer sums, same float operations: bit-identical
 * to pack_q2_K + comp_q2_K and pack_q4_K + comp_k (the same exact integer
 * sums). */
VT static __m512 dec_k(int f, const uint8_t *w, size_t ws, int nr, int kb, const uint8_t *ab, __m512 facc)
{
    const uint8_t *rows[16], *p[16];
    strip_rows(w, ws, nr, rows);
    const __m512i offs = strip_offsets(ws, nr);
    const uint8_t *q = ab + 4;     /* activation codes */
    __m512i isum = _mm512_setzero_si512(), isum2 = _mm512_setzero_si512();
    __m512i m[8];
    __m512 dv, dmv;
#define DEC_UNIT(U, C0, C1, C2, C3, C4, C5, C6, C7, SCLO, SCHI) do {                                 \
        __m512i lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), C0, BCAST32(q + 32 * (U)));           \
        __m512i hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), C4, BCAST32(q + 32 * (U) + 16));      \
        lo = _mm512_dpbusd_epi32(lo, C1, BCAST32(q + 32 * (U) + 4));                                    \
        hi = _mm512_dpbusd_epi32(hi, C5, BCAST32(q + 32 * (U) + 20));                                   \
        lo = _mm512_dpbusd_epi32(lo, C2, BCAST32(q + 32 * (U) + 8));                                    \
        hi = _mm512_dpbusd_epi32(hi, C6, BCAST32(q + 32 * (U) + 24));                                   \
        lo = _mm512_dpbusd_epi32(lo, C3, BCAST32(q + 32 * (U) + 12));                                   \
        hi = _mm512_dpbusd_epi32(hi, C7, BCAST32(q + 32 * (U) + 28));                                   \
        isum = _mm512_dpwssd_epi32(isum, lo, SCLO);                                                     \
        isum2 = _mm512_dpwssd_epi32(isum2, hi, SCHI);                                                   \
    } while (0)
    if (f == VF_Q2_K) {
        const size_t off = (size_t)kb * sizeof(block_q2_K);
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off;
        __m512i sr[4];
        tr16x4(p, sr);
        const __m512i lo4 = _mm512_set1_epi32(0x0f);
        for (int h = 0; h < 2; h++) {
            for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 16 + 32 * h;
            __m512i t[8];
            tr16x8(p, t);
            for (int j = 0; j < 4; j++) {
                const __m512i sel = _mm512_set1_epi64((long long)(((uint64_t)1 << (2 * j)) << 56 | ((uint64_t)2 << (2 * j)) << 48));
                __m512i c[8];
                for (int sv = 0; sv < 8; sv++) c[sv] = _mm512_gf2p8affine_epi64_epi8(t[sv], sel, 0);
                const int u = 4 * h + j, k = 2 * u;
                const __m512i sclo = _mm512_and_si512(_mm512_srli_epi32(sr[k >> 2], 8 * (k & 3)), lo4);
                const __m512i schi = _mm512_and_si512(_mm512_srli_epi32(sr[(k + 1) >> 2], 8 * ((k + 1) & 3)), lo4);
                DEC_UNIT(u, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], sclo, schi);
            }
        }
        for (int qq = 0; qq < 4; qq++)
            for (int i = 0; i < 4; i += 2) {
                const __m512i ctl = _mm512_set4_epi32(
                    (int)(0x80008000u | (uint32_t)(12 + i) | ((uint32_t)(13 + i) << 16)),
                    (int)(0x80008000u | (uint32_t)(8 + i) | ((uint32_t)(9 + i) << 16)),
                    (int)(0x80008000u | (uint32_t)(4 + i) | ((uint32_t)(5 + i) << 16)),
                    (int)(0x80008000u | (uint32_t)i | ((uint32_t)(1 + i) << 16)));
                m[2 * qq + i / 2] = _mm512_srli_epi16(_mm512_shuffle_epi8(sr[qq], ctl), 4);
            }
        dv = gather_f16(w, offs, off + 80, 0);
        dmv = gather_f16(w, offs, off + 80, 1);
    } else {
        const size_t off = (size_t)kb * sizeof(block_q4_K);
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off;
        __m512i hd[4], sc03, sc47, mn03, mn47;
        q4_K_headers(p, hd, &sc03, &sc47, &mn03, &mn47);
        const __m512i lo8 = _mm512_set1_epi32(0xff);
        const __m512i m4 = _mm512_set1_epi8(15);
        const __m512i hi4 = _mm512_set1_epi64(0x1020408000000000ll);
        for (int c = 0; c < 4; c++) {
            for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 16 + 32 * c;
            __m512i t[8], cl[8], ch[8];
            tr16x8(p, t);
            for (int sv = 0; sv < 8; sv++) {
                cl[sv] = _mm512_and_si512(t[sv], m4);
                ch[sv] = _mm512_gf2p8affine_epi64_epi8(t[sv], hi4, 0);
            }
            const int j0 = 2 * c, j1 = 2 * c + 1;
            const __m512i s0 = _mm512_and_si512(_mm512_srli_epi32(j0 < 4 ? sc03 : sc47, 8 * (j0 & 3)), lo8);
            const __m512i s1 = _mm512_and_si512(_mm512_srli_epi32(j1 < 4 ? sc03 : sc47, 8 * (j1 & 3)), lo8);
            DEC_UNIT(j0, cl[0], cl[1], cl[2], cl[3], cl[4], cl[5], cl[6], cl[7], s0, s0);
            DEC_UNIT(j1, ch[0], ch[1], ch[2], ch[3], ch[4], ch[5], ch[6], ch[7], s1, s1);
        }
        for (int j = 0; j < 8; j++) {
            const __m512i ms = _mm512_and_si512(_mm512_srli_epi32(j < 4 ? mn03 : mn47, 8 * (j & 3)), lo8);
            m[j] = _mm512_or_si512(ms, _mm512_slli_epi32(ms, 16));
        }
        dv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hd[0]));
        dmv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hd[0], 16)));
    }
#undef DEC_UNIT
    isum = _mm512_add_epi32(isum, isum2);
    const uint8_t *bs = ab + 4 + QK_K;
    __m512i summ = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m[0], BCAST32(bs));
    __m512i sum2 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), m[1], BCAST32(bs + 4));
    for (int pp = 2; pp < 8; pp += 2) {
        summ = _mm512_dpwssd_epi32(summ, m[pp], BCAST32(bs + 4 * pp));
        sum2 = _mm512_dpwssd_epi32(sum2, m[pp + 1], BCAST32(bs + 4 * pp + 4));
    }
    summ = _mm512_add_epi32(summ, sum2);
    /* scalar order: sumf += dall*(float)isum - dmin*(float)summs */
    const __m512 ad = _mm512_set1_ps(ld_f32(ab));
    const __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(ad, dv), _mm512_cvtepi32_ps(isum));
    const __m512 t2 = _mm512_mul_ps(_mm512_mul_ps(ad, dmv), _mm512_cvtepi32_ps(summ));
    return _mm512_add_ps(facc, _mm512_sub_ps(t1, t2));
}

/* ------------------------------------------------------------------------ */
/* Single-token decode along the reduction axis (d1_*)                      */
/* ------------------------------------------------------------------------ */

/* For one token the packed tiles above have nothing to amortise their
 * transposition over: for Q2_K it costs as much as the products.  Here each
 * weight row is dotted along its own reduction axis instead: raw 64-byte
 * loads of its codes meet, in vpdpbusd, activation codes permuted once per
 * call into the weights' byte order; the 4-byte partial sums of two rows
 * (A, B) for the same code field are packed to words side by side, so one
 * vpdpwssd applies both rows' per-group scales (vpermb'd from their scale
 * bytes) and sums adjacent words: per 128-bit lane (A, A, B, B) partials.
 * The 16 rows of a strip are then reduced horizontally together per block
 * (21 shuffle/add ops per 16 rows), leaving in lane r the exact integer
 * block sum of row r; the min terms, d and dmin, and the float work are 16
 * lanes wide, on the strip's block headers transposed (tr16x4).  Same
 * integer sums, same float operations in the same order as the packed
 * tiles: bit-identical to them.  Loads: the 16 rows of a strip walk their
 * blocks side by side (16 short streams), the next strip prefetched ahead
 * of them: into L1 for Q2_K, Q8_0, IQ2_XXS and MXFP4, into L2 for Q4_K
 * (measured per format, docs/perf/kernels-diary.md "MXFP4 decode ..."). */

/* activation side of one 256-block */
typedef struct {
    __m512i a[4];       /* a[v]: codes in the byte order of weight vector v (per format) */
    int8_t bl[16];      /* min-term sums s (Q2_K: bsum_g; Q4_K: bsum_2j + bsum_2j+1): s & 127 */
    int8_t bh[16];      /* s >> 7 (arithmetic): s = 128 bh + bl, both bytes for vpdpbusd */
    float d;
    int32_t pad[7];
} d1act_t;
_Static_assert(sizeof(d1act_t) == 320, "d1act_t");

#define D1_MAXB 32      /* blocks per row the decode path takes (n <= 8192) */


VTI static void d1_split_bsums(__m128i s16x8lo, __m128i s16x8hi, d1act_t *p)
{
    const __m256i s = _mm256_inserti128_si256(_mm256_castsi128_si256(s16x8lo), s16x8hi, 1);
    _mm_storeu_si128((__m128i *)p->bl, _mm256_cvtepi16_epi8(_mm256_and_si256(s, _mm256_set1_epi16(127))));
    _mm_storeu_si128((__m128i *)p->bh, _mm256_cvtepi16_epi8(_mm256_srai_epi16(s, 7)));
}

VTI static __m512i cat256(const uint8_t *lo, const uint8_t *hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                              _mm256_loadu_si256((const __m256i *)hi), 1);
}

/* Q2_K: 2-bit field j of weight byte 32h + l holds element 128h + 32j + l:
 * a[j] byte 32h + l = that element's code.  Min sums: the 16 bsums. */
VTI static void d1_prep_q2_K(const uint8_t *blk, d1act_t *p)
{
    const uint8_t *q = blk + 4;
    for (int j = 0; j < 4; j++) p->a[j] = cat256(q + 32 * j, q + 128 + 32 * j);
    const uint8_t *bs = q + QK_K;
    d1_split_bsums(_mm_loadu_si128((const __m128i *)bs), _mm_loadu_si128((const __m128i *)(bs + 16)), p);
    p->d = ld_f32(blk);
}

/* Q4_K: vector 2c + hh of a row holds the low (hh = 0) / high nibbles of
 * qs[64c .. 64c + 63], i.e. elements 128c + 32hh + l (l < 32) and
 * 128c + 64 + 32hh + l.  Min sums: bsum_2j + bsum_2j+1. */
VTI static void d1_prep_q4_K(const uint8_t *blk, d1act_t *p)
{
    const uint8_t *q = blk + 4;
    for (int c = 0; c < 2; c++)
        for (int hh = 0; hh < 2; hh++) p->a[2 * c + hh] = cat256(q + 128 * c + 32 * hh, q + 128 * c + 64 + 32 * hh);
    const __m256i bs = _mm256_loadu_si256((const __m256i *)(q + QK_K));
    const __m256i pr = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));   /* 8 dwords: bsum_2j + bsum_2j+1 */
    const __m128i p16 = _mm256_cvtepi32_epi16(pr);
    d1_split_bsums(p16, _mm_setzero_si128(), p);
    p->d = ld_f32(blk);
}

/* transpose-add steps: (a, b) -> per 128-bit lane (a0+a2, b0+b2, a1+a3, b1+b3) */
VTI static __m512i hadd_l1(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
/* (a, b) -> per 128-bit lane (a.q0 + a.q1, b.q0 + b.q1) as dword pairs */
VTI static __m512i hadd_l2(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
/* (A A B B) and (C C D D) per 128-bit lane -> (A B C D) */
VTI static __m512i hadd_p2(__m512i x, __m512i y)
{
    const __m512 a = _mm512_castsi512_ps(x), b = _mm512_castsi512_ps(y);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))),
                            _mm512_castps_si512(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))));
}
/* 128-bit lanes (0+1, 2+3) of a, then of b */
VTI static __m512i hadd_l3(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* vpdpwssd step of a row pair: v += (partials of A | of B, as words) x scales */
VTI static __m512i d1_step(__m512i v, __m512i pa, __m512i pb, __m512i sc, __m512i idx)
{
    return _mm512_dpwssd_epi32(v, _mm512_packs_epi32(pa, pb),
                               _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, idx, sc));
}

/* Q2_K row pair (A, B) of a block.  Field j of byte 32h + l is in group
 * 8h + 2j + (l >= 16): one group per 128-bit lane of a vpdpbusd result.
 * sc: the scale bytes of 4 rows (low nibbles), idx[j] picks the pair's. */
VTI static __m512i d1_pair_q2_K(const uint8_t *ba, const uint8_t *bb, const d1act_t *p, __m512i sc,
                                const __m512i *idx)
{
    const __m512i qa = _mm512_loadu_si512(ba + 16), qb = _mm512_loadu_si512(bb + 16);
    const __m512i z = _mm512_setzero_si512(), k3 = _mm512_set1_epi8(3);
    /* gf2p8affineqb: output bit k <- input bit 2j + k (matrix byte 7 - k) */
    const __m512i s1 = _mm512_set1_epi64(0x0408000000000000ll), s2 = _mm512_set1_epi64(0x1020000000000000ll);
    const __m512i s3 = _mm512_set1_epi64(0x4080000000000000ll);
    __m512i v = d1_step(z, _mm512_dpbusd_epi32(z, _mm512_and_si512(qa, k3), p->a[0]),
                        _mm512_dpbusd_epi32(z, _mm512_and_si512(qb, k3), p->a[0]), sc, idx[0]);
    v = d1_step(v, _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qa, s1, 0), p->a[1]),
                _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qb, s1, 0), p->a[1]), sc, idx[1]);
    v = d1_step(v, _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qa, s2, 0), p->a[2]),
                _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qb, s2, 0), p->a[2]), sc, idx[2]);
    return d1_step(v, _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qa, s3, 0), p->a[3]),
                   _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qb, s3, 0), p->a[3]), sc, idx[3]);
}

/* Q4_K row pair: vector 2c + hh (low / high nibbles of qs[64c..64c+63]) is
 * in group 4c + hh + 2 (l >= 32): one group per 256-bit half.  sc: the
 * unpacked scales of 4 rows (d1_q4_K_scales), idx[v] picks the pair's. */
VTI static __m512i d1_pair_q4_K(const uint8_t *ba, const uint8_t *bb, const d1act_t *p, __m512i sc,
                                const __m512i *idx)
{
    const __m512i z = _mm512_setzero_si512(), k15 = _mm512_set1_epi8(15);
    const __m512i hi4 = _mm512_set1_epi64(0x1020408000000000ll);   /* output bit k <- input bit k + 4 */
    __m512i v = z;
    for (int c = 0; c < 2; c++) {
        const __m512i qa = _mm512_loadu_si512(ba + 16 + 64 * c), qb = _mm512_loadu_si512(bb + 16 + 64 * c);
        v = d1_step(v, _mm512_dpbusd_epi32(z, _mm512_and_si512(qa, k15), p->a[2 * c]),
                    _mm512_dpbusd_epi32(z, _mm512_and_si512(qb, k15), p->a[2 * c]), sc, idx[2 * c]);
        v = d1_step(v, _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qa, hi4, 0), p->a[2 * c + 1]),
                    _mm512_dpbusd_epi32(z, _mm512_gf2p8affine_epi64_epi8(qb, hi4, 0), p->a[2 * c + 1]), sc,
                    idx[2 * c + 1]);
    }
    return v;
}

/* Q4_K scales of the 4 rows of h (one block header per 128-bit lane):
 * bytes 4..7 = sc0..3 (low 6 bits of scales[0..3]), bytes 12..15 = sc4..7
 * ((scales[8..11] & 15) | (scales[0..3] >> 6) << 4); other bytes junk. */
VTI static __m512i d1_q4_K_scales(__m512i h)
{
    /* bits 6,7 -> 4,5 of each byte, then moved from dword 1 to dword 3 */
    const __m512i g = _mm512_bslli_epi128(_mm512_gf2p8affine_epi64_epi8(h, _mm512_set1_epi64(0x0000000040800000ll), 0), 8);
    const __m512i m = _mm512_set4_epi32(0x0f0f0f0f, 0, 0x3f3f3f3f, 0);
    return _mm512_ternarylogic_epi32(h, m, g, 0xea);   /* (h & m) | g */
}

/* vpermb controls of d1_step, [Q2_K, Q4_K][weight vector v]: byte 2w of
 * 128-bit lane L = the scale of the group of that lane for vector v, of
 * row A (w < 4; its 16 header bytes at 0..15 of the scale vector) or row B
 * (w >= 4; at 16..31); odd bytes are zeroed by the mask (set up with the
 * tables) */
static uint8_t d1_idx_tab[2][4][64] __attribute__((aligned(64)));

static void d1_idx_init(void)
{
    for (int fk = 0; fk < 2; fk++)
        for (int v = 0; v < 4; v++)
            for (int L = 0; L < 4; L++)
                for (int w = 0; w < 8; w++) {
                    int pos;
                    if (fk == 0) {
                        pos = 8 * (L >> 1) + (L & 1) + 2 * v;                  /* scale byte g */
                    } else {
                        const int g = 4 * (v >> 1) + (v & 1) + 2 * (L >> 1);
                        pos = g < 4 ? 4 + g : 8 + g;                           /* see d1_q4_K_scales */
                    }
                    d1_idx_tab[fk][v][16 * L + 2 * w] = (uint8_t)((w >= 4 ? 16 : 0) + pos);
                    d1_idx_tab[fk][v][16 * L + 2 * w + 1] = 0;
                }
}

/* One strip of 16 rows (nr valid; rows past nr repeat the last) x nb
 * blocks, one token: lane r of the result = the dot product of row r.
 *   phase 1: the row pairs (2p, 2p + 1) walk all their blocks in turn, so
 *     the strip is read almost sequentially (two adjacent rows side by
 *     side): their partial vectors wait in vb; the 16-byte block headers
 *     (Q2_K: scales; Q4_K: d, dmin, scales) and Q2_K's (d, dmin) are
 *     copied, dword by dword, transposed into hb (lane = row) -- plain
 *     loads and stores, no shuffles;
 *   phase 2, per block: the horizontal reduction of vb (lane r = exact
 *     integer sum of row r), the min terms and the float work, 16 lanes
 *     wide on hb.
 * Prefetch: the bytes pfd ahead of the reads, at the pace of phase 1 (one
 * pair-block of bytes per pair-block). */
VTI static __m512 d1_strip(int f, const uint8_t *w, size_t ws, int nr, int nb, const d1act_t *act,
                           uintptr_t pfa)
{
    const uint8_t *rows[16];
    strip_rows(w, ws, nr, rows);
    const size_t bb = f == VF_Q2_K ? sizeof(block_q2_K) : sizeof(block_q4_K);
    __m512i idx[4];
    for (int v = 0; v < 4; v++) idx[v] = _mm512_load_si512(d1_idx_tab[f == VF_Q2_K ? 0 : 1][v]);
    __m512i vb[D1_MAXB * 8];
    /* hb[5 * kb + q] lane r: header dword q of row r (q = 4: Q2_K d, dmin) */
    uint32_t hb[D1_MAXB * 5][16] __attribute__((aligned(64)));
    for (int pr = 0; pr < 8; pr++) {
        const uint8_t *ra = rows[2 * pr], *rb = rows[2 * pr + 1];
        for (int kb = 0; kb < nb; kb++) {
            /* into L1 for Q2_K (bench_kernels, one thread: +6 %), L2 for
             * Q4_K (L1 measured 5-12 % slower on its n = 4096 rows) */
            for (size_t o = 0; o < 2 * bb; o += 64) {
                if (f == VF_Q2_K) _mm_prefetch((const char *)(pfa + o), _MM_HINT_T0);
                else _mm_prefetch((const char *)(pfa + o), _MM_HINT_T1);
            }
            pfa += 2 * bb;
            const size_t off = (size_t)kb * bb;
            for (int q = 0; q < 4; q++) {
                memcpy(&hb[5 * kb + q][2 * pr], ra + off + 4 * q, 4);
                memcpy(&hb[5 * kb + q][2 * pr + 1], rb + off + 4 * q, 4);
            }
            if (f == VF_Q2_K) {
                memcpy(&hb[5 * kb + 4][2 * pr], ra + off + 80, 4);
                memcpy(&hb[5 * kb + 4][2 * pr + 1], rb + off + 80, 4);
            }
            const __m512i h = _mm512_castsi256_si512(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(ra + off))),
                _mm_loadu_si128((const __m128i *)(rb + off)), 1));
            if (f == VF_Q2_K)
                vb[8 * kb + pr] = d1_pair_q2_K(ra + off, rb + off, act + kb, _mm512_and_si512(h, _mm512_set1_epi8(15)), idx);
            else
                vb[8 * kb + pr] = d1_pair_q4_K(ra + off, rb + off, act + kb, d1_q4_K_scales(h), idx);
        }
    }
    __m512 facc = _mm512_setzero_ps();
    for (int kb = 0; kb < nb; kb++) {
        const d1act_t *p = act + kb;
        const __m512i *v = vb + 8 * kb;
        /* pairs (A A B B per 128-bit lane) -> rows 4i..4i+3 per lane -> lane r = row r */
        const __m512i isum = hadd_l3(hadd_l3(hadd_p2(v[0], v[1]), hadd_p2(v[2], v[3])),
                                     hadd_l3(hadd_p2(v[4], v[5]), hadd_p2(v[6], v[7])));
        /* min terms: summ = sum m * s with s = 128 bh + bl, bytes for vpdpbusd */
        __m512i sl = _mm512_setzero_si512(), sh = _mm512_setzero_si512();
        __m512i dd;
        if (f == VF_Q2_K) {
            const __m512i hi4 = _mm512_set1_epi64(0x1020408000000000ll);   /* bits 4..7 -> 0..3 */
            for (int q = 0; q < 4; q++) {
                const __m512i mn = _mm512_gf2p8affine_epi64_epi8(_mm512_load_si512(hb[5 * kb + q]), hi4, 0);
                sl = _mm512_dpbusd_epi32(sl, mn, BCAST32(p->bl + 4 * q));
                sh = _mm512_dpbusd_epi32(sh, mn, BCAST32(p->bh + 4 * q));
            }
            dd = _mm512_load_si512(hb[5 * kb + 4]);
        } else {
            const __m512i u1 = _mm512_load_si512(hb[5 * kb + 2]), u2 = _mm512_load_si512(hb[5 * kb + 3]);
            const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f);
            const __m512i k03 = _mm512_set1_epi32(0x03030303);
            const __m512i mn03 = _mm512_and_si512(u1, k3f);
            const __m512i mn47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k0f),
                                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k03), 4));
            sl = _mm512_dpbusd_epi32(sl, mn03, BCAST32(p->bl));
            sh = _mm512_dpbusd_epi32(sh, mn03, BCAST32(p->bh));
            sl = _mm512_dpbusd_epi32(sl, mn47, BCAST32(p->bl + 4));
            sh = _mm512_dpbusd_epi32(sh, mn47, BCAST32(p->bh + 4));
            dd = _mm512_load_si512(hb[5 * kb]);
        }
        const __m512 dv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        const __m512 dmv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
        const __m512i summ = _mm512_add_epi32(sl, _mm512_slli_epi32(sh, 7));
        /* scalar order: sumf += dall*(float)isum - dmin*(float)summs */
        const __m512 ad = _mm512_set1_ps(p->d);
        const __m512 t1 = _mm512_mul_ps(_mm512_mul_ps(ad, dv), _mm512_cvtepi32_ps(isum));
        const __m512 t2 = _mm512_mul_ps(_mm512_mul_ps(ad, dmv), _mm512_cvtepi32_ps(summ));
        facc = _mm512_add_ps(facc, _mm512_sub_ps(t1, t2));
    }
    return facc;
}

VT static __m512 d1_strip_q2_K(const uint8_t *w, size_t ws, int nr, int nb, const d1act_t *act,
                               uintptr_t pfa)
{
    return d1_strip(VF_Q2_K, w, ws, nr, nb, act, pfa);
}

VT static __m512 d1_strip_q4_K(const uint8_t *w, size_t ws, int nr, int nb, const d1act_t *act,
                               uintptr_t pfa)
{
    return d1_strip(VF_Q4_K, w, ws, nr, nb, act, pfa);
}

#define D1_PF_DIST 8192     /* prefetch distance, bytes */

/* Q8_0, one token, one strip (nr valid): the scheme of d1_strip.  A row
 * pair (2p, 2p + 1) takes the 32 codes of a block of both rows in one zmm
 * (biased to unsigned; the activation side removes 128 * sum(a) per block)
 * against the block's activation codes twice: one vpdpbusd per pair-block,
 * lanes 0..7 row A, 8..15 row B.  A row has n / 32 blocks, so the partials
 * of whole rows take room: rows of up to D1Q8_PAIRB blocks (n <= 1024) are
 * walked by pairs, their partials kept per pair (16 KB); longer ones by
 * two groups of 8 rows (4 pairs side by side, 8 streams), whose pair
 * partials are reduced to one vector per group and block on the fly.
 * n = 2048 (the shared expert's down) went from pairs to groups when the
 * groups' prefetch stopped skipping lines: one thread 27 -> 32 GB/s, two
 * unchanged; n = 1024 (q_b) stays faster by pairs. */
#define D1Q8_PAIRB 32
#define D1Q8_MAXB 256    /* n <= 8192 */
#define D1Q8_PF 1024     /* long rows: prefetch distance per row stream */

/* Layout-sensitive: one 8 KB field added before corr/d halved the Q8_0
 * one-token kernel on Zen 5 (bench_kernels q8_0 T = 1, head: 15-21 ->
 * 8-12 GB/s in six runs alternated with the unchanged build) and 512 more
 * bytes of it restored the speed (one run);
 * the cause (the walks' stack stores against these loads, modulo 4 KB?)
 * was not pinned down without performance counters.  Re-run
 * bench_kernels --formats q8_0 --tokens 1 against the previous build
 * after any change here or to the d1_strip_q8_0* locals
 * (docs/perf/kernels-diary.md, "Q8_0 decode: what did not help"). */
typedef struct {
    __m512i a2[D1Q8_MAXB];      /* block codes, twice */
    int32_t corr[D1Q8_MAXB];    /* -128 * sum of the block's codes */
    float d[D1Q8_MAXB];
} d1q8act_t;

VTI static void d1_prep_q8_0(const uint8_t *a, int nb, d1q8act_t *p)
{
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = a + (size_t)b * sizeof(block_q8_0a);
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 4));
        p->a2[b] = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
        p->corr[b] = q8_0a_corr(blk);
        p->d[b] = ld_f32(blk);
    }
}

/* per block: lane r of the network output is row unperm[r]; then the
 * float work (scalar order: sumf += (float)sumi * (dw * da)) */
VTI static __m512 d1_q8_0_tail(__m512i net, const uint16_t *hd, const d1q8act_t *act, int kb, __m512 facc)
{
    /* network output lane 4L + k holds row 2k (L = 0), 2k + 1 (L = 1),
     * 8 + 2k (L = 2), 9 + 2k (L = 3) */
    const __m512i unperm = _mm512_set_epi32(15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0);
    const __m512i sumi = _mm512_add_epi32(_mm512_permutexvar_epi32(unperm, net), _mm512_set1_epi32(act->corr[kb]));
    const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)hd));
    const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(act->d[kb]));
    return _mm512_add_ps(facc, _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), sc));
}

VT static __m512 d1_strip_q8_0_long(const uint8_t *w, size_t ws, int nr, int nb, const d1q8act_t *act)
{
    const uint8_t *rows[16];
    strip_rows(w, ws, nr, rows);
    const size_t bb = sizeof(block_q8_0), rl = (size_t)nb * bb;
    __m512i vb[2 * D1Q8_MAXB];
    uint16_t hd[D1Q8_MAXB][16] __attribute__((aligned(64)));
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int gr = 0; gr < 2; gr++) {
        const uint8_t *const *r8 = rows + 8 * gr;
        for (int kb = 0; kb < nb; kb++) {
            const size_t off = (size_t)kb * bb;
            /* each row D1Q8_PF bytes ahead, into the next group of 8 rows
             * (then the next strip) past its end, at every block: one
             * prefetch per two blocks (68 bytes) skipped a line in 16,
             * and those demand misses cost 20 % (bench_kernels q8_0
             * expert_up/head, one thread: 22-23 -> 28-31 GB/s) */
            {
                size_t po = off + D1Q8_PF;
                const size_t skip = po >= rl ? 8 * ws : 0;
                if (po >= rl) po -= rl;
                for (int r = 0; r < 8; r++) _mm_prefetch((const char *)((uintptr_t)r8[r] + skip + po), _MM_HINT_T0);
            }
            __m512i pv[4];
            for (int pr = 0; pr < 4; pr++) {
                const uint8_t *ra = r8[2 * pr], *rb = r8[2 * pr + 1];
                memcpy(&hd[kb][8 * gr + 2 * pr], ra + off, 2);
                memcpy(&hd[kb][8 * gr + 2 * pr + 1], rb + off, 2);
                const __m512i u = _mm512_xor_si512(cat256(ra + off + 2, rb + off + 2), x80);
                pv[pr] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, act->a2[kb]);
            }
            vb[2 * kb + gr] = hadd_l2(hadd_l1(pv[0], pv[1]), hadd_l1(pv[2], pv[3]));
        }
    }
    __m512 facc = _mm512_setzero_ps();
    for (int kb = 0; kb < nb; kb++) facc = d1_q8_0_tail(hadd_l3(vb[2 * kb], vb[2 * kb + 1]), hd[kb], act, kb, facc);
    return facc;
}

VT static __m512 d1_strip_q8_0(const uint8_t *w, size_t ws, int nr, int nb, const d1q8act_t *act, uintptr_t pfa)
{
    const uint8_t *rows[16];
    strip_rows(w, ws, nr, rows);
    const size_t bb = sizeof(block_q8_0);
    __m512i vb[D1Q8_PAIRB * 8];
    uint16_t hd[D1Q8_PAIRB][16] __attribute__((aligned(64)));
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    for (int pr = 0; pr < 8; pr++) {
        const uint8_t *ra = rows[2 * pr], *rb = rows[2 * pr + 1];
        for (int kb = 0; kb < nb; kb++) {
            for (size_t o = 0; o < 2 * bb; o += 64) _mm_prefetch((const char *)(pfa + o), _MM_HINT_T0);
            pfa += 2 * bb;
            const size_t off = (size_t)kb * bb;
            memcpy(&hd[kb][2 * pr], ra + off, 2);
            memcpy(&hd[kb][2 * pr + 1], rb + off, 2);
            const __m512i u = _mm512_xor_si512(cat256(ra + off + 2, rb + off + 2), x80);
            vb[8 * kb + pr] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, act->a2[kb]);
        }
    }
    __m512 facc = _mm512_setzero_ps();
    for (int kb = 0; kb < nb; kb++) {
        const __m512i *v = vb + 8 * kb;
        facc = d1_q8_0_tail(hadd_l3(hadd_l2(hadd_l1(v[0], v[1]), hadd_l1(v[2], v[3])),
                                    hadd_l2(hadd_l1(v[4], v[5]), hadd_l1(v[6], v[7]))), hd[kb], act, kb, facc);
    }
    return facc;
}

/* IQ2_XXS, one token, one strip (nr valid): the scheme of d1_strip.  A row
 * pair's two 64-byte blocks (qword g: the four grid indices of group g,
 * then its sign/scale word) are merged by a shift and a blend each into the
 * 64 grid indices (qword g: row A's four of group g, then row B's) and the
 * 16 sign/scale words (dword 2g: group g of A, 2g + 1: of B).  The grid
 * expansion is the packed tiles' one, on the pair instead of on 16
 * transposed rows: indices -> 2-bit codes (iq2_idx_codes, vpermi2b), codes of
 * element s of every entry -> 128 + magnitude (gf2p8affineqb), sign bytes
 * (7 stored bits + parity) -> per-element masks -> 128 - magnitude.  Then
 * vector s (element s of each entry) meets the activation codes of those
 * elements: every vpdpbusd lands a group's products in that group's dword,
 * so the eight vectors accumulate into one: even lanes the biased group
 * sums of row A, odd lanes of row B.  Bias out (the activation's bsums),
 * the group scales in (vpmulld), and a horizontal reduction that leaves
 * the rows in order (see d1_strip_iq2 for the pairing).
 * Shuffles take port 5 only on AVX-512 Intel cores (measured on one:
 * vpermi2b two cycles, vpermt2d/vpermb/vpmultishiftqb/vpopcntb one;
 * gf2p8affineqb and shifts go to port 0; vpdpbusd, blends, masked
 * subtracts and ternary logic to either), so the merge (once two
 * vpermt2d) and the parity (once vpopcntb + shift + ternary logic) are
 * shifts, blends and one gf2p8affineqb: 10 port-5 cycles per pair and
 * block instead of 13.  It did not measurably speed this kernel up there
 * (docs/perf/kernels-diary.md, eighth session): port 5 is not its limit. */
typedef struct {
    __m512i a[8];       /* a[s] byte 8g + l (and 8g + 4 + l): code of element 32g + 8l + s */
    __m512i corr;       /* lanes 2g and 2g + 1: 128 * (bsum_2g + bsum_2g+1) */
    float d;
    int32_t pad[15];
} d1iq2act_t;

VTI static void d1_prep_iq2(const uint8_t *blk, d1iq2act_t *p)
{
    for (int s = 0; s < 8; s++) {
        /* 256 codes: two 128-byte halves for vpermi2b by index bit 7 */
        const __m512i ix = _mm512_load_si512(d1_iq2_perm[s]);
        const __m512i lo = _mm512_permutex2var_epi8(_mm512_loadu_si512(blk + 4), ix, _mm512_loadu_si512(blk + 68));
        const __m512i hi = _mm512_permutex2var_epi8(_mm512_loadu_si512(blk + 132), ix, _mm512_loadu_si512(blk + 196));
        p->a[s] = _mm512_mask_blend_epi8(_mm512_movepi8_mask(ix), lo, hi);
    }
    const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)(blk + 4 + QK_K)));
    /* dwords 2g and 2g + 1 = bsum_2g + bsum_2g+1 */
    const __m512i pr = _mm512_add_epi32(_mm512_permutexvar_epi32(_mm512_set_epi32(14, 14, 12, 12, 10, 10, 8, 8, 6, 6, 4, 4, 2, 2, 0, 0), bs),
                                        _mm512_permutexvar_epi32(_mm512_set_epi32(15, 15, 13, 13, 11, 11, 9, 9, 7, 7, 5, 5, 3, 3, 1, 1), bs));
    p->corr = _mm512_slli_epi32(pr, 7);
    p->d = ld_f32(blk);
}

typedef struct {
    iq2_code_tab ct;            /* the grid's code tables */
    __m512i vmap[4];            /* code bits (2i, 2i+1) -> 128 + magnitude, xor 0x88 */
    __m512i sh_s7;              /* sign fields, byte 7 - m of a qword <- entry m */
    __m512i par7;               /* gf2p8affineqb: bits 0..6 kept, bit 7 <- their parity */
    __m512i bitsel, gidx;
} d1iq2k_t;

VTI static void d1_iq2_consts(d1iq2k_t *k)
{
    iq2_code_tab_load(&k->ct, iq2_codes);
    for (int i = 0; i < 4; i++) {
        k->vmap[i] = _mm512_set1_epi64((long long)((uint64_t)(3u << (2 * i)) << 56 | (uint64_t)(2u << (2 * i)) << 48 |
                                                   (uint64_t)(1u << (2 * i)) << 24 | (uint64_t)(2u << (2 * i)) << 16));
    }
    uint64_t shs = 0;
    for (int m = 0; m < 8; m++) shs |= (uint64_t)(32 * (m >> 2) + 7 * (m & 3)) << (8 * (7 - m));
    k->sh_s7 = _mm512_set1_epi64((long long)shs);
    /* matrix byte 7 - i = the input bits of output bit i: bit i for i < 7,
     * bits 0..6 for bit 7 (the stored sign field's parity) */
    k->par7 = _mm512_set1_epi64(0x010204081020407Fll);
    k->bitsel = _mm512_set1_epi64(0x8040201008040201ll);
    uint8_t gi[64];
    for (int i = 0; i < 64; i++) gi[i] = (uint8_t)(8 * (i & 7) + (i >> 3));
    k->gidx = _mm512_loadu_si512(gi);
}

/* sign masks of a row pair's block: qword s = bit s of the 64 entries'
 * sign bytes (stored, then read as mask registers) */
VTI static __m512i d1_iq2_masks(__m512i sg, const d1iq2k_t *k)
{
    /* the multishift's bit 7 is the next field's: the matrix ignores it */
    const __m512i sb = _mm512_gf2p8affine_epi64_epi8(_mm512_multishift_epi64_epi8(k->sh_s7, sg), k->par7, 0);
    return _mm512_permutexvar_epi8(k->gidx, _mm512_gf2p8affine_epi64_epi8(k->bitsel, sb, 0));
}

/* one row pair, one block: lane 2g = ls_g * (group sum) of row A, 2g + 1 of B */
VTI static __m512i d1_pair_iq2(__m512i idx, __m512i sg, const __mmask64 *msk, const d1iq2act_t *p, const d1iq2k_t *k)
{
    __m512i clo, chi;
    iq2_idx_codes(&k->ct, idx, &clo, &chi);
    const __m512i z = _mm512_setzero_si512();
    __m512i acc0 = z, acc1 = z;
    for (int s = 0; s < 8; s += 2) {
        const __m512i v0 = _mm512_gf2p8affine_epi64_epi8(s < 4 ? clo : chi, k->vmap[s & 3], 0x88);
        const __m512i v1 = _mm512_gf2p8affine_epi64_epi8(s < 4 ? clo : chi, k->vmap[(s + 1) & 3], 0x88);
        acc0 = _mm512_dpbusd_epi32(acc0, _mm512_mask_sub_epi8(v0, msk[s], z, v0), p->a[s]);
        acc1 = _mm512_dpbusd_epi32(acc1, _mm512_mask_sub_epi8(v1, msk[s + 1], z, v1), p->a[s + 1]);
    }
    /* ls = 2 * (aux1 >> 28) + 1 */
    const __m512i ls = _mm512_ternarylogic_epi32(_mm512_srli_epi32(sg, 27), _mm512_set1_epi32(0x1e), _mm512_set1_epi32(1), 0xea);   /* (a & b) | c */
    return _mm512_mullo_epi32(_mm512_sub_epi32(_mm512_add_epi32(acc0, acc1), p->corr), ls);
}

/* index qwords (A's four, B's four) and sign/scale dwords (A, B) of the
 * group qwords of two rows' blocks */
VTI static void d1_iq2_merge(__m512i la, __m512i lb, __m512i *idx, __m512i *sg)
{
    *idx = _mm512_mask_blend_epi32(0xaaaa, la, _mm512_slli_epi64(lb, 32));
    *sg = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(la, 32), lb);
}

/* Pair slot q takes rows 4k + j and 4k + j + 2 (k = q / 2, j = q % 2), not
 * two adjacent rows: the reduction below then leaves row r in lane r with
 * no final permutation.  The strip is still read almost sequentially. */
VT static __m512 d1_strip_iq2(const uint8_t *w, size_t ws, int nr, int nb, const d1iq2act_t *act,
                              const d1iq2k_t *k, uintptr_t pfa)
{
    const uint8_t *rows[16];
    strip_rows(w, ws, nr, rows);
    const size_t bb = sizeof(block_iq2_xxs);
    __m512i vb[D1_MAXB * 8];
    uint16_t hd[D1_MAXB][16] __attribute__((aligned(64)));
    /* masks of block kb + 1 are made while block kb computes: a 64-bit mask
     * load right after the 64-byte store that wrote it would stall */
    __mmask64 msk[2][8] __attribute__((aligned(64)));
    for (int q = 0; q < 8; q++) {
        const int r = 4 * (q >> 1) + (q & 1);
        const uint8_t *ra = rows[r], *rb = rows[r + 2];
        __m512i idx, sg;
        d1_iq2_merge(_mm512_loadu_si512(ra + 2), _mm512_loadu_si512(rb + 2), &idx, &sg);
        _mm512_store_si512(msk[0], d1_iq2_masks(sg, k));
        for (int kb = 0; kb < nb; kb++) {
            for (size_t o = 0; o < 2 * bb; o += 64) _mm_prefetch((const char *)(pfa + o), _MM_HINT_T0);
            pfa += 2 * bb;
            const size_t off = (size_t)kb * bb;
            memcpy(&hd[kb][r], ra + off, 2);
            memcpy(&hd[kb][r + 2], rb + off, 2);
            __m512i idx1 = idx, sg1 = sg;
            if (kb + 1 < nb) {
                d1_iq2_merge(_mm512_loadu_si512(ra + off + bb + 2), _mm512_loadu_si512(rb + off + bb + 2), &idx1, &sg1);
                _mm512_store_si512(msk[(kb + 1) & 1], d1_iq2_masks(sg1, k));
            }
            vb[8 * kb + q] = d1_pair_iq2(idx, sg, msk[kb & 1], act + kb, k);
            idx = idx1;
            sg = sg1;
        }
    }
    __m512 facc = _mm512_setzero_ps();
    for (int kb = 0; kb < nb; kb++) {
        const __m512i *v = vb + 8 * kb;
        /* hadd_l1 of slots 2k, 2k + 1: per 128-bit lane (A, A', B, B')
         * partials; three hadd_l3 sum the lanes, leaving 128-bit lane k =
         * slots 2k, 2k + 1 = rows (4k, 4k + 1, 4k + 2, 4k + 3) */
        const __m512i s = hadd_l3(hadd_l3(hadd_l1(v[0], v[1]), hadd_l1(v[2], v[3])),
                                  hadd_l3(hadd_l1(v[4], v[5]), hadd_l1(v[6], v[7])));
        /* scalar order: sumf += (f16(w.d) * a.d) * (float)bsum */
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)hd[kb])),
                                       _mm512_set1_ps(act[kb].d));
        facc = _mm512_add_ps(facc, _mm512_mul_ps(d, _mm512_cvtepi32_ps(s)));
    }
    return _mm512_mul_ps(_mm512_set1_ps(0.125f), facc);
}

/* One token through the reduction-axis kernels: returns 0 (nothing done)
 * for the formats and sizes they do not take. */
__attribute__((noinline)) VT static int d1_matvec(int f, int n, const uint8_t *w, size_t ws, int nrows,
                                                  const void *a, float *y)
{
    if (f == VF_Q8_0) {
        const int nb8 = n / QK8_0;
        if (nb8 > D1Q8_MAXB) return 0;
        d1q8act_t act8 __attribute__((aligned(64)));
        d1_prep_q8_0(a, nb8, &act8);
        const uint8_t *w_end = w + (size_t)nrows * ws;
        if (nb8 <= D1Q8_PAIRB)
            for (const uint8_t *q = w; q < w + D1_PF_DIST && q < w_end; q += 64) _mm_prefetch((const char *)q, _MM_HINT_T1);
        else
            for (int r = 0; r < 8 && r < nrows; r++)
                for (size_t o = 0; o < D1Q8_PF; o += 64) _mm_prefetch((const char *)w + (size_t)r * ws + o, _MM_HINT_T1);
        for (int r0 = 0; r0 < nrows; r0 += 16) {
            const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
            const uint8_t *ws0 = w + (size_t)r0 * ws;
            const __m512 v = nb8 <= D1Q8_PAIRB ? d1_strip_q8_0(ws0, ws, nr, nb8, &act8, (uintptr_t)ws0 + D1_PF_DIST)
                                               : d1_strip_q8_0_long(ws0, ws, nr, nb8, &act8);
            _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << nr) - 1), v);
        }
        return 1;
    }
    const int nb = n / QK_K;
    if (nb > D1_MAXB) return 0;
    if (f == VF_IQ2) {
        d1iq2act_t act2[D1_MAXB];
        for (int kb = 0; kb < nb; kb++) d1_prep_iq2((const uint8_t *)a + (size_t)kb * sizeof(block_q8_K), &act2[kb]);
        d1iq2k_t k;
        d1_iq2_consts(&k);
        const uint8_t *w_end = w + (size_t)nrows * ws;
        for (const uint8_t *q = w; q < w + D1_PF_DIST && q < w_end; q += 64) _mm_prefetch((const char *)q, _MM_HINT_T1);
        for (int r0 = 0; r0 < nrows; r0 += 16) {
            const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
            const uint8_t *ws0 = w + (size_t)r0 * ws;
            const __m512 v = d1_strip_iq2(ws0, ws, nr, nb, act2, &k, (uintptr_t)ws0 + D1_PF_DIST);
            _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << nr) - 1), v);
        }
        return 1;
    }
    d1act_t act[D1_MAXB];
    for (int kb = 0; kb < nb; kb++) {
        const uint8_t *ak = (const uint8_t *)a + (size_t)kb * sizeof(block_q8_K);
        if (f == VF_Q2_K) d1_prep_q2_K(ak, &act[kb]);
        else d1_prep_q4_K(ak, &act[kb]);
    }
    const uint8_t *w_end = w + (size_t)nrows * ws;
    /* the reads start cold: the first D1_PF_DIST bytes at once */
    for (const uint8_t *q = w; q < w + D1_PF_DIST && q < w_end; q += 64) _mm_prefetch((const char *)q, _MM_HINT_T1);
    for (int r0 = 0; r0 < nrows; r0 += 16) {
        const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
        const uint8_t *ws0 = w + (size_t)r0 * ws;
        const __m512 v = f == VF_Q2_K ? d1_strip_q2_K(ws0, ws, nr, nb, act, (uintptr_t)ws0 + D1_PF_DIST)
                                      : d1_strip_q4_K(ws0, ws, nr, nb, act, (uintptr_t)ws0 + D1_PF_DIST);
        _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << nr) - 1), v);
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Few tokens (2..TOK_TILE) of Q8_0 along the reduction axis (dn_*)         */
/* ------------------------------------------------------------------------ */

/* A verification pass (speculative decoding) or a batched step of a few
 * sessions multiplies every dense Q8_0 matrix by 2-8 tokens.  The packed
 * tiles transpose 16 rows x 32 codes into 8 vectors per block (24 shuffles,
 * a gather of the scales, 8 stores and reloads: measured ~40 cycles per 16
 * rows x 32 elements, more than four tokens' products), and the d1 scheme
 * reduces 8 pair vectors per block and token horizontally (7 transpose-add
 * steps per token).  Here 8 rows are transposed by qwords instead: vector
 * s of an octet holds, in qword m, codes 8s..8s+7 of row m (4 unpacks and
 * 4 lane shuffles per 8 rows and block, once for every token); the
 * activation side is one broadcast qword load per vector and token.  Four
 * chained vpdpbusd leave in dword lanes 2m, 2m + 1 two partial sums of row
 * m; one transpose-add step of the two octets (hadd_p2) finishes the exact
 * block sums of 16 rows for a token.  Per token and 16 rows x 32 elements:
 * 8 vpdpbusd + 3 reduction ops + the float step, nothing on the weights.
 * The float step is the scalar order (sumf += (float)sumi * (dw * da),
 * block by block from 0), in the lane order the reduction leaves, so every
 * output equals the single-row kernel bit for bit; the lanes are put back
 * in row order once per strip and token.  Loads: the 16 rows walk their
 * blocks side by side, each prefetched DNQ8_PF bytes ahead and into the
 * next strip past its end (the d1 long-row scheme). */
#define DNQ8_MAXB 256   /* blocks per row (n <= 8192): bounds corr[] (8 KB of stack) */
#define DNQ8_PF 1024    /* prefetch distance per row stream, bytes */

/* lane p of hadd_p2(octet 0, octet 1) holds row dn_rowof[p]: octet qword
 * m is row (0, 2, 1, 3, 4, 6, 5, 7)[m] (dn_q8_0_oct), and hadd_p2 takes
 * qwords 2L, 2L + 1 of each octet into 128-bit lane L */
static const uint8_t dn_rowof[16] = { 0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15 };

static inline int64_t ld_i64(const void *p) { int64_t v; memcpy(&v, p, 8); return v; }

/* Block `off` of 8 rows (r8[m]) -> W[s] qword m' = codes 8s..8s+7 of row
 * (0, 2, 1, 3, 4, 6, 5, 7)[m'], biased to unsigned. */
VTI static void dn_q8_0_oct(const uint8_t *const *r8, size_t off, __m512i *W)
{
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    __m512i c[4];
    for (int p = 0; p < 4; p++)    /* c[p] = rows 2p | 2p + 1 */
        c[p] = _mm512_xor_si512(cat256(r8[2 * p] + off + 2, r8[2 * p + 1] + off + 2), x80);
    /* per 128-bit lane L: (row 2p qword L' of the pair, row 2p + 2 ...) */
    const __m512i u0 = _mm512_unpacklo_epi64(c[0], c[1]), u1 = _mm512_unpackhi_epi64(c[0], c[1]);
    const __m512i v0 = _mm512_unpacklo_epi64(c[2], c[3]), v1 = _mm512_unpackhi_epi64(c[2], c[3]);
    W[0] = _mm512_shuffle_i64x2(u0, v0, _MM_SHUFFLE(2, 0, 2, 0));
    W[1] = _mm512_shuffle_i64x2(u1, v1, _MM_SHUFFLE(2, 0, 2, 0));
    W[2] = _mm512_shuffle_i64x2(u0, v0, _MM_SHUFFLE(3, 1, 3, 1));
    W[3] = _mm512_shuffle_i64x2(u1, v1, _MM_SHUFFLE(3, 1, 3, 1));
}

/* One strip (nr valid rows; rows past nr repeat the last) x C tokens:
 * y[j * ys + r] for r < nr.  corr[j * nb + kb] = -128 * sum of token j's
 * codes in block kb. */
VTI static void dn_strip_q8_0(const uint8_t *w, size_t ws, int nr, int nb, const uint8_t *const *a,
                              const int32_t *corr, int C, float *y, size_t ys)
{
    const uint8_t *rows[16];
    strip_rows(w, ws, nr, rows);
    const size_t bb = sizeof(block_q8_0), ab = sizeof(block_q8_0a), rl = (size_t)nb * bb;
    uint16_t hd[16] __attribute__((aligned(32)));
    __m512 facc[TOK_TILE];
    for (int j = 0; j < C; j++) facc[j] = _mm512_setzero_ps();
    for (int kb = 0; kb < nb; kb++) {
        const size_t off = (size_t)kb * bb;
        /* DNQ8_PF ahead, at every block (one per two blocks skips a line
         * in 16), into L1: bench_kernels q8_0, 2 and 4 tokens, one
         * thread, +10-20 % over a line per two blocks into L2; past the
         * row's end, the same row of the next strip */
        {
            size_t po = off + DNQ8_PF;
            const size_t skip = po >= rl ? 16 * ws : 0;
            if (po >= rl) po -= rl;
            for (int r = 0; r < 16; r++) _mm_prefetch((const char *)((uintptr_t)rows[r] + skip + po), _MM_HINT_T0);
        }
        for (int p = 0; p < 16; p++) memcpy(&hd[p], rows[dn_rowof[p]] + off, 2);
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)hd));
        __m512i W0[4], W1[4];
        dn_q8_0_oct(rows, off, W0);
        dn_q8_0_oct(rows + 8, off, W1);
        for (int j = 0; j < C; j++) {
            const uint8_t *q = a[j] + (size_t)kb * ab;
            __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
            for (int s = 0; s < 4; s++) {
                const __m512i bq = _mm512_set1_epi64(ld_i64(q + 4 + 8 * s));
                s0 = _mm512_dpbusd_epi32(s0, W0[s], bq);
                s1 = _mm512_dpbusd_epi32(s1, W1[s], bq);
            }
            const __m512i sumi = _mm512_add_epi32(hadd_p2(s0, s1), _mm512_set1_epi32(corr[j * nb + kb]));
            /* scalar order: sumf += (float)sumi * (dw * da), block by block */
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(ld_f32(q)));
            facc[j] = _mm512_add_ps(facc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), sc));
        }
    }
    /* lane r <- lane holding row r (the inverse of dn_rowof) */
    const __m512i pos = _mm512_set_epi32(15, 11, 14, 10, 7, 3, 6, 2, 13, 9, 12, 8, 5, 1, 4, 0);
    const __mmask16 km = (__mmask16)((1u << nr) - 1);
    for (int j = 0; j < C; j++)
        _mm512_mask_storeu_ps(y + (size_t)j * ys, km, _mm512_permutexvar_ps(pos, facc[j]));
}

/* 2..TOK_TILE tokens of Q8_0 through dn_strip_q8_0: returns 0 (nothing
 * done) for other token counts and rows longer than DNQ8_MAXB blocks. */
__attribute__((noinline)) VT static int dn_matvec_q8_0(int n, const uint8_t *w, size_t ws, int nrows,
                                                       const void *const *a, int ntok, float *y, size_t ys)
{
    const int nb = n / QK8_0;
    if (nb > DNQ8_MAXB || ntok < 2 || ntok > TOK_TILE) return 0;
    int32_t corr[TOK_TILE * DNQ8_MAXB];
    const uint8_t *ap[TOK_TILE];
    for (int j = 0; j < ntok; j++) {
        ap[j] = a[j];
        for (int kb = 0; kb < nb; kb++) corr[j * nb + kb] = q8_0a_corr(ap[j] + (size_t)kb * sizeof(block_q8_0a));
    }
    /* the reads start cold: the first DNQ8_PF bytes of the first strip's rows */
    for (int r = 0; r < 16 && r < nrows; r++)
        for (size_t o = 0; o < DNQ8_PF && o < ws; o += 64) _mm_prefetch((const char *)w + (size_t)r * ws + o, _MM_HINT_T1);
    for (int r0 = 0; r0 < nrows; r0 += 16) {
        const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
        const uint8_t *w0 = w + (size_t)r0 * ws;
        float *y0 = y + r0;
        switch (ntok) {
        case 2: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 2, y0, ys); break;
        case 3: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 3, y0, ys); break;
        case 4: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 4, y0, ys); break;
        case 5: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 5, y0, ys); break;
        case 6: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 6, y0, ys); break;
        case 7: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 7, y0, ys); break;
        default: dn_strip_q8_0(w0, ws, nr, nb, ap, corr, 8, y0, ys); break;
        }
    }
    return 1;
}

/* Per-chunk activation side of token j: Q8_0 block corrections, IQ2_XXS
 * permuted codes. */
VTI static void act_prep(int f, const uint8_t *abj, int nbk, int32_t *corr, uint8_t *perm)
{
    if (f == VF_Q8_0)
        for (int b = 0; b < nbk; b++) corr[b] = q8_0a_corr(abj + (size_t)b * sizeof(block_q8_0a));
    else if (f == VF_IQ2)
        iq2_perm_act(abj, perm);
}

/* dec1: one token takes the reduction-axis path (d1_*), and 2..TOK_TILE
 * tokens of Q8_0 dn_matvec_q8_0; 0 keeps the packed path (dec_k, pack +
 * comp), as the "avx512-packed" table does */
VT static void tile_int(int f, int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                        float *y, size_t ys, int dec1)
{
    const uint8_t *w = vw;
    const int nchunk = f == VF_Q8_0 ? (n / QK8_0 + 7) / 8 : n / QK_K;
    const int nb = n / QK8_0;
    const size_t acb = act_chunk_bytes(f);
    pack_t pk __attribute__((aligned(64))), pk2 __attribute__((aligned(64)));
    int32_t corr[TOK_SUPER * 8];
    uint8_t perm[TOK_SUPER * QK_K] __attribute__((aligned(64)));
    const uint8_t *ab[TOK_SUPER], *aq[TOK_SUPER];
    if (nrows <= 0 || ntok <= 0) return;
    if (ntok == 1 && dec1 && d1_matvec(f, n, w, ws, nrows, a[0], y)) return;
    if (f == VF_Q8_0 && dec1 && dn_matvec_q8_0(n, w, ws, nrows, a, ntok, y, ys)) return;

    if (ntok <= TOK_TILE) {
        /* few tokens (decode): strip by strip, all chunks; 16 weight rows
         * stream side by side.  The 16 rows of a strip are one contiguous
         * region; while a strip is packed chunk by chunk, the next strip's
         * region is prefetched (into L2) in as many slices: a distance of
         * one strip, 16-37 KB, microseconds ahead at DRAM speed.  The
         * hardware prefetcher alone does poorly on the 2/4-bit formats:
         * each row is a short stream (1-2 KB) and it stops at every 4 KiB
         * page.  Measured single-thread from DRAM, n = 4096: IQ2_XXS 4.6 ->
         * 6.0 GB/s, Q2_K 6.2 -> 9.2, Q4_K 7.5 -> 8.9 (prefetching into L1
         * instead was slower than none: the fill buffers are needed for
         * the demand loads).  Q8_0 rows (4.3 KB) stream well without. */
        for (int j = 0; j < ntok; j++) aq[j] = f == VF_IQ2 ? perm + (size_t)j * QK_K : NULL;
        const size_t pf_slice = ((16 * ws + (size_t)nchunk - 1) / (size_t)nchunk + 63) & ~(size_t)63;
        const uint8_t *w_end = w + (size_t)nrows * ws;
        /* Q8_0 rows stream well enough without help: prefetching them
         * measured the same (2 KB rows) or slower (4 KB rows) */
        const int pf_on = f != VF_Q8_0;
        /* the first strip has nobody ahead of it: ask for all of it at once
         * (a call starts cold; the driver hands each thread several) */
        if (pf_on)
            for (const uint8_t *q = w; q < w + 16 * ws && q < w_end; q += 64) _mm_prefetch((const char *)q, _MM_HINT_T1);
        __m512 fa1 = _mm512_setzero_ps();
        for (int r0 = 0; r0 < nrows; r0 += 16) {
            const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
            const uint8_t *pf = w + (size_t)(r0 + 16) * ws;
            for (int kc = 0; kc < nchunk; kc++, pf += pf_slice) {
                const int nbk = f == VF_Q8_0 ? (nb - 8 * kc < 8 ? nb - 8 * kc : 8) : 1;
                if (pf_on)
                    for (size_t o = 0; o < pf_slice && pf + o < w_end; o += 64)
                        _mm_prefetch((const char *)pf + o, _MM_HINT_T1);
                if (ntok == 1 && (f == VF_Q2_K || f == VF_Q4_K)) {
                    /* one token: fused, accumulator in a register */
                    const uint8_t *a0 = (const uint8_t *)a[0] + (size_t)kc * acb;
                    fa1 = dec_k(f, w + (size_t)r0 * ws, ws, nr, kc, a0, kc == 0 ? _mm512_setzero_ps() : fa1);
                    if (kc == nchunk - 1) _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << nr) - 1), fa1);
                    continue;
                }
                pack_any(f, w + (size_t)r0 * ws, ws, nr, kc, nbk, &pk);
                for (int j = 0; j < ntok; j++) {
                    ab[j] = (const uint8_t *)a[j] + (size_t)kc * acb;
                    act_prep(f, ab[j], nbk, corr + 8 * j, perm + (size_t)j * QK_K);
                }
                run_tile(f, &pk, nbk, ab, aq, corr, ntok, kc == 0, kc == nchunk - 1, y + r0, ys, nr);
            }
        }
        return;
    }

    /* weight bytes of one row per chunk */
    const size_t cb = f == VF_Q8_0 ? 8 * sizeof(block_q8_0) : f == VF_Q2_K ? sizeof(block_q2_K)
                    : f == VF_Q4_K ? sizeof(block_q4_K) : sizeof(block_iq2_xxs);
    for (int t0 = 0; t0 < ntok; t0 += TOK_SUPER) {
        const int nt = ntok - t0 < TOK_SUPER ? ntok - t0 : TOK_SUPER;
        for (int j = 0; j < nt; j++) aq[j] = f == VF_IQ2 ? perm + (size_t)j * QK_K : NULL;
        for (int p0 = 0; p0 < nrows; p0 += PANEL) {
            const int np = nrows - p0 < PANEL ? nrows - p0 : PANEL;
            for (int kc = 0; kc < nchunk; kc++) {
                const int nbk = f == VF_Q8_0 ? (nb - 8 * kc < 8 ? nb - 8 * kc : 8) : 1;
                for (int j = 0; j < nt; j++) {
                    ab[j] = (const uint8_t *)a[t0 + j] + (size_t)kc * acb;
                    act_prep(f, ab[j], nbk, corr + 8 * j, perm + (size_t)j * QK_K);
                }
                /* Q8_0, Q2_K and IQ2_XXS take the strips two at a time
                 * where both are there (comp_*_x2); Q4_K, and a last odd
                 * strip, one at a time (a Q4_K pair tile, with its 16
                 * per-half scale steps, kept 4C integer accumulators live
                 * and measured 5-10 % slower) */
                const int step = f == VF_Q4_K ? 16 : 32;
                for (int r0 = p0; r0 < p0 + np; r0 += step) {
                    const int nr = p0 + np - r0 < 16 ? p0 + np - r0 : 16;
                    const int pair = step == 32 && r0 + 16 < p0 + np;
                    /* the chunk packed next (next strip(s), or the panel's
                     * first at the next chunk): scattered row pieces the
                     * hardware prefetcher cannot guess, read from DRAM
                     * while this one computes */
                    {
                        int pr = r0 + step, pk_kc = kc;
                        if (pr >= p0 + np) { pr = p0; pk_kc = kc + 1; }
                        if (pk_kc < nchunk) {
                            const int pn = p0 + np - pr < step ? p0 + np - pr : step;
                            const uint8_t *q = w + (size_t)pr * ws + (size_t)pk_kc * cb;
                            for (int r = 0; r < pn; r++, q += ws)
                                for (size_t o = 0; o < cb; o += 64) _mm_prefetch((const char *)q + o, _MM_HINT_T1);
                        }
                    }
                    if (pair) {
                        const int nr1 = p0 + np - (r0 + 16) < 16 ? p0 + np - (r0 + 16) : 16;
                        pack_any(f, w + (size_t)r0 * ws, ws, 16, kc, nbk, &pk);
                        pack_any(f, w + (size_t)(r0 + 16) * ws, ws, nr1, kc, nbk, &pk2);
                        run_pair_tiles(f, &pk, &pk2, nbk, ab, aq, corr, nt, kc == 0, kc == nchunk - 1,
                                       y + (size_t)t0 * ys + r0, ys, nr1);
                        continue;
                    }
                    pack_any(f, w + (size_t)r0 * ws, ws, nr, kc, nbk, &pk);
                    /* tiles as even as the count allows (50 tokens: 8 + 6 x 7,
                     * not 6 x 8 + 2): a tile of few tokens has few
                     * independent vpdpbusd chains and runs well below peak */
                    for (int j0 = 0, C; j0 < nt; j0 += C) {
                        const int ntile = (nt - j0 + TOK_TILE - 1) / TOK_TILE;
                        C = (nt - j0 + ntile - 1) / ntile;
                        run_tile(f, &pk, nbk, ab + j0, aq + j0, corr + 8 * j0, C, kc == 0, kc == nchunk - 1,
                                 y + (size_t)(t0 + j0) * ys + r0, ys, nr);
                    }
                }
            }
        }
    }
}

VT static void v_q8_0_q8_0a_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    tile_int(VF_Q8_0, n, w, ws, nrows, a, ntok, y, ys, 1);
}
VT static void v_q8_0_q8_0a_tile_packed(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                 float *y, size_t ys)
{
    tile_int(VF_Q8_0, n, w, ws, nrows, a, ntok, y, ys, 0);
}
VT static void v_q2_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                float *y, size_t ys)
{
    tile_int(VF_Q2_K, n, w, ws, nrows, a, ntok, y, ys, 1);
}
VT static void v_q2_K_q8_K_tile_packed(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                float *y, size_t ys)
{
    tile_int(VF_Q2_K, n, w, ws, nrows, a, ntok, y, ys, 0);
}
VT static void v_q4_K_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                float *y, size_t ys)
{
    tile_int(VF_Q4_K, n, w, ws, nrows, a, ntok, y, ys, 1);
}
VT static void v_q4_K_q8_K_tile_packed(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                float *y, size_t ys)
{
    tile_int(VF_Q4_K, n, w, ws, nrows, a, ntok, y, ys, 0);
}
VT static void v_iq2_xxs_q8_K_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                   float *y, size_t ys)
{
    tile_int(VF_IQ2, n, w, ws, nrows, a, ntok, y, ys, 1);
}
VT static void v_iq2_xxs_q8_K_tile_packed(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                   float *y, size_t ys)
{
    tile_int(VF_IQ2, n, w, ws, nrows, a, ntok, y, ys, 0);
}

/* ------------------------------------------------------------------------ */
/* Float tiles: the avx2 table's 32-lane order (quant.h), in zmm pairs.     */
/* ------------------------------------------------------------------------ */

VTI static __m512 ldw16(const void *w, int f16, int i)
{
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)))
               : _mm512_loadu_ps((const float *)w + i);
}

VTI static __m512 ldw8(const void *w, int f16, int i)
{
    return f16 ? _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i))))
               : _mm512_zextps256_ps512(_mm256_loadu_ps((const float *)w + i));
}

VTI static float wval(const void *w, int f16, int i)
{
    return f16 ? _cvtsh_ss(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

/* ((a0+a1)+(a2+a3)) of the avx2 kernel's four ymm accumulators, then its
 * hsum8: ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)). */
VTI static float reduce32(__m512 z0, __m512 z1)
{
    const __m256 u = _mm256_add_ps(_mm512_castps512_ps256(z0), _mm512_extractf32x8_ps(z0, 1));
    const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(z1), _mm512_extractf32x8_ps(z1, 1));
    const __m256 t = _mm256_add_ps(u, v);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The end of one (row, token) sum after its 32-element steps up to i0
 * (z0, z1: lanes 0..15, 16..31): leftover groups of 8 in lanes 0..7 (the
 * avx2 kernel's a0), the reduction, the scalar tail -- every float tile's
 * order. */
VTI static float ftail(__m512 z0, __m512 z1, int i0, int n, const uint8_t *wr, int f16, const float *x)
{
    int i = i0;
    for (; i + 8 <= n; i += 8)
        z0 = _mm512_mask3_fmadd_ps(ldw8(wr, f16, i), _mm512_zextps256_ps512(_mm256_loadu_ps(x + i)), z0, 0x00ff);
    float s = reduce32(z0, z1);
    for (; i < n; i++) s += wval(wr, f16, i) * x[i];
    return s;
}

/* R rows x C tokens, full row length.  pf: byte distance to prefetch the
 * weights at (the next row group, for decode), 0 = none. */
VTI static void ftile(int n, const uint8_t *w, size_t ws, int f16, const float *const *x, float *y, size_t ys,
                      int R, int C, size_t pf)
{
    __m512 acc[4][4][2];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) acc[r][j][0] = acc[r][j][1] = _mm512_setzero_ps();
    const uint8_t *wr[4];
    for (int r = 0; r < R; r++) wr[r] = w + (size_t)r * ws;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0[4], x1[4];
        for (int j = 0; j < C; j++) {
            x0[j] = _mm512_loadu_ps(x[j] + i);
            x1[j] = _mm512_loadu_ps(x[j] + i + 16);
        }
        for (int r = 0; r < R; r++) {
            if (pf) {
                /* one line (f16) or two (f32) per row per step */
                const char *pp = (const char *)wr[r] + pf + (size_t)i * (f16 ? 2 : 4);
                _mm_prefetch(pp, _MM_HINT_T0);
                if (!f16) _mm_prefetch(pp + 64, _MM_HINT_T0);
            }
            const __m512 w0 = ldw16(wr[r], f16, i), w1 = ldw16(wr[r], f16, i + 16);
            for (int j = 0; j < C; j++) {
                acc[r][j][0] = _mm512_fmadd_ps(w0, x0[j], acc[r][j][0]);
                acc[r][j][1] = _mm512_fmadd_ps(w1, x1[j], acc[r][j][1]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++) y[(size_t)j * ys + r] = ftail(acc[r][j][0], acc[r][j][1], i, n, wr[r], f16, x[j]);
}

#define FT_ROWS 4
#define FT_TOKS 3

/* Batched float tiles.  The 32-lane order (quant.h) means two zmm
 * accumulators per (row, token); a register tile of them is at most 4 rows
 * x 3 tokens, and at that size every 24 FMAs need 6 activation vectors
 * from L2 (32 B/cycle): the simple loop above reaches a third of the FMA
 * peak.  But lanes 0..15 (elements 32k..32k+15) and 16..31 never mix until
 * the final reduction, so they are computed in two separate passes with
 * one accumulator per pair each: 8 rows x 3 tokens per register tile, 8
 * weight and 3 activation loads per 24 FMAs.  The reduction axis is cut in
 * FKC-element slices; the 8 weight rows of a slice are converted to f32
 * once into an L1 buffer and reused by every token; accumulators wait in a
 * stash between slices (float32 stored and reloaded: every lane sees the
 * same operations in the same order as in one pass, so the results are the
 * single-row kernel's bit for bit).  FG strips share a pass over the
 * slices, so a slice of FTB tokens' activations (72 KB) is read from
 * memory once for FG strips: for few long rows (the HC mixing, 24 x 16384:
 * a stash's activations are 2.3 MB) that was a DRAM sweep per strip
 * (bench_kernels hc_fn, T = 2048: 84 -> 105 GFLOP/s on one thread). */
#define FKC 512
#define FR 8                /* rows per batched tile */
#define FC 3                /* tokens per batched tile */
#define FTB 36              /* tokens per stash (36 x 8 x 2 x 64 B = 36 KB of stack) */
#define FG 3                /* strips per pass over a slice (FG stashes on the stack) */

/* one pass (half h: lanes 16h..16h+15) of C tokens over a slice */
VTI static void fbatch_kernel(const float *wb, const float *const *x, int k0, int kl, int h, __m512 *st, int C)
{
    __m512 acc[FR][FC];
    for (int r = 0; r < FR; r++)
        for (int j = 0; j < C; j++) acc[r][j] = st[(j * FR + r) * 2 + h];
    for (int i = 16 * h; i < kl; i += 32) {
        __m512 xv[FC];
        for (int j = 0; j < C; j++) xv[j] = _mm512_loadu_ps(x[j] + k0 + i);
        for (int r = 0; r < FR; r++) {
            __m512 wv = _mm512_load_ps(wb + r * FKC + i);
            /* one load per weight vector, not one per FMA: as a memory
             * operand of each FMA it would cost 24 loads per 24 FMAs, at
             * the limit of the two load ports */
            __asm__("" : "+v"(wv));
            for (int j = 0; j < C; j++) acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < FR; r++)
        for (int j = 0; j < C; j++) st[(j * FR + r) * 2 + h] = acc[r][j];
}

/* rows in groups of FR (nrows a multiple of FR); any ntok */
VT static void fbatch(int n, const uint8_t *w, size_t ws, int nrows, const float *const *x, int ntok,
                      float *y, size_t ys, int f16)
{
    float wb[FR * FKC] __attribute__((aligned(64)));
    __m512 st[FG * FTB * FR * 2];
    const int n32 = n & ~31;
    for (int t0 = 0; t0 < ntok; t0 += FTB) {
        const int nt = ntok - t0 < FTB ? ntok - t0 : FTB;
        const float *const *xt = x + t0;
        for (int g0 = 0; g0 + FR <= nrows; g0 += FG * FR) {
            int ng = (nrows - g0) / FR;
            if (ng > FG) ng = FG;
            for (int g = 0; g < ng; g++)
                for (int i = 0; i < nt * FR * 2; i++) st[(size_t)g * FTB * FR * 2 + i] = _mm512_setzero_ps();
            for (int k0 = 0; k0 < n32; k0 += FKC) {
                const int kl = n32 - k0 < FKC ? n32 - k0 : FKC;
                for (int g = 0; g < ng; g++) {
                    const uint8_t *wr = w + (size_t)(g0 + g * FR) * ws;
                    __m512 *sg = st + (size_t)g * FTB * FR * 2;
                    for (int r = 0; r < FR; r++)
                        for (int i = 0; i < kl; i += 16)
                            _mm512_store_ps(wb + r * FKC + i, ldw16(wr + (size_t)r * ws, f16, k0 + i));
                    int j0 = 0;
                    for (; j0 + FC <= nt; j0 += FC)
                        for (int h = 0; h < 2; h++) fbatch_kernel(wb, xt + j0, k0, kl, h, sg + j0 * FR * 2, FC);
                    for (int h = 0; h < 2; h++) {
                        if (nt - j0 == 2) fbatch_kernel(wb, xt + j0, k0, kl, h, sg + j0 * FR * 2, 2);
                        else if (nt - j0 == 1) fbatch_kernel(wb, xt + j0, k0, kl, h, sg + j0 * FR * 2, 1);
                    }
                }
            }
            for (int g = 0; g < ng; g++) {
                const int r0 = g0 + g * FR;
                const uint8_t *wr = w + (size_t)r0 * ws;
                const __m512 *sg = st + (size_t)g * FTB * FR * 2;
                for (int j = 0; j < nt; j++)
                    for (int r = 0; r < FR; r++)
                        y[(size_t)(t0 + j) * ys + r0 + r] = ftail(sg[(j * FR + r) * 2], sg[(j * FR + r) * 2 + 1], n32,
                                                                  n, wr + (size_t)r * ws, f16, xt[j]);
            }
        }
    }
}

/* 3..FT_FEW tokens (a verification pass, a batched step of a few
 * sessions).  The weights stream from DRAM once, as in decode; what
 * limits the register tiles above is the activations: 4 tokens of a
 * 4096-long row are 64 KB, more than L1, and their L2 misses take the
 * fill buffers the weight streams need (4 tokens cost 1.4-1.6x one token,
 * measured).  So a strip of FW_ROWS rows walks the reduction axis in
 * slices of about 16 KB of activations, each slice loaded into L1 once
 * and used by every row pair of the strip; the (row, token) accumulators
 * wait in a stash between slices, and every lane sees the same FMAs in
 * the same order as in ftile: the same bits. */
#define FT_FEW 8
#define FW_ROWS 16
#define FW_ACT 4096          /* activation floats per slice (16 KB) */

/* rows r, r + 1 (R = 2) or r (R = 1) x C tokens over [k0, k1): lanes of
 * both halves in st[(j * FW_ROWS + r) * 2 + h] */
VTI static void fw_kernel(const uint8_t *wr, size_t ws, int f16, const float *const *x, int k0, int k1,
                          __m512 *st, int r, int R, int C, ptrdiff_t pf)
{
    __m512 acc[2][4][2];
    for (int q = 0; q < R; q++)
        for (int j = 0; j < C; j++)
            for (int h = 0; h < 2; h++) acc[q][j][h] = st[(j * FW_ROWS + r + q) * 2 + h];
    for (int i = k0; i < k1; i += 32) {
        __m512 x0[4], x1[4];
        for (int j = 0; j < C; j++) {
            x0[j] = _mm512_loadu_ps(x[j] + i);
            x1[j] = _mm512_loadu_ps(x[j] + i + 16);
        }
        for (int q = 0; q < R; q++) {
            const uint8_t *wq = wr + (size_t)q * ws;
            if (pf) {
                const char *pp = (const char *)((uintptr_t)wq + (uintptr_t)pf) + (size_t)i * (f16 ? 2 : 4);
                _mm_prefetch(pp, _MM_HINT_T0);
                if (!f16) _mm_prefetch(pp + 64, _MM_HINT_T0);
            }
            const __m512 w0 = ldw16(wq, f16, i), w1 = ldw16(wq, f16, i + 16);
            for (int j = 0; j < C; j++) {
                acc[q][j][0] = _mm512_fmadd_ps(w0, x0[j], acc[q][j][0]);
                acc[q][j][1] = _mm512_fmadd_ps(w1, x1[j], acc[q][j][1]);
            }
        }
    }
    for (int q = 0; q < R; q++)
        for (int j = 0; j < C; j++)
            for (int h = 0; h < 2; h++) st[(j * FW_ROWS + r + q) * 2 + h] = acc[q][j][h];
}

VT static void ftile_few(int n, const uint8_t *w, size_t ws, int nrows, const float *const *x, int ntok,
                         float *y, size_t ys, int f16)
{
    __m512 st[FT_FEW * FW_ROWS * 2];
    const int n32 = n & ~31;
    const int kc = (FW_ACT / ntok) & ~31;
    if (n32 <= kc) {
        /* the activations fit in one slice: row pairs straight through
         * ftile, the next row prefetched (measured better than the
         * stash and than a longer distance) */
        for (int r0 = 0; r0 < nrows; r0 += 2) {
            const uint8_t *wr = w + (size_t)r0 * ws;
            for (int j0 = 0; j0 < ntok; j0 += 4) {
                const int C = ntok - j0 < 4 ? ntok - j0 : 4;
                const size_t pf = j0 == 0 && r0 + 3 <= nrows ? ws : 0;
                float *yy = y + (size_t)j0 * ys + r0;
                const float *const *xx = x + j0;
                if (r0 + 2 > nrows)
                    for (int j = 0; j < C; j++) ftile(n, wr, ws, f16, xx + j, yy + (size_t)j * ys, ys, 1, 1, 0);
                else if (C == 4) ftile(n, wr, ws, f16, xx, yy, ys, 2, 4, pf);
                else if (C == 3) ftile(n, wr, ws, f16, xx, yy, ys, 2, 3, pf);
                else if (C == 2) ftile(n, wr, ws, f16, xx, yy, ys, 2, 2, pf);
                else ftile(n, wr, ws, f16, xx, yy, ys, 2, 1, pf);
            }
        }
        return;
    }
    for (int r0 = 0; r0 < nrows; r0 += FW_ROWS) {
        const int nr = nrows - r0 < FW_ROWS ? nrows - r0 : FW_ROWS;
        const uint8_t *ws0 = w + (size_t)r0 * ws;
        for (int i = 0; i < ntok * FW_ROWS * 2; i++) st[i] = _mm512_setzero_ps();
        for (int k0 = 0; k0 < n32; k0 += kc) {
            const int k1 = n32 - k0 < kc ? n32 : k0 + kc;
            const ptrdiff_t eb = f16 ? 2 : 4;
            for (int r = 0; r < nr; r += 2) {
                const uint8_t *wr = ws0 + (size_t)r * ws;
                const int R = nr - r >= 2 ? 2 : 1;
                /* prefetch (into L1: a short distance) what is read next:
                 * the next pair's slice, after the last pair the first
                 * pair's next slice, after the last slice the next strip */
                ptrdiff_t pf = 0;
                if (r + 2 < nr) pf = 2 * (ptrdiff_t)ws;
                else if (k1 < n32) pf = (ptrdiff_t)kc * eb - (ptrdiff_t)r * (ptrdiff_t)ws;
                else if (r0 + 2 * FW_ROWS <= nrows) pf = (ptrdiff_t)(FW_ROWS - r) * (ptrdiff_t)ws - (ptrdiff_t)k0 * eb;
                for (int j0 = 0; j0 < ntok; j0 += 4) {
                    const int C = ntok - j0 < 4 ? ntok - j0 : 4;
                    const ptrdiff_t p = j0 == 0 ? pf : 0;
                    __m512 *sj = st + (size_t)j0 * FW_ROWS * 2;
                    if (R == 2) {
                        if (C == 4) fw_kernel(wr, ws, f16, x + j0, k0, k1, sj, r, 2, 4, p);
                        else if (C == 3) fw_kernel(wr, ws, f16, x + j0, k0, k1, sj, r, 2, 3, p);
                        else if (C == 2) fw_kernel(wr, ws, f16, x + j0, k0, k1, sj, r, 2, 2, p);
                        else fw_kernel(wr, ws, f16, x + j0, k0, k1, sj, r, 2, 1, p);
                    } else {
                        for (int j = 0; j < C; j++) fw_kernel(wr, ws, f16, x + j0 + j, k0, k1, sj + (size_t)j * FW_ROWS * 2, r, 1, 1, 0);
                    }
                }
            }
        }
        for (int j = 0; j < ntok; j++)
            for (int r = 0; r < nr; r++)
                y[(size_t)j * ys + r0 + r] = ftail(st[(j * FW_ROWS + r) * 2], st[(j * FW_ROWS + r) * 2 + 1], n32, n,
                                                   ws0 + (size_t)r * ws, f16, x[j]);
    }
}

VT static void ftile_drive(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                           float *y, size_t ys, int f16)
{
    const uint8_t *w = vw;
    const float *const *x = (const float *const *)a;
    int rdone = 0;
    if (ntok >= 3 && ntok <= FT_FEW) {
        ftile_few(n, w, ws, nrows, x, ntok, y, ys, f16);
        return;
    }
    if (ntok >= 4 && n >= 64) {
        rdone = nrows / FR * FR;
        fbatch(n, w, ws, rdone, x, ntok, y, ys, f16);
    }
    for (int r0 = rdone; r0 < nrows; r0 += FT_ROWS) {
        const int R = nrows - r0 < FT_ROWS ? nrows - r0 : FT_ROWS;
        const uint8_t *wr = w + (size_t)r0 * ws;
        /* decode streams each row once: fetch the next row group while
         * this one computes (the hardware prefetcher stops at 4 KiB pages
         * and needs a few misses to start on each new row) */
        const size_t pf = ntok <= 2 && r0 + 2 * FT_ROWS <= nrows ? FT_ROWS * ws : 0;
        for (int j0 = 0; j0 < ntok; j0 += FT_TOKS) {
            const int C = ntok - j0 < FT_TOKS ? ntok - j0 : FT_TOKS;
            float *yy = y + (size_t)j0 * ys + r0;
            const float *const *xx = x + j0;
            /* constant R, C for the common shapes so the accumulators stay in registers */
            if (R == 4 && C == 3) ftile(n, wr, ws, f16, xx, yy, ys, 4, 3, 0);
            else if (R == 4 && C == 1) ftile(n, wr, ws, f16, xx, yy, ys, 4, 1, pf);
            else if (R == 4 && C == 2) ftile(n, wr, ws, f16, xx, yy, ys, 4, 2, pf);
            else
                for (int r = 0; r < R; r++)
                    for (int j = 0; j < C; j++)
                        ftile(n, wr + (size_t)r * ws, ws, f16, xx + j, yy + (size_t)j * ys + r, ys, 1, 1, 0);
        }
    }
}

VT static void v_f32_f32_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                              float *y, size_t ys)
{
    ftile_drive(n, w, ws, nrows, a, ntok, y, ys, 0);
}

VT static void v_f16_f32_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                              float *y, size_t ys)
{
    ftile_drive(n, w, ws, nrows, a, ntok, y, ys, 1);
}

/* Single-row entries: the scalar kernels already sum in this table's order
 * (Q4_K: the blockwise reference), and the avx2 float kernels in its float
 * order; they are what the tiles are tested against. */

/* ------------------------------------------------------------------------ */
/* MXFP4 x Q8_0a tiles.  The packed scheme of Q8_0: 16 rows transposed in   */
/* the lanes, codes looked up (vpshufb) in the doubled E2M1 table biased by */
/* 128 to unsigned, vpdpbusd against the broadcast activation bytes, the    */
/* bias removed by -128 * sum(a) per block; then exactly the scalar float   */
/* order, sumf += (float)sumi * (2^(e-128) * a.d) block by block, so every  */
/* output equals the scalar table's bit for bit.  Self-contained (own pack  */
/* and loop) so that the other formats' driver is untouched.                */
/* ------------------------------------------------------------------------ */

/* w[8b + s] lane r = codes 4s..4s+3 of block b0 + b of row r, plus 128;
 * d[b] lane r = 2^(e-128) of that block. */
VT static void pack_mxfp4(const uint8_t *w, size_t ws, int nr, int b0, int nbk, pack_t *pk)
{
    const uint8_t *rows[16], *p[16];
    strip_rows(w, ws, nr, rows);
    const __m512i offs = strip_offsets(ws, nr);
    int8_t lut8[16];
    for (int i = 0; i < 16; i++) lut8[i] = (int8_t)(ds4_kvalues_mxfp4[i] + 128);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut8));
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int b = 0; b < nbk; b++) {
        const size_t off = (size_t)(b0 + b) * sizeof(block_mxfp4);
        for (int r = 0; r < 16; r++) p[r] = rows[r] + off + 1;
        __m512i t[4];
        tr16x4(p, t);
        for (int s = 0; s < 4; s++) {
            pk->w[8 * b + s] = _mm512_shuffle_epi8(lut, _mm512_and_si512(t[s], m4));
            pk->w[8 * b + 4 + s] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(t[s], 4), m4));
        }
        /* e (byte 0 of the block) -> float bits of 2^(e-128), as ds4_e8m0_to_f32_half */
        const __m512i e = _mm512_and_si512(_mm512_i32gather_epi32(offs, w + off, 1), _mm512_set1_epi32(0xff));
        const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        pk->d[b] = _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, nrm, sub));
    }
}

/* -128 * (sum of the 32 codes of a Q8_0a block) */
VTI static int32_t mx_corr(const uint8_t *blk)
{
    const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 4)), _mm256_set1_epi8((char)0x80));
    const __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    return -128 * (_mm_cvtsi128_si32(t) - 32 * 128);
}

/* MXFP4, one token (decode): the packed tile above transposes 16 rows per
 * block for a single use (6 GB/s per thread).  Here each row is read along
 * its own axis, four blocks (68 bytes) at a time: one 64-byte load at the
 * group and 16 bytes at +52 give, by one vpermt2b, the 16 code bytes of
 * block i in 128-bit lane i; vpermb looks up the biased table values of
 * the low and high nibbles (elements 0..15 and 16..31) for vpdpbusd
 * against the activation codes of the same blocks (laid out per call, lane
 * i = block i), so lane i holds 4 partial dwords of (row, block i).  The
 * 16 rows reduce (8 + 4 unpack/add steps, a 4 x 4 transpose of 128-bit
 * lanes) to one vector per block, lane r = row r.  The scale bytes, at
 * 0, 17, 34, 51 of each row's 64-byte load, are placed by a masked vpermb
 * per row into one vector (lane i: the 16 rows' bytes of block i): no
 * gather.  Same integer sums and the same float operations in the same
 * order as the tiles: bit-identical.  The 16 rows walk their groups side
 * by side, each prefetched D1MX_PF bytes ahead (past its end: into the same
 * row of the next strip), into L1: 27-31 GB/s per thread against 21-22
 * into L2 (these 64-byte loads straddle two lines). */
#define D1MX_PF 1024
#define D1MX_MAXB 512   /* blocks per row (n <= 16384): the activation layout on the stack */

typedef struct {
    __m512i lo[D1MX_MAXB / 4], hi[D1MX_MAXB / 4];   /* group g lane i: codes 0..15 / 16..31 of block 4g + i */
    int32_t corr[D1MX_MAXB];                          /* -128 * sum of the block's codes */
    float d[D1MX_MAXB];
} d1mxact_t;

/* Row r of the strip at byte offset o: full strips address rows as
 * w + o + r * ws (x86 scaled index: w + 4q ws, ws and 3 ws), so the 16
 * row pointers do not spill; partial ones take rows[] (the last row
 * repeated). */
#define MXROW(r, o) (full ? qb[(r) >> 2] + (o) + (((r) & 3) == 3 ? ws3 : (size_t)((r) & 3) * ws) : rows[r] + (o))

VTI static __m512 d1_strip_mxfp4(const uint8_t *w, size_t ws, int nr, int nb, const d1mxact_t *act,
                                 const int full)
{
    const uint8_t *rows[16];
    strip_rows(w, ws, nr, rows);
    const uint8_t *qb[4] = { w, w + 4 * ws, w + 8 * ws, w + 12 * ws };
    const size_t ws3 = 3 * ws;
    int8_t lut8[16];
    for (int i = 0; i < 16; i++) lut8[i] = (int8_t)(ds4_kvalues_mxfp4[i] + 128);
    /* vpermb reads 6 index bits; the table repeated in the 4 lanes makes
     * bits 4..5 (the high nibble, or the next byte's bits after the shift)
     * irrelevant: no masking */
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut8));
    uint8_t qi[64], ei[64];
    for (int p = 0; p < 64; p++) {
        /* codes of block i: bytes 17 i + 1 .. of the group (block 3 from the
         * second load, at +52); scale byte of block i: 17 i */
        qi[p] = (uint8_t)(p < 48 ? 17 * (p >> 4) + 1 + (p & 15) : 64 + (p & 15));
        ei[p] = (uint8_t)(17 * (p >> 4));
    }
    const __m512i qidx = _mm512_loadu_si512(qi), eidx = _mm512_loadu_si512(ei);
    const size_t gb = 4 * sizeof(block_mxfp4), rl = (size_t)nb * sizeof(block_mxfp4);
    __m512 facc = _mm512_setzero_ps();
    for (int kb = 0; kb < nb; kb += 4) {
        const int g = kb >> 2, nbg = nb - kb < 4 ? nb - kb : 4;
        const size_t off = (size_t)kb * sizeof(block_mxfp4);
        {   /* both lines of the group D1MX_PF ahead */
            size_t po = off + D1MX_PF;
            if (po >= rl) po += 16 * ws - rl;
            for (int r = 0; r < 16; r++) {
                _mm_prefetch((const char *)MXROW(r, po), _MM_HINT_T0);
                _mm_prefetch((const char *)MXROW(r, po + gb - 1), _MM_HINT_T0);
            }
        }
        const __m512i alo = act->lo[g], ahi = act->hi[g];
        /* the tail group (1..3 blocks): masked loads, never past the row */
        const __mmask64 km = nbg == 4 ? ~0ull : (1ull << (17 * nbg)) - 1;
        __m512i v[16], E = _mm512_setzero_si512();
        for (int r = 0; r < 16; r++) {
            const uint8_t *p = MXROW(r, off);
            const __m512i l0 = nbg == 4 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(km, p);
            const __m512i l1 = nbg == 4 ? _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 52)))
                                        : _mm512_setzero_si512();
            const __m512i x = _mm512_permutex2var_epi8(l0, qidx, l1);
            const __m512i lo = _mm512_permutexvar_epi8(x, lut);
            const __m512i hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(x, 4), lut);
            v[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
            E = _mm512_mask_permutexvar_epi8(E, 0x0001000100010001ull << r, eidx, l0);
        }
        /* lane i of u[m]: (rows 4m .. 4m + 3) of block i; then S[i] lane r = row r */
        __m512i u[4];
        for (int m = 0; m < 4; m++)
            u[m] = hadd_l2(hadd_l1(v[4 * m], v[4 * m + 1]), hadd_l1(v[4 * m + 2], v[4 * m + 3]));
        const __m512i p0 = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i p1 = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i p2 = _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i p3 = _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2));
        __m512i S[4];
        S[0] = _mm512_shuffle_i32x4(p0, p2, _MM_SHUFFLE(2, 0, 2, 0));
        S[1] = _mm512_shuffle_i32x4(p0, p2, _MM_SHUFFLE(3, 1, 3, 1));
        S[2] = _mm512_shuffle_i32x4(p1, p3, _MM_SHUFFLE(2, 0, 2, 0));
        S[3] = _mm512_shuffle_i32x4(p1, p3, _MM_SHUFFLE(3, 1, 3, 1));
        for (int i = 0; i < nbg; i++) {
            const __m512i e = _mm512_cvtepu8_epi32(i == 0 ? _mm512_castsi512_si128(E)
                                                   : i == 1 ? _mm512_extracti32x4_epi32(E, 1)
                                                   : i == 2 ? _mm512_extracti32x4_epi32(E, 2)
                                                   : _mm512_extracti32x4_epi32(E, 3));
            /* e -> float bits of 2^(e-128), as pack_mxfp4 */
            const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
            const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
            const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
            const __m512 dw = _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, nrm, sub));
            const __m512i sumi = _mm512_add_epi32(S[i], _mm512_set1_epi32(act->corr[kb + i]));
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(act->d[kb + i]));
            facc = _mm512_add_ps(facc, _mm512_mul_ps(_mm512_cvtepi32_ps(sumi), sc));
        }
    }
    return facc;
}
#undef MXROW

__attribute__((noinline)) VT static int d1_matvec_mxfp4(int n, const uint8_t *w, size_t ws, int nrows,
                                                        const uint8_t *a, float *y)
{
    const int nb = n / QK_MXFP4;
    if (nb > D1MX_MAXB) return 0;
    d1mxact_t act __attribute__((aligned(64)));
    for (int g = 0; g < (nb + 3) / 4; g++) {
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        for (int i = 0; i < 4 && 4 * g + i < nb; i++) {
            const uint8_t *blk = a + (size_t)(4 * g + i) * sizeof(block_q8_0a);
            lo = _mm512_mask_broadcast_i32x4(lo, (__mmask16)(0xf << (4 * i)), _mm_loadu_si128((const __m128i *)(blk + 4)));
            hi = _mm512_mask_broadcast_i32x4(hi, (__mmask16)(0xf << (4 * i)), _mm_loadu_si128((const __m128i *)(blk + 20)));
        }
        act.lo[g] = lo;
        act.hi[g] = hi;
    }
    for (int b = 0; b < nb; b++) {
        act.corr[b] = mx_corr(a + (size_t)b * sizeof(block_q8_0a));
        act.d[b] = ld_f32(a + (size_t)b * sizeof(block_q8_0a));
    }
    /* the reads start cold: the first D1MX_PF bytes of the first strip's rows */
    for (int r = 0; r < 16 && r < nrows; r++)
        for (size_t o = 0; o < D1MX_PF; o += 64) _mm_prefetch((const char *)w + (size_t)r * ws + o, _MM_HINT_T1);
    for (int r0 = 0; r0 < nrows; r0 += 16) {
        const int nr = nrows - r0 < 16 ? nrows - r0 : 16;
        const __m512 v = nr == 16 ? d1_strip_mxfp4(w + (size_t)r0 * ws, ws, 16, nb, &act, 1)
                                   : d1_strip_mxfp4(w + (size_t)r0 * ws, ws, nr, nb, &act, 0);
        _mm512_mask_storeu_ps(y + r0, (__mmask16)((1u << nr) - 1), v);
    }
    return 1;
}

/* C tokens over nbk packed blocks; running sums in y between chunks
 * (float32 both ways: unchanged). */
VTI static void mx_comp(const pack_t *pk, int nbk, const uint8_t *const *ab, const int32_t *corr, int C,
                        int first, float *y, size_t ys, int nr)
{
    const __mmask16 km = (__mmask16)((1u << nr) - 1);
    __m512 facc[TOK_TILE];
    for (int j = 0; j < C; j++) facc[j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(km, y + (size_t)j * ys);
    for (int b = 0; b < nbk; b++) {
        const size_t ob = (size_t)b * sizeof(block_q8_0a);
        __m512i acc[TOK_TILE];
        for (int j = 0; j < C; j++) acc[j] = _mm512_set1_epi32(corr[8 * j + b]);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m512i wv = pk->w[8 * b + s];
            for (int j = 0; j < C; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], wv, BCAST32(ab[j] + ob + 4 + 4 * s));
        }
        for (int j = 0; j < C; j++) {
            const __m512 sc = _mm512_mul_ps(pk->d[b], _mm512_set1_ps(ld_f32(ab[j] + ob)));
            facc[j] = _mm512_add_ps(facc[j], _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), sc));
        }
    }
    for (int j = 0; j < C; j++) _mm512_mask_storeu_ps(y + (size_t)j * ys, km, facc[j]);
}

VT static void mx_tile(const pack_t *pk, int nbk, const uint8_t *const *ab, const int32_t *corr, int C,
                       int first, float *y, size_t ys, int nr)
{
    switch (C) {   /* C a constant in each call: facc[] and acc[] in registers */
    case 1: mx_comp(pk, nbk, ab, corr, 1, first, y, ys, nr); break;
    case 2: mx_comp(pk, nbk, ab, corr, 2, first, y, ys, nr); break;
    case 3: mx_comp(pk, nbk, ab, corr, 3, first, y, ys, nr); break;
    case 4: mx_comp(pk, nbk, ab, corr, 4, first, y, ys, nr); break;
    case 5: mx_comp(pk, nbk, ab, corr, 5, first, y, ys, nr); break;
    case 6: mx_comp(pk, nbk, ab, corr, 6, first, y, ys, nr); break;
    case 7: mx_comp(pk, nbk, ab, corr, 7, first, y, ys, nr); break;
    default: mx_comp(pk, nbk, ab, corr, 8, first, y, ys, nr); break;
    }
}

/* Token super-tiles, 256-row panels, chunks of 8 blocks: the activation
 * corrections once per (chunk, token), each (strip, chunk) packed once and
 * used by every token of the super-tile. */
VT static void mxfp4_tile(int n, const void *vw, size_t ws, int nrows, const void *const *a, int ntok,
                          float *y, size_t ys, int dec1)
{
    const uint8_t *w = vw;
    if (ntok == 1 && dec1 && nrows > 0 && d1_matvec_mxfp4(n, w, ws, nrows, a[0], y)) return;
    const int nb = n / QK_MXFP4, nchunk = (nb + 7) / 8;
    pack_t pk __attribute__((aligned(64))), pk2 __attribute__((aligned(64)));
    int32_t corr[TOK_SUPER * 8];
    const uint8_t *ab[TOK_SUPER];
    if (nrows <= 0 || ntok <= 0) return;
    for (int t0 = 0; t0 < ntok; t0 += TOK_SUPER) {
        const int nt = ntok - t0 < TOK_SUPER ? ntok - t0 : TOK_SUPER;
        for (int p0 = 0; p0 < nrows; p0 += PANEL) {
            const int np = nrows - p0 < PANEL ? nrows - p0 : PANEL;
            for (int kc = 0; kc < nchunk; kc++) {
                const int nbk = nb - 8 * kc < 8 ? nb - 8 * kc : 8;
                for (int j = 0; j < nt; j++) {
                    ab[j] = (const uint8_t *)a[t0 + j] + (size_t)kc * 8 * sizeof(block_q8_0a);
                    for (int b = 0; b < nbk; b++) corr[8 * j + b] = mx_corr(ab[j] + (size_t)b * sizeof(block_q8_0a));
                }
                for (int r0 = p0; r0 < p0 + np; r0 += 32) {
                    const int nr = p0 + np - r0 < 16 ? p0 + np - r0 : 16;
                    {   /* the next pair's chunk (or the panel's first at the next
                         * chunk), into L2, as tile_int: T = 48 +15 %, T = 256 +8 % */
                        int pr = r0 + 32, pk_kc = kc;
                        if (pr >= p0 + np) { pr = p0; pk_kc = kc + 1; }
                        if (pk_kc < nchunk) {
                            const int pn = p0 + np - pr < 32 ? p0 + np - pr : 32;
                            const size_t cb = 8 * sizeof(block_mxfp4);
                            const uint8_t *q = w + (size_t)pr * ws + (size_t)pk_kc * cb;
                            for (int r = 0; r < pn; r++, q += ws) {
                                for (size_t o = 0; o < cb; o += 64) _mm_prefetch((const char *)q + o, _MM_HINT_T1);
                                _mm_prefetch((const char *)q + cb - 1, _MM_HINT_T1);
                            }
                        }
                    }
                    if (r0 + 16 < p0 + np) {
                        /* two strips per register tile: the pack has Q8_0's
                         * layout (biased codes, scales as floats) and the
                         * same float order, so Q8_0's pair tile applies */
                        const int nr1 = p0 + np - (r0 + 16) < 16 ? p0 + np - (r0 + 16) : 16;
                        pack_mxfp4(w + (size_t)r0 * ws, ws, 16, 8 * kc, nbk, &pk);
                        pack_mxfp4(w + (size_t)(r0 + 16) * ws, ws, nr1, 8 * kc, nbk, &pk2);
                        run_pair_tiles(VF_Q8_0, &pk, &pk2, nbk, ab, ab, corr, nt, kc == 0, kc == nchunk - 1,
                                       y + (size_t)t0 * ys + r0, ys, nr1);
                        continue;
                    }
                    pack_mxfp4(w + (size_t)r0 * ws, ws, nr, 8 * kc, nbk, &pk);
                    for (int j0 = 0, C; j0 < nt; j0 += C) {
                        const int ntile = (nt - j0 + TOK_TILE - 1) / TOK_TILE;
                        C = (nt - j0 + ntile - 1) / ntile;
                        mx_tile(&pk, nbk, ab + j0, corr + 8 * j0, C, kc == 0, y + (size_t)(t0 + j0) * ys + r0, ys, nr);
                    }
                }
            }
        }
    }
}

VT static void v_mxfp4_q8_0a_tile(int n, const void *w, size_t ws, int nrows, const void *const *a, int ntok,
                                  float *y, size_t ys)
{
    mxfp4_tile(n, w, ws, nrows, a, ntok, y, ys, 1);
}

VT static void v_mxfp4_q8_0a_tile_packed(int n, const void *w, size_t ws, int nrows, const void *const *a,
                                         int ntok, float *y, size_t ys)
{
    mxfp4_tile(n, w, ws, nrows, a, ntok, y, ys, 0);
}

/* ------------------------------------------------------------------------ */
/* Activation quantizers                                                    */
/* ------------------------------------------------------------------------ */

/* The activation quantizers run on every matmul input of a prefill (~5 %
 * of a 2048-token step with the scalar ones: a branchy clamp per element
 * keeps the compiler from vectorising them).  These give the reference
 * quantizers' bytes exactly (ds4_quantize_q8_0a / ds4_quantize_q8_K in
 * src/kernels/quant.c stay the definition; test_rowops compares them on
 * random and edge-case blocks):
 *  - amax: max(|x|, m) with the running maximum as the second operand,
 *    which is `|x| > m ? |x| : m` lane by lane (a NaN never wins, as in
 *    the scalar loop); max is exact, so the lane order does not matter;
 *  - Q8_K's signed max is the first element whose |x| equals amax, which
 *    is the one the scalar loop keeps (it only replaces on `>`);
 *  - the scale steps are the same scalar float operations; the products
 *    and rint (nearest-even) are IEEE per lane; clamp_i8 becomes min/max
 *    plus NaN -> 0; bsums are exact integer sums. */
VTI static __m512i act_q_lanes(__m512 v, __m512 lo) {
    __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 ok = _mm512_cmp_ps_mask(r, r, _CMP_ORD_Q);
    r = _mm512_max_ps(_mm512_min_ps(r, _mm512_set1_ps(127.0f)), lo);
    return _mm512_maskz_cvtps_epi32(ok, r);   /* NaN -> 0 */
}

VT static void v_quantize_q8_0a(const float *x, block_q8_0a *y, int64_t n) {
    const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(-128.0f);
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(a), zero);
        m = _mm512_max_ps(_mm512_abs_ps(b), m);
        float amax = _mm512_reduce_max_ps(m);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(act_q_lanes(_mm512_mul_ps(a, vid), lo)));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16),
                         _mm512_cvtepi32_epi8(act_q_lanes(_mm512_mul_ps(b, vid), lo)));
    }
}

VT static void v_quantize_q8_K(const float *x, block_q8_K *y, int64_t n) {
    const __m512 zero = _mm512_setzero_ps(), lo = _mm512_set1_ps(-127.0f);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m512 m = zero;
        for (int c = 0; c < QK_K / 16; c++) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), m);
        float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float max = 0.0f;
        const __m512 va = _mm512_set1_ps(amax);
        for (int c = 0; c < QK_K / 16; c++) {
            __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * c)), va, _CMP_EQ_OQ);
            if (eq) { max = x[16 * c + __builtin_ctz(eq)]; break; }
        }
        float iscale = -127.0f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        for (int c = 0; c < QK_K / 16; c++) {
            __m512i q = act_q_lanes(_mm512_mul_ps(vs, _mm512_loadu_ps(x + 16 * c)), lo);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * c), _mm512_cvtepi32_epi8(q));
            y[i].bsums[c] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1.0f / iscale;
    }
}

static ds4_kernels avx512_kernels, avx512_packed_kernels;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void avx512_init(void)
{
    const ds4_kernels *v = ds4_kernels_avx2(), *s = ds4_kernels_scalar();
    avx512_kernels = *v;
    avx512_kernels.name = "avx512";
    avx512_kernels.q8_0_q8_0 = s->q8_0_q8_0;
    avx512_kernels.q8_0_q8_0a = s->q8_0_q8_0a;
    avx512_kernels.q2_K_q8_K = s->q2_K_q8_K;
    avx512_kernels.q4_K_q8_K = ds4_q4_K_q8_K_blockwise;
    avx512_kernels.iq2_xxs_q8_K = s->iq2_xxs_q8_K;
    avx512_kernels.q8_0_q8_0a_tile = v_q8_0_q8_0a_tile;
    /* The avx2 table's -128-free Q8_0 tile is an avx2 kernel: left in place
     * it would take every real Q8_0 matrix (their codes are in [-127, 127])
     * away from the VNNI tile above at a third of its speed.  NULL: the
     * callers use q8_0_q8_0a_tile (quant.h). */
    avx512_kernels.q8_0_q8_0a_tile_sym = NULL;
    avx512_kernels.q2_K_q8_K_tile = v_q2_K_q8_K_tile;
    avx512_kernels.q4_K_q8_K_tile = v_q4_K_q8_K_tile;
    avx512_kernels.iq2_xxs_q8_K_tile = v_iq2_xxs_q8_K_tile;
    avx512_kernels.f32_f32_tile = v_f32_f32_tile;
    avx512_kernels.f16_f32_tile = v_f16_f32_tile;
    avx512_kernels.mxfp4_q8_0a = s->mxfp4_q8_0a;
    avx512_kernels.mxfp4_q8_0a_tile = v_mxfp4_q8_0a_tile;
    avx512_kernels.quantize_q8_0a = v_quantize_q8_0a;
    avx512_kernels.quantize_q8_K = v_quantize_q8_K;
    d1_idx_init();
    avx512_packed_kernels = avx512_kernels;
    avx512_packed_kernels.name = "avx512-packed";
    avx512_packed_kernels.q8_0_q8_0a_tile = v_q8_0_q8_0a_tile_packed;
    avx512_packed_kernels.q2_K_q8_K_tile = v_q2_K_q8_K_tile_packed;
    avx512_packed_kernels.q4_K_q8_K_tile = v_q4_K_q8_K_tile_packed;
    avx512_packed_kernels.iq2_xxs_q8_K_tile = v_iq2_xxs_q8_K_tile_packed;
    avx512_packed_kernels.mxfp4_q8_0a_tile = v_mxfp4_q8_0a_tile_packed;
    iq2_tables_init();
}

const ds4_kernels *ds4_kernels_avx512(void)
{
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") &&
          __builtin_cpu_supports("avx512bitalg") && __builtin_cpu_supports("gfni")))
        return NULL;
    if (!ds4_kernels_avx2())
        return NULL;
    pthread_once(&avx512_once, avx512_init);
    return &avx512_kernels;
}

const ds4_kernels *ds4_kernels_avx512_packed(void)
{
    if (!ds4_kernels_avx512())
        return NULL;
    return &avx512_packed_kernels;
}

#else  /* not x86 */

const ds4_kernels *ds4_kernels_avx512(void)
{
    return NULL;
}

const ds4_kernels *ds4_kernels_avx512_packed(void)
{
    return NULL;
}

#endif
