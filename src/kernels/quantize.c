/*
 * quantize.c -- weight quantizers, byte-exact with ggml's (see quantize.h).
 *
 * Owns: ggml's quantization searches for Q2_K, Q4_K (reference and
 * importance-weighted), IQ2_XXS (importance-weighted, with the grid index
 * map and neighbour lists ggml derives from the grid at init) and the
 * simple Q8_0 / MXFP4 rules.
 * Must not: know about files or tensors, or depend on the engine.
 *
 * Written from the algorithms of ggml's ggml-quants.c (commit d99724f2, the
 * one ../shared/golden/quants was made with).  The searches are iterative
 * and their decisions depend on every float rounding, so each expression
 * keeps ggml's operation order: `w*x*l` is (w*x)*l, `scale*L + min - x` is
 * ((scale*L) + min) - x, and so on.  ggml's reference code runs without
 * FMA contraction, and so must this file: GCC's -std=c11 implies
 * -ffp-contract=off (a build with another compiler or -std=gnu11 needs
 * that flag).  tests/test_quant.c checks every golden `q` array byte for
 * byte.
 */
#include "kernels/quantize.h"
#include "kernels/quant.h"
#include "gguf/gguf.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EPS_GROUP 1e-15f   /* ggml's GROUP_MAX_EPS: below it a group is all zero */

/* Round to nearest, halves to even, through the 1.5 * 2^23 trick, valid for
 * |v| <= 2^22 - 1 (ggml's nearest_int; the callers' values are small). */
