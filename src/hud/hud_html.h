/*
 * hud_html.h - HTML pieces shared by the HUD's pages: run chips and labels, durations, times
 * and percentages, health badges, repository links, cards, outbox states, dispatch targets and
 * delivery rows. Data goes through h_text / h_url_part (html.h); classes come from html.h's
 * fixed tables.
 */
#ifndef CRCR_HUD_HTML_H
#define CRCR_HUD_HTML_H

#include <stdint.h>

#include "delivery_doc.h"
#include "health.h"
#include "html.h"
#include "hud_model.h"

/* "workflow / job", or the workflow alone when the job has no name. */
void h_job_label(hout *o, const hrun *r);
/* The run's chip: a link to the downstream run when its URL is https; " x N" for `attempts` > 1. */
void h_chip(hout *o, const hrun *r, int attempts);
/* A duration (html_duration); a time as html_ago says it, the full time as its tooltip; a
 * percentage as "12.3%" ("-" below 0). */
void h_dur(hout *o, int64_t ms);
void h_ago(hout *o, int64_t ms, int64_t now);
void h_pct(hout *o, double v);
/* The entry's health as a badge, the verdict's reason as its tooltip. */
void h_health_badge(hout *o, const health_entry *e);
/* A link to the repo's page, its name as the text. */
void h_repo_link(hout *o, const char *repo);
/* Opens a card (closed by the caller with "</div>"): `id` and `key` are trusted. */
void h_card(hout *o, const char *id, const char *key);
/* The state of an outbox row as a small labelled badge. */
void h_state(hout *o, const ddoc_job *j);
/* A dispatch row's Depends-On pair (" with o/r#N @ sha7", or why it was not tested) and its end
 * by a newer dispatch (" superseded by <delivery>", " ended: PR closed"), for dispatch rows that
 * have them (§3.12, §3.13). */
void h_dep(hout *o, const ddoc_job *j);
void h_ended(hout *o, const ddoc_job *j);
/* Every dispatch target as a small pill coloured by its state; targets that are not simply sent
 * say their state and why (dead) or when (retrying). */
void h_dispatch_targets(hout *o, const ddoc_delivery *d, int64_t now);
/* The first cells of a delivery's table row: when it was received, a link to its page, "event /
 * action"; then opens the next cell. */
void h_delivery_cells(hout *o, const ddoc_delivery *d, int64_t now);

#endif
