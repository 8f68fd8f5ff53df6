/*
 * anon_map.h -- large anonymous memory on 2 MB pages.
 *
 * Owns: the one way the engine maps big working memory of its own (the
 * session scratch, --ssd-streaming's weight copy and expert pool).  These
 * are swept end to end by the kernels, so they ask for transparent huge
 * pages (MADV_HUGEPAGE): with THP in `madvise` mode (Debian's default), or
 * `always` with defrag `madvise` on a machine whose memory the page cache
 * has fragmented, nothing else gives them 2 MB pages, and 4 KB ones cost
 * the prefill ~18 % in TLB misses (docs/perf/kernels-diary.md, "The prefill by
 * function").  Must not: be used for memory that is later realloc'd or
 * free'd (it is munmap'd), or under AddressSanitizer where calloc's
 * redzones are wanted (callers decide).
 */
#ifndef DS4_ANON_MAP_H
#define DS4_ANON_MAP_H

#include <stddef.h>

/* A zeroed private mapping of `bytes`, advised to 2 MB pages; with
 * `commit`, every page is committed now (MADV_POPULATE_WRITE, which
 * reports a lack of memory instead of faulting later; a write per 4 KB on
 * kernels before 5.14).  NULL when the mapping or the commit fails. */
void *ds4_anon_map(size_t bytes, int commit);
void ds4_anon_unmap(void *p, size_t bytes);

#endif
