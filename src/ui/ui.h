/*
 * ui.h - serve the web dashboard (docs/dashboard.md) at /ui/ on a daemon's HTTP server.
 *
 * The files are public (they hold no data); everything they show comes from /v0 with
 * the caller's own key or local token. index.html is never cached, the hashed bundle
 * files for a year; every reply carries a Content-Security-Policy of 'self'.
 */
#ifndef REBUNO_UI_UI_H
#define REBUNO_UI_UI_H

#include "net/http.h"

/* service ("kernel" or "sandboxd", a static string) tells the app which views to show. */
void ui_mount(struct http_server *http, const char *service);
/* The kernel under `rebuno dev` with sandboxes: the sandbox service's address
 * ("127.0.0.1:8090"), so the kernel's dashboard shows the sandbox views by calling its /v1
 * from the browser (service.json says where; the CSP lets the page connect there and
 * sandboxd's CORS lets the kernel's origin in). NULL: none. */
void ui_set_sandboxes(const char *listen);

#endif
