/*
 * main.c -- the `ds4` command line: one-shot generation, an interactive
 * multi-turn chat, and the diagnostics the tests and the oracle rely on
 * (--inspect, --tokenize, --detokenize, --tokens, --dump-logits,
 * --dump-hidden, --decode-only, --split, --no-qat, --dump-tokens,
 * --dump-logprobs).
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
#include "base/afile.h"
#include "chat.h"
#include "common/args.h"
#include "common/signals.h"
#include "common/model_opts.h"
#include "common/model_file.h"
#include "ds4_gen.h"
#include "common/steer.h"

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

#define die(...) ds4_die("ds4", __VA_ARGS__)

/* The shared model/runtime flags ds4 takes (src/common/model_opts.h). */
#define CLI_GROUPS (DS4_MO_MODEL | DS4_MO_CTX | DS4_MO_CHUNK | DS4_MO_QAT | DS4_MO_SSD | \
                    DS4_MO_DIST | DS4_MO_LOOKUP | DS4_MO_MTP | DS4_MO_THINK | DS4_MO_TEMP | \
                    DS4_MO_FILTERS | DS4_MO_KV | DS4_MO_STEER)

static void usage(FILE *f) {
    ds4_model_opts d;
    ds4_model_opts_init(&d, "ds4", CLI_GROUPS);
    fprintf(f,
"usage: ds4 [options]\n"
"\n"
"Runs DeepSeek V4 Flash from a GGUF file.  Without -p / --prompt-file it\n"
"starts an interactive chat that keeps its KV state between turns.\n"
"\n"
"prompt and generation:\n"
"  -p, --prompt TEXT       user message: generate one answer and exit\n"
"      --prompt-file FILE  read the user message from FILE\n"
"  -sys, --system TEXT     system prompt\n"
"  -n, --n-predict N       maximum tokens to generate (default 4096)\n"
"  -q, --quiet             no banner or statistics on stderr\n"
"  -h, --help              this help\n"
"      --version           print the version and exit\n");
    ds4_model_opts_help(f, &d);
    fprintf(f,
"\nnotes:\n  With --kv-disk-dir the interactive chat resumes the last conversation.\n"
"\n"
"diagnostics (stable contracts):\n"
"      --inspect           print metadata, shapes, tensor types and sizes,\n"
"                          and the memory plan of a run at --ctx (weights,\n"
"                          KV, scratch against this machine's RAM)\n"
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
"      --dump-indexer FILE float32 [n_positions][n_layer][2]: per layer the\n"
"                          lowest indexer score kept and the highest\n"
"                          rejected (NaN where the layer selects nothing)\n"
"      --imatrix-out FILE  prefill --prompt-file (raw text) and write the routed\n"
"                          experts' importance matrix (input of ds4-quantize)\n"
"      --decode-only       feed the prompt one token at a time\n"
"      --split N           prefill the first N prompt tokens, then decode\n"
"                          the rest one at a time\n"
"      --dump-tokens       print the prompt's tokens (rendered -p / --prompt-file\n"
"                          text, or --tokens) one a line: position, id and\n"
"                          the token's bytes escaped; then exit\n"
"      --dump-logprobs FILE  JSON {\"steps\":[{\"id\",\"bytes\",\"logprob\",\"top\"}]}:\n"
"                          one step per generated token (natural-log softmax\n"
"                          at temperature 1); with --tokens and -n 0 one step\n"
"                          per prompt position (id = the next prompt token)\n"
"      --logprobs-top-k K  alternatives per step in \"top\" (default 20)\n"
"\n"
"Values follow the option or are attached with = (--ctx=65536); sizes\n"
"take a unit (512MB, 8GB; powers of 1024).\n"
"\n");
    chat_print_commands(f);
}

typedef struct {
    ds4_model_opts mo;         /* the shared model/runtime flags */
    const char *prompt, *prompt_file, *sys;
    int n_predict, n_predict_set;
    int inspect, tokenize, special;
    const char *tokenize_text;
    const char *detok;
    const char *tokens, *tokens_file;
    const char *dump_logits, *dump_hidden, *dump_indexer;
    const char *imatrix_out;
    int decode_only, split;
    int quiet;
    int dump_tokens;
    const char *dump_logprobs;
    int lp_top_k;
} opts;

