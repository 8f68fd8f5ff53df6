/*
 * test_gguf.c -- tests of the GGUF container (gguf.c), the DeepSeek V4
 * binding (model.c), --inspect (inspect.c) and the hashes (hash.c).
 *
 * Builds good and hostile GGUF files itself in a temp directory (valid ones
 * with the writer, hostile ones byte by byte), checks that each bad file is
 * rejected with the expected message fragment, that every GGUF under
 * $DS4_SHARED (default ../shared) loads and both golden models bind, and
 * that the writer round-trips.  Must not: depend on anything but the
 * library and the read-only shared data.
 */

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"
#include "gguf/gguf.h"
#include "base/hash.h"
#include "gguf/model.h"

static int n_fail, n_pass;
static char tmpdir[256];
static const char *shared;

#define CHECK(cond, ...) do { \
    if (cond) n_pass++; \
    else { n_fail++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
} while (0)

static char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int file_exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) { free(p); p = NULL; }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

/* a writer's temporary beside path (base/afile.c names it PATH.tmp-PID-N) */
static int tmp_beside(const char *path) {
    char pat[4200];
    snprintf(pat, sizeof pat, "%s.tmp-*", path);
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (n) globfree(&g);
    return n > 0;
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n && fwrite(p, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* Raw byte builder for hostile files                                        */
/* ------------------------------------------------------------------------ */

typedef struct { uint8_t *p; size_t n, cap; } rb;

static void rb_put(rb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void rb_u32(rb *b, uint32_t v) { rb_put(b, &v, 4); }
static void rb_u64(rb *b, uint64_t v) { rb_put(b, &v, 8); }
static void rb_str(rb *b, const char *s) { rb_u64(b, strlen(s)); rb_put(b, s, strlen(s)); }
static void rb_hdr(rb *b, uint32_t ver, uint64_t nt, uint64_t nkv) {
    b->n = 0;
    rb_put(b, "GGUF", 4);
    rb_u32(b, ver);
    rb_u64(b, nt);
    rb_u64(b, nkv);
}
static void rb_kv_u32(rb *b, const char *k, uint32_t v) { rb_str(b, k); rb_u32(b, GGUF_U32); rb_u32(b, v); }
static void rb_tensor(rb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    rb_str(b, name);
    rb_u32(b, nd);
    for (uint32_t i = 0; i < nd; i++) rb_u64(b, ne[i]);
    rb_u32(b, type);
    rb_u64(b, off);
}
static void rb_pad(rb *b, size_t a) { while (b->n % a) { uint8_t z = 0; rb_put(b, &z, 1); } }
static void rb_zeros(rb *b, size_t n) { for (size_t i = 0; i < n; i++) { uint8_t z = 0; rb_put(b, &z, 1); } }

/* Opens a buffer both from memory (exact-size heap copy, so ASan sees any
 * over-read) and from a file; both must agree.  Returns the error text of
 * the file open (caller frees) or NULL if it opened. */
static char *open_err(const rb *b, const char *name) {
    char *e1 = NULL, *e2 = NULL;
    uint8_t *copy = malloc(b->n ? b->n : 1);
    if (b->n) memcpy(copy, b->p, b->n);
    gguf_file *f = gguf_open_mem(copy, b->n, name, &e1);
    gguf_close(f);
    free(copy);
    char *path = tpath(name);
    write_all(path, b->p, b->n);
    f = gguf_open(path, &e2);
    CHECK((f == NULL) == (e1 != NULL), "%s: mem and file open disagree", name);
    gguf_close(f);
    free(e1);
    unlink(path);
    return e2;
}

static void expect_reject(const rb *b, const char *name, const char *frag) {
    double t0 = now();
    char *e = open_err(b, name);
    double dt = now() - t0;
    CHECK(e != NULL, "%s: hostile file was accepted", name);
    if (e) CHECK(strstr(e, frag) != NULL, "%s: message \"%s\" lacks \"%s\"", name, e, frag);
    CHECK(dt < 1.0, "%s: rejection took %.2fs (must fail fast)", name, dt);
    free(e);
}

static void test_hostile(void) {
    rb b = {0};
    uint64_t ne[4];

    b.n = 0;
    expect_reject(&b, "empty.gguf", "not a GGUF file");
    rb_hdr(&b, 3, 0, 0);
    b.p[3] = 'X';
    expect_reject(&b, "magic.gguf", "bad magic");
    rb_hdr(&b, 2, 0, 0);
    expect_reject(&b, "v2.gguf", "unsupported GGUF version 2");
    rb_hdr(&b, 1, 0, 0);
    expect_reject(&b, "v1.gguf", "unsupported GGUF version 1");

    /* Huge counts are refused before any allocation sized by them. */
    rb_hdr(&b, 3, 0, 1ull << 60);
    rb_kv_u32(&b, "a", 1);
    expect_reject(&b, "nkv.gguf", "metadata count");
    rb_hdr(&b, 3, UINT64_MAX, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "nt.gguf", "tensor count");
    rb_hdr(&b, 3, 0, 1);
    rb_u64(&b, 1ull << 63);
    rb_put(&b, "abc", 3);
    rb_zeros(&b, 16);
    expect_reject(&b, "keylen.gguf", "has length");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_STRING);
    rb_u64(&b, UINT64_MAX - 3);
    expect_reject(&b, "strlen.gguf", "has length");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_ARRAY);
    rb_u32(&b, GGUF_U32);
    rb_u64(&b, 1ull << 62);
    rb_zeros(&b, 16);
    expect_reject(&b, "arrcount.gguf", "does not fit");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_ARRAY);
    rb_u32(&b, GGUF_U64);
    rb_u64(&b, 1ull << 61);    /* * 8 bytes overflows 64 bits */
    expect_reject(&b, "arrovf.gguf", "does not fit");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_ARRAY);
    rb_u32(&b, GGUF_STRING);
    rb_u64(&b, 1ull << 40);
    rb_zeros(&b, 64);
    expect_reject(&b, "strarr.gguf", "string array of");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_ARRAY);
    rb_u32(&b, GGUF_STRING);
    rb_u64(&b, 2);
    rb_str(&b, "x");
    rb_u64(&b, 1000);          /* second element runs off the end */
    rb_zeros(&b, 16);
    expect_reject(&b, "strarr2.gguf", "has length");

    /* Types. */
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, 13);
    rb_u32(&b, 0);
    expect_reject(&b, "vtype.gguf", "unknown value type 13");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_ARRAY);
    rb_u32(&b, GGUF_ARRAY);
    rb_u64(&b, 1);
    rb_u32(&b, GGUF_U8);
    rb_u64(&b, 1);
    rb_zeros(&b, 8);
    expect_reject(&b, "nested.gguf", "nested array");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "k");
    rb_u32(&b, GGUF_ARRAY);
    rb_u32(&b, 99);
    rb_u64(&b, 1);
    rb_zeros(&b, 8);
    expect_reject(&b, "arrtype.gguf", "unknown element type 99");

    /* Keys. */
    rb_hdr(&b, 3, 0, 2);
    rb_kv_u32(&b, "general.x", 1);
    rb_kv_u32(&b, "general.x", 2);
    expect_reject(&b, "dupkey.gguf", "duplicate metadata key general.x");
    rb_hdr(&b, 3, 0, 1);
    rb_u64(&b, 3);
    rb_put(&b, "a\0b", 3);
    rb_u32(&b, GGUF_U8);
    rb_zeros(&b, 4);
    expect_reject(&b, "nulkey.gguf", "contains NUL");
    rb_hdr(&b, 3, 0, 1);
    rb_u64(&b, 0);
    rb_u32(&b, GGUF_U32);
    rb_zeros(&b, 4);
    expect_reject(&b, "emptykey.gguf", "empty");
    rb_hdr(&b, 3, 0, 1);
    rb_kv_u32(&b, "general.alignment", 48);
    expect_reject(&b, "align48.gguf", "general.alignment 48 is not a power of two");
    rb_hdr(&b, 3, 0, 1);
    rb_kv_u32(&b, "general.alignment", 0);
    expect_reject(&b, "align0.gguf", "not a power of two");
    rb_hdr(&b, 3, 0, 1);
    rb_str(&b, "general.alignment");
    rb_u32(&b, GGUF_STRING);
    rb_str(&b, "32");
    expect_reject(&b, "alignstr.gguf", "general.alignment has type string");

    /* Tensor directory. */
    ne[0] = 4;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 0, ne, GGML_F32, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "ndims0.gguf", "has 0 dims");
    rb_hdr(&b, 3, 1, 0);
    rb_str(&b, "t");
    rb_u32(&b, 5);
    for (int i = 0; i < 5; i++) rb_u64(&b, 1);
    rb_u32(&b, 0);
    rb_u64(&b, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "ndims5.gguf", "has 5 dims");
    ne[0] = 4; ne[1] = 0;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 2, ne, GGML_F32, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "dim0.gguf", "invalid dim 1");
    ne[0] = 1ull << 32; ne[1] = 1ull << 32; ne[2] = 1ull << 32;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 3, ne, GGML_F32, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "dimovf.gguf", "overflows");
    ne[0] = 1ull << 62; ne[1] = 2;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 2, ne, GGML_F32, 0);  /* elements fit, bytes do not */
    rb_zeros(&b, 64);
    expect_reject(&b, "byteovf.gguf", "overflows");
    ne[0] = 32; ne[1] = 1;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, 4, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "ttype4.gguf", "unknown type 4");
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, 1000, 0);
    rb_zeros(&b, 64);
    expect_reject(&b, "ttype1000.gguf", "unknown type 1000");
    ne[0] = 33;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, GGML_Q8_0, 0);
    rb_zeros(&b, 128);
    expect_reject(&b, "block.gguf", "not a multiple of the Q8_0 block size 32");
    ne[0] = 8;
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, GGML_F32, 4);
    rb_pad(&b, 32);
    rb_zeros(&b, 64);
    expect_reject(&b, "misalign.gguf", "not a multiple of the alignment 32");
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, GGML_F32, 64);
    rb_pad(&b, 32);
    rb_zeros(&b, 64);
    expect_reject(&b, "pastend.gguf", "extends past the end");
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, GGML_F32, UINT64_MAX - 31);
    rb_pad(&b, 32);
    rb_zeros(&b, 64);
    expect_reject(&b, "offovf.gguf", "extends past the end");
    rb_hdr(&b, 3, 2, 0);
    rb_tensor(&b, "t", 1, ne, GGML_F32, 0);
    rb_tensor(&b, "t", 1, ne, GGML_F32, 32);
    rb_pad(&b, 32);
    rb_zeros(&b, 64);
    expect_reject(&b, "duptensor.gguf", "duplicate tensor name t");
    rb_hdr(&b, 3, 1, 0);
    rb_tensor(&b, "t", 1, ne, GGML_F32, 0);
    expect_reject(&b, "nodata.gguf", "past the end");

    /* And a minimal valid one built the same way opens. */
    rb_hdr(&b, 3, 1, 1);
    rb_kv_u32(&b, "general.alignment", 64);
    rb_tensor(&b, "t", 1, ne, GGML_F32, 0);
    rb_pad(&b, 64);
    rb_zeros(&b, 32);
    char *e = open_err(&b, "minimal.gguf");
    CHECK(e == NULL, "minimal valid file rejected: %s", e ? e : "");
    free(e);
    free(b.p);
}

