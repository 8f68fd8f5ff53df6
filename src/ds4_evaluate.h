/*
 * ds4_evaluate.h -- checkpointed evaluation (ds4_eval, ds4_eval_sync): how the front ends
 * evaluate a prompt or generated tokens, stopping at the disk cache's
 * checkpoints.  Implemented in src/engine/evaluate.c.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_EVALUATE_H
#define DS4_API_EVALUATE_H

#include "ds4_kvstore.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Checkpointed evaluation (evaluate.c): how the CLI and the server evaluate */
/* a prompt or generated tokens -- in chunks with progress and cancellation, */
/* stopping exactly at the disk cache's cold point and continued frontiers   */
/* (ds4_kv_policy) so the caller can save the state there, and taking the    */
/* RAM checkpoints that make a retry or a rewind of a few tokens cheap.      */
/* ------------------------------------------------------------------------ */

/* Called with the session sitting exactly at a disk checkpoint (cold or
 * continued); the caller saves it (ds4_kvstore_save) or not. */
typedef void (*ds4_kv_save_fn)(void *ud, ds4_kv_reason why);

typedef struct {
    const ds4_kv_policy *kv_policy;  /* NULL: no disk checkpoints */
    ds4_kv_save_fn save;             /* required with kv_policy */
    void *save_ud;
    ds4_progress_fn progress;        /* done/total over the whole call; non-zero cancels */
    void *progress_ud;
    int cold;                        /* an empty session stops at the cold point */
    int ram_tail;                    /* >= 0: the tokens end a prompt: RAM checkpoint
                                      * slot 1 at their end and slot 0 ram_tail tokens
                                      * before it (when that is inside this call);
                                      * -1: none (generation) */
} ds4_eval_params;

/* Defaults: nothing but plain chunked evaluation (ram_tail -1). */
void ds4_eval_params_default(ds4_eval_params *p);
/* Append n tokens.  DS4_ECTX (nothing changed) when they do not fit;
 * DS4_ECANCEL leaves the session valid at a chunk boundary; any other
 * error leaves it empty. */
int ds4_eval(ds4_session *s, const int32_t *toks, int n, const ds4_eval_params *p);
/* Make the session hold exactly toks: keep the common prefix (going back
 * through a RAM checkpoint when toks diverge inside the session, else
 * starting over), then ds4_eval the rest.  *n_reused: tokens not evaluated. */
int ds4_eval_sync(ds4_session *s, const int32_t *toks, int n, const ds4_eval_params *p,
                  int *n_reused);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_EVALUATE_H */
