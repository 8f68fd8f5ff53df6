/*
 * imatrix.c -- routed-expert importance matrix (see imatrix.h).
 *
 * Owns: accumulation and the DS4IMAT1 file.  Must not: change anything the
 * forward pass computes (it only reads the activations it is given).
 *
 * File (little-endian): "DS4IMAT1", u32 version (1), u32 n_layer,
 * u32 n_expert, u32 n_embd, u32 n_ff, u32 0, u64 n_tokens, then for each
 * layer, for each expert: u64 count, f32 gate/up mean[n_embd],
 * f32 down mean[n_ff] (means of x^2 over the count routed tokens; zeros
 * when count is 0).  Sums are kept in double in token order, so the same
 * prompt gives the same file.
 */
#include "engine/imatrix.h"
#include "base/afile.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

ds4_imatrix *ds4_imatrix_alloc(uint32_t n_layer, uint32_t n_expert, uint32_t n_embd, uint32_t n_ff) {
    if (!n_layer || !n_expert || !n_embd || !n_ff || n_layer > 4096 || n_expert > 65536 ||
        n_embd > (1u << 20) || n_ff > (1u << 20))
        return NULL;
    ds4_imatrix *im = calloc(1, sizeof *im);
    if (!im) return NULL;
    const size_t le = (size_t)n_layer * n_expert;
    im->n_layer = n_layer; im->n_expert = n_expert; im->n_embd = n_embd; im->n_ff = n_ff;
    im->count = calloc(le, sizeof *im->count);
    im->gu = calloc(le * n_embd, sizeof *im->gu);
    im->dn = calloc(le * n_ff, sizeof *im->dn);
    if (!im->count || !im->gu || !im->dn) { ds4_imatrix_free(im); return NULL; }
    return im;
}

void ds4_imatrix_free(ds4_imatrix *im) {
    if (!im) return;
    free(im->count);
    free(im->gu);
    free(im->dn);
    free(im);
}

void ds4_imatrix_add_moe(ds4_imatrix *im, int il, const float *a, const float *h, const int *rows,
                         const int *eoff, const int *ecount) {
    if (!im || il < 0 || (uint32_t)il >= im->n_layer) return;
    const size_t D = im->n_embd, F = im->n_ff;
    for (uint32_t e = 0; e < im->n_expert; e++) {
        const size_t le = (size_t)il * im->n_expert + e;
        double *gu = im->gu + le * D, *dn = im->dn + le * F;
        for (int i = eoff[e]; i < eoff[e] + ecount[e]; i++) {
            const float *x = a + (size_t)rows[i] * D, *y = h + (size_t)i * F;
            for (size_t k = 0; k < D; k++) gu[k] += (double)x[k] * x[k];
            for (size_t k = 0; k < F; k++) dn[k] += (double)y[k] * y[k];
        }
        im->count[le] += (uint64_t)ecount[e];
    }
}

static int w32(FILE *f, uint32_t v) { return fwrite(&v, 4, 1, f) == 1 ? 0 : -1; }
static int w64(FILE *f, uint64_t v) { return fwrite(&v, 8, 1, f) == 1 ? 0 : -1; }

