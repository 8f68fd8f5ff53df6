/*
 * reuse.h -- what of the live session a new prompt keeps (reuse.c).
 *
 * Owns: the decision (no change to the session): the live session's text
 * is a prefix of the prompt (a text hit, possibly with a different BPE
 * split), its tokens are a prefix of the prompt's, or the prompt diverges
 * inside it and a RAM checkpoint (ds4_session_checkpoint: the end of the
 * last prompt and a few tokens before it) lies within the common prefix.
 * Also the token/text checks the disk cache's candidates go through.
 * Must not: evaluate, restore or save (worker.c and kvdisk.c do).
 */
#ifndef DS4_SERVER_REUSE_H
#define DS4_SERVER_REUSE_H

#include "server.h"

typedef struct {
    int keep;            /* session tokens kept (0 = start over) */
    int rewind_to;       /* > 0: first go back to the RAM checkpoint of this count */
    int live_prefix;     /* the prompt continues the whole live session */
    int text_hit;        /* kept through the text (its suffix was tokenized alone) */
    int retok;           /* ... with a BPE split that differs from the prompt's */
    ds4_tokens suffix;   /* tokens to evaluate after the kept ones */
} reuse_plan;

/* `live` is scratch for the detokenized session. */
void reuse_decide(server_ctx *srv, const ds4_session *s, const request *rq, ds4_buf *live,
                  reuse_plan *p);
void reuse_plan_free(reuse_plan *p);

/* A cut at byte `at` does not fall inside a UTF-8 sequence. */
int reuse_char_boundary(const char *s, size_t n, size_t at);
/* Byte offset `at` falls inside a special token of the tokenization t. */
int reuse_cut_splits_special(const ds4_tokenizer *tok, const ds4_special_ids *sp,
                             const ds4_tokens *t, size_t at);
/* Tokens a[0..na) and b's tokens covering its first `used` bytes hold the
 * same special tokens at the same byte offsets. */
int reuse_same_specials(const ds4_tokenizer *tok, const ds4_special_ids *sp,
                        const int32_t *a, size_t na, const ds4_tokens *b, size_t used);

#endif
