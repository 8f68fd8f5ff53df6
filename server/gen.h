/*
 * gen.h -- the generation of one job (gen.c): an adapter from the
 * library's generation driver (ds4_gen.h: sampling after the prefilled
 * prompt, drafts, the reasoning/content channels, stop sequences, forced
 * text, DSML tool-call parsing) to the job's results and events: the
 * request's options (tool_choice, think budget, parallel_tool_calls:
 * false, the test output, the tool results as a lookup corpus), call ids,
 * the OpenAI logprobs shape, the --trace events.
 *
 * Owns: the job's gen_result while it generates, and the events it sends
 * through job_event (EV_REASONING .. EV_TOOL_END; the caller sends
 * EV_START and EV_FINISH).  Must not: decide reuse, touch the disk cache
 * other than through env->ep (ds4_eval's frontier callback) and env->
 * on_block, or know any API's shape.
 */
#ifndef DS4_SERVER_GEN_H
#define DS4_SERVER_GEN_H

#include "server.h"

typedef struct {
    server_ctx *srv;
    ds4_session *s;
    const ds4_eval_params *ep;   /* evaluation of each sampled token */
    /* A tool-call block closed: calls [first, res->n_calls) of `r` and the
     * block's exact text (for exact replay: tool memory, disk cache). */
    void (*on_block)(void *ud, const gen_result *r, int first, const char *dsml, size_t len);
    void *ud;
} gen_env;

/* Generate at most max_gen tokens for j (its prompt is in env->s), the
 * job owning the session: gen_new + the loop + gen_end.  Returns the
 * finish kind; FIN_ERROR and FIN_TOOL_ERROR set j->res.err. */
finish_kind gen_run(const gen_env *env, job *j, int max_gen);

/* The same loop as a state machine, for a worker that advances several
 * jobs one token per step (--parallel): gen_new, then per step gen_next
 * (choose the next token from the session's logits and send its text)
 * and, once the caller has evaluated that token, gen_evaluated with the
 * evaluation's result; gen_end settles (flushes held text, decides the
 * finish) and frees.  `lookup` = prompt-lookup drafts per pass: only a
 * gen_run evaluates drafts, a stepped job passes 0.  gen_new returns NULL
 * only when out of memory; env must outlive the gen. */
typedef struct gen gen;
gen *gen_new(const gen_env *env, job *j, int max_gen, int lookup);
/* FIN_NONE and *t: evaluate t next; otherwise the loop ended. */
finish_kind gen_next(gen *g, int32_t *t);
/* rc of evaluating the token of the last gen_next: FIN_NONE to go on. */
finish_kind gen_evaluated(gen *g, int rc);
/* fin: what ended the loop; returns the job's finish. */
finish_kind gen_end(gen *g, finish_kind fin);

#endif
