/*
 * mpi.c -- distributed inference over MPI: one model across several
 * processes (docs/distributed.md "Several machines").
 *
 * Design: the distribution lives in the library, under the public API.
 * Every rank runs the same binary.  Rank 0 is the ordinary front end: it
 * loads the model and drives sessions through ds4.h as usual; the session
 * and forward-pass hooks mirror each session operation to the workers as
 * a small command message.  Ranks > 0 call ds4_dist_worker(), which loads
 * the model and serves commands (new/free/reset/checkpoint/rewind a
 * session, evaluate a chunk) until rank 0 sends QUIT (at exit).  The
 * engine reaches the hooks only through the table ds4_dist_init registers
 * (the public ds4_transport.h), never by name: the worker loop runs the
 * engine, so naming each other would make the two one circle of modules
 * (tools/check_layers.py).  This file reaches the engine through the
 * public headers only (ds4*.h; check_layers.py rule 2): the hooks get plain
 * values, session ids and the model's GGUF handle (for the split rules),
 * the rest comes from public accessors (ds4_model_get_info,
 * ds4_model_fingerprint).
 *
 * Pipeline mode: rank r evaluates a run of consecutive layers (balanced by
 * weight bytes, or --dist-layers); rank 0 embeds, the last rank runs the
 * head.  The HC state of a chunk ([T][n_hc][n_embd] floats) goes from rank
 * to rank with point-to-point messages; the logits rows come back to rank
 * 0.  Each rank runs exactly the single-process code on its layers, in the
 * same order, so the logits are bit-identical.
 *
 * Waiting: sends and receives are nonblocking and polled (MPI_Test + a
 * short sleep) instead of blocking in MPI_Recv, which in Open MPI and
 * MPICH spins a core -- on a machine whose cores the ranks share, a
 * spinning idle rank halves the speed of the busy one.  Polling also
 * bounds every wait (--dist-timeout, "Bounded waits" below): a rank that
 * stops answering is named and the job stopped, never a hang.
 *
 * Only standard MPI-3 calls (Open MPI and MPICH).  Errors: MPI_ERRORS_RETURN
 * on MPI_COMM_WORLD; any failed call prints one line naming the rank and
 * the call, then MPI_Abort stops the whole job.  A rank that dies is
 * noticed by the MPI launcher, which stops the job; one that stops
 * answering by the bounded waits (tests/t_mpi.sh).
 *
 * Owns: the MPI state, the command protocol, this run's layer split (the
 * rules of a split are gguf/split.c's, shared with ds4-gguf split).
 * Must not: compute any part of the model, or be called by front ends
 * other than through ds4.h, or by the engine other than through its hook
 * table.  Built without MPI (no mpicc), ds4_dist_init says so, registers
 * nothing, and nothing else here is reachable.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "ds4.h"
#include "ds4_transport.h"
#include "gguf/gguf.h"
#include "gguf/split.h"

#ifdef DS4_MPI
#include <mpi.h>
#endif

int ds4_dist_supported(void) {
#ifdef DS4_MPI
    return 1;
#else
    return 0;
#endif
}

#ifndef DS4_MPI

/* Without MPI no transport is registered: the engine runs one process. */
int ds4_dist_init(int *argc, char ***argv, const char *mode, const char *layers, char **err) {
    (void)argc; (void)argv; (void)mode; (void)layers;
    if (err) *err = strdup("--dist: this build has no MPI support (rebuild with mpicc installed: "
                           "apt-get install openmpi-bin libopenmpi-dev)");
    return DS4_EUNSUP;
}
int ds4_dist_rank(void) { return 0; }
int ds4_dist_set_timeout(double seconds) { return seconds >= 0 && seconds <= 1e6 ? DS4_OK : DS4_EINVAL; }
int ds4_dist_size(void) { return 1; }
int ds4_dist_worker(const char *path, const ds4_model_params *p) { (void)path; (void)p; return 1; }
double ds4_dist_comm_seconds(void) { return 0; }
void ds4_dist_finish(void) {}

