/*
 * llama_logits.c -- drives llama.cpp (its C API, llama.h) on a DeepSeek V4
 * GGUF: logits of every position for the cross-check against ds4
 * (tests/t_llamacpp.sh), and prefill/decode timings for the side-by-side
 * benchmark (bench/llamacpp.sh).
 *
 * Owns: nothing of the engine.  Built only by bench/llamacpp.sh, in a
 * scratch folder, against the headers of the llama.cpp release shipped in
 * the npm package node-llama-cpp and its prebuilt CPU libraries (or a
 * source build of the same release); never part of `make all` and never
 * linked into ds4.
 *
 *   llama_logits logits -m MODEL --tokens-file IDS.txt -o OUT.f32
 *                [--batch N] [-t THREADS] [--gating-override]
 *       every position's logits, float32 [n_tokens][n_vocab] (ds4's
 *       --dump-logits layout), in llama.cpp's exact mode: weights as the
 *       file has them, flash attention off, F32 KV cache, no weight
 *       repacking.  --batch N evaluates N tokens per llama_decode (default:
 *       all at once).
 *   llama_logits mtp -m MODEL --tokens-file IDS.txt -o OUT.f32 [-t THREADS]
 *       the NextN (MTP) block's draft logits at every position (glm-dsa,
 *       tests/t_glm_mtp.sh), float32 [n_tokens][n_vocab]: the model's
 *       normed hidden states of every position (a context with the NextN
 *       embeddings on), then llama.cpp's MTP context over the same tokens
 *       with the state of position p - 1 beside token p (zero at 0), as its
 *       speculative decoding feeds it; exact mode as above.
 *   llama_logits bench -m MODEL --prefill N --decode M [-t THREADS]
 *                [--reps R] [--repack]
 *       R rounds of: a fresh context with llama.cpp's default settings
 *       (as llama-bench / llama-cli run it), a prefill of N tokens in
 *       n_batch pieces, then M decoded tokens one at a time (greedy);
 *       prints one line per round: "prefill N tok/s X decode M tok/s Y".
 *
 * --gating-override supplies deepseek4.expert_gating_func = 4 (sqrt
 * softplus) for files written before ds4 stored the key.  The CPU backend
 * libraries are loaded from GGML_BACKEND_DIR, by default the folder of the
 * libllama this program was linked against.
 *
 * Why no repack by default: in the 2026-09 release the CPU "extra buffer"
 * (AMX / repacked weights) aborts on DeepSeek V4 with more than one token
 * per batch (GGML_ASSERT(*cur_backend_id != -1)); --repack turns it on.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"
#include "ggml-backend.h"

/* The release's NextN staging API (src/llama-ext.h) has C++ linkage, and
 * its header is not in the package: the two functions the mtp mode calls,
 * by their exported (mangled) names. */
void ext_set_embeddings_nextn(struct llama_context *c, bool value, bool masked)
    __asm__("_Z26llama_set_embeddings_nextnP13llama_contextbb");
float *ext_get_embeddings_nextn(struct llama_context *c) __asm__("_Z26llama_get_embeddings_nextnP13llama_context");

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "llama_logits: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(1);
}

/* Token ids as ds4's --tokens-file reads them: integers separated by white
 * space or commas. */
