/*
 * test_mapguard.c -- a model file truncated under a running process
 * (src/gguf/mapguard.c, engine.c ds4_model_check).
 *
 *  - the guard alone: a read of a page the truncation took reads zeros and
 *    is recorded at its offset; pages before the end still read the file;
 *    the whole lost tail is replaced at the first fault (one fault
 *    recorded); a SIGBUS outside every guarded mapping, and one sent with
 *    kill, still end the process (the guard swallows only its own faults);
 *  - the engine: a fault in a routed expert tensor is named with its layer,
 *    expert and the expert's bytes; the model is then broken and every
 *    evaluation of every session fails at once with that message
 *    (ds4_model_error, ds4_model_strerror); an evaluation that itself
 *    reaches the lost bytes (the head's output.weight, the file's last
 *    tensor) fails with DS4_EIO naming that tensor, and the session is
 *    reset, not left half-updated;
 *  - a file already truncated before the load is refused by the container
 *    checks, as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ds4.h"
#include "testutil.h"
#include "engine/engine_internal.h"
#include "gguf/mapguard.h"

static long pg;

static uint64_t up(uint64_t v) { return (v + (uint64_t)pg - 1) / (uint64_t)pg * (uint64_t)pg; }

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) { if (a) fclose(a); if (b) fclose(b); return -1; }
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n) rc = -1;
    fclose(a);
    if (fclose(b)) rc = -1;
    return rc;
}

static uint8_t pat(size_t i) { return (uint8_t)(i * 7 + 1); }

static int write_pattern(const char *path, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    for (size_t i = 0; i < n; i++) fputc(pat(i), f);
    return fclose(f);
}

/* The guard on a plain file mapping. */
static void guard_unit(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/pages.bin", dir);
    const size_t size = 4 * (size_t)pg + 100;
    CHECK(write_pattern(path, size) == 0, "write %s", path);
    int fd = open(path, O_RDONLY);
    const volatile uint8_t *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(fd >= 0 && map != MAP_FAILED, "map %s", path);
    if (fd < 0 || map == MAP_FAILED) return;
    int h = mapguard_add((const void *)map, size, fd);
    CHECK(h > 0, "guard added");
    uint64_t off = 0;
    CHECK(map[10] == pat(10) && map[3 * pg + 5] == pat(3 * pg + 5), "the file's bytes before the cut");
    CHECK(!mapguard_fault(h, &off), "no fault yet");
    CHECK(truncate(path, pg + 10) == 0, "truncate: %s", strerror(errno));
    /* without the guard: SIGBUS, the end of this test program */
    uint8_t v = map[3 * pg + 5];
    CHECK(v == 0, "a lost page reads zeros (got %u)", v);
    CHECK(mapguard_fault(h, &off) && off == (uint64_t)(3 * pg + 5), "fault recorded at %" PRIu64
          ", expected %ld", off, 3 * pg + 5);
    CHECK(map[10] == pat(10) && map[pg + 5] == pat(pg + 5), "the bytes the file still has read as before");
    CHECK(map[pg + 20] == 0, "past the end in the last page: zeros (the kernel's)");
    v = map[2 * pg];
    CHECK(v == 0 && mapguard_fault(h, &off) && off == (uint64_t)(3 * pg + 5),
          "the whole lost tail was replaced at the first fault (first fault kept: %" PRIu64 ")", off);
    mapguard_remove(h);
    CHECK(!mapguard_fault(h, &off), "removed: no fault reported");
    munmap((void *)map, size);
    close(fd);

    /* Not ours: an unguarded mapping's SIGBUS and a SIGBUS sent by kill
     * still end the process (by the signal; under ASan by its report).
     * The guard is installed in the child by guarding another mapping. */
    for (int kind = 0; kind < 2; kind++) {
        CHECK(write_pattern(path, size) == 0, "write %s", path);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            /* the death is the expected outcome: no report of it in the log
             * (ASan prints one) */
            int nul = open("/dev/null", O_WRONLY);
            if (nul >= 0) dup2(nul, 2);
            int gfd = open(path, O_RDONLY);
            void *gm = mmap(NULL, size, PROT_READ, MAP_PRIVATE, gfd, 0);
            if (gm == MAP_FAILED || !mapguard_add(gm, size, gfd)) _exit(3);
            if (kind == 0) {
                int ufd = open(path, O_RDONLY);
                const volatile uint8_t *um = mmap(NULL, size, PROT_READ, MAP_PRIVATE, ufd, 0);
                if (um == MAP_FAILED || truncate(path, 10)) _exit(4);
                /* the guarded mapping lost the page too, but this read is
                 * in the other one */
                (void)um[3 * pg];
            } else {
                raise(SIGBUS);
            }
            _exit(0);   /* the guard swallowed it: wrong */
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/wait");
        const char *what = kind == 0 ? "a fault in an unguarded mapping" : "a SIGBUS sent by kill";
        CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "%s was swallowed", what);
        CHECK(!(WIFEXITED(st) && (WEXITSTATUS(st) == 3 || WEXITSTATUS(st) == 4)), "%s: set-up failed", what);
#ifndef __SANITIZE_ADDRESS__
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "%s: status %#x, expected death by SIGBUS", what, st);
#endif
    }
    unlink(path);
}

/* The file offset and size of a tensor of the loaded model. */
static int tensor_at(const ds4_model *m, const char *name, uint64_t *start, uint64_t *nbytes, uint64_t *ne2) {
    const gguf_tensor *t = gguf_find_tensor(m->gf, name);
    if (!t) return -1;
    *start = m->gf->data_offset + t->offset;
    *nbytes = t->nbytes;
    if (ne2) *ne2 = t->ne[2];
    return 0;
}

