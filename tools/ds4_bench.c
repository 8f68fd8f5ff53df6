/*
 * ds4_bench.c -- `ds4-bench`: prefill and decode speed of ds4 as the context
 * grows.
 *
 * Loads a model once, tokenizes a text file (plain mode, BOS first, the
 * token sequence repeated until it is long enough) and walks it to a list of
 * context frontiers.  At each frontier only the newly added tokens are
 * evaluated (incremental prefill, timed), the session is snapshotted, a few
 * greedy tokens are generated (timed decode), and the snapshot is restored
 * so the next frontier continues from exactly the prefilled text.  Writes
 * one CSV row per frontier on stdout, details on stderr, and optionally an
 * SVG plot (written by hand, no dependencies).
 *
 * Uses only the public API (ds4.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"
#include "common/args.h"
#include "common/signals.h"
#include "common/model_opts.h"
#include "probe.h"

#define CSV_HEADER "ctx,prefill_tokens,prefill_tps,decode_tokens,decode_tps,kv_bytes,weight_bytes_per_token"
/* --ssd-streaming only: expert cache hit rate of the prefill and of the
 * decode, file bytes read per decoded token, read GB/s while reading */
#define CSV_SSD "prefill_hit_rate,decode_hit_rate,read_bytes_per_token,read_gbps"

static volatile sig_atomic_t g_stop = 0;
/* First Ctrl+C: stop after the current prefill chunk or decode step, keep
 * the rows and write the plot.  Second: leave at once. */
static void on_signal(int sig) {
    (void)sig;
    if (g_stop) _exit(130);
    g_stop = 1;
}

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void vmsg(const char *fmt, va_list ap) {
    fprintf(stderr, "ds4-bench: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

/* Bad command line: exit 2. */
static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
    fprintf(stderr, "(ds4-bench --help for usage)\n");
    exit(2);
}

/* Anything else that stops the run: exit 1. */
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
    exit(1);
}

/* An evaluation error as text (an expert read failure has its own). */
static const char *xc_err(const ds4_model *m, int e) {
    const char *x = e == DS4_EIO ? ds4_model_expert_cache_error(m) : NULL;
    return x ? x : ds4_strerror(e);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
}

/* The shared model/runtime flags ds4-bench takes (model_opts.h). */
#define BENCH_GROUPS (DS4_MO_MODEL | DS4_MO_CHUNK | DS4_MO_QAT | DS4_MO_SSD | DS4_MO_DIST | DS4_MO_MTP)

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4-bench -m MODEL --prompt-file TEXT [--ctx-start N] [--ctx-max N]\n"
"                 [--step-incr N | --step-mul F] [--gen-tokens N] [--threads N]\n"
"                 [--chunk N] [--plot OUT.svg] [--no-qat] [--no-warmup]\n"
"                 [--kv-disk-dir DIR]\n"
"                 [--no-probe] [--verbose] [--spec N] [--mtp FILE] [--mtp-draft N]\n"
"                 [--parallel LIST [--rounds R]]\n"
"       ds4-bench --help | --version\n"
"\n"
"Measures prefill and decode speed as the context grows.  The model is\n"
"loaded once; TEXT is tokenized in plain mode (control-token text stays\n"
"text), BOS is put first, and the token sequence is repeated as many times\n"
"as needed to reach the largest frontier.  The frontiers are ctx-start,\n"
"then each previous one plus --step-incr (or times --step-mul, rounded\n"
"down, at least +1), as long as they do not exceed ctx-max.  At each\n"
"frontier the bench\n"
"  1. prefills only the tokens added since the previous frontier (timed),\n"
"  2. snapshots the session (ds4_session_snapshot, timed),\n"
"  3. generates --gen-tokens greedy tokens one at a time (timed decode),\n"
"  4. restores the snapshot (ds4_session_restore, timed), so the next\n"
"     frontier continues from the text alone.\n"
"The session is created once with room for the last frontier plus the\n"
"generated tokens.\n"
"\n"
"options:\n"
"  --prompt-file FILE   UTF-8 text to prefill (required; e.g.\n"
"                       bench/data/italian_sample.txt)\n"
"  --ctx-start N        first frontier in tokens (default 2048)\n"
"  --ctx-max N          largest allowed frontier (default 32768)\n"
"  --step-incr N        next frontier = previous + N\n"
"  --step-mul F         next frontier = previous x F, F > 1 (the default,\n"
"                       with F = 2, when neither is given)\n"
"  --gen-tokens N       greedy tokens decoded at each frontier (default 16)\n"
"  --plot FILE          also write an SVG plot of prefill and decode\n"
"                       tokens/s against context (created before the run,\n"
"                       filled in at the end, also after Ctrl+C)\n"
"  --kv-disk-dir DIR    also time saving each frontier's state to a disk KV\n"
"                       cache in DIR and restoring it by its text (stderr)\n"
"  --no-warmup          do not read the model file once before timing (the\n"
"                       warm-up pulls the weights into the page cache so the\n"
"                       first frontier does not time disk reads; it is\n"
"                       skipped anyway when the weights and the session\n"
"                       do not fit in RAM together)\n"
"  --no-probe           do not measure the machine (STREAM bandwidth, int8\n"
"                       and AMX peaks, a few s before and after the\n"
"                       frontiers), so no\n"
"                       roofline and peak ratios are printed\n"
"  --spec N             also measure speculative decoding at each frontier\n"
"                       (stderr): verification passes of 1, 2, 4, 8, 16\n"
"                       (<= N+1) tokens against one decode step (the sizes\n"
"                       interleaved in 9 rounds, medians), and the\n"
"                       --gen-tokens decoded with prompt-lookup drafts and\n"
"                       with always-right drafts (up to N a pass), both\n"
"                       checked against plain greedy decoding\n"
"  --parallel LIST      concurrent streams instead of frontiers: for each N\n"
"                       of LIST (comma-separated, e.g. 1,2,4,8; at most 64)\n"
"                       N streams of ctx-start tokens each (the text, turned\n"
"                       by a different offset per stream so they route to\n"
"                       different experts) decode --gen-tokens greedy tokens\n"
"                       together, one ds4_session_eval_batch per step; the\n"
"                       list is run --rounds times interleaved (default 3)\n"
"                       and the medians reported.  stdout: CSV with\n"
"                       parallel,ctx,decode_tokens,step_ms,aggregate_tps,\n"
"                       per_stream_tps,aggregate_x,per_stream_x,\n"
"                       weight_mb_per_step,weight_mb_n_single (x: against\n"
"                       the list's first N, normally 1; weight_mb_per_step:\n"
"                       the weights one batched step reads -- every dense\n"
"                       weight once, each routed expert once if any stream\n"
"                       uses it, counted for experts chosen uniformly --\n"
"                       against N separate decode steps).  Every stream's\n"
"                       tokens are checked to be the same whatever N.\n"
"  -v, --verbose        print the generated token ids of every frontier on\n"
"                       stderr (\"ds4-bench: gen ctx=N: id id ...\"); they do\n"
"                       not depend on the frontier schedule or chunk size\n"
"  -h, --help           this text\n"
"  --version            print the version and exit\n"
"Values follow the option or are attached with = (--ctx-max=8192).\n");
    ds4_model_opts d;
    ds4_model_opts_init(&d, "ds4-bench", BENCH_GROUPS);
    ds4_model_opts_help(f, &d);
    fprintf(f,
"\n"
"notes:\n"
"  --mtp-draft N, with --spec (or alone: --spec N), also times one MTP draft\n"
"  step and decodes --gen-tokens with N MTP drafts a pass (default " DS4_XSTR(DS4_MTP_DRAFT_DEFAULT) "\n"
"  with --mtp; the model's own block without --mtp), checked like the\n"
"  others.  --ssd-streaming: no warm-up; the CSV gets four more columns:\n"
"  " CSV_SSD ".  --dist: snapshots are not distributed, so a RAM\n"
"  checkpoint rewinds after each decode instead, and the communication\n"
"  time per token is reported.\n"
"\n"
"output:\n"
"  stdout: CSV, one row per frontier, with this header:\n"
"    " CSV_HEADER "\n"
"    ctx                     the frontier (tokens in the context)\n"
"    prefill_tokens          tokens evaluated to reach it from the previous\n"
"                            frontier (the first: all of them)\n"
"    prefill_tps             prefill_tokens / prefill seconds\n"
"    decode_tokens           greedy tokens generated (= --gen-tokens)\n"
"    decode_tps              decode_tokens / decode seconds (sampling\n"
"                            included; it is an argmax)\n"
"    kv_bytes                ds4_session_kv_bytes at the frontier\n"
"    weight_bytes_per_token  weight bytes read per decoded token\n"
"                            (ds4_model_info.active_bytes_per_token)\n"
"  stderr: the setup (model, machine, threads, load average, text,\n"
"    frontiers, memory estimate),\n"
"    then per frontier the timings above plus the snapshot size and the\n"
"    snapshot save and restore speeds in MB/s (10^6 bytes/s);\n"
"    the machine's STREAM read/triad bandwidth (64-byte loads, persistent\n"
"    threads, 2 GiB or a quarter of the free memory, on 2 MB pages where\n"
"    the kernel gives them, as the weights), its int8 vector\n"
"    dot-product peak and AMX tile peak (register-only loops, each thread's\n"
"    CPU time), measured before and after the frontiers on the same\n"
"    threads; per\n"
"    frontier, against the figures measured before: prefill GFLOP/s of the\n"
"    layer matmuls\n"
"    (2 x ds4_model_info.layer_macs_per_token per token; the attention\n"
"    products and the head are not counted, so it is a lower bound) as a\n"
"    fraction of the int8 vector peak (and of the AMX peak where the CPU\n"
"    has one), and decode GB/s of weights read as a\n"
"    fraction of STREAM read (the decode roofline); a summary line gives\n"
"    their medians over the frontiers against the mean of both probes;\n"
"    at the end, how much of the model file is mapped and the share of it\n"
"    on 2 MB pages (Linux), with a warning when most of it is on 4 KB pages.\n"
"\n"
"checks: before loading anything the arguments and files are checked; once\n"
"the model is loaded the session memory estimate (plus a snapshot buffer)\n"
"is compared with MemAvailable and the weights with MemTotal, and a warning\n"
"is printed when they do not fit (a session larger than MemTotal is an\n"
"error); a frontier beyond the model's context_length gives a warning.\n"
"\n"
"Ctrl+C (or SIGTERM) stops the run at the next prefill chunk or decode\n"
"step: the rows so far are kept, the plot is written, the exit status is\n"
"130.  A second Ctrl+C exits at once (no plot).\n"
"\n"
"exit status: 0 ok, 1 error (model, memory, evaluation), 2 bad usage or\n"
"unreadable/unwritable files, 130 interrupted.\n");
}

