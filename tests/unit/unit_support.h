/*
 * unit_support.h - helpers several unit test files share: a temporary directory removed with its
 * contents, files, a `crcr` command run with its output captured, a configuration loaded from a
 * small key/value array, a SQLite store in the directory, stored deliveries and run transitions, a
 * libcurl client for servers on loopback, and a minimal relay (crcr_app) serving one front door's
 * routes. Header-only (every test file is a
 * binary of its own), so everything is static inline. Include it after <cmocka.h>.
 */
#ifndef CRCR_UNIT_SUPPORT_H
#define CRCR_UNIT_SUPPORT_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>

#include "allowlist_source.h"
#include "app.h"
#include "buf.h"
#include "clock.h"
#include "config.h"
#include "http_server.h"
#include "store.h"

/* ---- problem lists ---- */

/* Checks that every line is "LINE:COL: message" with positive numbers (the YAML
 * readers' problem lists). */
static inline void ut_assert_error_lines(const char *errors)
{
    assert_true(*errors != '\0');
    const char *s = errors;
    while (*s) {
        char *end;
        long line = strtol(s, &end, 10);
        assert_true(end != s && line >= 1 && *end == ':');
        s = end + 1;
        long col = strtol(s, &end, 10);
        assert_true(end != s && col >= 1 && end[0] == ':' && end[1] == ' ' && end[2] != '\n');
        const char *nl = strchr(end, '\n');
        assert_non_null(nl); /* every line ends with '\n' */
        s = nl + 1;
    }
}

/* ---- files ---- */

typedef struct ut_dir {
    char path[64];
} ut_dir;

static inline void ut_dir_make(ut_dir *d)
{
    snprintf(d->path, sizeof(d->path), "/tmp/crcr-unit-XXXXXX");
    if (!mkdtemp(d->path))
        fail_msg("mkdtemp failed");
}

/* Removes the directory and the files in it (test directories are flat). */
static inline void ut_dir_remove(ut_dir *d)
{
    DIR *dir = d->path[0] ? opendir(d->path) : NULL;
    struct dirent *e;
    while (dir && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", d->path, e->d_name);
        unlink(p);
    }
    if (dir) {
        closedir(dir);
        rmdir(d->path);
    }
    d->path[0] = '\0';
}

/* dir/name into out. */
static inline const char *ut_path(const ut_dir *d, const char *name, char *out, size_t outsz)
{
    snprintf(out, outsz, "%s/%s", d->path, name);
    return out;
}

static inline void ut_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/* ---- commands ---- */

/* What a command printed and returned. */
typedef struct ut_cmd {
    int rc;
    char out[16384], err[8192]; /* cut to fit */
} ut_cmd;

typedef int (*ut_main_fn)(int argc, char **argv);

static inline void ut_slurp(const char *path, char *out, size_t outsz)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(out, 1, outsz - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* Runs `fn` over argv (NULL-terminated) with stdout and stderr sent to the files "stdout" and
 * "stderr" of `d`, and standard input read from `stdin_path` when it is not NULL. */
static inline void ut_run(const ut_dir *d, ut_main_fn fn, char **argv, const char *stdin_path,
                          ut_cmd *c)
{
    memset(c, 0, sizeof(*c));
    int argc = 0;
    while (argv[argc])
        argc++;
    char out_path[128], err_path[128];
    ut_path(d, "stdout", out_path, sizeof(out_path));
    ut_path(d, "stderr", err_path, sizeof(err_path));
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2), saved_in = dup(0);
    int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fi = stdin_path ? open(stdin_path, O_RDONLY) : -1;
    assert_true(saved_out >= 0 && saved_err >= 0 && saved_in >= 0 && fo >= 0 && fe >= 0);
    assert_true(!stdin_path || fi >= 0);
    dup2(fo, 1);
    dup2(fe, 2);
    if (fi >= 0)
        dup2(fi, 0);
    clearerr(stdin);
    c->rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    dup2(saved_in, 0);
    clearerr(stdin);
    close(saved_out);
    close(saved_err);
    close(saved_in);
    close(fo);
    close(fe);
    if (fi >= 0)
        close(fi);
    ut_slurp(out_path, c->out, sizeof(c->out));
    ut_slurp(err_path, c->err, sizeof(c->err));
}

