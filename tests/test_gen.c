/*
 * test_gen.c -- the generation driver (src/gen/generate.c, ds4_gen.h) on
 * the tiny golden model ../shared/golden/models/tiny-a-q2.gguf:
 *   - forced output holding text and a DSML tool-call block, tokenized in
 *     two pieces split at every byte: the same callbacks (text merged per
 *     channel, the call's name, arguments and end, the block), the TOOLS
 *     finish; a malformed block likewise gives TOOL_ERROR with the block's
 *     text as content;
 *   - stop sequences across token boundaries (every split): the content
 *     before the match, STOP_SEQ and its index; a held prefix that never
 *     completes is released at the end;
 *   - ds4_gen_run and the step API (the caller evaluates) give the same
 *     tokens, text and session, greedy and seeded;
 *   - prompt-lookup drafts (and the corpus, and the agent's back-off, and
 *     MTP drafts on a synthesized model with an MTP block): the tokens
 *     are those without drafts, bit for bit, with drafts really kept;
 *   - logprobs: each content token's value and top-k are the log-softmax
 *     of the logits it was chosen from, also under drafts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"
#include "ds4_gen.h"
#include "testutil.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define BLOCK "\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"read\">\n<" DSML \
              "parameter name=\"path\" string=\"true\">a.c</" DSML "parameter>\n</" DSML "invoke>\n</" \
              DSML "tool_calls>"

static ds4_model *M;
static const ds4_tokenizer *TOK;
static int V;

/* The callbacks as one normalized log: consecutive text of one channel
 * merged (a split changes the pieces, not the text). */
typedef struct {
    ds4_buf log;
    char last;               /* channel of the open text run */
    ds4_tokens toks;         /* sampled tokens */
    int n_lp, lp_bad;
    const float *lp_logits;  /* logits the next content token is chosen from */
    ds4_buf lps;             /* the logprob values, as text */
} rec;

static void text(rec *r, char ch, const char *s, size_t n) {
    if (r->last != ch) { ds4_buf_printf(&r->log, "\n%c:", ch); r->last = ch; }
    ds4_buf_append(&r->log, s, n);
}
static void cb_reason(void *ud, const char *s, size_t n) { text(ud, 'R', s, n); }
static void cb_content(void *ud, const char *s, size_t n) { text(ud, 'C', s, n); }
static void cb_rend(void *ud) { rec *r = ud; ds4_buf_puts(&r->log, "\n</think>"); r->last = 0; }
static void cb_begin(void *ud, int i, const char *s, size_t n) {
    rec *r = ud;
    ds4_buf_printf(&r->log, "\nbegin %d %.*s", i, (int)n, s);
    r->last = 0;
}
static void cb_args(void *ud, int i, const char *s, size_t n) { (void)i; text(ud, 'A', s, n); }
static void cb_end(void *ud, int i) { rec *r = ud; ds4_buf_printf(&r->log, "\nend %d", i); r->last = 0; }
static void cb_done(void *ud, const char *s, size_t n) {
    rec *r = ud;
    ds4_buf_printf(&r->log, "\ndone %zu", n);
    (void)s;
    r->last = 0;
}
static void cb_err(void *ud, const char *s, size_t n) {
    rec *r = ud;
    ds4_buf_printf(&r->log, "\nerror %.*s", (int)n, s);
    r->last = 0;
}
static void cb_token(void *ud, const float *lg, int32_t t) { (void)lg; ds4_tokens_push(&((rec *)ud)->toks, t); }

/* log-softmax in double, written here (not common/logprob.c) */
static void cb_lp(void *ud, int32_t t, double lp, const ds4_gen_lp *top, int k) {
    rec *r = ud;
    const float *lg = r->lp_logits;
    r->n_lp++;
    ds4_buf_printf(&r->lps, "%d %.9g;", t, lp);
    if (!lg) { r->lp_bad++; return; }
    double mx = lg[0], z = 0;
    for (int i = 1; i < V; i++) if (lg[i] > mx) mx = lg[i];
    for (int i = 0; i < V; i++) z += exp((double)lg[i] - mx);
    double lse = mx + log(z);
    if (fabs(lp - ((double)lg[t] - lse)) > 1e-6) r->lp_bad++;
    for (int i = 0; i < k; i++) {
        if (fabs(top[i].logprob - ((double)lg[top[i].id] - lse)) > 1e-6) r->lp_bad++;
        if (i && top[i].logprob > top[i - 1].logprob) r->lp_bad++;
    }
    /* the top one is the argmax */
    int am = 0;
    for (int i = 1; i < V; i++) if (lg[i] > lg[am]) am = i;
    if (k > 0 && top[0].id != am) r->lp_bad++;
}