/* ---------------------------------------------------------------------- */
/* arguments                                                               */
/* ---------------------------------------------------------------------- */

typedef struct {
    const char *model, *text, *plot;
    int ctx_start, ctx_max, step_incr, gen, threads, chunk;
    double step_mul;
    int have_incr, have_mul;
    int no_qat, no_warmup, verbose, no_probe;
    const char *kv_dir;      /* also time disk KV cache save/restore */
    int spec;                /* --spec N: speculative-decoding costs */
    const char *mtp;         /* --mtp FILE */
    int mtp_draft;           /* --mtp-draft N (-1 = not given) */
    const char *dist;                /* --dist: under mpirun (src/mpi/) */
    int ssd_streaming;       /* --ssd-streaming: expert columns in the CSV */
    uint64_t ssd_cache_bytes;
    int par[64], n_par, rounds;      /* --parallel LIST, --rounds R */
    ds4_model_opts mo;               /* the shared flags (copied above) */
} opts;

/* --parallel: a comma-separated list of stream counts 1..64 */
static void parse_par_list(const char *v, opts *o) {
    const char *p = v;
    o->n_par = 0;
    for (;;) {
        char *end;
        errno = 0;
        long n = strtol(p, &end, 10);
        if (end == p || errno || n < 1 || n > 64 || (*end && *end != ','))
            die_usage("--parallel wants a list of stream counts 1..64 such as 1,2,4,8 (got '%s')", v);
        if (o->n_par == 64) die_usage("--parallel: at most 64 entries");
        o->par[o->n_par++] = (int)n;
        if (!*end) break;
        p = end + 1;
    }
}

static void parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->ctx_start = 2048;
    o->ctx_max = 32768;
    o->step_mul = 2.0;
    o->gen = 16;
    ds4_model_opts_init(&o->mo, "ds4-bench", BENCH_GROUPS);
    ds4_args a;
    ds4_args_init(&a, "ds4-bench", argc, argv, usage);
    while (ds4_args_next(&a)) {
        if (ds4_model_opts_parse(&o->mo, &a)) continue;
        if (ds4_args_is(&a, NULL, "--prompt-file")) o->text = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--ctx-start")) o->ctx_start = ds4_args_int(&a, 1, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--ctx-max")) o->ctx_max = ds4_args_int(&a, 1, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--step-incr")) { o->step_incr = ds4_args_int(&a, 1, 1 << 24); o->have_incr = 1; }
        else if (ds4_args_is(&a, NULL, "--step-mul")) { o->step_mul = ds4_args_double(&a, -1e9, 1e9); o->have_mul = 1; }
        else if (ds4_args_is(&a, NULL, "--gen-tokens")) o->gen = ds4_args_int(&a, 1, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--plot")) o->plot = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--no-warmup")) o->no_warmup = 1;
        else if (ds4_args_is(&a, NULL, "--no-probe")) o->no_probe = 1;
        else if (ds4_args_is(&a, NULL, "--spec")) o->spec = ds4_args_int(&a, 1, DS4_DRAFT_PASS_MAX - 1);
        else if (ds4_args_is(&a, NULL, "--kv-disk-dir")) o->kv_dir = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--parallel")) parse_par_list(ds4_args_value(&a), o);
        else if (ds4_args_is(&a, NULL, "--rounds")) o->rounds = ds4_args_int(&a, 1, 1000);
        else if (ds4_args_is(&a, "-v", "--verbose")) o->verbose = 1;
        else ds4_args_unknown(&a);
    }
    o->model = o->mo.model;
    o->threads = o->mo.threads;
    o->chunk = o->mo.chunk;
    o->no_qat = o->mo.no_qat;
    o->ssd_streaming = o->mo.ssd_streaming;
    o->ssd_cache_bytes = o->mo.ssd_cache_bytes;
    o->mtp = o->mo.mtp;
    o->mtp_draft = o->mo.mtp_draft;
    o->dist = o->mo.dist;
    if (!o->text) die_usage("--prompt-file FILE is required (the text to prefill)");
    if (o->rounds && !o->n_par) die_usage("--rounds goes with --parallel");
    if (!o->rounds) o->rounds = 3;
    if (o->n_par) o->ctx_max = o->ctx_start;   /* one stream length: ctx-start */
    if (o->n_par && (o->dist || o->kv_dir || o->spec || o->plot))
        die_usage("--parallel measures concurrent decoding only: without --dist, --kv-disk-dir, --spec, --plot");
    if (o->have_incr && o->have_mul) die_usage("--step-incr and --step-mul are exclusive: give one");
    if (o->ctx_max < o->ctx_start)
        die_usage("--ctx-max (%d) must be >= --ctx-start (%d)", o->ctx_max, o->ctx_start);
    if (o->step_mul <= 1.0) die_usage("--step-mul must be > 1 (got %g)", o->step_mul);
    if ((int64_t)o->ctx_max + o->gen > (1 << 24))
        die_usage("--ctx-max + --gen-tokens must not exceed 16777216 tokens");
}

/* The frontier list (at least ctx_start). */
static int *make_frontiers(const opts *o, int *n_out) {
    int n = 0, cap = 16;
    int *f = malloc(cap * sizeof *f);
    if (!f) die("out of memory");
    int64_t x = o->ctx_start;
    while (x <= o->ctx_max) {
        if (n == cap) {
            cap *= 2;
            int *g = realloc(f, cap * sizeof *f);
            if (!g) die("out of memory");
            f = g;
        }
        f[n++] = (int)x;
        int64_t next = o->have_incr ? x + o->step_incr : (int64_t)floor((double)x * o->step_mul);
        if (next <= x) next = x + 1;
        x = next;
    }
    *n_out = n;
    return f;
}

/* ---------------------------------------------------------------------- */
/* system facts                                                            */
/* ---------------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    ds4_buf b = { 0 };
    if (ds4_buf_read_file(&b, path)) { ds4_buf_free(&b); return NULL; }
    *len = b.n;
    return b.p;
}

/* A /proc/meminfo field in bytes; 0 when unknown. */
static uint64_t meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtoull(line + kl + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    const char *keys[] = { "model name", "Model", "Hardware", "cpu model", "uarch" };
    int best = 99;
    while (fgets(line, sizeof line, f)) {
        for (int k = 0; k < (int)(sizeof keys / sizeof keys[0]) && k < best; k++) {
            size_t kl = strlen(keys[k]);
            if (strncmp(line, keys[k], kl)) continue;
            char *p = line + kl;
            while (*p == ' ' || *p == '\t') p++;
            if (*p != ':') continue;
            p++;
            while (*p == ' ' || *p == '\t') p++;
            size_t l = strcspn(p, "\n");
            while (l && (p[l - 1] == ' ' || p[l - 1] == '\t')) l--;
            if (!l) continue;
            snprintf(out, n, "%.*s", (int)l, p);
            best = k;
        }
    }
    fclose(f);
}

