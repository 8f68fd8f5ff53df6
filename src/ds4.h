/*
 * ds4.h -- the public engine API of ds4.
 *
 * ds4 is an inference engine for one model family: DeepSeek V4 Flash (and V4
 * PRO, which shares the layout).  This header is everything a front end (the
 * `ds4` CLI, `ds4-server`, `ds4-bench`, `ds4-kv`) may use.  Front ends never
 * include the internal headers (gguf.h, quant.h, model.h, ...) and never touch
 * tensors (ds4-synth, a file generator, and the kernel benches do): they load a model, tokenize, render prompts, drive a session and
 * sample.
 *
 * Conventions
 *   - Functions that can fail return 0 on success and a negative DS4_E* code
 *     on failure.  Where an `err` out-parameter is given, a malloc'd,
 *     human-readable message (possibly several lines) is stored there on
 *     failure; the caller frees it.  `err` may be NULL.
 *   - Token ids are int32_t.  Text is UTF-8 bytes with an explicit length.
 *   - Threads: a model, a session, a sampler, a DSML parser and a KV store
 *     are each driven by one thread at a time (a model's sessions share its
 *     thread pool, so evaluate on one model from one thread at a time).  A
 *     loaded tokenizer is read-only and may be used by many threads at once;
 *     ds4_render_chat, ds4_render_tool_calls and the ds4_buf/ds4_tokens
 *     helpers are pure functions of their arguments and are thread-safe.
 */
#ifndef DS4_H
#define DS4_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The release number; ds4_version() is what binaries print (--version):
 * this number plus the `git describe` of the build when it has one. */
#define DS4_VERSION "0.1.0"
const char *ds4_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

enum {
    DS4_OK = 0,
    DS4_EINVAL = -1,     /* bad argument / malformed input */
    DS4_ENOMEM = -2,     /* allocation failed */
    DS4_EIO = -3,        /* file or system error */
    DS4_EFORMAT = -4,    /* malformed GGUF / snapshot / wrong model family */
    DS4_ECTX = -5,       /* the context is full: nothing was evaluated */
    DS4_ECANCEL = -6,    /* a progress/cancel callback asked to stop */
    DS4_EUNSUP = -7,     /* valid but unsupported (e.g. a tensor type) */
};

const char *ds4_strerror(int code);

/* ------------------------------------------------------------------------ */
/* Growable buffers used across the API (no per-token allocation: callers    */
/* reuse them; `n` is reset by the caller, functions append).                */
/* ------------------------------------------------------------------------ */

/* Failures are sticky: the first append/reserve that cannot grow a buffer
 * (out of memory, or a size overflow) records its code in `err`, and from
 * then on every append/reserve on that buffer does nothing and returns the
 * same code.  So a builder may append many pieces and check once at the end
 * with ds4_buf_failed / ds4_tokens_failed: the contents are then a prefix
 * of what was asked and must not be used.  Library functions that take a
 * failed buffer fail too.  Resetting `n` keeps the error; ds4_*_free (or
 * ds4_buf_clear) clears it.  Zero-initialise a buffer before first use. */
typedef struct {
    int32_t *v;
    size_t n, cap;
    int err;           /* 0, or the DS4_E* code of the first failure (sticky) */
} ds4_tokens;

typedef struct {
    char *p;           /* always NUL-terminated when cap > 0 */
    size_t n, cap;
    int err;           /* 0, or the DS4_E* code of the first failure (sticky) */
} ds4_buf;

