/*
 * ds4_session.h -- a session, the KV state of one token sequence: parameters and memory
 * plan, evaluation (prefill, decode, batched steps), logits, capture,
 * snapshots, RAM checkpoints, rewinds, steering and the staged draft
 * passes of speculative decoding.  Implemented in src/engine/session.c
 * and src/engine/plan.c.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_SESSION_H
#define DS4_API_SESSION_H

#include <pthread.h>

#include "ds4_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Session: the KV state of one token sequence.                              */
/* ------------------------------------------------------------------------ */

typedef struct ds4_session ds4_session;

typedef struct {
    int ctx_size;             /* maximum number of tokens (positions) */
    int prefill_chunk;        /* tokens per prefill batch (default 2048) */
    int no_qat;               /* diagnostic: no FP8/FP4/f16 roundings and
                               * float activations everywhere */
} ds4_session_params;

void ds4_session_params_default(ds4_session_params *p);

/* Bytes of KV state a session of `ctx_size` tokens needs (plus scratch). */
uint64_t ds4_session_memory_estimate(const ds4_model *m, int ctx_size);

/* What a run of a model file needs, without loading it (`ds4 --inspect
 * --ctx N`, the start-up check): the weights (mmap'd, resident once
 * touched; the routed experts are part of them), one session of ctx_size
 * tokens with the default prefill chunk and storage roundings (f16 KV), and
 * the machine's RAM from /proc/meminfo (0 where unknown). */
typedef struct {
    int ctx_size, n_threads;
    uint64_t weights, routed;    /* all tensor data; of which routed experts */
    uint64_t kv, scratch;        /* session KV state at ctx_size; scratch */
    uint64_t total;              /* weights + kv + scratch */
    uint64_t mem_total, mem_available;
    int kv_f32;                  /* the rows are float32 (the GLM graphs), not f16 */
    /* glm-dsa, whose state grows by the same bytes every token (0 for
     * DeepSeek V4: windowed and compressed rows): the bytes of a token, of
     * kv_layers cached rows of kv_row values and kv_idx_layers indexer
     * keys of kv_idx_row values (the full IndexShare layers) */
    uint64_t kv_token;
    int kv_layers, kv_row, kv_idx_layers, kv_idx_row;
} ds4_mem_plan;
/* The thread count used where none is given: DS4_THREADS (1-4096; another
 * value is reported once on stderr and ignored), else the CPUs of the
 * process's affinity mask (taskset, a container's cpuset), else the online
 * CPUs. */
int ds4_default_threads(void);
/* Stack for a thread that calls into the engine: the CPU kernels keep up to
 * ~150 KiB of repacked activations on the stack.  ds4_thread_attr sets a
 * pthread attribute's stack size to at least this (a process started with
 * a small `ulimit -s` gives its threads small default stacks); it returns
 * 0 or an errno value. */
#define DS4_THREAD_STACK_MIN ((size_t)4 << 20)
int ds4_thread_attr(pthread_attr_t *attr);
/* n_threads <= 0: ds4_default_threads() (the per-thread attention buffers). */
int ds4_memory_plan(const char *path, int ctx_size, int n_threads, ds4_mem_plan *out, char **err);
/* The plan as text; `fit` lines say whether it fits in RAM. */
void ds4_memory_plan_print(const ds4_mem_plan *p, FILE *out);

ds4_session *ds4_session_new(ds4_model *m, const ds4_session_params *p,
                             char **err);
void ds4_session_free(ds4_session *s);

/* Called during long evaluations: done/total tokens.  Return non-zero to
 * cancel (the session is then left valid at a token boundary). */
typedef int (*ds4_progress_fn)(void *ud, int done, int total);

/* Make the session hold exactly `toks`: keep the longest common prefix with
 * the current state, evaluate only the rest.  When `toks` diverge inside
 * the session (or are shorter), the state goes back to the latest RAM
 * checkpoint within the common prefix (ds4_session_checkpoint), else it is
 * rebuilt from the start.  On DS4_ECTX nothing changes.  *n_reused
 * (optional) receives the number of tokens kept. */
int ds4_session_sync(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud, int *n_reused);
/* Append tokens (prefill when n > 1, decode when n == 1). */
int ds4_session_eval(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud);
void ds4_session_reset(ds4_session *s);
/* One engine step for several live sessions of one model (ds4-server
 * --parallel): item i appends items[i].n tokens to items[i].s -- one for a
 * session that is decoding, a prefill chunk for one that is ingesting a
 * prompt.  The sessions must be distinct.  Every session's state and
 * logits come out bit-identical to ds4_session_eval of its own tokens
 * alone, whatever the other items are.  items[i].rc receives that item's
 * result (an item that fails is reset as ds4_session_eval resets it; the
 * others are unaffected); the return value is DS4_OK when every item
 * succeeded, else the first failing item's code.  Items share forward
 * passes (each weight read once for all their rows) up to the prefill
 * chunk of the session with the largest context; an item longer than its
 * session's chunk, or whose session captures, collects an imatrix or runs
 * under --dist, is evaluated alone inside the step (README "Concurrent
 * sessions"). */
typedef struct {
    ds4_session *s;
    const int32_t *toks;
    int n;
    int rc;                   /* out */
} ds4_batch_item;
int ds4_session_eval_batch(ds4_batch_item *items, int n_items);

