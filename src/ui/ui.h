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

#endif
