/*
 * quant.c -- scalar reference of everything declared in quant.h.
 *
 * Owns: the IQ2_XXS and MXFP4 format tables, f16/bf16 conversions, row
 * dequantization (bit-exact with ggml), the activation quantizers (ggml's
 * reference and AVX2 rules for Q8_0, ds4's float-scale Q8_0a, ggml's Q8_K)
 * and the portable scalar dot-product kernels, plus the float-activation
 * dispatcher.  Choosing a table (ds4_kernels_best) is dispatch.c's: it
 * names every SIMD table, and they use the format data here.
 * Must not: contain SIMD code (that is quant_avx2.c), know about models,
 * tensors or threads, or allocate.  The kernels here DEFINE the operation
 * order every SIMD table reproduces bit for bit (quant.h); each FMA of that
 * order is written out with fmaf, and the build has -ffp-contract=off so
 * that nothing else is fused.  Q8_0, Q2_K and IQ2_XXS follow ggml's
 * portable C order (so they also reproduce ggml's `generic_nofma` results
 * bit for bit); Q4_K uses the blockwise order instead of ggml's 8 lanes.
 * Assumes a little-endian host (the GGUF data is mapped as is).
 */
#include "kernels/quant.h"
#include "gguf/gguf.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* IQ2_XXS format data.                                                     */
/* ------------------------------------------------------------------------ */

/* The 256 grid points of IQ2_XXS: each u64 packs eight magnitudes (one per
 * byte, element 0 in the least significant byte), every one 8, 25 or 43.
 * This is format data, identical to ggml's iq2xxs_grid (the test checks the
 * sha256 of its byte image against the golden table). */
const uint64_t ds4_iq2xxs_grid[256] = {
    0x0808080808080808ull, 0x080808080808082bull, 0x0808080808081919ull, 0x0808080808082b08ull,
    0x0808080808082b2bull, 0x0808080808190819ull, 0x0808080808191908ull, 0x08080808082b0808ull,
    0x08080808082b082bull, 0x08080808082b2b08ull, 0x08080808082b2b2bull, 0x0808080819080819ull,
    0x0808080819081908ull, 0x0808080819190808ull, 0x0808080819192b08ull, 0x08080808192b0819ull,
    0x08080808192b1908ull, 0x080808082b080808ull, 0x080808082b08082bull, 0x080808082b082b2bull,
    0x080808082b2b082bull, 0x0808081908080819ull, 0x0808081908081908ull, 0x0808081908190808ull,
    0x0808081908191919ull, 0x0808081919080808ull, 0x080808192b081908ull, 0x080808192b192b08ull,
    0x0808082b08080808ull, 0x0808082b0808082bull, 0x0808082b082b082bull, 0x0808082b2b08082bull,
    0x0808190808080819ull, 0x0808190808081908ull, 0x0808190808190808ull, 0x08081908082b0819ull,
    0x08081908082b1908ull, 0x0808190819080808ull, 0x080819081908082bull, 0x0808190819082b08ull,
    0x08081908192b0808ull, 0x080819082b080819ull, 0x080819082b081908ull, 0x080819082b190808ull,
    0x080819082b2b1908ull, 0x0808191908080808ull, 0x080819190808082bull, 0x0808191908082b08ull,
    0x08081919082b0808ull, 0x080819191908192bull, 0x08081919192b2b19ull, 0x080819192b080808ull,
    0x080819192b190819ull, 0x0808192b08082b19ull, 0x0808192b08190808ull, 0x0808192b19080808ull,
    0x0808192b2b081908ull, 0x0808192b2b2b1908ull, 0x08082b0808080808ull, 0x08082b0808081919ull,
    0x08082b0808082b08ull, 0x08082b0808191908ull, 0x08082b08082b2b08ull, 0x08082b0819080819ull,
    0x08082b0819081908ull, 0x08082b0819190808ull, 0x08082b081919082bull, 0x08082b082b082b08ull,
    0x08082b1908081908ull, 0x08082b1919080808ull, 0x08082b2b0808082bull, 0x08082b2b08191908ull,
    0x0819080808080819ull, 0x0819080808081908ull, 0x0819080808190808ull, 0x08190808082b0819ull,
    0x0819080819080808ull, 0x08190808192b0808ull, 0x081908082b081908ull, 0x081908082b190808ull,
    0x081908082b191919ull, 0x0819081908080808ull, 0x0819081908082b08ull, 0x08190819082b0808ull,
    0x0819081919190808ull, 0x0819081919192b2bull, 0x081908192b080808ull, 0x0819082b082b1908ull,
    0x0819082b19081919ull, 0x0819190808080808ull, 0x0819190808082b08ull, 0x08191908082b0808ull,
    0x08191908082b1919ull, 0x0819190819082b19ull, 0x081919082b080808ull, 0x0819191908192b08ull,
    0x08191919192b082bull, 0x0819192b08080808ull, 0x0819192b0819192bull, 0x08192b0808080819ull,
    0x08192b0808081908ull, 0x08192b0808190808ull, 0x08192b0819080808ull, 0x08192b082b080819ull,
    0x08192b1908080808ull, 0x08192b1908081919ull, 0x08192b192b2b0808ull, 0x08192b2b19190819ull,
    0x082b080808080808ull, 0x082b08080808082bull, 0x082b080808082b2bull, 0x082b080819081908ull,
    0x082b0808192b0819ull, 0x082b08082b080808ull, 0x082b08082b08082bull, 0x082b0819082b2b19ull,
    0x082b081919082b08ull, 0x082b082b08080808ull, 0x082b082b0808082bull, 0x082b190808080819ull,
    0x082b190808081908ull, 0x082b190808190808ull, 0x082b190819080808ull, 0x082b19081919192bull,
    0x082b191908080808ull, 0x082b191919080819ull, 0x082b1919192b1908ull, 0x082b192b2b190808ull,
    0x082b2b0808082b08ull, 0x082b2b08082b0808ull, 0x082b2b082b191908ull, 0x082b2b2b19081908ull,
    0x1908080808080819ull, 0x1908080808081908ull, 0x1908080808190808ull, 0x1908080808192b08ull,
    0x19080808082b0819ull, 0x19080808082b1908ull, 0x1908080819080808ull, 0x1908080819082b08ull,
    0x190808081919192bull, 0x19080808192b0808ull, 0x190808082b080819ull, 0x190808082b081908ull,
    0x190808082b190808ull, 0x1908081908080808ull, 0x19080819082b0808ull, 0x19080819192b0819ull,
    0x190808192b080808ull, 0x190808192b081919ull, 0x1908082b08080819ull, 0x1908082b08190808ull,
    0x1908082b19082b08ull, 0x1908082b1919192bull, 0x1908082b192b2b08ull, 0x1908190808080808ull,
    0x1908190808082b08ull, 0x19081908082b0808ull, 0x190819082b080808ull, 0x190819082b192b19ull,
    0x190819190819082bull, 0x19081919082b1908ull, 0x1908192b08080808ull, 0x19082b0808080819ull,
    0x19082b0808081908ull, 0x19082b0808190808ull, 0x19082b0819080808ull, 0x19082b0819081919ull,
    0x19082b1908080808ull, 0x19082b1919192b08ull, 0x19082b19192b0819ull, 0x19082b192b08082bull,
    0x19082b2b19081919ull, 0x19082b2b2b190808ull, 0x1919080808080808ull, 0x1919080808082b08ull,
    0x1919080808190819ull, 0x1919080808192b19ull, 0x19190808082b0808ull, 0x191908082b080808ull,
    0x191908082b082b08ull, 0x1919081908081908ull, 0x191908191908082bull, 0x191908192b2b1908ull,
    0x1919082b2b190819ull, 0x191919082b190808ull, 0x191919082b19082bull, 0x1919191908082b2bull,
    0x1919192b08080819ull, 0x1919192b19191908ull, 0x19192b0808080808ull, 0x19192b0808190819ull,
    0x19192b0808192b19ull, 0x19192b08192b1908ull, 0x19192b1919080808ull, 0x19192b2b08082b08ull,
    0x192b080808081908ull, 0x192b080808190808ull, 0x192b080819080808ull, 0x192b0808192b2b08ull,
    0x192b081908080808ull, 0x192b081919191919ull, 0x192b082b08192b08ull, 0x192b082b192b0808ull,
    0x192b190808080808ull, 0x192b190808081919ull, 0x192b191908190808ull, 0x192b19190819082bull,
    0x192b19192b081908ull, 0x192b2b081908082bull, 0x2b08080808080808ull, 0x2b0808080808082bull,
    0x2b08080808082b2bull, 0x2b08080819080819ull, 0x2b0808082b08082bull, 0x2b08081908081908ull,
    0x2b08081908192b08ull, 0x2b08081919080808ull, 0x2b08082b08190819ull, 0x2b08190808080819ull,
    0x2b08190808081908ull, 0x2b08190808190808ull, 0x2b08190808191919ull, 0x2b08190819080808ull,
    0x2b081908192b0808ull, 0x2b08191908080808ull, 0x2b0819191908192bull, 0x2b0819192b191908ull,
    0x2b08192b08082b19ull, 0x2b08192b19080808ull, 0x2b08192b192b0808ull, 0x2b082b080808082bull,
    0x2b082b1908081908ull, 0x2b082b2b08190819ull, 0x2b19080808081908ull, 0x2b19080808190808ull,
    0x2b190808082b1908ull, 0x2b19080819080808ull, 0x2b1908082b2b0819ull, 0x2b1908190819192bull,
    0x2b1908192b080808ull, 0x2b19082b19081919ull, 0x2b19190808080808ull, 0x2b191908082b082bull,
    0x2b19190819081908ull, 0x2b19191919190819ull, 0x2b192b082b080819ull, 0x2b192b19082b0808ull,
    0x2b2b08080808082bull, 0x2b2b080819190808ull, 0x2b2b08082b081919ull, 0x2b2b081908082b19ull,
    0x2b2b082b08080808ull, 0x2b2b190808192b08ull, 0x2b2b2b0819190808ull, 0x2b2b2b1908081908ull,
};

