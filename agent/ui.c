/*
 * ui.c -- the agent's terminal presentation.
 *
 * Owns: how the conversation looks: streamed output (reasoning dimmed),
 * one compact line per tool call while it streams and a summary of its
 * result, notes, the status line (context used/size, prefill and decode
 * speed), the prefill progress bar, confirmation questions (with the diff
 * of a write or edit), line editing
 * and history (libedit, as the CLI).  Interactive runs draw on stdout; with
 * -p everything but the final answer goes to stderr.  Colours only on a
 * terminal.  Must not: decide anything about the conversation.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "agent.h"

#define DIM "\033[2m"
#define BOLD "\033[1m"
#define CYAN "\033[36m"
#define GREEN "\033[32m"
#define RED "\033[31m"
#define RESET "\033[0m"

static int g_mode;          /* 0 nothing streamed, 1 reasoning, 2 content */
static int g_col;           /* characters on the current line */
static int g_pending_call;  /* a "calling NAME..." line is on screen */
static double g_prog_t0;
static int g_prog_shown;
static char g_hist[4200];

void ui_init(agent *a) {
    a->color = isatty(fileno(a->ui)) && getenv("NO_COLOR") == NULL;
    snprintf(g_hist, sizeof g_hist, "%s/../history", a->sessions_dir);
}

static void put(agent *a, const char *p, size_t n) {
    fwrite(p, 1, n, a->ui);
    for (size_t i = 0; i < n; i++) g_col = p[i] == '\n' ? 0 : g_col + 1;
    fflush(a->ui);
}

static void newline_if_needed(agent *a) {
    if (g_col) put(a, "\n", 1);
}

void ui_reasoning(agent *a, const char *p, size_t n) {
    if (!n) return;
    if (g_mode != 1) {
        newline_if_needed(a);
        if (!a->color) put(a, "[thinking] ", 11);
        g_mode = 1;
    }
    if (a->color) fputs(DIM, a->ui);
    put(a, p, n);
    if (a->color) fputs(RESET, a->ui);
}

void ui_content(agent *a, const char *p, size_t n) {
    if (!n) return;
    if (g_mode == 1) { newline_if_needed(a); }
    if (g_mode != 2 && g_mode != 0) put(a, "\n", 1);
    g_mode = 2;
    put(a, p, n);
}

void ui_end_stream(agent *a) {
    newline_if_needed(a);
    g_mode = 0;
}

void ui_call_begin(agent *a, const char *name) {
    ui_end_stream(a);
    if (a->color) {
        fprintf(a->ui, DIM "  ... %s" RESET, name);
        fflush(a->ui);
        g_pending_call = 1;
    }
}

void ui_call_line(agent *a, const char *name, const char *args) {
    ds4_buf d = { 0 };
    ag_tool_describe(name, args, &d);
    if (g_pending_call) { fputs("\r\033[K", a->ui); g_pending_call = 0; }
    if (a->color) fprintf(a->ui, BOLD CYAN "> " RESET BOLD "%s" RESET "\n", d.p ? d.p : name);
    else fprintf(a->ui, "> %s\n", d.p ? d.p : name);
    g_col = 0;
    fflush(a->ui);
    ds4_buf_free(&d);
}

void ui_result(agent *a, int ok, const char *summary) {
    if (a->color)
        fprintf(a->ui, "  %s%s" RESET DIM " %s  (/last shows it)" RESET "\n", ok ? GREEN : RED,
                ok ? "ok" : "failed", summary ? summary : "");
    else
        fprintf(a->ui, "  = %s: %s\n", ok ? "ok" : "failed", summary ? summary : "");
    g_col = 0;
    fflush(a->ui);
}

void ui_note(agent *a, const char *fmt, ...) {
    va_list ap;
    newline_if_needed(a);
    va_start(ap, fmt);
    if (a->color) fputs(DIM "ds4-agent: ", a->ui);
    else fputs("ds4-agent: ", a->ui);
    vfprintf(a->ui, fmt, ap);
    if (a->color) fputs(RESET, a->ui);
    fputc('\n', a->ui);
    va_end(ap);
    g_col = 0;
    fflush(a->ui);
}

