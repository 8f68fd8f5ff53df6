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
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "ds4_gen.h"

#define LOOKUP_BACKOFF_MAX 32   /* tokens without drafts after repeated failed passes */
#define LOOKUP_CORPUS_BYTES (256 * 1024)   /* tool results searched (newest first) */

/* The read tool shows a file's lines numbered ("%6ld\t", tools.c); a turn
 * that writes the file back drops the numbers, so the suffix of the copy
 * matches the history only up to each line end, where the history goes on
 * with the next number and the drafts fail.  The drafts are therefore
 * also looked up in the tool results' numbered lines without their
 * numbers (the driver's corpus: the newest results, up to
 * LOOKUP_CORPUS_BYTES), and that source wins where its match is at least
 * as long as the history's.  Only which tokens are drafted changes, never
 * what is emitted.  Returns the count (texts/lens malloc'd: the caller
 * frees them), -1 when out of memory. */
static int lookup_corpus(agent *a, const char ***texts, size_t **lens) {
    const ag_sess *s = a->cur;
    int n = 0;
    *texts = NULL;
    *lens = NULL;
    for (int i = 0; s && i < s->n_msgs; i++)
        if (s->msgs[i].kind == AG_TOOLS) n += s->msgs[i].n_calls;
    if (n == 0) return 0;
    *texts = malloc((size_t)n * sizeof **texts);
    *lens = malloc((size_t)n * sizeof **lens);
    if (!*texts || !*lens) return -1;
    int k = 0;
    for (int i = 0; i < s->n_msgs; i++)
        for (int c = 0; s->msgs[i].kind == AG_TOOLS && c < s->msgs[i].n_calls; c++) {
            (*texts)[k] = s->msgs[i].calls[c].result;
            (*lens)[k] = (*texts)[k] ? strlen((*texts)[k]) : 0;
            k++;
        }
    return n;
}

/* ------------------------------------------------------------------ */
/* Generation                                                          */
/* ------------------------------------------------------------------ */

/* The driver's callbacks (ds4_gen.h) for one assistant turn. */
typedef struct {
    agent *a;
    ag_msg *m;
    ds4_gen *d;
    ds4_buf reasoning, content, args;
    int block_done, block_error;
    ds4_buf err;
    int n_complete;
} gen_st;

static void on_reasoning(void *ud, const char *p, size_t n) {
    gen_st *g = ud;
    ds4_buf_append(&g->reasoning, p, n);
    ui_reasoning(g->a, p, n);
}

static void on_reasoning_end(void *ud) { ui_end_stream(((gen_st *)ud)->a); }

static void on_content(void *ud, const char *p, size_t n) {
    gen_st *g = ud;
    ds4_buf_append(&g->content, p, n);
    ui_content(g->a, p, n);
}

/* after the block: kept as text */
static void on_after_block(void *ud, const char *p, size_t n) { ds4_buf_append(&((gen_st *)ud)->content, p, n); }

static void on_call_begin(void *ud, int index, const char *name, size_t n) {
    gen_st *g = ud;
    ag_msg *m = g->m;
    (void)index;
    ag_call *v = realloc(m->calls, (size_t)(m->n_calls + 1) * sizeof *v);
    if (!v) { g->block_error = 1; ds4_gen_stop(g->d); return; }
    m->calls = v;
    memset(&m->calls[m->n_calls], 0, sizeof *v);
    m->calls[m->n_calls].name = ag_strndup(name, n);
    m->n_calls++;
    g->args.n = 0;
    ui_call_begin(g->a, m->calls[m->n_calls - 1].name);
}

static void on_call_args(void *ud, int index, const char *p, size_t n) {
    (void)index;
    ds4_buf_append(&((gen_st *)ud)->args, p, n);
}

static void on_call_end(void *ud, int index) {
    gen_st *g = ud;
    ag_msg *m = g->m;
    (void)index;
    if (m->n_calls > 0) {
        ag_call *c = &m->calls[m->n_calls - 1];
        c->args = g->args.n ? ag_strndup(g->args.p, g->args.n) : ag_strndup("{}", 2);
        g->n_complete++;
        ui_call_line(g->a, c->name, c->args);
    }
}

static void on_tools_done(void *ud, const char *p, size_t n) { (void)p; (void)n; ((gen_st *)ud)->block_done = 1; }

static void on_dsml_error(void *ud, const char *p, size_t n) {
    gen_st *g = ud;
    g->block_error = 1;
    ds4_buf_append(&g->err, p, n);
}

static int on_cancel(void *ud) { (void)ud; return ag_interrupt != 0; }

/* Generate one assistant turn into `m` (reasoning, content, calls, exact
 * DSML) through the library's driver (src/gen).  The state ends with the
 * turn closed by EOS.  Returns 0, 1 when interrupted, 2 when cut by the
 * context end or the budget (m->stop says which), 3 for a malformed tool
 * call, -1 on error.
 *
 * The agent's choices in the driver: every emitted token is evaluated (the
 * state is the transcript), two places stay free at the context end
 * (</think> and EOS close a cut turn), a call is shown when its name is
 * parsed, the DSML parser is closed only at EOS, a --script turn's forced
 * tokens go through the same path as sampled ones, drafts included.
 *
 * With --lookup N (a->lookup > 0), a chosen token is evaluated together
 * with up to N prompt-lookup drafts (docs/SPEC.md) in one staged pass; the
 * token after each position is chosen by the same rule and in the same
 * order as without drafts (so the sampler draws the same numbers), drafts
 * are kept while they agree, and the pass is committed exactly up to the
 * last kept one -- or up to the token that ends the DSML block, where
 * plain decoding stops.  After passes that kept nothing (free text) the
 * drafting backs off for 1, 2, 4 .. LOOKUP_BACKOFF_MAX tokens, so a failed
 * pass's extra cost is paid rarely there; an accepted draft resets it.
 * The turn is token for token the one without drafts, greedy or seeded. */