static inline int round_int(float v)
{
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* ------------------------------------------------------------------------ */
/* Shared searches                                                          */
/* ------------------------------------------------------------------------ */

/* Scale and min of one group: codes L in [0, nmax] for x ~ scale*L - min.
 * A first fit from the group's range, then nstep + 1 candidate scales
 * (rmin + rdelta*is + nmax) / range, each refined by a weighted least
 * squares fit of (scale, min), keeping the smallest weighted error (mad:
 * absolute, else squared).  weights NULL: x^2 (ggml's qkx3 default).
 * Returns scale; *neg_min = -min (>= 0). */
static float fit_scale_min(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                           float *neg_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                           int use_mad, int strict_eq)
{
    float lo = x[0], hi = x[0];
    float sum_w = weights ? weights[0] : x[0] * x[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        float w = weights ? weights[i] : x[i] * x[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (lo > 0) lo = 0;
    /* qkx2 tests max == min, qkx3 max <= min: the same for finite x */
    if (strict_eq ? hi == lo : hi <= lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = nmax / (hi - lo);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        int l = round_int(iscale * (x[i] - lo));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + lo - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        float w = weights ? weights[i] : x[i] * x[i];
        best += w * diff;
    }
    if (nstep < 1) {
        *neg_min = -lo;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = round_int(iscale * (x[i] - lo));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights ? weights[i] : x[i] * x[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                float w = weights ? weights[i] : x[i] * x[i];
                err += w * diff;
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = this_scale;
                lo = this_min;
            }
        }
    }
    *neg_min = -lo;
    return scale;
}

/* Non-negative values x quantized to codes in [0, nmax] with one scale,
 * minimizing the qw-weighted squared error: 9 trial scales, then up to 5
 * rounds of single-code moves that improve sumlx^2 / suml2 (ggml's
 * make_qp_quants).  Used for the sub-block scales and mins, and for the
 * IQ2_XXS magnitudes. */
static float fit_scale_pos(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < EPS_GROUP) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)round_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        float w = qw[i];
        best_mse += w * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = imin(nmax, round_int(iscale_is * x[i]));
            float diff = x[i] - scale_is * l;
            float w = qw[i];
            mse += w * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imin(nmax, round_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        float w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int nl = imin(nmax, round_int(x[i] * sl2 / slx));
                if (nl != L[i]) {
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ------------------------------------------------------------------------ */
/* Q8_0 and MXFP4                                                           */
/* ------------------------------------------------------------------------ */

/* E2M1 code nearest to x / scale, as ggml's best_index_mxfp4: the first
 * of the 16 doubled table values with the smallest |kv*d - x| (so 0, not
 * -0, for tiny negatives). */
static void quantize_mxfp4_row(const float *x, block_mxfp4 *y, int64_t n)
{
    for (int64_t ib = 0; ib < n / QK_MXFP4; ib++, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        /* the largest power of two <= amax, times 2^-2: amax/d lands in
         * [4, 8) of the doubled table (whose top is 12) */
        /* through int: ggml converts the float straight to uint8_t, which
         * wraps the same way on x86 for the subnormal amax that give a
         * negative value, but is undefined in C */
        const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = ds4_e8m0_to_f32_half(e);
        y[ib].e = e;
        for (int j = 0; j < QK_MXFP4; j++) {
            int best = 0;
            float best_err = fabsf(ds4_kvalues_mxfp4[0] * d - x[j]);
            for (int c = 1; c < 16; c++) {
                float err = fabsf(ds4_kvalues_mxfp4[c] * d - x[j]);
                if (err < best_err) { best = c; best_err = err; }
            }
            if (j < QK_MXFP4 / 2) y[ib].qs[j] = (uint8_t)best;
            else y[ib].qs[j - QK_MXFP4 / 2] |= (uint8_t)(best << 4);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Q2_K                                                                     */
/* ------------------------------------------------------------------------ */

static void pack_q2_K(const uint8_t *L, block_q2_K *y)
{
    for (int h = 0; h < QK_K; h += 128)
        for (int l = 0; l < 32; l++)
            y->qs[h / 4 + l] = (uint8_t)(L[h + l] | (L[h + l + 32] << 2) | (L[h + l + 64] << 4) | (L[h + l + 96] << 6));
}

/* Final codes from the stored (rounded) scales: the 16-element groups whose
 * scale code is 0 keep the codes of the search. */
static void requant_q2_K(const float *x, const block_q2_K *y, float dm, float mm, uint8_t *L)
{
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = dm * (y->scales[j] & 0xF);
        if (!d) continue;
        const float m = mm * (y->scales[j] >> 4);
        for (int i = 0; i < 16; i++) {
            int l = round_int((x[16 * j + i] + m) / d);
            L[16 * j + i] = (uint8_t)imax(0, imin(3, l));
        }
    }
}

/* quantize_row_q2_K_ref: mean-absolute-error fit per 16 elements (weights
 * |x|), scales and mins coded linearly against their maxima. */
static void q2_K_ref(const float *x, block_q2_K *y)
{
    uint8_t L[QK_K], Laux[16];
    float w[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1, 1);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        float iscale = 15.0f / max_scale;
        for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)round_int(iscale * scales[j]);
        y->d = ds4_f32_to_f16(max_scale / 15.0f);
    } else {
        memset(y->scales, 0, 16);
        y->d = ds4_f32_to_f16(0.0f);
    }
    if (max_min > 0) {
        float iscale = 15.0f / max_min;
        for (int j = 0; j < 16; j++) y->scales[j] |= (uint8_t)(round_int(iscale * mins[j]) << 4);
        y->dmin = ds4_f32_to_f16(max_min / 15.0f);
    } else {
        y->dmin = ds4_f32_to_f16(0.0f);
    }
    requant_q2_K(x, y, ds4_f16_to_f32(y->d), ds4_f16_to_f32(y->dmin), L);
    pack_q2_K(L, y);
}

/* quantize_row_q2_K_impl: squared error weighted by qw * sqrt(sigma2 +
 * x^2), scales and mins coded with fit_scale_pos weighted by the groups'
 * total weight. */
static void q2_K_imat(const float *x, const float *qw, block_q2_K *y)
{
    uint8_t L[QK_K], Laux[16], Ls[16], Lm[16];
    float w[16], mins[16], scales[16], sw[16];
    float sumx2 = 0;
    for (int j = 0; j < QK_K; j++) sumx2 += x[j] * x[j];
    float sigma2 = sumx2 / QK_K;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = qw[16 * j + l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
        sw[j] = 0;
        for (int l = 0; l < 16; l++) sw[j] += w[l];
        scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0, 0);
    }
    float dm = fit_scale_pos(16, 15, scales, Ls, sw);
    float mm = fit_scale_pos(16, 15, mins, Lm, sw);
    y->d = ds4_f32_to_f16(dm);
    y->dmin = ds4_f32_to_f16(mm);
    for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    requant_q2_K(x, y, ds4_f16_to_f32(y->d), ds4_f16_to_f32(y->dmin), L);
    pack_q2_K(L, y);
}

/* ------------------------------------------------------------------------ */
/* Q4_K                                                                     */
/* ------------------------------------------------------------------------ */

/* The 6-bit scale/min codes of the 8 sub-blocks into the 12 header bytes,
 * then the final codes from the stored scales, packed two per byte. */
static void finish_q4_K(const float *x, const uint8_t *ls, const uint8_t *lm, uint16_t d16, uint16_t dmin16,
                        uint8_t *L, block_q4_K *y)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            y->scales[j] = ls[j];
            y->scales[j + 4] = lm[j];
        } else {
            y->scales[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            y->scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            y->scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    y->d = d16;
    y->dmin = dmin16;
    const float dd = ds4_f16_to_f32(d16), dmn = ds4_f16_to_f32(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        if (j < 4) {
            sc = y->scales[j] & 63;
            m = y->scales[j + 4] & 63;
        } else {
            sc = (uint8_t)((y->scales[j + 4] & 0xF) | ((y->scales[j - 4] >> 6) << 4));
            m = (uint8_t)((y->scales[j + 4] >> 4) | ((y->scales[j] >> 6) << 4));
        }
        const float d = dd * sc;
        if (!d) continue;
        const float dm = dmn * m;
        for (int i = 0; i < 32; i++) {
            int l = round_int((x[32 * j + i] + dm) / d);
            L[32 * j + i] = (uint8_t)imax(0, imin(15, l));
        }
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            y->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + l + 32] << 4));
}

