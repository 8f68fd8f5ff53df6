/*
 * http1.c -- the sockets of ds4-server's HTTP/1.1 layer (http1.h): an
 * accept thread, one thread per connection, the connection limits, the
 * deadlines, request bodies (Content-Length or chunked), keep-alive and
 * the answers (complete bodies, or chunked streams for SSE).
 *
 * Owns: every byte read from and written to a client socket.  The syntax
 * is http1_parse.c's; what a request means is the handler's (http.c).
 * Must not: know routes, APIs, jobs.
 *
 * A request that this layer refuses (malformed, framing, limits) is
 * answered through on_reject and the connection is closed after the
 * answer: the bytes after a refused request are never read as another
 * request.  A close after an answer is "graceful": the write side is shut
 * first and what the client still sends is read and dropped for up to a
 * second, so that the client reads the answer instead of a reset.
 *
 * Deadlines (no reaper thread: each connection thread polls with its own):
 * a new connection's first request head is due within header_timeout_s of
 * the accept, a kept-alive one's next head within idle_timeout_s of the
 * previous answer, however slowly its bytes trickle in; a body must keep
 * arriving (idle_timeout_s of silence at most) and be complete within
 * request_timeout_s of its head; a write that cannot progress for
 * idle_timeout_s fails.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"
#include "http1.h"

/* A body larger than the limit is still read (and dropped) up to this much
 * so that the client, still sending, sees the 413; past it the connection
 * is cut. */
#define DRAIN_MAX (64u << 20)

struct http1_server {
    http1_config cfg;
    int lfd;
    int wake[2];                  /* wakes the accept thread */
    pthread_t acceptor;
    int acceptor_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* a connection ended */
    http1_conn *conns;
    int n_conns;
    int stopping;
};

enum { PH_NONE, PH_HEAD, PH_BODY };

struct http1_conn {
    http1_server *s;
    http1_conn *prev, *next;
    int fd;
    struct sockaddr_storage sa;
    char peer[64];
    /* bytes received and not consumed */
    char *in;
    size_t in_n, in_cap;
    /* the current request */
    char *headbuf;                /* the head (parsed in place) + the decoded path */
    http1_field *fields;
    http1_head h;
    int have_head;                /* h parsed without error */
    int phase;
    ds4_buf body;
    int too_big;
    double arrived;
    void *user;
    int answered, streaming, head_only, must_close, dead;
};

/* ------------------------------------------------------------------------ */
/* reading                                                                   */
/* ------------------------------------------------------------------------ */

static void consume(http1_conn *c, size_t n) {
    memmove(c->in, c->in + n, c->in_n - n);
    c->in_n -= n;
}

/* Room for more input, the buffer at most `limit` bytes. */
static int make_room(http1_conn *c, size_t limit) {
    if (c->in_n < c->in_cap) return 0;
    size_t cap = c->in_cap ? c->in_cap * 2 : 16384;
    if (cap > limit) cap = limit;
    if (cap <= c->in_cap) return -1;
    char *p = realloc(c->in, cap);
    if (!p) return -1;
    c->in = p;
    c->in_cap = cap;
    return 0;
}

/* Read what arrives before `deadline` (monotonic seconds).  >0: bytes
 * read; 0: the peer closed; -1: the deadline passed; -2: error. */
static long fill(http1_conn *c, double deadline) {
    for (;;) {
        double left = deadline - ds4_now();
        if (left <= 0) return -1;
        struct pollfd p = { c->fd, POLLIN, 0 };
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR) return -2;
        if (r <= 0) continue;
        ssize_t k = recv(c->fd, c->in + c->in_n, c->in_cap - c->in_n, 0);
        if (k > 0) {
            c->in_n += (size_t)k;
            return (long)k;
        }
        if (k == 0) return 0;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -2;
    }
}

/* Wait for one request head at the start of c->in.  >0: its length; 0:
 * the client closed before sending a byte of it; -1: the deadline passed
 * (*partial: some of it had come); -2: error or a close inside the head;
 * -3: refused with *status, the reason in why. */
