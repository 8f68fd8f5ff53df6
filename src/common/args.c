/*
 * args.c -- see args.h.  Owns number/size parsing and the argv cursor of
 * every binary; knows no flag of any of them (each binary keeps its own
 * table of flags and its own --help text).
 */
#include "common/args.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"

static int fail(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t n, const char *fmt, ...) {
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ds4_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out, char *why, size_t why_n) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    /* strtoll skips leading blanks; a value is exactly one number */
    if (!s || !*s || isspace((unsigned char)*s) || *end || errno == ERANGE || errno == EINVAL ||
        v < lo || v > hi)
        return fail(why, why_n, "expected an integer in [%" PRId64 ", %" PRId64 "]", lo, hi);
    *out = v;
    return 0;
}

int ds4_parse_u64(const char *s, uint64_t *out, char *why, size_t why_n) {
    char *end;
    errno = 0;
    /* strtoull accepts "-1" (and wraps it): refuse any sign */
    if (!s || !*s || *s == '-' || *s == '+' || isspace((unsigned char)*s))
        return fail(why, why_n, "expected an unsigned 64-bit integer");
    /* decimal, or hex with 0x; never octal (a seed "010" is ten) */
    int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    unsigned long long v = strtoull(hex ? s + 2 : s, &end, hex ? 16 : 10);
    if (hex && !isxdigit((unsigned char)s[2])) return fail(why, why_n, "expected an unsigned 64-bit integer");
    if (*end || errno) return fail(why, why_n, "expected an unsigned 64-bit integer");
    *out = v;
    return 0;
}

int ds4_parse_double(const char *s, double lo, double hi, double *out, char *why, size_t why_n) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || isspace((unsigned char)*s) || *end || errno == ERANGE || !isfinite(v) ||
        v < lo || v > hi)
        return fail(why, why_n, "expected a number in [%g, %g]", lo, hi);
    *out = v;
    return 0;
}

const char *ds4_format_size(uint64_t b, char *buf, size_t n) {
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    int u = 0;
    /* exact multiples print as integers ("8 GiB"), others with decimals */
    while (u < 5 && b >= 1024 && (b % 1024) == 0) { b /= 1024; u++; }
    if (b >= 1024 && u < 5) {
        double d = (double)b;
        while (u < 5 && d >= 1024) { d /= 1024; u++; }
        snprintf(buf, n, "%.2f %s", d, unit[u]);
    } else {
        snprintf(buf, n, "%" PRIu64 " %s", b, unit[u]);
    }
    return buf;
}

int ds4_parse_size(const char *s, uint64_t def_unit, uint64_t lo, uint64_t hi, uint64_t *out,
                   char *why, size_t why_n) {
    char a[48], b[48];
    const char *hint = "expected a size like 4096, 512MB or 8GB";
    if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
        return fail(why, why_n, "%s", hint);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v) || v < 0) return fail(why, why_n, "%s", hint);
    while (*end == ' ') end++;
    uint64_t unit = def_unit;
    if (*end) {
        char u = (char)toupper((unsigned char)*end);
        const char *rest = end + 1;
        switch (u) {
        case 'B': unit = 1; break;
        case 'K': unit = 1ull << 10; break;
        case 'M': unit = 1ull << 20; break;
        case 'G': unit = 1ull << 30; break;
        case 'T': unit = 1ull << 40; break;
        default: return fail(why, why_n, "%s", hint);
        }
        if (u != 'B') {
            /* K, KB, KiB (any case) */
            if ((rest[0] == 'i' || rest[0] == 'I') && (rest[1] == 'b' || rest[1] == 'B')) rest += 2;
            else if (rest[0] == 'b' || rest[0] == 'B') rest += 1;
        }
        if (*rest) return fail(why, why_n, "%s", hint);
    }
    double bytes = v * (double)unit;
    if (bytes >= 18446744073709551615.0) return fail(why, why_n, "%s", hint);
    uint64_t r = (uint64_t)(bytes + 0.5);
    if (r < lo || r > hi)
        return fail(why, why_n, "expected a size in [%s, %s]", ds4_format_size(lo, a, sizeof a),
                    ds4_format_size(hi, b, sizeof b));
    *out = r;
    return 0;
}

/* ------------------------------------------------------------------ */

