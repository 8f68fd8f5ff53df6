/*
 * fuzz_http1.c -- libFuzzer target for ds4-server's HTTP/1.1 parsers
 * (server/http1_parse.c): the request head and the chunked body decoder.
 *
 * Owns: only this harness.  Build and run (from the repo root; fuzz/run.sh
 * does both):
 *
 *   clang -g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
 *     -Isrc fuzz/fuzz_http1.c -o build/fuzz_http1
 *   build/fuzz_http1 -max_total_time=60 -max_len=4096 [corpus_dir]
 *
 * Checked on every input (abort() on violation, so libFuzzer reports it):
 *   - no crash / sanitizer report;
 *   - http1_head_end gives the same answer fed whole and byte by byte;
 *   - a head that parses has a method, a target, a path, and field values
 *     without control characters (HTAB aside), at most one Host /
 *     Content-Length / Transfer-Encoding, never both of the last two;
 *   - the chunked decoder gives the same status, data and consumed bytes
 *     fed whole and in pieces of 1..16 bytes, and never more data than
 *     input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../server/http1_parse.c"

static void check(int ok) { if (!ok) abort(); }

static int count(const http1_head *h, const char *name) {
    int n = 0;
    for (int i = 0; i < h->n_fields; i++) n += !strcasecmp(h->fields[i].name, name);
    return n;
}

static int decode(const uint8_t *in, size_t n, size_t step, uint64_t max, char *out, size_t *on,
                  size_t *used_total) {
    http1_chunked d;
    memset(&d, 0, sizeof d);
    char *b = malloc(n + 1);
    char why[600];
    size_t o = 0, i = 0;
    int st = 0;
    while (i < n && !http1_chunked_done(&d)) {
        size_t k = step && n - i > step ? step : n - i;
        memcpy(b, in + i, k);
        size_t used = 0, got = 0;
        st = http1_chunked_feed(&d, b, k, max, &used, &got, why, sizeof why);
        check(used <= k && got <= used);
        memcpy(out + o, b, got);
        o += got;
        i += used;
        if (st) break;
        check(used == k || http1_chunked_done(&d));
    }
    free(b);
    *on = o;
    *used_total = i;
    return st ? st : http1_chunked_done(&d) ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    if (mode & 1) {
        /* the chunked decoder */
        char *o1 = malloc(size + 1), *o2 = malloc(size + 1);
        size_t n1, n2, u1, u2;
        uint64_t max = (mode >> 1) & 1 ? 64 : UINT64_MAX;
        int s1 = decode(data, size, 0, max, o1, &n1, &u1);
        int s2 = decode(data, size, 1 + (mode >> 4), max, o2, &n2, &u2);
        check(s1 == s2 && n1 == n2 && !memcmp(o1, o2, n1));
        if (s1 == 0) check(u1 == u2);
        check(n1 <= size);
        free(o1);
        free(o2);
        return 0;
    }
    /* the head */
    size_t pos = 0, pos2 = 0;
    long whole = http1_head_end((const char *)data, size, &pos);
    long inc = 0;
    for (size_t k = 1; k <= size && inc == 0; k++) inc = http1_head_end((const char *)data, k, &pos2);
    check(whole == inc || (inc < 0 && whole < 0));
    if (whole <= 0) return 0;
    size_t n = (size_t)whole;
    char *buf = malloc(n), *path = malloc(n + 1), why[600];
    memcpy(buf, data, n);
    int lines = 1;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    http1_field *f = malloc((size_t)lines * sizeof *f);
    http1_head h;
    int st = http1_parse_head(buf, n, path, &h, f, lines, why, sizeof why);
    check(strlen(why) < sizeof why);
    if (st == 0) {
        check(h.method && h.target && h.path && *h.method && *h.target);
        for (int i = 0; i < h.n_fields; i++) {
            check(*h.fields[i].name != 0);
            for (const unsigned char *v = (const unsigned char *)h.fields[i].value; *v; v++)
                check(*v == '\t' || (*v >= 0x20 && *v != 0x7f));
        }
        check(count(&h, "Host") <= 1 && count(&h, "Content-Length") <= 1 &&
              count(&h, "Transfer-Encoding") <= 1);
        check(!(h.chunked && h.has_length));
    } else {
        check(st == 400 || st == 413 || st == 414 || st == 431 || st == 501 || st == 505);
        check(why[0] != 0);
    }
    free(buf);
    free(path);
    free(f);
    return 0;
}
