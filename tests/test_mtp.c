/*
 * test_mtp.c -- MTP drafts (docs/MTP.md) on tiny models that ds4-synth
 * writes with --mtp (the golden tiny-a shape: sliding window 32, compress
 * ratios 4 and 128; random MTP weights, so the drafts are rarely right):
 *   - greedy generation with MTP drafts (1, 2 and 4 per pass) equals plain
 *     greedy decoding token for token for 150-300 tokens (past the window
 *     edge and the ratio-4 and -128 compressor frontiers), with a
 *     bit-identical final state;
 *     also with every other pass drafted by an oracle (right for a varying
 *     count), so that passes keep several tokens and the MTP state must
 *     follow multi-token commits;
 *   - seeded sampling (temperature 1; 0.7 with top-k 40; 2 with no
 *     min-p, where sampled drafts are kept) with sampled MTP drafts
 *     (ds4_spec_step_mtp): a rerun with the same seed gives the same
 *     tokens and state, and the state after the passes and rollbacks is
 *     byte-identical to a plain evaluation of the emitted tokens;
 *   - statistically (the speculative-sampling rule end to end): from one
 *     state, 2000 seeded ds4_spec_step_mtp steps at temperature 2 with no
 *     truncation; the first emitted token against the target p (the test's
 *     own softmax of the logits), chi-square over 10 bins of about equal p
 *     mass at the 0.1 % critical value; the block's q is far from p (total
 *     variation > 0.2), and the first draft is kept at the rate
 *     sum_x min(p(x), q(x)) the rule predicts (within 4.5 sigma), so both
 *     the accept and the residual paths run.  Again at temperature 1 with
 *     the stop token = the token of largest min(p, q) (a drafted stop is
 *     judged at its position, not dropped);
 *   - the MTP state follows the session exactly: after a speculative
 *     generation (staged passes, rollbacks) the next MTP logits are
 *     bit-identical to those of a fresh session that evaluated the same
 *     tokens in one prefill; drafts leave the session's logits untouched;
 *   - the block against tests/mtp_ref.py, a float64 reference written from
 *     docs/MTP.md (two chained draft steps after a 40-token prompt);
 *   - a model without an MTP block: ds4_mtp_draft is DS4_EUNSUP.
 * DS4_DEBUG_BUILD=1 (the sanitizer pass) runs shorter generations.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"

#include "testutil.h"

static int quick;
static char dir[256];

/* Speculative decoding of n tokens with up to nd MTP drafts per pass.
 * With `ref` (the plain output), every other pass uses oracle drafts from
 * it instead, right for a varying count (0 .. nd+1) then junk: passes that
 * keep several tokens, which the MTP state must follow. */
