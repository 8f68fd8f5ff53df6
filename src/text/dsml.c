/*
 * dsml.c -- streaming parser of the DSML tool-call block the model emits
 * (ds4_dsml_*, docs/PROMPT_FORMAT.md §7.2).
 *
 * Owns: turning generated content bytes, fed in any split, into events:
 * visible TEXT, then per invoke CALL_BEGIN / ARGS_DELTA... / CALL_END, then
 * DONE, or one ERROR.  Must not touch: rendering (render.c), JSON byte format
 * (json_py.c), sampling or the server.
 *
 * Grammar (what DeepSeek's reference parser accepts, made streaming):
 *
 *   TEXT "\n\n<｜DSML｜tool_calls" ">\n"
 *     { "<｜DSML｜invoke" WS* "name=\"" NAME "\">\n" ["\n"]
 *         { "<｜DSML｜parameter name=\"" KEY "\" string=\"" ("true"|"false")
 *           "\">" VALUE "</｜DSML｜parameter" ">\n" }
 *       "</｜DSML｜invoke>\n" }
 *   "</｜DSML｜tool_calls>" WS*
 *
 * VALUE is anything up to the first "</｜DSML｜parameter".  The optional
 * "\n" after an invoke header is the empty line the reference template
 * writes for a call without parameters (its regex accepts it via `$`).
 *
 * The parser is a byte-at-a-time state machine, so every split of the same
 * input gives the same event contents; within one feed call consecutive TEXT
 * or ARGS_DELTA bytes are coalesced into one event.  Bytes are held back only
 * while they may still be the start of the block marker (in text) or of the
 * closing parameter tag (in a value).
 *
 * The arguments JSON is rebuilt as the reference does:
 * {"k": "string value", "k2": verbatim} with ", " and ": " separators;
 * string values are escaped like Python's json.dumps(ensure_ascii=False)
 * (invalid UTF-8 becomes U+FFFD so the JSON is always valid UTF-8), and
 * string="false" values are checked to be JSON when they end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "text/json_py.h"

#define DSML_TOK "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
static const char MARK_BLOCK[] = "\n\n<" DSML_TOK "tool_calls";
static const char MARK_END_PARAM[] = "</" DSML_TOK "parameter";
static const char TAG_INVOKE[] = "<" DSML_TOK "invoke";
static const char TAG_BLOCK_END[] = "</" DSML_TOK "tool_calls>";
static const char TAG_PARAM[] = "<" DSML_TOK "parameter";
static const char TAG_INVOKE_END[] = "</" DSML_TOK "invoke>\n";

#define MAX_NAME 1024      /* tool / parameter names longer than this are garbage */

enum {
    ST_TEXT,
    ST_OPEN_GT,        /* ">\n" after the block marker */
    ST_BLOCK_NEXT,     /* <｜DSML｜invoke or </｜DSML｜tool_calls> */
    ST_INV_WS,         /* whitespace before name= */
    ST_INV_NAMEEQ,     /* name=" */
    ST_INV_NAME,
    ST_INV_GT,         /* ">\n" closing the invoke header ('"' consumed) */
    ST_CALL_NEXT,      /* <｜DSML｜parameter, </｜DSML｜invoke>\n, or one "\n" */
    ST_PAR_NAMEEQ,     /* ' name="' */
    ST_PAR_NAME,
    ST_PAR_STR,        /* ' string="' ('"' of the name consumed) */
    ST_PAR_BOOL,       /* true"> / false"> */
    ST_PAYLOAD,
    ST_PAR_GT,         /* ">\n" after </｜DSML｜parameter */
    ST_PAR_NEXT,       /* <｜DSML｜parameter or </｜DSML｜invoke>\n */
    ST_DONE,           /* after </｜DSML｜tool_calls>: whitespace only */
    ST_ERROR,
};

struct ds4_dsml {
    ds4_dsml_cb cb;
    void *ud;
    int st;
    int block;           /* a block has started */
    int finished;
    char hold[32];       /* bytes that may start MARK_BLOCK / MARK_END_PARAM */
    int nhold;
    char acc[48];        /* bytes of the literal being matched */
    int nacc;
    int allow_nl;        /* ST_CALL_NEXT may take the one empty line */
    int call;            /* index of the current/last call, -1 before any */
    int nparams;         /* parameters of the current call */
    int is_string;       /* current parameter has string="true" */
    unsigned char u8[4]; /* UTF-8 sequence being assembled in a string value */
    int nu8, need8;
    ds4_buf name;        /* invoke or parameter name being read */
    ds4_buf pnames;      /* parameter names of the current call, NUL-separated */
    ds4_buf value;       /* string="false" value (checked at its end) */
    ds4_buf block_text;
    ds4_buf tx, ax;      /* TEXT / ARGS bytes not yet delivered */
    char reason[320];
};

