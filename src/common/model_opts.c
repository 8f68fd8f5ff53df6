/*
 * model_opts.c -- see model_opts.h.
 *
 * The help text is one table: each line belongs to a group and a heading,
 * and a binary prints the lines of the groups it takes.  Lines with a
 * default print it from the binary's own initialised options, so a binary
 * with another default (the agent's larger minimum context, say) still
 * says the truth.
 */
#include <stdlib.h>
#include <string.h>

#include "common/model_opts.h"

void ds4_model_opts_init(ds4_model_opts *o, const char *prog, unsigned groups) {
    memset(o, 0, sizeof *o);
    o->prog = prog;
    o->groups = groups;
    o->model = "./ds4flash.gguf";
    o->ctx = 32768;
    o->ctx_min = 16;
    o->chunk = 2048;
    o->dist_timeout = -1;
    o->mtp_draft = -1;
    o->think = DS4_THINK_HIGH;
    ds4_sampler_params_default(&o->sp);
    o->seed_default = "from the clock";
    o->kv_space_mb = 4096;
    ds4_kv_policy_default(&o->kv_policy);
}

/* A path or name flag: an empty value is a mistake, not "the default". */
static const char *nonempty(ds4_model_opts *o, ds4_args *a) {
    const char *v = ds4_args_value(a);
    if (!*v) ds4_args_fail(o->prog, "%s needs a value", a->flag);
    return v;
}

static int is(ds4_model_opts *o, unsigned g, ds4_args *a, const char *s, const char *l) {
    return (o->groups & g) && ds4_args_is(a, s, l);
}

