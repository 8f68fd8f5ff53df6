/*
 * test_glm_calls.c -- tests of the streaming GLM tool-call parser
 * (glm_calls.c) and its exact replay through ds4_render_tool_calls_glm.
 *
 * Owns: nothing outside this test.  Table-driven like test_dsml.c: each case
 * is fed whole, one byte at a time, split at every position, and in random
 * chunks; all feedings must give the same events, the event sequence must
 * be well formed, and the arguments must be the expected JSON text.  For
 * every case that parses, the calls re-rendered from name + arguments must
 * be the block text byte for byte when the input is canonical (the
 * template's own writing), which is what exact replay relies on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ds4.h"

#include "testutil.h"
#include "call_events.h"

/* The event collector, coll_same and rnd are call_events.h's. */

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"location\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
    "\"maybe\": {\"type\": [\"string\", \"null\"]}, \"nums\": {\"type\": [\"array\", \"null\"]}}}}},"
    " {\"name\": \"save_note\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"filter\": {\"type\": \"object\"}, \"text\": {\"type\": \"string\"}}}}]";

/* mode 0 whole, 1 bytes, 2 split at pos, 3 random chunks */
static int run_parse(const char *s, size_t n, int mode, size_t pos, coll *c, ds4_buf *block) {
    memset(c, 0, sizeof *c);
    ds4_glm_calls *p = ds4_glm_calls_new(TOOLS, on_event, c);
    size_t i = 0;
    int rc = DS4_OK;
    while (i < n) {
        size_t k = n - i;
        if (mode == 1) k = 1;
        else if (mode == 2) k = i < pos ? pos - i : n - i;
        else if (mode == 3) { k = 1 + rnd() % 20; if (k > n - i) k = n - i; }
        int r = ds4_glm_calls_feed(p, s + i, k);
        if (r != DS4_OK) rc = r;
        i += k;
    }
    int rf = ds4_glm_calls_finish(p);
    if (rf != DS4_OK) rc = rf;
    size_t bl;
    const char *bt = ds4_glm_calls_block_text(p, &bl);
    if (c->text.n + bl > n) badseq(c, "TEXT + block bytes exceed the input");
    if (bl && memcmp(bt, s + c->text.n, bl) != 0)
        badseq(c, "block text is not the input after the visible text");
    if (block) { block->n = 0; ds4_buf_append(block, bt, bl); }
    CHECK(!bl || ds4_glm_calls_in_block(p), "in_block with block text");
    CHECK(!ds4_glm_calls_in_block(p) || c->text.n < n, "in_block without a tag");
    ds4_glm_calls_free(p);
    return rc;
}

typedef struct {
    const char *name;
    const char *in;
    const char *text;
    int ncalls;
    const char *calls[4][2];   /* name, args JSON (NULL: don't check) */
    int done;
    const char *err;           /* error substring, NULL = none */
    int canonical;             /* re-rendering gives the block text back */
} tcase;

#define TC "<tool_call>"
#define TCE "</tool_call>"
#define KV(k, v) "<arg_key>" k "</arg_key><arg_value>" v "</arg_value>"

