/*
 * test_vec.c -- vec_ops kernels on random data (lengths 1..1100 for the
 * tails, the model's 128 and 512): every SIMD table equals the scalar one
 * BIT FOR BIT (one arithmetic for all CPUs, vec_ops.c), dot == dot4 ==
 * dot4x4 per (head, key) within a table, wsum4 == axpy4 applied key by key,
 * and the scalar results stay within float rounding bounds of the exact
 * (float64) values relative to the sum of |terms|.  The exponential
 * (exp, exp_sum): every table equals the scalar vec_expf bit for bit on
 * random arguments of every magnitude and on the range ends, NaN and
 * infinities; vec_expf stays within 1.5 ulp of e^x (float64) on random
 * arguments (the bound measured over every float is 1.01); exp_sum's
 * sum is the 16-lane tree of its outputs.  The rows' sums of squares
 * (sumsq_rows): every table equals a plain per-row double loop bit for
 * bit, for row counts around the lane groups (1..41: full groups of 8/4,
 * four groups at once, tails), lengths around the 16/8-element steps,
 * padded strides, values of every magnitude and some rows of inf/NaN.
 * The indexer's integer scores (idx_score16): see test_idx.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/vec_ops.h"

static unsigned long long rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static int same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static int test_table(const vec_kernels *s, const vec_kernels *v) {
    int fails = 0, checks = 0;
    enum { N = 1100 };
    static float q[4 * N], k[N], o1[4 * N], o2[4 * N];
    int lens[] = { 1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 127, 128, 129, 256, 511, 512, 1100 };
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        for (int rep = 0; rep < 20; rep++) {
            float scale = powf(10.0f, (float)(rep % 7) - 3.0f);
            for (int i = 0; i < 4 * N; i++) q[i] = frand() * scale;
            for (int i = 0; i < N; i++) k[i] = frand();
            float a[4], b[4];
            s->dot4(q, N, k, n, a);
            v->dot4(q, N, k, n, b);
            for (int h = 0; h < 4; h++) {
                double mag = 0, ex = 0;
                for (int i = 0; i < n; i++) {
                    mag += fabs((double)q[h * N + i] * k[i]);
                    ex += (double)q[h * N + i] * k[i];
                }
                checks += 3;
                if (fabs((double)a[h] - ex) > 2e-6 * mag + 1e-30) {
                    fails++;
                    printf("scalar dot4 n=%d h=%d: %g vs exact %g\n", n, h, a[h], ex);
                }
                if (!same(a[h], b[h])) {
                    fails++;
                    printf("dot4 n=%d h=%d: scalar %.9g %s %.9g\n", n, h, a[h], v->name, b[h]);
                }
                if (!same(b[h], v->dot(q + h * N, k, n))) {
                    fails++;
                    printf("%s dot4 != dot n=%d h=%d\n", v->name, n, h);
                }
            }
            {
                /* four keys per pass: the same products as dot4 per key */
                static float kk[4][N];
                const float *kp[4];
                for (int j = 0; j < 4; j++) {
                    for (int i = 0; i < n; i++) kk[j][i] = frand();
                    kp[j] = kk[j];
                }
                float x1[16], x2[16];
                s->dot4x4(q, N, kp, n, x1);
                v->dot4x4(q, N, kp, n, x2);
                for (int h = 0; h < 4; h++)
                    for (int j = 0; j < 4; j++) {
                        checks += 2;
                        if (!same(x1[h * 4 + j], x2[h * 4 + j])) {
                            fails++;
                            printf("dot4x4 n=%d: scalar %.9g %s %.9g\n", n, x1[h * 4 + j], v->name, x2[h * 4 + j]);
                        }
                        if (!same(x2[h * 4 + j], v->dot(q + h * N, kk[j], n))) {
                            fails++;
                            printf("%s dot4x4 != dot n=%d\n", v->name, n);
                        }
                    }
            }
            float d1 = s->dot(q, k, n), d2 = v->dot(q, k, n);
            checks++;
            if (!same(d1, d2)) { fails++; printf("dot n=%d: scalar %.9g %s %.9g\n", n, d1, v->name, d2); }
            /* wsum4 over up to 40 keys vs the scalar reference, and bit
             * for bit vs axpy4 of the same table applied key by key */
            {
                int nk = 1 + rep * 2;
                static float ks[40][N], ew[4 * 40], w1[4 * N], w2[4 * N], w3[4 * N];
                const float *kp[40];
                for (int r = 0; r < nk; r++) {
                    for (int i = 0; i < n; i++) ks[r][i] = frand();
                    kp[r] = ks[r];
                }
                for (int i = 0; i < 4 * 40; i++) ew[i] = frand() * 0.5f + 0.5f;
                s->wsum4(w1, N, kp, ew, 40, nk, n);
                v->wsum4(w2, N, kp, ew, 40, nk, n);
                memset(w3, 0, sizeof w3);
                for (int r = 0; r < nk; r++) {
                    float e4[4] = { ew[r], ew[40 + r], ew[80 + r], ew[120 + r] };
                    v->axpy4(w3, N, e4, kp[r], n);
                }
                for (int h = 0; h < 4; h++)
                    for (int i = 0; i < n; i++) {
                        double mag = 0;
                        for (int r = 0; r < nk; r++) mag += fabs((double)ew[h * 40 + r] * ks[r][i]);
                        checks += 2;
                        double ex = 0;
                        for (int r = 0; r < nk; r++) ex += (double)ew[h * 40 + r] * ks[r][i];
                        checks++;
                        if (fabs((double)w1[h * N + i] - ex) > 2e-6 * mag + 1e-30) {
                            fails++;
                            if (fails < 10) printf("scalar wsum4 n=%d nk=%d: %g vs exact %g\n", n, nk, w1[h * N + i], ex);
                        }
                        if (!same(w1[h * N + i], w2[h * N + i])) {
                            fails++;
                            if (fails < 10) printf("wsum4 n=%d nk=%d: scalar %.9g %s %.9g\n", n, nk, w1[h * N + i], v->name, w2[h * N + i]);
                        }
                        if (w2[h * N + i] != w3[h * N + i]) {
                            fails++;
                            if (fails < 10) printf("wsum4 != axpy4 chain n=%d nk=%d\n", n, nk);
                        }
                    }
            }
            float e[4] = { frand(), frand(), frand(), frand() };
            for (int i = 0; i < 4 * N; i++) o1[i] = o2[i] = frand();
            s->axpy4(o1, N, e, k, n);
            v->axpy4(o2, N, e, k, n);
            for (int h = 0; h < 4; h++)
                for (int i = 0; i < n; i++) {
                    checks++;
                    if (!same(o1[h * N + i], o2[h * N + i])) {
                        fails++;
                        if (fails < 10) printf("axpy4 n=%d: scalar %.9g %s %.9g\n", n, o1[h * N + i], v->name, o2[h * N + i]);
                    }
                }
        }
    }
    /* exponential: arguments spread over every magnitude, both signs */
    static float x1[N], y1[N], y2[N];
    const float edge[] = { 0.0f, -0.0f, 1.0f, -1.0f, -87.33654f, nextafterf(-87.33654f, 0.0f),
                           nextafterf(-87.33654f, -100.0f), 88.72283935546875f,
                           nextafterf(88.72283935546875f, 0.0f), -104.0f, 100.0f, 1e-30f, -1e-30f,
                           INFINITY, -INFINITY, NAN, 0.34657359f, -0.34657359f, 1e-7f };
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        int n = lens[li];
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < n; i++) {
                x1[i] = frand() * powf(10.0f, (float)((rep + i) % 5) - 2.0f) * (rep & 1 ? 1.0f : 60.0f);
                if ((i + rep) % 13 == 0) x1[i] = edge[(size_t)(i + rep) % (sizeof edge / sizeof edge[0])];
            }
            s->exp(x1, y1, n);
            v->exp(x1, y2, n);
            for (int i = 0; i < n; i++) {
                checks++;
                if (!same(y1[i], y2[i]) || !same(y1[i], vec_expf(x1[i]))) {
                    fails++;
                    if (fails < 10) printf("exp(%.9g): scalar %.9g %s %.9g\n", x1[i], y1[i], v->name, y2[i]);
                }
            }
            /* softmax shape: w - m <= 0, m the maximum */
            float m = -INFINITY;
            for (int i = 0; i < n; i++) {
                x1[i] = frand() * (rep % 3 == 0 ? 100.0f : 8.0f);
                m = x1[i] > m ? x1[i] : m;
            }
            memcpy(y1, x1, (size_t)n * sizeof(float));
            memcpy(y2, x1, (size_t)n * sizeof(float));
            const float s1 = s->exp_sum(y1, n, m), s2 = v->exp_sum(y2, n, m);
            float l[16] = { 0 };
            for (int i = 0; i < n; i++) l[i & 15] += vec_expf(x1[i] - m);
            float r8[8], r4[4];
            for (int j = 0; j < 8; j++) r8[j] = l[j] + l[j + 8];
            for (int j = 0; j < 4; j++) r4[j] = r8[j] + r8[j + 4];
            const float tree = (r4[0] + r4[2]) + (r4[1] + r4[3]);
            checks++;
            if (!same(s1, s2) || !same(s1, tree)) {
                fails++;
                if (fails < 10) printf("exp_sum n=%d: scalar %.9g %s %.9g tree %.9g\n", n, s1, v->name, s2, tree);
            }
            for (int i = 0; i < n; i++) {
                checks++;
                if (!same(y1[i], y2[i]) || !same(y1[i], vec_expf(x1[i] - m))) {
                    fails++;
                    if (fails < 10) printf("exp_sum n=%d [%d]: scalar %.9g %s %.9g\n", n, i, y1[i], v->name, y2[i]);
                }
            }
        }
    }
    printf("test_vec (%s vs scalar): %d checks, %d failures\n", v->name, checks, fails);
    return fails;
}

