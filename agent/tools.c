/*
 * tools.c -- the agent's tools: read, list, search, write, edit, bash.
 *
 * Owns: the tool schemas declared to the model (names and parameters are a
 * stable contract), argument checking, the file tools' confinement (every
 * path is opened beneath one fd of the working directory through
 * fsconf.c, and every later step uses the fds it gave, never the path
 * again), refusing what is not a regular file (a FIFO, socket or device
 * is opened non-blocking and never read), the confirmation gate of the
 * tools that change things (write and edit show the unified diff of the
 * change about to be made, diff.c), read tracking (an edit to a file that
 * changed on disk since the model last saw it is refused), and running
 * shell commands with a time limit, every process they start killed at
 * the end (contain.c).
 * Must not: touch the model, the session or the screen (confirmation goes
 * through a callback); a failure is a result text for the model, never an
 * exit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "contain.h"
#include "diff.h"
#include "fsconf.h"

#define READ_MAX_LINES 400
#define READ_MAX_BYTES (48 * 1024)
#define LINE_MAX_CHARS 2000
#define FILE_MAX_BYTES (16u << 20)
#define SEARCH_MAX 200
#define LIST_MAX 1000
#define BASH_HEAD (8 * 1024)
#define BASH_TAIL (8 * 1024)
#define BASH_MAX_TIMEOUT 3600
#define DIFF_SHOW_LINES 400     /* diff lines a confirmation shows */
#define IGNORE_MAX_BYTES (1u << 20)

static const char TOOLS_JSON[] =
"[{\"type\": \"function\", \"function\": {\"name\": \"read\", \"description\": "
"\"Read a text file of the working directory, with line numbers. Long files are shown in parts: "
"use start_line/end_line to read more.\", \"parameters\": {\"type\": \"object\", \"properties\": "
"{\"path\": {\"type\": \"string\", \"description\": \"file path, relative to the working directory\"}, "
"\"start_line\": {\"type\": \"integer\", \"description\": \"first line to show (1-based)\"}, "
"\"end_line\": {\"type\": \"integer\", \"description\": \"last line to show\"}}, \"required\": [\"path\"]}}},"
" {\"type\": \"function\", \"function\": {\"name\": \"list\", \"description\": "
"\"List one directory: entries with their type and size.\", \"parameters\": {\"type\": \"object\", "
"\"properties\": {\"path\": {\"type\": \"string\", \"description\": \"directory (default: the working directory)\"}}, "
"\"required\": []}}},"
" {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": "
"\"Search the files under a path for a POSIX extended regular expression; prints file:line:text. "
"Skips .git, ignored build outputs and binary files.\", \"parameters\": {\"type\": \"object\", "
"\"properties\": {\"pattern\": {\"type\": \"string\", \"description\": \"POSIX extended regular expression\"}, "
"\"path\": {\"type\": \"string\", \"description\": \"file or directory to search (default: the working directory)\"}}, "
"\"required\": [\"pattern\"]}}},"
" {\"type\": \"function\", \"function\": {\"name\": \"write\", \"description\": "
"\"Create or replace a file with the given content (missing parent directories are created).\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}, "
"\"content\": {\"type\": \"string\", \"description\": \"the whole new content\"}}, \"required\": [\"path\", \"content\"]}}},"
" {\"type\": \"function\", \"function\": {\"name\": \"edit\", \"description\": "
"\"Replace the one exact occurrence of old with new in a file. old must occur exactly once: "
"include enough surrounding lines to make it unique.\", \"parameters\": {\"type\": \"object\", "
"\"properties\": {\"path\": {\"type\": \"string\"}, \"old\": {\"type\": \"string\", \"description\": \"exact text to replace\"}, "
"\"new\": {\"type\": \"string\", \"description\": \"replacement text\"}}, \"required\": [\"path\", \"old\", \"new\"]}}},"
" {\"type\": \"function\", \"function\": {\"name\": \"bash\", \"description\": "
"\"Run a shell command (/bin/sh -c) in the working directory; returns its exit code and output "
"(stdout and stderr, long output keeps its head and tail).\", \"parameters\": {\"type\": \"object\", "
"\"properties\": {\"command\": {\"type\": \"string\"}, \"timeout\": {\"type\": \"integer\", "
"\"description\": \"time limit in seconds (default 120)\"}}, \"required\": [\"command\"]}}}]";

static const char *NAMES[AG_NTOOLS] = { "read", "list", "search", "write", "edit", "bash" };

const char *ag_tools_json(void) { return TOOLS_JSON; }

int ag_tool_index(const char *name) {
    for (int i = 0; i < AG_NTOOLS; i++)
        if (name && !strcmp(name, NAMES[i])) return i;
    return -1;
}

uint64_t ag_hash(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 0x100000001b3ull; }
    return h;
}

