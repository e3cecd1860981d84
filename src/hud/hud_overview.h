/*
 * hud_overview.h - the HUD's front page: /crcr (HTML) and /api/v1/repos (JSON), the repos by
 * level with their health over ?window= (default 7d), and the relay's own health.
 */
#ifndef CRCR_HUD_OVERVIEW_H
#define CRCR_HUD_OVERVIEW_H

#include "hud_model.h"

/* Answers the overview (r->api: JSON). */
void hud_overview(hud_req *r);

#endif
