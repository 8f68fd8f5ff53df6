/*
 * toolmem.c -- see toolmem.h.
 *
 * Layout: a chained hash table from id to node; nodes are also on one
 * doubly linked LRU list (head = oldest).  Each node points at a shared,
 * reference-counted block record (text, reasoning, and the ordered list of
 * the block's ids/names/arguments for matching).  Evicting one id of a
 * block makes the whole block unmatchable (a message must present all its
 * ids), which is what we want: the block record is freed with its last id.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "toolmem.h"
#include "base/json_py.h"

typedef struct block {
    int refs;
    int n;
    char **ids, **names, **args;
    char *text;
    char *reasoning;       /* NULL = none */
    size_t text_len, reasoning_len;
} block;

typedef struct node {
    char *id;
    block *b;
    struct node *hnext;            /* hash chain */
    struct node *prev, *next;      /* LRU list */
} node;

struct toolmem {
    pthread_mutex_t mu;
    size_t max_ids, count;
    node **tab;
    size_t mask;
    node *head, *tail;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 1099511628211ull; }
    return h;
}

static void block_unref(block *b) {
    if (!b || --b->refs > 0) return;
    for (int i = 0; i < b->n; i++) { free(b->ids[i]); free(b->names[i]); free(b->args[i]); }
    free(b->ids); free(b->names); free(b->args);
    free(b->text); free(b->reasoning);
    free(b);
}

toolmem *toolmem_new(size_t max_ids) {
    toolmem *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->max_ids = max_ids;
    t->mask = 1023;
    t->tab = calloc(t->mask + 1, sizeof *t->tab);
    if (!t->tab) { free(t); return NULL; }
    return t;
}

void toolmem_free(toolmem *t) {
    if (!t) return;
    node *n = t->head;
    while (n) {
        node *x = n->next;
        block_unref(n->b);
        free(n->id);
        free(n);
        n = x;
    }
    free(t->tab);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static node **slot_of(toolmem *t, const char *id) {
    node **p = &t->tab[hash_str(id) & t->mask];
    while (*p && strcmp((*p)->id, id)) p = &(*p)->hnext;
    return p;
}

static void lru_unlink(toolmem *t, node *n) {
    if (n->prev) n->prev->next = n->next; else t->head = n->next;
    if (n->next) n->next->prev = n->prev; else t->tail = n->prev;
    n->prev = n->next = NULL;
}

static void lru_push(toolmem *t, node *n) {
    n->prev = t->tail;
    n->next = NULL;
    if (t->tail) t->tail->next = n; else t->head = n;
    t->tail = n;
}

static void remove_node(toolmem *t, node *n) {
    node **p = slot_of(t, n->id);
    if (*p == n) *p = n->hnext;
    lru_unlink(t, n);
    block_unref(n->b);
    free(n->id);
    free(n);
    t->count--;
}

static void grow(toolmem *t) {
    size_t nm = t->mask * 2 + 1;
    node **nt = calloc(nm + 1, sizeof *nt);
    if (!nt) return;    /* keep the old table: longer chains, still correct */
    for (node *n = t->head; n; n = n->next) {
        size_t h = hash_str(n->id) & nm;
        n->hnext = nt[h];
        nt[h] = n;
    }
    free(t->tab);
    t->tab = nt;
    t->mask = nm;
}

static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

int toolmem_put(toolmem *t, const char *const *ids, const char *const *names,
                const char *const *args, int n, const char *text, size_t text_len,
                const char *reasoning, size_t reasoning_len) {
    if (!t || n <= 0 || t->max_ids == 0) return 0;
    block *b = calloc(1, sizeof *b);
    if (!b) return -1;
    b->ids = calloc((size_t)n, sizeof(char *));
    b->names = calloc((size_t)n, sizeof(char *));
    b->args = calloc((size_t)n, sizeof(char *));
    b->text = dupn(text, text_len);
    b->text_len = text_len;
    if (reasoning && reasoning_len) {
        b->reasoning = dupn(reasoning, reasoning_len);
        b->reasoning_len = reasoning_len;
    }
    b->n = n;
    int ok = b->ids && b->names && b->args && b->text && (!reasoning_len || b->reasoning);
    for (int i = 0; ok && i < n; i++) {
        b->ids[i] = strdup(ids[i]);
        b->names[i] = strdup(names[i] ? names[i] : "");
        b->args[i] = strdup(args[i] ? args[i] : "");
        ok = b->ids[i] && b->names[i] && b->args[i];
    }
    if (!ok) { b->refs = 1; block_unref(b); return -1; }

    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < n; i++) {
        node **p = slot_of(t, ids[i]);
        if (*p) remove_node(t, *p);    /* ids are random: only a repeat put */
        node *x = calloc(1, sizeof *x);
        if (!x || !(x->id = strdup(ids[i]))) { free(x); continue; }
        x->b = b;
        b->refs++;
        p = slot_of(t, ids[i]);
        x->hnext = *p;
        *p = x;
        lru_push(t, x);
        t->count++;
    }
    while (t->count > t->max_ids && t->head) remove_node(t, t->head);
    if (t->count > (t->mask + 1) * 2) grow(t);
    if (b->refs == 0) { b->refs = 1; block_unref(b); }
    pthread_mutex_unlock(&t->mu);
    return 0;
}

