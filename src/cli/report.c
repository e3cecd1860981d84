/*
 * report.c - `crcr report`: builds the downstream callback body and POSTs it to the relay with a
 * freshly minted GitHub Actions OIDC token; see report.h.
 *
 * Hand-written parts and why:
 *  - The body is serialised here (py_dump) instead of with jv_dump(): a downstream switching from
 *    the upstream action must send the same bytes, and report_callback.py sends Python's
 *    json.dumps() form (", " / ": " separators, everything outside printable ASCII escaped as
 *    \uXXXX including DEL, floats in Python's shortest repr). jansson's encoder cannot produce
 *    that (it writes %.17g floats and no DEL escape), and json.h offers only the compact form.
 *    Values still come from json.h (jv_*), the only JSON parser.
 *  - The OIDC token is minted with one HTTP GET (what @actions/core's getIDToken() does), so the
 *    action needs neither node nor actions/github-script. On Buildkite the agent mints it.
 * Minting, sending and retrying are in report_send.c.
 */
#include "report.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "http_client.h"
#include "ids.h"
#include "json.h"
#include "crcr_limits.h"
#include "opts.h"
#include "log.h"
#include "utf8.h"
#include "vocab.h"

/* Upstream's self-report envelope names the upstream repository literally. */
#define REPORT_UPSTREAM_REPO "pytorch/pytorch"
#define REPORT_SCHEMA_VERSION "1"

/* ------------------------------------------------------------------------------------------ */
/* Small helpers                                                                               */

/* A borrowed byte range. */
typedef struct {
    const char *p;
    size_t n;
} span;

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* `s` without surrounding white space (report_callback.py strips these inputs); {NULL,0} for
 * NULL. */
