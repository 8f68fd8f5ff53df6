/*
 * api_openai.c -- OpenAI /v1/chat/completions and /v1/completions response
 * shapes: the chat.completion / text_completion bodies and their
 * chat.completion.chunk / text_completion SSE streams (usage chunk with
 * stream_options.include_usage, then "data: [DONE]").
 *
 * Reasoning is DeepSeek's `reasoning_content` (message field and delta
 * field).  Tool calls stream as tool_calls[].function.arguments deltas from
 * the moment the DSML invoke header names the tool.  Runs on the worker
 * thread (see server.h).
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "job.h"

typedef struct {
    int started;
} chat_state;

static chat_state *state_of(job *j) {
    if (!j->api_state) j->api_state = calloc(1, sizeof(chat_state));
    return j->api_state;
}

static const char *finish_name(finish_kind f) {
    switch (f) {
    case FIN_LENGTH: return "length";
    case FIN_TOOLS: return "tool_calls";
    case FIN_TOOL_ERROR: return "error";
    default: return "stop";
    }
}

static json_t *usage_json(const gen_result *r) {
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(r->prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(r->completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer(r->prompt_tokens + r->completion_tokens));
    json_t *pd = json_object();
    json_object_set_new(pd, "cached_tokens", json_integer(r->cached_tokens));
    json_object_set_new(u, "prompt_tokens_details", pd);
    json_t *cd = json_object();
    json_object_set_new(cd, "reasoning_tokens", json_integer(r->reasoning_tokens));
    json_object_set_new(u, "completion_tokens_details", cd);
    return u;
}

static json_t *envelope(job *j, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->resp_id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", jcstr(j->rq->model));
    json_object_set_new(o, "system_fingerprint", json_string("ds4-" DS4_VERSION));
    return o;
}

/* The logprob entries not streamed yet (gen_result.lp), NULL when none. */
static json_t *lp_take(job *j) {
    gen_result *r = &j->res;
    if (!j->rq->logprobs || !r->lp || r->lp_sent >= json_array_size(r->lp)) return NULL;
    json_t *a = json_array();
    for (; r->lp_sent < json_array_size(r->lp); r->lp_sent++)
        json_array_append(a, json_array_get(r->lp, r->lp_sent));
    return a;
}

/* chat shape: {"content": [entries]} */
static json_t *chat_logprobs(json_t *entries) {
    if (!entries) return json_null();
    json_t *o = json_object();
    json_object_set_new(o, "content", entries);
    return o;
}

static void emit_chunk(job *j, json_t *delta, const char *finish) {
    json_t *o = envelope(j, "chat.completion.chunk");
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", chat_logprobs(lp_take(j)));
    json_object_set_new(ch, "finish_reason", jcstr(finish));
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    if (j->rq->include_usage) json_object_set_new(o, "usage", json_null());
    job_emit_data(j, o);
}

/* Errors: a body with the status, or in a stream an error object in a data
 * line (what the SDKs raise as APIError), then the end marker. */
static void finish_error(job *j) {
    char *body = api_error_body(0, &j->res.err);
    if (j->rq->stream) {
        ds4_buf b = { 0 };
        ds4_buf_printf(&b, "data: %s\n\ndata: [DONE]\n\n", body);
        job_emit(j, b.p, b.n);
        ds4_buf_free(&b);
        free(body);
        job_finish_stream(j);
    } else {
        job_set_body(j, j->res.err.status, body);
    }
}

/* A malformed tool call: the text came as content; the finish carries an
 * error object (finish_reason "error", as OpenAI-compatible routers report
 * a failure after output has begun).  In a stream it is a top-level field
 * of the last chunk, which the SDKs raise as an APIError once the text
 * deltas have been delivered. */
static json_t *tool_error_json(const gen_result *r) {
    json_t *e = json_object();
    json_object_set_new(e, "message", jcstr(r->err.message));
    json_object_set_new(e, "type", jcstr(r->err.type));
    json_object_set_new(e, "code", jcstr(r->err.code));
    json_object_set_new(e, "param", json_null());
    return e;
}

