/*
 * session.c -- sessions: the transcript, its token rendering, and saving /
 * restoring through the disk KV store.
 *
 * Owns: the system prompt, the mapping transcript -> tokens (PROMPT_FORMAT
 * sections 3, 6, 7: tool results are <tool_result> blocks in a user turn,
 * tools are defined so every assistant turn keeps its reasoning), the
 * session files under the sessions directory (ID.json: transcript, token
 * ids, read tracking; kv/: the KV states, one per session, in the disk KV
 * store format, with the exact DSML of the tool calls in their tool
 * section), where that directory is (per user and working directory, see
 * ag_sessions_locate; DIR/.ds4/sessions of older versions read only),
 * /list, restoring a session exactly (no prefill), and evaluating tokens
 * into the live state (ag_prefill: the prefill compaction, a restore that
 * must re-evaluate and the model turn share).
 * Must not: sample, run tools, or draw the screen beyond one-line notes.
 *
 * Tokenization: markers are pushed as ids and the text between them is
 * tokenized on its own.  User text and tool output are tokenized in plain
 * mode, so a file that contains "<｜User｜>" cannot forge a turn; the
 * model's own text is tokenized with special tokens recognised (that is how
 * the model writes </think> and ｜DSML｜).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "base/afile.h"

static const char SYSTEM_PROMPT[] =
    "You are ds4-agent, a coding agent running on the user's machine. You work in the "
    "directory %s: every relative path is relative to it and file tools cannot leave it.\n"
    "Work step by step: look at the relevant files (list, search, read) before changing them, "
    "make small precise changes (edit replaces one exact, unique piece of text; write creates "
    "or replaces a whole file), and check your work by running commands (bash), e.g. the build "
    "and the tests. Tool results come back inside <tool_result> blocks. The user may decline a "
    "call: then do not insist, ask or try another way.\n"
    "When the task is done, or you need the user, answer in plain text without calling a tool: "
    "say briefly what you did and what you found.";

void ag_msg_free(ag_msg *m) {
    free(m->text);
    free(m->reasoning);
    free(m->dsml);
    for (int i = 0; i < m->n_calls; i++) {
        free(m->calls[i].name);
        free(m->calls[i].args);
        free(m->calls[i].result);
        free(m->calls[i].summary);
    }
    free(m->calls);
    memset(m, 0, sizeof *m);
}

ag_msg *ag_sess_push(ag_sess *s, ag_kind kind) {
    if (s->n_msgs == s->cap_msgs) {
        int nc = s->cap_msgs ? 2 * s->cap_msgs : 16;
        ag_msg *v = realloc(s->msgs, (size_t)nc * sizeof *v);
        if (!v) return NULL;
        s->msgs = v;
        s->cap_msgs = nc;
    }
    ag_msg *m = &s->msgs[s->n_msgs++];
    memset(m, 0, sizeof *m);
    m->kind = kind;
    return m;
}

void ag_sess_free(ag_sess *s) {
    if (!s) return;
    for (int i = 0; i < s->n_msgs; i++) ag_msg_free(&s->msgs[i]);
    free(s->msgs);
    for (int i = 0; i < s->n_seen; i++) free(s->seen[i].path);
    free(s->seen);
    free(s->title);
    ds4_buf_free(&s->saved_text);
    free(s);
}

/* ------------------------------------------------------------------ */
/* Where sessions live                                                 */
/* ------------------------------------------------------------------ */

/* Sessions are per-user state (megabytes of KV state, transcripts that
 * may quote secrets), not part of the project: they live under
 * $XDG_STATE_HOME/ds4 (default ~/.local/state/ds4), one directory per
 * working directory, agent/<name>-<hash of its real path>/sessions, so
 * two checkouts called "src" never mix and a symbolic link to a directory
 * finds that directory's sessions.  Everything is created 0700. */