int  ds4_tokens_push(ds4_tokens *t, int32_t id);
int  ds4_tokens_reserve(ds4_tokens *t, size_t cap);
/* Append n ids. */
int  ds4_tokens_append(ds4_tokens *t, const int32_t *ids, size_t n);
/* 0, or the code of the first failed push/reserve since the last free. */
int  ds4_tokens_failed(const ds4_tokens *t);
void ds4_tokens_free(ds4_tokens *t);
int  ds4_buf_append(ds4_buf *b, const void *data, size_t len);
/* Make room for `extra` more bytes beyond n (contents undefined). */
int  ds4_buf_reserve(ds4_buf *b, size_t extra);
int  ds4_buf_puts(ds4_buf *b, const char *s);
int  ds4_buf_printf(ds4_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* 0, or the code of the first failed append/reserve since the last
 * free/clear. */
int  ds4_buf_failed(const ds4_buf *b);
/* Empty the buffer (memory kept) and forget a failure. */
void ds4_buf_clear(ds4_buf *b);
void ds4_buf_free(ds4_buf *b);

/* The one way the library (and the front ends) report an error message:
 * stores a malloc'd message formatted like printf in *err (when err is not
 * NULL), freeing one already there, and returns `code`, so that a failure
 * path reads `return ds4_set_err(err, DS4_EINVAL, "bad %s", what);`.  If the
 * message itself cannot be allocated *err is left NULL (callers print
 * ds4_strerror(code) then). */
int ds4_set_err(char **err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ds4_set_errv(char **err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* ------------------------------------------------------------------------ */
/* Tokenizer (byte-level BPE with the DeepSeek V3/V4 pre-tokenizer).         */
/* Implemented in tokenizer.c.                                               */
/* ------------------------------------------------------------------------ */

typedef struct ds4_tokenizer ds4_tokenizer;

/* Ids of the tokens the chat format uses, looked up by their text; -1 when a
 * vocabulary lacks one (BOS, EOS, User, Assistant, think, /think and DSML are
 * required: loading fails without them). */
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
} ds4_think;

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
    /* Exact DSML block previously sampled for these tool calls (from
     * "\n\n<｜DSML｜tool_calls>" to "</｜DSML｜tool_calls>"), replayed
     * verbatim instead of the canonical rendering; NULL = canonical. */
    const char *dsml_exact;
    const char *tool_call_id;          /* tool results */
    const char *tools_json;            /* system/developer: JSON array of
                                        * {"type":"function","function":{..}} */
    const char *response_format_json;  /* system/developer: JSON value */
    int wo_eos;                        /* assistant prefix to be continued */
} ds4_message;

typedef struct {
    ds4_think think;
    int keep_all_reasoning;  /* 0 = DeepSeek default (drop_thinking) */
} ds4_render_opts;

/* Render a conversation to the prompt text (BOS included), appending to
 * `out`.  Fails (DS4_EINVAL + message) only on malformed JSON in tools /
 * response_format. */
int ds4_render_chat(const ds4_message *msgs, int n_msgs,
                    const ds4_render_opts *opts, ds4_buf *out, char **err);

/* Canonical DSML text of one assistant tool-call block (what render emits
 * when no exact text is known). */
int ds4_render_tool_calls(const ds4_tool_call *calls, int n, ds4_buf *out,
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
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct ds4_model ds4_model;

typedef struct {
    int n_threads;            /* 0 = number of online cores */
    /* --ssd-streaming: the routed experts are not used through the mmap
     * but read from the file (pread, O_DIRECT where the file system allows
     * it) into a fixed cache of ssd_cache_bytes (0 = half of MemAvailable
     * after the resident weights); the other weights are copied into
     * memory at load.  Logits are bit-identical to a resident run. */
    int ssd_streaming;
    uint64_t ssd_cache_bytes;
    int ssd_readers;          /* reader threads; 0 = 4 */
    const char *mtp_path;     /* --mtp: a GGUF holding the MTP block (mtp.0.*);
                                 NULL = use the main file's, if it has one */
} ds4_model_params;

void ds4_model_params_default(ds4_model_params *p);

/* Open a DeepSeek V4 GGUF: mmap, parse, bind and validate every tensor and
 * metadata value.  All problems are reported at once in *err. */
ds4_model *ds4_model_load(const char *path, const ds4_model_params *p,
                          char **err);
void ds4_model_free(ds4_model *m);
/* 1 when an MTP block (docs/MTP.md) is bound: ds4_mtp_draft can draft. */
int ds4_model_has_mtp(const ds4_model *m);

typedef struct {
    const char *name;         /* general.name or the file name */
    int n_layer, n_embd, n_vocab, n_head, head_dim, n_rot;
    int n_expert, n_expert_used, n_ff_exp, n_hc, n_swa;
    uint64_t file_bytes;      /* size of the GGUF */
    uint64_t weight_bytes;    /* bytes of tensor data */
    uint64_t active_bytes_per_token;  /* weights read per decoded token */
    uint64_t layer_macs_per_token;    /* multiply-adds of the layer matmuls
                                         per token (prefill work; the head
                                         and attention products excluded) */
    int random_weights;       /* a synthetic model (ds4-synth): text is noise */
    uint64_t ctx_train;       /* deepseek4.context_length: the context the
                                 model was trained for (0 = not stated);
                                 a longer --ctx runs but is out of
                                 distribution */
} ds4_model_info;

void ds4_model_get_info(const ds4_model *m, ds4_model_info *info);

/* How the main GGUF's mapping sits in memory now: its resident bytes and
 * those the process maps with 2 MB pages (Linux /proc/self/smaps).  The
 * weights are read once per token in long sweeps; on 4 KB pages every 4 KB
 * is a TLB miss (medium q2 on a Zen 5 VM: a 2048-token prefill 79-100
 * against 147 tok/s with 2 MB pages).  A file just written (downloaded,
 * ds4-synth, ds4-quantize) sits in the page cache in small pages until
 * evicted and read again (docs/memory.md, "Huge pages").  Returns 0, or -1 where
 * unknown (all fields 0). */
typedef struct {
    uint64_t mapped;          /* size of the mapping (the file) */
    uint64_t resident;        /* of it, in memory and mapped by this process */
    uint64_t huge;            /* of that, on 2 MB pages */
} ds4_weight_pages;
int ds4_model_weight_pages(const ds4_model *m, ds4_weight_pages *p);
/* 1 when at least min_resident bytes are resident and most of them are on
 * 4 KB pages: the front ends' warning rule (ds4, ds4-bench). */
int ds4_weight_pages_small(const ds4_weight_pages *p, uint64_t min_resident);

/* The routed-expert cache of a --ssd-streaming model (all zero otherwise).
 * Counters accumulate from the load; a front end takes two snapshots and
 * subtracts them for one run.  Safe to call from any thread, also while
 * another evaluates (the server's /metrics does). */
typedef struct {
    int enabled;
    int direct_io;            /* 1 = O_DIRECT reads, 0 = buffered + FADV_DONTNEED */
    int readers;              /* reader threads */
    uint64_t slots, slot_bytes, cache_bytes;
    uint64_t routed_bytes;    /* all routed expert slices of the file */
    uint64_t n_slices;        /* layers x experts */
    uint64_t resident_bytes;  /* the non-routed weights copied into memory */
    uint64_t hits, misses;    /* slices found in / read into the cache */
    uint64_t bytes_read;      /* from the file (aligned spans) */
    double read_seconds;      /* wall time with at least one read in flight */
    double wait_seconds;      /* time the forward pass waited for reads */
} ds4_expert_cache_stats;
void ds4_model_expert_cache_stats(const ds4_model *m, ds4_expert_cache_stats *st);
/* The message of the last expert read failure (an evaluation that returned
 * DS4_EIO), or NULL. */
const char *ds4_model_expert_cache_error(const ds4_model *m);
/* The message behind an evaluation's DS4_EIO, or NULL: the model's file
 * damaged under the run (below), else the last expert read failure
 * (ds4_model_expert_cache_error).  ds4_model_strerror(m, rc) is what a
 * front end prints for an evaluation that returned rc: that message for
 * DS4_EIO when there is one, else ds4_strerror(rc).
 *
 * The weights are read through a mapping of the file (without
 * --ssd-streaming).  A file truncated (or unreadable) under a running
 * process does not kill it with SIGBUS: the lost pages read as zeros, and
 * the evaluation that touched them fails with DS4_EIO and a message naming
 * the file, the tensor (for a routed expert, the layer and expert) and its
 * bytes.  From then on the model is broken (ds4_model_broken returns 1):
 * its weights are no longer the file's, every evaluation of any of its
 * sessions fails at once with the same message, and the only way on is
 * to load the model again from an intact file. */
const char *ds4_model_error(const ds4_model *m);
const char *ds4_model_strerror(const ds4_model *m, int rc);
int ds4_model_broken(const ds4_model *m);
const ds4_tokenizer *ds4_model_tokenizer(const ds4_model *m);
/* A hash over the GGUF metadata and tensor directory (not the data):
 * identifies "this exact model file layout and quantization". */
void ds4_model_fingerprint(const ds4_model *m, uint8_t out[20]);
/* The same model in any routed-expert quantization (2-bit / 4-bit files of
 * one checkpoint share it): metadata, tensor names and dims, and the types
 * of every tensor but the routed experts. */
void ds4_model_family_fingerprint(const ds4_model *m, uint8_t out[20]);

/* `ds4 --inspect`: metadata summary, shapes, tensor type histogram, file and
 * memory sizes.  Works on vocab-only files too. */
int ds4_inspect(const char *path, FILE *out, char **err);

/* Printable form of untrusted bytes (GGUF keys, names and strings, text from
 * a disk KV file) for a terminal or a log line: valid UTF-8 is kept, control
 * characters (C0, DEL, C1), line separators, bidi controls and invalid bytes
 * become escapes (\n, \t, \xNN, \u{XXXX}; backslash and double quote are
 * escaped too).  ds4_escape writes at most cap bytes, NUL included, ending
 * in "..." when the input did not fit, and returns buf (usable as a printf
 * argument).  ds4_fput_escaped writes the form of at most max_in input bytes
 * (never cutting a character) and returns the input bytes written. */
const char *ds4_escape(char *buf, size_t cap, const char *s, size_t n);
size_t ds4_fput_escaped(FILE *out, const char *s, size_t n, size_t max_in);

/* ------------------------------------------------------------------------ */
/* Distributed inference over MPI (src/dist/, docs/distributed.md).          */
/* Every rank runs the same binary under mpirun.  Call ds4_dist_init before  */
/* anything else; ranks > 0 then call ds4_dist_worker (which loads the model */
/* and serves rank 0 until it exits) and exit with its status.  Rank 0 goes  */
/* on as a normal front end: ds4_model_load and the sessions drive the       */
/* workers.  Snapshots, restores and --dump-hidden are not distributed       */
/* (DS4_EUNSUP).                                                             */
/* ------------------------------------------------------------------------ */

/* 1 when this build has MPI support. */
int ds4_dist_supported(void);
/* mode: "pipeline" or "experts"; layers: NULL (balanced by weight bytes) or "a:b,c:d"
 * (inclusive layer ranges, one per rank).  Returns this rank (>= 0) or a
 * DS4_E* code with *err. */
int ds4_dist_init(int *argc, char ***argv, const char *mode, const char *layers,
                  char **err);
int ds4_dist_rank(void);
int ds4_dist_size(void);
/* --dist-timeout: how long a rank waits for a message its work depends on
 * before it names the ranks that stopped answering and stops the job
 * (0 = forever).  Call before ds4_dist_init; DS4_EINVAL if out of range. */
#define DS4_DIST_TIMEOUT_DEFAULT 300.0
int ds4_dist_set_timeout(double seconds);
/* Ranks > 0: load `path` and serve; returns the process exit status. */
int ds4_dist_worker(const char *path, const ds4_model_params *p);
/* Seconds this rank spent sending and waiting for messages. */
double ds4_dist_comm_seconds(void);
/* Rank 0: release the workers and finalize MPI (also run at exit). */
void ds4_dist_finish(void);

/* ------------------------------------------------------------------------ */
/* Session: the KV state of one token sequence.                              */
/* ------------------------------------------------------------------------ */

typedef struct ds4_session ds4_session;

typedef struct {
    int ctx_size;             /* maximum number of tokens (positions) */
    int prefill_chunk;        /* tokens per prefill batch (default 2048) */
    int no_qat;               /* diagnostic: no FP8/FP4/f16 roundings and
                               * float activations everywhere */
} ds4_session_params;

void ds4_session_params_default(ds4_session_params *p);

/* Bytes of KV state a session of `ctx_size` tokens needs (plus scratch). */
uint64_t ds4_session_memory_estimate(const ds4_model *m, int ctx_size);

/* What a run of a model file needs, without loading it (`ds4 --inspect
 * --ctx N`, the start-up check): the weights (mmap'd, resident once
 * touched; the routed experts are part of them), one session of ctx_size
 * tokens with the default prefill chunk and storage roundings (f16 KV), and
 * the machine's RAM from /proc/meminfo (0 where unknown). */
typedef struct {
    int ctx_size, n_threads;
    uint64_t weights, routed;    /* all tensor data; of which routed experts */
    uint64_t kv, scratch;        /* session KV state at ctx_size; scratch */
    uint64_t total;              /* weights + kv + scratch */
    uint64_t mem_total, mem_available;
} ds4_mem_plan;
/* The thread count used where none is given: DS4_THREADS (1-4096; another
 * value is reported once on stderr and ignored), else the CPUs of the
 * process's affinity mask (taskset, a container's cpuset), else the online
 * CPUs. */
int ds4_default_threads(void);
/* Stack for a thread that calls into the engine: the CPU kernels keep up to
 * ~150 KiB of repacked activations on the stack.  ds4_thread_attr sets a
 * pthread attribute's stack size to at least this (a process started with
 * a small `ulimit -s` gives its threads small default stacks); it returns
 * 0 or an errno value. */
#define DS4_THREAD_STACK_MIN ((size_t)4 << 20)
int ds4_thread_attr(pthread_attr_t *attr);
/* n_threads <= 0: ds4_default_threads() (the per-thread attention buffers). */
int ds4_memory_plan(const char *path, int ctx_size, int n_threads, ds4_mem_plan *out, char **err);
/* The plan as text; `fit` lines say whether it fits in RAM. */
void ds4_memory_plan_print(const ds4_mem_plan *p, FILE *out);

ds4_session *ds4_session_new(ds4_model *m, const ds4_session_params *p,
                             char **err);
void ds4_session_free(ds4_session *s);

/* Called during long evaluations: done/total tokens.  Return non-zero to
 * cancel (the session is then left valid at a token boundary). */
typedef int (*ds4_progress_fn)(void *ud, int done, int total);

/* Make the session hold exactly `toks`: keep the longest common prefix with
 * the current state, evaluate only the rest.  When `toks` diverge inside
 * the session (or are shorter), the state goes back to the latest RAM
 * checkpoint within the common prefix (ds4_session_checkpoint), else it is
 * rebuilt from the start.  On DS4_ECTX nothing changes.  *n_reused
 * (optional) receives the number of tokens kept. */
int ds4_session_sync(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud, int *n_reused);
/* Append tokens (prefill when n > 1, decode when n == 1). */
int ds4_session_eval(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud);
void ds4_session_reset(ds4_session *s);
/* One engine step for several live sessions of one model (ds4-server
 * --parallel): item i appends items[i].n tokens to items[i].s -- one for a
 * session that is decoding, a prefill chunk for one that is ingesting a
 * prompt.  The sessions must be distinct.  Every session's state and
 * logits come out bit-identical to ds4_session_eval of its own tokens
 * alone, whatever the other items are.  items[i].rc receives that item's
 * result (an item that fails is reset as ds4_session_eval resets it; the
 * others are unaffected); the return value is DS4_OK when every item
 * succeeded, else the first failing item's code.  Items share forward
 * passes (each weight read once for all their rows) up to the prefill
 * chunk of the session with the largest context; an item longer than its
 * session's chunk, or whose session captures, collects an imatrix or runs
 * under --dist, is evaluated alone inside the step (docs/server.md
 * "In the engine"). */
typedef struct {
    ds4_session *s;
    const int32_t *toks;
    int n;
    int rc;                   /* out */
} ds4_batch_item;
int ds4_session_eval_batch(ds4_batch_item *items, int n_items);

int ds4_session_n_tokens(const ds4_session *s);
const int32_t *ds4_session_tokens(const ds4_session *s);
int ds4_session_ctx_size(const ds4_session *s);
/* Next-token logits after the last evaluated token (n_vocab floats); NULL
 * when the session is empty. */
const float *ds4_session_logits(const ds4_session *s);

/* Diagnostics.  When set, every evaluated position appends its logits row
 * (n_vocab floats) / its HC states after each sublayer
 * ([n_layer][2][n_hc][n_embd] floats) to these buffers. */
void ds4_session_capture(ds4_session *s, ds4_buf *logits_rows,
                         ds4_buf *hidden_rows);
/* Diagnostics: every evaluated position appends [n_layer][2] floats, per
 * layer the lowest score the indexer kept and the highest it rejected
 * (NaN, NaN where the layer selects nothing: no indexer, or no more rows
 * visible than its top_k).  Their gap says how close a top-k choice was
 * to a tie (docs/NUMERICS.md "Indexer ties"). */
void ds4_session_capture_indexer(ds4_session *s, ds4_buf *rows);
/* Steering: from the next evaluated token on, add scale * dir (n_embd
 * floats, copied; normally a unit vector) to every hyper-connection copy of
 * the residual stream right after the FFN sublayer of each layer in
 * [layer_first, layer_last] (0-based), i.e. before the next layer's
 * attention reads it.  dir NULL or scale 0 turns it off: the forward pass is
 * then bit-identical to a session never steered.  Tokens already evaluated
 * keep their state (reset or re-sync to steer a whole prompt).  DS4_EINVAL
 * for a bad layer range or a non-finite product. */
int ds4_session_set_steering(ds4_session *s, const float *dir, float scale,
                             int layer_first, int layer_last);
/* Force token-at-a-time evaluation (diagnostic --decode-only). */
void ds4_session_set_decode_only(ds4_session *s, int on);

/* Importance matrix (ds4 --imatrix-out, read by ds4-quantize --imatrix):
 * from begin on, every evaluated token adds, per layer and routed expert
 * it is routed to, the squares of the gate/up input and of the down input
 * (engine/imatrix.h; file format in docs/QUANT.md).  begin returns
 * DS4_ENOMEM if the sums cannot be allocated; save writes the means
 * (atomically) and returns 0, or -1 with *err (malloc'd). */
int ds4_session_imatrix_begin(ds4_session *s);
int ds4_session_imatrix_save(const ds4_session *s, const char *path, char **err);

/* Snapshot: the complete resumable state (tokens, logits, per-layer window
 * rows, compressed rows, compressor and indexer frontiers). */
uint64_t ds4_session_snapshot_size(const ds4_session *s);
int ds4_session_snapshot(const ds4_session *s, ds4_buf *out);
/* The same bytes streamed through a writer (returns 0 or a DS4_E* code). */
typedef int (*ds4_write_fn)(void *ud, const void *data, size_t len);
int ds4_session_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud);
int ds4_session_restore(ds4_session *s, const void *data, size_t len,
                        char **err);
/* KV bytes currently held. */
uint64_t ds4_session_kv_bytes(const ds4_session *s);

/* RAM checkpoints: cheap rewinds within the session's own history.  A
 * checkpoint copies only what later evaluation overwrites -- the sliding
 * window rows, the compressor/indexer frontiers and the logits -- not the
 * compressed rows, which are append-only (about 23 MiB at the Flash shape,
 * whatever the context; ds4_session_checkpoint_bytes says exactly).  A
 * checkpoint stays valid while the session keeps every token below it:
 * reset, restore, a failed evaluation, or a rewind below it drop it.  The
 * memory is allocated on the first checkpoint of a slot and kept. */
#define DS4_SESSION_CKPTS 2
int ds4_session_checkpoint(ds4_session *s, int slot);
/* Token count of a slot's valid checkpoint; -1 when none. */
int ds4_session_checkpoint_tokens(const ds4_session *s, int slot);
/* Bytes one checkpoint slot holds. */
uint64_t ds4_session_checkpoint_bytes(const ds4_session *s);
/* The largest count <= n a valid checkpoint restores exactly (0 = none). */
int ds4_session_rewind_point(const ds4_session *s, int n);
/* Go back to exactly n tokens from a checkpoint of that count (the logits
 * after token n-1 included): no evaluation.  DS4_EINVAL (state unchanged)
 * when no valid checkpoint holds n tokens.  ds4_session_sync uses this when
 * the new tokens diverge inside the session. */
int ds4_session_rewind(ds4_session *s, int n);
/* Staged passes for speculative decoding (docs/SPEC.md).  eval_draft
 * appends n tokens (1 <= n <= ds4_session_draft_capacity) in one batched
 * pass and keeps the logits of every position: draft_logits(s, i) is the
 * next-token distribution after toks[i].  draft_commit(s, n_keep) then
 * keeps the first n_keep tokens and undoes the others exactly (the state
 * is bit-identical to one that evaluated only those), without evaluating
 * anything again.  Any other evaluation, sync, restore or reset makes the
 * pass final (commit is then DS4_EINVAL).  On error the session is reset. */
#define DS4_DRAFT_PASS_MAX 17
int ds4_session_draft_capacity(const ds4_session *s);
int ds4_session_eval_draft(ds4_session *s, const int32_t *toks, int n);
const float *ds4_session_draft_logits(const ds4_session *s, int i);
int ds4_session_draft_commit(ds4_session *s, int n_keep);

/* ------------------------------------------------------------------------ */
/* Disk KV cache: session states stored as files named by the SHA-1 of the  */
/* rendered text they correspond to.  Implemented in kvstore.c; the file     */
/* format is documented in docs/kvcache.md.                                  */
/* ------------------------------------------------------------------------ */

typedef struct ds4_kvstore ds4_kvstore;

typedef enum {
    DS4_KV_COLD = 1,       /* after a long first prompt (trimmed, aligned) */
    DS4_KV_CONTINUED = 2,  /* prefill or generation crossed an aligned frontier */
    DS4_KV_EVICT = 3,      /* the live session is about to be replaced */
    DS4_KV_SHUTDOWN = 4,   /* clean exit */
    DS4_KV_MANUAL = 5,
} ds4_kv_reason;

const char *ds4_kv_reason_name(uint32_t reason);

typedef struct {
    const char *dir;
    uint64_t space_bytes;        /* LRU cap by last use (default 4096 MiB) */
    int allow_quant_variants;    /* restore states saved by the same model in
                                  * another routed-expert quantization */
    FILE *log;                   /* warnings, one line each (default stderr) */
} ds4_kvstore_params;

typedef struct {
    const char *id;              /* tool-call id */
    const char *dsml;            /* the exact DSML block sampled for it */
    size_t dsml_len;
} ds4_kv_tool;

typedef struct {
    uint64_t hits, misses, saves, save_bytes, load_bytes;
    uint64_t evictions, rejected, write_errors;
    uint64_t files, bytes;
    double save_seconds, load_seconds;
} ds4_kvstore_stats;

void ds4_kvstore_params_default(ds4_kvstore_params *p);
/* Creates the directory if needed, removes temp files left by dead
 * writers, and indexes the files (headers only). */
ds4_kvstore *ds4_kvstore_open(const ds4_model *m, const ds4_kvstore_params *p,
                              char **err);
void ds4_kvstore_close(ds4_kvstore *kv);

/* Save the session's state under the text its tokens spell.  Atomic: a
 * temporary file is written, fsync'ed and renamed; on any error (full disk)
 * nothing changes and an error is returned.  An identical state already on
 * disk is only touched.  `tools` are stored with it for exact replay. */
int ds4_kvstore_save(ds4_kvstore *kv, const ds4_session *s, ds4_kv_reason reason,
                     const ds4_kv_tool *tools, int n_tools, char **err);

/* Restore the longest cached state whose text is a prefix of `text` and
 * holds at least `min_tokens` tokens (and more than the session already
 * has in common with the text, *if* `better_than` > 0).  Returns the
 * number of tokens restored (0 = no hit; the session is then untouched)
 * and stores the text bytes covered in *text_used.  Damaged files are
 * moved aside with one warning line and never restored. */
int ds4_kvstore_restore(ds4_kvstore *kv, ds4_session *s, const char *text,
                        size_t len, int min_tokens, int better_than,
                        size_t *text_used);
/* The same, with a veto: `accept` sees each candidate's tokens and the text
 * bytes it covers after the file passed every check and before the session
 * is touched; returning 0 skips it (the file stays, shorter candidates are
 * tried).  A NULL `accept` accepts everything. */
typedef int (*ds4_kv_accept_fn)(void *ud, const int32_t *tokens, int n, size_t text_used);
int ds4_kvstore_restore_if(ds4_kvstore *kv, ds4_session *s, const char *text,
                           size_t len, int min_tokens, int better_than,
                           ds4_kv_accept_fn accept, void *ud, size_t *text_used);
/* The most recently used state saved for `reason` (0 = any); returns its
 * token count or 0. */
int ds4_kvstore_restore_latest(ds4_kvstore *kv, ds4_session *s, uint32_t reason);
/* Exact DSML remembered for a tool-call id by any file: 1 found, 0 not. */
int ds4_kvstore_tool_dsml(ds4_kvstore *kv, const char *id, ds4_buf *out);
/* Remove the state saved under exactly this text, if there is one (a front
 * end whose conversation moved on drops the state it superseded).  Returns
 * 1 when a file was removed, 0 when there was none. */
int ds4_kvstore_remove(ds4_kvstore *kv, const char *text, size_t len);
void ds4_kvstore_get_stats(ds4_kvstore *kv, ds4_kvstore_stats *st);

/* When to save (shared by the server and the CLI).  Defaults: min 512,
 * cold max 30000, continued interval 10000, trim 32, align 2048. */
typedef struct {
    int min_tokens;          /* never save fewer tokens */
    int cold_max_tokens;     /* first-prompt checkpoint at most this long; 0 = off */
    int continued_interval;  /* checkpoint every N tokens of growth; 0 = off */
    int trim_tokens;         /* tail tokens a cold checkpoint leaves out */
    int align_tokens;        /* checkpoints sit on multiples of this */
} ds4_kv_policy;

void ds4_kv_policy_default(ds4_kv_policy *p);
/* Token count at which a cold (first, uncached) prompt of n tokens is
 * checkpointed: the prompt minus the trimmed tail, capped, aligned down, so
 * that the next turn -- which re-renders the tail differently -- still
 * matches the saved text.  0 = no checkpoint. */
int ds4_kv_policy_cold_point(const ds4_kv_policy *p, int n);
/* The next continued-checkpoint frontier strictly above `n` tokens: a
 * multiple of the interval rounded up to the alignment; 0 = off. */
int ds4_kv_policy_next_frontier(const ds4_kv_policy *p, int n);

/* ------------------------------------------------------------------------ */
/* Checkpointed evaluation (evaluate.c): how the CLI and the server evaluate */
/* a prompt or generated tokens -- in chunks with progress and cancellation, */
/* stopping exactly at the disk cache's cold point and continued frontiers   */
/* (ds4_kv_policy) so the caller can save the state there, and taking the    */
/* RAM checkpoints that make a retry or a rewind of a few tokens cheap.      */
/* ------------------------------------------------------------------------ */

/* Called with the session sitting exactly at a disk checkpoint (cold or
 * continued); the caller saves it (ds4_kvstore_save) or not. */
typedef void (*ds4_kv_save_fn)(void *ud, ds4_kv_reason why);

typedef struct {
    const ds4_kv_policy *kv_policy;  /* NULL: no disk checkpoints */
    ds4_kv_save_fn save;             /* required with kv_policy */
    void *save_ud;
    ds4_progress_fn progress;        /* done/total over the whole call; non-zero cancels */
    void *progress_ud;
    int cold;                        /* an empty session stops at the cold point */
    int ram_tail;                    /* >= 0: the tokens end a prompt: RAM checkpoint
                                      * slot 1 at their end and slot 0 ram_tail tokens
                                      * before it (when that is inside this call);
                                      * -1: none (generation) */
} ds4_eval_params;

/* Defaults: nothing but plain chunked evaluation (ram_tail -1). */
void ds4_eval_params_default(ds4_eval_params *p);
/* Append n tokens.  DS4_ECTX (nothing changed) when they do not fit;
 * DS4_ECANCEL leaves the session valid at a chunk boundary; any other
 * error leaves it empty. */
int ds4_eval(ds4_session *s, const int32_t *toks, int n, const ds4_eval_params *p);
/* Make the session hold exactly toks: keep the common prefix (going back
 * through a RAM checkpoint when toks diverge inside the session, else
 * starting over), then ds4_eval the rest.  *n_reused: tokens not evaluated. */
int ds4_eval_sync(ds4_session *s, const int32_t *toks, int n, const ds4_eval_params *p,
                  int *n_reused);

/* Model-free inspection of one cache file (ds4-kv). */
typedef struct {
    uint32_t version, reason, n_tokens, ctx_size, hits, flags, n_tools;
    uint64_t created, last_used, file_bytes, text_len, payload_len, tools_len;
    uint8_t fingerprint[20], family[20];
    char prefix[121];            /* first bytes of the text, escaped (whole
                                    UTF-8 characters only) */
    char suffix[121];            /* last bytes of the text, likewise: what
                                    tells apart files that share a start */
} ds4_kv_file_info;

/* Reads the header (and with `verify`, checks sizes and the checksum).
 * Returns 0 or DS4_EFORMAT with a reason in *err. */
int ds4_kv_file_info_read(const char *path, int verify, ds4_kv_file_info *info,
                          char **err);

/* ------------------------------------------------------------------------ */
/* Sampler                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    float temperature;        /* 0 = greedy; default 1 */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* default 0.05 */
    uint64_t seed;
} ds4_sampler_params;