int ds4_model_opts_parse(ds4_model_opts *o, ds4_args *a) {
    if (is(o, DS4_MO_MODEL, a, "-m", "--model")) { o->model = nonempty(o, a); o->model_set = 1; }
    else if (is(o, DS4_MO_MODEL, a, "-t", "--threads")) o->threads = ds4_args_int(a, 0, 4096);
    else if (is(o, DS4_MO_CTX, a, "-c", "--ctx")) {
        o->ctx = ds4_args_int(a, o->ctx_min, 1 << 24);
        o->ctx_set = 1;
    }
    else if (is(o, DS4_MO_CHUNK, a, NULL, "--chunk")) o->chunk = ds4_args_int(a, 1, 1 << 20);
    else if (is(o, DS4_MO_QAT, a, NULL, "--no-qat")) o->no_qat = 1;
    else if (is(o, DS4_MO_SSD, a, NULL, "--ssd-streaming")) o->ssd_streaming = 1;
    else if (is(o, DS4_MO_SSD, a, NULL, "--ssd-streaming-cache-experts")) {
        o->ssd_cache_bytes = ds4_args_size(a, 1 << 20, 1, UINT64_MAX);
        o->ssd_streaming = 1;
    }
    else if (is(o, DS4_MO_DIST, a, NULL, "--dist")) o->dist = nonempty(o, a);
    else if (is(o, DS4_MO_DIST, a, NULL, "--dist-layers")) o->dist_layers = nonempty(o, a);
    else if (is(o, DS4_MO_DIST, a, NULL, "--dist-timeout")) o->dist_timeout = ds4_args_double(a, 0, 1e6);
    else if (is(o, DS4_MO_LOOKUP, a, NULL, "--lookup")) o->lookup = ds4_args_int(a, 0, DS4_DRAFT_PASS_MAX - 1);
    else if (is(o, DS4_MO_MTP, a, NULL, "--mtp")) o->mtp = nonempty(o, a);
    else if (is(o, DS4_MO_MTP, a, NULL, "--mtp-draft")) o->mtp_draft = ds4_args_int(a, 0, DS4_DRAFT_PASS_MAX - 1);
    else if (is(o, DS4_MO_THINK, a, NULL, "--think")) o->think = DS4_THINK_HIGH;
    else if (is(o, DS4_MO_THINK, a, NULL, "--think-max")) o->think = DS4_THINK_MAX;
    else if (is(o, DS4_MO_THINK, a, NULL, "--nothink")) o->think = DS4_THINK_NONE;
    else if (is(o, DS4_MO_TEMP, a, NULL, "--temp")) o->sp.temperature = (float)ds4_args_double(a, 0, 100);
    else if (is(o, DS4_MO_TEMP, a, NULL, "--seed")) { o->sp.seed = ds4_args_u64(a); o->seed_set = 1; }
    else if (is(o, DS4_MO_FILTERS, a, NULL, "--top-k")) o->sp.top_k = ds4_args_int(a, 0, 1 << 30);
    else if (is(o, DS4_MO_FILTERS, a, NULL, "--top-p")) {
        /* 0 would keep no token at all */
        const char *v = a->inline_val ? a->inline_val : a->i + 1 < a->argc ? a->argv[a->i + 1] : "";
        o->sp.top_p = (float)ds4_args_double(a, 0, 1);
        if (o->sp.top_p <= 0)
            ds4_args_fail(o->prog, "--top-p: bad value '%s' (expected a number in (0, 1])", v);
    }
    else if (is(o, DS4_MO_FILTERS, a, NULL, "--min-p")) o->sp.min_p = (float)ds4_args_double(a, 0, 1);
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-disk-dir")) o->kv_dir = nonempty(o, a);
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-disk-space-mb")) {
        o->kv_space_mb = (uint64_t)ds4_args_i64(a, 1, (int64_t)1 << 30);
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-disk-space")) {
        o->kv_space_mb = ds4_args_size(a, 1ull << 20, 1ull << 20, 1ull << 50) >> 20;
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-cache-min-tokens")) {
        o->kv_policy.min_tokens = ds4_args_int(a, 1, 1 << 30);
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-cache-cold-max-tokens")) {
        o->kv_policy.cold_max_tokens = ds4_args_int(a, 0, 1 << 30);
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-cache-continued-interval-tokens")) {
        o->kv_policy.continued_interval = ds4_args_int(a, 0, 1 << 30);
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-cache-boundary-trim-tokens")) {
        o->kv_policy.trim_tokens = ds4_args_int(a, 0, 1 << 30);
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-cache-boundary-align-tokens")) {
        o->kv_policy.align_tokens = ds4_args_int(a, 1, 1 << 30);
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_KV, a, NULL, "--kv-cache-allow-quant-variants")) {
        o->kv_variants = 1;
        o->kv_flags = 1;
    }
    else if (is(o, DS4_MO_STEER, a, NULL, "--steer")) o->steer = nonempty(o, a);
    else if (is(o, DS4_MO_STEER, a, NULL, "--steer-scale")) {
        o->steer_scale = ds4_args_double(a, -1e6, 1e6);
        o->steer_scale_set = 1;
    }
    else if (is(o, DS4_MO_STEER, a, NULL, "--steer-layers")) o->steer_layers = nonempty(o, a);
    else return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Help                                                                      */
/* ------------------------------------------------------------------------ */

/* Headings, in the order printed. */
enum { H_MODEL, H_GEN, H_SPEC, H_DIST, H_KV, H_STEER, H_N };
static const char *const heading[H_N] = {
    "model and runtime",
    "sampling and thinking",
    "speculative decoding (output identical to plain decoding)",
    "several machines (under mpirun)",
    "disk KV cache (states that survive restarts)",
    "steering",
};

/* One help entry; `text` may hold one %d or %s filled by `arg`. */
typedef enum { A_NONE, A_CTX, A_CTXMIN, A_CHUNK, A_THINK, A_TEMP, A_MINP, A_MTPDEF, A_THINKMAX,
               A_MPI, A_LOOKUP, A_SEED } arg_kind;
typedef struct {
    unsigned group;
    int heading;
    arg_kind arg;
    const char *text;
} help_line;

