/*
 * generate.c -- the generation driver (ds4_gen.h).
 *
 * Owns: the decode loop after a prompt: choosing each token (forced
 * output, forced text, DSML syntax greedily, the caller's sampler, the
 * speculative-sampling rule at sampled MTP drafts), speculative passes
 * (drafting, the staged pass, commit and rollback), the channels
 * (reasoning, content through the stop matcher, tool calls held until
 * they close: DSML, or GLM's XML calls for a GLM model, with GLM's end
 * tokens), logprobs, and the finish.
 * Must not: render prompts, touch the disk cache other than through the
 * caller's ds4_eval_params, or know an API's shape (the callbacks get
 * text, calls and numbers; the front ends shape them).  Only the public
 * engine API is used.
 *
 * Speculative decoding never changes what is emitted: every token is
 * chosen by the same rule, in the same order (the same sampler draws), as
 * without drafts; a staged pass only lets the choice at the next position
 * read logits that are already there (docs/SPEC.md).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "ds4_gen.h"

#define DSML_TAG "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define CORPUS_BYTES_DEFAULT (256 * 1024)

struct ds4_gen {
    ds4_gen_opts o;
    ds4_gen_cb cb;
    ds4_session *s;
    const ds4_model *m;
    const ds4_tokenizer *tok;
    const ds4_special_ids *sp;
    int n_vocab;
    ds4_chat_format format;   /* the model's family (ds4_model_format) */
    int32_t end_user, end_obs; /* GLM: <|user|> and <|observation|> end the
                                  turn as <|endoftext|> does (-1: none) */
    ds4_dsml *dsml;           /* the tool-call parser: DSML (V4) ... */
    ds4_glm_calls *glm;       /* ... or GLM's <tool_call> XML */
    ds4_detok dt;
    ds4_buf piece;
    int in_reasoning;
    ds4_tokens forced;        /* forced text still to emit */
    size_t forced_pos;
    int oi;                   /* next forced-output token */
    ds4_buf hold;             /* visible text held back by the stop matcher */
    int stop;                 /* end generation after this token */
    int stop_seq, stop_index;
    int block_done, block_error;
    size_t block_closed;      /* block text up to the end of the last closed call */
    int n_closed;             /* calls closed */
    int open_call;            /* a call was begun and not closed */
    ds4_buf call_name;        /* held mode: the open call */
    ds4_buf pend;             /* its argument deltas, not sent yet */
    size_t *pend_len;
    int n_pend, cap_pend;
    int n_sent_args;          /* deltas sent for the open call (immediate mode) */
    int n_gen, n_reasoning;
    int max_gen;
    ds4_gen_finish pending;   /* eval_all: the loop ends once t is evaluated */
    /* a staged pass in flight: sp_pass[0..sp_n) evaluated, [0..sp_i]
     * chosen; sp_acc: the token just chosen was a draft (evaluated) */
    int32_t sp_pass[DS4_DRAFT_PASS_MAX];
    int sp_n, sp_i, sp_acc, sp_base;
    int sp_jn;                /* positions [0, sp_jn) hold sampled MTP drafts */
    int sp_kept;              /* drafts kept in this pass (back-off) */
    int skip, backoff;        /* drafting back-off */
    ds4_tokens corpus;
    int corpus_built;
    ds4_spec_stats st;
    ds4_gen_err err;
    int err_rc;
    char err_msg[256];
};

void ds4_gen_opts_default(ds4_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->hold_calls = 1;
    o->block_error_text = 1;
    o->draft_spare = 1;
    o->finish_block_on_cut = 1;
}

