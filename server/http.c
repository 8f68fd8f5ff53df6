/*
 * http.c -- libmicrohttpd glue: routing, request limits, auth, CORS, the
 * JSON endpoints that need no model (models, health, metrics), queueing of
 * generation jobs, waiting for them, and SSE delivery.
 *
 * Owns: connection threads (MHD thread-per-connection mode).  A connection
 * thread reads the body, parses and converts it (conv.c), renders and
 * tokenizes the prompt, queues a job (worker.c) and then either blocks
 * until the job is done (non-streaming) or returns a callback response
 * whose reader blocks until the worker has produced more SSE bytes.
 * Must not: touch the session.
 *
 * Disconnects: while a connection thread waits (in the handler or in the
 * stream reader) it polls its socket every 100 ms; a peer that closed it
 * (EOF / RDHUP / error) cancels the job, which the worker sees between
 * prefill chunks and before each token.  A failed write does the same
 * through the response's free callback.
 *
 * Limits: bodies over --max-body-bytes get 413 (read and discarded up to
 * 64 MiB beyond the limit so the client sees the answer, larger ones are cut
 * off); headers must fit --max-header-bytes (libmicrohttpd answers 431 on
 * its own); idle keep-alive connections close after --idle-timeout; a
 * request still being received after --request-timeout is cut off.
 *
 * Slow clients: every connection costs a thread, and --max-connections of
 * them fill the server.  libmicrohttpd's timeout only counts silence, so a
 * client that sends one header byte every few seconds would hold its thread
 * for ever.  Hence a deadline (the reaper thread below): a new connection
 * must deliver its request line and headers within --header-timeout, a
 * kept-alive one its next request's within --idle-timeout of the previous
 * answer; past it the socket is shut down, which wakes the connection
 * thread and closes it.  --max-connections-per-ip keeps one address from
 * taking every slot (libmicrohttpd refuses its excess connections).
 *
 * Browsers: a keyless server on loopback trusts whoever can reach it, and a
 * web page can reach it (a cross-site "simple" POST, or DNS rebinding, where
 * the attacker's name resolves to 127.0.0.1 and the page then reads the
 * answers as same-origin).  So such a server answers only requests whose
 * Host names the loopback address (or an --allow-host name) with its port,
 * and whose Origin, when sent, is one of those too (any Origin with --cors);
 * and a POST body must be declared JSON, a type no page can send across
 * sites without a CORS preflight, which is refused without --cors.
 *
 * The listening socket is bound here, without SO_REUSEPORT: a second server
 * on a port in use must fail, not share the port (the kernel would split the
 * clients between two sessions).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <microhttpd.h>

#include "http.h"
#include "conv.h"
#include "text/json_py.h"
#include "metrics.h"
#include "worker.h"

#define DRAIN_MAX (64u << 20)

/* A connection, for the header deadline (from accept to close). */
typedef struct conn_track {
    struct conn_track *prev, *next;
    int fd;               /* valid until the CLOSED notification returns */
    int busy;             /* a request is being handled: no deadline */
    int shut;             /* the reaper has shut it down */
    double deadline;      /* the next request's headers must be in by then */
} conn_track;

struct http_server {
    server_ctx *srv;
    struct MHD_Daemon *d;
    atomic_int inflight;     /* requests between their first call and completion */
    int port;                /* bound port */
    int guard;               /* keyless on loopback: Host/Origin are checked */
    /* the header deadline */
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    conn_track *conns;
    pthread_t reaper;
    int reaper_on, stopping;
};

typedef struct {
    endpoint ep;
    int anthropic;        /* error shape */
    int allowed_post;     /* the endpoint's method */
    ds4_buf body;
    http_server *h;
    int too_big;
    size_t drained;       /* bytes discarded after too_big */
    double t0;
    char path[1024];      /* the URL (a longer one is cut: model ids past 256 bytes are refused anyway) */
} req_ctx;

