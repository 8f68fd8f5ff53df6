/*
 * expert_cache.c -- SSD streaming of routed experts (see expert_cache.h).
 *
 * Owns: the slot pool, the (layer, expert) -> slot map, eviction, the
 * reader threads, the model file's second and third descriptors (O_DIRECT
 * and buffered), the counters, and the anonymous copy of the non-routed
 * weights.  Must not: compute, or read routed expert bytes through the
 * mmap (the point is that the page cache and the process never hold more
 * of them than the slots).
 *
 * Why this shape:
 *  - a slot holds the three slices (gate, up, down) of one expert of one
 *    layer: the unit the router picks.  Each slice is read as the
 *    4096-aligned span around it (O_DIRECT needs aligned offsets, lengths
 *    and buffers), so inside the slot it keeps its offset modulo 4096 from
 *    the file: the kernels see the same alignment as through the mmap.
 *  - O_DIRECT keeps the page cache out; where the file system refuses it
 *    (tmpfs) reads are buffered and the range is dropped with
 *    POSIX_FADV_DONTNEED right after.
 *  - one mutex guards everything; reader threads only copy bytes outside
 *    it.  A slot being read is pinned (by the layer that wants it) or at
 *    least LOADING, and neither is ever evicted.
 */
#include "engine/expert_cache.h"
#include "engine/anon_map.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define XC_ALIGN 4096ull

enum { S_EMPTY = 0, S_LOADING, S_READY, S_ERROR };
enum { I_PENDING = 0, I_ACQ, I_OUT, I_DONE };

typedef struct {
    int key;                  /* il * E + e; -1 = empty */
    int state;
    int pins;
    uint64_t stamp;           /* last use */
    uint32_t freq;            /* uses, halved every aging period */
    uint8_t *buf;
    const uint8_t *w[3];      /* gate, up, down inside buf once READY */
} slot_t;

typedef struct {
    uint64_t off[3];          /* file offset of expert 0's slice */
    uint64_t len[3];          /* bytes of one expert's slice */
} layer_geo;

struct ds4_xcache {
    char *path;
    int fd_direct, fd_buf;
    int direct;               /* O_DIRECT reads still accepted */
    uint64_t file_size;
    int n_layer, E;
    layer_geo *geo;
    size_t part_base[3], slot_bytes;
    int n_slots;
    slot_t *slots;
    int *map;                 /* [n_layer * E] slot or -1 */
    uint8_t *pool;
    size_t pool_bytes;
    int policy;
    uint64_t clock, aging_next, aging_period;

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int *queue, qhead, qn;
    pthread_t *th;
    int nth, stop;
    int inflight;
    double busy_t0, busy;

    uint64_t hits, misses, bytes_read;
    double wait_s;
    uint64_t routed_bytes, resident_bytes;
    uint64_t n_slices;        /* experts x the layers that have routed experts */

    /* the current layer */
    int il, n;
    int *exp, *slot_of;
    unsigned char *ist;

    char errmsg[512];         /* the readers' last failure (mutex) */
    char lasterr[512];        /* what the last failed xc_next reported
                                 (written and read by the evaluating thread) */
    FILE *trace;
};

static uint64_t align_down(uint64_t v) { return v & ~(XC_ALIGN - 1); }
static uint64_t align_up(uint64_t v) { return (v + XC_ALIGN - 1) & ~(XC_ALIGN - 1); }

/* ---------------------------------------------------------------------- */
/* Reading                                                                 */
/* ---------------------------------------------------------------------- */

/* Read [a0, a0 + span) into dst; returns the bytes read (short at EOF) or
 * -errno. */