#else /* DS4_MPI */

enum { TAG_CMD = 1, TAG_TOKS, TAG_X, TAG_LOGITS, TAG_STATUS, TAG_PING, TAG_PONG };
enum { OP_QUIT = 1, OP_GO, OP_SNEW, OP_SFREE, OP_RESET, OP_CKPT, OP_REWIND, OP_EVAL };

typedef struct { int32_t op, sid, a, b, c, d; } dcmd;

/* What a worker reports after loading: its status, model fingerprint,
 * build version and, on failure, the reason. */
typedef struct {
    int32_t rc;
    uint8_t fp[20];
    char version[64];
    int32_t lo, hi;           /* the layers it will run */
    char msg[400];
} dstatus;

static struct {
    int on, rank, size, quit_sent, finalized;
    int part;                 /* the loaded file is one rank's part (ds4.split) */
    int xpart;                /* ... of an experts split (ds4.split.experts) */
    int mode;                 /* 1 = pipeline */
    char *layers_spec;        /* --dist-layers, or NULL */
    int lo, hi;               /* this rank's layers [lo, hi) */
    int n_layer, n_expert;    /* the loaded model's (ds4_model_get_info) */
    int *first;               /* [size+1] first layer of each rank */
    int next_sid;
    int want_all;             /* worker: the current chunk's logits are all wanted */
    double comm;              /* seconds in send/recv (waits included) */
    double timeout;           /* --dist-timeout: seconds; 0 = wait forever */
    MPI_Request *sends;       /* pipeline: micro-batches in flight to rank+1 */
    int n_sends, cap_sends;
} G = { .timeout = DS4_DIST_TIMEOUT_DEFAULT };

static void fatal(const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, s, &len);
    fprintf(stderr, "ds4: rank %d: MPI %s failed: %s -- stopping every rank\n", G.rank, what, s);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static double now(void) { return MPI_Wtime(); }

static void register_transport(void);

/* ---------------------------------------------------------------------- */
/* Bounded waits (--dist-timeout)                                          */
/* ---------------------------------------------------------------------- */

/* A rank that stops answering (SIGSTOP, a hung machine, a network
 * partition) is not noticed by the launcher, which only sees processes
 * die.  So every wait that rank 0's work depends on is bounded: after
 * G.timeout seconds without the message, the waiting rank pings every
 * other rank; a rank that is itself waiting answers from its poll loop,
 * a stopped or cut-off rank cannot.  The silent ranks are named in one
 * message and MPI_Abort stops the job.  A rank busy computing does not
 * answer either, which is why the default is far above any one step's
 * compute time (a micro-batch through one rank's layers).  A worker's
 * wait for rank 0's next command is not bounded: a server may idle for
 * hours. */

static void ping_answer(void) {
    for (;;) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PING, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS || !flag)
            return;
        int32_t v;
        MPI_Recv(&v, 1, MPI_INT32_T, st.MPI_SOURCE, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Request rq;
        /* small: sent eagerly; the request is not waited for */
        if (MPI_Isend(&G.rank, 1, MPI_INT32_T, st.MPI_SOURCE, TAG_PONG, MPI_COMM_WORLD, &rq) == MPI_SUCCESS)
            MPI_Request_free(&rq);
    }
}

static void sleep_ns(long ns) {
    struct timespec ts = { 0, ns };
    nanosleep(&ts, NULL);
}

/* No message from `peer` for G.timeout seconds: find who is silent, say
 * so, stop every rank. */
