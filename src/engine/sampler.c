/*
 * sampler.c -- next-token selection: greedy, temperature, top-k, top-p and
 * min-p, seeded and reproducible.
 *
 * Owns: the candidate filter and the random stream.  Filters apply in this
 * order on the temperature-scaled distribution: min-p (relative to the most
 * likely token), top-k, top-p; then one draw.  The same filter also gives
 * the whole distribution a draw would come from (ds4_sampler_dist), which
 * speculative sampling (spec.c, mtp.c) needs for the target p and the MTP
 * draft q, and single uniforms from the same stream for its accept and
 * residual draws.  All buffers are allocated with the sampler: nothing is
 * allocated per token.
 * Must not: look at text or token meaning (stop sequences, DSML syntax are
 * the caller's business).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

struct ds4_sampler {
    ds4_sampler_params p;
    int n_vocab;
    uint64_t s[4];           /* xoshiro256** state */
    int32_t *cand;
    float *prob;
    float *dist;             /* [n_vocab] ds4_sampler_target's result */
};

void ds4_sampler_params_default(ds4_sampler_params *p) {
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.05f;
    p->seed = 0;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(ds4_sampler *s) {
    uint64_t r = rotl(s->s[1] * 5, 7) * 9, t = s->s[1] << 17;
    s->s[2] ^= s->s[0]; s->s[3] ^= s->s[1]; s->s[1] ^= s->s[2]; s->s[0] ^= s->s[3];
    s->s[2] ^= t; s->s[3] = rotl(s->s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 random bits */
static double next_unit(ds4_sampler *s) { return (next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

void ds4_sampler_reseed(ds4_sampler *s, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
}

void ds4_sampler_set_params(ds4_sampler *s, const ds4_sampler_params *p) {
    s->p = *p;
    ds4_sampler_reseed(s, p->seed);
}

ds4_sampler *ds4_sampler_new(int n_vocab, const ds4_sampler_params *p) {
    ds4_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (p) s->p = *p; else ds4_sampler_params_default(&s->p);
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->dist = malloc((size_t)n_vocab * sizeof *s->dist);
    if (!s->cand || !s->prob || !s->dist) { ds4_sampler_free(s); return NULL; }
    ds4_sampler_reseed(s, s->p.seed);
    return s;
}

void ds4_sampler_free(ds4_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->prob);
    free(s->dist);
    free(s);
}

int32_t ds4_sample_greedy(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;   /* NaN never wins */
    return best;
}

/* Sort candidates by descending logit (ties: lower id first). */
static int cmp_desc(const void *a, const void *b, void *lg) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    float lx = ((const float *)lg)[x], ly = ((const float *)lg)[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

/* Move the k largest (by logit) of cand[0..n) to the front, unordered. */
static void partial_top(int32_t *cand, int n, int k, const float *lg) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        float pv = lg[cand[(lo + hi) / 2]];
        int i = lo, j = hi;
        while (i <= j) {
            while (lg[cand[i]] > pv) i++;
            while (lg[cand[j]] < pv) j--;
            if (i <= j) { int32_t t = cand[i]; cand[i] = cand[j]; cand[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* The candidates a draw chooses from: cand[0..n) with unnormalized
 * probabilities prob[0..n) summing to *sum (in that order: a draw walks
 * them so).  Returns 0 when the choice is the argmax without a draw
 * (greedy, non-finite logits, nothing left), *best = the argmax. */
static int filter(ds4_sampler *s, const float *logits, double *sum, int32_t *best) {
    const ds4_sampler_params *p = &s->p;
    const int V = s->n_vocab;
    *best = ds4_sample_greedy(logits, V);
    if (p->temperature <= 0.0f) return 0;
    float lmax = logits[*best];
    if (!isfinite(lmax)) return 0;
    const float invT = 1.0f / p->temperature;
    /* min-p: p_i / p_max = exp((l_i - l_max) / T) >= min_p */
    float floor_l = -INFINITY;
    if (p->min_p > 0.0f && p->min_p <= 1.0f) floor_l = lmax + p->temperature * logf(p->min_p);
    int n = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] >= floor_l && logits[i] == logits[i]) s->cand[n++] = i;
    if (n == 0) return 0;
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        partial_top(s->cand, n, p->top_k, logits);
        n = p->top_k;
    }
    if (p->top_p > 0.0f && p->top_p < 1.0f && n > 1) {
        qsort_r(s->cand, (size_t)n, sizeof *s->cand, cmp_desc, (void *)logits);
        sorted = 1;
    }
    double z = 0;
    for (int i = 0; i < n; i++) {
        double e = exp((double)(logits[s->cand[i]] - lmax) * invT);
        s->prob[i] = (float)e;
        z += e;
    }
    if (sorted) {
        double acc = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += s->prob[i];
            if (acc >= p->top_p * z) { keep = i + 1; break; }
        }
        n = keep;
        z = 0;
        for (int i = 0; i < n; i++) z += s->prob[i];
    }
    *sum = z;
    return n;
}

int32_t ds4_sample(ds4_sampler *s, const float *logits) {
    double sum = 0;
    int32_t best;
    int n = filter(s, logits, &sum, &best);
    if (n == 0) return best;
    double r = next_unit(s) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->prob[i];
        if (r < acc) return s->cand[i];
    }
    return s->cand[n - 1];
}

int ds4_sampler_is_greedy(const ds4_sampler *s) { return s->p.temperature <= 0.0f; }

int ds4_sampler_n_vocab(const ds4_sampler *s) { return s->n_vocab; }

double ds4_sampler_unit(ds4_sampler *s) { return next_unit(s); }

void ds4_sampler_dist(ds4_sampler *s, const float *logits, float *dist) {
    double sum = 0;
    int32_t best;
    int n = filter(s, logits, &sum, &best);
    memset(dist, 0, (size_t)s->n_vocab * sizeof *dist);
    if (n == 0 || !(sum > 0)) {
        dist[best] = 1.0f;
        return;
    }
    for (int i = 0; i < n; i++) dist[s->cand[i]] = (float)(s->prob[i] / sum);
}

const float *ds4_sampler_target(ds4_sampler *s, const float *logits) {
    ds4_sampler_dist(s, logits, s->dist);
    return s->dist;
}

/* Walks the vocabulary in id order, so the token drawn depends only on
 * dist and the uniform, not on how dist was built. */
int32_t ds4_sampler_draw(ds4_sampler *s, const float *dist) {
    const int V = s->n_vocab;
    double z = 0;
    int last = 0;
    for (int i = 0; i < V; i++)
        if (dist[i] > 0.0f) { z += dist[i]; last = i; }
    double r = next_unit(s) * z, acc = 0;
    for (int i = 0; i < V; i++) {
        if (!(dist[i] > 0.0f)) continue;
        acc += dist[i];
        if (r < acc) return i;
    }
    return last;   /* rounding at the top end */
}