/* signs[k] is k with bit 7 set to the parity of k: the eighth sign of each
 * group of eight is implied, so that the number of minus signs is even.
 * Format data, identical to ggml's ksigns_iq2xs. */
const uint8_t ds4_iq2xxs_signs[128] = {
    0x00, 0x81, 0x82, 0x03, 0x84, 0x05, 0x06, 0x87, 0x88, 0x09, 0x0a, 0x8b, 0x0c, 0x8d, 0x8e, 0x0f,
    0x90, 0x11, 0x12, 0x93, 0x14, 0x95, 0x96, 0x17, 0x18, 0x99, 0x9a, 0x1b, 0x9c, 0x1d, 0x1e, 0x9f,
    0xa0, 0x21, 0x22, 0xa3, 0x24, 0xa5, 0xa6, 0x27, 0x28, 0xa9, 0xaa, 0x2b, 0xac, 0x2d, 0x2e, 0xaf,
    0x30, 0xb1, 0xb2, 0x33, 0xb4, 0x35, 0x36, 0xb7, 0xb8, 0x39, 0x3a, 0xbb, 0x3c, 0xbd, 0xbe, 0x3f,
    0xc0, 0x41, 0x42, 0xc3, 0x44, 0xc5, 0xc6, 0x47, 0x48, 0xc9, 0xca, 0x4b, 0xcc, 0x4d, 0x4e, 0xcf,
    0x50, 0xd1, 0xd2, 0x53, 0xd4, 0x55, 0x56, 0xd7, 0xd8, 0x59, 0x5a, 0xdb, 0x5c, 0xdd, 0xde, 0x5f,
    0x60, 0xe1, 0xe2, 0x63, 0xe4, 0x65, 0x66, 0xe7, 0xe8, 0x69, 0x6a, 0xeb, 0x6c, 0xed, 0xee, 0x6f,
    0xf0, 0x71, 0x72, 0xf3, 0x74, 0xf5, 0xf6, 0x77, 0x78, 0xf9, 0xfa, 0x7b, 0xfc, 0x7d, 0x7e, 0xff,
};

/* ------------------------------------------------------------------------ */
/* Half and bfloat16.                                                       */
/* ------------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Pure integer conversions (no reliance on the FP environment).  NaNs keep
 * their payload and come out quiet, which is what F16C's vcvtph2ps /
 * vcvtps2ph do, so the scalar and SIMD paths agree on all 65536 halves. */
