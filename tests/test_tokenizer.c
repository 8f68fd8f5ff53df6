/*
 * test_tokenizer.c -- tests of the tokenizer (tokenizer.c, unicode.c).
 *
 * Owns: nothing outside this test.  Reads (DS4_SHARED, default ../shared):
 *   vocab/deepseek-v4-vocab.gguf + golden/tokenizer/encode.jsonl (every case,
 *     `ids` with DS4_TOK_SPECIAL, `ids_plain` with DS4_TOK_PLAIN; raw
 *     `bytes_hex` for the invalid-UTF-8 cases), decode.jsonl (exact bytes,
 *     also through the streaming detokenizer), token_bytes_sha256.json
 *     (the whole id -> bytes table);
 *   vocab/mini-vocab.gguf + golden/sequences/<seq>.txt -> <seq>.text_ids.txt.
 * Then targeted Unicode / pre-tokenizer cases, the streaming detokenizer on
 * random splits, random-input robustness with round trips, and loading of
 * malformed vocabularies written with the GGUF writer into a temp dir.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>

#include "ds4.h"
#include "gguf/gguf.h"
#include "base/hash.h"
#include "text/tokenizer_internal.h"
#include "text/unicode.h"

#include "testutil.h"

static const char *shared;

static char *path_of(const char *rel) {
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, sizeof buf[0], "%s/%s", shared, rel);
    return p;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); b = NULL; }
            else b = nb;
        }
    }
    fclose(f);
    if (b) b[len] = 0;
    *n = len;
    return b;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static char *unhex(const char *h, size_t *n) {
    size_t l = strlen(h) / 2;
    char *b = malloc(l + 1);
    for (size_t i = 0; i < l; i++) b[i] = (char)(hexval(h[2 * i]) * 16 + hexval(h[2 * i + 1]));
    b[l] = 0;
    *n = l;
    return b;
}

/* Compare out with a JSON array of ids; prints the first difference. */
static int ids_equal(const char *what, const char *id, const ds4_tokens *out, json_t *arr) {
    size_t m = json_array_size(arr), i = 0;
    while (i < m && i < out->n && json_integer_value(json_array_get(arr, i)) == out->v[i]) i++;
    if (i == m && m == out->n) return 1;
    fprintf(stderr, "  %s %s: %zu ids, want %zu; first difference at %zu: got", id, what,
            out->n, m, i);
    for (size_t j = i; j < i + 6 && j < out->n; j++) fprintf(stderr, " %d", out->v[j]);
    fprintf(stderr, " want");
    for (size_t j = i; j < i + 6 && j < m; j++)
        fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(arr, j)));
    fputc('\n', stderr);
    return 0;
}

/* Is b[0..n) valid UTF-8?  (Independent of unicode.c: Unicode Table 3-7.) */
static int valid_utf8(const unsigned char *b, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = b[i];
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) { k = 2; lo = 0xA0; }
        else if (c == 0xED) { k = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) k = 2;
        else if (c == 0xF0) { k = 3; lo = 0x90; }
        else if (c == 0xF4) { k = 3; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        else return 0;
        if (i + k >= n) return 0;          /* truncated */
        if (b[i + 1] < lo || b[i + 1] > hi) return 0;
        for (size_t j = 2; j <= k; j++)
            if (b[i + j] < 0x80 || b[i + j] > 0xBF) return 0;
        i += k + 1;
    }
    return 1;
}

/* Independent WHATWG replacement: at an invalid position, replace the
 * longest prefix that is still a valid start (at least one byte). */
static size_t replace_invalid(const unsigned char *b, size_t n, unsigned char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned c = b[i];
        size_t k = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) { out[o++] = (unsigned char)c; i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) { k = 2; lo = 0xA0; }
        else if (c == 0xED) { k = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) k = 2;
        else if (c == 0xF0) { k = 3; lo = 0x90; }
        else if (c == 0xF4) { k = 3; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        size_t good = 1;   /* bytes of a valid prefix seen */
        if (k) {
            for (size_t j = 1; j <= k; j++) {
                if (i + j >= n) break;
                unsigned d = b[i + j];
                unsigned l = j == 1 ? lo : 0x80, h = j == 1 ? hi : 0xBF;
                if (d < l || d > h) break;
                good++;
            }
        }
        if (k && good == k + 1) {
            memcpy(out + o, b + i, good);
            o += good;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
        i += good;
    }
    return o;
}

/* ---------------------------------------------------------------------- */
/* Golden: encode.jsonl                                                     */
/* ---------------------------------------------------------------------- */

