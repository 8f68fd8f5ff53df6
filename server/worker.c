/*
 * worker.c -- the job queue and the single inference thread: for each job,
 * the steps from a prepared request to its finish event.
 *
 * Owns: the ds4_session (only this thread touches it), the queue (ordered
 * by arrival: job->arrived, when the request's first bytes came, not when
 * its parsing finished -- a large body that trickles in is parsed last but
 * keeps its place), and the order of a job's steps: tool-call DSML from
 * the disk cache, the reuse plan (reuse.c), the disk cache lookup and
 * saves (kvdisk.c), the prefill (ds4_eval: chunks, cancellation, disk and
 * RAM checkpoints), the generation (gen.c), metrics and the log line.
 * Must not: parse requests (conv.c), shape responses (api_*.c, reached
 * only through job_event), or decide reuse or disk policy itself.
 *
 * Cancellation: connection threads set job->cancel when their client goes
 * away; the prefill checks it between chunks through the progress
 * callback, the decode loop before every token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "gen.h"
#include "job.h"
#include "kvdisk.h"
#include "metrics.h"
#include "reuse.h"
#include "toolmem.h"

/* RAM checkpoints at the end of each prompt and this many tokens before
 * it: a retry restores the end, a thinking-mode next turn (its rendering
 * replaces the final "<think>" by "</think>answer...") the earlier one.
 * One token is exactly that divergence; the split it puts in the prefill
 * costs about one decode step (a pass over the weights for one token),
 * more tokens would cost more experts and buy nothing the format needs. */
#define REWIND_TAIL 1

struct worker {
    server_ctx *srv;
    ds4_session *s;
    kvdisk *kv;          /* NULL: no disk cache */
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    int depth;
    int stopping;
    job *current;
    uint64_t seq;
    ds4_buf live;        /* scratch: the text of the live session */
};

/* ------------------------------------------------------------------------ */
/* one job                                                                   */
/* ------------------------------------------------------------------------ */

static int on_progress(void *ud, int done, int total) {
    (void)done; (void)total;
    job *j = ud;
    return atomic_load(&j->cancel) != CANCEL_NONE;
}

/* A closed tool-call block: the tool memory (and the disk cache's entries
 * for the live session) remember its exact DSML and the reasoning before. */
static void on_block(void *ud, const gen_result *r, int first, const char *dsml, size_t len) {
    worker *w = ud;
    int n = r->n_calls - first;
    if (n <= 0) return;
    const char **ids = calloc((size_t)n, sizeof *ids);
    const char **names = calloc((size_t)n, sizeof *names);
    const char **args = calloc((size_t)n, sizeof *args);
    if (ids && names && args) {
        for (int i = 0; i < n; i++) {
            const gen_call *c = &r->calls[first + i];
            ids[i] = c->id;
            names[i] = c->name;
            args[i] = c->args.p ? c->args.p : "";
        }
        toolmem_put(w->srv->tm, ids, names, args, n, dsml, len, r->reasoning.p, r->reasoning.n);
        for (int i = 0; w->kv && i < n; i++)
            kvdisk_tools_add(w->kv, ids[i], dsml, len, r->reasoning.p, r->reasoning.n);
    }
    free(ids); free(names); free(args);
}

typedef struct {
    int disk, disk_retok;        /* restored from the disk cache */
    int rewound;                 /* went back to a RAM checkpoint */
    int evaluated;
    reuse_plan plan;
} prep;

/* Steps 1-2: bring the session to the state the prompt continues (live,
 * RAM checkpoint, disk, or empty) and leave the tokens to evaluate in
 * p->plan.suffix. */
static void prepare_session(worker *w, job *j, prep *p) {
    request *rq = j->rq;
    ds4_session *s = w->s;
    const int n_sess = ds4_session_n_tokens(s);
    reuse_decide(w->srv, s, rq, &w->live, &p->plan);
    reuse_plan *pl = &p->plan;
    if (w->kv) {
        /* a request that does not continue the live session replaces it:
         * save it first (evict); then a saved state that covers more of
         * the prompt than what is kept wins */
        if (!pl->live_prefix && n_sess > 0) kvdisk_save(w->kv, DS4_KV_EVICT);
        ds4_tokens todo = { 0 };
        p->disk = kvdisk_lookup(w->kv, rq, pl->keep, &todo, &p->disk_retok);
        if (p->disk > 0) {
            ds4_tokens_free(&pl->suffix);
            pl->suffix = todo;
            pl->keep = p->disk;
            pl->rewind_to = pl->text_hit = pl->retok = 0;
        } else {
            ds4_tokens_free(&todo);
        }
    }
    if (pl->rewind_to > 0) {
        if (ds4_session_rewind(s, pl->rewind_to) == DS4_OK) {
            p->rewound = 1;
            if (w->kv) kvdisk_session_replaced(w->kv);
        } else {
            pl->keep = 0;
        }
    }
    if (pl->keep == 0) {
        /* nothing kept: the whole prompt from an empty session */
        ds4_session_reset(s);
        if (w->kv) kvdisk_session_replaced(w->kv);
        pl->suffix.n = 0;
        for (size_t i = 0; i < rq->tokens.n; i++) ds4_tokens_push(&pl->suffix, rq->tokens.v[i]);
    }
}