static ds4_gen_cb callbacks(rec *r) {
    ds4_gen_cb cb = { 0 };
    cb.ud = r;
    cb.reasoning = cb_reason;
    cb.reasoning_end = cb_rend;
    cb.content = cb_content;
    cb.call_begin = cb_begin;
    cb.call_args = cb_args;
    cb.call_end = cb_end;
    cb.tools_done = cb_done;
    cb.dsml_error = cb_err;
    cb.token = cb_token;
    cb.logprob = cb_lp;
    return cb;
}

static void rec_free(rec *r) {
    ds4_buf_free(&r->log);
    ds4_buf_free(&r->lps);
    ds4_tokens_free(&r->toks);
}

static const char *fin_name(ds4_gen_finish f) {
    static const char *const n[] = { "running", "eos", "length", "context", "stop_seq", "tools",
                                     "tool_error", "cancel", "error" };
    return (unsigned)f < sizeof n / sizeof *n ? n[f] : "?";
}

/* Forced output text[0..split) + text[split..), stepped without
 * evaluation (forced tokens need no logits). */
static ds4_gen_finish forced_run(ds4_session *s, const char *txt, size_t split, ds4_gen_opts *o, rec *r) {
    ds4_tokens out = { 0 };
    size_t n = strlen(txt);
    if (split) ds4_tokenize(TOK, txt, split, DS4_TOK_SPECIAL, &out);
    if (split < n) ds4_tokenize(TOK, txt + split, n - split, DS4_TOK_SPECIAL, &out);
    o->forced_output = 1;
    o->output = out.v;
    o->n_output = (int)out.n;
    o->max_tokens = 1000;
    ds4_gen_cb cb = callbacks(r);
    ds4_gen *g = ds4_gen_new(s, M, o, &cb);
    ds4_gen_finish fin;
    int32_t t;
    while ((fin = ds4_gen_next(g, &t)) == DS4_GEN_RUNNING)
        if ((fin = ds4_gen_evaluated(g, DS4_OK)) != DS4_GEN_RUNNING) break;
    fin = ds4_gen_end(g, fin);
    if (fin == DS4_GEN_STOP_SEQ) ds4_buf_printf(&r->log, "\nstop %d", ds4_gen_stop_index(g));
    ds4_gen_free(g);
    ds4_tokens_free(&out);
    return fin;
}

/* Every split of `txt` gives the unsplit run's log and finish. */
static void every_split(ds4_session *s, const char *what, const char *txt, const ds4_gen_opts *base,
                        ds4_gen_finish want, const char *want_sub) {
    ds4_gen_opts o = *base;
    rec ref = { 0 };
    ds4_gen_finish f0 = forced_run(s, txt, 0, &o, &ref);
    CHECK(f0 == want, "%s: finish %s, want %s", what, fin_name(f0), fin_name(want));
    CHECK(ref.log.p && strstr(ref.log.p, want_sub), "%s: log lacks [%s]:\n%s", what, want_sub,
          ref.log.p ? ref.log.p : "");
    size_t n = strlen(txt);
    int bad = 0;
    for (size_t b = 1; b < n; b++) {
        /* inside a UTF-8 character the pieces would not tokenize to it */
        if (((unsigned char)txt[b] & 0xc0) == 0x80) continue;
        /* nor inside a special token's text */
        const char *te = strstr(txt, "</think>");
        if (te && b > (size_t)(te - txt) && b < (size_t)(te - txt) + 8) continue;
        rec r = { 0 };
        o = *base;
        ds4_gen_finish f = forced_run(s, txt, b, &o, &r);
        if (f != f0 || r.log.n != ref.log.n || memcmp(r.log.p, ref.log.p, r.log.n)) {
            if (!bad++)
                fprintf(stderr, "%s split at %zu: %s\n%s\n-- want %s\n%s\n", what, b, fin_name(f),
                        r.log.p ? r.log.p : "", fin_name(f0), ref.log.p ? ref.log.p : "");
        }
        rec_free(&r);
    }
    CHECK(!bad, "%s: %d of %zu splits differ", what, bad, n - 1);
    rec_free(&ref);
}

