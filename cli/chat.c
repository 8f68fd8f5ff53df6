/*
 * chat.c -- see chat.h.
 *
 * Turn handling: the first turn is rendered by the prompt renderer (BOS,
 * optional max-effort paragraph, system text, user turn, assistant opening).
 * Later turns are *appended* to the live session: the previous answer is
 * closed with EOS and `<｜User｜>text<｜Assistant｜><think>` follows.  That
 * keeps earlier reasoning in the context (unlike the stateless re-rendering
 * an API server does, which drops it) but never re-evaluates a token.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "ds4_gen.h"
#include "ds4_sync.h"
#include "input.h"

#define DS4_STR_(x) #x
#define DS4_STR(x) DS4_STR_(x)
#define DIM "\033[2m"
#define RESET "\033[0m"

/* One progress bar per prefill.  A prefill may be several engine calls
 * (the disk cache stops at every checkpoint frontier to save there), and
 * each call reports its own done/total from 0: the bar adds them up, so it
 * only moves forward and is finished (newline) once, by progress_end.
 * `total` is the whole prefill when the caller knows it (0 = learn it from
 * the calls). */
typedef struct progress_ud {
    chat_app *a;
    double t0;
    int shown;              /* the bar's line is on screen, unfinished */
    int total;              /* tokens of the whole prefill (0 = unknown) */
    int base;               /* tokens done by earlier calls of this prefill */
    int seg_done, seg_total;   /* the current call's last report */
} progress_ud;

static void progress_begin(progress_ud *p, chat_app *a, int total) {
    memset(p, 0, sizeof *p);
    p->a = a;
    p->t0 = ds4_now();
    p->total = total;
    a->progress = p;
}

/* Finish the bar's line (if one was drawn). */
static void progress_end(progress_ud *p) {
    if (p->shown) fputc('\n', stderr);
    p->shown = 0;
    p->a->progress = NULL;
}

/* Another line is about to be printed on stderr mid-prefill: clear the
 * bar's line first; the next report redraws it below that line. */
static void progress_clear(chat_app *a) {
    progress_ud *p = a->progress;
    if (p && p->shown) {
        fputs("\r\033[K", stderr);
        p->shown = 0;
    }
}

/* Progress bar on a terminal for prefills longer than one chunk; also the
 * place where Ctrl+C cancels a long prefill. */
static int on_progress(void *ud, int done, int total) {
    progress_ud *p = ud;
    chat_app *a = p->a;
    if (*a->o.interrupt) return 1;
    /* a new engine call starts over from 0 (or the last one finished) */
    if ((p->seg_total > 0 && p->seg_done == p->seg_total) || done < p->seg_done ||
        total != p->seg_total) {
        p->base += p->seg_done;
        p->seg_done = 0;
    }
    p->seg_done = done;
    p->seg_total = total;
    int all = p->base + total > p->total ? p->base + total : p->total;
    int now = p->base + done;
    if (!a->tty_err || a->o.quiet || all <= a->o.chunk) return 0;
    double el = ds4_now() - p->t0;
    int w = 30, f = all ? (int)((long)w * now / all) : w;
    fprintf(stderr, "\rprefill %d/%d [", now, all);
    for (int i = 0; i < w; i++) fputc(i < f ? '#' : '.', stderr);
    fprintf(stderr, "] %3d%% %.0f tok/s \033[K", all ? (int)(100L * now / all) : 100,
            el > 0 ? now / el : 0.0);
    p->shown = 1;
    fflush(stderr);
    return 0;
}

/* Save the live session to the disk cache (failures are reported and
 * otherwise ignored: the chat goes on). */
static void kv_save(chat_app *a, ds4_kv_reason why) {
    int n = ds4_session_n_tokens(a->s);
    if (!a->kv || n < a->o.kv_policy.min_tokens) return;
    char *err = NULL;
    progress_clear(a);
    if (ds4_kvstore_save(a->kv, a->s, why, NULL, 0, &err) != DS4_OK)
        fprintf(stderr, "ds4: %s\n", err ? err : "kv cache save failed");
    else if (!a->o.quiet && why != DS4_KV_SHUTDOWN && why != DS4_KV_MANUAL)
        fprintf(stderr, "ds4: disk KV cache: saved %d tokens (%s)\n", n, ds4_kv_reason_name(why));
    free(err);
}

