/*
 * compact.c -- context compaction.
 *
 * Owns: what happens when the next prompt would fill the context past the
 * threshold.  First choice: ask the model (on top of the live state) for a
 * summary of the work so far and start a fresh session from the task, the
 * summary and what is still pending (the last calls and their results).
 * When there is no room left for that, or it fails: keep the task and the
 * most recent turns that fit, older tool results replaced by one-line
 * stubs.  Either way the new transcript is shrunk (long texts keep their
 * head and tail) until it fits half the context, so a turn never fails for
 * lack of room.  Must not: evaluate the fresh session (the next turn does,
 * as any first turn) or touch the disk (the turn's save does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

#define TARGET 0.5          /* a compacted session fills at most this much */

static const char SUMMARY_REQUEST[] =
    "[The context is nearly full and will be compacted.] Write a summary of the work so far "
    "for yourself, to continue from it: the task, what you did and found (files, functions, "
    "commands and their results), the changes made, and what remains to do. Be concise and "
    "precise; do not call any tool.";

static char *dup0(const char *s) { return s ? strdup(s) : NULL; }

static void copy_msg(ag_msg *d, const ag_msg *m) {
    *d = *m;
    d->text = dup0(m->text);
    d->reasoning = dup0(m->reasoning);
    d->dsml = dup0(m->dsml);
    d->calls = m->n_calls ? calloc((size_t)m->n_calls, sizeof *d->calls) : NULL;
    for (int i = 0; i < m->n_calls; i++) {
        d->calls[i].name = dup0(m->calls[i].name);
        d->calls[i].args = dup0(m->calls[i].args);
        d->calls[i].result = dup0(m->calls[i].result);
        d->calls[i].summary = dup0(m->calls[i].summary);
        d->calls[i].ok = m->calls[i].ok;
    }
}

/* Keep the head and the tail of a long text. */
static void shrink(char **p, size_t keep) {
    size_t n = strlen(*p);
    if (n <= keep + 64) keep = n / 2;
    if (keep < 16) keep = 0;
    size_t h = keep / 2, t = keep - h;
    /* do not cut inside a UTF-8 sequence */
    while (h > 0 && ((unsigned char)(*p)[h] & 0xc0) == 0x80) h--;
    while (t > 0 && ((unsigned char)(*p)[n - t] & 0xc0) == 0x80) t--;
    ds4_buf b = { 0 };
    ds4_buf_append(&b, *p, h);
    ds4_buf_printf(&b, "\n[... %zu bytes dropped to save context ...]\n", n - h - t);
    ds4_buf_append(&b, *p + n - t, t);
    free(*p);
    *p = b.p;
}

static int count(agent *a, ag_sess *t) {
    ds4_tokens k = { 0 };
    ag_render_from(a, t, 0, 1, &k);
    int n = (int)k.n + (int)a->sys_ids.n;
    ds4_tokens_free(&k);
    return n;
}

/* Shrink the longest text until the transcript fits. */
static int fit(agent *a, ag_sess *t, int target) {
    for (int iter = 0; iter < 200; iter++) {
        int n = count(a, t);
        if (n <= target) return 0;
        char **best = NULL;
        size_t bl = 0;
        for (int i = 0; i < t->n_msgs; i++) {
            ag_msg *m = &t->msgs[i];
            char **cand[3] = { &m->text, &m->reasoning, NULL };
            for (int k = 0; k < 2; k++)
                if (*cand[k] && strlen(*cand[k]) > bl) { best = cand[k]; bl = strlen(*best); }
            if (m->kind == AG_TOOLS)
                for (int c = 0; c < m->n_calls; c++)
                    if (m->calls[c].result && strlen(m->calls[c].result) > bl) {
                        best = &m->calls[c].result;
                        bl = strlen(*best);
                    }
        }
        if (!best || bl < 64) return -1;
        /* bytes per token ~ 3-4: cut to what the excess allows */
        size_t want = (size_t)(n - target) * 4 + 64;
        shrink(best, bl > want ? bl - want : bl / 4);
    }
    return -1;
}

static void stub_results(ag_msg *m) {
    for (int c = 0; c < m->n_calls; c++) {
        char line[600];
        snprintf(line, sizeof line, "[result of %s dropped to save context: %s]",
                 m->calls[c].name ? m->calls[c].name : "tool",
                 m->calls[c].summary ? m->calls[c].summary : "");
        free(m->calls[c].result);
        m->calls[c].result = strdup(line);
    }
}

/* Ask the model for a summary on top of the live state.  NULL when there
 * is no room or the turn did not complete. */
