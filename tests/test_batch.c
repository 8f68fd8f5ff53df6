/*
 * test_batch.c -- ds4_session_eval_batch (one engine step for several
 * sessions) against each session evaluated alone, on the tiny golden
 * models (window 32, ratio-4 rows from position 3, indexer top-k from
 * position 35, ratio-128 rows at 127 and 255):
 *   - 2-5 sessions of different lengths and contexts, stepped together with
 *     mixed decode rows and prefill chunks across the window edge and the
 *     compressor / indexer boundaries: after every step each session's
 *     logits, and at the end its snapshot bytes, equal (memcmp) those of a
 *     twin session given the same tokens with ds4_session_eval;
 *   - rows beyond the owner's chunk split into several passes, a steered
 *     session batched with unsteered ones, a capturing session (evaluated
 *     alone inside the step) -- all still exact;
 *   - invalid items (bad token id, full context, negative count, NULL
 *     session) fail alone with their code and leave their session as it
 *     was; a duplicated session refuses the whole step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"

#include "testutil.h"

#define MAXS 5

typedef struct {
    ds4_session *b, *r;   /* batched session, its twin evaluated alone */
    int off;              /* its tokens: ids[off ..] */
    int done;             /* tokens given so far */
} pair;

static int V;
static const int32_t *IDS;
static int NIDS;

static void pair_new(pair *p, ds4_model *m, int ctx, int chunk, int off) {
    p->b = test_new_session(m, ctx, chunk);
    p->r = test_new_session(m, ctx, chunk);
    p->off = off;
    p->done = 0;
}

static void pair_free(pair *p) {
    ds4_session_free(p->b);
    ds4_session_free(p->r);
}

static int same_logits(const pair *p) {
    const float *a = ds4_session_logits(p->b), *b = ds4_session_logits(p->r);
    if (!a || !b) return a == b;
    return memcmp(a, b, (size_t)V * sizeof(float)) == 0;
}

static int same_snapshot(const pair *p) {
    ds4_buf x = { 0 }, y = { 0 };
    int ok = ds4_session_snapshot(p->b, &x) == DS4_OK && ds4_session_snapshot(p->r, &y) == DS4_OK &&
             x.n == y.n && memcmp(x.p, y.p, x.n) == 0;
    ds4_buf_free(&x);
    ds4_buf_free(&y);
    return ok;
}

/* One step: pair i gets n[i] tokens (0 = not in this step). */
static void step(const char *what, pair *ps, int np, const int *n) {
    ds4_batch_item it[MAXS];
    int k = 0, map[MAXS];
    for (int i = 0; i < np; i++) {
        if (!n[i]) continue;
        pair *p = &ps[i];
        if (p->off + p->done + n[i] > NIDS) { fprintf(stderr, "test: sequence too short\n"); exit(1); }
        it[k] = (ds4_batch_item){ .s = p->b, .toks = IDS + p->off + p->done, .n = n[i], .rc = 12345 };
        map[k++] = i;
    }
    int rc = ds4_session_eval_batch(it, k);
    CHECK(rc == DS4_OK, "%s: batch rc %d", what, rc);
    for (int j = 0; j < k; j++) {
        pair *p = &ps[map[j]];
        CHECK(it[j].rc == DS4_OK, "%s: item %d rc %d", what, j, it[j].rc);
        CHECK(ds4_session_eval(p->r, IDS + p->off + p->done, n[map[j]], NULL, NULL) == DS4_OK,
              "%s: twin eval", what);
        p->done += n[map[j]];
    }
    for (int i = 0; i < np; i++) {
        CHECK(ds4_session_n_tokens(ps[i].b) == ps[i].done, "%s: session %d holds %d tokens, not %d", what,
              i, ds4_session_n_tokens(ps[i].b), ps[i].done);
        CHECK(same_logits(&ps[i]), "%s: session %d (%d tokens): logits differ from alone", what, i,
              ps[i].done);
    }
}

