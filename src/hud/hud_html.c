/*
 * hud_html.c - HTML pieces shared by the HUD's pages; see hud_html.h.
 */
#include "hud_html.h"

#include <stdio.h>
#include <string.h>

#include "crcr_limits.h"

void h_job_label(hout *o, const hrun *r)
{
    h_text(o, r->workflow);
    if (r->job && *r->job) {
        h_raw(o, " / ");
        h_text(o, r->job);
    }
}

void h_chip(hout *o, const hrun *r, int attempts)
{
    crcr_outcome oc = outcome_of_run(r->state, r->conclusion, r->ended);
    const char *cls = outcome_chip_class(oc);
    /* A superseded run shows as such (never as a failure); what it reported is in its title. */
    const char *text = oc == OUTCOME_RUNNING || oc == OUTCOME_SUPERSEDED
                           ? outcome_name(oc)
                           : (r->conclusion ? r->conclusion : "done");
    char when[48], exec[32], title[256 + CRCR_RUN_ID_MAX];
    html_time(hud_run_time(r), when, sizeof(when));
    html_duration(r->exec_ms, exec, sizeof(exec));
    if (oc == OUTCOME_SUPERSEDED)
        snprintf(title, sizeof(title), "run %s attempt %lld, %s (%s), reported %s %s, %s",
                 r->run_id ? r->run_id : "", (long long)r->run_attempt,
                 end_reason_parse(r->ended) == END_REASON_PR_CLOSED
                     ? "ended: the pull request was closed"
                     : "ended: a newer commit was dispatched",
                 r->ended, r->state ? r->state : "", r->conclusion ? r->conclusion : "", when);
    else
        snprintf(title, sizeof(title), "run %s attempt %lld, %s, exec %s",
                 r->run_id ? r->run_id : "", (long long)r->run_attempt, when, exec);
    bool link = html_url_ok(r->details_url);
    h_raw(o, link ? "<a class=\"chip " : "<span class=\"chip ");
    h_raw(o, cls);
    h_raw(o, "\"");
    if (link) {
        h_raw(o, " href=\"");
        h_text(o, r->details_url);
        h_raw(o, "\" rel=\"noopener noreferrer nofollow\"");
    }
    h_raw(o, " title=\"");
    h_text(o, title);
    h_raw(o, "\">");
    h_text(o, text);
    if (attempts > 1)
        h_rawf(o, " &times;%d", attempts);
    h_raw(o, link ? "</a>" : "</span>");
}

void h_dur(hout *o, int64_t ms)
{
    char t[32];
    html_duration(ms, t, sizeof(t));
    h_text(o, t);
}

void h_ago(hout *o, int64_t ms, int64_t now)
{
    char t[48], full[48];
    html_ago(ms, now, t, sizeof(t));
    html_time(ms, full, sizeof(full));
    h_raw(o, "<span title=\"");
    h_text(o, full);
    h_raw(o, "\">");
    h_text(o, t);
    h_raw(o, "</span>");
}

void h_pct(hout *o, double v)
{
    if (v < 0)
        h_raw(o, "-");
    else
        h_rawf(o, "%.1f%%", v);
}

void h_health_badge(hout *o, const health_entry *e)
{
    const char *name = health_status_name(e->verdict.status);
    h_rawf(o, "<span class=\"badge health-%s\" title=\"", name);
    h_text(o, e->verdict.reason);
    h_raw(o, "\">");
    h_raw(o, e->verdict.status == HEALTH_AT_RISK        ? "at risk"
             : e->verdict.status == HEALTH_BELOW_LEVEL  ? "below level"
             : e->verdict.status == HEALTH_NOT_MEASURED ? "not measured"
                                                        : "healthy");
    h_raw(o, "</span>");
    if (e->verdict.status == HEALTH_BELOW_LEVEL)
        h_rawf(o, " <span class=\"muted\">recommend %s</span>",
               crcr_level_name(e->verdict.recommended));
}

void h_repo_link(hout *o, const char *repo)
{
    h_raw(o, "<a href=\"/crcr/");
    const char *slash = strchr(repo, '/');
    if (slash) {
        char owner[CRCR_REPO_NAME_MAX];
        snprintf(owner, sizeof(owner), "%.*s", (int)(slash - repo), repo);
        h_url_part(o, owner);
        h_raw(o, "/");
        h_url_part(o, slash + 1);
    } else {
        h_url_part(o, repo);
    }
    h_raw(o, "\">");
    h_text(o, repo);
    h_raw(o, "</a>");
}

void h_card(hout *o, const char *id, const char *key)
{
    h_rawf(o, "<div class=\"card\" id=\"%s\"><div class=\"k\">%s</div>", id, key);
}