static ds4_gen_finish fail(ds4_gen *g, ds4_gen_err e, int rc) {
    g->err = e;
    g->err_rc = rc;
    const char *why = "";
    switch (e) {
    case DS4_GEN_ERR_NOMEM: why = "out of memory"; break;
    case DS4_GEN_ERR_NO_LOGITS: why = "no logits"; break;
    case DS4_GEN_ERR_EVAL: why = "decode failed: "; break;
    case DS4_GEN_ERR_ROLLBACK: why = "speculative rollback failed: "; break;
    case DS4_GEN_ERR_NONE: break;
    }
    snprintf(g->err_msg, sizeof g->err_msg, "%s%s", why,
             e == DS4_GEN_ERR_EVAL ? ds4_model_strerror(g->m, rc) :
             e == DS4_GEN_ERR_ROLLBACK ? ds4_strerror(rc) : "");
    return DS4_GEN_ERROR;
}

/* The tool-call parser of the model's format: both give the same events
 * (ds4_text.h), so everything past these five calls is one path. */
static int tp_on(const ds4_gen *g) { return g->dsml || g->glm; }
static void tp_feed(ds4_gen *g, const char *s, size_t n) {
    if (g->glm) ds4_glm_calls_feed(g->glm, s, n);
    else ds4_dsml_feed(g->dsml, s, n);
}
static void tp_finish(ds4_gen *g) {
    if (g->glm) ds4_glm_calls_finish(g->glm);
    else ds4_dsml_finish(g->dsml);
}
static int tp_in_block(const ds4_gen *g) {
    return g->glm ? ds4_glm_calls_in_block(g->glm) : ds4_dsml_in_block(g->dsml);
}
static int tp_in_payload(const ds4_gen *g) {
    return g->glm ? ds4_glm_calls_in_payload(g->glm) : ds4_dsml_in_payload(g->dsml);
}
static const char *tp_block_text(const ds4_gen *g, size_t *len) {
    *len = 0;
    if (g->glm) return ds4_glm_calls_block_text(g->glm, len);
    return g->dsml ? ds4_dsml_block_text(g->dsml, len) : NULL;
}

/* A token that ends the model's turn: EOS, and for GLM also <|user|> and
 * <|observation|> (the template's and llama.cpp's end-of-generation set:
 * GLM ends a tool-call turn with <|observation|>). */
static int is_end(const ds4_gen *g, int32_t t) {
    if (g->o.eos_is_text) return 0;
    return t == g->sp->eos || (t >= 0 && (t == g->end_user || t == g->end_obs));
}

/* ------------------------------------------------------------------ */
/* Channels                                                            */
/* ------------------------------------------------------------------ */

static void force_text(ds4_gen *g, const char *s) {
    if (!s || !*s) return;
    /* keep what is still queued, append the new text's tokens */
    ds4_tokenize(g->tok, s, strlen(s), DS4_TOK_SPECIAL, &g->forced);
}

static void emit_reasoning(ds4_gen *g, const char *s, size_t n) {
    if (n && g->cb.reasoning) g->cb.reasoning(g->cb.ud, s, n);
}

static void emit_visible(ds4_gen *g, const char *s, size_t n) {
    if (n && g->cb.content) g->cb.content(g->cb.ud, s, n);
}

/* Visible text through the stop-sequence matcher: the earliest match ends
 * the output (the stop string itself is not returned); the longest tail
 * that could still begin a stop string is held back. */
static void visible_text(ds4_gen *g, const char *s, size_t n) {
    if (g->stop_seq) return;
    if (g->o.n_stop == 0) { emit_visible(g, s, n); return; }
    ds4_buf_append(&g->hold, s, n);
    const char *h = g->hold.p;
    size_t hn = g->hold.n, best = hn;
    int which = -1;
    for (int i = 0; i < g->o.n_stop; i++) {
        const char *st = g->o.stop[i];
        size_t sl = strlen(st);
        for (size_t p = 0; p + sl <= hn && p < best; p++)
            if (!memcmp(h + p, st, sl)) { best = p; which = i; break; }
    }
    if (which >= 0) {
        emit_visible(g, h, best);
        g->hold.n = 0;
        g->stop_seq = 1;
        g->stop = 1;
        g->stop_index = which;
        return;
    }
    size_t keep = 0;
    for (int i = 0; i < g->o.n_stop; i++) {
        const char *st = g->o.stop[i];
        size_t sl = strlen(st);
        for (size_t k = sl - 1; k > keep; k--)
            if (k <= hn && !memcmp(h + hn - k, st, k)) { keep = k; break; }
    }
    emit_visible(g, h, hn - keep);
    memmove(g->hold.p, h + hn - keep, keep);
    g->hold.n = keep;
}