/* ds4_eval's disk checkpoint callback. */
static void kv_save_cb(void *ud, ds4_kv_reason why) { kv_save(ud, why); }

/* Evaluation parameters: the disk cache's checkpoints when it is on, the
 * progress bar (and Ctrl+C) for prompts, nothing for generated tokens. */
static void eval_params(chat_app *a, ds4_eval_params *ep, progress_ud *pu) {
    ds4_eval_params_default(ep);
    if (a->kv) {
        ep->kv_policy = &a->o.kv_policy;
        ep->save = kv_save_cb;
        ep->save_ud = a;
    }
    if (pu) {
        ep->progress = on_progress;
        ep->progress_ud = pu;
    }
}

/* A context beyond the trained one works (positions are just larger) but
 * the model has never seen them: say so once, where it was asked for. */
static void ctx_warn(chat_app *a, int ctx) {
    if (a->ctx_train > 0 && (uint64_t)ctx > a->ctx_train)
        fprintf(stderr, "ds4: warning: a context of %d tokens exceeds the %llu the model was "
                "trained for (deepseek4.context_length); text beyond that is out of distribution\n",
                ctx, (unsigned long long)a->ctx_train);
}

int chat_open(chat_app *a, const chat_opts *o) {
    memset(a, 0, sizeof *a);
    a->o = *o;
    a->tty_out = isatty(1);
    a->tty_err = isatty(2);
    ds4_model_params mp = o->mparams;
    char *err = NULL;
    double t0 = ds4_now();
    a->m = ds4_model_load(o->model, &mp, &err);
    if (!a->m) {
        fprintf(stderr, "ds4: %s\n", err ? err : "cannot load model");
        free(err);
        return -1;
    }
    if (o->mtp_draft > 0 && !ds4_model_has_mtp(a->m)) {
        fprintf(stderr, "ds4: --mtp-draft: %s has no MTP block (mtp.0.* tensors, or a GLM NextN layer); "
                "name one with --mtp FILE\n", o->model);
        ds4_model_free(a->m);
        a->m = NULL;
        return -1;
    }
    a->tok = ds4_model_tokenizer(a->m);
    a->sp = ds4_tok_special(a->tok);
    ds4_model_info info;
    ds4_model_get_info(a->m, &info);
    if (!o->quiet) {
        fprintf(stderr, "ds4: %s: %d layers, %d embd, %d experts (%d used), vocab %d, "
                "%.2f GiB, loaded in %.2f s\n", info.name, info.n_layer, info.n_embd,
                info.n_expert, info.n_expert_used, info.n_vocab,
                info.file_bytes / 1073741824.0, ds4_now() - t0);
        if (info.random_weights)
            fprintf(stderr, "ds4: NOTE: this model has random weights (a synthetic demo): "
                    "its output is meaningless text.\n");
    }
    ds4_model_expert_cache_stats(a->m, &a->xc0);
    if (a->xc0.enabled && !o->quiet) {
        const ds4_expert_cache_stats *x = &a->xc0;
        fprintf(stderr, "ds4: ssd streaming: expert cache %.1f MiB%s = %llu slots of %.2f MiB "
                "(%.1f %% of %.1f MiB routed experts, %llu slices); %.1f MiB resident; "
                "%s reads, %d reader threads\n",
                x->cache_bytes / 1048576.0, o->mparams.ssd_cache_bytes ? "" : " (default: half of the available RAM)",
                (unsigned long long)x->slots, x->slot_bytes / 1048576.0,
                100.0 * (double)x->slots / (double)x->n_slices, x->routed_bytes / 1048576.0,
                (unsigned long long)x->n_slices, x->resident_bytes / 1048576.0,
                x->direct_io ? "O_DIRECT" : "buffered (+FADV_DONTNEED)", x->readers);
    }
    a->ctx_train = info.ctx_train;
    if (o->ctx_explicit) ctx_warn(a, o->ctx);
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = o->ctx;
    sp.prefill_chunk = o->chunk;
    sp.no_qat = o->no_qat;
    a->s = ds4_session_new(a->m, &sp, &err);
    if (!a->s) {
        fprintf(stderr, "ds4: %s\n", err ? err : "cannot create session");
        free(err);
        return -1;
    }
    ds4_session_set_decode_only(a->s, o->decode_only);
    if (o->kv_dir) {
        ds4_kvstore_params kp;
        ds4_kvstore_params_default(&kp);
        kp.dir = o->kv_dir;
        if (o->kv_space_mb) kp.space_bytes = o->kv_space_mb << 20;
        kp.allow_quant_variants = o->kv_allow_variants;
        a->kv = ds4_kvstore_open(a->m, &kp, &err);
        if (!a->kv) {
            fprintf(stderr, "ds4: %s\n", err ? err : "cannot open the KV cache");
            free(err);
            return -1;
        }
    }
    a->smp = ds4_sampler_new(info.n_vocab, &o->sp);
    return a->smp ? 0 : -1;
}

