/*
 * quant.h -- quantization formats and their dot-product kernels.
 *
 * Owns: the block layouts of F16, BF16, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ2_XXS, IQ4_XS, MXFP4 and Q8_K,
 * row dequantization, activation quantization (Q8_0 and Q8_K), and the dot
 * products of every weight format with quantized and with float
 * activations.  Every kernel has a portable scalar reference; SIMD versions
 * (AVX2/FMA/F16C) sit beside it and are selected at start-up.  Tests compare
 * the two on random data and both against ../shared/golden/quants.
 * Must not: know about models, tensors names or threads.
 */
#ifndef DS4_QUANT_H
#define DS4_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define QK8_0 32
#define QK_K 256

typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;            /* 34 B, ggml */
/* ds4's activation variant of Q8_0: same integers, scale kept in float32
 * (docs/MODEL.md §7.1) so the activation rounding matches the original
 * engine.  Never stored in a GGUF. */
typedef struct { float d; int8_t qs[QK8_0]; } block_q8_0a;              /* 36 B */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4];
                 uint16_t d, dmin; } block_q2_K;                        /* 84 B */
typedef struct { uint16_t d, dmin; uint8_t scales[12];
                 uint8_t qs[QK_K / 2]; } block_q4_K;                    /* 144 B */
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;    /* 66 B */
/* The K-quants of llama.cpp's common mixes (Q3_K_M .. Q6_K; output and
 * token_embd are often Q6_K), laid out exactly as ggml's block_q3_K,
 * block_q5_K, block_q6_K, block_iq4_xs:
 *  Q3_K: 16 groups of 16, q = ((qs >> 2j) & 3) - (hmask bit ? 0 : 4) in
 *        -4..3, 6-bit group scales stored - 32, x = d * (s - 32) * q;
 *  Q5_K: Q4_K plus one high bit per element (qh), x = d*sc*q - dmin*m;
 *  Q6_K: 16 groups of 16, q = (ql nibble | 2 qh bits << 4) - 32, int8
 *        group scales, x = d * s * q;
 *  IQ4_XS: 8 groups of 32, 6-bit scales (- 32), 4-bit indices into the
 *        non-linear table ds4_kvalues_iq4nl, x = d * (s - 32) * kv[q]. */
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4];
                 uint8_t scales[12]; uint16_t d; } block_q3_K;          /* 110 B */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8];
                 uint8_t qs[QK_K / 2]; } block_q5_K;                    /* 176 B */
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4];
                 int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;    /* 210 B */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64];
                 uint8_t qs[QK_K / 2]; } block_iq4_xs;                  /* 136 B */
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K; /* 292 B */

/* MXFP4 (OCP microscaling FP4, ggml type 39): 32 values = one E8M0 scale
 * byte, then 16 bytes of E2M1 codes; byte j holds value j in its low
 * nibble and value j + 16 in its high nibble.  Value = kvalues[code] *
 * 2^(e - 128): ggml keeps the E2M1 table doubled (integers, below) and the
 * scale halved (ds4_e8m0_to_f32_half), so the integer dot kernels pair it
 * with Q8_0 activations exactly as with Q8_0 weights. */
#define QK_MXFP4 32
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;  /* 17 B */
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K");
_Static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K");

/* IQ2_XXS tables (format data, identical to ggml's). */
extern const uint64_t ds4_iq2xxs_grid[256];
extern const uint8_t ds4_iq2xxs_signs[128];
/* The grid as two-bit codes (every grid byte is 8, 25 or 43 -> 0, 1, 2),
 * for the SIMD tables' vpermi2b lookups: 512 bytes, 64-byte aligned, byte
 * e = codes of elements 0..3 of entry e (element i at bits 2i), byte
 * 256 + e = elements 4..7.  Built once, on first use. */
const uint8_t *ds4_iq2xxs_codes(void);

/* E2M1 values doubled: 0, .5, 1, 1.5, 2, 3, 4, 6 (times 2) and their
 * negatives (code 8 is -0, stored as 0).  Format data, as ggml's
 * kvalues_mxfp4. */
extern const int8_t ds4_kvalues_mxfp4[16];
/* IQ4_NL / IQ4_XS non-linear values (format data, as ggml's kvalues_iq4nl). */
extern const int8_t ds4_kvalues_iq4nl[16];