static void test_forced(ds4_session *s) {
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    o.parse_tools = 1;
    every_split(s, "dsml block", "Let me look.\xe2\x9c\x93" BLOCK, &o, DS4_GEN_TOOLS,
                "C:Let me look.\xe2\x9c\x93\nbegin 0 read\nA:{\"path\": \"a.c\"}\nend 0\ndone");
    /* the block is the end: what follows is never emitted */
    o.hold_calls = 0;
    every_split(s, "dsml immediate", "x" BLOCK "tail", &o, DS4_GEN_TOOLS, "\nend 0\ndone");
    ds4_gen_opts_default(&o);
    o.parse_tools = 1;
    every_split(s, "dsml malformed", "a\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"f\">\n<" DSML "bogus>",
                &o, DS4_GEN_TOOL_ERROR,
                "\nerror DSML syntax error");
    every_split(s, "dsml unterminated", "a\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"f\">\n",
                &o, DS4_GEN_TOOL_ERROR,
                "C:a\nerror DSML error: unterminated tool-call block\nC:\n\n<" DSML "tool_calls>");
    /* reasoning, </think>, content */
    ds4_gen_opts_default(&o);
    o.reasoning = 1;
    every_split(s, "think", "hmm \xc3\xa9t\xc3\xa9</think>answer", &o, DS4_GEN_EOS,
                "R:hmm \xc3\xa9t\xc3\xa9\n</think>\nC:answer");
}

static void test_stops(ds4_session *s) {
    static const char *const stops[] = { "never", "STOP", "TOP!" };
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    o.stop = stops;
    o.n_stop = 3;
    every_split(s, "stop", "abc ST\xc3\xa9 STOP def", &o, DS4_GEN_STOP_SEQ, "C:abc ST\xc3\xa9 \nstop 1");
    /* a held prefix of a stop string that never completes */
    every_split(s, "stop held", "abc nev", &o, DS4_GEN_EOS, "C:abc nev");
    /* the earliest match wins, not the first listed */
    every_split(s, "stop earliest", "xx TOP! STOP", &o, DS4_GEN_STOP_SEQ, "C:xx \nstop 2");
    /* stop strings and the DSML parser together: text before the block */
    o.parse_tools = 1;
    every_split(s, "stop+dsml", "pre" BLOCK, &o, DS4_GEN_TOOLS, "C:pre\nbegin 0 read");
}

/* A prompt that repeats itself: lookup drafts find matches. */
static void prompt(ds4_session *s) {
    const char *p = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over "
                    "the lazy dog. The quick brown fox jumps over the lazy dog. The quick";
    ds4_tokens t = { 0 };
    ds4_tokenize(TOK, p, strlen(p), DS4_TOK_PLAIN, &t);
    ds4_session_reset(s);
    CHECK(ds4_session_eval(s, t.v, (int)t.n, NULL, NULL) == DS4_OK, "prompt eval");
    ds4_tokens_free(&t);
}

static ds4_sampler *sampler(int seeded) {
    if (!seeded) return NULL;
    ds4_sampler_params sp;
    ds4_sampler_params_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 7;
    return ds4_sampler_new(V, &sp);
}

/* Generate n tokens after the prompt; step = the step API with the test
 * evaluating.  r->log and r->toks are the result. */
static ds4_gen_finish gen(ds4_session *s, const ds4_gen_opts *base, int step, int n, rec *r, ds4_spec_stats *st) {
    prompt(s);
    ds4_gen_opts o = *base;
    o.max_tokens = n;
    ds4_gen_cb cb = callbacks(r);
    ds4_gen *g = ds4_gen_new(s, M, &o, &cb);
    ds4_gen_finish fin;
    if (!step) {
        fin = ds4_gen_run(g);
    } else {
        int32_t t;
        for (;;) {
            r->lp_logits = ds4_session_logits(s);
            if ((fin = ds4_gen_next(g, &t)) != DS4_GEN_RUNNING) break;
            if ((fin = ds4_gen_evaluated(g, ds4_session_eval(s, &t, 1, NULL, NULL))) != DS4_GEN_RUNNING) break;
        }
        fin = ds4_gen_end(g, fin);
    }
    if (st) *st = *ds4_gen_spec_stats(g);
    ds4_gen_free(g);
    return fin;
}

static int same_rec(const rec *a, const rec *b) {
    return a->toks.n == b->toks.n && !memcmp(a->toks.v, b->toks.v, a->toks.n * sizeof *a->toks.v) &&
           a->log.n == b->log.n && (!a->log.n || !memcmp(a->log.p, b->log.p, a->log.n));
}

