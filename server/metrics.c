/*
 * metrics.c -- see metrics.h.  Prometheus text format 0.0.4: HELP/TYPE lines,
 * counters end in _total, labels in {endpoint="...",status="..."}.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "toolmem.h"

#define MAX_STATUS 16
#define BATCH_BUCKETS 8

typedef struct {
    int status;
    unsigned long long n;
} status_count;

struct metrics {
    pthread_mutex_t mu;
    status_count req[EP__N][MAX_STATUS];
    unsigned long long prompt_tokens, cached_tokens, evaluated_tokens, generated_tokens;
    double prefill_s, decode_s;
    double last_prefill_tps, last_decode_tps;
    unsigned long long jobs, reuse_hits, reuse_misses, text_reuse, retokenized;
    unsigned long long cancelled_client, cancelled_shutdown;
    unsigned long long header_timeouts;
    unsigned long long tool_calls, replay_exact, replay_canonical;
    unsigned long long renders;          /* prompts rendered and tokenized */
    int queue_depth, queue_peak, busy, session_tokens;
    /* --parallel: sessions and the batched steps */
    int sessions, sessions_live, sessions_busy;
    unsigned long long steps, step_items, step_tokens;
    int last_batch;
    unsigned long long batch_hist[BATCH_BUCKETS];
    unsigned long long disk_tokens, disk_retokenized;
    int kv_on;
    ds4_spec_stats spec;
    ds4_kvstore_stats kv;
    uint64_t kv_saves[6];
};

/* batch size histogram buckets: le 1, 2, 4, 8, 16, 32, 64, +Inf */
static const int batch_le[BATCH_BUCKETS - 1] = { 1, 2, 4, 8, 16, 32, 64 };

