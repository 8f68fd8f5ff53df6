/*
 * ds4.c -- the `ds4` command line: one-shot generation, an interactive
 * multi-turn chat, and the diagnostics the tests and the oracle rely on
 * (--inspect, --tokenize, --detokenize, --tokens, --dump-logits,
 * --dump-hidden, --decode-only, --split, --no-qat).
 *
 * Owns: argument parsing, terminal presentation (reasoning shown dimmed,
 * progress bar, tokens/s summary), signal handling (Ctrl+C stops a
 * generation, not the program).  Uses only the public API (ds4.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


#include "ds4.h"
#include "chat.h"
#include "common/args.h"

static volatile sig_atomic_t g_interrupt = 0, g_terminate = 0;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

/* SIGTERM: stop what is running and leave through the normal exit path
 * (which saves the conversation when a disk KV cache is in use). */
static void on_sigterm(int sig) {
    (void)sig;
    g_interrupt = 1;
    g_terminate = 1;
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ds4: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void usage(FILE *f) {
    fprintf(f,
"usage: ds4 [options]\n"
"\n"
"Runs DeepSeek V4 Flash from a GGUF file.  Without -p / --prompt-file it\n"
"starts an interactive chat that keeps its KV state between turns.\n"
"\n"
"model and runtime:\n"
"  -m, --model FILE        GGUF model (default ./ds4flash.gguf)\n"
"  -t, --threads N         worker threads (default: all cores)\n"
"  -c, --ctx N             context size in tokens (16 .. 16777216,\n"
"                          default 32768)\n"
"      --chunk N           prefill chunk size in tokens (default 2048)\n"
"      --dist MODE         under mpirun: one model over the ranks; MODE is\n"
"                          pipeline (consecutive layers per rank) or experts\n"
"                          (a share of every layer's routed experts)%s\n"
"      --dist-layers SPEC  pipeline split, inclusive ranges per rank\n"
"                          (0:20,21:42; default: balanced by weight bytes)\n"
"\n"
"prompt and generation:\n"
"  -p, --prompt TEXT       user message: generate one answer and exit\n"
"      --prompt-file FILE  read the user message from FILE\n"
"  -sys, --system TEXT     system prompt\n"
"  -n, --n-predict N       maximum tokens to generate (default 4096)\n"
"      --think             thinking mode, effort high (default)\n"
"      --think-max         thinking, maximum effort (needs --ctx >= %d;\n"
"                          below that it falls back to --think)\n"
"      --nothink           chat mode: answer without reasoning\n"
"      --temp F            temperature (default 1.0; 0 = greedy)\n"
"      --top-k N           keep the N most likely tokens (default 0 = off)\n"
"      --top-p F           nucleus sampling (default 1.0 = off)\n"
"      --min-p F           drop tokens below F x p(best) (default 0.05)\n"
"      --seed N            sampler seed (default: from the clock)\n"
"\n"
"diagnostics (stable contracts):\n"
"      --inspect           print metadata, shapes, tensor types and sizes\n"
"      --tokenize TEXT     print the token ids of TEXT as a JSON array\n"
"                          (plain mode: control-token text stays text;\n"
"                          with --prompt-file, tokenizes the file)\n"
"      --special           with --tokenize: recognise added/control tokens\n"
"      --detokenize IDS    write the exact bytes of comma-separated ids\n"
"      --tokens IDS        raw comma-separated ids as the prompt, no template\n"
"      --tokens-file FILE  the same, ids separated by spaces/commas/newlines\n"
"      --dump-logits FILE  float32 [n_positions][n_vocab]: row t = logits\n"
"                          after consuming tokens[0..t]\n"
"      --dump-hidden FILE  float32 [n_positions][n_layer][2][n_hc][n_embd]:\n"
"                          HC state after each attention and FFN sublayer\n"
"      --decode-only       feed the prompt one token at a time\n"
"      --split N           prefill the first N prompt tokens, then decode\n"
"                          the rest one at a time\n"
"      --no-qat            no FP8/FP4/f16 cache roundings and float\n"
"                          activations in every matmul (smooth numerics)\n"
"\n"
"disk KV cache (conversations that survive restarts):\n"
"      --kv-disk-dir DIR   keep session states in DIR: a prompt whose rendered\n"
"                          text starts with a saved one resumes from it; the\n"
"                          chat resumes the last conversation\n"
"      --kv-disk-space SIZE          space cap, LRU by last use (default 4GB)\n"
"      --kv-disk-space-mb N          the same in MiB (default 4096)\n"
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
"                                    same model in another expert quantization\n"
"  -q, --quiet             no banner or statistics on stderr\n"
"  -h, --help              this help\n"
"      --version           print the version and exit\n"
"\n"
"Values follow the option or are attached with = (--ctx=65536); sizes\n"
"take a unit (512MB, 8GB; powers of 1024).  A --ctx (or /ctx) above the\n"
"model's trained context (deepseek4.context_length) works, with a warning.\n"
"\n",
            ds4_dist_supported() ? "" : "\n                          (this build has no MPI support)",
            DS4_THINK_MAX_MIN_CTX);
    chat_print_commands(f);
}

typedef struct {
    const char *model;
    const char *prompt, *prompt_file, *sys;
    int n_predict, n_predict_set;
    ds4_sampler_params sp;
    int seed_set;
    int ctx, threads, chunk;
    ds4_think think;
    int inspect, tokenize, special;
    const char *dist, *dist_layers;
    const char *tokenize_text;
    const char *detok;
    const char *tokens, *tokens_file;
    const char *dump_logits, *dump_hidden;
    int decode_only, no_qat, split;
    int quiet, ctx_set;
    const char *kv_dir;
    uint64_t kv_space_mb;
    int kv_variants;
    ds4_kv_policy kv_policy;
} opts;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    ds4_buf b = { 0 };
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (ds4_buf_append(&b, tmp, k)) { fclose(f); ds4_buf_free(&b); return NULL; }
    int bad = ferror(f);
    fclose(f);
    if (bad) { ds4_buf_free(&b); return NULL; }
    if (!b.p) ds4_buf_append(&b, "", 0);
    *len = b.n;
    return b.p;
}

