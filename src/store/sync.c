/*
 * sync.c -- ds4_session_sync_prompt / _begin: see ds4_sync.h.
 *
 * Owns the decision of what a session keeps for a new prompt and the moves
 * that get it there (keep, rewind to a RAM checkpoint, restore a disk
 * state, reset).  Uses the engine and the disk store only through their
 * public calls; must not decide when to save (the caller's policy: the
 * `evict` callback and ds4_eval_params.save).
 *
 * The session holds the tokens of the last prompt plus what was generated
 * after it; their detokenized bytes are exactly the text those tokens
 * stand for, special tokens included.  In order of preference:
 *   1. the live text is a prefix of the prompt's text (a text hit): all of
 *      the session is kept; when its tokens are also a prefix of the
 *      prompt's tokens the rest of those is evaluated, otherwise only the
 *      rest of the text is tokenized -- a fresh tokenization of the whole
 *      prompt would split the kept part differently (the model's sampled
 *      tokens rarely match BPE's choice), which is fine unless the cut falls
 *      inside a special token or the kept tokens spell a marker as plain
 *      text where the prompt has the real one;
 *   2. the session is a token prefix of the prompt;
 *   3. the prompt diverges inside the session (a retried request, or the
 *      next turn of a thinking chat whose rendering replaces the "<think>"
 *      that ended the last prompt): the latest RAM checkpoint ds4_eval took
 *      within the common prefix;
 *   then a disk state that covers more than that wins, and with nothing
 *   kept the whole prompt is evaluated from an empty session.
 */
#include <stdio.h>
#include <string.h>

#include "ds4_sync.h"

void ds4_sync_params_default(ds4_sync_params *p) {
    memset(p, 0, sizeof *p);
    p->store_min_tokens = 1;
}

void ds4_sync_result_free(ds4_sync_result *r) {
    if (r) ds4_tokens_free(&r->rest);
}

static int is_special(const ds4_special_ids *sp, int32_t t) {
    return t >= 0 && (t == sp->bos || t == sp->eos || t == sp->user || t == sp->assistant ||
                      t == sp->think || t == sp->think_end || t == sp->dsml ||
                      t == sp->latest_reminder);
}

/* A cut inside a UTF-8 sequence would make the rest start with
 * continuation bytes, which the tokenizer replaces by U+FFFD. */
int ds4_sync_char_boundary(const char *s, size_t n, size_t at) {
    return at >= n || ((unsigned char)s[at] & 0xc0) != 0x80;
}

/* The live text ends with the first bytes of a marker the model wrote as
 * plain text (say "<｜end"): tokenizing the rest alone would turn the
 * prompt's real marker into text.  Another BPE split of plain text across
 * the cut is fine; a broken marker is not. */
