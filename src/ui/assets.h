/*
 * assets.h - the dashboard's static files, embedded in the binary at build time.
 *
 * The table is generated (scripts/embed_ui.py, from the esbuild bundle of ui/) into
 * build/gen/ui_assets.c; it ends with an entry whose name is NULL.
 */
#ifndef REBUNO_UI_ASSETS_H
#define REBUNO_UI_ASSETS_H

#include <stdbool.h>
#include <stddef.h>

struct ui_asset {
    const char *name; /* "index.html", "app-3F2A1B.js" */
    const char *content_type;
    const unsigned char *data;
    size_t len;
    bool immutable; /* name carries a content hash: cache for a year */
};

extern const struct ui_asset ui_assets[];

#endif
