/*
 * conv.c -- request JSON of the three API families -> request (conv.h).
 *
 * Owns: validation of every field the server honours (wrong types and
 * out-of-range values are 400s naming the parameter), the mapping of each
 * family's messages / content blocks / items onto ds4_message (OpenAI chat
 * messages; Anthropic text, thinking, tool_use and tool_result blocks;
 * Responses message, reasoning, function_call and function_call_output
 * items), tools onto DeepSeek's {"type":"function","function":{...}} form,
 * thinking controls, tool_choice, sampling, stop sequences, and the exact
 * DSML replay from the tool memory.  Unknown fields are ignored, as the
 * DeepSeek and vLLM servers do (clients send vendor extras freely).
 * Must not: touch the session or produce responses.
 *
 * NULs: the body is parsed with "\u0000" allowed, because free text
 * (message content, reasoning, tool output) may hold one and is used with
 * its length.  Every other string (roles, types, names, ids, the model,
 * stop sequences, efforts, ...) becomes a C string, which would silently
 * end at the NUL ("user\u0000x" would read as "user"), so a NUL there is a
 * 400 (check_nuls).  Numbers: a JSON number is a double; it is range-checked
 * before any conversion to an integer (a cast out of range is undefined).
 *
 * tool_choice is honoured by forcing text, not by asking: "required" /
 * Anthropic "any" force the opening of a DSML tool-call block (the model then
 * picks the tool, greedily), a named tool forces the block and the invoke
 * header with that name, "none" leaves the tools out of the prompt.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "kvdisk.h"
#include "base/json_py.h"
#include "toolmem.h"
#include "metrics.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define S_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

/* ------------------------------------------------------------------------ */
/* request lifetime                                                          */
/* ------------------------------------------------------------------------ */

request *request_new(api_kind api) {
    request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->api = api;
    r->ro.think = DS4_THINK_HIGH;
    r->parallel_tool_calls = 1;
    return r;
}

void request_free(request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->msgs);
    json_decref(r->tools);
    json_decref(r->tools_orig);
    json_decref(r->tool_choice);
    ds4_buf_free(&r->prompt);
    ds4_tokens_free(&r->tokens);
    free(r->stop);
    free(r->test_output);
    free(r);
}

char *request_own(request *r, char *s) {
    if (!s) return NULL;   /* (an empty ds4_buf has p == NULL: not a failure) */
    if (r->n_owned == r->cap_owned) {
        int nc = r->cap_owned ? r->cap_owned * 2 : 32;
        char **o = realloc(r->owned, (size_t)nc * sizeof *o);
        if (!o) { free(s); r->oom = 1; return NULL; }
        r->owned = o;
        r->cap_owned = nc;
    }
    r->owned[r->n_owned++] = s;
    return s;
}

/* An allocation failed while reading the request: a server error (500 with
 * the API's error shape), never a 400 and never a silently shorter prompt. */
static int api_oom(api_error *e) {
    api_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return -1;
}

char *request_strdup(request *r, const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) { r->oom = 1; return NULL; }
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return request_own(r, p);
}

static ds4_message *add_msg(request *r, ds4_role role) {
    if (r->n_msgs == r->cap_msgs) {
        int nc = r->cap_msgs ? r->cap_msgs * 2 : 16;
        ds4_message *m = realloc(r->msgs, (size_t)nc * sizeof *m);
        if (!m) return NULL;
        r->msgs = m;
        r->cap_msgs = nc;
    }
    ds4_message *m = &r->msgs[r->n_msgs++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

static void set_content(request *r, ds4_message *m, const char *s, size_t n) {
    m->content = request_strdup(r, s, n);
    m->content_len = m->content ? n : 0;
}

/* ------------------------------------------------------------------------ */
/* field helpers: absent and null both mean "not given"                      */
/* ------------------------------------------------------------------------ */

static json_t *field(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_str(json_t *o, const char *k, const char **out, api_error *e) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_string(v)) return api_bad(e, k, "'%s' must be a string", k);
    *out = json_string_value(v);
    return 1;
}

static int get_num(json_t *o, const char *k, double lo, double hi, double *out, api_error *e) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_number(v)) return api_bad(e, k, "'%s' must be a number", k);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return api_bad(e, k, "'%s' must be between %g and %g, got %g", k, lo, hi, d);
    *out = d;
    return 1;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out,
                   api_error *e) {
    json_t *v = field(o, k);
    if (!v) return 0;
    /* 5.0 is accepted as 5 (JavaScript clients cannot tell them apart).
     * The range is checked on the double: casting 1e300 would be undefined. */
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d >= (double)lo && d <= (double)hi))
            return api_bad(e, k, "'%s' must be between %lld and %lld, got %g", k, lo, hi, d);
        long long x = (long long)d;
        if ((double)x != d) return api_bad(e, k, "'%s' must be an integer, got %g", k, d);
        *out = x;
        return 1;
    }
    if (!json_is_integer(v)) return api_bad(e, k, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_bad(e, k, "'%s' must be between %lld and %lld, got %lld", k, lo, hi, x);
    *out = x;
    return 1;
}

static int get_bool(json_t *o, const char *k, int *out, api_error *e) {
    json_t *v = field(o, k);
    if (!v) return 0;
    if (!json_is_boolean(v)) return api_bad(e, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 1;
}

#define TRY(x) do { if ((x) < 0) return -1; } while (0)

/* ------------------------------------------------------------------------ */
/* common parameters                                                         */
/* ------------------------------------------------------------------------ */

static int parse_sampling(request *r, json_t *b, double max_temp, api_error *e) {
    const server_config *c = &r->srv->cfg;
    r->sp = c->sp;
    double d = 0;
    long long x = 0;
    int rc;
    TRY(rc = get_num(b, "temperature", 0, max_temp, &d, e));
    if (rc) r->sp.temperature = (float)d;
    TRY(rc = get_num(b, "top_p", 0, 1, &d, e));
    if (rc) r->sp.top_p = d <= 0 ? 1e-6f : (float)d;
    TRY(rc = get_int(b, "top_k", 0, 1 << 30, &x, e));
    if (rc) r->sp.top_k = (int)x;
    TRY(rc = get_num(b, "min_p", 0, 1, &d, e));
    if (rc) r->sp.min_p = (float)d;
    TRY(rc = get_int(b, "seed", -(1LL << 62), 1LL << 62, &x, e));
    if (rc) r->sp.seed = (uint64_t)x;
    else if (c->sp.seed == 0) util_random_bytes(&r->sp.seed, sizeof r->sp.seed);
    r->lookup = c->lookup;
    TRY(rc = get_int(b, "ds4_lookup", 0, DS4_DRAFT_PASS_MAX - 1, &x, e));
    if (rc) r->lookup = (int)x;
    r->mtp_draft = c->mtp_draft;
    TRY(rc = get_int(b, "ds4_mtp_draft", 0, DS4_DRAFT_PASS_MAX - 1, &x, e));
    if (rc && x > 0 && !c->has_mtp)
        return api_bad(e, "ds4_mtp_draft", "'ds4_mtp_draft': the model has no MTP block (start the server "
                       "with --mtp FILE)");
    if (rc) r->mtp_draft = (int)x;
    r->temperature_echo = r->sp.temperature;
    r->top_p_echo = r->sp.top_p;
    /* OpenAI fields the engine has no equivalent for: accepted and ignored
     * when they would change nothing, refused when they would */
    TRY(rc = get_int(b, "n", 1, 1 << 20, &x, e));
    if (rc && x != 1) return api_bad(e, "n", "only n=1 is supported");
    json_t *lp = field(b, "logprobs");
    if (r->api == API_CHAT) {
        /* logprobs: bool, top_logprobs: 0..20 (needs logprobs) */
        if (lp && !json_is_boolean(lp)) return api_bad(e, "logprobs", "'logprobs' must be a boolean");
        r->logprobs = lp && json_is_true(lp);
        TRY(rc = get_int(b, "top_logprobs", 0, 20, &x, e));
        if (rc && !r->logprobs) return api_bad(e, "top_logprobs", "top_logprobs needs logprobs: true");
        if (rc) r->top_logprobs = (int)x;
    } else if (r->api == API_COMPLETIONS) {
        /* the legacy shape: logprobs is the number of alternatives */
        TRY(rc = get_int(b, "logprobs", 0, 20, &x, e));
        if (rc) { r->logprobs = 1; r->top_logprobs = (int)x; }
    } else if (lp && !json_is_false(lp) && !(json_is_integer(lp) && json_integer_value(lp) == 0)) {
        return api_bad(e, "logprobs", "logprobs are only supported on /v1/chat/completions and /v1/completions");
    }
    return 0;
}

static int parse_max_tokens(request *r, json_t *b, const char *const *names, int required,
                            api_error *e) {
    long long x = 0;
    for (int i = 0; names[i]; i++) {
        int rc;
        TRY(rc = get_int(b, names[i], 1, 1LL << 40, &x, e));
        if (!rc) continue;
        if (x > r->srv->ctx)
            return api_bad(e, names[i], "%s is too large: %lld. This model's context is %d "
                           "tokens (prompt included)", names[i], x, r->srv->ctx);
        r->max_tokens = (int)x;
        return 0;
    }
    if (required) return api_bad(e, names[0], "%s: field required", names[0]);
    r->max_tokens = r->srv->cfg.default_max_tokens;
    return 0;
}

static int parse_stop(request *r, json_t *b, const char *k, api_error *e) {
    json_t *v = field(b, k);
    if (!v) return 0;
    json_t *one = NULL;
    size_t n;
    if (json_is_string(v)) { one = v; n = 1; }
    else if (json_is_array(v)) n = json_array_size(v);
    else return api_bad(e, k, "'%s' must be a string or an array of strings", k);
    if (n > 16) return api_bad(e, k, "'%s' may hold at most 16 sequences", k);
    r->stop = calloc(n + 1, sizeof(char *));
    if (!r->stop) return api_oom(e);
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s)) return api_bad(e, k, "'%s' must contain only strings", k);
        if (json_string_length(s) == 0) continue;   /* an empty stop would stop at once */
        r->stop[r->n_stop++] = request_strdup(r, json_string_value(s), json_string_length(s));
    }
    return 0;
}

