/*
 * render.c -- chat conversation -> DeepSeek V4 prompt text (ds4_render_chat)
 * and the canonical DSML text of tool calls (ds4_render_tool_calls).
 *
 * Owns: the prompt format of docs/PROMPT_FORMAT.md §2-§8.  Must not
 * touch: tokenization (tokenizer.c), DSML parsing (dsml.c), JSON byte format
 * (json_py.c).
 *
 * The rules follow DeepSeek's reference encoder (encoding_dsv4.py) step by
 * step, because the model was trained on its output and the goldens in
 * shared/golden/prompt_render.jsonl pin it byte for byte:
 *   1. tool results are merged into user turns (consecutive users too),
 *   2. tool results are re-sorted by the preceding assistant's call order,
 *   3. in thinking mode with drop_thinking (and no tools anywhere), earlier
 *      assistant reasoning and earlier developer messages are removed,
 *   4. each remaining message renders on its own and, after a user or
 *      developer message, opens the next assistant turn.
 * Think-max vs context size is the caller's decision: DS4_THINK_MAX always
 * renders the max-effort paragraph here (DS4_THINK_LOW renders as HIGH).
 * A conversation in DS4_FORMAT_GLM is handed to render_glm.c whole.
 */
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "base/json_py.h"
#include "text/render_args.h"
#include "text/render_glm.h"

#define S_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define S_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define S_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define S_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define S_REMINDER "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>"
#define S_DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define S_THINK "<think>"
#define S_THINK_END "</think>"

