/*
 * iq2_avx512.h -- the IQ2_XXS grid-index lookup shared by the AVX-512
 * tables (quant_vnni.c: packed tiles and the one-token kernel; quant_amx.c:
 * the AMX packing).
 *
 * Owns: one inline step and its table registers, no state.  Every grid
 * magnitude of IQ2_XXS is 8, 25 or 43, so a grid entry is 8 two-bit codes:
 * ds4_iq2xxs_codes() (quant.c) holds those of elements 0..3 ("lo") and
 * 4..7 ("hi") of each of the 256 entries; a byte index picks its entry's
 * codes by two 128-byte vpermi2b lookups, the index's bit 7 choosing the
 * half.  What the codes become (biased bytes, tile bytes) is each
 * caller's.
 *
 * Must not: be included where AVX-512 VBMI code cannot be compiled (the
 * callers are built with target attributes that include it).
 */
#ifndef DS4_IQ2_AVX512_H
#define DS4_IQ2_AVX512_H

#include <immintrin.h>

#include "kernels/quant.h"

#define IQ2_SIMD_INLINE __attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) static inline

typedef struct {
    __m512i lo[4], hi[4];   /* 64-byte quarters of the lo / hi code tables */
} iq2_code_tab;

/* c = ds4_iq2xxs_codes(), read once by the caller's table init (the
 * loads run per strip or call: no once-check here) */
IQ2_SIMD_INLINE void iq2_code_tab_load(iq2_code_tab *t, const uint8_t *c)
{
    for (int i = 0; i < 4; i++) {
        t->lo[i] = _mm512_loadu_si512(c + 64 * i);
        t->hi[i] = _mm512_loadu_si512(c + 256 + 64 * i);
    }
}

/* 64 grid indices (bytes) -> the codes of elements 0..3 (*lo) and 4..7
 * (*hi) of each entry, two bits per element, element e at bits 2e */
IQ2_SIMD_INLINE void iq2_idx_codes(const iq2_code_tab *t, __m512i idx, __m512i *lo, __m512i *hi)
{
    const __mmask64 top = _mm512_movepi8_mask(idx);
    *lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t->lo[0], idx, t->lo[1]),
                                 _mm512_permutex2var_epi8(t->lo[2], idx, t->lo[3]));
    *hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t->hi[0], idx, t->hi[1]),
                                 _mm512_permutex2var_epi8(t->hi[2], idx, t->hi[3]));
}

#endif
