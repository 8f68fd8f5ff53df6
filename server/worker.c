/*
 * worker.c -- the job queue, the single inference thread, live-session
 * reuse, and the generation loop (stop sequences, cancellation, DSML
 * tool-call parsing with greedy syntax, forced text, the test output).
 *
 * Owns: the ds4_session and the disk KV cache handle (only this thread
 * touches them), the FIFO of jobs, and the tool-call ids it hands out.
 * Must not: parse requests (conv.c) or shape responses (api_*.c: called
 * through api_event on this thread).
 *
 * Session reuse.  The session holds the tokens of the last prompt plus what
 * was generated after it.  Their detokenized bytes are exactly the text the
 * tokens stand for (special tokens included), so that text is "what the
 * live session holds".  A new rendered prompt that starts with it keeps all
 * those tokens; when they are also a prefix of the prompt's own
 * tokenization (made by the connection thread) the rest of those tokens is
 * evaluated, otherwise only the rest of the text is tokenized -- a fresh
 * tokenization of the whole prompt would split the kept part differently
 * (the model's own sampled tokens rarely match BPE's choice), which is
 * fine, unless the cut falls inside a special token or the kept tokens
 * spell a marker as plain text where the prompt has the real one.
 * Otherwise the session is kept if it is a token prefix of the prompt; the
 * session cannot rewind, so any divergence re-evaluates from the start (or
 * from a saved state on disk).
 *
 * Disk KV cache (--kv-disk-dir; kvstore.c keeps the files, this file
 * decides when to use them, with the CLI's ds4_kv_policy arithmetic):
 *   - lookup: when the live session does not already cover more of the new
 *     prompt, the longest saved state whose text is a prefix of the
 *     rendered prompt is restored (the store leaves the session alone on a
 *     miss); when its tokens are a prefix of the prompt's own tokenization
 *     the rest of those tokens is evaluated (exactly what a fresh server
 *     evaluates), otherwise -- a different BPE split of earlier assistant
 *     text -- only the remaining text is tokenized;
 *   - saves: cold (a prompt evaluated from scratch is split at its cold
 *     point), continued (prefill and generation stop exactly at each
 *     frontier), evict (before a request that does not continue the live
 *     session replaces it), shutdown (after the last job).  Each file gets
 *     the tool-call ids whose exact DSML its text holds, so a client that
 *     comes back after a restart still replays them exactly;
 *   - tool ids the in-memory tool memory does not know are looked up in the
 *     files before the prompt is rendered again (conv.c marks them).
 * A failed save (full disk) is logged once per run of failures and counted;
 * the request goes on.  The store is driven by this thread only.
 *
 * Cancellation: connection threads set job->cancel when their client goes
 * away; the prefill checks it between chunks through the progress
 * callback, the decode loop before every token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "conv.h"
#include "metrics.h"
#include "toolmem.h"
#include "common/logprob.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"

/* The tool section of a cache file maps an id to its exact DSML; the
 * reasoning before a block is stored as one more entry under the id plus
 * this suffix (our ids are base62, so it cannot clash), so that a client
 * that drops reasoning_content gets the prompt the model saw after a
 * restart too, as it does from the tool memory. */
#define KV_REASONING_SUFFIX "/reasoning"

typedef struct {
    char *id;
    char *dsml;
    size_t dsml_len;
    char *reasoning;          /* NULL = none */
    size_t reasoning_len;
} live_tool;

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

    /* disk KV cache (kv == NULL: off) */
    ds4_kvstore *kv;
    ds4_kv_policy pol;
    int frontier;        /* next continued checkpoint (a token count) */
    int saved_n;         /* length of the live session when last saved or
                          * restored: the same state is not written twice */
    int sess_bad;        /* an evaluation failed: the state is not trusted */
    int save_failing;    /* the last save failed (logged once per run) */
    uint64_t saves[6];   /* by ds4_kv_reason */
    live_tool *tools;    /* tool calls whose exact DSML the live session
                          * (or the prompt being evaluated) holds */
    int n_tools, cap_tools;
};

/* ------------------------------------------------------------------------ */
/* the tool calls of the live session (for the disk KV cache)                */
/* ------------------------------------------------------------------------ */

static void tools_clear(worker *w) {
    for (int i = 0; i < w->n_tools; i++) {
        free(w->tools[i].id);
        free(w->tools[i].dsml);
        free(w->tools[i].reasoning);
    }
    w->n_tools = 0;
}

