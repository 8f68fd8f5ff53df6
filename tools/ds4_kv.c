/*
 * ds4_kv.c -- `ds4-kv`: look after a disk KV cache directory (the files
 * ds4-server and `ds4 --kv-disk-dir` write): list them with their token
 * counts, sizes, reasons, ages, hit counts, the architecture of the model
 * that saved them and the end of their text; verify checksums (and, with -m, that they belong to a model);
 * remove files.  Uses only the public API (ds4.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"
#include "common/args.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-kv list DIR              list cache files (tokens, size, reason,\n"
"                                    age, last use, hits, the saving model's\n"
"                                    architecture, and the end of the text\n"
"                                    each holds: what tells them apart)\n"
"       ds4-kv verify DIR [-m MODEL] check sizes and checksums of every file;\n"
"                                    with -m (--model) also that each file was\n"
"                                    saved by that model (exit status 1 if\n"
"                                    any fails)\n"
"       ds4-kv rm DIR NAME...        remove files (NAME: full name or a prefix\n"
"                                    that names one file)\n"
"       ds4-kv rm DIR --all | --bad | --older-than DAYS\n"
"                                    every file / the damaged ones / those\n"
"                                    not used for DAYS days (fractions allowed)\n"
"       ds4-kv -h | --help | --version\n"
"\n"
"Files are <sha1 of the rendered text>.ds4kv; damaged files found by the\n"
"server are renamed *.ds4kv.bad.  The format is in docs/kvcache.md.\n"
"Exit status: 0 ok, 1 a file failed (verify) or could not be removed,\n"
"2 bad usage or an unreadable directory.\n");
}

typedef struct {
    char **names;
    int n, cap;
} names_t;

static void names_free(names_t *nm) {
    for (int i = 0; i < nm->n; i++) free(nm->names[i]);
    free(nm->names);
    memset(nm, 0, sizeof *nm);
}

static int cmpstr(const void *a, const void *b);

/* The cache files of `dir`, sorted by name (an empty directory gives an
 * empty list: qsort is not called with a NULL array).  The caller frees
 * the list with names_free, also after a failure. */
static int collect(const char *dir, names_t *out, int include_bad) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ds4-kv: cannot open %s: %s\n", dir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        int ok = l > 6 && !strcmp(de->d_name + l - 6, ".ds4kv");
        int bad = l > 10 && !strcmp(de->d_name + l - 10, ".ds4kv.bad");
        if (!ok && !(include_bad && bad)) continue;
        if (out->n == out->cap) {
            int nc = out->cap ? out->cap * 2 : 64;
            char **nn = realloc(out->names, (size_t)nc * sizeof *nn);
            if (!nn) break;
            out->names = nn;
            out->cap = nc;
        }
        if (!(out->names[out->n] = strdup(de->d_name))) break;
        out->n++;
    }
    int oom = de != NULL;
    closedir(d);
    if (oom) {
        fprintf(stderr, "ds4-kv: %s: out of memory listing the directory\n", dir);
        return -1;
    }
    if (out->n > 1) qsort(out->names, (size_t)out->n, sizeof *out->names, cmpstr);
    return 0;
}

/* Directory entries and file contents are untrusted: printed escaped. */
static const char *esc(const char *s, char *buf, size_t cap) {
    return ds4_escape(buf, cap, s, strlen(s));
}

static int cmpstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void age(uint64_t t, char *buf, size_t n) {
    long d = (long)time(NULL) - (long)t;
    if (t == 0) snprintf(buf, n, "-");
    else if (d < 120) snprintf(buf, n, "%lds", d);
    else if (d < 7200) snprintf(buf, n, "%ldm", d / 60);
    else if (d < 172800) snprintf(buf, n, "%ldh", d / 3600);
    else snprintf(buf, n, "%ldd", d / 86400);
}

/* Code points of UTF-8 text (continuation bytes not counted). */
static size_t n_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* Pointer to the start of the last `keep` code points of s. */
static const char *last_chars(const char *s, size_t keep) {
    size_t n = n_chars(s);
    while (n > keep && *s) {
        s++;
        while (((unsigned char)*s & 0xc0) == 0x80) s++;
        n--;
    }
    return s;
}

