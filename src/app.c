/*
 * app.c - `crcr serve`: start-up, the main loop (signals, allowlist refresh, retention), the
 * reconciler's thread (App mode, reconcile.h) and an orderly shutdown. SIGTERM/SIGINT: stop
 * accepting, let in-flight requests finish, let outbox workers finish the row they hold (others
 * stay queued), close the store, exit 0. SIGHUP: reload the allowlist and the CI providers map.
 *
 * Memory given back: glibc serves an allocation above its mmap threshold (128 KiB at start) with
 * a mapping of its own, unmapped by free(); but each such free raises the threshold to the freed
 * size (up to 32 MiB), after which buffers of that size come from the thread's arena, whose freed
 * space stays in the process. A burst of 25 MiB request bodies then kept ~25 MiB per arena after
 * every burst (measured: 48 concurrent 25 MiB uploads, four bursts, RSS 14 -> 64 -> 89 -> 139 MiB
 * afterwards). Pinning the threshold (mallopt M_MMAP_THRESHOLD, which also stops the dynamic
 * adjustment) gives such buffers back at free(): RSS returned to 14 MiB after each burst.
 *
 * Pinning it also pins glibc's trim threshold at its start value, 128 KiB: each thread's arena
 * then gave its free top back (madvise) whenever more than that was free, and the next request
 * touched those pages again. A webhook's buffers (its 30 KB body, the claimer's copy, four
 * dispatch bodies) made that a cycle per request: page faults were 22 % of the relay's CPU in a
 * perf profile of the ingest bench (c64, 4 targets, dry-run). With APP_TRIM_THRESHOLD and
 * APP_TOP_PAD an arena keeps a few MiB of free top: CPU per stored webhook 1.00 / 0.88 ms -> 0.60
 * / 0.62 ms, 1,362 / 1,492 -> 1,959 / 1,827 req/s, peak RSS unchanged (30.5 / 30.7 MiB), RSS
 * after the load 20.0 -> 22.9 MiB (bench/RESULTS.md).
 */
#include "app.h"

#include <curl/curl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "cpus.h"
#include "json.h"
#include "log.h"
#include "callback.h"
#include "ci_providers.h"
#include "hud.h"
#include "ops.h"
#include "sweeper.h"
#include "webhook.h"

#define APP_TICK_MS 200
#define APP_MAX_ROUTES 64
#define APP_SHUTDOWN_GRACE_MS 10000
/* The largest pool CRCR_STORE_POOL accepts (store_pg.c has the same cap). */
#define APP_STORE_POOL_MAX 256
/* Default HTTP threads on PostgreSQL: each one that commits holds a pool connection. */
#define APP_HTTP_THREADS_PER_CPU 4
#define APP_HTTP_THREADS_MIN 8
/* On SQLite: the commits of concurrent requests are one group commit (one WAL append, one
 * fdatasync), whose size is bounded by the threads waiting in it. At 8 threads a group of
 * callbacks was ~2 requests and 32 connections got 2,842-3,061 callbacks/s, p99 27-69 ms; at 32
 * it was ~4 and 4,417-5,105/s, p99 15-18 ms; webhooks c64 2,018-2,056 -> 2,634-2,891/s
 * (bench/RESULTS.md). A waiting thread costs its stack, no CPU. */
#define APP_HTTP_THREADS_PER_CPU_SQLITE 16
#define APP_HTTP_THREADS_MIN_SQLITE 32
#define APP_HTTP_THREADS_DEFAULT_MAX 256
/* Allocations from this size on get a mapping of their own, given back at free() (see above). */
#define APP_MMAP_THRESHOLD (1024 * 1024)
/* Free memory an arena keeps at its top before giving it back, and the extra it asks for when it
 * grows (see above). */
#define APP_TRIM_THRESHOLD (4 * 1024 * 1024)
#define APP_TOP_PAD (1024 * 1024)
/* While the store has a write fault: how often the main loop checks whether writes go through
 * again (store_probe_write), so that the relay recovers without a webhook to try. */
