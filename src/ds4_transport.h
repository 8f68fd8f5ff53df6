/*
 * ds4_transport.h -- the plug-in API of a transport across processes
 * (`--dist`): the table of hooks the engine's load, sessions and forward
 * pass call, which a transport (src/mpi/mpi.c) fills and registers.
 *
 * Why a table: a transport's worker ranks run the engine (sessions,
 * evaluations), and the engine must call the transport under --dist.
 * Calling each other's functions would make the two one circle of modules
 * (tools/check_layers.py, rule 6); with the table the engine names no
 * function of the transport, which registers itself (ds4_transport_set)
 * once it is set up.
 *
 * Why public: a transport is a client of the engine like any front end,
 * and reaches it through the public headers only (check_layers.py, rule 2).
 * So every hook takes plain values (counts, flags, float rows) and opaque
 * handles, never the engine's structs: the engine fills the arguments from
 * its own structs (src/engine/transport.h, its wrappers).  A session is
 * named by the id its session_new hook returned.  Not in the umbrella
 * ds4.h: front ends have no use for it.
 *
 * Part of the public API (ds4.h has the conventions: return codes, err
 * messages, threads).  Implemented in src/engine/transport.c.
 */
#ifndef DS4_API_TRANSPORT_H
#define DS4_API_TRANSPORT_H

#include <stdint.h>
#include "ds4_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model's GGUF file, opaque here: a transport that reads the file's
 * split keys and tensor sizes (src/gguf/split.h) includes gguf/gguf.h. */
struct gguf_file;

typedef struct ds4_transport {
    /* The file this rank loads for -m `path` (a per-rank part's name);
     * malloc'd. */
    char *(*path)(const char *path);
    /* Called at the end of ds4_model_load on every rank with the local
     * load status `rc`; `path` is the file loaded (path's answer) and `gf`
     * its GGUF.  m, path and gf are only valid (and only read) when rc is
     * DS4_OK; then m answers the public accessors (ds4_model_get_info,
     * ds4_model_fingerprint).  Computes this rank's layer range, and on
     * rank 0 collects every worker's status and fingerprint (a failed or
     * different rank fails the load with a message naming it). */
    int (*model_loaded)(const ds4_model *m, const char *path, const struct gguf_file *gf, int rc,
                        char **err);
    /* Session mirroring (rank 0 tells the workers; no-ops elsewhere).
     * session_new gets the session's parameters (ctx_size, prefill_chunk,
     * no_qat of ds4_session_params) and returns its id (0: none; the other
     * hooks then do nothing for it). */
    int (*session_new)(int ctx, int chunk, int no_qat);
    void (*session_free)(int id);
    void (*session_reset)(int id);
    void (*session_checkpoint)(int id, int slot);
    void (*session_rewind)(int id, int n);
    /* Forward pass.  chunk_begin: on rank 0 sends the chunk to the
     * workers; on every rank gives the layers [*lo, *hi) this rank
     * evaluates and whether all-position logits are wanted.  cap_hidden:
     * the session captures its hidden rows (not distributed). */
    int (*chunk_begin)(int id, int cap_hidden, const int32_t *toks, int n, int *want_all,
                       int *lo, int *hi);
    /* The HC state of a micro-batch (`count` floats: [n][n_hc][n_embd])
     * from the previous rank. */
    int (*recv_x)(float *X, int count);
    /* Starts the send of one micro-batch's rows to the next rank (left
     * untouched until send_done, which waits for every send of the chunk). */
    int (*send_x)(const float *X, int count);
    int (*send_done)(void);
    /* Lets the sends in flight advance (called between layers). */
    void (*progress)(void);
    /* The micro-batch size for a chunk of n tokens of a model with
     * n_expert routed experts, n_expert_used a token. */
    int (*microbatch)(int n, int n_expert, int n_expert_used);
    /* The head rank's logits rows (`count` floats: [rows][n_vocab]) reach
     * rank 0's `logits`. */
    int (*logits)(float *logits, int count);
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
 * before any model is loaded and before any thread runs the engine.  No
 * transport (the default, every single-process run, every build without
 * MPI): the engine runs one process and calls no hook. */
void ds4_transport_set(const ds4_transport *t);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_TRANSPORT_H */