/* mkdir -p with mode 0700 for what it creates (existing parts keep theirs) */
static int mkdirs_private(const char *path) {
    char p[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof p) { errno = ENAMETOOLONG; return -1; }
    memcpy(p, path, n + 1);
    for (char *q = p + 1; *q; q++)
        if (*q == '/') {
            *q = 0;
            if (mkdir(p, 0700) && errno != EEXIST) return -1;
            *q = '/';
        }
    if (mkdir(p, 0700) && errno != EEXIST) return -1;
    struct stat st;
    if (stat(p, &st)) return -1;
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

/* The state directory's name for a working directory: its name (what is
 * safe in a file name, at most 32 bytes) and a hash of its real path. */
static void dir_key(const char *root, char *out, size_t cap) {
    const char *b = strrchr(root, '/');
    b = b ? b + 1 : root;
    char name[33];
    size_t k = 0;
    for (; *b && k < sizeof name - 1; b++) {
        unsigned char c = (unsigned char)*b;
        int safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_' || (c == '.' && k > 0);
        name[k++] = safe ? (char)c : '_';
    }
    name[k] = 0;
    /* FNV-1a 64 here, not ag_hash: the name must never change with it */
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *q = (const unsigned char *)root; *q; q++) { h ^= *q; h *= 0x100000001b3ull; }
    snprintf(out, cap, "%s-%016llx", k ? name : "root", (unsigned long long)h);
}

static int has_sessions(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int n = 0;
    while (!n && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n = l > 5 && !strcmp(de->d_name + l - 5, ".json");
    }
    closedir(d);
    return n;
}

