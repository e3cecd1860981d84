/* Unit tests for the delivery document (delivery_doc.h) over a real (in-memory SQLite) store:
 * the exact shape of both views (key order included), what each view shows of an outbox row
 * (bodies only to the admin, scrubbed and cut error texts only to the HUD), bodies that cannot
 * be JSON strings, the dry-run body rebuilt as the worker builds it, and the heads' list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "delivery_doc.h"
#include "dispatch.h"
#include "json.h"

#define T0 1800000000000LL
#define ISO0 "2027-01-15T08:00:00Z"
#define ISO1 "2027-01-15T08:03:20Z" /* T0 + 200 s */
#define TOKEN "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
#define CHECK_BODY "{\"name\":\"crcr / o/one\",\"status\":\"completed\",\"conclusion\":\"failure\"}"
#define CHECK_BODY_JSON                                                                            \
    "\"{\\\"name\\\":\\\"crcr / o/one\\\",\\\"status\\\":\\\"completed\\\",\\\"conclusion\\\":"    \
    "\\\"failure\\\"}\""
#define HEAD                                                                                       \
    "\"delivery_id\":\"d1\",\"event\":\"pull_request\",\"action\":\"opened\",\"upstream_repo\":"   \
    "\"pytorch/pytorch\",\"pr_number\":7,\"head_sha\":\"abc1234\",\"ref\":null,\"received_at\":"   \
    "\"" ISO0 "\",\"payload_bytes\":12,\"status\":\"queued\",\"recovered\":false"

static void ingest(store *st, const char *id, const char *event, int64_t pr, int64_t at,
                   const store_new_job *jobs, size_t n)
{
    static const char payload[] = "{\"number\":7}";
    store_delivery d = {.delivery_id = id,
                        .event = event,
                        .action = pr ? "opened" : NULL,
                        .upstream_repo = "pytorch/pytorch",
                        .pr_number = pr,
                        .head_sha = "abc1234",
                        .ref = pr ? NULL : "refs/heads/main",
                        .received_at = at,
                        .payload = payload,
                        .payload_len = sizeof(payload) - 1,
                        .status = "queued"};
    assert_int_equal(store_ingest(st, &d, jobs, n), CRCR_OK);
}

/* Claims the row due at `at` and finishes it (state NULL: back to the queue, retrying). */
static void settle(store *st, int64_t at, const char *state, long status, const char *error,
                   const char *note)
{
    store_job job;
    assert_int_equal(store_claim(st, at, 60000, &job), CRCR_OK);
    if (state)
        assert_int_equal(store_job_finish(st, &job, state, status, error, note, NULL, 0, at + 10),
                         CRCR_OK);
    else
        assert_int_equal(store_job_retry(st, &job, at + 600010, true, status, error), CRCR_OK);
    store_job_free(&job);
}

/* d1: a PR delivery with a sent and a retrying dispatch, a check run, and two rows whose bodies
 * cannot be JSON strings (not UTF-8, a NUL). */
static store *world(void)
{
    store *st = NULL;
    char err[256];
    assert_int_equal(store_open("sqlite::memory:", &st, err, sizeof(err)), CRCR_OK);
    store_new_job jobs[] = {
        {.kind = "dispatch", .target = "o/sent", .due_at = T0},
        {.kind = "dispatch", .target = "o/retry", .due_at = T0 + 1},
        {.kind = "check_run",
         .target = "pytorch/pytorch",
         .body = CHECK_BODY,
         .body_len = strlen(CHECK_BODY),
         .due_at = T0 + 100000},
        {.kind = "hud_forward",
         .target = "hud",
         .body = "\xff{}",
         .body_len = 3,
         .due_at = T0 + 200000},
        {.kind = "hud_forward",
         .target = "hud",
         .body = "x\0y",
         .body_len = 3,
         .due_at = T0 + 200000},
    };
    ingest(st, "d1", "pull_request", 7, T0, jobs, 5);
    settle(st, T0, "sent", 204, NULL, "payload.pull_request.body");
    settle(st, T0 + 1, NULL, 502, "Bad credentials " TOKEN, NULL);
    return st;
}

