/*
 * ds4.h -- the public engine API of ds4.
 *
 * ds4 is an inference engine for one model family: DeepSeek V4 Flash (and V4
 * PRO, which shares the layout).  This header is everything a front end (the
 * `ds4` CLI, `ds4-server`, `ds4-bench`, `ds4-kv`) may use.  Front ends never
 * include the internal headers (gguf.h, quant.h, model.h, ...) and never touch
 * tensors (ds4-synth, a file generator, and the kernel benches do): they load a model, tokenize, render prompts, drive a session and
 * sample.
 *
 * Conventions
 *   - Functions that can fail return 0 on success and a negative DS4_E* code
 *     on failure.  Where an `err` out-parameter is given, a malloc'd,
 *     human-readable message (possibly several lines) is stored there on
 *     failure; the caller frees it.  `err` may be NULL.
 *   - Token ids are int32_t.  Text is UTF-8 bytes with an explicit length.
 *   - Threads: a model, a session, a sampler, a DSML parser and a KV store
 *     are each driven by one thread at a time (a model's sessions share its
 *     thread pool, so evaluate on one model from one thread at a time).  A
 *     loaded tokenizer is read-only and may be used by many threads at once;
 *     ds4_render_chat, ds4_render_tool_calls and the ds4_buf/ds4_tokens
 *     helpers are pure functions of their arguments and are thread-safe.
 */
#ifndef DS4_H
#define DS4_H

/* The API by part (each header includes what it stands on, so a file may
 * include just the part it uses): */
#include "ds4_base.h"      /* version, status codes, buffers, escaping */
#include "ds4_text.h"      /* tokenizer, prompt rendering, DSML parser */
#include "ds4_model.h"     /* loading a model, facts about it, --inspect */
#include "ds4_mpi.h"       /* distributed inference over MPI */
#include "ds4_session.h"   /* sessions: evaluation, logits, snapshots, drafts */
#include "ds4_kvstore.h"   /* the disk KV cache and its save policy */
#include "ds4_evaluate.h"  /* checkpointed evaluation (ds4_eval) */
#include "ds4_sample.h"    /* the sampler */
#include "ds4_spec.h"      /* speculative decoding: lookup and MTP drafts */

#endif /* DS4_H */
