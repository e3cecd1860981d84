/* reconcile.c - the reconciler: reads the App's delivery log and asks GitHub to redeliver what
 * the relay never stored; see reconcile.h. */
#include "reconcile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arena.h"
#include "clock.h"
#include "crcr_limits.h"
#include "http_client.h"
#include "ids.h"
#include "json.h"
#include "log.h"
#include "metrics.h"

/* Words the relay's vocabularies also use for other concepts. */
#define EV_CHECK_RUN "check_run" /* vocab-ok: a webhook event name */
#define PASS_SKIPPED "skipped"   /* vocab-ok: a pass another instance made (metrics label) */
#define RC_LEASE_NAME "reconciler"
#define RC_STATE_KEY "reconcile:state"
/* The state record's JSON text at most. */
#define RC_STATE_MAX (8u * 1024u)
/* The lease is held for a pass only, renewed before each page and each ask, and given back at
 * its end: an instance that restarts (or dies) never keeps the others, or its own successor,
 * waiting. */
#define RC_PASS_LEASE_MS (5LL * 60 * 1000)
/* Longest event and action names kept: the handled ones are shorter. */
#define RC_NAME_MAX 24u

/* ---------------------------------------------------------------- events */

bool reconcile_event_handled(const char *event, const char *action)
{
    static const char *const pr_actions[] = {"opened", "reopened", "synchronize", "closed",
                                             "labeled"};
    if (!event)
        return false;
    if (strcmp(event, "push") == 0)
        return true;
    if (!action)
        return false;
    if (strcmp(event, "pull_request") == 0) {
        for (size_t i = 0; i < sizeof(pr_actions) / sizeof(pr_actions[0]); i++) {
            if (strcmp(action, pr_actions[i]) == 0)
                return true;
        }
        return false;
    }
    return (strcmp(event, EV_CHECK_RUN) == 0 || strcmp(event, "check_suite") == 0) &&
           strcmp(action, "rerequested") == 0;
}

/* ---------------------------------------------------------------- state in the store */

typedef struct rc_state {
    int64_t mark;                /* epoch s: newest attempt the last listing started from */
    char backlog[GH_CURSOR_MAX]; /* where an unfinished listing goes on, "" when none */
    int64_t backlog_floor;       /* epoch s: how far back the backlog reads */
    int64_t last_ok_at;          /* ms */
    int64_t last_pass_at;        /* ms */
    int64_t missing, asked;
    char error[256];
} rc_state;

static int64_t get_int(const jv *doc, const char *key)
{
    int64_t v = 0;
    return jv_int(jv_get(doc, key), &v) ? v : 0;
}

static void get_str(const jv *doc, const char *key, char *out, size_t outsz)
{
    const char *s = jv_str(jv_get(doc, key));
    snprintf(out, outsz, "%s", s ? s : "");
}

/* The state as the last pass left it; zeroed when there is none (*found false; may be NULL) or
 * it cannot be read. */
static crcr_err state_load(store *st, rc_state *s, bool *found)
{
    memset(s, 0, sizeof(*s));
    if (found)
        *found = false;
    buf_t b;
    buf_init(&b, RC_STATE_MAX);
    crcr_err e = store_kv_get(st, RC_STATE_KEY, &b, 0);
    if (e == CRCR_E_NOT_FOUND) {
        buf_free(&b);
        return CRCR_OK;
    }
    if (found)
        *found = !e;
    jv *doc = e ? NULL : jv_parse(buf_cstr(&b), b.len, NULL, 0);
    buf_free(&b);
    if (e)
        return e;
    if (jv_is_obj(doc)) {
        s->mark = get_int(doc, "mark");
        get_str(doc, "backlog", s->backlog, sizeof(s->backlog));
        s->backlog_floor = get_int(doc, "backlog_floor");
        s->last_ok_at = get_int(doc, "last_ok_at");
        s->last_pass_at = get_int(doc, "last_pass_at");
        s->missing = get_int(doc, "missing");
        s->asked = get_int(doc, "asked");
        get_str(doc, "error", s->error, sizeof(s->error));
    }
    jv_free(doc);
    return CRCR_OK;
}

