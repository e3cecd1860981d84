/*
 * outbox.c - worker threads over the store's outbox; see outbox.h for the retry policy.
 *
 * Each worker loops: take a claimed row, carry it out, record the outcome. Claims are made by one
 * worker at a time for all idle ones, a batch per store transaction (worker()). When nothing is
 * due a worker sleeps on a condition variable until the next row's due time, a wake-up, or a 1 s
 * poll (rows can also become due because a lease expired). A claimed row waits in memory only
 * for an idle worker; a crash loses nothing: the row stays `running` until the store hands it
 * out again.
 */
#include "outbox.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#include "clock.h"
#include "checks.h"
#include "depends_on.h"
#include "dispatch.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"
#include "oncall.h"
#include "store.h"
#include "vocab.h"

#define OUTBOX_POLL_MS 1000
#define OUTBOX_PAUSES_MAX 1024
/* Rows one claim takes at the most (one store transaction); also the hand-over queue's size.
 * Each claimed row holds its delivery's payload until it is done: with the outbox behind a 30 KB
 * ingest at c64, batches of 32 raised the peak RSS by 4.2 MiB, 16 by 3.3, 8 by 2.9, 4 by 2.0
 * (bench/RESULTS.md); 8 still claims a 4-target webhook's rows together. */
#define OUTBOX_BATCH_MAX 8
#define OUTBOX_DEFAULT_PAUSE_S 60

typedef struct pause_entry {
    int64_t installation;
    int64_t until_ms;
} pause_entry;

struct outbox {
    const crcr_config *cfg;
    store *st;
    gh_client *gh;
    allowlist_source *allow;
    pthread_t threads[CRCR_MAX_DISPATCH_WORKERS];
    size_t n_threads;
    pthread_t waker; /* relays the store's cross-process wake-ups (PostgreSQL NOTIFY) */
    bool has_waker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    bool claiming; /* a worker is claiming for all (see worker()) */
    bool pending;  /* rows may be due that no claim has looked for yet */
    size_t idle;   /* workers waiting on cv */
    bool watching; /* with a test clock: an idle worker waits in short slices (see worker()) */
    store_job handoff[OUTBOX_BATCH_MAX]; /* claimed rows waiting for a worker, owned here */
    size_t handoff_n;
    pause_entry pauses[OUTBOX_PAUSES_MAX];
    size_t n_pauses;
    atomic_uint_fast64_t sent, dry_run, retried, dead, pauses_count;
};

/* The key of the lease_lost log line that says whether the request went out. */
#define LOG_KEY_SENT "sent" /* vocab-ok: a log key, not the outbox state */

/* Case-insensitive substring test (strcasestr is a GNU extension). */
static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    }
    return false;
}

outbox_verdict outbox_classify(long status, long retry_after_s, long rl_remaining, const char *body)
{
    if (status >= 200 && status < 300)
        return OUTBOX_DONE;
    /* 401: GitHub refused a credential the client already renewed once (clock skew, a key or
     * secret being rotated): transient from the row's point of view. */
    if (status == 0 || status >= 500 || status == 408 || status == 401)
        return OUTBOX_RETRY;
    if (status == 429)
        return OUTBOX_RATE_LIMIT;
    if (status == 403) {
        if (retry_after_s >= 0 || rl_remaining == 0)
            return OUTBOX_RATE_LIMIT;
        if (body && contains_nocase(body, "rate limit"))
            return OUTBOX_RATE_LIMIT;
        return OUTBOX_PERMANENT;
    }
    return OUTBOX_PERMANENT;
}

/* `base` * 2^(attempts-1), stopping once it reaches `limit` (no overflow for any attempts). */
static int64_t doubled(int64_t base, int attempts, int64_t limit)
{
    int64_t d = base;
    for (int i = 1; i < attempts && d < limit; i++)
        d *= 2;
    return d;
}

/* `d` capped at max_ms, jittered into [d/2, d]. */
static int64_t jittered(int64_t d, long max_ms, double rnd)
{
    if (d > max_ms)
        d = max_ms;
    return d / 2 + (int64_t)((double)(d - d / 2) * rnd);
}

int64_t outbox_backoff_ms(long base_ms, long max_ms, int attempts, double rnd)
{
    if (attempts < 1)
        attempts = 1;
    int64_t d = doubled(base_ms, attempts, max_ms);
    if (d > OUTBOX_QUICK_MAX_MS) { /* past the quick retries: the long tail */
        int64_t tail = doubled(OUTBOX_TAIL_BASE_MS, attempts, max_ms);
        if (tail > d)
            d = tail;
    }
    return jittered(d, max_ms, rnd);
}

int64_t outbox_rate_limit_pause_ms(long max_ms, int attempts, double rnd)
{
    if (attempts < 1)
        attempts = 1;
    int64_t d = jittered(doubled(OUTBOX_TAIL_BASE_MS, attempts, max_ms), max_ms, rnd);
    return d < OUTBOX_DEFAULT_PAUSE_S * 1000 ? OUTBOX_DEFAULT_PAUSE_S * 1000 : d;
}

/* A small per-thread xorshift generator; jitter needs spread, not secrecy. */
static double next_random(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return (double)(x >> 11) / (double)(1ULL << 53);
}

static void pause_key(int64_t installation, char *key, size_t keysz)
{
    snprintf(key, keysz, "pause:installation:%lld", (long long)installation);
}

/* When this process's pause of the installation ends (0: not paused). */
static int64_t pause_until_local(outbox *ob, int64_t installation, int64_t now)
{
    int64_t until = 0;
    pthread_mutex_lock(&ob->mu);
    for (size_t i = 0; i < ob->n_pauses; i++) {
        if (ob->pauses[i].installation == installation && ob->pauses[i].until_ms > now)
            until = ob->pauses[i].until_ms;
    }
    pthread_mutex_unlock(&ob->mu);
    return until;
}