static int parse_stream(request *r, json_t *b, api_error *e) {
    TRY(get_bool(b, "stream", &r->stream, e));
    json_t *so = field(b, "stream_options");
    if (so) {
        if (!json_is_object(so)) return api_bad(e, "stream_options", "'stream_options' must be an object");
        TRY(get_bool(so, "include_usage", &r->include_usage, e));
    }
    return 0;
}

/* Thinking: the server default, the model alias, then the request's own
 * controls, in that order of precedence (later wins). */
static int effort_to_think(const char *s, ds4_think *t) {
    if (!strcmp(s, "none") || !strcmp(s, "minimal") || !strcmp(s, "disabled")) *t = DS4_THINK_NONE;
    else if (!strcmp(s, "low") || !strcmp(s, "medium") || !strcmp(s, "high")) *t = DS4_THINK_HIGH;
    else if (!strcmp(s, "xhigh") || !strcmp(s, "max")) *t = DS4_THINK_MAX;
    else return -1;
    return 0;
}

static int parse_thinking(request *r, json_t *b, api_error *e) {
    ds4_think t = r->srv->cfg.default_think;
    if (r->model && !strcmp(r->model, "deepseek-chat")) t = DS4_THINK_NONE;
    if (r->model && !strcmp(r->model, "deepseek-reasoner")) t = DS4_THINK_HIGH;

    json_t *th = field(b, "thinking");
    if (th) {
        if (json_is_boolean(th)) t = json_is_true(th) ? DS4_THINK_HIGH : DS4_THINK_NONE;
        else if (!json_is_object(th)) return api_bad(e, "thinking", "'thinking' must be an object");
        else {
            const char *ty = NULL;
            TRY(get_str(th, "type", &ty, e));
            if (!ty) return api_bad(e, "thinking.type", "thinking.type: field required");
            if (!strcmp(ty, "disabled")) t = DS4_THINK_NONE;
            else if (!strcmp(ty, "enabled") || !strcmp(ty, "adaptive")) {
                if (t == DS4_THINK_NONE) t = DS4_THINK_HIGH;
                long long bt = 0;
                int rc;
                TRY(rc = get_int(th, "budget_tokens", 1, 1LL << 40, &bt, e));
                if (rc) r->think_budget = bt > r->srv->ctx ? r->srv->ctx : (int)bt;
            } else {
                return api_bad(e, "thinking.type", "thinking.type must be 'enabled', 'disabled' "
                               "or 'adaptive', got '%s'", ty);
            }
        }
    }
    int on = 0;
    int rc;
    TRY(rc = get_bool(b, "think", &on, e));             /* Ollama style */
    if (rc) t = on ? (t == DS4_THINK_NONE ? DS4_THINK_HIGH : t) : DS4_THINK_NONE;
    TRY(rc = get_bool(b, "enable_thinking", &on, e));   /* Qwen/vLLM style */
    if (rc) t = on ? (t == DS4_THINK_NONE ? DS4_THINK_HIGH : t) : DS4_THINK_NONE;
    json_t *ctk = field(b, "chat_template_kwargs");
    if (ctk && !json_is_object(ctk))
        return api_bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (ctk) {
        TRY(rc = get_bool(ctk, "thinking", &on, e));
        if (rc) t = on ? (t == DS4_THINK_NONE ? DS4_THINK_HIGH : t) : DS4_THINK_NONE;
        TRY(rc = get_bool(ctk, "enable_thinking", &on, e));
        if (rc) t = on ? (t == DS4_THINK_NONE ? DS4_THINK_HIGH : t) : DS4_THINK_NONE;
    }
    const char *eff = NULL;
    TRY(get_str(b, "reasoning_effort", &eff, e));
    if (eff && effort_to_think(eff, &t))
        return api_bad(e, "reasoning_effort", "reasoning_effort must be one of none, minimal, "
                       "low, medium, high, xhigh, max; got '%s'", eff);
    json_t *re = field(b, "reasoning");
    if (re) {
        if (!json_is_object(re)) return api_bad(e, "reasoning", "'reasoning' must be an object");
        const char *ef = NULL;
        TRY(get_str(re, "effort", &ef, e));
        if (ef && effort_to_think(ef, &t))
            return api_bad(e, "reasoning.effort", "reasoning.effort must be one of none, minimal, "
                           "low, medium, high, xhigh, max; got '%s'", ef);
        if (ef) eff = ef;
        int en = 1;
        TRY(rc = get_bool(re, "enabled", &en, e));      /* OpenRouter style */
        if (rc && !en) t = DS4_THINK_NONE;
    }
    if (eff) r->effort = request_strdup(r, eff, strlen(eff));
    /* think-max only where the context allows it (PROMPT_FORMAT.md 4) */
    if (t == DS4_THINK_MAX && r->srv->ctx < DS4_THINK_MAX_MIN_CTX) t = DS4_THINK_HIGH;
    r->ro.think = t;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* tools                                                                     */
/* ------------------------------------------------------------------------ */

/* Append {"type":"function","function":fn} where fn is built from `src`
 * without its "type" key (Responses tools are flat). */
static int add_tool(request *r, json_t *fn, const char *param, api_error *e) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name || !*name) return api_bad(e, param, "%s: every tool needs a non-empty 'name'", param);
    json_t *p = json_object_get(fn, "parameters");
    if (p && !json_is_object(p) && !json_is_null(p))
        return api_bad(e, param, "%s: tool '%s': 'parameters' must be an object", param, name);
    json_t *d = json_object_get(fn, "description");
    if (d && !json_is_string(d) && !json_is_null(d))
        return api_bad(e, param, "%s: tool '%s': 'description' must be a string", param, name);
    if (!r->tools) r->tools = json_array();
    json_t *t = json_object();
    json_object_set_new(t, "type", json_string("function"));
    json_object_set(t, "function", fn);
    json_array_append_new(r->tools, t);
    return 0;
}