static const tcase CASES[] = {
    { "plain text", "Hello <b>world</b> a < b\n", "Hello <b>world</b> a < b\n", 0, {{0}}, 0, NULL, 0 },
    { "empty", "", "", 0, {{0}}, 0, NULL, 0 },
    { "prefix of the tag at the end is text", "a <tool_ca b <tool_call", "a <tool_ca b <tool_call",
      0, {{0}}, 0, NULL, 0 },
    { "the template's example",
      TC "get_weather" KV("location", "Seoul") KV("days", "3") TCE, "", 1,
      { { "get_weather", "{\"location\": \"Seoul\", \"days\": 3}" } }, 1, NULL, 1 },
    { "content then two calls",
      "Checking both." TC "get_weather" KV("location", "Seoul") TCE TC "get_time" TCE, "Checking both.", 2,
      { { "get_weather", "{\"location\": \"Seoul\"}" }, { "get_time", "{}" } }, 1, NULL, 1 },
    { "JSON value, string with < and a partial close tag",
      TC "save_note" KV("filter", "{\"n\": [1, 2], \"q\": \"\xec\x84\x9c\xec\x9a\xb8 \xe2\x98\x83\"}")
      KV("text", "a<b & \"c\" </tool </arg_valu </arg_key>") TCE, "", 1,
      { { "save_note", "{\"filter\": {\"n\": [1, 2], \"q\": \"\xec\x84\x9c\xec\x9a\xb8 \xe2\x98\x83\"}, "
                       "\"text\": \"a<b & \\\"c\\\" </tool </arg_valu </arg_key>\"}" } }, 1, NULL, 1 },
    { "a string-typed value that reads as JSON stays text",
      TC "get_weather" KV("location", "123") KV("days", "3") TCE, "", 1,
      { { "get_weather", "{\"location\": \"123\", \"days\": 3}" } }, 1, NULL, 1 },
    { "unknown function: JSON when it parses, else text; JSON strings are text",
      TC "lookup" KV("q", "42") KV("w", "word") KV("o", "{\"a\": null}") KV("s", "\"quoted\"") KV("e", "")
      KV("b", "true") TCE, "", 1,
      { { "lookup", "{\"q\": 42, \"w\": \"word\", \"o\": {\"a\": null}, \"s\": \"\\\"quoted\\\"\", "
                    "\"e\": \"\", \"b\": true}" } }, 1, NULL, 1 },
    { "type lists: with string -> untyped rule, without -> JSON",
      TC "get_weather" KV("maybe", "null") KV("nums", "[1, 2.5]") TCE, "", 1,
      { { "get_weather", "{\"maybe\": null, \"nums\": [1, 2.5]}" } }, 1, NULL, 1 },
    { "newlines between tags (GLM 4.5 style)",
      TC "get_weather\n<arg_key>location</arg_key>\n<arg_value>Seoul</arg_value>\n" TCE "\n" TC " get_time " TCE "\n",
      "", 2, { { "get_weather", "{\"location\": \"Seoul\"}" }, { "get_time", "{}" } }, 1, NULL, 0 },
    { "escapes, unicode, invalid UTF-8",
      TC "w" KV("p", "q\" b\\ t\t \x01 caf\xc3\xa9 \xf0\x9f\x98\x80 a\xff" "b\xe2\x82" "c") TCE, "", 1,
      { { "w", "{\"p\": \"q\\\" b\\\\ t\\t \\u0001 caf\xc3\xa9 \xf0\x9f\x98\x80 a\xef\xbf\xbd" "b\xef\xbf\xbd"
               "c\"}" } }, 1, NULL, 0 },
    { "a value with newlines and a non-canonical JSON",
      TC "lookup" KV("code", "line1\nline2\n") KV("arr", "[1,2]") TCE, "", 1,
      { { "lookup", "{\"code\": \"line1\\nline2\\n\", \"arr\": [1,2]}" } }, 1, NULL, 0 },
    { "unicode names", TC "m\xc3\xa9t\xc3\xa9o" KV("ville", "Z\xc3\xbcrich") TCE, "", 1,
      { { "m\xc3\xa9t\xc3\xa9o", "{\"ville\": \"Z\xc3\xbcrich\"}" } }, 1, NULL, 1 },

    /* Malformed. */
    { "unterminated", TC "get_time<arg_key>x</arg_key>", "", 1, {{ "get_time", NULL }}, 0, "unterminated", 0 },
    { "arg_value without arg_key", TC "get_time<arg_value>1</arg_value>" TCE, "", 1, {{ "get_time", NULL }}, 0,
      "expected", 0 },
    { "a key without its value", TC "f<arg_key>a</arg_key>" TCE, "", 1, {{ "f", NULL }}, 0, "expected", 0 },
    { "an unterminated key", TC "f<arg_key>a<arg_value>1</arg_value>" TCE, "", 1, {{ "f", NULL }}, 0,
      "bad byte", 0 },
    { "text between tags", TC "f" KV("a", "1") "junk" TCE, "", 1, {{ "f", NULL }}, 0, "expected", 0 },
    { "no function name", TC KV("a", "1") TCE, "", 0, {{0}}, 0, "name", 0 },
    { "a key given twice", TC "f" KV("a", "1") KV("a", "2") TCE, "", 1, {{ "f", NULL }}, 0, "duplicate", 0 },
    { "an integer argument that is not JSON", TC "get_weather" KV("days", "three") TCE, "", 1,
      {{ "get_weather", NULL }}, 0, "not JSON", 0 },
    { "the second call malformed", TC "get_time" TCE TC "get_time<arg_value>1</arg_value>" TCE, "", 2,
      { { "get_time", "{}" }, { "get_time", NULL } }, 0, "expected", 0 },
    { "text after a call", TC "f" TCE " and more", "", 1, {{ "f", "{}" }}, 0, "after", 0 },
    { "tag prefix after a call at the end", TC "f" TCE "<tool_", "", 1, {{ "f", "{}" }}, 0, "after", 0 },
    { "control byte in a name", TC "a\x01" "b" TCE, "", 0, {{0}}, 0, "name", 0 },
    { "invalid UTF-8 in a name", TC "a\xff" TCE, "", 0, {{0}}, 0, "UTF-8", 0 },
    { "invalid UTF-8 in a key", TC "f<arg_key>k\xff</arg_key>", "", 1, {{ "f", NULL }}, 0, "UTF-8", 0 },
};