void chat_close(chat_app *a) {
    /* clean exit: keep the conversation for the next run */
    if (a->kv && a->s) kv_save(a, DS4_KV_SHUTDOWN);
    ds4_kvstore_close(a->kv);
    ds4_sampler_free(a->smp);
    ds4_session_free(a->s);
    ds4_model_free(a->m);
}

static ds4_think effective_think(chat_app *a) {
    if (a->o.think == DS4_THINK_MAX && ds4_session_ctx_size(a->s) < DS4_THINK_MAX_MIN_CTX)
        return DS4_THINK_HIGH;
    return a->o.think;
}

typedef struct {
    int prefill_tokens;
    double prefill_s;
    int gen_tokens;
    double gen_s;
    ds4_spec_stats spec;    /* --lookup, --mtp-draft */
} turn_stats;

/* An evaluation failure as text: an expert read failure or a model file
 * damaged under the run has its own message (file, tensor, layer, expert,
 * bytes). */
static const char *eval_errstr(chat_app *a, int rc) {
    return ds4_model_strerror(a->m, rc);
}

static void print_stats(chat_app *a, const turn_stats *st) {
    ds4_expert_cache_stats x;
    ds4_model_expert_cache_stats(a->m, &x);
    if (a->o.quiet) { a->xc0 = x; return; }
    fprintf(stderr, "\n[prefill %d tokens, %.2f s, %.1f tok/s | generated %d tokens, %.2f s, "
            "%.2f tok/s | context %d/%d]\n",
            st->prefill_tokens, st->prefill_s,
            st->prefill_s > 0 ? st->prefill_tokens / st->prefill_s : 0.0,
            st->gen_tokens, st->gen_s, st->gen_s > 0 ? st->gen_tokens / st->gen_s : 0.0,
            ds4_session_n_tokens(a->s), ds4_session_ctx_size(a->s));
    /* once, after the first answer (every dense weight has been read by
     * then; a smaps walk per turn would cost milliseconds on an 80 GB
     * mapping): weights on 4 KB pages -- a model file just written or
     * copied stays cached in small pages until evicted (docs/memory.md,
     * "Huge pages") */
    ds4_weight_pages wp;
    const int first = !a->pages_checked;
    a->pages_checked = 1;
    if (first && !ds4_model_weight_pages(a->m, &wp) && ds4_weight_pages_small(&wp, (uint64_t)1 << 30))
        fprintf(stderr, "[warning: %.0f %% of the %.1f GB of weights in use are mapped with 4 KB pages, which "
                "slows decode and prefill: `sync; dd if=%s iflag=nocache count=0` evicts the file from the page "
                "cache, the next run reads it back in 2 MB pages (docs/memory.md, \"Huge pages\")]\n",
                100.0 * (double)(wp.resident - wp.huge) / (double)wp.resident, wp.resident / 1e9, a->o.model);
    if ((a->o.lookup > 0 || a->o.mtp_draft > 0) && st->spec.passes)
        fprintf(stderr, "[%s: %llu passes, %llu drafted, %llu accepted (%.1f %%), "
                "%.2f tokens/pass]\n",
                a->o.lookup > 0 && a->o.mtp_draft > 0 ? "lookup+mtp" : a->o.lookup > 0 ? "lookup" : "mtp",
                (unsigned long long)st->spec.passes, (unsigned long long)st->spec.drafted,
                (unsigned long long)st->spec.accepted,
                st->spec.drafted ? 100.0 * st->spec.accepted / st->spec.drafted : 0.0,
                (double)st->spec.emitted / st->spec.passes);
    if (x.enabled) {
        uint64_t h = x.hits - a->xc0.hits, mi = x.misses - a->xc0.misses, b = x.bytes_read - a->xc0.bytes_read;
        double rs = x.read_seconds - a->xc0.read_seconds, ws = x.wait_seconds - a->xc0.wait_seconds;
        int nt = st->prefill_tokens + st->gen_tokens;
        fprintf(stderr, "[experts: hit rate %.1f %% (%llu hits, %llu reads), %.2f MiB read/token, "
                "%.2f GB/s while reading, %.2f s waited]\n",
                h + mi ? 100.0 * (double)h / (double)(h + mi) : 0.0, (unsigned long long)h,
                (unsigned long long)mi, nt ? b / 1048576.0 / nt : 0.0, rs > 0 ? b / rs / 1e9 : 0.0, ws);
    }
    a->xc0 = x;
}

