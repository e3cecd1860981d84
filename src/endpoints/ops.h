/*
 * ops.h - operator endpoints: Prometheus /metrics and the admin API /api/v1/admin/... (§3.10).
 * The delivery documents it serves are delivery_doc.h's (shared with `crcr deliveries` and the
 * HUD's delivery API).
 *
 * Routes (ops_routes):
 *   GET  /metrics                                       text format 0.0.4 (metrics.h), no auth
 *   GET  /api/v1/admin/deliveries?status=&repo=&pr=&limit=   {"deliveries":[...]}
 *   GET  /api/v1/admin/deliveries/{id}                  {"delivery":{...},"outbox":[...]}
 *   POST /api/v1/admin/deliveries/{id}/redeliver?repo=R {"ok":true,"delivery_id":..,"requeued":n}
 *        (422 when R is not on the allowlist in force, unless &force=1)
 *   GET  /api/v1/admin/trust                            {"pins":[...]} (trust.h)
 *   POST /api/v1/admin/trust/{owner}/{repo}/reset       {"ok":true,"reset":"owner/repo"}
 *   GET  /api/v1/admin/redeliveries?limit=&pending=1    {"redeliveries":[...]}: what the
 *        reconciler asked GitHub to redeliver (delivery_doc.h, ddoc_redeliveries_jv)
 * The admin routes exist only when CRCR_ADMIN_TOKEN is set (otherwise they answer 404 like any
 * unknown path) and require `Authorization: Bearer <CRCR_ADMIN_TOKEN>`, compared in constant
 * time (401 otherwise).
 */
#ifndef CRCR_OPS_H
#define CRCR_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "http_server.h"

struct crcr_app;

/* Writes the operator routes (context: the app) into out[0..max) and returns how many. */
size_t ops_routes(struct crcr_app *app, http_route *out, size_t max);

#endif
