/*
 * diff.h -- line diff for the agent's confirmations and edit summaries.
 *
 * Owns: the unified diff (as `diff -u`: 3 lines of context, `--- a/PATH` /
 * `+++ b/PATH` headers, `@@ -l,n +l,n @@` hunks, "\ No newline at end of
 * file") of a change about to be made, and its line counts.  Must not:
 * touch files or the screen (text in, text out).
 */
#ifndef DS4_AGENT_DIFF_H
#define DS4_AGENT_DIFF_H

#include <stddef.h>

#include "ds4.h"

typedef struct {
    int removed, added;   /* lines, as the diff counts them */
    int first;            /* 1-based line of the old text where the first change is (0: none) */
    int whole;            /* too many differences for a line diff: the changed region
                           * counts as replaced (removed/added are its sizes) */
} ag_diffstat;

/* Differences of a line-based diff are bounded (AG_DIFF_MAX_D) so that a
 * huge rewrite costs little: beyond it the changed region is reported as
 * replaced, not minimal. */
#define AG_DIFF_MAX_D 1000

/* The diff of old `a` -> new `b` into out (NULL: counts only).  `path` is
 * the name in the headers; is_new gives "--- /dev/null" (a file being
 * created).  max_lines > 0 bounds the hunk lines written (a note says how
 * many more there were).  Identical texts give no output and zero counts. */
void ag_diff(const char *a, size_t an, const char *b, size_t bn, const char *path, int is_new,
             int max_lines, ds4_buf *out, ag_diffstat *st);

#endif
