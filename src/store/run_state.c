/* run_state.c - the run state machine and the run row's shape; see run_state.h. */
#include "run_state.h"

#include <stdio.h>
#include <string.h>

#include "vocab.h"

#define RUN_LIST_DEFAULT 1000
#define RUN_LIST_MAX 100000

/* Over a run of an ended dispatch (run_state.h): recorded, never reopened. */
static run_outcome ended_next(const run_prev *prev, const store_run_update *u,
                              int64_t dispatched_at, store_run_result *res)
{
    crcr_run_status was = run_status_parse(prev->exists ? prev->state : "");
    if (u->only_open) {
        res->duplicate = true;
        return RUN_DUPLICATE;
    }
    if (run_status_parse(u->status) != RUN_STATUS_COMPLETED) {
        if (prev->exists) {
            res->duplicate = true;
            return RUN_DUPLICATE;
        }
        res->started_at = u->now;
        if (dispatched_at)
            res->queue_ms = u->now > dispatched_at ? u->now - dispatched_at : 0;
        return RUN_APPLY;
    }
    if (was == RUN_STATUS_COMPLETED &&
        ((!u->conclusion && !prev->has_conclusion) ||
         (u->conclusion && prev->has_conclusion && strcmp(u->conclusion, prev->conclusion) == 0))) {
        res->duplicate = true;
        return RUN_DUPLICATE;
    }
    if (res->started_at)
        res->exec_ms = u->now > res->started_at ? u->now - res->started_at : 0;
    return RUN_APPLY;
}

run_outcome run_state_next(const run_prev *prev, const store_run_update *u, int64_t dispatched_at,
                           store_run_result *res, char *reason, size_t reasonsz)
{
    const char *state = prev->exists ? prev->state : "";
    crcr_run_status was = run_status_parse(state);
    res->dispatched_at = dispatched_at;
    res->started_at = prev->exists ? prev->started_at : 0;
    /* A row the relay ended keeps its reason; a run with no row yet takes its dispatch's. */
    const char *ended = prev->exists ? prev->ended : prev->dispatch_ended;
    snprintf(res->ended, sizeof(res->ended), "%s", ended);
    if (res->ended[0])
        return ended_next(prev, u, dispatched_at, res);
    if (u->only_open && was != RUN_STATUS_IN_PROGRESS) {
        res->duplicate = true;
        return RUN_DUPLICATE;
    }
    if (run_status_parse(u->status) != RUN_STATUS_COMPLETED) {
        if (was == RUN_STATUS_IN_PROGRESS) {
            res->duplicate = true;
            return RUN_DUPLICATE;
        }
        if (state[0]) {
            snprintf(reason, reasonsz, "in_progress after %s", state);
            return RUN_INVALID;
        }
        res->started_at = u->now;
        if (dispatched_at)
            res->queue_ms = u->now > dispatched_at ? u->now - dispatched_at : 0;
        return RUN_APPLY;
    }
    if (was == RUN_STATUS_COMPLETED) {
        bool same =
            (!u->conclusion && !prev->has_conclusion) ||
            (u->conclusion && prev->has_conclusion && strcmp(u->conclusion, prev->conclusion) == 0);
        if (same) {
            res->duplicate = true;
            return RUN_DUPLICATE;
        }
        snprintf(reason, reasonsz, "already completed with conclusion %s",
                 prev->has_conclusion ? prev->conclusion : "null");
        return RUN_INVALID;
    }
    if (!u->single_shot && was != RUN_STATUS_IN_PROGRESS) {
        snprintf(reason, reasonsz, "completed without prior in_progress");
        return RUN_INVALID;
    }
    if (res->started_at)
        res->exec_ms = u->now > res->started_at ? u->now - res->started_at : 0;
    return RUN_APPLY;
}

static store_param text(const char *s)
{
    return (store_param){.kind = STORE_P_TEXT, .is_null = s == NULL, .text = s};
}

static store_param integer(int64_t v)
{
    return (store_param){.kind = STORE_P_INT, .i = v};
}

/* An integer, or NULL when it equals `null_value` (0 for times, -1 for measures). */
static store_param integer_or_null(int64_t v, int64_t null_value)
{
    return (store_param){.kind = STORE_P_INT, .is_null = v == null_value, .i = v};
}