void ui_status(agent *a, int prefill, double prefill_s, int gen, double gen_s) {
    int n = ds4_session_n_tokens(a->s), ctx = ds4_session_ctx_size(a->s);
    newline_if_needed(a);
    fprintf(a->ui, "%s[ctx %d/%d %d%% | prefill %d tok, %.0f tok/s | decode %d tok, %.1f tok/s",
            a->color ? DIM : "", n, ctx, ctx ? (int)(100.0 * n / ctx) : 0, prefill,
            prefill_s > 0 ? prefill / prefill_s : 0.0, gen, gen_s > 0 ? gen / gen_s : 0.0);
    if (a->spec.drafted)
        fprintf(a->ui, " | %s %llu of %llu drafts kept",
                a->lookup > 0 && a->mtp_draft > 0 ? "lookup+mtp" : a->lookup > 0 ? "lookup" : "mtp",
                (unsigned long long)a->spec.accepted, (unsigned long long)a->spec.drafted);
    fprintf(a->ui, "]%s\n", a->color ? RESET : "");
    g_col = 0;
    fflush(a->ui);
}

/* Progress of a prefill: a bar with tokens/s on a terminal; the place
 * where Ctrl+C cancels a long prefill. */
int ui_progress(void *ud, int done, int total) {
    agent *a = ud;
    if (ag_interrupt) return 1;
    if (done == 0 || !g_prog_t0) { g_prog_t0 = ds4_now(); g_prog_shown = 0; }
    if (!a->color || total < 256) {
        if (done >= total) g_prog_t0 = 0;
        return 0;
    }
    double el = ds4_now() - g_prog_t0;
    int w = 30, f = total ? (int)((long)w * done / total) : w;
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : '.';
    bar[w] = 0;
    fprintf(a->ui, "\r" DIM "prefill %d/%d [%s] %3d%% %.0f tok/s" RESET "\033[K", done, total, bar,
            total ? 100 * done / total : 100, el > 0 ? done / el : 0.0);
    g_prog_shown = 1;
    if (done >= total) { fputs("\r\033[K", a->ui); g_prog_t0 = 0; }
    fflush(a->ui);
    return 0;
}

/* A write's or edit's diff before its question: removed lines red, added
 * green, hunk headers cyan on a terminal; as is otherwise. */
static void ui_diff(agent *a, const char *d) {
    while (*d) {
        const char *nl = strchr(d, '\n');
        int l = nl ? (int)(nl - d) : (int)strlen(d);
        const char *c = NULL;
        if (a->color) {
            if (!strncmp(d, "---", 3) || !strncmp(d, "+++", 3)) c = BOLD;
            else if (d[0] == '@') c = CYAN;
            else if (d[0] == '-') c = RED;
            else if (d[0] == '+') c = GREEN;
            else if (d[0] != ' ') c = DIM;
        }
        fprintf(a->ui, "%s%.*s%s\n", c ? c : "", l, d, c ? RESET : "");
        d += l + (nl ? 1 : 0);
    }
    g_col = 0;
}

int ui_confirm(void *ud, const char *tool, const char *what, const char *detail) {
    agent *a = ud;
    newline_if_needed(a);
    if (detail && *detail) ui_diff(a, detail);
    char q[600];
    snprintf(q, sizeof q, "allow %s? [y]es / [n]o / [a]lways for %s: ", what, tool);
    char *line = NULL;
    if (a->interactive) {
        /* libedit shows no prompt when stdin is not a terminal */
        if (!isatty(0)) { fputs(q, a->ui); fflush(a->ui); }
        line = readline(isatty(0) ? q : "");
    } else {
        fputs(q, a->ui);
        fflush(a->ui);
        char buf[256];
        if (fgets(buf, sizeof buf, stdin)) line = strdup(buf);
        else fputc('\n', a->ui);
    }
    g_col = 0;
    if (!line) return 0;
    char *p = line;
    while (*p == ' ') p++;
    int ans = (*p == 'y' || *p == 'Y') ? 1 : (*p == 'a' || *p == 'A') ? 2 : 0;
    free(line);
    ag_interrupt = 0;
    return ans;
}

char *ui_readline(agent *a, const char *prompt) {
    (void)a;
    return readline(prompt);
}

void ui_history_load(agent *a) {
    (void)a;
    using_history();
    read_history(g_hist);
}

void ui_history_add(agent *a, const char *line) {
    (void)a;
    add_history(line);
    write_history(g_hist);
}
