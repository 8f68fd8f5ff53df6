/*
 * transport.h -- what the engine needs from a transport across processes
 * (`--dist`, src/mpi/), as a table of hooks the transport registers.
 *
 * Why a table: the transport's worker ranks run the engine (sessions,
 * evaluations), and the engine's load, sessions and forward pass must
 * call the transport under --dist.  Calling each other's functions would
 * make the two one circle of modules (tools/check_layers.py, rule 6);
 * with the table the engine names no function of src/mpi/, and the
 * transport registers itself (ds4_transport_set) once --dist is set up.
 *
 * Owns: the hook table's shape, the one registered table, and the small
 * wrappers the call sites use.  No table (the default, every single-process
 * run, every build without MPI): dist_on() is 0 and every call site skips
 * its hook, so single-process numerics are untouched.
 * Must not: know MPI, or do anything but forward (the transport decides).
 */
#ifndef DS4_TRANSPORT_H
#define DS4_TRANSPORT_H

#include <stdint.h>
#include <string.h>
#include "ds4.h"

typedef struct ds4_transport {
    /* The file this rank loads for -m `path` (a per-rank part's name);
     * malloc'd. */
    char *(*path)(const char *path);
    /* Called at the end of ds4_model_load on every rank with the local
     * load status `rc`: computes this rank's layer range, and on rank 0
     * collects every worker's status and fingerprint (a failed or
     * different rank fails the load with a message naming it). */
    int (*model_loaded)(ds4_model *m, int rc, char **err);
    /* Session mirroring (rank 0 tells the workers; no-ops elsewhere). */
    void (*session_new)(ds4_session *s);
    void (*session_free)(ds4_session *s);
    void (*session_reset)(ds4_session *s);
    void (*session_checkpoint)(ds4_session *s, int slot);
    void (*session_rewind)(ds4_session *s, int n);
    /* Forward pass.  chunk_begin: on rank 0 sends the chunk to the
     * workers; on every rank gives the layers [*lo, *hi) this rank
     * evaluates and whether all-position logits are wanted. */
    int (*chunk_begin)(ds4_session *s, const int32_t *toks, int n, int *want_all, int *lo,
                       int *hi);
    /* The HC state [n][n_hc][n_embd] from the previous rank. */
    int (*recv_x)(ds4_session *s, float *X, int n);
    /* Starts the send of one micro-batch's rows to the next rank (left
     * untouched until send_done, which waits for every send of the chunk). */
    int (*send_x)(ds4_session *s, const float *X, int n);
    int (*send_done)(ds4_session *s);
    /* Lets the sends in flight advance (called between layers). */
    void (*progress)(void);
    /* The micro-batch size for a chunk of n tokens. */
    int (*microbatch)(const ds4_session *s, int n);
    /* The head rank's logits rows (nl of them) reach rank 0's `logits`. */
    int (*logits)(ds4_session *s, float *logits, int nl);
    /* 1 when this rank computes the logits. */
    int (*runs_head)(void);
    /* The routed experts [*lo, *hi) of every layer this rank computes. */
    void (*expert_range)(int n_expert, int *lo, int *hi);
    /* Rows [eoff[lo_r], eoff[hi_r]) of dn ([npairs][D]) come from rank r;
     * afterwards every rank holds all npairs rows. */
    int (*gather_rows)(float *dn, int D, const int *eoff, int n_expert, int npairs);
    /* 1 on the rank that keeps the results (rank 0). */
    int (*is_root)(void);
} ds4_transport;

/* Registers the transport (every hook set), or NULL for none.  Called once,
 * before any model is loaded and before any thread runs the engine. */
void ds4_transport_set(const ds4_transport *t);

/* The registered table, read only through the wrappers below. */
extern const ds4_transport *ds4_transport_active;

/* The call sites' wrappers.  Without a transport each does what one
 * process does (or says DS4_EUNSUP where one process never calls it). */
static inline int dist_on(void) { return ds4_transport_active != NULL; }
#define DIST_T ds4_transport_active
static inline char *dist_path(const char *p) { return DIST_T ? DIST_T->path(p) : strdup(p); }
static inline int dist_model_loaded(ds4_model *m, int rc, char **err) {
    return DIST_T ? DIST_T->model_loaded(m, rc, err) : rc;
}
static inline void dist_session_new(ds4_session *s) { if (DIST_T) DIST_T->session_new(s); }
static inline void dist_session_free(ds4_session *s) { if (DIST_T) DIST_T->session_free(s); }
static inline void dist_session_reset(ds4_session *s) { if (DIST_T) DIST_T->session_reset(s); }
static inline void dist_session_checkpoint(ds4_session *s, int slot) {
    if (DIST_T) DIST_T->session_checkpoint(s, slot);
}
static inline void dist_session_rewind(ds4_session *s, int n) {
    if (DIST_T) DIST_T->session_rewind(s, n);
}
static inline int dist_chunk_begin(ds4_session *s, const int32_t *toks, int n, int *want_all,
                                   int *lo, int *hi) {
    return DIST_T ? DIST_T->chunk_begin(s, toks, n, want_all, lo, hi) : DS4_EUNSUP;
}
static inline int dist_recv_x(ds4_session *s, float *X, int n) {
    return DIST_T ? DIST_T->recv_x(s, X, n) : DS4_EUNSUP;
}
static inline int dist_send_x(ds4_session *s, const float *X, int n) {
    return DIST_T ? DIST_T->send_x(s, X, n) : DS4_EUNSUP;
}
static inline int dist_send_done(ds4_session *s) {
    return DIST_T ? DIST_T->send_done(s) : DS4_EUNSUP;
}
static inline void dist_progress(void) { if (DIST_T) DIST_T->progress(); }
static inline int dist_microbatch(const ds4_session *s, int n) {
    return DIST_T ? DIST_T->microbatch(s, n) : n;
}
static inline int dist_logits(ds4_session *s, float *logits, int nl) {
    return DIST_T ? DIST_T->logits(s, logits, nl) : DS4_OK;
}
static inline int dist_runs_head(void) { return DIST_T ? DIST_T->runs_head() : 1; }
static inline void dist_expert_range(int n_expert, int *lo, int *hi) {
    if (DIST_T) DIST_T->expert_range(n_expert, lo, hi);
    else { *lo = 0; *hi = n_expert; }
}
static inline int dist_gather_rows(float *dn, int D, const int *eoff, int n_expert, int npairs) {
    return DIST_T ? DIST_T->gather_rows(dn, D, eoff, n_expert, npairs) : DS4_EUNSUP;
}
static inline int dist_is_root(void) { return DIST_T ? DIST_T->is_root() : 1; }
#undef DIST_T

#endif
