/*
 * http.c -- the HTTP front of ds4-server: routing, auth, CORS, the Host /
 * Origin guard, the JSON endpoints that need no model (models, health,
 * metrics, the "/" page), queueing of generation jobs, waiting for them,
 * SSE delivery, and one log line for every request the server refuses.
 *
 * Owns: what a request means.  The bytes on the wire (framing, limits,
 * deadlines, keep-alive, the strict RFC 9112 parse) are http1.c's: it
 * calls on_head when a request's head is in (the body not read yet),
 * on_request when the body is in, on_reject when it refuses a malformed
 * request itself.  A connection thread parses and converts the body
 * (conv.c), renders and tokenizes the prompt, queues a job (worker.c) and
 * then either blocks until the job is done (non-streaming) or relays the
 * worker's SSE bytes as they come.  Must not: touch the session.
 *
 * Disconnects: while a connection thread waits for its job it polls its
 * socket every 100 ms; a peer that closed it (EOF / RDHUP / error) cancels
 * the job, which the worker sees between prefill chunks and before each
 * token.  A failed write does the same.
 *
 * Limits (http1.c): bodies over --max-body-bytes get 413 (a Content-Length
 * body is read and discarded up to 64 MiB beyond the limit so the client
 * sees the answer; larger ones, and chunked ones, are answered at once and
 * the connection closed); heads must fit --max-header-bytes (431); a new
 * connection must deliver its head within --header-timeout, a kept-alive
 * one its next head within --idle-timeout of the previous answer; a body
 * must be in within --request-timeout.  --max-connections-per-ip keeps one
 * address from taking every one of the --max-connections threads.
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

#include "http.h"
#include "http1.h"
#include "conv.h"
#include "base/json_py.h"
#include "metrics.h"
#include "webui.h"
#include "worker.h"

struct http_server {
    server_ctx *srv;
    http1_server *h1;
    atomic_int inflight;     /* requests between their head and their completion */
    int port;                /* bound port */
    int guard;               /* keyless on loopback: Host/Origin are checked */
    webui_page page;         /* the chat page at "/" (unused with --no-webui) */
};

typedef struct {
    endpoint ep;
    int root;             /* GET / (counted as "other" in the metrics) */
    int anthropic;        /* error shape */
    int allowed_post;     /* the endpoint's method */
    double t0;
    char path[1024];      /* the decoded path (a longer one is cut: model ids past 256 bytes are refused anyway) */
} req_ctx;

/* ------------------------------------------------------------------------ */
/* the log of refused requests                                               */
/* ------------------------------------------------------------------------ */

/* Up to `max` bytes of s[0..n) for a log line: control characters,
 * backslashes and bytes >= 0x7f as \xNN, "..." when cut. */
static void log_escape(char *dst, size_t cap, const char *s, size_t n, size_t max) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        if (i == max) {
            memcpy(dst + k, "...", 3);
            k += 3;
            break;
        }
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') dst[k++] = (char)ch;
        else k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", ch);
    }
    dst[k] = 0;
}

/* One line for a request the server answers with an error itself (bad
 * HTTP, Host/Origin, auth, limits, invalid JSON or fields, queue full, a
 * failed generation): status, method, target, peer, and the reason the
 * client was given.  -v adds the first bytes of the body. */
static void log_refused(http_server *h, http1_conn *c, int status, const char *reason) {
    const char *m = http1_method(c), *t = http1_target(c);
    char tq[400], rq[700];
    log_escape(tq, sizeof tq, t ? t : "-", t ? strlen(t) : 1, 200);
    log_escape(rq, sizeof rq, reason, strlen(reason), 300);
    log_msg("refused %d %s %s from %s: %s", status, m ? m : "-", tq, http1_peer(c), rq);
    size_t bn = 0;
    const char *b = http1_body(c, &bn);
    if (h->srv->cfg.verbose && bn) {
        char bq[700];
        log_escape(bq, sizeof bq, b, bn, 200);
        log_msg("  body (%zu bytes): %s", bn, bq);
    }
}

