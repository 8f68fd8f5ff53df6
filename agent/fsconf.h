/*
 * fsconf.h -- file access confined beneath the agent's working directory.
 *
 * Owns: turning a path the model gave into open file descriptors beneath
 * one directory fd of the working directory, with the kernel doing the
 * confinement (openat2 RESOLVE_BENEATH) where it can and a component walk
 * by fds (O_NOFOLLOW on every step, symbolic links resolved here under the
 * same rule) where it cannot; creating missing directories with mkdirat
 * and replacing files through an O_EXCL temp file and renameat in the
 * file's own directory fd.  After a path is resolved every operation uses
 * the fds, never the path string again, so swapping a directory for a
 * symbolic link between a check and a use leads nowhere outside.
 * Must not: know about tools, the model or the screen (errors are errno
 * values; tools.c words them).
 */
#ifndef DS4_AGENT_FSCONF_H
#define DS4_AGENT_FSCONF_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    int fd;                 /* O_PATH | O_DIRECTORY fd of the root; -1 when closed */
    char path[PATH_MAX];    /* its real path (messages, absolute paths, tracking) */
} fc_root;

/* 1 (default): try openat2 first; 0: always the component walk.  The
 * tests set it to exercise the walk on kernels that have openat2. */
extern int fc_use_openat2;

/* Open `path` (a real path) as the root.  0, or -1 with errno. */
int fc_root_open(fc_root *r, const char *path);
void fc_root_close(fc_root *r);

/* A path from the model, relative to the root: relative paths as given,
 * absolute ones only when they name the root or something beneath it
 * (the prefix stripped; "" is the root itself).  0, or -1 with errno =
 * EXDEV (outside) or ENAMETOOLONG. */
int fc_relpath(const fc_root *r, const char *path, char *out, size_t cap);

/* Open `rel` beneath the root; symbolic links are followed only where
 * they stay beneath it.  `flags` as for open(2) without O_CREAT (O_CLOEXEC
 * and O_NOCTTY are added).  The fd, or -1 with errno: EXDEV when the path
 * or a link on the way leads outside, ELOOP after 40 links. */
int fc_open(const fc_root *r, const char *rel, int flags);

/* The directory (an O_RDONLY | O_DIRECTORY fd beneath the root) holding
 * the last component of `rel`, and that component in `name`.  A symbolic
 * link as the last component is followed (beneath the root) until a name
 * that is not a link; *followed says whether one was.  With mkdirs,
 * missing directories are created (mkdirat, each relative to its parent's
 * fd); a ".." after a missing directory is EINVAL.  The fd, or -1 with
 * errno (EISDIR: `rel` names the root or ends in "." / ".."). */
int fc_parent(const fc_root *r, const char *rel, int mkdirs, char *name, size_t namecap,
              int *followed);

/* Where an open fd is, relative to the root ("." for the root itself),
 * from /proc/self/fd; `fallback` when that is unavailable or says the fd
 * is no longer beneath the root.  With `name`, the path of that entry of
 * the directory fd. */
void fc_fdpath(const fc_root *r, int fd, const char *name, const char *fallback, char *out,
               size_t cap);

/* Replace (or create) `name` in directory `dirfd` with data: a temp file
 * created O_CREAT | O_EXCL | O_NOFOLLOW under a random name in the same
 * directory, written, fsync'd, given `mode`, then renamed over `name`
 * within that directory; on any failure the temp file is unlinked.  0, or
 * -1 with a message in err. */
int fc_replace(int dirfd, const char *name, const void *data, size_t n, mode_t mode, char *err,
               size_t errcap);

/* Whole regular file from an fd opened with O_NONBLOCK: refuses what is
 * not a regular file (errno EISDIR for a directory, ENODEV for a FIFO,
 * socket or device), then clears O_NONBLOCK and reads at most `max` bytes
 * (EFBIG beyond).  NUL-terminated; NULL with errno on failure.  Does not
 * close fd. */
char *fc_slurp(int fd, size_t *len, size_t max);

#endif