static int tool_exists(request *r, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(r->tools, i, t) {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name)) return 1;
    }
    return 0;
}

static int parse_tools(request *r, json_t *b, api_error *e) {
    json_t *tools = field(b, "tools");
    if (!tools) return 0;
    if (!json_is_array(tools)) return api_bad(e, "tools", "'tools' must be an array");
    r->tools_orig = json_incref(tools);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (!json_is_object(t)) return api_bad(e, "tools", "tools[%zu] must be an object", i);
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (r->api == API_CHAT) {
            if (ty && strcmp(ty, "function"))
                return api_bad(e, "tools", "tools[%zu]: unsupported tool type '%s'", i, ty);
            json_t *fn = json_object_get(t, "function");
            if (!json_is_object(fn))
                return api_bad(e, "tools", "tools[%zu].function must be an object", i);
            TRY(add_tool(r, fn, "tools", e));
        } else if (r->api == API_RESPONSES) {
            if (!ty || strcmp(ty, "function")) {
                /* hosted tools (web_search, file_search, ...) do not exist here */
                if (r->srv->cfg.verbose)
                    log_msg("responses: ignoring tool of type '%s'", ty ? ty : "?");
                continue;
            }
            json_t *fn = json_object();
            const char *k;
            json_t *v;
            json_object_foreach(t, k, v)
                if (strcmp(k, "type")) json_object_set(fn, k, v);
            int rc = add_tool(r, fn, "tools", e);
            json_decref(fn);
            TRY(rc);
        } else {   /* Anthropic: {name, description, input_schema} */
            if (ty && strcmp(ty, "custom")) {
                if (r->srv->cfg.verbose)
                    log_msg("messages: ignoring server tool of type '%s'", ty);
                continue;
            }
            json_t *fn = json_object();
            json_t *v;
            if ((v = json_object_get(t, "name"))) json_object_set(fn, "name", v);
            if ((v = json_object_get(t, "description"))) json_object_set(fn, "description", v);
            v = json_object_get(t, "input_schema");
            if (v && !json_is_object(v)) {
                json_decref(fn);
                return api_bad(e, "tools", "tools[%zu].input_schema must be an object", i);
            }
            if (v) json_object_set(fn, "parameters", v);
            int rc = add_tool(r, fn, "tools", e);
            json_decref(fn);
            TRY(rc);
        }
    }
    return 0;
}

static int parse_tool_choice(request *r, json_t *b, api_error *e) {
    int par = 1;
    int rc;
    TRY(rc = get_bool(b, "parallel_tool_calls", &par, e));
    if (rc) r->parallel_tool_calls = par;
    json_t *tc = field(b, "tool_choice");
    if (tc) r->tool_choice = json_incref(tc);
    const char *mode = "auto", *name = NULL;
    if (tc) {
        if (json_is_string(tc)) {
            mode = json_string_value(tc);
        } else if (json_is_object(tc)) {
            const char *ty = json_string_value(json_object_get(tc, "type"));
            if (!ty) return api_bad(e, "tool_choice", "tool_choice.type: field required");
            if (r->api == API_MESSAGES) {
                int dis = 0;
                TRY(rc = get_bool(tc, "disable_parallel_tool_use", &dis, e));
                if (rc && dis) r->parallel_tool_calls = 0;
                if (!strcmp(ty, "auto") || !strcmp(ty, "none")) mode = ty;
                else if (!strcmp(ty, "any")) mode = "required";
                else if (!strcmp(ty, "tool")) {
                    mode = "named";
                    name = json_string_value(json_object_get(tc, "name"));
                } else return api_bad(e, "tool_choice.type", "unknown tool_choice.type '%s'", ty);
            } else if (!strcmp(ty, "function")) {
                mode = "named";
                json_t *fn = json_object_get(tc, "function");
                name = json_string_value(json_object_get(fn ? fn : tc, "name"));
            } else if (!strcmp(ty, "allowed_tools")) {
                const char *m = json_string_value(json_object_get(tc, "mode"));
                mode = m && !strcmp(m, "required") ? "required" : "auto";
            } else {
                return api_bad(e, "tool_choice", "unsupported tool_choice type '%s'", ty);
            }
            if (!strcmp(mode, "named") && !name)
                return api_bad(e, "tool_choice", "tool_choice names no tool");
        } else {
            return api_bad(e, "tool_choice", "'tool_choice' must be a string or an object");
        }
    }
    if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required") &&
        strcmp(mode, "named"))
        return api_bad(e, "tool_choice", "tool_choice must be 'none', 'auto', 'required' or a "
                       "named function, got '%s'", mode);
    int n_tools = r->tools ? (int)json_array_size(r->tools) : 0;
    if (!strcmp(mode, "none") || n_tools == 0) {
        if (!strcmp(mode, "named") || (!strcmp(mode, "required") && r->api != API_RESPONSES))
            if (n_tools == 0)
                return api_bad(e, "tool_choice", "tool_choice requires tools, but none were given");
        r->has_tools = 0;
        return 0;
    }
    r->has_tools = 1;
    r->parse_tools = 1;
    r->single_call = !r->parallel_tool_calls;
    if (r->ro.format == DS4_FORMAT_GLM) {
        /* GLM: the call opens at once; the name ends at the first "<" */
        if (!strcmp(mode, "named") && !tool_exists(r, name))
            return api_bad(e, "tool_choice", "tool_choice names '%s', which is not in tools", name);
        if (!strcmp(mode, "required") || !strcmp(mode, "named")) {
            ds4_buf f = { 0 };
            if (ds4_buf_printf(&f, "<tool_call>%s", !strcmp(mode, "named") ? name : "") ||
                !(r->forced_prefix = request_own(r, f.p))) {
                ds4_buf_free(&f);
                return api_oom(e);
            }
        }
    } else if (!strcmp(mode, "required")) {
        r->forced_prefix = request_strdup(r, "\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"",
                                          strlen("\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\""));
    } else if (!strcmp(mode, "named")) {
        if (!tool_exists(r, name))
            return api_bad(e, "tool_choice", "tool_choice names '%s', which is not in tools", name);
        ds4_buf f = { 0 };
        if (ds4_buf_printf(&f, "\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"%s\">\n", name) ||
            !(r->forced_prefix = request_own(r, f.p))) {
            ds4_buf_free(&f);
            return api_oom(e);
        }
    }
    return 0;
}

/* Attach the tools to the first system/developer message, or to an empty
 * system message inserted first (PROMPT_FORMAT.md 6). */
static int attach_tools(request *r, api_error *e) {
    if (!r->has_tools) return 0;
    ds4_buf js = { 0 };
    if (ds4_json_py_dump(r->tools, DS4_JSON_PY_DEFAULT, &js)) {
        ds4_buf_free(&js);
        return api_bad(e, "tools", "tools cannot be serialized");
    }
    char *s = request_own(r, js.p);
    if (!s) return api_oom(e);
    r->tools_json = s;
    if (r->n_msgs > 0 && (r->msgs[0].role == DS4_ROLE_SYSTEM || r->msgs[0].role == DS4_ROLE_DEVELOPER)) {
        r->msgs[0].tools_json = s;
        return 0;
    }
    if (!add_msg(r, DS4_ROLE_SYSTEM)) return api_oom(e);
    memmove(r->msgs + 1, r->msgs, (size_t)(r->n_msgs - 1) * sizeof *r->msgs);
    memset(&r->msgs[0], 0, sizeof r->msgs[0]);
    r->msgs[0].role = DS4_ROLE_SYSTEM;
    r->msgs[0].tools_json = s;
    return 0;
}