/* ---- configuration ---- */

/* A config_getter over a NULL-terminated {key, value, key, value, ..., NULL} array. */
static inline const char *ut_env_get(void *ctx, const char *key)
{
    const char *const *kv = ctx;
    for (size_t i = 0; kv && kv[i]; i += 2)
        if (strcmp(kv[i], key) == 0)
            return kv[i + 1];
    return NULL;
}

/* Loads a configuration from `env` alone (no file, no process environment); asserts success. */
static inline void ut_config(crcr_config *cfg, const char *const *env)
{
    char err[512] = "";
    if (config_load(cfg, NULL, ut_env_get, (void *)env, err, sizeof(err)) != CRCR_OK)
        fail_msg("config_load: %s", err);
}

/* ---- the store ---- */

/* A SQLite store in `dir` (created at the first open, reopened after). */
static inline store *ut_store_open(const ut_dir *d)
{
    char uri[128];
    snprintf(uri, sizeof(uri), "sqlite:%s/crcr.db", d->path);
    store *st = NULL;
    char err[512] = "";
    if (store_open(uri, &st, err, sizeof(err)) != CRCR_OK)
        fail_msg("store_open(%s): %s", uri, err);
    return st;
}

/* A cmocka fixture of a temporary directory with a SQLite store in it. */
typedef struct ut_store_fx {
    ut_dir dir;
    store *st;
} ut_store_fx;

static inline int ut_store_setup(void **state)
{
    ut_store_fx *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    ut_dir_make(&fx->dir);
    fx->st = ut_store_open(&fx->dir);
    *state = fx;
    return 0;
}

static inline int ut_store_teardown(void **state)
{
    ut_store_fx *fx = *state;
    store_close(fx->st);
    ut_dir_remove(&fx->dir);
    free(fx);
    return 0;
}

/* Writes `dir`/crcr.env naming the SQLite store `dir`/crcr.db: a --config file for the commands
 * (the environment would override it, so CRCR_STORE is unset). */
static inline void ut_write_store_config(ut_dir *dir)
{
    char path[128], text[256];
    snprintf(text, sizeof(text), "CRCR_STORE=sqlite:%s/crcr.db\n", dir->path);
    ut_write_file(ut_path(dir, "crcr.env", path, sizeof(path)), text);
    unsetenv("CRCR_STORE");
}

/* Stores a pull_request delivery with one dispatch row per target (NULL-terminated). */
static inline void ut_ingest(store *st, const char *id, int64_t pr, const char *sha,
                             const char *payload, const char *const *targets, int64_t at)
{
    store_new_job jobs[16];
    size_t n = 0;
    for (; targets && targets[n] && n < 16; n++)
        jobs[n] = (store_new_job){.kind = "dispatch", .target = targets[n], .due_at = at};
    store_delivery d = {.delivery_id = id,
                        .event = "pull_request",
                        .action = "synchronize",
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = pr,
                        .head_sha = sha,
                        .ref = "refs/heads/feature",
                        .received_at = at,
                        .payload = payload ? payload : "{}",
                        .payload_len = strlen(payload ? payload : "{}"),
                        .status = "queued"};
    assert_int_equal(store_ingest(st, &d, jobs, n), CRCR_OK);
}

/* The text of run id `n` (run ids are text in the store): a slot of a ring of 256, so that the
 * updates of one test can hold on to theirs. */
static inline const char *ut_run_id(int64_t n)
{
    static char ring[256][24];
    static unsigned next;
    char *s = ring[next++ % 256];
    snprintf(s, sizeof(ring[0]), "%lld", (long long)n);
    return s;
}

/* A transition of run `run_id` (attempt 1, workflow "CI") of `repo` on delivery `id`. */
static inline store_run_update ut_run_update(const char *id, const char *repo, int64_t run_id,
                                             const char *job, const char *status,
                                             const char *conclusion, int level, int64_t pr,
                                             const char *sha, int64_t now)
{
    return (store_run_update){.key = {.delivery_id = id,
                                      .repo = repo,
                                      .run_id = ut_run_id(run_id),
                                      .run_attempt = 1,
                                      .workflow_name = "CI",
                                      .job_name = job},
                              .status = status,
                              .conclusion = conclusion,
                              .event_type = "pull_request",
                              .level = level,
                              .pr_number = pr,
                              .head_sha = sha,
                              .workflow_name = "CI",
                              .details_url = "https://github.com/x/y/actions/runs/1",
                              .test_passed = -1,
                              .test_failed = -1,
                              .test_skipped = -1,
                              .payload = "{}",
                              .payload_len = 2,
                              .now = now};
}

