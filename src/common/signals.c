/*
 * signals.c -- see signals.h.
 */
#include <signal.h>
#include <string.h>

#include "common/signals.h"

void ds4_catch_signals(void (*on_int)(int), void (*on_term)(int), int hup) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_int;
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_term ? on_term : on_int;
    sigaction(SIGTERM, &sa, NULL);
    if (hup) sigaction(SIGHUP, &sa, NULL);
}
