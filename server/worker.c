/*
 * worker.c -- the job queue and the single inference thread: for each job,
 * the steps from a prepared request to its finish event.
 *
 * With --parallel N it owns N sessions and runs jobs concurrently in
 * batched steps (see "--parallel N" below); with N = 1 one job at a time.
 *
 * Owns: the ds4_sessions (only this thread touches them), the queue (ordered
 * by arrival: job->arrived, when the request's first bytes came, not when
 * its parsing finished -- a large body that trickles in is parsed last but
 * keeps its place), and the order of a job's steps: what the session
 * keeps (ds4_session_sync_begin: live session, RAM checkpoint or disk
 * state; kvdisk.c gives it the cache's policy and saves), the prefill (ds4_eval: chunks, cancellation, disk and
 * RAM checkpoints), the generation (gen.c), metrics and the log line.
 * Must not: parse requests (conv.c), shape responses (api_*.c, reached
 * only through job_event), or decide reuse or disk policy itself.
 *
 * Cancellation: connection threads set job->cancel when their client goes
 * away; the prefill checks it between chunks through the progress
 * callback, the decode loop before every token.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"
#include "gen.h"
#include "job.h"
#include "kvdisk.h"
#include "ds4_sync.h"
#include "metrics.h"
#include "toolmem.h"

/* RAM checkpoints at the end of each prompt and this many tokens before
 * it: a retry restores the end, a thinking-mode next turn (its rendering
 * replaces the final "<think>" by "</think>answer...") the earlier one.
 * One token is exactly that divergence; the split it puts in the prefill
 * costs about one decode step (a pass over the weights for one token),
 * more tokens would cost more experts and buy nothing the format needs. */
#define REWIND_TAIL 1

typedef struct {
    int disk, disk_retok;        /* restored from the disk cache */
    int rewound;                 /* went back to a RAM checkpoint */
    int evaluated;
    ds4_sync_result sync;        /* what was kept, and the rest to evaluate */
} prep;

/* --parallel > 1: one live session and what it is doing. */
typedef enum { SLOT_IDLE, SLOT_PREFILL, SLOT_GEN } slot_state;

typedef struct {
    ds4_session *s;
    kvdisk_live *kl;     /* the disk cache's view of it (NULL: no cache) */
    job *j;              /* the job it serves (NULL when idle; set under w->mu) */
    slot_state st;
    uint64_t used;       /* when it last finished a job (LRU) */
    uint64_t admitted;   /* when it took its job (the prefill order) */
    prep p;
    /* the prefill: tokens [start, end) of the session are p.sync.rest */
    int start, end, cold;
    int max_gen;
    double t0, t1;
    ds4_eval_params ep;
    gen_env env;
    gen *g;
    int32_t tok;         /* the token this step evaluates (decode) */
    int frontier;        /* the disk checkpoint this step's token reaches, or 0 */
    int n_step;          /* tokens this step evaluates for it (0: not in it) */
} slot;

struct worker {
    server_ctx *srv;
    ds4_session *s;      /* the session of --parallel 1 (= slots[0].s) */
    slot *slots;
    int n_slots;
    uint64_t clock;      /* admissions and finishes, for LRU and prefill order */
    kvdisk *kv;          /* NULL: no disk cache */
    ds4_batch_item *items;   /* a step's batch (n_slots) */
    slot **owners;           /* the slot of each item */
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    int depth;
    int stopping;
    job *current;
    uint64_t seq;
    int model_failed;    /* check_model stopped the server */
};

/* ------------------------------------------------------------------------ */
/* one job                                                                   */
/* ------------------------------------------------------------------------ */

/* The model's file was truncated (or became unreadable) under the run
 * (ds4.h, ds4_model_broken): the job that hit it has its answer, a 500
 * naming the file, tensor and bytes, and nothing can be evaluated any
 * more.  The server then stops as SIGTERM stops it (the queued jobs get
 * 503, answers already made reach their clients, the connections close)
 * and exits with status 1 (main.c): a supervisor restarts it on an intact
 * file, where a server that stayed up would fail every request while
 * looking alive to its health checks. */