/* ------------------------------------------------------------------------ */
/* A tiny synthetic DeepSeek V4 model written with the writer                */
/* ------------------------------------------------------------------------ */

typedef struct {
    /* metadata edits */
    const char *skip_kv;
    const char *kv_key;
    char kv_kind;              /* 'f' f32, 'u' u32, 's' string, 'r' ratios array */
    double f;
    uint32_t u;
    const char *s;
    uint32_t ratios[8];
    int n_ratios;
    /* tensor edits */
    const char *skip_tensor;
    const char *t_name;
    int t_dim;                 /* -1: none */
    uint64_t t_val;
    int t_type;                /* -1: keep */
    const char *extra_tensor;  /* an additional, unused tensor */
} mut;

static mut M(void) { mut m; memset(&m, 0, sizeof m); m.t_dim = -1; m.t_type = -1; return m; }

enum { L = 4, D = 64, V = 64, H = 4, HD = 32, ROT = 16, QL = 32, OL = 32, G = 2, E = 4, K = 2,
       F = 64, NH = 2, IH = 2, ID = 16, NHC = 2 };
static const uint32_t RATIOS[L] = {0, 0, 4, 8};

static int kv_edit(gguf_writer *w, const mut *m, const char *key) {
    if (m->skip_kv && !strcmp(m->skip_kv, key)) return 1;
    if (!m->kv_key || strcmp(m->kv_key, key)) return 0;
    switch (m->kv_kind) {
    case 'f': gguf_w_f32(w, key, (float)m->f); break;
    case 'u': gguf_w_u32(w, key, m->u); break;
    case 's': gguf_w_str(w, key, m->s, strlen(m->s)); break;
    case 'r': gguf_w_arr(w, key, GGUF_U32, m->ratios, (uint64_t)m->n_ratios); break;
    }
    return 1;
}
static void ku(gguf_writer *w, const mut *m, const char *k, uint32_t v) { if (!kv_edit(w, m, k)) gguf_w_u32(w, k, v); }
static void kf(gguf_writer *w, const mut *m, const char *k, float v) { if (!kv_edit(w, m, k)) gguf_w_f32(w, k, v); }

typedef struct { gguf_writer *w; const mut *m; uint64_t bytes; } tw;

static void tadd(tw *t, const char *name, uint32_t nd, uint64_t a, uint64_t b, uint64_t c, uint32_t type) {
    if (t->m->skip_tensor && !strcmp(t->m->skip_tensor, name)) return;
    uint64_t ne[3] = {a, b, c};
    if (t->m->t_name && !strcmp(t->m->t_name, name)) {
        if (t->m->t_dim >= 0) ne[t->m->t_dim] = t->m->t_val;
        if (t->m->t_type >= 0) type = (uint32_t)t->m->t_type;
    }
    uint64_t rows = 1;
    for (uint32_t d = 1; d < nd; d++) rows *= ne[d];
    t->bytes += rows * ggml_row_size(type, ne[0]);
    gguf_w_tensor(t->w, name, nd, ne, type);
}

static void tl(tw *t, int il, const char *s, uint32_t nd, uint64_t a, uint64_t b, uint64_t c, uint32_t type) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", il, s);
    tadd(t, name, nd, a, b, c, type);
}

