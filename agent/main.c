/*
 * main.c -- `ds4-agent`: arguments, start-up, the non-interactive run
 * (-p TASK) and the interactive loop with its /commands.
 *
 * Owns: option parsing and --help (stable: the flags of the issue), signal
 * handling (Ctrl+C stops what runs -- a generation, a prefill, a tool --
 * and never the program; SIGTERM and Ctrl+D save and leave), the model,
 * session, sampler and KV store lifetimes.  Must not: render prompts, run
 * tools or draw beyond what ui.c offers.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "common/args.h"
#include "common/signals.h"
#include "common/model_opts.h"
#include "common/model_file.h"

volatile sig_atomic_t ag_interrupt = 0, ag_terminate = 0;

static void on_sigint(int sig) { (void)sig; ag_interrupt = 1; }
static void on_sigterm(int sig) { (void)sig; ag_interrupt = 1; ag_terminate = 1; }

#define die(...) ds4_die("ds4-agent", __VA_ARGS__)

/* The shared model/runtime flags the agent takes (model_opts.h). */
#define AGENT_GROUPS (DS4_MO_MODEL | DS4_MO_CTX | DS4_MO_SSD | DS4_MO_THINK | DS4_MO_TEMP | \
                      DS4_MO_LOOKUP | DS4_MO_MTP)

static void agent_opts_defaults(ds4_model_opts *o) {
    ds4_model_opts_init(o, "ds4-agent", AGENT_GROUPS);
    o->ctx_min = 256;
    o->lookup = AG_LOOKUP_DEFAULT;
}

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-agent [-m FILE] [--ctx N] [--dir DIR] [-t N] [--think|--think-max|--nothink]\n"
"                 [--lookup N] [--mtp FILE] [--mtp-draft N] [--yes] [--resume]\n"
"                 [--trace FILE] [-p TASK] [--script FILE]\n"
"\n"
"A coding agent that runs DeepSeek V4 Flash in process: it reads, searches and\n"
"edits the files of a working directory and runs commands there, through six\n"
"tools (read, list, search, write, edit, bash).  write, edit and bash ask for\n"
"confirmation (y/n/always) unless --yes; file tools never leave the directory.\n"
"Every turn is saved as a session (KV state + transcript) that /switch and\n"
"--resume restore exactly; a full context is compacted, never an error.\n"
"\n"
"model turns:\n"
"      --max-tokens N    at most N tokens per model turn (default: up to the\n"
"                        end of the context); a cut turn is continued by the\n"
"                        model, told why, at most " DS4_XSTR(AG_CUT_TURNS_MAX) " cut turns in a row\n"
"\n"
"work:\n"
"      --dir DIR         working directory (default: the current one)\n"
"      --sessions DIR    saved sessions (default: per user and working directory,\n"
"                        $XDG_STATE_HOME/ds4/agent/NAME-HASH/sessions, where\n"
"                        XDG_STATE_HOME defaults to ~/.local/state)\n"
"      --yes             run write, edit and bash without asking\n"
"      --resume          continue the most recently used session\n"
"  -p, --prompt TASK     non-interactive: work on TASK until the model answers\n"
"                        without calling a tool, print that answer on stdout\n"
"                        and exit (0; 1 on error, 3 past --max-turns or after\n"
"                        " DS4_XSTR(AG_CUT_TURNS_MAX) " cut turns in a row, 130 on Ctrl+C).  Confirmations\n"
"                        are read from stdin.\n"
"      --max-turns N     model turns per request (default 50)\n"
"\n"
"tests and diagnostics (stable contracts):\n"
"      --script FILE     forced model output: assistant turns separated by lines\n"
"                        of exactly ---, each the exact text the model generates\n"
"                        (reasoning, </think>, content, optional DSML tool-call\n"
"                        block; content only with --nothink), without the EOS\n"
"      --trace FILE      append one JSON line per model turn: turn, prompt_tokens,\n"
"                        cached_tokens, prefill_tokens, generated_tokens,\n"
"                        tool_calls [{name, ok}], drafted, accepted, session,\n"
"                        stopped (a cut turn: max_tokens, context, interrupt)\n"
"      --dump-logits FILE  write float32 logits rows [n_vocab] of every position\n"
"                        evaluated by each model turn (prefill and generation)\n"
"  -h, --help            this help\n"
"      --version         print the version and exit\n"
"\n"
"Interactive commands: /help /new /list /switch ID /save /history /last\n"
"/think /nothink /ctx N /quit.  Ctrl+C stops a generation or a tool; Ctrl+D\n"
"saves and quits.\n");
    ds4_model_opts d;
    agent_opts_defaults(&d);
    ds4_model_opts_help(f, &d);
    fprintf(f,
"\n"
"notes:\n"
"  --ctx must hold at least the system prompt and tool schemas + " DS4_XSTR(AG_CTX_MIN_ROOM) "\n"
"  (about 1500 tokens).  --lookup drafts text the model copies from the\n"
"  context (edits, file rewrites), checked several tokens a pass; with --mtp\n"
"  the model's MTP block drafts where the lookup finds nothing.  A turn with\n"
"  drafts is token for token the turn without them, but for sampled MTP\n"
"  drafts, which keep the sampling distribution (and a --seed its turn).\n");
}

