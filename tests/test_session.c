/*
 * test_session.c -- the session and sampler contracts of ds4.h, on the tiny
 * golden models:
 *   - snapshot at many positions, restore into a fresh session, continue:
 *     logits identical (bitwise) to an uninterrupted run;
 *   - corrupt / truncated / foreign snapshots are refused and leave the
 *     session untouched;
 *   - sync reuses the longest common prefix and only evaluates the suffix,
 *     rebuilds on divergence, and gives the same logits either way;
 *   - RAM checkpoints: a retry restores the prompt's end with the same
 *     logits, a divergence near the end rewinds to the tail checkpoint and
 *     matches a fresh evaluation, stale checkpoints are dropped;
 *   - ds4_eval stops exactly at the cold point and continued frontiers;
 *   - a full context is DS4_ECTX (state unchanged), bad ids DS4_EINVAL;
 *   - cancellation through the progress callback;
 *   - memory estimate and KV byte counts are consistent;
 *   - KV rows are f16 with the storage roundings on (half the float32
 *     bytes in memory and in snapshots), float32 under --no-qat; the f16
 *     -> f32 row conversion (F16C where built) equals the scalar one on
 *     all 65536 values; version-1 (float32-row) snapshots are refused;
 *   - sampler: greedy, seeded reproducibility, top-k/top-p/min-p filters.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "engine/engine_internal.h"   /* layer_state, kv_f16_to_f32 */

#include "testutil.h"

static int cancel_after;
static int progress_cancel(void *ud, int done, int total) {
    (void)ud; (void)total;
    return done >= cancel_after;
}

typedef struct {
    ds4_session *s;
    int n, at[16], why[16];
    int max_done;
} save_log;

static void log_save(void *ud, ds4_kv_reason why) {
    save_log *l = ud;
    if (l->n < 16) { l->at[l->n] = ds4_session_n_tokens(l->s); l->why[l->n] = why; l->n++; }
}

static int progress_max(void *ud, int done, int total) {
    save_log *l = ud;
    if (total == 250 && done > l->max_done) l->max_done = done;
    return 0;
}

