/*
 * test_http1.c -- the server's strict HTTP/1.1 parsers (server/http1_parse.c,
 * compiled in here: it uses only libc):
 *   - http1_head_end finds a head's end the same fed whole or byte by byte,
 *     and refuses a bare LF;
 *   - http1_parse_head: the request line, the target forms (origin with a
 *     %XX-decoded path and a query, absolute, asterisk), fields with OWS,
 *     the framing decisions (Content-Length, chunked, keep-alive,
 *     100-continue), and a 400/505 with the right reason for every framing
 *     ambiguity (duplicates, TE + CL, codings, NUL/CR/CTL, obs-fold, ...);
 *   - http1_chunked_feed: the same body fed whole and byte by byte, chunk
 *     extensions and trailers, the bytes of the next request left alone,
 *     sizes past 64 bits (400) or past the limit (413), broken CRLFs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/http1_parse.c"

#include "testutil.h"

static http1_field F[64];
static char buf[8192], path[8192], why[600];
static http1_head H;

/* Parse a complete head given as a string; the status (0 = fine). */
static int parse(const char *head) {
    size_t n = strlen(head);
    memcpy(buf, head, n);
    size_t pos = 0;
    long e = http1_head_end(buf, n, &pos);
    if (e < 0) { snprintf(why, sizeof why, "bare LF"); return 400; }
    if (e == 0) { snprintf(why, sizeof why, "incomplete"); return -1; }
    return http1_parse_head(buf, (size_t)e, path, &H, F, 64, why, sizeof why);
}

static void refused(const char *head, int status, const char *reason) {
    int st = parse(head);
    CHECK(st == status, "%d, not %d, for %s", st, status, head);
    CHECK(strstr(why, reason) != NULL, "reason '%s' lacks '%s' (%s)", why, reason, head);
}

/* Decode a chunked body fed in pieces of `step` bytes (0 = whole). */
static int chunked(const char *in, size_t n, size_t step, uint64_t max, char *out, size_t *on,
                   size_t *used_total) {
    http1_chunked d;
    memset(&d, 0, sizeof d);
    static char b[8192];
    size_t o = 0, i = 0;
    int st = 0;
    while (i < n && !http1_chunked_done(&d)) {
        size_t k = step && n - i > step ? step : n - i;
        memcpy(b, in + i, k);
        size_t used = 0, got = 0;
        st = http1_chunked_feed(&d, b, k, max, &used, &got, why, sizeof why);
        memcpy(out + o, b, got);
        o += got;
        i += used;
        if (st) break;
        if (used < k && !http1_chunked_done(&d)) { st = -2; break; }   /* must take all it can */
    }
    *on = o;
    *used_total = i;
    return st ? st : http1_chunked_done(&d) ? 0 : -1;
}

