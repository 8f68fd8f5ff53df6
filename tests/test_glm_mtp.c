/*
 * test_glm_mtp.c -- the GLM graphs' NextN (MTP) drafts (glm-dsa:
 * src/models/glm_dsa.c, glm5-next: src/models/glm5_next.c; mtp.c;
 * docs/family.md "MTP") on a tiny file of tests/glm_gguf.py with
 * --set nextn=1, which tests/t_glm_mtp.sh / t_g5n_mtp.sh write and pass:
 *
 *   test_glm_mtp MODEL IDS.txt POS.f32 CHAIN.f32 CHAIN.txt [PLAIN]
 *
 * Writes, for t_glm_mtp.sh to compare with tests/oracle/glm_ref.py --mtp:
 *   POS.f32    the block's draft logits at every position p of the ids
 *              (a session fed token by token, a one-token draft from
 *              ids[p] before ids[p] is evaluated), float32 [n][vocab];
 *   CHAIN.f32  a chain of 3 drafts after ids[0..n-1) in one prefill with
 *              cur = ids[n-1]: each step's logits, [3][vocab];
 *   CHAIN.txt  the chain's first two drafts "d1,d2" (the reference's
 *              --mtp-drafts).
 * And checks, bit for bit (the block's rows follow the session whatever
 * built it):
 *   - step 0 of the chain (one prefill) == the token-by-token session's
 *     draft at position n-1, and chunked prefills agree;
 *   - greedy decoding with MTP drafts (ds4_spec_step_mtp, 1 and 3 per
 *     pass, and oracle drafts right for a varying count so that passes
 *     keep several tokens) == plain greedy decoding, and afterwards the
 *     block's draft logits == those of a fresh session that evaluated
 *     the same tokens in one prefill;
 *   - a rewind and the same tokens again (the block's rows are kept), and
 *     a short rewind with other tokens (the main state before them is
 *     held), give a fresh session's draft logits;
 *   - drafting leaves the session's logits alone;
 *   - a snapshot restored into a fresh session (the NextN block's rows
 *     travel with it) drafts what the saving session drafts;
 *   - with PLAIN (the same file without the block: the same trunk), its
 *     snapshot turned into the previous format version (GLMS 1, G5NS 2:
 *     no NextN section) is read as before -- the session's logits, and
 *     speculative greedy == plain greedy after it -- and an old-version
 *     one claiming the section is refused.
 * Run without arguments it says so and passes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "base/hash.h"

#include "testutil.h"

static int V;

/* The draft logits of a one-step draft from `cur` on s (copied to out). */
static void draft1(ds4_session *s, int32_t cur, float *out) {
    const float *before = ds4_session_logits(s);
    float b7 = before ? before[7] : 0.0f;
    int32_t d;
    CHECK(ds4_mtp_draft(s, cur, 1, &d) == 1, "one draft");
    const float *l = ds4_mtp_logits(s);
    CHECK(l != NULL, "mtp logits");
    if (l) memcpy(out, l, (size_t)V * sizeof *out);
    if (before) CHECK(ds4_session_logits(s)[7] == b7, "drafting leaves the session's logits alone");
}

static int same(const float *a, const float *b) { return !memcmp(a, b, (size_t)V * sizeof *a); }

/* The one-step draft logits after ids[0..n) in a fresh session (chunk ch), cur */
static void fresh_draft(ds4_model *m, const int32_t *ids, int n, int ch, int32_t cur, float *out) {
    ds4_session *s = test_new_session(m, 512, ch);
    CHECK(ds4_session_eval(s, ids, n, NULL, NULL) == DS4_OK, "fresh eval %d", n);
    draft1(s, cur, out);
    ds4_session_free(s);
}

static int write_rows(const char *path, const float *rows, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(rows, sizeof *rows, n * (size_t)V, f);
    return fclose(f) || w != n * (size_t)V ? -1 : 0;
}

/* Speculative greedy decoding of n tokens with up to nd MTP drafts a pass;
 * every third pass instead drafts from `ref` (the plain output), right for
 * a varying count, so passes keep several tokens. */
