/*
 * mapguard.c -- the SIGBUS guard of read-only file mappings (see
 * mapguard.h).
 *
 * Owns: the SIGBUS handler and the slot table it reads.  Must not: call
 * anything from the handler that is not async-signal-safe, or return from
 * it on a fault it did not repair (the instruction would fault again
 * forever).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/mapguard.h"

#if ATOMIC_POINTER_LOCK_FREE != 2 || ATOMIC_LLONG_LOCK_FREE != 2 || ATOMIC_INT_LOCK_FREE != 2
#error "mapguard.c needs lock-free atomics (read from a signal handler)"
#endif

#define MG_SLOTS 32

/* A slot is live while base != 0.  mapguard_add writes size, fd and fault
 * before it publishes base (release); the handler reads base (acquire)
 * first.  fault is the first faulting address + 1 (0 = none). */
typedef struct {
    _Atomic uintptr_t base;
    _Atomic size_t size;
    _Atomic int fd;
    _Atomic uintptr_t fault;
} mg_slot;

static mg_slot g_slot[MG_SLOTS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;   /* add/remove, install */
static int g_installed;
static struct sigaction g_prev;   /* the handler before ours (read by the handler) */
static uintptr_t g_page;

/* The fault is not ours: what would have happened without the guard. */
static void pass_on(int sig, siginfo_t *si, void *uc) {
    if (g_prev.sa_flags & SA_SIGINFO) {
        if (g_prev.sa_sigaction) { g_prev.sa_sigaction(sig, si, uc); return; }
    } else if (g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
        return;
    }
    /* the default action: a fault re-executes the instruction and dies of
     * it; a SIGBUS sent by kill would otherwise be lost */
    struct sigaction d;
    memset(&d, 0, sizeof d);
    d.sa_handler = SIG_DFL;
    sigemptyset(&d.sa_mask);
    sigaction(SIGBUS, &d, NULL);
    if (si->si_code <= 0) raise(SIGBUS);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    const int saved = errno;
    const uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; si->si_code > 0 && i < MG_SLOTS; i++) {
        mg_slot *s = &g_slot[i];
        const uintptr_t base = atomic_load_explicit(&s->base, memory_order_acquire);
        const size_t size = atomic_load_explicit(&s->size, memory_order_relaxed);
        if (!base || a < base || a - base >= size) continue;
        uintptr_t none = 0;
        atomic_compare_exchange_strong(&s->fault, &none, a + 1);
        /* What to replace: a file that now ends before the faulting byte
         * lost its whole tail (every page past the end would fault, one
         * signal each): all of it at once.  Otherwise (a read error, or a
         * file grown again) only the faulting page. */
        const uintptr_t end = base + ((size + g_page - 1) & ~(g_page - 1));
        uintptr_t lo = a & ~(g_page - 1), hi = lo + g_page;
        struct stat st;
        const int fd = atomic_load_explicit(&s->fd, memory_order_relaxed);
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 0 && (uintptr_t)st.st_size <= a - base) {
            uintptr_t eof = base + (((uintptr_t)st.st_size + g_page - 1) & ~(g_page - 1));
            if (eof < lo) lo = eof;
            hi = end;
        }
        if (mmap((void *)lo, hi - lo, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
            /* nothing to put there (out of memory): the fault stays fatal */
            static const char msg[] = "ds4: SIGBUS on a model file's mapping, and no memory to replace "
                                      "the lost pages\n";
            ssize_t r = write(2, msg, sizeof msg - 1);
            (void)r;
            break;
        }
        errno = saved;
        return;
    }
    pass_on(sig, si, uc);
    errno = saved;
}

/* Under g_mu. */
static int install(void) {
    if (g_installed) return 0;
    long pg = sysconf(_SC_PAGESIZE);
    g_page = pg > 0 ? (uintptr_t)pg : 4096;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_prev)) return -1;
    g_installed = 1;
    return 0;
}

int mapguard_add(const void *base, size_t size, int fd) {
    if (!base || !size) return 0;
    int h = 0;
    pthread_mutex_lock(&g_mu);
    if (install() == 0) {
        for (int i = 0; i < MG_SLOTS && !h; i++) {
            mg_slot *s = &g_slot[i];
            if (atomic_load(&s->base)) continue;
            atomic_store(&s->size, size);
            atomic_store(&s->fd, fd);
            atomic_store(&s->fault, 0);
            atomic_store_explicit(&s->base, (uintptr_t)base, memory_order_release);
            h = i + 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return h;
}

void mapguard_remove(int handle) {
    if (handle < 1 || handle > MG_SLOTS) return;
    pthread_mutex_lock(&g_mu);
    atomic_store(&g_slot[handle - 1].base, 0);
    pthread_mutex_unlock(&g_mu);
}

int mapguard_fault(int handle, uint64_t *off) {
    if (handle < 1 || handle > MG_SLOTS) return 0;
    mg_slot *s = &g_slot[handle - 1];
    uintptr_t f = atomic_load(&s->fault), base = atomic_load(&s->base);
    if (!f || !base) return 0;
    if (off) *off = (uint64_t)(f - 1 - base);
    return 1;
}