static json_t *tool_calls_json(const gen_result *r) {
    json_t *a = json_array();
    for (int i = 0; i < r->n_calls; i++) {
        const gen_call *c = &r->calls[i];
        json_t *t = json_object(), *fn = json_object();
        json_object_set_new(t, "id", json_string(c->id));
        json_object_set_new(t, "type", json_string("function"));
        json_object_set_new(fn, "name", jcstr(c->name));
        json_object_set_new(fn, "arguments", jstr(c->args.p ? c->args.p : "{}", c->args.p ? c->args.n : 2));
        json_object_set_new(t, "function", fn);
        json_array_append_new(a, t);
    }
    return a;
}

/* The last event: the body, or the end of the stream. */
static void chat_finish(job *j) {
    gen_result *r = &j->res;
    if (r->finish == FIN_ERROR) { finish_error(j); return; }
    if (r->finish == FIN_CANCEL) {
        if (j->rq->stream) job_finish_stream(j); else job_set_body(j, 499, NULL);
        return;
    }
    if (j->rq->stream && r->finish == FIN_TOOL_ERROR) {
        json_t *o = envelope(j, "chat.completion.chunk");
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(0));
        json_object_set_new(ch, "delta", json_object());
        json_object_set_new(ch, "logprobs", json_null());
        json_object_set_new(ch, "finish_reason", json_string("error"));
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(o, "choices", arr);
        if (j->rq->include_usage) json_object_set_new(o, "usage", usage_json(r));
        json_object_set_new(o, "error", tool_error_json(r));
        job_emit_data(j, o);
        job_emit(j, "data: [DONE]\n\n", 14);
        job_finish_stream(j);
        return;
    }
    if (j->rq->stream) {
        emit_chunk(j, json_object(), finish_name(r->finish));
        if (j->rq->include_usage) {
            json_t *o = envelope(j, "chat.completion.chunk");
            json_object_set_new(o, "choices", json_array());
            json_object_set_new(o, "usage", usage_json(r));
            job_emit_data(j, o);
        }
        job_emit(j, "data: [DONE]\n\n", 14);
        job_finish_stream(j);
        return;
    }
    json_t *o = envelope(j, "chat.completion");
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    if (r->content.n || !r->n_calls)
        json_object_set_new(msg, "content", jstr(r->content.p, r->content.n));
    else
        json_object_set_new(msg, "content", json_null());
    if (r->reasoning.n)
        json_object_set_new(msg, "reasoning_content", jstr(r->reasoning.p, r->reasoning.n));
    if (r->n_calls) json_object_set_new(msg, "tool_calls", tool_calls_json(r));
    json_t *ch = json_object();
    json_object_set_new(ch, "index", json_integer(0));
    json_object_set_new(ch, "message", msg);
    json_object_set_new(ch, "logprobs", j->rq->logprobs ?
                        chat_logprobs(r->lp ? json_incref(r->lp) : json_array()) : json_null());
    json_object_set_new(ch, "finish_reason", json_string(finish_name(r->finish)));
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage_json(r));
    if (r->finish == FIN_TOOL_ERROR) json_object_set_new(o, "error", tool_error_json(r));
    job_set_body(j, 200, jdump(o));
    json_decref(o);
    return;
}

void openai_chat_event(job *j, ev_kind k, int index, const char *s, size_t n) {
    chat_state *st = state_of(j);
    gen_result *r = &j->res;
    if (k == EV_FINISH) { chat_finish(j); return; }
    if (!j->rq->stream) return;
    json_t *d = json_object();
    switch (k) {
    case EV_START:
        st->started = 1;
        json_object_set_new(d, "role", json_string("assistant"));
        json_object_set_new(d, "content", json_string(""));
        break;
    case EV_REASONING:
        json_object_set_new(d, "reasoning_content", jstr(s, n));
        break;
    case EV_TEXT:
        json_object_set_new(d, "content", jstr(s, n));
        break;
    case EV_TOOL_BEGIN: {
        const gen_call *c = &r->calls[index];
        json_t *t = json_object(), *fn = json_object();
        json_object_set_new(t, "index", json_integer(index));
        json_object_set_new(t, "id", json_string(c->id));
        json_object_set_new(t, "type", json_string("function"));
        json_object_set_new(fn, "name", jcstr(c->name));
        json_object_set_new(fn, "arguments", json_string(""));
        json_object_set_new(t, "function", fn);
        json_t *a = json_array();
        json_array_append_new(a, t);
        json_object_set_new(d, "tool_calls", a);
        break;
    }
    case EV_TOOL_ARGS: {
        json_t *t = json_object(), *fn = json_object();
        json_object_set_new(t, "index", json_integer(index));
        json_object_set_new(fn, "arguments", jstr(s, n));
        json_object_set_new(t, "function", fn);
        json_t *a = json_array();
        json_array_append_new(a, t);
        json_object_set_new(d, "tool_calls", a);
        break;
    }
    default:
        json_decref(d);
        return;
    }
    emit_chunk(j, d, NULL);
}