static const help_line lines[] = {
    { DS4_MO_MODEL, H_MODEL, A_NONE,
"  -m, --model FILE          GGUF model (default ./ds4flash.gguf)\n" },
    { DS4_MO_MODEL, H_MODEL, A_NONE,
"  -t, --threads N           worker threads (default: $DS4_THREADS, else\n"
"                            every CPU this process may use)\n" },
    { DS4_MO_CTX, H_MODEL, A_CTXMIN,
"  -c, --ctx N               context size in tokens (%d .. 16777216,\n" },
    { DS4_MO_CTX, H_MODEL, A_CTX,
"                            default %d); above the model's trained context\n"
"                            (deepseek4.context_length) it works, with a warning\n" },
    { DS4_MO_CHUNK, H_MODEL, A_CHUNK,
"      --chunk N             prefill chunk size in tokens (default %d)\n" },
    { DS4_MO_QAT, H_MODEL, A_NONE,
"      --no-qat              no FP8/FP4/f16 cache roundings and float\n"
"                            activations in every matmul (smooth numerics)\n" },
    { DS4_MO_SSD, H_MODEL, A_NONE,
"      --ssd-streaming       read the routed experts from the file on demand\n"
"                            into a bounded cache (models larger than the RAM);\n"
"                            logits are identical to a resident run\n"
"      --ssd-streaming-cache-experts SIZE\n"
"                            expert cache size (512MB, 8GB, ...; implies\n"
"                            --ssd-streaming; default: half of the available\n"
"                            RAM after the resident weights)\n" },
    { DS4_MO_THINK, H_GEN, A_NONE,
"      --think               thinking mode, effort high" },
    { DS4_MO_THINK, H_GEN, A_THINK, "%s\n" },
    { DS4_MO_THINK, H_GEN, A_THINKMAX,
"      --think-max           thinking, maximum effort (needs --ctx >= %d;\n"
"                            below that it falls back to --think)\n" },
    { DS4_MO_THINK, H_GEN, A_NONE,
"      --nothink             chat mode: answer without reasoning\n" },
    { DS4_MO_TEMP, H_GEN, A_TEMP,
"      --temp F              temperature (default %s; 0 = greedy)\n" },
    { DS4_MO_FILTERS, H_GEN, A_NONE,
"      --top-k N             keep the N most likely tokens (default 0 = off)\n"
"      --top-p F             nucleus sampling, 0 < F <= 1 (default 1.0 = off)\n" },
    { DS4_MO_FILTERS, H_GEN, A_MINP,
"      --min-p F             drop tokens below F x p(best) (default %s)\n" },
    { DS4_MO_TEMP, H_GEN, A_SEED,
"      --seed N              sampler seed (default: %s)\n" },
    { DS4_MO_LOOKUP, H_SPEC, A_LOOKUP,
"      --lookup N            prompt-lookup drafts: up to N (1..16) tokens that\n"
"                            followed the latest repeat of the recent text are\n"
"                            verified in one pass (default %d; 0 = off)\n" },
    { DS4_MO_MTP, H_SPEC, A_MTPDEF,
"      --mtp FILE            the MTP block (mtp.0.* tensors, docs/MTP.md) from\n"
"                            FILE; turns on MTP drafts (--mtp-draft %d)\n"
"      --mtp-draft N         N (1..16) MTP draft tokens per pass, from --mtp or\n"
"                            the model's own MTP block (default 0 = off; a\n"
"                            prompt-lookup draft, where one is found, goes first)\n" },
    { DS4_MO_DIST, H_DIST, A_MPI,
"      --dist MODE           under mpirun: one model over the ranks; MODE is\n"
"                            pipeline (consecutive layers per rank) or experts\n"
"                            (a share of every layer's routed experts)%s\n"
"      --dist-layers SPEC    pipeline split, inclusive ranges per rank\n"
"                            (0:20,21:42; default: balanced by weight bytes)\n"
"      --dist-timeout SEC    a rank silent this long is named and the job\n"
"                            stopped (default 300; 0 = wait forever)\n" },
    { DS4_MO_KV, H_KV, A_NONE,
"      --kv-disk-dir DIR     keep session states in DIR: a prompt whose rendered\n"
"                            text starts with a saved one resumes from it\n"
"      --kv-disk-space SIZE  space cap, LRU by last use (default 4GB)\n"
"      --kv-disk-space-mb N  the same in MiB (default 4096)\n"
"      --kv-cache-min-tokens N       never save fewer tokens (default 512)\n"
"      --kv-cache-cold-max-tokens N  checkpoint a first prompt up to N\n"
"                                    tokens (default 30000; 0 = off)\n"
"      --kv-cache-continued-interval-tokens N  checkpoint every N tokens\n"
"                                    of growth (default 10000; 0 = off)\n"
"      --kv-cache-boundary-trim-tokens N   tail left out of a cold\n"
"                                    checkpoint (default 32)\n"
"      --kv-cache-boundary-align-tokens N  checkpoints on multiples of N\n"
"                                    (default 2048)\n"
"      --kv-cache-allow-quant-variants     also resume states saved by the\n"
"                                    same model in another expert quantization\n" },
    { DS4_MO_STEER, H_STEER, A_NONE,
"      --steer FILE          a direction (float32 x n_embd, e.g. from ds4-steer\n"
"                            build) with its JSON sidecar beside it\n"
"      --steer-scale S       add S times the direction to every hyper-connection\n"
"                            copy of the residual after the FFN of the steered\n"
"                            layers (required with --steer; 0 = no effect)\n"
"      --steer-layers A:B    0-based, inclusive (default: the sidecar's layers)\n" },
};