static void mtp_decode(ds4_session *s, ds4_sampler *smp, int V, int n, int nd, const ds4_tokens *ref,
                       ds4_tokens *out, ds4_spec_stats *st) {
    const float *lg = ds4_session_logits(s);
    int32_t cur = smp ? ds4_sample(smp, lg) : ds4_sample_greedy(lg, V);
    ds4_tokens_push(out, cur);
    int step = 0;
    while ((int)out->n < n) {
        int32_t draft[DS4_DRAFT_PASS_MAX], got[DS4_DRAFT_PASS_MAX];
        int left = n - (int)out->n;
        int want = nd < left - 1 ? nd : left - 1, k = 0;
        if (ref && step % 2 == 0) {
            int good = (step * 7) % (nd + 2);
            for (k = 0; k < want; k++) {
                size_t at = out->n + (size_t)k;
                int32_t r = at < ref->n ? ref->v[at] : 0;
                draft[k] = k < good ? r : (r + 1 + k) % V;
            }
        } else if (want > 0 && !smp && step % 4 == 1) {
            /* greedy: ds4_mtp_draft + ds4_spec_step by hand, once in a while */
            float before = ds4_session_logits(s)[7];
            k = ds4_mtp_draft(s, cur, want, draft);
            CHECK(k == want, "mtp draft %d of %d", k, want);
            CHECK(ds4_session_logits(s)[7] == before, "drafting leaves the session's logits alone");
            if (k < 0) break;
        } else if (want > 0) {
            /* what ds4 --mtp runs: sampled drafts under sampling */
            int n_got = 0;
            uint64_t d0 = st->drafted;
            int rc = ds4_spec_step_mtp(s, smp, cur, want, -1, got, &n_got, st);
            CHECK(rc == DS4_OK && n_got >= 1 && n_got <= want + 1, "mtp step rc %d n %d", rc, n_got);
            CHECK(st->drafted - d0 == (uint64_t)want, "mtp step drafted %d", (int)(st->drafted - d0));
            if (rc || n_got < 1) break;
            for (int i = 0; i < n_got; i++) ds4_tokens_push(out, got[i]);
            cur = got[n_got - 1];
            step++;
            continue;
        }
        int n_got = 0;
        int rc = ds4_spec_step(s, smp, cur, draft, k, -1, got, &n_got, st);
        CHECK(rc == DS4_OK && n_got >= 1 && n_got <= k + 1, "spec step rc %d n %d", rc, n_got);
        if (rc || n_got < 1) break;
        for (int i = 0; i < n_got; i++) ds4_tokens_push(out, got[i]);
        cur = got[n_got - 1];
        step++;
    }
}

static ds4_model *load(const char *path) {
    ds4_model *m = test_load_model(path, 2);
    return m;
}

static void synth(const char *recipe, char *path, size_t cap) {
    const char *bin = getenv("DS4_BIN_DIR");
    snprintf(path, cap, "%s/tiny-%s-mtp.gguf", dir, recipe);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/ds4-synth --preset tiny --recipe %s --mtp --seed 5 -o %s > /dev/null",
             bin && *bin ? bin : ".", recipe, path);
    if (system(cmd)) { fprintf(stderr, "failed: %s\n", cmd); exit(1); }
}

static ds4_sampler *mode_sampler(int mode, int V) {
    if (!mode) return NULL;
    ds4_sampler_params sp;
    ds4_sampler_params_default(&sp);
    sp.temperature = mode == 1 ? 1.0f : mode == 2 ? 0.7f : 2.0f;
    sp.top_k = mode == 2 ? 40 : 0;
    if (mode == 3) sp.min_p = 0.0f;   /* broad p and q: sampled drafts are kept */
    sp.seed = 11;
    return ds4_sampler_new(V, &sp);
}

