/*
 * agent.h -- ds4-agent: a coding agent that runs DeepSeek V4 Flash in
 * process.  Types shared by the agent's modules:
 *
 *   main.c     arguments, start-up, the interactive loop and its /commands
 *   ui.c       terminal presentation (streaming, colours, status line,
 *              progress bar, confirmations, line editing)
 *   tools.c    the six tools, their schemas, the confirmation gate
 *   fsconf.c   file access confined beneath the working directory (fds)
 *   diff.c     the unified diff shown in write/edit confirmations
 *   contain.c  every process of a bash call, killed together
 *   session.c  transcript -> tokens, saving/restoring sessions through the
 *              disk KV store, the session list
 *   turn.c     one model turn (prefill, sampling or forced script output,
 *              DSML parsing) and the run loop (turns until no tool call)
 *   compact.c  context compaction
 *   script.c   --script (forced model output) and --trace
 *
 * The agent uses only the public engine API (ds4.h) and never touches the
 * engine's internals.
 */
#ifndef DS4_AGENT_H
#define DS4_AGENT_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "ds4.h"
#include "util.h"   /* ag_strndup */

extern volatile sig_atomic_t ag_interrupt;   /* Ctrl+C: stop what runs */
extern volatile sig_atomic_t ag_terminate;   /* SIGTERM: save and leave */

/* ---------------------------------------------------------------- */
/* Transcript                                                        */
/* ---------------------------------------------------------------- */

typedef struct {
    char *name;
    char *args;          /* JSON object text (assistant calls) */
    char *result;        /* text given back to the model (tool results) */
    char *summary;       /* one line: "exit 0, 12 lines, 345 bytes" */
    int ok;
} ag_call;

typedef enum { AG_USER = 1, AG_ASSISTANT = 2, AG_TOOLS = 3 } ag_kind;

/* Why an assistant turn ended before the model ended it (0: it did). */
typedef enum {
    AG_STOP_NONE = 0,
    AG_STOP_INTERRUPT,   /* Ctrl+C */
    AG_STOP_CONTEXT,     /* the end of the context */
    AG_STOP_BUDGET,      /* the turn's token budget (--max-tokens) */
} ag_stop;

typedef struct {
    ag_kind kind;
    char *text;          /* user text / assistant content before the DSML block */
    char *reasoning;     /* assistant in thinking mode (may be "") */
    char *dsml;          /* assistant: the exact DSML block, NULL when none */
    ag_call *calls;      /* assistant: the calls; tools: their results */
    int n_calls;
    int think;           /* assistant: generated in thinking mode */
    int stop;            /* assistant: ag_stop, the turn was cut */
    int note;            /* user: written by the agent (compaction, a cut
                          * turn), not a request of the user */
} ag_msg;

typedef struct {
    char *path;          /* real path */
    uint64_t hash;       /* content hash when the model last read/wrote it */
} ag_seen;

typedef struct {
    char id[40];
    char *title;
    double created, last_used;
    int turns;           /* model turns so far (trace numbering) */
    int compactions;
    ag_msg *msgs;
    int n_msgs, cap_msgs;
    int live;            /* messages whose tokens the KV state holds */
    ag_seen *seen;
    int n_seen;
    /* the state last saved to disk (to replace it on the next save) */
    int saved_n;
    uint64_t saved_hash;
    ds4_buf saved_text;
} ag_sess;

void ag_msg_free(ag_msg *m);
ag_msg *ag_sess_push(ag_sess *s, ag_kind kind);
void ag_sess_free(ag_sess *s);
uint64_t ag_hash(const void *p, size_t n, uint64_t h);
#define AG_HASH_SEED 0xcbf29ce484222325ull

/* ---------------------------------------------------------------- */
/* Tools                                                             */
/* ---------------------------------------------------------------- */

enum { AG_T_READ, AG_T_LIST, AG_T_SEARCH, AG_T_WRITE, AG_T_EDIT, AG_T_BASH, AG_NTOOLS };

/* 1 = yes, 0 = no, 2 = always (for this tool, for the rest of the run).
 * `what` is the one-line description; `detail` the unified diff of a
 * write or edit (NULL for bash). */
typedef int (*ag_confirm_fn)(void *ud, const char *tool, const char *what, const char *detail);

typedef struct {
    const char *root;    /* real path of the working directory */
    int yes;             /* --yes: never ask */
    int always[AG_NTOOLS];
    ag_confirm_fn confirm;
    void *ud;
    ag_sess *sess;       /* read tracking lives in the session */
    int bash_timeout;    /* default seconds */
} ag_tools;

/* JSON array of the tool schemas ({"type":"function","function":{...}}). */
const char *ag_tools_json(void);
int ag_tool_index(const char *name);
/* Run one call; fills `result` (for the model) and `summary` (one line).
 * Returns 1 when the call succeeded, 0 otherwise (refusals included). */
int ag_tool_run(ag_tools *t, const char *name, const char *args, ds4_buf *result,
                ds4_buf *summary);
/* Compact one-line description: "$ make test", "read src/x.c:10-80". */
void ag_tool_describe(const char *name, const char *args, ds4_buf *out);

/* ---------------------------------------------------------------- */
/* Script and trace                                                  */
/* ---------------------------------------------------------------- */

typedef struct {
    char **turns;
    size_t *lens;
    int n, next;
} ag_script;

int ag_script_load(const char *path, ag_script *sc, char **err);
void ag_script_free(ag_script *sc);