static void check_model(worker *w) {
    if (w->model_failed || !ds4_model_broken(w->srv->model)) return;
    w->model_failed = 1;
    log_msg("fatal: %s; stopping the server", ds4_model_error(w->srv->model));
    kill(getpid(), SIGTERM);
}

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

/* Steps 1-2: bring the session to the state the prompt continues (live,
 * RAM checkpoint, disk, or empty) and leave the tokens to evaluate in
 * p->sync.rest. */
static int prepare_session(worker *w, ds4_session *s, job *j, prep *p) {
    request *rq = j->rq;
    ds4_sync_params sp;
    ds4_sync_params_default(&sp);
    sp.tok = w->srv->tok;
    sp.text = rq->raw_ids ? NULL : rq->prompt.p ? rq->prompt.p : "";
    sp.text_len = rq->raw_ids ? 0 : rq->prompt.n;
    sp.ctx = w->srv->ctx;
    if (w->kv) kvdisk_sync_params(w->kv, &sp);
    int rc = ds4_session_sync_begin(s, rq->tokens.v, (int)rq->tokens.n, &sp, &p->sync);
    if (w->kv) kvdisk_publish(w->kv);
    p->disk = p->sync.source == DS4_SYNC_DISK ? p->sync.kept : 0;
    p->disk_retok = p->disk > 0 && p->sync.retok;
    p->rewound = p->sync.source == DS4_SYNC_RAM;
    if (rc) {
        /* never evaluate a truncated prompt */
        api_err_set(&j->res.err, 500, "server_error", NULL, NULL,
                    "out of memory preparing the prompt");
        return -1;
    }
    return 0;
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
    int rc = ds4_eval(w->s, p->sync.rest.v, (int)p->sync.rest.n, &ep);
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
                    ds4_model_strerror(w->srv->model, rc));
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
                                                    p->sync.text_hit ? "live session (text match)" :
                                                    "live session (token prefix)"));
    json_object_set_new(cache, "retokenized", json_boolean(p->disk > 0 ? p->disk_retok :
                                                           p->sync.text_hit && p->sync.retok));
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
static void finish_job(worker *w, ds4_session *s, job *j, const prep *p, finish_kind fin) {
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
        .text_reuse = p->sync.text_hit && res->cached_tokens > 0,
        .retokenized = p->sync.text_hit && p->sync.retok, .tool_calls = res->n_calls,
        .cancelled = fin == FIN_CANCEL ? CANCEL_CLIENT :
                     atomic_load(&j->cancel) == CANCEL_SHUTDOWN ? CANCEL_SHUTDOWN : 0,
        .session_tokens = ds4_session_n_tokens(s),
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
    /* 1-2. What the prompt keeps. */
    prep p = { 0 };
    if (prepare_session(w, w->s, j, &p)) {
        res->finish = FIN_ERROR;
        job_event(j, EV_FINISH, 0, NULL, 0);
        job_finish_stream(j);
        metrics_job m0 = { .session_tokens = ds4_session_n_tokens(w->s) };
        metrics_job_done(w->srv->m, &m0);
        log_msg("job %llu: %s", (unsigned long long)j->seq, res->err.message);
        ds4_sync_result_free(&p.sync);
        return;
    }
    res->cached_tokens = p.sync.kept;
    res->prompt_tokens = p.sync.kept + (int)p.sync.rest.n;
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
    finish_job(w, w->s, j, &p, fin);
    ds4_sync_result_free(&p.sync);
}

/* ------------------------------------------------------------------------ */
/* --parallel N: N live sessions stepped together                           */
/* ------------------------------------------------------------------------ */
/*
 * Each step builds one ds4_session_eval_batch: the chosen token of every
 * generating job (gen.c as a state machine: gen_next chooses and sends a
 * token, gen_evaluated takes the result) and, with the step's token budget
 * left over, one prefill chunk of the job that was admitted first among
 * those still reading their prompt.  A chunk stops where ds4_eval would
 * stop (the disk cache's cold point and continued frontiers, the RAM
 * checkpoint REWIND_TAIL tokens before the prompt's end), so the saves and
 * checkpoints are those of --parallel 1 and a session's state and logits
 * come out bit-identical to it.  Cancellation is checked per job before
 * each step: a client that left frees its slot at the next step.
 */

