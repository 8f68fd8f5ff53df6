/*
 * api_anthropic.c -- Anthropic /v1/messages response shapes: the message
 * body and its SSE stream (message_start, ping, content_block_start /
 * content_block_delta with thinking_delta, text_delta and input_json_delta /
 * content_block_stop, message_delta, message_stop; an `error` event on
 * failure).  Reasoning is a `thinking` block, tool calls `tool_use` blocks.
 *
 * Usage follows Anthropic's accounting: input_tokens counts only the prompt
 * tokens that were not read from the cache, cache_read_input_tokens the ones
 * reused from the live session.  Runs on the worker thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "job.h"
#include "base/json_py.h"

enum { BLK_NONE, BLK_THINKING, BLK_TEXT, BLK_TOOL };

typedef struct {
    int started;
    int open;          /* BLK_* of the open block */
    int index;         /* index of the open block; next one is index + 1 */
    int n_blocks;
} msg_state;

static msg_state *state_of(job *j) {
    if (!j->api_state) j->api_state = calloc(1, sizeof(msg_state));
    return j->api_state;
}

static const char *stop_reason(finish_kind f) {
    switch (f) {
    case FIN_LENGTH: return "max_tokens";
    case FIN_TOOLS: return "tool_use";
    case FIN_STOP_SEQ: return "stop_sequence";
    default: return "end_turn";
    }
}

static json_t *usage_json(const gen_result *r, int with_output) {
    json_t *u = json_object();
    json_object_set_new(u, "input_tokens", json_integer(r->prompt_tokens - r->cached_tokens));
    json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
    json_object_set_new(u, "cache_read_input_tokens", json_integer(r->cached_tokens));
    json_object_set_new(u, "output_tokens", json_integer(with_output ? r->completion_tokens : 0));
    return u;
}

static json_t *tool_input(const gen_call *c) {
    json_t *v = c->args.p ? ds4_json_parse(c->args.p, c->args.n, NULL) : NULL;
    if (!json_is_object(v)) { json_decref(v); v = json_object(); }
    return v;
}

static void close_block(job *j, msg_state *st) {
    if (st->open == BLK_NONE) return;
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("content_block_stop"));
    json_object_set_new(o, "index", json_integer(st->index));
    job_emit_event(j, "content_block_stop", o);
    st->open = BLK_NONE;
}

static void open_block(job *j, msg_state *st, int kind, json_t *block) {
    close_block(j, st);
    st->index = st->n_blocks++;
    st->open = kind;
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("content_block_start"));
    json_object_set_new(o, "index", json_integer(st->index));
    json_object_set_new(o, "content_block", block);
    job_emit_event(j, "content_block_start", o);
}

static void delta(job *j, msg_state *st, const char *type, const char *key, const char *s,
                  size_t n) {
    json_t *d = json_object();
    json_object_set_new(d, "type", json_string(type));
    json_object_set_new(d, key, jstr(s, n));
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("content_block_delta"));
    json_object_set_new(o, "index", json_integer(st->index));
    json_object_set_new(o, "delta", d);
    job_emit_event(j, "content_block_delta", o);
}

static json_t *message_json(job *j, int final) {
    gen_result *r = &j->res;
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(j->resp_id));
    json_object_set_new(m, "type", json_string("message"));
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "model", jcstr(j->rq->model));
    json_t *content = json_array();
    if (final) {
        if (r->reasoning.n) {
            json_t *b = json_object();
            json_object_set_new(b, "type", json_string("thinking"));
            json_object_set_new(b, "thinking", jstr(r->reasoning.p, r->reasoning.n));
            json_object_set_new(b, "signature", json_string(""));
            json_array_append_new(content, b);
        }
        if (r->content.n) {
            json_t *b = json_object();
            json_object_set_new(b, "type", json_string("text"));
            json_object_set_new(b, "text", jstr(r->content.p, r->content.n));
            json_array_append_new(content, b);
        }
        for (int i = 0; i < r->n_calls; i++) {
            json_t *b = json_object();
            json_object_set_new(b, "type", json_string("tool_use"));
            json_object_set_new(b, "id", json_string(r->calls[i].id));
            json_object_set_new(b, "name", jcstr(r->calls[i].name));
            json_object_set_new(b, "input", tool_input(&r->calls[i]));
            json_array_append_new(content, b);
        }
    }
    json_object_set_new(m, "content", content);
    json_object_set_new(m, "stop_reason", final ? json_string(stop_reason(r->finish)) : json_null());
    json_object_set_new(m, "stop_sequence", final && r->finish == FIN_STOP_SEQ && r->stop_index >= 0 ?
                        jcstr(j->rq->stop[r->stop_index]) : json_null());
    json_object_set_new(m, "usage", usage_json(r, final));
    return m;
}

