/*
 * ds4_mpi.h -- distributed inference over MPI (docs/distributed.md): start, rank
 * and size, the worker loop of ranks > 0, finish.  Implemented in
 * src/mpi/mpi.c (the engine reaches it through the hook table of
 * ds4_transport.h; it reaches the engine through the public headers).
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_MPI_H
#define DS4_API_MPI_H

#include "ds4_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Distributed inference over MPI (src/mpi/, docs/distributed.md "Several machines").    */
/* Every rank runs the same binary under mpirun.  Call ds4_dist_init before  */
/* anything else; ranks > 0 then call ds4_dist_worker (which loads the model */
/* and serves rank 0 until it exits) and exit with its status.  Rank 0 goes  */
/* on as a normal front end: ds4_model_load and the sessions drive the       */
/* workers.  Snapshots, restores and --dump-hidden are not distributed       */
/* (DS4_EUNSUP).                                                             */
/* ------------------------------------------------------------------------ */

/* 1 when this build has MPI support. */
int ds4_dist_supported(void);
/* mode: "pipeline" or "experts"; layers: NULL (balanced by weight bytes) or "a:b,c:d"
 * (inclusive layer ranges, one per rank).  Returns this rank (>= 0) or a
 * DS4_E* code with *err. */
int ds4_dist_init(int *argc, char ***argv, const char *mode, const char *layers,
                  char **err);
int ds4_dist_rank(void);
int ds4_dist_size(void);
/* --dist-timeout: how long a rank waits for a message its work depends on
 * before it names the ranks that stopped answering and stops the job
 * (0 = forever).  Call before ds4_dist_init; DS4_EINVAL if out of range. */
#define DS4_DIST_TIMEOUT_DEFAULT 300.0
int ds4_dist_set_timeout(double seconds);
/* Ranks > 0: load `path` and serve; returns the process exit status. */
int ds4_dist_worker(const char *path, const ds4_model_params *p);
/* Seconds this rank spent sending and waiting for messages. */
double ds4_dist_comm_seconds(void);
/* Rank 0: release the workers and finalize MPI (also run at exit). */
void ds4_dist_finish(void);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_MPI_H */
