/*
 * html.h - output helpers of the HUD and of `crcr health`: HTML escaping and links, the page
 * shell, inline SVG charts, and time and duration text. (The API's JSON writer is jw.h.)
 *
 * Security rules (§8): every string that did not come from this program's own source is written
 * through h_text() (HTML-escaped: & < > " ' become entities), also inside attributes; a link is
 * written only for an https:// URL without spaces or control characters (anything else is shown
 * as text); CSS classes derived from stored data go through a fixed mapping, never the raw value
 * (outcome.h holds the tables of runs and outbox rows).
 * Pages carry HTML_CSP, so no inline script or style can run even if a bug let markup through.
 *
 * Writers are sticky: after the first error (buffer cap, memory) every further call does
 * nothing and the error stays in `err`, so a page is built without checking each append.
 */
#ifndef CRCR_HTML_H
#define CRCR_HTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"

/* Sent with every HTML page. */
#define HTML_CSP "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'"
/* Longest URL rendered as a link (longer ones are shown as text). */
#define HTML_URL_MAX 2048u

/* ---- HTML ---- */

typedef struct hout {
    buf_t *b;
    crcr_err err;
} hout;

void hout_init(hout *o, buf_t *b);
/* Trusted markup from this program (never data). */
void h_raw(hout *o, const char *markup);
void h_rawf(hout *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Text or attribute value, escaped; NULL writes nothing. */
void h_text(hout *o, const char *s);
void h_textn(hout *o, const char *s, size_t n);
/* Percent-encodes `s` for a URL path segment or query value (unreserved characters kept), the
 * result being safe inside an attribute as well. */
void h_url_part(hout *o, const char *s);
/* `<a href=url class=cls>text</a>` when html_url_ok(url), else the escaped text (or the URL as
 * text when `text` is NULL). `cls` is trusted (may be NULL). External links get
 * rel="noopener noreferrer nofollow". */
void h_link(hout *o, const char *url, const char *text, const char *cls);

/* True for "https://" followed by at least one character, at most HTML_URL_MAX bytes, with no
 * whitespace, control characters or backslash. */
bool html_url_ok(const char *url);

/* Appends escaped `s` to a plain buffer (for callers without an hout). */
crcr_err html_escape(buf_t *b, const char *s);

/* "-" for ms < 0; "350ms", "45s", "3m 20s", "1h 02m", "2d 03h". */
void html_duration(int64_t ms, char *out, size_t n);
/* "2026-11-30 01:02 UTC"; "-" for 0. */
void html_time(int64_t ms, char *out, size_t n);
/* "just now", "5 min ago", "3 h ago", "2 d ago", or "in 4 min" for the future; "never" for 0. */
void html_ago(int64_t then_ms, int64_t now_ms, char *out, size_t n);

/* Starts a page: doctype, head (title, stylesheet, blank icon), the navigation bar with
 * `active` ("repos", "deliveries" or NULL) marked. `title` is escaped. */
void h_page_begin(hout *o, const char *title, const char *active);
/* Ends a page with a footer stating the generation time and how long rendering took. */
void h_page_end(hout *o, int64_t now_ms, int64_t render_ms);

/* The stylesheet served at /crcr/static/style.css. */
extern const char HTML_STYLESHEET[];

/* ---- SVG charts ---- */

typedef struct html_chart {
    const char *title;     /* caption and aria-label (escaped) */
    const char *unit;      /* "%" or "s" (trusted) */
    const double *values;  /* n values */
    const bool *has;       /* n flags: false = no data in that bucket */
    const int64_t *starts; /* n bucket starts, ms (for labels) */
    int64_t end;           /* end of the last bucket, ms (the right-hand label); 0: its start */
    size_t n;
    double ymax;           /* 0: from the data */
    const char *css_class; /* trusted */
} html_chart;

/* Inline <svg> line chart with a 0 baseline, a top gridline labelled with ymax, first and last
 * bucket dates, and a <title> tooltip per point. Writes a "no data" note when nothing is set. */
void h_chart(hout *o, const html_chart *c);

#endif
