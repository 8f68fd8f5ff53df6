/*
 * test_dsml.c -- tests of the streaming DSML tool-call parser (dsml.c).
 *
 * Owns: nothing outside this test.  Table-driven: each case is fed whole,
 * one byte at a time, split at every position, and in random chunks; all
 * feedings must give the same events (TEXT / calls / arguments / DONE /
 * ERROR), the event sequence must be well formed, and the arguments must be
 * the expected JSON text.  Then render -> parse round trips on random tool
 * calls (ds4_render_tool_calls output parses back to the same names and
 * argument values).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ds4.h"
#include "base/json_py.h"

#include "testutil.h"
#include "call_events.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define TC_OPEN "\n\n<" DSML "tool_calls>\n"
#define TC_CLOSE "</" DSML "tool_calls>"
#define INV(n) "<" DSML "invoke name=\"" n "\">\n"
#define INV_END "</" DSML "invoke>\n"
#define PAR(n, s, v) "<" DSML "parameter name=\"" n "\" string=\"" s "\">" v "</" DSML "parameter>\n"

/* The event collector, coll_same and rnd are call_events.h's. */

/* Feed `s` in chunks: mode 0 whole, 1 bytes, 2 split at `pos`, 3 random.
 * Checks the block-text and no-excess invariants on the way. */
static int run_parse(const char *s, size_t n, int mode, size_t pos, coll *c,
                     ds4_buf *block) {
    memset(c, 0, sizeof *c);
    ds4_dsml *p = ds4_dsml_new(on_event, c);
    size_t i = 0;
    int rc = DS4_OK;
    while (i < n) {
        size_t k = n - i;
        if (mode == 1) k = 1;
        else if (mode == 2) k = i < pos ? pos - i : n - i;
        else if (mode == 3) { k = 1 + rnd() % 40; if (k > n - i) k = n - i; }
        int r = ds4_dsml_feed(p, s + i, k);
        if (r != DS4_OK) rc = r;
        i += k;
    }
    int rf = ds4_dsml_finish(p);
    if (rf != DS4_OK) rc = rf;
    size_t bl;
    const char *bt = ds4_dsml_block_text(p, &bl);
    if (c->text.n + bl > n) badseq(c, "TEXT + block bytes exceed the input");
    if (bl && (bl > n || memcmp(bt, s + c->text.n, bl) != 0))
        badseq(c, "block text is not the input after the visible text");
    if (block) { block->n = 0; ds4_buf_append(block, bt, bl); }
    CHECK(ds4_dsml_in_block(p) == (bl > 0), "in_block vs block text");
    ds4_dsml_free(p);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Table                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *in;
    const char *text;          /* expected visible text */
    int ncalls;                /* calls begun */
    const char *calls[4][2];   /* name, exact args JSON (NULL: don't check) */
    int done;
    const char *err;           /* substring of the error reason, NULL = none */
} tcase;

