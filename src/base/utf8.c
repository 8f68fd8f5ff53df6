/*
 * utf8.c -- see utf8.h.
 */
#include "base/utf8.h"

int ds4_utf8_lead_len(unsigned char b) {
    if (b < 0x80) return 1;
    if (b < 0xC2) return 0;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 0;
}

int ds4_utf8_cont_ok(unsigned char lead, int pos, unsigned char b) {
    unsigned lo = 0x80, hi = 0xBF;
    if (pos == 1) {
        /* The second byte carries the overlong / surrogate / > U+10FFFF
         * checks (Unicode Table 3-7). */
        if (lead == 0xE0) lo = 0xA0;
        else if (lead == 0xED) hi = 0x9F;
        else if (lead == 0xF0) lo = 0x90;
        else if (lead == 0xF4) hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

size_t ds4_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *valid) {
    unsigned char b = s[0];
    if (b < 0x80) { *cp = b; *valid = 1; return 1; }
    int len = ds4_utf8_lead_len(b);
    if (len == 0) { *cp = DS4_UC_REPLACEMENT; *valid = 0; return 1; }
    uint32_t c = b & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n || !ds4_utf8_cont_ok(b, i, s[i])) {
            /* s[0..i) is the maximal subpart: it could have started a valid
             * character, s[i] cannot continue it. */
            *cp = DS4_UC_REPLACEMENT; *valid = 0; return (size_t)i;
        }
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cp = c; *valid = 1;
    return (size_t)len;
}

size_t ds4_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII fast path, 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            __builtin_memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int ok;
        size_t k = ds4_utf8_next(s + i, n - i, &cp, &ok);
        if (!ok) return i;
        i += k;
    }
    return n;
}

size_t ds4_utf8_encode(uint32_t cp, unsigned char out[4]) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
