/*
 * ds4_gen.h -- the generation driver (src/gen/generate.c): the one decode
 * loop every front end runs after a prompt is in the session.
 *
 * A ds4_gen chooses tokens (the caller's sampler, DSML syntax greedily,
 * forced text, forced output for tests and scripts, the think budget),
 * evaluates them (ds4_gen_run, with speculative decoding: prompt lookup
 * with a second corpus, MTP drafts, sampled MTP drafts judged by the
 * speculative-sampling rule -- docs/SPEC.md), and splits the text into
 * channels: reasoning, content through the stop-sequence matcher, tool
 * calls through the streaming DSML parser (GLM's call parser for a GLM
 * model: ds4_model_format), logprobs of content tokens.
 * ds4-server, ds4 (cli/chat.c) and ds4-agent are adapters over it.
 *
 * Where the front ends' loops differed, each behaviour is an option below
 * (docs/NOTES.md, "One generation driver"): which tokens are evaluated at
 * the end, positions kept free at the context end, the draft back-off,
 * the order of the draft caps, what is settled after a cancel.
 *
 * Two ways to drive it:
 *   - ds4_gen_run: the driver evaluates each token itself (with drafts);
 *   - the step API, for a caller that evaluates several sessions in one
 *     batch (ds4-server --parallel): ds4_gen_next gives the token to
 *     evaluate, the caller evaluates exactly that one token and reports
 *     with ds4_gen_evaluated; ds4_gen_end settles.  No drafts there.
 * Either way ds4_gen_free releases it.  One thread at a time, like the
 * session it runs on.
 */
#ifndef DS4_GEN_H
#define DS4_GEN_H

#include "ds4.h"
#include "ds4_logprob.h"   /* log-softmax, top-K, the --dump-logprobs step JSON */

typedef struct ds4_gen ds4_gen;

/* Why a generation ended. */
typedef enum {
    DS4_GEN_RUNNING = 0,   /* not ended (step API: evaluate the token) */
    DS4_GEN_EOS,           /* the model ended its turn (or the forced output did) */
    DS4_GEN_LENGTH,        /* max_tokens */
    DS4_GEN_CONTEXT,       /* the context is full (or ctx_reserve reached) */
    DS4_GEN_STOP_SEQ,      /* a stop sequence matched (ds4_gen_stop_index) */
    DS4_GEN_TOOLS,         /* a complete tool-call block was written */
    DS4_GEN_TOOL_ERROR,    /* malformed DSML (the reason went to dsml_error) */
    DS4_GEN_CANCEL,        /* the cancel callback said so */
    DS4_GEN_ERROR,         /* ds4_gen_error says what */
} ds4_gen_finish;

/* What a DS4_GEN_ERROR was. */
typedef enum {
    DS4_GEN_ERR_NONE = 0,
    DS4_GEN_ERR_NOMEM,     /* out of memory */
    DS4_GEN_ERR_NO_LOGITS, /* nothing evaluated yet: no distribution to sample */
    DS4_GEN_ERR_EVAL,      /* evaluating a token failed (rc) */
    DS4_GEN_ERR_ROLLBACK,  /* committing a staged pass failed (rc) */
} ds4_gen_err;

typedef struct {
    int32_t id;
    double logprob;        /* natural log of the softmax probability */
} ds4_gen_lp;

