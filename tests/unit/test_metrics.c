/*
 * Unit tests for metrics.c: the registry's counters and histograms, label escaping, GitHub path
 * classification, and the text format 0.0.4 grammar of a full render, checked by a small parser
 * written here (HELP/TYPE before samples, name and label grammar, histogram buckets cumulative
 * with +Inf equal to _count).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"

/* ---- a text-format checker ---- */

#define CHK_MAX_FAMILIES 64
#define CHK_MAX_HIST 128

typedef struct chk_family {
    char name[128];
    char type[16];
    bool help, typed, sampled;
} chk_family;

typedef struct chk_hist {
    char key[600]; /* base name + labels without le */
    double last_le, last_count, inf_count, count;
    bool has_inf, has_count;
    int buckets;
} chk_hist;

typedef struct chk {
    chk_family fam[CHK_MAX_FAMILIES];
    int nfam;
    chk_hist hist[CHK_MAX_HIST];
    int nhist;
    char error[256];
    int samples;
} chk;

static bool chk_fail(chk *c, const char *line, const char *why)
{
    snprintf(c->error, sizeof(c->error), "%s: %.150s", why, line);
    return false;
}

static chk_family *chk_find(chk *c, const char *name, bool create)
{
    for (int i = 0; i < c->nfam; i++)
        if (strcmp(c->fam[i].name, name) == 0)
            return &c->fam[i];
    if (!create || c->nfam >= CHK_MAX_FAMILIES)
        return NULL;
    chk_family *f = &c->fam[c->nfam++];
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    return f;
}

static bool label_name_ok(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool a = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
        if (!a && !(i > 0 && ch >= '0' && ch <= '9'))
            return false;
    }
    return true;
}

static chk_hist *hist_for(chk *c, const char *key)
{
    for (int i = 0; i < c->nhist; i++)
        if (strcmp(c->hist[i].key, key) == 0)
            return &c->hist[i];
    if (c->nhist >= CHK_MAX_HIST)
        return NULL;
    chk_hist *h = &c->hist[c->nhist++];
    memset(h, 0, sizeof(*h));
    snprintf(h->key, sizeof(h->key), "%s", key);
    h->last_le = -INFINITY;
    return h;
}

/* Parses one sample line; fills the metric name, the labels without `le` (as text), the le
 * value (NAN when absent) and the value. */
static bool parse_sample(chk *c, const char *line, char *name, size_t namesz, char *labels,
                         size_t labsz, double *le, double *value)
{
    const char *p = line;
    size_t n = 0;
    while (p[n] && p[n] != '{' && p[n] != ' ')
        n++;
    if (n == 0 || n >= namesz)
        return chk_fail(c, line, "bad metric name");
    memcpy(name, p, n);
    name[n] = '\0';
    if (!metrics_name_valid(name))
        return chk_fail(c, line, "metric name grammar");
    p += n;
    *le = NAN;
    size_t lo = 0;
    labels[0] = '\0';
    if (*p == '{') {
        p++;
        while (*p != '}') {
            const char *k = p;
            while (*p && *p != '=')
                p++;
            if (*p != '=' || !label_name_ok(k, (size_t)(p - k)))
                return chk_fail(c, line, "label name grammar");
            size_t kl = (size_t)(p - k);
            p++;
            if (*p != '"')
                return chk_fail(c, line, "label value not quoted");
            p++;
            char val[256];
            size_t vl = 0;
            while (*p && *p != '"') {
                if (*p == '\\') {
                    p++;
                    if (*p != '\\' && *p != '"' && *p != 'n')
                        return chk_fail(c, line, "bad escape in label value");
                }
                if (*p == '\n' || !*p)
                    return chk_fail(c, line, "raw newline in label value");
                if (vl + 1 < sizeof(val))
                    val[vl++] = *p;
                p++;
            }
            if (*p != '"')
                return chk_fail(c, line, "unterminated label value");
            val[vl] = '\0';
            p++;
            if (kl == 2 && memcmp(k, "le", 2) == 0) {
                char *end = NULL;
                *le = strcmp(val, "+Inf") == 0 ? INFINITY : strtod(val, &end);
                if (!isinf(*le) && (!end || *end))
                    return chk_fail(c, line, "le is not a number");
            } else {
                int w = snprintf(labels + lo, labsz - lo, "%.*s=%s,", (int)kl, k, val);
                if (w < 0 || (size_t)w >= labsz - lo)
                    return chk_fail(c, line, "labels too long for the checker");
                lo += (size_t)w;
            }
            if (*p == ',')
                p++;
            else if (*p != '}')
                return chk_fail(c, line, "expected , or }");
        }
        p++;
    }
    if (*p != ' ')
        return chk_fail(c, line, "expected one space before the value");
    p++;
    char *end = NULL;
    if (strcmp(p, "+Inf") == 0)
        *value = INFINITY;
    else if (strcmp(p, "NaN") == 0)
        *value = NAN;
    else {
        *value = strtod(p, &end);
        if (end == p || *end)
            return chk_fail(c, line, "value is not a number");
    }
    return true;
}

