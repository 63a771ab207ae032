/*
 * policy_load.c - strict YAML -> compiled policy (see policy.h for the language).
 *
 * Two passes. First libyaml's event parser builds a small tree of scalars,
 * lists and mappings that remembers where each node sits in the file; anchors,
 * aliases and tags are refused right there, which also rules out "billion
 * laughs" expansion. Then the tree is walked and compiled into struct policy:
 * every key is checked against the keys that level allows, every value against
 * its type and range, globs are validated, regexes compiled. The first problem
 * stops the load with "file:line:col: what is wrong; how to fix it" - a policy
 * either loads exactly as written or not at all.
 */
#include "policy/policy_int.h"

#include "base/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define POLICY_ID_MAX 128
/* A policy needs 6 levels (rules/rule/when/arguments/pred/one_of); anything much
 * deeper is a mistake or an attack on the recursive walk. */
#define POLICY_MAX_DEPTH 32
#define POLICY_PATH_MAX 96 /* == sizeof(struct err){}.field */

/* ------------------------------------------------------------------------- */
/* A YAML tree with positions                                                */
/* ------------------------------------------------------------------------- */

enum ynode_type { YN_SCALAR, YN_SEQ, YN_MAP };

struct ynode {
    enum ynode_type type;
    int line, col; /* 1-based, line_offset applied */
    char *text;    /* scalars: value, NUL-terminated */
    size_t len;
    bool plain;          /* scalar written without quotes (so "~" / "" may be null) */
    struct ynode **kids; /* seq: items; map: key, value, key, value, ... */
    size_t n, cap;
};

struct loader {
    const char *file;
    const char *src;
    size_t src_len;
    int line_offset;
    struct err *err;
};

static void ynode_free(struct ynode *n)
{
    if (!n) return;
    for (size_t i = 0; i < n->n; i++)
        ynode_free(n->kids[i]);
    free(n->kids);
    free(n->text);
    free(n);
}

static struct ynode *ynode_new(const struct loader *L, enum ynode_type t, yaml_mark_t m)
{
    struct ynode *n = xcalloc(1, sizeof *n);
    n->type = t;
    n->line = (int)m.line + 1 + L->line_offset;
    n->col = (int)m.column + 1;
    return n;
}

static void ynode_add(struct ynode *parent, struct ynode *kid)
{
    if (parent->n == parent->cap) {
        parent->cap = parent->cap ? parent->cap * 2 : 8;
        parent->kids = xrealloc(parent->kids, parent->cap * sizeof *parent->kids);
    }
    parent->kids[parent->n++] = kid;
}

static bool ynode_is_null(const struct ynode *n)
{
    if (n->type != YN_SCALAR || !n->plain) return false;
    return n->len == 0 || !strcmp(n->text, "~") || !strcmp(n->text, "null") ||
           !strcmp(n->text, "Null") || !strcmp(n->text, "NULL");
}

/* How a node reads in a "must be X, not Y" message. */
static const char *ynode_kind(const struct ynode *n)
{
    if (ynode_is_null(n)) return "empty";
    switch (n->type) {
    case YN_SEQ:
        return "a list";
    case YN_MAP:
        return "a mapping";
    default:
        return "a string";
    }
}

/* ------------------------------------------------------------------------- */
/* Errors                                                                    */
/* ------------------------------------------------------------------------- */

__attribute__((format(printf, 5, 0))) static int
lerr_v(struct loader *L, int line, int col, const char *field, const char *fmt, va_list ap)
{
    char what[sizeof L->err->msg];
    vsnprintf(what, sizeof what, fmt, ap);
    return err_set(L->err, 400, "policy_invalid", field, "%s:%d:%d: %s", L->file, line, col, what);
}

/* Error at node `at`; `fmt` is "<what is wrong>; <the fix>". Returns -1. */
__attribute__((format(printf, 4, 5))) static int lerr(struct loader *L, const struct ynode *at,
                                                      const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lerr_v(L, at->line, at->col, field, fmt, ap);
    va_end(ap);
    return -1;
}

__attribute__((format(printf, 5, 6))) static int lerr_pos(struct loader *L, int line, int col,
                                                          const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lerr_v(L, line, col, field, fmt, ap);
    va_end(ap);
    return -1;
}

/* Error with no meaningful position (I/O, size). */
static int lerr_file(struct loader *L, const char *what)
{
    return err_set(L->err, 400, "policy_invalid", "", "%s: %s", L->file, what);
}

/* A path like "rules[2].when.targets" for err->field (truncated if very deep). */
__attribute__((format(printf, 3, 4))) static void path_fmt(char *dst, size_t size, const char *fmt,
                                                           ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, size, fmt, ap);
    va_end(ap);
}

/* Quote a user-supplied string for a message: control characters are escaped
 * (so a message stays on one line) and long values are cut short so the fix
 * still fits in err->msg. */
