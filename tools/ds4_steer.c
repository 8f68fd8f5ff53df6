/*
 * ds4_steer.c -- `ds4-steer build`: a steering direction from two sets of
 * prompts (docs/quality.md "Steering").
 *
 * The direction is the normalized difference of the mean hidden states of
 * the two sets at one layer: for each prompt (one a line; BOS + the line
 * tokenized as plain text) the state after the FFN sublayer of layer L --
 * the point where ds4 --steer adds it -- averaged over the hyper-connection
 * copies and over the positions after BOS (BOS alone carries no
 * information: it is the same in every prompt); then the mean over the
 * prompts of each set, positive minus negative, scaled to unit L2 norm.
 * Sums are in double.  Writes DIR/direction.f32 and DIR/direction.json.
 *
 * Uses only the public API (ds4.h): the hidden states are the diagnostic
 * capture behind ds4 --dump-hidden.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds4.h"
#include "base/afile.h"
#include "common/args.h"
#include "common/model_opts.h"
#include "common/steer.h"

static const char *PROG = "ds4-steer";

/* The shared model/runtime flags ds4-steer takes (model_opts.h); each
 * prompt is evaluated alone, so a 4096-token context is plenty. */
static void steer_opts_defaults(ds4_model_opts *o) {
    ds4_model_opts_init(o, PROG, DS4_MO_MODEL | DS4_MO_CTX);
    o->ctx = 4096;
}

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-steer build -m MODEL --positive FILE --negative FILE --layer L -o DIR\n"
"                       [-t THREADS] [--ctx N]\n"
"\n"
"Writes DIR/direction.f32 (n_embd float32 values, unit norm) and\n"
"DIR/direction.json (model, layers, how it was made).  FILEs hold one prompt\n"
"a line (empty lines are skipped); each is BOS + the line tokenized as plain\n"
"text.  The direction is mean(positive) - mean(negative) of the hidden state\n"
"after the FFN of layer L (0-based), averaged over the hyper-connection\n"
"copies and the positions after BOS, normalized.  ds4 and ds4-server apply\n"
"it (their --help, \"steering\": DIR/direction.f32 with a scale).\n"
"\n"
"build:\n"
"      --positive FILE       prompts of the behaviour to steer towards\n"
"      --negative FILE       prompts of the behaviour to steer away from\n"
"      --layer L             the layer whose FFN output is read (0-based)\n"
"  -o, --out DIR             where direction.f32 and direction.json go\n"
"  -h, --help                this help\n"
"      --version             print the version and exit\n");
    ds4_model_opts d;
    steer_opts_defaults(&d);
    ds4_model_opts_help(f, &d);
}

#define die(...) ds4_die(PROG, __VA_ARGS__)

typedef struct {
    ds4_model *m;
    const ds4_tokenizer *tok;
    ds4_session *s;
    ds4_model_info mi;
    int layer, chunk;
} ctx;

/* Mean over the prompts of `path` of each prompt's mean state; returns the
 * number of prompts. */
static int set_mean(ctx *c, const char *path, double *mean) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open %s: %s", path, strerror(errno));
    const int D = c->mi.n_embd, N = c->mi.n_hc;
    const size_t per_tok = (size_t)c->mi.n_layer * 2 * N * D;
    double *pm = calloc((size_t)D, sizeof *pm);
    if (!pm) die("out of memory");
    memset(mean, 0, (size_t)D * sizeof *mean);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, ln = 0;
    ds4_tokens ids = { 0 };
    ds4_buf hid = { 0 };
    while ((len = getline(&line, &cap, f)) >= 0) {
        ln++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        ids.n = 0;
        ds4_tokens_push(&ids, ds4_tok_special(c->tok)->bos);
        ds4_tokenize(c->tok, line, (size_t)len, DS4_TOK_PLAIN, &ids);
        if (ids.n > (size_t)ds4_session_ctx_size(c->s))
            die("%s:%d: %zu tokens do not fit --ctx %d", path, ln, ids.n, ds4_session_ctx_size(c->s));
        ds4_session_reset(c->s);
        memset(pm, 0, (size_t)D * sizeof *pm);
        /* evaluate in chunks so the capture (all layers) stays small */
        for (size_t p = 0; p < ids.n; p += (size_t)c->chunk) {
            size_t k = ids.n - p < (size_t)c->chunk ? ids.n - p : (size_t)c->chunk;
            hid.n = 0;
            ds4_session_capture(c->s, NULL, &hid);
            int rc = ds4_session_eval(c->s, ids.v + p, (int)k, NULL, NULL);
            ds4_session_capture(c->s, NULL, NULL);
            if (rc) die("%s:%d: %s", path, ln, ds4_strerror(rc));
            if (hid.n != k * per_tok * sizeof(float)) die("%s:%d: hidden state capture failed", path, ln);
            for (size_t t = 0; t < k; t++) {
                if (p + t == 0) continue;   /* BOS */
                const float *h = (const float *)hid.p + t * per_tok + ((size_t)c->layer * 2 + 1) * N * D;
                for (int b = 0; b < N; b++)
                    for (int d = 0; d < D; d++) pm[d] += h[(size_t)b * D + d];
            }
        }
        if (ids.n < 2) continue;
        double w = 1.0 / ((double)N * (double)(ids.n - 1));
        for (int d = 0; d < D; d++) mean[d] += pm[d] * w;
        n++;
    }
    free(line);
    fclose(f);
    ds4_tokens_free(&ids);
    ds4_buf_free(&hid);
    free(pm);
    if (n == 0) die("%s: no prompts", path);
    for (int d = 0; d < D; d++) mean[d] /= n;
    return n;
}

