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
 *   - a snapshot ("GLMS") restored into a fresh session gives the live
 *     session's tokens and logits, and the same logits bit for bit on
 *     every token after (one chunk, token by token); a snapshot of a
 *     rewound session (no logits) restores without logits; truncated,
 *     reshaped, out-of-range, trailing-byte and DeepSeek V4 ("DS4S")
 *     snapshots are refused with a message and leave the session as it
 *     was;
 *   - the KV byte count is the rows held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "session_util.h"

/* CHECK, fresh, logits_of, same: session_util.h */

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

    /* snapshots: d holds ids[0..60) with logits */
    {
        ds4_buf b = { 0 };
        CHECK(ds4_session_snapshot(d, &b) == DS4_OK && b.n > 40, "snapshot written");
        CHECK(b.n == ds4_session_snapshot_size(d), "snapshot size %zu == its estimate %llu", b.n,
              (unsigned long long)ds4_session_snapshot_size(d));
        CHECK(!memcmp(b.p, "GLMS", 4), "the glm-dsa magic");
        ds4_session *r = fresh(m);
        char *e = NULL;
        CHECK(ds4_session_restore(r, b.p, b.n, &e) == DS4_OK, "restore: %s", e ? e : "ok");
        free(e);
        CHECK(ds4_session_n_tokens(r) == 60 && !memcmp(ds4_session_tokens(r), ids, 60 * sizeof(int32_t)),
              "restored tokens");
        CHECK(same(ds4_session_logits(r), l60, nv), "restored logits == live, bit for bit");
        CHECK(ds4_session_kv_bytes(r) == ds4_session_kv_bytes(d), "restored kv bytes");
        /* the same snapshot again from the restored session: same bytes */
        ds4_buf b2 = { 0 };
        CHECK(ds4_session_snapshot(r, &b2) == DS4_OK && b2.n == b.n && !memcmp(b2.p, b.p, b.n),
              "a restored session's snapshot is the same bytes");
        ds4_buf_free(&b2);
        /* continued decode, token by token, restored against live */
        int ok = 1;
        for (int i = 60; i < 72; i++) {
            ok &= ds4_session_eval(r, ids + i, 1, NULL, NULL) == DS4_OK;
            ok &= ds4_session_eval(d, ids + i, 1, NULL, NULL) == DS4_OK;
            ok &= same(ds4_session_logits(r), ds4_session_logits(d), nv);
        }
        CHECK(ok, "continued decode after a restore == the live session, bit for bit, every token");
        /* and as one chunk to 120 */
        CHECK(ds4_session_eval(r, ids + 72, 48, NULL, NULL) == DS4_OK && same(ds4_session_logits(r), l120, nv),
              "restore + 60 tokens == fresh 120, bit for bit");

        /* refusals: each leaves r (120 tokens) as it was */
        uint8_t *bad = malloc(b.n + 1);
        struct { const char *what, *msg; size_t len; int word, val; } cases[] = {
            { "truncated", "truncated", 0, -1, 0 },
            { "trailing bytes", "trailing", 1, -1, 0 },
            { "wrong shape", "shape", 0, 3, 7 },
            { "DeepSeek V4 snapshot", "DeepSeek V4", 0, 0, 0x53345344 },
            { "bad version", "version", 0, 1, 99 },
            { "token out of range", "out of range", 0, 10, 0x7fffffff },
            { "more tokens than the context", "context", 0, 8, 100000 },
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            size_t len = b.n;
            memcpy(bad, b.p, b.n);
            if (!strcmp(cases[k].what, "truncated")) len = b.n - 5;
            if (cases[k].len) bad[len++] = 0;
            if (cases[k].word >= 0) {
                uint32_t v = (uint32_t)cases[k].val;
                memcpy(bad + 4 * cases[k].word, &v, 4);
            }
            char *e3 = NULL;
            int rc = ds4_session_restore(r, bad, len, &e3);
            CHECK(rc == DS4_EFORMAT && e3 && strstr(e3, cases[k].msg), "%s refused (%d: %s)", cases[k].what, rc,
                  e3 ? e3 : "no message");
            CHECK(ds4_session_n_tokens(r) == 120 && same(ds4_session_logits(r), l120, nv),
                  "%s: the session as it was", cases[k].what);
            free(e3);
        }
        free(bad);
        ds4_session_free(r);
        ds4_buf_free(&b);
    }
    /* a rewound session (no logits): restored without logits, then exact */
    {
        ds4_session *w = fresh(m);
        CHECK(ds4_session_eval(w, ids, 50, NULL, NULL) == DS4_OK && ds4_session_rewind(w, 30) == DS4_OK,
              "eval 50, rewind 30");
        ds4_buf b = { 0 };
        CHECK(ds4_session_snapshot(w, &b) == DS4_OK, "snapshot of a rewound session");
        ds4_session *r = fresh(m);
        CHECK(ds4_session_restore(r, b.p, b.n, NULL) == DS4_OK && ds4_session_n_tokens(r) == 30 &&
              !ds4_session_logits(r), "restored: 30 tokens, no logits");
        CHECK(ds4_session_eval(r, ids + 30, 30, NULL, NULL) == DS4_OK && same(ds4_session_logits(r), l60, nv),
              "restored rewound + 30 == fresh 60, bit for bit");
        ds4_buf_free(&b);
        ds4_session_free(r);
        ds4_session_free(w);
    }

    ds4_session_free(d);
    ds4_session_free(s);
    free(l120);
    free(l60);
    ds4_model_free(m);
    if (fails) { printf("test_glm_session: %d failed\n", fails); return 1; }
    printf("test_glm_session: all passed\n");
    return 0;
}