/* When the installation's pause ends (0: not paused). Pauses live in memory and, so that they
 * survive a restart and reach the other instances sharing the store, in the store's kv. */
static int64_t pause_until(outbox *ob, int64_t installation, int64_t now)
{
    int64_t until = pause_until_local(ob, installation, now);
    if (until)
        return until;
    char key[64];
    pause_key(installation, key, sizeof(key));
    buf_t v;
    buf_init(&v, 32);
    if (store_kv_get(ob->st, key, &v, now) == CRCR_OK) {
        char *end = NULL;
        long long t = strtoll(buf_cstr(&v), &end, 10);
        if (end && *end == '\0' && t > now)
            until = (int64_t)t;
    }
    buf_free(&v);
    return until;
}

static void pause_set(outbox *ob, int64_t installation, int64_t until, int64_t now)
{
    pthread_mutex_lock(&ob->mu);
    size_t w = 0;
    bool found = false;
    for (size_t i = 0; i < ob->n_pauses; i++) {
        pause_entry e = ob->pauses[i];
        if (e.until_ms <= now)
            continue; /* expired: drop */
        if (e.installation == installation) {
            if (until > e.until_ms)
                e.until_ms = until;
            found = true;
        }
        ob->pauses[w++] = e;
    }
    ob->n_pauses = w;
    if (!found && ob->n_pauses < OUTBOX_PAUSES_MAX)
        ob->pauses[ob->n_pauses++] = (pause_entry){installation, until};
    pthread_mutex_unlock(&ob->mu);
    atomic_fetch_add(&ob->pauses_count, 1);
    char key[64], val[24];
    pause_key(installation, key, sizeof(key));
    snprintf(val, sizeof(val), "%lld", (long long)until);
    store_kv_put(ob->st, key, val, strlen(val), until);
}

/* The "message" of a GitHub error body (scrubbed, bounded), or the status line. */
static void error_text(long status, const char *what, const gh_resp *r, char *out, size_t outsz)
{
    const char *msg = NULL;
    jv *doc = NULL;
    if (r && r->body.len > 0 && r->body.len < 64 * 1024) {
        doc = jv_parse(r->body.data, r->body.len, NULL, 0);
        msg = jv_path_str(doc, "message");
    }
    buf_t clean;
    buf_init(&clean, 200);
    if (msg)
        log_scrub(msg, strlen(msg), &clean); /* truncated at the cap: fine for a reason text */
    if (status == 0)
        snprintf(out, outsz, "%s: %s", what, r && r->error[0] ? r->error : "no answer");
    else if (r && r->error[0])
        snprintf(out, outsz, "%s: %s%s%s", what, r->error, clean.len ? ": " : "", buf_cstr(&clean));
    else
        snprintf(out, outsz, "%s: HTTP %ld%s%s", what, status, clean.len ? ": " : "",
                 buf_cstr(&clean));
    buf_free(&clean);
    jv_free(doc);
}

typedef struct outcome {
    outbox_verdict verdict;
    long status;
    long retry_after_s;
    long rl_remaining;
    int64_t rl_reset;
    int64_t installation;
    char error[400];
} outcome;

static void outcome_from(outcome *o, const char *what, const gh_resp *r)
{
    o->status = r->status;
    o->retry_after_s = r->retry_after_s;
    o->rl_remaining = r->rl_remaining;
    o->rl_reset = r->rl_reset;
    o->verdict = outbox_classify(r->status, r->retry_after_s, r->rl_remaining, buf_cstr(&r->body));
    if (o->verdict != OUTBOX_DONE)
        error_text(r->status, what, r, o->error, sizeof(o->error));
}

/*
 * Called right before a request goes out for `job`: renews the row's lease once a third of it
 * has passed since it was taken or last renewed. false (o->verdict OUTBOX_LEASE_LOST) when the
 * row belongs to another worker now, or when the store cannot renew a lease that is nearly over.
 */
static bool lease_still_ours(outbox *ob, store_job *job, outcome *o)
{
    int64_t lease_ms = (int64_t)ob->cfg->lease_s * 1000;
    int64_t now = clock_now_ms();
    if (now < job->lease_until - lease_ms * 2 / 3)
        return true;
    crcr_err e = store_job_renew(ob->st, job, now, lease_ms);
    if (e == CRCR_OK || (e != CRCR_E_STATE && clock_now_ms() < job->lease_until - lease_ms / 4))
        return true;
    o->verdict = OUTBOX_LEASE_LOST;
    snprintf(o->error, sizeof(o->error), "%s",
             e == CRCR_E_STATE ? "lease lost to another worker" : "cannot renew the lease");
    return false;
}

/* Sends one GitHub request as the installation covering `job->target`, honouring a pause of that
 * installation. Fills *o; when `keep` is not NULL the answer stays there (caller frees). */
