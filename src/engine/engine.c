/*
 * engine.c -- the ds4_model handle: open a GGUF, bind and validate it,
 * load its tokenizer, pick the kernels and start the thread pool.
 *
 * Owns: model life cycle and the checks that need both the weights and the
 * tokenizer (vocabulary sizes agree, hash-routing tables only name existing
 * experts), done once at load so the forward pass can trust the file.
 * Must not: compute (deepseek4.c) or hold per-sequence state (session.c).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "base/hash.h"
#include "engine/transport.h"
#include "engine/expert_cache.h"
#include "engine/anon_map.h"
#include "models/graph.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void ds4_model_params_default(ds4_model_params *p) {
    memset(p, 0, sizeof *p);
    p->n_threads = 0;
}

/* Identifies "the same model in any routed-expert quantization": the
 * deepseek4.* and tokenizer metadata and every tensor's name and dims, and
 * every type except the routed experts'.  Data offsets are left out (they
 * move when the expert types change).  The disk KV cache may reuse states
 * across such files only when the user opts in. */
static void family_fingerprint(const gguf_file *f, uint8_t out[20]) {
    ds4_sha1_ctx h;
    ds4_sha1_init(&h);
    ds4_sha1_update(&h, "ds4-family-v1", 13);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (strncmp(kv->key, "deepseek4.", 10) && strncmp(kv->key, "tokenizer.", 10)) continue;
        ds4_sha1_update(&h, kv->key, strlen(kv->key) + 1);
        ds4_sha1_update(&h, &kv->type, 4);
        if (kv->type == GGUF_STRING) {
            ds4_sha1_update(&h, &kv->v.s.len, 8);
            ds4_sha1_update(&h, kv->v.s.p, kv->v.s.len);
        } else if (kv->type == GGUF_ARRAY) {
            uint64_t nb = gguf_kv_nbytes(kv);
            ds4_sha1_update(&h, &kv->v.arr.type, 4);
            ds4_sha1_update(&h, &kv->v.arr.n, 8);
            if (nb >= 12) ds4_sha1_update(&h, kv->v.arr.data, nb - 12);
        } else {
            ds4_sha1_update(&h, &kv->v.u, 8);
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        ds4_sha1_update(&h, t->name, strlen(t->name) + 1);
        ds4_sha1_update(&h, &t->n_dims, 4);
        ds4_sha1_update(&h, t->ne, sizeof t->ne);
        int expert = strstr(t->name, "_exps.") != NULL;
        if (!expert) ds4_sha1_update(&h, &t->type, 4);
    }
    ds4_sha1_final(&h, out);
}

/* Checks the forward pass relies on that the layout validation cannot see:
 * the hash table's expert ids are data, not shape. */
static int check_data(ds4_model *m, char **err) {
    const ds4_config *c = &m->w.cfg;
    for (int il = 0; il < c->n_hash && il < c->n_layer; il++) {
        const ds4_tensor *t = &m->w.layers[il].tid2eid;
        const int32_t *v = (const int32_t *)t->data;
        size_t n = (size_t)t->ne[0] * t->ne[1];
        for (size_t i = 0; i < n; i++) {
            if (v[i] < 0 || v[i] >= c->n_expert)
                return ds4_set_err(err, DS4_EFORMAT,
                                   "%s: tensor blk.%d.ffn_gate_tid2eid.weight holds expert id %d at token "
                                   "%zu, outside [0, %d)", m->path, il, v[i], i / (size_t)t->ne[0], c->n_expert);
        }
    }
    int nv = ds4_tok_n_vocab(m->tok);
    if (nv != c->n_vocab)
        return ds4_set_err(err, DS4_EFORMAT, "%s: tokenizer has %d tokens but the model's vocab_size is %d",
                           m->path, nv, c->n_vocab);
    return DS4_OK;
}

/* Which Q8_0 matrices hold no -128 code (ds4_tensor.q8_sym): for those the
 * avx2 table has a kernel with one sign operation per 32 weights instead of
 * two (q8_0_q8_0a_tile_sym, quant.h; same bits).  Every code of every
 * dense Q8_0 matrix is read once here, on the pool: these weights are read
 * for every token anyway, so this moves their first read to the load.  The
 * routed experts are not scanned (the whole file; they are not Q8_0 in the
 * published recipes) and keep the general kernel, as does any matrix with
 * a -128 code. */
