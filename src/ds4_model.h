/*
 * ds4_model.h -- a loaded model: load parameters, load/free, facts about it (info,
 * weight pages, the --ssd-streaming cache), its tokenizer and
 * fingerprints, and `ds4 --inspect`.  Implemented in src/engine/engine.c
 * and src/gguf/inspect.c.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_MODEL_H
#define DS4_API_MODEL_H

#include <stdio.h>

#include "ds4_text.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct ds4_model ds4_model;

typedef struct {
    int n_threads;            /* 0 = number of online cores */
    /* --ssd-streaming: the routed experts are not used through the mmap
     * but read from the file (pread, O_DIRECT where the file system allows
     * it) into a fixed cache of ssd_cache_bytes (0 = half of MemAvailable
     * after the resident weights); the other weights are copied into
     * memory at load.  Logits are bit-identical to a resident run. */
    int ssd_streaming;
    uint64_t ssd_cache_bytes;
    int ssd_readers;          /* reader threads; 0 = 4 */
    const char *mtp_path;     /* --mtp: a GGUF holding the MTP block (mtp.0.*);
                                 NULL = use the main file's, if it has one */
} ds4_model_params;

void ds4_model_params_default(ds4_model_params *p);

/* Open a DeepSeek V4 (or glm-dsa) GGUF: mmap, parse, bind and validate
 * every tensor and metadata value.  All problems are reported at once in
 * *err. */
ds4_model *ds4_model_load(const char *path, const ds4_model_params *p,
                          char **err);
void ds4_model_free(ds4_model *m);
/* 1 when an MTP block (docs/MTP.md) is bound: ds4_mtp_draft can draft. */
int ds4_model_has_mtp(const ds4_model *m);

typedef struct {
    const char *name;         /* general.name or the file name */
    int n_layer, n_embd, n_vocab, n_head, head_dim, n_rot;
    int n_expert, n_expert_used, n_ff_exp, n_hc, n_swa;
    uint64_t file_bytes;      /* size of the GGUF */
    uint64_t weight_bytes;    /* bytes of tensor data */
    uint64_t active_bytes_per_token;  /* weights read per decoded token */
    uint64_t layer_macs_per_token;    /* multiply-adds of the layer matmuls
                                         per token (prefill work; the head
                                         and attention products excluded) */
    int random_weights;       /* a synthetic model (ds4-synth): text is noise */
    uint64_t ctx_train;       /* deepseek4.context_length: the context the
                                 model was trained for (0 = not stated);
                                 a longer --ctx runs but is out of
                                 distribution */
    const char *arch;         /* general.architecture: "deepseek4" or
                                 "glm-dsa" (the graph that runs) */
    ds4_chat_format format;   /* the family's prompt format and tool-call
                                 syntax (ds4_model_format) */
} ds4_model_info;

void ds4_model_get_info(const ds4_model *m, ds4_model_info *info);

/* How the main GGUF's mapping sits in memory now: its resident bytes and
 * those the process maps with 2 MB pages (Linux /proc/self/smaps).  The
 * weights are read once per token in long sweeps; on 4 KB pages every 4 KB
 * is a TLB miss (medium q2 on a Zen 5 VM: a 2048-token prefill 79-100
 * against 147 tok/s with 2 MB pages).  A file just written (downloaded,
 * ds4-synth, ds4-quantize) sits in the page cache in small pages until
 * evicted and read again (README, "Huge pages").  Returns 0, or -1 where
 * unknown (all fields 0). */
typedef struct {
    uint64_t mapped;          /* size of the mapping (the file) */
    uint64_t resident;        /* of it, in memory and mapped by this process */
    uint64_t huge;            /* of that, on 2 MB pages */
} ds4_weight_pages;
int ds4_model_weight_pages(const ds4_model *m, ds4_weight_pages *p);
/* 1 when at least min_resident bytes are resident and most of them are on
 * 4 KB pages: the front ends' warning rule (ds4, ds4-bench). */
int ds4_weight_pages_small(const ds4_weight_pages *p, uint64_t min_resident);

/* The routed-expert cache of a --ssd-streaming model (all zero otherwise).
 * Counters accumulate from the load; a front end takes two snapshots and
 * subtracts them for one run.  Safe to call from any thread, also while
 * another evaluates (the server's /metrics does). */
typedef struct {
    int enabled;
    int direct_io;            /* 1 = O_DIRECT reads, 0 = buffered + FADV_DONTNEED */
    int readers;              /* reader threads */
    uint64_t slots, slot_bytes, cache_bytes;
    uint64_t routed_bytes;    /* all routed expert slices of the file */
    uint64_t n_slices;        /* experts x the layers that have routed experts */
    uint64_t resident_bytes;  /* the non-routed weights copied into memory */
    uint64_t hits, misses;    /* slices found in / read into the cache */
    uint64_t bytes_read;      /* from the file (aligned spans) */
    double read_seconds;      /* wall time with at least one read in flight */
    double wait_seconds;      /* time the forward pass waited for reads */
} ds4_expert_cache_stats;
void ds4_model_expert_cache_stats(const ds4_model *m, ds4_expert_cache_stats *st);
/* The message of the last expert read failure (an evaluation that returned
 * DS4_EIO), or NULL. */
const char *ds4_model_expert_cache_error(const ds4_model *m);
/* The message behind an evaluation's DS4_EIO, or NULL: the model's file
 * damaged under the run (below), else the last expert read failure
 * (ds4_model_expert_cache_error).  ds4_model_strerror(m, rc) is what a
 * front end prints for an evaluation that returned rc: that message for
 * DS4_EIO when there is one, else ds4_strerror(rc).
 *
 * The weights are read through a mapping of the file (without
 * --ssd-streaming).  A file truncated (or unreadable) under a running
 * process does not kill it with SIGBUS: the lost pages read as zeros, and
 * the evaluation that touched them fails with DS4_EIO and a message naming
 * the file, the tensor (for a routed expert, the layer and expert) and its
 * bytes.  From then on the model is broken (ds4_model_broken returns 1):
 * its weights are no longer the file's, every evaluation of any of its
 * sessions fails at once with the same message, and the only way on is
 * to load the model again from an intact file. */
const char *ds4_model_error(const ds4_model *m);
const char *ds4_model_strerror(const ds4_model *m, int rc);
int ds4_model_broken(const ds4_model *m);
const ds4_tokenizer *ds4_model_tokenizer(const ds4_model *m);
/* The prompt format and tool-call syntax of the model's family, decided
 * once here from general.architecture (deepseek4: DS4_FORMAT_DSV4,
 * glm-dsa: DS4_FORMAT_GLM): the front ends pass it into ds4_render_opts
 * and the generation driver picks its tool-call parser and end tokens by
 * it; none compares architecture strings. */
ds4_chat_format ds4_model_format(const ds4_model *m);
/* A hash over the GGUF metadata and tensor directory (not the data):
 * identifies "this exact model file layout and quantization". */
void ds4_model_fingerprint(const ds4_model *m, uint8_t out[20]);
/* The same model in any routed-expert quantization (2-bit / 4-bit files of
 * one checkpoint share it): metadata, tensor names and dims, and the types
 * of every tensor but the routed experts. */
void ds4_model_family_fingerprint(const ds4_model *m, uint8_t out[20]);

/* `ds4 --inspect`: metadata summary, shapes, tensor type histogram, file and
 * memory sizes.  Works on vocab-only files too. */
int ds4_inspect(const char *path, FILE *out, char **err);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_MODEL_H */
