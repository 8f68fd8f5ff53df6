/*
 * glm_calls.c -- streaming parser of the tool calls GLM models emit
 * (ds4_glm_calls_*, docs/PROMPT_FORMAT.md §12.3).
 *
 * Owns: turning generated content bytes, fed in any split, into the same
 * events as the DSML parser (dsml.c): visible TEXT, then per call
 * CALL_BEGIN / one ARGS_DELTA with the whole arguments JSON / CALL_END,
 * DONE at the end of generation, or one ERROR.  Must not touch: rendering
 * (render_glm.c), the DSML format, JSON byte format (json_py.c).
 *
 * Grammar (the template writes the compact form; whitespace between tags
 * is accepted because GLM 4.5/4.6 put newlines there):
 *
 *   TEXT { "<tool_call>" NAME
 *            { WS* "<arg_key>" KEY "</arg_key>" WS* "<arg_value>" VALUE
 *              "</arg_value>" }
 *          WS* "</tool_call>" WS* }
 *
 * NAME is everything up to the first "<", whitespace trimmed; KEY has no
 * "<" or ">"; VALUE is anything up to the first "</arg_value>".  Text after
 * a call other than whitespace or the next call is an error, as text after
 * the DSML block is.
 *
 * Values: the template writes a string value as it is and anything else as
 * json.dumps(value).  Reading back, the tool's JSON schema decides when it
 * is known (parameters.properties.KEY.type): "string" -> the raw text as a
 * string; only non-string types -> the text must be JSON (an error
 * otherwise); no schema, no type, or a type list that admits strings ->
 * JSON when the text parses as a non-string JSON value, else the raw text
 * as a string (a JSON string literal can only come from a raw string).
 * The arguments are {"k": "string", "k2": verbatim JSON} with ", " / ": "
 * separators, strings escaped like json.dumps(ensure_ascii=False) with
 * invalid UTF-8 replaced by U+FFFD, so the canonical rendering of parsed
 * calls (ds4_render_tool_calls_glm) gives back the model's bytes whenever
 * the model wrote its JSON values as json.dumps does; the exact bytes in
 * any case are ds4_glm_calls_block_text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "base/json_py.h"
#include "base/utf8.h"

static const char MARK_CALL[] = "<tool_call>";
static const char MARK_KEY_END[] = "</arg_key>";
static const char MARK_VALUE_END[] = "</arg_value>";
static const char TAG_KEY[] = "<arg_key>";
static const char TAG_VALUE[] = "<arg_value>";
static const char TAG_CALL_END[] = "</tool_call>";

#define MAX_NAME 1024      /* names / keys longer than this are garbage */

enum {
    ST_TEXT,
    ST_NAME,           /* function name, up to "<" */
    ST_ARG_NEXT,       /* WS* then <arg_key> or </tool_call> */
    ST_KEY,            /* key bytes, up to </arg_key> */
    ST_VALUE_OPEN,     /* WS* then <arg_value> */
    ST_VALUE,          /* value bytes, up to </arg_value> */
    ST_BETWEEN,        /* after </tool_call>: WS* then <tool_call> */
    ST_ERROR,
};

enum { TY_UNKNOWN, TY_STRING, TY_JSON };

struct ds4_glm_calls {
    ds4_dsml_cb cb;
    void *ud;
    json_t *tools;       /* the request's tools (types of the values), or NULL */
    int st;
    int block;           /* a call has started */
    int finished;
    char hold[16];       /* bytes that may start the mark being looked for */
    int nhold;
    char acc[16];        /* bytes of the tag being matched */
    int nacc;
    int call;            /* index of the current/last call, -1 before any */
    int nargs;
    ds4_buf name;        /* function name of the current call (NUL-terminated) */
    ds4_buf key;         /* current key */
    ds4_buf keys;        /* keys of the current call, NUL-separated */
    ds4_buf value;       /* current value */
    ds4_buf args;        /* arguments JSON of the current call */
    ds4_buf block_text;
    size_t block_end;    /* block_text length after the last </tool_call> */
    ds4_buf tx;          /* TEXT bytes not yet delivered */
    char reason[320];
};

/* ------------------------------------------------------------------------ */
/* Events and errors                                                         */
/* ------------------------------------------------------------------------ */

