/*
 * kvdisk.c -- see kvdisk.h.
 *
 * The policy, with the CLI's ds4_kv_policy arithmetic (ds4_eval stops the
 * evaluation exactly at each point and calls kvdisk_save_cb):
 *   - lookup: ds4_session_sync_begin (src/store/sync.c) restores the
 *     longest saved state the prompt can continue when the live session
 *     (or a RAM checkpoint) does not already cover more of it; this file
 *     gives it the store, the minimum and the callbacks below;
 *   - saves: cold (a prompt evaluated from scratch is split at its cold
 *     point), continued (prefill and generation stop exactly at each
 *     frontier), evict (before a request that does not continue the live
 *     session replaces it), shutdown (after the last job).  Each file gets
 *     the tool-call ids whose exact DSML its text holds, so a client that
 *     comes back after a restart still replays them exactly;
 *   - tool ids the in-memory tool memory does not know are looked up in the
 *     files (kvdisk_finder, on the connection thread) before the prompt is
 *     rendered, so it is rendered and tokenized once.
 * A failed save (full disk) is logged once per run of failures and counted;
 * the request goes on.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvdisk.h"
#include "metrics.h"
#include "toolmem.h"

/* The tool section of a cache file maps an id to its exact DSML; the
 * reasoning before a block is stored as one more entry under the id plus
 * this suffix (our ids are base62, so it cannot clash), so that a client
 * that drops reasoning_content gets the prompt the model saw after a
 * restart too, as it does from the tool memory. */
#define KV_REASONING_SUFFIX "/reasoning"

typedef struct {
    char *id;
    char *dsml;
    size_t dsml_len;
    char *reasoning;          /* NULL = none */
    size_t reasoning_len;
} live_tool;

/* What the cache knows of one live session (ds4-server --parallel has
 * several; kvdisk_select says which one the calls are about). */
struct kvdisk_live {
    ds4_session *s;
    int saved_n;         /* length of the live session when last saved or
                          * restored: the same state is not written twice */
    live_tool *tools;    /* tool calls whose exact DSML the live session
                          * (or the prompt being evaluated) holds */
    int n_tools, cap_tools;
};

struct kvdisk {
    server_ctx *srv;
    kvdisk_live own;     /* the session given to kvdisk_open */
    kvdisk_live *cur;    /* the one the calls are about */
    ds4_kvstore *kv;
    ds4_kv_policy pol;
    int save_failing;    /* the last save failed (logged once per run) */
    uint64_t saves[6];   /* by ds4_kv_reason */
    ds4_buf live;        /* scratch: the text of the live session */
};

/* ------------------------------------------------------------------------ */

static void live_clear(kvdisk_live *l) {
    for (int i = 0; i < l->n_tools; i++) {
        free(l->tools[i].id);
        free(l->tools[i].dsml);
        free(l->tools[i].reasoning);
    }
    l->n_tools = 0;
}

static void tools_clear(kvdisk *w) { live_clear(w->cur); }

kvdisk_live *kvdisk_live_new(ds4_session *s) {
    kvdisk_live *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->s = s;
    l->saved_n = -1;
    return l;
}

void kvdisk_live_free(kvdisk_live *l) {
    if (!l) return;
    live_clear(l);
    free(l->tools);
    free(l);
}

void kvdisk_select(kvdisk *w, kvdisk_live *l) { w->cur = l ? l : &w->own; }

