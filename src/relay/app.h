/*
 * app.h - the running relay: what `crcr serve` wires together and every front door reads.
 *
 * The app owns the configuration, the store, the GitHub client (NULL in dry-run), the allowlist
 * source, the outbox workers, the HTTP server and the reconciler. Front doors (webhook, health,
 * ...) receive the app as their route context and only read it.
 */
#ifndef CRCR_APP_H
#define CRCR_APP_H

#include <stdatomic.h>
#include <stdint.h>

#include "allowlist_source.h"
#include "config.h"
#include "gh_budget.h"
#include "github.h"
#include "http_server.h"
#include "oidc.h"
#include "outbox.h"
#include "reconcile.h"
#include "store.h"

typedef struct crcr_app {
    crcr_config cfg;
    store *st;
    gh_client *gh; /* NULL in dry-run: no App credentials */
    allowlist_source *allow;
    doc_source *providers; /* the CI providers map (ci_providers.h); NULL when not configured */
    outbox *ob;
    gh_budget *budget; /* this instance's share of the App's GitHub budget */
    oidc_verifier *oidc;
    http_server *http;
    reconciler *reconciler; /* NULL in dry-run or with CRCR_RECONCILE_SECONDS=0 */
    int64_t started_at;
    _Atomic int64_t last_webhook_at; /* ms, 0 before the first */
    _Atomic int64_t last_sweep_at;   /* ms: `now` of the last sweeper pass this process ran as the
                                        lease holder, 0 before the first */
    /* Webhook and callback outcomes are counted once, in the metrics registry (metrics.h). */
} crcr_app;

/* `crcr serve`: runs until SIGTERM/SIGINT; returns the process exit code (0 on a clean stop,
 * 2 for configuration errors, 1 for other start-up failures). */
int app_serve_main(int argc, char **argv);

#endif
