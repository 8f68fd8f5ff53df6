/*
 * worker.c -- the job queue, the single inference thread, live-session
 * reuse, and the generation loop (stop sequences, cancellation, DSML
 * tool-call parsing with greedy syntax, forced text, the test output).
 *
 * Owns: the ds4_session (only this thread touches it), the FIFO of jobs,
 * and the tool-call ids it hands out.  Must not: parse requests (conv.c) or
 * shape responses (api_*.c: called through api_event on this thread).
 *
 * Session reuse.  The session holds the tokens of the last prompt plus what
 * was generated after it.  Their detokenized bytes are exactly the text the
 * tokens stand for (special tokens included), so that text is "what the
 * live session holds".  A new rendered prompt that starts with it keeps all
 * those tokens and only its suffix is tokenized and evaluated, even when a
 * fresh tokenization of the whole prompt would split the kept part
 * differently (the model's own sampled tokens rarely match BPE's choice).
 * Otherwise the prompt's full tokenization (made by the connection thread)
 * is synced, which keeps a token-level prefix if there is one; the session
 * cannot rewind, so any divergence re-evaluates from the start.
 *
 * Disk KV cache hooks (not implemented yet; each marked "KV CACHE HOOK"):
 *   - before sync: look up the longest cached prefix of the new tokens and
 *     restore it (ds4_session_restore) when it beats the live session;
 *   - after the prefill and at generation frontiers: save snapshots
 *     (ds4_session_snapshot) of prompts worth keeping;
 *   - before the live session is discarded by a divergent prompt (eviction)
 *     and on shutdown: save the live state.
 * Usage already reports the tokens reused from the live session as cached.
 *
 * Cancellation: connection threads set job->cancel when their client goes
 * away; the prefill checks it between chunks through the progress
 * callback, the decode loop before every token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "metrics.h"
#include "toolmem.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"

struct worker {
    server_ctx *srv;
    ds4_session *s;
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
/* jobs                                                                      */
/* ------------------------------------------------------------------------ */

job *job_new(request *rq) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->rq = rq;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    atomic_init(&j->cancel, CANCEL_NONE);
    j->res.stop_index = -1;
    j->created = util_unix_time();
    const char *pfx = rq->api == API_MESSAGES ? "msg_" : rq->api == API_RESPONSES ? "resp_" :
                      rq->api == API_COMPLETIONS ? "cmpl-" : "chatcmpl-";
    util_random_id(j->resp_id, sizeof j->resp_id, pfx, 24);
    util_random_id(j->msg_item_id, sizeof j->msg_item_id, "msg_", 24);
    util_random_id(j->rs_item_id, sizeof j->rs_item_id, "rs_", 24);
    return j;
}