static void send_as_installation(outbox *ob, store_job *job, const char *method, const char *path,
                                 const char *body, size_t body_len, const char *what, outcome *o,
                                 int64_t now, gh_resp *keep)
{
    const char *repo = job->target;
    gh_resp r;
    gh_resp_init(&r);
    crcr_err e = gh_installation_id(ob->gh, repo, &o->installation, &r);
    if (e) {
        outcome_from(o, "installation lookup", &r);
        if (o->verdict == OUTBOX_DONE) /* a 2xx without an id */
            o->verdict = OUTBOX_RETRY;
        if (e == CRCR_E_HTTP && r.status == 404)
            snprintf(o->error, sizeof(o->error),
                     "App not installed on %s (installation lookup: 404)", repo);
        gh_resp_free(&r);
        return;
    }
    int64_t paused = pause_until(ob, o->installation, now);
    if (!paused && !lease_still_ours(ob, job, o)) {
        gh_resp_free(&r);
        return;
    }
    /* The checks above can wait on the store; a pause this process set meanwhile still counts. */
    if (!paused)
        paused = pause_until_local(ob, o->installation, now = clock_now_ms());
    if (paused > now) {
        o->verdict = OUTBOX_RATE_LIMIT;
        o->rl_reset = -1;
        o->retry_after_s = (long)((paused - now + 999) / 1000);
        o->status = -1; /* marker: waiting, not this row's attempt */
        snprintf(o->error, sizeof(o->error), "installation %lld paused by a rate limit",
                 (long long)o->installation);
        gh_resp_free(&r);
        return;
    }
    gh_resp_free(&r);
    gh_resp_init(&r);
    e = gh_request(ob->gh, GH_AUTH_INSTALLATION, repo, method, path, NULL, body, body_len, &r);
    if (e && e != CRCR_E_HTTP && e != CRCR_E_NETWORK) {
        o->verdict = OUTBOX_RETRY;
        snprintf(o->error, sizeof(o->error), "%s: %s", what, crcr_strerror(e));
    } else {
        outcome_from(o, e == CRCR_E_HTTP ? "token" : what, &r);
    }
    if (keep)
        *keep = r;
    else
        gh_resp_free(&r);
}

/* A fresh outcome: nothing decided yet. */
static void outcome_reset(outcome *o)
{
    *o = (outcome){
        .verdict = OUTBOX_PERMANENT, .retry_after_s = -1, .rl_remaining = -1, .rl_reset = -1};
}

/*
 * Reads the Depends-On pair of a dispatch row at send time (§3.13): GET /repos/{target}/pulls/{n}
 * as the target's installation (Pull requests: read). An open PR resolves the pair; a closed,
 * merged or missing one, or a refusal (403 without a rate limit, 404, 422), leaves it unresolved
 * with its problem: the dispatch goes without the pair, the record, the row's note and the check
 * run say why. Returns false, with *o the verdict for the row, when GitHub did not answer
 * (retried as any request: 5xx, network, rate limits) or the installation is missing.
 */
static bool resolve_pair(outbox *ob, store_job *job, depends_on_pair *pair, outcome *o, int64_t now)
{
    if (!ob->gh) {
        snprintf(pair->problem, sizeof(pair->problem), "not read in dry-run mode");
        return true;
    }
    char path[CRCR_REPO_NAME_MAX + 64];
    snprintf(path, sizeof(path), "/repos/%s/pulls/%lld", pair->repo, (long long)pair->number);
    gh_resp r;
    gh_resp_init(&r);
    send_as_installation(ob, job, "GET", path, NULL, 0, "Depends-On pull request", o, now, &r);
    bool go_on = true;
    if (o->verdict == OUTBOX_DONE) {
        depends_on_from_pull(r.body.data, r.body.len, pair);
    } else if (o->verdict == OUTBOX_PERMANENT && o->installation > 0 && o->status >= 400) {
        /* GitHub's error text is cut to the problem's room (a note for the check run). */
        int room = (int)sizeof(pair->problem) - 1;
        snprintf(pair->problem, sizeof(pair->problem), "%.*s", room,
                 o->status == 404 ? "not found" : o->error);
    } else {
        go_on = false; /* not answered, rate limited, or no installation: the row's outcome */
    }
    gh_resp_free(&r);
    char num[24];
    snprintf(num, sizeof(num), "%lld", (long long)pair->number);
    if (go_on)
        LOG_INFO("outbox.depends_on", "delivery", job->delivery_id, "repo", job->target, "pr", num,
                 "head_sha", pair->resolved ? pair->head_sha : NULL, "problem",
                 pair->resolved ? NULL : pair->problem, NULL);
    return go_on;
}

/* Carries out a dispatch row; `out` receives the request body, `record` (paired rows) the pair's
 * record as sent and `note` what the row's note says of it. */
static void run_dispatch(outbox *ob, store_job *job, outcome *o, dispatch_output *out,
                         buf_t *record, char *note, size_t notesz, int64_t now)
{
    char err[256] = "";
    depends_on_pair pair;
    if (depends_on_record_parse(job->body.data, job->body.len, &pair)) {
        if (!resolve_pair(ob, job, &pair, o, now))
            return;
        outcome_reset(o);
        char label[CRCR_REPO_NAME_MAX + 48];
        depends_on_label(&pair, label, sizeof(label));
        if (pair.resolved)
            snprintf(note, notesz, "Depends-On %s", label);
        else
            snprintf(note, notesz, "Depends-On %s not tested: %s", label, pair.problem);
        if (depends_on_record(&pair, record) != CRCR_OK) {
            o->verdict = OUTBOX_PERMANENT;
            snprintf(o->error, sizeof(o->error), "cannot record the Depends-On pair");
            return;
        }
    }
    dispatch_src src = {
        .event = job->event,
        .delivery_id = job->delivery_id,
        .payload = buf_cstr(&job->payload),
        .payload_len = job->payload.len,
        .target = job->target,
        .head_sha = job->head_sha,
        .pr_number = job->pr_number,
        .pair = record->len ? record->data : NULL,
        .pair_len = record->len,
    };
    crcr_err e = dispatch_row_body(ob->cfg, &src, out, err, sizeof(err));
    if (e) {
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "cannot build dispatch: %s",
                 err[0] ? err : crcr_strerror(e));
        return;
    }
    if (!ob->gh) {
        o->verdict = OUTBOX_DONE;
        return;
    }
    char path[CRCR_REPO_NAME_MAX + 32];
    snprintf(path, sizeof(path), "/repos/%s/dispatches", job->target);
    send_as_installation(ob, job, "POST", path, buf_cstr(&out->body), out->body.len,
                         ob_kind_name(OB_KIND_DISPATCH), o, now, NULL);
}

