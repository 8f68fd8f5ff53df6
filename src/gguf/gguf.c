/*
 * gguf.c -- the GGUF v3 container: read-only mmap parser and streaming
 * writer (implements gguf.h).
 *
 * Owns: the mapping, bounds checking of every count/length/offset/size read
 * from a file, the key and tensor hash indexes, value printing, the writer.
 * Must not: interpret model semantics (model.c), copy tensor data, or
 * allocate a size read from the file before checking that it fits in the
 * bytes that remain (a hostile file can then never make us allocate more
 * than a small multiple of its own size).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds4.h"
#include "gguf/gguf.h"
#include "base/afile.h"
#include "base/hash.h"
#include "gguf/mapguard.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian files with plain loads: big-endian hosts are not supported"
#endif

#define GGUF_MAGIC 0x46554747u          /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
/* Keys and tensor names are copied into NUL-terminated strings; real ones
 * are < 100 bytes, so a long one is corruption, not data. */
#define GGUF_MAX_NAME 65536
/* general.alignment larger than this is nonsense (ggml uses 32). */
#define GGUF_MAX_ALIGNMENT (1u << 24)

/* Internal lookup state, hung off gguf_file (opaque to users). */
struct gguf_index {
    uint32_t *kv_slots;      /* open addressing: index+1, 0 = empty */
    uint64_t kv_mask;
    uint32_t *t_slots;
    uint64_t t_mask;
};

/* ------------------------------------------------------------------------ */
/* ggml types                                                                */
/* ------------------------------------------------------------------------ */

typedef struct { const char *name; uint32_t block, bytes; } type_info;

/* Every ggml storage type id with a fixed block layout.  ds4 computes with
 * only a few of them, but the container accepts all so that --inspect works
 * on any GGUF; model.c enforces the subset. */
static const type_info TYPES[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},     [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},[17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},[19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},        [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},
    [34] = {"TQ1_0", 256, 54},  [35] = {"TQ2_0", 256, 66},
    [39] = {"MXFP4", 32, 17},
};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

static const type_info *tinfo(uint32_t type) {
    if (type >= N_TYPES || !TYPES[type].name) return NULL;
    return &TYPES[type];
}

uint64_t ggml_type_size(uint32_t type) {
    const type_info *t = tinfo(type);
    return t ? t->bytes : 0;
}

uint64_t ggml_block_size(uint32_t type) {
    const type_info *t = tinfo(type);
    return t ? t->block : 0;
}

const char *ggml_type_name(uint32_t type) {
    const type_info *t = tinfo(type);
    return t ? t->name : "?";
}

uint64_t ggml_row_size(uint32_t type, uint64_t ne0) {
    const type_info *t = tinfo(type);
    if (!t || ne0 % t->block) return 0;
    uint64_t r;
    if (__builtin_mul_overflow(ne0 / t->block, (uint64_t)t->bytes, &r)) return 0;
    return r;
}

/* Byte size of one scalar metadata value; 0 for STRING/ARRAY/unknown. */
static uint64_t value_size(uint32_t type) {
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    }
    return 0;
}

static const char *value_type_name(uint32_t type) {
    static const char *n[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                              "bool", "string", "array", "u64", "i64", "f64"};
    return type < GGUF_NTYPES ? n[type] : "?";
}

/* ------------------------------------------------------------------------ */
/* Bounded cursor over the mapping                                           */
/* ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *base;
    uint64_t pos, size;
    const char *path;
    char **err;
} cursor;

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > remaining(c)) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: truncated file: %s at offset %" PRIu64
                " needs %" PRIu64 " bytes, only %" PRIu64 " left",
                c->path, what, c->pos, n, remaining(c));
        return -1;
    }
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (need(c, 4, what)) return -1;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (need(c, 8, what)) return -1;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(c, &len, what)) return -1;
    if (len > remaining(c)) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: %s at offset %" PRIu64 " has length %" PRIu64
                " but only %" PRIu64 " bytes are left in the file",
                c->path, what, c->pos - 8, len, remaining(c));
        return -1;
    }
    s->p = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return 0;
}

/* A key or tensor name: 1..GGUF_MAX_NAME bytes, no NUL (it becomes a C
 * string). */
static char *rd_name(cursor *c, const char *what) {
    gguf_str s;
    uint64_t at = c->pos;
    if (rd_str(c, &s, what)) return NULL;
    if (s.len == 0 || s.len > GGUF_MAX_NAME || memchr(s.p, 0, s.len)) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: %s at offset %" PRIu64 " is %s", c->path, what, at,
                s.len == 0 ? "empty" : s.len > GGUF_MAX_NAME ? "too long"
                                                              : "not a valid name (contains NUL)");
        return NULL;
    }
    char *r = malloc(s.len + 1);
    if (!r) { ds4_set_err(c->err, DS4_EFORMAT, "%s: out of memory", c->path); return NULL; }
    memcpy(r, s.p, s.len);
    r[s.len] = 0;
    return r;
}

/* Grows p (elements of `esz` bytes, zero-filled) to hold at least `need`
 * elements; returns the new array, or NULL (p still valid) on failure.  Arrays sized by counts from the file grow as entries are
 * actually parsed, so a lying count in a huge file costs nothing. */
static void *grow(void *p, uint64_t *cap, uint64_t need, size_t esz) {
    if (need <= *cap) return p;
    uint64_t nc = *cap ? *cap * 2 : 64;
    if (nc < need) nc = need;
    if (nc > SIZE_MAX / esz) return NULL;
    char *q = realloc(p, (size_t)(nc * esz));
    if (!q) return NULL;
    memset(q + *cap * esz, 0, (size_t)((nc - *cap) * esz));
    *cap = nc;
    return q;
}

