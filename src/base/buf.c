/*
 * buf.c -- small shared helpers of the public API: status strings, the one
 * error-message helper (ds4_set_err) and the growable token / byte buffers
 * (ds4_tokens, ds4_buf).
 *
 * Owns: nothing but these.  Growth is geometric so that appending in a loop
 * is amortised O(1) and a reused buffer stops allocating; a failed growth is
 * sticky (ds4.h) so that a long builder cannot silently lose a piece.
 * Must not: print, or know any other module.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ds4.h"

const char *ds4_strerror(int code) {
    switch (code) {
    case DS4_OK: return "ok";
    case DS4_EINVAL: return "invalid argument or input";
    case DS4_ENOMEM: return "out of memory";
    case DS4_EIO: return "I/O error";
    case DS4_EFORMAT: return "malformed or incompatible data";
    case DS4_ECTX: return "context is full";
    case DS4_ECANCEL: return "cancelled";
    case DS4_EUNSUP: return "unsupported";
    }
    return "unknown error";
}

/* ------------------------------------------------------------------------ */
/* Error messages                                                            */
/* ------------------------------------------------------------------------ */

int ds4_set_errv(char **err, int code, const char *fmt, va_list ap) {
    if (!err) return code;
    free(*err);
    *err = NULL;
    va_list aq;
    va_copy(aq, ap);
    int k = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    if (k < 0) return code;
    char *m = malloc((size_t)k + 1);
    if (!m) return code;
    vsnprintf(m, (size_t)k + 1, fmt, ap);
    *err = m;
    return code;
}

int ds4_set_err(char **err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ds4_set_errv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

/* ------------------------------------------------------------------------ */
/* Token and byte buffers: a failure is remembered in `err` (sticky), so     */
/* builders can check once at the end (ds4.h).                               */
/* ------------------------------------------------------------------------ */

int ds4_tokens_reserve(ds4_tokens *t, size_t cap) {
    if (t->err) return t->err;
    if (cap <= t->cap) return DS4_OK;
    size_t nc = t->cap ? t->cap : 64;
    while (nc < cap) {
        if (nc > ((size_t)-1) / 2 / sizeof(int32_t)) return t->err = DS4_ENOMEM;
        nc *= 2;
    }
    int32_t *v = realloc(t->v, nc * sizeof(int32_t));
    if (!v) return t->err = DS4_ENOMEM;
    t->v = v;
    t->cap = nc;
    return DS4_OK;
}

int ds4_tokens_push(ds4_tokens *t, int32_t id) {
    if (t->err) return t->err;
    if (t->n == t->cap && ds4_tokens_reserve(t, t->n + 1)) return t->err;
    t->v[t->n++] = id;
    return DS4_OK;
}

int ds4_tokens_append(ds4_tokens *t, const int32_t *ids, size_t n) {
    if (t->err) return t->err;
    if (n > ((size_t)-1) / sizeof(int32_t) - t->n) return t->err = DS4_ENOMEM;
    if (ds4_tokens_reserve(t, t->n + n)) return t->err;
    if (n) memcpy(t->v + t->n, ids, n * sizeof(int32_t));
    t->n += n;
    return DS4_OK;
}

int ds4_tokens_failed(const ds4_tokens *t) { return t->err; }

void ds4_tokens_free(ds4_tokens *t) {
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
    t->err = 0;
}

static int buf_reserve(ds4_buf *b, size_t need) {
    if (b->err) return b->err;
    if (need < b->cap) return DS4_OK;   /* keep room for the NUL */
    size_t nc = b->cap ? b->cap : 256;
    while (nc <= need) {
        if (nc > ((size_t)-1) / 2) return b->err = DS4_ENOMEM;
        nc *= 2;
    }
    char *p = realloc(b->p, nc);
    if (!p) return b->err = DS4_ENOMEM;
    b->p = p;
    b->cap = nc;
    return DS4_OK;
}

int ds4_buf_append(ds4_buf *b, const void *data, size_t len) {
    if (b->err) return b->err;
    if (len > ((size_t)-1) - b->n - 1) return b->err = DS4_ENOMEM;
    if (buf_reserve(b, b->n + len)) return b->err;
    if (len) memcpy(b->p + b->n, data, len);
    b->n += len;
    b->p[b->n] = 0;
    return DS4_OK;
}

int ds4_buf_read_file(ds4_buf *b, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n0 = b->n;
    char tmp[65536];
    size_t k;
    int e = 0;
    while (!e && (k = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (ds4_buf_append(b, tmp, k)) e = ENOMEM;
    if (!e && ferror(f)) e = EIO;
    fclose(f);
    if (!e && ds4_buf_append(b, "", 0)) e = ENOMEM;   /* an empty file: p not NULL */
    if (e) {
        b->n = n0;   /* as before (a failed append stays sticky: ds4_buf_failed) */
        if (b->p) b->p[n0] = 0;
        errno = e;
        return -1;
    }
    return 0;
}

int ds4_buf_reserve(ds4_buf *b, size_t extra) {
    if (b->err) return b->err;
    if (extra > ((size_t)-1) - b->n - 1) return b->err = DS4_ENOMEM;
    return buf_reserve(b, b->n + extra);
}

int ds4_buf_puts(ds4_buf *b, const char *s) {
    return ds4_buf_append(b, s, strlen(s));
}

int ds4_buf_printf(ds4_buf *b, const char *fmt, ...) {
    if (b->err) return b->err;
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return b->err = DS4_EINVAL;
    if ((size_t)k < sizeof tmp) return ds4_buf_append(b, tmp, (size_t)k);
    if (buf_reserve(b, b->n + (size_t)k)) return b->err;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
    return DS4_OK;
}

int ds4_buf_failed(const ds4_buf *b) { return b->err; }

void ds4_buf_clear(ds4_buf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
    b->err = 0;
}

void ds4_buf_free(ds4_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->err = 0;
}
