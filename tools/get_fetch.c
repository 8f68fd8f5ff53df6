/*
 * get_fetch.c -- the resumable download of get_fetch.h.
 *
 * Owns: NAME.part while a download runs, the HTTP exchange (libcurl), the
 * running SHA-256, the progress display and the stop signals.  Must not:
 * create the final file, its .sha256 record or the ./ds4flash.gguf link.
 *
 * One attempt = one GET with "Range: bytes=HAVE-" (HAVE = bytes already in
 * the .part), redirects followed with the same Range (the hub answers 302
 * to a CDN).  The answer is judged when its headers end, before any byte is
 * written:
 *   206  Content-Range must start at HAVE, and its total must be the
 *        expected size: the bytes are appended.
 *   200  the server ignored the range: the .part is emptied and the whole
 *        file is taken again (appending would corrupt it).
 *   416  nothing past HAVE: complete if HAVE is the file's size.
 *   4xx  a clear error, no retry (408 and 429 are retried);
 *   5xx  retried.
 * Dropped connections, stalls (--stall-timeout) and retryable answers are
 * retried after 1, 2, 4 ... 30 s; an attempt that brought bytes resets the
 * count, so only `retries` failures in a row give up.  The SHA-256 is
 * computed as the bytes arrive (the bytes of a resumed .part are hashed
 * first), so the check at the end costs nothing more.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "common/signals.h"
#include "ds4.h"
#include "base/hash.h"
#include "get_fetch.h"

#define PROG "ds4-get"
/* Free space kept beyond the file: the .sha256 record, the link and the
 * file system's own metadata for a file of tens of GB. */
#define SPACE_MARGIN (64ull << 20)
#define READ_CHUNK (4u << 20)
#define BACKOFF_MAX_S 30
#define LINE_EVERY_S 10.0       /* progress lines when stderr is not a terminal */
#define BAR_EVERY_S 0.25        /* redraws of the bar on a terminal */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) { g_stop = sig; }

void fetch_install_signals(void) {
    ds4_catch_signals(on_signal, NULL, 1);   /* a sleep between attempts ends at once */
    signal(SIGPIPE, SIG_IGN);
}

int fetch_stopped(void) { return (int)g_stop; }

/* "1.23 GiB": sizes in messages (binary units, two decimals). */
static const char *human(uint64_t b, char *buf, size_t n) {
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double d = (double)b;
    int u = 0;
    while (d >= 1024 && u < 4) { d /= 1024; u++; }
    if (u == 0) snprintf(buf, n, "%" PRIu64 " B", b);
    else snprintf(buf, n, "%.2f %s", d, unit[u]);
    return buf;
}

