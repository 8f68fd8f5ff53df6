/*
 * script.c -- `--script FILE` (forced model output for tests) and
 * `--trace FILE` (one JSON object per model turn).
 *
 * Owns: the script file format (stable contract: assistant turns separated
 * by lines containing exactly "---"; each turn is exactly the text the
 * model generates, without the final EOS) and the trace line format
 * (stable contract).  Must not: evaluate anything -- turn.c tokenizes a
 * script turn and feeds it through the same path as sampled tokens.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

int ag_script_load(const char *path, ag_script *sc, char **err) {
    memset(sc, 0, sizeof *sc);
    ds4_buf all = { 0 };
    if (ds4_buf_read_file(&all, path)) {
        int e = errno;
        ds4_buf_free(&all);
        return ds4_set_err(err, -1, "cannot read script %s: %s", path, strerror(e));
    }
    /* split on lines that are exactly "---": the newline before such a
     * line belongs to the separator, not to the turn */
    const char *p = all.p, *end = all.p + all.n, *start = p;
    for (;;) {
        const char *line = p;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        int sep = le - line == 3 && !memcmp(line, "---", 3);
        if (sep || !nl) {
            const char *te = sep ? line : end;
            if (sep && te > start && te[-1] == '\n') te--;
            else if (!sep && te > start && te[-1] == '\n') te--;   /* final newline of the file */
            char **tv = realloc(sc->turns, (size_t)(sc->n + 1) * sizeof *tv);
            size_t *lv = realloc(sc->lens, (size_t)(sc->n + 1) * sizeof *lv);
            if (tv) sc->turns = tv;
            if (lv) sc->lens = lv;
            if (!tv || !lv) break;
            sc->lens[sc->n] = (size_t)(te - start);
            sc->turns[sc->n] = ag_strndup(start, (size_t)(te - start));
            sc->n++;
            if (!nl) break;
            start = nl + 1;
        }
        if (!nl) break;
        p = nl + 1;
    }
    ds4_buf_free(&all);
    return 0;
}

void ag_script_free(ag_script *sc) {
    for (int i = 0; i < sc->n; i++) free(sc->turns[i]);
    free(sc->turns);
    free(sc->lens);
    memset(sc, 0, sizeof *sc);
}

const char *ag_stop_name(int stop) {
    switch (stop) {
    case AG_STOP_INTERRUPT: return "interrupt";
    case AG_STOP_CONTEXT: return "context";
    case AG_STOP_BUDGET: return "max_tokens";
    default: return "";
    }
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void ag_trace_write(FILE *f, const ag_trace_rec *r) {
    if (!f) return;
    fprintf(f, "{\"turn\":%d,\"prompt_tokens\":%d,\"cached_tokens\":%d,\"prefill_tokens\":%d,"
            "\"generated_tokens\":%d,\"tool_calls\":[", r->turn, r->prompt_tokens,
            r->cached_tokens, r->prefill_tokens, r->generated_tokens);
    if (r->msg)
        for (int i = 0; i < r->msg->n_calls; i++) {
            int ok = r->results && i < r->results->n_calls ? r->results->calls[i].ok : 0;
            fprintf(f, "%s{\"name\":", i ? "," : "");
            json_str(f, r->msg->calls[i].name);
            fprintf(f, ",\"ok\":%s}", ok ? "true" : "false");
        }
    fprintf(f, "],\"drafted\":%llu,\"accepted\":%llu,\"session\":", (unsigned long long)r->spec.drafted,
            (unsigned long long)r->spec.accepted);
    json_str(f, r->session);
    /* added after the first version: only on a turn that was cut */
    if (r->msg && r->msg->stop)
        fprintf(f, ",\"stopped\":\"%s\"", ag_stop_name(r->msg->stop));
    if (r->event) {
        fprintf(f, ",\"event\":");
        json_str(f, r->event);
    }
    fprintf(f, "}\n");
    fflush(f);
}
