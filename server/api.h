/*
 * api.h -- the response shapers: one per API family, each turning the
 * generation events of a job (server.h: ev_kind, gen_result) into that
 * API's body or SSE stream through the job's channel (job.h).
 *
 * Shapers run on the worker thread, see only the job (its request and
 * result), and never reach into the generation loop; the generation loop
 * reaches them only through j->on_event.
 */
#ifndef DS4_SERVER_API_H
#define DS4_SERVER_API_H

#include "server.h"   /* job, ev_kind, job_event_fn (the channel is job.h) */

/* The shaper of an API family (api.c). */
job_event_fn api_shaper(api_kind api);

void openai_chat_event(job *j, ev_kind k, int index, const char *s, size_t n);
void openai_completions_event(job *j, ev_kind k, int index, const char *s, size_t n);
void responses_event(job *j, ev_kind k, int index, const char *s, size_t n);
void anthropic_event(job *j, ev_kind k, int index, const char *s, size_t n);

#endif