static int64_t read_span(ds4_xcache *c, uint8_t *dst, uint64_t a0, uint64_t span, int *used_direct) {
    int direct = __atomic_load_n(&c->direct, __ATOMIC_RELAXED);
    int fd = direct ? c->fd_direct : c->fd_buf;
    *used_direct = direct;
    uint64_t got = 0;
    while (got < span) {
        ssize_t r = pread(fd, dst + got, span - got, (off_t)(a0 + got));
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EINVAL && *used_direct) {
                /* the file system took O_DIRECT at open but refuses the
                 * read: buffered from now on */
                __atomic_store_n(&c->direct, 0, __ATOMIC_RELAXED);
                fd = c->fd_buf;
                *used_direct = 0;
                continue;
            }
            return -errno;
        }
        if (r == 0) break;
        got += (uint64_t)r;
    }
    if (!*used_direct) posix_fadvise(c->fd_buf, (off_t)a0, (off_t)span, POSIX_FADV_DONTNEED);
    return (int64_t)got;
}

/* Fill slot s with the slices of its key.  0 or DS4_EIO with msg. */
static int load_slot(ds4_xcache *c, int s, uint64_t *nread, char *msg, size_t msg_n) {
    slot_t *sl = &c->slots[s];
    int il = sl->key / c->E, e = sl->key % c->E;
    static const char *part[3] = { "gate", "up", "down" };
    for (int p = 0; p < 3; p++) {
        uint64_t off = c->geo[il].off[p] + (uint64_t)e * c->geo[il].len[p], len = c->geo[il].len[p];
        uint64_t a0 = align_down(off), span = align_up(off + len) - a0;
        uint8_t *dst = sl->buf + c->part_base[p];
        int direct;
        int64_t got = read_span(c, dst, a0, span, &direct);
        /* the message names all a user needs to find the damage: file,
         * layer, expert, tensor and the slice's bytes */
        if (got < 0) {
            snprintf(msg, msg_n, "%s: cannot read routed expert %d of layer %d (tensor blk.%d.ffn_%s_exps.weight, "
                     "bytes %llu..%llu): %s", c->path, e, il, il, part[p], (unsigned long long)off,
                     (unsigned long long)(off + len), strerror((int)-got));
            return DS4_EIO;
        }
        *nread += (uint64_t)got;
        if ((uint64_t)got < off + len - a0) {
            snprintf(msg, msg_n, "%s: cannot read routed expert %d of layer %d (tensor blk.%d.ffn_%s_exps.weight, "
                     "bytes %llu..%llu): the file ends at byte %llu: it was truncated or replaced while in use",
                     c->path, e, il, il, part[p], (unsigned long long)off, (unsigned long long)(off + len),
                     (unsigned long long)(a0 + (uint64_t)got));
            return DS4_EIO;
        }
        sl->w[p] = dst + (off - a0);
    }
    return DS4_OK;
}

