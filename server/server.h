/*
 * server.h -- types shared by the modules of ds4-server.
 *
 * Owns: the server configuration, the parsed request (what conv.c produces
 * from an API request and the worker consumes), the job (one queued
 * generation and the channel between the inference worker and the HTTP
 * connection thread that waits for it), the generation events that the API
 * shapers (api_*.c) turn into response bodies and SSE streams, and small
 * helpers (util.c).  Only ds4.h and json_py.h of the engine are used.
 *
 * Threads: connection threads (http1.c, one per connection) parse,
 * render and tokenize a request, then queue a job; the single inference
 * worker (worker.c) owns the ds4_sessions and runs jobs one at a time, or
 * with --parallel N up to N at once, stepped together.  The
 * API shaper of a job (j->on_event, chosen by api.c) runs on the worker
 * thread only, so its per-stream state needs no locking; the bytes it
 * produces go through job->mu (job.c).
 */
#ifndef DS4_SERVER_H
#define DS4_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "ds4.h"

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *model_path;
    const char *host;
    int port;
    int ctx, threads, chunk;
    int ssd_streaming;            /* --ssd-streaming */
    uint64_t ssd_cache_bytes;     /* --ssd-streaming-cache-experts (0 = default) */
    int parallel;                 /* --parallel: live sessions (1 = one job at a time) */
    int step_tokens;              /* --step-tokens: tokens per batched step */
    const char *model_name;       /* NULL = derived from the file name */
    const char *api_key;          /* NULL = no auth */
    int insecure_no_auth;
    int cors;
    size_t max_body_bytes;
    size_t max_header_bytes;
    int idle_timeout_s;           /* idle keep-alive connection */
    int request_timeout_s;        /* receiving one request (headers + body) */
    int keepalive_s;              /* SSE comment after this much silence */
    int max_queue;                /* queued jobs (not counting the running one) */
    int max_connections;
    int max_conn_per_ip;          /* 0 = no per-address cap */
    int header_timeout_s;         /* request line + headers of a new connection */
    const char **allow_hosts;     /* --allow-host (Host / Origin names); NULL-terminated */
    size_t tool_memory_max_ids;
    int test_mode;
    int no_webui;                 /* --no-webui: "/" is the informational page */
    int verbose;
    ds4_sampler_params sp;        /* default sampling */
    int lookup;                   /* --lookup: prompt-lookup draft tokens (0 = off) */
    const char *mtp_path;         /* --mtp FILE: the MTP block's GGUF (NULL = main file's) */
    int mtp_draft;                /* --mtp-draft: MTP draft tokens (0 = off; -1 = not given) */
    int has_mtp;                  /* the loaded model has an MTP block (set at start) */
    int default_max_tokens;       /* 0 = up to the context */
    ds4_think default_think;

    /* disk KV cache (off without kv_dir) */
    const char *kv_dir;
    uint64_t kv_space_mb;         /* LRU cap of the directory */
    int kv_allow_variants;        /* reuse states of other routed-expert quantizations */
    ds4_kv_policy kv_policy;      /* when to save (shared with the CLI) */

    /* quality tools (docs/quality.md "Debugging a bad answer", "Steering") */
    const char *trace_path;       /* --trace: JSON lines per request */
    const char *steer_path, *steer_layers;
    double steer_scale;
} server_config;

/* ------------------------------------------------------------------------ */
/* Endpoints and API families                                               */
/* ------------------------------------------------------------------------ */

typedef enum {
    API_CHAT,          /* OpenAI /v1/chat/completions */
    API_COMPLETIONS,   /* OpenAI /v1/completions (raw prompt) */
    API_RESPONSES,     /* OpenAI /v1/responses */
    API_MESSAGES,      /* Anthropic /v1/messages */
} api_kind;

typedef enum {
    EP_MODELS, EP_MODEL, EP_CHAT, EP_COMPLETIONS, EP_RESPONSES, EP_MESSAGES,
    EP_COUNT_TOKENS, EP_HEALTH, EP_METRICS, EP_OTHER, EP__N
} endpoint;

const char *endpoint_label(endpoint e);

/* An error in the shape of the API that is answering (rendered by
 * api_error_body()).  `type` is the OpenAI type or the Anthropic type;
 * `code` and `param` are OpenAI-only (NULL = JSON null). */
typedef struct {
    int status;
    const char *type;
    const char *code;
    char param[64];      /* a copy: callers often name a field from a stack buffer; "" = null */
    char message[1024];
} api_error;

