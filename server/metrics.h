/*
 * metrics.h -- counters of ds4-server and their Prometheus text rendering
 * (metrics.c).  Updated from any thread; every update takes one mutex (a few
 * per request, one per job for the token counts: never per token).
 */
#ifndef DS4_SERVER_METRICS_H
#define DS4_SERVER_METRICS_H

#include "server.h"

typedef struct metrics metrics;

metrics *metrics_new(void);
void metrics_free(metrics *m);

void metrics_request(metrics *m, endpoint ep, int status);
/* Connections closed by the header deadline (http.c). */
void metrics_header_timeouts(metrics *m, int n);
void metrics_queue(metrics *m, int depth);          /* after every change */
void metrics_busy(metrics *m, int busy);
/* Sessions: configured (--parallel), holding state, serving a request. */
void metrics_sessions(metrics *m, int total, int live, int busy);
/* One batched step of `items` sessions evaluating `tokens` tokens. */
void metrics_step(metrics *m, int items, int tokens);
/* One finished job. */
typedef struct {
    int prompt_tokens, cached_tokens, evaluated_tokens, generated_tokens;
    int disk_tokens;           /* of cached_tokens: restored from the disk KV cache */
    int disk_retokenized;      /* the disk state's tokens split the text differently */
    double prefill_s, decode_s;
    int reuse_hit, text_reuse, retokenized;
    int tool_calls;
    int cancelled;             /* CANCEL_* */
    int session_tokens;
    ds4_spec_stats spec;       /* speculative decoding (--lookup) */
} metrics_job;
void metrics_job_done(metrics *m, const metrics_job *j);
void metrics_tool_replay(metrics *m, int exact, int canonical);
/* A prompt rendered and tokenized (conv_render: once per request). */
void metrics_render_prompt(metrics *m);
/* The disk KV cache's counters (a copy: the store belongs to the worker)
 * and the saves by reason (indexed by ds4_kv_reason). */
void metrics_kv(metrics *m, const ds4_kvstore_stats *st, const uint64_t saves_by_reason[6]);
/* Render the Prometheus text exposition (malloc'd). */
/* NULL when out of memory. */
char *metrics_render(metrics *m);

#endif