void job_ref(job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void job_unref(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    request_free(j->rq);
    ds4_buf_free(&j->out);
    ds4_buf_free(&j->body);
    ds4_buf_free(&j->res.reasoning);
    ds4_buf_free(&j->res.content);
    for (int i = 0; i < j->res.n_calls; i++) {
        free(j->res.calls[i].name);
        ds4_buf_free(&j->res.calls[i].args);
    }
    free(j->res.calls);
    free(j->api_state);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_emit(job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    /* nobody reads a cancelled stream: do not let it grow */
    if (atomic_load(&j->cancel) != CANCEL_CLIENT) ds4_buf_append(&j->out, s, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_emit_event(job *j, const char *event, json_t *data) {
    char *s = jdump(data);
    json_decref(data);
    ds4_buf b = { 0 };
    if (event) ds4_buf_printf(&b, "event: %s\n", event);
    ds4_buf_puts(&b, "data: ");
    ds4_buf_puts(&b, s);
    ds4_buf_puts(&b, "\n\n");
    free(s);
    job_emit(j, b.p, b.n);
    ds4_buf_free(&b);
}

void job_emit_data(job *j, json_t *data) { job_emit_event(j, NULL, data); }

void job_set_body(job *j, int status, char *body) {
    pthread_mutex_lock(&j->mu);
    j->status = status;
    j->body.n = 0;
    if (body) ds4_buf_puts(&j->body, body);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(body);
}

void job_finish_stream(job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void api_event(job *j, ev_kind k, int index, const char *s, size_t n) {
    switch (j->rq->api) {
    case API_CHAT: openai_chat_event(j, k, index, s, n); break;
    case API_COMPLETIONS: openai_completions_event(j, k, index, s, n); break;
    case API_RESPONSES: responses_event(j, k, index, s, n); break;
    case API_MESSAGES: anthropic_event(j, k, index, s, n); break;
    }
}

/* End a job that never ran (queue flushed at shutdown). */
static void fail_job(job *j, int status, const char *type, const char *msg) {
    api_err_set(&j->res.err, status, type, NULL, NULL, "%s", msg);
    j->res.finish = FIN_ERROR;
    api_event(j, EV_FINISH, 0, NULL, 0);
    job_finish_stream(j);
}

/* ------------------------------------------------------------------------ */
/* generation                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    worker *w;
    job *j;
    request *rq;
    const ds4_tokenizer *tok;
    ds4_dsml *dsml;
    ds4_detok dt;
    ds4_buf piece;
    int in_reasoning;
    ds4_tokens forced;
    size_t forced_pos;
    ds4_buf hold;             /* visible text held back by the stop matcher */
    int stop;                 /* end generation after this token */
    int stop_seq;             /* a stop sequence matched */
    int block_done;           /* </｜DSML｜tool_calls> seen */
    int block_error;
    int block_calls;          /* index of the first call of this block */
} gen;

static void force_text(gen *g, const char *s) {
    if (!s || !*s) return;
    /* keep what is still queued, append the new text's tokens */
    ds4_tokenize(g->tok, s, strlen(s), DS4_TOK_SPECIAL, &g->forced);
}

static void emit_reasoning(gen *g, const char *s, size_t n) {
    if (!n) return;
    ds4_buf_append(&g->j->res.reasoning, s, n);
    api_event(g->j, EV_REASONING, 0, s, n);
}

static void emit_visible(gen *g, const char *s, size_t n) {
    if (!n) return;
    ds4_buf_append(&g->j->res.content, s, n);
    api_event(g->j, EV_TEXT, 0, s, n);
}

/* Visible text through the stop-sequence matcher: the earliest match ends
 * the output (the stop string itself is not returned); the longest tail
 * that could still begin a stop string is held back. */
static void visible_text(gen *g, const char *s, size_t n) {
    if (g->stop_seq) return;
    request *rq = g->rq;
    if (rq->n_stop == 0) { emit_visible(g, s, n); return; }
    ds4_buf_append(&g->hold, s, n);
    const char *h = g->hold.p;
    size_t hn = g->hold.n, best = hn;
    int which = -1;
    for (int i = 0; i < rq->n_stop; i++) {
        const char *st = rq->stop[i];
        size_t sl = strlen(st);
        for (size_t p = 0; p + sl <= hn && p < best; p++)
            if (!memcmp(h + p, st, sl)) { best = p; which = i; break; }
    }
    if (which >= 0) {
        emit_visible(g, h, best);
        g->hold.n = 0;
        g->stop_seq = 1;
        g->stop = 1;
        g->j->res.stop_index = which;
        return;
    }
    size_t keep = 0;
    for (int i = 0; i < rq->n_stop; i++) {
        const char *st = rq->stop[i];
        size_t sl = strlen(st);
        for (size_t k = sl - 1; k > keep; k--)
            if (k <= hn && !memcmp(h + hn - k, st, k)) { keep = k; break; }
    }
    emit_visible(g, h, hn - keep);
    memmove(g->hold.p, h + hn - keep, keep);
    g->hold.n = keep;
}

static void flush_hold(gen *g) {
    if (g->hold.n && !g->stop_seq) emit_visible(g, g->hold.p, g->hold.n);
    g->hold.n = 0;
}

static gen_call *new_call(job *j) {
    gen_result *r = &j->res;
    if (r->n_calls == r->cap_calls) {
        int nc = r->cap_calls ? r->cap_calls * 2 : 4;
        gen_call *c = realloc(r->calls, (size_t)nc * sizeof *c);
        if (!c) return NULL;
        r->calls = c;
        r->cap_calls = nc;
    }
    gen_call *c = &r->calls[r->n_calls++];
    memset(c, 0, sizeof *c);
    return c;
}

static void remember_block(gen *g) {
    gen_result *r = &g->j->res;
    int n = r->n_calls - g->block_calls;
    if (n <= 0) return;
    const char **ids = calloc((size_t)n, sizeof *ids);
    const char **names = calloc((size_t)n, sizeof *names);
    const char **args = calloc((size_t)n, sizeof *args);
    if (ids && names && args) {
        for (int i = 0; i < n; i++) {
            gen_call *c = &r->calls[g->block_calls + i];
            ids[i] = c->id;
            names[i] = c->name;
            args[i] = c->args.p ? c->args.p : "";
        }
        size_t bl;
        const char *bt = ds4_dsml_block_text(g->dsml, &bl);
        toolmem_put(g->w->srv->tm, ids, names, args, n, bt, bl, r->reasoning.p, r->reasoning.n);
    }
    free(ids); free(names); free(args);
}

static void on_dsml(void *ud, const ds4_dsml_event *ev) {
    gen *g = ud;
    job *j = g->j;
    if (g->stop_seq) return;
    switch (ev->kind) {
    case DS4_DSML_TEXT:
        visible_text(g, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_BEGIN: {
        flush_hold(g);   /* the text before the block is final */
        gen_call *c = new_call(j);
        if (!c) { g->stop = 1; break; }
        util_random_id(c->id, sizeof c->id, j->rq->api == API_MESSAGES ? "toolu_" : "call_", 24);
        util_random_id(c->item_id, sizeof c->item_id, "fc_", 24);
        c->name = strndup(ev->text, ev->len);
        api_event(j, EV_TOOL_BEGIN, j->res.n_calls - 1, NULL, 0);
        break;
    }
    case DS4_DSML_ARGS_DELTA:
        if (j->res.n_calls > 0) {
            gen_call *c = &j->res.calls[j->res.n_calls - 1];
            ds4_buf_append(&c->args, ev->text, ev->len);
            api_event(j, EV_TOOL_ARGS, j->res.n_calls - 1, ev->text, ev->len);
        }
        break;
    case DS4_DSML_CALL_END:
        if (j->res.n_calls > 0) {
            gen_call *c = &j->res.calls[j->res.n_calls - 1];
            c->complete = 1;
            if (!c->args.p) ds4_buf_puts(&c->args, "{}");
            api_event(j, EV_TOOL_END, j->res.n_calls - 1, NULL, 0);
            /* parallel_tool_calls=false: close the block after one call */
            if (g->rq->single_call && g->rq->test_output == NULL &&
                j->res.n_calls - g->block_calls == 1)
                force_text(g, "</" DSML "tool_calls>");
        }
        break;
    case DS4_DSML_DONE:
        g->block_done = 1;
        g->stop = 1;      /* the turn ends with the block (EOS would follow) */
        remember_block(g);
        break;
    case DS4_DSML_ERROR:
        g->block_error = 1;
        g->stop = 1;
        log_msg("DSML error in generated tool calls: %.*s", (int)ev->len, ev->text);
        break;
    }
}

static void start_content(gen *g) {
    if (g->rq->test_output) return;
    if (g->rq->forced_prefix) force_text(g, g->rq->forced_prefix);
}

static void content_bytes(gen *g, const char *s, size_t n) {
    if (!n) return;
    if (g->dsml) {
        if (!g->block_error && !g->block_done) ds4_dsml_feed(g->dsml, s, n);
    } else {
        visible_text(g, s, n);
    }
}

static void process_token(gen *g, int32_t t) {
    const ds4_special_ids *sp = g->w->srv->sp;
    g->piece.n = 0;
    if (g->in_reasoning && t == sp->think_end) {
        ds4_detok_flush(&g->dt, &g->piece);
        emit_reasoning(g, g->piece.p, g->piece.n);
        g->in_reasoning = 0;
        start_content(g);
        return;
    }
    ds4_detok_push(&g->dt, g->tok, t, &g->piece);
    if (!g->piece.n) return;
    if (g->in_reasoning) emit_reasoning(g, g->piece.p, g->piece.n);
    else content_bytes(g, g->piece.p, g->piece.n);
}

typedef struct {
    job *j;
} progress_ud;

static int on_progress(void *ud, int done, int total) {
    (void)done; (void)total;
    progress_ud *p = ud;
    return atomic_load(&p->j->cancel) != CANCEL_NONE;
}

/* The test output: pieces separated by \x01 are tokenized on their own, so
 * a test can force a token split that BPE would not choose. */
static void test_tokens(gen *g, ds4_tokens *out) {
    const char *s = g->rq->test_output;
    size_t n = g->rq->test_output_len, a = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '\x01') {
            if (i > a) ds4_tokenize(g->tok, s + a, i - a, DS4_TOK_SPECIAL, out);
            a = i + 1;
        }
    }
}

/* A cut inside a UTF-8 sequence would make the suffix start with
 * continuation bytes, which the tokenizer replaces by U+FFFD. */
static int char_boundary(const char *s, size_t n, size_t at) {
    return at >= n || ((unsigned char)s[at] & 0xc0) != 0x80;
}

static int is_special(const ds4_special_ids *sp, int32_t t) {
    return t >= 0 && (t == sp->bos || t == sp->eos || t == sp->user || t == sp->assistant ||
                      t == sp->think || t == sp->think_end || t == sp->dsml ||
                      t == sp->latest_reminder);
}

/* 1 when byte offset `at` of the prompt falls inside a special token of its
 * full tokenization: the live text ends with the first bytes of a marker
 * the model wrote as plain text (say "<｜end"), and tokenizing the suffix on
 * its own would turn the marker into text.  A different BPE split of plain
 * text across the cut is fine; a broken marker is not. */
static int cut_splits_special(const ds4_tokenizer *tok, const ds4_special_ids *sp,
                              const ds4_tokens *t, size_t at) {
    size_t off = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t len = 0;
        ds4_token_bytes(tok, t->v[i], &len);
        if (off + len > at) return off < at && is_special(sp, t->v[i]);
        off += len;
        if (off == at) return 0;
    }
    return 0;
}

static void run_job(worker *w, job *j) {
    server_ctx *srv = w->srv;
    request *rq = j->rq;
    gen_result *res = &j->res;
    ds4_session *s = w->s;
    const int ctx = srv->ctx;
    const int n_sess = ds4_session_n_tokens(s);

    /* 1. Reuse decision (see the header comment). */
    ds4_tokens suffix = { 0 };
    int text_hit = 0, retok = 0;
    if (!rq->raw_ids && n_sess > 0 && ds4_session_logits(s)) {
        w->live.n = 0;
        ds4_detokenize(srv->tok, ds4_session_tokens(s), (size_t)n_sess, &w->live);
        if (w->live.n <= rq->prompt.n && !memcmp(w->live.p, rq->prompt.p, w->live.n) &&
            char_boundary(rq->prompt.p, rq->prompt.n, w->live.n) &&
            !cut_splits_special(srv->tok, srv->sp, &rq->tokens, w->live.n)) {
            ds4_tokenize(srv->tok, rq->prompt.p + w->live.n, rq->prompt.n - w->live.n,
                         DS4_TOK_SPECIAL, &suffix);
            if ((size_t)n_sess + suffix.n < (size_t)ctx) {
                text_hit = 1;
                const int32_t *st = ds4_session_tokens(s);
                retok = rq->tokens.n < (size_t)n_sess ||
                        memcmp(st, rq->tokens.v, (size_t)n_sess * sizeof(int32_t)) != 0;
            }
        }
    }
    int expect_reuse = 0;
    if (text_hit) {
        res->prompt_tokens = n_sess + (int)suffix.n;
        expect_reuse = n_sess;
    } else {
        res->prompt_tokens = (int)rq->tokens.n;
        /* what ds4_session_sync will keep: all of the session or nothing */
        if (n_sess > 0 && rq->tokens.n >= (size_t)n_sess &&
            !memcmp(ds4_session_tokens(s), rq->tokens.v, (size_t)n_sess * sizeof(int32_t)) &&
            (rq->tokens.n > (size_t)n_sess || ds4_session_logits(s)))
            expect_reuse = n_sess;
    }
    res->cached_tokens = expect_reuse;
    int room = ctx - res->prompt_tokens;
    int max_gen = rq->max_tokens > 0 && rq->max_tokens < room ? rq->max_tokens : room;

    /* KV CACHE HOOK (before sync): look up a cached prefix of the new prompt
     * on disk; restore it when it is longer than expect_reuse. */

    api_event(j, EV_START, 0, NULL, 0);

    /* 2. Prefill. */
    double t0 = util_now();
    progress_ud pu = { j };
    int reused = 0, rc;
    if (text_hit) {
        rc = ds4_session_eval(s, suffix.v, (int)suffix.n, on_progress, &pu);
        reused = n_sess;
    } else {
        rc = ds4_session_sync(s, rq->tokens.v, (int)rq->tokens.n, on_progress, &pu, &reused);
    }
    ds4_tokens_free(&suffix);
    res->cached_tokens = reused;
    res->prefill_s = util_now() - t0;
    int evaluated = ds4_session_n_tokens(s) - reused;
    if (evaluated < 0) evaluated = 0;

    /* KV CACHE HOOK (after prefill): the prompt frontier is a good snapshot
     * point; save it when the prompt is long enough to be worth it. */

    gen g = { 0 };
    g.w = w;
    g.j = j;
    g.rq = rq;
    g.tok = srv->tok;
    ds4_detok_init(&g.dt);
    ds4_sampler *smp = NULL;
    ds4_tokens test = { 0 };
    size_t ti = 0;
    finish_kind fin = FIN_NONE;

    if (rc == DS4_ECANCEL) {
        fin = FIN_CANCEL;
    } else if (rc == DS4_ECTX) {
        fin = FIN_ERROR;
        api_err_set(&res->err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                    "This model's maximum context length is %d tokens; the prompt needs %d.",
                    ctx, res->prompt_tokens);
    } else if (rc) {
        fin = FIN_ERROR;
        api_err_set(&res->err, 500, "server_error", NULL, NULL, "prefill failed: %s",
                    ds4_strerror(rc));
    }

    /* 3. Generate. */
    double t1 = util_now();
    if (fin == FIN_NONE) {
        smp = ds4_sampler_new(srv->n_vocab, &rq->sp);
        if (rq->parse_tools) g.dsml = ds4_dsml_new(on_dsml, &g);
        if (!smp || (rq->parse_tools && !g.dsml)) {
            fin = FIN_ERROR;
            api_err_set(&res->err, 500, "server_error", NULL, NULL, "out of memory");
        }
        if (rq->test_output) test_tokens(&g, &test);
        g.in_reasoning = rq->starts_in_reasoning;
        if (!g.in_reasoning) start_content(&g);
    }
    int n_gen = 0;
    while (fin == FIN_NONE) {
        if (n_gen >= max_gen) { fin = FIN_LENGTH; break; }
        if (atomic_load(&j->cancel) != CANCEL_NONE) { fin = FIN_CANCEL; break; }
        int32_t t;
        if (rq->test_output) {
            t = ti < test.n ? test.v[ti++] : srv->sp->eos;
        } else if (g.forced_pos < g.forced.n) {
            t = g.forced.v[g.forced_pos++];
        } else {
            const float *lg = ds4_session_logits(s);
            if (!lg) {
                fin = FIN_ERROR;
                api_err_set(&res->err, 500, "server_error", NULL, NULL, "no logits");
                break;
            }
            /* DSML syntax greedily, payloads with the request's sampling */
            if (g.dsml && ds4_dsml_in_block(g.dsml) && !ds4_dsml_in_payload(g.dsml))
                t = ds4_sample_greedy(lg, srv->n_vocab);
            else
                t = ds4_sample(smp, lg);
        }
        if (t == srv->sp->eos) { fin = FIN_STOP; break; }
        n_gen++;
        res->completion_tokens++;
        if (g.in_reasoning) res->reasoning_tokens++;
        process_token(&g, t);
        if (g.stop) { fin = FIN_STOP; break; }
        /* the last token is not evaluated: nothing would read its logits,
         * and the next request's prompt suffix covers it */
        if (n_gen >= max_gen) { fin = FIN_LENGTH; break; }
        int e = ds4_session_eval(s, &t, 1, NULL, NULL);
        if (e == DS4_ECTX) { fin = FIN_LENGTH; break; }
        if (e) {
            fin = FIN_ERROR;
            api_err_set(&res->err, 500, "server_error", NULL, NULL, "decode failed: %s",
                        ds4_strerror(e));
            break;
        }
        if (g.in_reasoning && rq->think_budget > 0 && res->reasoning_tokens >= rq->think_budget &&
            g.forced_pos >= g.forced.n && !rq->test_output)
            ds4_tokens_push(&g.forced, srv->sp->think_end);
    }
    res->decode_s = util_now() - t1;

    /* 4. Flush what the detokenizer, the DSML parser and the stop matcher
     * still hold, then decide the finish reason. */
    if (fin != FIN_CANCEL && fin != FIN_ERROR) {
        g.piece.n = 0;
        ds4_detok_flush(&g.dt, &g.piece);
        if (g.piece.n) {
            if (g.in_reasoning) emit_reasoning(&g, g.piece.p, g.piece.n);
            else content_bytes(&g, g.piece.p, g.piece.n);
        }
        if (g.dsml && !g.block_done && !g.block_error && !g.stop_seq) ds4_dsml_finish(g.dsml);
        flush_hold(&g);
        int complete = 0;
        for (int i = 0; i < res->n_calls; i++) complete += res->calls[i].complete;
        if (g.block_done) fin = FIN_TOOLS;
        else if (g.stop_seq) fin = FIN_STOP_SEQ;
        else if (g.block_error && complete && fin != FIN_LENGTH) fin = FIN_TOOLS;
        if (g.block_error && !g.block_done) {
            /* drop the calls that never closed: their arguments are not JSON */
            int k = 0;
            for (int i = 0; i < res->n_calls; i++) {
                if (res->calls[i].complete) res->calls[k++] = res->calls[i];
                else { free(res->calls[i].name); ds4_buf_free(&res->calls[i].args); }
            }
            res->n_calls = k;
        }
    }
    if (fin == FIN_CANCEL && atomic_load(&j->cancel) == CANCEL_SHUTDOWN) {
        fin = FIN_ERROR;
        api_err_set(&res->err, 503, "server_error", NULL, NULL, "the server is shutting down");
    }
    res->finish = fin;
    /* metrics before the answer is released: a client that reads /metrics
     * right after its response must see this job */
    metrics_job m = {
        .prompt_tokens = res->prompt_tokens, .cached_tokens = res->cached_tokens,
        .evaluated_tokens = evaluated, .generated_tokens = res->completion_tokens,
        .prefill_s = res->prefill_s, .decode_s = res->decode_s,
        .reuse_hit = res->cached_tokens > 0, .text_reuse = text_hit && res->cached_tokens > 0,
        .retokenized = text_hit && retok, .tool_calls = res->n_calls,
        .cancelled = fin == FIN_CANCEL ? CANCEL_CLIENT :
                     atomic_load(&j->cancel) == CANCEL_SHUTDOWN ? CANCEL_SHUTDOWN : 0,
        .session_tokens = ds4_session_n_tokens(s),
    };
    metrics_job_done(srv->m, &m);
    api_event(j, EV_FINISH, 0, NULL, 0);
    job_finish_stream(j);

    /* KV CACHE HOOK (generation frontier): the session now holds prompt +
     * answer, the prefix of the client's next turn; a snapshot here serves a
     * client that comes back after another conversation used the session. */

    static const char *const fname[] = { "none", "stop", "length", "stop_sequence", "tool_calls",
                                         "cancelled", "error" };
    log_msg("job %llu %s: prompt %d (cached %d, evaluated %d, %.0f tok/s), generated %d "
            "(%.1f tok/s), %s%s%s", (unsigned long long)j->seq,
            endpoint_label(rq->api == API_CHAT ? EP_CHAT : rq->api == API_COMPLETIONS ?
                           EP_COMPLETIONS : rq->api == API_RESPONSES ? EP_RESPONSES : EP_MESSAGES),
            res->prompt_tokens, res->cached_tokens, evaluated,
            res->prefill_s > 0 ? evaluated / res->prefill_s : 0.0, res->completion_tokens,
            res->decode_s > 0 ? res->completion_tokens / res->decode_s : 0.0, fname[fin],
            fin == FIN_ERROR ? ": " : "", fin == FIN_ERROR ? res->err.message : "");

    ds4_sampler_free(smp);
    ds4_dsml_free(g.dsml);
    ds4_buf_free(&g.piece);
    ds4_buf_free(&g.hold);
    ds4_tokens_free(&g.forced);
    ds4_tokens_free(&test);
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
            api_event(j, EV_FINISH, 0, NULL, 0);
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
    /* KV CACHE HOOK (shutdown): save the live session before it is freed. */
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
    srv->ctx = ds4_session_ctx_size(w->s);
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
    j->next = NULL;
    if (w->tail) w->tail->next = j; else w->head = j;
    w->tail = j;
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
        fail_job(q, 503, "server_error", "the server is shutting down");
        job_unref(q);
        q = n;
    }
    pthread_join(w->th, NULL);
    w->started = 0;
}

void worker_free(worker *w) {
    if (!w) return;
    worker_stop(w);
    ds4_session_free(w->s);
    ds4_buf_free(&w->live);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
