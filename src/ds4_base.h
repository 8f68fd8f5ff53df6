/*
 * ds4_base.h -- the ground every other public header stands on: the version, the
 * status codes (DS4_E*, ds4_strerror), the error-message helpers, the
 * growable byte and token buffers (ds4_buf, ds4_tokens) and the printable
 * form of untrusted strings (ds4_escape).  Implemented in src/base/.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_BASE_H
#define DS4_API_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The release number; ds4_version() is what binaries print (--version):
 * this number plus the `git describe` of the build when it has one. */
#define DS4_VERSION "0.1.0"
const char *ds4_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

enum {
    DS4_OK = 0,
    DS4_EINVAL = -1,     /* bad argument / malformed input */
    DS4_ENOMEM = -2,     /* allocation failed */
    DS4_EIO = -3,        /* file or system error */
    DS4_EFORMAT = -4,    /* malformed GGUF / snapshot / wrong model family */
    DS4_ECTX = -5,       /* the context is full: nothing was evaluated */
    DS4_ECANCEL = -6,    /* a progress/cancel callback asked to stop */
    DS4_EUNSUP = -7,     /* valid but unsupported (e.g. a tensor type) */
};

const char *ds4_strerror(int code);

/* ------------------------------------------------------------------------ */
/* Growable buffers used across the API (no per-token allocation: callers    */
/* reuse them; `n` is reset by the caller, functions append).                */
/* ------------------------------------------------------------------------ */

/* Failures are sticky: the first append/reserve that cannot grow a buffer
 * (out of memory, or a size overflow) records its code in `err`, and from
 * then on every append/reserve on that buffer does nothing and returns the
 * same code.  So a builder may append many pieces and check once at the end
 * with ds4_buf_failed / ds4_tokens_failed: the contents are then a prefix
 * of what was asked and must not be used.  Library functions that take a
 * failed buffer fail too.  Resetting `n` keeps the error; ds4_*_free (or
 * ds4_buf_clear) clears it.  Zero-initialise a buffer before first use. */
typedef struct {
    int32_t *v;
    size_t n, cap;
    int err;           /* 0, or the DS4_E* code of the first failure (sticky) */
} ds4_tokens;

typedef struct {
    char *p;           /* always NUL-terminated when cap > 0 */
    size_t n, cap;
    int err;           /* 0, or the DS4_E* code of the first failure (sticky) */
} ds4_buf;

int  ds4_tokens_push(ds4_tokens *t, int32_t id);
int  ds4_tokens_reserve(ds4_tokens *t, size_t cap);
/* Append n ids. */
int  ds4_tokens_append(ds4_tokens *t, const int32_t *ids, size_t n);
/* 0, or the code of the first failed push/reserve since the last free. */
int  ds4_tokens_failed(const ds4_tokens *t);
void ds4_tokens_free(ds4_tokens *t);
int  ds4_buf_append(ds4_buf *b, const void *data, size_t len);
/* Make room for `extra` more bytes beyond n (contents undefined). */
int  ds4_buf_reserve(ds4_buf *b, size_t extra);
int  ds4_buf_puts(ds4_buf *b, const char *s);
int  ds4_buf_printf(ds4_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* 0, or the code of the first failed append/reserve since the last
 * free/clear. */
int  ds4_buf_failed(const ds4_buf *b);
/* Empty the buffer (memory kept) and forget a failure. */
void ds4_buf_clear(ds4_buf *b);
void ds4_buf_free(ds4_buf *b);
/* Appends the whole file at `path` (binary; b->p is then never NULL and,
 * like every append, NUL-terminated).  0, or -1 with errno set (fopen's,
 * EIO for a read error, ENOMEM) and the length as before. */
int  ds4_buf_read_file(ds4_buf *b, const char *path);

/* Seconds on the monotonic clock (src/base/clock.c): for durations only. */
double ds4_now(void);

/* The one way the library (and the front ends) report an error message:
 * stores a malloc'd message formatted like printf in *err (when err is not
 * NULL), freeing one already there, and returns `code`, so that a failure
 * path reads `return ds4_set_err(err, DS4_EINVAL, "bad %s", what);`.  If the
 * message itself cannot be allocated *err is left NULL (callers print
 * ds4_strerror(code) then). */
int ds4_set_err(char **err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ds4_set_errv(char **err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Printable form of untrusted bytes (GGUF keys, names and strings, text from
 * a disk KV file) for a terminal or a log line: valid UTF-8 is kept, control
 * characters (C0, DEL, C1), line separators, bidi controls and invalid bytes
 * become escapes (\n, \t, \xNN, \u{XXXX}; backslash and double quote are
 * escaped too).  ds4_escape writes at most cap bytes, NUL included, ending
 * in "..." when the input did not fit, and returns buf (usable as a printf
 * argument).  ds4_fput_escaped writes the form of at most max_in input bytes
 * (never cutting a character) and returns the input bytes written. */
const char *ds4_escape(char *buf, size_t cap, const char *s, size_t n);
size_t ds4_fput_escaped(FILE *out, const char *s, size_t n, size_t max_in);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_BASE_H */
