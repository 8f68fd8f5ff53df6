/*
 * fsconf.c -- file access confined beneath the agent's working directory
 * (see fsconf.h for the contract).
 *
 * Owns: path resolution beneath the root fd (openat2 RESOLVE_BENEATH, or
 * the component walk below), missing-directory creation, atomic replace
 * through an O_EXCL temp file, reading a regular file from an fd.
 * Must not: open anything by a path string that starts outside the root
 * fd, or use a resolved path string again (only the fds it produced).
 */
#include "fsconf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FC_MAX_LINKS 40     /* as the kernel's own limit */
#define FC_MAX_DEPTH 256    /* directory fds held by one walk */

int fc_use_openat2 = 1;
static int g_no_openat2;    /* the kernel said ENOSYS once: never try again */

int fc_root_open(fc_root *r, const char *path) {
    size_t n = strlen(path);
    r->fd = -1;
    if (n >= sizeof r->path) { errno = ENAMETOOLONG; return -1; }
    memcpy(r->path, path, n + 1);
    r->fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    return r->fd < 0 ? -1 : 0;
}

void fc_root_close(fc_root *r) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
}

/* `abs` beneath root: the part after the root's prefix ("" for the root);
 * NULL when it is elsewhere. */
static const char *beneath(const char *root, const char *abs) {
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/') return abs + 1;
    if (strncmp(abs, root, n) || (abs[n] != 0 && abs[n] != '/')) return NULL;
    return abs[n] ? abs + n + 1 : abs + n;
}

