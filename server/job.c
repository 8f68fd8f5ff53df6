/*
 * job.c -- see job.h.
 *
 * The channel: the worker (through the shaper) appends SSE bytes or sets
 * the final body under job->mu and broadcasts job->cv; the connection
 * thread waits on it and sends.  A cancelled stream stops growing (nobody
 * reads it).  The last reference frees the request and the result.
 */
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "api.h"

job *job_new(request *rq) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->rq = rq;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    atomic_init(&j->cancel, CANCEL_NONE);
    j->res.stop_index = -1;
    j->created = util_unix_time();
    j->on_event = api_shaper(rq->api);
    const char *pfx = rq->api == API_MESSAGES ? "msg_" : rq->api == API_RESPONSES ? "resp_" :
                      rq->api == API_COMPLETIONS ? "cmpl-" : "chatcmpl-";
    util_random_id(j->resp_id, sizeof j->resp_id, pfx, 24);
    util_random_id(j->msg_item_id, sizeof j->msg_item_id, "msg_", 24);
    util_random_id(j->rs_item_id, sizeof j->rs_item_id, "rs_", 24);
    return j;
}

void job_ref(job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void job_unref(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    request_free(j->rq);
    ds4_buf_free(&j->out);
    ds4_buf_free(&j->body);
    ds4_buf_free(&j->res.reasoning);
    ds4_buf_free(&j->res.content);
    for (int i = 0; i < j->res.n_calls; i++) {
        free(j->res.calls[i].name);
        ds4_buf_free(&j->res.calls[i].args);
    }
    free(j->res.calls);
    json_decref(j->res.lp);
    json_decref(j->res.trace_ev);
    free(j->api_state);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_event(job *j, ev_kind k, int index, const char *s, size_t n) {
    j->on_event(j, k, index, s, n);
}

void job_fail(job *j, int status, const char *type, const char *msg) {
    api_err_set(&j->res.err, status, type, NULL, NULL, "%s", msg);
    j->res.finish = FIN_ERROR;
    job_event(j, EV_FINISH, 0, NULL, 0);
    job_finish_stream(j);
}

void job_emit(job *j, const char *s, size_t n) {
    pthread_mutex_lock(&j->mu);
    /* nobody reads a cancelled stream: do not let it grow */
    if (atomic_load(&j->cancel) != CANCEL_CLIENT) ds4_buf_append(&j->out, s, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void job_emit_event(job *j, const char *event, json_t *data) {
    char *s = jdump(data);
    json_decref(data);
    ds4_buf b = { 0 };
    if (event) ds4_buf_printf(&b, "event: %s\n", event);
    ds4_buf_puts(&b, "data: ");
    ds4_buf_puts(&b, s);
    ds4_buf_puts(&b, "\n\n");
    free(s);
    job_emit(j, b.p, b.n);
    ds4_buf_free(&b);
}

void job_emit_data(job *j, json_t *data) { job_emit_event(j, NULL, data); }

void job_set_body(job *j, int status, char *body) {
    pthread_mutex_lock(&j->mu);
    j->status = status;
    j->body.n = 0;
    if (body) ds4_buf_puts(&j->body, body);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(body);
}

void job_finish_stream(job *j) {
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}