/* ------------------------------------------------------------------------ */
/* /v1/completions                                                           */
/* ------------------------------------------------------------------------ */

/* The legacy completions shape from chat-shaped entries (steals them):
 * {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
 * "text_offset"}; offsets count bytes from `offset0`. */
static json_t *completion_logprobs(json_t *entries, size_t *offset) {
    if (!entries) return json_null();
    json_t *o = json_object(), *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        json_array_append(toks, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *d = json_object(), *a;
        size_t k;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, a)
            json_object_set(d, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
        json_array_append_new(tops, d);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        *offset += json_array_size(json_object_get(e, "bytes"));
    }
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    json_decref(entries);
    return o;
}

static void emit_text_chunk(job *j, const char *s, size_t n, const char *finish) {
    json_t *o = envelope(j, "text_completion");
    json_object_del(o, "system_fingerprint");
    json_t *ch = json_object();
    json_object_set_new(ch, "text", jstr(s, n));
    json_object_set_new(ch, "index", json_integer(0));
    if (!j->api_state) j->api_state = calloc(1, sizeof(size_t));
    json_object_set_new(ch, "logprobs", j->api_state ? completion_logprobs(lp_take(j), j->api_state) : json_null());
    json_object_set_new(ch, "finish_reason", jcstr(finish));
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    if (j->rq->include_usage) json_object_set_new(o, "usage", json_null());
    job_emit_data(j, o);
}

static json_t *usage_plain(const gen_result *r) {
    json_t *u = usage_json(r);
    json_object_del(u, "completion_tokens_details");
    return u;
}

void openai_completions_event(job *j, ev_kind k, int index, const char *s, size_t n) {
    (void)index;
    gen_result *r = &j->res;
    if (k == EV_FINISH) {
        if (r->finish == FIN_ERROR) { finish_error(j); return; }
        if (r->finish == FIN_CANCEL) {
            if (j->rq->stream) job_finish_stream(j); else job_set_body(j, 499, NULL);
            return;
        }
        if (j->rq->stream) {
            emit_text_chunk(j, "", 0, finish_name(r->finish));
            if (j->rq->include_usage) {
                json_t *o = envelope(j, "text_completion");
                json_object_del(o, "system_fingerprint");
                json_object_set_new(o, "choices", json_array());
                json_object_set_new(o, "usage", usage_plain(r));
                job_emit_data(j, o);
            }
            job_emit(j, "data: [DONE]\n\n", 14);
            job_finish_stream(j);
            return;
        }
        json_t *o = envelope(j, "text_completion");
        json_object_del(o, "system_fingerprint");
        json_t *ch = json_object();
        json_object_set_new(ch, "text", jstr(r->content.p, r->content.n));
        json_object_set_new(ch, "index", json_integer(0));
        size_t off = 0;
        json_object_set_new(ch, "logprobs", j->rq->logprobs ?
                            completion_logprobs(r->lp ? json_incref(r->lp) : json_array(), &off) : json_null());
        json_object_set_new(ch, "finish_reason", json_string(finish_name(r->finish)));
        json_t *arr = json_array();
        json_array_append_new(arr, ch);
        json_object_set_new(o, "choices", arr);
        json_object_set_new(o, "usage", usage_plain(r));
        job_set_body(j, 200, jdump(o));
        json_decref(o);
        return;
    }
    if (j->rq->stream && k == EV_TEXT) emit_text_chunk(j, s, n, NULL);
}