static bool strip_suffix(const char *name, const char *suffix, char *base, size_t basesz)
{
    size_t nl = strlen(name), sl = strlen(suffix);
    if (nl <= sl || strcmp(name + nl - sl, suffix) != 0 || nl - sl >= basesz)
        return false;
    memcpy(base, name, nl - sl);
    base[nl - sl] = '\0';
    return true;
}

static bool chk_line(chk *c, const char *line)
{
    if (line[0] == '#') {
        char kind[8], name[128];
        const char *p = line + 2;
        if (strncmp(line, "# HELP ", 7) == 0)
            snprintf(kind, sizeof(kind), "HELP");
        else if (strncmp(line, "# TYPE ", 7) == 0)
            snprintf(kind, sizeof(kind), "TYPE");
        else
            return true; /* a comment */
        p += 5;
        size_t n = strcspn(p, " ");
        if (n == 0 || n >= sizeof(name) || p[n] != ' ')
            return chk_fail(c, line, "HELP/TYPE without name and text");
        memcpy(name, p, n);
        name[n] = '\0';
        if (!metrics_name_valid(name))
            return chk_fail(c, line, "family name grammar");
        chk_family *f = chk_find(c, name, true);
        if (!f)
            return chk_fail(c, line, "too many families");
        if (f->sampled)
            return chk_fail(c, line, "HELP/TYPE after the family's samples");
        if (kind[0] == 'H') {
            if (f->help)
                return chk_fail(c, line, "second HELP");
            f->help = true;
        } else {
            const char *t = p + n + 1;
            if (f->typed)
                return chk_fail(c, line, "second TYPE");
            if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
                strcmp(t, "summary") && strcmp(t, "untyped"))
                return chk_fail(c, line, "unknown TYPE");
            snprintf(f->type, sizeof(f->type), "%s", t);
            f->typed = true;
        }
        return true;
    }
    char name[128], labels[400], base[128];
    double le, v;
    if (!parse_sample(c, line, name, sizeof(name), labels, sizeof(labels), &le, &v))
        return false;
    c->samples++;
    chk_family *f = chk_find(c, name, false);
    const char *suffix = NULL;
    if (!f) {
        static const char *const sfx[] = {"_bucket", "_sum", "_count"};
        for (int i = 0; i < 3 && !f; i++) {
            if (strip_suffix(name, sfx[i], base, sizeof(base))) {
                f = chk_find(c, base, false);
                suffix = sfx[i];
            }
        }
        if (!f || strcmp(f->type, "histogram") != 0)
            return chk_fail(c, line, "sample without a TYPE line");
    }
    if (!f->typed || !f->help)
        return chk_fail(c, line, "sample before HELP and TYPE");
    f->sampled = true;
    if (strcmp(f->type, "counter") == 0 && !(v >= 0))
        return chk_fail(c, line, "negative or NaN counter");
    if (!suffix)
        return true;
    char key[600];
    snprintf(key, sizeof(key), "%s|%s", f->name, labels);
    chk_hist *h = hist_for(c, key);
    if (!h)
        return chk_fail(c, line, "too many histograms");
    if (strcmp(suffix, "_bucket") == 0) {
        if (isnan(le))
            return chk_fail(c, line, "bucket without le");
        if (!(le > h->last_le))
            return chk_fail(c, line, "le not increasing");
        if (v < h->last_count)
            return chk_fail(c, line, "bucket counts not cumulative");
        h->last_le = le;
        h->last_count = v;
        h->buckets++;
        if (isinf(le)) {
            h->has_inf = true;
            h->inf_count = v;
        }
    } else if (strcmp(suffix, "_count") == 0) {
        h->has_count = true;
        h->count = v;
    }
    return true;
}

