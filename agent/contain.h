/*
 * contain.h -- keeping track of every process a bash tool call starts, so
 * that an interrupt, a time limit or the command's end kills them all.
 *
 * Owns: a fresh cgroup v2 leaf per call where the agent may create one
 * beside its own processes (cgroup.kill, or SIGKILL over cgroup.procs
 * until it is empty), the call's own session (setsid), and the fallback
 * that needs neither: the agent is a child subreaper (orphans of the
 * call's processes stay its descendants) and a /proc scan kills every
 * descendant and every process of the call's session.
 * Must not: run commands or read their output (tools.c does), or touch
 * any process that is not a descendant of the agent or in the call's
 * session.
 */
#ifndef DS4_AGENT_CONTAIN_H
#define DS4_AGENT_CONTAIN_H

#include <limits.h>
#include <sys/types.h>

typedef struct {
    char cg[PATH_MAX];   /* the call's cgroup directory; "" when none */
    int procs_fd;        /* its cgroup.procs, open for the child to join; -1 when none */
    pid_t pid;           /* the shell */
} ag_contain;

/* In the agent, before fork: the call's cgroup when the machine allows one
 * (cgroup v2 mounted and writable, and DS4_AGENT_CGROUP is not "0").
 * Never fails: without a cgroup the fallback does the work. */
void ag_contain_prepare(ag_contain *c);
/* In the child, between fork and exec (async-signal-safe calls only):
 * join the cgroup, start a new session. */
void ag_contain_child(const ag_contain *c);
/* Kill everything the call started that is still alive (the shell too);
 * reaps the zombies it made of the agent's children, except the shell
 * itself (its status belongs to the caller).  Returns how many processes
 * were killed.  Then the cgroup is removed by ag_contain_release. */
int ag_contain_kill(ag_contain *c);
void ag_contain_release(ag_contain *c);
/* 1 when this call's processes are in a cgroup of their own. */
int ag_contain_has_cgroup(const ag_contain *c);

#endif