int main(void) {
    /* ---- the end of a head ---- */
    const char *h1 = "POST /v1/chat/completions?beta=true HTTP/1.1\r\nHost: localhost:8000\r\n"
                     "Content-Type:application/json \r\nContent-Length: 2\r\n\r\n{}";
    size_t pos = 0;
    long whole = http1_head_end(h1, strlen(h1), &pos);
    CHECK(whole == (long)strlen(h1) - 2, "head end %ld", whole);
    pos = 0;
    long inc = 0;
    for (size_t n = 1; n <= strlen(h1) && !inc; n++) inc = http1_head_end(h1, n, &pos);
    CHECK(inc == whole, "byte by byte %ld vs %ld", inc, whole);
    pos = 0;
    CHECK(http1_head_end("GET / HTTP/1.1\nHost: x\r\n\r\n", 26, &pos) == -1, "bare LF");

    /* ---- a good head ---- */
    CHECK(parse(h1) == 0, "good head: %s", why);
    CHECK(!strcmp(H.method, "POST") && !strcmp(H.target, "/v1/chat/completions?beta=true"), "line");
    CHECK(!strcmp(H.path, "/v1/chat/completions"), "path %s", H.path);
    CHECK(H.minor == 1 && H.n_fields == 3 && H.has_length && H.length == 2 && !H.chunked && !H.close,
          "framing");
    CHECK(!strcmp(http1_field_get(&H, "content-type"), "application/json"), "OWS trimmed");
    CHECK(parse("\r\n\r\nGET /v1/models/a%20b%zz HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Close\r\n"
                "Expect: 100-Continue\r\nTransfer-Encoding: Chunked\r\n\r\n") == 0, "%s", why);
    CHECK(!strcmp(H.path, "/v1/models/a b%zz"), "decoded %s", H.path);
    CHECK(H.close && H.expect_continue && H.chunked && !H.has_length, "tokens");
    CHECK(parse("GET /x HTTP/1.0\r\n\r\n") == 0 && H.minor == 0 && H.close, "HTTP/1.0, no Host");
    CHECK(parse("GET http://LocalHost:8000 HTTP/1.1\r\nHost: evil\r\n\r\n") == 0 &&
          !strcmp(H.authority, "LocalHost:8000") && !strcmp(H.path, "/"), "absolute-form");
    CHECK(parse("GET https://h/v1/models?q HTTP/1.1\r\nHost: h\r\n\r\n") == 0 &&
          !strcmp(H.path, "/v1/models"), "absolute-form path");
    CHECK(parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n") == 0 && !strcmp(H.path, "*"), "asterisk");
    CHECK(parse("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n") == 0 &&
          H.length == UINT64_MAX, "a Content-Length past 64 bits is 'too large', not wrapped");
    CHECK(parse("GET / HTTP/1.1\r\nHost: h\r\nX: a\x80\xff b\r\n\r\n") == 0, "obs-text is allowed");

    /* ---- refused ---- */
    refused("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400,
            "duplicate Content-Length");
    refused("GET / HTTP/1.1\r\nHost: h\r\ncontent-length: 1\r\nContent-Length: 1\r\n\r\n", 400,
            "duplicate Content-Length");
    refused("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\n", 400, "invalid Content-Length");
    refused("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400, "invalid Content-Length");
    refused("GET / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", 400, "empty Content-Length");
    refused("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n", 400,
            "together with Content-Length");
    refused("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400, "not supported");
    refused("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n", 400, "not supported");
    refused("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            400, "duplicate Transfer-Encoding");
    refused("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0");
    refused("GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n", 400, "duplicate Host");
    refused("GET / HTTP/1.1\r\nHost: a\r\nOrigin: x\r\norigin: y\r\n\r\n", 400, "duplicate Origin");
    refused("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n", 400,
            "duplicate Authorization");
    refused("GET / HTTP/1.1\r\n\r\n", 400, "without a Host");
    refused("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400, "bare CR");
    refused("GET / HTTP/1.1\r\nHost: a\r\nX: a\x01\r\n\r\n", 400, "control character 0x01");
    refused("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", 400, "control character 0x7f");
    refused("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400, "obs-fold");
    refused("GET / HTTP/1.1\r\nHost: a\r\nX : a\r\n\r\n", 400, "whitespace between a header name");
    refused("GET / HTTP/1.1\r\nHost: a\r\nX(y): a\r\n\r\n", 400, "invalid character in a header name");
    refused("GET / HTTP/1.1\r\nHost: a\r\n: a\r\n\r\n", 400, "empty header name");
    refused("GET / HTTP/1.1\r\nHost: a\r\nnocolon\r\n\r\n", 400, "without ':'");
    refused("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "malformed request line");
    refused("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400, "malformed HTTP version");
    refused("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "not supported");
    refused("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "malformed request line");
    refused("GET /a%00b HTTP/1.1\r\nHost: a\r\n\r\n", 400, "NUL");
    refused("GET x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "invalid request target");
    refused("GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400, "OPTIONS");
    refused("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "without a host");
    /* a NUL inside a value: the value is not cut there */
    {
        const char h[] = "GET / HTTP/1.1\r\nHost: a\x00.evil\r\n\r\n";
        memcpy(buf, h, sizeof h - 1);
        int st = http1_parse_head(buf, sizeof h - 1, path, &H, F, 64, why, sizeof why);
        CHECK(st == 400 && strstr(why, "a NUL in the value of header 'Host'"), "NUL: %d %s", st, why);
    }
    /* the reason quotes at most 60 bytes, escaped */
    {
        char h[400];
        snprintf(h, sizeof h, "GET / HTTP/1.1\r\nHost: a\r\n %s\r\n\r\n",
                 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        refused(h, 400, "...");
        CHECK(strlen(why) < 140, "reason length %zu", strlen(why));
    }
    CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n") == 0, "fields");
    {
        const char *h = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
        memcpy(buf, h, strlen(h));
        CHECK(http1_parse_head(buf, strlen(h), path, &H, F, 2, why, sizeof why) == 431, "field cap");
    }

    /* ---- chunked bodies ---- */
    char o[8192];
    size_t on = 0, used = 0;
    const char *body = "5;a=b;c\r\nhello\r\n000006 ;x=\"y\"\r\n world\r\n0\r\nT: 1\r\nU:2\r\n\r\nGET / HTTP/1.1";
    size_t bl = strlen(body);
    for (size_t step = 0; step <= 7; step++) {
        int st = chunked(body, bl, step, 1000, o, &on, &used);
        CHECK(st == 0, "step %zu: %d %s", step, st, why);
        CHECK(on == 11 && !memcmp(o, "hello world", 11), "step %zu data", step);
        CHECK(used == bl - strlen("GET / HTTP/1.1"), "step %zu: the next request is left (%zu)", step, used);
    }
    CHECK(chunked("0\r\n\r\n", 5, 0, 10, o, &on, &used) == 0 && on == 0, "empty body");
    CHECK(chunked("00000000000000000000001\r\nx\r\n0\r\n\r\n", 33, 0, 10, o, &on, &used) == 0 && on == 1,
          "leading zeros are not significant");
    CHECK(chunked("ffffffffffffffff\r\nx", 19, 0, 1 << 20, o, &on, &used) == 413, "past the limit");
    CHECK(strstr(why, "exceeds the limit of 1048576"), "%s", why);
    CHECK(chunked("8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n", 31, 0, 15, o, &on, &used) == 413,
          "the total past the limit");
    CHECK(chunked("8\r\n12345678\r\n7\r\n1234567\r\n0\r\n\r\n", 30, 0, 15, o, &on, &used) == 0,
          "the total at the limit");
    CHECK(chunked("10000000000000000\r\n", 19, 0, UINT64_MAX, o, &on, &used) == 400 &&
          strstr(why, "64 bits"), "17 digits: %s", why);
    CHECK(chunked("x\r\n", 3, 0, 10, o, &on, &used) == 400, "not hex");
    CHECK(chunked(";a\r\n", 4, 0, 10, o, &on, &used) == 400, "no size");
    CHECK(chunked("1 \r\nx\r\n0\r\n\r\n", 12, 0, 10, o, &on, &used) == 400, "whitespace without an extension");
    CHECK(chunked("1;\x01\r\nx\r\n", 8, 0, 10, o, &on, &used) == 400, "CTL in an extension");
    CHECK(chunked("1\nx\r\n0\r\n\r\n", 10, 0, 10, o, &on, &used) == 400, "bare LF after the size");
    CHECK(chunked("1\r\nxy0\r\n\r\n", 10, 0, 10, o, &on, &used) == 400 && strstr(why, "CRLF"),
          "data longer than its size");
    CHECK(chunked("0\r\n T: 1\r\n\r\n", 12, 0, 10, o, &on, &used) == 400, "obs-fold in a trailer");
    CHECK(chunked("0\r\nT: \x01\r\n\r\n", 11, 0, 10, o, &on, &used) == 400, "CTL in a trailer");
    CHECK(chunked("0\r\nT 1\r\n\r\n", 10, 0, 10, o, &on, &used) == 400, "a trailer without ':'");
    CHECK(chunked("0\r\n\rx", 5, 0, 10, o, &on, &used) == 400, "the final CRLF");
    CHECK(chunked("5\r\nhel", 6, 0, 10, o, &on, &used) == -1 && on == 3, "incomplete: more is needed");
    {
        char line[5000];
        memset(line, '0', sizeof line);
        CHECK(chunked(line, sizeof line, 0, 10, o, &on, &used) == 400 && strstr(why, "longer than"),
              "an endless size line");
    }

    printf("test_http1: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