static void load_scalar(uint32_t type, const uint8_t *p, gguf_kv *kv) {
    switch (type) {
    case GGUF_U8: kv->v.u = p[0]; break;
    case GGUF_BOOL: kv->v.u = p[0] != 0; break;
    case GGUF_I8: kv->v.i = (int8_t)p[0]; break;
    case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); kv->v.u = x; break; }
    case GGUF_I16: { int16_t x; memcpy(&x, p, 2); kv->v.i = x; break; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); kv->v.u = x; break; }
    case GGUF_I32: { int32_t x; memcpy(&x, p, 4); kv->v.i = x; break; }
    case GGUF_U64: { uint64_t x; memcpy(&x, p, 8); kv->v.u = x; break; }
    case GGUF_I64: { int64_t x; memcpy(&x, p, 8); kv->v.i = x; break; }
    case GGUF_F32: { float x; memcpy(&x, p, 4); kv->v.f = x; break; }
    case GGUF_F64: { double x; memcpy(&x, p, 8); kv->v.f = x; break; }
    }
}

static int parse_kv(cursor *c, gguf_kv *kv) {
    kv->key = rd_name(c, "metadata key");
    if (!kv->key) return -1;
    if (rd_u32(c, &kv->type, "metadata value type")) return -1;
    if (kv->type >= GGUF_NTYPES) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: metadata key %s has unknown value type %u",
                c->path, GGUF_ESC(kv->key), kv->type);
        return -1;
    }
    if (kv->type == GGUF_STRING) return rd_str(c, &kv->v.s, "string value");
    if (kv->type != GGUF_ARRAY) {
        uint64_t sz = value_size(kv->type);
        if (need(c, sz, "metadata value")) return -1;
        load_scalar(kv->type, c->base + c->pos, kv);
        c->pos += sz;
        return 0;
    }
    uint32_t et;
    uint64_t n;
    if (rd_u32(c, &et, "array element type")) return -1;
    if (et == GGUF_ARRAY) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: metadata key %s is a nested array (not supported by GGUF v3 readers)",
                c->path, GGUF_ESC(kv->key));
        return -1;
    }
    if (et >= GGUF_NTYPES) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: metadata key %s: array has unknown element type %u",
                c->path, GGUF_ESC(kv->key), et);
        return -1;
    }
    if (rd_u64(c, &n, "array length")) return -1;
    kv->v.arr.type = et;
    kv->v.arr.n = n;
    kv->v.arr.data = c->base + c->pos;
    kv->v.arr.str_off = NULL;
    if (et != GGUF_STRING) {
        uint64_t bytes;
        if (__builtin_mul_overflow(n, value_size(et), &bytes) || bytes > remaining(c)) {
            ds4_set_err(c->err, DS4_EFORMAT, "%s: metadata key %s: array of %" PRIu64 " %s elements does not fit in the %" PRIu64
                    " bytes left in the file", c->path, GGUF_ESC(kv->key), n, value_type_name(et), remaining(c));
            return -1;
        }
        c->pos += bytes;
        return 0;
    }
    /* Every string element takes at least its 8-byte length, so this bound
     * keeps the index allocation below the file size. */
    if (n > remaining(c) / 8) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: metadata key %s: string array of %" PRIu64 " elements does not fit in the %"
                PRIu64 " bytes left in the file", c->path, GGUF_ESC(kv->key), n, remaining(c));
        return -1;
    }
    if (n == 0) return 0;
    uint64_t *off = NULL, cap = 0;
    uint64_t start = c->pos;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        uint64_t *q = grow(off, &cap, i + 1, sizeof *off);
        if (!q) {
            ds4_set_err(c->err, DS4_EFORMAT, "%s: out of memory", c->path);
            kv->v.arr.str_off = off;
            return -1;
        }
        off = q;
        off[i] = c->pos - start;
        if (rd_str(c, &s, "array string element")) { kv->v.arr.str_off = off; return -1; }
    }
    kv->v.arr.str_off = off;
    return 0;
}

static int parse_tensor(cursor *c, gguf_tensor *t) {
    t->name = rd_name(c, "tensor name");
    if (!t->name) return -1;
    if (rd_u32(c, &t->n_dims, "tensor n_dims")) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: tensor %s has %u dims (must be 1..%d)", c->path, GGUF_ESC(t->name),
                t->n_dims, GGUF_MAX_DIMS);
        return -1;
    }
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (rd_u64(c, &t->ne[d], "tensor dim")) return -1;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX) {
            ds4_set_err(c->err, DS4_EFORMAT, "%s: tensor %s has invalid dim %u = %" PRIu64, c->path, GGUF_ESC(t->name), d, t->ne[d]);
            return -1;
        }
    }
    if (rd_u32(c, &t->type, "tensor type")) return -1;
    if (rd_u64(c, &t->offset, "tensor offset")) return -1;
    const type_info *ti = tinfo(t->type);
    if (!ti) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: tensor %s has unknown type %u", c->path, GGUF_ESC(t->name), t->type);
        return -1;
    }
    if (t->ne[0] % ti->block) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: tensor %s: row length %" PRIu64 " is not a multiple of the %s block size %u",
                c->path, GGUF_ESC(t->name), t->ne[0], ti->name, ti->block);
        return -1;
    }
    uint64_t nel = 1, rows = 1, nb;
    int ovf = 0;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) ovf |= __builtin_mul_overflow(nel, t->ne[d], &nel);
    for (int d = 1; d < GGUF_MAX_DIMS; d++) ovf |= __builtin_mul_overflow(rows, t->ne[d], &rows);
    ovf |= __builtin_mul_overflow(rows, ggml_row_size(t->type, t->ne[0]), &nb);
    if (ovf || nel > (uint64_t)INT64_MAX) {
        ds4_set_err(c->err, DS4_EFORMAT, "%s: tensor %s: element count overflows", c->path, GGUF_ESC(t->name));
        return -1;
    }
    t->nbytes = nb;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Hash index (FNV-1a, open addressing, load <= 1/2)                         */