/* Writes the tiny model (with edits) to `path`; returns 0 on success. */
static int write_tiny(const char *path, const mut *m) {
    char *err = NULL;
    gguf_writer *w = gguf_writer_open(path, &err);
    if (!w) { fprintf(stderr, "%s\n", err); free(err); return -1; }
    if (!kv_edit(w, m, "general.architecture")) gguf_w_str(w, "general.architecture", "deepseek4", 9);
    gguf_w_str(w, "general.name", "tiny-test", 9);
    ku(w, m, "deepseek4.block_count", L);
    ku(w, m, "deepseek4.embedding_length", D);
    ku(w, m, "deepseek4.vocab_size", V);
    ku(w, m, "deepseek4.context_length", 4096);
    ku(w, m, "deepseek4.attention.head_count", H);
    ku(w, m, "deepseek4.attention.head_count_kv", 1);
    ku(w, m, "deepseek4.attention.key_length", HD);
    ku(w, m, "deepseek4.attention.value_length", HD);
    ku(w, m, "deepseek4.attention.q_lora_rank", QL);
    ku(w, m, "deepseek4.attention.output_lora_rank", OL);
    ku(w, m, "deepseek4.attention.output_group_count", G);
    ku(w, m, "deepseek4.attention.sliding_window", 8);
    ku(w, m, "deepseek4.attention.indexer.head_count", IH);
    ku(w, m, "deepseek4.attention.indexer.key_length", ID);
    ku(w, m, "deepseek4.attention.indexer.top_k", 4);
    if (!kv_edit(w, m, "deepseek4.attention.compress_ratios"))
        gguf_w_arr(w, "deepseek4.attention.compress_ratios", GGUF_U32, RATIOS, L);
    kf(w, m, "deepseek4.attention.compress_rope_freq_base", 160000.0f);
    kf(w, m, "deepseek4.attention.layer_norm_rms_epsilon", 1e-6f);
    ku(w, m, "deepseek4.rope.dimension_count", ROT);
    kf(w, m, "deepseek4.rope.freq_base", 10000.0f);
    if (!kv_edit(w, m, "deepseek4.rope.scaling.type")) gguf_w_str(w, "deepseek4.rope.scaling.type", "yarn", 4);
    kf(w, m, "deepseek4.rope.scaling.factor", 16.0f);
    ku(w, m, "deepseek4.rope.scaling.original_context_length", 65536);
    kf(w, m, "deepseek4.rope.scaling.yarn_beta_fast", 32.0f);
    kf(w, m, "deepseek4.rope.scaling.yarn_beta_slow", 1.0f);
    ku(w, m, "deepseek4.expert_count", E);
    ku(w, m, "deepseek4.expert_used_count", K);
    ku(w, m, "deepseek4.expert_shared_count", 1);
    ku(w, m, "deepseek4.expert_feed_forward_length", F);
    kf(w, m, "deepseek4.expert_weights_scale", 1.5f);
    if (!kv_edit(w, m, "deepseek4.expert_weights_norm")) gguf_w_bool(w, "deepseek4.expert_weights_norm", 1);
    ku(w, m, "deepseek4.hash_layer_count", NH);
    if (!kv_edit(w, m, "deepseek4.swiglu_clamp_exp")) {
        float cl[L] = {10, 10, 10, 10};
        gguf_w_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_F32, cl, L);
    }
    ku(w, m, "deepseek4.hyper_connection.count", NHC);
    ku(w, m, "deepseek4.hyper_connection.sinkhorn_iterations", 20);
    kf(w, m, "deepseek4.hyper_connection.epsilon", 1e-6f);

    tw t = {w, m, 0};
    const uint32_t M16 = GGML_F16, N32 = GGML_F32;
    const uint64_t hcd = NHC * D, mix = (2 + NHC) * NHC;
    tadd(&t, "token_embd.weight", 2, D, V, 0, M16);
    tadd(&t, "output_hc_fn.weight", 2, hcd, NHC, 0, M16);
    tadd(&t, "output_hc_base.weight", 1, NHC, 0, 0, N32);
    tadd(&t, "output_hc_scale.weight", 1, 1, 0, 0, N32);
    tadd(&t, "output_norm.weight", 1, D, 0, 0, N32);
    tadd(&t, "output.weight", 2, D, V, 0, GGML_Q8_0);
    for (int il = 0; il < L; il++) {
        tl(&t, il, "hc_attn_fn.weight", 2, hcd, mix, 0, M16);
        tl(&t, il, "hc_attn_scale.weight", 1, 3, 0, 0, N32);
        tl(&t, il, "hc_attn_base.weight", 1, mix, 0, 0, N32);
        tl(&t, il, "hc_ffn_fn.weight", 2, hcd, mix, 0, M16);
        tl(&t, il, "hc_ffn_scale.weight", 1, 3, 0, 0, N32);
        tl(&t, il, "hc_ffn_base.weight", 1, mix, 0, 0, N32);
        tl(&t, il, "attn_norm.weight", 1, D, 0, 0, N32);
        tl(&t, il, "attn_q_a.weight", 2, D, QL, 0, GGML_Q8_0);
        tl(&t, il, "attn_q_a_norm.weight", 1, QL, 0, 0, N32);
        tl(&t, il, "attn_q_b.weight", 2, QL, H * HD, 0, GGML_Q8_0);
        tl(&t, il, "attn_kv.weight", 2, D, HD, 0, GGML_Q8_0);
        tl(&t, il, "attn_kv_a_norm.weight", 1, HD, 0, 0, N32);
        tl(&t, il, "attn_sinks.weight", 1, H, 0, 0, N32);
        tl(&t, il, "attn_output_a.weight", 2, H * HD / G, G * OL, 0, GGML_Q8_0);
        tl(&t, il, "attn_output_b.weight", 2, G * OL, D, 0, GGML_Q8_0);
        uint32_t r = RATIOS[il];
        if (r) {
            uint64_t coff = r == 4 ? 2 : 1;
            tl(&t, il, "attn_compressor_ape.weight", 2, coff * HD, r, 0, M16);
            tl(&t, il, "attn_compressor_kv.weight", 2, D, coff * HD, 0, M16);
            tl(&t, il, "attn_compressor_gate.weight", 2, D, coff * HD, 0, M16);
            tl(&t, il, "attn_compressor_norm.weight", 1, HD, 0, 0, N32);
            if (r == 4) {
                tl(&t, il, "indexer.attn_q_b.weight", 2, QL, IH * ID, 0, M16);
                tl(&t, il, "indexer.proj.weight", 2, D, IH, 0, M16);
                tl(&t, il, "indexer_compressor_ape.weight", 2, 2 * ID, r, 0, M16);
                tl(&t, il, "indexer_compressor_kv.weight", 2, D, 2 * ID, 0, M16);
                tl(&t, il, "indexer_compressor_gate.weight", 2, D, 2 * ID, 0, M16);
                tl(&t, il, "indexer_compressor_norm.weight", 1, ID, 0, 0, N32);
            }
        }
        tl(&t, il, "ffn_norm.weight", 1, D, 0, 0, N32);
        tl(&t, il, "ffn_gate_inp.weight", 2, D, E, 0, M16);
        if (il >= NH) tl(&t, il, "exp_probs_b.bias", 1, E, 0, 0, N32);
        else tl(&t, il, "ffn_gate_tid2eid.weight", 2, K, V, 0, GGML_I32);
        tl(&t, il, "ffn_gate_exps.weight", 3, D, F, E, GGML_Q8_0);
        tl(&t, il, "ffn_up_exps.weight", 3, D, F, E, GGML_Q8_0);
        tl(&t, il, "ffn_down_exps.weight", 3, F, D, E, GGML_Q8_0);
        tl(&t, il, "ffn_gate_shexp.weight", 2, D, F, 0, GGML_Q8_0);
        tl(&t, il, "ffn_up_shexp.weight", 2, D, F, 0, GGML_Q8_0);
        tl(&t, il, "ffn_down_shexp.weight", 2, F, D, 0, GGML_Q8_0);
    }
    if (m->extra_tensor) tadd(&t, m->extra_tensor, 1, 32, 0, 0, N32);
    if (gguf_writer_begin_data(w)) goto fail;
    static const uint8_t zero[4096];
    for (uint64_t left = t.bytes; left;) {
        size_t k = left < sizeof zero ? (size_t)left : sizeof zero;
        if (gguf_writer_write(w, zero, k)) goto fail;
        left -= k;
    }
    if (gguf_writer_close(w, &err)) { fprintf(stderr, "writer: %s\n", err); free(err); return -1; }
    return 0;
fail:
    gguf_writer_close(w, &err);
    fprintf(stderr, "writer: %s\n", err ? err : "?");
    free(err);
    return -1;
}

/* Binds `path`; returns the error text (caller frees) or NULL. */
static char *bind_err(const char *path, ds4_weights *keep) {
    char *err = NULL;
    gguf_file *gf = gguf_open(path, &err);
    if (!gf) return err;
    ds4_weights w;
    int rc = ds4_weights_bind(gf, &w, &err);
    CHECK((rc == 0) == (err == NULL), "%s: bind status and message disagree", path);
    if (rc == 0 && keep) *keep = w;
    else ds4_weights_free(&w);
    if (!(rc == 0 && keep)) gguf_close(gf);
    return err;
}