static char *read_file(const char *path, size_t *len) {
    ds4_buf b = { 0 };
    if (ds4_buf_read_file(&b, path)) { ds4_buf_free(&b); return NULL; }
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
    ds4_model_opts_init(&o->mo, "ds4", CLI_GROUPS);
    o->n_predict = 4096;
    o->split = -1;
    o->lp_top_k = 20;
    ds4_args a;
    ds4_args_init(&a, "ds4", argc, argv, usage);
    while (ds4_args_next(&a)) {
        if (ds4_model_opts_parse(&o->mo, &a)) continue;
        if (ds4_args_is(&a, "-p", "--prompt")) o->prompt = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--prompt-file")) o->prompt_file = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-sys", "--system")) o->sys = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-n", "--n-predict")) { o->n_predict = ds4_args_int(&a, 0, 1 << 30); o->n_predict_set = 1; }
        else if (ds4_args_is(&a, NULL, "--inspect")) o->inspect = 1;
        else if (ds4_args_is(&a, NULL, "--tokenize")) { o->tokenize = 1; o->tokenize_text = ds4_args_optional(&a); }
        else if (ds4_args_is(&a, NULL, "--special")) o->special = 1;
        else if (ds4_args_is(&a, NULL, "--detokenize")) o->detok = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--tokens")) o->tokens = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--tokens-file")) o->tokens_file = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--dump-logits")) o->dump_logits = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--dump-hidden")) o->dump_hidden = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--dump-indexer")) o->dump_indexer = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--imatrix-out")) o->imatrix_out = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--decode-only")) o->decode_only = 1;
        else if (ds4_args_is(&a, NULL, "--split")) o->split = ds4_args_int(&a, 0, 1 << 24);
        else if (ds4_args_is(&a, NULL, "--dump-tokens")) o->dump_tokens = 1;
        else if (ds4_args_is(&a, NULL, "--dump-logprobs")) o->dump_logprobs = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--logprobs-top-k")) o->lp_top_k = ds4_args_int(&a, 0, 1 << 24);
        else if (ds4_args_is(&a, "-q", "--quiet")) o->quiet = 1;
        else ds4_args_unknown(&a);
    }
    if (o->mo.steer && !o->mo.steer_scale_set) ds4_args_fail("ds4", "--steer needs --steer-scale S");
    if (!o->mo.steer && (o->mo.steer_scale_set || o->mo.steer_layers)) ds4_args_fail("ds4", "--steer-scale / --steer-layers need --steer FILE");
    if (o->mo.steer && o->mo.kv_dir)
        ds4_args_fail("ds4", "--steer cannot be combined with --kv-disk-dir (cached states were computed unsteered)");
    if (!o->mo.seed_set) o->mo.sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

/* --------------------------------------------------------------------- */

static int write_file(const char *path, const void *data, size_t n) {
    return ds4_write_file_atomic(path, data, n, 0644);
}

static int tokenize_main(const opts *o) {
    char *err = NULL;
    ds4_tokenizer *tok = ds4_tokenizer_load(o->mo.model, &err);
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
    ds4_tokenizer *tok = ds4_tokenizer_load(o->mo.model, &err);
    if (!tok) die("%s", err ? err : "cannot load tokenizer");
    ds4_tokens ids = { 0 };
    if (parse_ids(o->detok, &ids)) die("--detokenize expects comma-separated ids");
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] >= ds4_tok_n_vocab(tok)) die("token id %d out of range (vocabulary has %d)", ids.v[i], ds4_tok_n_vocab(tok));
    ds4_buf out = { 0 };
    if (ds4_detokenize(tok, ids.v, ids.n, &out)) die("out of memory detokenizing");
    fwrite(out.p, 1, out.n, stdout);
    ds4_buf_free(&out);
    ds4_tokens_free(&ids);
    ds4_tokenizer_free(tok);
    return 0;
}