int ds4_imatrix_save(const ds4_imatrix *im, const char *path, char **err) {
    ds4_afile af;
    if (ds4_afile_open(&af, path, 0644)) { *err = fmt("%s: %s", path, strerror(errno)); return -1; }
    FILE *f = af.f;
    int bad = fwrite(DS4_IMATRIX_MAGIC, 8, 1, f) != 1;
    bad |= w32(f, 1) | w32(f, im->n_layer) | w32(f, im->n_expert) | w32(f, im->n_embd) |
           w32(f, im->n_ff) | w32(f, 0) | w64(f, im->n_tokens);
    const size_t cap = im->n_embd > im->n_ff ? im->n_embd : im->n_ff;
    float *row = malloc(cap * sizeof *row);
    if (!row) bad = 1;
    for (size_t le = 0; !bad && le < (size_t)im->n_layer * im->n_expert; le++) {
        const uint64_t n = im->count[le];
        bad |= w64(f, n);
        for (size_t k = 0; k < im->n_embd; k++) row[k] = n ? (float)(im->gu[le * im->n_embd + k] / n) : 0.0f;
        bad |= fwrite(row, 4, im->n_embd, f) != im->n_embd;
        for (size_t k = 0; k < im->n_ff; k++) row[k] = n ? (float)(im->dn[le * im->n_ff + k] / n) : 0.0f;
        bad |= fwrite(row, 4, im->n_ff, f) != im->n_ff;
    }
    free(row);
    if (bad) {
        *err = fmt("%s: write failed: %s", path, strerror(errno));
        ds4_afile_abort(&af);
        return -1;
    }
    if (ds4_afile_commit(&af)) { *err = fmt("%s: write failed: %s", path, strerror(errno)); return -1; }
    return 0;
}

ds4_imatrix *ds4_imatrix_load(const char *path, char **err) {
    FILE *f = fopen(path, "rb");
    if (!f) { *err = fmt("%s: %s", path, strerror(errno)); return NULL; }
    char magic[8];
    uint32_t h[6];
    uint64_t ntok;
    ds4_imatrix *im = NULL;
    float *row = NULL;
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, DS4_IMATRIX_MAGIC, 8) || fread(h, 4, 6, f) != 6 ||
        fread(&ntok, 8, 1, f) != 1 || h[0] != 1) {
        *err = fmt("%s: not a ds4 importance matrix (DS4IMAT1 version 1)", path);
        goto fail;
    }
    im = ds4_imatrix_alloc(h[1], h[2], h[3], h[4]);
    if (!im) { *err = fmt("%s: bad dimensions or out of memory", path); goto fail; }
    im->n_tokens = ntok;
    fseeko(f, 0, SEEK_END);
    const uint64_t need = 40 + (uint64_t)h[1] * h[2] * (8 + 4ull * (h[3] + h[4]));
    if ((uint64_t)ftello(f) != need) {
        *err = fmt("%s: %lld bytes, expected %llu for %u layers x %u experts (truncated or "
                   "corrupted)", path, (long long)ftello(f), (unsigned long long)need, h[1], h[2]);
        goto fail;
    }
    fseeko(f, 40, SEEK_SET);
    row = malloc((size_t)(h[3] > h[4] ? h[3] : h[4]) * 4);
    if (!row) { *err = fmt("out of memory"); goto fail; }
    for (size_t le = 0; le < (size_t)h[1] * h[2]; le++) {
        if (fread(&im->count[le], 8, 1, f) != 1) goto short_read;
        for (int part = 0; part < 2; part++) {
            const size_t n = part ? h[4] : h[3];
            double *dst = part ? im->dn + le * n : im->gu + le * n;
            if (fread(row, 4, n, f) != n) goto short_read;
            for (size_t k = 0; k < n; k++) {
                if (!isfinite(row[k]) || row[k] < 0) {
                    *err = fmt("%s: value %g at layer %zu expert %zu is not a mean square", path,
                               (double)row[k], le / h[2], le % h[2]);
                    goto fail;
                }
                dst[k] = row[k];
            }
        }
    }
    free(row);
    fclose(f);
    return im;
short_read:
    *err = fmt("%s: short read", path);
fail:
    free(row);
    ds4_imatrix_free(im);
    fclose(f);
    return NULL;
}

const double *ds4_imatrix_gu(const ds4_imatrix *im, int il, int e) {
    const size_t le = (size_t)il * im->n_expert + (size_t)e;
    return im->count[le] ? im->gu + le * im->n_embd : NULL;
}

const double *ds4_imatrix_dn(const ds4_imatrix *im, int il, int e) {
    const size_t le = (size_t)il * im->n_expert + (size_t)e;
    return im->count[le] ? im->dn + le * im->n_ff : NULL;
}
