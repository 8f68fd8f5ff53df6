/*
 * chat.h -- the conversation driver behind the `ds4` CLI: one model, one
 * live session, turns appended to the session so earlier turns are never
 * evaluated twice.
 */
#ifndef DS4_CLI_CHAT_H
#define DS4_CLI_CHAT_H

#include <signal.h>
#include "ds4.h"

typedef struct {
    const char *model;
    ds4_model_params mparams;   /* threads, SSD streaming, --mtp FILE */
    int ctx, chunk;
    int ctx_explicit;       /* --ctx was given: warn if above the trained one */
    int no_qat, decode_only, quiet;
    int lookup;             /* prompt-lookup draft tokens per step (0 = off) */
    int mtp_draft;          /* MTP draft tokens per step (0 = off) */
    ds4_sampler_params sp;
    ds4_think think;
    const char *sys;
    int n_predict;
    volatile sig_atomic_t *interrupt;
    volatile sig_atomic_t *terminate;   /* SIGTERM: save and leave */
    /* disk KV cache (kv_dir NULL = off) */
    const char *kv_dir;
    uint64_t kv_space_mb;
    int kv_allow_variants;
    ds4_kv_policy kv_policy;
    /* Called for every sampled token (EOS included) with the logits it was
     * drawn from, before it is evaluated: --dump-logprobs.  NULL = none. */
    void (*on_token)(void *ud, const float *logits, int32_t id);
    void *token_ud;
    /* --steer: applied to every session the chat creates (NULL = off) */
    const float *steer;
    float steer_scale;
    int steer_l0, steer_l1;
} chat_opts;

typedef struct {
    chat_opts o;
    ds4_model *m;
    const ds4_tokenizer *tok;
    const ds4_special_ids *sp;
    ds4_session *s;
    ds4_sampler *smp;
    int turns;              /* completed turns in the live session */
    ds4_kvstore *kv;
    int tty_out, tty_err;
    uint64_t ctx_train;     /* the model's trained context (0 = unknown) */
    struct progress_ud *progress;   /* the prefill bar on screen, if any */
    ds4_expert_cache_stats xc0;     /* --ssd-streaming counters at the last summary */
    int pages_checked;              /* the weights' pages were looked at (once) */
} chat_app;

int chat_open(chat_app *a, const chat_opts *o);
void chat_close(chat_app *a);
/* One user turn: render/append, prefill, generate and print the answer. */
int chat_turn(chat_app *a, const char *text, size_t len);
/* Raw ids (diagnostics): optional split point, captures, then n_gen tokens. */
int chat_run_tokens(chat_app *a, const int32_t *ids, int n, int split, int n_gen,
                    ds4_buf *logits, ds4_buf *hidden);
int chat_interactive(chat_app *a);
/* The interactive commands and input keys (shared by /help and --help). */
void chat_print_commands(FILE *f);

#endif