int ag_sessions_locate(agent *a) {
    char p[PATH_MAX];
    if (a->sessions_opt) {
        snprintf(p, sizeof p, "%s", a->sessions_opt);
    } else {
        /* XDG: a relative XDG_STATE_HOME is ignored */
        const char *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
        char key[64];
        dir_key(a->root, key, sizeof key);
        int n;
        if (x && x[0] == '/') n = snprintf(p, sizeof p, "%s/ds4/agent/%s/sessions", x, key);
        else if (h && h[0] == '/') n = snprintf(p, sizeof p, "%s/.local/state/ds4/agent/%s/sessions", h, key);
        else {
            fprintf(stderr, "ds4-agent: no place for the sessions: neither XDG_STATE_HOME nor HOME is "
                    "an absolute path; set one of them, or use --sessions DIR\n");
            return -1;
        }
        if (n < 0 || (size_t)n >= sizeof p) {
            fprintf(stderr, "ds4-agent: the session directory's path is too long; use --sessions DIR\n");
            return -1;
        }
    }
    if (mkdirs_private(p)) {
        fprintf(stderr, "ds4-agent: cannot create the session directory %s: %s%s\n", p, strerror(errno),
                a->sessions_opt ? "" : " (set XDG_STATE_HOME, or use --sessions DIR)");
        return -1;
    }
    char kv[PATH_MAX + 8];
    snprintf(kv, sizeof kv, "%s/kv", p);
    if (mkdirs_private(kv)) {
        fprintf(stderr, "ds4-agent: cannot create %s: %s\n", kv, strerror(errno));
        return -1;
    }
    a->sessions_dir = strdup(p);
    a->kv_dir = strdup(kv);
    if (!a->sessions_dir || !a->kv_dir) { fprintf(stderr, "ds4-agent: out of memory\n"); return -1; }
    /* older versions kept the sessions in the project: still listed and
     * resumable from there, never written */
    char old[PATH_MAX + 32];
    snprintf(old, sizeof old, "%s/.ds4/sessions", a->root);
    if (!a->sessions_opt && has_sessions(old)) a->legacy_dir = strdup(old);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Tokens                                                              */
/* ------------------------------------------------------------------ */

int ag_sys_tokens(agent *a) {
    ds4_think think = a->think;
    if (think == DS4_THINK_MAX && a->ctx < DS4_THINK_MAX_MIN_CTX) think = DS4_THINK_HIGH;
    ds4_buf sys = { 0 }, text = { 0 };
    ds4_buf_printf(&sys, SYSTEM_PROMPT, a->root);
    ds4_message m;
    memset(&m, 0, sizeof m);
    m.role = DS4_ROLE_SYSTEM;
    m.content = sys.p;
    m.content_len = sys.n;
    m.tools_json = ag_tools_json();
    ds4_render_opts ro = { .think = think, .keep_all_reasoning = 1, .format = ds4_model_format(a->m) };
    char *err = NULL;
    int rc = ds4_render_chat(&m, 1, &ro, &text, &err);
    if (!rc && ro.format == DS4_FORMAT_GLM) {
        /* GLM's renderer writes the generation prompt after a lone system
         * message; the turns open their assistant themselves */
        static const char *const gp[] = { "<|assistant|><think></think>", "<|assistant|><think>" };
        for (int i = 0; i < 2; i++) {
            size_t l = strlen(gp[i]);
            if (text.n >= l && !memcmp(text.p + text.n - l, gp[i], l)) { text.n -= l; break; }
        }
    }
    if (rc) {
        fprintf(stderr, "ds4-agent: %s\n", err ? err : "cannot render the system prompt");
        free(err);
    } else {
        a->sys_ids.n = 0;
        rc = ds4_tokenize(a->tok, text.p, text.n, DS4_TOK_SPECIAL, &a->sys_ids);
        a->sys_think = think;
    }
    ds4_buf_free(&sys);
    ds4_buf_free(&text);
    return rc;
}

/* ds4's server escapes a literal </tool_result> in tool output the same
 * way, so a result cannot close its own block. */
static void put_result(ds4_buf *b, const char *r) {
    ds4_buf_puts(b, "<tool_result>");
    for (const char *p = r ? r : ""; *p; ) {
        const char *q = strstr(p, "</tool_result>");
        if (!q) { ds4_buf_puts(b, p); break; }
        ds4_buf_append(b, p, (size_t)(q - p));
        ds4_buf_puts(b, "&lt;/tool_result>");
        p = q + 14;
    }
    ds4_buf_puts(b, "</tool_result>");
}

void ag_open_assistant(agent *a, int think, ds4_tokens *out) {
    ds4_tokens_push(out, a->ids->assistant);
    if (think) {
        ds4_tokens_push(out, a->ids->think);
    } else if (ds4_model_format(a->m) == DS4_FORMAT_GLM) {
        /* GLM answers without reasoning after an empty "<think></think>" */
        ds4_tokens_push(out, a->ids->think);
        ds4_tokens_push(out, a->ids->think_end);
    } else {
        ds4_tokens_push(out, a->ids->think_end);
    }
}

/* GLM's turns (docs/PROMPT_FORMAT.md §12): "<|user|>" + text, each tool
 * result "<|observation|><tool_response>" + text + "</tool_response>",
 * "<|assistant|><think>R</think>" + content + the exact calls; no end token
 * after an assistant turn (the next turn's marker follows it, as the model
 * stopped at it).  Markers are ids, the user's and tools' text plain. */
static int render_from_glm(agent *a, const ag_sess *s, int from, int open_assistant, ds4_tokens *out) {
    const ds4_special_ids *sp = a->ids;
    const ds4_tokenizer *tk = a->tok;
    const int32_t obs = ds4_tok_lookup(tk, "<|observation|>", 15);
    const int32_t tr = ds4_tok_lookup(tk, "<tool_response>", 15);
    const int32_t tre = ds4_tok_lookup(tk, "</tool_response>", 16);
    int rc = 0, last_user = 0;
    for (int i = from; i < s->n_msgs && !rc; i++) {
        const ag_msg *m = &s->msgs[i];
        if (m->kind == AG_USER) {
            ds4_tokens_push(out, sp->user);
            rc = ds4_tokenize(tk, m->text ? m->text : "", m->text ? strlen(m->text) : 0, DS4_TOK_PLAIN, out);
            last_user = 1;
            continue;
        }
        if (m->kind == AG_TOOLS) {
            for (int k = 0; k < m->n_calls && !rc; k++) {
                const char *r = m->calls[k].result ? m->calls[k].result : "";
                ds4_tokens_push(out, obs);
                ds4_tokens_push(out, tr);
                rc = ds4_tokenize(tk, r, strlen(r), DS4_TOK_PLAIN, out);
                ds4_tokens_push(out, tre);
            }
            last_user = 1;
            continue;
        }
        last_user = 0;
        ag_open_assistant(a, m->think, out);
        ds4_buf t = { 0 };
        if (m->think) {
            ds4_buf_puts(&t, m->reasoning ? m->reasoning : "");
            ds4_buf_puts(&t, "</think>");
        }
        ds4_buf_puts(&t, m->text ? m->text : "");
        if (m->dsml) ds4_buf_puts(&t, m->dsml);
        if (t.n) rc = ds4_tokenize(tk, t.p, t.n, DS4_TOK_SPECIAL, out);
        ds4_buf_free(&t);
    }
    if (!rc && last_user && open_assistant) ag_open_assistant(a, a->think != DS4_THINK_NONE, out);
    return rc;
}

int ag_render_from(agent *a, const ag_sess *s, int from, int open_assistant, ds4_tokens *out) {
    if (ds4_model_format(a->m) == DS4_FORMAT_GLM) return render_from_glm(a, s, from, open_assistant, out);
    const ds4_special_ids *sp = a->ids;
    ds4_buf body = { 0 };
    int in_user = 0, rc = 0;
    for (int i = from; i < s->n_msgs && !rc; i++) {
        const ag_msg *m = &s->msgs[i];
        if (m->kind == AG_USER || m->kind == AG_TOOLS) {
            if (!in_user) { ds4_tokens_push(out, sp->user); body.n = 0; if (body.p) body.p[0] = 0; }
            else ds4_buf_puts(&body, "\n\n");
            in_user = 1;
            if (m->kind == AG_USER) ds4_buf_puts(&body, m->text ? m->text : "");
            else
                for (int k = 0; k < m->n_calls; k++) {
                    if (k) ds4_buf_puts(&body, "\n\n");
                    put_result(&body, m->calls[k].result);
                }
            continue;
        }
        /* assistant: close the user turn, opening it in its mode */
        if (in_user) {
            rc = ds4_tokenize(a->tok, body.p ? body.p : "", body.n, DS4_TOK_PLAIN, out);
            ds4_tokens_push(out, sp->assistant);
            ds4_tokens_push(out, m->think ? sp->think : sp->think_end);
            in_user = 0;
        }
        ds4_buf t = { 0 };
        if (m->think) {
            ds4_buf_puts(&t, m->reasoning ? m->reasoning : "");
            ds4_buf_puts(&t, "</think>");
        }
        ds4_buf_puts(&t, m->text ? m->text : "");
        if (m->dsml) ds4_buf_puts(&t, m->dsml);
        if (t.n) rc = ds4_tokenize(a->tok, t.p, t.n, DS4_TOK_SPECIAL, out);
        ds4_buf_free(&t);
        ds4_tokens_push(out, sp->eos);
    }
    if (in_user && !rc) {
        rc = ds4_tokenize(a->tok, body.p ? body.p : "", body.n, DS4_TOK_PLAIN, out);
        if (open_assistant) {
            ds4_tokens_push(out, sp->assistant);
            ds4_tokens_push(out, a->think != DS4_THINK_NONE ? sp->think : sp->think_end);
        }
    }
    ds4_buf_free(&body);
    return rc;
}

void ag_sess_new(agent *a) {
    ag_sess *s = calloc(1, sizeof *s);
    if (!s) { fprintf(stderr, "ds4-agent: out of memory\n"); exit(1); }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    unsigned r = (unsigned)((uint64_t)(ds4_now() * 1e6) & 0xffffffffu) ^ ((unsigned)getpid() << 16);
    r = r * 2654435761u;
    snprintf(s->id, sizeof s->id, "%04d%02d%02d-%02d%02d%02d-%04x", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (r >> 12) & 0xffff);
    s->created = s->last_used = (double)now;
    ag_sess_free(a->cur);
    a->cur = s;
    ds4_session_reset(a->s);
}

/* ------------------------------------------------------------------ */
/* Saving                                                              */
/* ------------------------------------------------------------------ */

/* jansson wants valid UTF-8: model output may not be, so bytes that are
 * not are replaced (the KV state keeps the exact tokens). */
static json_t *jtext(const char *s) {
    if (!s) return json_null();
    json_t *v = json_string(s);
    if (v) return v;
    size_t n = strlen(s);
    ds4_buf b = { 0 };
    for (size_t i = 0; i < n; ) {
        unsigned char c = (unsigned char)s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
        if (ok) { ds4_buf_append(&b, s + i, (size_t)len); i += (size_t)len; }
        else { ds4_buf_puts(&b, "\xef\xbf\xbd"); i++; }
    }
    v = json_string(b.p ? b.p : "");
    ds4_buf_free(&b);
    return v ? v : json_string("");
}

static json_t *msg_json(const ag_msg *m) {
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(m->kind == AG_USER ? "user" : m->kind == AG_TOOLS ? "tools" : "assistant"));
    if (m->text) json_object_set_new(o, "text", jtext(m->text));
    if (m->reasoning) json_object_set_new(o, "reasoning", jtext(m->reasoning));
    if (m->dsml) json_object_set_new(o, "dsml", jtext(m->dsml));
    if (m->kind == AG_ASSISTANT) {
        json_object_set_new(o, "think", json_boolean(m->think));
        if (m->stop) {
            json_object_set_new(o, "cut", json_true());
            json_object_set_new(o, "stopped", json_string(ag_stop_name(m->stop)));
        }
    }
    if (m->note) json_object_set_new(o, "note", json_true());
    if (m->n_calls) {
        json_t *c = json_array();
        for (int i = 0; i < m->n_calls; i++) {
            json_t *x = json_object();
            json_object_set_new(x, "name", jtext(m->calls[i].name));
            if (m->calls[i].args) json_object_set_new(x, "args", jtext(m->calls[i].args));
            if (m->calls[i].result) json_object_set_new(x, "result", jtext(m->calls[i].result));
            if (m->calls[i].summary) json_object_set_new(x, "summary", jtext(m->calls[i].summary));
            json_object_set_new(x, "ok", json_boolean(m->calls[i].ok));
            json_array_append_new(c, x);
        }
        json_object_set_new(o, "calls", c);
    }
    return o;
}

