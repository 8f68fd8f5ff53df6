/*
 * evaluate.c -- checkpointed evaluation (ds4.h: ds4_eval, ds4_eval_sync).
 *
 * Owns: the one loop both front ends use to evaluate a prompt or generated
 * tokens: where an evaluation stops (the disk cache's cold point and
 * continued frontiers from ds4_kv_policy, the RAM checkpoint points), the
 * progress offsets across those stops, and the choice between keeping,
 * rewinding or rebuilding the session for a new prompt.
 * Must not: touch the disk cache itself (the caller's save callback does:
 * the server attaches tool entries and counts saves, the CLI prints) or
 * the session's internals (only the public session API is used).
 */
#include <string.h>

#include "ds4.h"

void ds4_eval_params_default(ds4_eval_params *p) {
    memset(p, 0, sizeof *p);
    p->ram_tail = -1;
}

typedef struct {
    const ds4_eval_params *p;
    int base, total;     /* tokens done before the current piece, of all */
} prog_ud;

/* The session reports done/total per piece; the caller sees the whole call. */
static int prog(void *ud, int done, int total) {
    (void)total;
    prog_ud *u = ud;
    return u->p->progress(u->p->progress_ud, u->base + done, u->total);
}

int ds4_eval(ds4_session *s, const int32_t *toks, int n, const ds4_eval_params *p) {
    ds4_eval_params def;
    if (!p) { ds4_eval_params_default(&def); p = &def; }
    if (n < 0 || (n > 0 && !toks)) return DS4_EINVAL;
    const int start = ds4_session_n_tokens(s), end = start + n;
    if ((int64_t)start + n > ds4_session_ctx_size(s)) return DS4_ECTX;
    const ds4_kv_policy *pol = p->kv_policy && p->save ? p->kv_policy : NULL;
    /* a prompt evaluated from scratch is saved at its trimmed, aligned
     * cold point, which the next turn (re-rendering the tail) starts with */
    const int cold = pol && p->cold && start == 0 ? ds4_kv_policy_cold_point(pol, n) : 0;
    /* the tail checkpoint: a new turn that re-renders the last few tokens
     * of this prompt (thinking mode drops "<think>") goes back to it */
    const int ram = p->ram_tail >= 0 && n > 0;
    const int tail = ram ? end - p->ram_tail : -1;
    prog_ud u = { p, 0, n };
    int cur = start;
    while (cur < end) {
        int stop = end;
        int frontier = pol ? ds4_kv_policy_next_frontier(pol, cur) : 0;
        if (cold > cur && cold < stop) stop = cold;
        if (frontier > cur && frontier < stop) stop = frontier;
        if (tail > cur && tail < stop) stop = tail;
        int rc = ds4_session_eval(s, toks + (cur - start), stop - cur, p->progress ? prog : NULL, &u);
        if (rc) return rc;
        u.base += stop - cur;
        cur = stop;
        if (cur == cold) p->save(p->save_ud, DS4_KV_COLD);
        else if (pol && cur == frontier) p->save(p->save_ud, DS4_KV_CONTINUED);
        /* a failed checkpoint (out of memory) only costs the reuse */
        if (cur == tail) ds4_session_checkpoint(s, 0);
    }
    if (ram) ds4_session_checkpoint(s, 1);
    return DS4_OK;
}

int ds4_eval_sync(ds4_session *s, const int32_t *toks, int n, const ds4_eval_params *p,
                  int *n_reused) {
    if (n_reused) *n_reused = 0;
    if (n < 0 || (n > 0 && !toks)) return DS4_EINVAL;
    if (n > ds4_session_ctx_size(s)) return DS4_ECTX;
    const int have = ds4_session_n_tokens(s);
    const int32_t *st = ds4_session_tokens(s);
    int lcp = 0;
    while (lcp < have && lcp < n && st[lcp] == toks[lcp]) lcp++;
    int keep;
    if (lcp == have && (lcp < n || ds4_session_logits(s) || n == 0)) {
        keep = lcp;                   /* the session is a prefix */
    } else {
        /* diverged inside the session (or shorter): back to the latest
         * RAM checkpoint within the common prefix, else from scratch */
        keep = ds4_session_rewind_point(s, lcp);
        if (keep <= 0 || ds4_session_rewind(s, keep) != DS4_OK) {
            ds4_session_reset(s);
            keep = 0;
        }
    }
    if (n_reused) *n_reused = keep;
    return ds4_eval(s, toks + keep, n - keep, p);
}

/* ------------------------------------------------------------------------ */
/* Where the disk checkpoints fall (ds4_kv_policy, ds4.h).  The arithmetic  */
/* lives with the evaluation that stops there; the store only saves what    */
/* it is handed.                                                             */
/* ------------------------------------------------------------------------ */

void ds4_kv_policy_default(ds4_kv_policy *p) {
    p->min_tokens = 512;
    p->cold_max_tokens = 30000;
    p->continued_interval = 10000;
    p->trim_tokens = 32;
    p->align_tokens = 2048;
}

int ds4_kv_policy_cold_point(const ds4_kv_policy *p, int n) {
    if (p->cold_max_tokens <= 0) return 0;
    long c = (long)n - (p->trim_tokens > 0 ? p->trim_tokens : 0);
    if (c > p->cold_max_tokens) c = p->cold_max_tokens;
    if (p->align_tokens > 1) c -= c % p->align_tokens;
    return c >= p->min_tokens && c > 0 ? (int)c : 0;
}

int ds4_kv_policy_next_frontier(const ds4_kv_policy *p, int n) {
    if (p->continued_interval <= 0) return 0;
    long step = p->continued_interval, a = p->align_tokens > 1 ? p->align_tokens : 1;
    step = (step + a - 1) / a * a;
    long f = ((long)n / step + 1) * step;
    if (f < p->min_tokens) f = ((long)p->min_tokens + step - 1) / step * step;
    return f > 0x7fffffffL ? 0 : (int)f;
}
