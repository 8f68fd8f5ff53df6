/*
 * test_oom.c -- allocation failures anywhere in the prompt path give an
 * error, never a crash, a leak or a silently shorter result.
 *
 * Linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc (Makefile), so
 * every allocation the library and this test make goes through the
 * wrappers below; when armed, call number `fail_at` returns NULL.  For a
 * tiny model loaded once, the sequence
 *     render a conversation -> tokenize -> buffer pushes -> session create
 *     -> evaluate -> sample -> detokenize
 * is first run clean (counting its allocations, K), then once for every N
 * in 1..K with allocation N failing.  Each run must either report an error
 * (a DS4_E* code, with a message where the API has one) or produce exactly
 * the clean run's prompt, ids, sampled token and text.  Model loading is
 * covered the same way on a sample of N (it allocates much more).  The GLM
 * text path (render a conversation with tools and calls, parse GLM calls)
 * is checked the same way for every N.  Under
 * DEBUG=1 LeakSanitizer checks that every failure path freed what it held.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"
#include "testutil.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t k);
void *__real_realloc(void *p, size_t n);

static long n_calls;        /* allocations since arming */
static long fail_at;        /* 0 = never fail */
static int armed;
static long n_failed;       /* injected failures */

static int inject(void) {
    if (!armed) return 0;
    if (++n_calls == fail_at) { n_failed++; return 1; }
    return 0;
}

void *__wrap_malloc(size_t n) { return inject() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t k) { return inject() ? NULL : __real_calloc(n, k); }
void *__wrap_realloc(void *p, size_t n) { return inject() ? NULL : __real_realloc(p, n); }

static void arm(long n) { n_calls = 0; fail_at = n; armed = 1; n_failed = 0; }
static void disarm(void) { armed = 0; }

typedef struct {
    ds4_buf prompt, text;
    ds4_tokens ids;
    int32_t sampled;
} outcome;

static void outcome_free(outcome *o) {
    ds4_buf_free(&o->prompt);
    ds4_buf_free(&o->text);
    ds4_tokens_free(&o->ids);
}

/* The prompt path of a front end.  Returns 0 or the first error. */
static int prompt_path(ds4_model *m, outcome *o, char **err) {
    const ds4_tokenizer *tok = ds4_model_tokenizer(m);
    ds4_message msgs[2];
    memset(msgs, 0, sizeof msgs);
    msgs[0].role = DS4_ROLE_SYSTEM;
    msgs[0].content = "You are terse.";
    msgs[0].content_len = strlen(msgs[0].content);
    msgs[0].tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_time\","
                         "\"description\":\"now\",\"parameters\":{\"type\":\"object\"}}}]";
    msgs[1].role = DS4_ROLE_USER;
    msgs[1].content = "What time is it? Answer in one word, please.";
    msgs[1].content_len = strlen(msgs[1].content);
    ds4_render_opts ro = { .think = DS4_THINK_NONE };
    int rc = ds4_render_chat(msgs, 2, &ro, &o->prompt, err);
    if (rc) return rc;
    if ((rc = ds4_tokenize(tok, o->prompt.p, o->prompt.n, DS4_TOK_SPECIAL, &o->ids))) return rc;
    /* a builder that checks once at the end (sticky failures) */
    ds4_tokens copy = { 0 };
    for (size_t i = 0; i < o->ids.n; i++) ds4_tokens_push(&copy, o->ids.v[i]);
    rc = ds4_tokens_failed(&copy);
    if (!rc && (copy.n != o->ids.n || memcmp(copy.v, o->ids.v, copy.n * sizeof *copy.v))) rc = DS4_EINVAL;
    ds4_tokens_free(&copy);
    if (rc) return rc;

    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = 128;
    sp.prefill_chunk = 16;
    ds4_session *s = ds4_session_new(m, &sp, err);
    if (!s) return DS4_ENOMEM;
    /* the first 16 ids (the rendered tools make the prompt long; this is
     * about allocations, not about the forward pass) */
    rc = ds4_session_eval(s, o->ids.v, o->ids.n < 16 ? (int)o->ids.n : 16, NULL, NULL);
    if (!rc) {
        const float *lg = ds4_session_logits(s);
        o->sampled = lg ? ds4_sample_greedy(lg, ds4_tok_n_vocab(tok)) : -1;
        rc = ds4_detokenize(tok, o->ids.v, o->ids.n, &o->text);
    }
    ds4_session_free(s);
    return rc;
}

