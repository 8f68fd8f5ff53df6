/*
 * json_py.c -- Python-compatible JSON serialization (json.dumps with
 * ensure_ascii=False) of jansson values, and the JSON parse helper.
 *
 * Owns: the byte format of every JSON value the prompt renderer writes.
 * Must not touch: chat/DSML rules (render.c, dsml.c).
 *
 * The float format is the delicate part: Python prints repr(float), i.e. the
 * shortest decimal string that reads back as the same double (David Gay's
 * dtoa mode 0), laid out by float_repr_style 'short' rules.  We get the
 * digits from printf("%.*e") at increasing precision; see py_float_digits
 * for why that yields exactly the dtoa digits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_py.h"

#define MAX_DEPTH 10000

static const char HEX[] = "0123456789abcdef";

int ds4_json_py_escape(const char *s, size_t len, ds4_buf *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0;     /* start of the pending run of bytes copied as is */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        const char *rep = NULL;
        char u[7];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        switch (c) {
        case '"': rep = "\\\""; break;
        case '\\': rep = "\\\\"; break;
        case '\n': rep = "\\n"; break;
        case '\r': rep = "\\r"; break;
        case '\t': rep = "\\t"; break;
        case '\b': rep = "\\b"; break;
        case '\f': rep = "\\f"; break;
        default:
            u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
            u[4] = HEX[c >> 4]; u[5] = HEX[c & 15]; u[6] = 0;
            rep = u;
        }
        if (i > run && ds4_buf_append(out, p + run, i - run)) return DS4_ENOMEM;
        if (ds4_buf_puts(out, rep)) return DS4_ENOMEM;
        run = i + 1;
    }
    if (len > run && ds4_buf_append(out, p + run, len - run)) return DS4_ENOMEM;
    return DS4_OK;
}

int ds4_json_py_string(const char *s, size_t len, ds4_buf *out) {
    if (ds4_buf_append(out, "\"", 1)) return DS4_ENOMEM;
    if (ds4_json_py_escape(s, len, out)) return DS4_ENOMEM;
    return ds4_buf_append(out, "\"", 1);
}

/* Shortest round-trip decimal digits of a finite, non-zero |d|: writes the
 * digits (no leading/trailing zeros) to `dig` and returns their count; *dexp
 * receives the exponent of the first digit (d = 0.d1d2... * 10^(dexp+1)).
 *
 * For each precision n the correctly rounded n-digit string c is the n-digit
 * string nearest to d.  If c reads back as d it is what dtoa mode 0 returns
 * (dtoa picks the nearest among the shortest).  If c does not, an n-digit
 * string can still read back as d when the rounding interval is lopsided (d a
 * power of two); such a string must then be c's neighbour on the other side
 * of d, because the interval is contiguous and contains d.  So at each n we
 * also try c +/- one unit in the last digit. */