typedef struct ds4_sampler ds4_sampler;

void ds4_sampler_params_default(ds4_sampler_params *p);
ds4_sampler *ds4_sampler_new(int n_vocab, const ds4_sampler_params *p);
void ds4_sampler_free(ds4_sampler *s);
void ds4_sampler_reseed(ds4_sampler *s, uint64_t seed);
/* New parameters for the next draws (and a reseed with p->seed). */
void ds4_sampler_set_params(ds4_sampler *s, const ds4_sampler_params *p);
int32_t ds4_sample(ds4_sampler *s, const float *logits);
int32_t ds4_sample_greedy(const float *logits, int n_vocab);
/* 1 when the sampler takes the argmax (temperature <= 0). */
int ds4_sampler_is_greedy(const ds4_sampler *s);

/* ------------------------------------------------------------------------ */
/* Speculative decoding (docs/SPEC.md)                                       */
/* ------------------------------------------------------------------------ */

/* Prompt-lookup drafts: the longest suffix n-gram (at most
 * DS4_LOOKUP_NGRAM_MAX tokens) of hist[0..n) that occurred earlier in it;
 * writes up to max_draft tokens that followed its most recent earlier
 * occurrence to out.  Returns the count (0 = no proposal). */
#define DS4_LOOKUP_NGRAM_MAX 8
int ds4_lookup_draft(const int32_t *hist, int n, int max_draft, int32_t *out);
/* The same search for the suffix of hist[0..n) in another token sequence
 * src[0..ns) (src == NULL: in hist itself, as ds4_lookup_draft); *match
 * (may be NULL) gets the length of the matched suffix, 0 when none.  A
 * front end with a second source (ds4-agent: file contents without the
 * read tool's line numbers) compares the two matches' lengths. */