float ds4_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;                      /* exponent and mantissa */
    uint32_t bits;
    if (em >= 0x7c00u) {                            /* inf / NaN */
        uint32_t man = em & 0x3ffu;
        bits = 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else if (em >= 0x0400u) {                     /* normal: rebias 15 -> 127 */
        bits = (em << 13) + (112u << 23);
    } else {                                        /* zero / subnormal: em * 2^-24, exact */
        bits = f32_bits((float)em * 0x1p-24f);
    }
    return bits_f32(sign | bits);
}

uint16_t ds4_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {                        /* inf or NaN */
        if (ax == 0x7f800000u)
            return sign | 0x7c00u;
        return (uint16_t)(sign | 0x7e00u | ((ax & 0x7fffffu) >> 13));
    }
    uint32_t e = ax >> 23;                          /* biased f32 exponent */
    if (e >= 143)                                   /* >= 2^16: overflow */
        return sign | 0x7c00u;
    if (e >= 113) {                                 /* normal half (maybe rounding up to inf) */
        uint32_t h = ((e - 112) << 10) | ((ax & 0x7fffffu) >> 13);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
            h++;                                    /* a carry into the exponent is right */
        return (uint16_t)(sign | h);
    }
    if (e < 102)                                    /* < 2^-25: rounds to zero */
        return sign;
    /* subnormal half: round(m * 2^(e-150) / 2^-24) = m >> (126 - e) */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;                       /* 14..24 */
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
        h++;                                        /* may become the smallest normal: right */
    return (uint16_t)(sign | h);
}

float ds4_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* ------------------------------------------------------------------------ */
/* Dequantization.  Every product below is exact in float (see the golden   */
/* README), and the K-quants round once, at the final subtraction, so these */
/* are bit-exact with ggml whatever the compiler does with contraction.     */
/* ------------------------------------------------------------------------ */

static void deq_q8_0_block(const block_q8_0 *b, float *y)
{
    float d = ds4_f16_to_f32(b->d);
    for (int i = 0; i < QK8_0; i++)
        y[i] = d * (float)b->qs[i];
}

static void deq_q2_K_block(const block_q2_K *b, float *y)
{
    float d = ds4_f16_to_f32(b->d), dmin = ds4_f16_to_f32(b->dmin);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                uint8_t s = b->scales[h * 8 + 2 * j + (l >> 4)];
                int q = (b->qs[h * 32 + l] >> (2 * j)) & 3;
                float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
                y[h * 128 + j * 32 + l] = dl * (float)q - ml;
            }
}

/* The eight 6-bit (scale, min) pairs of a Q4_K block. */
static void q4_K_scales(const uint8_t *b, uint8_t *sc, uint8_t *m)
{
    for (int j = 0; j < 4; j++) {
        sc[j] = b[j] & 63;
        m[j] = b[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((b[j + 4] & 15) | ((b[j - 4] >> 6) << 4));
        m[j] = (uint8_t)((b[j + 4] >> 4) | ((b[j] >> 6) << 4));
    }
}

static void deq_q4_K_block(const block_q4_K *b, float *y)
{
    float d = ds4_f16_to_f32(b->d), dmin = ds4_f16_to_f32(b->dmin);
    uint8_t sc[8], m[8];
    q4_K_scales(b->scales, sc, m);
    for (int c = 0; c < 4; c++) {
        float d1 = d * (float)sc[2 * c], m1 = dmin * (float)m[2 * c];
        float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)m[2 * c + 1];
        for (int l = 0; l < 32; l++) {
            y[c * 64 + l] = d1 * (float)(b->qs[c * 32 + l] & 15) - m1;
            y[c * 64 + 32 + l] = d2 * (float)(b->qs[c * 32 + l] >> 4) - m2;
        }
    }
}

/* Q5_K: Q4_K's scales and nibbles plus bit 2c (low nibble) / 2c + 1 (high
 * nibble) of qh[l] for chunk c.  d1 * q is exact, so only the subtraction
 * rounds, as in ggml. */
static inline int q5_K_q(const block_q5_K *b, int c, int l, int hi)
{
    int lo4 = hi ? b->qs[c * 32 + l] >> 4 : b->qs[c * 32 + l] & 15;
    return lo4 | (((b->qh[l] >> (2 * c + hi)) & 1) << 4);
}

static void deq_q5_K_block(const block_q5_K *b, float *y)
{
    float d = ds4_f16_to_f32(b->d), dmin = ds4_f16_to_f32(b->dmin);
    uint8_t sc[8], m[8];
    q4_K_scales(b->scales, sc, m);
    for (int c = 0; c < 4; c++) {
        float d1 = d * (float)sc[2 * c], m1 = dmin * (float)m[2 * c];
        float d2 = d * (float)sc[2 * c + 1], m2 = dmin * (float)m[2 * c + 1];
        for (int l = 0; l < 32; l++) {
            y[c * 64 + l] = d1 * (float)q5_K_q(b, c, l, 0) - m1;
            y[c * 64 + 32 + l] = d2 * (float)q5_K_q(b, c, l, 1) - m2;
        }
    }
}

/* Q3_K's sixteen 6-bit scales, minus 32: the low four bits of scale j are
 * a nibble of byte j mod 8 (low for j < 8), the high two bits come from
 * byte 8 + j mod 4, at bit 2 (j / 4). */
static void q3_K_scales(const uint8_t *b, int *s)
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? b[j] & 15 : b[j - 8] >> 4;
        int hi = (b[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        s[j] = (lo | (hi << 4)) - 32;
    }
}

/* element e = 128 h + 32 k + 16 g + l (h < 2, k < 4, g < 2, l < 16): two
 * bits of qs[32 h + 16 g + l] at 2k, minus 4 unless bit 4h + k of
 * hmask[16 g + l] is set; its scale is group e / 16. */
static inline int q3_K_q(const block_q3_K *b, int e)
{
    int h = e >> 7, k = (e >> 5) & 3, gl = e & 31;
    int q = (b->qs[32 * h + gl] >> (2 * k)) & 3;
    return q - ((b->hmask[gl] >> (4 * h + k)) & 1 ? 0 : 4);
}

/* All 256 codes at once, in loops a compiler vectorizes (q3_K_q is the
 * definition; this is the same map, element e = 128 h + 32 k + gl). */
static void q3_K_unpack(const block_q3_K *b, int8_t *q)
{
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int gl = 0; gl < 32; gl++)
                q[128 * h + 32 * k + gl] = (int8_t)(((b->qs[32 * h + gl] >> (2 * k)) & 3) -
                                                    (((b->hmask[gl] >> (4 * h + k)) & 1) ? 0 : 4));
}