/* Arguments as the client sent them vs. as we returned them: equal as JSON
 * values (clients re-serialize: Anthropic sends an object back, SDKs may
 * change spacing), or byte-equal when either is not JSON. */
int toolmem_args_equal(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    json_t *x = ds4_json_parse(a, strlen(a), NULL);
    json_t *y = x ? ds4_json_parse(b, strlen(b), NULL) : NULL;
    int eq = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

/* c = d1 d1 d2 d2 ... dk dk for some split m = d1 d2 ... dk.  Every piece
 * is doubled, so after matching m[0..i) the client is at 2i: a state is
 * just i.  Depth first, shortest piece first (a text of one repeated byte
 * then takes a straight path); each state is visited once and the work is
 * capped: past the cap, no. */
static int doubled_deltas(const char *c, size_t cn, const char *m, size_t mn) {
    if (mn == 0 || cn != 2 * mn) return 0;
    unsigned char *seen = calloc(mn + 1, 1);
    size_t *si = malloc((mn + 1) * sizeof *si), *sl = malloc((mn + 1) * sizeof *sl);
    int ok = 0;
    if (seen && si && sl) {
        long budget = 1L << 26;
        size_t sp = 0;
        seen[0] = 1;
        si[sp] = 0; sl[sp] = 1; sp++;
        while (sp > 0 && budget > 0) {
            size_t i = si[sp - 1], L = sl[sp - 1];
            if (i == mn) { ok = 1; break; }
            /* first copy c[2i, 2i+L) == m[i, i+L), grown a byte at a time */
            if (i + L > mn || c[2 * i + L - 1] != m[i + L - 1]) { sp--; continue; }
            sl[sp - 1] = L + 1;
            budget -= (long)L;
            if (!seen[i + L] && !memcmp(c + 2 * i + L, m + i, L)) {
                seen[i + L] = 1;
                si[sp] = i + L; sl[sp] = 1; sp++;
            }
        }
    }
    free(seen); free(si); free(sl);
    return ok;
}

int toolmem_merge_artifact(const char *client, size_t cn, const char *mem, size_t mn) {
    if (!client || !mem || cn == 0 || (cn == mn && !memcmp(client, mem, cn))) return 0;
    /* each delta assigned instead of appended: the last one(s) remain */
    if (cn < mn && !memcmp(mem + mn - cn, client, cn)) return 1;
    /* each delta appended twice */
    return doubled_deltas(client, cn, mem, mn);
}

int toolmem_match(toolmem *t, const ds4_tool_call *calls, int n, char **text,
                  char **reasoning) {
    *text = NULL;
    if (reasoning) *reasoning = NULL;
    if (!t || n <= 0 || !calls[0].id) return 0;
    pthread_mutex_lock(&t->mu);
    node **p = slot_of(t, calls[0].id);
    block *b = *p ? (*p)->b : NULL;
    if (b) b->refs++;
    pthread_mutex_unlock(&t->mu);
    if (!b) return 0;

    int ok = b->n == n;
    for (int i = 0; ok && i < n; i++) {
        ok = calls[i].id && !strcmp(calls[i].id, b->ids[i]) &&
             calls[i].name && !strcmp(calls[i].name, b->names[i]) &&
             (toolmem_args_equal(calls[i].arguments ? calls[i].arguments : "", b->args[i]) ||
              (calls[i].arguments &&
               toolmem_merge_artifact(calls[i].arguments, strlen(calls[i].arguments), b->args[i],
                                      strlen(b->args[i]))));
    }
    if (ok) {
        *text = dupn(b->text, b->text_len);
        if (reasoning && b->reasoning) *reasoning = dupn(b->reasoning, b->reasoning_len);
        if (!*text) ok = 0;
    }
    pthread_mutex_lock(&t->mu);
    if (ok) {
        /* LRU: a replayed block is live again */
        for (int i = 0; i < n; i++) {
            node *x = *slot_of(t, b->ids[i]);
            if (x) { lru_unlink(t, x); lru_push(t, x); }
        }
    }
    block_unref(b);
    pthread_mutex_unlock(&t->mu);
    if (!ok && reasoning) { free(*reasoning); *reasoning = NULL; }
    return ok;
}

size_t toolmem_count(toolmem *t) {
    pthread_mutex_lock(&t->mu);
    size_t c = t->count;
    pthread_mutex_unlock(&t->mu);
    return c;
}
