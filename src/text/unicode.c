/*
 * unicode.c -- code point classes (binary search over the generated range
 * table) and UTF-8 decoding with WHATWG replacement.
 *
 * Owns: the functions of unicode.h.  Must not: touch tokenizer state or
 * allocate.  The table comes from unicode_tables.h; regenerate it with
 * tools/gen_unicode.py rather than editing it.
 */
#include "text/unicode.h"
#include "text/unicode_tables.h"

unsigned ds4_uc_class(uint32_t cp) {
    if (cp >= 0x110000) return DS4_UC_OTHER;
    /* Last range whose start is <= cp (range 0 starts at 0). */
    size_t lo = 0, hi = DS4_UC_NRANGES;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (ds4_uc_range_start[mid] <= cp) lo = mid; else hi = mid;
    }
    return ds4_uc_range_class[lo];
}