static void deq_q3_K_block(const block_q3_K *b, float *y)
{
    float d = ds4_f16_to_f32(b->d);
    int s[16];
    int8_t q[QK_K];
    q3_K_scales(b->scales, s);
    q3_K_unpack(b, q);
    for (int j = 0; j < 16; j++) {
        float dl = d * (float)s[j];                 /* exact: 11 x 6 bits */
        for (int l = 0; l < 16; l++)
            y[16 * j + l] = dl * (float)q[16 * j + l];
    }
}

/* Q6_K: element e = 128 h + 32 k + l (k < 4, l < 32): the nibble of
 * ql[64 h + 32 (k & 1) + l] (high for k >= 2) and bits 2k of
 * qh[32 h + l] as bits 4-5, minus 32; group e / 16 holds its scale. */
static inline int q6_K_q(const block_q6_K *b, int e)
{
    int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    int ql = b->ql[64 * h + 32 * (k & 1) + l];
    int lo = k < 2 ? ql & 15 : ql >> 4;
    return (lo | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
}

/* All 256 codes at once (q6_K_q's map, vectorizable loops). */
static void q6_K_unpack(const block_q6_K *b, int8_t *q)
{
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *ql = b->ql + 64 * h, qh = b->qh[32 * h + l];
            q[128 * h + l] = (int8_t)(((ql[l] & 15) | ((qh & 3) << 4)) - 32);
            q[128 * h + 32 + l] = (int8_t)(((ql[32 + l] & 15) | (((qh >> 2) & 3) << 4)) - 32);
            q[128 * h + 64 + l] = (int8_t)(((ql[l] >> 4) | (((qh >> 4) & 3) << 4)) - 32);
            q[128 * h + 96 + l] = (int8_t)(((ql[32 + l] >> 4) | (((qh >> 6) & 3) << 4)) - 32);
        }
}

static void deq_q6_K_block(const block_q6_K *b, float *y)
{
    float d = ds4_f16_to_f32(b->d);
    int8_t q[QK_K];
    q6_K_unpack(b, q);
    for (int e = 0; e < QK_K; e++)                  /* ggml: d * sc * q, left to right */
        y[e] = d * (float)b->scales[e >> 4] * (float)q[e];
}

/* IQ4_XS: group g (32 elements) has the 6-bit scale nibble g of scales_l
 * and bits 2g of scales_h, minus 32; element j < 16 of the group is the
 * low nibble of qs[16 g + j], element 16 + j the high one. */
const int8_t ds4_kvalues_iq4nl[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

static inline int iq4_xs_scale(const block_iq4_xs *b, int g)
{
    int ls = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 15) | (((b->scales_h >> (2 * g)) & 3) << 4);
    return ls - 32;
}

static void deq_iq4_xs_block(const block_iq4_xs *b, float *y)
{
    float d = ds4_f16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
        float dl = d * (float)iq4_xs_scale(b, g);  /* dl * kv exact: 11 + 6 + 7 bits */
        for (int j = 0; j < 16; j++) {
            y[32 * g + j] = dl * (float)ds4_kvalues_iq4nl[b->qs[16 * g + j] & 15];
            y[32 * g + 16 + j] = dl * (float)ds4_kvalues_iq4nl[b->qs[16 * g + j] >> 4];
        }
    }
}