static void test_run_step(ds4_model *m, ds4_session *s) {
    ds4_session *s2 = test_new_session(m, 512, 64);
    for (int seeded = 0; seeded < 2; seeded++) {
        ds4_gen_opts o;
        ds4_gen_opts_default(&o);
        rec a = { 0 }, b = { 0 };
        o.smp = sampler(seeded);
        ds4_gen_finish fa = gen(s, &o, 0, 60, &a, NULL);
        ds4_sampler_free(o.smp);
        o.smp = sampler(seeded);
        ds4_gen_finish fb = gen(s2, &o, 1, 60, &b, NULL);
        ds4_sampler_free(o.smp);
        CHECK(fa == fb, "run %s vs step %s", fin_name(fa), fin_name(fb));
        CHECK(a.toks.n > 10, "seeded %d: %zu tokens", seeded, a.toks.n);
        CHECK(same_rec(&a, &b), "seeded %d: run and step differ (%zu vs %zu tokens)", seeded, a.toks.n, b.toks.n);
        CHECK(test_same_state(s, s2), "seeded %d: run and step sessions differ", seeded);
        rec_free(&a);
        rec_free(&b);
    }
    ds4_session_free(s2);
}

/* Drafts (o.lookup / o.mtp_draft / back-off) change nothing emitted. */
static void same_with_drafts(ds4_model *m, ds4_session *s, const char *what, const ds4_gen_opts *drafts,
                             int seeded, int n, int want_kept, int oracle) {
    ds4_session *s2 = test_new_session(m, 512, 64);
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    o.eval_all = drafts->eval_all;
    o.logprobs = 1;
    o.top_logprobs = 3;
    rec a = { 0 }, b = { 0 };
    o.smp = sampler(seeded);
    ds4_gen_finish fa = gen(s, &o, 1, n, &a, NULL);
    ds4_sampler_free(o.smp);
    ds4_gen_opts d = *drafts;
    /* oracle: the output itself as numbered lines in the corpus, so that
     * drafts are right (a random-weight model rarely repeats its prompt) */
    ds4_buf txt = { 0 }, num = { 0 };
    const char *ct[1];
    size_t cl[1];
    if (oracle) {
        ds4_detokenize(TOK, a.toks.v, a.toks.n, &txt);
        int line = 1;
        ds4_buf_printf(&num, "%6d\t", line++);
        for (size_t i = 0; i < txt.n; i++) {
            ds4_buf_append(&num, txt.p + i, 1);
            if (txt.p[i] == '\n') ds4_buf_printf(&num, "%6d\t", line++);
        }
        ds4_buf_puts(&num, "\n");
        ct[0] = num.p;
        cl[0] = num.n;
        d.corpus = ct;
        d.corpus_lens = cl;
        d.n_corpus = 1;
    }
    d.logprobs = 1;
    d.top_logprobs = 3;
    d.smp = sampler(seeded);
    ds4_spec_stats st;
    ds4_gen_finish fb = gen(s2, &d, 0, n, &b, &st);
    ds4_sampler_free(d.smp);
    CHECK(fa == fb, "%s: finish %s vs %s", what, fin_name(fa), fin_name(fb));
    CHECK(same_rec(&a, &b), "%s: tokens differ with drafts (%zu vs %zu)", what, a.toks.n, b.toks.n);
    CHECK(test_same_state(s, s2), "%s: sessions differ with drafts", what);
    CHECK(a.lps.n == b.lps.n && (!a.lps.n || !memcmp(a.lps.p, b.lps.p, a.lps.n)),
          "%s: logprobs differ with drafts", what);
    CHECK(a.n_lp > 0 && a.lp_bad == 0, "%s: %d logprobs, %d wrong", what, a.n_lp, a.lp_bad);
    CHECK(st.passes > 0 && (int)st.accepted >= want_kept, "%s: %llu passes, %llu of %llu drafts kept", what,
          (unsigned long long)st.passes, (unsigned long long)st.accepted, (unsigned long long)st.drafted);
    rec_free(&a);
    rec_free(&b);
    ds4_buf_free(&txt);
    ds4_buf_free(&num);
    ds4_session_free(s2);
}

static void test_drafts(ds4_model *m, ds4_session *s) {
    ds4_gen_opts d;
    for (int seeded = 0; seeded < 2; seeded++) {
        ds4_gen_opts_default(&d);
        d.lookup = 4;
        same_with_drafts(m, s, seeded ? "lookup seeded" : "lookup greedy", &d, seeded, 120, 10, 1);
        /* the agent's settings: every token evaluated, back-off, 2 kept free */
        d.eval_all = 1;
        d.draft_spare = 0;
        d.backoff_max = 32;
        d.cancel_first = 1;
        same_with_drafts(m, s, "lookup agent", &d, seeded, 120, 10, 1);
        /* ds4's order of the caps */
        ds4_gen_opts_default(&d);
        d.lookup = 6;
        d.eval_all = 1;
        d.late_caps = 1;
        same_with_drafts(m, s, "lookup cli", &d, seeded, 120, 10, 1);
    }
}