/* Parse the args JSON back into a ds4_tool_call and re-render the calls. */
static void check_replay(const tcase *t, const coll *c, const ds4_buf *blk) {
    ds4_tool_call calls[MAXC];
    for (int i = 0; i < c->ncalls; i++)
        calls[i] = (ds4_tool_call){ "id", c->name[i].p, c->args[i].p };
    ds4_buf out = {0};
    CHECK(ds4_render_tool_calls_glm(calls, c->ncalls, &out, NULL) == DS4_OK, "%s: render", t->name);
    int same = out.n == blk->n && memcmp(out.p, blk->p, out.n) == 0;
    CHECK(same, "%s: replay differs\n  got  %.*s\n  want %.*s", t->name, (int)out.n, out.p ? out.p : "",
          (int)blk->n, blk->p ? blk->p : "");
    ds4_buf_free(&out);
}

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
            CHECK(ref.args[i].p && strcmp(ref.args[i].p, t->calls[i][1]) == 0,
                  "%s: call %d args\n  got  %s\n  want %s", t->name, i,
                  ref.args[i].p ? ref.args[i].p : "(none)", t->calls[i][1]);
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
        const char *m = strstr(t->in, TC);
        const char *e = m;
        for (const char *x = m; (x = strstr(x, TCE)); x += strlen(TCE)) e = x + strlen(TCE);
        CHECK(m && blk.n == (size_t)(e - m) && memcmp(blk.p, m, blk.n) == 0, "%s: block text", t->name);
    }
    if (t->canonical) check_replay(t, &ref, &blk);

    for (int mode = 1; mode <= 3; mode++) {
        size_t reps = mode == 2 ? n + 1 : mode == 3 ? 20 : 1;
        for (size_t r = 0; r < reps; r++) {
            ds4_buf b2 = {0};
            run_parse(t->in, n, mode, r, &c, &b2);
            CHECK(!c.bad, "%s: mode %d/%zu: bad sequence: %s", t->name, mode, r, c.badwhy);
            CHECK(coll_same(&ref, &c), "%s: mode %d/%zu: result differs", t->name, mode, r);
            CHECK(b2.n == blk.n && (!b2.n || !memcmp(b2.p, blk.p, b2.n)), "%s: mode %d/%zu: block text differs",
                  t->name, mode, r);
            ds4_buf_free(&b2);
            coll_free(&c);
        }
    }
    ds4_buf_free(&blk);
    coll_free(&ref);
}

/* Random calls: render canonically, parse back, get the same names and
 * values and the same bytes again. */
static void round_trips(void) {
    static const char *vals[] = { "\"x\"", "\"a<b</arg_valu\"", "\"\\u00e9t\\u00e9\"", "-7", "2.5", "true",
                                  "null", "[1, \"two\", {\"k\": false}]", "{\"o\": {\"p\": []}}", "\"\"",
                                  "\"line\\nbreak\"", "1e+100" };
    const int nv = (int)(sizeof vals / sizeof vals[0]);
    for (int it = 0; it < 200; it++) {
        ds4_tool_call calls[3];
        char args[3][512];
        int nc = 1 + (int)(rnd() % 3);
        for (int i = 0; i < nc; i++) {
            int na = (int)(rnd() % 4);
            size_t o = 0;
            o += (size_t)snprintf(args[i] + o, sizeof args[i] - o, "{");
            for (int a = 0; a < na; a++)
                o += (size_t)snprintf(args[i] + o, sizeof args[i] - o, "%s\"k%d\": %s", a ? ", " : "", a,
                                      vals[rnd() % (unsigned)nv]);
            snprintf(args[i] + o, sizeof args[i] - o, "}");
            calls[i] = (ds4_tool_call){ "id", i == 1 ? "save_note" : "tool_x", args[i] };
        }
        ds4_buf r = {0};
        CHECK(ds4_render_tool_calls_glm(calls, nc, &r, NULL) == DS4_OK, "rt render");
        coll c;
        ds4_buf blk = {0};
        int rc = run_parse(r.p, r.n, 3, 0, &c, &blk);
        CHECK(rc == DS4_OK && c.ncalls == nc && c.done, "rt %d: parse rc %d calls %d err %s", it, rc, c.ncalls, c.err);
        CHECK(blk.n == r.n && !memcmp(blk.p, r.p, r.n), "rt %d: block text", it);
        for (int i = 0; i < nc && i < c.ncalls; i++) {
            json_t *a = json_loads(calls[i].arguments, 0, NULL), *b = json_loads(c.args[i].p, 0, NULL);
            CHECK(a && b && json_equal(a, b), "rt %d: call %d args %s vs %s", it, i, calls[i].arguments, c.args[i].p);
            json_decref(a); json_decref(b);
        }
        if (c.ncalls == nc) check_replay(&(tcase){ .name = "round trip" }, &c, &blk);
        ds4_buf_free(&r);
        ds4_buf_free(&blk);
        coll_free(&c);
    }
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i]);
    round_trips();
    /* payload flag */
    ds4_glm_calls *p = ds4_glm_calls_new(NULL, NULL, NULL);
    ds4_glm_calls_feed(p, TC "f<arg_key>a</arg_key><arg_val", strlen(TC "f<arg_key>a</arg_key><arg_val"));
    CHECK(!ds4_glm_calls_in_payload(p), "not in payload in a tag");
    ds4_glm_calls_feed(p, "ue>x", 4);
    CHECK(ds4_glm_calls_in_payload(p), "in payload in a value");
    ds4_glm_calls_feed(p, "</arg_value>", 12);
    CHECK(!ds4_glm_calls_in_payload(p) && ds4_glm_calls_in_block(p), "payload ended");
    ds4_glm_calls_free(p);
    printf("test_glm_calls: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
