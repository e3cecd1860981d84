/*
 * hud_deliveries.c - the deliveries pages: recent webhooks with each downstream target's
 * dispatch state (filtered by outbox state and target repo), a delivery that the reconciler
 * recovered marked `recovered`, the reconciler's asks still waiting for GitHub, and one delivery
 * with its outbox rows. Bodies and payloads are never shown; see hud_deliveries.h.
 */
#include "hud_deliveries.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "html.h"
#include "hud_html.h"
#include "ids.h"
#include "crcr_limits.h"

/* The reconciler's asks still waiting for GitHub shown under the list. */
#define HUD_REDELIVERIES_SHOWN 20

/* Deliveries listed by /crcr/deliveries (?limit=). */
#define HUD_DELIVERIES_DEFAULT 50
#define HUD_DELIVERIES_MAX 200

/* A reconciler ask whose delivery has not arrived, copied into the request's arena. */
typedef struct pending_ask {
    const char *guid, *event, *action, *result;
    int asks;
    long status;
    int64_t asked_at;
} pending_ask;

typedef struct pending_list {
    arena *a;
    pending_ask v[HUD_REDELIVERIES_SHOWN];
    size_t n;
} pending_list;

static void collect_pending(void *ctx, const store_redelivery_row *r)
{
    pending_list *l = ctx;
    if (l->n >= HUD_REDELIVERIES_SHOWN)
        return;
    l->v[l->n++] = (pending_ask){.guid = arena_dup(l->a, r->guid),
                                 .event = arena_dup(l->a, r->event),
                                 .action = arena_dup(l->a, r->action),
                                 .result = arena_dup(l->a, r->last_result),
                                 .asks = r->attempts,
                                 .status = r->last_status,
                                 .asked_at = r->last_asked_at};
}

/* The reconciler's asks whose delivery has not arrived (none in dry-run: it asks nothing). */
static void pending_table(hout *o, const pending_list *pl, int64_t now)
{
    if (!pl->n)
        return;
    h_raw(o, "<h2>Asked GitHub to redeliver</h2><p class=\"muted\">Webhooks GitHub failed to "
             "deliver (the relay was down, answered 5xx or too late) that the reconciler asked "
             "for again and that have not arrived yet; at most 3 asks each. "
             "<code>crcr deliveries list --recovered</code> lists every ask.</p>");
    h_raw(o, "<div class=\"scroll\"><table class=\"redeliveries\"><thead><tr><th>Asked</th>"
             "<th>Delivery</th><th>Event</th><th class=\"num\">Asks</th><th>Result</th></tr>"
             "</thead><tbody>");
    for (size_t i = 0; i < pl->n; i++) {
        const pending_ask *p = &pl->v[i];
        h_raw(o, "<tr data-guid=\"");
        h_text(o, p->guid);
        h_raw(o, "\"><td>");
        h_ago(o, p->asked_at, now);
        h_raw(o, "</td><td class=\"mono\">");
        h_text(o, p->guid);
        h_raw(o, "</td><td>");
        h_text(o, p->event);
        if (p->action) {
            h_raw(o, " / ");
            h_text(o, p->action);
        }
        h_rawf(o, "</td><td class=\"num\">%d</td><td>", p->asks);
        if (!p->result)
            h_raw(o, "asking");
        else if (p->status == 202)
            h_raw(o, "accepted, not arrived yet");
        else
            h_text(o, p->result);
        h_raw(o, "</td></tr>");
    }
    h_raw(o, "</tbody></table></div>");
}

