/*
 * test_github.c - the GitHub client (github.c) against a fake GitHub API served by the unit tests'
 * HTTP server (support/ut_httpd.h) on 127.0.0.1 inside this process, on the relay's clock. The fake
 * verifies the App JWT (signature and claims) with the test key, checks installation tokens on
 * dispatches, records the headers it sees and counts every request, so the tests can assert exactly
 * how many calls each operation costs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <sys/socket.h>

#include "buf.h"
#include "clock.h"
#include "config.h"
#include "github.h"
#include "json.h"
#include "jwt.h"
#include "crcr_limits.h"
#include "ut_httpd.h"

#ifndef CRCR_VERSION
#define CRCR_VERSION "dev"
#endif

#define APP_ID "4242"
#define APP_ID_NUM 4242

static EVP_PKEY *g_key; /* the App key: the client signs with it, the fake verifies with it */
static char *g_pem;

/* ---------------------------------------------------------------- the fake GitHub */

typedef struct fake {
    ut_httpd *srv;
    pthread_mutex_t mu;
    /* behaviour (set by tests under mu) */
    long install_status;   /* answer to GET /repos/{o}/{r}/installation */
    int64_t install_id;    /* the installation id it reports and accepts */
    long mint_status;      /* answer to POST .../access_tokens (201 normally) */
    long token_ttl_s;      /* expires_at = now + token_ttl_s */
    bool expires_garbage;  /* send an unparsable expires_at */
    size_t token_len;      /* length of minted tokens */
    unsigned revoked_upto; /* tokens minted as number <= this are refused with 401 */
    bool always_401;       /* dispatches always answer 401 */
    long dispatch_status;  /* answer to a dispatch with a valid token (0: 204) */
    /* observations */
    unsigned n_install, n_mint, n_dispatch, n_other;
    unsigned bad_jwt, bad_token, bad_headers;
    char last_install_path[256];
    char last_ua[128];
    char last_ctype[128];
    char mint_ctype[128];
    bool last_had_auth;
    char last_body[1024];
    char hook_queries[4][128]; /* per_page and cursor of the delivery log pages asked for */
    unsigned n_hook_pages;
} fake;

/* The token minted as number `k`: "ghs_tok000001AAAA..." of `len` characters. */
static void make_token(unsigned k, size_t len, char *out, size_t outsz)
{
    int n = snprintf(out, outsz, "ghs_tok%06u", k);
    size_t i = (size_t)n;
    for (; i < len && i + 1 < outsz; i++)
        out[i] = 'A';
    out[i] = '\0';
}

static void copy_hdr(const ut_httpd_req *rq, const char *name, char *dst, size_t dstsz)
{
    const char *v = ut_httpd_header(rq, name);
    snprintf(dst, dstsz, "%s", v ? v : "");
}

/* True when `auth` is "Bearer <App JWT>" signed by g_key with GitHub's claims. */
static bool app_jwt_ok(const char *auth)
{
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return false;
    const char *t = auth + 7;
    jwt_parts p;
    jwt_parts_init(&p);
    bool ok = jwt_decode(t, strlen(t), &p) == CRCR_OK && jwt_verify_rs256(&p, g_key) == CRCR_OK;
    int64_t iat = 0, exp = 0, iss = 0, now = clock_now_ms() / 1000;
    ok = ok && jv_int(jv_get(p.payload, "iat"), &iat) && jv_int(jv_get(p.payload, "exp"), &exp) &&
         jv_int(jv_get(p.payload, "iss"), &iss);
    ok = ok && iss == APP_ID_NUM && iat <= now - 59 && iat >= now - 70 && exp == iat + 600;
    jwt_parts_free(&p);
    return ok;
}

