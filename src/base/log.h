/*
 * log.h - one line per event, logfmt, to stderr.
 *
 *   log_info("execution created", "execution=%s agent=%s", id, agent);
 * prints
 *   ts=2026-11-29T19:45:52.123Z level=info msg="execution created" execution=... agent=...
 *
 * Library code never prints; daemons and the CLI's main do.
 */
#ifndef REBUNO_BASE_LOG_H
#define REBUNO_BASE_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_level(enum log_level lvl);
int log_parse_level(const char *s, enum log_level *out); /* 0 or -EINVAL */
void log_emit(enum log_level lvl, const char *msg, const char *kvfmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_debug(msg, ...) log_emit(LOG_DEBUG, (msg), __VA_ARGS__)
#define log_info(msg, ...) log_emit(LOG_INFO, (msg), __VA_ARGS__)
#define log_warn(msg, ...) log_emit(LOG_WARN, (msg), __VA_ARGS__)
#define log_error(msg, ...) log_emit(LOG_ERROR, (msg), __VA_ARGS__)

#endif
