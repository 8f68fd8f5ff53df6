/*
 * render_glm.c -- chat conversation -> GLM 5.x prompt text (ds4_render_chat
 * with opts->format == DS4_FORMAT_GLM) and the canonical GLM XML text of
 * tool calls (ds4_render_tool_calls_glm).
 *
 * Owns: the GLM prompt format of docs/PROMPT_FORMAT.md §12.  Must not
 * touch: the V4 format (render.c), tokenization (tokenizer.c), parsing of
 * the calls (glm_calls.c), JSON byte format (json_py.c).
 *
 * The bytes are those of the official GLM-5.3 chat_template.jinja as
 * transformers renders it (trim_blocks + lstrip_blocks, tojson =
 * json.dumps(ensure_ascii=False)), rule by rule:
 *   - "[gMASK]<sop>", then "<|system|>Reasoning Effort: Max|High|Low";
 *   - with tools, one more system part: the tool instructions with one
 *     function object per line, written key by key as '"k": json' joined
 *     by ", " (keys "defer_loading" and "strict" left out, deferred tools
 *     skipped), "{...}" around;
 *   - user "<|user|>" + text, system "<|system|>" + text, each tool result
 *     "<|observation|><tool_response>" + text + "</tool_response>";
 *   - assistant "<|assistant|>" + "<think>R</think>" (or "<think></think>"
 *     when there is no reasoning or it is cleared) + content.strip() + the
 *     calls; reasoning absent but "</think>" in the content splits the
 *     content like the template does;
 *   - the generation prompt "<|assistant|><think>".
 * ds4's own choices where the template has no answer (docs/PROMPT_FORMAT.md
 * §12.1): DS4_THINK_NONE drops the effort line and opens the answer with
 * "<think></think>" (the template has no off switch); developer and
 * latest_reminder messages render as system parts (the template would drop
 * them); response_format is not rendered (GLM has no such section); the
 * generation prompt is written unless the last message is an assistant.
 */
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "base/json_py.h"
#include "base/utf8.h"
#include "text/render_args.h"
#include "text/render_glm.h"

#define PUT(s) do { if (ds4_buf_puts(out, (s))) goto oom; } while (0)
#define PUTN(s, n) do { if (ds4_buf_append(out, (s), (n))) goto oom; } while (0)

static const char TOOLS_HEAD[] =
    "<|system|>\n"
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n";

static const char TOOLS_TAIL[] =
    "</tools>\n\n"
    "For each function call, output the function name and arguments within "
    "the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key>"
    "<arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}</arg_key>"
    "<arg_value>{arg-value-2}</arg_value>...</tool_call>";

/* ------------------------------------------------------------------------ */
/* Python's str.strip()                                                      */
/* ------------------------------------------------------------------------ */

/* str.isspace() of one code point (the characters Python strips). */
static int py_space(uint32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* [*b, *e) narrowed to s.strip().  Invalid UTF-8 is never whitespace. */
static void py_strip(const char *s, size_t n, size_t *b, size_t *e) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int ok;
        size_t k = ds4_utf8_next(u + i, n - i, &cp, &ok);
        if (!ok || !py_space(cp)) break;
        i += k;
    }
    size_t j = n;
    while (j > i) {
        /* Step back to the start of the last character. */
        size_t k = j - 1;
        while (k > i && j - k < 4 && (u[k] & 0xc0) == 0x80) k--;
        uint32_t cp;
        int ok;
        size_t len = ds4_utf8_next(u + k, j - k, &cp, &ok);
        if (!ok || len != j - k || !py_space(cp)) break;
        j = k;
    }
    *b = i;
    *e = j;
}

/* ------------------------------------------------------------------------ */
/* Tool calls                                                                */
/* ------------------------------------------------------------------------ */

static int render_one_call(const ds4_tool_call *c, ds4_buf *out) {
    const char *args = c->arguments ? c->arguments : "";
    size_t alen = strlen(args);
    int rc = DS4_OK;

    /* Blank arguments are "no arguments"; a non-object becomes one string
     * argument named "arguments" (the V4 renderer's rule, shared). */
    int blank;
    json_t *obj = ds4_render_call_object(args, alen, &blank);
    PUT("<tool_call>");
    PUT(c->name ? c->name : "");
    if (obj) {
        const char *key;
        json_t *val;
        json_object_foreach(obj, key, val) {
            PUT("<arg_key>");
            PUT(key);
            PUT("</arg_key><arg_value>");
            if (json_is_string(val)) {
                PUTN(json_string_value(val), json_string_length(val));
            } else {
                rc = ds4_json_py_dump(val, DS4_JSON_PY_DEFAULT, out);
                if (rc) goto done;
            }
            PUT("</arg_value>");
        }
    } else if (!blank) {
        PUT("<arg_key>arguments</arg_key><arg_value>");
        PUTN(args, alen);
        PUT("</arg_value>");
    }
    PUT("</tool_call>");
    goto done;
oom:
    rc = DS4_ENOMEM;
done:
    json_decref(obj);
    return rc;
}