static int count_lines(const char *s) {
    int n = 1;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void expect_bind_fail(const char *label, const mut *m, const char *frag, const char *frag2) {
    char *path = tpath("variant.gguf");
    if (write_tiny(path, m)) { CHECK(0, "%s: could not write the variant", label); return; }
    char *e = bind_err(path, NULL);
    CHECK(e != NULL, "%s: bad model was accepted", label);
    if (e) {
        CHECK(strstr(e, frag) != NULL, "%s: message lacks \"%s\":\n%s", label, frag, e);
        if (frag2) CHECK(strstr(e, frag2) != NULL, "%s: message lacks \"%s\":\n%s", label, frag2, e);
        /* every line is prefixed with the file name */
        char pre[600];
        snprintf(pre, sizeof pre, "%s: ", path);
        int lines_ok = 1;
        for (const char *q = e; q; q = strchr(q, '\n')) {
            if (*q == '\n') q++;
            lines_ok &= !strncmp(q, pre, strlen(pre));
        }
        CHECK(lines_ok, "%s: some line lacks the file prefix:\n%s", label, e);
    }
    free(e);
    unlink(path);
}

/* Files without tensors: one line saying what the file is, instead of the
 * list of every missing deepseek4.* key. */
static void not_a_model_files(void) {
    for (int kind = 0; kind < 3; kind++) {
        char *path = tpath("notmodel.gguf");
        char *err = NULL;
        gguf_writer *w = gguf_writer_open(path, &err);
        CHECK(w != NULL, "writer: %s", err ? err : "");
        if (!w) { free(err); return; }
        gguf_w_str(w, "general.architecture", kind == 2 ? "llama" : "deepseek4", kind == 2 ? 5 : 9);
        if (kind != 1) {
            gguf_str toks[3] = { {"a", 1}, {"b", 1}, {"ab", 2} };
            gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
            gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
            gguf_w_u32(w, "deepseek4.vocab_size", 3);
        }
        CHECK(gguf_writer_close(w, &err) == 0, "write: %s", err ? err : "");
        free(err);
        char *e = bind_err(path, NULL);
        const char *want[3] = {
            "notmodel.gguf: a vocabulary-only GGUF (tokenizer \"gpt2\", 3 tokens, no weights): it cannot run as a model. "
            "Such a file is a tokenizer (ds4-synth --vocab builds random-weight test models around it",
            "notmodel.gguf: a GGUF with no tensors and no tokenizer (metadata only): it cannot run as a model",
            "notmodel.gguf: a vocabulary-only GGUF (tokenizer \"gpt2\", 3 tokens, architecture \"llama\", no weights)",
        };
        CHECK(e && strstr(e, want[kind]) && count_lines(e) == 1, "file without tensors, case %d: one line with "
              "\"%s\", got:\n%s", kind, want[kind], e ? e : "(accepted)");
        CHECK(!e || !strstr(e, "missing metadata"), "case %d lists missing metadata", kind);
        free(e);
        unlink(path);
    }
}

static void test_tiny_model(void) {
    /* The unmodified tiny model binds; check what bind derived. */
    mut m = M();
    char *path = tpath("tiny.gguf");
    CHECK(write_tiny(path, &m) == 0, "write tiny");
    ds4_weights w;
    char *e = bind_err(path, &w);
    CHECK(e == NULL, "tiny model rejected:\n%s", e ? e : "");
    if (!e) {
        const ds4_config *c = &w.cfg;
        CHECK(c->n_layer == L && c->n_embd == D && c->n_vocab == V && c->head_dim == HD, "tiny cfg");
        CHECK(c->n_hash == NH && c->idx_dim == ID && c->n_hc == NHC, "tiny cfg 2");
        CHECK(fabsf(c->rope_base - 10000.0f) < 1e-3f && fabsf(c->expert_scale - 1.5f) < 1e-6f, "tiny floats");
        CHECK(w.layers[0].ratio == 0 && w.layers[0].coff == 1 && !w.layers[0].has_indexer, "layer 0 kind");
        CHECK(w.layers[2].ratio == 4 && w.layers[2].coff == 2 && w.layers[2].has_indexer, "layer 2 kind");
        CHECK(w.layers[3].ratio == 8 && w.layers[3].coff == 1 && !w.layers[3].has_indexer, "layer 3 kind");
        CHECK(w.layers[1].tid2eid.data && !w.layers[1].exp_probs_b.data, "hash layer tensors");
        CHECK(!w.layers[2].tid2eid.data && w.layers[2].exp_probs_b.data, "router layer tensors");
        CHECK(w.layers[2].idx_q_b.data && w.layers[2].idx_q_b.ne[1] == IH * ID, "indexer bound");
        CHECK(w.layers[0].attn_q_b.row_bytes == QL / 32 * 34, "row bytes");
        CHECK(w.layers[3].swiglu_clamp == 10.0f, "clamp");
        CHECK(w.n_bound == w.gf->n_tensors, "all tensors bound");
        uint64_t act = ds4_weights_active_bytes(&w), total = 0;
        for (uint64_t i = 0; i < w.gf->n_tensors; i++) total += w.gf->tensors[i].nbytes;
        /* Experts: K of E are read; the embedding: one row of V. */
        uint64_t exp_all = 0;
        for (int il = 0; il < L; il++)
            exp_all += w.layers[il].ffn_gate_exps.nbytes + w.layers[il].ffn_up_exps.nbytes +
                       w.layers[il].ffn_down_exps.nbytes;
        uint64_t tid = 0;
        for (int il = 0; il < NH; il++) tid += w.layers[il].tid2eid.nbytes - w.layers[il].tid2eid.row_bytes;
        uint64_t want = total - exp_all / E * (E - K) - w.token_embd.nbytes / V * (V - 1) - tid;
        CHECK(act == want, "active bytes %" PRIu64 ", expected %" PRIu64, act, want);
        gguf_file *gf = w.gf;
        ds4_weights_free(&w);
        gguf_close(gf);
    }
    free(e);

    /* Tolerated: an extra tensor, a missing optional exp_probs_b. */
    m = M(); m.extra_tensor = "mtp.0.enorm.weight";
    CHECK(write_tiny(path, &m) == 0, "write");
    e = bind_err(path, NULL);
    CHECK(e == NULL, "extra tensor rejected: %s", e ? e : "");
    free(e);
    m = M(); m.skip_tensor = "blk.3.exp_probs_b.bias";
    CHECK(write_tiny(path, &m) == 0, "write");
    e = bind_err(path, NULL);
    CHECK(e == NULL, "missing optional exp_probs_b rejected: %s", e ? e : "");
    free(e);
    /* Integer metadata of other widths, Q8_0 token embedding. */
    m = M(); m.kv_key = "deepseek4.rope.freq_base"; m.kv_kind = 'u'; m.u = 10000;
    CHECK(write_tiny(path, &m) == 0, "write");
    e = bind_err(path, NULL);
    CHECK(e == NULL, "integer freq_base rejected: %s", e ? e : "");
    free(e);
    m = M(); m.t_name = "token_embd.weight"; m.t_type = GGML_Q8_0;
    CHECK(write_tiny(path, &m) == 0, "write");
    e = bind_err(path, NULL);
    CHECK(e == NULL, "Q8_0 embedding rejected: %s", e ? e : "");
    free(e);
    unlink(path);

    /* Rejections. */
    m = M(); m.kv_key = "general.architecture"; m.kv_kind = 's'; m.s = "llama";
    expect_bind_fail("arch", &m, "general.architecture is \"llama\", expected \"deepseek4\": this is a model of "
                     "another family", "ds4 runs only GGUFs of architecture \"deepseek4\" (DeepSeek V4 Flash and PRO)");
    m = M(); m.skip_kv = "general.architecture";
    expect_bind_fail("no arch", &m, "missing metadata general.architecture", "not a DeepSeek V4 model file");
    not_a_model_files();
    m = M(); m.skip_tensor = "blk.2.attn_compressor_kv.weight";
    expect_bind_fail("missing", &m, "missing tensor blk.2.attn_compressor_kv.weight", NULL);
    m = M(); m.t_name = "blk.3.attn_q_b.weight"; m.t_dim = 1; m.t_val = 96;
    expect_bind_fail("dims", &m, "tensor blk.3.attn_q_b.weight has dims [32, 96], expected [32, 128]", NULL);
    m = M(); m.t_name = "blk.1.ffn_down_exps.weight"; m.t_dim = 2; m.t_val = 5;
    expect_bind_fail("expert dims", &m, "blk.1.ffn_down_exps.weight has dims [64, 64, 5], expected [64, 64, 4]", NULL);
    m = M(); m.t_name = "blk.0.attn_norm.weight"; m.t_type = GGML_F16;
    expect_bind_fail("norm type", &m, "tensor blk.0.attn_norm.weight has type F16, expected F32", NULL);
    m = M(); m.t_name = "blk.0.ffn_gate_tid2eid.weight"; m.t_type = GGML_F32;
    expect_bind_fail("tid2eid type", &m, "has type F32, expected I32", NULL);
    m = M(); m.t_name = "token_embd.weight"; m.t_type = GGML_I32;
    expect_bind_fail("embd type", &m, "token_embd.weight has type I32, expected one of F32, F16, BF16, Q8_0", NULL);
    m = M(); m.t_name = "blk.0.attn_kv.weight"; m.t_type = GGML_I32;
    expect_bind_fail("matrix type", &m, "blk.0.attn_kv.weight has type I32, expected one of", NULL);
    m = M(); m.t_name = "blk.3.attn_compressor_ape.weight"; m.t_type = GGML_Q8_0;
    expect_bind_fail("ape type", &m, "attn_compressor_ape.weight has type Q8_0, expected one of F32, F16, BF16", NULL);
    m = M(); m.t_name = "blk.2.ffn_up_exps.weight"; m.t_type = GGML_F16;
    expect_bind_fail("gate/up type", &m, "expected the type of blk.2.ffn_gate_exps.weight (Q8_0)", NULL);
    m = M(); m.kv_key = "deepseek4.rope.freq_base"; m.kv_kind = 'f'; m.f = NAN;
    expect_bind_fail("nan", &m, "metadata deepseek4.rope.freq_base is NaN", NULL);
    m = M(); m.kv_key = "deepseek4.expert_weights_scale"; m.kv_kind = 'f'; m.f = INFINITY;
    expect_bind_fail("inf", &m, "metadata deepseek4.expert_weights_scale is infinite", NULL);
    m = M(); m.kv_key = "deepseek4.swiglu_clamp_exp"; m.kv_kind = 'f'; m.f = NAN;
    expect_bind_fail("nan clamp", &m, "swiglu_clamp_exp is NaN", NULL);
    m = M(); m.skip_kv = "deepseek4.block_count";
    expect_bind_fail("no block_count", &m, "missing metadata deepseek4.block_count", "tensor checks skipped");
    m = M(); m.kv_key = "deepseek4.block_count"; m.kv_kind = 's'; m.s = "4";
    expect_bind_fail("string block_count", &m, "deepseek4.block_count has type string, expected an integer", NULL);
    m = M(); m.kv_key = "deepseek4.embedding_length"; m.kv_kind = 'u'; m.u = 1u << 20;
    expect_bind_fail("huge embd", &m, "embedding_length = 1048576 is out of range", NULL);
    m = M(); m.kv_key = "deepseek4.attention.compress_ratios"; m.kv_kind = 'r'; m.n_ratios = 3;
    expect_bind_fail("short ratios", &m, "compress_ratios has 3 entries, fewer than block_count = 4", NULL);
    m = M(); m.kv_key = "deepseek4.attention.compress_ratios"; m.kv_kind = 'r'; m.n_ratios = 4;
    m.ratios[2] = 4; m.ratios[3] = 1;
    expect_bind_fail("ratio 1", &m, "compress_ratios[3] = 1 is invalid", NULL);
    m = M(); m.kv_key = "deepseek4.attention.output_group_count"; m.kv_kind = 'u'; m.u = 3;
    expect_bind_fail("groups", &m, "head_count = 4 is not a multiple of output_group_count = 3", NULL);
    m = M(); m.kv_key = "deepseek4.attention.indexer.key_length"; m.kv_kind = 'u'; m.u = 24;
    expect_bind_fail("idx pow2", &m, "indexer.key_length = 24 is not a power of two", NULL);
    m = M(); m.skip_kv = "deepseek4.attention.indexer.top_k";
    expect_bind_fail("idx meta", &m, "layer 2 needs the indexer", NULL);
    m = M(); m.kv_key = "deepseek4.expert_used_count"; m.kv_kind = 'u'; m.u = 5;
    expect_bind_fail("used>experts", &m, "expert_used_count = 5 exceeds expert_count = 4", NULL);
    m = M(); m.kv_key = "deepseek4.attention.value_length"; m.kv_kind = 'u'; m.u = 16;
    expect_bind_fail("k!=v", &m, "value_length = 16 must equal key_length = 32", NULL);
    m = M(); m.kv_key = "deepseek4.attention.head_count_kv"; m.kv_kind = 'u'; m.u = 2;
    expect_bind_fail("kv heads", &m, "head_count_kv = 2 is out of range [1, 1]", NULL);
    m = M(); m.kv_key = "deepseek4.rope.dimension_count"; m.kv_kind = 'u'; m.u = 15;
    expect_bind_fail("odd rot", &m, "rope.dimension_count = 15 must be even", NULL);
    m = M(); m.kv_key = "deepseek4.hash_layer_count"; m.kv_kind = 'u'; m.u = 9;
    expect_bind_fail("n_hash", &m, "hash_layer_count = 9 exceeds block_count = 4", NULL);
    m = M(); m.kv_key = "deepseek4.hyper_connection.count"; m.kv_kind = 'u'; m.u = 0;
    expect_bind_fail("hc 0", &m, "hyper_connection.count = 0 is out of range", NULL);
    m = M(); m.kv_key = "deepseek4.expert_weights_norm"; m.kv_kind = 'f'; m.f = 1;
    expect_bind_fail("norm bool", &m, "expert_weights_norm is not a bool", NULL);
    /* Several problems are reported together. */
    m = M(); m.kv_key = "deepseek4.rope.freq_base"; m.kv_kind = 'f'; m.f = NAN;
    m.skip_tensor = "blk.1.attn_sinks.weight";
    expect_bind_fail("two problems", &m, "rope.freq_base is NaN", "missing tensor blk.1.attn_sinks.weight");
    /* A wrong (but plausible) width breaks most tensors: capped at 50. */
    {
        m = M(); m.kv_key = "deepseek4.embedding_length"; m.kv_kind = 'u'; m.u = 96;
        char *p = tpath("variant.gguf");
        CHECK(write_tiny(p, &m) == 0, "write");
        char *e2 = bind_err(p, NULL);
        CHECK(e2 && strstr(e2, "more problems"), "cap: %s", e2 ? e2 : "(accepted)");
        if (e2) CHECK(count_lines(e2) == 51, "cap: %d lines", count_lines(e2));
        free(e2);
        unlink(p);
    }
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

static void test_writer(void) {
    char *err = NULL;
    const char *path = tpath("rt.gguf");
    gguf_writer *w = gguf_writer_open(path, &err);
    CHECK(w != NULL, "writer open: %s", err ? err : "");
    if (!w) { free(err); return; }
    gguf_w_u32(w, "general.alignment", 64);
    gguf_w_u32(w, "a.u32", 123456);
    gguf_w_i32(w, "a.i32", -7);
    gguf_w_u64(w, "a.u64", 1ull << 40);
    gguf_w_f32(w, "a.f32", 0.25f);
    gguf_w_bool(w, "a.bool", 1);
    gguf_w_str(w, "a.str", "h\xc3\xa9llo", 6);
    int16_t i16[3] = {-1, 2, -3};
    gguf_w_arr(w, "a.arr_i16", GGUF_I16, i16, 3);
    double f64[2] = {1.5, -2.25};
    gguf_w_arr(w, "a.arr_f64", GGUF_F64, f64, 2);
    gguf_str ss[3] = {{"x", 1}, {"", 0}, {"yz", 2}};
    gguf_w_arr_str(w, "a.arr_str", ss, 3);
    uint64_t ne1[2] = {8, 3}, ne2[1] = {64}, ne3[3] = {32, 2, 2};
    CHECK(gguf_w_tensor(w, "t.f32", 2, ne1, GGML_F32) == 0, "tensor 1");
    CHECK(gguf_w_tensor(w, "t.f16", 1, ne2, GGML_F16) == 0, "tensor 2");
    CHECK(gguf_w_tensor(w, "t.q8", 3, ne3, GGML_Q8_0) == 0, "tensor 3");
    uint8_t data[96 + 128 + 136];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7 + 3);
    /* Chunks that straddle tensor boundaries. */
    CHECK(gguf_writer_write(w, data, 50) == 0, "write a");
    CHECK(gguf_writer_write(w, data + 50, 200) == 0, "write b");
    CHECK(gguf_writer_write(w, data + 250, sizeof data - 250) == 0, "write c");
    CHECK(!file_exists(path), "final name must not exist before close");
    CHECK(gguf_writer_close(w, &err) == 0, "close: %s", err ? err : "");
    CHECK(!file_exists(tpath("rt.gguf.tmp")), "tmp left behind");

    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "read back: %s", err ? err : "");
    if (f) {
        uint32_t u32; int64_t i64; uint64_t u64; float f32; int b; gguf_str s;
        CHECK(f->alignment == 64 && f->data_offset % 64 == 0, "alignment");
        CHECK(gguf_get_u32(f, "a.u32", &u32) == 0 && u32 == 123456, "u32");
        CHECK(gguf_get_i64(f, "a.i32", &i64) == 0 && i64 == -7, "i32");
        CHECK(gguf_get_u32(f, "a.i32", &u32) == -2, "negative into u32 must fail");
        CHECK(gguf_get_u64(f, "a.u64", &u64) == 0 && u64 == 1ull << 40, "u64");
        CHECK(gguf_get_u32(f, "a.u64", &u32) == -2, "u64 too big for u32");
        CHECK(gguf_get_f32(f, "a.f32", &f32) == 0 && f32 == 0.25f, "f32");
        CHECK(gguf_get_bool(f, "a.bool", &b) == 0 && b == 1, "bool");
        CHECK(gguf_get_str(f, "a.str", &s) == 0 && s.len == 6 && !memcmp(s.p, "h\xc3\xa9llo", 6), "str");
        CHECK(gguf_get_str(f, "a.u32", &s) == -2 && gguf_get_u32(f, "nope", &u32) == -1, "type/missing");
        const gguf_kv *kv = gguf_find(f, "a.arr_i16");
        CHECK(kv && kv->type == GGUF_ARRAY && kv->v.arr.n == 3 && gguf_arr_i64(kv, 2, &i64) == 0 && i64 == -3,
              "arr i16");
        CHECK(kv && gguf_arr_i64(kv, 3, &i64) == -1, "arr out of range");
        double d;
        kv = gguf_find(f, "a.arr_f64");
        CHECK(kv && gguf_arr_f64(kv, 1, &d) == 0 && d == -2.25, "arr f64");
        kv = gguf_find(f, "a.arr_str");
        CHECK(kv && gguf_arr_str(kv, 0, &s) == 0 && s.len == 1 && s.p[0] == 'x', "arr str 0");
        CHECK(kv && gguf_arr_str(kv, 1, &s) == 0 && s.len == 0, "arr str 1");
        CHECK(kv && gguf_arr_str(kv, 2, &s) == 0 && s.len == 2 && !memcmp(s.p, "yz", 2), "arr str 2");
        const gguf_tensor *t1 = gguf_find_tensor(f, "t.f32"), *t2 = gguf_find_tensor(f, "t.f16"),
                          *t3 = gguf_find_tensor(f, "t.q8");
        CHECK(t1 && t2 && t3, "tensors present");
        if (t1 && t2 && t3) {
            CHECK(t1->n_dims == 2 && t1->ne[0] == 8 && t1->ne[1] == 3 && t1->nbytes == 96, "t1 shape");
            CHECK(t3->n_dims == 3 && t3->ne[2] == 2 && t3->nbytes == 136 && t3->type == GGML_Q8_0, "t3 shape");
            CHECK(t1->offset % 64 == 0 && t2->offset % 64 == 0 && t3->offset % 64 == 0, "offsets aligned");
            CHECK(!memcmp(t1->data, data, 96) && !memcmp(t2->data, data + 96, 128) &&
                  !memcmp(t3->data, data + 224, 136), "tensor bytes identical");
        }
        CHECK(gguf_find_tensor(f, "t.none") == NULL && gguf_find(f, "none") == NULL, "absent lookups");
        /* the mapping's page figures (Linux /proc/self/smaps): after every
         * byte is read, all of the file's pages are resident */
        uint64_t res = 1, huge = 1;
        if (access("/proc/self/smaps", R_OK) == 0) {
            volatile uint8_t sink = 0;
            for (uint64_t o = 0; o < f->size; o++) sink ^= ((const uint8_t *)f->map)[o];
            (void)sink;
            CHECK(gguf_map_pages(f, &res, &huge) == 0, "map pages: mapping not found in smaps");
            CHECK(res >= f->size && res < f->size + 4096 && huge <= res, "map pages: resident %llu huge %llu of %llu",
                  (unsigned long long)res, (unsigned long long)huge, (unsigned long long)f->size);
        } else {
            printf("skip: map pages (no /proc/self/smaps)\n");
        }
        gguf_close(f);
    }
    {
        static const uint8_t junk[8] = { 0 };
        char *e = NULL;
        gguf_file *fm = gguf_open_mem(junk, sizeof junk, "junk", &e);
        uint64_t res = 1, huge = 1;
        CHECK(gguf_map_pages(fm, &res, &huge) == -1 && res == 0 && huge == 0, "map pages of no mapping");
        gguf_close(fm);
        free(e);
    }
    free(err);
    err = NULL;

    /* Abort leaves nothing; short data fails at close and leaves nothing. */
    path = tpath("aborted.gguf");
    w = gguf_writer_open(path, &err);
    gguf_w_u32(w, "x", 1);
    gguf_w_tensor(w, "t", 2, ne1, GGML_F32);
    gguf_writer_write(w, data, 10);
    CHECK(tmp_beside(path), "tmp exists while writing");
    gguf_writer_abort(w);
    CHECK(!file_exists(path) && !tmp_beside(path), "abort left a file");
    w = gguf_writer_open(path, &err);
    gguf_w_tensor(w, "t", 2, ne1, GGML_F32);
    gguf_writer_write(w, data, 10);
    CHECK(gguf_writer_close(w, &err) != 0 && err && strstr(err, "got 10 of its 96 bytes"), "short: %s",
          err ? err : "");
    CHECK(!file_exists(path) && !tmp_beside(path), "failed close left a file");
    free(err);
    err = NULL;
    /* Writer misuse is reported. */
    w = gguf_writer_open(path, &err);
    gguf_w_u32(w, "x", 1);
    gguf_w_u32(w, "x", 2);
    CHECK(gguf_writer_close(w, &err) != 0 && err && strstr(err, "duplicate metadata key x"), "dup kv: %s",
          err ? err : "");
    free(err);
    err = NULL;
    w = gguf_writer_open(path, &err);
    gguf_w_tensor(w, "t", 2, ne1, GGML_F32);
    gguf_w_tensor(w, "t", 2, ne1, GGML_F32);
    CHECK(gguf_writer_close(w, &err) != 0 && err && strstr(err, "duplicate tensor name t"), "dup t: %s",
          err ? err : "");
    free(err);
    err = NULL;
    w = gguf_writer_open(path, &err);
    gguf_w_tensor(w, "t", 1, ne2, GGML_F16);
    gguf_writer_write(w, data, 300);
    CHECK(gguf_writer_close(w, &err) != 0 && err && strstr(err, "more tensor data"), "overlong: %s",
          err ? err : "");
    free(err);
    err = NULL;
    w = gguf_writer_open(path, &err);
    uint64_t bad[1] = {33};
    CHECK(gguf_w_tensor(w, "t", 1, bad, GGML_Q8_0) != 0, "Q8_0 of 33 accepted");
    gguf_writer_abort(w);
    CHECK(!file_exists(path), "misuse left a file");
    CHECK(gguf_writer_open(tpath("no/such/dir/x.gguf"), &err) == NULL && err, "open in missing dir");
    free(err);
}

