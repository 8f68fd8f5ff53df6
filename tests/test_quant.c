/*
 * test_quant.c -- tests of quant.h: formats, activation quantizers and dot
 * kernels (scalar and AVX2 tables).
 *
 * Owns: (1) the golden checks against ../shared/golden/quants (DS4_SHARED
 * overrides ../shared): IQ2_XXS tables and their sha256, bit-exact
 * dequantization of every `deq` array, bit-exact activation quantizers,
 * dot products within tolerance of the float64 exact values; (2) SIMD
 * against scalar on random data; (3) the weight quantizers of quantize.h
 * byte for byte against every golden `q` array (Q8_0, Q2_K, Q4_K, IQ2_XXS,
 * with and without importance matrix), and MXFP4's against the blocks of
 * ../shared/golden/models/tiny-a-mxfp4.gguf (ggml-made) requantized from
 * their own values.  Prints one summary line; exits non-zero on any failure.
 * Must not: depend on other modules of the engine (only quant.c/h,
 * quantize.c/h, and gguf.h for type ids and to map the MXFP4 model), or
 * write anything.
 */
#include "kernels/quant.h"
#include "kernels/quantize.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

static int failures, checks;

#define CHECK(cond, ...) do { \
        checks++; \
        if (!(cond)) { \
            failures++; \
            if (failures <= 60) { \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
                fprintf(stderr, __VA_ARGS__); \
                fputc('\n', stderr); \
            } \
        } \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Minimal SHA-256 (FIPS 180-4), only to check the table hashes.            */
/* ------------------------------------------------------------------------ */

static uint32_t ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_hex(const uint8_t *msg, size_t len, char out[65])
{
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    };
    uint32_t h[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    size_t total = ((len + 9 + 63) / 64) * 64;
    uint8_t *buf = calloc(1, total);
    memcpy(buf, msg, len);
    buf[len] = 0x80;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) buf[total - 1 - i] = (uint8_t)(bits >> (8 * i));
    for (size_t off = 0; off < total; off += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)buf[off + 4 * i] << 24 | (uint32_t)buf[off + 4 * i + 1] << 16 |
                   (uint32_t)buf[off + 4 * i + 2] << 8 | buf[off + 4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = hh + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
    }
    free(buf);
    for (int i = 0; i < 8; i++) sprintf(out + 8 * i, "%08x", h[i]);
}

/* ------------------------------------------------------------------------ */
/* Golden data: index.tsv and the .bin files.                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    char name[160], file[32], dtype[8];
    long long offset, nbytes;
    int rows, cols;
} entry;

static entry *entries;
static int n_entries;
static char gdir[1024];

typedef struct { char name[32]; uint8_t *data; long long size; } gfile;
static gfile files[16];
static int n_files;

static const uint8_t *file_data(const char *name, long long *size)
{
    for (int i = 0; i < n_files; i++)
        if (strcmp(files[i].name, name) == 0) {
            *size = files[i].size;
            return files[i].data;
        }
    if (n_files == 16) return NULL;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", gdir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz + 64);
    if (!p || fread(p, 1, (size_t)sz, f) != (size_t)sz) { fclose(f); free(p); return NULL; }
    fclose(f);
    gfile *g = &files[n_files++];
    snprintf(g->name, sizeof g->name, "%s", name);
    g->data = p;
    g->size = sz;
    *size = sz;
    return p;
}

static int load_index(void)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/index.tsv", gdir);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[1024];
    int cap = 1024;
    entries = calloc((size_t)cap, sizeof(entry));
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        entry e;
        char shape[64];
        memset(&e, 0, sizeof e);
        if (sscanf(line, "%159s %31s %lld %lld %7s %63s", e.name, e.file, &e.offset, &e.nbytes,
                   e.dtype, shape) != 6)
            continue;
        if (sscanf(shape, "%dx%d", &e.rows, &e.cols) != 2) {
            e.rows = 1;
            e.cols = atoi(shape);
        }
        if (n_entries == cap) {
            cap *= 2;
            entries = realloc(entries, (size_t)cap * sizeof(entry));
        }
        entries[n_entries++] = e;
    }
    fclose(f);
    return n_entries > 0 ? 0 : -1;
}

static const entry *find(const char *name)
{
    for (int i = 0; i < n_entries; i++)
        if (strcmp(entries[i].name, name) == 0) return &entries[i];
    return NULL;
}

static const void *data_of(const entry *e)
{
    long long size;
    const uint8_t *p = file_data(e->file, &size);
    if (!p || e->offset + e->nbytes > size) return NULL;
    return p + e->offset;
}

static const void *get(const char *name, const entry **out)
{
    const entry *e = find(name);
    if (out) *out = e;
    return e ? data_of(e) : NULL;
}

static uint32_t type_of(const char *fmt)
{
    if (!strcmp(fmt, "q8_0")) return GGML_Q8_0;
    if (!strcmp(fmt, "q2_K")) return GGML_Q2_K;
    if (!strcmp(fmt, "q4_K")) return GGML_Q4_K;
    if (!strcmp(fmt, "iq2_xxs")) return GGML_IQ2_XXS;
    if (!strcmp(fmt, "q8_K")) return GGML_Q8_K;
    return 0xffffffffu;
}

static int fmt_index(uint32_t t)
{
    switch (t) {
    case GGML_Q8_0: return 0;
    case GGML_Q2_K: return 1;
    case GGML_Q4_K: return 2;
    case GGML_IQ2_XXS: return 3;
    case GGML_Q3_K: return 5;
    case GGML_Q5_K: return 6;
    case GGML_Q6_K: return 7;
    case GGML_IQ4_XS: return 8;
    default: return 4;
    }
}
static const char *fmt_names[9] = { "Q8_0", "Q2_K", "Q4_K", "IQ2_XXS", "Q8_K", "Q3_K", "Q5_K", "Q6_K", "IQ4_XS" };

/* worst observed errors for the summary, [fmt][0 = int kernels / 1 = f32 act] */
static double max_rel[5][2];
static double max_ratio_f32[5];   /* error / tolerance for float activations */

/* ------------------------------------------------------------------------ */
/* (1) goldens                                                              */
/* ------------------------------------------------------------------------ */