static const tcase CASES[] = {
    { "plain text", "Hello, world!\nNo tools here.\n\n", "Hello, world!\nNo tools here.\n\n", 0, {{0}}, 0, NULL },
    { "empty", "", "", 0, {{0}}, 0, NULL },
    { "marker prefix at end is text", "a\n\n<" DSML "tool", "a\n\n<" DSML "tool", 0, {{0}}, 0, NULL },
    { "near-miss marker is text", "x\n\n<" DSML "tool_cal>\n\n<b>", "x\n\n<" DSML "tool_cal>\n\n<b>", 0, {{0}}, 0, NULL },
    { "single newline before tag is text", "x\n<" DSML "tool_calls>\n", "x\n<" DSML "tool_calls>\n", 0, {{0}}, 0, NULL },

    /* golden tools-think-pending (../shared/docs/PROMPT_FORMAT.md §11): two
     * parallel calls, thinking-mode answer. */
    { "prompt-format parallel calls",
      TC_OPEN INV("get_weather") PAR("city", "true", "Milano") PAR("days", "false", "2") INV_END
      INV("run_shell") PAR("cmd", "true", "ls -la /tmp && echo 'done' > /dev/null")
      PAR("timeout_s", "false", "2.5") PAR("env", "false", "{\"LANG\": \"C\"}") INV_END TC_CLOSE,
      "", 2,
      { { "get_weather", "{\"city\": \"Milano\", \"days\": 2}" },
        { "run_shell", "{\"cmd\": \"ls -la /tmp && echo 'done' > /dev/null\", \"timeout_s\": 2.5, "
                       "\"env\": {\"LANG\": \"C\"}}" } }, 1, NULL },
    /* docs/PROMPT_FORMAT.md §11: non-JSON arguments rendered as one string. */
    { "prompt-format arguments string",
      "Let me run it." TC_OPEN INV("run_shell") PAR("arguments", "true", "not json") INV_END TC_CLOSE,
      "Let me run it.", 1, { { "run_shell", "{\"arguments\": \"not json\"}" } }, 1, NULL },
    { "three newlines before block", "x\n\n\n<" DSML "tool_calls>\n" INV("f") INV_END TC_CLOSE "\n \n",
      "x\n", 1, { { "f", "{}" } }, 1, NULL },
    { "no-parameter call with the empty line", TC_OPEN INV("f") "\n" INV_END TC_CLOSE,
      "", 1, { { "f", "{}" } }, 1, NULL },
    { "empty block", TC_OPEN TC_CLOSE, "", 0, {{0}}, 1, NULL },
    { "whitespace before name", TC_OPEN "<" DSML "invoke \t name=\"f\">\n" INV_END TC_CLOSE,
      "", 1, { { "f", "{}" } }, 1, NULL },

    /* Payloads. */
    { "payload with < and near-miss closing tags",
      TC_OPEN INV("w") PAR("p", "true", "a<b </" DSML "paramete </" DSML "param> <" DSML "parameter x "
                          "</DSML|parameter> </\xef\xbd\x9c" "DSM\n") INV_END TC_CLOSE,
      "", 1, { { "w", "{\"p\": \"a<b </" DSML "paramete </" DSML "param> <" DSML "parameter x "
                      "</DSML|parameter> </\xef\xbd\x9c" "DSM\\n\"}" } }, 1, NULL },
    { "payload with escapes and unicode",
      TC_OPEN INV("w") PAR("p", "true", "q\" b\\ t\t \x01 caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x80\xa8\r\n") INV_END TC_CLOSE,
      "", 1, { { "w", "{\"p\": \"q\\\" b\\\\ t\\t \\u0001 caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x80\xa8\\r\\n\"}" } },
      1, NULL },
    { "invalid UTF-8 in a string value becomes U+FFFD",
      TC_OPEN INV("w") PAR("p", "true", "a\xff" "b\xe2\x82" "c\xed\xa0\x80" "d\xc3") INV_END TC_CLOSE,
      "", 1, { { "w", "{\"p\": \"a\xef\xbf\xbd" "b\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                      "d\xef\xbf\xbd\"}" } }, 1, NULL },
    { "empty string value", TC_OPEN INV("w") PAR("p", "true", "") INV_END TC_CLOSE,
      "", 1, { { "w", "{\"p\": \"\"}" } }, 1, NULL },
    { "string=false values of all types",
      TC_OPEN INV("t") PAR("i", "false", "-12") PAR("r", "false", "-2.5e3") PAR("t", "false", "true")
      PAR("f", "false", "false") PAR("n", "false", "null") PAR("s", "false", "\"s<\\n\"")
      PAR("a", "false", "[1, [2, {}], \"x\"]") PAR("o", "false", " {\"a\": {\"b\": null}}\n")
      PAR("big", "false", "123456789012345678901234567890") INV_END TC_CLOSE,
      "", 1, { { "t", "{\"i\": -12, \"r\": -2.5e3, \"t\": true, \"f\": false, \"n\": null, \"s\": \"s<\\n\", "
                      "\"a\": [1, [2, {}], \"x\"], \"o\":  {\"a\": {\"b\": null}}\n, "
                      "\"big\": 123456789012345678901234567890}" } }, 1, NULL },
    { "unicode names", TC_OPEN INV("m\xc3\xa9t\xc3\xa9o") PAR("ville", "true", "Z\xc3\xbcrich") INV_END TC_CLOSE,
      "", 1, { { "m\xc3\xa9t\xc3\xa9o", "{\"ville\": \"Z\xc3\xbcrich\"}" } }, 1, NULL },

    /* Malformed. */
    { "marker without >\\n", "hi\n\n<" DSML "tool_callsX", "hi", 0, {{0}}, 0, "expected" },
    { "marker with > but no newline", "\n\n<" DSML "tool_calls> ", "", 0, {{0}}, 0, "expected" },
    { "unknown tag in block", TC_OPEN "<" DSML "function_calls>\n", "", 0, {{0}}, 0, "expected" },
    { "unknown tag in invoke", TC_OPEN INV("f") "<" DSML "param name=\"x\">", "", 1, {{ "f", "{" }}, 0, "expected" },
    { "invoke without name", TC_OPEN "<" DSML "invoke id=\"f\">\n", "", 0, {{0}}, 0, "name=" },
    { "invoke header without newline", TC_OPEN "<" DSML "invoke name=\"f\">" INV_END, "", 0, {{0}}, 0, "expected" },
    { "bad string attribute", TC_OPEN INV("f") "<" DSML "parameter name=\"a\" string=\"maybe\">x</" DSML "parameter>\n",
      "", 1, {{ "f", "{" }}, 0, "string=" },
    { "single-quoted name", TC_OPEN INV("f") "<" DSML "parameter name='a' string=\"true\">x", "", 1, {{ "f", "{" }},
      0, "name=" },
    { "missing >\\n after parameter", TC_OPEN INV("f") "<" DSML "parameter name=\"a\" string=\"true\">x</" DSML
      "parameter>" INV_END, "", 1, {{ "f", "{\"a\": \"x\"" }}, 0, "expected" },
    { "closing tag look-alike glued to text", TC_OPEN INV("f") "<" DSML "parameter name=\"a\" string=\"true\">x</" DSML
      "parameterX", "", 1, {{ "f", "{\"a\": \"x\"" }}, 0, "expected" },
    { "string=false not JSON", TC_OPEN INV("f") PAR("a", "false", "{oops}") INV_END TC_CLOSE, "", 1,
      {{ "f", NULL }}, 0, "not JSON" },
    { "string=false empty", TC_OPEN INV("f") PAR("a", "false", "") INV_END TC_CLOSE, "", 1, {{ "f", NULL }}, 0,
      "not JSON" },
    { "string=false two values", TC_OPEN INV("f") PAR("a", "false", "1, \"b\": 2") INV_END TC_CLOSE, "", 1,
      {{ "f", NULL }}, 0, "not JSON" },
    { "duplicate parameter", TC_OPEN INV("f") PAR("a", "true", "1") PAR("a", "true", "2") INV_END TC_CLOSE,
      "", 1, {{ "f", "{\"a\": \"1\"" }}, 0, "duplicate" },
    { "two empty lines after header", TC_OPEN INV("f") "\n\n" INV_END TC_CLOSE, "", 1, {{ "f", "{" }}, 0, "expected" },
    { "text after block", TC_OPEN INV("f") INV_END TC_CLOSE "\nand more", "", 1, {{ "f", "{}" }}, 1, "after" },
    { "second block after block", TC_OPEN TC_CLOSE TC_OPEN TC_CLOSE, "", 0, {{0}}, 1, "after" },
    { "unterminated block", TC_OPEN INV("f") PAR("a", "true", "x"), "", 1, {{ "f", "{\"a\": \"x\"" }}, 0,
      "unterminated" },
    { "unterminated value", TC_OPEN INV("f") "<" DSML "parameter name=\"a\" string=\"true\">abc</" DSML "param",
      "", 1, {{ "f", "{\"a\": \"abc" }}, 0, "unterminated" },
    { "control char in name", TC_OPEN "<" DSML "invoke name=\"a\nb\">\n", "", 0, {{0}}, 0, "name" },
    { "invalid UTF-8 in name", TC_OPEN "<" DSML "invoke name=\"a\xff\">\n", "", 0, {{0}}, 0, "UTF-8" },
};

