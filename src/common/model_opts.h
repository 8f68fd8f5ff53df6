/*
 * model_opts.h -- the model and runtime flags every model-loading binary
 * shares (model_opts.c): one parser, one help text, one translation into
 * the engine's load and session parameters, one MPI start-up.
 *
 * A binary names the groups it takes (DS4_MO_*), sets its own defaults
 * after ds4_model_opts_init, offers each argument to ds4_model_opts_parse
 * before its own flags, and prints ds4_model_opts_help in its --help.  The
 * flags keep the names and meanings they had in each binary (stable
 * contracts); a binary that lacked one of a group it takes now has it.
 *
 * Must not: load models or open sessions itself (the binary does, with the
 * parameters filled here), print anything but help and argument errors.
 */
#ifndef DS4_COMMON_MODEL_OPTS_H
#define DS4_COMMON_MODEL_OPTS_H

#include <stdint.h>
#include <stdio.h>

#include "ds4.h"
#include "common/args.h"

enum {
    DS4_MO_MODEL = 1u << 0,    /* -m/--model FILE, -t/--threads N */
    DS4_MO_CTX = 1u << 1,      /* -c/--ctx N */
    DS4_MO_CHUNK = 1u << 2,    /* --chunk N */
    DS4_MO_QAT = 1u << 3,      /* --no-qat */
    DS4_MO_SSD = 1u << 4,      /* --ssd-streaming, --ssd-streaming-cache-experts */
    DS4_MO_DIST = 1u << 5,     /* --dist, --dist-layers, --dist-timeout */
    DS4_MO_LOOKUP = 1u << 6,   /* --lookup N */
    DS4_MO_MTP = 1u << 7,      /* --mtp FILE, --mtp-draft N */
    DS4_MO_THINK = 1u << 8,    /* --think, --think-max, --nothink */
    DS4_MO_TEMP = 1u << 9,     /* --temp F, --seed N */
    DS4_MO_FILTERS = 1u << 10, /* --top-k, --top-p, --min-p */
    DS4_MO_KV = 1u << 11,      /* --kv-disk-dir and the --kv-* policy flags */
    DS4_MO_STEER = 1u << 12,   /* --steer, --steer-scale, --steer-layers */
};

typedef struct {
    const char *prog;          /* "ds4-server": the name in messages */
    unsigned groups;           /* DS4_MO_* this binary takes */
    /* DS4_MO_MODEL */
    const char *model;         /* default ./ds4flash.gguf */
    int model_set;
    int threads;               /* 0 = ds4_default_threads() */
    /* DS4_MO_CTX, DS4_MO_CHUNK, DS4_MO_QAT */
    int ctx, ctx_set;          /* default 32768 */
    int ctx_min;               /* the smallest --ctx this binary accepts (16) */
    int chunk;                 /* default 2048 */
    int no_qat;
    /* DS4_MO_SSD */
    int ssd_streaming;
    uint64_t ssd_cache_bytes;  /* 0 = the engine's default */
    /* DS4_MO_DIST */
    const char *dist, *dist_layers;
    double dist_timeout;       /* < 0: the default */
    /* DS4_MO_LOOKUP, DS4_MO_MTP */
    int lookup;                /* default 0 */
    const char *mtp;
    int mtp_draft;             /* -1 = not given */
    /* DS4_MO_THINK, DS4_MO_TEMP, DS4_MO_FILTERS */
    ds4_think think;           /* default DS4_THINK_HIGH */
    ds4_sampler_params sp;     /* ds4_sampler_params_default */
    int seed_set;
    const char *seed_default;  /* help: what happens without --seed */
    /* DS4_MO_KV */
    const char *kv_dir;
    uint64_t kv_space_mb;      /* default 4096 */
    int kv_variants;
    ds4_kv_policy kv_policy;
    int kv_flags;              /* a --kv-* flag other than --kv-disk-dir was given */
    /* DS4_MO_STEER */
    const char *steer, *steer_layers;
    double steer_scale;
    int steer_scale_set;
} ds4_model_opts;

/* Defaults of every field (the binary may change them before parsing). */
void ds4_model_opts_init(ds4_model_opts *o, const char *prog, unsigned groups);

/* Offer the current argument of `a`: 1 when it was one of the groups'
 * flags (its value is consumed; a bad value exits with status 2 and the
 * usual message), 0 when it is the binary's to handle. */
int ds4_model_opts_parse(ds4_model_opts *o, ds4_args *a);

/* The help lines of the groups in `o->groups`, under their headings, with
 * the defaults `o` holds (call on a freshly initialised copy). */
void ds4_model_opts_help(FILE *f, const ds4_model_opts *o);

/* The engine's load parameters (threads, SSD streaming, MTP file). */
void ds4_model_opts_model_params(const ds4_model_opts *o, ds4_model_params *mp);
/* MTP drafts per pass: --mtp-draft N, else DS4_MTP_DRAFT_DEFAULT with
 * --mtp, else 0. */
int ds4_model_opts_mtp_draft(const ds4_model_opts *o);
/* Session parameters: context, chunk, --no-qat. */
void ds4_model_opts_session_params(const ds4_model_opts *o, ds4_session_params *sp);

/* --dist under mpirun: join the ranks.  Returns -1 (message in *err,
 * malloc'd) when MPI cannot start, 0 when this process goes on as the
 * front end (rank 0, or no --dist), 1 when it was a worker rank that has
 * served rank 0 to the end: exit with *worker_rc. */
int ds4_model_opts_start_dist(const ds4_model_opts *o, int *argc, char ***argv,
                              int *worker_rc, char **err);

#endif