static void test_generation(ds4_model *m, const ds4_tokens *ids) {
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    const int V = info.n_vocab, P = 40;
    /* {mode, drafts, oracle mix, tokens}: mode 0 greedy, 1 seeded
     * temperature 1, 2 seeded 0.7 with top-k 40, 3 seeded temperature 2
     * without min-p (p and q broad enough that sampled drafts are kept,
     * ~30 %: multi-token commits); after the 40-token prompt 150 tokens
     * cross the window (32) and the ratio-128 frontier */
    static const int cfg[][4] = { {0, 2, 1, 300}, {0, 1, 0, 150}, {0, 4, 0, 150}, {1, 2, 1, 300},
                                  {2, 2, 0, 150}, {3, 3, 0, 150} };
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int mode = cfg[ci][0], nd = cfg[ci][1], mix = cfg[ci][2], N = quick ? 60 : cfg[ci][3];
        if (quick && ci > 1 && ci != 5) continue;
        ds4_sampler *s1 = mode_sampler(mode, V), *s2 = mode_sampler(mode, V);
        ds4_session *a = test_new_session(m, 1024, 64), *b = test_new_session(m, 1024, 64);
        CHECK(ds4_session_eval(a, ids->v, P, NULL, NULL) == DS4_OK, "prompt");
        CHECK(ds4_session_eval(b, ids->v, P, NULL, NULL) == DS4_OK, "prompt");
        ds4_tokens x = { 0 }, y = { 0 };
        ds4_spec_stats st = { 0 };
        test_plain_decode(a, s1, V, N, &x);
        mtp_decode(b, s2, V, N, nd, mix ? &x : NULL, &y, &st);
        if (mode == 0) {
            CHECK(x.n == y.n && memcmp(x.v, y.v, x.n * sizeof(int32_t)) == 0,
                  "greedy, %d MTP drafts%s: output differs from plain decoding", nd,
                  mix ? " + oracle drafts" : "");
            /* plain decoding stops before evaluating its last token */
            if (ds4_session_n_tokens(b) == ds4_session_n_tokens(a))
                CHECK(test_same_state(a, b), "nd %d: final state differs", nd);
        } else {
            /* sampled MTP drafts: the same distribution as plain sampling
             * (test_distribution), not the same draws.  Here: a rerun with
             * the same seed gives the same tokens and the same state, and
             * the state after the passes and rollbacks is exactly that of
             * a plain evaluation of the tokens kept */
            ds4_sampler *s3 = mode_sampler(mode, V);
            ds4_session *c = test_new_session(m, 1024, 64);
            CHECK(ds4_session_eval(c, ids->v, P, NULL, NULL) == DS4_OK, "prompt");
            ds4_tokens z = { 0 };
            ds4_spec_stats st2 = { 0 };
            mtp_decode(c, s3, V, N, nd, mix ? &x : NULL, &z, &st2);
            CHECK(y.n == (size_t)N && z.n == y.n && memcmp(y.v, z.v, y.n * sizeof(int32_t)) == 0,
                  "mode %d, %d MTP drafts: same seed, different output", mode, nd);
            CHECK(st2.passes == st.passes && st2.accepted == st.accepted, "same seed, same passes");
            CHECK(test_same_state(b, c), "mode %d: same seed, different state", mode);
            ds4_session_reset(c);
            CHECK(ds4_session_eval(c, ids->v, P, NULL, NULL) == DS4_OK, "prompt");
            for (size_t i = 0; i + 1 < y.n; i++) {
                int32_t t = y.v[i];
                CHECK(ds4_session_eval(c, &t, 1, NULL, NULL) == DS4_OK, "plain eval");
            }
            CHECK(test_same_state(b, c), "mode %d nd %d: state differs from plain evaluation of the output",
                  mode, nd);
            ds4_tokens_free(&z);
            ds4_session_free(c);
            ds4_sampler_free(s3);
        }
        CHECK(st.passes > 0 && st.drafted > 0, "passes counted");
        if (mix && mode == 0) CHECK(st.accepted > 0, "oracle drafts accepted");
        if (mode == 3) CHECK(st.accepted > 0, "sampled drafts accepted");
        printf("test_mtp: mode %d, %d drafts%s: %d tokens in %llu passes, %llu/%llu accepted\n",
               mode, nd, mix ? " + oracle drafts" : "", N, (unsigned long long)st.passes,
               (unsigned long long)st.accepted, (unsigned long long)st.drafted);
        ds4_tokens_free(&x);
        ds4_tokens_free(&y);
        ds4_session_free(a);
        ds4_session_free(b);
        ds4_sampler_free(s1);
        ds4_sampler_free(s2);
    }
}

/* The MTP state follows the session: the same history reached through
 * staged passes and rollbacks, or through one prefill, drafts alike. */
