/*
 * http1_parse.c -- the request head and chunked body parsers of
 * ds4-server's HTTP/1.1 layer (http1.h), strict per RFC 9112.
 *
 * Owns: the syntax of a request (request line, field lines, chunked
 * framing) and the framing decisions (Content-Length, Transfer-Encoding,
 * keep-alive, 100-continue).  No I/O, no allocation: tests/test_http1.c
 * and fuzz/fuzz_http1.c call it on bytes directly.  Must not: know routes,
 * APIs or the Host/Origin policy (http.c).
 *
 * Why strict: a proxy in front of the server and the server must agree on
 * where each request ends, or the bytes of one request are taken for the
 * next one (request smuggling).  So everything two parsers could read
 * differently is refused with 400 instead of being repaired: a bare LF,
 * obs-fold, a NUL or other control character in a field, two
 * Content-Length fields (even equal ones), Transfer-Encoding with
 * Content-Length, any transfer coding but "chunked", a chunk size that
 * does not fit in 64 bits, two Host / Origin / ... fields.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http1.h"

/* RFC 9110 5.6.2 tchar */
static int is_tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A field value byte: HTAB, SP, VCHAR, obs-text (RFC 9110 5.5). */
static int is_value_byte(unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); }

/* Up to 60 bytes of s for a reason text: printable ASCII kept, the rest
 * as \xNN (the reason goes into JSON error bodies and log lines). */
static void quote(char *dst, size_t cap, const char *s) {
    size_t k = 0;
    if (!cap) return;
    for (size_t i = 0; s[i] && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 60) {
            if (k + 4 < cap) { memcpy(dst + k, "...", 3); k += 3; }
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') dst[k++] = (char)c;
        else k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", c);
    }
    dst[k] = 0;
}