static void test_model(const char *name) {
    char path[512], seq[512];
    snprintf(path, sizeof path, "%s/golden/models/%s", test_shared(), name);
    snprintf(seq, sizeof seq, "%s/golden/sequences/seq_600a.ids.txt", test_shared());
    ds4_model *m = test_load_model(path, 2);
    char *err = NULL;
    ds4_model_info info;
    ds4_model_get_info(m, &info);
    const int V = info.n_vocab;
    ds4_tokens ids = { 0 };
    CHECK(test_read_ids(seq, &ids) == 0 && ids.n == 600, "read %s", seq);
    const int N = 300;

    /* the weights' mapping as ds4-bench reports it (Linux /proc) */
    ds4_weight_pages wp;
    if (ds4_model_weight_pages(m, &wp) == 0)
        CHECK(wp.mapped == info.file_bytes && wp.resident <= wp.mapped + 4095 && wp.huge <= wp.resident,
              "weight pages: %llu resident, %llu huge, %llu mapped", (unsigned long long)wp.resident,
              (unsigned long long)wp.huge, (unsigned long long)wp.mapped);
    else
        CHECK(wp.mapped == 0 && wp.resident == 0 && wp.huge == 0, "weight pages unknown: fields not zeroed");

    /* the warning rule: enough resident, and most of it on 4 KB pages */
    ds4_weight_pages t1 = { 100 << 20, 80 << 20, 0 }, t2 = { 100 << 20, 80 << 20, 39 << 20 },
                     t3 = { 100 << 20, 80 << 20, 40 << 20 }, t4 = { 0, 0, 0 };
    CHECK(ds4_weight_pages_small(&t1, 64 << 20) && ds4_weight_pages_small(&t2, 64 << 20) &&
          !ds4_weight_pages_small(&t3, 64 << 20) && !ds4_weight_pages_small(&t1, 96 << 20) &&
          !ds4_weight_pages_small(&t4, 0), "ds4_weight_pages_small");

    /* reference: uninterrupted run, all logits */
    ds4_session *ref = test_new_session(m, 1024, 64);
    ds4_buf all = { 0 };
    ds4_session_capture(ref, &all, NULL);
    CHECK(ds4_session_eval(ref, ids.v, N, NULL, NULL) == DS4_OK, "eval");
    ds4_session_capture(ref, NULL, NULL);
    CHECK(all.n == (size_t)N * V * 4, "captured %zu bytes", all.n);
    const float *L = (const float *)all.p;
    CHECK(memcmp(ds4_session_logits(ref), L + (size_t)(N - 1) * V, (size_t)V * 4) == 0,
          "last logits match capture");

    /* snapshot at many positions (window edges, compression frontiers) */
    int cuts[] = { 1, 2, 3, 4, 5, 31, 32, 33, 35, 36, 127, 128, 129, 200, 255, 256, 299 };
    /* the sanitizer suite (tests/run.sh sets DS4_DEBUG_BUILD=1) runs every
     * fourth cut: ASan makes each ~10x slower, and the optimized suite
     * covers them all */
    const char *dbg = getenv("DS4_DEBUG_BUILD");
    const size_t cut_step = dbg && !strcmp(dbg, "1") ? 4 : 1;
    for (size_t ci = 0; ci < sizeof cuts / sizeof cuts[0]; ci += cut_step) {
        int k = cuts[ci];
        ds4_session *a = test_new_session(m, 1024, 64);
        CHECK(ds4_session_eval(a, ids.v, k, NULL, NULL) == DS4_OK, "eval %d", k);
        ds4_buf snap = { 0 };
        CHECK(ds4_session_snapshot(a, &snap) == DS4_OK, "snapshot");
        CHECK(snap.n == ds4_session_snapshot_size(a), "snapshot size %zu vs %llu", snap.n,
              (unsigned long long)ds4_session_snapshot_size(a));
        /* the same tokens evaluated otherwise -- the first few one at a
         * time (decode), the rest in chunks of 17 -- leave the same state,
         * byte for byte: KV rows, compressed rows, the compressor frontiers
         * (pooled per chunk, deepseek4.c comp_close) */
        {
            ds4_session *c = test_new_session(m, 1024, 17);
            int k1 = k < 5 ? k : 5, ok = 1;
            for (int i = 0; i < k1; i++) ok &= ds4_session_eval(c, ids.v + i, 1, NULL, NULL) == DS4_OK;
            if (k > k1) ok &= ds4_session_eval(c, ids.v + k1, k - k1, NULL, NULL) == DS4_OK;
            ds4_buf snap2 = { 0 };
            CHECK(ok && ds4_session_snapshot(c, &snap2) == DS4_OK, "eval/snapshot in pieces at %d", k);
            CHECK(snap2.n == snap.n && memcmp(snap2.p, snap.p, snap.n) == 0,
                  "%s: state after %d tokens in pieces == in chunks of 64", name, k);
            ds4_buf_free(&snap2);
            ds4_session_free(c);
        }
        ds4_session *b = test_new_session(m, 1024, 17);   /* other chunking too */
        CHECK(ds4_session_restore(b, snap.p, snap.n, &err) == DS4_OK, "restore at %d: %s", k, err ? err : "");
        CHECK(ds4_session_n_tokens(b) == k, "restored n_tokens");
        CHECK(memcmp(ds4_session_logits(b), L + (size_t)(k - 1) * V, (size_t)V * 4) == 0,
              "restored logits at %d", k);
        ds4_buf cont = { 0 };
        ds4_session_capture(b, &cont, NULL);
        /* continue: first one token (decode), then a prefill of the rest */
        CHECK(ds4_session_eval(b, ids.v + k, 1, NULL, NULL) == DS4_OK, "decode after restore");
        CHECK(ds4_session_eval(b, ids.v + k + 1, N - k - 1, NULL, NULL) == DS4_OK, "prefill after restore");
        CHECK(cont.n == (size_t)(N - k) * V * 4 &&
              memcmp(cont.p, L + (size_t)k * V, cont.n) == 0,
              "%s: snapshot at %d then continue == uninterrupted", name, k);
        ds4_buf_free(&cont);

        /* damaged snapshots are refused and leave `b` as it was */
        int before = ds4_session_n_tokens(b);
        CHECK(ds4_session_restore(b, snap.p, snap.n - 1, &err) != DS4_OK, "truncated accepted");
        free(err); err = NULL;
        CHECK(ds4_session_restore(b, snap.p, 20, &err) != DS4_OK, "header-only accepted");
        free(err); err = NULL;
        ds4_buf bad = { 0 };
        ds4_buf_append(&bad, snap.p, snap.n);
        bad.p[0] ^= 1;
        CHECK(ds4_session_restore(b, bad.p, bad.n, &err) != DS4_OK, "bad magic accepted");
        free(err); err = NULL;
        memcpy(bad.p, "GLMS", 4);      /* a glm-dsa session's snapshot: refused by name */
        CHECK(ds4_session_restore(b, bad.p, bad.n, &err) == DS4_EFORMAT && err && strstr(err, "glm-dsa"),
              "glm-dsa snapshot: %s", err ? err : "accepted");
        free(err); err = NULL;
        memcpy(bad.p, snap.p, snap.n);
        ((uint32_t *)bad.p)[8] += 1;    /* token count no longer matches the layers */
        CHECK(ds4_session_restore(b, bad.p, bad.n, &err) != DS4_OK, "inconsistent count accepted");
        free(err); err = NULL;
        ds4_buf_append(&bad, "x", 1);
        memcpy(bad.p, snap.p, snap.n);
        CHECK(ds4_session_restore(b, bad.p, snap.n + 1, &err) != DS4_OK, "trailing bytes accepted");
        free(err); err = NULL;
        CHECK(ds4_session_n_tokens(b) == before, "failed restore changed the session");
        ds4_buf_free(&bad);
        ds4_buf_free(&snap);
        ds4_session_free(a);
        ds4_session_free(b);
    }

    /* sync: prefix reuse, divergence rebuild, identical logits */
    {
        ds4_session *s = test_new_session(m, 1024, 64);
        int reused = -1;
        CHECK(ds4_session_sync(s, ids.v, 100, NULL, NULL, &reused) == DS4_OK && reused == 0, "sync 100");
        CHECK(ds4_session_sync(s, ids.v, 250, NULL, NULL, &reused) == DS4_OK && reused == 100,
              "sync extends: reused %d", reused);
        CHECK(memcmp(ds4_session_logits(s), L + (size_t)249 * V, (size_t)V * 4) == 0, "sync logits");
        CHECK(ds4_session_sync(s, ids.v, 250, NULL, NULL, &reused) == DS4_OK && reused == 250,
              "same sequence: nothing evaluated");
        /* divergence: same first 200, then different ids */
        ds4_tokens alt = { 0 };
        for (int i = 0; i < 260; i++) ds4_tokens_push(&alt, i < 200 ? ids.v[i] : ids.v[i + 300]);
        CHECK(ds4_session_sync(s, alt.v, 260, NULL, NULL, &reused) == DS4_OK, "divergent sync");
        ds4_session *fresh = test_new_session(m, 1024, 64);
        ds4_session_eval(fresh, alt.v, 260, NULL, NULL);
        CHECK(memcmp(ds4_session_logits(s), ds4_session_logits(fresh), (size_t)V * 4) == 0,
              "divergent sync == fresh evaluation");
        /* a shorter prefix (rewind) also gives exact logits */
        CHECK(ds4_session_sync(s, ids.v, 50, NULL, NULL, &reused) == DS4_OK, "rewind");
        CHECK(memcmp(ds4_session_logits(s), L + (size_t)49 * V, (size_t)V * 4) == 0, "rewind logits");
        ds4_tokens_free(&alt);
        ds4_session_free(fresh);
        ds4_session_free(s);
    }

    /* RAM checkpoints and checkpointed evaluation: a prompt evaluated by
     * ds4_eval with ram_tail 10 leaves checkpoints at 290 and 300; after
     * "generation" a retry of the prompt costs nothing and gives the same
     * logits; a prompt that diverges 5 tokens before the end goes back to
     * 290 and matches a fresh evaluation; a checkpoint above a rewind and
     * every checkpoint after a reset are dropped */
    {
        ds4_session *s = test_new_session(m, 1024, 64);
        ds4_eval_params ep;
        ds4_eval_params_default(&ep);
        ep.ram_tail = 10;
        CHECK(ds4_eval(s, ids.v, N, &ep) == DS4_OK, "ds4_eval prompt");
        CHECK(ds4_session_checkpoint_tokens(s, 0) == N - 10 && ds4_session_checkpoint_tokens(s, 1) == N,
              "checkpoints at %d and %d", ds4_session_checkpoint_tokens(s, 0),
              ds4_session_checkpoint_tokens(s, 1));
        CHECK(memcmp(ds4_session_logits(s), L + (size_t)(N - 1) * V, (size_t)V * 4) == 0,
              "split prompt logits == uninterrupted");
        CHECK(ds4_session_checkpoint_bytes(s) > 0 &&
              ds4_session_checkpoint_bytes(s) < ds4_session_memory_estimate(m, 1024),
              "checkpoint bytes %llu", (unsigned long long)ds4_session_checkpoint_bytes(s));
        ds4_eval_params gp;
        ds4_eval_params_default(&gp);
        for (int i = 0; i < 20; i++) CHECK(ds4_eval(s, ids.v + N + i, 1, &gp) == DS4_OK, "decode");
        CHECK(ds4_session_rewind(s, N - 3) == DS4_EINVAL && ds4_session_n_tokens(s) == N + 20,
              "rewind to a count no checkpoint holds is refused, session unchanged");
        int reused = -1;
        CHECK(ds4_eval_sync(s, ids.v, N, &ep, &reused) == DS4_OK && reused == N,
              "retry: reused %d of %d", reused, N);
        CHECK(memcmp(ds4_session_logits(s), L + (size_t)(N - 1) * V, (size_t)V * 4) == 0,
              "retry logits == first evaluation");
        /* a next turn that re-renders the last 5 tokens */
        ds4_tokens alt = { 0 };
        for (int i = 0; i < N + 40; i++) ds4_tokens_push(&alt, i < N - 5 ? ids.v[i] : ids.v[i + 200]);
        CHECK(ds4_eval_sync(s, alt.v, N + 40, &ep, &reused) == DS4_OK && reused == N - 10,
              "divergent next turn: reused %d (want %d)", reused, N - 10);
        ds4_session *fresh = test_new_session(m, 1024, 64);
        CHECK(ds4_session_eval(fresh, alt.v, N + 40, NULL, NULL) == DS4_OK, "fresh");
        CHECK(memcmp(ds4_session_logits(s), ds4_session_logits(fresh), (size_t)V * 4) == 0,
              "rewound + evaluated == fresh evaluation");
        CHECK(ds4_session_checkpoint_tokens(s, 0) == N + 30 && ds4_session_checkpoint_tokens(s, 1) == N + 40,
              "new checkpoints at the new prompt's end");
        /* the library's sync uses the checkpoints too */
        CHECK(ds4_session_sync(s, alt.v, N + 35, NULL, NULL, &reused) == DS4_OK && reused == N + 30,
              "sync rewinds through a checkpoint: reused %d", reused);
        CHECK(ds4_session_checkpoint_tokens(s, 1) == -1, "a checkpoint above the rewind is dropped");
        ds4_session_reset(s);
        CHECK(ds4_session_checkpoint_tokens(s, 0) == -1 && ds4_session_rewind_point(s, N) == 0,
              "reset drops every checkpoint");
        /* a prompt shorter than the tail still gets its end checkpoint */
        CHECK(ds4_eval(s, ids.v, 5, &ep) == DS4_OK && ds4_session_checkpoint_tokens(s, 1) == 5 &&
              ds4_session_checkpoint_tokens(s, 0) == -1, "short prompt: end checkpoint only");
        ds4_tokens_free(&alt);
        ds4_session_free(fresh);
        ds4_session_free(s);
    }

    /* ds4_eval stops exactly at the disk cache's cold point and continued
     * frontiers (the save callback sees the session there), and reports
     * progress over the whole call */
    {
        ds4_session *s = test_new_session(m, 1024, 64);
        ds4_kv_policy pol;
        ds4_kv_policy_default(&pol);
        pol.min_tokens = 16;
        pol.cold_max_tokens = 1000;
        pol.trim_tokens = 8;
        pol.align_tokens = 32;
        pol.continued_interval = 100;
        save_log sl = { s, 0, { 0 }, { 0 }, 0 };
        ds4_eval_params ep;
        ds4_eval_params_default(&ep);
        ep.kv_policy = &pol;
        ep.save = log_save;
        ep.save_ud = &sl;
        ep.cold = 1;
        ep.progress = progress_max;
        ep.progress_ud = &sl;
        CHECK(ds4_eval(s, ids.v, 250, &ep) == DS4_OK, "eval with policy");
        /* interval 100 aligned to 32: frontiers at 128, 256, ...; cold point
         * (250 - 8) aligned down to 224 */
        int cold = ds4_kv_policy_cold_point(&pol, 250), f = ds4_kv_policy_next_frontier(&pol, 0);
        CHECK(cold == 224 && f == 128, "policy arithmetic: cold %d frontier %d", cold, f);
        CHECK(sl.n == 2 && sl.at[0] == 128 && sl.why[0] == DS4_KV_CONTINUED &&
              sl.at[1] == 224 && sl.why[1] == DS4_KV_COLD,
              "saves: %d (first at %d, second at %d)", sl.n, sl.at[0], sl.at[1]);
        CHECK(sl.max_done == 250, "progress reached %d of 250", sl.max_done);
        CHECK(memcmp(ds4_session_logits(s), L + (size_t)249 * V, (size_t)V * 4) == 0,
              "stopping at checkpoints changes nothing");
        CHECK(ds4_eval(s, ids.v, 800, &ep) == DS4_ECTX && ds4_session_n_tokens(s) == 250,
              "ds4_eval beyond the context: ECTX, unchanged");
        ds4_session_free(s);
    }

    /* full context, bad ids, cancellation */
    {
        ds4_session *s = test_new_session(m, 64, 16);
        CHECK(ds4_session_eval(s, ids.v, 60, NULL, NULL) == DS4_OK, "eval 60");
        CHECK(ds4_session_eval(s, ids.v, 5, NULL, NULL) == DS4_ECTX, "ctx full is DS4_ECTX");
        CHECK(ds4_session_n_tokens(s) == 60, "ECTX left the session unchanged");
        CHECK(ds4_session_sync(s, ids.v, 65, NULL, NULL, NULL) == DS4_ECTX, "sync beyond ctx");
        CHECK(ds4_session_n_tokens(s) == 60, "sync ECTX left the session unchanged");
        int32_t badtok = V;
        CHECK(ds4_session_eval(s, &badtok, 1, NULL, NULL) == DS4_EINVAL, "id out of range");
        badtok = -1;
        CHECK(ds4_session_eval(s, &badtok, 1, NULL, NULL) == DS4_EINVAL, "negative id");
        CHECK(ds4_session_n_tokens(s) == 60, "bad id left the session unchanged");
        ds4_session_free(s);

        s = test_new_session(m, 1024, 32);
        cancel_after = 64;
        int rc = ds4_session_eval(s, ids.v, 200, progress_cancel, NULL);
        CHECK(rc == DS4_ECANCEL && ds4_session_n_tokens(s) == 64, "cancel at a chunk boundary: rc %d n %d",
              rc, ds4_session_n_tokens(s));
        CHECK(memcmp(ds4_session_logits(s), L + (size_t)63 * V, (size_t)V * 4) == 0,
              "cancelled session is valid");
        ds4_session_free(s);
    }

    /* memory accounting */
    {
        uint64_t e1 = ds4_session_memory_estimate(m, 1024), e2 = ds4_session_memory_estimate(m, 8192);
        CHECK(e1 > 0 && e2 > e1, "estimate grows with ctx");
        ds4_session *s = test_new_session(m, 1024, 64);
        uint64_t k0 = ds4_session_kv_bytes(s);
        ds4_session_eval(s, ids.v, 300, NULL, NULL);
        uint64_t k1 = ds4_session_kv_bytes(s);
        CHECK(k1 > k0, "kv bytes grow");
        /* f16 rows: the float32 (--no-qat) session holds the same rows in
         * twice the bytes; memory and snapshot differ by the f16 bytes */
        ds4_session_params p;
        ds4_session_params_default(&p);
        p.ctx_size = 1024;
        p.prefill_chunk = 64;
        p.no_qat = 1;
        ds4_session *s32 = ds4_session_new(m, &p, &err);
        CHECK(s32 != NULL, "no-qat session");
        ds4_session_eval(s32, ids.v, 300, NULL, NULL);
        uint64_t rows = 0;
        for (int il = 0; il < s->m->w.cfg.n_layer; il++) {
            const layer_state *st = &s->ls[il];
            int live = st->raw_len < s->m->w.cfg.n_swa ? st->raw_len : s->m->w.cfg.n_swa;
            rows += (uint64_t)(live + st->n_comp) * s->m->w.cfg.head_dim +
                    (uint64_t)st->n_icomp * s->m->w.cfg.idx_dim;
        }
        uint64_t k32 = ds4_session_kv_bytes(s32);
        CHECK(rows > 0 && k32 - k1 == rows * 2, "f16 rows: kv bytes %llu vs %llu float32 (rows %llu)",
              (unsigned long long)k1, (unsigned long long)k32, (unsigned long long)rows);
        CHECK(ds4_session_snapshot_size(s32) - ds4_session_snapshot_size(s) == rows * 2,
              "f16 rows: snapshot sizes");
        fprintf(stderr, "%s: KV of 300 tokens: %llu bytes f16 rows, %llu float32\n", name,
                (unsigned long long)k1, (unsigned long long)k32);
        /* a version-1 snapshot (float32 rows) is refused by its version */
        ds4_buf sn = { 0 };
        CHECK(ds4_session_snapshot(s, &sn) == DS4_OK, "snapshot");
        uint32_t v1 = 1;
        memcpy((uint8_t *)sn.p + 4, &v1, 4);
        err = NULL;
        CHECK(ds4_session_restore(s, sn.p, sn.n, &err) == DS4_EFORMAT && err && strstr(err, "version 1"),
              "version-1 snapshot refused: %s", err ? err : "(accepted)");
        free(err);
        CHECK(ds4_session_n_tokens(s) == 300, "refused snapshot left the session");
        ds4_buf_free(&sn);
        ds4_session_free(s32);
        ds4_session_free(s);
    }

    ds4_buf_free(&all);
    ds4_session_free(ref);
    ds4_tokens_free(&ids);
    ds4_model_free(m);
}