static void deq_iq2_xxs_block(const block_iq2_xxs *b, float *y)
{
    float d = ds4_f16_to_f32(b->d);
    for (int g = 0; g < 8; g++) {
        uint32_t aux[2];
        memcpy(aux, b->qs + 4 * g, 8);
        float db = d * (0.5f + (float)(aux[1] >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++) {
            const uint8_t *grid = (const uint8_t *)&ds4_iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
            uint8_t signs = ds4_iq2xxs_signs[(aux[1] >> (7 * l)) & 127];
            for (int i = 0; i < 8; i++) {
                float v = db * (float)grid[i];
                y[g * 32 + l * 8 + i] = (signs >> i) & 1 ? -v : v;
            }
        }
    }
}

/* The IQ2_XXS grid as two-bit codes (quant.h): the SIMD tables look them
 * up instead of the 8-byte grid rows. */
static uint8_t iq2xxs_codes[512] __attribute__((aligned(64)));
static pthread_once_t iq2xxs_codes_once = PTHREAD_ONCE_INIT;

static void iq2xxs_codes_init(void)
{
    for (int e = 0; e < 256; e++) {
        unsigned code = 0;
        for (int i = 0; i < 8; i++) {
            unsigned v = (unsigned)(ds4_iq2xxs_grid[e] >> (8 * i)) & 0xff;
            code |= (v == 8 ? 0u : v == 25 ? 1u : 2u) << (2 * i);   /* test_quant checks the grid */
        }
        iq2xxs_codes[e] = (uint8_t)code;
        iq2xxs_codes[256 + e] = (uint8_t)(code >> 8);
    }
}

const uint8_t *ds4_iq2xxs_codes(void)
{
    pthread_once(&iq2xxs_codes_once, iq2xxs_codes_init);
    return iq2xxs_codes;
}

/* MXFP4: value j and j + 16 share byte j; kvalues[code] * 2^(e-128) is
 * exact (a small integer times a power of two) unless it falls below the
 * normal range, where the float product rounds exactly as ggml's does. */
const int8_t ds4_kvalues_mxfp4[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

static void deq_mxfp4_block(const block_mxfp4 *b, float *y)
{
    const float d = ds4_e8m0_to_f32_half(b->e);
    for (int j = 0; j < QK_MXFP4 / 2; j++) {
        y[j] = (float)ds4_kvalues_mxfp4[b->qs[j] & 15] * d;
        y[j + QK_MXFP4 / 2] = (float)ds4_kvalues_mxfp4[b->qs[j] >> 4] * d;
    }
}

int ds4_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    switch (type) {
    case GGML_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case GGML_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = ds4_f16_to_f32(s[i]);
        return 0;
    }
    case GGML_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = ds4_bf16_to_f32(s[i]);
        return 0;
    }
    case GGML_Q8_0: {
        const block_q8_0 *b = src;
        for (int64_t i = 0; i < n / QK8_0; i++) deq_q8_0_block(b + i, dst + i * QK8_0);
        return 0;
    }
    case GGML_Q2_K: {
        const block_q2_K *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_q2_K_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_Q4_K: {
        const block_q4_K *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_q4_K_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_Q3_K: {
        const block_q3_K *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_q3_K_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_Q5_K: {
        const block_q5_K *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_q5_K_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_Q6_K: {
        const block_q6_K *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_q6_K_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_IQ4_XS: {
        const block_iq4_xs *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_iq4_xs_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_IQ2_XXS: {
        const block_iq2_xxs *b = src;
        for (int64_t i = 0; i < n / QK_K; i++) deq_iq2_xxs_block(b + i, dst + i * QK_K);
        return 0;
    }
    case GGML_MXFP4: {
        const block_mxfp4 *b = src;
        for (int64_t i = 0; i < n / QK_MXFP4; i++) deq_mxfp4_block(b + i, dst + i * QK_MXFP4);
        return 0;
    }
    case GGML_Q8_K: {
        const block_q8_K *b = src;
        for (int64_t i = 0; i < n / QK_K; i++)
            for (int j = 0; j < QK_K; j++)
                dst[i * QK_K + j] = b[i].d * (float)b[i].qs[j];
        return 0;
    }
    default:
        return -1;
    }
}

/* ------------------------------------------------------------------------ */
/* Activation quantizers.                                                   */
/* ------------------------------------------------------------------------ */

/* Converts an already rounded value to int8 within [lo, 127].  For finite
 * inputs of the normal range the clamp never acts (|x*scale| <= 127 up to
 * an ulp), so the results equal ggml's; it only keeps tiny subnormal blocks
 * (whose reciprocal scale is inexact or infinite), infinities and NaNs
 * (mapped to 0) from causing an out-of-range conversion. */
static inline int8_t clamp_i8(float v, int lo)
{
    if (v >= 127.0f) return 127;
    if (v <= (float)lo) return (int8_t)lo;
    if (v != v) return 0;
    return (int8_t)(int)v;
}

static float block_amax(const float *x, int n)
{
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) amax = ax;
    }
    return amax;
}

/* ggml quantize_row_q8_0_ref: d = amax/127, multiplier 1/d from the
 * unrounded d, roundf (halves away from zero), d stored as fp16. */
void ds4_quantize_q8_0_ref(const float *x, block_q8_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = block_amax(x, QK8_0);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ds4_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = clamp_i8(roundf(x[j] * id), -127);
    }
}

/* ggml's AVX2 quantize_row_q8_0: multiplier 127/amax, halves to even. */
void ds4_quantize_q8_0_even(const float *x, block_q8_0 *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = block_amax(x, QK8_0);
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = ds4_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = clamp_i8(rintf(x[j] * id), -127);
    }
}

int ds4_amx_min_tok(int type)
{
    switch (type) {
    case GGML_MXFP4: return DS4_AMX_MIN_TOK_MXFP4;
    case GGML_Q2_K: return DS4_AMX_MIN_TOK_Q2_K;
    case GGML_Q4_K: return DS4_AMX_MIN_TOK_Q4_K;
    case GGML_IQ2_XXS: return DS4_AMX_MIN_TOK_IQ2_XXS;
    default: return DS4_AMX_MIN_TOK;
    }
}

int ds4_q8_0_sym(const void *w, size_t nblocks)
{
    /* a byte b of x is 0x80 iff byte b of x ^ 0x80.. is zero: the classic
     * zero-byte test, on 8 codes at a time */
    const uint64_t lo = 0x0101010101010101ull, hi = 0x8080808080808080ull;
    const block_q8_0 *b = w;
    uint64_t any = 0;
    for (size_t i = 0; i < nblocks; i++) {
        for (int k = 0; k < 4; k++) {
            uint64_t x;
            memcpy(&x, b[i].qs + 8 * k, 8);
            x ^= hi;
            any |= (x - lo) & ~x & hi;
        }
        if ((i & 1023) == 1023 && any) return 0;
    }
    return any == 0;
}

/* ds4's rule (docs/MODEL.md §7.1, oracle q8_0_act): d = amax/127
 * kept in float32, q = clamp(rint(x * (1/d)), -128, 127), halves to even.
 * -128 can only come out of blocks whose amax is a tiny subnormal. */
void ds4_quantize_q8_0a(const float *x, block_q8_0a *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = block_amax(x, QK8_0);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = d;
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = clamp_i8(rintf(x[j] * id), -128);
    }
}

/* ggml quantize_row_q8_K_ref.  The element of largest magnitude (the first
 * one on ties) quantizes to -127; halves round to even.  Never produces
 * -128 (the SIMD kernels rely on that).  An all-zero block gets d = 0,
 * q = 0 and, unlike ggml (which leaves them unwritten), zero bsums. */
void ds4_quantize_q8_K(const float *x, block_q8_K *y, int64_t n)
{
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof(y[i]));
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++)
            y[i].qs[j] = clamp_i8(rintf(iscale * x[j]), -127);
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[j * 16 + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ------------------------------------------------------------------------ */
/* Scalar integer dot kernels (ggml's generic operation order).             */
/* ------------------------------------------------------------------------ */

static float s_q8_0_q8_0(int n, const void *vw, const void *va)
{
    const block_q8_0 *w = vw, *a = va;
    float sumf = 0.0f;
    for (int ib = 0; ib < n / QK8_0; ib++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += w[ib].qs[j] * a[ib].qs[j];
        sumf += (float)sumi * (ds4_f16_to_f32(w[ib].d) * ds4_f16_to_f32(a[ib].d));
    }
    return sumf;
}

static float s_q8_0_q8_0a(int n, const void *vw, const void *va)
{
    const block_q8_0 *w = vw;
    const block_q8_0a *a = va;
    float sumf = 0.0f;
    for (int ib = 0; ib < n / QK8_0; ib++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += w[ib].qs[j] * a[ib].qs[j];
        sumf += (float)sumi * (ds4_f16_to_f32(w[ib].d) * a[ib].d);
    }
    return sumf;
}

static float s_q2_K_q8_K(int n, const void *vw, const void *va)
{
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const uint8_t *q2 = w[i].qs, *sc = w[i].scales;
        const int8_t *q8 = a[i].qs;
        /* min term through the activation's 16-element sums */
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += a[i].bsums[j] * (sc[j] >> 4);
        float dall = a[i].d * ds4_f16_to_f32(w[i].d);
        float dmin = a[i].d * ds4_f16_to_f32(w[i].dmin);
        int isum = 0, is = 0;
        for (int h = 0; h < 2; h++, q2 += 32) {
            for (int shift = 0; shift < 8; shift += 2, q8 += 32) {
                int s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) s0 += q8[l] * ((q2[l] >> shift) & 3);
                for (int l = 16; l < 32; l++) s1 += q8[l] * ((q2[l] >> shift) & 3);
                isum += (sc[is] & 15) * s0 + (sc[is + 1] & 15) * s1;
                is += 2;
            }
        }
        sumf += dall * (float)isum - dmin * (float)summs;
    }
    return sumf;
}

