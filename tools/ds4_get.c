/*
 * ds4_get.c -- `ds4-get`: downloads the published DeepSeek V4 GGUFs (the
 * catalogue of get_catalog.c) or any file by URL, resumably, checks them,
 * and points ./ds4flash.gguf at the main model, as the reference's
 * download_model.sh does.
 *
 * Owns: the command line, DIR/NAME (renamed into place from NAME.part
 * only when complete and checked), its DIR/NAME.sha256 record (sha256sum
 * format), the ./ds4flash.gguf symlink, and --list / --verify.  The
 * download itself is get_fetch.c; the facts about the files are
 * get_catalog.c.  Must not: touch the engine (this links the library for
 * args, version and SHA-256 only).
 *
 * On disk: DIR (default ./gguf, like the reference; DS4_GGUF_DIR or --dir)
 * holds NAME.part while downloading, then NAME and NAME.sha256.
 * ./ds4flash.gguf becomes a symlink to DIR/NAME (replaced atomically: a
 * temporary link renamed over it); a regular file of that name is the
 * user's own and is never replaced.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "ds4.h"
#include "base/afile.h"
#include "common/args.h"
#include "get_catalog.h"
#include "get_fetch.h"

#define PROG "ds4-get"
#define LINK_NAME "ds4flash.gguf"

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-get NAME [--dir DIR] [--no-link] [--token TOKEN]\n"
"               [--retries N] [--stall-timeout SECS]\n"
"       ds4-get NAME --url URL [--sha256 HEX] [--size BYTES] [options above]\n"
"       ds4-get --url URL ...          (NAME = the URL's last path segment)\n"
"       ds4-get --list [--dir DIR]\n"
"       ds4-get --verify NAME [--dir DIR] [--sha256 HEX]\n"
"       ds4-get -h | --help | --version\n"
"\n"
"Downloads a DeepSeek V4 GGUF of the catalogue (ds4-get --list names them:\n"
"q2-imatrix, q2-q4-imatrix, q4-imatrix, pro-q2-imatrix, mtp, ...) from\n"
"https://huggingface.co/antirez/deepseek-v4-gguf into DIR/FILE, then points\n"
"./ds4flash.gguf (the default model of ds4 and ds4-server) at it for main\n"
"models (not for mtp and the PRO Q4 halves).\n"
"\n"
"The file grows as DIR/FILE.part; an interrupted download (Ctrl+C, a dropped\n"
"connection, a reboot) resumes from there when the same command runs again,\n"
"with an HTTP range request.  Its SHA-256 is computed as it arrives and checked\n"
"against the catalogue's, --sha256, or the one the hub sends with the file\n"
"(X-Linked-Etag); a mismatch removes the .part and exits 1.  Only a complete,\n"
"checked file is renamed to DIR/FILE, with its SHA-256 in DIR/FILE.sha256\n"
"(sha256sum -c format).  With no published SHA-256 the one computed is\n"
"printed and recorded, and the output says it was not checked.\n"
"\n"
"  --dir DIR            where files go (default $DS4_GGUF_DIR, else ./gguf)\n"
"  --no-link            leave ./ds4flash.gguf as it is\n"
"  --url URL            download from URL: a mirror of a catalogue NAME, or any\n"
"                       file, saved as NAME (http and https only)\n"
"  --sha256 HEX         the expected SHA-256 (64 hex digits)\n"
"  --size BYTES         the expected size in bytes (checked before downloading)\n"
"  --token TOKEN        Hugging Face token for gated files; otherwise HF_TOKEN or\n"
"                       $HF_HOME/token (~/.cache/huggingface/token), which are\n"
"                       sent to https://huggingface.co only\n"
"  --retries N          attempts in a row that bring no byte before giving up\n"
"                       (default 8; pauses of 1, 2, 4 ... 30 s); a connection\n"
"                       that drops after bringing bytes is resumed at once\n"
"  --stall-timeout S    retry when nothing arrives for S seconds (default 60)\n"
"  --list               the catalogue and what is in DIR: complete (with or\n"
"                       without a SHA-256 record), partial (bytes so far) or\n"
"                       absent; * marks the file ./ds4flash.gguf points to;\n"
"                       then the other *.gguf files of DIR\n"
"  --verify NAME        hash DIR/FILE again and compare with the catalogue,\n"
"                       --sha256 and its record (writes the record if none)\n"
"\n"
"Environment: DS4_GGUF_DIR (default DIR), DS4_GET_BASE_URL (replaces\n"
"https://huggingface.co/antirez/deepseek-v4-gguf/resolve/main for the\n"
"catalogue: a mirror, or the tests' local server), HF_TOKEN, HF_HOME.\n"
"Before downloading, the free space of DIR must hold the rest of the file\n"
"plus 64 MiB.\n"
"Exit status: 0 done (or already there), 1 failed (the message says why; a\n"
"good partial download is kept), 2 bad usage, 130 interrupted (resumable).\n");
}

typedef struct {
    const char *dir;
    const char *url;
    const char *sha;
    uint64_t size;
    const char *token;
    int no_link;
    int retries;
    long stall;
} opts;

/* ------------------------------------------------------------ small helpers */