static crcr_err state_save(store *st, const rc_state *s)
{
    jv *doc = jv_new_obj();
    if (!doc)
        return CRCR_E_NOMEM;
    jv_set(doc, "mark", jv_new_int(s->mark));
    jv_set(doc, "backlog", jv_new_str(s->backlog));
    jv_set(doc, "backlog_floor", jv_new_int(s->backlog_floor));
    jv_set(doc, "last_ok_at", jv_new_int(s->last_ok_at));
    jv_set(doc, "last_pass_at", jv_new_int(s->last_pass_at));
    jv_set(doc, "missing", jv_new_int(s->missing));
    jv_set(doc, "asked", jv_new_int(s->asked));
    jv_set(doc, "error", jv_new_str(s->error));
    buf_t b;
    buf_init(&b, RC_STATE_MAX);
    crcr_err e = jv_dump(doc, &b);
    jv_free(doc);
    if (!e)
        e = store_kv_put(st, RC_STATE_KEY, b.data, b.len, 0);
    buf_free(&b);
    return e;
}

crcr_err reconcile_status_get(store *st, reconcile_status *out)
{
    memset(out, 0, sizeof(*out));
    rc_state s;
    bool found = false;
    crcr_err e = state_load(st, &s, &found);
    if (e || !found)
        return e;
    out->known = true;
    out->last_ok_at = s.last_ok_at;
    out->last_pass_at = s.last_pass_at;
    out->missing = s.missing;
    out->asked = s.asked;
    out->partial = s.backlog[0] != '\0';
    snprintf(out->last_error, sizeof(out->last_error), "%s", s.error);
    return CRCR_OK;
}

/* ---------------------------------------------------------------- the lease */

/* Renews the pass's lease; false when this instance does not hold it any more (it ran out and
 * another took it): the pass must stop. */
static bool lease_keep(const reconcile_deps *d)
{
    bool held = false;
    return store_lease(d->st, RC_LEASE_NAME, d->owner, clock_now_ms(), RC_PASS_LEASE_MS, &held) ==
               CRCR_OK &&
           held;
}

/* ---------------------------------------------------------------- reading the log */

/* One attempt of a handled event, as the log lists it. */
typedef struct rc_attempt {
    int64_t id;
    int64_t at; /* delivered_at, epoch s */
    int status_code;
    char guid[CRCR_DELIVERY_ID_MAX];
    char event[RC_NAME_MAX];
    char action[RC_NAME_MAX]; /* "" when none */
} rc_attempt;

typedef struct rc_log {
    rc_attempt *v; /* owned (free) */
    size_t n, cap;
    int pages;
    int64_t newest; /* delivered_at of the newest attempt read (any event), 0 when none */
} rc_log;

/* How one listing (from the top, or from a backlog cursor) ended. */
typedef struct rc_read {
    bool done;                  /* it reached its floor or the end of the log */
    char resume[GH_CURSOR_MAX]; /* where it goes on when !done */
} rc_read;

static void copy_name(char *dst, size_t dsz, const char *src)
{
    snprintf(dst, dsz, "%s", src ? src : "");
}

/* Why a request failed, for the log, the state and the redelivery record (shown by the HUD):
 * the client's text, then GitHub's message when the answer had one (a 403 says what is
 * missing), with anything credential-shaped scrubbed and cut to errsz. */
static void listing_error(const gh_resp *r, char *err, size_t errsz)
{
    const char *msg = NULL;
    jv *doc = r->body.len ? jv_parse(buf_cstr(&r->body), r->body.len, NULL, 0) : NULL;
    msg = jv_path_str(doc, "message");
    char raw[512];
    int n = snprintf(raw, sizeof(raw), "%s%s%s", r->error[0] ? r->error : "request failed",
                     msg ? ": " : "", msg ? msg : "");
    if (n < 0 || (size_t)n >= sizeof(raw)) /* cut: the start says what failed */
        raw[sizeof(raw) - 1] = '\0';
    jv_free(doc);
    buf_t clean;
    buf_init(&clean, 2 * sizeof(raw));
    if (log_scrub(raw, strlen(raw), &clean) == CRCR_OK)
        snprintf(err, errsz, "%.*s", (int)(errsz - 1), buf_cstr(&clean));
    else
        snprintf(err, errsz, "%s", "(error text withheld)");
    buf_free(&clean);
}

/* Adds one listed item to the log when it is an attempt of a handled event at or after `floor`.
 * Returns false when the item is older than `floor` (the listing is done: it is newest first). */