static void eval_params(worker *w, ds4_eval_params *ep) {
    ds4_eval_params_default(ep);
    if (w->kv) {
        ep->kv_policy = kvdisk_policy(w->kv);
        ep->save = kvdisk_save_cb;
        ep->save_ud = w->kv;
    }
}

/* Step 3: the prefill.  Returns FIN_NONE, or why the job ends here. */
static finish_kind prefill(worker *w, job *j, prep *p) {
    gen_result *res = &j->res;
    ds4_eval_params ep;
    eval_params(w, &ep);
    ep.progress = on_progress;
    ep.progress_ud = j;
    ep.cold = 1;
    ep.ram_tail = REWIND_TAIL;
    double t0 = util_now();
    int before = ds4_session_n_tokens(w->s);
    int rc = ds4_eval(w->s, p->plan.suffix.v, (int)p->plan.suffix.n, &ep);
    res->prefill_s = util_now() - t0;
    p->evaluated = ds4_session_n_tokens(w->s) - before;
    if (p->evaluated < 0) p->evaluated = 0;
    if (rc == DS4_OK) return FIN_NONE;
    if (rc == DS4_ECANCEL) return FIN_CANCEL;
    if (rc == DS4_ECTX) {
        api_err_set(&res->err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                    "This model's maximum context length is %d tokens; the prompt needs %d.",
                    w->srv->ctx, res->prompt_tokens);
    } else {
        api_err_set(&res->err, 500, "server_error", NULL, NULL, "prefill failed: %s",
                    ds4_strerror(rc));
    }
    return FIN_ERROR;
}

static const char *const finish_names[] = { "none", "stop", "length", "stop_sequence", "tool_calls",
                                            "cancelled", "error", "malformed_tool_call" };

/* --trace: one JSON line per request, written by this (the only) worker
 * thread before the answer is released. */
static void trace_job(worker *w, job *j, const prep *p, finish_kind fin) {
    server_ctx *srv = w->srv;
    request *rq = j->rq;
    gen_result *res = &j->res;
    json_t *o = json_object(), *cache = json_object(), *calls = json_array();
    json_object_set_new(o, "time", json_integer(util_unix_time()));
    json_object_set_new(o, "job", json_integer((json_int_t)j->seq));
    json_object_set_new(o, "api", json_string(endpoint_label(rq->api == API_CHAT ? EP_CHAT :
        rq->api == API_COMPLETIONS ? EP_COMPLETIONS : rq->api == API_RESPONSES ? EP_RESPONSES : EP_MESSAGES)));
    json_object_set_new(o, "prompt", jstr(rq->prompt.p, rq->prompt.n));
    json_object_set_new(o, "prompt_tokens", json_integer(res->prompt_tokens));
    json_object_set_new(cache, "reused_tokens", json_integer(res->cached_tokens));
    json_object_set_new(cache, "source", json_string(res->cached_tokens == 0 ? "none" : p->disk > 0 ? "disk" :
                                                    p->rewound ? "RAM checkpoint" :
                                                    p->plan.text_hit ? "live session (text match)" :
                                                    "live session (token prefix)"));
    json_object_set_new(cache, "retokenized", json_boolean(p->disk > 0 ? p->disk_retok :
                                                           p->plan.text_hit && p->plan.retok));
    json_object_set_new(cache, "evaluated_tokens", json_integer(p->evaluated));
    json_object_set_new(cache, "from_scratch", json_boolean(res->cached_tokens == 0));
    json_object_set_new(o, "cache", cache);
    json_object_set_new(o, "reasoning", jstr(res->reasoning.p, res->reasoning.n));
    json_object_set_new(o, "content", jstr(res->content.p, res->content.n));
    for (int i = 0; i < res->n_calls; i++) {
        json_t *c = json_object();
        json_object_set_new(c, "name", jcstr(res->calls[i].name));
        json_object_set_new(c, "arguments", jstr(res->calls[i].args.p, res->calls[i].args.n));
        json_array_append_new(calls, c);
    }
    json_object_set_new(o, "tool_calls", calls);
    json_object_set_new(o, "tool_parser_events", res->trace_ev ? json_incref(res->trace_ev) : json_array());
    json_object_set_new(o, "completion_tokens", json_integer(res->completion_tokens));
    json_object_set_new(o, "reasoning_tokens", json_integer(res->reasoning_tokens));
    json_object_set_new(o, "finish", json_string(finish_names[fin]));
    if (fin == FIN_ERROR || fin == FIN_TOOL_ERROR) json_object_set_new(o, "error", jcstr(res->err.message));
    json_object_set_new(o, "prefill_s", json_real(res->prefill_s));
    json_object_set_new(o, "decode_s", json_real(res->decode_s));
    char *line = jdump(o);
    if (line) { fprintf(srv->trace, "%s\n", line); fflush(srv->trace); }
    free(line);
    json_decref(o);
}