static void out_bytes(const char *p, size_t n) {
    fwrite(p, 1, n, stdout);
    fflush(stdout);
}

/* The generation driver's callbacks (ds4_gen.h): every piece is printed
 * as it comes; the reasoning channel dimmed on a terminal, else between
 * <think> and </think> lines. */
static void out_cb(void *ud, const char *p, size_t n) { (void)ud; out_bytes(p, n); }

static void think_end_cb(void *ud) {
    chat_app *a = ud;
    if (a->tty_out) out_bytes(RESET "\n", strlen(RESET) + 1);
    else out_bytes("\n</think>\n", 10);
}

static int cancel_cb(void *ud) { chat_app *a = ud; return *a->o.interrupt != 0; }

static void token_cb(void *ud, const float *lg, int32_t t) {
    chat_app *a = ud;
    a->o.on_token(a->o.token_ud, lg, t);
}

/* Sample and print up to n_max tokens (src/gen: with --lookup, drafts that
 * followed the latest repeat of the recent text ride along in one
 * verification pass; with --mtp, when the lookup finds none, the MTP
 * block's drafts).  `reasoning` says whether the output starts inside the
 * reasoning channel (thinking mode).  raw = print every token's bytes
 * with no channel handling, EOS included (diagnostics).  Every printed
 * token is evaluated, the last one too: the next turn appends to it. */
static int generate(chat_app *a, int n_max, int reasoning, int raw, turn_stats *st) {
    int in_think = reasoning && !raw;
    double t0 = ds4_now();
    int rc = 0;
    if (in_think) {
        if (a->tty_out) out_bytes(DIM, strlen(DIM));
        else out_bytes("<think>\n", 8);
    }
    ds4_eval_params ep;
    eval_params(a, &ep, NULL);
    ds4_gen_opts o;
    ds4_gen_opts_default(&o);
    o.smp = a->smp;
    o.max_tokens = n_max;
    o.reasoning = in_think;
    o.eos_is_text = raw;
    /* a per-token hook (--dump-logprobs) needs every position's logits: no
     * drafts then */
    o.lookup = a->o.on_token ? 0 : a->o.lookup;
    o.mtp_draft = a->o.on_token ? 0 : a->o.mtp_draft;
    o.late_caps = 1;
    o.eval_all = 1;
    o.settle_on_abort = 1;
    o.ep = &ep;
    ds4_gen_cb cb = { 0 };
    cb.ud = a;
    cb.reasoning = out_cb;
    cb.content = out_cb;
    cb.reasoning_end = think_end_cb;
    if (a->o.on_token) cb.token = token_cb;
    cb.cancel = cancel_cb;
    ds4_gen *g = ds4_gen_new(a->s, a->m, &o, &cb);
    if (!g) { fprintf(stderr, "\nds4: out of memory\n"); return -1; }
    ds4_gen_finish fin = ds4_gen_run(g);
    int erc = 0;
    switch (fin) {
    case DS4_GEN_CANCEL:
        if (!a->o.quiet) fprintf(stderr, "\n[interrupted]");
        break;
    case DS4_GEN_CONTEXT:
        if (!a->o.quiet) fprintf(stderr, "\n[context full: %d tokens]", ds4_session_ctx_size(a->s));
        break;
    case DS4_GEN_ERROR:
        /* no logits: nothing to sample from, as the old loop ended */
        if (ds4_gen_error(g, &erc, NULL) == DS4_GEN_ERR_NO_LOGITS) break;
        if (ds4_gen_error(g, NULL, NULL) == DS4_GEN_ERR_NOMEM) fprintf(stderr, "\nds4: out of memory\n");
        else fprintf(stderr, "\nds4: %s\n", eval_errstr(a, erc));
        rc = -1;
        break;
    default:
        break;
    }
    if (ds4_gen_in_reasoning(g) && in_think) {
        if (a->tty_out) out_bytes(RESET, strlen(RESET));
        else out_bytes("\n</think>\n", 10);
    }
    out_bytes("\n", 1);
    st->gen_tokens = ds4_gen_n_tokens(g);
    st->spec = *ds4_gen_spec_stats(g);
    st->gen_s = ds4_now() - t0;
    ds4_gen_free(g);
    return rc;
}

