/*
 * test_ops.c - the operator endpoints (src/endpoints/ops.c) served by a minimal relay: a crcr_app
 * with a configuration from config_load, a SQLite store, a file allowlist and the HTTP server over
 * ops_routes (no GitHub client, no outbox). The admin API exists only with CRCR_ADMIN_TOKEN and
 * wants exactly `Authorization: Bearer <token>`; its listing, document, redeliver and trust
 * routes check their inputs; /metrics needs no token and reads the store and the allowlist.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"
#include "metrics.h"
#include "ops.h"
#include "unit_support.h"

#define TOKEN "s3cret-admin-token"
#define SHA "0123456789abcdef0123456789abcdef01234567"
#define ADMIN "/api/v1/admin"

static const char ALLOWLIST[] = "L1:\n  - example-org/one\nL2:\n  - example-org/two\n"
                                "L4:\n  - example-org/four\n";

static const char *const AUTH[] = {"Authorization: Bearer " TOKEN, NULL};

static int setup(void **state)
{
    ut_app *a = calloc(1, sizeof(*a));
    assert_non_null(a);
    const char *env[] = {"CRCR_ADMIN_TOKEN", TOKEN, NULL};
    ut_app_start(a, ALLOWLIST, env, ops_routes);
    const char *targets[] = {"example-org/two", "example-org/four", NULL};
    int64_t now = clock_now_ms();
    ut_ingest(a->app.st, "del-42", 42, SHA, "{\"pr\":42}", targets, now - 2000);
    ut_ingest(a->app.st, "del-7", 7, SHA, "{\"pr\":7}", targets + 1, now - 1000);
    *state = a;
    return 0;
}

/* A request with the admin token; the answer parsed as JSON when it is (caller frees both). */
static jv *admin(void **state, const char *method, const char *path, ut_resp *r)
{
    CURLcode rc = ut_http(r, ut_app_port(state), method, path, AUTH, NULL, 0);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    return jv_parse(r->body.data ? r->body.data : "", r->body.len, NULL, 0);
}

static void expect(void **state, const char *method, const char *path, long status,
                   const char *body)
{
    ut_expect(ut_app_port(state), method, path, AUTH, status, body);
}

typedef struct exchange {
    const char *method, *path;
    long status;
    const char *body;
} exchange;

/* Each request in turn, with the admin token. */
static void expect_all(void **state, const exchange *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        expect(state, x[i].method, x[i].path, x[i].status, x[i].body);
}

/* ---- authentication ---- */

static void admin_routes_need_the_bearer_token(void **state)
{
    static const char *const bad[] = {
        NULL,
        "Authorization: Bearer wrong-token",
        "Authorization: Bearer " TOKEN "x",
        "Authorization: Bearer s3cret-admin-toke",
        "Authorization: Basic " TOKEN,
        "Authorization: " TOKEN,
        "Authorization: Bearer",
        "X-Admin-Token: " TOKEN,
    };
    static const char *const paths[] = {ADMIN "/deliveries", ADMIN "/deliveries/del-42",
                                        ADMIN "/trust"};
    for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            const char *h[] = {bad[i], NULL};
            ut_resp r;
            ut_get(&r, ut_app_port(state), paths[p], bad[i] ? h : NULL);
            if (r.status != 401)
                fail_msg("%s with '%s' answered %ld", paths[p], bad[i] ? bad[i] : "(none)",
                         r.status);
            assert_string_equal(ut_body(&r), "{\"detail\":\"Unauthorized\"}");
            char v[64];
            assert_true(ut_resp_header(&r, "WWW-Authenticate", v, sizeof(v)));
            assert_string_equal(v, "Bearer realm=\"crcr-admin\"");
            ut_resp_free(&r);
        }
    }
    /* The redeliver POST needs it as well, and does nothing without it. */
    ut_resp r;
    assert_int_equal(ut_http(&r, ut_app_port(state), "POST", ADMIN "/deliveries/del-42/redeliver",
                             NULL, NULL, 0),
                     CURLE_OK);
    assert_int_equal(r.status, 401);
    ut_resp_free(&r);
}

