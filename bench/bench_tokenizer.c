/*
 * bench_tokenizer.c -- tokenizer throughput: tokens, seconds (median of 5
 * runs) and tokens/s for one file.
 *
 * Owns: nothing outside this program.  Build and run from the repo root:
 *   make build/libds4.a
 *   cc -O3 -march=native -std=c11 -D_GNU_SOURCE -Isrc bench/bench_tokenizer.c \
 *      build/libds4.a -ljansson -lm -pthread -o build/bench_tokenizer
 *   build/bench_tokenizer [-m VOCAB.gguf] [-r REPEAT] [-c CHUNK] [-s] FILE
 * -r concatenates the file REPEAT times (in memory) before tokenizing;
 * -c tokenizes the text in separate calls of about CHUNK bytes, cut at line
 * ends (chat-message-sized calls: no pre-token cache below 2 KiB);
 * -s uses DS4_TOK_SPECIAL instead of DS4_TOK_PLAIN.
 * The vocabulary defaults to $DS4_SHARED/vocab/deepseek-v4-vocab.gguf
 * (DS4_SHARED defaults to ../shared).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ds4.h"
#include "bench_util.h"

int main(int argc, char **argv) {
    const char *vocab = NULL, *file = NULL;
    int repeat = 1, mode = DS4_TOK_PLAIN;
    size_t chunk = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) vocab = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) chunk = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-s")) mode = DS4_TOK_SPECIAL;
        else if (argv[i][0] != '-' && !file) file = argv[i];
        else {
            fprintf(stderr, "usage: %s [-m VOCAB.gguf] [-r REPEAT] [-c CHUNK] [-s] FILE\n", argv[0]);
            return 2;
        }
    }
    if (!file || repeat < 1) {
        fprintf(stderr, "usage: %s [-m VOCAB.gguf] [-r REPEAT] [-c CHUNK] [-s] FILE\n", argv[0]);
        return 2;
    }
    char vpath[1024];
    if (!vocab) {
        const char *sh = getenv("DS4_SHARED");
        snprintf(vpath, sizeof vpath, "%s/vocab/deepseek-v4-vocab.gguf", sh && *sh ? sh : "../shared");
        vocab = vpath;
    }
    FILE *f = fopen(file, "rb");
    if (!f) { perror(file); return 1; }
    fseek(f, 0, SEEK_END);
    long fl = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (fl < 0) { perror(file); return 1; }
    size_t n1 = (size_t)fl, n = n1 * (size_t)repeat;
    char *text = malloc(n ? n : 1);
    if (!text || fread(text, 1, n1, f) != n1) { fprintf(stderr, "%s: read failed\n", file); return 1; }
    fclose(f);
    for (int r = 1; r < repeat; r++) memcpy(text + (size_t)r * n1, text, n1);

    double t0 = bench_now();
    char *err = NULL;
    ds4_tokenizer *tok = ds4_tokenizer_load(vocab, &err);
    if (!tok) { fprintf(stderr, "%s\n", err ? err : "load failed"); return 1; }
    double tload = bench_now() - t0;

    ds4_tokens out = { 0 };
    double secs[5];
    for (int run = 0; run < 5; run++) {
        out.n = 0;
        double a = bench_now();
        if (!chunk) {
            ds4_tokenize(tok, text, n, mode, &out);
        } else {
            size_t i = 0;
            while (i < n) {
                size_t e = i + chunk < n ? i + chunk : n;
                while (e < n && text[e - 1] != '\n') e++;
                ds4_tokenize(tok, text + i, e - i, mode, &out);
                i = e;
            }
        }
        secs[run] = bench_now() - a;
    }
    double med = bench_median(secs, 5);
    printf("file: %s (%zu bytes%s%s)\n", file, n, repeat > 1 ? ", repeated" : "",
           chunk ? ", chunked" : "");
    printf("vocab load: %.3f s\n", tload);
    printf("tokens: %zu\n", out.n);
    printf("seconds (median of 5): %.4f\n", med);
    printf("tokens/s: %.0f\n", (double)out.n / med);
    printf("MB/s: %.1f\n", (double)n / med / 1e6);
    ds4_tokens_free(&out);
    ds4_tokenizer_free(tok);
    free(text);
    return 0;
}