/* sumsq_rows against the definition: one double chain per row */
static int test_sumsq(const vec_kernels *v) {
    int fails = 0, checks = 0;
    enum { MAXR = 41, MAXN = 530 };
    static float x[MAXR * (MAXN + 3)];
    double ss[MAXR];
    const int lens[] = { 1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 512, 513, 530 };
    for (int nr = 1; nr <= MAXR; nr++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int n = lens[li];
            const size_t xs = (size_t)n + (size_t)(nr % 4);   /* padded and unpadded strides */
            for (size_t i = 0; i < (size_t)nr * xs; i++)
                x[i] = frand() * powf(10.0f, (float)((int)(i % 11) - 5) * 3.0f);
            if (nr % 5 == 0) x[(size_t)(nr - 1) * xs] = INFINITY;
            if (nr % 7 == 0) x[(size_t)(nr / 2) * xs + (size_t)n - 1] = NAN;
            v->sumsq_rows(x, xs, nr, n, ss);
            for (int r = 0; r < nr; r++) {
                double ref = 0;
                for (int i = 0; i < n; i++) ref += (double)x[(size_t)r * xs + i] * x[(size_t)r * xs + i];
                checks++;
                if (memcmp(&ref, &ss[r], sizeof ref) && !(isnan(ref) && isnan(ss[r]))) {
                    fails++;
                    if (fails < 10)
                        printf("%s sumsq_rows rows=%d n=%d row %d: %.17g != %.17g\n", v->name, nr, n, r, ss[r], ref);
                }
            }
        }
    printf("test_vec (%s sumsq_rows): %d checks, %d failures\n", v->name, checks, fails);
    return fails;
}