static char *path_join(const char *dir, const char *name, const char *suffix) {
    size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
    char *p = malloc(n);
    if (!p) { fprintf(stderr, "%s: out of memory\n", PROG); exit(1); }
    snprintf(p, n, "%s/%s%s", dir, name, suffix);
    return p;
}

/* A plain file name: what DIR/NAME may be called (no directories, no
 * hidden files, printable). */
static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 200 || s[0] == '.' || strchr(s, '/')) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
    return 1;
}

static int valid_sha(const char *s) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i])) return 0;
    return 1;
}

static void lower(char *s) {
    for (; *s; s++) if (*s >= 'A' && *s <= 'F') *s = (char)(*s - 'A' + 'a');
}

static int mkdir_p(const char *dir) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) { errno = ENAMETOOLONG; return -1; }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(buf, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { fsync(fd); close(fd); }
}

/* Writes `text` to path whole or not at all (base/afile.h). */
static int write_atomic(const char *path, const char *text) {
    if (ds4_write_file_atomic(path, text, strlen(text), 0644)) {
        fprintf(stderr, "%s: cannot write %s: %s\n", PROG, path, strerror(errno));
        return -1;
    }
    return 0;
}

/* The SHA-256 of a NAME.sha256 record ("<64 hex>  NAME"), or 0. */
static int read_record(const char *path, char out[65]) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok || strlen(line) < 66 || (line[64] != ' ' && line[64] != '\t')) return 0;
    line[64] = 0;
    if (!valid_sha(line)) return 0;
    lower(line);
    memcpy(out, line, 65);
    return 1;
}

static int write_record(const char *record, const char *file, const char *sha) {
    char text[512];
    snprintf(text, sizeof text, "%s  %s\n", sha, file);
    return write_atomic(record, text);
}

/* The token for `url`: --token; else, for huggingface.co only, HF_TOKEN or
 * the hub's token file (never sent to a mirror or another host). */
static char *pick_token(const char *given, const char *url) {
    if (given) return strdup(given);
    if (strncmp(url, "https://huggingface.co/", 23)) return NULL;
    const char *env = getenv("HF_TOKEN");
    if (env && *env) return strdup(env);
    char path[4096];
    const char *hf_home = getenv("HF_HOME"), *home = getenv("HOME");
    if (hf_home && *hf_home) snprintf(path, sizeof path, "%s/token", hf_home);
    else if (home && *home) snprintf(path, sizeof path, "%s/.cache/huggingface/token", home);
    else return NULL;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char buf[512];
    char *t = fgets(buf, sizeof buf, f) ? buf : NULL;
    fclose(f);
    if (!t) return NULL;
    t[strcspn(t, "\r\n")] = 0;
    return *t ? strdup(t) : NULL;
}

static const char *base_url(void) {
    static char buf[2048];
    const char *b = getenv("DS4_GET_BASE_URL");
    if (!b || !*b) return GET_HUB_BASE_URL;
    snprintf(buf, sizeof buf, "%s", b);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '/') buf[--n] = 0;
    return buf;
}

static int http_url(const char *u) {
    return !strncmp(u, "http://", 7) || !strncmp(u, "https://", 8);
}

/* --------------------------------------------------------------- the link */

/* Points ./ds4flash.gguf at `target` (a symlink made under a temporary
 * name, then renamed over the old one: never a moment without a link). */