static bool take_item(const jv *it, int64_t floor, rc_log *log, bool *full)
{
    const char *at_s = jv_path_str(it, "delivered_at");
    int64_t at = 0, id = 0, code = 0;
    if (!at_s || !http_parse_iso8601_utc(at_s, &at) || !jv_int(jv_get(it, "id"), &id) || id <= 0)
        return true; /* not an attempt we can use; GitHub always sends both */
    if (at < floor)
        return false;
    if (at > log->newest)
        log->newest = at;
    const char *guid = jv_path_str(it, "guid");
    const char *event = jv_path_str(it, "event");
    const char *action = jv_path_str(it, "action");
    if (!guid || !ids_delivery_valid(guid) || !reconcile_event_handled(event, action))
        return true;
    if (!jv_int(jv_get(it, "status_code"), &code))
        code = 0;
    if (log->n >= RC_MAX_ATTEMPTS) {
        *full = true;
        return true;
    }
    rc_attempt *a = vec_push((void **)&log->v, &log->n, &log->cap, sizeof(*log->v));
    if (!a) {
        *full = true;
        return true;
    }
    a->id = id;
    a->at = at;
    a->status_code = (int)code;
    copy_name(a->guid, sizeof(a->guid), guid);
    copy_name(a->event, sizeof(a->event), event);
    copy_name(a->action, sizeof(a->action), action);
    return true;
}

/* Lists the log from `cursor` ("" or NULL: the newest page) back to `floor`, taking at most
 * *pages_left pages. CRCR_OK with *rd telling where it ended; an error with its reason in err. */
static crcr_err read_log(const reconcile_deps *d, const char *cursor, int64_t floor,
                         int *pages_left, rc_log *log, rc_read *rd, char *err, size_t errsz)
{
    char at[GH_CURSOR_MAX], next[GH_CURSOR_MAX];
    copy_name(at, sizeof(at), cursor);
    rd->done = false;
    rd->resume[0] = '\0';
    gh_resp r;
    gh_resp_init(&r);
    crcr_err e = CRCR_OK;
    while (!rd->done) {
        if (*pages_left <= 0 || log->n + RC_PER_PAGE > RC_MAX_ATTEMPTS ||
            (d->stop && atomic_load(d->stop))) {
            copy_name(rd->resume, sizeof(rd->resume), at); /* this page is not read yet */
            break;
        }
        if (!lease_keep(d)) {
            snprintf(err, errsz, "lost the store lease \"" RC_LEASE_NAME "\" during the pass");
            e = CRCR_E_STATE;
            break;
        }
        e = gh_hook_deliveries(d->gh, RC_PER_PAGE, at, next, &r);
        if (e) {
            listing_error(&r, err, errsz);
            break;
        }
        (*pages_left)--;
        log->pages++;
        jv *page = jv_parse(buf_cstr(&r.body), r.body.len, NULL, 0);
        if (!jv_is_arr(page)) {
            jv_free(page);
            snprintf(err, errsz, "GET /app/hook/deliveries: the answer is not a JSON array");
            e = CRCR_E_INVALID;
            break;
        }
        bool full = false, older = false;
        for (size_t i = 0; i < jv_arr_len(page) && !older; i++)
            older = !take_item(jv_arr_at(page, i), floor, log, &full);
        size_t n_items = jv_arr_len(page);
        jv_free(page);
        if (full) { /* cannot happen with the check above; never loop on it */
            snprintf(err, errsz, "more than %u attempts in one pass", RC_MAX_ATTEMPTS);
            e = CRCR_E_TOO_LARGE;
            break;
        }
        if (older || !next[0] || n_items == 0)
            rd->done = true;
        else
            copy_name(at, sizeof(at), next);
    }
    gh_resp_free(&r);
    return e;
}

/* ---------------------------------------------------------------- grouping */

/* A guid without a 2xx attempt. Strings point into the log. */
typedef struct rc_guid {
    const char *guid, *event, *action; /* action NULL when none */
    int64_t latest_id;                 /* the attempt to redeliver */
    int64_t first_at;                  /* its oldest attempt read, epoch s */
} rc_guid;

static int by_guid_then_newest(const void *pa, const void *pb)
{
    const rc_attempt *a = pa, *b = pb;
    int c = strcmp(a->guid, b->guid);
    if (c)
        return c;
    return a->id < b->id ? 1 : a->id > b->id ? -1 : 0;
}

static int by_age(const void *pa, const void *pb)
{
    const rc_guid *a = pa, *b = pb;
    if (a->first_at != b->first_at)
        return a->first_at < b->first_at ? -1 : 1;
    return strcmp(a->guid, b->guid);
}

/* The guids of `log` that have no 2xx attempt, oldest first, into *out (owned by the caller,
 * free). *n_guids receives how many distinct guids the log holds. */
