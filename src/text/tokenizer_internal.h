/*
 * tokenizer_internal.h -- library-internal entry points of tokenizer.c that
 * the public header does not expose.
 *
 * Owns: nothing but these declarations.  Must not: be included by front
 * ends (cli/, server/), which use ds4.h only.
 */
#ifndef DS4_TOKENIZER_INTERNAL_H
#define DS4_TOKENIZER_INTERNAL_H

#include "ds4.h"

struct gguf_file;

/* Build a tokenizer from the metadata of an already opened GGUF (model.c
 * uses this so that the file is parsed once).  Copies everything it needs:
 * the file may be closed afterwards.  On error returns NULL and stores a
 * malloc'd message naming the file and the problem in *err (if err). */
ds4_tokenizer *ds4_tokenizer_from_gguf(const struct gguf_file *f, char **err);

/* The pre-tokenizer alone (for tests and diagnostics): calls `cb` once per
 * pre-token of text[0..len), in order, with its byte range.  `text` must be
 * valid UTF-8 (ds4_tokenize replaces invalid sequences before this step).
 * Stops and returns the callback's value when it is non-zero. */
typedef int (*ds4_pretok_cb)(void *ud, size_t start, size_t end);
int ds4_pretokenize(const char *text, size_t len, ds4_pretok_cb cb, void *ud);

/* The pre-tokenizer a vocabulary uses, chosen from tokenizer.ggml.pre:
 * "glm4" / "chatglm-bpe" -> GLM4 (GLM's one regex), anything else or
 * absent -> DeepSeek V3's three regexes. */
enum {
    DS4_PRE_DEEPSEEK_V3 = 0,
    DS4_PRE_GLM4 = 1,
};
int ds4_tok_pre(const ds4_tokenizer *t);
/* ds4_pretokenize with a given DS4_PRE_* set. */
int ds4_pretokenize_pre(int pre, const char *text, size_t len, ds4_pretok_cb cb, void *ud);

#endif /* DS4_TOKENIZER_INTERNAL_H */
