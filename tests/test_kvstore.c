/*
 * test_kvstore.c -- the disk KV cache (kvstore.c) on the tiny q2 model:
 *   - save, restore by text (longest cached prefix), continue: logits
 *     identical to an uninterrupted run;
 *   - min_tokens / better_than / context limits respected;
 *   - a table of damaged files (bit flips in every section, truncation at
 *     many offsets, wrong magic / version / fingerprint, renamed file):
 *     never restored, damaged ones moved aside, foreign ones ignored;
 *   - LRU space cap under many saves;
 *   - injected write failures (DS4_KV_FAULT=write): an error, no partial
 *     file, previous files intact, later saves work;
 *   - tool-id -> exact DSML sections survive a reopen;
 *   - two stores sharing a directory from two threads.
 */
#include <dirent.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds4.h"

#include "testutil.h"

static ds4_model *M;
static int V;
static ds4_tokens IDS;
static char ROOT[256];
static FILE *LOG;

static ds4_session *sess(int ctx) {
    ds4_session_params p;
    ds4_session_params_default(&p);
    p.ctx_size = ctx;
    p.prefill_chunk = 64;
    return ds4_session_new(M, &p, NULL);
}

static ds4_kvstore *store(const char *dir, uint64_t cap) {
    ds4_kvstore_params p;
    ds4_kvstore_params_default(&p);
    p.dir = dir;
    if (cap) p.space_bytes = cap;
    p.log = LOG;
    char *err = NULL;
    ds4_kvstore *kv = ds4_kvstore_open(M, &p, &err);
    if (!kv) { fprintf(stderr, "kvstore: %s\n", err); exit(1); }
    return kv;
}

static void text_of(int n, ds4_buf *b) {
    b->n = 0;
    ds4_detokenize(ds4_model_tokenizer(M), IDS.v, (size_t)n, b);
}

static int count_files(const char *dir, const char *suffix, uint64_t *bytes) {
    DIR *d = opendir(dir);
    int n = 0;
    if (bytes) *bytes = 0;
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        if (l > s && !strcmp(de->d_name + l - s, suffix)) {
            n++;
            if (bytes) {
                char p[600];
                struct stat sb;
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                if (!stat(p, &sb)) *bytes += (uint64_t)sb.st_size;
            }
        }
    }
    closedir(d);
    return n;
}

static void mkdirp(const char *d) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", d, d);
    if (system(cmd)) { fprintf(stderr, "mkdir failed\n"); exit(1); }
}

/* the single .ds4kv file of a directory */
static int only_file(const char *dir, char *path, size_t n) {
    DIR *d = opendir(dir);
    struct dirent *de;
    int found = 0;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 6 && !strcmp(de->d_name + l - 6, ".ds4kv")) {
            snprintf(path, n, "%s/%s", dir, de->d_name);
            found++;
        }
    }
    if (d) closedir(d);
    return found == 1;
}

static uint8_t *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) { free(b); b = NULL; }
    fclose(f);
    return b;
}