typedef struct {
    http_server *h;
    job *j;
    struct MHD_Connection *c;
    double last;
} stream_ctx;

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

static void add_cors(http_server *h, struct MHD_Response *r) {
    if (!h->srv->cfg.cors) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "*");
}

static enum MHD_Result send_buf(http_server *h, struct MHD_Connection *c, req_ctx *rc, int status,
                                const char *ctype, const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    add_cors(h, r);
    if (status == 405) MHD_add_response_header(r, "Allow", rc->allowed_post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    if (status == 401 && !rc->anthropic) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    metrics_request(h->srv->m, rc->ep, status);
    return ret;
}

static enum MHD_Result send_json(http_server *h, struct MHD_Connection *c, req_ctx *rc, int status,
                                 json_t *v) {
    char *s = jdump(v);
    json_decref(v);
    enum MHD_Result r = send_buf(h, c, rc, status, "application/json", s, strlen(s));
    free(s);
    return r;
}

static enum MHD_Result send_error(http_server *h, struct MHD_Connection *c, req_ctx *rc,
                                  const api_error *e) {
    char *s = api_error_body(rc->anthropic, e);
    enum MHD_Result r = send_buf(h, c, rc, e->status, "application/json", s, strlen(s));
    free(s);
    return r;
}

static enum MHD_Result send_err(http_server *h, struct MHD_Connection *c, req_ctx *rc, int status,
                                const char *type, const char *code, const char *param,
                                const char *msg) {
    api_error e;
    api_err_set(&e, status, type, code, param, "%s", msg);
    return send_error(h, c, rc, &e);
}

/* 1 when the peer has closed its side or the socket failed. */
static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = { ci->connect_fd, POLLIN | POLLRDHUP, 0 };
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char b;
        ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return 0;
}

static void wait_100ms(job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* ------------------------------------------------------------------------ */
/* routing                                                                   */
/* ------------------------------------------------------------------------ */

static void route(req_ctx *rc, const char *url) {
    snprintf(rc->path, sizeof rc->path, "%s", url);
    const char *p = url;
    /* clients configured with a base URL without /v1 reach the same routes */
    if (!strncmp(p, "/v1/", 4)) p += 3;
    rc->ep = EP_OTHER;
    rc->allowed_post = 1;
    if (!strcmp(p, "/chat/completions")) rc->ep = EP_CHAT;
    else if (!strcmp(p, "/completions")) rc->ep = EP_COMPLETIONS;
    else if (!strcmp(p, "/responses")) rc->ep = EP_RESPONSES;
    else if (!strcmp(p, "/messages")) rc->ep = EP_MESSAGES;
    else if (!strcmp(p, "/messages/count_tokens")) rc->ep = EP_COUNT_TOKENS;
    else {
        rc->allowed_post = 0;
        if (!strcmp(p, "/models")) rc->ep = EP_MODELS;
        else if (!strncmp(p, "/models/", 8) && p[8]) rc->ep = EP_MODEL;
        else if (!strcmp(url, "/health")) rc->ep = EP_HEALTH;
        else if (!strcmp(url, "/metrics")) rc->ep = EP_METRICS;
    }
    rc->anthropic = !strncmp(p, "/messages", 9);
}

static int check_auth(http_server *h, struct MHD_Connection *c) {
    const char *key = h->srv->cfg.api_key;
    if (!key || !*key) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ') a++;
        if (util_secret_eq(a, key)) return 1;
    }
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    return x && util_secret_eq(x, key);
}

/* ------------------------------------------------------------------------ */
/* Host and Origin of a keyless loopback server                              */
/* ------------------------------------------------------------------------ */

/* Split "name[:port]" (a Host header, an Origin's authority, an --allow-host
 * entry); name may be an IPv6 literal in brackets.  name is lowercased, port
 * is -1 when absent.  -1 when malformed. */
