/*
 * ds4_spec.h -- speculative decoding (docs/SPEC.md, docs/MTP.md): prompt-lookup and
 * MTP drafts, the verification step and the speculative-sampling rule.
 * Implemented in src/engine/spec.c and src/engine/mtp.c.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_SPEC_H
#define DS4_API_SPEC_H

#include "ds4_session.h"
#include "ds4_sample.h"
#include "ds4_text.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Speculative decoding (docs/SPEC.md)                                       */
/* ------------------------------------------------------------------------ */

/* Prompt-lookup drafts: the longest suffix n-gram (at most
 * DS4_LOOKUP_NGRAM_MAX tokens) of hist[0..n) that occurred earlier in it;
 * writes up to max_draft tokens that followed its most recent earlier
 * occurrence to out.  Returns the count (0 = no proposal). */
#define DS4_LOOKUP_NGRAM_MAX 8
int ds4_lookup_draft(const int32_t *hist, int n, int max_draft, int32_t *out);
/* The same search for the suffix of hist[0..n) in another token sequence
 * src[0..ns) (src == NULL: in hist itself, as ds4_lookup_draft); *match
 * (may be NULL) gets the length of the matched suffix, 0 when none.  A
 * front end with a second source (ds4-agent: file contents without the
 * read tool's line numbers) compares the two matches' lengths. */
int ds4_lookup_draft_in(const int32_t *hist, int n, const int32_t *src, int ns, int max_draft, int32_t *out,
                        int *match);
/* Such a second source from tool output that numbers its lines (cat -n,
 * coding agents' read tools: optional spaces, the number, then a tab or
 * U+2192): appends the numbered lines of text[0..len) to out without their
 * numbers, one per line ('\n'), and returns how many (0: nothing
 * appended).  A model that writes such a file back drops the numbers. */
int ds4_lookup_unnumber(const char *text, size_t len, ds4_buf *out);
/* The second source itself: the numbered lines of texts[0..n) (oldest
 * first, lens[i] bytes; NULL entries skipped) without their numbers, from
 * the newest text back until max_bytes of such lines are taken, tokenized
 * in plain mode oldest first into out (so the newest is searched first).
 * DS4_OK, or DS4_ENOMEM. */
int ds4_lookup_corpus(const ds4_tokenizer *tok, const char *const *texts, const size_t *lens, int n,
                      size_t max_bytes, ds4_tokens *out);

typedef struct {
    uint64_t passes;          /* verification passes */
    uint64_t drafted;         /* draft tokens evaluated */
    uint64_t accepted;        /* draft tokens kept */
    uint64_t emitted;         /* tokens output (accepted + one per pass) */
} ds4_spec_stats;

/* One speculative step.  `cur` is the token chosen last (not evaluated
 * yet); draft[0..n_draft) the guessed continuation after it.  Evaluates
 * cur + drafts in one pass, draws the target's choice at each position
 * (smp, or greedy when smp is NULL), keeps drafts while they agree and
 * rolls back the rest.  out (room for n_draft + 1) receives the accepted
 * drafts and then the target's own next token, which is the new `cur`
 * (not evaluated).  Drafts are cut before a `stop` token and to the
 * context and pass capacity.  The drafts are taken as deterministic (a
 * point-mass q: "draw from p and compare" is the speculative-sampling
 * rule then), so output equals plain decoding's token for token, greedy
 * or seeded. */
int ds4_spec_step(ds4_session *s, ds4_sampler *smp, int32_t cur, const int32_t *draft,
                  int n_draft, int32_t stop, int32_t *out, int *n_out, ds4_spec_stats *st);

/* Draft tokens per pass when --mtp is given without --mtp-draft: one
 * draft costs one MTP step (a layer and the output matrix), measured in
 * docs/cli.md "MTP drafts". */
#define DS4_MTP_DRAFT_DEFAULT 1
#define DS4_STR_(x) #x
#define DS4_XSTR(x) DS4_STR_(x)
/* MTP drafts (docs/MTP.md; the model must have an MTP block,
 * ds4_model_has_mtp).  `cur` is the token chosen last, not evaluated yet;
 * writes up to max_draft (at most DS4_DRAFT_PASS_MAX - 1, and what the
 * context leaves) greedy MTP guesses of the tokens after it to out and
 * returns their count (DS4_EUNSUP without an MTP block).  The session's
 * own state and logits are untouched: feed cur + drafts to ds4_spec_step,
 * which keeps output (greedy or sampled) exactly that of plain decoding.
 * The MTP state follows the session by itself (rollbacks, rewinds). */
int ds4_mtp_draft(ds4_session *s, int32_t cur, int max_draft, int32_t *out);
/* MTP drafting and verification in one step (what `ds4 --mtp` runs).
 * Greedy (smp NULL or temperature 0): ds4_mtp_draft + ds4_spec_step,
 * token for token plain greedy decoding.  Sampling: each of the up to
 * max_draft drafts is drawn from q_i = the block's distribution after the
 * sampler's transforms, and position i keeps draft d_i with probability
 * min(1, p_i(d_i)/q_i(d_i)) (p_i = the target's distribution after the
 * same transforms), else emits a draw from norm(max(0, p_i - q_i)) and
 * ends; when every draft is kept, a bonus token is drawn from p.  Each
 * emitted token is distributed exactly as plain sampling's; a seeded run
 * is reproducible but not token-identical to plain seeded sampling (the
 * stream's draws differ: docs/SPEC.md).  out: room for max_draft + 1.
 * DS4_EUNSUP without an MTP block. */
int ds4_spec_step_mtp(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t stop,
                      int32_t *out, int *n_out, ds4_spec_stats *st);
/* The pieces of ds4_spec_step_mtp, for a front end that makes its own
 * choice at each position (ds4-server).  ds4_mtp_draft_sampled: drafts
 * drawn from the block's distributions after smp's transforms (smp NULL
 * or greedy: ds4_mtp_draft).  ds4_mtp_draft_dist: the q_i (n_vocab
 * floats) draft i was drawn from, until the next draft call; NULL when
 * the last chain was greedy or i is past it.  ds4_spec_judge: the token
 * at a position whose draft was drawn from q: the draft with probability
 * min(1, p(draft)/q(draft)), p = logits through smp's transforms, else a
 * draw from norm(max(0, p - q)); *accepted (may be NULL) says which.  One
 * uniform of smp's stream, a second one on a rejection. */
int ds4_mtp_draft_sampled(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t *out);
const float *ds4_mtp_draft_dist(const ds4_session *s, int i);
int32_t ds4_spec_judge(ds4_sampler *smp, const float *logits, const float *q, int32_t draft,
                       int *accepted);
/* The logits of the last MTP draft step (tests), NULL before any. */
const float *ds4_mtp_logits(const ds4_session *s);

/* The speculative-sampling rule for a draft drawn from a distribution q
 * (target p; u_* uniform in [0,1)): returns the draft when accepted, else
 * a draw from max(0, p - q) normalized, so the result is distributed as p. */
int32_t ds4_spec_resolve(const float *p, const float *q, int n, int32_t draft,
                         double u_accept, double u_resample);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_SPEC_H */
