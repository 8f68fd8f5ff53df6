/*
 * input.c -- see input.h.
 *
 * Why not readline(): libedit's readline emulation neither knows bracketed
 * paste nor lets us bind a function to the paste-start sequence, so the
 * native EditLine API is used (el_gets, EL_ADDFN/EL_BIND, el_push).
 *
 * Why a quiet terminal during a turn: outside el_gets the terminal is in
 * canonical mode, where Ctrl+D is the end-of-file character and, on some
 * systems, is echoed as "^D" into the answer and the next prompt line; other
 * keys are echoed over the answer.  In non-canonical mode without echo every
 * key is a plain byte that we read and filter when the turn ends.  ISIG
 * stays on, so Ctrl+C still interrupts the answer.
 */
#include "input.h"

#include <errno.h>
#include <wchar.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#define PASTE_BEGIN "\033[200~"
#define PASTE_END "\033[201~"

typedef struct {
    char *text;
    size_t len;
    char tag[48];           /* "[paste #N: L lines]" as shown in the line */
} paste_t;

struct chat_input {
    int edit;               /* stdin and stdout are terminals: libedit */
    int tty_in;             /* stdin is a terminal (quiet during turns) */
    EditLine *el;
    History *hist;
    HistEvent ev;
    const char *prompt;
    volatile sig_atomic_t *interrupt;
    struct termios cooked;  /* the terminal's mode outside el_gets */
    int busy;
    ds4_buf typeahead;      /* kept keys for the next prompt */
    paste_t *pastes;        /* every multi-line paste of the session */
    int n_pastes, cap_pastes;
    char *line;             /* getline buffer (no editing) */
    size_t line_cap;
};

static chat_input *g_in;    /* for the atexit restore */

static void restore_terminal(void) {
    chat_input *in = g_in;
    if (!in) return;
    if (in->busy) { tcsetattr(0, TCSANOW, &in->cooked); in->busy = 0; }
    if (!in->edit) return;
    fputs("\033[?2004l", stdout);   /* bracketed paste off */
    fflush(stdout);
}

static char *prompt_fn(EditLine *el) {
    chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return (char *)(in && in->prompt ? in->prompt : "");
}

/* ---- pastes ---------------------------------------------------------- */

static int valid_utf8_printable(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x20 || c == 0x7f) return 0;
        int k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || (k == 1 && c < 0xc2)) return 0;
        for (int j = 1; j <= k; j++)
            if (i + (size_t)j >= n || (p[i + j] & 0xc0) != 0x80) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

/* Normalize a paste's line ends (terminals send CR for Enter; tmux turns
 * LF into CR) and decide how it enters the line: a single printable line
 * as itself, anything else as a placeholder tag.  Appends that to `out`. */
static void paste_add(chat_input *in, ds4_buf *raw, ds4_buf *out) {
    size_t w = 0;
    for (size_t r = 0; r < raw->n; r++) {
        char c = raw->p[r];
        if (c == '\r') {
            if (r + 1 < raw->n && raw->p[r + 1] == '\n') continue;
            c = '\n';
        }
        raw->p[w++] = c;
    }
    raw->n = w;
    if (raw->n && raw->p[raw->n - 1] == '\n') raw->n--;   /* a copied line's end */
    if (raw->n == 0) return;
    if (!memchr(raw->p, '\n', raw->n) && valid_utf8_printable(raw->p, raw->n)) {
        ds4_buf_append(out, raw->p, raw->n);
        return;
    }
    if (in->n_pastes == in->cap_pastes) {
        int cap = in->cap_pastes ? in->cap_pastes * 2 : 8;
        paste_t *np = realloc(in->pastes, (size_t)cap * sizeof *np);
        if (!np) return;
        in->pastes = np;
        in->cap_pastes = cap;
    }
    paste_t *p = &in->pastes[in->n_pastes];
    p->text = malloc(raw->n + 1);
    if (!p->text) return;
    memcpy(p->text, raw->p, raw->n);
    p->text[raw->n] = 0;
    p->len = raw->n;
    int lines = 1;
    for (size_t i = 0; i < raw->n; i++) lines += raw->p[i] == '\n';
    in->n_pastes++;
    snprintf(p->tag, sizeof p->tag, "[paste #%d: %d line%s]", in->n_pastes, lines, lines == 1 ? "" : "s");
    ds4_buf_puts(out, p->tag);
}

