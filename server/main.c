/*
 * main.c -- ds4-server: command line, startup, signals, shutdown.
 *
 * Owns: the flags (every one is listed by --help, and in the table of
 * docs/server.md: tests/server/hardening.test.mjs compares them), the refusal to
 * listen on a non-loopback address without an API key, binding the port
 * (before the model loads: a port in use fails at once), loading the model,
 * starting the worker (which creates the session) and the HTTP front, and the clean
 * shutdown on SIGINT/SIGTERM: stop accepting, cancel the running generation
 * (its client gets an error), fail the queued ones with 503, save the live
 * session to the disk KV cache (--kv-disk-dir; done by the worker thread as
 * it stops), close the connections, free everything.  A second signal
 * during shutdown kills the process at once.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server.h"
#include "http.h"
#include "kvdisk.h"
#include "metrics.h"
#include "toolmem.h"
#include "worker.h"
#include "common/args.h"
#include "common/model_opts.h"
#include "common/model_file.h"
#include "common/steer.h"

server_ctx *g_srv;

/* The shared model/runtime flags the server takes (model_opts.h). */
#define SERVER_GROUPS (DS4_MO_MODEL | DS4_MO_CTX | DS4_MO_CHUNK | DS4_MO_SSD | DS4_MO_DIST | \
                       DS4_MO_LOOKUP | DS4_MO_MTP | DS4_MO_THINK | DS4_MO_TEMP | \
                       DS4_MO_FILTERS | DS4_MO_KV | DS4_MO_STEER)

static void server_opts_defaults(ds4_model_opts *o) {
    ds4_model_opts_init(o, "ds4-server", SERVER_GROUPS);
    o->seed_default = "0 = a random seed per request";
}

static void usage(FILE *f) {
    ds4_model_opts d;
    server_opts_defaults(&d);
    fprintf(f,
"usage: ds4-server [options]\n"
"\n"
"OpenAI- and Anthropic-compatible HTTP API for DeepSeek V4 Flash:\n"
"  GET  /, /v1/models, /v1/models/{id}, /health, /metrics\n"
"  POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages,\n"
"       /v1/messages/count_tokens\n"
"\n"
"sessions:\n"
"      --parallel N          live sessions served at once (default 1): each\n"
"                            engine step advances every generating request\n"
"                            by one token, plus a prefill chunk of one that\n"
"                            reads its prompt; a request goes to the session\n"
"                            holding the longest prefix of its prompt, else an\n"
"                            empty one, else the least recently used idle one\n"
"                            (saved to the disk KV cache first when it is on).\n"
"                            Needs N x the KV state of --ctx; --lookup and\n"
"                            --mtp-draft drafts are off when N > 1; not with\n"
"                            --dist (under --dist rank 0 serves HTTP)\n"
"      --step-tokens N       tokens one step evaluates at most with --parallel\n"
"                            > 1: the decode tokens, and the rest for the\n"
"                            prefill chunk (at least 1; default 256)\n"
"      --model-name NAME     model id reported by /v1/models (default: the\n"
"                            file name without .gguf); the aliases\n"
"                            deepseek-chat (thinking off) and deepseek-reasoner\n"
"                            (thinking on) are always accepted\n"
"      --max-tokens N        generation limit when a request sets none\n"
"                            (default 0 = the rest of the context)\n"
"      --tool-memory-max-ids N  tool-call ids whose exact sampled DSML is\n"
"                            remembered for replay (default 100000)\n"
"\n"
"network and safety:\n"
"      --host ADDR           listen address (default 127.0.0.1)\n"
"      --port N              port (default 8000; 0 = any free port, printed;\n"
"                            one in use is an error)\n"
"      --api-key KEY         require 'Authorization: Bearer KEY' or\n"
"                            'x-api-key: KEY' (default: env DS4_API_KEY)\n"
"      --insecure-no-auth    allow a non-loopback --host without an API key\n"
"      --cors                send Access-Control-* headers, answer OPTIONS,\n"
"                            accept any Origin\n"
"      --allow-host NAME     without an API key on loopback, requests must name\n"
"                            localhost, 127.0.0.1 or [::1] and the port in Host\n"
"                            (and Origin, if sent); also allow NAME (any port),\n"
"                            NAME:PORT, or * (no check); repeatable\n"
"      --max-body-bytes N    largest request body (default 33554432 = 32 MiB)\n"
"      --max-header-bytes N  room for the request line and headers\n"
"                            (default 65536)\n"
"      --header-timeout S    a new connection must send its request line and\n"
"                            headers within S seconds (default 10)\n"
"      --idle-timeout S      close idle keep-alive connections; the next\n"
"                            request's headers are due within S seconds of the\n"
"                            last answer (default 120)\n"
"      --request-timeout S   cut off a request still being received after S\n"
"                            seconds (default 300)\n"
"      --keepalive S         SSE comment after S silent seconds (default 10;\n"
"                            at most half of --idle-timeout)\n"
"      --max-connections N   simultaneous connections (default 256)\n"
"      --max-connections-per-ip N  simultaneous connections from one client\n"
"                            address (default 64; 0 = no cap)\n"
"      --max-queue N         requests waiting for the model (default 64;\n"
"                            more get 429, Anthropic 529)\n"
"\n"
"web page:\n"
"      --no-webui            \"/\" answers a page describing the server and its\n"
"                            endpoints instead of the chat page\n"
"\n"
"testing and diagnostics:\n"
"      --test-mode           TEST ONLY: honour the X-DS4-Test-Output header\n"
"                            (base64 text emitted instead of sampling; the chat\n"
"                            page sends it from localStorage \"ds4.testOutput\")\n"
"  -v, --verbose             log HTTP-level problems and ignored fields\n"
"      --trace FILE          append one JSON line per request: rendered prompt,\n"
"                            cache decision, reasoning and content, tool calls\n"
"                            and DSML parser events, finish, timings\n"
"  -h, --help                this help\n"
"      --version             print the version and exit\n");
    ds4_model_opts_help(f, &d);
    fprintf(f,
"\n"
"notes:\n"
"  The sampling, thinking and draft flags are defaults: a request's own\n"
"  fields win (\"ds4_lookup\" and \"ds4_mtp_draft\" set the drafts; lookup\n"
"  drafts also come from tool results' numbered lines without their\n"
"  numbers).  The disk KV cache options do nothing without --kv-disk-dir.\n");
}

