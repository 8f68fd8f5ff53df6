/*
 * hash.h -- SHA-1, SHA-256 (FIPS 180-4) and XXH64 (a fast 64-bit checksum
 * for large buffers), all incremental; and lower-case hex.
 *
 * Owns: these algorithms only.  Must not: know about files (the GGUF
 * layout fingerprint is gguf.c's, on top of ds4_sha1).
 */
#ifndef DS4_HASH_H
#define DS4_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[5];
    uint64_t len;              /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} ds4_sha1_ctx;

typedef struct {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t nbuf;
} ds4_sha256_ctx;

void ds4_sha1_init(ds4_sha1_ctx *c);
void ds4_sha1_update(ds4_sha1_ctx *c, const void *data, size_t len);
void ds4_sha1_final(ds4_sha1_ctx *c, uint8_t out[20]);
void ds4_sha1(const void *data, size_t len, uint8_t out[20]);

void ds4_sha256_init(ds4_sha256_ctx *c);
void ds4_sha256_update(ds4_sha256_ctx *c, const void *data, size_t len);
void ds4_sha256_final(ds4_sha256_ctx *c, uint8_t out[32]);
void ds4_sha256(const void *data, size_t len, uint8_t out[32]);

/* XXH64 (Yann Collet's xxHash, 64-bit variant), bit-compatible with the
 * reference: ds4_xxh64("", 0, 0) == 0xef46db3751d8e999.  Several GB/s. */
typedef struct {
    uint64_t v[4];
    uint64_t total;
    uint64_t seed;
    uint8_t buf[32];
    size_t nbuf;
} ds4_xxh64_ctx;

uint64_t ds4_xxh64(const void *data, size_t len, uint64_t seed);
void ds4_xxh64_init(ds4_xxh64_ctx *c, uint64_t seed);
void ds4_xxh64_update(ds4_xxh64_ctx *c, const void *data, size_t len);
uint64_t ds4_xxh64_digest(const ds4_xxh64_ctx *c);   /* does not consume the state */

/* Lower-case hex of n bytes into out (2n+1 chars incl. NUL). */
void ds4_hex(const uint8_t *d, size_t n, char *out);


#endif /* DS4_HASH_H */