static void test_tables(void)
{
    const entry *eg, *es;
    const uint8_t *g = get("table/iq2xxs_grid", &eg), *s = get("table/iq2xxs_signs", &es);
    CHECK(g && s, "IQ2_XXS tables missing from the goldens");
    if (!g || !s) return;
    CHECK(eg->nbytes == 2048 && es->nbytes == 128, "table sizes");
    uint8_t img[2048];
    for (int i = 0; i < 256; i++)
        for (int b = 0; b < 8; b++) img[8 * i + b] = (uint8_t)(ds4_iq2xxs_grid[i] >> (8 * b));
    CHECK(memcmp(img, g, 2048) == 0, "ds4_iq2xxs_grid differs from table/iq2xxs_grid");
    /* the SIMD tables' two-bit codes give the grid back (so every grid
     * byte is 8, 25 or 43) */
    const uint8_t *codes = ds4_iq2xxs_codes();
    static const unsigned mag[4] = { 8, 25, 43, 0 };
    int code_bad = ((uintptr_t)codes & 63) != 0;
    for (int i = 0; i < 256; i++) {
        unsigned c = codes[i] | (unsigned)codes[256 + i] << 8;
        for (int b = 0; b < 8; b++) code_bad += mag[(c >> (2 * b)) & 3] != ((ds4_iq2xxs_grid[i] >> (8 * b)) & 0xff);
    }
    CHECK(code_bad == 0, "ds4_iq2xxs_codes does not give the grid back (%d)", code_bad);
    CHECK(memcmp(ds4_iq2xxs_signs, s, 128) == 0, "ds4_iq2xxs_signs differs from table/iq2xxs_signs");
    char hex[65];
    sha256_hex(img, 2048, hex);
    CHECK(!strcmp(hex, "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54"), "grid sha256 %s", hex);
    sha256_hex(ds4_iq2xxs_signs, 128, hex);
    CHECK(!strcmp(hex, "a76742a603f8beca5212ecce0f1f02f11a4887fd2f7c8b15aca0ea3eb3380c31"), "signs sha256 %s", hex);
    for (int k = 0; k < 128; k++)
        CHECK(ds4_iq2xxs_signs[k] == (uint8_t)(k | ((__builtin_popcount(k) & 1) << 7)), "sign %d", k);
}

static int n_deq_arrays;

static void test_dequant(void)
{
    for (int i = 0; i < n_entries; i++) {
        const entry *e = &entries[i];
        size_t len = strlen(e->name);
        if (len < 4 || strcmp(e->name + len - 4, "/deq") != 0 || strncmp(e->name, "dot/", 4) == 0)
            continue;
        char qname[200], fmt[32];
        snprintf(qname, sizeof qname, "%.*s/q", (int)(len - 4), e->name);
        sscanf(e->name, "%31[^/]", fmt);
        const entry *eq;
        const uint8_t *q = get(qname, &eq);
        const float *deq = data_of(e);
        uint32_t t = type_of(fmt);
        CHECK(q && deq && t != 0xffffffffu, "missing q for %s", e->name);
        if (!q || !deq || t == 0xffffffffu) continue;
        n_deq_arrays++;
        int rows = e->rows, cols = e->cols;
        long long rb = eq->nbytes / eq->rows;
        float *out = malloc(sizeof(float) * (size_t)cols);
        long long bad = 0;
        for (int r = 0; r < rows; r++) {
            CHECK(ds4_dequantize_row(t, q + r * rb, out, cols) == 0, "dequantize %s", e->name);
            bad += memcmp(out, deq + (size_t)r * cols, sizeof(float) * (size_t)cols) != 0;
        }
        CHECK(bad == 0, "%s: %lld rows not bit-exact", e->name, bad);
        free(out);
    }
    CHECK(n_deq_arrays >= 70, "only %d deq arrays found", n_deq_arrays);
}

static void test_act_quant(void)
{
    static const int ks[3] = { 256, 2048, 4096 };
    for (int ki = 0; ki < 3; ki++) {
        int K = ks[ki];
        char name[128];
        const entry *ea;
        snprintf(name, sizeof name, "act/k%d", K);
        const float *act = get(name, &ea);
        CHECK(act != NULL, "missing %s", name);
        if (!act) continue;

        /* Q8_K */
        snprintf(name, sizeof name, "q8_K/ref/act_k%d/q", K);
        const uint8_t *gk = get(name, NULL);
        CHECK(gk != NULL, "missing %s", name);
        block_q8_K *yk = malloc(sizeof(block_q8_K) * (size_t)(K / QK_K));
        for (int r = 0; gk && r < 6; r++) {
            ds4_quantize_q8_K(act + (size_t)r * K, yk, K);
            for (int b = 0; b < K / QK_K; b++) {
                const uint8_t *g = gk + ((size_t)r * (K / QK_K) + b) * sizeof(block_q8_K);
                /* d and qs always; bsums are don't-care for all-zero blocks */
                size_t cmp = yk[b].d == 0.0f ? 4 + QK_K : sizeof(block_q8_K);
                CHECK(memcmp(&yk[b], g, cmp) == 0, "Q8_K act k%d row %d block %d", K, r, b);
                if (yk[b].d == 0.0f)
                    for (int j = 0; j < 16; j++) CHECK(yk[b].bsums[j] == 0, "zero-block bsums");
            }
        }
        free(yk);

        /* Q8_0, both ggml rules */
        block_q8_0 *y0 = malloc(sizeof(block_q8_0) * (size_t)(K / QK8_0));
        for (int rule = 0; rule < 2; rule++) {
            snprintf(name, sizeof name, "q8_0/%s/act_k%d/q", rule ? "cpu_avx2" : "ref", K);
            const uint8_t *g0 = get(name, NULL);
            CHECK(g0 != NULL, "missing %s", name);
            for (int r = 0; g0 && r < 6; r++) {
                if (rule) ds4_quantize_q8_0_even(act + (size_t)r * K, y0, K);
                else ds4_quantize_q8_0_ref(act + (size_t)r * K, y0, K);
                CHECK(memcmp(y0, g0 + (size_t)r * (K / QK8_0) * sizeof(block_q8_0),
                             sizeof(block_q8_0) * (size_t)(K / QK8_0)) == 0,
                      "%s row %d not bit-exact", name, r);
            }
        }
        free(y0);

        /* Q8_0a (ds4's rule, no golden bytes): d = amax/127 in float32 and
         * q = clamp(rint(x * (1/d))), written here independently; on the
         * `ties` row the halves must round to even. */
        block_q8_0a *ya = malloc(sizeof(block_q8_0a) * (size_t)(K / QK8_0));
        for (int r = 0; r < 6; r++) {
            const float *x = act + (size_t)r * K;
            ds4_quantize_q8_0a(x, ya, K);
            for (int b = 0; b < K / QK8_0; b++) {
                float amax = 0.0f;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                CHECK(memcmp(&ya[b].d, &d, 4) == 0, "Q8_0a d row %d block %d", r, b);
                for (int j = 0; j < 32; j++) {
                    double v = nearbyint((double)(x[32 * b + j] * id));
                    v = v > 127 ? 127 : v < -128 ? -128 : v;
                    CHECK(ya[b].qs[j] == (int8_t)v, "Q8_0a q row %d block %d elem %d", r, b, j);
                }
            }
        }
        /* a tie: 127/64 then 0.5/64 -> d = 1/64, 0.5 -> 0 (even), 1.5 -> 2 */
        float tie[32] = { 127.0f / 64 };
        tie[1] = 0.5f / 64; tie[2] = 1.5f / 64; tie[3] = -2.5f / 64;
        ds4_quantize_q8_0a(tie, ya, 32);
        CHECK(ya[0].qs[0] == 127 && ya[0].qs[1] == 0 && ya[0].qs[2] == 2 && ya[0].qs[3] == -2,
              "Q8_0a ties: %d %d %d %d", ya[0].qs[0], ya[0].qs[1], ya[0].qs[2], ya[0].qs[3]);
        free(ya);
    }

    /* Blocks whose amax is subnormal: 1/d is inexact (or infinite), codes
     * must still follow the formula and stay in range, for every rule. */
    int saw_m128 = 0;
    for (int rep = 0; rep < 2000; rep++) {
        float x[256];
        uint32_t top = 1u + (uint32_t)(rep % 0x7fffff);
        for (int j = 0; j < 256; j++) {
            uint32_t u = (uint32_t)((j * 2654435761u + (uint32_t)rep * 40503u) % (top + 1)) |
                         ((uint32_t)(j & 1) << 31);
            memcpy(&x[j], &u, 4);
        }
        block_q8_0a ya[8];
        block_q8_0 y0[8];
        block_q8_K yk;
        ds4_quantize_q8_0a(x, ya, 256);
        ds4_quantize_q8_0_ref(x, y0, 256);
        ds4_quantize_q8_0_even(x, y0, 256);
        ds4_quantize_q8_K(x, &yk, 256);
        for (int b = 0; b < 8; b++) {
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            for (int j = 0; j < 32; j++) {
                float p = x[32 * b + j] * id;
                double v = p != p ? 0 : nearbyint((double)p);
                v = v > 127 ? 127 : v < -128 ? -128 : v;
                CHECK(ya[b].qs[j] == (int8_t)v, "subnormal Q8_0a rep %d", rep);
                saw_m128 |= ya[b].qs[j] == -128;
            }
        }
        for (int j = 0; j < 256; j++) CHECK(yk.qs[j] != -128, "Q8_K produced -128");
    }
    printf("info: subnormal blocks: Q8_0a produced -128: %s\n", saw_m128 ? "yes" : "no");
}