static llama_token *read_ids(const char *path, int *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open %s", path);
    int cap = 1024, n = 0;
    llama_token *v = malloc((size_t)cap * sizeof *v);
    long x;
    for (;;) {
        int c = fgetc(f);
        if (c == EOF) break;
        if (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        ungetc(c, f);
        if (fscanf(f, "%ld", &x) != 1) die("%s: not a list of token ids", path);
        if (n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = (llama_token)x;
    }
    fclose(f);
    if (!n) die("%s: no token ids", path);
    *n_out = n;
    return v;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_WARN || getenv("LLAMA_LOGITS_VERBOSE")) fputs(text, stderr);
}

typedef struct {
    const char *mode, *model, *ids, *out;
    int batch, threads, prefill, decode, reps, repack, gating, mtp;
} opts;

static struct llama_model *load_model(const opts *o) {
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = o->repack != 0;
    mp.load_mtp = o->mtp != 0;
    static struct llama_model_kv_override kv[2];
    if (o->gating) {
        memset(kv, 0, sizeof kv);
        kv[0].tag = LLAMA_KV_OVERRIDE_TYPE_INT;
        snprintf(kv[0].key, sizeof kv[0].key, "deepseek4.expert_gating_func");
        kv[0].val_i64 = 4;
        mp.kv_overrides = kv;
    }
    struct llama_model *m = llama_model_load_from_file(o->model, mp);
    if (!m) die("llama.cpp could not load %s", o->model);
    return m;
}

/* exact: the cross-check's mode (F32 KV, no flash attention, one ubatch
 * per llama_decode); otherwise llama.cpp's defaults as its own tools use
 * them (F16 KV, flash attention when the backend takes it, n_batch 2048,
 * n_ubatch 512), which is what the benchmark measures. */
static struct llama_context *new_ctx_type(struct llama_model *m, const opts *o, int n_ctx, int n_batch,
                                          int exact, enum llama_context_type type) {
    struct llama_context_params cp = llama_context_default_params();
    cp.ctx_type = type;
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = o->threads;
    cp.n_threads_batch = o->threads;
    cp.no_perf = 1;
    if (exact) {
        cp.n_batch = (uint32_t)n_batch;
        cp.n_ubatch = (uint32_t)n_batch;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        cp.type_k = GGML_TYPE_F32;
        cp.type_v = GGML_TYPE_F32;
    }
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) die("llama.cpp could not create a context for %s", o->model);
    return c;
}

static struct llama_context *new_ctx(struct llama_model *m, const opts *o, int n_ctx, int n_batch, int exact) {
    return new_ctx_type(m, o, n_ctx, n_batch, exact, LLAMA_CONTEXT_TYPE_DEFAULT);
}

/* mtp mode (see the top): one decode of every token in each context */
static int run_mtp(const opts *o) {
    int n;
    llama_token *ids = read_ids(o->ids, &n);
    struct llama_model *m = load_model(o);
    if (llama_model_n_layer_nextn(m) < 1) die("%s has no NextN layer", o->model);
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(m)), ne = llama_model_n_embd(m);
    struct llama_context *tgt = new_ctx(m, o, n + 16, n, 1);
    ext_set_embeddings_nextn(tgt, 1, 0);
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(tgt, b) != 0) die("llama_decode failed on the main model of %s", o->model);
    const float *h = ext_get_embeddings_nextn(tgt);
    if (!h) die("no NextN embeddings from %s", o->model);
    struct llama_context *dft = new_ctx_type(m, o, n + 16, n, 1, LLAMA_CONTEXT_TYPE_MTP);
    ext_set_embeddings_nextn(dft, 1, 1);
    /* llama_batch_init makes tokens or embeddings; the MTP batch has both */
    struct llama_batch d = llama_batch_init(n, ne, 1);
    d.token = malloc((size_t)n * sizeof *d.token);
    if (!d.token) die("out of memory%s", "");
    for (int i = 0; i < n; i++) {
        d.token[i] = ids[i];
        d.pos[i] = i;
        d.n_seq_id[i] = 1;
        d.seq_id[i][0] = 0;
        d.logits[i] = 1;
        if (i) memcpy(d.embd + (size_t)i * ne, h + (size_t)(i - 1) * ne, (size_t)ne * sizeof(float));
        else memset(d.embd, 0, (size_t)ne * sizeof(float));
    }
    d.n_tokens = n;
    if (llama_decode(dft, d) != 0) die("llama_decode failed in the MTP context of %s", o->model);
    FILE *f = fopen(o->out, "wb");
    if (!f) die("cannot create %s", o->out);
    for (int i = 0; i < n; i++) {
        const float *lg = llama_get_logits_ith(dft, i);
        if (!lg || fwrite(lg, sizeof(float), (size_t)nv, f) != (size_t)nv) die("cannot write %s", o->out);
    }
    if (fclose(f) != 0) die("cannot write %s", o->out);
    free(d.token);
    d.token = NULL;
    llama_batch_free(d);
    llama_batch_free(b);
    llama_free(dft);
    llama_free(tgt);
    llama_model_free(m);
    free(ids);
    fprintf(stderr, "llama_logits: %d positions x %d MTP logits -> %s\n", n, nv, o->out);
    return 0;
}

