/*
 * turn.c -- model turns and the run loop.
 *
 * Owns: one model turn (render what is pending on top of the live state,
 * prefill only that, generate -- sampling, or the forced tokens of a
 * --script turn through the very same path --, parse the DSML block as it
 * streams, close the turn with EOS so the state is always "between turns"),
 * running the calls, saving the session, the trace line; and the run loop
 * (turns until the model answers without a tool call).
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

#define COMPACT_AT 0.85    /* compact when a prompt would fill this much */
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

double ag_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

char *ag_strndup(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) { fprintf(stderr, "ds4-agent: out of memory\n"); exit(1); }
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

typedef struct { agent *a; double t0; int shown; } prog_ud;

static int no_cancel(void *ud, int done, int total) { (void)ud; (void)done; (void)total; return 0; }

int ag_prefill(agent *a, const int32_t *ids, int n) {
    if (n <= 0) return DS4_OK;
    return ds4_session_eval(a->s, ids, n, ui_progress, a);
}

/* Put the state back to exactly `ids` (after a cancelled prefill): from the
 * disk KV store when the last saved state is it, else by evaluation. */
static void rewind_to(agent *a, const int32_t *ids, int n) {
    ds4_session_reset(a->s);
    if (n <= 0) return;
    int got = 0;
    if (a->kv) {
        ds4_buf t = { 0 };
        ds4_detokenize(a->tok, ids, (size_t)n, &t);
        size_t used = 0;
        got = ds4_kvstore_restore(a->kv, a->s, t.p ? t.p : "", t.n, n, 0, &used);
        ds4_buf_free(&t);
        if (got == n && memcmp(ds4_session_tokens(a->s), ids, (size_t)n * sizeof *ids)) got = 0;
    }
    if (got != n) {
        ds4_session_reset(a->s);
        ds4_session_eval(a->s, ids, n, no_cancel, NULL);
    }
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
        close[nc++] = a->ids->eos;
        int e = ds4_session_eval(a->s, close, nc, NULL, NULL);
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

/* ------------------------------------------------------------------ */
/* One model turn                                                      */
/* ------------------------------------------------------------------ */

typedef struct { const int32_t *ids; int n; } prefix_ud;

/* A cached state may be used when its tokens are a prefix of ours. */
static int accept_prefix(void *ud, const int32_t *t, int n, size_t used) {
    (void)used;
    prefix_ud *p = ud;
    return n <= p->n && !memcmp(t, p->ids, (size_t)n * sizeof *t);
}

static void run_calls(agent *a, ag_msg *m, ag_msg *res) {
    ds4_buf_free(&a->last_results);
    a->tools.sess = a->cur;
    for (int i = 0; i < m->n_calls; i++) {
        ag_call *c = &res->calls[i];
        c->name = strdup(m->calls[i].name);
        ds4_buf r = { 0 }, s = { 0 };
        if (ag_interrupt) {
            ds4_buf_puts(&r, "[not run: the user interrupted]");
            ds4_buf_puts(&s, "not run (interrupted)");
            c->ok = 0;
        } else {
            c->ok = ag_tool_run(&a->tools, m->calls[i].name, m->calls[i].args, &r, &s);
        }
        c->result = ag_strndup(r.p ? r.p : "", r.n);
        c->summary = ag_strndup(s.p ? s.p : "", s.n);
        ui_result(a, c->ok, c->summary);
        ds4_buf d = { 0 };
        ag_tool_describe(m->calls[i].name, m->calls[i].args, &d);
        ds4_buf_printf(&a->last_results, "%s%s\n%s\n", a->last_results.n ? "\n" : "", d.p ? d.p : "", c->result);
        ds4_buf_free(&d);
        ds4_buf_free(&r);
        ds4_buf_free(&s);
    }
}

static void dump_capture(agent *a, ds4_buf *lg) {
    ds4_session_capture(a->s, NULL, NULL);
    if (a->dump && lg->n) {
        fwrite(lg->p, 1, lg->n, a->dump);
        fflush(a->dump);
    }
    ds4_buf_free(lg);
}

/* Returns 0 (done), 1 interrupted, -1 error; *called = the turn called
 * tools (their results are now pending), *stop = why it was cut (ag_stop). */
int ag_model_turn(agent *a, int *called, int *stop) {
    ag_sess *s = a->cur;
    *called = 0;
    *stop = AG_STOP_NONE;
    const int ctx = ds4_session_ctx_size(a->s);
    ds4_tokens pend = { 0 };
    int compacted = 0;
    for (;;) {
        pend.n = 0;
        if (ds4_session_n_tokens(a->s) == 0) {
            if (ds4_tokens_reserve(&pend, a->sys_ids.n)) return -1;
            memcpy(pend.v, a->sys_ids.v, a->sys_ids.n * sizeof *pend.v);
            pend.n = a->sys_ids.n;
            s->live = 0;
        }
        ag_render_from(a, s, s->live, 1, &pend);
        int total = ds4_session_n_tokens(a->s) + (int)pend.n;
        /* one compaction is enough: it brings the prompt below its own
         * target (which can exceed COMPACT_AT of a small context) */
        if (total <= (int)(COMPACT_AT * ctx) || compacted) break;
        if (ag_compact(a, (int)pend.n)) { ds4_tokens_free(&pend); return -1; }
        compacted++;
    }
    if (ds4_session_n_tokens(a->s) + (int)pend.n > ctx - 16) {
        /* not reached: compaction always fits (ag_compact) */
        ui_note(a, "internal error: the prompt (%zu tokens) cannot fit the context (%d)", pend.n, ctx);
        ds4_tokens_free(&pend);
        return -1;
    }
    /* dump: every evaluated position of this turn */
    ds4_buf lg = { 0 };
    if (a->dump) ds4_session_capture(a->s, &lg, NULL);
    int before = ds4_session_n_tokens(a->s);
    int32_t *before_ids = malloc(((size_t)before + 1) * sizeof *before_ids);
    if (!before_ids) return -1;
    memcpy(before_ids, ds4_session_tokens(a->s), (size_t)before * sizeof *before_ids);
    const int32_t *ev = pend.v;
    int nev = (int)pend.n, cached = before, rc = 0;
    if (before == 0 && a->kv && !a->dump) {
        /* a fresh session: its system prompt (or more) may be on disk */
        ds4_buf t = { 0 };
        ds4_detokenize(a->tok, pend.v, pend.n, &t);
        prefix_ud pu = { pend.v, (int)pend.n };
        size_t used = 0;
        int got = ds4_kvstore_restore_if(a->kv, a->s, t.p ? t.p : "", t.n, 1, 0, accept_prefix, &pu, &used);
        ds4_buf_free(&t);
        if (got > 0 && got < (int)pend.n) { cached = got; ev += got; nev -= got; }
        else if (got > 0) ds4_session_reset(a->s);
    }
    double t0 = ag_now();
    if (ds4_session_n_tokens(a->s) == 0 && a->kv && nev > (int)a->sys_ids.n &&
        !memcmp(ev, a->sys_ids.v, a->sys_ids.n * sizeof *ev)) {
        /* keep the system prompt alone on disk: the next new session starts there */
        rc = ag_prefill(a, ev, (int)a->sys_ids.n);
        if (!rc && !a->dump) {
            char *err = NULL;
            ds4_kvstore_save(a->kv, a->s, DS4_KV_COLD, NULL, 0, &err);
            free(err);
        }
        ev += a->sys_ids.n;
        nev -= (int)a->sys_ids.n;
    }
    if (!rc) rc = ag_prefill(a, ev, nev);
    double pf_s = ag_now() - t0;
    ds4_tokens_free(&pend);
    if (rc == DS4_ECANCEL) {
        ui_note(a, "interrupted; the session is as it was before this prompt");
        dump_capture(a, &lg);
        rewind_to(a, before_ids, before);
        free(before_ids);
        return 1;
    }
    if (rc) {
        ui_note(a, "prefill failed: %s", ds4_strerror(rc));
        dump_capture(a, &lg);
        rewind_to(a, before_ids, before);
        free(before_ids);
        return -1;
    }
    int prompt = ds4_session_n_tokens(a->s);
    const int live_before = s->live;
    s->live = s->n_msgs;
    const int think = a->think != DS4_THINK_NONE;

    ag_msg *m = ag_sess_push(s, AG_ASSISTANT);
    if (!m) return -1;
    int n_gen = 0;
    double g0 = ag_now();
    int gr = ag_generate(a, a->max_tokens, m, think, &n_gen);
    double g_s = ag_now() - g0;
    dump_capture(a, &lg);
    m = &s->msgs[s->n_msgs - 1];
    if (gr == -1) {
        /* the state may hold part of the turn: back to before the prompt,
         * whose messages stay pending */
        ag_msg_free(m);
        s->n_msgs--;
        s->live = live_before;
        rewind_to(a, before_ids, before);
        free(before_ids);
        return -1;
    }
    free(before_ids);
    s->live = s->n_msgs;
    s->turns++;
    ag_msg *res = NULL;
    if (m->n_calls > 0) {
        res = ag_sess_push(s, AG_TOOLS);
        m = &s->msgs[s->n_msgs - 2];
        res->n_calls = m->n_calls;
        res->calls = calloc((size_t)m->n_calls, sizeof *res->calls);
        run_calls(a, m, res);
        *called = 1;
    } else if (gr == 3) {
        /* malformed DSML: the model hears why and may try again */
        res = ag_sess_push(s, AG_TOOLS);
        res->n_calls = 1;
        res->calls = calloc(1, sizeof *res->calls);
        res->calls[0].name = strdup("(malformed)");
        res->calls[0].result = ag_strndup(a->last_results.p, a->last_results.n);
        res->calls[0].summary = strdup("malformed tool call");
        ui_result(a, 0, a->last_results.p);
        *called = 1;
        m = &s->msgs[s->n_msgs - 2];
    }
    ui_status(a, prompt - cached, pf_s, n_gen, g_s);
    ag_save(a, 1);
    ag_trace_rec tr = { s->turns, prompt, cached, prompt - cached, n_gen, m, gr == 3 ? NULL : res,
                        s->id, a->compacted ? "compacted" : NULL, a->spec };
    ag_trace_write(a->trace, &tr);
    a->compacted = 0;
    if (!m->n_calls && gr != 3) {
        a->final_answer.n = 0;
        ds4_buf_puts(&a->final_answer, m->text ? m->text : "");
    }
    *stop = m->stop;
    if (gr == 1 || ag_interrupt) return 1;
    return 0;
}

int ag_run(agent *a, const char *text) {
    ag_sess *s = a->cur;
    if (!s->title) {
        const char *nl = strchr(text, '\n');
        size_t l = nl ? (size_t)(nl - text) : strlen(text);
        if (l > 70) l = 70;
        s->title = ag_strndup(text, l);
    }
    ag_msg *u = ag_sess_push(s, AG_USER);
    if (!u) return -1;
    u->text = strdup(text);
    int cuts = 0;   /* turns cut in a row */
    for (int t = 0; t < a->max_turns; t++) {
        int called = 0, stop = 0;
        int rc = ag_model_turn(a, &called, &stop);
        if (rc < 0) return -1;
        if (rc == 1) return 1;
        if (stop && !called) {
            /* A cut turn is continued by the model, told why it was cut.
             * A model that never ends its turn (or a --max-tokens too
             * small for what it writes) would go on until --max-turns:
             * after AG_CUT_TURNS_MAX in a row the user decides. */
            const char *why = stop == AG_STOP_BUDGET ? "at the --max-tokens limit" : "by the end of the context";
            if (++cuts >= AG_CUT_TURNS_MAX) {
                ui_note(a, "stopped: %d turns in a row were cut (the last %s); send a message to continue",
                        cuts, why);
                return 2;
            }
            ds4_buf b = { 0 };
            if (stop == AG_STOP_BUDGET) {
                ui_note(a, "the turn stopped at the --max-tokens limit of %d tokens; the model continues",
                        a->max_tokens);
                ds4_buf_printf(&b, "[Your last turn was stopped at the --max-tokens limit of %d tokens. "
                               "Continue from where it stopped, in turns shorter than that: a tool call "
                               "cut by the limit did not run.]", a->max_tokens);
            } else {
                ui_note(a, "the turn was cut by the end of the context; the model continues");
                ds4_buf_puts(&b, "[Your last answer was cut off by the end of the context. "
                             "Continue from where it stopped.]");
            }
            ag_msg *c = ag_sess_push(s, AG_USER);
            if (!c) { ds4_buf_free(&b); return -1; }
            c->text = b.p;
            c->note = 1;
            continue;
        }
        cuts = 0;
        if (!called) return 0;
    }
    ui_note(a, "stopped after %d model turns (--max-turns)", a->max_turns);
    return 2;
}