static int update_link(const char *target) {
    struct stat st;
    if (lstat(LINK_NAME, &st) == 0 && !S_ISLNK(st.st_mode)) {
        fprintf(stderr, "%s: ./%s is a file of its own, not a link: left as it is (use "
                "-m %s, or move it away and run ds4-get again)\n", PROG, LINK_NAME, target);
        return -1;
    }
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".%s.tmp-%ld", LINK_NAME, (long)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, LINK_NAME) != 0) {
        fprintf(stderr, "%s: cannot point ./%s at %s: %s\n", PROG, LINK_NAME, target, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fsync_dir(".");
    printf("./%s -> %s\n", LINK_NAME, target);
    return 0;
}

/* Does ./ds4flash.gguf lead to `path`? */
static int link_points_to(const char *path) {
    struct stat a, b;
    return stat(LINK_NAME, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* ---------------------------------------------------------------- --list */

static int cmd_list(const opts *o) {
    printf("catalogue: %s (directory %s)\n", base_url(), o->dir);
    printf("  %-22s %-8s %-44s %s\n", "NAME", "SIZE", "STATE", "WHAT");
    int linked_shown = 0;
    for (int i = 0; i < get_catalog_n; i++) {
        const get_entry *e = &get_catalog[i];
        char *final = path_join(o->dir, e->file, ""), *part = path_join(o->dir, e->file, ".part"),
             *rec = path_join(o->dir, e->file, ".sha256");
        char state[160], size[32], n1[32], sha[65];
        struct stat st;
        if (e->size) ds4_format_size(e->size, size, sizeof size);
        else snprintf(size, sizeof size, "%s", e->about);
        int here = 0;
        if (stat(final, &st) == 0) {
            here = link_points_to(final);
            if (!read_record(rec, sha))
                snprintf(state, sizeof state, "complete, no SHA-256 record (--verify)");
            else if (e->sha256 && strcmp(e->sha256, sha))
                snprintf(state, sizeof state, "complete, SHA-256 record DIFFERS from the catalogue");
            else if (e->size && (uint64_t)st.st_size != e->size)
                snprintf(state, sizeof state, "complete, SIZE DIFFERS from the catalogue");
            else
                snprintf(state, sizeof state, "complete, SHA-256 %s", e->sha256 ? "checked" : "on record");
        } else if (stat(part, &st) == 0) {
            snprintf(state, sizeof state, "partial: %" PRIu64 " bytes (%s)", (uint64_t)st.st_size,
                     ds4_format_size((uint64_t)st.st_size, n1, sizeof n1));
        } else {
            snprintf(state, sizeof state, "absent");
        }
        linked_shown |= here;
        printf("%c %-22s %-8s %-44s %s%s\n", here ? '*' : ' ', e->name, size, state, e->what,
               e->legacy ? " (legacy)" : "");
        free(final); free(part); free(rec);
    }
    /* the other GGUFs of DIR (downloaded with --url, made by ds4-quantize) */
    DIR *d = opendir(o->dir);
    int others = 0;
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            const char *n = de->d_name;
            size_t len = strlen(n);
            int is_gguf = len > 5 && !strcmp(n + len - 5, ".gguf");
            int is_part = len > 10 && !strcmp(n + len - 10, ".gguf.part");
            if (!is_gguf && !is_part) continue;
            int known = 0;
            for (int i = 0; i < get_catalog_n && !known; i++) {
                size_t fl = strlen(get_catalog[i].file);
                known = !strncmp(n, get_catalog[i].file, fl) && (n[fl] == 0 || !strcmp(n + fl, ".part"));
            }
            if (known) continue;
            char *p = path_join(o->dir, n, "");
            struct stat st;
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                if (!others++) printf("other files in %s:\n", o->dir);
                char n1[32];
                int here = is_gguf && link_points_to(p);
                linked_shown |= here;
                printf("%c %s  %s%s\n", here ? '*' : ' ', n, ds4_format_size((uint64_t)st.st_size, n1, sizeof n1),
                       is_part ? "  (partial)" : "");
            }
            free(p);
        }
        closedir(d);
    }
    char target[4096];
    struct stat st;
    ssize_t tl = readlink(LINK_NAME, target, sizeof target - 1);
    if (tl >= 0) {
        target[tl] = 0;
        printf("./%s -> %s%s\n", LINK_NAME, target,
               stat(LINK_NAME, &st) != 0 ? " (broken link)" : linked_shown ? " (marked *)" : "");
    } else if (lstat(LINK_NAME, &st) == 0) {
        printf("./%s is a file of its own (not a link)\n", LINK_NAME);
    } else {
        printf("./%s: none\n", LINK_NAME);
    }
    return 0;
}

/* -------------------------------------------------------------- --verify */

