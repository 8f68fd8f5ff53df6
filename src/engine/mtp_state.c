/*
 * mtp_state.c -- the MTP block's per-session state (docs/MTP.md; the type
 * is engine_internal.h's mtp_state): its buffers, and the main model's
 * final HC states of recent positions that the forward pass hands over
 * (ds4_mtp_note_hidden) for mtp.c to draft from.
 *
 * Owns: allocation, reset, the ring of main states and forgetting window
 * rows past a position.  Must not: compute anything of the model -- it is
 * split from mtp.c so that deepseek4.c (which calls note_hidden) and
 * mtp.c (which calls the forward's MTP block) do not call each other.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* A main state: n_hc streams (the GLM graphs: one, the normed row). */
static size_t state_floats(const ds4_config *c) {
    return (size_t)(c->arch == DS4_ARCH_DEEPSEEK4 && c->n_hc > 0 ? c->n_hc : 1) * (size_t)c->n_embd;
}

/* Window rows: the window, a catch-up piece (one chunk) and a draft chain. */
static int raw_rows(const ds4_session *s) {
    return s->m->w.cfg.n_swa + s->chunk + DS4_DRAFT_PASS_MAX;
}

int ds4_mtp_state_new(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    mtp_state *ms = calloc(1, sizeof *ms);
    if (!ms) return DS4_ENOMEM;
    s->mtp = ms;
    const size_t nd = state_floats(c);
    /* the GLM graphs' NextN rows are glm_dsa.c's / glm5_next.c's */
    const int glm = c->arch == DS4_ARCH_GLM_DSA || c->arch == DS4_ARCH_GLM5_NEXT;
    ms->ls.raw_cap = glm ? 0 : raw_rows(s);
    ms->ls.raw = glm ? NULL : malloc((size_t)ms->ls.raw_cap * c->head_dim * kv_es(s));
    /* main states of the window's positions, their predecessor, and a
     * staged pass beyond them (rolled back or not) */
    ms->hcap = c->n_swa + DS4_DRAFT_PASS_MAX + 2;
    ms->H = malloc((size_t)ms->hcap * nd * sizeof(float));
    ms->hpos = malloc((size_t)ms->hcap * sizeof *ms->hpos);
    ms->hc = malloc(nd * sizeof(float));
    ms->logits = calloc((size_t)c->n_vocab, sizeof(float));
    if ((!glm && !ms->ls.raw) || !ms->H || !ms->hpos || !ms->hc || !ms->logits) {
        ds4_mtp_state_free(s);
        return DS4_ENOMEM;
    }
    ds4_mtp_state_reset(s);
    return DS4_OK;
}

void ds4_mtp_state_free(ds4_session *s) {
    mtp_state *ms = s->mtp;
    if (!ms) return;
    free(ms->ls.raw);
    free(ms->H);
    free(ms->hpos);
    free(ms->hc);
    free(ms->logits);
    free(ms->q);
    free(ms);
    s->mtp = NULL;
}

void ds4_mtp_state_reset(ds4_session *s) {
    mtp_state *ms = s->mtp;
    if (!ms) return;
    ms->ls.raw_start = ms->ls.raw_len = 0;
    ms->n = 0;
    for (int i = 0; i < ms->hcap; i++) ms->hpos[i] = -1;
}

/* Forget the window rows of positions >= p (a rollback or a rewind). */
void ds4_mtp_drop_from(mtp_state *ms, int64_t p) {
    if (ms->n <= p) return;
    int64_t drop = ms->n - p;
    if (drop <= ms->ls.raw_len) {
        ms->ls.raw_len -= (int)drop;
    } else {
        ms->ls.raw_start = ms->ls.raw_len = 0;
    }
    ms->n = (int)p;
}

void ds4_mtp_note_hidden(ds4_session *s, const float *X, int64_t p0, int n) {
    mtp_state *ms = s->mtp;
    const size_t nd = state_floats(&s->m->w.cfg);
    /* positions from p0 on are (re)evaluated: MTP rows past them are stale */
    ds4_mtp_drop_from(ms, p0);
    for (int i = n > ms->hcap ? n - ms->hcap : 0; i < n; i++) {
        int64_t pos = p0 + i;
        int slot = (int)(pos % ms->hcap);
        memcpy(ms->H + (size_t)slot * nd, X + (size_t)i * nd, nd * sizeof(float));
        ms->hpos[slot] = pos;
    }
}

/* The main state after position p, or NULL when not held. */
const float *ds4_mtp_main_state(const ds4_session *s, int64_t p) {
    const mtp_state *ms = s->mtp;
    if (p < 0) return NULL;
    int slot = (int)(p % ms->hcap);
    if (ms->hpos[slot] != p) return NULL;
    return ms->H + (size_t)slot * state_floats(&s->m->w.cfg);
}