void kvdisk_tools_add(kvdisk *w, const char *id, const char *dsml, size_t dsml_len,
                      const char *reasoning, size_t reasoning_len) {
    if (!id || !dsml) return;
    for (int i = 0; i < w->cur->n_tools; i++)
        if (!strcmp(w->cur->tools[i].id, id)) return;
    if (w->cur->n_tools == w->cur->cap_tools) {
        int nc = w->cur->cap_tools ? 2 * w->cur->cap_tools : 16;
        live_tool *t = realloc(w->cur->tools, (size_t)nc * sizeof *t);
        if (!t) return;
        w->cur->tools = t;
        w->cur->cap_tools = nc;
    }
    live_tool *t = &w->cur->tools[w->cur->n_tools];
    memset(t, 0, sizeof *t);
    t->id = strdup(id);
    t->dsml = strndup(dsml, dsml_len);
    t->dsml_len = dsml_len;
    if (reasoning && reasoning_len) {
        t->reasoning = strndup(reasoning, reasoning_len);
        t->reasoning_len = reasoning_len;
    }
    if (!t->id || !t->dsml) {
        free(t->id); free(t->dsml); free(t->reasoning);
        return;
    }
    w->cur->n_tools++;
}

/* The exactly replayed tool calls of a request's history: its prompt holds
 * their DSML, and so will every state saved while it is evaluated. */
void kvdisk_tools_from_request(kvdisk *w, const request *rq) {
    tools_clear(w);
    for (int i = 0; i < rq->n_msgs; i++) {
        const ds4_message *m = &rq->msgs[i];
        if (m->role != DS4_ROLE_ASSISTANT || !m->dsml_exact) continue;
        for (int k = 0; k < m->n_tool_calls; k++)
            kvdisk_tools_add(w, m->tool_calls[k].id, m->dsml_exact, strlen(m->dsml_exact),
                      m->reasoning, m->reasoning ? m->reasoning_len : 0);
    }
}

/* ------------------------------------------------------------------------ */
/* disk KV cache                                                             */
/* ------------------------------------------------------------------------ */

static void kv_publish(kvdisk *w) {
    ds4_kvstore_stats st;
    ds4_kvstore_get_stats(w->kv, &st);
    metrics_kv(w->srv->m, &st, w->saves);
}

/* Where a state's text holds a tool-call block: 1 = all of it, at or after
 * byte `from` (*end = where it ends); 2 = the text ends inside it -- a
 * generated block's last token is never evaluated (the turn ends there),
 * yet the next prompt replays the whole block after that state, so its id
 * belongs with it (half the block at least, so that a text ending in
 * "\n\n" does not claim every block); 0 = not held. */
static int holds_block(const char *text, size_t n, size_t from, const char *blk, size_t len,
                       size_t *end) {
    if (!text || !len || from > n) return 0;
    const char *hit = memmem(text + from, n - from, blk, len);
    if (hit) {
        *end = (size_t)(hit - text) + len;
        return 1;
    }
    for (size_t k = len - 1 < n - from ? len - 1 : n - from; k >= len / 2 && k > 0; k--)
        if (!memcmp(text + n - k, blk, k)) return 2;
    return 0;
}

/* Save the live session for `why` (the policy's minimum and a state that
 * is already on disk are skipped).  Failures are logged once per run of
 * failures and otherwise ignored: the request is served without the cache. */