/* Step 5: metrics (before the answer is released: a client that reads
 * /metrics right after its response must see this job), the finish event
 * and the log line. */
static void finish_job(worker *w, job *j, const prep *p, finish_kind fin) {
    gen_result *res = &j->res;
    request *rq = j->rq;
    if (fin == FIN_CANCEL && atomic_load(&j->cancel) == CANCEL_SHUTDOWN) {
        fin = FIN_ERROR;
        api_err_set(&res->err, 503, "server_error", NULL, NULL, "the server is shutting down");
    }
    res->finish = fin;
    if (w->srv->trace) trace_job(w, j, p, fin);
    metrics_job m = {
        .prompt_tokens = res->prompt_tokens, .cached_tokens = res->cached_tokens,
        .disk_tokens = p->disk > 0 ? res->cached_tokens : 0,
        .disk_retokenized = p->disk > 0 && p->disk_retok,
        .evaluated_tokens = p->evaluated, .generated_tokens = res->completion_tokens,
        .prefill_s = res->prefill_s, .decode_s = res->decode_s,
        .reuse_hit = res->cached_tokens > 0 && p->disk == 0,
        .text_reuse = p->plan.text_hit && res->cached_tokens > 0,
        .retokenized = p->plan.text_hit && p->plan.retok, .tool_calls = res->n_calls,
        .cancelled = fin == FIN_CANCEL ? CANCEL_CLIENT :
                     atomic_load(&j->cancel) == CANCEL_SHUTDOWN ? CANCEL_SHUTDOWN : 0,
        .session_tokens = ds4_session_n_tokens(w->s),
        .spec = res->spec,
    };
    metrics_job_done(w->srv->m, &m);
    job_event(j, EV_FINISH, 0, NULL, 0);
    job_finish_stream(j);

    static const char *const fname[] = { "none", "stop", "length", "stop_sequence", "tool_calls",
                                         "cancelled", "error", "malformed_tool_call" };
    int err = fin == FIN_ERROR || fin == FIN_TOOL_ERROR;
    log_msg("job %llu %s: prompt %d (cached %d%s, evaluated %d, %.0f tok/s), generated %d "
            "(%.1f tok/s), %s%s%s", (unsigned long long)j->seq,
            endpoint_label(rq->api == API_CHAT ? EP_CHAT : rq->api == API_COMPLETIONS ?
                           EP_COMPLETIONS : rq->api == API_RESPONSES ? EP_RESPONSES : EP_MESSAGES),
            res->prompt_tokens, res->cached_tokens,
            p->disk > 0 ? " from disk" : p->rewound ? " from a RAM checkpoint" : "", p->evaluated,
            res->prefill_s > 0 ? p->evaluated / res->prefill_s : 0.0, res->completion_tokens,
            res->decode_s > 0 ? res->completion_tokens / res->decode_s : 0.0, fname[fin],
            err ? ": " : "", err ? res->err.message : "");
}

static void run_job(worker *w, job *j) {
    request *rq = j->rq;
    gen_result *res = &j->res;
    /* 0. Tool-call turns the tool memory did not know: the disk cache may
     * hold their exact DSML (then the prompt is rendered again). */
    if (w->kv && rq->tool_misses > 0 && kvdisk_resolve_tools(w->kv, rq, &res->err) < 0) {
        res->finish = FIN_ERROR;
        job_event(j, EV_FINISH, 0, NULL, 0);
        job_finish_stream(j);
        metrics_job m0 = { .session_tokens = ds4_session_n_tokens(w->s) };
        metrics_job_done(w->srv->m, &m0);
        log_msg("job %llu: %s", (unsigned long long)j->seq, res->err.message);
        return;
    }
    /* 1-2. What the prompt keeps. */
    prep p = { 0 };
    prepare_session(w, j, &p);
    res->cached_tokens = p.plan.keep;
    res->prompt_tokens = p.plan.keep + (int)p.plan.suffix.n;
    int room = w->srv->ctx - res->prompt_tokens;
    int max_gen = rq->max_tokens > 0 && rq->max_tokens < room ? rq->max_tokens : room;
    /* from here on the live session is this request's */
    if (w->kv) kvdisk_tools_from_request(w->kv, rq);
    job_event(j, EV_START, 0, NULL, 0);

    /* 3. Prefill, 4. generate. */
    finish_kind fin = prefill(w, j, &p);
    if (fin == FIN_NONE) {
        ds4_eval_params ep;
        eval_params(w, &ep);
        gen_env env = { w->srv, w->s, &ep, on_block, w };
        double t1 = util_now();
        fin = gen_run(&env, j, max_gen);
        res->decode_s = util_now() - t1;
    }
    finish_job(w, j, &p, fin);
    reuse_plan_free(&p.plan);
}

