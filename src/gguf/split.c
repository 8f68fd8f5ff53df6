/*
 * split.c -- the split of one model over the ranks of `--dist` (split.h):
 * the pipeline plan, the experts share, the ds4.split keys, per-rank file
 * names.  Shared by the runtime (src/mpi/mpi.c) and `ds4-gguf split`
 * (tools/ds4_gguf.c), which must agree on every rule here.
 *
 * Owns: pure functions of a file and a rank count.  Must not: talk to
 * other ranks or keep state (no MPI here: src/mpi/ does that).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "gguf/split.h"

int ds4_split_layer_of(const char *name) {
    if (strncmp(name, "blk.", 4)) return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return (end != name + 4 && *end == '.' && v >= 0 && v < (1 << 20)) ? (int)v : -1;
}

int ds4_split_plan_pipeline(const gguf_file *gf, int L, int P, const char *spec, int *first,
                            char *msg, size_t cap) {
    if (P < 1 || L < P) {
        snprintf(msg, cap, "%d ranks but the model has only %d layers (a rank needs one)", P, L);
        return DS4_EINVAL;
    }
    if (spec) {
        /* "a:b,c:d,...": inclusive ranges, one per rank, in order, covering
         * every layer */
        const char *p = spec;
        int r = 0, want = 0;
        while (*p) {
            char *e;
            long a = strtol(p, &e, 10);
            if (e == p || *e != ':') goto bad;
            p = e + 1;
            long b = strtol(p, &e, 10);
            if (e == p || (*e && *e != ',')) goto bad;
            p = *e ? e + 1 : e;
            if (r >= P || a != want || b < a || b >= L) goto bad;
            first[r++] = (int)a;
            want = (int)b + 1;
        }
        if (r != P || want != L) goto bad;
        first[P] = L;
        return DS4_OK;
    bad:
        snprintf(msg, cap, "--dist-layers '%.60s': expected %d ranges a:b of consecutive layers "
                 "covering 0:%d, one per rank", spec, P, L - 1);
        return DS4_EINVAL;
    }
    /* balance by weight bytes: the embeddings count for rank 0, the head
     * and everything else outside the layers for the last rank */
    uint64_t *lb = calloc((size_t)L, sizeof *lb);
    if (!lb) { snprintf(msg, cap, "out of memory"); return DS4_ENOMEM; }
    uint64_t pre = 0, total = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        int il = ds4_split_layer_of(t->name);
        if (il >= 0 && il < L) lb[il] += t->nbytes;
        else if (!strncmp(t->name, "token_embd", 10)) pre += t->nbytes;
        total += t->nbytes;
    }
    /* rank r starts at the first layer whose bytes begin at or past r/P of
     * the total, keeping at least one layer per rank */
    uint64_t cum = pre;
    int r = 1;
    first[0] = 0;
    for (int il = 0; il < L && r < P; il++) {
        if (il > first[r - 1] && (cum >= total / P * r || L - il <= P - r))
            first[r++] = il;
        cum += lb[il];
    }
    for (; r < P; r++) first[r] = L - (P - r);   /* not reached: kept safe */
    first[P] = L;
    free(lb);
    return DS4_OK;
}

/* ds4.split.* keys (ds4-gguf split): ranks (u32), rank (u32), first (u32
 * array [ranks+1]), source_fingerprint (u8 array [20]). */