static void *reader_main(void *arg) {
    ds4_xcache *c = arg;
    char msg[512];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->qn && !c->stop) pthread_cond_wait(&c->cv_work, &c->mu);
        if (c->stop) break;
        int s = c->queue[c->qhead];
        c->qhead = (c->qhead + 1) % c->n_slots;
        c->qn--;
        if (c->inflight++ == 0) c->busy_t0 = ds4_now();
        pthread_mutex_unlock(&c->mu);
        uint64_t nread = 0;
        int rc = load_slot(c, s, &nread, msg, sizeof msg);
        pthread_mutex_lock(&c->mu);
        if (--c->inflight == 0) c->busy += ds4_now() - c->busy_t0;
        c->bytes_read += nread;
        c->slots[s].state = rc ? S_ERROR : S_READY;
        if (rc) snprintf(c->errmsg, sizeof c->errmsg, "%s", msg);
        pthread_cond_broadcast(&c->cv_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---------------------------------------------------------------------- */
/* Slots (mutex held)                                                      */
/* ---------------------------------------------------------------------- */

static void touch(ds4_xcache *c, slot_t *sl) {
    sl->stamp = ++c->clock;
    if (sl->freq < UINT32_MAX) sl->freq++;
    if (c->policy == XC_LFU_AGING && c->clock >= c->aging_next) {
        for (int i = 0; i < c->n_slots; i++) c->slots[i].freq >>= 1;
        c->aging_next = c->clock + c->aging_period;
    }
}

/* The slot to reuse: an empty (or failed) one first, else the unpinned,
 * not-loading one the policy ranks lowest; -1 if every slot is busy. */
static int victim(ds4_xcache *c) {
    int best = -1;
    for (int i = 0; i < c->n_slots; i++) {
        slot_t *sl = &c->slots[i];
        if (sl->pins || sl->state == S_LOADING) continue;
        if (sl->state == S_EMPTY || sl->state == S_ERROR) return i;
        if (best < 0) { best = i; continue; }
        const slot_t *b = &c->slots[best];
        int better = c->policy == XC_LFU_AGING
            ? (sl->freq < b->freq || (sl->freq == b->freq && sl->stamp < b->stamp))
            : sl->stamp < b->stamp;
        if (better) best = i;
    }
    return best;
}

static void submit(ds4_xcache *c, int s) {
    c->slots[s].state = S_LOADING;
    c->queue[(c->qhead + c->qn) % c->n_slots] = s;
    c->qn++;
    pthread_cond_signal(&c->cv_work);
}

/* Start reads for the layer's pending items while slots are free. */
static void fill(ds4_xcache *c) {
    for (int i = 0; i < c->n; i++) {
        if (c->ist[i] != I_PENDING) continue;
        int v = victim(c);
        if (v < 0) return;
        slot_t *sl = &c->slots[v];
        if (sl->key >= 0) c->map[sl->key] = -1;
        int key = c->il * c->E + c->exp[i];
        sl->key = key;
        sl->freq = 0;
        sl->pins = 1;
        touch(c, sl);
        c->map[key] = v;
        c->slot_of[i] = v;
        c->ist[i] = I_ACQ;
        c->misses++;
        submit(c, v);
    }
}

/* ---------------------------------------------------------------------- */
/* The layer interface                                                     */
/* ---------------------------------------------------------------------- */

void xc_begin(ds4_xcache *c, int il, const int *experts, int n) {
    pthread_mutex_lock(&c->mu);
    if (c->trace) {   /* DS4_XCACHE_TRACE: the request stream, for policy studies */
        fprintf(c->trace, "%d", il);
        for (int i = 0; i < n; i++) fprintf(c->trace, " %d", experts[i]);
        fputc('\n', c->trace);
    }
    c->il = il;
    c->n = n;
    for (int i = 0; i < n; i++) {
        c->exp[i] = experts[i];
        c->ist[i] = I_PENDING;
        c->slot_of[i] = -1;
        int s = c->map[il * c->E + experts[i]];
        if (s < 0) continue;
        slot_t *sl = &c->slots[s];
        if (sl->state == S_ERROR && sl->pins == 0) {
            /* an earlier read failed: try again */
            sl->pins = 1;
            touch(c, sl);
            c->misses++;
            submit(c, s);
        } else {
            sl->pins++;
            touch(c, sl);
            c->hits++;
        }
        c->slot_of[i] = s;
        c->ist[i] = I_ACQ;
    }
    fill(c);
    pthread_mutex_unlock(&c->mu);
}

int xc_next(ds4_xcache *c, int *idx, int max) {
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    for (;;) {
        fill(c);
        int cnt = 0, left = 0, acq = 0;
        for (int i = 0; i < c->n; i++) {
            if (c->ist[i] == I_PENDING) { left++; continue; }
            if (c->ist[i] != I_ACQ) continue;
            left++;
            acq++;
            int st = c->slots[c->slot_of[i]].state;
            if (st == S_ERROR) { rc = DS4_EIO; goto out; }
            if (st == S_READY && cnt < max) {
                c->ist[i] = I_OUT;
                idx[cnt++] = i;
            }
        }
        if (cnt) { rc = cnt; goto out; }
        if (!left) { rc = 0; goto out; }
        if (!acq && !c->inflight && !c->qn) {
            /* nothing of ours is loading and no slot can be freed: the
             * caller holds every slot (a bug, not a reason to hang) */
            snprintf(c->errmsg, sizeof c->errmsg, "expert cache: all %d slots are pinned", c->n_slots);
            rc = DS4_EINVAL;
            goto out;
        }
        double t0 = ds4_now();
        pthread_cond_wait(&c->cv_done, &c->mu);
        c->wait_s += ds4_now() - t0;
    }
out:
    if (rc < 0) snprintf(c->lasterr, sizeof c->lasterr, "%s", c->errmsg);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void xc_weights(const ds4_xcache *c, int i, const uint8_t *w3[3]) {
    const slot_t *sl = &c->slots[c->slot_of[i]];
    for (int p = 0; p < 3; p++) w3[p] = sl->w[p];
}

void xc_release(ds4_xcache *c, const int *idx, int n) {
    pthread_mutex_lock(&c->mu);
    for (int j = 0; j < n; j++) {
        int i = idx[j];
        if (c->ist[i] != I_OUT) continue;
        c->slots[c->slot_of[i]].pins--;
        c->ist[i] = I_DONE;
    }
    fill(c);
    pthread_mutex_unlock(&c->mu);
}

void xc_end(ds4_xcache *c) {
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++) {
        if (c->ist[i] == I_ACQ || c->ist[i] == I_OUT) c->slots[c->slot_of[i]].pins--;
        c->ist[i] = I_DONE;
    }
    c->n = 0;
    /* failed slots leave the map: the next use reads them again */
    for (int s = 0; s < c->n_slots; s++) {
        slot_t *sl = &c->slots[s];
        if (sl->state == S_ERROR && !sl->pins) {
            if (sl->key >= 0) c->map[sl->key] = -1;
            sl->key = -1;
            sl->state = S_EMPTY;
        }
    }
    pthread_mutex_unlock(&c->mu);
}

const char *xc_error(const ds4_xcache *c) { return c->lasterr[0] ? c->lasterr : NULL; }

void xc_stats(ds4_xcache *c, ds4_expert_cache_stats *st) {
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&c->mu);
    st->enabled = 1;
    st->direct_io = c->direct;
    st->readers = c->nth;
    st->slots = (uint64_t)c->n_slots;
    st->slot_bytes = c->slot_bytes;
    st->cache_bytes = c->pool_bytes;
    st->routed_bytes = c->routed_bytes;
    st->n_slices = c->n_slices;
    st->resident_bytes = c->resident_bytes;
    st->hits = c->hits;
    st->misses = c->misses;
    st->bytes_read = c->bytes_read;
    st->read_seconds = c->busy + (c->inflight ? ds4_now() - c->busy_t0 : 0);
    st->wait_seconds = c->wait_s;
    pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------------- */
/* Set-up                                                                  */
/* ---------------------------------------------------------------------- */

uint64_t xc_default_budget(uint64_t resident_bytes) {
    const char *path = getenv("DS4_MEMINFO");
    FILE *f = fopen(path && *path ? path : "/proc/meminfo", "r");
    uint64_t avail = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            unsigned long long kb;
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) avail = (uint64_t)kb * 1024;
        }
        fclose(f);
    }
    /* half of what the resident weights leave: the KV state, the scratch,
     * the rest of the system and a margin share the other half */
    return avail > resident_bytes ? (avail - resident_bytes) / 2 : 0;
}