static void stalled(int peer, const char *what) {
    int P = G.size;
    char *alive = calloc((size_t)P, 1);
    MPI_Request *rq = calloc((size_t)P, sizeof *rq);
    static int32_t one = 1;
    if (alive && rq) {
        for (int r = 0; r < P; r++)
            if (r != G.rank) MPI_Isend(&one, 1, MPI_INT32_T, r, TAG_PING, MPI_COMM_WORLD, &rq[r]);
        alive[G.rank] = 1;
        /* the others answer within one poll interval when they are waiting
         * themselves; give them a few seconds */
        double t0 = now(), grace = G.timeout < 3 ? G.timeout : 3;
        int n_alive = 1;
        while (n_alive < P && now() - t0 < grace) {
            ping_answer();
            int flag = 0;
            MPI_Status st;
            if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_PONG, MPI_COMM_WORLD, &flag, &st) == MPI_SUCCESS && flag) {
                int32_t v;
                MPI_Recv(&v, 1, MPI_INT32_T, st.MPI_SOURCE, TAG_PONG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (!alive[st.MPI_SOURCE]) n_alive++;
                alive[st.MPI_SOURCE] = 1;
                continue;
            }
            sleep_ns(1000000);
        }
    }
    char list[256] = "";
    size_t k = 0;
    int n_silent = 0;
    for (int r = 0; r < P && alive; r++)
        if (!alive[r] && k < sizeof list - 16) {
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", n_silent ? ", " : "", r);
            n_silent++;
        }
    if (!n_silent) snprintf(list, sizeof list, "%d", peer);   /* all answer: name the one awaited */
    char why[80];
    if (!strcmp(what, "send")) snprintf(why, sizeof why, "rank %d took no message", peer);
    else if (peer >= 0) snprintf(why, sizeof why, "no message from rank %d", peer);
    else snprintf(why, sizeof why, "the exchange of %s did not finish", what);
    fprintf(stderr, "ds4: rank %d: rank%s %s stopped answering (%s in %g s, --dist-timeout): "
            "stopped, hung or cut off from the network -- stopping every rank\n",
            G.rank, n_silent > 1 ? "s" : "", list, why, G.timeout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Wait for `rq` to complete, polling (see the top), answering pings; with
 * `bounded`, at most G.timeout seconds (then `stalled`). */
static void dwait(MPI_Request *rq, int peer, const char *what, int bounded, double t0) {
    /* a reply usually follows within microseconds (a decode step of a small
     * model): yield for ~100 us first, then sleep, growing to 0.5 ms */
    long ns = 20000;
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) fatal(what, rc);
        if (flag) return;
        ping_answer();
        double el = now() - t0;
        if (bounded && G.timeout > 0 && el > G.timeout) stalled(peer, what);
        if (el < 1e-4) { sched_yield(); continue; }
        sleep_ns(ns);
        if (ns < 500000) ns += ns / 4;
    }
}

static void dsend_b(const void *p, int count, MPI_Datatype t, int to, int tag, int bounded) {
    double t0 = now();
    MPI_Request rq;
    int rc = MPI_Isend((void *)p, count, t, to, tag, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) fatal("send", rc);
    dwait(&rq, to, "send", bounded, t0);
    G.comm += now() - t0;
}
static void dsend(const void *p, int count, MPI_Datatype t, int to, int tag) {
    dsend_b(p, count, t, to, tag, 1);
}

/* Poll for the message (see the top); bounded unless it is a worker
 * waiting for rank 0's next command. */
static void drecv_b(void *p, int count, MPI_Datatype t, int from, int tag, int bounded) {
    double t0 = now();
    MPI_Request rq;
    int rc = MPI_Irecv(p, count, t, from, tag, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) fatal("recv", rc);
    dwait(&rq, from, "message", bounded, t0);
    G.comm += now() - t0;
}
static void drecv(void *p, int count, MPI_Datatype t, int from, int tag) {
    drecv_b(p, count, t, from, tag, 1);
}

static void send_all(const dcmd *c) {
    for (int r = 1; r < G.size; r++) dsend(c, (int)(sizeof *c), MPI_BYTE, r, TAG_CMD);
}

static void quit_workers(void) {
    if (G.rank != 0 || G.quit_sent) return;
    G.quit_sent = 1;
    dcmd c = { .op = OP_QUIT };
    send_all(&c);
}

static void at_exit(void) {
    if (!G.on || G.finalized) return;
    quit_workers();
    G.finalized = 1;
    MPI_Finalize();
}