static void test_f16_rows(void) {
    uint16_t *h = malloc(65536 * 2);
    float *a = malloc(65536 * 4), *b = malloc(65536 * 4);
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    /* odd offsets and lengths: the vector body and the scalar tail */
    kv_f16_to_f32(h + 3, a + 3, 65533);
    kv_f16_to_f32_scalar(h + 3, b + 3, 65533);
    CHECK(memcmp(a + 3, b + 3, 65533 * 4) == 0, "f16 -> f32 rows equal the scalar reference");
    /* f16-exact floats go back to the same bits (NaNs keep NaN-ness) */
    uint16_t *h2 = malloc(65536 * 2);
    kv_f32_to_f16(b + 3, h2 + 3, 65533);
    int same = 1;
    for (int i = 3; i < 65536; i++) {
        int nan = (h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff);
        if (nan ? !((h2[i] & 0x7c00) == 0x7c00 && (h2[i] & 0x3ff)) : h2[i] != h[i]) same = 0;
    }
    CHECK(same, "f16 -> f32 -> f16 round trip");
    free(h); free(h2); free(a); free(b);
}

static void test_sampler(void) {
    enum { V = 1000 };
    float lg[V];
    for (int i = 0; i < V; i++) lg[i] = -0.01f * i;
    lg[123] = 5.0f;
    CHECK(ds4_sample_greedy(lg, V) == 123, "greedy");
    ds4_sampler_params p;
    ds4_sampler_params_default(&p);
    CHECK(p.temperature == 1.0f && p.top_p == 1.0f && p.min_p == 0.05f, "spec defaults");
    p.temperature = 0;
    ds4_sampler *s = ds4_sampler_new(V, &p);
    CHECK(ds4_sample(s, lg) == 123, "temperature 0 is greedy");
    ds4_sampler_free(s);

    /* reproducible with a seed, and different seeds differ somewhere */
    for (int i = 0; i < V; i++) lg[i] = 0.0f;
    p.temperature = 1.0f; p.min_p = 0.0f; p.seed = 42;
    ds4_sampler *a = ds4_sampler_new(V, &p), *b = ds4_sampler_new(V, &p);
    p.seed = 43;
    ds4_sampler *c = ds4_sampler_new(V, &p);
    int same = 1, diff = 0;
    for (int i = 0; i < 200; i++) {
        int x = ds4_sample(a, lg), y = ds4_sample(b, lg), z = ds4_sample(c, lg);
        same &= x == y;
        diff |= x != z;
    }
    CHECK(same, "same seed, same draws");
    CHECK(diff, "other seed, other draws");
    ds4_sampler_reseed(a, 42);
    ds4_sampler_reseed(b, 42);
    CHECK(ds4_sample(a, lg) == ds4_sample(b, lg), "reseed");
    ds4_sampler_free(a); ds4_sampler_free(b); ds4_sampler_free(c);

    /* top-k: only the k best appear */
    for (int i = 0; i < V; i++) lg[i] = (float)(i % 97) * 0.01f;   /* best: ids with i%97==96 */
    p.top_k = 3; p.seed = 7;
    s = ds4_sampler_new(V, &p);
    for (int i = 0; i < 500; i++) {
        int t = ds4_sample(s, lg);
        CHECK(t % 97 == 96, "top-k drew %d", t);
    }
    ds4_sampler_free(s);

    /* min-p: p_i >= min_p * p_max */
    for (int i = 0; i < V; i++) lg[i] = -10.0f;
    lg[1] = 0.0f; lg[2] = -1.0f; lg[3] = -4.0f;   /* exp(-4) = 0.018 < 0.05 */
    p.top_k = 0; p.min_p = 0.05f;
    s = ds4_sampler_new(V, &p);
    int seen2 = 0;
    for (int i = 0; i < 2000; i++) {
        int t = ds4_sample(s, lg);
        CHECK(t == 1 || t == 2, "min-p drew %d", t);
        seen2 += t == 2;
    }
    /* p(2)/ (p1+p2) = e^-1/(1+e^-1) = 0.269 */
    CHECK(seen2 > 2000 * 0.22 && seen2 < 2000 * 0.32, "min-p proportions: %d/2000", seen2);
    ds4_sampler_free(s);

    /* top-p: keep the smallest prefix with mass >= top_p */
    for (int i = 0; i < V; i++) lg[i] = -30.0f;
    lg[10] = logf(0.5f); lg[11] = logf(0.3f); lg[12] = logf(0.2f);
    p.min_p = 0.0f; p.top_p = 0.75f;
    s = ds4_sampler_new(V, &p);
    for (int i = 0; i < 1000; i++) {
        int t = ds4_sample(s, lg);
        CHECK(t == 10 || t == 11, "top-p drew %d", t);
    }
    ds4_sampler_free(s);
}

int main(void) {
    test_sampler();
    test_f16_rows();
    test_model("tiny-a-q2.gguf");
    test_model("tiny-a-f16.gguf");
    printf("test_session: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
