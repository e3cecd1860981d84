/*
 * store_pg_live.c - the PostgreSQL store's listener connection, one per process: the instance's
 * liveness (store_recover makes the serving process an instance, whose session advisory lock
 * tells every claimer that its rows are held; see store_pg.c) and the wake-ups of idle workers
 * (LISTEN crcr_outbox, store_wait_for_work). The connection is s->listener, guarded by s->lmu and
 * reopened by the waiting loop when it broke.
 */
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "store_pg.h"

/* The listener reconnects at most this often while the database is away. */
#define PG_LISTEN_RETRY_MS 1000
/* Ids tried by store_recover. An id is taken only when another schema of the same database (its
 * own sequence) handed out the same number; a shared key can only delay a takeover to the
 * lease, never make a live instance look dead. */
#define PG_LIVE_ID_TRIES 16

/* ---- instance liveness ---- */

/* Takes this instance's lock in the session of `c` (the listener), with server-side TCP
 * keepalives there so that the server also notices a vanished host within seconds. Caller holds
 * lmu. true when held (live_since set). */
static bool live_lock(pg_store *s, PGconn *c)
{
    int id = atomic_load(&s->live_id);
    if (!id || !c)
        return false;
    /* Ignored (and harmless) on a Unix-domain socket. */
    PGresult *r = PQexec(c, "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
                            "SET tcp_keepalives_count = 3");
    PQclear(r);
    char v[3][24];
    snprintf(v[0], sizeof(v[0]), "%d", PG_LIVE_CLASS);
    snprintf(v[1], sizeof(v[1]), "%d", id);
    snprintf(v[2], sizeof(v[2]), "%d", PG_LIVE_SERVER_UP_MS);
    const char *const vals[3] = {v[0], v[1], v[2]};
    r = PQexecParams(c,
                     "SELECT pg_try_advisory_lock($1::integer, $2::integer), "
                     "pg_postmaster_start_time() < now() - $3::bigint * interval '1 millisecond'",
                     3, NULL, vals, NULL, NULL, 0);
    bool held =
        PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    bool up = held && PQgetvalue(r, 0, 1)[0] == 't';
    PQclear(r);
    if (held) {
        atomic_store(&s->live_server_up, up);
        int64_t now = clock_mono_ms();
        atomic_store(&s->live_since, now > 0 ? now : 1);
    }
    return held;
}

/* Closes the listener (its session's lock goes with it). Caller holds lmu. */
static void listener_drop(pg_store *s)
{
    atomic_store(&s->live_since, 0);
    PQfinish(s->listener);
    s->listener = NULL;
}

/* Opens the listener: LISTEN crcr_outbox and, for an instance, its lock (when that fails the
 * waiting loop tries again). Caller holds lmu and stores the connection in s->listener, which owns
 * it (listener_drop, pg_close). NULL with the reason in `why`. */
static PGconn *listener_open(pg_store *s, char *why, size_t whysz)
{
    PGconn *c = pg_connect(s->uri, why, whysz);
    if (!c)
        return NULL;
    PGresult *r = PQexec(c, "LISTEN " PG_CHANNEL);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        pg_one_line(PQerrorMessage(c), why, whysz);
        PQfinish(c);
        return NULL;
    }
    live_lock(s, c);
    return c;
}

/* Makes the serving process an instance (see store_claim in store.h). Nothing is requeued: the
 * rows of an instance that died are claimable as soon as its lock is gone. */
crcr_err pg_recover(store *st)
{
    pg_store *s = pg_store_of(st);
    for (int i = 0; i < PG_LIVE_ID_TRIES; i++) {
        store_scalar id = {0};
        crcr_err e = pg_run(s, "recover", "SELECT nextval('outbox_owner_seq')::bigint", NULL, 0,
                            store_scalar_row, &id, NULL);
        if (!e && !id.found)
            e = CRCR_E_STORE;
        if (e)
            return e;
        pthread_mutex_lock(&s->lmu);
        atomic_store(&s->live_id, (int)id.v);
        bool held;
        if (s->listener && PQstatus(s->listener) == CONNECTION_OK) {
            held = live_lock(s, s->listener);
        } else {
            char why[PG_ERRTEXT_MAX] = "";
            if (s->listener)
                listener_drop(s);
            s->listener = listener_open(s, why, sizeof(why));
            if (!s->listener) {
                atomic_store(&s->live_id, 0);
                pthread_mutex_unlock(&s->lmu);
                LOG_ERROR("store.pg.instance_failed", "error", why, NULL);
                return CRCR_E_STORE;
            }
            held = atomic_load(&s->live_since) != 0;
        }
        pthread_mutex_unlock(&s->lmu);
        if (held) {
            char ids[24];
            snprintf(ids, sizeof(ids), "%lld", (long long)id.v);
            LOG_INFO("store.pg.instance", "id", ids, NULL);
            return CRCR_OK;
        }
    }
    atomic_store(&s->live_id, 0);
    LOG_ERROR("store.pg.instance_failed", "error", "no free instance id", NULL);
    return CRCR_E_STORE;
}