int ds4_dist_init(int *argc, char ***argv, const char *mode, const char *layers, char **err) {
    if (err) *err = NULL;
    int md = !mode ? 0 : !strcmp(mode, "pipeline") ? 1 : !strcmp(mode, "experts") ? 2 : 0;
    if (!md) {
        char msg[200];
        snprintf(msg, sizeof msg, "--dist: unknown mode '%.40s' (pipeline or experts)",
                 mode ? mode : "");
        if (err) *err = strdup(msg);
        return DS4_EINVAL;
    }
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        if (err) *err = strdup("--dist: MPI_Init_thread failed");
        return DS4_EIO;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &G.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &G.size);
    G.on = 1;
    G.mode = md;
    G.layers_spec = layers ? strdup(layers) : NULL;
    /* the server evaluates on its worker thread, exits on the main one:
     * MPI calls come from two threads, never at once */
    if (provided < MPI_THREAD_SERIALIZED) {
        if (err) *err = strdup("--dist: this MPI library does not support MPI_THREAD_SERIALIZED");
        G.finalized = 1;
        MPI_Finalize();
        G.on = 0;
        return DS4_EUNSUP;
    }
    if (G.size < 2) {
        if (err) *err = strdup("--dist: needs at least 2 ranks (start with mpirun -np N)");
        G.finalized = 1;
        MPI_Finalize();
        G.on = 0;
        return DS4_EINVAL;
    }
    atexit(at_exit);
    register_transport();
    return G.rank;
}

int ds4_dist_rank(void) { return G.on ? G.rank : 0; }

int ds4_dist_set_timeout(double seconds) {
    if (!(seconds >= 0) || seconds > 1e6) return DS4_EINVAL;
    G.timeout = seconds;
    return DS4_OK;
}

/* -m under --dist: "PREFIX-rank%d.gguf" names each rank's part */
static char *hook_path(const char *path) { return ds4_split_path(path, G.on ? G.rank : 0); }
int ds4_dist_size(void) { return G.on ? G.size : 1; }
static int hook_is_root(void) { return !G.on || G.rank == 0; }
double ds4_dist_comm_seconds(void) { return G.comm; }

void ds4_dist_finish(void) { at_exit(); }

/* ---------------------------------------------------------------------- */
/* Layer split                                                             */
/* ---------------------------------------------------------------------- */

static int plan_layers(const char *path, const gguf_file *gf, char *msg, size_t cap) {
    int P = G.size;
    free(G.first);
    G.first = calloc((size_t)P + 1, sizeof(int));
    if (!G.first) { snprintf(msg, cap, "out of memory"); return DS4_ENOMEM; }
    if (G.mode == 2) {
        /* experts: every rank runs every layer, and a share of the experts */
        int E = G.n_expert;
        if (G.layers_spec) {
            snprintf(msg, cap, "--dist-layers applies to --dist pipeline only");
            return DS4_EINVAL;
        }
        if (E < P) {
            snprintf(msg, cap, "%d ranks but the model has only %d routed experts a layer "
                     "(a rank needs one)", P, E);
            return DS4_EINVAL;
        }
        if (G.part && !G.xpart) {
            snprintf(msg, cap, "%s holds one rank's layers (a pipeline split): it cannot run "
                     "--dist experts", path);
            return DS4_EINVAL;
        }
        for (int r = 0; r < P; r++) G.first[r] = 0;
        G.first[P] = G.n_layer;
        return DS4_OK;
    }
    if (G.part) {
        /* a per-rank file: its split, written by ds4-gguf split, is the plan */
        if (G.layers_spec) {
            snprintf(msg, cap, "--dist-layers: %s is already split (ds4.split.first)", path);
            return DS4_EINVAL;
        }
        return ds4_split_info(gf, G.n_layer, G.rank, P, G.first, NULL, msg, cap);
    }
    return ds4_split_plan_pipeline(gf, G.n_layer, P, G.layers_spec, G.first, msg, cap);
}

/* ---------------------------------------------------------------------- */
/* Load: every worker reports to rank 0, which answers GO or QUIT          */
/* ---------------------------------------------------------------------- */