static void spit(const char *p, const uint8_t *b, size_t n) {
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_roundtrip(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/rt", ROOT);
    mkdirp(dir);
    /* uninterrupted reference */
    ds4_session *ref = sess(1024);
    ds4_buf L = { 0 };
    ds4_session_capture(ref, &L, NULL);
    ds4_session_eval(ref, IDS.v, 600, NULL, NULL);
    ds4_session_capture(ref, NULL, NULL);
    const float *lg = (const float *)L.p;

    ds4_kvstore *kv = store(dir, 0);
    ds4_session *a = sess(1024);
    for (int k = 100; k <= 300; k += 100) {
        ds4_session_eval(a, IDS.v + ds4_session_n_tokens(a), k - ds4_session_n_tokens(a), NULL, NULL);
        CHECK(ds4_kvstore_save(kv, a, DS4_KV_MANUAL, NULL, 0, NULL) == DS4_OK, "save %d", k);
    }
    CHECK(count_files(dir, ".ds4kv", NULL) == 3, "three files");
    CHECK(ds4_kvstore_save(kv, a, DS4_KV_MANUAL, NULL, 0, NULL) == DS4_OK &&
          count_files(dir, ".ds4kv", NULL) == 3, "re-saving an identical state adds nothing");
    ds4_kvstore_close(kv);

    /* a fresh store instance (as after a restart) */
    kv = store(dir, 0);
    ds4_buf t = { 0 };
    text_of(600, &t);
    ds4_session *b = sess(1024);
    size_t used = 0;
    int n = ds4_kvstore_restore(kv, b, t.p, t.n, 0, 0, &used);
    ds4_buf t300 = { 0 };
    text_of(300, &t300);
    CHECK(n == 300 && used == t300.n, "longest prefix restored: %d tokens, %zu bytes", n, used);
    ds4_buf cont = { 0 };
    ds4_session_capture(b, &cont, NULL);
    ds4_session_eval(b, IDS.v + 300, 300, NULL, NULL);
    CHECK(cont.n == (size_t)300 * V * 4 && !memcmp(cont.p, lg + (size_t)300 * V, cont.n),
          "restore + continue == uninterrupted (bitwise)");
    ds4_buf_free(&cont);

    /* a prompt between two saves takes the shorter one */
    text_of(250, &t);
    ds4_session *c = sess(1024);
    n = ds4_kvstore_restore(kv, c, t.p, t.n, 0, 0, &used);
    CHECK(n == 200, "prefix of 250 tokens restores the 200-token file (%d)", n);
    CHECK(!memcmp(ds4_session_logits(c), lg + (size_t)199 * V, (size_t)V * 4), "restored logits");
    /* min_tokens and better_than */
    ds4_session_reset(c);
    CHECK(ds4_kvstore_restore(kv, c, t.p, t.n, 201, 0, &used) == 0 && ds4_session_n_tokens(c) == 0,
          "min_tokens excludes shorter files");
    CHECK(ds4_kvstore_restore(kv, c, t.p, t.n, 0, 200, &used) == 0, "better_than excludes equal");
    CHECK(ds4_kvstore_restore(kv, c, t.p, t.n, 0, 150, &used) == 200, "better_than allows longer");
    /* a session too small for the state is not restored into */
    ds4_session *small = sess(150);
    text_of(300, &t);
    n = ds4_kvstore_restore(kv, small, t.p, t.n, 0, 0, &used);
    CHECK(n == 100, "ctx limit: best fitting file (%d)", n);
    /* text that only shares a prefix shorter than every file: miss */
    ds4_buf other = { 0 };
    ds4_buf_puts(&other, "completely different text");
    ds4_session_reset(c);
    CHECK(ds4_kvstore_restore(kv, c, other.p, other.n, 0, 0, &used) == 0 && used == 0, "miss");
    /* the latest-used state */
    ds4_session_reset(c);
    CHECK(ds4_kvstore_restore_latest(kv, c, 0) > 0, "restore_latest");
    ds4_kvstore_stats st;
    ds4_kvstore_get_stats(kv, &st);
    CHECK(st.hits >= 4 && st.misses >= 1, "stats: %llu hits %llu misses",
          (unsigned long long)st.hits, (unsigned long long)st.misses);

    ds4_buf_free(&other);
    ds4_buf_free(&t);
    ds4_buf_free(&t300);
    ds4_buf_free(&L);
    ds4_session_free(small);
    ds4_session_free(a);
    ds4_session_free(b);
    ds4_session_free(c);
    ds4_session_free(ref);
    ds4_kvstore_close(kv);
}

/* Put `bytes` as the only file (under `name`) in a fresh dir, try it. */
static int try_variant(const char *name, const uint8_t *bytes, size_t n, const char *label,
                       int expect_moved) {
    char dir[300], path[700];
    snprintf(dir, sizeof dir, "%s/dmg", ROOT);
    mkdirp(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    spit(path, bytes, n);
    ds4_kvstore *kv = store(dir, 0);
    ds4_session *s = sess(1024);
    ds4_buf t = { 0 };
    text_of(600, &t);
    size_t used;
    int got = ds4_kvstore_restore(kv, s, t.p, t.n, 0, 0, &used);
    CHECK(got == 0 && ds4_session_n_tokens(s) == 0, "%s: restored %d tokens", label, got);
    int moved = count_files(dir, ".bad", NULL);
    if (expect_moved >= 0)
        CHECK(moved == expect_moved, "%s: moved aside %d (expected %d)", label, moved, expect_moved);
    ds4_buf_free(&t);
    ds4_session_free(s);
    ds4_kvstore_close(kv);
    return got;
}

static void test_damage(void) {
    char dir[300], path[700];
    snprintf(dir, sizeof dir, "%s/good", ROOT);
    mkdirp(dir);
    ds4_kvstore *kv = store(dir, 0);
    ds4_session *a = sess(1024);
    ds4_session_eval(a, IDS.v, 300, NULL, NULL);
    ds4_kv_tool tool = { "call_abc", "\n\n<｜DSML｜tool_calls>x</｜DSML｜tool_calls>", 0 };
    tool.dsml_len = strlen(tool.dsml);
    CHECK(ds4_kvstore_save(kv, a, DS4_KV_COLD, &tool, 1, NULL) == DS4_OK, "save");
    ds4_kvstore_close(kv);
    CHECK(only_file(dir, path, sizeof path), "one file");
    size_t n = 0;
    uint8_t *good = slurp(path, &n);
    const char *name = strrchr(path, '/') + 1;
    ds4_kv_file_info in;
    char *err = NULL;
    CHECK(ds4_kv_file_info_read(path, 1, &in, &err) == 0, "good file verifies");
    uint64_t text_at = 128, pay_at = text_at + in.text_len, tool_at = pay_at + in.payload_len;
    uint64_t sum_at = n - 8;

    /* sanity: the pristine copy restores in the damage harness's setup */
    {
        char d2[300], p2[700];
        snprintf(d2, sizeof d2, "%s/dmg", ROOT);
        mkdirp(d2);
        snprintf(p2, sizeof p2, "%s/%s", d2, name);
        spit(p2, good, n);
        ds4_kvstore *k2 = store(d2, 0);
        ds4_session *s = sess(1024);
        ds4_buf t = { 0 };
        text_of(600, &t);
        size_t used;
        CHECK(ds4_kvstore_restore(k2, s, t.p, t.n, 0, 0, &used) == 300, "pristine copy restores");
        ds4_buf_free(&t);
        ds4_session_free(s);
        ds4_kvstore_close(k2);
    }

    uint8_t *b = malloc(n);
    char label[128];
    /* bit flips in every section (the mutable last_used/hits bytes 32..43
     * are outside the checksum on purpose and are skipped) */
    uint64_t offs[] = { 0, 7, 8, 12, 16, 20, 24, 44, 48, 56, 64, 72, 91, 92, 111, 112, 127,
                        text_at, text_at + in.text_len / 2, pay_at, pay_at + 40,
                        pay_at + in.payload_len / 3, pay_at + in.payload_len - 1, tool_at,
                        tool_at + 5, sum_at, sum_at + 7 };
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        memcpy(b, good, n);
        b[offs[i]] ^= 0x10;
        snprintf(label, sizeof label, "bit flip at %llu", (unsigned long long)offs[i]);
        /* fingerprint and architecture bytes (72..126): a "foreign" file,
         * ignored but not moved; byte 127 must stay the name's NUL */
        int fp = offs[i] >= 72 && offs[i] < 127;
        try_variant(name, b, n, label, fp ? -1 : 1);
    }
    /* truncation at many offsets */
    for (uint64_t cut = 0; cut < n; cut += n / 37 + 1) {
        snprintf(label, sizeof label, "truncated at %llu", (unsigned long long)cut);
        try_variant(name, good, (size_t)cut, label, cut >= 128 || cut > 0 ? 1 : 1);
    }
    try_variant(name, good, n - 1, "truncated by one byte", 1);
    /* appended garbage */
    {
        uint8_t *c = malloc(n + 3);
        memcpy(c, good, n);
        memcpy(c + n, "xyz", 3);
        try_variant(name, c, n + 3, "trailing bytes", 1);
        free(c);
    }
    /* a valid file under another text's name */
    {
        char other[64];
        snprintf(other, sizeof other, "%040d.ds4kv", 0);
        try_variant(other, good, n, "renamed file", -1);
    }
    /* wrong version with a recomputed-looking header: still rejected;
     * version 1 is the float32-KV-row format of older builds */
    memcpy(b, good, n);
    b[8] = 3;
    try_variant(name, b, n, "version 3", 1);
    memcpy(b, good, n);
    b[8] = 1;
    try_variant(name, b, n, "version 1 (float32 KV rows)", 1);
    memcpy(b, good, n);
    memcpy(b, "GGUF\0\0\0\0", 8);
    try_variant(name, b, n, "wrong magic", 1);

    /* the mutable bytes are harmless */
    memcpy(b, good, n);
    b[33] ^= 0xff;
    b[40] ^= 0x01;
    {
        char d2[300], p2[700];
        snprintf(d2, sizeof d2, "%s/dmg", ROOT);
        mkdirp(d2);
        snprintf(p2, sizeof p2, "%s/%s", d2, name);
        spit(p2, b, n);
        ds4_kvstore *k2 = store(d2, 0);
        ds4_session *s = sess(1024);
        ds4_buf t = { 0 };
        text_of(600, &t);
        size_t used;
        CHECK(ds4_kvstore_restore(k2, s, t.p, t.n, 0, 0, &used) == 300, "last_used/hits edits are harmless");
        ds4_buf dsml = { 0 };
        CHECK(ds4_kvstore_tool_dsml(k2, "call_abc", &dsml) == 1 && dsml.n == tool.dsml_len &&
              !memcmp(dsml.p, tool.dsml, dsml.n), "tool DSML from the file");
        CHECK(ds4_kvstore_tool_dsml(k2, "call_nope", &dsml) == 0, "unknown tool id");
        ds4_buf_free(&dsml);
        ds4_buf_free(&t);
        ds4_session_free(s);
        ds4_kvstore_close(k2);
    }
    free(b);
    free(good);
    free(err);
    ds4_session_free(a);
}

static void test_cap_and_faults(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cap", ROOT);
    mkdirp(dir);
    /* size of one state */
    ds4_session *a = sess(1024);
    ds4_session_eval(a, IDS.v, 200, NULL, NULL);
    uint64_t one = ds4_session_snapshot_size(a) + 128 + 8 + 2000;
    ds4_kvstore *kv = store(dir, one * 3);
    for (int k = 0; k < 10; k++) {
        ds4_session_reset(a);
        ds4_session_eval(a, IDS.v + 10 * k, 200, NULL, NULL);   /* different texts */
        CHECK(ds4_kvstore_save(kv, a, DS4_KV_CONTINUED, NULL, 0, NULL) == DS4_OK, "save %d", k);
        uint64_t bytes;
        count_files(dir, ".ds4kv", &bytes);
        CHECK(bytes <= one * 3, "cap respected after %d saves: %llu > %llu", k + 1,
              (unsigned long long)bytes, (unsigned long long)(one * 3));
    }
    int files = count_files(dir, ".ds4kv", NULL);
    CHECK(files >= 2 && files <= 3, "LRU keeps the newest (%d files)", files);
    /* the newest state is restorable */
    ds4_buf t = { 0 };
    ds4_detokenize(ds4_model_tokenizer(M), IDS.v + 90, 200, &t);
    ds4_session *s = sess(1024);
    size_t used;
    CHECK(ds4_kvstore_restore(kv, s, t.p, t.n, 0, 0, &used) == 200, "newest survives eviction");

    /* injected write failure: error, nothing added, nothing lost */
    uint64_t before;
    int nbefore = count_files(dir, ".ds4kv", &before);
    ds4_session_reset(a);
    ds4_session_eval(a, IDS.v + 300, 150, NULL, NULL);
    setenv("DS4_KV_FAULT", "write", 1);
    char *err = NULL;
    CHECK(ds4_kvstore_save(kv, a, DS4_KV_EVICT, NULL, 0, &err) != DS4_OK && err, "fault reported");
    unsetenv("DS4_KV_FAULT");
    uint64_t after;
    CHECK(count_files(dir, ".ds4kv", &after) == nbefore && after == before, "nothing changed");
    {
        DIR *d = opendir(dir);
        struct dirent *de;
        int tmps = 0;
        while (d && (de = readdir(d))) tmps += !strncmp(de->d_name, ".tmp-", 5);
        if (d) closedir(d);
        CHECK(tmps == 0, "no temp file left (%d)", tmps);
    }
    free(err);
    CHECK(ds4_kvstore_save(kv, a, DS4_KV_EVICT, NULL, 0, NULL) == DS4_OK, "save works again");
    ds4_kvstore_stats st;
    ds4_kvstore_get_stats(kv, &st);
    CHECK(st.write_errors == 1 && st.evictions >= 7, "stats: %llu errors, %llu evictions",
          (unsigned long long)st.write_errors, (unsigned long long)st.evictions);
    ds4_buf_free(&t);
    ds4_session_free(s);
    ds4_session_free(a);
    ds4_kvstore_close(kv);
}

/* Two processes saving into one directory at the same time (the lock file
 * serialises directory mutations; every file must verify afterwards). */
static void saver(int k, const char *dir) {
    ds4_kvstore *kv = store(dir, 0);
    ds4_session *s = sess(1024);
    for (int i = 0; i < 5; i++) {
        ds4_session_reset(s);
        ds4_session_eval(s, IDS.v + k * 50 + i * 7, 120, NULL, NULL);
        ds4_kvstore_save(kv, s, DS4_KV_MANUAL, NULL, 0, NULL);
    }
    ds4_session_free(s);
    ds4_kvstore_close(kv);
}

static void test_shared_dir(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/shared", ROOT);
    mkdirp(dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* the child gets its own model (thread pools do not survive fork) */
        const char *sh = getenv("DS4_SHARED");
        char path[512];
        snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", sh ? sh : "../shared");
        M = ds4_model_load(path, NULL, NULL);
        if (!M) _exit(3);
        saver(1, dir);
        _exit(0);
    }
    saver(0, dir);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "second writer exited cleanly");
    DIR *d = opendir(dir);
    struct dirent *de;
    int ok = 0, bad = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".ds4kv")) continue;
        char p[700], *err = NULL;
        ds4_kv_file_info in;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (ds4_kv_file_info_read(p, 1, &in, &err) == 0) ok++; else bad++;
        free(err);
    }
    closedir(d);
    CHECK(ok == 10 && bad == 0, "two writers, one directory: %d ok, %d bad", ok, bad);
}

