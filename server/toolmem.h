/*
 * toolmem.h -- bounded memory of the exact DSML the model sampled, by tool
 * call id (toolmem.c).
 *
 * Why: when a client sends an assistant tool call back, the prompt must hold
 * the bytes the model actually produced, not a canonical re-rendering (JSON
 * spacing, parameter order and string/JSON choices can all differ), or the
 * live KV state stops being a prefix of the new prompt and the model sees a
 * history it did not write.  The block is stored once per tool-call block
 * and referenced by each of its call ids; the reasoning that preceded the
 * block is kept with it, so a client that drops reasoning_content still gets
 * the prompt the model saw.
 *
 * Bounded by the number of ids (--tool-memory-max-ids); the least recently
 * used id is evicted first.  Thread-safe (connection threads look up, the
 * worker inserts).
 */
#ifndef DS4_SERVER_TOOLMEM_H
#define DS4_SERVER_TOOLMEM_H

#include <stddef.h>
#include "ds4.h"

typedef struct toolmem toolmem;

toolmem *toolmem_new(size_t max_ids);
void toolmem_free(toolmem *t);

/* Remember one block: the ids, names and argument JSON of its n calls, the
 * exact block text and the reasoning before it. */
int toolmem_put(toolmem *t, const char *const *ids, const char *const *names,
                const char *const *args, int n, const char *block, size_t block_len,
                const char *reasoning, size_t reasoning_len);

/* When the calls of an assistant message are exactly one remembered block
 * (same ids in the same order, same names, arguments JSON-equal or
 * differing only by merging, below), return 1
 * with malloc'd copies of the block text and its reasoning (*reasoning may
 * be NULL when none was stored).  0 otherwise. */
int toolmem_match(toolmem *t, const ds4_tool_call *calls, int n, char **block,
                  char **reasoning);

size_t toolmem_count(toolmem *t);

/* 1 when a client's copy of a streamed field (reasoning_content, tool-call
 * arguments) differs from what the server sent only by how the client's
 * SDK merged the stream deltas, so the server's remembered copy is the one
 * to render.  Precisely, client != mem and either
 *   - client is a proper, non-empty suffix of mem: each delta was assigned
 *     instead of appended, so only the last one(s) remain (openai-node's
 *     ChatCompletionStream does this to reasoning_content: it
 *     Object.assign()s unknown delta fields onto the message), or
 *   - client is mem with every delta repeated in place, d1 d1 d2 d2 ...
 *     dk dk for some split mem = d1 d2 ... dk (a proxy or SDK that appends
 *     each delta twice).
 * An empty client copy (the field dropped) is not a merge artifact: the
 * caller handles it.  Anything else -- an edit, a truncation at the end,
 * added text -- is the client's to keep. */
int toolmem_merge_artifact(const char *client, size_t client_len, const char *mem,
                           size_t mem_len);

/* Tool-call arguments equal as JSON values (clients re-serialize), or
 * byte-equal when either is not JSON. */
int toolmem_args_equal(const char *a, const char *b);

#endif