/* 2^(e - 128) as a float, i.e. half the E8M0 scale 2^(e - 127): e = 0 and
 * 1 give the subnormals 2^-128 and 2^-127, e = 255 gives 2^127 (ggml's
 * converter does not treat 255 as NaN either; its quantizer never writes
 * it, and ds4 does not scan expert data at load).  Exact. */
static inline float ds4_e8m0_to_f32_half(uint8_t e)
{
    union { uint32_t u; float f; } v;
    v.u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return v.f;
}

/* IEEE half / bfloat16 conversions (round to nearest even, subnormals kept,
 * overflow to infinity). */
float ds4_f16_to_f32(uint16_t h);
uint16_t ds4_f32_to_f16(float f);
float ds4_bf16_to_f32(uint16_t h);
/* Round a float through half precision and back. */
static inline float ds4_f16_round(float x) { return ds4_f16_to_f32(ds4_f32_to_f16(x)); }

/* Dequantize n elements (n a multiple of the block size) of a ggml type
 * (GGML_F32, F16, BF16, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ4_XS,
 * MXFP4, Q8_K).  Bit-exact with
 * ggml.  Returns 0, or -1 for an unsupported type. */
int ds4_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* 1 when none of the nblocks Q8_0 blocks at w holds the code -128 (the
 * q8_0_q8_0a_tile_sym contract), else 0.  ggml's and ds4's Q8_0 quantizers
 * make codes in [-127, 127]; the format allows -128. */
int ds4_q8_0_sym(const void *w, size_t nblocks);

/* Activation quantizers.  n must be a multiple of the block size.
 * q8_0_ref: d = amax/127, q = roundf(x * (1/d)) (halves away from zero),
 *           fp16 d -- bit-exact with ggml's quantize_row_q8_0_ref.
 * q8_0_even: q = rint(x * (127/amax)) (halves to even), fp16 d -- ggml's
 *           AVX2 activation quantizer.
 * q8_0a:    d = amax/127 kept in float32, q = clamp(rint(x * (1/d)),
 *           -128, 127) -- ds4's rule (docs/MODEL.md §7.1).
 * q8_K:     bit-exact with ggml incl. bsums; an all-zero block gets d = 0,
 *           q = 0 and bsums = 0.  Never produces -128.
 * NaN/inf inputs give unspecified (but in-range) codes. */
void ds4_quantize_q8_0_ref(const float *x, block_q8_0 *y, int64_t n);   /* ggml reference rule */
void ds4_quantize_q8_0_even(const float *x, block_q8_0 *y, int64_t n);  /* ggml AVX2 rule */
void ds4_quantize_q8_0a(const float *x, block_q8_0a *y, int64_t n);     /* ds4 engine rule */
void ds4_quantize_q8_K(const float *x, block_q8_K *y, int64_t n);       /* bit-exact with ggml */

/* Kernel table.  `n` is the row length in elements; `w` one weight row;
 * `a` the quantized activation row (matching block type); `x` a float
 * activation row.  All return the dot product as float.
 * Integer kernels sum each block exactly in integers, then scale in float
 * (K-quant mins through the activation's bsums), as ggml does.  EVERY
 * TABLE GIVES THE SAME BITS (the orders below; docs/NUMERICS.md), so the
 * logits do not depend on the CPU; results are within 2e-6 of sum|terms|
 * of the exact dot.  Q8_K
 * activations must not contain -128 (none of the quantizers above makes
 * it); Q8_0 activations may.  The float-activation kernels use the exact
 * dequantized weights and err by at most (n/32 + 40) * 2^-24 * sum|w_i x_i|.
 * n: multiple of 32 (Q8_0), of 256 (K-quants, IQ2_XXS), any for F32/F16/BF16. */
