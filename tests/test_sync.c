/*
 * test_sync.c -- ds4_session_sync_prompt / _begin (ds4_sync.h) on the tiny
 * golden model: whichever prefix a prompt reuses, the session ends holding
 * exactly the tokens a fresh evaluation gives and the same logits, bit for
 * bit:
 *   - nothing kept (empty session, or a divergence with no checkpoint);
 *   - the live session continued by tokens;
 *   - the live session continued by text whose tokens are another BPE
 *     split (only the rest of the text is tokenized);
 *   - a RAM checkpoint after a divergence at the prompt's end;
 *   - a state from the disk store (by text, and by ids with no text),
 *     with the evict callback before the live session is replaced;
 *   - a plan whose rest would fill the context is not taken;
 *   - a cut inside a special token is refused (ds4_sync_cut_splits_special).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds4.h"
#include "ds4_sync.h"

#include "testutil.h"

static ds4_model *M;
static const ds4_tokenizer *TOK;
static int V;

/* A fresh session evaluating exactly `t`: the reference. */
static ds4_session *fresh_eval(const int32_t *t, int n) {
    ds4_session *s = test_new_session(M, 1024, 64);
    CHECK(ds4_eval(s, t, n, NULL) == DS4_OK, "fresh eval");
    return s;
}

/* The session holds exactly `t` (n tokens) and the logits of a fresh run. */
static void same_as_fresh(ds4_session *s, const int32_t *t, int n, const char *what) {
    CHECK(ds4_session_n_tokens(s) == n, "%s: %d tokens, want %d", what, ds4_session_n_tokens(s), n);
    CHECK(ds4_session_n_tokens(s) == n && !memcmp(ds4_session_tokens(s), t, (size_t)n * sizeof *t),
          "%s: the session's tokens", what);
    ds4_session *f = fresh_eval(t, n);
    const float *a = ds4_session_logits(s), *b = ds4_session_logits(f);
    CHECK(a && b && !memcmp(a, b, (size_t)V * sizeof *a), "%s: logits differ from a fresh run",
          what);
    ds4_session_free(f);
}

typedef struct {
    int evicted, replaced, restored;
    ds4_session *s;
    ds4_kvstore *kv;
} cb_log;

static void on_evict(void *ud) {
    cb_log *l = ud;
    l->evicted++;
    char *err = NULL;
    CHECK(ds4_kvstore_save(l->kv, l->s, DS4_KV_EVICT, NULL, 0, &err) == DS4_OK, "evict save: %s",
          err ? err : "");
    free(err);
}
static void on_replaced(void *ud) { ((cb_log *)ud)->replaced++; }
static void on_restored(void *ud, int n, size_t used, double sec) {
    (void)n; (void)used; (void)sec;
    ((cb_log *)ud)->restored++;
}

static void params(ds4_sync_params *p, const ds4_buf *text, cb_log *l) {
    ds4_sync_params_default(p);
    p->tok = TOK;
    p->text = text ? text->p : NULL;
    p->text_len = text ? text->n : 0;
    p->ctx = 1024;
    p->replaced = on_replaced;
    p->restored = on_restored;
    p->ud = l;
}

