/*
 * run.c -- one model turn and the run loop around it.
 *
 * Owns: one model turn (render what is pending on top of the live state --
 * compacting first when it would not fit --, prefill only that, generate
 * through turn.c, run the calls, save the session, the trace line, and on
 * a failure or Ctrl+C put the state back to before the prompt) and the run
 * loop (turns until the model answers without a tool call, cut turns
 * continued).  Split from turn.c, which keeps the generation: compaction
 * generates a summary (compact.c -> turn.c) and the turn compacts
 * (run.c -> compact.c), so the two in one file were a circle.
 * Must not: render prompts other than through session.c, or touch engine
 * internals.  Every way a turn can end (EOS, end of the DSML block, Ctrl+C,
 * context end, budget) leaves the KV state equal to the transcript.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

#define COMPACT_AT 0.85    /* compact when a prompt would fill this much */

static int no_cancel(void *ud, int done, int total) { (void)ud; (void)done; (void)total; return 0; }


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
    double t0 = ds4_now();
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
    double pf_s = ds4_now() - t0;
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
    double g0 = ds4_now();
    int gr = ag_generate(a, a->max_tokens, m, think, &n_gen);
    double g_s = ds4_now() - g0;
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
