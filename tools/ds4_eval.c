/*
 * ds4_eval.c -- `ds4-eval`: a capability check of a model on ds4's own
 * question set (tools/eval/questions.c), and `ds4-eval --nll` for the mean
 * negative log-likelihood of given continuations.
 *
 * Owns: running each question (render, prefill, generate with a thinking
 * budget), the terminal view, the reports (JSON + text), --trace and
 * --script.  Grading is in tools/eval/grade.c; log-probabilities come from
 * src/common/logprob.c (the code ds4 --dump-logprobs uses).  Uses only the
 * public API (ds4.h).
 *
 * Thinking budget: --think-soft N lets the reasoning run N tokens, then
 * closes it with a forced `</think>` at the next token that ends a line (a
 * thought is not cut mid-sentence); --think-hard M forces `</think>` at M
 * tokens whatever comes.  Forcing means the token is evaluated in place of
 * a sampled one, exactly as if the model had produced it.
 *
 * --script FILE (JSON lines {"id": ..., "output": ...}) forces the output
 * of the listed questions: the text is tokenized (control tokens such as
 * </think> recognised) and its tokens are evaluated one by one as if
 * sampled, under the same budget rules, so a whole run on a test model is
 * deterministic and exercises everything but the sampler.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"
#include "common/args.h"
#include "common/model_opts.h"
#include "ds4_gen.h"
#include "eval/grade.h"

static const char *PROG = "ds4-eval";

/* The shared model/runtime flags ds4-eval takes (model_opts.h), with its
 * defaults: a 16K context, greedy, seed 1 (a run is reproducible). */
static void eval_opts_defaults(ds4_model_opts *o) {
    ds4_model_opts_init(o, PROG, DS4_MO_MODEL | DS4_MO_CTX | DS4_MO_TEMP);
    o->ctx = 16384;
    o->sp.temperature = 0;
    o->sp.seed = 1;
    o->seed_default = "1";
}

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-eval [options]              run the embedded question set\n"
"       ds4-eval --nll FILE.jsonl [-m MODEL]   mean negative log-likelihood\n"
"       ds4-eval --list                 print the questions (id, topic, kind,\n"
"                                       expected, tool arguments, prompt) and exit\n"
"\n"
"      --think           thinking mode, effort high (default)\n"
"      --nothink         answer without reasoning\n"
"      --think-soft N    after N reasoning tokens, close the reasoning at the\n"
"                        next line end (default 1024; 0 = no soft cutoff)\n"
"      --think-hard N    force </think> at N reasoning tokens (default 2048;\n"
"                        0 = none; a smaller value also lowers the default\n"
"                        soft budget to it)\n"
"  -n, --max-answer N    answer tokens after the reasoning (default 512)\n"
"      --ids LIST        only these question ids (comma separated)\n"
"      --limit N         only the first N questions\n"
"      --report PREFIX   write PREFIX.json and PREFIX.txt\n"
"      --trace FILE      JSON lines: per question the rendered prompt, the\n"
"                        reasoning and answer text, cutoffs and timings\n"
"      --script FILE     JSON lines {\"id\":..,\"output\":..}: force those\n"
"                        questions' output, evaluated as if sampled\n"
"      --plain           no terminal view even on a terminal\n"
"      --nll FILE        JSON lines {\"prompt\":..,\"continuation\":..}: mean\n"
"                        negative log-likelihood (nats) per continuation token\n"
"                        given its prompt; both texts are tokenized apart, as\n"
"                        they are (control tokens recognised, no template)\n"
"  -h, --help, --version\n");
    ds4_model_opts d;
    eval_opts_defaults(&d);
    ds4_model_opts_help(f, &d);
    fprintf(f,
"\n"
"Terminal view (stdout a terminal): questions with their status on the\n"
"left, the selected one's reasoning (dim) and answer on the right.  Keys:\n"
"  p pause/resume   j/k or arrows select   f follow the running question\n"
"  q quit (the report covers the questions done)\n"
"Exit status: 0 when the run completed (whatever the score), 1 on an error.\n");
}

typedef struct {
    const char *model;
    int threads, ctx;
    ds4_think think;
    int soft, hard, max_answer;
    ds4_sampler_params sp;
    const char *ids, *report, *trace, *script, *nll;
    int limit, plain, list;
} opts;

#define die(...) ds4_die(PROG, __VA_ARGS__)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ */
/* per-question state                                                  */

