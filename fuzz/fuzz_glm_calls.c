/*
 * fuzz_glm_calls.c -- libFuzzer target for the streaming GLM tool-call
 * parser (glm_calls.c); the harness of fuzz_dsml.c with GLM's parser.
 *
 * Owns: only this harness.  Build and run (from the repo root):
 *
 *   clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
 *     -Isrc fuzz/fuzz_glm_calls.c src/text/glm_calls.c src/base/json_py.c \
 *     src/base/escape.c src/base/utf8.c src/base/buf.c -ljansson -lm \
 *     -o build/fuzz_glm_calls
 *   build/fuzz_glm_calls -max_total_time=60 -max_len=4096 [corpus_dir]
 *
 * The parser is given a tools list (one function with a string, an integer
 * and an untyped argument) so the schema-typed paths are fuzzed too.
 * The first input byte seeds the chunk sizes; the rest is fed to the parser
 * once whole and once in pseudo-random chunks (1..64 bytes).  Checked on
 * every input (abort() on violation, so libFuzzer reports it):
 *   - no crash / sanitizer report;
 *   - events well formed: TEXT only before the first call, CALL_BEGIN
 *     indices 0,1,2..., ARGS_DELTA / CALL_END only inside the open call,
 *     DONE only with no call open, nothing after ERROR or DONE (except the
 *     ERROR for trailing text), at most one ERROR, no empty TEXT/ARGS;
 *   - visible TEXT + block text never exceed the input, and the block text
 *     is exactly the input bytes following the visible text;
 *   - whole and chunked feeding give identical results;
 *   - the arguments of every completed call parse as a JSON object, and
 *     in_payload is never set outside a block.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "ds4.h"

typedef struct {
    ds4_buf text, args;    /* all args of all calls, "\x1e"-separated */
    ds4_buf names;
    int ncalls, open, done, nerr;
    char err[400];
} res;

static void die(const char *why) {
    fprintf(stderr, "fuzz_glm_calls invariant violated: %s\n", why);
    abort();
}

static void on_event(void *ud, const ds4_dsml_event *ev) {
    res *r = ud;
    if (r->nerr) die("event after ERROR");
    if (r->done && ev->kind != DS4_DSML_ERROR) die("event after DONE");
    switch (ev->kind) {
    case DS4_DSML_TEXT:
        if (r->ncalls || !ev->len) die("bad TEXT");
        ds4_buf_append(&r->text, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_BEGIN:
        if (r->open || ev->call_index != r->ncalls) die("bad CALL_BEGIN");
        r->ncalls++;
        r->open = 1;
        ds4_buf_append(&r->names, ev->text, ev->len);
        ds4_buf_append(&r->names, "\x1e", 1);
        break;
    case DS4_DSML_ARGS_DELTA:
        if (!r->open || ev->call_index != r->ncalls - 1 || !ev->len) die("bad ARGS_DELTA");
        ds4_buf_append(&r->args, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_END: {
        if (!r->open || ev->call_index != r->ncalls - 1) die("bad CALL_END");
        r->open = 0;
        /* The arguments of this call are the bytes since the last separator. */
        size_t s = r->args.n;
        while (s > 0 && r->args.p[s - 1] != '\x1e') s--;
        json_error_t je;
        json_t *v = json_loadb(r->args.p + s, r->args.n - s, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
        if (!json_is_object(v)) {
            fprintf(stderr, "args: %.*s\n%s\n", (int)(r->args.n - s), r->args.p + s, je.text);
            die("completed call arguments are not a JSON object");
        }
        json_decref(v);
        ds4_buf_append(&r->args, "\x1e", 1);
        break;
    }
    case DS4_DSML_DONE:
        if (r->open) die("DONE inside a call");
        r->done = 1;
        break;
    case DS4_DSML_ERROR:
        r->nerr++;
        if (!ev->len) die("empty error reason");
        snprintf(r->err, sizeof r->err, "%.*s", (int)ev->len, ev->text);
        break;
    default:
        die("unknown event");
    }
}

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"s\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}, \"u\": {}}}}}]";

static void run(const uint8_t *d, size_t n, unsigned seed, res *r) {
    memset(r, 0, sizeof *r);
    ds4_glm_calls *p = ds4_glm_calls_new(TOOLS, on_event, r);
    if (!p) die("alloc");
    size_t i = 0;
    while (i < n) {
        size_t k = n - i;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            k = 1 + (seed >> 16) % 64;
            if (k > n - i) k = n - i;
        }
        ds4_glm_calls_feed(p, (const char *)d + i, k);
        if (ds4_glm_calls_in_payload(p) && !ds4_glm_calls_in_block(p)) die("payload outside block");
        size_t bl;
        ds4_glm_calls_block_text(p, &bl);
        if (r->text.n + bl > i + k) die("TEXT + block exceed the bytes fed");
        i += k;
    }
    ds4_glm_calls_finish(p);
    size_t bl;
    const char *bt = ds4_glm_calls_block_text(p, &bl);
    if (r->text.n + bl > n) die("TEXT + block exceed the input");
    if (r->text.n && memcmp(r->text.p, d, r->text.n) != 0) {
        /* Visible text is the input prefix, unless the block started: then
         * it is the prefix before the marker, still a prefix of the input. */
        die("TEXT is not a prefix of the input");
    }
    if (bl && memcmp(bt, d + r->text.n, bl) != 0) die("block text is not the input after TEXT");
    ds4_glm_calls_free(p);
}

static int same_buf(const ds4_buf *a, const ds4_buf *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

static void res_free(res *r) {
    ds4_buf_free(&r->text);
    ds4_buf_free(&r->args);
    ds4_buf_free(&r->names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned seed = data[0] | 1u;
    res a, b;
    run(data + 1, size - 1, 0, &a);
    run(data + 1, size - 1, seed, &b);
    if (!same_buf(&a.text, &b.text) || !same_buf(&a.args, &b.args) || !same_buf(&a.names, &b.names) ||
        a.ncalls != b.ncalls || a.done != b.done || a.nerr != b.nerr || strcmp(a.err, b.err) != 0)
        die("whole and chunked feeding differ");
    res_free(&a);
    res_free(&b);
    return 0;
}