/* Append `line` to `out` with every intact paste tag replaced by its text
 * (a tag the user edited stays as typed).  Returns the number replaced. */
static int expand_tags(chat_input *in, const char *line, size_t n, ds4_buf *out) {
    int k = 0;
    size_t i = 0;
    while (i < n) {
        const char *t = memchr(line + i, '[', n - i);
        if (!t) break;
        size_t at = (size_t)(t - line);
        int id = 0;
        if (sscanf(t, "[paste #%d:", &id) == 1 && id >= 1 && id <= in->n_pastes) {
            const paste_t *p = &in->pastes[id - 1];
            size_t tl = strlen(p->tag);
            if (at + tl <= n && !memcmp(t, p->tag, tl)) {
                ds4_buf_append(out, line + i, at - i);
                ds4_buf_append(out, p->text, p->len);
                i = at + tl;
                k++;
                continue;
            }
        }
        ds4_buf_append(out, line + i, at + 1 - i);
        i = at + 1;
    }
    ds4_buf_append(out, line + i, n - i);
    return k;
}

/* Bound to ESC[200~ (paste start): read the pasted bytes straight from the
 * terminal up to ESC[201~ (libedit reads one byte per read(), so nothing of
 * the paste is buffered in it yet), then insert the text or its tag. */
static unsigned char paste_fn(EditLine *el, int ch) {
    (void)ch;
    chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    ds4_buf raw = { 0 }, ins = { 0 };
    const size_t el_n = strlen(PASTE_END);
    for (;;) {
        struct pollfd pf = { .fd = 0, .events = POLLIN };
        /* a terminal always ends a paste; the timeout only guards
         * against one that never does */
        if (poll(&pf, 1, 2000) <= 0) break;
        char c;
        ssize_t k = read(0, &c, 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        ds4_buf_append(&raw, &c, 1);
        if (raw.n >= el_n && !memcmp(raw.p + raw.n - el_n, PASTE_END, el_n)) {
            raw.n -= el_n;
            break;
        }
    }
    paste_add(in, &raw, &ins);
    if (ins.n && el_insertstr(el, ins.p) != 0) el_beep(el);
    ds4_buf_free(&raw);
    ds4_buf_free(&ins);
    return CC_REFRESH;
}

/* ---- opening --------------------------------------------------------- */

/* libedit decodes keys with the C library's multibyte functions: in the C
 * locale every non-ASCII byte is dropped.  The model speaks UTF-8, so use
 * the user's locale if it is UTF-8, else a UTF-8 one. */
static void utf8_locale(void) {
    static const char *try[] = { "", "C.UTF-8", "C.utf8", "en_US.UTF-8" };
    for (size_t i = 0; i < sizeof try / sizeof *try; i++) {
        if (!setlocale(LC_CTYPE, try[i])) continue;
        const char *cs = nl_langinfo(CODESET);
        if (cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"))) return;
    }
}

chat_input *input_open(volatile sig_atomic_t *interrupt) {
    chat_input *in = calloc(1, sizeof *in);
    if (!in) return NULL;
    in->interrupt = interrupt;
    in->tty_in = isatty(0);
    in->edit = in->tty_in && isatty(1);
    if (in->tty_in) {
        static int registered;
        tcgetattr(0, &in->cooked);
        g_in = in;
        if (!registered++) atexit(restore_terminal);
    }
    if (!in->edit) return in;
    utf8_locale();
    in->el = el_init("ds4", stdin, stdout, stderr);
    in->hist = history_init();
    if (!in->el || !in->hist) {
        if (in->el) el_end(in->el);
        if (in->hist) history_end(in->hist);
        in->el = NULL;
        in->hist = NULL;
        in->edit = 0;
        return in;
    }
    history(in->hist, &in->ev, H_SETSIZE, 1000);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_PROMPT, prompt_fn);
    el_set(in->el, EL_HIST, history, in->hist);
    /* the wide form: libedit's narrow EL_ADDFN copies the name and help
     * and never frees the copies */
    el_wset(in->el, EL_ADDFN, L"ds4-paste", L"bracketed paste", paste_fn);
    el_source(in->el, NULL);        /* the user's ~/.editrc, if any */
    el_set(in->el, EL_BIND, "\\e[200~", "ds4-paste", NULL);
    fputs("\033[?2004h", stdout);   /* bracketed paste on */
    fflush(stdout);
    return in;
}

void input_close(chat_input *in) {
    if (!in) return;
    restore_terminal();
    g_in = NULL;
    if (in->el) el_end(in->el);
    if (in->hist) history_end(in->hist);
    for (int i = 0; i < in->n_pastes; i++) free(in->pastes[i].text);
    free(in->pastes);
    ds4_buf_free(&in->typeahead);
    free(in->line);
    free(in);
}

/* ---- the quiet terminal during a turn -------------------------------- */

void input_busy_begin(chat_input *in) {
    if (!in || !in->tty_in || in->busy) return;
    struct termios t;
    if (tcgetattr(0, &in->cooked)) return;
    t = in->cooked;
    t.c_lflag &= (tcflag_t)~(ICANON | ECHO);
    t.c_lflag |= NOFLSH;   /* Ctrl+C stops the answer, not what was typed */
    t.c_cc[VMIN] = 0;      /* reads return at once: we only drain */
    t.c_cc[VTIME] = 0;
    if (tcsetattr(0, TCSANOW, &t) == 0) in->busy = 1;
}

/* Keep what was typed during the turn for the next prompt: printable text
 * (and pastes, as tags), Backspace applied, escape sequences (arrows...)
 * and control keys (Ctrl+D, Enter) dropped. */
static void filter_typeahead(chat_input *in, const unsigned char *b, size_t n) {
    ds4_buf *t = &in->typeahead;
    const size_t pb = strlen(PASTE_BEGIN), pe = strlen(PASTE_END);
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        if (c == 0x1b) {
            if (n - i >= pb && !memcmp(b + i, PASTE_BEGIN, pb)) {
                size_t s = i + pb, e = s;
                while (e < n && !(n - e >= pe && !memcmp(b + e, PASTE_END, pe))) e++;
                ds4_buf raw = { 0 };
                ds4_buf_append(&raw, b + s, e - s);
                paste_add(in, &raw, t);
                ds4_buf_free(&raw);
                i = e < n ? e + pe : n;
                continue;
            }
            i++;
            if (i < n && (b[i] == '[' || b[i] == 'O')) {
                i++;
                while (i < n && !(b[i] >= 0x40 && b[i] <= 0x7e)) i++;
            }
            if (i < n) i++;
            continue;
        }
        if (c == 0x7f || c == 0x08) {       /* Backspace: drop one character */
            while (t->n > 0 && ((unsigned char)t->p[t->n - 1] & 0xc0) == 0x80) t->n--;
            if (t->n > 0) t->n--;
            if (t->p) t->p[t->n] = 0;
            i++;
            continue;
        }
        if (c < 0x20) { i++; continue; }
        ds4_buf_append(t, b + i, 1);
        i++;
    }
}