static const uint64_t over_cap = CRCR_GH_RESPONSE_MAX + 1u;
static const uint64_t at_cap = CRCR_GH_RESPONSE_MAX;

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void handler(void *cls, const ut_httpd_req *rq, ut_httpd_resp *resp)
{
    fake *f = cls;
    const char *url = rq->path, *method = rq->method;
    const char *auth = ut_httpd_header(rq, "Authorization");
    const char *accept = ut_httpd_header(rq, "Accept");
    const char *ver = ut_httpd_header(rq, "X-GitHub-Api-Version");
    const char *ua = ut_httpd_header(rq, "User-Agent");

    pthread_mutex_lock(&f->mu);
    if (!accept || strcmp(accept, "application/vnd.github+json") != 0 || !ver ||
        strcmp(ver, "2022-11-28") != 0 || !ua || strcmp(ua, "crcr/" CRCR_VERSION) != 0)
        f->bad_headers++;
    copy_hdr(rq, "User-Agent", f->last_ua, sizeof(f->last_ua));
    copy_hdr(rq, "Content-Type", f->last_ctype, sizeof(f->last_ctype));
    f->last_had_auth = auth != NULL;
    snprintf(f->last_body, sizeof(f->last_body), "%s", rq->body);

    char body[4096];
    unsigned status = 404;
    const char *const *hdrs = NULL;
    snprintf(body, sizeof(body), "{\"message\":\"Not Found\"}");

    if (strcmp(method, "GET") == 0 && strncmp(url, "/repos/", 7) == 0 &&
        ends_with(url, "/installation")) {
        f->n_install++;
        snprintf(f->last_install_path, sizeof(f->last_install_path), "%s", url);
        if (!app_jwt_ok(auth)) {
            f->bad_jwt++;
            status = 401;
        } else if (f->install_status == 200) {
            status = 200;
            snprintf(body, sizeof(body), "{\"id\":%lld,\"app_id\":%d}", (long long)f->install_id,
                     APP_ID_NUM);
        }
    } else if (strcmp(method, "POST") == 0 && strncmp(url, "/app/installations/", 19) == 0 &&
               ends_with(url, "/access_tokens")) {
        copy_hdr(rq, "Content-Type", f->mint_ctype, sizeof(f->mint_ctype));
        char want[128];
        snprintf(want, sizeof(want), "/app/installations/%lld/access_tokens",
                 (long long)f->install_id);
        if (!app_jwt_ok(auth)) {
            f->bad_jwt++;
            status = 401;
        } else if (strcmp(url, want) != 0) {
            status = 404;
        } else if (f->mint_status != 201) {
            status = (unsigned)f->mint_status;
            snprintf(body, sizeof(body), "{\"message\":\"nope\"}");
        } else {
            f->n_mint++;
            char tok[1500];
            make_token(f->n_mint, f->token_len, tok, sizeof(tok));
            time_t exp = (time_t)(clock_now_ms() / 1000 + f->token_ttl_s);
            struct tm tm;
            gmtime_r(&exp, &tm);
            char iso[32];
            strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", &tm);
            status = 201;
            snprintf(body, sizeof(body),
                     "{\"token\":\"%s\",\"expires_at\":\"%s\",\"permissions\":{\"contents\":"
                     "\"read\"},\"repository_selection\":\"all\"}",
                     tok, f->expires_garbage ? "tomorrow-ish" : iso);
        }
    } else if (strcmp(method, "POST") == 0 && strncmp(url, "/repos/", 7) == 0 &&
               ends_with(url, "/dispatches")) {
        f->n_dispatch++;
        bool valid = false;
        if (auth && strncmp(auth, "Bearer ", 7) == 0 && !f->always_401) {
            for (unsigned k = f->revoked_upto + 1; k <= f->n_mint && !valid; k++) {
                char tok[2048];
                make_token(k, f->token_len, tok, sizeof(tok));
                size_t n = strlen(tok);
                valid = strlen(auth + 7) == n && CRYPTO_memcmp(auth + 7, tok, n) == 0;
            }
        }
        if (valid && f->dispatch_status) {
            status = (unsigned)f->dispatch_status;
            snprintf(body, sizeof(body), "{\"message\":\"Not Found\"}");
        } else if (valid) {
            status = 204;
            body[0] = '\0';
        } else {
            f->bad_token++;
            status = 401;
            /* Like some servers do: echo the credential back in the error. */
            snprintf(body, sizeof(body), "{\"message\":\"Bad credentials: %.1000s\"}",
                     auth ? auth : "");
        }
    } else if (strcmp(method, "GET") == 0 && strcmp(url, "/app") == 0) {
        f->n_other++;
        if (app_jwt_ok(auth)) {
            status = 200;
            snprintf(body, sizeof(body), "{\"id\":%d}", APP_ID_NUM);
        } else {
            f->bad_jwt++;
            status = 401;
        }
    } else if (strcmp(method, "GET") == 0 && strcmp(url, "/app/hook/deliveries") == 0) {
        /* Two pages; the first's next link names another host: only its cursor may be used. */
        const char *pp = ut_httpd_query(rq, "per_page");
        const char *cur = ut_httpd_query(rq, "cursor");
        if (f->n_hook_pages < 4)
            snprintf(f->hook_queries[f->n_hook_pages++], sizeof(f->hook_queries[0]),
                     "per_page=%s cursor=%s", pp ? pp : "-", cur ? cur : "-");
        static const char *const first[] = {
            "Link",
            "<https://elsewhere.example/app/hook/deliveries?per_page=100&cursor=v0_9>; "
            "rel=\"prev\", <https://elsewhere.example/app/hook/deliveries?per_page=100&"
            "cursor=v1_2>; rel=\"next\"",
            NULL};
        static const char *const last[] = {
            "Link", "<https://elsewhere.example/app/hook/deliveries?cursor=v0_2>; rel=\"prev\"",
            NULL};
        if (!app_jwt_ok(auth)) {
            f->bad_jwt++;
            status = 401;
        } else {
            status = 200;
            hdrs = cur ? last : first;
            snprintf(body, sizeof(body), "[{\"id\":%d}]", cur ? 2 : 3);
        }
    } else if (strcmp(method, "POST") == 0 && strncmp(url, "/app/hook/deliveries/", 21) == 0 &&
               ends_with(url, "/attempts")) {
        if (!app_jwt_ok(auth)) {
            f->bad_jwt++;
            status = 401;
        } else if (strcmp(url, "/app/hook/deliveries/4294967303/attempts") == 0) {
            status = 202;
            snprintf(body, sizeof(body), "{}");
        } else {
            status = 422;
            snprintf(body, sizeof(body), "{\"message\":\"Validation Failed\"}");
        }
    } else if (strcmp(url, "/ratelimited") == 0) {
        f->n_other++;
        static const char *const h[] = {
            "Retry-After", "120",  "X-RateLimit-Remaining", "0", "x-ratelimit-reset",
            "1900000000",  "ETag", "W/\"abc123\"",          NULL};
        status = 403;
        hdrs = h;
        snprintf(body, sizeof(body), "{\"message\":\"API rate limit exceeded\"}");
    } else if (strcmp(url, "/retry-date") == 0) {
        f->n_other++;
        static char date[64];
        static const char *h[] = {"retry-after", date, NULL};
        time_t t = (time_t)(clock_now_ms() / 1000 + 30);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        status = 429;
        hdrs = h;
        snprintf(body, sizeof(body), "{\"message\":\"slow down\"}");
    } else if (strcmp(url, "/ok") == 0) {
        f->n_other++;
        status = 200;
        snprintf(body, sizeof(body), "{\"method\":\"%s\"}", method);
    } else if (strcmp(url, "/big") == 0 || strcmp(url, "/bigchunked") == 0 ||
               strcmp(url, "/atcap") == 0) {
        f->n_other++;
        pthread_mutex_unlock(&f->mu);
        resp->stream_len = strcmp(url, "/atcap") == 0 ? at_cap : over_cap;
        resp->stream_chunked = strcmp(url, "/bigchunked") == 0;
        return;
    } else {
        f->n_other++;
    }
    pthread_mutex_unlock(&f->mu);
    ut_httpd_reply(resp, status, body);
    if (body[0])
        ut_httpd_resp_header(resp, "Content-Type", "application/json");
    for (size_t i = 0; hdrs && hdrs[i]; i += 2)
        ut_httpd_resp_header(resp, hdrs[i], hdrs[i + 1]);
}