/* A value that must not be empty (paths, names). */
static const char *nonempty(ds4_args *a) {
    const char *v = ds4_args_value(a);
    if (!*v) ds4_args_fail("ds4-server", "%s needs a value", a->flag);
    return v;
}

/* Every address the host name resolves to must be a loopback address. */
static int host_is_loopback(const char *host) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host, "0", &hints, &ai)) return 0;
    int all = 1;
    for (struct addrinfo *p = ai; p; p = p->ai_next) {
        if (p->ai_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)p->ai_addr;
            if ((ntohl(a->sin_addr.s_addr) >> 24) != 127) all = 0;
        } else if (p->ai_family == AF_INET6) {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)p->ai_addr;
            const unsigned char *b = a->sin6_addr.s6_addr;
            int lo = IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
                     (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && b[12] == 127);
            if (!lo) all = 0;
        } else {
            all = 0;
        }
    }
    freeaddrinfo(ai);
    return all;
}

static void derive_model_id(server_ctx *s) {
    if (s->cfg.model_name && *s->cfg.model_name) {
        snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.model_name);
        return;
    }
    const char *b = strrchr(s->cfg.model_path, '/');
    b = b ? b + 1 : s->cfg.model_path;
    snprintf(s->model_id, sizeof s->model_id, "%s", b);
    size_t n = strlen(s->model_id);
    if (n > 5 && !strcmp(s->model_id + n - 5, ".gguf")) s->model_id[n - 5] = 0;
}

/* Defaults, the flags, and the checks that need no file: 0, or the exit
 * status of a usage error (2). */