static int attach_response_format(request *r, json_t *rf, const char *param, api_error *e) {
    if (!rf) return 0;
    if (!json_is_object(rf)) return api_bad(e, param, "'%s' must be an object", param);
    const char *ty = json_string_value(json_object_get(rf, "type"));
    if (!ty) return api_bad(e, param, "%s.type: field required (a string)", param);
    if (!strcmp(ty, "text")) return 0;
    if (strcmp(ty, "json_object") && strcmp(ty, "json_schema"))
        return api_bad(e, param, "unsupported %s type '%s'", param, ty);
    ds4_buf js = { 0 };
    if (ds4_json_py_dump(rf, DS4_JSON_PY_DEFAULT, &js)) {
        ds4_buf_free(&js);
        return api_bad(e, param, "%s cannot be serialized", param);
    }
    char *s = request_own(r, js.p);
    if (r->n_msgs > 0 && (r->msgs[0].role == DS4_ROLE_SYSTEM || r->msgs[0].role == DS4_ROLE_DEVELOPER)) {
        r->msgs[0].response_format_json = s;
        return 0;
    }
    if (!add_msg(r, DS4_ROLE_SYSTEM)) return api_oom(e);
    memmove(r->msgs + 1, r->msgs, (size_t)(r->n_msgs - 1) * sizeof *r->msgs);
    memset(&r->msgs[0], 0, sizeof r->msgs[0]);
    r->msgs[0].role = DS4_ROLE_SYSTEM;
    r->msgs[0].response_format_json = s;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* content                                                                   */
/* ------------------------------------------------------------------------ */

/* Text of a content value: a string, or an array of text parts joined by a
 * blank line (each part is a paragraph of its own).  `kinds` lists the text
 * part types accepted.  Images, files, audio and documents (valid in the
 * APIs, invisible to this text-only model) become a placeholder line: an
 * agent's history keeps them for the rest of the session, and refusing them
 * would end the session; the placeholder lets the model say what it cannot
 * see.  Other part types are refused as unknown. */
static void omitted(ds4_buf *out, int *first, const char *ty) {
    if (!*first) ds4_buf_puts(out, "\n\n");
    ds4_buf_printf(out, "[%s omitted: this model reads text only]", ty);
    *first = 0;
}

static int content_text(json_t *c, const char *param, const char *const *kinds, ds4_buf *out,
                        api_error *e) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return ds4_buf_append(out, json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) return api_bad(e, param, "%s must be a string or an array of content parts", param);
    size_t i;
    json_t *p;
    int first = 1;
    json_array_foreach(c, i, p) {
        if (json_is_string(p)) {   /* lenient: a bare string part */
            if (!first) ds4_buf_puts(out, "\n\n");
            ds4_buf_append(out, json_string_value(p), json_string_length(p));
            first = 0;
            continue;
        }
        if (!json_is_object(p)) return api_bad(e, param, "%s[%zu] must be an object", param, i);
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (!ty) return api_bad(e, param, "%s[%zu].type: field required", param, i);
        int ok = 0;
        for (int k = 0; kinds[k]; k++) if (!strcmp(ty, kinds[k])) ok = 1;
        if (!ok) {
            if (strstr(ty, "image") || strstr(ty, "file") || strstr(ty, "audio") ||
                !strcmp(ty, "document")) {
                omitted(out, &first, ty);
                continue;
            }
            if (!strcmp(ty, "refusal")) continue;
            return api_bad(e, param, "%s[%zu]: unknown content type '%s'", param, i, ty);
        }
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t)) return api_bad(e, param, "%s[%zu].text must be a string", param, i);
        if (!first) ds4_buf_puts(out, "\n\n");
        ds4_buf_append(out, json_string_value(t), json_string_length(t));
        first = 0;
    }
    return ds4_buf_failed(out) ? api_oom(e) : 0;   /* the appends above are sticky */
}

static const char *const OPENAI_TEXT_KINDS[] = { "text", "input_text", "output_text", NULL };
static const char *const ANTHROPIC_TEXT_KINDS[] = { "text", NULL };

static int set_content_json(request *r, ds4_message *m, json_t *c, const char *param,
                            const char *const *kinds, api_error *e) {
    ds4_buf b = { 0 };
    if (content_text(c, param, kinds, &b, e) < 0) { ds4_buf_free(&b); return -1; }
    if (b.n) {
        m->content = request_own(r, b.p);
        m->content_len = b.n;
    } else {
        ds4_buf_free(&b);
    }
    return 0;
}

/* Tool calls of an assistant message, from any family (filled by caller). */
static ds4_tool_call *alloc_calls(request *r, int n) {
    ds4_tool_call *c = calloc((size_t)n, sizeof *c);
    if (!c) return NULL;
    request_own(r, (char *)c);
    return c;
}

static const char *args_string(request *r, json_t *a) {
    if (!a || json_is_null(a)) return request_strdup(r, "{}", 2);
    if (json_is_string(a)) return request_strdup(r, json_string_value(a), json_string_length(a));
    ds4_buf b = { 0 };
    ds4_json_py_dump(a, DS4_JSON_PY_DEFAULT, &b);
    if (ds4_buf_failed(&b)) { ds4_buf_free(&b); r->oom = 1; return NULL; }
    char *s = b.p ? b.p : strdup("{}");
    if (!s) r->oom = 1;
    return request_own(r, s);
}

/* ------------------------------------------------------------------------ */
/* OpenAI chat                                                               */
/* ------------------------------------------------------------------------ */