static void fake_start(fake *f)
{
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    f->install_status = 200;
    f->install_id = 42;
    f->mint_status = 201;
    f->token_ttl_s = 3600;
    f->token_len = 40;
    f->srv = ut_httpd_start(handler, f);
}

static void fake_stop(fake *f)
{
    ut_httpd_stop(f->srv);
    pthread_mutex_destroy(&f->mu);
}

/* Reads one counter under the fake's lock. */
static unsigned fget(fake *f, const unsigned *field)
{
    pthread_mutex_lock(&f->mu);
    unsigned v = *field;
    pthread_mutex_unlock(&f->mu);
    return v;
}

/* ---------------------------------------------------------------- fixture */

typedef struct fx {
    fake f;
    crcr_config cfg;
    char url[64];
    gh_client *gh;
} fx;

static int fx_setup(void **state)
{
    fx *x = calloc(1, sizeof(*x));
    if (!x)
        return -1;
    fake_start(&x->f);
    snprintf(x->url, sizeof(x->url), "%s", ut_httpd_base(x->f.srv));
    x->cfg.app_id = APP_ID;
    x->cfg.private_key_pem = g_pem;
    x->cfg.github_api_url = x->url;
    char err[256] = "";
    x->gh = gh_client_new(&x->cfg, err, sizeof(err));
    if (!x->gh) {
        fprintf(stderr, "gh_client_new: %s\n", err);
        return -1;
    }
    *state = x;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *x = *state;
    gh_client_free(x->gh);
    fake_stop(&x->f);
    free(x);
    return 0;
}

static const char dispatch_body[] = "{\"event_type\":\"pull_request\",\"client_payload\":{}}";

/* POST /repos/o/r/dispatches as the installation; returns the call's result. */
static crcr_err dispatch(gh_client *gh, const char *repo, gh_resp *r)
{
    char path[256];
    snprintf(path, sizeof(path), "/repos/%s/dispatches", repo);
    gh_resp_init(r);
    return gh_request(gh, GH_AUTH_INSTALLATION, repo, "POST", path, NULL, dispatch_body,
                      strlen(dispatch_body), r);
}

/* ---------------------------------------------------------------- tests */

/* Calls started with gh_start and their ends. */
#define ASYNC_MAX 64

typedef struct async_calls {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gh_resp r[ASYNC_MAX];
    crcr_err err[ASYNC_MAX];
    int ends[ASYNC_MAX];
    unsigned done;
    char path[ASYNC_MAX][128];
    char repo[ASYNC_MAX][64];
} async_calls;

typedef struct async_slot {
    async_calls *a;
    size_t i;
} async_slot;

static async_slot g_async[ASYNC_MAX];

static void async_done(void *ud, crcr_err err)
{
    async_slot *s = ud;
    pthread_mutex_lock(&s->a->mu);
    s->a->err[s->i] = err;
    s->a->ends[s->i]++;
    s->a->done++;
    pthread_cond_broadcast(&s->a->cv);
    pthread_mutex_unlock(&s->a->mu);
}

static async_calls *async_new(void)
{
    async_calls *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    for (size_t i = 0; i < ASYNC_MAX; i++)
        gh_resp_init(&a->r[i]);
    return a;
}

static void async_free(async_calls *a)
{
    for (size_t i = 0; i < ASYNC_MAX; i++)
        gh_resp_free(&a->r[i]);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* Starts a dispatch to `repo` as call i (installation id `inst`, 0: the client's). */
static void async_dispatch(gh_client *gh, async_calls *a, size_t i, const char *repo, int64_t inst)
{
    snprintf(a->repo[i], sizeof(a->repo[i]), "%s", repo);
    snprintf(a->path[i], sizeof(a->path[i]), "/repos/%s/dispatches", repo);
    g_async[i] = (async_slot){a, i};
    gh_req rq = {.auth = GH_AUTH_INSTALLATION,
                 .repo = a->repo[i],
                 .installation = inst,
                 .method = "POST",
                 .path = a->path[i],
                 .body = dispatch_body,
                 .body_len = strlen(dispatch_body)};
    assert_int_equal(gh_start(gh, &rq, &a->r[i], async_done, &g_async[i]), CRCR_OK);
}

static void async_wait(async_calls *a, unsigned n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 30;
    pthread_mutex_lock(&a->mu);
    while (a->done < n && pthread_cond_timedwait(&a->cv, &a->mu, &ts) == 0)
        ;
    unsigned done = a->done;
    pthread_mutex_unlock(&a->mu);
    assert_int_equal(done, n);
}

static void test_calls_started_together_share_one_lookup_one_mint_and_no_thread(void **state)
{
    fx *x = *state;
    async_calls *a = async_new();
    /* All started from this one thread, none waited for: the client's loop carries them. */
    for (size_t i = 0; i < 50; i++)
        async_dispatch(x->gh, a, i, "o/r", 0);
    async_wait(a, 50);
    for (size_t i = 0; i < 50; i++) {
        assert_int_equal(a->err[i], CRCR_OK);
        assert_int_equal(a->ends[i], 1);
        assert_int_equal(a->r[i].status, 204);
        assert_int_equal(a->r[i].installation, 42);
    }
    assert_int_equal(fget(&x->f, &x->f.n_install), 1);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 1);
    assert_int_equal(fget(&x->f, &x->f.n_dispatch), 50);
    assert_int_equal(fget(&x->f, &x->f.bad_jwt), 0);
    assert_int_equal(fget(&x->f, &x->f.bad_token), 0);
    async_free(a);
}

static void test_one_app_jwt_serves_a_burst_of_lookups_and_mints(void **state)
{
    fx *x = *state;
    async_calls *a = async_new();
    static const char *repos[] = {"o1/r", "o2/r", "o3/r", "o4/r", "o5/r"};
    for (size_t i = 0; i < 5; i++)
        async_dispatch(x->gh, a, i, repos[i], 0);
    async_wait(a, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(a->r[i].status, 204);
        assert_true(a->r[i].installation_looked_up);
    }
    assert_int_equal(fget(&x->f, &x->f.n_install), 5);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 1); /* one installation in this fake */
    gh_stats st;
    gh_get_stats(x->gh, &st);
    assert_int_equal(st.jwt_signs, 1); /* six App requests, one JWT signed */
    assert_int_equal(fget(&x->f, &x->f.bad_jwt), 0);
    async_free(a);
}

