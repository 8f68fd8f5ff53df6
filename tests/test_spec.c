/*
 * test_spec.c -- speculative decoding (docs/SPEC.md) on the tiny golden
 * models (sliding window 32, compress ratios 4 and 128, indexer top-k 8):
 *   - rollback: a staged pass of n tokens whose last n - n_keep are junk,
 *     committed to n_keep, leaves a session whose snapshot bytes are
 *     identical (memcmp) to one that evaluated only the kept tokens, and
 *     whose logits stay identical while both continue; checked at window
 *     edges and compressor frontiers, for every n_keep, and with passes
 *     that force the raw window buffer to compact;
 *   - the pass's per-position logits equal plain decoding's;
 *   - generation with prompt-lookup drafts, and with oracle drafts that
 *     are right for a varying number of tokens and then wrong, equals
 *     plain decoding token for token for hundreds of tokens (greedy, and
 *     seeded sampling at temperature 1), with a bit-identical final state;
 *   - ds4_lookup_draft on hand-made histories;
 *   - ds4_spec_resolve: the emitted token is distributed as the target p
 *     (chi-square over 200000 draws, 9 degrees of freedom, threshold 27.88
 *     = the 0.1 % critical value; fixed seed);
 *   - the distribution speculative sampling uses for p and q
 *     (ds4_sampler_dist) is the one ds4_sample draws from, under
 *     temperature, min-p, top-k and top-p: same support, and 200000 draws
 *     of ds4_sample and of ds4_sampler_draw against it (chi-square at the
 *     0.1 % critical value); greedy gives a point mass on the argmax;
 *   - ds4_spec_judge (the rule as the server uses it): drafts drawn from a
 *     q far from p, 200000 judgments: the emitted token follows p
 *     (chi-square), stays in p's support, and drafts are kept at the rate
 *     sum_x min(p(x), q(x)) (4.5 sigma).
 * DS4_SPEC_QUICK=1 (for sanitizer builds) runs one model, fewer cut
 * points and shorter generations.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "engine/engine_internal.h"   /* ds4_sampler_dist / _draw / _target */

#include "testutil.h"

/* Speculative decoding of n tokens.  mode 0: prompt lookup (up to nd);
 * mode 1: oracle drafts from `ref`, right for a varying count then junk. */
static void spec_decode(ds4_session *s, ds4_sampler *smp, int V, int n, int mode, int nd,
                        const ds4_tokens *ref, ds4_tokens *out, ds4_spec_stats *st) {
    const float *lg = ds4_session_logits(s);
    int32_t cur = smp ? ds4_sample(smp, lg) : ds4_sample_greedy(lg, V);
    ds4_tokens_push(out, cur);
    ds4_tokens hist = { 0 };
    for (int i = 0; i < ds4_session_n_tokens(s); i++) ds4_tokens_push(&hist, ds4_session_tokens(s)[i]);
    ds4_tokens_push(&hist, cur);
    int step = 0;
    while ((int)out->n < n) {
        int32_t draft[32], got[33];
        int left = n - (int)out->n, k = 0;
        int want = nd < left - 1 ? nd : left - 1;
        if (mode == 0) {
            k = ds4_lookup_draft(hist.v, (int)hist.n, want, draft);
        } else {
            int good = (step * 7) % (nd + 2);   /* 0 .. nd+1 right tokens */
            for (k = 0; k < want; k++) {
                size_t at = out->n + (size_t)k;
                int32_t r = at < ref->n ? ref->v[at] : 0;
                draft[k] = k < good ? r : (r + 1 + k) % V;
            }
        }
        int n_got = 0;
        int rc = ds4_spec_step(s, smp, cur, draft, k, -1, got, &n_got, st);
        CHECK(rc == DS4_OK && n_got >= 1 && n_got <= k + 1, "spec step rc %d n %d", rc, n_got);
        if (rc || n_got < 1) break;
        for (int i = 0; i < n_got; i++) {
            ds4_tokens_push(out, got[i]);
            ds4_tokens_push(&hist, got[i]);
        }
        cur = got[n_got - 1];
        step++;
    }
    ds4_tokens_free(&hist);
}