#define APP_STORE_PROBE_MS 1000

static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_reload;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        g_reload = 1;
    else
        g_stop = 1;
}

static void health_handle(void *ctx, const http_request *req, http_response *resp)
{
    http_resp_json(resp, 200, "{\"ok\":true}");
}

/* Appends ,"<name>":loaded,"<name>_source":"...","<name>_error":"..."|null for /readyz. */
static void source_fields(buf_t *b, const char *name, const allowlist_status *s)
{
    buf_printf(b, ",\"%s\":%s,\"%s_source\":", name, s->loaded ? "true" : "false", name);
    jv_quote(b, s->source, strlen(s->source));
    buf_printf(b, ",\"%s_error\":", name);
    if (s->last_error[0])
        jv_quote(b, s->last_error, strlen(s->last_error));
    else
        buf_puts(b, "null");
}

/* /readyz: the store answers and takes writes (store_error says why not: unreachable, or the write
 * fault with the time it began), and the allowlist is loaded. */
static void ready_handle(void *ctx, const http_request *req, http_response *resp)
{
    crcr_app *app = ctx;
    bool reachable = store_ping(app->st) == CRCR_OK;
    char why[STORE_FAULT_WHY_MAX] = "";
    int64_t since = 0;
    store_fault_kind fault = store_write_fault(app->st, why, sizeof(why), &since);
    bool store_ok = reachable && fault == STORE_FAULT_NONE;
    allowlist_status as;
    allowlist_source_status(app->allow, &as);
    bool ok = store_ok && as.loaded;
    buf_t b;
    buf_init(&b, 4096);
    buf_printf(&b, "{\"ok\":%s,\"store\":%s,\"store_error\":", ok ? "true" : "false",
               store_ok ? "true" : "false");
    if (fault != STORE_FAULT_NONE) {
        jv_quote(&b, why, strlen(why));
        char at[40];
        clock_iso8601(since, at, sizeof(at));
        buf_puts(&b, ",\"store_error_since\":");
        jv_quote(&b, at, strlen(at));
    } else if (!reachable) {
        buf_puts(&b, "\"unreachable (the log says why)\"");
    } else {
        buf_puts(&b, "null");
    }
    source_fields(&b, "allowlist", &as);
    if (app->providers) {
        /* Only Buildkite callbacks need the map: reported, never a reason to be unready. */
        allowlist_status ps;
        allowlist_source_status(app->providers, &ps);
        source_fields(&b, "ci_providers", &ps);
    }
    buf_printf(&b, ",\"dry_run\":%s}", app->cfg.dry_run ? "true" : "false");
    http_resp_json(resp, ok ? 200 : 503, buf_cstr(&b));
    buf_free(&b);
}

/* A missing setting, as "crcr: VARIABLE: ..." on stderr (config_problem_fn). */
static void print_problem(void *ctx, const char *problem)
{
    fprintf(stderr, "crcr: %s\n", problem);
}

static void usage(void)
{
    fputs("usage: crcr serve [--config FILE]\n", stderr);
}

/* HTTP threads (CRCR_HTTP_THREADS; 0: per CPU, with a floor, by store: above). Handlers block
 * while their request's commit runs (store.h), so threads beyond the CPUs are what lets
 * concurrent webhooks and callbacks share one commit. */
static unsigned http_threads(const crcr_config *cfg)
{
    if (cfg->http_threads > 0)
        return (unsigned)cfg->http_threads;
    bool sqlite = strncmp(cfg->store_uri, "sqlite:", 7) == 0;
    long n = (long)cpus_available() *
             (sqlite ? APP_HTTP_THREADS_PER_CPU_SQLITE : APP_HTTP_THREADS_PER_CPU);
    long min = sqlite ? APP_HTTP_THREADS_MIN_SQLITE : APP_HTTP_THREADS_MIN;
    n = n < min ? min : n;
    return (unsigned)(n > APP_HTTP_THREADS_DEFAULT_MAX ? APP_HTTP_THREADS_DEFAULT_MAX : n);
}