void h_state(hout *o, const ddoc_job *j)
{
    crcr_ob_state s = ob_state_parse(j->state);
    h_rawf(o, "<span class=\"state %s\">%s</span>", ob_state_class(s, j->attempts),
           ob_state_label(s, j->attempts));
}

void h_dep(hout *o, const ddoc_job *j)
{
    h_raw(o, " <span class=\"dep\">with ");
    h_text(o, j->dep_repo);
    h_rawf(o, "#%lld", (long long)j->dep_number);
    if (j->dep_head_sha) {
        h_raw(o, " @ <span class=\"mono\">");
        h_textn(o, j->dep_head_sha, 7);
        h_raw(o, "</span>");
    } else if (j->dep_problem) {
        h_raw(o, ": not tested (");
        h_text(o, j->dep_problem);
        h_raw(o, ")");
    }
    h_raw(o, "</span>");
}

void h_ended(hout *o, const ddoc_job *j)
{
    h_raw(o, " <span class=\"ended\" data-ended=\"");
    h_text(o, j->ended);
    h_raw(o, "\">");
    h_raw(o, end_reason_parse(j->ended) == END_REASON_PR_CLOSED
                 ? "ended: PR closed"
                 : end_reason_name(END_REASON_SUPERSEDED));
    if (j->ended_by) {
        h_raw(o, " by <a class=\"mono\" href=\"/crcr/deliveries/");
        h_url_part(o, j->ended_by);
        h_raw(o, "\">");
        h_textn(o, j->ended_by, 8);
        h_raw(o, "</a>");
    }
    h_raw(o, "</span>");
}

void h_dispatch_targets(hout *o, const ddoc_delivery *d, int64_t now)
{
    bool any = false;
    h_raw(o, "<ul class=\"targets\">");
    for (size_t i = 0; i < d->n_jobs; i++) {
        const ddoc_job *j = &d->jobs[i];
        if (ob_kind_parse(j->kind) != OB_KIND_DISPATCH)
            continue;
        any = true;
        crcr_ob_state s = ob_state_parse(j->state);
        const char *cls = ob_state_class(s, j->attempts);
        const char *label = ob_state_label(s, j->attempts);
        h_rawf(o, "<li class=\"%s\" data-state=\"%s\" data-target=\"", cls, label);
        h_text(o, j->target);
        h_raw(o, "\" title=\"");
        h_raw(o, label);
        if (j->note) {
            h_raw(o, j->dep_repo ? "; " : "; trimmed: "); /* a paired row's note names its pair */
            h_text(o, j->note);
        }
        h_raw(o, "\">");
        h_text(o, j->target);
        if (s != OB_STATE_SENT) {
            h_rawf(o, " <span class=\"state %s\">%s</span>", cls, label);
            if (s == OB_STATE_QUEUED && j->attempts > 0) { /* retrying */
                h_raw(o, " next ");
                h_ago(o, j->next_attempt_at, now);
            }
            if (s == OB_STATE_DEAD && j->last_error) {
                h_raw(o, " <span class=\"err\">");
                h_text(o, j->last_error);
                h_raw(o, "</span>");
            }
        }
        if (j->note && !j->dep_repo)
            h_raw(o, " <span class=\"muted\">trimmed</span>");
        if (j->dep_repo)
            h_dep(o, j);
        if (j->ended)
            h_ended(o, j);
        h_raw(o, "</li>");
    }
    if (!any)
        h_raw(o, "<li class=\"muted\">no dispatches</li>");
    h_raw(o, "</ul>");
}

/* A link to the delivery's page, its id as the text. */
static void h_delivery_link(hout *o, const char *id)
{
    h_raw(o, "<a class=\"mono\" href=\"/crcr/deliveries/");
    h_url_part(o, id);
    h_raw(o, "\">");
    h_text(o, id);
    h_raw(o, "</a>");
}

void h_delivery_cells(hout *o, const ddoc_delivery *d, int64_t now)
{
    h_raw(o, "<td>");
    h_ago(o, d->received_at, now);
    h_raw(o, "</td><td>");
    h_delivery_link(o, d->delivery_id);
    if (d->redelivery_asks > 0)
        h_raw(o, "<span class=\"badge recovered\" title=\"GitHub had failed to deliver it; the "
                 "reconciler asked for it again\">recovered</span>");
    h_raw(o, "</td><td>");
    h_text(o, d->event);
    if (d->action) {
        h_raw(o, " / ");
        h_text(o, d->action);
    }
    h_raw(o, "</td><td>");
}