static int run_logits(const opts *o) {
    int n;
    llama_token *ids = read_ids(o->ids, &n);
    struct llama_model *m = load_model(o);
    int nb = o->batch > 0 && o->batch < n ? o->batch : n;
    struct llama_context *c = new_ctx(m, o, n + 16, nb, 1);
    const struct llama_vocab *voc = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(voc);
    FILE *f = fopen(o->out, "wb");
    if (!f) die("cannot create %s", o->out);
    struct llama_batch b = llama_batch_init(nb, 0, 1);
    for (int p0 = 0; p0 < n; p0 += nb) {
        int k = n - p0 < nb ? n - p0 : nb;
        b.n_tokens = k;
        for (int i = 0; i < k; i++) {
            b.token[i] = ids[p0 + i];
            b.pos[i] = p0 + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
        }
        int rc = llama_decode(c, b);
        if (rc != 0) {
            char msg[64];
            snprintf(msg, sizeof msg, "%d", rc);
            die("llama_decode failed (%s)", msg);
        }
        for (int i = 0; i < k; i++) {
            const float *lg = llama_get_logits_ith(c, i);
            if (!lg || fwrite(lg, sizeof(float), (size_t)nv, f) != (size_t)nv) die("cannot write %s", o->out);
        }
    }
    if (fclose(f) != 0) die("cannot write %s", o->out);
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    free(ids);
    fprintf(stderr, "llama_logits: %d positions x %d logits -> %s\n", n, nv, o->out);
    return 0;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static int run_bench(const opts *o) {
    struct llama_model *m = load_model(o);
    const struct llama_vocab *voc = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(voc);
    int n = o->prefill;
    /* a deterministic prompt of ordinary ids (the content does not change
     * the work of a dense prefill; the routing spreads over the experts) */
    llama_token *ids = malloc((size_t)n * sizeof *ids);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        ids[i] = (llama_token)(1000 + s % (uint64_t)(nv > 2000 ? nv - 1000 : nv / 2));
    }
    for (int r = 0; r < o->reps; r++) {
        struct llama_context *c = new_ctx(m, o, n + o->decode + 16, 0, 0);
        const int nb = (int)llama_n_batch(c);   /* tokens per llama_decode */
        struct llama_batch b = llama_batch_init(nb, 0, 1);
        double t0 = now_s();
        for (int p0 = 0; p0 < n; p0 += nb) {
            int k = n - p0 < nb ? n - p0 : nb;
            b.n_tokens = k;
            for (int i = 0; i < k; i++) {
                b.token[i] = ids[p0 + i];
                b.pos[i] = p0 + i;
                b.n_seq_id[i] = 1;
                b.seq_id[i][0] = 0;
                b.logits[i] = p0 + i == n - 1;
            }
            if (llama_decode(c, b) != 0) die("llama_decode failed in the prefill of %s", o->model);
        }
        double t1 = now_s();
        llama_token tok = (llama_token)argmax(llama_get_logits_ith(c, (n - 1) % nb), nv);
        double t2 = now_s();
        for (int i = 0; i < o->decode; i++) {
            b.n_tokens = 1;
            b.token[0] = tok;
            b.pos[0] = n + i;
            b.n_seq_id[0] = 1;
            b.seq_id[0][0] = 0;
            b.logits[0] = 1;
            if (llama_decode(c, b) != 0) die("llama_decode failed while decoding %s", o->model);
            tok = (llama_token)argmax(llama_get_logits_ith(c, 0), nv);
        }
        double t3 = now_s();
        printf("prefill %d tok/s %.2f decode %d tok/s %.2f\n", n, n / (t1 - t0), o->decode,
               o->decode ? o->decode / (t3 - t2) : 0.0);
        fflush(stdout);
        llama_batch_free(b);
        llama_free(c);
    }
    free(ids);
    llama_model_free(m);
    return 0;
}

