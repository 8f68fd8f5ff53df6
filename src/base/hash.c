/*
 * hash.c -- SHA-1 and SHA-256 written from FIPS 180-4, XXH64 written from
 * the xxHash specification (doc/xxhash_spec.md of Cyan4973/xxHash), and the
 * GGUF layout fingerprint.
 *
 * Owns: the hash algorithms (implements hash.h).  Must not: do I/O.
 */
#include <string.h>

#include "base/hash.h"

static inline uint32_t rol32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
static inline uint32_t ror32(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }
static inline uint64_t rol64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static inline uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Shared Merkle-Damgard buffering for the two SHA variants: 64-byte blocks,
 * message length in bits appended big-endian after 0x80 and zero padding. */
typedef void (*block_fn)(uint32_t *h, const uint8_t *b);

static void md_update(uint32_t *h, uint8_t *buf, size_t *nbuf, uint64_t *len,
                      block_fn fn, const void *data, size_t n) {
    const uint8_t *p = data;
    *len += n;
    if (*nbuf) {
        size_t k = 64 - *nbuf < n ? 64 - *nbuf : n;
        memcpy(buf + *nbuf, p, k);
        *nbuf += k; p += k; n -= k;
        if (*nbuf < 64) return;
        fn(h, buf);
        *nbuf = 0;
    }
    for (; n >= 64; p += 64, n -= 64) fn(h, p);
    memcpy(buf, p, n);
    *nbuf = n;
}

static void md_final(uint32_t *h, uint8_t *buf, size_t nbuf, uint64_t len, block_fn fn) {
    uint64_t bits = len * 8;
    buf[nbuf++] = 0x80;
    if (nbuf > 56) {
        memset(buf + nbuf, 0, 64 - nbuf);
        fn(h, buf);
        nbuf = 0;
    }
    memset(buf + nbuf, 0, 56 - nbuf);
    for (int i = 0; i < 8; i++) buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    fn(h, buf);
}

/* ---- SHA-1 (FIPS 180-4 §6.1) ------------------------------------------- */

static void sha1_block(uint32_t *h, const uint8_t *b) {
    uint32_t w[80];
    for (int t = 0; t < 16; t++) w[t] = be32(b + 4 * t);
    for (int t = 16; t < 80; t++) w[t] = rol32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    uint32_t a = h[0], bb = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; t++) {
        uint32_t f, k;
        if (t < 20) { f = (bb & c) | (~bb & d); k = 0x5a827999; }
        else if (t < 40) { f = bb ^ c ^ d; k = 0x6ed9eba1; }
        else if (t < 60) { f = (bb & c) | (bb & d) | (c & d); k = 0x8f1bbcdc; }
        else { f = bb ^ c ^ d; k = 0xca62c1d6; }
        uint32_t tmp = rol32(a, 5) + f + e + k + w[t];
        e = d; d = c; c = rol32(bb, 30); bb = a; a = tmp;
    }
    h[0] += a; h[1] += bb; h[2] += c; h[3] += d; h[4] += e;
}

