/*
 * test_agent_fs.c -- ds4-agent's confined file access and its diff
 * (agent/fsconf.c and agent/diff.c, compiled in here: they use only libc
 * and the library's ds4_buf):
 *   - diff: exact `diff -u` text for small cases (an edit inside a line is
 *     -1 +1, a deleted line -1 +0, an added one -0 +1, new files, missing
 *     final newlines); on random pairs the diff is minimal (removed + added
 *     = N + M - 2 LCS) and applying its hunks to the old text gives the
 *     new one; an edit in a 200000-line file diffs 7 lines at the right
 *     line numbers; a huge rewrite stays bounded and says so;
 *   - resolution, with openat2 and with the component walk: in-tree links
 *     (relative and absolute) are followed, anything leading out (an
 *     absolute path, "..", a link, a link loop) is refused with EXDEV /
 *     ELOOP; missing directories are created beneath the root only, never
 *     after a "..", and nothing is made when the path is refused; a FIFO
 *     is refused without blocking; a failed replace leaves no temp file;
 *   - the race: a thread swaps a directory and a link to outside with
 *     renameat2(RENAME_EXCHANGE) while reads and writes go through that
 *     directory: no read returns the outside file, nothing is created
 *     outside.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../agent/diff.c"
#include "../agent/fsconf.c"

#include "testutil.h"

/* ------------------------------------------------------------------ */
/* diff                                                                */
/* ------------------------------------------------------------------ */

static void diff_is(const char *a, const char *b, int is_new, const char *want, int rm, int add,
                    const char *what) {
    ds4_buf o = { 0 };
    ag_diffstat st;
    ag_diff(a, strlen(a), b, strlen(b), "f", is_new, 0, &o, &st);
    const char *got = o.p ? o.p : "";
    CHECK(!strcmp(got, want), "%s: diff\n%s---- want\n%s", what, got, want);
    CHECK(st.removed == rm && st.added == add, "%s: -%d +%d, want -%d +%d", what, st.removed,
          st.added, rm, add);
    ds4_buf_free(&o);
}

static void diff_exact(void) {
    diff_is("alpha\nbeta\ngamma\n", "alpha\n\ngamma\n", 0,
            "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+\n gamma\n", 1, 1,
            "edit inside a line (beta -> \"\")");
    diff_is("a\n", "b\n", 0, "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", 1, 1, "a -> b");
    diff_is("alpha\nbeta\ngamma\n", "alpha\ngamma\n", 0,
            "--- a/f\n+++ b/f\n@@ -1,3 +1,2 @@\n alpha\n-beta\n gamma\n", 1, 0, "a line deleted");
    diff_is("alpha\nbeta\n", "alpha\nbeta\nx\n", 0,
            "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n alpha\n beta\n+x\n", 0, 1, "a line added");
    diff_is("", "one\ntwo\n", 1, "--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+one\n+two\n", 0, 2,
            "a new file");
    diff_is("x\ny", "x\ny\n", 0,
            "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y\n", 1, 1,
            "a final newline added");
    diff_is("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n10\n11\nXII\n", 0,
            "--- a/f\n+++ b/f\n@@ -2,11 +2,11 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n 9\n 10\n 11\n-12\n+XII\n",
            2, 2, "two changes 6 lines apart share a hunk");
    diff_is("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n", "one\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13x\n", 0,
            "--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n-1\n+one\n 2\n 3\n 4\n@@ -10,4 +10,4 @@\n 10\n 11\n 12\n-13\n+13x\n",
            2, 2, "two changes far apart: two hunks");
    diff_is("same\n", "same\n", 0, "", 0, 0, "identical texts");
    diff_is("a\nb\n", "", 0, "--- a/f\n+++ b/f\n@@ -1,2 +0,0 @@\n-a\n-b\n", 2, 0, "everything deleted");
}

/* LCS length by dynamic programming (the minimal diff's size is N + M - 2 LCS). */
static int lcs(char **a, int n, char **b, int m) {
    int *t = calloc((size_t)(n + 1) * (size_t)(m + 1), sizeof *t);
    for (int i = n - 1; i >= 0; i--)
        for (int j = m - 1; j >= 0; j--)
            t[i * (m + 1) + j] = !strcmp(a[i], b[j]) ? 1 + t[(i + 1) * (m + 1) + j + 1]
                                 : (t[(i + 1) * (m + 1) + j] > t[i * (m + 1) + j + 1] ? t[(i + 1) * (m + 1) + j]
                                                                                     : t[i * (m + 1) + j + 1]);
    int r = t[0];
    free(t);
    return r;
}