static void test_a_stale_installation_id_given_by_the_caller_is_dropped_and_looked_up(void **state)
{
    fx *x = *state;
    async_calls *a = async_new();
    async_dispatch(x->gh, a, 0, "o/r", 999); /* not the fake's 42: its mint is a 404 */
    async_wait(a, 1);
    assert_int_equal(a->err[0], CRCR_OK);
    assert_int_equal(a->r[0].status, 204);
    assert_int_equal(a->r[0].api_calls, 4); /* mint(999) 404, lookup, mint(42), dispatch */
    assert_true(a->r[0].installation_dropped);
    assert_true(a->r[0].installation_looked_up);
    assert_int_equal(a->r[0].installation, 42);
    int64_t id = 0;
    assert_true(gh_installation_cached(x->gh, "o/r", &id));
    assert_int_equal(id, 42);
    async_free(a);
}

static void test_a_404_to_a_request_with_a_cached_id_looks_it_up_once_more(void **state)
{
    fx *x = *state;
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    gh_resp_free(&r);
    pthread_mutex_lock(&x->f.mu);
    x->f.install_status = 404; /* the repository left the installation */
    x->f.dispatch_status = 404;
    pthread_mutex_unlock(&x->f.mu);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_E_HTTP);
    assert_int_equal(r.status, 404);
    assert_int_equal(r.api_calls, 2); /* dispatch 404, lookup 404: no loop */
    assert_true(r.installation_dropped);
    assert_false(r.installation_looked_up);
    assert_string_equal(r.error, "installation lookup: 404 (App not installed on o/r)");
    gh_resp_free(&r);
    int64_t id = 0;
    assert_false(gh_installation_cached(x->gh, "o/r", &id));
    /* A 404 to a request with an id just looked up is the answer itself. */
    pthread_mutex_lock(&x->f.mu);
    x->f.install_status = 200;
    pthread_mutex_unlock(&x->f.mu);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 404);
    assert_int_equal(r.api_calls, 2); /* lookup, dispatch (the token is still cached) */
    gh_resp_free(&r);
}

static void test_seeded_ids_are_used_and_forgotten_by_installation(void **state)
{
    fx *x = *state;
    gh_installation_seed(x->gh, "Seed/One", 42);
    gh_installation_seed(x->gh, "seed/two", 42);
    gh_installation_seed(x->gh, "seed/three", 7);
    int64_t id = 0;
    assert_true(gh_installation_cached(x->gh, "seed/one", &id));
    assert_int_equal(id, 42);
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "seed/one", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 2); /* mint, dispatch: no lookup */
    gh_resp_free(&r);
    assert_int_equal(gh_installation_forget(x->gh, 42), 2);
    assert_false(gh_installation_cached(x->gh, "seed/one", &id));
    assert_false(gh_installation_cached(x->gh, "seed/two", &id));
    assert_true(gh_installation_cached(x->gh, "seed/three", &id));
    assert_int_equal(dispatch(x->gh, "seed/one", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 3); /* the token went with the installation */
    gh_resp_free(&r);
}

static void test_first_dispatch_costs_three_calls_next_99_cost_one(void **state)
{
    fx *x = *state;
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 3);
    assert_string_equal(r.error, "");
    gh_resp_free(&r);
    for (int i = 0; i < 99; i++) {
        assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
        assert_int_equal(r.status, 204);
        assert_int_equal(r.api_calls, 1);
        gh_resp_free(&r);
    }
    assert_int_equal(fget(&x->f, &x->f.n_install), 1);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 1);
    assert_int_equal(fget(&x->f, &x->f.n_dispatch), 100);
    assert_int_equal(fget(&x->f, &x->f.bad_jwt), 0);
    assert_int_equal(fget(&x->f, &x->f.bad_token), 0);
    assert_int_equal(fget(&x->f, &x->f.bad_headers), 0);
    gh_stats st;
    gh_get_stats(x->gh, &st);
    assert_int_equal(st.api_calls, 102);
    assert_int_equal(st.token_misses, 1);
    assert_int_equal(st.token_hits, 99);
    assert_int_equal(st.install_misses, 1);
    assert_int_equal(st.install_hits, 99);
}

static void test_repo_names_are_cached_case_insensitively(void **state)
{
    fx *x = *state;
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "Octo-Org/Hello.World", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 3);
    gh_resp_free(&r);
    assert_int_equal(dispatch(x->gh, "octo-org/hello.world", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 1);
    gh_resp_free(&r);
    pthread_mutex_lock(&x->f.mu);
    assert_string_equal(x->f.last_install_path, "/repos/octo-org/hello.world/installation");
    pthread_mutex_unlock(&x->f.mu);
    int64_t id = 0;
    gh_resp_init(&r);
    assert_int_equal(gh_installation_id(x->gh, "OCTO-ORG/HELLO.WORLD", &id, &r), CRCR_OK);
    assert_int_equal(id, 42);
    assert_int_equal(r.api_calls, 0);
    gh_resp_free(&r);
}

static void test_token_expiring_within_5_minutes_is_reminted(void **state)
{
    fx *x = *state;
    pthread_mutex_lock(&x->f.mu);
    x->f.token_ttl_s = 290; /* inside the 300 s margin: never served from the cache */
    pthread_mutex_unlock(&x->f.mu);
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 3);
    gh_resp_free(&r);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 2); /* mint + dispatch; the installation id stays cached */
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 2);

    pthread_mutex_lock(&x->f.mu);
    x->f.token_ttl_s = 320; /* just outside the margin */
    pthread_mutex_unlock(&x->f.mu);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK); /* previous token still expiring */
    assert_int_equal(r.api_calls, 2);
    gh_resp_free(&r);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 1);
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 3);
    assert_int_equal(fget(&x->f, &x->f.bad_token), 0);
}