/* deepseek4.context_length from the model's metadata, through the
 * `ds4 --inspect` text (the public API has no field for it); 0 = unknown. */
static long model_context_length(const char *path) {
    char *txt = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&txt, &len);
    if (!mf) return 0;
    char *err = NULL;
    int rc = ds4_inspect(path, mf, &err);
    fclose(mf);
    free(err);
    long v = 0;
    if (rc == DS4_OK && txt) {
        const char *p = strstr(txt, ".context_length");
        if (p) {
            p += strlen(".context_length");
            while (*p == ' ' || *p == '\t') p++;
            v = strtol(p, NULL, 10);
        }
    }
    free(txt);
    return v > 0 ? v : 0;
}

/* Read the file once so its pages are cached before anything is timed. */
static void warm_up(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    size_t bs = 8u << 20;
    char *buf = malloc(bs);
    if (!buf) { close(fd); return; }
    double t0 = ds4_now();
    uint64_t got = 0;
    ssize_t k;
    while (!g_stop && (k = read(fd, buf, bs)) > 0) got += (uint64_t)k;
    free(buf);
    close(fd);
    double dt = ds4_now() - t0;
    note("warm-up: read the model file (%.2f GB) in %.2f s (%.0f MB/s)",
         got / 1e9, dt, dt > 0 ? got / 1e6 / dt : 0.0);
}

/* ---------------------------------------------------------------------- */
/* machine figures (tools/probe.c)                                         */
/* ---------------------------------------------------------------------- */

typedef struct {
    double read, triad, int8;   /* GB/s, GB/s, GOP/s */
    int kind;                   /* which int8 instruction gave the peak */
    double amx;                 /* AMX-INT8 tile peak, GOP/s (0: no AMX) */
} machine_fig;

/* STREAM read/triad over probe_read_size() (2 GiB where memory allows,
 * best of 3), the int8 vector peak and the AMX tile peak (best of 3 each):
 * a few seconds. */
static void measure_machine(int threads, machine_fig *f) {
    probe_stream_res sr = probe_stream(probe_read_size(), threads, 3);
    f->read = sr.read_gbs;
    f->triad = sr.triad_gbs;
    f->int8 = probe_int8_peak(threads, 3, &f->kind);
    f->amx = probe_peak(PROBE_AMX_INT8, threads, 3);
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---------------------------------------------------------------------- */
/* SVG plot                                                                */
/* ---------------------------------------------------------------------- */

typedef struct {
    int ctx, prefill_tokens, decode_tokens;
    double prefill_tps, decode_tps;
    uint64_t kv_bytes;
    double save_mbs, restore_mbs;
    uint64_t snap_bytes;
    double prefill_gflops, decode_gbs;   /* against the machine figures */
} row;

/* Write s as XML text: escapes markup, drops control characters and
 * replaces bytes that are not valid UTF-8 with '?'. */
static void xml_text(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c < 0x20) { fputc(' ', f); p++; continue; }
        if (c < 0x80) {
            switch (c) {
            case '&': fputs("&amp;", f); break;
            case '<': fputs("&lt;", f); break;
            case '>': fputs("&gt;", f); break;
            case '"': fputs("&quot;", f); break;
            case '\'': fputs("&apos;", f); break;
            default: fputc((int)c, f);
            }
            p++;
            continue;
        }
        int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        int ok = n > 0;
        for (int i = 1; ok && i < n; i++) ok = (p[i] & 0xc0) == 0x80;
        if (ok && n == 3 && c == 0xe0 && p[1] < 0xa0) ok = 0;   /* overlong */
        if (ok && n == 3 && c == 0xed && p[1] >= 0xa0) ok = 0;  /* surrogate */
        if (ok && n == 4 && c == 0xf0 && p[1] < 0x90) ok = 0;   /* overlong */
        if (ok && n == 4 && c == 0xf4 && p[1] >= 0x90) ok = 0;  /* > U+10FFFF */
        if (ok) { fwrite(p, 1, (size_t)n, f); p += n; }
        else { fputc('?', f); p++; }
    }
}

/* A "nice" tick step (1, 2, 5 x 10^k) giving about `want` intervals. */
static double nice_step(double range, int want) {
    if (!(range > 0)) return 1;
    double raw = range / want;
    double e = pow(10, floor(log10(raw)));
    double m = raw / e;
    double s = m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10;
    return s * e;
}

static void fmt_num(char *out, size_t n, double v, double step) {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 6) dec = 6;
    snprintf(out, n, "%.*f", dec, v);
}

typedef struct {
    double x0, x1;      /* plot area in pixels */
    double y0, y1;      /* y0 = bottom */
    double lo, hi;      /* x domain (log2 units when logx) */
    int logx;
} xmap;

static double map_x(const xmap *m, double ctx) {
    double v = m->logx ? log2(ctx) : ctx;
    if (m->hi <= m->lo) return (m->x0 + m->x1) / 2;
    return m->x0 + (v - m->lo) / (m->hi - m->lo) * (m->x1 - m->x0);
}

static void plot_series(FILE *f, const xmap *xm, const row *r, int n, int decode,
                        double ymax, const char *color) {
    fprintf(f, "  <polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" points=\"", color);
    for (int i = 0; i < n; i++) {
        double v = decode ? r[i].decode_tps : r[i].prefill_tps;
        double y = xm->y0 - v / ymax * (xm->y0 - xm->y1);
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", map_x(xm, r[i].ctx), y);
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < n; i++) {
        double v = decode ? r[i].decode_tps : r[i].prefill_tps;
        double y = xm->y0 - v / ymax * (xm->y0 - xm->y1);
        fprintf(f, "  <circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>ctx %d: %s %.2f tokens/s</title></circle>\n",
                map_x(xm, r[i].ctx), y, color, r[i].ctx, decode ? "decode" : "prefill", v);
    }
}

