/*
 * args.h -- command-line helpers shared by every ds4 binary (ds4,
 * ds4-server, ds4-synth, ds4-bench, ds4-kv): one way to match flags, read
 * their values with range checks, and report bad input.
 *
 * Two layers:
 *   - pure parsers (ds4_parse_*): no output, no exit; they return 0 or -1
 *     and, on -1, a one-line reason in `why` (for callers that report
 *     errors their own way, e.g. the server);
 *   - a cursor over argv (ds4_args) whose value readers print
 *     "PROG: --flag: bad value 'x' (expected ...)" and exit with status 2.
 *
 * Must not touch the engine: this is front-end plumbing (only ds4.h's
 * version string is used).
 */
#ifndef DS4_COMMON_ARGS_H
#define DS4_COMMON_ARGS_H

#include <stdint.h>
#include <stdio.h>

/* ---- pure parsers: 0 = ok, -1 = bad (reason in why[why_n]) ---- */

/* Decimal integer in [lo, hi]; no trailing garbage, no overflow. */
int ds4_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out,
                  char *why, size_t why_n);
/* Unsigned 64-bit integer (decimal or 0x hex), no sign. */
int ds4_parse_u64(const char *s, uint64_t *out, char *why, size_t why_n);
/* Finite number in [lo, hi]. */
int ds4_parse_double(const char *s, double lo, double hi, double *out,
                     char *why, size_t why_n);
/* A byte size: a number (fractions allowed) with an optional unit, case
 * insensitive: B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB.  All units are
 * powers of 1024 (memory and disk budgets are thought of that way; the
 * long-standing *-mb flags already meant MiB).  `def_unit` (1 = bytes,
 * 1 << 20 = MiB, ...) applies to a bare number.  Result in [lo, hi]. */
int ds4_parse_size(const char *s, uint64_t def_unit, uint64_t lo, uint64_t hi,
                   uint64_t *out, char *why, size_t why_n);
/* "1 GiB", "512 MiB", "4096 B": the inverse for messages. */
const char *ds4_format_size(uint64_t bytes, char *buf, size_t n);

/* ---- the cursor ---- */

typedef struct {
    const char *prog;           /* program name in messages ("ds4-kv") */
    int argc;
    char **argv;
    int i;                      /* index of the current argument */
    const char *cur;            /* the current argument */
    const char *flag;           /* the flag matched last (as written) */
    const char *inline_val;     /* the value of "--flag=value", else NULL */
    void (*usage)(FILE *);      /* prints --help (may be NULL) */
} ds4_args;

void ds4_args_init(ds4_args *a, const char *prog, int argc, char **argv,
                   void (*usage)(FILE *));
/* Move to the next argument; 0 at the end.  -h/--help (usage on stdout)
 * and --version are answered here, with exit status 0. */
int ds4_args_next(ds4_args *a);
/* Does the current argument name this flag?  `short_name` or `long_name`
 * may be NULL.  A long name also matches "--name=value" (the value is
 * then what ds4_args_value returns). */
int ds4_args_is(ds4_args *a, const char *short_name, const char *long_name);
/* The current argument is not an option (does not start with '-', or is
 * "-" alone). */
int ds4_args_positional(const ds4_args *a);

/* Value readers for the flag just matched: they consume the next argument
 * (or the "=value" part) and exit with status 2 and a clear message when
 * it is missing or bad. */
const char *ds4_args_value(ds4_args *a);
/* An optional value: "--flag=value", or the next argument when it does
 * not start with '-'; NULL when there is none. */
const char *ds4_args_optional(ds4_args *a);
int      ds4_args_int(ds4_args *a, int lo, int hi);
int64_t  ds4_args_i64(ds4_args *a, int64_t lo, int64_t hi);
uint64_t ds4_args_u64(ds4_args *a);
double   ds4_args_double(ds4_args *a, double lo, double hi);
uint64_t ds4_args_size(ds4_args *a, uint64_t def_unit, uint64_t lo, uint64_t hi);

/* "PROG: unknown option 'x'" + hint, exit 2. */
void ds4_args_unknown(const ds4_args *a) __attribute__((noreturn));
/* "PROG: <message>" + "(PROG --help lists the options)", exit 2. */
void ds4_args_fail(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* "PROG: <message>", exit 1: a run-time failure (bad file, no memory). */
void ds4_die(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* "PROG VERSION" on `f` (the one version line every binary prints). */
void ds4_print_version(const char *prog, FILE *f);

#endif