static int parse_config(server_ctx *srv, ds4_model_opts *mo_out, int argc, char **argv) {
    server_config *c = &srv->cfg;
    c->model_path = DS4_DEFAULT_MODEL;
    c->mtp_draft = -1;
    c->host = "127.0.0.1";
    c->port = 8000;
    c->ctx = 32768;
    c->chunk = 0;
    c->parallel = 1;
    c->step_tokens = 256;
    c->max_body_bytes = 32u << 20;
    c->max_header_bytes = 64u << 10;
    c->idle_timeout_s = 120;
    c->request_timeout_s = 300;
    c->keepalive_s = 10;
    c->max_queue = 64;
    c->max_connections = 256;
    c->max_conn_per_ip = 64;
    c->header_timeout_s = 10;
    enum { MAX_ALLOW = 64 };
    static const char *allow[MAX_ALLOW + 1];    /* --allow-host values, NULL-terminated */
    int n_allow = 0;
    c->allow_hosts = allow;
    c->tool_memory_max_ids = 100000;
    c->default_think = DS4_THINK_HIGH;
    ds4_sampler_params_default(&c->sp);
    c->kv_space_mb = 4096;
    ds4_kv_policy_default(&c->kv_policy);
    int step_set = 0;
    const char *env_key = getenv("DS4_API_KEY");
    if (env_key && *env_key) c->api_key = env_key;

    /* the shared model/runtime flags (src/common/model_opts.h), with the
     * server's defaults: seed 0 = a random seed per request */
    ds4_model_opts mo;
    server_opts_defaults(&mo);
    mo.model = c->model_path;
    ds4_args ar;
    ds4_args_init(&ar, "ds4-server", argc, argv, usage);
    while (ds4_args_next(&ar)) {
        if (ds4_model_opts_parse(&mo, &ar)) continue;
        if (ds4_args_is(&ar, NULL, "--host")) c->host = nonempty(&ar);
        else if (ds4_args_is(&ar, NULL, "--port")) { c->port = (int)ds4_args_i64(&ar, 0, 65535); }
        else if (ds4_args_is(&ar, NULL, "--parallel")) { c->parallel = (int)ds4_args_i64(&ar, 1, 256); }
        else if (ds4_args_is(&ar, NULL, "--step-tokens")) { c->step_tokens = (int)ds4_args_i64(&ar, 1, 1 << 20); step_set = 1; }
        else if (ds4_args_is(&ar, NULL, "--model-name")) c->model_name = nonempty(&ar);
        else if (ds4_args_is(&ar, NULL, "--api-key")) c->api_key = nonempty(&ar);
        else if (ds4_args_is(&ar, NULL, "--insecure-no-auth")) c->insecure_no_auth = 1;
        else if (ds4_args_is(&ar, NULL, "--cors")) c->cors = 1;
        else if (ds4_args_is(&ar, NULL, "--allow-host")) {
            const char *v = nonempty(&ar);
            if (n_allow == MAX_ALLOW) ds4_args_fail("ds4-server", "at most %d --allow-host", MAX_ALLOW);
            if (http_check_allow_host(v))
                ds4_args_fail("ds4-server", "--allow-host '%s': expected NAME, NAME:PORT, [IPv6]:PORT or *", v);
            allow[n_allow++] = v;
        }
        else if (ds4_args_is(&ar, NULL, "--header-timeout")) { c->header_timeout_s = (int)ds4_args_i64(&ar, 1, 86400); }
        else if (ds4_args_is(&ar, NULL, "--max-connections-per-ip")) { c->max_conn_per_ip = (int)ds4_args_i64(&ar, 0, 100000); }
        else if (ds4_args_is(&ar, NULL, "--max-body-bytes")) { c->max_body_bytes = (size_t)ds4_args_i64(&ar, 1024, LONG_MAX / 2); }
        else if (ds4_args_is(&ar, NULL, "--max-header-bytes")) { c->max_header_bytes = (size_t)ds4_args_i64(&ar, 4096, 1 << 26); }
        else if (ds4_args_is(&ar, NULL, "--idle-timeout")) { c->idle_timeout_s = (int)ds4_args_i64(&ar, 1, 86400); }
        else if (ds4_args_is(&ar, NULL, "--request-timeout")) { c->request_timeout_s = (int)ds4_args_i64(&ar, 1, 86400); }
        else if (ds4_args_is(&ar, NULL, "--keepalive")) { c->keepalive_s = (int)ds4_args_i64(&ar, 1, 3600); }
        else if (ds4_args_is(&ar, NULL, "--max-connections")) { c->max_connections = (int)ds4_args_i64(&ar, 1, 100000); }
        else if (ds4_args_is(&ar, NULL, "--max-queue")) { c->max_queue = (int)ds4_args_i64(&ar, 1, 1000000); }
        else if (ds4_args_is(&ar, NULL, "--tool-memory-max-ids")) { c->tool_memory_max_ids = (size_t)ds4_args_i64(&ar, 0, 1L << 40); }
        else if (ds4_args_is(&ar, NULL, "--max-tokens")) { c->default_max_tokens = (int)ds4_args_i64(&ar, 0, 1 << 24); }
        else if (ds4_args_is(&ar, NULL, "--test-mode")) c->test_mode = 1;
        else if (ds4_args_is(&ar, NULL, "--no-webui")) c->no_webui = 1;
        else if (ds4_args_is(&ar, "-v", "--verbose")) c->verbose = 1;
        else if (ds4_args_is(&ar, NULL, "--trace")) c->trace_path = nonempty(&ar);
        else ds4_args_unknown(&ar);
    }
    c->model_path = mo.model;
    c->threads = mo.threads;
    c->ctx = mo.ctx;
    c->chunk = mo.chunk;
    c->ssd_streaming = mo.ssd_streaming;
    c->ssd_cache_bytes = mo.ssd_cache_bytes;
    c->sp = mo.sp;
    c->lookup = mo.lookup;
    c->mtp_path = mo.mtp;
    c->mtp_draft = ds4_model_opts_mtp_draft(&mo);
    c->default_think = mo.think;
    c->kv_dir = mo.kv_dir;
    c->kv_space_mb = mo.kv_space_mb;
    c->kv_policy = mo.kv_policy;
    c->kv_allow_variants = mo.kv_variants;
    c->steer_path = mo.steer;
    c->steer_scale = mo.steer_scale;
    c->steer_layers = mo.steer_layers;
    const int kv_flags = mo.kv_flags, steer_scale_set = mo.steer_scale_set;

    if (c->steer_path && !steer_scale_set) { fprintf(stderr, "ds4-server: --steer needs --steer-scale S\n"); return 2; }
    if (!c->steer_path && (steer_scale_set || c->steer_layers)) {
        fprintf(stderr, "ds4-server: --steer-scale / --steer-layers need --steer FILE\n");
        return 2;
    }
    if (c->steer_path && c->kv_dir) {
        fprintf(stderr, "ds4-server: --steer cannot be combined with --kv-disk-dir (cached states were computed unsteered)\n");
        return 2;
    }
    if (mo.dist && c->parallel > 1) {
        /* the ranks serve one session's passes at a time; a batched step
         * over MPI is not built (nor tested), so say so instead */
        fprintf(stderr, "ds4-server: --parallel > 1 cannot be combined with --dist (use --parallel 1)\n");
        return 2;
    }
    if (step_set && c->parallel == 1)
        fprintf(stderr, "ds4-server: note: --step-tokens does nothing without --parallel N > 1\n");
    if (kv_flags && !c->kv_dir)
        fprintf(stderr, "ds4-server: note: the --kv-* options do nothing without --kv-disk-dir\n");

    /* clients and proxies time out silent streams: keep-alive comments
     * come well within the idle timeout a client may also apply */
    if (c->keepalive_s * 2 > c->idle_timeout_s)
        c->keepalive_s = c->idle_timeout_s / 2 > 0 ? c->idle_timeout_s / 2 : 1;

    if (!host_is_loopback(c->host) && !(c->api_key && *c->api_key) && !c->insecure_no_auth) {
        fprintf(stderr, "ds4-server: refusing to listen on %s (not a loopback address) without "
                "an API key: set --api-key / DS4_API_KEY, or pass --insecure-no-auth\n", c->host);
        return 2;
    }
    *mo_out = mo;
    return 0;
}

