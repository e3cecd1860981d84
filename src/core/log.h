/*
 * log.h - one logfmt line per event, with secrets scrubbed.
 *
 * Format (chosen once, for every line):  ts=2026-11-30T01:02:03.456Z level=info
 * event=webhook.accepted delivery=... repo=... key="quoted value"
 *
 * Every value passes through log_scrub() before it is written, so a GitHub token (`ghs_...`), a JWT
 * (`eyJ...`), a PEM block, a `Bearer ...` credential or any string registered with log_add_secret()
 * never reaches the output, also not inside an upstream error text that echoes it.
 */
#ifndef CRCR_LOG_H
#define CRCR_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

typedef enum {
    CRCR_LOG_DEBUG = 0,
    CRCR_LOG_INFO = 1,
    CRCR_LOG_WARN = 2,
    CRCR_LOG_ERROR = 3,
    CRCR_LOG_OFF = 4
} crcr_log_level;

/* Parses "debug", "info", "warn"/"warning", "error", "off" (case-insensitive). Returns 0 on
 * success, -1 for anything else. */
int log_level_parse(const char *s, crcr_log_level *out);

void log_set_level(crcr_log_level lvl);
bool log_enabled(crcr_log_level lvl);

/* Replaces where lines go (default: stderr). `sink` receives one complete line, with its '\n'.
 * Pass NULL to restore stderr. Not thread-safe against concurrent logging: call at start-up or
 * in tests. */
void log_set_sink(void (*sink)(const char *line, size_t len, void *ctx), void *ctx);

/* Registers a secret value (webhook secret, admin token, ...) that must never be printed. The
 * string is copied; values shorter than 6 bytes are ignored (they would redact ordinary words). */
void log_add_secret(const char *secret);

/* Forgets every registered secret (tests). */
void log_clear_secrets(void);

/*
 * Writes one line: `event` plus key/value pairs given as (const char *key, const char *value)
 * arguments ending with a NULL key. A NULL value skips its pair. Example:
 *   log_kv(CRCR_LOG_INFO, "dispatch.sent", "delivery", id, "repo", repo, NULL);
 */
void log_kv(crcr_log_level lvl, const char *event, ...);

/* Appends `in[0..n)` to `out` with every secret pattern replaced by a `[REDACTED]` marker. */
crcr_err log_scrub(const char *in, size_t n, buf_t *out);

#define LOG_DEBUG(ev, ...) log_kv(CRCR_LOG_DEBUG, ev, __VA_ARGS__)
#define LOG_INFO(ev, ...) log_kv(CRCR_LOG_INFO, ev, __VA_ARGS__)
#define LOG_WARN(ev, ...) log_kv(CRCR_LOG_WARN, ev, __VA_ARGS__)
#define LOG_ERROR(ev, ...) log_kv(CRCR_LOG_ERROR, ev, __VA_ARGS__)

#endif