/* A check run on the upstream PR: the row's body is the request body. */
static void run_check_run(outbox *ob, store_job *job, outcome *o, int64_t now)
{
    if (!ob->gh) {
        o->verdict = OUTBOX_DONE;
        return;
    }
    char path[CRCR_REPO_NAME_MAX + 32];
    snprintf(path, sizeof(path), "/repos/%s/check-runs", job->target);
    send_as_installation(ob, job, "POST", path, buf_cstr(&job->body), job->body.len, "check run", o,
                         now, NULL);
}

/* Re-runs a downstream workflow run: body {"run_id":N,"failed_only":bool}. GitHub's 403 "already
 * running" means the run is going anyway: success. */
static void run_rerun(outbox *ob, store_job *job, outcome *o, char *note, size_t notesz,
                      int64_t now)
{
    jv *b = jv_parse(job->body.data ? job->body.data : "", job->body.len, NULL, 0);
    int64_t run_id = 0;
    bool failed_only = jv_is_true(jv_get(b, "failed_only"));
    if (!jv_int(jv_get(b, "run_id"), &run_id) || run_id <= 0) {
        jv_free(b);
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "re-run row without a run id");
        return;
    }
    jv_free(b);
    if (!ob->gh) {
        o->verdict = OUTBOX_DONE;
        return;
    }
    char path[CRCR_REPO_NAME_MAX + 96];
    snprintf(path, sizeof(path), "/repos/%s/actions/runs/%lld/rerun%s", job->target,
             (long long)run_id, failed_only ? "-failed-jobs" : "");
    gh_resp r;
    gh_resp_init(&r);
    send_as_installation(ob, job, "POST", path, NULL, 0, "re-run", o, now, &r);
    if (o->verdict != OUTBOX_DONE && r.status == 403 &&
        contains_nocase(buf_cstr(&r.body), "already running")) {
        o->verdict = OUTBOX_DONE;
        o->error[0] = '\0';
        snprintf(note, notesz, "already running");
    }
    gh_resp_free(&r);
}

#define RERUN_SUITE_MAX_PAGES 20
#define RERUN_SUITE_MAX_RUNS 256

/* "Re-run all checks": lists the suite's check runs (paginated), and queues one full re-run per
 * distinct (downstream repo, run id) of crcr check runs whose repo is L3 or above. */
static void run_rerun_suite(outbox *ob, store_job *job, outcome *o, char *note, size_t notesz,
                            int64_t now)
{
    jv *b = jv_parse(job->body.data ? job->body.data : "", job->body.len, NULL, 0);
    int64_t suite = 0;
    if (!jv_int(jv_get(b, "check_suite_id"), &suite) || suite <= 0) {
        jv_free(b);
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "re-run suite row without a check suite id");
        return;
    }
    jv_free(b);
    if (!ob->gh) {
        o->verdict = OUTBOX_DONE;
        return;
    }
    struct {
        char repo[CRCR_REPO_NAME_MAX];
        int64_t run_id;
    } found[RERUN_SUITE_MAX_RUNS];
    size_t n_found = 0;
    int64_t total = -1, seen = 0;
    allowlist *al = allowlist_source_get(ob->allow);
    for (int page = 1; page <= RERUN_SUITE_MAX_PAGES; page++) {
        char path[CRCR_REPO_NAME_MAX + 128];
        snprintf(path, sizeof(path), "/repos/%s/check-suites/%lld/check-runs?per_page=100&page=%d",
                 job->target, (long long)suite, page);
        gh_resp r;
        gh_resp_init(&r);
        send_as_installation(ob, job, "GET", path, NULL, 0, "check suite listing", o, now, &r);
        if (o->verdict != OUTBOX_DONE) {
            gh_resp_free(&r);
            allowlist_free(al);
            return;
        }
        jv *doc = jv_parse(r.body.data ? r.body.data : "", r.body.len, NULL, 0);
        gh_resp_free(&r);
        jv_int(jv_get(doc, "total_count"), &total);
        jv *runs = jv_get(doc, "check_runs");
        size_t n = jv_arr_len(runs);
        for (size_t i = 0; i < n; i++) {
            jv *cr = jv_arr_at(runs, i);
            char repo[CRCR_REPO_NAME_MAX];
            int64_t run_id = checks_parse_external_id(jv_path_str(cr, "external_id"));
            if (!checks_parse_name(jv_path_str(cr, "name"), repo, sizeof(repo)) || run_id <= 0)
                continue;
            if (allowlist_level(al, repo) < CRCR_LEVEL_L3)
                continue;
            bool dup = false;
            for (size_t k = 0; k < n_found && !dup; k++)
                dup = found[k].run_id == run_id && strcasecmp(found[k].repo, repo) == 0;
            if (!dup && n_found < RERUN_SUITE_MAX_RUNS) {
                snprintf(found[n_found].repo, sizeof(found[0].repo), "%s", repo);
                found[n_found++].run_id = run_id;
            }
        }
        seen += (int64_t)n;
        jv_free(doc);
        if (n == 0 || (total >= 0 && seen >= total))
            break;
    }
    allowlist_free(al);
    store_new_job jobs[RERUN_SUITE_MAX_RUNS];
    char bodies[RERUN_SUITE_MAX_RUNS][64];
    for (size_t k = 0; k < n_found; k++) {
        snprintf(bodies[k], sizeof(bodies[k]), "{\"run_id\":%lld,\"failed_only\":false}",
                 (long long)found[k].run_id);
        jobs[k] = (store_new_job){.kind = ob_kind_name(OB_KIND_RERUN),
                                  .target = found[k].repo,
                                  .body = bodies[k],
                                  .body_len = strlen(bodies[k]),
                                  .due_at = now};
    }
    if (n_found && store_enqueue(ob->st, job->delivery_id, jobs, n_found) != CRCR_OK) {
        o->verdict = OUTBOX_RETRY;
        snprintf(o->error, sizeof(o->error), "cannot queue the re-runs");
        return;
    }
    o->verdict = OUTBOX_DONE;
    snprintf(note, notesz, "%zu re-run%s queued", n_found, n_found == 1 ? "" : "s");
}

