/*
 * test_safetensors.c -- the checkpoint reader (src/gguf/safetensors.c) and
 * the imatrix file (src/engine/imatrix.c): element codecs against their
 * definitions, header validation on hand-made shards (good, overlapping,
 * out of bounds, bad dtype, size mismatch, index disagreements), and the
 * imatrix save/load round trip and its refusals.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/imatrix.h"
#include "gguf/safetensors.h"
#include "testutil.h"

static char dir[256];

static void write_shard(const char *name, const char *json, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    uint64_t hl = strlen(json);
    fwrite(&hl, 8, 1, f);
    fwrite(json, 1, hl, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void write_text(const char *name, const char *s) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(s, f);
    fclose(f);
}

static void clean(void) {
    const char *names[] = {"model.safetensors", "a.safetensors", "b.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
}

/* Opens dir and expects failure with `pat` in the message. */
static void expect_fail(const char *what, const char *pat) {
    char *err = NULL;
    st_checkpoint *c = st_open_dir(dir, &err);
    CHECK(!c, "%s: accepted", what);
    CHECK(err && strstr(err, pat), "%s: message \"%s\" lacks \"%s\"", what, err ? err : "(none)", pat);
    st_close(c);
    free(err);
}

static void test_codecs(void) {
    /* E4M3FN: every code decodes per the formula and re-encodes to itself
     * (except NaN and -0 -> 0x80 is kept by the sign). */
    int nan = 0;
    for (int b = 0; b < 256; b++) {
        float v = st_e4m3_to_f32((uint8_t)b);
        int e = (b >> 3) & 15, m = b & 7;
        if (e == 15 && m == 7) { CHECK(isnan(v), "e4m3 0x%02x should be NaN", b); nan++; continue; }
        double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m, -9);
        if (b & 0x80) want = -want;
        CHECK(v == (float)want, "e4m3 0x%02x = %g, want %g", b, v, want);
        CHECK(st_f32_to_e4m3(v) == b, "e4m3 encode(%g) = 0x%02x, want 0x%02x", v, st_f32_to_e4m3(v), b);
    }
    CHECK(nan == 2, "e4m3 has %d NaN codes", nan);
    CHECK(st_e4m3_to_f32(0x7e) == 448.0f, "e4m3 max");
    CHECK(st_f32_to_e4m3(1000.0f) == 0x7e, "e4m3 saturates");
    /* ties to even: 1.0625 is halfway between 1 (m=0) and 1.125 (m=1) */
    CHECK(st_f32_to_e4m3(1.0625f) == 0x38, "e4m3 tie to even (got 0x%02x)", st_f32_to_e4m3(1.0625f));
    CHECK(st_e8m0_to_f32(127) == 1.0f && st_e8m0_to_f32(0) == ldexpf(1, -127) && isnan(st_e8m0_to_f32(255)),
          "e8m0");
    static const float T[8] = {0, .5f, 1, 1.5f, 2, 3, 4, 6};
    for (unsigned c = 0; c < 16; c++) {
        float v = st_e2m1_to_f32(c);
        CHECK(fabsf(v) == T[c & 7] && (!(c & 8) || signbit(v) || v == 0), "e2m1 %u", c);
        CHECK(st_f32_to_e2m1(v) == c, "e2m1 encode %u", c);
    }
    CHECK(st_f32_to_e2m1(2.5f) == 4 && st_f32_to_e2m1(5.0f) == 6 && st_f32_to_e2m1(0.25f) == 0,
          "e2m1 ties to even");
    CHECK(st_f32_to_e2m1(100.0f) == 7, "e2m1 saturates");
    CHECK(st_bf16_to_f32(0x3f80) == 1.0f && st_f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
    CHECK(st_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 tie to even");   /* 1 + 2^-8 */
}

static void test_headers(void) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    char *err = NULL;

    clean();
    write_shard("model.safetensors",
                "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                "\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]}}",
                data, sizeof data);
    st_checkpoint *c = st_open_dir(dir, &err);
    CHECK(c, "single shard: %s", err ? err : "");
    if (c) {
        const st_tensor *a = st_find(c, "a"), *b = st_find(c, "b");
        CHECK(a && a->dtype == ST_F32 && a->n_dims == 2 && a->shape[1] == 2 && a->nbytes == 16, "tensor a");
        CHECK(a && !memcmp(a->data, data, 16), "tensor a data");
        CHECK(b && b->dtype == ST_BF16 && b->nbytes == 8, "tensor b");
        CHECK(!st_find(c, "c") && st_count(c) == 2 && st_total_bytes(c) == 24, "lookup/count");
        st_close(c);
    }
    free(err);
    err = NULL;

    write_shard("model.safetensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, sizeof data);
    expect_fail("overlap", "overlap");
    write_shard("model.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}",
                data, sizeof data);
    expect_fail("past the end", "truncated");
    write_shard("model.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}",
                data, sizeof data);
    expect_fail("size mismatch", "needs 12");
    write_shard("model.safetensors", "{\"a\":{\"dtype\":\"C64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                data, sizeof data);
    expect_fail("unknown dtype", "\"C64\"");
    write_shard("model.safetensors", "{\"a\":{\"dtype\":\"F32\"}}", data, sizeof data);
    expect_fail("incomplete entry", "lacks");
    write_shard("model.safetensors", "[1,2]", data, sizeof data);
    expect_fail("not an object", "not a JSON object");
    {
        char p[512];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        FILE *f = fopen(p, "wb");
        uint64_t hl = 1ull << 40;
        fwrite(&hl, 8, 1, f);
        fclose(f);
    }
    expect_fail("huge header length", "does not fit");
    clean();
    expect_fail("empty directory", "neither");

    /* sharded, with an index */
    write_shard("a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    write_shard("b.safetensors", "{\"y\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", data, 8);
    write_text("model.safetensors.index.json",
               "{\"metadata\":{},\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    c = st_open_dir(dir, &err);
    CHECK(c && st_find(c, "x") && st_find(c, "y") && st_find(c, "y")->dtype == ST_I64, "index: %s",
          err ? err : "");
    st_close(c);
    free(err);
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"b.safetensors\",\"y\":\"b.safetensors\"}}");
    expect_fail("index places x in the wrong shard", "does not hold it");
    write_shard("a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", data, 16);
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    expect_fail("shard tensor missing from the index", "not in the index");
    write_shard("a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"c.safetensors\"}}");
    expect_fail("missing shard", "missing shard");
    write_shard("b.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"a.safetensors\",\"z\":\"b.safetensors\"}}");
    expect_fail("tensor in two shards", "two shards");
    clean();
}

static void test_imatrix(void) {
    ds4_imatrix *im = ds4_imatrix_alloc(2, 3, 4, 2);
    CHECK(im, "alloc");
    if (!im) return;
    /* layer 1: 3 pairs; expert 0 gets pair 0 (token 1), expert 2 pairs 1, 2 */
    float a[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
    float h[3 * 2] = {1, -1, 2, 0, 3, 1};
    int rows[3] = {1, 0, 1}, eoff[3] = {0, 1, 1}, ecount[3] = {1, 0, 2};
    ds4_imatrix_add_moe(im, 1, a, h, rows, eoff, ecount);
    im->n_tokens = 2;
    char p[512], *err = NULL;
    snprintf(p, sizeof p, "%s/im.dat", dir);
    CHECK(!ds4_imatrix_save(im, p, &err), "save: %s", err ? err : "");
    ds4_imatrix *l = ds4_imatrix_load(p, &err);
    CHECK(l, "load: %s", err ? err : "");
    if (l) {
        CHECK(l->n_tokens == 2 && !ds4_imatrix_gu(l, 0, 0) && !ds4_imatrix_gu(l, 1, 1), "unrouted experts");
        const double *g0 = ds4_imatrix_gu(l, 1, 0), *g2 = ds4_imatrix_gu(l, 1, 2), *d2 = ds4_imatrix_dn(l, 1, 2);
        CHECK(g0 && g0[0] == 25 && g0[3] == 64, "expert 0 gate/up mean");
        CHECK(g2 && g2[0] == (1 + 25) / 2.0 && g2[1] == (4 + 36) / 2.0, "expert 2 gate/up mean");
        CHECK(d2 && d2[0] == (4 + 9) / 2.0 && d2[1] == 0.5, "expert 2 down mean");
        ds4_imatrix_free(l);
    }
    /* truncated and foreign files are refused */
    truncate(p, 60);
    l = ds4_imatrix_load(p, &err);
    CHECK(!l && err && strstr(err, "truncated"), "truncated imatrix: %s", err ? err : "accepted");
    free(err);
    err = NULL;
    write_text("im.dat", "GGUF....");
    l = ds4_imatrix_load(p, &err);
    CHECK(!l && err && strstr(err, "not a ds4 importance matrix"), "foreign file");
    free(err);
    unlink(p);
    ds4_imatrix_free(im);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/test_safetensors.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    test_codecs();
    test_headers();
    test_imatrix();
    rmdir(dir);
    printf("test_safetensors: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