static int hook_model_loaded(const ds4_model *m, const char *path, const gguf_file *gf, int rc,
                             char **err) {
    if (!G.on) return rc;
    char msg[400] = "";
    /* the model's identity: a part names the whole file it came from */
    uint8_t ident[20];
    if (rc == DS4_OK) {
        ds4_model_info info;
        ds4_model_get_info(m, &info);
        G.n_layer = info.n_layer;
        G.n_expert = info.n_expert;
        G.part = gguf_find(gf, "ds4.split.ranks") != NULL;
        G.xpart = G.part && gguf_find(gf, "ds4.split.experts") != NULL;
        ds4_model_fingerprint(m, ident);
        if (G.xpart && G.mode != 2) {
            snprintf(msg, sizeof msg, "%s holds a share of every layer's experts (an experts "
                     "split): run it with --dist experts", path);
            rc = DS4_EINVAL;
        } else if (G.xpart) {
            /* the loader bound the slice the file names; it must be this
             * rank's share of this rank count */
            rc = ds4_split_experts_info(gf, G.n_expert, G.rank, G.size, NULL, NULL,
                                        ident, msg, sizeof msg);
        } else if (G.part) {
            rc = ds4_split_info(gf, G.n_layer, G.rank, G.size, NULL, ident,
                                msg, sizeof msg);
        }
    }
    if (rc == DS4_OK) rc = plan_layers(path, gf, msg, sizeof msg);
    if (rc == DS4_OK) {
        G.lo = G.mode == 2 ? 0 : G.first[G.rank];
        G.hi = G.mode == 2 ? G.n_layer : G.first[G.rank + 1];
    }
    if (G.rank != 0) {
        dstatus st;
        memset(&st, 0, sizeof st);
        st.rc = rc;
        st.lo = G.lo;
        st.hi = G.hi;
        if (rc == DS4_OK) memcpy(st.fp, ident, 20);
        snprintf(st.version, sizeof st.version, "%s", ds4_version());
        snprintf(st.msg, sizeof st.msg, "%s", msg[0] ? msg : (err && *err) ? *err : ds4_strerror(rc));
        dsend(&st, (int)sizeof st, MPI_BYTE, 0, TAG_STATUS);
        dcmd c;
        /* rank 0 may still wait for a slower rank: not bounded here */
        drecv_b(&c, (int)sizeof c, MPI_BYTE, 0, TAG_CMD, 0);
        if (c.op != OP_GO) {
            if (err && !*err) *err = strdup("stopped by rank 0");
            return rc != DS4_OK ? rc : DS4_ECANCEL;
        }
        return rc;
    }
    if (rc != DS4_OK) {
        if (msg[0] && err && !*err) *err = strdup(msg);
        quit_workers();
        return rc;
    }
    /* rank 0: every worker's report, in rank order; the first problem wins */
    char bad[600] = "";
    for (int r = 1; r < G.size; r++) {
        dstatus st;
        drecv(&st, (int)sizeof st, MPI_BYTE, r, TAG_STATUS);
        st.msg[sizeof st.msg - 1] = 0;
        st.version[sizeof st.version - 1] = 0;
        if (bad[0]) continue;
        if (st.rc != DS4_OK)
            snprintf(bad, sizeof bad, "--dist: rank %d cannot load its part: %s", r, st.msg);
        else if (strcmp(st.version, ds4_version()))
            snprintf(bad, sizeof bad, "--dist: rank %d runs another build (%s, rank 0: %s)",
                     r, st.version, ds4_version());
        else if (memcmp(st.fp, ident, 20))
            snprintf(bad, sizeof bad, "--dist: rank %d loaded a different model file "
                     "(fingerprints differ)", r);
        else if (G.mode == 1 && (st.lo != G.first[r] || st.hi != G.first[r + 1]))
            snprintf(bad, sizeof bad, "--dist: rank %d would run layers %d..%d, rank 0 expects "
                     "%d..%d (per-rank files of another split?)", r, st.lo, st.hi - 1,
                     G.first[r], G.first[r + 1] - 1);
    }
    if (bad[0]) {
        if (err) *err = strdup(bad);
        quit_workers();
        return DS4_EFORMAT;
    }
    dcmd go = { .op = OP_GO };
    send_all(&go);
    return DS4_OK;
}

