/*
 * input.h -- how the interactive `ds4` chat reads what the user types:
 * one *message* at a time, which may span several lines.
 *
 *   - On a terminal: line editing and history (libedit), bracketed paste
 *     (a multi-line paste is one message: it is shown as a placeholder
 *     "[paste #N: L lines]" in the edited line and replaced by the pasted
 *     text when the line is sent).
 *   - When stdin is a terminal: a quiet terminal while the model works
 *     (keys typed then are not echoed over the answer; with line editing
 *     printable ones are kept for the next prompt; control keys such as
 *     Ctrl+D are always dropped, so they never reach the next line or end
 *     the chat).
 *   - Anywhere (terminal or pipe): a line ending in a backslash continues
 *     on the next line, and "/multi" starts a block that a line "/end"
 *     sends.
 *
 * Owns the terminal's input modes and the bracketed-paste escape codes;
 * knows nothing about the model or the commands (other than /multi).
 */
#ifndef DS4_CLI_INPUT_H
#define DS4_CLI_INPUT_H

#include <signal.h>
#include "ds4.h"

typedef struct chat_input chat_input;

/* `interrupt` is the flag the SIGINT handler sets (Ctrl+C). */
chat_input *input_open(volatile sig_atomic_t *interrupt);
void input_close(chat_input *in);

enum {
    INPUT_EOF = 0,          /* Ctrl+D on an empty line, or end of the pipe */
    INPUT_MESSAGE = 1,      /* a message is in *out */
    INPUT_INTERRUPTED = -1, /* Ctrl+C: the partial message was dropped */
};

/* Read one message into `out` (reset first; NUL-terminated).  *single is
 * set when it was one typed line (no continuation, no paste): only such a
 * message is taken as a /command. */
int input_read(chat_input *in, ds4_buf *out, int *single);

/* Bracket a turn (prefill + answer). */
void input_busy_begin(chat_input *in);
void input_busy_end(chat_input *in);

#endif