static void tools_add(worker *w, const char *id, const char *dsml, size_t dsml_len,
                      const char *reasoning, size_t reasoning_len) {
    if (!w->kv || !id || !dsml) return;
    for (int i = 0; i < w->n_tools; i++)
        if (!strcmp(w->tools[i].id, id)) return;
    if (w->n_tools == w->cap_tools) {
        int nc = w->cap_tools ? 2 * w->cap_tools : 16;
        live_tool *t = realloc(w->tools, (size_t)nc * sizeof *t);
        if (!t) return;
        w->tools = t;
        w->cap_tools = nc;
    }
    live_tool *t = &w->tools[w->n_tools];
    memset(t, 0, sizeof *t);
    t->id = strdup(id);
    t->dsml = strndup(dsml, dsml_len);
    t->dsml_len = dsml_len;
    if (reasoning && reasoning_len) {
        t->reasoning = strndup(reasoning, reasoning_len);
        t->reasoning_len = reasoning_len;
    }
    if (!t->id || !t->dsml) {
        free(t->id); free(t->dsml); free(t->reasoning);
        return;
    }
    w->n_tools++;
}

/* The exactly replayed tool calls of a request's history: its prompt holds
 * their DSML, and so will every state saved while it is evaluated. */
static void tools_from_request(worker *w, const request *rq) {
    tools_clear(w);
    for (int i = 0; i < rq->n_msgs; i++) {
        const ds4_message *m = &rq->msgs[i];
        if (m->role != DS4_ROLE_ASSISTANT || !m->dsml_exact) continue;
        for (int k = 0; k < m->n_tool_calls; k++)
            tools_add(w, m->tool_calls[k].id, m->dsml_exact, strlen(m->dsml_exact),
                      m->reasoning, m->reasoning ? m->reasoning_len : 0);
    }
}

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
    json_decref(j->res.lp);
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
    json_t *trace_ev;         /* --trace: the DSML parser's events (NULL = off) */
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
        /* the live session now holds this block: later saves carry it */
        for (int i = 0; i < n; i++) tools_add(g->w, ids[i], bt, bl, r->reasoning.p, r->reasoning.n);
    }
    free(ids); free(names); free(args);
}

/* --trace: one object per DSML parser event (text events are left out:
 * the trace has the content) */
static void trace_dsml(gen *g, const ds4_dsml_event *ev) {
    static const char *const kind[] = { "text", "call_begin", "args_delta", "call_end", "done", "error" };
    if (!g->trace_ev || ev->kind == DS4_DSML_TEXT) return;
    json_t *o = json_object();
    json_object_set_new(o, "event", json_string(kind[ev->kind]));
    if (ev->kind == DS4_DSML_CALL_BEGIN || ev->kind == DS4_DSML_ARGS_DELTA || ev->kind == DS4_DSML_ERROR)
        json_object_set_new(o, ev->kind == DS4_DSML_CALL_BEGIN ? "name" : ev->kind == DS4_DSML_ERROR ? "reason" : "text",
                            jstr(ev->text, ev->len));
    if (ev->kind != DS4_DSML_DONE && ev->kind != DS4_DSML_ERROR)
        json_object_set_new(o, "call", json_integer(ev->call_index));
    json_array_append_new(g->trace_ev, o);
}

static void on_dsml(void *ud, const ds4_dsml_event *ev) {
    gen *g = ud;
    job *j = g->j;
    trace_dsml(g, ev);
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

/* OpenAI logprobs of one content token (the distribution it was sampled
 * or forced from), in the chat shape; the completions shaper converts. */
static void record_logprob(gen *g, const float *lg, int32_t t) {
    gen_result *r = &g->j->res;
    const int nv = g->w->srv->n_vocab;
    if (!lg) return;
    if (!r->lp && !(r->lp = json_array())) return;
    ds4_lp_entry top[21];
    int k = g->rq->top_logprobs < 20 ? g->rq->top_logprobs : 20;
    double lse = ds4_logprob_top(lg, nv, k, top);
    json_t *e = json_object(), *alts = json_array();
    size_t n;
    const char *b = ds4_token_bytes(g->tok, t, &n);
    json_object_set_new(e, "token", jstr(b, n));
    json_object_set_new(e, "logprob", json_real((double)lg[t] - lse));
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)b[i]));
    json_object_set_new(e, "bytes", bytes);
    for (int i = 0; i < k; i++) {
        json_t *a = json_object(), *ab = json_array();
        b = ds4_token_bytes(g->tok, top[i].id, &n);
        json_object_set_new(a, "token", jstr(b, n));
        json_object_set_new(a, "logprob", json_real(top[i].logprob));
        for (size_t q = 0; q < n; q++) json_array_append_new(ab, json_integer((unsigned char)b[q]));
        json_object_set_new(a, "bytes", ab);
        json_array_append_new(alts, a);
    }
    json_object_set_new(e, "top_logprobs", alts);
    json_array_append_new(r->lp, e);
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

