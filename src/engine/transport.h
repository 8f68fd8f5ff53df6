/*
 * transport.h -- the engine's side of a transport across processes
 * (`--dist`, src/mpi/): the one registered hook table (its shape is public,
 * src/ds4_transport.h) and the wrappers the call sites use.
 *
 * The hooks take plain values and opaque handles; the wrappers here fill
 * them from the engine's structs (the session's id, ctx, chunk, no_qat,
 * capture flag; row counts from the model's config), so a transport never
 * reads an engine struct.  No table (the default, every single-process
 * run, every build without MPI): dist_on() is 0 and every call site skips
 * its hook, so single-process numerics are untouched.
 *
 * Owns: the table pointer's declaration and the wrappers.
 * Must not: know MPI, or do anything but forward (the transport decides).
 */
#ifndef DS4_TRANSPORT_H
#define DS4_TRANSPORT_H

#include <stdint.h>
#include <string.h>
#include "ds4_transport.h"
#include "engine/engine_internal.h"

/* The registered table, read only through the wrappers below. */
extern const ds4_transport *ds4_transport_active;

/* The call sites' wrappers.  Without a transport each does what one
 * process does (or says DS4_EUNSUP where one process never calls it). */
static inline int dist_on(void) { return ds4_transport_active != NULL; }
#define DIST_T ds4_transport_active
static inline char *dist_path(const char *p) { return DIST_T ? DIST_T->path(p) : strdup(p); }
/* m's path and gf are read only when rc is DS4_OK (then both are set) */
static inline int dist_model_loaded(ds4_model *m, int rc, char **err) {
    return DIST_T ? DIST_T->model_loaded(m, m->path, m->gf, rc, err) : rc;
}
static inline void dist_session_new(ds4_session *s) {
    if (DIST_T) s->dist_id = DIST_T->session_new(s->ctx, s->chunk, s->no_qat);
}
static inline void dist_session_free(ds4_session *s) { if (DIST_T) DIST_T->session_free(s->dist_id); }
static inline void dist_session_reset(ds4_session *s) { if (DIST_T) DIST_T->session_reset(s->dist_id); }
static inline void dist_session_checkpoint(ds4_session *s, int slot) {
    if (DIST_T) DIST_T->session_checkpoint(s->dist_id, slot);
}
static inline void dist_session_rewind(ds4_session *s, int n) {
    if (DIST_T) DIST_T->session_rewind(s->dist_id, n);
}
static inline int dist_chunk_begin(ds4_session *s, const int32_t *toks, int n, int *want_all,
                                   int *lo, int *hi) {
    return DIST_T ? DIST_T->chunk_begin(s->dist_id, s->cap_hidden != NULL, toks, n, want_all,
                                        lo, hi)
                  : DS4_EUNSUP;
}
/* floats of the HC state of n rows */
static inline int dist_x_count(const ds4_session *s, int n) {
    const ds4_config *c = &s->m->w.cfg;
    return n * c->n_hc * c->n_embd;
}
static inline int dist_recv_x(ds4_session *s, float *X, int n) {
    return DIST_T ? DIST_T->recv_x(X, dist_x_count(s, n)) : DS4_EUNSUP;
}
static inline int dist_send_x(ds4_session *s, const float *X, int n) {
    return DIST_T ? DIST_T->send_x(X, dist_x_count(s, n)) : DS4_EUNSUP;
}
/* any count of floats to the next rank / from the previous one, in the
 * same order as the HC rows (the GLM graphs: glm-dsa's one residual
 * stream, and the indexer selection that crosses a rank boundary) */
static inline int dist_recv_floats(float *X, int count) {
    return DIST_T ? DIST_T->recv_x(X, count) : DS4_EUNSUP;
}
static inline int dist_send_floats(const float *X, int count) {
    return DIST_T ? DIST_T->send_x(X, count) : DS4_EUNSUP;
}
/* --dist experts: this rank holds only a share of n_expert routed experts */
static inline int dist_experts_mode(int n_expert) {
    int lo = 0, hi = n_expert;
    if (DIST_T) DIST_T->expert_range(n_expert, &lo, &hi);
    return lo > 0 || hi < n_expert;
}
static inline int dist_send_done(ds4_session *s) {
    (void)s;
    return DIST_T ? DIST_T->send_done() : DS4_EUNSUP;
}
static inline void dist_progress(void) { if (DIST_T) DIST_T->progress(); }
static inline int dist_microbatch(const ds4_session *s, int n) {
    const ds4_config *c = &s->m->w.cfg;
    return DIST_T ? DIST_T->microbatch(n, c->n_expert, c->n_expert_used) : n;
}
static inline int dist_logits(ds4_session *s, float *logits, int nl) {
    return DIST_T ? DIST_T->logits(logits, nl * s->m->w.cfg.n_vocab) : DS4_OK;
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