static void slot_sessions_metrics(worker *w) {
    int live = 0, busy = 0;
    for (int i = 0; i < w->n_slots; i++) {
        if (ds4_session_n_tokens(w->slots[i].s) > 0) live++;
        if (w->slots[i].st != SLOT_IDLE) busy++;
    }
    metrics_sessions(w->srv->m, w->n_slots, live, busy);
    metrics_busy(w->srv->m, busy > 0);
}

/* The session for a request: the idle one whose state the prompt can
 * continue with the longest kept prefix (an agent's next turn lands on its
 * own state), else an empty one, else the least recently used (its state
 * is replaced: prepare_session saves it to the disk cache first).  A live
 * session counts as a match when the prompt continues all of it, when a
 * RAM checkpoint lies within the common prefix (a retry, a thinking-mode
 * next turn), or when the common prefix is at least half of it (a text
 * hit: earlier answer tokens split differently): every prompt shares its
 * first template tokens with every session, and that alone must not
 * replace another conversation while an empty session waits. */
static slot *match_slot(worker *w, const request *rq) {
    slot *best = NULL, *empty = NULL, *lru = NULL;
    size_t best_lcp = 0;
    for (int i = 0; i < w->n_slots; i++) {
        slot *sl = &w->slots[i];
        if (sl->st != SLOT_IDLE || sl->j) continue;
        int n = ds4_session_n_tokens(sl->s);
        if (n == 0) { if (!empty) empty = sl; continue; }
        if (!lru || sl->used < lru->used) lru = sl;
        const int32_t *t = ds4_session_tokens(sl->s);
        size_t lcp = 0;
        while (lcp < (size_t)n && lcp < rq->tokens.n && t[lcp] == rq->tokens.v[lcp]) lcp++;
        int keeps = lcp == (size_t)n || 2 * lcp >= (size_t)n ||
                    ds4_session_rewind_point(sl->s, (int)lcp) > 0;
        if (keeps && lcp > best_lcp) { best_lcp = lcp; best = sl; }
    }
    return best ? best : empty ? empty : lru;
}

/* End a slot's job: the finish event, metrics, the log line; the slot
 * becomes idle (its session keeps the conversation). */
static void slot_finish(worker *w, slot *sl, finish_kind fin) {
    job *j = sl->j;
    /* gen_end may close a tool-call block (on_block: the disk cache's
     * view of this session) */
    if (w->kv) kvdisk_select(w->kv, sl->kl);
    if (sl->g) {
        fin = gen_end(sl->g, fin);
        sl->g = NULL;
        j->res.decode_s = util_now() - sl->t1;
    } else if (sl->st == SLOT_PREFILL) {
        j->res.prefill_s = util_now() - sl->t0;
    }
    sl->p.evaluated = ds4_session_n_tokens(sl->s) - sl->start;
    if (sl->st == SLOT_GEN) sl->p.evaluated = sl->end - sl->start;
    if (sl->p.evaluated < 0) sl->p.evaluated = 0;
    finish_job(w, sl->s, j, &sl->p, fin);
    ds4_sync_result_free(&sl->p.sync);
    memset(&sl->p, 0, sizeof sl->p);
    sl->st = SLOT_IDLE;
    sl->used = ++w->clock;
    pthread_mutex_lock(&w->mu);
    sl->j = NULL;
    pthread_mutex_unlock(&w->mu);
    job_unref(j);
}

static void slot_start_gen(worker *w, slot *sl) {
    job *j = sl->j;
    j->res.prefill_s = util_now() - sl->t0;
    eval_params(w, &sl->ep);
    sl->env = (gen_env){ w->srv, sl->s, &sl->ep, on_block, w };
    sl->t1 = util_now();
    /* drafts are off in a batch: a staged pass would not fit one step */
    sl->g = gen_new(&sl->env, j, sl->max_gen, 0);
    sl->st = SLOT_GEN;
    if (!sl->g) {
        api_err_set(&j->res.err, 500, "server_error", NULL, NULL, "out of memory");
        slot_finish(w, sl, FIN_ERROR);
    }
}