static void the_scheme_is_case_insensitive_and_spaces_before_the_token_are_skipped(void **state)
{
    const char *forms[] = {"Authorization: bearer " TOKEN, "Authorization: BEARER " TOKEN,
                           "Authorization: Bearer   " TOKEN};
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        const char *h[] = {forms[i], NULL};
        ut_resp r;
        ut_get(&r, ut_app_port(state), ADMIN "/deliveries", h);
        if (r.status != 200)
            fail_msg("'%s' answered %ld", forms[i], r.status);
        ut_resp_free(&r);
    }
}

static void without_an_admin_token_only_metrics_exists(void **state)
{
    ut_app a;
    int port = ut_app_start(&a, ALLOWLIST, NULL, ops_routes);
    assert_int_equal(a.n_routes, 1);
    assert_string_equal(a.routes[0].path, "/metrics");
    ut_resp r;
    ut_get(&r, port, ADMIN "/deliveries", AUTH);
    assert_int_equal(r.status, 404);
    assert_string_equal(ut_body(&r), "{\"detail\":\"Not found\"}");
    ut_resp_free(&r);
    ut_get(&r, port, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    ut_resp_free(&r);
    ut_app_stop(&a);
    /* the route table is cut at the caller's room */
    ut_app *full = *state;
    http_route one[1];
    assert_int_equal(ops_routes(&full->app, one, 1), 1);
    assert_int_equal(full->n_routes, 7);
}

/* ---- deliveries ---- */

/* The delivery ids a listing gives, comma-separated. */
static const char *listed(void **state, const char *path)
{
    static char ids[512];
    ids[0] = '\0';
    ut_resp r;
    jv *doc = admin(state, "GET", path, &r);
    if (r.status != 200)
        fail_msg("GET %s: %ld %s", path, r.status, ut_body(&r));
    const jv *list = jv_get(doc, "deliveries");
    for (size_t i = 0; i < jv_arr_len(list); i++) {
        size_t n = strlen(ids);
        snprintf(ids + n, sizeof(ids) - n, "%s%s", n ? "," : "",
                 jv_path_str(jv_arr_at(list, i), "delivery_id"));
    }
    jv_free(doc);
    ut_resp_free(&r);
    return ids;
}

#define LIMIT_400 "{\"detail\":\"limit: expected 1 to 10000\"}"
#define PR_400 "{\"detail\":\"pr: expected a positive pull request number\"}"

static void the_listing_filters_and_validates_its_arguments(void **state)
{
    assert_string_equal(listed(state, ADMIN "/deliveries"), "del-7,del-42"); /* newest first */
    assert_string_equal(listed(state, ADMIN "/deliveries?pr=42"), "del-42");
    assert_string_equal(listed(state, ADMIN "/deliveries?repo=example-org/two&limit=5"), "del-42");
    assert_string_equal(listed(state, ADMIN "/deliveries?limit=1&status=queued"), "del-7");
    assert_string_equal(listed(state, ADMIN "/deliveries?status=dead"), "");
    assert_string_equal(listed(state, ADMIN "/deliveries?limit=10000"), "del-7,del-42");

    static const exchange x[] = {
        {"GET", ADMIN "/deliveries?status=lost", 400,
         "{\"detail\":\"status: expected queued, running, sent, dry_run or dead\"}"},
        {"GET", ADMIN "/deliveries?repo=no-slash", 400,
         "{\"detail\":\"repo: expected owner/name\"}"},
        {"GET", ADMIN "/deliveries?limit=0", 400, LIMIT_400},
        {"GET", ADMIN "/deliveries?limit=10001", 400, LIMIT_400},
        {"GET", ADMIN "/deliveries?limit=-1", 400, LIMIT_400},
        {"GET", ADMIN "/deliveries?limit=5x", 400, LIMIT_400},
        {"GET", ADMIN "/deliveries?limit=ten", 400, LIMIT_400},
        {"GET", ADMIN "/deliveries?pr=0", 400, PR_400},
        {"GET", ADMIN "/deliveries?pr=4x", 400, PR_400},
    };
    expect_all(state, x, sizeof(x) / sizeof(x[0]));
}

static void a_delivery_document_has_the_delivery_and_its_outbox(void **state)
{
    ut_resp r;
    jv *doc = admin(state, "GET", ADMIN "/deliveries/del-42", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(jv_path_str(doc, "delivery.delivery_id"), "del-42");
    assert_string_equal(jv_path_str(doc, "delivery.head_sha"), SHA);
    const jv *rows = jv_get(doc, "outbox");
    assert_int_equal(jv_arr_len(rows), 2);
    assert_string_equal(jv_path_str(jv_arr_at(rows, 0), "target"), "example-org/two");
    assert_string_equal(jv_path_str(jv_arr_at(rows, 1), "kind"), "dispatch");
    jv_free(doc);
    ut_resp_free(&r);
    static const exchange x[] = {
        {"GET", ADMIN "/deliveries/unknown-id", 404, "{\"detail\":\"delivery not found\"}"},
        {"GET", ADMIN "/deliveries/bad%20id", 404, "{\"detail\":\"Not found\"}"},
        {"GET", ADMIN "/deliveries/del-42/other", 404, "{\"detail\":\"Not found\"}"},
        {"GET", ADMIN "/deliveries/del-42/redeliver", 405, "{\"detail\":\"Method not allowed\"}"},
    };
    expect_all(state, x, sizeof(x) / sizeof(x[0]));
}

#define NOT_LISTED                                                                                 \
    "{\"detail\":\"repo is not on the allowlist in force (force=1 redelivers anyway)\"}"

static void redeliver_requeues_the_dispatch_rows(void **state)
{
    ut_app *a = *state;
    static const exchange x[] = {
        {"POST", ADMIN "/deliveries/del-42/redeliver", 200,
         "{\"ok\":true,\"delivery_id\":\"del-42\",\"repo\":null,\"requeued\":2}"},
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=example-org/four", 200,
         "{\"ok\":true,\"delivery_id\":\"del-42\",\"repo\":\"example-org/four\",\"requeued\":1}"},
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=", 200,
         "{\"ok\":true,\"delivery_id\":\"del-42\",\"repo\":null,\"requeued\":2}"},
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=nope", 400,
         "{\"detail\":\"repo: expected owner/name\"}"},
        /* a repository the allowlist in force does not name: only on purpose (and a repo
         * without a row gets one) */
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=other-org/gone", 422, NOT_LISTED},
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=other-org/gone&force=0", 422, NOT_LISTED},
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=other-org/gone&force=1", 200,
         "{\"ok\":true,\"delivery_id\":\"del-42\",\"repo\":\"other-org/gone\",\"requeued\":1}"},
        {"POST", ADMIN "/deliveries/del-42/redeliver?repo=EXAMPLE-ORG/FOUR", 200,
         "{\"ok\":true,\"delivery_id\":\"del-42\",\"repo\":\"EXAMPLE-ORG/FOUR\",\"requeued\":1}"},
        {"POST", ADMIN "/deliveries/unknown-id/redeliver", 404,
         "{\"detail\":\"delivery not found\"}"},
        {"POST", ADMIN "/deliveries/del-42", 405, "{\"detail\":\"Method not allowed\"}"},
        {"POST", ADMIN "/deliveries/del-42/resend", 404, "{\"detail\":\"Not found\"}"},
    };
    expect_all(state, x, sizeof(x) / sizeof(x[0]));
    ut_rows l;
    ut_rows_of(a->app.st, "del-42", &l);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.state[0], "queued");
    assert_string_equal(l.kind[2], "dispatch");
    assert_string_equal(l.target[2], "other-org/gone");
    /* a body is capped: the route takes none worth reading */
    char big[2048];
    memset(big, 'x', sizeof(big));
    ut_resp r;
    assert_int_equal(ut_http(&r, ut_app_port(state), "POST", ADMIN "/deliveries/del-42/redeliver",
                             AUTH, big, sizeof(big)),
                     CURLE_OK);
    assert_int_equal(r.status, 413);
    ut_resp_free(&r);
}

