/*
 * gen.c -- see gen.h.
 *
 * Tool calls.  Content goes through the streaming DSML parser.  A call is
 * held back until its invoke closes, then sent whole (its name, its
 * argument deltas as they were generated, its end): a client never sees a
 * call whose arguments stop half way.  When the model writes malformed
 * DSML, generation stops; the calls that closed before stay calls, and the
 * block's text from the first unclosed call on (the whole block when none
 * closed) becomes visible content, with the finish FIN_TOOL_ERROR (each
 * API shapes it as an error finish).  A block cut by max_tokens or the
 * context is returned as text the same way, with the length finish.
 */
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "job.h"
#include "common/logprob.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"

struct gen {
    const gen_env *env;
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
    size_t block_closed;      /* block text up to the end of the last closed call */
    ds4_buf pend;             /* argument deltas of the open call, not sent yet */
    size_t *pend_len;         /* their sizes (sent as the same deltas) */
    int n_pend, cap_pend;
    /* the stepping state (was the locals of one decode loop) */
    ds4_sampler *smp;
    ds4_tokens test;          /* --test-mode output */
    size_t ti;                /* next test token */
    int max_gen, n_gen;
    int lookup;               /* drafts per pass (0: off, or batched) */
    int mtp_draft;            /* MTP drafts per pass (0: off, or batched) */
    /* a staged pass in flight: sp_pass[0..sp_n) evaluated, [0..sp_i]
     * chosen; sp_acc: the token just chosen was a draft (evaluated) */
    int32_t sp_pass[DS4_DRAFT_PASS_MAX];
    int sp_n, sp_i, sp_acc;
    /* positions [0, sp_jn) of the pass hold sampled MTP drafts
     * (sp_pass[i + 1], drawn from ds4_mtp_draft_dist(s, i)), judged by
     * the speculative-sampling rule where the request samples; the last
     * one may be a drafted end-of-sequence, not evaluated */
    int sp_jn;
    /* the request's tool results with numbered lines, without the
     * numbers: a second prompt-lookup source (built at the first pass) */
    ds4_tokens corpus;
    int corpus_built;
    int failed;               /* gen_new could not allocate */
};

/* Coding agents' read tools number a file's lines (cat -n style); a model
 * that writes the file back drops the numbers, so in the prompt alone the
 * lookup drafts the next line number at every line end.  The tool
 * messages' numbered lines without their numbers (ds4_lookup_corpus;
 * the newest, up to LOOKUP_CORPUS_BYTES) are searched too, and win where
 * their match is at least as long as the prompt's (docs/SPEC.md).  Only
 * the drafts change, never the output. */
#define LOOKUP_CORPUS_BYTES (256 * 1024)

static void build_corpus(gen *g) {
    g->corpus_built = 1;
    const request *rq = g->rq;
    const char **texts = malloc(((size_t)rq->n_msgs + 1) * sizeof *texts);
    size_t *lens = malloc(((size_t)rq->n_msgs + 1) * sizeof *lens);
    int n = 0;
    for (int i = 0; texts && lens && i < rq->n_msgs; i++)
        if (rq->msgs[i].role == DS4_ROLE_TOOL && rq->msgs[i].content) {
            texts[n] = rq->msgs[i].content;
            lens[n++] = rq->msgs[i].content_len;
        }
    /* out of memory: no second source (drafts are only guesses) */
    if (!texts || !lens || ds4_lookup_corpus(g->tok, texts, lens, n, LOOKUP_CORPUS_BYTES, &g->corpus))
        ds4_tokens_free(&g->corpus);
    free(texts);
    free(lens);
}

static void force_text(gen *g, const char *s) {
    if (!s || !*s) return;
    /* keep what is still queued, append the new text's tokens */
    ds4_tokenize(g->tok, s, strlen(s), DS4_TOK_SPECIAL, &g->forced);
}

static void emit_reasoning(gen *g, const char *s, size_t n) {
    if (!n) return;
    ds4_buf_append(&g->j->res.reasoning, s, n);
    job_event(g->j, EV_REASONING, 0, s, n);
}