static void parse_args(int argc, char **argv, agent *a) {
    memset(a, 0, sizeof *a);
    a->max_turns = 50;
    a->dir = ".";
    ds4_model_opts mo;
    agent_opts_defaults(&mo);
    ds4_args ar;
    ds4_args_init(&ar, "ds4-agent", argc, argv, usage);
    while (ds4_args_next(&ar)) {
        if (ds4_model_opts_parse(&mo, &ar)) continue;
        if (ds4_args_is(&ar, NULL, "--dir")) a->dir = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--sessions")) a->sessions_opt = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--yes")) a->yes = 1;
        else if (ds4_args_is(&ar, NULL, "--resume")) a->resume = 1;
        else if (ds4_args_is(&ar, NULL, "--trace")) a->trace_path = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, "-p", "--prompt")) a->task = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--script")) a->script_path = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--max-turns")) a->max_turns = ds4_args_int(&ar, 1, 1000000);
        else if (ds4_args_is(&ar, NULL, "--max-tokens")) a->max_tokens = ds4_args_int(&ar, 1, 1 << 24);
        else if (ds4_args_is(&ar, NULL, "--dump-logits")) a->dump_logits = ds4_args_value(&ar);
        else ds4_args_unknown(&ar);
    }
    a->model = mo.model;
    a->ctx = mo.ctx;
    ds4_model_opts_model_params(&mo, &a->mparams);
    a->think = mo.think;
    a->sp = mo.sp;
    a->lookup = mo.lookup;
    a->mtp_draft = ds4_model_opts_mtp_draft(&mo);
    if (!mo.seed_set) a->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

static void print_history(agent *a) {
    ag_sess *s = a->cur;
    if (!s->n_msgs) { ui_note(a, "the session is empty"); return; }
    for (int i = 0; i < s->n_msgs; i++) {
        const ag_msg *m = &s->msgs[i];
        if (m->kind == AG_USER) fprintf(a->ui, "\nuser: %s\n", m->text ? m->text : "");
        else if (m->kind == AG_ASSISTANT) {
            fprintf(a->ui, "assistant%s: %s\n",
                    m->stop == AG_STOP_BUDGET ? " (cut at --max-tokens)" : m->stop == AG_STOP_CONTEXT
                    ? " (cut at the context end)" : m->stop ? " (interrupted)" : "", m->text ? m->text : "");
            for (int k = 0; k < m->n_calls; k++) {
                ds4_buf d = { 0 };
                ag_tool_describe(m->calls[k].name, m->calls[k].args, &d);
                fprintf(a->ui, "  > %s\n", d.p ? d.p : "");
                ds4_buf_free(&d);
            }
        } else {
            for (int k = 0; k < m->n_calls; k++)
                fprintf(a->ui, "    = %s: %s\n", m->calls[k].name ? m->calls[k].name : "",
                        m->calls[k].summary ? m->calls[k].summary : "");
        }
    }
    fflush(a->ui);
}

