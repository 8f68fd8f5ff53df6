/*
 * mpi.h -- the engine's side of distributed inference over MPI (mpi.c).
 *
 * Owns: the hooks the session and the CPU forward pass call when the
 * process runs under `--dist` (ds4.h, "Distributed inference").  Without
 * --dist (or in a build without MPI) ds4_dist_on() is 0 and every hook is
 * skipped, so single-process numerics are untouched.
 * Must not: compute anything of the model (forward_cpu.c does).
 */
#ifndef DS4_MPI_H
#define DS4_MPI_H

#include "engine/engine_internal.h"

/* 1 once ds4_dist_init succeeded with a mode (any rank). */
int ds4_dist_on(void);

/* Called at the end of ds4_model_load on every rank: computes this rank's
 * layer range, and on rank 0 collects every worker's load status and
 * fingerprint (a failed or different rank fails the load with a message
 * naming it).  `rc` is the local load status. */
int ds4_dist_model_loaded(ds4_model *m, int rc, char **err);

/* Session mirroring (rank 0 only; no-ops elsewhere). */
void ds4_dist_session_new(ds4_session *s);
void ds4_dist_session_free(ds4_session *s);
void ds4_dist_session_reset(ds4_session *s);
void ds4_dist_session_checkpoint(ds4_session *s, int slot);
void ds4_dist_session_rewind(ds4_session *s, int n);

/* Forward pass hooks (forward_cpu.c).  chunk_begin: on rank 0 sends the
 * chunk to the workers; on every rank gives the layers [*lo, *hi) this
 * rank evaluates and whether all-position logits are wanted. */
int ds4_dist_chunk_begin(ds4_session *s, const int32_t *toks, int n, int *want_all,
                         int *lo, int *hi);
/* The HC state [n][n_hc][n_embd] from the previous rank / to the next. */
int ds4_dist_recv_x(ds4_session *s, float *X, int n);
/* send_x starts the send of one micro-batch's rows (left untouched until
 * send_done, which waits for every send of the chunk). */
int ds4_dist_send_x(ds4_session *s, const float *X, int n);
int ds4_dist_send_done(ds4_session *s);
/* Lets the sends in flight advance (called between layers): over TCP a
 * large message moves only while its sender calls into MPI. */
void ds4_dist_progress(void);
/* Pipeline: the micro-batch size for a chunk of n tokens
 * (n in experts mode). */
int ds4_dist_microbatch(const ds4_session *s, int n);
/* The last rank's logits rows (nl of them) reach rank 0's `logits`. */
int ds4_dist_logits(ds4_session *s, float *logits, int nl);
/* 1 when this rank computes the logits (the last rank of a pipeline,
 * rank 0 in experts mode). */
int ds4_dist_runs_head(void);
/* Experts mode: the routed experts [*lo, *hi) of every layer this rank
 * computes (all of them in pipeline mode). */
void ds4_dist_expert_range(int n_expert, int *lo, int *hi);
/* Experts mode: rows [eoff[lo_r], eoff[hi_r]) of dn ([npairs][D]) come
 * from rank r; afterwards every rank holds all npairs rows. */
int ds4_dist_gather_rows(float *dn, int D, const int *eoff, int n_expert, int npairs);
/* Pipeline plan: first[r] = the first layer of rank r, first[P] = L;
 * spec = --dist-layers or NULL (balanced by weight bytes).  No MPI needed
 * (ds4-gguf split uses it). */
int ds4_dist_plan_pipeline(const gguf_file *gf, int L, int P, const char *spec, int *first,
                           char *msg, size_t cap);
/* Layer index of a "blk.N." tensor name; -1 otherwise. */
int ds4_dist_layer_of(const char *name);
/* A per-rank file's ds4.split keys: checks rank/P (rank < 0: any) and
 * the plan; fills first[P+1] and the whole file's fingerprint (either may
 * be NULL). */
int ds4_split_info(const gguf_file *gf, int L, int rank, int P, int *first, uint8_t fp[20],
                   char *msg, size_t cap);
/* Experts mode: the routed experts [*lo, *hi) of rank r of P (no MPI
 * needed: ds4-gguf split --dist experts writes the same shares). */
void ds4_dist_expert_share(int n_expert, int r, int P, int *lo, int *hi);
/* An experts split part's ds4.split keys: checks rank/P (rank < 0: any)
 * and that its experts are ds4_dist_expert_share's; fills its range and
 * the whole file's fingerprint (any may be NULL). */
int ds4_split_experts_info(const gguf_file *gf, int E, int rank, int P, int *e_lo, int *e_hi,
                           uint8_t fp[20], char *msg, size_t cap);
/* -m under --dist: "PREFIX-rank%d.gguf" names each rank's part; malloc'd. */
char *ds4_dist_path(const char *path);
/* 1 on rank 0 (or without --dist). */
int ds4_dist_is_root(void);

#endif