/* Checks a whole exposition; on failure c->error says why. */
static bool chk_text(chk *c, const char *text)
{
    memset(c, 0, sizeof(*c));
    const char *p = text;
    size_t len = strlen(text);
    if (len == 0 || text[len - 1] != '\n')
        return chk_fail(c, "", "exposition does not end with a newline");
    while (*p) {
        const char *nl = strchr(p, '\n');
        char line[1024];
        size_t n = (size_t)(nl - p);
        if (n == 0)
            return chk_fail(c, "", "empty line");
        if (n >= sizeof(line))
            return chk_fail(c, p, "line too long for the checker");
        memcpy(line, p, n);
        line[n] = '\0';
        if (!chk_line(c, line))
            return false;
        p = nl + 1;
    }
    for (int i = 0; i < c->nhist; i++) {
        chk_hist *h = &c->hist[i];
        if (!h->has_inf || !h->has_count)
            return chk_fail(c, h->key, "histogram without +Inf bucket or _count");
        if (h->inf_count != h->count)
            return chk_fail(c, h->key, "+Inf bucket differs from _count");
    }
    return true;
}

static char *render(void)
{
    buf_t b;
    buf_init(&b, 4u << 20);
    assert_int_equal(metrics_render(&b), CRCR_OK);
    return buf_detach(&b, NULL);
}

/* The value of the sample line starting with `prefix` (name + labels), or -1. */
static double value_of(const char *text, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, prefix, pl) == 0 && p[pl] == ' ')
            return strtod(p + pl + 1, NULL);
    }
    return -1;
}

static int reset(void **state)
{
    metrics_reset();
    return 0;
}

/* ---- tests ---- */

static void render_of_the_registry_is_valid_text_format(void **state)
{
    int h = metrics_http_route("POST", "/github/webhook");
    assert_true(h >= 0);
    metrics_http_observe(h, 202, 0.0004);
    metrics_http_observe(h, 202, 0.3);
    metrics_http_observe(h, 413, 45.0);
    metrics_webhook_count("push", "accepted");
    metrics_outbox_result("dispatch", "sent");
    metrics_github_request("/repos/o/r/dispatches", 204);
    char *text = render();
    chk c;
    bool ok = chk_text(&c, text);
    if (!ok)
        fail_msg("%s", c.error);
    assert_true(c.samples > 40);
    free(text);
}

static void checker_rejects_broken_expositions(void **state)
{
    /* The checker itself must be able to fail, or the test above proves nothing. */
    static const char *const bad[] = {
        "x_total 1\n",                                           /* no TYPE */
        "# HELP x h\n# TYPE x counter\nx{a=\"1} 1\n",            /* unterminated */
        "# HELP x h\n# TYPE x counter\nx{1a=\"v\"} 1\n",         /* label grammar */
        "# HELP x h\n# TYPE x counter\nx -1\n",                  /* negative counter */
        "# HELP 9x h\n# TYPE 9x counter\n9x 1\n",                /* name grammar */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n" /* count differs */
        "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\n" /* not cumulative */
        "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
        "# HELP x h\n# TYPE x gauge\nx 1\n# HELP x h\n", /* HELP after samples */
        "# HELP x h\n# TYPE x gauge\nx{a=\"b\\t\"} 1\n", /* bad escape */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        chk c;
        if (chk_text(&c, bad[i]))
            fail_msg("checker accepted broken exposition %zu: %s", i, bad[i]);
    }
}