static int chat_messages(request *r, json_t *b, api_error *e) {
    json_t *ms = json_object_get(b, "messages");
    if (!ms || json_is_null(ms)) return api_bad(e, "messages", "'messages' is required");
    if (!json_is_array(ms)) return api_bad(e, "messages", "'messages' must be an array");
    if (json_array_size(ms) == 0) return api_bad(e, "messages", "'messages' must not be empty");
    size_t i;
    json_t *m;
    char param[64];
    json_array_foreach(ms, i, m) {
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return api_bad(e, "messages", "%s must be an object", param);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) return api_bad(e, "messages", "%s.role: field required (a string)", param);
        ds4_role ro;
        if (!strcmp(role, "system")) ro = DS4_ROLE_SYSTEM;
        else if (!strcmp(role, "developer")) ro = DS4_ROLE_DEVELOPER;
        else if (!strcmp(role, "user")) ro = DS4_ROLE_USER;
        else if (!strcmp(role, "assistant")) ro = DS4_ROLE_ASSISTANT;
        else if (!strcmp(role, "tool") || !strcmp(role, "function")) ro = DS4_ROLE_TOOL;
        else if (!strcmp(role, "latest_reminder")) ro = DS4_ROLE_LATEST_REMINDER;
        else return api_bad(e, "messages", "%s: unknown role '%s'", param, role);
        ds4_message *x = add_msg(r, ro);
        if (!x) return api_oom(e);
        TRY(set_content_json(r, x, json_object_get(m, "content"), param, OPENAI_TEXT_KINDS, e));
        if (ro == DS4_ROLE_TOOL) {
            const char *id = json_string_value(json_object_get(m, "tool_call_id"));
            if (id) x->tool_call_id = request_strdup(r, id, strlen(id));
        }
        if (ro == DS4_ROLE_ASSISTANT) {
            json_t *rc = field(m, "reasoning_content");
            if (!rc) rc = field(m, "reasoning");
            if (rc && json_is_string(rc) && json_string_length(rc)) {
                x->reasoning = request_strdup(r, json_string_value(rc), json_string_length(rc));
                x->reasoning_len = json_string_length(rc);
            }
            json_t *tcs = field(m, "tool_calls");
            if (tcs) {
                if (!json_is_array(tcs)) return api_bad(e, "messages", "%s.tool_calls must be an array", param);
                int n = (int)json_array_size(tcs);
                ds4_tool_call *calls = n ? alloc_calls(r, n) : NULL;
                if (n && !calls) return api_oom(e);
                for (int k = 0; k < n; k++) {
                    json_t *tc = json_array_get(tcs, (size_t)k);
                    json_t *fn = json_object_get(tc, "function");
                    const char *name = json_string_value(json_object_get(fn, "name"));
                    if (!json_is_object(tc) || !json_is_object(fn) || !name)
                        return api_bad(e, "messages", "%s.tool_calls[%d] needs function.name", param, k);
                    const char *id = json_string_value(json_object_get(tc, "id"));
                    calls[k].id = id ? request_strdup(r, id, strlen(id)) : NULL;
                    calls[k].name = request_strdup(r, name, strlen(name));
                    calls[k].arguments = args_string(r, json_object_get(fn, "arguments"));
                }
                x->tool_calls = calls;
                x->n_tool_calls = n;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Anthropic messages                                                        */
/* ------------------------------------------------------------------------ */

static int anthropic_system(request *r, json_t *b, api_error *e) {
    json_t *s = field(b, "system");
    if (!s) return 0;
    ds4_message *m = add_msg(r, DS4_ROLE_SYSTEM);
    if (!m) return api_oom(e);
    return set_content_json(r, m, s, "system", ANTHROPIC_TEXT_KINDS, e);
}

/* A system message inside Anthropic `messages` (Claude Code sends one right
 * after the first user message; Anthropic's API takes it as an instruction
 * of the operator that holds from that point of the conversation on).  In
 * the model's format system text carries no marker and only a turn
 * boundary can hold it (PROMPT_FORMAT.md 3): after the user's text it would
 * stand where the assistant turn opens, and as the last message it would
 * leave the prompt without its <｜Assistant｜>.  So it is rendered just
 * before the user turn it follows -- after the previous assistant turn's
 * end, or after the top-level system text (joined by a blank line) when it
 * follows the first user turn.  The prompt up to that turn, and so the KV
 * state kept of the earlier conversation, does not change.  As in
 * Anthropic's API it must directly follow a user message: not open the
 * conversation (that is the top-level `system`), not follow an assistant
 * message or another system message. */
static int anthropic_mid_system(request *r, json_t *m, const char *param, const char *prev,
                                api_error *e) {
    if (!prev || strcmp(prev, "user"))
        return api_bad(e, "messages", "%s: a system message in messages must directly follow a "
                       "user message (%s); put instructions for the whole conversation in the "
                       "top-level 'system'", param, prev ? "it follows a message of another role"
                       : "it is the first message");
    json_t *c = json_object_get(m, "content");
    if (!c || json_is_null(c)) return api_bad(e, "messages", "%s.content: field required", param);
    /* the user turn it follows: the trailing run of user and tool-result
     * messages (the renderer merges them into one turn) */
    int k = r->n_msgs;
    while (k > 0 && (r->msgs[k - 1].role == DS4_ROLE_USER || r->msgs[k - 1].role == DS4_ROLE_TOOL)) k--;
    char cp[80];
    snprintf(cp, sizeof cp, "%s.content", param);
    ds4_buf t = { 0 };
    if (k > 0 && r->msgs[k - 1].role == DS4_ROLE_SYSTEM) ds4_buf_puts(&t, "\n\n");
    size_t pre = t.n;
    if (content_text(c, cp, ANTHROPIC_TEXT_KINDS, &t, e)) {
        ds4_buf_free(&t);
        return e->status ? -1 : api_oom(e);
    }
    if (t.n == pre) {            /* empty: nothing to render */
        ds4_buf_free(&t);
        return 0;
    }
    if (!add_msg(r, DS4_ROLE_SYSTEM)) {
        ds4_buf_free(&t);
        return api_oom(e);
    }
    memmove(r->msgs + k + 1, r->msgs + k, (size_t)(r->n_msgs - 1 - k) * sizeof *r->msgs);
    ds4_message *x = &r->msgs[k];
    memset(x, 0, sizeof *x);
    x->role = DS4_ROLE_SYSTEM;
    x->content_len = t.n;
    if (!(x->content = request_own(r, t.p))) return api_oom(e);
    return 0;
}

static int anthropic_messages(request *r, json_t *b, api_error *e) {
    json_t *ms = json_object_get(b, "messages");
    if (!ms || json_is_null(ms)) return api_bad(e, "messages", "messages: field required");
    if (!json_is_array(ms)) return api_bad(e, "messages", "messages: must be an array");
    if (json_array_size(ms) == 0) return api_bad(e, "messages", "messages: at least one message is required");
    size_t i;
    json_t *m;
    char param[64];
    const char *prev = NULL;     /* the role of the message before */
    json_array_foreach(ms, i, m) {
        snprintf(param, sizeof param, "messages.%zu", i);
        if (!json_is_object(m)) return api_bad(e, "messages", "%s: must be an object", param);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) return api_bad(e, "messages", "%s.role: field required", param);
        const char *before = prev;
        prev = role;
        if (!strcmp(role, "system")) {
            if (anthropic_mid_system(r, m, param, before, e)) return -1;
            continue;
        }
        int user = !strcmp(role, "user");
        if (!user && strcmp(role, "assistant"))
            return api_bad(e, "messages", "%s.role: unexpected role '%s' (user, assistant or system)",
                           param, role);
        json_t *c = json_object_get(m, "content");
        if (!c || json_is_null(c)) return api_bad(e, "messages", "%s.content: field required", param);
        if (json_is_string(c)) {
            ds4_message *x = add_msg(r, user ? DS4_ROLE_USER : DS4_ROLE_ASSISTANT);
            if (!x) return api_oom(e);
            set_content(r, x, json_string_value(c), json_string_length(c));
            continue;
        }
        if (!json_is_array(c)) return api_bad(e, "messages", "%s.content: must be a string or an array", param);
        ds4_buf text = { 0 }, reasoning = { 0 };
        int ntext = 0, ncalls = 0;
        size_t nb = json_array_size(c);
        ds4_tool_call *calls = NULL;
        if (!user) {
            calls = nb ? alloc_calls(r, (int)nb) : NULL;
        }
        int rc = 0;
        for (size_t k = 0; k < nb && rc == 0; k++) {
            json_t *bl = json_array_get(c, k);
            const char *ty = json_is_object(bl) ? json_string_value(json_object_get(bl, "type")) : NULL;
            if (!ty) { rc = api_bad(e, "messages", "%s.content.%zu.type: field required", param, k); break; }
            if (!strcmp(ty, "text")) {
                json_t *t = json_object_get(bl, "text");
                if (!json_is_string(t)) { rc = api_bad(e, "messages", "%s.content.%zu.text: must be a string", param, k); break; }
                if (ntext++) ds4_buf_puts(&text, "\n\n");
                ds4_buf_append(&text, json_string_value(t), json_string_length(t));
            } else if (user && !strcmp(ty, "tool_result")) {
                /* text gathered so far is a user message before the result */
                if (ntext) {
                    ds4_message *x = add_msg(r, DS4_ROLE_USER);
                    if (!x) { rc = api_oom(e); break; }
                    set_content(r, x, text.p, text.n);
                    text.n = 0;
                    ntext = 0;
                }
                const char *id = json_string_value(json_object_get(bl, "tool_use_id"));
                if (!id) { rc = api_bad(e, "messages", "%s.content.%zu.tool_use_id: field required", param, k); break; }
                ds4_message *x = add_msg(r, DS4_ROLE_TOOL);
                if (!x) { rc = api_oom(e); break; }
                x->tool_call_id = request_strdup(r, id, strlen(id));
                ds4_buf rb = { 0 };
                json_t *is_err = json_object_get(bl, "is_error");
                if (json_is_true(is_err)) ds4_buf_puts(&rb, "Error: ");
                rc = content_text(json_object_get(bl, "content"), "tool_result.content",
                                  ANTHROPIC_TEXT_KINDS, &rb, e);
                if (rc == 0) { set_content(r, x, rb.p ? rb.p : "", rb.n); }
                ds4_buf_free(&rb);
            } else if (!user && !strcmp(ty, "thinking")) {
                json_t *t = json_object_get(bl, "thinking");
                if (json_is_string(t)) ds4_buf_append(&reasoning, json_string_value(t), json_string_length(t));
            } else if (!user && !strcmp(ty, "redacted_thinking")) {
                continue;
            } else if (!user && !strcmp(ty, "tool_use")) {
                const char *id = json_string_value(json_object_get(bl, "id"));
                const char *name = json_string_value(json_object_get(bl, "name"));
                if (!name) { rc = api_bad(e, "messages", "%s.content.%zu.name: field required", param, k); break; }
                json_t *in = json_object_get(bl, "input");
                if (in && !json_is_object(in) && !json_is_null(in)) {
                    rc = api_bad(e, "messages", "%s.content.%zu.input: must be an object", param, k);
                    break;
                }
                calls[ncalls].id = id ? request_strdup(r, id, strlen(id)) : NULL;
                calls[ncalls].name = request_strdup(r, name, strlen(name));
                calls[ncalls].arguments = args_string(r, in);
                ncalls++;
            } else if (!strcmp(ty, "image") || !strcmp(ty, "document")) {
                int first = ntext == 0;
                omitted(&text, &first, ty);
                ntext++;
            } else {
                rc = api_bad(e, "messages", "%s.content.%zu: unexpected block type '%s' in a %s "
                             "message", param, k, ty, role);
            }
        }
        if (rc == 0 && (ds4_buf_failed(&text) || ds4_buf_failed(&reasoning))) rc = api_oom(e);
        if (rc == 0 && (ntext || (!user && (ncalls || reasoning.n)) || (user && nb == 0))) {
            ds4_message *x = add_msg(r, user ? DS4_ROLE_USER : DS4_ROLE_ASSISTANT);
            if (!x) rc = api_oom(e);
            else {
                if (text.n) set_content(r, x, text.p, text.n);
                if (reasoning.n) {
                    x->reasoning = request_strdup(r, reasoning.p, reasoning.n);
                    x->reasoning_len = reasoning.n;
                }
                x->tool_calls = ncalls ? calls : NULL;
                x->n_tool_calls = ncalls;
            }
        }
        ds4_buf_free(&text);
        ds4_buf_free(&reasoning);
        if (rc) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Responses                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    ds4_buf text, reasoning;
    ds4_tool_call *calls;
    int n, cap;
    int open;
} pending_assistant;

static int flush_assistant(request *r, pending_assistant *pa, api_error *e) {
    if (!pa->open) return 0;
    ds4_message *x = add_msg(r, DS4_ROLE_ASSISTANT);
    if (!x) return api_oom(e);
    if (pa->text.n) set_content(r, x, pa->text.p, pa->text.n);
    if (pa->reasoning.n) {
        x->reasoning = request_strdup(r, pa->reasoning.p, pa->reasoning.n);
        x->reasoning_len = pa->reasoning.n;
    }
    if (pa->n) {
        x->tool_calls = pa->calls;
        x->n_tool_calls = pa->n;
        request_own(r, (char *)pa->calls);
    } else {
        free(pa->calls);
    }
    pa->calls = NULL;
    pa->n = pa->cap = 0;
    pa->text.n = pa->reasoning.n = 0;
    pa->open = 0;
    return 0;
}

static int responses_input(request *r, json_t *b, api_error *e) {
    const char *ins = NULL;
    TRY(get_str(b, "instructions", &ins, e));
    if (ins) {
        size_t n = json_string_length(json_object_get(b, "instructions"));
        r->instructions = request_strdup(r, ins, n);
        ds4_message *m = add_msg(r, DS4_ROLE_SYSTEM);
        if (!m) return api_oom(e);
        set_content(r, m, ins, n);
    }
    json_t *in = json_object_get(b, "input");
    if (!in || json_is_null(in)) return api_bad(e, "input", "'input' is required");
    if (json_is_string(in)) {
        ds4_message *m = add_msg(r, DS4_ROLE_USER);
        if (!m) return api_oom(e);
        set_content(r, m, json_string_value(in), json_string_length(in));
        return 0;
    }
    if (!json_is_array(in)) return api_bad(e, "input", "'input' must be a string or an array of items");
    if (json_array_size(in) == 0) return api_bad(e, "input", "'input' must not be empty");
    pending_assistant pa = { 0 };
    size_t i;
    json_t *it;
    char param[64];
    int rc = 0;
    json_array_foreach(in, i, it) {
        snprintf(param, sizeof param, "input[%zu]", i);
        if (!json_is_object(it)) { rc = api_bad(e, "input", "%s must be an object", param); break; }
        const char *ty = json_string_value(json_object_get(it, "type"));
        const char *role = json_string_value(json_object_get(it, "role"));
        if (!ty && role) ty = "message";
        if (!ty) { rc = api_bad(e, "input", "%s.type: field required", param); break; }
        if (!strcmp(ty, "message")) {
            if (!role) { rc = api_bad(e, "input", "%s.role: field required", param); break; }
            ds4_role ro;
            if (!strcmp(role, "user")) ro = DS4_ROLE_USER;
            else if (!strcmp(role, "assistant")) ro = DS4_ROLE_ASSISTANT;
            else if (!strcmp(role, "system")) ro = DS4_ROLE_SYSTEM;
            else if (!strcmp(role, "developer")) ro = DS4_ROLE_DEVELOPER;
            else { rc = api_bad(e, "input", "%s: unknown role '%s'", param, role); break; }
            if (ro == DS4_ROLE_ASSISTANT) {
                pa.open = 1;
                if (pa.text.n) ds4_buf_puts(&pa.text, "\n\n");
                if ((rc = content_text(json_object_get(it, "content"), param, OPENAI_TEXT_KINDS,
                                       &pa.text, e)) < 0) break;
                continue;
            }
            if ((rc = flush_assistant(r, &pa, e)) < 0) break;
            ds4_message *m = add_msg(r, ro);
            if (!m) { rc = api_oom(e); break; }
            if ((rc = set_content_json(r, m, json_object_get(it, "content"), param,
                                       OPENAI_TEXT_KINDS, e)) < 0) break;
        } else if (!strcmp(ty, "reasoning")) {
            pa.open = 1;
            json_t *c = json_object_get(it, "content");
            size_t k;
            json_t *p;
            if (json_is_array(c)) json_array_foreach(c, k, p) {
                json_t *t = json_object_get(p, "text");
                if (json_is_string(t)) ds4_buf_append(&pa.reasoning, json_string_value(t), json_string_length(t));
            }
        } else if (!strcmp(ty, "function_call")) {
            const char *name = json_string_value(json_object_get(it, "name"));
            const char *cid = json_string_value(json_object_get(it, "call_id"));
            if (!name || !cid) { rc = api_bad(e, "input", "%s: function_call needs name and call_id", param); break; }
            if (pa.n == pa.cap) {
                int nc = pa.cap ? pa.cap * 2 : 4;
                ds4_tool_call *c = realloc(pa.calls, (size_t)nc * sizeof *c);
                if (!c) { rc = api_oom(e); break; }
                pa.calls = c;
                pa.cap = nc;
            }
            pa.open = 1;
            ds4_tool_call *c = &pa.calls[pa.n++];
            memset(c, 0, sizeof *c);
            c->id = request_strdup(r, cid, strlen(cid));
            c->name = request_strdup(r, name, strlen(name));
            c->arguments = args_string(r, json_object_get(it, "arguments"));
        } else if (!strcmp(ty, "function_call_output")) {
            if ((rc = flush_assistant(r, &pa, e)) < 0) break;
            const char *cid = json_string_value(json_object_get(it, "call_id"));
            if (!cid) { rc = api_bad(e, "input", "%s.call_id: field required", param); break; }
            ds4_message *m = add_msg(r, DS4_ROLE_TOOL);
            if (!m) { rc = api_oom(e); break; }
            m->tool_call_id = request_strdup(r, cid, strlen(cid));
            if ((rc = set_content_json(r, m, json_object_get(it, "output"), param,
                                       OPENAI_TEXT_KINDS, e)) < 0) break;
        } else if (!strcmp(ty, "item_reference")) {
            rc = api_bad(e, "input", "%s: item_reference is not supported (responses are not "
                         "stored; send the items themselves)", param);
            break;
        } else {
            rc = api_bad(e, "input", "%s: unsupported input item type '%s'", param, ty);
            break;
        }
    }
    if (rc == 0) rc = flush_assistant(r, &pa, e);
    free(pa.calls);
    ds4_buf_free(&pa.text);
    ds4_buf_free(&pa.reasoning);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Completions                                                               */
/* ------------------------------------------------------------------------ */

static int completions_prompt(request *r, json_t *b, api_error *e) {
    json_t *p = json_object_get(b, "prompt");
    if (!p || json_is_null(p)) return api_bad(e, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        /* GLM has no BOS: its "[gMASK]<sop>" is the client's to write */
        if (r->ro.format != DS4_FORMAT_GLM && strncmp(json_string_value(p), S_BOS, strlen(S_BOS)))
            ds4_buf_puts(&r->prompt, S_BOS);
        ds4_buf_append(&r->prompt, json_string_value(p), json_string_length(p));
        return 0;
    }
    if (json_is_array(p) && json_array_size(p) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(p, i, v) {
            if (!json_is_integer(v))
                return api_bad(e, "prompt", "'prompt' must be a string, or one array of token ids"
                               " (several prompts are not supported)");
            long long id = json_integer_value(v);
            if (id < 0 || id >= r->srv->n_vocab)
                return api_bad(e, "prompt", "prompt[%zu]: token id %lld is out of range", i, id);
            if (i == 0 && r->srv->sp->bos >= 0 && id != r->srv->sp->bos) ds4_tokens_push(&r->tokens, r->srv->sp->bos);
            ds4_tokens_push(&r->tokens, (int32_t)id);
        }
        r->raw_ids = 1;
        return 0;
    }
    return api_bad(e, "prompt", "'prompt' must be a string or an array of token ids");
}

/* ------------------------------------------------------------------------ */
/* entry points                                                              */
/* ------------------------------------------------------------------------ */

/* The exact sampled DSML of assistant tool calls the memory still knows. */
static void replay_tool_calls(request *r) {
    for (int i = 0; i < r->n_msgs; i++) {
        ds4_message *m = &r->msgs[i];
        if (m->role != DS4_ROLE_ASSISTANT || m->n_tool_calls <= 0) continue;
        char *block = NULL, *reasoning = NULL;
        if (toolmem_match(r->srv->tm, m->tool_calls, m->n_tool_calls, &block, &reasoning)) {
            m->dsml_exact = request_own(r, block);
            /* a client that dropped the reasoning, or whose SDK mangled it
             * while merging stream deltas, gets the one the model wrote */
            if (reasoning && (!m->reasoning_len ||
                              toolmem_merge_artifact(m->reasoning, m->reasoning_len, reasoning,
                                                     strlen(reasoning)))) {
                m->reasoning = request_own(r, reasoning);
                m->reasoning_len = m->reasoning ? strlen(reasoning) : 0;
            } else {
                free(reasoning);
            }
            r->replay_exact++;
        } else {
            r->replay_canonical++;
            int ids = 1;
            for (int k = 0; k < m->n_tool_calls; k++) ids = ids && m->tool_calls[k].id;
            if (ids) r->tool_misses++;
        }
    }
}

/* Keys whose string values are free text, read with their length (see the
 * top of the file); the nearest key above a string decides. */
static int text_key(const char *k) {
    static const char *const keys[] = { "content", "text", "thinking", "reasoning_content",
                                        "reasoning", "output", "prompt", "input", "system",
                                        NULL };
    for (int i = 0; keys[i]; i++) if (!strcmp(k, keys[i])) return 1;
    return 0;
}

/* 1 when a string outside free text holds a NUL; `path` names it. */
static int find_nul(json_t *v, int text, char *path, size_t len, size_t cap) {
    size_t i;
    const char *k;
    json_t *x;
    int n;
    switch (json_typeof(v)) {
    case JSON_STRING:
        return !text && memchr(json_string_value(v), 0, json_string_length(v)) != NULL;
    case JSON_ARRAY:
        json_array_foreach(v, i, x) {
            n = snprintf(path + len, cap - len, "[%zu]", i);
            if (find_nul(x, text, path, n > 0 && (size_t)n < cap - len ? len + (size_t)n : len, cap))
                return 1;
        }
        break;
    case JSON_OBJECT:
        json_object_foreach(v, k, x) {
            n = snprintf(path + len, cap - len, "%s%.60s", len ? "." : "", k);
            if (find_nul(x, text_key(k), path, n > 0 && (size_t)n < cap - len ? len + (size_t)n : len,
                         cap))
                return 1;
        }
        break;
    default:
        break;
    }
    path[len] = 0;
    return 0;
}

static int check_nuls(json_t *b, api_error *e) {
    char path[200] = "";
    if (!find_nul(b, 0, path, 0, sizeof path)) return 0;
    return api_bad(e, NULL, "%s: a NUL character (\\u0000) is allowed only in text", path);
}

int conv_model_name_ok(const char *id, size_t n) {
    return n >= 1 && n <= CONV_MODEL_NAME_MAX && !memchr(id, 0, n);
}

request *conv_parse(const server_ctx *srv, api_kind api, json_t *b, api_error *e) {
    if (!json_is_object(b)) {
        api_bad(e, NULL, "the request body must be a JSON object");
        return NULL;
    }
    if (check_nuls(b, e)) return NULL;
    request *r = request_new(api);
    if (!r) { api_err_set(e, 500, "server_error", NULL, NULL, "out of memory"); return NULL; }
    r->srv = srv;
    /* the model's family decides the prompt format and the call syntax */
    if (srv->model) r->ro.format = ds4_model_format(srv->model);
    const char *model = NULL;
    if (get_str(b, "model", &model, e) < 0) goto fail;
    /* any name is served by the one model (agents send their own names);
     * GET /v1/models/{id} accepts the same ones (conv_model_name_ok) */
    if (model && *model && !conv_model_name_ok(model, strlen(model))) {
        api_err_set(e, 404, api == API_MESSAGES ? "not_found_error" : "invalid_request_error",
                    "model_not_found", "model", "The model '%.100s...' does not exist: model "
                    "names are at most %d bytes", model, CONV_MODEL_NAME_MAX);
        goto fail;
    }
    if (model && *model) r->model = request_strdup(r, model, strlen(model));
    else r->model = request_strdup(r, r->srv->model_id, strlen(r->srv->model_id));
    if (parse_stream(r, b, e) < 0) goto fail;
    if (parse_sampling(r, b, api == API_MESSAGES ? 1.0 : 2.0, e) < 0) goto fail;

    switch (api) {
    case API_CHAT: {
        static const char *const mt[] = { "max_completion_tokens", "max_tokens", NULL };
        if (parse_max_tokens(r, b, mt, 0, e) < 0) goto fail;
        if (parse_stop(r, b, "stop", e) < 0) goto fail;
        if (parse_thinking(r, b, e) < 0) goto fail;
        if (parse_tools(r, b, e) < 0) goto fail;
        if (parse_tool_choice(r, b, e) < 0) goto fail;
        if (chat_messages(r, b, e) < 0) goto fail;
        if (attach_response_format(r, field(b, "response_format"), "response_format", e) < 0)
            goto fail;
        break;
    }
    case API_MESSAGES: {
        static const char *const mt[] = { "max_tokens", NULL };
        if (parse_max_tokens(r, b, mt, 1, e) < 0) goto fail;
        if (parse_stop(r, b, "stop_sequences", e) < 0) goto fail;
        if (parse_thinking(r, b, e) < 0) goto fail;
        json_t *oc = field(b, "output_config");
        const char *eff = NULL;
        if (oc && !json_is_object(oc)) {
            api_bad(e, "output_config", "'output_config' must be an object");
            goto fail;
        }
        if (oc && get_str(oc, "effort", &eff, e) < 0) goto fail;
        if (eff && r->ro.think != DS4_THINK_NONE && !strcmp(eff, "max") &&
            r->srv->ctx >= DS4_THINK_MAX_MIN_CTX)
            r->ro.think = DS4_THINK_MAX;
        if (parse_tools(r, b, e) < 0) goto fail;
        if (parse_tool_choice(r, b, e) < 0) goto fail;
        if (anthropic_system(r, b, e) < 0) goto fail;
        if (anthropic_messages(r, b, e) < 0) goto fail;
        break;
    }
    case API_RESPONSES: {
        static const char *const mt[] = { "max_output_tokens", NULL };
        if (parse_max_tokens(r, b, mt, 0, e) < 0) goto fail;
        if (field(b, "previous_response_id")) {
            api_bad(e, "previous_response_id", "previous_response_id is not supported: this "
                    "server does not store responses (send the whole input)");
            goto fail;
        }
        if (parse_thinking(r, b, e) < 0) goto fail;
        if (parse_tools(r, b, e) < 0) goto fail;
        if (parse_tool_choice(r, b, e) < 0) goto fail;
        if (responses_input(r, b, e) < 0) goto fail;
        json_t *tx = field(b, "text");
        if (tx && !json_is_object(tx)) {
            api_bad(e, "text", "'text' must be an object");
            goto fail;
        }
        json_t *f = tx ? field(tx, "format") : NULL;
        if (f && !json_is_object(f)) {
            api_bad(e, "text.format", "'text.format' must be an object");
            goto fail;
        }
        if (f) {
            json_t *tyv = json_object_get(f, "type");
            if (!json_is_string(tyv)) {
                api_bad(e, "text.format.type", "text.format.type: %s", tyv && !json_is_null(tyv) ?
                        "must be a string" : "field required");
                goto fail;
            }
            json_t *rf;
            if (!strcmp(json_string_value(tyv), "json_schema")) {
                /* the chat form: {"type":"json_schema","json_schema":{name,schema,...}} */
                rf = json_object();
                json_t *js = json_object();
                const char *k;
                json_t *v;
                json_object_foreach(f, k, v) if (strcmp(k, "type")) json_object_set(js, k, v);
                json_object_set_new(rf, "type", json_string("json_schema"));
                json_object_set_new(rf, "json_schema", js);
            } else {
                rf = json_incref(f);
            }
            int rc = attach_response_format(r, rf, "text.format", e);
            json_decref(rf);
            if (rc < 0) goto fail;
        }
        break;
    }
    case API_COMPLETIONS: {
        static const char *const mt[] = { "max_tokens", NULL };
        if (parse_max_tokens(r, b, mt, 0, e) < 0) goto fail;
        if (!field(b, "max_tokens")) r->max_tokens = 16;   /* the API's default */
        if (parse_stop(r, b, "stop", e) < 0) goto fail;
        int echo = 0;
        if (get_bool(b, "echo", &echo, e) < 0) goto fail;
        if (echo) { api_bad(e, "echo", "echo is not supported"); goto fail; }
        long long bo = 1;
        int rc = get_int(b, "best_of", 1, 1 << 20, &bo, e);
        if (rc < 0) goto fail;
        if (rc && bo != 1) { api_bad(e, "best_of", "only best_of=1 is supported"); goto fail; }
        if (field(b, "suffix")) { api_bad(e, "suffix", "suffix is not supported"); goto fail; }
        if (completions_prompt(r, b, e) < 0) goto fail;
        r->ro.think = DS4_THINK_NONE;
        return r;
    }
    }

    if (r->n_msgs == 0) { api_bad(e, "messages", "the conversation is empty"); goto fail; }
    if (attach_tools(r, e) < 0) goto fail;
    replay_tool_calls(r);
    /* with the disk KV cache conv_render may still find the exact DSML of
     * a miss (after a restart): it counts the replays once it has looked */
    if (!(r->srv->kvf && r->tool_misses > 0))
        metrics_tool_replay(r->srv->m, r->replay_exact, r->replay_canonical);
    /* A trailing assistant message is a prefix to continue (Anthropic's
     * prefill; DeepSeek's "prefix": true): no EOS, and the continuation is
     * content, since the renderer closed the reasoning before it. */
    ds4_message *last = &r->msgs[r->n_msgs - 1];
    if (last->role == DS4_ROLE_ASSISTANT) {
        last->wo_eos = 1;
        if (last->n_tool_calls > 0) {
            api_bad(e, "messages", "the last message is an assistant tool call: send the tool "
                    "results after it");
            goto fail;
        }
        r->starts_in_reasoning = 0;
    } else {
        r->starts_in_reasoning = r->ro.think != DS4_THINK_NONE;
    }
    return r;
fail:
    request_free(r);
    return NULL;
}

int conv_render(request *r, api_error *e) {
    /* Tool-call turns the tool memory did not know (a restart, or its LRU
     * cap): the cache files may hold their exact DSML.  Looked up before
     * the one rendering, so the prompt is rendered and tokenized once. */
    if (r->srv->kvf && r->tool_misses > 0) {
        kvdisk_finder_resolve(r->srv->kvf, r);
        r->tool_misses = 0;
        metrics_tool_replay(r->srv->m, r->replay_exact, r->replay_canonical);
    }
    if (r->api != API_COMPLETIONS) {
        char *err = NULL;
        int rc = ds4_render_chat(r->msgs, r->n_msgs, &r->ro, &r->prompt, &err);
        if (rc == DS4_ENOMEM) {
            free(err);
            return api_oom(e);
        }
        if (rc) {
            api_bad(e, NULL, "cannot render the conversation: %s", err ? err : ds4_strerror(rc));
            free(err);
            return -1;
        }
    }
    /* the prompt text and raw ids were built with sticky appends: a failure
     * anywhere shows here, before anything is tokenized or evaluated */
    if (r->oom || ds4_buf_failed(&r->prompt) || ds4_tokens_failed(&r->tokens)) return api_oom(e);
    metrics_render_prompt(r->srv->m);
    if (!r->raw_ids && ds4_tokenize(r->srv->tok, r->prompt.p ? r->prompt.p : "", r->prompt.n,
                                    DS4_TOK_SPECIAL, &r->tokens)) {
        api_err_set(e, 500, "server_error", NULL, NULL, "out of memory tokenizing the prompt");
        return -1;
    }
    return 0;
}

/* The context figure in these messages is the one /v1/models (max_model_len),
 * /health (ctx) and /metrics (ds4_context_size) report: the session's size,
 * prompt and answer together.  A prompt that fills it exactly leaves no room
 * for the one token an answer needs, and is said so in the APIs' own words
 * for "prompt + answer too long" (which clients such as Claude Code parse). */
int conv_prepare(request *r, api_error *e) {
    if (conv_render(r, e)) return -1;
    int n = (int)r->tokens.n, ctx = r->srv->ctx;
    if (n < ctx) return 0;
    const char *what = r->api == API_COMPLETIONS ? "prompt" : "messages";
    if (r->api == API_MESSAGES && n > ctx)
        api_err_set(e, 400, "invalid_request_error", NULL, NULL,
                    "prompt is too long: %d tokens > %d maximum", n, ctx);
    else if (r->api == API_MESSAGES)
        api_err_set(e, 400, "invalid_request_error", NULL, NULL,
                    "input length and `max_tokens` exceed context limit: %d + %d > %d, decrease "
                    "input length or `max_tokens` and try again", n,
                    r->max_tokens > 0 ? r->max_tokens : 1, ctx);
    else if (n > ctx)
        api_err_set(e, 400, "invalid_request_error", "context_length_exceeded",
                    r->api == API_RESPONSES ? "input" : what,
                    "This model's maximum context length is %d tokens. However, your %s "
                    "resulted in %d tokens. Please reduce the length of the %s.", ctx, what, n,
                    what);
    else
        api_err_set(e, 400, "invalid_request_error", "context_length_exceeded",
                    r->api == API_RESPONSES ? "input" : what,
                    "This model's maximum context length is %d tokens. However, you requested "
                    "%d tokens (%d in the %s, 1 in the completion). Please reduce the length of "
                    "the %s.", ctx, n + 1, n, what, what);
    return -1;
}
