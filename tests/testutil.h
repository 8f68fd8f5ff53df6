/*
 * testutil.h -- the check macro and the shared-data path of the C tests.
 * A failed CHECK prints file:line and a message and counts; the test's
 * main returns non-zero when `failures` is not zero.
 */
#ifndef DS4_TESTUTIL_H
#define DS4_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        checks++;                                                           \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* ../shared (the oracles), or $DS4_SHARED */
static inline const char *test_shared(void) {
    const char *s = getenv("DS4_SHARED");
    return s && *s ? s : "../shared";
}

/* Helpers for the tests that use the engine API (ds4.h included first). */
#ifdef DS4_H
/* A golden token-id file (whitespace-separated ids). */
static inline int test_read_ids(const char *path, ds4_tokens *t) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int v;
    while (fscanf(f, "%d", &v) == 1) ds4_tokens_push(t, v);
    fclose(f);
    return ds4_tokens_failed(t) ? -1 : 0;
}

/* A model file loaded with n_threads threads; exits on failure. */
static inline ds4_model *test_load_model(const char *path, int n_threads) {
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    mp.n_threads = n_threads;
    char *err = NULL;
    ds4_model *m = ds4_model_load(path, &mp, &err);
    if (!m) { fprintf(stderr, "load %s: %s\n", path, err ? err : "?"); exit(1); }
    return m;
}

/* Whether two sessions hold byte-identical states (their snapshots). */
static inline int test_same_state(ds4_session *a, ds4_session *b) {
    ds4_buf x = { 0 }, y = { 0 };
    int ok = ds4_session_snapshot(a, &x) == DS4_OK && ds4_session_snapshot(b, &y) == DS4_OK &&
             x.n == y.n && memcmp(x.p, y.p, x.n) == 0;
    ds4_buf_free(&x);
    ds4_buf_free(&y);
    return ok;
}

/* Plain decoding from the state of `s`: n tokens into out (greedy when smp
 * is NULL); the last token is not evaluated. */
static inline void test_plain_decode(ds4_session *s, ds4_sampler *smp, int V, int n, ds4_tokens *out) {
    for (int i = 0; i < n; i++) {
        const float *lg = ds4_session_logits(s);
        int32_t t = smp ? ds4_sample(smp, lg) : ds4_sample_greedy(lg, V);
        ds4_tokens_push(out, t);
        if (i + 1 < n) CHECK(ds4_session_eval(s, &t, 1, NULL, NULL) == DS4_OK, "plain eval");
    }
}

/* A session of `ctx` tokens evaluated in chunks of `chunk`; exits on failure. */
static inline ds4_session *test_new_session(ds4_model *m, int ctx, int chunk) {
    ds4_session_params p;
    ds4_session_params_default(&p);
    p.ctx_size = ctx;
    p.prefill_chunk = chunk;
    char *err = NULL;
    ds4_session *s = ds4_session_new(m, &p, &err);
    if (!s) { fprintf(stderr, "session: %s\n", err ? err : "?"); exit(1); }
    return s;
}
#endif

#endif