/* Comments per listing page: 30 of GitHub's largest (65536 characters) fit CRCR_GH_RESPONSE_MAX. */
#define COMMENT_PAGE_SIZE 30
/* Pages looked at for the marker (3000 comments); past them the comment is posted. */
#define COMMENT_MAX_PAGES 100
/* Life of the record that a PR has its comment: a PR open longer is caught by the marker. */
#define COMMENT_RECORD_TTL_MS (400LL * 24 * 3600 * 1000)

/*
 * The on-call comment on the upstream PR (oncall.h), once per (PR, downstream repo):
 *   1. the store's kv records that it is there: done, nothing sent;
 *   2. the PR's comments (paginated, at most COMMENT_MAX_PAGES pages) hold the marker of the repo
 *      at the start of a comment of this App or of a CRCR_ONCALL_TRUSTED_AUTHORS login (upstream's
 *      bot by default; oncall_comment_is_marker): recorded, done;
 *   3. otherwise the comment is posted and, once GitHub took it, recorded.
 * A crash between 3 and its record is caught by 2 when the row runs again. Rows of one (PR, repo)
 * run one after another (their sequence key). Dry-run records nothing.
 */
static void run_comment(outbox *ob, store_job *job, outcome *o, char *note, size_t notesz)
{
    oncall_row row;
    if (!oncall_row_parse(job->body.data, job->body.len, &row)) {
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "comment row without a PR, repo or text");
        return;
    }
    o->verdict = OUTBOX_DONE;
    buf_t key, val, req;
    buf_init(&key, ONCALL_KEY_MAX);
    buf_init(&val, 64);
    buf_init(&req, ONCALL_ROW_MAX);
    bool found = false, listed = false;
    char path[CRCR_REPO_NAME_MAX + 96];
    if (!ob->cfg->oncall_comments || !ob->gh) {
        if (!ob->cfg->oncall_comments)
            snprintf(note, notesz, "on-call comments are off (CRCR_ONCALL_COMMENTS=0)");
    } else if (oncall_record_key(job->target, row.pr, row.repo, &key) != CRCR_OK) {
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "comment record key too long");
    } else if (store_kv_get(ob->st, buf_cstr(&key), &val, clock_now_ms()) == CRCR_OK) {
        snprintf(note, notesz, "already commented (recorded)");
    } else {
        for (int page = 1; page <= COMMENT_MAX_PAGES && !found && !listed; page++) {
            snprintf(path, sizeof(path), "/repos/%s/issues/%lld/comments?per_page=%d&page=%d",
                     job->target, (long long)row.pr, COMMENT_PAGE_SIZE, page);
            gh_resp r;
            gh_resp_init(&r);
            send_as_installation(ob, job, "GET", path, NULL, 0, "comment listing", o,
                                 clock_now_ms(), &r);
            jv *doc = o->verdict == OUTBOX_DONE
                          ? jv_parse(r.body.data ? r.body.data : "", r.body.len, NULL, 0)
                          : NULL;
            gh_resp_free(&r);
            if (o->verdict != OUTBOX_DONE)
                break;
            if (!jv_is_arr(doc)) {
                o->verdict = OUTBOX_RETRY;
                snprintf(o->error, sizeof(o->error), "comment listing: not a JSON array");
                jv_free(doc);
                break;
            }
            size_t n = jv_arr_len(doc);
            for (size_t i = 0; i < n && !found; i++)
                found = oncall_comment_is_marker(jv_arr_at(doc, i), row.repo, ob->cfg->app_id,
                                                 ob->cfg->oncall_trusted_authors);
            listed = n < COMMENT_PAGE_SIZE;
            jv_free(doc);
        }
        if (o->verdict == OUTBOX_DONE && !found) {
            snprintf(path, sizeof(path), "/repos/%s/issues/%lld/comments", job->target,
                     (long long)row.pr);
            crcr_err e = buf_puts(&req, "{\"body\":");
            if (!e)
                e = jv_quote(&req, row.comment, strlen(row.comment));
            if (!e)
                e = buf_putc(&req, '}');
            if (e) {
                o->verdict = OUTBOX_PERMANENT;
                snprintf(o->error, sizeof(o->error), "comment: %s", crcr_strerror(e));
            } else {
                send_as_installation(ob, job, "POST", path, req.data, req.len,
                                     ob_kind_name(OB_KIND_COMMENT), o, clock_now_ms(), NULL);
            }
        }
        if (o->verdict == OUTBOX_DONE) {
            snprintf(note, notesz, found ? "already commented (marker on the PR)" : "commented");
            if (store_kv_put(ob->st, buf_cstr(&key), "1", 1,
                             clock_now_ms() + COMMENT_RECORD_TTL_MS) != CRCR_OK)
                LOG_WARN("outbox.comment_unrecorded", "repo", row.repo, "reason",
                         "store unavailable; the marker on the PR still prevents a repeat", NULL);
        }
    }
    buf_free(&key);
    buf_free(&val);
    buf_free(&req);
    oncall_row_free(&row);
}