static void test_encode(const ds4_tokenizer *t) {
    FILE *f = fopen(path_of("golden/tokenizer/encode.jsonl"), "r");
    CHECK(f != NULL, "cannot open encode.jsonl");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    int cases = 0, pass_special = 0, pass_plain = 0, pass_rt = 0;
    ds4_tokens out = { 0 };
    ds4_buf dec = { 0 };
    while ((r = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)r, JSON_ALLOW_NUL, &je);
        CHECK(o != NULL, "encode.jsonl: bad JSON: %s", je.text);
        if (!o) continue;
        cases++;
        const char *id = json_string_value(json_object_get(o, "id"));
        json_t *bh = json_object_get(o, "bytes_hex"), *tx = json_object_get(o, "text");
        size_t n;
        char *in;
        if (bh) in = unhex(json_string_value(bh), &n);
        else {
            n = json_string_length(tx);
            in = malloc(n + 1);
            memcpy(in, json_string_value(tx), n);
        }
        out.n = 0;
        int rc = ds4_tokenize(t, in, n, DS4_TOK_SPECIAL, &out);
        int ok = rc == DS4_OK && ids_equal("ids", id, &out, json_object_get(o, "ids"));
        pass_special += ok;
        CHECK(ok, "encode %s (%s): special mode", id,
              json_string_value(json_object_get(o, "category")));
        /* The ids decode back to the text (the U+FFFD-replaced one for
         * invalid input, which `text` holds). */
        dec.n = 0;
        ds4_detokenize(t, out.v, out.n, &dec);
        int rt = dec.n == json_string_length(tx) && memcmp(dec.p, json_string_value(tx), dec.n) == 0;
        pass_rt += rt;
        CHECK(rt, "encode %s: ids do not decode back to the text", id);

        out.n = 0;
        rc = ds4_tokenize(t, in, n, DS4_TOK_PLAIN, &out);
        ok = rc == DS4_OK && ids_equal("ids_plain", id, &out, json_object_get(o, "ids_plain"));
        pass_plain += ok;
        CHECK(ok, "encode %s: plain mode", id);
        free(in);
        json_decref(o);
    }
    free(line);
    fclose(f);
    ds4_tokens_free(&out);
    ds4_buf_free(&dec);
    printf("encode.jsonl: %d cases; special %d/%d, plain %d/%d, round trip %d/%d\n",
           cases, pass_special, cases, pass_plain, cases, pass_rt, cases);
    CHECK(cases == 498, "encode.jsonl: expected 498 cases, read %d", cases);
}

/* ---------------------------------------------------------------------- */
/* Golden: decode.jsonl                                                     */
/* ---------------------------------------------------------------------- */

static void test_decode(const ds4_tokenizer *t) {
    FILE *f = fopen(path_of("golden/tokenizer/decode.jsonl"), "r");
    CHECK(f != NULL, "cannot open decode.jsonl");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    ssize_t r;
    int cases = 0, pass = 0, pass_stream = 0;
    ds4_buf dec = { 0 }, chunk = { 0 }, all = { 0 };
    while ((r = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)r, JSON_ALLOW_NUL, &je);
        CHECK(o != NULL, "decode.jsonl: bad JSON: %s", je.text);
        if (!o) continue;
        cases++;
        const char *id = json_string_value(json_object_get(o, "id"));
        json_t *arr = json_object_get(o, "ids");
        size_t m = json_array_size(arr), n;
        int32_t *ids = malloc((m + 1) * sizeof *ids);
        for (size_t i = 0; i < m; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
        char *want = unhex(json_string_value(json_object_get(o, "bytes_hex")), &n);
        int valid = json_is_true(json_object_get(o, "valid_utf8"));

        dec.n = 0;
        int rc = ds4_detokenize(t, ids, m, &dec);
        int ok = rc == DS4_OK && dec.n == n && memcmp(dec.p, want, n) == 0;
        pass += ok;
        CHECK(ok, "decode %s: bytes differ", id);

        /* Streaming: same bytes in the end; for valid UTF-8 every chunk is
         * whole characters. */
        ds4_detok d;
        ds4_detok_init(&d);
        all.n = 0;
        int chunks_ok = 1;
        for (size_t i = 0; i < m; i++) {
            chunk.n = 0;
            ds4_detok_push(&d, t, ids[i], &chunk);
            if (valid && !valid_utf8((unsigned char *)chunk.p, chunk.n)) chunks_ok = 0;
            ds4_buf_append(&all, chunk.p, chunk.n);
        }
        chunk.n = 0;
        ds4_detok_flush(&d, &chunk);
        ds4_buf_append(&all, chunk.p, chunk.n);
        ok = chunks_ok && all.n == n && memcmp(all.p, want, n) == 0;
        pass_stream += ok;
        CHECK(ok, "decode %s: streaming detokenizer differs", id);
        free(ids);
        free(want);
        json_decref(o);
    }
    free(line);
    fclose(f);
    ds4_buf_free(&dec);
    ds4_buf_free(&chunk);
    ds4_buf_free(&all);
    printf("decode.jsonl: %d cases; exact bytes %d/%d, streaming %d/%d\n", cases, pass,
           cases, pass_stream, cases);
    CHECK(cases == 199, "decode.jsonl: expected 199 cases, read %d", cases);
}

/* ---------------------------------------------------------------------- */
/* Golden: token_bytes_sha256.json                                          */
/* ---------------------------------------------------------------------- */

