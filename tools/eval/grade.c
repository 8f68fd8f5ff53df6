/*
 * grade.c -- see grade.h.  Answer extraction is deliberately simple and
 * documented in the prompt itself: every non-tool question asks for a last
 * line "Answer: ...", and the grader reads what follows the last
 * "Answer:" (falling back to the whole reply when the model forgot it).
 */
#include "grade.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

const char *ev_kind_name(ev_kind k) {
    switch (k) {
    case EV_NUMBER: return "number";
    case EV_CHOICE: return "choice";
    case EV_REGEX: return "regex";
    case EV_TOOL: return "tool";
    }
    return "?";
}

const char *ev_prompt_suffix(ev_kind k) {
    switch (k) {
    case EV_NUMBER: return "\n\nEnd your reply with a last line of the form \"Answer: <number>\".";
    case EV_CHOICE: return "\n\nEnd your reply with a last line of the form \"Answer: <letter>\".";
    case EV_REGEX: return "\n\nEnd your reply with a last line of the form \"Answer: <answer>\".";
    case EV_TOOL: return "";
    }
    return "";
}

/* Case-insensitive search for the last "answer" marker ("Answer:",
 * "answer is"); returns the text after it, or NULL. */
static const char *after_answer(const char *s, size_t n, size_t *rest) {
    const char *best = NULL;
    for (size_t i = 0; i + 6 <= n; i++) {
        if (strncasecmp(s + i, "answer", 6) != 0) continue;
        size_t j = i + 6;
        while (j < n && (s[j] == '*' || s[j] == ' ')) j++;   /* **Answer**: */
        if (j < n && s[j] == ':') best = s + j + 1;
        else if (j + 2 <= n && strncasecmp(s + j, "is", 2) == 0) best = s + j + 2;
    }
    if (best) *rest = n - (size_t)(best - s);
    return best;
}

/* Numbers in text: optional sign, digits with optional thousands commas,
 * optional decimals.  first = the first number, else the last. */
static int find_number(const char *s, size_t n, int first, double *out, ds4_buf *ans) {
    int found = 0;
    size_t i = 0;
    while (i < n) {
        int neg = 0;
        if (s[i] == '-' && i + 1 < n && isdigit((unsigned char)s[i + 1]) &&
            (i == 0 || !isalnum((unsigned char)s[i - 1]))) neg = 1;
        else if (!isdigit((unsigned char)s[i])) { i++; continue; }
        char num[64];
        size_t k = 0, j = i + (size_t)neg;
        int dot = 0;
        if (neg) num[k++] = '-';
        while (j < n && k + 1 < sizeof num) {
            unsigned char c = (unsigned char)s[j];
            if (isdigit(c)) num[k++] = s[j++];
            else if (c == ',' && !dot && j + 3 < n && isdigit((unsigned char)s[j + 1]) &&
                     isdigit((unsigned char)s[j + 2]) && isdigit((unsigned char)s[j + 3]) &&
                     (j + 4 >= n || !isdigit((unsigned char)s[j + 4]))) j++;   /* 1,234 */
            else if (c == '.' && !dot && j + 1 < n && isdigit((unsigned char)s[j + 1])) { dot = 1; num[k++] = s[j++]; }
            else break;
        }
        num[k] = 0;
        *out = strtod(num, NULL);
        if (ans) { ans->n = 0; ds4_buf_puts(ans, num); }
        found = 1;
        if (first) return 1;
        i = j;
    }
    return found;
}

static int grade_number(const ev_question *q, const char *s, size_t n, ds4_buf *answer) {
    size_t rest;
    const char *a = after_answer(s, n, &rest);
    double v;
    ds4_buf tmp = { 0 };
    int ok = a ? find_number(a, rest, 1, &v, &tmp) : 0;
    if (!ok) ok = find_number(s, n, 0, &v, &tmp);
    if (ok) ds4_buf_append(answer, tmp.p, tmp.n);
    ds4_buf_free(&tmp);
    if (!ok) return 0;
    double want = strtod(q->expect, NULL);
    return fabs(v - want) <= 1e-6 * fmax(1.0, fabs(want));
}

/* A standalone letter A..F: not part of a word ("A" in "Answer" is not). */
static int letter_at(const char *s, size_t n, size_t i) {
    if (s[i] < 'A' || s[i] > 'F') return 0;
    if (i > 0 && isalnum((unsigned char)s[i - 1])) return 0;
    if (i + 1 < n && isalnum((unsigned char)s[i + 1])) return 0;
    return 1;
}