int ds4_sync_cut_splits_special(const ds4_tokenizer *tok, const ds4_tokens *t, size_t at) {
    const ds4_special_ids *sp = ds4_tok_special(tok);
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

/* A kept state whose text spells a marker in plain-text tokens matches the
 * prompt byte for byte, but the prompt's own tokens have the real marker
 * there: the model would continue a history other than the one the prompt
 * describes. */
int ds4_sync_same_specials(const ds4_tokenizer *tok, const int32_t *a, size_t na,
                           const ds4_tokens *b, size_t used) {
    const ds4_special_ids *sp = ds4_tok_special(tok);
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

static void say(const ds4_sync_params *p, const char *line) {
    if (p->log) p->log(p->ud, line);
}

/* 1: the live text is a prefix of the prompt's (case 1 of the header). */
static int text_hit(const ds4_session *s, const ds4_tokens *pt, const ds4_sync_params *p,
                    ds4_sync_result *r) {
    const int n_sess = ds4_session_n_tokens(s);
    const int32_t *st = ds4_session_tokens(s);
    ds4_buf live = { 0 };
    int ok = 0;
    ds4_detokenize(p->tok, st, (size_t)n_sess, &live);
    if (ds4_buf_failed(&live) || live.n > p->text_len || memcmp(live.p, p->text, live.n) ||
        !ds4_sync_char_boundary(p->text, p->text_len, live.n) ||
        ds4_sync_cut_splits_special(p->tok, pt, live.n))
        goto out;
    int retok = pt->n < (size_t)n_sess || memcmp(st, pt->v, (size_t)n_sess * sizeof *st) != 0;
    r->rest.n = 0;
    if (retok) {
        if (!ds4_sync_same_specials(p->tok, st, (size_t)n_sess, pt, live.n)) goto out;
        ds4_tokenize(p->tok, p->text + live.n, p->text_len - live.n, DS4_TOK_SPECIAL, &r->rest);
    } else {
        /* the prompt's own tokens continue the session: evaluate those, as
         * an engine that never saw the earlier turn would */
        for (size_t i = (size_t)n_sess; i < pt->n; i++) ds4_tokens_push(&r->rest, pt->v[i]);
    }
    if (p->ctx > 0 && (size_t)n_sess + r->rest.n >= (size_t)p->ctx) { r->rest.n = 0; goto out; }
    r->retok = retok;
    ok = 1;
out:
    ds4_buf_free(&live);
    return ok;
}

/* The live session and its RAM checkpoints: fills r (source LIVE or RAM
 * with kept > 0, or NONE); *rewind_to > 0: go back to that checkpoint. */
static void decide_live(const ds4_session *s, const ds4_tokens *pt, const ds4_sync_params *p,
                        ds4_sync_result *r, int *rewind_to) {
    const int n_sess = ds4_session_n_tokens(s);
    *rewind_to = 0;
    if (n_sess == 0) return;
    const int32_t *st = ds4_session_tokens(s);
    if (p->text && ds4_session_logits(s) && text_hit(s, pt, p, r)) {
        r->source = DS4_SYNC_LIVE;
        r->kept = n_sess;
        r->text_hit = 1;
        return;
    }
    size_t lcp = 0;
    while (lcp < (size_t)n_sess && lcp < pt->n && st[lcp] == pt->v[lcp]) lcp++;
    if (lcp == (size_t)n_sess && (pt->n > lcp || ds4_session_logits(s))) {
        r->source = DS4_SYNC_LIVE;
        r->kept = n_sess;
    } else {
        r->kept = *rewind_to = ds4_session_rewind_point(s, (int)lcp);
        if (r->kept > 0) r->source = DS4_SYNC_RAM;
    }
    r->rest.n = 0;
    for (size_t i = (size_t)r->kept; r->kept > 0 && i < pt->n; i++)
        ds4_tokens_push(&r->rest, pt->v[i]);
}

/* The disk store's veto before it touches the session (see the header):
 * the prompt's tokens continue the candidate (mode 1), or -- for the same
 * text split into other tokens -- the rest is tokenized alone (mode 2). */
typedef struct {
    const ds4_sync_params *p;
    const ds4_tokens *pt;
    const char *text;
    size_t len;
    ds4_tokens *todo;
    int mode;
} disk_accept;

static int accept_cb(void *ud, const int32_t *tok, int n, size_t used) {
    disk_accept *a = ud;
    const ds4_sync_params *p = a->p;
    a->mode = 0;
    if (a->pt->n >= (size_t)n && !memcmp(tok, a->pt->v, (size_t)n * sizeof *tok)) {
        a->mode = 1;
        return 1;
    }
    if (!p->text || !ds4_sync_char_boundary(a->text, a->len, used) ||
        ds4_sync_cut_splits_special(p->tok, a->pt, used) ||
        !ds4_sync_same_specials(p->tok, tok, (size_t)n, a->pt, used)) {
        char line[200];
        snprintf(line, sizeof line, "disk KV cache: a %d-token state matches the text but this "
                 "prompt's tokens cannot continue it (a marker cut or spelled as text); skipped", n);
        say(p, line);
        return 0;
    }
    a->todo->n = 0;
    ds4_tokenize(p->tok, a->text + used, a->len - used, DS4_TOK_SPECIAL, a->todo);
    if (p->ctx > 0 && (size_t)n + a->todo->n >= (size_t)p->ctx) return 0;
    a->mode = 2;
    return 1;
}

/* Restore the longest saved state that covers more than `better_than`
 * tokens; its count (0 = miss, the session untouched), the rest in *todo. */
static int disk_lookup(ds4_session *s, const ds4_tokens *pt, const ds4_sync_params *p,
                       int better_than, ds4_tokens *todo, int *retok) {
    ds4_buf ids_text = { 0 };
    const char *text = p->text;
    size_t len = p->text_len, used = 0;
    if (!text) {
        /* token ids: their text finds the file; the tokens must then match */
        ds4_detokenize(p->tok, pt->v, pt->n, &ids_text);
        text = ids_text.p;
        len = ids_text.n;
    }
    *retok = 0;
    todo->n = 0;
    /* the store times its own loads (ds4_kvstore_stats.load_seconds) */
    ds4_kvstore_stats st0, st1;
    ds4_kvstore_get_stats(p->store, &st0);
    disk_accept acc = { p, pt, text, len, todo, 0 };
    int got = text && len && !ds4_buf_failed(&ids_text)
                  ? ds4_kvstore_restore_if(p->store, s, text, len, p->store_min_tokens,
                                           better_than, accept_cb, &acc, &used)
                  : 0;
    ds4_buf_free(&ids_text);
    if (got <= 0) { todo->n = 0; return 0; }
    if (acc.mode == 1) {
        todo->n = 0;
        ds4_tokens_reserve(todo, pt->n - (size_t)got + 1);
        for (size_t i = (size_t)got; i < pt->n; i++) ds4_tokens_push(todo, pt->v[i]);
    } else {
        *retok = 1;
    }
    ds4_kvstore_get_stats(p->store, &st1);
    if (p->restored) p->restored(p->ud, got, used, st1.load_seconds - st0.load_seconds);
    return got;
}

int ds4_session_sync_begin(ds4_session *s, const int32_t *tokens, int n,
                           const ds4_sync_params *p, ds4_sync_result *r) {
    memset(r, 0, sizeof *r);
    /* a read-only view of the prompt's tokens for the helpers above */
    const ds4_tokens pt = { (int32_t *)tokens, (size_t)(n > 0 ? n : 0), (size_t)(n > 0 ? n : 0), 0 };
    const int n_sess = ds4_session_n_tokens(s);
    int rewind_to = 0;
    decide_live(s, &pt, p, r, &rewind_to);
    if (p->store) {
        /* a prompt that does not continue the live session replaces it:
         * the caller saves it first; then a saved state that covers more
         * of the prompt than what is kept wins */
        if (r->source != DS4_SYNC_LIVE && n_sess > 0 && p->evict) p->evict(p->ud);
        ds4_tokens todo = { 0 };
        int retok = 0;
        int got = disk_lookup(s, &pt, p, r->kept, &todo, &retok);
        if (got > 0) {
            ds4_tokens_free(&r->rest);
            r->rest = todo;
            r->kept = got;
            r->source = DS4_SYNC_DISK;
            r->text_hit = 0;
            r->retok = retok;
            rewind_to = 0;
        } else {
            ds4_tokens_free(&todo);
        }
    }
    if (rewind_to > 0) {
        if (ds4_session_rewind(s, rewind_to) == DS4_OK) {
            if (p->replaced) p->replaced(p->ud);
        } else {
            r->kept = 0;
            r->source = DS4_SYNC_NONE;
        }
    }
    if (r->kept == 0) {
        /* nothing kept: the whole prompt from an empty session */
        ds4_session_reset(s);
        if (p->replaced) p->replaced(p->ud);
        r->source = DS4_SYNC_NONE;
        r->text_hit = r->retok = 0;
        r->rest.n = 0;
        ds4_tokens_reserve(&r->rest, pt.n + 1);
        for (size_t i = 0; i < pt.n; i++) ds4_tokens_push(&r->rest, pt.v[i]);
    }
    return ds4_tokens_failed(&r->rest) ? DS4_ENOMEM : DS4_OK;
}

int ds4_session_sync_prompt(ds4_session *s, const int32_t *tokens, int n,
                            const ds4_sync_params *p, const ds4_eval_params *ep,
                            ds4_sync_result *r) {
    int rc = ds4_session_sync_begin(s, tokens, n, p, r);
    if (rc) return rc;
    ds4_eval_params def;
    if (!ep) {
        ds4_eval_params_default(&def);
        ep = &def;
    }
    const int before = ds4_session_n_tokens(s);
    rc = ds4_eval(s, r->rest.v, (int)r->rest.n, ep);
    r->evaluated = ds4_session_n_tokens(s) - before;
    if (r->evaluated < 0) r->evaluated = 0;
    return rc;
}
