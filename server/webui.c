/*
 * webui.c -- see webui.h.
 *
 * The page is pulled into .rodata by the assembler's .incbin (GCC and
 * Clang both assemble it), so the binary carries the file exactly as
 * written and a change to the HTML rebuilds this object (Makefile).
 *
 * The policy: nothing loads from anywhere but this server (default-src
 * 'none', connect-src 'self'), the inline style and script run only with
 * the exact bytes shipped (their SHA-256), no frames, no forms elsewhere,
 * no base URL tricks.  A page served under a foreign Host never gets here:
 * http.c's Host/Origin guard answers first, as for the API.
 */
#include <stdio.h>
#include <string.h>

#include "webui.h"
#include "base/hash.h"

#ifndef DS4_WEBUI_HTML
#define DS4_WEBUI_HTML "server/webui/index.html"
#endif

extern const char ds4_webui_html[];
extern const char ds4_webui_html_end[];
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global ds4_webui_html\n"
        ".hidden ds4_webui_html\n"
        "ds4_webui_html:\n"
        ".incbin \"" DS4_WEBUI_HTML "\"\n"
        ".global ds4_webui_html_end\n"
        ".hidden ds4_webui_html_end\n"
        "ds4_webui_html_end:\n"
        ".byte 0\n"
        ".previous\n");

static void b64(const uint8_t *in, size_t n, char *out) {
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = T[v >> 18 & 63];
        out[o++] = T[v >> 12 & 63];
        out[o++] = i + 1 < n ? T[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? T[v & 63] : '=';
    }
    out[o] = 0;
}

/* 'sha256-...' of the text between the first <tag> and </tag>. */
static int inline_hash(const char *p, size_t n, const char *open, const char *close, char *out) {
    const char *a = memmem(p, n, open, strlen(open));
    if (!a) return -1;
    a += strlen(open);
    const char *b = memmem(a, n - (size_t)(a - p), close, strlen(close));
    if (!b) return -1;
    uint8_t h[32];
    char s[48];
    ds4_sha256(a, (size_t)(b - a), h);
    b64(h, sizeof h, s);
    snprintf(out, 64, "'sha256-%s'", s);
    return 0;
}

int webui_page_init(webui_page *p) {
    memset(p, 0, sizeof *p);
    p->body = ds4_webui_html;
    p->len = (size_t)(ds4_webui_html_end - ds4_webui_html);
    char style[64], script[64];
    if (inline_hash(p->body, p->len, "<style>", "</style>", style) ||
        inline_hash(p->body, p->len, "<script>", "</script>", script))
        return -1;
    uint8_t h[32];
    ds4_sha256(p->body, p->len, h);
    snprintf(p->etag, sizeof p->etag, "\"%02x%02x%02x%02x%02x%02x%02x%02x\"", h[0], h[1], h[2], h[3],
             h[4], h[5], h[6], h[7]);
    snprintf(p->csp, sizeof p->csp,
             "default-src 'none'; style-src %s; script-src %s; connect-src 'self'; "
             "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
             style, script);
    return 0;
}