typedef struct {
    ds4_sampler *smp;      /* the caller's (kept across turns); NULL: greedy */
    int max_tokens;        /* tokens to emit at most (<= 0: none) */
    int reasoning;         /* the prompt opened <think>: start in reasoning */
    int think_budget;      /* force </think> after this many reasoning tokens (0: none) */
    const char *const *stop;   /* stop sequences on the content text */
    int n_stop;
    int parse_tools;       /* content through the tool-call parser of the
                              model's format (ds4_model_format): DSML, or
                              GLM's <tool_call> XML */
    const char *tools_json;   /* GLM: the request's tools array, whose
                                 schemas type the call values (NULL: none;
                                 not JSON: ds4_gen_new fails) */
    int hold_calls;        /* release a call only once it closed, whole (the
                              server: a client never sees half a call); 0:
                              begin and argument deltas as they are parsed */
    int single_call;       /* close the block after its first call */
    int block_error_text;  /* malformed DSML: the text from the first
                              unclosed call on goes to `content` */
    const char *forced_prefix;   /* text forced at the start of content */
    /* forced output: exactly these tokens, then EOS (the server's
     * --test-mode, the agent's --script); disables forced_prefix,
     * single_call and the think budget */
    int forced_output;
    const int32_t *output;
    int n_output;
    int logprobs;          /* the logprob callback for content tokens */
    int top_logprobs;      /* alternatives per token (0..20) */
    int eos_is_text;       /* EOS is an ordinary token (raw diagnostics) */
    /* speculative decoding (ds4_gen_run only) */
    int lookup;            /* prompt-lookup drafts per pass (0: off) */
    int mtp_draft;         /* MTP drafts per pass when the lookup finds none */
    const char *const *corpus;   /* texts whose numbered lines are a second
                                    lookup source (tool results), newest last */
    const size_t *corpus_lens;
    int n_corpus;
    size_t corpus_bytes;   /* of the newest, at most (0: 256 KiB) */
    int backoff_max;       /* after passes that kept nothing, skip drafting
                              1, 2, 4 .. backoff_max tokens (0: never) */
    int draft_spare;       /* drafts stop this many tokens before max_tokens */
    int late_caps;         /* ds4's order: the pass capacity and context caps
                              cut the drawn drafts (after the disk frontier
                              test), and a drafting attempt is always a pass */
    /* the end of the loop */
    int eval_all;          /* every emitted token is evaluated, the last too
                              (the session holds the whole output); 0: the
                              token the loop ends at is not (the server) */
    int ctx_reserve;       /* > 0: stop (CONTEXT) before choosing when the
                              session reaches ctx - ctx_reserve; drafts stay
                              below it.  0: up to the end (DS4_ECTX). */
    int cancel_first;      /* test cancel (and the reserve) before max_tokens */
    int finish_block_on_cut;   /* close the DSML parser (unterminated block:
                                  an error) at LENGTH/CONTEXT too, not only EOS */
    int settle_on_abort;   /* flush held text after CANCEL/ERROR too */
    const ds4_eval_params *ep;   /* plain evaluations (disk frontiers); NULL: plain */
} ds4_gen_opts;

void ds4_gen_opts_default(ds4_gen_opts *o);

/* Callbacks; any may be NULL.  Text is never split inside a UTF-8
 * character. */
typedef struct {
    void *ud;
    void (*reasoning)(void *ud, const char *s, size_t n);
    void (*reasoning_end)(void *ud);          /* </think> was chosen */
    void (*content)(void *ud, const char *s, size_t n);
    void (*call_begin)(void *ud, int index, const char *name, size_t n);
    void (*call_args)(void *ud, int index, const char *s, size_t n);  /* "{}" when none */
    void (*call_end)(void *ud, int index);
    void (*tools_done)(void *ud, const char *dsml, size_t n);   /* the block closed */
    void (*dsml_error)(void *ud, const char *reason, size_t n);
    void (*dsml_event)(void *ud, const ds4_dsml_event *ev);     /* every parser event */
    void (*after_block)(void *ud, const char *s, size_t n);     /* bytes after a block ended */
    /* a content token and its distribution (opts.logprobs) */
    void (*logprob)(void *ud, int32_t t, double logprob, const ds4_gen_lp *top, int k);
    /* every sampled token, with the logits it was drawn from */
    void (*token)(void *ud, const float *logits, int32_t t);
    int (*cancel)(void *ud);                  /* nonzero: stop (CANCEL) */
} ds4_gen_cb;

/* NULL only when out of memory (or a GLM model's tools_json is not
 * JSON).  m: the session's model; the options'
 * strings and arrays must outlive the gen. */
ds4_gen *ds4_gen_new(ds4_session *s, const ds4_model *m, const ds4_gen_opts *o, const ds4_gen_cb *cb);
void ds4_gen_free(ds4_gen *g);

/* Generate until the end, evaluating every token; settles (ds4_gen_end). */
ds4_gen_finish ds4_gen_run(ds4_gen *g);
/* Step API.  RUNNING and *t: evaluate t (alone) next, then report. */
ds4_gen_finish ds4_gen_next(ds4_gen *g, int32_t *t);
ds4_gen_finish ds4_gen_evaluated(ds4_gen *g, int rc);
/* After the last step: commit a staged pass, flush what the detokenizer,
 * the DSML parser and the stop matcher hold, and decide the finish. */
ds4_gen_finish ds4_gen_end(ds4_gen *g, ds4_gen_finish fin);

/* A callback may end the generation after the current token. */
void ds4_gen_stop(ds4_gen *g);

int ds4_gen_n_tokens(const ds4_gen *g);          /* emitted tokens */
int ds4_gen_reasoning_tokens(const ds4_gen *g);
int ds4_gen_in_reasoning(const ds4_gen *g);      /* still inside <think> */
int ds4_gen_stop_index(const ds4_gen *g);        /* the stop sequence that matched */
const ds4_spec_stats *ds4_gen_spec_stats(const ds4_gen *g);
/* The DSML block's text so far (NULL, 0 without one). */
const char *ds4_gen_block_text(const ds4_gen *g, size_t *len);
/* DS4_GEN_ERR_* and the engine's rc; *msg a sentence. */
ds4_gen_err ds4_gen_error(const ds4_gen *g, int *rc, const char **msg);

#endif
