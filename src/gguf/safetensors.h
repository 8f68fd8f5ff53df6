/*
 * safetensors.h -- read-only access to a Hugging Face checkpoint directory:
 * safetensors shards (mmap'd), the shard index, and the element decoders of
 * the dtypes DeepSeek ships (FP8 E4M3, E8M0 scales, packed FP4 E2M1, BF16).
 *
 * Owns: parsing and validating every shard header (8-byte little-endian
 * length, JSON, raw data) against the file size, the name -> tensor lookup
 * across shards, the index's weight_map consistency, element decoding.
 * Must not: know model semantics (which HF tensor becomes which GGUF
 * tensor is tools/ds4_quantize.c), allocate sizes taken from a file before
 * checking them against that file, or copy tensor data (callers read the
 * mapping and call st_release when done, to keep the resident set small).
 * The layouts are documented in docs/CHECKPOINT.md.
 */
#ifndef DS4_SAFETENSORS_H
#define DS4_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* safetensors dtypes ds4 reads.  ST_I8/ST_U8 also carry DeepSeek's packed
 * FP4 experts (two E2M1 codes a byte); which one a tensor is follows from
 * its name and its ".scale" sibling, not from the dtype. */
typedef enum {
    ST_F32, ST_F16, ST_BF16, ST_F8_E4M3, ST_F8_E8M0, ST_I8, ST_U8, ST_I32, ST_I64, ST_NDTYPES
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    const uint8_t *data;   /* into the shard's mapping */
    int shard;             /* index into the checkpoint's shard list */
} st_tensor;

typedef struct st_checkpoint st_checkpoint;

/* Opens DIR: with model.safetensors.index.json, every shard its weight_map
 * names (a missing shard, a tensor the index places in a shard that does
 * not hold it, or one tensor in two shards is an error); without an index,
 * the single DIR/model.safetensors.  Every header is validated: length
 * within the file, JSON object, known dtype, shape product x element size
 * == data_offsets span, spans inside the data section and not overlapping.
 * On error returns NULL and *err (malloc'd) names the file and the problem. */
st_checkpoint *st_open_dir(const char *dir, char **err);
void st_close(st_checkpoint *c);

const st_tensor *st_find(const st_checkpoint *c, const char *name);
size_t st_count(const st_checkpoint *c);
const st_tensor *st_at(const st_checkpoint *c, size_t i);
const char *st_shard_path(const st_checkpoint *c, int shard);
uint64_t st_total_bytes(const st_checkpoint *c);   /* sum of all tensors' bytes */

/* Drops the tensor's pages from this process's resident set (they stay in
 * the page cache); call after a tensor is converted so memory stays bounded. */
void st_release(const st_tensor *t);
/* The same for bytes [off, off + len) of the tensor (large tensors are
 * released chunk by chunk). */
void st_release_range(const st_tensor *t, uint64_t off, uint64_t len);

const char *st_dtype_name(st_dtype d);
/* Parses a safetensors dtype string; -1 if unknown. */
int st_dtype_parse(const char *s);
/* Bytes of one element (FP4-in-I8 counts 1 byte per packed pair). */
size_t st_dtype_size(st_dtype d);

/* Element decoders. */
float st_e4m3_to_f32(uint8_t b);    /* E4M3FN: bias 7, no inf, 0x7f/0xff NaN */
float st_e8m0_to_f32(uint8_t b);    /* 2^(b-127); 255 is NaN */
float st_bf16_to_f32(uint16_t h);
/* E2M1 code (0..15, bit 3 sign) -> {0, .5, 1, 1.5, 2, 3, 4, 6} with sign. */
float st_e2m1_to_f32(unsigned code);

/* Encoders (used by ds4-synth --hf-out and the tests): round to nearest,
 * ties to even; x must be finite.  E4M3 saturates at +-448. */
uint8_t st_f32_to_e4m3(float x);
unsigned st_f32_to_e2m1(float x);   /* saturates at +-6 */
uint16_t st_f32_to_bf16(float x);

#endif /* DS4_SAFETENSORS_H */