static int same(const outcome *a, const outcome *b) {
    return a->prompt.n == b->prompt.n && !memcmp(a->prompt.p, b->prompt.p, a->prompt.n) &&
           a->ids.n == b->ids.n && !memcmp(a->ids.v, b->ids.v, a->ids.n * sizeof *a->ids.v) &&
           a->text.n == b->text.n && !memcmp(a->text.p, b->text.p, a->text.n) &&
           a->sampled == b->sampled;
}

/* GLM: render a conversation with tools and calls, then parse the calls of
 * a model output; the prompt and the events' bytes go to `o`. */
static void glm_ev(void *ud, const ds4_dsml_event *ev) {
    ds4_buf *b = ud;
    char k = (char)('A' + ev->kind);
    ds4_buf_append(b, &k, 1);
    if (ev->kind != DS4_DSML_ERROR && ev->len) ds4_buf_append(b, ev->text, ev->len);
}

static int glm_path(ds4_buf *prompt, ds4_buf *events, char **err) {
    static const char *tools =
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}}}}}]";
    static const ds4_tool_call calls[] = { { "c1", "f", "{\"s\": \"x\", \"n\": 3, \"o\": [1, {\"k\": null}]}" } };
    ds4_message msgs[4];
    memset(msgs, 0, sizeof msgs);
    msgs[0] = (ds4_message){ .role = DS4_ROLE_SYSTEM, .content = "Be brief.", .content_len = 9,
                             .tools_json = tools };
    msgs[1] = (ds4_message){ .role = DS4_ROLE_USER, .content = "go", .content_len = 2 };
    msgs[2] = (ds4_message){ .role = DS4_ROLE_ASSISTANT, .content = "  ok </think>x", .content_len = 14,
                             .tool_calls = calls, .n_tool_calls = 1 };
    msgs[3] = (ds4_message){ .role = DS4_ROLE_TOOL, .content = "done", .content_len = 4 };
    ds4_render_opts ro = { .think = DS4_THINK_HIGH, .format = DS4_FORMAT_GLM };
    int rc = ds4_render_chat(msgs, 4, &ro, prompt, err);
    if (rc) return rc;
    ds4_glm_calls *p = ds4_glm_calls_new(tools, glm_ev, events);
    if (!p) return DS4_ENOMEM;
    const char *out = "Sure.<tool_call>f<arg_key>s</arg_key><arg_value>123</arg_value><arg_key>n</arg_key>"
                      "<arg_value>4</arg_value><arg_key>u</arg_key><arg_value>[1, 2]</arg_value></tool_call>";
    rc = ds4_glm_calls_feed(p, out, strlen(out));
    if (!rc) rc = ds4_glm_calls_finish(p);
    ds4_glm_calls_free(p);
    return ds4_buf_failed(events) ? DS4_ENOMEM : rc;
}

static void glm_oom(void) {
    ds4_buf rp = { 0 }, re = { 0 };
    char *err = NULL;
    arm(0);
    int rc = glm_path(&rp, &re, &err);
    disarm();
    long k = n_calls;
    CHECK(rc == 0 && rp.n > 100 && re.n > 20, "clean GLM path: rc %d (%s)", rc, err ? err : "");
    long errors = 0;
    for (long n = 1; n <= k; n++) {
        ds4_buf p = { 0 }, e = { 0 };
        free(err);
        err = NULL;
        arm(n);
        rc = glm_path(&p, &e, &err);
        disarm();
        if (rc) {
            errors++;
            CHECK(rc == DS4_ENOMEM || rc == DS4_EFORMAT, "GLM allocation %ld failing: unexpected %s", n,
                  ds4_strerror(rc));
        } else {
            CHECK(p.n == rp.n && !memcmp(p.p, rp.p, p.n) && e.n == re.n && !memcmp(e.p, re.p, e.n),
                  "GLM allocation %ld failing: success with a different result", n);
        }
        ds4_buf_free(&p);
        ds4_buf_free(&e);
    }
    free(err);
    CHECK(errors > 0, "no injected GLM failure was reported");
    printf("GLM text path: %ld allocations, %ld failures reported\n", k, errors);
    ds4_buf_free(&rp);
    ds4_buf_free(&re);
}