/* Copies a GGUF (all kv verbatim, tensors and data) with the writer: the
 * result must be byte-identical for files laid out the standard way. */
static int copy_gguf(const gguf_file *src, const char *dst, const char *alter, uint64_t alter_ne1) {
    char *err = NULL;
    gguf_writer *w = gguf_writer_open(dst, &err);
    if (!w) { free(err); return -1; }
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_w_copy_kv(w, &src->kv[i]);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        uint64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        if (alter && !strcmp(alter, t->name)) ne[1] = alter_ne1;
        gguf_w_tensor(w, t->name, t->n_dims, ne, t->type);
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        if (alter && !strcmp(alter, t->name)) {
            uint64_t n = t->nbytes / t->ne[1] * alter_ne1;
            uint8_t *z = calloc(1, n);
            gguf_writer_write(w, z, n);
            free(z);
        } else {
            gguf_writer_write(w, t->data, t->nbytes);
        }
    }
    int r = gguf_writer_close(w, &err);
    if (r) fprintf(stderr, "copy: %s\n", err);
    free(err);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Shared files                                                              */
/* ------------------------------------------------------------------------ */

static char *found[32];
static int n_found;

static int collect(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)ftw;
    size_t n = strlen(p);
    if (flag == FTW_F && n > 5 && !strcmp(p + n - 5, ".gguf") && n_found < 32) found[n_found++] = strdup(p);
    return 0;
}