static int quick;

/* ds4_lookup_corpus: numbered lines of the newest texts, unnumbered, up to
 * max_bytes of them, tokenized oldest first */
static void test_corpus(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    ds4_model *m = test_load_model(path, 1);
    const ds4_tokenizer *tok = ds4_model_tokenizer(m);
    const char *texts[] = { "1\tone one\n2\ttwo two\n", "no numbers here\n", NULL, "     7\tseven\n" };
    const size_t lens[] = { strlen(texts[0]), strlen(texts[1]), 0, strlen(texts[3]) };
    ds4_tokens all = { 0 }, newest = { 0 }, want = { 0 }, want1 = { 0 };
    const char *w = "one one\ntwo two\n", *w1 = "seven\n";
    ds4_tokenize(tok, w, strlen(w), DS4_TOK_PLAIN, &want);
    ds4_tokenize(tok, w1, strlen(w1), DS4_TOK_PLAIN, &want);
    ds4_tokenize(tok, w1, strlen(w1), DS4_TOK_PLAIN, &want1);
    CHECK(ds4_lookup_corpus(tok, texts, lens, 4, 1 << 20, &all) == DS4_OK && all.n == want.n &&
          !memcmp(all.v, want.v, want.n * sizeof *want.v), "corpus of every numbered text, oldest first (%zu tokens)", all.n);
    CHECK(ds4_lookup_corpus(tok, texts, lens, 4, 3, &newest) == DS4_OK && newest.n == want1.n &&
          !memcmp(newest.v, want1.v, want1.n * sizeof *want1.v), "a small budget keeps the newest (%zu tokens)", newest.n);
    ds4_tokens_free(&all); ds4_tokens_free(&newest); ds4_tokens_free(&want); ds4_tokens_free(&want1);
    ds4_model_free(m);
}