enum { ST_WAIT, ST_RUN, ST_PASS, ST_FAIL, ST_ERROR };

typedef struct {
    const ev_question *q;
    int status;
    int prompt_tokens, gen_tokens, think_tokens, answer_tokens;
    const char *cutoff;          /* the reasoning's end: none, soft, hard */
    const char *stop;            /* the output's end: eos, length, context,
                                    error, render */
    ds4_buf prompt, reasoning, content, answer;
    double prefill_s, gen_s;
    const char *script;          /* forced output (NULL = sample) */
} item;

/* ------------------------------------------------------------------ */
/* terminal view                                                       */

typedef struct {
    int on;                      /* full-screen view active */
    struct termios saved;
    int rows, cols;
    int sel, follow, paused, quit;
    double last_draw;
    item *items;
    int n, running;
} view;

static volatile sig_atomic_t g_stop;
static void on_sigint(int s) { (void)s; g_stop = 1; }

static void view_size(view *v) {
    struct winsize ws;
    v->rows = 24; v->cols = 80;
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 4 && ws.ws_col > 40) { v->rows = ws.ws_row; v->cols = ws.ws_col; }
}

static void view_open(view *v) {
    struct termios t;
    if (tcgetattr(0, &v->saved) != 0) { v->on = 0; return; }
    t = v->saved;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    tcsetattr(0, TCSANOW, &t);
    fputs("\033[?1049h\033[?25l", stdout);   /* alternate screen, no cursor */
    v->follow = 1;
}

static void view_close(view *v) {
    if (!v->on) return;
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    tcsetattr(0, TCSANOW, &v->saved);
    v->on = 0;
}

static const char *status_mark(int st) {
    switch (st) {
    case ST_RUN: return "\033[33m>\033[0m";
    case ST_PASS: return "\033[32m+\033[0m";
    case ST_FAIL: return "\033[31mx\033[0m";
    case ST_ERROR: return "\033[31m!\033[0m";
    }
    return ".";
}

/* Last `h` wrapped lines of the selected question's text in a column of
 * width w starting at column x. */
static void draw_text(const item *it, int x, int w, int h) {
    /* gather the text: reasoning (dim) then answer, as (byte, dim) */
    const ds4_buf *parts[2] = { &it->reasoning, &it->content };
    /* first pass: count lines to find where the last h start */
    int line = 0, col = 0;
    for (int p = 0; p < 2; p++)
        for (size_t i = 0; i < parts[p]->n; i++) {
            unsigned char c = (unsigned char)parts[p]->p[i];
            if ((c & 0xc0) == 0x80) continue;
            if (c == '\n' || col >= w) { line++; col = 0; if (c == '\n') continue; }
            col++;
        }
    int first = line - h + 1 < 0 ? 0 : line - h + 1;
    line = 0; col = 0;
    int row = 2;
    printf("\033[%d;%dH", row, x);
    for (int p = 0; p < 2; p++) {
        if (line >= first) fputs(p == 0 ? "\033[2m" : "\033[0m", stdout);
        for (size_t i = 0; i < parts[p]->n; i++) {
            unsigned char c = (unsigned char)parts[p]->p[i];
            int cont = (c & 0xc0) == 0x80;
            if (!cont && (c == '\n' || col >= w)) {
                line++; col = 0;
                if (line > first) { row++; printf("\033[%d;%dH", row, x); }
                if (c == '\n') continue;
            }
            if (!cont) col++;
            if (line >= first && row < 2 + h) {
                if (c < 0x20) c = ' ';
                putchar(c);
            }
        }
    }
    fputs("\033[0m", stdout);
}

