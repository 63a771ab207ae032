/*
 * recipe.c - parsing image recipes (recipe.h): a Dockerfile subset, one instruction per
 * logical line. Pure: the build (build.c) does the work.
 */
#include "sandbox/storage/recipe.h"

#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/xalloc.h"

static int bad(struct err *err, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct err *err, int line, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_invalid(err, "recipe", "recipe line %d: %s", line, msg);
}

static void push(struct sbx_recipe_step *s, const char *a, size_t n)
{
    s->args = xrealloc(s->args, (s->nargs + 1) * sizeof *s->args);
    s->args[s->nargs++] = xstrndup(a, n);
}

static bool chars_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 && *s != '\t') return false;
    return true;
}

/* A JSON array of strings (exec form). 1: it was one (parsed into s), 0: not JSON, -1. */
static int exec_form(const char *rest, struct sbx_recipe_step *s, struct err *err)
{
    if (rest[0] != '[') return 0;
    json_error_t je;
    json_t *a = json_loads(rest, JSON_REJECT_DUPLICATES, &je);
    if (!a) return 0; /* shell form that starts with '[' */
    int rc = 1;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > 256)
        rc = bad(err, s->line, "%sthe JSON form is an array of 1 to 256 strings", "");
    for (size_t i = 0; rc == 1 && i < json_array_size(a); i++) {
        const char *v = json_string_value(json_array_get(a, i));
        if (!v || strlen(v) > SBX_RECIPE_ARG_MAX || !chars_ok(v))
            rc = bad(err, s->line,
                     "%sthe JSON form holds strings only (at most 4096 bytes, "
                     "no control characters)",
                     "");
        else
            push(s, v, strlen(v));
    }
    json_decref(a);
    return rc;
}

/* Split on blanks into s->args (no quoting: COPY and the legacy ENV form). */
static void words(const char *rest, struct sbx_recipe_step *s)
{
    const char *p = rest;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p) break;
        size_t n = strcspn(p, " \t");
        push(s, p, n);
        p += n;
    }
}

/* ENV K=V K2="v 2" ... (double quotes group, backslash escapes inside them). */
static int env_pairs(const char *rest, struct sbx_recipe_step *s, struct err *err)
{
    if (!strchr(rest, '=') || strcspn(rest, " \t") < strcspn(rest, "=")) {
        /* legacy "ENV K V..." */
        size_t n = strcspn(rest, " \t");
        const char *v = rest + n;
        while (*v == ' ' || *v == '\t')
            v++;
        if (!n || !*v) return bad(err, s->line, "%sENV needs K=V (or K V)", "");
        push(s, rest, n);
        push(s, v, strlen(v));
        return 0;
    }
    const char *p = rest;
    char *val = xmalloc(strlen(rest) + 1);
    int rc = 0;
    while (rc == 0) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p) break;
        size_t kn = strcspn(p, "= \t");
        if (!kn || p[kn] != '=') {
            rc = bad(err, s->line, "%sENV takes K=V pairs", "");
            break;
        }
        push(s, p, kn);
        p += kn + 1;
        size_t vn = 0;
        bool q = false;
        while (*p && (q || (*p != ' ' && *p != '\t'))) {
            if (*p == '"')
                q = !q, p++;
            else if (*p == '\\' && p[1])
                val[vn++] = p[1], p += 2;
            else
                val[vn++] = *p++;
        }
        if (q) rc = bad(err, s->line, "%san unterminated \" in ENV", "");
        push(s, val, vn);
    }
    free(val);
    if (rc == 0 && s->nargs == 0) rc = bad(err, s->line, "%sENV needs K=V", "");
    for (size_t i = 0; rc == 0 && i < s->nargs; i += 2) {
        const char *k = s->args[i];
        bool ok = (isalpha((unsigned char)k[0]) || k[0] == '_') && strlen(k) <= 256;
        for (const char *c = k; ok && *c; c++)
            ok = isalnum((unsigned char)*c) || *c == '_';
        if (!ok) rc = bad(err, s->line, "ENV name \"%.64s\" is not [A-Za-z_][A-Za-z0-9_]*", k);
    }
    return rc;
}

