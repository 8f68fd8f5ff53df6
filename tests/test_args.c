/*
 * test_args.c -- the shared argument helpers (src/common/args.c): number
 * and size parsing with their ranges and messages, the argv cursor
 * (--flag value, --flag=value, optional values, positionals) and the
 * version string; the default thread count (DS4_THREADS, then the
 * affinity mask).  Exiting paths (bad values, --help, --version) are
 * covered by tests/t_cli.sh through the binaries.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"
#include "common/args.h"
#include "testutil.h"

static void test_i64(void) {
    char why[128];
    int64_t v = 0;
    CHECK(ds4_parse_i64("42", 0, 100, &v, why, sizeof why) == 0 && v == 42, "42");
    CHECK(ds4_parse_i64("-7", -10, 10, &v, why, sizeof why) == 0 && v == -7, "-7");
    CHECK(ds4_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v, why, sizeof why) == 0 &&
          v == INT64_MAX, "INT64_MAX");
    const char *bad[] = { "", " 5", "5 ", "5x", "x", "0x10", "1e3", "99999999999999999999", "--1", NULL };
    for (int i = 0; bad[i]; i++) {
        v = 123;
        CHECK(ds4_parse_i64(bad[i], INT64_MIN, INT64_MAX, &v, why, sizeof why) == -1 && v == 123,
              "'%s' accepted", bad[i]);
    }
    CHECK(ds4_parse_i64(NULL, 0, 1, &v, why, sizeof why) == -1, "NULL");
    CHECK(ds4_parse_i64("101", 0, 100, &v, why, sizeof why) == -1, "above the range");
    CHECK(strstr(why, "[0, 100]") != NULL, "range in the message: %s", why);
    CHECK(ds4_parse_i64("-1", 0, 100, &v, why, sizeof why) == -1, "below the range");
    CHECK(ds4_parse_i64("-1", 0, 100, &v, NULL, 0) == -1, "NULL why");
}

static void test_u64(void) {
    char why[128];
    uint64_t v = 0;
    CHECK(ds4_parse_u64("18446744073709551615", &v, why, sizeof why) == 0 && v == UINT64_MAX, "max");
    CHECK(ds4_parse_u64("0x10", &v, why, sizeof why) == 0 && v == 16, "hex");
    CHECK(ds4_parse_u64("010", &v, why, sizeof why) == 0 && v == 10, "decimal, not octal");
    CHECK(ds4_parse_u64("0x", &v, why, sizeof why) == -1, "0x alone");
    CHECK(ds4_parse_u64("0x-1", &v, why, sizeof why) == -1, "0x-1");
    CHECK(ds4_parse_u64("-1", &v, why, sizeof why) == -1, "-1 must not wrap");
    CHECK(ds4_parse_u64("+1", &v, why, sizeof why) == -1, "sign");
    CHECK(ds4_parse_u64("18446744073709551616", &v, why, sizeof why) == -1, "overflow");
    CHECK(ds4_parse_u64("12a", &v, why, sizeof why) == -1, "garbage");
}

static void test_double(void) {
    char why[128];
    double v = 0;
    CHECK(ds4_parse_double("0.5", 0, 1, &v, why, sizeof why) == 0 && v == 0.5, "0.5");
    CHECK(ds4_parse_double("1e-3", 0, 1, &v, why, sizeof why) == 0 && v == 1e-3, "1e-3");
    const char *bad[] = { "", "nan", "inf", "-inf", "1.5", "-0.1", "0.5x", " 0.5", "1e999", NULL };
    for (int i = 0; bad[i]; i++)
        CHECK(ds4_parse_double(bad[i], 0, 1, &v, why, sizeof why) == -1, "'%s' accepted", bad[i]);
    CHECK(strstr(why, "[0, 1]") != NULL, "range in the message: %s", why);
}

static void test_size(void) {
    char why[128];
    uint64_t v = 0;
    struct { const char *s; uint64_t unit, want; } ok[] = {
        { "4096", 1, 4096 },
        { "512MB", 1, 512ull << 20 },
        { "512mb", 1, 512ull << 20 },
        { "512M", 1, 512ull << 20 },
        { "512MiB", 1, 512ull << 20 },
        { "8GB", 1, 8ull << 30 },
        { "8 GB", 1, 8ull << 30 },
        { "1.5G", 1, 3ull << 29 },
        { "2T", 1, 2ull << 40 },
        { "3k", 1, 3072 },
        { "100B", 1 << 20, 100 },
        { "100", 1 << 20, 100ull << 20 },   /* a bare number in the default unit */
        { NULL, 0, 0 },
    };
    for (int i = 0; ok[i].s; i++) {
        v = 0;
        int rc = ds4_parse_size(ok[i].s, ok[i].unit, 0, UINT64_MAX, &v, why, sizeof why);
        CHECK(rc == 0 && v == ok[i].want, "'%s' -> %llu (rc %d), want %llu", ok[i].s,
              (unsigned long long)v, rc, (unsigned long long)ok[i].want);
    }
    const char *bad[] = { "", "GB", "-1GB", "+1GB", "8XB", "8GBs", "8 G B", "1e30T", "nan", "inf", " 8GB", NULL };
    for (int i = 0; bad[i]; i++)
        CHECK(ds4_parse_size(bad[i], 1, 0, UINT64_MAX, &v, why, sizeof why) == -1, "'%s' accepted", bad[i]);
    CHECK(ds4_parse_size("1KB", 1, 1 << 20, 1 << 30, &v, why, sizeof why) == -1, "below the range");
    CHECK(strstr(why, "1 MiB") && strstr(why, "1 GiB"), "range in the message: %s", why);
    char b[32];
    CHECK(!strcmp(ds4_format_size(8ull << 30, b, sizeof b), "8 GiB"), "format 8 GiB: %s", b);
    CHECK(!strcmp(ds4_format_size(1536, b, sizeof b), "1.50 KiB"), "format 1536: %s", b);
    CHECK(!strcmp(ds4_format_size(100, b, sizeof b), "100 B"), "format 100: %s", b);
}