/* Parse "1,2,3" or whitespace separated ids. */
static int parse_ids(const char *s, ds4_tokens *out) {
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff) return -1;
        if (ds4_tokens_push(out, (int32_t)v)) return -1;
        p = end;
    }
    return 0;
}

static void parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->model = "./ds4flash.gguf";
    o->n_predict = 4096;
    o->ctx = 32768;
    o->chunk = 2048;
    o->think = DS4_THINK_HIGH;
    o->split = -1;
    ds4_sampler_params_default(&o->sp);
    ds4_kv_policy_default(&o->kv_policy);
    ds4_args a;
    ds4_args_init(&a, "ds4", argc, argv, usage);
    while (ds4_args_next(&a)) {
        if (ds4_args_is(&a, "-m", "--model")) o->model = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-t", "--threads")) o->threads = ds4_args_int(&a, 0, 4096);
        else if (ds4_args_is(&a, "-c", "--ctx")) { o->ctx = ds4_args_int(&a, 16, 1 << 24); o->ctx_set = 1; }
        else if (ds4_args_is(&a, NULL, "--chunk")) o->chunk = ds4_args_int(&a, 1, 1 << 20);
        else if (ds4_args_is(&a, "-p", "--prompt")) o->prompt = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--prompt-file")) o->prompt_file = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-sys", "--system")) o->sys = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-n", "--n-predict")) { o->n_predict = ds4_args_int(&a, 0, 1 << 30); o->n_predict_set = 1; }
        else if (ds4_args_is(&a, NULL, "--think")) o->think = DS4_THINK_HIGH;
        else if (ds4_args_is(&a, NULL, "--think-max")) o->think = DS4_THINK_MAX;
        else if (ds4_args_is(&a, NULL, "--nothink")) o->think = DS4_THINK_NONE;
        else if (ds4_args_is(&a, NULL, "--temp")) o->sp.temperature = (float)ds4_args_double(&a, 0, 100);
        else if (ds4_args_is(&a, NULL, "--top-k")) o->sp.top_k = ds4_args_int(&a, 0, 1 << 30);
        else if (ds4_args_is(&a, NULL, "--top-p")) {
            const char *v = a.inline_val ? a.inline_val : (a.i + 1 < argc ? argv[a.i + 1] : "");
            o->sp.top_p = (float)ds4_args_double(&a, 0, 1);
            if (o->sp.top_p <= 0) ds4_args_fail("ds4", "--top-p: bad value '%s' (expected a number in (0, 1])", v);
        }
        else if (ds4_args_is(&a, NULL, "--min-p")) o->sp.min_p = (float)ds4_args_double(&a, 0, 1);
        else if (ds4_args_is(&a, NULL, "--seed")) { o->sp.seed = ds4_args_u64(&a); o->seed_set = 1; }
        else if (ds4_args_is(&a, NULL, "--inspect")) o->inspect = 1;
        else if (ds4_args_is(&a, NULL, "--tokenize")) { o->tokenize = 1; o->tokenize_text = ds4_args_optional(&a); }
        else if (ds4_args_is(&a, NULL, "--special")) o->special = 1;
        else if (ds4_args_is(&a, NULL, "--detokenize")) o->detok = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--tokens")) o->tokens = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--tokens-file")) o->tokens_file = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--dump-logits")) o->dump_logits = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--dump-hidden")) o->dump_hidden = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--decode-only")) o->decode_only = 1;
        else if (ds4_args_is(&a, NULL, "--split")) o->split = ds4_args_int(&a, 0, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--no-qat")) o->no_qat = 1;
        else if (ds4_args_is(&a, NULL, "--dist")) o->dist = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--dist-layers")) o->dist_layers = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-q", "--quiet")) o->quiet = 1;
        else if (ds4_args_is(&a, NULL, "--kv-disk-dir")) o->kv_dir = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--kv-disk-space-mb")) o->kv_space_mb = (uint64_t)ds4_args_i64(&a, 1, (int64_t)1 << 30);
        else if (ds4_args_is(&a, NULL, "--kv-disk-space"))
            o->kv_space_mb = ds4_args_size(&a, 1ull << 20, 1ull << 20, 1ull << 50) >> 20;
        else if (ds4_args_is(&a, NULL, "--kv-cache-min-tokens")) o->kv_policy.min_tokens = ds4_args_int(&a, 1, 1 << 30);
        else if (ds4_args_is(&a, NULL, "--kv-cache-cold-max-tokens")) o->kv_policy.cold_max_tokens = ds4_args_int(&a, 0, 1 << 30);
        else if (ds4_args_is(&a, NULL, "--kv-cache-continued-interval-tokens")) o->kv_policy.continued_interval = ds4_args_int(&a, 0, 1 << 30);
        else if (ds4_args_is(&a, NULL, "--kv-cache-boundary-trim-tokens")) o->kv_policy.trim_tokens = ds4_args_int(&a, 0, 1 << 30);
        else if (ds4_args_is(&a, NULL, "--kv-cache-boundary-align-tokens")) o->kv_policy.align_tokens = ds4_args_int(&a, 1, 1 << 30);
        else if (ds4_args_is(&a, NULL, "--kv-cache-allow-quant-variants")) o->kv_variants = 1;
        else ds4_args_unknown(&a);
    }
    if (!o->seed_set) o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