/* ---------------------------------------------------------------------- */
/* Session mirroring (rank 0)                                              */
/* ---------------------------------------------------------------------- */

static void cmd_s(int id, int op, int a) {
    if (!G.on || G.rank != 0 || !id || G.quit_sent) return;
    dcmd c = { .op = op, .sid = id, .a = a };
    send_all(&c);
}

/* The session's id: the workers' name for it (0 = none, on workers too) */
static int hook_session_new(int ctx, int chunk, int no_qat) {
    if (!G.on || G.rank != 0 || G.quit_sent) return 0;
    int id = ++G.next_sid;
    dcmd c = { .op = OP_SNEW, .sid = id, .a = ctx, .b = chunk, .c = no_qat };
    send_all(&c);
    return id;
}
static void hook_session_free(int id) { cmd_s(id, OP_SFREE, 0); }
static void hook_session_reset(int id) { cmd_s(id, OP_RESET, 0); }
static void hook_session_checkpoint(int id, int slot) { cmd_s(id, OP_CKPT, slot); }
static void hook_session_rewind(int id, int n) { cmd_s(id, OP_REWIND, n); }

/* ---------------------------------------------------------------------- */
/* Forward pass                                                            */
/* ---------------------------------------------------------------------- */

static int hook_chunk_begin(int id, int cap_hidden, const int32_t *toks, int n, int *want_all,
                            int *lo, int *hi) {
    *lo = G.lo;
    *hi = G.hi;
    if (cap_hidden) return DS4_EUNSUP;    /* the HC rows live on several ranks */
    if (G.rank == 0) {
        if (!id || G.quit_sent) return DS4_EINVAL;
        dcmd c = { .op = OP_EVAL, .sid = id, .a = n, .b = *want_all };
        send_all(&c);
        for (int r = 1; r < G.size; r++) dsend(toks, n, MPI_INT32_T, r, TAG_TOKS);
    } else {
        *want_all = G.want_all;
    }
    return DS4_OK;
}

static int hook_recv_x(float *X, int count) {
    drecv(X, count, MPI_FLOAT, G.rank - 1, TAG_X);
    return DS4_OK;
}

/* Micro-batches go out with MPI_Isend, so this rank starts the next one
 * while the next rank receives; the rows stay untouched until
 * hook_send_done (deepseek4.c writes each micro-batch's own rows). */
static int hook_send_x(const float *X, int count) {
    if (G.n_sends == G.cap_sends) {
        int nc = G.cap_sends ? 2 * G.cap_sends : 16;
        MPI_Request *q = realloc(G.sends, (size_t)nc * sizeof *q);
        if (!q) { fprintf(stderr, "ds4: rank %d: out of memory\n", G.rank); MPI_Abort(MPI_COMM_WORLD, 1); exit(1); }
        G.sends = q;
        G.cap_sends = nc;
    }
    double t0 = now();
    int rc = MPI_Isend((void *)X, count, MPI_FLOAT, G.rank + 1, TAG_X, MPI_COMM_WORLD,
                       &G.sends[G.n_sends++]);
    if (rc != MPI_SUCCESS) fatal("send", rc);
    G.comm += now() - t0;
    return DS4_OK;
}

