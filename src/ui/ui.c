/*
 * ui.c - routes /ui, /ui/ and /ui/<file> to the embedded dashboard assets.
 */
#include "ui/ui.h"

#include <stdio.h>
#include <string.h>

#include "ui/assets.h"

#define CSP                                                                                        \
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "                 \
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

/* One daemon per process mounts the dashboard: where its sandbox service's /v1 is (the
 * kernel under rebuno dev), and the policy that lets the page reach it and nothing else. */
static char sandboxes_api[300], csp[700] = CSP;

static const struct ui_asset *find(const char *name)
{
    for (const struct ui_asset *a = ui_assets; a->name; a++)
        if (strcmp(a->name, name) == 0) return a;
    return NULL;
}

static void send_asset(struct http_req *r, const struct ui_asset *a)
{
    http_add_header(r, "Content-Security-Policy", csp);
    http_add_header(r, "X-Content-Type-Options", "nosniff");
    http_add_header(r, "Referrer-Policy", "no-referrer");
    http_add_header(r, "Cache-Control",
                    a->immutable ? "public, max-age=31536000, immutable" : "no-cache");
    http_reply_raw(r, 200, a->content_type, a->data, a->len);
}

static void h_index(struct http_req *r, void *arg)
{
    send_asset(r, find("index.html"));
}

/* Which daemon serves the page, so the app shows its views: {"service": "kernel",
 * "sandboxes_api"?: "http://127.0.0.1:8090", "sandboxes_url"?: "http://127.0.0.1:8090/ui/"}. */
static void h_service(struct http_req *r, void *arg)
{
    http_add_header(r, "Cache-Control", "no-cache");
    http_add_header(r, "X-Content-Type-Options", "nosniff");
    json_t *o = json_pack("{s:s}", "service", (const char *)arg);
    if (sandboxes_api[0]) {
        json_object_set_new(o, "sandboxes_api", json_string(sandboxes_api));
        json_object_set_new(o, "sandboxes_url", json_sprintf("%s/ui/", sandboxes_api));
    }
    http_reply_json(r, 200, o);
}

void ui_set_sandboxes(const char *listen)
{
    sandboxes_api[0] = '\0';
    snprintf(csp, sizeof csp, "%s", CSP);
    /* it goes into a header: host:port characters only, never a ';' of another directive */
    if (!listen || strlen(listen) > 200 ||
        strspn(listen, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") != strlen(listen))
        return;
    snprintf(sandboxes_api, sizeof sandboxes_api, "http://%s", listen);
    snprintf(csp, sizeof csp, "%s; connect-src 'self' http://%s ws://%s", CSP, listen, listen);
}

static void h_file(struct http_req *r, void *arg)
{
    const struct ui_asset *a = find(http_req_param(r, "file"));
    if (!a) {
        http_reply_error(r, 404, "not_found", "path",
                         "no dashboard file %s (the dashboard starts at /ui/)", http_req_path(r));
        return;
    }
    send_asset(r, a);
}

static void h_redirect(struct http_req *r, void *arg)
{
    http_add_header(r, "Location", "/ui/");
    http_reply_raw(r, 308, NULL, NULL, 0);
}

void ui_mount(struct http_server *http, const char *service)
{
    http_route(http, "GET", "/ui/", h_index, NULL);
    http_route(http, "GET", "/ui/service.json", h_service, (void *)service);
    http_route(http, "GET", "/ui/:file", h_file, NULL);
    http_route(http, "GET", "/ui", h_redirect, NULL);
}
