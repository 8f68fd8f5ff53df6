/*
 * get_fetch.h -- ds4-get's resumable download of one URL into NAME.part
 * (libcurl): HTTP range resume, retries with backoff, incremental SHA-256,
 * size and checksum checks, a disk-space check, progress, Ctrl+C.
 *
 * Owns: the .part file while it runs (locked against a second ds4-get) and
 * the network.  Must not: touch the final name, the .sha256 record or the
 * ./ds4flash.gguf link (ds4_get.c does, after a verified download).
 */
#ifndef DS4_GET_FETCH_H
#define DS4_GET_FETCH_H

#include <stdint.h>

enum { FETCH_OK = 0, FETCH_FAIL = 1, FETCH_INTERRUPTED = 130 };

typedef struct {
    const char *url;
    const char *part;        /* DIR/NAME.part: resumed if present */
    const char *dir;         /* its directory (disk space) */
    const char *label;       /* NAME, in messages */
    const char *token;       /* bearer token for the URL's host, or NULL */
    uint64_t want_size;      /* expected bytes; 0 = unknown */
    const char *want_sha;    /* expected SHA-256 (64 lower-case hex), or NULL */
    const char *sha_from;    /* where want_sha comes from, in messages */
    int retries;             /* attempts in a row without progress, after the first */
    long stall_secs;         /* a transfer receiving nothing this long is retried */
} fetch_job;

typedef struct {
    uint64_t size;           /* bytes in the complete .part */
    char sha[65];            /* its SHA-256, computed */
    int checked;             /* 1: compared with a known SHA-256 and equal */
    char sha_from[96];       /* where that SHA-256 came from */
} fetch_result;

/* SIGINT/SIGTERM/SIGHUP stop a download at the next callback, leaving the
 * .part to resume.  Call once before fetch_run. */
void fetch_install_signals(void);
/* The signal that stopped us (0: none). */
int fetch_stopped(void);

/* Downloads j->url into j->part (appending to what is there) until it is
 * complete, then checks its size and SHA-256.  FETCH_OK: the .part is the
 * whole file, flushed to disk and closed; its SHA-256 equals the expected
 * one where one was known.  FETCH_FAIL: a clear message was printed; a
 * corrupt .part was removed, a good partial one kept.  FETCH_INTERRUPTED:
 * a signal; the .part is kept and the message says how to resume. */
int fetch_run(const fetch_job *j, fetch_result *r);

/* SHA-256 of a whole file (lower-case hex into out[65]), with progress on
 * stderr for large files; 0 ok, -1 (message printed) on error, 130 when a
 * signal stopped it. */
int fetch_hash_file(const char *path, const char *label, char out[65], uint64_t *size);

#endif
