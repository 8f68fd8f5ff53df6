/*
 * bench_ggml_ds4.h -- the ds4 side of bench_ggml, in its own translation
 * unit: ds4's headers and ggml's declare some of the same names
 * (ggml_row_size), so the two never meet in one file.
 */
#ifndef DS4_BENCH_GGML_DS4_H
#define DS4_BENCH_GGML_DS4_H

#include <stddef.h>
#include <stdint.h>

typedef struct ds4_side ds4_side;

/* One-token matvecs of a type (GGUF/ggml type number), n_out rows of n_in
 * elements (ws bytes a row), activation x quantized once as the engine
 * would, a pool of nth threads; NULL on a bad type or no memory. */
ds4_side *ds4_side_new(uint32_t type, int n_in, int n_out, size_t ws, const float *x, int nth);
/* what model loading does for a Q8_0 matrix (ds4_q8_0_sym): the weights at
 * w, all copies (bytes), hold no -128 code -> the sym kernels */
void ds4_side_scan(ds4_side *s, const uint8_t *w, size_t bytes);
/* y[0..n_out) = W x for the matrix at w, through cpu_matmul_groups */
void ds4_side_run(ds4_side *s, const uint8_t *w, float *y);

#endif