/* Scale of a float activation row quantized the way a kernel pairs it. */
typedef struct { const ds4_kernels *k; const char *name; } table;

static void test_golden_dots(const table *tabs, int ntabs)
{
    long long nofma_same = 0, nofma_total = 0;
    for (int i = 0; i < n_entries; i++) {
        const entry *e = &entries[i];
        size_t len = strlen(e->name);
        const char *suffix = "/exact_q";
        if (strncmp(e->name, "dot/", 4) != 0 || len < 8 || strcmp(e->name + len - 8, suffix) != 0)
            continue;
        char base[200], fmt[32], variant[32], cas[64], name[256];
        snprintf(base, sizeof base, "%.*s", (int)(len - 8 - 4), e->name + 4);  /* fmt/variant/case */
        if (sscanf(base, "%31[^/]/%31[^/]/%63s", fmt, variant, cas) != 3) continue;
        uint32_t t = type_of(fmt);
        int fi = fmt_index(t);
        const entry *ew;
        snprintf(name, sizeof name, "%s/q", base);
        const uint8_t *wq = get(name, &ew);
#define DOTF(field) (snprintf(name, sizeof name, "dot/%s/%s", base, field), (const double *)get(name, NULL))
        const double *exact_q = DOTF("exact_q"), *abs_q = DOTF("abs_q");
        const double *exact_f = DOTF("exact_f32act"), *abs_f = DOTF("abs_f32act");
        const double *exact_q2 = t == GGML_Q8_0 ? DOTF("exact_q_avx2act") : NULL;
        snprintf(name, sizeof name, "dot/%s/generic_nofma", base);
        const float *nofma = get(name, NULL);
#undef DOTF
        CHECK(wq && exact_q && abs_q && exact_f && abs_f && nofma && (t != GGML_Q8_0 || exact_q2),
              "golden dot arrays of %s", base);
        if (!(wq && exact_q && abs_q && exact_f && abs_f && nofma)) continue;
        int R = ew->rows;
        long long rb = ew->nbytes / R;
        int K = (int)(rb / (t == GGML_Q8_0 ? 34 : t == GGML_Q2_K ? 84 : t == GGML_Q4_K ? 144 : 66)) *
                (t == GGML_Q8_0 ? 32 : 256);
        snprintf(name, sizeof name, "act/k%d", K);
        const float *act = get(name, NULL);
        CHECK(act != NULL, "no activations for K=%d", K);
        if (!act) continue;

        /* activations, quantized by our own (bit-exact) quantizers */
        block_q8_0 *a_ref = malloc(sizeof(block_q8_0) * (size_t)(K / 32) * 6);
        block_q8_0 *a_even = malloc(sizeof(block_q8_0) * (size_t)(K / 32) * 6);
        block_q8_K *a_k = malloc(sizeof(block_q8_K) * (size_t)(K / 256 + 1) * 6);
        for (int a = 0; a < 6; a++) {
            if (t == GGML_Q8_0) {
                ds4_quantize_q8_0_ref(act + (size_t)a * K, a_ref + (size_t)a * (K / 32), K);
                ds4_quantize_q8_0_even(act + (size_t)a * K, a_even + (size_t)a * (K / 32), K);
            } else {
                ds4_quantize_q8_K(act + (size_t)a * K, a_k + (size_t)a * (K / 256), K);
            }
        }
        for (int ti = 0; ti < ntabs; ti++) {
            const ds4_kernels *k = tabs[ti].k;
            for (int r = 0; r < R; r++) {
                const void *w = wq + (size_t)r * rb;
                for (int a = 0; a < 6; a++) {
                    int c = r * 6 + a;
                    float y, y2 = 0.0f;
                    double ex = exact_q[c], ab = abs_q[c];
                    if (t == GGML_Q8_0) {
                        y = k->q8_0_q8_0(K, w, a_ref + (size_t)a * (K / 32));
                        y2 = k->q8_0_q8_0(K, w, a_even + (size_t)a * (K / 32));
                    } else {
                        const void *av = a_k + (size_t)a * (K / 256);
                        y = t == GGML_Q2_K ? k->q2_K_q8_K(K, w, av)
                          : t == GGML_Q4_K ? k->q4_K_q8_K(K, w, av)
                          : k->iq2_xxs_q8_K(K, w, av);
                    }
                    double err = fabs((double)y - ex);
                    if (ab == 0.0) {
                        CHECK(y == 0.0f, "%s %s r%d a%d: abs_q 0 but y = %g", tabs[ti].name, base, r, a, y);
                    } else {
                        CHECK(err <= 2e-6 * ab, "%s %s r%d a%d: y %.9g exact %.9g rel %.3g",
                              tabs[ti].name, base, r, a, y, ex, err / ab);
                        if (err / ab > max_rel[fi][0]) max_rel[fi][0] = err / ab;
                    }
                    if (t == GGML_Q8_0) {
                        double e2 = fabs((double)y2 - exact_q2[c]);
                        if (ab == 0.0) {
                            CHECK(y2 == 0.0f, "%s %s avx2act r%d a%d", tabs[ti].name, base, r, a);
                        } else {
                            CHECK(e2 <= 2e-6 * ab, "%s %s avx2act r%d a%d: y %.9g exact %.9g rel %.3g",
                                  tabs[ti].name, base, r, a, y2, exact_q2[c], e2 / ab);
                            if (e2 / ab > max_rel[fi][0]) max_rel[fi][0] = e2 / ab;
                        }
                    }
                    /* optional strict check: our scalar kernel follows ggml's
                     * generic operation order (informational only, it depends
                     * on the compiler not contracting into FMA) */
                    if (k == ds4_kernels_scalar()) {
                        nofma_total++;
                        nofma_same += memcmp(&y, &nofma[c], 4) == 0;
                    }

                    /* float activations */
                    float yf = ds4_dot_f32act(k, t, K, w, act + (size_t)a * K);
                    double ef = fabs((double)yf - exact_f[c]);
                    double tol = ((double)K / 32 + 40) * 0x1p-24 * abs_f[c];
                    if (abs_f[c] == 0.0) {
                        CHECK(yf == 0.0f, "%s %s f32act r%d a%d: y %g", tabs[ti].name, base, r, a, yf);
                    } else {
                        CHECK(ef <= tol, "%s %s f32act r%d a%d: y %.9g exact %.9g rel %.3g",
                              tabs[ti].name, base, r, a, yf, exact_f[c], ef / abs_f[c]);
                        if (ef / abs_f[c] > max_rel[fi][1]) max_rel[fi][1] = ef / abs_f[c];
                        if (ef / tol > max_ratio_f32[fi]) max_ratio_f32[fi] = ef / tol;
                    }
                }
            }
        }

        /* Q8_0 x Q8_0a: no golden, exact value computed here in float64 */
        if (t == GGML_Q8_0) {
            block_q8_0a *aa = malloc(sizeof(block_q8_0a) * (size_t)(K / 32));
            float *wd = malloc(sizeof(float) * (size_t)K);
            for (int r = 0; r < R; r++) {
                const void *w = wq + (size_t)r * rb;
                ds4_dequantize_row(GGML_Q8_0, w, wd, K);
                for (int a = 0; a < 6; a++) {
                    ds4_quantize_q8_0a(act + (size_t)a * K, aa, K);
                    double ex = 0, ab = 0;
                    for (int j = 0; j < K; j++) {
                        double v = (double)wd[j] * ((double)aa[j / 32].d * aa[j / 32].qs[j % 32]);
                        ex += v;
                        ab += fabs(v);
                    }
                    for (int ti = 0; ti < ntabs; ti++) {
                        float y = tabs[ti].k->q8_0_q8_0a(K, w, aa);
                        double err = fabs((double)y - ex);
                        CHECK(ab == 0.0 ? y == 0.0f : err <= 2e-6 * ab,
                              "%s %s q8_0a r%d a%d: y %.9g exact %.9g", tabs[ti].name, base, r, a, y, ex);
                        if (ab > 0 && err / ab > max_rel[0][0]) max_rel[0][0] = err / ab;
                    }
                }
            }
            free(aa);
            free(wd);
        }
        free(a_ref);
        free(a_even);
        free(a_k);
    }
    printf("info: scalar integer kernels equal ggml generic_nofma bit-for-bit on %lld of %lld golden dots\n",
           nofma_same, nofma_total);
}