static int split_hostport(const char *s, size_t n, char *name, size_t cap, int *port) {
    size_t k;
    if (n && s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb) return -1;
        k = (size_t)(rb - s) + 1;
    } else {
        const char *co = memchr(s, ':', n);
        k = co ? (size_t)(co - s) : n;
    }
    if (k == 0 || k >= cap) return -1;
    for (size_t i = 0; i < k; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || ch == '/' || ch >= 0x7f) return -1;
        name[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    }
    name[k] = 0;
    *port = -1;
    if (k < n) {
        if (s[k] != ':' || n - k - 1 == 0 || n - k - 1 > 5) return -1;
        int p = 0;
        for (size_t i = k + 1; i < n; i++) {
            if (s[i] < '0' || s[i] > '9') return -1;
            p = p * 10 + (s[i] - '0');
        }
        if (p > 65535) return -1;
        *port = p;
    }
    return 0;
}

/* This server as a loopback client names it (port -1 = the scheme's
 * default_port), or an --allow-host entry: "name" allows any port,
 * "name:port" that port, "*" anything. */
static int host_allowed(http_server *h, const char *name, int port, int default_port) {
    int p = port >= 0 ? port : default_port;
    static const char *const loop[] = { "localhost", "127.0.0.1", "[::1]", NULL };
    for (int i = 0; loop[i]; i++)
        if (!strcmp(name, loop[i]) && p == h->port) return 1;
    char self[300];
    const char *hs = h->srv->cfg.host;
    int sp;
    if (strchr(hs, ':')) {
        char b[300];
        snprintf(b, sizeof b, "[%s]", hs);
        if (!split_hostport(b, strlen(b), self, sizeof self, &sp) && !strcmp(name, self) &&
            p == h->port) return 1;
    } else if (!split_hostport(hs, strlen(hs), self, sizeof self, &sp) && !strcmp(name, self) &&
               p == h->port) {
        return 1;
    }
    for (const char **a = h->srv->cfg.allow_hosts; a && *a; a++) {
        if (!strcmp(*a, "*")) return 1;
        char an[300];
        int ap;
        if (split_hostport(*a, strlen(*a), an, sizeof an, &ap) || strcmp(an, name)) continue;
        if (ap < 0 || ap == p) return 1;
    }
    return 0;
}

/* NULL when the request may proceed, else the error to answer (403). */
static const char *foreign_request(http_server *h, struct MHD_Connection *c, char *msg,
                                   size_t cap) {
    if (!h->guard) return NULL;
    char name[300];
    int port;
    /* HTTP/1.1 without Host is refused by libmicrohttpd; HTTP/1.0 clients
     * may omit it, and no browser does */
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (host && (split_hostport(host, strlen(host), name, sizeof name, &port) ||
                 !host_allowed(h, name, port, 80))) {
        snprintf(msg, cap, "Host '%.200s' is not allowed: this server has no API key and answers "
                 "only requests addressed to localhost, 127.0.0.1 or [::1] on port %d (see "
                 "--allow-host, or set --api-key)", host, h->port);
        return "forbidden_host";
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && !h->srv->cfg.cors) {
        const char *a = NULL;
        int def = 0;
        if (!strncasecmp(origin, "http://", 7)) { a = origin + 7; def = 80; }
        else if (!strncasecmp(origin, "https://", 8)) { a = origin + 8; def = 443; }
        size_t n = a ? strcspn(a, "/") : 0;
        if (!a || (a[n] && strcmp(a + n, "/")) || split_hostport(a, n, name, sizeof name, &port) ||
            !host_allowed(h, name, port, def)) {
            snprintf(msg, cap, "Origin '%.200s' is not allowed: this server has no API key, and "
                     "web pages may call it only with --cors or when --allow-host names their "
                     "host", origin);
            return "forbidden_origin";
        }
    }
    return NULL;
}

/* A POST body must be declared JSON: a web page can send text/plain, form
 * types or no type across sites without a preflight, never JSON. */
