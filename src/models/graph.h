/*
 * graph.h -- the table of one model graph's operations (issue 46): what a
 * session needs of the architecture it runs, chosen once at load from
 * general.architecture (cfg.arch) and reached as s->m->graph.
 *
 * Owns: the shape of that table and the registry of graphs (graph.c).
 * session.c keeps what every graph shares (the token list, chunking,
 * staged-pass bookkeeping, errors) and calls the table; each graph's file
 * (deepseek4*.c, glm_dsa.c, glm5_next.c) fills one `ds4_graph` and graph.c
 * lists it.  Adding a graph is one table and one line of graph.c.  Must not:
 * hold state (the table is constant; a session's state is the graph's own,
 * hanging off ds4_session).
 */
#ifndef DS4_MODELS_GRAPH_H
#define DS4_MODELS_GRAPH_H

#include "engine/engine_internal.h"

/* What a graph supports beyond evaluation; session.c refuses (DS4_EUNSUP)
 * or ignores the rest, as the comments say. */
enum {
    DS4_GRAPH_STEER = 1u << 0,     /* ds4_session_set_steering */
    DS4_GRAPH_IMATRIX = 1u << 1,   /* ds4_session_imatrix_begin */
    DS4_GRAPH_HIDDEN = 1u << 2,    /* hidden-row capture (else ignored) */
    DS4_GRAPH_INDEXER = 1u << 3,   /* indexer-row capture (else ignored) */
    DS4_GRAPH_DIST = 1u << 4,      /* --dist pipeline (else the session is refused) */
    DS4_GRAPH_DIST_EXPERTS = 1u << 5,   /* --dist experts too (else refused) */
};

typedef struct ds4_graph {
    const char *name;   /* general.architecture */
    int arch;           /* DS4_ARCH_* (gguf/model.h) */
    unsigned caps;      /* DS4_GRAPH_* */
    /* The session's graph state for s->ctx / s->chunk; on failure the
     * caller frees (state_free takes a half-built state).  reset empties
     * it (the token list and checkpoint slots are session.c's). */
    int (*state_new)(ds4_session *s);
    void (*state_free)(ds4_session *s);
    void (*state_reset)(ds4_session *s);
    /* toks[0..n) at positions s->toks.n.. (n <= chunk): the graph state,
     * s->logits and s->has_logits; captured rows appended.  The token list
     * is session.c's (it appends after a successful call). */
    int (*eval_chunk)(ds4_session *s, const int32_t *toks, int n);
    /* the last chunk's logits rows ([n][vocab] when s->stg_on or a
     * capture asked for every row) */
    const float *(*chunk_logits)(const ds4_session *s);
    /* room for `rows` logits rows of one pass (captures, staged passes,
     * batched steps); NULL: the graph's rows always hold a chunk */
    int (*logits_reserve)(ds4_session *s, int rows);
    /* staged passes (docs/SPEC.md): begin saves what a rollback of the n
     * tokens about to be staged needs; commit keeps n_keep of the tokens
     * staged at s->stg_p0 (s->toks.n still counts them all; n_keep is
     * fewer) -- its graph state only: the token count and logits are
     * session.c's.  NULL: nothing to do */
    int (*stage_begin)(ds4_session *s, int n);
    void (*stage_commit)(ds4_session *s, int n_keep);
    /* the batched step over several sessions' rows (one pass owned by
     * `owner`, see ds4_cpu_eval_batch); NULL: every item alone */
    int (*eval_batch)(ds4_session *owner, ds4_cpu_item *items, int n_items);
    /* memory: the live state, a default session's KV and scratch of ctx
     * tokens for bound weights (no loaded model) */
    uint64_t (*kv_bytes)(const ds4_session *s);
    void (*plan)(const ds4_weights *w, int ctx, int nth, uint64_t *kv, uint64_t *scratch);
    /* RAM checkpoints and rewinds (ds4_session.h) */
    uint64_t (*checkpoint_bytes)(const ds4_session *s);
    int (*checkpoint)(ds4_session *s, int slot);
    /* the token count of a slot, -1 when empty; NULL: session.c's slots
     * (s->ck) are the graph's */
    int (*checkpoint_tokens)(const ds4_session *s, int slot);
    int (*rewind_point)(const ds4_session *s, int n);
    int (*rewind)(ds4_session *s, int n);
    /* snapshots (ds4_session.h): size, streamed write, and a restore that
     * validates everything before it touches the live state.  Every
     * format starts with ten u32 words: its own magic (so one graph's
     * snapshot is refused by another's restore), ..., n_tokens at word 8,
     * flags at word 9, then the i32 token ids (the disk KV store reads
     * the tokens there, store/kvstore.c accept_tokens) */
    uint64_t (*snapshot_size)(const ds4_session *s);
    int (*snapshot_write)(const ds4_session *s, ds4_write_fn w, void *ud);
    int (*restore)(ds4_session *s, const void *data, size_t len, char **err);
} ds4_graph;

/* graph.c: the graph of an architecture (DS4_ARCH_*), NULL when none */
const ds4_graph *ds4_graph_for(int arch);

/* The graphs (their files). */
extern const ds4_graph ds4_graph_deepseek4;
extern const ds4_graph ds4_graph_glm_dsa;
extern const ds4_graph ds4_graph_glm5_next;

/* session.c, for the graphs' restore: the session emptied (graph state,
 * tokens, logits, checkpoints, a staged pass), as ds4_session_reset */
void ds4_session_clear(ds4_session *s);

#endif