typedef struct {
    const uint8_t *w;
    size_t nblocks;
    _Atomic int bad;
} q8scan_job;

static void q8scan_task(void *ctx, int ith, int nth) {
    q8scan_job *j = ctx;
    long lo, hi;
    ds4_split((long)j->nblocks, ith, nth, &lo, &hi);
    if (hi > lo && !ds4_q8_0_sym(j->w + (size_t)lo * sizeof(block_q8_0), (size_t)(hi - lo)))
        atomic_store_explicit(&j->bad, 1, memory_order_relaxed);
}

static void q8_mark(ds4_pool *pool, ds4_tensor *t) {
    if (!t->data || t->type != GGML_Q8_0 || t->ne[2] > 1) return;
    q8scan_job j = { t->data, (size_t)(t->nbytes / sizeof(block_q8_0)), 0 };
    ds4_pool_run(pool, q8scan_task, &j);
    t->q8_sym = !atomic_load(&j.bad);
}

static void q8_mark_layer(ds4_pool *pool, ds4_layer_weights *l) {
    for (size_t f = 0; f < ds4_n_layer_tensor_fields; f++)
        q8_mark(pool, (ds4_tensor *)((char *)l + ds4_layer_tensor_fields[f]));
}

static void q8_mark_all(ds4_model *m) {
    ds4_weights *w = &m->w;
    q8_mark(m->pool, &w->output);
    q8_mark(m->pool, &w->output_hc_fn);
    for (int il = 0; il < w->cfg.n_layer; il++) q8_mark_layer(m->pool, &w->layers[il]);
    if (w->has_mtp) {
        q8_mark(m->pool, &w->mtp.e_proj);
        q8_mark(m->pool, &w->mtp.h_proj);
        q8_mark(m->pool, &w->mtp.hc_head_fn);
        q8_mark(m->pool, &w->mtp.eh_proj);
        q8_mark(m->pool, &w->mtp.head);
        q8_mark_layer(m->pool, &w->mtp.block);
    }
}

/* The layer (-1: the MTP block) and first expert of the bound routed
 * expert tensor whose data starts at `data`; 0 if it is none. */
static int routed_of(const ds4_model *m, const void *data, int *il, int *e0) {
    for (int l = -1; l < m->w.cfg.n_layer; l++) {
        const ds4_layer_weights *L = l < 0 ? (m->w.has_mtp ? &m->w.mtp.block : NULL) : &m->w.layers[l];
        if (!L) continue;
        const ds4_tensor *t3[3] = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
        for (int k = 0; k < 3; k++)
            if (t3[k]->data && (const void *)t3[k]->data == data && t3[k]->ne[2] > 1) {
                *il = l;
                *e0 = t3[k]->e0;
                return 1;
            }
    }
    return 0;
}

/* The message of a fault at file offset `off` of gf (ds4_model_check):
 * the file, why (its size now against at load), the tensor holding the
 * byte and its bytes -- for a routed expert tensor, the expert's slice. */
static void fault_message(ds4_model *m, const gguf_file *gf, uint64_t off) {
    char where[512] = "outside the tensor data";
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        uint64_t a = gf->data_offset + t->offset;
        if (off < a || off - a >= t->nbytes) continue;
        uint64_t lo = a, hi = a + t->nbytes;
        int il, e0;
        char rx[96] = "";
        if (routed_of(m, t->data, &il, &e0)) {
            uint64_t slice = t->nbytes / t->ne[2], e = (off - a) / slice;
            lo = a + e * slice;
            hi = lo + slice;
            if (il >= 0) snprintf(rx, sizeof rx, "routed expert %d of layer %d, ", (int)e + e0, il);
            else snprintf(rx, sizeof rx, "routed expert %d of the MTP block, ", (int)e + e0);
        }
        snprintf(where, sizeof where, "tensor %s, %sbytes %" PRIu64 "..%" PRIu64, GGUF_ESC(t->name), rx, lo, hi);
        break;
    }
    struct stat st;
    const int gone = gf->fd >= 0 && fstat(gf->fd, &st) == 0 && (uint64_t)st.st_size <= off;
    if (gone)
        snprintf(m->fault_msg, sizeof m->fault_msg,
                 "%s: the model file was truncated while in use: byte %" PRIu64 " (%s) is gone; the file "
                 "is now %" PRIu64 " bytes, %" PRIu64 " when loaded.  The model cannot be used any more: "
                 "restart with the intact file", gf->path, off, where, (uint64_t)st.st_size, gf->size);
    else
        snprintf(m->fault_msg, sizeof m->fault_msg,
                 "%s: cannot read the model file: byte %" PRIu64 " (%s) could not be read (an I/O error "
                 "of its storage, or the file was replaced while in use).  The model cannot be used any "
                 "more: restart with the intact file", gf->path, off, where);
}

