/*
 * ds4_gguf.c -- `ds4-gguf`: GGUF file operations for ds4.
 *
 *   ds4-gguf split --dist pipeline --ranks N -m FILE -o PREFIX [--dist-layers SPEC]
 *
 * writes PREFIX-rank0.gguf .. PREFIX-rank{N-1}.gguf: each a valid GGUF with
 * the whole metadata, only the tensors of that rank's layers (the
 * embeddings in rank 0's, the head in the last rank's) and ds4.split.*
 * keys: ranks, rank, first (the plan: first layer of each rank, then
 * n_layer) and source_fingerprint (the whole file's, which the ranks
 * compare at start).  The plan is the one `--dist pipeline` computes
 * (src/gguf/split.c, shared with src/mpi/mpi.c), so `mpirun -np N ds4
 * --dist pipeline -m PREFIX-rank%d.gguf` runs the same split as the whole
 * file would.
 *
 * Owns: the command line and the copying.  Must not: change tensor bytes
 * (each part holds byte-identical copies) or leave a partial file (the
 * GGUF writer writes a temporary file and renames it when complete).
 */
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "common/args.h"
#include "gguf/gguf.h"
#include "gguf/model.h"
#include "base/hash.h"
#include "gguf/split.h"

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-gguf split --dist pipeline|experts --ranks N -m FILE -o PREFIX\n"
"                      [--dist-layers SPEC]\n"
"       ds4-gguf --help | --version\n"
"\n"
"split: one GGUF per rank of `mpirun -np N ... --dist MODE`, named\n"
"PREFIX-rank0.gguf .. PREFIX-rank{N-1}.gguf, each holding the whole\n"
"metadata and only that rank's tensors.  Run them with -m PREFIX-rank%%d.gguf.\n"
"  pipeline: the rank's layers (the embeddings on rank 0, the head on the\n"
"            last rank); the layer split is --dist pipeline's: balanced by\n"
"            weight bytes, or SPEC (inclusive ranges per rank, 0:20,21:42)\n"
"  experts:  every layer's dense part and the rank's share of each layer's\n"
"            routed experts (experts E*r/N .. E*(r+1)/N-1, as --dist experts\n"
"            gives them; key ds4.split.experts)\n");
}

static int fail(const char *fmt, const char *a) {
    fprintf(stderr, "ds4-gguf: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 1;
}

static int needed(const char *name, int lo, int hi, int L) {
    int il = ds4_split_layer_of(name);
    if (il >= 0) return il >= lo && il < hi;
    if (!strncmp(name, "token_embd.", 11)) return lo == 0;
    return hi == L;
}

/* A routed expert tensor: [ne0][ne1][E], one expert after another. */
static int is_expert(const gguf_tensor *t) {
    size_t n = strlen(t->name);
    static const char *suf[] = { ".ffn_gate_exps.weight", ".ffn_up_exps.weight", ".ffn_down_exps.weight" };
    if (ds4_split_layer_of(t->name) < 0 || t->n_dims != 3) return 0;
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(suf[i]);
        if (n > k && !strcmp(t->name + n - k, suf[i])) return 1;
    }
    return 0;
}

/* --dist experts: every tensor, the expert tensors cut to the rank's share
 * (a contiguous byte range: the experts are the outer dimension). */
/* Opens rank r's part file PREFIX-rank<r>.gguf of a P-way split and writes
 * what every part carries: the whole file's metadata, ds4.split.ranks,
 * ds4.split.rank, the split's boundary array `key` (P + 1 values) and the
 * source fingerprint.  NULL (and the message printed) when it cannot be
 * created. */
