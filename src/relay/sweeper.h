/*
 * sweeper.h - periodic work (§5.6): zombie runs, retention.
 *
 * A run still IN_PROGRESS ZOMBIE_TIMEOUT_SECONDS after it started is completed as `timed_out`
 * (through the same atomic transition as a callback, so a late real callback cannot double it),
 * with a timed_out check run where one is wanted (L3 with the label, L4) and a HUD forward whose
 * callback payload says status completed / conclusion timed_out, as the upstream sweeper does.
 * A run a newer dispatch ended (§3.12) is never timed out: it is no zombie, and the timeout
 * applies only over a run still open (store_run_update.only_open).
 * Deliveries, runs and marks older than CRCR_RETENTION_SECONDS are deleted. When several
 * instances share a store, only the holder of the store lease "sweeper" works.
 */
#ifndef CRCR_SWEEPER_H
#define CRCR_SWEEPER_H

#include <stdbool.h>
#include <stdint.h>

#include "allowlist_source.h"
#include "config.h"
#include "outbox.h"
#include "store.h"

/* What a sweep works on (borrowed for the call). */
typedef struct sweeper_deps {
    store *st;
    allowlist_source *allow; /* the current allowlist: levels decide timed_out check runs */
    outbox *ob;              /* woken when a sweep queued work; may be NULL */
    const crcr_config *cfg;  /* ZOMBIE_TIMEOUT_SECONDS, CRCR_RETENTION_SECONDS, ... */
} sweeper_deps;

typedef struct sweeper_result {
    int cleaned; /* zombies completed as timed_out */
    int errors;  /* zombies that could not be completed (retried next sweep) */
    int deleted; /* deliveries removed by retention */
    bool leader; /* this instance held the lease */
} sweeper_result;

/* One sweep at `now` (ms). `owner` names this instance for the lease. */
void sweeper_run(const sweeper_deps *d, const char *owner, int64_t now, sweeper_result *res);

#endif