/* The message of an error body (either API's shape), for the log. */
static void error_message(const char *body, char *out, size_t cap) {
    snprintf(out, cap, "(no message)");
    json_t *v = json_loads(body, 0, NULL);
    const char *m = json_string_value(json_object_get(json_object_get(v, "error"), "message"));
    if (m) snprintf(out, cap, "%s", m);
    json_decref(v);
}

/* ------------------------------------------------------------------------ */
/* answers                                                                   */
/* ------------------------------------------------------------------------ */

static void cors_headers(http_server *h, ds4_buf *b) {
    if (!h->srv->cfg.cors) return;
    ds4_buf_puts(b, "Access-Control-Allow-Origin: *\r\nAccess-Control-Expose-Headers: *\r\n");
}

static void send_buf(http_server *h, http1_conn *c, req_ctx *rc, int status, const char *ctype,
                     const char *body, size_t len) {
    ds4_buf hd = { 0 };
    cors_headers(h, &hd);
    if (status == 405)
        ds4_buf_printf(&hd, "Allow: %s\r\n", rc->allowed_post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    if (status == 401 && !rc->anthropic) ds4_buf_puts(&hd, "WWW-Authenticate: Bearer\r\n");
    http1_respond(c, status, ctype, hd.p, body, len);
    ds4_buf_free(&hd);
    metrics_request(h->srv->m, rc->ep, status);
}

static void send_json(http_server *h, http1_conn *c, req_ctx *rc, int status, json_t *v) {
    char *s = jdump(v);
    json_decref(v);
    send_buf(h, c, rc, status, "application/json", s, strlen(s));
    free(s);
}

static void send_error(http_server *h, http1_conn *c, req_ctx *rc, const api_error *e) {
    char *s = api_error_body(rc->anthropic, e);
    log_refused(h, c, e->status, e->message);
    send_buf(h, c, rc, e->status, "application/json", s, strlen(s));
    free(s);
}

static void send_err(http_server *h, http1_conn *c, req_ctx *rc, int status, const char *type,
                     const char *code, const char *param, const char *msg) {
    api_error e;
    api_err_set(&e, status, type, code, param, "%s", msg);
    send_error(h, c, rc, &e);
}

/* 1 when the peer has closed its side or the socket failed. */
static int client_gone(http1_conn *c) {
    struct pollfd p = { http1_fd(c), POLLIN | POLLRDHUP, 0 };
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char b;
        ssize_t k = recv(p.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
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
        else if (!strcmp(url, "/")) rc->root = 1;
    }
    rc->anthropic = !strncmp(p, "/messages", 9);
}

static int check_auth(http_server *h, http1_conn *c) {
    const char *key = h->srv->cfg.api_key;
    if (!key || !*key) return 1;
    const char *a = http1_header(c, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        a += 7;
        while (*a == ' ') a++;
        if (util_secret_eq(a, key)) return 1;
    }
    const char *x = http1_header(c, "x-api-key");
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
static const char *foreign_request(http_server *h, http1_conn *c, char *msg, size_t cap) {
    if (!h->guard) return NULL;
    char name[300];
    int port;
    /* HTTP/1.1 without Host is refused by the parser (http1_parse.c);
     * HTTP/1.0 clients may omit it, and no browser does.  An absolute-form
     * target's authority replaces Host (RFC 9112 3.2.2). */
    const http1_head *hd = http1_request_head(c);
    const char *host = hd && hd->authority ? hd->authority : http1_header(c, "Host");
    if (host && (split_hostport(host, strlen(host), name, sizeof name, &port) ||
                 !host_allowed(h, name, port, 80))) {
        snprintf(msg, cap, "Host '%.200s' is not allowed: this server has no API key and answers "
                 "only requests addressed to localhost, 127.0.0.1 or [::1] on port %d (see "
                 "--allow-host, or set --api-key)", host, h->port);
        return "forbidden_host";
    }
    const char *origin = http1_header(c, "Origin");
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

/* The routes, for the "/" page (HTML and JSON). */
static const struct { const char *method, *path, *what; } ROUTES[] = {
    { "POST", "/v1/chat/completions", "OpenAI Chat Completions (streaming or not)" },
    { "POST", "/v1/completions", "OpenAI Completions (a raw prompt)" },
    { "POST", "/v1/responses", "OpenAI Responses" },
    { "POST", "/v1/messages", "Anthropic Messages (streaming or not)" },
    { "POST", "/v1/messages/count_tokens", "Anthropic token counting" },
    { "GET", "/v1/models", "the served model and its aliases" },
    { "GET", "/health", "status, model, context, queue (no API key needed)" },
    { "GET", "/metrics", "Prometheus metrics" },
};

static void html_put(ds4_buf *b, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': ds4_buf_puts(b, "&lt;"); break;
        case '>': ds4_buf_puts(b, "&gt;"); break;
        case '&': ds4_buf_puts(b, "&amp;"); break;
        case '"': ds4_buf_puts(b, "&quot;"); break;
        case '\'': ds4_buf_puts(b, "&#39;"); break;
        default: ds4_buf_append(b, s, 1);
        }
    }
}

/* Only these characters go into the page's curl line unchanged. */
static int plain(const char *s, const char *extra) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("._-", *s) || strchr(extra, *s)))
            return 0;
    return 1;
}