/* Evaluate ids after what the session holds (chat_turn has brought it to
 * the prompt's reusable prefix); `cold`: the tokens start a prompt, so an
 * empty session is checkpointed at its trimmed, aligned cold point. */
static int eval_prompt(chat_app *a, const int32_t *ids, int n, int cold, turn_stats *st) {
    progress_ud pu;
    progress_begin(&pu, a, n);
    int before = ds4_session_n_tokens(a->s), reused = before, rc;
    ds4_eval_params ep;
    eval_params(a, &ep, &pu);
    ep.cold = cold;
    rc = ds4_eval(a->s, ids, n, &ep);
    st->prefill_s = ds4_now() - pu.t0;
    st->prefill_tokens = ds4_session_n_tokens(a->s) - reused;
    progress_end(&pu);
    if (rc == DS4_ECTX) {
        fprintf(stderr, "ds4: the prompt (%d tokens) does not fit the context (%d tokens); "
                "use --ctx or /ctx\n", before + n, ds4_session_ctx_size(a->s));
        return -1;
    }
    if (rc == DS4_ECANCEL) {
        fprintf(stderr, "ds4: prefill interrupted\n");
        return -1;
    }
    if (rc) { fprintf(stderr, "ds4: %s\n", eval_errstr(a, rc)); return -1; }
    return 0;
}

static void on_restored(void *ud, int n, size_t used, double seconds) {
    chat_app *a = ud;
    (void)seconds;
    if (!a->o.quiet)
        fprintf(stderr, "ds4: disk KV cache: restored %d tokens (%zu bytes of the prompt)\n", n,
                used);
}

static void on_sync_log(void *ud, const char *line) {
    chat_app *a = ud;
    if (!a->o.quiet) fprintf(stderr, "ds4: %s\n", line);
}