/* ------------------------------------------------------------------------ */
/* (2) SIMD vs scalar on random data                                        */
/* ------------------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double urand(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static double nrand(void)
{
    double u = urand() + 1e-300, v = urand();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* An fp16 scale from a mix of regimes: typical, tiny normal, subnormal,
 * zero, the largest finite, random exponent. */
static uint16_t rand_scale(void)
{
    switch (rnd() % 10) {
    case 0: return 0;
    case 1: return (uint16_t)(1 + rnd() % 0x3ff);                  /* subnormal */
    case 2: return 0x7bff;                                          /* 65504 */
    case 3: return (uint16_t)(0x0400 + rnd() % 0x400);             /* smallest normals */
    case 4: return (uint16_t)((rnd() % 0x7c00) | (rnd() & 0x8000)); /* any finite, any sign */
    default: return ds4_f32_to_f16((float)(0.001 + 0.05 * urand()));
    }
}

static void rand_bytes(void *p, size_t n)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
}

/* Random weight row of n elements for a type (raw random codes and scales). */
static void rand_weights(uint32_t t, void *w, int n)
{
    switch (t) {
    case GGML_Q8_0: {
        block_q8_0 *b = w;
        for (int i = 0; i < n / 32; i++) {
            b[i].d = rand_scale();
            rand_bytes(b[i].qs, 32);
            if (rnd() % 16 == 0) memset(b[i].qs, 0, 32);
            if (rnd() % 16 == 0) memset(b[i].qs, 0x80, 32);      /* all -128 */
        }
        break;
    }
    case GGML_Q2_K: {
        block_q2_K *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].scales, 16);
            rand_bytes(b[i].qs, 64);
            b[i].d = rand_scale();
            b[i].dmin = rand_scale();
        }
        break;
    }
    case GGML_Q4_K: {
        block_q4_K *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].scales, 12);
            rand_bytes(b[i].qs, 128);
            b[i].d = rand_scale();
            b[i].dmin = rand_scale();
        }
        break;
    }
    case GGML_IQ2_XXS: {
        block_iq2_xxs *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].qs, 64);
            b[i].d = rand_scale();
        }
        break;
    }
    case GGML_Q3_K: {
        block_q3_K *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].hmask, 32);
            rand_bytes(b[i].qs, 64);
            rand_bytes(b[i].scales, 12);
            b[i].d = rand_scale();
        }
        break;
    }
    case GGML_Q5_K: {
        block_q5_K *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].scales, 12);
            rand_bytes(b[i].qh, 32);
            rand_bytes(b[i].qs, 128);
            b[i].d = rand_scale();
            b[i].dmin = rand_scale();
        }
        break;
    }
    case GGML_Q6_K: {
        block_q6_K *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].ql, 128);
            rand_bytes(b[i].qh, 64);
            rand_bytes(b[i].scales, 16);
            b[i].d = rand_scale();
        }
        break;
    }
    case GGML_IQ4_XS: {
        block_iq4_xs *b = w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].qs, 128);
            rand_bytes(b[i].scales_l, 4);
            b[i].scales_h = (uint16_t)rnd();
            b[i].d = rand_scale();
        }
        break;
    }
    }
}

/* Random activation row: blocks of varying magnitude (1e-20 .. 1e4), with
 * zero blocks, ties and outliers mixed in. */