static void test_token_table(const ds4_tokenizer *t) {
    json_error_t je;
    json_t *o = json_load_file(path_of("golden/tokenizer/token_bytes_sha256.json"), 0, &je);
    CHECK(o != NULL, "token_bytes_sha256.json: %s", je.text);
    if (!o) return;
    int32_t nv = (int32_t)json_integer_value(json_object_get(o, "n_vocab"));
    int32_t bs = (int32_t)json_integer_value(json_object_get(o, "block_size"));
    CHECK(ds4_tok_n_vocab(t) == nv, "n_vocab %d, want %d", ds4_tok_n_vocab(t), nv);
    ds4_sha256_ctx all;
    ds4_sha256_init(&all);
    json_t *blocks = json_object_get(o, "blocks");
    size_t nb = json_array_size(blocks);
    int pass = 0;
    for (size_t b = 0; b < nb; b++) {
        json_t *blk = json_array_get(blocks, b);
        int32_t first = (int32_t)json_integer_value(json_object_get(blk, "first_id"));
        int32_t last = (int32_t)json_integer_value(json_object_get(blk, "last_id"));
        ds4_sha256_ctx c;
        ds4_sha256_init(&c);
        for (int32_t id = first; id <= last; id++) {
            size_t len;
            const char *p = ds4_token_bytes(t, id, &len);
            uint8_t le[4] = { (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                              (uint8_t)(len >> 24) };
            ds4_sha256_update(&c, le, 4);
            ds4_sha256_update(&c, p, len);
            ds4_sha256_update(&all, le, 4);
            ds4_sha256_update(&all, p, len);
        }
        uint8_t dg[32];
        char hex[65];
        ds4_sha256_final(&c, dg);
        ds4_hex(dg, 32, hex);
        const char *want = json_string_value(json_object_get(blk, "sha256"));
        int ok = want && strcmp(hex, want) == 0;
        pass += ok;
        CHECK(ok, "token bytes of ids %d..%d: sha256 %s, want %s", first, last, hex,
              want ? want : "(missing)");
    }
    uint8_t dg[32];
    char hex[65];
    ds4_sha256_final(&all, dg);
    ds4_hex(dg, 32, hex);
    const char *want = json_string_value(json_object_get(o, "all_sha256"));
    if (!want) want = "(missing)";
    CHECK(strcmp(hex, want) == 0, "all token bytes: sha256 %s, want %s", hex, want);
    printf("token_bytes_sha256.json: %d/%zu blocks (block size %d), all_sha256 %s\n", pass, nb,
           bs, strcmp(hex, want) == 0 ? "ok" : "WRONG");
    json_decref(o);
}

/* ---------------------------------------------------------------------- */
/* Golden: mini vocabulary on the rendered sequences                        */
/* ---------------------------------------------------------------------- */

static void test_sequences(void) {
    char *err = NULL;
    ds4_tokenizer *m = ds4_tokenizer_load(path_of("vocab/mini-vocab.gguf"), &err);
    CHECK(m != NULL, "mini vocab: %s", err ? err : "?");
    free(err);
    if (!m) return;
    const ds4_special_ids *sp = ds4_tok_special(m);
    CHECK(ds4_tok_n_vocab(m) == 4096, "mini n_vocab %d", ds4_tok_n_vocab(m));
    CHECK(sp->bos == 0 && sp->eos == 1 && sp->pad == 2 && sp->user == 4077 &&
          sp->assistant == 4078 && sp->think == 4079 && sp->think_end == 4080 &&
          sp->dsml == 4081 && sp->latest_reminder == 4082, "mini vocab special ids");

    const char *dir = path_of("golden/sequences");
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    if (!d) { ds4_tokenizer_free(m); return; }
    struct dirent *e;
    int cases = 0, pass = 0;
    ds4_tokens out = { 0 };
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".txt") || strstr(e->d_name, ".ids.txt") ||
            strstr(e->d_name, ".text_ids.txt"))
            continue;
        char tp[1200], ip[1200];
        snprintf(tp, sizeof tp, "%s/%s", dir, e->d_name);
        snprintf(ip, sizeof ip, "%s/%.*s.text_ids.txt", dir, (int)(l - 4), e->d_name);
        size_t tn, in;
        char *text = read_file(tp, &tn), *ids = read_file(ip, &in);
        if (!text || !ids) { free(text); free(ids); continue; }
        cases++;
        out.n = 0;
        ds4_tokenize(m, text, tn, DS4_TOK_SPECIAL, &out);
        json_t *arr = json_array();
        char *p = ids, *q;
        for (;;) {
            long v = strtol(p, &q, 10);
            if (q == p) break;
            json_array_append_new(arr, json_integer(v));
            p = q;
        }
        int ok = ids_equal("text_ids", e->d_name, &out, arr);
        pass += ok;
        CHECK(ok, "mini vocab: %s differs from its .text_ids.txt", e->d_name);
        json_decref(arr);
        free(text);
        free(ids);
    }
    closedir(d);
    ds4_tokens_free(&out);
    printf("sequences (mini vocab): %d/%d\n", pass, cases);
    CHECK(cases >= 3, "expected at least 3 sequence texts, found %d", cases);
    ds4_tokenizer_free(m);
}

/* ---------------------------------------------------------------------- */
/* Targeted Unicode and pre-tokenizer cases                                 */
/* ---------------------------------------------------------------------- */

typedef struct { char buf[512]; size_t n; const char *text; } pieces;

static int collect(void *ud, size_t s, size_t e) {
    pieces *p = ud;
    if (p->n + (e - s) + 1 >= sizeof p->buf) return 1;
    memcpy(p->buf + p->n, p->text + s, e - s);
    p->n += e - s;
    p->buf[p->n++] = '|';
    return 0;
}

static void check_split(const char *text, const char *want) {
    pieces p = { .n = 0, .text = text };
    ds4_pretokenize(text, strlen(text), collect, &p);
    p.buf[p.n] = 0;
    CHECK(strcmp(p.buf, want) == 0, "pre-tokens of \"%s\": got \"%s\", want \"%s\"", text,
          p.buf, want);
}