/* A job taken from the queue starts on slot sl: steps 1-2 of run_job
 * (what the session keeps), then the prefill is stepped. */
static void slot_admit(worker *w, slot *sl, job *j) {
    request *rq = j->rq;
    gen_result *res = &j->res;
    sl->admitted = ++w->clock;
    sl->g = NULL;
    memset(&sl->p, 0, sizeof sl->p);
    if (w->kv) kvdisk_select(w->kv, sl->kl);
    if (atomic_load(&j->cancel) != CANCEL_NONE) {
        /* the client left while queued: nothing to do */
        sl->st = SLOT_PREFILL;
        sl->start = sl->end = ds4_session_n_tokens(sl->s);
        sl->t0 = util_now();
        slot_finish(w, sl, FIN_CANCEL);
        return;
    }
    sl->t0 = util_now();
    if (prepare_session(w, sl->s, j, &sl->p)) {
        sl->st = SLOT_PREFILL;
        sl->start = sl->end = ds4_session_n_tokens(sl->s);
        slot_finish(w, sl, FIN_ERROR);
        return;
    }
    res->cached_tokens = sl->p.sync.kept;
    res->prompt_tokens = sl->p.sync.kept + (int)sl->p.sync.rest.n;
    int room = w->srv->ctx - res->prompt_tokens;
    sl->max_gen = rq->max_tokens > 0 && rq->max_tokens < room ? rq->max_tokens : room;
    if (w->kv) kvdisk_tools_from_request(w->kv, rq);
    job_event(j, EV_START, 0, NULL, 0);
    sl->st = SLOT_PREFILL;
    sl->start = ds4_session_n_tokens(sl->s);
    sl->end = sl->start + (int)sl->p.sync.rest.n;
    if (sl->end > ds4_session_ctx_size(sl->s)) {
        api_err_set(&res->err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                    "This model's maximum context length is %d tokens; the prompt needs %d.",
                    w->srv->ctx, res->prompt_tokens);
        slot_finish(w, sl, FIN_ERROR);
        return;
    }
    const ds4_kv_policy *pol = w->kv ? kvdisk_policy(w->kv) : NULL;
    sl->cold = pol && sl->start == 0 ? ds4_kv_policy_cold_point(pol, sl->end) : 0;
    if (sl->end == sl->start) slot_start_gen(w, sl);
}

/* Where the next prefill chunk of sl must stop at the latest (ds4_eval's
 * stops: cold point, continued frontier, the tail checkpoint). */
static int prefill_stop(worker *w, const slot *sl, int cur, int limit) {
    const ds4_kv_policy *pol = w->kv ? kvdisk_policy(w->kv) : NULL;
    int stop = sl->end < limit ? sl->end : limit;
    int frontier = pol ? ds4_kv_policy_next_frontier(pol, cur) : 0;
    int tail = sl->end - REWIND_TAIL;
    if (sl->cold > cur && sl->cold < stop) stop = sl->cold;
    if (frontier > cur && frontier < stop) stop = frontier;
    if (tail > cur && tail < stop) stop = tail;
    return stop;
}

/* After a prefill chunk reached `cur`: the saves and checkpoints ds4_eval
 * takes there. */
static void prefill_reached(worker *w, slot *sl, int from, int cur) {
    const ds4_kv_policy *pol = w->kv ? kvdisk_policy(w->kv) : NULL;
    if (w->kv) kvdisk_select(w->kv, sl->kl);
    if (pol && cur == sl->cold) kvdisk_save(w->kv, DS4_KV_COLD);
    else if (pol && cur == ds4_kv_policy_next_frontier(pol, from)) kvdisk_save(w->kv, DS4_KV_CONTINUED);
    if (cur == sl->end - REWIND_TAIL) ds4_session_checkpoint(sl->s, 0);
    if (cur == sl->end) ds4_session_checkpoint(sl->s, 1);
}

