/*
 * grade.h -- the question set of ds4-eval and its graders.
 *
 * Owns: the embedded questions (questions.c), the prompt suffix each kind
 * asks for, and turning an answer text into pass/fail.  Must not touch the
 * engine or the terminal: graders are pure functions of (question, text),
 * so tests/test_eval.c checks them on tables of right and wrong answers.
 */
#ifndef DS4_EVAL_GRADE_H
#define DS4_EVAL_GRADE_H

#include <stddef.h>
#include "ds4.h"

typedef enum {
    EV_NUMBER,   /* a number, compared numerically (relative 1e-6) */
    EV_CHOICE,   /* one letter A..F */
    EV_REGEX,    /* POSIX extended regex, case-insensitive */
    EV_TOOL,     /* exactly one DSML tool call: name and arguments */
} ev_kind;

typedef struct {
    const char *id;
    const char *topic;       /* arithmetic, algebra, code, logic, facts, tools */
    ev_kind kind;
    const char *prompt;      /* the user message (the kind's suffix is added) */
    const char *expect;      /* number / letter / regex / tool name */
    const char *args;        /* EV_TOOL: the expected arguments, a JSON object */
} ev_question;

extern const ev_question ev_questions[];
extern const int ev_n_questions;
/* The tools offered to EV_TOOL questions (an OpenAI-style JSON array). */
extern const char ev_tools_json[];

const char *ev_kind_name(ev_kind k);
/* What the user message ends with for this kind ("" for tools). */
const char *ev_prompt_suffix(ev_kind k);

/* Grade the visible answer (the content after </think>).  Appends the
 * extracted answer (what was compared) to `answer`; returns 1 = pass. */
int ev_grade(const ev_question *q, const char *content, size_t len, ds4_buf *answer);

#endif
