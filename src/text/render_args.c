/*
 * render_args.c -- the rule both prompt renderers (render.c for DeepSeek
 * V4's DSML, render_glm.c for GLM's XML calls) apply to a tool call's
 * arguments text before writing it in their own syntax.
 *
 * Owns: that one rule.  Must not: write any syntax of either format.
 */
#include <string.h>

#include "ds4.h"
#include "base/json_py.h"
#include "text/render_args.h"

/* A call's arguments text as the renderers take it: NULL or blank means
 * "no arguments" ({}), which is what OpenAI clients send for parameterless
 * tools (*blank = 1, NULL returned); a JSON object is returned (a new
 * reference); anything else returns NULL with *blank = 0, and the caller
 * renders the whole text as one string argument named "arguments". */
json_t *ds4_render_call_object(const char *args, size_t alen, int *blank) {
    *blank = 1;
    for (size_t i = 0; i < alen; i++)
        if (!strchr(" \t\r\n", args[i])) { *blank = 0; break; }
    if (*blank) return NULL;
    json_t *obj = ds4_json_parse(args, alen, NULL);
    if (obj && !json_is_object(obj)) { json_decref(obj); obj = NULL; }
    return obj;
}