/* ---- trust ---- */

#define RESET_USAGE "{\"detail\":\"expected /api/v1/admin/trust/OWNER/REPO/reset\"}"

static void trust_pins_are_listed_and_reset(void **state)
{
    ut_app *a = *state;
    store_pin_outcome o;
    assert_int_equal(store_identity_pin(a->app.st, "example-org/four", "11", "22", 1800000000000LL,
                                        &o, NULL, NULL),
                     CRCR_OK);
    static const exchange x[] = {
        {"GET", ADMIN "/trust", 200,
         "{\"pins\":[{\"repo\":\"example-org/four\",\"repository_id\":\"11\",\"owner_id\":"
         "\"22\",\"pinned_at\":\"2027-01-15T08:00:00Z\"}]}"},
        {"POST", ADMIN "/trust/example-org/four", 404, "{\"detail\":\"Not found\"}"},
        {"POST", ADMIN "/trust/four/reset", 400, RESET_USAGE},
        {"POST", ADMIN "/trust/a/b/c/reset", 400, RESET_USAGE},
        {"POST", ADMIN "/trust//b/reset", 400, RESET_USAGE},
        {"POST", ADMIN "/trust/example-org/four/reset", 200,
         "{\"ok\":true,\"reset\":\"example-org/four\"}"},
        {"POST", ADMIN "/trust/example-org/four/reset", 404,
         "{\"detail\":\"no pin for this repository\"}"},
        {"GET", ADMIN "/trust", 200, "{\"pins\":[]}"},
    };
    expect_all(state, x, sizeof(x) / sizeof(x[0]));
}

