/*
 * config_url.h - the syntax of the configuration's addresses (internal to config*.c).
 *
 * What config.c needs to check and keep URL, blob URL, listen and store variables. The parts
 * other modules use, config_url_allowed() and config_redact_store(), are declared in config.h.
 */
#ifndef CRCR_CONFIG_URL_H
#define CRCR_CONFIG_URL_H

#include <stdbool.h>
#include <stddef.h>

/* Strips trailing '/' from a URL in place (keeps "scheme://"). */
void config_url_strip_slashes(char *url);

/* Parses a TCP port, 1 to 5 digits from 0 to 65535, from s[0..n) into *out. */
bool config_port_parse(const char *s, size_t n, long *out);

/* True for an https:// URL, or an http:// one to a loopback host (for tests). Which host a blob
 * URL must be on is checked once GITHUB_API_URL is known (config_url_on_web_host). */
bool config_blob_url_allowed(const char *url);

/* Writes GitHub's web host for API URL `api_url` into out (see config_web_url in config.h);
 * false when it does not fit. */
bool config_github_web_url(const char *api_url, char *out, size_t outsz);

/* Registers the passwords inside a store URI as log secrets (log_add_secret). */
void config_store_add_secrets(const char *uri);

#endif