static void run_case(const tcase *t) {
    size_t n = strlen(t->in);
    coll ref, c;
    ds4_buf blk = {0};
    int rc = run_parse(t->in, n, 0, 0, &ref, &blk);

    CHECK(!ref.bad, "%s: bad event sequence: %s", t->name, ref.badwhy);
    CHECK(ref.text.n == strlen(t->text) && memcmp(ref.text.p ? ref.text.p : "", t->text, ref.text.n) == 0,
          "%s: text \"%.*s\" want \"%s\"", t->name, (int)ref.text.n, ref.text.p ? ref.text.p : "", t->text);
    CHECK(ref.ncalls == t->ncalls, "%s: %d calls, want %d", t->name, ref.ncalls, t->ncalls);
    for (int i = 0; i < t->ncalls && i < ref.ncalls; i++) {
        CHECK(strcmp(ref.name[i].p, t->calls[i][0]) == 0, "%s: call %d name %s", t->name, i, ref.name[i].p);
        if (t->calls[i][1])
            CHECK(strcmp(ref.args[i].p, t->calls[i][1]) == 0, "%s: call %d args\n  got  %s\n  want %s",
                  t->name, i, ref.args[i].p, t->calls[i][1]);
        /* Completed calls have arguments that parse as a JSON object. */
        if (ref.ended[i]) {
            json_error_t je;
            json_t *v = json_loadb(ref.args[i].p, ref.args[i].n, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
            CHECK(json_is_object(v), "%s: call %d args not a JSON object: %s", t->name, i, je.text);
            json_decref(v);
        }
    }
    CHECK(ref.done == t->done, "%s: done=%d", t->name, ref.done);
    if (t->err) {
        CHECK(ref.nerr == 1 && strstr(ref.err, t->err), "%s: error \"%s\" (want \"%s\")", t->name, ref.err, t->err);
        CHECK(rc == DS4_EFORMAT, "%s: rc %d", t->name, rc);
    } else {
        CHECK(ref.nerr == 0 && rc == DS4_OK, "%s: unexpected error %s", t->name, ref.err);
    }
    if (ref.done && !t->err) {
        const char *m = strstr(t->in, "\n\n<" DSML "tool_calls");
        const char *e = strstr(t->in, TC_CLOSE);
        CHECK(m && e && blk.n == (size_t)(e + strlen(TC_CLOSE) - m) && memcmp(blk.p, m, blk.n) == 0,
              "%s: block text", t->name);
    }

    /* Every other feeding gives the same result. */
    for (int mode = 1; mode <= 3; mode++) {
        size_t reps = mode == 2 ? n + 1 : mode == 3 ? 20 : 1;
        for (size_t r = 0; r < reps; r++) {
            run_parse(t->in, n, mode, r, &c, NULL);
            CHECK(!c.bad, "%s: mode %d/%zu: bad sequence: %s", t->name, mode, r, c.badwhy);
            CHECK(coll_same(&ref, &c), "%s: mode %d split %zu differs from whole feed", t->name, mode, r);
            coll_free(&c);
        }
    }
    coll_free(&ref);
    ds4_buf_free(&blk);
}

/* in_payload follows the value exactly; errors are sticky. */
static void test_state_queries(void) {
    const char *in = "ok" TC_OPEN INV("f") PAR("a", "true", "x<y") PAR("b", "false", "[1]") INV_END TC_CLOSE;
    size_t n = strlen(in);
    coll c;
    memset(&c, 0, sizeof c);
    ds4_dsml *p = ds4_dsml_new(on_event, &c);
    /* Payload spans: from the byte after `">` to the last byte of the
     * closing tag "</｜DSML｜parameter" (exclusive). */
    const char *v1 = strstr(in, "string=\"true\">") + strlen("string=\"true\">");
    const char *v2 = strstr(in, "string=\"false\">") + strlen("string=\"false\">");
    const char *t1 = strstr(v1, "</" DSML "parameter") + strlen("</" DSML "parameter");
    const char *t2 = strstr(v2, "</" DSML "parameter") + strlen("</" DSML "parameter");
    int ok = 1, blk_ok = 1;
    for (size_t i = 0; i < n; i++) {
        ds4_dsml_feed(p, in + i, 1);
        const char *after = in + i + 1;   /* everything before `after` fed */
        int want = (after >= v1 && after < t1) || (after >= v2 && after < t2);
        if (ds4_dsml_in_payload(p) != want) {
            ok = 0;
            fprintf(stderr, "  in_payload wrong after byte %zu\n", i);
        }
        size_t bl;
        ds4_dsml_block_text(p, &bl);
        if (c.text.n + bl > i + 1) blk_ok = 0;
    }
    CHECK(ok, "in_payload tracks values");
    CHECK(blk_ok, "text + block never exceed the input fed so far");
    CHECK(c.done && ds4_dsml_in_block(p) && !ds4_dsml_in_payload(p), "done state");
    CHECK(ds4_dsml_finish(p) == DS4_OK, "finish after done");
    CHECK(ds4_dsml_feed(p, "x", 1) != DS4_OK, "feed after finish refused");
    ds4_dsml_free(p);
    coll_free(&c);

    memset(&c, 0, sizeof c);
    p = ds4_dsml_new(on_event, &c);
    CHECK(!ds4_dsml_in_block(p), "not in block at start");
    CHECK(ds4_dsml_feed(p, "a\n\n<" DSML "tool_calls>\n<bad>", 40) == DS4_EFORMAT || 1, "feed");
    int nerr = c.nerr;
    CHECK(nerr == 1, "one error");
    CHECK(ds4_dsml_feed(p, TC_CLOSE, strlen(TC_CLOSE)) == DS4_EFORMAT, "error state is sticky");
    CHECK(c.nerr == 1 && !c.done, "no events after the error");
    CHECK(ds4_dsml_finish(p) == DS4_EFORMAT, "finish after error");
    CHECK(c.nerr == 1, "finish adds no second error");
    ds4_dsml_free(p);
    coll_free(&c);

    /* NULL callback is allowed; NULL parser is refused. */
    p = ds4_dsml_new(NULL, NULL);
    CHECK(ds4_dsml_feed(p, TC_OPEN TC_CLOSE, strlen(TC_OPEN TC_CLOSE)) == DS4_OK, "null cb");
    CHECK(ds4_dsml_finish(p) == DS4_OK, "null cb finish");
    ds4_dsml_free(p);
    CHECK(ds4_dsml_feed(NULL, "x", 1) == DS4_EINVAL, "null parser");
}

/* ------------------------------------------------------------------------ */
/* Round trips                                                               */
/* ------------------------------------------------------------------------ */

static const char *const PIECES[] = {
    "a", "Z", "0", " ", "\n", "<", ">", "\"", "\\", "/", "&", "'", "\t", "\xc3\xa9", "\xe6\x97\xa5",
    "\xf0\x9f\x98\x80", "</", "<" DSML "parameter", "</" DSML "param", "</" DSML "invoke>", "\n\n<" DSML "tool_calls>",
    "string=\"true\">", "\x01", "{", "}", "[1]", "null",
};

static json_t *rand_value(int depth);

static json_t *rand_string(void) {
    ds4_buf b = {0};
    int n = (int)(rnd() % 12);
    ds4_buf_append(&b, "", 0);
    for (int i = 0; i < n; i++) ds4_buf_puts(&b, PIECES[rnd() % (sizeof PIECES / sizeof PIECES[0])]);
    json_t *s = json_stringn(b.p, b.n);
    ds4_buf_free(&b);
    return s;
}

static json_t *rand_value(int depth) {
    switch (rnd() % (depth > 2 ? 5 : 7)) {
    case 0: return rand_string();
    case 1: return json_integer((json_int_t)(rnd() % 2000000) - 1000000);
    case 2: {
        unsigned long long u = ((unsigned long long)rnd() << 32) ^ rnd() ^ ((unsigned long long)rnd() << 48);
        double d;
        memcpy(&d, &u, sizeof d);
        if (d != d || d - d != 0) d = (double)(int)(rnd() % 1000) / 8.0;
        return json_real(d);
    }
    case 3: return (rnd() & 1) ? json_true() : json_false();
    case 4: return json_null();
    case 5: {
        json_t *a = json_array();
        int n = (int)(rnd() % 4);
        for (int i = 0; i < n; i++) json_array_append_new(a, rand_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        int n = (int)(rnd() % 4);
        for (int i = 0; i < n; i++) {
            char k[16];
            snprintf(k, sizeof k, "k%u", rnd() % 100);
            json_object_set_new(o, k, rand_value(depth + 1));
        }
        return o;
    }
    }
}

static void test_round_trips(void) {
    int bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        int ncalls = 1 + (int)(rnd() % 3);
        ds4_tool_call calls[3];
        json_t *want[3];
        ds4_buf argtext[3] = {{0}};
        char names[3][32];
        for (int i = 0; i < ncalls; i++) {
            snprintf(names[i], sizeof names[i], "tool_%u%s", rnd() % 50, (rnd() & 3) ? "" : "_\xc3\xa9");
            json_t *o = json_object();
            int np = (int)(rnd() % 5);
            for (int j = 0; j < np; j++) {
                char k[24];
                snprintf(k, sizeof k, "%s%u", (rnd() & 1) ? "p" : "arg_", rnd() % 30);
                json_object_set_new(o, k, rand_value(0));
            }
            int mode = (int)(rnd() % 10);
            if (mode == 0) {
                /* not an object: becomes {"arguments": text} */
                ds4_buf_puts(&argtext[i], "ls -la | grep \"x\" <in");
                want[i] = json_pack("{s:s}", "arguments", argtext[i].p);
            } else {
                ds4_json_py_dump(o, (mode & 1) ? DS4_JSON_PY_COMPACT : DS4_JSON_PY_DEFAULT, &argtext[i]);
                want[i] = json_incref(o);
            }
            json_decref(o);
            calls[i] = (ds4_tool_call){ "id", names[i], argtext[i].p };
        }
        ds4_buf out = {0};
        const char *pre = (rnd() & 1) ? "Sure.\n" : "";
        ds4_buf_puts(&out, pre);
        int rc = ds4_render_tool_calls(calls, ncalls, &out, NULL);
        CHECK(rc == 0, "render_tool_calls rc %d", rc);
        coll c;
        int prc = run_parse(out.p, out.n, (int)(rnd() % 4), rnd() % (out.n + 1), &c, NULL);
        int ok = prc == DS4_OK && !c.bad && c.done && c.ncalls == ncalls && c.text.n == strlen(pre);
        for (int i = 0; ok && i < ncalls; i++) {
            json_error_t je;
            json_t *got = json_loadb(c.args[i].p, c.args[i].n, 0, &je);
            ok = got && strcmp(c.name[i].p, names[i]) == 0 && json_equal(got, want[i]);
            json_decref(got);
        }
        if (!ok && bad++ < 3)
            fprintf(stderr, "round trip failed (rc %d, err %s, bad %s):\n%s\n", prc, c.err, c.badwhy, out.p);
        checks++;
        if (!ok) failures++;
        coll_free(&c);
        ds4_buf_free(&out);
        for (int i = 0; i < ncalls; i++) { json_decref(want[i]); ds4_buf_free(&argtext[i]); }
    }
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i]);
    test_state_queries();
    test_round_trips();
    printf("test_dsml: %zu table cases, %d checks, %d failures\n", sizeof CASES / sizeof CASES[0],
           checks, failures);
    return failures ? 1 : 0;
}