static void spec_decode(ds4_session *s, int n, int nd, const ds4_tokens *ref, ds4_tokens *out,
                        ds4_spec_stats *st) {
    int32_t cur = ds4_sample_greedy(ds4_session_logits(s), V);
    ds4_tokens_push(out, cur);
    int step = 0;
    while ((int)out->n < n) {
        int32_t got[DS4_DRAFT_PASS_MAX];
        int n_got = 0, left = n - (int)out->n;
        int want = nd < left - 1 ? nd : left - 1;
        if (ref && step % 3 == 2 && want > 0) {
            int32_t d[DS4_DRAFT_PASS_MAX];
            int good = step % (want + 1);
            for (int k = 0; k < want; k++) {
                size_t at = out->n + (size_t)k;
                int32_t r = at < ref->n ? ref->v[at] : 0;
                d[k] = k < good ? r : (r + 1 + k) % V;
            }
            CHECK(ds4_spec_step(s, NULL, cur, d, want, -1, got, &n_got, st) == DS4_OK, "spec step");
        } else {
            CHECK(ds4_spec_step_mtp(s, NULL, cur, want, -1, got, &n_got, st) == DS4_OK, "mtp step");
        }
        if (n_got < 1) break;
        for (int i = 0; i < n_got && (int)out->n < n; i++) ds4_tokens_push(out, got[i]);
        cur = out->v[out->n - 1];
        step++;
    }
}