/* ------------------------------------------------------------------------ */

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* Builds slots for n names; returns the index of the first duplicate
 * (>= 0), -1 on success, -2 on out of memory. */
static int64_t build_index(uint64_t n, const char *(*name)(const void *, uint64_t),
                           const void *arr, uint32_t **slots_out, uint64_t *mask_out) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -2;
    uint64_t mask = cap - 1;
    for (uint64_t i = 0; i < n; i++) {
        const char *k = name(arr, i);
        uint64_t h = hash_str(k) & mask;
        while (slots[h]) {
            if (!strcmp(name(arr, slots[h] - 1), k)) {
                free(slots);
                return (int64_t)i;
            }
            h = (h + 1) & mask;
        }
        slots[h] = (uint32_t)(i + 1);
    }
    *slots_out = slots;
    *mask_out = mask;
    return -1;
}

static const char *kv_name(const void *a, uint64_t i) { return ((const gguf_kv *)a)[i].key; }
static const char *t_name(const void *a, uint64_t i) { return ((const gguf_tensor *)a)[i].name; }

static int64_t lookup(const uint32_t *slots, uint64_t mask, const char *key,
                      const char *(*name)(const void *, uint64_t), const void *arr) {
    if (!slots || !key) return -1;
    uint64_t h = hash_str(key) & mask;
    while (slots[h]) {
        if (!strcmp(name(arr, slots[h] - 1), key)) return slots[h] - 1;
        h = (h + 1) & mask;
    }
    return -1;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    if (!f || !f->idx) return NULL;
    int64_t i = lookup(f->idx->kv_slots, f->idx->kv_mask, key, kv_name, f->kv);
    return i < 0 ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !f->idx) return NULL;
    int64_t i = lookup(f->idx->t_slots, f->idx->t_mask, name, t_name, f->tensors);
    return i < 0 ? NULL : &f->tensors[i];
}

/* ------------------------------------------------------------------------ */
/* Open / close                                                              */
/* ------------------------------------------------------------------------ */

static int parse(gguf_file *f, char **err) {
    cursor c = {f->map, 0, f->size, f->path, err};
    uint32_t magic;
    if (f->size < 24) {
        ds4_set_err(err, DS4_EFORMAT, "%s: not a GGUF file (only %" PRIu64 " bytes)", f->path, f->size);
        return -1;
    }
    rd_u32(&c, &magic, "magic");
    if (magic != GGUF_MAGIC) {
        ds4_set_err(err, DS4_EFORMAT, "%s: not a GGUF file (bad magic)", f->path);
        return -1;
    }
    rd_u32(&c, &f->version, "version");
    if (f->version != 3) {
        ds4_set_err(err, DS4_EFORMAT, "%s: unsupported GGUF version %u (only version 3 is supported)", f->path, f->version);
        return -1;
    }
    rd_u64(&c, &f->n_tensors, "tensor count");
    rd_u64(&c, &f->n_kv, "metadata count");
    /* Minimal encodings: a kv is >= 8 (key len) + 1 (key) + 4 (type) + 1
     * (u8 value) = 14 bytes, a tensor entry >= 8 + 1 + 4 + 8 + 4 + 8 = 33.
     * Bounding the counts by the file size rejects absurd headers at once
     * and keeps indexes under 2^32; the arrays themselves grow only as
     * entries are parsed. */
    if (f->n_kv > remaining(&c) / 14 || f->n_kv > UINT32_MAX - 1) {
        ds4_set_err(err, DS4_EFORMAT, "%s: metadata count %" PRIu64 " is impossible for a %" PRIu64 "-byte file",
                f->path, f->n_kv, f->size);
        return -1;
    }
    if (f->n_tensors > remaining(&c) / 33 || f->n_tensors > UINT32_MAX - 1) {
        ds4_set_err(err, DS4_EFORMAT, "%s: tensor count %" PRIu64 " is impossible for a %" PRIu64 "-byte file",
                f->path, f->n_tensors, f->size);
        return -1;
    }
    f->idx = calloc(1, sizeof *f->idx);
    if (!f->idx) {
        ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", f->path);
        return -1;
    }
    /* n_kv / n_tensors count the entries parsed so far (what close frees). */
    uint64_t want_kv = f->n_kv, want_t = f->n_tensors, cap = 0;
    f->n_kv = f->n_tensors = 0;
    for (uint64_t i = 0; i < want_kv; i++) {
        gguf_kv *q = grow(f->kv, &cap, i + 1, sizeof *f->kv);
        if (!q) {
            ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", f->path);
            return -1;
        }
        f->kv = q;
        f->n_kv = i + 1;
        if (parse_kv(&c, &f->kv[i])) return -1;
    }
    int64_t dup = build_index(f->n_kv, kv_name, f->kv, &f->idx->kv_slots, &f->idx->kv_mask);
    if (dup != -1) {
        if (dup == -2) ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", f->path);
        else ds4_set_err(err, DS4_EFORMAT, "%s: duplicate metadata key %s", f->path, GGUF_ESC(f->kv[dup].key));
        return -1;
    }
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        uint64_t a = 0;
        if (gguf_get_u64(f, "general.alignment", &a)) {
            ds4_set_err(err, DS4_EFORMAT, "%s: general.alignment has type %s, expected an unsigned integer",
                    f->path, value_type_name(al->type));
            return -1;
        }
        if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT) {
            ds4_set_err(err, DS4_EFORMAT, "%s: general.alignment %" PRIu64 " is not a power of two <= %u",
                    f->path, a, GGUF_MAX_ALIGNMENT);
            return -1;
        }
        f->alignment = a;
    }
    cap = 0;
    for (uint64_t i = 0; i < want_t; i++) {
        gguf_tensor *q = grow(f->tensors, &cap, i + 1, sizeof *f->tensors);
        if (!q) {
            ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", f->path);
            return -1;
        }
        f->tensors = q;
        f->n_tensors = i + 1;
        if (parse_tensor(&c, &f->tensors[i])) return -1;
    }
    dup = build_index(f->n_tensors, t_name, f->tensors, &f->idx->t_slots, &f->idx->t_mask);
    if (dup != -1) {
        if (dup == -2) ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", f->path);
        else ds4_set_err(err, DS4_EFORMAT, "%s: duplicate tensor name %s", f->path, GGUF_ESC(f->tensors[dup].name));
        return -1;
    }
    f->dir_end = c.pos;
    /* dir_end <= size < 2^63 and alignment <= 2^24: no overflow. */
    f->data_offset = (f->dir_end + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors && f->data_offset > f->size) {
        ds4_set_err(err, DS4_EFORMAT, "%s: truncated file: tensor data section would start at %" PRIu64
                " past the end (%" PRIu64 " bytes)", f->path, f->data_offset, f->size);
        return -1;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t end;
        if (t->offset % f->alignment) {
            ds4_set_err(err, DS4_EFORMAT, "%s: tensor %s: offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                    f->path, GGUF_ESC(t->name), t->offset, f->alignment);
            return -1;
        }
        if (__builtin_add_overflow(f->data_offset, t->offset, &end) ||
            __builtin_add_overflow(end, t->nbytes, &end) || end > f->size) {
            ds4_set_err(err, DS4_EFORMAT, "%s: tensor %s: data [offset %" PRIu64 ", %" PRIu64 " bytes] extends past the end of the file"
                    " (data section %" PRIu64 " bytes)", f->path, GGUF_ESC(t->name), t->offset, t->nbytes,
                    f->size - f->data_offset);
            return -1;
        }
        t->data = f->map + f->data_offset + t->offset;
    }
    return 0;
}

