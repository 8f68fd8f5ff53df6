/*
 * test_render.c -- tests of the prompt renderer (render.c) and the
 * Python-style JSON serializer (json_py.c).
 *
 * Owns: nothing outside this test.  Reads ../shared/golden/prompt_render.jsonl
 * and prompt_tokens.jsonl (DS4_SHARED overrides ../shared): every request is
 * rendered and compared byte for byte with the golden string, and
 * tokenized with DS4_TOK_SPECIAL and the real vocabulary and compared with
 * the golden ids.  Then hand-written cases
 * pin each rule of docs/PROMPT_FORMAT.md on its own (the § numbers below are
 * its sections).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ds4.h"
#include "base/json_py.h"

#include "testutil.h"

/* Print where two byte strings first differ. */
static void show_diff(const char *what, const char *got, size_t gn,
                      const char *exp, size_t en) {
    size_t i = 0;
    while (i < gn && i < en && got[i] == exp[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu (got %zu bytes, want %zu)\n",
            what, i, gn, en);
    fprintf(stderr, "  got : ...%.*s|%.*s\n", (int)(i - from), got + from,
            (int)(gn - i < 60 ? gn - i : 60), got + i);
    fprintf(stderr, "  want: ...%.*s|%.*s\n", (int)(i - from), exp + from,
            (int)(en - i < 60 ? en - i : 60), exp + i);
}

/* ------------------------------------------------------------------------ */
/* Requests (golden JSON form) -> ds4_message arrays                         */
/* ------------------------------------------------------------------------ */

typedef struct {
    ds4_message *msgs;
    int n;
    ds4_render_opts opts;
    char **owned;           /* malloc'd strings to free */
    int nowned;
    ds4_tool_call **calls;  /* per message */
} conv;

static char *own(conv *c, char *s) {
    c->owned = realloc(c->owned, sizeof *c->owned * (size_t)(c->nowned + 1));
    c->owned[c->nowned++] = s;
    return s;
}

static char *dump_owned(conv *c, const json_t *v) {
    ds4_buf b = {0};
    if (ds4_json_py_dump(v, DS4_JSON_PY_DEFAULT, &b)) return NULL;
    return own(c, b.p);
}

static const char *str_or_null(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int role_of(const char *r) {
    if (!r) return -1;
    if (!strcmp(r, "system")) return DS4_ROLE_SYSTEM;
    if (!strcmp(r, "user")) return DS4_ROLE_USER;
    if (!strcmp(r, "assistant")) return DS4_ROLE_ASSISTANT;
    if (!strcmp(r, "tool")) return DS4_ROLE_TOOL;
    if (!strcmp(r, "developer")) return DS4_ROLE_DEVELOPER;
    if (!strcmp(r, "latest_reminder")) return DS4_ROLE_LATEST_REMINDER;
    return -1;
}

/* The JSON values stay owned by `req`, which must outlive the conv. */
static int conv_from_request(const json_t *req, conv *c) {
    memset(c, 0, sizeof *c);
    const json_t *ms = json_object_get(req, "messages");
    if (!json_is_array(ms)) return -1;
    c->n = (int)json_array_size(ms);
    c->msgs = calloc((size_t)c->n + 1, sizeof *c->msgs);
    c->calls = calloc((size_t)c->n + 1, sizeof *c->calls);
    for (int i = 0; i < c->n; i++) {
        const json_t *m = json_array_get(ms, i);
        ds4_message *d = &c->msgs[i];
        int r = role_of(str_or_null(m, "role"));
        if (r < 0) return -1;
        d->role = (ds4_role)r;
        const json_t *ct = json_object_get(m, "content");
        if (json_is_string(ct)) { d->content = json_string_value(ct); d->content_len = json_string_length(ct); }
        const json_t *rs = json_object_get(m, "reasoning_content");
        if (!rs) rs = json_object_get(m, "reasoning");
        if (json_is_string(rs)) { d->reasoning = json_string_value(rs); d->reasoning_len = json_string_length(rs); }
        d->tool_call_id = str_or_null(m, "tool_call_id");
        const json_t *tools = json_object_get(m, "tools");
        if (tools) d->tools_json = dump_owned(c, tools);
        const json_t *rf = json_object_get(m, "response_format");
        if (rf) d->response_format_json = dump_owned(c, rf);
        d->wo_eos = json_is_true(json_object_get(m, "wo_eos"));
        const json_t *tc = json_object_get(m, "tool_calls");
        if (json_is_array(tc) && json_array_size(tc) > 0) {
            int k = (int)json_array_size(tc);
            ds4_tool_call *calls = calloc((size_t)k, sizeof *calls);
            c->calls[i] = calls;
            for (int j = 0; j < k; j++) {
                const json_t *t = json_array_get(tc, j);
                const json_t *f = json_object_get(t, "function");
                calls[j].id = str_or_null(t, "id");
                calls[j].name = str_or_null(f, "name");
                const json_t *a = json_object_get(f, "arguments");
                calls[j].arguments = json_is_string(a) ? json_string_value(a)
                                   : a ? dump_owned(c, a) : NULL;
            }
            d->tool_calls = calls;
            d->n_tool_calls = k;
        }
    }
    int thinking = json_is_true(json_object_get(req, "thinking"));
    const char *effort = str_or_null(req, "effort");
    c->opts.think = !thinking ? DS4_THINK_NONE
                  : (effort && !strcmp(effort, "max")) ? DS4_THINK_MAX : DS4_THINK_HIGH;
    const json_t *dt = json_object_get(req, "drop_thinking");
    c->opts.keep_all_reasoning = json_is_false(dt);
    return 0;
}

static void conv_free(conv *c) {
    for (int i = 0; i < c->nowned; i++) free(c->owned[i]);
    for (int i = 0; i < c->n; i++) free(c->calls[i]);
    free(c->owned);
    free(c->calls);
    free(c->msgs);
}

/* Render a request given as JSON text; returns malloc'd text or NULL. */
static char *render_json(const char *req_text, int *rc_out, char **err) {
    json_error_t je;
    json_t *req = json_loads(req_text, 0, &je);
    if (!req) {
        fprintf(stderr, "bad test JSON: %s (line %d col %d)\n", je.text, je.line, je.column);
        if (rc_out) *rc_out = -100;
        return NULL;
    }
    conv c;
    if (conv_from_request(req, &c)) { json_decref(req); if (rc_out) *rc_out = -101; return NULL; }
    ds4_buf b = {0};
    int rc = ds4_render_chat(c.msgs, c.n, &c.opts, &b, err);
    if (rc_out) *rc_out = rc;
    conv_free(&c);
    json_decref(req);
    if (rc) { ds4_buf_free(&b); return NULL; }
    if (!b.p) return strdup("");
    return b.p;
}

static void expect_render(int line, const char *req, const char *want) {
    int rc;
    char *err = NULL;
    char *got = render_json(req, &rc, &err);
    checks++;
    if (!got) {
        failures++;
        fprintf(stderr, "FAIL line %d: render rc=%d %s\n", line, rc, err ? err : "");
    } else if (strcmp(got, want) != 0) {
        failures++;
        fprintf(stderr, "FAIL line %d: rendering differs\n", line);
        show_diff("render", got, strlen(got), want, strlen(want));
    }
    free(err);
    free(got);
}
#define EXPECT_RENDER(req, want) expect_render(__LINE__, req, want)

/* ------------------------------------------------------------------------ */
/* Goldens                                                                   */
/* ------------------------------------------------------------------------ */

static const char *shared_dir(void) {
    const char *s = getenv("DS4_SHARED");
    return s && *s ? s : "../shared";
}

static ds4_tokenizer *load_tokenizer(void) {
    char path[4096], *err = NULL;
    snprintf(path, sizeof path, "%s/vocab/deepseek-v4-vocab.gguf", shared_dir());
    ds4_tokenizer *t = ds4_tokenizer_load(path, &err);
    if (!t) fprintf(stderr, "tokenizer: cannot load %s: %s\n", path, err ? err : "?");
    free(err);
    return t;
}

static int ids_checked, ids_failed;

static void check_ids(const ds4_tokenizer *tok, const char *id, const char *text,
                      size_t len, const json_t *ids) {
    if (!tok || !json_is_array(ids)) return;
    ds4_tokens t = {0};
    int rc = ds4_tokenize(tok, text, len, DS4_TOK_SPECIAL, &t);
    ids_checked++;
    size_t n = json_array_size(ids), i = 0;
    int ok = rc == 0 && t.n == n;
    if (ok)
        for (i = 0; i < n; i++)
            if (t.v[i] != (int32_t)json_integer_value(json_array_get(ids, i))) { ok = 0; break; }
    CHECK(ok, "%s: token ids differ (rc=%d, got %zu ids, want %zu, first diff at %zu)",
          id, rc, t.n, n, i);
    if (!ok) ids_failed++;
    ds4_tokens_free(&t);
}

static void run_golden_file(const char *name, const ds4_tokenizer *tok, int *n_ok, int *n_all) {
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/%s", shared_dir(), name);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    json_error_t je;
    /* One JSON object per line: jansson reads them one after another. */
    for (;;) {
        json_t *row = json_loadf(f, JSON_DISABLE_EOF_CHECK, &je);
        if (!row) {
            int c;
            while ((c = fgetc(f)) == '\n' || c == ' ' || c == '\r') {}
            if (c == EOF) break;
            ungetc(c, f);
            CHECK(0, "%s: bad JSON line: %s", name, je.text);
            break;
        }
        const char *id = str_or_null(row, "id");
        const json_t *rend = json_object_get(row, "rendered");
        conv c;
        (*n_all)++;
        if (conv_from_request(json_object_get(row, "request"), &c)) {
            CHECK(0, "%s: %s: cannot build messages", name, id);
            json_decref(row);
            continue;
        }
        ds4_buf b = {0};
        char *err = NULL;
        int rc = ds4_render_chat(c.msgs, c.n, &c.opts, &b, &err);
        const char *want = json_string_value(rend);
        size_t wn = json_string_length(rend);
        int ok = rc == 0 && b.n == wn && memcmp(b.p, want, wn) == 0;
        CHECK(ok, "%s: %s: rendering differs (rc=%d %s)", name, id, rc, err ? err : "");
        if (!ok && rc == 0) show_diff(id, b.p, b.n, want, wn);
        if (ok) (*n_ok)++;
        /* The ids are those of the golden text; check them on our text only
         * when it matched (otherwise the render failure says it all). */
        if (ok) check_ids(tok, id, b.p, b.n, json_object_get(row, "ids"));
        free(err);
        ds4_buf_free(&b);
        conv_free(&c);
        json_decref(row);
    }
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* json_py                                                                   */
/* ------------------------------------------------------------------------ */

static const struct { unsigned long long bits; const char *repr; } FLOATS[] = {
    /* bits, json.dumps(float) from CPython 3 */
    { 0x0000000000000000ULL, "0.0" },
    { 0x8000000000000000ULL, "-0.0" },
    { 0x3ff0000000000000ULL, "1.0" },
    { 0xbff0000000000000ULL, "-1.0" },
    { 0x4004000000000000ULL, "2.5" },
    { 0x3fb999999999999aULL, "0.1" },
    { 0x3fd3333333333334ULL, "0.30000000000000004" },
    { 0x3fd5555555555555ULL, "0.3333333333333333" },
    { 0x3fe5555555555555ULL, "0.6666666666666666" },
    { 0x3ee4f8b588e368f1ULL, "1e-05" },
    { 0x3f1a36e2eb1c432dULL, "0.0001" },
    { 0x3f202c9dedbc309dULL, "0.0001234" },
    { 0x4341c37937e08000ULL, "1e+16" },
    { 0x430c6bf526340000ULL, "1000000000000000.0" },
    { 0x437b69b4ba630f35ULL, "1.2345678901234568e+17" },
    { 0x4480f0cf064dd592ULL, "1e+22" },
    { 0x44b52d02c7e14af6ULL, "1e+23" },
    { 0x0000000000000001ULL, "5e-324" },
    { 0x0010000000000000ULL, "2.2250738585072014e-308" },
    { 0x7fefffffffffffffULL, "1.7976931348623157e+308" },
    { 0x4340000000000000ULL, "9007199254740992.0" },
    { 0x4059000000000000ULL, "100.0" },
    { 0x40934a0000000000ULL, "1234.5" },
    { 0xbfe0000000000000ULL, "-0.5" },
    { 0x400921f9f01b866eULL, "3.14159" },
    { 0x0060000000000000ULL, "7.120236347223045e-307" },
    { 0x0100000000000000ULL, "7.291122019556398e-304" },
    { 0x0420000000000000ULL, "8.209073602596753e-289" },
    { 0x3e7ad7f29abcaf48ULL, "1e-07" },
    { 0x41678c29dccccccdULL, "12345678.9" },
    { 0x3f201f31f46ed246ULL, "0.000123" },
    { 0x7ff0000000000000ULL, "Infinity" },
    { 0xfff0000000000000ULL, "-Infinity" },
    { 0x7ff8000000000000ULL, "NaN" },
    { 0x93574de452e6b438ULL, "-1.6900460060617255e-215" },
    { 0x8633a4506513270eULL, "-8.656582097248742e-279" },
    { 0xc4af0824128b2f33ULL, "-7.327176710725923e+22" },
    { 0x4aadc9f81818e811ULL, "5.5726831758734234e+51" },
    { 0xc1025d940ed90475ULL, "-150450.50724986536" },
    { 0x0b1950d836f675ccULL, "3.3720602633004573e-255" },
    { 0x090d549b6f03675aULL, "4.548133948863621e-265" },
    { 0x4698f7d93d9c1724ULL, "1.2660360483934641e+32" },
    { 0x69e1ddb66cad4a26ULL, "1.0940470851172138e+202" },
    { 0x79517c2390c192cfULL, "2.421472989214697e+276" },
    { 0xd050b33839263059ULL, "-7.734947062232811e+78" },
    { 0x87fd0da9953f48f1ULL, "-3.4371651570387734e-270" },
    { 0xb2d60af593bd04cfULL, "-8.37235971602875e-64" },
    { 0x9c5bdacc0cb1e29cULL, "-4.504852761122553e-172" },
    { 0xedf1973e0becd7b0ULL, "-3.974131034628581e+221" },
    { 0x35b3d5962217beadULL, "5.30124761586733e-50" },
    { 0x8f2a63ec24ede6a4ULL, "-1.2968749255602002e-235" },
    { 0x47c8aa3892276658ULL, "6.557061951846415e+37" },
    { 0x9737ba94d0eda82fULL, "-7.935955591875957e-197" },
    { 0xc923bf911a61dbe2ULL, "-2.20200990698146e+44" },
    { 0x2fb850c5a38fd547ULL, "8.20284735752235e-79" },
    { 0xdb38fb2918f135d2ULL, "-2.7705730952388507e+131" },
    { 0x87ba70c31012f037ULL, "-1.9550289646425068e-271" },
    { 0x3f99b5df9e7769b1ULL, "0.025107854887986118" },
    { 0xb6ced162ae2eb154ULL, "-1.079627318751493e-44" },
    { 0x3babf2efc6f87718ULL, "2.9592124321079945e-21" },
    { 0xba16a78795e761d1ULL, "-7.148472179135046e-29" },
    { 0x1fdd87ad5c90a958ULL, "3.441323750510068e-155" },
    { 0x5985319acb5c7427ULL, "1.7512833732688692e+123" },
    { 0x0a8d1bfbc7a2ea20ULL, "7.572959684600404e-258" },
    { 0x434d2055930d6eafULL, "1.6396652472098142e+16" },
    { 0xac0902c77ebff206ULL, "-1.4636591967373683e-96" },
    { 0x24e6cc3ababced20ULL, "6.42368571383056e-131" },
    { 0x896cbd389be4bcfcULL, "-2.8521190327830238e-263" },
    { 0xb59e07bc1e398f10ULL, "-2.006592419016301e-50" },
    { 0xabd3fcff2a3af4d4ULL, "-1.462165688229698e-97" },
    { 0xbeaacbe226e87555ULL, "-7.985955344268098e-07" },
    { 0x7b397c976bf46c69ULL, "3.7899132297034984e+285" },
    { 0x61eeef86ab1031d0ULL, "5.567072653488059e+163" },
    { 0xe511d3f28ede0d7aULL, "-7.224338979955789e+178" },
};

static void test_json_py(void) {
    ds4_buf b = {0};
    for (size_t i = 0; i < sizeof FLOATS / sizeof FLOATS[0]; i++) {
        double d;
        memcpy(&d, &FLOATS[i].bits, sizeof d);
        b.n = 0;
        ds4_json_py_float(d, &b);
        CHECK(b.n && strcmp(b.p, FLOATS[i].repr) == 0, "float %016llx: got %s want %s",
              FLOATS[i].bits, b.n ? b.p : "", FLOATS[i].repr);
    }

    /* Every double printed must read back exactly (shortest round trip). */
    unsigned long long x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        if (!isfinite(d)) continue;
        b.n = 0;
        ds4_json_py_float(d, &b);
        CHECK(strtod(b.p, NULL) == d, "float %016llx printed as %s does not round-trip", x, b.p);
    }

    static const struct { const char *in, *py, *compact; } DUMPS[] = {
        { "{\"a\": 1, \"b\": [true, false, null], \"c\": {\"d\": 2.5}}",
          "{\"a\": 1, \"b\": [true, false, null], \"c\": {\"d\": 2.5}}",
          "{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":2.5}}" },
        /* key order as given, not sorted */
        { "{\"z\":1,\"a\":2,\"m\":3}", "{\"z\": 1, \"a\": 2, \"m\": 3}", "{\"z\":1,\"a\":2,\"m\":3}" },
        /* duplicates: last value wins at the first key's place (Python dict) */
        { "{\"a\":1,\"b\":2,\"a\":3}", "{\"a\": 3, \"b\": 2}", "{\"a\":3,\"b\":2}" },
        { "[]", "[]", "[]" },
        { "{}", "{}", "{}" },
        { "[1.0, 1e5, 1E-5, -0.0, 0, -0, 12345678901234567890.0]",
          "[1.0, 100000.0, 1e-05, -0.0, 0, 0, 1.2345678901234567e+19]",
          "[1.0,100000.0,1e-05,-0.0,0,0,1.2345678901234567e+19]" },
        { "9223372036854775807", "9223372036854775807", "9223372036854775807" },
        { "\"caf\\u00e9 \\u65e5\\u672c \\ud83d\\ude00\"", "\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\"",
          "\"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80\"" },
        { "\"q\\\" b\\\\ n\\n r\\r t\\t b\\b f\\f \\u0001 \\u001f \\u007f / \\u2028\"",
          "\"q\\\" b\\\\ n\\n r\\r t\\t b\\b f\\f \\u0001 \\u001f \x7f / \xe2\x80\xa8\"",
          "\"q\\\" b\\\\ n\\n r\\r t\\t b\\b f\\f \\u0001 \\u001f \x7f / \xe2\x80\xa8\"" },
        { "\"nul\\u0000x\"", "\"nul\\u0000x\"", "\"nul\\u0000x\"" },
        { "{\"k\\n\\\"\": \"v\"}", "{\"k\\n\\\"\": \"v\"}", "{\"k\\n\\\"\":\"v\"}" },
    };
    for (size_t i = 0; i < sizeof DUMPS / sizeof DUMPS[0]; i++) {
        char *err = NULL;
        json_t *v = ds4_json_parse(DUMPS[i].in, strlen(DUMPS[i].in), &err);
        CHECK(v != NULL, "parse %s: %s", DUMPS[i].in, err ? err : "");
        free(err);
        if (!v) continue;
        b.n = 0;
        ds4_json_py_dump(v, DS4_JSON_PY_DEFAULT, &b);
        CHECK(strcmp(b.p, DUMPS[i].py) == 0, "dump %s: got %s want %s", DUMPS[i].in, b.p, DUMPS[i].py);
        b.n = 0;
        ds4_json_py_dump(v, DS4_JSON_PY_COMPACT, &b);
        CHECK(strcmp(b.p, DUMPS[i].compact) == 0, "compact %s: got %s want %s", DUMPS[i].in, b.p,
              DUMPS[i].compact);
        json_decref(v);
    }

    /* Integers and reals stay distinct. */
    json_t *v = ds4_json_parse("[1, 1.0]", 8, NULL);
    CHECK(v && json_is_integer(json_array_get(v, 0)) && json_is_real(json_array_get(v, 1)),
          "int/real distinction");
    json_decref(v);

    /* Errors carry line and column. */
    char *err = NULL;
    v = ds4_json_parse("{\n  \"a\": ,\n}", 12, &err);
    CHECK(!v && err && strstr(err, "line 2") && strstr(err, "column"), "error message: %s",
          err ? err : "(none)");
    free(err);
    v = ds4_json_parse("", 0, &err);
    CHECK(!v && err, "empty text must fail");
    free(err);

    /* Strings with embedded escapes written piecewise equal the whole. */
    ds4_buf w = {0};
    const char *s = "a\"b\\c\nd\x01\xc3\xa9";
    ds4_json_py_string(s, strlen(s), &w);
    b.n = 0;
    ds4_buf_puts(&b, "\"");
    for (size_t i = 0; i < strlen(s); i++) ds4_json_py_escape(s + i, 1, &b);
    ds4_buf_puts(&b, "\"");
    CHECK(strcmp(b.p, w.p) == 0 && strcmp(w.p, "\"a\\\"b\\\\c\\nd\\u0001\xc3\xa9\"") == 0,
          "piecewise escape: %s vs %s", b.p, w.p);
    ds4_buf_free(&w);
    ds4_buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Hand-written rules                                                        */
/* ------------------------------------------------------------------------ */

#define BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASSI "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define REMIND "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>"
#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define TC_OPEN "\n\n<" DSML "tool_calls>\n"
#define TC_CLOSE "\n</" DSML "tool_calls>"
#define INV(n) "<" DSML "invoke name=\"" n "\">\n"
#define INV_END "\n</" DSML "invoke>"
#define PAR(n, s, v) "<" DSML "parameter name=\"" n "\" string=\"" s "\">" v "</" DSML "parameter>"

#define TOOL1 "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}"
#define TOOL1_LINE "{\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}"

static const char MAXP[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";

static void test_rules(void) {
    char want[8192];

    /* §3 empty conversation: BOS only. */
    EXPECT_RENDER("{\"messages\":[],\"thinking\":false}", BOS);
    /* §4 max effort with no messages: the paragraph belongs to message 0. */
    EXPECT_RENDER("{\"messages\":[],\"thinking\":true,\"effort\":\"max\"}", BOS);
    /* §4 max effort in chat mode: no paragraph. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking\":false,\"effort\":\"max\"}",
                  BOS USER "x" ASSI "</think>");
    /* §4 max effort before a latest_reminder first message. */
    snprintf(want, sizeof want, BOS "%s" REMIND "r" USER "u" ASSI "<think>", MAXP);
    EXPECT_RENDER("{\"messages\":[{\"role\":\"latest_reminder\",\"content\":\"r\"},"
                  "{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":true,\"effort\":\"max\"}", want);

    /* §3 several system messages: each where it stands, no separator. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"system\",\"content\":\"A\"},{\"role\":\"system\",\"content\":\"B\"},"
                  "{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"system\",\"content\":\"C\"}],\"thinking\":false}",
                  BOS "AB" USER "u" "C");
    /* §3 three consecutive users merge into one turn. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"\"},"
                  "{\"role\":\"user\",\"content\":\"c\"}],\"thinking\":false}",
                  BOS USER "a\n\n\n\nc" ASSI "</think>");
    /* §3 a user followed by a tool result: the result joins the user turn. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":\"r\","
                  "\"tool_call_id\":\"x\"}],\"thinking\":true}",
                  BOS USER "a\n\n<tool_result>r</tool_result>" ASSI "<think>");
    /* §3 user then developer: separate turns, only the developer opens. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"developer\",\"content\":\"d\"}],"
                  "\"thinking\":false}",
                  BOS USER "a" USER "d" ASSI "</think>");
    /* §3 latest_reminder after a user: the user turn still opens the assistant. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"latest_reminder\",\"content\":\"r\"}],"
                  "\"thinking\":true}",
                  BOS USER "a" ASSI "<think>" REMIND "r");
    /* §3 nothing appended after system or assistant as last message. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"system\",\"content\":\"s\"}],\"thinking\":true}", BOS "s");
    /* §3 wo_eos in thinking mode after the last user keeps its reasoning. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                  "\"reasoning_content\":\"hmm\",\"content\":\"partial\",\"wo_eos\":true}],\"thinking\":true}",
                  BOS USER "q" ASSI "<think>hmm</think>partial");
    /* §3 an assistant without reasoning after the last user, thinking mode:
     * empty reasoning + </think>. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}],"
                  "\"thinking\":true}",
                  BOS USER "q" ASSI "<think></think>a" EOS);

    /* §5 developer before the last user is removed in thinking mode (drop)... */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"assistant\",\"content\":\"x\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":true}",
                  BOS "x" EOS USER "u" ASSI "<think>");
    /* ...kept in chat mode... */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"assistant\",\"content\":\"x\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":false}",
                  BOS USER "d" ASSI "</think>x" EOS USER "u" ASSI "</think>");
    /* ...and kept with drop_thinking=false (reasoning too). */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"assistant\",\"content\":\"x\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":true,"
                  "\"drop_thinking\":false}",
                  BOS USER "d" ASSI "<think>r</think>x" EOS USER "u" ASSI "<think>");
    /* §5 drop_thinking=false in chat mode changes nothing. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"x\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":false,"
                  "\"drop_thinking\":false}",
                  BOS USER "a" ASSI "</think>x" EOS USER "u" ASSI "</think>");
    /* §5 tools exception: with tools anywhere nothing is dropped. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"system\",\"content\":\"\",\"tools\":[" TOOL1 "]},"
                  "{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"x\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":true}",
                  BOS "\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. "
                  "You can invoke tools by writing a \"<" DSML "tool_calls>\" block like the following:\n\n"
                  "<" DSML "tool_calls>\n<" DSML "invoke name=\"$TOOL_NAME\">\n<" DSML "parameter name=\"$PARAMETER_NAME\" "
                  "string=\"true|false\">$PARAMETER_VALUE</" DSML "parameter>\n...\n</" DSML "invoke>\n<" DSML
                  "invoke name=\"$TOOL_NAME2\">\n...\n</" DSML "invoke>\n</" DSML "tool_calls>\n\n"
                  "String parameters should be specified as is and set `string=\"true\"`. For all other types "
                  "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
                  "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
                  "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
                  "Otherwise, output directly after </think> with tool calls or final response.\n\n"
                  "### Available Tool Schemas\n\n" TOOL1_LINE "\n\n"
                  "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
                  USER "a" ASSI "<think>r</think>x" EOS USER "u" ASSI "<think>");
    /* §5 an empty tools list is no tool definition: dropping applies. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"system\",\"content\":\"s\",\"tools\":[]},"
                  "{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"x\","
                  "\"reasoning_content\":\"r\"},{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":true}",
                  BOS "s" USER "a" ASSI "</think>x" EOS USER "u" ASSI "<think>");
    /* §5 the last user message counts tool-result turns: assistant before
     * the results loses its reasoning, the one after keeps it. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"\","
                  "\"reasoning_content\":\"r1\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"ok\"},"
                  "{\"role\":\"assistant\",\"content\":\"done\",\"reasoning_content\":\"r2\"}],\"thinking\":true}",
                  BOS USER "a" ASSI "</think>" TC_OPEN INV("f") INV_END TC_CLOSE EOS
                  USER "<tool_result>ok</tool_result>" ASSI "<think>r2</think>done" EOS);

    /* §3 tool results re-sorted by call order; a text block keeps its slot;
     * an unknown id sorts as position 0 (stable). */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                  "\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
                  "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}},"
                  "{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"h\",\"arguments\":\"{}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"C\"},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"B\"},"
                  "{\"role\":\"user\",\"content\":\"T\"},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"zz\",\"content\":\"Z\"},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"A\"}],\"thinking\":false}",
                  BOS USER "q" ASSI "</think>" TC_OPEN INV("f") INV_END "\n" INV("g") INV_END "\n" INV("h") INV_END
                  TC_CLOSE EOS USER "<tool_result>Z</tool_result>\n\n<tool_result>A</tool_result>\n\nT\n\n"
                  "<tool_result>B</tool_result>\n\n<tool_result>C</tool_result>" ASSI "</think>");

    /* §7 argument rendering: strings raw (no escaping), other values as
     * Python JSON, key order kept; nested unicode kept raw. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"assistant\",\"content\":\"hi\",\"tool_calls\":[{\"id\":\"1\",\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"z\\\": \\\"a<b>&\\\\\\\"c\\\\n\\\", "
                  "\\\"n\\\": 1.50, \\\"i\\\": -3, \\\"b\\\": false, \\\"nil\\\": null, \\\"o\\\": {\\\"k\\\": [1,2.0,\\\"\\u00e9\\\"]}}\"}}]}],"
                  "\"thinking\":false}",
                  BOS "hi" TC_OPEN INV("f") PAR("z", "true", "a<b>&\"c\n") "\n" PAR("n", "false", "1.5") "\n"
                  PAR("i", "false", "-3") "\n" PAR("b", "false", "false") "\n" PAR("nil", "false", "null") "\n"
                  PAR("o", "false", "{\"k\": [1, 2.0, \"\xc3\xa9\"]}") INV_END TC_CLOSE EOS);
    /* §7 arguments that are JSON but not an object: one string parameter. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"1\",\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"[1, 2]\"}}]}],\"thinking\":false}",
                  BOS TC_OPEN INV("f") PAR("arguments", "true", "[1, 2]") INV_END TC_CLOSE EOS);
    /* Empty arguments = no parameters (an empty line, as the template gives). */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"1\",\"type\":"
                  "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}],\"thinking\":false}",
                  BOS TC_OPEN INV("f") INV_END TC_CLOSE EOS);
    /* §7 thinking mode, tool call turn after the last user keeps reasoning. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"\","
                  "\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\",\"function\":"
                  "{\"name\":\"f\",\"arguments\":{\"x\":1}}}]}],\"thinking\":true}",
                  BOS USER "q" ASSI "<think>r</think>" TC_OPEN INV("f") PAR("x", "false", "1") INV_END TC_CLOSE EOS);

    /* §3 response_format on a developer message; falsy formats are skipped. */
    EXPECT_RENDER("{\"messages\":[{\"role\":\"developer\",\"content\":\"d\",\"response_format\":{\"type\":\"json_object\"}}],"
                  "\"thinking\":false}",
                  BOS USER "d\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                  "{\"type\": \"json_object\"}" ASSI "</think>");
    EXPECT_RENDER("{\"messages\":[{\"role\":\"system\",\"content\":\"s\",\"response_format\":{}},"
                  "{\"role\":\"user\",\"content\":\"u\"}],\"thinking\":false}",
                  BOS "s" USER "u" ASSI "</think>");

    /* dsml_exact replaces the canonical block verbatim; wo_eos with tools. */
    {
        ds4_tool_call tc = { "id1", "f", "{\"env\": {\"LANG\": \"C\"}}" };
        const char *exact = TC_OPEN INV("f") PAR("env", "false", "{\"LANG\":\"C\"}") INV_END TC_CLOSE;
        ds4_message m[2] = {
            { .role = DS4_ROLE_USER, .content = "q", .content_len = 1 },
            { .role = DS4_ROLE_ASSISTANT, .tool_calls = &tc, .n_tool_calls = 1, .dsml_exact = exact },
        };
        ds4_render_opts o = { .think = DS4_THINK_NONE };
        ds4_buf b = {0};
        int rc = ds4_render_chat(m, 2, &o, &b, NULL);
        CHECK(rc == 0 && strcmp(b.p, BOS USER "q" ASSI "</think>" TC_OPEN INV("f")
                                PAR("env", "false", "{\"LANG\":\"C\"}") INV_END TC_CLOSE EOS) == 0,
              "dsml_exact replay: %s", b.p);
        m[1].dsml_exact = NULL;
        m[1].wo_eos = 1;
        b.n = 0;
        rc = ds4_render_chat(m, 2, &o, &b, NULL);
        CHECK(rc == 0 && strcmp(b.p, BOS USER "q" ASSI "</think>" TC_OPEN INV("f")
                                PAR("env", "false", "{\"LANG\": \"C\"}") INV_END TC_CLOSE) == 0,
              "canonical + wo_eos: %s", b.p);

        /* ds4_render_tool_calls alone, and with zero calls. */
        b.n = 0;
        rc = ds4_render_tool_calls(&tc, 1, &b, NULL);
        CHECK(rc == 0 && strcmp(b.p, TC_OPEN INV("f") PAR("env", "false", "{\"LANG\": \"C\"}") INV_END
                                TC_CLOSE) == 0, "render_tool_calls: %s", b.p);
        b.n = 0;
        rc = ds4_render_tool_calls(&tc, 0, &b, NULL);
        CHECK(rc == 0 && b.n == 0, "zero calls render nothing");

        /* Content with explicit length (not NUL-terminated, embedded NUL). */
        ds4_message u1 = { .role = DS4_ROLE_USER, .content = "ab\0cdXYZ", .content_len = 5 };
        b.n = 0;
        rc = ds4_render_chat(&u1, 1, &o, &b, NULL);
        static const char w1[] = BOS USER "ab\0cd" ASSI "</think>";
        CHECK(rc == 0 && b.n == sizeof w1 - 1 && memcmp(b.p, w1, b.n) == 0, "content_len honoured");

        /* Appends to what the buffer already holds. */
        b.n = 0;
        ds4_buf_puts(&b, "PRE");
        rc = ds4_render_chat(&u1, 0, &o, &b, NULL);
        CHECK(rc == 0 && strcmp(b.p, "PRE" BOS) == 0, "append: %s", b.p);

        /* Malformed tools / response_format: EINVAL, message, buffer intact. */
        ds4_message bad[2] = {
            { .role = DS4_ROLE_SYSTEM, .content = "s", .content_len = 1, .tools_json = "[{\"a\": }]" },
            { .role = DS4_ROLE_USER, .content = "u", .content_len = 1 },
        };
        char *err = NULL;
        rc = ds4_render_chat(bad, 2, &o, &b, &err);
        CHECK(rc == DS4_EINVAL && err && strstr(err, "tools") && strcmp(b.p, "PRE" BOS) == 0,
              "bad tools: rc=%d err=%s buf=%s", rc, err ? err : "", b.p);
        free(err);
        bad[0].tools_json = "{\"not\": \"array\"}";
        rc = ds4_render_chat(bad, 2, &o, &b, &err);
        CHECK(rc == DS4_EINVAL && err, "tools not an array");
        free(err);
        bad[0].tools_json = NULL;
        bad[0].response_format_json = "{";
        rc = ds4_render_chat(bad, 2, &o, &b, &err);
        CHECK(rc == DS4_EINVAL && err && strstr(err, "response_format") && strstr(err, "line"),
              "bad response_format: %s", err ? err : "");
        free(err);
        /* A bare function object in tools is accepted as the schema. */
        bad[0].response_format_json = NULL;
        bad[0].tools_json = "[{\"name\":\"g\"}]";
        b.n = 0;
        rc = ds4_render_chat(bad, 2, &o, &b, &err);
        CHECK(rc == 0 && strstr(b.p, "\n\n{\"name\": \"g\"}\n\nYou MUST"), "bare function tools");
        free(err);
        ds4_buf_free(&b);
    }
}

int main(void) {
    test_json_py();
    test_rules();

    ds4_tokenizer *tok = load_tokenizer();
    int ok1 = 0, all1 = 0, ok2 = 0, all2 = 0;
    run_golden_file("prompt_render.jsonl", tok, &ok1, &all1);
    run_golden_file("prompt_tokens.jsonl", tok, &ok2, &all2);
    printf("golden prompt_render.jsonl: %d/%d rendered byte-exact\n", ok1, all1);
    printf("golden prompt_tokens.jsonl: %d/%d rendered byte-exact\n", ok2, all2);
    CHECK(all1 == 19 && all2 == 5, "golden row counts %d %d", all1, all2);
    if (tok)
        printf("token ids: %d/%d renderings tokenize to the golden ids\n",
               ids_checked - ids_failed, ids_checked);
    else
        CHECK(0, "the vocabulary could not be loaded");
    if (tok) ds4_tokenizer_free(tok);
    printf("test_render: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
