/*
 * ds4_kv.c -- `ds4-kv`: look after a disk KV cache directory (the files
 * ds4-server and `ds4 --kv-disk-dir` write): list them with their token
 * counts, sizes, reasons, ages, hit counts and the first bytes of their
 * text; verify checksums (and, with -m, that they belong to a model);
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

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-kv list DIR              list cache files (tokens, size, reason,\n"
"                                    age, last use, hits, text prefix)\n"
"       ds4-kv verify DIR [-m MODEL] check sizes and checksums of every file;\n"
"                                    with -m also that each file was saved by\n"
"                                    that model (exit status 1 if any fails)\n"
"       ds4-kv rm DIR NAME...        remove files (NAME: full or unique prefix)\n"
"       ds4-kv rm DIR --all | --bad | --older-than DAYS\n"
"\n"
"Files are <sha1 of the rendered text>.ds4kv; damaged files found by the\n"
"server are renamed *.ds4kv.bad.  The format is in the README.\n");
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

static int cmd_list(const char *dir) {
    names_t nm = { 0 };
    if (collect(dir, &nm, 1)) { names_free(&nm); return 1; }
    printf("%-14s %8s %10s %-9s %6s %6s %5s  %s\n", "file", "tokens", "MiB", "reason", "age",
           "used", "hits", "text");
    uint64_t total = 0;
    for (int i = 0; i < nm.n; i++) {
        char path[4096], *err = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, nm.names[i]);
        ds4_kv_file_info in;
        int rc = ds4_kv_file_info_read(path, 0, &in, &err);
        struct stat sb;
        if (!stat(path, &sb)) total += (uint64_t)sb.st_size;
        if (rc) {
            printf("%-14.12s %s (%s)\n", nm.names[i], "INVALID", err ? err : "?");
            free(err);
            continue;
        }
        char a[32], u[32];
        age(in.created, a, sizeof a);
        age(in.last_used, u, sizeof u);
        printf("%-14.12s %8u %10.2f %-9s %6s %6s %5u  %.60s\n", nm.names[i], in.n_tokens,
               in.file_bytes / 1048576.0, ds4_kv_reason_name(in.reason), a, u, in.hits, in.prefix);
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
        if (!m) { fprintf(stderr, "ds4-kv: %s\n", err ? err : "cannot load model"); return 2; }
        ds4_model_fingerprint(m, fp);
        ds4_model_family_fingerprint(m, fam);
    }
    names_t nm = { 0 };
    if (collect(dir, &nm, 0)) { names_free(&nm); ds4_model_free(m); return 2; }
    int bad = 0;
    for (int i = 0; i < nm.n; i++) {
        char path[4096], *err = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, nm.names[i]);
        ds4_kv_file_info in;
        if (ds4_kv_file_info_read(path, 1, &in, &err)) {
            printf("BAD  %s: %s\n", nm.names[i], err ? err : "?");
            bad++;
        } else if (m && memcmp(in.fingerprint, fp, 20)) {
            printf("%s  %s: saved by %s\n", memcmp(in.family, fam, 20) ? "FOREIGN" : "VARIANT",
                   nm.names[i], memcmp(in.family, fam, 20) ? "another model" :
                   "the same model in another quantization");
            if (memcmp(in.family, fam, 20)) bad++;
        } else {
            printf("ok   %s: %u tokens, %u tool ids\n", nm.names[i], in.n_tokens, in.n_tools);
        }
        free(err);
    }
    printf("%d file(s), %d bad\n", nm.n, bad);
    names_free(&nm);
    ds4_model_free(m);
    return bad ? 1 : 0;
}

static int cmd_rm(const char *dir, int argc, char **argv) {
    names_t nm = { 0 };
    if (collect(dir, &nm, 1)) { names_free(&nm); return 1; }
    int all = 0, bad = 0, removed = 0, rc = 0;
    double days = -1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--all")) all = 1;
        else if (!strcmp(argv[i], "--bad")) bad = 1;
        else if (!strcmp(argv[i], "--older-than") && i + 1 < argc) days = atof(argv[++i]);
    }
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
        for (int i = 0; i < argc && !hit; i++)
            if (argv[i][0] != '-' && !strncmp(f, argv[i], strlen(argv[i]))) hit = 1;
        if (!hit) continue;
        if (unlink(path)) { fprintf(stderr, "ds4-kv: %s: %s\n", path, strerror(errno)); rc = 1; }
        else removed++;
    }
    printf("removed %d file(s)\n", removed);
    names_free(&nm);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (argc < 3) { usage(stderr); return 2; }
    const char *cmd = argv[1], *dir = argv[2];
    if (!strcmp(cmd, "list")) return cmd_list(dir);
    if (!strcmp(cmd, "verify")) {
        const char *model = NULL;
        for (int i = 3; i < argc; i++)
            if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
            else { usage(stderr); return 2; }
        return cmd_verify(dir, model);
    }
    if (!strcmp(cmd, "rm")) {
        if (argc < 4) { usage(stderr); return 2; }
        return cmd_rm(dir, argc - 3, argv + 3);
    }
    fprintf(stderr, "ds4-kv: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