/* Connections of a shared store's pool. CRCR_STORE_POOL 0: one per thread that can use the store
 * at the same time - every outbox worker thread (outbox_threads: a few per CPU, whatever
 * MAX_DISPATCH_WORKERS is, since a row waiting for GitHub holds no connection), every HTTP
 * thread, every HUD render thread, the main loop and one spare for the reconciler and the budget
 * (the listening connection is separate). */
static long store_pool_size(const crcr_config *cfg)
{
    if (cfg->store_pool > 0)
        return cfg->store_pool;
    long n = (long)outbox_threads(cfg) + (long)http_threads(cfg) + cfg->hud_concurrency + 2;
    return n > APP_STORE_POOL_MAX ? APP_STORE_POOL_MAX : n;
}

/* Shares a document source through the store and loads it. A file source (`file_var` names its
 * variable) that does not load stops the start (false, printed); a URL source that does not is
 * logged as `unavailable_event` and refreshed later. */
static bool source_start(doc_source *src, store *st, const char *owner, const char *file_var,
                         const char *unavailable_event)
{
    char err[512] = "";
    allowlist_source_set_store(src, st, owner);
    if (allowlist_source_load(src, err, sizeof(err)) == CRCR_OK)
        return true;
    if (file_var) {
        fprintf(stderr, "crcr: %s: %s\n", file_var, err);
        return false;
    }
    LOG_ERROR(unavailable_event, "error", err, NULL);
    return true;
}

/* Frees whatever part of the app was built; safe on a partly started app. */
static void app_teardown(crcr_app *app)
{
    http_server_stop(app->http, APP_SHUTDOWN_GRACE_MS);
    app->http = NULL;
    reconcile_stop(app->reconciler);
    app->reconciler = NULL;
    outbox_stop(app->ob);
    app->ob = NULL;
    allowlist_source_free(app->allow);
    app->allow = NULL;
    allowlist_source_free(app->providers);
    app->providers = NULL;
    oidc_free(app->oidc);
    app->oidc = NULL;
    gh_budget_stop(app->budget);
    app->budget = NULL;
    gh_client_free(app->gh);
    app->gh = NULL;
    store_close(app->st);
    app->st = NULL;
    config_free(&app->cfg);
}

int app_serve_main(int argc, char **argv)
{
    const char *config_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config_file = argv[++i];
        } else {
            if (strcmp(argv[i], "--config") == 0)
                fputs("crcr serve: --config needs a value\n", stderr);
            else
                fprintf(stderr, "crcr serve: unknown %s '%s'\n",
                        argv[i][0] == '-' ? "option" : "argument", argv[i]);
            usage();
            return 2;
        }
    }

#ifdef M_MMAP_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, APP_MMAP_THRESHOLD); /* glibc: see the header comment */
    mallopt(M_TRIM_THRESHOLD, APP_TRIM_THRESHOLD);
    mallopt(M_TOP_PAD, APP_TOP_PAD);