int ds4_session_n_tokens(const ds4_session *s);
/* 1 when the session evaluates without the QAT roundings (--no-qat). */
int ds4_session_no_qat(const ds4_session *s);
const int32_t *ds4_session_tokens(const ds4_session *s);
int ds4_session_ctx_size(const ds4_session *s);
/* Next-token logits after the last evaluated token (n_vocab floats); NULL
 * when the session is empty. */
const float *ds4_session_logits(const ds4_session *s);

/* Diagnostics.  When set, every evaluated position appends its logits row
 * (n_vocab floats) / its HC states after each sublayer
 * ([n_layer][2][n_hc][n_embd] floats) to these buffers. */
void ds4_session_capture(ds4_session *s, ds4_buf *logits_rows,
                         ds4_buf *hidden_rows);
/* Diagnostics: every evaluated position appends [n_layer][2] floats, per
 * layer the lowest score the indexer kept and the highest it rejected
 * (NaN, NaN where the layer selects nothing: no indexer, or no more rows
 * visible than its top_k).  Their gap says how close a top-k choice was
 * to a tie (docs/NUMERICS.md "Indexer ties"). */
void ds4_session_capture_indexer(ds4_session *s, ds4_buf *rows);
/* Steering: from the next evaluated token on, add scale * dir (n_embd
 * floats, copied; normally a unit vector) to every hyper-connection copy of
 * the residual stream right after the FFN sublayer of each layer in
 * [layer_first, layer_last] (0-based), i.e. before the next layer's
 * attention reads it.  dir NULL or scale 0 turns it off: the forward pass is
 * then bit-identical to a session never steered.  Tokens already evaluated
 * keep their state (reset or re-sync to steer a whole prompt).  DS4_EINVAL
 * for a bad layer range or a non-finite product. */
int ds4_session_set_steering(ds4_session *s, const float *dir, float scale,
                             int layer_first, int layer_last);
/* Force token-at-a-time evaluation (diagnostic --decode-only). */
void ds4_session_set_decode_only(ds4_session *s, int on);

/* Importance matrix (ds4 --imatrix-out, read by ds4-quantize --imatrix):
 * from begin on, every evaluated token adds, per layer and routed expert
 * it is routed to, the squares of the gate/up input and of the down input
 * (engine/imatrix.h; file format in docs/QUANT.md).  begin returns
 * DS4_ENOMEM if the sums cannot be allocated; save writes the means
 * (atomically) and returns 0, or -1 with *err (malloc'd). */
int ds4_session_imatrix_begin(ds4_session *s);
int ds4_session_imatrix_save(const ds4_session *s, const char *path, char **err);

/* Snapshot: the complete resumable state (tokens, logits, per-layer window
 * rows, compressed rows, compressor and indexer frontiers). */
uint64_t ds4_session_snapshot_size(const ds4_session *s);
int ds4_session_snapshot(const ds4_session *s, ds4_buf *out);
/* The same bytes streamed through a writer (returns 0 or a DS4_E* code). */
typedef int (*ds4_write_fn)(void *ud, const void *data, size_t len);
int ds4_session_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud);
int ds4_session_restore(ds4_session *s, const void *data, size_t len,
                        char **err);
/* KV bytes currently held. */
uint64_t ds4_session_kv_bytes(const ds4_session *s);

/* RAM checkpoints: cheap rewinds within the session's own history.  A
 * checkpoint copies only what later evaluation overwrites -- the sliding
 * window rows, the compressor/indexer frontiers and the logits -- not the
 * compressed rows, which are append-only (about 23 MiB at the Flash shape,
 * whatever the context; ds4_session_checkpoint_bytes says exactly).  A
 * checkpoint stays valid while the session keeps every token below it:
 * reset, restore, a failed evaluation, or a rewind below it drop it.  The
 * memory is allocated on the first checkpoint of a slot and kept. */
#define DS4_SESSION_CKPTS 2
int ds4_session_checkpoint(ds4_session *s, int slot);
/* Token count of a slot's valid checkpoint; -1 when none. */
int ds4_session_checkpoint_tokens(const ds4_session *s, int slot);
/* Bytes one checkpoint slot holds. */
uint64_t ds4_session_checkpoint_bytes(const ds4_session *s);
/* The largest count <= n a valid checkpoint restores exactly (0 = none). */
int ds4_session_rewind_point(const ds4_session *s, int n);
/* Go back to exactly n tokens from a checkpoint of that count (the logits
 * after token n-1 included): no evaluation.  DS4_EINVAL (state unchanged)
 * when no valid checkpoint holds n tokens.  ds4_session_sync uses this when
 * the new tokens diverge inside the session. */
int ds4_session_rewind(ds4_session *s, int n);
/* Staged passes for speculative decoding (docs/SPEC.md).  eval_draft
 * appends n tokens (1 <= n <= ds4_session_draft_capacity) in one batched
 * pass and keeps the logits of every position: draft_logits(s, i) is the
 * next-token distribution after toks[i].  draft_commit(s, n_keep) then
 * keeps the first n_keep tokens and undoes the others exactly (the state
 * is bit-identical to one that evaluated only those), without evaluating
 * anything again.  Any other evaluation, sync, restore or reset makes the
 * pass final (commit is then DS4_EINVAL).  On error the session is reset. */
#define DS4_DRAFT_PASS_MAX 17
int ds4_session_draft_capacity(const ds4_session *s);
int ds4_session_eval_draft(ds4_session *s, const int32_t *toks, int n);
const float *ds4_session_draft_logits(const ds4_session *s, int i);
int ds4_session_draft_commit(ds4_session *s, int n_keep);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_SESSION_H */