static char *inspect_text(const char *path, int *rc, char **err) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    *rc = ds4_inspect(path, m, err);
    fclose(m);
    return buf;
}

/* No byte of `s` may drive a terminal: C0 controls, DEL, C1 controls
 * (as UTF-8 or raw), ESC above all. */
static int terminal_safe(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) {
        if ((p[i] < 0x20 && p[i] != '\n') || p[i] == 0x7f) return 0;
        if (p[i] == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) return 0;
    }
    return 1;
}

/* Control bytes and ESC sequences from a GGUF reach the screen only
 * escaped: ds4_escape itself, --inspect, and open/bind error messages. */
static void test_escaping(void) {
    char buf[64];
    CHECK(!strcmp(ds4_escape(buf, sizeof buf, "a\x1b[31mb\n\"q\\", 11), "a\\x1b[31mb\\n\\\"q\\\\"),
          "escape C0/quote/backslash: %s", buf);
    CHECK(!strcmp(ds4_escape(buf, sizeof buf, "\xc2\x9b" "2J\xe2\x80\xae" "x\xff\xe2\x82", 11),
                  "\\u{009b}2J\\u{202e}x\\xff\\xe2\\x82"), "escape C1/bidi/invalid: %s", buf);
    CHECK(!strcmp(ds4_escape(buf, sizeof buf, "caf\xc3\xa9 \xe2\x96\x81", 9), "caf\xc3\xa9 \xe2\x96\x81"),
          "valid UTF-8 kept: %s", buf);
    /* cut with "...", never inside an escape or a character */
    CHECK(!strcmp(ds4_escape(buf, 10, "abcdef\x1bxyz", 10), "abcdef..."), "cut: %s", buf);
    CHECK(!strcmp(ds4_escape(buf, 10, "abcdef\xc3\xa9zz", 10), "abcdef..."), "cut before a character: %s", buf);
    CHECK(!strcmp(ds4_escape(buf, 6, "abcde", 5), "abcde"), "exact fit: %s", buf);

    /* a file whose key, name, string value and tensor name carry escapes */
    const char *key = "evil\x1b]0;pwned\x07.key";
    const char *name = "\x1b[2J\x1b[31mred\xc2\x9b" "1;1H\nforged line";
    const char *tname = "t\x1b[5m";
    rb b = {0};
    rb_hdr(&b, 3, 1, 3);
    rb_kv_u32(&b, key, 7);
    rb_str(&b, "general.name"); rb_u32(&b, GGUF_STRING); rb_str(&b, name);
    rb_str(&b, "general.architecture"); rb_u32(&b, GGUF_STRING); rb_str(&b, "llama\x1b[0m");
    uint64_t ne[1] = {8};
    rb_tensor(&b, tname, 1, ne, GGML_F32, 0);
    rb_pad(&b, 32);
    rb_zeros(&b, 32);
    char *path = tpath("escapes.gguf");
    write_all(path, b.p, b.n);
    int rc = 0;
    char *err = NULL;
    char *txt = inspect_text(path, &rc, &err);
    CHECK(rc != 0 && err, "inspect of a non-deepseek4 file fails");
    CHECK(txt && terminal_safe(txt, strlen(txt)), "inspect output carries raw control bytes");
    CHECK(txt && strstr(txt, "evil\\x1b]0;pwned\\x07.key"), "inspect shows the key escaped");
    CHECK(txt && strstr(txt, "\\x1b[2J\\x1b[31mred\\u{009b}1;1H\\nforged line"), "inspect shows the name escaped");
    CHECK(txt && strstr(txt, "\"llama\\x1b[0m\", expected"), "the validator names the architecture escaped");
    CHECK(err && terminal_safe(err, strlen(err)), "inspect error carries raw control bytes");
    free(txt);
    free(err);
    err = NULL;

    /* a rejected tensor named with an ESC sequence */
    rb_hdr(&b, 3, 1, 0);
    uint64_t bad[1] = {0};
    rb_tensor(&b, tname, 1, bad, GGML_F32, 0);
    rb_pad(&b, 32);
    char *e = open_err(&b, "escapes2.gguf");
    CHECK(e && strstr(e, "tensor t\\x1b[5m has invalid dim"), "open error names the tensor escaped: %s",
          e ? "(has raw bytes)" : "(accepted)");
    CHECK(e && terminal_safe(e, strlen(e)), "open error carries raw control bytes");
    free(e);

    /* duplicate keys with control bytes */
    rb_hdr(&b, 3, 0, 2);
    rb_kv_u32(&b, key, 1);
    rb_kv_u32(&b, key, 2);
    e = open_err(&b, "escapes3.gguf");
    CHECK(e && strstr(e, "duplicate metadata key evil\\x1b") && terminal_safe(e, strlen(e)),
          "duplicate key message escaped");
    free(e);
    free(b.p);
}