void ds4_print_version(const char *prog, FILE *f) {
    fprintf(f, "%s %s\n", prog, ds4_version());
}

void ds4_args_init(ds4_args *a, const char *prog, int argc, char **argv, void (*usage)(FILE *)) {
    memset(a, 0, sizeof *a);
    a->prog = prog;
    a->argc = argc;
    a->argv = argv;
    a->i = 0;
    a->usage = usage;
}

void ds4_args_fail(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(%s --help lists the options)\n", prog);
    exit(2);
}

void ds4_die(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void ds4_args_unknown(const ds4_args *a) {
    ds4_args_fail(a->prog, "unknown option '%s'", a->cur ? a->cur : "");
}

int ds4_args_next(ds4_args *a) {
    if (++a->i >= a->argc) { a->cur = NULL; return 0; }
    a->cur = a->argv[a->i];
    a->flag = NULL;
    a->inline_val = NULL;
    if (!strcmp(a->cur, "-h") || !strcmp(a->cur, "--help")) {
        if (a->usage) a->usage(stdout);
        else printf("%s: no help text\n", a->prog);
        exit(0);
    }
    if (!strcmp(a->cur, "--version")) {
        ds4_print_version(a->prog, stdout);
        exit(0);
    }
    return 1;
}

int ds4_args_is(ds4_args *a, const char *short_name, const char *long_name) {
    const char *c = a->cur;
    if (!c) return 0;
    if (short_name && !strcmp(c, short_name)) { a->flag = short_name; a->inline_val = NULL; return 1; }
    if (long_name) {
        size_t n = strlen(long_name);
        if (!strncmp(c, long_name, n) && (c[n] == 0 || (c[n] == '=' && long_name[0] == '-' && long_name[1] == '-'))) {
            a->flag = long_name;
            a->inline_val = c[n] == '=' ? c + n + 1 : NULL;
            return 1;
        }
    }
    return 0;
}

int ds4_args_positional(const ds4_args *a) {
    return a->cur && (a->cur[0] != '-' || a->cur[1] == 0);
}

const char *ds4_args_value(ds4_args *a) {
    const char *f = a->flag ? a->flag : a->cur;
    if (a->inline_val) {
        const char *v = a->inline_val;
        a->inline_val = NULL;
        return v;
    }
    if (a->i + 1 >= a->argc) ds4_args_fail(a->prog, "%s needs a value", f);
    return a->argv[++a->i];
}

const char *ds4_args_optional(ds4_args *a) {
    if (a->inline_val) {
        const char *v = a->inline_val;
        a->inline_val = NULL;
        return v;
    }
    if (a->i + 1 < a->argc && a->argv[a->i + 1][0] != '-') return a->argv[++a->i];
    return NULL;
}

static void bad(ds4_args *a, const char *v, const char *why) __attribute__((noreturn));
static void bad(ds4_args *a, const char *v, const char *why) {
    ds4_args_fail(a->prog, "%s: bad value '%s' (%s)", a->flag ? a->flag : a->cur, v, why);
}

int64_t ds4_args_i64(ds4_args *a, int64_t lo, int64_t hi) {
    const char *v = ds4_args_value(a);
    char why[128];
    int64_t x = 0;
    if (ds4_parse_i64(v, lo, hi, &x, why, sizeof why)) bad(a, v, why);
    return x;
}

int ds4_args_int(ds4_args *a, int lo, int hi) {
    return (int)ds4_args_i64(a, lo, hi);
}

uint64_t ds4_args_u64(ds4_args *a) {
    const char *v = ds4_args_value(a);
    char why[128];
    uint64_t x = 0;
    if (ds4_parse_u64(v, &x, why, sizeof why)) bad(a, v, why);
    return x;
}

double ds4_args_double(ds4_args *a, double lo, double hi) {
    const char *v = ds4_args_value(a);
    char why[128];
    double x = 0;
    if (ds4_parse_double(v, lo, hi, &x, why, sizeof why)) bad(a, v, why);
    return x;
}

uint64_t ds4_args_size(ds4_args *a, uint64_t def_unit, uint64_t lo, uint64_t hi) {
    const char *v = ds4_args_value(a);
    char why[128];
    uint64_t x = 0;
    if (ds4_parse_size(v, def_unit, lo, hi, &x, why, sizeof why)) bad(a, v, why);
    return x;
}
