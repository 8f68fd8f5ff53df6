/*
 * test_probe.c -- the machine probes of the benchmarks (tools/probe.c):
 * every measurement returns a figure in its plausible range on this CPU,
 * and 0 for what the CPU does not have.  No speed is asserted: a busy or
 * slow machine gives smaller figures, never a failure; what fails is a
 * probe that measures nothing (0 or NaN where the unit exists), reports a
 * unit the CPU lacks, or, for the AMX overlap, a fraction outside (0, 1.5]
 * (the multiplies with a tile instruction beside them cannot be much
 * faster than alone).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tools/probe.h"
#include "testutil.h"

static int sane(double v, double lo, double hi) { return isfinite(v) && v > lo && v <= hi; }

static void test_stream(void) {
    probe_stream_res r = probe_stream((size_t)64 << 20, 1, 1);
    CHECK(sane(r.read_gbs, 0, 1e4), "read %g GB/s", r.read_gbs);
    CHECK(sane(r.triad_gbs, 0, 1e4), "triad %g GB/s", r.triad_gbs);
}

static void test_peaks(void) {
    for (int k = 0; k < PROBE_NKIND; k++) {
        const double p = probe_peak(k, 1, 1);
        if (probe_kind_supported(k)) CHECK(sane(p, 0, 1e6), "%s: %g GOP/s", probe_kind_name(k), p);
        else CHECK(p == 0, "%s: not on this CPU, yet %g GOP/s", probe_kind_name(k), p);
    }
}

static void test_amx_overlap(void) {
    const probe_amx_share s = probe_amx_overlap(3);   /* best of 3: robust on a busy machine */
    const double v[4] = { s.zmm_tdp, s.zmm_store, s.ymm_tdp, s.ymm_store };
    const char *name[4] = { "zmm beside tdpbusd", "zmm beside tilestored", "ymm beside tdpbusd",
                            "ymm beside tilestored" };
    const int amx = probe_kind_supported(PROBE_AMX_INT8);
    for (int i = 0; i < 4; i++) {
        if (amx) CHECK(sane(v[i], 0, 1.5), "%s: %g of the rate alone", name[i], v[i]);
        else CHECK(v[i] == 0, "%s: no AMX here, yet %g", name[i], v[i]);
    }
    if (amx)
        printf("test_probe: fp32 multiplies beside one tdpbusd / tilestored per 64: zmm %.2f / %.2f, "
               "ymm %.2f / %.2f of their rate alone\n", v[0], v[1], v[2], v[3]);
    else
        printf("test_probe: no AMX on this CPU: the overlap probe reports zeros (checked)\n");
}

int main(void) {
    test_stream();
    test_peaks();
    test_amx_overlap();
    printf("test_probe: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
