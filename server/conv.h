/*
 * conv.h -- API request JSON -> request (conv.c): the ds4_message
 * conversation, render options (thinking mode), tools in DeepSeek form,
 * sampling and generation limits; then the rendered prompt and its tokens.
 */
#ifndef DS4_SERVER_CONV_H
#define DS4_SERVER_CONV_H

#include "server.h"

/* Validate and convert a request body.  NULL + *e on a bad request. */
request *conv_parse(api_kind api, json_t *body, api_error *e);

/* Render the conversation (or take the raw prompt), tokenize it, and check
 * that it fits the context with room for at least one generated token.
 * `anthropic` selects the wording of the too-long error. */
int conv_prepare(request *r, api_error *e);

#endif
