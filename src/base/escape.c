/*
 * escape.c -- printable forms of untrusted bytes (ds4_escape, ds4_fput_escaped
 * of ds4.h).
 *
 * Owns: the one escaping rule for text that comes from a file and ends up on
 * a terminal or in a log line: GGUF keys, tensor names and string values
 * (--inspect, load errors, the model name), tokenizer entries named in
 * errors, the text prefix of disk KV files (ds4-kv).  A GGUF is untrusted
 * input: without this an ESC sequence in a key could move the cursor,
 * recolour or retitle the terminal, and a newline could forge a line of a
 * report or a log.  Must not: allocate, or know where the bytes came from.
 *
 * Rule: valid UTF-8 is kept as is, except control characters and the
 * characters that reorder or break lines on display; those, and every byte
 * that is not part of valid UTF-8, become escapes:
 *   \n \r \t, other C0 and DEL as \xNN, a backslash as \\, a double quote as
 *   \" (so the result can sit inside quotes), invalid bytes as \xNN, C1
 *   controls (U+0080..U+009F, which some terminals obey as 8-bit CSI/OSC),
 *   line/paragraph separators and bidi controls as \u{XXXX}.
 */
#include <stdio.h>
#include <string.h>

#include "ds4.h"
#include "base/utf8.h"

static int needs_u_escape(uint32_t cp) {
    return (cp >= 0x80 && cp <= 0x9F) ||          /* C1 controls */
           cp == 0x2028 || cp == 0x2029 ||        /* line / paragraph separator */
           (cp >= 0x202A && cp <= 0x202E) ||      /* bidi embeddings, overrides */
           (cp >= 0x2066 && cp <= 0x2069) ||      /* bidi isolates */
           cp == 0x200E || cp == 0x200F ||        /* LRM, RLM */
           cp == 0x061C || cp == 0xFEFF;          /* ALM, BOM / ZWNBSP */
}

/* The printable form of the character (or invalid byte) at p[0..n), n > 0:
 * writes it NUL-terminated to out[16] and returns the input bytes used. */
static size_t esc_step(const unsigned char *p, size_t n, char out[16]) {
    unsigned char b = p[0];
    if (b < 0x80) {
        if (b == '\n') strcpy(out, "\\n");
        else if (b == '\r') strcpy(out, "\\r");
        else if (b == '\t') strcpy(out, "\\t");
        else if (b == '\\') strcpy(out, "\\\\");
        else if (b == '"') strcpy(out, "\\\"");
        else if (b < 0x20 || b == 0x7f) snprintf(out, 16, "\\x%02x", b);
        else { out[0] = (char)b; out[1] = 0; }
        return 1;
    }
    uint32_t cp;
    int valid;
    size_t k = ds4_utf8_next(p, n, &cp, &valid);
    if (!valid) {
        /* each byte of an invalid subpart on its own: the escape shows the
         * file's bytes, not a replacement character */
        snprintf(out, 16, "\\x%02x", b);
        return 1;
    }
    if (needs_u_escape(cp)) {
        snprintf(out, 16, "\\u{%04x}", (unsigned)cp);
        return k;
    }
    memcpy(out, p, k);
    out[k] = 0;
    return k;
}

const char *ds4_escape(char *buf, size_t cap, const char *s, size_t n) {
    if (!buf || cap == 0) return "";
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, i = 0, cut = 0;   /* cut: last boundary that leaves room for "..." */
    buf[0] = 0;
    if (!s) return buf;
    while (i < n) {
        if (o + 4 <= cap) cut = o;
        char e[16];
        size_t used = esc_step(p + i, n - i, e);
        size_t el = strlen(e);
        if (o + el + 1 > cap) {
            /* does not fit: back to the last boundary with room for "..." */
            o = cut;
            if (o + 4 <= cap) { memcpy(buf + o, "...", 3); o += 3; }
            break;
        }
        memcpy(buf + o, e, el);
        o += el;
        i += used;
    }
    buf[o] = 0;
    return buf;
}

size_t ds4_fput_escaped(FILE *out, const char *s, size_t n, size_t max_in) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        char e[16];
        size_t used = esc_step(p + i, n - i, e);
        if (i + used > max_in) break;   /* never cut a character */
        fputs(e, out);
        i += used;
    }
    return i;
}