/* idx_score16 on random codes: every table equals the scalar one bit for
 * bit (head counts around the 4-head steps, 1..5 blocks, powers of two
 * over the whole range the coder allows, rows of zeros), and where the
 * block exponents of each head and row span at most vec_idx_spread (a
 * few binades, or exactly the bound with every code +-15 of one sign: the
 * largest sums it allows), the scalar kernel equals the float path of
 * deepseek4.c: dot (lanes and tree) of the decoded values, then the
 * weighted relu summed over the heads in order. */
static int test_idx(const vec_kernels *s, const vec_kernels *v) {
    int fails = 0, checks = 0, exact = 0;
    enum { MAXH = 64, MAXB = 5 };
    static int8_t qc[MAXH * 32 * MAXB];
    static uint8_t kc[8 * MAXB * 64];
    static float pq[MAXH * MAXB], pk[MAXB * 16], w[MAXH], qf[MAXH * 32 * MAXB], kf[16][32 * MAXB];
    static int32_t qs[MAXH * MAXB];
    const int heads[] = { 1, 3, 4, 5, 8, 13, 64 };
    for (int rep = 0; rep < 60; rep++)
        for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
            for (int nb = 1; nb <= MAXB; nb++) {
                /* extreme: every code +-15, the largest pair and block
                 * sums (the avx2 kernel adds pairs in 16 bits) */
                const int nh = heads[hi], id = 32 * nb, narrow = rep % 3 != 0, extreme = rep % 10 == 1;
                /* at the bound (rep % 3 == 2): block 0 at exponent 0, the others
                 * at 0 or S; half the time every code +-15 (the largest
                 * sums), else random codes (sums that round if the span
                 * were wider) */
                const int S = vec_idx_spread(id), bound = rep % 3 == 2;
                for (int h = 0; h < nh; h++) {
                    w[h] = frand() * 4.0f;
                    for (int b = 0; b < nb; b++) {
                        const int e = bound ? (b > 0 && (rep % 2 || frand() > 0)) * S - 4 : narrow ? (int)(frand() * 2.0f) - 4 : (int)(frand() * 58.0f);
                        pq[h * nb + b] = ldexpf(1.0f, e);
                        int32_t sum = 0;
                        for (int i = 32 * b; i < 32 * b + 32; i++) {
                            const int c = bound && rep % 2 ? 15 : extreme ? (b % 2 ? -15 : 15) : (int)(frand() * 15.99f);
                            qc[h * id + i] = (int8_t)c;
                            qf[h * id + i] = (float)c * pq[h * nb + b];
                            sum += c;
                        }
                        qs[h * nb + b] = 16 * sum;
                    }
                }
                for (int b = 0; b < nb; b++)
                    for (int r = 0; r < 16; r++) {
                        const int e = bound ? (b > 0 && (rep % 2 || frand() > 0)) * S - 2 : narrow ? (int)(frand() * 2.0f) - 2 : (int)(frand() * 58.0f);
                        pk[16 * b + r] = ldexpf(1.0f, e);
                        for (int i = 32 * b; i < 32 * b + 32; i++) {
                            const int c = r == 5 ? 0 : bound && rep % 2 ? (r % 3 ? 15 : -15) : extreme ? (r % 2 ? -15 : 15)
                                                                                  : (int)(frand() * 15.99f);
                            kc[64 * (i / 4) + 4 * r + i % 4] = (uint8_t)(c + 16);
                            kf[r][i] = (float)c * pk[16 * b + r];
                        }
                    }
                float o1[16], o2[16];
                s->idx_score16(qc, pq, qs, w, nh, nb, kc, pk, o1);
                v->idx_score16(qc, pq, qs, w, nh, nb, kc, pk, o2);
                for (int r = 0; r < 16; r++) {
                    checks++;
                    if (!same(o1[r], o2[r])) {
                        fails++;
                        if (fails < 10)
                            printf("idx_score16 nh=%d nb=%d row %d: scalar %.9g %s %.9g\n", nh, nb, r, o1[r], v->name, o2[r]);
                    }
                    if (!narrow) continue;
                    float f = 0.0f;
                    for (int h = 0; h < nh; h++) {
                        const float d = s->dot(qf + (size_t)h * id, kf[r], id);
                        f += d > 0 ? w[h] * d : 0.0f;
                    }
                    exact++;
                    if (!same(o1[r], f)) {
                        fails++;
                        if (fails < 10) printf("idx_score16 nh=%d nb=%d row %d: %.9g, float path %.9g\n", nh, nb, r, o1[r], f);
                    }
                }
            }
    printf("test_vec (%s idx_score16): %d checks (%d against the float path), %d failures\n", v->name, checks, exact,
           fails);
    return fails;
}