static void test_model(const char *name) {
    char path[512], seq[512];
    snprintf(path, sizeof path, "%s/golden/models/%s", test_shared(), name);
    snprintf(seq, sizeof seq, "%s/golden/sequences/seq_600a.ids.txt", test_shared());
    ds4_model *m = test_load_model(path, 2);
    char *err = NULL;
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    const int V = info.n_vocab;
    ds4_tokens ids = { 0 };
    CHECK(test_read_ids(seq, &ids) == 0 && ids.n == 600, "read %s", seq);

    /* reference logits of the sequence */
    const int N = 300;
    ds4_session *ref = test_new_session(m, 1024, 64);
    ds4_buf all = { 0 };
    ds4_session_capture(ref, &all, NULL);
    CHECK(ds4_session_eval(ref, ids.v, N, NULL, NULL) == DS4_OK, "reference eval");
    ds4_session_capture(ref, NULL, NULL);
    const float *L = (const float *)all.p;

    /* 1. rollback at window edges and compressor frontiers */
    int cuts[] = { 1, 3, 31, 32, 33, 126, 127, 128, 255 };
    int passes[] = { 2, 9, 17 };
    for (size_t ci = 0; ci < sizeof cuts / sizeof cuts[0]; ci++) {
        int k = cuts[ci];
        if (quick && k != 32 && k != 127) continue;
        ds4_session *a = test_new_session(m, 1024, 64);
        CHECK(ds4_session_eval(a, ids.v, k, NULL, NULL) == DS4_OK, "eval %d", k);
        ds4_buf base = { 0 };
        ds4_session_snapshot(a, &base);
        for (size_t pi = 0; pi < sizeof passes / sizeof passes[0]; pi++) {
            int n = passes[pi];
            for (int keep = 1; keep <= n; keep++) {
                if (keep != 1 && keep != n && keep != n / 2 && keep != n - 1) continue;
                CHECK(ds4_session_restore(a, base.p, base.n, &err) == DS4_OK, "restore");
                int32_t pass[17];
                for (int i = 0; i < n; i++)
                    pass[i] = i < keep ? ids.v[k + i] : (ids.v[k + i] * 7 + 13 + i) % V;
                CHECK(ds4_session_eval_draft(a, pass, n) == DS4_OK, "eval_draft");
                for (int i = 0; i < keep; i++)
                    CHECK(memcmp(ds4_session_draft_logits(a, i), L + (size_t)(k + i) * V,
                                 (size_t)V * 4) == 0, "%s: pass logits row %d at %d", name, i, k);
                CHECK(ds4_session_draft_logits(a, n) == NULL, "row past the pass");
                CHECK(ds4_session_draft_commit(a, keep) == DS4_OK, "commit");
                CHECK(ds4_session_draft_commit(a, 1) == DS4_EINVAL, "second commit refused");
                CHECK(ds4_session_n_tokens(a) == k + keep, "token count after commit");
                CHECK(memcmp(ds4_session_logits(a), L + (size_t)(k + keep - 1) * V, (size_t)V * 4) == 0,
                      "%s: logits after commit %d/%d at %d", name, keep, n, k);
                ds4_session *b = test_new_session(m, 1024, 64);
                CHECK(ds4_session_eval(b, ids.v, k + keep, NULL, NULL) == DS4_OK, "eval b");
                CHECK(test_same_state(a, b), "%s: rolled-back state != never-drafted state (cut %d, pass %d, keep %d)",
                      name, k, n, keep);
                /* both continue: decode a few, then a prefill */
                int at = k + keep;
                for (int i = 0; i < 3; i++, at++) {
                    ds4_session_eval(a, ids.v + at, 1, NULL, NULL);
                    CHECK(memcmp(ds4_session_logits(a), L + (size_t)at * V, (size_t)V * 4) == 0,
                          "%s: decode after rollback at %d", name, at);
                }
                ds4_session_eval(a, ids.v + at, 20, NULL, NULL);
                CHECK(memcmp(ds4_session_logits(a), L + (size_t)(at + 19) * V, (size_t)V * 4) == 0,
                      "%s: prefill after rollback", name);
                ds4_session_free(b);
            }
        }
        ds4_buf_free(&base);
        ds4_session_free(a);
    }

    /* misuse */
    {
        ds4_session *a = test_new_session(m, 40, 8);
        CHECK(ds4_session_draft_capacity(a) == 8, "capacity is the chunk when smaller");
        int32_t p9[9] = { 0 };
        CHECK(ds4_session_eval_draft(a, p9, 9) == DS4_EINVAL, "pass above capacity");
        CHECK(ds4_session_draft_commit(a, 1) == DS4_EINVAL, "commit without a pass");
        CHECK(ds4_session_eval(a, ids.v, 36, NULL, NULL) == DS4_OK, "eval 36");
        CHECK(ds4_session_eval_draft(a, ids.v + 36, 5) == DS4_ECTX, "pass beyond ctx");
        CHECK(ds4_session_n_tokens(a) == 36, "ECTX left the session");
        int32_t bad[2] = { 1, V };
        CHECK(ds4_session_eval_draft(a, bad, 2) == DS4_EINVAL, "bad id");
        CHECK(ds4_session_eval_draft(a, ids.v + 36, 3) == DS4_OK, "pass");
        CHECK(ds4_session_eval(a, ids.v + 39, 1, NULL, NULL) == DS4_OK, "eval makes it final");
        CHECK(ds4_session_draft_commit(a, 1) == DS4_EINVAL && ds4_session_n_tokens(a) == 40,
              "commit after eval refused");
        ds4_session_free(a);
    }

    /* 2. long generations: lookup and oracle drafts == plain decoding */
    const int P = 40, G = quick ? 150 : 420;
    for (int sampled = 0; sampled < 2; sampled++) {
        ds4_sampler_params sp;
        ds4_sampler_params_default(&sp);
        sp.seed = 1234;
        ds4_session *pl = test_new_session(m, 1024, 64);
        ds4_session_eval(pl, ids.v, P, NULL, NULL);
        ds4_sampler *s0 = sampled ? ds4_sampler_new(V, &sp) : NULL;
        ds4_tokens want = { 0 };
        test_plain_decode(pl, s0, V, G, &want);
        for (int mode = 0; mode < 2; mode++) {
            ds4_session *sp_s = test_new_session(m, 1024, mode ? 64 : 12);
            ds4_session_eval(sp_s, ids.v, P, NULL, NULL);
            ds4_sampler *s1 = sampled ? ds4_sampler_new(V, &sp) : NULL;
            ds4_tokens got = { 0 };
            ds4_spec_stats st = { 0 };
            spec_decode(sp_s, s1, V, G, mode, mode ? 8 : 16, &want, &got, &st);
            int same = got.n == want.n && memcmp(got.v, want.v, want.n * 4) == 0;
            CHECK(same, "%s: %s %s drafts: output differs from plain decoding", name,
                  sampled ? "sampled" : "greedy", mode ? "oracle" : "lookup");
            if (same)
                CHECK(test_same_state(sp_s, pl), "%s: final state after speculative decoding differs", name);
            CHECK(st.emitted == (uint64_t)(G - 1) && st.accepted + st.passes == st.emitted, "stats add up");
            if (mode == 1) CHECK(st.accepted > 0 && st.accepted < st.drafted, "oracle drafts partly accepted");
            fprintf(stderr, "%s %s %s: %llu passes, %llu drafted, %llu accepted, %.2f tokens/pass\n", name,
                    sampled ? "sampled" : "greedy", mode ? "oracle" : "lookup",
                    (unsigned long long)st.passes, (unsigned long long)st.drafted,
                    (unsigned long long)st.accepted, (double)st.emitted / (double)(st.passes ? st.passes : 1));
            ds4_tokens_free(&got);
            ds4_sampler_free(s1);
            ds4_session_free(sp_s);
        }
        ds4_tokens_free(&want);
        ds4_sampler_free(s0);
        ds4_session_free(pl);
    }

    ds4_buf_free(&all);
    ds4_session_free(ref);
    ds4_tokens_free(&ids);
    ds4_model_free(m);
}