static const char *duration(double s, char *buf, size_t n) {
    if (s < 0 || s > 99 * 3600.0) { snprintf(buf, n, "--:--"); return buf; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    return buf;
}

/* ---------------------------------------------------------------- progress */

#define RATE_SAMPLES 16

typedef struct {
    int tty;
    const char *label;
    double t_start, t_last_draw, t_last_sample;
    uint64_t bytes_start;           /* already there when this run began */
    double st[RATE_SAMPLES];        /* (time, bytes) of the last few seconds */
    uint64_t sb[RATE_SAMPLES];
    int ns, head;
    int drawn;                      /* a bar is on the terminal's line */
} progress;

static void progress_init(progress *p, const char *label, uint64_t have) {
    memset(p, 0, sizeof *p);
    p->tty = isatty(STDERR_FILENO);
    p->label = label;
    p->t_start = p->t_last_draw = ds4_now();
    p->bytes_start = have;
}

/* Bytes per second over the last ~8 s (a moving window: the rate of now,
 * not the average since the start, which a stall or resume would skew). */
static double progress_rate(progress *p, double t, uint64_t have) {
    if (t - p->t_last_sample >= 0.5 || p->ns == 0) {
        p->st[p->head] = t; p->sb[p->head] = have;
        p->head = (p->head + 1) % RATE_SAMPLES;
        if (p->ns < RATE_SAMPLES) p->ns++;
        p->t_last_sample = t;
    }
    int oldest = (p->head - p->ns + RATE_SAMPLES) % RATE_SAMPLES;
    double dt = t - p->st[oldest];
    if (dt < 0.2 || have < p->sb[oldest]) return 0;
    return (double)(have - p->sb[oldest]) / dt;
}

static void progress_show(progress *p, uint64_t have, uint64_t total, int force) {
    double t = ds4_now();
    double rate = progress_rate(p, t, have);
    if (!force && t - p->t_last_draw < (p->tty ? BAR_EVERY_S : LINE_EVERY_S)) return;
    p->t_last_draw = t;
    char a[32], b[32], r[32], e[32];
    human(have, a, sizeof a);
    human((uint64_t)rate, r, sizeof r);
    double eta = (total && rate > 0 && have <= total) ? (double)(total - have) / rate : -1;
    if (p->tty) {
        char bar[33];
        int w = 30, fill = total ? (int)((double)have / (double)total * w) : 0;
        if (fill > w) fill = w;
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        if (total)
            fprintf(stderr, "\r%5.1f%% [%s] %s / %s  %s/s  ETA %s\033[K",
                    100.0 * (double)have / (double)total, bar, a, human(total, b, sizeof b), r,
                    duration(eta, e, sizeof e));
        else
            fprintf(stderr, "\r%s  %s/s\033[K", a, r);
        p->drawn = 1;
    } else if (total) {
        fprintf(stderr, "%s: %s: %.1f%%, %s of %s, %s/s, ETA %s\n", PROG, p->label,
                100.0 * (double)have / (double)total, a, human(total, b, sizeof b), r,
                duration(eta, e, sizeof e));
    } else {
        fprintf(stderr, "%s: %s: %s, %s/s\n", PROG, p->label, a, r);
    }
    fflush(stderr);
}

/* Ends the bar's line before a message is printed under it. */
static void progress_break(progress *p) {
    if (p && p->drawn) { fputc('\n', stderr); p->drawn = 0; }
}

/* ------------------------------------------------------------- one attempt */

typedef struct {
    const fetch_job *job;
    int fd;
    uint64_t have;              /* bytes in the .part (all hashed) */
    uint64_t total;             /* the file's size; 0 = not known yet */
    ds4_sha256_ctx sha;
    char hub_sha[65];           /* from X-Linked-Etag, "" if none */
    const char *want_sha;       /* the expected SHA-256 (job's or the hub's) */
    char sha_from[96];
    int space_checked;
    progress prog;

    /* the response being received (reset at each status line) */
    long status;
    int64_t clen;               /* Content-Length, -1 if none */
    int cr_ok;                  /* Content-Range parsed */
    uint64_t cr_start, cr_end, cr_total;   /* cr_total 0 = "*" */
    int has_location;
    uint64_t hub_size;          /* X-Linked-Size, 0 if none */

    /* the verdict on the final response */
    int decided;
    int complete;               /* 416 with the whole file already here */
    int hard;                   /* stop: error[] says why, no retry */
    int soft;                   /* retry: error[] says why */
    double t_last_byte;         /* when the attempt began or a byte last came */
    char error[512];
} attempt;

static void fail_hard(attempt *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_hard(attempt *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->error, sizeof a->error, fmt, ap);
    va_end(ap);
    a->hard = 1;
}

static void fail_soft(attempt *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_soft(attempt *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->error, sizeof a->error, fmt, ap);
    va_end(ap);
    a->soft = 1;
}

/* Empties the .part: the server sent the whole file, or what is here
 * cannot belong to the file. */
static int restart_part(attempt *a) {
    if (ftruncate(a->fd, 0) != 0) {
        fail_hard(a, "cannot empty %s: %s", a->job->part, strerror(errno));
        return -1;
    }
    a->have = 0;
    ds4_sha256_init(&a->sha);
    a->prog.bytes_start = 0;
    a->prog.ns = 0;
    return 0;
}

static int parse_u64(const char *s, const char **end, uint64_t *out) {
    if (!isdigit((unsigned char)*s)) return -1;
    uint64_t v = 0;
    while (isdigit((unsigned char)*s)) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
        s++;
    }
    *out = v;
    if (end) *end = s;
    return 0;
}

/* Content-Range: "bytes A-B/T"; a 416 has a star for A-B, and T may be a
 * star (unknown). */
static void parse_content_range(attempt *a, const char *v) {
    a->cr_ok = 0;
    if (strncasecmp(v, "bytes", 5)) return;
    v += 5;
    while (*v == ' ') v++;
    const char *e;
    if (*v == '*') {
        a->cr_start = a->cr_end = 0;
        v++;
    } else {
        if (parse_u64(v, &e, &a->cr_start) || *e != '-') return;
        if (parse_u64(e + 1, &e, &a->cr_end) || a->cr_end < a->cr_start) return;
        v = e;
    }
    if (*v != '/') return;
    v++;
    if (*v == '*') a->cr_total = 0;
    else if (parse_u64(v, &e, &a->cr_total)) return;
    a->cr_ok = 1;
}