static crcr_err failed_guids(rc_log *log, rc_guid **out, size_t *n, int *n_guids)
{
    *out = NULL;
    *n = 0;
    *n_guids = 0;
    if (log->n == 0)
        return CRCR_OK;
    qsort(log->v, log->n, sizeof(*log->v), by_guid_then_newest);
    rc_guid *v = calloc(log->n, sizeof(*v));
    if (!v)
        return CRCR_E_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < log->n;) {
        size_t j = i;
        bool ok = false;
        int64_t first = log->v[i].at;
        for (; j < log->n && strcmp(log->v[j].guid, log->v[i].guid) == 0; j++) {
            ok = ok || (log->v[j].status_code >= 200 && log->v[j].status_code < 300);
            if (log->v[j].at < first)
                first = log->v[j].at;
        }
        (*n_guids)++;
        if (!ok) { /* log->v[i] is the guid's newest attempt */
            v[k++] = (rc_guid){.guid = log->v[i].guid,
                               .event = log->v[i].event,
                               .action = log->v[i].action[0] ? log->v[i].action : NULL,
                               .latest_id = log->v[i].id,
                               .first_at = first};
        }
        i = j;
    }
    qsort(v, k, sizeof(*v), by_age);
    *out = v;
    *n = k;
    return CRCR_OK;
}

/* ---------------------------------------------------------------- asking */

/* Whether an ask GitHub did not take should be made again at the next pass: it never reached
 * GitHub, or GitHub could not take it now (5xx, 403 for a missing permission or a secondary
 * limit, 429). */
static bool ask_transient(long status)
{
    return status == 0 || status >= 500 || status == 403 || status == 429;
}

/* Asks for the missing guids of `v` (oldest first). *hold_at receives the delivered_at of the
 * oldest missing guid that may still be asked for later (INT64_MAX when none): the next pass
 * must read back to it. */
static void ask_missing(const reconcile_deps *d, int64_t now, rc_guid *v, size_t n,
                        reconcile_result *res, int64_t *hold_at)
{
    *hold_at = INT64_MAX;
    bool asking = true;
    int sent = 0;
    for (size_t i = 0; i < n; i++) {
        rc_guid *g = &v[i];
        crcr_err e = store_get_delivery(d->st, g->guid, NULL, NULL, NULL);
        if (e == CRCR_OK)
            continue; /* stored: a 2xx the log does not show (e.g. answered after GitHub's 10 s) */
        if (e != CRCR_E_NOT_FOUND) {
            snprintf(res->error, sizeof(res->error), "store: %s", crcr_strerror(e));
            asking = false;
        }
        res->missing++;
        if (!asking || sent >= d->cfg->reconcile_max_per_pass ||
            (d->stop && atomic_load(d->stop))) {
            res->held++;
            if (g->first_at < *hold_at)
                *hold_at = g->first_at;
            continue;
        }
        if (!lease_keep(d)) {
            snprintf(res->error, sizeof(res->error),
                     "lost the store lease \"" RC_LEASE_NAME "\" during the pass");
            asking = false;
            res->held++;
            if (g->first_at < *hold_at)
                *hold_at = g->first_at;
            continue;
        }
        bool allowed = false;
        int asks = 0;
        e = store_redelivery_begin(d->st, g->guid, g->latest_id, g->event, g->action, now,
                                   RC_MAX_ASKS, now - RC_ASK_STALE_MS, &allowed, &asks);
        if (e) {
            snprintf(res->error, sizeof(res->error), "store: %s", crcr_strerror(e));
            asking = false;
            res->held++;
            if (g->first_at < *hold_at)
                *hold_at = g->first_at;
            continue;
        }
        if (!allowed) {
            if (asks >= RC_MAX_ASKS) {
                res->gave_up++;
            } else { /* its redelivery is on its way: watch it */
                res->held++;
                if (g->first_at < *hold_at)
                    *hold_at = g->first_at;
            }
            continue;
        }
        sent++;
        char id_s[24], n_s[16];
        snprintf(id_s, sizeof(id_s), "%lld", (long long)g->latest_id);
        snprintf(n_s, sizeof(n_s), "%d", asks);
        gh_resp r;
        gh_resp_init(&r);
        e = gh_hook_redeliver(d->gh, g->latest_id, &r);
        if (!e) {
            res->asked++;
            metrics_reconcile_redelivery("accepted");
            store_redelivery_done(d->st, g->guid, r.status, "accepted", true);
            LOG_INFO("reconcile.redeliver", "delivery", g->guid, "event", g->event, "action",
                     g->action, "attempt_id", id_s, "ask", n_s, NULL);
            if (asks < RC_MAX_ASKS && g->first_at < *hold_at)
                *hold_at = g->first_at; /* watch whether it arrives */
        } else {
            res->ask_failed++;
            metrics_reconcile_redelivery("failed");
            char why[200];
            listing_error(&r, why, sizeof(why));
            bool again = ask_transient(r.status);
            store_redelivery_done(d->st, g->guid, r.status, why, !again);
            LOG_WARN("reconcile.redeliver_failed", "delivery", g->guid, "attempt_id", id_s, "error",
                     why, NULL);
            if (again) {
                snprintf(res->error, sizeof(res->error), "redelivery refused: %s", why);
                asking = false;
                res->held++;
                if (g->first_at < *hold_at)
                    *hold_at = g->first_at;
            }
        }
        gh_resp_free(&r);
    }
}