/* --------------------------------------------------------------------- */

static int write_file(const char *path, const void *data, size_t n) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return -1;
    if (n && fwrite(data, 1, n, f) != n) { fclose(f); unlink(tmp); return -1; }
    if (fclose(f) != 0) { unlink(tmp); return -1; }
    return rename(tmp, path);
}

static int tokenize_main(const opts *o) {
    char *err = NULL;
    ds4_tokenizer *tok = ds4_tokenizer_load(o->model, &err);
    if (!tok) die("%s", err ? err : "cannot load tokenizer");
    size_t len = 0;
    char *text = NULL;
    if (o->tokenize_text) { text = strdup(o->tokenize_text); len = strlen(text); }
    else if (o->prompt_file) {
        text = read_file(o->prompt_file, &len);
        if (!text) die("cannot read %s: %s", o->prompt_file, strerror(errno));
    } else if (o->prompt) { text = strdup(o->prompt); len = strlen(text); }
    else die("--tokenize needs TEXT or --prompt-file FILE");
    ds4_tokens ids = { 0 };
    if (ds4_tokenize(tok, text, len, o->special ? DS4_TOK_SPECIAL : DS4_TOK_PLAIN, &ids))
        die("tokenization failed");
    fputc('[', stdout);
    for (size_t i = 0; i < ids.n; i++) printf(i ? ", %d" : "%d", ids.v[i]);
    fputs("]\n", stdout);
    ds4_tokens_free(&ids);
    free(text);
    ds4_tokenizer_free(tok);
    return 0;
}