/* --imatrix-out FILE: prefill a calibration text (raw, no chat template)
 * and write the routed experts' importance matrix for ds4-quantize.  A
 * text longer than --ctx is cut into windows of ctx tokens, each from an
 * empty state. */
static int imatrix_main(const opts *o) {
    if (!o->prompt_file && !o->prompt && !o->tokens_file)
        die("--imatrix-out needs a calibration text: --prompt-file FILE (or -p TEXT, --tokens-file FILE)");
    ds4_model_params mp;
    ds4_model_opts_model_params(&o->mo, &mp);
    mp.mtp_path = NULL;   /* the imatrix covers the main model's experts */
    char *err = NULL;
    ds4_model *m = ds4_model_load(o->mo.model, &mp, &err);
    if (!m) die("%s", err ? err : "cannot load the model");
    ds4_tokens ids = { 0 };
    size_t len = 0;
    char *text = o->prompt_file ? read_file(o->prompt_file, &len)
               : o->tokens_file ? read_file(o->tokens_file, &len) : strdup(o->prompt);
    if (!text) die("cannot read %s: %s", o->prompt_file ? o->prompt_file : o->tokens_file, strerror(errno));
    if (!o->prompt_file && !o->prompt) {
        if (parse_ids(text, &ids)) die("bad token list in %s", o->tokens_file);
    } else {
        if (!o->prompt_file) len = strlen(text);
        if (ds4_tokenize(ds4_model_tokenizer(m), text, len, DS4_TOK_PLAIN, &ids)) die("tokenization failed");
    }
    free(text);
    if (!ids.n) die("the calibration text is empty");
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = (size_t)o->mo.ctx < ids.n ? o->mo.ctx : (int)ids.n;
    sp.prefill_chunk = o->mo.chunk;
    sp.no_qat = o->mo.no_qat;
    ds4_session *s = ds4_session_new(m, &sp, &err);
    if (!s) die("%s", err ? err : "cannot create a session");
    if (ds4_session_imatrix_begin(s)) die("out of memory for the importance matrix");
    for (size_t at = 0; at < ids.n; at += (size_t)sp.ctx_size) {
        size_t n = ids.n - at < (size_t)sp.ctx_size ? ids.n - at : (size_t)sp.ctx_size;
        ds4_session_reset(s);
        int rc = ds4_session_eval(s, ids.v + at, (int)n, NULL, NULL);
        if (rc) die("prefill failed: %s", ds4_model_strerror(m, rc));
        if (!o->quiet) fprintf(stderr, "\rds4: imatrix: %zu / %zu tokens", at + n, ids.n);
    }
    if (!o->quiet) fputc('\n', stderr);
    if (ds4_session_imatrix_save(s, o->imatrix_out, &err)) die("%s", err ? err : "cannot write the imatrix");
    if (!o->quiet) fprintf(stderr, "ds4: wrote %s (%zu calibration tokens)\n", o->imatrix_out, ids.n);
    ds4_session_free(s);
    ds4_model_free(m);
    ds4_tokens_free(&ids);
    return 0;
}

/* --------------------------------------------------------------------- */
/* --dump-tokens and --dump-logprobs                                       */

/* The first-turn prompt exactly as chat_turn renders it (system text, the
 * user message, the assistant opening for the thinking mode). */
static int render_prompt(const opts *o, int format, const char *text, size_t len, ds4_buf *out) {
    ds4_message msgs[2];
    int nm = 0;
    memset(msgs, 0, sizeof msgs);
    if (o->sys) {
        msgs[nm].role = DS4_ROLE_SYSTEM;
        msgs[nm].content = o->sys;
        msgs[nm].content_len = strlen(o->sys);
        nm++;
    }
    msgs[nm].role = DS4_ROLE_USER;
    msgs[nm].content = text;
    msgs[nm].content_len = len;
    nm++;
    ds4_think think = o->mo.think;
    if (think == DS4_THINK_MAX && o->mo.ctx < DS4_THINK_MAX_MIN_CTX) think = DS4_THINK_HIGH;
    ds4_render_opts ro = { .think = think, .format = (ds4_chat_format)format };
    char *err = NULL;
    if (ds4_render_chat(msgs, nm, &ro, out, &err)) die("%s", err ? err : "cannot render the prompt");
    return 0;
}