static int grade_choice(const ev_question *q, const char *s, size_t n, ds4_buf *answer) {
    size_t rest;
    const char *a = after_answer(s, n, &rest);
    char got = 0;
    if (a) {
        for (size_t i = 0; i < rest && !got; i++)
            if (letter_at(a, rest, i)) got = a[i];
    }
    if (!got) {   /* no marker: a reply that is just the letter, else the last one */
        for (size_t i = 0; i < n; i++)
            if (letter_at(s, n, i)) got = s[i];
    }
    if (!got) return 0;
    ds4_buf_append(answer, &got, 1);
    return got == q->expect[0];
}

static int grade_regex(const ev_question *q, const char *s, size_t n, ds4_buf *answer) {
    size_t rest;
    const char *a = after_answer(s, n, &rest);
    if (!a) { a = s; rest = n; }
    while (rest && isspace((unsigned char)*a)) { a++; rest--; }
    while (rest && isspace((unsigned char)a[rest - 1])) rest--;
    ds4_buf_append(answer, a, rest);
    regex_t re;
    if (regcomp(&re, q->expect, REG_EXTENDED | REG_ICASE | REG_NOSUB)) return 0;
    char *z = strndup(a, rest);
    int ok = z && regexec(&re, z, 0, NULL, 0) == 0;
    free(z);
    regfree(&re);
    return ok;
}

/* JSON equality where numbers compare by value (250 == 250.0): the model
 * may write either for a "number" parameter. */
static int json_same(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !json_same(v, w)) return 0;
        }
        return 1;
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_same(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    return json_equal(a, b);
}

typedef struct {
    int calls, error;
    ds4_buf name, args;
} tool_ud;

static void on_dsml(void *ud, const ds4_dsml_event *ev) {
    tool_ud *t = ud;
    switch (ev->kind) {
    case DS4_DSML_CALL_BEGIN:
        if (t->calls++ == 0) ds4_buf_append(&t->name, ev->text, ev->len);
        break;
    case DS4_DSML_ARGS_DELTA:
        if (t->calls == 1) ds4_buf_append(&t->args, ev->text, ev->len);
        break;
    case DS4_DSML_ERROR:
        t->error = 1;
        break;
    default:
        break;
    }
}

static int grade_tool(const ev_question *q, const char *s, size_t n, ds4_buf *answer) {
    tool_ud t;
    memset(&t, 0, sizeof t);
    ds4_dsml *p = ds4_dsml_new(on_dsml, &t);
    if (!p) return 0;
    ds4_dsml_feed(p, s, n);
    if (ds4_dsml_finish(p) != DS4_OK) t.error = 1;
    ds4_dsml_free(p);
    int ok = 0;
    if (t.calls == 0) ds4_buf_puts(answer, "(no tool call)");
    else {
        ds4_buf_append(answer, t.name.p, t.name.n);
        ds4_buf_puts(answer, "(");
        ds4_buf_append(answer, t.args.p ? t.args.p : "", t.args.n);
        ds4_buf_puts(answer, ")");
        if (t.calls > 1) ds4_buf_printf(answer, " + %d more call(s)", t.calls - 1);
        if (t.error) ds4_buf_puts(answer, " [malformed DSML]");
        json_t *got = t.args.p ? json_loadb(t.args.p, t.args.n, 0, NULL) : NULL;
        json_t *want = json_loads(q->args ? q->args : "{}", 0, NULL);
        ok = !t.error && t.calls == 1 && t.name.n == strlen(q->expect) &&
             memcmp(t.name.p, q->expect, t.name.n) == 0 && got && want && json_same(got, want);
        json_decref(got);
        json_decref(want);
    }
    ds4_buf_free(&t.name);
    ds4_buf_free(&t.args);
    return ok;
}

int ev_grade(const ev_question *q, const char *content, size_t len, ds4_buf *answer) {
    if (!content) { content = ""; len = 0; }
    switch (q->kind) {
    case EV_NUMBER: return grade_number(q, content, len, answer);
    case EV_CHOICE: return grade_choice(q, content, len, answer);
    case EV_REGEX: return grade_regex(q, content, len, answer);
    case EV_TOOL: return grade_tool(q, content, len, answer);
    }
    return 0;
}