int ds4_lookup_draft_in(const int32_t *hist, int n, const int32_t *src, int ns, int max_draft, int32_t *out,
                        int *match);
/* Such a second source from tool output that numbers its lines (cat -n,
 * coding agents' read tools: optional spaces, the number, then a tab or
 * U+2192): appends the numbered lines of text[0..len) to out without their
 * numbers, one per line ('\n'), and returns how many (0: nothing
 * appended).  A model that writes such a file back drops the numbers. */
int ds4_lookup_unnumber(const char *text, size_t len, ds4_buf *out);
/* The second source itself: the numbered lines of texts[0..n) (oldest
 * first, lens[i] bytes; NULL entries skipped) without their numbers, from
 * the newest text back until max_bytes of such lines are taken, tokenized
 * in plain mode oldest first into out (so the newest is searched first).
 * DS4_OK, or DS4_ENOMEM. */
int ds4_lookup_corpus(const ds4_tokenizer *tok, const char *const *texts, const size_t *lens, int n,
                      size_t max_bytes, ds4_tokens *out);

typedef struct {
    uint64_t passes;          /* verification passes */
    uint64_t drafted;         /* draft tokens evaluated */
    uint64_t accepted;        /* draft tokens kept */
    uint64_t emitted;         /* tokens output (accepted + one per pass) */
} ds4_spec_stats;

