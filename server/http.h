/*
 * http.h -- the HTTP front of ds4-server (http.c): routing, auth, CORS,
 * the Host/Origin guard, SSE delivery, on the HTTP/1.1 layer of http1.c.
 */
#ifndef DS4_SERVER_HTTP_H
#define DS4_SERVER_HTTP_H

#include "server.h"

typedef struct http_server http_server;

/* Bind and listen on --host/--port (before the model loads, so that a port
 * in use fails at once); returns the socket and the bound port, or -1. */
int http_listen(server_ctx *srv, int *port_out, char **err);
/* 0 when an --allow-host value is well formed. */
int http_check_allow_host(const char *a);
/* Start serving on the socket of http_listen (taken over, closed on failure). */
http_server *http_start(server_ctx *srv, int fd, int port, char **err);
/* Stop accepting new connections (first step of a clean shutdown). */
void http_quiesce(http_server *h);
/* Close every connection and free (after the worker has stopped). */
void http_stop(http_server *h);

#endif