int main(void) {
    char path[512], seq[512];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    snprintf(seq, sizeof seq, "%s/golden/sequences/seq_600a.ids.txt", test_shared());
    M = test_load_model(path, 2);
    TOK = ds4_model_tokenizer(M);
    ds4_model_info info;
    ds4_model_get_info(M, &info);
    V = info.n_vocab;
    ds4_tokens ids = { 0 };
    if (test_read_ids(seq, &ids) || ids.n < 400) { fprintf(stderr, "cannot read %s\n", seq); return 1; }

    /* the prompt: a text and its own tokenization */
    ds4_buf text = { 0 };
    ds4_detokenize(TOK, ids.v, 360, &text);
    ds4_tokens pt = { 0 };
    ds4_tokenize(TOK, text.p, text.n, DS4_TOK_SPECIAL, &pt);
    /* a text that is exactly what its tokens spell (the golden ids' text
     * may not survive one round trip: invalid UTF-8 becomes U+FFFD) */
    for (int round = 0; round < 3; round++) {
        text.n = 0;
        ds4_detokenize(TOK, pt.v, pt.n, &text);
        pt.n = 0;
        ds4_tokenize(TOK, text.p, text.n, DS4_TOK_SPECIAL, &pt);
    }
    {
        ds4_buf back = { 0 };
        ds4_detokenize(TOK, pt.v, pt.n, &back);
        CHECK(back.n == text.n && !memcmp(back.p, text.p, text.n), "the prompt's text round trip");
        ds4_buf_free(&back);
    }
    const int N = (int)pt.n;
    CHECK(N > 200, "prompt of %d tokens", N);
    /* the text up to token k, and its own length in bytes */
    ds4_buf head = { 0 };
    const int K = N / 2;
    ds4_detokenize(TOK, pt.v, (size_t)K, &head);

    cb_log l = { 0 };
    ds4_sync_params p;
    ds4_sync_result r;

    /* 1. empty session: nothing kept */
    ds4_session *s = test_new_session(M, 1024, 64);
    l.s = s;
    params(&p, &head, &l);
    CHECK(ds4_session_sync_prompt(s, pt.v, K, &p, NULL, &r) == DS4_OK, "sync 1");
    CHECK(r.source == DS4_SYNC_NONE && r.kept == 0 && r.evaluated == K && (int)r.rest.n == K,
          "empty: source %d kept %d evaluated %d", r.source, r.kept, r.evaluated);
    same_as_fresh(s, pt.v, K, "empty session");
    ds4_sync_result_free(&r);

    /* 2. the live session continued by tokens; the eval takes RAM
     * checkpoints at the prompt's end and one token before it */
    ds4_eval_params ep;
    ds4_eval_params_default(&ep);
    ep.ram_tail = 1;
    params(&p, &text, &l);
    CHECK(ds4_session_sync_prompt(s, pt.v, N, &p, &ep, &r) == DS4_OK, "sync 2");
    CHECK(r.source == DS4_SYNC_LIVE && r.kept == K && r.evaluated == N - K && !r.retok,
          "live: source %d kept %d evaluated %d retok %d", r.source, r.kept, r.evaluated, r.retok);
    same_as_fresh(s, pt.v, N, "live continued");
    ds4_sync_result_free(&r);

    /* 3. a divergence at the prompt's last token: the RAM checkpoint one
     * token before the end, not a rebuild */
    ds4_tokens alt = { 0 };
    for (int i = 0; i < N - 1; i++) ds4_tokens_push(&alt, pt.v[i]);
    ds4_tokens_push(&alt, pt.v[N - 1] == 7 ? 8 : 7);
    ds4_tokens_push(&alt, 9);
    params(&p, NULL, &l);
    int rep0 = l.replaced;
    CHECK(ds4_session_sync_prompt(s, alt.v, (int)alt.n, &p, NULL, &r) == DS4_OK, "sync 3");
    CHECK(r.source == DS4_SYNC_RAM && r.kept == N - 1 && r.evaluated == 2 && l.replaced == rep0 + 1,
          "RAM: source %d kept %d evaluated %d", r.source, r.kept, r.evaluated);
    same_as_fresh(s, alt.v, (int)alt.n, "RAM checkpoint");
    ds4_sync_result_free(&r);

    /* 4. nothing usable: the first token differs, no checkpoint holds 0 */
    ds4_tokens other = { 0 };
    for (int i = 0; i < 40; i++) ds4_tokens_push(&other, ids.v[100 + i]);
    CHECK(ds4_session_sync_prompt(s, other.v, (int)other.n, &p, NULL, &r) == DS4_OK, "sync 4");
    CHECK(r.source == DS4_SYNC_NONE && r.kept == 0 && r.evaluated == 40, "none: source %d kept %d",
          r.source, r.kept);
    same_as_fresh(s, other.v, (int)other.n, "rebuilt");
    ds4_sync_result_free(&r);

    /* 5. text hit with another split: the session holds the head text's
     * tokens tokenized in two pieces; the prompt's own tokens start
     * differently, so only the rest of the text is tokenized */
    int cut = -1;
    ds4_tokens split = { 0 };
    for (size_t at = 1; at + 1 < head.n && cut < 0; at++) {
        /* not inside a character or a marker (those are refused: case 8) */
        if (!ds4_sync_char_boundary(head.p, head.n, at) || ds4_sync_cut_splits_special(TOK, &pt, at))
            continue;
        split.n = 0;
        ds4_tokenize(TOK, head.p, at, DS4_TOK_SPECIAL, &split);
        ds4_tokenize(TOK, head.p + at, head.n - at, DS4_TOK_SPECIAL, &split);
        if (split.n > (size_t)K || memcmp(split.v, pt.v, split.n * sizeof *split.v)) cut = (int)at;
    }
    CHECK(cut > 0, "a cut that splits the text differently");
    if (cut > 0) {
        ds4_session_reset(s);
        CHECK(ds4_eval(s, split.v, (int)split.n, NULL) == DS4_OK, "eval split");
        params(&p, &text, &l);
        CHECK(ds4_session_sync_prompt(s, pt.v, N, &p, NULL, &r) == DS4_OK, "sync 5");
        CHECK(r.source == DS4_SYNC_LIVE && r.text_hit && r.retok && r.kept == (int)split.n,
              "text hit: source %d text_hit %d retok %d kept %d", r.source, r.text_hit, r.retok,
              r.kept);
        ds4_tokens want = { 0 };
        for (size_t i = 0; i < split.n; i++) ds4_tokens_push(&want, split.v[i]);
        ds4_tokenize(TOK, text.p + head.n, text.n - head.n, DS4_TOK_SPECIAL, &want);
        same_as_fresh(s, want.v, (int)want.n, "text hit");
        ds4_sync_result_free(&r);
        ds4_tokens_free(&want);

        /* 6. the same with a context the rest would fill: not taken */
        ds4_session_reset(s);
        CHECK(ds4_eval(s, split.v, (int)split.n, NULL) == DS4_OK, "eval split 2");
        p.ctx = (int)split.n + 1;
        CHECK(ds4_session_sync_begin(s, pt.v, N, &p, &r) == DS4_OK, "sync 6");
        CHECK(!r.text_hit && r.source == DS4_SYNC_NONE && (int)r.rest.n == N,
              "context guard: source %d text_hit %d", r.source, r.text_hit);
        ds4_sync_result_free(&r);
    }

    /* 7. the disk store: the live session (the whole prompt) is saved by
     * the evict callback before another prompt replaces it; a new session
     * then restores it by text, and by ids alone */
    char dir[] = "/tmp/ds4-test-sync-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    ds4_kvstore_params kp;
    ds4_kvstore_params_default(&kp);
    kp.dir = dir;
    char *err = NULL;
    ds4_kvstore *kv = ds4_kvstore_open(M, &kp, &err);
    CHECK(kv != NULL, "kvstore: %s", err ? err : "");
    free(err);
    if (kv) {
        l.kv = kv;
        ds4_session_reset(s);
        CHECK(ds4_eval(s, pt.v, N, NULL) == DS4_OK, "eval prompt");
        params(&p, NULL, &l);
        p.store = kv;
        p.evict = on_evict;
        CHECK(ds4_session_sync_prompt(s, other.v, (int)other.n, &p, NULL, &r) == DS4_OK, "sync 7a");
        CHECK(l.evicted == 1 && r.source == DS4_SYNC_NONE, "evicted %d, source %d", l.evicted,
              r.source);
        ds4_sync_result_free(&r);

        ds4_session *s2 = test_new_session(M, 1024, 64);
        l.s = s2;
        /* the prompt grown by a few tokens: the saved state is its prefix */
        ds4_tokens more = { 0 };
        for (int i = 0; i < N; i++) ds4_tokens_push(&more, pt.v[i]);
        for (int i = 0; i < 5; i++) ds4_tokens_push(&more, ids.v[10 + i]);
        ds4_buf mtext = { 0 };
        ds4_detokenize(TOK, more.v, more.n, &mtext);
        ds4_tokens mt = { 0 };
        ds4_tokenize(TOK, mtext.p, mtext.n, DS4_TOK_SPECIAL, &mt);
        params(&p, &mtext, &l);
        p.store = kv;
        int rs0 = l.restored;
        CHECK(ds4_session_sync_prompt(s2, mt.v, (int)mt.n, &p, NULL, &r) == DS4_OK, "sync 7b");
        CHECK(r.source == DS4_SYNC_DISK && r.kept > 0 && l.restored == rs0 + 1,
              "disk by text: source %d kept %d", r.source, r.kept);
        same_as_fresh(s2, ds4_session_tokens(s2), ds4_session_n_tokens(s2), "disk by text");
        ds4_sync_result_free(&r);

        /* by ids: the file is found through the ids' text and must hold
         * exactly a prefix of those ids */
        ds4_session_reset(s2);
        params(&p, NULL, &l);
        p.store = kv;
        CHECK(ds4_session_sync_prompt(s2, more.v, (int)more.n, &p, NULL, &r) == DS4_OK, "sync 7c");
        CHECK(r.source == DS4_SYNC_DISK && r.kept == N, "disk by ids: source %d kept %d", r.source,
              r.kept);
        same_as_fresh(s2, more.v, (int)more.n, "disk by ids");
        ds4_sync_result_free(&r);
        ds4_session_free(s2);
        ds4_tokens_free(&more);
        ds4_tokens_free(&mt);
        ds4_buf_free(&mtext);
        ds4_kvstore_close(kv);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "rm");
    }

    /* 8. a cut inside a special token is refused; between tokens it is not */
    const ds4_special_ids *sp = ds4_tok_special(TOK);
    ds4_tokens sps = { 0 };
    ds4_tokens_push(&sps, sp->bos);
    ds4_tokens_push(&sps, sp->user);
    size_t bl = 0, ul = 0;
    ds4_token_bytes(TOK, sp->bos, &bl);
    ds4_token_bytes(TOK, sp->user, &ul);
    CHECK(ds4_sync_cut_splits_special(TOK, &sps, bl + 2), "cut inside <User>");
    CHECK(!ds4_sync_cut_splits_special(TOK, &sps, bl), "cut between tokens");
    CHECK(!ds4_sync_char_boundary("\xc3\xa9", 2, 1) && ds4_sync_char_boundary("\xc3\xa9", 2, 2),
          "UTF-8 boundary");

    ds4_tokens_free(&sps);
    ds4_tokens_free(&split);
    ds4_tokens_free(&alt);
    ds4_tokens_free(&other);
    ds4_tokens_free(&pt);
    ds4_tokens_free(&ids);
    ds4_buf_free(&text);
    ds4_buf_free(&head);
    ds4_session_free(s);
    ds4_model_free(M);
    printf("test_sync: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
