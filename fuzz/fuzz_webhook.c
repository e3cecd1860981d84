/*
 * fuzz_webhook.c - libFuzzer target for webhook routing and field extraction (webhook_classify).
 *
 * Input layout: byte 0 picks the X-GitHub-Event header and the spelling of the upstream repo,
 * the rest is the webhook body, parsed with jv_parse() as the handler does:
 *   bits 0-2  event: pull_request, push, check_run, check_suite, then (for 4..7) an event the
 *             router never dispatches ("issues"), which must always be ignored;
 *   bit 3     upstream repo "pytorch/pytorch" or "PyTorch/PyTorch" (matching is case-insensitive).
 *
 * Invariants checked (abort on violation), restated from webhook.h rather than from webhook.c:
 *   - the answer is deterministic and `action` is the body's own "action" string (borrowed);
 *   - anything but IGNORE needs repository.full_name equal to the upstream repo ignoring case;
 *     a body from the upstream repo with push, or pull_request opened/reopened/synchronize/closed,
 *     is always DISPATCH, and DISPATCH happens for nothing else;
 *   - LABEL only for pull_request "labeled" whose label.name is "ciflow/crcr/<device>" with a
 *     non-empty device shorter than the label limit; device points into that label;
 *   - RERUN_RUN only for check_run "rerequested" on a check named "crcr/<owner>/<repo>/...": the
 *     repo has exactly one '/', both halves non-empty, NUL-terminated in its field, and run_id > 0
 *     is the leading number of check_run.external_id (which must fit an int64);
 *   - RERUN_SUITE only for check_suite "rerequested" with check_suite.id the positive suite_id;
 *   - completeness: a body the contract routes (by the rules above) is routed that way;
 *   - fields that belong to other kinds stay zero (an IGNORE may keep what it read before it
 *     refused); an IGNORE reason, if any, is non-empty, and other kinds have none.
 * Seeds: fuzz/corpus/webhook/ (real-shaped bodies with the event byte in front).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json.h"
#include "crcr_limits.h"
#include "webhook.h"
#include "fuzz_check.h"

static const char *const events[8] = {"pull_request", "push",   "check_run", "check_suite",
                                      "issues",       "issues", "issues",    "issues"};

static int is(const char *s, const char *lit)
{
    return s && strcmp(s, lit) == 0;
}

/* The leading decimal number of an external_id ("{run_id}:{pr}" or "{run_id}"), -1 when there
 * is none and -2 when it does not fit an int64 (such an id names no run). */
static int64_t leading_number(const char *s)
{
    int64_t v = 0;
    size_t n = 0;
    for (; s && s[n] >= '0' && s[n] <= '9'; n++) {
        int d = s[n] - '0';
        if (v > (INT64_MAX - d) / 10)
            return -2;
        v = v * 10 + d;
    }
    return n ? v : -1;
}

/* Whether a check named `name` with `ext` is one crcr created (checks.h):
 * "crcr/<owner>/<repo>/<rest>" with non-empty parts and a repo that fits the route, and
 * "<run_id>[:<anything>]" with a run id in 1..INT64_MAX. */
static int crcr_check(const char *name, const char *ext)
{
    if (!name || !ext || strncmp(name, "crcr/", 5) != 0)
        return 0;
    const char *owner = name + 5, *s1 = strchr(owner, '/');
    if (!s1 || s1 == owner)
        return 0;
    const char *s2 = strchr(s1 + 1, '/');
    if (!s2 || s2 == s1 + 1 || s2[1] == '\0' || (size_t)(s2 - owner) >= CRCR_REPO_NAME_MAX)
        return 0;
    int64_t run = leading_number(ext);
    size_t digits = strspn(ext, "0123456789");
    return run > 0 && (ext[digits] == '\0' || ext[digits] == ':');
}

