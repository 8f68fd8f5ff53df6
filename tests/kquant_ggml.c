/*
 * kquant_ggml.c -- ds4's K-quant dequantization against ggml's own, for
 * tests/t_kquant.sh (built there against build/libds4.a; llama.cpp's
 * prebuilt libggml-base.so of node-llama-cpp@3.22.1, bench/llamacpp/
 * setup.sh, is dlopen'ed from the path given as the argument).  Nothing of ggml is linked into ds4 itself.
 *
 * For Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS:
 *  1. the block size and bytes of ggml's type traits equal ds4's type
 *     table (ggml_row_size);
 *  2. random blocks (random bytes, the f16 d / dmin fields set to random
 *     finite halves, subnormals and zero included): ds4_dequantize_row
 *     equals ggml's to_float bit for bit;
 *  3. random rows (several magnitudes, some all-zero or constant
 *     blocks) quantized by ggml's from_float_ref (the reference
 *     quantizer that writes users' files): the two dequantizations agree
 *     bit for bit;
 *  4. ds4's scalar Q8_K dot of those blocks with ds4's Q8_K activations
 *     is within 2e-6 * sum|terms| of the exact (double) dot of the
 *     dequantized values (the bound of quant.h).
 * Prints one line per type and check; exits 1 on any mismatch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

#include "gguf/gguf.h"
#include "kernels/quant.h"

/* ggml's type traits as ggml.h of that release declares them (loaded with
 * dlopen: ds4 has its own ggml_row_size, so the two headers cannot meet). */
typedef void (*to_float_fn)(const void *x, float *y, int64_t k);
typedef void (*from_float_fn)(const float *x, void *y, int64_t k);
struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    to_float_fn to_float;
    from_float_fn from_float_ref;
};
enum { GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
       GGML_TYPE_Q6_K = 14, GGML_TYPE_IQ4_XS = 23 };

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}
static double unif(void) { return (double)(next() >> 11) * 0x1p-53; }
static double gauss(void)
{
    double u = unif() + 1e-300, v = unif();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* a random finite half: every exponent but 31, so subnormals and zeros too */
static uint16_t rand_f16(void)
{
    uint16_t h;
    do h = (uint16_t)next(); while (((h >> 10) & 31) == 31);
    return h;
}

typedef struct { const char *name; uint32_t ds4; int g; size_t d_off, dmin_off; } kq;
#define NONE ((size_t)-1)
static const kq TYPES[] = {
    {"Q2_K", GGML_Q2_K, GGML_TYPE_Q2_K, offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)},
    {"Q3_K", GGML_Q3_K, GGML_TYPE_Q3_K, offsetof(block_q3_K, d), NONE},
    {"Q4_K", GGML_Q4_K, GGML_TYPE_Q4_K, offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)},
    {"Q5_K", GGML_Q5_K, GGML_TYPE_Q5_K, offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)},
    {"Q6_K", GGML_Q6_K, GGML_TYPE_Q6_K, offsetof(block_q6_K, d), NONE},
    {"IQ4_XS", GGML_IQ4_XS, GGML_TYPE_IQ4_XS, offsetof(block_iq4_xs, d), NONE},
};

static int fails;
static void report(int ok, const char *t, const char *what)
{
    printf("%s %s: %s\n", ok ? "ok  " : "FAIL", t, what);
    if (!ok) fails++;
}