void kvdisk_save(kvdisk *w, ds4_kv_reason why) {
    int n = ds4_session_n_tokens(w->cur->s);
    if (n < w->pol.min_tokens || n == w->cur->saved_n) return;
    /* the tool entries whose DSML this state's text holds */
    w->live.n = 0;
    if (w->cur->n_tools) ds4_detokenize(w->srv->tok, ds4_session_tokens(w->cur->s), (size_t)n, &w->live);
    ds4_kv_tool *kt = calloc((size_t)(2 * w->cur->n_tools + 1), sizeof *kt);
    char **rid = calloc((size_t)(w->cur->n_tools + 1), sizeof *rid);
    int nk = 0, nr = 0;
    /* the entries are in conversation order, so each block is searched
     * after the previous one: one pass over the text in all; the ids of
     * one block share its text and its answer */
    size_t from = 0;
    int held = 0;
    for (int i = 0; kt && rid && i < w->cur->n_tools; i++) {
        const live_tool *t = &w->cur->tools[i];
        const live_tool *p = i ? &w->cur->tools[i - 1] : NULL;
        if (!p || p->dsml_len != t->dsml_len || memcmp(p->dsml, t->dsml, t->dsml_len)) {
            if (held == 2) break;      /* the text ended inside the previous block */
            held = holds_block(w->live.p, w->live.n, from, t->dsml, t->dsml_len, &from);
        }
        if (!held) break;
        kt[nk++] = (ds4_kv_tool){ t->id, t->dsml, t->dsml_len };
        if (t->reasoning && (rid[nr] = malloc(strlen(t->id) + sizeof KV_REASONING_SUFFIX))) {
            strcpy(rid[nr], t->id);
            strcat(rid[nr], KV_REASONING_SUFFIX);
            kt[nk++] = (ds4_kv_tool){ rid[nr], t->reasoning, t->reasoning_len };
            nr++;
        }
    }
    ds4_kvstore_stats before;
    ds4_kvstore_get_stats(w->kv, &before);
    double t0 = util_now();
    char *err = NULL;
    int rc = ds4_kvstore_save(w->kv, w->cur->s, why, kt, nk, &err);
    if (rc != DS4_OK) {
        if (!w->save_failing)
            log_msg("disk KV cache: %s (%s state of %d tokens); requests are served without "
                    "saving until a save succeeds (ds4_kv_disk_write_errors_total counts them)",
                    err ? err : ds4_strerror(rc), ds4_kv_reason_name(why), n);
        w->save_failing = 1;
    } else {
        if (w->save_failing) log_msg("disk KV cache: saving works again");
        w->save_failing = 0;
        w->cur->saved_n = n;
        ds4_kvstore_stats after;
        ds4_kvstore_get_stats(w->kv, &after);
        if (after.saves > before.saves) {
            w->saves[why]++;
            char te[48] = "";
            if (nk) snprintf(te, sizeof te, ", %d tool entr%s", nk, nk == 1 ? "y" : "ies");
            log_msg("disk KV cache: saved %d tokens (%s%s), %.1f MiB in %.0f ms", n,
                    ds4_kv_reason_name(why), te,
                    (after.save_bytes - before.save_bytes) / 1048576.0, (util_now() - t0) * 1e3);
        }
    }
    free(err);
    for (int i = 0; i < nr; i++) free(rid[i]);
    free(rid);
    free(kt);
    kv_publish(w);
}

/* The calls of a DSML block as the parser reads them (what the client got). */
typedef struct {
    const ds4_tool_call *calls;
    int n, at, ok;
    ds4_buf args;
} dsml_check;

static void dsml_check_cb(void *ud, const ds4_dsml_event *ev) {
    dsml_check *c = ud;
    switch (ev->kind) {
    case DS4_DSML_CALL_BEGIN:
        if (c->at >= c->n || !c->calls[c->at].name || strlen(c->calls[c->at].name) != ev->len ||
            memcmp(c->calls[c->at].name, ev->text, ev->len))
            c->ok = 0;
        c->args.n = 0;
        break;
    case DS4_DSML_ARGS_DELTA:
        ds4_buf_append(&c->args, ev->text, ev->len);
        break;
    case DS4_DSML_CALL_END:
        if (c->ok && c->at < c->n) {
            const char *got = c->args.n ? c->args.p : "{}";
            const char *sent = c->calls[c->at].arguments ? c->calls[c->at].arguments : "";
            if (!toolmem_args_equal(sent, got)) c->ok = 0;
        }
        c->at++;
        break;
    case DS4_DSML_ERROR:
        c->ok = 0;
        break;
    default:
        break;
    }
}

/* 1 when the block holds exactly these calls: same count, names in order,
 * JSON-equal arguments.  A client that changed a call but kept its id must
 * get the canonical rendering, never stale bytes. */
static int dsml_matches(const char *blk, size_t len, const ds4_tool_call *calls, int n) {
    dsml_check c = { calls, n, 0, 1, { 0 } };
    ds4_dsml *p = ds4_dsml_new(dsml_check_cb, &c);
    if (!p) return 0;
    ds4_dsml_feed(p, blk, len);
    if (ds4_dsml_finish(p) != DS4_OK) c.ok = 0;
    ds4_dsml_free(p);
    ds4_buf_free(&c.args);
    return c.ok && c.at == n;
}