static finish_kind prefill_error(worker *w, slot *sl, int rc) {
    gen_result *res = &sl->j->res;
    if (rc == DS4_ECTX)
        api_err_set(&res->err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                    "This model's maximum context length is %d tokens; the prompt needs %d.",
                    w->srv->ctx, res->prompt_tokens);
    else
        api_err_set(&res->err, 500, "server_error", NULL, NULL, "prefill failed: %s",
                    ds4_model_strerror(w->srv->model, rc));
    return FIN_ERROR;
}

/* One step over the busy slots.  Returns the number of items evaluated. */
static int par_step(worker *w) {
    const int n = w->n_slots;
    ds4_batch_item *items = w->items;
    slot **owner = w->owners;
    int ni = 0, tokens = 0;
    /* decode: every generating job chooses its next token */
    for (int i = 0; i < n; i++) {
        slot *sl = &w->slots[i];
        sl->n_step = 0;
        if (sl->st != SLOT_GEN) continue;
        if (w->kv) kvdisk_select(w->kv, sl->kl);
        finish_kind fin = gen_next(sl->g, &sl->tok);
        if (fin != FIN_NONE) { slot_finish(w, sl, fin); continue; }
        int cur = ds4_session_n_tokens(sl->s);
        const ds4_kv_policy *pol = w->kv ? kvdisk_policy(w->kv) : NULL;
        int fr = pol ? ds4_kv_policy_next_frontier(pol, cur) : 0;
        sl->frontier = fr == cur + 1 ? fr : 0;
        sl->n_step = 1;
        items[ni] = (ds4_batch_item){ sl->s, &sl->tok, 1, 0 };
        owner[ni++] = sl;
        tokens++;
    }
    /* prefill: one chunk of the first admitted job still reading its
     * prompt, with the budget the decode tokens left (at least a token:
     * a prompt always makes progress) */
    slot *pf = NULL;
    for (int i = 0; i < n; i++) {
        slot *sl = &w->slots[i];
        if (sl->st != SLOT_PREFILL) continue;
        if (atomic_load(&sl->j->cancel) != CANCEL_NONE) { slot_finish(w, sl, FIN_CANCEL); continue; }
        if (!pf || sl->admitted < pf->admitted) pf = sl;
    }
    if (pf) {
        int budget = w->srv->cfg.step_tokens - tokens;
        int chunk = w->srv->cfg.chunk > 0 ? w->srv->cfg.chunk : 2048;
        if (budget > chunk) budget = chunk;
        if (budget < 1) budget = 1;
        int cur = ds4_session_n_tokens(pf->s);
        int stop = prefill_stop(w, pf, cur, cur + budget);
        pf->n_step = stop - cur;
        items[ni] = (ds4_batch_item){ pf->s, pf->p.sync.rest.v + (cur - pf->start), pf->n_step, 0 };
        owner[ni++] = pf;
        tokens += pf->n_step;
    }
    if (ni == 0) return 0;
    ds4_session_eval_batch(items, ni);
    metrics_step(w->srv->m, ni, tokens);
    for (int k = 0; k < ni; k++) {
        slot *sl = owner[k];
        int rc = items[k].rc;
        if (sl->st == SLOT_GEN) {
            if (w->kv) kvdisk_select(w->kv, sl->kl);
            if (rc == DS4_OK && sl->frontier) kvdisk_save(w->kv, DS4_KV_CONTINUED);
            finish_kind fin = gen_evaluated(sl->g, rc);
            if (fin != FIN_NONE) slot_finish(w, sl, fin);
        } else {
            if (rc != DS4_OK) { slot_finish(w, sl, prefill_error(w, sl, rc)); continue; }
            int cur = ds4_session_n_tokens(sl->s);
            prefill_reached(w, sl, cur - sl->n_step, cur);
            if (cur == sl->end) slot_start_gen(w, sl);
        }
    }
    return ni;
}

static int slots_busy(const worker *w) {
    for (int i = 0; i < w->n_slots; i++)
        if (w->slots[i].st != SLOT_IDLE) return 1;
    return 0;
}