static int detokenize_main(const opts *o) {
    char *err = NULL;
    ds4_tokenizer *tok = ds4_tokenizer_load(o->model, &err);
    if (!tok) die("%s", err ? err : "cannot load tokenizer");
    ds4_tokens ids = { 0 };
    if (parse_ids(o->detok, &ids)) die("--detokenize expects comma-separated ids");
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] >= ds4_tok_n_vocab(tok)) die("token id %d out of range (vocabulary has %d)", ids.v[i], ds4_tok_n_vocab(tok));
    ds4_buf out = { 0 };
    ds4_detokenize(tok, ids.v, ids.n, &out);
    fwrite(out.p, 1, out.n, stdout);
    ds4_buf_free(&out);
    ds4_tokens_free(&ids);
    ds4_tokenizer_free(tok);
    return 0;
}

/* --------------------------------------------------------------------- */

int main(int argc, char **argv) {
    opts o;
    parse_args(argc, argv, &o);
    if (o.inspect) {
        char *err = NULL;
        int rc = ds4_inspect(o.model, stdout, &err);
        if (rc) { fprintf(stderr, "ds4: %s\n", err ? err : ds4_strerror(rc)); free(err); return 1; }
        return 0;
    }
    if (o.tokenize) return tokenize_main(&o);
    if (o.detok) return detokenize_main(&o);
    if (o.dist) {
        /* ranks > 0 serve rank 0 (src/dist/) and never reach the front end */
        char *err = NULL;
        int r = ds4_dist_init(&argc, &argv, o.dist, o.dist_layers, &err);
        if (r < 0) die("%s", err ? err : ds4_strerror(r));
        if (r > 0) {
            ds4_model_params mp;
            ds4_model_params_default(&mp);
            mp.n_threads = o.threads;
            return ds4_dist_worker(o.model, &mp);
        }
    }

    if (!o.dist && access(o.model, R_OK) != 0)   /* --dist: may name per-rank files */
        die("cannot open model %s: %s\n(use -m FILE, or `make run` to create a demo model)",
            o.model, strerror(errno));

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigterm;
    sigaction(SIGTERM, &sa, NULL);

    chat_app app;
    chat_opts co = {
        .model = o.model, .threads = o.threads, .ctx = o.ctx, .ctx_explicit = o.ctx_set, .chunk = o.chunk,
        .no_qat = o.no_qat, .decode_only = o.decode_only, .quiet = o.quiet,
        .sp = o.sp, .think = o.think, .sys = o.sys, .n_predict = o.n_predict,
        .interrupt = &g_interrupt, .terminate = &g_terminate,
        .kv_dir = o.kv_dir, .kv_space_mb = o.kv_space_mb, .kv_allow_variants = o.kv_variants,
        .kv_policy = o.kv_policy,
    };
    if (chat_open(&app, &co) != 0) return 1;

    int rc = 0;
    if (o.tokens || o.tokens_file) {
        ds4_tokens ids = { 0 };
        const char *src = o.tokens;
        char *file = NULL;
        if (o.tokens_file) {
            size_t len;
            file = read_file(o.tokens_file, &len);
            if (!file) die("cannot read %s: %s", o.tokens_file, strerror(errno));
            src = file;
        }
        if (parse_ids(src, &ids) || ids.n == 0) die("bad token list");
        free(file);
        int n_gen = o.n_predict_set ? o.n_predict : ((o.dump_logits || o.dump_hidden) ? 0 : o.n_predict);
        ds4_buf lg = { 0 }, hd = { 0 };
        rc = chat_run_tokens(&app, ids.v, (int)ids.n, o.split, n_gen,
                             o.dump_logits ? &lg : NULL, o.dump_hidden ? &hd : NULL);
        if (rc == 0 && o.dump_logits && write_file(o.dump_logits, lg.p, lg.n))
            die("cannot write %s: %s", o.dump_logits, strerror(errno));
        if (rc == 0 && o.dump_hidden && write_file(o.dump_hidden, hd.p, hd.n))
            die("cannot write %s: %s", o.dump_hidden, strerror(errno));
        ds4_buf_free(&lg);
        ds4_buf_free(&hd);
        ds4_tokens_free(&ids);
    } else if (o.prompt || o.prompt_file) {
        size_t len = 0;
        char *text;
        if (o.prompt_file) {
            text = read_file(o.prompt_file, &len);
            if (!text) die("cannot read %s: %s", o.prompt_file, strerror(errno));
        } else {
            text = strdup(o.prompt);
            len = strlen(text);
        }
        rc = chat_turn(&app, text, len);
        free(text);
    } else {
        rc = chat_interactive(&app);
    }
    chat_close(&app);
    return rc ? 1 : 0;
}
