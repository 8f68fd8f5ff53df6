/*
 * call_events.h -- the tool-call event collector shared by the streaming
 * parsers' tests (test_dsml.c for DSML, test_glm_calls.c for GLM's XML
 * calls): both parsers emit the same ds4_dsml_event stream, so one
 * collector records it and checks that the sequence is well formed (text
 * only before the first call, calls begun in order and each ended before
 * the next, argument deltas non-empty and inside their call, nothing after
 * DONE or an ERROR), and one comparison says whether two feedings of the
 * same input gave the same result.
 *
 * Owns: the collector and a small deterministic PRNG for random chunking.
 * Must not: know either parser's API (each test feeds its own).
 */
#ifndef DS4_TEST_CALL_EVENTS_H
#define DS4_TEST_CALL_EVENTS_H

#include <stdio.h>
#include <string.h>

#include "ds4.h"

#define MAXC 16

typedef struct {
    ds4_buf text;
    int ncalls;
    ds4_buf name[MAXC], args[MAXC];
    int ended[MAXC];
    int done, nerr;
    char err[400];
    int bad;              /* sequence violated */
    char badwhy[200];
} coll;

static void badseq(coll *c, const char *why) {
    if (!c->bad) snprintf(c->badwhy, sizeof c->badwhy, "%s", why);
    c->bad = 1;
}

static void on_event(void *ud, const ds4_dsml_event *ev) {
    coll *c = ud;
    if (c->nerr) badseq(c, "event after ERROR");
    if (c->done && ev->kind != DS4_DSML_ERROR) badseq(c, "event after DONE");
    switch (ev->kind) {
    case DS4_DSML_TEXT:
        if (c->ncalls) badseq(c, "TEXT after a call");
        if (!ev->len) badseq(c, "empty TEXT event");
        ds4_buf_append(&c->text, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_BEGIN:
        if (ev->call_index != c->ncalls) badseq(c, "CALL_BEGIN index not sequential");
        if (c->ncalls && !c->ended[c->ncalls - 1]) badseq(c, "CALL_BEGIN before previous CALL_END");
        if (c->ncalls >= MAXC) { badseq(c, "too many calls"); break; }
        ds4_buf_append(&c->name[c->ncalls], ev->text, ev->len);
        ds4_buf_append(&c->args[c->ncalls], "", 0);
        c->ncalls++;
        break;
    case DS4_DSML_ARGS_DELTA:
        if (!c->ncalls || ev->call_index != c->ncalls - 1 || c->ended[c->ncalls - 1])
            badseq(c, "ARGS_DELTA outside a call");
        else
            ds4_buf_append(&c->args[c->ncalls - 1], ev->text, ev->len);
        if (!ev->len) badseq(c, "empty ARGS_DELTA");
        break;
    case DS4_DSML_CALL_END:
        if (!c->ncalls || ev->call_index != c->ncalls - 1 || c->ended[c->ncalls - 1])
            badseq(c, "CALL_END without call");
        else
            c->ended[c->ncalls - 1] = 1;
        break;
    case DS4_DSML_DONE:
        if (c->ncalls && !c->ended[c->ncalls - 1]) badseq(c, "DONE inside a call");
        c->done = 1;
        break;
    case DS4_DSML_ERROR:
        c->nerr++;
        snprintf(c->err, sizeof c->err, "%.*s", (int)ev->len, ev->text);
        break;
    default:
        badseq(c, "unknown event kind");
    }
}

static void coll_free(coll *c) {
    ds4_buf_free(&c->text);
    for (int i = 0; i < MAXC; i++) { ds4_buf_free(&c->name[i]); ds4_buf_free(&c->args[i]); }
}

/* the same observable result (text, calls, arguments, DONE, error)? */
static int coll_same(const coll *a, const coll *b) {
    if (a->text.n != b->text.n || (a->text.n && memcmp(a->text.p, b->text.p, a->text.n))) return 0;
    if (a->ncalls != b->ncalls || a->done != b->done || a->nerr != b->nerr) return 0;
    if (strcmp(a->err, b->err)) return 0;
    for (int i = 0; i < a->ncalls; i++) {
        if (a->name[i].n != b->name[i].n || memcmp(a->name[i].p, b->name[i].p, a->name[i].n)) return 0;
        if (a->args[i].n != b->args[i].n || memcmp(a->args[i].p, b->args[i].p, a->args[i].n)) return 0;
        if (a->ended[i] != b->ended[i]) return 0;
    }
    return 1;
}

/* xorshift64: random chunk sizes, the same on every run */
static unsigned long long rng_state = 0x9e3779b97f4a7c15ULL;
static unsigned rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state >> 16);
}

#endif
