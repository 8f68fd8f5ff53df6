/*
 * reuse.c -- see reuse.h.
 *
 * The session holds the tokens of the last prompt plus what was generated
 * after it.  Their detokenized bytes are exactly the text the tokens stand
 * for (special tokens included), so that text is "what the live session
 * holds".  A new rendered prompt that starts with it keeps all those
 * tokens; when they are also a prefix of the prompt's own tokenization
 * (made by the connection thread) the rest of those tokens is evaluated,
 * otherwise only the rest of the text is tokenized -- a fresh tokenization
 * of the whole prompt would split the kept part differently (the model's
 * own sampled tokens rarely match BPE's choice), which is fine, unless the
 * cut falls inside a special token or the kept tokens spell a marker as
 * plain text where the prompt has the real one.  Otherwise the session is
 * kept if it is a token prefix of the prompt.
 *
 * Otherwise the prompt diverges inside the session: a retried or
 * regenerated request (the same prompt, the session holding it plus the
 * last answer), or the next turn of a thinking-mode chat (its rendering
 * replaces the "<think>" that ended the last prompt).  The RAM checkpoints
 * ds4_eval took at the last prompt's end and a few tokens before it bring
 * the state back to the latest of them within the common prefix; without
 * one the prompt is evaluated from the start (or from the disk cache).
 */
#include <string.h>

#include "reuse.h"

/* A cut inside a UTF-8 sequence would make the suffix start with
 * continuation bytes, which the tokenizer replaces by U+FFFD. */
int reuse_char_boundary(const char *s, size_t n, size_t at) {
    return at >= n || ((unsigned char)s[at] & 0xc0) != 0x80;
}

static int is_special(const ds4_special_ids *sp, int32_t t) {
    return t >= 0 && (t == sp->bos || t == sp->eos || t == sp->user || t == sp->assistant ||
                      t == sp->think || t == sp->think_end || t == sp->dsml ||
                      t == sp->latest_reminder);
}

/* 1 when byte offset `at` of the prompt falls inside a special token of its
 * full tokenization: the live text ends with the first bytes of a marker
 * the model wrote as plain text (say "<｜end"), and tokenizing the suffix on
 * its own would turn the marker into text.  A different BPE split of plain
 * text across the cut is fine; a broken marker is not. */
int reuse_cut_splits_special(const ds4_tokenizer *tok, const ds4_special_ids *sp,
                              const ds4_tokens *t, size_t at) {
    size_t off = 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t len = 0;
        ds4_token_bytes(tok, t->v[i], &len);
        if (off + len > at) return off < at && is_special(sp, t->v[i]);
        off += len;
        if (off == at) return 0;
    }
    return 0;
}

/* 1 when the kept tokens `a` and the prompt's tokens covering its first
 * `used` bytes hold the same special tokens at the same byte offsets.  A
 * kept state whose text spells a marker in plain-text tokens (the model
 * wrote "<｜end▁of▁sentence｜>" as text) matches the prompt byte for byte,
 * but the prompt's own tokens have the real marker there: the model would
 * continue a history that differs from the one the request describes.
 * Other differences of BPE split are harmless and allowed. */
int reuse_same_specials(const ds4_tokenizer *tok, const ds4_special_ids *sp,
                         const int32_t *a, size_t na, const ds4_tokens *b, size_t used) {
    size_t ia = 0, ib = 0, oa = 0, ob = 0, l;
    for (;;) {
        while (ia < na && !is_special(sp, a[ia])) {
            l = 0;
            ds4_token_bytes(tok, a[ia++], &l);
            oa += l;
        }
        while (ib < b->n && ob < used && !is_special(sp, b->v[ib])) {
            l = 0;
            ds4_token_bytes(tok, b->v[ib++], &l);
            ob += l;
        }
        int ha = ia < na, hb = ib < b->n && ob < used;
        if (!ha || !hb) return ha == hb;
        if (a[ia] != b->v[ib] || oa != ob) return 0;
        l = 0;
        ds4_token_bytes(tok, a[ia], &l);
        oa += l;
        ob += l;
        ia++;
        ib++;
    }
}
/* The live text is a prefix of the prompt (see the header comment). */
static int text_hit(server_ctx *srv, const ds4_session *s, const request *rq, ds4_buf *live,
                    reuse_plan *p) {
    const int n_sess = ds4_session_n_tokens(s);
    live->n = 0;
    ds4_detokenize(srv->tok, ds4_session_tokens(s), (size_t)n_sess, live);
    if (live->n > rq->prompt.n || memcmp(live->p, rq->prompt.p, live->n) ||
        !reuse_char_boundary(rq->prompt.p, rq->prompt.n, live->n) ||
        reuse_cut_splits_special(srv->tok, srv->sp, &rq->tokens, live->n))
        return 0;
    const int32_t *st = ds4_session_tokens(s);
    int retok = rq->tokens.n < (size_t)n_sess ||
                memcmp(st, rq->tokens.v, (size_t)n_sess * sizeof(int32_t)) != 0;
    p->suffix.n = 0;
    if (retok) {
        /* a marker spelled as text is not the prompt's history */
        if (!reuse_same_specials(srv->tok, srv->sp, st, (size_t)n_sess, &rq->tokens, live->n))
            return 0;
        ds4_tokenize(srv->tok, rq->prompt.p + live->n, rq->prompt.n - live->n, DS4_TOK_SPECIAL,
                     &p->suffix);
    } else {
        /* the prompt's own tokens continue the session: evaluate those, as
         * a server that never saw the earlier turn would */
        for (size_t i = (size_t)n_sess; i < rq->tokens.n; i++) ds4_tokens_push(&p->suffix, rq->tokens.v[i]);
    }
    if ((size_t)n_sess + p->suffix.n >= (size_t)srv->ctx) { p->suffix.n = 0; return 0; }
    p->retok = retok;
    return 1;
}

void reuse_decide(server_ctx *srv, const ds4_session *s, const request *rq, ds4_buf *live,
                  reuse_plan *p) {
    memset(p, 0, sizeof *p);
    const int n_sess = ds4_session_n_tokens(s);
    if (n_sess == 0) return;
    const int32_t *st = ds4_session_tokens(s);
    if (!rq->raw_ids && ds4_session_logits(s) && text_hit(srv, s, rq, live, p)) {
        p->keep = n_sess;
        p->live_prefix = p->text_hit = 1;
        return;
    }
    size_t lcp = 0;
    while (lcp < (size_t)n_sess && lcp < rq->tokens.n && st[lcp] == rq->tokens.v[lcp]) lcp++;
    if (lcp == (size_t)n_sess && (rq->tokens.n > lcp || ds4_session_logits(s))) {
        /* the session is a token prefix of the prompt */
        p->keep = n_sess;
        p->live_prefix = 1;
    } else {
        /* diverged inside the session: the latest RAM checkpoint within
         * the common prefix, if any */
        p->keep = p->rewind_to = ds4_session_rewind_point(s, (int)lcp);
    }
    p->suffix.n = 0;
    for (size_t i = (size_t)p->keep; p->keep > 0 && i < rq->tokens.n; i++)
        ds4_tokens_push(&p->suffix, rq->tokens.v[i]);
}

void reuse_plan_free(reuse_plan *p) {
    ds4_tokens_free(&p->suffix);
}
