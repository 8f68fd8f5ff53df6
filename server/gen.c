/*
 * gen.c -- see gen.h: the server's adapter over the generation driver
 * (src/gen, ds4_gen.h), which owns the loop itself.
 *
 * Tool calls.  The driver releases a call only once its invoke closed,
 * whole (its name, its argument deltas as they were generated, its end):
 * a client never sees a call whose arguments stop half way.  When the
 * model writes malformed DSML, generation stops; the calls that closed
 * before stay calls, and the block's text from the first unclosed call on
 * (the whole block when none closed) becomes visible content, with the
 * finish FIN_TOOL_ERROR (each API shapes it as an error finish).  A block
 * cut by max_tokens or the context is returned as text the same way, with
 * the length finish.
 */
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "ds4_gen.h"
#include "job.h"

struct gen {
    const gen_env *env;
    job *j;
    request *rq;
    ds4_gen *d;
    ds4_sampler *smp;
    ds4_tokens test;          /* --test-mode output */
    const char **ctexts;      /* the lookup corpus: the tool messages */
    size_t *clens;
    int failed;               /* gen_new could not allocate */
};

static void on_reasoning(void *ud, const char *s, size_t n) {
    gen *g = ud;
    ds4_buf_append(&g->j->res.reasoning, s, n);
    job_event(g->j, EV_REASONING, 0, s, n);
}

static void on_content(void *ud, const char *s, size_t n) {
    gen *g = ud;
    ds4_buf_append(&g->j->res.content, s, n);
    job_event(g->j, EV_TEXT, 0, s, n);
}

static void on_call_begin(void *ud, int index, const char *name, size_t n) {
    gen *g = ud;
    job *j = g->j;
    gen_result *r = &j->res;
    (void)index;
    if (r->n_calls == r->cap_calls) {
        int nc = r->cap_calls ? r->cap_calls * 2 : 4;
        gen_call *c = realloc(r->calls, (size_t)nc * sizeof *c);
        if (!c) { ds4_gen_stop(g->d); return; }
        r->calls = c;
        r->cap_calls = nc;
    }
    gen_call *c = &r->calls[r->n_calls++];
    memset(c, 0, sizeof *c);
    util_random_id(c->id, sizeof c->id, j->rq->api == API_MESSAGES ? "toolu_" : "call_", 24);
    util_random_id(c->item_id, sizeof c->item_id, "fc_", 24);
    c->name = strndup(name, n);
    job_event(j, EV_TOOL_BEGIN, r->n_calls - 1, NULL, 0);
}

static void on_call_args(void *ud, int index, const char *s, size_t n) {
    gen *g = ud;
    gen_result *r = &g->j->res;
    (void)index;
    if (r->n_calls == 0) return;
    ds4_buf_append(&r->calls[r->n_calls - 1].args, s, n);
    job_event(g->j, EV_TOOL_ARGS, r->n_calls - 1, s, n);
}

static void on_call_end(void *ud, int index) {
    gen *g = ud;
    gen_result *r = &g->j->res;
    (void)index;
    if (r->n_calls == 0) return;
    r->calls[r->n_calls - 1].complete = 1;
    job_event(g->j, EV_TOOL_END, r->n_calls - 1, NULL, 0);
}

static void on_tools_done(void *ud, const char *dsml, size_t n) {
    gen *g = ud;
    if (g->env->on_block) g->env->on_block(g->env->ud, &g->j->res, 0, dsml, n);
}

static void on_dsml_error(void *ud, const char *why, size_t n) {
    gen *g = ud;
    api_err_set(&g->j->res.err, 200, "invalid_tool_call", "malformed_tool_call", NULL,
                "the model wrote a malformed tool call (%.*s); its text is returned as content",
                (int)(n < 200 ? n : 200), why);
    log_msg("DSML error in generated tool calls: %.*s", (int)n, why);
}

/* --trace: one object per DSML parser event (text events are left out:
 * the trace has the content) */
static void on_dsml_event(void *ud, const ds4_dsml_event *ev) {
    static const char *const kind[] = { "text", "call_begin", "args_delta", "call_end", "done", "error" };
    gen *g = ud;
    json_t *evs = g->j->res.trace_ev;
    if (!evs || ev->kind == DS4_DSML_TEXT) return;
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string(kind[ev->kind]));
    if (ev->kind == DS4_DSML_CALL_BEGIN || ev->kind == DS4_DSML_ARGS_DELTA || ev->kind == DS4_DSML_ERROR)
        json_object_set_new(o, ev->kind == DS4_DSML_CALL_BEGIN ? "name" : ev->kind == DS4_DSML_ERROR ? "reason" : "text",
                            jstr(ev->text, ev->len));
    if (ev->kind != DS4_DSML_DONE && ev->kind != DS4_DSML_ERROR)
        json_object_set_new(o, "call", json_integer(ev->call_index));
    json_array_append_new(evs, o);
}

