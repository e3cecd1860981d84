/*
 * store_sqlite_reconcile.c - the SQLite store's records of the reconciler (§5.7): the redeliveries
 * it asked GitHub for, one row per event guid (table `redeliveries`, schema version 4). Writes
 * are single statements on the writer's connection (synchronous=NORMAL, like the outbox's
 * bookkeeping: a power loss can undo the last ask's record, so an ask may be repeated once, never
 * lost); the listing runs on a reader.
 */
#include "store_sqlite.h"

static crcr_err sq_redelivery_begin(store *st, const char *guid, int64_t hook_id, const char *event,
                                    const char *action, int64_t now, int max_attempts,
                                    int64_t stale_before, bool *allowed, int *attempts)
{
    store_scalar n = {0};
    crcr_err e = sq_locked(
        sq_store(st), SQ_ONCE, "redelivery_begin",
        "INSERT INTO redeliveries(guid, hook_id, event, action, attempts, first_asked_at, "
        "last_asked_at, last_status, last_result) VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5, 0, NULL) "
        "ON CONFLICT(guid) DO UPDATE SET attempts=redeliveries.attempts+1, "
        "hook_id=excluded.hook_id, last_asked_at=excluded.last_asked_at, last_status=0, "
        "last_result=NULL WHERE redeliveries.attempts < ?6 AND (redeliveries.hook_id < "
        "excluded.hook_id OR redeliveries.last_asked_at < ?7) RETURNING attempts",
        ARGS(ARG_TEXT(guid), ARG_INT(hook_id), ARG_TEXT(event), ARG_TEXT(action), ARG_INT(now),
             ARG_INT(max_attempts), ARG_INT(stale_before)),
        store_scalar_row, &n, NULL);
    if (!e && n.found) {
        *allowed = true;
        *attempts = (int)n.v;
    } else if (!e) {
        e = sq_locked(sq_store(st), SQ_ONCE, "redelivery_begin",
                      "SELECT attempts FROM redeliveries WHERE guid=?1", ARGS(ARG_TEXT(guid)),
                      store_scalar_row, &n, NULL);
        *attempts = !e && n.found ? (int)n.v : 0;
    }
    return e;
}

static crcr_err sq_redelivery_done(store *st, const char *guid, long status, const char *result,
                                   bool counted)
{
    return sq_locked(sq_store(st), SQ_ONCE, "redelivery_done",
                     "UPDATE redeliveries SET last_status=?2, last_result=?3, "
                     "attempts=CASE WHEN ?4 THEN attempts ELSE max(attempts-1, 0) END, "
                     "hook_id=CASE WHEN ?4 THEN hook_id ELSE 0 END WHERE guid=?1",
                     ARGS(ARG_TEXT(guid), ARG_INT(status), ARG_TEXT(result), ARG_INT(counted)),
                     NULL, NULL, NULL);
}

static crcr_err sq_redelivery_list(store *st, int limit, bool pending_only, store_rows *rows)
{
    return sq_listing(sq_store(st), "redelivery_list",
                      "SELECT " REDELIVERY_COLUMNS " FROM redeliveries r LEFT JOIN deliveries d ON "
                      "d.delivery_id=r.guid WHERE (?2=0 OR d.delivery_id IS NULL) "
                      "ORDER BY r.last_asked_at DESC, r.guid LIMIT ?1",
                      ARGS(ARG_INT(limit), ARG_INT(pending_only)), store_listing_row, rows);
}

/* This file's operations (store_impl.h). */
const store_reconcile_ops SQ_RECONCILE_OPS = {
    .redelivery_begin = sq_redelivery_begin,
    .redelivery_done = sq_redelivery_done,
    .redelivery_list = sq_redelivery_list,
};