static span trimmed(const char *s)
{
    span r = {s, 0};
    if (!s)
        return r;
    size_t n = strlen(s);
    while (n > 0 && is_space(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_space(s[n - 1]))
        n--;
    r.p = s;
    r.n = n;
    return r;
}

/* The whole of `s` ("" for NULL). */
static span span_of(const char *s)
{
    span r = {s ? s : "", s ? strlen(s) : 0};
    return r;
}

static bool span_is(span s, const char *lit)
{
    return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

static crcr_err fail(char *err, size_t errsz, crcr_err code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes a one-line message to err and returns `code`. */
static crcr_err fail(char *err, size_t errsz, crcr_err code, const char *fmt, ...)
{
    if (err && errsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Whether a span is well-formed UTF-8 (utf8.h). */
static bool span_utf8(span s)
{
    return utf8_valid(s.p, s.n);
}

/* True when s is 1..max ASCII digits. */
static bool all_digits(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Python json.dumps() serialisation                                                           */

/* Appends a string literal the way json.dumps(ensure_ascii=True) writes it. */
static crcr_err py_string(buf_t *out, const char *s, size_t n)
{
    crcr_err err = buf_putc(out, '"');
    size_t run = 0; /* start of the bytes copied unchanged */
    for (size_t i = 0; i < n && !err;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') {
            i++;
            continue;
        }
        err = buf_append(out, s + run, i - run);
        if (err)
            break;
        uint32_t cp = 0xfffd;
        size_t len = 1;
        if (c >= 0x80) {
            len = utf8_decode((const unsigned char *)s + i, n - i, &cp);
            if (len == 0) { /* cannot happen for jansson strings; never emit broken bytes */
                len = 1;
                cp = 0xfffd;
            }
        } else {
            cp = c;
        }
        switch (cp) {
        case '"':
            err = buf_puts(out, "\\\"");
            break;
        case '\\':
            err = buf_puts(out, "\\\\");
            break;
        case '\n':
            err = buf_puts(out, "\\n");
            break;
        case '\r':
            err = buf_puts(out, "\\r");
            break;
        case '\t':
            err = buf_puts(out, "\\t");
            break;
        case '\b':
            err = buf_puts(out, "\\b");
            break;
        case '\f':
            err = buf_puts(out, "\\f");
            break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                err = buf_printf(out, "\\u%04x\\u%04x", (unsigned)(0xd800 + (v >> 10)),
                                 (unsigned)(0xdc00 + (v & 0x3ff)));
            } else {
                err = buf_printf(out, "\\u%04x", (unsigned)cp);
            }
        }
        i += len;
        run = i;
    }
    if (!err)
        err = buf_append(out, s + run, n - run);
    if (!err)
        err = buf_putc(out, '"');
    return err;
}

/* Appends a double as Python's repr() writes it: the shortest digits that read back to the same
 * value, positional notation for decimal exponents -4..15 (with ".0" when integral), otherwise
 * "d.ddde+XX" with at least two exponent digits. */
static crcr_err py_float(buf_t *out, double d)
{
    if (isnan(d))
        return buf_puts(out, "NaN");
    if (isinf(d))
        return buf_puts(out, d < 0 ? "-Infinity" : "Infinity");
    crcr_err err = CRCR_OK;
    if (signbit(d)) {
        err = buf_putc(out, '-');
        d = -d;
    }
    char tmp[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof(tmp), "%.*e", p - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    /* tmp is "D[.DDD]e[+-]XX": collect the digits and the exponent. */
    char digits[24];
    size_t nd = 0;
    const char *q = tmp;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < sizeof(digits) - 1)
            digits[nd++] = *q;
    long e10 = (*q == 'e') ? strtol(q + 1, NULL, 10) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    if (d == 0.0)
        e10 = 0;
    if (err)
        return err;
    if (e10 < -4 || e10 >= 16) {
        err = buf_putc(out, digits[0]);
        if (!err && nd > 1)
            err = buf_printf(out, ".%s", digits + 1);
        if (!err)
            err = buf_printf(out, "e%c%02ld", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
        return err;
    }
    long point = e10 + 1; /* digits before the decimal point */
    if (point <= 0) {
        err = buf_puts(out, "0.");
        for (long i = 0; i < -point && !err; i++)
            err = buf_putc(out, '0');
        if (!err)
            err = buf_puts(out, digits);
    } else if ((size_t)point >= nd) {
        err = buf_puts(out, digits);
        for (size_t i = nd; i < (size_t)point && !err; i++)
            err = buf_putc(out, '0');
        if (!err)
            err = buf_puts(out, ".0");
    } else {
        err = buf_append(out, digits, (size_t)point);
        if (!err)
            err = buf_printf(out, ".%s", digits + point);
    }
    return err;
}

/* Appends `v` in json.dumps() form. Depth is bounded by the parser's CRCR_JSON_MAX_DEPTH plus
 * the two levels this file adds. */
static crcr_err py_dump(const jv *v, buf_t *out)
{
    crcr_err err = CRCR_OK;
    int64_t i64;
    if (jv_is_obj(v)) {
        jv *o = (jv *)v;
        err = buf_putc(out, '{');
        bool first = true;
        for (void *it = jv_iter(o); it && !err; it = jv_iter_next(o, it)) {
            if (!first)
                err = buf_puts(out, ", ");
            first = false;
            const char *k = jv_iter_key(it);
            if (!err)
                err = py_string(out, k, strlen(k));
            if (!err)
                err = buf_puts(out, ": ");
            if (!err)
                err = py_dump(jv_iter_val(it), out);
        }
        return err ? err : buf_putc(out, '}');
    }
    if (jv_is_arr(v)) {
        err = buf_putc(out, '[');
        for (size_t i = 0; i < jv_arr_len(v) && !err; i++) {
            if (i > 0)
                err = buf_puts(out, ", ");
            if (!err)
                err = py_dump(jv_arr_at(v, i), out);
        }
        return err ? err : buf_putc(out, ']');
    }
    if (jv_is_str(v))
        return py_string(out, jv_str(v), jv_str_len(v));
    if (jv_int(v, &i64))
        return buf_printf(out, "%" PRId64, i64);
    if (jv_is_number(v))
        return py_float(out, jv_number(v));
    if (jv_is_bool(v))
        return buf_puts(out, jv_is_true(v) ? "true" : "false");
    if (jv_is_null(v))
        return buf_puts(out, "null");
    return CRCR_E_INVALID;
}

crcr_err report_pydump_text(const char *json, size_t n, buf_t *out)
{
    jv *v = jv_parse(json, n, NULL, 0);
    if (!v)
        return CRCR_E_INVALID;
    crcr_err err = py_dump(v, out);
    jv_free(v);
    return err;
}

/* ------------------------------------------------------------------------------------------ */
/* The body                                                                                    */

/* True when the trimmed delivery id and event type are both given (self-report mode). */
static bool is_self_report(const report_opts *o)
{
    return trimmed(o->delivery_id).n > 0 && trimmed(o->event_type).n > 0;
}

/* Checks what can be checked on the options alone (the usage errors, exit code 2). */
static crcr_err check_opts(const report_opts *o, char *err, size_t errsz)
{
    if (!o->status)
        return fail(err, errsz, CRCR_E_INVALID, "--status is required (in_progress|completed)");
    crcr_run_status status = run_status_parse(o->status);
    bool in_progress = status == RUN_STATUS_IN_PROGRESS;
    if (!in_progress && status != RUN_STATUS_COMPLETED)
        return fail(err, errsz, CRCR_E_INVALID,
                    "--status must be 'in_progress' or 'completed', got '%.64s'", o->status);
    span did = trimmed(o->delivery_id), evt = trimmed(o->event_type);
    if ((did.n > 0) != (evt.n > 0))
        return fail(err, errsz, CRCR_E_INVALID,
                    "--delivery-id and --event-type must be given together (nightly/periodic "
                    "self-report)");
    if (did.n > 0) {
        if (!span_is(evt, "nightly") && !span_is(evt, "periodic"))
            return fail(err, errsz, CRCR_E_INVALID,
                        "--event-type must be 'nightly' or 'periodic', got '%.*s'",
                        (int)(evt.n > 64 ? 64 : evt.n), evt.p);
        if (in_progress)
            return fail(err, errsz, CRCR_E_INVALID,
                        "nightly/periodic callbacks require --status completed");
        if (did.n > CRCR_DELIVERY_ID_MAX || !span_utf8(did))
            return fail(err, errsz, CRCR_E_INVALID,
                        "--delivery-id must be at most %u bytes of UTF-8", CRCR_DELIVERY_ID_MAX);
    }
    span concl = trimmed(o->conclusion);
    if (!in_progress && concl.n == 0)
        return fail(err, errsz, CRCR_E_INVALID,
                    "--conclusion is required with --status completed (e.g. ${{ job.status }})");
    if (concl.n > REPORT_MAX_SHORT || !span_utf8(concl))
        return fail(err, errsz, CRCR_E_INVALID, "--conclusion must be at most %u bytes of UTF-8",
                    REPORT_MAX_SHORT);
    if (!in_progress) {
        /* GitHub's check-run conclusions, any case (the relay's rule: it refuses anything else
         * with 400, so nothing is sent). */
        char word[REPORT_MAX_SHORT + 1];
        memcpy(word, concl.p, concl.n);
        word[concl.n] = '\0';
        if (conclusion_parse_reported(word) == CONCLUSION_UNKNOWN)
            return fail(err, errsz, CRCR_E_INVALID,
                        "--conclusion must be one of %s with --status completed, got '%.64s'",
                        conclusion_names_list(), word);
    }
    if (o->job_name &&
        (strlen(o->job_name) > CRCR_JOB_NAME_MAX || !span_utf8(span_of(o->job_name))))
        return fail(err, errsz, CRCR_E_INVALID, "--job-name must be at most %u bytes of UTF-8",
                    CRCR_JOB_NAME_MAX);
    span cr = trimmed(o->check_run_id);
    if (cr.n > REPORT_MAX_SHORT || !span_utf8(cr))
        return fail(err, errsz, CRCR_E_INVALID, "--check-run-id must be at most %u bytes",
                    REPORT_MAX_SHORT);
    span art = trimmed(o->artifact_url);
    if (art.n > REPORT_MAX_TEXT || !span_utf8(art))
        return fail(err, errsz, CRCR_E_INVALID, "--artifact-url must be at most %u bytes of UTF-8",
                    REPORT_MAX_TEXT);
    span tr = trimmed(o->test_results);
    if (tr.n > REPORT_MAX_TEST_RESULTS)
        return fail(err, errsz, CRCR_E_INVALID, "--test-results is larger than %u bytes",
                    REPORT_MAX_TEST_RESULTS);
    if (tr.n > 0) {
        char jerr[160] = "";
        jv *t = jv_parse(tr.p, tr.n, jerr, sizeof(jerr));
        if (!t)
            return fail(err, errsz, CRCR_E_INVALID, "--test-results is not valid JSON: %s", jerr);
        jv_free(t);
    }
    return CRCR_OK;
}

/* Sets obj[key] to a string built from `s` (which check_opts/check_env validated as UTF-8). */
static crcr_err set_span(jv *obj, const char *key, span s)
{
    return jv_set(obj, key, jv_new_strn(s.p ? s.p : "", s.n));
}

/* Builds the "workflow" object (a new reference in *out). */
static crcr_err build_workflow(const report_opts *o, const report_env *env, const char *job,
                               int64_t now_ms, jv **out, char *err, size_t errsz)
{
    bool in_progress = run_status_parse(o->status) == RUN_STATUS_IN_PROGRESS;
    bool self = is_self_report(o);
    char now[32];
    clock_iso8601(now_ms, now, sizeof(now));
    const char *server =
        env->server_url && *env->server_url ? env->server_url : "https://github.com";
    buf_t url;
    buf_init(&url, REPORT_MAX_TEXT * 2);
    crcr_err e = env->run_url ? buf_puts(&url, env->run_url)
                              : buf_printf(&url, "%s/%s/actions/runs/%s", server, env->repository,
                                           env->run_id);
    if (e) {
        buf_free(&url);
        return fail(err, errsz, e, "the run URL is too long");
    }
    char check_run[2 * REPORT_MAX_SHORT + 2];
    span cr = trimmed(o->check_run_id);
    if (cr.n == 0) {
        snprintf(check_run, sizeof(check_run), "%s-%s", env->run_id, env->run_attempt);
        cr = span_of(check_run);
    }

    jv *wf = jv_new_obj();
    if (!wf) {
        buf_free(&url);
        return fail(err, errsz, CRCR_E_NOMEM, "out of memory");
    }
    e = set_span(wf, "schema_version", span_of(REPORT_SCHEMA_VERSION));
    if (!e)
        e = set_span(wf, "status", span_of(o->status));
    span concl = trimmed(o->conclusion);
    if (!e)
        e = jv_set(wf, "conclusion", in_progress ? jv_new_null() : jv_new_strn(concl.p, concl.n));
    if (!e)
        e = set_span(wf, "name", span_of(env->workflow));
    if (!e)
        e = set_span(wf, "url", span_of(buf_cstr(&url)));
    if (!e)
        e = set_span(wf, "run_attempt", span_of(env->run_attempt));
    if (!e)
        e = set_span(wf, "job_name", span_of(job));
    if (!e)
        e = set_span(wf, "check_run_id", cr);
    if (!e)
        e = set_span(wf, "run_id", span_of(env->run_id));
    if (!e)
        e = jv_set(wf, "started_at", (in_progress || self) ? jv_new_str(now) : jv_new_null());
    if (!e)
        e = jv_set(wf, "completed_at", in_progress ? jv_new_null() : jv_new_str(now));
    span tr = trimmed(o->test_results);
    if (!e && tr.n > 0) {
        jv *t = jv_parse(tr.p, tr.n, NULL, 0);
        e = t ? jv_set(wf, "test_results", t) : CRCR_E_INVALID;
    }
    span art = trimmed(o->artifact_url);
    if (!e && art.n > 0)
        e = set_span(wf, "artifact_url", art);
    buf_free(&url);
    if (e) {
        jv_free(wf);
        return fail(err, errsz, e, "cannot build the workflow object: %s", crcr_strerror(e));
    }
    *out = wf;
    return CRCR_OK;
}

/* True when s is set, at most REPORT_MAX_TEXT bytes of UTF-8 (and not empty when `nonempty`). */
static bool text_ok(const char *s, bool nonempty)
{
    return s && (!nonempty || *s) && strlen(s) <= REPORT_MAX_TEXT && span_utf8(span_of(s));
}

/* The Buildkite variables the body needs (report_env_load mapped them). */
static crcr_err check_buildkite_env(const report_env *env, char *err, size_t errsz)
{
    if (!ids_run_id_valid(env->run_id))
        return fail(err, errsz, CRCR_E_CONFIG,
                    "BUILDKITE_BUILD_ID is not set or not a build id (1 to %u characters of A-Z "
                    "a-z 0-9 . _ -)",
                    CRCR_RUN_ID_MAX - 1);
    if (!all_digits(env->run_attempt, 16))
        return fail(err, errsz, CRCR_E_CONFIG, "BUILDKITE_RETRY_COUNT is not a number: '%.32s'",
                    env->retry_count ? env->retry_count : "");
    if (!text_ok(env->workflow, true))
        return fail(err, errsz, CRCR_E_CONFIG, "BUILDKITE_PIPELINE_SLUG is not set");
    if (!text_ok(env->run_url, true))
        return fail(err, errsz, CRCR_E_CONFIG, "BUILDKITE_BUILD_URL is not set");
    return CRCR_OK;
}

/* Checks the environment values the body needs; returns the job name to use in *job. */
static crcr_err check_env(const report_opts *o, const report_env *env, const char **job, char *err,
                          size_t errsz)
{
    crcr_err e = env->buildkite ? check_buildkite_env(env, err, errsz) : CRCR_OK;
    if (e)
        return e;
    if (!env->buildkite && !all_digits(env->run_id, 32))
        return fail(err, errsz, CRCR_E_CONFIG,
                    "GITHUB_RUN_ID is not set or not a number: crcr report runs inside a GitHub "
                    "Actions job (or a Buildkite step, BUILDKITE=true)");
    if (!all_digits(env->run_attempt, 16))
        return fail(err, errsz, CRCR_E_CONFIG, "GITHUB_RUN_ATTEMPT is not set or not a number");
    if (!text_ok(env->workflow, false))
        return fail(err, errsz, CRCR_E_CONFIG, "GITHUB_WORKFLOW is not set");
    if (!env->run_url &&
        (!env->repository || !*env->repository || strlen(env->repository) >= CRCR_REPO_NAME_MAX ||
         !strchr(env->repository, '/') || !span_utf8(span_of(env->repository))))
        return fail(err, errsz, CRCR_E_CONFIG, "GITHUB_REPOSITORY is not set or not owner/repo");
    if (env->server_url &&
        (strlen(env->server_url) > REPORT_MAX_TEXT || !span_utf8(span_of(env->server_url))))
        return fail(err, errsz, CRCR_E_CONFIG, "GITHUB_SERVER_URL is too long");
    const char *j = o->job_name && *o->job_name ? o->job_name : env->job;
    if (!j || !*j)
        return fail(err, errsz, CRCR_E_CONFIG, "no job name: give --job-name or set GITHUB_JOB");
    if (strlen(j) > CRCR_JOB_NAME_MAX || !span_utf8(span_of(j)))
        return fail(err, errsz, CRCR_E_CONFIG, "the job name must be at most %u bytes of UTF-8",
                    CRCR_JOB_NAME_MAX);
    *job = j;
    return CRCR_OK;
}

/* The self-report envelope of report_callback.py (a new reference in *out). */
static crcr_err self_report_root(const report_opts *o, jv **out)
{
    span did = trimmed(o->delivery_id), evt = trimmed(o->event_type);
    jv *root = jv_new_obj(), *payload = jv_new_obj(), *repo = jv_new_obj();
    crcr_err e = (root && payload && repo) ? CRCR_OK : CRCR_E_NOMEM;
    if (!e)
        e = set_span(repo, "full_name", span_of(REPORT_UPSTREAM_REPO));
    if (!e) {
        e = jv_set(payload, "repository", repo);
        repo = NULL;
    }
    if (!e)
        e = set_span(payload, "head_sha", did);
    if (!e)
        e = set_span(root, "event_type", evt);
    if (!e)
        e = set_span(root, "delivery_id", did);
    if (!e) {
        e = jv_set(root, "payload", payload);
        payload = NULL;
    }
    jv_free(repo);
    jv_free(payload);
    if (e) {
        jv_free(root);
        return e;
    }
    *out = root;
    return CRCR_OK;
}

crcr_err report_build_body(const report_opts *o, const report_env *env, const char *event_json,
                           size_t n, int64_t now_ms, buf_t *out, char *err, size_t errsz)
{
    crcr_err e = check_opts(o, err, errsz);
    const char *job = NULL;
    if (!e)
        e = check_env(o, env, &job, err, errsz);
    if (e)
        return e;

    jv *event = NULL, *root = NULL;
    if (is_self_report(o)) {
        e = self_report_root(o, &root);
        if (e)
            return fail(err, errsz, e, "out of memory");
    } else {
        if (!event_json)
            return fail(err, errsz, CRCR_E_CONFIG, "no event file (GITHUB_EVENT_PATH)");
        /* On Buildkite without an event file the text is the client_payload itself. */
        bool payload_only = env->buildkite && !(env->event_path && *env->event_path);
        const char *what = payload_only ? "CLIENT_PAYLOAD" : "GITHUB_EVENT_PATH";
        char jerr[160] = "";
        event = jv_parse(event_json, n, jerr, sizeof(jerr));
        if (!event)
            return fail(err, errsz, CRCR_E_CONFIG, "%s: not valid JSON: %s", what, jerr);
        root = payload_only ? event : jv_get(event, "client_payload");
        if (payload_only && !jv_is_obj(root)) {
            jv_free(event);
            return fail(err, errsz, CRCR_E_CONFIG, "CLIENT_PAYLOAD: not a JSON object");
        }
        if (!jv_is_obj(root)) {
            jv_free(event);
            return fail(err, errsz, CRCR_E_CONFIG,
                        "GITHUB_EVENT_PATH: the event has no client_payload object; crcr report "
                        "belongs in a workflow run by repository_dispatch (or give --delivery-id "
                        "and --event-type for a nightly/periodic self-report)");
        }
        jv_ref(root);
        jv_free(event);
    }

    jv *wf = NULL;
    e = build_workflow(o, env, job, now_ms, &wf, err, errsz);
    if (!e) {
        e = jv_set(root, "workflow", wf);
        if (e)
            fail(err, errsz, e, "out of memory");
    }
    if (!e) {
        e = py_dump(root, out);
        if (e == CRCR_E_TOO_LARGE)
            fail(err, errsz, e, "the callback body is larger than %zu bytes", out->max);
        else if (e)
            fail(err, errsz, e, "cannot serialise the body: %s", crcr_strerror(e));
    }
    jv_free(root);
    return e;
}

/* ------------------------------------------------------------------------------------------ */
/* Command line                                                                                */

#define RP_USAGE                                                                                   \
    "usage: crcr report --status in_progress|completed [--conclusion C] [--job-name N]\n"          \
    "                   [--test-results JSON] [--artifact-url U] [--callback-url U]\n"             \
    "                   [--delivery-id SHA --event-type nightly|periodic] [--check-run-id ID]\n"   \
    "                   [--audience A] [--max-time SECONDS] [--dry-run]\n"

static void usage(FILE *to)
{
    fputs(RP_USAGE
          "\n"
          "Reports this GitHub Actions job's state to the crcr relay (POST /github/callback),\n"
          "authenticated with an OIDC token minted from the job (needs permissions:\n"
          "id-token: write). The body is the dispatch's client_payload plus a \"workflow\"\n"
          "object, exactly as the upstream cross-repo-ci-relay-callback action sends it.\n"
          "\n"
          "  --status S         in_progress or completed (required)\n"
          "  --conclusion C     required with completed: a GitHub check-run conclusion\n"
          "                     (success, failure, cancelled, ...), e.g. ${{ job.status }}\n"
          "  --job-name N       default $GITHUB_JOB; matrix legs need distinct names\n"
          "  --test-results J   JSON summary, e.g. '{\"passed\":50,\"failed\":0,\"skipped\":2}'\n"
          "  --artifact-url U   public URL of the run's artifacts\n"
          "  --callback-url U   the relay's callback URL (default $CRCR_CALLBACK_URL)\n"
          "  --delivery-id SHA  nightly/periodic self-report: the PyTorch commit tested\n"
          "  --event-type T     nightly or periodic (with --delivery-id; status completed)\n"
          "  --check-run-id ID  default $CRCR_CHECK_RUN_ID, else <run_id>-<run_attempt>\n"
          "  --audience A       OIDC audience (default " REPORT_DEFAULT_AUDIENCE ")\n"
          "  --max-time S       total seconds including retries (default 120)\n"
          "  --dry-run          print the URL and the body; mint and send nothing\n"
          "\n"
          "On a Buildkite agent (BUILDKITE=true) the run is the build (BUILDKITE_BUILD_ID,\n"
          "attempt BUILDKITE_RETRY_COUNT + 1), the workflow the pipeline slug, the job the\n"
          "step's label or key, the conclusion (when not given) the command's exit status;\n"
          "the token comes from buildkite-agent oidc request-token, the client_payload from\n"
          "CLIENT_PAYLOAD.\n"
          "\n"
          "429, 5xx and network errors are retried (Retry-After honoured, else 1, 2, 4.. s)\n"
          "until --max-time. Exit status: 0 for a 2xx answer, 1 for any other answer or\n"
          "failure, 2 for a usage error.\n",
          to);
}

/* Parses the options into *o. Returns 0, 2 after a usage error, or -1 for --help. */
static int parse_args(int argc, char **argv, report_opts *o, const char **max_time)
{
    struct {
        const char *name;
        const char **slot;
    } opts[] = {
        {"--status", &o->status},
        {"--conclusion", &o->conclusion},
        {"--job-name", &o->job_name},
        {"--test-results", &o->test_results},
        {"--artifact-url", &o->artifact_url},
        {"--callback-url", &o->callback_url},
        {"--delivery-id", &o->delivery_id},
        {"--event-type", &o->event_type},
        {"--check-run-id", &o->check_run_id},
        {"--audience", &o->audience},
        {"--max-time", max_time},
    };
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
            return -1;
        if (strcmp(arg, "--dry-run") == 0) {
            o->dry_run = true;
            continue;
        }
        int rc = 0;
        for (size_t k = 0; k < sizeof(opts) / sizeof(opts[0]) && rc == 0; k++) {
            rc = opts_take(argc, argv, &i, opts[k].name, opts[k].slot);
            if (rc < 0) {
                fprintf(stderr, REPORT_PROG ": %s needs a value\n", opts[k].name);
                return 2;
            }
        }
        if (rc == 0) {
            fprintf(stderr, REPORT_PROG ": unknown argument '%.200s'\n", arg);
            return 2;
        }
    }
    return 0;
}

/* Reads the event file (at most REPORT_MAX_EVENT_BYTES) into out (the caller frees it). Returns
 * false after printing why. */
static bool read_event_file(const char *path, buf_t *out)
{
    buf_init(out, REPORT_MAX_EVENT_BYTES);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "Error: GITHUB_EVENT_PATH %s: %s\n", path, strerror(errno));
        return false;
    }
    char chunk[64 * 1024];
    bool ok = true;
    for (;;) {
        size_t n = fread(chunk, 1, sizeof(chunk), f);
        if (n > 0 && buf_append(out, chunk, n) != CRCR_OK) {
            fprintf(stderr, "Error: GITHUB_EVENT_PATH %s: larger than %u bytes\n", path,
                    REPORT_MAX_EVENT_BYTES);
            ok = false;
            break;
        }
        if (n < sizeof(chunk)) {
            if (ferror(f)) {
                fprintf(stderr, "Error: GITHUB_EVENT_PATH %s: read error\n", path);
                ok = false;
            }
            break;
        }
    }
    fclose(f);
    if (!ok)
        buf_free(out);
    return ok;
}

/* True when the URL's authority (between "://" and the next '/', '?' or '#') has a '@': a
 * user:password part. */
static bool url_has_userinfo(const char *url)
{
    const char *p = strstr(url, "://");
    if (!p)
        return false;
    p += 3;
    size_t n = strcspn(p, "/?#");
    return memchr(p, '@', n) != NULL;
}

/* `s` when set and not empty, else NULL. */
static const char *nonempty(const char *s)
{
    return s && *s ? s : NULL;
}

/* The Buildkite half of report_env_load (report_callback_buildkite.sh's mapping). */
static void env_buildkite(report_env *env, report_getenv_fn get)
{
    env->buildkite = true;
    env->run_id = get("BUILDKITE_BUILD_ID");
    env->retry_count = get("BUILDKITE_RETRY_COUNT");
    const char *rc = nonempty(env->retry_count) ? env->retry_count : "0";
    env->run_attempt = NULL;
    if (all_digits(rc, 9)) { /* at most 999999999 retries: + 1 stays in range */
        snprintf(env->attempt_buf, sizeof(env->attempt_buf), "%ld", strtol(rc, NULL, 10) + 1);
        env->run_attempt = env->attempt_buf;
    }
    env->workflow = get("BUILDKITE_PIPELINE_SLUG");
    env->job = nonempty(get("BUILDKITE_LABEL"));
    if (!env->job)
        env->job = nonempty(get("BUILDKITE_STEP_KEY"));
    if (!env->job)
        env->job = "unknown";
    env->run_url = get("BUILDKITE_BUILD_URL");
    env->exit_status = get("BUILDKITE_COMMAND_EXIT_STATUS");
    env->client_payload = get("CLIENT_PAYLOAD");
    env->server_url = env->repository = NULL;
    env->token_url = env->token_secret = NULL;
}

void report_env_load(report_env *env, report_getenv_fn get)
{
    memset(env, 0, sizeof(*env));
    env->event_path = get("GITHUB_EVENT_PATH");
    const char *bk = get("BUILDKITE");
    if (bk && strcmp(bk, "true") == 0) {
        env_buildkite(env, get);
        return;
    }
    env->run_id = get("GITHUB_RUN_ID");
    env->run_attempt = get("GITHUB_RUN_ATTEMPT");
    env->workflow = get("GITHUB_WORKFLOW");
    env->job = get("GITHUB_JOB");
    env->server_url = get("GITHUB_SERVER_URL");
    env->repository = get("GITHUB_REPOSITORY");
    env->token_url = get("ACTIONS_ID_TOKEN_REQUEST_URL");
    env->token_secret = get("ACTIONS_ID_TOKEN_REQUEST_TOKEN");
}

const char *report_buildkite_conclusion(const report_env *env)
{
    if (!env->buildkite || !nonempty(env->exit_status))
        return NULL;
    return conclusion_name(strcmp(env->exit_status, "0") == 0 ? CONCLUSION_SUCCESS
                                                              : CONCLUSION_FAILURE);
}

/* getenv() as a report_getenv_fn. */
static const char *process_getenv(const char *name)
{
    return getenv(name);
}

/* Parses --max-time into o->max_time_s. Returns false for a bad value. */
static bool parse_max_time(const char *s, report_opts *o)
{
    span t = trimmed(s);
    if (t.n == 0) { /* not given, or an action input left empty */
        o->max_time_s = REPORT_DEFAULT_MAX_TIME_S;
        return true;
    }
    char tmp[24];
    if (t.n >= sizeof(tmp))
        return false;
    memcpy(tmp, t.p, t.n);
    tmp[t.n] = '\0';
    if (!all_digits(tmp, sizeof(tmp) - 1))
        return false;
    errno = 0;
    long v = strtol(tmp, NULL, 10);
    if (errno != 0 || v < 1 || v > REPORT_MAX_MAX_TIME_S)
        return false;
    o->max_time_s = v;
    return true;
}

int report_main(int argc, char **argv)
{
    report_opts o = {0};
    const char *max_time = NULL;
    int rc = parse_args(argc, argv, &o, &max_time);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc) {
        fputs(RP_USAGE, stderr);
        return rc;
    }
    if (!parse_max_time(max_time, &o)) {
        fprintf(stderr, REPORT_PROG ": --max-time must be a whole number of seconds, 1 to %ld\n",
                REPORT_MAX_MAX_TIME_S);
        return 2;
    }
    if (!o.audience || !*o.audience)
        o.audience = REPORT_DEFAULT_AUDIENCE;
    o.callback_url_from = "--callback-url";
    if (!o.callback_url || trimmed(o.callback_url).n == 0) {
        o.callback_url = getenv("CRCR_CALLBACK_URL");
        o.callback_url_from = "CRCR_CALLBACK_URL";
    }
    if (!o.check_run_id || trimmed(o.check_run_id).n == 0)
        o.check_run_id = getenv("CRCR_CHECK_RUN_ID");
    report_env env;
    report_env_load(&env, process_getenv);
    /* A Buildkite step's conclusion, when not given: its command's exit status (as upstream). */
    if (run_status_parse(o.status) == RUN_STATUS_COMPLETED && trimmed(o.conclusion).n == 0 &&
        report_buildkite_conclusion(&env))
        o.conclusion = report_buildkite_conclusion(&env);

    char err[512] = "";
    if (check_opts(&o, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, REPORT_PROG ": %s\n%s", err, RP_USAGE);
        return 2;
    }
    char url[REPORT_MAX_URL];
    span cu = trimmed(o.callback_url);
    while (cu.n > 0 && cu.p[cu.n - 1] == '/') /* report_callback.py strips them too */
        cu.n--;
    if (cu.n == 0) {
        fprintf(stderr, REPORT_PROG ": no callback URL: give --callback-url or set "
                                    "CRCR_CALLBACK_URL (crcr report has no default; the relay's "
                                    "is https://<relay>/github/callback)\n");
        return 2;
    }
    if (cu.n >= sizeof(url)) {
        fprintf(stderr, REPORT_PROG ": --callback-url is longer than %u bytes\n",
                REPORT_MAX_URL - 1);
        return 2;
    }
    memcpy(url, cu.p, cu.n);
    url[cu.n] = '\0';
    if (!http_header_token_ok(url, cu.n, sizeof(url))) {
        fprintf(stderr,
                REPORT_PROG ": --callback-url must not contain spaces or control characters\n");
        return 2;
    }
    if (!config_url_allowed(url)) {
        fprintf(stderr, REPORT_PROG
                ": --callback-url must be https:// (http:// only for loopback hosts)\n");
        return 2;
    }
    if (url_has_userinfo(url)) { /* never sent nor printed; the action refuses it too */
        fprintf(stderr, REPORT_PROG ": --callback-url must not contain credentials "
                                    "(user:password@)\n");
        return 2;
    }

    if (env.token_secret && *env.token_secret)
        log_add_secret(env.token_secret);

    buf_t event;
    buf_init(&event, 0);
    bool have_event = false;
    if (!is_self_report(&o) && env.buildkite && !nonempty(env.event_path)) {
        if (!nonempty(env.client_payload)) {
            fprintf(stderr, "Error: CLIENT_PAYLOAD is not set: on Buildkite, pass the dispatch's "
                            "client_payload JSON in CLIENT_PAYLOAD (or report a nightly/periodic "
                            "run with --delivery-id and --event-type)\n");
            return 1;
        }
        buf_init(&event, REPORT_MAX_EVENT_BYTES);
        if (buf_puts(&event, env.client_payload) != CRCR_OK) {
            fprintf(stderr, "Error: CLIENT_PAYLOAD is larger than %u bytes\n",
                    REPORT_MAX_EVENT_BYTES);
            buf_free(&event);
            return 1;
        }
        have_event = true;
    } else if (!is_self_report(&o)) {
        if (!env.event_path || !*env.event_path) {
            fprintf(stderr, "Error: GITHUB_EVENT_PATH is not set: crcr report runs inside a "
                            "GitHub Actions job\n");
            return 1;
        }
        if (!read_event_file(env.event_path, &event))
            return 1;
        have_event = true;
    }

    buf_t body;
    buf_init(&body, REPORT_MAX_BODY);
    crcr_err e = report_build_body(&o, &env, have_event ? buf_cstr(&event) : NULL, event.len,
                                   clock_now_ms(), &body, err, sizeof(err));
    buf_free(&event);
    if (e) {
        fprintf(stderr, "Error: %s\n", err);
        buf_free(&body);
        return e == CRCR_E_INVALID ? 2 : 1;
    }

    if (o.dry_run) {
        printf("crcr report: dry-run: POST %s\n%s\n", url, buf_cstr(&body));
        buf_free(&body);
        return 0;
    }

    rc = report_send(&o, &env, url, &body);
    buf_free(&body);
    return rc;
}
