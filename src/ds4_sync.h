/*
 * ds4_sync.h -- prefix reuse as one engine call (src/store/sync.c).
 *
 * A front end that serves a new prompt on a session that already holds
 * state (the last prompt and its answer, RAM checkpoints, files of a disk
 * KV store) asks ds4_session_sync_prompt for the longest usable prefix:
 * the live session (by tokens, or by text when its tokens are another BPE
 * split of the prompt's text), a RAM checkpoint inside the common prefix,
 * or a state saved in the disk store; the session is brought there (kept,
 * rewound, restored or reset) and the rest of the prompt is evaluated.
 *
 * The rule is the one a fresh engine gives: when the kept tokens are a
 * prefix of the prompt's own tokenization, the rest of those tokens is
 * evaluated; when they are another split of the same text (the model's own
 * sampled tokens), only the remaining text is tokenized -- and never when
 * the cut falls inside a UTF-8 character or a special token, or the kept
 * tokens spell a marker as plain text where the prompt has the real one.
 *
 * ds4_session_sync (ds4.h) is the tokens-only case of the same rule (no
 * text, no store): a caller that has only ids and no disk cache uses it.
 * ds4_session_sync_begin does the first half only (the session brought to
 * the kept prefix, the tokens still to evaluate returned) for a caller
 * that evaluates several sessions in one batch (ds4-server --parallel).
 */
#ifndef DS4_SYNC_H
#define DS4_SYNC_H

#include "ds4.h"

typedef struct {
    const ds4_tokenizer *tok;   /* the model's tokenizer (required) */
    /* The prompt's text (its tokens are its tokenization with
     * DS4_TOK_SPECIAL).  NULL: the prompt came as token ids, so only a
     * token prefix is reused, and a disk file is found by the ids' text but
     * must hold exactly those ids. */
    const char *text;
    size_t text_len;
    int ctx;                    /* the context size: a plan whose rest would
                                 * fill it is not taken */
    /* Disk store (NULL: none).  A saved state of at least `store_min_tokens`
     * tokens that covers more of the prompt than the live session wins. */
    ds4_kvstore *store;
    int store_min_tokens;
    /* Optional callbacks (ud is theirs):
     *   evict     -- the live session is about to be replaced (it does not
     *                continue into the prompt): a caller with a store saves
     *                it first; only called when `store` is set;
     *   replaced  -- the session was reset or rewound: its state is new;
     *   restored  -- `n` tokens came from the disk store;
     *   log       -- one line of what was skipped and why (no newline). */
    void (*evict)(void *ud);
    void (*replaced)(void *ud);
    void (*restored)(void *ud, int n, size_t text_used, double seconds);
    void (*log)(void *ud, const char *line);
    void *ud;
} ds4_sync_params;

typedef enum {
    DS4_SYNC_NONE = 0,          /* nothing kept: evaluated from the start */
    DS4_SYNC_LIVE,              /* the live session continues into the prompt */
    DS4_SYNC_RAM,               /* rewound to a RAM checkpoint */
    DS4_SYNC_DISK,              /* restored from the disk store */
} ds4_sync_source;

typedef struct {
    ds4_sync_source source;
    int kept;                   /* session tokens kept before the rest */
    int text_hit;               /* DS4_SYNC_LIVE through the text */
    int retok;                  /* the kept tokens split the text differently
                                 * from the prompt's tokens: the rest was
                                 * tokenized on its own */
    ds4_tokens rest;            /* tokens evaluated (or to evaluate) after
                                 * the kept ones; caller frees */
    int evaluated;              /* ds4_session_sync_prompt: tokens evaluated */
} ds4_sync_result;

void ds4_sync_params_default(ds4_sync_params *p);

/* Bring `s` to the longest usable prefix of the prompt `tokens` and put the
 * tokens still to evaluate in r->rest.  Never fails (the worst plan is an
 * empty session and the whole prompt); DS4_ENOMEM when the rest could not
 * be built. */
int ds4_session_sync_begin(ds4_session *s, const int32_t *tokens, int n,
                           const ds4_sync_params *p, ds4_sync_result *r);

/* ds4_session_sync_begin, then ds4_eval of the rest with `ep` (NULL:
 * defaults).  Returns ds4_eval's code; r->evaluated says how far it got. */
int ds4_session_sync_prompt(ds4_session *s, const int32_t *tokens, int n,
                            const ds4_sync_params *p, const ds4_eval_params *ep,
                            ds4_sync_result *r);

void ds4_sync_result_free(ds4_sync_result *r);

/* The checks above, for callers with their own candidates.  A cut at byte
 * `at` of `s` does not fall inside a UTF-8 sequence: */
int ds4_sync_char_boundary(const char *s, size_t n, size_t at);
/* byte `at` falls inside a special token of the tokenization t: */
int ds4_sync_cut_splits_special(const ds4_tokenizer *tok, const ds4_tokens *t, size_t at);
/* a[0..na) and t's tokens covering its first `used` bytes hold the same
 * special tokens at the same byte offsets: */
int ds4_sync_same_specials(const ds4_tokenizer *tok, const int32_t *a, size_t na,
                           const ds4_tokens *t, size_t used);

#endif