/* One token's bytes, readable and reversible: UTF-8 characters as they
 * are, \n \t \r \\ escaped, any other control or stray byte as \xNN. */
static void put_escaped(FILE *f, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        int ok = len > 1 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) ok = (p[i + k] & 0xc0) == 0x80;
        if (ok) { fwrite(p + i, 1, (size_t)len, f); i += (size_t)len; continue; }
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\x%02x", c);
        else fputc((int)c, f);
        i++;
    }
}

static int dump_tokens_main(const opts *o) {
    char *err = NULL;
    ds4_tokenizer *tok = ds4_tokenizer_load(o->mo.model, &err);
    if (!tok) die("%s", err ? err : "cannot load tokenizer");
    ds4_tokens ids = { 0 };
    if (o->tokens || o->tokens_file) {
        char *file = NULL;
        const char *src = o->tokens;
        if (o->tokens_file) {
            size_t len;
            if (!(file = read_file(o->tokens_file, &len))) die("cannot read %s: %s", o->tokens_file, strerror(errno));
            src = file;
        }
        if (parse_ids(src, &ids) || ids.n == 0) die("bad token list");
        free(file);
        for (size_t i = 0; i < ids.n; i++)
            if (ids.v[i] >= ds4_tok_n_vocab(tok)) die("token id %d out of range (vocabulary has %d)", ids.v[i], ds4_tok_n_vocab(tok));
    } else if (o->prompt || o->prompt_file) {
        size_t len = 0;
        char *text;
        if (o->prompt_file) {
            if (!(text = read_file(o->prompt_file, &len))) die("cannot read %s: %s", o->prompt_file, strerror(errno));
        } else { text = strdup(o->prompt); len = strlen(text); }
        ds4_buf prompt = { 0 };
        render_prompt(o, ds4_tok_format(tok), text, len, &prompt);
        if (ds4_tokenize(tok, prompt.p, prompt.n, DS4_TOK_SPECIAL, &ids)) die("tokenization failed");
        ds4_buf_free(&prompt);
        free(text);
    } else die("--dump-tokens needs -p TEXT, --prompt-file FILE or --tokens IDS");
    for (size_t i = 0; i < ids.n; i++) {
        size_t n;
        const char *p = ds4_token_bytes(tok, ids.v[i], &n);
        printf("%zu\t%d\t", i, ids.v[i]);
        put_escaped(stdout, (const unsigned char *)p, n);
        putchar('\n');
    }
    ds4_tokens_free(&ids);
    ds4_tokenizer_free(tok);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* Collects the steps of --dump-logprobs during generation. */
typedef struct {
    const ds4_tokenizer *tok;
    int n_vocab, k, n_steps, failed;
    ds4_lp_entry *top;
    ds4_buf json;
} lp_dump;

static void lp_step(lp_dump *d, const float *logits, int32_t id) {
    double lse = ds4_logprob_top(logits, d->n_vocab, d->k, d->top);
    double lp = id >= 0 ? (double)logits[id] - lse : 0;
    if (d->n_steps++) d->failed |= ds4_buf_puts(&d->json, ",");
    d->failed |= ds4_logprob_step_json(&d->json, d->tok, id, lp, d->top, d->k < d->n_vocab ? d->k : d->n_vocab);
}

static void lp_on_token(void *ud, const float *logits, int32_t id) {
    lp_step(ud, logits, id);
}

static void lp_write(lp_dump *d, const char *path) {
    if (d->failed) die("out of memory building %s", path);
    ds4_buf out = { 0 };
    ds4_buf_puts(&out, "{\"steps\":[");
    ds4_buf_append(&out, d->json.p ? d->json.p : "", d->json.n);
    if (ds4_buf_puts(&out, "]}\n") || write_file(path, out.p, out.n))
        die("cannot write %s: %s", path, strerror(errno));
    ds4_buf_free(&out);
}

/* --------------------------------------------------------------------- */

int main(int argc, char **argv) {
    opts o;
    parse_args(argc, argv, &o);
    if (o.inspect) {
        char *err = NULL;
        int rc = ds4_inspect(o.mo.model, stdout, &err);
        if (rc) { fprintf(stderr, "ds4: %s\n", err ? err : ds4_strerror(rc)); free(err); return 1; }
        /* what a run at --ctx needs against this machine's RAM (vocab-only
         * files have no plan: nothing to print) */
        ds4_mem_plan mp;
        if (ds4_memory_plan(o.mo.model, o.mo.ctx, o.mo.threads, &mp, NULL) == DS4_OK) {
            fputc('\n', stdout);
            ds4_memory_plan_print(&mp, stdout);
        }
        return 0;
    }
    if (o.tokenize) return tokenize_main(&o);
    if (o.imatrix_out) return imatrix_main(&o);
    if (o.detok) return detokenize_main(&o);
    {
        /* --dist: ranks > 0 serve rank 0 and never reach the front end */
        char *err = NULL;
        int wrc = 0, r = ds4_model_opts_start_dist(&o.mo, &argc, &argv, &wrc, &err);
        if (r < 0) die("%s", err ? err : "cannot start MPI");
        if (r > 0) return wrc;
    }
    if (o.dump_tokens) return dump_tokens_main(&o);

    if (!o.mo.dist && ds4_model_file_check("ds4", o.mo.model)) exit(1);   /* --dist: may name per-rank files */

    ds4_catch_signals(on_sigint, on_sigterm, 0);

    /* A model that does not fit in RAM would not fail: its mmap'd weights
     * would be paged in from disk again and again, a thrashing run that
     * looks like a hang.  Say so up front, with the numbers. */
    if (!o.mo.ssd_streaming) {
        ds4_mem_plan mp;
        if (ds4_memory_plan(o.mo.model, o.mo.ctx, o.mo.threads, &mp, NULL) == DS4_OK &&
            mp.mem_available && mp.total > mp.mem_available) {
            fprintf(stderr, "ds4: warning: this run needs more memory than is available:\n");
            ds4_memory_plan_print(&mp, stderr);
        }
    }

    chat_app app;
    chat_opts co = {
        .model = o.mo.model, .ctx = o.mo.ctx, .ctx_explicit = o.mo.ctx_set, .chunk = o.mo.chunk,
        .no_qat = o.mo.no_qat, .decode_only = o.decode_only, .quiet = o.quiet, .lookup = o.mo.lookup,
        .mtp_draft = ds4_model_opts_mtp_draft(&o.mo),
        .sp = o.mo.sp, .think = o.mo.think, .sys = o.sys, .n_predict = o.n_predict,
        .interrupt = &g_interrupt, .terminate = &g_terminate,
        .kv_dir = o.mo.kv_dir, .kv_space_mb = o.mo.kv_space_mb, .kv_allow_variants = o.mo.kv_variants,
        .kv_policy = o.mo.kv_policy,
    };
    ds4_model_opts_model_params(&o.mo, &co.mparams);
    lp_dump lpd;
    memset(&lpd, 0, sizeof lpd);
    int gen_lp = 0;   /* logprob steps come from the sampled tokens */
    if (o.dump_logprobs) {
        if (o.mo.kv_dir) die("--dump-logprobs cannot be combined with --kv-disk-dir (restored positions have no logits)");
        gen_lp = !(o.tokens || o.tokens_file) || (o.n_predict_set && o.n_predict > 0);
        if (gen_lp) { co.on_token = lp_on_token; co.token_ud = &lpd; }
    }
    if (chat_open(&app, &co) != 0) return 1;
    float *steer = NULL;
    if (o.mo.steer) {
        ds4_model_info mi;
        ds4_model_get_info(app.m, &mi);
        ds4_steer_meta meta;
        char *err = NULL;
        if (ds4_steer_load(o.mo.steer, mi.n_embd, &steer, &meta, &err)) die("%s", err ? err : "cannot load the direction");
        int l0 = meta.layer_first, l1 = meta.layer_last;
        if (o.mo.steer_layers && ds4_steer_parse_layers(o.mo.steer_layers, mi.n_layer, &l0, &l1))
            die("--steer-layers: bad value '%s' (expected A:B with 0 <= A <= B < %d)", o.mo.steer_layers, mi.n_layer);
        if (l0 < 0 || l1 >= mi.n_layer || l0 > l1)
            die("%s: layers %d:%d do not fit this model (%d layers); use --steer-layers", o.mo.steer, l0, l1, mi.n_layer);
        if (strcmp(meta.model, mi.name) && !o.quiet)
            fprintf(stderr, "ds4: warning: the direction was computed on '%s', this model is '%s'\n", meta.model, mi.name);
        app.o.steer = steer;
        app.o.steer_scale = (float)o.mo.steer_scale;
        app.o.steer_l0 = l0;
        app.o.steer_l1 = l1;
        int rc = ds4_session_set_steering(app.s, steer, (float)o.mo.steer_scale, l0, l1);
        if (rc) die("--steer: %s", ds4_strerror(rc));
    }
    if (o.dump_logprobs) {
        lpd.tok = app.tok;
        lpd.n_vocab = ds4_tok_n_vocab(app.tok);
        lpd.k = o.lp_top_k < lpd.n_vocab ? o.lp_top_k : lpd.n_vocab;
        lpd.top = calloc((size_t)lpd.k + 1, sizeof *lpd.top);
        if (!lpd.top) die("out of memory");
    }

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
        int n_gen = o.n_predict_set ? o.n_predict :
                    ((o.dump_logits || o.dump_hidden || o.dump_indexer || o.dump_logprobs) ? 0 : o.n_predict);
        ds4_buf lg = { 0 }, hd = { 0 }, ix = { 0 };
        int want_rows = o.dump_logits || (o.dump_logprobs && !gen_lp);
        if (o.dump_indexer) ds4_session_capture_indexer(app.s, &ix);
        rc = chat_run_tokens(&app, ids.v, (int)ids.n, o.split, n_gen,
                             want_rows ? &lg : NULL, o.dump_hidden ? &hd : NULL);
        ds4_session_capture_indexer(app.s, NULL);
        if (rc == 0 && o.dump_logprobs && !gen_lp) {
            /* step t: the distribution after tokens[0..t]; its id is the
             * prompt token that actually follows */
            size_t row = (size_t)lpd.n_vocab * sizeof(float);
            size_t rows = row ? lg.n / row : 0;
            for (size_t t = 0; t < rows; t++)
                lp_step(&lpd, (const float *)(lg.p + t * row), t + 1 < ids.n ? ids.v[t + 1] : -1);
        }
        if (rc == 0 && o.dump_logits && write_file(o.dump_logits, lg.p, lg.n))
            die("cannot write %s: %s", o.dump_logits, strerror(errno));
        if (rc == 0 && o.dump_hidden && write_file(o.dump_hidden, hd.p, hd.n))
            die("cannot write %s: %s", o.dump_hidden, strerror(errno));
        if (rc == 0 && o.dump_indexer && write_file(o.dump_indexer, ix.p, ix.n))
            die("cannot write %s: %s", o.dump_indexer, strerror(errno));
        ds4_buf_free(&ix);
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
        if (o.dump_logprobs) die("--dump-logprobs needs -p, --prompt-file or --tokens");
        rc = chat_interactive(&app);
    }
    if (rc == 0 && o.dump_logprobs) lp_write(&lpd, o.dump_logprobs);
    ds4_buf_free(&lpd.json);
    free(lpd.top);
    chat_close(&app);
    free(steer);
    return rc ? 1 : 0;
}
