/*
 * swap.c -- a helper of t_agent_confine.sh (compiled by it): swaps two
 * names with renameat2(RENAME_EXCHANGE) in a loop -- a directory of the
 * working tree and a symbolic link pointing outside it -- until SIGTERM,
 * then prints how many swaps it made.  Bash cannot call renameat2.
 *
 *   swap PATH_A PATH_B [PAUSE_US]
 *
 * PAUSE_US (default 0) holds each state that long: under ASan one path
 * resolution of the agent outlasts the ~50 us between unpaused swaps, so
 * every access would meet a rename and be refused -- safe, but then the
 * race never lets an access through and the test proves nothing.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: swap PATH_A PATH_B [PAUSE_US]\n"); return 2; }
    long pause_us = argc == 4 ? atol(argv[3]) : 0;
    struct timespec ts = { pause_us / 1000000, (pause_us % 1000000) * 1000 };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    long n = 0;
    while (!stop) {
        if (renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) != 0) { perror("renameat2"); return 1; }
        n++;
        if (pause_us > 0) nanosleep(&ts, NULL);
    }
    /* leave the directory where it started */
    if (n % 2) renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE);
    printf("%ld\n", n);
    return 0;
}