/* The last event: the body, or the end of the stream. */
static void messages_finish(job *j, msg_state *st) {
    gen_result *r = &j->res;
    if (r->finish == FIN_CANCEL) {
        if (j->rq->stream) job_finish_stream(j); else job_set_body(j, 499, NULL);
        return;
    }
    if (r->finish == FIN_ERROR) {
        char *body = api_error_body(1, &r->err);
        if (j->rq->stream) {
            ds4_buf b = { 0 };
            ds4_buf_printf(&b, "event: error\ndata: %s\n\n", body);
            job_emit(j, b.p, b.n);
            ds4_buf_free(&b);
            free(body);
            job_finish_stream(j);
        } else {
            job_set_body(j, r->err.status, body);
        }
        return;
    }
    if (r->finish == FIN_TOOL_ERROR) {
        /* a malformed tool call.  Stream: its text came as a text
         * block; an error event ends the stream (what the SDKs raise
         * after the text).  Non-stream: there is no in-band failure in
         * a message, so the answer is an api_error whose message
         * carries the text (the SDKs retry a 500). */
        api_error e = r->err;
        e.status = 500;
        e.type = "api_error";
        if (!j->rq->stream) {
            size_t ml = strlen(e.message);
            snprintf(e.message + ml, sizeof e.message - ml, "; the model's output: %.*s",
                     (int)(r->content.n < sizeof e.message ? r->content.n : sizeof e.message),
                     r->content.p ? r->content.p : "");
            job_set_body(j, e.status, api_error_body(1, &e));
            return;
        }
        close_block(j, st);
        char *body = api_error_body(1, &e);
        ds4_buf b = { 0 };
        ds4_buf_printf(&b, "event: error\ndata: %s\n\n", body);
        job_emit(j, b.p, b.n);
        ds4_buf_free(&b);
        free(body);
        job_finish_stream(j);
        return;
    }
    if (!j->rq->stream) {
        json_t *m = message_json(j, 1);
        job_set_body(j, 200, jdump(m));
        json_decref(m);
        return;
    }
    close_block(j, st);
    json_t *o = json_object(), *d = json_object();
    json_object_set_new(o, "type", json_string("message_delta"));
    json_object_set_new(d, "stop_reason", json_string(stop_reason(r->finish)));
    json_object_set_new(d, "stop_sequence", r->finish == FIN_STOP_SEQ && r->stop_index >= 0 ?
                        jcstr(j->rq->stop[r->stop_index]) : json_null());
    json_object_set_new(o, "delta", d);
    json_object_set_new(o, "usage", usage_json(r, 1));
    job_emit_event(j, "message_delta", o);
    o = json_object();
    json_object_set_new(o, "type", json_string("message_stop"));
    job_emit_event(j, "message_stop", o);
    job_finish_stream(j);
    return;
}

void anthropic_event(job *j, ev_kind k, int index, const char *s, size_t n) {
    msg_state *st = state_of(j);
    gen_result *r = &j->res;
    if (k == EV_FINISH) { messages_finish(j, st); return; }
    if (!j->rq->stream) return;
    switch (k) {
    case EV_START: {
        st->started = 1;
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string("message_start"));
        json_object_set_new(o, "message", message_json(j, 0));
        job_emit_event(j, "message_start", o);
        o = json_object();
        json_object_set_new(o, "type", json_string("ping"));
        job_emit_event(j, "ping", o);
        break;
    }
    case EV_REASONING:
        if (st->open != BLK_THINKING) {
            json_t *b = json_object();
            json_object_set_new(b, "type", json_string("thinking"));
            json_object_set_new(b, "thinking", json_string(""));
            json_object_set_new(b, "signature", json_string(""));
            open_block(j, st, BLK_THINKING, b);
        }
        delta(j, st, "thinking_delta", "thinking", s, n);
        break;
    case EV_TEXT:
        if (st->open != BLK_TEXT) {
            json_t *b = json_object();
            json_object_set_new(b, "type", json_string("text"));
            json_object_set_new(b, "text", json_string(""));
            open_block(j, st, BLK_TEXT, b);
        }
        delta(j, st, "text_delta", "text", s, n);
        break;
    case EV_TOOL_BEGIN: {
        json_t *b = json_object();
        json_object_set_new(b, "type", json_string("tool_use"));
        json_object_set_new(b, "id", json_string(r->calls[index].id));
        json_object_set_new(b, "name", jcstr(r->calls[index].name));
        json_object_set_new(b, "input", json_object());
        open_block(j, st, BLK_TOOL, b);
        break;
    }
    case EV_TOOL_ARGS:
        if (st->open == BLK_TOOL) delta(j, st, "input_json_delta", "partial_json", s, n);
        break;
    case EV_TOOL_END:
        close_block(j, st);
        break;
    default:
        break;
    }
}
