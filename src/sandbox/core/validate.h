/*
 * validate.h - bounds and syntax of everything a client may send the sandbox API
 * (pure, no I/O).
 *
 * One function per kind of input, each returning 0 or -1 with a 400
 * validation_error naming the field. The limits are here in one place so the API
 * docs (docs/sandbox-api.md) can quote them.
 */
#ifndef REBUNO_SANDBOX_VALIDATE_H
#define REBUNO_SANDBOX_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_NAME_MAX 63          /* sandbox names: [A-Za-z0-9][A-Za-z0-9._-]* */
#define SBX_USER_NAME_MAX 32     /* user names: [a-z_][a-z0-9_-]* (as useradd's default) */
#define SBX_META_MAX_KEYS 32
#define SBX_META_KEY_MAX 64
#define SBX_META_VALUE_MAX 256
#define SBX_ENV_MAX_VARS 256
#define SBX_ENV_NAME_MAX 128
#define SBX_ENV_VALUE_MAX (32 * 1024)
#define SBX_ENV_TOTAL_MAX (64 * 1024)
#define SBX_ARGV_MAX 1024        /* arguments of one command */
#define SBX_ARG_MAX (64 * 1024)  /* bytes of one argument */
#define SBX_ARGV_TOTAL_MAX (96 * 1024)
#define SBX_VCPUS_MAX 64
#define SBX_MEMORY_MIN_MB 64
#define SBX_MEMORY_MAX_MB (256 * 1024)
#define SBX_PIDS_MIN 16
#define SBX_PIDS_MAX 65536
#define SBX_NOFILE_MIN 64        /* RLIMIT_NOFILE: a shell and its tools need a few dozen */
#define SBX_NOFILE_MAX (1 << 20) /* the kernel's default fs.nr_open */
#define SBX_NOFILE_DEFAULT 1024  /* lowered on hosts with a small file table (sandbox.c) */
#define SBX_DISK_MIN_MB 64
#define SBX_DISK_MAX_MB (1 << 20)       /* 1 TiB; also at most the store's size */
#define SBX_DISK_DEFAULT_MAX_MB 10240   /* default: a quarter of the store, at most 10 GiB */
#define SBX_TIMEOUT_MAX_MS (7LL * 24 * 3600 * 1000) /* a week */

bool sbx_name_valid(const char *s);
bool sbx_user_name_valid(const char *s);

/* metadata: an object of at most SBX_META_MAX_KEYS string values; keys [A-Za-z0-9_.:-]. */
int sbx_validate_metadata(const json_t *v, const char *field, struct err *err);
/* Whether metadata holds every key of want with an equal value (list filters). */
bool sbx_metadata_match(const json_t *meta, const json_t *want);
/* env: an object of NAME -> string (NAME [A-Za-z_][A-Za-z0-9_]*); values without NUL.
 * The names and values together are at most SBX_ENV_TOTAL_MAX bytes. */
int sbx_validate_env(const json_t *v, const char *field, struct err *err);
/* argv: cmd (non-empty string) plus args (array of strings). */
int sbx_validate_argv(const json_t *cmd, const json_t *args, struct err *err);

/* A JSON integer in [min, max] or absent (then *out keeps its default). */
int sbx_json_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                 struct err *err);
/* A JSON boolean or absent. */
int sbx_json_bool(const json_t *obj, const char *key, bool *out, struct err *err);
/* A JSON string of at most max bytes or absent (*out = NULL). */
int sbx_json_str(const json_t *obj, const char *key, size_t max, const char **out,
                 struct err *err);
/* Reject members of obj that are not in the NULL-terminated list `known`. */
int sbx_json_known(const json_t *obj, const char *const *known, const char *what,
                   struct err *err);

/* Signal by name ("TERM", "SIGTERM", "kill") or number; 0 when unknown. */
int sbx_signal_parse(const char *s);
const char *sbx_signal_name(int sig);

#endif