static char *ask_summary(agent *a) {
    ag_sess *s = a->cur;
    const int ctx = ds4_session_ctx_size(a->s);
    if (s->live == 0 || s->msgs[s->live - 1].kind != AG_ASSISTANT) return NULL;
    ds4_tokens req = { 0 };
    ds4_tokens_push(&req, a->ids->user);
    ds4_tokenize(a->tok, SUMMARY_REQUEST, strlen(SUMMARY_REQUEST), DS4_TOK_PLAIN, &req);
    ds4_tokens_push(&req, a->ids->assistant);
    int think = a->think != DS4_THINK_NONE;
    ds4_tokens_push(&req, think ? a->ids->think : a->ids->think_end);
    int before = ds4_session_n_tokens(a->s);
    int budget = ctx - before - (int)req.n - 4;
    if (budget > ctx / 4) budget = ctx / 4;
    if (budget < 48) { ds4_tokens_free(&req); return NULL; }
    ui_note(a, "context %d/%d: asking the model for a summary of the work so far", before, ctx);
    int rc = ag_prefill(a, req.v, (int)req.n);
    int prompt = ds4_session_n_tokens(a->s), n_gen = 0;
    ds4_tokens_free(&req);
    if (rc) return NULL;
    ag_msg m;
    memset(&m, 0, sizeof m);
    int gr = ag_generate(a, budget, &m, think, &n_gen);
    char *out = NULL;
    if (gr == 0 || gr == 2 || gr == 3) {
        const char *t = m.text && *m.text ? m.text : m.reasoning;
        if (t && *t) out = strdup(t);
    }
    s->turns++;
    ag_trace_rec tr = { s->turns, prompt, before, prompt - before, n_gen, &m, NULL, s->id, "summary", a->spec };
    ag_trace_write(a->trace, &tr);
    ag_msg_free(&m);
    return out;
}

int ag_compact(agent *a, int pending_tokens) {
    ag_sess *s = a->cur;
    const int ctx = ds4_session_ctx_size(a->s);
    const int target = (int)(TARGET * ctx);
    ui_note(a, "context: %d in use + %d to add of %d: compacting", ds4_session_n_tokens(a->s),
            pending_tokens, ctx);
    char *summary = ask_summary(a);
    const int by_summary = summary != NULL;
    ag_sess *t = calloc(1, sizeof *t);
    if (!t) { free(summary); return -1; }
    /* the task: the first user message */
    int first = 0;
    while (first < s->n_msgs && s->msgs[first].kind != AG_USER) first++;
    ag_msg *task = ag_sess_push(t, AG_USER);
    ds4_buf tx = { 0 };
    if (first < s->n_msgs) ds4_buf_puts(&tx, s->msgs[first].text ? s->msgs[first].text : "");
    if (summary) {
        ds4_buf_printf(&tx, "\n\n[The earlier conversation was compacted to save context. "
                       "Summary of the work so far:]\n%s", summary);
    } else {
        ds4_buf_puts(&tx, "\n\n[The earlier conversation was compacted to save context: only "
                     "the most recent turns follow, older tool results are shortened.]");
    }
    task->text = tx.p ? tx.p : strdup("");
    /* the messages kept after the task */
    int from;
    if (summary) {
        from = s->live;
        if (from < s->n_msgs && s->msgs[from].kind == AG_TOOLS && from > 0) from--;
        if (from <= first) from = first + 1;
    } else {
        /* as many recent turns as fit; a tool result stays with its call */
        from = s->n_msgs;
        for (int i = s->n_msgs - 1; i > first; i--) {
            if (s->msgs[i].kind == AG_TOOLS) continue;
            ag_sess probe = *t;
            probe.msgs = calloc((size_t)(t->n_msgs + s->n_msgs - i), sizeof *probe.msgs);
            probe.msgs[0] = t->msgs[0];
            probe.n_msgs = 1;
            for (int k = i; k < s->n_msgs; k++) probe.msgs[probe.n_msgs++] = s->msgs[k];
            int n = count(a, &probe);
            free(probe.msgs);
            if (n > target && from < s->n_msgs) break;
            from = i;
            if (n > target) break;
        }
    }
    int last_tools = -1;
    for (int i = from; i < s->n_msgs; i++)
        if (s->msgs[i].kind == AG_TOOLS) last_tools = i;
    for (int i = from; i < s->n_msgs; i++) {
        ag_msg *d = ag_sess_push(t, s->msgs[i].kind);
        copy_msg(d, &s->msgs[i]);
        if (d->kind == AG_TOOLS && i != last_tools && !summary) stub_results(d);
        if (d->kind == AG_ASSISTANT && i + 2 < s->n_msgs && d->reasoning) {
            free(d->reasoning);
            d->reasoning = strdup("");
        }
    }
    free(summary);
    if (fit(a, t, target)) {
        ui_note(a, "cannot compact the conversation below %d tokens", target);
        ag_sess_free(t);
        return -1;
    }
    /* the compacted transcript replaces the old one; the next turn
     * evaluates it from the start */
    for (int i = 0; i < s->n_msgs; i++) ag_msg_free(&s->msgs[i]);
    free(s->msgs);
    s->msgs = t->msgs;
    s->n_msgs = t->n_msgs;
    s->cap_msgs = t->cap_msgs;
    t->msgs = NULL;
    t->n_msgs = 0;
    ag_sess_free(t);
    s->live = 0;
    s->compactions++;
    a->compacted = 1;
    ds4_session_reset(a->s);
    ui_note(a, "compacted (%s): a fresh session of %d tokens continues the work",
            by_summary ? "the model's summary" : "recent turns, older results shortened", count(a, s));
    return 0;
}
