/*
 * ds4_logprob.h -- log-probabilities of next-token distributions, shared by the
 * front ends (ds4 --dump-logprobs, ds4-eval --nll, the server's OpenAI
 * `logprobs`), so every tool reports the same numbers for the same logits.
 *
 * Owns: the log-softmax (temperature 1, full vocabulary, accumulated in
 * double), top-K selection, and the JSON shape of one step of the
 * --dump-logprobs contract.  Must not touch the engine: it works on a
 * logits row and the public tokenizer API only.
 */
#ifndef DS4_LOGPROB_H
#define DS4_LOGPROB_H

#include <stdint.h>
#include "ds4.h"

typedef struct {
    int32_t id;
    double logprob;     /* natural log of the softmax probability */
} ds4_lp_entry;

/* log(sum(exp(logits))) over the row, in double. */
double ds4_logsumexp(const float *logits, int n_vocab);

/* The k most likely tokens of the row (k <= n_vocab), sorted by logprob
 * descending (equal logits: lower id first), written to top[0..k).  Returns
 * the log-sum-exp of the row, so logprob(id) = logits[id] - lse. */
double ds4_logprob_top(const float *logits, int n_vocab, int k, ds4_lp_entry *top);

/* Append one step of the --dump-logprobs contract:
 *   {"id":ID,"bytes":[...],"logprob":LP,"top":[{"id":..,"bytes":[..],"logprob":..},..]}
 * `id` < 0 omits "id", "bytes" and "logprob" (the last prompt position). */
int ds4_logprob_step_json(ds4_buf *out, const ds4_tokenizer *tok, int32_t id,
                          double logprob, const ds4_lp_entry *top, int k);

/* Append a token's bytes as a JSON array of ints: [72,105]. */
int ds4_token_bytes_json(ds4_buf *out, const ds4_tokenizer *tok, int32_t id);

#endif
