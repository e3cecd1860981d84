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
 */
#include "hud.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "allowlist.h"
#include "app.h"
#include "clock.h"
#include "health.h"
#include "html.h"
#include "json.h"
#include "limits.h"
#include "log.h"
#include "store.h"

/* PR (or nightly) rows per page of the repo matrix, and the last page that may be asked for. */
#define HUD_PAGE_ROWS 25
#define HUD_PAGE_MAX 1000
/* Runs read for one repo page (newest first; retention bounds them). The same cap as the level
 * health report's, so the page's numbers are the report's. */
#define HUD_REPO_MAX_RUNS HEALTH_MAX_RUNS_PER_REPO
/* Job columns on one page of the matrix; more are counted, not shown. */
#define HUD_JOBS_MAX 120
/* Runs and deliveries read for one PR page. */
#define HUD_PR_MAX_RUNS 5000
#define HUD_PR_MAX_DELIVERIES 200
/* Deliveries listed by /crcr/deliveries (?limit=). */
#define HUD_DELIVERIES_DEFAULT 50
#define HUD_DELIVERIES_MAX 200
/* Points of a trend chart. */
#define HUD_TREND_BUCKETS 14
/* Most bytes one page or API answer may have, and most memory one request's copies may use. */
#define HUD_OUT_MAX (32u * 1024u * 1024u)
#define HUD_ARENA_MAX (128u * 1024u * 1024u)
#define HUD_ARENA_BLOCK (64u * 1024u)
/* Path and query inputs: GitHub's owner (39) and repository name (100) lengths, PR numbers of
 * up to 10 digits, integer query values of up to 12 characters. */
#define HUD_OWNER_MAX 39u
#define HUD_NAME_MAX 100u
#define HUD_PR_DIGITS_MAX 10u
#define HUD_INT_PARAM_MAX 12u
/* Longest error text and check-run body looked at. */
#define HUD_ERROR_MAX 1024u
#define HUD_CHECK_BODY_MAX (64u * 1024u)

/* ------------------------------------------------------------------------------------------ */
/* Per-request memory: strings copied out of store callbacks live in an arena freed at the end. */

typedef struct ablock {
    struct ablock *next;
    size_t used, cap;
    char data[];
} ablock;

typedef struct arena {
    ablock *head;
    size_t total;
    bool oom;
} arena;

