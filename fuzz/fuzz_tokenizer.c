/*
 * fuzz_tokenizer.c -- libFuzzer target for the tokenizer: arbitrary bytes
 * are tokenized in both modes, decoded back (in one go and through the
 * streaming detokenizer) and must equal the input after U+FFFD replacement
 * of invalid UTF-8.
 *
 * Owns: nothing outside this file.  Build and run from the repo root:
 *   clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
 *       -Isrc fuzz/fuzz_tokenizer.c src/text/tokenizer.c src/text/unicode.c src/gguf/gguf.c \
 *       src/base/buf.c -o build/fuzz_tokenizer
 *   mkdir -p fuzz/corpus-tok && build/fuzz_tokenizer -max_total_time=60 fuzz/corpus-tok
 * The vocabulary is $DS4_FUZZ_VOCAB, else $DS4_SHARED/vocab/mini-vocab.gguf,
 * else ../shared/vocab/mini-vocab.gguf (the small vocabulary keeps the BPE
 * merges few and the runs fast; the real one works too).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"

static ds4_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[1024];
    const char *v = getenv("DS4_FUZZ_VOCAB");
    if (!v || !*v) {
        const char *sh = getenv("DS4_SHARED");
        snprintf(path, sizeof path, "%s/vocab/mini-vocab.gguf", sh && *sh ? sh : "../shared");
        v = path;
    }
    char *err = NULL;
    tok = ds4_tokenizer_load(v, &err);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err ? err : "cannot load the vocabulary");
        exit(1);
    }
    return 0;
}

/* Reference replacement, written independently of unicode.c: at each
 * position, the longest prefix of a well-formed sequence (Unicode Table
 * 3-7) is kept if complete, else replaced by one U+FFFD. */
static size_t replace_invalid(const uint8_t *b, size_t n, uint8_t *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned c = b[i];
        if (c < 0x80) { out[o++] = (uint8_t)c; i++; continue; }
        size_t k = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) { k = 2; lo = 0xA0; }
        else if (c == 0xED) { k = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) k = 2;
        else if (c == 0xF0) { k = 3; lo = 0x90; }
        else if (c == 0xF4) { k = 3; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        size_t good = 1;
        for (size_t j = 1; k && j <= k && i + j < n; j++) {
            unsigned d = b[i + j];
            if (d < (j == 1 ? lo : 0x80) || d > (j == 1 ? hi : 0xBF)) break;
            good++;
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tok) LLVMFuzzerInitialize(NULL, NULL);
    uint8_t *want = malloc(3 * size + 1);
    if (!want) return 0;
    size_t wn = replace_invalid(data, size, want);
    int32_t nv = ds4_tok_n_vocab(tok);
    const ds4_special_ids *sp = ds4_tok_special(tok);
    for (int mode = 0; mode < 2; mode++) {
        ds4_tokens out = { 0 };
        ds4_buf dec = { 0 }, str = { 0 };
        if (ds4_tokenize(tok, (const char *)data, size, mode, &out) != DS4_OK) abort();
        for (size_t i = 0; i < out.n; i++) {
            if (out.v[i] < 0 || out.v[i] >= nv) abort();
            if (mode == DS4_TOK_PLAIN &&
                (out.v[i] == sp->bos || out.v[i] == sp->user || out.v[i] == sp->think))
                abort();
        }
        if (ds4_detokenize(tok, out.v, out.n, &dec) != DS4_OK) abort();
        if (dec.n != wn || (wn && memcmp(dec.p, want, wn))) abort();
        ds4_detok d;
        ds4_detok_init(&d);
        for (size_t i = 0; i < out.n; i++)
            if (ds4_detok_push(&d, tok, out.v[i], &str) != DS4_OK) abort();
        if (ds4_detok_flush(&d, &str) != DS4_OK) abort();
        if (str.n != wn || (wn && memcmp(str.p, want, wn))) abort();
        ds4_tokens_free(&out);
        ds4_buf_free(&dec);
        ds4_buf_free(&str);
    }
    free(want);
    return 0;
}