/* Write `path` whole or not at all (base/afile.h: a private temporary
 * beside it, synced, renamed over the old one, the directory synced);
 * 0600: a session record is the user's conversation. */
static int write_file_atomic(const char *path, const char *data, size_t n) {
    return ds4_write_file_atomic(path, data, n, 0600);
}

static void meta_path(agent *a, const char *id, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s.json", a->sessions_dir, id);
}

/* The file a session is read from: ours, else the old project location's.
 * Returns 1 for the old location. */
static int find_meta(agent *a, const char *id, char *out, size_t cap) {
    meta_path(a, id, out, cap);
    if (!a->legacy_dir || access(out, F_OK) == 0) return 0;
    char old[4200];
    snprintf(old, sizeof old, "%s/%s.json", a->legacy_dir, id);
    if (access(old, F_OK) != 0) return 0;
    snprintf(out, cap, "%s", old);
    return 1;
}

/* Another session whose saved state is this very text (same tokens): its
 * file must then stay when this session moves on. */
static int state_shared(agent *a, int n, uint64_t h) {
    DIR *d = opendir(a->sessions_dir);
    if (!d) return 0;
    struct dirent *de;
    int shared = 0;
    while (!shared && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json")) continue;
        if (!strncmp(de->d_name, a->cur->id, strlen(a->cur->id)) && l == strlen(a->cur->id) + 5) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", a->sessions_dir, de->d_name);
        json_t *o = json_load_file(p, 0, NULL);
        if (o) {
            json_t *sh = json_object_get(o, "state_hash");
            char want[32];
            snprintf(want, sizeof want, "%016llx", (unsigned long long)h);
            shared = json_integer_value(json_object_get(o, "state_tokens")) == n &&
                     json_is_string(sh) && !strcmp(json_string_value(sh), want);
            json_decref(o);
        }
    }
    closedir(d);
    return shared;
}