static void hook_progress(void) {
    /* a completed request becomes MPI_REQUEST_NULL, which send_done's
     * wait then passes at once */
    for (int i = 0; i < G.n_sends; i++) {
        int flag = 0;
        if (MPI_Test(&G.sends[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    }
}

static int hook_send_done(void) {
    double t0 = now();
    for (int i = 0; i < G.n_sends; i++) dwait(&G.sends[i], G.rank + 1, "send", 1, t0);
    G.n_sends = 0;
    G.comm += now() - t0;
    return DS4_OK;
}

/* Pipeline micro-batch size: 2 micro-batches a rank keep every rank busy
 * but for the pipeline's fill and drain ((P-1)/(2P+P-1) of a chunk's time
 * idle).  Floor: every micro-batch decodes the weights of nearly every
 * routed expert again, so it must give an expert ~4 tokens on average
 * (4 E/K: 171 tokens at Flash's 256 experts, 6 used) -- measured on the
 * medium model, 64-token micro-batches (1.5 tokens an expert) cost 30 %
 * more CPU than the whole 256-token chunk -- and at least 16 tokens.
 * Experts mode: the whole chunk. */
static int hook_microbatch(int n, int n_expert, int n_expert_used) {
    if (G.mode != 1 || G.size < 2) return n;
    int floor = n_expert_used > 0 ? (4 * n_expert + n_expert_used - 1) / n_expert_used : 16;
    if (floor < 16) floor = 16;
    int m = (n + 2 * G.size - 1) / (2 * G.size);
    if (m < floor) m = floor;
    return m < n ? m : n;
}

static int hook_runs_head(void) {
    return G.mode == 2 ? G.rank == 0 : G.rank == G.size - 1;
}

static void hook_expert_range(int n_expert, int *lo, int *hi) {
    if (G.mode != 2) { *lo = 0; *hi = n_expert; return; }
    ds4_split_expert_share(n_expert, G.rank, G.size, lo, hi);
}

/* Every rank's rows of the routed outputs to every rank (they all run the
 * dense part next); the sum itself stays in deepseek4.c, in its order. */
static int hook_gather_rows(float *dn, int D, const int *eoff, int n_expert, int npairs) {
    static int *cnt, *off, ncap;
    if (ncap < G.size) {
        free(cnt); free(off);
        cnt = malloc((size_t)G.size * sizeof *cnt);
        off = malloc((size_t)G.size * sizeof *off);
        if (!cnt || !off) { free(cnt); free(off); cnt = off = NULL; ncap = 0; return DS4_ENOMEM; }
        ncap = G.size;
    }
    for (int r = 0; r < G.size; r++) {
        int lo, hi;
        ds4_split_expert_share(n_expert, r, G.size, &lo, &hi);
        int a = lo < n_expert ? eoff[lo] : npairs, b = hi < n_expert ? eoff[hi] : npairs;
        off[r] = a * D;
        cnt[r] = (b - a) * D;
    }
    double t0 = now();
    MPI_Request rq;
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dn, cnt, off, MPI_FLOAT,
                             MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) fatal("allgatherv", rc);
    dwait(&rq, -1, "expert rows", 1, t0);
    G.comm += now() - t0;
    return DS4_OK;
}

static int hook_logits(float *logits, int cnt) {
    if (G.mode == 2) return DS4_OK;   /* rank 0 ran the head itself */
    int last = G.size - 1;
    if (last == 0) return DS4_OK;
    if (G.rank == last) dsend(logits, cnt, MPI_FLOAT, 0, TAG_LOGITS);
    else if (G.rank == 0) drecv(logits, cnt, MPI_FLOAT, last, TAG_LOGITS);
    return DS4_OK;
}

/* ---------------------------------------------------------------------- */
/* Worker                                                                  */
/* ---------------------------------------------------------------------- */

static void worker_fail(const char *what, int rc) {
    fprintf(stderr, "ds4: rank %d: %s failed: %s -- stopping every rank\n", G.rank, what,
            ds4_strerror(rc));
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

int ds4_dist_worker(const char *path, const ds4_model_params *p) {
    if (!G.on || G.rank == 0) return 1;
    /* a worker ends when rank 0 says QUIT: a Ctrl-C or SIGTERM that mpirun
     * forwards to every rank is rank 0's to handle */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    char *err = NULL;
    ds4_model *m = ds4_model_load(path, p, &err);   /* "%d" in path: see hook_path */
    if (!m) {
        /* rank 0 reports the reason; the worker only leaves */
        free(err);
        at_exit();
        return 1;
    }
    ds4_session **ss = NULL;
    int nss = 0;
    int32_t *toks = NULL;
    int ntoks = 0;
    for (;;) {
        dcmd c;
        drecv_b(&c, (int)sizeof c, MPI_BYTE, 0, TAG_CMD, 0);   /* idle: not bounded */
        if (c.op == OP_QUIT) break;
        if (c.op == OP_SNEW) {
            if (c.sid >= nss) {
                int nn = c.sid + 16;
                ds4_session **q = realloc(ss, (size_t)nn * sizeof *q);
                if (!q) worker_fail("allocating the session table", DS4_ENOMEM);
                memset(q + nss, 0, (size_t)(nn - nss) * sizeof *q);
                ss = q;
                nss = nn;
            }
            ds4_session_params sp;
            ds4_session_params_default(&sp);
            sp.ctx_size = c.a;
            sp.prefill_chunk = c.b;
            sp.no_qat = c.c;
            ss[c.sid] = ds4_session_new(m, &sp, &err);
            if (!ss[c.sid]) {
                fprintf(stderr, "ds4: rank %d: %s -- stopping every rank\n", G.rank,
                        err ? err : "cannot create a session");
                fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, 1);
                exit(1);
            }
            continue;
        }
        if (c.sid <= 0 || c.sid >= nss || !ss[c.sid]) worker_fail("command for an unknown session", DS4_EINVAL);
        ds4_session *s = ss[c.sid];
        int rc = DS4_OK;
        switch (c.op) {
        case OP_SFREE: ds4_session_free(s); ss[c.sid] = NULL; break;
        case OP_RESET: ds4_session_reset(s); break;
        case OP_CKPT: rc = ds4_session_checkpoint(s, c.a); break;
        case OP_REWIND: rc = ds4_session_rewind(s, c.a); break;
        case OP_EVAL:
            if (c.a > ntoks) {
                int32_t *q = realloc(toks, (size_t)c.a * sizeof *q);
                if (!q) worker_fail("allocating tokens", DS4_ENOMEM);
                toks = q;
                ntoks = c.a;
            }
            drecv(toks, c.a, MPI_INT32_T, 0, TAG_TOKS);
            /* the head rank's session grows its logits rows itself
             * (deepseek4.c, once chunk_begin says want_all) */
            G.want_all = c.b;
            rc = ds4_session_eval(s, toks, c.a, NULL, NULL);
            break;
        default: worker_fail("unknown command", DS4_EINVAL);
        }
        if (rc != DS4_OK) worker_fail("a session command", rc);
    }
    for (int i = 0; i < nss; i++) ds4_session_free(ss[i]);
    free(ss);
    free(toks);
    ds4_model_free(m);
    G.finalized = 1;
    MPI_Finalize();
    return 0;
}

/* ---------------------------------------------------------------------- */
/* The engine's hooks (ds4_transport.h)                                 */
/* ---------------------------------------------------------------------- */

static const ds4_transport mpi_transport = {
    .path = hook_path,
    .model_loaded = hook_model_loaded,
    .session_new = hook_session_new,
    .session_free = hook_session_free,
    .session_reset = hook_session_reset,
    .session_checkpoint = hook_session_checkpoint,
    .session_rewind = hook_session_rewind,
    .chunk_begin = hook_chunk_begin,
    .recv_x = hook_recv_x,
    .send_x = hook_send_x,
    .send_done = hook_send_done,
    .progress = hook_progress,
    .microbatch = hook_microbatch,
    .logits = hook_logits,
    .runs_head = hook_runs_head,
    .expert_range = hook_expert_range,
    .gather_rows = hook_gather_rows,
    .is_root = hook_is_root,
};

/* From ds4_dist_init, once MPI runs with at least 2 ranks: from here on
 * the engine's load, sessions and forward pass go through these hooks. */
static void register_transport(void) { ds4_transport_set(&mpi_transport); }

#endif /* DS4_MPI */
