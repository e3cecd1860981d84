/*
 * fuzz_dispatch.c - libFuzzer target for dispatch_build(): the input is the webhook payload, built
 * with small budgets so that the trimming path runs on most inputs.
 *
 * Invariants checked (abort on violation):
 *   - the result is CRCR_OK, CRCR_E_INVALID, CRCR_E_PERMANENT (or CRCR_E_NOMEM under a memory
 *     limit); on error the body is empty and the reason non-empty;
 *   - on success the body fits the budget; untrimmed means the exact envelope around the input
 *     bytes; trimmed means valid JSON whose always-kept fields equal the input's;
 *   - an input whose untrimmed body fits is never trimmed; CRCR_E_INVALID only for a payload that
 *     is not a JSON object; the same input gives the same bytes twice;
 *   - where dispatch_row_verbatim says yes (a dry-run row is then done without its body),
 *     dispatch_row_body builds the body untrimmed and within the budget.
 * Seeds: fuzz/corpus/dispatch/.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "json.h"
#include "fuzz_check.h"

static const char head[] = "{\"event_type\":\"pull_request\",\"client_payload\":{\"event_type\":"
                           "\"pull_request\",\"delivery_id\":\"d-1\",\"payload\":";
static const char tail[] = ",\"callback_token\":\"t.1\"}}";

static const char *const kept[] = {
    "action",
    "number",
    "pull_request.number",
    "pull_request.state",
    "pull_request.merged",
    "pull_request.head.sha",
    "pull_request.head.ref",
    "pull_request.head.repo.full_name",
    "pull_request.base.sha",
    "pull_request.base.ref",
    "pull_request.draft",
    "pull_request.html_url",
    "repository.full_name",
    "ref",
    "before",
    "after",
    "deleted",
    "created",
    "forced",
};

/* True when `a` and `b` are both absent or serialise identically. */
static int same(const jv *a, const jv *b)
{
    if (!a || !b)
        return a == b;
    buf_t x, y;
    buf_init(&x, 1u << 26);
    buf_init(&y, 1u << 26);
    int eq = jv_dump(a, &x) == CRCR_OK && jv_dump(b, &y) == CRCR_OK && x.len == y.len &&
             (x.len == 0 || memcmp(x.data, y.data, x.len) == 0);
    buf_free(&x);
    buf_free(&y);
    return eq;
}

static void check_trimmed(const uint8_t *data, size_t size, const dispatch_output *out)
{
    jv *orig = jv_parse((const char *)data, size, NULL, 0);
    CHECK(jv_is_obj(orig));
    jv *body = jv_parse(out->body.data, out->body.len, NULL, 0);
    CHECK(jv_is_obj(body));
    CHECK(jv_path_str(body, "client_payload.callback_token") != NULL);
    jv *got = jv_path(body, "client_payload.payload");
    CHECK(jv_is_obj(got));
    CHECK(jv_is_arr(jv_path(body, "client_payload.trimmed")));
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        CHECK(same(jv_path(orig, kept[i]), jv_path(got, kept[i])));
    jv *ol = jv_path(orig, "pull_request.labels"), *gl = jv_path(got, "pull_request.labels");
    CHECK(jv_arr_len(ol) == jv_arr_len(gl));
    for (size_t i = 0; i < jv_arr_len(ol); i++)
        CHECK(same(jv_get(jv_arr_at(ol, i), "name"), jv_get(jv_arr_at(gl, i), "name")));
    jv_free(body);
    jv_free(orig);
}

static void run(const uint8_t *data, size_t size, size_t budget)
{
    dispatch_input in = {
        .event = "pull_request",
        .delivery_id = "d-1",
        .payload = (const char *)data,
        .payload_len = size,
        .callback_token = "t.1",
        .budget = budget,
    };
    dispatch_output a, b;
    dispatch_output_init(&a);
    dispatch_output_init(&b);
    char err[256], err2[256];
    crcr_err rc = dispatch_build(&in, &a, err, sizeof(err));
    crcr_err rc2 = dispatch_build(&in, &b, err2, sizeof(err2));

    CHECK(rc == rc2);
    CHECK(a.body.len == b.body.len);
    CHECK(a.body.len == 0 || memcmp(a.body.data, b.body.data, a.body.len) == 0);
    CHECK(strcmp(err, err2) == 0);

    size_t untrimmed = sizeof(head) - 1 + size + sizeof(tail) - 1;
    if (size == 0) {
        CHECK(rc == CRCR_E_INVALID);
    } else if (untrimmed <= budget) {
        CHECK(rc == CRCR_OK && !a.trimmed);
    }
    if (rc == CRCR_OK) {
        CHECK(a.body.len <= budget);
        if (!a.trimmed) {
            CHECK(a.body.len == untrimmed);
            CHECK(memcmp(a.body.data, head, sizeof(head) - 1) == 0);
            CHECK(memcmp(a.body.data + sizeof(head) - 1, data, size) == 0);
            CHECK(memcmp(a.body.data + sizeof(head) - 1 + size, tail, sizeof(tail) - 1) == 0);
            CHECK(a.trimmed_note.len == 0);
        } else {
            check_trimmed(data, size, &a);
        }
    } else {
        CHECK(rc == CRCR_E_INVALID || rc == CRCR_E_PERMANENT || rc == CRCR_E_NOMEM);
        CHECK(a.body.len == 0 && !a.trimmed && a.trimmed_note.len == 0);
        CHECK(err[0] != '\0');
        if (rc == CRCR_E_PERMANENT)
            CHECK(strncmp(err, "dispatch body is ", 17) == 0);
        if (rc == CRCR_E_INVALID && size > 0) {
            jv *v = jv_parse((const char *)data, size, NULL, 0);
            CHECK(!jv_is_obj(v));
            jv_free(v);
        }
    }
    dispatch_output_free(&a);
    dispatch_output_free(&b);
}

/* dispatch_row_verbatim's yes is what a dry-run row relies on to skip building its body. */
static void check_verbatim(const uint8_t *data, size_t size, size_t budget)
{
    crcr_config cfg = {.app_secret = "s", .dispatch_budget = budget};
    dispatch_src src = {.event = "pull_request",
                        .delivery_id = "d-1",
                        .payload = (const char *)data,
                        .payload_len = size,
                        .target = "o/r",
                        .head_sha = "abc",
                        .pr_number = 1};
    if (!dispatch_row_verbatim(&cfg, &src))
        return;
    dispatch_output o;
    dispatch_output_init(&o);
    char err[256];
    crcr_err rc = dispatch_row_body(&cfg, &src, &o, err, sizeof(err));
    CHECK(rc == CRCR_OK || rc == CRCR_E_NOMEM);
    if (rc == CRCR_OK)
        CHECK(!o.trimmed && o.body.len <= budget);
    dispatch_output_free(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, 300);
    run(data, size, 1500);
    check_verbatim(data, size, 300);
    check_verbatim(data, size, 1500);
    return 0;
}