/* The text column: the *end* of the text, because files of one
 * conversation share its start (BOS, system prompt) and differ at the end;
 * a short text is shown whole. */
#define TEXT_COLS 60
static void put_text(const ds4_kv_file_info *in) {
    if (in->text_len < sizeof in->prefix - 1 && !strcmp(in->prefix, in->suffix) &&
        n_chars(in->prefix) <= TEXT_COLS) {
        fputs(in->prefix, stdout);
        return;
    }
    fputs("...", stdout);
    fputs(last_chars(in->suffix, TEXT_COLS - 3), stdout);
}

static int cmd_list(const char *dir) {
    names_t nm = { 0 };
    if (collect(dir, &nm, 1)) { names_free(&nm); return 2; }
    printf("%-14s %8s %10s %-9s %6s %6s %5s  %-10s %s\n", "file", "tokens", "MiB", "reason", "age",
           "used", "hits", "arch", "end of the text");
    uint64_t total = 0;
    for (int i = 0; i < nm.n; i++) {
        char path[4096], eb[512], *err = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, nm.names[i]);
        ds4_kv_file_info in;
        int rc = ds4_kv_file_info_read(path, 0, &in, &err);
        struct stat sb;
        if (!stat(path, &sb)) total += (uint64_t)sb.st_size;
        if (rc) {
            printf("%-14.12s %s (%s)\n", esc(nm.names[i], eb, sizeof eb), "INVALID", err ? err : "?");
            free(err);
            continue;
        }
        char a[32], u[32];
        age(in.created, a, sizeof a);
        age(in.last_used, u, sizeof u);
        /* the header's general.architecture (bytes 112..127; files from
         * before it was written read as deepseek4) */
        char ab[64];
        printf("%-14.12s %8u %10.2f %-9s %6s %6s %5u  %-10s ", esc(nm.names[i], eb, sizeof eb), in.n_tokens,
               in.file_bytes / 1048576.0, ds4_kv_reason_name(in.reason), a, u, in.hits,
               esc(in.arch, ab, sizeof ab));
        put_text(&in);
        putchar('\n');
    }
    printf("%d file(s), %.2f MiB\n", nm.n, total / 1048576.0);
    names_free(&nm);
    return 0;
}

static int cmd_verify(const char *dir, const char *model) {
    uint8_t fp[20], fam[20];
    ds4_model *m = NULL;
    if (model) {
        char *err = NULL;
        m = ds4_model_load(model, NULL, &err);
        if (!m) { fprintf(stderr, "ds4-kv: %s\n", err ? err : "cannot load model"); free(err); return 2; }
        ds4_model_fingerprint(m, fp);
        ds4_model_family_fingerprint(m, fam);
    }
    names_t nm = { 0 };
    if (collect(dir, &nm, 0)) { names_free(&nm); ds4_model_free(m); return 2; }
    int bad = 0;
    for (int i = 0; i < nm.n; i++) {
        char path[4096], eb[512], *err = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, nm.names[i]);
        ds4_kv_file_info in;
        if (ds4_kv_file_info_read(path, 1, &in, &err)) {
            printf("BAD  %s: %s\n", esc(nm.names[i], eb, sizeof eb), err ? err : "?");
            bad++;
        } else if (m && memcmp(in.fingerprint, fp, 20)) {
            printf("%s  %s: saved by %s\n", memcmp(in.family, fam, 20) ? "FOREIGN" : "VARIANT",
                   esc(nm.names[i], eb, sizeof eb), memcmp(in.family, fam, 20) ? "another model" :
                   "the same model in another quantization");
            if (memcmp(in.family, fam, 20)) bad++;
        } else {
            char ab[64];
            printf("ok   %s: %s, %u tokens, %u tool ids\n", esc(nm.names[i], eb, sizeof eb), esc(in.arch, ab, sizeof ab),
                   in.n_tokens, in.n_tools);
        }
        free(err);
    }
    printf("%d file(s), %d bad\n", nm.n, bad);
    names_free(&nm);
    ds4_model_free(m);
    return bad ? 1 : 0;
}