static void help_cmds(agent *a) {
    fprintf(a->ui,
            "  /help        this help\n"
            "  /new         start a new session (the current one stays saved)\n"
            "  /list        saved sessions: id, tokens, last use, title\n"
            "  /switch ID   continue a saved session (ID or a unique prefix of it)\n"
            "  /save        save the current session now\n"
            "  /history     the conversation of this session\n"
            "  /last        the full result of the last tool calls\n"
            "  /think       thinking mode;  /nothink  answer without reasoning\n"
            "  /ctx N       resize the context (keeps the session if it fits)\n"
            "  /quit        save and exit (also Ctrl+D)\n"
            "Ctrl+C stops the generation or the running tool.\n");
}

static int resize_ctx(agent *a, int ctx) {
    int n = ds4_session_n_tokens(a->s);
    if (n > ctx) { ui_note(a, "the session holds %d tokens: /ctx must be at least that", n); return -1; }
    if (ctx < (int)a->sys_ids.n + AG_CTX_MIN_ROOM) {
        ui_note(a, "/ctx must be at least %d (the system prompt and tool schemas take %zu tokens)",
                (int)a->sys_ids.n + AG_CTX_MIN_ROOM, a->sys_ids.n);
        return -1;
    }
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = ctx;
    char *err = NULL;
    ds4_session *ns = ds4_session_new(a->m, &sp, &err);
    if (!ns) { ui_note(a, "%s", err ? err : "cannot create the session"); free(err); return -1; }
    if (n > 0) {
        ds4_buf snap = { 0 };
        if (ds4_session_snapshot(a->s, &snap) || ds4_session_restore(ns, snap.p, snap.n, &err)) {
            ui_note(a, "%s", err ? err : "cannot move the state");
            free(err);
            ds4_buf_free(&snap);
            ds4_session_free(ns);
            return -1;
        }
        ds4_buf_free(&snap);
    }
    ds4_session_free(a->s);
    a->s = ns;
    a->ctx = ctx;
    return 0;
}

static int do_switch(agent *a, const char *arg) {
    char id[64];
    int f = arg && *arg ? ag_find_id(a, arg, id, sizeof id) : -1;
    if (f == -2) { ui_note(a, "'%s' matches several sessions (/list)", arg); return -1; }
    if (f) { ui_note(a, "no saved session '%s' (/list)", arg ? arg : ""); return -1; }
    if (!strcmp(id, a->cur->id)) { ui_note(a, "already in session %s", id); return 0; }
    ag_save(a, 1);
    char prev[40];
    snprintf(prev, sizeof prev, "%s", a->cur->id);
    int had = a->cur->n_msgs > 0;
    if (ag_restore(a, id) == 0) {
        ui_note(a, "session %s: %s (%d tokens, restored without prefill)", id,
                a->cur->title ? a->cur->title : "", ds4_session_n_tokens(a->s));
        return 0;
    }
    /* keep working where we were */
    if (had && ag_restore(a, prev) == 0) return -1;
    ag_sess_new(a);
    return -1;
}