typedef struct {
    int turn, prompt_tokens, cached_tokens, prefill_tokens, generated_tokens;
    const ag_msg *msg;          /* the assistant message (tool calls) */
    const ag_msg *results;      /* the tool results (ok flags), may be NULL */
    const char *session;
    const char *event;          /* NULL, "summary", "compacted" */
    ds4_spec_stats spec;        /* --lookup: passes, drafted, accepted */
} ag_trace_rec;

void ag_trace_write(FILE *f, const ag_trace_rec *r);
/* "interrupt", "context", "max_tokens" (trace and session files); "" for none */
const char *ag_stop_name(int stop);

/* ---------------------------------------------------------------- */
/* The agent                                                         */
/* ---------------------------------------------------------------- */

/* Prompt-lookup drafts per pass by default (--lookup): coding turns copy
 * spans of their context (edits, rewrites); the back-off in ag_generate
 * keeps failed passes rare in free text. */
#define AG_LOOKUP_DEFAULT 4

typedef struct {
    /* options */
    const char *model, *dir, *sessions_opt, *trace_path, *script_path;
    const char *task, *dump_logits;
    int ctx, yes, resume, max_turns, max_tokens;
    ds4_model_params mparams;       /* threads, SSD streaming, --mtp FILE */
    int lookup;                     /* --lookup N: prompt-lookup drafts (0 = off) */
    int mtp_draft;                  /* --mtp-draft N: MTP drafts when the lookup finds none */
    ds4_think think;
    ds4_sampler_params sp;
    int interactive;

    /* runtime */
    char *root;                     /* real path of --dir */
    char *sessions_dir;             /* this directory's sessions (ag_sessions_locate) */
    char *legacy_dir;               /* DIR/.ds4/sessions of older versions, read only; NULL if none */
    char *kv_dir;
    ds4_model *m;
    const ds4_tokenizer *tok;
    const ds4_special_ids *ids;
    int n_vocab;
    ds4_session *s;
    ds4_sampler *smp;
    ds4_kvstore *kv;
    ag_sess *cur;
    ag_script script;
    int scripted;
    FILE *trace, *dump;
    ag_tools tools;
    ds4_tokens sys_ids;             /* BOS + system prompt + tools section */
    ds4_think sys_think;            /* think mode the system prefix was rendered for */
    ds4_buf last_results;           /* /last */
    ds4_buf final_answer;           /* -p: the last answer */
    int compacted;                  /* the next turn starts a compacted session */
    ds4_spec_stats spec;            /* this turn's drafting (trace, status line) */

    /* UI */
    FILE *ui;                       /* stdout (interactive) or stderr (-p) */
    int color;
} agent;

/* The context must leave this many tokens beside the system prompt (and
 * tool schemas): the least a compacted conversation and an answer need. */
#define AG_CTX_MIN_ROOM 512

/* session.c */
/* Where the sessions of the working directory live (--sessions, else the
 * per-user state directory); creates it.  -1 with a message on stderr. */
int ag_sessions_locate(agent *a);
int ag_sys_tokens(agent *a);
/* the opening of an assistant turn in the model's format and mode */
void ag_open_assistant(agent *a, int think, ds4_tokens *out);
void ag_sess_new(agent *a);
/* Tokens of messages [from, n) plus the opening of the next assistant turn
 * when the last one is a user/tool turn. */
int ag_render_from(agent *a, const ag_sess *s, int from, int open_assistant,
                   ds4_tokens *out);
int ag_save(agent *a, int quiet);
int ag_restore(agent *a, const char *id);
int ag_latest_id(agent *a, char *id, size_t cap);
void ag_list(agent *a);
/* Resolve a user-typed ID (full, or unique prefix) to a saved one. */
int ag_find_id(agent *a, const char *want, char *id, size_t cap);

/* run.c */
typedef struct {
    int tool_calls;     /* the last turn called tools */
    int error;
} ag_result;
/* Turns cut in a row (by --max-tokens or the context end) before ag_run
 * stops and hands back to the user. */
#define AG_CUT_TURNS_MAX 3
/* Append a user message and run model turns until one calls no tool.
 * Returns 0; 1 interrupted; 2 stopped by a limit (--max-turns, or
 * AG_CUT_TURNS_MAX cut turns in a row); -1 on error. */
int ag_run(agent *a, const char *user_text);
/* One model turn on top of the pending messages; *stop = its ag_stop. */
int ag_model_turn(agent *a, int *called_tools, int *stop);
/* turn.c: generate one assistant message into `out` */
int ag_generate(agent *a, int budget, ag_msg *out, int think, int *n_gen);
/* session.c: evaluate ids on top of the live state (progress, Ctrl+C) */
int ag_prefill(agent *a, const int32_t *ids, int n);

/* compact.c */
/* Make room: 0 when the pending turn now fits (always, but for a failed
 * allocation), -1 on error. */
int ag_compact(agent *a, int pending_tokens);

/* ui.c */
void ui_init(agent *a);
void ui_reasoning(agent *a, const char *p, size_t n);
void ui_content(agent *a, const char *p, size_t n);
void ui_end_stream(agent *a);
void ui_call_begin(agent *a, const char *name);
void ui_call_line(agent *a, const char *name, const char *args);
void ui_result(agent *a, int ok, const char *summary);
void ui_note(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ui_status(agent *a, int prefill, double prefill_s, int gen, double gen_s);
int ui_progress(void *ud, int done, int total);
int ui_confirm(void *ud, const char *tool, const char *what, const char *detail);
char *ui_readline(agent *a, const char *prompt);
void ui_history_load(agent *a);
void ui_history_add(agent *a, const char *line);


#endif