/* One speculative step.  `cur` is the token chosen last (not evaluated
 * yet); draft[0..n_draft) the guessed continuation after it.  Evaluates
 * cur + drafts in one pass, draws the target's choice at each position
 * (smp, or greedy when smp is NULL), keeps drafts while they agree and
 * rolls back the rest.  out (room for n_draft + 1) receives the accepted
 * drafts and then the target's own next token, which is the new `cur`
 * (not evaluated).  Drafts are cut before a `stop` token and to the
 * context and pass capacity.  The drafts are taken as deterministic (a
 * point-mass q: "draw from p and compare" is the speculative-sampling
 * rule then), so output equals plain decoding's token for token, greedy
 * or seeded. */
int ds4_spec_step(ds4_session *s, ds4_sampler *smp, int32_t cur, const int32_t *draft,
                  int n_draft, int32_t stop, int32_t *out, int *n_out, ds4_spec_stats *st);

/* Draft tokens per pass when --mtp is given without --mtp-draft: one
 * draft costs one MTP step (a layer and the output matrix), measured in
 * docs/cli.md "MTP drafts". */
#define DS4_MTP_DRAFT_DEFAULT 1
#define DS4_STR_(x) #x
#define DS4_XSTR(x) DS4_STR_(x)
/* MTP drafts (docs/MTP.md; the model must have an MTP block,
 * ds4_model_has_mtp).  `cur` is the token chosen last, not evaluated yet;
 * writes up to max_draft (at most DS4_DRAFT_PASS_MAX - 1, and what the
 * context leaves) greedy MTP guesses of the tokens after it to out and
 * returns their count (DS4_EUNSUP without an MTP block).  The session's
 * own state and logits are untouched: feed cur + drafts to ds4_spec_step,
 * which keeps output (greedy or sampled) exactly that of plain decoding.
 * The MTP state follows the session by itself (rollbacks, rewinds). */
