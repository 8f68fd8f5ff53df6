/*
 * ds4_text.h -- text in and out: the tokenizer and streaming detokenizer, chat prompt
 * rendering (docs/PROMPT_FORMAT.md; DeepSeek V4 and GLM 5.x) and the
 * streaming tool-call parsers (DSML for V4, the GLM XML calls).
 * Implemented in src/text/.
 *
 * Part of the public API (ds4.h includes every part; its header has the
 * conventions: return codes, err messages, threads).
 */
#ifndef DS4_API_TEXT_H
#define DS4_API_TEXT_H

#include "ds4_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Tokenizer (byte-level BPE with the DeepSeek V3/V4 pre-tokenizer, or GLM's */
/* when the vocabulary's tokenizer.ggml.pre is "glm4").                      */
/* Implemented in tokenizer.c.                                               */
/* ------------------------------------------------------------------------ */

typedef struct ds4_tokenizer ds4_tokenizer;

/* Ids of the tokens the chat format uses, looked up by their text; -1 when a
 * vocabulary lacks one (BOS, EOS, User, Assistant, think, /think and DSML are
 * required: loading fails without them).  A GLM vocabulary ("glm4"
 * pre-tokenizer) fills them with GLM's tokens instead: eos = pad =
 * <|endoftext|>, user <|user|>, assistant <|assistant|>, think, /think
 * (required); bos, dsml and latest_reminder are -1. */
typedef struct {
    int32_t bos, eos, pad;
    int32_t user, assistant;
    int32_t think, think_end;
    int32_t dsml;
    int32_t latest_reminder;
} ds4_special_ids;

enum {
    DS4_TOK_PLAIN = 0,    /* never produce added/control tokens (user text) */
    DS4_TOK_SPECIAL = 1,  /* every added-token string becomes its id (rendered prompts) */
};

/* Load a tokenizer from any GGUF that carries tokenizer metadata (a full
 * model or a vocab-only file). */
ds4_tokenizer *ds4_tokenizer_load(const char *gguf_path, char **err);
void ds4_tokenizer_free(ds4_tokenizer *tok);

int32_t ds4_tok_n_vocab(const ds4_tokenizer *tok);
/* The chat format a vocabulary implies (GLM's pre-tokenizer: DS4_FORMAT_GLM),
 * for a tool that loads the tokenizer without the model (ds4
 * --dump-tokens); with a model, ds4_model_format decides. */
int ds4_tok_format(const ds4_tokenizer *tok);
const ds4_special_ids *ds4_tok_special(const ds4_tokenizer *tok);
/* Id of a token given its exact text (added tokens by their UTF-8 text, BPE
 * tokens by their byte string); -1 if absent. */
int32_t ds4_tok_lookup(const ds4_tokenizer *tok, const char *text, size_t len);

/* Append the ids of `text` to `out`.  `mode` is DS4_TOK_PLAIN or
 * DS4_TOK_SPECIAL.  Invalid UTF-8 is replaced by U+FFFD (one per maximal
 * invalid subsequence) before pre-tokenization.  Never fails on any input
 * except out of memory. */
int ds4_tokenize(const ds4_tokenizer *tok, const char *text, size_t len,
                 int mode, ds4_tokens *out);

/* The exact bytes of one token (not NUL-terminated); NULL/0 for an id out of
 * range. */
const char *ds4_token_bytes(const ds4_tokenizer *tok, int32_t id, size_t *len);
/* Append the exact bytes of a token sequence. */
int ds4_detokenize(const ds4_tokenizer *tok, const int32_t *ids, size_t n,
                   ds4_buf *out);

/* Incremental detokenization for streaming: bytes are released only once
 * they form complete UTF-8 characters, so a multi-byte character split across
 * tokens is never cut.  Bytes that can never become valid UTF-8 are released
 * as they are (the caller decides how to present them). */
typedef struct {
    unsigned char pend[8];
    int npend;
} ds4_detok;

void ds4_detok_init(ds4_detok *d);
/* Append to `out` the bytes of token `id` that are complete now. */
int  ds4_detok_push(ds4_detok *d, const ds4_tokenizer *tok, int32_t id,
                    ds4_buf *out);
/* Flush whatever is pending (end of stream). */
int  ds4_detok_flush(ds4_detok *d, ds4_buf *out);

