/*
 * plan.c -- the memory plan of a run (ds4_memory_plan of ds4.h): resident
 * weights, routed experts, KV state and scratch at a context size, against
 * the machine's /proc/meminfo; `ds4 --inspect --ctx N` prints it and the
 * front ends warn with it at start-up when a run does not fit.
 *
 * Owns: the plan and its report.  Must not: load tensor data (it reads the
 * GGUF's shapes only) or size anything itself: the KV and scratch figures
 * come from the session's own sizing (ds4_session_plan_weights), so the
 * plan and a real session always agree.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"
#include "gguf/model.h"
#include "engine/engine_internal.h"   /* ds4_session_plan_weights, ds4_glm_plan_token */

/* ---------------------------------------------------------------------- */
/* Memory plan                                                             */
/* ---------------------------------------------------------------------- */

/* MemTotal / MemAvailable in bytes; 0 where /proc/meminfo has no line.
 * DS4_MEMINFO names another file of the same format: the tests use it to
 * play a small machine. */
static void meminfo(uint64_t *total, uint64_t *avail) {
    *total = *avail = 0;
    const char *path = getenv("DS4_MEMINFO");
    FILE *f = fopen(path && *path ? path : "/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = (uint64_t)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (uint64_t)kb * 1024;
    }
    fclose(f);
}

int ds4_memory_plan(const char *path, int ctx_size, int n_threads, ds4_mem_plan *out, char **err) {
    if (err) *err = NULL;
    memset(out, 0, sizeof *out);
    if (ctx_size < 1 || ctx_size > (1 << 24)) {
        if (err) *err = strdup("context size must be between 1 and 16777216 tokens");
        return DS4_EINVAL;
    }
    gguf_file *gf = gguf_open(path, err);
    if (!gf) return access(path, R_OK) ? DS4_EIO : DS4_EFORMAT;
    ds4_weights w;
    char *berr = NULL;
    int rc = ds4_weights_bind(gf, &w, &berr);
    if (rc) {
        if (err) {
            ds4_buf b = {0};
            ds4_buf_printf(&b, "%s: does not match the DeepSeek V4 layout", gf->path);
            *err = b.p;
        }
        free(berr);
        gguf_close(gf);
        return rc;
    }
    if (n_threads <= 0) n_threads = ds4_default_threads();
    out->ctx_size = ctx_size;
    out->n_threads = n_threads;
    for (uint64_t i = 0; i < gf->n_tensors; i++) out->weights += gf->tensors[i].nbytes;
    for (int il = 0; il < w.cfg.n_layer; il++) {
        const ds4_layer_weights *L = &w.layers[il];
        out->routed += L->ffn_gate_exps.nbytes + L->ffn_up_exps.nbytes + L->ffn_down_exps.nbytes;
    }
    ds4_session_plan_weights(&w, ctx_size, n_threads, &out->kv, &out->scratch);
    out->kv_f32 = w.cfg.arch != DS4_ARCH_DEEPSEEK4;
    if (w.cfg.arch == DS4_ARCH_GLM_DSA) {
        ds4_glm_kv_token k;
        ds4_glm_plan_token(&w, &k);
        out->kv_token = k.bytes;
        out->kv_layers = k.layers;
        out->kv_row = k.row;
        out->kv_idx_layers = k.idx_layers;
        out->kv_idx_row = k.idx_row;
    }
    out->total = out->weights + out->kv + out->scratch;
    meminfo(&out->mem_total, &out->mem_available);
    ds4_weights_free(&w);
    gguf_close(gf);
    return DS4_OK;
}

static void gib(char *buf, size_t n, uint64_t b) {
    if (b >= 1073741824ull) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", b / 1048576.0);
}

void ds4_memory_plan_print(const ds4_mem_plan *p, FILE *out) {
    char a[32], b[32], c[32], d[32];
    fprintf(out, "memory plan at --ctx %d (%d thread%s, default prefill chunk):\n", p->ctx_size,
            p->n_threads, p->n_threads == 1 ? "" : "s");
    gib(a, sizeof a, p->weights);
    gib(b, sizeof b, p->weights - p->routed);
    gib(c, sizeof c, p->routed);
    fprintf(out, "  weights          %s (mmap'd): %s non-routed + %s routed experts\n", a, b, c);
    gib(a, sizeof a, p->kv);
    fprintf(out, "  KV state         %s (%s rows at the full context)\n", a, p->kv_f32 ? "f32" : "f16");
    if (p->kv_token)
        fprintf(out, "  KV per token     %" PRIu64 " bytes: %d layers x %d f32 (latent + rope) + %d indexer "
                "layers x %d f32 keys\n", p->kv_token, p->kv_layers, p->kv_row, p->kv_idx_layers, p->kv_idx_row);
    gib(a, sizeof a, p->scratch);
    fprintf(out, "  scratch          %s\n", a);
    gib(a, sizeof a, p->total);
    fprintf(out, "  total            %s\n", a);
    if (!p->mem_total) {
        fprintf(out, "  RAM              unknown (no /proc/meminfo)\n");
        return;
    }
    gib(a, sizeof a, p->mem_total);
    gib(b, sizeof b, p->mem_available);
    fprintf(out, "  RAM              %s total, %s available\n", a, b);
    if (p->total <= p->mem_available) {
        fprintf(out, "  fits             yes\n");
        return;
    }
    /* what stays when the routed experts are not resident: the rest must
     * fit, the experts would be read from the file as they are used */
    uint64_t rest = p->total - p->routed;
    gib(a, sizeof a, p->total - p->mem_available);
    gib(d, sizeof d, rest);
    fprintf(out, "  fits             NO: %s short; the run would page the weights from disk\n", a);
    if (rest < p->mem_available) {
        gib(c, sizeof c, p->mem_available - rest);
        fprintf(out, "                   without the routed experts it needs %s, leaving %s\n"
                "                   of available RAM for caching routed experts\n", d, c);
        /* half of what is left: the default of --ssd-streaming */
        fprintf(out, "                   run with --ssd-streaming (expert cache: half of that,\n"
                "                   or --ssd-streaming-cache-experts %lluMB)\n",
                (unsigned long long)((p->mem_available - rest) / 2 >> 20));
    } else {
        fprintf(out, "                   even without the routed experts it needs %s: use a\n"
                "                   smaller --ctx or a machine with more RAM\n", d);
    }
}
