/*
 * compact.c -- context compaction.
 *
 * Owns: what happens when the next prompt would fill the context past the
 * threshold.  First choice: ask the model (on top of the live state) for a
 * summary of the work so far and start a fresh session from the task, the
 * summary and what is still pending (the last calls and their results).
 * When there is no room left for that, or it fails: keep the task and the
 * most recent turns that fit, older tool results replaced by one-line
 * stubs.  Either way the new transcript is then made to fit half the
 * context (make_fit: long texts keep their head and tail, then tool
 * results become stubs, then whole turns are dropped, then what is left
 * is cut to markers), so compaction always succeeds and a turn never fails
 * for lack of room.  Must not: evaluate the fresh session (the next turn
 * does, as any first turn) or touch the disk (the turn's save does).
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

/* Shrink the longest text (never message `keep`'s, nor one of `floor`
 * bytes or less) until the transcript fits.  0 when it fits. */
static int fit(agent *a, ag_sess *t, int target, int keep, size_t floor) {
    for (int iter = 0; iter < 400; iter++) {
        int n = count(a, t);
        if (n <= target) return 0;
        char **best = NULL;
        size_t bl = floor;
        for (int i = 0; i < t->n_msgs; i++) {
            ag_msg *m = &t->msgs[i];
            if (i == keep) continue;
            char **cand[2] = { &m->text, &m->reasoning };
            for (int k = 0; k < 2; k++)
                if (*cand[k] && strlen(*cand[k]) > bl) { best = cand[k]; bl = strlen(*best); }
            if (m->kind == AG_TOOLS)
                for (int c = 0; c < m->n_calls; c++)
                    if (m->calls[c].result && strlen(m->calls[c].result) > bl) {
                        best = &m->calls[c].result;
                        bl = strlen(*best);
                    }
        }
        if (!best) return -1;
        /* bytes per token ~ 3-4: cut to what the excess allows, never
         * below the floor */
        size_t want = (size_t)(n - target) * 4 + 64;
        size_t k = bl > want ? bl - want : bl / 4;
        if (k < floor / 2) k = floor / 2;
        shrink(best, k);
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
    int think = a->think != DS4_THINK_NONE;
    ag_open_assistant(a, think, &req);
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
    /* cut by its own budget, not --max-tokens: no "stopped" in the trace */
    if (m.stop == AG_STOP_BUDGET) m.stop = AG_STOP_NONE;
    ag_trace_rec tr = { s->turns, prompt, before, prompt - before, n_gen, &m, NULL, s->id, "summary", a->spec };
    ag_trace_write(a->trace, &tr);
    ag_msg_free(&m);
    return out;
}

/* Drop message i (an assistant turn with the tool results that answer it). */
static int drop_at(ag_sess *t, int i) {
    int k = 1;
    if (t->msgs[i].kind == AG_ASSISTANT && i + 1 < t->n_msgs && t->msgs[i + 1].kind == AG_TOOLS) k = 2;
    for (int j = i; j < i + k; j++) ag_msg_free(&t->msgs[j]);
    memmove(&t->msgs[i], &t->msgs[i + k], (size_t)(t->n_msgs - i - k) * sizeof *t->msgs);
    t->n_msgs -= k;
    return k;
}

static void set_note(ag_msg *m, const char *base, int dropped) {
    ds4_buf b = { 0 };
    ds4_buf_puts(&b, base);
    if (dropped)
        ds4_buf_printf(&b, " [%d message%s of this conversation had to be dropped entirely to fit "
                       "the context.]", dropped, dropped == 1 ? "" : "s");
    free(m->text);
    m->text = b.p;
}

/* The transcript of the fresh session: [0] the task, [1] the note that says
 * what happened (never shortened or dropped), [2] the summary when there is
 * one, then the messages kept.  Made to fit `target`, in this order until
 * it does: long texts keep their head and tail (down to 1 KB each); the
 * remaining tool results become one-line stubs, oldest first; whole turns
 * are dropped, oldest first, but the latest request of the user; then the
 * texts left (task, summary, that request) are cut to a marker.  The last
 * step always fits: AG_CTX_MIN_ROOM is checked at start-up and /ctx. */
static int make_fit(agent *a, ag_sess *t, int target, int n_fixed, const char *note) {
    if (!fit(a, t, target, 1, 1024)) return 0;
    for (int i = n_fixed; i < t->n_msgs; i++) {
        if (t->msgs[i].kind != AG_TOOLS) continue;
        stub_results(&t->msgs[i]);
        if (count(a, t) <= target) return 0;
    }
    int latest = -1;    /* the user's latest request (not an agent note) */
    for (int i = t->n_msgs - 1; i >= 0 && latest < 0; i--)
        if (t->msgs[i].kind == AG_USER && !t->msgs[i].note) latest = i;
    int dropped = 0;
    for (int i = n_fixed; i < t->n_msgs; ) {
        if (i == latest) { i++; continue; }
        int k = drop_at(t, i);
        dropped += k;
        if (latest > i) latest -= k;
        set_note(&t->msgs[1], note, dropped);
        if (count(a, t) <= target) return 0;
    }
    return fit(a, t, target, 1, 96);
}

int ag_compact(agent *a, int pending_tokens) {
    ag_sess *s = a->cur;
    const int ctx = ds4_session_ctx_size(a->s);
    /* half the context; in a context barely larger than the system prompt
     * what leaves AG_CTX_MIN_ROOM / 2 for the conversation (and as much
     * for the answer) */
    int target = (int)(TARGET * ctx);
    if (target < (int)a->sys_ids.n + AG_CTX_MIN_ROOM / 2) target = (int)a->sys_ids.n + AG_CTX_MIN_ROOM / 2;
    ui_note(a, "context: %d in use + %d to add of %d: compacting", ds4_session_n_tokens(a->s),
            pending_tokens, ctx);
    char *summary = ask_summary(a);
    const int by_summary = summary != NULL;
    ag_sess *t = calloc(1, sizeof *t);
    if (!t) { free(summary); return -1; }
    /* the task: the first message of the user (not a note of the agent) */
    int first = 0;
    while (first < s->n_msgs && (s->msgs[first].kind != AG_USER || s->msgs[first].note)) first++;
    ag_msg *task = ag_sess_push(t, AG_USER);
    ag_msg *nm = task ? ag_sess_push(t, AG_USER) : NULL;
    if (!nm) { free(summary); ag_sess_free(t); return -1; }
    task = &t->msgs[0];
    task->text = strdup(first < s->n_msgs && s->msgs[first].text ? s->msgs[first].text : "");
    const char *note = summary
        ? "[The earlier conversation was compacted to save context. Summary of the work so far:]"
        : "[The earlier conversation was compacted to save context: only the most recent turns follow, "
          "older tool results are shortened.]";
    nm->note = 1;
    set_note(nm, note, 0);
    if (summary) {
        ag_msg *sm = ag_sess_push(t, AG_USER);
        if (!sm) { free(summary); ag_sess_free(t); return -1; }
        sm->note = 1;
        sm->text = summary;
    }
    const int n_fixed = t->n_msgs;
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
            if (!probe.msgs) break;
            probe.n_msgs = 0;
            for (int k = 0; k < t->n_msgs; k++) probe.msgs[probe.n_msgs++] = t->msgs[k];
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
        if (!d) { ag_sess_free(t); return -1; }
        copy_msg(d, &s->msgs[i]);
        if (d->kind == AG_TOOLS && i != last_tools && !by_summary) stub_results(d);
        if (d->kind == AG_ASSISTANT && i + 2 < s->n_msgs && d->reasoning) {
            free(d->reasoning);
            d->reasoning = strdup("");
        }
    }
    if (make_fit(a, t, target, n_fixed, note)) {
        /* not reached (see make_fit) */
        ui_note(a, "internal error: cannot compact the conversation below %d tokens", target);
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
