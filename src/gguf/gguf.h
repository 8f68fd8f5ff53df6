/*
 * gguf.h -- the GGUF v3 container: read-only mmap parsing and a streaming
 * writer.
 *
 * Owns: the file mapping (and its SIGBUS guard on request, mapguard.h), the
 * metadata table, the tensor directory, bounds checking of every count,
 * length, offset and size against the file.
 * Must not: interpret model semantics (that is model.c), copy tensor data,
 * or allocate sizes taken from the file before checking them against the
 * file size.
 */
#ifndef DS4_GGUF_H
#define DS4_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Metadata value types (GGUF spec). */
enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
    GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8,
    GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_NTYPES
};

/* Tensor storage types used by ds4 files (ggml ids). */
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q8_0 = 8, GGML_Q2_K = 10,
    GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14,
    GGML_Q8_K = 15, GGML_IQ2_XXS = 16, GGML_IQ4_XS = 23, GGML_I8 = 24,
    GGML_I16 = 25, GGML_I32 = 26, GGML_I64 = 27, GGML_F64 = 28,
    GGML_BF16 = 30, GGML_MXFP4 = 39,
};

typedef struct {
    const char *p;     /* points into the mapping: NOT NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct {
    char *key;                 /* NUL-terminated copy */
    uint32_t type;             /* GGUF_* */
    union {
        uint64_t u;            /* U8..U64, BOOL */
        int64_t i;             /* I8..I64 */
        double f;              /* F32, F64 */
        gguf_str s;            /* STRING */
        struct {
            uint32_t type;     /* element type (never ARRAY: nested arrays are rejected) */
            uint64_t n;
            const uint8_t *data;   /* first element in the mapping */
            const uint64_t *str_off; /* STRING arrays: offset of each element's
                                        u64 length field from `data`
                                        (malloc'd index) */
        } arr;
    } v;
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct {
    char *name;                /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];  /* unused dims are 1 */
    uint32_t type;             /* GGML_* */
    uint64_t offset;           /* relative to the data section */
    uint64_t nbytes;
    const void *data;          /* into the mapping */
} gguf_tensor;

struct gguf_index;             /* private lookup tables (gguf.c) */

typedef struct gguf_file {
    char *path;                /* as given to gguf_open (used in messages) */
    int fd;                    /* -1 for gguf_open_mem */
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;      /* start of the tensor data section */
    uint64_t dir_end;          /* end of the tensor directory (before padding) */
    int owns_map;              /* 1: munmap at close (gguf_open) */
    int guard;                 /* mapguard handle (gguf_guard), 0 = none */
    struct gguf_index *idx;
} gguf_file;

/* Element size and block size of a ggml type; 0 for unknown types. */
uint64_t ggml_type_size(uint32_t type);
uint64_t ggml_block_size(uint32_t type);
const char *ggml_type_name(uint32_t type);
/* Bytes of one row of `ne0` elements; 0 if ne0 is not a multiple of the
 * block size or the type is unknown. */
uint64_t ggml_row_size(uint32_t type, uint64_t ne0);

/* Open and fully validate the container (not the model semantics).  On
 * error returns NULL and a message naming the file and the problem. */
gguf_file *gguf_open(const char *path, char **err);
/* Same checks on a caller-owned buffer that must outlive the gguf_file
 * (fuzzing, tests).  `name` is used in messages. */
gguf_file *gguf_open_mem(const void *data, size_t size, const char *name,
                         char **err);
void gguf_close(gguf_file *f);
/* Ask for 2 MB pages over a gguf_open mapping (MADV_HUGEPAGE; the model
 * loader, for the weights it will sweep). */
void gguf_map_hugepages(const gguf_file *f);
/* Guard a gguf_open mapping against SIGBUS (mapguard.h): a page lost to
 * a truncation of the file, or unreadable, then reads as zeros and is
 * recorded instead of killing the process; gguf_fault tells.  The model
 * loader guards its files and checks after every forward pass. */
void gguf_guard(gguf_file *f);
/* 1 and the file offset of the first byte that faulted since gguf_guard;
 * 0 when none did (or the mapping is not guarded). */
