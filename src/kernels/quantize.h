/*
 * quantize.h -- weight quantizers (float rows -> ggml blocks), byte for
 * byte what ggml's reference quantizers write.
 *
 * Owns: the weight-side quantization of Q8_0, Q2_K, Q4_K, IQ2_XXS and
 * MXFP4 (with and without an importance matrix where ggml takes one).
 * Must not: know about GGUF files, tensors or threads (a GGUF writer calls
 * it row by row), or reuse the activation quantizers' rules of quant.h
 * (those follow the engine, these follow ggml's file producers).
 */
#ifndef DS4_QUANTIZE_H
#define DS4_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/* Quantizes nrow rows of n_per_row floats (row-major) into ggml type
 * `type` (GGML_Q8_0, Q2_K, Q4_K, IQ2_XXS, MXFP4), rows stored one after
 * another, exactly as ggml's quantize_<type>(src, dst, nrow, n_per_row,
 * imatrix):
 *  - imatrix NULL: Q8_0, MXFP4 and the reference K-quants
 *    (quantize_row_q2_K_ref / quantize_row_q4_K_ref);
 *  - imatrix (n_per_row weights, one per column, the same for every row):
 *    quantize_row_q2_K_impl / q4_K_impl / iq2_xxs_impl; Q8_0 and MXFP4
 *    ignore it, as ggml does.  IQ2_XXS requires it.
 * Returns the number of bytes written (nrow * row size), or 0 with *err
 * set (a static string) for an unsupported type, a row length that is not
 * a multiple of the block size, a missing importance matrix (IQ2_XXS), or
 * a non-finite input or negative/non-finite importance weight (ggml would
 * compute garbage or abort; nothing is written then).  dst must hold
 * nrow * row size bytes.  Thread-safe; the first IQ2_XXS call builds its
 * search tables (about 0.2 s, 400 KB), later calls reuse them. */
size_t ds4_quantize(uint32_t type, const float *src, void *dst, int64_t nrow, int64_t n_per_row,
                    const float *imatrix, const char **err);

/* The importance ds4 uses for IQ2_XXS when no imatrix file is given: the
 * sum of squares of each column over all rows (golden quants README).
 * out: n_per_row floats, each summed in float64 in row order and rounded
 * once (bit-identical to the golden importance matrices). */
void ds4_quantize_default_imatrix(const float *src, int64_t nrow, int64_t n_per_row, float *out);

#endif /* DS4_QUANTIZE_H */
