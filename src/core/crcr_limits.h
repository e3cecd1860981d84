/*
 * crcr_limits.h - every protocol input's named limit, in one place.
 *
 * A limit that an operator may want to change is also a configuration variable (config.h); the
 * value here is then its default. Everything else is fixed at compile time on purpose.
 */
#ifndef CRCR_LIMITS_H
#define CRCR_LIMITS_H

/* HTTP ingress. GitHub caps webhook payloads at 25 MB. */
#define CRCR_MAX_BODY_DEFAULT (25u * 1024u * 1024u)
/* Bytes of request line and headers a request may have; beyond it the answer is 431. */
#define CRCR_MAX_HEADER_BYTES (32u * 1024u)
/* Outbox rows in flight per instance at most (MAX_DISPATCH_WORKERS's upper bound; also
 * CRCR_GITHUB_CONCURRENCY's). */
#define CRCR_MAX_DISPATCH_WORKERS 1024
/* MAX_DISPATCH_WORKERS's default: rows one instance carries out at once (docs/configuration.md). */
#define CRCR_DISPATCH_WORKERS_DEFAULT 100
/* CRCR_GITHUB_CONCURRENCY's default: GitHub documents at most 100 concurrent requests per App;
 * 10 are left to whatever else uses the App's credentials and to requests a timeout gave up on
 * that GitHub may still be serving. 90 rather than 80: a fan-out's second round starts when its
 * first 10 answers come instead of its first 20 (a warm fan-out to 100 on PostgreSQL, medians of
 * three alternated series of eight: 108.0-109.5 -> 107.7 ms; bench/RESULTS.md 2026-12-05). */
#define CRCR_GITHUB_CONCURRENCY_DEFAULT 90
/* Simultaneous connections accepted by the HTTP server. */
#define CRCR_MAX_CONNECTIONS 2048u
/* Seconds a connection may stay idle before MHD closes it. */
#define CRCR_IDLE_TIMEOUT_S 10u
/* Seconds one request may take, counted from the connection's accept (or the previous answer on
 * a kept-alive connection) to its answer: the total deadline that stops slow clients. Default of
 * CRCR_REQUEST_DEADLINE_SECONDS. */
#define CRCR_REQUEST_DEADLINE_S 15u
/* Connections one peer (an IPv4 address, an IPv6 /64) may hold; the next is refused at accept.
 * Default of CRCR_MAX_CONNECTIONS_PER_CLIENT (0 there: no per-peer cap, for a proxy in front). */
#define CRCR_MAX_CONNECTIONS_PER_CLIENT_DEFAULT 64u
/* Milliseconds the whole header block of a request may take, from the accept (or the previous
 * answer on a kept-alive connection). Default of CRCR_HEADER_TIMEOUT_MS. */
#define CRCR_HEADER_TIMEOUT_MS_DEFAULT 3000u
/* Bytes of request bodies not yet authenticated that all connections together may hold (503 with
 * Retry-After beyond). Default of CRCR_UNAUTH_BODY_BUDGET; at least CRCR_MAX_BODY. */
#define CRCR_UNAUTH_BODY_BUDGET_DEFAULT (64u * 1024u * 1024u)
/* Longest URL path + query the router looks at. */
#define CRCR_MAX_PATH 2048u

/* JSON documents (webhook bodies, callback bodies, GitHub answers). */
#define CRCR_JSON_MAX_DEPTH 64u
/* Values (scalars + containers) in one document. A 25 MiB body of `[0,0,...]` would have 13 M.
 * jansson needs up to ~250 bytes per value (an empty object: struct plus hashtable), so this cap
 * bounds a parse to ~125 MB (measured: 500k `{}` peak RSS 125 MB; at 2 M it was 462 MB). A push
 * with GitHub's maximum of 2048 commits has ~40k values plus one per changed file listed. */
#define CRCR_JSON_MAX_VALUES 500000u

/* Identifiers. */
#define CRCR_DELIVERY_ID_MAX 128u /* X-GitHub-Delivery is a 36-character GUID */
#define CRCR_EVENT_NAME_MAX 64u   /* X-GitHub-Event */
#define CRCR_REPO_NAME_MAX 141u   /* owner (39) + '/' + repo (100) + 1 */
#define CRCR_SHA_MAX 64u          /* 40 hex for SHA-1, 64 for SHA-256 repos */
#define CRCR_REF_MAX 1024u
#define CRCR_LABEL_MAX 256u  /* one label name */
#define CRCR_LABELS_MAX 100u /* labels read from one pull request */
#define CRCR_JOB_NAME_MAX 256u
/* A downstream run id as text, with its NUL: a GitHub Actions run id (decimal) or a Buildkite
 * build id (a 36-character UUID). */
#define CRCR_RUN_ID_MAX 65u

/* GitHub App and API. */
#define CRCR_TOKEN_MAX 1024u                      /* installation tokens are ~520 chars, may grow */
#define CRCR_GH_RESPONSE_MAX (4u * 1024u * 1024u) /* any one GitHub API answer */
#define CRCR_GH_TIMEOUT_MS 20000L
#define CRCR_GH_CONNECT_TIMEOUT_MS 5000L
#define CRCR_TOKEN_CACHE_MAX 4096u /* installations and repos remembered */

/* Allowlist YAML. */
#define CRCR_ALLOWLIST_MAX_BYTES (1024u * 1024u)
#define CRCR_ALLOWLIST_MAX_DEPTH 8u
#define CRCR_ALLOWLIST_MAX_NODES 100000u
#define CRCR_ALLOWLIST_MAX_REPOS 5000u /* per level */
#define CRCR_ALLOWLIST_MAX_ONCALLS 64u /* per repo */

/* CI providers map (ci_providers.yml, read with the allowlist's YAML limits). */
#define CRCR_CI_PROVIDERS_MAX_BYTES (256u * 1024u)
#define CRCR_CI_PROVIDERS_MAX_PIPELINES 1000u

/* repository_dispatch. GitHub: client_payload < 64 KB, <= 10 keys, event_type <= 100 chars. */
#define CRCR_DISPATCH_BUDGET_DEFAULT 65000u

/* Depends-On lines of a PyTorch PR body (§3.13): lines honoured at most (one per downstream
 * repository; the rest are ignored and logged), and bytes of the body read for them (GitHub caps
 * a PR body at 65,536 characters, so at most 262,144 bytes of UTF-8). */
#define CRCR_DEPENDS_ON_MAX 8u
#define CRCR_PR_BODY_MAX (256u * 1024u)
/* Runs of one dispatch ended (superseded) per store statement batch; a dispatch with more is
 * ended in several batches of the same transaction. */
#define CRCR_SUPERSEDE_BATCH 256u

/* Log lines. */
#define CRCR_LOG_LINE_MAX 8192u

#endif