/* Token expiry reads the relay's clock (clock.h): moved past the token's refresh margin, the
 * cached token is re-minted; the fake judges the App JWT and the token times on the same clock. */
static void test_moved_clock_expires_the_cached_token(void **state)
{
#ifdef CRCR_TEST_HOOKS
    fx *x = *state;
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK); /* lookup, mint, dispatch */
    gh_resp_free(&r);
    clock_test_set_offset_ms((3600 - 300 - 60) * 1000LL); /* a minute before the margin */
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 1); /* still the cached token */
    gh_resp_free(&r);
    clock_test_set_offset_ms((3600 - 300 + 1) * 1000LL); /* inside the margin */
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 2); /* mint + dispatch */
    gh_resp_free(&r);
    clock_test_set_offset_ms(0);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 2);
    assert_int_equal(fget(&x->f, &x->f.bad_jwt), 0);
    assert_int_equal(fget(&x->f, &x->f.bad_token), 0);
#else
    (void)state;
    skip(); /* a build without CRCR_TEST_HOOKS cannot move its clock */
#endif
}

static void test_unparsable_expires_at_uses_token_once_without_caching(void **state)
{
    fx *x = *state;
    pthread_mutex_lock(&x->f.mu);
    x->f.expires_garbage = true;
    pthread_mutex_unlock(&x->f.mu);
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 3);
    gh_resp_free(&r);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.api_calls, 2);
    gh_resp_free(&r);
}

static void test_401_on_cached_token_remints_once_and_retries(void **state)
{
    fx *x = *state;
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    gh_resp_free(&r);
    pthread_mutex_lock(&x->f.mu);
    x->f.revoked_upto = x->f.n_mint; /* the cached token is now refused */
    pthread_mutex_unlock(&x->f.mu);

    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 3); /* 401, mint, retry */
    assert_string_equal(r.error, "");
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 2);
    assert_int_equal(fget(&x->f, &x->f.bad_token), 1);

    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK); /* the fresh token is cached */
    assert_int_equal(r.api_calls, 1);
    gh_resp_free(&r);
}

static void test_persistent_401_is_retried_at_most_once(void **state)
{
    fx *x = *state;
    pthread_mutex_lock(&x->f.mu);
    x->f.always_401 = true;
    pthread_mutex_unlock(&x->f.mu);
    gh_resp r;
    /* A freshly minted token that gets 401 is not retried. */
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 401);
    assert_int_equal(r.api_calls, 3);
    gh_resp_free(&r);
    /* A cached one is dropped and retried once with a new token, then the 401 stands. */
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 401);
    assert_int_equal(r.api_calls, 3);
    assert_null(strstr(r.error, "ghs_"));
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 2);
    assert_int_equal(fget(&x->f, &x->f.n_dispatch), 3);
}

static void test_reinstalled_app_drops_stale_installation_id(void **state)
{
    fx *x = *state;
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    gh_resp_free(&r);
    pthread_mutex_lock(&x->f.mu);
    x->f.install_id = 43; /* reinstalled: new id, old tokens dead, old id unknown */
    x->f.revoked_upto = x->f.n_mint;
    pthread_mutex_unlock(&x->f.mu);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    assert_int_equal(r.api_calls, 5); /* 401, mint(42) 404, lookup, mint(43), dispatch */
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_install), 2);
}

static void test_install_404_is_http_error_naming_the_repo(void **state)
{
    fx *x = *state;
    pthread_mutex_lock(&x->f.mu);
    x->f.install_status = 404;
    pthread_mutex_unlock(&x->f.mu);
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_E_HTTP);
    assert_int_equal(r.status, 404);
    assert_string_equal(r.error, "installation lookup: 404 (App not installed on o/r)");
    assert_int_equal(r.api_calls, 1);
    assert_non_null(strstr(buf_cstr(&r.body), "Not Found"));
    gh_resp_free(&r);

    int64_t id = -1;
    gh_resp_init(&r);
    assert_int_equal(gh_installation_id(x->gh, "o/r", &id, &r), CRCR_E_HTTP);
    assert_int_equal(r.status, 404);
    assert_int_equal(id, -1);
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 0);
    assert_int_equal(fget(&x->f, &x->f.n_dispatch), 0);
}

static void test_mint_failure_is_http_error_naming_the_step(void **state)
{
    fx *x = *state;
    pthread_mutex_lock(&x->f.mu);
    x->f.mint_status = 403;
    pthread_mutex_unlock(&x->f.mu);
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_E_HTTP);
    assert_int_equal(r.status, 403);
    assert_string_equal(r.error, "token mint: 403");
    assert_non_null(strstr(buf_cstr(&r.body), "nope"));
    assert_int_equal(r.api_calls, 2);
    gh_resp_free(&r);
}

static void test_overlong_token_is_refused_without_leaking_it(void **state)
{
    fx *x = *state;
    pthread_mutex_lock(&x->f.mu);
    x->f.token_len = CRCR_TOKEN_MAX + 1;
    pthread_mutex_unlock(&x->f.mu);
    gh_resp r;
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_E_TOO_LARGE);
    assert_null(strstr(r.error, "ghs_"));
    assert_non_null(strstr(r.error, "token mint"));
    assert_int_equal(r.body.len, 0); /* the answer holding the token is not handed out */
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_dispatch), 0);

    pthread_mutex_lock(&x->f.mu);
    x->f.token_len = CRCR_TOKEN_MAX; /* exactly at the limit is fine */
    pthread_mutex_unlock(&x->f.mu);
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    gh_resp_free(&r);
}

