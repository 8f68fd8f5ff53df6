/*
 * safetensors.c -- Hugging Face checkpoint reader (see safetensors.h).
 *
 * Owns: shard mapping and header validation, the index, lookups, the FP8 /
 * E8M0 / FP4 / BF16 element codecs.  Must not: interpret tensor names
 * (tools/ds4_quantize.c maps them) or hold copies of tensor data.
 *
 * A safetensors file is: u64 little-endian N, N bytes of JSON (an object
 * name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an
 * optional "__metadata__" of strings), then the data section; offsets are
 * relative to byte 8 + N.
 */
#include "gguf/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The safetensors format caps headers at 100 MB; anything larger is a
 * corrupted length field. */
#define ST_MAX_HEADER (100ull << 20)

typedef struct {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint64_t data_off;   /* 8 + header length */
} st_shard;

struct st_checkpoint {
    st_shard *shards;
    int n_shards;
    st_tensor *t;
    size_t n, cap;
    st_tensor **sorted;   /* by name, for st_find */
};

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static const char *DT_NAMES[ST_NDTYPES] = {"F32", "F16", "BF16", "F8_E4M3", "F8_E8M0",
                                           "I8", "U8", "I32", "I64"};
static const size_t DT_SIZE[ST_NDTYPES] = {4, 2, 2, 1, 1, 1, 1, 4, 8};

const char *st_dtype_name(st_dtype d) { return (unsigned)d < ST_NDTYPES ? DT_NAMES[d] : "?"; }
size_t st_dtype_size(st_dtype d) { return (unsigned)d < ST_NDTYPES ? DT_SIZE[d] : 0; }
int st_dtype_parse(const char *s) {
    for (int i = 0; i < ST_NDTYPES; i++)
        if (!strcmp(s, DT_NAMES[i])) return i;
    return -1;
}

/* ---- element codecs --------------------------------------------------- */

float st_e4m3_to_f32(uint8_t b) {
    const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    float v = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf((float)m, -9);
    return sign ? -v : v;
}

float st_e8m0_to_f32(uint8_t b) {
    if (b == 255) return NAN;
    return ldexpf(1.0f, (int)b - 127);
}

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float st_e2m1_to_f32(unsigned code) {
    static const float T[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = T[code & 7];
    return code & 8 ? -v : v;
}

/* Nearest of a sorted non-negative grid, ties to the even index (both
 * E4M3 and E2M1 grids have even mantissas at even indices). */
static unsigned nearest(const float *grid, unsigned n, float a) {
    unsigned lo = 0;
    while (lo + 1 < n && grid[lo + 1] <= a) lo++;
    if (lo + 1 >= n) return n - 1;
    const float dl = a - grid[lo], dh = grid[lo + 1] - a;
    if (dl < dh) return lo;
    if (dh < dl) return lo + 1;
    return lo & 1 ? lo + 1 : lo;
}

uint8_t st_f32_to_e4m3(float x) {
    static float grid[127];   /* codes 0..126: every finite non-negative value */
    static int init;
    if (!init) {   /* idempotent, so a race only repeats the same writes */
        for (int i = 0; i < 127; i++) grid[i] = st_e4m3_to_f32((uint8_t)i);
        init = 1;
    }
    const unsigned s = signbit(x) ? 0x80 : 0;
    return (uint8_t)(s | nearest(grid, 127, fabsf(x)));
}

unsigned st_f32_to_e2m1(float x) {
    static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const unsigned s = signbit(x) ? 8 : 0;
    return s | nearest(grid, 8, fabsf(x));
}

uint16_t st_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even (x finite) */
    return (uint16_t)(u >> 16);
}

/* ---- shards ------------------------------------------------------------ */

static int add_tensor(st_checkpoint *c, st_tensor *t) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? 2 * c->cap : 256;
        st_tensor *p = realloc(c->t, nc * sizeof *p);
        if (!p) return -1;
        c->t = p;
        c->cap = nc;
    }
    c->t[c->n++] = *t;
    return 0;
}

