/*
 * diff.c -- line diff for the agent's confirmations and edit summaries
 * (see diff.h).
 *
 * Owns: trimming the common head and tail (bytes, then whole lines, so an
 * edit in a 16 MiB file diffs only its few changed lines), Myers' O(ND)
 * shortest edit script on what is left, unified-diff hunks.
 * Must not: allocate beyond what the bounds below allow.
 */
#include "diff.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CTX 3
#define WORK_MAX 50000000L   /* snake steps before giving up on a minimal diff */

typedef struct {
    const char *p;
    size_t n;        /* with its '\n' when it has one */
    uint64_t h;
} line;

static uint64_t hash(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)p[i]; h *= 0x100000001b3ull; }
    return h;
}

static int split(const char *p, size_t n, line **out) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += p[i] == '\n';
    if (n && p[n - 1] != '\n') c++;
    line *v = malloc(((size_t)c + 1) * sizeof *v);
    if (!v) return -1;
    int k = 0;
    size_t s = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\n' || i + 1 == n) {
            v[k].p = p + s;
            v[k].n = i + 1 - s;
            v[k].h = hash(v[k].p, v[k].n);
            k++;
            s = i + 1;
        }
    *out = v;
    return k;
}

static int eq(const line *x, const line *y) {
    return x->h == y->h && x->n == y->n && !memcmp(x->p, y->p, x->n);
}

/* Myers' greedy forward search, keeping each round's furthest points for
 * the backtrack (d^2 ints in all, bounded by AG_DIFF_MAX_D); marks the
 * deleted lines of A in da and the inserted lines of B in db.  0, or -1
 * past the bounds (nothing marked). */
static int myers(const line *A, int N, const line *B, int M, char *da, char *db) {
    int lim = N + M < AG_DIFF_MAX_D ? N + M : AG_DIFF_MAX_D;
    int *V = malloc((size_t)(2 * lim + 3) * sizeof *V);
    int *tr = malloc((size_t)(lim + 1) * (size_t)(lim + 1) * sizeof *tr);
    if (!V || !tr) { free(V); free(tr); return -1; }
    int o = lim + 1, D = -1;
    long work = 0;
    V[o + 1] = 0;
    for (int d = 0; d <= lim && D < 0; d++) {
        for (int k = -d; k <= d; k += 2) {
            int x = (k == -d || (k != d && V[o + k - 1] < V[o + k + 1])) ? V[o + k + 1] : V[o + k - 1] + 1;
            int y = x - k;
            while (x < N && y < M && eq(&A[x], &B[y])) { x++; y++; work++; }
            V[o + k] = x;
            if (x >= N && y >= M) { D = d; break; }
        }
        for (int k = -d; k <= d; k++) tr[(size_t)d * (size_t)d + (size_t)(k + d)] = V[o + k];
        work += d;
        if (work > WORK_MAX) break;
    }
    free(V);
    if (D < 0) { free(tr); return -1; }
    int x = N, y = M;
    for (int d = D; d > 0; d--) {
        const int *vp = tr + (size_t)(d - 1) * (size_t)(d - 1) + (size_t)(d - 1);   /* vp[k], |k| < d */
        int k = x - y;
        int down = k == -d || (k != d && vp[k - 1] < vp[k + 1]);
        int pk = down ? k + 1 : k - 1, px = vp[pk], py = px - pk;
        if (down) db[py] = 1;   /* B[py] inserted, then the snake to (x, y) */
        else da[px] = 1;        /* A[px] deleted */
        x = px;
        y = py;
    }
    free(tr);
    return 0;
}

typedef struct { int as, ac, bs, bc; } block;

static void range(ds4_buf *o, int from, int count) {
    if (count == 1) ds4_buf_printf(o, "%d", from + 1);
    else if (count == 0) ds4_buf_printf(o, "%d,0", from);
    else ds4_buf_printf(o, "%d,%d", from + 1, count);
}

typedef struct {
    ds4_buf *o;
    int max, shown, cut;
} emitter;

static void emit(emitter *e, char tag, const line *l) {
    if (e->max > 0 && e->shown >= e->max) { e->cut++; return; }
    e->shown++;
    ds4_buf_printf(e->o, "%c%.*s", tag, (int)l->n, l->p);
    if (!l->n || l->p[l->n - 1] != '\n') ds4_buf_puts(e->o, "\n\\ No newline at end of file\n");
}

