/*
 * expert_cache.h -- SSD streaming of routed experts (--ssd-streaming):
 * a fixed pool of slots, each holding the gate, up and down slices of one
 * expert of one layer, filled with pread by reader threads.
 *
 * Owns: the slot pool (one anonymous mapping, never grown), the
 * (layer, expert) -> slot map, the eviction policy, the reader threads and
 * the O_DIRECT / posix_fadvise handling of the model file, the counters
 * behind ds4_model_expert_cache_stats, and the anonymous copy of the
 * non-routed weights (so nothing of the file is reached through the mmap
 * once a streaming model is loaded).
 * Must not: compute anything (deepseek4.c's moe() asks for experts and
 * runs the same kernels on the slot bytes), or touch the mmap'd routed
 * expert pages -- that is the point of the module.
 */
#ifndef DS4_EXPERT_CACHE_H
#define DS4_EXPERT_CACHE_H

#include <stdint.h>

#include "ds4.h"
#include "gguf/gguf.h"
#include "gguf/model.h"

typedef struct ds4_xcache ds4_xcache;

/* Eviction policies (NOTES.md "SSD streaming" has the measurement that
 * picked the default). */
enum { XC_LRU = 0, XC_LFU_AGING = 1 };

/* Copy every non-routed tensor of `w` into anonymous memory (pread, then
 * POSIX_FADV_DONTNEED on the ranges read) and point w's tensors there;
 * returns the buffer to free with the model (*bytes: its size). */
int xc_copy_resident(gguf_file *gf, ds4_weights *w, void **buf, uint64_t *bytes, char **err);

/* Open the cache for the routed experts of `w` (bound to `gf`): `budget`
 * bytes of slots (at least one slot; at most every slice), n_readers
 * reader threads. */
int xc_open(ds4_xcache **out, gguf_file *gf, const ds4_weights *w, uint64_t budget,
            int n_readers, char **err);
void xc_free(ds4_xcache *c);

/* One layer's experts, as moe() uses them:
 *   xc_begin(c, il, experts, n)   the distinct experts it needs (any order);
 *                                 hits are pinned, reads for the misses are
 *                                 queued at once, as many as free slots allow
 *   xc_next(c, idx, max)          blocks until at least one of them is in
 *                                 memory; writes their indices (into
 *                                 experts[]) to idx and returns the count,
 *                                 0 when every one has been handed out, or
 *                                 a DS4_E* code (message: xc_error)
 *   xc_weights(c, i, w3)          gate, up, down bytes of experts[i]
 *   xc_release(c, idx, n)         done with them: their slots may be reused
 *                                 (and the next misses are queued)
 *   xc_end(c)                     the layer is over (also after an error)
 * Every expert of a layer is handed out exactly once, with any number of
 * slots (waves), provided the caller releases what it got before waiting
 * again. */
void xc_begin(ds4_xcache *c, int il, const int *experts, int n);
int xc_next(ds4_xcache *c, int *idx, int max);
void xc_weights(const ds4_xcache *c, int i, const uint8_t *w3[3]);
void xc_release(ds4_xcache *c, const int *idx, int n);
void xc_end(ds4_xcache *c);
const char *xc_error(const ds4_xcache *c);

void xc_stats(ds4_xcache *c, ds4_expert_cache_stats *st);
void xc_set_resident(ds4_xcache *c, uint64_t bytes);

/* The default budget: half of MemAvailable once the resident part is
 * counted, at least one slot's worth (caller clamps). */
uint64_t xc_default_budget(uint64_t resident_bytes);

#endif
