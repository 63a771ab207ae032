/*
 * names.h - the one rule for names that users pick and that later show up in URLs,
 * branch names, log lines and terminals (agents, sessions, resource keys): 1..max
 * ASCII letters, digits and a few punctuation characters, never a control character,
 * space or quote.
 */
#ifndef REBUNO_BASE_NAMES_H
#define REBUNO_BASE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* True when s is 1..max characters of [A-Za-z0-9] and the characters in punct. */
bool name_valid(const char *s, size_t max, const char *punct);

/* Agents: 1..128 of [A-Za-z0-9_.:-] (no '/': an agent name is a path segment). */
#define NAME_AGENT_MAX 128
#define NAME_AGENT_PUNCT "_.:-"
static inline bool name_agent_valid(const char *s) { return name_valid(s, NAME_AGENT_MAX, NAME_AGENT_PUNCT); }

/* A webhook URL an agent registers: http:// or https://, a host, an optional port
 * 1..65535 and path, at most 2048 printable ASCII bytes without spaces. On failure
 * returns false and says why in why (a sentence fragment). */
#define NAME_URL_MAX 2048
bool name_http_url_valid(const char *url, char *why, size_t why_len);

#endif