/* Apply a unified diff's hunks to `a` (lines): the result, or NULL when a
 * context or removed line does not match, or hunks overlap / run back. */
static char *apply(const char *a, const char *d) {
    ds4_buf o = { 0 };
    const char *ap = a;
    int aline = 1;   /* next line of a to copy */
    const char *p = strstr(d, "@@ ");
    while (p && *p) {
        int as, ac = 1, bs, bc = 1;
        if (sscanf(p, "@@ -%d,%d +%d,%d @@", &as, &ac, &bs, &bc) != 4) {
            ac = bc = 1;
            if (sscanf(p, "@@ -%d +%d,%d @@", &as, &bs, &bc) == 3) {}
            else if (sscanf(p, "@@ -%d,%d +%d @@", &as, &ac, &bs) == 3) {}
            else if (sscanf(p, "@@ -%d +%d @@", &as, &bs) == 2) {}
            else { ds4_buf_free(&o); return NULL; }
        }
        int first = ac ? as : as + 1;   /* "-l,0" means after line l */
        if (first < aline) { ds4_buf_free(&o); return NULL; }
        for (; aline < first; aline++) {
            const char *nl = strchr(ap, '\n');
            size_t l = nl ? (size_t)(nl - ap) + 1 : strlen(ap);
            ds4_buf_append(&o, ap, l);
            ap += l;
        }
        p = strchr(p, '\n') + 1;
        while (*p && strncmp(p, "@@ ", 3)) {
            const char *nl = strchr(p, '\n');
            size_t l = (size_t)(nl - p);
            int nonl = !strncmp(nl + 1, "\\ No newline", 12);
            const char *body = p + 1;
            size_t bl = l - 1 + (nonl ? 0 : 1);   /* with its '\n' unless marked */
            if (p[0] == ' ' || p[0] == '-') {
                if (strncmp(ap, body, bl)) { ds4_buf_free(&o); return NULL; }
                if (p[0] == ' ') ds4_buf_append(&o, body, bl);
                ap += bl;
                aline++;
            } else if (p[0] == '+') {
                ds4_buf_append(&o, body, bl);
            } else { ds4_buf_free(&o); return NULL; }
            p = nl + 1;
            if (nonl) p = strchr(p, '\n') + 1;
        }
    }
    ds4_buf_puts(&o, ap);
    char *r = strdup(o.p ? o.p : "");
    ds4_buf_free(&o);
    return r;
}

/* The lines of a text, each with its '\n' when it has one. */
static int lines_of(const char *t, char **out) {
    int n = 0;
    while (*t) {
        const char *nl = strchr(t, '\n');
        size_t l = nl ? (size_t)(nl - t) + 1 : strlen(t);
        out[n++] = strndup(t, l);
        t += l;
    }
    return n;
}