static int cmd_verify(const opts *o, const char *name) {
    const get_entry *e = get_catalog_find(name);
    const char *file = e ? e->file : name;
    if (!e && !valid_name(name)) ds4_args_fail(PROG, "'%s' is not in the catalogue nor a file name", name);
    char *final = path_join(o->dir, file, ""), *rec = path_join(o->dir, file, ".sha256");
    int rc = 1;
    char sha[65], recorded[65];
    uint64_t size = 0;
    int have_rec = read_record(rec, recorded);
    int h = fetch_hash_file(final, file, sha, &size);
    if (h == 130) { rc = 130; goto out; }
    if (h) goto out;
    printf("%s: %" PRIu64 " bytes, SHA-256 %s\n", final, size, sha);
    int bad = 0, checked = 0;
    if (e && e->size) {
        checked = 1;
        if (size != e->size) { printf("  size DIFFERS from the catalogue's %" PRIu64 "\n", e->size); bad = 1; }
    }
    if (e && e->sha256) {
        checked = 1;
        if (strcmp(sha, e->sha256)) { printf("  DIFFERS from the catalogue's %s\n", e->sha256); bad = 1; }
        else printf("  matches the catalogue\n");
    }
    if (o->sha) {
        checked = 1;
        if (strcmp(sha, o->sha)) { printf("  DIFFERS from --sha256 %s\n", o->sha); bad = 1; }
        else printf("  matches --sha256\n");
    }
    if (have_rec) {
        checked = 1;
        if (strcmp(sha, recorded)) {
            printf("  DIFFERS from %s (%s): the file changed since it was recorded\n", rec, recorded);
            bad = 1;
        } else {
            printf("  matches %s\n", rec);
        }
    } else if (!bad) {
        if (write_record(rec, file, sha)) goto out;
        printf("  recorded in %s%s\n", rec, checked ? "" : " (nothing published to compare with)");
    }
    rc = bad;
out:
    free(final); free(rec);
    return rc;
}

/* ----------------------------------------------------------- the download */

static int cmd_get(const opts *o, const char *name) {
    const get_entry *e = get_catalog_find(name);
    if (!e && !o->url)
        ds4_args_fail(PROG, "unknown model '%s' (ds4-get --list shows the catalogue; --url URL "
                      "downloads another file)", name);
    if (!e && !valid_name(name))
        ds4_args_fail(PROG, "'%s' is not a plain file name to save as", name);
    const char *file = e ? e->file : name;
    char *url;
    if (o->url) url = strdup(o->url);
    else {
        const char *b = base_url();
        url = malloc(strlen(b) + strlen(file) + 2);
        if (url) sprintf(url, "%s/%s", b, file);
    }
    if (!url) { fprintf(stderr, "%s: out of memory\n", PROG); return 1; }
    if (!http_url(url)) ds4_args_fail(PROG, "the URL must start with http:// or https:// (DS4_GET_BASE_URL too): %s", url);

    uint64_t want_size = o->size ? o->size : e ? e->size : 0;
    const char *want_sha = o->sha ? o->sha : e ? e->sha256 : NULL;
    const char *sha_from = o->sha ? "--sha256" : "the catalogue";
    if (o->size && e && e->size && o->size != e->size)
        ds4_args_fail(PROG, "--size %" PRIu64 " differs from the catalogue's %" PRIu64 " for %s", o->size, e->size, name);
    if (o->sha && e && e->sha256 && strcmp(o->sha, e->sha256))
        ds4_args_fail(PROG, "--sha256 differs from the catalogue's for %s", name);

    if (mkdir_p(o->dir) != 0) {
        fprintf(stderr, "%s: cannot create %s: %s\n", PROG, o->dir, strerror(errno));
        free(url);
        return 1;
    }
    char *final = path_join(o->dir, file, ""), *part = path_join(o->dir, file, ".part"),
         *rec = path_join(o->dir, file, ".sha256");
    char *token = NULL;
    int rc = 1;
    struct stat st;
    if (stat(final, &st) == 0) {
        /* the reference's rule: a file under the final name is done (only
         * ds4-get's rename puts it there); its record is checked */
        char recorded[65];
        if (!S_ISREG(st.st_mode)) { fprintf(stderr, "%s: %s is not a regular file\n", PROG, final); goto out; }
        if (want_size && (uint64_t)st.st_size != want_size) {
            fprintf(stderr, "%s: %s is %" PRIu64 " bytes, expected %" PRIu64 ": move it away to download it again\n",
                    PROG, final, (uint64_t)st.st_size, want_size);
            goto out;
        }
        int have_rec = read_record(rec, recorded);
        if (have_rec && want_sha && strcmp(recorded, want_sha)) {
            fprintf(stderr, "%s: %s's recorded SHA-256 %s differs from %s (%s): move it away to download it again\n",
                    PROG, final, recorded, sha_from, want_sha);
            goto out;
        }
        printf("already downloaded: %s%s\n", final, have_rec ? "" : " (no SHA-256 record: ds4-get --verify checks it)");
    } else {
        token = pick_token(o->token, url);
        fprintf(stderr, "%s: %s -> %s\n", PROG, url, final);
        fetch_job j = {
            .url = url, .part = part, .dir = o->dir, .label = e ? e->name : file, .token = token,
            .want_size = want_size, .want_sha = want_sha, .sha_from = sha_from,
            .retries = o->retries, .stall_secs = o->stall,
        };
        fetch_result r;
        int f = fetch_run(&j, &r);
        if (f != FETCH_OK) { rc = f; goto out; }
        /* the record first: a crash before the rename leaves a .part and a
         * record, never a final file without its checksum */
        if (write_record(rec, file, r.sha)) goto out;
        if (rename(part, final) != 0) {
            fprintf(stderr, "%s: cannot rename %s to %s: %s\n", PROG, part, final, strerror(errno));
            goto out;
        }
        fsync_dir(o->dir);
        if (r.checked)
            printf("%s: %" PRIu64 " bytes, SHA-256 %s (checked against %s)\n", final, r.size, r.sha, r.sha_from);
        else
            printf("%s: %" PRIu64 " bytes, SHA-256 %s (NOT checked: no published SHA-256; recorded in %s)\n",
                   final, r.size, r.sha, rec);
    }
    rc = 0;
    if (e && e->main_model && !o->no_link) update_link(final);
    else if (e && !e->main_model && !strcmp(e->name, "mtp"))
        printf("use it with: ds4 --mtp %s\n", final);
out:
    free(url); free(final); free(part); free(rec); free(token);
    return rc;
}