/* vec_expf against e^x in float64: ulps of the float result's binade */
static int test_exp_accuracy(void) {
    int fails = 0;
    double worst = 0;
    for (int i = 0; i < 2000000; i++) {
        const float x = frand() * (i & 1 ? 87.3f : (float)(i % 9) + 0.5f);
        const double e = exp((double)x);
        int ex;
        frexp(e, &ex);
        const double u = fabs((double)vec_expf(x) - e) / ldexp(1.0, ex - 24);
        if (u > worst) worst = u;
        if (u > 1.5) {
            fails++;
            if (fails < 10) printf("vec_expf(%.9g) = %.9g, e^x = %.17g (%.2f ulp)\n", x, vec_expf(x), e, u);
        }
    }
    const float spot[][2] = { { -87.5f, 0.0f }, { 89.0f, INFINITY }, { 0.0f, 1.0f }, { -INFINITY, 0.0f },
                              { INFINITY, INFINITY } };
    for (size_t i = 0; i < sizeof spot / sizeof spot[0]; i++)
        if (!same(vec_expf(spot[i][0]), spot[i][1])) {
            fails++;
            printf("vec_expf(%g) = %g, want %g\n", spot[i][0], vec_expf(spot[i][0]), spot[i][1]);
        }
    if (!isnan(vec_expf(NAN))) { fails++; printf("vec_expf(NaN) is not NaN\n"); }
    printf("test_vec: vec_expf within %.3f ulp of e^x on 2000000 random arguments, %d failures\n", worst, fails);
    return fails;
}

int main(void) {
    const vec_kernels *s = vec_kernels_scalar();
    const vec_kernels *t[2] = { vec_kernels_avx2(), vec_kernels_avx512() };
    int fails = test_exp_accuracy() + test_sumsq(s), tested = 0;
    for (int i = 0; i < 2; i++)
        if (t[i]) { fails += test_table(s, t[i]) + test_sumsq(t[i]) + test_idx(s, t[i]); tested++; }
    if (!tested) {
        printf("test_vec: no SIMD table on this CPU; scalar only\n");
        fails += test_table(s, s) + test_idx(s, s);
    }
    printf("test_vec: %s (%d SIMD table(s), best: %s)\n", fails ? "FAIL" : "ok", tested,
           vec_kernels_best()->name);
    return fails != 0;
}
