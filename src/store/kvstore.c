/*
 * kvstore.c -- the disk KV cache: session snapshots as files, named by the
 * SHA-1 of the rendered text their tokens spell, found again by the longest
 * cached prefix of a new prompt's text.
 *
 * Owns: the file format, atomic writes (temp file, fsync, rename, fsync of
 * the directory), validation on every restore (size, checksum, version,
 * model fingerprint, text), quarantine of damaged files, LRU eviction by
 * last use under a space cap, inter-process locking of directory
 * mutations, and the tool-id -> exact DSML sections.
 * Must not: decide *when* to save (the front ends' policy), or ever restore
 * a state that failed any check.  A failed save leaves every existing file
 * as it was.
 *
 * File layout (little-endian; docs/kvcache.md "Disk KV cache" has the table):
 *   0   8  magic "DS4KVC\r\n"
 *   8   4  version (2: f16 KV rows in the snapshot; 1, float32 rows, is
 *            refused by version like any unknown one)
 *   12  4  reason (ds4_kv_reason)
 *   16  4  n_tokens
 *   20  4  ctx_size of the saving session
 *   24  8  created, unix seconds
 *   32  8  last_used, unix seconds      } mutable, updated in place,
 *   40  4  hits                          } excluded from the checksum
 *   44  4  flags (bit 0: --no-qat numerics)
 *   48  8  text_len
 *   56  8  payload_len (session snapshot)
 *   64  8  tools_len
 *   72 20  model fingerprint (GGUF header + metadata + tensor directory)
 *   92 20  family fingerprint (same model, any routed-expert quantization)
 *  112 16  general.architecture of the saving model, NUL-padded (all zero:
 *            "deepseek4", the only one before the field); the payload is
 *            that graph's snapshot format, so a file of another
 *            architecture is never restored (a miss)
 *  128     text, payload, tools section
 *  end-8 8 XXH64 (seed 0) of everything before, with bytes 32..43 as zero
 * Tools section: u32 count, then per entry u32 id_len, id, u32 dsml_len,
 * dsml, u64 XXH64(dsml).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"
#include "base/hash.h"

#define KV_MAGIC "DS4KVC\r\n"
#define KV_VERSION 2u
#define KV_HDR 128
#define KV_EXT ".ds4kv"

typedef struct {
    char name[41];            /* sha1 hex of the text */
    uint64_t text_len, file_bytes;
    uint64_t last_used;       /* ns: the header's second, refined by the
                               * file's mtime (every use rewrites the header
                               * in place), so LRU order is exact even
                               * within one second */
    uint32_t reason, n_tokens;
    int usable;               /* fingerprint accepted for this model */
} kv_entry;

typedef struct {
    char *id;
    char name[41];
} kv_toolref;

struct ds4_kvstore {
    const ds4_model *m;
    uint8_t fp[20], family_fp[20];   /* the model's fingerprints (ds4.h) */
    char arch[16];                   /* its general.architecture */
    char *dir;
    int dirfd;
    uint64_t cap;
    int allow_variants;
    FILE *log;
    kv_entry *e;
    int ne, cap_e;
    kv_toolref *tools;
    int ntools, cap_tools;
    struct timespec dir_mtime;
    ds4_kvstore_stats st;
    char **warned;            /* names already warned about */
    int nwarned;
};

const char *ds4_kv_reason_name(uint32_t r) {
    switch (r) {
    case DS4_KV_COLD: return "cold";
    case DS4_KV_CONTINUED: return "continued";
    case DS4_KV_EVICT: return "evict";
    case DS4_KV_SHUTDOWN: return "shutdown";
    case DS4_KV_MANUAL: return "manual";
    }
    return "?";
}

void ds4_kvstore_params_default(ds4_kvstore_params *p) {
    memset(p, 0, sizeof *p);
    p->space_bytes = 4096ull << 20;
}

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void hex40(const uint8_t h[20], char out[41]) {
    static const char *x = "0123456789abcdef";
    for (int i = 0; i < 20; i++) { out[2 * i] = x[h[i] >> 4]; out[2 * i + 1] = x[h[i] & 15]; }
    out[40] = 0;
}

