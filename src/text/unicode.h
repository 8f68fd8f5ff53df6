/*
 * unicode.h -- the little Unicode the tokenizer needs: code point classes for
 * the pre-tokenizer regexes (the UTF-8 decoder is base/utf8.h).
 *
 * Owns: unicode.c and the generated table unicode_tables.h (made by
 * tools/gen_unicode.py).  Must not: know about tokens, vocabularies or the
 * regex itself (that is tokenizer.c); allocate memory.
 */
#ifndef DS4_UNICODE_H
#define DS4_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/utf8.h"   /* the UTF-8 decoder moved to the base layer */

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

/* Class of `cp` (any value; above U+10FFFF is "other"). */
unsigned ds4_uc_class(uint32_t cp);

#endif /* DS4_UNICODE_H */
