/*
 * utf8.h -- UTF-8 decoding with WHATWG error handling, and encoding
 * (utf8.c).  In the base layer because everything that prints untrusted
 * bytes (base/escape.c), tokenizes (text/) or checks text needs it.
 *
 * Owns: these functions only.  Must not: allocate, or know code point
 * classes (text/unicode.h).
 */
#ifndef DS4_BASE_UTF8_H
#define DS4_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define DS4_UC_REPLACEMENT 0xFFFDu

/* Decode one character from s[0..n), n > 0.  Returns the number of bytes
 * consumed (1..4) and stores the code point.  An invalid sequence yields
 * U+FFFD and consumes its maximal invalid subpart (WHATWG / Python
 * "replace"): the longest prefix that could still start a valid character,
 * at least one byte.  *valid is set to 0 in that case, else 1. */
size_t ds4_utf8_next(const unsigned char *s, size_t n, uint32_t *cp, int *valid);

/* Length of the longest prefix of s[0..n) that is valid UTF-8. */
size_t ds4_utf8_valid_prefix(const unsigned char *s, size_t n);

/* Encode `cp` (<= U+10FFFF, not a surrogate) as UTF-8 into out[4]; returns
 * the length. */
size_t ds4_utf8_encode(uint32_t cp, unsigned char out[4]);

/* Number of bytes a lead byte announces (1..4), 0 if `b` can never start a
 * character (continuation bytes, C0, C1, F5..FF). */
int ds4_utf8_lead_len(unsigned char b);

/* Whether byte `b` may follow `lead` at position `pos` (1..3) of a sequence
 * started by `lead` (applies the E0/ED/F0/F4 restrictions on the 2nd byte). */
int ds4_utf8_cont_ok(unsigned char lead, int pos, unsigned char b);

#endif