void input_busy_end(chat_input *in) {
    if (!in || !in->busy) return;
    ds4_buf got = { 0 };
    unsigned char buf[4096];
    for (;;) {
        ssize_t k = read(0, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            /* a paste cut by the end of the queue: its end follows */
            const char *open = got.n ? memmem(got.p, got.n, PASTE_BEGIN, strlen(PASTE_BEGIN)) : NULL;
            int unfinished = 0;
            while (open) {
                const char *close = memmem(open, got.n - (size_t)(open - got.p), PASTE_END, strlen(PASTE_END));
                if (!close) { unfinished = 1; break; }
                open = memmem(close, got.n - (size_t)(close - got.p), PASTE_BEGIN, strlen(PASTE_BEGIN));
            }
            struct pollfd pf = { .fd = 0, .events = POLLIN };
            if (unfinished && poll(&pf, 1, 1000) > 0) continue;
            break;
        }
        ds4_buf_append(&got, buf, (size_t)k);
    }
    tcsetattr(0, TCSANOW, &in->cooked);
    in->busy = 0;
    /* without line editing there is no way to put the text back in
     * front of the user: it is dropped, like the control keys */
    if (got.n && in->edit) filter_typeahead(in, (const unsigned char *)got.p, got.n);
    ds4_buf_free(&got);
}

