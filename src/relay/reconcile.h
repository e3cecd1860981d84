/*
 * reconcile.h - the reconciler (§5.7): nothing lost at the front door.
 *
 * GitHub does not resend a webhook it failed to deliver (the relay was down, answered 5xx, or
 * did not answer within 10 s); it only records the failed attempt in the App's delivery log. In
 * App mode the reconciler reads that log and asks GitHub to deliver again every upstream event
 * the relay never stored; the redelivery then takes the normal webhook path (signature, dedup by
 * X-GitHub-Delivery, one outbox row per target).
 *
 * A pass, once at start-up and then every CRCR_RECONCILE_SECONDS (0: no reconciler; never in
 * dry-run), on a thread of its own so that it never holds up webhooks or the main loop:
 *   1. the store lease "reconciler" makes one instance pass at a time (one per shared store):
 *      held for the pass only (renewed before each page and each ask, given back at its end, so a
 *      restarted relay passes at once), and a periodic pass is skipped when another instance
 *      recorded one less than half a period ago;
 *   2. GET /app/hook/deliveries?per_page=100 (App JWT), newest first, following the cursor of
 *      Link rel="next", back to the mark of the previous pass minus RC_OVERLAP_S (or back to
 *      CRCR_RECONCILE_WINDOW_SECONDS when there is none). A pass reads at most RC_MAX_PAGES pages;
 *      where it stopped is kept as a backlog cursor (with its floor) that the next passes read
 *      first, before the newest pages, so a deep log is covered over several passes, never
 *      skipped, however busy its top is;
 *   3. attempts of the events the relay handles (§2 routing: push; pull_request opened,
 *      reopened, synchronize, closed, labeled; check_run and check_suite rerequested) are
 *      grouped by guid. A guid is missing when none of its attempts has a 2xx status_code (0: no
 *      answer came) and the store has no delivery with that id;
 *   4. missing guids, oldest first, at most CRCR_RECONCILE_MAX_PER_PASS per pass: POST
 *      /app/hook/deliveries/{id}/attempts for the guid's latest attempt (GitHub answers 202).
 *      store_redelivery_begin records each ask before it is made and allows it only while the
 *      guid has had fewer than RC_MAX_ASKS asks and GitHub has acted on the previous one (a newer
 *      attempt is in the log) or that ask is RC_ASK_STALE_MS old, so instances never ask twice
 *      for one guid and a redelivery on its way is not asked again;
 *   5. the pass's state (mark, backlog, its outcome) goes to the store's kv ("reconcile:state"),
 *      shared by every instance for /metrics. The mark never passes a missing guid that may
 *      still be asked for (not asked this pass, or its ask still pending), so the next pass sees
 *      it again.
 * A listing that fails (GitHub down, 401/403: the App's JWT refused) fails the pass with its
 * reason in the log and the state; nothing is asked and the next pass starts over. An ask that
 * GitHub could not take (no answer, 5xx, 403, 429) is taken back and ends the pass's asks; one it
 * refused for good (404, 422: e.g. past GitHub's redelivery window) counts.
 *
 * Every HTTP call has the GitHub client's connect and total timeouts; stopping (reconcile_stop)
 * waits for the call in flight at most. The period reads the clock of clock.h, so tests move time
 * instead of waiting.
 */
#ifndef CRCR_RECONCILE_H
#define CRCR_RECONCILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "github.h"
#include "store.h"

/* Asks for one guid over its life. */
#define RC_MAX_ASKS 3
/* An ask GitHub shows no attempt for after this long is made again. */
#define RC_ASK_STALE_MS (30LL * 60 * 1000)
/* Seconds a pass reads back past the previous pass's mark. */
#define RC_OVERLAP_S 900
/* Pages of the delivery log one pass reads at most (100 attempts each), and attempts of handled
 * events it keeps at most (the rest waits in the backlog). */
#define RC_MAX_PAGES 300
#define RC_MAX_ATTEMPTS 30000u
/* Items per page asked for (GitHub's maximum). */
#define RC_PER_PAGE 100

/* What a pass works with (borrowed for the call). */
typedef struct reconcile_deps {
    store *st;
    gh_client *gh;
    const crcr_config *cfg;  /* CRCR_RECONCILE_* */
    const char *owner;       /* this instance in the store's lease */
    const atomic_bool *stop; /* set: the pass ends at its next step (may be NULL) */
} reconcile_deps;

typedef struct reconcile_result {
    bool leader;       /* this instance held the lease and passed (not skipped) */
    bool ok;           /* the log was read and every ask GitHub was offered was taken */
    int pages;         /* pages of the log read */
    int attempts_read; /* attempts of handled events read */
    int guids;         /* distinct guids among them */
    int missing;       /* guids without a 2xx attempt that the store does not have */
    int asked;         /* redeliveries GitHub accepted (202) */
    int ask_failed;    /* asks GitHub did not accept */
    int held;        /* missing guids not asked: pending, past the per-pass cap, or asks stopped */
    int gave_up;     /* missing guids that have had RC_MAX_ASKS asks */
    bool partial;    /* a backlog is left for the next passes */
    char error[256]; /* why the pass failed ("" when ok) */
} reconcile_result;

/* One pass at `now` (ms); `startup`: the pass at start-up, never skipped for a recent pass of
 * another instance. See above. */
void reconcile_pass(const reconcile_deps *d, int64_t now, bool startup, reconcile_result *res);

/* The reconciler's thread. */
typedef struct reconciler reconciler;

/* Starts the thread: a pass at once, then every cfg->reconcile_s seconds. `d` is copied (its
 * pointers must outlive the reconciler, but for d->owner, copied; d->stop is replaced by the
 * reconciler's own). NULL with a reason when the thread cannot start. The caller owns the result
 * (reconcile_stop). */
reconciler *reconcile_start(const reconcile_deps *d, char *err, size_t errsz);
/* Stops the thread (after the HTTP call in flight, if any) and frees it. NULL is fine. */
void reconcile_stop(reconciler *r);

/* The reconciler's last recorded state, as every instance sees it (for /metrics). */
typedef struct reconcile_status {
    bool known;           /* a pass has recorded its state */
    int64_t last_ok_at;   /* ms: the last pass that read the log, 0 when none */
    int64_t last_pass_at; /* ms: the last pass, successful or not */
    int64_t missing;      /* missing guids the last successful pass found */
    int64_t asked;        /* redeliveries it asked for */
    bool partial;         /* a backlog of the log is still to be read */
    char last_error[256]; /* why the last pass failed, "" when it succeeded */
} reconcile_status;

/* Reads it from the store; CRCR_OK with known false when no pass has run. */
crcr_err reconcile_status_get(store *st, reconcile_status *out);

/* Whether the reconciler recovers webhooks of `event` with `action` (NULL: none): the events the
 * webhook route stores (§2 routing). Exposed for tests. */
bool reconcile_event_handled(const char *event, const char *action);

#endif
