/*
 * webui.h -- the chat page ds4-server serves at "/" (webui.c).
 *
 * Owns: the page's bytes (server/webui/index.html, embedded in the binary
 * at build time: no file is read at run time, no CDN, works offline), its
 * ETag and its Content-Security-Policy (hashes of the one inline <style>
 * and <script>, computed from the embedded bytes so the policy always
 * matches the page).  Must not: route or answer requests (http.c does).
 */
#ifndef DS4_SERVER_WEBUI_H
#define DS4_SERVER_WEBUI_H

#include <stddef.h>

typedef struct {
    const char *body;
    size_t len;
    char etag[40];        /* "\"<16 hex digits>\"" */
    char csp[512];        /* the Content-Security-Policy header value */
} webui_page;

/* Fill p from the embedded page; -1 when the page lacks its one inline
 * <style> or <script> (a broken build). */
int webui_page_init(webui_page *p);

#endif