/* ---- reading --------------------------------------------------------- */

/* One physical line without its end: 1, 0 at EOF, -1 interrupted. */
static int read_line(chat_input *in, const char *prompt, const char **line, size_t *len) {
    if (in->edit) {
        in->prompt = prompt;
        if (in->typeahead.n) {
            el_push(in->el, in->typeahead.p);
            in->typeahead.n = 0;
        }
        int count = 0;
        errno = 0;
        const char *l = el_gets(in->el, &count);
        if (!l) {
            if (*in->interrupt || (count < 0 && errno == EINTR)) return -1;
            return 0;
        }
        size_t n = strlen(l);
        while (n && (l[n - 1] == '\n' || l[n - 1] == '\r')) n--;
        *line = l;
        *len = n;
        if (n) {
            char *h = strndup(l, n);
            if (h) { history(in->hist, &in->ev, H_ENTER, h); free(h); }
        }
        return 1;
    }
    if (prompt && *prompt && isatty(1)) { fputs(prompt, stdout); fflush(stdout); }
    errno = 0;
    ssize_t k = getline(&in->line, &in->line_cap, stdin);
    if (k < 0) {
        if (*in->interrupt || errno == EINTR) { clearerr(stdin); return -1; }
        return 0;
    }
    size_t n = (size_t)k;
    while (n && (in->line[n - 1] == '\n' || in->line[n - 1] == '\r')) n--;
    *line = in->line;
    *len = n;
    return 1;
}

int input_read(chat_input *in, ds4_buf *out, int *single) {
    out->n = 0;
    if (out->p) out->p[0] = 0;
    *single = 1;
    int multi = 0, lines = 0;
    const char *prompt = isatty(1) ? "> " : "";
    for (;;) {
        const char *l;
        size_t n;
        int r = read_line(in, prompt, &l, &n);
        if (r < 0) { out->n = 0; return INPUT_INTERRUPTED; }
        if (r == 0) {
            /* end of input inside a multi-line message: send what there is */
            if (lines && out->n) return INPUT_MESSAGE;
            return INPUT_EOF;
        }
        if (multi) {
            if (n == 4 && !memcmp(l, "/end", 4)) return INPUT_MESSAGE;
            if (lines++) ds4_buf_puts(out, "\n");
            expand_tags(in, l, n, out);
            continue;
        }
        if (lines == 0 && n == 6 && !memcmp(l, "/multi", 6)) {
            multi = 1;
            *single = 0;
            if (isatty(1))
                printf("(multi-line message: a line /end sends it, Ctrl+C drops it)\n");
            prompt = isatty(1) ? "... " : "";
            continue;
        }
        if (expand_tags(in, l, n > 0 && l[n - 1] == '\\' ? n - 1 : n, out) > 0) *single = 0;
        lines++;
        if (n > 0 && l[n - 1] == '\\') {
            /* a trailing backslash continues the message on the next line */
            ds4_buf_puts(out, "\n");
            *single = 0;
            prompt = isatty(1) ? "... " : "";
            continue;
        }
        if (!out->p) ds4_buf_append(out, "", 0);
        return INPUT_MESSAGE;
    }
}
