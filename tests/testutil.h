/*
 * testutil.h -- the check macro and the shared-data path of the C tests.
 * A failed CHECK prints file:line and a message and counts; the test's
 * main returns non-zero when `failures` is not zero.
 */
#ifndef DS4_TESTUTIL_H
#define DS4_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

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