/* Returns `n` bytes owned by the arena (NULL and a sticky oom flag past HUD_ARENA_MAX). */
static void *arena_alloc(arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (a->oom)
        return NULL;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > HUD_ARENA_BLOCK ? n : HUD_ARENA_BLOCK;
        if (a->total + cap > HUD_ARENA_MAX) {
            a->oom = true;
            return NULL;
        }
        ablock *b = malloc(sizeof(*b) + cap);
        if (!b) {
            a->oom = true;
            return NULL;
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
        a->total += cap;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

/* A copy of `s` in the arena; NULL for NULL. */
static const char *arena_dup(arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    char *p = arena_alloc(a, n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

static void arena_free(arena *a)
{
    for (ablock *b = a->head; b;) {
        ablock *next = b->next;
        free(b);
        b = next;
    }
    memset(a, 0, sizeof(*a));
}

/* Grows a vector of `elsz`-byte items by one; returns the new (zeroed) slot or NULL. The vector's
 * memory is owned by the caller (free(*v)). */
static void *vec_push(void **v, size_t *n, size_t *cap, size_t elsz)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 256;
        void *p = realloc(*v, ncap * elsz);
        if (!p)
            return NULL;
        *v = p;
        *cap = ncap;
    }
    void *slot = (char *)*v + (*n)++ * elsz;
    memset(slot, 0, elsz);
    return slot;
}

/* String -> index map (open addressing); keys are borrowed and must outlive the map. */
typedef struct smap {
    const char **keys;
    size_t *vals;
    size_t cap, n;
} smap;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static bool smap_grow(smap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const char **keys = calloc(ncap, sizeof(*keys));
    size_t *vals = calloc(ncap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = str_hash(m->keys[i]) & (ncap - 1);
        while (keys[j])
            j = (j + 1) & (ncap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return true;
}

/* The index stored for `key`, or stores `val` and returns it. (size_t)-1 on allocation failure. */
static size_t smap_get_or_add(smap *m, const char *key, size_t val)
{
    if ((m->n + 1) * 2 > m->cap && !smap_grow(m))
        return (size_t)-1;
    size_t j = str_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->n++;
    return val;
}

static void smap_free(smap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------------------------------------ */
/* Request helpers */

typedef struct hud_req {
    crcr_app *app;
    const http_request *req;
    http_response *resp;
    bool api;    /* JSON answer (else HTML) */
    int64_t t0;  /* monotonic ms at the start */
    int64_t now; /* wall ms */
    arena a;
    buf_t out;
} hud_req;

static void answer_error(hud_req *r, int status, const char *msg)
{
    if (r->api) {
        http_resp_detail(r->resp, status, msg);
        return;
    }
    buf_t b;
    buf_init(&b, 64 * 1024);
    hout o;
    hout_init(&o, &b);
    h_page_begin(&o, status == 404 ? "Not found" : "Error", NULL);
    h_rawf(&o, "<h1>%d</h1><p class=\"err\">", status);
    h_text(&o, msg);
    h_raw(&o, "</p><p><a href=\"/crcr\">Back to the HUD</a></p>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    r->resp->status = status;
    buf_reset(&r->resp->body);
    buf_append(&r->resp->body, buf_cstr(&b), b.len);
    html_response_headers(r->resp);
    buf_free(&b);
}

/* Sends r->out as the answer (200), or a 500 when building it failed. */
static void answer_out(hud_req *r, crcr_err err)
{
    if (err || r->a.oom) {
        LOG_WARN("hud.render_failed", "path", r->req->path, "error",
                 crcr_strerror(err ? err : CRCR_E_NOMEM), NULL);
        answer_error(r, err == CRCR_E_STORE ? 503 : 500,
                     err == CRCR_E_STORE ? "store unavailable, please retry"
                                         : "could not build this page");
        return;
    }
    r->resp->status = 200;
    buf_reset(&r->resp->body);
    if (buf_append(&r->resp->body, r->out.data ? r->out.data : "", r->out.len) != CRCR_OK) {
        answer_error(r, 500, "answer too large");
        return;
    }
    if (r->api) {
        r->resp->content_type = "application/json";
        http_resp_header(r->resp, "Cache-Control", "no-store");
        http_resp_header(r->resp, "X-Content-Type-Options", "nosniff");
    } else {
        html_response_headers(r->resp);
    }
}

/* A query argument that must be an integer in [min, max]; `dflt` when absent. -1 when bad. */
static int query_int(const http_request *req, const char *name, long min, long max, long dflt,
                     long *out)
{
    const char *v = http_req_query(req, name);
    if (!v || !*v) {
        *out = dflt;
        return 0;
    }
    if (strlen(v) > HUD_INT_PARAM_MAX)
        return -1;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9')
            return -1;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x < min || x > max)
        return -1;
    *out = x;
    return 0;
}

static bool repo_segment_ok(const char *s, size_t n, size_t max)
{
    if (n == 0 || n > max)
        return false;
    if (n == 1 && s[0] == '.')
        return false;
    if (n == 2 && s[0] == '.' && s[1] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* "owner/repo" with GitHub's characters; copies it into out. */
static bool parse_repo(const char *s, size_t n, char *out, size_t outsz)
{
    const char *slash = memchr(s, '/', n);
    if (!slash || n >= outsz)
        return false;
    size_t on = (size_t)(slash - s), rn = n - on - 1;
    if (!repo_segment_ok(s, on, HUD_OWNER_MAX) || !repo_segment_ok(slash + 1, rn, HUD_NAME_MAX))
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

/* A PR number: 1 to 10 digits, positive. */
static bool parse_pr(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > HUD_PR_DIGITS_MAX)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v <= 0)
        return false;
    *out = v;
    return true;
}

static bool delivery_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CRCR_DELIVERY_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':'))
            return false;
    }
    return true;
}

static bool sha_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 7 || n > CRCR_SHA_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

/* ?window= (default 7d); -1 when bad. */
static int query_window(const http_request *req, int64_t *ms)
{
    const char *v = http_req_query(req, "window");
    if (!v || !*v) {
        *ms = HEALTH_WINDOW_DEFAULT_MS;
        return 0;
    }
    return health_parse_window(v, ms);
}

static void window_label(int64_t ms, char *out, size_t n)
{
    if (ms % 86400000LL == 0)
        snprintf(out, n, "%lldd", (long long)(ms / 86400000LL));
    else if (ms % 3600000LL == 0)
        snprintf(out, n, "%lldh", (long long)(ms / 3600000LL));
    else
        snprintf(out, n, "%lldm", (long long)(ms / 60000LL));
}

/* ------------------------------------------------------------------------------------------ */
/* Runs, as copied out of the store */

typedef struct hrun {
    const char *delivery_id, *repo, *workflow, *job, *state, *conclusion, *details_url,
        *artifact_url, *head_sha, *event_type;
    int64_t run_id, run_attempt, pr_number;
    int level;
    int64_t dispatched_at, started_at, completed_at, queue_ms, exec_ms;
    int64_t passed, failed, skipped;
} hrun;

typedef struct run_list {
    hrun **v; /* pointers into the arena; the array itself is the caller's (free(v)) */
    size_t n, cap;
    arena *a;
    bool oom;
} run_list;

static void collect_hrun(void *ctx, const store_run_row *r)
{
    run_list *l = ctx;
    if (l->oom)
        return;
    arena *a = l->a;
    hrun *h = arena_alloc(a, sizeof(*h));
    hrun **slot = h ? vec_push((void **)&l->v, &l->n, &l->cap, sizeof(*l->v)) : NULL;
    if (!slot) {
        l->oom = true;
        return;
    }
    *slot = h;
    h->delivery_id = arena_dup(a, r->delivery_id);
    h->repo = arena_dup(a, r->repo);
    h->workflow = arena_dup(a, r->workflow_name ? r->workflow_name : "");
    h->job = arena_dup(a, r->job_name ? r->job_name : "");
    h->state = arena_dup(a, r->state);
    h->conclusion = arena_dup(a, r->conclusion);
    h->details_url = arena_dup(a, r->details_url);
    h->artifact_url = arena_dup(a, r->artifact_url);
    h->head_sha = arena_dup(a, r->head_sha);
    h->event_type = arena_dup(a, r->event_type);
    h->run_id = r->run_id;
    h->run_attempt = r->run_attempt;
    h->pr_number = r->pr_number;
    h->level = r->level;
    h->dispatched_at = r->dispatched_at;
    h->started_at = r->started_at;
    h->completed_at = r->completed_at;
    h->queue_ms = r->queue_ms;
    h->exec_ms = r->exec_ms;
    h->passed = r->test_passed;
    h->failed = r->test_failed;
    h->skipped = r->test_skipped;
    if (a->oom)
        l->oom = true;
}

static int64_t run_time(const hrun *r)
{
    int64_t t = r->completed_at > r->started_at ? r->completed_at : r->started_at;
    return t > r->dispatched_at ? t : r->dispatched_at;
}

/* The result word of a run: success, failure, cancelled, timed_out, running or other. */
static const char *run_result(const hrun *r)
{
    const char *cls = html_chip_class(r->state, r->conclusion);
    return cls + 5; /* past "chip-" */
}

static void jw_run(jw *w, const hrun *r, bool with_repo)
{
    jw_obj(w);
    if (with_repo) {
        jw_kstr(w, "repo", r->repo);
        jw_kstr(w, "level", crcr_level_name((crcr_level)r->level));
    }
    jw_kstr(w, "workflow", r->workflow);
    jw_kstr(w, "job", r->job);
    jw_kstr(w, "state", r->state);
    jw_kstr(w, "conclusion", r->conclusion);
    jw_kstr(w, "result", run_result(r));
    jw_kint(w, "run_id", r->run_id);
    jw_kint(w, "run_attempt", r->run_attempt);
    jw_kstr(w, "delivery_id", r->delivery_id);
    jw_kstr(w, "event_type", r->event_type);
    jw_kint(w, "pr_number", r->pr_number);
    jw_kstr(w, "head_sha", r->head_sha);
    jw_kstr(w, "details_url", r->details_url);
    jw_kstr(w, "artifact_url", r->artifact_url);
    jw_ktime(w, "dispatched_at", r->dispatched_at);
    jw_ktime(w, "started_at", r->started_at);
    jw_ktime(w, "completed_at", r->completed_at);
    jw_ksecs(w, "queue_s", r->queue_ms);
    jw_ksecs(w, "exec_s", r->exec_ms);
    jw_key(w, "tests");
    if (r->passed < 0 && r->failed < 0 && r->skipped < 0) {
        jw_null(w);
    } else {
        jw_obj(w);
        jw_key(w, "passed");
        r->passed >= 0 ? jw_int(w, r->passed) : jw_null(w);
        jw_key(w, "failed");
        r->failed >= 0 ? jw_int(w, r->failed) : jw_null(w);
        jw_key(w, "skipped");
        r->skipped >= 0 ? jw_int(w, r->skipped) : jw_null(w);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

/* "workflow / job", or the workflow alone when the job has no name. */
static void h_job_label(hout *o, const hrun *r)
{
    h_text(o, r->workflow);
    if (r->job && *r->job) {
        h_raw(o, " / ");
        h_text(o, r->job);
    }
}

/* The run's chip: a link to the downstream run when its URL is https. */
static void h_chip(hout *o, const hrun *r, int attempts)
{
    const char *cls = html_chip_class(r->state, r->conclusion);
    const char *text =
        strcmp(cls, "chip-running") == 0 ? "running" : (r->conclusion ? r->conclusion : "done");
    char when[48], exec[32], title[160];
    html_time(run_time(r), when, sizeof(when));
    html_duration(r->exec_ms, exec, sizeof(exec));
    snprintf(title, sizeof(title), "run %lld attempt %lld, %s, exec %s", (long long)r->run_id,
             (long long)r->run_attempt, when, exec);
    bool link = html_url_ok(r->details_url);
    h_raw(o, link ? "<a class=\"chip " : "<span class=\"chip ");
    h_raw(o, cls);
    h_raw(o, "\"");
    if (link) {
        h_raw(o, " href=\"");
        h_text(o, r->details_url);
        h_raw(o, "\" rel=\"noopener noreferrer nofollow\"");
    }
    h_raw(o, " title=\"");
    h_text(o, title);
    h_raw(o, "\">");
    h_text(o, text);
    if (attempts > 1)
        h_rawf(o, " &times;%d", attempts);
    h_raw(o, link ? "</a>" : "</span>");
}

static void h_tests(hout *o, const hrun *r)
{
    if (r->passed < 0 && r->failed < 0 && r->skipped < 0) {
        h_raw(o, "-");
        return;
    }
    h_rawf(o, "%lld / %lld / %lld", (long long)(r->passed < 0 ? 0 : r->passed),
           (long long)(r->failed < 0 ? 0 : r->failed),
           (long long)(r->skipped < 0 ? 0 : r->skipped));
}

static void h_dur(hout *o, int64_t ms)
{
    char t[32];
    html_duration(ms, t, sizeof(t));
    h_text(o, t);
}

static void h_ago(hout *o, int64_t ms, int64_t now)
{
    char t[48], full[48];
    html_ago(ms, now, t, sizeof(t));
    html_time(ms, full, sizeof(full));
    h_raw(o, "<span title=\"");
    h_text(o, full);
    h_raw(o, "\">");
    h_text(o, t);
    h_raw(o, "</span>");
}

static void h_pct(hout *o, double v)
{
    if (v < 0)
        h_raw(o, "-");
    else
        h_rawf(o, "%.1f%%", v);
}

static void h_health_badge(hout *o, const health_entry *e)
{
    const char *name = health_status_name(e->verdict.status);
    h_rawf(o, "<span class=\"badge health-%s\" title=\"", name);
    h_text(o, e->verdict.reason);
    h_raw(o, "\">");
    h_raw(o, e->verdict.status == HEALTH_AT_RISK        ? "at risk"
             : e->verdict.status == HEALTH_BELOW_LEVEL  ? "below level"
             : e->verdict.status == HEALTH_NOT_MEASURED ? "not measured"
                                                        : "healthy");
    h_raw(o, "</span>");
    if (e->verdict.status == HEALTH_BELOW_LEVEL)
        h_rawf(o, " <span class=\"muted\">recommend %s</span>",
               crcr_level_name(e->verdict.recommended));
}

static void h_repo_link(hout *o, const char *repo)
{
    h_raw(o, "<a href=\"/crcr/");
    const char *slash = strchr(repo, '/');
    if (slash) {
        char owner[CRCR_REPO_NAME_MAX];
        snprintf(owner, sizeof(owner), "%.*s", (int)(slash - repo), repo);
        h_url_part(o, owner);
        h_raw(o, "/");
        h_url_part(o, slash + 1);
    } else {
        h_url_part(o, repo);
    }
    h_raw(o, "\">");
    h_text(o, repo);
    h_raw(o, "</a>");
}

/* https://github.com/{upstream}/pull/{n} */
static void h_upstream_pr_link(hout *o, const char *upstream, int64_t pr, const char *text)
{
    char url[CRCR_REPO_NAME_MAX + 64];
    snprintf(url, sizeof(url), "https://github.com/%s/pull/%lld", upstream, (long long)pr);
    h_link(o, url, text, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Outbox rows */

typedef struct hjob {
    int64_t id;
    const char *kind, *target, *state, *last_error, *note;
    int attempts;
    long last_status;
    int64_t next_attempt_at, created_at, done_at;
    const char *check_name, *check_status, *check_conclusion; /* check_run rows */
    const char *delivery_id;
} hjob;

typedef struct hdelivery {
    const char *delivery_id, *event, *action, *upstream_repo, *head_sha, *ref, *status;
    int64_t pr_number, received_at;
    size_t payload_bytes;
    hjob *jobs;
    size_t n_jobs, cap_jobs;
} hdelivery;

typedef struct delivery_list {
    hdelivery *v;
    size_t n, cap;
    arena *a;
    bool oom;
} delivery_list;

static void copy_delivery(arena *a, hdelivery *d, const store_delivery_row *r)
{
    d->delivery_id = arena_dup(a, r->delivery_id);
    d->event = arena_dup(a, r->event);
    d->action = arena_dup(a, r->action);
    d->upstream_repo = arena_dup(a, r->upstream_repo);
    d->head_sha = arena_dup(a, r->head_sha);
    d->ref = arena_dup(a, r->ref);
    d->status = arena_dup(a, r->status);
    d->pr_number = r->pr_number;
    d->received_at = r->received_at;
    d->payload_bytes = r->payload_bytes;
}

static int collect_delivery(void *ctx, const store_delivery_row *r)
{
    delivery_list *l = ctx;
    hdelivery *d = vec_push((void **)&l->v, &l->n, &l->cap, sizeof(*l->v));
    if (!d) {
        l->oom = true;
        return 1;
    }
    copy_delivery(l->a, d, r);
    return l->a->oom;
}

typedef struct job_ctx {
    hdelivery *d;
    arena *a;
    bool oom;
} job_ctx;

static void copy_detail_delivery(void *ctx, const store_delivery_row *r, const char *payload,
                                 size_t payload_len)
{
    job_ctx *c = ctx;
    copy_delivery(c->a, c->d, r);
}

/* An error text fit to show: credentials scrubbed, cut at HUD_ERROR_MAX. */
static const char *scrubbed(arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (n > HUD_ERROR_MAX)
        n = HUD_ERROR_MAX;
    buf_t b;
    buf_init(&b, 2 * HUD_ERROR_MAX + 64);
    const char *out = NULL;
    if (log_scrub(s, n, &b) == CRCR_OK)
        out = arena_dup(a, buf_cstr(&b));
    buf_free(&b);
    return out ? out : "[error text not shown]";
}

static void collect_job(void *ctx, const store_job_row *j)
{
    job_ctx *c = ctx;
    hdelivery *d = c->d;
    hjob *h = vec_push((void **)&d->jobs, &d->n_jobs, &d->cap_jobs, sizeof(*d->jobs));
    if (!h) {
        c->oom = true;
        return;
    }
    h->id = j->id;
    h->kind = arena_dup(c->a, j->kind);
    h->target = arena_dup(c->a, j->target);
    h->state = arena_dup(c->a, j->state);
    h->last_error = scrubbed(c->a, j->last_error);
    h->note = scrubbed(c->a, j->note);
    h->attempts = j->attempts;
    h->last_status = j->last_status;
    h->next_attempt_at = j->next_attempt_at;
    h->created_at = j->created_at;
    h->done_at = j->done_at;
    h->delivery_id = arena_dup(c->a, j->delivery_id);
    /* A check run's body is the request we send to GitHub: name, sha, status, conclusion,
     * details, external id. Only those three fields are shown. */
    if (j->kind && strcmp(j->kind, "check_run") == 0 && j->body && j->body_len &&
        j->body_len <= HUD_CHECK_BODY_MAX) {
        jv *doc = jv_parse(j->body, j->body_len, NULL, 0);
        if (doc) {
            h->check_name = arena_dup(c->a, jv_path_str(doc, "name"));
            h->check_status = arena_dup(c->a, jv_path_str(doc, "status"));
            h->check_conclusion = arena_dup(c->a, jv_path_str(doc, "conclusion"));
            jv_free(doc);
        }
    }
}

/* Reads the outbox rows of every delivery in the list. */
static crcr_err load_jobs(store *st, arena *a, hdelivery *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        job_ctx c = {&v[i], a, false};
        crcr_err e = store_get_delivery(st, v[i].delivery_id, NULL, collect_job, &c);
        if (e == CRCR_E_NOT_FOUND)
            continue; /* removed by retention meanwhile */
        if (e)
            return e;
        if (c.oom || a->oom)
            return CRCR_E_NOMEM;
    }
    return CRCR_OK;
}

static void free_deliveries(hdelivery *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].jobs);
    free(v);
}

static void jw_job(jw *w, const hjob *j)
{
    jw_obj(w);
    jw_kint(w, "id", j->id);
    jw_kstr(w, "kind", j->kind);
    jw_kstr(w, "target", j->target);
    jw_kstr(w, "state", j->state);
    jw_kstr(w, "dispatch_state", html_outbox_label(j->state, j->attempts));
    jw_kint(w, "attempts", j->attempts);
    jw_key(w, "last_status");
    j->last_status ? jw_int(w, j->last_status) : jw_null(w);
    jw_kstr(w, "last_error", j->last_error);
    jw_kstr(w, "note", j->note);
    jw_ktime(w, "created_at", j->created_at);
    jw_key(w, "next_attempt_at");
    if (j->state && strcmp(j->state, "queued") == 0)
        jw_time(w, j->next_attempt_at);
    else
        jw_null(w);
    jw_ktime(w, "done_at", j->done_at);
    if (j->kind && strcmp(j->kind, "check_run") == 0) {
        jw_key(w, "check_run");
        jw_obj(w);
        jw_kstr(w, "name", j->check_name);
        jw_kstr(w, "status", j->check_status);
        jw_kstr(w, "conclusion", j->check_conclusion);
        jw_obj_end(w);
    }
    jw_obj_end(w);
}

static void jw_delivery_head(jw *w, const hdelivery *d)
{
    jw_kstr(w, "delivery_id", d->delivery_id);
    jw_kstr(w, "event", d->event);
    jw_kstr(w, "action", d->action);
    jw_kstr(w, "upstream_repo", d->upstream_repo);
    jw_kint(w, "pr_number", d->pr_number);
    jw_kstr(w, "head_sha", d->head_sha);
    jw_kstr(w, "ref", d->ref);
    jw_ktime(w, "received_at", d->received_at);
    jw_kint(w, "payload_bytes", (int64_t)d->payload_bytes);
    jw_kstr(w, "status", d->status);
}

static void jw_delivery(jw *w, const hdelivery *d)
{
    jw_obj(w);
    jw_delivery_head(w, d);
    jw_key(w, "outbox");
    jw_arr(w);
    for (size_t i = 0; i < d->n_jobs; i++)
        jw_job(w, &d->jobs[i]);
    jw_arr_end(w);
    jw_obj_end(w);
}

/* The state of an outbox row as a small labelled badge. */
static void h_state(hout *o, const hjob *j)
{
    h_rawf(o, "<span class=\"state %s\">%s</span>", html_outbox_class(j->state, j->attempts),
           html_outbox_label(j->state, j->attempts));
}

/* Every dispatch target as a small pill coloured by its state; targets that are not simply sent
 * say their state and why (dead) or when (retrying). */
static void h_dispatch_targets(hout *o, const hdelivery *d, int64_t now)
{
    bool any = false;
    h_raw(o, "<ul class=\"targets\">");
    for (size_t i = 0; i < d->n_jobs; i++) {
        const hjob *j = &d->jobs[i];
        if (!j->kind || strcmp(j->kind, "dispatch") != 0)
            continue;
        any = true;
        const char *cls = html_outbox_class(j->state, j->attempts);
        const char *label = html_outbox_label(j->state, j->attempts);
        h_rawf(o, "<li class=\"%s\" data-state=\"%s\" data-target=\"", cls, label);
        h_text(o, j->target);
        h_raw(o, "\" title=\"");
        h_raw(o, label);
        if (j->note) {
            h_raw(o, "; trimmed: ");
            h_text(o, j->note);
        }
        h_raw(o, "\">");
        h_text(o, j->target);
        if (strcmp(cls, "state-sent") != 0) {
            h_rawf(o, " <span class=\"state %s\">%s</span>", cls, label);
            if (strcmp(cls, "state-retrying") == 0) {
                h_raw(o, " next ");
                h_ago(o, j->next_attempt_at, now);
            }
            if (strcmp(cls, "state-dead") == 0 && j->last_error) {
                h_raw(o, " <span class=\"err\">");
                h_text(o, j->last_error);
                h_raw(o, "</span>");
            }
        }
        if (j->note)
            h_raw(o, " <span class=\"muted\">trimmed</span>");
        h_raw(o, "</li>");
    }
    if (!any)
        h_raw(o, "<li class=\"muted\">no dispatches</li>");
    h_raw(o, "</ul>");
}

static void h_delivery_link(hout *o, const char *id)
{
    h_raw(o, "<a class=\"mono\" href=\"/crcr/deliveries/");
    h_url_part(o, id);
    h_raw(o, "\">");
    h_text(o, id);
    h_raw(o, "</a>");
}

/* ------------------------------------------------------------------------------------------ */
/* Relay health and the overview (/crcr, /api/v1/repos) */

typedef struct relay_health {
    store_outbox_stats ob;
    bool ob_ok;
    int64_t last_webhook_at;
    allowlist_status as;
    bool dry_run;
    int64_t started_at;
    uint64_t webhooks_accepted, callbacks_accepted, callbacks_rejected;
} relay_health;

static int latest_delivery(void *ctx, const store_delivery_row *r)
{
    *(int64_t *)ctx = r->received_at;
    return 1;
}

static void relay_health_get(crcr_app *app, relay_health *h)
{
    memset(h, 0, sizeof(*h));
    h->ob_ok = store_outbox_stats_get(app->st, &h->ob) == CRCR_OK;
    h->last_webhook_at = atomic_load(&app->last_webhook_at);
    if (!h->last_webhook_at) {
        /* Before this process saw one: the newest stored delivery. */
        store_filter f = {.limit = 1};
        store_list_deliveries(app->st, &f, latest_delivery, &h->last_webhook_at);
    }
    allowlist_source_status(app->allow, &h->as);
    h->dry_run = app->cfg.dry_run;
    h->started_at = app->started_at;
    h->webhooks_accepted = atomic_load(&app->webhooks_accepted);
    h->callbacks_accepted = atomic_load(&app->callbacks_accepted);
    h->callbacks_rejected = atomic_load(&app->callbacks_rejected);
}

static void jw_relay(jw *w, const relay_health *h)
{
    jw_obj(w);
    jw_key(w, "outbox");
    if (h->ob_ok) {
        jw_obj(w);
        jw_kint(w, "backlog", h->ob.queued + h->ob.running);
        jw_kint(w, "queued", h->ob.queued);
        jw_kint(w, "running", h->ob.running);
        jw_kint(w, "sent", h->ob.sent);
        jw_kint(w, "dry_run", h->ob.dry_run);
        jw_kint(w, "dead", h->ob.dead);
        jw_ktime(w, "oldest_due_at", h->ob.oldest_due);
        jw_obj_end(w);
    } else {
        jw_null(w);
    }
    jw_ktime(w, "last_webhook_at", h->last_webhook_at);
    jw_key(w, "allowlist");
    jw_obj(w);
    jw_kbool(w, "loaded", h->as.loaded);
    jw_kstr(w, "source", h->as.source);
    jw_ktime(w, "loaded_at", h->as.loaded_at);
    jw_kint(w, "repos", (int64_t)h->as.repos);
    jw_key(w, "last_error");
    jw_str(w, h->as.last_error[0] ? h->as.last_error : NULL);
    jw_obj_end(w);
    jw_kbool(w, "dry_run", h->dry_run);
    jw_ktime(w, "started_at", h->started_at);
    jw_obj_end(w);
}

static void h_card(hout *o, const char *id, const char *key)
{
    h_rawf(o, "<div class=\"card\" id=\"%s\"><div class=\"k\">%s</div>", id, key);
}

static void h_relay(hout *o, const relay_health *h, int64_t now)
{
    h_raw(o, "<section id=\"relay\"><h2>Relay health</h2><div class=\"cards\">");
    h_card(o, "relay-backlog", "Outbox backlog");
    if (h->ob_ok) {
        h_rawf(o, "<div class=\"v\">%lld</div><div class=\"s\">%lld queued, %lld sending",
               (long long)(h->ob.queued + h->ob.running), (long long)h->ob.queued,
               (long long)h->ob.running);
        if (h->ob.oldest_due) {
            h_raw(o, "; oldest due ");
            h_ago(o, h->ob.oldest_due, now);
        }
        h_raw(o, "</div>");
    } else {
        h_raw(o, "<div class=\"v err\">store unavailable</div>");
    }
    h_raw(o, "</div>");
    h_card(o, "relay-dead", "Dead rows");
    h_rawf(o,
           "<div class=\"v%s\"><a href=\"/crcr/deliveries?state=dead\">%lld</a></div>"
           "<div class=\"s\">gave up or refused; redeliverable</div></div>",
           h->ob.dead > 0 ? " err" : "", (long long)h->ob.dead);
    h_card(o, "relay-webhook", "Last webhook");
    h_raw(o, "<div class=\"v\">");
    h_ago(o, h->last_webhook_at, now);
    h_raw(o, "</div><div class=\"s\">");
    char t[48];
    html_time(h->last_webhook_at, t, sizeof(t));
    h_text(o, t);
    h_raw(o, "</div></div>");
    h_card(o, "relay-allowlist", "Allowlist");
    if (h->as.loaded) {
        h_rawf(o, "<div class=\"v\">%zu repos</div><div class=\"s\">loaded ", h->as.repos);
        h_ago(o, h->as.loaded_at, now);
        h_raw(o, " from <span class=\"mono\">");
        h_text(o, h->as.source);
        h_raw(o, "</span>");
    } else {
        h_raw(o, "<div class=\"v err\">not loaded</div><div class=\"s\">");
        h_text(o, h->as.source);
    }
    if (h->as.last_error[0]) {
        h_raw(o, "<br><span class=\"err\">last refresh failed: ");
        h_text(o, h->as.last_error);
        h_raw(o, "</span>");
    }
    h_raw(o, "</div></div>");
    h_card(o, "relay-mode", "Mode");
    h_raw(o, h->dry_run ? "<div class=\"v\">dry-run</div><div class=\"s\">outbound calls are "
                          "recorded, not sent</div></div>"
                        : "<div class=\"v\">GitHub App</div><div class=\"s\">dispatching</div>"
                          "</div>");
    h_raw(o, "</div></section>");
}

static const char *level_note(crcr_level l)
{
    switch (l) {
    case CRCR_LEVEL_L4:
        return "results block merges; check runs always";
    case CRCR_LEVEL_L3:
        return "check runs with the ciflow/crcr/&lt;device&gt; label";
    case CRCR_LEVEL_L2:
        return "results on the HUD";
    default:
        return "events forwarded; no results reported";
    }
}

static crcr_err build_report(hud_req *r, const char *only_repo, int64_t window, health_report *rep)
{
    allowlist *al = allowlist_source_get(r->app->allow);
    health_thresholds t;
    health_thresholds_from_config(&t, &r->app->cfg);
    crcr_err e = health_report_build(r->app->st, al, only_repo, r->now, window, &t, rep);
    allowlist_free(al);
    return e;
}

static void overview(hud_req *r)
{
    int64_t window;
    if (query_window(r->req, &window) != 0) {
        answer_error(r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        return;
    }
    health_report rep;
    crcr_err e = build_report(r, NULL, window, &rep);
    if (e) {
        answer_out(r, e);
        return;
    }
    relay_health rh;
    relay_health_get(r->app, &rh);
    if (r->api) {
        jw w;
        jw_init(&w, &r->out);
        jw_obj(&w);
        jw_ktime(&w, "generated_at", r->now);
        jw_kint(&w, "window_s", window / 1000);
        jw_kstr(&w, "upstream_repo", r->app->cfg.upstream_repo);
        jw_key(&w, "relay");
        jw_relay(&w, &rh);
        jw_key(&w, "repos");
        jw_arr(&w);
        for (size_t i = 0; i < rep.n && !w.err; i++) {
            jw_value_begin(&w);
            if (!w.err)
                w.err = health_entry_json(&rep.entries[i], &r->out);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
        health_report_free(&rep);
        answer_out(r, w.err);
        return;
    }
    hout o;
    hout_init(&o, &r->out);
    char win[24], since[48];
    window_label(window, win, sizeof(win));
    html_time(rep.since, since, sizeof(since));
    h_page_begin(&o, "Downstream CI", "repos");
    h_raw(&o, "<h1>Downstream CI of ");
    h_text(&o, r->app->cfg.upstream_repo);
    h_raw(&o, "</h1><p class=\"muted\">Results over the last ");
    h_text(&o, win);
    h_raw(&o, " (since ");
    h_text(&o, since);
    h_raw(&o, "). Health compares each repo with its level's requirements; hover a badge for "
              "the reason. <a href=\"/api/v1/repos\">JSON</a></p>");
    h_relay(&o, &rh, r->now);
    for (int lvl = CRCR_LEVEL_L4; lvl >= CRCR_LEVEL_L1; lvl--) {
        size_t count = 0;
        for (size_t i = 0; i < rep.n; i++)
            count += (int)rep.entries[i].level == lvl;
        h_rawf(&o,
               "<section class=\"level\" id=\"level-L%d\"><h2>L%d <small>%s</small> "
               "<small class=\"count\">(%zu repo%s)</small></h2>",
               lvl, lvl, level_note((crcr_level)lvl), count, count == 1 ? "" : "s");
        if (!count) {
            h_raw(&o, "<p class=\"muted\">No repos at this level.</p></section>");
            continue;
        }
        h_raw(&o, "<div class=\"scroll\"><table class=\"repos\"><thead><tr><th>Repo</th>"
                  "<th class=\"num\">Runs</th><th class=\"num\">Success</th>"
                  "<th class=\"num\">Timed out</th><th class=\"num hide-sm\">Queue p50</th>"
                  "<th class=\"num hide-sm\">Exec p50</th><th class=\"hide-sm\">Last run</th>"
                  "<th>Health</th>"
                  "</tr></thead><tbody>");
        for (size_t i = 0; i < rep.n; i++) {
            const health_entry *en = &rep.entries[i];
            if ((int)en->level != lvl)
                continue;
            const health_stats *s = &en->stats;
            h_raw(&o, "<tr data-repo=\"");
            h_text(&o, en->repo);
            h_rawf(&o, "\" data-health=\"%s\"><td class=\"repo\">",
                   health_status_name(en->verdict.status));
            h_repo_link(&o, en->repo);
            if (en->device[0]) {
                h_raw(&o, " <span class=\"muted\">");
                h_text(&o, en->device);
                h_raw(&o, "</span>");
            }
            h_rawf(&o, "</td><td class=\"num runs\">%lld</td><td class=\"num success\">",
                   (long long)s->runs);
            h_pct(&o, s->success_pct);
            h_raw(&o, "</td><td class=\"num timed-out\">");
            h_pct(&o, s->timeout_pct);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_dur(&o, s->queue_p50_ms);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_dur(&o, s->exec_p50_ms);
            h_raw(&o, "</td><td class=\"hide-sm last-run\">");
            h_ago(&o, s->last_run_at, r->now);
            h_raw(&o, "</td><td>");
            h_health_badge(&o, en);
            h_raw(&o, "</td></tr>");
        }
        h_raw(&o, "</tbody></table></div></section>");
    }
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    health_report_free(&rep);
    answer_out(r, o.err);
}

/* ------------------------------------------------------------------------------------------ */
/* Repo page: PR x job matrix (/crcr/{org}/{repo}, /api/v1/repos/{org}/{repo}/runs) */

typedef struct mrow {
    const char *key;   /* "pr:123", "sha:abc", "nightly:<delivery>" */
    int64_t pr_number; /* 0 for push and nightly rows */
    const char *head_sha, *delivery_id;
    int64_t updated_at;
} mrow;

typedef struct mjob {
    const char *key; /* workflow \x1f job */
    const hrun *sample;
} mjob;

typedef struct trend {
    int64_t start[HUD_TREND_BUCKETS];
    int64_t runs[HUD_TREND_BUCKETS], success[HUD_TREND_BUCKETS], rate_runs[HUD_TREND_BUCKETS];
    int64_t exec_p50[HUD_TREND_BUCKETS];
} trend;

typedef struct repo_model {
    char repo[CRCR_REPO_NAME_MAX];
    bool nightly;
    long page, pages;
    int64_t window;
    health_report rep; /* one entry */
    run_list all;      /* every run of the repo, newest first */
    const hrun **runs; /* those of the tab, newest first */
    size_t n_runs;
    mrow *rows;
    size_t n_rows, cap_rows;
    size_t *run_row; /* row index of each run */
    mjob *jobs;      /* the page's job columns, sorted */
    size_t n_jobs, cap_jobs, jobs_hidden;
    const hrun **cells; /* [page row][job]: the newest run, NULL when none */
    int *attempts;      /* runs behind each cell */
    size_t first_row, page_rows;
    trend tr;
} repo_model;

static void repo_model_free(repo_model *m)
{
    health_report_free(&m->rep);
    free(m->all.v);
    free((void *)m->runs);
    free(m->rows);
    free(m->run_row);
    free(m->jobs);
    free((void *)m->cells);
    free(m->attempts);
}

static const char *row_key(arena *a, const hrun *r, bool nightly)
{
    char key[CRCR_DELIVERY_ID_MAX + 32];
    if (nightly)
        snprintf(key, sizeof(key), "n:%s", r->delivery_id ? r->delivery_id : "");
    else if (r->pr_number > 0)
        snprintf(key, sizeof(key), "pr:%lld", (long long)r->pr_number);
    else
        snprintf(key, sizeof(key), "sha:%s", r->head_sha ? r->head_sha : "");
    return arena_dup(a, key);
}

static const char *job_key(arena *a, const hrun *r)
{
    size_t wn = strlen(r->workflow), jn = strlen(r->job);
    char *k = arena_alloc(a, wn + jn + 2);
    if (!k)
        return NULL;
    memcpy(k, r->workflow, wn);
    k[wn] = '\x1f';
    memcpy(k + wn + 1, r->job, jn + 1);
    return k;
}

static int cmp_mjob(const void *a, const void *b)
{
    return strcmp(((const mjob *)a)->key, ((const mjob *)b)->key);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static crcr_err trend_build(trend *tr, const hrun *const *runs, size_t n_runs, int64_t since,
                            int64_t window)
{
    memset(tr, 0, sizeof(*tr));
    int64_t width = window / HUD_TREND_BUCKETS;
    if (width <= 0)
        width = 1;
    int64_t *execs = malloc((n_runs ? n_runs : 1) * sizeof(*execs));
    size_t *bucket_of = malloc((n_runs ? n_runs : 1) * sizeof(*bucket_of));
    if (!execs || !bucket_of) {
        free(execs);
        free(bucket_of);
        return CRCR_E_NOMEM;
    }
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        tr->start[b] = since + width * b;
        tr->exec_p50[b] = -1;
    }
    for (size_t i = 0; i < n_runs; i++) {
        const hrun *r = runs[i];
        bucket_of[i] = (size_t)-1;
        if (r->completed_at < since || r->completed_at <= 0)
            continue;
        int64_t b = (r->completed_at - since) / width;
        if (b >= HUD_TREND_BUCKETS)
            b = HUD_TREND_BUCKETS - 1;
        bucket_of[i] = (size_t)b;
        tr->runs[b]++;
        health_outcome oc = health_outcome_of(r->state, r->conclusion);
        if (oc == HEALTH_SUCCESS)
            tr->success[b]++;
        if (oc != HEALTH_CANCELLED)
            tr->rate_runs[b]++;
    }
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        size_t n = 0;
        for (size_t i = 0; i < n_runs; i++)
            if (bucket_of[i] == (size_t)b && runs[i]->exec_ms >= 0)
                execs[n++] = runs[i]->exec_ms;
        if (n) {
            qsort(execs, n, sizeof(*execs), cmp_i64);
            tr->exec_p50[b] = execs[(n - 1) / 2];
        }
    }
    free(execs);
    free(bucket_of);
    return CRCR_OK;
}

/* Fills the model; 404/400 are returned as negative statuses in *status. */
static bool run_is_nightly(const hrun *r)
{
    return r->event_type &&
           (strcmp(r->event_type, "nightly") == 0 || strcmp(r->event_type, "periodic") == 0);
}

/* Fills the model; *status 404 when the repo is neither allowlisted nor has runs. One read of
 * the repo's runs serves both the matrix and its health numbers (computed as
 * health_report_build would: runs updated within the window, refused callbacks since then). */
static crcr_err repo_model_build(hud_req *r, repo_model *m, int *status)
{
    *status = 0;
    health_entry *en = calloc(1, sizeof(*en));
    if (!en)
        return CRCR_E_NOMEM;
    m->rep.entries = en;
    m->rep.n = 1;
    m->rep.generated_at = r->now;
    m->rep.window_ms = m->window;
    m->rep.since = r->now - m->window;
    health_thresholds_default(&m->rep.t);
    allowlist *al = allowlist_source_get(r->app->allow);
    const allowlist_entry *ae = al ? allowlist_find(al, m->repo) : NULL;
    if (ae) {
        snprintf(m->repo, sizeof(m->repo), "%s", ae->repo); /* as the allowlist writes it */
        en->level = ae->level;
        snprintf(en->device, sizeof(en->device), "%s", ae->device ? ae->device : "");
    }
    snprintf(en->repo, sizeof(en->repo), "%s", m->repo);
    allowlist_free(al);

    run_list *all = &m->all;
    all->a = &r->a;
    store_run_filter f = {.repo = m->repo, .limit = HUD_REPO_MAX_RUNS, .no_payload = true};
    crcr_err e = store_list_runs(r->app->st, &f, collect_hrun, all);
    if (!e && (all->oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (!e && !ae && all->n == 0)
        *status = 404;
    if (e || *status)
        return e;
    if (!ae && all->v[0]->level >= CRCR_LEVEL_L1 && all->v[0]->level <= CRCR_LEVEL_L4)
        en->level = (crcr_level)all->v[0]->level; /* delisted: the level it last reported at */

    /* Health over the window, and the matrix's runs of the tab, from the same rows. */
    health_run *hr = malloc((all->n ? all->n : 1) * sizeof(*hr));
    m->runs = malloc((all->n ? all->n : 1) * sizeof(*m->runs));
    if (!hr || !m->runs) {
        free(hr);
        return CRCR_E_NOMEM;
    }
    size_t nh = 0;
    for (size_t i = 0; i < all->n; i++) {
        const hrun *run = all->v[i];
        health_run h = health_run_of(run->state, run->conclusion, run->event_type, run->pr_number,
                                     run->head_sha, run->dispatched_at, run->started_at,
                                     run->completed_at, run->queue_ms, run->exec_ms);
        if (health_run_updated(&h) >= m->rep.since)
            hr[nh++] = h;
        if (run_is_nightly(run) == m->nightly)
            m->runs[m->n_runs++] = run;
    }
    int64_t rejected = 0;
    e = store_callback_rejections(r->app->st, m->repo, m->rep.since, &rejected);
    if (!e)
        e = health_entry_compute(en, hr, nh, rejected, &m->rep.t);
    free(hr);
    if (e)
        return e;

    /* Rows in order of their newest run (runs come newest first). */
    smap rows = {0};
    m->run_row = malloc((m->n_runs ? m->n_runs : 1) * sizeof(*m->run_row));
    if (!m->run_row)
        return CRCR_E_NOMEM;
    for (size_t i = 0; i < m->n_runs; i++) {
        const hrun *run = m->runs[i];
        const char *k = row_key(&r->a, run, m->nightly);
        if (!k) {
            smap_free(&rows);
            return CRCR_E_NOMEM;
        }
        size_t idx = smap_get_or_add(&rows, k, m->n_rows);
        if (idx == (size_t)-1) {
            smap_free(&rows);
            return CRCR_E_NOMEM;
        }
        if (idx == m->n_rows) {
            mrow *row = vec_push((void **)&m->rows, &m->n_rows, &m->cap_rows, sizeof(*m->rows));
            if (!row) {
                smap_free(&rows);
                return CRCR_E_NOMEM;
            }
            row->key = k;
            row->pr_number = m->nightly ? 0 : run->pr_number;
            row->head_sha = run->head_sha;
            row->delivery_id = run->delivery_id;
        }
        int64_t t_run = run_time(run);
        if (t_run > m->rows[idx].updated_at)
            m->rows[idx].updated_at = t_run;
        m->run_row[i] = idx;
    }
    smap_free(&rows);
    m->pages = m->n_rows ? (long)((m->n_rows + HUD_PAGE_ROWS - 1) / HUD_PAGE_ROWS) : 1;
    m->first_row = (size_t)(m->page - 1) * HUD_PAGE_ROWS;
    m->page_rows = 0;
    if (m->first_row < m->n_rows) {
        m->page_rows = m->n_rows - m->first_row;
        if (m->page_rows > HUD_PAGE_ROWS)
            m->page_rows = HUD_PAGE_ROWS;
    }

    /* Job columns of this page's rows. */
    smap jobs = {0};
    for (size_t i = 0; i < m->n_runs; i++) {
        size_t row = m->run_row[i];
        if (row < m->first_row || row >= m->first_row + m->page_rows)
            continue;
        const char *k = job_key(&r->a, m->runs[i]);
        if (!k) {
            smap_free(&jobs);
            return CRCR_E_NOMEM;
        }
        size_t idx = smap_get_or_add(&jobs, k, m->n_jobs);
        if (idx == (size_t)-1) {
            smap_free(&jobs);
            return CRCR_E_NOMEM;
        }
        if (idx == m->n_jobs) {
            mjob *j = vec_push((void **)&m->jobs, &m->n_jobs, &m->cap_jobs, sizeof(*m->jobs));
            if (!j) {
                smap_free(&jobs);
                return CRCR_E_NOMEM;
            }
            j->key = k;
            j->sample = m->runs[i];
        }
    }
    smap_free(&jobs);
    if (m->n_jobs)
        qsort(m->jobs, m->n_jobs, sizeof(*m->jobs), cmp_mjob);
    if (m->n_jobs > HUD_JOBS_MAX) {
        m->jobs_hidden = m->n_jobs - HUD_JOBS_MAX;
        m->n_jobs = HUD_JOBS_MAX;
    }
    smap cols = {0};
    for (size_t j = 0; j < m->n_jobs; j++)
        if (smap_get_or_add(&cols, m->jobs[j].key, j) == (size_t)-1) {
            smap_free(&cols);
            return CRCR_E_NOMEM;
        }
    size_t ncells = m->page_rows * m->n_jobs;
    m->cells = calloc(ncells ? ncells : 1, sizeof(*m->cells));
    m->attempts = calloc(ncells ? ncells : 1, sizeof(*m->attempts));
    if (!m->cells || !m->attempts) {
        smap_free(&cols);
        return CRCR_E_NOMEM;
    }
    for (size_t i = 0; i < m->n_runs && ncells; i++) {
        size_t row = m->run_row[i];
        if (row < m->first_row || row >= m->first_row + m->page_rows)
            continue;
        const char *k = job_key(&r->a, m->runs[i]);
        if (!k) {
            smap_free(&cols);
            return CRCR_E_NOMEM;
        }
        size_t col = smap_get_or_add(&cols, k, (size_t)-2);
        if (col >= m->n_jobs)
            continue; /* hidden column (or the probe just added it: never looked at again) */
        size_t c = (row - m->first_row) * m->n_jobs + col;
        if (!m->cells[c])
            m->cells[c] = m->runs[i]; /* newest first */
        m->attempts[c]++;
    }
    smap_free(&cols);
    return trend_build(&m->tr, m->runs, m->n_runs, r->now - m->window, m->window);
}

static void repo_json(hud_req *r, repo_model *m)
{
    jw w;
    jw_init(&w, &r->out);
    const health_entry *en = &m->rep.entries[0];
    jw_obj(&w);
    jw_kstr(&w, "repo", m->repo);
    jw_kstr(&w, "level", crcr_level_name(en->level));
    jw_kstr(&w, "tab", m->nightly ? "nightly" : "pr");
    jw_kint(&w, "page", m->page);
    jw_kint(&w, "pages", m->pages);
    jw_kint(&w, "per_page", HUD_PAGE_ROWS);
    jw_kint(&w, "rows_total", (int64_t)m->n_rows);
    jw_kint(&w, "window_s", m->window / 1000);
    jw_key(&w, "health");
    jw_value_begin(&w);
    if (!w.err)
        w.err = health_entry_json(en, &r->out);
    jw_key(&w, "jobs");
    jw_arr(&w);
    for (size_t j = 0; j < m->n_jobs; j++) {
        jw_obj(&w);
        jw_kstr(&w, "workflow", m->jobs[j].sample->workflow);
        jw_kstr(&w, "job", m->jobs[j].sample->job);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_kint(&w, "jobs_hidden", (int64_t)m->jobs_hidden);
    jw_key(&w, "rows");
    jw_arr(&w);
    for (size_t i = 0; i < m->page_rows; i++) {
        const mrow *row = &m->rows[m->first_row + i];
        jw_obj(&w);
        jw_key(&w, "pr_number");
        row->pr_number > 0 ? jw_int(&w, row->pr_number) : jw_null(&w);
        jw_kstr(&w, "head_sha", row->head_sha);
        jw_kstr(&w, "delivery_id", row->delivery_id);
        jw_ktime(&w, "updated_at", row->updated_at);
        jw_key(&w, "cells");
        jw_arr(&w);
        for (size_t j = 0; j < m->n_jobs; j++) {
            const hrun *c = m->cells[i * m->n_jobs + j];
            if (!c) {
                jw_null(&w);
                continue;
            }
            jw_run(&w, c, false);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_key(&w, "trend");
    jw_arr(&w);
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        jw_obj(&w);
        jw_ktime(&w, "start", m->tr.start[b]);
        jw_kint(&w, "completed", m->tr.runs[b]);
        jw_kint(&w, "success", m->tr.success[b]);
        jw_knum(&w, "success_rate_pct",
                m->tr.rate_runs[b] ? 100.0 * (double)m->tr.success[b] / (double)m->tr.rate_runs[b]
                                   : -1,
                1);
        jw_ksecs(&w, "exec_p50_s", m->tr.exec_p50[b]);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    answer_out(r, w.err);
}

static void h_repo_tab_link(hout *o, const char *repo, bool nightly, long page)
{
    h_raw(o, "/crcr/");
    const char *slash = strchr(repo, '/');
    char owner[CRCR_REPO_NAME_MAX];
    snprintf(owner, sizeof(owner), "%.*s", slash ? (int)(slash - repo) : 0, repo);
    h_url_part(o, owner);
    h_raw(o, "/");
    h_url_part(o, slash ? slash + 1 : repo);
    bool q = false;
    if (nightly) {
        h_raw(o, "?tab=nightly");
        q = true;
    }
    if (page > 1)
        h_rawf(o, "%spage=%ld", q ? "&amp;" : "?", page);
}

static void repo_html(hud_req *r, repo_model *m)
{
    hout o;
    hout_init(&o, &r->out);
    const health_entry *en = &m->rep.entries[0];
    const health_stats *s = &en->stats;
    h_page_begin(&o, m->repo, "repos");
    h_raw(&o, "<h1>");
    h_text(&o, m->repo);
    h_rawf(&o, " <span class=\"badge level\">%s</span> ", crcr_level_name(en->level));
    h_health_badge(&o, en);
    h_raw(&o, "</h1><p class=\"muted\">");
    if (en->device[0]) {
        h_raw(&o, "Device ");
        h_text(&o, en->device);
        h_raw(&o, ". ");
    }
    h_text(&o, en->verdict.reason);
    h_raw(&o, ". <a href=\"https://github.com/");
    h_text(&o, m->repo);
    h_raw(&o, "\" rel=\"noopener noreferrer nofollow\">Repository</a> &middot; <a href=\"/api/v1/"
              "repos/");
    h_text(&o, m->repo);
    h_raw(&o, "/runs\">JSON</a></p>");
    if (en->level == CRCR_LEVEL_L1)
        h_raw(&o, "<p class=\"note\">L1 repos receive events only; their callbacks are ignored, "
                  "so no results appear here.</p>");

    char win[24];
    window_label(m->window, win, sizeof(win));
    h_raw(&o, "<div class=\"cards\" id=\"stats\">");
    h_card(&o, "stat-runs", "Runs");
    h_rawf(&o, "<div class=\"v\">%lld</div><div class=\"s\">last ", (long long)s->runs);
    h_text(&o, win);
    h_rawf(&o, ", %lld running</div></div>", (long long)s->running);
    h_card(&o, "stat-success", "Success rate");
    h_raw(&o, "<div class=\"v\">");
    h_pct(&o, s->success_pct);
    h_rawf(&o, "</div><div class=\"s\">%lld of %lld; %lld cancelled not counted</div></div>",
           (long long)s->success, (long long)s->rate_runs, (long long)s->cancelled);
    h_card(&o, "stat-timeouts", "Timed out");
    h_raw(&o, "<div class=\"v\">");
    h_pct(&o, s->timeout_pct);
    h_rawf(&o, "</div><div class=\"s\">%lld runs</div></div>", (long long)s->timed_out);
    h_card(&o, "stat-queue", "Queue p50 / p90");
    h_raw(&o, "<div class=\"v\">");
    h_dur(&o, s->queue_p50_ms);
    h_raw(&o, "</div><div class=\"s\">p90 ");
    h_dur(&o, s->queue_p90_ms);
    h_raw(&o, "</div></div>");
    h_card(&o, "stat-exec", "Execution p50 / p90");
    h_raw(&o, "<div class=\"v\">");
    h_dur(&o, s->exec_p50_ms);
    h_raw(&o, "</div><div class=\"s\">p90 ");
    h_dur(&o, s->exec_p90_ms);
    h_raw(&o, "</div></div>");
    h_card(&o, "stat-total", "PR total p90");
    h_raw(&o, "<div class=\"v\">");
    h_dur(&o, s->total_p90_ms);
    h_rawf(&o, "</div><div class=\"s\">worst ");
    h_dur(&o, s->total_max_ms);
    h_rawf(&o, " over %lld heads</div></div>", (long long)s->heads);
    h_card(&o, "stat-rejections", "Callback rejections");
    h_raw(&o, "<div class=\"v\">");
    h_pct(&o, s->reject_pct);
    h_rawf(&o, "</div><div class=\"s\">%lld refused, %lld accepted</div></div>",
           (long long)s->callbacks_rejected, (long long)s->callbacks_accepted);
    h_raw(&o, "</div>");

    h_raw(&o, "<nav class=\"tabs\"><a href=\"");
    h_repo_tab_link(&o, m->repo, false, 1);
    h_rawf(&o, "\"%s>PRs and pushes</a><a href=\"", m->nightly ? "" : " class=\"active\"");
    h_repo_tab_link(&o, m->repo, true, 1);
    h_rawf(&o, "\"%s>Nightly / periodic</a></nav>", m->nightly ? " class=\"active\"" : "");

    /* Trend charts over the window. */
    double rate[HUD_TREND_BUCKETS], dur[HUD_TREND_BUCKETS];
    bool has_rate[HUD_TREND_BUCKETS], has_dur[HUD_TREND_BUCKETS];
    for (int b = 0; b < HUD_TREND_BUCKETS; b++) {
        has_rate[b] = m->tr.rate_runs[b] > 0;
        rate[b] = has_rate[b] ? 100.0 * (double)m->tr.success[b] / (double)m->tr.rate_runs[b] : 0;
        has_dur[b] = m->tr.exec_p50[b] >= 0;
        dur[b] = has_dur[b] ? (double)m->tr.exec_p50[b] / 1000.0 : 0;
    }
    html_chart c1 = {.title = "Pass rate",
                     .unit = "%",
                     .values = rate,
                     .has = has_rate,
                     .starts = m->tr.start,
                     .n = HUD_TREND_BUCKETS,
                     .ymax = 100,
                     .end = r->now,
                     .css_class = "rate"};
    html_chart c2 = {.title = "Median execution time",
                     .unit = "s",
                     .values = dur,
                     .has = has_dur,
                     .starts = m->tr.start,
                     .n = HUD_TREND_BUCKETS,
                     .end = r->now,
                     .css_class = "dur"};
    h_raw(&o, "<div class=\"charts\">");
    h_chart(&o, &c1);
    h_chart(&o, &c2);
    h_raw(&o, "</div>");

    h_rawf(&o, "<h2>%s <span class=\"muted\">(%zu row%s)</span></h2>",
           m->nightly ? "Nightly and periodic runs" : "Results by PR", m->n_rows,
           m->n_rows == 1 ? "" : "s");
    if (m->page_rows == 0) {
        h_raw(&o, m->n_rows ? "<p class=\"muted\">No rows on this page.</p>"
                            : "<p class=\"muted\">No runs reported yet.</p>");
    } else {
        h_raw(&o, "<div class=\"scroll\"><table class=\"matrix\"><thead><tr><th>");
        h_raw(&o, m->nightly ? "Upstream commit" : "PR / push");
        h_raw(&o, "</th>");
        for (size_t j = 0; j < m->n_jobs; j++) {
            h_raw(&o, "<th class=\"job\">");
            h_job_label(&o, m->jobs[j].sample);
            h_raw(&o, "</th>");
        }
        h_raw(&o, "</tr></thead><tbody>");
        for (size_t i = 0; i < m->page_rows; i++) {
            const mrow *row = &m->rows[m->first_row + i];
            h_raw(&o, "<tr><td class=\"row\">");
            if (row->pr_number > 0) {
                h_rawf(&o, "<a href=\"/crcr/pr/%lld\">#%lld</a> ", (long long)row->pr_number,
                       (long long)row->pr_number);
            } else if (!m->nightly) {
                h_raw(&o, "push ");
            }
            h_raw(&o, "<span class=\"mono muted\">");
            h_textn(&o, row->head_sha ? row->head_sha : (row->delivery_id ? row->delivery_id : ""),
                    7);
            h_raw(&o, "</span><br><span class=\"muted\">");
            h_ago(&o, row->updated_at, r->now);
            h_raw(&o, "</span></td>");
            for (size_t j = 0; j < m->n_jobs; j++) {
                size_t c = i * m->n_jobs + j;
                const hrun *run = m->cells[c];
                h_raw(&o, "<td>");
                if (run) {
                    h_chip(&o, run, m->attempts[c]);
                    if (html_url_ok(run->artifact_url)) {
                        h_raw(&o, "<br>");
                        h_link(&o, run->artifact_url, "artifacts", "artifact");
                    }
                } else {
                    h_raw(&o, "<span class=\"muted\">&middot;</span>");
                }
                h_raw(&o, "</td>");
            }
            h_raw(&o, "</tr>");
        }
        h_raw(&o, "</tbody></table></div>");
        if (m->jobs_hidden)
            h_rawf(&o, "<p class=\"muted\">%zu more job columns not shown; see the JSON.</p>",
                   m->jobs_hidden);
    }
    h_rawf(&o, "<nav class=\"pager\"><span>Page %ld of %ld</span>", m->page, m->pages);
    if (m->page > 1) {
        h_raw(&o, "<a rel=\"prev\" href=\"");
        h_repo_tab_link(&o, m->repo, m->nightly, m->page - 1);
        h_raw(&o, "\">&larr; newer</a>");
    }
    if (m->page < m->pages && m->page < HUD_PAGE_MAX) {
        h_raw(&o, "<a rel=\"next\" href=\"");
        h_repo_tab_link(&o, m->repo, m->nightly, m->page + 1);
        h_raw(&o, "\">older &rarr;</a>");
    }
    h_raw(&o, "</nav>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    answer_out(r, o.err);
}

/* `rest` is "org/repo" (HTML) or "org/repo/runs" or "org/repo" (API). */
static void repo_page(hud_req *r, const char *rest)
{
    repo_model m;
    memset(&m, 0, sizeof(m));
    size_t n = strlen(rest);
    if (r->api && n > 5 && strcmp(rest + n - 5, "/runs") == 0)
        n -= 5;
    if (!parse_repo(rest, n, m.repo, sizeof(m.repo))) {
        answer_error(r, 404, "Not found");
        return;
    }
    const char *tab = http_req_query(r->req, "tab");
    if (tab && *tab && strcmp(tab, "nightly") != 0 && strcmp(tab, "pr") != 0) {
        answer_error(r, 400, "tab: expected pr or nightly");
        return;
    }
    m.nightly = tab && strcmp(tab, "nightly") == 0;
    if (query_int(r->req, "page", 1, HUD_PAGE_MAX, 1, &m.page) != 0) {
        answer_error(r, 400, "page: expected an integer from 1 to 1000");
        return;
    }
    if (query_window(r->req, &m.window) != 0) {
        answer_error(r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        return;
    }
    int status = 0;
    crcr_err e = repo_model_build(r, &m, &status);
    if (e)
        answer_out(r, e);
    else if (status)
        answer_error(r, status, "Not found: this repo is not allowlisted and has no runs");
    else if (r->api)
        repo_json(r, &m);
    else
        repo_html(r, &m);
    repo_model_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* PR page (/crcr/pr/{n}, /api/v1/pr/{n}) */

typedef struct pr_model {
    int64_t pr;
    delivery_list dl;
    run_list runs;
    const char **shas;
    size_t n_shas, cap_shas;
} pr_model;

static int cmp_run_for_pr(const void *a, const void *b)
{
    const hrun *x = *(const hrun *const *)a, *y = *(const hrun *const *)b;
    int c = strcasecmp(x->repo ? x->repo : "", y->repo ? y->repo : "");
    if (c)
        return c;
    c = strcmp(x->workflow, y->workflow);
    if (c)
        return c;
    c = strcmp(x->job, y->job);
    if (c)
        return c;
    return (y->run_attempt > x->run_attempt) - (y->run_attempt < x->run_attempt);
}

/* NULL and "" are the same (unknown) sha. */
static bool same_sha(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static crcr_err pr_model_build(hud_req *r, pr_model *m)
{
    m->dl.a = &r->a;
    m->runs.a = &r->a;
    store_filter f = {.pr_number = m->pr, .limit = HUD_PR_MAX_DELIVERIES};
    crcr_err e = store_list_deliveries(r->app->st, &f, collect_delivery, &m->dl);
    if (!e && (m->dl.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (!e)
        e = load_jobs(r->app->st, &r->a, m->dl.v, m->dl.n);
    store_run_filter rf = {
        .pr_number = m->pr, .kind = 1, .limit = HUD_PR_MAX_RUNS, .no_payload = true};
    if (!e)
        e = store_list_runs(r->app->st, &rf, collect_hrun, &m->runs);
    if (!e && (m->runs.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (e)
        return e;
    /* Head shas, newest first: from the deliveries, then any only runs know. */
    for (size_t i = 0; i < m->dl.n + m->runs.n; i++) {
        const char *sha = i < m->dl.n ? m->dl.v[i].head_sha : m->runs.v[i - m->dl.n]->head_sha;
        bool seen = false;
        for (size_t k = 0; k < m->n_shas && !seen; k++)
            seen = same_sha(m->shas[k], sha);
        if (seen)
            continue;
        const char **slot = vec_push((void **)&m->shas, &m->n_shas, &m->cap_shas, sizeof(*m->shas));
        if (!slot)
            return CRCR_E_NOMEM;
        *slot = sha ? sha : "";
    }
    if (m->runs.n)
        qsort(m->runs.v, m->runs.n, sizeof(*m->runs.v), cmp_run_for_pr);
    return CRCR_OK;
}

static void pr_model_free(pr_model *m)
{
    free_deliveries(m->dl.v, m->dl.n);
    free(m->runs.v);
    free((void *)m->shas);
}

static void pr_json(hud_req *r, pr_model *m)
{
    jw w;
    jw_init(&w, &r->out);
    jw_obj(&w);
    jw_kint(&w, "pr_number", m->pr);
    jw_kstr(&w, "upstream_repo", r->app->cfg.upstream_repo);
    jw_key(&w, "shas");
    jw_arr(&w);
    for (size_t s = 0; s < m->n_shas; s++) {
        const char *sha = m->shas[s];
        jw_obj(&w);
        jw_kstr(&w, "head_sha", *sha ? sha : NULL);
        jw_key(&w, "deliveries");
        jw_arr(&w);
        for (size_t i = 0; i < m->dl.n; i++) {
            if (!same_sha(m->dl.v[i].head_sha, sha))
                continue;
            jw_obj(&w);
            jw_delivery_head(&w, &m->dl.v[i]);
            jw_key(&w, "dispatches");
            jw_arr(&w);
            for (size_t j = 0; j < m->dl.v[i].n_jobs; j++)
                if (strcmp(m->dl.v[i].jobs[j].kind, "dispatch") == 0)
                    jw_job(&w, &m->dl.v[i].jobs[j]);
            jw_arr_end(&w);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_key(&w, "runs");
        jw_arr(&w);
        for (size_t i = 0; i < m->runs.n; i++)
            if (same_sha(m->runs.v[i]->head_sha, sha))
                jw_run(&w, m->runs.v[i], true);
        jw_arr_end(&w);
        jw_key(&w, "check_runs");
        jw_arr(&w);
        for (size_t i = 0; i < m->dl.n; i++) {
            if (!same_sha(m->dl.v[i].head_sha, sha))
                continue;
            for (size_t j = 0; j < m->dl.v[i].n_jobs; j++)
                if (strcmp(m->dl.v[i].jobs[j].kind, "check_run") == 0)
                    jw_job(&w, &m->dl.v[i].jobs[j]);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    answer_out(r, w.err);
}

static void pr_html(hud_req *r, pr_model *m)
{
    hout o;
    hout_init(&o, &r->out);
    char title[48];
    snprintf(title, sizeof(title), "PR #%lld", (long long)m->pr);
    h_page_begin(&o, title, "repos");
    h_rawf(&o, "<h1>PR #%lld</h1><p class=\"muted\">", (long long)m->pr);
    h_upstream_pr_link(&o, r->app->cfg.upstream_repo, m->pr, "Open on GitHub");
    h_rawf(&o,
           " &middot; <a href=\"/api/v1/pr/%lld\">JSON</a> &middot; %zu head sha%s, %zu "
           "deliveries, %zu downstream runs</p>",
           (long long)m->pr, m->n_shas, m->n_shas == 1 ? "" : "s", m->dl.n, m->runs.n);
    if (!m->n_shas)
        h_raw(&o, "<p class=\"muted\">Nothing recorded for this PR.</p>");
    for (size_t s = 0; s < m->n_shas; s++) {
        const char *sha = m->shas[s];
        h_raw(&o, "<section class=\"sha\" data-sha=\"");
        h_text(&o, sha);
        h_raw(&o, "\"><h2>Head <code>");
        h_text(&o, *sha ? sha : "(unknown)");
        h_raw(&o, "</code></h2>");

        h_raw(&o, "<h3>Webhooks</h3><div class=\"scroll\"><table class=\"deliveries\"><thead>"
                  "<tr><th>Received</th><th>Delivery</th><th>Event</th><th>Dispatch</th></tr>"
                  "</thead><tbody>");
        size_t nd = 0;
        for (size_t i = 0; i < m->dl.n; i++) {
            const hdelivery *d = &m->dl.v[i];
            if (!same_sha(d->head_sha, sha))
                continue;
            nd++;
            h_raw(&o, "<tr><td>");
            h_ago(&o, d->received_at, r->now);
            h_raw(&o, "</td><td>");
            h_delivery_link(&o, d->delivery_id);
            h_raw(&o, "</td><td>");
            h_text(&o, d->event);
            if (d->action) {
                h_raw(&o, " / ");
                h_text(&o, d->action);
            }
            h_raw(&o, "</td><td>");
            h_dispatch_targets(&o, d, r->now);
            h_raw(&o, "</td></tr>");
        }
        if (!nd)
            h_raw(&o, "<tr><td colspan=\"4\" class=\"muted\">No stored webhook (past "
                      "retention).</td></tr>");
        h_raw(&o, "</tbody></table></div>");

        h_raw(&o, "<h3>Downstream results</h3><div class=\"scroll\"><table class=\"results\">"
                  "<thead><tr><th>Repo</th><th>Level</th><th>Workflow / job</th><th>Result</th>"
                  "<th class=\"num hide-sm\">Queue</th><th class=\"num\">Exec</th>"
                  "<th class=\"num hide-sm\">Tests p/f/s</th><th>Links</th></tr></thead><tbody>");
        size_t nr = 0;
        for (size_t i = 0; i < m->runs.n; i++) {
            const hrun *run = m->runs.v[i];
            if (!same_sha(run->head_sha, sha))
                continue;
            nr++;
            h_raw(&o, "<tr data-repo=\"");
            h_text(&o, run->repo);
            h_raw(&o, "\"><td class=\"repo\">");
            h_repo_link(&o, run->repo);
            h_rawf(&o, "</td><td>%s</td><td class=\"job\">",
                   crcr_level_name((crcr_level)run->level));
            h_job_label(&o, run);
            if (run->run_attempt > 1)
                h_rawf(&o, " <span class=\"muted\">attempt %lld</span>",
                       (long long)run->run_attempt);
            h_raw(&o, "</td><td>");
            h_chip(&o, run, 1);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_dur(&o, run->queue_ms);
            h_raw(&o, "</td><td class=\"num\">");
            h_dur(&o, run->exec_ms);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_tests(&o, run);
            h_raw(&o, "</td><td>");
            h_link(&o, run->details_url, "run", NULL);
            if (run->artifact_url) {
                /* linked when https, shown as text otherwise */
                h_raw(&o, " &middot; ");
                h_link(&o, run->artifact_url,
                       html_url_ok(run->artifact_url) ? "artifacts" : run->artifact_url,
                       "artifact");
            }
            h_raw(&o, "</td></tr>");
        }
        if (!nr)
            h_raw(&o, "<tr><td colspan=\"8\" class=\"muted\">No downstream run has reported yet."
                      "</td></tr>");
        h_raw(&o, "</tbody></table></div>");

        h_raw(&o, "<h3>Check runs on the PR</h3><div class=\"scroll\"><table class=\"checks\">"
                  "<thead><tr><th>Name</th><th>Status</th><th>Outbox</th>"
                  "<th class=\"num\">Attempts</th><th>Queued</th></tr></thead><tbody>");
        size_t nc = 0;
        for (size_t i = 0; i < m->dl.n; i++) {
            const hdelivery *d = &m->dl.v[i];
            if (!same_sha(d->head_sha, sha))
                continue;
            for (size_t j = 0; j < d->n_jobs; j++) {
                const hjob *jb = &d->jobs[j];
                if (strcmp(jb->kind, "check_run") != 0)
                    continue;
                nc++;
                h_raw(&o, "<tr><td class=\"mono\">");
                h_text(&o, jb->check_name ? jb->check_name : "(unreadable)");
                h_raw(&o, "</td><td>");
                h_text(&o, jb->check_status);
                if (jb->check_conclusion) {
                    h_raw(&o, " / ");
                    h_text(&o, jb->check_conclusion);
                }
                h_raw(&o, "</td><td>");
                h_state(&o, jb);
                if (jb->last_error) {
                    h_raw(&o, " <span class=\"err\">");
                    h_text(&o, jb->last_error);
                    h_raw(&o, "</span>");
                }
                h_rawf(&o, "</td><td class=\"num\">%d</td><td>", jb->attempts);
                h_ago(&o, jb->created_at, r->now);
                h_raw(&o, "</td></tr>");
            }
        }
        if (!nc)
            h_raw(&o, "<tr><td colspan=\"5\" class=\"muted\">No check runs (L3 without the "
                      "label, or L2 and below).</td></tr>");
        h_raw(&o, "</tbody></table></div></section>");
    }
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    answer_out(r, o.err);
}

/* GET /api/v1/pr/{n}/blocking?sha=SHA: L4 repos whose latest result per job for the sha failed
 * or is still running (upstream §2.5: cancelled and timed_out do not block). */
static void pr_blocking(hud_req *r, int64_t pr)
{
    const char *sha = http_req_query(r->req, "sha");
    if (!sha || !sha_ok(sha)) {
        answer_error(r, 400, "sha: required, 7 to 64 hex digits");
        return;
    }
    allowlist *al = allowlist_source_get(r->app->allow);
    if (!al) {
        answer_error(r, 503, "allowlist not loaded");
        return;
    }
    size_t total = allowlist_count(al);
    jw w;
    jw_init(&w, &r->out);
    jw_obj(&w);
    jw_kint(&w, "pr_number", pr);
    jw_kstr(&w, "head_sha", sha);
    jw_key(&w, "l4_repos");
    jw_arr(&w);
    for (size_t i = 0; i < total; i++)
        if (allowlist_at(al, i)->level == CRCR_LEVEL_L4)
            jw_str(&w, allowlist_at(al, i)->repo);
    jw_arr_end(&w);
    jw_key(&w, "blocking");
    jw_arr(&w);
    size_t blocking = 0;
    crcr_err e = CRCR_OK;
    for (size_t i = 0; i < total && !e; i++) {
        const char *repo = allowlist_at(al, i)->repo;
        if (allowlist_at(al, i)->level != CRCR_LEVEL_L4)
            continue;
        /* This PR's runs of the sha, newest first: the first of each (workflow, job) is the
         * latest result (as store_runs_for_sha picks it), the rest are older attempts. */
        run_list rl = {.a = &r->a};
        store_run_filter f = {.repo = repo,
                              .pr_number = pr,
                              .head_sha = sha,
                              .kind = 1,
                              .limit = HUD_PR_MAX_RUNS,
                              .no_payload = true};
        e = store_list_runs(r->app->st, &f, collect_hrun, &rl);
        if (!e && (rl.oom || r->a.oom))
            e = CRCR_E_NOMEM;
        bool open = false;
        for (size_t k = 0; k < rl.n && !e; k++) {
            const hrun *run = rl.v[k];
            bool older = false;
            for (size_t p = 0; p < k && !older; p++)
                older = strcmp(rl.v[p]->workflow, run->workflow) == 0 &&
                        strcmp(rl.v[p]->job, run->job) == 0;
            if (older)
                continue;
            bool running = !run->state || strcmp(run->state, "completed") != 0;
            bool failed = run->conclusion && strcmp(run->conclusion, "failure") == 0;
            if (!running && !failed)
                continue;
            if (!open) {
                jw_obj(&w);
                jw_kstr(&w, "repo", repo);
                jw_key(&w, "jobs");
                jw_arr(&w);
                open = true;
                blocking++;
            }
            jw_obj(&w);
            jw_kstr(&w, "workflow", run->workflow);
            jw_kstr(&w, "job", run->job);
            jw_kstr(&w, "state", run->state);
            jw_kstr(&w, "conclusion", run->conclusion);
            jw_kstr(&w, "reason", running ? "still running" : "failed");
            jw_kstr(&w, "details_url", run->details_url);
            jw_obj_end(&w);
        }
        if (open) {
            jw_arr_end(&w);
            jw_obj_end(&w);
        }
        free(rl.v);
    }
    jw_arr_end(&w);
    jw_kbool(&w, "blocked", blocking > 0);
    jw_obj_end(&w);
    allowlist_free(al);
    answer_out(r, e ? e : w.err);
}

static void pr_page(hud_req *r, const char *rest)
{
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    int64_t pr = 0;
    if (!parse_pr(rest, n, &pr)) {
        answer_error(r, 404, "Not found");
        return;
    }
    if (slash) {
        if (r->api && strcmp(slash, "/blocking") == 0)
            pr_blocking(r, pr);
        else
            answer_error(r, 404, "Not found");
        return;
    }
    pr_model m;
    memset(&m, 0, sizeof(m));
    m.pr = pr;
    crcr_err e = pr_model_build(r, &m);
    if (e)
        answer_out(r, e);
    else if (r->api)
        pr_json(r, &m);
    else
        pr_html(r, &m);
    pr_model_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* Deliveries (/crcr/deliveries[/{id}], /api/v1/deliveries[/{id}]) */

static const char *const OUTBOX_STATES[] = {"queued", "running", "sent", "dry_run", "dead"};

static void deliveries_list(hud_req *r)
{
    const char *state = http_req_query(r->req, "state");
    const char *repo_q = http_req_query(r->req, "repo");
    char repo[CRCR_REPO_NAME_MAX] = "";
    if (state && !*state)
        state = NULL;
    if (state) {
        bool ok = false;
        for (size_t i = 0; i < sizeof(OUTBOX_STATES) / sizeof(*OUTBOX_STATES); i++)
            ok = ok || strcmp(state, OUTBOX_STATES[i]) == 0;
        if (!ok) {
            answer_error(r, 400, "state: expected queued, running, sent, dry_run or dead");
            return;
        }
    }
    if (repo_q && *repo_q && !parse_repo(repo_q, strlen(repo_q), repo, sizeof(repo))) {
        answer_error(r, 400, "repo: expected owner/repo");
        return;
    }
    long limit;
    if (query_int(r->req, "limit", 1, HUD_DELIVERIES_MAX, HUD_DELIVERIES_DEFAULT, &limit) != 0) {
        answer_error(r, 400, "limit: expected an integer from 1 to 200");
        return;
    }
    delivery_list dl = {.a = &r->a};
    store_filter f = {.state = state, .repo = repo[0] ? repo : NULL, .limit = (int)limit};
    crcr_err e = store_list_deliveries(r->app->st, &f, collect_delivery, &dl);
    if (!e && (dl.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (!e)
        e = load_jobs(r->app->st, &r->a, dl.v, dl.n);
    if (e) {
        free_deliveries(dl.v, dl.n);
        answer_out(r, e);
        return;
    }
    if (r->api) {
        jw w;
        jw_init(&w, &r->out);
        jw_obj(&w);
        jw_kstr(&w, "state", state);
        jw_kstr(&w, "repo", repo[0] ? repo : NULL);
        jw_kint(&w, "limit", limit);
        jw_key(&w, "deliveries");
        jw_arr(&w);
        for (size_t i = 0; i < dl.n; i++)
            jw_delivery(&w, &dl.v[i]);
        jw_arr_end(&w);
        jw_obj_end(&w);
        free_deliveries(dl.v, dl.n);
        answer_out(r, w.err);
        return;
    }
    hout o;
    hout_init(&o, &r->out);
    h_page_begin(&o, "Deliveries", "deliveries");
    h_raw(&o, "<h1>Deliveries</h1><p class=\"muted\">Webhooks received from upstream, newest "
              "first, with each downstream target's dispatch state. "
              "<a href=\"/api/v1/deliveries\">JSON</a></p>");
    h_raw(&o, "<form class=\"filters\" method=\"get\" action=\"/crcr/deliveries\"><label>State"
              "<select name=\"state\"><option value=\"\">any</option>");
    for (size_t i = 0; i < sizeof(OUTBOX_STATES) / sizeof(*OUTBOX_STATES); i++)
        h_rawf(&o, "<option value=\"%s\"%s>%s</option>", OUTBOX_STATES[i],
               state && strcmp(state, OUTBOX_STATES[i]) == 0 ? " selected" : "", OUTBOX_STATES[i]);
    h_raw(&o, "</select></label><label>Repo<input name=\"repo\" placeholder=\"owner/repo\" "
              "value=\"");
    h_text(&o, repo);
    h_rawf(&o,
           "\"></label><label>Limit<input name=\"limit\" type=\"number\" min=\"1\" "
           "max=\"%d\" value=\"%ld\"></label><button type=\"submit\">Filter</button></form>",
           HUD_DELIVERIES_MAX, limit);
    h_raw(&o, "<div class=\"scroll\"><table class=\"deliveries\"><thead><tr><th>Received</th>"
              "<th>Delivery</th><th>Event</th><th>PR / ref</th><th>Targets</th></tr></thead>"
              "<tbody>");
    for (size_t i = 0; i < dl.n; i++) {
        const hdelivery *d = &dl.v[i];
        h_raw(&o, "<tr data-delivery=\"");
        h_text(&o, d->delivery_id);
        h_raw(&o, "\"><td>");
        h_ago(&o, d->received_at, r->now);
        h_raw(&o, "</td><td>");
        h_delivery_link(&o, d->delivery_id);
        h_raw(&o, "</td><td>");
        h_text(&o, d->event);
        if (d->action) {
            h_raw(&o, " / ");
            h_text(&o, d->action);
        }
        h_raw(&o, "</td><td>");
        if (d->pr_number > 0)
            h_rawf(&o, "<a href=\"/crcr/pr/%lld\">#%lld</a>", (long long)d->pr_number,
                   (long long)d->pr_number);
        else
            h_text(&o, d->ref);
        h_raw(&o, " <span class=\"mono muted\">");
        h_textn(&o, d->head_sha ? d->head_sha : "", 7);
        h_raw(&o, "</span></td><td>");
        h_dispatch_targets(&o, d, r->now);
        h_raw(&o, "</td></tr>");
    }
    if (!dl.n)
        h_raw(&o, "<tr><td colspan=\"5\" class=\"muted\">No deliveries match.</td></tr>");
    h_raw(&o, "</tbody></table></div>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    free_deliveries(dl.v, dl.n);
    answer_out(r, o.err);
}

static void delivery_page(hud_req *r, const char *id)
{
    if (!delivery_id_ok(id)) {
        answer_error(r, 404, "Not found");
        return;
    }
    hdelivery d;
    memset(&d, 0, sizeof(d));
    job_ctx c = {&d, &r->a, false};
    crcr_err e = store_get_delivery(r->app->st, id, copy_detail_delivery, collect_job, &c);
    if (e == CRCR_E_NOT_FOUND) {
        answer_error(r, 404, "Not found: unknown delivery (or past retention)");
        return;
    }
    if (!e && (c.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (e) {
        free(d.jobs);
        answer_out(r, e);
        return;
    }
    if (r->api) {
        jw w;
        jw_init(&w, &r->out);
        jw_delivery(&w, &d);
        free(d.jobs);
        answer_out(r, w.err);
        return;
    }
    hout o;
    hout_init(&o, &r->out);
    h_page_begin(&o, "Delivery", "deliveries");
    h_raw(&o, "<h1>Delivery <code>");
    h_text(&o, d.delivery_id);
    h_raw(&o, "</code></h1><div class=\"cards\">");
    h_card(&o, "d-event", "Event");
    h_raw(&o, "<div class=\"v\">");
    h_text(&o, d.event);
    h_raw(&o, "</div><div class=\"s\">");
    h_text(&o, d.action ? d.action : "-");
    h_raw(&o, "</div></div>");
    h_card(&o, "d-pr", d.pr_number > 0 ? "Pull request" : "Ref");
    h_raw(&o, "<div class=\"v\">");
    if (d.pr_number > 0)
        h_rawf(&o, "<a href=\"/crcr/pr/%lld\">#%lld</a>", (long long)d.pr_number,
               (long long)d.pr_number);
    else
        h_text(&o, d.ref ? d.ref : "-");
    h_raw(&o, "</div><div class=\"s mono\">");
    h_text(&o, d.head_sha);
    h_raw(&o, "</div></div>");
    h_card(&o, "d-received", "Received");
    h_raw(&o, "<div class=\"v\">");
    h_ago(&o, d.received_at, r->now);
    h_raw(&o, "</div><div class=\"s\">");
    char t[48];
    html_time(d.received_at, t, sizeof(t));
    h_text(&o, t);
    h_raw(&o, "</div></div>");
    h_card(&o, "d-payload", "Payload");
    h_rawf(&o, "<div class=\"v\">%zu bytes</div><div class=\"s\">from ", d.payload_bytes);
    h_text(&o, d.upstream_repo);
    h_raw(&o, "; not shown here</div></div></div>");

    h_raw(&o, "<h2>Outbox</h2><div class=\"scroll\"><table class=\"outbox\"><thead><tr>"
              "<th>#</th><th>Kind</th><th>Target</th><th>State</th><th class=\"num\">Attempts</th>"
              "<th class=\"num\">HTTP</th><th>When</th><th>Reason / note</th></tr></thead><tbody>");
    for (size_t i = 0; i < d.n_jobs; i++) {
        const hjob *j = &d.jobs[i];
        h_rawf(&o, "<tr data-kind=\"");
        h_text(&o, j->kind);
        h_raw(&o, "\" data-target=\"");
        h_text(&o, j->target);
        h_rawf(&o, "\"><td>%lld</td><td>", (long long)j->id);
        h_text(&o, j->kind);
        h_raw(&o, "</td><td>");
        if (j->check_name) {
            h_raw(&o, "<span class=\"mono\">");
            h_text(&o, j->check_name);
            h_raw(&o, "</span>");
        } else {
            h_text(&o, j->target);
        }
        h_raw(&o, "</td><td>");
        h_state(&o, j);
        h_rawf(&o, "</td><td class=\"num\">%d</td><td class=\"num\">", j->attempts);
        if (j->last_status)
            h_rawf(&o, "%ld", j->last_status);
        else
            h_raw(&o, "-");
        h_raw(&o, "</td><td class=\"nowrap\">");
        if (j->state && strcmp(j->state, "queued") == 0) {
            h_raw(&o, "next ");
            h_ago(&o, j->next_attempt_at, r->now);
        } else if (j->done_at) {
            h_raw(&o, "done ");
            h_ago(&o, j->done_at, r->now);
        } else {
            h_raw(&o, "queued ");
            h_ago(&o, j->created_at, r->now);
        }
        h_raw(&o, "</td><td>");
        if (j->last_error) {
            h_raw(&o, "<span class=\"err\">");
            h_text(&o, j->last_error);
            h_raw(&o, "</span> ");
        }
        if (j->note) {
            h_raw(&o, strcmp(j->kind, "dispatch") == 0 ? "<span class=\"note-trim\">trimmed: "
                                                       : "<span>");
            h_text(&o, j->note);
            h_raw(&o, "</span>");
        }
        if (j->check_status) {
            h_raw(&o, "<span class=\"check-status\">");
            h_text(&o, j->check_status);
            if (j->check_conclusion) {
                h_raw(&o, " / ");
                h_text(&o, j->check_conclusion);
            }
            h_raw(&o, "</span>");
        }
        h_raw(&o, "</td></tr>");
    }
    if (!d.n_jobs)
        h_raw(&o, "<tr><td colspan=\"8\" class=\"muted\">No outbound effects.</td></tr>");
    h_raw(&o, "</tbody></table></div>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    free(d.jobs);
    answer_out(r, o.err);
}

/* ------------------------------------------------------------------------------------------ */
/* Routing */

static void hud_begin(hud_req *r, void *ctx, const http_request *req, http_response *resp, bool api)
{
    memset(r, 0, sizeof(*r));
    r->app = ctx;
    r->req = req;
    r->resp = resp;
    r->api = api;
    r->t0 = clock_mono_ms();
    r->now = clock_now_ms();
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
        overview(&r);
    else if (names_listed_repo(&r, rest))
        repo_page(&r, rest);
    else if (strcmp(rest, "deliveries") == 0)
        deliveries_list(&r);
    else if (strncmp(rest, "deliveries/", 11) == 0)
        delivery_page(&r, rest + 11);
    else if (strncmp(rest, "pr/", 3) == 0)
        pr_page(&r, rest + 3);
    else if (strncmp(rest, "static/", 7) == 0)
        answer_error(&r, 404, "Not found");
    else
        repo_page(&r, rest);
    hud_end(&r);
}

/* GET /api/v1/... */
static void api_handle(void *ctx, const http_request *req, http_response *resp)
{
    hud_req r;
    hud_begin(&r, ctx, req, resp, true);
    const char *path = req->path;
    if (strcmp(path, "/api/v1/repos") == 0) {
        overview(&r);
    } else if (strncmp(path, "/api/v1/repos/", 14) == 0) {
        repo_page(&r, path + 14);
    } else if (strncmp(path, "/api/v1/pr/", 11) == 0) {
        pr_page(&r, path + 11);
    } else if (strcmp(path, "/api/v1/deliveries") == 0) {
        deliveries_list(&r);
    } else if (strncmp(path, "/api/v1/deliveries/", 19) == 0) {
        delivery_page(&r, path + 19);
    } else if (strcmp(path, "/api/v1/health") == 0) {
        int64_t window;
        health_report rep;
        if (query_window(req, &window) != 0) {
            answer_error(&r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        } else {
            crcr_err e = build_report(&r, NULL, window, &rep);
            if (!e) {
                e = health_report_json(&rep, &r.out);
                health_report_free(&rep);
            }
            answer_out(&r, e);
        }
    } else {
        answer_error(&r, 404, "Not found");
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
