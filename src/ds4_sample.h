/*
 * ds4_sample.h -- the sampler: greedy, temperature, top-k, top-p, min-p, seeded
 * streams.  Implemented in src/engine/sampler.c.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_SAMPLE_H
#define DS4_API_SAMPLE_H

#include <stdint.h>

#include "ds4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Sampler                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    float temperature;        /* 0 = greedy; default 1 */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* default 0.05 */
    uint64_t seed;
} ds4_sampler_params;

typedef struct ds4_sampler ds4_sampler;

void ds4_sampler_params_default(ds4_sampler_params *p);
ds4_sampler *ds4_sampler_new(int n_vocab, const ds4_sampler_params *p);
void ds4_sampler_free(ds4_sampler *s);
void ds4_sampler_reseed(ds4_sampler *s, uint64_t seed);
/* New parameters for the next draws (and a reseed with p->seed). */
void ds4_sampler_set_params(ds4_sampler *s, const ds4_sampler_params *p);
int32_t ds4_sample(ds4_sampler *s, const float *logits);
int32_t ds4_sample_greedy(const float *logits, int n_vocab);
/* 1 when the sampler takes the argmax (temperature <= 0). */
int ds4_sampler_is_greedy(const ds4_sampler *s);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_SAMPLE_H */