int ds4_model_check(ds4_model *m) {
    if (atomic_load_explicit(&m->broken, memory_order_acquire)) return DS4_EIO;
    uint64_t off;
    const gguf_file *gf = gguf_fault(m->gf, &off) ? m->gf
                        : gguf_fault(m->mtp_gf, &off) ? m->mtp_gf : NULL;
    if (!gf) return DS4_OK;
    fault_message(m, gf, off);
    atomic_store_explicit(&m->broken, 1, memory_order_release);
    return DS4_EIO;
}

/* --ssd-streaming: the non-routed weights move to anonymous memory, the
 * routed experts are read into the cache on demand, and the mmap'd data
 * section is dropped from this process (nothing reaches it again; the
 * expert tests check the mapping's resident size). */
static int ssd_setup(ds4_model *m, const ds4_model_params *p, char **err) {
    if (xc_copy_resident(m->gf, &m->w, &m->resident, &m->resident_bytes, err)) return DS4_EIO;
    uint64_t budget = p->ssd_cache_bytes ? p->ssd_cache_bytes : xc_default_budget(m->resident_bytes);
    int rc = xc_open(&m->xc, m->gf, &m->w, budget, p->ssd_readers > 0 ? p->ssd_readers : 4, err);
    if (rc) return rc;
    xc_set_resident(m->xc, m->resident_bytes);
    if (m->gf->owns_map) {
        long pg = sysconf(_SC_PAGESIZE);
        uint64_t a = (m->gf->data_offset + (uint64_t)pg - 1) & ~((uint64_t)pg - 1);
        if (a < m->gf->size)
            madvise((uint8_t *)m->gf->map + a, (size_t)(m->gf->size - a), MADV_DONTNEED);
    }
    /* and out of the page cache: what parsing and the copy brought in,
     * readahead past the copied tensors included (mapped metadata pages
     * stay) */
    if (m->gf->fd >= 0) posix_fadvise(m->gf->fd, 0, 0, POSIX_FADV_DONTNEED);
    return DS4_OK;
}