static int json_content_type(const char *ct) {
    if (!ct) return 0;
    while (*ct == ' ') ct++;
    size_t n = strcspn(ct, "; ");
    if (n == 16 && !strncasecmp(ct, "application/json", 16)) return 1;
    if (n == 9 && !strncasecmp(ct, "text/json", 9)) return 1;
    if (n > 5 && !strncasecmp(ct + n - 5, "+json", 5)) return 1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* simple endpoints                                                          */
/* ------------------------------------------------------------------------ */

static json_t *model_obj(server_ctx *s, const char *id) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(id));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(s->started));
    json_object_set_new(m, "owned_by", json_string("ds4"));
    json_object_set_new(m, "max_model_len", json_integer(s->ctx));
    return m;
}

static enum MHD_Result do_get(http_server *h, struct MHD_Connection *c, req_ctx *rc) {
    server_ctx *s = h->srv;
    switch (rc->ep) {
    case EP_MODELS: {
        json_t *o = json_object(), *a = json_array();
        json_object_set_new(o, "object", json_string("list"));
        json_array_append_new(a, model_obj(s, s->model_id));
        json_array_append_new(a, model_obj(s, "deepseek-chat"));
        json_array_append_new(a, model_obj(s, "deepseek-reasoner"));
        json_object_set_new(o, "data", a);
        return send_json(h, c, rc, 200, o);
    }
    case EP_MODEL: {
        const char *id = strstr(rc->path, "/models/") + 8;
        if (!conv_model_name_ok(id, strlen(id))) {
            char msg[400];
            snprintf(msg, sizeof msg, "The model '%.100s...' does not exist: model names are at "
                     "most %d bytes", id, CONV_MODEL_NAME_MAX);
            return send_err(h, c, rc, 404, "invalid_request_error", "model_not_found", "model", msg);
        }
        return send_json(h, c, rc, 200, model_obj(s, id));
    }
    case EP_HEALTH: {
        json_t *o = json_object();
        json_object_set_new(o, "status", json_string("ok"));
        json_object_set_new(o, "model", json_string(s->model_id));
        json_object_set_new(o, "ctx", json_integer(s->ctx));
        json_object_set_new(o, "queue", json_integer(worker_queue_depth(s->w)));
        return send_json(h, c, rc, 200, o);
    }
    case EP_METRICS: {
        char *t = metrics_render(s->m);
        if (!t) return send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
        enum MHD_Result r = send_buf(h, c, rc, 200, "text/plain; version=0.0.4; charset=utf-8",
                                     t, strlen(t));
        free(t);
        return r;
    }
    default:
        return send_err(h, c, rc, 404, "invalid_request_error", NULL, NULL, "not found");
    }
}