static void the_admin_view_nests_the_head_and_shows_bodies(void **state)
{
    store *st = world();
    buf_t b;
    buf_init(&b, DDOC_ADMIN_MAX);
    assert_int_equal(ddoc_admin(st, NULL, "d1", &b), CRCR_OK);
    assert_string_equal(
        buf_cstr(&b),
        "{\"delivery\":{" HEAD "},\"outbox\":["
        "{\"id\":1,\"kind\":\"dispatch\",\"target\":\"o/sent\",\"state\":\"sent\",\"attempts\":1,"
        "\"last_status\":204,\"last_error\":null,\"note\":\"payload.pull_request.body\","
        "\"next_attempt_at\":\"" ISO0 "\",\"done_at\":\"" ISO0 "\",\"body\":null},"
        "{\"id\":2,\"kind\":\"dispatch\",\"target\":\"o/retry\",\"state\":\"queued\","
        "\"attempts\":1,\"last_status\":502,\"last_error\":\"Bad credentials " TOKEN "\","
        "\"note\":null,\"next_attempt_at\":\"2027-01-15T08:10:00Z\",\"done_at\":null,"
        "\"body\":null},"
        "{\"id\":3,\"kind\":\"check_run\",\"target\":\"pytorch/pytorch\",\"state\":\"queued\","
        "\"attempts\":0,\"last_status\":null,\"last_error\":null,\"note\":null,"
        "\"next_attempt_at\":\"2027-01-15T08:01:40Z\",\"done_at\":null,\"body\":" CHECK_BODY_JSON
        "},"
        "{\"id\":4,\"kind\":\"hud_forward\",\"target\":\"hud\",\"state\":\"queued\",\"attempts\":0,"
        "\"last_status\":null,\"last_error\":null,\"note\":null,\"next_attempt_at\":\"" ISO1 "\","
        "\"done_at\":null,\"body\":null},"
        "{\"id\":5,\"kind\":\"hud_forward\",\"target\":\"hud\",\"state\":\"queued\",\"attempts\":0,"
        "\"last_status\":null,\"last_error\":null,\"note\":null,\"next_attempt_at\":\"" ISO1 "\","
        "\"done_at\":null,\"body\":null}]}");
    /* What jansson reads back: the admin API and the CLI hand the document on as a jv. */
    jv *doc = jv_parse(b.data, b.len, NULL, 0);
    assert_non_null(doc);
    jv_free(doc);

    buf_reset(&b);
    assert_int_equal(ddoc_admin(st, NULL, "no-such-id", &b), CRCR_E_NOT_FOUND);
    assert_int_equal(b.len, 0);
    buf_free(&b);
    store_close(st);
}

typedef struct load {
    arena a;
    ddoc_delivery d;
    ddoc_view v;
} load;

static void load_delivery(void *ctx, const store_delivery_row *r, const char *p, size_t n)
{
    load *l = ctx;
    ddoc_copy_delivery(&l->a, &l->d, r);
}

static void load_job(void *ctx, const store_job_row *j)
{
    load *l = ctx;
    assert_true(ddoc_add_job(&l->a, &l->d, j, l->v));
}

static void load_init(load *l, store *st, const char *id, ddoc_view v)
{
    memset(l, 0, sizeof(*l));
    arena_init(&l->a, 1u << 20);
    l->v = v;
    assert_int_equal(store_get_delivery(st, id, load_delivery, load_job, l), CRCR_OK);
    assert_false(l->a.oom);
}

static void load_free(load *l)
{
    ddoc_free_jobs(&l->d);
    arena_free(&l->a);
}

