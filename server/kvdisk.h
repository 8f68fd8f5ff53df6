/*
 * kvdisk.h -- the server's use of the disk KV cache (kvdisk.c): when to
 * save the live session, which saved state to restore for a prompt, and
 * the exact DSML of tool calls the files remember.
 *
 * Owns: the ds4_kvstore handle, the save bookkeeping, and the tool calls
 * whose DSML the live session holds (stored with each saved file).
 * Driven by the worker thread only (kvdisk_finder: any thread).  Must not:
 * decide what a prompt reuses (ds4_session_sync does) or evaluate anything
 * (ds4_eval does, calling back).
 */
#ifndef DS4_SERVER_KVDISK_H
#define DS4_SERVER_KVDISK_H

#include "server.h"
#include "ds4_sync.h"

typedef struct kvdisk kvdisk;

/* Open srv->cfg.kv_dir for the session `s` (which stays the caller's). */
kvdisk *kvdisk_open(server_ctx *srv, ds4_session *s, char **err);
void kvdisk_close(kvdisk *w);
const ds4_kv_policy *kvdisk_policy(const kvdisk *w);

/* --parallel: the cache's bookkeeping of one more live session (what was
 * last saved, the tool calls its text holds).  kvdisk_select makes the
 * calls below about that session (NULL: the one of kvdisk_open) until the
 * next select; a kvdisk_live is freed after the kvdisk stops using it. */
typedef struct kvdisk_live kvdisk_live;
kvdisk_live *kvdisk_live_new(ds4_session *s);
void kvdisk_live_free(kvdisk_live *l);
void kvdisk_select(kvdisk *w, kvdisk_live *l);

/* Save the live session for `why` (skipped under the policy's minimum or
 * when this state was just saved or restored).  Failures are logged and
 * counted, never fatal. */
void kvdisk_save(kvdisk *w, ds4_kv_reason why);
/* ds4_eval_params.save (ud = the kvdisk). */
void kvdisk_save_cb(void *ud, ds4_kv_reason why);
/* The session was reset or rewound: its next state is a new one. */
void kvdisk_session_replaced(kvdisk *w);

/* The live session holds (or the prompt being evaluated will hold) this
 * tool-call block: later saves carry it. */
void kvdisk_tools_add(kvdisk *w, const char *id, const char *dsml, size_t dsml_len,
                      const char *reasoning, size_t reasoning_len);
/* From here on the live session is this request's: its exactly replayed
 * tool calls. */
void kvdisk_tools_from_request(kvdisk *w, const request *rq);

/* The connection threads' lookups in the files (thread-safe; opened once
 * by main.c when --kv-disk-dir is set): assistant tool-call turns the tool
 * memory did not know get their exact DSML (and the reasoning before it)
 * from the files, before the request's one rendering.  Returns the turns
 * found (they also go back into the tool memory). */
typedef struct kvdisk_finder kvdisk_finder;
kvdisk_finder *kvdisk_finder_open(server_ctx *srv, char **err);
void kvdisk_finder_close(kvdisk_finder *f);
int kvdisk_finder_resolve(kvdisk_finder *f, request *rq);
/* The disk half of ds4_session_sync's parameters for the selected session
 * (the store, the minimum state, evict-save / replaced / restored / log
 * callbacks); kvdisk_publish then copies the store's counters to /metrics. */
void kvdisk_sync_params(kvdisk *w, ds4_sync_params *p);
void kvdisk_publish(kvdisk *w);

#endif
