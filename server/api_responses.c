/*
 * api_responses.c -- OpenAI /v1/responses response shapes: the response
 * object and its SSE stream (response.created, response.in_progress,
 * response.output_item.added / .done, response.content_part.added / .done,
 * response.reasoning_text.delta / .done, response.output_text.delta /
 * .done, response.function_call_arguments.delta / .done, and one of
 * response.completed / response.incomplete / response.failed), every event
 * with its sequence_number.
 *
 * Output items, in the order the model produces them: a `reasoning` item
 * (raw reasoning as reasoning_text content, as open-weight servers do), a
 * `message` item with one output_text part, then `function_call` items.
 * Responses are not stored (store: false).  Runs on the worker thread.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "job.h"

enum { IT_NONE, IT_REASONING, IT_MESSAGE, IT_CALL };

typedef struct {
    int seq;
    int started;
    int open;            /* IT_* of the open item */
    int out_index;       /* index of the open item; items so far = out_index + 1 */
    int n_items;
    int msg_seen;        /* a message item was opened before */
} resp_state;

static resp_state *state_of(job *j) {
    if (!j->api_state) j->api_state = calloc(1, sizeof(resp_state));
    return j->api_state;
}

static json_t *usage_json(const gen_result *r) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(r->prompt_tokens));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer(r->cached_tokens));
    json_object_set_new(u, "input_tokens_details", d);
    json_object_set_new(u, "output_tokens", json_integer(r->completion_tokens));
    d = json_object();
    json_object_set_new(d, "reasoning_tokens", json_integer(r->reasoning_tokens));
    json_object_set_new(u, "output_tokens_details", d);
    json_object_set_new(u, "total_tokens", json_integer(r->prompt_tokens + r->completion_tokens));
    return u;
}

static json_t *reasoning_item(job *j, int done) {
    json_t *it = json_object();
    json_object_set_new(it, "id", json_string(j->rs_item_id));
    json_object_set_new(it, "type", json_string("reasoning"));
    json_object_set_new(it, "summary", json_array());
    json_t *c = json_array();
    if (done) {
        json_t *p = json_object();
        json_object_set_new(p, "type", json_string("reasoning_text"));
        json_object_set_new(p, "text", jstr(j->res.reasoning.p, j->res.reasoning.n));
        json_array_append_new(c, p);
    }
    json_object_set_new(it, "content", c);
    json_object_set_new(it, "status", json_string(done ? "completed" : "in_progress"));
    return it;
}

static json_t *text_part(const char *s, size_t n) {
    json_t *p = json_object();
    json_object_set_new(p, "type", json_string("output_text"));
    json_object_set_new(p, "text", jstr(s, n));
    json_object_set_new(p, "annotations", json_array());
    json_object_set_new(p, "logprobs", json_array());
    return p;
}

static json_t *message_item(job *j, int done, const char *status) {
    json_t *it = json_object();
    json_object_set_new(it, "id", json_string(j->msg_item_id));
    json_object_set_new(it, "type", json_string("message"));
    json_object_set_new(it, "status", json_string(status));
    json_object_set_new(it, "role", json_string("assistant"));
    json_t *c = json_array();
    if (done) json_array_append_new(c, text_part(j->res.content.p, j->res.content.n));
    json_object_set_new(it, "content", c);
    return it;
}

static json_t *call_item(const gen_call *c, int done) {
    json_t *it = json_object();
    json_object_set_new(it, "id", json_string(c->item_id));
    json_object_set_new(it, "type", json_string("function_call"));
    json_object_set_new(it, "status", json_string(done ? "completed" : "in_progress"));
    json_object_set_new(it, "call_id", json_string(c->id));
    json_object_set_new(it, "name", jcstr(c->name));
    json_object_set_new(it, "arguments", done && c->args.p ? jstr(c->args.p, c->args.n) :
                        json_string(done ? "{}" : ""));
    return it;
}