/* ------------------------------------------------------------------------ */
/* Event delivery                                                            */
/* ------------------------------------------------------------------------ */

static void emit(ds4_dsml *p, ds4_dsml_event_kind k, const char *t, size_t n) {
    if (!p->cb) return;
    ds4_dsml_event ev = { k, p->call, t, n };
    p->cb(p->ud, &ev);
}

/* Deliver coalesced TEXT / ARGS bytes before any other event. */
static void flush(ds4_dsml *p) {
    if (p->tx.n) { emit(p, DS4_DSML_TEXT, p->tx.p, p->tx.n); p->tx.n = 0; }
    if (p->ax.n) { emit(p, DS4_DSML_ARGS_DELTA, p->ax.p, p->ax.n); p->ax.n = 0; }
}

/* Printable rendering of a few bytes for error messages. */
static void quote_bytes(char *dst, size_t cap, const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') { dst[k++] = '\\'; dst[k++] = 'n'; }
        else if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", c);
        else dst[k++] = (char)c;
    }
    dst[k] = 0;
}

static int fail(ds4_dsml *p, const char *fmt, const char *what) {
    flush(p);
    snprintf(p->reason, sizeof p->reason, fmt, what ? what : "");
    p->st = ST_ERROR;
    emit(p, DS4_DSML_ERROR, p->reason, strlen(p->reason));
    return DS4_EFORMAT;
}

