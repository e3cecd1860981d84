/*
 * hud.h - the built-in HUD: server-rendered pages under /crcr and the same data as JSON under
 * /api/v1/ (§3.7, §3.8).
 */
#ifndef CRCR_HUD_H
#define CRCR_HUD_H

#include <stddef.h>

#include "http_server.h"

struct crcr_app;

/* Writes the HUD's routes (context: the app) into out[0..max) and returns how many. */
size_t hud_routes(struct crcr_app *app, http_route *out, size_t max);

#endif