/* Q4_K x Q8_K: the blockwise order (ds4_q4_K_q8_K_blockwise below), which
 * every table keeps, rather than ggml's 8 float lanes: those would need 8
 * accumulators per output in the avx512 tiles, and one order for all
 * tables is what makes logits independent of the CPU (docs/NUMERICS.md). */
#define s_q4_K_q8_K ds4_q4_K_q8_K_blockwise

static float s_iq2_xxs_q8_K(int n, const void *vw, const void *va)
{
    const block_iq2_xxs *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        float d = ds4_f16_to_f32(w[i].d) * a[i].d;
        const int8_t *q8 = a[i].qs;
        int32_t bsum = 0;
        for (int g = 0; g < 8; g++) {
            uint32_t aux[2];
            memcpy(aux, w[i].qs + 4 * g, 8);
            /* db = d * (0.5 + ls) / 4 = d * (2 ls + 1) / 8: the 1/8 is
             * applied once at the end */
            int32_t ls = 2 * (int32_t)(aux[1] >> 28) + 1;
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint8_t *grid = (const uint8_t *)&ds4_iq2xxs_grid[(aux[0] >> (8 * l)) & 255];
                uint8_t signs = ds4_iq2xxs_signs[(aux[1] >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++)
                    sumi += grid[j] * q8[j] * ((signs >> j) & 1 ? -1 : 1);
            }
            bsum += sumi * ls;
        }
        sumf += d * (float)bsum;
    }
    return 0.125f * sumf;
}

/* ------------------------------------------------------------------------ */
/* Scalar float-activation kernels, in the one float order every table      */
/* keeps (quant.h, "32-lane order"): element i is fused-multiply-added into  */
/* lane i mod 32 in element order (fmaf: one rounding, as the SIMD FMA),     */
/* leftover groups of 8 into lanes 0..7, the lanes reduced by a fixed tree,  */
/* leftover elements added last, product and sum rounded separately.  The    */
/* weights are the exact dequantized values, fed block by block.  With      */
/* hardware FMA fmaf is one instruction; without it (a PORTABLE build on a   */
/* CPU with no FMA, where no SIMD table runs either) libm's exact fmaf is    */
/* slower but gives the same bits.                                          */
/* ------------------------------------------------------------------------ */

typedef struct { float l[32]; int i; } lanes32;   /* i: elements consumed */

static void l32_init(lanes32 *s)
{
    memset(s, 0, sizeof *s);
}

/* m elements (m a multiple of 32, or the final call) */
static void l32_feed(lanes32 *s, const float *w, const float *x, int m)
{
    int k = 0;
    for (; k + 32 <= m; k += 32)
        for (int j = 0; j < 32; j++) s->l[j] = fmaf(w[k + j], x[k + j], s->l[j]);
    for (; k + 8 <= m; k += 8)
        for (int j = 0; j < 8; j++) s->l[j] = fmaf(w[k + j], x[k + j], s->l[j]);
    s->i += k;
}

/* the reduction tree; then the m - done leftover elements one by one */
static float l32_finish(const lanes32 *s, const float *w, const float *x, int m)
{
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = (s->l[j] + s->l[8 + j]) + (s->l[16 + j] + s->l[24 + j]);
    float r = ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
    for (int k = 0; k < m; k++) r += w[k] * x[k];
    return r;
}

/* a whole row of exact float weights; n any length */
static float dot_l32(const float *w, const float *x, int n)
{
    lanes32 s;
    l32_init(&s);
    l32_feed(&s, w, x, n);
    return l32_finish(&s, w + s.i, x + s.i, n - s.i);
}

static float s_f32_f32(int n, const void *vw, const float *x)
{
    return dot_l32(vw, x, n);
}

/* 16-bit weights: converted 32 at a time (the leftovers, fewer than 32,
 * in one last piece), fed in order. */
static float dot_l32_u16(const uint16_t *w, const float *x, int n, float (*cvt)(uint16_t))
{
    lanes32 s;
    float buf[32];
    l32_init(&s);
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int j = 0; j < 32; j++) buf[j] = cvt(w[i + j]);
        l32_feed(&s, buf, x + i, 32);
    }
    const int m = n - i;
    for (int j = 0; j < m; j++) buf[j] = cvt(w[i + j]);
    l32_feed(&s, buf, x + i, m);
    const int done = s.i - i;
    return l32_finish(&s, buf + done, x + i + done, m - done);
}

static float s_f16_f32(int n, const void *vw, const float *x)
{
    return dot_l32_u16(vw, x, n, ds4_f16_to_f32);
}

static float s_bf16_f32(int n, const void *vw, const float *x)
{
    return dot_l32_u16(vw, x, n, ds4_bf16_to_f32);
}

/* Block formats: every block is a whole number of 32-element groups, so
 * there are no leftovers. */
static float s_q8_0_f32(int n, const void *vw, const float *x)
{
    const block_q8_0 *w = vw;
    float buf[QK8_0];
    lanes32 s;
    l32_init(&s);
    for (int ib = 0; ib < n / QK8_0; ib++) {
        deq_q8_0_block(w + ib, buf);
        l32_feed(&s, buf, x + ib * QK8_0, QK8_0);
    }
    return l32_finish(&s, NULL, NULL, 0);
}

#define S_KQ_F32(name, btype, deq) static S_KQ_F32_DEF(name, btype, deq)
#define S_KQ_F32_DEF(name, btype, deq)                              \
    float name(int n, const void *vw, const float *x)              \
    {                                                               \
        const btype *w = vw;                                        \
        float buf[QK_K];                                            \
        lanes32 s;                                                  \
        l32_init(&s);                                               \
        for (int ib = 0; ib < n / QK_K; ib++) {                     \
            deq(w + ib, buf);                                       \
            l32_feed(&s, buf, x + ib * QK_K, QK_K);                 \
        }                                                           \
        return l32_finish(&s, NULL, NULL, 0);                       \
    }