/* Forwards a result to the external HUD in the upstream wire format. */
static void run_hud_forward(outbox *ob, store_job *job, outcome *o)
{
    if (!ob->gh || !ob->cfg->hud_api_url) {
        o->verdict = OUTBOX_DONE;
        return;
    }
    if (!lease_still_ours(ob, job, o))
        return;
    char url[2100];
    snprintf(url, sizeof(url), "%s/crcr/results", ob->cfg->hud_api_url);
    char key_hdr[600];
    snprintf(key_hdr, sizeof(key_hdr), "x-hud-internal-bot: %s",
             ob->cfg->hud_bot_key ? ob->cfg->hud_bot_key : "");
    const char *hdrs[] = {key_hdr, "Content-Type: application/json", NULL};
    gh_resp r;
    gh_resp_init(&r);
    crcr_err e = gh_request_url(ob->gh, "POST", url, hdrs, buf_cstr(&job->body), job->body.len, &r);
    OPENSSL_cleanse(key_hdr, sizeof(key_hdr));
    if (e && e != CRCR_E_NETWORK) {
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "HUD: %s", r.error[0] ? r.error : crcr_strerror(e));
    } else {
        outcome_from(o, "HUD", &r);
        if (o->verdict == OUTBOX_RATE_LIMIT)
            o->verdict = OUTBOX_RETRY; /* the HUD is not GitHub: no installation to pause */
    }
    gh_resp_free(&r);
}

/* The row's note: what trimming removed (the paths alone, as always), or for a paired dispatch
 * what it says of its pair, then "; trimmed: " and the paths. */
static const char *row_note(const dispatch_output *out, const char *note_buf, char *joined,
                            size_t joinedsz)
{
    const char *trimmed = out->trimmed ? buf_cstr(&out->trimmed_note) : NULL;
    if (trimmed && note_buf[0]) {
        snprintf(joined, joinedsz, "%s; trimmed: %s", note_buf, trimmed);
        return joined;
    }
    return trimmed ? trimmed : (note_buf[0] ? note_buf : NULL);
}

static void process(outbox *ob, store_job *job, uint64_t *rng)
{
    int64_t now = clock_now_ms();
    outcome o;
    outcome_reset(&o);
    dispatch_output out;
    dispatch_output_init(&out);
    buf_t record; /* a paired dispatch's record, as sent: the row's body from now on */
    buf_init(&record, STORE_PAIR_MAX);
    char note_buf[CRCR_REPO_NAME_MAX + DEPENDS_ON_PROBLEM_MAX + 512] = "";
    long max_attempts = ob->cfg->max_attempts;
    switch (ob_kind_parse(job->kind)) {
    case OB_KIND_DISPATCH:
        run_dispatch(ob, job, &o, &out, &record, note_buf, sizeof(note_buf), now);
        break;
    case OB_KIND_CHECK_RUN:
        run_check_run(ob, job, &o, now);
        break;
    case OB_KIND_RERUN:
        run_rerun(ob, job, &o, note_buf, sizeof(note_buf), now);
        break;
    case OB_KIND_RERUN_SUITE:
        run_rerun_suite(ob, job, &o, note_buf, sizeof(note_buf), now);
        break;
    case OB_KIND_HUD_FORWARD:
        run_hud_forward(ob, job, &o);
        max_attempts = ob->cfg->hud_max_retries + 1;
        break;
    case OB_KIND_COMMENT:
        run_comment(ob, job, &o, note_buf, sizeof(note_buf));
        break;
    default:
        snprintf(o.error, sizeof(o.error), "unknown outbox kind '%s'", job->kind);
        break;
    }
    now = clock_now_ms();
    char joined[sizeof(note_buf) + 600];
    const char *note = row_note(&out, note_buf, joined, sizeof(joined));
    /* A paired dispatch keeps the record of what it sent (or why it sent no pair) as its body. */
    const char *body = record.len ? record.data : NULL;
    int attempt = job->attempts + 1;
    char attempt_s[16];
    snprintf(attempt_s, sizeof(attempt_s), "%d", attempt);
    crcr_err fe = CRCR_OK; /* CRCR_E_STATE: the lease was lost while the request was out */

    if (o.verdict == OUTBOX_LEASE_LOST) {
        fe = CRCR_E_STATE; /* nothing was sent: the row's holder carries it out */
    } else if (o.verdict == OUTBOX_DONE) {
        bool dry = ob->gh == NULL;
        /* A dry-run dispatch stores no body: showing the row rebuilds the exact request from
         * the stored delivery (dispatch_row_body); writing 30 KB per target here was half of
         * the dry-run ingest cost (bench/RESULTS.md). Other kinds store their body already. */
        const char *done = ob_state_name(dry ? OB_STATE_DRY_RUN : OB_STATE_SENT);
        fe = store_job_finish(ob->st, job, done, o.status, NULL, note, body, record.len, now);
        atomic_fetch_add(dry ? &ob->dry_run : &ob->sent, 1);
        metrics_outbox_result(job->kind, done);
        LOG_INFO(dry ? "outbox.dry_run" : "outbox.sent", "delivery", job->delivery_id, "repo",
                 job->target, "kind", job->kind, "attempt", attempt_s, "trimmed", note, NULL);
    } else if (o.verdict == OUTBOX_PERMANENT) {
        fe = store_job_finish(ob->st, job, ob_state_name(OB_STATE_DEAD), o.status, o.error, note,
                              body, record.len, now);
        atomic_fetch_add(&ob->dead, 1);
        metrics_outbox_result(job->kind, ob_state_name(OB_STATE_DEAD));
        LOG_WARN("outbox.dead", "delivery", job->delivery_id, "repo", job->target, "kind",
                 job->kind, "reason", o.error, NULL);
    } else if (o.status == -1) {
        /* Installation already paused: wait for it without spending an attempt. */
        fe = store_job_retry(ob->st, job, now + (int64_t)o.retry_after_s * 1000, false, 0, o.error);
    } else if (attempt >= max_attempts) {
        char reason[512];
        snprintf(reason, sizeof(reason), "gave up after %d attempts: %s", attempt, o.error);
        fe = store_job_finish(ob->st, job, ob_state_name(OB_STATE_DEAD), o.status, reason, note,
                              NULL, 0, now);
        atomic_fetch_add(&ob->dead, 1);
        metrics_outbox_result(job->kind, ob_state_name(OB_STATE_DEAD));
        LOG_WARN("outbox.dead", "delivery", job->delivery_id, "repo", job->target, "kind",
                 job->kind, "reason", reason, NULL);
    } else {
        int64_t delay = outbox_backoff_ms(ob->cfg->retry_base_ms, ob->cfg->retry_max_ms, attempt,
                                          next_random(rng));
        if (o.verdict == OUTBOX_RATE_LIMIT) {
            int64_t until;
            if (o.retry_after_s >= 0)
                until = now + (int64_t)o.retry_after_s * 1000;
            else if (o.rl_remaining == 0 && o.rl_reset > 0)
                until = o.rl_reset * 1000;
            else /* no time named: at least a minute, backing off (GitHub's guidance) */
                until = now + outbox_rate_limit_pause_ms(ob->cfg->retry_max_ms, attempt,
                                                         next_random(rng));
            if (until < now)
                until = now;
            if (o.installation > 0)
                pause_set(ob, o.installation, until, now);
            delay = until - now;
            char secs[24];
            snprintf(secs, sizeof(secs), "%lld", (long long)(delay / 1000));
            LOG_WARN("github.rate_limited", "delivery", job->delivery_id, "repo", job->target,
                     "pause_s", secs, NULL);
        } else if (o.retry_after_s >= 0 && o.retry_after_s * 1000 > delay) {
            delay = (int64_t)o.retry_after_s * 1000;
        }
        fe = store_job_retry(ob->st, job, now + delay, true, o.status, o.error);
        atomic_fetch_add(&ob->retried, 1);
        metrics_outbox_result(job->kind, "retry");
        char delay_s[24];
        snprintf(delay_s, sizeof(delay_s), "%lld", (long long)delay);
        LOG_INFO("outbox.retry", "delivery", job->delivery_id, "repo", job->target, "attempt",
                 attempt_s, "delay_ms", delay_s, "reason", o.error, NULL);
    }
    if (fe == CRCR_E_STATE) {
        metrics_outbox_result(job->kind, "lease_lost");
        LOG_WARN("outbox.lease_lost", "delivery", job->delivery_id, "repo", job->target, "kind",
                 job->kind, "attempt", attempt_s, LOG_KEY_SENT,
                 o.verdict == OUTBOX_LEASE_LOST ? "no" : "yes", NULL);
    }
    dispatch_output_free(&out);
    buf_free(&record);
}