static void test_lookup(void) {
    int32_t out[8];
    int32_t h1[] = { 1, 2, 3, 4, 5, 9, 2, 3 };      /* "2 3" -> 4 5 9 2 3 */
    int n = ds4_lookup_draft(h1, 8, 3, out);
    CHECK(n == 3 && out[0] == 4 && out[1] == 5 && out[2] == 9, "bigram lookup: n %d", n);
    int32_t h2[] = { 7, 1, 2, 3, 8, 2, 3, 6, 1, 2, 3 };   /* trigram 1 2 3: most recent earlier */
    n = ds4_lookup_draft(h2, 11, 4, out);
    CHECK(n == 4 && out[0] == 8 && out[1] == 2 && out[2] == 3 && out[3] == 6, "trigram beats bigram");
    int32_t h3[] = { 5, 6, 7, 8 };
    CHECK(ds4_lookup_draft(h3, 4, 4, out) == 0, "no repeat, no draft");
    int32_t h4[] = { 4, 4 };
    n = ds4_lookup_draft(h4, 2, 5, out);
    CHECK(n == 1 && out[0] == 4, "draft stops at the end of the history");
    CHECK(ds4_lookup_draft(h1, 8, 0, out) == 0 && ds4_lookup_draft(h1, 1, 3, out) == 0, "degenerate");

    /* a second source: the suffix of hist looked up in src, its length
     * reported (ds4-agent: the read results without line numbers) */
    int g = -1;
    int32_t src[] = { 9, 2, 3, 4, 6, 1, 2, 3, 5, 7 };
    n = ds4_lookup_draft_in(h1, 8, src, 10, 4, out, &g);   /* suffix ... 9 2 3: "9 2 3" is at src[0] */
    CHECK(n == 4 && g == 3 && out[0] == 4 && out[1] == 6 && out[2] == 1 && out[3] == 2,
          "lookup in src: n %d, match %d", n, g);
    n = ds4_lookup_draft_in(h2, 11, src, 10, 2, out, &g);   /* "6 1 2 3" at src[4]: 5 7 */
    CHECK(n == 2 && g == 4 && out[0] == 5 && out[1] == 7, "lookup in src, longest: n %d", n);
    n = ds4_lookup_draft_in(h1, 8, NULL, 0, 3, out, &g);
    CHECK(n == 3 && g == 2 && out[0] == 4, "src NULL is the history itself (match %d)", g);
    int32_t s3[] = { 3 };
    CHECK(ds4_lookup_draft_in(h1, 8, s3, 1, 3, out, &g) == 0 && g == 0, "a match with nothing after it");
    /* src == NULL agrees with ds4_lookup_draft on random histories */
    long same = 0;
    for (int t = 0; t < 2000; t++) {
        int32_t h[40], o1[8], o2[8];
        int hn = 1 + (int)(rand() % 40);
        for (int i = 0; i < hn; i++) h[i] = rand() % 4;
        int a = ds4_lookup_draft(h, hn, 5, o1), b = ds4_lookup_draft_in(h, hn, NULL, 0, 5, o2, NULL);
        same += a == b && !memcmp(o1, o2, (size_t)a * sizeof *o1);
    }
    CHECK(same == 2000, "ds4_lookup_draft_in(NULL) == ds4_lookup_draft: %ld of 2000", same);

    /* numbered listings -> their lines without the numbers */
    static const struct { const char *in, *out; int lines; } un[] = {
        { "     1\tint x;\n     2\t\n     3\treturn x;\n[lines 1-3 of 3]\n", "int x;\n\nreturn x;\n", 3 },
        { "9\tline9\n10\tline10", "line9\nline10\n", 2 },                        /* flush left, no final newline */
        { "    12\xe2\x86\x92  indented\n    13\xe2\x86\x92}\n", "  indented\n}\n", 2 },   /* U+2192 */
        { "plain text\n 12 apples\n\tx\n12:30\n", "", 0 },                    /* no number + separator */
        { "", "", 0 },
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        ds4_buf b = { 0 };
        int l = ds4_lookup_unnumber(un[i].in, strlen(un[i].in), &b);
        CHECK(l == un[i].lines && b.n == strlen(un[i].out) && (!b.n || !memcmp(b.p, un[i].out, b.n)),
              "ds4_lookup_unnumber case %zu: %d lines, '%.*s'", i, l, (int)b.n, b.p ? b.p : "");
        ds4_buf_free(&b);
    }
}