/* MTP drafts need a model with an MTP block: synthesized (ds4-synth). */
static void test_mtp(void) {
    const char *bin = getenv("DS4_BIN_DIR");
    char dir[] = "/tmp/test_gen.XXXXXX", path[256], cmd[1024];
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    snprintf(path, sizeof path, "%s/tiny-mtp.gguf", dir);
    snprintf(cmd, sizeof cmd, "%s/ds4-synth --preset tiny --recipe f16 --mtp --seed 5 -o %s > /dev/null",
             bin && *bin ? bin : ".", path);
    if (system(cmd)) {
        CHECK(0, "failed: %s", cmd);
    } else {
        ds4_model *m = test_load_model(path, 2);
        const ds4_model *keep = M;
        const ds4_tokenizer *kt = TOK;
        M = m;
        TOK = ds4_model_tokenizer(m);
        ds4_model_info mi;
        ds4_model_get_info(m, &mi);
        const int kv = V;
        V = mi.n_vocab;
        ds4_session *s = test_new_session(m, 512, 64);
        for (int seeded = 0; seeded < 2; seeded++) {
            ds4_gen_opts d;
            ds4_gen_opts_default(&d);
            d.mtp_draft = 2;
            if (!seeded) {
                same_with_drafts(m, s, "mtp greedy", &d, 0, 100, 0, 0);
            } else {
                /* sampled drafts are judged by the speculative-sampling
                 * rule: same distribution, other draws -- here only
                 * "runs, and the session is its tokens" */
                rec b = { 0 };
                d.smp = sampler(1);
                ds4_spec_stats st;
                ds4_gen_finish f = gen(s, &d, 0, 60, &b, &st);
                ds4_sampler_free(d.smp);
                CHECK(f == DS4_GEN_LENGTH || f == DS4_GEN_EOS, "mtp seeded: %s", fin_name(f));
                CHECK(st.passes > 0, "mtp seeded: no pass");
                rec_free(&b);
            }
        }
        ds4_session_free(s);
        ds4_model_free(m);
        M = (ds4_model *)keep;
        TOK = kt;
        V = kv;
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) { }
}

static void test_logprobs_forced(ds4_session *s) {
    /* forced tokens report the distribution they were forced from */
    prompt(s);
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    ds4_tokens out = { 0 };
    ds4_tokenize(TOK, "hello world", 11, DS4_TOK_PLAIN, &out);
    o.forced_output = 1;
    o.output = out.v;
    o.n_output = (int)out.n;
    o.max_tokens = 100;
    o.logprobs = 1;
    o.top_logprobs = 20;
    rec r = { 0 };
    ds4_gen_cb cb = callbacks(&r);
    ds4_gen *g = ds4_gen_new(s, M, &o, &cb);
    int32_t t;
    ds4_gen_finish fin;
    for (;;) {
        r.lp_logits = ds4_session_logits(s);
        if ((fin = ds4_gen_next(g, &t)) != DS4_GEN_RUNNING) break;
        if ((fin = ds4_gen_evaluated(g, ds4_session_eval(s, &t, 1, NULL, NULL))) != DS4_GEN_RUNNING) break;
    }
    fin = ds4_gen_end(g, fin);
    CHECK(fin == DS4_GEN_EOS, "forced logprobs: %s", fin_name(fin));
    CHECK(r.n_lp == (int)out.n && r.lp_bad == 0, "forced logprobs: %d of %zu, %d wrong", r.n_lp, out.n, r.lp_bad);
    CHECK(ds4_gen_n_tokens(g) == (int)out.n, "forced: %d tokens", ds4_gen_n_tokens(g));
    ds4_gen_free(g);
    rec_free(&r);
    ds4_tokens_free(&out);
}

int main(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    if (access(path, R_OK)) {
        printf("test_gen: SKIP: %s not found\n", path);
        return 0;
    }
    M = test_load_model(path, 2);
    TOK = ds4_model_tokenizer(M);
    ds4_model_info info;
    ds4_model_get_info(M, &info);
    V = info.n_vocab;
    ds4_session *s = test_new_session(M, 512, 64);
    test_forced(s);
    test_stops(s);
    test_run_step(M, s);
    test_drafts(M, s);
    test_logprobs_forced(s);
    ds4_session_free(s);
    ds4_model_free(M);
    test_mtp();
    printf("test_gen: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