static void test_retry_after_and_rate_limit_headers_are_parsed(void **state)
{
    fx *x = *state;
    gh_resp r;
    gh_resp_init(&r);
    assert_int_equal(
        gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ratelimited", NULL, NULL, 0, &r), CRCR_OK);
    assert_int_equal(r.status, 403);
    assert_int_equal(r.retry_after_s, 120);
    assert_int_equal(r.rl_remaining, 0);
    assert_int_equal(r.rl_reset, 1900000000);
    assert_string_equal(r.etag, "W/\"abc123\"");
    assert_non_null(strstr(buf_cstr(&r.body), "rate limit"));

    /* The same holder reused: the next answer's absent headers read as -1 / "". */
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r),
                     CRCR_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.retry_after_s, -1);
    assert_int_equal(r.rl_remaining, -1);
    assert_int_equal(r.rl_reset, -1);
    assert_string_equal(r.etag, "");

    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/retry-date", NULL, NULL, 0, &r),
                     CRCR_OK);
    assert_int_equal(r.status, 429);
    assert_in_range(r.retry_after_s, 27, 30);
    gh_resp_free(&r);
}

static void test_answer_over_the_cap_is_refused(void **state)
{
    fx *x = *state;
    static const char *paths[] = {"/big", "/bigchunked"};
    for (size_t i = 0; i < 2; i++) {
        gh_resp r;
        gh_resp_init(&r);
        assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", paths[i], NULL, NULL, 0, &r),
                         CRCR_E_TOO_LARGE);
        assert_int_equal(r.status, 200);
        assert_true(r.body.len <= CRCR_GH_RESPONSE_MAX);
        assert_non_null(strstr(r.error, "larger than"));
        gh_resp_free(&r);
    }
    /* Exactly at the cap is accepted. */
    gh_resp r;
    gh_resp_init(&r);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/atcap", NULL, NULL, 0, &r),
                     CRCR_OK);
    assert_int_equal(r.body.len, CRCR_GH_RESPONSE_MAX);
    /* And the client still works afterwards. */
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r),
                     CRCR_OK);
    assert_int_equal(r.status, 200);
    gh_resp_free(&r);
}

static void test_server_sees_correct_auth_and_standard_headers(void **state)
{
    fx *x = *state;
    gh_resp r;
    gh_resp_init(&r);
    /* App JWT: the fake verifies signature and claims (iat, exp, iss). */
    assert_int_equal(gh_request(x->gh, GH_AUTH_APP, NULL, "GET", "/app", NULL, NULL, 0, &r),
                     CRCR_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.api_calls, 1);
    assert_int_equal(fget(&x->f, &x->f.bad_jwt), 0);
    pthread_mutex_lock(&x->f.mu);
    assert_string_equal(x->f.last_ua, "crcr/" CRCR_VERSION);
    assert_true(x->f.last_had_auth);
    pthread_mutex_unlock(&x->f.mu);

    /* No auth: no Authorization header at all. */
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r),
                     CRCR_OK);
    pthread_mutex_lock(&x->f.mu);
    assert_false(x->f.last_had_auth);
    assert_string_equal(x->f.last_ctype, "");
    pthread_mutex_unlock(&x->f.mu);
    gh_resp_free(&r);

    /* Installation token on the dispatch, JSON body delivered as sent. */
    assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
    assert_int_equal(r.status, 204);
    gh_resp_free(&r);
    pthread_mutex_lock(&x->f.mu);
    assert_int_equal(x->f.bad_token, 0);
    assert_string_equal(x->f.last_ctype, "application/json");
    assert_string_equal(x->f.last_body, dispatch_body);
    assert_string_equal(x->f.mint_ctype, ""); /* no form content type on the empty POST */
    assert_int_equal(x->f.bad_headers, 0);
    assert_int_equal(x->f.bad_jwt, 0);
    pthread_mutex_unlock(&x->f.mu);
}

static void test_other_methods_and_extra_headers_are_sent(void **state)
{
    fx *x = *state;
    static const char *methods[] = {"PATCH", "PUT", "DELETE", "POST"};
    const char *const extra[] = {"If-None-Match: \"abc\"", NULL};
    for (size_t i = 0; i < 4; i++) {
        gh_resp r;
        gh_resp_init(&r);
        assert_int_equal(
            gh_request(x->gh, GH_AUTH_NONE, NULL, methods[i], "/ok", extra, "{}", 2, &r), CRCR_OK);
        assert_int_equal(r.status, 200);
        char want[64];
        snprintf(want, sizeof(want), "{\"method\":\"%s\"}", methods[i]);
        assert_string_equal(buf_cstr(&r.body), want);
        gh_resp_free(&r);
    }
}

static void test_plain_http_is_refused_unless_host_is_loopback(void **state)
{
    (void)state;
    static const char *refused[] = {"http://example.com",
                                    "http://127.0.0.1.example.com",
                                    "http://127.0.0.1@example.com",
                                    "http://user:pw@127.0.0.1",
                                    "ftp://127.0.0.1",
                                    "https://api.github.com?x=1",
                                    "not a url"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        crcr_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.github_api_url = (char *)refused[i];
        char err[256];
        gh_client *gh = gh_client_new(&cfg, err, sizeof(err));
        assert_non_null(gh);
        gh_resp r;
        gh_resp_init(&r);
        assert_int_equal(gh_request(gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r),
                         CRCR_E_INVALID);
        assert_int_equal(r.api_calls, 0);
        assert_non_null(strstr(r.error, "GITHUB_API_URL"));
        gh_resp_free(&r);
        gh_client_free(gh);
    }
    /* Loopback names are allowed over http: nothing listens on port 1, so they fail on the
     * network instead of being refused. */
    static const char *allowed[] = {"http://127.0.0.1:1", "http://127.8.9.10:1",
                                    "http://localhost:1", "http://[::1]:1/"};
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
        crcr_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.github_api_url = (char *)allowed[i];
        char err[256];
        gh_client *gh = gh_client_new(&cfg, err, sizeof(err));
        assert_non_null(gh);
        gh_resp r;
        gh_resp_init(&r);
        assert_int_equal(gh_request(gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r),
                         CRCR_E_NETWORK);
        assert_int_equal(r.status, 0);
        assert_int_equal(r.api_calls, 1);
        assert_true(r.error[0] != '\0');
        gh_resp_free(&r);
        gh_client_free(gh);
    }
}

static void test_http_to_loopback_fake_works(void **state)
{
    fx *x = *state; /* the fixture's URL is http://127.0.0.1:<port> */
    gh_resp r;
    gh_resp_init(&r);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r),
                     CRCR_OK);
    assert_int_equal(r.status, 200);
    gh_resp_free(&r);
}