static uint64_t rs = 88172645463325252ull;
static double unit(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (rs >> 11) * (1.0 / 9007199254740992.0);
}

static void test_resolve(void) {
    enum { V = 10, DRAWS = 200000 };
    const float p[V] = { .30f, .20f, .15f, .10f, .08f, .07f, .05f, .03f, .01f, .01f };
    const float q[V] = { .05f, .05f, .40f, .05f, .05f, .20f, .05f, .05f, .05f, .05f };
    const float *qs[2] = { q, NULL };
    float onehot[V] = { 0 };
    onehot[2] = 1.0f;
    qs[1] = onehot;
    for (int qi = 0; qi < 2; qi++) {
        const float *Q = qs[qi];
        double cdf[V], a = 0;
        for (int i = 0; i < V; i++) cdf[i] = (a += Q[i]);
        long cnt[V] = { 0 };
        for (int d = 0; d < DRAWS; d++) {
            double u = unit() * a;
            int dr = 0;
            while (dr < V - 1 && u >= cdf[dr]) dr++;
            int32_t t = ds4_spec_resolve(p, Q, V, dr, unit(), unit());
            CHECK(t >= 0 && t < V, "token in range");
            if (t >= 0 && t < V) cnt[t]++;
        }
        double chi = 0;
        for (int i = 0; i < V; i++) {
            double e = (double)DRAWS * p[i];
            chi += (cnt[i] - e) * (cnt[i] - e) / e;
        }
        CHECK(chi < 27.88, "speculative sampling matches p: chi2 %.2f (q %d)", chi, qi);
        /* and the draft distribution itself is far from p (the test has power) */
        double chq = 0;
        for (int i = 0; i < V; i++) {
            double e = (double)DRAWS * p[i], o = (double)DRAWS * Q[i];
            chq += (o - e) * (o - e) / e;
        }
        CHECK(chq > 1000, "q differs from p");
    }
}