static void test_shared(void) {
    /* ../shared may itself be a symlink: resolve it, then walk without
     * following links below it */
    char real[4096];
    nftw(realpath(shared, real) ? real : shared, collect, 16, FTW_PHYS);
    int n_models = 0, n_vocab = 0;
    for (int i = 0; i < n_found; i++) {
        char *err = NULL;
        double t0 = now();
        gguf_file *f = gguf_open(found[i], &err);
        double dt = now() - t0;
        CHECK(f != NULL, "shared file %s: %s", found[i], err ? err : "");
        free(err);
        err = NULL;
        if (!f) continue;
        CHECK(dt < 0.5, "%s: open took %.3fs", found[i], dt);
        const gguf_kv *toks = gguf_find(f, "tokenizer.ggml.tokens");
        CHECK(toks && toks->type == GGUF_ARRAY && toks->v.arr.type == GGUF_STRING, "%s: tokens", found[i]);
        gguf_str s;
        CHECK(toks && gguf_arr_str(toks, 0, &s) == 0 && s.len == strlen("<｜begin▁of▁sentence｜>") &&
              !memcmp(s.p, "<｜begin▁of▁sentence｜>", s.len), "%s: token 0 is BOS", found[i]);
        if (f->n_tensors) {
            ds4_weights w;
            int rc = ds4_weights_bind(f, &w, &err);
            CHECK(rc == 0, "bind %s:\n%s", found[i], err ? err : "");
            if (rc == 0) {
                n_models++;
                CHECK(w.cfg.n_layer == 6 && w.cfg.n_embd == 256 && w.cfg.n_vocab == 4096, "%s cfg", found[i]);
                CHECK(w.cfg.compress_ratios[3] == 128 && w.layers[2].has_indexer && w.layers[2].coff == 2 &&
                      !w.layers[3].has_indexer && w.layers[3].coff == 1, "%s layer kinds", found[i]);
                CHECK(w.layers[2].tid2eid.data && !w.layers[3].tid2eid.data && w.layers[3].exp_probs_b.data,
                      "%s routing tensors", found[i]);
                CHECK(w.n_bound == f->n_tensors, "%s: %" PRIu64 " of %" PRIu64 " bound", found[i], w.n_bound,
                      f->n_tensors);
                uint64_t act = ds4_weights_active_bytes(&w);
                CHECK(act > 0 && act < f->size, "%s active bytes", found[i]);
                ds4_weights_free(&w);
            }
            free(err);
            err = NULL;
        } else {
            n_vocab++;
        }
        gguf_close(f);

        int rc;
        char *txt = inspect_text(found[i], &rc, &err);
        CHECK(rc == 0, "inspect %s: %s", found[i], err ? err : "");
        CHECK(txt && strstr(txt, "deepseek4.vocab_size") && strstr(txt, "merges"), "inspect text %s", found[i]);
        if (txt && !strstr(found[i], "models/")) CHECK(strstr(txt, "vocab-only") != NULL, "vocab-only note");
        if (txt && strstr(found[i], "models/"))
            CHECK(strstr(txt, "layers 6, embedding 256, vocab 4096") && strstr(txt, "weights read per decoded token"),
                  "inspect shape %s", found[i]);
        free(txt);
        free(err);
    }
    CHECK(n_models == 3 && n_vocab == 2, "expected 3 models (f16, q2, mxfp4) and 2 vocab files under %s, got %d and %d", shared,
          n_models, n_vocab);

    /* Whole-file SHA-256 equals the published one (exercises SHA-256 on
     * 15 MB), and a writer copy of the q2 model is byte-identical. */
    char mp[512], mf[512];
    snprintf(mp, sizeof mp, "%s/golden/models/tiny-a-q2.gguf", shared);
    snprintf(mf, sizeof mf, "%s/golden/tiny-a-q2/manifest.json", shared);
    size_t n_man = 0, n_model = 0;
    char *man = (char *)read_all(mf, &n_man);
    uint8_t *model = read_all(mp, &n_model);
    CHECK(man && model, "read %s / %s", mp, mf);
    if (man && model) {
        man = realloc(man, n_man + 1);
        man[n_man] = 0;
        uint8_t h[32];
        char hx[65];
        ds4_sha256(model, n_model, h);
        ds4_hex(h, 32, hx);
        const char *q = strstr(man, "\"model_sha256\"");
        CHECK(q && strstr(q, hx) && strstr(q, hx) - q < 40, "sha256 of %s = %s not in manifest", mp, hx);

        char *err = NULL;
        gguf_file *src = gguf_open(mp, &err);
        const char *cp = tpath("copy.gguf");
        CHECK(src && copy_gguf(src, cp, NULL, 0) == 0, "copy q2");
        size_t n_copy = 0;
        uint8_t *copy = read_all(cp, &n_copy);
        CHECK(copy && n_copy == n_model && !memcmp(copy, model, n_model), "writer copy is not byte-identical");
        free(copy);
        /* The same layout with one dim altered: the real-layout message. */
        CHECK(src && copy_gguf(src, cp, "blk.3.attn_q_b.weight", 2304) == 0, "altered copy");
        char *e = bind_err(cp, NULL);
        CHECK(e && strstr(e, "tensor blk.3.attn_q_b.weight has dims [128, 2304], expected [128, 2048]"),
              "real-layout dims message: %s", e ? e : "(accepted)");
        CHECK(e && count_lines(e) == 1, "exactly one problem expected: %s", e ? e : "");
        free(e);
        int rc;
        char *txt = inspect_text(cp, &rc, &err);
        CHECK(rc == DS4_EFORMAT && err && txt && strstr(txt, "blk.3.attn_q_b.weight has dims"),
              "inspect of a broken model: rc %d", rc);
        free(txt);
        free(err);
        err = NULL;
        /* Fingerprint: layout only (data changes do not move it). */
        uint8_t fa[20], fb[20];
        gguf_file *g = gguf_open(cp, &err);
        if (src && g) {
            ds4_gguf_fingerprint(src, fa);
            ds4_gguf_fingerprint(g, fb);
            CHECK(memcmp(fa, fb, 20) != 0, "fingerprint ignores a dims change");
        }
        gguf_close(g);
        unlink(cp);
        gguf_close(src);
        free(err);
    }
    free(man);
    free(model);

    /* A vocab-only file (no tensors) also copies byte for byte. */
    char vp[512];
    snprintf(vp, sizeof vp, "%s/vocab/deepseek-v4-vocab.gguf", shared);
    char *err = NULL;
    gguf_file *v = gguf_open(vp, &err);
    CHECK(v != NULL, "open %s: %s", vp, err ? err : "");
    if (v) {
        const char *cp = tpath("vocab_copy.gguf");
        CHECK(copy_gguf(v, cp, NULL, 0) == 0, "copy vocab");
        size_t na = 0, nb = 0;
        uint8_t *a = read_all(vp, &na), *b = read_all(cp, &nb);
        CHECK(a && b && na == nb && !memcmp(a, b, na), "vocab copy is not byte-identical");
        free(a);
        free(b);
        unlink(cp);
        gguf_close(v);
    }
    free(err);
    for (int i = 0; i < n_found; i++) free(found[i]);
}