/* ---------------------------------------------------------------- a pass */

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* The pass itself, under the lease, from state `st`. */
static void pass_body(const reconcile_deps *d, int64_t now, rc_state st, reconcile_result *res)
{
    int64_t t0 = clock_mono_ms();
    crcr_err e;
    int64_t now_s = now / 1000;
    int64_t window_floor = now_s - d->cfg->reconcile_window_s;
    int64_t floor_a = st.mark > 0 ? max64(window_floor, st.mark - RC_OVERLAP_S) : window_floor;
    int pages_left = RC_MAX_PAGES;
    rc_log log = {0};
    rc_read ra = {0}, rb = {0};
    bool had_backlog = st.backlog[0] != '\0', ran_a = false;
    int64_t newest_a = 0;
    /* The backlog first: every pass makes progress on it, however busy the top of the log is.
     * The top is read once the backlog is done, with the pages left. */
    e = CRCR_OK;
    if (had_backlog)
        e = read_log(d, st.backlog, max64(window_floor, st.backlog_floor), &pages_left, &log, &rb,
                     res->error, sizeof(res->error));
    if (!e && (!had_backlog || rb.done)) {
        ran_a = true;
        log.newest = 0;
        e = read_log(d, NULL, floor_a, &pages_left, &log, &ra, res->error, sizeof(res->error));
        newest_a = log.newest;
    }
    if (d->stop && atomic_load(d->stop)) { /* shutting down: the next start reads again */
        free(log.v);
        return;
    }

    rc_guid *missing = NULL;
    size_t n_missing = 0;
    if (!e)
        e = failed_guids(&log, &missing, &n_missing, &res->guids);
    res->pages = log.pages;
    res->attempts_read = (int)log.n;
    if (e) {
        if (!res->error[0])
            snprintf(res->error, sizeof(res->error), "%s", crcr_strerror(e));
        st.last_pass_at = now;
        snprintf(st.error, sizeof(st.error), "%s", res->error);
        state_save(d->st, &st);
        free(log.v);
        metrics_reconcile_pass("failed");
        LOG_WARN("reconcile.failed", "error", res->error, NULL);
        return;
    }
    int64_t hold_at = INT64_MAX;
    ask_missing(d, now, missing, n_missing, res, &hold_at);

    /* The next pass's starting points. */
    rc_state next = st;
    if (newest_a > 0)
        next.mark = newest_a;
    if (hold_at != INT64_MAX && hold_at + RC_OVERLAP_S < next.mark)
        next.mark = hold_at + RC_OVERLAP_S; /* mark - overlap reaches the held guid */
    if (had_backlog && !rb.done) {
        copy_name(next.backlog, sizeof(next.backlog), rb.resume); /* its floor stays */
    } else if (ran_a && !ra.done) {
        copy_name(next.backlog, sizeof(next.backlog), ra.resume);
        next.backlog_floor = floor_a;
    } else {
        next.backlog[0] = '\0';
        next.backlog_floor = 0;
    }
    res->partial = next.backlog[0] != '\0';
    res->ok = !res->error[0];
    next.last_pass_at = now;
    if (res->ok)
        next.last_ok_at = now;
    next.missing = res->missing;
    next.asked = res->asked;
    snprintf(next.error, sizeof(next.error), "%s", res->error);
    e = state_save(d->st, &next);
    if (e && res->ok) {
        res->ok = false;
        snprintf(res->error, sizeof(res->error), "store: %s", crcr_strerror(e));
    }
    free(missing);
    free(log.v);
    metrics_reconcile_pass(res->ok ? "ok" : "failed");
    char pages[16], read[16], guids[16], miss[16], asked[16], failed[16], held_s[16], gave[16],
        ms[24];
    snprintf(pages, sizeof(pages), "%d", res->pages);
    snprintf(read, sizeof(read), "%d", res->attempts_read);
    snprintf(guids, sizeof(guids), "%d", res->guids);
    snprintf(miss, sizeof(miss), "%d", res->missing);
    snprintf(asked, sizeof(asked), "%d", res->asked);
    snprintf(failed, sizeof(failed), "%d", res->ask_failed);
    snprintf(held_s, sizeof(held_s), "%d", res->held);
    snprintf(gave, sizeof(gave), "%d", res->gave_up);
    snprintf(ms, sizeof(ms), "%lld", (long long)(clock_mono_ms() - t0));
    if (res->ok)
        LOG_INFO("reconcile.pass", "pages", pages, "attempts", read, "guids", guids, "missing",
                 miss, "asked", asked, "held", held_s, "gave_up", gave, "backlog",
                 res->partial ? "1" : NULL, "ms", ms, NULL);
    else
        LOG_WARN("reconcile.failed", "error", res->error, "pages", pages, "missing", miss, "asked",
                 asked, "ask_failed", failed, "ms", ms, NULL);
}

