/*
 * imatrix.h -- the routed-expert importance matrix: accumulation during a
 * prefill (ds4 --imatrix-out) and its file format (ds4-quantize --imatrix).
 *
 * Owns: per layer and per routed expert, the running sums of squared input
 * activations of gate/up (the normed FFN input, D columns) and of down (the
 * routed-weighted SwiGLU output, F columns) over the tokens routed to that
 * expert, and the file that stores their means (docs/QUANT.md).
 * Must not: touch the forward pass beyond the one call deepseek4.c makes
 * per MoE sub-batch, or know about GGUF tensors.
 */
#ifndef DS4_IMATRIX_H
#define DS4_IMATRIX_H

#include <stdint.h>

#define DS4_IMATRIX_MAGIC "DS4IMAT1"

typedef struct ds4_imatrix {
    uint32_t n_layer, n_expert, n_embd, n_ff;
    uint64_t n_tokens;     /* tokens prefilled while collecting */
    uint64_t *count;       /* [n_layer][n_expert]: tokens routed to the expert */
    double *gu;            /* [n_layer][n_expert][n_embd]: sum of x^2 (sums; means in the file) */
    double *dn;            /* [n_layer][n_expert][n_ff] */
} ds4_imatrix;

ds4_imatrix *ds4_imatrix_alloc(uint32_t n_layer, uint32_t n_expert, uint32_t n_embd, uint32_t n_ff);
void ds4_imatrix_free(ds4_imatrix *im);

/* One MoE sub-batch of layer il: expert e's (token, slot) pairs are the
 * indices [eoff[e], eoff[e] + ecount[e]); pair i's gate/up input is row
 * rows[i] of `a` (n_embd floats a row) and its down input is row i of `h`
 * (n_ff floats a row). */
void ds4_imatrix_add_moe(ds4_imatrix *im, int il, const float *a, const float *h, const int *rows,
                         const int *eoff, const int *ecount);

/* Writes the means (atomically: to PATH.tmp, then rename).  0 or -1 with
 * *err (malloc'd). */
int ds4_imatrix_save(const ds4_imatrix *im, const char *path, char **err);

/* Loads a file written by ds4_imatrix_save; the sums hold the means and
 * count the token counts.  Validates the size exactly and every value
 * finite and non-negative. */
ds4_imatrix *ds4_imatrix_load(const char *path, char **err);

/* Mean vectors of a loaded file (NULL if the expert saw no token). */
const double *ds4_imatrix_gu(const ds4_imatrix *im, int il, int e);
const double *ds4_imatrix_dn(const ds4_imatrix *im, int il, int e);

#endif /* DS4_IMATRIX_H */