/* Truncating a valid model anywhere before the end of its last tensor must
 * be rejected (exact-size heap copies so ASan sees any over-read). */
static void test_truncation(void) {
    mut m = M();
    char *path = tpath("trunc_src.gguf");
    CHECK(write_tiny(path, &m) == 0, "write");
    size_t n = 0;
    uint8_t *all = read_all(path, &n);
    char *err = NULL;
    gguf_file *f = gguf_open(path, &err);
    CHECK(f != NULL, "open trunc src");
    if (!f || !all) { free(all); free(err); return; }
    uint64_t last_end = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t e = f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes;
        if (e > last_end) last_end = e;
    }
    uint64_t dir_end = f->dir_end;
    gguf_close(f);
    int bad = 0;
    for (size_t cut = 0; cut < last_end; cut += cut < dir_end + 64 ? 1 : 997) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, all, cut);
        char *e = NULL;
        gguf_file *g = gguf_open_mem(c, cut, "cut", &e);
        if (g || !e) bad++;
        gguf_close(g);
        free(e);
        free(c);
    }
    CHECK(bad == 0, "%d truncated copies were accepted", bad);
    /* File-based, at a few offsets. */
    const size_t cuts[] = {0, 3, 4, 8, 23, 24, 100, (size_t)dir_end - 1, (size_t)dir_end, (size_t)last_end - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_all(tpath("trunc.gguf"), all, cuts[i]);
        char *e = NULL;
        gguf_file *g = gguf_open(tpath("trunc.gguf"), &e);
        CHECK(!g && e, "file truncated at %zu accepted", cuts[i]);
        gguf_close(g);
        free(e);
    }
    /* Flipping each header/directory byte must never crash (result may be
     * either way); run the binder on whatever still opens. */
    for (size_t i = 0; i < dir_end; i += 3) {
        uint8_t *c = malloc(n);
        memcpy(c, all, n);
        c[i] ^= 0xff;
        char *e = NULL;
        gguf_file *g = gguf_open_mem(c, n, "flip", &e);
        if (g) {
            ds4_weights w;
            char *be = NULL;
            if (ds4_weights_bind(g, &w, &be) == 0) ds4_weights_free(&w);
            free(be);
            FILE *devnull = fopen("/dev/null", "w");
            char *ie = NULL;
            ds4_inspect_gguf(g, devnull, &ie);
            free(ie);
            fclose(devnull);
        }
        gguf_close(g);
        free(e);
        free(c);
    }
    unlink(tpath("trunc.gguf"));
    unlink(path);
    free(all);
    free(err);
}

/* ------------------------------------------------------------------------ */
/* Hashes                                                                    */
/* ------------------------------------------------------------------------ */

static void hexof(const uint8_t *d, size_t n, char *out) { ds4_hex(d, n, out); }

static void test_hashes(void) {
    static const struct { const char *in; const char *sha1, *sha256; } vec[] = {
        {"", "da39a3ee5e6b4b0d3255bfef95601890afd80709",
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "a9993e364706816aba3e25717850c26c9cd0d89d",
         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "84983e441c3bd26ebaae4aa1f95129e5e54670f1",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    uint8_t h[32];
    char hx[65];
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        ds4_sha1(vec[i].in, strlen(vec[i].in), h);
        hexof(h, 20, hx);
        CHECK(!strcmp(hx, vec[i].sha1), "sha1(%s) = %s", vec[i].in, hx);
        ds4_sha256(vec[i].in, strlen(vec[i].in), h);
        hexof(h, 32, hx);
        CHECK(!strcmp(hx, vec[i].sha256), "sha256(%s) = %s", vec[i].in, hx);
    }
    /* One million 'a' (FIPS test), fed in uneven pieces. */
    char *a = malloc(1000000);
    memset(a, 'a', 1000000);
    ds4_sha1_ctx c1;
    ds4_sha256_ctx c2;
    ds4_sha1_init(&c1);
    ds4_sha256_init(&c2);
    for (size_t off = 0, k = 1; off < 1000000; off += k, k = k * 3 % 1000 + 1) {
        size_t n = off + k > 1000000 ? 1000000 - off : k;
        ds4_sha1_update(&c1, a + off, n);
        ds4_sha256_update(&c2, a + off, n);
    }
    ds4_sha1_final(&c1, h);
    hexof(h, 20, hx);
    CHECK(!strcmp(hx, "34aa973cd4c4daa4f61eeb2bdbad27316534016f"), "sha1(1M a) = %s", hx);
    ds4_sha256_final(&c2, h);
    hexof(h, 32, hx);
    CHECK(!strcmp(hx, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"), "sha256(1M a) = %s", hx);

    /* XXH64 reference values. */
    static const struct { const char *in; uint64_t seed, h; } xv[] = {
        {"", 0, 0xef46db3751d8e999ull},
        {"a", 0, 0xd24ec4f1a98c6e5bull},
        {"abc", 0, 0x44bc2cf5ad770999ull},
        {"xxhash", 0, 0x32dd38952c4bc720ull},
        {"The quick brown fox jumps over the lazy dog", 0, 0x0b242d361fda71bcull},
        {"", 0x1234567890abcdefull, 0xa2f5c44d0f46c872ull},
        {"0", 0, 0x633457081244afecull},
    };
    for (size_t i = 0; i < sizeof xv / sizeof xv[0]; i++) {
        uint64_t r = ds4_xxh64(xv[i].in, strlen(xv[i].in), xv[i].seed);
        CHECK(r == xv[i].h, "xxh64(\"%s\") = %016" PRIx64, xv[i].in, r);
    }
    /* Streaming equals one-shot for every length 0..300 and split point. */
    uint8_t buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 131 + 7);
    int bad = 0;
    for (size_t len = 0; len <= 300; len += 1) {
        uint64_t one = ds4_xxh64(buf, len, 42);
        ds4_xxh64_ctx x;
        ds4_xxh64_init(&x, 42);
        for (size_t off = 0, k = 1; off < len; off += k, k = k % 37 + 5)
            ds4_xxh64_update(&x, buf + off, off + k > len ? len - off : k);
        bad += ds4_xxh64_digest(&x) != one;
    }
    CHECK(bad == 0, "xxh64 streaming differs from one-shot in %d cases", bad);
    /* Speed (informational; asserted only very loosely). */
    size_t big = 64 << 20;
    uint8_t *m = malloc(big);
    memset(m, 0x5a, big);
    double t0 = now();
    volatile uint64_t sink = ds4_xxh64(m, big, 0);
    double dt = now() - t0;
    (void)sink;
    printf("xxh64: %.2f GB/s\n", big / dt / 1e9);
    CHECK(dt < 2.0, "xxh64 too slow: %.2fs for 64 MiB", dt);
    free(m);
    free(a);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}

int main(void) {
    shared = getenv("DS4_SHARED");
    if (!shared || !*shared) shared = "../shared";
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ds4_test_gguf.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }

    double t0 = now();
    test_hashes();
    test_hostile();
    test_writer();
    test_tiny_model();
    test_truncation();
    test_escaping();
    test_shared();
    nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    printf("test_gguf: %d checks passed, %d failed (%.2fs)\n", n_pass, n_fail, now() - t0);
    return n_fail ? 1 : 0;
}