static int is_hex64(const char *s) {
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return s[64] == 0;
}

/* X-Linked-Etag: "<sha256>" (quotes, maybe W/): the hub's SHA-256 of an
 * LFS file.  Anything but 64 hex digits is not a SHA-256 and is ignored. */
static void parse_linked_etag(attempt *a, const char *v) {
    if (!strncmp(v, "W/", 2)) v += 2;
    if (*v == '"') v++;
    char buf[80];
    size_t n = strcspn(v, "\"");
    if (n != 64) return;
    memcpy(buf, v, 64);
    buf[64] = 0;
    if (!is_hex64(buf)) return;
    for (int i = 0; i < 64; i++) buf[i] = (char)tolower((unsigned char)buf[i]);
    memcpy(a->hub_sha, buf, 65);
}

/* Enough free space for the rest of the file?  Also reserves it where the
 * file system can (so a full disk shows now, not after hours). */
static int check_space(attempt *a, uint64_t need_total) {
    if (a->space_checked || need_total <= a->have) return 0;
    a->space_checked = 1;
    uint64_t need = need_total - a->have;
    struct statvfs vf;
    if (statvfs(a->job->dir, &vf) == 0) {
        uint64_t avail = (uint64_t)vf.f_bavail * (uint64_t)vf.f_frsize;
        if (avail < need + SPACE_MARGIN) {
            char n1[32], n2[32], n3[32];
            fail_hard(a, "not enough disk space in %s: %s free, the download needs %s more "
                      "(+ %s margin)", a->job->dir, human(avail, n1, sizeof n1),
                      human(need, n2, sizeof n2), human(SPACE_MARGIN, n3, sizeof n3));
            return -1;
        }
    }
#ifdef FALLOC_FL_KEEP_SIZE
    /* Reserve the blocks without changing the size (the size is how much
     * has been downloaded).  Not every file system can: then only the
     * check above stands. */
    if (fallocate(a->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)need_total) != 0 && errno == ENOSPC) {
        char n1[32];
        fail_hard(a, "not enough disk space in %s for %s", a->job->dir, human(need_total, n1, sizeof n1));
        return -1;
    }
#endif
    return 0;
}

/* The size the file must have, once the server said; compares it with the
 * expected one.  0 = fine. */
static int settle_total(attempt *a, uint64_t t, const char *what) {
    uint64_t want = a->job->want_size ? a->job->want_size : a->hub_size;
    if (want && t != want) {
        char n1[32], n2[32];
        fail_hard(a, "the server's file is %" PRIu64 " bytes (%s, %s) but %" PRIu64 " (%s) were "
                  "expected (%s): a different file; nothing was written",
                  t, human(t, n1, sizeof n1), what, want, human(want, n2, sizeof n2),
                  a->job->want_size ? "the catalogue or --size" : "the hub's X-Linked-Size");
        return -1;
    }
    a->total = t;
    return 0;
}