static void view_draw(view *v, int force) {
    if (!v->on) return;
    double t = now_s();
    if (!force && t - v->last_draw < 0.05) return;
    v->last_draw = t;
    view_size(v);
    int lw = 26, h = v->rows - 2;
    if (v->follow && v->running >= 0) v->sel = v->running;
    int pass = 0, done = 0;
    for (int i = 0; i < v->n; i++) {
        pass += v->items[i].status == ST_PASS;
        done += v->items[i].status >= ST_PASS;
    }
    fputs("\033[H\033[2J", stdout);
    printf("\033[1mds4-eval\033[0m  %d/%d done, %d passed%s   [p]ause [j/k] select [f]ollow [q]uit",
           done, v->n, pass, v->paused ? "  \033[7m PAUSED \033[0m" : "");
    int top = v->sel - h / 2;
    if (top > v->n - h) top = v->n - h;
    if (top < 0) top = 0;
    for (int r = 0; r < h && top + r < v->n; r++) {
        const item *it = &v->items[top + r];
        printf("\033[%d;1H%s%s %-4s %-10.10s %5d\033[0m", r + 2, top + r == v->sel ? "\033[7m" : "",
               status_mark(it->status), it->q->id, it->q->topic, it->gen_tokens);
    }
    const item *s = &v->items[v->sel];
    printf("\033[%d;%dH\033[1m%s\033[0m expected %.40s", 1 + 1, lw + 2, s->q->id, s->q->expect);
    if (s->status >= ST_PASS) printf("  got %.30s", s->answer.p ? s->answer.p : "");
    draw_text(s, lw + 2, v->cols - lw - 2, h - 1);
    fflush(stdout);
}

/* Handle pending keys; blocks while paused. */
static void view_keys(view *v) {
    if (!v->on) return;
    for (;;) {
        unsigned char k[8];
        struct pollfd pf = { 0, POLLIN, 0 };
        int r = poll(&pf, 1, v->paused ? 100 : 0);
        if (g_stop) { v->quit = 1; return; }
        if (r > 0) {
            ssize_t n = read(0, k, sizeof k);
            for (ssize_t i = 0; i < n; i++) {
                if (k[i] == 'q') { v->quit = 1; return; }
                if (k[i] == 'p' || k[i] == ' ') v->paused = !v->paused;
                else if (k[i] == 'f') v->follow = 1;
                else if (k[i] == 'j' || (k[i] == 'B' && i >= 2 && k[i - 1] == '[')) {
                    if (v->sel + 1 < v->n) v->sel++;
                    v->follow = 0;
                } else if (k[i] == 'k' || (k[i] == 'A' && i >= 2 && k[i - 1] == '[')) {
                    if (v->sel > 0) v->sel--;
                    v->follow = 0;
                }
            }
            view_draw(v, 1);
        }
        if (!v->paused) return;
    }
}

/* ------------------------------------------------------------------ */
/* running one question                                                */

typedef struct {
    opts *o;
    ds4_model *m;
    const ds4_tokenizer *tok;
    const ds4_special_ids *sp;
    ds4_session *s;
    ds4_sampler *smp;
    FILE *trace;
    view *v;
} runner;

static int render(runner *r, const ev_question *q, ds4_buf *out) {
    ds4_message msgs[2];
    int nm = 0;
    memset(msgs, 0, sizeof msgs);
    ds4_buf user = { 0 };
    ds4_buf_puts(&user, q->prompt);
    ds4_buf_puts(&user, ev_prompt_suffix(q->kind));
    if (q->kind == EV_TOOL) {
        msgs[nm].role = DS4_ROLE_SYSTEM;
        msgs[nm].tools_json = ev_tools_json;
        nm++;
    }
    msgs[nm].role = DS4_ROLE_USER;
    msgs[nm].content = user.p;
    msgs[nm].content_len = user.n;
    nm++;
    ds4_render_opts ro = { .think = r->o->think };
    char *err = NULL;
    int rc = ds4_render_chat(msgs, nm, &ro, out, &err);
    if (rc) { fprintf(stderr, "%s: %s: %s\n", PROG, q->id, err ? err : "cannot render"); free(err); }
    ds4_buf_free(&user);
    return rc;
}

static int has_newline(const ds4_tokenizer *tok, int32_t id) {
    size_t n;
    const char *p = ds4_token_bytes(tok, id, &n);
    return p && memchr(p, '\n', n) != NULL;
}

