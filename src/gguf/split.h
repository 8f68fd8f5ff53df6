/*
 * split.h -- how one model is split over the ranks of `--dist`: the
 * pipeline plan, the experts share, the ds4.split keys of per-rank files,
 * per-rank file names (split.c).
 *
 * Owns: the rules both sides must agree on, so that `ds4-gguf split`
 * (tools/ds4_gguf.c) writes the parts the runtime (src/mpi/mpi.c) expects.
 * Pure functions of the file and the rank count: no MPI, no process state.
 * Must not: talk to other ranks or hold state (src/mpi/ does), or bind the
 * model (model.c reads the slice a part holds).
 */
#ifndef DS4_SPLIT_H
#define DS4_SPLIT_H

#include <stddef.h>
#include <stdint.h>
#include "gguf/gguf.h"

/* Layer index of a "blk.N." tensor name; -1 otherwise. */
int ds4_split_layer_of(const char *name);
/* Pipeline plan: first[r] = the first layer of rank r, first[P] = L;
 * spec = --dist-layers or NULL (balanced by weight bytes). */
int ds4_split_plan_pipeline(const gguf_file *gf, int L, int P, const char *spec, int *first,
                            char *msg, size_t cap);
/* A per-rank file's ds4.split keys: checks rank/P (rank < 0: any) and
 * the plan; fills first[P+1] and the whole file's fingerprint (either may
 * be NULL). */
int ds4_split_info(const gguf_file *gf, int L, int rank, int P, int *first, uint8_t fp[20],
                   char *msg, size_t cap);
/* Experts mode: the routed experts [*lo, *hi) of rank r of P. */
void ds4_split_expert_share(int n_expert, int r, int P, int *lo, int *hi);
/* An experts split part's ds4.split keys: checks rank/P (rank < 0: any)
 * and that its experts are ds4_split_expert_share's; fills its range and
 * the whole file's fingerprint (any may be NULL). */
int ds4_split_experts_info(const gguf_file *gf, int E, int rank, int P, int *e_lo, int *e_hi,
                           uint8_t fp[20], char *msg, size_t cap);
/* -m under --dist: "PREFIX-rank%d.gguf" names each rank's part: the path
 * with its one "%d" replaced by `rank` (a path without exactly one "%d"
 * as it is); malloc'd, NULL when out of memory. */
char *ds4_split_path(const char *path, int rank);

#endif