static void emit(ds4_glm_calls *p, ds4_dsml_event_kind k, const char *t, size_t n) {
    if (!p->cb) return;
    ds4_dsml_event ev = { k, p->call, t, n };
    p->cb(p->ud, &ev);
}

static void flush(ds4_glm_calls *p) {
    if (p->tx.n) { emit(p, DS4_DSML_TEXT, p->tx.p, p->tx.n); p->tx.n = 0; }
}

static int fail(ds4_glm_calls *p, const char *fmt, const char *what) {
    flush(p);
    snprintf(p->reason, sizeof p->reason, fmt, what ? what : "");
    p->st = ST_ERROR;
    emit(p, DS4_DSML_ERROR, p->reason, strlen(p->reason));
    return DS4_EFORMAT;
}

static int fail_oom(ds4_glm_calls *p) {
    return fail(p, "GLM tool-call parser: out of memory%s", "");
}

static int fail_expect(ds4_glm_calls *p, const char *expected) {
    char got[96], msg[256];
    ds4_escape(got, sizeof got, p->acc, (size_t)p->nacc);
    snprintf(msg, sizeof msg, "expected %s, got \"%s\"", expected, got);
    return fail(p, "GLM tool-call syntax error: %s", msg);
}

static int fail_byte(ds4_glm_calls *p, const char *fmt, unsigned char c) {
    char q[16];
    ds4_escape(q, sizeof q, (const char *)&c, 1);
    return fail(p, fmt, q);
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static int is_ws(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Match byte c against literal alternatives; the index of the one completed,
 * -1 while still a prefix of some, -2 on mismatch. */
static int match_alts(ds4_glm_calls *p, unsigned char c, const char *const *alts, int n) {
    p->acc[p->nacc++] = (char)c;
    int any = 0;
    for (int i = 0; i < n; i++) {
        size_t L = strlen(alts[i]);
        if ((size_t)p->nacc <= L && memcmp(alts[i], p->acc, (size_t)p->nacc) == 0) {
            if ((size_t)p->nacc == L) { p->nacc = 0; return i; }
            any = 1;
        }
    }
    return any ? -1 : -2;
}

/* Feed c to the hold buffer of `mark`: bytes that can no longer start it go
 * to out(); 1 when the mark is complete, 0 otherwise, < 0 from out(). */
static int hold_byte(ds4_glm_calls *p, unsigned char c, const char *mark,
                     int (*out)(ds4_glm_calls *, const char *, size_t)) {
    size_t mlen = strlen(mark);
    p->hold[p->nhold++] = (char)c;
    int k = 0;
    while (k < p->nhold && memcmp(p->hold + k, mark, (size_t)(p->nhold - k)) != 0) k++;
    if (k) {
        int rc = out(p, p->hold, (size_t)k);
        if (rc) return rc < 0 ? rc : -rc;
        memmove(p->hold, p->hold + k, (size_t)(p->nhold - k));
        p->nhold -= k;
    }
    if ((size_t)p->nhold == mlen) { p->nhold = 0; return 1; }
    return 0;
}

static int text_out(ds4_glm_calls *p, const char *s, size_t n) {
    return ds4_buf_append(&p->tx, s, n) ? DS4_ENOMEM : 0;
}

static int value_out(ds4_glm_calls *p, const char *s, size_t n) {
    return ds4_buf_append(&p->value, s, n) ? DS4_ENOMEM : 0;
}

/* Key bytes: no tag characters or control bytes (a lost syntax fails fast
 * instead of swallowing the rest of the call). */
static int key_out(ds4_glm_calls *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '<' || c == '>' || c == 0x7f || p->key.n >= MAX_NAME) {
            fail_byte(p, "GLM tool-call syntax error: bad byte \"%s\" in an argument key", c);
            return DS4_EFORMAT;
        }
        if (ds4_buf_append(&p->key, &c, 1)) return DS4_ENOMEM;
    }
    return 0;
}

static int utf8_ok(const char *s, size_t n) {
    return ds4_utf8_valid_prefix((const unsigned char *)s, n) == n;
}

