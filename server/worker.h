/*
 * worker.h -- the job queue and the single inference thread (worker.c).
 */
#ifndef DS4_SERVER_WORKER_H
#define DS4_SERVER_WORKER_H

#include "server.h"
#include "job.h"

/* Create the session and start the thread. */
worker *worker_start(server_ctx *srv, char **err);
/* Queue a job (takes a reference), ordered by j->arrived (set it to the
 * request's arrival time; 0 = now).  -1 when the queue is full, -2 when
 * the server is stopping. */
int worker_submit(worker *w, job *j);
/* Stop: cancel the running job, fail the queued ones (503), join. */
void worker_stop(worker *w);
void worker_free(worker *w);
int worker_queue_depth(worker *w);

#endif