/* Applies `u` without side effects; asserts it was applied. */
static inline void ut_apply(store *st, const store_run_update *u)
{
    store_run_result res;
    char why[128] = "";
    crcr_err e = store_run_apply(st, u, NULL, NULL, &res, why, sizeof(why));
    if (e != CRCR_OK)
        fail_msg("store_run_apply: %s (%s)", crcr_strerror(e), why);
    assert_false(res.duplicate);
}

/* Checks `repo`'s identity pin against the ids (pinning them at the first call); the outcome. */
static inline store_pin_outcome ut_pin(store *st, const char *repo, const char *repository_id,
                                       const char *owner_id, int64_t now)
{
    store_pin_outcome o = STORE_PIN_NONE;
    assert_int_equal(store_identity_pin(st, repo, repository_id, owner_id, now, &o, NULL, NULL),
                     CRCR_OK);
    return o;
}

/* Outbox rows of a delivery as read back (store_get_delivery's job callback: ut_collect_row). */
#define UT_ROWS_MAX 16
typedef struct ut_rows {
    char kind[UT_ROWS_MAX][32], target[UT_ROWS_MAX][160], state[UT_ROWS_MAX][16];
    char body[UT_ROWS_MAX][4096];
    size_t n;
} ut_rows;

static inline void ut_collect_row(void *ctx, const store_job_row *r)
{
    ut_rows *l = ctx;
    if (l->n >= UT_ROWS_MAX)
        return;
    snprintf(l->kind[l->n], sizeof(l->kind[0]), "%s", r->kind);
    snprintf(l->target[l->n], sizeof(l->target[0]), "%s", r->target);
    snprintf(l->state[l->n], sizeof(l->state[0]), "%s", r->state);
    snprintf(l->body[l->n], sizeof(l->body[0]), "%.*s", (int)r->body_len, r->body ? r->body : "");
    l->n++;
}

/* The outbox rows of `delivery_id` in id order (asserts that the delivery exists). */
static inline void ut_rows_of(store *st, const char *delivery_id, ut_rows *out)
{
    memset(out, 0, sizeof(*out));
    assert_int_equal(store_get_delivery(st, delivery_id, NULL, ut_collect_row, out), CRCR_OK);
}

/* ---- HTTP client ---- */

typedef struct ut_resp {
    long status;
    buf_t body;
    buf_t headers; /* the raw header block */
} ut_resp;

static inline size_t ut_curl_sink(char *p, size_t size, size_t n, void *ctx)
{
    return buf_append(ctx, p, size * n) == CRCR_OK ? size * n : 0;
}

/* Sends one request to http://127.0.0.1:port/path. `headers` NULL-terminated (may be NULL);
 * `body` NULL for none. The answer goes to `out` (release with ut_resp_free). Returns the
 * curl result (CURLE_OK when an answer came). Never asserts: usable from worker threads (call
 * curl_global_init first). */
static inline CURLcode ut_http(ut_resp *out, int port, const char *method, const char *path,
                               const char *const *headers, const char *body, size_t body_len)
{
    memset(out, 0, sizeof(*out));
    buf_init(&out->body, 64u * 1024u * 1024u);
    buf_init(&out->headers, 1024u * 1024u);
    char url[4096];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    if (!c)
        return CURLE_FAILED_INIT;
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; headers && headers[i]; i++)
        h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, ut_curl_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out->body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, ut_curl_sink);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &out->headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 60000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

/* GET with optional headers; asserts an answer came. */
static inline void ut_get(ut_resp *out, int port, const char *path, const char *const *headers)
{
    CURLcode rc = ut_http(out, port, "GET", path, headers, NULL, 0);
    if (rc != CURLE_OK)
        fail_msg("GET %s: %s", path, curl_easy_strerror(rc));
}