typedef struct { uint64_t b, e; size_t i; } span;
static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* Maps and parses one shard; appends its tensors. */
static int load_shard(st_checkpoint *c, const char *path, char **err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *err = fmt("%s: %s%s", path, strerror(errno),
                   errno == ENOENT ? " (missing shard: the checkpoint is incomplete)" : "");
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        *err = fmt("%s: not a regular file", path);
        close(fd);
        return -1;
    }
    const uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        *err = fmt("%s: %llu bytes, too short for a safetensors header (truncated?)", path,
                   (unsigned long long)size);
        close(fd);
        return -1;
    }
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        *err = fmt("%s: mmap failed: %s", path, strerror(errno));
        return -1;
    }
    st_shard *sh = &c->shards[c->n_shards];
    sh->path = strdup(path);
    sh->map = map;
    sh->size = size;
    const int si = c->n_shards++;
    if (!sh->path) { *err = fmt("out of memory"); return -1; }

    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)map[i] << (8 * i);
    if (hl > size - 8 || hl > ST_MAX_HEADER || hl < 2) {
        *err = fmt("%s: corrupted safetensors header: header length %llu does not fit the "
                   "%llu-byte file", path, (unsigned long long)hl, (unsigned long long)size);
        return -1;
    }
    sh->data_off = 8 + hl;
    const uint64_t dsize = size - sh->data_off;
    json_error_t je;
    json_t *root = json_loadb((const char *)map + 8, (size_t)hl, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        *err = fmt("%s: corrupted safetensors header: %s (JSON line %d, column %d)", path,
                   root ? "not a JSON object" : je.text, je.line, je.column);
        json_decref(root);
        return -1;
    }
    const size_t first = c->n;
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
               *jo = json_object_get(v, "data_offsets");
        if (!json_is_object(v) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
            json_array_size(jo) != 2) {
            *err = fmt("%s: corrupted safetensors header: entry \"%s\" lacks dtype/shape/data_offsets",
                       path, key);
            rc = -1;
            break;
        }
        st_tensor t;
        memset(&t, 0, sizeof t);
        int d = st_dtype_parse(json_string_value(jd));
        if (d < 0) {
            *err = fmt("%s: tensor \"%s\" has dtype \"%s\", which ds4-quantize does not read "
                       "(known: F32 F16 BF16 F8_E4M3 F8_E8M0 I8 U8 I32 I64)", path, key,
                       json_string_value(jd));
            rc = -1;
            break;
        }
        t.dtype = (st_dtype)d;
        if (json_array_size(js) > ST_MAX_DIMS) {
            *err = fmt("%s: tensor \"%s\" has %zu dimensions (at most %d)", path, key,
                       json_array_size(js), ST_MAX_DIMS);
            rc = -1;
            break;
        }
        t.n_dims = (int)json_array_size(js);
        uint64_t nel = 1;
        int bad = 0;
        for (int i = 0; i < t.n_dims; i++) {
            json_t *x = json_array_get(js, (size_t)i);
            if (!json_is_integer(x) || json_integer_value(x) < 0) { bad = 1; break; }
            t.shape[i] = json_integer_value(x);
            if (t.shape[i] && nel > UINT64_MAX / 16 / (uint64_t)t.shape[i]) { bad = 1; break; }
            nel *= (uint64_t)t.shape[i];
        }
        json_t *b0 = json_array_get(jo, 0), *b1 = json_array_get(jo, 1);
        if (bad || !json_is_integer(b0) || !json_is_integer(b1) || json_integer_value(b0) < 0 ||
            json_integer_value(b1) < json_integer_value(b0)) {
            *err = fmt("%s: corrupted safetensors header: bad shape or data_offsets for \"%s\"", path, key);
            rc = -1;
            break;
        }
        const uint64_t b = (uint64_t)json_integer_value(b0), e = (uint64_t)json_integer_value(b1);
        t.nbytes = nel * st_dtype_size(t.dtype);
        if (e - b != t.nbytes) {
            *err = fmt("%s: tensor \"%s\": data_offsets span %llu bytes but shape x %s needs %llu",
                       path, key, (unsigned long long)(e - b), DT_NAMES[t.dtype],
                       (unsigned long long)t.nbytes);
            rc = -1;
            break;
        }
        if (e > dsize) {
            *err = fmt("%s: tensor \"%s\" ends at byte %llu of a %llu-byte data section "
                       "(truncated or corrupted shard)", path, key, (unsigned long long)e,
                       (unsigned long long)dsize);
            rc = -1;
            break;
        }
        t.data = map + sh->data_off + b;
        t.shard = si;
        t.name = strdup(key);
        if (!t.name || add_tensor(c, &t)) { free(t.name); *err = fmt("out of memory"); rc = -1; break; }
    }
    json_decref(root);
    if (rc) return rc;
    /* Overlapping spans mean a corrupted header (two tensors sharing bytes). */
    const size_t nt = c->n - first;
    span *sp = malloc((nt ? nt : 1) * sizeof *sp);
    if (!sp) { *err = fmt("out of memory"); return -1; }
    for (size_t i = 0; i < nt; i++) {
        const st_tensor *t = &c->t[first + i];
        sp[i].b = (uint64_t)(t->data - map - sh->data_off);
        sp[i].e = sp[i].b + t->nbytes;
        sp[i].i = first + i;
    }
    qsort(sp, nt, sizeof *sp, span_cmp);
    for (size_t i = 1; i < nt; i++)
        if (sp[i].b < sp[i - 1].e) {
            *err = fmt("%s: corrupted safetensors header: tensors \"%s\" and \"%s\" overlap", path,
                       c->t[sp[i - 1].i].name, c->t[sp[i].i].name);
            free(sp);
            return -1;
        }
    free(sp);
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp((*(st_tensor *const *)a)->name, (*(st_tensor *const *)b)->name);
}

