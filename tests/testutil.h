/*
 * testutil.h -- the check macro and the shared-data path of the C tests.
 * A failed CHECK prints file:line and a message and counts; the test's
 * main returns non-zero when `failures` is not zero.
 */
#ifndef DS4_TESTUTIL_H
#define DS4_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

static int failures, checks;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        checks++;                                                           \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* ../shared (the oracles), or $DS4_SHARED */
static inline const char *test_shared(void) {
    const char *s = getenv("DS4_SHARED");
    return s && *s ? s : "../shared";
}

#endif