static int cmd_rm(const char *dir, char **names, int n_names, int all, int bad, double days) {
    names_t nm = { 0 };
    if (collect(dir, &nm, 1)) { names_free(&nm); return 2; }
    /* a NAME must pick exactly one file: a prefix shared by several is a
     * mistake, and nothing is removed */
    for (int i = 0; i < n_names; i++) {
        int hits = 0;
        for (int k = 0; k < nm.n; k++) hits += !strncmp(nm.names[k], names[i], strlen(names[i]));
        if (hits != 1) {
            fprintf(stderr, "ds4-kv: '%s' %s\n", names[i],
                    hits ? "matches several files: give more of the name" : "matches no file");
            names_free(&nm);
            return 1;
        }
    }
    int removed = 0, rc = 0;
    for (int k = 0; k < nm.n; k++) {
        const char *f = nm.names[k];
        int isbad = strstr(f, ".bad") != NULL, hit = all || (bad && isbad);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, f);
        if (!hit && days >= 0) {
            ds4_kv_file_info in;
            char *err = NULL;
            if (ds4_kv_file_info_read(path, 0, &in, &err) == 0)
                hit = (double)((long)time(NULL) - (long)in.last_used) > days * 86400.0;
            free(err);
        }
        for (int i = 0; i < n_names && !hit; i++)
            if (!strncmp(f, names[i], strlen(names[i]))) hit = 1;
        if (!hit) continue;
        if (unlink(path)) {
            char eb[512];
            fprintf(stderr, "ds4-kv: %s/%s: %s\n", dir, esc(f, eb, sizeof eb), strerror(errno));
            rc = 1;
        }
        else removed++;
    }
    printf("removed %d file(s)\n", removed);
    names_free(&nm);
    return rc;
}

int main(int argc, char **argv) {
    ds4_args a;
    ds4_args_init(&a, "ds4-kv", argc, argv, usage);
    const char *cmd = NULL, *dir = NULL, *model = NULL;
    char **names = calloc((size_t)argc + 1, sizeof *names);
    int n_names = 0, all = 0, bad = 0;
    double days = -1;
    if (!names) { fprintf(stderr, "ds4-kv: out of memory\n"); return 1; }
    while (ds4_args_next(&a)) {
        if (ds4_args_is(&a, "-m", "--model")) model = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--all")) all = 1;
        else if (ds4_args_is(&a, NULL, "--bad")) bad = 1;
        else if (ds4_args_is(&a, NULL, "--older-than")) days = ds4_args_double(&a, 0, 1e6);
        else if (ds4_args_positional(&a)) {
            if (!cmd) cmd = a.cur;
            else if (!dir) dir = a.cur;
            else names[n_names++] = a.argv[a.i];
        }
        else ds4_args_unknown(&a);
    }
    if (!cmd) { usage(stderr); free(names); return 2; }
    int is_list = !strcmp(cmd, "list"), is_verify = !strcmp(cmd, "verify"), is_rm = !strcmp(cmd, "rm");
    if (!is_list && !is_verify && !is_rm) ds4_args_fail("ds4-kv", "unknown command '%s' (list, verify or rm)", cmd);
    if (!dir) ds4_args_fail("ds4-kv", "%s needs the cache directory", cmd);
    if (!is_verify && model) ds4_args_fail("ds4-kv", "-m applies to verify only");
    if (!is_rm && (all || bad || days >= 0)) ds4_args_fail("ds4-kv", "--all, --bad and --older-than apply to rm only");
    if (!is_rm && n_names) ds4_args_fail("ds4-kv", "unexpected argument '%s'", names[0]);
    if (is_rm && !n_names && !all && !bad && days < 0)
        ds4_args_fail("ds4-kv", "rm needs file names, --all, --bad or --older-than DAYS");
    int rc = is_list ? cmd_list(dir) : is_verify ? cmd_verify(dir, model)
                                                 : cmd_rm(dir, names, n_names, all, bad, days);
    free(names);
    return rc;
}