static int is_name(const char *s) {
    size_t n = strlen(s);
    if (n != 40 + strlen(KV_EXT) || strcmp(s + 40, KV_EXT)) return 0;
    for (int i = 0; i < 40; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* One warning line per file and problem kind, not one per lookup. */
static void warn_once(ds4_kvstore *kv, const char *name, const char *fmt, const char *why) {
    for (int i = 0; i < kv->nwarned; i++)
        if (!strcmp(kv->warned[i], name)) return;
    char **w = realloc(kv->warned, (size_t)(kv->nwarned + 1) * sizeof *w);
    if (w) { kv->warned = w; kv->warned[kv->nwarned++] = strdup(name); }
    fprintf(kv->log, fmt, kv->dir, name, why);
    fflush(kv->log);
}

/* ---------------------------------------------------------------------- */
/* Header parsing and full-file validation (shared with ds4-kv)            */
/* ---------------------------------------------------------------------- */

static int parse_header(const uint8_t *h, uint64_t file_bytes, ds4_kv_file_info *in, const char **why) {
    memset(in, 0, sizeof *in);
    if (file_bytes < KV_HDR + 8) { *why = "truncated"; return -1; }
    if (memcmp(h, KV_MAGIC, 8)) { *why = "bad magic"; return -1; }
    in->version = rd32(h + 8);
    if (in->version != KV_VERSION) { *why = "unknown version"; return -1; }
    in->reason = rd32(h + 12);
    in->n_tokens = rd32(h + 16);
    in->ctx_size = rd32(h + 20);
    in->created = rd64(h + 24);
    in->last_used = rd64(h + 32);
    in->hits = rd32(h + 40);
    in->flags = rd32(h + 44);
    in->text_len = rd64(h + 48);
    in->payload_len = rd64(h + 56);
    in->tools_len = rd64(h + 64);
    memcpy(in->fingerprint, h + 72, 20);
    memcpy(in->family, h + 92, 20);
    if (h[127]) { *why = "architecture field not terminated"; return -1; }
    memcpy(in->arch, h + 112, 16);
    in->arch[16] = 0;
    if (!in->arch[0]) strcpy(in->arch, "deepseek4");
    in->file_bytes = file_bytes;
    uint64_t want = KV_HDR;
    if (__builtin_add_overflow(want, in->text_len, &want) ||
        __builtin_add_overflow(want, in->payload_len, &want) ||
        __builtin_add_overflow(want, in->tools_len, &want) ||
        __builtin_add_overflow(want, 8, &want) || want != file_bytes) {
        *why = "size does not match its header (truncated or damaged)";
        return -1;
    }
    return 0;
}

static uint64_t file_checksum(const uint8_t *p, uint64_t n) {
    uint8_t h[KV_HDR];
    memcpy(h, p, KV_HDR);
    memset(h + 32, 0, 12);          /* last_used, hits */
    ds4_xxh64_ctx c;
    ds4_xxh64_init(&c, 0);
    ds4_xxh64_update(&c, h, KV_HDR);
    ds4_xxh64_update(&c, p + KV_HDR, n - KV_HDR - 8);
    return ds4_xxh64_digest(&c);
}

/* Parse the tools section; returns entries through the callback. */
static int walk_tools(const uint8_t *p, uint64_t n,
                      int (*cb)(void *ud, const char *id, uint32_t idl, const uint8_t *d, uint32_t dl),
                      void *ud) {
    if (n == 0) return 0;
    if (n < 4) return -1;
    uint32_t cnt = rd32(p);
    uint64_t at = 4;
    for (uint32_t i = 0; i < cnt; i++) {
        if (n - at < 4) return -1;
        uint32_t il = rd32(p + at); at += 4;
        if (n - at < (uint64_t)il + 4) return -1;
        const char *id = (const char *)p + at; at += il;
        uint32_t dl = rd32(p + at); at += 4;
        if (n - at < (uint64_t)dl + 8) return -1;
        const uint8_t *d = p + at; at += dl;
        if (ds4_xxh64(d, dl, 0) != rd64(p + at)) return -1;
        at += 8;
        if (cb && cb(ud, id, il, d, dl)) return 1;
    }
    return at == n ? 0 : -1;
}

/* Printable excerpt of a file's text for ds4-kv.  The text is untrusted
 * (a damaged or planted file), so it is shown only through ds4_escape; and
 * an excerpt cut from a larger text may begin or end inside a UTF-8
 * character: those partial bytes are left out rather than shown as
 * escapes of half a character. */
static void escape_text(const uint8_t *t, uint64_t n, char *out, size_t cap) {
    uint64_t i = 0;
    while (i < n && i < 3 && (t[i] & 0xc0) == 0x80) i++;     /* tail of a character */
    uint64_t end = n;
    for (uint64_t back = 1; back <= 3 && back <= n - i; back++) {
        uint8_t c = t[n - back];
        if ((c & 0xc0) == 0x80) continue;                   /* continuation: look further */
        size_t k = c >= 0xc2 && c <= 0xdf ? 2 : (c & 0xf0) == 0xe0 ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
        if (k > back) end = n - back;                       /* lead byte of a cut sequence */
        break;
    }
    ds4_escape(out, cap, (const char *)t + i, (size_t)(end - i));
}

int ds4_kv_file_info_read(const char *path, int verify, ds4_kv_file_info *info, char **err) {
    if (err) *err = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return ds4_set_err(err, DS4_EIO, "%s", strerror(errno));
    }
    struct stat sb;
    uint8_t h[KV_HDR];
    const char *why = NULL;
    int rc = DS4_OK;
    if (fstat(fd, &sb) || pread(fd, h, KV_HDR, 0) != KV_HDR) {
        why = "truncated";
        rc = DS4_EFORMAT;
    } else if (parse_header(h, (uint64_t)sb.st_size, info, &why)) {
        rc = DS4_EFORMAT;
    } else {
        uint8_t pre[120];
        ssize_t k = pread(fd, pre, info->text_len < sizeof pre ? info->text_len : sizeof pre, KV_HDR);
        escape_text(pre, k > 0 ? (uint64_t)k : 0, info->prefix, sizeof info->prefix);
        /* the end of the text: files of one conversation share its start
         * (system prompt), they differ at the end */
        uint64_t tl = info->text_len < sizeof pre ? info->text_len : sizeof pre;
        k = pread(fd, pre, tl, (off_t)(KV_HDR + info->text_len - tl));
        escape_text(pre, k > 0 ? (uint64_t)k : 0, info->suffix, sizeof info->suffix);
        if (verify) {
            void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (map == MAP_FAILED) { why = "cannot map"; rc = DS4_EIO; }
            else {
                const uint8_t *p = map;
                if (file_checksum(p, (uint64_t)sb.st_size) != rd64(p + sb.st_size - 8)) {
                    why = "checksum mismatch"; rc = DS4_EFORMAT;
                } else if (walk_tools(p + KV_HDR + info->text_len + info->payload_len,
                                      info->tools_len, NULL, NULL) < 0) {
                    why = "malformed tool section"; rc = DS4_EFORMAT;
                } else if (info->tools_len >= 4) {
                    info->n_tools = rd32(p + KV_HDR + info->text_len + info->payload_len);
                }
                munmap(map, (size_t)sb.st_size);
            }
        }
    }
    close(fd);
    if (rc) ds4_set_err(err, rc, "%s", why ? why : "invalid");
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Index                                                                   */
/* ---------------------------------------------------------------------- */

static int arch_ok(const ds4_kvstore *kv, const ds4_kv_file_info *in) {
    return !strcmp(in->arch, kv->arch);
}

static int fp_ok(const ds4_kvstore *kv, const uint8_t *fp, const uint8_t *fam) {
    if (!memcmp(fp, kv->fp, 20)) return 1;
    return kv->allow_variants && !memcmp(fam, kv->family_fp, 20);
}

/* Move a damaged file aside (name.bad) so it is never read again; the
 * evictor removes .bad files first. */
static void quarantine(ds4_kvstore *kv, const char *name, const char *why) {
    char from[80], to[90];
    snprintf(from, sizeof from, "%s%s", name, KV_EXT);
    snprintf(to, sizeof to, "%s%s.bad", name, KV_EXT);
    fprintf(kv->log, "ds4: kv cache %s/%s: %s; moved aside as %s\n", kv->dir, from, why, to);
    fflush(kv->log);
    renameat(kv->dirfd, from, kv->dirfd, to);
    kv->st.rejected++;
    for (int i = 0; i < kv->ne; i++)
        if (!strcmp(kv->e[i].name, name)) { kv->e[i] = kv->e[--kv->ne]; break; }
}

static int add_toolref(void *ud, const char *id, uint32_t idl, const uint8_t *d, uint32_t dl) {
    (void)d; (void)dl;
    void **a = ud;
    ds4_kvstore *kv = a[0];
    const char *name = a[1];
    for (int i = 0; i < kv->ntools; i++)
        if (strlen(kv->tools[i].id) == idl && !memcmp(kv->tools[i].id, id, idl)) {
            memcpy(kv->tools[i].name, name, 41);
            return 0;
        }
    if (kv->ntools == kv->cap_tools) {
        int nc = kv->cap_tools ? 2 * kv->cap_tools : 64;
        kv_toolref *t = realloc(kv->tools, (size_t)nc * sizeof *t);
        if (!t) return 0;
        kv->tools = t;
        kv->cap_tools = nc;
    }
    kv->tools[kv->ntools].id = strndup(id, idl);
    memcpy(kv->tools[kv->ntools].name, name, 41);
    kv->ntools++;
    return 0;
}

static void index_tools_of(ds4_kvstore *kv, int fd, const char *name, const ds4_kv_file_info *in) {
    if (in->tools_len < 4 || in->tools_len > (64u << 20)) return;
    uint8_t *buf = malloc(in->tools_len);
    if (!buf) return;
    if (pread(fd, buf, in->tools_len, (off_t)(KV_HDR + in->text_len + in->payload_len)) == (ssize_t)in->tools_len) {
        void *ud[2] = { kv, (void *)name };
        walk_tools(buf, in->tools_len, add_toolref, ud);
    }
    free(buf);
}

static void free_index(ds4_kvstore *kv) {
    for (int i = 0; i < kv->ntools; i++) free(kv->tools[i].id);
    kv->ntools = 0;
    kv->ne = 0;
}

/* Remove temp files whose writer is gone (a crash or SIGKILL mid-save). */
static void sweep_temps(ds4_kvstore *kv) {
    DIR *d = fdopendir(dup(kv->dirfd));
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        int pid = 0;
        if (sscanf(de->d_name, ".tmp-%d-", &pid) == 1 && pid > 0 &&
            kill(pid, 0) != 0 && errno == ESRCH)
            unlinkat(kv->dirfd, de->d_name, 0);
    }
    closedir(d);
}

static int rescan(ds4_kvstore *kv) {
    struct stat sb;
    if (fstat(kv->dirfd, &sb)) return DS4_EIO;
    free_index(kv);
    kv->dir_mtime = sb.st_mtim;
    DIR *d = fdopendir(dup(kv->dirfd));
    if (!d) return DS4_EIO;
    rewinddir(d);
    struct dirent *de;
    uint64_t total = 0;
    int nfiles = 0;
    while ((de = readdir(d))) {
        if (!is_name(de->d_name)) continue;
        char name[41];
        memcpy(name, de->d_name, 40);
        name[40] = 0;
        int fd = openat(kv->dirfd, de->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat fs;
        uint8_t h[KV_HDR];
        ds4_kv_file_info in;
        const char *why = NULL;
        if (fstat(fd, &fs) || pread(fd, h, KV_HDR, 0) != KV_HDR) why = "truncated";
        else if (parse_header(h, (uint64_t)fs.st_size, &in, &why)) { /* why set */ }
        if (why) {
            close(fd);
            quarantine(kv, name, why);
            continue;
        }
        total += (uint64_t)fs.st_size;
        nfiles++;
        if (kv->ne == kv->cap_e) {
            int nc = kv->cap_e ? 2 * kv->cap_e : 64;
            kv_entry *e = realloc(kv->e, (size_t)nc * sizeof *e);
            if (!e) { close(fd); break; }
            kv->e = e;
            kv->cap_e = nc;
        }
        kv_entry *e = &kv->e[kv->ne++];
        memcpy(e->name, name, 41);
        e->text_len = in.text_len;
        e->file_bytes = (uint64_t)fs.st_size;
        uint64_t mt = (uint64_t)fs.st_mtim.tv_sec * 1000000000ull + (uint64_t)fs.st_mtim.tv_nsec;
        e->last_used = in.last_used * 1000000000ull > mt ? in.last_used * 1000000000ull : mt;
        e->reason = in.reason;
        e->n_tokens = in.n_tokens;
        e->usable = arch_ok(kv, &in) && fp_ok(kv, in.fingerprint, in.family);
        if (!e->usable)
            warn_once(kv, name, "ds4: kv cache %s/%s: %s; ignored\n",
                      arch_ok(kv, &in) ? "saved by another model or quantization"
                                       : "saved by a model of another architecture");
        else
            index_tools_of(kv, fd, name, &in);
        close(fd);
    }
    closedir(d);
    kv->st.files = (uint64_t)nfiles;
    kv->st.bytes = total;
    return DS4_OK;
}

static void maybe_rescan(ds4_kvstore *kv) {
    struct stat sb;
    if (fstat(kv->dirfd, &sb)) return;
    if (sb.st_mtim.tv_sec != kv->dir_mtime.tv_sec || sb.st_mtim.tv_nsec != kv->dir_mtime.tv_nsec)
        rescan(kv);
}

ds4_kvstore *ds4_kvstore_open(const ds4_model *m, const ds4_kvstore_params *p, char **err) {
    if (err) *err = NULL;
    if (!p || !p->dir || !*p->dir) {
        ds4_set_err(err, DS4_EINVAL, "kv cache: no directory given");
        return NULL;
    }
    ds4_model_info mi;
    ds4_model_get_info(m, &mi);
    if (!mi.arch || strlen(mi.arch) > 15) {   /* the header holds 15 bytes and a NUL */
        ds4_set_err(err, DS4_EUNSUP, "kv cache: architecture name too long for the file header");
        return NULL;
    }
    if (mkdir(p->dir, 0755) && errno != EEXIST) {
        ds4_set_err(err, DS4_EIO, "kv cache: cannot create %s: %s", p->dir, strerror(errno));
        return NULL;
    }
    ds4_kvstore *kv = calloc(1, sizeof *kv);
    if (!kv) { ds4_set_err(err, DS4_ENOMEM, "kv cache: out of memory"); return NULL; }
    kv->m = m;
    strcpy(kv->arch, mi.arch);
    ds4_model_fingerprint(m, kv->fp);
    ds4_model_family_fingerprint(m, kv->family_fp);
    kv->dirfd = -1;
    kv->dir = strdup(p->dir);
    if (!kv->dir) {
        ds4_set_err(err, DS4_ENOMEM, "kv cache: out of memory");
        ds4_kvstore_close(kv);
        return NULL;
    }
    kv->cap = p->space_bytes ? p->space_bytes : (4096ull << 20);
    kv->allow_variants = p->allow_quant_variants;
    kv->log = p->log ? p->log : stderr;
    kv->dirfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (kv->dirfd < 0) {
        ds4_set_err(err, DS4_EIO, "kv cache: cannot open %s: %s", p->dir, strerror(errno));
        ds4_kvstore_close(kv);
        return NULL;
    }
    sweep_temps(kv);
    rescan(kv);
    return kv;
}

void ds4_kvstore_close(ds4_kvstore *kv) {
    if (!kv) return;
    free_index(kv);
    free(kv->e);
    free(kv->tools);
    for (int i = 0; i < kv->nwarned; i++) free(kv->warned[i]);
    free(kv->warned);
    if (kv->dirfd >= 0) close(kv->dirfd);
    free(kv->dir);
    free(kv);
}

void ds4_kvstore_get_stats(ds4_kvstore *kv, ds4_kvstore_stats *st) {
    *st = kv->st;
}

/* Directory mutations (write, evict, quarantine) of several processes
 * sharing a directory are serialised by an flock on DIR/.lock. */
static int lock_dir(ds4_kvstore *kv) {
    int fd = openat(kv->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) { close(fd); return -1; }
    return fd;
}

static void unlock_dir(int fd) {
    if (fd >= 0) { flock(fd, LOCK_UN); close(fd); }
}

/* ---------------------------------------------------------------------- */
/* Save                                                                    */
/* ---------------------------------------------------------------------- */

typedef struct {
    int fd;
    uint8_t buf[1 << 16];
    size_t n;
    uint64_t written;
    ds4_xxh64_ctx h;
    int err;                  /* errno of the first failure */
    uint64_t fail_after;      /* test-only fault injection (DS4_KV_FAULT) */
    int slow;                 /* test-only: widen the write window */
} fwriter;

static int fw_flush(fwriter *w) {
    size_t off = 0;
    while (off < w->n) {
        if (w->fail_after && w->written + off >= w->fail_after) { w->err = ENOSPC; return -1; }
        ssize_t k = write(w->fd, w->buf + off, w->n - off);
        if (k < 0) {
            if (errno == EINTR) continue;
            w->err = errno;
            return -1;
        }
        off += (size_t)k;
    }
    w->written += w->n;
    w->n = 0;
    if (w->slow) usleep(3000);
    return 0;
}

static int fw_put(void *ud, const void *data, size_t len) {
    fwriter *w = ud;
    if (w->err) return DS4_EIO;
    ds4_xxh64_update(&w->h, data, len);
    const uint8_t *p = data;
    while (len) {
        size_t k = sizeof w->buf - w->n < len ? sizeof w->buf - w->n : len;
        memcpy(w->buf + w->n, p, k);
        w->n += k; p += k; len -= k;
        if (w->n == sizeof w->buf && fw_flush(w)) return DS4_EIO;
    }
    return DS4_OK;
}

static uint64_t tools_bytes(const ds4_kv_tool *t, int n) {
    if (n <= 0) return 0;
    uint64_t b = 4;
    for (int i = 0; i < n; i++) b += 4 + strlen(t[i].id) + 4 + t[i].dsml_len + 8;
    return b;
}

/* Evict least recently used files until the directory fits the cap; .bad
 * files go first.  `keep` is never evicted. */
static void evict(ds4_kvstore *kv, const char *keep) {
    DIR *d = fdopendir(dup(kv->dirfd));
    if (d) {
        rewinddir(d);
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t n = strlen(de->d_name);
            if (n > 4 && !strcmp(de->d_name + n - 4, ".bad")) unlinkat(kv->dirfd, de->d_name, 0);
        }
        closedir(d);
    }
    rescan(kv);
    while (kv->st.bytes > kv->cap) {
        int victim = -1;
        for (int i = 0; i < kv->ne; i++) {
            if (keep && !strcmp(kv->e[i].name, keep)) continue;
            if (victim < 0 || kv->e[i].last_used < kv->e[victim].last_used) victim = i;
        }
        if (victim < 0) break;
        char fn[64];
        snprintf(fn, sizeof fn, "%s%s", kv->e[victim].name, KV_EXT);
        unlinkat(kv->dirfd, fn, 0);
        kv->st.bytes -= kv->e[victim].file_bytes;
        kv->st.evictions++;
        kv->e[victim] = kv->e[--kv->ne];
    }
    rescan(kv);
}

static void touch(ds4_kvstore *kv, const char *name, int hit) {
    char fn[64];
    snprintf(fn, sizeof fn, "%s%s", name, KV_EXT);
    int fd = openat(kv->dirfd, fn, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    uint8_t h[12];
    if (pread(fd, h, 12, 32) == 12) {
        uint64_t now = (uint64_t)time(NULL);
        uint32_t hits = rd32(h + 8) + (hit ? 1 : 0);
        memcpy(h, &now, 8);
        memcpy(h + 8, &hits, 4);
        /* best effort: these bytes are outside the checksum */
        if (pwrite(fd, h, 12, 32) != 12) { /* ignore */ }
    }
    close(fd);
    for (int i = 0; i < kv->ne; i++)
        if (!strcmp(kv->e[i].name, name)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            kv->e[i].last_used = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        }
}

int ds4_kvstore_save(ds4_kvstore *kv, const ds4_session *s, ds4_kv_reason reason,
                     const ds4_kv_tool *tools, int n_tools, char **err) {
    if (err) *err = NULL;
    int n = ds4_session_n_tokens(s);
    if (n <= 0) return DS4_OK;
    double t0 = ds4_now();
    ds4_buf text = { 0 };
    if (ds4_detokenize(ds4_model_tokenizer(kv->m), ds4_session_tokens(s), (size_t)n, &text)) {
        ds4_buf_free(&text);
        return DS4_ENOMEM;
    }
    uint8_t sha[20];
    char name[41], fn[64], tmp[96];
    ds4_sha1(text.p, text.n, sha);
    hex40(sha, name);
    snprintf(fn, sizeof fn, "%s%s", name, KV_EXT);
    maybe_rescan(kv);
    for (int i = 0; i < kv->ne; i++)
        if (!strcmp(kv->e[i].name, name) && kv->e[i].usable && kv->e[i].n_tokens == (uint32_t)n &&
            n_tools == 0) {
            touch(kv, name, 0);            /* the same state is already there */
            ds4_buf_free(&text);
            return DS4_OK;
        }
    uint64_t payload = ds4_session_snapshot_size(s), tb = tools_bytes(tools, n_tools);
    uint64_t total = KV_HDR + text.n + payload + tb + 8;
    if (total > kv->cap) {
        fprintf(kv->log, "ds4: kv cache: a %.1f MiB state does not fit --kv-disk-space-mb; not saved\n",
                total / 1048576.0);
        ds4_buf_free(&text);
        return DS4_OK;
    }
    int lk = lock_dir(kv);
    /* a name unique per process and moment (t0 * 1e6 exceeds 32 bits: take
     * the low bits of the integer, never cast an out-of-range double) */
    unsigned rnd = (unsigned)((uint64_t)(t0 * 1e6) & 0xffffffffu) ^ (unsigned)getpid();
    snprintf(tmp, sizeof tmp, ".tmp-%d-%08x", (int)getpid(), rnd);
    int fd = openat(kv->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int rc = DS4_OK;
    fwriter *w = NULL;
    if (fd < 0) { rc = DS4_EIO; goto out; }
    w = calloc(1, sizeof *w);
    if (!w) { rc = DS4_ENOMEM; goto out; }
    w->fd = fd;
    /* test-only fault injection: "write" fails mid-file with ENOSPC,
     * "slow" stretches the write so a test can kill the writer inside it */
    const char *fault = getenv("DS4_KV_FAULT");
    if (fault && !strncmp(fault, "write", 5)) w->fail_after = 4096;
    if (fault && !strncmp(fault, "slow", 4)) w->slow = 1;
    ds4_xxh64_init(&w->h, 0);
    uint8_t h[KV_HDR];
    memset(h, 0, sizeof h);
    memcpy(h, KV_MAGIC, 8);
    uint32_t v32;
    uint64_t v64;
    v32 = KV_VERSION; memcpy(h + 8, &v32, 4);
    v32 = (uint32_t)reason; memcpy(h + 12, &v32, 4);
    v32 = (uint32_t)n; memcpy(h + 16, &v32, 4);
    v32 = (uint32_t)ds4_session_ctx_size(s); memcpy(h + 20, &v32, 4);
    v64 = (uint64_t)time(NULL); memcpy(h + 24, &v64, 8);
    v32 = ds4_session_no_qat(s) ? 1u : 0u; memcpy(h + 44, &v32, 4);
    v64 = text.n; memcpy(h + 48, &v64, 8);
    memcpy(h + 56, &payload, 8);
    memcpy(h + 64, &tb, 8);
    memcpy(h + 72, kv->fp, 20);
    memcpy(h + 92, kv->family_fp, 20);
    memcpy(h + 112, kv->arch, strlen(kv->arch));
    /* last_used/hits (32..43) are zero while hashing, then set */
    fw_put(w, h, KV_HDR);
    fw_put(w, text.p, text.n);
    ds4_session_snapshot_write(s, fw_put, w);
    if (n_tools > 0) {
        uint32_t cnt = (uint32_t)n_tools;
        fw_put(w, &cnt, 4);
        for (int i = 0; i < n_tools; i++) {
            uint32_t il = (uint32_t)strlen(tools[i].id), dl = (uint32_t)tools[i].dsml_len;
            uint64_t dh = ds4_xxh64(tools[i].dsml, tools[i].dsml_len, 0);
            fw_put(w, &il, 4); fw_put(w, tools[i].id, il);
            fw_put(w, &dl, 4); fw_put(w, tools[i].dsml, dl);
            fw_put(w, &dh, 8);
        }
    }
    uint64_t sum = ds4_xxh64_digest(&w->h);
    fw_put(w, &sum, 8);
    if (w->err || fw_flush(w)) { rc = DS4_EIO; goto out; }
    /* now stamp last_used in place (outside the checksum) */
    uint8_t lu[12];
    v64 = (uint64_t)time(NULL);
    memcpy(lu, &v64, 8);
    memset(lu + 8, 0, 4);
    if (pwrite(fd, lu, 12, 32) != 12 || fsync(fd) != 0) { w->err = errno; rc = DS4_EIO; goto out; }
    if (close(fd) != 0) { fd = -1; w->err = errno; rc = DS4_EIO; goto out; }
    fd = -1;
    if (renameat(kv->dirfd, tmp, kv->dirfd, fn) != 0) { w->err = errno; rc = DS4_EIO; goto out; }
    fsync(kv->dirfd);
    kv->st.saves++;
    kv->st.save_bytes += total;
    kv->st.save_seconds += ds4_now() - t0;
    evict(kv, name);
out:
    if (rc != DS4_OK) {
        if (fd >= 0) close(fd);
        unlinkat(kv->dirfd, tmp, 0);
        kv->st.write_errors++;
        ds4_set_err(err, rc, "kv cache: cannot save %s/%s: %s", kv->dir, fn,
                    strerror(w && w->err ? w->err : errno));
    }
    unlock_dir(lk);
    free(w);
    ds4_buf_free(&text);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Restore                                                                 */
/* ---------------------------------------------------------------------- */

/* Hand a candidate's token list (snapshot header: 10 u32 with n_tokens
 * at word 8, then the ids: every graph's format keeps them there,
 * models/graph.h) to the caller's veto, copied so it is aligned whatever the text length. */
static int accept_tokens(const uint8_t *payload, uint64_t plen, uint32_t n, size_t tlen,
                         ds4_kv_accept_fn accept, void *ud) {
    if (plen < 40 + 4ull * n || rd32(payload + 32) != n) return 0;
    int32_t *t = malloc(n ? 4ull * n : 4);
    if (!t) return 0;
    memcpy(t, payload + 40, 4ull * n);
    int ok = accept(ud, t, (int)n, tlen);
    free(t);
    return ok;
}

/* Validate and restore one file whose text must equal text[0..tlen).
 * Returns tokens restored, 0 when rejected. */
static int try_restore(ds4_kvstore *kv, ds4_session *s, const char *name,
                       const char *text, uint64_t tlen, ds4_kv_accept_fn accept, void *ud) {
    char fn[64];
    snprintf(fn, sizeof fn, "%s%s", name, KV_EXT);
    double t0 = ds4_now();
    int fd = openat(kv->dirfd, fn, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;     /* evicted meanwhile */
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size < KV_HDR + 8) { close(fd); quarantine(kv, name, "truncated"); return 0; }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return 0;
    const uint8_t *p = map;
    ds4_kv_file_info in;
    const char *why = NULL;
    int n = 0;
    if (parse_header(p, (uint64_t)sb.st_size, &in, &why)) {
        quarantine(kv, name, why);
    } else if (!arch_ok(kv, &in)) {
        warn_once(kv, name, "ds4: kv cache %s/%s: %s; ignored\n", "saved by a model of another architecture");
    } else if (!fp_ok(kv, in.fingerprint, in.family)) {
        warn_once(kv, name, "ds4: kv cache %s/%s: %s; ignored\n", "saved by another model or quantization");
    } else if (file_checksum(p, (uint64_t)sb.st_size) != rd64(p + sb.st_size - 8)) {
        quarantine(kv, name, "checksum mismatch");
    } else if (in.text_len != tlen || memcmp(p + KV_HDR, text, tlen)) {
        /* a SHA-1 collision or a renamed file: not ours */
        quarantine(kv, name, "text does not match its name");
    } else if (in.n_tokens > (uint32_t)ds4_session_ctx_size(s)) {
        /* valid, but larger than this session: leave it for others */
    } else if (accept && !accept_tokens(p + KV_HDR + in.text_len, in.payload_len, in.n_tokens,
                                        (size_t)tlen, accept, ud)) {
        /* vetoed by the caller (or its token list is not where the
         * snapshot layout puts it, which the restore would reject too) */
    } else {
        char *err = NULL;
        if (ds4_session_restore(s, p + KV_HDR + in.text_len, in.payload_len, &err) == DS4_OK) {
            n = ds4_session_n_tokens(s);
            kv->st.load_bytes += (uint64_t)sb.st_size;
        } else if (err && strstr(err, "numerics mode")) {
            /* saved by a --no-qat session: valid, not for this one */
        } else {
            quarantine(kv, name, err ? err : "snapshot rejected");
        }
        free(err);
    }
    munmap(map, (size_t)sb.st_size);
    if (n > 0) {
        touch(kv, name, 1);
        kv->st.load_seconds += ds4_now() - t0;
    }
    return n;
}

typedef struct { uint64_t len; char name[41]; } cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return (x->len > y->len) - (x->len < y->len);
}

int ds4_kvstore_restore(ds4_kvstore *kv, ds4_session *s, const char *text, size_t len,
                        int min_tokens, int better_than, size_t *text_used) {
    return ds4_kvstore_restore_if(kv, s, text, len, min_tokens, better_than, NULL, NULL, text_used);
}

int ds4_kvstore_restore_if(ds4_kvstore *kv, ds4_session *s, const char *text, size_t len,
                           int min_tokens, int better_than, ds4_kv_accept_fn accept, void *ud,
                           size_t *text_used) {
    if (text_used) *text_used = 0;
    maybe_rescan(kv);
    cand *c = malloc((size_t)(kv->ne ? kv->ne : 1) * sizeof *c);
    if (!c) return 0;
    int nc = 0;
    for (int i = 0; i < kv->ne; i++) {
        const kv_entry *e = &kv->e[i];
        if (!e->usable || e->text_len > len || e->text_len == 0) continue;
        if ((int)e->n_tokens < min_tokens || (int)e->n_tokens <= better_than) continue;
        if (e->n_tokens > (uint32_t)ds4_session_ctx_size(s)) continue;
        c[nc].len = e->text_len;
        memcpy(c[nc].name, e->name, 41);
        nc++;
    }
    qsort(c, (size_t)nc, sizeof *c, cand_cmp);
    /* one SHA-1 pass over the text yields the hash of every candidate
     * prefix length */
    char (*hx)[41] = malloc((size_t)(nc ? nc : 1) * sizeof *hx);
    ds4_sha1_ctx h;
    ds4_sha1_init(&h);
    uint64_t at = 0;
    for (int i = 0; i < nc && hx; i++) {
        ds4_sha1_update(&h, text + at, c[i].len - at);
        at = c[i].len;
        ds4_sha1_ctx cp = h;
        uint8_t d[20];
        ds4_sha1_final(&cp, d);
        hex40(d, hx[i]);
    }
    int got = 0;
    for (int i = nc - 1; i >= 0 && hx && !got; i--) {
        if (strcmp(c[i].name, hx[i])) continue;
        got = try_restore(kv, s, c[i].name, text, c[i].len, accept, ud);
        if (got > 0 && text_used) *text_used = (size_t)c[i].len;
    }
    if (got > 0) kv->st.hits++;
    else kv->st.misses++;
    free(hx);
    free(c);
    return got;
}

int ds4_kvstore_restore_latest(ds4_kvstore *kv, ds4_session *s, uint32_t reason) {
    maybe_rescan(kv);
    for (;;) {
        int best = -1;
        for (int i = 0; i < kv->ne; i++) {
            const kv_entry *e = &kv->e[i];
            if (!e->usable || (reason && e->reason != reason)) continue;
            if (e->n_tokens > (uint32_t)ds4_session_ctx_size(s)) continue;
            if (best < 0 || e->last_used > kv->e[best].last_used) best = i;
        }
        if (best < 0) return 0;
        /* read the text to validate the file against itself */
        char name[41];
        memcpy(name, kv->e[best].name, 41);
        uint64_t tl = kv->e[best].text_len;
        char fn[64];
        snprintf(fn, sizeof fn, "%s%s", name, KV_EXT);
        int fd = openat(kv->dirfd, fn, O_RDONLY | O_CLOEXEC);
        char *t = fd >= 0 ? malloc(tl ? tl : 1) : NULL;
        int ok = t && pread(fd, t, tl, KV_HDR) == (ssize_t)tl;
        if (fd >= 0) close(fd);
        int n = 0;
        if (ok) {
            uint8_t sha[20];
            char hx[41];
            ds4_sha1(t, tl, sha);
            hex40(sha, hx);
            if (!strcmp(hx, name)) n = try_restore(kv, s, name, t, tl, NULL, NULL);
            else quarantine(kv, name, "text does not match its name");
        }
        free(t);
        if (n > 0) { kv->st.hits++; return n; }
        /* that one was rejected: drop it from this search */
        for (int i = 0; i < kv->ne; i++)
            if (!strcmp(kv->e[i].name, name)) { kv->e[i].usable = 0; break; }
    }
}

typedef struct { const char *id; ds4_buf *out; int found; } tool_find;

static int tool_cb(void *ud, const char *id, uint32_t idl, const uint8_t *d, uint32_t dl) {
    tool_find *f = ud;
    if (strlen(f->id) != idl || memcmp(f->id, id, idl)) return 0;
    f->out->n = 0;
    /* a DSML that could not be copied whole is "not found" (the caller
     * then renders canonically), never a truncated block */
    f->found = ds4_buf_append(f->out, d, dl) == DS4_OK;
    return 1;
}

int ds4_kvstore_tool_dsml(ds4_kvstore *kv, const char *id, ds4_buf *out) {
    maybe_rescan(kv);
    for (int i = 0; i < kv->ntools; i++) {
        if (strcmp(kv->tools[i].id, id)) continue;
        char fn[64];
        snprintf(fn, sizeof fn, "%s%s", kv->tools[i].name, KV_EXT);
        int fd = openat(kv->dirfd, fn, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return 0;
        struct stat sb;
        uint8_t h[KV_HDR];
        ds4_kv_file_info in;
        const char *why;
        int found = 0;
        if (!fstat(fd, &sb) && pread(fd, h, KV_HDR, 0) == KV_HDR &&
            !parse_header(h, (uint64_t)sb.st_size, &in, &why) && in.tools_len <= (64u << 20)) {
            uint8_t *buf = malloc(in.tools_len ? in.tools_len : 1);
            if (buf && pread(fd, buf, in.tools_len, (off_t)(KV_HDR + in.text_len + in.payload_len)) ==
                           (ssize_t)in.tools_len) {
                /* each DSML carries its own XXH64, checked by walk_tools */
                tool_find tf = { id, out, 0 };
                walk_tools(buf, in.tools_len, tool_cb, &tf);
                found = tf.found;
            }
            free(buf);
        }
        close(fd);
        return found;
    }
    return 0;
}

int ds4_kvstore_remove(ds4_kvstore *kv, const char *text, size_t len) {
    uint8_t sha[20];
    char name[41], fn[64];
    ds4_sha1(text ? text : "", text ? len : 0, sha);
    hex40(sha, name);
    snprintf(fn, sizeof fn, "%s%s", name, KV_EXT);
    int lk = lock_dir(kv);
    int removed = unlinkat(kv->dirfd, fn, 0) == 0;
    if (removed) rescan(kv);
    unlock_dir(lk);
    return removed;
}