int gguf_fault(const gguf_file *f, uint64_t *off);
/* Resident bytes of a gguf_open mapping and those mapped with 2 MB pages
 * (Linux /proc/self/smaps); -1 where unknown (gguf_open_mem, no /proc). */
int gguf_map_pages(const gguf_file *f, uint64_t *resident, uint64_t *huge);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters.  Return 0 on success, -1 if the key is missing, -2 if the
 * type is incompatible or the value does not fit (e.g. negative into u32,
 * NaN into a float that must be finite is NOT checked here). */
int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f64(const gguf_file *f, const char *key, double *out);  /* floats and ints */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);   /* floats and ints */
int gguf_get_bool(const gguf_file *f, const char *key, int *out);    /* BOOL, or int 0/1 */
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Array accessors on a kv of type ARRAY. */
int gguf_arr_str(const gguf_kv *kv, uint64_t i, gguf_str *out);
int gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out); /* any int type */
int gguf_arr_f64(const gguf_kv *kv, uint64_t i, double *out);  /* F32/F64/ints */

/* Bytes of a kv's encoded value (after the key and type fields). */
uint64_t gguf_kv_nbytes(const gguf_kv *kv);

/* Print a value (scalars; arrays abbreviated) for --inspect; strings are
 * quoted and escaped (ds4_escape). */
void gguf_print_value(FILE *out, const gguf_kv *kv, int max_items);

/* Keys, tensor names and string values come from the file: anything that
 * prints them goes through ds4_escape (ds4.h) so control bytes and ESC
 * sequences cannot reach a terminal or forge a line.  gguf_esc(p, n).s is
 * that form (cut with "..." past ~250 bytes) in a temporary that lives
 * until the end of the enclosing full expression: a printf argument. */
typedef struct { char s[256]; } gguf_esc_t;
gguf_esc_t gguf_esc(const char *p, size_t n);
#define GGUF_ESC(cstr) (gguf_esc((cstr), strlen(cstr)).s)

/* ---------------------------------------------------------------------- */
/* Writer: streams a GGUF to disk without holding tensor data in memory.   */
/* Usage: add all kv and tensor infos, then gguf_writer_begin_data(), then */
/* write each tensor's bytes in order (any number of chunks per tensor),   */
/* then gguf_writer_close().                                               */
/* ---------------------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_open(const char *path, char **err);
int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v);
int gguf_w_f32(gguf_writer *w, const char *key, float v);
int gguf_w_bool(gguf_writer *w, const char *key, int v);
int gguf_w_str(gguf_writer *w, const char *key, const char *s, size_t len);
/* Arrays: elem_type is a GGUF_* scalar type; data holds n packed elements. */
int gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type,
               const void *data, uint64_t n);
int gguf_w_arr_str(gguf_writer *w, const char *key, const gguf_str *items,
                   uint64_t n);
/* Copy a kv verbatim from another file (used to copy tokenizer metadata). */
int gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv);
int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t n_dims,
                  const uint64_t *ne, uint32_t type);
int gguf_writer_begin_data(gguf_writer *w);
int gguf_writer_write(gguf_writer *w, const void *data, size_t len);
/* The file is written to "<path>.tmp"; close pads, checks every tensor got
 * exactly its bytes, fsyncs and renames it to `path`, so a partial file never
 * appears under the final name.  Errors in any earlier call are sticky and
 * reported (with the first message) by close, which then removes the
 * temporary file.  gguf_w_u32("general.alignment", a) sets the alignment. */
int gguf_writer_close(gguf_writer *w, char **err);
void gguf_writer_abort(gguf_writer *w);   /* closes and unlinks */

/* SHA-1 over the header, metadata and tensor directory bytes of a GGUF
 * (bytes [0, dir_end): not the tensor data).  Identifies a file's layout
 * and quantization; ds4_model_fingerprint() returns this. */
void ds4_gguf_fingerprint(const gguf_file *f, uint8_t out[20]);

#endif /* DS4_GGUF_H */