static int fail(ds4_buf *r, ds4_buf *sum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ds4_buf *r, ds4_buf *sum, const char *fmt, ...) {
    va_list ap;
    char msg[1400];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ds4_buf_printf(r, "error: %s", msg);
    ds4_buf_printf(sum, "error: %s", msg);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Arguments                                                           */
/* ------------------------------------------------------------------ */

static const char *arg_str(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Integers may come as JSON numbers or as numeric strings. */
static int arg_int(json_t *o, const char *k, long *out) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) { *out = (long)json_integer_value(v); return 1; }
    if (json_is_real(v)) { *out = (long)json_real_value(v); return 1; }
    if (json_is_string(v)) {
        char *end;
        const char *s = json_string_value(v);
        long x = strtol(s, &end, 10);
        if (end != s && *end == 0) { *out = x; return 1; }
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* Paths                                                               */
/* ------------------------------------------------------------------ */

/* The working directory's fd, opened at the first file tool call and kept
 * (reopened only when the agent is given another root). */
static fc_root g_fs = { -1, "" };

static int fs_ready(ag_tools *t, ds4_buf *r, ds4_buf *sum) {
    if (g_fs.fd >= 0 && !strcmp(g_fs.path, t->root)) return 0;
    fc_root_close(&g_fs);
    if (fc_root_open(&g_fs, t->root) != 0) {
        fail(r, sum, "cannot open the working directory %s: %s", t->root, strerror(errno));
        return -1;
    }
    return 0;
}

static int path_fail(ds4_buf *r, ds4_buf *sum, const char *path, int e) {
    switch (e) {
    case EXDEV:
        return fail(r, sum, "%s is outside the working directory %s (the path, or a symbolic link on the way, leads out of it); refused",
                    path, g_fs.path);
    case ELOOP: return fail(r, sum, "%s: too many levels of symbolic links", path);
    case EINVAL: return fail(r, sum, "%s: '..' after a missing directory; refused", path);
    case EISDIR: return fail(r, sum, "%s is a directory, not a file", path);
    case ENODEV:
    case ENXIO:   /* open(2) of a socket */
        return fail(r, sum, "%s is not a regular file (a FIFO, socket or device); refused", path);
    default: return fail(r, sum, "%s: %s", path, strerror(e));
    }
}

/* The model's path relative to the root, or a refusal (-1). */
static int rel_of(const char *path, char *rel, size_t cap, ds4_buf *r, ds4_buf *sum) {
    if (!*path) { fail(r, sum, "empty path"); return -1; }
    if (fc_relpath(&g_fs, path, rel, cap) != 0) { path_fail(r, sum, path, errno); return -1; }
    return 0;
}

/* Where a file is, for messages (relative) and read tracking (absolute,
 * as the session files keep them). */
static void where(int fd, const char *name, const char *fallback, char *rel, size_t relcap,
                  char *key, size_t keycap) {
    fc_fdpath(&g_fs, fd, name, fallback, rel, relcap);
    if (!strcmp(rel, ".")) snprintf(key, keycap, "%s", g_fs.path);
    else snprintf(key, keycap, "%s/%s", strcmp(g_fs.path, "/") ? g_fs.path : "", rel);
}

/* A regular file's content from `name` in directory dfd (not following a
 * link there, not blocking on a FIFO).  NULL with errno. */
static char *slurp_at(int dfd, const char *name, size_t *n, struct stat *sb) {
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return NULL;
    char *p = fc_slurp(fd, n, FILE_MAX_BYTES);
    int e = errno;
    if (p && sb && fstat(fd, sb) != 0) { e = errno; free(p); p = NULL; }
    close(fd);
    errno = e;
    return p;
}

static int is_binary(const char *p, size_t n) {
    size_t k = n < 8192 ? n : 8192;
    return memchr(p, 0, k) != NULL;
}

/* Read tracking: the content hash the model last saw of a file. */
static ag_seen *seen_find(ag_sess *s, const char *real) {
    for (int i = 0; s && i < s->n_seen; i++)
        if (!strcmp(s->seen[i].path, real)) return &s->seen[i];
    return NULL;
}

static void seen_set(ag_sess *s, const char *real, const char *p, size_t n) {
    if (!s) return;
    ag_seen *e = seen_find(s, real);
    if (!e) {
        ag_seen *v = realloc(s->seen, (size_t)(s->n_seen + 1) * sizeof *v);
        if (!v) return;
        s->seen = v;
        e = &s->seen[s->n_seen++];
        e->path = strdup(real);
    }
    e->hash = ag_hash(p, n, AG_HASH_SEED);
}

static int count_lines(const char *p, size_t n) {
    int l = 0;
    for (size_t i = 0; i < n; i++) l += p[i] == '\n';
    if (n && p[n - 1] != '\n') l++;
    return l;
}

/* ------------------------------------------------------------------ */
/* read                                                                */
/* ------------------------------------------------------------------ */

static int t_read(ag_tools *t, json_t *a, ds4_buf *r, ds4_buf *sum) {
    const char *path = arg_str(a, "path");
    long s0 = 1, e0 = 0;
    int hs = arg_int(a, "start_line", &s0), he = arg_int(a, "end_line", &e0);
    if (!path) return fail(r, sum, "read needs a string parameter \"path\"");
    if (hs < 0 || he < 0) return fail(r, sum, "start_line and end_line must be integers");
    char rel[PATH_MAX * 2], shown[PATH_MAX * 2], key[PATH_MAX * 3];
    if (fs_ready(t, r, sum) || rel_of(path, rel, sizeof rel, r, sum)) return 0;
    /* O_NONBLOCK: a FIFO opens at once (and is then refused, unread) */
    int fd = fc_open(&g_fs, rel, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return path_fail(r, sum, path, errno);
    size_t n;
    char *p = fc_slurp(fd, &n, FILE_MAX_BYTES);
    int e = errno;
    where(fd, NULL, rel, shown, sizeof shown, key, sizeof key);
    close(fd);
    if (!p) {
        if (e == EISDIR) return fail(r, sum, "%s is a directory (use list)", path);
        if (e == EFBIG) return fail(r, sum, "%s is larger than %u MiB; use bash (head, sed -n)", path, FILE_MAX_BYTES >> 20);
        if (e == ENODEV) return path_fail(r, sum, path, e);
        return fail(r, sum, "cannot read %s: %s", path, strerror(e));
    }
    if (is_binary(p, n)) { free(p); return fail(r, sum, "%s is a binary file; refused", path); }
    seen_set(t->sess, key, p, n);

    int total = count_lines(p, n);
    if (s0 < 1) s0 = 1;
    if (total == 0) {
        ds4_buf_printf(r, "(%s is empty)", path);
        ds4_buf_printf(sum, "empty file");
        free(p);
        return 1;
    }
    if (s0 > total) {
        free(p);
        return fail(r, sum, "start_line %ld is past the end of %s (%d lines)", s0, path, total);
    }
    long want_end = he ? e0 : total;
    if (want_end > total) want_end = total;
    if (want_end < s0) { free(p); return fail(r, sum, "end_line %ld is before start_line %ld", e0, s0); }
    long ln = 1, shown_end = s0 - 1;
    const char *q = p, *end = p + n;
    size_t out0 = r->n;
    while (q < end && ln <= want_end) {
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        size_t l = nl ? (size_t)(nl - q) : (size_t)(end - q);
        if (ln >= s0) {
            if (ln - s0 >= READ_MAX_LINES || r->n - out0 + l > READ_MAX_BYTES) break;
            ds4_buf_printf(r, "%6ld\t", ln);
            if (l > LINE_MAX_CHARS) {
                ds4_buf_append(r, q, LINE_MAX_CHARS);
                ds4_buf_printf(r, " [... %zu more characters]", l - LINE_MAX_CHARS);
            } else {
                ds4_buf_append(r, q, l);
            }
            ds4_buf_puts(r, "\n");
            shown_end = ln;
        }
        ln++;
        q = nl ? nl + 1 : end;
    }
    if (shown_end < want_end)
        ds4_buf_printf(r, "[lines %ld-%ld of %d shown; call read with start_line=%ld to read more]\n",
                       s0, shown_end, total, shown_end + 1);
    else if (s0 > 1 || shown_end < total)
        ds4_buf_printf(r, "[lines %ld-%ld of %d]\n", s0, shown_end, total);
    ds4_buf_printf(sum, "lines %ld-%ld of %d", s0, shown_end, total);
    free(p);
    return 1;
}

/* ------------------------------------------------------------------ */
/* list                                                                */
/* ------------------------------------------------------------------ */

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The names in directory fd (sorted, without . and ..); -1 on failure. */
static int dir_names(int fd, char ***out) {
    int dfd = dup(fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) { if (dfd >= 0) close(dfd); return -1; }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **v = realloc(names, (size_t)cap * sizeof *v);
            if (!v) break;
            names = v;
        }
        if (!(names[n] = strdup(de->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    return n;
}

static int t_list(ag_tools *t, json_t *a, ds4_buf *r, ds4_buf *sum) {
    const char *path = arg_str(a, "path");
    if (!path || !*path) path = ".";
    char rel[PATH_MAX * 2], shown[PATH_MAX * 2], key[PATH_MAX * 3];
    if (fs_ready(t, r, sum) || rel_of(path, rel, sizeof rel, r, sum)) return 0;
    int fd = fc_open(&g_fs, rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOTDIR) return fail(r, sum, "cannot list %s: not a directory", path);
        return path_fail(r, sum, path, errno);
    }
    char **names = NULL;
    int n = dir_names(fd, &names);
    if (n < 0) { int e = errno; close(fd); return fail(r, sum, "cannot list %s: %s", path, strerror(e)); }
    where(fd, NULL, rel, shown, sizeof shown, key, sizeof key);
    ds4_buf_printf(r, "%s/ (%d entries)\n", shown, n);
    for (int i = 0; i < n; i++) {
        if (i < LIST_MAX) {
            struct stat sb;
            if (fstatat(fd, names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) ds4_buf_printf(r, "?     %10s  %s\n", "-", names[i]);
            else if (S_ISDIR(sb.st_mode)) ds4_buf_printf(r, "dir   %10s  %s/\n", "-", names[i]);
            else if (S_ISREG(sb.st_mode)) ds4_buf_printf(r, "file  %10lld  %s\n", (long long)sb.st_size, names[i]);
            else if (S_ISLNK(sb.st_mode)) {
                char tg[PATH_MAX];
                ssize_t k = readlinkat(fd, names[i], tg, sizeof tg - 1);
                tg[k > 0 ? k : 0] = 0;
                ds4_buf_printf(r, "link  %10s  %s -> %s\n", "-", names[i], tg);
            } else ds4_buf_printf(r, "other %10s  %s\n", "-", names[i]);
        }
        free(names[i]);
    }
    close(fd);
    if (n > LIST_MAX) ds4_buf_printf(r, "[%d more entries not shown]\n", n - LIST_MAX);
    free(names);
    ds4_buf_printf(sum, "%d entries", n);
    return 1;
}

/* ------------------------------------------------------------------ */
/* search                                                              */
/* ------------------------------------------------------------------ */

typedef struct {
    char **pat;
    int n;
} ignore_set;

/* The top-level .gitignore's plain patterns (no negations): build outputs
 * and the like are skipped by search.  Read beneath the root as any file
 * (a FIFO or a link out of the tree there is no .gitignore). */
static void ignore_load(ignore_set *ig) {
    memset(ig, 0, sizeof *ig);
    int fd = fc_open(&g_fs, ".gitignore", O_RDONLY | O_NONBLOCK);
    if (fd < 0) return;
    size_t n;
    char *p = fc_slurp(fd, &n, IGNORE_MAX_BYTES);
    close(fd);
    if (!p) return;
    for (char *line = p, *next; line < p + n; line = next) {
        char *nl = memchr(line, '\n', (size_t)(p + n - line));
        next = nl ? nl + 1 : p + n;
        if (nl) *nl = 0;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\r' || line[l - 1] == ' ')) line[--l] = 0;
        if (!l || l >= 1024 || line[0] == '#' || line[0] == '!') continue;
        char **v = realloc(ig->pat, (size_t)(ig->n + 1) * sizeof *v);
        if (!v) break;
        ig->pat = v;
        ig->pat[ig->n++] = strdup(line);
    }
    free(p);
}

static void ignore_free(ignore_set *ig) {
    for (int i = 0; i < ig->n; i++) free(ig->pat[i]);
    free(ig->pat);
}

static int ignored(const ignore_set *ig, const char *relpath, const char *base, int is_dir) {
    if (!strcmp(base, ".git") || !strcmp(base, ".ds4")) return 1;
    for (int i = 0; i < ig->n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s", ig->pat[i]);
        size_t l = strlen(p);
        int dir_only = l > 1 && p[l - 1] == '/';
        if (dir_only) p[--l] = 0;
        if (dir_only && !is_dir) continue;
        const char *q = p;
        int anchored = 0;
        if (q[0] == '/') { q++; anchored = 1; }
        if (strchr(q, '/')) anchored = 1;
        if (anchored ? !fnmatch(q, relpath, FNM_PATHNAME) : !fnmatch(q, base, 0)) return 1;
    }
    return 0;
}

typedef struct {
    regex_t re;
    ignore_set ig;
    ds4_buf *r;
    int matches, files, capped, special;
} search_ctx;

/* One file, from an fd opened O_NONBLOCK (fc_slurp refuses what is not
 * regular: counted, never read). */
static void search_file(search_ctx *c, int fd, const char *relpath) {
    size_t n;
    char *p = fc_slurp(fd, &n, FILE_MAX_BYTES);
    if (!p) { if (errno == ENODEV) c->special++; return; }
    if (is_binary(p, n)) { free(p); return; }
    int ln = 1, hit = 0;
    char *q = p, *end = p + n;
    while (q < end) {
        char *nl = memchr(q, '\n', (size_t)(end - q));
        if (nl) *nl = 0;
        if (regexec(&c->re, q, 0, NULL, 0) == 0) {
            if (c->matches >= SEARCH_MAX) { c->capped = 1; break; }
            size_t l = strlen(q);
            ds4_buf_printf(c->r, "%s:%d:%.*s%s\n", relpath, ln,
                           (int)(l > 300 ? 300 : l), q, l > 300 ? " [...]" : "");
            c->matches++;
            hit = 1;
        }
        ln++;
        q = nl ? nl + 1 : end;
    }
    c->files += hit;
    free(p);
}

/* A directory by its fd: every entry is looked at and opened relative to
 * it with O_NOFOLLOW (symbolic links are not followed: they may lead
 * outside), so the walk cannot be diverted by a rename under it. */
static void search_dir(search_ctx *c, int dfd, const char *relpath, int depth) {
    if (depth > 64 || c->capped) return;
    char **names = NULL;
    int n = dir_names(dfd, &names);
    for (int i = 0; i < n; i++) {
        char fp[PATH_MAX * 2];
        if (!strcmp(relpath, ".")) snprintf(fp, sizeof fp, "%s", names[i]);
        else snprintf(fp, sizeof fp, "%s/%s", relpath, names[i]);
        struct stat sb;
        if (!c->capped && fstatat(dfd, names[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
            !ignored(&c->ig, fp, names[i], S_ISDIR(sb.st_mode))) {
            if (S_ISDIR(sb.st_mode)) {
                int fd = openat(dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                if (fd >= 0) { search_dir(c, fd, fp, depth + 1); close(fd); }
            } else if (S_ISREG(sb.st_mode)) {
                int fd = openat(dfd, names[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
                if (fd >= 0) { search_file(c, fd, fp); close(fd); }
            } else if (!S_ISLNK(sb.st_mode)) c->special++;
        }
        free(names[i]);
    }
    free(names);
}

static int t_search(ag_tools *t, json_t *a, ds4_buf *r, ds4_buf *sum) {
    const char *pat = arg_str(a, "pattern"), *path = arg_str(a, "path");
    if (!pat || !*pat) return fail(r, sum, "search needs a non-empty string parameter \"pattern\"");
    if (!path || !*path) path = ".";
    char rel[PATH_MAX * 2], shown[PATH_MAX * 2], key[PATH_MAX * 3];
    if (fs_ready(t, r, sum) || rel_of(path, rel, sizeof rel, r, sum)) return 0;
    int fd = fc_open(&g_fs, rel, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return path_fail(r, sum, path, errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) { int e = errno; close(fd); return path_fail(r, sum, path, e); }
    if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode)) { close(fd); return path_fail(r, sum, path, ENODEV); }
    search_ctx c;
    memset(&c, 0, sizeof c);
    int e = regcomp(&c.re, pat, REG_EXTENDED | REG_NOSUB);
    if (e) {
        char m[256];
        regerror(e, &c.re, m, sizeof m);
        close(fd);
        return fail(r, sum, "bad regular expression: %s", m);
    }
    c.r = r;
    ignore_load(&c.ig);
    where(fd, NULL, rel, shown, sizeof shown, key, sizeof key);
    if (S_ISDIR(sb.st_mode)) search_dir(&c, fd, shown, 0);
    else search_file(&c, fd, shown);
    close(fd);
    regfree(&c.re);
    ignore_free(&c.ig);
    if (c.capped) ds4_buf_printf(r, "[stopped at %d matches; narrow the pattern or the path]\n", SEARCH_MAX);
    if (!c.matches) ds4_buf_printf(r, "no matches\n");
    if (c.special)
        ds4_buf_printf(r, "[%d special file%s skipped (FIFO, socket or device)]\n", c.special, c.special == 1 ? "" : "s");
    ds4_buf_printf(sum, "%d match%s in %d file%s%s", c.matches, c.matches == 1 ? "" : "es",
                   c.files, c.files == 1 ? "" : "s", c.capped ? " (capped)" : "");
    return 1;
}

/* ------------------------------------------------------------------ */
/* Confirmation                                                        */
/* ------------------------------------------------------------------ */

static void describe_json(int ti, json_t *a, ds4_buf *out);

/* Ask before a change (unless --yes or "always"); `detail` (the diff) is
 * shown with the question.  1 = go ahead; 0 = declined, the result says so. */
static int gate(ag_tools *t, int ti, json_t *a, const char *detail, ds4_buf *r, ds4_buf *sum) {
    if (t->yes || t->always[ti]) return 1;
    ds4_buf d = { 0 };
    describe_json(ti, a, &d);
    int ans = t->confirm ? t->confirm(t->ud, NAMES[ti], d.p ? d.p : NAMES[ti], detail) : 0;
    ds4_buf_free(&d);
    if (ans == 0) {
        ds4_buf_printf(r, "The user declined this %s call; nothing was done. Ask the user or try something else.", NAMES[ti]);
        ds4_buf_printf(sum, "declined by the user");
        return 0;
    }
    if (ans == 2) t->always[ti] = 1;
    return 1;
}

/* ------------------------------------------------------------------ */
/* write / edit                                                        */
/* ------------------------------------------------------------------ */

/* What the file holds now, compared with what the diff was made from:
 * the user may take a while to answer. */
static int unchanged_since(int dfd, const char *name, int existed, uint64_t h) {
    size_t n;
    char *p = slurp_at(dfd, name, &n, NULL);
    if (!p) return !existed && errno == ENOENT;
    int same = existed && ag_hash(p, n, AG_HASH_SEED) == h;
    free(p);
    return same;
}

static int t_write(ag_tools *t, json_t *a, ds4_buf *r, ds4_buf *sum) {
    const char *path = arg_str(a, "path");
    json_t *cv = json_object_get(a, "content");
    if (!path) return fail(r, sum, "write needs a string parameter \"path\"");
    if (!json_is_string(cv)) return fail(r, sum, "write needs a string parameter \"content\"");
    const char *content = json_string_value(cv);
    size_t n = json_string_length(cv);
    char rel[PATH_MAX * 2], shown[PATH_MAX * 2], key[PATH_MAX * 3], name[NAME_MAX + 1], err[PATH_MAX * 3];
    if (fs_ready(t, r, sum) || rel_of(path, rel, sizeof rel, r, sum)) return 0;
    int followed = 0, existed = 0;
    /* missing directories are made only once the user said yes */
    int dfd = fc_parent(&g_fs, rel, 0, name, sizeof name, &followed);
    if (dfd < 0 && (errno != ENOENT || followed)) {
        if (errno == ENOENT) return fail(r, sum, "%s is a symbolic link whose target's directory does not exist; refused", path);
        return path_fail(r, sum, path, errno);
    }
    char *old = NULL;
    size_t on = 0;
    uint64_t oh = 0;
    mode_t mode = 0644;
    struct stat sb;
    if (dfd >= 0) {
        if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
            existed = 1;
            if (!S_ISREG(sb.st_mode)) { close(dfd); return fail(r, sum, "%s exists and is not a regular file", path); }
            mode = sb.st_mode & 07777;
            if (!(old = slurp_at(dfd, name, &on, NULL))) {
                int e = errno;
                close(dfd);
                if (e == EFBIG) return fail(r, sum, "%s is larger than %u MiB; refused", path, FILE_MAX_BYTES >> 20);
                return fail(r, sum, "cannot read %s: %s", path, strerror(e));
            }
            oh = ag_hash(old, on, AG_HASH_SEED);
        } else if (errno != ENOENT) {
            int e = errno;
            close(dfd);
            return path_fail(r, sum, path, e);
        } else if (followed) {
            close(dfd);
            return fail(r, sum, "%s is a symbolic link whose target does not exist; refused", path);
        }
        where(dfd, name, rel, shown, sizeof shown, key, sizeof key);
    } else {
        snprintf(shown, sizeof shown, "%s", rel);
    }
    ds4_buf df = { 0 };
    ag_diffstat ds;
    if (old && is_binary(old, on)) {
        ds4_buf_printf(&df, "--- a/%s\n+++ b/%s\n[a binary file of %zu bytes replaced by %zu bytes of text]\n", shown, shown, on, n);
        memset(&ds, 0, sizeof ds);
        ds.added = count_lines(content, n);
    } else {
        ag_diff(old ? old : "", on, content, n, shown, !existed, DIFF_SHOW_LINES, &df, &ds);
    }
    free(old);
    int go = gate(t, AG_T_WRITE, a, df.p, r, sum);
    ds4_buf_free(&df);
    if (!go) { if (dfd >= 0) close(dfd); return 0; }
    if (dfd < 0) {
        dfd = fc_parent(&g_fs, rel, 1, name, sizeof name, &followed);
        if (dfd < 0) return path_fail(r, sum, path, errno);
        where(dfd, name, rel, shown, sizeof shown, key, sizeof key);
    }
    if (!unchanged_since(dfd, name, existed, oh)) {
        close(dfd);
        return fail(r, sum, "%s changed on disk while the confirmation was pending (no change made); read it again", path);
    }
    int rc = fc_replace(dfd, name, content, n, mode, err, sizeof err);
    close(dfd);
    if (rc) return fail(r, sum, "%s", err);
    seen_set(t->sess, key, content, n);
    int lines = count_lines(content, n);
    ds4_buf_printf(r, "%s %s: %d lines, %zu bytes", existed ? "replaced" : "created", shown, lines, n);
    ds4_buf_printf(sum, "%s, %d lines, %zu bytes", existed ? "replaced" : "created", lines, n);
    if (existed) ds4_buf_printf(sum, " (-%d +%d lines)", ds.removed, ds.added);
    return 1;
}

static int t_edit(ag_tools *t, json_t *a, ds4_buf *r, ds4_buf *sum) {
    const char *path = arg_str(a, "path");
    json_t *ov = json_object_get(a, "old"), *nv = json_object_get(a, "new");
    if (!path) return fail(r, sum, "edit needs a string parameter \"path\"");
    if (!json_is_string(ov) || !json_is_string(nv))
        return fail(r, sum, "edit needs string parameters \"old\" and \"new\"");
    const char *old = json_string_value(ov), *nw = json_string_value(nv);
    size_t ol = json_string_length(ov), nl = json_string_length(nv);
    if (ol == 0) return fail(r, sum, "\"old\" is empty; give the exact text to replace");
    char rel[PATH_MAX * 2], shown[PATH_MAX * 2], key[PATH_MAX * 3], name[NAME_MAX + 1], err[PATH_MAX * 3];
    if (fs_ready(t, r, sum) || rel_of(path, rel, sizeof rel, r, sum)) return 0;
    int followed = 0;
    int dfd = fc_parent(&g_fs, rel, 0, name, sizeof name, &followed);
    if (dfd < 0) return path_fail(r, sum, path, errno);
    size_t n;
    struct stat sb;
    char *p = slurp_at(dfd, name, &n, &sb);
    if (!p) {
        int e = errno;
        close(dfd);
        if (e == EFBIG) return fail(r, sum, "%s is larger than %u MiB; refused", path, FILE_MAX_BYTES >> 20);
        if (e == ENODEV || e == EISDIR || e == ELOOP) return path_fail(r, sum, path, e == ELOOP ? ENODEV : e);
        return fail(r, sum, "cannot read %s: %s", path, strerror(e));
    }
    where(dfd, name, rel, shown, sizeof shown, key, sizeof key);
    if (is_binary(p, n)) { free(p); close(dfd); return fail(r, sum, "%s is a binary file; refused", path); }
    uint64_t ph = ag_hash(p, n, AG_HASH_SEED);
    ag_seen *s = seen_find(t->sess, key);
    if (s && s->hash != ph) {
        free(p);
        close(dfd);
        return fail(r, sum, "%s changed on disk since you last read it; read it again before editing (no change made)", path);
    }
    int count = 0;
    const char *first = NULL;
    for (const char *q = p; (q = memmem(q, (size_t)(p + n - q), old, ol)); q += ol) {
        if (!count) first = q;
        count++;
    }
    if (count != 1) {
        free(p);
        close(dfd);
        if (count == 0)
            return fail(r, sum, "the old text was not found in %s (no change made); read the file and copy the text exactly", path);
        return fail(r, sum, "the old text occurs %d times in %s (no change made); include more surrounding lines to make it unique", count, path);
    }
    size_t off = (size_t)(first - p), outn = n - ol + nl;
    char *o = malloc(outn + 1);
    if (!o) { free(p); close(dfd); return fail(r, sum, "out of memory"); }
    memcpy(o, p, off);
    memcpy(o + off, nw, nl);
    memcpy(o + off + nl, p + off + ol, n - off - ol);
    o[outn] = 0;
    int line = count_lines(p, off) + (off && p[off - 1] == '\n' ? 1 : 0);
    if (line < 1) line = 1;
    /* the counts are the diff's: an edit inside one line is -1 +1 */
    ds4_buf df = { 0 };
    ag_diffstat ds;
    ag_diff(p, n, o, outn, shown, 0, DIFF_SHOW_LINES, &df, &ds);
    free(p);
    int go = gate(t, AG_T_EDIT, a, df.p, r, sum);
    ds4_buf_free(&df);
    if (go && !unchanged_since(dfd, name, 1, ph)) {
        go = 0;
        fail(r, sum, "%s changed on disk while the confirmation was pending (no change made); read it again", path);
    }
    int rc = go ? fc_replace(dfd, name, o, outn, sb.st_mode & 07777, err, sizeof err) : -1;
    close(dfd);
    if (!go) { free(o); return 0; }
    if (rc) { free(o); return fail(r, sum, "%s", err); }
    seen_set(t->sess, key, o, outn);
    free(o);
    ds4_buf_printf(r, "edited %s at line %d: %d line%s removed, %d added", shown, line, ds.removed,
                   ds.removed == 1 ? "" : "s", ds.added);
    ds4_buf_printf(sum, "line %d: -%d +%d lines", line, ds.removed, ds.added);
    return 1;
}

/* ------------------------------------------------------------------ */
/* bash                                                                */
/* ------------------------------------------------------------------ */

static int t_bash(ag_tools *t, json_t *a, ds4_buf *r, ds4_buf *sum) {
    const char *cmd = arg_str(a, "command");
    long to = t->bash_timeout > 0 ? t->bash_timeout : 120;
    if (!cmd || !*cmd) return fail(r, sum, "bash needs a non-empty string parameter \"command\"");
    int ht = arg_int(a, "timeout", &to);
    if (ht < 0) return fail(r, sum, "timeout must be a number of seconds");
    if (to < 1) to = 1;
    if (to > BASH_MAX_TIMEOUT) to = BASH_MAX_TIMEOUT;
    int pfd[2];
    if (pipe(pfd)) return fail(r, sum, "pipe: %s", strerror(errno));
    /* its own cgroup where the machine allows, its own session always */
    ag_contain ct;
    ag_contain_prepare(&ct);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pfd[0]); close(pfd[1]);
        ag_contain_release(&ct);
        return fail(r, sum, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        ag_contain_child(&ct);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) { dup2(nul, 0); close(nul); }
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        if (chdir(t->root) != 0) _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    ct.pid = pid;
    close(pfd[1]);
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    char *head = malloc(BASH_HEAD), *tail = malloc(BASH_TAIL);
    size_t hn = 0, tn = 0, total = 0;   /* tail is a ring: tn bytes written in all */
    int lines = 0, status = 0, exited = 0, timed_out = 0, interrupted = 0, eof = 0;
    double t0 = ds4_now(), deadline = t0 + (double)to, exit_at = 0;
    char buf[65536], last = '\n';
    while (!eof) {
        if (ag_interrupt) { interrupted = 1; break; }
        double now = ds4_now();
        if (!exited && now >= deadline) { timed_out = 1; break; }
        /* after the shell is gone, leftovers holding the pipe get 200 ms */
        if (exited && now - exit_at > 0.2) break;
        struct pollfd pf = { pfd[0], POLLIN, 0 };
        int pr = poll(&pf, 1, 100);
        if (pr > 0) {
            ssize_t k = read(pfd[0], buf, sizeof buf);
            if (k == 0) eof = 1;
            else if (k > 0) {
                for (ssize_t i = 0; i < k; i++) lines += buf[i] == '\n';
                last = buf[k - 1];
                total += (size_t)k;
                size_t i = 0;
                while (hn < BASH_HEAD && i < (size_t)k) head[hn++] = buf[i++];
                for (; i < (size_t)k; i++) tail[tn++ % BASH_TAIL] = buf[i];
            }
        }
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) { exited = 1; exit_at = ds4_now(); }
    }
    close(pfd[0]);
    /* everything the command started goes: on a time limit or Ctrl+C, and
     * any background leftovers of a finished command (a daemon that left
     * the session included) */
    int leftovers = ag_contain_kill(&ct);
    if (!exited) { waitpid(pid, &status, 0); }
    ag_contain_release(&ct);
    double el = ds4_now() - t0;
    /* the output: head, a marker for what was cut, the tail */
    if (hn) ds4_buf_append(r, head, hn);
    if (tn) {
        size_t keep = tn < BASH_TAIL ? tn : BASH_TAIL;
        if (tn > BASH_TAIL)
            ds4_buf_printf(r, "\n[... %zu bytes omitted ...]\n", tn - BASH_TAIL);
        size_t start = tn > BASH_TAIL ? tn % BASH_TAIL : 0;
        for (size_t i = 0; i < keep; i++) ds4_buf_append(r, &tail[(start + i) % BASH_TAIL], 1);
    }
    free(head);
    free(tail);
    if (total && r->p[r->n - 1] != '\n') ds4_buf_puts(r, "\n");
    if (total && last != '\n') lines++;
    int ok = 0;
    if (interrupted) {
        ds4_buf_printf(r, "[interrupted by the user after %.1f s; the command and every process it started were killed]", el);
        ds4_buf_printf(sum, "interrupted after %.1f s, %d lines, %zu bytes", el, lines, total);
    } else if (timed_out) {
        ds4_buf_printf(r, "[killed: time limit of %ld s reached]", to);
        ds4_buf_printf(sum, "timed out after %ld s, %d lines, %zu bytes", to, lines, total);
    } else if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (leftovers)
            ds4_buf_printf(r, "[%d background process%s still running at the end %s killed]\n", leftovers,
                           leftovers == 1 ? "" : "es", leftovers == 1 ? "was" : "were");
        ds4_buf_printf(r, "[exit code %d]", code);
        ds4_buf_printf(sum, "exit %d, %d lines, %zu bytes", code, lines, total);
        ok = code == 0;
    } else if (WIFSIGNALED(status)) {
        ds4_buf_printf(r, "[killed by signal %d]", WTERMSIG(status));
        ds4_buf_printf(sum, "signal %d, %d lines, %zu bytes", WTERMSIG(status), lines, total);
    }
    if (total > BASH_HEAD + BASH_TAIL && !interrupted && !timed_out)
        ds4_buf_printf(sum, " (truncated)");
    return ok;
}

/* ------------------------------------------------------------------ */

static void describe_json(int ti, json_t *a, ds4_buf *out) {
    const char *p = arg_str(a, "path");
    long s0 = 0, e0 = 0;
    switch (ti) {
    case AG_T_READ:
        ds4_buf_printf(out, "read %s", p ? p : "?");
        if (arg_int(a, "start_line", &s0) > 0 || arg_int(a, "end_line", &e0) > 0) {
            if (s0 <= 0) s0 = 1;
            if (e0 > 0) ds4_buf_printf(out, ":%ld-%ld", s0, e0);
            else ds4_buf_printf(out, ":%ld-", s0);
        }
        break;
    case AG_T_LIST: ds4_buf_printf(out, "list %s", p && *p ? p : "."); break;
    case AG_T_SEARCH: {
        const char *pat = arg_str(a, "pattern");
        ds4_buf_printf(out, "search \"%s\"", pat ? pat : "");
        if (p && *p) ds4_buf_printf(out, " in %s", p);
        break;
    }
    case AG_T_WRITE: ds4_buf_printf(out, "write %s", p ? p : "?"); break;
    case AG_T_EDIT: ds4_buf_printf(out, "edit %s", p ? p : "?"); break;
    case AG_T_BASH: {
        const char *c = arg_str(a, "command");
        ds4_buf_printf(out, "$ %s", c ? c : "");
        break;
    }
    }
}

void ag_tool_describe(const char *name, const char *args, ds4_buf *out) {
    int ti = ag_tool_index(name);
    json_t *a = args ? json_loads(args, 0, NULL) : NULL;
    if (ti < 0 || !json_is_object(a)) ds4_buf_printf(out, "%s %s", name ? name : "?", args ? args : "");
    else describe_json(ti, a, out);
    json_decref(a);
    /* one line on screen: multi-line commands show their first line */
    char *nl = out->p ? strchr(out->p, '\n') : NULL;
    if (nl) { out->n = (size_t)(nl - out->p); out->p[out->n] = 0; ds4_buf_puts(out, " ..."); }
}

int ag_tool_run(ag_tools *t, const char *name, const char *args, ds4_buf *r, ds4_buf *sum) {
    int ti = ag_tool_index(name);
    if (ti < 0)
        return fail(r, sum, "unknown tool \"%s\"; the tools are read, list, search, write, edit, bash",
                    name ? name : "");
    json_error_t je;
    json_t *a = json_loads(args && *args ? args : "{}", 0, &je);
    if (!json_is_object(a)) {
        json_decref(a);
        return fail(r, sum, "the arguments of %s are not a JSON object", name);
    }
    int ok;
    /* write and edit ask themselves, once their diff is known */
    if (ti == AG_T_BASH && !gate(t, ti, a, NULL, r, sum)) {
        json_decref(a);
        return 0;
    }
    switch (ti) {
    case AG_T_READ: ok = t_read(t, a, r, sum); break;
    case AG_T_LIST: ok = t_list(t, a, r, sum); break;
    case AG_T_SEARCH: ok = t_search(t, a, r, sum); break;
    case AG_T_WRITE: ok = t_write(t, a, r, sum); break;
    case AG_T_EDIT: ok = t_edit(t, a, r, sum); break;
    default: ok = t_bash(t, a, r, sum); break;
    }
    json_decref(a);
    if (!r->p) ds4_buf_puts(r, "");
    if (!sum->p) ds4_buf_puts(sum, "");
    return ok;
}