int main(int argc, char **argv) {
    if (argc < 6) {
        printf("test_glm_mtp: no model given (tests/t_glm_mtp.sh and t_g5n_mtp.sh run it on tiny glm-dsa and "
               "glm5-next files with a NextN layer)\n");
        return 0;
    }
    ds4_model *m = test_load_model(argv[1], 2);
    CHECK(ds4_model_has_mtp(m), "the NextN block is bound");
    ds4_model_info mi;
    ds4_model_get_info(m, &mi);
    V = mi.n_vocab;
    ds4_tokens ids = { 0 };
    if (test_read_ids(argv[2], &ids) || ids.n < 70) { fprintf(stderr, "ids: need >= 70\n"); return 1; }
    const int n = (int)ids.n;
    float *pos = malloc((size_t)n * V * sizeof *pos), *chain = malloc(3 * (size_t)V * sizeof *chain);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);

    /* every position, token by token */
    ds4_session *s = test_new_session(m, 512, 32);
    for (int p = 0; p < n; p++) {
        draft1(s, ids.v[p], pos + (size_t)p * V);
        CHECK(ds4_session_eval(s, ids.v + p, 1, NULL, NULL) == DS4_OK, "eval %d", p);
    }
    ds4_session_free(s);
    CHECK(write_rows(argv[3], pos, (size_t)n) == 0, "write %s", argv[3]);

    /* the chain after one prefill; its step 0 is the position's row */
    s = test_new_session(m, 512, 512);
    CHECK(ds4_session_eval(s, ids.v, n - 1, NULL, NULL) == DS4_OK, "prefill");
    int32_t d[3];
    for (int k = 1; k <= 3; k++) {
        CHECK(ds4_mtp_draft(s, ids.v[n - 1], k, d) == k, "chain of %d", k);
        memcpy(chain + (size_t)(k - 1) * V, ds4_mtp_logits(s), (size_t)V * sizeof *chain);
    }
    CHECK(same(chain, pos + (size_t)(n - 1) * V), "chain step 0 (one prefill) == token by token, bit for bit");
    ds4_session_free(s);
    CHECK(write_rows(argv[4], chain, 3) == 0, "write %s", argv[4]);
    FILE *f = fopen(argv[5], "w");
    CHECK(f && fprintf(f, "%d,%d\n", d[0], d[1]) > 0 && !fclose(f), "write %s", argv[5]);
    fresh_draft(m, ids.v, 50, 7, ids.v[50], a);
    CHECK(same(a, pos + (size_t)50 * V), "chunks of 7 == token by token at position 50");

    /* speculative greedy == plain greedy; the block follows the history */
    const int G = 60;
    for (int nd = 1; nd <= 3; nd += 2) {
        ds4_session *p = test_new_session(m, 512, 64), *q = test_new_session(m, 512, 64);
        CHECK(ds4_session_eval(p, ids.v, 40, NULL, NULL) == DS4_OK, "prompt");
        CHECK(ds4_session_eval(q, ids.v, 40, NULL, NULL) == DS4_OK, "prompt");
        ds4_tokens plain = { 0 }, spec = { 0 };
        test_plain_decode(p, NULL, V, G, &plain);
        ds4_spec_stats st = { 0 };
        spec_decode(q, G, nd, &plain, &spec, &st);
        CHECK(spec.n == plain.n && !memcmp(spec.v, plain.v, plain.n * sizeof *plain.v),
              "%d drafts a pass: greedy output == plain greedy", nd);
        printf("glm mtp, %d drafts a pass: %llu passes, %llu drafted, %llu accepted, %llu emitted\n", nd,
               (unsigned long long)st.passes, (unsigned long long)st.drafted, (unsigned long long)st.accepted,
               (unsigned long long)st.emitted);
        const int32_t cur = spec.v[spec.n - 1];
        draft1(q, cur, a);
        fresh_draft(m, ds4_session_tokens(q), ds4_session_n_tokens(q), 512, cur, b);
        CHECK(same(a, b), "%d drafts a pass: the block's logits after the speculative history == one prefill", nd);
        ds4_tokens_free(&plain);
        ds4_tokens_free(&spec);
        ds4_session_free(p);
        ds4_session_free(q);
    }

    /* rewinds (glm5-next rewinds to a checkpoint of its recurrent state;
     * glm-dsa's checkpoints are no-ops: any count is a rewind point) */
    s = test_new_session(m, 512, 64);
    CHECK(ds4_session_eval(s, ids.v, 30, NULL, NULL) == DS4_OK && ds4_session_checkpoint(s, 0) == DS4_OK,
          "eval 30 + checkpoint");
    CHECK(ds4_session_eval(s, ids.v + 30, 30, NULL, NULL) == DS4_OK, "eval 60");
    CHECK(ds4_session_rewind(s, 30) == DS4_OK, "rewind 30");
    CHECK(ds4_session_eval(s, ids.v + 30, 20, NULL, NULL) == DS4_OK && ds4_session_checkpoint(s, 1) == DS4_OK,
          "eval 30..50 + checkpoint");
    CHECK(ds4_session_eval(s, ids.v + 50, 10, NULL, NULL) == DS4_OK, "eval 50..60");
    draft1(s, ids.v[60], a);
    CHECK(same(a, pos + (size_t)60 * V), "rewind 30 + the same tokens: draft logits == fresh, bit for bit");
    int32_t alt[10];
    for (int i = 0; i < 10; i++) alt[i] = (ids.v[50 + i] + 11) % V;
    CHECK(ds4_session_rewind(s, 50) == DS4_OK, "rewind 50");
    CHECK(ds4_session_eval(s, alt, 10, NULL, NULL) == DS4_OK, "eval other 50..60");
    draft1(s, ids.v[60], a);
    int32_t mix[60];
    memcpy(mix, ids.v, 50 * sizeof *mix);
    memcpy(mix + 50, alt, 10 * sizeof *mix);
    fresh_draft(m, mix, 60, 64, ids.v[60], b);
    CHECK(same(a, b), "rewind 50 + other tokens: draft logits == fresh, bit for bit");
    ds4_session_free(s);

    /* a snapshot round trip: the restored session drafts the chain of the
     * session that saved (the block's rows are in the snapshot) */
    s = test_new_session(m, 512, 64);
    CHECK(ds4_session_eval(s, ids.v, 60, NULL, NULL) == DS4_OK, "eval 60 for the snapshot");
    ds4_buf snap = { 0 };
    CHECK(ds4_session_snapshot(s, &snap) == DS4_OK && snap.n == ds4_session_snapshot_size(s), "snapshot (%zu bytes)",
          snap.n);
    ds4_session *r = test_new_session(m, 512, 64);
    char *err = NULL;
    CHECK(ds4_session_restore(r, snap.p, snap.n, &err) == DS4_OK, "restore: %s", err ? err : "");
    free(err);
    int32_t ds[3], dr[3];
    CHECK(ds4_mtp_draft(s, ids.v[60], 3, ds) == 3, "chain of 3 (saved)");
    memcpy(a, ds4_mtp_logits(s), (size_t)V * sizeof *a);
    CHECK(ds4_mtp_draft(r, ids.v[60], 3, dr) == 3, "chain of 3 (restored)");
    memcpy(b, ds4_mtp_logits(r), (size_t)V * sizeof *b);
    CHECK(!memcmp(ds, dr, sizeof ds) && same(a, b),
          "restored session: a chain of 3 drafts == the saving session's, bit for bit");
    ds4_buf snap2 = { 0 };
    CHECK(ds4_session_snapshot(r, &snap2) == DS4_OK && snap2.n == snap.n && !memcmp(snap2.p, snap.p, snap.n),
          "the restored session's snapshot is the same bytes");
    ds4_buf_free(&snap2);
    ds4_buf_free(&snap);
    ds4_session_free(r);

    /* the previous format version (no NextN section): read as before */
    if (argc > 6) {
        ds4_model *pm = test_load_model(argv[6], 2);
        CHECK(!ds4_model_has_mtp(pm), "PLAIN has no block");
        ds4_session *ps = test_new_session(pm, 512, 64);
        CHECK(ds4_session_eval(ps, ids.v, 60, NULL, NULL) == DS4_OK, "plain: eval 60");
        ds4_buf ob = { 0 };
        CHECK(ds4_session_snapshot(ps, &ob) == DS4_OK && ob.n > 48, "plain: snapshot");
        const int g5 = !memcmp(ob.p, "G5NS", 4);
        uint32_t ver, flags, old = g5 ? 2u : 1u;
        memcpy(&ver, ob.p + 4, 4);
        memcpy(&flags, ob.p + 36, 4);
        CHECK(ver == old + 1 && !(flags & 12u), "plain: the current version (%u), no NextN section", ver);
        memcpy(ob.p + 4, &old, 4);
        if (g5) {
            const uint64_t h = ds4_xxh64(ob.p, ob.n - 8, 0);
            memcpy(ob.p + ob.n - 8, &h, 8);
        }
        r = test_new_session(m, 512, 64);
        err = NULL;
        CHECK(ds4_session_restore(r, ob.p, ob.n, &err) == DS4_OK, "version %u read: %s", old, err ? err : "");
        free(err);
        CHECK(ds4_session_n_tokens(r) == 60 && same(ds4_session_logits(r), ds4_session_logits(s)),
              "version %u: the session's tokens and logits", old);
        ds4_tokens plain = { 0 }, spec = { 0 };
        ds4_spec_stats st = { 0 };
        test_plain_decode(s, NULL, V, 20, &plain);
        spec_decode(r, 20, 2, NULL, &spec, &st);
        CHECK(spec.n == plain.n && !memcmp(spec.v, plain.v, plain.n * sizeof *plain.v),
              "version %u: speculative greedy after it == plain greedy (the block starts cold)", old);
        flags |= 4u;
        memcpy(ob.p + 36, &flags, 4);
        if (g5) {
            const uint64_t h = ds4_xxh64(ob.p, ob.n - 8, 0);
            memcpy(ob.p + ob.n - 8, &h, 8);
        }
        err = NULL;
        CHECK(ds4_session_restore(r, ob.p, ob.n, &err) == DS4_EFORMAT && err && strstr(err, "unknown flags"),
              "version %u claiming a NextN section refused (%s)", old, err ? err : "accepted");
        free(err);
        ds4_tokens_free(&plain);
        ds4_tokens_free(&spec);
        ds4_buf_free(&ob);
        ds4_session_free(r);
        ds4_session_free(ps);
        ds4_model_free(pm);
    }
    ds4_session_free(s);

    free(pos); free(chain); free(a); free(b);
    ds4_tokens_free(&ids);
    ds4_model_free(m);
    printf("test_glm_mtp: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