static int fail_oom(ds4_dsml *p) {
    return fail(p, "DSML parser: out of memory%s", "");
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Match byte c against literal alternatives; returns the index of the one
 * completed, -1 while still a prefix of some, -2 on mismatch. */
static int match_alts(ds4_dsml *p, unsigned char c, const char *const *alts, int n) {
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

static int fail_expect(ds4_dsml *p, const char *expected) {
    char got[96], msg[256];
    quote_bytes(got, sizeof got, p->acc, (size_t)p->nacc);
    snprintf(msg, sizeof msg, "expected %s, got \"%s\"", expected, got);
    return fail(p, "DSML syntax error: %s", msg);
}

static int is_ws(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Names are plain identifiers in practice; refuse bytes that can only mean
 * the model lost the syntax, so garbage fails fast instead of swallowing. */
static int bad_name_byte(unsigned char c) {
    return c < 0x20 || c == '<' || c == '>' || c == 0x7f;
}

/* 1 when s[0..n) is valid UTF-8 (names go into JSON keys and events). */
static int utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i];
        int k;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c >= 0xe0 && c <= 0xef) { k = 2; if (c == 0xe0) lo = 0xa0; if (c == 0xed) hi = 0x9f; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; if (c == 0xf0) lo = 0x90; if (c == 0xf4) hi = 0x8f; }
        else return 0;
        if (i + (size_t)k >= n) return 0;      /* truncated */
        if (u[i + 1] < lo || u[i + 1] > hi) return 0;
        for (int j = 2; j <= k; j++)
            if (u[i + (size_t)j] < 0x80 || u[i + (size_t)j] > 0xbf) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

static int args_put(ds4_dsml *p, const char *s, size_t n) {
    return ds4_buf_append(&p->ax, s, n);
}

/* One byte of a string="true" value: JSON-escape ASCII, pass complete UTF-8
 * sequences through, replace invalid ones with U+FFFD (one per maximal
 * invalid subsequence, like the tokenizer's decoder). */
static const char FFFD[] = "\xef\xbf\xbd";

static int str_byte(ds4_dsml *p, unsigned char c) {
    for (;;) {
        if (p->nu8 == 0) {
            if (c < 0x80) return ds4_json_py_escape((const char *)&c, 1, &p->ax);
            if (c >= 0xc2 && c <= 0xdf) p->need8 = 1;
            else if (c >= 0xe0 && c <= 0xef) p->need8 = 2;
            else if (c >= 0xf0 && c <= 0xf4) p->need8 = 3;
            else return args_put(p, FFFD, 3);
            p->u8[p->nu8++] = c;
            return DS4_OK;
        }
        unsigned char lo = 0x80, hi = 0xbf;
        if (p->nu8 == 1) {
            switch (p->u8[0]) {
            case 0xe0: lo = 0xa0; break;
            case 0xed: hi = 0x9f; break;
            case 0xf0: lo = 0x90; break;
            case 0xf4: hi = 0x8f; break;
            }
        }
        if (c >= lo && c <= hi) {
            p->u8[p->nu8++] = c;
            if (p->nu8 == p->need8 + 1) {
                int rc = args_put(p, (const char *)p->u8, (size_t)p->nu8);
                p->nu8 = 0;
                return rc;
            }
            return DS4_OK;
        }
        /* Truncated sequence: replace it, then look at c afresh. */
        p->nu8 = 0;
        if (args_put(p, FFFD, 3)) return DS4_ENOMEM;
    }
}

static int payload_out(ds4_dsml *p, const char *s, size_t n) {
    if (!p->is_string) {
        if (ds4_buf_append(&p->value, s, n)) return DS4_ENOMEM;
        return args_put(p, s, n);
    }
    for (size_t i = 0; i < n; i++)
        if (str_byte(p, (unsigned char)s[i])) return DS4_ENOMEM;
    return DS4_OK;
}

/* Feed byte c to a "may be the start of `mark`" hold buffer.  Bytes that can
 * no longer start the mark are passed to out(); returns 1 when the mark is
 * complete, 0 otherwise, negative on error. */
static int hold_byte(ds4_dsml *p, unsigned char c, const char *mark, size_t mlen,
                     int (*out)(ds4_dsml *, const char *, size_t)) {
    p->hold[p->nhold++] = (char)c;
    int k = 0;
    /* Drop leading bytes until what is held is a prefix of the mark. */
    while (k < p->nhold && memcmp(p->hold + k, mark, (size_t)(p->nhold - k)) != 0) k++;
    if (k) {
        if (out(p, p->hold, (size_t)k)) return DS4_ENOMEM;
        memmove(p->hold, p->hold + k, (size_t)(p->nhold - k));
        p->nhold -= k;
    }
    if ((size_t)p->nhold == mlen) { p->nhold = 0; return 1; }
    return 0;
}

static int text_out(ds4_dsml *p, const char *s, size_t n) {
    return ds4_buf_append(&p->tx, s, n);
}

static int name_seen(const ds4_dsml *p, const char *name) {
    size_t i = 0;
    while (i < p->pnames.n) {
        const char *s = p->pnames.p + i;
        if (strcmp(s, name) == 0) return 1;
        i += strlen(s) + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The state machine                                                         */
/* ------------------------------------------------------------------------ */

static const char *const ALTS_BLOCK[] = { TAG_INVOKE, TAG_BLOCK_END };
static const char *const ALTS_CALL[] = { TAG_PARAM, TAG_INVOKE_END, "\n" };
static const char *const ALTS_BOOL[] = { "true\">", "false\">" };

static int step(ds4_dsml *p, unsigned char c) {
    int r;
    if (p->block && p->st != ST_DONE && ds4_buf_append(&p->block_text, &c, 1))
        return fail_oom(p);

    switch (p->st) {
    case ST_TEXT:
        r = hold_byte(p, c, MARK_BLOCK, sizeof MARK_BLOCK - 1, text_out);
        if (r < 0) return fail_oom(p);
        if (r == 1) {
            flush(p);
            p->block = 1;
            if (ds4_buf_append(&p->block_text, MARK_BLOCK, sizeof MARK_BLOCK - 1))
                return fail_oom(p);
            p->st = ST_OPEN_GT;
        }
        return DS4_OK;

    case ST_OPEN_GT: {
        static const char *const a[] = { ">\n" };
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "\">\\n\" after <｜DSML｜tool_calls");
        if (r == 0) p->st = ST_BLOCK_NEXT;
        return DS4_OK;
    }

    case ST_BLOCK_NEXT:
        r = match_alts(p, c, ALTS_BLOCK, 2);
        if (r == -2) return fail_expect(p, "<｜DSML｜invoke or </｜DSML｜tool_calls>");
        if (r == 0) p->st = ST_INV_WS;
        if (r == 1) {
            flush(p);
            p->st = ST_DONE;
            emit(p, DS4_DSML_DONE, NULL, 0);
        }
        return DS4_OK;

    case ST_INV_WS:
        if (is_ws(c)) return DS4_OK;
        p->st = ST_INV_NAMEEQ;
        /* fall through */
    case ST_INV_NAMEEQ: {
        static const char *const a[] = { "name=\"" };
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "name=\"...\" in <｜DSML｜invoke");
        if (r == 0) { p->st = ST_INV_NAME; p->name.n = 0; }
        return DS4_OK;
    }

    case ST_INV_NAME:
        if (c == '"') {
            if (ds4_buf_append(&p->name, "", 0)) return fail_oom(p);
            if (!utf8_valid(p->name.p, p->name.n))
                return fail(p, "DSML syntax error: invoke name is not valid UTF-8%s", "");
            p->st = ST_INV_GT;
            return DS4_OK;
        }
        if (bad_name_byte(c) || p->name.n >= MAX_NAME) {
            char q[16];
            quote_bytes(q, sizeof q, (const char *)&c, 1);
            return fail(p, "DSML syntax error: bad byte \"%s\" in invoke name", q);
        }
        if (ds4_buf_append(&p->name, &c, 1)) return fail_oom(p);
        return DS4_OK;

    case ST_INV_GT: {
        static const char *const a[] = { ">\n" };
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "\">\\n\" closing the invoke header");
        if (r == 0) {
            flush(p);
            p->call++;
            p->nparams = 0;
            p->pnames.n = 0;
            p->allow_nl = 1;
            emit(p, DS4_DSML_CALL_BEGIN, p->name.p, p->name.n);
            if (args_put(p, "{", 1)) return fail_oom(p);
            p->st = ST_CALL_NEXT;
        }
        return DS4_OK;
    }

    case ST_CALL_NEXT:
    case ST_PAR_NEXT:
        r = match_alts(p, c, ALTS_CALL, p->st == ST_CALL_NEXT && p->allow_nl ? 3 : 2);
        if (r == -2) return fail_expect(p, "<｜DSML｜parameter or </｜DSML｜invoke>\\n");
        if (r == 2) { p->allow_nl = 0; return DS4_OK; }
        if (r == 0) p->st = ST_PAR_NAMEEQ;
        if (r == 1) {
            if (args_put(p, "}", 1)) return fail_oom(p);
            flush(p);
            emit(p, DS4_DSML_CALL_END, NULL, 0);
            p->st = ST_BLOCK_NEXT;
        }
        return DS4_OK;

    case ST_PAR_NAMEEQ: {
        static const char *const a[] = { " name=\"" };
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "' name=\"' in <｜DSML｜parameter");
        if (r == 0) { p->st = ST_PAR_NAME; p->name.n = 0; }
        return DS4_OK;
    }

    case ST_PAR_NAME:
        if (c == '"') {
            if (ds4_buf_append(&p->name, "", 0)) return fail_oom(p);
            if (!utf8_valid(p->name.p, p->name.n))
                return fail(p, "DSML syntax error: parameter name is not valid UTF-8%s", "");
            p->st = ST_PAR_STR;
            return DS4_OK;
        }
        if (bad_name_byte(c) || p->name.n >= MAX_NAME) {
            char q[16];
            quote_bytes(q, sizeof q, (const char *)&c, 1);
            return fail(p, "DSML syntax error: bad byte \"%s\" in parameter name", q);
        }
        if (ds4_buf_append(&p->name, &c, 1)) return fail_oom(p);
        return DS4_OK;

    case ST_PAR_STR: {
        static const char *const a[] = { " string=\"" };
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "' string=\"true|false\">' after the parameter name");
        if (r == 0) p->st = ST_PAR_BOOL;
        return DS4_OK;
    }

    case ST_PAR_BOOL:
        r = match_alts(p, c, ALTS_BOOL, 2);
        if (r == -2) return fail_expect(p, "string=\"true\"> or string=\"false\">");
        if (r >= 0) {
            if (name_seen(p, p->name.p)) {
                char q[96];
                quote_bytes(q, sizeof q, p->name.p, p->name.n > 64 ? 64 : p->name.n);
                return fail(p, "DSML error: duplicate parameter \"%s\"", q);
            }
            if (ds4_buf_append(&p->pnames, p->name.p, p->name.n + 1)) return fail_oom(p);
            p->is_string = r == 0;
            p->value.n = 0;
            p->nu8 = 0;
            if ((p->nparams++ && args_put(p, ", ", 2)) ||
                ds4_json_py_string(p->name.p, p->name.n, &p->ax) ||
                args_put(p, ": ", 2) ||
                (p->is_string && args_put(p, "\"", 1)))
                return fail_oom(p);
            p->allow_nl = 0;
            p->st = ST_PAYLOAD;
        }
        return DS4_OK;

    case ST_PAYLOAD:
        r = hold_byte(p, c, MARK_END_PARAM, sizeof MARK_END_PARAM - 1, payload_out);
        if (r < 0) return fail_oom(p);
        if (r == 1) {
            if (p->is_string) {
                if (p->nu8) { p->nu8 = 0; if (args_put(p, FFFD, 3)) return fail_oom(p); }
                if (args_put(p, "\"", 1)) return fail_oom(p);
            } else {
                /* INT_AS_REAL: only validity matters here, and integers
                 * beyond 64 bits are valid JSON (Python reads them). */
                json_error_t je;
                json_t *v = json_loadb(p->value.p ? p->value.p : "", p->value.n,
                                       JSON_DECODE_ANY | JSON_ALLOW_NUL |
                                       JSON_DECODE_INT_AS_REAL, &je);
                if (!v) {
                    char q[96], msg[320];
                    quote_bytes(q, sizeof q, p->name.p, p->name.n > 64 ? 64 : p->name.n);
                    snprintf(msg, sizeof msg, "parameter \"%s\" has string=\"false\" but its value "
                             "is not JSON (%s)", q, je.text);
                    return fail(p, "DSML error: %s", msg);
                }
                json_decref(v);
            }
            p->st = ST_PAR_GT;
        }
        return DS4_OK;

    case ST_PAR_GT: {
        static const char *const a[] = { ">\n" };
        r = match_alts(p, c, a, 1);
        if (r == -2) return fail_expect(p, "\">\\n\" after </｜DSML｜parameter");
        if (r == 0) p->st = ST_PAR_NEXT;
        return DS4_OK;
    }

    case ST_DONE:
        if (is_ws(c)) return DS4_OK;
        {
            char q[16];
            quote_bytes(q, sizeof q, (const char *)&c, 1);
            return fail(p, "DSML error: unexpected text \"%s\" after </｜DSML｜tool_calls>", q);
        }

    case ST_ERROR:
    default:
        return DS4_EFORMAT;
    }
}