int main(int argc, char **argv) {
    ds4_args a;
    ds4_args_init(&a, PROG, argc, argv, usage);
    opts o = { .retries = 8, .stall = 60 };
    const char *name = NULL;
    int list = 0, verify = 0;
    while (ds4_args_next(&a)) {
        if (ds4_args_is(&a, NULL, "--list")) list = 1;
        else if (ds4_args_is(&a, NULL, "--verify")) verify = 1;
        else if (ds4_args_is(&a, NULL, "--dir")) o.dir = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--no-link")) o.no_link = 1;
        else if (ds4_args_is(&a, NULL, "--url")) o.url = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--sha256")) o.sha = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--size")) o.size = (uint64_t)ds4_args_i64(&a, 1, INT64_MAX);
        else if (ds4_args_is(&a, NULL, "--token")) o.token = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--retries")) o.retries = ds4_args_int(&a, 0, 1000);
        else if (ds4_args_is(&a, NULL, "--stall-timeout")) o.stall = ds4_args_int(&a, 1, 86400);
        else if (ds4_args_positional(&a)) {
            if (name) ds4_args_fail(PROG, "one NAME at a time ('%s' and '%s')", name, a.cur);
            name = a.cur;
        } else ds4_args_unknown(&a);
    }
    if (!o.dir) {
        const char *env = getenv("DS4_GGUF_DIR");
        o.dir = env && *env ? env : "gguf";
    }
    char sha_buf[65];
    if (o.sha) {
        if (!valid_sha(o.sha)) ds4_args_fail(PROG, "--sha256: expected 64 hex digits, got '%s'", o.sha);
        snprintf(sha_buf, sizeof sha_buf, "%s", o.sha);
        lower(sha_buf);
        o.sha = sha_buf;
    }
    if (list + verify > 1) ds4_args_fail(PROG, "--list and --verify go alone");
    if (list) {
        if (name || o.url || o.sha || o.size) ds4_args_fail(PROG, "--list takes only --dir");
        return cmd_list(&o);
    }
    if (o.url && !http_url(o.url)) ds4_args_fail(PROG, "--url must start with http:// or https://");
    if (!name && o.url) {
        /* NAME from the URL: its last path segment, without the query */
        static char buf[256];
        const char *q = o.url + strcspn(o.url, "?#");
        const char *s = q;
        while (s > o.url && s[-1] != '/') s--;
        size_t n = (size_t)(q - s);
        if (n == 0 || n >= sizeof buf) ds4_args_fail(PROG, "cannot take a file name from %s: give NAME", o.url);
        memcpy(buf, s, n);
        buf[n] = 0;
        name = buf;
    }
    if (!name) { usage(stderr); return 2; }
    fetch_install_signals();
    if (verify) {
        if (o.url || o.size) ds4_args_fail(PROG, "--verify takes NAME, --dir and --sha256 only");
        return cmd_verify(&o, name);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) { fprintf(stderr, "%s: cannot initialise libcurl\n", PROG); return 1; }
    int rc = cmd_get(&o, name);
    curl_global_cleanup();
    return rc;
}