/* A model that does not fit in RAM pages its weights from disk over and
 * over: say so with the plan instead of looking hung.  0, or 1 when the
 * --parallel sessions cannot fit at all. */
static int check_memory(server_ctx *srv) {
    server_config *c = &srv->cfg;
    if (!c->ssd_streaming) {
        ds4_mem_plan plan;
        if (ds4_memory_plan(c->model_path, c->ctx, c->threads, &plan, NULL) == DS4_OK) {
            /* --parallel N: N sessions, each with its KV state and scratch.
             * The weights are mmap'd (they page, slowly); the sessions'
             * memory cannot: more than is available is an error */
            uint64_t per = plan.kv + plan.scratch;
            uint64_t sessions = per * (uint64_t)c->parallel;
            if (c->parallel > 1 && plan.mem_available && sessions > plan.mem_available) {
                fprintf(stderr, "ds4-server: --parallel %d needs %.1f GiB for its sessions "
                        "(%d x %.2f GiB: KV state at --ctx %d + scratch) but %.1f GiB is "
                        "available: lower --parallel or --ctx\n", c->parallel,
                        sessions / 1073741824.0, c->parallel, per / 1073741824.0, c->ctx,
                        plan.mem_available / 1073741824.0);
                return 1;
            }
            plan.total += sessions - per;
            if (plan.mem_available && plan.total > plan.mem_available) {
                fprintf(stderr, "ds4-server: warning: this run needs more memory than is available:\n");
                ds4_memory_plan_print(&plan, stderr);
                if (c->parallel > 1)
                    fprintf(stderr, "  (with --parallel %d: %.1f GiB more for the other sessions)\n",
                            c->parallel, (sessions - per) / 1073741824.0);
            }
        }
    }
    return 0;
}