int ds4_mtp_draft(ds4_session *s, int32_t cur, int max_draft, int32_t *out);
/* MTP drafting and verification in one step (what `ds4 --mtp` runs).
 * Greedy (smp NULL or temperature 0): ds4_mtp_draft + ds4_spec_step,
 * token for token plain greedy decoding.  Sampling: each of the up to
 * max_draft drafts is drawn from q_i = the block's distribution after the
 * sampler's transforms, and position i keeps draft d_i with probability
 * min(1, p_i(d_i)/q_i(d_i)) (p_i = the target's distribution after the
 * same transforms), else emits a draw from norm(max(0, p_i - q_i)) and
 * ends; when every draft is kept, a bonus token is drawn from p.  Each
 * emitted token is distributed exactly as plain sampling's; a seeded run
 * is reproducible but not token-identical to plain seeded sampling (the
 * stream's draws differ: docs/SPEC.md).  out: room for max_draft + 1.
 * DS4_EUNSUP without an MTP block. */
int ds4_spec_step_mtp(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t stop,
                      int32_t *out, int *n_out, ds4_spec_stats *st);
/* The pieces of ds4_spec_step_mtp, for a front end that makes its own
 * choice at each position (ds4-server).  ds4_mtp_draft_sampled: drafts
 * drawn from the block's distributions after smp's transforms (smp NULL
 * or greedy: ds4_mtp_draft).  ds4_mtp_draft_dist: the q_i (n_vocab
 * floats) draft i was drawn from, until the next draft call; NULL when
 * the last chain was greedy or i is past it.  ds4_spec_judge: the token
 * at a position whose draft was drawn from q: the draft with probability
 * min(1, p(draft)/q(draft)), p = logits through smp's transforms, else a
 * draw from norm(max(0, p - q)); *accepted (may be NULL) says which.  One
 * uniform of smp's stream, a second one on a rejection. */
int ds4_mtp_draft_sampled(ds4_session *s, ds4_sampler *smp, int32_t cur, int max_draft, int32_t *out);
const float *ds4_mtp_draft_dist(const ds4_session *s, int i);
int32_t ds4_spec_judge(ds4_sampler *smp, const float *logits, const float *q, int32_t draft,
                       int *accepted);
/* The logits of the last MTP draft step (tests), NULL before any. */
const float *ds4_mtp_logits(const ds4_session *s);

/* The speculative-sampling rule for a draft drawn from a distribution q
 * (target p; u_* uniform in [0,1)): returns the draft when accepted, else
 * a draw from max(0, p - q) normalized, so the result is distributed as p. */
int32_t ds4_spec_resolve(const float *p, const float *q, int n, int32_t draft,
                         double u_accept, double u_resample);

#ifdef __cplusplus
}
#endif
#endif /* DS4_H */