/* The value of response header `name` (case-insensitive) into out; false when absent. */
static inline bool ut_resp_header(const ut_resp *r, const char *name, char *out, size_t outsz)
{
    const char *p = buf_cstr(&r->headers);
    size_t nl = strlen(name);
    while (p && *p) {
        const char *eol = strstr(p, "\r\n");
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, outsz, "%.*s", (int)(len - (size_t)(v - p)), v);
            return true;
        }
        p = eol ? eol + 2 : NULL;
    }
    return false;
}

static inline const char *ut_body(const ut_resp *r)
{
    return buf_cstr(&r->body);
}

static inline void ut_resp_free(ut_resp *r)
{
    buf_free(&r->body);
    buf_free(&r->headers);
}

/* Sends a request (no body) and asserts its status and, when `body` is not NULL, its body. */
static inline void ut_expect(int port, const char *method, const char *path,
                             const char *const *headers, long status, const char *body)
{
    ut_resp r;
    CURLcode rc = ut_http(&r, port, method, path, headers, NULL, 0);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    if (r.status != status || (body && strcmp(ut_body(&r), body) != 0))
        fail_msg("%s %s: %ld %.300s, want %ld %s", method, path, r.status, ut_body(&r), status,
                 body ? body : "");
    ut_resp_free(&r);
}

/* ---- a minimal relay: configuration, SQLite store, file allowlist, one front door's routes ----
 */

#define UT_APP_ROUTES 32

typedef struct ut_app {
    ut_dir dir;
    crcr_app app;
    http_route routes[UT_APP_ROUTES];
    size_t n_routes;
} ut_app;

typedef size_t (*ut_routes_fn)(struct crcr_app *app, http_route *out, size_t max);

/* Builds the app in a new temporary directory: `allowlist_yaml` written to ALLOWLIST_FILE, the
 * configuration from `env` (NULL-terminated key/value pairs, at most 24) plus ALLOWLIST_FILE, a
 * SQLite store, the allowlist loaded, no GitHub client, no outbox, and an HTTP server on
 * 127.0.0.1 (port 0) serving what `routes` gives. Returns the port. */
static inline int ut_app_start(ut_app *a, const char *allowlist_yaml, const char *const *env,
                               ut_routes_fn routes)
{
    memset(a, 0, sizeof(*a));
    ut_dir_make(&a->dir);
    char path[128];
    ut_path(&a->dir, "allowlist.yml", path, sizeof(path));
    ut_write_file(path, allowlist_yaml);
    const char *kv[52] = {"ALLOWLIST_FILE", path};
    size_t n = 2;
    for (size_t i = 0; env && env[i] && n + 2 < sizeof(kv) / sizeof(kv[0]); i += 2) {
        kv[n++] = env[i];
        kv[n++] = env[i + 1];
    }
    kv[n] = NULL;
    ut_config(&a->app.cfg, kv);
    a->app.st = ut_store_open(&a->dir);
    char err[512] = "";
    a->app.allow = allowlist_source_new(&a->app.cfg, NULL, err, sizeof(err));
    if (!a->app.allow)
        fail_msg("allowlist_source_new: %s", err);
    if (allowlist_source_load(a->app.allow, err, sizeof(err)) != CRCR_OK)
        fail_msg("allowlist_source_load: %s", err);
    a->app.started_at = clock_now_ms();
    a->n_routes = routes(&a->app, a->routes, UT_APP_ROUTES);
    http_server_opts opts = {.host = "127.0.0.1", .port = 0, .threads = 2};
    a->app.http = http_server_start(&opts, a->routes, a->n_routes, err, sizeof(err));
    if (!a->app.http)
        fail_msg("http_server_start: %s", err);
    return http_server_port(a->app.http);
}

static inline void ut_app_stop(ut_app *a)
{
    http_server_stop(a->app.http, 5000);
    allowlist_source_free(a->app.allow);
    store_close(a->app.st);
    config_free(&a->app.cfg);
    ut_dir_remove(&a->dir);
}

/* For cmocka fixtures whose state is a calloc'ed ut_app: its port, and its teardown. */
static inline int ut_app_port(void **state)
{
    return http_server_port(((ut_app *)*state)->app.http);
}

static inline int ut_app_teardown(void **state)
{
    ut_app_stop(*state);
    free(*state);
    return 0;
}

#endif
