/*
 * render_args.h -- internal to src/text: a tool call's arguments as the
 * renderers take them (render_args.c).  Must not be included outside
 * src/text.
 */
#ifndef DS4_TEXT_RENDER_ARGS_H
#define DS4_TEXT_RENDER_ARGS_H

#include <stddef.h>
#include <jansson.h>

/* NULL or blank `args` means "no arguments" ({}), which is what OpenAI
 * clients send for parameterless tools (*blank = 1, NULL returned); a JSON
 * object is returned (a new reference); anything else returns NULL with
 * *blank = 0, and the caller renders the whole text as one string argument
 * named "arguments". */
json_t *ds4_render_call_object(const char *args, size_t alen, int *blank);

#endif
