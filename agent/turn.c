/*
 * turn.c -- generating one assistant message (the model turn around it is
 * run.c's).
 *
 * Owns: the generation of a turn -- sampling, or the forced tokens of a
 * --script turn through the very same path --, the lookup drafts, parsing
 * the DSML block as it streams, closing the turn with EOS so the state is
 * always "between turns".
 * Must not: render prompts other than through session.c, or touch engine
 * internals.  Every way a turn can end (EOS, end of the DSML block, Ctrl+C,
 * context end, budget) leaves the KV state equal to the transcript.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"

#define LOOKUP_BACKOFF_MAX 32   /* tokens without drafts after repeated failed passes */
#define LOOKUP_CORPUS_BYTES (256 * 1024)   /* tool results searched (newest first) */

/* The read tool shows a file's lines numbered ("%6ld\t", tools.c); a turn
 * that writes the file back drops the numbers, so the suffix of the copy
 * matches the history only up to each line end, where the history goes on
 * with the next number and the drafts fail.  The drafts are therefore
 * also looked up in the tool results' numbered lines without their
 * numbers (ds4_lookup_corpus; the newest results, up to
 * LOOKUP_CORPUS_BYTES, tokenized once per turn), and that source wins
 * where its match is at least as long as the history's.  Only which
 * tokens are drafted changes, never what is emitted. */