static void *worker_main_par(void *arg) {
    worker *w = arg;
    for (;;) {
        /* admit queued jobs (in arrival order) while a session is idle */
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->stopping && !slots_busy(w)) pthread_cond_wait(&w->cv, &w->mu);
        if (w->stopping && !slots_busy(w)) { pthread_mutex_unlock(&w->mu); break; }
        for (;;) {
            if (!w->head || w->stopping) break;
            slot *sl = match_slot(w, w->head->rq);
            if (!sl) break;
            job *j = w->head;
            w->head = j->next;
            if (!w->head) w->tail = NULL;
            j->next = NULL;
            w->depth--;
            metrics_queue(w->srv->m, w->depth);
            sl->j = j;     /* under mu: worker_stop cancels it */
            pthread_mutex_unlock(&w->mu);
            slot_admit(w, sl, j);
            pthread_mutex_lock(&w->mu);
        }
        pthread_mutex_unlock(&w->mu);
        slot_sessions_metrics(w);
        par_step(w);
        slot_sessions_metrics(w);
        check_model(w);
    }
    slot_sessions_metrics(w);
    /* clean exit: keep the live conversations for the next start */
    for (int i = 0; w->kv && i < w->n_slots; i++) {
        kvdisk_select(w->kv, w->slots[i].kl);
        kvdisk_save(w->kv, DS4_KV_SHUTDOWN);
    }
    return NULL;
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
        metrics_sessions(w->srv->m, 1, ds4_session_n_tokens(w->s) > 0, 1);
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
            check_model(w);
        }
        metrics_busy(w->srv->m, 0);
        metrics_sessions(w->srv->m, 1, ds4_session_n_tokens(w->s) > 0, 0);

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
    const int n = srv->cfg.parallel > 1 ? srv->cfg.parallel : 1;
    w->slots = calloc((size_t)n, sizeof *w->slots);
    w->items = calloc((size_t)n, sizeof *w->items);
    w->owners = calloc((size_t)n, sizeof *w->owners);
    if (!w->slots || !w->items || !w->owners) {
        if (err) *err = strdup("out of memory");
        worker_free(w);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        ds4_session *s = ds4_session_new(srv->model, &sp, err);
        if (!s) { worker_free(w); return NULL; }
        w->slots[w->n_slots++].s = s;
        if (srv->steer && ds4_session_set_steering(s, srv->steer, (float)srv->cfg.steer_scale,
                                                   srv->steer_l0, srv->steer_l1) != DS4_OK) {
            if (err) *err = strdup("--steer: bad layers or scale");
            worker_free(w);
            return NULL;
        }
    }
    w->s = w->slots[0].s;
    srv->ctx = ds4_session_ctx_size(w->s);
    if (srv->cfg.kv_dir) {
        /* opened here, driven only by the worker thread from now on */
        w->kv = kvdisk_open(srv, w->s, err);
        if (!w->kv) { worker_free(w); return NULL; }
        for (int i = 0; n > 1 && i < n; i++) {
            if (!(w->slots[i].kl = kvdisk_live_new(w->slots[i].s))) {
                if (err) *err = strdup("out of memory");
                worker_free(w);
                return NULL;
            }
        }
    }
    metrics_sessions(srv->m, n, 0, 0);
    pthread_attr_t attr;   /* room for the kernels' stack buffers (ds4.h) */
    const int have_attr = ds4_thread_attr(&attr) == 0;
    const int perr = pthread_create(&w->th, have_attr ? &attr : NULL, n > 1 ? worker_main_par : worker_main, w);
    if (have_attr) pthread_attr_destroy(&attr);
    if (perr) {
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
    for (int i = 0; w->n_slots > 1 && i < w->n_slots; i++)
        if (w->slots[i].j) atomic_store(&w->slots[i].j->cancel, CANCEL_SHUTDOWN);
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
    for (int i = 0; w->slots && i < w->n_slots; i++) {
        kvdisk_live_free(w->slots[i].kl);
        ds4_session_free(w->slots[i].s);
    }
    free(w->slots);
    free(w->items);
    free(w->owners);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