int chat_turn(chat_app *a, const char *text, size_t len) {
    ds4_think think = effective_think(a);
    if (a->o.think == DS4_THINK_MAX && think != DS4_THINK_MAX && a->turns == 0 && !a->o.quiet)
        fprintf(stderr, "ds4: --think-max needs a context of at least %d tokens; using --think\n",
                DS4_THINK_MAX_MIN_CTX);
    ds4_buf prompt = { 0 };
    int append = a->turns > 0 && ds4_session_n_tokens(a->s) > 0;
    if (!append) {
        ds4_message msgs[2];
        int nm = 0;
        memset(msgs, 0, sizeof msgs);
        if (a->o.sys) {
            msgs[nm].role = DS4_ROLE_SYSTEM;
            msgs[nm].content = a->o.sys;
            msgs[nm].content_len = strlen(a->o.sys);
            nm++;
        }
        msgs[nm].role = DS4_ROLE_USER;
        msgs[nm].content = text;
        msgs[nm].content_len = len;
        nm++;
        ds4_render_opts ro = { .think = think, .format = ds4_model_format(a->m) };
        char *err = NULL;
        if (ds4_render_chat(msgs, nm, &ro, &prompt, &err)) {
            fprintf(stderr, "ds4: %s\n", err ? err : "cannot render the prompt");
            free(err);
            return -1;
        }
    } else if (ds4_model_format(a->m) == DS4_FORMAT_GLM) {
        /* GLM: the answer ended at an end token, not evaluated; the next
         * user turn follows it directly, as the template writes it */
        ds4_buf_puts(&prompt, "<|user|>");
        ds4_buf_append(&prompt, text, len);
        ds4_buf_puts(&prompt, think == DS4_THINK_NONE ? "<|assistant|><think></think>" : "<|assistant|><think>");
        if (ds4_buf_failed(&prompt)) {
            fprintf(stderr, "ds4: out of memory building the prompt\n");
            ds4_buf_free(&prompt);
            return -1;
        }
    } else {
        /* close the previous answer, then a new user turn */
        size_t n;
        const char *eos = ds4_token_bytes(a->tok, a->sp->eos, &n);
        ds4_buf_append(&prompt, eos, n);
        ds4_buf_puts(&prompt, "<｜User｜>");
        ds4_buf_append(&prompt, text, len);
        ds4_buf_puts(&prompt, "<｜Assistant｜>");
        ds4_buf_puts(&prompt, think == DS4_THINK_NONE ? "</think>" : "<think>");
        /* the appends above are sticky on failure: one check covers them */
        if (ds4_buf_failed(&prompt)) {
            fprintf(stderr, "ds4: out of memory building the prompt\n");
            ds4_buf_free(&prompt);
            return -1;
        }
    }
    ds4_tokens ids = { 0 };
    ds4_tokenize(a->tok, prompt.p, prompt.n, DS4_TOK_SPECIAL, &ids);
    /* A new conversation: the session keeps the longest prefix it can
     * (itself, a RAM checkpoint, or a state from the disk cache), as the
     * server does; only the rest is evaluated. */
    ds4_sync_result sr = { 0 };
    if (!append && !ds4_tokens_failed(&ids)) {
        ds4_sync_params sp;
        ds4_sync_params_default(&sp);
        sp.tok = a->tok;
        sp.text = prompt.p ? prompt.p : "";
        sp.text_len = prompt.n;
        sp.ctx = ds4_session_ctx_size(a->s);
        sp.log = on_sync_log;
        sp.ud = a;
        if (a->kv) {
            sp.store = a->kv;
            sp.store_min_tokens = a->o.kv_policy.min_tokens;
            sp.restored = on_restored;
        }
        if (ds4_session_sync_begin(a->s, ids.v, (int)ids.n, &sp, &sr)) ids.err = DS4_ENOMEM;
    }
    ds4_buf_free(&prompt);
    if (ds4_tokens_failed(&ids)) {   /* never evaluate a truncated prompt */
        fprintf(stderr, "ds4: out of memory tokenizing the prompt\n");
        ds4_tokens_free(&ids);
        ds4_sync_result_free(&sr);
        return -1;
    }
    turn_stats st = { 0 };
    const ds4_tokens *ev = append ? &ids : &sr.rest;
    int rc = eval_prompt(a, ev->v, (int)ev->n, !append, &st);
    ds4_tokens_free(&ids);
    ds4_sync_result_free(&sr);
    if (rc) return rc;
    *a->o.interrupt = 0;
    rc = generate(a, a->o.n_predict, think != DS4_THINK_NONE, 0, &st);
    a->turns++;
    print_stats(a, &st);
    return rc;
}

int chat_run_tokens(chat_app *a, const int32_t *ids, int n, int split, int n_gen,
                    ds4_buf *logits, ds4_buf *hidden) {
    turn_stats st = { 0 };
    int rc;
    if (a->kv) {
        /* the raw ids' text: restore its longest cached prefix, evaluate
         * (and dump) only the rest, save the whole at the end */
        ds4_buf text = { 0 };
        size_t used = 0;
        /* without the whole text there is no cache lookup (a prefix of it
         * could restore a state the ids do not start with) */
        int got = ds4_detokenize(a->tok, ids, (size_t)n, &text) ? 0 :
                  ds4_kvstore_restore(a->kv, a->s, text.p, text.n, 1, 0, &used);
        ds4_buf_free(&text);
        const int32_t *have = ds4_session_tokens(a->s);
        if (got > 0 && got <= n && !memcmp(have, ids, (size_t)got * sizeof *ids)) {
            if (!a->o.quiet) fprintf(stderr, "ds4: disk KV cache: restored %d tokens\n", got);
            ids += got;
            n -= got;
            split = split >= 0 ? (split > got ? split - got : 0) : split;
        } else if (got > 0) {
            ds4_session_reset(a->s);   /* different split of the same text */
        }
    }
    ds4_session_capture(a->s, logits, hidden);
    if (split >= 0) {
        if (split > n) split = n;
        rc = eval_prompt(a, ids, split, 0, &st);
        ds4_session_set_decode_only(a->s, 1);
        if (!rc) rc = eval_prompt(a, ids + split, n - split, 0, &st);
        ds4_session_set_decode_only(a->s, a->o.decode_only);
        st.prefill_tokens = n;
    } else {
        rc = eval_prompt(a, ids, n, 0, &st);
    }
    ds4_session_capture(a->s, NULL, NULL);
    if (rc) return rc;
    if (a->kv) kv_save(a, DS4_KV_MANUAL);
    if (n_gen > 0) rc = generate(a, n_gen, 0, 1, &st);
    print_stats(a, &st);
    return rc;
}