/* The chat page (webui.c): its policy headers, and 304 when the browser
 * already holds this build's page. */
static void send_webui(http_server *h, http1_conn *c, req_ctx *rc) {
    const webui_page *p = &h->page;
    ds4_buf hd = { 0 };
    cors_headers(h, &hd);
    ds4_buf_printf(&hd, "Content-Security-Policy: %s\r\nX-Content-Type-Options: nosniff\r\n"
                   "Referrer-Policy: no-referrer\r\nX-Frame-Options: DENY\r\n"
                   "Cache-Control: no-cache\r\nETag: %s\r\n", p->csp, p->etag);
    const char *inm = http1_header(c, "If-None-Match");
    int status = inm && strstr(inm, p->etag) ? 304 : 200;
    if (ds4_buf_failed(&hd)) {
        send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
    } else {
        http1_respond(c, status, "text/html; charset=utf-8", hd.p, p->body, p->len);
        metrics_request(h->srv->m, rc->ep, status);
    }
    ds4_buf_free(&hd);
}

/* GET / and HEAD /: the chat page (webui.c), or with --no-webui a page of
 * what this server is.  Neither needs the API key (like /health they
 * reveal the model name only; the page asks for the key when the API
 * wants it); the Host/Origin guard applies as everywhere.  A client that
 * asks for JSON gets what the informational page says, as JSON. */
