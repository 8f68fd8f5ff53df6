/*
 * json_py.h -- JSON text exactly as Python's json.dumps(v, ensure_ascii=False)
 * writes it, from jansson values; plus a strict-enough JSON parse helper.
 *
 * Owns: serialization/parsing helpers only.  Shared by the renderer (tool
 * schemas, tool-call argument values, response_format), the DSML parser and
 * the server.  Must not know about chat roles or DSML.
 *
 * Why Python's format: the model was trained on prompts produced by
 * DeepSeek's Python encoder, so tool schemas and argument values must be
 * byte-identical to json.dumps output (", " / ": " separators, keys in the
 * given order, non-ASCII kept raw, floats as repr(float)).
 */
#ifndef DS4_JSON_PY_H
#define DS4_JSON_PY_H

#include <stddef.h>
#include <jansson.h>

#include "ds4.h"

enum {
    DS4_JSON_PY_DEFAULT = 0,   /* separators ", " and ": " (json.dumps default) */
    DS4_JSON_PY_COMPACT = 1,   /* separators "," and ":" */
};

/* Append json.dumps(v, ensure_ascii=False[, separators=(",", ":")]).
 * Integers print as integers, reals as Python's repr(float) (non-finite as
 * Infinity / -Infinity / NaN, like allow_nan=True), objects in jansson's
 * (insertion) order.  Returns DS4_OK, DS4_EINVAL (NULL value or nesting
 * deeper than 10000) or DS4_ENOMEM. */
int ds4_json_py_dump(const json_t *v, int flags, ds4_buf *out);

/* Append a quoted JSON string of `len` bytes as Python writes it: `"` `\`
 * and control characters escaped (\n \r \t \b \f, others \u00xx lowercase),
 * everything else (non-ASCII included) raw. */
int ds4_json_py_string(const char *s, size_t len, ds4_buf *out);

/* The same escaping without the surrounding quotes: usable on consecutive
 * pieces of one string (the escaping of a byte never depends on its
 * neighbours). */
int ds4_json_py_escape(const char *s, size_t len, ds4_buf *out);

/* Append Python's repr(float(d)): shortest digits that round-trip, fixed
 * notation when the decimal exponent is in [-4, 16) with ".0" added to
 * integral values, otherwise d[.ddd]e+XX / e-XX (at least two exponent
 * digits).  Examples: 1.0, 2.5, 0.0001, 1e-05, 1e+16, 1.5e+300, -0.0. */
int ds4_json_py_float(double d, ds4_buf *out);

/* Parse a JSON text (any value at top level, not just arrays/objects).
 * Integers stay integers and reals stay reals; duplicate object keys are
 * accepted with the last value winning at the first key's position (like
 * Python).  On failure returns NULL and, if `err` is given, stores a
 * malloc'd message "line L, column C: reason". */
json_t *ds4_json_parse(const char *text, size_t len, char **err);

#endif /* DS4_JSON_PY_H */
