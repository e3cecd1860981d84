/*
 * run_effects.h - what a run transition causes (§5.3, §3.7), built inside the transition's
 * transaction so that the effects are queued exactly when the state changes: a check run on the
 * upstream PR where one is wanted, and a forward to the external HUD (upstream's wire format).
 * Shared by callbacks (callback.c) and the sweeper's timeouts (sweeper.c); both go through the
 * outbox, so nothing here waits for GitHub or the HUD.
 *
 * Whether a check run is wanted is decided from the relay's own records (run_effects_check_wanted):
 * L4 always; L3 when the webhook the relay dispatched carried the device's ciflow/crcr label, or
 * a labeled event marked the sha. Never from a callback body.
 *
 * A check run created completed with failure, cancelled or timed_out on a PR also queues the
 * on-call comment (oncall.h, CRCR_ONCALL_COMMENTS) when the repo has on-calls in the allowlist: a
 * `comment` outbox row whose worker comments once per (PR, repo).
 */
#ifndef CRCR_RUN_EFFECTS_H
#define CRCR_RUN_EFFECTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "allowlist.h"
#include "buf.h"
#include "checks.h"
#include "config.h"
#include "crcr_limits.h"
#include "store.h"

/* Caps of a check run's request body and of an outbox ordering key. */
#define RUN_EFFECTS_CHECK_BODY_MAX (64u * 1024u)
#define RUN_EFFECTS_KEY_MAX (4u * CRCR_JOB_NAME_MAX + 256u)

/* What building effects needs from the relay. */
typedef struct run_effects_env {
    store *st;              /* the dispatched delivery and the L3 marks */
    const crcr_config *cfg; /* UPSTREAM_REPO, HUD_API_URL, CRCR_STATUS_TTL, CRCR_MAX_BODY,
                               CRCR_ONCALL_COMMENTS */
    const allowlist *al;    /* the on-calls; NULL: no on-call comment */
} run_effects_env;

/* The memory of one transition's effect bodies (owned by the caller: init, then free). */
typedef struct run_effect_bodies {
    buf_t check;      /* check-run request body */
    buf_t check_key;  /* its outbox ordering key */
    buf_t hud;        /* HUD forward body */
    buf_t hud_key;    /* its ordering key: one run's forwards go out in order */
    buf_t oncall;     /* on-call comment row body */
    buf_t oncall_key; /* its ordering key: one (PR, repo) at a time */
} run_effect_bodies;

/* Prepares the holders (sized for a callback body of `callback_len` bytes) / frees them. */
void run_effect_bodies_init(run_effect_bodies *b, size_t callback_len);
void run_effect_bodies_free(run_effect_bodies *b);

/* Appends the upstream HUD wire format {"trusted":{"ci_metrics":{"queue_time":..,
 * "execution_time":..},"verified_repo":..,"downstream_repo_level":..},"untrusted":
 * {"callback_payload":<callback_json verbatim>}}. Metrics in ms, -1 for null. */
crcr_err run_effects_hud_body(buf_t *out, const char *repo, crcr_level level, int64_t queue_ms,
                              int64_t exec_ms, const char *callback_json, size_t callback_len);

/* Fills jobs[0..*n) (at most `max`): a check run when `check` is not NULL, the on-call comment
 * it may cause (run_effects_oncall_job), a HUD forward when HUD_API_URL is set. Their bodies live
 * in `bodies`. */
crcr_err run_effects_build(const run_effects_env *env, const checks_run *check,
                           const store_run_key *key, crcr_level level, int64_t queue_ms,
                           int64_t exec_ms, const char *callback_json, size_t callback_len,
                           run_effect_bodies *bodies, store_new_job *jobs, size_t max, size_t *n);

/* The check-run row of `check` on the upstream PR (its body from checks_body, its ordering key
 * from checks_seq_key, due now): fills *job, whose body and key live in `body` (cap
 * RUN_EFFECTS_CHECK_BODY_MAX) and `key` (cap RUN_EFFECTS_KEY_MAX), both emptied first. The one
 * builder of check-run rows: run_effects_build and the label back-fill (webhook.c). */
crcr_err run_effects_check_job(const crcr_config *cfg, const checks_run *check, buf_t *body,
                               buf_t *key, store_new_job *job);

/* The on-call comment row of the check run `check`, when CRCR_ONCALL_COMMENTS is on, `check` is
 * completed with failure, cancelled or timed_out on a PR (pr_number > 0), and its repo has
 * on-calls in `al` that are valid handles: fills *job, whose body and key live in `body` (cap
 * ONCALL_ROW_MAX) and `key` (cap ONCALL_KEY_MAX), both emptied first, and returns true. Used by
 * run_effects_build and by the label back-fill (webhook.c). */
bool run_effects_oncall_job(const crcr_config *cfg, const allowlist *al, const checks_run *check,
                            buf_t *body, buf_t *key, store_new_job *job);

/* Whether a run of `repo` (at `level` now) on the dispatched delivery `delivery_id`, head sha
 * `head_sha`, gets a check run on the upstream PR (see above). `dispatch` is the delivery's
 * dispatch record to `repo` with its payload when the caller has read it (a callback reads it
 * once, with the payload at L3, the only level whose answer depends on the labels); NULL: it is
 * read here when needed (the sweeper). */
bool run_effects_check_wanted(const run_effects_env *env, const allowlist *al, const char *repo,
                              crcr_level level, const char *delivery_id, const char *head_sha,
                              const store_dispatch *dispatch);

#endif