/* Tile kernel: for r < nrows and j < ntok,
 *     y[j * y_stride + r] = dot(n, w + r * w_stride, a[j])
 * with the activation row of token j at a[j] (a block_q8_0a / block_q8_K
 * row, or a float row for the float kernels).  HARD RULE: every y equals,
 * bit for bit, the single-row kernel of the same table on the same (row,
 * activation) -- whatever nrows, ntok, the tile shapes used inside, or how
 * a caller splits rows and tokens -- because prefill (many tokens) and
 * decode (one token) must give identical logits.  The SIMD kernels keep
 * that by summing every dot in one fixed order (below), independent of the
 * register blocking.  ntok and nrows may be anything >= 0; rows of a tile
 * need not be aligned.  y rows may not overlap the weights or activations. */
typedef void (*ds4_tile_fn)(int n, const void *w, size_t w_stride, int nrows,
                            const void *const *a, int ntok, float *y, size_t y_stride);

/* Summation orders, kept by EVERY table (scalar, avx2, avx512,
 * avx512-packed), single rows and tiles alike; tests/test_kernels.c checks
 * tiles against single rows and every table against the scalar one bit
 * for bit (same bits on every CPU, docs/NUMERICS.md):
 *  - Q8_0 x Q8_0a/Q8_0, Q2_K, IQ2_XXS x Q8_K: every block's integer sum
 *    exact, then the float block term (the scalar kernel's expression,
 *    products and sums rounded separately, no FMA) added to the running
 *    sum in block order, starting from 0;
 *  - Q4_K x Q8_K: per 256-block, isum = sum_j sc_j * S_j and
 *    summ = sum_j m_j * (bsum_2j + bsum_2j+1) in integers, then
 *    sumf += d*(float)isum - dmin*(float)summ with d, dmin = f16(w) * a.d,
 *    in block order (ds4_q4_K_q8_K_blockwise; not ggml's 8-lane order);
 *    Q5_K x Q8_K the same with the 5-bit q;
 *  - Q3_K, Q6_K x Q8_K: per 256-block isum = sum_j s_j * S_j over the 16
 *    groups of 16 (s_j the signed group scale, S_j the exact sum of the
 *    signed q times the activation), IQ4_XS x Q8_K the same over its 8
 *    groups of 32 (kv[q] for q, ls - 32 for s), then
 *    sumf += d * (float)isum with d = f16(w.d) * a.d, in block order;
 *  - float activations (F32/F16/BF16 weights, and the --no-qat kernels of
 *    the quantized formats on their exact dequantized weights): 32 lanes
 *    (element i in lane i mod 32) accumulated with FMA in element order,
 *    leftover groups of 8 into lanes 0..7, the lanes reduced as
 *    ((l0..7 + l8..15) + (l16..23 + l24..31)) then the 8-lane tree
 *    ((0+4)+(2+6))+((1+5)+(3+7)), leftover elements added last one by one
 *    (product and sum rounded separately). */