int ag_generate(agent *a, int budget, ag_msg *m, int think, int *n_gen) {
    gen_st g;
    memset(&g, 0, sizeof g);
    g.a = a;
    g.m = m;
    ds4_tokens forced = { 0 };
    int rc = 0;
    m->think = think;
    memset(&a->spec, 0, sizeof a->spec);
    if (a->scripted) {
        if (a->script.next >= a->script.n) {
            ui_note(a, "script %s: no turn left for the model", a->script_path);
            return -1;
        }
        ds4_tokenize(a->tok, a->script.turns[a->script.next], a->script.lens[a->script.next],
                     DS4_TOK_SPECIAL, &forced);
        a->script.next++;
    }
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    o.smp = a->smp;
    o.max_tokens = budget > 0 ? budget : INT_MAX;
    o.reasoning = think;
    o.parse_tools = 1;
    o.tools_json = ag_tools_json();   /* GLM: the schemas type the values */
    o.hold_calls = 0;
    o.block_error_text = 0;
    o.forced_output = a->scripted;
    o.output = forced.v;
    o.n_output = (int)forced.n;
    o.eval_all = 1;
    o.ctx_reserve = 2;
    o.cancel_first = 1;
    o.finish_block_on_cut = 0;
    o.settle_on_abort = 1;
    /* drafts: not with --dump-logits (it records every evaluated position,
     * rejected drafts included) */
    const char **ctexts = NULL;
    size_t *clens = NULL;
    if (!a->dump) o.mtp_draft = a->mtp_draft;
    if (a->lookup > 0 && !a->dump) {
        int nc = lookup_corpus(a, &ctexts, &clens);
        if (nc < 0) {
            ui_note(a, "out of memory");
            free(ctexts);
            free(clens);
            ds4_tokens_free(&forced);
            return -1;
        }
        o.lookup = a->lookup;
        o.draft_spare = 0;
        o.backoff_max = LOOKUP_BACKOFF_MAX;
        o.corpus = ctexts;
        o.corpus_lens = clens;
        o.n_corpus = nc;
        o.corpus_bytes = LOOKUP_CORPUS_BYTES;
    }
    ds4_gen_cb cb = { 0 };
    cb.ud = &g;
    cb.reasoning = on_reasoning;
    cb.reasoning_end = on_reasoning_end;
    cb.content = on_content;
    cb.after_block = on_after_block;
    cb.call_begin = on_call_begin;
    cb.call_args = on_call_args;
    cb.call_end = on_call_end;
    cb.tools_done = on_tools_done;
    cb.dsml_error = on_dsml_error;
    cb.cancel = on_cancel;
    g.d = ds4_gen_new(a->s, a->m, &o, &cb);
    if (!g.d) {
        ui_note(a, "out of memory");
        free(ctexts);
        free(clens);
        ds4_tokens_free(&forced);
        return -1;
    }
    ag_stop stop = AG_STOP_NONE;
    int erc = 0;
    switch (ds4_gen_run(g.d)) {
    case DS4_GEN_CANCEL: rc = 1; stop = AG_STOP_INTERRUPT; break;
    case DS4_GEN_CONTEXT: rc = 2; stop = AG_STOP_CONTEXT; break;
    case DS4_GEN_LENGTH: rc = 2; stop = AG_STOP_BUDGET; break;
    case DS4_GEN_ERROR:
        rc = -1;
        switch (ds4_gen_error(g.d, &erc, NULL)) {
        case DS4_GEN_ERR_NOMEM: ui_note(a, "out of memory"); break;
        case DS4_GEN_ERR_EVAL: case DS4_GEN_ERR_ROLLBACK: ui_note(a, "decode failed: %s", ds4_strerror(erc)); break;
        default: break;   /* no logits: nothing was evaluated */
        }
        break;
    default: break;
    }
    int n = ds4_gen_n_tokens(g.d);
    a->spec = *ds4_gen_spec_stats(g.d);
    if (rc != -1) {
        /* close the turn: the reasoning channel first if it is still open */
        int32_t close[2];
        int nc = 0;
        if (ds4_gen_in_reasoning(g.d)) close[nc++] = a->ids->think_end;
        /* GLM: no end token; the next turn's marker follows the answer */
        if (ds4_model_format(a->m) != DS4_FORMAT_GLM) close[nc++] = a->ids->eos;
        int e = nc ? ds4_session_eval(a->s, close, nc, NULL, NULL) : 0;
        if (e) { ui_note(a, "decode failed: %s", ds4_strerror(e)); rc = -1; }
        else n += nc;
    }
    ui_end_stream(a);
    m->reasoning = think ? ag_strndup(g.reasoning.p ? g.reasoning.p : "", g.reasoning.n) : NULL;
    size_t bl = 0;
    const char *bt = ds4_gen_block_text(g.d, &bl);
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
    ds4_gen_free(g.d);
    free(ctexts);
    free(clens);
    ds4_buf_free(&g.reasoning);
    ds4_buf_free(&g.content);
    ds4_buf_free(&g.args);
    ds4_buf_free(&g.err);
    ds4_tokens_free(&forced);
    return rc;
}