static int write_meta(agent *a, int n, uint64_t h) {
    ag_sess *s = a->cur;
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer(1));
    json_object_set_new(o, "id", json_string(s->id));
    json_object_set_new(o, "title", jtext(s->title ? s->title : ""));
    json_object_set_new(o, "created", json_real(s->created));
    json_object_set_new(o, "last_used", json_real(s->last_used));
    json_object_set_new(o, "turns", json_integer(s->turns));
    json_object_set_new(o, "compactions", json_integer(s->compactions));
    json_object_set_new(o, "live", json_integer(s->live));
    json_object_set_new(o, "think", json_integer(a->think));
    json_object_set_new(o, "sys_think", json_integer(a->sys_think));
    json_object_set_new(o, "state_tokens", json_integer(n));
    char hx[32];
    snprintf(hx, sizeof hx, "%016llx", (unsigned long long)h);
    json_object_set_new(o, "state_hash", json_string(hx));
    json_t *toks = json_array();
    const int32_t *ids = ds4_session_tokens(a->s);
    for (int i = 0; i < n; i++) json_array_append_new(toks, json_integer(ids[i]));
    json_object_set_new(o, "tokens", toks);
    json_t *msgs = json_array();
    for (int i = 0; i < s->n_msgs; i++) json_array_append_new(msgs, msg_json(&s->msgs[i]));
    json_object_set_new(o, "messages", msgs);
    json_t *seen = json_object();
    for (int i = 0; i < s->n_seen; i++) {
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)s->seen[i].hash);
        json_object_set_new(seen, s->seen[i].path, json_string(hx));
    }
    json_object_set_new(o, "seen", seen);
    char *txt = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!txt) return -1;
    char p[4200];
    meta_path(a, s->id, p, sizeof p);
    int rc = write_file_atomic(p, txt, strlen(txt));
    free(txt);
    return rc;
}