static const char *q(char *buf, size_t size, const char *s)
{
    size_t o = 0, lim = size - 5; /* room for the closing quote, "..." and NUL */
    buf[o++] = '"';
    for (; *s && o < lim; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n' || c == '\t') {
            buf[o++] = '\\';
            buf[o++] = c == '\n' ? 'n' : 't';
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    if (*s) {
        o = o > size - 5 ? size - 5 : o;
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* ------------------------------------------------------------------------- */
/* Pass 1: events -> tree                                                    */
/* ------------------------------------------------------------------------- */

static int yaml_syntax_error(struct loader *L, const yaml_parser_t *p)
{
    int line, col;
    if (p->error == YAML_READER_ERROR) {
        /* Reader errors (bad encoding, control characters) carry only a byte offset. */
        size_t off = p->problem_offset < L->src_len ? p->problem_offset : L->src_len;
        line = 1;
        col = 1;
        for (size_t i = 0; i < off; i++) {
            if (L->src[i] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        line += L->line_offset;
    } else {
        line = (int)p->problem_mark.line + 1 + L->line_offset;
        col = (int)p->problem_mark.column + 1;
    }
    if (p->error == YAML_MEMORY_ERROR) assert_fail("libyaml out of memory", __FILE__, __LINE__);
    char ctx[160] = "";
    if (p->context)
        snprintf(ctx, sizeof ctx, " (%s at line %d)", p->context,
                 (int)p->context_mark.line + 1 + L->line_offset);
    if (p->error == YAML_READER_ERROR)
        return lerr_pos(L, line, col, "",
                        "invalid YAML: %s; save the policy as UTF-8 text without control "
                        "characters",
                        p->problem ? p->problem : "unreadable input");
    return lerr_pos(L, line, col, "",
                    "invalid YAML: %s%s; fix the syntax here (usual causes: wrong indentation, "
                    "a missing space after ':', an unclosed quote or bracket)",
                    p->problem ? p->problem : "syntax error", ctx);
}

/* Anchors, aliases and tags have no use in a policy; refusing them keeps the
 * tree a tree (no shared or exponentially expanded nodes). */
static int refuse_anchor_tag(struct loader *L, const yaml_event_t *ev, const yaml_char_t *anchor,
                             const yaml_char_t *tag)
{
    int line = (int)ev->start_mark.line + 1 + L->line_offset;
    int col = (int)ev->start_mark.column + 1;
    if (anchor)
        return lerr_pos(L, line, col, "",
                        "YAML anchor &%.60s is not supported in a policy; write the value out "
                        "in full instead of using anchors and aliases",
                        (const char *)anchor);
    if (tag)
        return lerr_pos(L, line, col, "",
                        "YAML tag %.60s is not supported in a policy; remove the tag (quote "
                        "the value if you need it read as a string)",
                        (const char *)tag);
    return 0;
}

static int build_tree(struct loader *L, struct ynode **root_out)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    struct ynode *stack[POLICY_MAX_DEPTH];
    struct ynode *root = NULL;
    int depth = 0, docs = 0, rc = 0;
    bool done = false;

    if (!yaml_parser_initialize(&parser)) assert_fail("yaml_parser_initialize", __FILE__, __LINE__);
    yaml_parser_set_input_string(&parser, (const unsigned char *)L->src, L->src_len);

    while (!done && rc == 0) {
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = yaml_syntax_error(L, &parser);
            break;
        }
        struct ynode *node = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++docs > 1)
                rc = lerr_pos(L, (int)ev.start_mark.line + 1 + L->line_offset,
                              (int)ev.start_mark.column + 1, "",
                              "a second YAML document starts here; a policy is one document - "
                              "remove the extra '---' and what follows or merge the rules");
            break;
        case YAML_ALIAS_EVENT:
            rc = lerr_pos(L, (int)ev.start_mark.line + 1 + L->line_offset,
                          (int)ev.start_mark.column + 1, "",
                          "YAML alias *%.60s is not supported in a policy; write the value out "
                          "in full instead of using anchors and aliases",
                          (const char *)ev.data.alias.anchor);
            break;
        case YAML_SCALAR_EVENT:
            rc = refuse_anchor_tag(L, &ev, ev.data.scalar.anchor, ev.data.scalar.tag);
            if (rc) break;
            if (memchr(ev.data.scalar.value, '\0', ev.data.scalar.length)) {
                rc = lerr_pos(L, (int)ev.start_mark.line + 1 + L->line_offset,
                              (int)ev.start_mark.column + 1, "",
                              "value contains a NUL character; remove the \\0 escape");
                break;
            }
            node = ynode_new(L, YN_SCALAR, ev.start_mark);
            node->text = xstrndup((const char *)ev.data.scalar.value, ev.data.scalar.length);
            node->len = ev.data.scalar.length;
            node->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
            break;
        case YAML_SEQUENCE_START_EVENT:
            rc = refuse_anchor_tag(L, &ev, ev.data.sequence_start.anchor,
                                   ev.data.sequence_start.tag);
            if (!rc) node = ynode_new(L, YN_SEQ, ev.start_mark);
            break;
        case YAML_MAPPING_START_EVENT:
            rc = refuse_anchor_tag(L, &ev, ev.data.mapping_start.anchor, ev.data.mapping_start.tag);
            if (!rc) node = ynode_new(L, YN_MAP, ev.start_mark);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            break;
        default:
            break;
        }
        if (node) {
            /* Attach at once so an error below frees it with the tree. */
            if (depth == 0)
                root = node;
            else
                ynode_add(stack[depth - 1], node);
            if (node->type != YN_SCALAR) {
                if (depth == POLICY_MAX_DEPTH)
                    rc = lerr(L, node, "",
                              "nesting is deeper than %d levels; a policy needs at most 6 - "
                              "check the indentation",
                              POLICY_MAX_DEPTH);
                else
                    stack[depth++] = node;
            }
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (rc) {
        ynode_free(root);
        return -1;
    }
    *root_out = root;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Pass 2 helpers: keys and typed values                                     */
/* ------------------------------------------------------------------------- */

struct key_alias {
    const char *name;
    size_t canon; /* index into keytab.names */
};

struct keytab {
    const char *where; /* "when", "then", ... as used in messages */
    const char *const *names;
    size_t n;
    const struct key_alias *aliases;
    size_t n_aliases;
};

#define KEYS_MAX 8

/* The value (and key) nodes of a mapping, by canonical key index. */
struct keyvals {
    const struct ynode *key[KEYS_MAX];
    const struct ynode *val[KEYS_MAX];
};

static int keytab_lookup(const struct keytab *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->names[i], name)) return (int)i;
    for (size_t i = 0; i < t->n_aliases; i++)
        if (!strcmp(t->aliases[i].name, name)) return (int)t->aliases[i].canon;
    return -1;
}

/*
 * Check every key of `map` against `t` and sort the values by key. Unknown
 * keys, non-string keys and duplicates (including an alias next to its
 * canonical name) are errors.
 */
static int split_keys(struct loader *L, const struct ynode *map, const char *path,
                      const struct keytab *t, struct keyvals *kv)
{
    memset(kv, 0, sizeof *kv);
    for (size_t i = 0; i + 1 < map->n; i += 2) {
        const struct ynode *k = map->kids[i];
        char b[80];
        if (k->type != YN_SCALAR || ynode_is_null(k))
            return lerr(L, k, path, "a key in %s is %s; keys must be plain names", t->where,
                        ynode_kind(k));
        int idx = keytab_lookup(t, k->text);
        if (idx < 0) {
            char list[256] = "";
            size_t off = 0;
            for (size_t j = 0; j < t->n && off < sizeof list; j++)
                off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", j ? ", " : "",
                                        t->names[j]);
            return lerr(L, k, path, "unknown key %s in %s; expected one of: %s",
                        q(b, sizeof b, k->text), t->where, list);
        }
        if (kv->key[idx]) {
            const struct ynode *first = kv->key[idx];
            if (!strcmp(first->text, k->text))
                return lerr(L, k, path,
                            "duplicate key %s in %s (first at line %d); keep only one of them",
                            q(b, sizeof b, k->text), t->where, first->line);
            return lerr(L, k, path,
                        "keys \"%s\" (line %d) and \"%s\" in %s mean the same thing; keep only "
                        "one of them",
                        first->text, first->line, k->text, t->where);
        }
        kv->key[idx] = k;
        kv->val[idx] = map->kids[i + 1];
    }
    return 0;
}

/* A non-empty scalar value. `example` shows the right form in the fix. */
static int want_str(struct loader *L, const struct ynode *key, const struct ynode *val,
                    const char *path, const char *example, const char **out)
{
    if (ynode_is_null(val))
        return lerr(L, key, path, "%s has no value; write it like %s, or remove the key", key->text,
                    example);
    if (val->type != YN_SCALAR)
        return lerr(L, val, path, "%s must be a string, not %s; write it like %s", key->text,
                    ynode_kind(val), example);
    *out = val->text;
    return 0;
}

/* A list (null only when allow_null: then n = 0 items). */
static int want_list(struct loader *L, const struct ynode *key, const struct ynode *val,
                     const char *path, const char *example, bool allow_null)
{
    if (ynode_is_null(val)) {
        if (allow_null) return 0;
        return lerr(L, key, path, "%s has no value; write it like %s, or remove the key", key->text,
                    example);
    }
    if (val->type != YN_SEQ)
        return lerr(L, val, path, "%s must be a list, not %s; write it like %s", key->text,
                    ynode_kind(val), example);
    return 0;
}

static int want_map(struct loader *L, const struct ynode *key, const struct ynode *val,
                    const char *path, const char *example, bool allow_null)
{
    if (ynode_is_null(val)) {
        if (allow_null) return 0;
        return lerr(L, key, path, "%s has no value; write it like %s, or remove the key", key->text,
                    example);
    }
    if (val->type != YN_MAP)
        return lerr(L, val, path, "%s must be a mapping, not %s; write it like %s", key->text,
                    ynode_kind(val), example);
    return 0;
}

/* Each item of a list must be a non-empty scalar. */
static int want_str_items(struct loader *L, const struct ynode *key, const struct ynode *list,
                          const char *path, const char *example)
{
    for (size_t i = 0; i < list->n; i++) {
        const struct ynode *it = list->kids[i];
        if (it->type != YN_SCALAR || ynode_is_null(it))
            return lerr(L, it, path,
                        "item %zu of %s is %s; every item must be a string - write it like %s",
                        i + 1, key->text, ynode_kind(it), example);
    }
    return 0;
}

static void strset_from_list(struct policy_strset *s, const struct ynode *list)
{
    s->n = list->n;
    s->v = xcalloc(s->n ? s->n : 1, sizeof *s->v);
    s->len = xcalloc(s->n ? s->n : 1, sizeof *s->len);
    for (size_t i = 0; i < s->n; i++) {
        s->v[i] = xstrdup(list->kids[i]->text);
        s->len[i] = list->kids[i]->len;
    }
}

static void strset_free(struct policy_strset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    free(s->v);
    free(s->len);
}

/* ------------------------------------------------------------------------- */
/* Durations                                                                 */
/* ------------------------------------------------------------------------- */

int policy_parse_duration(const char *s, int64_t *ms)
{
    if (!s || !*s) return -EINVAL;
    int64_t total = 0;
    const char *p = s;
    bool bare = strspn(s, "0123456789") == strlen(s);
    while (*p) {
        if (!isdigit((unsigned char)*p)) return -EINVAL;
        int64_t v = 0;
        for (; isdigit((unsigned char)*p); p++) {
            if (v > (INT64_MAX - 9) / 10) return -EINVAL;
            v = v * 10 + (*p - '0');
        }
        int64_t mult;
        if (bare)
            mult = 1000; /* bare integer: seconds */
        else if (!strncmp(p, "ms", 2))
            mult = 1, p += 2;
        else if (*p == 's')
            mult = 1000, p++;
        else if (*p == 'm')
            mult = 60 * 1000, p++;
        else if (*p == 'h')
            mult = 3600 * 1000, p++;
        else if (*p == 'd')
            mult = 86400 * 1000, p++;
        else
            return -EINVAL;
        if (v > (INT64_MAX - total) / mult) return -EINVAL;
        total += v * mult;
    }
    *ms = total;
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Globs and regexes                                                         */
/* ------------------------------------------------------------------------- */

/* Why fnmatch(3) would not read `p` the way its author meant, or NULL. glibc
 * quietly treats a '[' without ']' as a literal, which hides typos. */
static const char *glob_problem(const char *p)
{
    for (; *p; p++) {
        if (*p == '\\') {
            if (!p[1])
                return "ends with a lone backslash; remove it or write \\\\ for a "
                       "literal backslash";
            p++;
            continue;
        }
        if (*p != '[') continue;
        const char *c = p + 1;
        if (*c == '!' || *c == '^') c++;
        if (*c == ']') c++;
        for (; *c && *c != ']'; c++) {
            if (*c == '[' && (c[1] == ':' || c[1] == '.' || c[1] == '=')) {
                char delim[3] = {c[1], ']', '\0'};
                const char *e = strstr(c + 2, delim);
                if (!e) return "has an unclosed [: :] class; close it like [[:digit:]]";
                c = e + 1;
            } else if (*c == '\\' && c[1]) {
                c++;
            }
        }
        if (!*c)
            return "has a '[' without a closing ']'; close the set, or write \\[ to "
                   "match a literal '['";
        p = c;
    }
    return NULL;
}

static bool glob_is_literal(const char *p)
{
    return strpbrk(p, "*?[\\") == NULL;
}

/* Perl/RE2 escapes that POSIX ERE (glibc) silently reads as plain letters, so a
 * pattern using them would compile and then never match as intended. */
static const char *regex_problem(const char *p)
{
    for (; *p; p++) {
        if (*p == '[') {
            /* Skip a bracket expression: backslashes inside are literal in POSIX. */
            const char *c = p + 1;
            if (*c == '^') c++;
            if (*c == ']') c++;
            for (; *c && *c != ']'; c++) {
                if (*c == '[' && (c[1] == ':' || c[1] == '.' || c[1] == '=')) {
                    char delim[3] = {c[1], ']', '\0'};
                    const char *e = strstr(c + 2, delim);
                    if (!e) break;
                    c = e + 1;
                }
            }
            if (!*c) return NULL; /* let regcomp report it */
            p = c;
            continue;
        }
        if (*p != '\\' || !p[1]) continue;
        p++;
        switch (*p) {
        case 'd':
            return "uses \\d, which POSIX regex reads as a plain 'd'; use [0-9]";
        case 'D':
            return "uses \\D, which POSIX regex reads as a plain 'D'; use [^0-9]";
        case 'A':
        case 'z':
        case 'Z':
            return "uses \\A/\\z, which POSIX regex does not have; use ^ and $";
        default:
            break;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* Pass 2: the policy                                                        */
/* ------------------------------------------------------------------------- */

static const char *const kind_names[] = {"tool_call", "llm_call", "local"};

static int parse_kind(struct loader *L, const struct ynode *key, const struct ynode *v,
                      const char *path, unsigned *bit)
{
    for (size_t i = 0; i < ARRAY_LEN(kind_names); i++) {
        if (!strcmp(v->text, kind_names[i])) {
            *bit = 1u << i;
            return 0;
        }
    }
    char b[80];
    return lerr(L, v, path, "%s %s is not a step kind; use one of: tool_call, llm_call, local",
                key->text, q(b, sizeof b, v->text));
}

static int compile_globs(struct loader *L, const struct ynode *key, const struct ynode *list,
                         const char *path, struct policy_globset *g)
{
    g->n = list->n;
    g->v = xcalloc(g->n, sizeof *g->v);
    for (size_t i = 0; i < list->n; i++) {
        const struct ynode *it = list->kids[i];
        const char *why = glob_problem(it->text);
        char b[80];
        if (why) return lerr(L, it, path, "pattern %s %s", q(b, sizeof b, it->text), why);
        g->v[i].pat = xstrdup(it->text);
        g->v[i].literal = glob_is_literal(it->text);
    }
    return 0;
}

static const char *const pred_keys[] = {"equals", "not_equals", "contains", "prefix",
                                        "one_of", "regex",      "glob"};
enum { PK_EQUALS, PK_NOT_EQUALS, PK_CONTAINS, PK_PREFIX, PK_ONE_OF, PK_REGEX, PK_GLOB };

static int compile_pred(struct loader *L, const struct ynode *name, const struct ynode *val,
                        const char *path, struct policy_pred *pr)
{
    static const struct keytab tab = {"an argument predicate", pred_keys, ARRAY_LEN(pred_keys),
                                      NULL, 0};
    char b[80];
    pr->arg = xstrdup(name->text);
    if (ynode_is_null(val) || (val->type == YN_MAP && val->n == 0))
        return lerr(L, ynode_is_null(val) ? name : val, path,
                    "argument %s has no constraint; add at least one of: equals, not_equals, "
                    "contains, prefix, one_of, regex, glob",
                    q(b, sizeof b, name->text));
    if (val->type != YN_MAP)
        return lerr(L, val, path,
                    "argument %s must be a mapping of constraints, not %s; write it like "
                    "%s: {equals: \"value\"}",
                    q(b, sizeof b, name->text), ynode_kind(val), name->text);
    struct keyvals kv;
    if (split_keys(L, val, path, &tab, &kv)) return -1;

    /* The single-string constraints. */
    struct {
        int key;
        unsigned bit;
        struct policy_str *dst;
        bool empty_ok; /* "" still constrains for equals/not_equals, never for the others */
    } strs[] = {
        {PK_EQUALS, POLICY_PRED_EQUALS, &pr->equals, true},
        {PK_NOT_EQUALS, POLICY_PRED_NOT_EQUALS, &pr->not_equals, true},
        {PK_CONTAINS, POLICY_PRED_CONTAINS, &pr->contains, false},
        {PK_PREFIX, POLICY_PRED_PREFIX, &pr->prefix, false},
    };
    for (size_t i = 0; i < ARRAY_LEN(strs); i++) {
        const struct ynode *k = kv.key[strs[i].key], *v = kv.val[strs[i].key];
        const char *s;
        char ex[64];
        if (!k) continue;
        snprintf(ex, sizeof ex, "%s: \"value\"", pred_keys[strs[i].key]);
        if (want_str(L, k, v, path, ex, &s)) return -1;
        if (!*s && !strs[i].empty_ok)
            return lerr(L, v, path, "%s \"\" matches every value; remove it or give a value",
                        k->text);
        strs[i].dst->s = xstrdup(s);
        strs[i].dst->len = v->len;
        pr->has |= strs[i].bit;
    }
    if (kv.key[PK_ONE_OF]) {
        const struct ynode *k = kv.key[PK_ONE_OF], *v = kv.val[PK_ONE_OF];
        if (want_list(L, k, v, path, "one_of: [a, b]", false) ||
            want_str_items(L, k, v, path, "one_of: [a, b]"))
            return -1;
        if (v->n == 0)
            return lerr(L, v, path,
                        "one_of is empty so nothing could match; list at least one value");
        strset_from_list(&pr->one_of, v);
        pr->has |= POLICY_PRED_ONE_OF;
    }
    if (kv.key[PK_GLOB]) {
        const struct ynode *k = kv.key[PK_GLOB], *v = kv.val[PK_GLOB];
        const char *s, *why;
        if (want_str(L, k, v, path, "glob: \"*.txt\"", &s)) return -1;
        if ((why = glob_problem(s))) return lerr(L, v, path, "glob %s %s", q(b, sizeof b, s), why);
        pr->glob = xstrdup(s);
        pr->has |= POLICY_PRED_GLOB;
    }
    if (kv.key[PK_REGEX]) {
        const struct ynode *k = kv.key[PK_REGEX], *v = kv.val[PK_REGEX];
        const char *s, *why;
        if (want_str(L, k, v, path, "regex: \"^ls( |$)\"", &s)) return -1;
        if (!*s)
            return lerr(L, v, path, "regex \"\" matches every value; remove it or give a pattern");
        if ((why = regex_problem(s)))
            return lerr(L, v, path, "regex %s %s", q(b, sizeof b, s), why);
        int rc = regcomp(&pr->re, s, REG_EXTENDED | REG_NOSUB);
        if (rc) {
            char msg[128];
            regerror(rc, &pr->re, msg, sizeof msg);
            return lerr(L, v, path,
                        "regex %s does not compile: %s; fix the pattern (POSIX extended "
                        "syntax: escape ( ) [ ] { } . * + ? | ^ $ with a backslash to match "
                        "them literally)",
                        q(b, sizeof b, s), msg);
        }
        pr->has |= POLICY_PRED_REGEX;
    }
    return 0;
}

static int compile_when(struct loader *L, const struct ynode *key, const struct ynode *val,
                        const char *rpath, struct policy_rule *r)
{
    static const char *const names[] = {"step_kind", "step_kinds", "target",   "targets",
                                        "agent",     "agents",     "arguments", "forked"};
    static const struct key_alias aliases[] = {{"agent_id", 4}, {"agent_ids", 5}};
    static const struct keytab tab = {"when", names, ARRAY_LEN(names), aliases, ARRAY_LEN(aliases)};
    enum { W_KIND, W_KINDS, W_TARGET, W_TARGETS, W_AGENT, W_AGENTS, W_ARGS, W_FORKED };
    char path[POLICY_PATH_MAX], b[80];
    struct keyvals kv;

    path_fmt(path, sizeof path, "%s.when", rpath);
    if (want_map(L, key, val, path, "when: {target: shell}", true)) return -1;
    if (val->type != YN_MAP) return 0; /* null: always matches */
    if (split_keys(L, val, path, &tab, &kv)) return -1;

    unsigned kinds = POLICY_KIND_TOOL_CALL | POLICY_KIND_LLM_CALL | POLICY_KIND_LOCAL;
    bool kind_set = false;
    if (kv.key[W_KIND]) {
        const char *s;
        unsigned bit;
        path_fmt(path, sizeof path, "%s.when.step_kind", rpath);
        if (kv.val[W_KIND]->type == YN_SEQ)
            return lerr(L, kv.val[W_KIND], path,
                        "step_kind must be a single kind, not a list; use step_kinds: [...] "
                        "for several");
        if (want_str(L, kv.key[W_KIND], kv.val[W_KIND], path, "step_kind: tool_call", &s) ||
            parse_kind(L, kv.key[W_KIND], kv.val[W_KIND], path, &bit))
            return -1;
        kinds &= bit;
        kind_set = true;
    }
    if (kv.key[W_KINDS]) {
        const struct ynode *k = kv.key[W_KINDS], *v = kv.val[W_KINDS];
        const char *ex = "step_kinds: [tool_call, llm_call]";
        unsigned any = 0, bit;
        path_fmt(path, sizeof path, "%s.when.step_kinds", rpath);
        if (want_list(L, k, v, path, ex, false) || want_str_items(L, k, v, path, ex)) return -1;
        if (v->n == 0)
            return lerr(L, v, path,
                        "step_kinds is empty so nothing could match; list at "
                        "least one of tool_call, llm_call, local");
        for (size_t i = 0; i < v->n; i++) {
            if (parse_kind(L, k, v->kids[i], path, &bit)) return -1;
            any |= bit;
        }
        kinds &= any;
        kind_set = true;
    }
    if (kind_set && !kinds)
        return lerr(L, kv.key[W_KINDS], path,
                    "step_kind and step_kinds have no kind in common so the rule can never "
                    "match; keep only one of them");
    r->kinds = kind_set ? kinds : 0;

    if (kv.key[W_TARGET]) {
        const char *s;
        path_fmt(path, sizeof path, "%s.when.target", rpath);
        if (kv.val[W_TARGET]->type == YN_SEQ)
            return lerr(L, kv.val[W_TARGET], path,
                        "target must be a single pattern, not a list; use targets: [...] for "
                        "several");
        if (want_str(L, kv.key[W_TARGET], kv.val[W_TARGET], path, "target: \"shell*\"", &s))
            return -1;
        struct ynode one = {.n = 1, .kids = (struct ynode **)&kv.val[W_TARGET]};
        if (compile_globs(L, kv.key[W_TARGET], &one, path, &r->target)) return -1;
        r->has_target = true;
    }
    if (kv.key[W_TARGETS]) {
        const struct ynode *k = kv.key[W_TARGETS], *v = kv.val[W_TARGETS];
        const char *ex = "targets: [shell, read_file] (or target: shell for a single one)";
        path_fmt(path, sizeof path, "%s.when.targets", rpath);
        if (want_list(L, k, v, path, ex, false) || want_str_items(L, k, v, path, ex)) return -1;
        if (v->n == 0)
            return lerr(L, v, path,
                        "targets is empty so nothing could match; list at least one target");
        if (compile_globs(L, k, v, path, &r->targets)) return -1;
        r->has_targets = true;
    }
    if (kv.key[W_AGENT]) {
        const char *s;
        path_fmt(path, sizeof path, "%s.when.%s", rpath, kv.key[W_AGENT]->text);
        if (kv.val[W_AGENT]->type == YN_SEQ)
            return lerr(L, kv.val[W_AGENT], path,
                        "%s must be a single agent id, not a list; use agents: [...] for "
                        "several",
                        kv.key[W_AGENT]->text);
        if (want_str(L, kv.key[W_AGENT], kv.val[W_AGENT], path, "agent: coder", &s)) return -1;
        struct ynode one = {.n = 1, .kids = (struct ynode **)&kv.val[W_AGENT]};
        strset_from_list(&r->agent, &one);
        r->has_agent = true;
    }
    if (kv.key[W_AGENTS]) {
        const struct ynode *k = kv.key[W_AGENTS], *v = kv.val[W_AGENTS];
        const char *ex = "agents: [coder, reviewer]";
        path_fmt(path, sizeof path, "%s.when.%s", rpath, k->text);
        if (want_list(L, k, v, path, ex, false) || want_str_items(L, k, v, path, ex)) return -1;
        if (v->n == 0)
            return lerr(L, v, path,
                        "%s is empty so nothing could match; list at least one agent id", k->text);
        strset_from_list(&r->agents, v);
        r->has_agents = true;
    }
    if (kv.key[W_FORKED]) {
        const char *s;
        path_fmt(path, sizeof path, "%s.when.forked", rpath);
        if (want_str(L, kv.key[W_FORKED], kv.val[W_FORKED], path, "forked: true", &s)) return -1;
        if (strcmp(s, "true") && strcmp(s, "false"))
            return lerr(L, kv.val[W_FORKED], path,
                        "forked must be true (only steps of forks) or false (only steps outside "
                        "forks), not %s",
                        q(b, sizeof b, s));
        r->has_forked = true;
        r->forked = s[0] == 't';
    }
    if (kv.key[W_ARGS]) {
        const struct ynode *k = kv.key[W_ARGS], *v = kv.val[W_ARGS];
        path_fmt(path, sizeof path, "%s.when.arguments", rpath);
        if (want_map(L, k, v, path, "arguments: {command: {prefix: \"ls\"}}", false)) return -1;
        if (v->n == 0)
            return lerr(L, v, path,
                        "arguments is empty; add a predicate like command: {equals: \"ls\"} "
                        "or remove arguments");
        r->n_preds = v->n / 2;
        r->preds = xcalloc(r->n_preds, sizeof *r->preds);
        for (size_t i = 0; i < r->n_preds; i++) {
            const struct ynode *name = v->kids[2 * i];
            if (name->type != YN_SCALAR || ynode_is_null(name))
                return lerr(L, name, path, "an argument name is %s; use the argument's name",
                            ynode_kind(name));
            for (size_t j = 0; j < i; j++)
                if (!strcmp(v->kids[2 * j]->text, name->text))
                    return lerr(L, name, path,
                                "duplicate argument %s in arguments (first at line %d); put "
                                "all its constraints under one key",
                                q(b, sizeof b, name->text), v->kids[2 * j]->line);
            path_fmt(path, sizeof path, "%s.when.arguments.%s", rpath, name->text);
            if (compile_pred(L, name, v->kids[2 * i + 1], path, &r->preds[i])) return -1;
        }
    }
    return 0;
}

static int compile_approval(struct loader *L, const struct ynode *key, const struct ynode *val,
                            const char *rpath, struct policy_rule *r)
{
    static const char *const names[] = {"timeout", "approvers", "message"};
    static const struct keytab tab = {"approval", names, ARRAY_LEN(names), NULL, 0};
    char path[POLICY_PATH_MAX], b[80];
    struct keyvals kv;

    path_fmt(path, sizeof path, "%s.then.%s", rpath, key->text);
    if (want_map(L, key, val, path, "approval: {timeout: 15m, approvers: [alice]}", true))
        return -1;
    if (val->type != YN_MAP) return 0;
    if (split_keys(L, val, path, &tab, &kv)) return -1;
    if (kv.key[0]) {
        const char *s;
        int64_t ms;
        path_fmt(path, sizeof path, "%s.then.%s.timeout", rpath, key->text);
        if (want_str(L, kv.key[0], kv.val[0], path, "timeout: 15m", &s)) return -1;
        if (policy_parse_duration(s, &ms))
            return lerr(L, kv.val[0], path,
                        "timeout %s is not a duration; write it like 90s, 15m, 1h30m, 2h, 30d "
                        "or a whole number of seconds",
                        q(b, sizeof b, s));
        if (ms < 1000 || ms > 30LL * 86400 * 1000)
            return lerr(L, kv.val[0], path,
                        "timeout %s is out of range; use between 1s and 30d (omit it for the "
                        "kernel default)",
                        q(b, sizeof b, s));
        r->approval_timeout_ms = ms;
    }
    if (kv.key[1]) {
        const char *ex = "approvers: [alice, bob]";
        path_fmt(path, sizeof path, "%s.then.%s.approvers", rpath, key->text);
        if (want_list(L, kv.key[1], kv.val[1], path, ex, false) ||
            want_str_items(L, kv.key[1], kv.val[1], path, ex))
            return -1;
        /* Built once here so every evaluation can hand out the same array. */
        r->approvers = json_array();
        ASSERT(r->approvers);
        for (size_t i = 0; i < kv.val[1]->n; i++) {
            const struct ynode *it = kv.val[1]->kids[i];
            json_t *name = json_stringn(it->text, it->len);
            if (!name)
                return lerr(L, it, path, "approver %s is not valid UTF-8; fix the name",
                            q(b, sizeof b, it->text));
            json_array_append_new(r->approvers, name);
        }
    }
    if (kv.key[2]) {
        const char *s;
        path_fmt(path, sizeof path, "%s.then.%s.message", rpath, key->text);
        if (want_str(L, kv.key[2], kv.val[2], path, "message: \"why a human must look\"", &s))
            return -1;
        r->approval_message = xstrdup(s);
    }
    return 0;
}

/* A whole number in [min, max] (a plain scalar). */
static int want_int(struct loader *L, const struct ynode *key, const struct ynode *val, const char *path,
                    const char *example, int64_t min, int64_t max, int64_t *out)
{
    const char *s;
    char b[80];
    if (want_str(L, key, val, path, example, &s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return lerr(L, val, path, "%s %s is not a whole number from %lld to %lld; write it like %s", key->text,
                    q(b, sizeof b, s), (long long)min, (long long)max, example);
    *out = v;
    return 0;
}

/* One of names; *out its index. */
static int want_enum(struct loader *L, const struct ynode *key, const struct ynode *val, const char *path,
                     const char *const *names, size_t n, size_t *out)
{
    const char *s;
    char b[80], list[128] = "";
    if (want_str(L, key, val, path, names[0], &s)) return -1;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(s, names[i])) {
            *out = i;
            return 0;
        }
        size_t off = strlen(list);
        snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", names[i]);
    }
    return lerr(L, val, path, "%s %s is not valid; use one of: %s", key->text, q(b, sizeof b, s), list);
}

static int want_duration(struct loader *L, const struct ynode *key, const struct ynode *val, const char *path,
                         int64_t *ms)
{
    const char *s;
    char b[80];
    if (want_str(L, key, val, path, "1m", &s)) return -1;
    if (policy_parse_duration(s, ms) || *ms < 1000 || *ms > 366LL * 86400 * 1000)
        return lerr(L, val, path, "%s %s is not a duration from 1s to 366d; write it like 30s, 1m, 1h30m",
                    key->text, q(b, sizeof b, s));
    return 0;
}

static int compile_rate_limit(struct loader *L, const struct ynode *key, const struct ynode *val,
                              const char *rpath, struct policy_rule *r)
{
    static const char *const names[] = {"max_calls", "window", "per_what", "on_limiter_error", "max_wait"};
    static const struct keytab tab = {"rate_limit", names, ARRAY_LEN(names), NULL, 0};
    static const char *const scopes[] = {"execution", "agent", "global"};
    static const char *const on_err[] = {"allow", "deny"};
    char path[POLICY_PATH_MAX];
    struct keyvals kv;
    size_t e;
    path_fmt(path, sizeof path, "%s.then.rate_limit", rpath);
    if (want_map(L, key, val, path, "rate_limit: {max_calls: 5, window: 1m}", false)) return -1;
    if (split_keys(L, val, path, &tab, &kv)) return -1;
    struct policy_rate_limit *rl = &r->rate_limit;
    if (!kv.key[0] || !kv.key[1])
        return lerr(L, val, path, "rate_limit needs max_calls and window; write it like "
                                  "rate_limit: {max_calls: 5, window: 1m}");
    path_fmt(path, sizeof path, "%s.then.rate_limit.max_calls", rpath);
    if (want_int(L, kv.key[0], kv.val[0], path, "max_calls: 5", 1, 1000000000, &rl->max_calls)) return -1;
    path_fmt(path, sizeof path, "%s.then.rate_limit.window", rpath);
    if (want_duration(L, kv.key[1], kv.val[1], path, &rl->window_ms)) return -1;
    if (kv.key[2]) {
        path_fmt(path, sizeof path, "%s.then.rate_limit.per_what", rpath);
        if (want_enum(L, kv.key[2], kv.val[2], path, scopes, ARRAY_LEN(scopes), &e)) return -1;
        rl->per = (enum policy_scope)e;
    }
    if (kv.key[3]) {
        path_fmt(path, sizeof path, "%s.then.rate_limit.on_limiter_error", rpath);
        if (want_enum(L, kv.key[3], kv.val[3], path, on_err, ARRAY_LEN(on_err), &e)) return -1;
        rl->deny_on_error = e == 1;
    }
    if (kv.key[4]) {
        path_fmt(path, sizeof path, "%s.then.rate_limit.max_wait", rpath);
        if (want_duration(L, kv.key[4], kv.val[4], path, &rl->max_wait_ms)) return -1;
    }
    r->has_rate_limit = true;
    return 0;
}

static int compile_budget(struct loader *L, const struct ynode *key, const struct ynode *val,
                          const char *rpath, struct policy_rule *r)
{
    static const char *const names[] = {"max_tokens", "on_exceed"};
    static const struct keytab tab = {"budget", names, ARRAY_LEN(names), NULL, 0};
    static const char *const on_exceed[] = {"deny", "require_approval"};
    char path[POLICY_PATH_MAX];
    struct keyvals kv;
    size_t e;
    path_fmt(path, sizeof path, "%s.then.budget", rpath);
    if (want_map(L, key, val, path, "budget: {max_tokens: 200000}", false)) return -1;
    if (split_keys(L, val, path, &tab, &kv)) return -1;
    if (!kv.key[0]) return lerr(L, val, path, "budget needs max_tokens; write it like budget: {max_tokens: 200000}");
    path_fmt(path, sizeof path, "%s.then.budget.max_tokens", rpath);
    if (want_int(L, kv.key[0], kv.val[0], path, "max_tokens: 200000", 1, INT64_MAX / 4, &r->budget.max_tokens))
        return -1;
    if (kv.key[1]) {
        path_fmt(path, sizeof path, "%s.then.budget.on_exceed", rpath);
        if (want_enum(L, kv.key[1], kv.val[1], path, on_exceed, ARRAY_LEN(on_exceed), &e)) return -1;
        r->budget.require_approval = e == 1;
    }
    r->has_budget = true;
    return 0;
}

static int compile_judge(struct loader *L, const struct ynode *key, const struct ynode *val,
                         const char *rpath, struct policy_rule *r)
{
    static const char *const names[] = {"instructions", "threshold", "fallback"};
    static const struct keytab tab = {"judge", names, ARRAY_LEN(names), NULL, 0};
    static const char *const fallbacks[] = {"allow", "deny", "require_approval"};
    char path[POLICY_PATH_MAX], b[80];
    struct keyvals kv;
    size_t e;
    path_fmt(path, sizeof path, "%s.then.judge", rpath);
    if (want_map(L, key, val, path, "judge: {instructions: \"...\", threshold: 0.6}", true)) return -1;
    if (val->type != YN_MAP) return 0;
    if (split_keys(L, val, path, &tab, &kv)) return -1;
    const char *s;
    if (kv.key[0]) {
        path_fmt(path, sizeof path, "%s.then.judge.instructions", rpath);
        if (want_str(L, kv.key[0], kv.val[0], path, "instructions: \"where the call runs\"", &s)) return -1;
        free(r->judge_instructions);
        r->judge_instructions = xstrdup(s);
        r->judge.instructions = r->judge_instructions;
    }
    if (kv.key[1]) {
        path_fmt(path, sizeof path, "%s.then.judge.threshold", rpath);
        if (want_str(L, kv.key[1], kv.val[1], path, "threshold: 0.6", &s)) return -1;
        char *end;
        errno = 0;
        double t = strtod(s, &end);
        if (errno || end == s || *end || !(t > 0 && t <= 1))
            return lerr(L, kv.val[1], path, "threshold %s is not a probability above 0 and at most 1; write it "
                                            "like threshold: 0.6", q(b, sizeof b, s));
        r->judge.threshold = t;
    }
    if (kv.key[2]) {
        path_fmt(path, sizeof path, "%s.then.judge.fallback", rpath);
        if (want_enum(L, kv.key[2], kv.val[2], path, fallbacks, ARRAY_LEN(fallbacks), &e)) return -1;
        r->judge.fallback = (enum policy_decision)e;
    }
    return 0;
}

static int compile_then(struct loader *L, const struct ynode *key, const struct ynode *val,
                        const char *rpath, struct policy_rule *r)
{
    static const char *const names[] = {"decision", "reason", "approval", "rate_limit", "budget", "judge"};
    static const struct key_alias aliases[] = {{"approval_config", 2}};
    static const struct keytab tab = {"then", names, ARRAY_LEN(names), aliases, ARRAY_LEN(aliases)};
    static const char *const decisions[] = {"allow", "deny", "require_approval", "judge"};
    char path[POLICY_PATH_MAX], b[80];
    struct keyvals kv;
    const char *s;

    path_fmt(path, sizeof path, "%s.then", rpath);
    if (ynode_is_null(val) || (val->type == YN_MAP && val->n == 0))
        return lerr(L, ynode_is_null(val) ? key : val, path,
                    "then has no decision; add decision: allow, deny or require_approval");
    if (want_map(L, key, val, path, "then: {decision: allow}", false)) return -1;
    if (split_keys(L, val, path, &tab, &kv)) return -1;

    path_fmt(path, sizeof path, "%s.then.decision", rpath);
    if (!kv.key[0])
        return lerr(L, val, path,
                    "then has no decision; add decision: allow, deny or require_approval");
    if (want_str(L, kv.key[0], kv.val[0], path, "decision: allow", &s)) return -1;
    size_t d;
    for (d = 0; d < ARRAY_LEN(decisions); d++)
        if (!strcmp(s, decisions[d])) break;
    if (d == ARRAY_LEN(decisions))
        return lerr(L, kv.val[0], path,
                    "decision %s is not valid; use one of: allow, deny, require_approval, judge",
                    q(b, sizeof b, s));
    r->decision = (enum policy_decision)d;
    r->judge.threshold = 0.6;
    r->judge.fallback = POLICY_REQUIRE_APPROVAL;
    r->judge.instructions = "";

    if (kv.key[1]) {
        path_fmt(path, sizeof path, "%s.then.reason", rpath);
        if (want_str(L, kv.key[1], kv.val[1], path, "reason: \"why\"", &s)) return -1;
        free(r->reason);
        r->reason = xstrdup(s);
    }
    if (kv.key[4]) {
        if (r->decision != POLICY_ALLOW) {
            path_fmt(path, sizeof path, "%s.then.budget", rpath);
            return lerr(L, kv.key[4], path, "budget is only valid with decision: allow (this rule's decision is "
                                            "%s); remove budget or change the decision", decisions[d]);
        }
        if (compile_budget(L, kv.key[4], kv.val[4], rpath, r)) return -1;
    }
    if (kv.key[2]) {
        /* who approves: a require_approval rule, a judge that may pick it, or a budget that
         * asks for approval when it is spent */
        bool may_ask = r->decision == POLICY_REQUIRE_APPROVAL || r->decision == POLICY_JUDGE ||
                       (r->has_budget && r->budget.require_approval);
        if (!may_ask) {
            path_fmt(path, sizeof path, "%s.then.%s", rpath, kv.key[2]->text);
            return lerr(L, kv.key[2], path,
                        "%s is only valid with decision: require_approval or judge, or a budget with "
                        "on_exceed: require_approval (this rule's decision is %s); remove %s or change the "
                        "decision",
                        kv.key[2]->text, decisions[d], kv.key[2]->text);
        }
        if (compile_approval(L, kv.key[2], kv.val[2], rpath, r)) return -1;
    }
    if (kv.key[3] && compile_rate_limit(L, kv.key[3], kv.val[3], rpath, r)) return -1;
    if (kv.key[5]) {
        if (r->decision != POLICY_JUDGE) {
            path_fmt(path, sizeof path, "%s.then.judge", rpath);
            return lerr(L, kv.key[5], path, "judge is only valid with decision: judge (this rule's decision is "
                                            "%s); remove judge or change the decision", decisions[d]);
        }
        if (compile_judge(L, kv.key[5], kv.val[5], rpath, r)) return -1;
    }
    return 0;
}

static bool id_char_ok(unsigned char c)
{
    return isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-';
}

/* Ids the evaluator reports for outcomes that no rule produced. A rule using
 * one would make an audit record ambiguous. */
static const char *const reserved_ids[] = {"default", "local", "permissive"};

static int compile_rule(struct loader *L, const struct ynode *node, size_t idx,
                        struct policy_rule *r, const struct ynode **id_node)
{
    static const char *const names[] = {"id", "when", "then", "priority"};
    static const struct keytab tab = {"rule", names, ARRAY_LEN(names), NULL, 0};
    char rpath[POLICY_PATH_MAX], path[POLICY_PATH_MAX], b[80];
    struct keyvals kv;
    const char *id;

    path_fmt(rpath, sizeof rpath, "rules[%zu]", idx);
    r->reason = xstrdup("");
    if (node->type != YN_MAP || node->n == 0)
        return lerr(L, node, rpath,
                    "rule %zu is %s; each rule must be a mapping with id, when and then - "
                    "start it like '- id: my-rule'",
                    idx + 1, node->type == YN_MAP ? "an empty mapping" : ynode_kind(node));
    if (split_keys(L, node, rpath, &tab, &kv)) return -1;

    path_fmt(path, sizeof path, "%s.id", rpath);
    if (!kv.key[0])
        return lerr(L, node, path, "rule %zu has no id; add id: <unique-name> to it", idx + 1);
    if (want_str(L, kv.key[0], kv.val[0], path, "id: allow-llm", &id)) return -1;
    size_t n = strlen(id);
    if (n > POLICY_ID_MAX)
        return lerr(L, kv.val[0], path, "id is %zu characters long; use at most %d", n,
                    POLICY_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (id_char_ok(c)) continue;
        char what[16];
        snprintf(what, sizeof what, isprint(c) ? "'%c'" : "byte 0x%02x", c);
        return lerr(L, kv.val[0], path, "id %s contains %s; use only letters, digits and _ . : -",
                    q(b, sizeof b, id), what);
    }
    for (size_t i = 0; i < ARRAY_LEN(reserved_ids); i++)
        if (!strcmp(id, reserved_ids[i]))
            return lerr(L, kv.val[0], path,
                        "id %s is reserved for a built-in outcome; choose another id",
                        q(b, sizeof b, id));
    r->id = xstrdup(id);
    *id_node = kv.val[0];

    if (kv.key[1] && compile_when(L, kv.key[1], kv.val[1], rpath, r)) return -1;

    if (kv.key[3]) { /* upstream's rule order: lowest priority first */
        const char *s;
        path_fmt(path, sizeof path, "%s.priority", rpath);
        if (want_str(L, kv.key[3], kv.val[3], path, "priority: 10", &s)) return -1;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || end == s || *end || v < -1000000000LL || v > 1000000000LL)
            return lerr(L, kv.val[3], path, "priority %s is not a whole number; write e.g. priority: 10",
                        q(b, sizeof b, s));
        r->has_priority = true;
        r->priority = v;
    }

    path_fmt(path, sizeof path, "%s.then", rpath);
    if (!kv.key[2])
        return lerr(L, node, path,
                    "rule \"%s\" has no then; add then: with decision: allow, deny or "
                    "require_approval",
                    r->id);
    return compile_then(L, kv.key[2], kv.val[2], rpath, r);
}

static uint64_t id_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Ids must be unique; with up to 10000 rules a pairwise check would be slow. */
static int check_unique_ids(struct loader *L, const struct policy *p,
                            const struct ynode *const *id_nodes)
{
    size_t cap = 16;
    while (cap < p->n_rules * 2)
        cap *= 2;
    size_t *slot = xcalloc(cap, sizeof *slot); /* rule index + 1; 0 = empty */
    int rc = 0;
    for (size_t i = 0; i < p->n_rules && !rc; i++) {
        size_t h = (size_t)id_hash(p->rules[i].id) & (cap - 1);
        for (; slot[h]; h = (h + 1) & (cap - 1)) {
            size_t j = slot[h] - 1;
            if (!strcmp(p->rules[j].id, p->rules[i].id)) {
                char path[POLICY_PATH_MAX];
                path_fmt(path, sizeof path, "rules[%zu].id", i);
                rc = lerr(L, id_nodes[i], path,
                          "duplicate rule id \"%s\" (first used at line %d); ids must be "
                          "unique - rename one of the rules",
                          p->rules[i].id, id_nodes[j]->line);
                break;
            }
        }
        slot[h] = i + 1;
    }
    free(slot);
    return rc;
}

/* Upstream's bundles order their rules with priority: (unique, lowest first). Either every
 * rule has one or none does (then document order); rules are sorted stably. */
static int order_by_priority(struct loader *L, struct policy *p, const struct ynode *const *id_nodes)
{
    size_t with = 0;
    for (size_t i = 0; i < p->n_rules; i++)
        with += p->rules[i].has_priority;
    if (with == 0) return 0;
    char path[POLICY_PATH_MAX];
    for (size_t i = 0; i < p->n_rules; i++) {
        if (p->rules[i].has_priority) continue;
        path_fmt(path, sizeof path, "rules[%zu]", i);
        return lerr(L, id_nodes[i], path,
                    "rule \"%s\" has no priority but other rules do; give every rule a priority "
                    "(lowest is evaluated first) or none (document order)",
                    p->rules[i].id);
    }
    for (size_t i = 1; i < p->n_rules; i++) { /* insertion sort: stable, rules are few */
        struct policy_rule r = p->rules[i];
        const struct ynode *n = id_nodes[i];
        size_t j = i;
        for (; j > 0 && p->rules[j - 1].priority > r.priority; j--) {
            p->rules[j] = p->rules[j - 1];
            ((const struct ynode **)id_nodes)[j] = id_nodes[j - 1];
        }
        p->rules[j] = r;
        ((const struct ynode **)id_nodes)[j] = n;
    }
    for (size_t i = 1; i < p->n_rules; i++)
        if (p->rules[i].priority == p->rules[i - 1].priority) {
            path_fmt(path, sizeof path, "rules");
            return lerr(L, id_nodes[i], path,
                        "rules \"%s\" and \"%s\" have the same priority %lld; priorities must be unique",
                        p->rules[i - 1].id, p->rules[i].id, (long long)p->rules[i].priority);
        }
    return 0;
}

static int compile_policy(struct loader *L, const struct ynode *root, struct policy *p)
{
    static const char *const names[] = {"default_action", "rules"};
    static const struct keytab tab = {"the policy", names, ARRAY_LEN(names), NULL, 0};
    struct keyvals kv;
    char b[80];

    p->default_action = POLICY_DENY;
    if (root->type != YN_MAP)
        return lerr(L, root, "",
                    "the policy is %s; it must be a mapping with default_action and rules",
                    ynode_kind(root));
    if (split_keys(L, root, "", &tab, &kv)) return -1;

    if (kv.key[0]) {
        const char *s;
        if (want_str(L, kv.key[0], kv.val[0], "default_action", "default_action: deny", &s))
            return -1;
        if (!strcmp(s, "allow"))
            p->default_action = POLICY_ALLOW;
        else if (strcmp(s, "deny"))
            return lerr(L, kv.val[0], "default_action",
                        "default_action %s is not valid; use allow or deny", q(b, sizeof b, s));
    }
    if (!kv.key[1]) return 0;
    const struct ynode *rules = kv.val[1];
    if (want_list(L, kv.key[1], rules, "rules", "rules: [ {id: ..., then: ...} ] (a list)", true))
        return -1;
    if (rules->type != YN_SEQ) return 0;
    if (rules->n > POLICY_MAX_RULES)
        return lerr(L, rules->kids[POLICY_MAX_RULES], "rules",
                    "too many rules (%zu); a policy may have at most %d - merge rules with "
                    "targets: [...] or globs",
                    rules->n, POLICY_MAX_RULES);
    p->n_rules = rules->n;
    p->rules = xcalloc(p->n_rules ? p->n_rules : 1, sizeof *p->rules);
    const struct ynode **id_nodes = xcalloc(p->n_rules ? p->n_rules : 1, sizeof *id_nodes);
    int rc = 0;
    for (size_t i = 0; i < p->n_rules && !rc; i++)
        rc = compile_rule(L, rules->kids[i], i, &p->rules[i], &id_nodes[i]);
    if (!rc) rc = check_unique_ids(L, p, id_nodes);
    if (!rc) rc = order_by_priority(L, p, id_nodes);
    free(id_nodes);
    return rc;
}

/* ------------------------------------------------------------------------- */
/* Public API                                                                */
/* ------------------------------------------------------------------------- */

struct policy *policy_load_string(const char *yaml, size_t len, const char *filename,
                                  int line_offset, struct err *err)
{
    struct err scratch = ERR_INIT;
    struct loader L = {
        .file = filename ? filename : "<inline>",
        .src = yaml ? yaml : "",
        .src_len = yaml ? len : 0,
        .line_offset = line_offset,
        .err = err ? err : &scratch,
    };
    if (L.src_len > POLICY_MAX_BYTES) {
        lerr_file(&L, "policy is larger than 1 MiB; split it or simplify the rules");
        return NULL;
    }
    struct ynode *root = NULL;
    if (build_tree(&L, &root)) return NULL;
    if (!root || ynode_is_null(root)) {
        lerr_pos(&L, 1 + line_offset, 1, "",
                 "empty policy; write at least default_action: deny (and rules: ...)");
        ynode_free(root);
        return NULL;
    }
    struct policy *p = xcalloc(1, sizeof *p);
    int rc = compile_policy(&L, root, p);
    ynode_free(root);
    if (rc) {
        policy_free(p);
        return NULL;
    }
    p->source = xmalloc(L.src_len + 1);
    memcpy(p->source, L.src, L.src_len);
    p->source[L.src_len] = '\0';
    return p;
}

struct policy *policy_load_file(const char *path, struct err *err)
{
    struct err scratch = ERR_INIT;
    struct loader L = {.file = path ? path : "<null>", .err = err ? err : &scratch};
    char what[256];
    if (!path) {
        lerr_file(&L, "no policy file given; pass the path of a policy YAML file");
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(what, sizeof what, "cannot open policy file: %s; check the path and permissions",
                 strerror(errno));
        lerr_file(&L, what);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        lerr_file(&L, "not a regular file; pass the path of a policy YAML file");
        return NULL;
    }
    if (st.st_size > POLICY_MAX_BYTES) {
        close(fd);
        lerr_file(&L, "policy is larger than 1 MiB; split it or simplify the rules");
        return NULL;
    }
    /* Read up to one byte past the cap in case the file grew since fstat. */
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *data = xmalloc(cap + 1);
    for (;;) {
        ssize_t n = read(fd, data + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(what, sizeof what, "cannot read policy file: %s", strerror(errno));
            close(fd);
            free(data);
            lerr_file(&L, what);
            return NULL;
        }
        if (n == 0) break;
        len += (size_t)n;
        if (len == cap) {
            if (cap > POLICY_MAX_BYTES) break;
            cap = cap * 2 > POLICY_MAX_BYTES + 1 ? POLICY_MAX_BYTES + 1 : cap * 2;
            data = xrealloc(data, cap + 1);
        }
    }
    close(fd);
    data[len] = '\0';
    struct policy *p = policy_load_string(data, len, path, 0, L.err);
    free(data);
    return p;
}

/* ------------------------------------------------------------------------- */
/* Plain data (policy test case files)                                       */
/* ------------------------------------------------------------------------- */

/* A plain scalar read as YAML 1.2's core schema would: null, bool, int, float, else text. */
static json_t *scalar_json(const struct ynode *n)
{
    if (!n->plain) return json_stringn(n->text, n->len);
    if (ynode_is_null(n)) return json_null();
    const char *t = n->text;
    if (!strcmp(t, "true") || !strcmp(t, "True") || !strcmp(t, "TRUE")) return json_true();
    if (!strcmp(t, "false") || !strcmp(t, "False") || !strcmp(t, "FALSE")) return json_false();
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (*t && *end == '\0' && errno == 0 && (isdigit((unsigned char)t[0]) || t[0] == '-' || t[0] == '+'))
        return json_integer(v);
    errno = 0;
    double d = strtod(t, &end);
    if (*t && *end == '\0' && errno == 0 && (isdigit((unsigned char)t[0]) || t[0] == '-' || t[0] == '.'))
        return json_real(d);
    return json_stringn(n->text, n->len);
}

static json_t *node_json(struct loader *L, const struct ynode *n)
{
    if (n->type == YN_SCALAR) {
        json_t *v = scalar_json(n);
        if (!v) lerr(L, n, "", "text that is not UTF-8; save the file as UTF-8");
        return v;
    }
    json_t *out = n->type == YN_SEQ ? json_array() : json_object();
    size_t step = n->type == YN_SEQ ? 1 : 2;
    for (size_t i = 0; i + step - 1 < n->n; i += step) {
        const struct ynode *key = n->kids[i], *val = n->kids[i + step - 1];
        if (n->type == YN_MAP && key->type != YN_SCALAR) {
            lerr(L, key, "", "a key that is %s; keys must be plain names", ynode_kind(key));
            json_decref(out);
            return NULL;
        }
        if (n->type == YN_MAP && json_object_get(out, key->text)) {
            char b[80];
            lerr(L, key, "", "key %s appears twice; keep one", q(b, sizeof b, key->text));
            json_decref(out);
            return NULL;
        }
        json_t *v = node_json(L, val);
        if (!v) {
            json_decref(out);
            return NULL;
        }
        if (n->type == YN_SEQ) json_array_append_new(out, v);
        else json_object_set_new(out, key->text, v);
    }
    return out;
}

json_t *policy_yaml_file_json(const char *path, struct err *err)
{
    struct err scratch = ERR_INIT;
    struct loader L = {.file = path, .err = err ? err : &scratch};
    FILE *f = fopen(path, "rb");
    if (!f) {
        char what[256];
        snprintf(what, sizeof what, "cannot open: %s; check the path", strerror(errno));
        lerr_file(&L, what);
        return NULL;
    }
    char *data = xmalloc(POLICY_MAX_BYTES + 1);
    size_t len = fread(data, 1, POLICY_MAX_BYTES + 1, f);
    fclose(f);
    if (len > POLICY_MAX_BYTES) {
        free(data);
        lerr_file(&L, "larger than 1 MiB; split it");
        return NULL;
    }
    data[len] = '\0';
    L.src = data;
    L.src_len = len;
    struct ynode *root = NULL;
    json_t *out = NULL;
    if (!build_tree(&L, &root)) out = root ? node_json(&L, root) : json_null();
    ynode_free(root);
    free(data);
    return out;
}

void policy_free(struct policy *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_rules; i++) {
        struct policy_rule *r = &p->rules[i];
        free(r->id);
        for (size_t j = 0; j < r->target.n; j++)
            free(r->target.v[j].pat);
        free(r->target.v);
        for (size_t j = 0; j < r->targets.n; j++)
            free(r->targets.v[j].pat);
        free(r->targets.v);
        strset_free(&r->agent);
        strset_free(&r->agents);
        for (size_t j = 0; j < r->n_preds; j++) {
            struct policy_pred *pr = &r->preds[j];
            free(pr->arg);
            free(pr->equals.s);
            free(pr->not_equals.s);
            free(pr->contains.s);
            free(pr->prefix.s);
            strset_free(&pr->one_of);
            free(pr->glob);
            if (pr->has & POLICY_PRED_REGEX) regfree(&pr->re);
        }
        free(r->preds);
        free(r->reason);
        json_decref(r->approvers);
        free(r->approval_message);
        free(r->judge_instructions);
    }
    free(p->rules);
    free(p->source);
    free(p);
}