static gguf_file *open_common(gguf_file *f, char **err) {
    if (parse(f, err)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path, char **err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", path);
        return NULL;
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        ds4_set_err(err, DS4_EFORMAT, "%s: cannot open: %s", path, strerror(errno));
        gguf_close(f);
        return NULL;
    }
    struct stat st;
    if (fstat(f->fd, &st) || !S_ISREG(st.st_mode)) {
        ds4_set_err(err, DS4_EFORMAT, "%s: not a regular file", path);
        gguf_close(f);
        return NULL;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size >= 24) {
        void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
        if (m == MAP_FAILED) {
            ds4_set_err(err, DS4_EFORMAT, "%s: mmap failed: %s", path, strerror(errno));
            gguf_close(f);
            return NULL;
        }
        f->map = m;
        f->owns_map = 1;
    }
    return open_common(f, err);
}

/* 2 MB pages for the weights where the page cache has them in 2 MB folios
 * (Linux large folios: a file read cold from disk; with this hint the
 * kernel's readahead for faults in the mapping may make 2 MB folios too).  A
 * weight matrix is read once per token in one sweep: with 4 KB pages every
 * 4 KB of it is a TLB miss and a page walk (medium q2 on a Zen 5 VM: a
 * 2048-token prefill 79-100 against 147 tok/s, docs/perf/README.md "Huge pages").  A
 * hint only: where THP is off it changes nothing.  Not in gguf_open: the
 * header parse and --ssd-streaming (which reads experts with pread and
 * keeps the mapping's resident part to the metadata) want small reads. */
void gguf_map_hugepages(const gguf_file *f) {
    if (f && f->owns_map && f->map) (void)madvise((void *)f->map, (size_t)f->size, MADV_HUGEPAGE);
}

void gguf_guard(gguf_file *f) {
    if (f && f->owns_map && f->map && !f->guard) f->guard = mapguard_add(f->map, (size_t)f->size, f->fd);
}

int gguf_fault(const gguf_file *f, uint64_t *off) {
    return f ? mapguard_fault(f->guard, off) : 0;
}

/* The mapping's resident bytes and how many of them the process maps with
 * 2 MB pages, from its entry in /proc/self/smaps ("Rss", "FilePmdMapped").
 * 0, or -1 where there is no mapping or no such file (not Linux, no /proc). */
int gguf_map_pages(const gguf_file *f, uint64_t *resident, uint64_t *huge) {
    *resident = *huge = 0;
    if (!f || !f->owns_map || !f->map) return -1;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return -1;
    char line[512];
    int in = 0, found = 0;
    const uintptr_t start = (uintptr_t)f->map;
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        char c;
        /* a VMA header: "lo-hi perms offset dev inode path" */
        if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3) {
            in = lo == start;
            found |= in;
            continue;
        }
        if (!in) continue;
        unsigned long long kb;
        if (sscanf(line, "Rss: %llu kB", &kb) == 1) *resident = (uint64_t)kb * 1024;
        else if (sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) *huge = (uint64_t)kb * 1024;
    }
    fclose(fp);
    return found ? 0 : -1;
}

