/*
 * signals.h -- how ds4's command-line tools take Ctrl+C and SIGTERM
 * (signals.c): one installer, so every binary interrupts the same way.
 *
 * Handlers are installed without SA_RESTART on purpose: a blocking read,
 * sleep or wait returns with EINTR, so the loop around it sees the flag the
 * handler set at once instead of after the next byte or timeout.
 * Must not: decide what an interrupt means (the handlers are the caller's).
 */
#ifndef DS4_COMMON_SIGNALS_H
#define DS4_COMMON_SIGNALS_H

/* SIGINT -> on_int; SIGTERM (and SIGHUP when `hup`) -> on_term, or on_int
 * when on_term is NULL. */
void ds4_catch_signals(void (*on_int)(int), void (*on_term)(int), int hup);

#endif