/* quantize_row_q4_K_ref: weights av_x + |x| per 32-group, codes of the
 * scales and mins linear against their maxima (63 steps). */
static void q4_K_ref(const float *x, block_q4_K *y)
{
    uint8_t L[QK_K], Laux[32], ls[8], lm[8];
    float w[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_scale_min(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20, 0, 1);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    for (int j = 0; j < 8; j++) {
        /* ggml stores nearest_int into a uint8_t, then caps at 63 */
        uint8_t a = (uint8_t)round_int(inv_scale * scales[j]), b = (uint8_t)round_int(inv_min * mins[j]);
        ls[j] = a < 63 ? a : 63;
        lm[j] = b < 63 ? b : 63;
    }
    finish_q4_K(x, ls, lm, ds4_f32_to_f16(max_scale / 63.0f), ds4_f32_to_f16(max_min / 63.0f), L, y);
}

/* quantize_row_q4_K_impl with quant weights: squared error weighted by
 * qw * sqrt(sigma2 + x^2), scale and min codes by fit_scale_pos.  (ggml's
 * impl also has a no-weights branch, but quantize_q4_K never takes it: it
 * calls the reference quantizer then.) */
static void q4_K_imat(const float *x, const float *qw, block_q4_K *y)
{
    uint8_t L[QK_K], Laux[32], Ls[8], Lm[8];
    float w[32], sw[8], mins[8], scales[8];
    float sum_x2 = 0;
    for (int l = 0; l < QK_K; l++) sum_x2 += x[l] * x[l];
    float sigma2 = 2 * sum_x2 / QK_K;
    for (int j = 0; j < 8; j++) {
        for (int l = 0; l < 32; l++) w[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; l++) sumw += w[l];
        sw[j] = sumw;
        scales[j] = fit_scale_min(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0, 0);
    }
    float d_block = fit_scale_pos(8, 63, scales, Ls, sw);
    float m_block = fit_scale_pos(8, 63, mins, Lm, sw);
    finish_q4_K(x, Ls, Lm, ds4_f32_to_f16(d_block), ds4_f32_to_f16(m_block), L, y);
}

/* ------------------------------------------------------------------------ */
/* IQ2_XXS                                                                  */
/* ------------------------------------------------------------------------ */

/* The search works on magnitudes 1, 3, 5 (code l -> 2l + 1) for groups of
 * 8; a group's codes pack into u = sum l_i 4^i.  grid_l[g] holds grid
 * entry g in that form (from ds4_iq2xxs_grid: 8, 25, 43 <-> l = 0, 1, 2);
 * map[u] is the grid entry with exactly those codes, or -(1 + offset) of
 * u's neighbour list: the count, then every grid entry at the two smallest
 * squared distances from u, nearest first, ties by index (what ggml's
 * iq2xs_init_impl builds with qsort). */
#define IQ2_MAP 43692     /* u <= 0xaaaa (every l <= 2), as ggml's kmap_size */

static struct {
    int8_t pos[256][8];   /* 2l + 1 */
    int32_t map[IQ2_MAP];
    uint16_t *nb;
} iq2;
static pthread_once_t iq2_once = PTHREAD_ONCE_INIT;
static int iq2_ok;

static void iq2_init(void)
{
    for (int g = 0; g < 256; g++)
        for (int i = 0; i < 8; i++) {
            uint8_t v = (uint8_t)(ds4_iq2xxs_grid[g] >> (8 * i));
            iq2.pos[g][i] = (int8_t)(v == 8 ? 1 : v == 25 ? 3 : 5);
        }
    for (int u = 0; u < IQ2_MAP; u++) iq2.map[u] = -1;
    for (int g = 0; g < 256; g++) {
        int u = 0;
        for (int i = 0; i < 8; i++) u |= ((iq2.pos[g][i] - 1) / 2) << (2 * i);
        iq2.map[u] = g;
    }
    /* two passes: sizes, then lists */
    size_t total = 0;
    uint16_t *nb = NULL;
    for (int pass = 0; pass < 2; pass++) {
        size_t at = 0;
        for (int u = 0; u < IQ2_MAP; u++) {
            if (iq2.map[u] >= 0) continue;   /* on the grid (lists written in pass 1 are < 0) */
            int pos[8], d2[256], d1 = 1 << 30, dsec = 1 << 30;
            for (int i = 0; i < 8; i++) pos[i] = 2 * ((u >> (2 * i)) & 3) + 1;
            for (int g = 0; g < 256; g++) {
                int d = 0;
                for (int i = 0; i < 8; i++) d += (iq2.pos[g][i] - pos[i]) * (iq2.pos[g][i] - pos[i]);
                d2[g] = d;
                if (d < d1) { dsec = d1; d1 = d; }
                else if (d > d1 && d < dsec) dsec = d;
            }
            size_t start = at++;
            for (int lvl = 0; lvl < 2; lvl++) {
                const int want = lvl ? dsec : d1;
                for (int g = 0; g < 256; g++)
                    if (d2[g] == want) {
                        if (pass) nb[at] = (uint16_t)g;
                        at++;
                    }
            }
            if (pass) {
                nb[start] = (uint16_t)(at - start - 1);
                iq2.map[u] = -(int32_t)(start + 1);
            }
        }
        if (pass == 0) {
            total = at;
            nb = malloc(total * sizeof *nb);
            if (!nb) return;
        }
    }
    iq2.nb = nb;
    iq2_ok = 1;
}

/* Among u's neighbours, the grid entry with the smallest weighted squared
 * error against xval at `scale` (first on ties); its codes into L. */
static int iq2_best_neighbour(int u, const float *xval, const float *w, float scale, int8_t *L)
{
    const uint16_t *list = iq2.nb + (-iq2.map[u] - 1);
    float best_d2 = 3.40282347e38f;
    int best = list[1];   /* ggml aborts if none is below FLT_MAX; inputs are finite here */
    for (int j = 1; j <= list[0]; j++) {
        const int8_t *pg = iq2.pos[list[j]];
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            float q = pg[i];
            float diff = scale * q - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = list[j];
        }
    }
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((iq2.pos[best][i] - 1) / 2);
    return best;
}