static void diff_random(void) {
    static const char *words[] = { "a", "b", "c", "d", "e" };
    srand(7);
    int bad_min = 0, bad_apply = 0, bad_ctx = 0;
    for (int it = 0; it < 3000; it++) {
        ds4_buf A = { 0 }, B = { 0 };
        int n = rand() % 25, m = rand() % 25;
        for (int i = 0; i < n; i++) ds4_buf_printf(&A, "%s\n", words[rand() % 5]);
        for (int i = 0; i < m; i++) ds4_buf_printf(&B, "%s\n", words[rand() % 5]);
        /* sometimes a last line without its newline */
        if (A.n && rand() % 4 == 0) A.p[--A.n] = 0;
        if (B.n && rand() % 4 == 0) B.p[--B.n] = 0;
        const char *a = A.p ? A.p : "", *b = B.p ? B.p : "";
        ds4_buf o = { 0 };
        ag_diffstat st;
        ag_diff(a, A.n, b, B.n, "f", 0, 0, &o, &st);
        char *la[32], *lb[32];
        int na = lines_of(a, la), nb = lines_of(b, lb);
        int l = lcs(la, na, lb, nb);
        if (st.removed + st.added != na + nb - 2 * l || st.whole) bad_min++;
        char *got = apply(a, o.p ? o.p : "");
        if (!got || strcmp(got, b)) bad_apply++;
        free(got);
        /* at most 3 context lines in a row at a hunk's start */
        for (const char *q = o.p ? strstr(o.p, "@@ ") : NULL; q; q = strstr(q + 1, "\n@@ ")) {
            const char *s = strchr(q + 1, '\n') + 1;
            int c = 0;
            while (*s == ' ') { c++; s = strchr(s, '\n') + 1; }
            if (c > 3) bad_ctx++;
        }
        for (int i = 0; i < na; i++) free(la[i]);
        for (int i = 0; i < nb; i++) free(lb[i]);
        ds4_buf_free(&o);
        ds4_buf_free(&A);
        ds4_buf_free(&B);
    }
    CHECK(!bad_min, "%d of 3000 random diffs are not minimal", bad_min);
    CHECK(!bad_apply, "%d of 3000 random diffs do not turn the old text into the new one", bad_apply);
    CHECK(!bad_ctx, "%d hunks start with more than 3 context lines", bad_ctx);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void diff_large(void) {
    ds4_buf A = { 0 }, B = { 0 };
    for (int i = 1; i <= 200000; i++) {
        ds4_buf_printf(&A, "line %d\n", i);
        ds4_buf_printf(&B, i == 100001 ? "line %d changed\n" : "line %d\n", i);
    }
    ds4_buf o = { 0 };
    ag_diffstat st;
    double t0 = now_s();
    ag_diff(A.p, A.n, B.p, B.n, "big", 0, 400, &o, &st);
    double el = now_s() - t0;
    CHECK(st.removed == 1 && st.added == 1 && st.first == 100001 && !st.whole,
          "one line of 200000 changed: -%d +%d at %d", st.removed, st.added, st.first);
    CHECK(o.p && strstr(o.p, "@@ -99998,7 +99998,7 @@\n line 99998\n") &&
          strstr(o.p, "-line 100001\n+line 100001 changed\n"), "large diff text:\n%s", o.p ? o.p : "");
    CHECK(el < 1.0, "the diff of one change in a 200000-line file took %.2f s", el);
    ds4_buf_free(&o);
    /* everything different: bounded, whole-region counts, output capped */
    ds4_buf C = { 0 }, D = { 0 };
    for (int i = 0; i < 5000; i++) {
        ds4_buf_printf(&C, "old %d\n", i);
        ds4_buf_printf(&D, "new %d\n", i);
    }
    t0 = now_s();
    ag_diff(C.p, C.n, D.p, D.n, "all", 0, 400, &o, &st);
    el = now_s() - t0;
    CHECK(st.whole && st.removed == 5000 && st.added == 5000, "a complete rewrite: whole=%d -%d +%d",
          st.whole, st.removed, st.added);
    CHECK(o.p && strstr(o.p, "too many differences") && strstr(o.p, "more diff lines not shown"),
          "a complete rewrite says so and is capped");
    CHECK(el < 2.0, "a 5000-line rewrite took %.2f s", el);
    ds4_buf_free(&o);
    ds4_buf_free(&A); ds4_buf_free(&B); ds4_buf_free(&C); ds4_buf_free(&D);
}

/* ------------------------------------------------------------------ */
/* resolution                                                          */
/* ------------------------------------------------------------------ */

static char T[PATH_MAX - 16], W[PATH_MAX], O[PATH_MAX];

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) { perror(path); exit(1); }
    fputs(text, f);
    fclose(f);
}

static char *read_rel(const fc_root *r, const char *rel, int *err) {
    int fd = fc_open(r, rel, O_RDONLY | O_NONBLOCK);
    if (fd < 0) { *err = errno; return NULL; }
    size_t n;
    char *p = fc_slurp(fd, &n, 1 << 20);
    *err = p ? 0 : errno;
    close(fd);
    return p;
}

static int exists(const char *dir, const char *name) {
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static int tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += strstr(de->d_name, ".ds4tmp") != NULL;
    if (d) closedir(d);
    return n;
}