static void test_cursor(void) {
    char *argv[] = { "prog", "-m", "model.gguf", "--ctx=4096", "--flag", "pos1", "--tokenize",
                     "--x", "--tokenize=abc", "-", "--ctxx", NULL };
    int argc = 11;
    ds4_args a;
    ds4_args_init(&a, "prog", argc, argv, NULL);
    CHECK(ds4_args_next(&a) && ds4_args_is(&a, "-m", "--model"), "-m");
    CHECK(!strcmp(ds4_args_value(&a), "model.gguf"), "-m value");
    CHECK(ds4_args_next(&a) && !ds4_args_is(&a, "-c", "--ct") && ds4_args_is(&a, "-c", "--ctx"),
          "--ctx= matches --ctx only");
    CHECK(ds4_args_int(&a, 16, 1 << 24) == 4096, "--ctx=4096");
    CHECK(ds4_args_next(&a) && ds4_args_is(&a, NULL, "--flag") && !ds4_args_positional(&a), "--flag");
    CHECK(ds4_args_next(&a) && ds4_args_positional(&a) && !strcmp(a.cur, "pos1"), "positional");
    CHECK(ds4_args_next(&a) && ds4_args_is(&a, NULL, "--tokenize"), "--tokenize");
    CHECK(ds4_args_optional(&a) == NULL, "an option is not an optional value");
    CHECK(ds4_args_next(&a) && !strcmp(a.cur, "--x"), "--x follows");
    CHECK(ds4_args_next(&a) && ds4_args_is(&a, NULL, "--tokenize"), "--tokenize=");
    const char *o = ds4_args_optional(&a);
    CHECK(o && !strcmp(o, "abc"), "--tokenize=abc");
    CHECK(ds4_args_next(&a) && ds4_args_positional(&a), "'-' alone is positional");
    CHECK(ds4_args_next(&a) && !ds4_args_is(&a, NULL, "--ctx"), "--ctxx is not --ctx");
    CHECK(!ds4_args_next(&a), "end");
}

static void test_version(void) {
    const char *v = ds4_version();
    CHECK(v && !strncmp(v, DS4_VERSION, strlen(DS4_VERSION)), "version '%s' starts with %s", v, DS4_VERSION);
}

/* ds4_thread_attr: at least DS4_THREAD_STACK_MIN of stack, never less than
 * the default, and a thread made with it runs */
static void *stack_user(void *arg) {
    volatile char buf[256 * 1024];   /* more than the kernels keep */
    buf[0] = 1;
    buf[sizeof buf - 1] = 2;
    *(int *)arg = buf[0] + buf[sizeof buf - 1];
    return NULL;
}

static void test_thread_attr(void) {
    pthread_attr_t def, a;
    size_t dsz = 0, sz = 0;
    CHECK(pthread_attr_init(&def) == 0 && pthread_attr_getstacksize(&def, &dsz) == 0, "default attr");
    pthread_attr_destroy(&def);
    CHECK(ds4_thread_attr(&a) == 0, "ds4_thread_attr");
    CHECK(pthread_attr_getstacksize(&a, &sz) == 0 && sz >= DS4_THREAD_STACK_MIN && sz >= dsz,
          "stack %zu (default %zu, minimum %zu)", sz, dsz, (size_t)DS4_THREAD_STACK_MIN);
    pthread_t th;
    int got = 0;
    CHECK(pthread_create(&th, &a, stack_user, &got) == 0 && pthread_join(th, NULL) == 0 && got == 3,
          "a thread with 256 KiB on its stack");
    pthread_attr_destroy(&a);
}

/* ds4_default_threads: DS4_THREADS when it is a positive integer, else the
 * CPUs this process may run on (restricted here to one CPU). */
static void test_default_threads(void) {
    unsetenv("DS4_THREADS");
    const int all = ds4_default_threads();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(all >= 1 && all <= (online > 0 ? online : all), "default %d, online %ld", all, online);
    setenv("DS4_THREADS", "3", 1);
    CHECK(ds4_default_threads() == 3, "DS4_THREADS=3 gives %d", ds4_default_threads());
    const char *bad[] = { "0", "-2", "x", "3x", "", "99999", NULL };
    for (int i = 0; bad[i]; i++) {
        setenv("DS4_THREADS", bad[i], 1);
        CHECK(ds4_default_threads() == all, "DS4_THREADS='%s' ignored", bad[i]);
    }
    unsetenv("DS4_THREADS");
    cpu_set_t old, one;
    if (sched_getaffinity(0, sizeof old, &old) == 0) {
        int c = 0;
        while (c < CPU_SETSIZE && !CPU_ISSET(c, &old)) c++;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        if (c < CPU_SETSIZE && sched_setaffinity(0, sizeof one, &one) == 0) {
            CHECK(ds4_default_threads() == 1, "one CPU in the mask gives %d", ds4_default_threads());
            sched_setaffinity(0, sizeof old, &old);
        }
    }
}

int main(void) {
    test_default_threads();
    test_thread_attr();
    test_i64();
    test_u64();
    test_double();
    test_size();
    test_cursor();
    test_version();
    printf("test_args: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