/* The list and every delivery's jobs are freed before it returns; strings are the arena's. */
void hud_deliveries_list(hud_req *r)
{
    const char *state = http_req_query(r->req, "state");
    const char *repo_q = http_req_query(r->req, "repo");
    char repo[CRCR_REPO_NAME_MAX] = "";
    if (state && !*state)
        state = NULL;
    crcr_ob_state want = ob_state_parse(state);
    if (state && want == OB_STATE_UNKNOWN) {
        hud_answer_error(r, 400, "state: expected queued, running, sent, dry_run or dead");
        return;
    }
    if (repo_q && *repo_q && !hud_parse_repo(repo_q, strlen(repo_q), repo, sizeof(repo))) {
        hud_answer_error(r, 400, "repo: expected owner/repo");
        return;
    }
    long limit;
    if (hud_query_int(r->req, "limit", 1, HUD_DELIVERIES_MAX, HUD_DELIVERIES_DEFAULT, &limit) !=
        0) {
        hud_answer_error(r, 400, "limit: expected an integer from 1 to 200");
        return;
    }
    delivery_list dl = {.a = &r->a};
    store_filter f = {.state = state, .repo = repo[0] ? repo : NULL, .limit = (int)limit};
    crcr_err e = store_list_deliveries(r->app->st, &f, hud_collect_delivery, &dl);
    if (!e && (dl.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (!e)
        e = hud_load_jobs(r->app->st, &r->a, dl.v, dl.n);
    if (e) {
        hud_free_deliveries(dl.v, dl.n);
        hud_answer_out(r, e);
        return;
    }
    if (r->api) {
        jw w;
        jw_init(&w, &r->out);
        jw_obj(&w);
        jw_kstr(&w, "state", state);
        jw_kstr(&w, "repo", repo[0] ? repo : NULL);
        jw_kint(&w, "limit", limit);
        jw_key(&w, "deliveries");
        jw_arr(&w);
        for (size_t i = 0; i < dl.n; i++)
            ddoc_write(&w, &dl.v[i], DDOC_HUD);
        jw_arr_end(&w);
        jw_obj_end(&w);
        hud_free_deliveries(dl.v, dl.n);
        hud_answer_out(r, w.err);
        return;
    }
    pending_list pl = {.a = &r->a};
    /* Best effort: the list is what the page is for. */
    store_redelivery_list(r->app->st, HUD_REDELIVERIES_SHOWN, true, collect_pending, &pl);
    hout o;
    hout_init(&o, &r->out);
    h_page_begin(&o, "Deliveries", "deliveries");
    h_raw(&o, "<h1>Deliveries</h1><p class=\"muted\">Webhooks received from upstream, newest "
              "first, with each downstream target's dispatch state. "
              "<a href=\"/api/v1/deliveries\">JSON</a></p>");
    h_raw(&o, "<form class=\"filters\" method=\"get\" action=\"/crcr/deliveries\"><label>State"
              "<select name=\"state\"><option value=\"\">any</option>");
    for (int s = OB_STATE_UNKNOWN + 1; s < OB_STATE_COUNT; s++)
        h_rawf(&o, "<option value=\"%s\"%s>%s</option>", ob_state_name((crcr_ob_state)s),
               s == (int)want ? " selected" : "", ob_state_name((crcr_ob_state)s));
    h_raw(&o, "</select></label><label>Repo<input name=\"repo\" placeholder=\"owner/repo\" "
              "value=\"");
    h_text(&o, repo);
    h_rawf(&o,
           "\"></label><label>Limit<input name=\"limit\" type=\"number\" min=\"1\" "
           "max=\"%d\" value=\"%ld\"></label><button type=\"submit\">Filter</button></form>",
           HUD_DELIVERIES_MAX, limit);
    h_raw(&o, "<div class=\"scroll\"><table class=\"deliveries\"><thead><tr><th>Received</th>"
              "<th>Delivery</th><th>Event</th><th>PR / ref</th><th>Targets</th></tr></thead>"
              "<tbody>");
    for (size_t i = 0; i < dl.n; i++) {
        const ddoc_delivery *d = &dl.v[i];
        h_raw(&o, "<tr data-delivery=\"");
        h_text(&o, d->delivery_id);
        h_raw(&o, "\">");
        h_delivery_cells(&o, d, r->now);
        if (d->pr_number > 0)
            h_rawf(&o, "<a href=\"/crcr/pr/%lld\">#%lld</a>", (long long)d->pr_number,
                   (long long)d->pr_number);
        else
            h_text(&o, d->ref);
        h_raw(&o, " <span class=\"mono muted\">");
        h_textn(&o, d->head_sha ? d->head_sha : "", 7);
        h_raw(&o, "</span></td><td>");
        h_dispatch_targets(&o, d, r->now);
        h_raw(&o, "</td></tr>");
    }
    if (!dl.n)
        h_raw(&o, "<tr><td colspan=\"5\" class=\"muted\">No deliveries match.</td></tr>");
    h_raw(&o, "</tbody></table></div>");
    pending_table(&o, &pl, r->now);
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    hud_free_deliveries(dl.v, dl.n);
    hud_answer_out(r, o.err);
}

/* The delivery's jobs are freed before it returns; strings are the arena's. */
void hud_delivery(hud_req *r, const char *id)
{
    if (!ids_delivery_valid(id)) {
        hud_answer_error(r, 404, "Not found");
        return;
    }
    ddoc_delivery d;
    memset(&d, 0, sizeof(d));
    job_ctx c = {&d, &r->a, false};
    crcr_err e = store_get_delivery(r->app->st, id, hud_copy_detail_delivery, hud_collect_job, &c);
    if (e == CRCR_E_NOT_FOUND) {
        hud_answer_error(r, 404, "Not found: unknown delivery (or past retention)");
        return;
    }
    if (!e && (c.oom || r->a.oom))
        e = CRCR_E_NOMEM;
    if (e) {
        free(d.jobs);
        hud_answer_out(r, e);
        return;
    }
    if (r->api) {
        jw w;
        jw_init(&w, &r->out);
        ddoc_write(&w, &d, DDOC_HUD);
        free(d.jobs);
        hud_answer_out(r, w.err);
        return;
    }
    hout o;
    hout_init(&o, &r->out);
    h_page_begin(&o, "Delivery", "deliveries");
    h_raw(&o, "<h1>Delivery <code>");
    h_text(&o, d.delivery_id);
    h_raw(&o, "</code></h1><div class=\"cards\">");
    h_card(&o, "d-event", "Event");
    h_raw(&o, "<div class=\"v\">");
    h_text(&o, d.event);
    h_raw(&o, "</div><div class=\"s\">");
    h_text(&o, d.action ? d.action : "-");
    h_raw(&o, "</div></div>");
    h_card(&o, "d-pr", d.pr_number > 0 ? "Pull request" : "Ref");
    h_raw(&o, "<div class=\"v\">");
    if (d.pr_number > 0)
        h_rawf(&o, "<a href=\"/crcr/pr/%lld\">#%lld</a>", (long long)d.pr_number,
               (long long)d.pr_number);
    else
        h_text(&o, d.ref ? d.ref : "-");
    h_raw(&o, "</div><div class=\"s mono\">");
    h_text(&o, d.head_sha);
    h_raw(&o, "</div></div>");
    h_card(&o, "d-received", "Received");
    h_raw(&o, "<div class=\"v\">");
    h_ago(&o, d.received_at, r->now);
    h_raw(&o, "</div><div class=\"s\">");
    char t[48];
    html_time(d.received_at, t, sizeof(t));
    h_text(&o, t);
    h_raw(&o, "</div></div>");
    if (d.redelivery_asks > 0) {
        h_card(&o, "d-recovered", "Recovered");
        h_rawf(&o,
               "<div class=\"v\">after %d ask%s</div><div class=\"s\">GitHub had failed "
               "to deliver it; the reconciler asked for it again</div></div>",
               d.redelivery_asks, d.redelivery_asks == 1 ? "" : "s");
    }
    h_card(&o, "d-payload", "Payload");
    h_rawf(&o, "<div class=\"v\">%zu bytes</div><div class=\"s\">from ", d.payload_bytes);
    h_text(&o, d.upstream_repo);
    h_raw(&o, "; not shown here</div></div></div>");

    h_raw(&o, "<h2>Outbox</h2><div class=\"scroll\"><table class=\"outbox\"><thead><tr>"
              "<th>#</th><th>Kind</th><th>Target</th><th>State</th><th class=\"num\">Attempts</th>"
              "<th class=\"num\">HTTP</th><th>When</th><th>Reason / note</th></tr></thead><tbody>");
    for (size_t i = 0; i < d.n_jobs; i++) {
        const ddoc_job *j = &d.jobs[i];
        h_rawf(&o, "<tr data-kind=\"");
        h_text(&o, j->kind);
        h_raw(&o, "\" data-target=\"");
        h_text(&o, j->target);
        h_rawf(&o, "\"><td>%lld</td><td>", (long long)j->id);
        h_text(&o, j->kind);
        h_raw(&o, "</td><td>");
        if (j->check_name) {
            h_raw(&o, "<span class=\"mono\">");
            h_text(&o, j->check_name);
            h_raw(&o, "</span>");
        } else {
            h_text(&o, j->target);
        }
        h_raw(&o, "</td><td>");
        h_state(&o, j);
        h_rawf(&o, "</td><td class=\"num\">%d</td><td class=\"num\">", j->attempts);
        if (j->last_status)
            h_rawf(&o, "%ld", j->last_status);
        else
            h_raw(&o, "-");
        h_raw(&o, "</td><td class=\"nowrap\">");
        if (ob_state_parse(j->state) == OB_STATE_QUEUED) {
            h_raw(&o, "next ");
            h_ago(&o, j->next_attempt_at, r->now);
        } else if (j->done_at) {
            h_raw(&o, "done ");
            h_ago(&o, j->done_at, r->now);
        } else {
            h_raw(&o, "queued ");
            h_ago(&o, j->created_at, r->now);
        }
        h_raw(&o, "</td><td>");
        if (j->last_error) {
            h_raw(&o, "<span class=\"err\">");
            h_text(&o, j->last_error);
            h_raw(&o, "</span> ");
        }
        if (j->note) {
            h_raw(&o, ob_kind_parse(j->kind) == OB_KIND_DISPATCH && !j->dep_repo
                          ? "<span class=\"note-trim\">trimmed: "
                          : "<span>");
            h_text(&o, j->note);
            h_raw(&o, "</span>");
        }
        if (j->dep_repo && !j->note)
            h_dep(&o, j);
        if (j->ended)
            h_ended(&o, j);
        if (j->check_status) {
            h_raw(&o, "<span class=\"check-status\">");
            h_text(&o, j->check_status);
            if (j->check_conclusion) {
                h_raw(&o, " / ");
                h_text(&o, j->check_conclusion);
            }
            h_raw(&o, "</span>");
        }
        h_raw(&o, "</td></tr>");
    }
    if (!d.n_jobs)
        h_raw(&o, "<tr><td colspan=\"8\" class=\"muted\">No outbound effects.</td></tr>");
    h_raw(&o, "</tbody></table></div>");
    h_page_end(&o, r->now, clock_mono_ms() - r->t0);
    free(d.jobs);
    hud_answer_out(r, o.err);
}