static int run_item(runner *r, item *it) {
    opts *o = r->o;
    it->status = ST_RUN;
    it->cutoff = "none";
    it->stop = "eos";
    if (render(r, it->q, &it->prompt)) { it->status = ST_ERROR; it->stop = "render"; return 0; }
    ds4_tokens ids = { 0 }, forced = { 0 };
    ds4_tokenize(r->tok, it->prompt.p, it->prompt.n, DS4_TOK_SPECIAL, &ids);
    it->prompt_tokens = (int)ids.n;
    if (it->script) ds4_tokenize(r->tok, it->script, strlen(it->script), DS4_TOK_SPECIAL, &forced);
    double t0 = now_s();
    int rc = ds4_session_sync(r->s, ids.v, (int)ids.n, NULL, NULL, NULL);
    it->prefill_s = now_s() - t0;
    ds4_tokens_free(&ids);
    if (rc) {
        it->status = ST_ERROR;
        it->stop = rc == DS4_ECTX ? "context" : "error";
        ds4_tokens_free(&forced);
        return rc == DS4_ECTX ? 0 : rc;
    }
    ds4_sampler_reseed(r->smp, o->sp.seed);
    int in_think = o->think != DS4_THINK_NONE, close_soon = 0;
    size_t fi = 0;
    ds4_detok dt;
    ds4_detok_init(&dt);
    t0 = now_s();
    for (;;) {
        if (r->v->on) { view_keys(r->v); if (r->v->quit) break; }
        else if (g_stop) break;
        int32_t t;
        const float *lg = ds4_session_logits(r->s);
        if (in_think && ((o->hard > 0 && it->think_tokens >= o->hard) || close_soon)) {
            t = r->sp->think_end;
            it->cutoff = close_soon ? "soft" : "hard";
            /* a script skips its own reasoning up to its </think> */
            if (it->script) {
                while (fi < forced.n && forced.v[fi] != r->sp->think_end) fi++;
                if (fi < forced.n) fi++;
            }
        } else if (it->script) {
            t = fi < forced.n ? forced.v[fi++] : r->sp->eos;
        } else {
            t = ds4_sample(r->smp, lg);
        }
        if (t == r->sp->eos) break;
        if (!in_think && it->answer_tokens >= o->max_answer) { it->stop = "length"; break; }
        rc = ds4_session_eval(r->s, &t, 1, NULL, NULL);
        if (rc) { it->stop = rc == DS4_ECTX ? "context" : "error"; if (rc == DS4_ECTX) rc = 0; break; }
        it->gen_tokens++;
        if (in_think && t == r->sp->think_end) {
            ds4_detok_flush(&dt, &it->reasoning);
            in_think = 0;
        } else if (in_think) {
            it->think_tokens++;
            ds4_detok_push(&dt, r->tok, t, &it->reasoning);
            if (o->soft > 0 && it->think_tokens >= o->soft && has_newline(r->tok, t)) close_soon = 1;
        } else {
            it->answer_tokens++;
            ds4_detok_push(&dt, r->tok, t, &it->content);
        }
        view_draw(r->v, 0);
    }
    ds4_detok_flush(&dt, in_think ? &it->reasoning : &it->content);
    it->gen_s = now_s() - t0;
    ds4_tokens_free(&forced);
    if (rc) { it->status = ST_ERROR; return rc; }
    if (r->v->quit || (!r->v->on && g_stop)) { it->status = ST_WAIT; return 0; }
    it->status = ev_grade(it->q, it->content.p, it->content.n, &it->answer) ? ST_PASS : ST_FAIL;
    return 0;
}

/* ------------------------------------------------------------------ */
/* reports                                                             */

static const char *status_name(int st) {
    switch (st) {
    case ST_PASS: return "pass";
    case ST_FAIL: return "fail";
    case ST_ERROR: return "error";
    case ST_RUN: return "running";
    }
    return "not run";
}

/* A JSON string of model output: bytes that are not valid UTF-8 (a
 * test model emits any byte tokens) become U+FFFD, so the reports always
 * parse. */
static json_t *jstr(const ds4_buf *b) {
    ds4_buf o = { 0 };
    const unsigned char *p = (const unsigned char *)(b->p ? b->p : "");
    for (size_t i = 0; i < b->n;) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 && c >= 0xc2 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
                  (c & 0xf8) == 0xf0 && c <= 0xf4 ? 4 : 0;
        int ok = len > 0 && i + (size_t)len <= b->n && c != 0;
        for (int k = 1; ok && k < len; k++) ok = (p[i + k] & 0xc0) == 0x80;
        if (ok && len == 3) {   /* no overlongs, no surrogates */
            unsigned v = ((c & 0x0f) << 12) | ((p[i + 1] & 0x3fu) << 6);
            ok = v >= 0x800 && (v < 0xd800 || v > 0xdfff);
        }
        if (ok && len == 4) {
            unsigned v = ((c & 0x07) << 18) | ((p[i + 1] & 0x3fu) << 12);
            ok = v >= 0x10000 && v <= 0x10ffff;
        }
        if (ok) { ds4_buf_append(&o, p + i, (size_t)len); i += (size_t)len; }
        else { ds4_buf_puts(&o, "\xef\xbf\xbd"); i++; }
    }
    json_t *j = json_stringn(o.p ? o.p : "", o.n);
    ds4_buf_free(&o);
    return j ? j : json_string("");
}

