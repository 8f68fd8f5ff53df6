/*
 * kv_rows.h -- the conversions of KV cache rows between the session's
 * storage and the float rows the attention works on (kv_rows.c).
 *
 * Owns: f16 <-> f32 row conversion (a scalar reference beside the F16C
 * path; both exact, test_session compares them on all 65536 values) and
 * the row copy in and out of a storage that is either f16 (kv16) or f32.
 * Must not: know the session or the layer layout -- the engine passes the
 * storage kind and widths (engine_internal.h's kv_get/kv_put wrap these for
 * a session).  Moved here out of engine/session.c so that the forward pass
 * and the MTP block no longer call back into the session module.
 */
#ifndef DS4_KV_ROWS_H
#define DS4_KV_ROWS_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = the float of half src[i]; exact.  kv_f16_to_f32 uses F16C where
 * the build has it, kv_f16_to_f32_scalar is its reference. */
void kv_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void kv_f16_to_f32_scalar(const uint16_t *src, float *dst, size_t n);
/* dst[i] = src[i] rounded to half (exact for the f16-exact rows kv16
 * sessions store). */
void kv_f32_to_f16(const float *src, uint16_t *dst, size_t n);
/* n rows of width w from storage (f16 when kv16, else f32) into float
 * rows, and back. */
void kv_rows_get(int kv16, const void *src, float *dst, size_t n, int w);
void kv_rows_put(int kv16, const float *src, void *dst, size_t n, int w);

#endif