static void flush_hold(ds4_gen *g) {
    if (g->hold.n && !g->stop_seq) emit_visible(g, g->hold.p, g->hold.n);
    g->hold.n = 0;
}

static void pend_delta(ds4_gen *g, const char *s, size_t n) {
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

/* The open call closed: in held mode it is sent whole now. */
static void close_call(ds4_gen *g, int index) {
    const ds4_gen_cb *cb = &g->cb;
    if (g->o.hold_calls) {
        if (cb->call_begin) cb->call_begin(cb->ud, index, g->call_name.p ? g->call_name.p : "", g->call_name.n);
        size_t off = 0;
        for (int i = 0; i < g->n_pend; i++) {
            if (cb->call_args) cb->call_args(cb->ud, index, g->pend.p + off, g->pend_len[i]);
            off += g->pend_len[i];
        }
        if (!g->n_pend && cb->call_args) cb->call_args(cb->ud, index, "{}", 2);
    } else if (!g->n_sent_args && cb->call_args) {
        cb->call_args(cb->ud, index, "{}", 2);
    }
    if (cb->call_end) cb->call_end(cb->ud, index);
    g->pend.n = 0;
    g->n_pend = 0;
}

static void on_dsml(void *ud, const ds4_dsml_event *ev) {
    ds4_gen *g = ud;
    const ds4_gen_cb *cb = &g->cb;
    if (cb->dsml_event) cb->dsml_event(cb->ud, ev);
    if (g->stop_seq) return;
    switch (ev->kind) {
    case DS4_DSML_TEXT:
        visible_text(g, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_BEGIN:
        flush_hold(g);   /* the text before the block is final */
        g->open_call = 1;
        g->call_name.n = 0;
        g->pend.n = 0;
        g->n_pend = 0;
        g->n_sent_args = 0;
        if (g->o.hold_calls) {
            ds4_buf_append(&g->call_name, ev->text, ev->len);
            if (ds4_buf_failed(&g->call_name)) g->stop = 1;
        } else if (cb->call_begin) {
            cb->call_begin(cb->ud, g->n_closed, ev->text, ev->len);
        }
        break;
    case DS4_DSML_ARGS_DELTA:
        if (!g->open_call) break;
        if (g->o.hold_calls) {
            pend_delta(g, ev->text, ev->len);
        } else {
            g->n_sent_args++;
            if (cb->call_args) cb->call_args(cb->ud, g->n_closed, ev->text, ev->len);
        }
        break;
    case DS4_DSML_CALL_END:
        if (!g->open_call) break;
        g->open_call = 0;
        close_call(g, g->n_closed++);
        tp_block_text(g, &g->block_closed);
        /* single call: close the block after the first (GLM: end the turn,
         * the parser's DONE comes at the finish) */
        if (g->o.single_call && !g->o.forced_output && g->n_closed == 1)
            force_text(g, g->glm ? "<|observation|>" : "</" DSML_TAG "tool_calls>");
        break;
    case DS4_DSML_DONE:
        g->block_done = 1;
        g->stop = 1;      /* the turn ends with the block (EOS would follow) */
        if (cb->tools_done) {
            size_t bl;
            const char *bt = tp_block_text(g, &bl);
            cb->tools_done(cb->ud, bt, bl);
        }
        break;
    case DS4_DSML_ERROR:
        g->block_error = 1;
        g->stop = 1;
        if (cb->dsml_error) cb->dsml_error(cb->ud, ev->text, ev->len);
        break;
    }
}

static void start_content(ds4_gen *g) {
    if (g->o.forced_output) return;
    if (g->o.forced_prefix) force_text(g, g->o.forced_prefix);
}

static void content_bytes(ds4_gen *g, const char *s, size_t n) {
    if (!n) return;
    if (tp_on(g)) {
        if (!g->block_error && !g->block_done) tp_feed(g, s, n);
        else if (g->cb.after_block) g->cb.after_block(g->cb.ud, s, n);
    } else {
        visible_text(g, s, n);
    }
}

static void process_token(ds4_gen *g, int32_t t) {
    g->piece.n = 0;
    if (g->in_reasoning && t == g->sp->think_end) {
        ds4_detok_flush(&g->dt, &g->piece);
        emit_reasoning(g, g->piece.p, g->piece.n);
        g->in_reasoning = 0;
        if (g->cb.reasoning_end) g->cb.reasoning_end(g->cb.ud);
        start_content(g);
        return;
    }
    ds4_detok_push(&g->dt, g->tok, t, &g->piece);
    if (!g->piece.n) return;
    if (g->in_reasoning) emit_reasoning(g, g->piece.p, g->piece.n);
    else content_bytes(g, g->piece.p, g->piece.n);
}

/* The logprobs of a content token: the distribution it was sampled or
 * forced from (temperature 1, the whole vocabulary: common/logprob.c). */
static void record_logprob(ds4_gen *g, const float *lg, int32_t t) {
    if (!lg || !g->cb.logprob) return;
    ds4_lp_entry top[21];
    ds4_gen_lp out[21];
    int k = g->o.top_logprobs < 20 ? g->o.top_logprobs : 20;
    if (k < 0) k = 0;
    double lse = ds4_logprob_top(lg, g->n_vocab, k, top);
    for (int i = 0; i < k; i++) out[i] = (ds4_gen_lp){ top[i].id, top[i].logprob };
    g->cb.logprob(g->cb.ud, t, (double)lg[t] - lse, out, k);
}

/* ------------------------------------------------------------------ */
/* Speculative decoding                                                */
/* ------------------------------------------------------------------ */

/* Coding agents' read tools number a file's lines (cat -n style); a model
 * that writes the file back drops the numbers, so in the prompt alone the
 * lookup drafts the next line number at every line end.  The corpus
 * texts' numbered lines without their numbers (ds4_lookup_corpus) are
 * searched too, and win where their match is at least as long as the
 * session's.  Built at the first drafting attempt; out of memory: no
 * second source (drafts are only guesses). */
static void build_corpus(ds4_gen *g) {
    g->corpus_built = 1;
    if (g->o.n_corpus <= 0) return;
    size_t max = g->o.corpus_bytes ? g->o.corpus_bytes : CORPUS_BYTES_DEFAULT;
    if (ds4_lookup_corpus(g->tok, g->o.corpus, g->o.corpus_lens, g->o.n_corpus, max, &g->corpus))
        ds4_tokens_free(&g->corpus);
}

/* Prompt-lookup drafts after session + t: the session's own history, or
 * the corpus where its match is at least as long. */
static int lookup(ds4_gen *g, int32_t t, int want, int32_t *out) {
    const int cur = ds4_session_n_tokens(g->s);
    int32_t *h = malloc(((size_t)cur + 1) * sizeof *h);
    if (!h) return 0;
    memcpy(h, ds4_session_tokens(g->s), (size_t)cur * sizeof *h);
    h[cur] = t;
    int gh = 0, gc = 0;
    int k = ds4_lookup_draft_in(h, cur + 1, NULL, 0, want, out, &gh);
    if (g->corpus.n) {
        int32_t dc[DS4_DRAFT_PASS_MAX];
        int kc = ds4_lookup_draft_in(h, cur + 1, g->corpus.v, (int)g->corpus.n, want, dc, &gc);
        if (kc > 0 && gc >= gh) {
            k = kc;
            memcpy(out, dc, (size_t)kc * sizeof *dc);
        }
    }
    free(h);
    return k;
}

static int eval_plain(ds4_gen *g, int32_t t) {
    return ds4_eval(g->s, &t, 1, g->o.ep);
}

/* Evaluate the chosen token t, with drafts when they are on: up to
 * o.lookup prompt-lookup drafts, else up to o.mtp_draft MTP drafts, in
 * one staged pass (sp_*).  A plain evaluation when no draft is found, when
 * the pass would cross a disk-cache checkpoint (saved at exact counts by
 * ds4_eval), during a back-off, or when cancelled.  MTP drafts are drawn
 * from the block's distributions after the sampler's transforms (greedy
 * under greedy sampling); sp_jn = positions holding such a sampled draft
 * (docs/SPEC.md, "Sampled MTP drafts"). */
static int eval_self(ds4_gen *g, int32_t t) {
    const ds4_gen_opts *o = &g->o;
    g->sp_n = g->sp_jn = 0;
    if ((o->lookup <= 0 && o->mtp_draft <= 0) || g->pending != DS4_GEN_RUNNING ||
        (g->cb.cancel && g->cb.cancel(g->cb.ud)))
        return eval_plain(g, t);
    if (g->skip > 0) { g->skip--; return eval_plain(g, t); }
    if (o->lookup > 0 && !g->corpus_built) build_corpus(g);
    ds4_session *s = g->s;
    const int cur = ds4_session_n_tokens(s);
    int want = o->lookup > o->mtp_draft ? o->lookup : o->mtp_draft;
    const int left = g->max_gen - g->n_gen - o->draft_spare;
    if (want > left) want = left;
    const int cap = ds4_session_draft_capacity(s) - 1;
    const int room = ds4_session_ctx_size(s) - o->ctx_reserve - cur - 1;
    const ds4_kv_policy *pol = o->ep ? o->ep->kv_policy : NULL;
    if (o->late_caps && want > DS4_DRAFT_PASS_MAX - 1) want = DS4_DRAFT_PASS_MAX - 1;
    if (!o->late_caps) {
        if (want > cap) want = cap;
        if (want > room) want = room;
    }
    if (pol) {
        int fr = ds4_kv_policy_next_frontier(pol, cur);
        if (fr > cur && fr - cur <= want + 1) want = 0;
    }
    int32_t *d = g->sp_pass + 1;
    int k = 0, sampled = 0, tried = 0;
    int wl = o->lookup < want ? o->lookup : want;
    int wm = o->mtp_draft < want ? o->mtp_draft : want;
    if (wl > 0) k = lookup(g, t, wl, d);
    if (k > 0) tried = 1;
    if (k == 0 && wm > 0) {
        /* the MTP block when the lookup found nothing */
        tried = 1;
        k = ds4_mtp_draft_sampled(s, o->smp, t, wm, d);
        if (k < 0) return k;
        sampled = ds4_mtp_draft_dist(s, 0) != NULL && o->smp && !ds4_sampler_is_greedy(o->smp);
    }
    if (o->late_caps) {
        /* ds4_spec_step's order: a full context refuses the pass */
        if (tried && ds4_session_ctx_size(s) - cur < 1) return DS4_ECTX;
        if (k > cap) k = cap;
        if (k > room) k = room;
        if (k < 0) k = 0;
    }
    /* the end-of-sequence token is never evaluated: drafts end before it;
     * a sampled one is still judged at its position (the pass's last row):
     * dropping a draft for its value would bias that position */
    int jn = sampled ? k : 0;
    for (int i = 0; i < k; i++)
        if (is_end(g, d[i])) {
            k = i;
            if (sampled) jn = i + 1;
            break;
        }
    if (k == 0 && jn == 0 && !(o->late_caps && tried)) return eval_plain(g, t);
    g->sp_pass[0] = t;
    g->sp_base = cur;
    int rc = ds4_session_eval_draft(s, g->sp_pass, 1 + k);
    if (rc) return rc;
    g->sp_n = 1 + k;
    g->sp_i = 0;
    g->sp_jn = jn;
    g->sp_kept = 0;
    g->st.passes++;
    g->st.drafted += (uint64_t)k;
    return DS4_OK;
}

/* The staged pass ends (n_keep tokens kept): the back-off learns whether
 * it kept anything. */
static int pass_end(ds4_gen *g, int n_keep) {
    int e = ds4_session_draft_commit(g->s, n_keep);
    g->sp_n = 0;
    if (g->o.backoff_max > 0) {
        if (g->sp_kept) g->backoff = 0;
        else g->backoff = g->backoff ? (g->backoff * 2 > g->o.backoff_max ? g->o.backoff_max : g->backoff * 2) : 1;
        g->skip = g->backoff;
    }
    return e;
}

/* ------------------------------------------------------------------ */
/* The loop                                                            */
/* ------------------------------------------------------------------ */

static int cancelled(ds4_gen *g) {
    return g->cb.cancel && g->cb.cancel(g->cb.ud);
}

/* Tokens in the session as far as chosen (a staged pass holds more). */
static int n_session(const ds4_gen *g) {
    return g->sp_n ? g->sp_base + g->sp_i + 1 : ds4_session_n_tokens(g->s);
}

/* One token: choose it, commit or roll back a staged pass, send its text.
 * RUNNING with *out = the token when it must be evaluated before the next
 * choice (*evaluated: a pass already did); otherwise the loop's end. */
static ds4_gen_finish choose(ds4_gen *g, int32_t *out, int *evaluated) {
    const ds4_gen_opts *o = &g->o;
    *evaluated = 0;
    if (o->cancel_first && cancelled(g)) return DS4_GEN_CANCEL;
    if (o->ctx_reserve > 0 && n_session(g) >= ds4_session_ctx_size(g->s) - o->ctx_reserve)
        return DS4_GEN_CONTEXT;
    if (g->n_gen >= g->max_gen) return DS4_GEN_LENGTH;
    if (!o->cancel_first && cancelled(g)) return DS4_GEN_CANCEL;
    int32_t t;
    const float *lg = g->sp_n ? ds4_session_draft_logits(g->s, g->sp_i) : ds4_session_logits(g->s);
    if (o->forced_output) {
        t = g->oi < o->n_output ? o->output[g->oi++] : g->sp->eos;
    } else if (g->forced_pos < g->forced.n) {
        t = g->forced.v[g->forced_pos++];
    } else {
        if (!lg) return fail(g, DS4_GEN_ERR_NO_LOGITS, DS4_EINVAL);
        /* DSML syntax greedily, payloads with the sampler */
        if (tp_on(g) && tp_in_block(g) && !tp_in_payload(g))
            t = ds4_sample_greedy(lg, g->n_vocab);
        else if (g->sp_n && g->sp_i < g->sp_jn)
            /* a sampled MTP draft here: the speculative-sampling rule */
            t = ds4_spec_judge(o->smp, lg, ds4_mtp_draft_dist(g->s, g->sp_i), g->sp_pass[g->sp_i + 1], NULL);
        else
            t = o->smp ? ds4_sample(o->smp, lg) : ds4_sample_greedy(lg, g->n_vocab);
        if (g->cb.token) g->cb.token(g->cb.ud, lg, t);
    }
    if (g->sp_n) {
        if (g->sp_i + 1 < g->sp_n && t == g->sp_pass[g->sp_i + 1]) {
            g->sp_i++;
            g->sp_acc = 1;
            g->sp_kept++;
            g->st.accepted++;
        } else {
            int e = pass_end(g, g->sp_i + 1);
            if (e) return fail(g, DS4_GEN_ERR_ROLLBACK, e);
        }
    }
    if (is_end(g, t)) return DS4_GEN_EOS;
    if (o->logprobs && !g->in_reasoning) record_logprob(g, lg, t);
    g->n_gen++;
    if (g->in_reasoning) g->n_reasoning++;
    process_token(g, t);
    if (g->stop) {
        /* eval_all: the token that ended the loop is evaluated too */
        if (!o->eval_all || g->sp_acc) return DS4_GEN_EOS;
        g->pending = DS4_GEN_EOS;
    } else if (!o->eval_all && g->n_gen >= g->max_gen) {
        /* the last token is not evaluated: nothing would read its logits */
        return DS4_GEN_LENGTH;
    }
    if (g->sp_acc) { g->sp_acc = 0; *evaluated = 1; }   /* evaluated by the pass */
    *out = t;
    return DS4_GEN_RUNNING;
}

ds4_gen_finish ds4_gen_evaluated(ds4_gen *g, int rc) {
    if (rc == DS4_ECTX) return DS4_GEN_CONTEXT;
    if (rc) return fail(g, DS4_GEN_ERR_EVAL, rc);
    if (g->pending != DS4_GEN_RUNNING) return g->pending;
    if (g->in_reasoning && g->o.think_budget > 0 && g->n_reasoning >= g->o.think_budget &&
        g->forced_pos >= g->forced.n && !g->o.forced_output)
        ds4_tokens_push(&g->forced, g->sp->think_end);
    return DS4_GEN_RUNNING;
}

ds4_gen_finish ds4_gen_next(ds4_gen *g, int32_t *t) {
    for (;;) {
        int evaluated;
        ds4_gen_finish fin = choose(g, t, &evaluated);
        if (fin != DS4_GEN_RUNNING || !evaluated) return fin;
        /* only inside a pass (ds4_gen_run): never seen by a stepping caller */
        fin = ds4_gen_evaluated(g, DS4_OK);
        if (fin != DS4_GEN_RUNNING) return fin;
    }
}

ds4_gen_finish ds4_gen_run(ds4_gen *g) {
    ds4_gen_finish fin;
    for (;;) {
        int32_t t;
        int evaluated;
        fin = choose(g, &t, &evaluated);
        if (fin != DS4_GEN_RUNNING) break;
        fin = ds4_gen_evaluated(g, evaluated ? DS4_OK : eval_self(g, t));
        if (fin != DS4_GEN_RUNNING) break;
    }
    return ds4_gen_end(g, fin);
}

/* After the loop: flush what the detokenizer, the DSML parser and the stop
 * matcher still hold, turn an unfinished block into text, and decide the
 * finish. */
static ds4_gen_finish settle(ds4_gen *g, ds4_gen_finish fin) {
    g->piece.n = 0;
    ds4_detok_flush(&g->dt, &g->piece);
    if (g->piece.n) {
        if (g->in_reasoning) emit_reasoning(g, g->piece.p, g->piece.n);
        else content_bytes(g, g->piece.p, g->piece.n);
    }
    if (fin == DS4_GEN_CANCEL || fin == DS4_GEN_ERROR) return fin;
    int cut = 0;
    const int natural = fin == DS4_GEN_EOS;
    if (tp_on(g) && !g->block_done && !g->block_error && !g->stop_seq && (natural || g->o.finish_block_on_cut)) {
        /* releases held-back text; an unterminated block is an error event */
        cut = tp_in_block(g);
        tp_finish(g);
    }
    flush_hold(g);
    if (g->block_error && !g->block_done) {
        /* the calls that never closed are not calls: their text is content */
        size_t bl;
        const char *bt = tp_block_text(g, &bl);
        if (g->o.block_error_text && bl > g->block_closed)
            emit_visible(g, bt + g->block_closed, bl - g->block_closed);
        if (cut && (fin == DS4_GEN_LENGTH || fin == DS4_GEN_CONTEXT)) return fin;
        return DS4_GEN_TOOL_ERROR;
    }
    if (g->block_done) return DS4_GEN_TOOLS;
    if (g->stop_seq) return DS4_GEN_STOP_SEQ;
    return fin;
}

ds4_gen_finish ds4_gen_end(ds4_gen *g, ds4_gen_finish fin) {
    if (g->sp_n) {
        /* keep what was chosen, less a last token that plain decoding
         * would not have evaluated either */
        int e = pass_end(g, g->sp_i + 1 - (g->o.eval_all ? 0 : g->sp_acc));
        if (e && fin != DS4_GEN_ERROR) fin = fail(g, DS4_GEN_ERR_ROLLBACK, e);
    }
    g->st.emitted = g->st.accepted + g->st.passes;
    if ((fin == DS4_GEN_CANCEL || fin == DS4_GEN_ERROR) && !g->o.settle_on_abort) return fin;
    return settle(g, fin);
}

ds4_gen *ds4_gen_new(ds4_session *s, const ds4_model *m, const ds4_gen_opts *o, const ds4_gen_cb *cb) {
    ds4_gen *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->o = *o;
    if (cb) g->cb = *cb;
    g->s = s;
    g->m = m;
    g->tok = ds4_model_tokenizer(m);
    g->sp = ds4_tok_special(g->tok);
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    g->n_vocab = info.n_vocab;
    g->max_gen = o->max_tokens > 0 ? o->max_tokens : 0;
    g->stop_index = -1;
    ds4_detok_init(&g->dt);
    g->format = ds4_model_format(m);
    g->end_user = g->end_obs = -1;
    if (g->format == DS4_FORMAT_GLM) {
        g->end_user = g->sp->user;
        g->end_obs = ds4_tok_lookup(g->tok, "<|observation|>", strlen("<|observation|>"));
    }
    if (o->parse_tools) {
        if (g->format == DS4_FORMAT_GLM) g->glm = ds4_glm_calls_new(o->tools_json, on_dsml, g);
        else g->dsml = ds4_dsml_new(on_dsml, g);
        if (!g->dsml && !g->glm) {
            free(g);
            return NULL;
        }
    }
    g->in_reasoning = o->reasoning;
    if (!g->in_reasoning) start_content(g);
    return g;
}

void ds4_gen_free(ds4_gen *g) {
    if (!g) return;
    ds4_dsml_free(g->dsml);
    ds4_glm_calls_free(g->glm);
    ds4_buf_free(&g->piece);
    ds4_buf_free(&g->hold);
    ds4_buf_free(&g->pend);
    ds4_buf_free(&g->call_name);
    free(g->pend_len);
    ds4_tokens_free(&g->forced);
    ds4_tokens_free(&g->corpus);
    free(g);
}

void ds4_gen_stop(ds4_gen *g) { g->stop = 1; }
int ds4_gen_n_tokens(const ds4_gen *g) { return g->n_gen; }
int ds4_gen_reasoning_tokens(const ds4_gen *g) { return g->n_reasoning; }
int ds4_gen_in_reasoning(const ds4_gen *g) { return g->in_reasoning; }
int ds4_gen_stop_index(const ds4_gen *g) { return g->stop_index; }
const ds4_spec_stats *ds4_gen_spec_stats(const ds4_gen *g) { return &g->st; }

const char *ds4_gen_block_text(const ds4_gen *g, size_t *len) {
    return tp_block_text(g, len);
}

ds4_gen_err ds4_gen_error(const ds4_gen *g, int *rc, const char **msg) {
    if (rc) *rc = g->err_rc;
    if (msg) *msg = g->err_msg;
    return g->err;
}
