/*
 * util.h -- small helpers every agent module uses (util.c): a string copy
 * that cannot fail (the clock is base's ds4_now).
 *
 * Owns: nothing but these.  Must not: include agent.h or call any other
 * agent module -- it sits under all of them (they reached turn.c for
 * these before, which made turn.c and its callers a circle).
 */
#ifndef AG_UTIL_H
#define AG_UTIL_H

#include <stddef.h>

/* p[0..n) as a NUL-terminated malloc'd string; out of memory exits (the
 * agent cannot go on without it, and callers need no error path). */
char *ag_strndup(const char *p, size_t n);

#endif