static char *join(const char *dir, const char *file) { return fmt("%s/%s", dir, file); }

st_checkpoint *st_open_dir(const char *dir, char **err) {
    *err = NULL;
    st_checkpoint *c = calloc(1, sizeof *c);
    if (!c) { *err = fmt("out of memory"); return NULL; }
    char *ipath = join(dir, "model.safetensors.index.json");
    json_t *idx = NULL, *wm = NULL;
    const char **files = NULL;
    size_t n_files = 0;
    struct stat st;
    if (ipath && !stat(ipath, &st)) {
        json_error_t je;
        idx = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
        wm = idx ? json_object_get(idx, "weight_map") : NULL;
        if (!idx || !json_is_object(wm)) {
            *err = idx ? fmt("%s: no \"weight_map\" object", ipath)
                       : fmt("%s: invalid JSON: %s (line %d)", ipath, je.text, je.line);
            goto fail;
        }
        files = calloc(json_object_size(wm) + 1, sizeof *files);
        if (!files) { *err = fmt("out of memory"); goto fail; }
        const char *k;
        json_t *v;
        json_object_foreach(wm, k, v) {
            if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
                *err = fmt("%s: weight_map[\"%s\"] is not a shard file name", ipath, k);
                goto fail;
            }
            size_t j;
            for (j = 0; j < n_files; j++)
                if (!strcmp(files[j], json_string_value(v))) break;
            if (j == n_files) files[n_files++] = json_string_value(v);
        }
        if (!n_files) { *err = fmt("%s: the weight_map is empty", ipath); goto fail; }
    } else {
        files = calloc(1, sizeof *files);
        if (!files) { *err = fmt("out of memory"); goto fail; }
        files[n_files++] = "model.safetensors";
        char *single = join(dir, "model.safetensors");
        int have = single && !stat(single, &st);
        free(single);
        if (!have) {
            *err = fmt("%s: neither model.safetensors.index.json nor model.safetensors is there "
                       "(not a Hugging Face checkpoint directory?)", dir);
            goto fail;
        }
    }
    c->shards = calloc(n_files, sizeof *c->shards);
    if (!c->shards) { *err = fmt("out of memory"); goto fail; }
    for (size_t i = 0; i < n_files; i++) {
        char *p = join(dir, files[i]);
        if (!p) { *err = fmt("out of memory"); goto fail; }
        int rc = load_shard(c, p, err);
        free(p);
        if (rc) goto fail;
    }
    c->sorted = malloc((c->n ? c->n : 1) * sizeof *c->sorted);
    if (!c->sorted) { *err = fmt("out of memory"); goto fail; }
    for (size_t i = 0; i < c->n; i++) c->sorted[i] = &c->t[i];
    qsort(c->sorted, c->n, sizeof *c->sorted, name_cmp);
    for (size_t i = 1; i < c->n; i++)
        if (!strcmp(c->sorted[i]->name, c->sorted[i - 1]->name)) {
            *err = fmt("tensor \"%s\" is in two shards (%s and %s)", c->sorted[i]->name,
                       c->shards[c->sorted[i - 1]->shard].path, c->shards[c->sorted[i]->shard].path);
            goto fail;
        }
    if (wm) {
        /* The index and the headers must agree both ways. */
        const char *k;
        json_t *v;
        json_object_foreach(wm, k, v) {
            const st_tensor *t = st_find(c, k);
            if (!t || strcmp(strrchr(c->shards[t->shard].path, '/') + 1, json_string_value(v))) {
                *err = fmt("%s: the index places \"%s\" in %s, but that shard's header does not "
                           "hold it", ipath, k, json_string_value(v));
                goto fail;
            }
        }
        if (json_object_size(wm) != c->n) {
            for (size_t i = 0; i < c->n; i++)
                if (!json_object_get(wm, c->t[i].name)) {
                    *err = fmt("%s: tensor \"%s\" of %s is not in the index's weight_map", ipath,
                               c->t[i].name, c->shards[c->t[i].shard].path);
                    goto fail;
                }
        }
    }
    free(files);
    free(ipath);
    json_decref(idx);
    return c;