typedef struct {
    const char *name;                 /* "scalar", "avx2", "avx512" */
    float (*q8_0_q8_0)(int n, const void *w, const void *a);   /* a: block_q8_0 */
    float (*q8_0_q8_0a)(int n, const void *w, const void *a);  /* a: block_q8_0a */
    float (*q2_K_q8_K)(int n, const void *w, const void *a);
    float (*q4_K_q8_K)(int n, const void *w, const void *a);
    float (*iq2_xxs_q8_K)(int n, const void *w, const void *a);
    float (*q3_K_q8_K)(int n, const void *w, const void *a);
    float (*q5_K_q8_K)(int n, const void *w, const void *a);
    float (*q6_K_q8_K)(int n, const void *w, const void *a);
    float (*iq4_xs_q8_K)(int n, const void *w, const void *a);
    /* float activations */
    float (*f32_f32)(int n, const void *w, const float *x);
    float (*f16_f32)(int n, const void *w, const float *x);
    float (*bf16_f32)(int n, const void *w, const float *x);
    float (*q8_0_f32)(int n, const void *w, const float *x);
    float (*q2_K_f32)(int n, const void *w, const float *x);
    float (*q4_K_f32)(int n, const void *w, const float *x);
    float (*iq2_xxs_f32)(int n, const void *w, const float *x);
    float (*q3_K_f32)(int n, const void *w, const float *x);
    float (*q5_K_f32)(int n, const void *w, const float *x);
    float (*q6_K_f32)(int n, const void *w, const float *x);
    float (*iq4_xs_f32)(int n, const void *w, const float *x);
    /* f16 row -> f32 row */
    void (*f16_to_f32_row)(const uint16_t *src, float *dst, int n);
    /* tiles (see ds4_tile_fn); NULL entries are run row by row by callers */
    ds4_tile_fn q8_0_q8_0a_tile;
    /* The same for Q8_0 weights known to hold no -128 code (ggml's and
     * ds4's quantizers make codes in [-127, 127]; the engine checks each
     * tensor at load, ds4_q8_0_sym): the same bits, for tables where that
     * saves work (avx2: one vpsignb a row instead of two).  NULL: callers
     * use q8_0_q8_0a_tile.  Its reference is the scalar q8_0_q8_0a. */
    ds4_tile_fn q8_0_q8_0a_tile_sym;
    ds4_tile_fn q2_K_q8_K_tile;
    ds4_tile_fn q4_K_q8_K_tile;
    ds4_tile_fn iq2_xxs_q8_K_tile;
    ds4_tile_fn q3_K_q8_K_tile;
    ds4_tile_fn q5_K_q8_K_tile;
    ds4_tile_fn q6_K_q8_K_tile;
    ds4_tile_fn iq4_xs_q8_K_tile;
    ds4_tile_fn f32_f32_tile;
    ds4_tile_fn f16_f32_tile;
    /* MXFP4 weights (routed experts): with Q8_0a activations as ggml pairs
     * them with Q8_0, and with float activations (--no-qat).  Every table
     * keeps exactly the scalar order for both -- per 32-block the exact
     * integer sum, then sumf += (float)sumi * (2^(e-128) * a.d) in block
     * order; float activations in the dot_lanes order of quant.c -- so all
     * tables agree bit for bit (tests/test_kernels.c, test_mxfp4). */
    float (*mxfp4_q8_0a)(int n, const void *w, const void *a);
    float (*mxfp4_f32)(int n, const void *w, const float *x);
    ds4_tile_fn mxfp4_q8_0a_tile;
    /* activation quantizers (every matmul input of the engine): each
     * table gives exactly the bytes of ds4_quantize_q8_0a /
     * ds4_quantize_q8_K, the definitions (tests/test_rowops.c compares
     * every table's with them) */
    void (*quantize_q8_0a)(const float *x, block_q8_0a *y, int64_t n);
    void (*quantize_q8_K)(const float *x, block_q8_K *y, int64_t n);
} ds4_kernels;

const ds4_kernels *ds4_kernels_scalar(void);
/* NULL when not compiled in or the CPU lacks AVX2/FMA/F16C. */
const ds4_kernels *ds4_kernels_avx2(void);
/* AVX-512 (F, BW, VL, DQ, VNNI, VBMI, BITALG) + GFNI + F16C/FMA table:
 * packed int8 tiles on vpdpbusd, IQ2_XXS grid expansion with vpermi2b and
 * gf2p8affineqb (quant_vnni.c).  NULL when not compiled in or the CPU/OS
 * lacks any of those. */
const ds4_kernels *ds4_kernels_avx512(void);
/* The avx512 table with the previous decode formulation: 16 rows packed
 * transposed as for batches, instead of the reduction-axis kernels (one
 * token of every integer format, 2..8 tokens of Q8_0).  Same results bit
 * for bit; kept for measurements and tests. */
const ds4_kernels *ds4_kernels_avx512_packed(void);
/* The avx512 table with Intel AMX-INT8 tiles (quant_amx.c) for the batched
 * Q8_0 and MXFP4 x Q8_0a matmuls of DS4_AMX_MIN_TOK / DS4_AMX_MIN_TOK_MXFP4
 * tokens or more and the Q2_K, Q4_K and IQ2_XXS x Q8_K ones from
 * DS4_AMX_MIN_TOK_Q2_K / _Q4_K / _IQ2_XXS tokens; everything else, decode
 * included, is the avx512 table's.  Same results bit for bit.  NULL when
 * the CPU lacks AMX-TILE/AMX-INT8 or the avx512 table, or the kernel
 * refuses the tile state (arch_prctl ARCH_REQ_XCOMP_PERM). */