static void rand_act(float *x, int n)
{
    for (int b = 0; b < n; b += 32) {
        double scale = pow(10.0, -20.0 + 24.0 * urand());
        int kind = (int)(rnd() % 8);
        for (int j = 0; j < 32 && b + j < n; j++) {
            double v = nrand() * scale;
            if (kind == 0) v = 0;
            if (kind == 1) v = j == 0 ? 127.0 / 64 : (j - 16.5) / 64;   /* ties */
            if (kind == 2 && rnd() % 20 == 0) v *= 100;
            if (kind == 3 && rnd() % 2) v = 0;
            x[b + j] = (float)v;
        }
    }
}

static size_t row_bytes(uint32_t t, int n)
{
    switch (t) {
    case GGML_Q8_0: return (size_t)n / 32 * sizeof(block_q8_0);
    case GGML_Q2_K: return (size_t)n / 256 * sizeof(block_q2_K);
    case GGML_Q4_K: return (size_t)n / 256 * sizeof(block_q4_K);
    case GGML_IQ2_XXS: return (size_t)n / 256 * sizeof(block_iq2_xxs);
    case GGML_Q3_K: return (size_t)n / 256 * sizeof(block_q3_K);
    case GGML_Q5_K: return (size_t)n / 256 * sizeof(block_q5_K);
    case GGML_Q6_K: return (size_t)n / 256 * sizeof(block_q6_K);
    case GGML_IQ4_XS: return (size_t)n / 256 * sizeof(block_iq4_xs);
    case GGML_F32: return (size_t)n * 4;
    default: return (size_t)n * 2;
    }
}

static double max_simd_rel[9];

static void check_int(const ds4_kernels *s, const ds4_kernels *v, uint32_t t, int n,
                      const void *w, const void *a, int act_kind)
{
    /* float64 reference from the exact dequantized values */
    float *wd = malloc(sizeof(float) * (size_t)n);
    ds4_dequantize_row(t, w, wd, n);
    double ex = 0, ab = 0;
    for (int j = 0; j < n; j++) {
        double av;
        if (act_kind == 0) { const block_q8_K *q = a; av = (double)q[j / 256].d * q[j / 256].qs[j % 256]; }
        else if (act_kind == 1) { const block_q8_0 *q = a; av = (double)ds4_f16_to_f32(q[j / 32].d) * q[j / 32].qs[j % 32]; }
        else { const block_q8_0a *q = a; av = (double)q[j / 32].d * q[j / 32].qs[j % 32]; }
        ex += (double)wd[j] * av;
        ab += fabs((double)wd[j] * av);
    }
    float ys, yv;
    switch (t) {
    case GGML_Q8_0:
        ys = act_kind == 1 ? s->q8_0_q8_0(n, w, a) : s->q8_0_q8_0a(n, w, a);
        yv = act_kind == 1 ? v->q8_0_q8_0(n, w, a) : v->q8_0_q8_0a(n, w, a);
        break;
    case GGML_Q2_K: ys = s->q2_K_q8_K(n, w, a); yv = v->q2_K_q8_K(n, w, a); break;
    case GGML_Q4_K: ys = s->q4_K_q8_K(n, w, a); yv = v->q4_K_q8_K(n, w, a); break;
    case GGML_Q3_K: ys = s->q3_K_q8_K(n, w, a); yv = v->q3_K_q8_K(n, w, a); break;
    case GGML_Q5_K: ys = s->q5_K_q8_K(n, w, a); yv = v->q5_K_q8_K(n, w, a); break;
    case GGML_Q6_K: ys = s->q6_K_q8_K(n, w, a); yv = v->q6_K_q8_K(n, w, a); break;
    case GGML_IQ4_XS: ys = s->iq4_xs_q8_K(n, w, a); yv = v->iq4_xs_q8_K(n, w, a); break;
    default: ys = s->iq2_xxs_q8_K(n, w, a); yv = v->iq2_xxs_q8_K(n, w, a); break;
    }
    int fi = fmt_index(t);
    if (ab == 0.0) {
        CHECK(ys == 0.0f && yv == 0.0f, "random %s n=%d: zero terms, y %g %g", fmt_names[fi], n, ys, yv);
    } else {
        double es = fabs(ys - ex) / ab, ev = fabs(yv - ex) / ab, esv = fabs((double)ys - yv) / ab;
        CHECK(isfinite(ys) && isfinite(yv) && es <= 2e-6 && ev <= 2e-6 && esv <= 2e-6,
              "random %s n=%d act%d: scalar %.9g avx2 %.9g exact %.9g (rel %.3g %.3g)",
              fmt_names[fi], n, act_kind, ys, yv, ex, es, ev);
        if (esv > max_simd_rel[fi]) max_simd_rel[fi] = esv;
    }
    free(wd);
}

static double max_simd_f32_ratio;

static void check_f32(const ds4_kernels *s, const ds4_kernels *v, uint32_t t, int n,
                      const void *w, const float *x)
{
    float *wd = malloc(sizeof(float) * (size_t)n);
    ds4_dequantize_row(t, w, wd, n);
    double ex = 0, ab = 0;
    for (int j = 0; j < n; j++) {
        ex += (double)wd[j] * x[j];
        ab += fabs((double)wd[j] * x[j]);
    }
    float ys = ds4_dot_f32act(s, t, n, w, x), yv = ds4_dot_f32act(v, t, n, w, x);
    double tol = ((double)n / 32 + 40) * 0x1p-24 * ab;
    if (ab == 0.0) {
        CHECK(ys == 0.0f && yv == 0.0f, "random f32act type %u n=%d zero", t, n);
    } else {
        CHECK(fabs(ys - ex) <= tol && fabs(yv - ex) <= tol,
              "random f32act type %u n=%d: scalar %.9g avx2 %.9g exact %.9g", t, n, ys, yv, ex);
        double r = fmax(fabs(ys - ex), fabs(yv - ex)) / tol;
        if (r > max_simd_f32_ratio) max_simd_f32_ratio = r;
    }
    free(wd);
}

/* The float kernels must see exactly the dequantized values: with a one-hot
 * x, the dot is the weight itself. */
