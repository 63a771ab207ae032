/*
 * validate.c - syntax and bounds of sandbox API inputs (see validate.h).
 */
#include "sandbox/core/validate.h"

#include <ctype.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool sbx_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SBX_NAME_MAX || !isalnum((unsigned char)s[0])) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '.' || c == '_' || c == '-')) return false;
    }
    return true;
}

bool sbx_user_name_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > SBX_USER_NAME_MAX) return false;
    if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool meta_key_valid(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > SBX_META_KEY_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (!(isalnum(c) || c == '_' || c == '.' || c == '-' || c == ':')) return false;
    }
    return true;
}

int sbx_validate_metadata(const json_t *v, const char *field, struct err *err)
{
    if (!json_is_object(v)) return err_invalid(err, field, "%s must be an object", field);
    if (json_object_size(v) > SBX_META_MAX_KEYS)
        return err_invalid(err, field, "%s has more than %d keys", field, SBX_META_MAX_KEYS);
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)v, k, val) {
        if (!meta_key_valid(k))
            return err_invalid(err, field,
                               "%s key \"%.64s\" must be 1-%d characters of A-Z a-z 0-9 _ . - :",
                               field, k, SBX_META_KEY_MAX);
        if (!json_is_string(val))
            return err_invalid(err, field, "%s.%s must be a string", field, k);
        if (json_string_length(val) > SBX_META_VALUE_MAX ||
            memchr(json_string_value(val), '\0', json_string_length(val)))
            return err_invalid(err, field, "%s.%s must be at most %d bytes without NUL", field, k,
                               SBX_META_VALUE_MAX);
    }
    return 0;
}

static bool env_name_valid(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > SBX_ENV_NAME_MAX) return false;
    if (!(isalpha((unsigned char)k[0]) || k[0] == '_')) return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)k[i]) || k[i] == '_')) return false;
    return true;
}

int sbx_validate_env(const json_t *v, const char *field, struct err *err)
{
    if (!json_is_object(v)) return err_invalid(err, field, "%s must be an object", field);
    if (json_object_size(v) > SBX_ENV_MAX_VARS)
        return err_invalid(err, field, "%s has more than %d variables", field, SBX_ENV_MAX_VARS);
    size_t total = 0;
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)v, k, val) {
        if (!env_name_valid(k))
            return err_invalid(err, field,
                               "%s name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]* (at most %d)",
                               field, k, SBX_ENV_NAME_MAX);
        if (!json_is_string(val)) return err_invalid(err, field, "%s.%s must be a string", field, k);
        size_t n = json_string_length(val);
        if (n > SBX_ENV_VALUE_MAX || memchr(json_string_value(val), '\0', n))
            return err_invalid(err, field, "%s.%s must be at most %d bytes without NUL", field, k,
                               SBX_ENV_VALUE_MAX);
        total += strlen(k) + n + 2;
    }
    if (total > SBX_ENV_TOTAL_MAX)
        return err_invalid(err, field, "%s is larger than %d bytes in total", field,
                           SBX_ENV_TOTAL_MAX);
    return 0;
}

int sbx_validate_argv(const json_t *cmd, const json_t *args, struct err *err)
{
    if (!json_is_string(cmd) || json_string_length(cmd) == 0)
        return err_invalid(err, "cmd", "cmd must be a non-empty string (the program to run)");
    size_t total = json_string_length(cmd);
    if (total > SBX_ARG_MAX || memchr(json_string_value(cmd), '\0', total))
        return err_invalid(err, "cmd", "cmd must be at most %d bytes without NUL", SBX_ARG_MAX);
    if (!args || json_is_null(args)) return 0;
    if (!json_is_array(args)) return err_invalid(err, "args", "args must be an array of strings");
    if (json_array_size(args) > SBX_ARGV_MAX)
        return err_invalid(err, "args", "args has more than %d items", SBX_ARGV_MAX);
    size_t i;
    json_t *a;
    json_array_foreach(args, i, a) {
        if (!json_is_string(a)) return err_invalid(err, "args", "args[%zu] must be a string", i);
        size_t n = json_string_length(a);
        if (n > SBX_ARG_MAX || memchr(json_string_value(a), '\0', n))
            return err_invalid(err, "args", "args[%zu] must be at most %d bytes without NUL", i,
                               SBX_ARG_MAX);
        total += n + 1;
    }
    if (total > SBX_ARGV_TOTAL_MAX)
        return err_invalid(err, "args", "cmd and args are larger than %d bytes in total",
                           SBX_ARGV_TOTAL_MAX);
    return 0;
}

int sbx_json_int(const json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                 struct err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return err_invalid(err, key, "%s must be an integer", key);
    int64_t x = json_integer_value(v);
    if (x < min || x > max)
        return err_invalid(err, key, "%s must be between %lld and %lld", key, (long long)min,
                           (long long)max);
    *out = x;
    return 0;
}

int sbx_json_bool(const json_t *obj, const char *key, bool *out, struct err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return err_invalid(err, key, "%s must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

int sbx_json_str(const json_t *obj, const char *key, size_t max, const char **out,
                 struct err *err)
{
    *out = NULL;
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return err_invalid(err, key, "%s must be a string", key);
    size_t n = json_string_length(v);
    if (n > max || memchr(json_string_value(v), '\0', n))
        return err_invalid(err, key, "%s must be at most %zu bytes without NUL", key, max);
    *out = json_string_value(v);
    return 0;
}

int sbx_json_known(const json_t *obj, const char *const *known, const char *what,
                   struct err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        bool ok = false;
        for (const char *const *p = known; *p && !ok; p++)
            ok = strcmp(*p, k) == 0;
        if (!ok)
            return err_invalid(err, k, "unknown field \"%.64s\" in %s", k, what);
    }
    return 0;
}

static const struct {
    const char *name;
    int sig;
} signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},
    {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU}, {"WINCH", SIGWINCH}, {"ABRT", SIGABRT},
    {"SEGV", SIGSEGV}, {"BUS", SIGBUS}, {"FPE", SIGFPE}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP}, {"SYS", SIGSYS}, {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"URG", SIGURG}, {"IO", SIGIO},
    {"PWR", SIGPWR},   {"CHLD", SIGCHLD},
};

int sbx_signal_parse(const char *s)
{
    if (!s || !*s) return 0;
    if (isdigit((unsigned char)s[0])) {
        char *end;
        long v = strtol(s, &end, 10);
        return *end || v < 1 || v > 64 ? 0 : (int)v;
    }
    if (strncasecmp(s, "SIG", 3) == 0) s += 3;
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        if (strcasecmp(s, signals[i].name) == 0) return signals[i].sig;
    return 0;
}

const char *sbx_signal_name(int sig)
{
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        if (signals[i].sig == sig) return signals[i].name;
    return NULL;
}

bool sbx_metadata_match(const json_t *meta, const json_t *want)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)want, k, v) {
        json_t *have = json_object_get(meta, k);
        if (!have || !json_equal(have, v)) return false;
    }
    return true;
}