static json_t *token_json(const ds4_tokenizer *tok, int32_t t, double lp) {
    json_t *e = json_object(), *bytes = json_array();
    size_t n;
    const char *b = ds4_token_bytes(tok, t, &n);
    json_object_set_new(e, "token", jstr(b, n));
    json_object_set_new(e, "logprob", json_real(lp));
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)b[i]));
    json_object_set_new(e, "bytes", bytes);
    return e;
}

/* OpenAI logprobs of one content token, in the chat shape; the
 * completions shaper converts. */
static void on_logprob(void *ud, int32_t t, double lp, const ds4_gen_lp *top, int k) {
    gen *g = ud;
    gen_result *r = &g->j->res;
    const ds4_tokenizer *tok = g->env->srv->tok;
    if (!r->lp && !(r->lp = json_array())) return;
    json_t *e = token_json(tok, t, lp), *alts = json_array();
    for (int i = 0; i < k; i++) json_array_append_new(alts, token_json(tok, top[i].id, top[i].logprob));
    json_object_set_new(e, "top_logprobs", alts);
    json_array_append_new(r->lp, e);
}

static int on_cancel(void *ud) {
    gen *g = ud;
    return atomic_load(&g->j->cancel) != CANCEL_NONE;
}

/* The test output: pieces separated by \x01 are tokenized on their own, so
 * a test can force a token split that BPE would not choose. */
static void test_tokens(gen *g, ds4_tokens *out) {
    const char *s = g->rq->test_output;
    size_t n = g->rq->test_output_len, a = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '\x01') {
            if (i > a) ds4_tokenize(g->env->srv->tok, s + a, i - a, DS4_TOK_SPECIAL, out);
            a = i + 1;
        }
    }
}

static finish_kind to_fin(ds4_gen_finish f) {
    switch (f) {
    case DS4_GEN_RUNNING: return FIN_NONE;
    case DS4_GEN_EOS: return FIN_STOP;
    case DS4_GEN_LENGTH: case DS4_GEN_CONTEXT: return FIN_LENGTH;
    case DS4_GEN_STOP_SEQ: return FIN_STOP_SEQ;
    case DS4_GEN_TOOLS: return FIN_TOOLS;
    case DS4_GEN_TOOL_ERROR: return FIN_TOOL_ERROR;
    case DS4_GEN_CANCEL: return FIN_CANCEL;
    case DS4_GEN_ERROR: break;
    }
    return FIN_ERROR;
}

static ds4_gen_finish from_fin(finish_kind f) {
    switch (f) {
    case FIN_NONE: return DS4_GEN_RUNNING;
    case FIN_STOP: return DS4_GEN_EOS;
    case FIN_LENGTH: return DS4_GEN_LENGTH;
    case FIN_STOP_SEQ: return DS4_GEN_STOP_SEQ;
    case FIN_TOOLS: return DS4_GEN_TOOLS;
    case FIN_TOOL_ERROR: return DS4_GEN_TOOL_ERROR;
    case FIN_CANCEL: return DS4_GEN_CANCEL;
    case FIN_ERROR: break;
    }
    return DS4_GEN_ERROR;
}

/* The driver's error (if it had one) as the job's. */
static finish_kind result(gen *g, ds4_gen_finish f) {
    const char *msg;
    if (f == DS4_GEN_ERROR && ds4_gen_error(g->d, NULL, &msg) != DS4_GEN_ERR_NONE)
        api_err_set(&g->j->res.err, 500, "server_error", NULL, NULL, "%s", msg);
    return to_fin(f);
}

