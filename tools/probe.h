/*
 * probe.h -- what this machine can do: STREAM-style memory bandwidth and
 * the compute peaks of the instruction sets the kernels use.
 *
 * Owns: its own threads (pthreads) and a temporary array for the
 * bandwidth runs.  Shared by bench_kernels and ds4-bench so that every
 * benchmark reports its figures against the same machine measurements,
 * taken in the same run.  Must not: depend on the engine.
 */
#ifndef DS4_PROBE_H
#define DS4_PROBE_H

#include <stddef.h>

/* Read (sum of an array) and triad (a = b + s*c, 12 bytes per element, the
 * STREAM convention) over `bytes` of memory on `nthreads` threads; the best
 * of `reps` repetitions after one warm-up, as STREAM reports.  GB/s; 0 when
 * the array cannot be allocated. */
typedef struct { double read_gbs, triad_gbs; } probe_stream_res;
probe_stream_res probe_stream(size_t bytes, int nthreads, int reps);

/* One pass of the read loop over a caller's buffer (e.g. to drain the
 * write-backs of freshly written memory before measuring): GB/s. */
double probe_read_buffer(const void *p, size_t bytes, int nthreads);

enum { PROBE_VNNI512, PROBE_VNNI256, PROBE_AVX2_I8, PROBE_FMA512, PROBE_FMA256, PROBE_NKIND };

const char *probe_kind_name(int kind);
int probe_kind_supported(int kind);
/* Register-only loops of `kind` on `nthreads` threads, the best of `reps`:
 * GOP/s (2 operations per multiply-add); 0 when unsupported. */
double probe_peak(int kind, int nthreads, int reps);
/* The best int8 dot-product peak of the kinds this CPU has (what the integer
 * kernels can use); *kind receives which one (may be NULL). */
double probe_int8_peak(int nthreads, int reps, int *kind);

#endif