static const char EFFORT_MAX[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose "
    "the problem to resolve the root cause, rigorously stress-testing your "
    "logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every "
    "intermediate step, considered alternative, and rejected hypothesis to "
    "ensure absolutely no assumption is left unchecked.\n\n";

static const char TOOLS_HEAD[] =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. "
    "You can invoke tools by writing a \"<" S_DSML "tool_calls>\" block like "
    "the following:\n\n"
    "<" S_DSML "tool_calls>\n"
    "<" S_DSML "invoke name=\"$TOOL_NAME\">\n"
    "<" S_DSML "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"
    "$PARAMETER_VALUE</" S_DSML "parameter>\n"
    "...\n"
    "</" S_DSML "invoke>\n"
    "<" S_DSML "invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</" S_DSML "invoke>\n"
    "</" S_DSML "tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. "
    "For all other types (numbers, booleans, arrays, objects), pass the value "
    "in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by " S_THINK "), you MUST output "
    "your complete reasoning inside " S_THINK "..." S_THINK_END " BEFORE any "
    "tool calls or final response.\n\n"
    "Otherwise, output directly after " S_THINK_END " with tool calls or final "
    "response.\n\n"
    "### Available Tool Schemas\n\n";

static const char TOOLS_TAIL[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter "
    "schemas to invoke tool calls.\n";

static const char RESPONSE_FORMAT_HEAD[] =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema "
    "to reply:\n";

#define PUT(s) do { if (ds4_buf_puts(out, (s))) goto oom; } while (0)
#define PUTN(s, n) do { if (ds4_buf_append(out, (s), (n))) goto oom; } while (0)

/* ------------------------------------------------------------------------ */
/* Tool calls                                                                */
/* ------------------------------------------------------------------------ */

/* One call: <｜DSML｜invoke name="N">\n PARAMS \n</｜DSML｜invoke>, parameters
 * joined by "\n".  Note that zero parameters leave an empty line, exactly as
 * the reference template does ("{arguments}" empty). */
static int render_one_call(const ds4_tool_call *c, ds4_buf *out) {
    const char *args = c->arguments ? c->arguments : "";
    size_t alen = strlen(args);
    int rc = DS4_OK;
    int blank;
    json_t *obj = ds4_render_call_object(args, alen, &blank);

    PUT("<" S_DSML "invoke name=\"");
    PUT(c->name ? c->name : "");
    PUT("\">\n");
    if (obj) {
        const char *key;
        json_t *val;
        int first = 1;
        json_object_foreach(obj, key, val) {
            if (!first) PUT("\n");
            first = 0;
            PUT("<" S_DSML "parameter name=\"");
            PUT(key);
            if (json_is_string(val)) {
                PUT("\" string=\"true\">");
                PUTN(json_string_value(val), json_string_length(val));
            } else {
                PUT("\" string=\"false\">");
                rc = ds4_json_py_dump(val, DS4_JSON_PY_DEFAULT, out);
                if (rc) goto done;
            }
            PUT("</" S_DSML "parameter>");
        }
    } else if (!blank) {
        /* Not a JSON object: the whole text is one string parameter. */
        PUT("<" S_DSML "parameter name=\"arguments\" string=\"true\">");
        PUTN(args, alen);
        PUT("</" S_DSML "parameter>");
    }
    PUT("\n</" S_DSML "invoke>");
    goto done;
oom:
    rc = DS4_ENOMEM;
done:
    json_decref(obj);
    return rc;
}

int ds4_render_tool_calls(const ds4_tool_call *calls, int n, ds4_buf *out,
                          char **err) {
    if (err) *err = NULL;
    if (n <= 0) return DS4_OK;
    if (!calls || !out) return DS4_EINVAL;
    size_t start = out->n;
    PUT("\n\n<" S_DSML "tool_calls>\n");
    for (int i = 0; i < n; i++) {
        if (i) PUT("\n");
        int rc = render_one_call(&calls[i], out);
        if (rc) { out->n = start; if (out->p) out->p[start] = 0; return rc; }
    }
    PUT("\n</" S_DSML "tool_calls>");
    return DS4_OK;
oom:
    out->n = start;
    if (out->p) out->p[start] = 0;
    return DS4_ENOMEM;
}

/* ------------------------------------------------------------------------ */
/* Conversation                                                              */
/* ------------------------------------------------------------------------ */

/* A block of a merged user turn: its text, or a tool result. */
typedef struct {
    int is_tool;
    const char *text;
    size_t len;
    const char *id;      /* tool_call_id of a tool result */
} blk;

/* A message after tool merging. */
typedef struct {
    ds4_role role;              /* never DS4_ROLE_TOOL */
    const ds4_message *m;       /* the source message (first one for users) */
    int src;                    /* its index in the caller's array */
    int b0, nb;                 /* user: its blocks */
    int no_reasoning;           /* assistant whose reasoning was dropped */
    json_t *tools;              /* parsed tools (system/developer) */
} unit;

static int last_user_index(const unit *u, int n) {
    for (int i = n - 1; i >= 0; i--)
        if (u[i].role == DS4_ROLE_USER || u[i].role == DS4_ROLE_DEVELOPER)
            return i;
    return -1;
}

/* Position of tool call `id` in the calls of assistant `a`, like the
 * reference's dict {id: index} (later duplicates win), 0 when unknown. */
static int call_order(const ds4_message *a, const char *id) {
    int k = 0;
    if (!id) id = "";
    for (int i = 0; i < a->n_tool_calls; i++) {
        const char *cid = a->tool_calls[i].id;
        if (cid && *cid && strcmp(cid, id) == 0) k = i;
    }
    return k;
}

static int has_call_ids(const ds4_message *a) {
    for (int i = 0; i < a->n_tool_calls; i++)
        if (a->tool_calls[i].id && a->tool_calls[i].id[0]) return 1;
    return 0;
}

/* Stable sort of the tool-result blocks of one user turn by call order,
 * leaving text blocks where they are (sort_tool_results_by_call_order). */
static int sort_tool_blocks(blk *b, int nb, const ds4_message *a) {
    int nt = 0;
    for (int i = 0; i < nb; i++) nt += b[i].is_tool;
    if (nt < 2) return DS4_OK;
    blk *t = malloc(sizeof *t * (size_t)nt);
    int *key = malloc(sizeof *key * (size_t)nt);
    if (!t || !key) { free(t); free(key); return DS4_ENOMEM; }
    int k = 0;
    for (int i = 0; i < nb; i++)
        if (b[i].is_tool) { t[k] = b[i]; key[k] = call_order(a, b[i].id); k++; }
    for (int i = 1; i < nt; i++) {          /* insertion sort: stable */
        blk tv = t[i];
        int kv = key[i], j = i - 1;
        while (j >= 0 && key[j] > kv) { t[j + 1] = t[j]; key[j + 1] = key[j]; j--; }
        t[j + 1] = tv;
        key[j + 1] = kv;
    }
    k = 0;
    for (int i = 0; i < nb; i++)
        if (b[i].is_tool) b[i] = t[k++];
    free(t);
    free(key);
    return DS4_OK;
}

static int put_tools(const json_t *tools, ds4_buf *out) {
    if (ds4_buf_puts(out, "\n\n") || ds4_buf_puts(out, TOOLS_HEAD)) return DS4_ENOMEM;
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        /* OpenAI form {"type":"function","function":{...}}: the schema line is
         * the function object.  A bare function object is taken as is. */
        json_t *f = json_is_object(t) ? json_object_get(t, "function") : NULL;
        if (!f) f = t;
        if (i && ds4_buf_puts(out, "\n")) return DS4_ENOMEM;
        int rc = ds4_json_py_dump(f, DS4_JSON_PY_DEFAULT, out);
        if (rc) return rc;
    }
    return ds4_buf_puts(out, TOOLS_TAIL) ? DS4_ENOMEM : DS4_OK;
}

/* "\n\n" + tools section + "\n\n" + response format, for system/developer. */
static int put_attachments(const unit *u, int idx, ds4_buf *out, char **err) {
    int rc;
    if (u->tools && json_array_size(u->tools) > 0) {
        rc = put_tools(u->tools, out);
        if (rc) return rc;
    }
    const char *rf = u->m->response_format_json;
    if (rf) {
        char *e = NULL;
        json_t *v = ds4_json_parse(rf, strlen(rf), &e);
        if (!v) {
            ds4_set_err(err, DS4_EINVAL, "message %d: response_format: %s", idx, e ? e : "invalid JSON");
            free(e);
            return DS4_EINVAL;
        }
        /* Python's `if response_format:` skips empty / falsy values. */
        int truthy = !(json_is_null(v) || json_is_false(v) ||
                       (json_is_object(v) && json_object_size(v) == 0) ||
                       (json_is_array(v) && json_array_size(v) == 0) ||
                       (json_is_string(v) && json_string_length(v) == 0) ||
                       (json_is_integer(v) && json_integer_value(v) == 0) ||
                       (json_is_real(v) && json_real_value(v) == 0));
        rc = DS4_OK;
        if (truthy) {
            if (ds4_buf_puts(out, "\n\n") || ds4_buf_puts(out, RESPONSE_FORMAT_HEAD))
                rc = DS4_ENOMEM;
            else
                rc = ds4_json_py_dump(v, DS4_JSON_PY_DEFAULT, out);
        }
        json_decref(v);
        if (rc) return rc;
    }
    return DS4_OK;
}

static int content_put(const ds4_message *m, ds4_buf *out) {
    if (!m->content || !m->content_len) return DS4_OK;
    return ds4_buf_append(out, m->content, m->content_len);
}

int ds4_render_chat(const ds4_message *msgs, int n_msgs,
                    const ds4_render_opts *opts, ds4_buf *out, char **err) {
    if (err) *err = NULL;
    if (opts && opts->format == DS4_FORMAT_GLM)
        return ds4_render_chat_glm(msgs, n_msgs, opts, out, err);
    if (!out || n_msgs < 0 || (n_msgs > 0 && !msgs)) return DS4_EINVAL;
    const ds4_think think = opts ? opts->think : DS4_THINK_HIGH;
    const int thinking = think != DS4_THINK_NONE;
    const int keep_all = opts ? opts->keep_all_reasoning : 0;
    const size_t start = out->n;
    int rc = DS4_OK;

    unit *u = calloc((size_t)n_msgs + 1, sizeof *u);
    blk *b = calloc((size_t)n_msgs + 1, sizeof *b);
    if (!u || !b) { rc = DS4_ENOMEM; goto done_nounits; }
    int nu = 0, nb = 0;

    /* 1. Merge tool results and consecutive user messages into user turns. */
    for (int i = 0; i < n_msgs; i++) {
        const ds4_message *m = &msgs[i];
        if (m->role == DS4_ROLE_TOOL || m->role == DS4_ROLE_USER) {
            blk *x = &b[nb];
            x->is_tool = m->role == DS4_ROLE_TOOL;
            x->text = m->content ? m->content : "";
            x->len = m->content ? m->content_len : 0;
            x->id = m->tool_call_id;
            if (nu > 0 && u[nu - 1].role == DS4_ROLE_USER) {
                u[nu - 1].nb++;
            } else {
                u[nu] = (unit){ .role = DS4_ROLE_USER, .m = m, .src = i, .b0 = nb, .nb = 1 };
                nu++;
            }
            nb++;
            continue;
        }
        if (m->role > DS4_ROLE_LATEST_REMINDER) {
            ds4_set_err(err, DS4_EINVAL, "message %d: unknown role", i);
            rc = DS4_EINVAL;
            goto done;
        }
        u[nu] = (unit){ .role = m->role, .m = m, .src = i };
        if (m->tools_json && (m->role == DS4_ROLE_SYSTEM || m->role == DS4_ROLE_DEVELOPER ||
                              m->role == DS4_ROLE_ASSISTANT ||
                              m->role == DS4_ROLE_LATEST_REMINDER)) {
            char *e = NULL;
            u[nu].tools = ds4_json_parse(m->tools_json, strlen(m->tools_json), &e);
            if (!u[nu].tools) {
                ds4_set_err(err, DS4_EINVAL, "message %d: tools: %s", i, e ? e : "invalid JSON");
                free(e);
                rc = DS4_EINVAL;
                nu++;
                goto done;
            }
            if (!json_is_array(u[nu].tools)) {
                ds4_set_err(err, DS4_EINVAL, "message %d: tools must be a JSON array", i);
                rc = DS4_EINVAL;
                nu++;
                goto done;
            }
        }
        nu++;
    }

    /* 2. Sort tool results by the call order of the latest assistant turn
     *    that made calls (its ids stay in force until the next one). */
    {
        const ds4_message *calls = NULL;
        for (int i = 0; i < nu; i++) {
            if (u[i].role == DS4_ROLE_ASSISTANT && u[i].m->n_tool_calls > 0)
                calls = u[i].m;
            else if (u[i].role == DS4_ROLE_USER && calls && has_call_ids(calls)) {
                rc = sort_tool_blocks(b + u[i].b0, u[i].nb, calls);
                if (rc) goto done;
            }
        }
    }

    /* 3. drop_thinking, unless some message defines tools. */
    int drop = !keep_all;
    for (int i = 0; i < nu; i++)
        if (u[i].tools && json_array_size(u[i].tools) > 0) drop = 0;
    if (thinking && drop) {
        int lu = last_user_index(u, nu), k = 0;
        for (int i = 0; i < nu; i++) {
            unit x = u[i];
            if (i < lu && x.role == DS4_ROLE_DEVELOPER) {
                json_decref(x.tools);
                continue;
            }
            if (i < lu && x.role == DS4_ROLE_ASSISTANT) x.no_reasoning = 1;
            u[k++] = x;
        }
        nu = k;
    }
    const int lu = last_user_index(u, nu);

    /* 4. Render. */
    PUT(S_BOS);
    for (int i = 0; i < nu; i++) {
        const unit *x = &u[i];
        const ds4_message *m = x->m;
        if (i == 0 && think == DS4_THINK_MAX) PUT(EFFORT_MAX);
        switch (x->role) {
        case DS4_ROLE_SYSTEM:
            if (content_put(m, out)) goto oom;
            if ((rc = put_attachments(x, x->src, out, err))) goto done;
            break;
        case DS4_ROLE_DEVELOPER:
            PUT(S_USER);
            if (content_put(m, out)) goto oom;
            if ((rc = put_attachments(x, x->src, out, err))) goto done;
            break;
        case DS4_ROLE_USER:
            PUT(S_USER);
            for (int j = 0; j < x->nb; j++) {
                const blk *y = &b[x->b0 + j];
                if (j) PUT("\n\n");
                if (y->is_tool) PUT("<tool_result>");
                PUTN(y->text, y->len);
                if (y->is_tool) PUT("</tool_result>");
            }
            break;
        case DS4_ROLE_LATEST_REMINDER:
            PUT(S_REMINDER);
            if (content_put(m, out)) goto oom;
            break;
        case DS4_ROLE_ASSISTANT:
            /* Reasoning is written for turns after the last user message, or
             * for all turns when nothing is dropped.  The opening <think> (or
             * </think>) was written by the preceding user turn. */
            if (thinking && (!drop || i > lu) && !x->no_reasoning) {
                if (m->reasoning && m->reasoning_len) PUTN(m->reasoning, m->reasoning_len);
                PUT(S_THINK_END);
            }
            if (content_put(m, out)) goto oom;
            if (m->dsml_exact) {
                PUT(m->dsml_exact);
            } else if (m->n_tool_calls > 0) {
                rc = ds4_render_tool_calls(m->tool_calls, m->n_tool_calls, out, err);
                if (rc) goto done;
            }
            if (!m->wo_eos) PUT(S_EOS);
            break;
        default:
            break;
        }
        /* Open the assistant turn after a user/developer message when an
         * assistant/latest_reminder message or nothing follows. */
        if (i + 1 < nu && u[i + 1].role != DS4_ROLE_ASSISTANT &&
            u[i + 1].role != DS4_ROLE_LATEST_REMINDER)
            continue;
        if (x->role == DS4_ROLE_USER || x->role == DS4_ROLE_DEVELOPER) {
            PUT(S_ASSISTANT);
            PUT(thinking && (!drop || i >= lu) ? S_THINK : S_THINK_END);
        }
    }
    goto done;
oom:
    rc = ds4_set_err(err, DS4_ENOMEM, "out of memory rendering the prompt");
done:
    for (int i = 0; i < nu; i++) json_decref(u[i].tools);
done_nounits:
    free(u);
    free(b);
    if (rc) {
        out->n = start;
        if (out->p) out->p[start] = 0;
    }
    return rc;
}