static float (*dot_of(uint32_t t))(int, const void *, const void *)
{
    const ds4_kernels *k = ds4_kernels_scalar();
    switch (t) {
    case GGML_Q2_K: return k->q2_K_q8_K;
    case GGML_Q3_K: return k->q3_K_q8_K;
    case GGML_Q4_K: return k->q4_K_q8_K;
    case GGML_Q5_K: return k->q5_K_q8_K;
    case GGML_Q6_K: return k->q6_K_q8_K;
    case GGML_IQ4_XS: return k->iq4_xs_q8_K;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: kquant_ggml LIBGGML_BASE_SO\n"); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "kquant_ggml: %s\n", dlerror()); return 2; }
    const struct ggml_type_traits *(*get_traits)(int);
    *(void **)&get_traits = dlsym(lib, "ggml_get_type_traits");
    if (!get_traits) { fprintf(stderr, "kquant_ggml: no ggml_get_type_traits\n"); return 2; }
    enum { NB = 4096, N = NB * QK_K, ROW = 4096 };
    float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N), *x = malloc(sizeof(float) * N);
    float *act = malloc(sizeof(float) * ROW), *wd = malloc(sizeof(float) * ROW), *ad = malloc(sizeof(float) * ROW);
    uint8_t *q = malloc(300 * (size_t)NB);
    block_q8_K *aq = malloc(sizeof(block_q8_K) * (ROW / QK_K));
    if (!a || !b || !x || !q || !act || !wd || !ad || !aq) return 2;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const kq *t = &TYPES[ti];
        const struct ggml_type_traits *tr = get_traits(t->g);
        const size_t bs = tr->type_size;
        char what[160];
        snprintf(what, sizeof what, "block %lld elements / %zu bytes in ggml, row of 256 = %zu bytes in ds4",
                 (long long)tr->blck_size, bs, ggml_row_size(t->ds4, QK_K));
        report(tr->blck_size == QK_K && ggml_row_size(t->ds4, QK_K) == bs, t->name, what);

        /* 2. random bytes, finite scales */
        for (size_t i = 0; i < bs * NB; i++) q[i] = (uint8_t)next();
        for (int i = 0; i < NB; i++) {
            uint16_t d = rand_f16(), m = rand_f16();
            if (i % 64 == 1) d = (uint16_t)(next() & 0x83ff);   /* subnormal or zero */
            memcpy(q + (size_t)i * bs + t->d_off, &d, 2);
            if (t->dmin_off != NONE) memcpy(q + (size_t)i * bs + t->dmin_off, &m, 2);
        }
        tr->to_float(q, a, N);
        int rc = ds4_dequantize_row(t->ds4, q, b, N);
        snprintf(what, sizeof what, "dequantization of %d random blocks bit-exact with ggml's to_float", NB);
        report(rc == 0 && memcmp(a, b, sizeof(float) * N) == 0, t->name, what);

        /* 3. ggml's reference quantizer on random rows */
        for (int i = 0; i < N; i++) {
            int blk = i / QK_K;
            double scale = ldexp(1.0, (blk % 23) - 12);
            x[i] = blk % 97 == 5 ? 0.0f : blk % 89 == 7 ? 0.75f : (float)(gauss() * scale);
            if (blk % 13 == 3 && i % 17 == 0) x[i] *= 8.0f;          /* outliers */
        }
        tr->from_float_ref(x, q, N);
        tr->to_float(q, a, N);
        rc = ds4_dequantize_row(t->ds4, q, b, N);
        double err = 0, ref = 0;
        for (int i = 0; i < N; i++) { err += (double)(a[i] - x[i]) * (a[i] - x[i]); ref += (double)x[i] * x[i]; }
        snprintf(what, sizeof what, "from_float_ref on %d random rows: dequantization bit-exact with ggml (rel. RMS error %.4f)",
                 NB, sqrt(err / ref));
        report(rc == 0 && memcmp(a, b, sizeof(float) * N) == 0, t->name, what);

        /* 4. the scalar Q8_K dot against the exact one, row by row */
        float (*dot)(int, const void *, const void *) = dot_of(t->ds4);
        double worst = 0;
        int dot_ok = dot != NULL;
        for (int r = 0; dot_ok && r < N / ROW; r++) {
            for (int i = 0; i < ROW; i++) act[i] = (float)gauss();
            ds4_quantize_q8_K(act, aq, ROW);
            const uint8_t *wr = q + (size_t)r * (ROW / QK_K) * bs;
            ds4_dequantize_row(t->ds4, wr, wd, ROW);
            ds4_dequantize_row(GGML_Q8_K, aq, ad, ROW);
            double exact = 0, mag = 0;
            for (int i = 0; i < ROW; i++) { exact += (double)wd[i] * ad[i]; mag += fabs((double)wd[i] * ad[i]); }
            double e = fabs((double)dot(ROW, wr, aq) - exact) / (mag > 0 ? mag : 1);
            if (e > worst) worst = e;
            if (e > 2e-6) dot_ok = 0;
        }
        snprintf(what, sizeof what, "scalar Q8_K dot within 2e-6 of sum|terms| of the exact dot (worst %.2e)", worst);
        report(dot_ok, t->name, what);
    }
    free(a); free(b); free(x); free(q); free(act); free(wd); free(ad); free(aq);
    return fails ? 1 : 0;
}
