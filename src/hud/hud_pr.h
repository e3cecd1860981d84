/*
 * hud_pr.h - the PR page: /crcr/pr/{n} (HTML) and /api/v1/pr/{n} (JSON), every downstream result
 * of one PR per head sha; and /api/v1/pr/{n}/blocking?sha=SHA, the L4 repos whose latest result
 * for the sha failed or is still running (upstream §2.5: cancelled and timed_out do not block).
 */
#ifndef CRCR_HUD_PR_H
#define CRCR_HUD_PR_H

#include "hud_model.h"

/* Answers the page of `rest`: "{n}", or "{n}/blocking" (API only). 404 for anything else. */
void hud_pr(hud_req *r, const char *rest);

#endif