static void test_follow(ds4_model *m, const ds4_tokens *ids) {
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    const int V = info.n_vocab;
    ds4_session *a = test_new_session(m, 1024, 64), *b = test_new_session(m, 1024, 64);
    const int G = quick ? 40 : 90;
    CHECK(ds4_session_eval(b, ids->v, 50, NULL, NULL) == DS4_OK, "prompt");
    ds4_tokens ref = { 0 }, out = { 0 };
    test_plain_decode(b, NULL, V, G, &ref);
    ds4_session_reset(b);
    CHECK(ds4_session_eval(a, ids->v, 50, NULL, NULL) == DS4_OK, "prompt");
    ds4_spec_stats st = { 0 };
    mtp_decode(a, NULL, V, G, 3, &ref, &out, &st);
    CHECK(st.accepted > 0, "some passes kept drafts");
    int n = ds4_session_n_tokens(a);
    CHECK(ds4_session_eval(b, ds4_session_tokens(a), n, NULL, NULL) == DS4_OK, "prefill");
    int32_t cur = out.v[out.n - 1], da[4], db[4];
    CHECK(ds4_mtp_draft(a, cur, 3, da) == 3 && ds4_mtp_draft(b, cur, 3, db) == 3, "drafts");
    CHECK(memcmp(da, db, sizeof da - sizeof da[0]) == 0, "same drafts");
    const float *la = ds4_mtp_logits(a), *lb = ds4_mtp_logits(b);
    CHECK(la && lb && memcmp(la, lb, (size_t)V * sizeof(float)) == 0,
          "MTP logits after a speculative history equal those after one prefill");
    /* a second draft call from the same state recomputes the same chain */
    CHECK(ds4_mtp_draft(a, cur, 3, db) == 3 && memcmp(da, db, 3 * sizeof(int32_t)) == 0, "repeatable");
    ds4_tokens_free(&out);
    ds4_tokens_free(&ref);
    ds4_session_free(a);
    ds4_session_free(b);
}

/* softmax(l / T) in double, the test's own: the sampler at temperature T
 * with no min-p, top-k or top-p */
static void softmax_t(const float *l, int V, double T, double *p) {
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) if (l[i] > mx) mx = l[i];
    for (int i = 0; i < V; i++) z += (p[i] = exp(((double)l[i] - mx) / T));
    for (int i = 0; i < V; i++) p[i] /= z;
}

