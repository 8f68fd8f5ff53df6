/*
 * contain.c -- every process of a bash tool call, killed together (see
 * contain.h for the contract).
 *
 * Owns: finding the agent's cgroup v2 directory (/proc/self/mountinfo and
 * /proc/self/cgroup), one leaf cgroup per call, cgroup.kill (or SIGKILL
 * over cgroup.procs), the subreaper setting and the /proc scan of the
 * fallback, reaping the zombies that orphans of the call leave to the
 * agent.
 * Must not: signal a process that is neither a descendant of the agent,
 * nor in the call's session or cgroup.
 */
#include "contain.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILLED_MAX 4096
#define SCAN_ROUNDS 200

static int g_cg = 0;             /* 0 not looked at yet, 1 usable, -1 not */
static char g_cg_base[PATH_MAX]; /* the agent's own cgroup directory */
static int g_subreaper;

static void nap_ms(int ms) {
    struct timespec ts = { 0, (long)ms * 1000000L };
    nanosleep(&ts, NULL);
}

/* mountinfo escapes blanks and backslashes as \ooo */
static void unescape(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else *o++ = *p;
    }
    *o = 0;
}

/* <cgroup2 mount point> + <own path in it>: where the agent's cgroup is. */
static int find_base(void) {
    const char *env = getenv("DS4_AGENT_CGROUP");
    if (env && !strcmp(env, "0")) return -1;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return -1;
    char line[4096], mnt[PATH_MAX] = "", mroot[PATH_MAX] = "";
    while (fgets(line, sizeof line, f)) {
        char *sep = strstr(line, " - ");
        if (!sep || strncmp(sep + 3, "cgroup2 ", 8)) continue;
        *sep = 0;
        /* id parent major:minor root mount-point ... */
        char *fld[5];
        int n = 0;
        for (char *t = strtok(line, " "); t && n < 5; t = strtok(NULL, " ")) fld[n++] = t;
        if (n < 5) continue;
        snprintf(mroot, sizeof mroot, "%s", fld[3]);
        snprintf(mnt, sizeof mnt, "%s", fld[4]);
        unescape(mroot);
        unescape(mnt);
        break;
    }
    fclose(f);
    if (!mnt[0]) return -1;
    f = fopen("/proc/self/cgroup", "re");
    if (!f) return -1;
    char own[PATH_MAX] = "";
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3)) continue;
        line[strcspn(line, "\n")] = 0;
        snprintf(own, sizeof own, "%s", line + 3);
        found = 1;
        break;
    }
    fclose(f);
    if (!found || own[0] != '/') return -1;
    /* a mount of a sub-tree (mount root not "/") shows paths below it */
    const char *rest = own;
    size_t rl = strlen(mroot);
    if (strcmp(mroot, "/")) {
        if (strncmp(own, mroot, rl) || (own[rl] && own[rl] != '/')) return -1;
        rest = own + rl;
    }
    if (!strcmp(rest, "/")) rest = "";
    if ((size_t)snprintf(g_cg_base, sizeof g_cg_base, "%s%s", mnt, rest) >= sizeof g_cg_base) return -1;
    return 0;
}

void ag_contain_prepare(ag_contain *c) {
    c->cg[0] = 0;
    c->procs_fd = -1;
    c->pid = 0;
    /* orphans of the call (a daemon's parent exits) are re-parented to the
     * agent instead of init: they stay descendants the scan can find */
    if (!g_subreaper) {
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        g_subreaper = 1;
    }
    if (g_cg == 0) g_cg = find_base() == 0 ? 1 : -1;
    if (g_cg < 0) return;
    static unsigned seq;
    if ((size_t)snprintf(c->cg, sizeof c->cg, "%s/ds4-agent-%d-%u", g_cg_base, (int)getpid(), ++seq) >= sizeof c->cg ||
        mkdir(c->cg, 0755) != 0) {
        /* no permission, read-only, no such file system: not on later calls either */
        if (errno == EACCES || errno == EPERM || errno == EROFS || errno == ENOENT || errno == ENAMETOOLONG) g_cg = -1;
        c->cg[0] = 0;
        return;
    }
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.procs", c->cg);
    c->procs_fd = open(p, O_WRONLY | O_CLOEXEC);
    if (c->procs_fd < 0) { rmdir(c->cg); c->cg[0] = 0; }
}

void ag_contain_child(const ag_contain *c) {
    /* "0" moves the writer; before exec, so every descendant is inside.
     * A refusal (EBUSY, EOPNOTSUPP: the hierarchy's rules) leaves the
     * call to the session and the scan. */
    if (c->procs_fd >= 0 && write(c->procs_fd, "0", 1) != 1) { /* the fallback covers it */ }
    setsid();
}

int ag_contain_has_cgroup(const ag_contain *c) {
    return c->cg[0] != 0;
}

/* ------------------------------------------------------------------ */

typedef struct {
    pid_t v[KILLED_MAX];
    int n;
} pidset;

static void note(pidset *s, pid_t p) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == p) return;
    if (s->n < KILLED_MAX) s->v[s->n++] = p;
}

typedef struct {
    pid_t pid, ppid, pgrp, sid;
    char state;
    char mark;
} pinfo;

