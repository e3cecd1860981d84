/*
 * outbox.c - the outbox's rows carried out without a thread per row; see outbox.h for the retry
 * policy.
 *
 * A claimed row becomes a job: a small state machine per kind (a step function, re-run each time
 * something it waits for is in). A step does the row's local work (build the request, read the
 * installation id, the pause and the lease) and either ends the job (dry-run, a known outcome, a
 * paused installation) or starts one GitHub call (gh_start) and returns; the call's end, on the
 * GitHub client's loop thread, puts the job on the ready list and wakes a worker, which runs its
 * next step. So GitHub requests in flight cost no thread and no store connection; at most
 * MAX_DISPATCH_WORKERS jobs exist at once (rows claimed and not yet recorded), and their requests
 * share the client's budget (CRCR_GITHUB_CONCURRENCY, gh_budget.c).
 *
 * Workers (a few threads, OUTBOX_THREADS_PER_CPU per CPU) loop: run the steps of ready jobs;
 * else claim rows when some may be due (a wake-up, a due time, the 1 s poll) and there is room
 * for jobs; else sleep. One worker claims at a time, a batch per store transaction, and runs the
 * first step of every row it claimed itself: work whose result is local (dry-run rows, rows of a
 * paused installation, comments already recorded) is done there without waking another thread.
 * A dry-run dispatch row whose outcome is known before it is stored (outbox_known) is not even
 * claimed: the ingest writes it finished, and outbox_known_recorded counts and logs it.
 * A webhook's dispatch rows skip the claim when there are free slots and no rows waiting for one:
 * its ingest claims them in its own transaction (outbox_reserve, then outbox_take puts them on
 * the ready list with one shared copy of the payload).
 * Outcomes of the jobs a worker ends together are recorded in one store transaction
 * (store_jobs_settle). A job's slot is given back only once its outcome is recorded. A crash
 * loses nothing: a claimed row stays `running` until the store hands it out again.
 *
 * Installation ids are kept in the store's kv ("installation:<repo>", OUTBOX_INSTALLATION_TTL_MS)
 * besides the client's memory: a restarted relay, or another instance, finds them there (one
 * read of all at start; for an id missing from memory, one such read at most once per
 * OUTBOX_INSTALLATION_RESCAN_MS, shared by the rows that miss meanwhile), so a cold fan-out costs
 * a token and a dispatch per installation, not a lookup more. A looked-up id is written to the
 * store once the request it was looked up for is out, not before it. An id found stale (a 404) is
 * dropped from both; the webhook handler drops an installation's ids on its installation events
 * (outbox_installation_changed). Rate-limit pauses live in memory and in the store's kv (so that
 * they survive a restart and reach other instances), read back at most every
 * OUTBOX_PAUSE_REFRESH_MS in one scan.
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
#include "cpus.h"
#include "depends_on.h"
#include "dispatch.h"
#include "json.h"
#include "crcr_limits.h"
#include "log.h"
#include "metrics.h"
#include "oncall.h"
#include "store.h"
#include "thread_sched.h"
#include "vocab.h"

#define OUTBOX_POLL_MS 1000
#define OUTBOX_PAUSES_MAX 1024
/* Rows one claim takes at the most (one store transaction). Each claimed row holds its
 * delivery's payload until it is done; a claim never takes more than the free job slots. */
#define OUTBOX_BATCH_MAX 16
/*
 * Room a claim waits for. With every job slot taken and rows waiting, slots free one at a time as
 * answers come in, and claiming each one as it freed made every row a store transaction of its
 * own: in an App-mode ingest at 64 connections (bench) 35,528 of 40,000 claims took one row, and
 * the claims and their one-row outcomes were 32 % of the relay's samples. So a claim waits until
 * MAX_DISPATCH_WORKERS / OUTBOX_CLAIM_ROOM_DIV slots are free (at least 1, at most
 * OUTBOX_BATCH_MAX), but never longer than OUTBOX_CLAIM_GATHER_MS once one is: on real time,
 * since what frees slots is GitHub answering. The same load then claimed 6.8 rows per claim
 * (most claims ended by the 5 ms), and its CPU per webhook fell from 1.59-1.63 to 1.33-1.35 ms.
 */
#define OUTBOX_CLAIM_ROOM_DIV 8
#define OUTBOX_CLAIM_GATHER_MS 5
#define OUTBOX_DEFAULT_PAUSE_S 60
/* Worker threads: per CPU (at least 2), and at most. They run steps and store writes, never wait
 * for GitHub. Two per CPU woke one another for little: in the App-mode ingest (2 CPUs, SQLite,
 * two alternated pairs) one per CPU took context switches per webhook from 6.8 to 5.4 and futex
 * calls from 8.0 to 6.5, with 4,044-4,114 -> 4,400-4,533 webhooks/s; the fan-out to 100
 * repositories answered as fast on both stores (warm 108-112 ms either way). */
#define OUTBOX_THREADS_PER_CPU 1
#define OUTBOX_THREADS_MAX 8
/* Ready jobs one worker takes at once; their outcomes are recorded in one transaction. */
#define OUTBOX_SETTLE_MAX 32
/* outbox_take hands an ingest's jobs over in chunks as it makes them, the first this large, each
 * next one twice the last (OUTBOX_SETTLE_MAX at most): a worker starts on the first requests
 * while the rest are made. */
#define OUTBOX_TAKE_FIRST 4
/* How often the pauses other instances (or an earlier run) recorded are read from the store. */
#define OUTBOX_PAUSE_REFRESH_MS 1000
/* Stored installation ids: their key prefix and life. */
#define OUTBOX_INSTALLATION_PREFIX "installation:"
#define OUTBOX_INSTALLATION_TTL_MS (30LL * 24 * 3600 * 1000)
/* An id missing from memory is looked for in the store by one scan of every stored id (which
 * seeds the client's memory), at most once per this long: the rows of a cold fan-out share one
 * scan instead of one read each (on PostgreSQL 100 round trips through the workers were ~25 ms of
 * a cold fan-out to 100 repositories). Within it a miss is looked up at GitHub. */
#define OUTBOX_INSTALLATION_RESCAN_MS 1000
#define OUTBOX_PAUSE_PREFIX "pause:installation:"

typedef struct pause_entry {
    int64_t installation;
    int64_t until_ms;
} pause_entry;

typedef struct job job;

struct outbox {
    const crcr_config *cfg;
    store *st;
    gh_client *gh;
    allowlist_source *allow;
    pthread_t threads[OUTBOX_THREADS_MAX];
    size_t n_threads;
    pthread_t waker; /* relays the store's cross-process wake-ups (PostgreSQL NOTIFY) */
    bool has_waker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
    bool claiming;         /* a worker is claiming (see worker()) */
    bool pending;          /* rows may be due that no claim has looked for yet */
    size_t idle;           /* workers waiting on cv */
    bool watching;         /* with a test clock: an idle worker waits in short slices */
    size_t jobs;           /* rows claimed and not yet recorded (or being claimed) */
    size_t max_jobs;       /* MAX_DISPATCH_WORKERS */
    size_t claim_room;     /* free slots a claim waits for (OUTBOX_CLAIM_ROOM_DIV) */
    int64_t room_since_us; /* clock_real_mono_us() since fewer free slots wait for more, 0: none */
    job *ready, *ready_tail; /* jobs whose call ended: their next step is due */
    pause_entry pauses[OUTBOX_PAUSES_MAX];
    size_t n_pauses;
    int64_t pauses_read_at; /* clock_mono_ms() of the last read of the store's pauses, 0: never */
    bool pauses_reading;
    pthread_mutex_t inst_mu; /* one scan of the stored installation ids at a time */
    int64_t inst_scan_at;    /* clock_mono_ms() of the last scan (under inst_mu), 0: never */
    bool inst_scan_full;     /* that scan saw CRCR_TOKEN_CACHE_MAX ids: some may be left out */
    atomic_uint_fast64_t sent, dry_run, retried, dead, pauses_count;
};

/* The error of a row whose lease another worker took before its request went out. */
#define LEASE_LOST_ERROR "lease lost to another worker"
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

/* ---------------------------------------------------------------- pauses */

static void pause_key(int64_t installation, char *key, size_t keysz)
{
    snprintf(key, keysz, OUTBOX_PAUSE_PREFIX "%lld", (long long)installation);
}

/* Adds a pause to memory, or lengthens the one there; drops expired ones (ob->mu held). */
static void pause_merge(outbox *ob, int64_t installation, int64_t until, int64_t now)
{
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
    if (!found && until > now && ob->n_pauses < OUTBOX_PAUSES_MAX)
        ob->pauses[ob->n_pauses++] = (pause_entry){installation, until};
}

typedef struct pause_read {
    pause_entry got[OUTBOX_PAUSES_MAX];
    size_t n;
} pause_read;

static void pause_got(void *ctx, const char *key, const char *value, size_t len)
{
    pause_read *pr = ctx;
    char v[24], *end = NULL;
    if (len == 0 || len >= sizeof(v) || pr->n >= OUTBOX_PAUSES_MAX)
        return;
    memcpy(v, value, len);
    v[len] = '\0';
    long long until = strtoll(v, &end, 10);
    long long inst = strtoll(key + strlen(OUTBOX_PAUSE_PREFIX), &end, 10);
    if (end && *end == '\0' && inst > 0 && until > 0)
        pr->got[pr->n++] = (pause_entry){inst, until};
}