static int write_svg(FILE *f, const row *r, int n, const char *model_name,
                     const char *host, const char *cpu, int threads, int gen,
                     int logx, const char *date) {
    const double W = 960, H = 560;
    xmap xm = { 90, W - 100, H - 80, 95, 0, 0, logx };
    const char *cp = "#1f5fbf", *cd = "#d9480f";
    double pmax = 0, dmax = 0;
    int cmin = n ? r[0].ctx : 1, cmax = n ? r[n - 1].ctx : 1;
    for (int i = 0; i < n; i++) {
        if (r[i].prefill_tps > pmax) pmax = r[i].prefill_tps;
        if (r[i].decode_tps > dmax) dmax = r[i].decode_tps;
    }
    double pstep = nice_step(pmax > 0 ? pmax * 1.08 : 1, 5);
    double dstep = nice_step(dmax > 0 ? dmax * 1.08 : 1, 5);
    double ptop = pstep * ceil((pmax > 0 ? pmax * 1.08 : 1) / pstep);
    double dtop = dstep * ceil((dmax > 0 ? dmax * 1.08 : 1) / dstep);

    /* x domain and ticks */
    double xticks[64];
    int nxt = 0;
    double xstep = 0;
    if (logx) {
        xm.lo = log2(cmin);
        xm.hi = log2(cmax);
        double pad = (xm.hi - xm.lo) * 0.04;
        if (pad <= 0) pad = 0.5;
        xm.lo -= pad;
        xm.hi += pad;
        int every = (n + 11) / 12;
        for (int i = 0; i < n && nxt < 64; i += every) xticks[nxt++] = r[i].ctx;
    } else {
        xstep = nice_step(cmax - cmin, 8);
        xm.lo = xstep * floor(cmin / xstep);
        xm.hi = xstep * ceil(cmax / xstep);
        if (xm.hi <= xm.lo) { xm.lo -= xstep; xm.hi += xstep; }
        for (double v = xm.lo; v <= xm.hi + xstep * 1e-6 && nxt < 64; v += xstep) xticks[nxt++] = v;
    }

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"13\">\n",
            W, H, W, H);
    fprintf(f, "  <rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", W, H);
    /* title */
    fprintf(f, "  <text x=\"%.0f\" y=\"30\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\">ds4-bench: ", W / 2);
    xml_text(f, model_name);
    fprintf(f, "</text>\n");
    fprintf(f, "  <text x=\"%.0f\" y=\"52\" text-anchor=\"middle\" font-size=\"13\" fill=\"#444444\">", W / 2);
    xml_text(f, host);
    fputs(" \xc2\xb7 ", f);
    xml_text(f, cpu);
    fprintf(f, " \xc2\xb7 %d thread%s \xc2\xb7 %d greedy tokens per frontier \xc2\xb7 ", threads, threads == 1 ? "" : "s", gen);
    xml_text(f, date);
    fprintf(f, "</text>\n");

    /* grid and left axis (prefill) */
    for (double v = 0; v <= ptop + pstep * 1e-6; v += pstep) {
        double y = xm.y0 - v / ptop * (xm.y0 - xm.y1);
        char lab[64];
        fmt_num(lab, sizeof lab, v, pstep);
        fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n",
                xm.x0, y, xm.x1, y);
        fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n",
                xm.x0 - 5, y, xm.x0, y, cp);
        fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">%s</text>\n",
                xm.x0 - 8, y + 4, cp, lab);
    }
    /* right axis (decode) */
    for (double v = 0; v <= dtop + dstep * 1e-6; v += dstep) {
        double y = xm.y0 - v / dtop * (xm.y0 - xm.y1);
        char lab[64];
        fmt_num(lab, sizeof lab, v, dstep);
        fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n",
                xm.x1, y, xm.x1 + 5, y, cd);
        fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\" text-anchor=\"start\" fill=\"%s\">%s</text>\n",
                xm.x1 + 8, y + 4, cd, lab);
    }
    /* x ticks */
    for (int i = 0; i < nxt; i++) {
        double x = map_x(&xm, xticks[i]);
        char lab[64];
        fmt_num(lab, sizeof lab, xticks[i], logx ? 1 : xstep);
        fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#f0f0f0\"/>\n",
                x, xm.y1, x, xm.y0);
        fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>\n",
                x, xm.y0, x, xm.y0 + 5);
        fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, xm.y0 + 20, lab);
    }
    /* frame */
    fprintf(f, "  <rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333333\"/>\n",
            xm.x0, xm.y1, xm.x1 - xm.x0, xm.y0 - xm.y1);
    /* axis labels */
    fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\">context (tokens%s)</text>\n",
            (xm.x0 + xm.x1) / 2, H - 35, logx ? ", log scale" : "");
    fprintf(f, "  <text transform=\"translate(28 %.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"14\" fill=\"%s\">prefill tokens/s</text>\n",
            (xm.y0 + xm.y1) / 2, cp);
    fprintf(f, "  <text transform=\"translate(%.1f %.1f) rotate(90)\" text-anchor=\"middle\" font-size=\"14\" fill=\"%s\">decode tokens/s</text>\n",
            W - 28, (xm.y0 + xm.y1) / 2, cd);

    plot_series(f, &xm, r, n, 0, ptop, cp);
    plot_series(f, &xm, r, n, 1, dtop, cd);

    /* legend: one line between the subtitle and the plot, centred */
    double lx = W / 2 - 230, ly = 74;
    fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
            lx, ly - 4, lx + 30, ly - 4, cp);
    fprintf(f, "  <circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", lx + 15, ly - 4, cp);
    fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\">prefill tokens/s (left axis)</text>\n", lx + 38, ly);
    lx += 240;
    fprintf(f, "  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
            lx, ly - 4, lx + 30, ly - 4, cd);
    fprintf(f, "  <circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", lx + 15, ly - 4, cd);
    fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\">decode tokens/s (right axis)</text>\n", lx + 38, ly);
    if (n == 0)
        fprintf(f, "  <text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#999999\">no frontier completed</text>\n",
                (xm.x0 + xm.x1) / 2, (xm.y0 + xm.y1) / 2);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}

/* ---------------------------------------------------------------------- */
/* the run                                                                 */
/* ---------------------------------------------------------------------- */

typedef struct {
    double t0;
    int ctx;
    int tty;
    int shown;
} prog_ud;

static int on_progress(void *ud, int done, int total) {
    prog_ud *p = ud;
    if (g_stop) return 1;
    if (!p->tty || total < 64) return 0;
    double el = ds4_now() - p->t0;
    if (done < total || p->shown) {
        fprintf(stderr, "\r  prefill to %d: %d/%d tokens, %.1f tok/s   ", p->ctx, done, total,
                el > 0 ? done / el : 0.0);
        p->shown = 1;
        if (done == total) fprintf(stderr, "\r%*s\r", 70, "");
        fflush(stderr);
    }
    return 0;
}

/* --spec N at one frontier (the session is restored from `snap` before
 * each measurement; `ref` holds the plain greedy tokens from there):
 *   - one verification pass of T = 1, 2, 4, 8, 16 tokens (<= N + 1),
 *     committed to one token, against T = 1 (a decode step): the sizes
 *     interleaved in 9 rounds, the median of each;
 *   - decoding ref's length with prompt-lookup drafts (up to N);
 *   - decoding it with drafts that are always right (the next N tokens of
 *     ref): the speed-up at 100 % acceptance.
 * Both speculative runs must reproduce ref exactly. */
