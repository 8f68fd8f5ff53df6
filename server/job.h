/*
 * job.h -- one queued generation and its output channel (job.c).
 *
 * Owns: the job's lifetime (references held by the connection and the
 * worker), the bytes produced for the connection thread (under job->mu),
 * and the dispatch of generation events to the job's response shaper.
 * Must not: know how a response is shaped (api_*.c, reached through
 * j->on_event) or how it is generated (gen.c, worker.c).
 */
#ifndef DS4_SERVER_JOB_H
#define DS4_SERVER_JOB_H

#include "server.h"

/* A job for a parsed request (owned from here on); its shaper is the one
 * of rq->api (api.h). */
job *job_new(request *rq);
void job_ref(job *j);
void job_unref(job *j);

/* Worker side: a generation event, turned into bytes by the shaper. */
void job_event(job *j, ev_kind k, int index, const char *s, size_t n);
/* End a job with an error before it generated anything (queue flushed at
 * shutdown, a prompt that cannot be prepared). */
void job_fail(job *j, int status, const char *type, const char *msg);

/* Shaper side: append SSE bytes and wake the connection thread. */
void job_emit(job *j, const char *s, size_t n);
void job_emit_event(job *j, const char *event, json_t *data);  /* steals data */
void job_emit_data(job *j, json_t *data);                      /* "data: " only */
/* Non-stream: set the final body (steals `body`) and mark done. */
void job_set_body(job *j, int status, char *body);
void job_finish_stream(job *j);

#endif
