/*
 * http.h -- the HTTP front of ds4-server (http.c): libmicrohttpd setup,
 * routing, limits, auth, CORS, SSE delivery.
 */
#ifndef DS4_SERVER_HTTP_H
#define DS4_SERVER_HTTP_H

#include "server.h"

typedef struct http_server http_server;

/* Bind and start serving; *port_out receives the bound port. */
http_server *http_start(server_ctx *srv, int *port_out, char **err);
/* Stop accepting new connections (first step of a clean shutdown). */
void http_quiesce(http_server *h);
/* Close every connection and free (after the worker has stopped). */
void http_stop(http_server *h);

#endif