static void test_model(const char *name, int quick) {
    char path[512];
    snprintf(path, sizeof path, "%s/golden/models/%s", test_shared(), name);
    ds4_model *m = test_load_model(path, 2);
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    V = info.n_vocab;

    /* five sessions: different contexts and chunks (the owner of a pass is
     * the largest context; the others' scratch is not used) */
    pair ps[MAXS];
    pair_new(&ps[0], m, 512, 64, 0);
    pair_new(&ps[1], m, 1024, 48, 100);
    pair_new(&ps[2], m, 320, 17, 7);
    pair_new(&ps[3], m, 512, 64, 250);
    pair_new(&ps[4], m, 400, 32, 333);
    const int np = MAXS;

    /* different starting lengths: prefill chunks in one step, several
     * passes (rows beyond the owner's chunk of 48) */
    { int n[] = { 30, 34, 3, 1, 0 }; step("prefill A", ps, np, n); }
    { int n[] = { 1, 1, 1, 29, 5 }; step("mixed B", ps, np, n); }
    /* decode across the window edge (32) and the indexer's start (35) */
    for (int s = 0; s < (quick ? 4 : 8); s++) {
        int n[] = { 1, 1, 1, 1, 1 };
        step("decode C", ps, np, n);
    }
    /* a steered session batched with the others (steering is per row) */
    {
        float *dir = calloc((size_t)info.n_embd, sizeof *dir);
        for (int k = 0; k < info.n_embd; k++) dir[k] = (float)((k * 7) % 13) / 13.0f - 0.5f;
        CHECK(ds4_session_set_steering(ps[1].b, dir, 0.75f, 1, 4) == DS4_OK, "steer");
        CHECK(ds4_session_set_steering(ps[1].r, dir, 0.75f, 1, 4) == DS4_OK, "steer twin");
        free(dir);
        int n[] = { 1, 1, 2, 1, 1 };
        step("steered D", ps, np, n);
        n[2] = 1;
        step("steered D2", ps, np, n);
    }
    /* a prefill on one session reaching the ratio-128 row at 127 while
     * the others decode; a session that captures logits joins the step but
     * is evaluated alone (its results are still checked) */
    {
        ds4_buf cap = { 0 };
        ds4_session_capture(ps[4].b, &cap, NULL);
        int n[] = { 1, 1, 1, 1, 3 };
        n[0] = 127 - ds4_session_n_tokens(ps[0].b) + 2;   /* ends past position 127 */
        step("prefill E", ps, np, n);
        CHECK(cap.n == (size_t)3 * V * sizeof(float), "capture %zu bytes", cap.n);
        ds4_session_capture(ps[4].b, NULL, NULL);
        ds4_buf_free(&cap);
    }
    for (int s = 0; s < (quick ? 2 : 6); s++) {
        int n[] = { 1, s % 2 ? 0 : 1, 1, 1, 1 };   /* a session can sit a step out */
        step("decode F", ps, np, n);
    }
    /* two sessions only, then one (the single-item pass) */
    { int n[] = { 0, 2, 0, 1, 0 }; step("pair G", ps, np, n); }
    { int n[] = { 0, 0, 0, 1, 0 }; step("single H", ps, np, n); }
    for (int i = 0; i < np; i++)
        CHECK(same_snapshot(&ps[i]), "%s: session %d (%d tokens): snapshot differs from alone", name, i,
              ps[i].done);

    /* invalid items fail alone and leave their session as it was */
    {
        ds4_session *full = test_new_session(m, 8, 8);
        CHECK(ds4_session_eval(full, IDS, 8, NULL, NULL) == DS4_OK, "fill");
        int32_t bad[2] = { 5, (int32_t)V };
        int before[MAXS];
        for (int i = 0; i < np; i++) before[i] = ds4_session_n_tokens(ps[i].b);
        ds4_batch_item it[7] = {
            { .s = ps[0].b, .toks = IDS + ps[0].off + ps[0].done, .n = 1 },
            { .s = ps[1].b, .toks = bad, .n = 2 },                 /* id out of range */
            { .s = full, .toks = IDS, .n = 1 },                    /* context full */
            { .s = ps[2].b, .toks = IDS + ps[2].off + ps[2].done, .n = 1 },
            { .s = ps[3].b, .toks = IDS, .n = -1 },                /* negative count */
            { .s = NULL, .toks = IDS, .n = 1 },                    /* no session */
            { .s = ps[4].b, .toks = IDS + ps[4].off + ps[4].done, .n = 1 },
        };
        int rc = ds4_session_eval_batch(it, 7);
        CHECK(rc == DS4_EINVAL, "first failure code %d", rc);
        CHECK(it[1].rc == DS4_EINVAL && it[2].rc == DS4_ECTX && it[4].rc == DS4_EINVAL &&
              it[5].rc == DS4_EINVAL, "item codes %d %d %d %d", it[1].rc, it[2].rc, it[4].rc, it[5].rc);
        CHECK(it[0].rc == DS4_OK && it[3].rc == DS4_OK && it[6].rc == DS4_OK, "valid items %d %d %d",
              it[0].rc, it[3].rc, it[6].rc);
        CHECK(ds4_session_n_tokens(full) == 8, "full session changed");
        CHECK(ds4_session_n_tokens(ps[1].b) == before[1] && ds4_session_n_tokens(ps[3].b) == before[3],
              "failed items changed their sessions");
        int idx[3] = { 0, 2, 4 };
        for (int j = 0; j < 3; j++) {
            pair *p = &ps[idx[j]];
            CHECK(ds4_session_eval(p->r, IDS + p->off + p->done, 1, NULL, NULL) == DS4_OK, "twin");
            p->done++;
        }
        for (int i = 0; i < np; i++)
            CHECK(same_logits(&ps[i]) && same_snapshot(&ps[i]), "after invalid items: session %d differs", i);
        /* the same session twice: the whole step is refused, nothing runs */
        ds4_batch_item dup[2] = { { .s = ps[0].b, .toks = IDS, .n = 1 }, { .s = ps[0].b, .toks = IDS, .n = 1 } };
        CHECK(ds4_session_eval_batch(dup, 2) == DS4_EINVAL, "duplicate session accepted");
        CHECK(ds4_session_n_tokens(ps[0].b) == ps[0].done, "refused step changed a session");
        CHECK(ds4_session_eval_batch(NULL, 0) == DS4_OK, "empty step");
        ds4_session_free(full);
    }
    for (int i = 0; i < np; i++) pair_free(&ps[i]);
    ds4_model_free(m);
}

int main(void) {
    char seq[512];
    snprintf(seq, sizeof seq, "%s/golden/sequences/seq_600a.ids.txt", test_shared());
    ds4_tokens ids = { 0 };
    CHECK(test_read_ids(seq, &ids) == 0 && ids.n == 600, "read %s", seq);
    if (failures) return 1;
    IDS = ids.v;
    NIDS = (int)ids.n;
    /* the sanitizer suite runs one model and fewer decode steps */
    const char *dbg = getenv("DS4_DEBUG_BUILD");
    int quick = dbg && !strcmp(dbg, "1");
    test_model("tiny-a-q2.gguf", quick);
    if (!quick) test_model("tiny-a-f16.gguf", quick);
    ds4_tokens_free(&ids);
    printf("test_batch: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
