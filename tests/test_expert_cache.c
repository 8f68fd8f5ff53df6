/*
 * test_expert_cache.c -- --ssd-streaming through the public API
 * (src/engine/expert_cache.c):
 *   - a one-slot cache (every layer in waves) and a cache of a few slots
 *     give logits bit-identical to the resident model, prefill chunks and
 *     single-token decode steps alike, on an O_DIRECT file (/tmp) and on a
 *     tmpfs copy (/dev/shm: before Linux 6.6 O_DIRECT is refused there and
 *     reads are buffered + FADV_DONTNEED);
 *   - the mmap'd data section of a streaming model is never touched: the
 *     file mapping's resident size (/proc/self/smaps) stays within the
 *     metadata (and the non-routed weights live in anonymous memory), and
 *     the page cache holds no more of the file than that either (mincore),
 *     with O_DIRECT and with buffered reads (DS4_XCACHE_BUFFERED=1);
 *   - the counters add up (hits + misses = requests, bytes read);
 *   - a file truncated while the model is in use fails the evaluation with
 *     DS4_EIO and a message naming the truncation, again on the next call,
 *     and the model still frees cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds4.h"
#include "testutil.h"

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) { if (a) fclose(a); if (b) fclose(b); return -1; }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    return fclose(b);
}

/* Resident bytes of this process's mappings of `path`. */
static long long mapping_rss(const char *path) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[4096];
    int in = 0;
    long long rss = 0;
    size_t pl = strlen(path);
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ' ')) {
            size_t n = strlen(line);
            while (n && (line[n - 1] == '\n' || line[n - 1] == ' ')) line[--n] = 0;
            in = n >= pl && !strcmp(line + n - pl, path);
            continue;
        }
        long long kb;
        if (in && sscanf(line, "Rss: %lld kB", &kb) == 1) rss += kb * 1024;
    }
    fclose(f);
    return rss;
}

/* Pages of `path` in the page cache (mincore on a fresh mapping). */
static long long cached_bytes(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    fstat(fd, &st);
    long pg = sysconf(_SC_PAGESIZE);
    size_t np = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char *v = malloc(np ? np : 1);
    long long n = -1;
    if (m != MAP_FAILED && v && mincore(m, (size_t)st.st_size, v) == 0) {
        n = 0;
        for (size_t i = 0; i < np; i++) n += v[i] & 1;
        n *= pg;
    }
    if (m != MAP_FAILED) munmap(m, (size_t)st.st_size);
    free(v);
    close(fd);
    return n;
}

static ds4_model *load(const char *path, int stream, uint64_t cache, char **err) {
    ds4_model_params p;
    ds4_model_params_default(&p);
    p.n_threads = 2;
    p.ssd_streaming = stream;
    p.ssd_cache_bytes = cache;
    return ds4_model_load(path, &p, err);
}

/* Evaluate ids on both sessions (prefill chunks of `chunk`, then decode
 * steps) and compare the logits after every call. */
static int same_run(ds4_session *a, ds4_session *b, const ds4_tokens *ids, int n_prefill, int n_vocab,
                    const char *what) {
    int bad = 0;
    for (int at = 0; at < (int)ids->n; ) {
        int n = at < n_prefill ? (n_prefill - at < 16 ? n_prefill - at : 16) : 1;
        int ra = ds4_session_eval(a, ids->v + at, n, NULL, NULL);
        int rb = ds4_session_eval(b, ids->v + at, n, NULL, NULL);
        CHECK(ra == 0 && rb == 0, "%s: eval at %d: %d %d", what, at, ra, rb);
        if (ra || rb) return 1;
        if (memcmp(ds4_session_logits(a), ds4_session_logits(b), (size_t)n_vocab * sizeof(float))) {
            bad++;
            CHECK(0, "%s: logits differ after token %d", what, at + n);
            break;
        }
        at += n;
    }
    return bad;
}

