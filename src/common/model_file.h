/*
 * model_file.h -- the model file of the front ends (ds4, ds4-server,
 * ds4-agent): its default path, and the one message they all give when it
 * cannot be opened (what the default is, and how to get a model).
 *
 * Must not touch the engine: it only checks that the file can be opened.
 */
#ifndef DS4_COMMON_MODEL_FILE_H
#define DS4_COMMON_MODEL_FILE_H

#define DS4_DEFAULT_MODEL "./ds4flash.gguf"

/* 0 when `path` is a readable file; otherwise prints to stderr
 *   PROG: cannot open model PATH: REASON
 *   (use -m FILE; the default is ./ds4flash.gguf: `ds4-get` ... `make run` ...)
 * and returns -1. */
int ds4_model_file_check(const char *prog, const char *path);

#endif