/* ------------------------------------------------------------------ */

/* The one list of interactive commands: /help prints it, and so does
 * `ds4 --help` (chat_print_commands), so the two never disagree. */
static const struct { const char *name, *args, *help; } k_commands[] = {
    { "/help", "", "this help" },
    { "/think", "", "thinking mode, effort high (default)" },
    { "/think-max", "", "maximum effort (needs a context >= " DS4_STR(DS4_THINK_MAX_MIN_CTX)
                        "; new chats)" },
    { "/nothink", "", "answer without reasoning" },
    { "/ctx", "N", "resize the context (keeps the conversation if it fits)" },
    { "/read", "FILE [text]", "send the file's content (plus any text after the name)" },
    { "/multi", "", "type a multi-line message; a line /end sends it" },
    { "/clear", "", "start a new conversation" },
    { "/quit", "", "exit (also /exit, or Ctrl+D on an empty line)" },
};

void chat_print_commands(FILE *f) {
    fprintf(f, "interactive commands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof *k_commands; i++) {
        char head[40];
        snprintf(head, sizeof head, "%s%s%s", k_commands[i].name, *k_commands[i].args ? " " : "",
                 k_commands[i].args);
        fprintf(f, "  %-18s %s\n", head, k_commands[i].help);
    }
    fprintf(f,
"input:\n"
"  Enter sends the message; a line ending in \\ continues on the next line.\n"
"  A multi-line paste is one message (terminals with bracketed paste): it\n"
"  shows as [paste #N: L lines] and is sent with what you type around it.\n"
"  Ctrl+C stops the current answer (at the prompt: drops the line);\n"
"  Ctrl+D on an empty line quits; keys typed during an answer are kept for\n"
"  the next prompt (control keys such as Ctrl+D are dropped).\n");
}

static int resize_ctx(chat_app *a, int ctx) {
    ds4_session_params sp;
    ds4_session_params_default(&sp);
    sp.ctx_size = ctx;
    sp.prefill_chunk = a->o.chunk;
    sp.no_qat = a->o.no_qat;
    char *err = NULL;
    ds4_session *ns = ds4_session_new(a->m, &sp, &err);
    if (!ns) {
        fprintf(stderr, "ds4: %s\n", err ? err : "cannot create session");
        free(err);
        return -1;
    }
    ds4_session_set_decode_only(ns, a->o.decode_only);
    if (a->o.steer) ds4_session_set_steering(ns, a->o.steer, a->o.steer_scale, a->o.steer_l0, a->o.steer_l1);
    int n = ds4_session_n_tokens(a->s);
    if (n > 0 && n <= ctx) {
        /* move the state over through a snapshot: no re-evaluation */
        ds4_buf snap = { 0 };
        if (ds4_session_snapshot(a->s, &snap) || ds4_session_restore(ns, snap.p, snap.n, &err)) {
            fprintf(stderr, "ds4: %s; starting a new conversation\n", err ? err : "snapshot failed");
            free(err);
            a->turns = 0;
        }
        ds4_buf_free(&snap);
    } else if (n > 0) {
        fprintf(stderr, "ds4: the conversation (%d tokens) does not fit %d; starting a new one\n", n, ctx);
        a->turns = 0;
    }
    ds4_session_free(a->s);
    a->s = ns;
    a->o.ctx = ctx;
    ctx_warn(a, ctx);
    return 0;
}