static json_t *response_json(job *j, const char *status, int final) {
    request *rq = j->rq;
    gen_result *r = &j->res;
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->resp_id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(j->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "background", json_false());
    if (!strcmp(status, "failed")) {
        json_t *e = json_object();
        json_object_set_new(e, "code", json_string(r->err.status >= 500 ? "server_error" :
                                                   r->err.code ? r->err.code : "invalid_request"));
        json_object_set_new(e, "message", jcstr(r->err.message));
        json_object_set_new(o, "error", e);
    } else {
        json_object_set_new(o, "error", json_null());
    }
    if (!strcmp(status, "incomplete")) {
        json_t *d = json_object();
        json_object_set_new(d, "reason", json_string("max_output_tokens"));
        json_object_set_new(o, "incomplete_details", d);
    } else {
        json_object_set_new(o, "incomplete_details", json_null());
    }
    json_object_set_new(o, "instructions", jcstr(rq->instructions));
    json_object_set_new(o, "max_output_tokens", rq->max_tokens > 0 ? json_integer(rq->max_tokens) :
                        json_null());
    json_object_set_new(o, "model", jcstr(rq->model));
    json_t *out = json_array();
    if (final) {
        if (r->reasoning.n) json_array_append_new(out, reasoning_item(j, 1));
        if (r->content.n) json_array_append_new(out, message_item(j, 1, "completed"));
        for (int i = 0; i < r->n_calls; i++) json_array_append_new(out, call_item(&r->calls[i], 1));
    }
    json_object_set_new(o, "output", out);
    json_object_set_new(o, "parallel_tool_calls", json_boolean(rq->parallel_tool_calls));
    json_object_set_new(o, "previous_response_id", json_null());
    json_t *re = json_object();
    json_object_set_new(re, "effort", rq->ro.think == DS4_THINK_NONE ? json_string("none") :
                        rq->effort ? jcstr(rq->effort) : json_string("high"));
    json_object_set_new(re, "summary", json_null());
    json_object_set_new(o, "reasoning", re);
    json_object_set_new(o, "store", json_false());
    json_object_set_new(o, "temperature", json_real(rq->temperature_echo));
    json_t *tx = json_object(), *fmt = json_object();
    json_object_set_new(fmt, "type", json_string("text"));
    json_object_set_new(tx, "format", fmt);
    json_object_set_new(o, "text", tx);
    json_object_set_new(o, "tool_choice", rq->tool_choice ? json_incref(rq->tool_choice) :
                        json_string("auto"));
    json_object_set_new(o, "tools", rq->tools_orig ? json_incref(rq->tools_orig) : json_array());
    json_object_set_new(o, "top_p", json_real(rq->top_p_echo));
    json_object_set_new(o, "truncation", json_string("disabled"));
    json_object_set_new(o, "usage", final ? usage_json(r) : json_null());
    json_object_set_new(o, "user", json_null());
    json_object_set_new(o, "metadata", json_object());
    return o;
}

/* Emit one event: {"type": name, "sequence_number": n, ...fields}. */
static void ev(job *j, resp_state *st, const char *name, json_t *fields) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(name));
    json_object_set_new(o, "sequence_number", json_integer(st->seq++));
    json_object_update(o, fields);
    json_decref(fields);
    job_emit_event(j, name, o);
}

static json_t *at(job *j, resp_state *st, const char *item_id) {
    (void)j;
    json_t *f = json_object();
    json_object_set_new(f, "item_id", json_string(item_id));
    json_object_set_new(f, "output_index", json_integer(st->out_index));
    return f;
}

static void close_item(job *j, resp_state *st) {
    gen_result *r = &j->res;
    json_t *f;
    switch (st->open) {
    case IT_REASONING: {
        f = at(j, st, j->rs_item_id);
        json_object_set_new(f, "content_index", json_integer(0));
        json_object_set_new(f, "text", jstr(r->reasoning.p, r->reasoning.n));
        ev(j, st, "response.reasoning_text.done", f);
        f = at(j, st, j->rs_item_id);
        json_object_set_new(f, "content_index", json_integer(0));
        json_t *p = json_object();
        json_object_set_new(p, "type", json_string("reasoning_text"));
        json_object_set_new(p, "text", jstr(r->reasoning.p, r->reasoning.n));
        json_object_set_new(f, "part", p);
        ev(j, st, "response.content_part.done", f);
        f = json_object();
        json_object_set_new(f, "output_index", json_integer(st->out_index));
        json_object_set_new(f, "item", reasoning_item(j, 1));
        ev(j, st, "response.output_item.done", f);
        break;
    }
    case IT_MESSAGE:
        f = at(j, st, j->msg_item_id);
        json_object_set_new(f, "content_index", json_integer(0));
        json_object_set_new(f, "text", jstr(r->content.p, r->content.n));
        json_object_set_new(f, "logprobs", json_array());
        ev(j, st, "response.output_text.done", f);
        f = at(j, st, j->msg_item_id);
        json_object_set_new(f, "content_index", json_integer(0));
        json_object_set_new(f, "part", text_part(r->content.p, r->content.n));
        ev(j, st, "response.content_part.done", f);
        f = json_object();
        json_object_set_new(f, "output_index", json_integer(st->out_index));
        json_object_set_new(f, "item", message_item(j, 1, "completed"));
        ev(j, st, "response.output_item.done", f);
        break;
    default:
        break;
    }
    st->open = IT_NONE;
}

static void open_item(job *j, resp_state *st, int kind, json_t *item) {
    close_item(j, st);
    st->out_index = st->n_items++;
    st->open = kind;
    json_t *f = json_object();
    json_object_set_new(f, "output_index", json_integer(st->out_index));
    json_object_set_new(f, "item", item);
    ev(j, st, "response.output_item.added", f);
}