/* Load the model and what goes with it (MTP check, steering direction,
 * trace file).  0, or the exit status. */
static int load_model(server_ctx *srv, const ds4_model_opts *mo, ds4_model_info *info) {
    server_config *c = &srv->cfg;
    char *err = NULL;
    ds4_model_params mp;
    ds4_model_opts_model_params(mo, &mp);
    srv->model = ds4_model_load(c->model_path, &mp, &err);
    if (!srv->model) {
        fprintf(stderr, "ds4-server: %s\n", err ? err : "cannot load the model");
        free(err);
        return 1;
    }
    {
        ds4_expert_cache_stats x;
        ds4_model_expert_cache_stats(srv->model, &x);
        if (x.enabled)
            fprintf(stderr, "ds4-server: ssd streaming: expert cache %.1f MiB = %llu slots of %.2f MiB "
                    "(%.1f %% of the %llu routed expert slices), %s reads\n", x.cache_bytes / 1048576.0,
                    (unsigned long long)x.slots, x.slot_bytes / 1048576.0,
                    100.0 * (double)x.slots / (double)x.n_slices, (unsigned long long)x.n_slices,
                    x.direct_io ? "O_DIRECT" : "buffered");
    }
    c->has_mtp = ds4_model_has_mtp(srv->model);
    if (c->mtp_draft > 0 && !c->has_mtp) {
        fprintf(stderr, "ds4-server: --mtp-draft: %s has no MTP block (mtp.0.* tensors, or a GLM NextN "
                "layer); name one with --mtp FILE\n", c->model_path);
        ds4_model_free(srv->model);
        return 1;
    }
    srv->tok = ds4_model_tokenizer(srv->model);
    srv->sp = ds4_tok_special(srv->tok);
    ds4_model_get_info(srv->model, info);
    srv->n_vocab = info->n_vocab;
    srv->started = util_unix_time();
    derive_model_id(srv);
    srv->ctx = c->ctx;
    g_srv = srv;
    if (c->steer_path) {
        ds4_steer_meta meta;
        if (ds4_steer_load(c->steer_path, info->n_embd, &srv->steer, &meta, &err)) {
            fprintf(stderr, "ds4-server: %s\n", err ? err : "cannot load the direction");
            free(err);
            ds4_model_free(srv->model);
            return 1;
        }
        srv->steer_l0 = meta.layer_first;
        srv->steer_l1 = meta.layer_last;
        if ((c->steer_layers && ds4_steer_parse_layers(c->steer_layers, info->n_layer, &srv->steer_l0, &srv->steer_l1)) ||
            srv->steer_l0 < 0 || srv->steer_l1 >= info->n_layer || srv->steer_l0 > srv->steer_l1) {
            fprintf(stderr, "ds4-server: --steer-layers: bad layers (expected A:B with 0 <= A <= B < %d)\n", info->n_layer);
            free(srv->steer);
            ds4_model_free(srv->model);
            return 2;
        }
        if (strcmp(meta.model, info->name))
            log_msg("warning: the steering direction was computed on '%s', this model is '%s'", meta.model, info->name);
    }
    if (c->trace_path && !(srv->trace = fopen(c->trace_path, "a"))) {
        fprintf(stderr, "ds4-server: cannot open %s: %s\n", c->trace_path, strerror(errno));
        free(srv->steer);
        ds4_model_free(srv->model);
        return 1;
    }

    return 0;
}

/* Start the worker and HTTP, serve until SIGINT/SIGTERM, stop in order.
 * Returns the exit status. */