int chat_interactive(chat_app *a) {
    if (!a->o.quiet)
        fprintf(stderr, "ds4: interactive chat (%s). /help for commands, Ctrl+D to quit.\n",
                a->o.think == DS4_THINK_NONE ? "no thinking" :
                a->o.think == DS4_THINK_MAX ? "thinking, max effort" : "thinking");
    if (a->kv) {
        /* resume the conversation the last run left (saved at its exit) */
        int n = ds4_kvstore_restore_latest(a->kv, a->s, DS4_KV_SHUTDOWN);
        if (n > 0) {
            a->turns = 1;
            ds4_buf t = { 0 };
            int from = n > 48 ? n - 48 : 0;
            int bad = ds4_detokenize(a->tok, ds4_session_tokens(a->s) + from, (size_t)(n - from), &t);
            fprintf(stderr, "ds4: resumed a conversation of %d tokens from %s (/clear starts a new one)\n"
                    "ds4: ...%.*s\n", n, a->o.kv_dir, bad ? 0 : (int)t.n, t.p && !bad ? t.p : "");
            ds4_buf_free(&t);
        }
    }
    chat_input *in = input_open(a->o.interrupt);
    if (!in) { fprintf(stderr, "ds4: out of memory\n"); return -1; }
    ds4_buf msg = { 0 };
    for (;;) {
        *a->o.interrupt = 0;
        if (a->o.terminate && *a->o.terminate) break;
        int single = 0;
        int r = input_read(in, &msg, &single);
        if (a->o.terminate && *a->o.terminate) break;
        if (r == INPUT_INTERRUPTED) { putchar('\n'); continue; }
        if (r == INPUT_EOF) { if (a->tty_out) putchar('\n'); break; }
        if (msg.n == 0) continue;
        char *line = msg.p;
        if (single && line[0] == '/') {
            char *arg = strchr(line, ' ');
            if (arg) { *arg++ = 0; while (*arg == ' ') arg++; }
            if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
            else if (!strcmp(line, "/help")) chat_print_commands(stdout);
            else if (!strcmp(line, "/think")) { a->o.think = DS4_THINK_HIGH; printf("thinking: high\n"); }
            else if (!strcmp(line, "/nothink")) { a->o.think = DS4_THINK_NONE; printf("thinking: off\n"); }
            else if (!strcmp(line, "/think-max")) {
                a->o.think = DS4_THINK_MAX;
                if (ds4_session_ctx_size(a->s) < DS4_THINK_MAX_MIN_CTX)
                    printf("thinking: max needs /ctx %d or more; using high until then\n", DS4_THINK_MAX_MIN_CTX);
                else printf("thinking: max (applies from the next new conversation: /clear)\n");
            }
            else if (!strcmp(line, "/clear")) {
                if (a->kv) kv_save(a, DS4_KV_EVICT);
                ds4_session_reset(a->s);
                a->turns = 0;
                printf("new conversation\n");
            }
            else if (!strcmp(line, "/ctx")) {
                char *end = NULL;
                long v = arg ? strtol(arg, &end, 10) : 0;
                if (!arg || *end || v < 16 || v > (1 << 24)) printf("usage: /ctx N (16 .. 16777216)\n");
                else if (resize_ctx(a, (int)v) == 0) printf("context: %ld tokens\n", v);
            }
            else if (!strcmp(line, "/read")) {
                if (!arg || !*arg) { printf("usage: /read FILE [text]\n"); continue; }
                char *rest = strchr(arg, ' ');
                if (rest) { *rest++ = 0; }
                ds4_buf file = { 0 };
                if (ds4_buf_read_file(&file, arg)) {
                    printf("cannot read %s: %s\n", arg, strerror(errno));
                    ds4_buf_free(&file);
                    continue;
                }
                if (rest && *rest) { ds4_buf_puts(&file, "\n\n"); ds4_buf_puts(&file, rest); }
                input_busy_begin(in);
                chat_turn(a, file.p ? file.p : "", file.n);
                input_busy_end(in);
                ds4_buf_free(&file);
                if (ds4_model_broken(a->m)) break;
            }
            else printf("unknown command %s (/help)\n", line);
            fflush(stdout);
            continue;
        }
        input_busy_begin(in);
        chat_turn(a, msg.p, msg.n);
        input_busy_end(in);
        /* the weights are no longer the file's (ds4.h): nothing more can
         * be evaluated; chat_turn printed why */
        if (ds4_model_broken(a->m)) break;
    }
    ds4_buf_free(&msg);
    input_close(in);
    return ds4_model_broken(a->m) ? -1 : 0;
}
