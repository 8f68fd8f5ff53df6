/*
 * kv_rows.c -- KV cache row conversions (kv_rows.h): f16 storage rows to
 * and from float rows.  Owns only the arithmetic; the session decides the
 * storage kind and where its rows live.
 */
#include <string.h>

#include "kernels/kv_rows.h"
#include "kernels/quant.h"   /* ds4_f16_to_f32, ds4_f32_to_f16 */

#if defined(__F16C__)
#include <immintrin.h>
#endif

void kv_f16_to_f32_scalar(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ds4_f16_to_f32(src[i]);
}

/* The hot path: the attention converts a token's key rows per thread.
 * F16C's conversion is exact like the scalar one (every f16 is a float);
 * test_session compares the two on all 65536 values. */
void kv_f16_to_f32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    kv_f16_to_f32_scalar(src + i, dst + i, n - i);
}

void kv_f32_to_f16(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ds4_f32_to_f16(src[i]);
}

void kv_rows_get(int kv16, const void *src, float *dst, size_t n, int w) {
    if (kv16) kv_f16_to_f32(src, dst, n * (size_t)w);
    else memcpy(dst, src, n * (size_t)w * sizeof(float));
}

void kv_rows_put(int kv16, const float *src, void *dst, size_t n, int w) {
    if (kv16) kv_f32_to_f16(src, dst, n * (size_t)w);
    else memcpy(dst, src, n * (size_t)w * sizeof(float));
}