static int interactive(agent *a) {
    ui_history_load(a);
    ui_note(a, "working in %s, session %s. /help for commands, Ctrl+D to quit.", a->root, a->cur->id);
    for (;;) {
        ag_interrupt = 0;
        if (ag_terminate) break;
        char *line = ui_readline(a, a->color ? "\001\033[1m\002ds4>\001\033[0m\002 " : "ds4> ");
        if (!line) {
            if (ag_terminate) break;
            if (ag_interrupt) { fputc('\n', a->ui); continue; }
            fputc('\n', a->ui);
            break;
        }
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) { free(line); continue; }
        ui_history_add(a, p);
        if (p[0] == '/') {
            char *arg = strchr(p, ' ');
            if (arg) { *arg++ = 0; while (*arg == ' ') arg++; }
            if (!strcmp(p, "/quit") || !strcmp(p, "/exit")) { free(line); break; }
            else if (!strcmp(p, "/help")) help_cmds(a);
            else if (!strcmp(p, "/new")) {
                ag_save(a, 1);
                ag_sess_new(a);
                ui_note(a, "new session %s", a->cur->id);
            }
            else if (!strcmp(p, "/list")) { ag_save(a, 1); ag_list(a); }
            else if (!strcmp(p, "/switch")) do_switch(a, arg);
            else if (!strcmp(p, "/save")) {
                if (!a->cur->n_msgs) ui_note(a, "nothing to save yet");
                else ag_save(a, 0);
            }
            else if (!strcmp(p, "/history")) print_history(a);
            else if (!strcmp(p, "/last")) {
                if (a->last_results.n) fprintf(a->ui, "%s\n", a->last_results.p);
                else ui_note(a, "no tool has run yet");
            }
            else if (!strcmp(p, "/think")) { a->think = DS4_THINK_HIGH; ui_note(a, "thinking: on"); }
            else if (!strcmp(p, "/nothink")) { a->think = DS4_THINK_NONE; ui_note(a, "thinking: off"); }
            else if (!strcmp(p, "/ctx")) {
                char *end = NULL;
                long v = arg ? strtol(arg, &end, 10) : 0;
                if (!arg || *end || v < 256 || v > (1 << 24)) ui_note(a, "usage: /ctx N (256 .. 16777216)");
                else if (resize_ctx(a, (int)v) == 0) ui_note(a, "context: %ld tokens", v);
            }
            else ui_note(a, "unknown command %s (/help)", p);
            free(line);
            continue;
        }
        int rc = ag_run(a, p);
        if (rc == 1) ui_note(a, "interrupted");
        free(line);
    }
    ag_save(a, 0);
    return 0;
}

