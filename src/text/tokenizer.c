/*
 * tokenizer.c -- the DeepSeek V3/V4 tokenizer: byte-level BPE loaded from
 * GGUF metadata, the three-regex pre-tokenizer, added-token matching,
 * decoding and incremental (streaming) detokenization.
 *
 * Owns: the "Tokenizer" section of ds4.h and tokenizer_internal.h.
 * Must not: parse GGUF itself (gguf.c does), know about the chat format
 * (render.c decides what text to tokenize), or keep mutable state in the
 * tokenizer after loading -- a loaded tokenizer is read-only, so any number
 * of threads may tokenize with it at once; all scratch lives in a per-call
 * work struct.
 *
 * What "correct" means: the output of Hugging Face `tokenizers` on DeepSeek
 * V3's tokenizer.json (plus the V4 added tokens), checked against
 * ../shared/golden/tokenizer.  The pipeline is
 *   1. invalid UTF-8 -> U+FFFD per maximal invalid subpart (WHATWG);
 *   2. DS4_TOK_SPECIAL: split out added tokens, leftmost-longest match;
 *   3. pre-tokenize every remaining segment with three Split(Isolated)
 *      regexes applied in sequence (each one only sees the pieces the
 *      previous one produced, so matches never cross those boundaries):
 *        R1  \p{N}{1,3}
 *        R2  [一-龥぀-ゟ゠-ヿ]+            (U+4E00..9FA5, U+3040..30FF)
 *        R3  [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
 *            |[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *            | ?[\p{P}\p{S}]+[\r\n]*
 *            |\s*[\r\n]+
 *            |\s+(?!\S)
 *            |\s+
 *      "Isolated" keeps both the matches and the unmatched gaps between
 *      them as pieces.  The regexes are not interpreted: R3 is hand-compiled
 *      below into match_r3() with the same leftmost-first, greedy,
 *      backtracking outcome Oniguruma produces;
 *      A vocabulary whose tokenizer.ggml.pre is "glm4" (or "chatglm-bpe")
 *      uses GLM's single regex instead (llama.cpp's CHATGLM4 set):
 *        G   (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
 *            |[^\r\n\p{L}\p{N}]?\p{L}+
 *            |\p{N}{1,3}
 *            | ?[^\s\p{L}\p{N}]+[\r\n]*
 *            |\s*[\r\n]+
 *            |\s+(?!\S)
 *            |\s+
 *      hand-compiled into match_glm4(); every other value (DeepSeek's
 *      files say "joyai-llm" or "deepseek-v3") keeps the three regexes;
 *   4. GPT-2 byte -> unicode mapping (implicit here: we work on bytes and
 *      map the vocabulary's spellings back to bytes at load time);
 *   5. BPE: repeatedly merge the adjacent pair of lowest merge rank
 *      (leftmost on ties), as HF's BPE::merge_all does.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "gguf/gguf.h"
#include "text/tokenizer_internal.h"
#include "text/unicode.h"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

/* Fast non-cryptographic hash of a short byte string (pre-tokens, token
 * texts): 8 bytes per step, good enough avalanche for open addressing. */
static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n) memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return h;
}

static uint64_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ull;
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return key;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* GPT-2 bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬',
 * '®'..'ÿ') stand for themselves, the other 68 bytes are mapped, in byte
 * order, to U+0100.. .  Vocabulary spellings use this alphabet; we store
 * tokens as raw bytes, so only the inverse is needed (code point -> byte). */
#define GPT2_MAXCP 0x144
static int gpt2_byte_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}
static void gpt2_inverse(int16_t inv[GPT2_MAXCP]) {
    for (int i = 0; i < GPT2_MAXCP; i++) inv[i] = -1;
    unsigned extra = 0;
    for (unsigned b = 0; b < 256; b++) {
        if (gpt2_byte_printable(b)) inv[b] = (int16_t)b;
        else inv[256 + extra++] = (int16_t)b;
    }
}

/* Decode a GPT-2-alphabet spelling into bytes; out must hold len bytes.
 * Returns the byte count or -1 if a character is outside the alphabet. */
static long gpt2_decode(const int16_t *inv, const unsigned char *s, size_t len,
                        unsigned char *out) {
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        int ok;
        i += ds4_utf8_next(s + i, len - i, &cp, &ok);
        if (!ok || cp >= GPT2_MAXCP || inv[cp] < 0) return -1;
        out[o++] = (unsigned char)inv[cp];
    }
    return (long)o;
}

/* ------------------------------------------------------------------------ */
/* The tokenizer                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint64_t key;      /* left id << 32 | right id; MERGE_EMPTY when free */
    int32_t rank;
    int32_t result;
} merge_ent;
#define MERGE_EMPTY UINT64_MAX

/* Trie of added-token texts, for leftmost-longest matching.  Children are
 * sibling lists (the trie is small and narrow below the first byte); the
 * first byte is indexed directly. */
typedef struct {
    int32_t child, sibling;
    int32_t id;        /* token ending here, or -1 */
    uint8_t byte;
} trie_node;

struct ds4_tokenizer {
    int32_t n_vocab;
    unsigned char *arena;     /* bytes of every token, back to back */
    uint32_t *off;            /* n_vocab + 1 offsets into arena */
    uint8_t *added;           /* 1 for added tokens (type 3 control / 4 user-defined) */

    int32_t *vmap;            /* bytes -> id for BPE tokens (open addressing, -1 free) */
    size_t vmap_mask;
    int32_t *amap;            /* text -> id for added tokens */
    size_t amap_mask;

    merge_ent *mmap;          /* (left, right) -> rank, result */
    size_t mmap_mask;
    size_t n_merges;

    int32_t byte_id[256];     /* the single-byte token of each byte */

    trie_node *trie;
    size_t n_trie, cap_trie;
    int32_t trie_root[256];   /* node of each first byte, -1 if none */
    size_t n_added;

    ds4_special_ids sp;
    int pre;                  /* DS4_PRE_*, from tokenizer.ggml.pre */
};