int main(void) {
    glm_oom();
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    mp.n_threads = 1;
    char *err = NULL;

    /* --- model load: a sample of N over its allocations --- */
    arm(0);
    ds4_model *m = ds4_model_load(path, &mp, &err);
    disarm();
    long k_load = n_calls;
    CHECK(m != NULL, "clean load of %s: %s", path, err ? err : "?");
    if (!m) return 1;
    ds4_model_free(m);
    long step = k_load / 150 + 1, load_fail = 0;
    for (long n = 1; n <= k_load; n += (n < 64 ? 1 : step)) {
        free(err);
        err = NULL;
        arm(n);
        ds4_model *x = ds4_model_load(path, &mp, &err);
        disarm();
        if (x) {
            ds4_model_free(x);   /* e.g. a failed optional allocation with a fallback */
        } else {
            load_fail++;
            CHECK(err != NULL && *err, "load with allocation %ld failing: no message", n);
        }
    }
    free(err);
    err = NULL;
    CHECK(load_fail > 0, "no injected failure made the load fail (%ld allocations)", k_load);
    printf("model load: %ld allocations, %ld sampled failures refused with a message\n", k_load, load_fail);

    /* --- the prompt path: every N --- */
    m = ds4_model_load(path, &mp, &err);
    CHECK(m != NULL, "load: %s", err ? err : "?");
    if (!m) return 1;
    outcome ref = { 0 };
    arm(0);
    int rc = prompt_path(m, &ref, &err);
    disarm();
    long k = n_calls;
    CHECK(rc == 0, "clean prompt path: %s (%s)", ds4_strerror(rc), err ? err : "");
    CHECK(ref.ids.n > 10 && ref.text.n == ref.prompt.n, "clean run: %zu ids, %zu text bytes", ref.ids.n,
          ref.text.n);
    long errors = 0, equal = 0;
    for (long n = 1; n <= k; n++) {
        outcome o = { 0 };
        free(err);
        err = NULL;
        arm(n);
        rc = prompt_path(m, &o, &err);
        disarm();
        if (rc) {
            errors++;
            CHECK(rc == DS4_ENOMEM || rc == DS4_EINVAL,
                  "allocation %ld failing: unexpected %s", n, ds4_strerror(rc));
        } else {
            /* the failure hit an allocation with a fallback: the result
             * must then be complete */
            equal++;
            CHECK(same(&o, &ref), "allocation %ld failing: success with a different result "
                  "(prompt %zu/%zu bytes, %zu/%zu ids)", n, o.prompt.n, ref.prompt.n, o.ids.n, ref.ids.n);
        }
        outcome_free(&o);
    }
    free(err);
    CHECK(errors > 0, "no injected failure was reported");
    printf("prompt path: %ld allocations; %ld failures reported, %ld absorbed with an identical result\n",
           k, errors, equal);
    outcome_free(&ref);
    ds4_model_free(m);

    /* --- ds4_buf_read_file: whole file or an error, length as before --- */
    {
        char fp[] = "/tmp/ds4-oom-XXXXXX";
        int fd = mkstemp(fp);
        CHECK(fd >= 0, "mkstemp");
        FILE *f = fdopen(fd, "wb");
        static char big[200000];
        for (size_t i = 0; i < sizeof big; i++) big[i] = (char)(i * 7 + 1);
        fwrite(big, 1, sizeof big, f);
        fclose(f);
        ds4_buf b = { 0 };
        ds4_buf_puts(&b, "head");
        CHECK(ds4_buf_read_file(&b, fp) == 0 && b.n == 4 + sizeof big && !memcmp(b.p + 4, big, sizeof big)
              && b.p[b.n] == 0, "read_file: the whole file after what was there");
        ds4_buf_free(&b);
        long kr = 0, refused = 0;
        arm(0);
        ds4_buf_read_file(&b, fp);
        disarm();
        kr = n_calls;
        ds4_buf_free(&b);
        for (long n = 1; n <= kr; n++) {
            ds4_buf_puts(&b, "head");
            arm(n);
            int r = ds4_buf_read_file(&b, fp);
            disarm();
            if (r) {
                refused++;
                CHECK(errno == ENOMEM && b.n == 4 && !memcmp(b.p, "head", 5),
                      "read_file with allocation %ld failing: errno %d, %zu bytes kept", n, errno, b.n);
            } else {
                CHECK(b.n == 4 + sizeof big, "read_file absorbed failure %ld with %zu bytes", n, b.n);
            }
            ds4_buf_free(&b);
        }
        CHECK(refused > 0, "read_file: no injected failure was reported (%ld allocations)", kr);
        CHECK(ds4_buf_read_file(&b, "/nonexistent/ds4-oom") == -1 && errno == ENOENT && b.n == 0,
              "read_file of a missing file: ENOENT");
        ds4_buf_free(&b);
        f = fopen(fp, "wb");
        fclose(f);
        CHECK(ds4_buf_read_file(&b, fp) == 0 && b.p && b.n == 0 && b.p[0] == 0, "read_file of an empty file");
        ds4_buf_free(&b);
        unlink(fp);
        printf("read_file: %ld allocations, %ld failures reported\n", kr, refused);
    }
    printf("test_oom: %d checks, %d failed\n", checks, failures);
    return failures != 0;
}