static void the_hud_view_is_flat_scrubbed_and_without_bodies(void **state)
{
    store *st = world();
    load l;
    load_init(&l, st, "d1", DDOC_HUD);
    buf_t b;
    buf_init(&b, 1u << 20);
    jw w;
    jw_init(&w, &b);
    ddoc_write(&w, &l.d, DDOC_HUD);
    assert_int_equal(w.err, CRCR_OK);
    assert_string_equal(
        buf_cstr(&b),
        "{" HEAD ",\"outbox\":["
        "{\"id\":1,\"kind\":\"dispatch\",\"target\":\"o/sent\",\"state\":\"sent\","
        "\"dispatch_state\":\"sent\",\"attempts\":1,\"last_status\":204,\"last_error\":null,"
        "\"note\":\"payload.pull_request.body\",\"created_at\":\"" ISO0 "\","
        "\"next_attempt_at\":null,\"done_at\":\"" ISO0 "\"},"
        "{\"id\":2,\"kind\":\"dispatch\",\"target\":\"o/retry\",\"state\":\"queued\","
        "\"dispatch_state\":\"retrying\",\"attempts\":1,\"last_status\":502,"
        "\"last_error\":\"Bad credentials ghs_[REDACTED]\",\"note\":null,\"created_at\":\"" ISO0
        "\",\"next_attempt_at\":\"2027-01-15T08:10:00Z\",\"done_at\":null},"
        "{\"id\":3,\"kind\":\"check_run\",\"target\":\"pytorch/pytorch\",\"state\":\"queued\","
        "\"dispatch_state\":\"queued\",\"attempts\":0,\"last_status\":null,\"last_error\":null,"
        "\"note\":null,\"created_at\":\"" ISO0 "\",\"next_attempt_at\":\"2027-01-15T08:01:40Z\","
        "\"done_at\":null,\"check_run\":{\"name\":\"crcr / o/one\",\"status\":\"completed\","
        "\"conclusion\":\"failure\"}},"
        "{\"id\":4,\"kind\":\"hud_forward\",\"target\":\"hud\",\"state\":\"queued\","
        "\"dispatch_state\":\"queued\",\"attempts\":0,\"last_status\":null,\"last_error\":null,"
        "\"note\":null,\"created_at\":\"" ISO0 "\",\"next_attempt_at\":\"" ISO1 "\","
        "\"done_at\":null},"
        "{\"id\":5,\"kind\":\"hud_forward\",\"target\":\"hud\",\"state\":\"queued\","
        "\"dispatch_state\":\"queued\",\"attempts\":0,\"last_status\":null,\"last_error\":null,"
        "\"note\":null,\"created_at\":\"" ISO0 "\",\"next_attempt_at\":\"" ISO1 "\","
        "\"done_at\":null}]}");
    for (size_t i = 0; i < l.d.n_jobs; i++)
        assert_null(l.d.jobs[i].body);
    buf_free(&b);
    load_free(&l);
    store_close(st);
}

static void hud_error_texts_are_cut_before_scrubbing_and_admin_ones_are_whole(void **state)
{
    store *st = NULL;
    char err[256];
    assert_int_equal(store_open("sqlite::memory:", &st, err, sizeof(err)), CRCR_OK);
    store_new_job job = {.kind = "dispatch", .target = "o/dead", .due_at = T0};
    ingest(st, "d3", "push", 0, T0, &job, 1);
    char long_error[3100];
    int k = snprintf(long_error, sizeof(long_error), "%s ", TOKEN);
    memset(long_error + k, 'x', 3000);
    long_error[k + 3000] = '\0';
    settle(st, T0, "dead", 422, long_error, NULL);

    load l;
    load_init(&l, st, "d3", DDOC_HUD);
    const char *shown = l.d.jobs[0].last_error;
    assert_int_equal(strncmp(shown, "ghs_[REDACTED] xxx", 18), 0);
    /* DDOC_ERROR_MAX bytes of the stored text: the 40-byte token, a space and 983 x. */
    assert_int_equal(strlen(shown), strlen("ghs_[REDACTED] ") + DDOC_ERROR_MAX - 41);
    load_free(&l);

    load_init(&l, st, "d3", DDOC_ADMIN);
    assert_string_equal(l.d.jobs[0].last_error, long_error);
    load_free(&l);
    store_close(st);
}