static long read_head(http1_conn *c, double deadline, int *partial, int *status, char *why,
                      size_t cap) {
    size_t limit = c->s->cfg.max_header_bytes;
    size_t pos = 0;
    *partial = 0;
    for (;;) {
        /* empty lines before a request line are allowed (RFC 9112 2.2);
         * they count as received bytes but not toward the head */
        while (c->in_n >= 2 && c->in[0] == '\r' && c->in[1] == '\n') {
            consume(c, 2);
            pos = 0;
        }
        if (c->in_n) {
            *partial = 1;
            long e = http1_head_end(c->in, c->in_n, &pos);
            if (e < 0) {
                snprintf(why, cap, "a line of the request head ends in a bare LF (CRLF is required)");
                *status = 400;
                return -3;
            }
            if ((e > 0 && (size_t)e > limit) || (e == 0 && c->in_n >= limit)) {
                if (memchr(c->in, '\n', c->in_n < limit ? c->in_n : limit)) {
                    snprintf(why, cap, "the request head exceeds the limit of %zu bytes "
                             "(--max-header-bytes)", limit);
                    *status = 431;
                    return -3;
                }
                snprintf(why, cap, "the request line exceeds the limit of %zu bytes "
                         "(--max-header-bytes)", limit);
                *status = 414;
                return -3;
            }
            if (e > 0) return e;
        }
        if (make_room(c, limit + 1)) return -2;
        long r = fill(c, deadline);
        if (r == 0) return c->in_n ? -2 : 0;
        if (r < 0) return r;
    }
}

/* The body of the current request into c->body (or dropped when too big).
 * 0 done; -1 cut off (timeout, the client went away); or a status >= 400
 * with the reason in why. */
static int read_body(http1_conn *c, char *why, size_t cap) {
    const http1_config *cfg = &c->s->cfg;
    double end = c->arrived + cfg->request_timeout_s;
    if (c->h.chunked) {
        http1_chunked d;
        memset(&d, 0, sizeof d);
        for (;;) {
            if (c->in_n) {
                size_t used = 0, out = 0;
                int st = http1_chunked_feed(&d, c->in, c->in_n, cfg->max_body_bytes, &used, &out,
                                            why, cap);
                if (out && ds4_buf_append(&c->body, c->in, out)) {
                    snprintf(why, cap, "out of memory for the request body");
                    return 500;
                }
                consume(c, used);
                if (st == 413) {
                    /* no drain: a chunked body announces no total, and the
                     * chunk that passes the limit may be of any size */
                    c->too_big = 1;
                    c->must_close = 1;
                    ds4_buf_free(&c->body);
                    return 0;
                }
                if (st) return st;
                if (http1_chunked_done(&d)) return 0;
            }
            if (make_room(c, 1u << 20)) return -1;
            double dl = ds4_now() + cfg->idle_timeout_s;
            long r = fill(c, dl < end ? dl : end);
            if (r == -1) {
                snprintf(why, cap, "request body not received within %d s",
                         ds4_now() >= end ? cfg->request_timeout_s : cfg->idle_timeout_s);
                return 408;
            }
            if (r <= 0) return -1;
        }
    }
    if (!c->h.has_length || c->h.length == 0) return 0;
    uint64_t left = c->h.length;
    if (left > cfg->max_body_bytes) {
        c->too_big = 1;
        if (left > cfg->max_body_bytes + (uint64_t)DRAIN_MAX || c->h.expect_continue) {
            /* not worth reading (or not sent until we say 100 Continue):
             * answered at once, then closed */
            c->must_close = 1;
            return 0;
        }
    } else if (ds4_buf_reserve(&c->body, (size_t)left)) {
        snprintf(why, cap, "out of memory for the request body");
        return 500;
    }
    for (;;) {
        size_t k = c->in_n < left ? c->in_n : (size_t)left;
        if (k && !c->too_big) ds4_buf_append(&c->body, c->in, k);
        consume(c, k);
        left -= k;
        if (!left) return 0;
        if (make_room(c, 1u << 20)) return -1;
        double dl = ds4_now() + cfg->idle_timeout_s;
        long r = fill(c, dl < end ? dl : end);
        if (r == -1) {
            snprintf(why, cap, "request body not received within %d s",
                     ds4_now() >= end ? cfg->request_timeout_s : cfg->idle_timeout_s);
            return 408;
        }
        if (r <= 0) return -1;
    }
}

/* ------------------------------------------------------------------------ */
/* writing                                                                   */
/* ------------------------------------------------------------------------ */

static int send_all(http1_conn *c, const char *p, size_t n) {
    if (c->dead) return -1;
    while (n) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = { c->fd, POLLOUT, 0 };
            int r = poll(&pf, 1, c->s->cfg.idle_timeout_s * 1000);
            if (r > 0 || (r < 0 && errno == EINTR)) continue;
        }
        c->dead = 1;
        return -1;
    }
    return 0;
}

static const char *reason_phrase(int st) {
    switch (st) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    case 529: return "Overloaded";
    default: return st < 300 ? "OK" : st < 500 ? "Client Error" : "Server Error";
    }
}