int ag_save(agent *a, int quiet) {
    ag_sess *s = a->cur;
    int n = ds4_session_n_tokens(a->s);
    if (!s || s->n_msgs == 0) return 0;
    if (mkdir(a->sessions_dir, 0700) != 0 && errno != EEXIST) {
        ui_note(a, "cannot create %s: %s", a->sessions_dir, strerror(errno));
        return -1;
    }
    ds4_buf text = { 0 };
    ds4_detokenize(a->tok, ds4_session_tokens(a->s), (size_t)n, &text);
    if (!text.p) ds4_buf_puts(&text, "");
    uint64_t h = ag_hash(text.p, text.n, AG_HASH_SEED);
    int rc = 0;
    s->last_used = (double)time(NULL);
    if (a->kv && n > 0) {
        /* the exact DSML of every tool call goes with the state */
        ds4_kv_tool *kt = calloc((size_t)s->n_msgs + 1, sizeof *kt);
        char (*kid)[64] = calloc((size_t)s->n_msgs + 1, sizeof *kid);
        int nk = 0;
        for (int i = 0; i < s->live && kt && kid; i++)
            if (s->msgs[i].kind == AG_ASSISTANT && s->msgs[i].dsml) {
                snprintf(kid[nk], sizeof kid[nk], "%s/%d", s->id, i);
                kt[nk] = (ds4_kv_tool){ kid[nk], s->msgs[i].dsml, strlen(s->msgs[i].dsml) };
                nk++;
            }
        char *err = NULL;
        rc = ds4_kvstore_save(a->kv, a->s, DS4_KV_MANUAL, kt, nk, &err);
        if (rc) {
            ui_note(a, "session %s: %s", s->id, err ? err : "cannot save the KV state");
        } else {
            if (s->saved_n > 0 && (s->saved_n != n || s->saved_hash != h) &&
                !state_shared(a, s->saved_n, s->saved_hash))
                ds4_kvstore_remove(a->kv, s->saved_text.p, s->saved_text.n);   /* superseded */
            s->saved_n = n;
            s->saved_hash = h;
            s->saved_text.n = 0;
            ds4_buf_append(&s->saved_text, text.p, text.n);
        }
        free(err);
        free(kt);
        free(kid);
    }
    if (write_meta(a, n, h)) {
        ui_note(a, "cannot write the session file of %s: %s", s->id, strerror(errno));
        rc = -1;
    } else if (!quiet) {
        ui_note(a, "session %s saved (%d tokens)", s->id, n);
    }
    ds4_buf_free(&text);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Restoring                                                           */
/* ------------------------------------------------------------------ */

static char *jdup(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? ag_strndup(json_string_value(v), json_string_length(v)) : NULL;
}

static int stop_of(json_t *m) {
    const char *w = json_string_value(json_object_get(m, "stopped"));
    for (int k = AG_STOP_INTERRUPT; w && k <= AG_STOP_BUDGET; k++)
        if (!strcmp(w, ag_stop_name(k))) return k;
    /* files of older versions say "cut" without why */
    return json_is_true(json_object_get(m, "cut")) ? AG_STOP_INTERRUPT : AG_STOP_NONE;
}

typedef struct { const int32_t *ids; int n; } exact_ud;

/* Only the state of exactly these tokens will do. */
static int accept_exact(void *ud, const int32_t *t, int n, size_t used) {
    (void)used;
    exact_ud *e = ud;
    return n == e->n && !memcmp(t, e->ids, (size_t)n * sizeof *t);
}

int ag_restore(agent *a, const char *id) {
    char p[4200];
    /* a session of the old location is read there; its state is not in
     * our KV store, so it is evaluated again and saved here from then on */
    int old = find_meta(a, id, p, sizeof p);
    json_error_t je;
    json_t *o = json_load_file(p, 0, &je);
    if (!o) { ui_note(a, "cannot read session %s: %s", id, je.text); return -1; }
    if (old) ui_note(a, "session %s is in the old location %s; it will be saved in %s", id, a->legacy_dir,
                     a->sessions_dir);
    ag_sess *s = calloc(1, sizeof *s);
    ds4_tokens ids = { 0 };
    int rc = -1;
    if (!s) goto out;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->title = jdup(o, "title");
    s->created = json_number_value(json_object_get(o, "created"));
    s->last_used = json_number_value(json_object_get(o, "last_used"));
    s->turns = (int)json_integer_value(json_object_get(o, "turns"));
    s->compactions = (int)json_integer_value(json_object_get(o, "compactions"));
    s->live = (int)json_integer_value(json_object_get(o, "live"));
    json_t *msgs = json_object_get(o, "messages"), *m;
    size_t i;
    json_array_foreach(msgs, i, m) {
        const char *k = json_string_value(json_object_get(m, "kind"));
        ag_msg *x = ag_sess_push(s, k && !strcmp(k, "user") ? AG_USER : k && !strcmp(k, "tools") ? AG_TOOLS : AG_ASSISTANT);
        if (!x) goto out;
        x->text = jdup(m, "text");
        x->reasoning = jdup(m, "reasoning");
        x->dsml = jdup(m, "dsml");
        x->think = json_is_true(json_object_get(m, "think"));
        x->stop = stop_of(m);
        x->note = json_is_true(json_object_get(m, "note"));
        json_t *calls = json_object_get(m, "calls"), *c;
        size_t j;
        x->n_calls = (int)json_array_size(calls);
        x->calls = x->n_calls ? calloc((size_t)x->n_calls, sizeof *x->calls) : NULL;
        json_array_foreach(calls, j, c) {
            x->calls[j].name = jdup(c, "name");
            x->calls[j].args = jdup(c, "args");
            x->calls[j].result = jdup(c, "result");
            x->calls[j].summary = jdup(c, "summary");
            x->calls[j].ok = json_is_true(json_object_get(c, "ok"));
        }
    }
    json_t *seen = json_object_get(o, "seen"), *v;
    const char *key;
    json_object_foreach(seen, key, v) {
        ag_seen *sv = realloc(s->seen, (size_t)(s->n_seen + 1) * sizeof *sv);
        if (!sv) goto out;
        s->seen = sv;
        s->seen[s->n_seen].path = strdup(key);
        s->seen[s->n_seen].hash = strtoull(json_string_value(v) ? json_string_value(v) : "0", NULL, 16);
        s->n_seen++;
    }
    json_t *toks = json_object_get(o, "tokens");
    json_array_foreach(toks, i, v) ds4_tokens_push(&ids, (int32_t)json_integer_value(v));
    if (s->live > s->n_msgs || s->live < 0) { ui_note(a, "session %s: damaged session file", id); goto out; }
    if ((int)ids.n > ds4_session_ctx_size(a->s)) {
        ui_note(a, "session %s holds %zu tokens, more than the context (%d): use --ctx or /ctx",
                id, ids.n, ds4_session_ctx_size(a->s));
        goto out;
    }
    for (size_t k = 0; k < ids.n; k++)
        if (ids.v[k] < 0 || ids.v[k] >= a->n_vocab) { ui_note(a, "session %s: damaged token list", id); goto out; }
    /* the state itself: from the disk KV store, exactly these tokens */
    ds4_session_reset(a->s);
    int got = 0;
    ds4_buf text = { 0 };
    ds4_detokenize(a->tok, ids.v, ids.n, &text);
    if (!text.p) ds4_buf_puts(&text, "");
    if (a->kv && ids.n > 0) {
        exact_ud e = { ids.v, (int)ids.n };
        size_t used = 0;
        got = ds4_kvstore_restore_if(a->kv, a->s, text.p, text.n, (int)ids.n, 0, accept_exact, &e, &used);
    }
    if (ids.n > 0 && got != (int)ids.n) {
        /* evicted or damaged: the transcript's tokens are re-evaluated */
        ui_note(a, "session %s: no saved KV state; re-evaluating %zu tokens", id, ids.n);
        ds4_session_reset(a->s);
        int e = ag_prefill(a, ids.v, (int)ids.n);
        if (e) { ds4_buf_free(&text); ds4_session_reset(a->s); goto out; }
    }
    s->saved_n = (int)ids.n;
    s->saved_hash = ag_hash(text.p, text.n, AG_HASH_SEED);
    ds4_buf_append(&s->saved_text, text.p, text.n);
    ds4_buf_free(&text);
    ag_sess_free(a->cur);
    a->cur = s;
    s = NULL;
    rc = 0;
out:
    ag_sess_free(s);
    ds4_tokens_free(&ids);
    json_decref(o);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Listing                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
    char id[40];
    char title[80];
    int tokens;
    double last_used;
    int old;             /* in the old project location (read only) */
} sess_info;

static int cmp_last(const void *x, const void *y) {
    const sess_info *a = x, *b = y;
    return (a->last_used < b->last_used) - (a->last_used > b->last_used);
}

static int scan_dir(const char *dir, int old, sess_info **out, int n) {
    DIR *d = opendir(dir);
    if (!d) return n;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || l - 5 >= 40 || strcmp(de->d_name + l - 5, ".json")) continue;
        /* a session saved again here hides its old copy */
        int dup = 0;
        for (int i = 0; i < n && !dup; i++) dup = strlen((*out)[i].id) == l - 5 && !memcmp((*out)[i].id, de->d_name, l - 5);
        if (dup) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        json_t *o = json_load_file(p, 0, NULL);
        if (!o) continue;
        sess_info *v = realloc(*out, (size_t)(n + 1) * sizeof *v);
        if (!v) { json_decref(o); break; }
        *out = v;
        sess_info *x = &v[n++];
        memset(x, 0, sizeof *x);
        memcpy(x->id, de->d_name, l - 5);
        const char *t = json_string_value(json_object_get(o, "title"));
        snprintf(x->title, sizeof x->title, "%s", t ? t : "");
        x->tokens = (int)json_integer_value(json_object_get(o, "state_tokens"));
        x->last_used = json_number_value(json_object_get(o, "last_used"));
        x->old = old;
        json_decref(o);
    }
    closedir(d);
    return n;
}

