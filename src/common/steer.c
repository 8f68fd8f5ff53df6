/*
 * steer.c -- see steer.h.
 */
#include "common/steer.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(char **err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(err, fmt, ap) < 0) *err = NULL;
        va_end(ap);
    }
    return -1;
}

void ds4_steer_sidecar_path(const char *path, char *out, size_t n) {
    size_t l = strlen(path);
    if (l > 4 && strcmp(path + l - 4, ".f32") == 0) snprintf(out, n, "%.*s.json", (int)(l - 4), path);
    else snprintf(out, n, "%s.json", path);
}

int ds4_steer_load(const char *path, int n_embd, float **dir, ds4_steer_meta *meta, char **err) {
    *dir = NULL;
    memset(meta, 0, sizeof *meta);
    char side[4096];
    ds4_steer_sidecar_path(path, side, sizeof side);
    json_error_t je;
    json_t *j = json_load_file(side, 0, &je);
    if (!j) return fail(err, "steering sidecar %s: %s", side, je.text);
    json_t *jm = json_object_get(j, "model"), *jd = json_object_get(j, "n_embd");
    json_t *j0 = json_object_get(j, "layer_first"), *j1 = json_object_get(j, "layer_last");
    if (!json_is_string(jm) || !json_is_integer(jd) || !json_is_integer(j0) || !json_is_integer(j1)) {
        json_decref(j);
        return fail(err, "steering sidecar %s: needs \"model\", \"n_embd\", \"layer_first\" and \"layer_last\"", side);
    }
    snprintf(meta->model, sizeof meta->model, "%s", json_string_value(jm));
    meta->n_embd = (int)json_integer_value(jd);
    meta->layer_first = (int)json_integer_value(j0);
    meta->layer_last = (int)json_integer_value(j1);
    json_decref(j);
    if (meta->n_embd != n_embd)
        return fail(err, "steering direction %s is for n_embd %d, the model has %d", path, meta->n_embd, n_embd);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, "cannot open %s: %s", path, strerror(errno));
    float *v = malloc((size_t)n_embd * sizeof *v + 1);
    if (!v) { fclose(f); return fail(err, "out of memory"); }
    size_t got = fread(v, 1, (size_t)n_embd * sizeof *v + 1, f);
    fclose(f);
    if (got != (size_t)n_embd * sizeof *v) {
        free(v);
        return fail(err, "steering direction %s: %zu bytes, expected %zu (%d float32 values)", path, got,
                    (size_t)n_embd * sizeof(float), n_embd);
    }
    for (int k = 0; k < n_embd; k++)
        if (!isfinite(v[k])) { free(v); return fail(err, "steering direction %s: value %d is not finite", path, k); }
    *dir = v;
    return 0;
}

int ds4_steer_parse_layers(const char *s, int n_layer, int *first, int *last) {
    char *e;
    errno = 0;
    long a = strtol(s, &e, 10), b = a;
    if (e == s || errno) return -1;
    if (*e == ':') {
        const char *p = e + 1;
        b = strtol(p, &e, 10);
        if (e == p || errno) return -1;
    }
    if (*e || a < 0 || b < a || b >= n_layer) return -1;
    *first = (int)a;
    *last = (int)b;
    return 0;
}
