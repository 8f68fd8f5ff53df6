/*
 * model_file.c -- the "cannot open model" message shared by ds4,
 * ds4-server and ds4-agent (model_file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/model_file.h"

int ds4_model_file_check(const char *prog, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    struct stat st;
    if (fd >= 0) {
        /* a directory opens; the loader would then fail less clearly */
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) err = EISDIR;
        close(fd);
    }
    if (!err) return 0;
    fprintf(stderr,
            "%s: cannot open model %s: %s\n"
            "(use -m FILE; the default is " DS4_DEFAULT_MODEL ": `ds4-get q2-imatrix` downloads "
            "the DeepSeek V4 Flash GGUF and links it there, see docs/models.md; or "
            "`make run` to create a demo model with random weights, demo/ds4-demo.gguf)\n",
            prog, path, strerror(err));
    return -1;
}