static void do_root(http_server *h, http1_conn *c, req_ctx *rc) {
    server_ctx *s = h->srv;
    const char *acc = http1_header(c, "Accept");
    int keyed = s->cfg.api_key && *s->cfg.api_key;
    int json = acc && strstr(acc, "application/json") && !strstr(acc, "text/html");
    if (!json && !s->cfg.no_webui) {
        send_webui(h, c, rc);
        return;
    }
    if (json) {
        json_t *o = json_object(), *a = json_array();
        json_object_set_new(o, "server", json_string("ds4-server"));
        json_object_set_new(o, "model", json_string(s->model_id));
        json_object_set_new(o, "ctx", json_integer(s->ctx));
        json_object_set_new(o, "api_key_required", json_boolean(keyed));
        for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES; i++) {
            json_t *r = json_object();
            json_object_set_new(r, "method", json_string(ROUTES[i].method));
            json_object_set_new(r, "path", json_string(ROUTES[i].path));
            json_object_set_new(r, "description", json_string(ROUTES[i].what));
            json_array_append_new(a, r);
        }
        json_object_set_new(o, "endpoints", a);
        send_json(h, c, rc, 200, o);
        return;
    }
    /* the address the client used, for the examples (a name only when it
     * is plainly one: the page repeats it) */
    char host[300];
    const char *hh = http1_header(c, "Host");
    if (hh && strlen(hh) < sizeof host && plain(hh, ":[]"))
        snprintf(host, sizeof host, "%s", hh);
    else
        snprintf(host, sizeof host, "127.0.0.1:%d", h->port);
    const char *model = plain(s->model_id, "") ? s->model_id : "deepseek-chat";
    ds4_buf b = { 0 };
    ds4_buf_puts(&b, "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>ds4-server: ");
    html_put(&b, s->model_id);
    ds4_buf_puts(&b, "</title>\n<style>body{font-family:system-ui,sans-serif;max-width:48em;margin:2em auto;"
                 "padding:0 1em;line-height:1.45}code,pre{background:#f3f3f3}pre{padding:.6em;"
                 "overflow-x:auto}td{padding:.1em 1em .1em 0}</style>\n</head><body>\n<h1>ds4-server</h1>\n"
                 "<p>A local inference server for DeepSeek V4 Flash (ds4), serving the model <b>");
    html_put(&b, s->model_id);
    ds4_buf_printf(&b, "</b> with a context of %d tokens. It speaks the OpenAI and the Anthropic HTTP "
                   "APIs: give a client the base URL <code>http://", s->ctx);
    html_put(&b, host);
    ds4_buf_puts(&b, "/v1</code> (OpenAI) or <code>http://");
    html_put(&b, host);
    ds4_buf_printf(&b, "</code> (Anthropic)%s.</p>\n<h2>Endpoints</h2>\n<table>\n",
                   keyed ? ", and the API key as <code>Authorization: Bearer KEY</code> or "
                           "<code>x-api-key: KEY</code>" : "");
    for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES; i++)
        ds4_buf_printf(&b, "<tr><td>%s</td><td><code>%s</code></td><td>%s</td></tr>\n",
                       ROUTES[i].method, ROUTES[i].path, ROUTES[i].what);
    ds4_buf_puts(&b, "</table>\n<h2>Try it</h2>\n<pre>curl http://");
    html_put(&b, host);
    ds4_buf_printf(&b, "/v1/chat/completions -H 'Content-Type: application/json' \\\n%s"
                   "  -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'</pre>\n"
                   "</body></html>\n",
                   keyed ? "  -H \"Authorization: Bearer $DS4_API_KEY\" \\\n" : "", model);
    if (ds4_buf_failed(&b)) send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
    else send_buf(h, c, rc, 200, "text/html; charset=utf-8", b.p, b.n);
    ds4_buf_free(&b);
}

static void do_get(http_server *h, http1_conn *c, req_ctx *rc) {
    server_ctx *s = h->srv;
    if (rc->root) {
        do_root(h, c, rc);
        return;
    }
    switch (rc->ep) {
    case EP_MODELS: {
        json_t *o = json_object(), *a = json_array();
        json_object_set_new(o, "object", json_string("list"));
        json_array_append_new(a, model_obj(s, s->model_id));
        json_array_append_new(a, model_obj(s, "deepseek-chat"));
        json_array_append_new(a, model_obj(s, "deepseek-reasoner"));
        json_object_set_new(o, "data", a);
        send_json(h, c, rc, 200, o);
        return;
    }
    case EP_MODEL: {
        const char *id = strstr(rc->path, "/models/") + 8;
        if (!conv_model_name_ok(id, strlen(id))) {
            char msg[400];
            snprintf(msg, sizeof msg, "The model '%.100s...' does not exist: model names are at "
                     "most %d bytes", id, CONV_MODEL_NAME_MAX);
            send_err(h, c, rc, 404, "invalid_request_error", "model_not_found", "model", msg);
            return;
        }
        send_json(h, c, rc, 200, model_obj(s, id));
        return;
    }
    case EP_HEALTH: {
        json_t *o = json_object();
        json_object_set_new(o, "status", json_string("ok"));
        json_object_set_new(o, "model", json_string(s->model_id));
        json_object_set_new(o, "ctx", json_integer(s->ctx));
        json_object_set_new(o, "queue", json_integer(worker_queue_depth(s->w)));
        send_json(h, c, rc, 200, o);
        return;
    }
    case EP_METRICS: {
        char *t = metrics_render(s->m);
        if (!t) {
            send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
            return;
        }
        send_buf(h, c, rc, 200, "text/plain; version=0.0.4; charset=utf-8", t, strlen(t));
        free(t);
        return;
    }
    default:
        send_err(h, c, rc, 404, "invalid_request_error", NULL, NULL, "not found");
    }
}

/* ------------------------------------------------------------------------ */
/* generation endpoints                                                      */
/* ------------------------------------------------------------------------ */

/* Relay the job's SSE bytes as the worker produces them; an SSE comment
 * while the queue or a long prefill keeps the stream silent (proxies and
 * clients with read timeouts keep it open).  Takes the reference to j. */