static const unsigned char *tok_ptr(const ds4_tokenizer *t, int32_t id, size_t *len) {
    *len = t->off[id + 1] - t->off[id];
    return t->arena + t->off[id];
}

/* Find `s` in an id map keyed by token bytes. */
static int32_t map_find(const ds4_tokenizer *t, const int32_t *map, size_t mask,
                        const unsigned char *s, size_t len) {
    if (!map) return -1;
    size_t i = (size_t)hash_bytes(s, len) & mask;
    for (;;) {
        int32_t id = map[i];
        if (id < 0) return -1;
        size_t l;
        const unsigned char *p = tok_ptr(t, id, &l);
        if (l == len && memcmp(p, s, len) == 0) return id;
        i = (i + 1) & mask;
    }
}

/* Insert id (keyed by its bytes) unless the bytes are already present: the
 * first (lowest) id wins, as it does in every loader we know of. */
static void map_insert(ds4_tokenizer *t, int32_t *map, size_t mask, int32_t id) {
    size_t len;
    const unsigned char *s = tok_ptr(t, id, &len);
    size_t i = (size_t)hash_bytes(s, len) & mask;
    for (;;) {
        int32_t o = map[i];
        if (o < 0) { map[i] = id; return; }
        size_t l;
        const unsigned char *p = tok_ptr(t, o, &l);
        if (l == len && memcmp(p, s, len) == 0) return;
        i = (i + 1) & mask;
    }
}

static const merge_ent *merge_find(const ds4_tokenizer *t, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    size_t i = (size_t)hash_pair(key) & t->mmap_mask;
    for (;;) {
        const merge_ent *e = &t->mmap[i];
        if (e->key == key) return e;
        if (e->key == MERGE_EMPTY) return NULL;
        i = (i + 1) & t->mmap_mask;
    }
}

static int trie_new_node(ds4_tokenizer *t, uint8_t byte) {
    if (t->n_trie == t->cap_trie) {
        size_t nc = t->cap_trie ? t->cap_trie * 2 : 1024;
        trie_node *n = realloc(t->trie, nc * sizeof *n);
        if (!n) return -1;
        t->trie = n;
        t->cap_trie = nc;
    }
    trie_node *n = &t->trie[t->n_trie];
    n->child = n->sibling = -1;
    n->id = -1;
    n->byte = byte;
    return (int)t->n_trie++;
}

static int trie_add(ds4_tokenizer *t, int32_t id) {
    size_t len;
    const unsigned char *s = tok_ptr(t, id, &len);
    if (len == 0) return 0;
    int32_t node = t->trie_root[s[0]];
    if (node < 0) {
        if ((node = trie_new_node(t, s[0])) < 0) return -1;
        t->trie_root[s[0]] = node;
    }
    for (size_t i = 1; i < len; i++) {
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != s[i]) c = t->trie[c].sibling;
        if (c < 0) {
            if ((c = trie_new_node(t, s[i])) < 0) return -1;
            t->trie[c].sibling = t->trie[node].child;
            t->trie[node].child = c;
        }
        node = c;
    }
    if (t->trie[node].id < 0) t->trie[node].id = id;   /* first id wins */
    return 0;
}

/* Longest added token starting at s[0]; returns its length (0 if none). */
static size_t trie_match(const ds4_tokenizer *t, const unsigned char *s, size_t n,
                         int32_t *id) {
    int32_t node = t->trie_root[s[0]];
    size_t best = 0;
    for (size_t i = 1;; i++) {
        if (t->trie[node].id >= 0) { best = i; *id = t->trie[node].id; }
        if (i >= n) break;
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != s[i]) c = t->trie[c].sibling;
        if (c < 0) break;
        node = c;
    }
    return best;
}

void ds4_tokenizer_free(ds4_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->added);
    free(t->vmap);
    free(t->amap);
    free(t->mmap);
    free(t->trie);
    free(t);
}

static int kv_is_array_of(const gguf_kv *kv, int str) {
    if (!kv || kv->type != GGUF_ARRAY) return 0;
    uint32_t et = kv->v.arr.type;
    if (str) return et == GGUF_STRING;
    return et == GGUF_U8 || et == GGUF_I8 || et == GGUF_U16 || et == GGUF_I16 ||
           et == GGUF_U32 || et == GGUF_I32 || et == GGUF_U64 || et == GGUF_I64;
}

#define TOK_MAX_VOCAB (1 << 28)