fail:
    free(files);
    free(ipath);
    json_decref(idx);
    st_close(c);
    return NULL;
}

void st_close(st_checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_shards; i++) {
        if (c->shards[i].map) munmap((void *)c->shards[i].map, c->shards[i].size);
        free(c->shards[i].path);
    }
    for (size_t i = 0; i < c->n; i++) free(c->t[i].name);
    free(c->shards);
    free(c->t);
    free(c->sorted);
    free(c);
}

const st_tensor *st_find(const st_checkpoint *c, const char *name) {
    if (!c->sorted) return NULL;
    st_tensor key = {.name = (char *)name}, *kp = &key;
    st_tensor **r = bsearch(&kp, c->sorted, c->n, sizeof *c->sorted, name_cmp);
    return r ? *r : NULL;
}

size_t st_count(const st_checkpoint *c) { return c->n; }
const st_tensor *st_at(const st_checkpoint *c, size_t i) { return i < c->n ? &c->t[i] : NULL; }
const char *st_shard_path(const st_checkpoint *c, int shard) {
    return shard >= 0 && shard < c->n_shards ? c->shards[shard].path : "?";
}
uint64_t st_total_bytes(const st_checkpoint *c) {
    uint64_t s = 0;
    for (size_t i = 0; i < c->n; i++) s += c->t[i].nbytes;
    return s;
}

void st_release(const st_tensor *t) { st_release_range(t, 0, t->nbytes); }

void st_release_range(const st_tensor *t, uint64_t off, uint64_t len) {
    if (off >= t->nbytes) return;
    if (len > t->nbytes - off) len = t->nbytes - off;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = (uintptr_t)t->data + off, e = b + len;
    b = (b + pg - 1) / pg * pg;   /* only whole pages of this tensor */
    e = e / pg * pg;
    if (e > b) madvise((void *)b, e - b, MADV_DONTNEED);
}
