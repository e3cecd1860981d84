/*
 * fuzz_callback.c - libFuzzer target for callback body validation (callback_parse): the input is
 * a POST /github/callback body, parsed with jv_parse() as the handler does.
 *
 * Invariants checked (abort on violation), for a GitHub and a Buildkite caller, restated from
 * callback.h and the upstream contract:
 *   - the answer is deterministic;
 *   - on success: delivery_id non-empty and shorter than CRCR_DELIVERY_ID_MAX; workflow.name
 *     present; run_id valid text (ids_run_id_valid), all digits for a GitHub caller, the decimal
 *     of the body's number when it is a JSON integer; run_attempt > 0 (equal to the body's
 *     number when it is a JSON integer, 1 when absent or null); status in_progress or completed;
 *     job_name absent or at most CRCR_JOB_NAME_MAX bytes; no conclusion while in_progress, one of
 *     GitHub's (lower case) when completed; links absent or https://; head_sha absent or shorter
 *     than CRCR_SHA_MAX; every other string borrowed from the body (pointer into it);
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
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "vocab.h"
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

static void check_success(const jv *body, crcr_issuer_kind kind, const cb_fields *f)
{
    const jv *wf = jv_get(body, "workflow");
    CHECK(f->delivery_id && f->delivery_id == str_at(body, "delivery_id"));
    CHECK(f->delivery_id[0] != '\0' && strlen(f->delivery_id) < CRCR_DELIVERY_ID_MAX);
    CHECK(f->event_type == str_at(body, "event_type"));
    CHECK(f->status == str_at(wf, "status"));
    CHECK(is(f->status, "in_progress") || is(f->status, "completed"));
    CHECK(f->workflow_name && f->workflow_name == str_at(wf, "name"));

    CHECK(ids_run_id_valid(f->run_id));
    if (kind == CRCR_ISSUER_GITHUB)
        CHECK(strspn(f->run_id, "0123456789") == strlen(f->run_id) && f->run_id[0] != '0');
    int64_t v;
    if (jv_int(jv_get(wf, "run_id"), &v)) {
        char dec[24];
        snprintf(dec, sizeof(dec), "%lld", (long long)v);
        CHECK(v > 0 && strcmp(dec, f->run_id) == 0);
    }
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
        CHECK(conclusion_parse(f->conclusion) != CONCLUSION_UNKNOWN);
    CHECK(!f->artifact_url || strncmp(f->artifact_url, "https://", 8) == 0);
    CHECK(!f->details_url || strncmp(f->details_url, "https://", 8) == 0);
    if (f->head_sha)
        CHECK(strlen(f->head_sha) < CRCR_SHA_MAX);
    CHECK(f->token == str_at(body, "callback_token"));
}

/* One caller kind: callback_parse twice on the same body, the invariants above. */
static void check_kind(const jv *body, crcr_issuer_kind kind)
{
    cb_fields f, g;
    char detail[FZ_DETAIL_MAX], detail2[FZ_DETAIL_MAX];
    memset(&f, 0xa5, sizeof(f));
    memset(detail, 0, sizeof(detail));
    memset(detail2, 0, sizeof(detail2));
    bool ok = callback_parse(body, kind, &f, detail, sizeof(detail));
    bool ok2 = callback_parse(body, kind, &g, detail2, sizeof(detail2));
    CHECK(ok == ok2);
    if (ok) {
        check_success(body, kind, &f);
        CHECK(memcmp(&f, &g, sizeof(f)) == 0);
    } else {
        CHECK(detail[0] != '\0');
        CHECK(memchr(detail, '\0', sizeof(detail)) != NULL);
        CHECK(strcmp(detail, detail2) == 0);
        CHECK(utf8_valid(detail));

        /* A tiny heap buffer: ASan sees any write past it; the text must stay a prefix. */
        char *small = malloc(FZ_DETAIL_SMALL);
        CHECK(small != NULL);
        CHECK(!callback_parse(body, kind, &g, small, FZ_DETAIL_SMALL));
        CHECK(memchr(small, '\0', FZ_DETAIL_SMALL) != NULL);
        CHECK(strncmp(small, detail, strlen(small)) == 0);
        free(small);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jv *body = jv_parse((const char *)data, size, NULL, 0);
    if (!body)
        return 0;
    check_kind(body, CRCR_ISSUER_GITHUB);
    check_kind(body, CRCR_ISSUER_BUILDKITE);
    jv_free(body);
    return 0;
}