long http1_head_end(const char *buf, size_t n, size_t *pos) {
    /* empty lines before the request line do not end the head (RFC 9112
     * 2.2; http1_parse_head skips them) */
    size_t start = 0;
    while (start + 1 < n && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
    for (size_t i = *pos; i < n; i++) {
        if (buf[i] != '\n') continue;
        if (i == 0 || buf[i - 1] != '\r') return -1;
        /* an empty line after the request line ends the head */
        if (i >= start + 3 && buf[i - 2] == '\n' && buf[i - 3] == '\r') return (long)(i + 1);
    }
    *pos = n;
    return 0;
}

const char *http1_field_get(const http1_head *h, const char *name) {
    for (int i = 0; i < h->n_fields; i++)
        if (!strcasecmp(h->fields[i].name, name)) return h->fields[i].value;
    return NULL;
}

static int fail(char *why, size_t cap, int status, const char *fmt, const char *arg) {
    char q[256];
    quote(q, sizeof q, arg ? arg : "");
    snprintf(why, cap, fmt, q);
    return status;
}

/* The path of the request-target, %XX decoded (as libmicrohttpd did: an
 * invalid escape stays as it is); a decoded NUL is refused. */
static int decode_path(const char *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int a, b;
        if (s[i] == '%' && i + 2 < n && (a = hexval((unsigned char)s[i + 1])) >= 0 &&
            (b = hexval((unsigned char)s[i + 2])) >= 0) {
            if (a == 0 && b == 0) return -1;
            out[k++] = (char)(a * 16 + b);
            i += 2;
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = 0;
    return 0;
}

/* Does the comma-separated list v hold the token t (case-insensitive)? */
static int has_token(const char *v, const char *t) {
    size_t tn = strlen(t);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *e = v;
        while (*e && *e != ',') e++;
        const char *z = e;
        while (z > v && (z[-1] == ' ' || z[-1] == '\t')) z--;
        if ((size_t)(z - v) == tn && !strncasecmp(v, t, tn)) return 1;
        v = e;
    }
    return 0;
}

/* Fields a request may carry once: two of them mean two parsers on the
 * way could each pick a different one. */
static const char *const SINGLE[] = {
    "Host", "Content-Length", "Transfer-Encoding", "Origin", "Content-Type", "Authorization",
    "X-Api-Key", NULL
};

static int parse_target(char *t, const char *method, char *path, http1_head *h,
                        char *why, size_t whycap) {
    h->authority = NULL;
    if (t[0] == '/') {
        size_t pn = strcspn(t, "?");
        if (decode_path(t, pn, path)) return fail(why, whycap, 400, "%%00 (NUL) in the path %s", t);
        h->path = path;
        return 0;
    }
    if (!strcmp(t, "*")) {
        if (strcmp(method, "OPTIONS"))
            return fail(why, whycap, 400, "request target '*' with a method other than OPTIONS%s", NULL);
        strcpy(path, "*");
        h->path = path;
        return 0;
    }
    /* absolute-form (RFC 9112 3.2.2): the authority replaces Host */
    size_t sch = !strncasecmp(t, "http://", 7) ? 7 : !strncasecmp(t, "https://", 8) ? 8 : 0;
    if (!sch) return fail(why, whycap, 400, "invalid request target '%s'", t);
    const char *a = t + sch;
    size_t an = strcspn(a, "/?");
    if (an == 0) return fail(why, whycap, 400, "request target '%s' without a host", t);
    const char *p = a + an;
    size_t pn = strcspn(p, "?");
    char *auth = path;
    memcpy(auth, a, an);
    auth[an] = 0;
    char *pp = path + an + 1;
    if (pn == 0) {
        strcpy(pp, "/");
    } else if (p[0] != '/') {
        strcpy(pp, "/");
    } else if (decode_path(p, pn, pp)) {
        return fail(why, whycap, 400, "%%00 (NUL) in the path %s", t);
    }
    h->authority = auth;
    h->path = pp;
    return 0;
}

int http1_parse_head(char *buf, size_t n, char *path, http1_head *h, http1_field *fields,
                     int cap, char *why, size_t whycap) {
    memset(h, 0, sizeof *h);
    h->fields = fields;
    why[0] = 0;
    size_t pos = 0;
    /* RFC 9112 2.2: empty lines before the request line are ignored */
    while (pos + 1 < n && buf[pos] == '\r' && buf[pos + 1] == '\n') pos += 2;
    int have_line = 0, ended = 0;
    while (pos < n) {
        char *lf = memchr(buf + pos, '\n', n - pos);
        if (!lf) return fail(why, whycap, 400, "incomplete request head%s", NULL);
        size_t e = (size_t)(lf - buf);
        if (e == pos || buf[e - 1] != '\r')
            return fail(why, whycap, 400, "a line ends in a bare LF (CRLF is required)%s", NULL);
        char *line = buf + pos;
        size_t ln = e - 1 - pos;
        line[ln] = 0;      /* the CR */
        *lf = 0;
        pos = e + 1;
        if (!have_line) {
            /* request-line = method SP request-target SP HTTP-version */
            size_t m = 0;
            while (m < ln && is_tchar((unsigned char)line[m])) m++;
            if (m == 0 || m >= ln || line[m] != ' ')
                return fail(why, whycap, 400, "malformed request line '%s'", line);
            line[m] = 0;
            char *t = line + m + 1;
            size_t tn = 0;
            while (m + 1 + tn < ln && (unsigned char)t[tn] > 0x20 && (unsigned char)t[tn] < 0x7f) tn++;
            if (tn == 0 || m + 1 + tn >= ln || t[tn] != ' ') {
                line[m] = ' ';
                return fail(why, whycap, 400, "malformed request line '%s'", line);
            }
            t[tn] = 0;
            const char *v = t + tn + 1;
            if (strlen(v) != 8 || strncmp(v, "HTTP/", 5) || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
                v[7] < '0' || v[7] > '9')
                return fail(why, whycap, 400, "malformed HTTP version '%s'", v);
            if (v[5] != '1') return fail(why, whycap, 505, "HTTP version %s is not supported (HTTP/1.1 is)", v);
            h->minor = v[7] == '0' ? 0 : 1;
            h->method = line;
            h->target = t;
            int st = parse_target(t, line, path, h, why, whycap);
            if (st) return st;
            have_line = 1;
            continue;
        }
        if (ln == 0) { ended = 1; break; }
        if (line[0] == ' ' || line[0] == '\t')
            return fail(why, whycap, 400, "obs-fold: a header line starts with whitespace ('%s')", line);
        size_t k = 0;
        while (k < ln && is_tchar((unsigned char)line[k])) k++;
        if (k == ln) return fail(why, whycap, 400, "header line without ':' ('%s')", line);
        if (line[k] != ':') {
            if (line[k] == ' ' || line[k] == '\t')
                return fail(why, whycap, 400, "whitespace between a header name and ':' ('%s')", line);
            return fail(why, whycap, 400, "invalid character in a header name ('%s')", line);
        }
        if (k == 0) return fail(why, whycap, 400, "empty header name%s", NULL);
        line[k] = 0;
        char *v = line + k + 1;
        size_t vn = ln - k - 1;
        for (size_t i = 0; i < vn; i++) {
            unsigned char c = (unsigned char)v[i];
            if (is_value_byte(c)) continue;
            char what[64];
            if (c == 0) snprintf(what, sizeof what, "a NUL");
            else if (c == '\r') snprintf(what, sizeof what, "a bare CR");
            else snprintf(what, sizeof what, "control character 0x%02x", c);
            char msg[128];
            snprintf(msg, sizeof msg, "%s in the value of header ", what);
            char q[256];
            quote(q, sizeof q, line);
            snprintf(why, whycap, "%s'%s'", msg, q);
            return 400;
        }
        while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t')) v[--vn] = 0;
        while (*v == ' ' || *v == '\t') v++;
        if (h->n_fields == cap) return fail(why, whycap, 431, "too many header fields%s", NULL);
        fields[h->n_fields].name = line;
        fields[h->n_fields].value = v;
        h->n_fields++;
    }
    if (!have_line) return fail(why, whycap, 400, "no request line%s", NULL);
    if (!ended) return fail(why, whycap, 400, "incomplete request head%s", NULL);

    /* framing and the fields that must be single */
    for (int s = 0; SINGLE[s]; s++) {
        int seen = 0;
        for (int i = 0; i < h->n_fields; i++)
            if (!strcasecmp(h->fields[i].name, SINGLE[s]) && seen++)
                return fail(why, whycap, 400, "duplicate %s header", SINGLE[s]);
    }
    if (h->minor == 1 && !http1_field_get(h, "Host"))
        return fail(why, whycap, 400, "HTTP/1.1 request without a Host header%s", NULL);
    const char *te = http1_field_get(h, "Transfer-Encoding");
    const char *cl = http1_field_get(h, "Content-Length");
    if (te) {
        if (cl)
            return fail(why, whycap, 400, "Transfer-Encoding together with Content-Length%s", NULL);
        if (h->minor == 0)
            return fail(why, whycap, 400, "Transfer-Encoding in an HTTP/1.0 request%s", NULL);
        if (strcasecmp(te, "chunked"))
            return fail(why, whycap, 400, "Transfer-Encoding '%s' is not supported (only chunked)", te);
        h->chunked = 1;
    }
    if (cl) {
        if (!*cl) return fail(why, whycap, 400, "empty Content-Length%s", NULL);
        uint64_t v = 0;
        for (const char *p = cl; *p; p++) {
            if (*p < '0' || *p > '9') return fail(why, whycap, 400, "invalid Content-Length '%s'", cl);
            unsigned d = (unsigned)(*p - '0');
            /* more than fits: the caller answers 413 */
            v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
        }
        h->has_length = 1;
        h->length = v;
    }
    const char *conn = http1_field_get(h, "Connection");
    h->close = h->minor == 0 || (conn && has_token(conn, "close"));
    const char *ex = http1_field_get(h, "Expect");
    h->expect_continue = h->minor == 1 && ex && !strcasecmp(ex, "100-continue");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* chunked bodies                                                            */
/* ------------------------------------------------------------------------ */

enum {
    C_SIZE, C_EXT_WS, C_EXT, C_SIZE_LF, C_DATA, C_DATA_CR, C_DATA_LF,
    C_TR_START, C_TR_NAME, C_TR_VALUE, C_TR_LF, C_END_LF, C_DONE
};

#define CHUNK_LINE_MAX 4096
#define TRAILER_MAX 16384

int http1_chunked_done(const http1_chunked *d) { return d->state == C_DONE; }

int http1_chunked_feed(http1_chunked *d, char *buf, size_t n, uint64_t max_body, size_t *used,
                       size_t *out, char *why, size_t whycap) {
    size_t i = 0, o = 0;
    int st = 0;
    while (i < n && d->state != C_DONE) {
        unsigned char c = (unsigned char)buf[i];
        if (d->state == C_DATA) {
            size_t k = n - i;
            if ((uint64_t)k > d->left) k = (size_t)d->left;
            memmove(buf + o, buf + i, k);
            o += k;
            i += k;
            d->left -= k;
            d->total += k;
            if (d->left == 0) d->state = C_DATA_CR;
            continue;
        }
        i++;
        if (d->state <= C_EXT && ++d->line > CHUNK_LINE_MAX) {
            st = fail(why, whycap, 400, "chunk size line longer than 4096 bytes%s", NULL);
            break;
        }
        if (d->state >= C_TR_START && d->state <= C_TR_LF && ++d->trailer > TRAILER_MAX) {
            st = fail(why, whycap, 400, "chunked trailer section larger than 16384 bytes%s", NULL);
            break;
        }
        switch (d->state) {
        case C_SIZE: {
            int v = hexval(c);
            if (v >= 0) {
                /* leading zeros are not significant */
                if (d->digits || v) {
                    if (++d->digits > 16) {
                        st = fail(why, whycap, 400, "chunk size does not fit in 64 bits%s", NULL);
                        goto out;
                    }
                    d->left = d->left * 16 + (uint64_t)v;
                }
                d->any = 1;
                break;
            }
            if (!d->any) {
                st = fail(why, whycap, 400, "invalid chunk size%s", NULL);
                goto out;
            }
            if (c == ' ' || c == '\t') d->state = C_EXT_WS;
            else if (c == ';') d->state = C_EXT;
            else if (c == '\r') d->state = C_SIZE_LF;
            else { st = fail(why, whycap, 400, "invalid chunk size%s", NULL); goto out; }
            break;
        }
        case C_EXT_WS:
            if (c == ';') d->state = C_EXT;
            else if (c != ' ' && c != '\t') {
                st = fail(why, whycap, 400, "invalid chunk extension%s", NULL);
                goto out;
            }
            break;
        case C_EXT:
            if (c == '\r') d->state = C_SIZE_LF;
            else if (!is_value_byte(c)) {
                st = fail(why, whycap, 400, "control character in a chunk extension%s", NULL);
                goto out;
            }
            break;
        case C_SIZE_LF:
            if (c != '\n') { st = fail(why, whycap, 400, "chunk size line without CRLF%s", NULL); goto out; }
            d->line = 0;
            d->digits = d->any = 0;
            if (d->left == 0) { d->state = C_TR_START; break; }
            if (d->left > max_body || d->total > max_body - d->left) {
                snprintf(why, whycap, "the chunked body exceeds the limit of %llu bytes",
                         (unsigned long long)max_body);
                st = 413;
                goto out;
            }
            d->state = C_DATA;
            break;
        case C_DATA_CR:
            if (c != '\r') { st = fail(why, whycap, 400, "chunk data not followed by CRLF%s", NULL); goto out; }
            d->state = C_DATA_LF;
            break;
        case C_DATA_LF:
            if (c != '\n') { st = fail(why, whycap, 400, "chunk data not followed by CRLF%s", NULL); goto out; }
            d->state = C_SIZE;
            d->left = 0;
            break;
        case C_TR_START:
            if (c == '\r') d->state = C_END_LF;
            else if (is_tchar(c)) d->state = C_TR_NAME;
            else { st = fail(why, whycap, 400, "malformed trailer field%s", NULL); goto out; }
            break;
        case C_TR_NAME:
            if (c == ':') d->state = C_TR_VALUE;
            else if (!is_tchar(c)) { st = fail(why, whycap, 400, "malformed trailer field%s", NULL); goto out; }
            break;
        case C_TR_VALUE:
            if (c == '\r') d->state = C_TR_LF;
            else if (!is_value_byte(c)) {
                st = fail(why, whycap, 400, "control character in a trailer field%s", NULL);
                goto out;
            }
            break;
        case C_TR_LF:
            if (c != '\n') { st = fail(why, whycap, 400, "trailer line without CRLF%s", NULL); goto out; }
            d->state = C_TR_START;
            break;
        case C_END_LF:
            if (c != '\n') { st = fail(why, whycap, 400, "chunked body not ended by CRLF%s", NULL); goto out; }
            d->state = C_DONE;
            break;
        }
    }
out:
    *used = i;
    *out = o;
    return st;
}