/* Grid entry for the 8 codes L (moved onto the grid when off it). */
static int iq2_on_grid(int8_t *L, const float *xval, const float *w, float scale)
{
    int u = 0;
    for (int i = 0; i < 8; i++) u |= (L[i] & 3) << (2 * i);
    return iq2.map[u] >= 0 ? iq2.map[u] : iq2_best_neighbour(u, xval, w, scale, L);
}

/* quantize_row_iq2_xxs_impl, one 256-block.  Per 32-group: signs taken out
 * (an odd count flips the least important element, since the format
 * stores 7 sign bits per 8 and implies even parity), magnitudes fitted by
 * fit_scale_pos on codes 0..3, then 13 trial scales snapping each 8-group
 * to the grid, the best kept and refitted; finally the group scales coded
 * in 4 bits against the block maximum. */
static void iq2_xxs_block(const float *xbl, const float *qwbl, block_iq2_xxs *y)
{
    const int kMaxQ = 3;
    float scales[8], weight[32], xval[32], waux[32];
    int8_t L[32], Laux[32];
    uint8_t signs[4];
    uint32_t q2[16];
    y->d = ds4_f32_to_f16(0.0f);
    memset(q2, 0, sizeof q2);
    float max_scale = 0;
    float sumx2 = 0;
    for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
    float sigma2 = sumx2 / QK_K;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = xbl + 32 * ib, *qw = qwbl + 32 * ib;
        for (int i = 0; i < 32; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
        for (int k = 0; k < 4; k++) {
            int nflip = 0;
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                if (xb[8 * k + i] >= 0) {
                    xval[8 * k + i] = xb[8 * k + i];
                } else {
                    xval[8 * k + i] = -xb[8 * k + i];
                    nflip++;
                    s |= (uint8_t)(1 << i);
                }
            }
            if (nflip % 2) {
                int im = 0;
                float mn = weight[8 * k] * xb[8 * k] * xb[8 * k];
                for (int i = 1; i < 8; i++) {
                    float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                    if (ax < mn) { mn = ax; im = i; }
                }
                xval[8 * k + im] = -xval[8 * k + im];
                s ^= (uint8_t)(1 << im);
            }
            signs[k] = s & 127;
        }
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (max < EPS_GROUP) {
            scales[ib] = 0;
            continue;
        }
        float scale = fit_scale_pos(32, kMaxQ + 1, xval, (uint8_t *)L, weight);
        float eff_max = scale * kMaxQ;
        if (eff_max <= 0) {
            scales[ib] = 0;
            continue;
        }
        float best = 0;
        for (int is = -6; is <= 6; is++) {
            float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
            float this_scale = 1 / id;
            for (int k = 0; k < 4; k++) {
                for (int i = 0; i < 8; i++) {
                    int l = round_int(0.5f * (id * xval[8 * k + i] - 1));
                    Laux[8 * k + i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
                }
                iq2_on_grid(Laux + 8 * k, xval + 8 * k, waux + 8 * k, this_scale);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < 32; i++) {
                float w = weight[i];
                float q = 2 * Laux[i] + 1;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                memcpy(L, Laux, 32);
            }
        }
        if (scale > 0) {
            float id = 1 / scale;
            for (int k = 0; k < 4; k++) {
                for (int i = 0; i < 8; i++) {
                    int l = round_int(0.5f * (id * xval[8 * k + i] - 1));
                    L[8 * k + i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
                }
                iq2_on_grid(L + 8 * k, xval + 8 * k, waux + 8 * k, scale);
            }
            float sumqx = 0, sumq2 = 0;
            for (int i = 0; i < 32; i++) {
                float w = weight[i];
                float q = 2 * L[i] + 1;
                sumqx += w * xval[i] * q;
                sumq2 += w * q * q;
            }
            if (sumq2 > 0) scale = sumqx / sumq2;
        }
        if (scale < 0) {   /* ggml's guard; keeps the scale code unsigned */
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 4; k++) {
            int u = 0;
            for (int i = 0; i < 8; i++) u |= (L[8 * k + i] & 3) << (2 * i);
            /* every L here is on the grid (snapped above: the trial loop
             * keeps only snapped codes, the refit snaps again); 0 is never
             * used (ggml aborts there) */
            int g = iq2.map[u] >= 0 ? iq2.map[u] : 0;
            q2[2 * ib] |= (uint32_t)g << (8 * k);
            q2[2 * ib + 1] |= (uint32_t)signs[k] << (7 * k);
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        memset(y->qs, 0, sizeof y->qs);
        return;
    }
    float d = max_scale / 31;
    y->d = ds4_f32_to_f16(d);
    float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int l = imax(0, imin(15, round_int(0.5f * (id * scales[ib] - 1))));
        q2[2 * ib + 1] |= (uint32_t)l << 28;
    }
    memcpy(y->qs, q2, sizeof y->qs);
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

void ds4_quantize_default_imatrix(const float *src, int64_t nrow, int64_t n_per_row, float *out)
{
    /* float64 sums in row order, rounded once (how the golden importance
     * matrices were made; a float sum differs in the last bits) */
    for (int64_t c = 0; c < n_per_row; c++) {
        double s = 0.0;
        for (int64_t r = 0; r < nrow; r++) {
            const double v = src[r * n_per_row + c];
            s += v * v;
        }
        out[c] = (float)s;
    }
}

static int all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

size_t ds4_quantize(uint32_t type, const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                    const float *imatrix, const char **err)
{
    const char *dummy;
    if (!err) err = &dummy;
    *err = NULL;
    int64_t blk;
    switch (type) {
    case GGML_Q8_0: case GGML_MXFP4: blk = 32; break;
    case GGML_Q2_K: case GGML_Q4_K: case GGML_IQ2_XXS: blk = QK_K; break;
    default: *err = "unsupported quantization type"; return 0;
    }
    if (nrow < 0 || n_per_row <= 0 || n_per_row % blk) {
        *err = "row length is not a positive multiple of the block size";
        return 0;
    }
    if (type == GGML_IQ2_XXS && !imatrix) {
        *err = "IQ2_XXS needs an importance matrix";
        return 0;
    }
    if (!all_finite(src, (size_t)(nrow * n_per_row))) {
        *err = "input holds NaN or infinity";
        return 0;
    }
    const int uses_imatrix = imatrix && (type == GGML_Q2_K || type == GGML_Q4_K || type == GGML_IQ2_XXS);
    if (uses_imatrix) {
        for (int64_t c = 0; c < n_per_row; c++)
            if (!(imatrix[c] >= 0.0f) || !isfinite(imatrix[c])) {
                *err = "importance matrix holds a negative or non-finite weight";
                return 0;
            }
    }
    if (type == GGML_IQ2_XXS) {
        pthread_once(&iq2_once, iq2_init);
        if (!iq2_ok) {
            *err = "out of memory building the IQ2_XXS tables";
            return 0;
        }
    }
    const size_t rb = (size_t)ggml_row_size(type, (uint64_t)n_per_row);
    const int64_t nb = n_per_row / blk;
    for (int64_t r = 0; r < nrow; r++) {
        const float *x = src + r * n_per_row;
        uint8_t *y = (uint8_t *)dst + (size_t)r * rb;
        switch (type) {
        case GGML_Q8_0: ds4_quantize_q8_0_ref(x, (block_q8_0 *)y, n_per_row); break;
        case GGML_MXFP4: quantize_mxfp4_row(x, (block_mxfp4 *)y, n_per_row); break;
        case GGML_Q2_K:
            for (int64_t b = 0; b < nb; b++) {
                if (imatrix) q2_K_imat(x + b * QK_K, imatrix + b * QK_K, (block_q2_K *)y + b);
                else q2_K_ref(x + b * QK_K, (block_q2_K *)y + b);
            }
            break;
        case GGML_Q4_K:
            for (int64_t b = 0; b < nb; b++) {
                if (imatrix) q4_K_imat(x + b * QK_K, imatrix + b * QK_K, (block_q4_K *)y + b);
                else q4_K_ref(x + b * QK_K, (block_q4_K *)y + b);
            }
            break;
        default:
            for (int64_t b = 0; b < nb; b++) iq2_xxs_block(x + b * QK_K, imatrix + b * QK_K, (block_iq2_xxs *)y + b);
            break;
        }
    }
    return (size_t)nrow * rb;
}