static void histogram_buckets_are_cumulative_and_inf_equals_count(void **state)
{
    metrics_hist h;
    memset(&h, 0, sizeof(h));
    double obs[] = {0.0005, 0.001, 0.0011, 0.2, 0.2, 0.99, 1.0, 7.5, 31.0, -3.0};
    for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++)
        metrics_hist_observe(&h, obs[i]);
    buf_t b;
    buf_init(&b, 1 << 16);
    const char *labels[] = {"route", "/x", NULL};
    assert_int_equal(metrics_family(&b, "t_seconds", "histogram", "test"), CRCR_OK);
    assert_int_equal(metrics_hist_write(&b, "t_seconds", &h, labels), CRCR_OK);
    const char *t = buf_cstr(&b);
    chk c;
    if (!chk_text(&c, t))
        fail_msg("%s", c.error);
    /* le is inclusive: 0.001 falls in the 0.001 bucket, 1.0 in the 1.0 bucket; -3 counts as 0. */
    assert_true(value_of(t, "t_seconds_bucket{route=\"/x\",le=\"0.001\"}") == 3);
    assert_true(value_of(t, "t_seconds_bucket{route=\"/x\",le=\"0.25\"}") == 6);
    assert_true(value_of(t, "t_seconds_bucket{route=\"/x\",le=\"1.0\"}") == 8);
    assert_true(value_of(t, "t_seconds_bucket{route=\"/x\",le=\"10.0\"}") == 9);
    assert_true(value_of(t, "t_seconds_bucket{route=\"/x\",le=\"30.0\"}") == 9);
    assert_true(value_of(t, "t_seconds_bucket{route=\"/x\",le=\"+Inf\"}") == 10);
    assert_true(value_of(t, "t_seconds_count{route=\"/x\"}") == 10);
    double sum = value_of(t, "t_seconds_sum{route=\"/x\"}");
    assert_true(fabs(sum - 40.8926) < 1e-4);
    buf_free(&b);
}

static void label_values_are_escaped(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    const char *labels[] = {"route", "a\"b\\c\nd", NULL};
    assert_int_equal(metrics_family(&b, "esc", "gauge", "escaping"), CRCR_OK);
    assert_int_equal(metrics_sample(&b, "esc", labels, 1.5), CRCR_OK);
    assert_string_equal(
        buf_cstr(&b),
        "# HELP esc escaping\n# TYPE esc gauge\nesc{route=\"a\\\"b\\\\c\\nd\"} 1.5\n");
    chk c;
    if (!chk_text(&c, buf_cstr(&b)))
        fail_msg("%s", c.error);
    buf_free(&b);
}

static void integral_values_have_no_fraction_and_large_counts_are_exact(void **state)
{
    buf_t b;
    buf_init(&b, 4096);
    assert_int_equal(metrics_sample(&b, "a", NULL, 3.0), CRCR_OK);
    assert_int_equal(metrics_sample(&b, "b", NULL, 9007199254740.0), CRCR_OK);
    assert_int_equal(metrics_sample(&b, "c", NULL, 0.25), CRCR_OK);
    assert_string_equal(buf_cstr(&b), "a 3\nb 9007199254740\nc 0.25\n");
    buf_free(&b);
}