void ds4_sha1_init(ds4_sha1_ctx *c) {
    static const uint32_t iv[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->nbuf = 0;
}

void ds4_sha1_update(ds4_sha1_ctx *c, const void *data, size_t len) {
    md_update(c->h, c->buf, &c->nbuf, &c->len, sha1_block, data, len);
}

void ds4_sha1_final(ds4_sha1_ctx *c, uint8_t out[20]) {
    md_final(c->h, c->buf, c->nbuf, c->len, sha1_block);
    for (int i = 0; i < 5; i++) put_be32(out + 4 * i, c->h[i]);
}

void ds4_sha1(const void *data, size_t len, uint8_t out[20]) {
    ds4_sha1_ctx c;
    ds4_sha1_init(&c);
    ds4_sha1_update(&c, data, len);
    ds4_sha1_final(&c, out);
}

/* ---- SHA-256 (FIPS 180-4 §6.2) ----------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static void sha256_block(uint32_t *h, const uint8_t *b) {
    uint32_t w[64];
    for (int t = 0; t < 16; t++) w[t] = be32(b + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = ror32(w[t - 15], 7) ^ ror32(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = ror32(w[t - 2], 17) ^ ror32(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], bb = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = hh + S1 + ch + K256[t] + w[t];
        uint32_t S0 = ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22);
        uint32_t maj = (a & bb) ^ (a & c) ^ (bb & c);
        uint32_t t2 = S0 + maj;
        hh = g; g = f; f = e; e = d + t1; d = c; c = bb; bb = a; a = t1 + t2;
    }
    h[0] += a; h[1] += bb; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void ds4_sha256_init(ds4_sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->nbuf = 0;
}

void ds4_sha256_update(ds4_sha256_ctx *c, const void *data, size_t len) {
    md_update(c->h, c->buf, &c->nbuf, &c->len, sha256_block, data, len);
}

void ds4_sha256_final(ds4_sha256_ctx *c, uint8_t out[32]) {
    md_final(c->h, c->buf, c->nbuf, c->len, sha256_block);
    for (int i = 0; i < 8; i++) put_be32(out + 4 * i, c->h[i]);
}

void ds4_sha256(const void *data, size_t len, uint8_t out[32]) {
    ds4_sha256_ctx c;
    ds4_sha256_init(&c);
    ds4_sha256_update(&c, data, len);
    ds4_sha256_final(&c, out);
}

/* ---- XXH64 ------------------------------------------------------------- */

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t xx_round(uint64_t acc, uint64_t lane) {
    acc += lane * P2;
    acc = rol64(acc, 31);
    return acc * P1;
}

static inline uint64_t xx_merge(uint64_t acc, uint64_t v) {
    acc ^= xx_round(0, v);
    return acc * P1 + P4;
}

/* Consumes the remaining < 32 bytes and applies the avalanche. */
static uint64_t xx_finish(uint64_t h, const uint8_t *p, size_t n) {
    for (; n >= 8; p += 8, n -= 8) h = rol64(h ^ xx_round(0, le64(p)), 27) * P1 + P4;
    if (n >= 4) { h = rol64(h ^ (uint64_t)le32(p) * P1, 23) * P2 + P3; p += 4; n -= 4; }
    for (; n; p++, n--) h = rol64(h ^ (uint64_t)*p * P5, 11) * P1;
    h ^= h >> 33; h *= P2;
    h ^= h >> 29; h *= P3;
    h ^= h >> 32;
    return h;
}

static uint64_t xx_converge(const uint64_t v[4]) {
    uint64_t h = rol64(v[0], 1) + rol64(v[1], 7) + rol64(v[2], 12) + rol64(v[3], 18);
    for (int i = 0; i < 4; i++) h = xx_merge(h, v[i]);
    return h;
}

/* Processes whole 32-byte stripes; returns bytes consumed. */
static size_t xx_stripes(uint64_t v[4], const uint8_t *p, size_t n) {
    uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
    size_t done = 0;
    for (; n - done >= 32; done += 32) {
        a = xx_round(a, le64(p + done));
        b = xx_round(b, le64(p + done + 8));
        c = xx_round(c, le64(p + done + 16));
        d = xx_round(d, le64(p + done + 24));
    }
    v[0] = a; v[1] = b; v[2] = c; v[3] = d;
    return done;
}

void ds4_xxh64_init(ds4_xxh64_ctx *c, uint64_t seed) {
    c->seed = seed;
    c->v[0] = seed + P1 + P2;
    c->v[1] = seed + P2;
    c->v[2] = seed;
    c->v[3] = seed - P1;
    c->total = 0;
    c->nbuf = 0;
}

void ds4_xxh64_update(ds4_xxh64_ctx *c, const void *data, size_t len) {
    const uint8_t *p = data;
    c->total += len;
    if (c->nbuf) {
        size_t k = 32 - c->nbuf < len ? 32 - c->nbuf : len;
        memcpy(c->buf + c->nbuf, p, k);
        c->nbuf += k; p += k; len -= k;
        if (c->nbuf < 32) return;
        xx_stripes(c->v, c->buf, 32);
        c->nbuf = 0;
    }
    size_t done = xx_stripes(c->v, p, len);
    memcpy(c->buf, p + done, len - done);
    c->nbuf = len - done;
}

uint64_t ds4_xxh64_digest(const ds4_xxh64_ctx *c) {
    uint64_t h = c->total >= 32 ? xx_converge(c->v) : c->seed + P5;
    return xx_finish(h + c->total, c->buf, c->nbuf);
}

uint64_t ds4_xxh64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t h;
    size_t done = 0;
    if (len >= 32) {
        uint64_t v[4] = {seed + P1 + P2, seed + P2, seed, seed - P1};
        done = xx_stripes(v, p, len);
        h = xx_converge(v);
    } else {
        h = seed + P5;
    }
    return xx_finish(h + (uint64_t)len, p + done, len - done);
}

/* ---- misc -------------------------------------------------------------- */

void ds4_hex(const uint8_t *d, size_t n, char *out) {
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * n] = 0;
}
