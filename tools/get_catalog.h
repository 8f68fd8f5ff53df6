/*
 * get_catalog.h -- ds4-get's catalogue: the published DeepSeek V4 GGUFs
 * ds4 reads, by short name, with what is known of each (file name on the
 * model hub, approximate size, exact size and SHA-256 where published,
 * whether it is a main model that ./ds4flash.gguf should point to).
 *
 * Owns: the table and the lookup.  Must not: do I/O or network.
 */
#ifndef DS4_GET_CATALOG_H
#define DS4_GET_CATALOG_H

#include <stdint.h>

/* Where the catalogue's files are published (the reference's
 * download_model.sh, REPO="antirez/deepseek-v4-gguf").  URL = base + "/" +
 * file; DS4_GET_BASE_URL replaces the base (a mirror, the tests). */
#define GET_HUB_BASE_URL "https://huggingface.co/antirez/deepseek-v4-gguf/resolve/main"

typedef struct {
    const char *name;       /* the short name on the command line */
    const char *file;       /* the file name on the hub and on disk */
    const char *about;      /* approximate size as published ("~81 GB") */
    uint64_t size;          /* exact bytes; 0 = not published */
    const char *sha256;     /* 64 lower-case hex; NULL = not published */
    const char *what;       /* quantization / role, one line */
    int main_model;         /* 1: ./ds4flash.gguf is pointed at it */
    int legacy;             /* superseded by an imatrix file */
} get_entry;

extern const get_entry get_catalog[];
extern const int get_catalog_n;

/* The entry called `name`, or NULL. */
const get_entry *get_catalog_find(const char *name);

#endif