static int spec_bench(ds4_session *s, const ds4_buf *snap, const int32_t *ref, int n_ref,
                      double plain_tps, int N, int NM, int V, int target) {
    char *err = NULL;
    double base = 0;
    /* the sizes are measured in interleaved rounds (1, 2, 4, 8, 1, 2, ...)
     * so that a slow moment of the machine falls on all of them, not on
     * one size's block; the median of SPEC_ROUNDS each */
    enum { SPEC_ROUNDS = 9, SPEC_SIZES = 5 };
    int Ts[SPEC_SIZES], nT = 0;
    for (int T = 1; T <= N + 1 && T <= n_ref && T <= ds4_session_draft_capacity(s) && nT < SPEC_SIZES; T *= 2)
        Ts[nT++] = T;
    double tm[SPEC_SIZES][SPEC_ROUNDS];
    for (int r = 0; r < SPEC_ROUNDS; r++)
        for (int i = 0; i < nT; i++) {
            if (ds4_session_restore(s, snap->p, snap->n, &err)) { note("restore: %s", err); return 1; }
            double ta = ds4_now();
            int e = ds4_session_eval_draft(s, ref, Ts[i]);
            if (!e) e = ds4_session_draft_commit(s, 1);
            tm[i][r] = ds4_now() - ta;
            if (e) { note("verification pass failed: %s", ds4_strerror(e)); return 1; }
        }
    for (int i = 0; i < nT; i++) {
        const int T = Ts[i];
        qsort(tm[i], SPEC_ROUNDS, sizeof tm[i][0], cmp_dbl);
        const double med = tm[i][SPEC_ROUNDS / 2];
        if (T == 1) base = med;
        note("spec at %d: verification pass of %2d token%s %8.2f ms = %.2f x one decode step",
             target, T, T == 1 ? " " : "s", med * 1e3, base > 0 ? med / base : 0);
    }
    if (NM > 0) {
        /* one MTP draft step from a synced state (the first call catches
         * the block's window up after the restore), median of 5 */
        if (ds4_session_restore(s, snap->p, snap->n, &err)) { note("restore: %s", err); return 1; }
        int32_t d[DS4_DRAFT_PASS_MAX];
        int e = ds4_mtp_draft(s, ref[0], 1, d);
        double tm[5];
        for (int r = 0; r < 5 && e >= 0; r++) {
            double ta = ds4_now();
            e = ds4_mtp_draft(s, ref[0], 1, d);
            tm[r] = ds4_now() - ta;
        }
        if (e < 0) { note("MTP draft failed: %s", ds4_strerror(e)); return 1; }
        qsort(tm, 5, sizeof tm[0], cmp_dbl);
        note("spec at %d: one MTP draft step %8.2f ms = %.2f x one decode step", target, tm[2] * 1e3,
             base > 0 ? tm[2] / base : 0);
    }
    /* 0 = prompt lookup, 1 = always-right drafts, 2 = MTP drafts */
    for (int oracle = 0; oracle < (NM > 0 ? 3 : 2); oracle++) {
        if (ds4_session_restore(s, snap->p, snap->n, &err)) { note("restore: %s", err); return 1; }
        ds4_tokens hist = { 0 };
        if (ds4_tokens_reserve(&hist, (size_t)target + (size_t)n_ref + 1)) return 1;
        memcpy(hist.v, ds4_session_tokens(s), (size_t)target * sizeof(int32_t));
        hist.n = (size_t)target;
        ds4_spec_stats st = { 0 };
        double ta = ds4_now();
        int32_t cur = ds4_sample_greedy(ds4_session_logits(s), V);
        int n = 1, bad = 0, e = 0;
        bad |= cur != ref[0];
        hist.v[hist.n++] = cur;
        while (n < n_ref && !bad) {
            int32_t d[DS4_DRAFT_PASS_MAX], out[DS4_DRAFT_PASS_MAX];
            int most = oracle == 2 ? NM : N;
            int want = most < n_ref - n - 1 ? most : n_ref - n - 1, k = 0, no = 0;
            if (oracle == 1) for (k = 0; k < want; k++) d[k] = ref[n + k];
            else if (oracle == 2) k = ds4_mtp_draft(s, cur, want, d);
            else k = ds4_lookup_draft(hist.v, (int)hist.n, want, d);
            if (k < 0) { e = k; break; }
            e = ds4_spec_step(s, NULL, cur, d, k, -1, out, &no, &st);
            if (e) break;
            for (int i = 0; i < no; i++) {
                bad |= out[i] != ref[n + i];
                hist.v[hist.n++] = out[i];
            }
            n += no;
            cur = out[no - 1];
        }
        double td = ds4_now() - ta;
        ds4_tokens_free(&hist);
        if (e) { note("speculative decode failed: %s", ds4_strerror(e)); return 1; }
        if (bad) { note("speculative decode differs from plain greedy decoding: a bug"); return 1; }
        note("spec at %d: %-6s drafts: %d tokens in %llu passes, %.1f %% of %llu drafts accepted, "
             "%.2f tokens/pass, %.2f tok/s = %.2f x plain decoding", target,
             oracle == 2 ? "mtp" : oracle ? "oracle" : "lookup", n, (unsigned long long)st.passes,
             st.drafted ? 100.0 * st.accepted / st.drafted : 0.0, (unsigned long long)st.drafted,
             st.passes ? (double)st.emitted / st.passes : 0.0, td > 0 ? n / td : 0,
             td > 0 && plain_tps > 0 ? n / td / plain_tps : 0);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* --parallel: N streams decoded together (ds4_session_eval_batch)         */
/* ---------------------------------------------------------------------- */

/* Each stream is the text (BOS kept first) turned by 7 tokens per stream,
 * prefilled once and snapshotted; every measurement restores the streams
 * it uses and decodes o->gen greedy tokens for all of them, one batched
 * step per token.  Returns the exit status. */
static int run_parallel(const opts *o, ds4_model *m, const ds4_model_info *info, const ds4_tokens *seq,
                        int len, double read_gbs) {
    int maxn = 0;
    for (int i = 0; i < o->n_par; i++) if (o->par[i] > maxn) maxn = o->par[i];
    const int V = info->n_vocab, G = o->gen;
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = len + G;
    sp.prefill_chunk = o->chunk;
    sp.no_qat = o->no_qat;
    ds4_session *ss[64] = { 0 };
    ds4_buf snaps[64];
    memset(snaps, 0, sizeof snaps);
    int32_t *prompt = malloc((size_t)len * sizeof *prompt);
    /* ids[i][N-slot][g]: stream i's tokens in the run of list entry k */
    int32_t *ids = calloc((size_t)maxn * o->n_par * G, sizeof *ids);
    double *dt = calloc((size_t)o->n_par * o->rounds, sizeof *dt);
    ds4_batch_item *it = calloc((size_t)maxn, sizeof *it);
    int32_t *next = calloc((size_t)maxn, sizeof *next);
    if (!prompt || !ids || !dt || !it || !next) die("out of memory");
    char *err = NULL;
    note("parallel: %d streams of %d tokens, %d greedy tokens each, lists %d round%s", maxn, len, G,
         o->rounds, o->rounds == 1 ? "" : "s");
    for (int i = 0; i < maxn; i++) {
        ss[i] = ds4_session_new(m, &sp, &err);
        if (!ss[i]) die("stream %d: %s", i, err ? err : "cannot create the session");
        prompt[0] = seq->v[0];
        for (int t = 1; t < len; t++)
            prompt[t] = len > 1 ? seq->v[1 + (t - 1 + 7 * i) % (len - 1)] : seq->v[0];
        double ta = ds4_now();
        int e = ds4_session_eval(ss[i], prompt, len, NULL, NULL);
        if (e) die("stream %d prefill: %s", i, ds4_strerror(e));
        if (ds4_session_snapshot(ss[i], &snaps[i])) die("stream %d: snapshot failed", i);
        note("stream %d prefilled (%d tokens, %.1f tok/s)", i, len, len / (ds4_now() - ta));
        if (g_stop) break;
    }
    /* the list, round after round (interleaved: load drift hits every N) */
    int rc = 0;
    for (int r = 0; r < o->rounds && !g_stop && !rc; r++)
        for (int k = 0; k < o->n_par && !g_stop && !rc; k++) {
            int n = o->par[k];
            for (int i = 0; i < n; i++) {
                if (ds4_session_restore(ss[i], snaps[i].p, snaps[i].n, &err)) {
                    note("restore: %s", err ? err : "failed");
                    rc = 1;
                    break;
                }
                next[i] = ds4_sample_greedy(ds4_session_logits(ss[i]), V);
            }
            double ta = ds4_now();
            for (int g = 0; g < G && !rc; g++) {
                for (int i = 0; i < n; i++) {
                    ids[((size_t)i * o->n_par + k) * G + g] = next[i];
                    it[i] = (ds4_batch_item){ .s = ss[i], .toks = &next[i], .n = 1 };
                }
                int e = ds4_session_eval_batch(it, n);
                if (e) { note("batched step (N=%d): %s", n, ds4_strerror(e)); rc = 1; break; }
                for (int i = 0; i < n; i++) next[i] = ds4_sample_greedy(ds4_session_logits(ss[i]), V);
            }
            dt[(size_t)k * o->rounds + r] = ds4_now() - ta;
        }
    /* a stream's tokens do not depend on how many run beside it */
    int same = 1;
    for (int i = 0; i < maxn && !rc; i++) {
        int k0 = -1;
        for (int k = 0; k < o->n_par; k++) {
            if (o->par[k] <= i) continue;
            if (k0 < 0) { k0 = k; continue; }
            if (memcmp(ids + ((size_t)i * o->n_par + k) * G, ids + ((size_t)i * o->n_par + k0) * G,
                       (size_t)G * sizeof *ids))
                same = 0;
        }
    }
    if (!rc && !g_stop) {
        if (!same) { note("ERROR: a stream's tokens changed with the number of streams"); rc = 1; }
        else note("every stream's greedy tokens are the same for every N (batched == alone)");
    }
    /* weights per step: dense once; a routed expert once if any of the N
     * tokens uses it (expected count for uniform choices) */
    ds4_mem_plan mp;
    double routed = 0;
    if (ds4_memory_plan(o->model, len + G, o->threads, &mp, &err) == DS4_OK) routed = (double)mp.routed;
    free(err);
    err = NULL;
    const double E = info->n_expert, K = info->n_expert_used;
    double per_tok = (double)info->active_bytes_per_token, dense = per_tok - K / E * routed;
    printf("parallel,ctx,decode_tokens,step_ms,aggregate_tps,per_stream_tps,aggregate_x,per_stream_x,"
           "weight_mb_per_step,weight_mb_n_single\n");
    double agg1 = 0, ps1 = 0;
    for (int k = 0; k < o->n_par && !rc && !g_stop; k++) {
        int n = o->par[k];
        double t = median(dt + (size_t)k * o->rounds, o->rounds);
        double step_ms = t / G * 1e3, ps = G / t, agg = n * ps;
        if (k == 0) { agg1 = agg; ps1 = ps; }
        double wb = dense + routed * (1.0 - pow(1.0 - K / E, n));
        printf("%d,%d,%d,%.2f,%.3f,%.3f,%.2f,%.2f,%.1f,%.1f\n", n, len, G, step_ms, agg, ps, agg / agg1,
               ps / ps1, wb / 1e6, n * per_tok / 1e6);
        note("N=%d: step %.1f ms, aggregate %.2f tok/s (x%.2f), per stream %.2f tok/s (x%.2f); "
             "weights %.1f MB per step (%.1f GB/s%s) vs %.1f MB for %d single steps", n, step_ms, agg,
             agg / agg1, ps, ps / ps1, wb / 1e6, wb / (t / G) / 1e9,
             read_gbs > 0 ? "" : ", no STREAM figure", n * per_tok / 1e6, n);
        if (read_gbs > 0)
            note("N=%d: weight traffic is %.0f%% of STREAM read (%.1f GB/s)", n,
                 100.0 * wb / (t / G) / 1e9 / read_gbs, read_gbs);
    }
    fflush(stdout);
    for (int i = 0; i < maxn; i++) { ds4_session_free(ss[i]); ds4_buf_free(&snaps[i]); }
    free(prompt); free(ids); free(dt); free(it); free(next);
    if (g_stop) return 130;
    return rc;
}

/* Everything one run holds, shared by the steps of main. */
typedef struct {
    opts o;
    ds4_model *m;
    ds4_model_info info;
    int threads;
    char host[256], cpu[256];
    int *front, n_front, last, ctx_size;
    ds4_tokens seq;
    FILE *plot;
    uint64_t est, avail;
    int weights_fit, probing;
    machine_fig mf0, mf1;
    ds4_session *s;
    ds4_kvstore *kv;
    uint64_t kv_bytes_before;
    row *rows;
    int n_rows;
    int32_t *gen_ids;
    ds4_buf snap;
    int tty;
    int rewind;      /* --dist, or a model without snapshots (glm-dsa): a RAM
                      * checkpoint and a rewind instead of snapshot + restore */
} bench;

/* Files first: everything that can be checked before the long part (the
 * prompt text is returned), then the frontier schedule. */
static char *check_inputs(bench *b, size_t *text_len_out) {
    /* Files first: everything that can be checked before the long part. */
    size_t text_len = 0;
    char *text = read_file(b->o.text, &text_len);
    if (!text) die_usage("cannot read the prompt file %s: %s", b->o.text, strerror(errno));
    if (text_len == 0) die_usage("the prompt file %s is empty", b->o.text);
    if (b->o.dist && strchr(b->o.model, '%'))
        die_usage("ds4-bench --dist reads the whole model file (it warms the page cache from it); "
                  "per-rank files (PREFIX-rank%%d.gguf) run with ds4 and ds4-server");
    struct stat mst;
    if (stat(b->o.model, &mst) != 0)
        die_usage("cannot open the model %s: %s", b->o.model, strerror(errno));
    if (S_ISDIR(mst.st_mode)) die_usage("the model %s is a directory", b->o.model);
    if (access(b->o.model, R_OK) != 0)
        die_usage("cannot read the model %s: %s", b->o.model, strerror(errno));
    b->plot = NULL;
    if (b->o.plot) {
        b->plot = fopen(b->o.plot, "w");
        if (!b->plot) die_usage("cannot write the plot %s: %s", b->o.plot, strerror(errno));
    }


    b->n_front = 0;
    b->front = make_frontiers(&b->o, &b->n_front);
    b->last = b->front[b->n_front - 1];
    b->ctx_size = b->last + b->o.gen;
    *text_len_out = text_len;
    return text;
}

/* Load the model (and check the MTP block --mtp-draft needs). */
static void load_model(bench *b) {
    /* Model. */
    ds4_model_params mp;
    ds4_model_opts_model_params(&b->o.mo, &mp);
    char *err = NULL;
    double t0 = ds4_now();
    b->m = ds4_model_load(b->o.model, &mp, &err);
    if (!b->m) die("%s", err ? err : "cannot load the model");
    ds4_expert_cache_stats xs;
    ds4_model_expert_cache_stats(b->m, &xs);
    if (xs.enabled)
        note("ssd streaming: expert cache %.1f MiB = %llu slots of %.2f MiB (%.1f %% of the %llu routed "
             "expert slices, %.1f MiB), %.1f MiB resident, %s reads, %d readers",
             xs.cache_bytes / 1048576.0, (unsigned long long)xs.slots, xs.slot_bytes / 1048576.0,
             100.0 * (double)xs.slots / (double)xs.n_slices, (unsigned long long)xs.n_slices,
             xs.routed_bytes / 1048576.0, xs.resident_bytes / 1048576.0,
             xs.direct_io ? "O_DIRECT" : "buffered", xs.readers);
    if (b->o.mtp_draft < 0) b->o.mtp_draft = b->o.mtp ? DS4_MTP_DRAFT_DEFAULT : 0;
    if (b->o.mtp_draft > 0 && !ds4_model_has_mtp(b->m))
        die("--mtp-draft: %s has no MTP block (mtp.0.* tensors); name one with --mtp FILE", b->o.model);
    if (b->o.mtp_draft > 0 && !b->o.spec) b->o.spec = b->o.mtp_draft;
    double t_load = ds4_now() - t0;
    ds4_model_get_info(b->m, &b->info);
    b->threads = b->o.threads > 0 ? b->o.threads : ds4_default_threads();
    note("model %s: %s, %d layers, n_embd %d, %d experts (%d used), vocab %d, %.2f GB, "
         "%.1f MB of weights per decoded token, loaded in %.2f s",
         b->o.model, b->info.name, b->info.n_layer, b->info.n_embd, b->info.n_expert, b->info.n_expert_used,
         b->info.n_vocab, b->info.file_bytes / 1e9, b->info.active_bytes_per_token / 1e6, t_load);

}

/* The machine in one line: host, CPU, cores, threads, load average. */
static void note_machine(bench *b) {
    snprintf(b->host, sizeof b->host, "unknown host");
    struct utsname un;
    if (uname(&un) == 0) snprintf(b->host, sizeof b->host, "%s", un.nodename);
    cpu_model(b->cpu, sizeof b->cpu);
    char load[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (!fgets(load, sizeof load, lf)) snprintf(load, sizeof load, "?");
        fclose(lf);
        char *sp3 = load;
        for (int k = 0; k < 3 && sp3; k++) sp3 = strchr(sp3 + 1, ' ');
        if (sp3) *sp3 = 0;   /* keep the 1, 5 and 15 minute averages */
    }
    note("machine %s: %s, %ld online cores, %d thread%s, load average %s%s", b->host, b->cpu,
         sysconf(_SC_NPROCESSORS_ONLN), b->threads, b->threads == 1 ? "" : "s", load,
         atof(load) >= 0.5 ? " (other work is running: it skews the timings)" : "");

}

/* Memory and context checks (warnings: the run may still work). */
static void check_memory(bench *b) {
    b->est = ds4_session_memory_estimate(b->m, b->ctx_size);
    b->avail = meminfo("MemAvailable");
    uint64_t total = meminfo("MemTotal");
    note("session of %d tokens (last frontier %d + %d generated): ~%.1f MB, plus a snapshot "
         "buffer of at most about as much; MemAvailable %.1f GB, MemTotal %.1f GB",
         b->ctx_size, b->last, b->o.gen, b->est / 1e6, b->avail / 1e9, total / 1e9);
    if (total && b->est > total)
        die("a session of %d tokens needs ~%.1f GB but this machine has %.1f GB of RAM: "
            "lower --ctx-max", b->ctx_size, b->est / 1e9, total / 1e9);
    if (b->avail && 2 * b->est > b->avail)
        note("WARNING: the session (~%.1f GB) and its snapshot may not fit in the available "
             "memory (%.1f GB): lower --ctx-max", 2 * b->est / 1e9, b->avail / 1e9);
    b->weights_fit = !total || b->info.file_bytes + 2 * b->est <= total;
    if (!b->weights_fit)
        note("WARNING: the weights (%.1f GB) and the session do not fit in RAM (%.1f GB): "
             "weights will be re-read from disk and the speeds measure the disk",
             b->info.file_bytes / 1e9, total / 1e9);
    long model_ctx = model_context_length(b->o.model);
    if (model_ctx && b->ctx_size > model_ctx)
        note("WARNING: %d tokens exceed the model's context_length (%ld): positions beyond it "
             "are outside what the model was made for (speeds are still measured)",
             b->ctx_size, model_ctx);

}

/* Text -> tokens (BOS, then the text repeated up to the last frontier). */
static void build_sequence(bench *b, char *text, size_t text_len) {
    const ds4_tokenizer *tok = ds4_model_tokenizer(b->m);
    ds4_tokens piece = { 0 };
    if (ds4_tokenize(tok, text, text_len, DS4_TOK_PLAIN, &piece)) die("out of memory tokenizing");
    if (piece.n == 0) die_usage("the prompt file %s gives no tokens", b->o.text);
    if (ds4_tokens_reserve(&b->seq, (size_t)b->last + 1)) die("out of memory");
    int bos = ds4_tok_special(tok)->bos;
    if (bos >= 0) ds4_tokens_push(&b->seq, bos);
    int copies = 0;
    while (b->seq.n < (size_t)b->last) {
        size_t k = piece.n;
        if (k > (size_t)b->last - b->seq.n) k = (size_t)b->last - b->seq.n;
        memcpy(b->seq.v + b->seq.n, piece.v, k * sizeof(int32_t));
        b->seq.n += k;
        copies++;
    }
    note("text %s: %zu bytes, %zu tokens; %s%d cop%s used to reach %d tokens",
         b->o.text, text_len, piece.n, bos >= 0 ? "BOS + " : "", copies,
         copies == 1 ? "y (possibly partial)" : "ies (the last possibly partial)", b->last);
    free(text);
    ds4_tokens_free(&piece);

    fprintf(stderr, "ds4-bench: frontiers (%d):", b->n_front);
    for (int i = 0; i < b->n_front; i++) fprintf(stderr, " %d", b->front[i]);
    fprintf(stderr, "; %d greedy tokens at each; prefill chunk %d%s\n", b->o.gen, b->o.chunk,
            b->o.no_qat ? "; --no-qat" : "");
    if (b->front[b->n_front - 1] < b->o.ctx_max)
        note("(ctx-max %d is not on the schedule: the last frontier is %d)", b->o.ctx_max, b->last);

    if (!b->o.no_warmup && b->o.ssd_streaming) {
        note("warm-up skipped: --ssd-streaming (the cache starts cold, as a real run does)");
    } else if (!b->o.no_warmup) {
        if (b->weights_fit) warm_up(b->o.model);
        else note("warm-up skipped: the model file is larger than RAM");
    }

}

/* Machine figures before the run (and again after it). */
static void probe_before(bench *b) {
    b->probing = !b->o.no_probe && (!b->avail || b->avail > b->est + probe_read_size() + (1ull << 30));
    if (!b->o.no_probe && !b->probing) note("machine figures skipped: not enough free memory for the bandwidth run");
    if (b->probing) {
        measure_machine(b->threads, &b->mf0);
        note("machine figures (%d thread%s, before): STREAM read %.1f GB/s, triad %.1f GB/s; %s peak %.0f GOP/s; "
             "decode roofline %.2f tok/s (read / weights per token); AMX int8 tile peak %.0f GOP/s%s",
             b->threads, b->threads == 1 ? "" : "s", b->mf0.read, b->mf0.triad, b->mf0.kind >= 0 ? probe_kind_name(b->mf0.kind) : "int8",
             b->mf0.int8, b->mf0.read * 1e9 / (double)b->info.active_bytes_per_token, b->mf0.amx, b->mf0.amx > 0 ? "" : " (no AMX)");
    }

}

/* The session (room for the last frontier and the generated tokens), the
 * disk KV cache when asked, the CSV header and the per-run buffers. */
static int open_session(bench *b) {
    char *err = NULL;
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = b->ctx_size;
    sp.prefill_chunk = b->o.chunk;
    sp.no_qat = b->o.no_qat;
    b->s = ds4_session_new(b->m, &sp, &err);
    if (!b->s) die("%s", err ? err : "cannot create the session");
    if (b->o.kv_dir) {
        ds4_kvstore_params kp;
        ds4_kvstore_params_default(&kp);
        kp.dir = b->o.kv_dir;
        kp.space_bytes = 1ull << 40;   /* the bench measures, it does not evict */
        b->kv = ds4_kvstore_open(b->m, &kp, &err);
        if (!b->kv) { note("%s", err ? err : "cannot open the KV cache directory"); return 1; }
    }

    if (b->o.ssd_streaming) printf("%s,%s\n", CSV_HEADER, CSV_SSD);
    else printf("%s\n", CSV_HEADER);
    fflush(stdout);

    b->rows = calloc((size_t)b->n_front, sizeof *b->rows);
    b->gen_ids = malloc((size_t)b->o.gen * sizeof *b->gen_ids);
    if (!b->rows || !b->gen_ids) die("out of memory");
    b->tty = isatty(2);

    return 0;
}

/* One frontier: incremental prefill, snapshot, greedy decode (with the
 * --spec measurements), restore, the disk KV cache round trip; one CSV row.
 * 0 done, 1 an error (said), -1 interrupted. */
static int measure_frontier(bench *b, int fi, int *pos_io) {
    char *err = NULL;
    int pos = *pos_io;
    int target = b->front[fi];
    row *r = &b->rows[fi];
    r->ctx = target;
    r->prefill_tokens = target - pos;

    /* 1. incremental prefill */
    prog_ud pu = { ds4_now(), target, b->tty, 0 };
    double comm0 = ds4_dist_comm_seconds();
    ds4_expert_cache_stats x0, x1, x2;
    ds4_model_expert_cache_stats(b->m, &x0);
    double ta = ds4_now();
    int e = ds4_session_eval(b->s, b->seq.v + pos, target - pos, on_progress, &pu);
    double tp = ds4_now() - ta;
    if (e == DS4_ECANCEL) return -1;
    if (e) { note("prefill to %d failed: %s", target, xc_err(b->m, e)); return 1; }
    pos = *pos_io = target;
    double comm_p = ds4_dist_comm_seconds() - comm0;
    r->prefill_tps = tp > 0 ? r->prefill_tokens / tp : 0;
    r->kv_bytes = ds4_session_kv_bytes(b->s);

    /* 2. snapshot (the buffer is grown and touched before timing);
     * --dist, or a model without snapshots (glm-dsa: DS4_EUNSUP): a RAM
     * checkpoint to come back to instead */
    if (!b->rewind) {
        uint64_t need = ds4_session_snapshot_size(b->s);
        b->snap.n = 0;
        if (b->snap.cap <= need) {
            size_t old = b->snap.cap;
            if (ds4_buf_reserve(&b->snap, need)) { note("out of memory for a %.1f MB snapshot", need / 1e6); return 1; }
            if (b->snap.cap > old) memset(b->snap.p, 0, b->snap.cap);
        }
        ta = ds4_now();
        e = ds4_session_snapshot(b->s, &b->snap);
        double ts = ds4_now() - ta;
        if (e == DS4_EUNSUP && !b->o.spec) {
            note("this model has no snapshots: each frontier is rewound to instead");
            b->rewind = 1;
        } else if (e) {
            note("snapshot at %d failed: %s", target, ds4_strerror(e));
            return 1;
        } else {
            r->snap_bytes = b->snap.n;
            r->save_mbs = ts > 0 ? b->snap.n / 1e6 / ts : 0;
        }
    }
    if (b->rewind) {
        e = ds4_session_checkpoint(b->s, 0);
        if (e) { note("checkpoint at %d failed: %s", target, ds4_strerror(e)); return 1; }
    }

    /* 3. greedy decode */
    ds4_model_expert_cache_stats(b->m, &x1);
    int ng = 0;
    comm0 = ds4_dist_comm_seconds();
    ta = ds4_now();
    for (; ng < b->o.gen && !g_stop; ng++) {
        const float *lg = ds4_session_logits(b->s);
        if (!lg) { e = DS4_EINVAL; break; }
        int32_t t = ds4_sample_greedy(lg, b->info.n_vocab);
        b->gen_ids[ng] = t;
        e = ds4_session_eval(b->s, &t, 1, NULL, NULL);
        if (e) break;
    }
    double td = ds4_now() - ta;
    ds4_model_expert_cache_stats(b->m, &x2);
    double comm_d = ds4_dist_comm_seconds() - comm0;
    if (e) { note("decode at %d failed: %s", target, xc_err(b->m, e)); return 1; }
    if (ng < b->o.gen) return -1;   /* interrupted */
    r->decode_tokens = ng;
    r->decode_tps = td > 0 ? ng / td : 0;
    if (b->o.spec && spec_bench(b->s, &b->snap, b->gen_ids, ng, r->decode_tps, b->o.spec, b->o.mtp_draft, b->info.n_vocab, target)) {
        return 1;
    }

    /* 4. restore (b->rewind: rewind to the checkpoint) */
    ta = ds4_now();
    e = b->rewind ? ds4_session_rewind(b->s, target) : ds4_session_restore(b->s, b->snap.p, b->snap.n, &err);
    double tr = ds4_now() - ta;
    if (e) { note("restore at %d failed: %s", target, err ? err : ds4_strerror(e)); return 1; }
    if (ds4_session_n_tokens(b->s) != target) {
        note("restore at %d left %d tokens", target, ds4_session_n_tokens(b->s));
        return 1;
    }
    r->restore_mbs = tr > 0 ? b->snap.n / 1e6 / tr : 0;

    /* 5. disk KV cache: save the state, then restore it by its text */
    if (b->kv) {
        char *kerr = NULL;
        ta = ds4_now();
        e = ds4_kvstore_save(b->kv, b->s, DS4_KV_MANUAL, NULL, 0, &kerr);
        double tks = ds4_now() - ta;
        if (e) { note("disk save at %d failed: %s", target, kerr ? kerr : ds4_strerror(e)); free(kerr); return 1; }
        ds4_buf text = { 0 };
        if (ds4_detokenize(ds4_model_tokenizer(b->m), b->seq.v, (size_t)target, &text)) {
            note("out of memory detokenizing %d tokens", target);
            ds4_buf_free(&text);
            return 1;
        }
        ds4_session_reset(b->s);
        size_t used = 0;
        ta = ds4_now();
        int got = ds4_kvstore_restore(b->kv, b->s, text.p, text.n, 1, 0, &used);
        double tkr = ds4_now() - ta;
        ds4_buf_free(&text);
        if (got != target) { note("disk restore at %d gave %d tokens", target, got); return 1; }
        ds4_kvstore_stats ks;
        ds4_kvstore_get_stats(b->kv, &ks);
        double fb = (double)(ks.save_bytes - b->kv_bytes_before);   /* this frontier'b->s file */
        b->kv_bytes_before = ks.save_bytes;
        note("ctx %d: disk KV cache file %.2f MB: save %.0f MB/s (%.3f s), restore %.0f MB/s (%.3f s)",
             target, fb / 1e6, tks > 0 ? fb / 1e6 / tks : 0, tks, tkr > 0 ? fb / 1e6 / tkr : 0, tkr);
    }

    printf("%d,%d,%.2f,%d,%.3f,%llu,%llu", r->ctx, r->prefill_tokens, r->prefill_tps,
           r->decode_tokens, r->decode_tps, (unsigned long long)r->kv_bytes,
           (unsigned long long)b->info.active_bytes_per_token);
    if (b->o.ssd_streaming) {
        uint64_t ph = x1.hits - x0.hits, pm = x1.misses - x0.misses;
        uint64_t dh = x2.hits - x1.hits, dm = x2.misses - x1.misses;
        uint64_t db = x2.bytes_read - x1.bytes_read;
        double drs = x2.read_seconds - x1.read_seconds;
        printf(",%.4f,%.4f,%.0f,%.3f", ph + pm ? (double)ph / (double)(ph + pm) : 0.0,
               dh + dm ? (double)dh / (double)(dh + dm) : 0.0, ng ? (double)db / ng : 0.0,
               drs > 0 ? (double)db / drs / 1e9 : 0.0);
        note("ctx %d: experts: prefill hit rate %.1f %%, decode hit rate %.1f %%, %.2f MiB read per "
             "decoded token, %.2f GB/s while reading, decode waited %.2f s for reads", target,
             ph + pm ? 100.0 * (double)ph / (double)(ph + pm) : 0.0,
             dh + dm ? 100.0 * (double)dh / (double)(dh + dm) : 0.0, ng ? db / 1048576.0 / ng : 0.0,
             drs > 0 ? (double)db / drs / 1e9 : 0.0, x2.wait_seconds - x1.wait_seconds);
    }
    printf("\n");
    fflush(stdout);
    note("ctx %d: prefill %d tokens in %.2f s (%.2f tok/s) | decode %d tokens in %.2f s "
         "(%.3f tok/s) | kv %.2f MB | snapshot %.2f MB: save %.0f MB/s, restore %.0f MB/s",
         r->ctx, r->prefill_tokens, tp, r->prefill_tps, ng, td, r->decode_tps,
         r->kv_bytes / 1e6, r->snap_bytes / 1e6, r->save_mbs, r->restore_mbs);
    if (b->o.dist)
        note("ctx %d: --dist %s over %d ranks: rank 0 sends/waits %.3f ms a prefill token, "
             "%.3f ms a decoded token (%.0f %% / %.0f %% of the time)", r->ctx, b->o.dist,
             ds4_dist_size(), r->prefill_tokens ? 1e3 * comm_p / r->prefill_tokens : 0,
             ng ? 1e3 * comm_d / ng : 0, tp > 0 ? 100 * comm_p / tp : 0, td > 0 ? 100 * comm_d / td : 0);
    r->prefill_gflops = r->prefill_tps * 2.0 * (double)b->info.layer_macs_per_token * 1e-9;
    r->decode_gbs = r->decode_tps * (double)b->info.active_bytes_per_token * 1e-9;
    if (b->probing && b->mf0.read > 0 && b->mf0.int8 > 0)
        note("ctx %d: prefill %.0f GFLOP/s of layer matmuls = %.0f %% of the int8 peak | decode %.1f GB/s "
             "of weights = %.0f %% of STREAM read; prefill = %.1f %% of the AMX peak", r->ctx, r->prefill_gflops,
             100 * r->prefill_gflops / b->mf0.int8, r->decode_gbs, 100 * r->decode_gbs / b->mf0.read,
             b->mf0.amx > 0 ? 100 * r->prefill_gflops / b->mf0.amx : 0.0);
    if (b->o.verbose) {
        fprintf(stderr, "ds4-bench: gen ctx=%d:", target);
        for (int i = 0; i < ng; i++) fprintf(stderr, " %d", b->gen_ids[i]);
        fputc('\n', stderr);
    }
    b->n_rows++;
    free(err);
    return 0;
}

/* After the frontiers: the summary, the weights' page sizes, the second
 * machine probe and the plot.  Returns the exit status. */
static int report(bench *b, int rc, double t_all) {
    if (g_stop) note("interrupted: %d of %d frontiers done", b->n_rows, b->n_front);
    else if (!rc) note("done: %d frontiers in %.1f s", b->n_rows, ds4_now() - t_all);
    ds4_weight_pages wp;
    if (b->n_rows > 0 && !ds4_model_weight_pages(b->m, &wp) && wp.resident > 0) {
        note("weights: %.2f of %.2f GB of the model file mapped, %.0f %% of them on 2 MB pages", wp.resident / 1e9,
             wp.mapped / 1e9, 100.0 * (double)wp.huge / (double)wp.resident);
        if (ds4_weight_pages_small(&wp, (uint64_t)32 << 20))
            note("warning: most weights are mapped with 4 KB pages, which costs decode and prefill speed (a file "
                 "just written or copied stays in small pages until evicted: `sync; dd if=%s iflag=nocache count=0` "
                 "evicts it, the next run reads it back in 2 MB pages; docs/memory.md, \"Huge pages\")", b->o.model);
    }
    if (b->probing && b->n_rows > 0 && !g_stop) {
        measure_machine(b->threads, &b->mf1);
        /* the machine is shared: ratios against the mean of the two probes */
        double rd = 0.5 * (b->mf0.read + b->mf1.read), pk = 0.5 * (b->mf0.int8 + b->mf1.int8);
        note("machine figures (after): STREAM read %.1f GB/s, triad %.1f GB/s; int8 peak %.0f GOP/s; "
             "AMX peak %.0f GOP/s", b->mf1.read, b->mf1.triad, b->mf1.int8, b->mf1.amx);
        double pf[b->n_rows], dc[b->n_rows];
        for (int i = 0; i < b->n_rows; i++) {
            pf[i] = b->rows[i].prefill_gflops;
            dc[i] = b->rows[i].decode_gbs;
        }
        double mp = median(pf, b->n_rows), md = median(dc, b->n_rows);
        if (rd > 0 && pk > 0)
            note("summary (medians over %d frontiers, against the mean of both machine probes: read %.1f GB/s, "
                 "int8 peak %.0f GOP/s): prefill %.0f GFLOP/s = %.0f %% of the int8 peak; decode %.1f GB/s = "
                 "%.0f %% of the roofline (%.2f of %.2f tok/s); decode at ctx %d is %.0f %% of ctx %d",
                 b->n_rows, rd, pk, mp, 100 * mp / pk, md, 100 * md / rd,
                 md * 1e9 / (double)b->info.active_bytes_per_token, rd * 1e9 / (double)b->info.active_bytes_per_token,
                 b->rows[b->n_rows - 1].ctx, b->rows[0].decode_tps > 0 ? 100 * b->rows[b->n_rows - 1].decode_tps / b->rows[0].decode_tps : 0,
                 b->rows[0].ctx);
    }

    if (b->plot) {
        char date[64];
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        strftime(date, sizeof date, "%Y-%m-%d %H:%M", &tmv);
        int logx = !b->o.have_incr;
        if (write_svg(b->plot, b->rows, b->n_rows, b->info.name ? b->info.name : b->o.model, b->host, b->cpu, b->threads,
                      b->o.gen, logx, date) || fclose(b->plot)) {
            note("cannot write the plot %s: %s", b->o.plot, strerror(errno));
            rc = 1;
        } else {
            note("plot written to %s", b->o.plot);
        }
    }

    return rc;
}

int main(int argc, char **argv) {
    static bench B;   /* zeroed; one per process */
    bench *b = &B;
    parse_args(argc, argv, &b->o);
    b->rewind = b->o.dist != NULL;
    if (b->o.dist) {
        /* ranks > 0 serve rank 0 and never reach the measurements */
        if (b->o.kv_dir) die_usage("--kv-disk-dir does not work with --dist (snapshots are not distributed)");
        char *derr = NULL;
        int wrc = 0, r = ds4_model_opts_start_dist(&b->o.mo, &argc, &argv, &wrc, &derr);
        if (r < 0) die_usage("%s", derr ? derr : "cannot start MPI");
        if (r > 0) return wrc;
    }
    size_t text_len = 0;
    char *text = check_inputs(b, &text_len);

    ds4_catch_signals(on_signal, NULL, 0);

    load_model(b);
    note_machine(b);
    check_memory(b);
    build_sequence(b, text, text_len);
    probe_before(b);
    if (b->o.n_par) {
        int prc = run_parallel(&b->o, b->m, &b->info, &b->seq, b->o.ctx_start,
                               b->probing ? b->mf0.read : 0);
        free(b->front);
        ds4_tokens_free(&b->seq);
        ds4_model_free(b->m);
        return prc;
    }
    if (open_session(b)) return 1;
    int rc = 0, pos = 0;
    double t_all = ds4_now();
    for (int fi = 0; fi < b->n_front && !g_stop; fi++) {
        int r = measure_frontier(b, fi, &pos);
        if (r) { if (r > 0) rc = 1; break; }
    }
    rc = report(b, rc, t_all);
    ds4_buf_free(&b->snap);
    free(b->rows);
    free(b->gen_ids);
    free(b->front);
    ds4_tokens_free(&b->seq);
    ds4_session_free(b->s);
    ds4_model_free(b->m);
    if (g_stop) return 130;
    return rc;
}