static int scan(agent *a, sess_info **out) {
    *out = NULL;
    int n = scan_dir(a->sessions_dir, 0, out, 0);
    if (a->legacy_dir) n = scan_dir(a->legacy_dir, 1, out, n);
    if (n) qsort(*out, (size_t)n, sizeof **out, cmp_last);
    return n;
}

void ag_list(agent *a) {
    sess_info *v;
    int n = scan(a, &v);
    if (!n) { ui_note(a, "no saved sessions in %s", a->sessions_dir); free(v); return; }
    fprintf(a->ui, "%-25s %7s  %-16s  %s\n", "id", "tokens", "last use", "title");
    for (int i = 0; i < n; i++) {
        char when[32];
        time_t t = (time_t)v[i].last_used;
        struct tm tm;
        localtime_r(&t, &tm);
        strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
        int cur = a->cur && !strcmp(a->cur->id, v[i].id);
        fprintf(a->ui, "%-25s %7d  %-16s  %s%s%s\n", v[i].id, v[i].tokens, when, v[i].title,
                cur ? "  (current)" : "", v[i].old ? "  (old location)" : "");
    }
    free(v);
}

int ag_latest_id(agent *a, char *id, size_t cap) {
    sess_info *v;
    int n = scan(a, &v);
    if (n > 0) snprintf(id, cap, "%s", v[0].id);
    free(v);
    return n > 0 ? 0 : -1;
}

int ag_find_id(agent *a, const char *want, char *id, size_t cap) {
    sess_info *v;
    int n = scan(a, &v), hit = -1, hits = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(v[i].id, want)) { hit = i; hits = 1; break; }
        if (!strncmp(v[i].id, want, strlen(want))) { hit = i; hits++; }
    }
    if (hits == 1) snprintf(id, cap, "%s", v[hit].id);
    free(v);
    return hits == 1 ? 0 : hits == 0 ? -1 : -2;
}

/* Evaluate ids on top of the live state, with the progress line (a
 * restore that must re-evaluate, compaction and the model turn use it;
 * Ctrl+C cancels through ui_progress). */
int ag_prefill(agent *a, const int32_t *ids, int n) {
    if (n <= 0) return DS4_OK;
    return ds4_session_eval(a->s, ids, n, ui_progress, a);
}
