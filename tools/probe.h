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

/* Read (sum of an array with 64-byte vector loads into eight accumulators,
 * each thread its own slice) and triad (a = b + s*c, 12 bytes per element,
 * the STREAM convention) over `bytes` of memory on `nthreads` persistent
 * threads (created once; every pass starts behind a barrier); the best of
 * `reps` passes after one warm-up, as STREAM reports.  GB/s; 0 when the
 * array cannot be allocated.  `bytes` should be far above the last-level
 * cache (probe_read_size). */
typedef struct { double read_gbs, triad_gbs; } probe_stream_res;
probe_stream_res probe_stream(size_t bytes, int nthreads, int reps);

/* Anonymous memory for a bandwidth measurement (munmap to free), on 2 MB
 * pages where the kernel gives them, as the model loader asks for the
 * weights (gguf_map_hugepages): a roofline or a kernel sweep measured on
 * the page size the weights are read from.  NULL when it cannot. */
void *probe_map(size_t bytes);

/* The read probe's size: 2 GiB, or a quarter of the available memory
 * when that is less (not below 256 MiB). */
size_t probe_read_size(void);

/* One pass of the read loop over a caller's buffer (e.g. to drain the
 * write-backs of freshly written memory before measuring): GB/s. */
double probe_read_buffer(const void *p, size_t bytes, int nthreads);

/* PROBE_AMX_INT8: the AMX tile unit (TDPBUSD), which only the amx table's
 * batched Q8_0/MXFP4 tiles use; probe_int8_peak leaves it out (the vector
 * units' peak, what every other kernel can reach). */
enum { PROBE_VNNI512, PROBE_VNNI256, PROBE_AVX2_I8, PROBE_FMA512, PROBE_FMA256, PROBE_AMX_INT8, PROBE_NKIND };

const char *probe_kind_name(int kind);
int probe_kind_supported(int kind);
/* Register-only loops of `kind` on `nthreads` threads, the best of `reps`:
 * GOP/s (2 operations per multiply-add); 0 when unsupported. */
double probe_peak(int kind, int nthreads, int reps);
/* The best int8 dot-product peak of the kinds this CPU has (what the integer
 * kernels can use); *kind receives which one (may be NULL). */
double probe_int8_peak(int nthreads, int reps, int *kind);

/* How the AMX tile unit shares a core with vector floating point: the
 * rate of independent fp32 multiplies, zmm and ymm, with one TDPBUSD or
 * one TILESTORED issued per 64 of them, as a fraction of their rate alone
 * (1 = no interference); one thread, its own CPU clock, the best of
 * `reps`.  All 0 where AMX is not usable.  The exact Q8_0/MXFP4 tiles
 * store a C tile and run their float step once per 32-element block
 * (quant_amx.c), so on a core where these fractions are near 1/2 the two
 * cannot overlap (docs/perf/kernels-diary.md, twelfth session). */
typedef struct { double zmm_tdp, zmm_store, ymm_tdp, ymm_store; } probe_amx_share;
probe_amx_share probe_amx_overlap(int reps);

#endif