/* A JSON string of s[0..n) with invalid UTF-8 replaced by U+FFFD. */
static int put_string(ds4_buf *out, const char *s, size_t n) {
    if (utf8_ok(s, n)) return ds4_json_py_string(s, n, out);
    if (ds4_buf_puts(out, "\"")) return DS4_ENOMEM;
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int ok;
        size_t k = ds4_utf8_next(u + i, n - i, &cp, &ok);
        int rc = ok ? ds4_json_py_escape(s + i, k, out)
                    : (ds4_buf_puts(out, "\xef\xbf\xbd") ? DS4_ENOMEM : DS4_OK);
        if (rc) return rc;
        i += k;
    }
    return ds4_buf_puts(out, "\"") ? DS4_ENOMEM : DS4_OK;
}

/* What the schema says about argument `key` of function `name`. */
static int value_type(const ds4_glm_calls *p, const char *name, const char *key) {
    if (!json_is_array(p->tools)) return TY_UNKNOWN;
    for (size_t i = 0; i < json_array_size(p->tools); i++) {
        json_t *t = json_array_get(p->tools, i);
        json_t *f = json_object_get(t, "function");
        if (f) t = f;
        json_t *nm = json_object_get(t, "name");
        if (!json_is_string(nm) || strcmp(json_string_value(nm), name) != 0) continue;
        json_t *props = json_object_get(json_object_get(t, "parameters"), "properties");
        json_t *ty = json_object_get(json_object_get(props, key), "type");
        if (json_is_string(ty))
            return strcmp(json_string_value(ty), "string") == 0 ? TY_STRING : TY_JSON;
        if (json_is_array(ty) && json_array_size(ty) > 0) {
            int str = 0, other = 0;
            for (size_t j = 0; j < json_array_size(ty); j++) {
                json_t *x = json_array_get(ty, j);
                if (json_is_string(x) && !strcmp(json_string_value(x), "string")) str = 1;
                else other = 1;
            }
            return str && !other ? TY_STRING : !str ? TY_JSON : TY_UNKNOWN;
        }
        return TY_UNKNOWN;
    }
    return TY_UNKNOWN;
}

static int key_seen(const ds4_glm_calls *p, const char *key) {
    size_t i = 0;
    while (i < p->keys.n) {
        const char *s = p->keys.p + i;
        if (strcmp(s, key) == 0) return 1;
        i += strlen(s) + 1;
    }
    return 0;
}

/* The value is complete: append '"key": value' to the arguments. */
static int end_value(ds4_glm_calls *p) {
    const char *v = p->value.p ? p->value.p : "";
    size_t n = p->value.n;
    int ty = value_type(p, p->name.p, p->key.p);
    int as_json = 0;
    if (ty != TY_STRING) {
        json_error_t je;
        /* INT_AS_REAL: only validity matters, and integers beyond 64 bits
         * are valid JSON (Python reads them). */
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        /* Out of memory is not "not JSON": that would silently make the
         * value a string. */
        if (!j && json_error_code(&je) == json_error_out_of_memory) return fail_oom(p);
        as_json = j && !json_is_string(j);
        if (ty == TY_JSON && !j) {
            char q[96], msg[320];
            ds4_escape(q, sizeof q, p->key.p, p->key.n > 64 ? 64 : p->key.n);
            snprintf(msg, sizeof msg, "argument \"%s\" of %.64s is not a string by its schema "
                     "but its value is not JSON (%.60s)", q, p->name.p, je.text);
            json_decref(j);
            return fail(p, "GLM tool-call error: %s", msg);
        }
        if (ty == TY_JSON && j) as_json = 1;
        json_decref(j);
    }
    if ((p->nargs++ && ds4_buf_puts(&p->args, ", ")) ||
        ds4_json_py_string(p->key.p, p->key.n, &p->args) ||
        ds4_buf_puts(&p->args, ": "))
        return fail_oom(p);
    int rc = as_json ? (ds4_buf_append(&p->args, v, n) ? DS4_ENOMEM : DS4_OK)
                     : put_string(&p->args, v, n);
    return rc ? fail_oom(p) : DS4_OK;
}

/* ------------------------------------------------------------------------ */
/* The state machine                                                         */
/* ------------------------------------------------------------------------ */

static const char *const ALTS_ARG[] = { TAG_KEY, TAG_CALL_END };