static int py_float_digits(double d, char *dig, int *dexp) {
    char buf[64];
    for (int n = 1; n <= 17; n++) {
        snprintf(buf, sizeof buf, "%.*e", n - 1, d);
        if (strtod(buf, NULL) == d) goto found;
        if (n == 17) break;
        /* Neighbours: bump the last mantissa digit of buf up or down. */
        for (int dir = -1; dir <= 1; dir += 2) {
            char m[32];
            int nd = 0;
            const char *q = buf;
            while (*q && *q != 'e') { if (*q != '.') m[nd++] = *q; q++; }
            int e = atoi(q + 1);
            /* add dir to the integer m[0..nd) */
            int i = nd - 1;
            if (dir > 0) {
                while (i >= 0 && m[i] == '9') m[i--] = '0';
                if (i < 0) { memmove(m + 1, m, (size_t)nd); m[0] = '1'; e++; }
                else m[i]++;
            } else {
                while (i >= 0 && m[i] == '0') m[i--] = '9';
                if (i < 0) continue;            /* cannot go below 0 */
                m[i]--;
                if (m[0] == '0') {              /* 10..0 - 1 = 9..9: one digit fewer */
                    if (nd == 1) continue;
                    memmove(m, m + 1, (size_t)nd - 1);
                    m[nd - 1] = '9';            /* keep n digits: 99..9 * 10^(e-1) */
                    e--;
                }
            }
            char cand[64];
            int k = 0;
            cand[k++] = m[0];
            if (nd > 1) { cand[k++] = '.'; memcpy(cand + k, m + 1, (size_t)nd - 1); k += nd - 1; }
            snprintf(cand + k, sizeof cand - (size_t)k, "e%d", e);
            if (strtod(cand, NULL) == d) { memcpy(buf, cand, sizeof cand); goto found; }
        }
    }
    snprintf(buf, sizeof buf, "%.16e", d);   /* 17 digits always round-trip */
found:;
    int nd = 0;
    const char *q = buf;
    while (*q && *q != 'e') { if (*q >= '0' && *q <= '9') dig[nd++] = *q; q++; }
    *dexp = atoi(q + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    return nd;
}

int ds4_json_py_float(double d, ds4_buf *out) {
    if (isnan(d)) return ds4_buf_puts(out, "NaN");
    if (isinf(d)) return ds4_buf_puts(out, d < 0 ? "-Infinity" : "Infinity");
    if (d == 0) return ds4_buf_puts(out, signbit(d) ? "-0.0" : "0.0");
    char dig[40], s[64];
    int e, k = 0;
    int nd = py_float_digits(fabs(d), dig, &e);
    if (d < 0) s[k++] = '-';
    int decpt = e + 1;              /* Python's decpt: digits are 0.DDD * 10^decpt */
    if (decpt <= -4 || decpt > 16) {
        s[k++] = dig[0];
        if (nd > 1) { s[k++] = '.'; memcpy(s + k, dig + 1, (size_t)nd - 1); k += nd - 1; }
        k += snprintf(s + k, sizeof s - (size_t)k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    } else if (decpt <= 0) {
        s[k++] = '0'; s[k++] = '.';
        for (int i = 0; i < -decpt; i++) s[k++] = '0';
        memcpy(s + k, dig, (size_t)nd); k += nd;
    } else if (decpt >= nd) {
        memcpy(s + k, dig, (size_t)nd); k += nd;
        for (int i = nd; i < decpt; i++) s[k++] = '0';
        s[k++] = '.'; s[k++] = '0';
    } else {
        memcpy(s + k, dig, (size_t)decpt); k += decpt;
        s[k++] = '.';
        memcpy(s + k, dig + decpt, (size_t)(nd - decpt)); k += nd - decpt;
    }
    return ds4_buf_append(out, s, (size_t)k);
}

static int dump(const json_t *v, int flags, ds4_buf *out, int depth) {
    const char *isep = (flags & DS4_JSON_PY_COMPACT) ? "," : ", ";
    const char *ksep = (flags & DS4_JSON_PY_COMPACT) ? ":" : ": ";
    if (!v || depth > MAX_DEPTH) return DS4_EINVAL;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        int first = 1;
        if (ds4_buf_append(out, "{", 1)) return DS4_ENOMEM;
        /* json_object_foreach walks keys in insertion order (jansson >= 2.8). */
        json_object_foreach((json_t *)v, key, val) {
            if (!first && ds4_buf_puts(out, isep)) return DS4_ENOMEM;
            first = 0;
            /* Keys cannot hold NUL in jansson's API, so strlen is exact. */
            if (ds4_json_py_string(key, strlen(key), out)) return DS4_ENOMEM;
            if (ds4_buf_puts(out, ksep)) return DS4_ENOMEM;
            int rc = dump(val, flags, out, depth + 1);
            if (rc) return rc;
        }
        return ds4_buf_append(out, "}", 1);
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (ds4_buf_append(out, "[", 1)) return DS4_ENOMEM;
        for (size_t i = 0; i < n; i++) {
            if (i && ds4_buf_puts(out, isep)) return DS4_ENOMEM;
            int rc = dump(json_array_get(v, i), flags, out, depth + 1);
            if (rc) return rc;
        }
        return ds4_buf_append(out, "]", 1);
    }
    case JSON_STRING:
        return ds4_json_py_string(json_string_value(v), json_string_length(v), out);
    case JSON_INTEGER:
        return ds4_buf_printf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        return ds4_json_py_float(json_real_value(v), out);
    case JSON_TRUE: return ds4_buf_puts(out, "true");
    case JSON_FALSE: return ds4_buf_puts(out, "false");
    case JSON_NULL: return ds4_buf_puts(out, "null");
    }
    return DS4_EINVAL;
}

int ds4_json_py_dump(const json_t *v, int flags, ds4_buf *out) {
    return dump(v, flags, out, 0);
}

json_t *ds4_json_parse(const char *text, size_t len, char **err) {
    json_error_t e;
    if (err) *err = NULL;
    if (!text) text = "";
    /* DECODE_ANY: a bare number/string is valid JSON (Python accepts it).
     * ALLOW_NUL: "\u0000" in strings, which Python accepts too.  No
     * REJECT_DUPLICATES: Python keeps the last value of a repeated key. */
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (!v) ds4_set_err(err, DS4_EINVAL, "line %d, column %d: %s", e.line, e.column, e.text);
    return v;
}