/* Processes one claimed row and frees it. */
static void run_job(outbox *ob, store_job *job, uint64_t *rng)
{
    if (job->reclaimed) /* a row left running by a worker that died or lost its lease */
        LOG_INFO("outbox.reclaimed", "delivery", job->delivery_id, "repo", job->target, "kind",
                 job->kind, "reason", job->reclaimed, NULL);
    process(ob, job, rng);
    store_job_free(job);
}

/* Wakes up to `n` idle workers (ob->mu held). */
static void wake_idle(outbox *ob, size_t n)
{
    if (n >= ob->idle)
        pthread_cond_broadcast(&ob->cv);
    else
        for (size_t i = 0; i < n; i++)
            pthread_cond_signal(&ob->cv);
}

/*
 * One worker claims for all (ob->claiming): as many rows as there are idle workers plus itself,
 * in one store transaction, keeps the first and hands the others over (ob->handoff), waking one
 * idle worker per row. A wake-up (outbox_wake) marks rows as pending and wakes one worker to
 * claim; a worker that finishes a row takes a handed-over one, else claims when rows are pending
 * (or its timer ran out: a due time, the 1 s poll), else sleeps. A claim that filled its batch
 * leaves rows pending (there may be more). Claims per row fell from one transaction each, plus
 * an empty one per woken worker, to one per batch (bench/RESULTS.md).
 */