void api_err_set(api_error *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* 400 invalid_request_error. */
int api_bad(api_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Map a status to the Anthropic error type. */
const char *anthropic_error_type(int status);
/* Body text of an error in the family's shape (malloc'd). */
char *api_error_body(int anthropic, const api_error *e);

/* ------------------------------------------------------------------------ */
/* A parsed request                                                          */
/* ------------------------------------------------------------------------ */

typedef struct server_ctx server_ctx;
typedef struct kvdisk_finder kvdisk_finder;

typedef struct {
    const server_ctx *srv;        /* the server it was made for (conv_parse) */
    api_kind api;
    int stream, include_usage;
    char *model;                  /* echoed back */

    /* conversation (chat-style APIs) */
    ds4_message *msgs;
    int n_msgs, cap_msgs;
    ds4_render_opts ro;
    int has_tools;                /* tools are in the prompt */
    json_t *tools;                /* DeepSeek-form tools (owned) */
    json_t *tools_orig;           /* the request's own tools (Responses echo) */
    /* strings owned by the request (message texts, ids, JSON dumps) */
    char **owned;
    int n_owned, cap_owned;

    /* prompt */
    ds4_buf prompt;               /* rendered text (or the raw prompt) */
    ds4_tokens tokens;            /* its full tokenization */
    int raw_ids;                  /* tokens came as ids (completions) */
    int oom;                      /* an allocation for the request failed:
                                     conv_prepare answers 500 */

    /* generation */
    int max_tokens;               /* 0 = up to the context */
    ds4_sampler_params sp;
    int lookup;                   /* prompt-lookup draft tokens per pass (0 = off) */
    int mtp_draft;                /* MTP draft tokens per pass (0 = off) */
    char **stop;
    int n_stop;
    int starts_in_reasoning;      /* the prompt opened <think> */
    int think_budget;             /* force </think> after this many reasoning tokens; 0 = none */
    int parse_tools;              /* run generated content through the tool-call
                                     parser (DSML, or GLM's for a GLM model) */
    const char *tools_json;       /* the tools as rendered (GLM's parser types
                                     the call values by their schemas) */
    char *forced_prefix;          /* tool_choice: text forced at the start of content */
    int single_call;              /* parallel_tool_calls: false */
    int logprobs;                 /* OpenAI logprobs requested (chat, completions) */
    int top_logprobs;             /* alternatives per token (0..20) */
    char *test_output;            /* --test-mode: emit exactly this */
    size_t test_output_len;

    /* echo fields (Responses / Anthropic) */
    char *instructions;
    char *effort;                 /* reasoning effort as requested (Responses echo) */
    json_t *tool_choice;          /* as requested (Responses echo) */
    int parallel_tool_calls;
    double temperature_echo, top_p_echo;

    /* stats of the conversion */
    int replay_exact, replay_canonical;
    /* assistant tool-call turns the tool memory did not know (all their ids
     * present): conv_render asks the disk KV cache for their exact DSML
     * before rendering; replay metrics are then counted there */
    int tool_misses;
} request;

request *request_new(api_kind api);
void request_free(request *r);
/* Keep a malloc'd string alive as long as the request; returns it. */
char *request_own(request *r, char *s);
char *request_strdup(request *r, const char *s, size_t n);

/* ------------------------------------------------------------------------ */
/* Generation results and events                                             */
/* ------------------------------------------------------------------------ */

typedef struct job job;
typedef enum {
    FIN_NONE = 0,
    FIN_STOP,          /* EOS (or the end of the test output) */
    FIN_LENGTH,        /* max_tokens or the context */
    FIN_STOP_SEQ,      /* a stop sequence matched */
    FIN_TOOLS,         /* a complete tool-call block */
    FIN_CANCEL,        /* the client went away */
    FIN_ERROR,         /* see job->res.err */
    FIN_TOOL_ERROR,    /* the model wrote a malformed tool call: its text is
                        * in res.content, the parser's reason in res.err */
} finish_kind;

typedef struct {
    char id[48];          /* call_... / toolu_... */
    char item_id[48];     /* Responses fc_... */
    char *name;
    ds4_buf args;
    int complete;
} gen_call;

typedef struct {
    ds4_buf reasoning, content;
    gen_call *calls;
    int n_calls, cap_calls;
    finish_kind finish;
    int stop_index;
    int prompt_tokens, cached_tokens, completion_tokens, reasoning_tokens;
    double prefill_s, decode_s;
    ds4_spec_stats spec;  /* speculative decoding (--lookup / ds4_lookup) */
    api_error err;
    /* OpenAI logprobs, one entry per content token in the chat shape
     * {"token","logprob","bytes","top_logprobs":[...]} (src/common/logprob.c
     * computes them, as for ds4 --dump-logprobs); lp_sent = entries
     * already streamed */
    json_t *lp;
    size_t lp_sent;
    json_t *trace_ev;     /* --trace: the DSML parser's events, or NULL */
} gen_result;

typedef enum {
    EV_START,        /* before the prefill (usage.prompt/cached known) */
    EV_REASONING,    /* reasoning text delta */
    EV_TEXT,         /* visible content delta */
    EV_TOOL_BEGIN,   /* index, res.calls[index] has id and name */
    EV_TOOL_ARGS,    /* arguments JSON delta */
    EV_TOOL_END,
    EV_FINISH,       /* res.finish set; the last event */
} ev_kind;

/* ------------------------------------------------------------------------ */
/* Jobs                                                                      */
/* ------------------------------------------------------------------------ */

enum { CANCEL_NONE = 0, CANCEL_CLIENT = 1, CANCEL_SHUTDOWN = 2 };

typedef void (*job_event_fn)(job *j, ev_kind k, int index, const char *s, size_t n);

struct job {
    request *rq;                  /* owned */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;                     /* connection + worker */
    atomic_int cancel;            /* CANCEL_* */
    int done;                     /* under mu: no more output */
    job *next;                    /* queue link */
    uint64_t seq;                 /* submission number (logs) */
    double arrived;               /* util_now() when the request's first bytes
                                   * arrived: the queue order (0 = at submission) */
    job_event_fn on_event;        /* the API's response shaper (api.c) */

    /* output (under mu) */
    ds4_buf out;                  /* SSE bytes not yet sent */
    size_t out_off;
    int status;                   /* non-stream: HTTP status of body */
    ds4_buf body;                 /* non-stream: the response body */

    /* worker-side state (worker thread only) */
    gen_result res;
    char resp_id[48];             /* chatcmpl-/msg_/resp_ id */
    char msg_item_id[48], rs_item_id[48];
    long created;
    void *api_state;              /* the shaper's stream state */
};

/* job.h: the job's output channel (job.c) and its shaper (api.h). */

/* ------------------------------------------------------------------------ */
/* The server context                                                        */
/* ------------------------------------------------------------------------ */

typedef struct worker worker;
typedef struct toolmem toolmem;
typedef struct metrics metrics;

struct server_ctx {
    server_config cfg;
    ds4_model *model;
    const ds4_tokenizer *tok;
    const ds4_special_ids *sp;
    int n_vocab;
    int ctx;
    char model_id[256];
    long started;
    worker *w;
    toolmem *tm;
    metrics *m;
    FILE *trace;                  /* --trace (written by the worker thread) */
    float *steer;                 /* --steer: the direction (NULL = off) */
    int steer_l0, steer_l1;
    kvdisk_finder *kvf;           /* --kv-disk-dir: tool DSML lookups for conv.c */
};

extern server_ctx *g_srv;

/* ------------------------------------------------------------------------ */
/* util.c                                                                    */
/* ------------------------------------------------------------------------ */

int  util_random_init(void);
void util_random_bytes(void *dst, size_t n);
/* prefix + n base62 characters from /dev/urandom. */
void util_random_id(char *dst, size_t cap, const char *prefix, int n);
double util_now(void);           /* monotonic seconds */
long util_unix_time(void);
/* A JSON string from bytes that may hold invalid UTF-8 (replaced by
 * U+FFFD) or NULs. */
json_t *jstr(const char *s, size_t n);
json_t *jcstr(const char *s);    /* NULL -> json null */
/* Serialize compactly (caller frees); never NULL except out of memory. */
char *jdump(const json_t *v);
/* Base64 (standard or URL-safe, padding optional); NULL on bad input. */
char *util_base64_decode(const char *s, size_t *out_len);
/* Append valid UTF-8 of s (invalid sequences -> U+FFFD). */
int util_utf8_sanitize(const char *s, size_t n, ds4_buf *out);
void log_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Constant-time string comparison. */
int util_secret_eq(const char *a, const char *b);

#endif /* DS4_SERVER_H */