S_KQ_F32(s_q2_K_f32, block_q2_K, deq_q2_K_block)
S_KQ_F32(s_q4_K_f32, block_q4_K, deq_q4_K_block)
S_KQ_F32(s_iq2_xxs_f32, block_iq2_xxs, deq_iq2_xxs_block)
S_KQ_F32_DEF(ds4_q3_K_f32_ref, block_q3_K, deq_q3_K_block)
S_KQ_F32_DEF(ds4_q5_K_f32_ref, block_q5_K, deq_q5_K_block)
S_KQ_F32_DEF(ds4_q6_K_f32_ref, block_q6_K, deq_q6_K_block)
S_KQ_F32_DEF(ds4_iq4_xs_f32_ref, block_iq4_xs, deq_iq4_xs_block)

static void s_f16_to_f32_row(const uint16_t *src, float *dst, int n)
{
    for (int i = 0; i < n; i++) dst[i] = ds4_f16_to_f32(src[i]);
}

/* Q4_K x Q8_K, blockwise order: the integer sums of a 256-block first
 * (scales times 32-element sums, mins times activation sums), one float
 * term per block.  This is the order the avx512 tiles can keep at every
 * tile shape (ggml's 8 float lanes above would need 8 accumulators per
 * output); it is the reference the tests hold them to bit for bit. */
float ds4_q4_K_q8_K_blockwise(int n, const void *vw, const void *va)
{
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        q4_K_scales(w[i].scales, sc, m);
        const int8_t *q8 = a[i].qs;
        int32_t isum = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q4 = w[i].qs + 32 * c;
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q4[l] & 15) * q8[64 * c + l];
                s1 += (q4[l] >> 4) * q8[64 * c + 32 + l];
            }
            isum += sc[2 * c] * s0 + sc[2 * c + 1] * s1;
        }
        for (int j = 0; j < 8; j++)
            summ += m[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        float d = ds4_f16_to_f32(w[i].d) * a[i].d;
        float dmin = ds4_f16_to_f32(w[i].dmin) * a[i].d;
        sumf += d * (float)isum - dmin * (float)summ;
    }
    return sumf;
}

/* Q5_K x Q8_K: Q4_K's blockwise order with the 5-bit q (0..31). */
float ds4_q5_K_q8_K_ref(int n, const void *vw, const void *va)
{
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        q4_K_scales(w[i].scales, sc, m);
        const int8_t *q8 = a[i].qs;
        uint8_t q[QK_K];
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = (uint8_t)((w[i].qs[32 * c + l] & 15) | (((w[i].qh[l] >> (2 * c)) & 1) << 4));
                q[64 * c + 32 + l] = (uint8_t)((w[i].qs[32 * c + l] >> 4) | (((w[i].qh[l] >> (2 * c + 1)) & 1) << 4));
            }
        int32_t isum = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += q[64 * c + l] * q8[64 * c + l];
                s1 += q[64 * c + 32 + l] * q8[64 * c + 32 + l];
            }
            isum += sc[2 * c] * s0 + sc[2 * c + 1] * s1;
        }
        for (int j = 0; j < 8; j++)
            summ += m[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        float d = ds4_f16_to_f32(w[i].d) * a[i].d;
        float dmin = ds4_f16_to_f32(w[i].dmin) * a[i].d;
        sumf += d * (float)isum - dmin * (float)summ;
    }
    return sumf;
}

/* Q3_K / Q6_K x Q8_K: per block the exact isum = sum_j s_j * S_j over the
 * 16 groups of 16 (|isum| < 256 * 32 * 128 * 127 < 2^31), then one float
 * term.  ggml sums these in 8 float lanes; one integer sum per block is
 * what every table can keep at every tile shape (as for Q4_K). */
float ds4_q3_K_q8_K_ref(int n, const void *vw, const void *va)
{
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int s[16];
        int8_t q[QK_K];
        q3_K_scales(w[i].scales, s);
        q3_K_unpack(w + i, q);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int32_t sj = 0;
            for (int l = 0; l < 16; l++) sj += q[16 * j + l] * a[i].qs[16 * j + l];
            isum += s[j] * sj;
        }
        sumf += (ds4_f16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    return sumf;
}

float ds4_q6_K_q8_K_ref(int n, const void *vw, const void *va)
{
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        q6_K_unpack(w + i, q);
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            int32_t sj = 0;
            for (int l = 0; l < 16; l++) sj += q[16 * j + l] * a[i].qs[16 * j + l];
            isum += w[i].scales[j] * sj;
        }
        sumf += (ds4_f16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    return sumf;
}

