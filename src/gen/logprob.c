/*
 * logprob.c -- see logprob.h.  Pure functions of a logits row; no engine
 * state, no allocation beyond the caller's output buffer.
 */
#include "ds4_logprob.h"

#include <math.h>

double ds4_logsumexp(const float *logits, int n_vocab) {
    /* max first: exp never overflows and the sum is dominated by terms of
     * order 1, which double accumulates exactly enough for any vocabulary */
    float mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    if (!isfinite(mx)) return mx;
    double s = 0;
    for (int i = 0; i < n_vocab; i++) s += exp((double)logits[i] - (double)mx);
    return (double)mx + log(s);
}

/* a before b in the output order: larger logit, then smaller id */
static int better(const float *lg, int32_t a, int32_t b) {
    return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
}

double ds4_logprob_top(const float *logits, int n_vocab, int k, ds4_lp_entry *top) {
    if (k > n_vocab) k = n_vocab;
    int n = 0;
    /* insertion into a sorted list of k: the scan costs O(V) compares
     * once the list is full, since almost every token is below its tail */
    for (int32_t i = 0; i < n_vocab && k > 0; i++) {
        if (n == k && !better(logits, i, top[n - 1].id)) continue;
        int j = n < k ? n++ : n - 1;
        while (j > 0 && better(logits, i, top[j - 1].id)) { top[j] = top[j - 1]; j--; }
        top[j].id = i;
    }
    double lse = ds4_logsumexp(logits, n_vocab);
    for (int j = 0; j < n; j++) top[j].logprob = (double)logits[top[j].id] - lse;
    return lse;
}

int ds4_token_bytes_json(ds4_buf *out, const ds4_tokenizer *tok, int32_t id) {
    size_t n = 0;
    const char *p = ds4_token_bytes(tok, id, &n);
    int rc = ds4_buf_puts(out, "[");
    for (size_t i = 0; i < n && !rc; i++)
        rc = ds4_buf_printf(out, i ? ",%u" : "%u", (unsigned)(unsigned char)p[i]);
    return rc ? rc : ds4_buf_puts(out, "]");
}

static int put_lp(ds4_buf *out, double lp) {
    /* -inf (a logit of -inf) has no JSON spelling: the most negative float */
    if (!isfinite(lp)) lp = -3.4028234663852886e38;
    return ds4_buf_printf(out, "%.9g", lp);
}

int ds4_logprob_step_json(ds4_buf *out, const ds4_tokenizer *tok, int32_t id,
                          double logprob, const ds4_lp_entry *top, int k) {
    int rc = ds4_buf_puts(out, "{");
    if (id >= 0) {
        rc |= ds4_buf_printf(out, "\"id\":%d,\"bytes\":", id);
        rc |= ds4_token_bytes_json(out, tok, id);
        rc |= ds4_buf_puts(out, ",\"logprob\":");
        rc |= put_lp(out, logprob);
        rc |= ds4_buf_puts(out, ",");
    }
    rc |= ds4_buf_puts(out, "\"top\":[");
    for (int j = 0; j < k; j++) {
        rc |= ds4_buf_printf(out, "%s{\"id\":%d,\"bytes\":", j ? "," : "", top[j].id);
        rc |= ds4_token_bytes_json(out, tok, top[j].id);
        rc |= ds4_buf_puts(out, ",\"logprob\":");
        rc |= put_lp(out, top[j].logprob);
        rc |= ds4_buf_puts(out, "}");
    }
    rc |= ds4_buf_puts(out, "]}");
    return rc ? DS4_ENOMEM : DS4_OK;
}