static void test_unicode(void) {
    static const struct { uint32_t cp; unsigned cls; } cls[] = {
        { 'a', DS4_UC_L }, { '7', DS4_UC_N }, { ' ', DS4_UC_WS }, { '\n', DS4_UC_WS },
        { '$', DS4_UC_S }, { '_', DS4_UC_P }, { 0x00, DS4_UC_OTHER }, { 0x7F, DS4_UC_OTHER },
        { 0x85, DS4_UC_WS }, { 0xA0, DS4_UC_WS }, { 0xAD, DS4_UC_OTHER }, /* soft hyphen Cf */
        { 0xBB, DS4_UC_P }, { 0xB2, DS4_UC_N }, { 0xBD, DS4_UC_N }, { 0xE9, DS4_UC_L },
        { 0x0301, DS4_UC_M }, { 0x0660, DS4_UC_N }, { 0x0E31, DS4_UC_M }, { 0x1680, DS4_UC_WS },
        { 0x2003, DS4_UC_WS }, { 0x200B, DS4_UC_OTHER }, { 0x200D, DS4_UC_OTHER },
        { 0x2026, DS4_UC_P }, { 0x2028, DS4_UC_WS }, { 0x2029, DS4_UC_WS },
        { 0x20AC, DS4_UC_S }, { 0x2160, DS4_UC_N }, { 0x2460, DS4_UC_N }, { 0x2581, DS4_UC_S },
        { 0x3000, DS4_UC_WS }, { 0x3002, DS4_UC_P }, { 0x3007, DS4_UC_N }, { 0x30FB, DS4_UC_P },
        { 0x4E00, DS4_UC_L }, { 0xAC00, DS4_UC_L }, { 0xE000, DS4_UC_OTHER },
        { 0xFE0F, DS4_UC_M }, { 0xFEFF, DS4_UC_OTHER }, { 0xFF10, DS4_UC_N },
        { 0xFF5C, DS4_UC_S }, { 0xFFFD, DS4_UC_S }, { 0xFFFF, DS4_UC_OTHER },
        { 0x1D7CE, DS4_UC_N }, { 0x1F600, DS4_UC_S }, { 0x1F3FB, DS4_UC_S },
        { 0x20000, DS4_UC_L }, { 0xE0001, DS4_UC_OTHER }, { 0x10FFFF, DS4_UC_OTHER },
        { 0x110000, DS4_UC_OTHER },
    };
    for (size_t i = 0; i < sizeof cls / sizeof cls[0]; i++)
        CHECK(ds4_uc_class(cls[i].cp) == cls[i].cls, "class of U+%04X: %u, want %u",
              cls[i].cp, ds4_uc_class(cls[i].cp), cls[i].cls);

    /* WHATWG replacement: maximal subparts. */
    static const struct { const char *in; size_t n; const char *want; } rep[] = {
        { "a\x80" "b", 3, "a\xef\xbf\xbd" "b" },
        { "\xe2\x82", 2, "\xef\xbf\xbd" },                 /* truncated: one U+FFFD */
        { "\xe0\x80\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* overlong: 3 */
        { "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
        { "\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
        { "\xf0\x9f\x98", 3, "\xef\xbf\xbd" },
        { "\xf0\x9f\x98" "a", 4, "\xef\xbf\xbd" "a" },
        { "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
        { "\xff", 1, "\xef\xbf\xbd" },
    };
    for (size_t i = 0; i < sizeof rep / sizeof rep[0]; i++) {
        unsigned char o[64];
        size_t n = 0, j = 0;
        while (j < rep[i].n) {
            uint32_t cp;
            int ok;
            j += ds4_utf8_next((const unsigned char *)rep[i].in + j, rep[i].n - j, &cp, &ok);
            n += ds4_utf8_encode(cp, o + n);
        }
        CHECK(n == strlen(rep[i].want) && memcmp(o, rep[i].want, n) == 0,
              "replacement case %zu", i);
    }

    /* The pre-tokenizer, piece by piece ('|' ends each piece). */
    check_split("Hello world", "Hello| world|");
    check_split("don't", "don|'t|");
    check_split("  foo", " | foo|");
    check_split("abc  \n", "abc|  \n|");
    check_split("\n\n  x", "\n\n| | x|");
    check_split("a\r\n\r\nb", "a|\r\n\r\n|b|");
    check_split("12345", "123|45|");
    check_split("x 1234y", "x| |123|4|y|");
    check_split("\xe2\x91\xa0" "1234", "\xe2\x91\xa0" "12|34|");            /* ①1234 */
    check_split("va.\xc2\xbb\n\nE", "va|.\xc2\xbb\n\n|E|");                 /* .»\n\n */
    check_split("x  \xe5\x9b\xbd", "x|  |\xe5\x9b\xbd|");                   /* x  国 */
    check_split("\xe3\x82\xa2\xe3\x83\xbb\xe3\x82\xa4", "\xe3\x82\xa2|\xe3\x83\xbb|\xe3\x82\xa4|");
    check_split("a\xc2\xa0" "b", "a|\xc2\xa0" "b|");                          /* NBSP prefixes */
    check_split("a\xe3\x80\x80\xe3\x80\x80" "b", "a|\xe3\x80\x80|\xe3\x80\x80" "b|");
    check_split("bom\xef\xbb\xbfhere", "bom|\xef\xbb\xbfhere|");              /* FEFF is not \s */
    check_split("\x01\x02" "a", "\x01|\x02" "a|");
    check_split("caf" "e\xcc\x81!", "cafe\xcc\x81|!|");                     /* mark joins */
    check_split("x.y", "x|.y|");
    check_split("..abc", "..|abc|");
    check_split(" ..\n\nx", " ..\n\n|x|");
    check_split("\tfoo", "\tfoo|");
    check_split("a \xe2\x82\xac" "5", "a| \xe2\x82\xac|5|");                 /* a €5 */
}

/* ---------------------------------------------------------------------- */
/* Streaming detokenizer on random splits                                   */
/* ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Turn text into ids along random cut points: each piece becomes its token
 * if the vocabulary has one, else one token per byte. */
static void random_ids(const ds4_tokenizer *t, const char *s, size_t n, ds4_tokens *ids) {
    ids->n = 0;
    size_t i = 0;
    while (i < n) {
        size_t k = 1 + rnd() % 6;
        if (k > n - i) k = n - i;
        int32_t id = ds4_tok_lookup(t, s + i, k);
        if (id >= 0) ds4_tokens_push(ids, id);
        else
            for (size_t j = 0; j < k; j++) ds4_tokens_push(ids, ds4_tok_lookup(t, s + i + j, 1));
        i += k;
    }
}

static void test_detok_random(const ds4_tokenizer *t) {
    static const char *texts[] = {
        "Perch\xc3\xa8 \xc2\xabs\xc3\xac\xc2\xbb, disse Renzo\xe2\x80\xa6 \xe2\x80\x94 gi\xc3\xa0!",
        "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf",
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x9f\x87\xae\xf0\x9f\x87\xb9 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xce\x9a\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1 \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d",
        "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 \xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1\xe0\xb8\xaa\xe0\xb8\x94\xe0\xb8\xb5 \xea\xb0\x80\xeb\x82\x98\xeb\x8b\xa4",
    };
    ds4_tokens ids = { 0 };
    ds4_buf chunk = { 0 }, all = { 0 };
    int runs = 0, pass = 0;
    for (int round = 0; round < 200; round++) {
        const char *s = texts[round % 5];
        size_t n = strlen(s);
        random_ids(t, s, n, &ids);
        ds4_detok d;
        ds4_detok_init(&d);
        all.n = 0;
        int ok = 1;
        for (size_t i = 0; i < ids.n; i++) {
            chunk.n = 0;
            ds4_detok_push(&d, t, ids.v[i], &chunk);
            if (!valid_utf8((unsigned char *)chunk.p, chunk.n)) ok = 0;
            ds4_buf_append(&all, chunk.p, chunk.n);
        }
        chunk.n = 0;
        ds4_detok_flush(&d, &chunk);
        if (chunk.n) ok = 0;     /* valid text leaves nothing pending */
        ok = ok && all.n == n && memcmp(all.p, s, n) == 0;
        runs++;
        pass += ok;
        CHECK(ok, "streaming detok, text %d round %d", round % 5, round);
    }
    /* Random bytes: chunks may hold invalid bytes, but the concatenation is
     * exact. */
    for (int round = 0; round < 200; round++) {
        unsigned char s[64];
        size_t n = 1 + rnd() % 64;
        for (size_t i = 0; i < n; i++) {
            uint32_t r = rnd();
            s[i] = (r & 3) ? (unsigned char)(0x80 + (r >> 8) % 0x75) : (unsigned char)(r >> 8);
        }
        random_ids(t, (char *)s, n, &ids);
        ds4_detok d;
        ds4_detok_init(&d);
        all.n = 0;
        for (size_t i = 0; i < ids.n; i++) ds4_detok_push(&d, t, ids.v[i], &all);
        ds4_detok_flush(&d, &all);
        int ok = all.n == n && memcmp(all.p, s, n) == 0;
        runs++;
        pass += ok;
        CHECK(ok, "streaming detok of random bytes, round %d", round);
    }
    printf("streaming detokenizer on random splits: %d/%d\n", pass, runs);
    ds4_tokens_free(&ids);
    ds4_buf_free(&chunk);
    ds4_buf_free(&all);
}

/* ---------------------------------------------------------------------- */
/* Robustness: random inputs, both modes, round trip                        */
/* ---------------------------------------------------------------------- */

static void test_random_inputs(const ds4_tokenizer *t) {
    static const char *frags[] = {
        " ", "  ", "\n", "\r\n", "\t", "a", "Z", "9", "12", "\xc2\xa0", "\xe3\x80\x80",
        "\xe5\x9b\xbd", "\xe3\x82\xa2", "\xcc\x81", "\xf0\x9f\x98\x80", "\xc2\xbb", ".", "'",
        "<think>", "</think>", "<\xef\xbd\x9cUser\xef\xbd\x9c>", "\xef\xbd\x9c", "<", "\x80",
        "\xe2\x82", "\xff", "\xf0\x9f", "\0", "\xe2\x91\xa0", "\xd9\xa3", "don't", "\xef\xbb\xbf",
    };
    ds4_tokens out = { 0 };
    ds4_buf dec = { 0 };
    unsigned char in[600], want[2000];
    int pass = 0, runs = 0;
    for (int round = 0; round < 3000; round++) {
        size_t n = 0;
        size_t parts = rnd() % 40;
        for (size_t p = 0; p < parts; p++) {
            if (rnd() % 4 == 0) {
                in[n++] = (unsigned char)rnd();
            } else {
                const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
                size_t l = f[0] ? strlen(f) : 1;
                if (n + l > sizeof in) break;
                memcpy(in + n, f, l);
                n += l;
            }
            if (n + 16 > sizeof in) break;
        }
        size_t wn = replace_invalid(in, n, want);
        for (int mode = 0; mode < 2; mode++) {
            out.n = 0;
            int rc = ds4_tokenize(t, (char *)in, n, mode, &out);
            int ok = rc == DS4_OK;
            for (size_t i = 0; ok && i < out.n; i++)
                if (out.v[i] < 0 || out.v[i] >= ds4_tok_n_vocab(t)) ok = 0;
            dec.n = 0;
            ds4_detokenize(t, out.v, out.n, &dec);
            ok = ok && dec.n == wn && memcmp(dec.p, want, wn) == 0;
            if (mode == DS4_TOK_PLAIN) {
                /* Plain mode never yields an added token. */
                const ds4_special_ids *sp = ds4_tok_special(t);
                for (size_t i = 0; i < out.n; i++)
                    if (out.v[i] == sp->think || out.v[i] == sp->user) ok = 0;
            }
            runs++;
            pass += ok;
            CHECK(ok, "random input round %d mode %d: round trip", round, mode);
        }
    }
    printf("random inputs (both modes, round trip): %d/%d\n", pass, runs);
    ds4_tokens_free(&out);
    ds4_buf_free(&dec);
}

/* ---------------------------------------------------------------------- */
/* Loading malformed vocabularies                                           */
/* ---------------------------------------------------------------------- */

/* GPT-2 spelling of a byte string. */
static size_t gpt2_spell(const unsigned char *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = b[i], cp;
        if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE) cp = c;
        else {
            unsigned k = 0;
            for (unsigned x = 0; x < c; x++)
                if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++;
            cp = 256 + k;
        }
        o += ds4_utf8_encode(cp, (unsigned char *)out + o);
    }
    return o;
}

enum {
    BAD_NONE, BAD_TOKENS_TYPE, BAD_MERGE_UNKNOWN, BAD_MERGE_RESULT, BAD_MERGE_FORMAT,
    BAD_NO_THINK, BAD_TYPES_LEN, BAD_MODEL, BAD_NO_BYTE, BAD_SPELLING, BAD_NO_MERGES,
    BAD_MODEL_ESC, BAD_MERGE_ESC,
};

/* 256 byte tokens + "ab" (merge "a b") + the chat added tokens. */
static int write_vocab(const char *path, int bad) {
    static const char *added[] = {
        "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<\xef\xbd\x9cUser\xef\xbd\x9c>", "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",
        "<think>", "</think>", "\xef\xbd\x9c" "DSML\xef\xbd\x9c",
    };
    char spell[256][8];
    gguf_str toks[300];
    int32_t types[300];
    size_t nt = 0;
    for (int b = 0; b < 256; b++) {
        if (bad == BAD_NO_BYTE && b == 'q') continue;
        unsigned char c = (unsigned char)b;
        size_t l = gpt2_spell(&c, 1, spell[b]);
        toks[nt].p = spell[b];
        toks[nt].len = l;
        types[nt++] = 1;
    }
    toks[nt].p = bad == BAD_SPELLING ? "a b" : "ab";
    toks[nt].len = 2 + (bad == BAD_SPELLING);
    types[nt++] = 1;
    for (size_t i = 0; i < 7; i++) {
        if (bad == BAD_NO_THINK && i == 4) continue;
        toks[nt].p = added[i];
        toks[nt].len = strlen(added[i]);
        types[nt++] = 3;
    }
    char *err = NULL;
    gguf_writer *w = gguf_writer_open(path, &err);
    if (!w) { free(err); return -1; }
    gguf_w_str(w, "general.architecture", "deepseek4", 9);
    const char *model = bad == BAD_MODEL ? "llama" : bad == BAD_MODEL_ESC ? "\x1b]0;x\x07\x1b[31m" : "gpt2";
    gguf_w_str(w, "tokenizer.ggml.model", model, strlen(model));
    if (bad == BAD_TOKENS_TYPE) gguf_w_arr(w, "tokenizer.ggml.tokens", GGUF_I32, types, nt);
    else gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, nt);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types,
               bad == BAD_TYPES_LEN ? nt - 1 : nt);
    gguf_str merges[1];
    merges[0].p = bad == BAD_MERGE_UNKNOWN ? "a xy" : bad == BAD_MERGE_RESULT ? "b a"
                : bad == BAD_MERGE_FORMAT ? "ab" : bad == BAD_MERGE_ESC ? "a \x1b[2J" : "a b";
    merges[0].len = strlen(merges[0].p);
    if (bad != BAD_NO_MERGES) gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    int rc = gguf_writer_close(w, &err);
    free(err);
    return rc;
}