void ds4_model_opts_help(FILE *f, const ds4_model_opts *o) {
    for (int h = 0; h < H_N; h++) {
        int shown = 0;
        for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
            const help_line *l = &lines[i];
            if (l->heading != h || !(o->groups & l->group)) continue;
            if (!shown++) fprintf(f, "\n%s:\n", heading[h]);
            char num[32];
            switch (l->arg) {
            case A_NONE: fputs(l->text, f); break;
            case A_CTX: fprintf(f, l->text, o->ctx); break;
            case A_CTXMIN: fprintf(f, l->text, o->ctx_min); break;
            case A_CHUNK: fprintf(f, l->text, o->chunk); break;
            case A_LOOKUP: fprintf(f, l->text, o->lookup); break;
            case A_SEED: fprintf(f, l->text, o->seed_default); break;
            case A_MTPDEF: fprintf(f, l->text, DS4_MTP_DRAFT_DEFAULT); break;
            case A_THINKMAX: fprintf(f, l->text, DS4_THINK_MAX_MIN_CTX); break;
            case A_THINK: fprintf(f, l->text, o->think == DS4_THINK_HIGH ? " (default)" : ""); break;
            case A_TEMP:
                snprintf(num, sizeof num, "%.2g", (double)o->sp.temperature);
                fprintf(f, l->text, num);
                break;
            case A_MINP:
                snprintf(num, sizeof num, "%.2g", (double)o->sp.min_p);
                fprintf(f, l->text, num);
                break;
            case A_MPI:
                fprintf(f, l->text, ds4_dist_supported() ? ""
                        : "\n                            (this build has no MPI support)");
                break;
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */

void ds4_model_opts_model_params(const ds4_model_opts *o, ds4_model_params *mp) {
    ds4_model_params_default(mp);
    mp->n_threads = o->threads;
    mp->ssd_streaming = o->ssd_streaming;
    mp->ssd_cache_bytes = o->ssd_cache_bytes;
    mp->mtp_path = o->mtp;
}

int ds4_model_opts_mtp_draft(const ds4_model_opts *o) {
    return o->mtp_draft >= 0 ? o->mtp_draft : o->mtp ? DS4_MTP_DRAFT_DEFAULT : 0;
}

void ds4_model_opts_session_params(const ds4_model_opts *o, ds4_session_params *sp) {
    ds4_session_params_default(sp);
    sp->ctx_size = o->ctx;
    sp->prefill_chunk = o->chunk;
    sp->no_qat = o->no_qat;
}

int ds4_model_opts_start_dist(const ds4_model_opts *o, int *argc, char ***argv,
                              int *worker_rc, char **err) {
    *worker_rc = 0;
    if (err) *err = NULL;
    if (!o->dist) return 0;
    if (o->dist_timeout >= 0) ds4_dist_set_timeout(o->dist_timeout);
    int r = ds4_dist_init(argc, argv, o->dist, o->dist_layers, err);
    if (r < 0) {
        if (err && !*err) *err = strdup(ds4_strerror(r));
        return -1;
    }
    if (r == 0) return 0;
    /* ranks > 0 serve rank 0 and never reach the front end: the weights
     * they hold are loaded as rank 0's would be */
    ds4_model_params wp;
    ds4_model_opts_model_params(o, &wp);
    wp.mtp_path = NULL;
    *worker_rc = ds4_dist_worker(o->model, &wp);
    return 1;
}