void reconcile_pass(const reconcile_deps *d, int64_t now, bool startup, reconcile_result *res)
{
    memset(res, 0, sizeof(*res));
    bool held = false;
    if (store_lease(d->st, RC_LEASE_NAME, d->owner, now, RC_PASS_LEASE_MS, &held) != CRCR_OK ||
        !held) {
        metrics_reconcile_pass(PASS_SKIPPED); /* another instance is passing now */
        return;
    }
    rc_state st;
    crcr_err e = state_load(d->st, &st, NULL);
    if (e) {
        snprintf(res->error, sizeof(res->error), "store: %s", crcr_strerror(e));
        metrics_reconcile_pass("failed");
        LOG_WARN("reconcile.failed", "error", res->error, NULL);
    } else if (!startup && st.last_pass_at > 0 && st.last_pass_at <= now &&
               now - st.last_pass_at < (int64_t)d->cfg->reconcile_s * 500) {
        metrics_reconcile_pass(
            PASS_SKIPPED); /* another instance passed less than half a period ago */
    } else {
        res->leader = true;
        pass_body(d, now, st, res);
    }
    bool ignored;
    store_lease(d->st, RC_LEASE_NAME, d->owner, clock_now_ms(), 0, &ignored); /* give it back */
}

/* ---------------------------------------------------------------- the thread */

struct reconciler {
    reconcile_deps d;
    char owner[128]; /* d.owner */
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
};

static void *rc_main(void *arg)
{
    reconciler *r = arg;
    int64_t next = clock_mono_ms(); /* the first pass at once */
    bool startup = true;
    pthread_mutex_lock(&r->mu);
    while (!atomic_load(&r->stop)) {
        int64_t now = clock_mono_ms();
        if (now >= next) {
            pthread_mutex_unlock(&r->mu);
            reconcile_result res;
            reconcile_pass(&r->d, clock_now_ms(), startup, &res);
            startup = false;
            /* A period from the pass's start, not its end: the pass is counted (metrics) before
             * it gives its lease back, and a clock moved in between (a test that saw the count)
             * made the next pass a whole period later than that move. */
            next = now + (int64_t)r->d.cfg->reconcile_s * 1000;
            pthread_mutex_lock(&r->mu);
            continue;
        }
        int64_t wait = clock_wait_ms(next - now);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(wait / 1000);
        ts.tv_nsec += (long)(wait % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Owner: the caller, through reconcile_stop. */
reconciler *reconcile_start(const reconcile_deps *d, char *err, size_t errsz)
{
    reconciler *r = calloc(1, sizeof(*r));
    if (!r) {
        snprintf(err, errsz, "reconciler: out of memory");
        return NULL;
    }
    r->d = *d;
    r->d.stop = &r->stop;
    snprintf(r->owner, sizeof(r->owner), "%s", d->owner ? d->owner : "crcr");
    r->d.owner = r->owner;
    atomic_init(&r->stop, false);
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->th, NULL, rc_main, r) != 0) {
        snprintf(err, errsz, "reconciler: cannot start its thread");
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    return r;
}

void reconcile_stop(reconciler *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    atomic_store(&r->stop, true);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
