/*
 * conv.h -- API request JSON -> request (conv.c): the ds4_message
 * conversation, render options (thinking mode), tools in DeepSeek form,
 * sampling and generation limits; then the rendered prompt and its tokens.
 */
#ifndef DS4_SERVER_CONV_H
#define DS4_SERVER_CONV_H

#include "server.h"

/* Validate and convert a request body for the server `srv` (its defaults,
 * context size, tokenizer and tool memory: conv.c reaches no global).
 * NULL + *e on a bad request. */
request *conv_parse(const server_ctx *srv, api_kind api, json_t *body, api_error *e);

/* Render the conversation (or take the raw prompt) and tokenize it: once
 * per request (the worker uses these tokens).  Tool-call turns the tool
 * memory missed are first looked up in the disk KV cache (srv->kvf). */
int conv_render(request *r, api_error *e);
/* conv_render, then check that the prompt fits the context with room for at
 * least one generated token (the error in the request's API's words). */
int conv_prepare(request *r, api_error *e);

/* Model names: any name of 1..CONV_MODEL_NAME_MAX bytes is served by the one
 * model, on POST routes and GET /v1/models/{id} alike. */
#define CONV_MODEL_NAME_MAX 256
int conv_model_name_ok(const char *id, size_t n);

#endif
