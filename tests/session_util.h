/*
 * session_util.h -- what the GLM session tests (test_glm_session.c,
 * test_g5n_session.c) share: a failure counter and its CHECK that prints
 * to stdout (their scripts show it), a fresh session of the shape both
 * use (256 positions, prefill chunks of 48: every test crosses a chunk
 * boundary), the logits of a prefix in a new session, and a bitwise
 * comparison of two logits rows.
 *
 * Owns: nothing outside the tests.  Must not: reach below ds4.h.
 */
#ifndef DS4_TEST_SESSION_UTIL_H
#define DS4_TEST_SESSION_UTIL_H

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

#endif
