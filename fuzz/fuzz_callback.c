/*
 * fuzz_callback.c - libFuzzer target for callback body validation (callback_parse): the input is
 * a POST /github/callback body, parsed with jv_parse() as the handler does.
 *
 * Invariants checked (abort on violation), restated from callback.h and the upstream contract:
 *   - the answer is deterministic;
 *   - on success: delivery_id non-empty and shorter than CRCR_DELIVERY_ID_MAX; workflow.name
 *     present; run_id > 0 and run_attempt > 0 (equal to the body's numbers when they are JSON
 *     integers, run_attempt 1 when absent or null); status in_progress or completed; job_name
 *     absent or at most CRCR_JOB_NAME_MAX bytes; no conclusion while in_progress; head_sha absent
 *     or shorter than CRCR_SHA_MAX; every string borrowed from the body (pointer into it);
 *   - on failure: the detail is non-empty, NUL-terminated in a small buffer too (truncation is
 *     safe) and valid UTF-8, since it becomes the JSON body of the 400 answer.
 * Seeds: fuzz/corpus/callback/.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callback.h"
#include "json.h"
#include "crcr_limits.h"
#include "fuzz_check.h"

/* A detail buffer as large as the handler's (512 bytes in callback.c), and a tiny one. */
#define FZ_DETAIL_MAX 512u
#define FZ_DETAIL_SMALL 7u

static int is(const char *s, const char *lit)
{
    return s && strcmp(s, lit) == 0;
}

/* True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        p += n + 1;
    }
    return true;
}

/* The body's string at `path` of `root`, for pointer comparisons. */
static const char *str_at(const jv *root, const char *path)
{
    return jv_path_str(root, path);
}

static void check_success(const jv *body, const cb_fields *f)
{
    const jv *wf = jv_get(body, "workflow");
    CHECK(f->delivery_id && f->delivery_id == str_at(body, "delivery_id"));
    CHECK(f->delivery_id[0] != '\0' && strlen(f->delivery_id) < CRCR_DELIVERY_ID_MAX);
    CHECK(f->event_type == str_at(body, "event_type"));
    CHECK(f->status == str_at(wf, "status"));
    CHECK(is(f->status, "in_progress") || is(f->status, "completed"));
    CHECK(f->workflow_name && f->workflow_name == str_at(wf, "name"));

    CHECK(f->run_id > 0);
    int64_t v;
    if (jv_int(jv_get(wf, "run_id"), &v))
        CHECK(v == f->run_id);
    CHECK(f->run_attempt > 0);
    const jv *attempt = jv_get(wf, "run_attempt");
    if (!attempt || jv_is_null(attempt))
        CHECK(f->run_attempt == 1);
    else if (jv_int(attempt, &v))
        CHECK(v == f->run_attempt);

    if (f->job_name) {
        CHECK(f->job_name == str_at(wf, "job_name"));
        CHECK(strlen(f->job_name) <= CRCR_JOB_NAME_MAX);
    }
    if (is(f->status, "in_progress"))
        CHECK(f->conclusion == NULL);
    else
        CHECK(f->conclusion == NULL || f->conclusion == str_at(wf, "conclusion"));
    if (f->head_sha)
        CHECK(strlen(f->head_sha) < CRCR_SHA_MAX);
    CHECK(f->labels == jv_path(jv_get(body, "payload"), "pull_request.labels"));
    CHECK(f->token == str_at(body, "callback_token"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jv *body = jv_parse((const char *)data, size, NULL, 0);
    if (!body)
        return 0;

    cb_fields f, g;
    char detail[FZ_DETAIL_MAX], detail2[FZ_DETAIL_MAX];
    memset(&f, 0xa5, sizeof(f));
    memset(detail, 0, sizeof(detail));
    memset(detail2, 0, sizeof(detail2));
    bool ok = callback_parse(body, &f, detail, sizeof(detail));
    bool ok2 = callback_parse(body, &g, detail2, sizeof(detail2));
    CHECK(ok == ok2);
    if (ok) {
        check_success(body, &f);
        CHECK(memcmp(&f, &g, sizeof(f)) == 0);
    } else {
        CHECK(detail[0] != '\0');
        CHECK(memchr(detail, '\0', sizeof(detail)) != NULL);
        CHECK(strcmp(detail, detail2) == 0);
        CHECK(utf8_valid(detail));

        /* A tiny heap buffer: ASan sees any write past it; the text must stay a prefix. */
        char *small = malloc(FZ_DETAIL_SMALL);
        CHECK(small != NULL);
        CHECK(!callback_parse(body, &g, small, FZ_DETAIL_SMALL));
        CHECK(memchr(small, '\0', FZ_DETAIL_SMALL) != NULL);
        CHECK(strncmp(small, detail, strlen(small)) == 0);
        free(small);
    }
    jv_free(body);
    return 0;
}
