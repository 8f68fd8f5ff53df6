/*
 * llamacpp_tok.c -- llama.cpp's tokenizer on text files, for
 * tests/t_glm_tokenizer.sh (ds4's ids against an implementation nobody
 * here wrote).  Built by that script against the llama.cpp release of
 * bench/llamacpp/setup.sh; never part of `make`.
 *
 *   llamacpp_tok VOCAB.gguf FILE...
 *
 * Loads VOCAB.gguf vocab-only and prints, per FILE, the ids of its bytes as
 * one line "[a, b, ...]" (ds4 --tokenize's format), added tokens parsed,
 * nothing added (no BOS).
 */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l; (void)t; (void)u; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: llamacpp_tok VOCAB.gguf FILE...\n"); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "llamacpp_tok: cannot load %s\n", argv[1]); return 1; }
    const struct llama_vocab *v = llama_model_get_vocab(m);
    static char buf[1 << 16];
    static llama_token ids[1 << 16];
    for (int a = 2; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (!f) { fprintf(stderr, "llamacpp_tok: cannot read %s\n", argv[a]); return 1; }
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        int k = llama_tokenize(v, buf, (int)n, ids, 1 << 16, false, true);
        if (k < 0) { fprintf(stderr, "llamacpp_tok: %s: too many tokens\n", argv[a]); return 1; }
        fputc('[', stdout);
        for (int i = 0; i < k; i++) printf(i ? ", %d" : "%d", ids[i]);
        fputs("]\n", stdout);
    }
    llama_model_free(m);
    return 0;
}