static void emit_visible(gen *g, const char *s, size_t n) {
    if (!n) return;
    ds4_buf_append(&g->j->res.content, s, n);
    job_event(g->j, EV_TEXT, 0, s, n);
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

static void pend_delta(gen *g, const char *s, size_t n) {
    if (g->n_pend == g->cap_pend) {
        int nc = g->cap_pend ? 2 * g->cap_pend : 16;
        size_t *p = realloc(g->pend_len, (size_t)nc * sizeof *p);
        if (!p) { g->stop = 1; return; }
        g->pend_len = p;
        g->cap_pend = nc;
    }
    ds4_buf_append(&g->pend, s, n);
    g->pend_len[g->n_pend++] = n;
}

/* The open call closed: send it whole. */
static void send_call(gen *g, int index) {
    job *j = g->j;
    job_event(j, EV_TOOL_BEGIN, index, NULL, 0);
    size_t off = 0;
    for (int i = 0; i < g->n_pend; i++) {
        job_event(j, EV_TOOL_ARGS, index, g->pend.p + off, g->pend_len[i]);
        off += g->pend_len[i];
    }
    if (!g->n_pend) job_event(j, EV_TOOL_ARGS, index, "{}", 2);
    job_event(j, EV_TOOL_END, index, NULL, 0);
    g->pend.n = 0;
    g->n_pend = 0;
}

/* --trace: one object per DSML parser event (text events are left out:
 * the trace has the content) */
static void trace_dsml(gen *g, const ds4_dsml_event *ev) {
    static const char *const kind[] = { "text", "call_begin", "args_delta", "call_end", "done", "error" };
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
        g->pend.n = 0;
        g->n_pend = 0;
        break;
    }
    case DS4_DSML_ARGS_DELTA:
        if (j->res.n_calls > 0) {
            gen_call *c = &j->res.calls[j->res.n_calls - 1];
            ds4_buf_append(&c->args, ev->text, ev->len);
            pend_delta(g, ev->text, ev->len);
        }
        break;
    case DS4_DSML_CALL_END:
        if (j->res.n_calls > 0) {
            gen_call *c = &j->res.calls[j->res.n_calls - 1];
            c->complete = 1;
            if (!c->args.p) ds4_buf_puts(&c->args, "{}");
            send_call(g, j->res.n_calls - 1);
            ds4_dsml_block_text(g->dsml, &g->block_closed);
            /* parallel_tool_calls=false: close the block after one call */
            if (g->rq->single_call && g->rq->test_output == NULL && j->res.n_calls == 1)
                force_text(g, "</" DSML "tool_calls>");
        }
        break;
    case DS4_DSML_DONE:
        g->block_done = 1;
        g->stop = 1;      /* the turn ends with the block (EOS would follow) */
        if (g->env->on_block) {
            size_t bl;
            const char *bt = ds4_dsml_block_text(g->dsml, &bl);
            g->env->on_block(g->env->ud, &j->res, 0, bt, bl);
        }
        break;
    case DS4_DSML_ERROR:
        g->block_error = 1;
        g->stop = 1;
        api_err_set(&j->res.err, 200, "invalid_tool_call", "malformed_tool_call", NULL,
                    "the model wrote a malformed tool call (%.*s); its text is returned as content",
                    (int)(ev->len < 200 ? ev->len : 200), ev->text);
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
    const ds4_special_ids *sp = g->env->srv->sp;
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
    const int nv = g->env->srv->n_vocab;
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

/* Speculative decoding (rq->lookup, rq->mtp_draft, docs/SPEC.md): evaluate
 * the chosen token t with up to `want` drafts in one staged pass: up to
 * want_lookup prompt-lookup drafts, else up to want_mtp MTP drafts.  The
 * sampling loop then takes its choices from the pass's rows and commits
 * the agreeing prefix, so every token is chosen exactly as in plain
 * decoding (DSML syntax greedy, forced tokens, the request's sampler).  A
 * plain evaluation when no draft is found or the pass would cross a
 * disk-cache checkpoint (saved at exact counts by ds4_eval).  *sp_n = pass
 * length, 0 when no pass was started.  MTP drafts are drawn from the
 * block's distributions after the request's sampler transforms (greedy
 * under greedy sampling); *sp_jn = how many positions hold such a sampled
 * draft (docs/SPEC.md, "Sampled MTP drafts"). */
static int spec_eval(const gen_env *env, ds4_sampler *smp, int32_t t, int want, int want_lookup,
                     int want_mtp, const ds4_tokens *corpus, int32_t *pass, int *sp_n, int *sp_jn,
                     ds4_spec_stats *st) {
    ds4_session *s = env->s;
    *sp_n = *sp_jn = 0;
    int cur = ds4_session_n_tokens(s);
    if (want > ds4_session_draft_capacity(s) - 1) want = ds4_session_draft_capacity(s) - 1;
    if (want > ds4_session_ctx_size(s) - cur - 1) want = ds4_session_ctx_size(s) - cur - 1;
    if (env->ep->kv_policy) {
        int fr = ds4_kv_policy_next_frontier(env->ep->kv_policy, cur);
        if (fr > cur && fr - cur <= want + 1) want = 0;
    }
    int k = 0;
    if (want_lookup > want) want_lookup = want;
    if (want_mtp > want) want_mtp = want;
    if (want_lookup > 0) {
        int32_t *h = malloc(((size_t)cur + 1) * sizeof *h);
        if (h) {
            memcpy(h, ds4_session_tokens(s), (size_t)cur * sizeof *h);
            h[cur] = t;
            int gh = 0, gc = 0;
            k = ds4_lookup_draft_in(h, cur + 1, NULL, 0, want_lookup, pass + 1, &gh);
            if (corpus && corpus->n) {
                int32_t dc[DS4_DRAFT_PASS_MAX];
                int kc = ds4_lookup_draft_in(h, cur + 1, corpus->v, (int)corpus->n, want_lookup, dc, &gc);
                if (kc > 0 && gc >= gh) {
                    k = kc;
                    memcpy(pass + 1, dc, (size_t)kc * sizeof *dc);
                }
            }
            free(h);
        }
    }
    /* the MTP block when the lookup found nothing (rq->mtp_draft) */
    int sampled = 0;
    if (k == 0 && want_mtp > 0) {
        k = ds4_mtp_draft_sampled(s, smp, t, want_mtp, pass + 1);
        if (k < 0) return k;
        sampled = ds4_mtp_draft_dist(s, 0) != NULL;
    }
    /* the end-of-sequence token is never evaluated: drafts end before it;
     * a sampled one is still judged at its position (the pass's last row):
     * dropping a draft for its value would bias that position */
    int jn = sampled ? k : 0;
    for (int i = 0; i < k; i++)
        if (pass[1 + i] == env->srv->sp->eos) {
            k = i;
            if (sampled) jn = i + 1;
            break;
        }
    if (k == 0 && jn == 0) return ds4_eval(s, &t, 1, env->ep);
    pass[0] = t;
    int rc = ds4_session_eval_draft(s, pass, 1 + k);
    if (rc) return rc;
    *sp_n = 1 + k;
    *sp_jn = jn;
    st->passes++;
    st->drafted += (uint64_t)k;
    return DS4_OK;
}

/* One token of the sampling loop: choose it (test output, forced text,
 * or the sampler on the current logits), commit or roll back a staged
 * pass, and send its text.  FIN_NONE with *out = the chosen token when it
 * must be evaluated before the next choice; otherwise the loop's end
 * (EOS excluded: FIN_STOP; max_gen: FIN_LENGTH -- the last token is not
 * evaluated: nothing would read its logits, and the next request's prompt
 * suffix covers it). */
static finish_kind choose(gen *g, int32_t *out, int *evaluated) {
    const gen_env *env = g->env;
    server_ctx *srv = env->srv;
    request *rq = g->rq;
    gen_result *res = &g->j->res;
    *evaluated = 0;
    if (g->n_gen >= g->max_gen) return FIN_LENGTH;
    if (atomic_load(&g->j->cancel) != CANCEL_NONE) return FIN_CANCEL;
    int32_t t;
    if (rq->test_output) {
        t = g->ti < g->test.n ? g->test.v[g->ti++] : srv->sp->eos;
    } else if (g->forced_pos < g->forced.n) {
        t = g->forced.v[g->forced_pos++];
    } else {
        const float *lg = g->sp_n ? ds4_session_draft_logits(env->s, g->sp_i) : ds4_session_logits(env->s);
        if (!lg) {
            api_err_set(&res->err, 500, "server_error", NULL, NULL, "no logits");
            return FIN_ERROR;
        }
        /* DSML syntax greedily, payloads with the request's sampling */
        if (g->dsml && ds4_dsml_in_block(g->dsml) && !ds4_dsml_in_payload(g->dsml))
            t = ds4_sample_greedy(lg, srv->n_vocab);
        else if (g->sp_n && g->sp_i < g->sp_jn)
            /* a sampled MTP draft here: the speculative-sampling rule (a
             * greedy or forced choice just compares: its token does not
             * depend on the draft) */
            t = ds4_spec_judge(g->smp, lg, ds4_mtp_draft_dist(env->s, g->sp_i), g->sp_pass[g->sp_i + 1], NULL);
        else
            t = ds4_sample(g->smp, lg);
    }
    if (g->sp_n) {
        if (g->sp_i + 1 < g->sp_n && t == g->sp_pass[g->sp_i + 1]) {
            g->sp_i++;
            g->sp_acc = 1;
            res->spec.accepted++;
        } else {
            int e = ds4_session_draft_commit(env->s, g->sp_i + 1);
            g->sp_n = 0;
            if (e) {
                api_err_set(&res->err, 500, "server_error", NULL, NULL,
                            "speculative rollback failed: %s", ds4_strerror(e));
                return FIN_ERROR;
            }
        }
    }
    if (t == srv->sp->eos) return FIN_STOP;
    if (rq->logprobs && !g->in_reasoning)
        record_logprob(g, g->sp_n ? ds4_session_draft_logits(env->s, g->sp_i) : ds4_session_logits(env->s), t);
    g->n_gen++;
    res->completion_tokens++;
    if (g->in_reasoning) res->reasoning_tokens++;
    process_token(g, t);
    if (g->stop) return FIN_STOP;
    if (g->n_gen >= g->max_gen) return FIN_LENGTH;
    if (g->sp_acc) { g->sp_acc = 0; *evaluated = 1; }   /* evaluated by the pass */
    *out = t;
    return FIN_NONE;
}

finish_kind gen_next(gen *g, int32_t *t) {
    if (g->failed) return FIN_ERROR;
    int evaluated;
    finish_kind fin = choose(g, t, &evaluated);
    if (fin == FIN_NONE && evaluated) {
        /* only under lookup (gen_run evaluates itself): never seen by a
         * caller that evaluates */
        fin = gen_evaluated(g, DS4_OK);
        if (fin == FIN_NONE) return gen_next(g, t);
    }
    return fin;
}

finish_kind gen_evaluated(gen *g, int rc) {
    gen_result *res = &g->j->res;
    request *rq = g->rq;
    if (rc == DS4_ECTX) return FIN_LENGTH;
    if (rc) {
        api_err_set(&res->err, 500, "server_error", NULL, NULL, "decode failed: %s",
                    ds4_model_strerror(g->env->srv->model, rc));
        return FIN_ERROR;
    }
    if (g->in_reasoning && rq->think_budget > 0 && res->reasoning_tokens >= rq->think_budget &&
        g->forced_pos >= g->forced.n && !rq->test_output)
        ds4_tokens_push(&g->forced, g->env->srv->sp->think_end);
    return FIN_NONE;
}

/* Evaluate the chosen token t alone (gen_run): with drafts when the
 * request asks for them. */
static int eval_self(gen *g, int32_t t) {
    const gen_env *env = g->env;
    if ((g->lookup > 0 || g->mtp_draft > 0) && !g->rq->test_output) {
        int left = g->max_gen - g->n_gen - 1;
        int most = g->lookup > g->mtp_draft ? g->lookup : g->mtp_draft;
        if (most > left) most = left;
        g->sp_i = 0;
        if (g->lookup > 0 && !g->corpus_built) build_corpus(g);
        return spec_eval(env, g->smp, t, most, g->lookup, g->mtp_draft, &g->corpus, g->sp_pass, &g->sp_n,
                         &g->sp_jn, &g->j->res.spec);
    }
    return ds4_eval(env->s, &t, 1, env->ep);
}

/* The sampling loop of one job that owns the session. */
static finish_kind decode(gen *g) {
    finish_kind fin;
    for (;;) {
        int32_t t;
        int evaluated;
        fin = choose(g, &t, &evaluated);
        if (fin != FIN_NONE) break;
        fin = gen_evaluated(g, evaluated ? DS4_OK : eval_self(g, t));
        if (fin != FIN_NONE) break;
    }
    return fin;
}

/* After the loop: flush what the detokenizer, the DSML parser and the stop
 * matcher still hold, turn an unfinished block into text, and decide the
 * finish. */
static finish_kind settle(gen *g, finish_kind fin) {
    gen_result *res = &g->j->res;
    g->piece.n = 0;
    ds4_detok_flush(&g->dt, &g->piece);
    if (g->piece.n) {
        if (g->in_reasoning) emit_reasoning(g, g->piece.p, g->piece.n);
        else content_bytes(g, g->piece.p, g->piece.n);
    }
    int cut = 0;
    if (g->dsml && !g->block_done && !g->block_error && !g->stop_seq) {
        /* releases held-back text; an unterminated block is an error event */
        cut = ds4_dsml_in_block(g->dsml);
        ds4_dsml_finish(g->dsml);
    }
    flush_hold(g);
    if (g->block_error && !g->block_done) {
        /* the calls that never closed are not calls: their text is content */
        int k = 0;
        for (int i = 0; i < res->n_calls; i++) {
            if (res->calls[i].complete) res->calls[k++] = res->calls[i];
            else { free(res->calls[i].name); ds4_buf_free(&res->calls[i].args); }
        }
        res->n_calls = k;
        size_t bl;
        const char *bt = ds4_dsml_block_text(g->dsml, &bl);
        if (bl > g->block_closed) emit_visible(g, bt + g->block_closed, bl - g->block_closed);
        if (cut && fin == FIN_LENGTH) return FIN_LENGTH;
        return FIN_TOOL_ERROR;
    }
    if (g->block_done) return FIN_TOOLS;
    if (g->stop_seq) return FIN_STOP_SEQ;
    return fin;
}

gen *gen_new(const gen_env *env, job *j, int max_gen, int lookup) {
    request *rq = j->rq;
    gen *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->env = env;
    g->j = j;
    g->rq = rq;
    g->tok = env->srv->tok;
    g->max_gen = max_gen;
    g->lookup = lookup;
    ds4_detok_init(&g->dt);
    g->smp = ds4_sampler_new(env->srv->n_vocab, &rq->sp);
    if (rq->parse_tools) g->dsml = ds4_dsml_new(on_dsml, g);
    if (env->srv->trace && !j->res.trace_ev) j->res.trace_ev = json_array();
    if (!g->smp || (rq->parse_tools && !g->dsml)) {
        api_err_set(&j->res.err, 500, "server_error", NULL, NULL, "out of memory");
        g->failed = 1;
        return g;
    }
    if (rq->test_output) test_tokens(g, &g->test);
    g->in_reasoning = rq->starts_in_reasoning;
    if (!g->in_reasoning) start_content(g);
    return g;
}

finish_kind gen_end(gen *g, finish_kind fin) {
    if (!g) return fin;
    gen_result *res = &g->j->res;
    if (g->failed) fin = FIN_ERROR;
    if (g->sp_n) {
        /* keep what was chosen, less a last token that plain decoding
         * would not have evaluated either */
        int e = ds4_session_draft_commit(g->env->s, g->sp_i + 1 - g->sp_acc);
        if (e && fin != FIN_ERROR) {
            api_err_set(&res->err, 500, "server_error", NULL, NULL,
                        "speculative rollback failed: %s", ds4_strerror(e));
            fin = FIN_ERROR;
        }
    }
    res->spec.emitted = res->spec.accepted + res->spec.passes;
    if (fin != FIN_CANCEL && fin != FIN_ERROR) fin = settle(g, fin);
    ds4_sampler_free(g->smp);
    ds4_dsml_free(g->dsml);
    ds4_buf_free(&g->piece);
    ds4_buf_free(&g->hold);
    ds4_buf_free(&g->pend);
    free(g->pend_len);
    ds4_tokens_free(&g->forced);
    ds4_tokens_free(&g->test);
    ds4_tokens_free(&g->corpus);
    free(g);
    return fin;
}

finish_kind gen_run(const gen_env *env, job *j, int max_gen) {
    gen *g = gen_new(env, j, max_gen, j->rq->lookup);
    if (!g) {
        api_err_set(&j->res.err, 500, "server_error", NULL, NULL, "out of memory");
        return FIN_ERROR;
    }
    g->mtp_draft = j->rq->mtp_draft;
    finish_kind fin = g->failed ? FIN_ERROR : decode(g);
    return gen_end(g, fin);
}