/* Reads the pauses recorded in the store (by another instance, or before a restart) into memory,
 * at most every OUTBOX_PAUSE_REFRESH_MS: one scan, not one read per request. */
static void pauses_refresh(outbox *ob, int64_t now)
{
    int64_t mono = clock_mono_ms();
    pthread_mutex_lock(&ob->mu);
    bool due = !ob->pauses_reading &&
               (ob->pauses_read_at == 0 || mono - ob->pauses_read_at >= OUTBOX_PAUSE_REFRESH_MS);
    if (due)
        ob->pauses_reading = true;
    pthread_mutex_unlock(&ob->mu);
    if (!due)
        return;
    pause_read *pr = calloc(1, sizeof(*pr));
    if (pr)
        (void)store_kv_scan(ob->st, OUTBOX_PAUSE_PREFIX, now, OUTBOX_PAUSES_MAX, pause_got, pr);
    pthread_mutex_lock(&ob->mu);
    for (size_t i = 0; pr && i < pr->n; i++)
        pause_merge(ob, pr->got[i].installation, pr->got[i].until_ms, now);
    ob->pauses_read_at = mono ? mono : 1;
    ob->pauses_reading = false;
    pthread_mutex_unlock(&ob->mu);
    free(pr);
}

/* When the installation's pause ends (0: not paused): this process's pauses and those read from
 * the store (pauses_refresh). */
static int64_t pause_until(outbox *ob, int64_t installation, int64_t now)
{
    pauses_refresh(ob, now);
    int64_t until = 0;
    pthread_mutex_lock(&ob->mu);
    for (size_t i = 0; i < ob->n_pauses; i++) {
        if (ob->pauses[i].installation == installation && ob->pauses[i].until_ms > now)
            until = ob->pauses[i].until_ms;
    }
    pthread_mutex_unlock(&ob->mu);
    return until;
}

/* Pauses the installation until `until`: in memory at once, and in the store's kv. */
static void pause_set(outbox *ob, int64_t installation, int64_t until, int64_t now)
{
    pthread_mutex_lock(&ob->mu);
    pause_merge(ob, installation, until, now);
    pthread_mutex_unlock(&ob->mu);
    atomic_fetch_add(&ob->pauses_count, 1);
    char key[64], val[24];
    pause_key(installation, key, sizeof(key));
    snprintf(val, sizeof(val), "%lld", (long long)until);
    store_kv_put(ob->st, key, val, strlen(val), until);
}

/* ---------------------------------------------------------------- installation ids */