static void test_hook_deliveries_follow_the_next_cursor_and_redeliver_expects_202(void **state)
{
    fx *x = *state;
    gh_resp r;
    gh_resp_init(&r);
    char next[GH_CURSOR_MAX];
    assert_int_equal(gh_hook_deliveries(x->gh, 100, NULL, next, &r), CRCR_OK);
    assert_string_equal(buf_cstr(&r.body), "[{\"id\":3}]");
    assert_string_equal(next, "v1_2");
    assert_int_equal(gh_hook_deliveries(x->gh, 500, next, next, &r), CRCR_OK);
    assert_string_equal(buf_cstr(&r.body), "[{\"id\":2}]");
    assert_string_equal(next, ""); /* a prev link only: the last page */
    pthread_mutex_lock(&x->f.mu);
    assert_int_equal(x->f.n_hook_pages, 2);
    assert_string_equal(x->f.hook_queries[0], "per_page=100 cursor=-");
    assert_string_equal(x->f.hook_queries[1], "per_page=100 cursor=v1_2");
    assert_int_equal(x->f.bad_jwt, 0);
    pthread_mutex_unlock(&x->f.mu);
    assert_int_equal(gh_hook_deliveries(x->gh, 10, "v1 2", next, &r), CRCR_E_INVALID);
    assert_int_equal(gh_hook_redeliver(x->gh, 4294967303LL, &r), CRCR_OK);
    assert_int_equal(r.status, 202);
    assert_int_equal(gh_hook_redeliver(x->gh, 5, &r), CRCR_E_HTTP);
    assert_int_equal(r.status, 422);
    assert_non_null(strstr(r.error, "/app/hook/deliveries/5/attempts: 422"));
    assert_int_equal(gh_hook_redeliver(x->gh, 0, &r), CRCR_E_INVALID);
    gh_resp_free(&r);
}

static void test_link_cursor_takes_only_a_url_safe_cursor(void **state)
{
    char c[GH_CURSOR_MAX];
    assert_true(gh_link_cursor("https://api.github.com/app/hook/deliveries?per_page=100&cursor="
                               "v1_12077215967",
                               c));
    assert_string_equal(c, "v1_12077215967");
    assert_true(gh_link_cursor("https://h/x?cursor=Y3Vyc29y%3D%3D&per_page=2", c));
    assert_string_equal(c, "Y3Vyc29y%3D%3D");
    assert_false(gh_link_cursor("https://h/x?per_page=2", c));
    assert_false(gh_link_cursor("https://h/x?cursor=", c));
    assert_false(gh_link_cursor("https://h/x?cursor=a\"b", c));
    assert_false(gh_link_cursor("https://h/x?xcursor=abc", c));
    char longer[GH_CURSOR_MAX + 64] = "https://h/x?cursor=";
    memset(longer + strlen(longer), 'a', GH_CURSOR_MAX);
    longer[sizeof(longer) - 1] = '\0';
    assert_false(gh_link_cursor(longer, c));
}

static void test_dry_run_client_serves_only_unauthenticated_requests(void **state)
{
    fx *x = *state;
    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.github_api_url = x->url;
    cfg.dry_run = true;
    char err[256];
    gh_client *gh = gh_client_new(&cfg, err, sizeof(err));
    assert_non_null(gh);
    gh_resp r;
    assert_int_equal(dispatch(gh, "o/r", &r), CRCR_E_INVALID);
    assert_int_equal(r.api_calls, 0);
    gh_resp_free(&r);
    gh_resp_init(&r);
    assert_int_equal(gh_request(gh, GH_AUTH_APP, NULL, "GET", "/app", NULL, NULL, 0, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, NULL, 0, &r), CRCR_OK);
    assert_int_equal(r.status, 200);
    gh_resp_free(&r);
    buf_t jwt;
    buf_init(&jwt, 8192);
    assert_int_equal(gh_app_jwt(gh, (int64_t)time(NULL), &jwt), CRCR_E_INVALID);
    buf_free(&jwt);
    gh_client_free(gh);
}

static void test_invalid_requests_are_refused_before_sending(void **state)
{
    fx *x = *state;
    static const char *bad_repos[] = {
        "o",    "o/r/x", "../r",
        "o/..", "o/r x", "o/r\n",
        "/r",   "o/",    "ooooooooooooooooooooooooooooooooooooooooo/r"};
    for (size_t i = 0; i < sizeof(bad_repos) / sizeof(bad_repos[0]); i++) {
        gh_resp r;
        gh_resp_init(&r);
        assert_int_equal(gh_request(x->gh, GH_AUTH_INSTALLATION, bad_repos[i], "POST",
                                    "/repos/o/r/dispatches", NULL, "{}", 2, &r),
                         CRCR_E_INVALID);
        assert_int_equal(r.api_calls, 0);
        gh_resp_free(&r);
    }
    const char *const injected[] = {"X-Evil: a\r\nAuthorization: b", NULL};
    const char *const nocolon[] = {"NoColon", NULL};
    gh_resp r;
    gh_resp_init(&r);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", injected, NULL, 0, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", nocolon, NULL, 0, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "TRACE", "/ok", NULL, NULL, 0, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "ok", NULL, NULL, 0, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/o k", NULL, NULL, 0, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "GET", "/ok", NULL, "{}", 2, &r),
                     CRCR_E_INVALID);
    assert_int_equal(gh_request(x->gh, GH_AUTH_NONE, NULL, "POST", "/ok", NULL, NULL, 5, &r),
                     CRCR_E_INVALID);
    assert_int_equal(r.api_calls, 0);
    gh_resp_free(&r);
    assert_int_equal(fget(&x->f, &x->f.n_other) + fget(&x->f, &x->f.n_install), 0);
}

static void test_sequential_requests_reuse_one_connection(void **state)
{
    fx *x = *state;
    for (int i = 0; i < 20; i++) {
        gh_resp r;
        assert_int_equal(dispatch(x->gh, "o/r", &r), CRCR_OK);
        assert_int_equal(r.status, 204);
        gh_resp_free(&r);
    }
    assert_int_equal(ut_httpd_connections(x->f.srv), 1);
}