static gguf_writer *open_part(const gguf_file *gf, const char *path, int r, int P, const char *key,
                              const uint32_t *bounds, const uint8_t fp[20]) {
    char *err = NULL;
    gguf_writer *wr = gguf_writer_open(path, &err);
    if (!wr) { fail("%s", err ? err : "cannot create the output"); free(err); return NULL; }
    for (uint64_t i = 0; i < gf->n_kv; i++) gguf_w_copy_kv(wr, &gf->kv[i]);
    /* files written before the key existed: add it (other loaders need it) */
    if (!gguf_find(gf, "deepseek4.expert_gating_func"))
        gguf_w_u32(wr, "deepseek4.expert_gating_func", DS4_EXPERT_GATING_SQRT_SOFTPLUS);
    gguf_w_u32(wr, "ds4.split.ranks", (uint32_t)P);
    gguf_w_u32(wr, "ds4.split.rank", (uint32_t)r);
    gguf_w_arr(wr, key, GGUF_U32, bounds, (uint64_t)P + 1);
    gguf_w_arr(wr, "ds4.split.source_fingerprint", GGUF_U8, fp, 20);
    return wr;
}

static int experts_split(const gguf_file *gf, int E, int P, const char *prefix) {
    if (E < P) {
        fprintf(stderr, "ds4-gguf: %d ranks but the model has only %d routed experts a layer "
                "(a rank needs one)\n", P, E);
        return 1;
    }
    uint32_t *ex = calloc((size_t)P + 1, sizeof *ex);
    size_t plen = strlen(prefix) + 32;
    char *path = malloc(plen);
    if (!ex || !path) { free(ex); free(path); return fail("%s", "out of memory"); }
    for (int r = 0; r < P; r++) {
        int lo, hi;
        ds4_split_expert_share(E, r, P, &lo, &hi);
        ex[r] = (uint32_t)lo;
        ex[r + 1] = (uint32_t)hi;
    }
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        if (is_expert(t) && (t->ne[2] != (uint64_t)E || t->nbytes % (uint64_t)E)) {
            free(ex); free(path);
            return fail("%s: an expert tensor without one slice per expert", t->name);
        }
    }
    uint8_t fp[20];
    ds4_gguf_fingerprint(gf, fp);
    char *err = NULL;
    int rc = 0;
    for (int r = 0; r < P && !rc; r++) {
        snprintf(path, plen, "%s-rank%d.gguf", prefix, r);
        gguf_writer *wr = open_part(gf, path, r, P, "ds4.split.experts", ex, fp);
        if (!wr) { rc = 1; break; }
        uint64_t n = ex[r + 1] - ex[r];
        for (uint64_t i = 0; i < gf->n_tensors; i++) {
            const gguf_tensor *t = &gf->tensors[i];
            uint64_t ne[4] = { t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
            if (is_expert(t)) ne[2] = n;
            gguf_w_tensor(wr, t->name, t->n_dims, ne, t->type);
        }
        gguf_writer_begin_data(wr);
        uint64_t bytes = 0;
        for (uint64_t i = 0; i < gf->n_tensors; i++) {
            const gguf_tensor *t = &gf->tensors[i];
            uint64_t off = 0, nb = t->nbytes;
            if (is_expert(t)) {
                uint64_t per = t->nbytes / (uint64_t)E;
                off = per * ex[r];
                nb = per * n;
            }
            gguf_writer_write(wr, t->data + off, nb);
            bytes += nb;
        }
        if (gguf_writer_close(wr, &err)) { rc = fail("%s", err ? err : "write failed"); free(err); break; }
        printf("%s: experts %u..%u of %d in every layer, %" PRIu64 " tensors, %.1f MiB\n", path, ex[r],
               ex[r + 1] - 1, E, gf->n_tensors, bytes / 1048576.0);
    }
    free(ex);
    free(path);
    return rc;
}