static void test_load_errors(void) {
    char dir[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ds4_tok_test_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp failed"); return; }
    char path[600];
    snprintf(path, sizeof path, "%s/v.gguf", dir);
    static const struct { int bad; const char *needle; } cases[] = {
        { BAD_TOKENS_TYPE, "tokenizer.ggml.tokens" },
        { BAD_MERGE_UNKNOWN, "merge 0" },
        { BAD_MERGE_RESULT, "produces" },
        { BAD_MERGE_FORMAT, "left right" },
        { BAD_NO_THINK, "<think>" },
        { BAD_TYPES_LEN, "token_type" },
        { BAD_MODEL, "gpt2" },
        { BAD_NO_BYTE, "byte 0x71" },
        { BAD_SPELLING, "alphabet" },
        { BAD_NO_MERGES, "merges" },
        /* text from the file is named escaped (ds4_escape), never raw */
        { BAD_MODEL_ESC, "'\\x1b]0;x\\x07\\x1b[31m'" },
        { BAD_MERGE_ESC, "('a \\x1b[2J')" },
    };
    /* The good file first. */
    CHECK(write_vocab(path, BAD_NONE) == 0, "cannot write the test vocab");
    char *err = NULL;
    ds4_tokenizer *t = ds4_tokenizer_load(path, &err);
    CHECK(t != NULL, "tiny vocab does not load: %s", err ? err : "?");
    free(err);
    if (t) {
        ds4_tokens out = { 0 };
        ds4_tokenize(t, "abab<think>a", 12, DS4_TOK_SPECIAL, &out);
        int32_t ab = ds4_tok_lookup(t, "ab", 2), th = ds4_tok_special(t)->think;
        CHECK(out.n == 4 && out.v[0] == ab && out.v[1] == ab && out.v[2] == th &&
              out.v[3] == ds4_tok_lookup(t, "a", 1), "tiny vocab tokenization");
        ds4_tokens_free(&out);
        ds4_tokenizer_free(t);
    }
    int pass = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unlink(path);
        if (write_vocab(path, cases[i].bad)) { CHECK(0, "cannot write bad vocab %zu", i); continue; }
        err = NULL;
        t = ds4_tokenizer_load(path, &err);
        int ok = t == NULL && err && strstr(err, cases[i].needle) && !strchr(err, 0x1b) &&
                 !strchr(err, 0x07);
        pass += ok;
        CHECK(ok, "malformed vocab %d: loaded=%d, error '%s' (want '%s' in it)", cases[i].bad,
              t != NULL, err ? err : "(none)", cases[i].needle);
        if (ok && i == 0) printf("  e.g. error: %s\n", err);
        free(err);
        ds4_tokenizer_free(t);
    }
    err = NULL;
    t = ds4_tokenizer_load("/nonexistent/dir/x.gguf", &err);
    CHECK(t == NULL && err, "loading a missing file must fail with a message");
    free(err);
    unlink(path);
    rmdir(dir);
    printf("malformed vocabularies rejected: %d/%zu\n", pass, sizeof cases / sizeof cases[0]);
}