ds4_tokenizer *ds4_tokenizer_from_gguf(const struct gguf_file *f, char **err) {
    const char *path = f->path ? f->path : "(gguf)";
    if (err) *err = NULL;

    const gguf_kv *kmodel = gguf_find(f, "tokenizer.ggml.model");
    if (kmodel) {
        if (kmodel->type != GGUF_STRING) {
            ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.model is not a string", path);
            return NULL;
        }
        const gguf_str *m = &kmodel->v.s;
        if (!(m->len == 4 && memcmp(m->p, "gpt2", 4) == 0)) {
            ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.model is '%s'; only 'gpt2' "
                    "(byte-level BPE) is supported", path,
                    gguf_esc(m->p, m->len > 64 ? 64 : m->len).s);
            return NULL;
        }
    }
    const gguf_kv *ktok = gguf_find(f, "tokenizer.ggml.tokens");
    const gguf_kv *ktype = gguf_find(f, "tokenizer.ggml.token_type");
    const gguf_kv *kmerge = gguf_find(f, "tokenizer.ggml.merges");
    if (!ktok) { ds4_set_err(err, DS4_EFORMAT, "%s: no tokenizer.ggml.tokens (not a tokenizer GGUF?)", path); return NULL; }
    if (!kv_is_array_of(ktok, 1)) { ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.tokens is not an array of strings", path); return NULL; }
    if (!ktype) { ds4_set_err(err, DS4_EFORMAT, "%s: no tokenizer.ggml.token_type", path); return NULL; }
    if (!kv_is_array_of(ktype, 0)) { ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.token_type is not an array of integers", path); return NULL; }
    if (!kmerge) { ds4_set_err(err, DS4_EFORMAT, "%s: no tokenizer.ggml.merges", path); return NULL; }
    if (!kv_is_array_of(kmerge, 1)) { ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.merges is not an array of strings", path); return NULL; }
    uint64_t nv = ktok->v.arr.n;
    if (nv == 0 || nv > TOK_MAX_VOCAB) {
        ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.tokens has %llu entries", path, (unsigned long long)nv);
        return NULL;
    }
    if (ktype->v.arr.n != nv) {
        ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.token_type has %llu entries, tokens has %llu",
                path, (unsigned long long)ktype->v.arr.n, (unsigned long long)nv);
        return NULL;
    }
    uint64_t nm = kmerge->v.arr.n;
    if (nm > TOK_MAX_VOCAB) {
        ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer.ggml.merges has %llu entries", path, (unsigned long long)nm);
        return NULL;
    }

    ds4_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        const gguf_kv *kpre = gguf_find(f, "tokenizer.ggml.pre");
        if (kpre && kpre->type == GGUF_STRING &&
            ((kpre->v.s.len == 4 && memcmp(kpre->v.s.p, "glm4", 4) == 0) ||
             (kpre->v.s.len == 11 && memcmp(kpre->v.s.p, "chatglm-bpe", 11) == 0)))
            t->pre = DS4_PRE_GLM4;
    }
    if (!t) goto oom;
    t->n_vocab = (int32_t)nv;
    t->off = malloc((nv + 1) * sizeof *t->off);
    t->added = calloc(nv, 1);
    if (!t->off || !t->added) goto oom;

    /* Pass 1: types, and the arena size (decoded spellings never grow). */
    uint64_t total = 0, maxlen = 0;
    for (uint64_t i = 0; i < nv; i++) {
        gguf_str s;
        int64_t ty;
        if (gguf_arr_str(ktok, i, &s) || gguf_arr_i64(ktype, i, &ty)) {
            ds4_set_err(err, DS4_EFORMAT, "%s: cannot read token %llu", path, (unsigned long long)i);
            goto fail;
        }
        if (ty < 0 || ty > 6) {
            ds4_set_err(err, DS4_EFORMAT, "%s: token %llu has invalid type %lld", path,
                    (unsigned long long)i, (long long)ty);
            goto fail;
        }
        t->added[i] = (ty == 3 || ty == 4);
        total += s.len;
        if (s.len > maxlen) maxlen = s.len;
    }
    if (total >= UINT32_MAX) {
        ds4_set_err(err, DS4_EFORMAT, "%s: token strings too large (%llu bytes)", path, (unsigned long long)total);
        goto fail;
    }
    t->arena = malloc(total ? total : 1);
    if (!t->arena) goto oom;

    /* Pass 2: token bytes.  Added tokens are their UTF-8 text; every other
     * token is spelled in the GPT-2 alphabet and mapped back to bytes. */
    int16_t inv[GPT2_MAXCP];
    gpt2_inverse(inv);
    uint32_t pos = 0;
    for (uint64_t i = 0; i < nv; i++) {
        gguf_str s;
        gguf_arr_str(ktok, i, &s);
        t->off[i] = pos;
        if (t->added[i]) {
            if (s.len) memcpy(t->arena + pos, s.p, s.len);
            pos += (uint32_t)s.len;
        } else {
            long k = gpt2_decode(inv, (const unsigned char *)s.p, s.len, t->arena + pos);
            if (k < 0) {
                ds4_set_err(err, DS4_EFORMAT, "%s: token %llu ('%s') is not spelled in the byte-level "
                        "(GPT-2) alphabet", path, (unsigned long long)i,
                        gguf_esc(s.p, s.len > 64 ? 64 : s.len).s);
                goto fail;
            }
            pos += (uint32_t)k;
        }
    }
    t->off[nv] = pos;

    /* Maps from bytes to ids. */
    size_t n_added = 0;
    for (uint64_t i = 0; i < nv; i++) n_added += t->added[i];
    t->n_added = n_added;
    t->vmap_mask = pow2_at_least(2 * (nv - n_added) + 1) - 1;
    t->vmap = malloc((t->vmap_mask + 1) * sizeof *t->vmap);
    t->amap_mask = pow2_at_least(2 * n_added + 1) - 1;
    t->amap = malloc((t->amap_mask + 1) * sizeof *t->amap);
    if (!t->vmap || !t->amap) goto oom;
    memset(t->vmap, 0xff, (t->vmap_mask + 1) * sizeof *t->vmap);
    memset(t->amap, 0xff, (t->amap_mask + 1) * sizeof *t->amap);
    for (int i = 0; i < 256; i++) t->trie_root[i] = -1;
    for (uint64_t i = 0; i < nv; i++) {
        int32_t id = (int32_t)i;
        if (t->off[i + 1] == t->off[i]) continue;    /* empty: unmatchable */
        if (t->added[i]) {
            map_insert(t, t->amap, t->amap_mask, id);
            if (trie_add(t, id)) goto oom;
        } else {
            map_insert(t, t->vmap, t->vmap_mask, id);
        }
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = map_find(t, t->vmap, t->vmap_mask, &c, 1);
        if (t->byte_id[b] < 0) {
            ds4_set_err(err, DS4_EFORMAT, "%s: the vocabulary has no token for byte 0x%02x (not a "
                    "byte-level BPE vocabulary)", path, b);
            goto fail;
        }
    }

    /* Merges: "left right" in the GPT-2 alphabet, index = rank. */
    t->mmap_mask = pow2_at_least(2 * nm + 1) - 1;
    t->mmap = malloc((t->mmap_mask + 1) * sizeof *t->mmap);
    unsigned char *tmp = malloc(maxlen * 2 + 16 + 2 * 1024);
    if (!t->mmap || !tmp) { free(tmp); goto oom; }
    for (size_t i = 0; i <= t->mmap_mask; i++) t->mmap[i].key = MERGE_EMPTY;
    for (uint64_t r = 0; r < nm; r++) {
        gguf_str s;
        if (gguf_arr_str(kmerge, r, &s)) {
            ds4_set_err(err, DS4_EFORMAT, "%s: cannot read merge %llu", path, (unsigned long long)r);
            free(tmp);
            goto fail;
        }
        /* Split at the first space after the first byte (a spelling never
         * contains a space: U+0020 is spelled 'Ġ'). */
        const char *sp = s.len > 1 ? memchr(s.p + 1, ' ', s.len - 1) : NULL;
        int shown = (int)(s.len > 64 ? 64 : s.len);
        if (!sp || sp + 1 >= s.p + s.len || s.len > 2 * 1024) {
            ds4_set_err(err, DS4_EFORMAT, "%s: merge %llu ('%s') is not 'left right'", path,
                    (unsigned long long)r, gguf_esc(s.p, (size_t)shown).s);
            free(tmp);
            goto fail;
        }
        size_t ll = (size_t)(sp - s.p), rl = s.len - ll - 1;
        long lb = gpt2_decode(inv, (const unsigned char *)s.p, ll, tmp);
        long rb = lb < 0 ? -1 : gpt2_decode(inv, (const unsigned char *)sp + 1, rl, tmp + lb);
        int32_t lid = lb < 0 ? -1 : map_find(t, t->vmap, t->vmap_mask, tmp, (size_t)lb);
        int32_t rid = rb < 0 ? -1 : map_find(t, t->vmap, t->vmap_mask, tmp + lb, (size_t)rb);
        if (lid < 0 || rid < 0) {
            ds4_set_err(err, DS4_EFORMAT, "%s: merge %llu ('%s') references a token that is not "
                    "in the vocabulary", path, (unsigned long long)r, gguf_esc(s.p, (size_t)shown).s);
            free(tmp);
            goto fail;
        }
        int32_t res = map_find(t, t->vmap, t->vmap_mask, tmp, (size_t)(lb + rb));
        if (res < 0) {
            ds4_set_err(err, DS4_EFORMAT, "%s: merge %llu ('%s') produces a token that is not in "
                    "the vocabulary", path, (unsigned long long)r, gguf_esc(s.p, (size_t)shown).s);
            free(tmp);
            goto fail;
        }
        uint64_t key = ((uint64_t)(uint32_t)lid << 32) | (uint32_t)rid;
        size_t h = (size_t)hash_pair(key) & t->mmap_mask;
        while (t->mmap[h].key != MERGE_EMPTY && t->mmap[h].key != key)
            h = (h + 1) & t->mmap_mask;
        if (t->mmap[h].key == MERGE_EMPTY) {     /* a duplicate keeps its best rank */
            t->mmap[h].key = key;
            t->mmap[h].rank = (int32_t)r;
            t->mmap[h].result = res;
        }
    }
    free(tmp);
    t->n_merges = nm;

    /* The chat-format tokens, by text: DeepSeek V4's, or GLM's for a GLM
     * vocabulary (no BOS: "[gMASK]<sop>" is part of the rendered prompt). */
    typedef struct { const char *text; size_t field; int required; } special;
    static const special sp_v4[] = {
        { "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", offsetof(ds4_special_ids, bos), 1 },
        { "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", offsetof(ds4_special_ids, eos), 1 },
        { "<\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd\x9c>", offsetof(ds4_special_ids, pad), 0 },
        { "<\xef\xbd\x9cUser\xef\xbd\x9c>", offsetof(ds4_special_ids, user), 1 },
        { "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", offsetof(ds4_special_ids, assistant), 1 },
        { "<think>", offsetof(ds4_special_ids, think), 1 },
        { "</think>", offsetof(ds4_special_ids, think_end), 1 },
        { "\xef\xbd\x9c" "DSML\xef\xbd\x9c", offsetof(ds4_special_ids, dsml), 1 },
        { "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>", offsetof(ds4_special_ids, latest_reminder), 0 },
    };
    static const special sp_glm[] = {
        { "<|endoftext|>", offsetof(ds4_special_ids, eos), 1 },
        { "<|endoftext|>", offsetof(ds4_special_ids, pad), 0 },
        { "<|user|>", offsetof(ds4_special_ids, user), 1 },
        { "<|assistant|>", offsetof(ds4_special_ids, assistant), 1 },
        { "<think>", offsetof(ds4_special_ids, think), 1 },
        { "</think>", offsetof(ds4_special_ids, think_end), 1 },
    };
    const special *sp = t->pre == DS4_PRE_GLM4 ? sp_glm : sp_v4;
    size_t nsp = t->pre == DS4_PRE_GLM4 ? sizeof sp_glm / sizeof sp_glm[0] : sizeof sp_v4 / sizeof sp_v4[0];
    int32_t none = -1;
    for (size_t i = 0; i < sizeof t->sp / sizeof none; i++)
        memcpy((char *)&t->sp + i * sizeof none, &none, sizeof none);
    for (size_t i = 0; i < nsp; i++) {
        int32_t id = map_find(t, t->amap, t->amap_mask,
                              (const unsigned char *)sp[i].text, strlen(sp[i].text));
        if (id < 0 && sp[i].required) {
            ds4_set_err(err, DS4_EFORMAT, "%s: the vocabulary has no added token '%s' (required by "
                    "the %s chat format)", path, sp[i].text,
                    t->pre == DS4_PRE_GLM4 ? "GLM" : "DeepSeek V4");
            goto fail;
        }
        memcpy((char *)&t->sp + sp[i].field, &id, sizeof id);
    }
    return t;

oom:
    ds4_set_err(err, DS4_EFORMAT, "%s: out of memory loading the tokenizer", path);
fail:
    ds4_tokenizer_free(t);
    return NULL;
}