int ds4_split_info(const gguf_file *gf, int L, int rank, int P, int *first, uint8_t fp[20],
                   char *msg, size_t cap) {
    uint32_t fr = 0, fp_ = 0;
    const gguf_kv *kf = gguf_find(gf, "ds4.split.first");
    const gguf_kv *kp = gguf_find(gf, "ds4.split.source_fingerprint");
    if (gguf_get_u32(gf, "ds4.split.rank", &fr) || gguf_get_u32(gf, "ds4.split.ranks", &fp_) ||
        !kf || kf->type != GGUF_ARRAY || kf->v.arr.type != GGUF_U32 || kf->v.arr.n != (uint64_t)fp_ + 1 ||
        !kp || kp->type != GGUF_ARRAY || kp->v.arr.type != GGUF_U8 || kp->v.arr.n != 20) {
        snprintf(msg, cap, "%s: malformed ds4.split metadata", gf->path);
        return DS4_EFORMAT;
    }
    if (rank >= 0 && ((int)fr != rank || (int)fp_ != P)) {
        snprintf(msg, cap, "%s is the part of rank %u of %u, but this is rank %d of %d",
                 gf->path, fr, fp_, rank, P);
        return DS4_EINVAL;
    }
    for (uint32_t r = 0; r <= fp_; r++) {
        uint32_t x;
        memcpy(&x, kf->v.arr.data + 4 * (size_t)r, 4);
        if (x > (uint32_t)L || (r > 0 && first && x <= (uint32_t)first[r - 1]) || (r == fp_ && x != (uint32_t)L) ||
            (r == 0 && x != 0)) {
            snprintf(msg, cap, "%s: ds4.split.first is not a split of %d layers", gf->path, L);
            return DS4_EFORMAT;
        }
        if (first) first[r] = (int)x;
    }
    if (fp) memcpy(fp, kp->v.arr.data, 20);
    return DS4_OK;
}

void ds4_split_expert_share(int n_expert, int r, int P, int *lo, int *hi) {
    *lo = (int)((int64_t)n_expert * r / P);
    *hi = (int)((int64_t)n_expert * (r + 1) / P);
}

/* ds4.split.* keys of an experts split part (ds4-gguf split --dist
 * experts): ranks (u32), rank (u32), experts (u32 array [ranks+1]: the
 * first expert of each rank, as ds4_split_expert_share gives them),
 * source_fingerprint (u8 array [20]). */
int ds4_split_experts_info(const gguf_file *gf, int E, int rank, int P, int *e_lo, int *e_hi,
                           uint8_t fp[20], char *msg, size_t cap) {
    uint32_t fr = 0, fn = 0;
    const gguf_kv *kx = gguf_find(gf, "ds4.split.experts");
    const gguf_kv *kp = gguf_find(gf, "ds4.split.source_fingerprint");
    if (gguf_get_u32(gf, "ds4.split.rank", &fr) || gguf_get_u32(gf, "ds4.split.ranks", &fn) ||
        fn < 1 || fr >= fn || !kx || kx->type != GGUF_ARRAY || kx->v.arr.type != GGUF_U32 ||
        kx->v.arr.n != (uint64_t)fn + 1 ||
        !kp || kp->type != GGUF_ARRAY || kp->v.arr.type != GGUF_U8 || kp->v.arr.n != 20) {
        snprintf(msg, cap, "%s: malformed ds4.split metadata", gf->path);
        return DS4_EFORMAT;
    }
    if (rank >= 0 && ((int)fr != rank || (int)fn != P)) {
        snprintf(msg, cap, "%s is the part of rank %u of %u, but this is rank %d of %d",
                 gf->path, fr, fn, rank, P);
        return DS4_EINVAL;
    }
    /* the runtime gives rank r the experts ds4_split_expert_share says: a
     * file holding others (another tool, another rule) is refused */
    for (uint32_t r = 0; r <= fn; r++) {
        uint32_t x;
        memcpy(&x, kx->v.arr.data + 4 * (size_t)r, 4);
        int lo, hi;
        ds4_split_expert_share(E, (int)(r < fn ? r : fn - 1), (int)fn, &lo, &hi);
        if (x != (uint32_t)(r < fn ? lo : hi)) {
            snprintf(msg, cap, "%s: ds4.split.experts is not the split of %d experts over %u "
                     "ranks that --dist experts uses", gf->path, E, fn);
            return DS4_EFORMAT;
        }
    }
    if (e_lo) ds4_split_expert_share(E, (int)fr, (int)fn, e_lo, e_hi);
    if (fp) memcpy(fp, kp->v.arr.data, 20);
    return DS4_OK;
}

char *ds4_split_path(const char *path, int rank) {
    const char *p = strstr(path, "%d");
    size_t n = strlen(path) + 16;
    char *o = malloc(n);
    if (!o) return NULL;
    if (!p || strchr(p + 2, '%') || memchr(path, '%', (size_t)(p - path))) {
        snprintf(o, n, "%s", path);   /* no single %d: the path as it is */
        return o;
    }
    snprintf(o, n, "%.*s%d%s", (int)(p - path), path, rank, p + 2);
    return o;
}
