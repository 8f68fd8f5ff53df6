/*
 * test_afile.c -- base/afile.c: files are written whole or not at all, and
 * a target that is not a regular file (/dev/null, a FIFO) is written in
 * place, never replaced.
 *
 * Why the second half: every writer of the project once renamed
 * "PATH.tmp" over PATH, so `ds4 --dump-logits /dev/null` (or
 * `ds4-quantize -o /dev/null`) run as root turned /dev/null into a plain
 * file for the whole machine (tmux, among others, then refuses to start).
 *
 * Owns: nothing outside this test.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/afile.h"
#include "gguf/gguf.h"

#include "testutil.h"

static char dir[] = "/tmp/ds4-afile.XXXXXX";

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 16);
    *n = fread(b, 1, 1 << 16, f);
    fclose(f);
    return b;
}

/* entries of dir other than the names given (temporaries left behind) */
static int strays(const char *keep1, const char *keep2) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((keep1 && !strcmp(e->d_name, keep1)) || (keep2 && !strcmp(e->d_name, keep2))) continue;
        n++;
    }
    closedir(d);
    return n;
}

static int is_char_dev_null(void) {
    struct stat st;
    return stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode);
}

int main(void) {
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char p[256], q[256];
    size_t n = 0;
    char *b;

    /* a new file, then replaced; no temporary left */
    snprintf(p, sizeof p, "%s/out.bin", dir);
    CHECK(ds4_write_file_atomic(p, "first", 5, 0644) == 0, "write new: %s", strerror(errno));
    b = slurp(p, &n);
    CHECK(b && n == 5 && !memcmp(b, "first", 5), "new file content");
    free(b);
    CHECK(ds4_write_file_atomic(p, "second!", 7, 0600) == 0, "replace: %s", strerror(errno));
    b = slurp(p, &n);
    CHECK(b && n == 7 && !memcmp(b, "second!", 7), "replaced content");
    free(b);
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 077) == 0, "mode 0600 kept private (%o)", st.st_mode & 0777);
    CHECK(strays("out.bin", NULL) == 0, "no temporary left after commit");

    /* an aborted write leaves the old file as it was, and nothing else */
    ds4_afile a;
    CHECK(ds4_afile_open(&a, p, 0644) == 0, "open for abort");
    fputs("partial", a.f);
    fflush(a.f);
    CHECK(strays("out.bin", NULL) == 1, "the temporary exists while writing");
    b = slurp(p, &n);
    CHECK(b && n == 7 && !memcmp(b, "second!", 7), "the target untouched while writing");
    free(b);
    ds4_afile_abort(&a);
    b = slurp(p, &n);
    CHECK(b && n == 7 && !memcmp(b, "second!", 7), "the target untouched after abort");
    free(b);
    CHECK(strays("out.bin", NULL) == 0, "no temporary left after abort");

    /* errors: a directory, a missing directory */
    errno = 0;
    CHECK(ds4_write_file_atomic(dir, "x", 1, 0644) == -1 && errno == EISDIR, "a directory is refused (EISDIR)");
    snprintf(q, sizeof q, "%s/no/such/dir/f", dir);
    errno = 0;
    CHECK(ds4_write_file_atomic(q, "x", 1, 0644) == -1 && errno == ENOENT, "a missing directory: ENOENT");
    CHECK(strays("out.bin", NULL) == 0, "nothing left by the failures");

    /* /dev/null stays the device */
    if (is_char_dev_null()) {
        CHECK(ds4_write_file_atomic("/dev/null", "data", 4, 0644) == 0, "write /dev/null: %s", strerror(errno));
        char *err = NULL;
        gguf_writer *w = gguf_writer_open("/dev/null", &err);
        CHECK(w != NULL, "gguf writer on /dev/null: %s", err ? err : "");
        if (w) {
            gguf_w_u32(w, "general.alignment", 32);
            CHECK(gguf_writer_close(w, &err) == 0, "gguf writer close on /dev/null: %s", err ? err : "");
        }
        free(err);
        int ok = is_char_dev_null();
        CHECK(ok, "/dev/null is still a character device");
        if (!ok) {   /* repair the machine for what runs next */
            unlink("/dev/null");
            if (mknod("/dev/null", S_IFCHR | 0666, makedev(1, 3)) == 0) chmod("/dev/null", 0666);
        }
    } else {
        printf("test_afile: /dev/null is not a character device on this machine; its check skipped\n");
    }

    /* a FIFO is written in place: a reader gets the bytes, the FIFO stays */
    snprintf(q, sizeof q, "%s/fifo", dir);
    CHECK(mkfifo(q, 0600) == 0, "mkfifo");
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(q, O_RDONLY);
        char buf[64];
        ssize_t r = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
        _exit(r == 9 && !memcmp(buf, "to a pipe", 9) ? 0 : 1);
    }
    CHECK(ds4_write_file_atomic(q, "to a pipe", 9, 0644) == 0, "write FIFO: %s", strerror(errno));
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the FIFO's reader got the bytes");
    CHECK(lstat(q, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is still a FIFO");
    CHECK(strays("out.bin", "fifo") == 0, "no temporary beside the FIFO");

    unlink(q);
    unlink(p);
    rmdir(dir);
    printf("test_afile: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