static json_t *item_json(const item *it, int full) {
    json_t *j = json_object();
    json_object_set_new(j, "id", json_string(it->q->id));
    json_object_set_new(j, "topic", json_string(it->q->topic));
    json_object_set_new(j, "kind", json_string(ev_kind_name(it->q->kind)));
    json_object_set_new(j, "status", json_string(status_name(it->status)));
    json_object_set_new(j, "pass", json_boolean(it->status == ST_PASS));
    json_object_set_new(j, "prompt_tokens", json_integer(it->prompt_tokens));
    json_object_set_new(j, "generated_tokens", json_integer(it->gen_tokens));
    json_object_set_new(j, "reasoning_tokens", json_integer(it->think_tokens));
    json_object_set_new(j, "answer_tokens", json_integer(it->answer_tokens));
    json_object_set_new(j, "think_cutoff", json_string(it->cutoff ? it->cutoff : "none"));
    json_object_set_new(j, "stop", json_string(it->stop ? it->stop : "none"));
    json_object_set_new(j, "answer", jstr(&it->answer));
    if (it->q->kind == EV_TOOL) {
        char e[1024];
        snprintf(e, sizeof e, "%s(%s)", it->q->expect, it->q->args);
        json_object_set_new(j, "expected", json_string(e));
    } else {
        json_object_set_new(j, "expected", json_string(it->q->expect));
    }
    if (full) {
        json_object_set_new(j, "prompt", jstr(&it->prompt));
        json_object_set_new(j, "reasoning", jstr(&it->reasoning));
        json_object_set_new(j, "content", jstr(&it->content));
        json_object_set_new(j, "scripted", json_boolean(it->script != NULL));
        json_object_set_new(j, "prefill_s", json_real(it->prefill_s));
        json_object_set_new(j, "generate_s", json_real(it->gen_s));
    } else {
        json_object_set_new(j, "output", jstr(&it->content));
    }
    return j;
}

/* One line per question, then the totals by topic. */
static void text_report(FILE *f, const item *items, int n) {
    fprintf(f, "%-4s %-10s %-6s %-7s %6s %6s %6s  %-24s %s\n", "id", "topic", "kind", "result",
            "prompt", "think", "answer", "answer given", "expected");
    int pass = 0, done = 0;
    for (int i = 0; i < n; i++) {
        const item *it = &items[i];
        char ans[25];
        snprintf(ans, sizeof ans, "%s", it->answer.p ? it->answer.p : "");
        for (char *c = ans; *c; c++) if (*c == '\n' || *c == '\t') *c = ' ';
        fprintf(f, "%-4s %-10s %-6s %-7s %6d %6d %6d  %-24s %s%s%s\n", it->q->id, it->q->topic,
                ev_kind_name(it->q->kind), status_name(it->status), it->prompt_tokens, it->think_tokens,
                it->answer_tokens, ans, it->q->expect,
                it->cutoff && !strcmp(it->cutoff, "soft") ? "  [soft cutoff]" :
                it->cutoff && !strcmp(it->cutoff, "hard") ? "  [hard cutoff]" : "",
                it->stop && !strcmp(it->stop, "length") ? "  [answer cut at -n]" :
                it->stop && !strcmp(it->stop, "context") ? "  [context full]" : "");
        pass += it->status == ST_PASS;
        done += it->status == ST_PASS || it->status == ST_FAIL || it->status == ST_ERROR;
    }
    fprintf(f, "\n");
    const char *topics[16];
    int nt = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        while (k < nt && strcmp(topics[k], items[i].q->topic)) k++;
        if (k == nt && nt < 16) topics[nt++] = items[i].q->topic;
    }
    for (int k = 0; k < nt; k++) {
        int p = 0, d = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(items[i].q->topic, topics[k]) && items[i].status >= ST_PASS) {
                d++;
                p += items[i].status == ST_PASS;
            }
        fprintf(f, "%-10s %d/%d\n", topics[k], p, d);
    }
    fprintf(f, "total      %d/%d passed (%d of %d questions run)\n", pass, done, done, n);
}