static void usage(void) {
    fputs("usage: llama_logits logits -m MODEL --tokens-file IDS -o OUT.f32 [--batch N] [-t THREADS] [--gating-override]\n"
          "       llama_logits mtp -m MODEL --tokens-file IDS -o OUT.f32 [-t THREADS]\n"
          "       llama_logits bench -m MODEL --prefill N --decode M [--reps R] [-t THREADS] [--repack] [--gating-override]\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv) {
    opts o = { 0 };
    o.threads = 2;
    o.reps = 1;
    if (argc < 2) usage();
    o.mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") && v) { o.model = v; i++; }
        else if (!strcmp(a, "--tokens-file") && v) { o.ids = v; i++; }
        else if (!strcmp(a, "-o") && v) { o.out = v; i++; }
        else if (!strcmp(a, "--batch") && v) { o.batch = atoi(v); i++; }
        else if (!strcmp(a, "-t") && v) { o.threads = atoi(v); i++; }
        else if (!strcmp(a, "--prefill") && v) { o.prefill = atoi(v); i++; }
        else if (!strcmp(a, "--decode") && v) { o.decode = atoi(v); i++; }
        else if (!strcmp(a, "--reps") && v) { o.reps = atoi(v); i++; }
        else if (!strcmp(a, "--repack")) o.repack = 1;
        else if (!strcmp(a, "--gating-override")) o.gating = 1;
        else usage();
    }
    if (!o.model || o.threads < 1) usage();
    o.mtp = !strcmp(o.mode, "mtp");
    llama_log_set(quiet_log, NULL);
    /* the CPU backend is a set of per-ISA libraries beside libggml; the
     * best one for this CPU is loaded from GGML_BACKEND_DIR (the folder of
     * the prebuilt libraries) */
    const char *bdir = getenv("GGML_BACKEND_DIR");
    char libdir[4096];
    Dl_info di;
    if ((!bdir || !*bdir) && dladdr((void *)llama_backend_init, &di) && di.dli_fname &&
        strlen(di.dli_fname) < sizeof libdir) {
        /* default: beside libllama, where the prebuilt package keeps them */
        strcpy(libdir, di.dli_fname);
        char *sl = strrchr(libdir, '/');
        if (sl) { *sl = 0; bdir = libdir; }
    }
    if (bdir && *bdir) ggml_backend_load_all_from_path(bdir);
    else ggml_backend_load_all();
    if (ggml_backend_dev_count() == 0)
        die("no llama.cpp CPU backend found%s: set GGML_BACKEND_DIR to the folder of libggml-cpu-*.so "
            "(bench/llamacpp/setup.sh prints it)", bdir && *bdir ? " in GGML_BACKEND_DIR" : "");
    llama_backend_init();
    int rc;
    if (!strcmp(o.mode, "logits")) {
        if (!o.ids || !o.out) usage();
        rc = run_logits(&o);
    } else if (!strcmp(o.mode, "mtp")) {
        if (!o.ids || !o.out) usage();
        rc = run_mtp(&o);
    } else if (!strcmp(o.mode, "bench")) {
        if (o.prefill < 1 || o.decode < 0 || o.reps < 1) usage();
        rc = run_bench(&o);
    } else {
        usage();
        rc = 2;
    }
    llama_backend_free();
    return rc;
}