/* ------------------------------------------------------------------------ */
/* Chat prompt rendering (docs/PROMPT_FORMAT.md).  Implemented in render.c.  */
/* ------------------------------------------------------------------------ */

typedef enum {
    DS4_ROLE_SYSTEM,
    DS4_ROLE_USER,
    DS4_ROLE_ASSISTANT,
    DS4_ROLE_TOOL,
    DS4_ROLE_DEVELOPER,
    DS4_ROLE_LATEST_REMINDER,
} ds4_role;

typedef enum {
    DS4_THINK_NONE = 0,   /* chat mode: every assistant turn opens with </think> */
    DS4_THINK_HIGH = 1,   /* thinking mode (the default) */
    DS4_THINK_MAX = 2,    /* thinking + the max-effort paragraph after BOS */
    DS4_THINK_LOW = 3,    /* GLM "Reasoning Effort: Low"; V4 renders it as HIGH
                           * (DeepSeek maps low effort to high) */
} ds4_think;

/* The prompt format of a model family.  Zero is DeepSeek V4, so a
 * zero-initialised ds4_render_opts keeps the V4 format. */
typedef enum {
    DS4_FORMAT_DSV4 = 0,  /* BOS, <｜User｜>/<｜Assistant｜>, DSML tool calls */
    DS4_FORMAT_GLM = 1,   /* GLM 5.x: [gMASK]<sop>, <|user|>/<|assistant|>,
                           * <tool_call> XML calls (render_glm.c) */
} ds4_chat_format;

/* The smallest context for which think-max is honoured (DeepSeek's
 * recommendation, ds4's rule); below it think-max renders as high. */
#define DS4_THINK_MAX_MIN_CTX 393216

typedef struct {
    const char *id;          /* tool call id (may be NULL) */
    const char *name;
    const char *arguments;   /* the arguments string as the client sent it:
                              * normally a JSON object, anything else becomes
                              * one string parameter named "arguments" */
} ds4_tool_call;

typedef struct {
    ds4_role role;
    const char *content;     size_t content_len;    /* NULL = empty */
    const char *reasoning;   size_t reasoning_len;  /* assistant only, NULL = none */
    const ds4_tool_call *tool_calls; int n_tool_calls;   /* assistant only */
    /* Exact tool-call text previously sampled for these tool calls, replayed
     * verbatim instead of the canonical rendering; NULL = canonical.  V4:
     * the DSML block from "\n\n<｜DSML｜tool_calls>" to
     * "</｜DSML｜tool_calls>"; GLM: from the first "<tool_call>" to the last
     * "</tool_call>" (ds4_glm_calls_block_text). */
    const char *dsml_exact;
    const char *tool_call_id;          /* tool results */
    const char *tools_json;            /* system/developer: JSON array of
                                        * {"type":"function","function":{..}} */
    const char *response_format_json;  /* system/developer: JSON value */
    int wo_eos;                        /* assistant prefix to be continued */
} ds4_message;

typedef struct {
    ds4_think think;
    int keep_all_reasoning;  /* V4: 0 = DeepSeek default (drop_thinking) */
    ds4_chat_format format;  /* 0 = DeepSeek V4 */
    int clear_thinking;      /* GLM: 1 = drop the reasoning of assistant turns
                              * before the last user message (the template's
                              * clear_thinking=true); 0 = GLM's default, keep */
} ds4_render_opts;

/* Render a conversation to the prompt text (BOS / "[gMASK]<sop>" included),
 * appending to `out`, in opts->format.  Fails (DS4_EINVAL + message) only
 * on malformed JSON in tools / response_format. */
int ds4_render_chat(const ds4_message *msgs, int n_msgs,
                    const ds4_render_opts *opts, ds4_buf *out, char **err);

/* Canonical DSML text of one assistant tool-call block (what render emits
 * when no exact text is known). */
int ds4_render_tool_calls(const ds4_tool_call *calls, int n, ds4_buf *out,
                          char **err);
/* The same for GLM: <tool_call>NAME<arg_key>K</arg_key><arg_value>V
 * </arg_value>...</tool_call> per call, nothing between calls (string
 * values raw, others as Python's json.dumps).  Implemented in render_glm.c. */