static int one(const char *line, int lineno, bool first, struct sbx_recipe *r, struct err *err)
{
    size_t kn = strcspn(line, " \t");
    const char *rest = line + kn;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    static const struct {
        const char *name;
        enum sbx_step_kind kind;
    } names[] = {{"FROM", SBX_STEP_FROM}, {"RUN", SBX_STEP_RUN},         {"COPY", SBX_STEP_COPY},
                 {"ENV", SBX_STEP_ENV},   {"WORKDIR", SBX_STEP_WORKDIR}, {"USER", SBX_STEP_USER}};
    int k = -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (kn == strlen(names[i].name) && !strncasecmp(line, names[i].name, kn)) k = (int)i;
    if (k < 0) {
        char w[40];
        snprintf(w, sizeof w, "%.*s", (int)(kn < 32 ? kn : 32), line);
        return bad(err, lineno, "unknown instruction \"%s\" (FROM, RUN, COPY, ENV, WORKDIR, USER)",
                   w);
    }
    if (first != (names[k].kind == SBX_STEP_FROM))
        return bad(err, lineno, "%sFROM comes first, and only once", "");
    if (!*rest) return bad(err, lineno, "%s needs an argument", names[k].name);
    if (r->n >= SBX_RECIPE_STEPS_MAX) return bad(err, lineno, "%sat most 100 instructions", "");
    if (rest[0] == '-' && rest[1] == '-')
        return bad(err, lineno, "flags (%.40s) are not supported", rest);
    r->steps = xrealloc(r->steps, (r->n + 1) * sizeof *r->steps);
    struct sbx_recipe_step *s = &r->steps[r->n++];
    memset(s, 0, sizeof *s);
    s->kind = names[k].kind;
    s->line = lineno;
    s->text = xasprintf("%s %s", names[k].name, rest);
    int e;
    switch (s->kind) {
    case SBX_STEP_RUN:
        if ((e = exec_form(rest, s, err)) < 0) return -1;
        if (e == 0) {
            push(s, "/bin/sh", 7);
            push(s, "-c", 2);
            push(s, rest, strlen(rest));
        }
        return 0;
    case SBX_STEP_COPY:
        if ((e = exec_form(rest, s, err)) < 0) return -1;
        if (e == 0) words(rest, s);
        if (s->nargs != 2)
            return bad(err, lineno, "%sCOPY takes one source and one destination", "");
        for (size_t i = 0; i < 2; i++)
            if (!s->args[i][0] || strlen(s->args[i]) > SBX_RECIPE_ARG_MAX || !chars_ok(s->args[i]))
                return bad(err, lineno,
                           "%sa COPY path is empty, too long or has control "
                           "characters",
                           "");
        return 0;
    case SBX_STEP_ENV:
        return env_pairs(rest, s, err);
    default: /* FROM, WORKDIR, USER: one word */
        words(rest, s);
        if (s->nargs != 1 || strlen(s->args[0]) > (s->kind == SBX_STEP_USER ? 64u : 1024u))
            return bad(err, lineno, "%s takes one argument", names[k].name);
        if (s->kind == SBX_STEP_USER) {
            for (const char *c = s->args[0]; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr("._-:", *c))
                    return bad(err, lineno, "USER \"%.64s\" is not a user name", s->args[0]);
        }
        return 0;
    }
}

int sbx_recipe_parse(const char *text, size_t len, struct sbx_recipe *r, struct err *err)
{
    memset(r, 0, sizeof *r);
    if (len > SBX_RECIPE_MAX) return err_invalid(err, "recipe", "the recipe is over 256 KiB");
    if (memchr(text, '\0', len)) return err_invalid(err, "recipe", "the recipe holds a NUL byte");
    char *buf = xmalloc(len + 1), *cur = xmalloc(len + 1);
    memcpy(buf, text, len);
    buf[len] = '\0';
    size_t cn = 0;
    int lineno = 0, start = 0, rc = 0;
    char *save = NULL, *p = buf;
    for (;;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        lineno++;
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r') p[--l] = '\0';
        char *t = p;
        while (*t == ' ' || *t == '\t')
            t++;
        bool comment = *t == '#';
        if (!comment) {
            if (!cn) start = lineno;
            size_t tl = strlen(t);
            bool cont = tl && t[tl - 1] == '\\';
            if (cont) tl--;
            if (cn && tl) cur[cn++] = ' ';
            memcpy(cur + cn, t, tl);
            cn += tl;
            while (cn && (cur[cn - 1] == ' ' || cur[cn - 1] == '\t'))
                cn--;
            cur[cn] = '\0';
            if (!cont && cn) {
                if (one(cur, start, r->n == 0, r, err) < 0) {
                    rc = -1;
                    break;
                }
                cn = 0;
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    (void)save;
    if (rc == 0 && cn && one(cur, start, r->n == 0, r, err) < 0) rc = -1;
    if (rc == 0 && r->n == 0) rc = err_invalid(err, "recipe", "the recipe has no FROM");
    free(buf);
    free(cur);
    if (rc < 0) sbx_recipe_fini(r);
    return rc;
}

void sbx_recipe_fini(struct sbx_recipe *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->steps[i].text);
        for (size_t j = 0; j < r->steps[i].nargs; j++)
            free(r->steps[i].args[j]);
        free(r->steps[i].args);
    }
    free(r->steps);
    memset(r, 0, sizeof *r);
}

int sbx_recipe_path(const char *cwd, const char *p, char *out, size_t outsz)
{
    char *full = p[0] == '/' ? xstrdup(p) : xasprintf("%s/%s", cwd, p);
    size_t n = 0;
    int rc = 0;
    if (outsz < 2)
        rc = -1;
    else
        out[n++] = '/';
    char *save = NULL;
    for (char *c = strtok_r(full, "/", &save); rc == 0 && c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, ".")) continue;
        if (!strcmp(c, "..")) {
            if (n <= 1)
                rc = -1;
            else {
                while (n > 1 && out[n - 1] != '/')
                    n--;
                if (n > 1) n--;
            }
            continue;
        }
        size_t cl = strlen(c);
        if (n + (n > 1) + cl + 1 > outsz)
            rc = -1;
        else {
            if (n > 1) out[n++] = '/';
            memcpy(out + n, c, cl);
            n += cl;
        }
    }
    if (rc == 0) out[n] = '\0';
    free(full);
    return rc;
}
