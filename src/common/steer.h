/*
 * steer.h -- steering direction files for the front ends (ds4 --steer,
 * ds4-server --steer, ds4-steer build).
 *
 * A direction is DIR/NAME.f32 (n_embd little-endian float32 values, unit
 * L2 norm when ds4-steer made it) with a JSON sidecar beside it, the same
 * name ending in .json instead of .f32:
 *   {"format": "ds4-steer-v1", "model": NAME, "n_embd": D,
 *    "layer_first": L, "layer_last": L, "method": "...", ...}
 * Owns reading/writing those files and parsing --steer-layers; the engine
 * side is ds4_session_set_steering (ds4.h).  Must not touch the engine.
 */
#ifndef DS4_COMMON_STEER_H
#define DS4_COMMON_STEER_H

#include <stddef.h>

typedef struct {
    char model[256];          /* the model the direction was computed on */
    int n_embd;
    int layer_first, layer_last;
} ds4_steer_meta;

/* "DIR/direction.f32" -> "DIR/direction.json" (a name not ending in .f32
 * gets ".json" appended). */
void ds4_steer_sidecar_path(const char *path, char *out, size_t n);

/* Read a direction and its sidecar; the vector must hold exactly n_embd
 * finite values and the sidecar must agree.  *dir is malloc'd.  Returns 0,
 * or -1 with a malloc'd message in *err. */
int ds4_steer_load(const char *path, int n_embd, float **dir, ds4_steer_meta *meta,
                   char **err);

/* "A:B" (inclusive, 0-based) or "A"; checked against n_layer.  0 / -1. */
int ds4_steer_parse_layers(const char *s, int n_layer, int *first, int *last);

#endif