const ds4_kernels *ds4_kernels_amx(void);
/* Batches below these many tokens run the avx512 tile in the amx table.
 * Measured on a quiet AMX machine (2026-12-04; bench_kernels, one thread,
 * weights from DRAM, expert_up / expert_down / q_b, amx / avx512): Q8_0
 * 0.92-1.10 at 32 tokens, 1.03-1.17 at 48; MXFP4 0.96-1.00 at 48, 1.05-1.09
 * at 64; Q2_K 1.07 at 16, 1.05-1.10 at 24; Q4_K 0.99-1.01 at 32, 1.14-1.18
 * at 48; IQ2_XXS 0.91 at 24, 1.10-1.12 at 32 (docs/PERF_KERNELS.md). */
#define DS4_AMX_MIN_TOK 48
#define DS4_AMX_MIN_TOK_MXFP4 64
#define DS4_AMX_MIN_TOK_Q2_K 16
#define DS4_AMX_MIN_TOK_Q4_K 32
#define DS4_AMX_MIN_TOK_IQ2_XXS 32
/* That threshold for weights of GGML type `type` (DS4_AMX_MIN_TOK for a
 * type without its own). */
int ds4_amx_min_tok(int type);

/* The amx table's Q8_0/MXFP4 tiles write a product's outputs with
 * streaming (non-temporal) stores when its output rows are at least
 * DS4_STREAM_OUT_ROW floats and it has DS4_STREAM_OUT_TOK tokens or more
 * (and its rows fit one K chunk, so the first stores are the last):
 * attn_q_b (32768 outputs a token, 268 MB for a 2048-token chunk) writes
 * each 16-row strip as one 64-byte piece per token row, 128 KB apart, and
 * ordinary stores first read every such line (write-allocate) at full DRAM
 * latency, a third of the product's time on a 2-core AMX machine
 * (docs/PERF_KERNELS.md); outputs of 8192 floats a token (67 MB) measured
 * slower streamed: their reader finds them in the cache.  Bit-identical
 * either way. */
#define DS4_STREAM_OUT_ROW 16384
#define DS4_STREAM_OUT_TOK 256
static inline int ds4_stream_out(const float *y, size_t ys, int ntok)
{
    return ys >= DS4_STREAM_OUT_ROW && ntok >= DS4_STREAM_OUT_TOK && ((uintptr_t)y & 63) == 0 && (ys & 15) == 0;
}

/* dispatch.c: "scalar", "avx2", "avx512", "avx512-packed", "amx" or "best"; NULL when
 * unknown or unavailable here. */
const ds4_kernels *ds4_kernels_by_name(const char *name);
/* The best table for this CPU (the one the engine uses): amx, else avx512,
 * else avx2, else scalar.  DS4_KERNELS=scalar|avx2|avx512|avx512-packed|amx in the
 * environment picks one (ds4_model_load refuses a name that is unknown or
 * unavailable here; other callers get the best table then).  Decided on
 * the first call and cached. */
const ds4_kernels *ds4_kernels_best(void);

/* Q4_K x Q8_K in the blockwise order of the avx512 table (see above);
 * the portable reference of that order. */
float ds4_q4_K_q8_K_blockwise(int n, const void *w, const void *a);

/* The scalar references of the Q3_K, Q5_K, Q6_K and IQ4_XS kernels (the
 * orders above), named so that the SIMD tables can take them for the
 * entries they have no kernel of their own for. */
float ds4_q3_K_q8_K_ref(int n, const void *w, const void *a);
float ds4_q5_K_q8_K_ref(int n, const void *w, const void *a);
float ds4_q6_K_q8_K_ref(int n, const void *w, const void *a);
float ds4_iq4_xs_q8_K_ref(int n, const void *w, const void *a);
float ds4_q3_K_f32_ref(int n, const void *w, const float *x);
float ds4_q5_K_f32_ref(int n, const void *w, const float *x);
float ds4_q6_K_f32_ref(int n, const void *w, const float *x);
float ds4_iq4_xs_f32_ref(int n, const void *w, const float *x);

/* Float-activation dot for any supported weight type (dispatches through
 * the table); returns 0 for unsupported types. */
float ds4_dot_f32act(const ds4_kernels *k, uint32_t type, int n,
                     const void *w, const float *x);

#endif /* DS4_QUANT_H */
