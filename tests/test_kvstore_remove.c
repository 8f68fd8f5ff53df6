/*
 * test_kvstore_remove.c -- ds4_kvstore_remove (added for ds4-agent, whose
 * sessions replace their saved state every turn): removing the state saved
 * under a text removes exactly that file, a second removal and an unknown
 * text remove nothing, other states stay restorable, and the store's index
 * forgets the removed one (no restore of it, even in the same process).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds4.h"

#include "testutil.h"

static int count_states(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += l > 6 && !strcmp(de->d_name + l - 6, ".ds4kv");
    }
    if (d) closedir(d);
    return n;
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    mp.n_threads = 2;
    char *err = NULL;
    ds4_model *m = ds4_model_load(path, &mp, &err);
    if (!m) { fprintf(stderr, "%s\n", err); return 1; }
    const ds4_tokenizer *tok = ds4_model_tokenizer(m);
    char dir[300];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ds4-kvrm-%d", tmp ? tmp : "/tmp", (int)getpid());
    ds4_kvstore_params kp;
    ds4_kvstore_params_default(&kp);
    kp.dir = dir;
    ds4_kvstore *kv = ds4_kvstore_open(m, &kp, &err);
    CHECK(kv != NULL, "open: %s", err ? err : "?");
    if (!kv) return 1;
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = 512;
    ds4_session *s = ds4_session_new(m, &sp, NULL);

    /* two states: a text and a longer one that extends it */
    const char *a = "The agent saves its session after every turn.";
    const char *b = "The agent saves its session after every turn. Then it moves on.";
    ds4_tokens ta = { 0 }, tb = { 0 };
    ds4_tokenize(tok, a, strlen(a), DS4_TOK_PLAIN, &ta);
    ds4_tokenize(tok, b, strlen(b), DS4_TOK_PLAIN, &tb);
    CHECK(ds4_session_eval(s, ta.v, (int)ta.n, NULL, NULL) == DS4_OK, "eval a");
    CHECK(ds4_kvstore_save(kv, s, DS4_KV_MANUAL, NULL, 0, NULL) == DS4_OK, "save a");
    ds4_buf txa = { 0 }, txb = { 0 };
    ds4_detokenize(tok, ds4_session_tokens(s), (size_t)ds4_session_n_tokens(s), &txa);
    ds4_session_reset(s);
    CHECK(ds4_session_eval(s, tb.v, (int)tb.n, NULL, NULL) == DS4_OK, "eval b");
    CHECK(ds4_kvstore_save(kv, s, DS4_KV_MANUAL, NULL, 0, NULL) == DS4_OK, "save b");
    ds4_detokenize(tok, ds4_session_tokens(s), (size_t)ds4_session_n_tokens(s), &txb);
    CHECK(count_states(dir) == 2, "two files, got %d", count_states(dir));

    /* remove the shorter one: the longer one stays */
    CHECK(ds4_kvstore_remove(kv, txa.p, txa.n) == 1, "remove a");
    CHECK(count_states(dir) == 1, "one file left, got %d", count_states(dir));
    CHECK(ds4_kvstore_remove(kv, txa.p, txa.n) == 0, "second remove finds nothing");
    CHECK(ds4_kvstore_remove(kv, "no such text", 12) == 0, "unknown text");
    size_t used = 0;
    ds4_session_reset(s);
    int got = ds4_kvstore_restore(kv, s, txa.p, txa.n, 1, 0, &used);
    CHECK(got == 0, "the removed state is not restored (got %d)", got);
    got = ds4_kvstore_restore(kv, s, txb.p, txb.n, 1, 0, &used);
    CHECK(got == (int)tb.n && used == txb.n, "the other state restores (%d of %zu)", got, tb.n);

    /* a reopened store agrees */
    ds4_kvstore_close(kv);
    kv = ds4_kvstore_open(m, &kp, NULL);
    CHECK(ds4_kvstore_remove(kv, txb.p, txb.n) == 1, "remove b after a reopen");
    CHECK(count_states(dir) == 0, "no file left");
    ds4_session_reset(s);
    CHECK(ds4_kvstore_restore(kv, s, txb.p, txb.n, 1, 0, &used) == 0, "nothing to restore");

    ds4_kvstore_close(kv);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) { }
    ds4_buf_free(&txa);
    ds4_buf_free(&txb);
    ds4_tokens_free(&ta);
    ds4_tokens_free(&tb);
    ds4_session_free(s);
    ds4_model_free(m);
    printf("test_kvstore_remove: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