int ds4_render_tool_calls_glm(const ds4_tool_call *calls, int n, ds4_buf *out,
                              char **err) {
    if (err) *err = NULL;
    if (n <= 0) return DS4_OK;
    if (!calls || !out) return DS4_EINVAL;
    size_t start = out->n;
    for (int i = 0; i < n; i++) {
        int rc = render_one_call(&calls[i], out);
        if (rc) { out->n = start; if (out->p) out->p[start] = 0; return rc; }
    }
    return DS4_OK;
}

/* ------------------------------------------------------------------------ */
/* Tools section                                                             */
/* ------------------------------------------------------------------------ */

/* Jinja truthiness of a JSON value (Python's bool()). */
static int truthy(const json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_integer(v)) return json_integer_value(v) != 0;
    if (json_is_real(v)) return json_real_value(v) != 0;
    return 1;
}

/* One line of the tools list: tool_to_json(tool) + "\n". */
static int put_tool(const json_t *t, ds4_buf *out) {
    const json_t *f = json_object_get(t, "function");
    if (f) t = f;          /* {%- if 'function' in tool %} set tool = tool['function'] */
    if (!json_is_object(t)) return DS4_EINVAL;
    if (truthy(json_object_get(t, "defer_loading"))) return DS4_OK;
    if (ds4_buf_puts(out, "{")) return DS4_ENOMEM;
    int first = 1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)t, k, v) {
        if (!strcmp(k, "defer_loading") || !strcmp(k, "strict")) continue;
        if (!first && ds4_buf_puts(out, ", ")) return DS4_ENOMEM;
        first = 0;
        /* The key is written as is ("{{ k }}"), not JSON-escaped. */
        if (ds4_buf_puts(out, "\"") || ds4_buf_puts(out, k) || ds4_buf_puts(out, "\": "))
            return DS4_ENOMEM;
        int rc = ds4_json_py_dump(v, DS4_JSON_PY_DEFAULT, out);
        if (rc) return rc;
    }
    return ds4_buf_puts(out, "}\n") ? DS4_ENOMEM : DS4_OK;
}

/* ------------------------------------------------------------------------ */
/* Conversation                                                              */
/* ------------------------------------------------------------------------ */

static const char *find_last(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    if (n < m) return NULL;
    for (size_t i = n - m + 1; i-- > 0;)
        if (memcmp(s + i, pat, m) == 0) return s + i;
    return NULL;
}

static const char *find_first(const char *s, size_t n, const char *pat) {
    size_t m = strlen(pat);
    if (n < m) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, pat, m) == 0) return s + i;
    return NULL;
}