/* 1 when the kept tokens `a` and the prompt's tokens covering its first
 * `used` bytes hold the same special tokens at the same byte offsets.  A
 * kept state whose text spells a marker in plain-text tokens (the model
 * wrote "<｜end▁of▁sentence｜>" as text) matches the prompt byte for byte,
 * but the prompt's own tokens have the real marker there: the model would
 * continue a history that differs from the one the request describes.
 * Other differences of BPE split are harmless and allowed. */
static int same_specials(const ds4_tokenizer *tok, const ds4_special_ids *sp,
                         const int32_t *a, size_t na, const ds4_tokens *b, size_t used) {
    size_t ia = 0, ib = 0, oa = 0, ob = 0, l;
    for (;;) {
        while (ia < na && !is_special(sp, a[ia])) {
            l = 0;
            ds4_token_bytes(tok, a[ia++], &l);
            oa += l;
        }
        while (ib < b->n && ob < used && !is_special(sp, b->v[ib])) {
            l = 0;
            ds4_token_bytes(tok, b->v[ib++], &l);
            ob += l;
        }
        int ha = ia < na, hb = ib < b->n && ob < used;
        if (!ha || !hb) return ha == hb;
        if (a[ia] != b->v[ib] || oa != ob) return 0;
        l = 0;
        ds4_token_bytes(tok, a[ia], &l);
        oa += l;
        ob += l;
        ia++;
        ib++;
    }
}

/* ------------------------------------------------------------------------ */
/* disk KV cache                                                             */
/* ------------------------------------------------------------------------ */

static void kv_publish(worker *w) {
    ds4_kvstore_stats st;
    ds4_kvstore_get_stats(w->kv, &st);
    metrics_kv(w->srv->m, &st, w->saves);
}

/* Where a state's text holds a tool-call block: 1 = all of it, at or after
 * byte `from` (*end = where it ends); 2 = the text ends inside it -- a
 * generated block's last token is never evaluated (the turn ends there),
 * yet the next prompt replays the whole block after that state, so its id
 * belongs with it (half the block at least, so that a text ending in
 * "\n\n" does not claim every block); 0 = not held. */
static int holds_block(const char *text, size_t n, size_t from, const char *blk, size_t len,
                       size_t *end) {
    if (!text || !len || from > n) return 0;
    const char *hit = memmem(text + from, n - from, blk, len);
    if (hit) {
        *end = (size_t)(hit - text) + len;
        return 1;
    }
    for (size_t k = len - 1 < n - from ? len - 1 : n - from; k >= len / 2 && k > 0; k--)
        if (!memcmp(text + n - k, blk, k)) return 2;
    return 0;
}

/* Save the live session for `why` (the policy's minimum and a state that
 * is already on disk are skipped).  Failures are logged once per run of
 * failures and otherwise ignored: the request is served without the cache. */
static void kv_save(worker *w, ds4_kv_reason why) {
    if (!w->kv) return;
    int n = ds4_session_n_tokens(w->s);
    w->frontier = ds4_kv_policy_next_frontier(&w->pol, n);
    if (n < w->pol.min_tokens || n == w->saved_n || w->sess_bad) return;
    /* the tool entries whose DSML this state's text holds */
    w->live.n = 0;
    if (w->n_tools) ds4_detokenize(w->srv->tok, ds4_session_tokens(w->s), (size_t)n, &w->live);
    ds4_kv_tool *kt = calloc((size_t)(2 * w->n_tools + 1), sizeof *kt);
    char **rid = calloc((size_t)(w->n_tools + 1), sizeof *rid);
    int nk = 0, nr = 0;
    /* the entries are in conversation order, so each block is searched
     * after the previous one: one pass over the text in all; the ids of
     * one block share its text and its answer */
    size_t from = 0;
    int held = 0;
    for (int i = 0; kt && rid && i < w->n_tools; i++) {
        const live_tool *t = &w->tools[i];
        const live_tool *p = i ? &w->tools[i - 1] : NULL;
        if (!p || p->dsml_len != t->dsml_len || memcmp(p->dsml, t->dsml, t->dsml_len)) {
            if (held == 2) break;      /* the text ended inside the previous block */
            held = holds_block(w->live.p, w->live.n, from, t->dsml, t->dsml_len, &from);
        }
        if (!held) break;
        kt[nk++] = (ds4_kv_tool){ t->id, t->dsml, t->dsml_len };
        if (t->reasoning && (rid[nr] = malloc(strlen(t->id) + sizeof KV_REASONING_SUFFIX))) {
            strcpy(rid[nr], t->id);
            strcat(rid[nr], KV_REASONING_SUFFIX);
            kt[nk++] = (ds4_kv_tool){ rid[nr], t->reasoning, t->reasoning_len };
            nr++;
        }
    }
    ds4_kvstore_stats before;
    ds4_kvstore_get_stats(w->kv, &before);
    double t0 = util_now();
    char *err = NULL;
    int rc = ds4_kvstore_save(w->kv, w->s, why, kt, nk, &err);
    if (rc != DS4_OK) {
        if (!w->save_failing)
            log_msg("disk KV cache: %s (%s state of %d tokens); requests are served without "
                    "saving until a save succeeds (ds4_kv_disk_write_errors_total counts them)",
                    err ? err : ds4_strerror(rc), ds4_kv_reason_name(why), n);
        w->save_failing = 1;
    } else {
        if (w->save_failing) log_msg("disk KV cache: saving works again");
        w->save_failing = 0;
        w->saved_n = n;
        ds4_kvstore_stats after;
        ds4_kvstore_get_stats(w->kv, &after);
        if (after.saves > before.saves) {
            w->saves[why]++;
            char te[48] = "";
            if (nk) snprintf(te, sizeof te, ", %d tool entr%s", nk, nk == 1 ? "y" : "ies");
            log_msg("disk KV cache: saved %d tokens (%s%s), %.1f MiB in %.0f ms", n,
                    ds4_kv_reason_name(why), te,
                    (after.save_bytes - before.save_bytes) / 1048576.0, (util_now() - t0) * 1e3);
        }
    }
    free(err);
    for (int i = 0; i < nr; i++) free(rid[i]);
    free(rid);
    free(kt);
    kv_publish(w);
}