/* ------------------------------------------------------------------------ */
/* streaming                                                                 */
/* ------------------------------------------------------------------------ */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    job *j = sc->j;
    static const char KA[] = ": keep-alive\n\n";
    pthread_mutex_lock(&j->mu);
    for (;;) {
        size_t avail = j->out.n - j->out_off;
        if (avail) {
            size_t k = avail < max ? avail : max;
            memcpy(buf, j->out.p + j->out_off, k);
            j->out_off += k;
            if (j->out_off == j->out.n) {
                j->out.n = j->out_off = 0;
            } else if (j->out_off > (1u << 16)) {
                memmove(j->out.p, j->out.p + j->out_off, j->out.n - j->out_off);
                j->out.n -= j->out_off;
                j->out_off = 0;
            }
            pthread_mutex_unlock(&j->mu);
            sc->last = util_now();
            return (ssize_t)k;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        wait_100ms(j);
        if (!j->done && j->out.n == j->out_off) {
            if (client_gone(sc->c)) {
                atomic_store(&j->cancel, CANCEL_CLIENT);
                pthread_mutex_unlock(&j->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            /* SSE comment while the queue or a long prefill keeps us silent:
             * proxies and clients with read timeouts keep the stream open */
            if (util_now() - sc->last >= sc->h->srv->cfg.keepalive_s && max >= sizeof KA - 1) {
                memcpy(buf, KA, sizeof KA - 1);
                sc->last = util_now();
                pthread_mutex_unlock(&j->mu);
                return (ssize_t)(sizeof KA - 1);
            }
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    pthread_mutex_lock(&sc->j->mu);
    int done = sc->j->done;
    pthread_mutex_unlock(&sc->j->mu);
    if (!done) atomic_store(&sc->j->cancel, CANCEL_CLIENT);
    job_unref(sc->j);
    free(sc);
}

/* ------------------------------------------------------------------------ */
/* generation endpoints                                                      */
/* ------------------------------------------------------------------------ */

static enum MHD_Result do_post(http_server *h, struct MHD_Connection *c, req_ctx *rc) {
    server_ctx *s = h->srv;
    if (rc->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes",
                 s->cfg.max_body_bytes);
        return send_err(h, c, rc, 413, "invalid_request_error", "request_too_large", NULL, msg);
    }
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!json_content_type(ct)) {
        char msg[400];
        snprintf(msg, sizeof msg, "Content-Type must be application/json (got %s%.200s%s)",
                 ct ? "'" : "", ct ? ct : "none", ct ? "'" : "");
        return send_err(h, c, rc, 415, "invalid_request_error", "unsupported_media_type", NULL,
                        msg);
    }
    if (rc->body.n == 0)
        return send_err(h, c, rc, 400, "invalid_request_error", NULL, NULL,
                        "the request body is empty: a JSON object is required");
    char *perr = NULL;
    json_t *body = ds4_json_parse(rc->body.p, rc->body.n, &perr);
    if (!body) {
        char msg[600];
        snprintf(msg, sizeof msg, "We could not parse the JSON body of your request: %.500s",
                 perr ? perr : "invalid JSON");
        free(perr);
        return send_err(h, c, rc, 400, "invalid_request_error", NULL, NULL, msg);
    }
    api_kind api = rc->ep == EP_CHAT ? API_CHAT : rc->ep == EP_COMPLETIONS ? API_COMPLETIONS :
                   rc->ep == EP_RESPONSES ? API_RESPONSES : API_MESSAGES;
    api_error e;
    memset(&e, 0, sizeof e);
    /* count_tokens takes a messages request without max_tokens */
    if (rc->ep == EP_COUNT_TOKENS && json_is_object(body) && !json_object_get(body, "max_tokens"))
        json_object_set_new(body, "max_tokens", json_integer(1));
    request *rq = conv_parse(api, body, &e);
    json_decref(body);
    if (!rq) return send_error(h, c, rc, &e);
    /* count_tokens measures any prompt: a client asks precisely to learn
     * whether it fits */
    if ((rc->ep == EP_COUNT_TOKENS ? conv_render : conv_prepare)(rq, &e)) {
        request_free(rq);
        return send_error(h, c, rc, &e);
    }
    if (rc->ep == EP_COUNT_TOKENS) {
        json_t *o = json_object();
        json_object_set_new(o, "input_tokens", json_integer((json_int_t)rq->tokens.n));
        request_free(rq);
        return send_json(h, c, rc, 200, o);
    }
    if (s->cfg.test_mode) {
        const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-DS4-Test-Output");
        if (t) {
            rq->test_output = util_base64_decode(t, &rq->test_output_len);
            if (!rq->test_output) {
                request_free(rq);
                return send_err(h, c, rc, 400, "invalid_request_error", NULL, NULL,
                                "X-DS4-Test-Output must be base64");
            }
        }
    }
    job *j = job_new(rq);
    if (!j) {
        request_free(rq);
        return send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->arrived = rc->t0;     /* queued by arrival, not by when parsing ended */
    int q = worker_submit(s->w, j);
    if (q < 0) {
        job_unref(j);
        if (q == -2)
            return send_err(h, c, rc, 503, "server_error", NULL, NULL, "the server is shutting down");
        api_err_set(&e, 429, rc->anthropic ? "rate_limit_error" : "rate_limit_exceeded",
                    "queue_full", NULL, "too many queued requests (%d); retry later",
                    s->cfg.max_queue);
        if (rc->anthropic) e.status = 529;   /* Anthropic's "overloaded" */
        return send_error(h, c, rc, &e);
    }

    if (rq->stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (!sc) {
            atomic_store(&j->cancel, CANCEL_CLIENT);
            job_unref(j);
            return MHD_NO;
        }
        sc->h = h;
        sc->j = j;       /* the connection's reference moves to the stream */
        sc->c = c;
        sc->last = util_now();
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                   stream_read, sc, stream_free);
        if (!r) { stream_free(sc); return MHD_NO; }
        MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        add_cors(h, r);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        metrics_request(s->m, rc->ep, 200);
        return ret;
    }

    /* non-streaming: wait here, watching the client */
    int gone = 0;
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        wait_100ms(j);
        if (!j->done && client_gone(c)) { gone = 1; break; }
    }
    if (gone) {
        atomic_store(&j->cancel, CANCEL_CLIENT);
        pthread_mutex_unlock(&j->mu);
        job_unref(j);
        metrics_request(s->m, rc->ep, 499);
        return MHD_NO;
    }
    int status = j->status ? j->status : 500;
    char *b = j->body.p ? strdup(j->body.p) : strdup("{}");
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    enum MHD_Result r = send_buf(h, c, rc, status, "application/json", b, strlen(b));
    free(b);
    return r;
}

/* ------------------------------------------------------------------------ */
/* the header deadline                                                       */
/* ------------------------------------------------------------------------ */

static conn_track *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* A request's headers are in (busy = 1: its own limits apply from here), or
 * its answer is out (0: the next request's headers are due within the idle
 * timeout). */
static void conn_busy(http_server *h, struct MHD_Connection *c, int busy) {
    conn_track *t = conn_of(c);
    if (!t) return;
    pthread_mutex_lock(&h->cmu);
    t->busy = busy;
    if (!busy) t->deadline = util_now() + h->srv->cfg.idle_timeout_s;
    pthread_mutex_unlock(&h->cmu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    http_server *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_track *t = ci ? calloc(1, sizeof *t) : NULL;
        if (!t) return;      /* untracked: libmicrohttpd's idle timeout still applies */
        t->fd = ci->connect_fd;
        t->deadline = util_now() + h->srv->cfg.header_timeout_s;
        pthread_mutex_lock(&h->cmu);
        t->next = h->conns;
        if (h->conns) h->conns->prev = t;
        h->conns = t;
        pthread_mutex_unlock(&h->cmu);
        *socket_context = t;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_track *t = *socket_context;
        if (!t) return;
        /* libmicrohttpd closes the socket after this returns: once unlinked
         * under the lock, the reaper can no longer touch a reused fd */
        pthread_mutex_lock(&h->cmu);
        if (t->prev) t->prev->next = t->next;
        else h->conns = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&h->cmu);
        free(t);
        *socket_context = NULL;
    }
}

