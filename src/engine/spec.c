/*
 * spec.c -- speculative decoding (docs/SPEC.md): draft proposals by prompt
 * lookup, one verification step over a staged session pass, and the
 * speculative-sampling acceptance rule.
 *
 * Owns: choosing which drafted tokens the target model keeps.  The staged
 * pass and its exact rollback are the session's (session.c); the logits
 * are the forward's; the draws and distributions are the sampler's.
 * Must not: change what plain decoding would output -- greedy output is
 * token for token that of plain greedy decoding; with a sampler, each
 * emitted token is distributed exactly as plain sampling's.  Deterministic
 * drafts (prompt lookup, greedy MTP) are judged by "draw from p and
 * compare", one sampler draw per emitted token in plain decoding's order,
 * so a seeded run matches plain seeded decoding token for token.  Sampled
 * MTP drafts (ds4_spec_step_mtp) are judged by the speculative-sampling
 * rule, which draws differently: same distribution, same output for the
 * same seed, not the same tokens as plain seeded decoding.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Longest suffix n-gram (DS4_LOOKUP_NGRAM_MAX .. 1 tokens) of hist that
 * occurred earlier -- in hist itself (src == NULL), or in src -- ; the
 * most recent earlier occurrence wins (recent text predicts best).
 * Proposes the tokens that followed it. */
int ds4_lookup_draft_in(const int32_t *hist, int n, const int32_t *src, int ns, int max_draft, int32_t *out,
                        int *match) {
    if (match) *match = 0;
    if (!hist || n < 1 || max_draft < 1) return 0;
    /* in hist itself the match must end before the suffix does */
    const int self = src == NULL;
    if (self) { src = hist; ns = n; }
    if (!src || ns < 2) return 0;
    int gmax = DS4_LOOKUP_NGRAM_MAX < n ? DS4_LOOKUP_NGRAM_MAX : n;
    if (gmax > ns - 1) gmax = ns - 1;
    if (self && gmax > n - 1) gmax = n - 1;
    for (int g = gmax; g >= 1; g--) {
        const int32_t *suf = hist + n - g;
        for (int i = ns - g - 1; i >= 0; i--) {
            if (src[i] != suf[0] || memcmp(src + i, suf, (size_t)g * sizeof *suf) != 0) continue;
            int k = 0;
            while (k < max_draft && i + g + k < ns) {
                out[k] = src[i + g + k];
                k++;
            }
            if (k > 0) {
                if (match) *match = g;
                return k;
            }
        }
    }
    return 0;
}

/* Numbered listings: cat -n (spaces, the number, a tab), Claude Code's
 * Read (the number, a tab), other coding agents' read tools (the number,
 * "\xe2\x86\x92" = U+2192).  A line counts when it has at least one
 * digit followed by one of those separators. */
int ds4_lookup_unnumber(const char *text, size_t len, ds4_buf *out) {
    int lines = 0;
    const char *q = text, *end = text ? text + len : NULL;
    while (q && q < end) {
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        const char *e = nl ? nl : end;
        const char *c = q;
        while (c < e && *c == ' ') c++;
        const char *d = c;
        while (c < e && *c >= '0' && *c <= '9') c++;
        size_t sep = 0;
        if (c > d && c < e && *c == '\t') sep = 1;
        else if (c > d && e - c >= 3 && !memcmp(c, "\xe2\x86\x92", 3)) sep = 3;
        if (sep) {
            ds4_buf_append(out, c + sep, (size_t)(e - c - (ptrdiff_t)sep));
            ds4_buf_append(out, "\n", 1);
            lines++;
        }
        q = nl ? nl + 1 : end;
    }
    return lines;
}

int ds4_lookup_corpus(const ds4_tokenizer *tok, const char *const *texts, const size_t *lens, int n,
                      size_t max_bytes, ds4_tokens *out) {
    if (n <= 0) return DS4_OK;
    /* newest first: each text's numbered lines, unnumbered, until
     * max_bytes of them are kept; then tokenized oldest first */
    ds4_buf *b = calloc((size_t)n, sizeof *b);
    if (!b) return DS4_ENOMEM;
    int first = n, failed = 0;
    size_t total = 0;
    while (first > 0 && total < max_bytes) {
        first--;
        if (texts[first]) ds4_lookup_unnumber(texts[first], lens[first], &b[first]);
        failed |= ds4_buf_failed(&b[first]);
        total += b[first].n;
    }
    for (int i = first; i < n; i++) {
        if (!failed && b[i].n) ds4_tokenize(tok, b[i].p, b[i].n, DS4_TOK_PLAIN, out);
        ds4_buf_free(&b[i]);
    }
    free(b);
    return failed || ds4_tokens_failed(out) ? DS4_ENOMEM : DS4_OK;
}

int ds4_lookup_draft(const int32_t *hist, int n, int max_draft, int32_t *out) {
    if (!hist || n < 2) return 0;
    return ds4_lookup_draft_in(hist, n, NULL, 0, max_draft, out, NULL);
}

/* Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a draft
 * d drawn from q is kept with probability min(1, p(d)/q(d)); otherwise a
 * token is drawn from max(0, p - q), normalized.  The emitted token is
 * then distributed exactly as p.  Split in two so that the verifier draws
 * the residual's uniform only when a draft is rejected. */
static int spec_accept(const float *p, const float *q, int n, int32_t draft, double u) {
    if (draft < 0 || draft >= n || !(q[draft] > 0.0f)) return 0;
    return u < (double)p[draft] / (double)q[draft];
}

static int32_t spec_residual(const float *p, const float *q, int n, int32_t draft, double u) {
    double z = 0;
    for (int i = 0; i < n; i++) z += p[i] > q[i] ? (double)p[i] - q[i] : 0.0;
    /* p <= q everywhere means p == q (both sum to 1, up to rounding): the
     * accept test passes then but for rounding, and the draft stands */
    if (z <= 0) return draft;
    double x = u * z, acc = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] <= q[i]) continue;
        last = i;
        acc += (double)p[i] - q[i];
        if (x < acc) return i;
    }
    return last;   /* rounding at the top end */
}

int32_t ds4_spec_resolve(const float *p, const float *q, int n, int32_t draft,
                         double u_accept, double u_resample) {
    if (spec_accept(p, q, n, draft, u_accept)) return draft;
    return spec_residual(p, q, n, draft, u_resample);
}

int32_t ds4_spec_judge(ds4_sampler *smp, const float *logits, const float *q, int32_t draft,
                       int *accepted) {
    const float *p = ds4_sampler_target(smp, logits);
    const int V = ds4_sampler_n_vocab(smp);
    int ok = spec_accept(p, q, V, draft, ds4_sampler_unit(smp));
    if (accepted) *accepted = ok;
    return ok ? draft : spec_residual(p, q, V, draft, ds4_sampler_unit(smp));
}

/* One step; q (nd rows of n_vocab, or NULL) the distributions the drafts
 * were drawn from.  With q and a sampling sampler, position i < nd is
 * judged by the speculative-sampling rule against p_i = the sampler's
 * target; otherwise the target draws (or takes the argmax) and compares,
 * which is the same rule for a point-mass q. */
static int spec_step(ds4_session *s, ds4_sampler *smp, int32_t cur, const int32_t *draft,
                     const float *q, int n_draft, int32_t stop, int32_t *out, int *n_out,
                     ds4_spec_stats *st) {
    *n_out = 0;
    const int V = s->m->w.cfg.n_vocab;
    const int rule = q && smp && !ds4_sampler_is_greedy(smp);
    int room = s->ctx - (int)s->toks.n;
    if (room < 1) return DS4_ECTX;
    int nd = n_draft < 0 ? 0 : n_draft;
    if (nd > ds4_session_draft_capacity(s) - 1) nd = ds4_session_draft_capacity(s) - 1;
    if (nd > room - 1) nd = room - 1;
    /* a stop token is never evaluated by plain decoding: drafts end before
     * it.  A sampled stop draft is still judged by the rule at its position
     * (row nd of the pass): dropping it, a choice that depends on the
     * draft's value, would bias that position's emitted token. */
    int judge_stop = 0;
    for (int i = 0; i < nd; i++)
        if (draft[i] == stop || draft[i] < 0 || draft[i] >= V) {
            judge_stop = rule && draft[i] == stop;
            nd = i;
            break;
        }
    int32_t pass[DS4_DRAFT_PASS_MAX];
    pass[0] = cur;
    if (nd) memcpy(pass + 1, draft, (size_t)nd * sizeof *pass);
    int rc = ds4_session_eval_draft(s, pass, 1 + nd);
    if (rc) return rc;
    int acc = 0, k = 0;
    for (int i = 0; i <= nd; i++) {
        const float *L = ds4_session_draft_logits(s, i);
        if (rule && (i < nd || judge_stop)) {
            int ok;
            out[k++] = ds4_spec_judge(smp, L, q + (size_t)i * V, draft[i], &ok);
            if (ok && i < nd) { acc++; continue; }
            break;   /* rejected, or the stop token: emitted, not evaluated */
        }
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

int ds4_spec_step(ds4_session *s, ds4_sampler *smp, int32_t cur, const int32_t *draft,
                  int n_draft, int32_t stop, int32_t *out, int *n_out, ds4_spec_stats *st) {
    return spec_step(s, smp, cur, draft, NULL, n_draft, stop, out, n_out, st);
}

int ds4_spec_step_mtp(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t stop,
                      int32_t *out, int *n_out, ds4_spec_stats *st) {
    *n_out = 0;
    if (!s->mtp) return DS4_EUNSUP;
    int32_t d[DS4_DRAFT_PASS_MAX];
    int k = ds4_mtp_draft_sampled(s, smp, cur, max_draft, d);
    if (k < 0) return k;
    return spec_step(s, smp, cur, d, ds4_mtp_draft_dist(s, 0), k, stop, out, n_out, st);
}
