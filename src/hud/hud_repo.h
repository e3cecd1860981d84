/*
 * hud_repo.h - the repo page: /crcr/{org}/{repo} (HTML) and /api/v1/repos/{org}/{repo}/runs
 * (JSON), the PR x job matrix with ?page=N (25 rows a page), ?tab=pr|nightly and ?window=.
 */
#ifndef CRCR_HUD_REPO_H
#define CRCR_HUD_REPO_H

#include "hud_model.h"

/* Answers the page of `rest`: "org/repo" (HTML), "org/repo/runs" or "org/repo" (API). 404 for a
 * repo that is neither allowlisted nor has runs, 400 for a bad query argument. */
void hud_repo(hud_req *r, const char *rest);

#endif
