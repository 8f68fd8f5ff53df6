/*
 * ds4_kvstore.h -- the disk KV cache: session states stored as files named by the SHA-1
 * of their text, the save policy (when to checkpoint), and the model-free
 * inspection of one cache file (ds4-kv).  Implemented in
 * src/store/kvstore.c; the policy arithmetic in src/engine/evaluate.c.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_KVSTORE_H
#define DS4_API_KVSTORE_H

#include "ds4_session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Disk KV cache: session states stored as files named by the SHA-1 of the  */
/* rendered text they correspond to.  Implemented in kvstore.c; the file     */
/* format is documented in the README ("Disk KV cache").                     */
/* ------------------------------------------------------------------------ */

typedef struct ds4_kvstore ds4_kvstore;

typedef enum {
    DS4_KV_COLD = 1,       /* after a long first prompt (trimmed, aligned) */
    DS4_KV_CONTINUED = 2,  /* prefill or generation crossed an aligned frontier */
    DS4_KV_EVICT = 3,      /* the live session is about to be replaced */
    DS4_KV_SHUTDOWN = 4,   /* clean exit */
    DS4_KV_MANUAL = 5,
} ds4_kv_reason;

const char *ds4_kv_reason_name(uint32_t reason);

typedef struct {
    const char *dir;
    uint64_t space_bytes;        /* LRU cap by last use (default 4096 MiB) */
    int allow_quant_variants;    /* restore states saved by the same model in
                                  * another routed-expert quantization */
    FILE *log;                   /* warnings, one line each (default stderr) */
} ds4_kvstore_params;

typedef struct {
    const char *id;              /* tool-call id */
    const char *dsml;            /* the exact DSML block sampled for it */
    size_t dsml_len;
} ds4_kv_tool;

typedef struct {
    uint64_t hits, misses, saves, save_bytes, load_bytes;
    uint64_t evictions, rejected, write_errors;
    uint64_t files, bytes;
    double save_seconds, load_seconds;
} ds4_kvstore_stats;

void ds4_kvstore_params_default(ds4_kvstore_params *p);
/* Creates the directory if needed, removes temp files left by dead
 * writers, and indexes the files (headers only). */
ds4_kvstore *ds4_kvstore_open(const ds4_model *m, const ds4_kvstore_params *p,
                              char **err);
void ds4_kvstore_close(ds4_kvstore *kv);

/* Save the session's state under the text its tokens spell.  Atomic: a
 * temporary file is written, fsync'ed and renamed; on any error (full disk)
 * nothing changes and an error is returned.  An identical state already on
 * disk is only touched.  `tools` are stored with it for exact replay. */
int ds4_kvstore_save(ds4_kvstore *kv, const ds4_session *s, ds4_kv_reason reason,
                     const ds4_kv_tool *tools, int n_tools, char **err);

/* Restore the longest cached state whose text is a prefix of `text` and
 * holds at least `min_tokens` tokens (and more than the session already
 * has in common with the text, *if* `better_than` > 0).  Returns the
 * number of tokens restored (0 = no hit; the session is then untouched)
 * and stores the text bytes covered in *text_used.  Damaged files are
 * moved aside with one warning line and never restored. */
int ds4_kvstore_restore(ds4_kvstore *kv, ds4_session *s, const char *text,
                        size_t len, int min_tokens, int better_than,
                        size_t *text_used);
/* The same, with a veto: `accept` sees each candidate's tokens and the text
 * bytes it covers after the file passed every check and before the session
 * is touched; returning 0 skips it (the file stays, shorter candidates are
 * tried).  A NULL `accept` accepts everything. */
typedef int (*ds4_kv_accept_fn)(void *ud, const int32_t *tokens, int n, size_t text_used);
int ds4_kvstore_restore_if(ds4_kvstore *kv, ds4_session *s, const char *text,
                           size_t len, int min_tokens, int better_than,
                           ds4_kv_accept_fn accept, void *ud, size_t *text_used);
/* The most recently used state saved for `reason` (0 = any); returns its
 * token count or 0. */
int ds4_kvstore_restore_latest(ds4_kvstore *kv, ds4_session *s, uint32_t reason);
/* Exact DSML remembered for a tool-call id by any file: 1 found, 0 not. */
int ds4_kvstore_tool_dsml(ds4_kvstore *kv, const char *id, ds4_buf *out);
/* Remove the state saved under exactly this text, if there is one (a front
 * end whose conversation moved on drops the state it superseded).  Returns
 * 1 when a file was removed, 0 when there was none. */
int ds4_kvstore_remove(ds4_kvstore *kv, const char *text, size_t len);
void ds4_kvstore_get_stats(ds4_kvstore *kv, ds4_kvstore_stats *st);

/* When to save (shared by the server and the CLI).  Defaults: min 512,
 * cold max 30000, continued interval 10000, trim 32, align 2048. */
typedef struct {
    int min_tokens;          /* never save fewer tokens */
    int cold_max_tokens;     /* first-prompt checkpoint at most this long; 0 = off */
    int continued_interval;  /* checkpoint every N tokens of growth; 0 = off */
    int trim_tokens;         /* tail tokens a cold checkpoint leaves out */
    int align_tokens;        /* checkpoints sit on multiples of this */
} ds4_kv_policy;

void ds4_kv_policy_default(ds4_kv_policy *p);
/* Token count at which a cold (first, uncached) prompt of n tokens is
 * checkpointed: the prompt minus the trimmed tail, capped, aligned down, so
 * that the next turn -- which re-renders the tail differently -- still
 * matches the saved text.  0 = no checkpoint. */
int ds4_kv_policy_cold_point(const ds4_kv_policy *p, int n);
/* The next continued-checkpoint frontier strictly above `n` tokens: a
 * multiple of the interval rounded up to the alignment; 0 = off. */
int ds4_kv_policy_next_frontier(const ds4_kv_policy *p, int n);

/* Model-free inspection of one cache file (ds4-kv). */
typedef struct {
    uint32_t version, reason, n_tokens, ctx_size, hits, flags, n_tools;
    uint64_t created, last_used, file_bytes, text_len, payload_len, tools_len;
    uint8_t fingerprint[20], family[20];
    char arch[17];               /* general.architecture of the saving model
                                    ("deepseek4" for files from before the
                                    field) */
    char prefix[121];            /* first bytes of the text, escaped (whole
                                    UTF-8 characters only) */
    char suffix[121];            /* last bytes of the text, likewise: what
                                    tells apart files that share a start */
} ds4_kv_file_info;

/* Reads the header (and with `verify`, checks sizes and the checksum).
 * Returns 0 or DS4_EFORMAT with a reason in *err. */
int ds4_kv_file_info_read(const char *path, int verify, ds4_kv_file_info *info,
                          char **err);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_KVSTORE_H */