static int lookup_corpus(agent *a, ds4_tokens *out) {
    const ag_sess *s = a->cur;
    int n = 0;
    for (int i = 0; s && i < s->n_msgs; i++)
        if (s->msgs[i].kind == AG_TOOLS) n += s->msgs[i].n_calls;
    if (n == 0) return 0;
    const char **texts = malloc((size_t)n * sizeof *texts);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    int k = 0, rc = -1;
    if (texts && lens) {
        for (int i = 0; i < s->n_msgs; i++)
            for (int c = 0; s->msgs[i].kind == AG_TOOLS && c < s->msgs[i].n_calls; c++) {
                texts[k] = s->msgs[i].calls[c].result;
                lens[k] = texts[k] ? strlen(texts[k]) : 0;
                k++;
            }
        rc = ds4_lookup_corpus(a->tok, texts, lens, n, LOOKUP_CORPUS_BYTES, out) ? -1 : 0;
    }
    free(texts);
    free(lens);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Generation                                                          */
/* ------------------------------------------------------------------ */

typedef struct {
    agent *a;
    ag_msg *m;
    ds4_buf reasoning, content, args;
    int in_reason;
    int block_done, block_error;
    ds4_buf err;
    int n_complete;
    ds4_dsml *dsml;
} gen_st;

static void on_dsml(void *ud, const ds4_dsml_event *ev) {
    gen_st *g = ud;
    ag_msg *m = g->m;
    switch (ev->kind) {
    case DS4_DSML_TEXT:
        ds4_buf_append(&g->content, ev->text, ev->len);
        ui_content(g->a, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_BEGIN: {
        ag_call *v = realloc(m->calls, (size_t)(m->n_calls + 1) * sizeof *v);
        if (!v) { g->block_error = 1; break; }
        m->calls = v;
        memset(&m->calls[m->n_calls], 0, sizeof *v);
        m->calls[m->n_calls].name = ag_strndup(ev->text, ev->len);
        m->n_calls++;
        g->args.n = 0;
        ui_call_begin(g->a, m->calls[m->n_calls - 1].name);
        break;
    }
    case DS4_DSML_ARGS_DELTA:
        ds4_buf_append(&g->args, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_END:
        if (m->n_calls > 0) {
            ag_call *c = &m->calls[m->n_calls - 1];
            c->args = g->args.n ? ag_strndup(g->args.p, g->args.n) : ag_strndup("{}", 2);
            g->n_complete++;
            ui_call_line(g->a, c->name, c->args);
        }
        break;
    case DS4_DSML_DONE:
        g->block_done = 1;
        break;
    case DS4_DSML_ERROR:
        g->block_error = 1;
        ds4_buf_append(&g->err, ev->text, ev->len);
        break;
    }
}

static void feed(gen_st *g, const char *p, size_t n) {
    if (!n) return;
    if (g->in_reason) {
        ds4_buf_append(&g->reasoning, p, n);
        ui_reasoning(g->a, p, n);
    } else if (!g->block_done && !g->block_error) {
        ds4_dsml_feed(g->dsml, p, n);
    } else {
        ds4_buf_append(&g->content, p, n);   /* after the block: kept as text */
    }
}

/* The token after `lg`: DSML syntax greedily, payloads and prose with the
 * sampler (one sampler draw per emitted token, as plain decoding). */
static int32_t choose(gen_st *g, const float *lg) {
    agent *a = g->a;
    if (!g->in_reason && ds4_dsml_in_block(g->dsml) && !ds4_dsml_in_payload(g->dsml))
        return ds4_sample_greedy(lg, a->n_vocab);
    return ds4_sample(a->smp, lg);
}

/* Hand an emitted token (not EOS) to the reasoning / DSML / UI streams. */
static void emit(gen_st *g, ds4_detok *dt, ds4_buf *piece, int32_t t) {
    agent *a = g->a;
    piece->n = 0;
    if (g->in_reason && t == a->ids->think_end) {
        ds4_detok_flush(dt, piece);
        feed(g, piece->p, piece->n);
        g->in_reason = 0;
        ui_end_stream(a);
    } else {
        ds4_detok_push(dt, a->tok, t, piece);
        feed(g, piece->p, piece->n);
    }
}

/* Generate one assistant turn into `m` (reasoning, content, calls, exact
 * DSML).  The state ends with the turn closed by EOS.  Returns 0, 1 when
 * interrupted, 2 when cut by the context end or the budget (m->stop says
 * which), 3 for a malformed tool call, -1 on error.
 *
 * With --lookup N (a->lookup > 0), a chosen token is evaluated together
 * with up to N prompt-lookup drafts (docs/SPEC.md) in one staged pass; the
 * token after each position is chosen by the same rule and in the same
 * order as without drafts (so the sampler draws the same numbers), drafts
 * are kept while they agree, and the pass is committed exactly up to the
 * last kept one -- or up to the token that ends the DSML block, where
 * plain decoding stops.  The turn is token for token the one without
 * drafts, greedy or seeded. */
int ag_generate(agent *a, int budget, ag_msg *m, int think, int *n_gen) {
    gen_st g;
    memset(&g, 0, sizeof g);
    g.a = a;
    g.m = m;
    g.in_reason = think;
    g.dsml = ds4_dsml_new(on_dsml, &g);
    ds4_tokens forced = { 0 };
    size_t fi = 0;
    int rc = 0, n = 0;
    ag_stop stop = AG_STOP_NONE;
    m->think = think;
    memset(&a->spec, 0, sizeof a->spec);
    if (a->scripted) {
        if (a->script.next >= a->script.n) {
            ui_note(a, "script %s: no turn left for the model", a->script_path);
            ds4_dsml_free(g.dsml);
            return -1;
        }
        ds4_tokenize(a->tok, a->script.turns[a->script.next], a->script.lens[a->script.next],
                     DS4_TOK_SPECIAL, &forced);
        a->script.next++;
    }
    ds4_detok dt;
    ds4_detok_init(&dt);
    ds4_buf piece = { 0 };
    const int ctx = ds4_session_ctx_size(a->s);
    /* drafts: not with --dump-logits (it records every evaluated position,
     * rejected drafts included) */
    const int drafting = a->lookup > 0 && !a->dump;
    ds4_tokens hist = { 0 };   /* the text drafts are looked up in */
    ds4_tokens corpus = { 0 }; /* and the unnumbered tool results */
    if (drafting) {
        ds4_tokens_append(&hist, ds4_session_tokens(a->s), (size_t)ds4_session_n_tokens(a->s));
        if (ds4_tokens_failed(&hist) || lookup_corpus(a, &corpus)) {
            ui_note(a, "out of memory");
            ds4_tokens_free(&hist);
            ds4_tokens_free(&corpus);
            ds4_dsml_free(g.dsml);
            return -1;
        }
    }
    int32_t t = 0;
    int have_t = 0;            /* t was chosen by the last pass */
    /* back-off after passes that kept nothing (free text): skip drafting
     * for `skip` tokens, doubling up to LOOKUP_BACKOFF_MAX while they keep
     * failing, so a failed pass's extra cost is paid rarely there; an
     * accepted draft resets it (copying resumes at full speed) */
    int skip = 0, backoff = 0;
    for (;;) {
        if (ag_interrupt) { rc = 1; stop = AG_STOP_INTERRUPT; break; }
        /* two places stay free: </think> and EOS close a cut turn */
        if (ds4_session_n_tokens(a->s) >= ctx - 2) { rc = 2; stop = AG_STOP_CONTEXT; break; }
        if (budget > 0 && n >= budget) { rc = 2; stop = AG_STOP_BUDGET; break; }
        if (have_t) {
            have_t = 0;
        } else if (a->scripted) {
            t = fi < forced.n ? forced.v[fi++] : a->ids->eos;
        } else {
            const float *lg = ds4_session_logits(a->s);
            if (!lg) { rc = -1; break; }
            t = choose(&g, lg);
        }
        /* (a --script turn's "choice" is its next forced token, also in a
         * pass: the drafting path is tested with exactly known output) */
        if (t == a->ids->eos) break;
        emit(&g, &dt, &piece, t);
        int32_t d[DS4_DRAFT_PASS_MAX];
        int k = 0;
        const int n0 = ds4_session_n_tokens(a->s);
        /* hist follows the text token for token, backed-off tokens too:
         * the lookup matches its suffix */
        if (drafting) {
            ds4_tokens_push(&hist, t);
            if (ds4_tokens_failed(&hist)) { ui_note(a, "out of memory"); rc = -1; break; }
        }
        if (drafting && !g.block_done && !g.block_error && skip > 0) skip--;
        else if (drafting && !g.block_done && !g.block_error) {
            /* every evaluated token must pass the checks above: the pass
             * stays below ctx - 2 and within the budget */
            int want = a->lookup;
            if (want > ds4_session_draft_capacity(a->s) - 1) want = ds4_session_draft_capacity(a->s) - 1;
            if (want > ctx - 3 - n0) want = ctx - 3 - n0;
            if (budget > 0 && want > budget - n - 1) want = budget - n - 1;
            k = 0;
            if (want > 0) {
                int gh = 0, gc = 0;
                int32_t dc[DS4_DRAFT_PASS_MAX];
                k = ds4_lookup_draft_in(hist.v, (int)hist.n, NULL, 0, want, d, &gh);
                int kc = corpus.n ? ds4_lookup_draft_in(hist.v, (int)hist.n, corpus.v, (int)corpus.n, want, dc, &gc) : 0;
                if (kc > 0 && gc >= gh) {
                    k = kc;
                    memcpy(d, dc, (size_t)kc * sizeof *dc);
                }
            }
            /* plain decoding never evaluates EOS: drafts end before it */
            for (int i = 0; i < k; i++)
                if (d[i] == a->ids->eos) { k = i; break; }
        }
        if (k == 0) {
            int e = ds4_session_eval(a->s, &t, 1, NULL, NULL);
            if (e) { ui_note(a, "decode failed: %s", ds4_strerror(e)); rc = -1; break; }
            n++;
            if (g.block_done || g.block_error) break;
            continue;
        }
        int32_t pass[DS4_DRAFT_PASS_MAX];
        pass[0] = t;
        memcpy(pass + 1, d, (size_t)k * sizeof *d);
        int e = ds4_session_eval_draft(a->s, pass, 1 + k);
        if (e) { ui_note(a, "decode failed: %s", ds4_strerror(e)); rc = -1; break; }
        n++;
        int keep = 1, done = 0, acc = 0;
        for (int i = 0; i <= k; i++) {
            /* the checks plain decoding makes before choosing this token */
            if (ag_interrupt) { rc = 1; stop = AG_STOP_INTERRUPT; done = 1; break; }
            if (n0 + i + 1 >= ctx - 2) { rc = 2; stop = AG_STOP_CONTEXT; done = 1; break; }
            if (budget > 0 && n >= budget) { rc = 2; stop = AG_STOP_BUDGET; done = 1; break; }
            int32_t u = a->scripted ? (fi < forced.n ? forced.v[fi++] : a->ids->eos)
                                    : choose(&g, ds4_session_draft_logits(a->s, i));
            if (i < k && u == d[i]) {
                emit(&g, &dt, &piece, u);
                ds4_tokens_push(&hist, u);
                keep++;
                acc++;
                n++;
                if (g.block_done || g.block_error) { done = 1; break; }
                continue;
            }
            t = u;
            have_t = 1;
            break;
        }
        a->spec.passes++;
        a->spec.drafted += (uint64_t)k;
        a->spec.accepted += (uint64_t)acc;
        a->spec.emitted += (uint64_t)acc + (have_t ? 1 : 0);
        if (acc) backoff = 0;
        else backoff = backoff ? (backoff * 2 > LOOKUP_BACKOFF_MAX ? LOOKUP_BACKOFF_MAX : backoff * 2) : 1;
        skip = backoff;
        e = ds4_session_draft_commit(a->s, keep);
        if (e) { ui_note(a, "decode failed: %s", ds4_strerror(e)); rc = -1; break; }
        if (ds4_tokens_failed(&hist)) { ui_note(a, "out of memory"); rc = -1; break; }
        if (done) break;
    }
    ds4_tokens_free(&hist);
    ds4_tokens_free(&corpus);
    piece.n = 0;
    ds4_detok_flush(&dt, &piece);
    feed(&g, piece.p, piece.n);
    if (!g.block_done && !g.block_error && rc == 0) {
        ds4_dsml_finish(g.dsml);
    }
    if (rc != -1) {
        /* close the turn: the reasoning channel first if it is still open */
        int32_t close[2];
        int nc = 0;
        if (g.in_reason) close[nc++] = a->ids->think_end;
        close[nc++] = a->ids->eos;
        int e = ds4_session_eval(a->s, close, nc, NULL, NULL);
        if (e) { ui_note(a, "decode failed: %s", ds4_strerror(e)); rc = -1; }
        else n += nc;
    }
    ui_end_stream(a);
    m->reasoning = think ? ag_strndup(g.reasoning.p ? g.reasoning.p : "", g.reasoning.n) : NULL;
    size_t bl = 0;
    const char *bt = ds4_dsml_block_text(g.dsml, &bl);
    if (g.block_done && !g.block_error && g.n_complete == m->n_calls && m->n_calls > 0) {
        m->dsml = ag_strndup(bt, bl);
        m->text = ag_strndup(g.content.p ? g.content.p : "", g.content.n);
    } else {
        /* no usable block: whatever was written stays as text, no call runs */
        if (bt && bl) ds4_buf_append(&g.content, bt, bl);
        m->text = ag_strndup(g.content.p ? g.content.p : "", g.content.n);
        for (int i = 0; i < m->n_calls; i++) { free(m->calls[i].name); free(m->calls[i].args); }
        free(m->calls);
        m->calls = NULL;
        m->n_calls = 0;
        if (g.block_error && rc == 0) {
            /* tell the model: it can write the call again */
            ds4_buf_free(&a->last_results);
            ds4_buf_printf(&a->last_results, "malformed tool call: %.*s", (int)g.err.n, g.err.p ? g.err.p : "");
            rc = 3;
        }
    }
    m->stop = rc == 1 || rc == 2 ? (int)stop : AG_STOP_NONE;
    *n_gen = n;
    ds4_buf_free(&piece);
    ds4_buf_free(&g.reasoning);
    ds4_buf_free(&g.content);
    ds4_buf_free(&g.args);
    ds4_buf_free(&g.err);
    ds4_tokens_free(&forced);
    ds4_dsml_free(g.dsml);
    return rc;
}