/* ---------------------------------------------------------------------- */
/* GLM's pre-tokenizer (tokenizer.ggml.pre = "glm4")                        */
/* ---------------------------------------------------------------------- */

/* Expected splits are GLM's regex (llama.cpp's CHATGLM4 set, see
 * tokenizer.c) applied with a Unicode regex engine: findall over the text,
 * which for this regex (no gaps) is the Isolated split. */
static void test_glm4_splits(void) {
    static const struct { const char *text, *want; } cases[] = {
        { "Hello world",
          "Hello| world|" },
        { "I'm here, you'LL see. They'RE 'Reilly's",
          "I|'m| here|,| you|'LL| see|.| They|'RE| '|Reilly|'s|" },
        { "12345 6789x",
          "123|45| |678|9|x|" },
        { "a1b22c333d4444",
          "a|1|b|22|c|333|d|444|4|" },
        { "  leading and   trailing  ",
          " | leading| and|  | trailing|  |" },
        { "line\n\nnext\r\n  \n\tx",
          "line|\n\n|next|\r\n  \n|\tx|" },
        { "\xe4""\xb8""\xad""\xe6""\x96""\x87""abc \xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e""\xe3""\x81""\xae""\xe3""\x83""\x86""\xe3""\x82""\xad""\xe3""\x82""\xb9""\xe3""\x83""\x88"" \xed""\x95""\x9c""\xea""\xb5""\xad""\xec""\x96""\xb4""",
          "\xe4""\xb8""\xad""\xe6""\x96""\x87""abc| \xe6""\x97""\xa5""\xe6""\x9c""\xac""\xe8""\xaa""\x9e""\xe3""\x81""\xae""\xe3""\x83""\x86""\xe3""\x82""\xad""\xe3""\x82""\xb9""\xe3""\x83""\x88""| \xed""\x95""\x9c""\xea""\xb5""\xad""\xec""\x96""\xb4""|" },
        { "e\xcc""\x81""te\xcc""\x81"" cafe\xcc""\x81""",
          "e|\xcc""\x81""te|\xcc""\x81""| cafe|\xcc""\x81""|" },
        { "$x !!a ?? ...\n\n",
          "$x| !!|a| ??| ...\n\n|" },
        { "tab\tsep\t\t1",
          "tab|\tsep|\t|\t|1|" },
        { "\xe3""\x80""\x80""\xe5""\x85""\xa8""\xe8""\xa7""\x92""\xe3""\x80""\x80""\xe7""\xa9""\xba""\xe7""\x99""\xbd""",
          "\xe3""\x80""\x80""\xe5""\x85""\xa8""\xe8""\xa7""\x92""|\xe3""\x80""\x80""\xe7""\xa9""\xba""\xe7""\x99""\xbd""|" },
        { "x\xc2""\xa0""y",
          "x|\xc2""\xa0""y|" },
        { "foo()bar[]",
          "foo|()|bar|[]|" },
        { "\xd9""\xa3""\xd9""\xa4""\xd9""\xa5"" \xe2""\x91""\xa0""\xe2""\x91""\xa1""\xe2""\x91""\xa2""\xe2""\x91""\xa3""",
          "\xd9""\xa3""\xd9""\xa4""\xd9""\xa5""| |\xe2""\x91""\xa0""\xe2""\x91""\xa1""\xe2""\x91""\xa2""|\xe2""\x91""\xa3""|" },
        { "don't",
          "don|'t|" },
        { "'",
          "'|" },
        { "a'",
          "a|'|" },
        { "'ll'x",
          "'ll|'x|" },
        { "\n",
          "\n|" },
        { "   ",
          "   |" },
        { "\xf0""\x9f""\x98""\x80"" emoji\xf0""\x9f""\x98""\x80""x",
          "\xf0""\x9f""\x98""\x80""| emoji|\xf0""\x9f""\x98""\x80""x|" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pieces p = { .n = 0, .text = cases[i].text };
        ds4_pretokenize_pre(DS4_PRE_GLM4, cases[i].text, strlen(cases[i].text), collect, &p);
        p.buf[p.n] = 0;
        CHECK(strcmp(p.buf, cases[i].want) == 0, "glm4 pre-tokens of \"%s\": got \"%s\", want \"%s\"",
              cases[i].text, p.buf, cases[i].want);
    }
    /* The same kind of text under DeepSeek's set, for contrast: CJK is cut
     * from Latin (R2) and a mark stays with its letter. */
    check_split("\xe4\xb8\xad" "abc e\xcc\x81", "\xe4\xb8\xad|abc| e\xcc\x81|");
}

/* A tiny GLM vocabulary: 256 byte tokens, "12", "123", the two halves of
 * "\xe4\xb8\xad" and "\xe4\xb8\xad" + "a" (which only one pre-token can
 * hold under GLM's regex: DeepSeek's splits CJK from Latin), GLM's chat
 * tokens.  `pre` is the tokenizer.ggml.pre it declares. */
static int write_glm_vocab(const char *path, const char *pre) {
    static const char *added[] = { "[gMASK]", "<sop>", "<|endoftext|>", "<|user|>", "<|assistant|>",
                                   "<think>", "</think>", "<|observation|>" };
    static const char *merged[] = { "12", "123", "\xe4\xb8", "\xe4\xb8\xad", "\xe4\xb8\xad" "a" };
    static const char *merge_l[] = { "1", "12", "\xe4", "\xe4\xb8", "\xe4\xb8\xad" };
    static const char *merge_r[] = { "2", "3", "\xb8", "\xad", "a" };
    char spell[256 + 5][32], mspell[5][64];
    gguf_str toks[300], merges[5];
    int32_t types[300];
    size_t nt = 0;
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        toks[nt].p = spell[nt];
        toks[nt].len = gpt2_spell(&c, 1, spell[nt]);
        types[nt++] = 1;
    }
    for (int i = 0; i < 5; i++) {
        toks[nt].p = spell[nt];
        toks[nt].len = gpt2_spell((const unsigned char *)merged[i], strlen(merged[i]), spell[nt]);
        types[nt++] = 1;
        size_t l = gpt2_spell((const unsigned char *)merge_l[i], strlen(merge_l[i]), mspell[i]);
        mspell[i][l++] = ' ';
        l += gpt2_spell((const unsigned char *)merge_r[i], strlen(merge_r[i]), mspell[i] + l);
        merges[i].p = mspell[i];
        merges[i].len = l;
    }
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++) {
        toks[nt].p = added[i];
        toks[nt].len = strlen(added[i]);
        types[nt++] = 3;
    }
    char *err = NULL;
    gguf_writer *w = gguf_writer_open(path, &err);
    if (!w) { free(err); return -1; }
    gguf_w_str(w, "general.architecture", "glm5", 4);
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    gguf_w_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, nt);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, nt);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 5);
    int rc = gguf_writer_close(w, &err);
    free(err);
    return rc;
}

