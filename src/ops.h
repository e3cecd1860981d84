/*
 * ops.h - operator endpoints: Prometheus /metrics and the admin API /api/v1/admin/... (§3.10).
 */
#ifndef CRCR_OPS_H
#define CRCR_OPS_H

#include <stddef.h>

#include "http_server.h"

struct crcr_app;

/* Writes the operator routes (context: the app) into out[0..max) and returns how many. */
size_t ops_routes(struct crcr_app *app, http_route *out, size_t max);

#endif
