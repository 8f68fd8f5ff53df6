/*
 * unicode.h -- the little Unicode the tokenizer needs: code point classes for
 * the pre-tokenizer regexes and a UTF-8 decoder with WHATWG error handling.
 *
 * Owns: unicode.c and the generated table unicode_tables.h (made by
 * tools/gen_unicode.py).  Must not: know about tokens, vocabularies or the
 * regex itself (that is tokenizer.c); allocate memory.
 */
#ifndef DS4_UNICODE_H
#define DS4_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Class of a code point: the general-category group in the low 3 bits and
 * the \s flag (Oniguruma's \s = White_Space) in bit 3. */
enum {
    DS4_UC_OTHER = 0,   /* C* (controls, format, private use, unassigned), Z* that is not \s */
    DS4_UC_L = 1,       /* letters */
    DS4_UC_M = 2,       /* marks */
    DS4_UC_N = 3,       /* numbers */
    DS4_UC_P = 4,       /* punctuation */
    DS4_UC_S = 5,       /* symbols */
    DS4_UC_GROUP = 7,   /* mask of the group */
    DS4_UC_WS = 8,      /* \s */
};

#define DS4_UC_REPLACEMENT 0xFFFDu

/* Class of `cp` (any value; above U+10FFFF is "other"). */
unsigned ds4_uc_class(uint32_t cp);

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

#endif /* DS4_UNICODE_H */