static void *reaper_main(void *arg) {
    http_server *h = arg;
    pthread_mutex_lock(&h->cmu);
    while (!h->stopping) {
        double now = util_now();
        int n = 0;
        for (conn_track *t = h->conns; t; t = t->next) {
            if (t->busy || t->shut || now <= t->deadline) continue;
            /* wakes the connection thread (EOF), which closes the socket */
            shutdown(t->fd, SHUT_RDWR);
            t->shut = 1;
            n++;
        }
        if (n) {
            metrics_header_timeouts(h->srv->m, n);
            if (h->srv->cfg.verbose)
                log_msg("closed %d connection%s that sent no complete request in time", n,
                        n > 1 ? "s" : "");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&h->ccv, &h->cmu, &ts);
    }
    pthread_mutex_unlock(&h->cmu);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* MHD callbacks                                                             */
/* ------------------------------------------------------------------------ */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    http_server *h = cls;
    server_ctx *s = h->srv;
    req_ctx *rc = *con_cls;
    if (!rc) {
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        rc->t0 = util_now();
        rc->h = h;
        route(rc, url);
        *con_cls = rc;
        atomic_fetch_add(&h->inflight, 1);
        conn_busy(h, c, 1);
        char msg[600];
        const char *why = foreign_request(h, c, msg, sizeof msg);
        if (why) {
            if (s->cfg.verbose) log_msg("refused: %s", msg);
            /* answered before the body is read: libmicrohttpd closes after */
            return send_err(h, c, rc, 403, rc->anthropic ? "permission_error" : "invalid_request_error",
                            why, NULL, msg);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end = NULL;
            unsigned long long n = strtoull(cl, &end, 10);
            if (n > s->cfg.max_body_bytes) rc->too_big = 1;
            if (n > s->cfg.max_body_bytes + DRAIN_MAX) {
                /* too large to drain: answer now, libmicrohttpd closes after */
                return do_post(h, c, rc);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (util_now() - rc->t0 > s->cfg.request_timeout_s) {
            log_msg("request body not received within %d s: closing", s->cfg.request_timeout_s);
            return MHD_NO;
        }
        if (!rc->too_big && rc->body.n + *upload_size > s->cfg.max_body_bytes) {
            rc->too_big = 1;
            ds4_buf_free(&rc->body);
        }
        if (rc->too_big) {
            rc->drained += *upload_size;
            if (rc->drained > DRAIN_MAX) return MHD_NO;
        } else if (ds4_buf_append(&rc->body, upload, *upload_size)) {
            return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }

    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int is_post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) {
        if (!s->cfg.cors)
            return send_err(h, c, rc, 405, "invalid_request_error", NULL, NULL,
                            "OPTIONS is only answered with --cors");
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        add_cors(h, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                rh ? rh : "Authorization, Content-Type, x-api-key, "
                                          "anthropic-version, anthropic-beta");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        enum MHD_Result ret = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        metrics_request(s->m, rc->ep, 204);
        return ret;
    }
    if (rc->ep == EP_OTHER) {
        char msg[400];
        snprintf(msg, sizeof msg, "Invalid URL (%.16s %.300s)", method, url);
        return send_err(h, c, rc, 404, "invalid_request_error", NULL, NULL, msg);
    }
    if ((rc->allowed_post && !is_post) || (!rc->allowed_post && !is_get)) {
        char msg[400];
        snprintf(msg, sizeof msg, "Method %.16s is not allowed on %.300s (use %s)", method, url,
                 rc->allowed_post ? "POST" : "GET");
        return send_err(h, c, rc, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
    }
    if (rc->ep != EP_HEALTH && !check_auth(h, c)) {
        if (rc->anthropic)
            return send_err(h, c, rc, 401, "authentication_error", NULL, NULL, "invalid x-api-key");
        return send_err(h, c, rc, 401, "invalid_request_error", "invalid_api_key", NULL,
                        "Incorrect API key provided. Send it as 'Authorization: Bearer KEY' "
                        "or 'x-api-key: KEY'.");
    }
    if (is_get) return do_get(h, c, rc);
    return do_post(h, c, rc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    conn_busy(cls, c, 0);
    req_ctx *rc = *con_cls;
    if (!rc) return;
    atomic_fetch_sub(&rc->h->inflight, 1);
    ds4_buf_free(&rc->body);
    free(rc);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    server_ctx *s = g_srv;
    if (!s || !s->cfg.verbose) return;
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    log_msg("http: %s", line);
}

/* Bind and listen on the first address of --host.  SO_REUSEADDR only (a
 * restart need not wait for the old connections' TIME_WAIT); never
 * SO_REUSEPORT, which would let a second server bind the same port. */
int http_listen(server_ctx *srv, int *port_out, char **err) {
    char m[400];
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", srv->cfg.port);
    int gai = getaddrinfo(srv->cfg.host, port, &hints, &ai);
    if (gai) {
        snprintf(m, sizeof m, "cannot resolve --host %s: %s", srv->cfg.host, gai_strerror(gai));
        if (err) *err = strdup(m);
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0) {
        snprintf(m, sizeof m, "cannot create a socket for %s: %s", srv->cfg.host, strerror(errno));
    } else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
               bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
        int e = errno;
        if (e == EADDRINUSE)
            snprintf(m, sizeof m, "cannot listen on %s port %d: the port is already in use "
                     "(another ds4-server?); stop it or choose another --port", srv->cfg.host,
                     srv->cfg.port);
        else
            snprintf(m, sizeof m, "cannot listen on %s port %d: %s", srv->cfg.host,
                     srv->cfg.port, strerror(e));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        if (err) *err = strdup(m);
        return -1;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    *port_out = srv->cfg.port;
    if (!getsockname(fd, (struct sockaddr *)&sa, &sl)) {
        if (sa.ss_family == AF_INET) *port_out = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        else if (sa.ss_family == AF_INET6) *port_out = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    }
    return fd;
}

/* Every address of the listening socket is loopback. */
static int bound_to_loopback(int fd) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl)) return 0;
    if (sa.ss_family == AF_INET)
        return (ntohl(((struct sockaddr_in *)&sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

int http_check_allow_host(const char *a) {
    char n[300];
    int p;
    return strcmp(a, "*") && split_hostport(a, strlen(a), n, sizeof n, &p) ? -1 : 0;
}

http_server *http_start(server_ctx *srv, int fd, int port, char **err) {
    http_server *h = calloc(1, sizeof *h);
    if (!h) { close(fd); return NULL; }
    h->srv = srv;
    h->port = port;
    pthread_mutex_init(&h->cmu, NULL);
    pthread_cond_init(&h->ccv, NULL);
    h->guard = !(srv->cfg.api_key && *srv->cfg.api_key) && bound_to_loopback(fd);
    if (pthread_create(&h->reaper, NULL, reaper_main, h)) {
        close(fd);
        if (err) *err = strdup("cannot start a thread");
        http_stop(h);
        return NULL;
    }
    h->reaper_on = 1;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (sa.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* the logger first: libmicrohttpd warns (on its own logger) about any
     * option that comes before it */
    h->d = MHD_start_daemon(flags, (uint16_t)h->port, NULL, NULL, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
                            MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)srv->cfg.max_header_bytes,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)srv->cfg.idle_timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)srv->cfg.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)srv->cfg.max_conn_per_ip,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_END);
    if (!h->d) {
        close(fd);
        if (err) {
            char m[300];
            snprintf(m, sizeof m, "libmicrohttpd could not start on %s port %d", srv->cfg.host,
                     h->port);
            *err = strdup(m);
        }
        http_stop(h);
        return NULL;
    }
    return h;
}

void http_quiesce(http_server *h) {
    if (!h || !h->d) return;
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void http_stop(http_server *h) {
    if (!h) return;
    /* Let answers that are complete on the worker side (the cancelled
     * stream's error event, the 503s of the queue) reach their clients
     * before the sockets are shut: MHD_stop_daemon does not wait for them. */
    for (int i = 0; i < 300 && atomic_load(&h->inflight) > 0; i++) {
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (h->d) MHD_stop_daemon(h->d);
    if (h->reaper_on) {
        pthread_mutex_lock(&h->cmu);
        h->stopping = 1;
        pthread_cond_signal(&h->ccv);
        pthread_mutex_unlock(&h->cmu);
        pthread_join(h->reaper, NULL);
    }
    pthread_cond_destroy(&h->ccv);
    pthread_mutex_destroy(&h->cmu);
    free(h);
}