int ds4_render_tool_calls_glm(const ds4_tool_call *calls, int n, ds4_buf *out,
                              char **err);

/* ------------------------------------------------------------------------ */
/* DSML tool-call parser (streaming).  Implemented in dsml.c.                */
/* ------------------------------------------------------------------------ */

typedef struct ds4_dsml ds4_dsml;

typedef enum {
    DS4_DSML_TEXT,        /* visible content text (before the block) */
    DS4_DSML_CALL_BEGIN,  /* an invoke header was recognised: name known */
    DS4_DSML_ARGS_DELTA,  /* next fragment of the call's JSON arguments */
    DS4_DSML_CALL_END,    /* the invoke closed; arguments are complete */
    DS4_DSML_DONE,        /* </｜DSML｜tool_calls> seen */
    DS4_DSML_ERROR,       /* malformed DSML; `text` holds the reason */
} ds4_dsml_event_kind;

typedef struct {
    ds4_dsml_event_kind kind;
    int call_index;           /* CALL_* and ARGS_DELTA */
    const char *text;         /* TEXT / ARGS_DELTA bytes, CALL_BEGIN name, ERROR reason */
    size_t len;
} ds4_dsml_event;

typedef void (*ds4_dsml_cb)(void *ud, const ds4_dsml_event *ev);

ds4_dsml *ds4_dsml_new(ds4_dsml_cb cb, void *ud);
void ds4_dsml_free(ds4_dsml *p);
/* Feed generated content bytes (any split).  Events are delivered through
 * the callback as soon as they are certain; text that might be the start of
 * a DSML block is held back until it is decided. */
int  ds4_dsml_feed(ds4_dsml *p, const char *text, size_t len);
/* End of generation: flushes held-back text; an unterminated block is an
 * error event. Returns DS4_OK or DS4_EFORMAT. */
int  ds4_dsml_finish(ds4_dsml *p);
/* 1 while the parser is inside a parameter value (payload), 0 while it is
 * in DSML syntax or plain text.  The generation loop samples syntax greedily
 * and payloads with the request's sampling. */
int  ds4_dsml_in_payload(const ds4_dsml *p);
/* 1 once a tool-call block has started. */
int  ds4_dsml_in_block(const ds4_dsml *p);
/* The exact bytes of the block seen so far (for exact replay). */
const char *ds4_dsml_block_text(const ds4_dsml *p, size_t *len);

/* ------------------------------------------------------------------------ */
/* GLM tool-call parser (streaming).  Implemented in glm_calls.c.            */
/* ------------------------------------------------------------------------ */

/* The contract of the DSML parser above, for the GLM format
 * <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
 * (docs/PROMPT_FORMAT.md §12.3), with the same events and callback: TEXT
 * before the first call; per call CALL_BEGIN (name), one ARGS_DELTA with the
 * whole arguments JSON and CALL_END at its </tool_call>; DONE from
 * ds4_glm_calls_finish after the last call; ERROR once on malformed calls.
 * `tools_json` is the request's tools array (as in ds4_message.tools_json;
 * NULL = no schemas): a value whose schema type is "string" is taken as raw
 * text, one of a non-string type must be JSON, others are JSON when they
 * parse as a non-string JSON value, else raw text.  ds4_glm_calls_new
 * returns NULL when out of memory or when tools_json is not JSON. */
typedef struct ds4_glm_calls ds4_glm_calls;

ds4_glm_calls *ds4_glm_calls_new(const char *tools_json, ds4_dsml_cb cb, void *ud);
void ds4_glm_calls_free(ds4_glm_calls *p);
int  ds4_glm_calls_feed(ds4_glm_calls *p, const char *text, size_t len);
int  ds4_glm_calls_finish(ds4_glm_calls *p);
/* 1 inside an <arg_value> (payload), 0 in tags and plain text. */
int  ds4_glm_calls_in_payload(const ds4_glm_calls *p);
/* 1 once a <tool_call> has started. */
int  ds4_glm_calls_in_block(const ds4_glm_calls *p);
/* The exact bytes from the first "<tool_call>" to the last "</tool_call>"
 * seen (whitespace between calls included, after the last one not), for
 * exact replay through ds4_message.dsml_exact. */
const char *ds4_glm_calls_block_text(const ds4_glm_calls *p, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* DS4_API_TEXT_H */