/* chi-square critical values at 0.1 %, 1..30 degrees of freedom */
static const double crit001[31] = { 0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88,
                                    29.59, 31.26, 32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31,
                                    43.82, 45.31, 46.80, 48.27, 49.73, 51.18, 52.62, 54.05, 55.48,
                                    56.89, 58.30, 59.70 };

/* Pearson chi-square of draw counts against a distribution over its
 * support; *outside counts tokens drawn where dist is 0, *bins the
 * support's size. */
static double chi_support(const long *cnt, const float *dist, int V, int draws, int *outside, int *bins) {
    double chi = 0;
    *outside = *bins = 0;
    for (int i = 0; i < V; i++) {
        if (!(dist[i] > 0)) { *outside += cnt[i] != 0; continue; }
        double e = (double)draws * dist[i];
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        (*bins)++;
    }
    return chi;
}

static void test_sampler_dist(void) {
    enum { V = 64, DRAWS = 200000 };
    float lg[V];
    for (int i = 0; i < V; i++) lg[i] = (float)(3.0 * sin(i * 1.7) + 0.05 * i);
    lg[9] = lg[10];   /* a tie */
    /* {temperature, min_p, top_k, top_p} */
    static const float cfg[][4] = { { 1.0f, 0.03f, 0, 1.0f }, { 0.7f, 0.05f, 0, 1.0f }, { 1.3f, 0.0f, 12, 1.0f },
                                    { 0.9f, 0.02f, 20, 0.8f }, { 2.0f, 0.0f, 0, 0.6f } };
    float dist[V];
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        ds4_sampler_params sp;
        ds4_sampler_params_default(&sp);
        sp.temperature = cfg[ci][0];
        sp.min_p = cfg[ci][1];
        sp.top_k = (int)cfg[ci][2];
        sp.top_p = cfg[ci][3];
        sp.seed = 77 + ci;
        ds4_sampler *smp = ds4_sampler_new(V, &sp);
        ds4_sampler_dist(smp, lg, dist);
        double z = 0;
        int support = 0;
        for (int i = 0; i < V; i++) { z += dist[i]; support += dist[i] > 0; }
        CHECK(fabs(z - 1) < 1e-5, "cfg %zu: dist sums to %.7f", ci, z);
        CHECK(memcmp(ds4_sampler_target(smp, lg), dist, sizeof dist) == 0, "cfg %zu: target == dist", ci);
        for (int way = 0; way < 2; way++) {
            long cnt[V] = { 0 };
            for (int d = 0; d < DRAWS; d++) {
                int32_t t = way == 0 ? ds4_sample(smp, lg) : ds4_sampler_draw(smp, dist);
                if (t >= 0 && t < V) cnt[t]++;
            }
            int outside, bins;
            double chi = chi_support(cnt, dist, V, DRAWS, &outside, &bins);
            CHECK(outside == 0, "cfg %zu way %d: a draw outside the distribution's support", ci, way);
            CHECK(bins >= 2 && bins - 1 <= 30 && chi < crit001[bins - 1],
                  "cfg %zu way %d: draws follow ds4_sampler_dist: chi2 %.2f, %d dof", ci, way, chi, bins - 1);
        }
        CHECK(support > 1 && support < V, "cfg %zu: the filters cut (%d kept)", ci, support);
        ds4_sampler_free(smp);
    }
    /* ds4_spec_judge: drafts drawn from a q far from p (another sampler's
     * distribution of shuffled logits, broader), judged against p = the
     * logits through a truncating sampler: the emitted token follows p,
     * never leaves its support, and the draft is kept at sum min(p, q) */
    {
        ds4_sampler_params sp, sq;
        ds4_sampler_params_default(&sp);
        sp.temperature = 0.9f; sp.min_p = 0.02f; sp.top_k = 20; sp.top_p = 0.8f; sp.seed = 5;
        ds4_sampler_params_default(&sq);
        sq.temperature = 2.0f; sq.min_p = 0.0f; sq.seed = 6;
        ds4_sampler *smp = ds4_sampler_new(V, &sp), *qs = ds4_sampler_new(V, &sq);
        float rev[V], q[V], p[V];
        for (int i = 0; i < V; i++) rev[i] = lg[(i + 7) % V];   /* another order, some overlap */
        ds4_sampler_dist(qs, rev, q);
        ds4_sampler_dist(smp, lg, p);
        double alpha = 0, tv = 0;
        for (int i = 0; i < V; i++) { alpha += p[i] < q[i] ? p[i] : q[i]; tv += fabs((double)p[i] - q[i]) / 2; }
        long cnt[V] = { 0 }, kept = 0;
        for (int d = 0; d < DRAWS; d++) {
            int32_t dr = ds4_sampler_draw(qs, q);
            int ok = 0;
            int32_t t = ds4_spec_judge(smp, lg, q, dr, &ok);
            kept += ok;
            CHECK(!ok || t == dr, "accepted means the draft");
            if (t >= 0 && t < V) cnt[t]++;
        }
        int outside, bins;
        double chi = chi_support(cnt, p, V, DRAWS, &outside, &bins);
        double sd = sqrt(DRAWS * alpha * (1 - alpha));
        CHECK(tv > 0.3 && alpha > 0.02, "judge: q far from p but overlapping (TV %.3f, overlap %.3f)", tv, alpha);
        CHECK(outside == 0, "judge: a token outside p's support");
        CHECK(bins >= 2 && bins - 1 <= 30 && chi < crit001[bins - 1], "judge: emitted tokens follow p: chi2 %.2f, %d dof",
              chi, bins - 1);
        CHECK(fabs(kept - DRAWS * alpha) < 4.5 * sd + 1, "judge: kept %ld, expected %.1f", kept, DRAWS * alpha);
        printf("test_spec: ds4_spec_judge: TV(p,q) %.3f, chi2 %.2f (%d dof), kept %ld, expected %.1f\n", tv, chi,
               bins - 1, kept, DRAWS * alpha);
        ds4_sampler_free(smp);
        ds4_sampler_free(qs);
    }
    /* greedy: a point mass on the argmax, and no draw */
    ds4_sampler_params sp;
    ds4_sampler_params_default(&sp);
    sp.temperature = 0;
    ds4_sampler *g = ds4_sampler_new(V, &sp);
    CHECK(ds4_sampler_is_greedy(g), "greedy sampler");
    ds4_sampler_dist(g, lg, dist);
    int am = ds4_sample_greedy(lg, V), ok = dist[am] == 1.0f;
    for (int i = 0; i < V; i++) ok &= i == am || dist[i] == 0.0f;
    CHECK(ok, "greedy dist: point mass on the argmax");
    ds4_sampler_free(g);
}

int main(void) {
    test_lookup();
    test_corpus();
    test_resolve();
    test_sampler_dist();
    const char *q = getenv("DS4_SPEC_QUICK"), *dbg = getenv("DS4_DEBUG_BUILD");
    /* the sanitizer pass of `make test` (tests/run.sh sets DS4_DEBUG_BUILD) */
    quick = (q && *q && *q != '0') || (dbg && !strcmp(dbg, "1"));
    test_model("tiny-a-q2.gguf");
    if (!quick) test_model("tiny-a-f16.gguf");
    printf("test_spec: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