static void check_onehot(const ds4_kernels *k, uint32_t t, int n, const void *w)
{
    float *wd = malloc(sizeof(float) * (size_t)n), *x = calloc((size_t)n, sizeof(float));
    ds4_dequantize_row(t, w, wd, n);
    long long bad = 0;
    for (int j = 0; j < n; j++) {
        x[j] = 1.0f;
        float y = ds4_dot_f32act(k, t, n, w, x);
        x[j] = 0.0f;
        bad += !(y == wd[j]);
    }
    CHECK(bad == 0, "%s: type %u in-kernel dequantization differs at %lld of %d", k->name, t, bad, n);
    free(wd);
    free(x);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif

static void test_f16(const ds4_kernels *v)
{
    static uint16_t h[65536];
    static float a[65536], b[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    ds4_kernels_scalar()->f16_to_f32_row(h, a, 65536);
    long long bad = 0, bad_rt = 0;
    for (int i = 0; i < 65536; i++) {
        float f = ds4_f16_to_f32(h[i]);
        bad += memcmp(&f, &a[i], 4) != 0;
        /* round trip is the identity for every half (NaNs are already quiet
         * unless their quiet bit was clear) */
        uint16_t back = ds4_f32_to_f16(f);
        int isnan_h = (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff);
        bad_rt += isnan_h ? back != (h[i] | 0x200) : back != h[i];
    }
    CHECK(bad == 0, "scalar f16 row conversion differs from ds4_f16_to_f32 (%lld)", bad);
    CHECK(bad_rt == 0, "f16 round trip fails on %lld halves", bad_rt);
    /* a few exact values */
    CHECK(ds4_f16_to_f32(0x0001) == 0x1p-24f && ds4_f16_to_f32(0x3c00) == 1.0f &&
          ds4_f16_to_f32(0x7bff) == 65504.0f && ds4_f16_to_f32(0xc000) == -2.0f, "f16 values");
    CHECK(ds4_f32_to_f16(65520.0f) == 0x7c00 && ds4_f32_to_f16(65519.99f) == 0x7bff &&
          ds4_f32_to_f16(0x1p-25f) == 0 && ds4_f32_to_f16(0x1.000002p-25f) == 1 &&
          ds4_f32_to_f16(0x3p-25f) == 2, "f32->f16 rounding edges");
    CHECK(ds4_bf16_to_f32(0x3f80) == 1.0f && ds4_bf16_to_f32(0xc040) == -3.0f, "bf16");
    if (v) {
        v->f16_to_f32_row(h, b, 65536);
        CHECK(memcmp(a, b, sizeof a) == 0, "avx2 f16 row conversion differs from scalar");
        /* unaligned start and odd tails */
        for (int off = 0; off < 9; off++) {
            float c[40];
            v->f16_to_f32_row(h + 1000 + off, c, 40 - off);
            CHECK(memcmp(c, a + 1000 + off, sizeof(float) * (size_t)(40 - off)) == 0, "f16 row tail %d", off);
        }
    }
#if defined(__x86_64__) || defined(__i386__)
    if (v) {   /* the AVX2 table is only handed out when F16C is present */
        long long badc = 0;
        for (int i = 0; i < 2000000; i++) {
            uint32_t u = (uint32_t)rnd();
            if (i & 1) u = (u & 0x8fffffffu) | 0x30000000u;   /* the half range and around it */
            if (i % 7 == 0) u = ((uint32_t)(rnd() % 0x7fffff) & ~0x1fffu) | 0x1000u | (u & 0xff800000u); /* ties */
            float f;
            memcpy(&f, &u, 4);
            badc += ds4_f32_to_f16(f) != hw_f32_to_f16(f);
        }
        /* every half's neighbourhood: the value, the midpoints */
        for (int i = 0; i < 65536; i++) {
            float f = a[i];
            if (f != f) continue;
            uint32_t u;
            memcpy(&u, &f, 4);
            for (int dlt = -2; dlt <= 2; dlt++) {
                uint32_t w = u + (uint32_t)(dlt * 0x1000);
                float g;
                memcpy(&g, &w, 4);
                badc += ds4_f32_to_f16(g) != hw_f32_to_f16(g);
            }
        }
        CHECK(badc == 0, "ds4_f32_to_f16 differs from F16C on %lld inputs", badc);
    }
#endif
}

static void test_random(const ds4_kernels *v)
{
    const ds4_kernels *s = ds4_kernels_scalar();
    static const uint32_t kt[7] = { GGML_Q2_K, GGML_Q4_K, GGML_IQ2_XXS, GGML_Q3_K, GGML_Q5_K, GGML_Q6_K,
                                    GGML_IQ4_XS };
    uint8_t *w = malloc(row_bytes(GGML_F32, 4096) + 64);
    float *x = malloc(sizeof(float) * 4096);
    block_q8_K *ak = malloc(sizeof(block_q8_K) * 16);
    block_q8_0 *a0 = malloc(sizeof(block_q8_0) * 128);
    block_q8_0a *aa = malloc(sizeof(block_q8_0a) * 128);

    /* K-quant kernels: every row length 256..4096 */
    for (int ti = 0; ti < 7; ti++) {
        for (int n = 256; n <= 4096; n += 256) {
            for (int rep = 0; rep < 6; rep++) {
                rand_weights(kt[ti], w, n);
                rand_act(x, n);
                ds4_quantize_q8_K(x, ak, n);
                check_int(s, v, kt[ti], n, w, ak, 0);
                check_f32(s, v, kt[ti], n, w, x);
            }
        }
        /* a long run of single blocks */
        for (int rep = 0; rep < 2000; rep++) {
            rand_weights(kt[ti], w, 256);
            rand_act(x, 256);
            ds4_quantize_q8_K(x, ak, 256);
            check_int(s, v, kt[ti], 256, w, ak, 0);
        }
        for (int rep = 0; rep < 4; rep++) {
            rand_weights(kt[ti], w, 512);
            check_onehot(s, kt[ti], 512, w);
            check_onehot(v, kt[ti], 512, w);
        }
    }
    /* Q8_0: every multiple of 32 up to 4096 */
    for (int n = 32; n <= 4096; n += 32) {
        for (int rep = 0; rep < 2; rep++) {
            rand_weights(GGML_Q8_0, w, n);
            rand_act(x, n);
            if (rep) ds4_quantize_q8_0_even(x, a0, n);
            else ds4_quantize_q8_0_ref(x, a0, n);
            check_int(s, v, GGML_Q8_0, n, w, a0, 1);
            ds4_quantize_q8_0a(x, aa, n);
            check_int(s, v, GGML_Q8_0, n, w, aa, 2);
            check_f32(s, v, GGML_Q8_0, n, w, x);
        }
    }
    /* raw int8 activations including -128 (exercises the SIMD fallback) */
    for (int rep = 0; rep < 300; rep++) {
        int n = 32 * (1 + (int)(rnd() % 128));
        rand_weights(GGML_Q8_0, w, n);
        for (int b = 0; b < n / 32; b++) {
            rand_bytes(aa[b].qs, 32);
            aa[b].d = (float)(urand() * 0.01);
            a0[b].d = ds4_f32_to_f16(aa[b].d);
            memcpy(a0[b].qs, aa[b].qs, 32);
        }
        check_int(s, v, GGML_Q8_0, n, w, a0, 1);
        check_int(s, v, GGML_Q8_0, n, w, aa, 2);
    }
    for (int rep = 0; rep < 4; rep++) {
        rand_weights(GGML_Q8_0, w, 256);
        check_onehot(s, GGML_Q8_0, 256, w);
        check_onehot(v, GGML_Q8_0, 256, w);
    }
    /* F32 / F16 / BF16: any length */
    for (int rep = 0; rep < 400; rep++) {
        int n = rep < 300 ? 1 + (int)(rnd() % 700) : 4096;
        float *wf = (float *)w;
        uint16_t *wh = (uint16_t *)w;
        rand_act(x, n);
        for (int j = 0; j < n; j++) wf[j] = (float)(nrand() * 0.05);
        check_f32(s, v, GGML_F32, n, w, x);
        for (int j = 0; j < n; j++) wh[j] = ds4_f32_to_f16((float)(nrand() * 0.05));
        check_f32(s, v, GGML_F16, n, w, x);
        for (int j = 0; j < n; j++) { /* bf16 of weight-like values: truncated float bits */
            float f = (float)(nrand() * 0.05);
            uint32_t u;
            memcpy(&u, &f, 4);
            wh[j] = (uint16_t)(u >> 16);
        }
        check_f32(s, v, GGML_BF16, n, w, x);
    }
    {
        uint16_t *wh = (uint16_t *)w;
        for (int j = 0; j < 300; j++) wh[j] = (uint16_t)(rnd() & 0x7bff);
        check_onehot(s, GGML_F16, 300, w);
        check_onehot(v, GGML_F16, 300, w);
        check_onehot(v, GGML_BF16, 300, w);
        check_onehot(v, GGML_F32, 300, w);
    }
    free(w);
    free(x);
    free(ak);
    free(a0);
    free(aa);
}

static void test_dispatch(void)
{
    const ds4_kernels *s = ds4_kernels_scalar();
    CHECK(s && !strcmp(s->name, "scalar"), "scalar table");
    const ds4_kernels *v = ds4_kernels_avx2();
    CHECK(!v || !strcmp(v->name, "avx2"), "avx2 table name");
    /* best() caches its answer, so each setting is checked in a child */
    static const char *env[] = { NULL, "scalar", "avx512-packed" };
    for (int mode = 0; mode < 3; mode++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (env[mode]) setenv("DS4_KERNELS", env[mode], 1);
            else unsetenv("DS4_KERNELS");
            const ds4_kernels *b = ds4_kernels_best();
            const ds4_kernels *am = ds4_kernels_amx(), *x = ds4_kernels_avx512();   /* preferred when present */
            const ds4_kernels *best = am ? am : x ? x : v ? v : s;
            const ds4_kernels *want = mode == 0 ? best : mode == 1 ? s
                                    : ds4_kernels_avx512_packed() ? ds4_kernels_avx512_packed() : best;
            _exit(b == want ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ds4_kernels_best with DS4_KERNELS=%s",
              env[mode] ? env[mode] : "(unset)");
    }
    CHECK(ds4_kernels_by_name("avx512-packed") == ds4_kernels_avx512_packed(), "by name: avx512-packed");
    CHECK(ds4_kernels_by_name("amx") == ds4_kernels_amx(), "by name: amx");
    CHECK(!ds4_kernels_amx() || (!strcmp(ds4_kernels_amx()->name, "amx") && ds4_kernels_avx512()),
          "amx table: named, and only beside the avx512 table it falls back to");
    CHECK(ds4_kernels_by_name("no-such-table") == NULL, "by name: unknown table");
    CHECK(ds4_dequantize_row(GGML_I32, "", NULL, 0) == -1, "unsupported type must fail");
    float x[32] = { 0 };
    CHECK(ds4_dot_f32act(s, GGML_I32, 32, x, x) == 0.0f, "unsupported f32act type");
}

/* ------------------------------------------------------------------------ */
/* (3) weight quantizers                                                    */
/* ------------------------------------------------------------------------ */

static int n_quant_arrays;

static void test_quantizers(void)
{
    long long rows_total = 0, rows_bad = 0;
    for (int i = 0; i < n_entries; i++) {
        const entry *e = &entries[i];
        char fmt[32], variant[32], cas[64], name[256];
        size_t len = strlen(e->name);
        if (strncmp(e->name, "dot/", 4) == 0 || len < 2 || strcmp(e->name + len - 2, "/q") != 0) continue;
        if (sscanf(e->name, "%31[^/]/%31[^/]/%63[^/]", fmt, variant, cas) != 3 || strncmp(cas, "act_", 4) == 0)
            continue;
        uint32_t t = type_of(fmt);
        if (t == GGML_Q8_K) continue;   /* an activation format (quant.h) */
        const entry *ex, *eim = NULL;
        snprintf(name, sizeof name, "x/%s", cas);
        const float *x = get(name, &ex);
        const float *imat = NULL;
        if (!strcmp(variant, "imat")) {
            snprintf(name, sizeof name, "imatrix/%s", cas);
            imat = get(name, &eim);
        }
        const uint8_t *q = data_of(e);
        CHECK(x && q && (strcmp(variant, "imat") || imat), "inputs of %s", e->name);
        if (!x || !q || (!strcmp(variant, "imat") && !imat)) continue;
        const int R = ex->rows, K = ex->cols;
        const long long rb = e->nbytes / e->rows;
        CHECK(e->rows == R && (long long)ggml_row_size(t, (uint64_t)K) == rb, "%s shape", e->name);
        uint8_t *out = malloc((size_t)(rb * R));
        const char *err = NULL;
        size_t got = ds4_quantize(t, x, out, R, K, imat, &err);
        CHECK(got == (size_t)(rb * R), "%s: ds4_quantize returned %zu (%s)", e->name, got, err ? err : "");
        long long bad = 0;
        for (int r = 0; got && r < R; r++) bad += memcmp(out + r * rb, q + r * rb, (size_t)rb) != 0;
        CHECK(bad == 0, "%s: %lld of %d rows differ from ggml's bytes", e->name, bad, R);
        rows_total += R;
        rows_bad += bad;
        n_quant_arrays++;
        /* ds4's fallback importance (sum of squares over the case's rows)
         * is what the normal / uniform / heavy cases were made with */
        if (imat && (strstr(cas, "normal") || strstr(cas, "uniform") || strstr(cas, "heavy"))) {
            float *im = malloc(sizeof(float) * (size_t)K);
            ds4_quantize_default_imatrix(x, R, K, im);
            CHECK(memcmp(im, imat, sizeof(float) * (size_t)K) == 0, "default imatrix of %s differs", cas);
            free(im);
        }
        free(out);
    }
    CHECK(n_quant_arrays == 66, "%d golden q arrays of Q8_0/Q2_K/Q4_K/IQ2_XXS found, expected 66", n_quant_arrays);
    printf("info: quantizers: %lld of %lld golden rows byte-identical over %d arrays\n", rows_total - rows_bad,
           rows_total, n_quant_arrays);

    /* bad input: a clear refusal, nothing written */
    float x[256] = { 0 }, im[256];
    uint8_t out[300];
    const char *err = NULL;
    for (int i = 0; i < 256; i++) im[i] = 1.0f;
    memset(out, 0xa5, sizeof out);
    CHECK(ds4_quantize(GGML_IQ2_XXS, x, out, 1, 256, NULL, &err) == 0 && err && out[0] == 0xa5,
          "IQ2_XXS without imatrix must be refused");
    CHECK(ds4_quantize(GGML_Q4_K, x, out, 1, 96, NULL, &err) == 0 && err, "row length 96 for Q4_K");
    CHECK(ds4_quantize(GGML_F16, x, out, 1, 256, NULL, &err) == 0 && err, "unsupported type");
    x[7] = NAN;
    CHECK(ds4_quantize(GGML_Q2_K, x, out, 1, 256, NULL, &err) == 0 && err && out[0] == 0xa5, "NaN input");
    x[7] = 0.0f;
    im[3] = -1.0f;
    CHECK(ds4_quantize(GGML_Q2_K, x, out, 1, 256, im, &err) == 0 && err, "negative importance");
    im[3] = 1.0f;
    /* all zeros: every format gives zero blocks (IQ2_XXS: d = 0) */
    static const uint32_t ts[5] = { GGML_Q8_0, GGML_Q2_K, GGML_Q4_K, GGML_IQ2_XXS, GGML_MXFP4 };
    for (int k = 0; k < 5; k++) {
        size_t n = ds4_quantize(ts[k], x, out, 1, 256, im, &err);
        float back[256];
        CHECK(n == ggml_row_size(ts[k], 256) && ds4_dequantize_row(ts[k], out, back, 256) == 0, "zeros type %u", ts[k]);
        int nz = 0;
        for (int i = 0; i < 256; i++) nz += back[i] != 0.0f;
        CHECK(nz == 0, "zeros type %u: %d nonzero values back", ts[k], nz);
    }
}

/* MXFP4: no golden quant vectors; ggml's own quantizer made the routed
 * experts of tiny-a-mxfp4.gguf.  Requantizing a block's dequantized
 * values must give back its bytes (amax = (max code) * 2^(e-128) gives
 * the same e, every value sits exactly on a table point, and code 8 (-0)
 * never occurs: ggml picks 0 first).  Plus ggml's rounding rules on chosen
 * values: midpoints go to the first (smaller-index) code. */
static void test_mxfp4_quantizer(const char *shared)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-mxfp4.gguf", shared);
    char *err = NULL;
    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "open %s: %s", path, err ? err : "");
    free(err);
    long long blocks = 0, bad = 0, tensors = 0;
    for (uint64_t ti = 0; f && ti < f->n_tensors; ti++) {
        const gguf_tensor *t = &f->tensors[ti];
        if (t->type != GGML_MXFP4) continue;
        tensors++;
        const uint64_t n = t->nbytes / sizeof(block_mxfp4) * QK_MXFP4;
        float *v = malloc(sizeof(float) * n);
        uint8_t *back = malloc(t->nbytes);
        ds4_dequantize_row(GGML_MXFP4, t->data, v, (int64_t)n);
        const char *qerr = NULL;
        size_t got = ds4_quantize(GGML_MXFP4, v, back, (int64_t)(n / t->ne[0]), (int64_t)t->ne[0], NULL, &qerr);
        CHECK(got == t->nbytes, "%s: requantize (%s)", t->name, qerr ? qerr : "");
        for (uint64_t b = 0; got && b < t->nbytes / sizeof(block_mxfp4); b++)
            bad += memcmp(back + b * 17, (const uint8_t *)t->data + b * 17, 17) != 0;
        blocks += (long long)(t->nbytes / sizeof(block_mxfp4));
        free(v);
        free(back);
    }
    CHECK(tensors == 18 && bad == 0, "MXFP4: %lld of %lld blocks of %lld tensors differ after requantization", bad,
          blocks, tensors);
    if (f) gguf_close(f);

    /* amax 6 -> e = floor(log2 6) - 2 + 127 = 127, d = 0.5: doubled codes
     * 0..12 are 0..6; midpoints go to the first code: 0.25 (0 | 0.5) -> 0,
     * -0.25 (0 | -0.5) -> 0, 2.5 (2 | 3) -> 4, -5 (-4 | -6) -> 14; signed
     * tiny values -> 0, never 8 (-0) */
    float x[32] = { 6.0f, 0.25f, -0.25f, 2.5f, -5.0f, 1e-30f, -1e-30f, 0.75f };
    block_mxfp4 b;
    CHECK(ds4_quantize(GGML_MXFP4, x, &b, 1, 32, NULL, NULL) == 17, "mxfp4 quantize");
    int codes[8];
    for (int j = 0; j < 8; j++) codes[j] = b.qs[j] & 15;
    CHECK(b.e == 127 && codes[0] == 7 && codes[1] == 0 && codes[2] == 0 && codes[3] == 4 && codes[4] == 14 &&
          codes[5] == 0 && codes[6] == 0 && codes[7] == 1 && (b.qs[0] >> 4) == 0,
          "mxfp4 rounding: e %d codes %d %d %d %d %d %d %d %d", b.e, codes[0], codes[1], codes[2], codes[3],
          codes[4], codes[5], codes[6], codes[7]);
    printf("info: mxfp4 quantizer: %lld model blocks requantized identically\n", blocks - bad);
}