static int cmp_pid(const void *x, const void *y) {
    pid_t a = ((const pinfo *)x)->pid, b = ((const pinfo *)y)->pid;
    return (a > b) - (a < b);
}

/* Every process: pid, state, ppid, pgrp, session (fields 1, 3-6 of
 * /proc/PID/stat; the name in field 2 may hold blanks and parentheses, so
 * the fields are read after its last ')'). */
static int read_procs(pinfo **out) {
    DIR *d = opendir("/proc");
    if (!d) return -1;
    pinfo *v = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
        char p[300], buf[512];
        snprintf(p, sizeof p, "/proc/%s/stat", de->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k <= 0) continue;
        buf[k] = 0;
        char *rp = strrchr(buf, ')');
        pinfo x;
        memset(&x, 0, sizeof x);
        int ppid, pgrp, sid;
        if (!rp || sscanf(rp + 1, " %c %d %d %d", &x.state, &ppid, &pgrp, &sid) != 4) continue;
        x.pid = (pid_t)atoi(de->d_name);
        x.ppid = ppid;
        x.pgrp = pgrp;
        x.sid = sid;
        if (n == cap) {
            cap = cap ? 2 * cap : 512;
            pinfo *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) break;
            v = nv;
        }
        v[n++] = x;
    }
    closedir(d);
    qsort(v, (size_t)n, sizeof *v, cmp_pid);
    *out = v;
    return n;
}

/* One pass: SIGKILL to every live descendant of the agent and every
 * process of the call's session or process group; the agent's zombie
 * children other than the shell are reaped.  Returns how many were alive. */
static int scan_once(pid_t shell, pidset *killed) {
    pinfo *v = NULL;
    int n = read_procs(&v);
    if (n <= 0) { free(v); return 0; }
    pid_t me = getpid();
    for (int i = 0; i < n; i++)
        v[i].mark = v[i].ppid == me || (shell > 0 && (v[i].sid == shell || v[i].pgrp == shell));
    /* descendants: marks spread down parent links until nothing changes */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (v[i].mark) continue;
            pinfo key = { .pid = v[i].ppid };
            pinfo *par = bsearch(&key, v, (size_t)n, sizeof *v, cmp_pid);
            if (par && par->mark) { v[i].mark = 1; changed = 1; }
        }
    }
    int live = 0;
    for (int i = 0; i < n; i++) {
        if (!v[i].mark || v[i].pid == me) continue;
        if (v[i].state == 'Z' || v[i].state == 'X') {
            if (v[i].ppid == me && v[i].pid != shell) waitpid(v[i].pid, NULL, WNOHANG);
            continue;
        }
        if (kill(v[i].pid, SIGKILL) == 0) { note(killed, v[i].pid); live++; }
    }
    free(v);
    return live;
}

static int read_pids(const char *cg, pid_t *out, int cap) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.procs", cg);
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    int n = 0, x;
    while (n < cap && fscanf(f, "%d", &x) == 1) out[n++] = (pid_t)x;
    fclose(f);
    return n;
}

static int populated(const char *cg) {
    char p[PATH_MAX + 32], line[128];
    snprintf(p, sizeof p, "%s/cgroup.events", cg);
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    int pop = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "populated ", 10)) pop = atoi(line + 10);
    fclose(f);
    return pop;
}

int ag_contain_kill(ag_contain *c) {
    static pidset killed;
    killed.n = 0;
    if (c->pid > 0) kill(-c->pid, SIGKILL);   /* the session's own process group, first */
    if (c->cg[0]) {
        static pid_t pids[KILLED_MAX];
        int n = read_pids(c->cg, pids, KILLED_MAX);
        for (int i = 0; i < n; i++) note(&killed, pids[i]);
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/cgroup.kill", c->cg);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        int done = fd >= 0 && write(fd, "1", 1) == 1;   /* the kernel kills all, forks included */
        if (fd >= 0) close(fd);
        /* before cgroup.kill (Linux 5.14): SIGKILL to what is listed until
         * the list is empty (a fork between a read and the kills shows up
         * on the next read) */
        for (int r = 0; !done && r < SCAN_ROUNDS; r++) {
            n = read_pids(c->cg, pids, KILLED_MAX);
            if (n <= 0) break;
            for (int i = 0; i < n; i++) { kill(pids[i], SIGKILL); note(&killed, pids[i]); }
            nap_ms(5);
        }
    }
    /* the fallback, also behind the cgroup (a child that could not join) */
    for (int r = 0; r < SCAN_ROUNDS; r++) {
        if (!scan_once(c->pid, &killed)) break;
        nap_ms(5);
    }
    int n = 0;
    for (int i = 0; i < killed.n; i++) n += killed.v[i] != c->pid;
    return n;
}

void ag_contain_release(ag_contain *c) {
    pidset none;
    none.n = 0;
    if (c->procs_fd >= 0) close(c->procs_fd);
    c->procs_fd = -1;
    if (c->cg[0]) {
        /* killed processes leave the cgroup as they exit: up to 2 s */
        for (int i = 0; i < 400 && populated(c->cg) == 1; i++) {
            scan_once(-1, &none);   /* reaps the agent's zombie orphans */
            nap_ms(5);
        }
        rmdir(c->cg);
        c->cg[0] = 0;
    }
    scan_once(-1, &none);
}