static void run_case(const char *orig, const char *copy, uint64_t cache, int expect_direct,
                     const ds4_tokens *ids, int truncate_after) {
    char *err = NULL;
    if (copy_file(orig, copy)) { CHECK(0, "cannot copy %s to %s", orig, copy); return; }
    /* the copy's pages leave the page cache, to see what the run adds */
    int cfd = open(copy, O_RDONLY);
    if (cfd >= 0) { fdatasync(cfd); posix_fadvise(cfd, 0, 0, POSIX_FADV_DONTNEED); close(cfd); }
    ds4_model *r = load(orig, 0, 0, &err);
    ds4_model *s = load(copy, 1, cache, &err);
    CHECK(r && s, "load: %s", err ? err : "?");
    if (!r || !s) { free(err); ds4_model_free(r); ds4_model_free(s); return; }
    ds4_model_info info;
    ds4_model_get_info(s, &info);
    ds4_expert_cache_stats st;
    ds4_model_expert_cache_stats(s, &st);
    CHECK(st.enabled && st.slots >= 1, "cache enabled, %llu slots", (unsigned long long)st.slots);
    if (expect_direct >= 0)
        CHECK(st.direct_io == expect_direct, "%s: direct_io %d, expected %d", copy, st.direct_io, expect_direct);
    else   /* tmpfs takes O_DIRECT since Linux 6.6 */
        printf("test_expert_cache: %s: %s reads\n", copy, st.direct_io ? "O_DIRECT" : "buffered");
    ds4_expert_cache_stats rs;
    ds4_model_expert_cache_stats(r, &rs);
    CHECK(!rs.enabled && !rs.hits && !rs.misses, "resident model: no cache");

    ds4_session *a = test_new_session(r, 256, 16), *b = test_new_session(s, 256, 16);
    char what[128];
    snprintf(what, sizeof what, "%s, %llu slot(s)", copy, (unsigned long long)st.slots);
    same_run(a, b, ids, 40, info.n_vocab, what);
    ds4_model_expert_cache_stats(s, &st);
    CHECK(st.misses > 0 && st.bytes_read >= st.misses * 4096, "misses %llu, bytes %llu",
          (unsigned long long)st.misses, (unsigned long long)st.bytes_read);
    if (st.slots == 1) CHECK(st.hits < st.misses, "one slot: mostly misses (%llu hits, %llu misses)",
                             (unsigned long long)st.hits, (unsigned long long)st.misses);

    /* the mapping holds no more than the metadata (+ fault-around) */
    long long rss = mapping_rss(copy);
    uint64_t meta = info.file_bytes - info.weight_bytes;
    CHECK(rss >= 0 && (uint64_t)rss <= meta + (256 << 10),
          "%s: the file mapping has %lld bytes resident, metadata is %llu", copy, rss, (unsigned long long)meta);

    /* nor does the page cache (O_DIRECT, or FADV_DONTNEED behind each
     * buffered read; tmpfs pages are the file itself: not checked) */
    long long pc = cached_bytes(copy);
    if (strncmp(copy, "/dev/shm/", 9))
        CHECK(pc >= 0 && (uint64_t)pc <= meta + (512 << 10), "%s: %lld bytes of the file in the page cache "
              "after the run (metadata %llu)", copy, pc, (unsigned long long)meta);

    if (truncate_after) {
        /* cut the file in the middle of the tensor data: the next tokens
         * need experts that are gone */
        CHECK(truncate(copy, (off_t)(meta + info.weight_bytes / 2)) == 0, "truncate: %s", strerror(errno));
        int32_t t = ids->v[0];
        int rc = ds4_session_eval(b, &t, 1, NULL, NULL);
        const char *msg = ds4_model_expert_cache_error(s);
        CHECK(rc == DS4_EIO, "truncated file: rc %d, expected DS4_EIO", rc);
        CHECK(msg && strstr(msg, "truncated") && strstr(msg, "cannot read routed expert ") && strstr(msg, " of layer ") &&
              strstr(msg, "(tensor blk.") && strstr(msg, "_exps.weight, bytes "),
              "truncated file: message '%s' (file, layer, expert, tensor, bytes)", msg ? msg : "(none)");
        CHECK(ds4_model_strerror(s, rc) == msg, "ds4_model_strerror gives the expert read's message");
        CHECK(!ds4_model_broken(s), "a failed expert read does not break the model (the read is tried again)");
        rc = ds4_session_eval(b, &t, 1, NULL, NULL);
        CHECK(rc == DS4_EIO, "truncated file, again: rc %d", rc);
    }
    ds4_session_free(a);
    ds4_session_free(b);
    ds4_model_free(r);
    ds4_model_free(s);
    unlink(copy);
}

int main(void) {
    char model[512], idsp[512];
    snprintf(model, sizeof model, "%s/golden/models/tiny-a-q2.gguf", test_shared());
    snprintf(idsp, sizeof idsp, "%s/golden/sequences/seq_600a.ids.txt", test_shared());
    ds4_tokens all = { 0 };
    if (test_read_ids(idsp, &all) || all.n < 60) { fprintf(stderr, "cannot read %s\n", idsp); return 1; }
    ds4_tokens ids = { 0 };
    for (int i = 0; i < 60; i++) ds4_tokens_push(&ids, all.v[i]);

    char dir[] = "/tmp/ds4-xcache-XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char copy[600];
    snprintf(copy, sizeof copy, "%s/m.gguf", dir);
    run_case(model, copy, 1, 1, &ids, 1);            /* one slot, O_DIRECT, then truncated */
    run_case(model, copy, 300 << 10, 1, &ids, 0);    /* a few slots */
    setenv("DS4_XCACHE_BUFFERED", "1", 1);           /* the buffered path */
    run_case(model, copy, 300 << 10, 0, &ids, 0);
    unsetenv("DS4_XCACHE_BUFFERED");
    struct stat sd;
    if (stat("/dev/shm", &sd) == 0 && S_ISDIR(sd.st_mode)) {
        char shm[600];
        snprintf(shm, sizeof shm, "/dev/shm/ds4-xcache-%d.gguf", (int)getpid());
        run_case(model, shm, 300 << 10, -1, &ids, 0);  /* tmpfs: buffered reads before Linux 6.6 */
    } else {
        printf("test_expert_cache: no /dev/shm, the buffered path is not run\n");
    }
    rmdir(dir);
    ds4_tokens_free(&ids);
    ds4_tokens_free(&all);
    printf("test_expert_cache: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
