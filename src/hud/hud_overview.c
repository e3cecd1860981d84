/*
 * hud_overview.c - the HUD's front page and its API: repos by level with their health, and the
 * relay's own health (outbox backlog, dead rows, last webhook, allowlist, mode); see
 * hud_overview.h.
 */
#include "hud_overview.h"

#include <stdio.h>
#include <string.h>

#include "allowlist_source.h"
#include "clock.h"
#include "html.h"
#include "metrics.h"
#include "hud_html.h"

typedef struct relay_health {
    store_outbox_stats ob;
    bool ob_ok;
    int64_t last_webhook_at;
    allowlist_status as;
    bool dry_run;
    int64_t started_at;
    uint64_t webhooks_accepted, callbacks_accepted, callbacks_rejected;
} relay_health;

static int latest_delivery(void *ctx, const store_delivery_row *r)
{
    *(int64_t *)ctx = r->received_at;
    return 1;
}

static void relay_health_get(crcr_app *app, relay_health *h)
{
    memset(h, 0, sizeof(*h));
    h->ob_ok = store_outbox_stats_get(app->st, &h->ob) == CRCR_OK;
    h->last_webhook_at = atomic_load(&app->last_webhook_at);
    if (!h->last_webhook_at) {
        /* Before this process saw one: the newest stored delivery. */
        store_filter f = {.limit = 1};
        store_list_deliveries(app->st, &f, latest_delivery, &h->last_webhook_at);
    }
    allowlist_source_status(app->allow, &h->as);
    h->dry_run = app->cfg.dry_run;
    h->started_at = app->started_at;
    h->webhooks_accepted = metrics_webhook_total("accepted");
    h->callbacks_accepted = metrics_callback_total("accepted");
    h->callbacks_rejected = metrics_callback_total("rejected");
}

static void jw_relay(jw *w, const relay_health *h)
{
    jw_obj(w);
    jw_key(w, "outbox");
    if (h->ob_ok) {
        jw_obj(w);
        jw_kint(w, "backlog", h->ob.queued + h->ob.running);
        jw_kint(w, ob_state_name(OB_STATE_QUEUED), h->ob.queued);
        jw_kint(w, ob_state_name(OB_STATE_RUNNING), h->ob.running);
        jw_kint(w, ob_state_name(OB_STATE_SENT), h->ob.sent);
        jw_kint(w, ob_state_name(OB_STATE_DRY_RUN), h->ob.dry_run);
        jw_kint(w, ob_state_name(OB_STATE_DEAD), h->ob.dead);
        jw_kint(w, ob_state_name(OB_STATE_WITHDRAWN), h->ob.withdrawn);
        jw_ktime(w, "oldest_due_at", h->ob.oldest_due);
        jw_obj_end(w);
    } else {
        jw_null(w);
    }
    jw_ktime(w, "last_webhook_at", h->last_webhook_at);
    jw_key(w, "allowlist");
    jw_obj(w);
    jw_kbool(w, "loaded", h->as.loaded);
    jw_kstr(w, "source", h->as.source);
    jw_ktime(w, "loaded_at", h->as.loaded_at);
    jw_kint(w, "repos", (int64_t)h->as.repos);
    jw_key(w, "last_error");
    jw_str(w, h->as.last_error[0] ? h->as.last_error : NULL);
    jw_obj_end(w);
    jw_kbool(w, "dry_run", h->dry_run); /* vocab-ok: the relay's dry-run mode, not a row state */
    jw_ktime(w, "started_at", h->started_at);
    jw_obj_end(w);
}

static void h_relay(hout *o, const relay_health *h, int64_t now)
{
    h_raw(o, "<section id=\"relay\"><h2>Relay health</h2><div class=\"cards\">");
    h_card(o, "relay-backlog", "Outbox backlog");
    if (h->ob_ok) {
        h_rawf(o, "<div class=\"v\">%lld</div><div class=\"s\">%lld queued, %lld sending",
               (long long)(h->ob.queued + h->ob.running), (long long)h->ob.queued,
               (long long)h->ob.running);
        if (h->ob.oldest_due) {
            h_raw(o, "; oldest due ");
            h_ago(o, h->ob.oldest_due, now);
        }
        h_raw(o, "</div>");
    } else {
        h_raw(o, "<div class=\"v err\">store unavailable</div>");
    }
    h_raw(o, "</div>");
    h_card(o, "relay-dead", "Dead rows");
    h_rawf(o,
           "<div class=\"v%s\"><a href=\"/crcr/deliveries?state=dead\">%lld</a></div>"
           "<div class=\"s\">gave up or refused; redeliverable</div></div>",
           h->ob.dead > 0 ? " err" : "", (long long)h->ob.dead);
    h_card(o, "relay-webhook", "Last webhook");
    h_raw(o, "<div class=\"v\">");
    h_ago(o, h->last_webhook_at, now);
    h_raw(o, "</div><div class=\"s\">");
    char t[48];
    html_time(h->last_webhook_at, t, sizeof(t));
    h_text(o, t);
    h_raw(o, "</div></div>");
    h_card(o, "relay-allowlist", "Allowlist");
    if (h->as.loaded) {
        h_rawf(o, "<div class=\"v\">%zu repos</div><div class=\"s\">loaded ", h->as.repos);
        h_ago(o, h->as.loaded_at, now);
        h_raw(o, " from <span class=\"mono\">");
        h_text(o, h->as.source);
        h_raw(o, "</span>");
    } else {
        h_raw(o, "<div class=\"v err\">not loaded</div><div class=\"s\">");
        h_text(o, h->as.source);
    }
    if (h->as.last_error[0]) {
        h_raw(o, "<br><span class=\"err\">last refresh failed: ");
        h_text(o, h->as.last_error);
        h_raw(o, "</span>");
    }
    h_raw(o, "</div></div>");
    h_card(o, "relay-mode", "Mode");
    h_raw(o, h->dry_run ? "<div class=\"v\">dry-run</div><div class=\"s\">outbound calls are "
                          "recorded, not sent</div></div>"
                        : "<div class=\"v\">GitHub App</div><div class=\"s\">dispatching</div>"
                          "</div>");
    h_raw(o, "</div></section>");
}