/* ------------------------------------------------------------------------ */
/* the thread and the queue                                                  */
/* ------------------------------------------------------------------------ */

static void *worker_main(void *arg) {
    worker *w = arg;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
        if (w->stopping) { pthread_mutex_unlock(&w->mu); break; }
        job *j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        j->next = NULL;
        w->depth--;
        w->current = j;
        metrics_queue(w->srv->m, w->depth);
        pthread_mutex_unlock(&w->mu);

        metrics_busy(w->srv->m, 1);
        if (atomic_load(&j->cancel) != CANCEL_NONE) {
            /* the client left while queued: nothing to do */
            j->res.finish = FIN_CANCEL;
            job_event(j, EV_FINISH, 0, NULL, 0);
            job_finish_stream(j);
            metrics_job m = { .cancelled = CANCEL_CLIENT,
                              .session_tokens = ds4_session_n_tokens(w->s),
                              .reuse_hit = 0 };
            metrics_job_done(w->srv->m, &m);
        } else {
            run_job(w, j);
        }
        metrics_busy(w->srv->m, 0);

        pthread_mutex_lock(&w->mu);
        w->current = NULL;
        pthread_mutex_unlock(&w->mu);
        job_unref(j);
    }
    /* clean exit: keep the live conversation for the next start */
    if (w->kv) kvdisk_save(w->kv, DS4_KV_SHUTDOWN);
    return NULL;
}

worker *worker_start(server_ctx *srv, char **err) {
    worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->srv = srv;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = srv->cfg.ctx;
    if (srv->cfg.chunk > 0) sp.prefill_chunk = srv->cfg.chunk;
    w->s = ds4_session_new(srv->model, &sp, err);
    if (!w->s) { worker_free(w); return NULL; }
    if (srv->steer && ds4_session_set_steering(w->s, srv->steer, (float)srv->cfg.steer_scale,
                                               srv->steer_l0, srv->steer_l1) != DS4_OK) {
        if (err) *err = strdup("--steer: bad layers or scale");
        worker_free(w);
        return NULL;
    }
    srv->ctx = ds4_session_ctx_size(w->s);
    if (srv->cfg.kv_dir) {
        /* opened here, driven only by the worker thread from now on */
        w->kv = kvdisk_open(srv, w->s, err);
        if (!w->kv) { worker_free(w); return NULL; }
    }
    if (pthread_create(&w->th, NULL, worker_main, w)) {
        if (err) *err = strdup("cannot start the inference thread");
        worker_free(w);
        return NULL;
    }
    w->started = 1;
    return w;
}

int worker_submit(worker *w, job *j) {
    pthread_mutex_lock(&w->mu);
    if (w->stopping) { pthread_mutex_unlock(&w->mu); return -2; }
    if (w->depth >= w->srv->cfg.max_queue) { pthread_mutex_unlock(&w->mu); return -1; }
    job_ref(j);
    j->seq = ++w->seq;
    if (j->arrived <= 0) j->arrived = util_now();
    /* by arrival: after every queued job that arrived no later than it */
    job **at = &w->head;
    while (*at && (*at)->arrived <= j->arrived) at = &(*at)->next;
    j->next = *at;
    *at = j;
    if (!j->next) w->tail = j;
    w->depth++;
    metrics_queue(w->srv->m, w->depth);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

int worker_queue_depth(worker *w) {
    pthread_mutex_lock(&w->mu);
    int d = w->depth;
    pthread_mutex_unlock(&w->mu);
    return d;
}

void worker_stop(worker *w) {
    if (!w || !w->started) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    if (w->current) atomic_store(&w->current->cancel, CANCEL_SHUTDOWN);
    job *q = w->head;
    w->head = w->tail = NULL;
    w->depth = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    while (q) {
        job *n = q->next;
        job_fail(q, 503, "server_error", "the server is shutting down");
        job_unref(q);
        q = n;
    }
    pthread_join(w->th, NULL);
    w->started = 0;
}

void worker_free(worker *w) {
    if (!w) return;
    worker_stop(w);
    kvdisk_close(w->kv);
    ds4_session_free(w->s);
    ds4_buf_free(&w->live);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