static gen *make(const gen_env *env, job *j, int max_gen, int lookup, int mtp_draft) {
    request *rq = j->rq;
    gen *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->env = env;
    g->j = j;
    g->rq = rq;
    g->smp = ds4_sampler_new(env->srv->n_vocab, &rq->sp);
    if (env->srv->trace && !j->res.trace_ev) j->res.trace_ev = json_array();
    if (rq->test_output) test_tokens(g, &g->test);
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    o.smp = g->smp;
    o.max_tokens = max_gen;
    o.reasoning = rq->starts_in_reasoning;
    o.think_budget = rq->think_budget;
    o.stop = (const char *const *)rq->stop;
    o.n_stop = rq->n_stop;
    o.parse_tools = rq->parse_tools;
    o.tools_json = rq->tools_json;
    o.single_call = rq->single_call;
    o.forced_prefix = rq->forced_prefix;
    o.forced_output = rq->test_output != NULL;
    o.output = g->test.v;
    o.n_output = (int)g->test.n;
    o.logprobs = rq->logprobs;
    o.top_logprobs = rq->top_logprobs;
    o.ep = env->ep;
    /* drafts only where gen_run evaluates (a batch step holds one token),
     * never for the test output */
    if (!rq->test_output) {
        o.lookup = lookup;
        o.mtp_draft = mtp_draft;
    }
    /* the request's tool results: the second prompt-lookup source */
    if (o.lookup > 0) {
        g->ctexts = malloc(((size_t)rq->n_msgs + 1) * sizeof *g->ctexts);
        g->clens = malloc(((size_t)rq->n_msgs + 1) * sizeof *g->clens);
        int n = 0;
        for (int i = 0; g->ctexts && g->clens && i < rq->n_msgs; i++)
            if (rq->msgs[i].role == DS4_ROLE_TOOL && rq->msgs[i].content) {
                g->ctexts[n] = rq->msgs[i].content;
                g->clens[n++] = rq->msgs[i].content_len;
            }
        /* out of memory: no second source (drafts are only guesses) */
        if (g->ctexts && g->clens) {
            o.corpus = g->ctexts;
            o.corpus_lens = g->clens;
            o.n_corpus = n;
        }
    }
    ds4_gen_cb cb = { 0 };
    cb.ud = g;
    cb.reasoning = on_reasoning;
    cb.content = on_content;
    cb.call_begin = on_call_begin;
    cb.call_args = on_call_args;
    cb.call_end = on_call_end;
    cb.tools_done = on_tools_done;
    cb.dsml_error = on_dsml_error;
    cb.dsml_event = on_dsml_event;
    cb.logprob = on_logprob;
    cb.cancel = on_cancel;
    if (g->smp && !ds4_tokens_failed(&g->test)) g->d = ds4_gen_new(env->s, env->srv->model, &o, &cb);
    if (!g->d) {
        api_err_set(&j->res.err, 500, "server_error", NULL, NULL, "out of memory");
        g->failed = 1;
    }
    return g;
}

gen *gen_new(const gen_env *env, job *j, int max_gen, int lookup) {
    return make(env, j, max_gen, lookup, 0);
}

finish_kind gen_next(gen *g, int32_t *t) {
    if (g->failed) return FIN_ERROR;
    return result(g, ds4_gen_next(g->d, t));
}

finish_kind gen_evaluated(gen *g, int rc) {
    if (g->failed) return FIN_ERROR;
    return result(g, ds4_gen_evaluated(g->d, rc));
}

/* The job's counters and finish from the driver; frees g. */
static finish_kind finish(gen *g, ds4_gen_finish f) {
    gen_result *res = &g->j->res;
    finish_kind fin = result(g, f);
    res->completion_tokens = ds4_gen_n_tokens(g->d);
    res->reasoning_tokens = ds4_gen_reasoning_tokens(g->d);
    res->spec = *ds4_gen_spec_stats(g->d);
    if (fin == FIN_STOP_SEQ) res->stop_index = ds4_gen_stop_index(g->d);
    return fin;
}

static void gen_free(gen *g) {
    ds4_gen_free(g->d);
    ds4_sampler_free(g->smp);
    ds4_tokens_free(&g->test);
    free(g->ctexts);
    free(g->clens);
    free(g);
}

finish_kind gen_end(gen *g, finish_kind fin) {
    if (!g) return fin;
    if (!g->failed) fin = finish(g, ds4_gen_end(g->d, from_fin(fin)));
    else fin = FIN_ERROR;
    gen_free(g);
    return fin;
}

finish_kind gen_run(const gen_env *env, job *j, int max_gen) {
    gen *g = make(env, j, max_gen, j->rq->lookup, j->rq->mtp_draft);
    if (!g) {
        api_err_set(&j->res.err, 500, "server_error", NULL, NULL, "out of memory");
        return FIN_ERROR;
    }
    finish_kind fin = g->failed ? FIN_ERROR : finish(g, ds4_gen_run(g->d));
    gen_free(g);
    return fin;
}