static void github_paths_are_classified_by_endpoint(void **state)
{
    static const struct {
        const char *path, *want;
    } cases[] = {
        {"/repos/org/repo/installation", "installation"},
        {"/orgs/org/installation", "installation"},
        {"/app/installations/3000000001", "installation"},
        {"/app/installations/3000000001/access_tokens", "access_tokens"},
        {"/repos/org/repo/dispatches", "dispatches"},
        {"/repos/pytorch/pytorch/check-runs", "check_runs"},
        {"/repos/pytorch/pytorch/check-runs/123456789012", "check_runs"},
        {"/repos/pytorch/pytorch/check-suites/42/check-runs?per_page=100&page=2", "check_runs"},
        {"/repos/o/r/actions/runs/77/rerun", "reruns"},
        {"/repos/o/r/actions/runs/77/rerun-failed-jobs", "reruns"},
        {"/repos/o/r/contents/.github/allowlist.yml?ref=main", "contents"},
        {"/repos/pytorch/pytorch/issues/123/comments?per_page=30&page=2", "comments"},
        {"/app/hook/deliveries?per_page=100&cursor=v1_9", "hook_deliveries"},
        {"/app/hook/deliveries/4294967303/attempts", "hook_deliveries"},
        {"/app/hook/config", "other"},
        {"/repos/o/r/issues/123", "other"},
        {"/repos/o/r/issues/comments/5", "other"},
        {"/repos/o/r/pulls/1", "other"},
        {"/repos/o", "other"},
        {"/", "other"},
        {"", "other"},
        {"/repos/o/r/dispatches/extra", "other"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got = metrics_github_endpoint(cases[i].path);
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("%s: got %s, want %s", cases[i].path, got, cases[i].want);
    }
    assert_string_equal(metrics_github_endpoint(NULL), "external");
}

static void github_requests_are_counted_by_endpoint_and_status(void **state)
{
    metrics_github_request("/repos/o/r/dispatches", 204);
    metrics_github_request("/repos/o/r/dispatches", 204);
    metrics_github_request("/repos/o/r/dispatches", 502);
    metrics_github_request("/app/installations/1/access_tokens", 201);
    metrics_github_request("/repos/o/r/installation", 0);
    metrics_github_request("/repos/o/r/installation", 777); /* nonsense status: counted as 0 */
    metrics_github_request(NULL, 200);
    char *t = render();
    assert_true(value_of(t, "crcr_github_requests_total{endpoint=\"dispatches\",status=\"204\"}") ==
                2);
    assert_true(value_of(t, "crcr_github_requests_total{endpoint=\"dispatches\",status=\"502\"}") ==
                1);
    assert_true(value_of(t, "crcr_github_requests_total{endpoint=\"access_tokens\","
                            "status=\"201\"}") == 1);
    assert_true(value_of(t, "crcr_github_requests_total{endpoint=\"installation\",status=\"0\"}") ==
                2);
    assert_true(value_of(t, "crcr_github_requests_total{endpoint=\"external\",status=\"200\"}") ==
                1);
    /* Statuses never seen have no series. */
    assert_true(value_of(t, "crcr_github_requests_total{endpoint=\"dispatches\",status=\"200\"}") ==
                -1);
    free(t);
}

static void webhook_results_follow_the_event_of_the_thread(void **state)
{
    metrics_webhook_begin("pull_request");
    metrics_webhook_result("accepted");
    metrics_webhook_result("rejected");
    metrics_webhook_begin("issues"); /* unsupported events share one series */
    metrics_webhook_result("ignored");
    metrics_webhook_begin(NULL);
    metrics_webhook_result("ignored");
    metrics_webhook_result("not-a-result"); /* unknown results are not counted */
    char *t = render();
    assert_true(value_of(t, "crcr_webhooks_total{event=\"pull_request\",result=\"accepted\"}") ==
                1);
    assert_true(value_of(t, "crcr_webhooks_total{event=\"pull_request\",result=\"rejected\"}") ==
                1);
    assert_true(value_of(t, "crcr_webhooks_total{event=\"other\",result=\"ignored\"}") == 2);
    assert_true(value_of(t, "crcr_webhooks_total{event=\"push\",result=\"accepted\"}") == 0);
    free(t);
}

static void callbacks_and_totals_are_counted_once(void **state)
{
    metrics_callback_result("accepted");
    metrics_callback_result("accepted");
    metrics_callback_result("duplicate");
    metrics_callback_result("rejected");
    metrics_callback_result("bogus");
    metrics_webhook_count("push", "accepted");
    metrics_webhook_count("pull_request", "accepted");
    metrics_webhook_count("ping", "rejected");
    assert_int_equal(metrics_callback_total("accepted"), 2);
    assert_int_equal(metrics_callback_total("duplicate"), 1);
    assert_int_equal(metrics_callback_total("rejected"), 1);
    assert_int_equal(metrics_callback_total("bogus"), 0);
    assert_int_equal(metrics_webhook_total("accepted"), 2); /* over every event */
    assert_int_equal(metrics_webhook_total("rejected"), 1);
    char *t = render();
    assert_true(value_of(t, "crcr_callbacks_total{result=\"accepted\"}") == 2);
    assert_true(value_of(t, "crcr_callbacks_total{result=\"rejected\"}") == 1);
    free(t);
}

static void outbox_results_are_counted_by_kind(void **state)
{
    metrics_outbox_result("dispatch", "sent");
    metrics_outbox_result("dispatch", "retry");
    metrics_outbox_result("dispatch", "retry");
    metrics_outbox_result("hud_forward", "dead");
    metrics_outbox_result("comment", "sent");
    metrics_outbox_result("telegram", "sent"); /* unknown kind */
    char *t = render();
    assert_true(value_of(t, "crcr_outbox_jobs_total{kind=\"comment\",result=\"sent\"}") == 1);
    assert_true(value_of(t, "crcr_outbox_jobs_total{kind=\"dispatch\",result=\"retry\"}") == 2);
    assert_true(value_of(t, "crcr_outbox_jobs_total{kind=\"dispatch\",result=\"sent\"}") == 1);
    assert_true(value_of(t, "crcr_outbox_jobs_total{kind=\"hud_forward\",result=\"dead\"}") == 1);
    assert_true(value_of(t, "crcr_outbox_jobs_total{kind=\"other\",result=\"sent\"}") == 1);
    free(t);
}

static void route_registration_is_idempotent_and_bounded(void **state)
{
    int a = metrics_http_route("GET", "/metrics");
    int b = metrics_http_route("GET", "/metrics");
    int c = metrics_http_route("POST", "/metrics");
    assert_true(a >= 0);
    assert_int_equal(a, b);
    assert_true(c >= 0 && c != a);
    int last = 0;
    char route[32];
    for (int i = 0; i < METRICS_MAX_ROUTES + 5; i++) {
        snprintf(route, sizeof(route), "/r%d", i);
        last = metrics_http_route("GET", route);
    }
    assert_int_equal(last, -1);         /* full: no unbounded growth */
    metrics_http_observe(-1, 200, 1.0); /* ignored, no crash */
    metrics_http_observe(a, 200, 0.002);
    metrics_http_observe(a, 503, 0.002);
    char *t = render();
    assert_true(
        value_of(t, "crcr_http_responses_total{method=\"GET\",route=\"/metrics\",code=\"2xx\"}") ==
        1);
    assert_true(
        value_of(t, "crcr_http_responses_total{method=\"GET\",route=\"/metrics\",code=\"5xx\"}") ==
        1);
    assert_true(value_of(t, "crcr_http_request_duration_seconds_count{method=\"GET\","
                            "route=\"/metrics\"}") == 2);
    chk ck;
    if (!chk_text(&ck, t))
        fail_msg("%s", ck.error);
    free(t);
}

#define THREADS 8
#define PER_THREAD 100000

static void *hammer(void *arg)
{
    int h = *(int *)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        metrics_webhook_count("push", "accepted");
        metrics_http_observe(h, 200, 0.003);
    }
    return NULL;
}