gguf_file *gguf_open_mem(const void *data, size_t size, const char *name, char **err) {
    gguf_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "<memory>"))) {
        free(f);
        ds4_set_err(err, DS4_EFORMAT, "out of memory");
        return NULL;
    }
    f->fd = -1;
    f->map = data;
    f->size = size;
    return open_common(f, err);
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv) {
        for (uint64_t i = 0; i < f->n_kv; i++) {
            free(f->kv[i].key);
            if (f->kv[i].type == GGUF_ARRAY) free((void *)f->kv[i].v.arr.str_off);
        }
        free(f->kv);
    }
    if (f->tensors) {
        for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
        free(f->tensors);
    }
    if (f->idx) {
        free(f->idx->kv_slots);
        free(f->idx->t_slots);
        free(f->idx);
    }
    mapguard_remove(f->guard);   /* before the pages go */
    if (f->owns_map && f->map) munmap((void *)f->map, (size_t)f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

/* ------------------------------------------------------------------------ */
/* Typed getters                                                             */
/* ------------------------------------------------------------------------ */

static int is_uint(uint32_t t) { return t == GGUF_U8 || t == GGUF_U16 || t == GGUF_U32 || t == GGUF_U64; }
static int is_sint(uint32_t t) { return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64; }

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -1;
    if (is_sint(kv->type)) { *out = kv->v.i; return 0; }
    if (is_uint(kv->type) && kv->v.u <= (uint64_t)INT64_MAX) { *out = (int64_t)kv->v.u; return 0; }
    return -2;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -1;
    if (is_uint(kv->type)) { *out = kv->v.u; return 0; }
    if (is_sint(kv->type) && kv->v.i >= 0) { *out = (uint64_t)kv->v.i; return 0; }
    return -2;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t v;
    int r = gguf_get_u64(f, key, &v);
    if (r) return r;
    if (v > UINT32_MAX) return -2;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_f64(const gguf_file *f, const char *key, double *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -1;
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64) *out = kv->v.f;
    else if (is_uint(kv->type)) *out = (double)kv->v.u;
    else if (is_sint(kv->type)) *out = (double)kv->v.i;
    else return -2;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    double v;
    int r = gguf_get_f64(f, key, &v);
    if (r) return r;
    /* A finite f64 beyond the f32 range does not fit; NaN/inf pass through
     * (model.c rejects them with a precise message). */
    if (isfinite(v) && fabs(v) > 3.4028234663852886e38) return -2;
    *out = (float)v;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -1;
    if (kv->type == GGUF_BOOL) { *out = kv->v.u != 0; return 0; }
    if (is_uint(kv->type) && kv->v.u <= 1) { *out = (int)kv->v.u; return 0; }
    if (is_sint(kv->type) && (kv->v.i == 0 || kv->v.i == 1)) { *out = (int)kv->v.i; return 0; }
    return -2;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return -1;
    if (kv->type != GGUF_STRING) return -2;
    *out = kv->v.s;
    return 0;
}

int gguf_arr_str(const gguf_kv *kv, uint64_t i, gguf_str *out) {
    if (!kv || kv->type != GGUF_ARRAY || kv->v.arr.type != GGUF_STRING) return -2;
    if (i >= kv->v.arr.n) return -1;
    const uint8_t *p = kv->v.arr.data + kv->v.arr.str_off[i];
    memcpy(&out->len, p, 8);
    out->p = (const char *)p + 8;
    return 0;
}

int gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_ARRAY) return -2;
    uint32_t t = kv->v.arr.type;
    if (!is_uint(t) && !is_sint(t) && t != GGUF_BOOL) return -2;
    if (i >= kv->v.arr.n) return -1;
    gguf_kv tmp = {0};
    load_scalar(t, kv->v.arr.data + i * value_size(t), &tmp);
    if (is_sint(t)) { *out = tmp.v.i; return 0; }
    if (tmp.v.u > (uint64_t)INT64_MAX) return -2;
    *out = (int64_t)tmp.v.u;
    return 0;
}

int gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out) {
    if (!kv || kv->type != GGUF_ARRAY) return -2;
    uint32_t t = kv->v.arr.type;
    if (t == GGUF_STRING || t == GGUF_BOOL) return -2;
    if (i >= kv->v.arr.n) return -1;
    gguf_kv tmp = {0};
    load_scalar(t, kv->v.arr.data + i * value_size(t), &tmp);
    if (t == GGUF_F32 || t == GGUF_F64) *out = tmp.v.f;
    else if (is_sint(t)) *out = (double)tmp.v.i;
    else *out = (double)tmp.v.u;
    return 0;
}

uint64_t gguf_kv_nbytes(const gguf_kv *kv) {
    if (kv->type != GGUF_ARRAY) return kv->type == GGUF_STRING ? 8 + kv->v.s.len : value_size(kv->type);
    uint64_t n = kv->v.arr.n;
    if (kv->v.arr.type != GGUF_STRING) return 12 + n * value_size(kv->v.arr.type);
    if (!n) return 12;
    uint64_t last;
    memcpy(&last, kv->v.arr.data + kv->v.arr.str_off[n - 1], 8);
    return 12 + kv->v.arr.str_off[n - 1] + 8 + last;
}