static void write_reports(const opts *o, const item *items, int n, const char *model_name) {
    if (!o->report) return;
    char path[4096];
    json_t *j = json_object(), *arr = json_array();
    int pass = 0, done = 0;
    for (int i = 0; i < n; i++) {
        json_array_append_new(arr, item_json(&items[i], 0));
        pass += items[i].status == ST_PASS;
        done += items[i].status >= ST_PASS;
    }
    json_object_set_new(j, "model", json_string(model_name));
    json_object_set_new(j, "think", json_string(o->think == DS4_THINK_NONE ? "none" : "high"));
    json_object_set_new(j, "think_soft", json_integer(o->soft));
    json_object_set_new(j, "think_hard", json_integer(o->hard));
    json_object_set_new(j, "temperature", json_real(o->sp.temperature));
    json_object_set_new(j, "passed", json_integer(pass));
    json_object_set_new(j, "run", json_integer(done));
    json_object_set_new(j, "total", json_integer(n));
    json_object_set_new(j, "questions", arr);
    snprintf(path, sizeof path, "%s.json", o->report);
    if (json_dump_file(j, path, JSON_INDENT(1)) != 0) die("cannot write %s", path);
    json_decref(j);
    snprintf(path, sizeof path, "%s.txt", o->report);
    FILE *f = fopen(path, "w");
    if (!f) die("cannot write %s: %s", path, strerror(errno));
    text_report(f, items, n);
    if (fclose(f) != 0) die("cannot write %s: %s", path, strerror(errno));
}

/* ------------------------------------------------------------------ */
/* --nll                                                               */

static int nll_main(opts *o, ds4_model *m) {
    FILE *f = fopen(o->nll, "r");
    if (!f) die("cannot open %s: %s", o->nll, strerror(errno));
    const ds4_tokenizer *tok = ds4_model_tokenizer(m);
    int nv = ds4_tok_n_vocab(tok);
    ds4_session_params spp;
    ds4_session_params_default(&spp);
    spp.ctx_size = o->ctx;
    char *err = NULL;
    ds4_session *s = ds4_session_new(m, &spp, &err);
    if (!s) die("%s", err ? err : "cannot create a session");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, nlines = 0;
    double total = 0;
    long ntok = 0;
    ds4_buf rows = { 0 };
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)len, 0, &je);
        const char *p = j ? json_string_value(json_object_get(j, "prompt")) : NULL;
        const char *c = j ? json_string_value(json_object_get(j, "continuation")) : NULL;
        if (!p || !c)
            die("%s:%d: expected a JSON object with string fields \"prompt\" and \"continuation\"%s%s",
                o->nll, lineno, j ? "" : ": ", j ? "" : je.text);
        ds4_tokens pt = { 0 }, ct = { 0 };
        ds4_tokenize(tok, p, json_string_length(json_object_get(j, "prompt")), DS4_TOK_SPECIAL, &pt);
        ds4_tokenize(tok, c, json_string_length(json_object_get(j, "continuation")), DS4_TOK_SPECIAL, &ct);
        if (pt.n == 0 || ct.n == 0) die("%s:%d: the prompt and the continuation must both be non-empty", o->nll, lineno);
        if (pt.n + ct.n > (size_t)o->ctx) die("%s:%d: %zu tokens do not fit --ctx %d", o->nll, lineno, pt.n + ct.n, o->ctx);
        int rc = ds4_session_sync(s, pt.v, (int)pt.n, NULL, NULL, NULL);
        if (rc) die("%s:%d: %s", o->nll, lineno, ds4_strerror(rc));
        /* the first continuation token is scored by the prompt's logits,
         * each next one by the row captured after the previous one */
        double sum = -((double)ds4_session_logits(s)[ct.v[0]] - ds4_logsumexp(ds4_session_logits(s), nv));
        if (ct.n > 1) {
            rows.n = 0;
            ds4_session_capture(s, &rows, NULL);
            rc = ds4_session_eval(s, ct.v, (int)ct.n - 1, NULL, NULL);
            ds4_session_capture(s, NULL, NULL);
            if (rc) die("%s:%d: %s", o->nll, lineno, ds4_strerror(rc));
            for (size_t i = 1; i < ct.n; i++) {
                const float *row = (const float *)(rows.p + (i - 1) * (size_t)nv * sizeof(float));
                sum -= (double)row[ct.v[i]] - ds4_logsumexp(row, nv);
            }
        }
        printf("{\"line\": %d, \"prompt_tokens\": %zu, \"tokens\": %zu, \"nll\": %.9g, \"nll_per_token\": %.9g}\n",
               lineno, pt.n, ct.n, sum, sum / (double)ct.n);
        total += sum;
        ntok += (long)ct.n;
        nlines++;
        ds4_tokens_free(&pt);
        ds4_tokens_free(&ct);
        json_decref(j);
    }
    free(line);
    fclose(f);
    ds4_buf_free(&rows);
    ds4_session_free(s);
    if (nlines == 0) die("%s: no pairs", o->nll);
    printf("{\"pairs\": %d, \"tokens\": %ld, \"nll_per_token\": %.9g, \"perplexity\": %.9g}\n",
           nlines, ntok, total / (double)ntok, exp(total / (double)ntok));
    return 0;
}