void run_row_params(const store_run_update *u, const store_run_result *res,
                    store_param out[RUN_UPSERT_PARAMS])
{
    bool completed = run_status_parse(u->status) == RUN_STATUS_COMPLETED;
    int k = 0;
    out[k++] = text(u->key.delivery_id);
    out[k++] = text(u->key.repo);
    out[k++] = text(u->key.run_id);
    out[k++] = integer(u->key.run_attempt);
    out[k++] = text(u->key.job_name ? u->key.job_name : "");
    out[k++] = text(u->event_type);
    out[k++] = text(u->status);
    out[k++] = integer(u->level);
    out[k++] = integer(u->pr_number);
    out[k++] = text(u->head_sha);
    out[k++] = text(u->key.workflow_name ? u->key.workflow_name : ""); /* the row's identity */
    out[k++] = text(completed ? u->conclusion : NULL);
    out[k++] = text(u->details_url);
    out[k++] = text(u->artifact_url);
    out[k++] = integer_or_null(res->dispatched_at, 0);
    out[k++] = integer_or_null(res->started_at, 0);
    out[k++] = integer_or_null(completed ? u->now : 0, 0);
    out[k++] = integer_or_null(res->queue_ms, -1);
    out[k++] = integer_or_null(res->exec_ms, -1);
    out[k++] = integer_or_null(u->test_passed, -1);
    out[k++] = integer_or_null(u->test_failed, -1);
    out[k++] = integer_or_null(u->test_skipped, -1);
    /* The body is kept while the run is open: the zombie sweeper turns an in_progress row's
     * body into its timed_out callback. A completed row keeps none (upstream's COMPLETED record
     * has no payload either), so the completing transition rewrites a small row instead of the
     * ~30 KB echoed webhook (on SQLite ~8 overflow pages of WAL and checkpoint writes). */
    const char *body = completed ? NULL : u->payload;
    out[k++] = (store_param){.kind = STORE_P_BLOB,
                             .is_null = body == NULL,
                             .blob = body,
                             .len = body ? u->payload_len : 0};
    out[k++] = integer(u->now);
    out[k++] = text(res->ended[0] ? res->ended : NULL);
}

void run_row_fill(store_run_row *r, const store_row_source *s)
{
    void *src = s->src;
    r->delivery_id = s->text(src, 0);
    r->repo = s->text(src, 1);
    r->job_name = s->text(src, 2);
    r->event_type = s->text(src, 3);
    r->state = s->text(src, 4);
    r->head_sha = s->text(src, 5);
    r->workflow_name = s->text(src, 6);
    r->conclusion = s->text(src, 7);
    r->details_url = s->text(src, 8);
    r->artifact_url = s->text(src, 9);
    r->run_id = s->text(src, 10);
    r->run_attempt = s->i64(src, 11, 0);
    r->pr_number = s->i64(src, 12, 0);
    r->level = (int)s->i64(src, 13, 0);
    r->dispatched_at = s->i64(src, 14, 0);
    r->started_at = s->i64(src, 15, 0);
    r->completed_at = s->i64(src, 16, 0);
    r->queue_ms = s->i64(src, 17, -1);
    r->exec_ms = s->i64(src, 18, -1);
    r->test_passed = s->i64(src, 19, -1);
    r->test_failed = s->i64(src, 20, -1);
    r->test_skipped = s->i64(src, 21, -1);
    r->ended = s->text(src, 22);
    r->payload = s->blob(src, RUN_PAYLOAD_COLUMN, &r->payload_len);
}

int run_prev_row(void *ctx, const store_row_source *s)
{
    run_prev *prev = ctx;
    const char *state = s->text(s->src, 0), *conclusion = s->text(s->src, 1);
    memset(prev, 0, sizeof(*prev));
    prev->exists = true;
    snprintf(prev->state, sizeof(prev->state), "%s", state ? state : "");
    prev->has_conclusion = conclusion != NULL;
    if (conclusion)
        snprintf(prev->conclusion, sizeof(prev->conclusion), "%s", conclusion);
    prev->started_at = s->i64(s->src, 2, 0);
    const char *ended = s->text(s->src, 3);
    snprintf(prev->ended, sizeof(prev->ended), "%s", ended ? ended : "");
    return 1;
}

int run_list_limit(const store_run_filter *f)
{
    int limit = f && f->limit > 0 ? f->limit : RUN_LIST_DEFAULT;
    return limit > RUN_LIST_MAX ? RUN_LIST_MAX : limit;
}

int run_list_offset(const store_run_filter *f)
{
    return f && f->offset > 0 ? f->offset : 0;
}

int64_t rate_window_count(bool have, int64_t count, int64_t expired, int64_t recounted)
{
    if (!have)
        return recounted;
    return count > expired ? count - expired : 0;
}

int64_t rate_window_decide(int64_t n, long limit, int64_t oldest, int64_t now, int64_t window_ms,
                           bool *allowed, int64_t *retry_after_ms)
{
    *retry_after_ms = 0;
    *allowed = n < limit;
    if (*allowed)
        return n + 1;
    *retry_after_ms = oldest + window_ms - now;
    if (*retry_after_ms < 1)
        *retry_after_ms = 1;
    return n;
}
