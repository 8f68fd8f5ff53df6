/*
 * afile.h -- writing a file whole or not at all (every writer of the
 * project: GGUF files, logits dumps, imatrix files, steering directions,
 * the agent's session records, ds4-get's records).
 *
 * A regular file (or a new name) is written to a private temporary file
 * beside it (O_EXCL, a name no other writer uses), flushed, fsync'd and
 * renamed over the target at commit, then the directory is synced: a
 * reader sees the old file or the new one, never a part.  A name that
 * already exists as something other than a regular file -- /dev/null, a
 * FIFO, a terminal, /dev/stdout -- is written in place: it cannot be
 * "replaced" without destroying it (a rename over /dev/null turns the
 * device into a plain file for every process on the machine), and a
 * stream has no partial state to protect.
 *
 * Owns: the temporary's name, the commit order (flush, fsync, close,
 * rename, directory fsync) and the cleanup on every error path.
 * Must not: know what is written.
 */
#ifndef DS4_BASE_AFILE_H
#define DS4_BASE_AFILE_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *f;      /* write here (buffered) */
    char *path;   /* the target */
    char *tmp;    /* the temporary renamed at commit; NULL: written in place */
} ds4_afile;

/* 0, or -1 with errno set (nothing left behind).  mode: a new file's
 * permissions (0644; 0600 for private records), before the umask. */
int ds4_afile_open(ds4_afile *a, const char *path, int mode);
/* Make the written bytes the file: 0, or -1 with errno set (the target
 * untouched, the temporary removed).  Frees a either way. */
int ds4_afile_commit(ds4_afile *a);
/* Drop what was written (the target untouched); frees a. */
void ds4_afile_abort(ds4_afile *a);

/* The whole of data[0..n) as path: 0, or -1 with errno set. */
int ds4_write_file_atomic(const char *path, const void *data, size_t n, int mode);

#endif