int fc_relpath(const fc_root *r, const char *path, char *out, size_t cap) {
    const char *p = path;
    if (path[0] == '/' && !(p = beneath(r->path, path))) { errno = EXDEV; return -1; }
    if (strlen(p) >= cap) { errno = ENAMETOOLONG; return -1; }
    memcpy(out, p, strlen(p) + 1);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Resolution                                                          */
/* ------------------------------------------------------------------ */

/* struct open_how and the RESOLVE_ bits of <linux/openat2.h> (kernel ABI;
 * spelled out so that older headers build too) */
typedef struct { uint64_t flags, mode, resolve; } fc_open_how;
#define FC_RESOLVE_NO_MAGICLINKS 0x02
#define FC_RESOLVE_BENEATH 0x08

static int try_openat2(const fc_root *r, const char *rel, int flags) {
#ifdef SYS_openat2
    fc_open_how how;
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)(unsigned)(flags | O_CLOEXEC | O_NOCTTY);
    /* RESOLVE_BENEATH: no absolute paths or links, no ".." above the
     * root, checked atomically with the lookup; magic /proc links (which
     * jump anywhere) refused outright */
    how.resolve = FC_RESOLVE_BENEATH | FC_RESOLVE_NO_MAGICLINKS;
    for (int i = 0; i < 4; i++) {
        long fd = syscall(SYS_openat2, r->fd, *rel ? rel : ".", &how, sizeof how);
        if (fd >= 0) return (int)fd;
        /* EAGAIN: a rename raced a ".." step; the kernel asks for a retry */
        if (errno != EAGAIN) break;
    }
    return -1;
#else
    (void)r; (void)rel; (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

/* The component walk: a stack of directory fds from the root down, each
 * opened with O_NOFOLLOW relative to the one below it.  ".." pops the
 * stack (never the kernel's ".."), so it cannot climb above the root; a
 * symbolic link is read with readlinkat and its target spliced into the
 * rest of the path -- an absolute target only when it names something
 * beneath the root, which restarts the walk from the root fd. */
static int walk(const fc_root *r, const char *rel, int flags) {
    size_t cap = 2 * PATH_MAX + 2;
    char *buf = malloc(cap), *tmp = malloc(cap);
    int st[FC_MAX_DEPTH], d = 0, links = 0, fd = -1, e_out = 0;
    st[0] = r->fd;
    if (!buf || !tmp) { e_out = ENOMEM; goto out; }
    if (strlen(rel) >= cap) { e_out = ENAMETOOLONG; goto out; }
    memcpy(buf, rel, strlen(rel) + 1);
    flags |= O_CLOEXEC | O_NOCTTY;
    size_t pos = 0;
    for (;;) {
        while (buf[pos] == '/') pos++;
        if (!buf[pos]) {   /* the path ends at a directory ("" or "a/") */
            fd = openat(st[d], ".", flags);
            if (fd < 0) e_out = errno;
            goto out;
        }
        size_t e = pos;
        while (buf[e] && buf[e] != '/') e++;
        size_t l = e - pos, q = e;
        while (buf[q] == '/') q++;
        int last = !buf[q];
        char comp[NAME_MAX + 1];
        if (l > NAME_MAX) { e_out = ENAMETOOLONG; goto out; }
        memcpy(comp, buf + pos, l);
        comp[l] = 0;
        if (!strcmp(comp, ".") || !strcmp(comp, "..")) {
            if (comp[1] == '.') {
                if (d == 0) { e_out = EXDEV; goto out; }
                close(st[d--]);
            }
            if (last) {
                fd = openat(st[d], ".", flags);
                if (fd < 0) e_out = errno;
                goto out;
            }
            pos = q;
            continue;
        }
        if (!last) {
            int nfd = openat(st[d], comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (nfd >= 0) {
                if (d + 1 >= FC_MAX_DEPTH) { close(nfd); e_out = ENAMETOOLONG; goto out; }
                st[++d] = nfd;
                pos = q;
                continue;
            }
            if (errno != ENOTDIR && errno != ELOOP) { e_out = errno; goto out; }
        } else {
            int fl = flags | O_NOFOLLOW | (buf[e] == '/' ? O_DIRECTORY : 0);
            fd = openat(st[d], comp, fl);
            if (fd >= 0) {
                struct stat sb;
                /* O_PATH | O_NOFOLLOW opens a link itself: follow it */
                if (!(fl & O_PATH) || fstat(fd, &sb) || !S_ISLNK(sb.st_mode)) goto out;
                close(fd);
                fd = -1;
            } else if (errno != ELOOP && errno != ENOTDIR) {
                e_out = errno;
                goto out;
            }
        }
        /* a symbolic link, or not a directory */
        char tg[PATH_MAX];
        ssize_t k = readlinkat(st[d], comp, tg, sizeof tg - 1);
        if (k < 0) { e_out = errno == EINVAL ? ENOTDIR : errno; goto out; }
        if (k == 0) { e_out = ENOENT; goto out; }
        tg[k] = 0;
        if (++links > FC_MAX_LINKS) { e_out = ELOOP; goto out; }
        const char *t = tg;
        if (tg[0] == '/') {
            if (!(t = beneath(r->path, tg))) { e_out = EXDEV; goto out; }
            while (d > 0) close(st[d--]);
        }
        size_t tl = strlen(t), rl = strlen(buf + e);
        if (tl + 1 + rl >= cap) { e_out = ENAMETOOLONG; goto out; }
        memcpy(tmp, t, tl);
        memcpy(tmp + tl, buf + e, rl + 1);   /* the rest keeps its leading '/' */
        char *sw = buf; buf = tmp; tmp = sw;
        pos = 0;
    }
out:
    while (d > 0) close(st[d--]);
    free(buf);
    free(tmp);
    if (fd < 0) errno = e_out ? e_out : EIO;
    return fd;
}

int fc_open(const fc_root *r, const char *rel, int flags) {
    if (fc_use_openat2 && !g_no_openat2) {
        int fd = try_openat2(r, rel, flags);
        if (fd >= 0) return fd;
        if (errno == ENOSYS) g_no_openat2 = 1;
        /* EXDEV: outside, or an absolute link (which RESOLVE_BENEATH never
         * follows, even into the tree); ELOOP, EAGAIN, EINVAL (an old
         * kernel's flags): the walk gives the definitive answer */
        else if (errno != EXDEV && errno != ELOOP && errno != EAGAIN && errno != EINVAL) return -1;
    }
    return walk(r, rel, flags);
}

/* mkdir -p of `dir` beneath the root: the deepest existing prefix is
 * opened beneath the root, then each missing component is made with
 * mkdirat in its parent's fd and opened with O_NOFOLLOW from it. */
static int make_dirs(const fc_root *r, const char *dir) {
    char *cp = strdup(dir);
    char *comp[FC_MAX_DEPTH];
    int n = 0, fd = -1, k;
    if (!cp) return -1;
    for (char *s = strtok(cp, "/"); s; s = strtok(NULL, "/")) {
        if (!strcmp(s, ".")) continue;
        if (n == FC_MAX_DEPTH) { free(cp); errno = ENAMETOOLONG; return -1; }
        comp[n++] = s;
    }
    char pre[2 * PATH_MAX];
    for (k = n; k >= 0; k--) {
        size_t pl = 0;
        pre[0] = 0;
        for (int i = 0; i < k; i++)
            pl += (size_t)snprintf(pre + pl, sizeof pre - pl, "%s%s", i ? "/" : "", comp[i]);
        fd = fc_open(r, pre, O_PATH | O_DIRECTORY);
        if (fd >= 0) break;
        if (errno != ENOENT) { free(cp); return -1; }
    }
    if (fd < 0) { free(cp); errno = ENOENT; return -1; }
    for (int i = k; i < n; i++)
        if (!strcmp(comp[i], "..")) { close(fd); free(cp); errno = EINVAL; return -1; }
    for (int i = k; i < n; i++) {
        if (mkdirat(fd, comp[i], 0755) != 0 && errno != EEXIST) {
            int e = errno;
            close(fd); free(cp); errno = e; return -1;
        }
        int nfd = openat(fd, comp[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(fd);
        if (nfd < 0) { free(cp); errno = e == ELOOP ? ENOTDIR : e; return -1; }
        fd = nfd;
    }
    free(cp);
    int rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    close(fd);
    errno = e;
    return rfd;
}

int fc_parent(const fc_root *r, const char *rel, int mkdirs, char *name, size_t namecap,
              int *followed) {
    char cur[2 * PATH_MAX + 2], dir[2 * PATH_MAX + 2];
    *followed = 0;
    if (strlen(rel) >= sizeof cur) { errno = ENAMETOOLONG; return -1; }
    memcpy(cur, rel, strlen(rel) + 1);
    for (int hop = 0;; hop++) {
        if (hop > FC_MAX_LINKS) { errno = ELOOP; return -1; }
        size_t l = strlen(cur);
        while (l && cur[l - 1] == '/') cur[--l] = 0;
        if (!l) { errno = EISDIR; return -1; }
        char *sl = strrchr(cur, '/');
        const char *base = sl ? sl + 1 : cur;
        if (!strcmp(base, ".") || !strcmp(base, "..")) { errno = EISDIR; return -1; }
        if (strlen(base) > NAME_MAX || strlen(base) >= namecap) { errno = ENAMETOOLONG; return -1; }
        memcpy(name, base, strlen(base) + 1);
        size_t dl = sl ? (size_t)(sl - cur) : 0;
        memcpy(dir, cur, dl);
        dir[dl] = 0;
        int dfd = fc_open(r, dir, O_RDONLY | O_DIRECTORY);
        /* a link's target is never created: a dangling link stays an error */
        if (dfd < 0 && errno == ENOENT && mkdirs && !*followed) dfd = make_dirs(r, dir);
        if (dfd < 0) return -1;
        struct stat sb;
        if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(sb.st_mode)) return dfd;
        char tg[PATH_MAX];
        ssize_t k = readlinkat(dfd, name, tg, sizeof tg - 1);
        close(dfd);
        if (k <= 0) { if (k == 0) errno = ENOENT; return -1; }
        tg[k] = 0;
        *followed = 1;
        const char *t = tg;
        if (tg[0] == '/') {
            if (!(t = beneath(r->path, tg))) { errno = EXDEV; return -1; }
            dl = 0;   /* the target is relative to the root now */
        }
        /* the target, relative to the link's directory: resolved again
         * beneath the root from the start (the next round) */
        if (dl + 1 + strlen(t) >= sizeof cur) { errno = ENAMETOOLONG; return -1; }
        snprintf(cur, sizeof cur, "%.*s%s%s", (int)dl, dir, dl ? "/" : "", t);
    }
}

void fc_fdpath(const fc_root *r, int fd, const char *name, const char *fallback, char *out,
               size_t cap) {
    char lk[64], p[PATH_MAX];
    snprintf(lk, sizeof lk, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(lk, p, sizeof p - 1);
    const char *rel = NULL;
    if (k > 0) {
        p[k] = 0;
        size_t pl = (size_t)k, dl = strlen(" (deleted)");
        if (p[0] == '/' && !(pl > dl && !strcmp(p + pl - dl, " (deleted)"))) rel = beneath(r->path, p);
    }
    if (!rel) { snprintf(out, cap, "%s", fallback); return; }
    if (!*rel) rel = ".";
    if (!name) snprintf(out, cap, "%s", rel);
    else if (!strcmp(rel, ".")) snprintf(out, cap, "%s", name);
    else snprintf(out, cap, "%s/%s", rel, name);
}

/* ------------------------------------------------------------------ */
/* Replace, read                                                       */
/* ------------------------------------------------------------------ */

static unsigned rand32(void) {
    static unsigned counter;
    unsigned x;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x) return x;
    /* no entropy yet: still unique within this process, and O_EXCL makes
     * a guessed name a retry, never a write through it */
    return (unsigned)time(NULL) ^ ((unsigned)getpid() << 12) ^ (++counter * 2654435761u);
}

int fc_replace(int dirfd, const char *name, const void *data, size_t n, mode_t mode, char *err,
               size_t errcap) {
    char tmp[NAME_MAX + 1];
    int fd = -1;
    for (int i = 0; i < 100 && fd < 0; i++) {
        /* beside the file: same directory fd, so renameat stays in it */
        snprintf(tmp, sizeof tmp, "%.200s.ds4tmp-%d-%08x", name, (int)getpid(), rand32());
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) {
            snprintf(err, errcap, "cannot create a temporary file beside %s: %s", name, strerror(errno));
            return -1;
        }
    }
    if (fd < 0) {
        snprintf(err, errcap, "cannot create a temporary file beside %s: every name tried exists", name);
        return -1;
    }
    const char *p = data;
    size_t off = 0;
    while (off < n) {
        ssize_t k = write(fd, p + off, n - off);
        if (k < 0) {
            if (errno == EINTR) continue;
            snprintf(err, errcap, "write failed: %s", strerror(errno));
            goto fail;
        }
        off += (size_t)k;
    }
    if (fchmod(fd, mode) != 0) {
        snprintf(err, errcap, "cannot set the mode of %s: %s", name, strerror(errno));
        goto fail;
    }
    /* the data is on disk before the name points at it (EINVAL: a file
     * system without fsync, nothing to wait for) */
    if (fsync(fd) != 0 && errno != EINVAL) {
        snprintf(err, errcap, "fsync failed: %s", strerror(errno));
        goto fail;
    }
    int c = close(fd);
    fd = -1;
    if (c != 0) {
        snprintf(err, errcap, "write failed: %s", strerror(errno));
        goto fail;
    }
    if (renameat(dirfd, tmp, dirfd, name) != 0) {
        snprintf(err, errcap, "cannot replace %s: %s", name, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    if (fd >= 0) close(fd);
    unlinkat(dirfd, tmp, 0);
    return -1;
}

char *fc_slurp(int fd, size_t *len, size_t max) {
    struct stat sb;
    if (fstat(fd, &sb)) return NULL;
    if (S_ISDIR(sb.st_mode)) { errno = EISDIR; return NULL; }
    if (!S_ISREG(sb.st_mode)) { errno = ENODEV; return NULL; }
    if ((uint64_t)sb.st_size > max) { errno = EFBIG; return NULL; }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    char *b = malloc((size_t)sb.st_size + 1);
    size_t n = 0;
    if (!b) return NULL;
    while (n < (size_t)sb.st_size) {
        ssize_t k = read(fd, b + n, (size_t)sb.st_size - n);
        if (k < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(b);
            errno = e;
            return NULL;
        }
        if (k == 0) break;
        n += (size_t)k;
    }
    b[n] = 0;
    *len = n;
    return b;
}