/* Assistant tool-call turns the tool memory did not know (a restart, or
 * its LRU cap): the files may hold their exact DSML (and the reasoning
 * before it).  Every id of the turn must give the same block, and the
 * block must hold the calls the client sent.  Returns the turns found. */
static int resolve_tools(ds4_kvstore *kv, server_ctx *srv, request *rq) {
    int found = 0;
    ds4_buf b = { 0 }, o = { 0 };
    for (int i = 0; i < rq->n_msgs; i++) {
        ds4_message *m = &rq->msgs[i];
        if (m->role != DS4_ROLE_ASSISTANT || m->n_tool_calls <= 0 || m->dsml_exact) continue;
        int ok = 1;
        for (int k = 0; k < m->n_tool_calls; k++) ok = ok && m->tool_calls[k].id;
        b.n = 0;
        if (!ok || !ds4_kvstore_tool_dsml(kv, m->tool_calls[0].id, &b) || !b.n) continue;
        for (int k = 1; ok && k < m->n_tool_calls; k++) {
            o.n = 0;
            ok = ds4_kvstore_tool_dsml(kv, m->tool_calls[k].id, &o) && o.n == b.n &&
                 !memcmp(o.p, b.p, b.n);
        }
        if (!ok || !dsml_matches(b.p, b.n, m->tool_calls, m->n_tool_calls)) continue;
        m->dsml_exact = request_strdup(rq, b.p, b.n);
        if (!m->dsml_exact) continue;
        if (!m->reasoning_len) {
            size_t il = strlen(m->tool_calls[0].id);
            char *rid = malloc(il + sizeof KV_REASONING_SUFFIX);
            o.n = 0;
            if (rid) {
                memcpy(rid, m->tool_calls[0].id, il);
                memcpy(rid + il, KV_REASONING_SUFFIX, sizeof KV_REASONING_SUFFIX);
                if (ds4_kvstore_tool_dsml(kv, rid, &o) && o.n) {
                    m->reasoning = request_strdup(rq, o.p, o.n);
                    m->reasoning_len = m->reasoning ? o.n : 0;
                }
                free(rid);
            }
        }
        /* later turns find it in memory */
        const char **ids = calloc((size_t)m->n_tool_calls, sizeof *ids);
        const char **names = calloc((size_t)m->n_tool_calls, sizeof *names);
        const char **args = calloc((size_t)m->n_tool_calls, sizeof *args);
        if (ids && names && args) {
            for (int k = 0; k < m->n_tool_calls; k++) {
                ids[k] = m->tool_calls[k].id;
                names[k] = m->tool_calls[k].name;
                args[k] = m->tool_calls[k].arguments;
            }
            toolmem_put(srv->tm, ids, names, args, m->n_tool_calls, b.p, b.n,
                        m->reasoning, m->reasoning ? m->reasoning_len : 0);
        }
        free(ids); free(names); free(args);
        found++;
    }
    ds4_buf_free(&b);
    ds4_buf_free(&o);
    rq->replay_exact += found;
    rq->replay_canonical -= found;
    if (found)
        log_msg("disk KV cache: exact DSML of %d tool-call turn%s found in the cache files", found,
                found == 1 ? "" : "s");
    return found;
}

/* The connection threads' view of the files: its own store handle (the
 * worker's handle is the worker's alone, and a store handle is not
 * thread-safe), one lookup at a time.  Several handles on one directory
 * are what the store is made for (several processes share one). */
static ds4_kvstore *open_store(server_ctx *srv, char **err) {
    ds4_kvstore_params kp;
    ds4_kvstore_params_default(&kp);
    kp.dir = srv->cfg.kv_dir;
    kp.space_bytes = srv->cfg.kv_space_mb << 20;
    kp.allow_quant_variants = srv->cfg.kv_allow_variants;
    return ds4_kvstore_open(srv->model, &kp, err);
}