/* IQ4_XS x Q8_K: the same over its 8 groups of 32 (|isum| < 2^31). */
float ds4_iq4_xs_q8_K_ref(int n, const void *vw, const void *va)
{
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    float sumf = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = a[i].qs;
        int32_t isum = 0;
        for (int g = 0; g < 8; g++) {
            int32_t sg = 0;
            for (int j = 0; j < 16; j++)
                sg += ds4_kvalues_iq4nl[w[i].qs[16 * g + j] & 15] * q8[32 * g + j] +
                      ds4_kvalues_iq4nl[w[i].qs[16 * g + j] >> 4] * q8[32 * g + 16 + j];
            isum += iq4_xs_scale(w + i, g) * sg;
        }
        sumf += (ds4_f16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    return sumf;
}

/* ------------------------------------------------------------------------ */
/* MXFP4 (ggml's vec_dot_mxfp4_q8_0 order, Q8_0a activations).  The block   */
/* sum |sumi| <= 32 * 12 * 128 is exact in int; d = 2^(e-128) * a.d rounds  */
/* only when it leaves the normal range.  The SIMD tables reproduce exactly */
/* these float operations.                                                  */
/* ------------------------------------------------------------------------ */

static float s_mxfp4_q8_0a(int n, const void *vw, const void *va)
{
    const block_mxfp4 *w = vw;
    const block_q8_0a *a = va;
    float sumf = 0.0f;
    for (int ib = 0; ib < n / QK_MXFP4; ib++) {
        int sumi = 0;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            sumi += a[ib].qs[j] * ds4_kvalues_mxfp4[w[ib].qs[j] & 15] +
                    a[ib].qs[j + 16] * ds4_kvalues_mxfp4[w[ib].qs[j] >> 4];
        sumf += (float)sumi * (ds4_e8m0_to_f32_half(w[ib].e) * a[ib].d);
    }
    return sumf;
}

static float s_mxfp4_f32(int n, const void *vw, const float *x)
{
    const block_mxfp4 *w = vw;
    float buf[QK_MXFP4];
    lanes32 s;
    l32_init(&s);
    for (int ib = 0; ib < n / QK_MXFP4; ib++) {
        deq_mxfp4_block(w + ib, buf);
        l32_feed(&s, buf, x + ib * QK_MXFP4, QK_MXFP4);
    }
    return l32_finish(&s, NULL, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* Scalar tiles: the single-row kernels, one (row, token) at a time.        */
/* ------------------------------------------------------------------------ */

#define SCALAR_TILE(name, dot)                                                  \
    static void name(int n, const void *w, size_t ws, int nrows,               \
                     const void *const *a, int ntok, float *y, size_t ys)      \
    {                                                                           \
        for (int j = 0; j < ntok; j++)                                          \
            for (int r = 0; r < nrows; r++)                                     \
                y[(size_t)j * ys + r] = dot(n, (const uint8_t *)w + (size_t)r * ws, a[j]); \
    }

SCALAR_TILE(s_q8_0_q8_0a_tile, s_q8_0_q8_0a)
SCALAR_TILE(s_q2_K_q8_K_tile, s_q2_K_q8_K)
SCALAR_TILE(s_q4_K_q8_K_tile, s_q4_K_q8_K)
SCALAR_TILE(s_iq2_xxs_q8_K_tile, s_iq2_xxs_q8_K)
SCALAR_TILE(s_q3_K_q8_K_tile, ds4_q3_K_q8_K_ref)
SCALAR_TILE(s_q5_K_q8_K_tile, ds4_q5_K_q8_K_ref)
SCALAR_TILE(s_q6_K_q8_K_tile, ds4_q6_K_q8_K_ref)
SCALAR_TILE(s_iq4_xs_q8_K_tile, ds4_iq4_xs_q8_K_ref)
SCALAR_TILE(s_f32_f32_tile, s_f32_f32)
SCALAR_TILE(s_f16_f32_tile, s_f16_f32)
SCALAR_TILE(s_mxfp4_q8_0a_tile, s_mxfp4_q8_0a)

/* ------------------------------------------------------------------------ */
/* Tables and dispatch.                                                     */
/* ------------------------------------------------------------------------ */

static const ds4_kernels scalar_kernels = {
    .name = "scalar",
    .q8_0_q8_0 = s_q8_0_q8_0,
    .q8_0_q8_0a = s_q8_0_q8_0a,
    .q2_K_q8_K = s_q2_K_q8_K,
    .q4_K_q8_K = s_q4_K_q8_K,
    .iq2_xxs_q8_K = s_iq2_xxs_q8_K,
    .q3_K_q8_K = ds4_q3_K_q8_K_ref,
    .q5_K_q8_K = ds4_q5_K_q8_K_ref,
    .q6_K_q8_K = ds4_q6_K_q8_K_ref,
    .iq4_xs_q8_K = ds4_iq4_xs_q8_K_ref,
    .f32_f32 = s_f32_f32,
    .f16_f32 = s_f16_f32,
    .bf16_f32 = s_bf16_f32,
    .q8_0_f32 = s_q8_0_f32,
    .q2_K_f32 = s_q2_K_f32,
    .q4_K_f32 = s_q4_K_f32,
    .iq2_xxs_f32 = s_iq2_xxs_f32,
    .q3_K_f32 = ds4_q3_K_f32_ref,
    .q5_K_f32 = ds4_q5_K_f32_ref,
    .q6_K_f32 = ds4_q6_K_f32_ref,
    .iq4_xs_f32 = ds4_iq4_xs_f32_ref,
    .f16_to_f32_row = s_f16_to_f32_row,
    .q8_0_q8_0a_tile = s_q8_0_q8_0a_tile,
    .q2_K_q8_K_tile = s_q2_K_q8_K_tile,
    .q4_K_q8_K_tile = s_q4_K_q8_K_tile,
    .iq2_xxs_q8_K_tile = s_iq2_xxs_q8_K_tile,
    .q3_K_q8_K_tile = s_q3_K_q8_K_tile,
    .q5_K_q8_K_tile = s_q5_K_q8_K_tile,
    .q6_K_q8_K_tile = s_q6_K_q8_K_tile,
    .iq4_xs_q8_K_tile = s_iq4_xs_q8_K_tile,
    .f32_f32_tile = s_f32_f32_tile,
    .f16_f32_tile = s_f16_f32_tile,
    .mxfp4_q8_0a = s_mxfp4_q8_0a,
    .mxfp4_f32 = s_mxfp4_f32,
    .mxfp4_q8_0a_tile = s_mxfp4_q8_0a_tile,
    .quantize_q8_0a = ds4_quantize_q8_0a,
    .quantize_q8_K = ds4_quantize_q8_K,
};

const ds4_kernels *ds4_kernels_scalar(void)
{
    return &scalar_kernels;
}

float ds4_dot_f32act(const ds4_kernels *k, uint32_t type, int n,
                     const void *w, const float *x)
{
    switch (type) {
    case GGML_F32: return k->f32_f32(n, w, x);
    case GGML_F16: return k->f16_f32(n, w, x);
    case GGML_BF16: return k->bf16_f32(n, w, x);
    case GGML_Q8_0: return k->q8_0_f32(n, w, x);
    case GGML_Q2_K: return k->q2_K_f32(n, w, x);
    case GGML_Q4_K: return k->q4_K_f32(n, w, x);
    case GGML_IQ2_XXS: return k->iq2_xxs_f32(n, w, x);
    case GGML_Q3_K: return k->q3_K_f32(n, w, x);
    case GGML_Q5_K: return k->q5_K_f32(n, w, x);
    case GGML_Q6_K: return k->q6_K_f32(n, w, x);
    case GGML_IQ4_XS: return k->iq4_xs_f32(n, w, x);
    case GGML_MXFP4: return k->mxfp4_f32(n, w, x);
    default: return 0.0f;
    }
}
