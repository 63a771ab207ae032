/*
 * recipe.h - the image recipe of `POST /v1/images {"type":"build"}`: a subset of the
 * Dockerfile syntax, parsed and checked (pure: no I/O).
 *
 *   FROM <image reference | host | scratch>      first instruction, exactly once
 *   RUN <shell command>  |  RUN ["prog", "arg"]  (shell form runs /bin/sh -c)
 *   COPY <src> <dst>     |  COPY ["src", "dst"]  (src: relative to the context folder)
 *   ENV K=V [K2=V2 ...]  |  ENV K V
 *   WORKDIR /abs/path    (relative: under the previous WORKDIR)
 *   USER name[:group]
 * Lines ending in '\' continue on the next; '#' starts a comment line; instruction
 * names are case-insensitive. Anything else (flags such as --chown, ADD, CMD, ...) is
 * refused: 400 validation_error, field "recipe", naming the line.
 */
#ifndef REBUNO_SANDBOX_RECIPE_H
#define REBUNO_SANDBOX_RECIPE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SBX_RECIPE_MAX (256u << 10) /* bytes of a recipe */
#define SBX_RECIPE_STEPS_MAX 100    /* instructions (each RUN/COPY may add a layer) */
#define SBX_RECIPE_ARG_MAX 4096     /* bytes of one COPY path, ENV value, ... */

enum sbx_step_kind {
    SBX_STEP_FROM,
    SBX_STEP_RUN,
    SBX_STEP_COPY,
    SBX_STEP_ENV,
    SBX_STEP_WORKDIR,
    SBX_STEP_USER
};

struct sbx_recipe_step {
    enum sbx_step_kind kind;
    int line;    /* 1-based line where it starts */
    char *text;  /* "RUN make all": the instruction as the cache and the log know it */
    char **args; /* FROM: [ref]; RUN: argv (shell form: /bin/sh -c CMD); COPY: [src, dst];
                  * ENV: K, V, K2, V2...; WORKDIR: [path]; USER: [user] */
    size_t nargs;
};

struct sbx_recipe {
    struct sbx_recipe_step *steps; /* steps[0] is FROM */
    size_t n;
};

/* 0 or -1 with err (400 validation_error, field "recipe"). */
int sbx_recipe_parse(const char *text, size_t len, struct sbx_recipe *r, struct err *err);
void sbx_recipe_fini(struct sbx_recipe *r);

/* Normalise the path p (absolute, or relative to cwd, itself absolute) into out: no ".",
 * "..", or repeated '/'. ".." may not climb above "/". 0, or -1 when it does or out is
 * too small. */
int sbx_recipe_path(const char *cwd, const char *p, char *out, size_t outsz);

#endif