struct kvdisk_finder {
    server_ctx *srv;
    ds4_kvstore *kv;
    pthread_mutex_t mu;
};

kvdisk_finder *kvdisk_finder_open(server_ctx *srv, char **err) {
    kvdisk_finder *f = calloc(1, sizeof *f);
    if (!f) { if (err) *err = strdup("out of memory"); return NULL; }
    f->kv = open_store(srv, err);
    if (!f->kv) { free(f); return NULL; }
    f->srv = srv;
    pthread_mutex_init(&f->mu, NULL);
    return f;
}

void kvdisk_finder_close(kvdisk_finder *f) {
    if (!f) return;
    ds4_kvstore_close(f->kv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

int kvdisk_finder_resolve(kvdisk_finder *f, request *rq) {
    pthread_mutex_lock(&f->mu);
    int found = resolve_tools(f->kv, f->srv, rq);
    pthread_mutex_unlock(&f->mu);
    return found;
}


/* ds4_session_sync_begin's callbacks for the selected session: save it before a
 * prompt replaces it, forget what was saved when it is reset or rewound,
 * and a restored state is the one last saved (not written again). */
static void sync_evict(void *ud) { kvdisk_save(ud, DS4_KV_EVICT); }
static void sync_replaced(void *ud) { kvdisk_session_replaced(ud); }
static void sync_restored(void *ud, int n, size_t used, double seconds) {
    kvdisk *w = ud;
    w->cur->saved_n = n;
    log_msg("disk KV cache: restored %d tokens (%zu bytes of the prompt) in %.0f ms", n, used,
            seconds * 1e3);
}
static void sync_log(void *ud, const char *line) { (void)ud; log_msg("%s", line); }

void kvdisk_sync_params(kvdisk *w, ds4_sync_params *p) {
    p->store = w->kv;
    p->store_min_tokens = w->pol.min_tokens;
    p->evict = sync_evict;
    p->replaced = sync_replaced;
    p->restored = sync_restored;
    p->log = sync_log;
    p->ud = w;
}

void kvdisk_publish(kvdisk *w) { kv_publish(w); }

kvdisk *kvdisk_open(server_ctx *srv, ds4_session *s, char **err) {
    kvdisk *w = calloc(1, sizeof *w);
    if (!w) { if (err) *err = strdup("out of memory"); return NULL; }
    w->srv = srv;
    w->own.s = s;
    w->own.saved_n = -1;
    w->cur = &w->own;
    w->kv = open_store(srv, err);
    if (!w->kv) { free(w); return NULL; }
    w->pol = srv->cfg.kv_policy;
    kv_publish(w);
    ds4_kvstore_stats st;
    ds4_kvstore_get_stats(w->kv, &st);
    log_msg("disk KV cache: %s: %llu files, %.1f MiB (cap %llu MiB); saves: min %d tokens, "
            "cold up to %d, every %d, trim %d, align %d%s", srv->cfg.kv_dir,
            (unsigned long long)st.files, st.bytes / 1048576.0,
            (unsigned long long)srv->cfg.kv_space_mb, w->pol.min_tokens,
            w->pol.cold_max_tokens, w->pol.continued_interval, w->pol.trim_tokens,
            w->pol.align_tokens, srv->cfg.kv_allow_variants ? "; quantization variants allowed" : "");
    return w;
}

void kvdisk_close(kvdisk *w) {
    if (!w) return;
    ds4_kvstore_close(w->kv);
    ds4_buf_free(&w->live);
    live_clear(&w->own);
    free(w->own.tools);
    free(w);
}

const ds4_kv_policy *kvdisk_policy(const kvdisk *w) { return &w->pol; }

void kvdisk_save_cb(void *ud, ds4_kv_reason why) { kvdisk_save(ud, why); }

void kvdisk_session_replaced(kvdisk *w) { w->cur->saved_n = -1; }