/* Append n tokens, stopping exactly at every continued-checkpoint frontier
 * to save the state there (same arithmetic as the CLI). */
static int eval_ckpt(worker *w, const int32_t *t, int n, ds4_progress_fn pf, void *ud) {
    while (n > 0) {
        int cur = ds4_session_n_tokens(w->s), k = n;
        if (w->kv && w->frontier > cur && w->frontier - cur < n) k = w->frontier - cur;
        int rc = ds4_session_eval(w->s, t, k, pf, ud);
        if (rc) {
            /* ECTX changes nothing and ECANCEL stops at a token boundary;
             * anything else may leave a half-written state */
            if (rc != DS4_ECTX && rc != DS4_ECANCEL) w->sess_bad = 1;
            return rc;
        }
        t += k;
        n -= k;
        if (w->kv && ds4_session_n_tokens(w->s) == w->frontier) kv_save(w, DS4_KV_CONTINUED);
    }
    return DS4_OK;
}

/* The calls of a DSML block as the parser reads them (what the client got). */
typedef struct {
    const ds4_tool_call *calls;
    int n, at, ok;
    ds4_buf args;
} dsml_check;

static void dsml_check_cb(void *ud, const ds4_dsml_event *ev) {
    dsml_check *c = ud;
    switch (ev->kind) {
    case DS4_DSML_CALL_BEGIN:
        if (c->at >= c->n || !c->calls[c->at].name || strlen(c->calls[c->at].name) != ev->len ||
            memcmp(c->calls[c->at].name, ev->text, ev->len))
            c->ok = 0;
        c->args.n = 0;
        break;
    case DS4_DSML_ARGS_DELTA:
        ds4_buf_append(&c->args, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_END:
        if (c->ok && c->at < c->n) {
            const char *got = c->args.n ? c->args.p : "{}";
            const char *sent = c->calls[c->at].arguments ? c->calls[c->at].arguments : "";
            if (!toolmem_args_equal(sent, got)) c->ok = 0;
        }
        c->at++;
        break;
    case DS4_DSML_ERROR:
        c->ok = 0;
        break;
    default:
        break;
    }
}

/* 1 when the block holds exactly these calls: same count, names in order,
 * JSON-equal arguments.  A client that changed a call but kept its id must
 * get the canonical rendering, never stale bytes. */
static int dsml_matches(const char *blk, size_t len, const ds4_tool_call *calls, int n) {
    dsml_check c = { calls, n, 0, 1, { 0 } };
    ds4_dsml *p = ds4_dsml_new(dsml_check_cb, &c);
    if (!p) return 0;
    ds4_dsml_feed(p, blk, len);
    if (ds4_dsml_finish(p) != DS4_OK) c.ok = 0;
    ds4_dsml_free(p);
    ds4_buf_free(&c.args);
    return c.ok && c.at == n;
}

/* Assistant tool-call turns the tool memory did not know (a restart, or
 * its LRU cap): the files may hold their exact DSML (and the reasoning
 * before it).  Every id of the turn must give the same block, and the
 * block must hold the calls the client sent.  When any turn is found the
 * prompt is rendered and tokenized again.  Returns -1 (with *e) when the
 * new prompt no longer fits. */
static int kv_resolve_tools(worker *w, request *rq, api_error *e) {
    int found = 0;
    ds4_buf b = { 0 }, o = { 0 };
    for (int i = 0; i < rq->n_msgs; i++) {
        ds4_message *m = &rq->msgs[i];
        if (m->role != DS4_ROLE_ASSISTANT || m->n_tool_calls <= 0 || m->dsml_exact) continue;
        int ok = 1;
        for (int k = 0; k < m->n_tool_calls; k++) ok = ok && m->tool_calls[k].id;
        b.n = 0;
        if (!ok || !ds4_kvstore_tool_dsml(w->kv, m->tool_calls[0].id, &b) || !b.n) continue;
        for (int k = 1; ok && k < m->n_tool_calls; k++) {
            o.n = 0;
            ok = ds4_kvstore_tool_dsml(w->kv, m->tool_calls[k].id, &o) && o.n == b.n &&
                 !memcmp(o.p, b.p, b.n);
        }
        if (!ok || !dsml_matches(b.p, b.n, m->tool_calls, m->n_tool_calls)) continue;
        m->dsml_exact = request_strdup(rq, b.p, b.n);
        if (!m->dsml_exact) continue;
        if (!m->reasoning_len) {
            size_t il = strlen(m->tool_calls[0].id);
            char *rid = malloc(il + sizeof KV_REASONING_SUFFIX);
            o.n = 0;
            if (rid) {
                memcpy(rid, m->tool_calls[0].id, il);
                memcpy(rid + il, KV_REASONING_SUFFIX, sizeof KV_REASONING_SUFFIX);
                if (ds4_kvstore_tool_dsml(w->kv, rid, &o) && o.n) {
                    m->reasoning = request_strdup(rq, o.p, o.n);
                    m->reasoning_len = m->reasoning ? o.n : 0;
                }
                free(rid);
            }
        }
        /* later turns find it in memory */
        const char **ids = calloc((size_t)m->n_tool_calls, sizeof *ids);
        const char **names = calloc((size_t)m->n_tool_calls, sizeof *names);
        const char **args = calloc((size_t)m->n_tool_calls, sizeof *args);
        if (ids && names && args) {
            for (int k = 0; k < m->n_tool_calls; k++) {
                ids[k] = m->tool_calls[k].id;
                names[k] = m->tool_calls[k].name;
                args[k] = m->tool_calls[k].arguments;
            }
            toolmem_put(w->srv->tm, ids, names, args, m->n_tool_calls, b.p, b.n,
                        m->reasoning, m->reasoning ? m->reasoning_len : 0);
        }
        free(ids); free(names); free(args);
        found++;
    }
    ds4_buf_free(&b);
    ds4_buf_free(&o);
    rq->replay_exact += found;
    rq->replay_canonical -= found;
    metrics_tool_replay(w->srv->m, rq->replay_exact, rq->replay_canonical);
    if (!found) return 0;
    log_msg("disk KV cache: exact DSML of %d tool-call turn%s found in the cache files", found,
            found == 1 ? "" : "s");
    rq->prompt.n = 0;
    rq->tokens.n = 0;
    return conv_prepare(rq, e) ? -1 : 0;
}

/* Which candidate states the prompt can continue (the veto the kvstore
 * asks before touching the session): the prompt's own tokens continue the
 * state, or -- for the same text split into other tokens -- the cut falls
 * on a character boundary, outside any special token, every marker is a
 * real marker on both sides, ids were not sent as ids, and the rest still
 * fits the context.  The second case tokenizes the rest into `todo`. */
typedef struct {
    worker *w;
    request *rq;
    const char *text;
    size_t len;
    ds4_tokens *todo;
    int mode;                /* 1: prompt tokens continue it; 2: re-tokenized rest */
} kv_accept_ud;

static int kv_accept(void *ud, const int32_t *tok, int n, size_t used) {
    kv_accept_ud *a = ud;
    server_ctx *srv = a->w->srv;
    request *rq = a->rq;
    a->mode = 0;
    if (rq->tokens.n >= (size_t)n && !memcmp(tok, rq->tokens.v, (size_t)n * sizeof *tok)) {
        a->mode = 1;
        return 1;
    }
    if (rq->raw_ids || !char_boundary(a->text, a->len, used) ||
        cut_splits_special(srv->tok, srv->sp, &rq->tokens, used) ||
        !same_specials(srv->tok, srv->sp, tok, (size_t)n, &rq->tokens, used)) {
        log_msg("disk KV cache: a %d-token state matches the text but this prompt's tokens "
                "cannot continue it (a marker cut or spelled as text); skipped", n);
        return 0;
    }
    a->todo->n = 0;
    ds4_tokenize(srv->tok, a->text + used, a->len - used, DS4_TOK_SPECIAL, a->todo);
    if ((size_t)n + a->todo->n >= (size_t)srv->ctx) return 0;
    a->mode = 2;
    return 1;
}

/* Restore the longest saved state whose text starts the prompt, holds
 * more than `better_than` tokens and that the prompt can continue.  On a
 * hit, `todo` receives the tokens still to evaluate and the restored count
 * is returned; 0 = miss (the session is as it was). */
static int kv_lookup(worker *w, request *rq, int better_than, ds4_tokens *todo, int *retok) {
    server_ctx *srv = w->srv;
    ds4_session *s = w->s;
    ds4_buf ids_text = { 0 };
    const char *text = rq->prompt.p;
    size_t len = rq->prompt.n;
    if (rq->raw_ids) {
        /* token ids: their text finds the file; the tokens must then match */
        ds4_detokenize(srv->tok, rq->tokens.v, rq->tokens.n, &ids_text);
        text = ids_text.p;
        len = ids_text.n;
    }
    size_t used = 0;
    *retok = 0;
    todo->n = 0;
    double t0 = util_now();
    kv_accept_ud acc = { w, rq, text, len, todo, 0 };
    int got = text && len ? ds4_kvstore_restore_if(w->kv, s, text, len, w->pol.min_tokens,
                                                   better_than, kv_accept, &acc, &used) : 0;
    kv_publish(w);
    ds4_buf_free(&ids_text);
    if (got <= 0) { todo->n = 0; return 0; }
    double dt = util_now() - t0;
    w->saved_n = got;
    w->sess_bad = 0;
    if (acc.mode == 1) {
        /* the prompt's own tokenization continues the state: evaluate the
         * same tokens a server without the cache would */
        todo->n = 0;
        ds4_tokens_reserve(todo, rq->tokens.n - (size_t)got + 1);
        for (size_t i = (size_t)got; i < rq->tokens.n; i++) ds4_tokens_push(todo, rq->tokens.v[i]);
    } else {
        /* a different BPE split of earlier text: only the rest was tokenized */
        *retok = 1;
    }
    log_msg("disk KV cache: restored %d tokens (%zu bytes of the prompt) in %.0f ms", got, used,
            dt * 1e3);
    return got;
}

static void run_job(worker *w, job *j) {
    server_ctx *srv = w->srv;
    request *rq = j->rq;
    gen_result *res = &j->res;
    ds4_session *s = w->s;
    const int ctx = srv->ctx;

    /* 0. Tool-call turns the tool memory did not know: the disk cache may
     * hold their exact DSML (then the prompt is rendered again). */
    if (w->kv && rq->tool_misses > 0 && kv_resolve_tools(w, rq, &res->err) < 0) {
        res->finish = FIN_ERROR;
        api_event(j, EV_FINISH, 0, NULL, 0);
        job_finish_stream(j);
        metrics_job m0 = { .session_tokens = ds4_session_n_tokens(s) };
        metrics_job_done(srv->m, &m0);
        log_msg("job %llu: %s", (unsigned long long)j->seq, res->err.message);
        return;
    }
    if (w->sess_bad) {
        /* a failed evaluation left a state nobody should continue */
        ds4_session_reset(s);
        w->sess_bad = 0;
        w->saved_n = 0;
    }
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
            const int32_t *st = ds4_session_tokens(s);
            retok = rq->tokens.n < (size_t)n_sess ||
                    memcmp(st, rq->tokens.v, (size_t)n_sess * sizeof(int32_t)) != 0;
            int usable = 1;
            if (retok && !same_specials(srv->tok, srv->sp, st, (size_t)n_sess, &rq->tokens,
                                        w->live.n)) {
                usable = 0;    /* a marker spelled as text: not the prompt's history */
            } else if (retok) {
                ds4_tokenize(srv->tok, rq->prompt.p + w->live.n, rq->prompt.n - w->live.n,
                             DS4_TOK_SPECIAL, &suffix);
            } else {
                /* the prompt's own tokens continue the session: evaluate
                 * those, as a server that never saw the earlier turn would */
                for (size_t i = (size_t)n_sess; i < rq->tokens.n; i++)
                    ds4_tokens_push(&suffix, rq->tokens.v[i]);
            }
            if (usable && (size_t)n_sess + suffix.n < (size_t)ctx) text_hit = 1;
            else suffix.n = 0;
            if (!text_hit) retok = 0;
        }
    }
    int expect_reuse = 0;
    if (text_hit) {
        expect_reuse = n_sess;
    } else if (n_sess > 0 && rq->tokens.n >= (size_t)n_sess &&
               !memcmp(ds4_session_tokens(s), rq->tokens.v, (size_t)n_sess * sizeof(int32_t)) &&
               (rq->tokens.n > (size_t)n_sess || ds4_session_logits(s))) {
        /* the session is a token prefix of the prompt */
        expect_reuse = n_sess;
        for (size_t i = (size_t)n_sess; i < rq->tokens.n; i++)
            ds4_tokens_push(&suffix, rq->tokens.v[i]);
    }

    /* 2. Disk KV cache: a request that does not continue the live session
     * replaces it, so the live state is saved first (evict); then the
     * longest saved prefix of the prompt is restored when it beats what
     * the live session keeps. */
    int disk = 0, disk_retok = 0;
    if (w->kv) {
        if (expect_reuse == 0 && n_sess > 0) kv_save(w, DS4_KV_EVICT);
        ds4_tokens todo = { 0 };
        disk = kv_lookup(w, rq, expect_reuse, &todo, &disk_retok);
        if (disk > 0) {
            ds4_tokens_free(&suffix);
            suffix = todo;
            text_hit = 0;
            expect_reuse = disk;
        } else {
            ds4_tokens_free(&todo);
        }
    }
    /* nothing kept: the whole prompt is evaluated from an empty session */
    const int scratch = expect_reuse == 0;
    if (scratch) {
        suffix.n = 0;
        for (size_t i = 0; i < rq->tokens.n; i++) ds4_tokens_push(&suffix, rq->tokens.v[i]);
    }
    res->prompt_tokens = expect_reuse + (int)suffix.n;
    res->cached_tokens = expect_reuse;
    int room = ctx - res->prompt_tokens;
    int max_gen = rq->max_tokens > 0 && rq->max_tokens < room ? rq->max_tokens : room;
    if (w->kv) {
        w->frontier = ds4_kv_policy_next_frontier(&w->pol, expect_reuse);
        /* from here on the live session is this request's */
        tools_from_request(w, rq);
    }

    api_event(j, EV_START, 0, NULL, 0);

    /* 3. Prefill. */
    double t0 = util_now();
    progress_ud pu = { j };
    int reused = expect_reuse, rc = DS4_OK;
    const int32_t *tv = suffix.v;
    int tn = (int)suffix.n;
    if (scratch) {
        ds4_session_reset(s);
        w->saved_n = 0;
        /* cold checkpoint: a prompt evaluated from scratch is saved at its
         * trimmed, aligned point, which the next turn (re-rendering the
         * tail differently) still starts with */
        int cold = w->kv ? ds4_kv_policy_cold_point(&w->pol, tn) : 0;
        if (cold > 0 && cold <= tn) {
            rc = eval_ckpt(w, tv, cold, on_progress, &pu);
            if (rc == DS4_OK) kv_save(w, DS4_KV_COLD);
            tv += cold;
            tn -= cold;
        }
    }
    if (rc == DS4_OK && tn > 0) rc = eval_ckpt(w, tv, tn, on_progress, &pu);
    ds4_tokens_free(&suffix);
    res->cached_tokens = reused;
    res->prefill_s = util_now() - t0;
    int evaluated = ds4_session_n_tokens(s) - reused;
    if (evaluated < 0) evaluated = 0;

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
        if (srv->trace) g.trace_ev = json_array();
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
        if (rq->logprobs && !g.in_reasoning) record_logprob(&g, ds4_session_logits(s), t);
        n_gen++;
        res->completion_tokens++;
        if (g.in_reasoning) res->reasoning_tokens++;
        process_token(&g, t);
        if (g.stop) { fin = FIN_STOP; break; }
        /* the last token is not evaluated: nothing would read its logits,
         * and the next request's prompt suffix covers it */
        if (n_gen >= max_gen) { fin = FIN_LENGTH; break; }
        int e = eval_ckpt(w, &t, 1, NULL, NULL);
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
    static const char *const fname[] = { "none", "stop", "length", "stop_sequence", "tool_calls",
                                         "cancelled", "error" };
    if (srv->trace) {
        /* --trace: one JSON line per request, written by this (the only)
         * worker thread before the answer is released */
        json_t *o = json_object(), *cache = json_object(), *calls = json_array();
        json_object_set_new(o, "time", json_integer(util_unix_time()));
        json_object_set_new(o, "job", json_integer((json_int_t)j->seq));
        json_object_set_new(o, "api", json_string(endpoint_label(rq->api == API_CHAT ? EP_CHAT :
            rq->api == API_COMPLETIONS ? EP_COMPLETIONS : rq->api == API_RESPONSES ? EP_RESPONSES : EP_MESSAGES)));
        json_object_set_new(o, "prompt", jstr(rq->prompt.p, rq->prompt.n));
        json_object_set_new(o, "prompt_tokens", json_integer(res->prompt_tokens));
        json_object_set_new(cache, "reused_tokens", json_integer(res->cached_tokens));
        json_object_set_new(cache, "source", json_string(res->cached_tokens == 0 ? "none" : disk > 0 ? "disk" :
                                                        text_hit ? "live session (text match)" : "live session (token prefix)"));
        json_object_set_new(cache, "retokenized", json_boolean(disk > 0 ? disk_retok : text_hit && retok));
        json_object_set_new(cache, "evaluated_tokens", json_integer(evaluated));
        json_object_set_new(cache, "from_scratch", json_boolean(scratch));
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
        json_object_set_new(o, "tool_parser_events", g.trace_ev ? g.trace_ev : json_array());
        g.trace_ev = NULL;
        json_object_set_new(o, "completion_tokens", json_integer(res->completion_tokens));
        json_object_set_new(o, "reasoning_tokens", json_integer(res->reasoning_tokens));
        json_object_set_new(o, "finish", json_string(fname[fin]));
        if (fin == FIN_ERROR) json_object_set_new(o, "error", jcstr(res->err.message));
        json_object_set_new(o, "prefill_s", json_real(res->prefill_s));
        json_object_set_new(o, "decode_s", json_real(res->decode_s));
        char *line = jdump(o);
        if (line) { fprintf(srv->trace, "%s\n", line); fflush(srv->trace); }
        free(line);
        json_decref(o);
    }
    /* metrics before the answer is released: a client that reads /metrics
     * right after its response must see this job */
    metrics_job m = {
        .prompt_tokens = res->prompt_tokens, .cached_tokens = res->cached_tokens,
        .disk_tokens = disk > 0 ? res->cached_tokens : 0,
        .disk_retokenized = disk > 0 && disk_retok,
        .evaluated_tokens = evaluated, .generated_tokens = res->completion_tokens,
        .prefill_s = res->prefill_s, .decode_s = res->decode_s,
        .reuse_hit = res->cached_tokens > 0 && disk == 0, .text_reuse = text_hit && res->cached_tokens > 0,
        .retokenized = text_hit && retok, .tool_calls = res->n_calls,
        .cancelled = fin == FIN_CANCEL ? CANCEL_CLIENT :
                     atomic_load(&j->cancel) == CANCEL_SHUTDOWN ? CANCEL_SHUTDOWN : 0,
        .session_tokens = ds4_session_n_tokens(s),
    };
    metrics_job_done(srv->m, &m);
    api_event(j, EV_FINISH, 0, NULL, 0);
    job_finish_stream(j);

    log_msg("job %llu %s: prompt %d (cached %d%s, evaluated %d, %.0f tok/s), generated %d "
            "(%.1f tok/s), %s%s%s", (unsigned long long)j->seq,
            endpoint_label(rq->api == API_CHAT ? EP_CHAT : rq->api == API_COMPLETIONS ?
                           EP_COMPLETIONS : rq->api == API_RESPONSES ? EP_RESPONSES : EP_MESSAGES),
            res->prompt_tokens, res->cached_tokens, disk > 0 ? " from disk" : "", evaluated,
            res->prefill_s > 0 ? evaluated / res->prefill_s : 0.0, res->completion_tokens,
            res->decode_s > 0 ? res->completion_tokens / res->decode_s : 0.0, fname[fin],
            fin == FIN_ERROR ? ": " : "", fin == FIN_ERROR ? res->err.message : "");

    json_decref(g.trace_ev);
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
    /* clean exit: keep the live conversation for the next start */
    if (w->kv) kv_save(w, DS4_KV_SHUTDOWN);
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
    w->saved_n = -1;
    if (srv->cfg.kv_dir) {
        /* opened here, driven only by the worker thread from now on */
        ds4_kvstore_params kp;
        ds4_kvstore_params_default(&kp);
        kp.dir = srv->cfg.kv_dir;
        kp.space_bytes = srv->cfg.kv_space_mb << 20;
        kp.allow_quant_variants = srv->cfg.kv_allow_variants;
        w->kv = ds4_kvstore_open(srv->model, &kp, err);
        if (!w->kv) { worker_free(w); return NULL; }
        w->pol = srv->cfg.kv_policy;
        kv_publish(w);
        ds4_kvstore_stats st;
        ds4_kvstore_get_stats(w->kv, &st);
        log_msg("disk KV cache: %s: %llu files, %.1f MiB (cap %llu MiB); saves: min %d tokens, "
                "cold up to %d, every %d, trim %d, align %d%s", srv->cfg.kv_dir,
                (unsigned long long)st.files, st.bytes / 1048576.0,
                (unsigned long long)srv->cfg.kv_space_mb, w->pol.min_tokens,
                w->pol.cold_max_tokens, w->pol.continued_interval, w->pol.trim_tokens,
                w->pol.align_tokens, srv->cfg.kv_allow_variants ? "; quantization variants allowed" : "");
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
    ds4_kvstore_close(w->kv);
    ds4_session_free(w->s);
    ds4_buf_free(&w->live);
    tools_clear(w);
    free(w->tools);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