static int serve(server_ctx *srv, const ds4_model_info *info, int lfd, int port, sigset_t *sigs) {
    server_config *c = &srv->cfg;
    char *err = NULL;
    int rc = 1;
    http_server *h = NULL;
    srv->m = metrics_new();
    srv->tm = toolmem_new(c->tool_memory_max_ids);
    if (!srv->m || !srv->tm) { fprintf(stderr, "ds4-server: out of memory\n"); close(lfd); goto out; }
    srv->w = worker_start(srv, &err);
    /* after the worker opened (and checked) the cache directory */
    if (srv->w && c->kv_dir && !(srv->kvf = kvdisk_finder_open(srv, &err))) {
        fprintf(stderr, "ds4-server: %s\n", err ? err : "cannot open the disk KV cache");
        free(err);
        close(lfd);
        goto out;
    }
    if (!srv->w) {
        fprintf(stderr, "ds4-server: %s\n", err ? err : "cannot start the worker");
        free(err);
        close(lfd);
        goto out;
    }
    h = http_start(srv, lfd, port, &err);
    if (!h) {
        fprintf(stderr, "ds4-server: %s\n", err ? err : "cannot start HTTP");
        free(err);
        goto out;
    }
    log_msg("%s: %d layers, vocab %d, context %d tokens%s%s", srv->model_id, info->n_layer,
            info->n_vocab, srv->ctx, c->test_mode ? ", TEST MODE (X-DS4-Test-Output honoured)" : "",
            c->api_key ? ", API key required" : "");
    if (strstr(info->name, "RANDOM") || strstr(info->name, "random") || strstr(info->name, "tiny"))
        log_msg("note: %s looks like a synthetic random-weight model: its output is noise",
                info->name);
    fprintf(stderr, "ds4-server: listening on http://%s%s%s:%d\n",
            strchr(c->host, ':') ? "[" : "", c->host, strchr(c->host, ':') ? "]" : "", port);
    fflush(stderr);

    int sig = 0;
    sigwait(sigs, &sig);
    /* a second signal ends the process immediately */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, sigs, NULL);
    log_msg("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_quiesce(h);
    worker_stop(srv->w);
    http_stop(h);
    h = NULL;
    rc = ds4_model_broken(srv->model) ? 1 : 0;   /* the worker stopped it (worker.c check_model) */
out:
    http_stop(h);
    worker_free(srv->w);
    kvdisk_finder_close(srv->kvf);
    toolmem_free(srv->tm);
    metrics_free(srv->m);
    ds4_model_free(srv->model);
    if (srv->trace) fclose(srv->trace);
    free(srv->steer);
    g_srv = NULL;
    if (rc == 0) log_msg("stopped");
    return rc;
}

int main(int argc, char **argv) {
    server_ctx srv;
    memset(&srv, 0, sizeof srv);
    server_config *c = &srv.cfg;
    ds4_model_opts mo;
    int rc = parse_config(&srv, &mo, argc, argv);
    if (rc) return rc;
    /* before the port and the memory plan: the most basic mistake first
     * (--dist: the ranks may name files of their own) */
    if (!mo.dist && ds4_model_file_check("ds4-server", c->model_path)) return 1;
    {
        /* --dist: ranks > 0 serve rank 0; only rank 0 listens */
        char *derr = NULL;
        int wrc = 0, r = ds4_model_opts_start_dist(&mo, &argc, &argv, &wrc, &derr);
        if (r < 0) { fprintf(stderr, "ds4-server: %s\n", derr ? derr : "cannot start MPI"); free(derr); return 2; }
        if (r > 0) return wrc;
    }
    if (util_random_init()) {
        fprintf(stderr, "ds4-server: cannot open /dev/urandom\n");
        return 1;
    }

    /* Signals: blocked in every thread (inherited), taken by sigwait below. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    /* the port first: a second server on a port in use fails before it
     * spends time loading the model */
    char *err = NULL;
    int port = 0;
    int lfd = http_listen(&srv, &port, &err);
    if (lfd < 0) {
        fprintf(stderr, "ds4-server: %s\n", err ? err : "cannot listen");
        free(err);
        return 1;
    }
    ds4_model_info info;
    if (check_memory(&srv) || (rc = load_model(&srv, &mo, &info))) {
        close(lfd);
        return rc ? rc : 1;
    }
    return serve(&srv, &info, lfd, port, &sigs);
}