ds4_tokenizer *ds4_tokenizer_load(const char *gguf_path, char **err) {
    if (err) *err = NULL;
    if (!gguf_path) { ds4_set_err(err, DS4_EFORMAT, "no tokenizer path given"); return NULL; }
    gguf_file *f = gguf_open(gguf_path, err);
    if (!f) return NULL;
    ds4_tokenizer *t = ds4_tokenizer_from_gguf(f, err);
    gguf_close(f);
    return t;
}

int32_t ds4_tok_n_vocab(const ds4_tokenizer *t) { return t ? t->n_vocab : 0; }

int ds4_tok_format(const ds4_tokenizer *tok) {
    return tok->pre == DS4_PRE_GLM4 ? DS4_FORMAT_GLM : DS4_FORMAT_DSV4;
}

const ds4_special_ids *ds4_tok_special(const ds4_tokenizer *t) { return &t->sp; }

int32_t ds4_tok_lookup(const ds4_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) return -1;
    const unsigned char *s = (const unsigned char *)text;
    int32_t id = map_find(t, t->amap, t->amap_mask, s, len);
    if (id < 0) id = map_find(t, t->vmap, t->vmap_mask, s, len);
    return id;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizer                                                             */
/* ------------------------------------------------------------------------ */

/* Per-character kind: the unicode.h class (group + \s) plus flags the
 * regexes test directly. */