static void *worker(void *arg)
{
    outbox *ob = arg;
    uint64_t rng = (uint64_t)clock_mono_ms() ^ (uint64_t)(uintptr_t)&rng;
    if (!rng)
        rng = 88172645463325252ULL;
    store_job batch[OUTBOX_BATCH_MAX];
    int64_t wake_at = 0;  /* this worker's timer: claim once it has passed */
    bool watcher = false; /* this worker watches a test clock for the others (ob->watching) */
    pthread_mutex_lock(&ob->mu);
    while (!ob->stopping) {
        if (watcher &&
            (ob->handoff_n > 0 || (!ob->claiming && (ob->pending || clock_now_ms() >= wake_at)))) {
            /* Off to work: another idle worker takes the watch over. */
            watcher = false;
            ob->watching = false;
            if (ob->idle > 0)
                pthread_cond_signal(&ob->cv);
        }
        if (ob->handoff_n > 0) {
            store_job job = ob->handoff[--ob->handoff_n];
            pthread_mutex_unlock(&ob->mu);
            run_job(ob, &job, &rng);
            pthread_mutex_lock(&ob->mu);
            continue;
        }
        int64_t now = clock_now_ms();
        if (!ob->claiming && (ob->pending || now >= wake_at)) {
            ob->claiming = true;
            ob->pending = false;
            size_t want = 1 + ob->idle;
            if (want > OUTBOX_BATCH_MAX)
                want = OUTBOX_BATCH_MAX;
            pthread_mutex_unlock(&ob->mu);
            size_t n = 0;
            crcr_err e =
                store_claim_batch(ob->st, now, (int64_t)ob->cfg->lease_s * 1000, batch, want, &n);
            int64_t wait = OUTBOX_POLL_MS;
            int64_t due = 0;
            if (e == CRCR_E_NOT_FOUND && store_next_due(ob->st, &due) == CRCR_OK &&
                due - now < wait)
                wait = due - now;
            if (wait < 5)
                wait = 5;
            pthread_mutex_lock(&ob->mu);
            ob->claiming = false;
            if (n == want)
                ob->pending = true; /* a full batch: there may be more */
            for (size_t i = 1; i < n; i++)
                ob->handoff[ob->handoff_n++] = batch[i];
            /* a helper per handed-over row, and one to claim when rows are pending */
            wake_idle(ob, (n > 1 ? n - 1 : 0) + (ob->pending ? 1 : 0));
            if (n > 0) {
                pthread_mutex_unlock(&ob->mu);
                run_job(ob, &batch[0], &rng);
                pthread_mutex_lock(&ob->mu);
            } else {
                wake_at = now + wait;
            }
            continue;
        }
        if (wake_at <= now) /* another worker is claiming: it claims for this one too */
            wake_at = now + OUTBOX_POLL_MS;
        /* With a test clock (clock.h) one idle worker at a time waits in short slices, so that
         * a moved clock is noticed at once; it claims for the others. The rest wait out their
         * timers in real time: thirty-two workers waking every 20 ms cost a test relay 4 % of a
         * CPU while idle. Without a test clock every worker waits out its own timer. */
        if (clock_test_control_on() && !ob->watching) {
            ob->watching = true;
            watcher = true;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t wait = watcher ? clock_wait_ms(wake_at - now) : wake_at - now;
        int64_t ns = (int64_t)ts.tv_nsec + (wait % 1000) * 1000000;
        ts.tv_sec += (time_t)(wait / 1000 + ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        ob->idle++;
        (void)pthread_cond_timedwait(&ob->cv, &ob->mu, &ts);
        ob->idle--;
    }
    pthread_mutex_unlock(&ob->mu);
    return NULL;
}

/* Turns new rows written by other processes into a wake-up of the workers; ends at once for a
 * store without cross-process wake-ups (SQLite). */
static void *waker(void *arg)
{
    outbox *ob = arg;
    for (;;) {
        pthread_mutex_lock(&ob->mu);
        bool stop = ob->stopping;
        pthread_mutex_unlock(&ob->mu);
        if (stop)
            break;
        size_t rows = 0;
        crcr_err e = store_wait_for_work(ob->st, OUTBOX_POLL_MS / 2, &rows);
        if (e == CRCR_E_INVALID)
            break;
        if (e == CRCR_OK)
            outbox_wake(ob, rows);
    }
    return NULL;
}

outbox *outbox_start(const crcr_config *cfg, store *st, gh_client *gh, allowlist_source *allow,
                     char *err, size_t errsz)
{
    outbox *ob = calloc(1, sizeof(*ob));
    if (!ob) {
        snprintf(err, errsz, "out of memory");
        return NULL;
    }
    ob->cfg = cfg;
    ob->st = st;
    ob->gh = gh;
    ob->allow = allow;
    pthread_mutex_init(&ob->mu, NULL);
    pthread_cond_init(&ob->cv, NULL);
    size_t n = cfg->max_dispatch_workers > 0 ? (size_t)cfg->max_dispatch_workers : 1;
    if (n > CRCR_MAX_DISPATCH_WORKERS)
        n = CRCR_MAX_DISPATCH_WORKERS;
    for (size_t i = 0; i < n; i++) {
        if (pthread_create(&ob->threads[i], NULL, worker, ob) != 0) {
            snprintf(err, errsz, "cannot start outbox worker %zu", i);
            outbox_stop(ob);
            return NULL;
        }
        ob->n_threads++;
    }
    ob->has_waker = pthread_create(&ob->waker, NULL, waker, ob) == 0;
    return ob;
}

void outbox_notify(outbox *ob)
{
    outbox_wake(ob, (size_t)-1);
}

void outbox_wake(outbox *ob, size_t n)
{
    if (!ob || n == 0)
        return;
    pthread_mutex_lock(&ob->mu);
    /* One worker claims the new rows for every idle one (worker()); while a claim runs, its
     * claimer sees `pending` when it ends and claims again or wakes a worker to. */
    ob->pending = true;
    if (!ob->claiming)
        pthread_cond_signal(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
}

void outbox_stop(outbox *ob)
{
    if (!ob)
        return;
    pthread_mutex_lock(&ob->mu);
    ob->stopping = true;
    pthread_cond_broadcast(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
    for (size_t i = 0; i < ob->n_threads; i++)
        pthread_join(ob->threads[i], NULL);
    if (ob->has_waker)
        pthread_join(ob->waker, NULL);
    /* Rows claimed for workers that stopped first go back to the queue at once (another instance
     * may take them), without counting an attempt. */
    for (size_t i = 0; i < ob->handoff_n; i++) {
        (void)store_job_retry(ob->st, &ob->handoff[i], clock_now_ms(), false, 0,
                              "claimed, not started before the relay stopped");
        store_job_free(&ob->handoff[i]);
    }
    pthread_cond_destroy(&ob->cv);
    pthread_mutex_destroy(&ob->mu);
    free(ob);
}

void outbox_get_counters(outbox *ob, outbox_counters *out)
{
    out->sent = atomic_load(&ob->sent);
    out->dry_run = atomic_load(&ob->dry_run);
    out->retried = atomic_load(&ob->retried);
    out->dead = atomic_load(&ob->dead);
    out->rate_limit_pauses = atomic_load(&ob->pauses_count);
}
