/*
 * ops.h - operator endpoints: Prometheus /metrics and the admin API /api/v1/admin/... (§3.10),
 * plus the delivery documents that the admin API and `crcr deliveries` share.
 *
 * Routes (ops_routes):
 *   GET  /metrics                                       text format 0.0.4 (metrics.h), no auth
 *   GET  /api/v1/admin/deliveries?status=&repo=&pr=&limit=   {"deliveries":[...]}
 *   GET  /api/v1/admin/deliveries/{id}                  {"delivery":{...},"outbox":[...]}
 *   POST /api/v1/admin/deliveries/{id}/redeliver?repo=R {"ok":true,"delivery_id":..,"requeued":n}
 *        (422 when R is not on the allowlist in force, unless &force=1)
 *   GET  /api/v1/admin/trust                            {"pins":[...]} (trust.h)
 *   POST /api/v1/admin/trust/{owner}/{repo}/reset       {"ok":true,"reset":"owner/repo"}
 * The admin routes exist only when CRCR_ADMIN_TOKEN is set (otherwise they answer 404 like any
 * unknown path) and require `Authorization: Bearer <CRCR_ADMIN_TOKEN>`, compared in constant
 * time (401 otherwise).
 */
#ifndef CRCR_OPS_H
#define CRCR_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "http_server.h"
#include "json.h"
#include "store.h"

struct crcr_app;

/* Largest `limit` of a delivery listing (admin API and CLI). */
#define OPS_LIST_MAX 10000

/* Writes the operator routes (context: the app) into out[0..max) and returns how many. */
size_t ops_routes(struct crcr_app *app, http_route *out, size_t max);

/* Builds {"delivery":{...},"outbox":[{...,"body":..}]} for delivery `id`; *out receives a new
 * reference (caller frees with jv_free). A dry-run dispatch row's body (not stored) is rebuilt
 * with `cfg`'s secret and budget (cfg NULL: shown as null). CRCR_E_NOT_FOUND for an unknown id,
 * CRCR_E_NOMEM or the store's error otherwise (then *out is NULL). */
crcr_err ops_delivery_doc(store *st, const crcr_config *cfg, const char *id, jv **out);

/* Builds the array of deliveries matching `f`, newest first; *out receives a new reference. */
crcr_err ops_delivery_list(store *st, const store_filter *f, jv **out);

/* True for a plausible delivery id: 1 to CRCR_DELIVERY_ID_MAX-1 of [A-Za-z0-9-_.:]. */
bool ops_delivery_id_valid(const char *id);

/* True for an outbox state a listing may filter on (queued|running|sent|dry_run|dead). */
bool ops_state_valid(const char *state);

#endif