/* "installation:<repo, lower-cased>"; false when the name does not fit. */
static bool installation_key(const char *repo, char *key, size_t keysz)
{
    size_t pl = strlen(OUTBOX_INSTALLATION_PREFIX), n = strlen(repo);
    if (pl + n + 1 > keysz)
        return false;
    memcpy(key, OUTBOX_INSTALLATION_PREFIX, pl);
    for (size_t i = 0; i <= n; i++) {
        char c = repo[i];
        key[pl + i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    return true;
}

typedef struct inst_scan {
    outbox *ob;
    int64_t only; /* 0: every entry (seeding), else the entries of this id */
    char (*keys)[CRCR_REPO_NAME_MAX + 32];
    size_t n, cap;
    size_t seen; /* entries the scan gave */
} inst_scan;

static void inst_got(void *ctx, const char *key, const char *value, size_t len);

/* Seeds the client's memory with every stored installation id (ob->inst_mu held). */
static void installation_scan(outbox *ob)
{
    inst_scan sc = {.ob = ob};
    (void)store_kv_scan(ob->st, OUTBOX_INSTALLATION_PREFIX, clock_now_ms(), CRCR_TOKEN_CACHE_MAX,
                        inst_got, &sc);
    ob->inst_scan_at = clock_mono_ms();
    ob->inst_scan_full = sc.seen >= CRCR_TOKEN_CACHE_MAX;
}

/* The stored installation id of `repo` (also remembered by the client), 0 when none: from a scan
 * of every stored id when the last one is older than OUTBOX_INSTALLATION_RESCAN_MS (a caller that
 * waited for another's scan finds its result in memory), else from a read of its own key when
 * the last scan may have left ids out. */
static int64_t installation_stored(outbox *ob, const char *repo)
{
    char key[CRCR_REPO_NAME_MAX + 32];
    if (!installation_key(repo, key, sizeof(key)))
        return 0;
    int64_t id = 0;
    pthread_mutex_lock(&ob->inst_mu);
    if (!gh_installation_cached(ob->gh, repo, &id) &&
        (!ob->inst_scan_at ||
         clock_mono_ms() - ob->inst_scan_at >= OUTBOX_INSTALLATION_RESCAN_MS)) {
        installation_scan(ob);
        (void)gh_installation_cached(ob->gh, repo, &id);
    }
    bool full = ob->inst_scan_full;
    pthread_mutex_unlock(&ob->inst_mu);
    if (id > 0 || !full)
        return id;
    buf_t v;
    buf_init(&v, 32);
    if (store_kv_get(ob->st, key, &v, clock_now_ms()) == CRCR_OK) {
        char *end = NULL;
        long long x = strtoll(buf_cstr(&v), &end, 10);
        if (end && *end == '\0' && x > 0)
            id = x;
    }
    buf_free(&v);
    if (id)
        gh_installation_seed(ob->gh, repo, id);
    return id;
}

/* Keeps `repo`'s installation id in the store for OUTBOX_INSTALLATION_TTL_MS. */
static void installation_store(outbox *ob, const char *repo, int64_t id)
{
    char key[CRCR_REPO_NAME_MAX + 32];
    if (id <= 0 || !installation_key(repo, key, sizeof(key)))
        return;
    char val[24];
    snprintf(val, sizeof(val), "%lld", (long long)id);
    store_kv_put(ob->st, key, val, strlen(val), clock_now_ms() + OUTBOX_INSTALLATION_TTL_MS);
}

static void installation_unstore(outbox *ob, const char *repo)
{
    char key[CRCR_REPO_NAME_MAX + 32];
    if (installation_key(repo, key, sizeof(key)))
        store_kv_delete(ob->st, key);
}

static void inst_got(void *ctx, const char *key, const char *value, size_t len)
{
    inst_scan *sc = ctx;
    sc->seen++;
    char v[24], *end = NULL;
    if (len == 0 || len >= sizeof(v))
        return;
    memcpy(v, value, len);
    v[len] = '\0';
    long long id = strtoll(v, &end, 10);
    if (!end || *end != '\0' || id <= 0)
        return;
    const char *repo = key + strlen(OUTBOX_INSTALLATION_PREFIX);
    if (!sc->only) {
        gh_installation_seed(sc->ob->gh, repo, id);
    } else if (id == sc->only && sc->n < sc->cap && strlen(key) < sizeof(sc->keys[0])) {
        memcpy(sc->keys[sc->n++], key, strlen(key) + 1);
    }
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
 * Called right before a request goes out for row `sj`: renews the row's lease once a third of it
 * has passed since it was taken or last renewed. false (o->verdict OUTBOX_LEASE_LOST) when the
 * row belongs to another worker now, or when the store cannot renew a lease that is nearly over.
 */
static bool lease_still_ours(outbox *ob, store_job *sj, outcome *o)
{
    int64_t lease_ms = (int64_t)ob->cfg->lease_s * 1000;
    int64_t now = clock_now_ms();
    if (now < sj->lease_until - lease_ms * 2 / 3)
        return true;
    crcr_err e = store_job_renew(ob->st, sj, now, lease_ms);
    if (e == CRCR_OK || (e != CRCR_E_STATE && clock_now_ms() < sj->lease_until - lease_ms / 4))
        return true;
    o->verdict = OUTBOX_LEASE_LOST;
    snprintf(o->error, sizeof(o->error), "%s",
             e == CRCR_E_STATE ? LEASE_LOST_ERROR : "cannot renew the lease");
    return false;
}

/* ---------------------------------------------------------------- jobs */

typedef enum { STEP_DONE, STEP_WAIT } step_rc;

/* One copy of a delivery's payload shared by the rows of that delivery that outbox_take hands
 * over or that a claim took together: counted, freed with its last job. A fan-out to 100
 * repositories copied the 30 KB payload per row in the webhook's thread: 6 ms before its answer,
 * mostly page faults of fresh memory. */
typedef struct shared_payload {
    atomic_size_t refs;
    size_t len;
    const char *data; /* NUL-terminated: right after the struct, or `taken` */
    char *taken;      /* a claimed row's payload this took over (shared_payload_take), or NULL */
} shared_payload;

/* A copy of p[0..len). Owner: the caller (one reference), through shared_payload_drop. NULL when
 * out of memory. */
static shared_payload *shared_payload_new(const char *p, size_t len)
{
    shared_payload *sp = malloc(sizeof(*sp) + len + 1);
    if (!sp)
        return NULL;
    atomic_init(&sp->refs, 1);
    char *data = (char *)(sp + 1);
    if (len)
        memcpy(data, p, len);
    data[len] = '\0';
    sp->len = len;
    sp->data = data;
    sp->taken = NULL;
    return sp;
}

/* Takes over b's memory, without a copy (b is left empty). Owner: the caller (one reference),
 * through shared_payload_drop. NULL when out of memory, b unchanged. */
static shared_payload *shared_payload_take(buf_t *b)
{
    shared_payload *sp = malloc(sizeof(*sp));
    if (!sp)
        return NULL;
    size_t len = 0;
    char *data = buf_detach(b, &len);
    if (!data) {
        free(sp);
        return NULL;
    }
    atomic_init(&sp->refs, 1);
    sp->len = len;
    sp->data = data;
    sp->taken = data;
    return sp;
}

static void shared_payload_drop(shared_payload *sp)
{
    if (sp && atomic_fetch_sub(&sp->refs, 1) == 1) {
        free(sp->taken);
        free(sp);
    }
}

/* Where a job's GitHub request is (inst_send). */
typedef enum {
    IS_IDLE,   /* none out */
    IS_LOOKUP, /* the installation lookup is out */
    IS_SEND    /* the request is out */
} isend_state;

/* The longest request path a job builds. */
#define JOB_PATH_MAX (CRCR_REPO_NAME_MAX + 160)

/* One claimed row being carried out. Owned by the outbox from its claim until its outcome is
 * recorded; while one of its calls is out, by that call (the call's end hands it back). */
struct job {
    outbox *ob;
    store_job sj;          /* the claimed row */
    outcome o;             /* what it came to */
    dispatch_output dout;  /* a dispatch's request body */
    depends_on_pair *pair; /* a paired dispatch's Depends-On pair (heap), or NULL */
    buf_t record;          /* ... and its record as sent: the row's body from then on */
    char note[CRCR_REPO_NAME_MAX + DEPENDS_ON_PROBLEM_MAX + 512];
    char joined[CRCR_REPO_NAME_MAX + DEPENDS_ON_PROBLEM_MAX + 1112]; /* note; trimmed: paths */
    int stage;                                                       /* the kind's step */
    int page; /* listings: the page asked for */
    isend_state isend;
    gh_resp r;     /* the answer of the last call */
    crcr_err gerr; /* ... and its result */
    int64_t inst;  /* the row's installation id, once known */
    bool inst_new; /* ... looked up for this request: stored once its answer is in */
    char path[JOB_PATH_MAX];
    void *state; /* the kind's own (heap, freed by state_free) */
    void (*state_free)(void *state);
    shared_payload *shared; /* the delivery's payload when sj.payload has none */
    job *next;              /* ready list */
};

/* Stores the job's installation id when it was looked up for its request (once). */
static void installation_new_kept(outbox *ob, job *j)
{
    if (j->inst_new)
        installation_store(ob, j->sj.target, j->inst);
    j->inst_new = false;
}

/* The delivery's payload a job reads: its claimed row's, or the copy its delivery's rows share. */
static const char *job_payload(const job *j, size_t *len)
{
    if (j->shared) {
        *len = j->shared->len;
        return j->shared->data;
    }
    *len = j->sj.payload.len;
    return buf_cstr(&j->sj.payload);
}

/* The end of a call (on the client's loop thread, or on the thread that started it): the job's
 * next step is due. */
/* Appends the jobs head..tail (linked by `next`, tail's NULL) to the ready list (ob->mu held). */
static void ready_append(outbox *ob, job *head, job *tail)
{
    if (ob->ready_tail)
        ob->ready_tail->next = head;
    else
        ob->ready = head;
    ob->ready_tail = tail;
}

static void job_resume(void *ud, crcr_err err)
{
    job *j = ud;
    outbox *ob = j->ob;
    j->gerr = err;
    pthread_mutex_lock(&ob->mu);
    j->next = NULL;
    ready_append(ob, j, j);
    if (ob->idle)
        pthread_cond_signal(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
}

/* Starts a call for `j` (j->isend already says which); false when it ended at once (j->gerr). */
static bool job_call(job *j, const gh_req *rq)
{
    gh_resp_free(&j->r);
    gh_resp_init(&j->r);
    crcr_err e = gh_start(j->ob->gh, rq, &j->r, job_resume, j);
    if (e) {
        j->gerr = e;
        return false;
    }
    return true; /* j may already be running elsewhere: not touched any more */
}

/* The outcome of a request the relay did not send because it is stopping: back to the queue at
 * once, no attempt counted. */
static void not_sent(outcome *o)
{
    o->verdict = OUTBOX_RATE_LIMIT;
    o->status = -1; /* marker: no attempt of this row's */
    o->retry_after_s = 0;
    o->rl_reset = -1;
    snprintf(o->error, sizeof(o->error), "not sent before the relay stopped");
}

static bool outbox_stopping(outbox *ob)
{
    pthread_mutex_lock(&ob->mu);
    bool stop = ob->stopping;
    pthread_mutex_unlock(&ob->mu);
    return stop;
}

/*
 * One GitHub request as the installation covering the row's target, honouring a pause of that
 * installation: re-entrant, the step calls it again whenever the job resumes until it returns
 * STEP_DONE with j->o filled (and j->r holding the answer). The installation id comes from the
 * client's memory, else the store, else a lookup (then kept in the store); then the pause, the
 * lease, and the request (token from the client's cache, or a mint). The request must start
 * while the lease still holds (start_by_ms): one that waited for the budget until then comes
 * back unsent and goes through the pause and the lease again. Arguments must stay the same
 * between the calls of one request; j->path is the path.
 */
static step_rc inst_send(outbox *ob, job *j, const char *method, const char *body, size_t body_len,
                         const char *what)
{
    outcome *o = &j->o;
    const char *repo = j->sj.target;
    for (;;) {
        if (j->isend == IS_IDLE) {
            int64_t inst = j->inst;
            if (!inst && !gh_installation_cached(ob->gh, repo, &inst))
                inst = installation_stored(ob, repo);
            j->isend = IS_LOOKUP;
            if (!inst) {
                gh_req rq = {.auth = GH_AUTH_INSTALLATION,
                             .repo = repo,
                             .lookup_only = true,
                             .method = "GET",
                             .path = "/"};
                if (job_call(j, &rq))
                    return STEP_WAIT;
            } else {
                j->inst = inst;
                j->gerr = CRCR_OK;
                j->r.installation = inst;
                j->r.installation_looked_up = false;
            }
        }
        if (j->isend == IS_LOOKUP) {
            crcr_err e = j->gerr;
            if (e == CRCR_E_STATE) {
                j->isend = IS_IDLE;
                not_sent(o);
                return STEP_DONE;
            }
            if (e) {
                j->isend = IS_IDLE;
                outcome_from(o, "installation lookup", &j->r);
                if (o->verdict == OUTBOX_DONE) /* a 2xx without an id */
                    o->verdict = OUTBOX_RETRY;
                if (e == CRCR_E_HTTP && j->r.status == 404)
                    snprintf(o->error, sizeof(o->error),
                             "App not installed on %s (installation lookup: 404)", repo);
                return STEP_DONE;
            }
            j->inst = j->r.installation;
            /* A looked-up id is stored once its request's answer is in (or the job ends here):
             * not on the request's way, and before the row settles, so an installation event
             * that comes after the row is done finds it in the store. */
            j->inst_new = j->r.installation_looked_up;
            o->installation = j->inst;
            int64_t now = clock_now_ms();
            int64_t paused = pause_until(ob, j->inst, now);
            if (!paused && !lease_still_ours(ob, &j->sj, o)) {
                j->isend = IS_IDLE;
                installation_new_kept(ob, j);
                return STEP_DONE;
            }
            /* The lease check can wait on the store; a pause set meanwhile still counts. */
            if (!paused)
                paused = pause_until(ob, j->inst, now = clock_now_ms());
            if (paused > now) {
                j->isend = IS_IDLE;
                o->verdict = OUTBOX_RATE_LIMIT;
                o->rl_reset = -1;
                o->retry_after_s = (long)((paused - now + 999) / 1000);
                o->status = -1; /* marker: waiting, not this row's attempt */
                snprintf(o->error, sizeof(o->error), "installation %lld paused by a rate limit",
                         (long long)j->inst);
                installation_new_kept(ob, j);
                return STEP_DONE;
            }
            j->isend = IS_SEND;
            int64_t lease_ms = (int64_t)ob->cfg->lease_s * 1000;
            gh_req rq = {.auth = GH_AUTH_INSTALLATION,
                         .repo = repo,
                         .installation = j->inst,
                         .method = method,
                         .path = j->path,
                         .body = body,
                         .body_len = body_len,
                         .start_by_ms = j->sj.lease_until - lease_ms / 4};
            /* Once the call is out the job may be another worker's: not read after. */
            if (job_call(j, &rq))
                return STEP_WAIT;
        }
        /* IS_SEND: the answer is in. */
        j->isend = IS_IDLE;
        if (j->r.installation_dropped) /* a dropped id is not kept */
            j->inst_new = false;
        installation_new_kept(ob, j);
        if (j->r.installation_dropped && !j->r.installation_looked_up)
            installation_unstore(ob, repo);
        if (j->r.installation_looked_up && j->r.installation > 0)
            installation_store(ob, repo, j->r.installation);
        j->inst = j->r.installation;
        if (j->inst > 0)
            o->installation = j->inst;
        crcr_err e = j->gerr;
        if (e == CRCR_E_STATE && !outbox_stopping(ob))
            continue; /* waited past its start deadline: pause and lease again, then resend */
        if (e == CRCR_E_STATE) {
            not_sent(o);
        } else if (e && e != CRCR_E_HTTP && e != CRCR_E_NETWORK) {
            o->verdict = OUTBOX_RETRY;
            snprintf(o->error, sizeof(o->error), "%s: %s", what, crcr_strerror(e));
        } else {
            outcome_from(o, e == CRCR_E_HTTP ? "token" : what, &j->r);
        }
        return STEP_DONE;
    }
}

/* ---------------------------------------------------------------- the kinds */

/* A fresh outcome: nothing decided yet. */
static void outcome_reset(outcome *o)
{
    *o = (outcome){
        .verdict = OUTBOX_PERMANENT, .retry_after_s = -1, .rl_remaining = -1, .rl_reset = -1};
}

/*
 * The answer to a paired dispatch's GET /repos/{pair repo}/pulls/{n} (§3.13), read as the target's
 * installation (Pull requests: read), in j->o and j->r. An open PR resolves the pair; a closed,
 * merged or missing one, or a refusal (403 without a rate limit, 404, 422), leaves it unresolved
 * with its problem: the dispatch goes without the pair, the record, the row's note and the check
 * run say why. Returns false, with j->o the verdict for the row, when GitHub did not answer
 * (retried as any request: 5xx, network, rate limits) or the installation is missing.
 */
static bool pair_read(job *j)
{
    outcome *o = &j->o;
    depends_on_pair *pair = j->pair;
    if (o->verdict == OUTBOX_DONE)
        depends_on_from_pull(j->r.body.data, j->r.body.len, pair);
    else if (o->verdict == OUTBOX_PERMANENT && o->installation > 0 && o->status >= 400)
        snprintf(pair->problem, sizeof(pair->problem), "%.*s", (int)sizeof(pair->problem) - 1,
                 o->status == 404 ? "not found" : o->error);
    else
        return false; /* not answered, rate limited, or no installation: the row's outcome */
    char num[24];
    snprintf(num, sizeof(num), "%lld", (long long)pair->number);
    LOG_INFO("outbox.depends_on", "delivery", j->sj.delivery_id, "repo", j->sj.target, "pr", num,
             "head_sha", pair->resolved ? pair->head_sha : NULL, "problem",
             pair->resolved ? NULL : pair->problem, NULL);
    return true;
}

/*
 * A dispatch row: a paired row (its body a Depends-On record) first reads its pair's PR (stage 1,
 * pair_read); then the request body is built at send time (dispatch_row_body, with the pair's
 * record) and POSTed (stage 3). The GET and the POST are two requests of one job: no thread waits
 * for either.
 */
static step_rc step_dispatch(outbox *ob, job *j)
{
    store_job *sj = &j->sj;
    if (j->stage == 0) {
        depends_on_pair pair;
        if (depends_on_record_parse(sj->body.data, sj->body.len, &pair)) {
            /* A row sent again holds what its last attempt resolved (store_job_record): the pair
             * is read again, and what GitHub says now is what this attempt sends. */
            depends_on_unread(&pair);
            j->pair = malloc(sizeof(*j->pair));
            if (!j->pair) {
                j->o.verdict = OUTBOX_RETRY;
                snprintf(j->o.error, sizeof(j->o.error), "out of memory");
                return STEP_DONE;
            }
            *j->pair = pair;
        }
        j->stage = 2;
        if (j->pair && !ob->gh) {
            snprintf(j->pair->problem, sizeof(j->pair->problem), "not read in dry-run mode");
        } else if (j->pair) {
            snprintf(j->path, sizeof(j->path), "/repos/%s/pulls/%lld", j->pair->repo,
                     (long long)j->pair->number);
            j->stage = 1;
        }
    }
    if (j->stage == 1) {
        if (inst_send(ob, j, "GET", NULL, 0, "Depends-On pull request") == STEP_WAIT)
            return STEP_WAIT;
        if (!pair_read(j))
            return STEP_DONE;
        j->stage = 2;
    }
    if (j->stage == 2) {
        if (j->pair) {
            outcome_reset(&j->o);
            char label[CRCR_REPO_NAME_MAX + 48];
            depends_on_label(j->pair, label, sizeof(label));
            if (j->pair->resolved)
                snprintf(j->note, sizeof(j->note), "Depends-On %s", label);
            else
                snprintf(j->note, sizeof(j->note), "Depends-On %s not tested: %s", label,
                         j->pair->problem);
            if (depends_on_record(j->pair, &j->record) != CRCR_OK) {
                j->o.verdict = OUTBOX_PERMANENT;
                snprintf(j->o.error, sizeof(j->o.error), "cannot record the Depends-On pair");
                return STEP_DONE;
            }
        }
        char err[256] = "";
        size_t payload_len;
        const char *payload = job_payload(j, &payload_len);
        dispatch_src src = {
            .event = sj->event,
            .delivery_id = sj->delivery_id,
            .payload = payload,
            .payload_len = payload_len,
            .target = sj->target,
            .head_sha = sj->head_sha,
            .pr_number = sj->pr_number,
            .pair = j->record.len ? j->record.data : NULL,
            .pair_len = j->record.len,
        };
        /* Dry-run: nothing is sent and no request stored (the delivery document rebuilds it to
         * show it). A body that would be built as it is needs no building: 5 % of the CPU of a
         * dry-run webhook to 4 repositories went to bodies and tokens thrown away. */
        if (!ob->gh && dispatch_row_verbatim(ob->cfg, &src)) {
            j->o.verdict = OUTBOX_DONE;
            return STEP_DONE;
        }
        crcr_err e = dispatch_row_body(ob->cfg, &src, &j->dout, err, sizeof(err));
        if (e) {
            j->o.verdict = OUTBOX_PERMANENT;
            snprintf(j->o.error, sizeof(j->o.error), "cannot build dispatch: %s",
                     err[0] ? err : crcr_strerror(e));
            return STEP_DONE;
        }
        if (!ob->gh) {
            j->o.verdict = OUTBOX_DONE;
            return STEP_DONE;
        }
        /* The pair the token binds and the check run names is in the store before the dispatch
         * goes out: a downstream may call back before this row's outcome is recorded. */
        if (j->pair) {
            crcr_err re = store_job_record(ob->st, sj, j->record.data, j->record.len);
            if (re) {
                j->o.verdict = re == CRCR_E_STATE ? OUTBOX_LEASE_LOST : OUTBOX_RETRY;
                snprintf(j->o.error, sizeof(j->o.error), "%s",
                         re == CRCR_E_STATE ? LEASE_LOST_ERROR
                                            : "cannot record the Depends-On pair");
                return STEP_DONE;
            }
        }
        snprintf(j->path, sizeof(j->path), "/repos/%s/dispatches", sj->target);
        j->stage = 3;
    }
    return inst_send(ob, j, "POST", buf_cstr(&j->dout.body), j->dout.body.len,
                     ob_kind_name(OB_KIND_DISPATCH));
}

/* A check run on the upstream PR: the row's body is the request body. */
static step_rc step_check_run(outbox *ob, job *j)
{
    if (!ob->gh) {
        j->o.verdict = OUTBOX_DONE;
        return STEP_DONE;
    }
    snprintf(j->path, sizeof(j->path), "/repos/%s/check-runs", j->sj.target);
    return inst_send(ob, j, "POST", buf_cstr(&j->sj.body), j->sj.body.len, "check run");
}

/* Re-runs a downstream workflow run: body {"run_id":N,"failed_only":bool}. GitHub's 403 "already
 * running" means the run is going anyway: success. */
static step_rc step_rerun(outbox *ob, job *j)
{
    if (j->stage == 0) {
        jv *b = jv_parse(j->sj.body.data ? j->sj.body.data : "", j->sj.body.len, NULL, 0);
        int64_t run_id = 0;
        bool failed_only = jv_is_true(jv_get(b, "failed_only"));
        bool ok = jv_int(jv_get(b, "run_id"), &run_id) && run_id > 0;
        jv_free(b);
        if (!ok) {
            j->o.verdict = OUTBOX_PERMANENT;
            snprintf(j->o.error, sizeof(j->o.error), "re-run row without a run id");
            return STEP_DONE;
        }
        if (!ob->gh) {
            j->o.verdict = OUTBOX_DONE;
            return STEP_DONE;
        }
        snprintf(j->path, sizeof(j->path), "/repos/%s/actions/runs/%lld/rerun%s", j->sj.target,
                 (long long)run_id, failed_only ? "-failed-jobs" : "");
        j->stage = 1;
    }
    if (inst_send(ob, j, "POST", NULL, 0, "re-run") == STEP_WAIT)
        return STEP_WAIT;
    if (j->o.verdict != OUTBOX_DONE && j->r.status == 403 &&
        contains_nocase(buf_cstr(&j->r.body), "already running")) {
        j->o.verdict = OUTBOX_DONE;
        j->o.error[0] = '\0';
        snprintf(j->note, sizeof(j->note), "already running");
    }
    return STEP_DONE;
}

/* Pages of check runs looked at, and distinct runs re-run, for one "Re-run all checks". */
#define RERUN_SUITE_MAX_PAGES 20
#define RERUN_SUITE_MAX_RUNS 256

typedef struct suite_state {
    int64_t suite;
    int64_t total, seen;
    size_t n_found;
    struct {
        char repo[CRCR_REPO_NAME_MAX];
        int64_t run_id;
    } found[RERUN_SUITE_MAX_RUNS];
} suite_state;

/* Takes the crcr check runs of one listing page whose repo is L3 or above into the state. */
static size_t suite_take_page(outbox *ob, suite_state *ss, const gh_resp *r)
{
    jv *doc = jv_parse(r->body.data ? r->body.data : "", r->body.len, NULL, 0);
    jv_int(jv_get(doc, "total_count"), &ss->total);
    jv *runs = jv_get(doc, "check_runs");
    size_t n = jv_arr_len(runs);
    allowlist *al = allowlist_source_get(ob->allow);
    for (size_t i = 0; i < n; i++) {
        jv *cr = jv_arr_at(runs, i);
        char repo[CRCR_REPO_NAME_MAX];
        int64_t run_id = checks_parse_external_id(jv_path_str(cr, "external_id"));
        if (!checks_parse_name(jv_path_str(cr, "name"), repo, sizeof(repo)) || run_id <= 0)
            continue;
        if (allowlist_level(al, repo) < CRCR_LEVEL_L3)
            continue;
        bool dup = false;
        for (size_t k = 0; k < ss->n_found && !dup; k++)
            dup = ss->found[k].run_id == run_id && strcasecmp(ss->found[k].repo, repo) == 0;
        if (!dup && ss->n_found < RERUN_SUITE_MAX_RUNS) {
            snprintf(ss->found[ss->n_found].repo, sizeof(ss->found[0].repo), "%s", repo);
            ss->found[ss->n_found++].run_id = run_id;
        }
    }
    allowlist_free(al);
    ss->seen += (int64_t)n;
    jv_free(doc);
    return n;
}

/* "Re-run all checks": lists the suite's check runs (paginated), and queues one full re-run per
 * distinct (downstream repo, run id) of crcr check runs whose repo is L3 or above. */
static step_rc step_rerun_suite(outbox *ob, job *j)
{
    suite_state *ss = j->state;
    if (j->stage == 0) {
        jv *b = jv_parse(j->sj.body.data ? j->sj.body.data : "", j->sj.body.len, NULL, 0);
        int64_t suite = 0;
        bool ok = jv_int(jv_get(b, "check_suite_id"), &suite) && suite > 0;
        jv_free(b);
        if (!ok) {
            j->o.verdict = OUTBOX_PERMANENT;
            snprintf(j->o.error, sizeof(j->o.error), "re-run suite row without a check suite id");
            return STEP_DONE;
        }
        if (!ob->gh) {
            j->o.verdict = OUTBOX_DONE;
            return STEP_DONE;
        }
        ss = calloc(1, sizeof(*ss));
        if (!ss) {
            j->o.verdict = OUTBOX_RETRY;
            snprintf(j->o.error, sizeof(j->o.error), "out of memory");
            return STEP_DONE;
        }
        ss->suite = suite;
        ss->total = -1;
        j->state = ss;
        j->state_free = free;
        j->stage = 1;
        j->page = 1;
    }
    for (;;) {
        snprintf(j->path, sizeof(j->path),
                 "/repos/%s/check-suites/%lld/check-runs?per_page=100&page=%d", j->sj.target,
                 (long long)ss->suite, j->page);
        if (inst_send(ob, j, "GET", NULL, 0, "check suite listing") == STEP_WAIT)
            return STEP_WAIT;
        if (j->o.verdict != OUTBOX_DONE)
            return STEP_DONE;
        size_t n = suite_take_page(ob, ss, &j->r);
        if (n == 0 || (ss->total >= 0 && ss->seen >= ss->total) || j->page >= RERUN_SUITE_MAX_PAGES)
            break;
        j->page++;
    }
    int64_t now = clock_now_ms();
    store_new_job *jobs = calloc(ss->n_found ? ss->n_found : 1, sizeof(*jobs));
    char(*bodies)[64] = calloc(ss->n_found ? ss->n_found : 1, sizeof(*bodies));
    crcr_err e = jobs && bodies ? CRCR_OK : CRCR_E_NOMEM;
    for (size_t k = 0; !e && k < ss->n_found; k++) {
        snprintf(bodies[k], sizeof(bodies[k]), "{\"run_id\":%lld,\"failed_only\":false}",
                 (long long)ss->found[k].run_id);
        jobs[k] = (store_new_job){.kind = ob_kind_name(OB_KIND_RERUN),
                                  .target = ss->found[k].repo,
                                  .body = bodies[k],
                                  .body_len = strlen(bodies[k]),
                                  .due_at = now};
    }
    if (!e && ss->n_found)
        e = store_enqueue(ob->st, j->sj.delivery_id, jobs, ss->n_found);
    free(jobs);
    free(bodies);
    if (e) {
        j->o.verdict = OUTBOX_RETRY;
        snprintf(j->o.error, sizeof(j->o.error), "cannot queue the re-runs");
        return STEP_DONE;
    }
    j->o.verdict = OUTBOX_DONE;
    snprintf(j->note, sizeof(j->note), "%zu re-run%s queued", ss->n_found,
             ss->n_found == 1 ? "" : "s");
    return STEP_DONE;
}

/* Comments per listing page: 30 of GitHub's largest (65536 characters) fit CRCR_GH_RESPONSE_MAX. */
#define COMMENT_PAGE_SIZE 30
/* Pages looked at for the marker (3000 comments); past them the comment is posted. */
#define COMMENT_MAX_PAGES 100
/* Life of the record that a PR has its comment: a PR open longer is caught by the marker. */
#define COMMENT_RECORD_TTL_MS (400LL * 24 * 3600 * 1000)

typedef struct comment_state {
    oncall_row row;
    buf_t key, req;
    bool found;
} comment_state;

static void comment_state_free(void *p)
{
    comment_state *cs = p;
    buf_free(&cs->key);
    buf_free(&cs->req);
    oncall_row_free(&cs->row);
    free(cs);
}

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
static step_rc step_comment(outbox *ob, job *j)
{
    comment_state *cs = j->state;
    outcome *o = &j->o;
    if (j->stage == 0) {
        cs = calloc(1, sizeof(*cs));
        if (!cs) {
            o->verdict = OUTBOX_RETRY;
            snprintf(o->error, sizeof(o->error), "out of memory");
            return STEP_DONE;
        }
        buf_init(&cs->key, ONCALL_KEY_MAX);
        buf_init(&cs->req, ONCALL_ROW_MAX);
        if (!oncall_row_parse(j->sj.body.data, j->sj.body.len, &cs->row)) {
            buf_free(&cs->key);
            buf_free(&cs->req);
            free(cs);
            o->verdict = OUTBOX_PERMANENT;
            snprintf(o->error, sizeof(o->error), "comment row without a PR, repo or text");
            return STEP_DONE;
        }
        j->state = cs;
        j->state_free = comment_state_free;
        o->verdict = OUTBOX_DONE;
        if (!ob->cfg->oncall_comments || !ob->gh) {
            if (!ob->cfg->oncall_comments)
                snprintf(j->note, sizeof(j->note),
                         "on-call comments are off (CRCR_ONCALL_COMMENTS=0)");
            return STEP_DONE;
        }
        if (oncall_record_key(j->sj.target, cs->row.pr, cs->row.repo, &cs->key) != CRCR_OK) {
            o->verdict = OUTBOX_PERMANENT;
            snprintf(o->error, sizeof(o->error), "comment record key too long");
            return STEP_DONE;
        }
        buf_t val;
        buf_init(&val, 64);
        bool recorded = store_kv_get(ob->st, buf_cstr(&cs->key), &val, clock_now_ms()) == CRCR_OK;
        buf_free(&val);
        if (recorded) {
            snprintf(j->note, sizeof(j->note), "already commented (recorded)");
            return STEP_DONE;
        }
        j->stage = 1;
        j->page = 1;
    }
    while (j->stage == 1) { /* the PR's comments, for the marker */
        snprintf(j->path, sizeof(j->path), "/repos/%s/issues/%lld/comments?per_page=%d&page=%d",
                 j->sj.target, (long long)cs->row.pr, COMMENT_PAGE_SIZE, j->page);
        if (inst_send(ob, j, "GET", NULL, 0, "comment listing") == STEP_WAIT)
            return STEP_WAIT;
        if (o->verdict != OUTBOX_DONE)
            return STEP_DONE;
        jv *doc = jv_parse(j->r.body.data ? j->r.body.data : "", j->r.body.len, NULL, 0);
        if (!jv_is_arr(doc)) {
            o->verdict = OUTBOX_RETRY;
            snprintf(o->error, sizeof(o->error), "comment listing: not a JSON array");
            jv_free(doc);
            return STEP_DONE;
        }
        size_t n = jv_arr_len(doc);
        for (size_t i = 0; i < n && !cs->found; i++)
            cs->found = oncall_comment_is_marker(jv_arr_at(doc, i), cs->row.repo, ob->cfg->app_id,
                                                 ob->cfg->oncall_trusted_authors);
        jv_free(doc);
        bool listed = n < COMMENT_PAGE_SIZE;
        if (cs->found || listed || j->page >= COMMENT_MAX_PAGES)
            j->stage = cs->found ? 3 : 2;
        else
            j->page++;
    }
    if (j->stage == 2) { /* no marker: post the comment */
        if (cs->req.len == 0) {
            crcr_err e = buf_puts(&cs->req, "{\"body\":");
            if (!e)
                e = jv_quote(&cs->req, cs->row.comment, strlen(cs->row.comment));
            if (!e)
                e = buf_putc(&cs->req, '}');
            if (e) {
                o->verdict = OUTBOX_PERMANENT;
                snprintf(o->error, sizeof(o->error), "comment: %s", crcr_strerror(e));
                return STEP_DONE;
            }
            snprintf(j->path, sizeof(j->path), "/repos/%s/issues/%lld/comments", j->sj.target,
                     (long long)cs->row.pr);
        }
        if (inst_send(ob, j, "POST", cs->req.data, cs->req.len, ob_kind_name(OB_KIND_COMMENT)) ==
            STEP_WAIT)
            return STEP_WAIT;
        j->stage = 3;
    }
    if (o->verdict == OUTBOX_DONE) {
        snprintf(j->note, sizeof(j->note),
                 cs->found ? "already commented (marker on the PR)" : "commented");
        if (store_kv_put(ob->st, buf_cstr(&cs->key), "1", 1,
                         clock_now_ms() + COMMENT_RECORD_TTL_MS) != CRCR_OK)
            LOG_WARN("outbox.comment_unrecorded", "repo", cs->row.repo, "reason",
                     "store unavailable; the marker on the PR still prevents a repeat", NULL);
    }
    return STEP_DONE;
}

typedef struct hud_state {
    char url[2100];
    char key_hdr[600]; /* holds the bot key: wiped */
    const char *hdrs[3];
} hud_state;

static void hud_state_free(void *p)
{
    hud_state *hs = p;
    OPENSSL_cleanse(hs->key_hdr, sizeof(hs->key_hdr));
    free(hs);
}

/* Forwards a result to the external HUD in the upstream wire format (not GitHub: no budget). */
static step_rc step_hud_forward(outbox *ob, job *j)
{
    outcome *o = &j->o;
    if (j->stage == 0) {
        if (!ob->gh || !ob->cfg->hud_api_url) {
            o->verdict = OUTBOX_DONE;
            return STEP_DONE;
        }
        if (!lease_still_ours(ob, &j->sj, o))
            return STEP_DONE;
        hud_state *hs = calloc(1, sizeof(*hs));
        if (!hs) {
            o->verdict = OUTBOX_RETRY;
            snprintf(o->error, sizeof(o->error), "HUD: out of memory");
            return STEP_DONE;
        }
        snprintf(hs->url, sizeof(hs->url), "%s/crcr/results", ob->cfg->hud_api_url);
        snprintf(hs->key_hdr, sizeof(hs->key_hdr), "x-hud-internal-bot: %s",
                 ob->cfg->hud_bot_key ? ob->cfg->hud_bot_key : "");
        hs->hdrs[0] = hs->key_hdr;
        hs->hdrs[1] = "Content-Type: application/json";
        hs->hdrs[2] = NULL;
        j->state = hs;
        j->state_free = hud_state_free;
        j->stage = 1;
        gh_req rq = {.method = "POST",
                     .url = hs->url,
                     .headers = hs->hdrs,
                     .body = buf_cstr(&j->sj.body),
                     .body_len = j->sj.body.len};
        if (job_call(j, &rq))
            return STEP_WAIT;
    }
    hud_state *hs = j->state;
    OPENSSL_cleanse(hs->key_hdr, sizeof(hs->key_hdr));
    crcr_err e = j->gerr;
    if (e == CRCR_E_STATE) {
        not_sent(o);
    } else if (e && e != CRCR_E_NETWORK) {
        o->verdict = OUTBOX_PERMANENT;
        snprintf(o->error, sizeof(o->error), "HUD: %s",
                 j->r.error[0] ? j->r.error : crcr_strerror(e));
    } else {
        outcome_from(o, "HUD", &j->r);
        if (o->verdict == OUTBOX_RATE_LIMIT)
            o->verdict = OUTBOX_RETRY; /* the HUD is not GitHub: no installation to pause */
    }
    return STEP_DONE;
}

/* Runs the job's next step. */
static step_rc job_step(outbox *ob, job *j)
{
    switch (ob_kind_parse(j->sj.kind)) {
    case OB_KIND_DISPATCH:
        return step_dispatch(ob, j);
    case OB_KIND_CHECK_RUN:
        return step_check_run(ob, j);
    case OB_KIND_RERUN:
        return step_rerun(ob, j);
    case OB_KIND_RERUN_SUITE:
        return step_rerun_suite(ob, j);
    case OB_KIND_HUD_FORWARD:
        return step_hud_forward(ob, j);
    case OB_KIND_COMMENT:
        return step_comment(ob, j);
    default:
        snprintf(j->o.error, sizeof(j->o.error), "unknown outbox kind '%s'", j->sj.kind);
        return STEP_DONE;
    }
}

/* A job for a claimed row (taking it over). NULL when out of memory. */
static job *job_new(outbox *ob, store_job *sj)
{
    job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->ob = ob;
    j->sj = *sj;
    outcome_reset(&j->o);
    dispatch_output_init(&j->dout);
    buf_init(&j->record, STORE_PAIR_MAX);
    gh_resp_init(&j->r);
    if (sj->reclaimed) /* a row left running by a worker that died or lost its lease */
        LOG_INFO("outbox.reclaimed", "delivery", sj->delivery_id, "repo", sj->target, "kind",
                 sj->kind, "reason", sj->reclaimed, NULL);
    return j;
}

/* The rows of one delivery that a claim took share its payload: the store gives it to the first
 * of them and the others name that row (payload_in), so the jobs hold it once, taken over
 * without a copy (the store copied it per row before: a fan-out's 100 jobs held 100 copies of
 * the 30 KB payload while their requests were out, 3 MB, and a fan-out to 1,000 repositories
 * peaked at 38-42 MiB of RSS; in the App-mode ingest each copy was a 30 KB allocation and memcpy
 * per row). sps[i]: row i's reference, NULL when it holds its payload itself or when memory for
 * sharing it is missing (then a row that names another has no payload: it is given back). */
static void share_claimed_payloads(store_job *batch, size_t n, shared_payload **sps)
{
    for (size_t i = 0; i < n; i++) {
        sps[i] = NULL;
        size_t h = batch[i].payload_in;
        if (h == 0 || h > i) /* holds its own, or names no earlier row (cannot happen) */
            continue;
        h--;
        if (!sps[h])
            sps[h] = shared_payload_take(&batch[h].payload);
        if (sps[h]) {
            atomic_fetch_add(&sps[h]->refs, 1);
            sps[i] = sps[h];
        }
    }
}

static void job_free(job *j)
{
    if (j->state_free)
        j->state_free(j->state);
    gh_resp_free(&j->r);
    dispatch_output_free(&j->dout);
    buf_free(&j->record);
    free(j->pair);
    store_job_free(&j->sj);
    shared_payload_drop(j->shared);
    free(j);
}

/* ---------------------------------------------------------------- outcomes */

/* What a finished job's outcome asks of the store (prepared before the batch is written). */
typedef struct settled {
    job *j;
    bool write; /* false: the lease was lost before anything was sent, nothing to record */
    bool dry;
    char attempt_s[16];
    char reason[512]; /* "gave up after N attempts: ..." */
    int64_t delay;
    enum { S_DONE, S_DEAD, S_WAIT, S_GAVE_UP, S_RETRY } what;
} settled;

/* The row's note: what trimming removed (the paths alone, as always), or for a paired dispatch
 * what it says of its pair, then "; trimmed: " and the paths. */
static const char *row_note(job *j)
{
    const char *trimmed = j->dout.trimmed ? buf_cstr(&j->dout.trimmed_note) : NULL;
    if (trimmed && j->note[0]) {
        snprintf(j->joined, sizeof(j->joined), "%s; trimmed: %s", j->note, trimmed);
        return j->joined;
    }
    return trimmed ? trimmed : (j->note[0] ? j->note : NULL);
}

/* Decides the row's outcome (retry delays, pauses) and fills its store item. */
static void outcome_prepare(outbox *ob, settled *s, store_settle *it, uint64_t *rng)
{
    job *j = s->j;
    outcome *o = &j->o;
    int64_t now = clock_now_ms();
    long max_attempts = ob->cfg->max_attempts;
    if (ob_kind_parse(j->sj.kind) == OB_KIND_HUD_FORWARD)
        max_attempts = ob->cfg->hud_max_retries + 1;
    const char *note = row_note(j);
    /* A paired dispatch keeps the record of what it sent (or why it sent no pair) as its body. */
    const char *body = j->record.len ? j->record.data : NULL;
    int attempt = j->sj.attempts + 1;
    snprintf(s->attempt_s, sizeof(s->attempt_s), "%d", attempt);
    *it = (store_settle){.job = &j->sj, .now = now, .note = note};
    s->write = true;
    if (o->verdict == OUTBOX_LEASE_LOST) {
        s->write = false; /* nothing was sent: the row's holder carries it out */
    } else if (o->verdict == OUTBOX_DONE) {
        s->dry = ob->gh == NULL;
        s->what = S_DONE;
        /* A dry-run dispatch stores no body: showing the row rebuilds the exact request from
         * the stored delivery (dispatch_row_body); writing 30 KB per target here was half of
         * the dry-run ingest cost (bench/RESULTS.md). Other kinds store their body already. */
        it->finish = true;
        it->state = ob_state_name(s->dry ? OB_STATE_DRY_RUN : OB_STATE_SENT);
        it->http_status = o->status;
        it->body = body;
        it->body_len = j->record.len;
    } else if (o->verdict == OUTBOX_PERMANENT) {
        s->what = S_DEAD;
        it->finish = true;
        it->state = ob_state_name(OB_STATE_DEAD);
        it->http_status = o->status;
        it->error = o->error;
        it->body = body;
        it->body_len = j->record.len;
    } else if (o->status == -1) {
        /* Installation already paused (or the relay stopping): wait without spending an
         * attempt. */
        s->what = S_WAIT;
        it->next_at = now + (int64_t)o->retry_after_s * 1000;
        it->error = o->error;
    } else if (attempt >= max_attempts) {
        s->what = S_GAVE_UP;
        snprintf(s->reason, sizeof(s->reason), "gave up after %d attempts: %s", attempt, o->error);
        it->finish = true;
        it->state = ob_state_name(OB_STATE_DEAD);
        it->http_status = o->status;
        it->error = s->reason;
    } else {
        s->what = S_RETRY;
        int64_t delay = outbox_backoff_ms(ob->cfg->retry_base_ms, ob->cfg->retry_max_ms, attempt,
                                          next_random(rng));
        if (o->verdict == OUTBOX_RATE_LIMIT) {
            int64_t until;
            if (o->retry_after_s >= 0)
                until = now + (int64_t)o->retry_after_s * 1000;
            else if (o->rl_remaining == 0 && o->rl_reset > 0)
                until = o->rl_reset * 1000;
            else /* no time named: at least a minute, backing off (GitHub's guidance) */
                until = now + outbox_rate_limit_pause_ms(ob->cfg->retry_max_ms, attempt,
                                                         next_random(rng));
            if (until < now)
                until = now;
            if (o->installation > 0)
                pause_set(ob, o->installation, until, now);
            delay = until - now;
            char secs[24];
            snprintf(secs, sizeof(secs), "%lld", (long long)(delay / 1000));
            LOG_WARN("github.rate_limited", "delivery", j->sj.delivery_id, "repo", j->sj.target,
                     "pause_s", secs, NULL);
        } else if (o->retry_after_s >= 0 && o->retry_after_s * 1000 > delay) {
            delay = (int64_t)o->retry_after_s * 1000;
        }
        s->delay = delay;
        it->next_at = now + delay;
        it->count_attempt = true;
        it->http_status = o->status;
        it->error = o->error;
    }
}

/* The counter, metric and log line of a row recorded done: sent, or dry-run (`dry`). */
static void done_report(outbox *ob, bool dry, const char *kind, const char *delivery_id,
                        const char *target, const char *attempt, const char *note)
{
    atomic_fetch_add(dry ? &ob->dry_run : &ob->sent, 1);
    metrics_outbox_result(kind, ob_state_name(dry ? OB_STATE_DRY_RUN : OB_STATE_SENT));
    LOG_INFO(dry ? "outbox.dry_run" : "outbox.sent", "delivery", delivery_id, "repo", target,
             "kind", kind, "attempt", attempt, "trimmed", note, NULL);
}

/* After the write: counters, metrics and the log line of one outcome. */
static void outcome_report(outbox *ob, const settled *s, crcr_err fe)
{
    job *j = s->j;
    store_job *sj = &j->sj;
    const outcome *o = &j->o;
    if (!s->write) {
        fe = CRCR_E_STATE;
    } else if (s->what == S_DONE) {
        done_report(ob, s->dry, sj->kind, sj->delivery_id, sj->target, s->attempt_s, row_note(j));
    } else if (s->what == S_DEAD || s->what == S_GAVE_UP) {
        atomic_fetch_add(&ob->dead, 1);
        metrics_outbox_result(sj->kind, ob_state_name(OB_STATE_DEAD));
        LOG_WARN("outbox.dead", "delivery", sj->delivery_id, "repo", sj->target, "kind", sj->kind,
                 "reason", s->what == S_DEAD ? o->error : s->reason, NULL);
    } else if (s->what == S_RETRY) {
        atomic_fetch_add(&ob->retried, 1);
        metrics_outbox_result(sj->kind, "retry");
        char delay_s[24];
        snprintf(delay_s, sizeof(delay_s), "%lld", (long long)s->delay);
        LOG_INFO("outbox.retry", "delivery", sj->delivery_id, "repo", sj->target, "attempt",
                 s->attempt_s, "delay_ms", delay_s, "reason", o->error, NULL);
    }
    if (fe == CRCR_E_STATE) {
        metrics_outbox_result(sj->kind, "lease_lost");
        LOG_WARN("outbox.lease_lost", "delivery", sj->delivery_id, "repo", sj->target, "kind",
                 sj->kind, "attempt", s->attempt_s, LOG_KEY_SENT,
                 o->verdict == OUTBOX_LEASE_LOST ? "no" : "yes", NULL);
    }
}

/* Whether a batch's worth of job slots (claim_room) is free (ob->mu held). */
static bool batch_room(const outbox *ob)
{
    return ob->jobs + ob->claim_room <= ob->max_jobs;
}

/* Gives back `n` job slots (their outcomes are recorded); a claim may follow. */
static void slots_free(outbox *ob, size_t n)
{
    if (n == 0)
        return;
    pthread_mutex_lock(&ob->mu);
    bool was_full = ob->jobs >= ob->max_jobs;
    bool was_short = !batch_room(ob);
    ob->jobs -= n;
    /* Rows left waiting for a slot: an idle worker claims them once there is room for a batch, or
     * starts the gathering of the first free slots (claim_room_now; this one does on its next
     * turn unless it finds ready jobs first). */
    if (was_short && (batch_room(ob) || was_full) && ob->pending && !ob->claiming && ob->idle)
        pthread_cond_signal(&ob->cv);
    if (ob->stopping && ob->jobs == 0)
        pthread_cond_broadcast(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
}

/* Runs the next step of each job; the outcomes of those that ended are recorded in one store
 * transaction, then the jobs are freed and their slots given back. */
static void run_jobs(outbox *ob, job **jobs, size_t n, uint64_t *rng)
{
    settled ss[OUTBOX_SETTLE_MAX];
    store_settle items[OUTBOX_SETTLE_MAX];
    size_t k = 0, w = 0;
    for (size_t i = 0; i < n; i++) {
        if (job_step(ob, jobs[i]) == STEP_WAIT)
            continue; /* its call owns it now */
        ss[k] = (settled){.j = jobs[i]};
        outcome_prepare(ob, &ss[k], &items[w], rng);
        if (ss[k].write)
            w++;
        k++;
    }
    if (w)
        (void)store_jobs_settle(ob->st, items, w);
    for (size_t i = 0, wi = 0; i < k; i++) {
        crcr_err fe = CRCR_OK;
        if (ss[i].write)
            fe = items[wi++].result;
        outcome_report(ob, &ss[i], fe);
        job_free(ss[i].j);
    }
    slots_free(ob, k);
}

/* ---------------------------------------------------------------- workers */

/* Whether the free job slots allow a claim now (ob->mu held): room for a batch (claim_room
 * slots), or fewer that have waited OUTBOX_CLAIM_GATHER_MS for more. Else *gather_ms is how long
 * until they have (0 when no slot is free). */
static bool claim_room_now(outbox *ob, int64_t *gather_ms)
{
    *gather_ms = 0;
    if (ob->jobs >= ob->max_jobs) {
        ob->room_since_us = 0;
        return false;
    }
    if (batch_room(ob))
        return true;
    int64_t now_us = clock_real_mono_us();
    if (!ob->room_since_us)
        ob->room_since_us = now_us;
    int64_t left_us = ob->room_since_us + OUTBOX_CLAIM_GATHER_MS * 1000 - now_us;
    if (left_us <= 0)
        return true;
    *gather_ms = (left_us + 999) / 1000;
    return false;
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
 * A worker runs the steps of ready jobs (whose calls ended), up to OUTBOX_SETTLE_MAX at once;
 * else claims when rows may be due (a wake-up, a full claim before, its timer: a due time or the
 * 1 s poll) and jobs have room; else sleeps. One worker claims at a time, for as many rows as
 * there are free job slots (OUTBOX_BATCH_MAX at most), and runs their first steps itself. A
 * claim that filled its batch leaves rows pending: another idle worker claims the next batch
 * meanwhile. When stopping, workers claim nothing and exit once every job is recorded.
 */
static void *worker(void *arg)
{
    outbox *ob = arg;
    thread_sched_batch(); /* queue work: woken, it does not preempt (thread_sched.c) */
    uint64_t rng = (uint64_t)clock_mono_ms() ^ (uint64_t)(uintptr_t)&rng;
    if (!rng)
        rng = 88172645463325252ULL;
    store_job batch[OUTBOX_BATCH_MAX];
    job *jobs[OUTBOX_SETTLE_MAX];
    int64_t wake_at = 0;  /* this worker's timer: claim once it has passed */
    bool watcher = false; /* this worker watches a test clock for the others (ob->watching) */
    pthread_mutex_lock(&ob->mu);
    for (;;) {
        int64_t gather_ms = 0; /* the free slots' gathering ends in that many ms */
        if (watcher && (ob->ready || (!ob->claiming && (ob->pending || clock_now_ms() >= wake_at) &&
                                      claim_room_now(ob, &gather_ms)))) {
            /* Off to work: another idle worker takes the watch over. */
            watcher = false;
            ob->watching = false;
            if (ob->idle > 0)
                pthread_cond_signal(&ob->cv);
        }
        if (ob->ready) {
            size_t n = 0;
            while (ob->ready && n < OUTBOX_SETTLE_MAX) {
                jobs[n++] = ob->ready;
                ob->ready = ob->ready->next;
            }
            if (!ob->ready)
                ob->ready_tail = NULL;
            pthread_mutex_unlock(&ob->mu);
            run_jobs(ob, jobs, n, &rng);
            pthread_mutex_lock(&ob->mu);
            continue;
        }
        if (ob->stopping && ob->jobs == 0)
            break;
        int64_t now = clock_now_ms();
        if (!ob->stopping && !ob->claiming && (ob->pending || now >= wake_at) &&
            claim_room_now(ob, &gather_ms)) {
            ob->claiming = true;
            ob->pending = false;
            ob->room_since_us = 0;
            size_t want = ob->max_jobs - ob->jobs;
            if (want > OUTBOX_BATCH_MAX)
                want = OUTBOX_BATCH_MAX;
            ob->jobs += want; /* reserved while the claim runs */
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
            size_t made = 0;
            shared_payload *sps[OUTBOX_BATCH_MAX];
            share_claimed_payloads(batch, n, sps);
            for (size_t i = 0; i < n; i++) {
                bool payload = !batch[i].payload_in || sps[i];
                job *j = payload ? job_new(ob, &batch[i]) : NULL;
                if (j) {
                    j->shared = sps[i];
                    jobs[made++] = j;
                } else { /* no memory: the row goes back to the queue */
                    shared_payload_drop(sps[i]);
                    (void)store_job_retry(ob->st, &batch[i], clock_now_ms(), false, 0,
                                          "out of memory");
                    store_job_free(&batch[i]);
                }
            }
            pthread_mutex_lock(&ob->mu);
            ob->claiming = false;
            ob->jobs -= want - made;
            if (n == want)
                ob->pending = true; /* a full batch: there may be more */
            if (n == 0)
                wake_at = now + wait;
            /* Another worker claims the next batch while this one runs its rows. */
            if (ob->pending && batch_room(ob))
                wake_idle(ob, 1);
            if (made > 0) {
                pthread_mutex_unlock(&ob->mu);
                run_jobs(ob, jobs, made, &rng);
                pthread_mutex_lock(&ob->mu);
            }
            continue;
        }
        if (wake_at <= now) /* another worker is claiming, or no room: look again later */
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
        if (gather_ms > 0 && gather_ms < wait)
            wait = gather_ms;
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

size_t outbox_threads(const crcr_config *cfg)
{
    size_t n = (size_t)cpus_available() * OUTBOX_THREADS_PER_CPU;
    if (n < 2)
        n = 2;
    if (n > OUTBOX_THREADS_MAX)
        n = OUTBOX_THREADS_MAX;
    size_t jobs = cfg->max_dispatch_workers > 0 ? (size_t)cfg->max_dispatch_workers : 1;
    return n < jobs ? n : jobs;
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
    ob->max_jobs = cfg->max_dispatch_workers > 0 ? (size_t)cfg->max_dispatch_workers : 1;
    if (ob->max_jobs > CRCR_MAX_DISPATCH_WORKERS)
        ob->max_jobs = CRCR_MAX_DISPATCH_WORKERS;
    ob->claim_room = ob->max_jobs / OUTBOX_CLAIM_ROOM_DIV;
    if (ob->claim_room > OUTBOX_BATCH_MAX)
        ob->claim_room = OUTBOX_BATCH_MAX;
    if (ob->claim_room < 1)
        ob->claim_room = 1;
    pthread_mutex_init(&ob->mu, NULL);
    pthread_cond_init(&ob->cv, NULL);
    pthread_mutex_init(&ob->inst_mu, NULL);
    if (gh) /* the installation ids this store knows (another run's, another instance's) */
        installation_scan(ob);
    size_t n = outbox_threads(cfg);
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
    /* One worker claims the new rows (worker()); while a claim runs, its claimer sees `pending`
     * when it ends and wakes another to claim again. */
    ob->pending = true;
    if (!ob->claiming && ob->jobs < ob->max_jobs)
        pthread_cond_signal(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
}

size_t outbox_reserve(outbox *ob, size_t n, int64_t *lease_until)
{
    if (!ob || n == 0)
        return 0;
    pthread_mutex_lock(&ob->mu);
    size_t k = 0;
    /* Not while rows wait for a claim (`pending`): new rows then queue behind them, in due order,
     * instead of taking the slots the older ones wait for. */
    if (!ob->stopping && !ob->pending && ob->jobs < ob->max_jobs) {
        k = ob->max_jobs - ob->jobs;
        if (k > n)
            k = n;
        ob->jobs += k;
    }
    pthread_mutex_unlock(&ob->mu);
    *lease_until = clock_now_ms() + (int64_t)ob->cfg->lease_s * 1000;
    return k;
}

void outbox_unreserve(outbox *ob, size_t n)
{
    if (ob)
        slots_free(ob, n);
}

/* Puts the jobs head..tail on the ready list and wakes an idle worker for them: it takes them
 * all (OUTBOX_SETTLE_MAX at most). */
static void hand_over(outbox *ob, job *head, job *tail)
{
    pthread_mutex_lock(&ob->mu);
    ready_append(ob, head, tail);
    wake_idle(ob, 1);
    pthread_mutex_unlock(&ob->mu);
}

size_t outbox_take(outbox *ob, const store_delivery *d, const store_new_job *jobs, size_t n,
                   size_t reserved)
{
    if (!ob || reserved == 0)
        return 0;
    job *head = NULL, *tail = NULL;
    size_t made = 0, chunk = 0, chunk_max = OUTBOX_TAKE_FIRST;
    shared_payload *sp = shared_payload_new(d->payload, d->payload_len);
    for (size_t i = 0; i < n && made < reserved; i++) {
        if (!jobs[i].claimed_id || *jobs[i].claimed_id <= 0)
            continue; /* not claimed, or left queued: claimed after the wake-up */
        store_job sj;
        job *j = NULL;
        if (store_job_claimed(&sj, d, &jobs[i]) == CRCR_OK && sp)
            j = job_new(ob, &sj);
        if (!j) { /* no memory: the row goes back to the queue (its id and lease are the fence) */
            (void)store_job_retry(ob->st, &sj, clock_now_ms(), false, 0, "out of memory");
            store_job_free(&sj);
            continue;
        }
        atomic_fetch_add(&sp->refs, 1);
        j->shared = sp;
        if (tail)
            tail->next = j;
        else
            head = j;
        tail = j;
        made++;
        if (++chunk == chunk_max) { /* a worker starts on these while the rest are made */
            hand_over(ob, head, tail);
            head = tail = NULL;
            chunk = 0;
            if (chunk_max < OUTBOX_SETTLE_MAX)
                chunk_max *= 2;
        }
    }
    shared_payload_drop(sp);
    slots_free(ob, reserved - made);
    if (head)
        hand_over(ob, head, tail);
    return made;
}

size_t outbox_known(const outbox *ob, const store_delivery *d, store_new_job *jobs, size_t n)
{
    if (!ob || ob->gh)
        return 0;
    dispatch_src src = {.event = d->event,
                        .delivery_id = d->delivery_id,
                        .payload = d->payload,
                        .payload_len = d->payload_len};
    if (!dispatch_row_verbatim(ob->cfg, &src)) /* the same answer for every unpaired row */
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ob_kind_parse(jobs[i].kind) == OB_KIND_DISPATCH && !jobs[i].body && !jobs[i].seq_key &&
            !jobs[i].after_seq) {
            jobs[i].done_state = ob_state_name(OB_STATE_DRY_RUN);
            k++;
        }
    }
    return k;
}

void outbox_known_recorded(outbox *ob, const store_delivery *d, const store_new_job *jobs, size_t n)
{
    if (!ob)
        return;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].done_state) /* outbox_known marks dry-run rows only */
            done_report(ob, true, jobs[i].kind, d->delivery_id, jobs[i].target, "1", NULL);
}

size_t outbox_installation_changed(outbox *ob, int64_t installation, const char *const *repos,
                                   size_t n_repos)
{
    if (!ob || installation <= 0)
        return 0;
    size_t dropped = gh_installation_forget(ob->gh, installation);
    inst_scan sc = {.ob = ob, .only = installation, .cap = CRCR_TOKEN_CACHE_MAX};
    sc.keys = calloc(sc.cap, sizeof(*sc.keys));
    if (sc.keys) {
        (void)store_kv_scan(ob->st, OUTBOX_INSTALLATION_PREFIX, clock_now_ms(),
                            CRCR_TOKEN_CACHE_MAX, inst_got, &sc);
        for (size_t i = 0; i < sc.n; i++)
            store_kv_delete(ob->st, sc.keys[i]);
        free(sc.keys);
    }
    for (size_t i = 0; i < n_repos; i++)
        if (repos[i])
            installation_unstore(ob, repos[i]);
    return dropped > sc.n ? dropped : sc.n;
}

void outbox_stop(outbox *ob)
{
    if (!ob)
        return;
    pthread_mutex_lock(&ob->mu);
    ob->stopping = true;
    pthread_cond_broadcast(&ob->cv);
    pthread_mutex_unlock(&ob->mu);
    /* Requests not yet sent end now (their rows go back to the queue); those out are answered. */
    gh_drain(ob->gh);
    for (size_t i = 0; i < ob->n_threads; i++)
        pthread_join(ob->threads[i], NULL);
    if (ob->has_waker)
        pthread_join(ob->waker, NULL);
    pthread_cond_destroy(&ob->cv);
    pthread_mutex_destroy(&ob->mu);
    pthread_mutex_destroy(&ob->inst_mu);
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

void outbox_get_load(outbox *ob, size_t *jobs, size_t *max_jobs)
{
    pthread_mutex_lock(&ob->mu);
    *jobs = ob->jobs;
    *max_jobs = ob->max_jobs;
    pthread_mutex_unlock(&ob->mu);
}