/* ------------------------------------------------------------------ */

static void parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->think = DS4_THINK_HIGH;
    o->soft = 1024;
    o->hard = 2048;
    o->max_answer = 512;
    ds4_model_opts mo;
    eval_opts_defaults(&mo);
    int soft_set = 0;
    ds4_args a;
    ds4_args_init(&a, PROG, argc, argv, usage);
    while (ds4_args_next(&a)) {
        if (ds4_model_opts_parse(&mo, &a)) continue;
        if (ds4_args_is(&a, NULL, "--think")) o->think = DS4_THINK_HIGH;
        else if (ds4_args_is(&a, NULL, "--nothink")) o->think = DS4_THINK_NONE;
        else if (ds4_args_is(&a, NULL, "--think-soft")) { o->soft = ds4_args_int(&a, 0, 1 << 24); soft_set = 1; }
        else if (ds4_args_is(&a, NULL, "--think-hard")) o->hard = ds4_args_int(&a, 0, 1 << 24);
        else if (ds4_args_is(&a, "-n", "--max-answer")) o->max_answer = ds4_args_int(&a, 1, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--ids")) o->ids = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--limit")) o->limit = ds4_args_int(&a, 1, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--report")) o->report = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--trace")) o->trace = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--script")) o->script = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--plain")) o->plain = 1;
        else if (ds4_args_is(&a, NULL, "--nll")) o->nll = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--list")) o->list = 1;
        else ds4_args_unknown(&a);
    }
    o->model = mo.model;
    o->threads = mo.threads;
    o->ctx = mo.ctx;
    o->sp = mo.sp;
    if (o->soft && o->hard && o->soft > o->hard) {
        /* a lone --think-hard below the default soft budget moves it */
        if (soft_set) ds4_args_fail(PROG, "--think-soft %d is above --think-hard %d", o->soft, o->hard);
        o->soft = o->hard;
    }
}

/* --ids: every listed id must exist (a typo is an error, not an empty run) */
static int selected(const opts *o, const char *id) {
    if (!o->ids) return 1;
    size_t l = strlen(id);
    for (const char *p = o->ids; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == l && !memcmp(p, id, l)) return 1;
        p += n + (e ? 1 : 0);
    }
    return 0;
}

static void check_ids(const opts *o) {
    if (!o->ids) return;
    for (const char *p = o->ids; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (int i = 0; i < ev_n_questions && !found; i++)
            found = strlen(ev_questions[i].id) == n && !memcmp(ev_questions[i].id, p, n);
        if (!found) die("--ids: no question '%.*s' (ds4-eval --list)", (int)n, p);
        p += n + (e ? 1 : 0);
    }
}

/* --script: {"id": ..., "output": ...} per line; returns a json array the
 * items point into (kept alive until the end). */
static json_t *load_script(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open %s: %s", path, strerror(errno));
    json_t *all = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int ln = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        ln++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        json_t *j = json_loadb(line, (size_t)len, 0, NULL);
        if (!j || !json_is_string(json_object_get(j, "id")) || !json_is_string(json_object_get(j, "output")))
            die("%s:%d: expected {\"id\": \"...\", \"output\": \"...\"}", path, ln);
        const char *id = json_string_value(json_object_get(j, "id"));
        int found = 0;
        for (int i = 0; i < ev_n_questions && !found; i++) found = !strcmp(ev_questions[i].id, id);
        if (!found) die("%s:%d: no question '%s'", path, ln, id);
        json_array_append_new(all, j);
    }
    free(line);
    fclose(f);
    return all;
}