ds4_model *ds4_model_load(const char *path, const ds4_model_params *p, char **err) {
    ds4_model_params def;
    if (!p) { ds4_model_params_default(&def); p = &def; }
    if (err) *err = NULL;
    /* A forced kernel table that does not exist here is an error, not a
     * silent fallback: tests and measurements that name one must run it. */
    const char *kn = getenv("DS4_KERNELS");
    if (kn && *kn && !ds4_kernels_by_name(kn)) {
        char e[64];
        ds4_set_err(err, DS4_EINVAL, "DS4_KERNELS=%s: no such kernel table on this CPU "
                    "(scalar, avx2, avx512, avx512-packed, amx or best)", ds4_escape(e, sizeof e, kn, strlen(kn)));
        return NULL;
    }
    ds4_model *m = calloc(1, sizeof *m);
    if (!m) {
        ds4_set_err(err, DS4_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    /* --dist: "PREFIX-rank%d.gguf" names this rank's part (ds4-gguf split) */
    m->path = dist_path(path);
    if (!m->path) {
        free(m);
        ds4_set_err(err, DS4_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    path = m->path;
    m->gf = gguf_open(path, err);
    if (!m->gf) goto fail;
    /* from the first read of a weight on: a truncated file fails the
     * evaluation that needs the lost bytes, not the process (SIGBUS) */
    gguf_guard(m->gf);
    if (ds4_weights_bind(m->gf, &m->w, err) != DS4_OK) goto fail;
    m->graph = ds4_graph_for(m->w.cfg.arch);
    if (!m->graph) {   /* the binder knows an architecture no graph runs: a bug */
        ds4_set_err(err, DS4_EUNSUP, "%s: no graph for this architecture", path);
        goto fail;
    }
    if (!dist_on() && gguf_find(m->gf, "ds4.split.ranks")) {
        ds4_set_err(err, DS4_EFORMAT, "%s: holds one rank's part of a split model (ds4-gguf split): "
                    "run it under mpirun with --dist %s -m PREFIX-rank%%d.gguf", path,
                    gguf_find(m->gf, "ds4.split.experts") ? "experts" : "pipeline");
        goto fail;
    }
    /* the MTP block (docs/MTP.md): a sidecar named by --mtp, else the main
     * file's mtp.0.* tensors when it has them; not under --dist (a part
     * file holds layers only) */
    if (p->mtp_path && dist_on()) {
        ds4_set_err(err, DS4_EINVAL, "--mtp is not supported with --dist");
        goto fail;
    }
    if (p->mtp_path) {
        m->mtp_gf = gguf_open(p->mtp_path, err);
        gguf_guard(m->mtp_gf);
        if (!m->mtp_gf || ds4_weights_bind_mtp(m->mtp_gf, &m->w, 1, err) != DS4_OK) goto fail;
    } else if (!dist_on() && ds4_weights_bind_mtp(m->gf, &m->w, 0, err) != DS4_OK) {
        /* (glm-dsa, glm5-next: the NextN block, blk.<n_layer>.*, when the file has it) */
        goto fail;
    }
    m->tok = ds4_tokenizer_load(path, err);
    if (!m->tok) goto fail;
    if (p->ssd_streaming && ssd_setup(m, p, err) != DS4_OK) goto fail;
    if (!p->ssd_streaming) {
        gguf_map_hugepages(m->gf);   /* docs/memory.md, "Huge pages" */
        gguf_map_hugepages(m->mtp_gf);
    }
    if (check_data(m, err) != DS4_OK) goto fail;

    m->kern = ds4_kernels_best();
    m->vk = vec_kernels_best();
    int nth = p->n_threads > 0 ? p->n_threads : ds4_default_threads();
    m->pool = ds4_pool_new(nth);
    if (!m->pool) {
        ds4_set_err(err, DS4_ENOMEM, "%s: cannot start %d worker threads", path, nth);
        goto fail;
    }
    q8_mark_all(m);
    /* the scans above read the dense weights: a file cut since it was
     * opened shows here */
    if (ds4_model_check(m) != DS4_OK) {
        ds4_set_err(err, DS4_EIO, "%s", m->fault_msg);
        goto fail;
    }

    const ds4_config *c = &m->w.cfg;
    rope_init(&m->rope_dense, c->n_rot, c->rope_base, 0, 1.0f, c->rope_orig_ctx,
              c->beta_fast, c->beta_slow);
    float cbase = c->compress_rope_base > 0 ? c->compress_rope_base : c->rope_base;
    rope_init(&m->rope_comp, c->n_rot, cbase, c->rope_factor > 1.0f, c->rope_factor,
              c->rope_orig_ctx, c->beta_fast, c->beta_slow);
    ds4_gguf_fingerprint(m->gf, m->fingerprint);
    family_fingerprint(m->gf, m->family_fp);
    gguf_str name;
    if (gguf_get_str(m->gf, "general.name", &name) == 0 && name.len < 4096) {
        /* front ends print the name (banner, model id): escaped once here,
         * so control bytes in the file never reach a terminal */
        size_t cap = 4 * (size_t)name.len + 1;   /* an escape is <= 4 chars a byte */
        m->name = malloc(cap);
        if (m->name) ds4_escape(m->name, cap, name.p, (size_t)name.len);
    } else {
        const char *b = strrchr(path, '/');
        m->name = strdup(b ? b + 1 : path);
    }
    if (!m->name) {
        ds4_set_err(err, DS4_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    /* --dist: this rank's layers; rank 0 hears from every worker */
    if (dist_on() && dist_model_loaded(m, DS4_OK, err) != DS4_OK) {
        ds4_model_free(m);
        return NULL;
    }
    /* ds4-synth marks its files; say so wherever the model is named */
    gguf_str desc;
    m->random_weights = strncmp(m->name, "ds4-synth", 9) == 0 ||
        (gguf_get_str(m->gf, "general.description", &desc) == 0 &&
         memmem(desc.p, desc.len, "random-weight", 13) != NULL);
    return m;
fail:
    if (dist_on()) dist_model_loaded(m, DS4_EFORMAT, err);
    ds4_model_free(m);
    return NULL;
}

void ds4_model_free(ds4_model *m) {
    if (!m) return;
    ds4_pool_free(m->pool);
    xc_free(m->xc);
    ds4_anon_unmap(m->resident, (size_t)m->resident_bytes);   /* xc_copy_resident's */
    if (m->tok) ds4_tokenizer_free(m->tok);
    if (m->gf) {
        ds4_weights_free(&m->w);
        gguf_close(m->gf);
    }
    if (m->mtp_gf) gguf_close(m->mtp_gf);
    free(m->name);
    free(m->path);
    free(m);
}

void ds4_model_get_info(const ds4_model *m, ds4_model_info *info) {
    const ds4_config *c = &m->w.cfg;
    memset(info, 0, sizeof *info);
    info->name = m->name;
    info->n_layer = c->n_layer;
    info->n_embd = c->n_embd;
    info->n_vocab = c->n_vocab;
    info->n_head = c->n_head;
    info->head_dim = c->head_dim;
    info->n_rot = c->n_rot;
    info->n_expert = c->n_expert;
    info->n_expert_used = c->n_expert_used;
    info->n_ff_exp = c->n_ff_exp;
    info->n_hc = c->n_hc;
    info->n_swa = c->n_swa;
    info->file_bytes = m->gf->size;
    info->weight_bytes = m->gf->size - m->gf->data_offset;
    info->active_bytes_per_token = ds4_weights_active_bytes(&m->w);
    info->layer_macs_per_token = ds4_weights_layer_macs(&m->w);
    info->random_weights = m->random_weights;
    info->ctx_train = c->ctx_train;
    info->arch = c->arch == DS4_ARCH_GLM_DSA ? "glm-dsa" : c->arch == DS4_ARCH_GLM5_NEXT ? "glm5-next" : "deepseek4";
    info->format = ds4_model_format(m);
}

ds4_chat_format ds4_model_format(const ds4_model *m) {
    /* both GLM families (glm-dsa, glm5-next) speak GLM's prompt format */
    return m->w.cfg.arch != DS4_ARCH_DEEPSEEK4 ? DS4_FORMAT_GLM : DS4_FORMAT_DSV4;
}

int ds4_model_has_mtp(const ds4_model *m) { return m->w.has_mtp; }

const ds4_tokenizer *ds4_model_tokenizer(const ds4_model *m) { return m->tok; }

void ds4_model_fingerprint(const ds4_model *m, uint8_t out[20]) {
    memcpy(out, m->fingerprint, 20);
}

void ds4_model_family_fingerprint(const ds4_model *m, uint8_t out[20]) {
    memcpy(out, m->family_fp, 20);
}

int ds4_model_weight_pages(const ds4_model *m, ds4_weight_pages *p) {
    memset(p, 0, sizeof *p);   /* gguf_map_pages zeroes its two on failure */
    if (!m || !m->gf || gguf_map_pages(m->gf, &p->resident, &p->huge)) return -1;
    p->mapped = m->gf->size;
    return 0;
}

int ds4_weight_pages_small(const ds4_weight_pages *p, uint64_t min_resident) {
    return p->resident > 0 && p->resident >= min_resident && p->huge * 2 < p->resident;
}

void ds4_model_expert_cache_stats(const ds4_model *m, ds4_expert_cache_stats *st) {
    if (m->xc) xc_stats(m->xc, st);
    else memset(st, 0, sizeof *st);
}

const char *ds4_model_expert_cache_error(const ds4_model *m) {
    return m->xc ? xc_error(m->xc) : NULL;
}

const char *ds4_model_error(const ds4_model *m) {
    if (!m) return NULL;
    if (atomic_load_explicit(&m->broken, memory_order_acquire)) return m->fault_msg;
    return ds4_model_expert_cache_error(m);
}

const char *ds4_model_strerror(const ds4_model *m, int rc) {
    const char *e = rc == DS4_EIO ? ds4_model_error(m) : NULL;
    return e ? e : ds4_strerror(rc);
}

int ds4_model_broken(const ds4_model *m) {
    return m && atomic_load_explicit(&m->broken, memory_order_acquire);
}