/* ------------------------------------------------------------------------ */
/* Printing                                                                  */
/* ------------------------------------------------------------------------ */

/* Strings from files are printed quoted with control bytes, quotes and
 * backslashes escaped; valid UTF-8 is passed through. */
static void print_str(FILE *out, const char *p, uint64_t len, uint64_t max) {
    fputc('"', out);
    size_t n = ds4_fput_escaped(out, p, (size_t)len, (size_t)(len < max ? len : max));
    fputc('"', out);
    if (n < len) fprintf(out, "... (%" PRIu64 " bytes)", len);
}

gguf_esc_t gguf_esc(const char *p, size_t n) {
    gguf_esc_t e;
    ds4_escape(e.s, sizeof e.s, p, n);
    return e;
}

static void print_scalar(FILE *out, uint32_t type, const gguf_kv *v) {
    if (is_uint(type)) fprintf(out, "%" PRIu64, v->v.u);
    else if (is_sint(type)) fprintf(out, "%" PRId64, v->v.i);
    else if (type == GGUF_BOOL) fputs(v->v.u ? "true" : "false", out);
    else if (type == GGUF_F32 || type == GGUF_F64) fprintf(out, "%.9g", v->v.f);
}

void gguf_print_value(FILE *out, const gguf_kv *kv, int max_items) {
    if (kv->type == GGUF_STRING) { print_str(out, kv->v.s.p, kv->v.s.len, 160); return; }
    if (kv->type != GGUF_ARRAY) { print_scalar(out, kv->type, kv); return; }
    uint32_t t = kv->v.arr.type;
    uint64_t n = kv->v.arr.n;
    fprintf(out, "%s[%" PRIu64 "] [", value_type_name(t), n);
    uint64_t show = max_items < 0 ? 0 : (uint64_t)max_items;
    if (show > n) show = n;
    for (uint64_t i = 0; i < show; i++) {
        if (i) fputs(", ", out);
        if (t == GGUF_STRING) {
            gguf_str s = {0};
            gguf_arr_str(kv, i, &s);
            print_str(out, s.p, s.len, 40);
        } else {
            gguf_kv tmp = {0};
            load_scalar(t, kv->v.arr.data + i * value_size(t), &tmp);
            print_scalar(out, t, &tmp);
        }
    }
    if (show < n) fputs(show ? ", ..." : "...", out);
    fputc(']', out);
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *name;
    uint32_t n_dims, type;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
} w_tensor;

typedef struct { uint8_t *p; size_t n, cap; } bytes;

struct gguf_writer {
    char *path;
    ds4_afile af;              /* the file, whole or not at all (base/afile.h) */
    FILE *fp;                  /* af.f */
    char *err;                 /* first error; reported by close */
    bytes kv;                  /* serialized metadata entries */
    uint64_t n_kv;
    char **keys;               /* sorted, for duplicate detection */
    size_t n_keys, cap_keys;
    char **tnames;             /* sorted tensor names */
    size_t n_tnames, cap_tnames;
    w_tensor *t;
    size_t n_t, cap_t;
    uint64_t alignment;
    int data_started;
    size_t cur;                /* tensor being written */
    uint64_t cur_done;         /* its bytes written so far */
    uint64_t pos;              /* bytes written to the file */
};

static void w_fail(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_fail(gguf_writer *w, const char *fmt, ...) {
    if (w->err) return;
    char *m = NULL;
    va_list ap;
    va_start(ap, fmt);
    ds4_set_errv(&m, DS4_EIO, fmt, ap);
    va_end(ap);
    ds4_set_err(&w->err, DS4_EIO, "%s: %s", w->path, m ? m : "out of memory");
    free(m);
}

static int b_put(gguf_writer *w, bytes *b, const void *p, size_t n) {
    if (n > SIZE_MAX / 2 - b->n) { w_fail(w, "metadata too large"); return -1; }
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *q = realloc(b->p, nc);
        if (!q) { w_fail(w, "out of memory"); return -1; }
        b->p = q;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

static int b_u32(gguf_writer *w, bytes *b, uint32_t v) { return b_put(w, b, &v, 4); }
static int b_u64(gguf_writer *w, bytes *b, uint64_t v) { return b_put(w, b, &v, 8); }
static int b_str(gguf_writer *w, bytes *b, const char *s, uint64_t len) {
    return b_u64(w, b, len) || b_put(w, b, s, (size_t)len);
}

gguf_writer *gguf_writer_open(const char *path, char **err) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        ds4_set_err(err, DS4_EFORMAT, "%s: out of memory", path);
        free(w);
        return NULL;
    }
    if (ds4_afile_open(&w->af, path, 0644)) {
        ds4_set_err(err, DS4_EFORMAT, "%s: cannot create: %s", path, strerror(errno));
        free(w->path); free(w);
        return NULL;
    }
    w->fp = w->af.f;
    setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

/* Duplicate detection: a sorted array with binary search (insertion is a
 * memmove, fine for the few thousand names a model has). */
static int name_insert(gguf_writer *w, char ***arr, size_t *n, size_t *cap, const char *name,
                       const char *what) {
    size_t lo = 0, hi = *n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp((*arr)[mid], name);
        if (!c) { w_fail(w, "duplicate %s %s", what, GGUF_ESC(name)); return -1; }
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        char **q = realloc(*arr, nc * sizeof *q);
        if (!q) { w_fail(w, "out of memory"); return -1; }
        *arr = q;
        *cap = nc;
    }
    char *d = strdup(name);
    if (!d) { w_fail(w, "out of memory"); return -1; }
    memmove(*arr + lo + 1, *arr + lo, (*n - lo) * sizeof **arr);
    (*arr)[lo] = d;
    (*n)++;
    return 0;
}