int main(int argc, char **argv) {
    const char *pos = NULL, *neg = NULL, *out = NULL;
    int layer = -1, cmd = 0;
    ds4_model_opts mo;
    steer_opts_defaults(&mo);
    ds4_args a;
    ds4_args_init(&a, PROG, argc, argv, usage);
    while (ds4_args_next(&a)) {
        if (ds4_model_opts_parse(&mo, &a)) continue;
        if (ds4_args_positional(&a)) {
            if (cmd || strcmp(a.cur, "build")) ds4_args_fail(PROG, "unknown command '%s' (expected build)", a.cur);
            cmd = 1;
        }
        else if (ds4_args_is(&a, NULL, "--positive")) pos = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--negative")) neg = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--layer")) layer = ds4_args_int(&a, 0, 1 << 16);
        else if (ds4_args_is(&a, "-o", "--out")) out = ds4_args_value(&a);
        else ds4_args_unknown(&a);
    }
    const char *model = mo.model;
    const int threads = mo.threads, ctxn = mo.ctx;
    if (!cmd) ds4_args_fail(PROG, "missing command (ds4-steer build ...)");
    if (!pos || !neg || layer < 0 || !out) ds4_args_fail(PROG, "build needs --positive, --negative, --layer and -o");

    ctx c;
    memset(&c, 0, sizeof c);
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    mp.n_threads = threads;
    char *err = NULL;
    if (access(model, R_OK) != 0) die("cannot open model %s: %s", model, strerror(errno));
    c.m = ds4_model_load(model, &mp, &err);
    if (!c.m) die("%s", err ? err : "cannot load the model");
    ds4_model_get_info(c.m, &c.mi);
    if (layer >= c.mi.n_layer) die("--layer %d: the model has %d layers (0..%d)", layer, c.mi.n_layer, c.mi.n_layer - 1);
    c.tok = ds4_model_tokenizer(c.m);
    c.layer = layer;
    c.chunk = 64;
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = ctxn;
    c.s = ds4_session_new(c.m, &sp, &err);
    if (!c.s) die("%s", err ? err : "cannot create a session");

    const int D = c.mi.n_embd;
    double *mp_ = malloc((size_t)D * sizeof *mp_), *mn = malloc((size_t)D * sizeof *mn);
    float *v = malloc((size_t)D * sizeof *v);
    if (!mp_ || !mn || !v) die("out of memory");
    int np = set_mean(&c, pos, mp_), nn = set_mean(&c, neg, mn);
    double norm = 0;
    for (int d = 0; d < D; d++) norm += (mp_[d] - mn[d]) * (mp_[d] - mn[d]);
    norm = sqrt(norm);
    if (!(norm > 0) || !isfinite(norm)) die("the two sets have the same mean state at layer %d: no direction", layer);
    for (int d = 0; d < D; d++) v[d] = (float)((mp_[d] - mn[d]) / norm);

    if (mkdir(out, 0777) != 0 && errno != EEXIST) die("cannot create %s: %s", out, strerror(errno));
    char path[4096], side[4096];
    snprintf(path, sizeof path, "%s/direction.f32", out);
    ds4_steer_sidecar_path(path, side, sizeof side);
    /* both files whole or not at all (base/afile.h): the direction is
     * committed only after its sidecar, so a direction never goes without one */
    char *js = NULL;
    json_t *j = json_object();
    json_object_set_new(j, "format", json_string("ds4-steer-v1"));
    json_object_set_new(j, "model", json_string(c.mi.name));
    json_object_set_new(j, "n_embd", json_integer(D));
    json_object_set_new(j, "layer_first", json_integer(layer));
    json_object_set_new(j, "layer_last", json_integer(layer));
    json_object_set_new(j, "method",
        json_string("unit-normalized mean(positive) - mean(negative) of the hidden state after the FFN "
                    "sublayer of the layer, averaged over the hyper-connection copies and the positions "
                    "after BOS; each prompt = BOS + one line tokenized as plain text"));
    json_object_set_new(j, "positive", json_string(pos));
    json_object_set_new(j, "negative", json_string(neg));
    json_object_set_new(j, "n_positive", json_integer(np));
    json_object_set_new(j, "n_negative", json_integer(nn));
    json_object_set_new(j, "difference_norm", json_real(norm));
    json_object_set_new(j, "ds4_version", json_string(ds4_version()));
    js = json_dumps(j, JSON_INDENT(1));
    json_decref(j);
    if (!js || ds4_write_file_atomic(side, js, strlen(js), 0644) ||
        ds4_write_file_atomic(path, v, sizeof *v * (size_t)D, 0644))
        die("cannot write %s: %s", path, strerror(errno));
    free(js);
    printf("%s: %d positive, %d negative prompts, layer %d, |difference| %.6g\n", path, np, nn, layer, norm);
    free(mp_);
    free(mn);
    free(v);
    ds4_session_free(c.s);
    ds4_model_free(c.m);
    return 0;
}