/* The last event: the body, or the end of the stream. */
static void responses_finish(job *j, resp_state *st) {
    gen_result *r = &j->res;
    json_t *f;
    if (r->finish == FIN_CANCEL) {
        if (j->rq->stream) job_finish_stream(j); else job_set_body(j, 499, NULL);
        return;
    }
    if (!j->rq->stream) {
        if (r->finish == FIN_ERROR) {
            job_set_body(j, r->err.status, api_error_body(0, &r->err));
            return;
        }
        /* a malformed tool call: the text is in the message item,
         * the response failed with the parser's reason */
        json_t *o = response_json(j, r->finish == FIN_LENGTH ? "incomplete" :
                                  r->finish == FIN_TOOL_ERROR ? "failed" : "completed", 1);
        job_set_body(j, 200, jdump(o));
        json_decref(o);
        return;
    }
    if (r->finish == FIN_ERROR) {
        f = json_object();
        json_object_set_new(f, "response", response_json(j, "failed", 0));
        ev(j, st, "response.failed", f);
        job_finish_stream(j);
        return;
    }
    close_item(j, st);
    const char *status = r->finish == FIN_LENGTH ? "incomplete" :
                         r->finish == FIN_TOOL_ERROR ? "failed" : "completed";
    f = json_object();
    json_object_set_new(f, "response", response_json(j, status, 1));
    ev(j, st, r->finish == FIN_LENGTH ? "response.incomplete" :
              r->finish == FIN_TOOL_ERROR ? "response.failed" : "response.completed", f);
    job_finish_stream(j);
    return;
}

void responses_event(job *j, ev_kind k, int index, const char *s, size_t n) {
    resp_state *st = state_of(j);
    gen_result *r = &j->res;
    json_t *f;
    if (k == EV_FINISH) { responses_finish(j, st); return; }
    if (!j->rq->stream) return;
    switch (k) {
    case EV_START:
        st->started = 1;
        f = json_object();
        json_object_set_new(f, "response", response_json(j, "in_progress", 0));
        ev(j, st, "response.created", f);
        f = json_object();
        json_object_set_new(f, "response", response_json(j, "in_progress", 0));
        ev(j, st, "response.in_progress", f);
        break;
    case EV_REASONING:
        if (st->open != IT_REASONING) {
            open_item(j, st, IT_REASONING, reasoning_item(j, 0));
            f = at(j, st, j->rs_item_id);
            json_object_set_new(f, "content_index", json_integer(0));
            json_t *p = json_object();
            json_object_set_new(p, "type", json_string("reasoning_text"));
            json_object_set_new(p, "text", json_string(""));
            json_object_set_new(f, "part", p);
            ev(j, st, "response.content_part.added", f);
        }
        f = at(j, st, j->rs_item_id);
        json_object_set_new(f, "content_index", json_integer(0));
        json_object_set_new(f, "delta", jstr(s, n));
        ev(j, st, "response.reasoning_text.delta", f);
        break;
    case EV_TEXT:
        if (st->open != IT_MESSAGE) {
            /* text after a call (a malformed one's text) is a new item */
            if (st->msg_seen) util_random_id(j->msg_item_id, sizeof j->msg_item_id, "msg_", 24);
            st->msg_seen = 1;
            open_item(j, st, IT_MESSAGE, message_item(j, 0, "in_progress"));
            f = at(j, st, j->msg_item_id);
            json_object_set_new(f, "content_index", json_integer(0));
            json_object_set_new(f, "part", text_part("", 0));
            ev(j, st, "response.content_part.added", f);
        }
        f = at(j, st, j->msg_item_id);
        json_object_set_new(f, "content_index", json_integer(0));
        json_object_set_new(f, "delta", jstr(s, n));
        json_object_set_new(f, "logprobs", json_array());
        ev(j, st, "response.output_text.delta", f);
        break;
    case EV_TOOL_BEGIN:
        open_item(j, st, IT_CALL, call_item(&r->calls[index], 0));
        break;
    case EV_TOOL_ARGS:
        f = at(j, st, r->calls[index].item_id);
        json_object_set_new(f, "delta", jstr(s, n));
        ev(j, st, "response.function_call_arguments.delta", f);
        break;
    case EV_TOOL_END:
        f = at(j, st, r->calls[index].item_id);
        json_object_set_new(f, "name", jcstr(r->calls[index].name));
        json_object_set_new(f, "arguments", jstr(r->calls[index].args.p, r->calls[index].args.n));
        ev(j, st, "response.function_call_arguments.done", f);
        f = json_object();
        json_object_set_new(f, "output_index", json_integer(st->out_index));
        json_object_set_new(f, "item", call_item(&r->calls[index], 1));
        ev(j, st, "response.output_item.done", f);
        st->open = IT_NONE;
        break;
    default:
        break;
    }
}