int main(int argc, char **argv) {
    opts o;
    parse_args(argc, argv, &o);
    if (o.list) {
        for (int i = 0; i < ev_n_questions; i++) {
            const ev_question *q = &ev_questions[i];
            printf("%s\t%s\t%s\t%s\t%s\t", q->id, q->topic, ev_kind_name(q->kind), q->expect,
                   q->args ? q->args : "-");
            for (const char *c = q->prompt; *c && c - q->prompt < 70; c++) putchar(*c == '\n' ? ' ' : *c);
            putchar('\n');
        }
        return 0;
    }
    check_ids(&o);
    json_t *script = o.script ? load_script(o.script) : NULL;
    if (access(o.model, R_OK) != 0) die("cannot open model %s: %s", o.model, strerror(errno));
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    mp.n_threads = o.threads;
    char *err = NULL;
    ds4_model *m = ds4_model_load(o.model, &mp, &err);
    if (!m) die("%s", err ? err : "cannot load the model");
    if (o.nll) {
        int rc = nll_main(&o, m);
        ds4_model_free(m);
        return rc;
    }
    ds4_model_info mi;
    ds4_model_get_info(m, &mi);

    int n = 0;
    item *items = calloc((size_t)ev_n_questions, sizeof *items);
    if (!items) die("out of memory");
    for (int i = 0; i < ev_n_questions && (!o.limit || n < o.limit); i++) {
        if (!selected(&o, ev_questions[i].id)) continue;
        item *it = &items[n++];
        it->q = &ev_questions[i];
        for (size_t k = 0; script && k < json_array_size(script); k++) {
            json_t *j = json_array_get(script, k);
            if (!strcmp(json_string_value(json_object_get(j, "id")), it->q->id))
                it->script = json_string_value(json_object_get(j, "output"));
        }
    }

    runner r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.m = m;
    r.tok = ds4_model_tokenizer(m);
    r.sp = ds4_tok_special(r.tok);
    ds4_session_params spp;
    ds4_session_params_default(&spp);
    spp.ctx_size = o.ctx;
    r.s = ds4_session_new(m, &spp, &err);
    if (!r.s) die("%s", err ? err : "cannot create a session");
    r.smp = ds4_sampler_new(mi.n_vocab, &o.sp);
    if (o.trace && !(r.trace = fopen(o.trace, "w"))) die("cannot write %s: %s", o.trace, strerror(errno));
    view v;
    memset(&v, 0, sizeof v);
    v.items = items;
    v.n = n;
    v.running = -1;
    v.on = !o.plain && isatty(0) && isatty(1);
    if (v.on) view_open(&v);
    r.v = &v;
    signal(SIGINT, on_sigint);

    int rc = 0, pass = 0;
    for (int i = 0; i < n && !v.quit && !g_stop; i++) {
        v.running = i;
        if (!v.on) { printf("[%d/%d] %s %-10s ", i + 1, n, items[i].q->id, items[i].q->topic); fflush(stdout); }
        view_draw(&v, 1);
        if ((rc = run_item(&r, &items[i])) != 0) { view_close(&v); fprintf(stderr, "%s: %s: %s\n", PROG, items[i].q->id, ds4_strerror(rc)); break; }
        item *it = &items[i];
        pass += it->status == ST_PASS;
        if (!v.on && it->status != ST_WAIT)
            printf("%-5s %4d+%d tokens  answer: %.60s  expected: %s  (reasoning cutoff %s, stop %s)\n",
                   status_name(it->status), it->prompt_tokens, it->gen_tokens, it->answer.p ? it->answer.p : "",
                   it->q->expect, it->cutoff, it->stop);
        if (r.trace && it->status != ST_WAIT) {
            json_t *j = item_json(it, 1);
            json_dumpf(j, r.trace, JSON_COMPACT);
            fputc('\n', r.trace);
            fflush(r.trace);
            json_decref(j);
        }
        view_draw(&v, 1);
    }
    v.running = -1;
    view_close(&v);
    if (r.trace && fclose(r.trace) != 0) die("cannot write %s", o.trace);
    printf("\n");
    text_report(stdout, items, n);
    write_reports(&o, items, n, mi.name);
    for (int i = 0; i < n; i++) {
        ds4_buf_free(&items[i].prompt);
        ds4_buf_free(&items[i].reasoning);
        ds4_buf_free(&items[i].content);
        ds4_buf_free(&items[i].answer);
    }
    free(items);
    json_decref(script);
    ds4_sampler_free(r.smp);
    ds4_session_free(r.s);
    ds4_model_free(m);
    return rc ? 1 : 0;
}
