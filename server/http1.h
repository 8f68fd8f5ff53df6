/*
 * http1.h -- ds4-server's HTTP/1.1 connection layer (RFC 9112): the strict
 * request parser (http1_parse.c, no I/O) and the sockets (http1.c: accept,
 * one thread per connection, limits, deadlines, keep-alive, responses).
 *
 * It knows nothing of the APIs: http.c routes and answers through the
 * callbacks below.  Why our own and not libmicrohttpd: NOTES.md
 * "ds4-server: our own HTTP/1.1 reader".
 */
#ifndef DS4_SERVER_HTTP1_H
#define DS4_SERVER_HTTP1_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* The request head (http1_parse.c)                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *name, *value;     /* NUL-terminated; value without OWS */
} http1_field;

typedef struct {
    const char *method;
    const char *target;           /* the request-target as sent */
    const char *path;             /* its path: %XX decoded, no query */
    const char *authority;        /* an absolute-form target's authority, else NULL */
    int minor;                    /* HTTP/1.minor (0 or 1) */
    http1_field *fields;
    int n_fields;
    /* framing, decided from the fields */
    int chunked;                  /* Transfer-Encoding: chunked */
    int has_length;               /* Content-Length present */
    uint64_t length;
    int close;                    /* no keep-alive after this request */
    int expect_continue;          /* Expect: 100-continue */
} http1_head;

/* The length of the request head at the start of buf[0..n) (through the
 * CRLF of its empty line) once it is all there; 0 while more bytes are
 * needed; -1 on a bare LF (every line must end in CRLF).  *pos is where the
 * scan resumes (0 the first time): each byte is looked at once. */
long http1_head_end(const char *buf, size_t n, size_t *pos);

/* Parse a complete head (buf[0..n), as found by http1_head_end) in place:
 * the strings of *h point into buf, which gets NULs; `path` (n + 1 bytes)
 * receives the decoded path; `fields` has room for `cap` fields (one per
 * line is enough).  0, or the status to refuse the request with (400, 413,
 * 414, 431, 501, 505) and the reason in why[0..whycap). */
int http1_parse_head(char *buf, size_t n, char *path, http1_head *h, http1_field *fields,
                     int cap, char *why, size_t whycap);

/* The first value of a field (names are case-insensitive), or NULL. */
const char *http1_field_get(const http1_head *h, const char *name);

/* The chunked body decoder (RFC 9112 7.1): chunk sizes, extensions, data
 * and trailer fields are checked as strictly as the head. */
typedef struct {
    int state;
    uint64_t left;                /* data bytes left in the current chunk */
    uint64_t total;               /* data bytes so far */
    size_t line;                  /* bytes of the current size or trailer line */
    size_t trailer;               /* bytes of the trailer section */
    int digits;                   /* significant hex digits of the size */
    int any;                      /* a digit of the size was seen */
} http1_chunked;

/* Decode buf[0..n) in place: the data bytes are moved to buf[0..*out).
 * *used: the bytes consumed (less than n once the body is complete: the
 * rest belongs to the next request).  Returns 0 (then
 * http1_chunked_done() says whether the body is complete), or 400 with
 * the reason, or 413 when the data would pass max_body. */
int http1_chunked_feed(http1_chunked *d, char *buf, size_t n, uint64_t max_body, size_t *used,
                       size_t *out, char *why, size_t whycap);
int http1_chunked_done(const http1_chunked *d);

/* ------------------------------------------------------------------------ */
/* The server (http1.c)                                                      */
/* ------------------------------------------------------------------------ */

typedef struct http1_server http1_server;
typedef struct http1_conn http1_conn;

typedef struct {
    size_t max_header_bytes;      /* request line + fields (431 past it) */
    size_t max_body_bytes;        /* larger bodies: on_request with too_big */
    int max_connections;
    int max_per_ip;               /* 0 = no cap */
    int header_timeout_s;         /* the first request's head, from accept */
    int idle_timeout_s;           /* the next head after an answer; any silence */
    int request_timeout_s;        /* receiving one request */

    void *cls;
    /* The head is in and valid; the body is not read yet.  The handler may
     * answer at once (then the body is not read, and the connection closes
     * if one was announced), or return to have the body read. */
    void (*on_head)(void *cls, http1_conn *c);
    /* The body is in (or it was too large: http1_too_big()): answer. */
    void (*on_request)(void *cls, http1_conn *c);
    /* This layer refuses the request (malformed, framing, limits): answer
     * it with `status` (the connection is closed after); `reason` is what
     * is wrong.  The head may be partial (http1_method() etc. NULL). */
    void (*on_reject)(void *cls, http1_conn *c, int status, const char *reason);
    /* After each request that reached on_head (answered or not). */
    void (*on_complete)(void *cls, http1_conn *c);
    /* A connection missed its head's deadline. */
    void (*on_header_timeout)(void *cls);
    /* A connection was closed at once, unread: `why` names the limit. */
    void (*on_refused_connection)(void *cls, const char *peer, const char *why);
} http1_config;

/* Serve on a bound, listening socket (taken over; closed on failure). */
http1_server *http1_start(const http1_config *cfg, int listen_fd, char **err);
/* Stop accepting connections (the listening socket is closed). */
void http1_quiesce(http1_server *s);
/* Shut every connection down, wait for their threads, free. */
void http1_stop(http1_server *s);

/* The request being handled (valid from on_head to on_complete). */
const char *http1_method(const http1_conn *c);      /* NULL if the head did not parse */
const char *http1_path(const http1_conn *c);
const char *http1_target(const http1_conn *c);
const char *http1_header(const http1_conn *c, const char *name);
const http1_head *http1_request_head(const http1_conn *c);
const char *http1_peer(const http1_conn *c);        /* "1.2.3.4:5678", "[::1]:5678" */
int http1_fd(const http1_conn *c);
const char *http1_body(const http1_conn *c, size_t *n);
int http1_too_big(const http1_conn *c);
double http1_arrived(const http1_conn *c);          /* util_now() when the head was in */
/* The handler's per-request pointer (NULL at on_head). */
void *http1_user(const http1_conn *c);
void http1_set_user(http1_conn *c, void *p);
/* Close the connection after this answer. */
void http1_set_close(http1_conn *c);

/* Answer with a complete body.  hdrs: extra "Name: value\r\n" lines or
 * NULL.  A HEAD request gets the head only.  0, or -1 when the client is
 * gone (the connection then closes). */
int http1_respond(http1_conn *c, int status, const char *ctype, const char *hdrs,
                  const char *body, size_t n);
/* A body of unknown length, written as it comes (chunked; close-delimited
 * for an HTTP/1.0 client). */
int http1_stream_begin(http1_conn *c, int status, const char *ctype, const char *hdrs);
int http1_stream_write(http1_conn *c, const char *p, size_t n);
int http1_stream_end(http1_conn *c);
/* 1 once an answer (or its head) has been sent for this request. */
int http1_answered(const http1_conn *c);

#endif
