/*
 * test_glm_session.c -- the session contracts of a glm-dsa model
 * (src/models/glm_dsa.c), on the tiny file of tests/glm_gguf.py that
 * tests/t_glm_engine.sh writes and passes as argv[1] (run alone, without
 * it, the test says so and passes):
 *   - rewind is a truncation: ds4_session_rewind to any count, then the
 *     same tokens again, gives the logits of an uninterrupted run, bit for
 *     bit; ds4_session_sync after a divergence reuses all but one token of
 *     the common prefix and matches a fresh evaluation; a sync to a
 *     shorter prefix gives that prefix's logits;
 *   - a staged (draft) pass gives each row a fresh run's logits, and a
 *     commit of fewer rows continues exactly;
 *   - snapshots are refused (DS4_EUNSUP, with a message), never written;
 *   - the KV byte count is the rows held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"

static int fails;
#define CHECK(c, ...) do { if (!(c)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
                                       printf(__VA_ARGS__); printf("\n"); } } while (0)

static ds4_session *fresh(ds4_model *m) {
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = 256;
    sp.prefill_chunk = 48;
    char *err = NULL;
    ds4_session *s = ds4_session_new(m, &sp, &err);
    if (!s) { printf("FAIL session: %s\n", err ? err : "?"); exit(1); }
    return s;
}

/* the logits after evaluating ids[0..n) in a new session */
static float *logits_of(ds4_model *m, const int32_t *ids, int n, int nv) {
    ds4_session *s = fresh(m);
    CHECK(ds4_session_eval(s, ids, n, NULL, NULL) == DS4_OK, "eval %d", n);
    float *l = malloc((size_t)nv * sizeof *l);
    memcpy(l, ds4_session_logits(s), (size_t)nv * sizeof *l);
    ds4_session_free(s);
    return l;
}

static int same(const float *a, const float *b, int nv) {
    return a && b && !memcmp(a, b, (size_t)nv * sizeof *a);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : getenv("DS4_GLM_MODEL");
    if (!path) {
        printf("test_glm_session: no model given (tests/t_glm_engine.sh runs it on a tiny glm-dsa file)\n");
        return 0;
    }
    char *err = NULL;
    ds4_model *m = ds4_model_load(path, NULL, &err);
    if (!m) { printf("FAIL load: %s\n", err ? err : "?"); return 1; }
    ds4_model_info mi;
    ds4_model_get_info(m, &mi);
    CHECK(!strcmp(mi.arch, "glm-dsa"), "arch %s", mi.arch);
    const int nv = mi.n_vocab;
    int32_t ids[160], alt[160];
    unsigned x = 12345;
    for (int i = 0; i < 160; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (int32_t)(10 + (x >> 8) % 4000);
        alt[i] = i < 80 ? ids[i] : (int32_t)(10 + (ids[i] + 7) % 4000);
    }
    float *l120 = logits_of(m, ids, 120, nv), *l60 = logits_of(m, ids, 60, nv);

    /* rewind to 30, the same tokens again */
    ds4_session *s = fresh(m);
    CHECK(ds4_session_eval(s, ids, 120, NULL, NULL) == DS4_OK, "eval 120");
    CHECK(same(ds4_session_logits(s), l120, nv), "one session == fresh at 120");
    CHECK(ds4_session_rewind(s, 30) == DS4_OK, "rewind 30");
    CHECK(ds4_session_n_tokens(s) == 30 && !ds4_session_logits(s), "rewound: 30 tokens, no logits");
    CHECK(ds4_session_eval(s, ids + 30, 30, NULL, NULL) == DS4_OK, "eval 30..60");
    CHECK(same(ds4_session_logits(s), l60, nv), "rewind 30 + 30 tokens == fresh 60, bit for bit");
    CHECK(ds4_session_rewind(s, 61) == DS4_EINVAL, "rewind past the end");

    /* sync after a divergence at 80 */
    ds4_session *d = fresh(m);
    CHECK(ds4_session_eval(d, alt, 140, NULL, NULL) == DS4_OK, "eval alt");
    int reused = -1;
    CHECK(ds4_session_sync(d, ids, 120, NULL, NULL, &reused) == DS4_OK, "sync");
    CHECK(reused == 79, "sync reused %d tokens, expected 79", reused);
    CHECK(same(ds4_session_logits(d), l120, nv), "sync after a divergence == fresh 120, bit for bit");
    /* sync to a shorter prefix */
    CHECK(ds4_session_sync(d, ids, 60, NULL, NULL, &reused) == DS4_OK, "sync 60");
    CHECK(ds4_session_n_tokens(d) == 60 && same(ds4_session_logits(d), l60, nv),
          "sync to a prefix: its logits, bit for bit");
    CHECK(ds4_session_kv_bytes(d) > 0 && ds4_session_kv_bytes(d) == ds4_session_kv_bytes(s),
          "kv bytes follow the rows held");

    /* a staged (draft) pass: every row's logits, then a commit of 3 of 5 */
    {
        ds4_session *q = fresh(m);
        CHECK(ds4_session_eval(q, ids, 55, NULL, NULL) == DS4_OK, "eval 55");
        CHECK(ds4_session_eval_draft(q, ids + 55, 5) == DS4_OK, "draft pass");
        CHECK(same(ds4_session_draft_logits(q, 4), l60, nv), "draft row 4 == fresh 60, bit for bit");
        float *l58 = logits_of(m, ids, 58, nv);
        CHECK(same(ds4_session_draft_logits(q, 2), l58, nv), "draft row 2 == fresh 58, bit for bit");
        CHECK(ds4_session_draft_commit(q, 3) == DS4_OK && ds4_session_n_tokens(q) == 58, "commit 3");
        CHECK(same(ds4_session_logits(q), l58, nv), "committed: fresh 58's logits");
        CHECK(ds4_session_eval(q, ids + 58, 2, NULL, NULL) == DS4_OK && same(ds4_session_logits(q), l60, nv),
              "continued after the commit == fresh 60, bit for bit");
        free(l58);
        ds4_session_free(q);
    }

    /* snapshots: refused */
    ds4_buf b = { 0 };
    CHECK(ds4_session_snapshot(d, &b) == DS4_EUNSUP && b.n == 0, "snapshot refused, nothing written");
    char *e2 = NULL;
    static const char junk[64];
    CHECK(ds4_session_restore(d, junk, sizeof junk, &e2) == DS4_EUNSUP && e2 && strstr(e2, "glm-dsa"),
          "restore refused with a message (%s)", e2 ? e2 : "none");
    CHECK(ds4_session_n_tokens(d) == 60, "a refused restore leaves the session");
    free(e2);
    ds4_buf_free(&b);

    ds4_session_free(d);
    ds4_session_free(s);
    free(l120);
    free(l60);
    ds4_model_free(m);
    if (fails) { printf("test_glm_session: %d failed\n", fails); return 1; }
    printf("test_glm_session: all passed\n");
    return 0;
}