static void check_route(const char *event, const jv *doc, const char *upstream,
                        const webhook_route *r)
{
    const char *repo = jv_path_str(doc, "repository.full_name");
    const char *action = jv_path_str(doc, "action");
    int upstream_match = repo && strcasecmp(repo, upstream) == 0;

    CHECK(r->action == action);
    CHECK(r->kind >= WEBHOOK_IGNORE && r->kind <= WEBHOOK_PAIR_PUSH);
    /* Everything but a push to a paired downstream PR comes from upstream (§3.13). */
    if (r->kind != WEBHOOK_IGNORE && r->kind != WEBHOOK_PAIR_PUSH)
        CHECK(upstream_match);
    if (r->kind == WEBHOOK_PAIR_PUSH)
        CHECK(!upstream_match && is(event, "pull_request") && is(action, "synchronize"));
    if (r->kind == WEBHOOK_EDIT)
        CHECK(is(event, "pull_request") && is(action, "edited"));
    if (r->kind != WEBHOOK_LABEL)
        CHECK(r->device == NULL);
    /* An ignored check_run may keep what was read before it was refused; other kinds not. */
    if (r->kind == WEBHOOK_DISPATCH || r->kind == WEBHOOK_LABEL || r->kind == WEBHOOK_RERUN_SUITE)
        CHECK(r->repo[0] == '\0' && r->run_id == 0);
    if (r->kind != WEBHOOK_RERUN_SUITE && r->kind != WEBHOOK_IGNORE)
        CHECK(r->suite_id == 0);
    if (r->kind != WEBHOOK_IGNORE)
        CHECK(r->reason == NULL);
    else if (r->reason)
        CHECK(r->reason[0] != '\0');

    int pr_dispatch =
        is(event, "pull_request") && (is(action, "opened") || is(action, "reopened") ||
                                      is(action, "synchronize") || is(action, "closed"));
    if (upstream_match && (is(event, "push") || pr_dispatch))
        CHECK(r->kind == WEBHOOK_DISPATCH);
    if (r->kind == WEBHOOK_DISPATCH)
        CHECK(is(event, "push") || pr_dispatch);
    if (is(event, "issues"))
        CHECK(r->kind == WEBHOOK_IGNORE);

    /* Completeness: what the contract routes is routed. */
    const char *label = jv_path_str(doc, "label.name");
    if (upstream_match && is(event, "pull_request") && is(action, "labeled") && label &&
        strncmp(label, "ciflow/crcr/", 12) == 0 && label[12] && strlen(label) < CRCR_LABEL_MAX)
        CHECK(r->kind == WEBHOOK_LABEL);
    if (upstream_match && is(event, "check_run") && is(action, "rerequested") &&
        crcr_check(jv_path_str(doc, "check_run.name"), jv_path_str(doc, "check_run.external_id")))
        CHECK(r->kind == WEBHOOK_RERUN_RUN);
    int64_t suite = 0;
    if (upstream_match && is(event, "check_suite") && is(action, "rerequested") &&
        jv_int(jv_path(doc, "check_suite.id"), &suite) && suite > 0)
        CHECK(r->kind == WEBHOOK_RERUN_SUITE);

    switch (r->kind) {
    case WEBHOOK_LABEL: {
        CHECK(is(event, "pull_request") && is(action, "labeled"));
        CHECK(label && strncmp(label, "ciflow/crcr/", 12) == 0);
        CHECK(r->device == label + 12);
        CHECK(r->device[0] != '\0');
        CHECK(strlen(label) < CRCR_LABEL_MAX);
        break;
    }
    case WEBHOOK_RERUN_RUN: {
        CHECK(is(event, "check_run") && is(action, "rerequested"));
        CHECK(memchr(r->repo, '\0', sizeof(r->repo)) != NULL);
        const char *slash = strchr(r->repo, '/');
        CHECK(slash && slash != r->repo && slash[1] != '\0' && strchr(slash + 1, '/') == NULL);
        const char *name = jv_path_str(doc, "check_run.name");
        size_t rl = strlen(r->repo);
        CHECK(name && strncmp(name, "crcr/", 5) == 0 && strncmp(name + 5, r->repo, rl) == 0 &&
              name[5 + rl] == '/');
        CHECK(r->run_id > 0);
        const char *ext = jv_path_str(doc, "check_run.external_id");
        CHECK(ext && ext[0] >= '0' && ext[0] <= '9');
        CHECK(r->run_id == leading_number(ext));
        break;
    }
    case WEBHOOK_RERUN_SUITE: {
        int64_t id = 0;
        CHECK(is(event, "check_suite") && is(action, "rerequested"));
        CHECK(jv_int(jv_path(doc, "check_suite.id"), &id) && id > 0 && id == r->suite_id);
        break;
    }
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *event = events[data[0] & 7u];
    const char *upstream = (data[0] & 8u) ? "PyTorch/PyTorch" : "pytorch/pytorch";
    jv *doc = jv_parse((const char *)data + 1, size - 1, NULL, 0);
    if (!doc)
        return 0;

    webhook_route a, b;
    memset(&a, 0xa5, sizeof(a));
    webhook_classify(event, doc, upstream, &a);
    check_route(event, doc, upstream, &a);

    webhook_classify(event, doc, upstream, &b);
    CHECK(a.kind == b.kind && a.reason == b.reason && a.action == b.action &&
          a.device == b.device && a.run_id == b.run_id && a.suite_id == b.suite_id &&
          strcmp(a.repo, b.repo) == 0);

    jv_free(doc);
    return 0;
}