static void a_dry_run_dispatch_shows_the_body_the_worker_would_send(void **state)
{
    store *st = NULL;
    char err[256];
    assert_int_equal(store_open("sqlite::memory:", &st, err, sizeof(err)), CRCR_OK);
    store_new_job job = {.kind = "dispatch", .target = "o/dry", .due_at = T0};
    ingest(st, "d2", "push", 0, T0, &job, 1);
    settle(st, T0, "dry_run", 0, NULL, NULL);

    crcr_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    char secret[] = "webhook-secret-for-the-test";
    cfg.app_secret = secret;
    cfg.dispatch_budget = 65000;
    dispatch_src src = {.event = "push",
                        .delivery_id = "d2",
                        .payload = "{\"number\":7}",
                        .payload_len = 12,
                        .target = "o/dry",
                        .head_sha = "abc1234"};
    dispatch_output out;
    dispatch_output_init(&out);
    assert_int_equal(dispatch_row_body(&cfg, &src, &out, err, sizeof(err)), CRCR_OK);
    buf_t want;
    buf_init(&want, 1u << 20);
    buf_puts(&want, "\"body\":");
    assert_int_equal(jv_quote(&want, out.body.data, out.body.len), CRCR_OK);
    buf_puts(&want, "}]}");
    dispatch_output_free(&out);

    buf_t b;
    buf_init(&b, DDOC_ADMIN_MAX);
    assert_int_equal(ddoc_admin(st, &cfg, "d2", &b), CRCR_OK);
    assert_true(b.len > want.len);
    assert_string_equal(buf_cstr(&b) + b.len - want.len, buf_cstr(&want));
    assert_non_null(strstr(buf_cstr(&b), "\"state\":\"dry_run\""));
    /* Without a configuration there is nothing to rebuild it with. */
    buf_reset(&b);
    assert_int_equal(ddoc_admin(st, NULL, "d2", &b), CRCR_OK);
    assert_non_null(strstr(buf_cstr(&b), "\"body\":null}]}"));
    buf_free(&b);
    buf_free(&want);
    store_close(st);
}

static void the_list_holds_the_heads_newest_first(void **state)
{
    store *st = world();
    store_new_job job = {.kind = "dispatch", .target = "o/one", .due_at = T0 + 5};
    ingest(st, "d9", "push", 0, T0 + 5000, &job, 1);
    buf_t b;
    buf_init(&b, DDOC_ADMIN_MAX);
    store_filter f = {.limit = 10};
    assert_int_equal(ddoc_admin_list(st, &f, &b), CRCR_OK);
    assert_string_equal(
        buf_cstr(&b),
        "[{\"delivery_id\":\"d9\",\"event\":\"push\",\"action\":null,"
        "\"upstream_repo\":\"pytorch/pytorch\",\"pr_number\":0,\"head_sha\":"
        "\"abc1234\",\"ref\":\"refs/heads/main\",\"received_at\":\"2027-01-15T08:"
        "00:05Z\",\"payload_bytes\":12,\"status\":\"queued\",\"recovered\":false},{" HEAD "}]");
    buf_reset(&b);
    f.state = "dead";
    assert_int_equal(ddoc_admin_list(st, &f, &b), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "[]");
    /* A list that passes the output's cap fails whole. */
    buf_t small;
    buf_init(&small, 64);
    f.state = NULL;
    assert_int_equal(ddoc_admin_list(st, &f, &small), CRCR_E_TOO_LARGE);
    buf_free(&small);
    buf_free(&b);
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_admin_view_nests_the_head_and_shows_bodies),
        cmocka_unit_test(the_hud_view_is_flat_scrubbed_and_without_bodies),
        cmocka_unit_test(hud_error_texts_are_cut_before_scrubbing_and_admin_ones_are_whole),
        cmocka_unit_test(a_dry_run_dispatch_shows_the_body_the_worker_would_send),
        cmocka_unit_test(the_list_holds_the_heads_newest_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