static void stream_job(http_server *h, http1_conn *c, req_ctx *rc, job *j) {
    static const char KA[] = ": keep-alive\n\n";
    ds4_buf hd = { 0 };
    ds4_buf_puts(&hd, "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
    cors_headers(h, &hd);
    int bad = http1_stream_begin(c, 200, "text/event-stream; charset=utf-8", hd.p);
    ds4_buf_free(&hd);
    metrics_request(h->srv->m, rc->ep, 200);
    double last = util_now();
    char buf[16384];
    int finished = 0;
    pthread_mutex_lock(&j->mu);
    while (!bad) {
        size_t avail = j->out.n - j->out_off;
        if (avail) {
            size_t k = avail < sizeof buf ? avail : sizeof buf;
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
            bad = http1_stream_write(c, buf, k);
            last = util_now();
            pthread_mutex_lock(&j->mu);
            continue;
        }
        if (j->done) {
            finished = 1;
            break;
        }
        wait_100ms(j);
        if (!j->done && j->out.n == j->out_off) {
            if (client_gone(c)) break;
            if (util_now() - last >= h->srv->cfg.keepalive_s) {
                pthread_mutex_unlock(&j->mu);
                bad = http1_stream_write(c, KA, sizeof KA - 1);
                last = util_now();
                pthread_mutex_lock(&j->mu);
            }
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (finished && !bad) bad = http1_stream_end(c);
    if (!finished || bad) {
        /* the client went away (or cannot be written to): stop the job;
         * the unfinished stream ends the connection */
        atomic_store(&j->cancel, CANCEL_CLIENT);
        http1_set_close(c);
    }
    job_unref(j);
}

static void do_post(http_server *h, http1_conn *c, req_ctx *rc) {
    server_ctx *s = h->srv;
    if (http1_too_big(c)) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes",
                 s->cfg.max_body_bytes);
        send_err(h, c, rc, 413, "invalid_request_error", "request_too_large", NULL, msg);
        return;
    }
    const char *ct = http1_header(c, "Content-Type");
    if (!json_content_type(ct)) {
        char msg[400];
        snprintf(msg, sizeof msg, "Content-Type must be application/json (got %s%.200s%s)",
                 ct ? "'" : "", ct ? ct : "none", ct ? "'" : "");
        send_err(h, c, rc, 415, "invalid_request_error", "unsupported_media_type", NULL, msg);
        return;
    }
    size_t bn = 0;
    const char *bp = http1_body(c, &bn);
    if (bn == 0) {
        send_err(h, c, rc, 400, "invalid_request_error", NULL, NULL,
                 "the request body is empty: a JSON object is required");
        return;
    }
    char *perr = NULL;
    json_t *body = ds4_json_parse(bp, bn, &perr);
    if (!body) {
        char msg[600];
        snprintf(msg, sizeof msg, "We could not parse the JSON body of your request: %.500s",
                 perr ? perr : "invalid JSON");
        free(perr);
        send_err(h, c, rc, 400, "invalid_request_error", NULL, NULL, msg);
        return;
    }
    api_kind api = rc->ep == EP_CHAT ? API_CHAT : rc->ep == EP_COMPLETIONS ? API_COMPLETIONS :
                   rc->ep == EP_RESPONSES ? API_RESPONSES : API_MESSAGES;
    api_error e;
    memset(&e, 0, sizeof e);
    /* count_tokens takes a messages request without max_tokens */
    if (rc->ep == EP_COUNT_TOKENS && json_is_object(body) && !json_object_get(body, "max_tokens"))
        json_object_set_new(body, "max_tokens", json_integer(1));
    request *rq = conv_parse(s, api, body, &e);
    json_decref(body);
    if (!rq) {
        send_error(h, c, rc, &e);
        return;
    }
    /* count_tokens measures any prompt: a client asks precisely to learn
     * whether it fits */
    if ((rc->ep == EP_COUNT_TOKENS ? conv_render : conv_prepare)(rq, &e)) {
        request_free(rq);
        send_error(h, c, rc, &e);
        return;
    }
    if (rc->ep == EP_COUNT_TOKENS) {
        json_t *o = json_object();
        json_object_set_new(o, "input_tokens", json_integer((json_int_t)rq->tokens.n));
        request_free(rq);
        send_json(h, c, rc, 200, o);
        return;
    }
    if (s->cfg.test_mode) {
        const char *t = http1_header(c, "X-DS4-Test-Output");
        if (t) {
            rq->test_output = util_base64_decode(t, &rq->test_output_len);
            if (!rq->test_output) {
                request_free(rq);
                send_err(h, c, rc, 400, "invalid_request_error", NULL, NULL,
                         "X-DS4-Test-Output must be base64");
                return;
            }
        }
    }
    job *j = job_new(rq);
    if (!j) {
        request_free(rq);
        send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    j->arrived = rc->t0;     /* queued by arrival, not by when parsing ended */
    int q = worker_submit(s->w, j);
    if (q < 0) {
        job_unref(j);
        if (q == -2) {
            send_err(h, c, rc, 503, "server_error", NULL, NULL, "the server is shutting down");
            return;
        }
        api_err_set(&e, 429, rc->anthropic ? "rate_limit_error" : "rate_limit_exceeded",
                    "queue_full", NULL, "too many queued requests (%d); retry later",
                    s->cfg.max_queue);
        if (rc->anthropic) e.status = 529;   /* Anthropic's "overloaded" */
        send_error(h, c, rc, &e);
        return;
    }
    if (rq->stream) {
        stream_job(h, c, rc, j);
        return;
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
        http1_set_close(c);      /* nothing is answered: the connection ends */
        return;
    }
    int status = j->status ? j->status : 500;
    char *b = j->body.p ? strdup(j->body.p) : strdup("{}");
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    if (!b) {
        send_err(h, c, rc, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    if (status >= 400) {
        char m[600];
        error_message(b, m, sizeof m);
        log_refused(h, c, status, m);
    }
    send_buf(h, c, rc, status, "application/json", b, strlen(b));
    free(b);
}

/* ------------------------------------------------------------------------ */
/* the callbacks of http1.c                                                  */
/* ------------------------------------------------------------------------ */

/* The head is in, the body is not read: refuse what the head alone decides
 * (Host/Origin) before reading a byte of the body. */
static void on_head(void *cls, http1_conn *c) {
    http_server *h = cls;
    req_ctx *rc = calloc(1, sizeof *rc);
    if (!rc) return;         /* unanswered: http1.c closes the connection */
    rc->t0 = util_now();
    route(rc, http1_path(c));
    http1_set_user(c, rc);
    atomic_fetch_add(&h->inflight, 1);
    char msg[600];
    const char *why = foreign_request(h, c, msg, sizeof msg);
    if (why)
        send_err(h, c, rc, 403, rc->anthropic ? "permission_error" : "invalid_request_error",
                 why, NULL, msg);
}

static void on_request(void *cls, http1_conn *c) {
    http_server *h = cls;
    server_ctx *s = h->srv;
    req_ctx *rc = http1_user(c);
    if (!rc) return;
    const char *method = http1_method(c);
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int is_post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) {
        if (!s->cfg.cors) {
            send_err(h, c, rc, 405, "invalid_request_error", NULL, NULL,
                     "OPTIONS is only answered with --cors");
            return;
        }
        ds4_buf hd = { 0 };
        cors_headers(h, &hd);
        const char *rh = http1_header(c, "Access-Control-Request-Headers");
        ds4_buf_printf(&hd, "Access-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
                       "Access-Control-Allow-Headers: %s\r\nAccess-Control-Max-Age: 600\r\n",
                       rh ? rh : "Authorization, Content-Type, x-api-key, anthropic-version, "
                                 "anthropic-beta");
        http1_respond(c, 204, NULL, hd.p, "", 0);
        ds4_buf_free(&hd);
        metrics_request(s->m, rc->ep, 204);
        return;
    }
    const char *url = http1_target(c);
    if (rc->ep == EP_OTHER && !rc->root) {
        char msg[400];
        snprintf(msg, sizeof msg, "Invalid URL (%.16s %.300s)", method, url);
        send_err(h, c, rc, 404, "invalid_request_error", NULL, NULL, msg);
        return;
    }
    if ((rc->allowed_post && !is_post) || (!rc->allowed_post && !is_get)) {
        char msg[400];
        snprintf(msg, sizeof msg, "Method %.16s is not allowed on %.300s (use %s)", method, url,
                 rc->allowed_post ? "POST" : "GET");
        send_err(h, c, rc, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
        return;
    }
    /* /health and the "/" page reveal the model name only */
    if (rc->ep != EP_HEALTH && !rc->root && !check_auth(h, c)) {
        if (rc->anthropic)
            send_err(h, c, rc, 401, "authentication_error", NULL, NULL, "invalid x-api-key");
        else
            send_err(h, c, rc, 401, "invalid_request_error", "invalid_api_key", NULL,
                     "Incorrect API key provided. Send it as 'Authorization: Bearer KEY' "
                     "or 'x-api-key: KEY'.");
        return;
    }
    if (is_get) do_get(h, c, rc);
    else do_post(h, c, rc);
}

/* http1.c refuses a malformed request: the answer in the shape of the API
 * its path names (OpenAI unless /v1/messages*). */
static void on_reject(void *cls, http1_conn *c, int status, const char *reason) {
    http_server *h = cls;
    req_ctx tmp, *rc = http1_user(c);
    if (!rc) {
        memset(&tmp, 0, sizeof tmp);
        tmp.ep = EP_OTHER;
        const char *p = http1_path(c);
        if (p) route(&tmp, p);
        rc = &tmp;
    }
    api_error e;
    api_err_set(&e, status, rc->anthropic ? anthropic_error_type(status) :
                status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL, "%s", reason);
    send_error(h, c, rc, &e);
}

static void on_complete(void *cls, http1_conn *c) {
    http_server *h = cls;
    req_ctx *rc = http1_user(c);
    if (!rc) return;
    atomic_fetch_sub(&h->inflight, 1);
    free(rc);
    http1_set_user(c, NULL);
}

static void on_header_timeout(void *cls) {
    http_server *h = cls;
    metrics_header_timeouts(h->srv->m, 1);
}

/* Connections over a limit are closed unread: no request to log, and a
 * flood of them must not flood the log, so only with -v. */
static void on_refused_connection(void *cls, const char *peer, const char *why) {
    http_server *h = cls;
    if (h->srv->cfg.verbose) log_msg("closed a connection from %s at once (%s)", peer, why);
}

/* ------------------------------------------------------------------------ */
/* start and stop                                                            */
/* ------------------------------------------------------------------------ */

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
    if (webui_page_init(&h->page)) {
        if (err) *err = strdup("the embedded chat page is malformed (no inline <style> or <script>)");
        free(h);
        close(fd);
        return NULL;
    }
    h->srv = srv;
    h->port = port;
    h->guard = !(srv->cfg.api_key && *srv->cfg.api_key) && bound_to_loopback(fd);
    http1_config hc = {
        .max_header_bytes = srv->cfg.max_header_bytes,
        .max_body_bytes = srv->cfg.max_body_bytes,
        .max_connections = srv->cfg.max_connections,
        .max_per_ip = srv->cfg.max_conn_per_ip,
        .header_timeout_s = srv->cfg.header_timeout_s,
        .idle_timeout_s = srv->cfg.idle_timeout_s,
        .request_timeout_s = srv->cfg.request_timeout_s,
        .cls = h,
        .on_head = on_head,
        .on_request = on_request,
        .on_reject = on_reject,
        .on_complete = on_complete,
        .on_header_timeout = on_header_timeout,
        .on_refused_connection = on_refused_connection,
    };
    h->h1 = http1_start(&hc, fd, err);
    if (!h->h1) {
        free(h);
        return NULL;
    }
    return h;
}

void http_quiesce(http_server *h) {
    if (h) http1_quiesce(h->h1);
}

void http_stop(http_server *h) {
    if (!h) return;
    /* Let answers that are complete on the worker side (the cancelled
     * stream's error event, the 503s of the queue) reach their clients
     * before the sockets are shut: http1_stop does not wait for them. */
    for (int i = 0; i < 300 && atomic_load(&h->inflight) > 0; i++) {
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
    http1_stop(h->h1);
    free(h);
}