#endif
    static crcr_app app_storage;
    crcr_app *app = &app_storage;
    memset(app, 0, sizeof(*app));
    char err[512] = "";
    if (config_load(&app->cfg, config_file, config_getenv, NULL, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, "crcr: %s\n", err);
        return 2;
    }
    log_set_level(app->cfg.log_level);
    if (config_require_serve(&app->cfg, print_problem, NULL) > 0) {
        config_free(&app->cfg);
        return 2;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = 1;
    crcr_err e =
        store_open_pool(app->cfg.store_uri, store_pool_size(&app->cfg), &app->st, err, sizeof(err));
    if (e) {
        fprintf(stderr, "crcr: %s\n", err);
        rc = e == CRCR_E_CONFIG ? 2 : 1;
        goto out;
    }
    e = store_recover(app->st);
    if (e) {
        if (e == CRCR_E_STATE)
            fprintf(stderr,
                    "crcr: CRCR_STORE: another `crcr serve` is using this SQLite store (one "
                    "serving process per SQLite file; several instances need PostgreSQL)\n");
        else
            fprintf(stderr, "crcr: CRCR_STORE: cannot take over the store (see the log)\n");
        rc = 2;
        goto out;
    }
    app->gh = gh_client_new(&app->cfg, err, sizeof(err));
    if (!app->gh) {
        fprintf(stderr, "crcr: GITHUB_APP_PRIVATE_KEY: %s\n", err);
        rc = 2;
        goto out;
    }
    /* Every GitHub request of this instance within its share of the App's budget. */
    app->budget = gh_budget_start(app->st, app->gh, app->cfg.github_concurrency, err, sizeof(err));
    if (!app->budget) {
        fprintf(stderr, "crcr: %s\n", err);
        goto out;
    }
    app->allow = allowlist_source_new(&app->cfg, app->gh, err, sizeof(err));
    if (!app->allow) {
        fprintf(stderr, "crcr: %s\n", err);
        rc = 2;
        goto out;
    }
    /* This instance in the leases of periodic work (allowlist refresh, sweeper, reconciler). */
    char owner[128], host[64] = "host";
    gethostname(host, sizeof(host) - 1);
    snprintf(owner, sizeof(owner), "%s:%ld", host, (long)getpid());
    if (!source_start(app->allow, app->st, owner, app->cfg.allowlist_file ? "ALLOWLIST_FILE" : NULL,
                      "allowlist.unavailable")) {
        rc = 2;
        goto out;
    }
    app->providers = ci_providers_source_new(&app->cfg, app->gh, err, sizeof(err));
    if (!app->providers && err[0]) {
        fprintf(stderr, "crcr: %s\n", err);
        rc = 2;
        goto out;
    }
    if (app->providers && !source_start(app->providers, app->st, owner,
                                        app->cfg.ci_providers_file ? "CI_PROVIDERS_FILE" : NULL,
                                        "ci_providers.unavailable")) {
        rc = 2;
        goto out;
    }
    app->oidc =
        oidc_new_kinds((const char *const *)app->cfg.oidc_issuers, app->cfg.oidc_issuer_kinds,
                       app->cfg.n_oidc_issuers, app->cfg.oidc_audience, err, sizeof(err));
    if (!app->oidc) {
        fprintf(stderr, "crcr: CRCR_OIDC_ISSUERS: %s\n", err);
        rc = 2;
        goto out;
    }
    /* Buildkite tokens name no repository: the map does (none mapped without a map). */
    oidc_set_resolver(app->oidc, CRCR_ISSUER_BUILDKITE, ci_providers_resolve_buildkite,
                      app->providers);
    app->ob = outbox_start(&app->cfg, app->st, app->cfg.dry_run ? NULL : app->gh, app->allow, err,
                           sizeof(err));
    if (!app->ob) {
        fprintf(stderr, "crcr: %s\n", err);
        goto out;
    }

    static http_route routes[APP_MAX_ROUTES];
    size_t n_routes = 0;
    routes[n_routes++] = (http_route){.method = "POST",
                                      .path = "/github/webhook",
                                      .prefix = false,
                                      .max_body = app->cfg.max_body,
                                      .fn = webhook_handle,
                                      .ctx = app,
                                      .guard = webhook_guard,
                                      .body_auth = &webhook_body_auth,
                                      .quick = webhook_quick,
                                      .carry_free = webhook_carry_free};
    routes[n_routes++] = (http_route){.method = "POST",
                                      .path = "/github/callback",
                                      .prefix = false,
                                      .max_body = app->cfg.max_callback_body,
                                      .fn = callback_handle,
                                      .ctx = app,
                                      .guard = callback_guard};
    routes[n_routes++] = (http_route){.method = "GET",
                                      .path = "/healthz",
                                      .prefix = false,
                                      .max_body = 0,
                                      .fn = health_handle,
                                      .ctx = app,
                                      .flags = HTTP_ROUTE_INLINE};
    routes[n_routes++] = (http_route){.method = "GET",
                                      .path = "/readyz",
                                      .prefix = false,
                                      .max_body = 0,
                                      .fn = ready_handle,
                                      .ctx = app};
    /* HUD pages and JSON: rendered off the HTTP threads, a few at a time, and cached briefly. */
    size_t hud_first = n_routes;
    n_routes += hud_routes(app, routes + n_routes, APP_MAX_ROUTES - n_routes);
    for (size_t i = hud_first; i < n_routes; i++)
        routes[i].flags |= HTTP_ROUTE_OFFLOAD | HTTP_ROUTE_CACHE;
    n_routes += ops_routes(app, routes + n_routes, APP_MAX_ROUTES - n_routes);
    http_server_opts hopts = {
        .host = app->cfg.listen_host,
        .port = app->cfg.listen_port,
        .threads = http_threads(&app->cfg),
        .request_deadline_s = (unsigned)app->cfg.request_deadline_s,
        .offload_threads = (unsigned)app->cfg.hud_concurrency,
        .cache_ms = (unsigned)app->cfg.hud_cache_ms,
        .max_per_client = (unsigned)app->cfg.max_connections_per_client,
        .header_timeout_ms = (unsigned)app->cfg.header_timeout_ms,
        .unauth_body_budget = app->cfg.unauth_body_budget,
    };
    app->started_at = clock_now_ms();
    app->http = http_server_start(&hopts, routes, n_routes, err, sizeof(err));
    if (!app->http) {
        fprintf(stderr, "crcr: CRCR_LISTEN: %s\n", err);
        goto out;
    }
    char listen[96];
    snprintf(listen, sizeof(listen), "%s:%d", app->cfg.listen_host, http_server_port(app->http));
    buf_t store_shown;
    buf_init(&store_shown, 8192);
    config_redact_store(app->cfg.store_uri, &store_shown);
    LOG_INFO("relay.started", "version", CRCR_VERSION, "listen", listen, "store",
             buf_cstr(&store_shown), "mode", app->cfg.dry_run ? "dry-run" : "github-app", NULL);
    buf_free(&store_shown);
    /* The reconciler (App mode): its first pass now that webhooks can be received again. */
    if (!app->cfg.dry_run && app->cfg.reconcile_s > 0) {
        reconcile_deps rdeps = {.st = app->st, .gh = app->gh, .cfg = &app->cfg, .owner = owner};
        app->reconciler = reconcile_start(&rdeps, err, sizeof(err));
        if (!app->reconciler) {
            fprintf(stderr, "crcr: %s\n", err);
            goto out;
        }
    }

    /* The first sweep runs right away: zombies left while the relay was down are old already. */
    int64_t next_sweep = clock_mono_ms();
    int64_t next_probe = clock_mono_ms();
    while (!g_stop) {
        struct timespec ts = {0, clock_wait_ms(APP_TICK_MS) * 1000000L};
        nanosleep(&ts, NULL);
        if (clock_mono_ms() >= next_probe) {
            store_probe_write(app->st); /* nothing to do without a write fault */
            next_probe = clock_mono_ms() + APP_STORE_PROBE_MS;
        }
        if (g_reload) {
            g_reload = 0;
            LOG_INFO("allowlist.reload_requested", "signal", "SIGHUP", NULL);
            allowlist_source_reload(app->allow);
            allowlist_source_reload(app->providers);
        }
        allowlist_source_tick(app->allow, clock_now_ms());
        allowlist_source_tick(app->providers, clock_now_ms());
        if (clock_mono_ms() >= next_sweep) {
            sweeper_result sr;
            sweeper_deps deps = {app->st, app->allow, app->ob, &app->cfg};
            int64_t now = clock_now_ms();
            sweeper_run(&deps, owner, now, &sr);
            if (sr.leader)
                atomic_store(&app->last_sweep_at, now);
            next_sweep = clock_mono_ms() + app->cfg.sweep_s * 1000;
        }
    }
    LOG_INFO("relay.stopping", "inflight", NULL, NULL);
    rc = 0;
out:
    app_teardown(app);
    curl_global_cleanup();
    if (rc == 0)
        LOG_INFO("relay.stopped", NULL, NULL);
    return rc;
}