int main(int argc, char **argv) {
    agent A, *a = &A;
    parse_args(argc, argv, a);
    a->interactive = a->task == NULL;
    a->ui = a->interactive ? stdout : stderr;

    char real[PATH_MAX];
    struct stat sb;
    if (!realpath(a->dir, real) || stat(real, &sb) || !S_ISDIR(sb.st_mode))
        die("--dir %s: not a directory", a->dir);
    a->root = strdup(real);
    if (ag_sessions_locate(a)) exit(1);
    ui_init(a);
    if (a->legacy_dir)
        ui_note(a, "sessions are kept in %s now; those in %s (older versions) are still listed and "
                "resumable, never changed: remove that directory when done with them",
                a->sessions_dir, a->legacy_dir);

    char *err = NULL;
    if (a->script_path) {
        if (ag_script_load(a->script_path, &a->script, &err)) die("%s", err);
        a->scripted = 1;
    }
    if (a->trace_path && !(a->trace = fopen(a->trace_path, "a")))
        die("cannot open %s: %s", a->trace_path, strerror(errno));
    if (a->dump_logits && !(a->dump = fopen(a->dump_logits, "wb")))
        die("cannot open %s: %s", a->dump_logits, strerror(errno));
    if (ds4_model_file_check("ds4-agent", a->model)) exit(1);

    a->m = ds4_model_load(a->model, &a->mparams, &err);
    if (!a->m) die("%s", err ? err : "cannot load the model");
    if (a->mtp_draft > 0 && !ds4_model_has_mtp(a->m))
        die("--mtp-draft: %s has no MTP block (mtp.0.* tensors, or a GLM NextN layer); name one with "
            "--mtp FILE", a->model);
    {
        ds4_expert_cache_stats x;
        ds4_model_expert_cache_stats(a->m, &x);
        if (x.enabled && !a->scripted)
            ui_note(a, "ssd streaming: expert cache %.1f MiB (%llu of %llu routed expert slices), %s reads",
                    x.cache_bytes / 1048576.0, (unsigned long long)x.slots, (unsigned long long)x.n_slices,
                    x.direct_io ? "O_DIRECT" : "buffered");
    }
    a->tok = ds4_model_tokenizer(a->m);
    a->ids = ds4_tok_special(a->tok);
    ds4_model_info info;
    ds4_model_get_info(a->m, &info);
    a->n_vocab = info.n_vocab;
    if (info.random_weights && !a->scripted)
        ui_note(a, "NOTE: %s has random weights (a synthetic model): its output is noise", info.name);
    if (a->think == DS4_THINK_MAX && a->ctx < DS4_THINK_MAX_MIN_CTX)
        ui_note(a, "--think-max needs --ctx %d or more; using --think", DS4_THINK_MAX_MIN_CTX);
    ds4_session_params spp;
    ds4_session_params_default(&spp);
    spp.ctx_size = a->ctx;
    a->s = ds4_session_new(a->m, &spp, &err);
    if (!a->s) die("%s", err ? err : "cannot create the session");
    a->smp = ds4_sampler_new(a->n_vocab, &a->sp);
    ds4_kvstore_params kp;
    ds4_kvstore_params_default(&kp);
    kp.dir = a->kv_dir;
    a->kv = ds4_kvstore_open(a->m, &kp, &err);
    if (!a->kv) die("%s", err ? err : "cannot open the session store");
    if (ag_sys_tokens(a)) die("cannot build the system prompt");
    /* every later shortage of room is compaction's (which always fits when
     * this much is left beside the system prompt) */
    if (a->ctx < (int)a->sys_ids.n + AG_CTX_MIN_ROOM)
        die("--ctx %d is too small: the system prompt and tool schemas take %zu tokens; use --ctx %d or more",
            a->ctx, a->sys_ids.n, (int)a->sys_ids.n + AG_CTX_MIN_ROOM);
    a->tools.root = a->root;
    a->tools.yes = a->yes;
    a->tools.confirm = ui_confirm;
    a->tools.ud = a;

    ds4_catch_signals(on_sigint, on_sigterm, 0);   /* a blocking read wakes up */
    signal(SIGPIPE, SIG_IGN);

    ag_sess_new(a);
    if (a->resume) {
        char id[64];
        if (ag_latest_id(a, id, sizeof id) == 0 && ag_restore(a, id) == 0)
            ui_note(a, "resumed session %s: %s (%d tokens)", id, a->cur->title ? a->cur->title : "",
                    ds4_session_n_tokens(a->s));
        else
            ui_note(a, "no session to resume in %s; starting a new one", a->sessions_dir);
    }
    a->tools.sess = a->cur;

    int rc = 0;
    if (a->task) {
        int r = ag_run(a, a->task);
        if (r == 0) {
            fwrite(a->final_answer.p ? a->final_answer.p : "", 1, a->final_answer.n, stdout);
            fputc('\n', stdout);
        }
        rc = r == 0 ? 0 : r == 1 ? 130 : r == 2 ? 3 : 1;
        ag_save(a, 1);   /* also what an interrupted prefill left pending */
    } else {
        rc = interactive(a);
    }
    if (a->trace) fclose(a->trace);
    if (a->dump) fclose(a->dump);
    ds4_kvstore_close(a->kv);
    ag_sess_free(a->cur);
    ag_script_free(&a->script);
    ds4_sampler_free(a->smp);
    ds4_session_free(a->s);
    ds4_model_free(a->m);
    ds4_tokens_free(&a->sys_ids);
    ds4_buf_free(&a->last_results);
    ds4_buf_free(&a->final_answer);
    free(a->root);
    free(a->kv_dir);
    free(a->sessions_dir);
    free(a->legacy_dir);
    return rc;
}