static int kv_begin(gguf_writer *w, const char *key, uint32_t type) {
    if (w->err) return -1;
    if (w->data_started) { w_fail(w, "metadata %s added after tensor data started", GGUF_ESC(key)); return -1; }
    size_t len = strlen(key);
    if (!len || len > GGUF_MAX_NAME) { w_fail(w, "invalid metadata key"); return -1; }
    if (name_insert(w, &w->keys, &w->n_keys, &w->cap_keys, key, "metadata key")) return -1;
    if (b_str(w, &w->kv, key, len) || b_u32(w, &w->kv, type)) return -1;
    w->n_kv++;
    return 0;
}

int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) {
    if (!strcmp(key, "general.alignment")) {
        if (!v || (v & (v - 1)) || v > GGUF_MAX_ALIGNMENT) {
            w_fail(w, "general.alignment %u is not a power of two <= %u", v, GGUF_MAX_ALIGNMENT);
            return -1;
        }
        if (!w->data_started && !w->err) w->alignment = v;
    }
    return kv_begin(w, key, GGUF_U32) || b_u32(w, &w->kv, v) ? -1 : 0;
}
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v) {
    return kv_begin(w, key, GGUF_I32) || b_put(w, &w->kv, &v, 4) ? -1 : 0;
}
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v) {
    return kv_begin(w, key, GGUF_U64) || b_u64(w, &w->kv, v) ? -1 : 0;
}
int gguf_w_f32(gguf_writer *w, const char *key, float v) {
    return kv_begin(w, key, GGUF_F32) || b_put(w, &w->kv, &v, 4) ? -1 : 0;
}
int gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    return kv_begin(w, key, GGUF_BOOL) || b_put(w, &w->kv, &b, 1) ? -1 : 0;
}
int gguf_w_str(gguf_writer *w, const char *key, const char *s, size_t len) {
    return kv_begin(w, key, GGUF_STRING) || b_str(w, &w->kv, s, len) ? -1 : 0;
}

int gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    uint64_t es = value_size(elem_type), bytes_n;
    if (!es) { w_fail(w, "metadata %s: bad array element type %u", key, elem_type); return -1; }
    if (__builtin_mul_overflow(es, n, &bytes_n) || bytes_n > SIZE_MAX / 4) {
        w_fail(w, "metadata %s: array too large", key);
        return -1;
    }
    if (kv_begin(w, key, GGUF_ARRAY) || b_u32(w, &w->kv, elem_type) || b_u64(w, &w->kv, n) ||
        b_put(w, &w->kv, data, (size_t)bytes_n))
        return -1;
    return 0;
}

int gguf_w_arr_str(gguf_writer *w, const char *key, const gguf_str *items, uint64_t n) {
    if (kv_begin(w, key, GGUF_ARRAY) || b_u32(w, &w->kv, GGUF_STRING) || b_u64(w, &w->kv, n)) return -1;
    for (uint64_t i = 0; i < n; i++)
        if (b_str(w, &w->kv, items[i].p, items[i].len)) return -1;
    return 0;
}

int gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    uint64_t nb = gguf_kv_nbytes(kv);
    if (kv->type == GGUF_ARRAY) {
        uint32_t et = kv->v.arr.type;
        if (kv_begin(w, kv->key, GGUF_ARRAY) || b_u32(w, &w->kv, et) || b_u64(w, &w->kv, kv->v.arr.n))
            return -1;
        /* The element bytes are contiguous in the source mapping. */
        return b_put(w, &w->kv, kv->v.arr.data, (size_t)(nb - 12));
    }
    if (kv->type == GGUF_STRING) return gguf_w_str(w, kv->key, kv->v.s.p, (size_t)kv->v.s.len);
    if (!strcmp(kv->key, "general.alignment") && kv->type == GGUF_U32)
        return gguf_w_u32(w, kv->key, (uint32_t)kv->v.u);
    uint8_t raw[8];
    switch (kv->type) {
    case GGUF_F32: { float x = (float)kv->v.f; memcpy(raw, &x, 4); break; }
    case GGUF_F64: memcpy(raw, &kv->v.f, 8); break;
    default:
        /* Integers: the low bytes of the (sign-extended) value are the
         * little-endian encoding at any width. */
        if (is_sint(kv->type)) memcpy(raw, &kv->v.i, 8); else memcpy(raw, &kv->v.u, 8);
    }
    return kv_begin(w, kv->key, kv->type) || b_put(w, &w->kv, raw, (size_t)nb) ? -1 : 0;
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type) {
    if (w->err) return -1;
    if (w->data_started) { w_fail(w, "tensor %s added after tensor data started", name); return -1; }
    size_t len = strlen(name);
    if (!len || len > GGUF_MAX_NAME) { w_fail(w, "invalid tensor name"); return -1; }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) { w_fail(w, "tensor %s: %u dims", name, n_dims); return -1; }
    if (!tinfo(type)) { w_fail(w, "tensor %s: unknown type %u", name, type); return -1; }
    w_tensor t = {0};
    t.n_dims = n_dims;
    t.type = type;
    uint64_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    int bad = 0;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) bad |= t.ne[d] == 0 || t.ne[d] > (uint64_t)INT64_MAX;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) bad |= __builtin_mul_overflow(rows, t.ne[d], &rows);
    uint64_t rs = ggml_row_size(type, t.ne[0]);
    if (bad || !rs || __builtin_mul_overflow(rows, rs, &t.nbytes)) {
        w_fail(w, "tensor %s: invalid dims for type %s", name, ggml_type_name(type));
        return -1;
    }
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? w->cap_t * 2 : 64;
        w_tensor *q = realloc(w->t, nc * sizeof *q);
        if (!q) { w_fail(w, "out of memory"); return -1; }
        w->t = q;
        w->cap_t = nc;
    }
    if (name_insert(w, &w->tnames, &w->n_tnames, &w->cap_tnames, name, "tensor name")) return -1;
    t.name = strdup(name);
    if (!t.name) { w_fail(w, "out of memory"); return -1; }
    w->t[w->n_t++] = t;
    return 0;
}