typedef struct worker_arg {
    gh_client *gh;
    atomic_int failures;
    atomic_int calls;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    for (int i = 0; i < 50; i++) {
        gh_resp r;
        crcr_err e = dispatch(a->gh, "o/r", &r);
        if (e != CRCR_OK || r.status != 204)
            atomic_fetch_add(&a->failures, 1);
        atomic_fetch_add(&a->calls, r.api_calls);
        gh_resp_free(&r);
    }
    return NULL;
}

static void test_8_threads_x_50_dispatches_share_one_token_mint(void **state)
{
    fx *x = *state;
    worker_arg a = {.gh = x->gh};
    atomic_init(&a.failures, 0);
    atomic_init(&a.calls, 0);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, &a), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&a.failures), 0);
    assert_int_equal(fget(&x->f, &x->f.n_mint), 1);
    assert_int_equal(fget(&x->f, &x->f.n_install), 1);
    assert_int_equal(fget(&x->f, &x->f.n_dispatch), 400);
    assert_int_equal(atomic_load(&a.calls), 402);
    assert_int_equal(fget(&x->f, &x->f.bad_token), 0);
    /* At most one kept-alive connection per concurrent caller. */
    assert_true(ut_httpd_connections(x->f.srv) <= 8);
    gh_stats st;
    gh_get_stats(x->gh, &st);
    assert_int_equal(st.token_misses, 1);
    assert_int_equal(st.install_misses, 1);
    assert_int_equal(st.token_hits, 399);
    assert_int_equal(st.api_calls, 402);
}

static void test_parse_retry_after(void **state)
{
    (void)state;
    const int64_t date = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */
    assert_int_equal(gh_parse_retry_after("120", 0), 120);
    assert_int_equal(gh_parse_retry_after("0", 0), 0);
    assert_int_equal(gh_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date - 100), 100);
    assert_int_equal(gh_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date + 100), 0);
    assert_int_equal(gh_parse_retry_after("Thu, 29 Feb 2024 23:59:59 GMT", 1709251199 - 1), 1);
    static const char *garbage[] = {"",
                                    "abc",
                                    "-5",
                                    "12a",
                                    "1.5",
                                    " 120",
                                    "99999999999999999999",
                                    "Wed, 21 Oct 2015 07:28:00 UTC",
                                    "Wed, 32 Oct 2015 07:28:00 GMT",
                                    "Thu, 29 Feb 2023 07:28:00 GMT",
                                    "Wed, 21 Oct 2015 24:28:00 GMT",
                                    "Foo, 21 Oct 2015 07:28:00 GMT",
                                    "Wed, 21 Okt 2015 07:28:00 GMT",
                                    "Wed, 21 Oct 2015 07:28:00 GMT "};
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
        assert_int_equal(gh_parse_retry_after(garbage[i], date), -1);
    assert_int_equal(gh_parse_retry_after(NULL, date), -1);
}

static int setup_key(void **state)
{
    (void)state;
    g_key = EVP_RSA_gen(2048);
    if (!g_key)
        return -1;
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(b, g_key, NULL, NULL, 0, NULL, NULL);
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    g_pem = malloc((size_t)n + 1);
    memcpy(g_pem, data, (size_t)n);
    g_pem[n] = '\0';
    BIO_free(b);
    return 0;
}

static int teardown_key(void **state)
{
    (void)state;
    EVP_PKEY_free(g_key);
    free(g_pem);
    return 0;
}

#define FX_TEST(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        FX_TEST(test_first_dispatch_costs_three_calls_next_99_cost_one),
        FX_TEST(test_repo_names_are_cached_case_insensitively),
        FX_TEST(test_token_expiring_within_5_minutes_is_reminted),
        FX_TEST(test_moved_clock_expires_the_cached_token),
        FX_TEST(test_unparsable_expires_at_uses_token_once_without_caching),
        FX_TEST(test_401_on_cached_token_remints_once_and_retries),
        FX_TEST(test_persistent_401_is_retried_at_most_once),
        FX_TEST(test_reinstalled_app_drops_stale_installation_id),
        FX_TEST(test_install_404_is_http_error_naming_the_repo),
        FX_TEST(test_mint_failure_is_http_error_naming_the_step),
        FX_TEST(test_overlong_token_is_refused_without_leaking_it),
        FX_TEST(test_retry_after_and_rate_limit_headers_are_parsed),
        FX_TEST(test_answer_over_the_cap_is_refused),
        FX_TEST(test_server_sees_correct_auth_and_standard_headers),
        FX_TEST(test_other_methods_and_extra_headers_are_sent),
        cmocka_unit_test(test_plain_http_is_refused_unless_host_is_loopback),
        FX_TEST(test_http_to_loopback_fake_works),
        FX_TEST(test_hook_deliveries_follow_the_next_cursor_and_redeliver_expects_202),
        cmocka_unit_test(test_link_cursor_takes_only_a_url_safe_cursor),
        FX_TEST(test_dry_run_client_serves_only_unauthenticated_requests),
        FX_TEST(test_invalid_requests_are_refused_before_sending),
        FX_TEST(test_sequential_requests_reuse_one_connection),
        FX_TEST(test_8_threads_x_50_dispatches_share_one_token_mint),
        FX_TEST(test_calls_started_together_share_one_lookup_one_mint_and_no_thread),
        FX_TEST(test_one_app_jwt_serves_a_burst_of_lookups_and_mints),
        FX_TEST(test_a_stale_installation_id_given_by_the_caller_is_dropped_and_looked_up),
        FX_TEST(test_a_404_to_a_request_with_a_cached_id_looks_it_up_once_more),
        FX_TEST(test_seeded_ids_are_used_and_forgotten_by_installation),
        cmocka_unit_test(test_parse_retry_after),
    };
    int rc = cmocka_run_group_tests(tests, setup_key, teardown_key);
    curl_global_cleanup();
    return rc;
}