metrics *metrics_new(void) {
    metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_header_timeouts(metrics *m, int n) {
    pthread_mutex_lock(&m->mu);
    m->header_timeouts += (unsigned long long)n;
    pthread_mutex_unlock(&m->mu);
}

void metrics_request(metrics *m, endpoint ep, int status) {
    if ((unsigned)ep >= EP__N) ep = EP_OTHER;
    pthread_mutex_lock(&m->mu);
    status_count *r = m->req[ep];
    for (int i = 0; i < MAX_STATUS; i++) {
        if (r[i].status == status || r[i].status == 0) {
            r[i].status = status;
            r[i].n++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void metrics_queue(metrics *m, int depth) {
    pthread_mutex_lock(&m->mu);
    m->queue_depth = depth;
    if (depth > m->queue_peak) m->queue_peak = depth;
    pthread_mutex_unlock(&m->mu);
}

void metrics_busy(metrics *m, int busy) {
    pthread_mutex_lock(&m->mu);
    m->busy = busy;
    pthread_mutex_unlock(&m->mu);
}

void metrics_sessions(metrics *m, int total, int live, int busy) {
    pthread_mutex_lock(&m->mu);
    m->sessions = total;
    m->sessions_live = live;
    m->sessions_busy = busy;
    pthread_mutex_unlock(&m->mu);
}

void metrics_step(metrics *m, int items, int tokens) {
    pthread_mutex_lock(&m->mu);
    m->steps++;
    m->step_items += (unsigned long long)items;
    m->step_tokens += (unsigned long long)tokens;
    m->last_batch = items;
    int b = 0;
    while (b < BATCH_BUCKETS - 1 && items > batch_le[b]) b++;
    m->batch_hist[b]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_job_done(metrics *m, const metrics_job *j) {
    pthread_mutex_lock(&m->mu);
    m->jobs++;
    m->prompt_tokens += (unsigned long long)j->prompt_tokens;
    m->cached_tokens += (unsigned long long)j->cached_tokens;
    m->disk_tokens += (unsigned long long)j->disk_tokens;
    if (j->disk_retokenized) m->disk_retokenized++;
    m->evaluated_tokens += (unsigned long long)j->evaluated_tokens;
    m->generated_tokens += (unsigned long long)j->generated_tokens;
    m->prefill_s += j->prefill_s;
    m->decode_s += j->decode_s;
    if (j->evaluated_tokens > 0 && j->prefill_s > 0)
        m->last_prefill_tps = j->evaluated_tokens / j->prefill_s;
    if (j->generated_tokens > 1 && j->decode_s > 0)
        m->last_decode_tps = j->generated_tokens / j->decode_s;
    /* a disk hit is neither (ds4_kv_disk_hits_total counts it) */
    if (j->reuse_hit) m->reuse_hits++;
    else if (!j->disk_tokens) m->reuse_misses++;
    if (j->text_reuse) m->text_reuse++;
    if (j->retokenized) m->retokenized++;
    m->tool_calls += (unsigned long long)j->tool_calls;
    if (j->cancelled == CANCEL_CLIENT) m->cancelled_client++;
    if (j->cancelled == CANCEL_SHUTDOWN) m->cancelled_shutdown++;
    m->session_tokens = j->session_tokens;
    m->spec.passes += j->spec.passes;
    m->spec.drafted += j->spec.drafted;
    m->spec.accepted += j->spec.accepted;
    m->spec.emitted += j->spec.emitted;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tool_replay(metrics *m, int exact, int canonical) {
    if (!exact && !canonical) return;
    pthread_mutex_lock(&m->mu);
    m->replay_exact += (unsigned long long)exact;
    m->replay_canonical += (unsigned long long)canonical;
    pthread_mutex_unlock(&m->mu);
}

void metrics_render_prompt(metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->renders++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_kv(metrics *m, const ds4_kvstore_stats *st, const uint64_t saves_by_reason[6]) {
    pthread_mutex_lock(&m->mu);
    m->kv_on = 1;
    m->kv = *st;
    memcpy(m->kv_saves, saves_by_reason, sizeof m->kv_saves);
    pthread_mutex_unlock(&m->mu);
}

#define COUNTER(name, help, val) \
    ds4_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", \
                   (unsigned long long)(val))
#define GAUGE(name, help, fmt, val) \
    ds4_buf_printf(&b, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", val)

char *metrics_render(metrics *m) {
    ds4_buf b = { 0 };
    size_t tool_ids = g_srv && g_srv->tm ? toolmem_count(g_srv->tm) : 0;
    pthread_mutex_lock(&m->mu);
    ds4_buf_puts(&b, "# HELP ds4_requests_total HTTP requests answered, by endpoint and status.\n"
                     "# TYPE ds4_requests_total counter\n");
    for (int e = 0; e < EP__N; e++)
        for (int i = 0; i < MAX_STATUS && m->req[e][i].status; i++)
            ds4_buf_printf(&b, "ds4_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                           endpoint_label((endpoint)e), m->req[e][i].status, m->req[e][i].n);
    COUNTER("ds4_jobs_total", "Generations run by the inference worker.", m->jobs);
    COUNTER("ds4_http_header_timeouts_total",
            "Connections closed for not sending a complete request line and headers in time.",
            m->header_timeouts);
    COUNTER("ds4_prompt_tokens_total", "Prompt tokens of finished generations.", m->prompt_tokens);
    COUNTER("ds4_prompt_tokens_cached_total",
            "Prompt tokens reused (from the live session or the disk KV cache).",
            m->cached_tokens);
    ds4_buf_printf(&b, "# HELP ds4_prompt_tokens_cached_by_source_total Prompt tokens reused, by "
                   "where the state came from.\n"
                   "# TYPE ds4_prompt_tokens_cached_by_source_total counter\n"
                   "ds4_prompt_tokens_cached_by_source_total{source=\"live\"} %llu\n"
                   "ds4_prompt_tokens_cached_by_source_total{source=\"disk\"} %llu\n",
                   m->cached_tokens - m->disk_tokens, m->disk_tokens);
    COUNTER("ds4_prompt_tokens_evaluated_total", "Prompt tokens evaluated (prefill work).",
            m->evaluated_tokens);
    COUNTER("ds4_generated_tokens_total", "Tokens generated (reasoning included).",
            m->generated_tokens);
    ds4_buf_printf(&b, "# HELP ds4_prefill_seconds_total Time spent in prefill.\n"
                   "# TYPE ds4_prefill_seconds_total counter\nds4_prefill_seconds_total %.6f\n",
                   m->prefill_s);
    ds4_buf_printf(&b, "# HELP ds4_decode_seconds_total Time spent generating.\n"
                   "# TYPE ds4_decode_seconds_total counter\nds4_decode_seconds_total %.6f\n",
                   m->decode_s);
    GAUGE("ds4_prefill_tokens_per_second", "Prefill speed of the last generation with a prefill.",
          "%.3f", m->last_prefill_tps);
    GAUGE("ds4_decode_tokens_per_second", "Decode speed of the last generation.", "%.3f",
          m->last_decode_tps);
    COUNTER("ds4_spec_passes_total", "Speculative verification passes (--lookup, --mtp-draft).", m->spec.passes);
    COUNTER("ds4_spec_drafted_tokens_total", "Draft tokens evaluated in verification passes.",
            m->spec.drafted);
    COUNTER("ds4_spec_accepted_tokens_total", "Draft tokens the model agreed with.", m->spec.accepted);
    GAUGE("ds4_spec_acceptance_ratio", "Accepted / drafted tokens since the start (0 without drafts).",
          "%.4f", m->spec.drafted ? (double)m->spec.accepted / m->spec.drafted : 0.0);
    GAUGE("ds4_spec_tokens_per_pass", "Tokens chosen per verification pass since the start.",
          "%.4f", m->spec.passes ? (double)m->spec.emitted / m->spec.passes : 0.0);
    COUNTER("ds4_session_reuse_hits_total", "Generations that kept a prefix of the live session.",
            m->reuse_hits);
    COUNTER("ds4_session_reuse_misses_total", "Generations that evaluated the prompt from scratch (no live or disk prefix).",
            m->reuse_misses);
    COUNTER("ds4_session_reuse_text_total",
            "Reuse decided by comparing rendered text (only the suffix was tokenized).",
            m->text_reuse);
    COUNTER("ds4_session_reuse_retokenized_total",
            "Text reuse hits where a fresh tokenization would have split the kept text differently.",
            m->retokenized);
    GAUGE("ds4_session_tokens", "Tokens held by the live session.", "%d", m->session_tokens);
    GAUGE("ds4_queue_depth", "Requests waiting for the inference worker.", "%d", m->queue_depth);
    GAUGE("ds4_queue_depth_peak", "Largest queue depth seen.", "%d", m->queue_peak);
    GAUGE("ds4_worker_busy", "1 while the worker runs a generation.", "%d", m->busy);
    GAUGE("ds4_sessions", "Live sessions the server keeps (--parallel).", "%d", m->sessions);
    GAUGE("ds4_sessions_live", "Sessions holding a conversation's KV state.", "%d", m->sessions_live);
    GAUGE("ds4_sessions_busy", "Sessions serving a request now.", "%d", m->sessions_busy);
    COUNTER("ds4_batch_steps_total", "Batched engine steps (--parallel > 1).", m->steps);
    COUNTER("ds4_batch_items_total", "Sessions advanced by those steps, summed.", m->step_items);
    COUNTER("ds4_batch_tokens_total", "Tokens evaluated by those steps (decode and prefill).",
            m->step_tokens);
    GAUGE("ds4_batch_size_last", "Sessions in the last batched step.", "%d", m->last_batch);
    GAUGE("ds4_batch_size_mean", "Mean sessions per batched step.", "%.4f",
          m->steps ? (double)m->step_items / (double)m->steps : 0.0);
    ds4_buf_printf(&b, "# HELP ds4_batch_size Sessions per batched step.\n"
                   "# TYPE ds4_batch_size histogram\n");
    {
        unsigned long long cum = 0;
        for (int i = 0; i < BATCH_BUCKETS; i++) {
            cum += m->batch_hist[i];
            if (i < BATCH_BUCKETS - 1)
                ds4_buf_printf(&b, "ds4_batch_size_bucket{le=\"%d\"} %llu\n", batch_le[i], cum);
            else
                ds4_buf_printf(&b, "ds4_batch_size_bucket{le=\"+Inf\"} %llu\n", cum);
        }
        ds4_buf_printf(&b, "ds4_batch_size_sum %llu\nds4_batch_size_count %llu\n",
                       m->step_items, m->steps);
    }
    ds4_buf_printf(&b, "# HELP ds4_cancelled_total Generations cancelled, by reason.\n"
                   "# TYPE ds4_cancelled_total counter\n"
                   "ds4_cancelled_total{reason=\"client_disconnect\"} %llu\n"
                   "ds4_cancelled_total{reason=\"shutdown\"} %llu\n",
                   m->cancelled_client, m->cancelled_shutdown);
    COUNTER("ds4_tool_calls_total", "Tool calls generated.", m->tool_calls);
    COUNTER("ds4_tool_replay_exact_total",
            "Assistant tool-call turns rendered from the remembered sampled DSML.", m->replay_exact);
    COUNTER("ds4_tool_replay_canonical_total",
            "Assistant tool-call turns rendered canonically (id unknown or changed).",
            m->replay_canonical);
    COUNTER("ds4_prompt_renders_total",
            "Prompts rendered and tokenized: once per request (count_tokens included).",
            m->renders);
    GAUGE("ds4_tool_memory_ids", "Tool-call ids held by the DSML memory.", "%zu", tool_ids);
    GAUGE("ds4_context_size", "Context size of the session in tokens.", "%d",
          g_srv ? g_srv->ctx : 0);
    ds4_weight_pages wp;
    if (g_srv && g_srv->model && !ds4_model_weight_pages(g_srv->model, &wp)) {
        GAUGE("ds4_weights_resident_bytes", "Bytes of the model file mapped in memory by the server.", "%llu",
              (unsigned long long)wp.resident);
        GAUGE("ds4_weights_huge_page_bytes",
              "Of them, bytes mapped with 2 MB pages (4 KB pages cost decode and prefill speed; docs/memory.md, "
              "\"Huge pages\").", "%llu", (unsigned long long)wp.huge);
    }
    ds4_expert_cache_stats xc;
    memset(&xc, 0, sizeof xc);
    if (g_srv && g_srv->model) ds4_model_expert_cache_stats(g_srv->model, &xc);
    if (xc.enabled) {
        GAUGE("ds4_expert_cache_bytes", "Size of the routed-expert cache (--ssd-streaming).", "%llu",
              (unsigned long long)xc.cache_bytes);
        GAUGE("ds4_expert_cache_slots", "Expert slices the cache holds at once.", "%llu",
              (unsigned long long)xc.slots);
        COUNTER("ds4_expert_cache_hits_total", "Routed expert slices found in the cache.", xc.hits);
        COUNTER("ds4_expert_cache_misses_total", "Routed expert slices read from the file.", xc.misses);
        COUNTER("ds4_expert_cache_read_bytes_total", "Bytes read from the model file for experts.",
                xc.bytes_read);
        ds4_buf_printf(&b, "# HELP ds4_expert_cache_read_seconds_total Wall time with at least one "
                       "expert read in flight.\n# TYPE ds4_expert_cache_read_seconds_total counter\n"
                       "ds4_expert_cache_read_seconds_total %.6f\n", xc.read_seconds);
        ds4_buf_printf(&b, "# HELP ds4_expert_cache_wait_seconds_total Time the forward pass waited "
                       "for expert reads.\n# TYPE ds4_expert_cache_wait_seconds_total counter\n"
                       "ds4_expert_cache_wait_seconds_total %.6f\n", xc.wait_seconds);
        GAUGE("ds4_expert_cache_hit_ratio", "Hits / (hits + misses) since the start.", "%.4f",
              xc.hits + xc.misses ? (double)xc.hits / (double)(xc.hits + xc.misses) : 0.0);
    }
    if (m->kv_on) {
        const ds4_kvstore_stats *k = &m->kv;
        COUNTER("ds4_kv_disk_hits_total", "Lookups that restored a state from the disk KV cache.",
                k->hits);
        COUNTER("ds4_kv_disk_retokenized_total",
                "Disk hits whose saved tokens split the text differently from the prompt's "
                "tokenization (only the rest of the text was tokenized).", m->disk_retokenized);
        COUNTER("ds4_kv_disk_misses_total", "Lookups of the disk KV cache that found nothing usable.",
                k->misses);
        ds4_buf_puts(&b, "# HELP ds4_kv_disk_saves_total States written to the disk KV cache, by "
                         "reason.\n# TYPE ds4_kv_disk_saves_total counter\n");
        for (int r = DS4_KV_COLD; r <= DS4_KV_SHUTDOWN; r++)
            ds4_buf_printf(&b, "ds4_kv_disk_saves_total{reason=\"%s\"} %llu\n",
                           ds4_kv_reason_name((uint32_t)r), (unsigned long long)m->kv_saves[r]);
        COUNTER("ds4_kv_disk_save_bytes_total", "Bytes written to the disk KV cache.", k->save_bytes);
        COUNTER("ds4_kv_disk_load_bytes_total", "Bytes of cache files restored.", k->load_bytes);
        COUNTER("ds4_kv_disk_evictions_total", "Cache files removed to respect the space cap.",
                k->evictions);
        COUNTER("ds4_kv_disk_rejected_total",
                "Damaged cache files moved aside (never restored).", k->rejected);
        COUNTER("ds4_kv_disk_write_errors_total", "Saves that failed (nothing was changed on disk).",
                k->write_errors);
        ds4_buf_printf(&b, "# HELP ds4_kv_disk_save_seconds_total Time spent saving states.\n"
                       "# TYPE ds4_kv_disk_save_seconds_total counter\n"
                       "ds4_kv_disk_save_seconds_total %.6f\n", k->save_seconds);
        ds4_buf_printf(&b, "# HELP ds4_kv_disk_load_seconds_total Time spent restoring states.\n"
                       "# TYPE ds4_kv_disk_load_seconds_total counter\n"
                       "ds4_kv_disk_load_seconds_total %.6f\n", k->load_seconds);
        GAUGE("ds4_kv_disk_files", "Cache files in the directory (at the last scan).", "%llu",
              (unsigned long long)k->files);
        GAUGE("ds4_kv_disk_bytes", "Bytes of cache files in the directory (at the last scan).",
              "%llu", (unsigned long long)k->bytes);
    }
    pthread_mutex_unlock(&m->mu);
    /* the appends above are sticky: NULL (a 500) rather than cut metrics */
    if (ds4_buf_failed(&b)) { ds4_buf_free(&b); return NULL; }
    return b.p ? b.p : strdup("");
}