int main(void)
{
    const char *shared = getenv("DS4_SHARED");
    if (!shared || !*shared) shared = "../shared";
    snprintf(gdir, sizeof gdir, "%s/golden/quants", shared);
    if (load_index() != 0) {
        fprintf(stderr, "test_quant: cannot read %s/index.tsv (set DS4_SHARED)\n", gdir);
        return 1;
    }
    /* DS4_TEST_SEED varies the random part (default: fixed) */
    const char *seed = getenv("DS4_TEST_SEED");
    if (seed && *seed) rng ^= strtoull(seed, NULL, 0) * 0xbf58476d1ce4e5b9ull;
    if (!rng) rng = 1;
    const ds4_kernels *v = ds4_kernels_avx2();
    table tabs[2] = { { ds4_kernels_scalar(), "scalar" }, { v, "avx2" } };
    int ntabs = v ? 2 : 1;
    if (!v) printf("info: AVX2 kernels not available on this CPU; scalar only\n");

    test_dispatch();
    test_tables();
    test_dequant();
    test_act_quant();
    test_golden_dots(tabs, ntabs);
    test_f16(v);
    if (v) test_random(v);
    test_quantizers();
    test_mxfp4_quantizer(shared);

    for (int f = 0; f < 4; f++)
        printf("info: %-7s golden max |y-exact|/abs: int %.3g (tol 2e-6), f32act %.3g (%.2f of tol)%s\n",
               fmt_names[f], max_rel[f][0], max_rel[f][1], max_ratio_f32[f],
               v ? "" : "");
    if (v)
        for (int f = 0; f < 9; f++)
            if (f != 4) printf("info: %-7s random avx2 vs scalar max |diff|/abs: %.3g (tol 2e-6)\n", fmt_names[f],
                   max_simd_rel[f]);
    if (v) printf("info: random f32act max error / tolerance: %.3f\n", max_simd_f32_ratio);
    printf("test_quant: %d checks, %d failures (%d deq arrays, tables: %s)\n", checks, failures,
           n_deq_arrays, v ? "scalar+avx2" : "scalar");
    return failures ? 1 : 0;
}