enum {
    K_CRLF = 16,    /* \r or \n */
    K_SPACE = 32,   /* U+0020 */
    K_ASCII = 64,
    K_CJK = 128,    /* inside R2's class */
};
#define K_GROUP(k) ((k) & DS4_UC_GROUP)
#define K_IS_LM(k) (K_GROUP(k) == DS4_UC_L || K_GROUP(k) == DS4_UC_M)
#define K_IS_PS(k) (K_GROUP(k) == DS4_UC_P || K_GROUP(k) == DS4_UC_S)

static const uint8_t ascii_kind[128] = {
     64,  64,  64,  64,  64,  64,  64,  64,  64,  72,  88,  72,  72,  88,  64,  64,
     64,  64,  64,  64,  64,  64,  64,  64,  64,  64,  64,  64,  64,  64,  64,  64,
    104,  68,  68,  68,  69,  68,  68,  68,  68,  68,  68,  69,  68,  68,  68,  68,
     67,  67,  67,  67,  67,  67,  67,  67,  67,  67,  68,  68,  69,  69,  69,  68,
     68,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,
     65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  68,  68,  68,  69,  68,
     69,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,
     65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  65,  68,  69,  68,  69,  64,
};

/* Kind and byte length of the character at s[i] (s[i..e) is valid UTF-8
 * here, but a defensive decode keeps a bug from reading past e). */
static inline unsigned char_kind(const unsigned char *s, size_t i, size_t e, size_t *len) {
    unsigned char b = s[i];
    if (b < 0x80) { *len = 1; return ascii_kind[b]; }
    uint32_t cp;
    int ok;
    *len = ds4_utf8_next(s + i, e - i, &cp, &ok);
    unsigned k = ds4_uc_class(cp);
    if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF)) k |= K_CJK;
    return k;
}

/* End of the run of characters from i (< e) whose kind satisfies `pred`. */
#define RUN_WHILE(s, j, e, pred)                                  \
    do {                                                          \
        while ((j) < (e)) {                                       \
            size_t l_;                                            \
            unsigned k = char_kind((s), (j), (e), &l_);           \
            if (!(pred)) break;                                   \
            (j) += l_;                                            \
        }                                                         \
    } while (0)

/* The whitespace alternatives both pre-tokenizers share, for a piece that
 * starts at i with a whitespace character of kind k0 ending at i1:
 * \s*[\r\n]+ | \s+(?!\S) | \s+, in that order. */
static size_t match_ws(const unsigned char *s, size_t i, size_t i1, size_t e, unsigned k0) {
    /* The maximal whitespace run i..j, the end of its last \r/\n and the
     * start of its last character. */
    size_t j = i1, crlf_end = (k0 & K_CRLF) ? i1 : 0, last = i;
    while (j < e) {
        size_t l;
        unsigned k = char_kind(s, j, e, &l);
        if (!(k & DS4_UC_WS)) break;
        if (k & K_CRLF) crlf_end = j + l;
        last = j;
        j += l;
    }
    /* \s*[\r\n]+ : \s* backs off until a \r/\n follows, so the match ends
     * after the run's last \r/\n. */
    if (crlf_end) return crlf_end;
    /* \s+(?!\S) : the whole run at the end of the piece, else the run minus
     * its last character (which is then followed by whitespace). */
    if (j == e) return j;
    if (last > i) return last;
    /* \s+ : a single whitespace character before a non-space. */
    return j;
}

/* R3 anchored at i inside the piece [.., e): end of the match, or 0 when no
 * alternative matches here.  Each alternative is tried in order, as a
 * backtracking engine does; the comments give the reasoning that turns the
 * backtracking into a direct computation. */