static const double *sort_key;
static int by_p_desc(const void *a, const void *b) {
    double x = sort_key[*(const int *)a], y = sort_key[*(const int *)b];
    return x > y ? -1 : x < y ? 1 : (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Sampled MTP drafts judged by the speculative-sampling rule: from one
 * state, many seeded steps (ds4_spec_step_mtp, 2 drafts) and the first
 * emitted token against the target p (the test's own softmax of the
 * logits after `cur`, temperature T, no truncation), chi-square over 10
 * bins of about equal p mass (bins expecting under 5 merged) at the 0.1 %
 * critical value.  The block's own q (softmax of its logits, same T)
 * differs clearly from p (total variation checked), so both paths of the
 * rule run: the first draft is kept with probability
 * sum_x min(p(x), q(x)), checked against the observed rate (4.5 sigma),
 * and the other steps emit a residual draw.  Pass 0: temperature 2, no
 * stop token.  Pass 1: temperature 1, stop = the token with the largest
 * min(p, q) (a drafted stop is judged at its position, not dropped:
 * spec.c), the same checks, and the stop drafted in some steps when q
 * makes that likely. */
static void test_distribution(ds4_model *m, const ds4_tokens *ids) {
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    const int V = info.n_vocab, DRAWS = quick ? 200 : 2000;
    ds4_session *s = test_new_session(m, 1024, 64);
    CHECK(ds4_session_eval(s, ids->v, 45, NULL, NULL) == DS4_OK, "prompt");
    int32_t cur = ds4_sample_greedy(ds4_session_logits(s), V);
    ds4_buf base = { 0 };
    CHECK(ds4_session_snapshot(s, &base) == DS4_OK, "snapshot");
    double *p = malloc((size_t)V * sizeof *p), *q = malloc((size_t)V * sizeof *q);
    int *ord = malloc((size_t)V * sizeof *ord), *bin = malloc((size_t)V * sizeof *bin);
    float *tl = malloc((size_t)V * sizeof *tl), *ml = malloc((size_t)V * sizeof *ml);
    /* the target of the pass's first position: the logits after `cur` */
    CHECK(ds4_session_eval(s, &cur, 1, NULL, NULL) == DS4_OK, "cur");
    memcpy(tl, ds4_session_logits(s), (size_t)V * sizeof *tl);
    char *err = NULL;
    CHECK(ds4_session_restore(s, base.p, base.n, &err) == DS4_OK, "restore");
    int32_t d1[1];
    CHECK(ds4_mtp_draft(s, cur, 1, d1) == 1, "draft");
    memcpy(ml, ds4_mtp_logits(s), (size_t)V * sizeof *ml);
    static const double crit[] = { 0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88 };
    for (int pass = 0; pass < 2; pass++) {
        const double T = pass == 0 ? 2.0 : 1.0;
        const int draws = pass == 0 ? DRAWS : DRAWS / 2;
        softmax_t(tl, V, T, p);
        softmax_t(ml, V, T, q);
        double tv = 0, alpha = 0;
        int both = 0;
        for (int i = 0; i < V; i++) {
            double mn = p[i] < q[i] ? p[i] : q[i];
            tv += fabs(p[i] - q[i]) / 2;
            alpha += mn;
            if (mn > (p[both] < q[both] ? p[both] : q[both])) both = i;
        }
        const int32_t stop = pass == 0 ? -1 : both;
        CHECK(tv > 0.2, "T %.0f: q differs clearly from p (total variation %.3f)", T, tv);
        /* 10 bins of about equal p mass, tokens by decreasing p */
        for (int i = 0; i < V; i++) ord[i] = i;
        sort_key = p;
        qsort(ord, (size_t)V, sizeof *ord, by_p_desc);
        double pb[10] = { 0 }, acc = 0;
        int nb = 0;
        for (int j = 0; j < V; j++) {
            int i = ord[j];
            if (nb < 9 && acc >= (nb + 1) * 0.1) nb++;
            bin[i] = nb;
            pb[nb] += p[i];
            acc += p[i];
        }
        nb++;
        ds4_sampler_params sp;
        ds4_sampler_params_default(&sp);
        sp.temperature = (float)T;
        sp.top_k = 0;
        sp.top_p = 1.0f;
        sp.min_p = 0.0f;
        sp.seed = 1234 + (uint64_t)pass;
        ds4_sampler *smp = ds4_sampler_new(V, &sp);
        long cnt[10] = { 0 }, kept = 0, stops = 0;
        for (int d = 0; d < draws; d++) {
            CHECK(ds4_session_restore(s, base.p, base.n, &err) == DS4_OK, "restore");
            int32_t got[3];
            int n_got = 0;
            ds4_spec_stats st = { 0 };
            CHECK(ds4_spec_step_mtp(s, smp, cur, 2, stop, got, &n_got, &st) == DS4_OK && n_got >= 1,
                  "step");
            if (n_got < 1 || got[0] < 0 || got[0] >= V) continue;
            cnt[bin[got[0]]]++;
            kept += st.accepted > 0 || (st.drafted == 0 && got[0] == stop);
            stops += st.drafted < 2;
        }
        /* chi-square; consecutive bins merged until each expects >= 5 */
        double chi = 0, ge = 0, go = 0;
        int groups = 0;
        for (int k = 0; k < nb; k++) {
            ge += draws * pb[k];
            go += (double)cnt[k];
            if (ge >= 5 || k == nb - 1) {
                if (ge > 0) { chi += (go - ge) * (go - ge) / ge; groups++; }
                ge = go = 0;
            }
        }
        CHECK(groups >= 2 && chi < crit[groups - 1], "T %.0f stop %d: first emitted token follows p: chi2 %.2f, %d dof",
              T, stop, chi, groups - 1);
        double sd = sqrt(draws * alpha * (1 - alpha));
        CHECK(fabs(kept - draws * alpha) < 4.5 * sd + 1, "T %.0f: first draft kept %ld times, expected %.1f", T,
              kept, draws * alpha);
        if (stop >= 0 && draws * q[stop] >= 20)
            CHECK(stops > 0, "the stop token was drafted (q %.3f)", q[stop]);
        printf("test_mtp: %d sampled-draft steps, T %.0f, stop %d (p %.3f, q %.3f): chi2 %.2f (%d dof); "
               "TV(p,q) %.3f; first draft kept %ld, expected %.1f; drafts cut at stop %ld\n",
               draws, T, stop, stop >= 0 ? p[stop] : 0.0, stop >= 0 ? q[stop] : 0.0, chi, groups - 1, tv, kept,
               draws * alpha, stops);
        ds4_sampler_free(smp);
    }
    free(p);
    free(q);
    free(ord);
    free(bin);
    free(tl);
    free(ml);
    ds4_buf_free(&base);
    ds4_session_free(s);
}

/* Two chained draft steps against tests/mtp_ref.py. */
static void test_reference(ds4_model *m, const char *path, const ds4_tokens *ids) {
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    const int V = info.n_vocab, P = 40;
    ds4_session *s = test_new_session(m, 256, 64);
    CHECK(ds4_session_eval(s, ids->v, P, NULL, NULL) == DS4_OK, "prompt");
    int32_t cur = ds4_sample_greedy(ds4_session_logits(s), V), d[2];
    char in[512], cmd[1600];
    snprintf(in, sizeof in, "%s/mtp_ref.txt", dir);
    FILE *f = fopen(in, "w");
    CHECK(f != NULL, "open %s", in);
    if (!f) { ds4_session_free(s); return; }
    for (int i = 0; i < P; i++) fprintf(f, "%d ", ids->v[i]);
    float *lg[2];
    for (int step = 1; step <= 2; step++) {
        CHECK(ds4_mtp_draft(s, cur, step, d) == step, "draft");
        lg[step - 1] = malloc((size_t)V * sizeof(float));
        memcpy(lg[step - 1], ds4_mtp_logits(s), (size_t)V * sizeof(float));
    }
    fprintf(f, "\n%d %d %d\n", cur, d[0], d[1]);
    for (int step = 0; step < 2; step++) {
        for (int i = 0; i < V; i++) fprintf(f, "%.9g ", lg[step][i]);
        fputc('\n', f);
        free(lg[step]);
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/mtp_ref.py %s %s", path, in);
    int rc = system(cmd);
    CHECK(rc == 0, "tests/mtp_ref.py disagrees with the engine (rc %d)", rc);
    ds4_session_free(s);
}

int main(void) {
    const char *dbg = getenv("DS4_DEBUG_BUILD");
    quick = dbg && !strcmp(dbg, "1");
    snprintf(dir, sizeof dir, "/tmp/ds4-test-mtp-%d", (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd)) { fprintf(stderr, "mkdir failed\n"); return 1; }
    char seq[512];
    snprintf(seq, sizeof seq, "%s/golden/sequences/seq_600a.ids.txt", test_shared());
    ds4_tokens ids = { 0 };
    CHECK(test_read_ids(seq, &ids) == 0 && ids.n == 600, "read %s", seq);

    char q2[512], f16[512];
    synth("q2", q2, sizeof q2);
    ds4_model *m = load(q2);
    CHECK(ds4_model_has_mtp(m), "the synthesized model has an MTP block");
    test_generation(m, &ids);
    test_follow(m, &ids);
    test_distribution(m, &ids);
    ds4_model_free(m);

    synth("f16", f16, sizeof f16);
    m = load(f16);
    test_reference(m, f16, &ids);
    if (!quick) test_follow(m, &ids);
    ds4_model_free(m);

    /* no MTP block: drafting is refused, nothing else changes */
    char golden[512];
    snprintf(golden, sizeof golden, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    m = load(golden);
    CHECK(!ds4_model_has_mtp(m), "golden tiny model has no MTP block");
    ds4_session *s = test_new_session(m, 128, 64);
    int32_t d[2];
    CHECK(ds4_mtp_draft(s, 5, 2, d) == DS4_EUNSUP, "ds4_mtp_draft without a block");
    CHECK(ds4_mtp_logits(s) == NULL, "no MTP logits");
    ds4_session_free(s);
    ds4_model_free(m);

    ds4_tokens_free(&ids);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) { }
    printf("test_mtp: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