static void resolution(int use_openat2) {
    fc_use_openat2 = use_openat2;
    const char *mode = use_openat2 ? "openat2" : "walk";
    fc_root r;
    CHECK(fc_root_open(&r, W) == 0, "open the root");
    int e;
    char *p = read_rel(&r, "d/f.txt", &e);
    CHECK(p && !strcmp(p, "inside\n"), "%s: a plain path", mode);
    free(p);
    p = read_rel(&r, "rel/f.txt", &e);
    CHECK(p && !strcmp(p, "inside\n"), "%s: a relative in-tree link", mode);
    free(p);
    p = read_rel(&r, "abs_in/f.txt", &e);
    CHECK(p && !strcmp(p, "inside\n"), "%s: an absolute in-tree link", mode);
    free(p);
    p = read_rel(&r, "d/../d/./f.txt", &e);
    CHECK(p && !strcmp(p, "inside\n"), "%s: .. and . inside", mode);
    free(p);
    p = read_rel(&r, "flink", &e);
    CHECK(p && !strcmp(p, "inside\n"), "%s: a link to a file", mode);
    free(p);
    static const char *out[] = { "esc/f.txt", "../o/f.txt", "d/../../o/f.txt", "up/f.txt", "esc", "dotdot/o/f.txt" };
    for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
        p = read_rel(&r, out[i], &e);
        CHECK(!p && e == EXDEV, "%s: %s is refused as outside (errno %d)", mode, out[i], e);
        free(p);
    }
    p = read_rel(&r, "loop", &e);
    CHECK(!p && e == ELOOP, "%s: a link loop is ELOOP (%d)", mode, e);
    free(p);
    p = read_rel(&r, "fifo", &e);
    CHECK(!p && e == ENODEV, "%s: a FIFO is refused without blocking (%d)", mode, e);
    free(p);
    p = read_rel(&r, "d", &e);
    CHECK(!p && e == EISDIR, "%s: a directory is EISDIR (%d)", mode, e);
    free(p);

    /* absolute paths from the model */
    char rel[PATH_MAX], abs[PATH_MAX * 2];
    snprintf(abs, sizeof abs, "%s/d/f.txt", W);
    CHECK(fc_relpath(&r, abs, rel, sizeof rel) == 0 && !strcmp(rel, "d/f.txt"), "absolute inside");
    CHECK(fc_relpath(&r, W, rel, sizeof rel) == 0 && !strcmp(rel, ""), "the root itself");
    snprintf(abs, sizeof abs, "%sx/f.txt", W);
    CHECK(fc_relpath(&r, abs, rel, sizeof rel) != 0 && errno == EXDEV, "a sibling with the root as prefix");
    CHECK(fc_relpath(&r, O, rel, sizeof rel) != 0 && errno == EXDEV, "absolute outside");

    /* parents: created beneath the root, never after "..", never outside */
    char name[NAME_MAX + 1];
    int fl;
    char sub[64];
    snprintf(sub, sizeof sub, "new-%s/sub/x.txt", mode);
    int dfd = fc_parent(&r, sub, 1, name, sizeof name, &fl);
    CHECK(dfd >= 0 && !strcmp(name, "x.txt") && !fl, "%s: missing parents created", mode);
    char err[256];
    CHECK(dfd >= 0 && fc_replace(dfd, name, "x\n", 2, 0644, err, sizeof err) == 0, "%s: replace", mode);
    if (dfd >= 0) {
        char np[PATH_MAX * 2];
        snprintf(np, sizeof np, "%s/new-%s/sub", W, mode);
        CHECK(exists(np, "x.txt") && !tmp_files(np), "%s: the file, no temp file left", mode);
        close(dfd);
    }
    dfd = fc_parent(&r, "missing/../x.txt", 1, name, sizeof name, &fl);
    CHECK(dfd < 0 && errno == EINVAL && !exists(W, "missing"), "%s: '..' after a missing dir: EINVAL, nothing made", mode);
    dfd = fc_parent(&r, "esc/newdir/x.txt", 1, name, sizeof name, &fl);
    CHECK(dfd < 0 && errno == EXDEV && !exists(O, "newdir"), "%s: no directory made outside", mode);
    dfd = fc_parent(&r, "flink", 0, name, sizeof name, &fl);
    CHECK(dfd >= 0 && fl && !strcmp(name, "f.txt"), "%s: a link as the last component is followed", mode);
    if (dfd >= 0) close(dfd);
    dfd = fc_parent(&r, "esclink", 0, name, sizeof name, &fl);
    CHECK(dfd < 0 && errno == EXDEV, "%s: a last-component link to outside is refused", mode);
    dfd = fc_parent(&r, "", 0, name, sizeof name, &fl);
    CHECK(dfd < 0 && errno == EISDIR, "%s: the root is not a file name", mode);
    /* a failed replace (the name is a directory) leaves no temp file */
    dfd = fc_parent(&r, "d", 0, name, sizeof name, &fl);
    CHECK(dfd >= 0 && fc_replace(dfd, name, "x", 1, 0644, err, sizeof err) != 0 && !tmp_files(W),
          "%s: a failed replace cleans up (%s)", mode, err);
    if (dfd >= 0) close(dfd);
    fc_root_close(&r);
}

