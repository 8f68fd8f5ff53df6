/*
 * swap.c -- a helper of t_agent_confine.sh (compiled by it): swaps two
 * names with renameat2(RENAME_EXCHANGE) in a loop -- a directory of the
 * working tree and a symbolic link pointing outside it -- until SIGTERM,
 * then prints how many swaps it made.  Bash cannot call renameat2.
 *
 *   swap PATH_A PATH_B
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: swap PATH_A PATH_B\n"); return 2; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    long n = 0;
    while (!stop) {
        if (renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE) != 0) { perror("renameat2"); return 1; }
        n++;
    }
    /* leave the directory where it started */
    if (n % 2) renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE);
    printf("%ld\n", n);
    return 0;
}
