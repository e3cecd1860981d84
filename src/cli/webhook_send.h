/*
 * webhook_send.h - `crcr webhook send`: sign a payload like GitHub does and POST it to a relay.
 *
 * For trying a deployment and for the README walk-through: it produces exactly the request
 * GitHub's webhook sender would (X-GitHub-Event, X-GitHub-Delivery, X-Hub-Signature-256 over the
 * raw file bytes), so the relay's whole ingress path is exercised.
 */
#ifndef CRCR_WEBHOOK_SEND_H
#define CRCR_WEBHOOK_SEND_H

/* Largest payload file sent: GitHub's own cap on webhook payloads. */
#define WEBHOOK_SEND_MAX_FILE (25u * 1024u * 1024u)
/* Most of a response body that is read and printed. */
#define WEBHOOK_SEND_MAX_RESPONSE (1024u * 1024u)
/* Whole-request and connect timeouts. */
#define WEBHOOK_SEND_TIMEOUT_MS 30000L
#define WEBHOOK_SEND_CONNECT_TIMEOUT_MS 5000L

/**
 * Runs `crcr webhook send FILE [--event E] [--url U] [--secret S] [--config F] [--delivery ID]`.
 *
 * `argv` holds the words after "crcr webhook": {"send", FILE, options...}. FILE may be "-" for
 * standard input. Defaults: the event told from the payload's keys and the file's name (nothing
 * is sent, exit 2, when neither tells or they disagree), url
 * "http://127.0.0.1:8000/github/webhook" (with --config: its CRCR_LISTEN address), secret
 * GITHUB_APP_SECRET from the environment (or --config's; an error when none is given), delivery a
 * random UUID v4. Options also take the form --name=value.
 *
 * Prints "HTTP <status>" and the response body on stdout; problems go to stderr.
 * Returns the process exit code: 0 for a 2xx answer, 1 for any other answer or a transport or
 * file error, 2 for a usage error. Calls curl_global_init()/curl_global_cleanup() itself
 * (libcurl reference-counts them).
 */
int webhook_send_main(int argc, char **argv);

#endif
