/*
 * afile.c -- writing a file whole or not at all; see afile.h.
 */
#include "base/afile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void afile_free(ds4_afile *a) {
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
    a->f = NULL;
}

int ds4_afile_open(ds4_afile *a, const char *path, int mode) {
    memset(a, 0, sizeof *a);
    struct stat st;
    /* stat follows links: /dev/stdout -> /proc/self/fd/1 -> a pipe */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) { errno = EISDIR; return -1; }
        if (!(a->path = strdup(path))) return -1;
        if (!(a->f = fopen(path, "wb"))) { int e = errno; afile_free(a); errno = e; return -1; }
        return 0;
    }
    static unsigned seq;
    size_t cap = strlen(path) + 48;
    if (!(a->path = strdup(path)) || !(a->tmp = malloc(cap))) { afile_free(a); errno = ENOMEM; return -1; }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(a->tmp, cap, "%s.tmp-%d-%u", path, (int)getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
        fd = open(a->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) { int e = errno; afile_free(a); errno = e; return -1; }
    if (!(a->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        unlink(a->tmp);
        afile_free(a);
        errno = e;
        return -1;
    }
    return 0;
}

static void sync_dir(const char *path) {
    char *dir = strdup(path);
    if (!dir) return;
    char *sl = strrchr(dir, '/');
    const char *d = sl ? (sl == dir ? "/" : (*sl = 0, dir)) : ".";
    int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
    free(dir);
}

int ds4_afile_commit(ds4_afile *a) {
    int e = 0;
    if (fflush(a->f)) e = errno;
    if (!e && a->tmp && fsync(fileno(a->f))) e = errno;
    if (fclose(a->f) && !e) e = errno;
    if (a->tmp) {
        if (!e && rename(a->tmp, a->path)) e = errno;
        if (e) unlink(a->tmp);
        else sync_dir(a->path);
    }
    afile_free(a);
    if (e) { errno = e; return -1; }
    return 0;
}

void ds4_afile_abort(ds4_afile *a) {
    if (a->f) fclose(a->f);
    if (a->tmp) unlink(a->tmp);
    afile_free(a);
}

int ds4_write_file_atomic(const char *path, const void *data, size_t n, int mode) {
    ds4_afile a;
    if (ds4_afile_open(&a, path, mode)) return -1;
    if (n && fwrite(data, 1, n, a.f) != n) {
        int e = errno ? errno : EIO;
        ds4_afile_abort(&a);
        errno = e;
        return -1;
    }
    return ds4_afile_commit(&a);
}