static const char *level_note(crcr_level l)
{
    switch (l) {
    case CRCR_LEVEL_L4:
        return "results block merges; check runs always";
    case CRCR_LEVEL_L3:
        return "check runs with the ciflow/crcr/&lt;device&gt; label";
    case CRCR_LEVEL_L2:
        return "results on the HUD";
    default:
        return "events forwarded; no results reported";
    }
}

void hud_overview(hud_req *r)
{
    int64_t window;
    if (hud_query_window(r->req, &window) != 0) {
        hud_answer_error(r, 400, "window: expected e.g. 7d, 36h or 90m, between 1h and 90d");
        return;
    }
    health_report rep;
    crcr_err e = hud_build_report(r, NULL, window, &rep);
    if (e) {
        hud_answer_out(r, e);
        return;
    }
    relay_health rh;
    relay_health_get(r->app, &rh);
    if (r->api) {
        jw w;
        jw_init(&w, &r->out);
        jw_obj(&w);
        jw_ktime(&w, "generated_at", r->now);
        jw_kint(&w, "window_s", window / 1000);
        jw_kstr(&w, "upstream_repo", r->app->cfg.upstream_repo);
        jw_key(&w, "relay");
        jw_relay(&w, &rh);
        jw_key(&w, "repos");
        jw_arr(&w);
        for (size_t i = 0; i < rep.n && !w.err; i++) {
            jw_value_begin(&w);
            if (!w.err)
                w.err = health_entry_json(&rep.entries[i], &r->out);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
        health_report_free(&rep);
        hud_answer_out(r, w.err);
        return;
    }
    hout o;
    hout_init(&o, &r->out);
    char win[24], since[48];
    health_window_label(window, win, sizeof(win));
    html_time(rep.since, since, sizeof(since));
    h_page_begin(&o, "Downstream CI", "repos");
    h_raw(&o, "<h1>Downstream CI of ");
    h_text(&o, r->app->cfg.upstream_repo);
    h_raw(&o, "</h1><p class=\"muted\">Results over the last ");
    h_text(&o, win);
    h_raw(&o, " (since ");
    h_text(&o, since);
    h_raw(&o, "). Health compares each repo with its level's requirements; hover a badge for "
              "the reason. <a href=\"/api/v1/repos\">JSON</a></p>");
    h_relay(&o, &rh, r->now);
    for (int lvl = CRCR_LEVEL_L4; lvl >= CRCR_LEVEL_L1; lvl--) {
        size_t count = 0;
        for (size_t i = 0; i < rep.n; i++)
            count += (int)rep.entries[i].level == lvl;
        h_rawf(&o,
               "<section class=\"level\" id=\"level-L%d\"><h2>L%d <small>%s</small> "
               "<small class=\"count\">(%zu repo%s)</small></h2>",
               lvl, lvl, level_note((crcr_level)lvl), count, count == 1 ? "" : "s");
        if (!count) {
            h_raw(&o, "<p class=\"muted\">No repos at this level.</p></section>");
            continue;
        }
        h_raw(&o, "<div class=\"scroll\"><table class=\"repos\"><thead><tr><th>Repo</th>"
                  "<th class=\"num\">Runs</th><th class=\"num\">Success</th>"
                  "<th class=\"num\">Timed out</th><th class=\"num hide-sm\">Queue p50</th>"
                  "<th class=\"num hide-sm\">Exec p50</th><th class=\"hide-sm\">Last run</th>"
                  "<th>Health</th>"
                  "</tr></thead><tbody>");
        for (size_t i = 0; i < rep.n; i++) {
            const health_entry *en = &rep.entries[i];
            if ((int)en->level != lvl)
                continue;
            const health_stats *s = &en->stats;
            h_raw(&o, "<tr data-repo=\"");
            h_text(&o, en->repo);
            h_rawf(&o, "\" data-health=\"%s\"><td class=\"repo\">",
                   health_status_name(en->verdict.status));
            h_repo_link(&o, en->repo);
            if (en->device[0]) {
                h_raw(&o, " <span class=\"muted\">");
                h_text(&o, en->device);
                h_raw(&o, "</span>");
            }
            h_rawf(&o, "</td><td class=\"num runs\">%lld</td><td class=\"num success\">",
                   (long long)s->runs);
            h_pct(&o, s->success_pct);
            h_raw(&o, "</td><td class=\"num timed-out\">");
            h_pct(&o, s->timeout_pct);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_dur(&o, s->queue_p50_ms);
            h_raw(&o, "</td><td class=\"num hide-sm\">");
            h_dur(&o, s->exec_p50_ms);
            h_raw(&o, "</td><td class=\"hide-sm last-run\">");
            h_ago(&o, s->last_run_at, r->now);
            h_raw(&o, "</td><td>");
            h_health_badge(&o, en);
            h_raw(&o, "</td></tr>");
        }
        h_raw(&o, "</tbody></table></div></section>");
    }
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    health_report_free(&rep);
    hud_answer_out(r, o.err);
}
