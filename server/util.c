/*
 * util.c -- small helpers of ds4-server: random ids from /dev/urandom,
 * clocks, JSON string building that survives invalid UTF-8, base64, the
 * API error shapes, logging.
 *
 * Owns: nothing stateful except the /dev/urandom descriptor.  Must not know
 * about jobs, sessions or HTTP.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

static int g_urandom = -1;

int util_random_init(void) {
    g_urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    return g_urandom >= 0 ? 0 : -1;
}

/* Reads of /dev/urandom never block and are safe from any thread.  Ids
 * must be unguessable (a client could otherwise make the server replay
 * another conversation's tool calls), so there is no weak fallback: without
 * the device the server refuses to start (util_random_init). */
void util_random_bytes(void *dst, size_t n) {
    unsigned char *p = dst;
    while (n) {
        ssize_t k = read(g_urandom, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            fprintf(stderr, "ds4-server: /dev/urandom read failed\n");
            abort();
        }
        p += k;
        n -= (size_t)k;
    }
}

void util_random_id(char *dst, size_t cap, const char *prefix, int n) {
    static const char b62[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t k = strlen(prefix);
    if (k + (size_t)n + 1 > cap) n = (int)(cap - k - 1);
    memcpy(dst, prefix, k);
    int got = 0;
    unsigned char r[64];
    while (got < n) {
        util_random_bytes(r, sizeof r);
        /* rejection sampling keeps the characters uniform: 248 = 4 * 62 */
        for (size_t i = 0; i < sizeof r && got < n; i++)
            if (r[i] < 248) dst[k + got++] = b62[r[i] % 62];
    }
    dst[k + (size_t)n] = 0;
}

double util_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

long util_unix_time(void) { return (long)time(NULL); }

int util_utf8_sanitize(const char *s, size_t n, ds4_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c = u[i];
        size_t k = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c >= 0xe0 && c <= 0xef) { k = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
        size_t j = 1;
        if (k) {
            /* maximal valid prefix of the sequence */
            if (i + 1 < n && u[i + 1] >= lo && u[i + 1] <= hi) {
                j = 2;
                while (j <= k && i + j < n && u[i + j] >= 0x80 && u[i + j] <= 0xbf) j++;
            }
            if (j == k + 1) { i += j; continue; }   /* complete and valid */
        }
        /* invalid: flush the valid run, then U+FFFD for the maximal subpart */
        if (ds4_buf_append(out, s + run, i - run)) return DS4_ENOMEM;
        if (ds4_buf_append(out, "\xef\xbf\xbd", 3)) return DS4_ENOMEM;
        i += j;
        run = i;
    }
    if (ds4_buf_append(out, s + run, n - run)) return DS4_ENOMEM;
    return DS4_OK;
}

json_t *jstr(const char *s, size_t n) {
    if (!s) return json_string("");
    json_t *v = json_stringn(s, n);
    if (v) return v;
    ds4_buf b = { 0 };
    util_utf8_sanitize(s, n, &b);
    v = json_stringn(b.p ? b.p : "", b.n);
    ds4_buf_free(&b);
    return v ? v : json_string("");
}

json_t *jcstr(const char *s) { return s ? jstr(s, strlen(s)) : json_null(); }

char *jdump(const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return s ? s : strdup("null");
}

char *util_base64_decode(const char *s, size_t *out_len) {
    size_t n = strlen(s);
    char *out = malloc(n / 4 * 3 + 4);
    if (!out) return NULL;
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    int pad = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int v;
        if (c >= 'A' && c <= 'Z') v = c - 'A';
        else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
        else if (c >= '0' && c <= '9') v = c - '0' + 52;
        else if (c == '+' || c == '-') v = 62;
        else if (c == '/' || c == '_') v = 63;
        else if (c == '=') { pad++; continue; }
        else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
        else { free(out); return NULL; }
        if (pad) { free(out); return NULL; }   /* data after padding */
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (char)((acc >> bits) & 0xff);
        }
    }
    if (bits >= 6) { free(out); return NULL; }  /* a lone trailing character */
    out[k] = 0;
    *out_len = k;
    return out;
}

void log_msg(const char *fmt, ...) {
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ds4-server %s %s\n", ts, line);
}

int util_secret_eq(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    /* compare over the expected length so timing does not leak the prefix */
    for (size_t i = 0; i < lb; i++) d |= (unsigned char)(b[i] ^ (i < la ? a[i] : 0));
    return d == 0;
}

/* ------------------------------------------------------------------------ */
/* API errors                                                                */
/* ------------------------------------------------------------------------ */

const char *endpoint_label(endpoint e) {
    static const char *const n[EP__N] = {
        "models", "model", "chat_completions", "completions", "responses",
        "messages", "count_tokens", "health", "metrics", "other",
    };
    return (unsigned)e < EP__N ? n[e] : "other";
}

void api_err_set(api_error *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

int api_bad(api_error *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    e->code = NULL;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

const char *anthropic_error_type(int status) {
    switch (status) {
    case 400: case 405: case 411: case 415: case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *api_error_body(int anthropic, const api_error *e) {
    json_t *o = json_object(), *in = json_object();
    if (anthropic) {
        json_object_set_new(o, "type", json_string("error"));
        json_object_set_new(in, "type", json_string(anthropic_error_type(e->status)));
        json_object_set_new(in, "message", jcstr(e->message));
    } else {
        json_object_set_new(in, "message", jcstr(e->message));
        json_object_set_new(in, "type", jcstr(e->type ? e->type : "invalid_request_error"));
        json_object_set_new(in, "param", e->param[0] ? jcstr(e->param) : json_null());
        json_object_set_new(in, "code", jcstr(e->code));
    }
    json_object_set_new(o, "error", in);
    char *s = jdump(o);
    json_decref(o);
    return s;
}
