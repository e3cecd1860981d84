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
 * This file is the routing, one table (HUD_ROUTES) from which the HTTP server's routes are made
 * and every request finds its page; the pages are hud_overview.c, hud_repo.c, hud_pr.c and
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

/* ---- the pages, as the routing table calls them (`rest`: the path past the route's) ---- */

static void page_overview(hud_req *r, const char *rest)
{
    hud_overview(r);
}

static void page_deliveries(hud_req *r, const char *rest)
{
    hud_deliveries_list(r);
}

static void page_not_found(hud_req *r, const char *rest)
{
    hud_answer_error(r, 404, "Not found");
}

static void page_css(hud_req *r, const char *rest)
{
    serve_css(r->resp);
}

static void page_health(hud_req *r, const char *rest)
{
    int64_t window;
    health_report rep;
    if (hud_query_window(r->req, &window) != 0) {
        hud_answer_error(r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        return;
    }
    crcr_err e = hud_build_report(r, NULL, window, &rep);
    if (!e) {
        e = health_report_json(&rep, &r->out);
        health_report_free(&rep);
    }
    hud_answer_out(r, e);
}

/* The HUD's one routing table. A request goes to the route that matches its path best: an exact
 * path first, else the longest prefix (http_server's rule); `rest` is what follows the route's
 * path. The routes marked `mount` are the ones registered with the HTTP server (hud_routes): the
 * others are reached under the "/crcr/" mount. A `word` route (deliveries, pr/, static/) gives
 * way to an allowlisted repository of that owner (names_listed_repo). */
typedef struct hud_route {
    const char *path; /* exact, or a prefix ending in '/' */
    bool prefix;
    bool api;   /* JSON under /api/v1 (else HTML) */
    bool mount; /* an HTTP server route */
    bool word;  /* under /crcr/: an allowlisted owner/repo of that name wins */
    void (*page)(hud_req *r, const char *rest);
} hud_route;

static const hud_route HUD_ROUTES[] = {
    /* path                    prefix api    mount  word   page */
    {"/crcr", false, false, true, false, page_overview},
    {"/crcr/", false, false, false, false, page_overview},
    {"/crcr/static/style.css", false, false, false, false, page_css},
    {"/crcr/deliveries", false, false, false, true, page_deliveries},
    {"/crcr/deliveries/", true, false, false, true, hud_delivery},
    {"/crcr/pr/", true, false, false, true, hud_pr},
    {"/crcr/static/", true, false, false, true, page_not_found},
    {"/crcr/", true, false, true, false, hud_repo},
    {"/api/v1/repos", false, true, true, false, page_overview},
    {"/api/v1/repos/", true, true, true, false, hud_repo},
    {"/api/v1/pr/", true, true, true, false, hud_pr},
    {"/api/v1/deliveries", false, true, true, false, page_deliveries},
    {"/api/v1/deliveries/", true, true, true, false, hud_delivery},
    {"/api/v1/health", false, true, true, false, page_health},
};
#define HUD_N_ROUTES (sizeof(HUD_ROUTES) / sizeof(HUD_ROUTES[0]))
/* The mount every `word` route lies under (the repository pages' own prefix). */
#define HUD_PAGES "/crcr/"

/* The route of `path` (NULL: none; an API path the HTTP server hands over always has one). */
static const hud_route *route_of(const char *path)
{
    const hud_route *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < HUD_N_ROUTES; i++) {
        const hud_route *t = &HUD_ROUTES[i];
        size_t n = strlen(t->path);
        if (!t->prefix && strcmp(path, t->path) == 0)
            return t;
        if (t->prefix && n > best_len && strncmp(path, t->path, n) == 0) {
            best = t;
            best_len = n;
        }
    }
    return best;
}

/* GET under every mount: one match in the table, then the page. */
static void hud_handle(void *ctx, const http_request *req, http_response *resp)
{
    const hud_route *t = route_of(req->path);
    hud_req r;
    hud_begin(&r, ctx, req, resp, t ? t->api : true);
    if (!t) {
        hud_answer_error(&r, 404, "Not found");
    } else if (t->word && names_listed_repo(&r, req->path + strlen(HUD_PAGES))) {
        hud_repo(&r, req->path + strlen(HUD_PAGES));
    } else {
        t->page(&r, req->path + strlen(t->path));
    }
    hud_end(&r);
}

size_t hud_routes(struct crcr_app *app, http_route *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < HUD_N_ROUTES && n < max; i++) {
        if (HUD_ROUTES[i].mount)
            out[n++] = (http_route){.method = "GET",
                                    .path = HUD_ROUTES[i].path,
                                    .prefix = HUD_ROUTES[i].prefix,
                                    .max_body = 0,
                                    .fn = hud_handle,
                                    .ctx = app};
    }
    return n;
}
