/*
 * hud.c - the built-in HUD (§3.7, §3.8): server-rendered pages under /crcr and the same data as
 * JSON under /api/v1/ (docs/api.md).
 *
 * Every view is built in two steps: a model (plain structs filled from the store, the allowlist
 * and the level-health report) and a writer, JSON or HTML, over that model. The API and the
 * pages therefore show the same numbers from the same queries.
 *
 *   /crcr                     repos by level with their health, and the relay's own health
 *   /crcr/{org}/{repo}        PR x job matrix (?page=N, ?tab=nightly), trend charts
 *   /crcr/pr/{number}         every downstream result of one PR, per head sha, with check runs
 *   /crcr/deliveries[/{id}]   recent webhooks and each target's dispatch state
 *   /crcr/static/style.css    the one stylesheet (no scripts are served or needed)
 *   /api/v1/repos, /api/v1/repos/{org}/{repo}/runs, /api/v1/pr/{n}, /api/v1/pr/{n}/blocking,
 *   /api/v1/deliveries[/{id}], /api/v1/health
 *
 * The HUD only reads. Pages never show stored bodies or payloads (a dispatch body carries the
 * callback token, a callback payload echoes it); error texts from GitHub are scrubbed of
 * credentials before they are shown. Query parameters are parsed strictly and bounded; a bad one
 * is answered 400.
 *
 * This file is the routing; the pages are hud_overview.c, hud_repo.c, hud_pr.c and
 * hud_deliveries.c, over the shared model (hud_model.h), HTML pieces (hud_html.h) and the
 * request's arena (arena.h).
 */
#include "hud.h"

#include <string.h>

#include "allowlist.h"
#include "allowlist_source.h"
#include "clock.h"
#include "html.h"
#include "hud_deliveries.h"
#include "hud_model.h"
#include "hud_overview.h"
#include "hud_pr.h"
#include "hud_repo.h"

/* The request's arena and answer buffer are freed by hud_end. */
static void hud_begin(hud_req *r, void *ctx, const http_request *req, http_response *resp, bool api)
{
    memset(r, 0, sizeof(*r));
    r->app = ctx;
    r->req = req;
    r->resp = resp;
    r->api = api;
    r->t0 = clock_mono_ms();
    r->now = clock_now_ms();
    arena_init(&r->a, HUD_ARENA_MAX);
    buf_init(&r->out, HUD_OUT_MAX);
}

static void hud_end(hud_req *r)
{
    arena_free(&r->a);
    buf_free(&r->out);
}

static void serve_css(http_response *resp)
{
    resp->status = 200;
    resp->content_type = "text/css; charset=utf-8";
    buf_reset(&resp->body);
    buf_puts(&resp->body, HTML_STYLESHEET);
    http_resp_header(resp, "Cache-Control", "public, max-age=3600");
    http_resp_header(resp, "X-Content-Type-Options", "nosniff");
}

/* Whether `rest` ("owner/repo") is an allowlisted repository. "pr", "deliveries" and "static" are
 * valid GitHub owner names as well as HUD paths: /crcr/pr/7 is the repository pr/7's page when
 * pr/7 is allowlisted, the page of pull request 7 otherwise. */
static bool names_listed_repo(const hud_req *r, const char *rest)
{
    const char *slash = strchr(rest, '/');
    if (!slash || strchr(slash + 1, '/'))
        return false;
    allowlist *al = allowlist_source_get(r->app->allow);
    bool listed = allowlist_level(al, rest) != CRCR_LEVEL_NONE;
    allowlist_free(al);
    return listed;
}

/* GET /crcr and everything under /crcr/. */
static void page_handle(void *ctx, const http_request *req, http_response *resp)
{
    const char *path = req->path;
    if (strcmp(path, "/crcr/static/style.css") == 0) {
        serve_css(resp);
        return;
    }
    hud_req r;
    hud_begin(&r, ctx, req, resp, false);
    const char *rest = strcmp(path, "/crcr") == 0 ? "" : path + strlen("/crcr/");
    if (!*rest)
        hud_overview(&r);
    else if (names_listed_repo(&r, rest))
        hud_repo(&r, rest);
    else if (strcmp(rest, "deliveries") == 0)
        hud_deliveries_list(&r);
    else if (strncmp(rest, "deliveries/", 11) == 0)
        hud_delivery(&r, rest + 11);
    else if (strncmp(rest, "pr/", 3) == 0)
        hud_pr(&r, rest + 3);
    else if (strncmp(rest, "static/", 7) == 0)
        hud_answer_error(&r, 404, "Not found");
    else
        hud_repo(&r, rest);
    hud_end(&r);
}

/* GET /api/v1/... */
static void api_handle(void *ctx, const http_request *req, http_response *resp)
{
    hud_req r;
    hud_begin(&r, ctx, req, resp, true);
    const char *path = req->path;
    if (strcmp(path, "/api/v1/repos") == 0) {
        hud_overview(&r);
    } else if (strncmp(path, "/api/v1/repos/", 14) == 0) {
        hud_repo(&r, path + 14);
    } else if (strncmp(path, "/api/v1/pr/", 11) == 0) {
        hud_pr(&r, path + 11);
    } else if (strcmp(path, "/api/v1/deliveries") == 0) {
        hud_deliveries_list(&r);
    } else if (strncmp(path, "/api/v1/deliveries/", 19) == 0) {
        hud_delivery(&r, path + 19);
    } else if (strcmp(path, "/api/v1/health") == 0) {
        int64_t window;
        health_report rep;
        if (hud_query_window(req, &window) != 0) {
            hud_answer_error(&r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        } else {
            crcr_err e = hud_build_report(&r, NULL, window, &rep);
            if (!e) {
                e = health_report_json(&rep, &r.out);
                health_report_free(&rep);
            }
            hud_answer_out(&r, e);
        }
    } else {
        hud_answer_error(&r, 404, "Not found");
    }
    hud_end(&r);
}

size_t hud_routes(struct crcr_app *app, http_route *out, size_t max)
{
    const http_route routes[] = {
        {.method = "GET",
         .path = "/crcr",
         .prefix = false,
         .max_body = 0,
         .fn = page_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/crcr/",
         .prefix = true,
         .max_body = 0,
         .fn = page_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/api/v1/repos",
         .prefix = false,
         .max_body = 0,
         .fn = api_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/api/v1/repos/",
         .prefix = true,
         .max_body = 0,
         .fn = api_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/api/v1/pr/",
         .prefix = true,
         .max_body = 0,
         .fn = api_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/api/v1/deliveries",
         .prefix = false,
         .max_body = 0,
         .fn = api_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/api/v1/deliveries/",
         .prefix = true,
         .max_body = 0,
         .fn = api_handle,
         .ctx = app},
        {.method = "GET",
         .path = "/api/v1/health",
         .prefix = false,
         .max_body = 0,
         .fn = api_handle,
         .ctx = app},
    };
    size_t n = sizeof(routes) / sizeof(routes[0]);
    if (n > max)
        n = max;
    memcpy(out, routes, n * sizeof(*out));
    return n;
}