/* The verdict on the final response, once its headers are in. */
static void decide(attempt *a) {
    a->decided = 1;
    const fetch_job *j = a->job;
    /* the hub's own checksum: it must agree with the one we expect */
    if (a->hub_sha[0]) {
        if (j->want_sha && strcmp(j->want_sha, a->hub_sha)) {
            fail_hard(a, "the hub's SHA-256 for %s is %s (X-Linked-Etag) but %s says %s: "
                      "the published file changed; nothing was written",
                      j->label, a->hub_sha, j->sha_from, j->want_sha);
            return;
        }
        if (!j->want_sha) {
            a->want_sha = a->hub_sha;
            snprintf(a->sha_from, sizeof a->sha_from, "the hub's X-Linked-Etag");
        }
    }
    if (j->want_size && a->hub_size && a->hub_size != j->want_size) {
        fail_hard(a, "the hub says %s is %" PRIu64 " bytes (X-Linked-Size), the catalogue or "
                  "--size says %" PRIu64 "; nothing was written", j->label, a->hub_size, j->want_size);
        return;
    }
    long s = a->status;
    if (s == 206) {
        if (!a->cr_ok) { fail_hard(a, "the server answered 206 without a usable Content-Range"); return; }
        if (a->cr_start != a->have) {
            fail_hard(a, "the server sent bytes from %" PRIu64 " when %" PRIu64 " were asked for: "
                      "it does not resume correctly; %s is kept as it was", a->cr_start, a->have, j->part);
            return;
        }
        if (a->cr_total && settle_total(a, a->cr_total, "Content-Range")) return;
        if (a->cr_total && a->cr_end >= a->cr_total) {
            fail_hard(a, "the server's Content-Range ends past its total");
            return;
        }
    } else if (s == 200) {
        if (a->have > 0) {
            char n1[32];
            progress_break(&a->prog);
            fprintf(stderr, "%s: %s: the server ignored the range request (200, not 206): "
                    "starting again from byte 0 (the %s downloaded are discarded)\n",
                    PROG, j->label, human(a->have, n1, sizeof n1));
            if (restart_part(a)) return;
        }
        if (a->clen >= 0 && settle_total(a, (uint64_t)a->clen, "Content-Length")) return;
    } else if (s == 416) {
        /* nothing at or past HAVE: complete if HAVE is the size */
        uint64_t t = a->cr_ok && a->cr_total ? a->cr_total : j->want_size ? j->want_size : a->hub_size;
        if (t && t == a->have) {
            if (settle_total(a, t, "Content-Range")) return;
            a->complete = 1;
        } else if (t && t < a->have) {
            progress_break(&a->prog);
            fprintf(stderr, "%s: %s: %s holds more bytes than the file's %" PRIu64 ": starting again\n",
                    PROG, j->label, j->part, t);
            if (restart_part(a) == 0) fail_soft(a, "the partial file was longer than the file");
        } else {
            fail_hard(a, "the server refused the range bytes=%" PRIu64 "- (416) without saying the "
                      "file's size; remove %s to start again", a->have, j->part);
        }
        return;
    } else if (s == 401 || s == 403) {
        fail_hard(a, "HTTP %ld from %s: access denied (a gated or private file needs a token: "
                  "--token, HF_TOKEN or ~/.cache/huggingface/token)", s, j->url);
        return;
    } else if (s == 404 || s == 410) {
        fail_hard(a, "HTTP %ld from %s: no such file", s, j->url);
        return;
    } else if (s == 408 || s == 429 || s >= 500) {
        fail_soft(a, "HTTP %ld from the server", s);
        return;
    } else {
        fail_hard(a, "HTTP %ld from %s: cannot download", s, j->url);
        return;
    }
    /* no size in the answer (a 200 without Content-Length): the expected
     * one bounds the body, and a short body is resumed */
    if (!a->total) a->total = j->want_size ? j->want_size : a->hub_size;
    if (a->total) check_space(a, a->total);
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
    attempt *a = ud;
    size_t n = size * nitems;
    char line[1024];
    size_t m = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, buf, m);
    line[m] = 0;
    while (m && (line[m - 1] == '\r' || line[m - 1] == '\n')) line[--m] = 0;
    if (!strncmp(line, "HTTP/", 5)) {
        const char *sp = strchr(line, ' ');
        a->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        a->clen = -1;
        a->cr_ok = 0;
        a->has_location = 0;
        return n;
    }
    if (m == 0) {    /* the end of one response's headers */
        if (a->status >= 100 && a->status < 200) return n;
        if (a->status >= 300 && a->status < 400 && a->has_location) return n;   /* followed */
        if (!a->decided) decide(a);
        /* a hard or soft verdict ends the attempt now; 416's body is skipped */
        return (a->hard || a->soft) ? 0 : n;
    }
    char *colon = strchr(line, ':');
    if (!colon) return n;
    *colon = 0;
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (!strcasecmp(line, "content-length")) {
        uint64_t x;
        a->clen = parse_u64(v, NULL, &x) == 0 ? (int64_t)x : -1;
    } else if (!strcasecmp(line, "content-range")) {
        parse_content_range(a, v);
    } else if (!strcasecmp(line, "location")) {
        a->has_location = 1;
    } else if (!strcasecmp(line, "x-linked-etag")) {
        parse_linked_etag(a, v);
    } else if (!strcasecmp(line, "x-linked-size")) {
        uint64_t x;
        if (parse_u64(v, NULL, &x) == 0) a->hub_size = x;
    }
    return n;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud) {
    attempt *a = ud;
    size_t n = size * nmemb;
    if (!a->decided) decide(a);
    if (a->hard || a->soft) return 0;
    if (a->complete) return n;           /* a 416's error page */
    if (a->total && a->have + n > a->total) {
        fail_hard(a, "the server sent more than the %" PRIu64 " bytes it announced", a->total);
        return 0;
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = pwrite(a->fd, buf + off, n - off, (off_t)(a->have + off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            char n1[32];
            /* what was written before stays: a later run resumes from it */
            if (ftruncate(a->fd, (off_t)a->have) != 0) { /* the size check at the end catches it */ }
            fail_hard(a, "cannot write %s: %s (%s kept; free some space and run the same "
                      "command again to resume)", a->job->part, w < 0 ? strerror(errno) : "short write",
                      human(a->have, n1, sizeof n1));
            return 0;
        }
        off += (size_t)w;
    }
    ds4_sha256_update(&a->sha, buf, n);
    a->have += n;
    a->t_last_byte = ds4_now();
    return n;
}

static int on_xfer(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal; (void)dlnow; (void)ultotal; (void)ulnow;
    attempt *a = ud;
    if (g_stop) return 1;
    /* a stall: nothing for stall_secs, headers included (libcurl's own
     * low-speed limit averages over seconds of history, so it would notice
     * a stall after a fast burst late) */
    if (ds4_now() - a->t_last_byte > (double)a->job->stall_secs) {
        fail_soft(a, "nothing received for %ld s", a->job->stall_secs);
        return 1;
    }
    if (a->decided && !a->complete && !a->hard && !a->soft)
        progress_show(&a->prog, a->have, a->total, 0);
    return 0;
}

/* curl errors worth another attempt: the network, not the request. */
static int curl_retryable(CURLcode rc) {
    switch (rc) {
    case CURLE_UNSUPPORTED_PROTOCOL: case CURLE_URL_MALFORMAT: case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CACERT_BADFILE: case CURLE_LOGIN_DENIED:
    case CURLE_REMOTE_ACCESS_DENIED: case CURLE_OUT_OF_MEMORY: case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_NOT_BUILT_IN: case CURLE_SSL_ENGINE_NOTFOUND: case CURLE_SSL_CERTPROBLEM:
        return 0;
    default:
        return 1;
    }
}

static int setup(CURL *c, attempt *a, char *range, size_t range_n) {
    const fetch_job *j = a->job;
    char ua[96];
    snprintf(ua, sizeof ua, "ds4-get/%s", ds4_version());
    curl_easy_setopt(c, CURLOPT_URL, j->url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, ua);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    if (a->have > 0) {
        /* CURLOPT_RANGE, not RESUME_FROM: the answer (200 / 206 / 416) is
         * ours to judge, and the Range header is kept across redirects */
        snprintf(range, range_n, "%" PRIu64 "-", a->have);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    if (j->token) {
        /* sent to the URL's host only: curl drops credentials on a
         * redirect to another host (the CDN needs none) */
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, j->token);
    }
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    return 0;
}

/* Sleeps s seconds unless a signal comes first. */
static void nap(int s) {
    struct timespec t = { s, 0 };
    while (!g_stop && nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

/* Hashes the first `n` bytes of fd into ctx, with a progress line for large
 * files.  0 ok, -1 read error (printed), 130 stopped by a signal. */
static int hash_prefix(int fd, const char *label, uint64_t n, ds4_sha256_ctx *ctx) {
    uint8_t *buf = malloc(READ_CHUNK);
    if (!buf) { fprintf(stderr, "%s: out of memory\n", PROG); return -1; }
    progress p;
    progress_init(&p, label, 0);
    int show = n >= (256ull << 20);
    uint64_t off = 0;
    while (off < n) {
        if (g_stop) { free(buf); progress_break(&p); return 130; }
        size_t want = n - off < READ_CHUNK ? (size_t)(n - off) : READ_CHUNK;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            progress_break(&p);
            fprintf(stderr, "%s: cannot read %s: %s\n", PROG, label, r < 0 ? strerror(errno) : "unexpected end of file");
            free(buf);
            return -1;
        }
        ds4_sha256_update(ctx, buf, (size_t)r);
        off += (uint64_t)r;
        if (show) progress_show(&p, off, n, 0);
    }
    if (show) progress_show(&p, off, n, 1);
    progress_break(&p);
    free(buf);
    return 0;
}

int fetch_hash_file(const char *path, const char *label, char out[65], uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { fprintf(stderr, "%s: cannot open %s: %s\n", PROG, path, strerror(errno)); return -1; }
    struct stat st;
    if (fstat(fd, &st) != 0) { fprintf(stderr, "%s: %s: %s\n", PROG, path, strerror(errno)); close(fd); return -1; }
    ds4_sha256_ctx c;
    ds4_sha256_init(&c);
    int rc = hash_prefix(fd, label, (uint64_t)st.st_size, &c);
    close(fd);
    if (rc) return rc;
    uint8_t d[32];
    ds4_sha256_final(&c, d);
    ds4_hex(d, 32, out);
    if (size) *size = (uint64_t)st.st_size;
    return 0;
}

/* ----------------------------------------------------------------- the run */

int fetch_run(const fetch_job *j, fetch_result *r) {
    memset(r, 0, sizeof *r);
    attempt a;
    memset(&a, 0, sizeof a);
    a.job = j;
    a.want_sha = j->want_sha;
    snprintf(a.sha_from, sizeof a.sha_from, "%s", j->sha_from ? j->sha_from : "");

    struct stat st;
    a.fd = open(j->part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (a.fd < 0) {
        fprintf(stderr, "%s: cannot open %s: %s\n", PROG, j->part, strerror(errno));
        return FETCH_FAIL;
    }
    /* one writer per .part: a second ds4-get would interleave bytes */
    if (flock(a.fd, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr, "%s: %s is being written by another ds4-get (or is not lockable: %s)\n",
                PROG, j->part, strerror(errno));
        close(a.fd);
        return FETCH_FAIL;
    }
    int rc = FETCH_FAIL;
    CURL *c = NULL;
    if (fstat(a.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: %s is not a regular file\n", PROG, j->part);
        goto out;
    }
    /* the lock was free because another ds4-get just finished and renamed
     * this very file to its final name: not ours to append to */
    struct stat sp;
    if (stat(j->part, &sp) != 0 || sp.st_ino != st.st_ino || sp.st_dev != st.st_dev) {
        fprintf(stderr, "%s: %s was just completed by another ds4-get\n", PROG, j->part);
        close(a.fd);
        return FETCH_FAIL;
    }
    a.have = (uint64_t)st.st_size;
    ds4_sha256_init(&a.sha);
    if (j->want_size && a.have > j->want_size) {
        fprintf(stderr, "%s: %s: %s holds more than the file's %" PRIu64 " bytes: starting again\n",
                PROG, j->label, j->part, j->want_size);
        if (restart_part(&a)) { fprintf(stderr, "%s: %s\n", PROG, a.error); goto out; }
    }
    if (a.have > 0) {
        char n1[32];
        fprintf(stderr, "%s: %s: resuming after the %s already in %s (hashing them first)\n",
                PROG, j->label, human(a.have, n1, sizeof n1), j->part);
        int h = hash_prefix(a.fd, j->part, a.have, &a.sha);
        if (h == 130) { rc = FETCH_INTERRUPTED; goto stopped; }
        if (h) goto out;
    }
    if (j->want_size && check_space(&a, j->want_size)) {
        fprintf(stderr, "%s: %s\n", PROG, a.error);
        goto out;
    }
    a.space_checked = 0;     /* checked again against the server's size */

    c = curl_easy_init();
    if (!c) { fprintf(stderr, "%s: cannot initialise libcurl\n", PROG); goto out; }
    progress_init(&a.prog, j->label, a.have);
    int failures = 0;       /* attempts in a row that brought no byte */
    for (;;) {
        uint64_t before = a.have;
        a.decided = a.complete = a.hard = a.soft = 0;
        a.status = 0;
        a.clen = -1;
        a.cr_ok = 0;
        a.hub_size = 0;
        a.error[0] = 0;
        a.t_last_byte = ds4_now();
        char range[48];
        curl_easy_reset(c);
        setup(c, &a, range, sizeof range);
        char cerr[CURL_ERROR_SIZE] = "";
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
        CURLcode cr = curl_easy_perform(c);
        if (g_stop) { rc = FETCH_INTERRUPTED; goto stopped; }
        if (a.hard) {
            progress_break(&a.prog);
            fprintf(stderr, "%s: %s: %s\n", PROG, j->label, a.error);
            goto out;
        }
        if (!a.soft && cr == CURLE_OK && a.decided &&
            (a.complete || !a.total || a.have == a.total)) break;   /* no size announced: the end of the body is the end */
        int progressed = a.have > before;
        char why[600];
        if (a.soft) snprintf(why, sizeof why, "%s", a.error);
        else if (cr != CURLE_OK) snprintf(why, sizeof why, "%s", cerr[0] ? cerr : curl_easy_strerror(cr));
        else if (progressed) continue;          /* a short 206 (the server sends pieces): ask for the rest */
        else snprintf(why, sizeof why, "the transfer ended before the end of the file");
        progress_break(&a.prog);
        if (cr != CURLE_OK && !a.soft && !curl_retryable(cr)) {
            fprintf(stderr, "%s: %s: %s (%s)\n", PROG, j->label, why, j->url);
            goto out;
        }
        /* an attempt that brought bytes is resumed at once; only attempts
         * without progress count, with a growing pause */
        failures = progressed ? 0 : failures + 1;
        char n1[32];
        if (failures > j->retries) {
            fprintf(stderr, "%s: %s: giving up after %d attempt%s in a row without progress: %s; "
                    "%s keeps %s: run the same command again to resume\n", PROG, j->label, failures,
                    failures == 1 ? "" : "s", why, j->part, human(a.have, n1, sizeof n1));
            goto out;
        }
        int wait = failures == 0 ? 0 : failures - 1 < 5 ? 1 << (failures - 1) : BACKOFF_MAX_S;
        if (wait > BACKOFF_MAX_S) wait = BACKOFF_MAX_S;
        fprintf(stderr, "%s: %s: %s; resuming from byte %" PRIu64 "%s", PROG, j->label, why, a.have,
                wait ? "" : "\n");
        if (wait) fprintf(stderr, " in %d s (retry %d of %d)\n", wait, failures, j->retries);
        nap(wait);
        if (g_stop) { rc = FETCH_INTERRUPTED; goto stopped; }
    }
    progress_break(&a.prog);
    {
        /* the summary: what this run brought, at its average rate */
        double dt = ds4_now() - a.prog.t_start;
        uint64_t got = a.have - (a.have >= a.prog.bytes_start ? a.prog.bytes_start : a.have);
        char n1[32], n2[32], n3[32];
        fprintf(stderr, "%s: %s: complete, %s (%s in this run, %.1f s, %s/s)\n", PROG, j->label,
                human(a.have, n1, sizeof n1), human(got, n2, sizeof n2), dt,
                human(dt > 0 ? (uint64_t)((double)got / dt) : got, n3, sizeof n3));
    }

    /* complete: the size, then the checksum */
    if (j->want_size && a.have != j->want_size) {
        fprintf(stderr, "%s: %s: got %" PRIu64 " bytes, expected %" PRIu64 "; %s kept: run again to resume\n",
                PROG, j->label, a.have, j->want_size, j->part);
        goto out;
    }
    if (fdatasync(a.fd) != 0) {
        fprintf(stderr, "%s: cannot flush %s: %s\n", PROG, j->part, strerror(errno));
        goto out;
    }
    uint8_t d[32];
    ds4_sha256_final(&a.sha, d);
    ds4_hex(d, 32, r->sha);
    r->size = a.have;
    if (a.want_sha) {
        if (strcmp(a.want_sha, r->sha)) {
            /* a corrupt file must not be resumed from or used: it goes */
            unlink(j->part);
            fprintf(stderr, "%s: %s: SHA-256 mismatch: the download is %s, %s says %s; the corrupt "
                    "%s was removed; run the same command again to download it again\n",
                    PROG, j->label, r->sha, a.sha_from, a.want_sha, j->part);
            goto out;
        }
        r->checked = 1;
        snprintf(r->sha_from, sizeof r->sha_from, "%s", a.sha_from);
    }
    rc = FETCH_OK;
    goto out;

stopped:
    progress_break(&a.prog);
    {
        char n1[32];
        fprintf(stderr, "%s: %s: interrupted; %s keeps %s: run the same command again to resume\n",
                PROG, j->label, j->part, human(a.have, n1, sizeof n1));
    }
out:
    if (c) curl_easy_cleanup(c);
    /* an empty .part is worth nothing: not left behind (the lock is ours) */
    if (rc != FETCH_OK && a.have == 0) unlink(j->part);
    close(a.fd);
    return rc;
}
