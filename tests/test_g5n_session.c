/*
 * test_g5n_session.c -- the session contracts of a glm5-next model
 * (src/models/glm5_next.c), whose KDA layers carry a recurrent state, on
 * the tiny file of tests/glm_gguf.py (argv[1] or $DS4_G5N_MODEL; without
 * either the test writes one with /usr/bin/python3 tests/glm_gguf.py, and
 * skips if it cannot):
 *   - checkpoint + rewind + continue == a fresh run, bit for bit; a rewind
 *     to a count no checkpoint holds is refused; sync after a divergence
 *     goes back to the checkpoint within the common prefix and matches a
 *     fresh evaluation;
 *   - snapshot -> restore into a fresh session == the live one (logits,
 *     and every token after, bit for bit; the restored session's snapshot
 *     is the same bytes); a corrupted, truncated or foreign snapshot is
 *     refused with a message and leaves the session as it was;
 *   - a staged (draft) pass gives each row a fresh run's logits, and a
 *     commit of fewer rows (the rejected ones other tokens) continues
 *     exactly as a session that never saw them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"
#include "session_util.h"

/* CHECK, fresh, logits_of, same: session_util.h */

/* a refused restore: DS4_EFORMAT with a message naming `what`, and the
 * session as it was */
static void refused(ds4_session *r, const void *p, size_t n, const char *what, const float *keep, int nv) {
    char *e = NULL;
    const int n0 = ds4_session_n_tokens(r);
    int rc = ds4_session_restore(r, p, n, &e);
    CHECK(rc == DS4_EFORMAT && e && strstr(e, what), "%s snapshot refused (rc %d: %s)", what, rc, e ? e : "none");
    CHECK(ds4_session_n_tokens(r) == n0 && same(ds4_session_logits(r), keep, nv),
          "a refused (%s) restore leaves the session", what);
    free(e);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : getenv("DS4_G5N_MODEL");
    char tmp[] = "/tmp/ds4-g5n-XXXXXX", made[64] = "";
    if (!path) {
        if (!mkdtemp(tmp)) { printf("test_g5n_session: no temporary directory: skipped\n"); return 0; }
        snprintf(made, sizeof made, "%s/g5n.gguf", tmp);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/glm_gguf.py glm5-next %s > /dev/null 2>&1", made);
        if (system(cmd) != 0) {
            printf("test_g5n_session: no model given and tests/glm_gguf.py could not write one: skipped\n");
            rmdir(tmp);
            return 0;
        }
        path = made;
    }
    char *err = NULL;
    ds4_model *m = ds4_model_load(path, NULL, &err);
    if (made[0]) { unlink(made); rmdir(tmp); }
    if (!m) { printf("FAIL load: %s\n", err ? err : "?"); return 1; }
    ds4_model_info mi;
    ds4_model_get_info(m, &mi);
    CHECK(!strcmp(mi.arch, "glm5-next"), "arch %s", mi.arch);
    CHECK(ds4_model_format(m) == DS4_FORMAT_GLM, "glm5-next speaks GLM's prompt format");
    const int nv = mi.n_vocab;
    int32_t ids[200], alt[200];
    unsigned x = 12345;
    for (int i = 0; i < 200; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (int32_t)(10 + (x >> 8) % 4000);
        alt[i] = i < 80 ? ids[i] : (int32_t)(10 + (ids[i] + 7) % 4000);
    }
    float *l160 = logits_of(m, ids, 160, nv), *l120 = logits_of(m, ids, 120, nv);
    float *l60 = logits_of(m, ids, 60, nv), *l58 = logits_of(m, ids, 58, nv);

    /* checkpoint at 60, on to 120, rewind to 60, the same tokens again */
    ds4_session *s = fresh(m);
    CHECK(ds4_session_eval(s, ids, 60, NULL, NULL) == DS4_OK, "eval 60");
    CHECK(ds4_session_checkpoint(s, 0) == DS4_OK && ds4_session_checkpoint_tokens(s, 0) == 60, "checkpoint 60");
    CHECK(ds4_session_eval(s, ids + 60, 60, NULL, NULL) == DS4_OK, "eval 60..120");
    CHECK(same(ds4_session_logits(s), l120, nv), "one session == fresh at 120");
    CHECK(ds4_session_rewind(s, 30) == DS4_EINVAL, "rewind to 30: no checkpoint holds it");
    CHECK(ds4_session_rewind_point(s, 100) == 60, "rewind point for 100: the checkpoint at 60");
    CHECK(ds4_session_rewind(s, 60) == DS4_OK && ds4_session_n_tokens(s) == 60, "rewind 60");
    CHECK(same(ds4_session_logits(s), l60, nv), "rewound: the logits at 60");
    CHECK(ds4_session_eval(s, ids + 60, 60, NULL, NULL) == DS4_OK, "eval 60..120 again");
    CHECK(same(ds4_session_logits(s), l120, nv), "checkpoint + rewind + continue == fresh 120, bit for bit");

    /* sync after a divergence at 80, with a checkpoint at 70 */
    ds4_session *d = fresh(m);
    CHECK(ds4_session_eval(d, alt, 70, NULL, NULL) == DS4_OK && ds4_session_checkpoint(d, 1) == DS4_OK,
          "eval alt 70 + checkpoint");
    CHECK(ds4_session_eval(d, alt + 70, 70, NULL, NULL) == DS4_OK, "eval alt 70..140");
    int reused = -1;
    CHECK(ds4_session_sync(d, ids, 120, NULL, NULL, &reused) == DS4_OK, "sync");
    CHECK(reused == 70, "sync reused %d tokens, expected the checkpoint's 70", reused);
    CHECK(same(ds4_session_logits(d), l120, nv), "sync after a divergence == fresh 120, bit for bit");
    CHECK(ds4_session_kv_bytes(d) > 0 && ds4_session_kv_bytes(d) == ds4_session_kv_bytes(s),
          "kv bytes follow the state held");

    /* snapshot -> restore into a fresh session == live */
    {
        ds4_buf b = { 0 }, b2 = { 0 };
        CHECK(ds4_session_snapshot(s, &b) == DS4_OK && b.n == ds4_session_snapshot_size(s), "snapshot (%zu bytes)",
              b.n);
        ds4_session *r = fresh(m);
        CHECK(ds4_session_eval(r, alt, 10, NULL, NULL) == DS4_OK, "something in the target first");
        char *e = NULL;
        CHECK(ds4_session_restore(r, b.p, b.n, &e) == DS4_OK, "restore: %s", e ? e : "ok");
        free(e);
        CHECK(ds4_session_n_tokens(r) == 120 && same(ds4_session_logits(r), l120, nv), "restored: 120, its logits");
        CHECK(ds4_session_snapshot(r, &b2) == DS4_OK && b2.n == b.n && !memcmp(b.p, b2.p, b.n),
              "the restored session's snapshot is the same bytes");
        CHECK(ds4_session_eval(r, ids + 120, 40, NULL, NULL) == DS4_OK && same(ds4_session_logits(r), l160, nv),
              "restored + 40 tokens == fresh 160, bit for bit");
        /* damaged ones, into r (at 160) */
        uint8_t *c = malloc(b.n);
        memcpy(c, b.p, b.n);
        c[b.n / 2] ^= 0x10;
        refused(r, c, b.n, "checksum", l160, nv);
        memcpy(c, b.p, b.n);
        refused(r, c, b.n - 9, "truncated", l160, nv);
        c[0] ^= 1;
        refused(r, c, b.n, "magic", l160, nv);
        free(c);
        ds4_buf_free(&b);
        ds4_buf_free(&b2);
        ds4_session_free(r);
    }

    /* a staged (draft) pass: every row's logits, then a commit of 3 of 5
     * whose rejected rows were other tokens */
    {
        ds4_session *q = fresh(m);
        int32_t pass[5] = { ids[55], ids[56], ids[57], 17, 4001 };
        CHECK(ds4_session_eval(q, ids, 55, NULL, NULL) == DS4_OK, "eval 55");
        CHECK(ds4_session_eval_draft(q, ids + 55, 5) == DS4_OK, "draft pass");
        CHECK(same(ds4_session_draft_logits(q, 4), l60, nv), "draft row 4 == fresh 60, bit for bit");
        CHECK(same(ds4_session_draft_logits(q, 2), l58, nv), "draft row 2 == fresh 58, bit for bit");
        CHECK(ds4_session_draft_commit(q, 5) == DS4_OK && same(ds4_session_logits(q), l60, nv), "commit all 5");
        ds4_session *q2 = fresh(m);
        CHECK(ds4_session_eval(q2, ids, 55, NULL, NULL) == DS4_OK, "eval 55");
        CHECK(ds4_session_eval_draft(q2, pass, 5) == DS4_OK, "draft pass with 2 wrong tokens");
        CHECK(ds4_session_draft_commit(q2, 3) == DS4_OK && ds4_session_n_tokens(q2) == 58, "commit 3");
        CHECK(same(ds4_session_logits(q2), l58, nv), "committed: fresh 58's logits");
        CHECK(ds4_session_eval(q2, ids + 58, 2, NULL, NULL) == DS4_OK && same(ds4_session_logits(q2), l60, nv),
              "continued after the commit == fresh 60, bit for bit");
        CHECK(ds4_session_eval(q2, ids + 60, 60, NULL, NULL) == DS4_OK && same(ds4_session_logits(q2), l120, nv),
              "and on to 120 == fresh 120 (the recurrent state rolled back exactly)");
        CHECK(ds4_session_eval(q, ids + 60, 60, NULL, NULL) == DS4_OK && same(ds4_session_logits(q), l120, nv),
              "all kept, on to 120 == fresh 120");
        ds4_session_free(q);
        ds4_session_free(q2);
    }

    ds4_session_free(d);
    ds4_session_free(s);
    free(l160);
    free(l120);
    free(l60);
    free(l58);
    ds4_model_free(m);
    if (fails) { printf("test_g5n_session: %d failed\n", fails); return 1; }
    printf("test_g5n_session: all passed\n");
    return 0;
}