/* ---- /metrics ---- */

static void metrics_need_no_token_and_read_the_store_and_the_allowlist(void **state)
{
    ut_resp r;
    ut_get(&r, ut_app_port(state), "/metrics", NULL);
    assert_int_equal(r.status, 200);
    char ct[128];
    assert_true(ut_resp_header(&r, "Content-Type", ct, sizeof(ct)));
    assert_string_equal(ct, METRICS_CONTENT_TYPE);
    const char *m = ut_body(&r);
    static const char *const lines[] = {
        "crcr_build_info{version=\"" CRCR_VERSION "\"} 1\n",
        "crcr_dry_run 1\n",
        "crcr_store_up 1\n",
        "crcr_outbox_rows{state=\"queued\"} 3\n", /* del-42: two dispatches, del-7: one */
        "crcr_outbox_rows{state=\"dead\"} 0\n",
        "crcr_allowlist_loaded 1\n",
        "crcr_allowlist_repos 3\n",
        "crcr_allowlist_refresh_failing 0\n",
        "crcr_last_webhook_timestamp_seconds 0\n",
        "# TYPE crcr_http_inflight_requests gauge\n",
    };
    for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
        if (!strstr(m, lines[i]))
            fail_msg("/metrics lacks '%s'", lines[i]);
    /* no series names a repository or a delivery */
    assert_null(strstr(m, "example-org"));
    assert_null(strstr(m, "del-42"));
    ut_resp_free(&r);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, ut_app_teardown)

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        T(admin_routes_need_the_bearer_token),
        T(the_scheme_is_case_insensitive_and_spaces_before_the_token_are_skipped),
        T(without_an_admin_token_only_metrics_exists),
        T(the_listing_filters_and_validates_its_arguments),
        T(a_delivery_document_has_the_delivery_and_its_outbox),
        T(redeliver_requeues_the_dispatch_rows),
        T(trust_pins_are_listed_and_reset),
        T(metrics_need_no_token_and_read_the_store_and_the_allowlist),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
