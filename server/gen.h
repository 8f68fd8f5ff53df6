/*
 * gen.h -- the generation loop of one job (gen.c): sampling after the
 * prefilled prompt, the reasoning/content channels, stop sequences, forced
 * text (tool_choice, think budget, parallel_tool_calls: false), the test
 * output, and DSML tool-call parsing with greedy syntax.
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

/* Generate at most max_gen tokens for j (its prompt is in env->s).
 * Returns the finish kind; FIN_ERROR and FIN_TOOL_ERROR set j->res.err. */
finish_kind gen_run(const gen_env *env, job *j, int max_gen);

#endif