static int start_call(ds4_glm_calls *p) {
    p->block = 1;
    p->st = ST_NAME;
    p->name.n = 0;
    p->keys.n = 0;
    p->args.n = 0;
    p->nargs = 0;
    return DS4_OK;
}

static int step(ds4_glm_calls *p, unsigned char c) {
    int r;
    if (p->block && p->st != ST_TEXT && ds4_buf_append(&p->block_text, &c, 1))
        return fail_oom(p);

    switch (p->st) {
    case ST_TEXT:
        r = hold_byte(p, c, MARK_CALL, text_out);
        if (r < 0) return fail_oom(p);
        if (r == 1) {
            flush(p);
            if (ds4_buf_puts(&p->block_text, MARK_CALL)) return fail_oom(p);
            return start_call(p);
        }
        return DS4_OK;

    case ST_NAME:
        if (c != '<') {
            if ((c < 0x20 && !is_ws(c)) || c == '>' || c == 0x7f || p->name.n >= MAX_NAME)
                return fail_byte(p, "GLM tool-call syntax error: bad byte \"%s\" in a function name", c);
            return ds4_buf_append(&p->name, &c, 1) ? fail_oom(p) : DS4_OK;
        }
        {
            size_t b = 0, e = p->name.n;
            while (b < e && is_ws((unsigned char)p->name.p[b])) b++;
            while (e > b && is_ws((unsigned char)p->name.p[e - 1])) e--;
            if (b == e) return fail(p, "GLM tool-call syntax error: a call without a function name%s", "");
            memmove(p->name.p, p->name.p + b, e - b);
            p->name.n = e - b;
            if (ds4_buf_append(&p->name, "", 0)) return fail_oom(p);
            if (!utf8_ok(p->name.p, p->name.n))
                return fail(p, "GLM tool-call syntax error: function name is not valid UTF-8%s", "");
            p->call++;
            emit(p, DS4_DSML_CALL_BEGIN, p->name.p, p->name.n);
            if (ds4_buf_puts(&p->args, "{")) return fail_oom(p);
            p->acc[0] = '<';
            p->nacc = 1;
            p->st = ST_ARG_NEXT;
        }
        return DS4_OK;

    case ST_ARG_NEXT:
        if (p->nacc == 0 && is_ws(c)) return DS4_OK;
        r = match_alts(p, c, ALTS_ARG, 2);
        if (r == -2) return fail_expect(p, "<arg_key> or </tool_call>");
        if (r == 0) { p->st = ST_KEY; p->key.n = 0; p->nhold = 0; }
        if (r == 1) {
            if (ds4_buf_puts(&p->args, "}")) return fail_oom(p);
            emit(p, DS4_DSML_ARGS_DELTA, p->args.p, p->args.n);
            emit(p, DS4_DSML_CALL_END, NULL, 0);
            p->block_end = p->block_text.n;
            p->st = ST_BETWEEN;
        }
        return DS4_OK;

    case ST_KEY:
        r = hold_byte(p, c, MARK_KEY_END, key_out);
        if (r < 0) return p->st == ST_ERROR ? DS4_EFORMAT : fail_oom(p);
        if (r == 1) {
            if (ds4_buf_append(&p->key, "", 0)) return fail_oom(p);
            if (!utf8_ok(p->key.p, p->key.n))
                return fail(p, "GLM tool-call syntax error: argument key is not valid UTF-8%s", "");
            if (key_seen(p, p->key.p)) {
                char q[96];
                ds4_escape(q, sizeof q, p->key.p, p->key.n > 64 ? 64 : p->key.n);
                return fail(p, "GLM tool-call error: duplicate argument \"%s\"", q);
            }
            if (ds4_buf_append(&p->keys, p->key.p, p->key.n + 1)) return fail_oom(p);
            p->st = ST_VALUE_OPEN;
        }
        return DS4_OK;

    case ST_VALUE_OPEN: {
        static const char *const a[] = { TAG_VALUE };
        if (p->nacc == 0 && is_ws(c)) return DS4_OK;
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "<arg_value> after </arg_key>");
        if (r == 0) { p->st = ST_VALUE; p->value.n = 0; p->nhold = 0; }
        return DS4_OK;
    }

    case ST_VALUE:
        r = hold_byte(p, c, MARK_VALUE_END, value_out);
        if (r < 0) return fail_oom(p);
        if (r == 1) {
            if (end_value(p)) return DS4_EFORMAT;
            p->st = ST_ARG_NEXT;
        }
        return DS4_OK;

    case ST_BETWEEN: {
        static const char *const a[] = { MARK_CALL };
        if (p->nacc == 0 && is_ws(c)) return DS4_OK;
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "only whitespace or <tool_call> after </tool_call>");
        if (r == 0) return start_call(p);
        return DS4_OK;
    }

    case ST_ERROR:
    default:
        return DS4_EFORMAT;
    }
}