static void has(const char *msg, const char *want, const char *what) {
    CHECK(msg && strstr(msg, want), "%s: message lacks '%s': %s", what, want, msg ? msg : "(none)");
}

static void engine_cases(const char *dir) {
    char model[512], copy[600];
    snprintf(model, sizeof model, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    snprintf(copy, sizeof copy, "%s/m.gguf", dir);
    const int32_t ids[8] = { 0, 5, 77, 300, 1200, 9, 2048, 41 };
    char want[256];

    /* 1. A lost routed expert, touched where we choose: the message. */
    CHECK(copy_file(model, copy) == 0, "copy %s", model);
    ds4_model *m = test_load_model(copy, 2);
    ds4_session *s = test_new_session(m, 256, 16);
    CHECK(ds4_session_eval(s, ids, 8, NULL, NULL) == DS4_OK, "eval before the cut");
    CHECK(!ds4_model_broken(m) && !ds4_model_error(m) && ds4_model_check(m) == DS4_OK, "intact model");
    uint64_t a = 0, nb = 0, ne2 = 0;
    CHECK(tensor_at(m, "blk.5.ffn_down_exps.weight", &a, &nb, &ne2) == 0 && ne2 == 8, "expert tensor");
    if (ne2 != 8) { ds4_session_free(s); ds4_model_free(m); return; }
    const uint64_t slice = nb / ne2, e7 = a + 7 * slice;
    const uint64_t cut = up(e7 + 1), at = cut + 100;
    CHECK(at < e7 + slice, "the cut falls inside expert 7's slice");
    CHECK(truncate(copy, (off_t)cut) == 0, "truncate: %s", strerror(errno));
    uint8_t v = ((const volatile uint8_t *)m->gf->map)[at];
    CHECK(v == 0, "lost byte reads zero");
    CHECK(ds4_model_check(m) == DS4_EIO && ds4_model_broken(m), "the fault breaks the model");
    const char *msg = ds4_model_error(m);
    has(msg, "m.gguf: the model file was truncated while in use", "expert");
    snprintf(want, sizeof want, "byte %" PRIu64 " (tensor blk.5.ffn_down_exps.weight, routed expert 7 of layer 5, "
             "bytes %" PRIu64 "..%" PRIu64 ") is gone", at, e7, e7 + slice);
    has(msg, want, "expert");
    snprintf(want, sizeof want, "is now %" PRIu64 " bytes, %" PRIu64 " when loaded", cut, m->gf->size);
    has(msg, want, "expert");
    /* every evaluation now fails at once, with the message */
    int32_t t = 5;
    CHECK(ds4_session_eval(s, &t, 1, NULL, NULL) == DS4_EIO, "the broken model's session evaluates");
    ds4_session *s2 = test_new_session(m, 256, 16);
    CHECK(ds4_session_eval(s2, ids, 4, NULL, NULL) == DS4_EIO, "a new session of the broken model evaluates");
    CHECK(ds4_model_strerror(m, DS4_EIO) == ds4_model_error(m), "ds4_model_strerror(EIO) is the message");
    CHECK(!strcmp(ds4_model_strerror(m, DS4_ECTX), ds4_strerror(DS4_ECTX)), "other codes: ds4_strerror");
    ds4_session_free(s2);
    ds4_session_free(s);
    ds4_model_free(m);

    /* 2. The evaluation itself reaches the lost bytes: the head's matrix,
     * the file's last tensor, so it is the only one that can fault. */
    CHECK(copy_file(model, copy) == 0, "copy %s", model);
    m = test_load_model(copy, 2);
    s = test_new_session(m, 256, 16);
    CHECK(ds4_session_eval(s, ids, 8, NULL, NULL) == DS4_OK, "eval before the cut");
    CHECK(tensor_at(m, "output.weight", &a, &nb, NULL) == 0 && a + nb == m->gf->size, "output.weight is last");
    CHECK(up(a + 1) < a + nb, "a page of output.weight to cut");
    CHECK(truncate(copy, (off_t)up(a + 1)) == 0, "truncate: %s", strerror(errno));
    CHECK(ds4_session_eval(s, &t, 1, NULL, NULL) == DS4_EIO, "the evaluation that reads the lost bytes fails");
    CHECK(ds4_session_n_tokens(s) == 0 && !ds4_session_logits(s), "its session is reset (no half-updated layers)");
    msg = ds4_model_error(m);
    snprintf(want, sizeof want, "(tensor output.weight, bytes %" PRIu64 "..%" PRIu64 ") is gone", a, a + nb);
    has(msg, want, "head");
    CHECK(ds4_session_eval(s, ids, 2, NULL, NULL) == DS4_EIO, "and fails again at once");
    ds4_session_free(s);
    ds4_model_free(m);

    /* 3. Truncated before the load: the container checks refuse it. */
    CHECK(truncate(copy, (off_t)(a + 100)) == 0, "truncate: %s", strerror(errno));
    char *err = NULL;
    ds4_model_params mp;
    ds4_model_params_default(&mp);
    ds4_model *bad = ds4_model_load(copy, &mp, &err);
    CHECK(!bad && err && strstr(err, "output.weight") && strstr(err, "extends past the end of the file"),
          "a truncated file at load: %s", err ? err : "(no message)");
    ds4_model_free(bad);
    free(err);
    unlink(copy);
}

int main(void) {
    pg = sysconf(_SC_PAGESIZE);
    char dir[] = "/tmp/ds4-mapguard-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    guard_unit(dir);
    engine_cases(dir);
    rmdir(dir);
    printf("test_mapguard: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
