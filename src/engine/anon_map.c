/*
 * anon_map.c -- see anon_map.h.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "engine/anon_map.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23   /* Linux 5.14 */
#endif

static int commit_pages(void *p, size_t n) {
    for (;;) {
        if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return 0;
        if (errno == EINTR) continue;   /* a signal: the populated pages stay, go on */
        if (errno != EINVAL) return -1; /* ENOMEM, or the memory cgroup's limit */
        break;                          /* a kernel without it */
    }
    volatile uint8_t *b = p;
    for (size_t o = 0; o < n; o += 4096) b[o] = 0;
    return 0;
}

void *ds4_anon_map(size_t bytes, int commit) {
    if (!bytes) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);   /* advice only: 4 KB pages still work */
#endif
    if (commit && commit_pages(p, bytes) != 0) {
        munmap(p, bytes);
        return NULL;
    }
    return p;
}

void ds4_anon_unmap(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 1);
}
