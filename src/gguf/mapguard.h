/*
 * mapguard.h -- a SIGBUS on a registered read-only file mapping becomes a
 * recorded fault instead of the death of the process.
 *
 * Why: the weights are read through a mapping of the model file.  When the
 * file is truncated under a running process (or its storage fails), the
 * next read of a lost page raises SIGBUS, whose default action kills a
 * server with every client's work and no word about the cause.  With the
 * guard, the handler puts anonymous zero pages where the file's pages were
 * lost, so the faulting instruction completes (the computation finishes on
 * zeros), and records the first faulting address; the engine checks after
 * each forward pass and fails it with a message naming the file, the
 * tensor and the bytes (engine.c, ds4_model_check).  No siglongjmp: the
 * fault can happen on any thread of the pool, in the middle of a kernel.
 *
 * Owns: the process's SIGBUS handler (installed at the first registration,
 * never removed), the table of guarded mappings.  A SIGBUS outside every
 * registered mapping goes to the handler that was there before, or gets
 * the default action: the process dies as it would have without the guard.
 * Must not: do anything in the handler that is not async-signal-safe (only
 * atomics, fstat, mmap, sigaction, raise), or guard a writable mapping
 * (zero pages would hide writes).
 */
#ifndef DS4_MAPGUARD_H
#define DS4_MAPGUARD_H

#include <stddef.h>
#include <stdint.h>

/* Guard [base, base + size) (a read-only mapping of `fd` from offset 0;
 * fd is what the handler fstat's to tell a truncated file, whose whole
 * lost tail it then replaces at once, from an unreadable page, which it
 * replaces alone).  Returns a handle > 0, or 0 where the mapping stays
 * unguarded (the table of 32 mappings is full, or the handler cannot be
 * installed). */
int mapguard_add(const void *base, size_t size, int fd);
/* Before the mapping is unmapped.  0 is a no-op. */
void mapguard_remove(int handle);
/* 1 and the offset from base of the first faulting byte once a fault was
 * recorded on the mapping; 0 otherwise (and for handle 0). */
int mapguard_fault(int handle, uint64_t *off);

#endif /* DS4_MAPGUARD_H */