static int is_routed(const char *name) { return strstr(name, "_exps.") != NULL; }


typedef struct { const uint8_t *from; uint8_t *to; uint64_t n; } remap_t;

static void remap(ds4_tensor *t, const remap_t *rm, size_t n) {
    if (!t->data) return;
    size_t lo = 0, hi = n;
    while (lo < hi) {   /* last entry with from <= data */
        size_t mid = (lo + hi) / 2;
        if (rm[mid].from <= t->data) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return;
    const remap_t *r = &rm[lo - 1];
    if (t->data + t->nbytes <= r->from + r->n) t->data = r->to + (t->data - r->from);
}

/* every non-routed tensor of a layer, the GLM graphs' included */
static void remap_layer(ds4_layer_weights *l, const remap_t *rm, size_t k) {
    for (size_t f = 0; f < ds4_n_layer_tensor_fields; f++)
        remap((ds4_tensor *)((char *)l + ds4_layer_tensor_fields[f]), rm, k);
    for (size_t f = 0; f < ds4_n_glm_layer_tensor_fields; f++)
        remap((ds4_tensor *)((char *)l + ds4_glm_layer_tensor_fields[f]), rm, k);
}

static int cmp_remap(const void *a, const void *b) {
    const remap_t *x = a, *y = b;
    return x->from < y->from ? -1 : x->from > y->from;
}

int xc_copy_resident(gguf_file *gf, ds4_weights *w, void **buf, uint64_t *bytes, char **err) {
    *buf = NULL;
    *bytes = 0;
    uint64_t total = 0;
    size_t nt = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        if (is_routed(gf->tensors[i].name)) continue;
        total += (gf->tensors[i].nbytes + 63) & ~63ull;
        nt++;
    }
    if (!total) return DS4_OK;
    /* on 2 MB pages, as the model mapping (gguf_map_hugepages): these
     * weights are swept every token; the reads below fault them in */
    uint8_t *b = ds4_anon_map((size_t)total, 0);
    remap_t *rm = calloc(nt ? nt : 1, sizeof *rm);
    if (!b || !rm) {
        ds4_anon_unmap(b, (size_t)total);
        free(rm);
        return ds4_set_err(err, DS4_ENOMEM, "%s: --ssd-streaming: cannot allocate %llu bytes for the "
                           "non-routed weights", gf->path, (unsigned long long)total);
    }
    uint64_t at = 0;
    size_t k = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        if (is_routed(t->name)) continue;
        uint64_t off = gf->data_offset + t->offset, got = 0;
        while (got < t->nbytes) {
            ssize_t r = pread(gf->fd, b + at + got, (size_t)(t->nbytes - got), (off_t)(off + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int e = r < 0 ? errno : 0;
                ds4_anon_unmap(b, (size_t)total);
                free(rm);
                return ds4_set_err(err, DS4_EIO, "%s: cannot read tensor %s: %s", gf->path, t->name,
                                   e ? strerror(e) : "the file ends early");
            }
            got += (uint64_t)r;
        }
        posix_fadvise(gf->fd, (off_t)off, (off_t)t->nbytes, POSIX_FADV_DONTNEED);
        rm[k].from = t->data;
        rm[k].to = b + at;
        rm[k].n = t->nbytes;
        k++;
        at += (t->nbytes + 63) & ~63ull;
    }
    qsort(rm, k, sizeof *rm, cmp_remap);
    remap(&w->token_embd, rm, k);
    remap(&w->output_hc_fn, rm, k);
    remap(&w->output_hc_base, rm, k);
    remap(&w->output_hc_scale, rm, k);
    remap(&w->output_norm, rm, k);
    remap(&w->output, rm, k);
    for (int il = 0; il < w->cfg.n_layer; il++)
        remap_layer(&w->layers[il], rm, k);
    /* an MTP block in this file (V4's mtp.0.*, glm-dsa's NextN layer): its
     * non-routed tensors were copied too (its routed experts stay mapped:
     * the cache holds the main layers'); a sidecar's are not in rm */
    if (w->has_mtp) {
        ds4_mtp_weights *mw = &w->mtp;
        ds4_tensor *mt[] = { &mw->e_proj, &mw->h_proj, &mw->enorm, &mw->hnorm, &mw->norm, &mw->hc_head_fn,
                             &mw->hc_head_scale, &mw->hc_head_base, &mw->eh_proj, &mw->embd, &mw->head };
        for (size_t i = 0; i < sizeof mt / sizeof mt[0]; i++) remap(mt[i], rm, k);
        remap_layer(&mw->block, rm, k);
    }
    free(rm);
    /* the weights are read only from here on */
    mprotect(b, (size_t)total, PROT_READ);
    *buf = b;
    *bytes = total;
    return DS4_OK;
}