void ag_diff(const char *a, size_t an, const char *b, size_t bn, const char *path, int is_new,
             int max_lines, ds4_buf *out, ag_diffstat *st) {
    memset(st, 0, sizeof *st);
    /* the common head, back to a line start (the same offset in both) */
    size_t pre = 0;
    while (pre < an && pre < bn && a[pre] == b[pre]) pre++;
    if (pre == an && pre == bn) return;
    size_t P = pre;
    while (P > 0 && a[P - 1] != '\n') P--;
    /* the common tail, forward to a line start in both */
    size_t s = 0;
    while (s < an - P && s < bn - P && a[an - 1 - s] == b[bn - 1 - s]) s++;
    size_t S = 0;
    if ((an - s == P || a[an - s - 1] == '\n') && (bn - s == P || b[bn - s - 1] == '\n')) S = s;
    else {
        const char *nl = memchr(a + an - s, '\n', s);
        if (nl) S = (size_t)(a + an - (nl + 1));
    }
    /* CTX lines of context on either side, from the common parts */
    size_t c0 = P;
    for (int i = 0; i < CTX && c0 > 0; i++) {
        c0--;
        while (c0 > 0 && a[c0 - 1] != '\n') c0--;
    }
    size_t k = 0;   /* bytes of the common tail kept as context */
    for (int i = 0; i < CTX && k < S; i++) {
        const char *nl = memchr(a + an - S + k, '\n', S - k);
        k = nl ? (size_t)(nl - (a + an - S)) + 1 : S;
    }
    int base = 0;
    for (size_t i = 0; i < c0; i++) base += a[i] == '\n';
    line *A = NULL, *B = NULL;
    int NA = split(a + c0, an - S + k - c0, &A), NB = split(b + c0, bn - S + k - c0, &B);
    char *da = calloc((size_t)NA + 1, 1), *db = calloc((size_t)NB + 1, 1);
    block *bl = NULL;
    if (NA < 0 || NB < 0 || !da || !db) goto oom;
    /* whole lines in common at both ends (the context, an in-line edit's
     * unchanged neighbours) stay out of the search */
    int lo = 0, ha = NA, hb = NB;
    while (lo < ha && lo < hb && eq(&A[lo], &B[lo])) lo++;
    while (ha > lo && hb > lo && eq(&A[ha - 1], &B[hb - 1])) { ha--; hb--; }
    if (myers(A + lo, ha - lo, B + lo, hb - lo, da + lo, db + lo) != 0) {
        st->whole = 1;
        memset(da + lo, 1, (size_t)(ha - lo));
        memset(db + lo, 1, (size_t)(hb - lo));
    }
    int nb = 0, cap = 0;
    for (int i = 0, j = 0; i < NA || j < NB;) {
        if ((i < NA && da[i]) || (j < NB && db[j])) {
            block x = { i, 0, j, 0 };
            while (i < NA && da[i]) i++;
            while (j < NB && db[j]) j++;
            x.ac = i - x.as;
            x.bc = j - x.bs;
            if (nb == cap) {
                cap = cap ? 2 * cap : 16;
                block *v = realloc(bl, (size_t)cap * sizeof *v);
                if (!v) goto oom;
                bl = v;
            }
            bl[nb++] = x;
            st->removed += x.ac;
            st->added += x.bc;
        } else { i++; j++; }
    }
    if (nb) st->first = base + bl[0].as + 1;
    if (out && nb) {
        if (is_new) ds4_buf_printf(out, "--- /dev/null\n+++ b/%s\n", path);
        else ds4_buf_printf(out, "--- a/%s\n+++ b/%s\n", path, path);
        emitter e = { out, max_lines, 0, 0 };
        for (int h = 0; h < nb;) {
            int last = h;
            while (last + 1 < nb && bl[last + 1].as - (bl[last].as + bl[last].ac) <= 2 * CTX) last++;
            int af = bl[h].as - CTX < 0 ? 0 : bl[h].as - CTX;
            int bf = bl[h].bs - (bl[h].as - af);
            int ae = bl[last].as + bl[last].ac;
            int at = ae + CTX > NA ? NA : ae + CTX;
            int bt = bl[last].bs + bl[last].bc + (at - ae);
            if (e.max <= 0 || e.shown < e.max) {
                ds4_buf_puts(out, "@@ -");
                range(out, base + af, at - af);
                ds4_buf_puts(out, " +");
                range(out, base + bf, bt - bf);
                ds4_buf_puts(out, " @@\n");
            }
            if (st->whole && (e.max <= 0 || e.shown < e.max))
                ds4_buf_printf(out, "[too many differences for a line diff: the %d lines here are replaced by %d]\n",
                               st->removed, st->added);
            int i = af, j = bf;
            for (int q = h; q <= last; q++) {
                for (; i < bl[q].as; i++, j++) emit(&e, ' ', &A[i]);
                for (; i < bl[q].as + bl[q].ac; i++) emit(&e, '-', &A[i]);
                for (; j < bl[q].bs + bl[q].bc; j++) emit(&e, '+', &B[j]);
            }
            for (; i < at; i++) emit(&e, ' ', &A[i]);
            h = last + 1;
        }
        if (e.cut) ds4_buf_printf(out, "[... %d more diff lines not shown]\n", e.cut);
    }
    free(A); free(B); free(da); free(db); free(bl);
    return;
oom:
    /* counts of a region replaced, from the line counts alone */
    st->whole = 1;
    st->removed = NA > 0 ? NA : 0;
    st->added = NB > 0 ? NB : 0;
    if (out) ds4_buf_printf(out, "[out of memory for the diff of %s]\n", path);
    free(A); free(B); free(da); free(db); free(bl);
}