static size_t match_r3(const unsigned char *s, size_t i, size_t e) {
    size_t l0, l1 = 0;
    unsigned k0 = char_kind(s, i, e, &l0), k1 = 0;
    size_t i1 = i + l0;
    int has1 = i1 < e;
    if (has1) k1 = char_kind(s, i1, e, &l1);

    /* [ASCII punct][A-Za-z]+ : every ASCII P/S character is in the class. */
    if ((k0 & K_ASCII) && K_IS_PS(k0) && has1 && (k1 & K_ASCII) &&
        K_GROUP(k1) == DS4_UC_L) {
        size_t j = i1 + 1;
        while (j < e && s[j] < 0x80 && K_GROUP(ascii_kind[s[j]]) == DS4_UC_L) j++;
        return j;
    }
    /* [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : a letter or mark starts the
     * maximal L/M run (taking a mark as the optional prefix ends at the same
     * place); any other char outside \r\n/L/P/S may prefix a run. */
    if (K_IS_LM(k0)) {
        size_t j = i1;
        RUN_WHILE(s, j, e, K_IS_LM(k));
        return j;
    }
    if (!(k0 & K_CRLF) && !K_IS_PS(k0) && has1 && K_IS_LM(k1)) {
        size_t j = i1 + l1;
        RUN_WHILE(s, j, e, K_IS_LM(k));
        return j;
    }
    /* " ?[\p{P}\p{S}]+[\r\n]*" */
    if (K_IS_PS(k0) || ((k0 & K_SPACE) && has1 && K_IS_PS(k1))) {
        size_t j = K_IS_PS(k0) ? i1 : i1 + l1;
        RUN_WHILE(s, j, e, K_IS_PS(k));
        while (j < e && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    if (k0 & DS4_UC_WS) return match_ws(s, i, i1, e, k0);
    return 0;
}

/* 1 when s[i..e) starts with one of G's contractions ('s 't 're 've 'm
 * 'll 'd, letters in either case); returns its length through *len. */
static int glm4_contraction(const unsigned char *s, size_t i, size_t e, size_t *len) {
    if (s[i] != '\'' || i + 1 >= e) return 0;
    unsigned char a = (unsigned char)(s[i + 1] | 0x20);
    unsigned char b = i + 2 < e ? (unsigned char)(s[i + 2] | 0x20) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') { *len = 2; return 1; }
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) { *len = 3; return 1; }
    return 0;
}

/* G anchored at i inside [.., e): end of the match.  Every character is a
 * letter, a number, whitespace or "other", and each kind starts some
 * alternative, so G always matches (there are no gaps). */
static size_t match_glm4(const unsigned char *s, size_t i, size_t e) {
    size_t l0, l1 = 0, cl;
    unsigned k0 = char_kind(s, i, e, &l0), k1 = 0;
    size_t i1 = i + l0;
    int has1 = i1 < e;
    if (has1) k1 = char_kind(s, i1, e, &l1);
#define G_L(k) (K_GROUP(k) == DS4_UC_L)
#define G_N(k) (K_GROUP(k) == DS4_UC_N)
#define G_OTHER(k) (!((k) & DS4_UC_WS) && !G_L(k) && !G_N(k))
    if (glm4_contraction(s, i, e, &cl)) return i + cl;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ : a letter starts the maximal letter run
     * (it cannot be the optional prefix); any other non-CR/LF, non-number
     * character may prefix a run. */
    if (G_L(k0)) {
        size_t j = i1;
        RUN_WHILE(s, j, e, G_L(k));
        return j;
    }
    if (!(k0 & K_CRLF) && !G_N(k0) && has1 && G_L(k1)) {
        size_t j = i1 + l1;
        RUN_WHILE(s, j, e, G_L(k));
        return j;
    }
    /* \p{N}{1,3} */
    if (G_N(k0)) {
        size_t j = i1;
        for (int cnt = 1; cnt < 3 && j < e; cnt++) {
            size_t l2;
            unsigned k2 = char_kind(s, j, e, &l2);
            if (!G_N(k2)) break;
            j += l2;
        }
        return j;
    }
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    if (G_OTHER(k0) || ((k0 & K_SPACE) && has1 && G_OTHER(k1))) {
        size_t j = G_OTHER(k0) ? i1 : i1 + l1;
        RUN_WHILE(s, j, e, G_OTHER(k));
        while (j < e && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
#undef G_L
#undef G_N
#undef G_OTHER
    /* Whitespace: the same three alternatives as R3's, in the same order. */
    return match_ws(s, i, i1, e, k0);
}

/* Splits [s, e) of valid UTF-8 into pre-tokens, calling emit for each. */
typedef int (*emit_fn)(void *ud, size_t start, size_t end);

static int pretokenize_glm4(const unsigned char *s, size_t start, size_t e,
                            emit_fn emit, void *ud) {
    size_t i = start;
    while (i < e) {
        size_t m = match_glm4(s, i, e);
        int rc = emit(ud, i, m);
        if (rc) return rc;
        i = m;
    }
    return 0;
}

static int pretokenize(int pre, const unsigned char *s, size_t start, size_t e,
                       emit_fn emit, void *ud) {
    if (pre == DS4_PRE_GLM4) return pretokenize_glm4(s, start, e, emit, ud);
    size_t i = start;
    int rc;
    while (i < e) {
        size_t l;
        unsigned k = char_kind(s, i, e, &l);
        size_t pe = i + l;
        if (K_GROUP(k) == DS4_UC_N) {
            /* R1: up to three numbers; R3 matches nothing inside. */
            for (int cnt = 1; cnt < 3 && pe < e; cnt++) {
                size_t l2;
                unsigned k2 = char_kind(s, pe, e, &l2);
                if (K_GROUP(k2) != DS4_UC_N) break;
                pe += l2;
            }
            if ((rc = emit(ud, i, pe))) return rc;
            i = pe;
            continue;
        }
        /* R1's gaps, cut by R2 into CJK runs and the rest (no number is in
         * R2's class, so the two never mix). */
        unsigned cjk = k & K_CJK;
        while (pe < e) {
            size_t l2;
            unsigned k2 = char_kind(s, pe, e, &l2);
            if (K_GROUP(k2) == DS4_UC_N || (k2 & K_CJK) != cjk) break;
            pe += l2;
        }
        /* R3 over the piece [i, pe): matches and the gaps between them. */
        size_t j = i, gap = (size_t)-1;
        while (j < pe) {
            size_t m = match_r3(s, j, pe);
            if (!m) {
                if (gap == (size_t)-1) gap = j;
                size_t l2;
                char_kind(s, j, pe, &l2);
                j += l2;
                continue;
            }
            if (gap != (size_t)-1) {
                if ((rc = emit(ud, gap, j))) return rc;
                gap = (size_t)-1;
            }
            if ((rc = emit(ud, j, m))) return rc;
            j = m;
        }
        if (gap != (size_t)-1 && (rc = emit(ud, gap, pe))) return rc;
        i = pe;
    }
    return 0;
}

int ds4_pretokenize(const char *text, size_t len, ds4_pretok_cb cb, void *ud) {
    return ds4_pretokenize_pre(DS4_PRE_DEEPSEEK_V3, text, len, cb, ud);
}

int ds4_pretokenize_pre(int pre, const char *text, size_t len, ds4_pretok_cb cb, void *ud) {
    if (!text || !len) return 0;
    return pretokenize(pre, (const unsigned char *)text, 0, len, cb, ud);
}

int ds4_tok_pre(const ds4_tokenizer *t) { return t ? t->pre : DS4_PRE_DEEPSEEK_V3; }

/* ------------------------------------------------------------------------ */
/* BPE and encoding                                                          */
/* ------------------------------------------------------------------------ */

/* BPE candidates live in a min-heap of bare 64-bit keys, rank << 32 | left
 * symbol position: lowest rank first, leftmost on ties (HF's order).  An
 * entry is checked when popped: it is current iff the pair now at that
 * position still has a merge of that rank (a rank names exactly one pair,
 * and the pair at a position only ever grows, so an old rank never comes
 * back).  Eight-byte entries in a 4-ary heap (the four children share a
 * cache line) keep huge words (megabytes of one character) bearable. */
typedef uint64_t heap_ent;

typedef struct {
    uint64_t h;
    size_t toff;        /* pre-token start in the text */
    size_t ooff;        /* its ids in out->v */
    uint32_t tlen, nids;
} cache_ent;

#define CACHE_MAX_WORD 256

typedef struct {
    const ds4_tokenizer *tok;
    const unsigned char *text;
    ds4_tokens *out;
    int oom;
    /* BPE scratch, grown geometrically (per call, not per token) */
    int32_t *sym, *prev, *next;
    size_t sym_cap;
    heap_ent *heap;
    size_t heap_n, heap_cap;
    /* pre-token -> ids cache, only for long inputs */
    cache_ent *cache;
    size_t cache_mask, cache_n, cache_max;
} work;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int heap_push(work *w, heap_ent e) {
    if (w->heap_n == w->heap_cap &&
        grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof(heap_ent)))
        return -1;
    size_t i = w->heap_n++;
    heap_ent *h = w->heap;
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (h[p] <= e) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
    return 0;
}

static void heap_sift_down(heap_ent *h, size_t n, size_t i, heap_ent e) {
    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= n) break;
        size_t end = c + 4 < n ? c + 4 : n;
        for (size_t k = c + 1; k < end; k++)
            if (h[k] < h[c]) c = k;
        if (e <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = e;
}

static heap_ent heap_pop(work *w) {
    heap_ent top = w->heap[0];
    heap_ent last = w->heap[--w->heap_n];
    if (w->heap_n) heap_sift_down(w->heap, w->heap_n, 0, last);
    return top;
}

static int try_pair(work *w, int32_t l, int32_t r) {
    const merge_ent *m = merge_find(w->tok, w->sym[l], w->sym[r]);
    if (!m) return 0;
    return heap_push(w, ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)l);
}

/* BPE of one pre-token of n >= 2 bytes; appends its ids to out. */
static int bpe_word(work *w, const unsigned char *b, size_t n) {
    const ds4_tokenizer *t = w->tok;
    if (n > INT32_MAX - 1) return -1;
    if (n > w->sym_cap) {
        /* sym, prev and next live in one block of 3 * cap ids. */
        size_t cap = w->sym_cap ? w->sym_cap : 64;
        while (cap < n) cap *= 2;
        int32_t *blk = realloc(w->sym, 3 * cap * sizeof(int32_t));
        if (!blk) return -1;
        w->sym = blk;
        w->prev = blk + cap;
        w->next = blk + 2 * cap;
        w->sym_cap = cap;
    }
    int32_t *sym = w->sym, *prev = w->prev, *next = w->next;
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_id[b[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = (i + 1 < n) ? (int32_t)i + 1 : -1;
    }
    /* Initial candidates, heapified bottom-up in O(n). */
    if (grow((void **)&w->heap, &w->heap_cap, n, sizeof(heap_ent))) return -1;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        const merge_ent *m = merge_find(t, sym[i], sym[i + 1]);
        if (m) w->heap[hn++] = ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)i;
    }
    w->heap_n = hn;
    for (size_t i = hn / 4 + 1; i-- > 0;) heap_sift_down(w->heap, hn, i, w->heap[i]);
    while (w->heap_n) {
        heap_ent e = heap_pop(w);
        int32_t l = (int32_t)(uint32_t)e, r;
        /* Stale entry: the left symbol was merged away, or the pair at l
         * is no longer the one this rank merges. */
        if (sym[l] < 0 || (r = next[l]) < 0) continue;
        const merge_ent *m = merge_find(t, sym[l], sym[r]);
        if (!m || (uint32_t)m->rank != (uint32_t)(e >> 32)) continue;
        sym[l] = m->result;
        sym[r] = -1;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (prev[l] >= 0 && try_pair(w, prev[l], l)) return -1;
        if (next[l] >= 0 && try_pair(w, l, next[l])) return -1;
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (ds4_tokens_push(w->out, sym[i])) return -1;
    return 0;
}

static int emit_word(void *ud, size_t s, size_t e) {
    work *w = ud;
    const unsigned char *b = w->text + s;
    size_t n = e - s;
    if (n == 1) {
        if (ds4_tokens_push(w->out, w->tok->byte_id[b[0]])) goto oom;
        return 0;
    }
    uint64_t h = 0;
    size_t slot = 0;
    if (w->cache && n <= CACHE_MAX_WORD) {
        h = hash_bytes(b, n);
        slot = (size_t)h & w->cache_mask;
        for (;;) {
            cache_ent *c = &w->cache[slot];
            if (c->tlen == 0) break;
            if (c->h == h && c->tlen == n && memcmp(w->text + c->toff, b, n) == 0) {
                if (ds4_tokens_reserve(w->out, w->out->n + c->nids)) goto oom;
                memcpy(w->out->v + w->out->n, w->out->v + c->ooff, c->nids * sizeof(int32_t));
                w->out->n += c->nids;
                return 0;
            }
            slot = (slot + 1) & w->cache_mask;
        }
    }
    size_t before = w->out->n;
    if (bpe_word(w, b, n)) goto oom;
    if (w->cache && n <= CACHE_MAX_WORD && w->cache_n < w->cache_max) {
        cache_ent *c = &w->cache[slot];
        c->h = h;
        c->toff = s;
        c->tlen = (uint32_t)n;
        c->ooff = before;
        c->nids = (uint32_t)(w->out->n - before);
        w->cache_n++;
    }
    return 0;
oom:
    w->oom = 1;
    return -1;
}

/* Replace invalid UTF-8 by U+FFFD (maximal subparts).  Returns 0 and sets
 * *out_text to the text to use: `in` itself when it is valid. */
static int sanitize(const unsigned char *in, size_t n, ds4_buf *buf,
                    const unsigned char **out_text, size_t *out_n) {
    size_t v = ds4_utf8_valid_prefix(in, n);
    if (v == n) { *out_text = in; *out_n = n; return 0; }
    if (ds4_buf_append(buf, in, v)) return -1;
    size_t i = v;
    while (i < n) {
        size_t run = ds4_utf8_valid_prefix(in + i, n - i);
        if (run && ds4_buf_append(buf, in + i, run)) return -1;
        i += run;
        if (i >= n) break;
        uint32_t cp;
        int ok;
        i += ds4_utf8_next(in + i, n - i, &cp, &ok);
        if (ds4_buf_append(buf, "\xef\xbf\xbd", 3)) return -1;
    }
    *out_text = (const unsigned char *)buf->p;
    *out_n = buf->n;
    return 0;
}

int ds4_tokenize(const ds4_tokenizer *t, const char *text, size_t len,
                 int mode, ds4_tokens *out) {
    if (!t || !out || (!text && len)) return DS4_EINVAL;
    if (len == 0) return DS4_OK;
    ds4_buf clean = { 0 };
    const unsigned char *s;
    size_t n;
    if (sanitize((const unsigned char *)text, len, &clean, &s, &n)) {
        ds4_buf_free(&clean);
        return DS4_ENOMEM;
    }
    work w = { .tok = t, .text = s, .out = out };
    /* Long inputs repeat their words: remember each distinct pre-token's ids
     * (by position in `out`, so nothing is copied).  Short inputs skip it. */
    if (n >= 2048) {
        size_t cap = pow2_at_least(n / 8);
        if (cap > (1u << 17)) cap = 1u << 17;
        w.cache = calloc(cap, sizeof *w.cache);
        if (w.cache) {       /* without it we are only slower */
            w.cache_mask = cap - 1;
            w.cache_max = cap / 4 * 3;
        }
    }
    /* A rough first reservation: ~3.5 bytes per token in prose. */
    if (ds4_tokens_reserve(out, out->n + n / 4 + 16)) w.oom = 1;

    size_t pos = 0;
    if (!w.oom && mode == DS4_TOK_SPECIAL && t->n_added) {
        size_t i = 0;
        while (i < n && !w.oom) {
            if (t->trie_root[s[i]] < 0) { i++; continue; }
            int32_t id = -1;
            size_t m = trie_match(t, s + i, n - i, &id);
            if (!m) { i++; continue; }
            if (pos < i) pretokenize(t->pre, s, pos, i, emit_word, &w);
            if (!w.oom && ds4_tokens_push(out, id)) w.oom = 1;
            i += m;
            pos = i;
        }
    }
    if (!w.oom && pos < n) pretokenize(t->pre, s, pos, n, emit_word, &w);

    free(w.sym);
    free(w.heap);
    free(w.cache);
    ds4_buf_free(&clean);
    return w.oom ? DS4_ENOMEM : DS4_OK;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */
/* ------------------------------------------------------------------------ */

const char *ds4_token_bytes(const ds4_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    size_t l;
    const unsigned char *p = tok_ptr(t, id, &l);
    if (len) *len = l;
    return (const char *)p;
}

int ds4_detokenize(const ds4_tokenizer *t, const int32_t *ids, size_t n,
                   ds4_buf *out) {
    if (!t || !out || (!ids && n)) return DS4_EINVAL;
    int rc = DS4_OK;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *p = ds4_token_bytes(t, ids[i], &l);
        if (!p) { rc = DS4_EINVAL; continue; }   /* skip bad ids, report */
        if (ds4_buf_append(out, p, l)) return DS4_ENOMEM;
    }
    return rc;
}

void ds4_detok_init(ds4_detok *d) {
    memset(d, 0, sizeof *d);
}

/* Feed one byte to the pending-sequence state machine; complete characters
 * and bytes that can never become valid are appended to out. */
static int detok_byte(ds4_detok *d, unsigned char b, ds4_buf *out) {
    if (d->npend > 0) {
        int need = ds4_utf8_lead_len(d->pend[0]);
        if (ds4_utf8_cont_ok(d->pend[0], d->npend, b)) {
            d->pend[d->npend++] = b;
            if (d->npend == need) {
                int rc = ds4_buf_append(out, d->pend, (size_t)d->npend);
                d->npend = 0;
                return rc;
            }
            return 0;
        }
        /* The pending prefix is dead: release it as it is, then treat b
         * as the start of something new. */
        int rc = ds4_buf_append(out, d->pend, (size_t)d->npend);
        d->npend = 0;
        if (rc) return rc;
    }
    if (ds4_utf8_lead_len(b) >= 2) {
        d->pend[0] = b;
        d->npend = 1;
        return 0;
    }
    return ds4_buf_append(out, &b, 1);
}

int ds4_detok_push(ds4_detok *d, const ds4_tokenizer *t, int32_t id, ds4_buf *out) {
    if (!d || !out) return DS4_EINVAL;
    size_t l;
    const char *p = ds4_token_bytes(t, id, &l);
    if (!p) return DS4_EINVAL;
    if (d->npend < 0 || d->npend > 3) d->npend = 0;   /* corrupted state */
    size_t i = 0;
    /* Fast path: nothing pending and the token is whole characters. */
    if (d->npend == 0) {
        size_t v = ds4_utf8_valid_prefix((const unsigned char *)p, l);
        if (v && ds4_buf_append(out, p, v)) return DS4_ENOMEM;
        i = v;
    }
    for (; i < l; i++)
        if (detok_byte(d, (unsigned char)p[i], out)) return DS4_ENOMEM;
    return DS4_OK;
}

int ds4_detok_flush(ds4_detok *d, ds4_buf *out) {
    if (!d || !out) return DS4_EINVAL;
    int rc = DS4_OK;
    if (d->npend > 0 && d->npend <= 3)
        rc = ds4_buf_append(out, d->pend, (size_t)d->npend) ? DS4_ENOMEM : DS4_OK;
    d->npend = 0;
    return rc;
}