void xc_free(ds4_xcache *c) {
    if (!c) return;
    if (c->th) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_broadcast(&c->cv_work);
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < c->nth; i++) pthread_join(c->th[i], NULL);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv_work);
        pthread_cond_destroy(&c->cv_done);
    }
    ds4_anon_unmap(c->pool, c->pool_bytes);
    if (c->fd_direct >= 0 && c->fd_direct != c->fd_buf) close(c->fd_direct);
    if (c->fd_buf >= 0) close(c->fd_buf);
    free(c->th);
    free(c->geo);
    free(c->slots);
    free(c->map);
    free(c->queue);
    free(c->exp);
    free(c->slot_of);
    free(c->ist);
    free(c->path);
    if (c->trace) fclose(c->trace);
    free(c);
}

int xc_open(ds4_xcache **out, gguf_file *gf, const ds4_weights *w, uint64_t budget, int n_readers,
            char **err) {
    *out = NULL;
    ds4_xcache *c = calloc(1, sizeof *c);
    if (!c) return ds4_set_err(err, DS4_ENOMEM, "%s: out of memory", gf->path);
    c->fd_direct = c->fd_buf = -1;
    const ds4_config *cf = &w->cfg;
    c->n_layer = cf->n_layer;
    c->E = cf->n_expert;
    c->file_size = gf->size;
    c->path = strdup(gf->path);
    c->geo = calloc((size_t)c->n_layer, sizeof *c->geo);
    size_t nsl = (size_t)c->n_layer * (size_t)c->E;
    c->map = malloc(nsl * sizeof *c->map);
    c->exp = malloc((size_t)c->E * sizeof *c->exp);
    c->slot_of = malloc((size_t)c->E * sizeof *c->slot_of);
    c->ist = malloc((size_t)c->E);
    int rc = DS4_ENOMEM;
    if (!c->path || !c->geo || !c->map || !c->exp || !c->slot_of || !c->ist) goto nomem;
    for (size_t i = 0; i < nsl; i++) c->map[i] = -1;

    /* slot layout: each part's largest aligned span over the layers that
     * have routed experts (not the GLM graphs' leading dense layers) */
    uint64_t cap[3] = { 0, 0, 0 };
    for (int il = 0; il < c->n_layer; il++) {
        if (!w->layers[il].ffn_gate_exps.data) continue;
        c->n_slices += (uint64_t)c->E;
        const ds4_tensor *t[3] = { &w->layers[il].ffn_gate_exps, &w->layers[il].ffn_up_exps,
                                   &w->layers[il].ffn_down_exps };
        for (int p = 0; p < 3; p++) {
            c->geo[il].off[p] = (uint64_t)(t[p]->data - gf->map);
            c->geo[il].len[p] = t[p]->nbytes / (uint64_t)c->E;
            c->routed_bytes += t[p]->nbytes;
            for (int e = 0; e < c->E; e++) {
                uint64_t off = c->geo[il].off[p] + (uint64_t)e * c->geo[il].len[p];
                uint64_t span = align_up(off + c->geo[il].len[p]) - align_down(off);
                if (span > cap[p]) cap[p] = span;
            }
        }
    }
    if (!c->n_slices) {
        rc = ds4_set_err(err, DS4_EUNSUP, "%s: --ssd-streaming: the model has no routed experts", gf->path);
        goto fail;
    }
    c->part_base[0] = 0;
    c->part_base[1] = (size_t)cap[0];
    c->part_base[2] = (size_t)(cap[0] + cap[1]);
    c->slot_bytes = (size_t)(cap[0] + cap[1] + cap[2]);
    uint64_t ns = budget / c->slot_bytes;
    if (ns < 1) ns = 1;
    if (ns > c->n_slices) ns = c->n_slices;
    c->n_slots = (int)ns;
    c->pool_bytes = (size_t)ns * c->slot_bytes;
    /* committed now, as the session scratch is: the cache's memory is
     * visible at start-up, and first-touch faults (0.3-0.5 GB/s on the
     * test VM, slower than its disk) are not paid inside reads.  Asked for
     * 2 MB pages before it is committed (MAP_POPULATE would commit 4 KB
     * ones first): the kernels sweep the cached experts like the mapped
     * ones. */
    c->pool = ds4_anon_map(c->pool_bytes, 1);
    if (!c->pool) {
        rc = ds4_set_err(err, DS4_ENOMEM, "%s: --ssd-streaming: cannot allocate the expert cache "
                         "(%d slots of %zu bytes)", gf->path, c->n_slots, c->slot_bytes);
        goto fail;
    }
    c->slots = calloc((size_t)c->n_slots, sizeof *c->slots);
    c->queue = malloc((size_t)c->n_slots * sizeof *c->queue);
    if (!c->slots || !c->queue) goto nomem;
    for (int s = 0; s < c->n_slots; s++) {
        c->slots[s].key = -1;
        c->slots[s].buf = c->pool + (size_t)s * c->slot_bytes;
    }
    const char *pol = getenv("DS4_XCACHE_POLICY");   /* the NOTES.md measurement */
    c->policy = pol && !strcmp(pol, "lru") ? XC_LRU : XC_LFU_AGING;
    c->aging_period = 2 * (uint64_t)c->n_slots;
    c->aging_next = c->aging_period;
    /* DS4_XCACHE_TRACE=FILE appends each layer's request (the layer, then
     * its experts) to FILE: the input of the eviction study in NOTES.md */
    const char *tr = getenv("DS4_XCACHE_TRACE");
    if (tr && *tr && !(c->trace = fopen(tr, "a"))) {
        rc = ds4_set_err(err, DS4_EIO, "DS4_XCACHE_TRACE=%s: %s", tr, strerror(errno));
        goto fail;
    }

    c->fd_buf = open(gf->path, O_RDONLY | O_CLOEXEC);
    if (c->fd_buf < 0) {
        rc = ds4_set_err(err, DS4_EIO, "%s: cannot open: %s", gf->path, strerror(errno));
        goto fail;
    }
    /* DS4_XCACHE_BUFFERED=1: the fallback path on purpose (tests; file
     * systems that take O_DIRECT at open but are slow with it) */
    const char *bufd = getenv("DS4_XCACHE_BUFFERED");
    c->fd_direct = bufd && *bufd && strcmp(bufd, "0") ? -1 : open(gf->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    c->direct = c->fd_direct >= 0;
    if (!c->direct) c->fd_direct = c->fd_buf;   /* tmpfs and friends */
    posix_fadvise(c->fd_buf, 0, 0, POSIX_FADV_RANDOM);

    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv_work, NULL);
    pthread_cond_init(&c->cv_done, NULL);
    c->th = calloc((size_t)n_readers, sizeof *c->th);
    if (!c->th) goto nomem;
    for (int i = 0; i < n_readers; i++) {
        if (pthread_create(&c->th[i], NULL, reader_main, c)) {
            if (!c->nth) {
                rc = ds4_set_err(err, DS4_ENOMEM, "%s: cannot start the expert reader threads", gf->path);
                goto fail;
            }
            break;
        }
        c->nth++;
    }
    *out = c;
    return DS4_OK;
nomem:
    rc = ds4_set_err(err, DS4_ENOMEM, "%s: out of memory", gf->path);
fail:
    xc_free(c);
    return rc;
}

/* The resident-copy size is recorded by the caller (engine.c). */
void xc_set_resident(ds4_xcache *c, uint64_t bytes) { c->resident_bytes = bytes; }
