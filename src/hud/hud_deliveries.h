/*
 * hud_deliveries.h - the deliveries pages: /crcr/deliveries and /api/v1/deliveries
 * (?state=, ?repo=, ?limit= up to 200), /crcr/deliveries/{id} and /api/v1/deliveries/{id} (the
 * delivery document's HUD view, delivery_doc.h).
 */
#ifndef CRCR_HUD_DELIVERIES_H
#define CRCR_HUD_DELIVERIES_H

#include "hud_model.h"

/* Answers the list of recent deliveries; 400 for a bad query argument. */
void hud_deliveries_list(hud_req *r);
/* Answers delivery `id`; 404 for a malformed or unknown id. */
void hud_delivery(hud_req *r, const char *id);

#endif
