/*
 * mtp.c -- MTP drafts (docs/MTP.md): the DeepSeek V4 multi-token-prediction
 * block proposes the next tokens, the staged verification pass of spec.c /
 * session.c decides which of them the target keeps.
 *
 * Owns: the MTP state of a session (a window-only layer, the main model's
 * final HC states of recent positions, the draft chain's own HC state) and
 * keeping it in step with the session: the window rows of every position
 * the session holds are computed lazily, right before a draft, from the
 * token and the main state of the previous position.  A window row
 * depends only on its own input, so catching up recomputes exactly the
 * rows a token-by-token MTP would hold, whatever happened in between
 * (staged passes, rollbacks, rewinds).
 * Drafts are the block's argmax (greedy), or under sampling one draw each
 * from the block's distribution after the sampler's own transforms, kept
 * (ms->q) for the speculative-sampling rule of the verifier (spec.c).
 * glm-dsa's and glm5-next's NextN blocks (docs/family.md, "MTP") draft
 * through the same chain; their rows follow the session in glm_dsa.c /
 * glm5_next.c, and a step is ds4_glm_mtp_step / ds4_g5n_mtp_step.
 * Must not: change the main session's state or logits -- drafts only ever
 * affect speed, never the output distribution (the verification decides)
 * -- or compute layer math itself (deepseek4.c does, with the main
 * layers' code).  The state itself (allocation, the main states the
 * forward hands over) is mtp_state.c's, so that the forward pass, which
 * feeds it, does not call into this module, which calls the forward.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Bring the window rows to positions [max(0, n - n_swa), n), n = the
 * session's token count: all that a draft at position n reads. */
static int mtp_sync(ds4_session *s) {
    mtp_state *ms = s->mtp;
    const int64_t n = (int64_t)s->toks.n;
    const int64_t need = n > s->m->w.cfg.n_swa ? n - s->m->w.cfg.n_swa : 0;
    ds4_mtp_drop_from(ms, n);
    /* rows must reach back to `need` without a gap */
    if (ms->n < need || ms->n - ms->ls.raw_len > need) {
        ms->ls.raw_start = ms->ls.raw_len = 0;
        ms->n = (int)need;
    }
    const float *hp[64];
    while (ms->n < n) {
        int k = (int)(n - ms->n);
        if (k > 64) k = 64;
        if (k > s->chunk) k = s->chunk;
        for (int i = 0; i < k; i++) hp[i] = ds4_mtp_main_state(s, ms->n + i - 1);
        int rc = ds4_cpu_mtp_rows(s, s->toks.v + ms->n, hp, k, ms->n);
        if (rc) return rc;
        ms->n += k;
    }
    return DS4_OK;
}

/* Up to max_draft drafts after `cur`.  smp NULL: the block's argmax.
 * Otherwise draft i is one draw (ds4_sampler_draw) from q_i = the
 * sampler's transforms of the block's logits, kept in ms->q + i * n_vocab
 * for the verification (ds4_spec_judge). */
static int mtp_draft_with(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t *out) {
    if (!s->mtp) return DS4_EUNSUP;
    s->mtp->nq = 0;
    const ds4_config *c = &s->m->w.cfg;
    if (cur < 0 || cur >= c->n_vocab || max_draft < 0) return DS4_EINVAL;
    if (max_draft > DS4_DRAFT_PASS_MAX - 1) max_draft = DS4_DRAFT_PASS_MAX - 1;
    /* the verification pass evaluates cur and the drafts */
    int room = s->ctx - (int)s->toks.n - 1;
    if (max_draft > room) max_draft = room;
    if (max_draft <= 0) return 0;
    mtp_state *ms = s->mtp;
    if (smp && !ms->q) {
        /* once per session: the q of a whole chain, kept for the verifier */
        ms->q = malloc((size_t)(DS4_DRAFT_PASS_MAX - 1) * c->n_vocab * sizeof(float));
        if (!ms->q) return DS4_ENOMEM;
    }
    /* glm-dsa, glm5-next: the NextN block's rows follow the session already
     * (glm_dsa.c, glm5_next.c) */
    const int glm = c->arch == DS4_ARCH_GLM_DSA, g5n = c->arch == DS4_ARCH_GLM5_NEXT;
    int rc = glm || g5n ? DS4_OK : mtp_sync(s);
    if (rc) return rc;
    const int64_t n = (int64_t)s->toks.n;
    const float *hprev = ds4_mtp_main_state(s, n - 1);
    int32_t tok = cur;
    for (int i = 0; i < max_draft; i++) {
        /* step i: the token at position n + i and the state before it (the
         * main model's for the first, the block's own output after) */
        rc = glm   ? ds4_glm_mtp_step(s, tok, hprev, n + i)
             : g5n ? ds4_g5n_mtp_step(s, tok, hprev, n + i)
                   : ds4_cpu_mtp_step(s, tok, hprev, n + i);
        if (rc) {
            ds4_mtp_state_reset(s);
            return rc;
        }
        ms->n++;
        if (smp) {
            /* a sampled draft: the verifier needs the q it came from */
            float *q = ms->q + (size_t)i * c->n_vocab;
            ds4_sampler_dist(smp, ms->logits, q);
            tok = ds4_sampler_draw(smp, q);
        } else {
            tok = ds4_sample_greedy(ms->logits, c->n_vocab);
        }
        out[i] = tok;
        hprev = ms->hc;
    }
    if (smp) ms->nq = max_draft;
    return max_draft;
}

int ds4_mtp_draft(ds4_session *s, int32_t cur, int max_draft, int32_t *out) {
    return mtp_draft_with(s, NULL, cur, max_draft, out);
}

int ds4_mtp_draft_sampled(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t *out) {
    if (smp && ds4_sampler_is_greedy(smp)) smp = NULL;
    return mtp_draft_with(s, smp, cur, max_draft, out);
}

const float *ds4_mtp_draft_dist(const ds4_session *s, int i) {
    const mtp_state *ms = s->mtp;
    if (!ms || i < 0 || i >= ms->nq) return NULL;
    return ms->q + (size_t)i * s->m->w.cfg.n_vocab;
}

const float *ds4_mtp_logits(const ds4_session *s) {
    return s->mtp && s->mtp->steps ? s->mtp->logits : NULL;
}