int main(void) {
    const char *sh = getenv("DS4_SHARED");
    char path[512];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", sh ? sh : "../shared");
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    mp.n_threads = 2;
    char *err = NULL;
    M = ds4_model_load(path, &mp, &err);
    if (!M) { fprintf(stderr, "%s\n", err); return 1; }
    ds4_model_info info;
    ds4_model_get_info(M, &info);
    V = info.n_vocab;
    snprintf(path, sizeof path, "%s/golden/sequences/seq_600a.ids.txt", sh ? sh : "../shared");
    FILE *f = fopen(path, "r");
    int v;
    while (f && fscanf(f, "%d", &v) == 1) ds4_tokens_push(&IDS, v);
    if (f) fclose(f);
    const char *tmp = getenv("TMPDIR");
    snprintf(ROOT, sizeof ROOT, "%s/ds4-kvtest-%d", tmp ? tmp : "/tmp", (int)getpid());
    mkdirp(ROOT);
    char logp[400];
    snprintf(logp, sizeof logp, "%s/warnings.log", ROOT);
    LOG = fopen(logp, "w");

    test_roundtrip();
    test_damage();
    test_cap_and_faults();
    test_shared_dir();

    fclose(LOG);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ROOT);
    if (system(cmd)) { }
    ds4_tokens_free(&IDS);
    ds4_model_free(M);
    printf("test_kvstore: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