int ds4_render_chat_glm(const ds4_message *msgs, int n_msgs,
                        const ds4_render_opts *opts, ds4_buf *out, char **err) {
    if (err) *err = NULL;
    if (!out || n_msgs < 0 || (n_msgs > 0 && !msgs)) return DS4_EINVAL;
    const ds4_think think = opts ? opts->think : DS4_THINK_HIGH;
    const int clear = opts ? opts->clear_thinking : 0;
    const size_t start = out->n;
    int rc = DS4_OK;
    json_t **tools = calloc((size_t)n_msgs + 1, sizeof *tools);
    if (!tools) return ds4_set_err(err, DS4_ENOMEM, "out of memory rendering the prompt");

    /* Tools come from the messages that may carry them (system/developer),
     * all rendered in one list ahead of the conversation. */
    int any_tools = 0;
    for (int i = 0; i < n_msgs; i++) {
        const ds4_message *m = &msgs[i];
        if (m->role > DS4_ROLE_LATEST_REMINDER) {
            rc = ds4_set_err(err, DS4_EINVAL, "message %d: unknown role", i);
            goto done;
        }
        if (!m->tools_json || m->role == DS4_ROLE_USER || m->role == DS4_ROLE_TOOL) continue;
        char *e = NULL;
        tools[i] = ds4_json_parse(m->tools_json, strlen(m->tools_json), &e);
        if (!tools[i]) {
            rc = ds4_set_err(err, DS4_EINVAL, "message %d: tools: %s", i, e ? e : "invalid JSON");
            free(e);
            goto done;
        }
        if (!json_is_array(tools[i])) {
            rc = ds4_set_err(err, DS4_EINVAL, "message %d: tools must be a JSON array", i);
            goto done;
        }
        if (json_array_size(tools[i]) > 0) any_tools = 1;
    }

    PUT("[gMASK]<sop>");
    switch (think) {
    case DS4_THINK_NONE: break;
    case DS4_THINK_LOW: PUT("<|system|>Reasoning Effort: Low"); break;
    case DS4_THINK_HIGH: PUT("<|system|>Reasoning Effort: High"); break;
    default: PUT("<|system|>Reasoning Effort: Max"); break;
    }
    if (any_tools) {
        PUT(TOOLS_HEAD);
        for (int i = 0; i < n_msgs; i++) {
            for (size_t j = 0; tools[i] && j < json_array_size(tools[i]); j++) {
                rc = put_tool(json_array_get(tools[i], j), out);
                if (rc == DS4_EINVAL) {
                    rc = ds4_set_err(err, DS4_EINVAL, "message %d: tools[%zu] is not an object", i, j);
                    goto done;
                }
                if (rc) goto oom;
            }
        }
        PUT(TOOLS_TAIL);
    }

    int last_user = -1;
    for (int i = 0; i < n_msgs; i++)
        if (msgs[i].role == DS4_ROLE_USER) last_user = i;

    for (int i = 0; i < n_msgs; i++) {
        const ds4_message *m = &msgs[i];
        const char *c = m->content ? m->content : "";
        size_t cn = m->content ? m->content_len : 0;
        switch (m->role) {
        case DS4_ROLE_USER:
            PUT("<|user|>");
            PUTN(c, cn);
            break;
        case DS4_ROLE_SYSTEM:
        case DS4_ROLE_DEVELOPER:
        case DS4_ROLE_LATEST_REMINDER:
            PUT("<|system|>");
            PUTN(c, cn);
            break;
        case DS4_ROLE_TOOL:
            PUT("<|observation|><tool_response>");
            PUTN(c, cn);
            PUT("</tool_response>");
            break;
        case DS4_ROLE_ASSISTANT: {
            const char *r = m->reasoning;
            size_t rn = m->reasoning ? m->reasoning_len : 0;
            if (!r) {
                /* content.split('</think>')[0].split('<think>')[-1] is the
                 * reasoning, content.split('</think>')[-1] the answer. */
                const char *first = find_first(c, cn, "</think>");
                if (first) {
                    size_t head = (size_t)(first - c);
                    const char *open = find_last(c, head, "<think>");
                    r = open ? open + 7 : c;
                    rn = (size_t)(first - r);
                    const char *last = find_last(c, cn, "</think>");
                    cn -= (size_t)(last + 8 - c);
                    c = last + 8;
                }
            }
            PUT("<|assistant|>");
            if (r && (!clear || i > last_user)) {
                PUT("<think>");
                PUTN(r, rn);
                PUT("</think>");
            } else {
                PUT("<think></think>");
            }
            size_t b, e;
            py_strip(c, cn, &b, &e);
            PUTN(c + b, e - b);
            if (m->n_tool_calls > 0) {
                if (m->dsml_exact) {
                    PUT(m->dsml_exact);
                } else {
                    rc = ds4_render_tool_calls_glm(m->tool_calls, m->n_tool_calls, out, err);
                    if (rc) goto done;
                }
            }
            break;
        }
        default:
            break;
        }
    }
    if (n_msgs == 0 || msgs[n_msgs - 1].role != DS4_ROLE_ASSISTANT)
        PUT(think == DS4_THINK_NONE ? "<|assistant|><think></think>" : "<|assistant|><think>");
    goto done;
oom:
    rc = ds4_set_err(err, DS4_ENOMEM, "out of memory rendering the prompt");
done:
    for (int i = 0; i < n_msgs; i++) json_decref(tools[i]);
    free(tools);
    if (rc) {
        out->n = start;
        if (out->p) out->p[start] = 0;
    }
    return rc;
}