/* ------------------------------------------------------------------------ */
/* API                                                                       */
/* ------------------------------------------------------------------------ */

ds4_glm_calls *ds4_glm_calls_new(const char *tools_json, ds4_dsml_cb cb, void *ud) {
    ds4_glm_calls *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cb = cb;
    p->ud = ud;
    p->st = ST_TEXT;
    p->call = -1;
    if (tools_json) {
        /* Refused rather than ignored: parsing without the schemas would
         * type values differently, silently. */
        p->tools = ds4_json_parse(tools_json, strlen(tools_json), NULL);
        if (!p->tools) { free(p); return NULL; }
    }
    return p;
}

void ds4_glm_calls_free(ds4_glm_calls *p) {
    if (!p) return;
    json_decref(p->tools);
    ds4_buf_free(&p->name);
    ds4_buf_free(&p->key);
    ds4_buf_free(&p->keys);
    ds4_buf_free(&p->value);
    ds4_buf_free(&p->args);
    ds4_buf_free(&p->block_text);
    ds4_buf_free(&p->tx);
    free(p);
}

int ds4_glm_calls_feed(ds4_glm_calls *p, const char *text, size_t len) {
    if (!p || (len && !text)) return DS4_EINVAL;
    if (p->finished) return DS4_EINVAL;
    if (p->st == ST_ERROR) return DS4_EFORMAT;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        /* Fast path: plain text with nothing held passes through up to the
         * next "<". */
        if (p->st == ST_TEXT && p->nhold == 0) {
            size_t j = i;
            while (j < len && s[j] != '<') j++;
            if (j > i && ds4_buf_append(&p->tx, s + i, j - i)) return fail_oom(p);
            i = j;
            if (i == len) break;
        }
        if (step(p, s[i++]) != DS4_OK || p->st == ST_ERROR) return DS4_EFORMAT;
    }
    flush(p);
    return DS4_OK;
}

int ds4_glm_calls_finish(ds4_glm_calls *p) {
    if (!p) return DS4_EINVAL;
    if (p->finished) return p->st == ST_ERROR ? DS4_EFORMAT : DS4_OK;
    p->finished = 1;
    switch (p->st) {
    case ST_ERROR:
        return DS4_EFORMAT;
    case ST_TEXT:
        /* A held possible "<tool_call>" start is plain text. */
        if (p->nhold && ds4_buf_append(&p->tx, p->hold, (size_t)p->nhold)) {
            p->nhold = 0;
            return fail_oom(p);
        }
        p->nhold = 0;
        flush(p);
        return DS4_OK;
    case ST_BETWEEN:
        if (p->nacc == 0) {
            emit(p, DS4_DSML_DONE, NULL, 0);
            return DS4_OK;
        }
        fail(p, "GLM tool-call error: text after </tool_call>%s", "");
        return DS4_EFORMAT;
    default:
        fail(p, "GLM tool-call error: unterminated tool call%s", "");
        return DS4_EFORMAT;
    }
}

int ds4_glm_calls_in_payload(const ds4_glm_calls *p) {
    return p && p->st == ST_VALUE;
}

int ds4_glm_calls_in_block(const ds4_glm_calls *p) {
    return p && p->block;
}

const char *ds4_glm_calls_block_text(const ds4_glm_calls *p, size_t *len) {
    size_t n = 0;
    if (p) n = p->st == ST_BETWEEN || (p->finished && p->block_end) ? p->block_end : p->block_text.n;
    if (len) *len = n;
    if (!p || !p->block_text.p) return "";
    return p->block_text.p;
}