static void test_glm4_vocab(void) {
    char dir[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ds4_tok_glm_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp failed"); return; }
    char path[600];
    snprintf(path, sizeof path, "%s/glm.gguf", dir);
    const char *text = "[gMASK]<sop><|user|>\xe4\xb8\xad" "a 12345<|assistant|><think>";
    for (int v = 0; v < 3; v++) {
        const char *pre = v == 0 ? "glm4" : v == 1 ? "chatglm-bpe" : "deepseek-v3";
        CHECK(write_glm_vocab(path, pre) == 0, "cannot write the GLM test vocab");
        char *err = NULL;
        ds4_tokenizer *t = ds4_tokenizer_load(path, &err);
        if (v < 2) {
            CHECK(t != NULL, "GLM vocab (%s) does not load: %s", pre, err ? err : "?");
        } else {
            /* A DeepSeek pre-tokenizer asks for DeepSeek's chat tokens. */
            CHECK(t == NULL && err && strstr(err, "DeepSeek V4"), "GLM tokens under deepseek-v3: %s",
                  err ? err : "(loaded)");
        }
        free(err);
        if (!t) continue;
        CHECK(ds4_tok_pre(t) == DS4_PRE_GLM4, "%s selects the glm4 pre-tokenizer", pre);
        const ds4_special_ids *sp = ds4_tok_special(t);
        CHECK(sp->bos == -1 && sp->dsml == -1 && sp->eos == ds4_tok_lookup(t, "<|endoftext|>", 13) &&
              sp->user == ds4_tok_lookup(t, "<|user|>", 8) && sp->assistant >= 0 && sp->think >= 0 &&
              sp->think_end >= 0, "GLM special ids");
        ds4_tokens out = { 0 };
        ds4_tokenize(t, text, strlen(text), DS4_TOK_SPECIAL, &out);
        int32_t want[] = { ds4_tok_lookup(t, "[gMASK]", 7), ds4_tok_lookup(t, "<sop>", 5), sp->user,
                           ds4_tok_lookup(t, "\xe4\xb8\xad" "a", 4), ds4_tok_lookup(t, " ", 1),
                           ds4_tok_lookup(t, "123", 3), ds4_tok_lookup(t, "4", 1), ds4_tok_lookup(t, "5", 1),
                           sp->assistant, sp->think };
        int same = out.n == sizeof want / sizeof want[0];
        for (size_t i = 0; same && i < out.n; i++) same = out.v[i] == want[i] && want[i] >= 0;
        CHECK(same, "GLM vocab tokenization (%s): %zu ids", pre, out.n);
        ds4_tokens_free(&out);
        ds4_tokenizer_free(t);
    }
    unlink(path);
    rmdir(dir);
}

int main(void) {
    shared = getenv("DS4_SHARED");
    if (!shared || !*shared) shared = "../shared";

    char *err = NULL;
    ds4_tokenizer *t = ds4_tokenizer_load(path_of("vocab/deepseek-v4-vocab.gguf"), &err);
    CHECK(t != NULL, "cannot load the V4 vocabulary: %s", err ? err : "?");
    free(err);
    if (t) {
        const ds4_special_ids *sp = ds4_tok_special(t);
        CHECK(sp->bos == 0 && sp->eos == 1 && sp->pad == 2 && sp->user == 128803 &&
              sp->assistant == 128804 && sp->think == 128821 && sp->think_end == 128822 &&
              sp->dsml == 128825 && sp->latest_reminder == 128828, "V4 special ids");
        CHECK(ds4_tok_lookup(t, " the", 4) >= 3 && ds4_tok_lookup(t, "<think>", 7) == 128821,
              "ds4_tok_lookup");
        CHECK(ds4_token_bytes(t, -1, NULL) == NULL && ds4_token_bytes(t, 129280, NULL) == NULL,
              "out-of-range ids have no bytes");
        test_encode(t);
        test_decode(t);
        test_token_table(t);
        test_detok_random(t);
    }
    test_sequences();
    test_unicode();
    {
        ds4_tokenizer *m = ds4_tokenizer_load(path_of("vocab/mini-vocab.gguf"), NULL);
        if (m) test_random_inputs(m);
        ds4_tokenizer_free(m);
    }
    test_load_errors();
    test_glm4_splits();
    test_glm4_vocab();
    ds4_tokenizer_free(t);
    printf("test_tokenizer: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