static int split_main(int argc, char **argv) {
    const char *mode = NULL, *in = NULL, *prefix = NULL, *spec = NULL;
    long ranks = 0;
    ds4_args ar;
    ds4_args_init(&ar, "ds4-gguf split", argc - 1, argv + 1, usage);
    while (ds4_args_next(&ar)) {
        if (ds4_args_is(&ar, NULL, "--dist")) mode = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--ranks")) ranks = ds4_args_int(&ar, 2, 4096);
        else if (ds4_args_is(&ar, "-m", "--model")) in = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, "-o", "--output")) prefix = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--dist-layers")) spec = ds4_args_value(&ar);
        else ds4_args_unknown(&ar);
    }
    if (!mode || !ranks || !in || !prefix) return fail("%s", "split needs --dist, --ranks, -m and -o (see --help)");
    int experts = !strcmp(mode, "experts");
    if (strcmp(mode, "pipeline") && !experts)
        return fail("--dist %s: unknown mode (pipeline or experts)", mode);
    if (experts && spec) return fail("%s", "--dist-layers applies to --dist pipeline only");
    char *err = NULL;
    gguf_file *gf = gguf_open(in, &err);
    if (!gf) { int r = fail("%s", err ? err : "cannot open the model"); free(err); return r; }
    if (gguf_find(gf, "ds4.split.ranks")) {
        gguf_close(gf);
        return fail("%s is already one rank's part: split the whole file", in);
    }
    ds4_weights w;
    if (ds4_weights_bind(gf, &w, &err) != DS4_OK) {
        int r = fail("%s", err ? err : "not a ds4 model");
        free(err);
        gguf_close(gf);
        return r;
    }
    int L = w.cfg.n_layer, P = (int)ranks, E = w.cfg.n_expert, arch = w.cfg.arch;
    ds4_weights_free(&w);
    if (experts && arch != DS4_ARCH_DEEPSEEK4) {
        /* the GLM graphs run --dist pipeline only (models/graph.h caps) */
        gguf_close(gf);
        return fail("--dist experts: %s is a GLM model, which runs --dist pipeline only", in);
    }
    if (experts) {
        int rc = experts_split(gf, E, P, prefix);
        gguf_close(gf);
        return rc;
    }
    int *first = calloc((size_t)P + 1, sizeof *first);
    uint32_t *first32 = calloc((size_t)P + 1, sizeof *first32);
    char msg[400];
    if (!first || !first32) { gguf_close(gf); return fail("%s", "out of memory"); }
    if (ds4_split_plan_pipeline(gf, L, P, spec, first, msg, sizeof msg) != DS4_OK) {
        free(first); free(first32); gguf_close(gf);
        return fail("%s", msg);
    }
    for (int r = 0; r <= P; r++) first32[r] = (uint32_t)first[r];
    uint8_t fp[20];
    ds4_gguf_fingerprint(gf, fp);
    int rc = 0;
    size_t plen = strlen(prefix) + 32;
    char *path = malloc(plen);
    for (int r = 0; r < P && !rc && path; r++) {
        snprintf(path, plen, "%s-rank%d.gguf", prefix, r);
        gguf_writer *wr = open_part(gf, path, r, P, "ds4.split.first", first32, fp);
        if (!wr) { rc = 1; break; }
        uint64_t bytes = 0;
        int nt = 0;
        for (uint64_t i = 0; i < gf->n_tensors; i++) {
            const gguf_tensor *t = &gf->tensors[i];
            if (!needed(t->name, first[r], first[r + 1], L)) continue;
            gguf_w_tensor(wr, t->name, t->n_dims, t->ne, t->type);
        }
        gguf_writer_begin_data(wr);
        for (uint64_t i = 0; i < gf->n_tensors; i++) {
            const gguf_tensor *t = &gf->tensors[i];
            if (!needed(t->name, first[r], first[r + 1], L)) continue;
            gguf_writer_write(wr, t->data, t->nbytes);
            bytes += t->nbytes;
            nt++;
        }
        if (gguf_writer_close(wr, &err)) { rc = fail("%s", err ? err : "write failed"); free(err); break; }
        printf("%s: layers %d..%d%s%s, %d tensors, %.1f MiB\n", path, first[r], first[r + 1] - 1,
               r == 0 ? " + embeddings" : "", r == P - 1 ? " + head" : "", nt, bytes / 1048576.0);
    }
    if (!path) rc = fail("%s", "out of memory");
    free(path);
    free(first);
    free(first32);
    gguf_close(gf);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("ds4-gguf %s\n", ds4_version()); return 0; }
    if (!strcmp(argv[1], "split")) return split_main(argc, argv);
    fprintf(stderr, "ds4-gguf: unknown command '%s' (see --help)\n", argv[1]);
    return 2;
}