/* ------------------------------------------------------------------------ */
/* API                                                                       */
/* ------------------------------------------------------------------------ */

ds4_dsml *ds4_dsml_new(ds4_dsml_cb cb, void *ud) {
    ds4_dsml *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cb = cb;
    p->ud = ud;
    p->st = ST_TEXT;
    p->call = -1;
    return p;
}

void ds4_dsml_free(ds4_dsml *p) {
    if (!p) return;
    ds4_buf_free(&p->name);
    ds4_buf_free(&p->pnames);
    ds4_buf_free(&p->value);
    ds4_buf_free(&p->block_text);
    ds4_buf_free(&p->tx);
    ds4_buf_free(&p->ax);
    free(p);
}

int ds4_dsml_feed(ds4_dsml *p, const char *text, size_t len) {
    if (!p || (len && !text)) return DS4_EINVAL;
    if (p->finished) return DS4_EINVAL;
    if (p->st == ST_ERROR) return DS4_EFORMAT;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    /* Fast path: plain text with nothing held and no newline passes
     * through without the per-byte machinery. */
    while (i < len) {
        if (p->st == ST_TEXT && p->nhold == 0) {
            size_t j = i;
            while (j < len && s[j] != '\n') j++;
            if (j > i && ds4_buf_append(&p->tx, s + i, j - i)) return fail_oom(p);
            i = j;
            if (i == len) break;
        }
        if (step(p, s[i++]) != DS4_OK || p->st == ST_ERROR) return DS4_EFORMAT;
    }
    flush(p);
    return DS4_OK;
}

int ds4_dsml_finish(ds4_dsml *p) {
    if (!p) return DS4_EINVAL;
    if (p->finished) return p->st == ST_ERROR ? DS4_EFORMAT : DS4_OK;
    p->finished = 1;
    switch (p->st) {
    case ST_ERROR:
        return DS4_EFORMAT;
    case ST_TEXT:
        /* What was held back as a possible marker start is plain text. */
        if (p->nhold && ds4_buf_append(&p->tx, p->hold, (size_t)p->nhold)) {
            p->nhold = 0;
            return fail_oom(p);
        }
        p->nhold = 0;
        flush(p);
        return DS4_OK;
    case ST_DONE:
        return DS4_OK;
    default:
        fail(p, "DSML error: unterminated tool-call block%s", "");
        return DS4_EFORMAT;
    }
}

int ds4_dsml_in_payload(const ds4_dsml *p) {
    return p && p->st == ST_PAYLOAD;
}

int ds4_dsml_in_block(const ds4_dsml *p) {
    return p && p->block;
}

const char *ds4_dsml_block_text(const ds4_dsml *p, size_t *len) {
    if (len) *len = p ? p->block_text.n : 0;
    if (!p || !p->block_text.p) return "";
    return p->block_text.p;
}