/* ------------------------------------------------------------------ */
/* the race                                                            */
/* ------------------------------------------------------------------ */

static volatile int g_stop;
static long g_swaps;

static void *swapper(void *ud) {
    (void)ud;
    char a[PATH_MAX * 2], b[PATH_MAX * 2];
    snprintf(a, sizeof a, "%s/sw", W);
    snprintf(b, sizeof b, "%s/sl", W);
    while (!g_stop)
        if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0) g_swaps++;
    return NULL;
}

static void race(int use_openat2) {
    fc_use_openat2 = use_openat2;
    const char *mode = use_openat2 ? "openat2" : "walk";
    fc_root r;
    CHECK(fc_root_open(&r, W) == 0, "open the root");
    g_stop = 0;
    g_swaps = 0;
    pthread_t th;
    pthread_create(&th, NULL, swapper, NULL);
    int in = 0, leaked = 0, refused = 0, writes = 0;
    for (int i = 0; i < 20000; i++) {
        int e;
        char *p = read_rel(&r, "sw/f.txt", &e);
        if (p && !strcmp(p, "inside\n")) in++;
        else if (p) leaked++;
        else refused++;
        free(p);
        if (i % 20 == 0) {
            char name[NAME_MAX + 1], err[256];
            int fl;
            int dfd = fc_parent(&r, "sw/w.txt", 0, name, sizeof name, &fl);
            if (dfd >= 0) {
                writes += fc_replace(dfd, name, "w\n", 2, 0644, err, sizeof err) == 0;
                close(dfd);
            }
        }
    }
    g_stop = 1;
    pthread_join(th, NULL);
    CHECK(!leaked, "%s: %d of 20000 reads returned the file outside", mode, leaked);
    CHECK(!exists(O, "w.txt") && !tmp_files(O), "%s: a write landed outside", mode);
    CHECK(g_swaps > 100 && in > 0 && refused > 0 && writes > 0,
          "%s: the race ran (%ld swaps, %d reads inside, %d refused, %d writes)", mode, g_swaps, in,
          refused, writes);
    printf("race (%s): %ld swaps, %d reads inside, %d refused, %d writes\n", mode, g_swaps, in, refused, writes);
    fc_root_close(&r);
}

static void rm_rf(const char *p) {
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", p);
}

int main(void) {
    diff_exact();
    diff_random();
    diff_large();

    snprintf(T, sizeof T, "/tmp/ds4-test-agent-fs-XXXXXX");
    if (!mkdtemp(T)) { perror("mkdtemp"); return 1; }
    char *real = realpath(T, NULL);
    snprintf(T, sizeof T, "%s", real);
    free(real);
    snprintf(W, sizeof W, "%s/w", T);
    snprintf(O, sizeof O, "%s/o", T);
    char p[PATH_MAX * 2], q[PATH_MAX * 2];
    mkdir(W, 0755);
    mkdir(O, 0755);
    snprintf(p, sizeof p, "%s/d", W); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/d/f.txt", W); put(p, "inside\n");
    snprintf(p, sizeof p, "%s/f.txt", O); put(p, "OUTSIDE\n");
    snprintf(p, sizeof p, "%s/esc", W); CHECK(symlink(O, p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/rel", W); CHECK(symlink("d", p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/abs_in", W); snprintf(q, sizeof q, "%s/d", W); CHECK(symlink(q, p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/up", W); CHECK(symlink("../o", p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/dotdot", W); CHECK(symlink("..", p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/loop", W); CHECK(symlink("loop", p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/flink", W); CHECK(symlink("d/f.txt", p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/esclink", W); snprintf(q, sizeof q, "%s/f.txt", O); CHECK(symlink(q, p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/fifo", W); CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    snprintf(p, sizeof p, "%s/sw", W); mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/sw/f.txt", W); put(p, "inside\n");
    snprintf(p, sizeof p, "%s/sl", W); CHECK(symlink(O, p) == 0, "symlink");

    resolution(1);
    resolution(0);
    race(1);
    race(0);
    rm_rf(T);

    printf("test_agent_fs: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