static int w_raw(gguf_writer *w, const void *p, size_t n) {
    if (w->err) return -1;
    if (n && fwrite(p, 1, n, w->fp) != n) {
        w_fail(w, "write failed: %s", strerror(errno));
        return -1;
    }
    w->pos += n;
    return 0;
}

static int w_pad(gguf_writer *w) {
    static const uint8_t zero[64];
    uint64_t pad = (w->alignment - w->pos % w->alignment) % w->alignment;
    while (pad) {
        size_t k = pad < sizeof zero ? (size_t)pad : sizeof zero;
        if (w_raw(w, zero, k)) return -1;
        pad -= k;
    }
    return 0;
}

int gguf_writer_begin_data(gguf_writer *w) {
    if (w->err) return -1;
    if (w->data_started) return 0;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t padded = (w->t[i].nbytes + w->alignment - 1) / w->alignment * w->alignment;
        if (__builtin_add_overflow(off, padded, &off)) { w_fail(w, "tensor data too large"); return -1; }
    }
    bytes h = {0};
    int r = b_u32(w, &h, GGUF_MAGIC) || b_u32(w, &h, 3) || b_u64(w, &h, w->n_t) || b_u64(w, &h, w->n_kv);
    r = r || w_raw(w, h.p, h.n) || w_raw(w, w->kv.p, w->kv.n);
    h.n = 0;
    for (size_t i = 0; i < w->n_t && !r; i++) {
        const w_tensor *t = &w->t[i];
        r = b_str(w, &h, t->name, strlen(t->name)) || b_u32(w, &h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && !r; d++) r = b_u64(w, &h, t->ne[d]);
        r = r || b_u32(w, &h, t->type) || b_u64(w, &h, t->offset);
    }
    r = r || w_raw(w, h.p, h.n) || w_pad(w);
    free(h.p);
    w->data_started = 1;
    w->cur = 0;
    w->cur_done = 0;
    return r ? -1 : 0;
}

int gguf_writer_write(gguf_writer *w, const void *data, size_t len) {
    if (!w->data_started && gguf_writer_begin_data(w)) return -1;
    const uint8_t *p = data;
    while (len) {
        if (w->err) return -1;
        if (w->cur >= w->n_t) { w_fail(w, "more tensor data written than declared"); return -1; }
        w_tensor *t = &w->t[w->cur];
        uint64_t left = t->nbytes - w->cur_done;
        size_t k = len < left ? len : (size_t)left;
        if (w_raw(w, p, k)) return -1;
        p += k;
        len -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            if (w_pad(w)) return -1;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return w->err ? -1 : 0;
}

static void w_free(gguf_writer *w) {
    for (size_t i = 0; i < w->n_keys; i++) free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_tnames; i++) free(w->tnames[i]);
    free(w->tnames);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w->path);
    free(w->err);
    free(w);
}

int gguf_writer_close(gguf_writer *w, char **err) {
    if (!w) return -1;
    if (!w->data_started) gguf_writer_begin_data(w);
    if (!w->err && w->cur < w->n_t)
        w_fail(w, "tensor %s got %" PRIu64 " of its %" PRIu64 " bytes", w->t[w->cur].name,
               w->cur_done, w->t[w->cur].nbytes);
    /* (a device or FIFO target is written in place: nothing to sync) */
    if (!w->err && (fflush(w->fp) || (w->af.tmp && fsync(fileno(w->fp)))))
        w_fail(w, "write failed: %s", strerror(errno));
    /* Drop the file from the page cache (its pages are clean after the
     * fsync).  Written pages stay cached in small folios, and a model
     * mapped from them runs on 4 KB pages: TLB misses all through the
     * weight sweeps (medium q2 on a Zen 5 VM: prefill 79-100 against 147
     * tok/s).  Read back from disk, the kernel caches the file in large
     * folios, which the model loader's mapping (gguf_map_hugepages) gets
     * as 2 MB pages. */
    if (!w->err && w->af.tmp) (void)posix_fadvise(fileno(w->fp), 0, 0, POSIX_FADV_DONTNEED);
    w->fp = NULL;
    if (w->err) ds4_afile_abort(&w->af);
    else if (ds4_afile_commit(&w->af)) w_fail(w, "write failed: %s", strerror(errno));
    if (w->err) {
        ds4_set_err(err, DS4_EFORMAT, "%s", w->err);
        w_free(w);
        return -1;
    }
    w_free(w);
    return 0;
}

void gguf_writer_abort(gguf_writer *w) {
    if (!w) return;
    ds4_afile_abort(&w->af);
    w_free(w);
}

void ds4_gguf_fingerprint(const gguf_file *f, uint8_t out[20]) {
    ds4_sha1(f->map, (size_t)f->dir_end, out);
}