/* ---- waking workers ---- */

/* Reads the notifications that arrived on `c` and adds the rows other processes announced to
 * *rows (SIZE_MAX when one carries no count). This process's own ("<s->tag>:<n>") are skipped:
 * its writers woke its workers already. true when one came from another process. */
static bool drain_notifies(pg_store *s, PGconn *c, size_t *rows)
{
    bool any = false;
    size_t taglen = strlen(s->tag);
    PGnotify *n;
    while ((n = PQnotifies(c)) != NULL) {
        const char *p = n->extra ? n->extra : "";
        if (strncmp(p, s->tag, taglen) == 0 && p[taglen] == ':') {
            PQfreemem(n);
            continue;
        }
        any = true;
        const char *colon = strchr(p, ':');
        char *end = NULL;
        long long v = colon ? strtoll(colon + 1, &end, 10) : -1;
        if (!colon || end == colon + 1 || *end != '\0' || v < 0)
            *rows = SIZE_MAX;
        else if (*rows != SIZE_MAX)
            *rows = (uint64_t)v >= SIZE_MAX - *rows ? SIZE_MAX : *rows + (size_t)v;
        PQfreemem(n);
    }
    return any;
}

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/*
 * Waits up to timeout_ms for a NOTIFY on crcr_outbox from another process. CRCR_OK: new outbox
 * rows may be due, *rows of them (SIZE_MAX right after the listener (re)connected, since
 * notifications may have been missed). CRCR_E_NOT_FOUND: the time passed. CRCR_E_STORE: the
 * database is away (after waiting out the timeout, so that callers can loop without spinning).
 */
crcr_err pg_wait_for_work(store *st, int64_t timeout_ms, size_t *rows)
{
    pg_store *s = pg_store_of(st);
    *rows = 0;
    pthread_mutex_lock(&s->lmu);
    if (s->listener && PQstatus(s->listener) != CONNECTION_OK)
        listener_drop(s);
    if (!s->listener) {
        int64_t now = clock_mono_ms();
        if (now >= s->listen_retry_at) {
            char why[PG_ERRTEXT_MAX] = "";
            PGconn *c = listener_open(s, why, sizeof(why));
            s->listener = c;
            if (!c) {
                s->listen_retry_at = now + PG_LISTEN_RETRY_MS;
                LOG_DEBUG("store.pg.listen_failed", "error", why, NULL);
            }
        }
        if (s->listener) {
            pthread_mutex_unlock(&s->lmu);
            *rows = SIZE_MAX; /* notifications may have been missed while it was away */
            return CRCR_OK;
        }
        pthread_mutex_unlock(&s->lmu);
        sleep_ms(timeout_ms);
        return CRCR_E_STORE;
    }
    /* The lock could not be taken when the listener (re)connected: the session that held it had
     * not ended yet (the server notices a dropped connection late). Until then it protects this
     * instance's rows; claims made meanwhile record no owner. */
    if (atomic_load(&s->live_id) && !atomic_load(&s->live_since))
        live_lock(s, s->listener);
    crcr_err e = CRCR_E_NOT_FOUND;
    if (drain_notifies(s, s->listener, rows)) {
        e = CRCR_OK;
    } else {
        struct pollfd pfd = {.fd = PQsocket(s->listener), .events = POLLIN};
        int rc = poll(&pfd, 1, timeout_ms > 0 ? (int)timeout_ms : 0);
        if (rc > 0) {
            if (!PQconsumeInput(s->listener)) {
                listener_drop(s);
                e = CRCR_E_STORE;
            } else if (drain_notifies(s, s->listener, rows)) {
                e = CRCR_OK;
            }
        }
    }
    pthread_mutex_unlock(&s->lmu);
    return e;
}
