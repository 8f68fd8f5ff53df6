/*
 * spec.c -- speculative decoding (docs/SPEC.md): draft proposals by prompt
 * lookup, one verification step over a staged session pass, and the
 * speculative-sampling acceptance rule.
 *
 * Owns: choosing which drafted tokens the target model keeps.  The staged
 * pass and its exact rollback are the session's (session.c); the logits
 * are the forward's.  Must not: change what plain decoding would output --
 * greedy output is token for token that of plain greedy decoding, and with
 * a sampler every emitted token is one draw of the same sampler on the
 * same logits a plain decode would have used, so a seeded run also
 * matches token for token.
 */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Longest suffix n-gram (DS4_LOOKUP_NGRAM_MAX .. 1 tokens) of hist that
 * occurred earlier; the most recent earlier occurrence wins (recent text
 * predicts best).  Proposes the tokens that followed it. */
int ds4_lookup_draft(const int32_t *hist, int n, int max_draft, int32_t *out) {
    if (!hist || n < 2 || max_draft < 1) return 0;
    int gmax = DS4_LOOKUP_NGRAM_MAX < n - 1 ? DS4_LOOKUP_NGRAM_MAX : n - 1;
    for (int g = gmax; g >= 1; g--) {
        const int32_t *suf = hist + n - g;
        for (int i = n - g - 1; i >= 0; i--) {
            if (hist[i] != suf[0] || memcmp(hist + i, suf, (size_t)g * sizeof *suf) != 0) continue;
            int k = 0;
            while (k < max_draft && i + g + k < n) {
                out[k] = hist[i + g + k];
                k++;
            }
            if (k > 0) return k;
        }
    }
    return 0;
}

int ds4_spec_step(ds4_session *s, ds4_sampler *smp, int32_t cur, const int32_t *draft,
                  int n_draft, int32_t stop, int32_t *out, int *n_out, ds4_spec_stats *st) {
    *n_out = 0;
    const int V = s->m->w.cfg.n_vocab;
    int room = s->ctx - (int)s->toks.n;
    if (room < 1) return DS4_ECTX;
    int nd = n_draft < 0 ? 0 : n_draft;
    if (nd > ds4_session_draft_capacity(s) - 1) nd = ds4_session_draft_capacity(s) - 1;
    if (nd > room - 1) nd = room - 1;
    /* a stop token is never evaluated by plain decoding: drafts end before it */
    for (int i = 0; i < nd; i++)
        if (draft[i] == stop || draft[i] < 0 || draft[i] >= V) { nd = i; break; }
    int32_t pass[DS4_DRAFT_PASS_MAX];
    pass[0] = cur;
    if (nd) memcpy(pass + 1, draft, (size_t)nd * sizeof *pass);
    int rc = ds4_session_eval_draft(s, pass, 1 + nd);
    if (rc) return rc;
    int acc = 0, k = 0;
    for (int i = 0; i <= nd; i++) {
        const float *L = ds4_session_draft_logits(s, i);
        int32_t t = smp ? ds4_sample(smp, L) : ds4_sample_greedy(L, V);
        out[k++] = t;
        if (i < nd && t == draft[i]) { acc++; continue; }
        break;
    }
    rc = ds4_session_draft_commit(s, 1 + acc);
    if (rc) return rc;
    *n_out = k;
    if (st) {
        st->passes++;
        st->drafted += (uint64_t)nd;
        st->accepted += (uint64_t)acc;
        st->emitted += (uint64_t)k;
    }
    return DS4_OK;
}

/* Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a draft
 * d drawn from q is kept with probability min(1, p(d)/q(d)); otherwise a
 * token is drawn from max(0, p - q), normalized.  The emitted token is
 * then distributed exactly as p. */
int32_t ds4_spec_resolve(const float *p, const float *q, int n, int32_t draft,
                         double u_accept, double u_resample) {
    if (draft >= 0 && draft < n && q[draft] > 0.0f) {
        double a = (double)p[draft] / (double)q[draft];
        if (u_accept < a) return draft;
    }
    double z = 0;
    for (int i = 0; i < n; i++) z += p[i] > q[i] ? (double)p[i] - q[i] : 0.0;
    if (z <= 0) return draft;   /* p == q: the accept test above always passes */
    double x = u_resample * z, acc = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] <= q[i]) continue;
        last = i;
        acc += (double)p[i] - q[i];
        if (x < acc) return i;
    }
    return last;   /* rounding at the top end */
}