/* RFC 9110 5.6.7 IMF-fixdate, without the locale's names. */
static void http_date(char *out, size_t cap) {
    static const char *const wd[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const mo[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug",
                                      "Sep", "Oct", "Nov", "Dec" };
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    snprintf(out, cap, "%s, %02d %s %04d %02d:%02d:%02d GMT", wd[tm.tm_wday % 7], tm.tm_mday,
             mo[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* The status line and fields; len < 0: a stream. */
static void put_head(http1_conn *c, ds4_buf *b, int status, const char *ctype, const char *hdrs,
                     long long len) {
    /* an answer given before the announced body was read: the unread body
     * must not be taken for the next request */
    if (c->phase == PH_HEAD && (c->h.chunked || (c->h.has_length && c->h.length > 0)))
        c->must_close = 1;
    if (len < 0 && c->h.minor == 0) c->must_close = 1;   /* close-delimited */
    char date[64];
    http_date(date, sizeof date);
    ds4_buf_printf(b, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, reason_phrase(status), date);
    if (ctype) ds4_buf_printf(b, "Content-Type: %s\r\n", ctype);
    if (hdrs) ds4_buf_puts(b, hdrs);
    if (len >= 0) {
        if (status != 204 && status != 304) ds4_buf_printf(b, "Content-Length: %lld\r\n", len);
    } else if (c->h.minor == 1) {
        ds4_buf_puts(b, "Transfer-Encoding: chunked\r\n");
    }
    if (c->must_close) ds4_buf_puts(b, "Connection: close\r\n");
    ds4_buf_puts(b, "\r\n");
}

int http1_respond(http1_conn *c, int status, const char *ctype, const char *hdrs, const char *body,
                  size_t n) {
    if (c->answered) return -1;
    c->answered = 1;
    ds4_buf b = { 0 };
    put_head(c, &b, status, ctype, hdrs, status == 204 || status == 304 ? 0 : (long long)n);
    if (!c->head_only && status != 204 && status != 304) ds4_buf_append(&b, body, n);
    int r = ds4_buf_failed(&b) ? -1 : send_all(c, b.p, b.n);
    if (ds4_buf_failed(&b)) c->dead = 1;
    ds4_buf_free(&b);
    return r;
}

int http1_stream_begin(http1_conn *c, int status, const char *ctype, const char *hdrs) {
    if (c->answered) return -1;
    c->answered = 1;
    c->streaming = 1;
    ds4_buf b = { 0 };
    put_head(c, &b, status, ctype, hdrs, -1);
    int r = ds4_buf_failed(&b) ? -1 : send_all(c, b.p, b.n);
    if (ds4_buf_failed(&b)) c->dead = 1;
    ds4_buf_free(&b);
    return r;
}

int http1_stream_write(http1_conn *c, const char *p, size_t n) {
    if (!c->streaming || c->dead) return -1;
    if (c->head_only || n == 0) return 0;
    if (c->h.minor == 0) return send_all(c, p, n);
    char sz[32];
    int k = snprintf(sz, sizeof sz, "%zx\r\n", n);
    if (send_all(c, sz, (size_t)k) || send_all(c, p, n) || send_all(c, "\r\n", 2)) return -1;
    return 0;
}

int http1_stream_end(http1_conn *c) {
    if (!c->streaming || c->dead) return -1;
    c->streaming = 0;
    if (c->head_only || c->h.minor == 0) return 0;
    return send_all(c, "0\r\n\r\n", 5);
}

int http1_answered(const http1_conn *c) { return c->answered; }

/* ------------------------------------------------------------------------ */
/* accessors                                                                 */
/* ------------------------------------------------------------------------ */

const char *http1_method(const http1_conn *c) { return c->headbuf ? c->h.method : NULL; }
const char *http1_path(const http1_conn *c) { return c->headbuf ? c->h.path : NULL; }
const char *http1_target(const http1_conn *c) { return c->headbuf ? c->h.target : NULL; }
const char *http1_header(const http1_conn *c, const char *name) {
    return c->have_head ? http1_field_get(&c->h, name) : NULL;
}
const http1_head *http1_request_head(const http1_conn *c) { return c->have_head ? &c->h : NULL; }
const char *http1_peer(const http1_conn *c) { return c->peer; }
int http1_fd(const http1_conn *c) { return c->fd; }
const char *http1_body(const http1_conn *c, size_t *n) {
    *n = c->body.n;
    return c->body.p ? c->body.p : "";
}
int http1_too_big(const http1_conn *c) { return c->too_big; }
double http1_arrived(const http1_conn *c) { return c->arrived; }
void *http1_user(const http1_conn *c) { return c->user; }
void http1_set_user(http1_conn *c, void *p) { c->user = p; }
void http1_set_close(http1_conn *c) { c->must_close = 1; }

/* ------------------------------------------------------------------------ */
/* one connection                                                            */
/* ------------------------------------------------------------------------ */

static void end_request(http1_conn *c) {
    free(c->headbuf);
    free(c->fields);
    c->headbuf = NULL;
    c->fields = NULL;
    memset(&c->h, 0, sizeof c->h);
    c->have_head = 0;
    c->phase = PH_NONE;
    ds4_buf_free(&c->body);
    c->too_big = 0;
    c->user = NULL;
    c->answered = c->streaming = c->head_only = 0;
}

/* This layer refuses the request: the handler answers (a plain text
 * answer if it does not), and the connection closes after. */
static void reject(http1_conn *c, int status, const char *why) {
    c->must_close = 1;
    if (!c->answered && c->s->cfg.on_reject) c->s->cfg.on_reject(c->s->cfg.cls, c, status, why);
    if (!c->answered) {
        char b[600];
        int n = snprintf(b, sizeof b, "%s\n", why);
        http1_respond(c, status, "text/plain; charset=utf-8", NULL, b, (size_t)n);
    }
}

/* Take the head c->in[0..len) out of the input and parse it. */
static int take_head(http1_conn *c, size_t len, char *why, size_t cap) {
    int lines = 1;
    for (size_t i = 0; i < len; i++) lines += c->in[i] == '\n';
    c->headbuf = malloc(2 * len + 2);
    c->fields = malloc((size_t)lines * sizeof *c->fields);
    if (!c->headbuf || !c->fields) {
        snprintf(why, cap, "out of memory for the request head");
        return 500;
    }
    memcpy(c->headbuf, c->in, len);
    consume(c, len);
    int st = http1_parse_head(c->headbuf, len, c->headbuf + len + 1, &c->h, c->fields, lines, why, cap);
    if (st) return st;
    c->have_head = 1;
    c->head_only = !strcmp(c->h.method, "HEAD");
    c->must_close = c->h.close;
    return 0;
}

static void close_conn(http1_conn *c) {
    http1_server *s = c->s;
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (!c->dead && !stopping) {
        /* graceful: our answer first, then a short read of what the client
         * still sends (a close with unread input would reset the
         * connection and could destroy the answer in flight) */
        shutdown(c->fd, SHUT_WR);
        double end = ds4_now() + 1.0;
        size_t got = 0;
        char tmp[16384];
        while (got < (1u << 20)) {
            double left = end - ds4_now();
            if (left <= 0) break;
            struct pollfd p = { c->fd, POLLIN, 0 };
            int r = poll(&p, 1, (int)(left * 1000) + 1);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            ssize_t k = recv(c->fd, tmp, sizeof tmp, 0);
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (k <= 0) break;
            got += (size_t)k;
        }
    }
    /* unlinked under the lock before the close: http1_stop can no longer
     * shut down a reused descriptor */
    pthread_mutex_lock(&s->mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    close(c->fd);
    s->n_conns--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    end_request(c);
    free(c->in);
    free(c);
}

static void *conn_main(void *arg) {
    http1_conn *c = arg;
    http1_server *s = c->s;
    const http1_config *cfg = &s->cfg;
    double deadline = ds4_now() + cfg->header_timeout_s;
    int first = 1;
    char why[600];
    for (;;) {
        int partial = 0, st = 0;
        why[0] = 0;
        long r = read_head(c, deadline, &partial, &st, why, sizeof why);
        if (r == 0 || r == -2) break;
        if (r == -1) {
            if (partial || first) {
                if (cfg->on_header_timeout) cfg->on_header_timeout(cfg->cls);
            }
            if (partial) {
                snprintf(why, sizeof why, "request head not received within %d s",
                         first ? cfg->header_timeout_s : cfg->idle_timeout_s);
                reject(c, 408, why);
            }
            break;
        }
        if (r == -3) {
            reject(c, st, why);
            break;
        }
        st = take_head(c, (size_t)r, why, sizeof why);
        if (st) {
            reject(c, st, why);
            break;
        }
        c->arrived = ds4_now();
        c->phase = PH_HEAD;
        cfg->on_head(cfg->cls, c);
        if (!c->answered && !c->dead) {
            if (c->h.expect_continue && (c->h.chunked || c->h.length > 0) &&
                !(c->h.has_length && c->h.length > cfg->max_body_bytes)) {
                static const char CONT[] = "HTTP/1.1 100 Continue\r\n\r\n";
                send_all(c, CONT, sizeof CONT - 1);
            }
            c->phase = PH_BODY;
            st = read_body(c, why, sizeof why);
            if (st >= 400) reject(c, st, why);
            else if (st < 0) c->dead = 1;
            else if (!c->dead) cfg->on_request(cfg->cls, c);
        }
        if (cfg->on_complete) cfg->on_complete(cfg->cls, c);
        /* a handler that gave no answer: the connection cannot go on */
        if (!c->answered || c->dead || c->must_close) break;
        end_request(c);
        first = 0;
        deadline = ds4_now() + cfg->idle_timeout_s;
    }
    close_conn(c);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* accepting                                                                 */
/* ------------------------------------------------------------------------ */

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    return 0;
}

static void peer_name(const struct sockaddr_storage *sa, char *out, size_t cap) {
    char a[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *v = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &v->sin_addr, a, sizeof a);
        snprintf(out, cap, "%s:%d", a, ntohs(v->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &v->sin6_addr, a, sizeof a);
        snprintf(out, cap, "[%s]:%d", a, ntohs(v->sin6_port));
    } else {
        snprintf(out, cap, "?");
    }
}

static void *accept_main(void *arg) {
    http1_server *s = arg;
    for (;;) {
        struct pollfd p[2] = { { s->lfd, POLLIN, 0 }, { s->wake[0], POLLIN, 0 } };
        int r = poll(p, 2, -1);
        if (r < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) {
            if (p[0].revents & (POLLERR | POLLNVAL)) break;
            continue;
        }
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(s->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            /* out of descriptors or memory: wait a little instead of spinning */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                struct timespec ts = { 0, 100 * 1000000L };
                nanosleep(&ts, NULL);
            }
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char peer[64];
        peer_name(&sa, peer, sizeof peer);
        pthread_mutex_lock(&s->mu);
        const char *refuse = NULL;
        if (s->n_conns >= s->cfg.max_connections) {
            refuse = "--max-connections";
        } else if (s->cfg.max_per_ip > 0) {
            int same = 0;
            for (http1_conn *x = s->conns; x; x = x->next) same += same_addr(&x->sa, &sa);
            if (same >= s->cfg.max_per_ip) refuse = "--max-connections-per-ip";
        }
        http1_conn *c = refuse ? NULL : calloc(1, sizeof *c);
        if (c) {
            c->s = s;
            c->fd = fd;
            c->sa = sa;
            snprintf(c->peer, sizeof c->peer, "%s", peer);
            c->next = s->conns;
            if (s->conns) s->conns->prev = c;
            s->conns = c;
            s->n_conns++;
            pthread_attr_t at;
            pthread_t t;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, conn_main, c)) {
                s->conns = c->next;
                if (c->next) c->next->prev = NULL;
                s->n_conns--;
                free(c);
                c = NULL;
                refuse = "no thread";
            }
            pthread_attr_destroy(&at);
        }
        pthread_mutex_unlock(&s->mu);
        if (!c) {
            /* refused at once: no request was read */
            close(fd);
            if (s->cfg.on_refused_connection)
                s->cfg.on_refused_connection(s->cfg.cls, peer, refuse ? refuse : "out of memory");
        }
    }
    return NULL;
}

http1_server *http1_start(const http1_config *cfg, int listen_fd, char **err) {
    http1_server *s = calloc(1, sizeof *s);
    if (s && pipe2(s->wake, O_CLOEXEC)) {
        free(s);
        s = NULL;
    }
    if (!s) {
        close(listen_fd);
        if (err) *err = strdup("out of memory (or descriptors) starting the HTTP server");
        return NULL;
    }
    s->cfg = *cfg;
    s->lfd = listen_fd;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->acceptor, NULL, accept_main, s)) {
        if (err) *err = strdup("cannot start a thread");
        s->acceptor_on = 0;
        http1_stop(s);
        return NULL;
    }
    s->acceptor_on = 1;
    return s;
}

void http1_quiesce(http1_server *s) {
    if (!s || s->lfd < 0) return;
    if (s->acceptor_on) {
        ssize_t k = write(s->wake[1], "x", 1);
        (void)k;
        pthread_join(s->acceptor, NULL);
        s->acceptor_on = 0;
    }
    close(s->lfd);
    s->lfd = -1;
}

void http1_stop(http1_server *s) {
    if (!s) return;
    http1_quiesce(s);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    /* wakes every connection thread (its reads and polls end) */
    for (http1_conn *c = s->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    while (s->n_conns > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