static void concurrent_increments_are_not_lost(void **state)
{
    int h = metrics_http_route("POST", "/hammer");
    assert_true(h >= 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &h), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    char *text = render();
    assert_true(value_of(text, "crcr_webhooks_total{event=\"push\",result=\"accepted\"}") ==
                THREADS * PER_THREAD);
    assert_true(value_of(text, "crcr_http_request_duration_seconds_bucket{method=\"POST\","
                               "route=\"/hammer\",le=\"0.005\"}") == THREADS * PER_THREAD);
    free(text);
}

static void metric_name_grammar(void **state)
{
    assert_true(metrics_name_valid("crcr_webhooks_total"));
    assert_true(metrics_name_valid("a:b_c9"));
    assert_true(metrics_name_valid("_x"));
    assert_false(metrics_name_valid("9abc"));
    assert_false(metrics_name_valid("a-b"));
    assert_false(metrics_name_valid(""));
    assert_false(metrics_name_valid("a b"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(render_of_the_registry_is_valid_text_format, reset),
        cmocka_unit_test(checker_rejects_broken_expositions),
        cmocka_unit_test(histogram_buckets_are_cumulative_and_inf_equals_count),
        cmocka_unit_test(label_values_are_escaped),
        cmocka_unit_test(integral_values_have_no_fraction_and_large_counts_are_exact),
        cmocka_unit_test(github_paths_are_classified_by_endpoint),
        cmocka_unit_test_setup(github_requests_are_counted_by_endpoint_and_status, reset),
        cmocka_unit_test_setup(webhook_results_follow_the_event_of_the_thread, reset),
        cmocka_unit_test_setup(outbox_results_are_counted_by_kind, reset),
        /* Registers a route, so it runs before the test that fills the route table. */
        cmocka_unit_test_setup(concurrent_increments_are_not_lost, reset),
        cmocka_unit_test_setup(callbacks_and_totals_are_counted_once, reset),
        cmocka_unit_test_setup(route_registration_is_idempotent_and_bounded, reset),
        cmocka_unit_test(metric_name_grammar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
