/*
 * delivery_doc.c - the delivery document's loader (store rows -> ddoc_delivery) and writer
 * (ddoc_delivery -> JSON, per view), and the admin documents read straight from the store; see
 * delivery_doc.h.
 */
#include "delivery_doc.h"

#include <stdlib.h>
#include <string.h>

#include "depends_on.h"
#include "dispatch.h"
#include "json.h"
#include "log.h"
#include "outcome.h"
#include "reconcile.h"
#include "utf8.h"

/* ---- loading ---- */

/* The row's head fields, borrowed. */
static void head_of(ddoc_delivery *d, const store_delivery_row *r)
{
    d->delivery_id = r->delivery_id;
    d->event = r->event;
    d->action = r->action;
    d->upstream_repo = r->upstream_repo;
    d->head_sha = r->head_sha;
    d->ref = r->ref;
    d->status = r->status;
    d->pr_number = r->pr_number;
    d->received_at = r->received_at;
    d->payload_bytes = r->payload_bytes;
    d->redelivery_asks = r->redelivery_asks;
}

/* The copies are owned by the arena. */
void ddoc_copy_delivery(arena *a, ddoc_delivery *d, const store_delivery_row *r)
{
    head_of(d, r);
    d->delivery_id = arena_dup(a, r->delivery_id);
    d->event = arena_dup(a, r->event);
    d->action = arena_dup(a, r->action);
    d->upstream_repo = arena_dup(a, r->upstream_repo);
    d->head_sha = arena_dup(a, r->head_sha);
    d->ref = arena_dup(a, r->ref);
    d->status = arena_dup(a, r->status);
}

/* An error text fit to show: credentials scrubbed, cut at DDOC_ERROR_MAX. The copy is owned by
 * the arena. */
static const char *scrubbed(arena *a, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s);
    if (n > DDOC_ERROR_MAX)
        n = DDOC_ERROR_MAX;
    buf_t b;
    buf_init(&b, 2 * DDOC_ERROR_MAX + 64);
    const char *out = NULL;
    if (log_scrub(s, n, &b) == CRCR_OK)
        out = arena_dup(a, buf_cstr(&b));
    buf_free(&b);
    return out ? out : "[error text not shown]";
}

/* Whether `n` bytes are well-formed UTF-8 without a NUL: what a JSON string can carry and
 * jansson (json.h) reads back. */
static bool text_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = s[i] ? utf8_seq((const unsigned char *)s + i, n - i) : 0;
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* A copy of `n` bytes, NUL-terminated, owned by the arena; NULL when they are not text_ok. */
static const char *text_dup(arena *a, const char *s, size_t n)
{
    if (!text_ok(s, n))
        return NULL;
    char *p = arena_alloc(a, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* The new row's strings are owned by the arena, d->jobs by `d` (ddoc_free_jobs). */
bool ddoc_add_job(arena *a, ddoc_delivery *d, const store_job_row *j, ddoc_view v)
{
    bool hud = v == DDOC_HUD;
    ddoc_job *h = vec_push((void **)&d->jobs, &d->n_jobs, &d->cap_jobs, sizeof(*d->jobs));
    if (!h)
        return false;
    h->id = j->id;
    h->kind = arena_dup(a, j->kind);
    h->target = arena_dup(a, j->target);
    h->state = arena_dup(a, j->state);
    h->last_error = hud ? scrubbed(a, j->last_error) : arena_dup(a, j->last_error);
    h->note = hud ? scrubbed(a, j->note) : arena_dup(a, j->note);
    h->attempts = j->attempts;
    h->last_status = j->last_status;
    h->next_attempt_at = j->next_attempt_at;
    h->created_at = j->created_at;
    h->done_at = j->done_at;
    h->delivery_id = arena_dup(a, j->delivery_id);
    if (ob_kind_parse(j->kind) == OB_KIND_DISPATCH) {
        /* A dispatch row's body is its Depends-On record, never the request. */
        h->ended = arena_dup(a, j->ended);
        h->ended_by = arena_dup(a, j->ended_by);
        depends_on_pair pair;
        if (depends_on_record_parse(j->body, j->body_len, &pair)) {
            h->dep_repo = arena_dup(a, pair.repo);
            h->dep_number = pair.number;
            h->dep_head_sha = pair.resolved ? arena_dup(a, pair.head_sha) : NULL;
            h->dep_head_ref = pair.resolved ? arena_dup(a, pair.head_ref) : NULL;
            h->dep_clone_url = pair.resolved ? arena_dup(a, pair.clone_url) : NULL;
            h->dep_problem = pair.problem[0] ? arena_dup(a, pair.problem) : NULL;
        }
        return true;
    }
    if (!hud) {
        if (j->body && j->body_len) {
            h->body = text_dup(a, j->body, j->body_len);
            h->body_len = h->body ? j->body_len : 0;
        }
        return true;
    }
    /* A check run's body is the request we send to GitHub: name, sha, status, conclusion,
     * details, external id. Only those three fields are shown. */
    if (ob_kind_parse(j->kind) == OB_KIND_CHECK_RUN && j->body && j->body_len &&
        j->body_len <= DDOC_CHECK_BODY_MAX) {
        jv *doc = jv_parse(j->body, j->body_len, NULL, 0);
        if (doc) {
            h->check_name = arena_dup(a, jv_path_str(doc, "name"));
            h->check_status = arena_dup(a, jv_path_str(doc, "status"));
            h->check_conclusion = arena_dup(a, jv_path_str(doc, "conclusion"));
            jv_free(doc);
        }
    }
    return true;
}

void ddoc_free_jobs(ddoc_delivery *d)
{
    free(d->jobs);
    d->jobs = NULL;
    d->n_jobs = d->cap_jobs = 0;
}

/* ---- writing ---- */

void ddoc_write_head(jw *w, const ddoc_delivery *d)
{
    jw_kstr(w, "delivery_id", d->delivery_id);
    jw_kstr(w, "event", d->event);
    jw_kstr(w, "action", d->action);
    jw_kstr(w, "upstream_repo", d->upstream_repo);
    jw_kint(w, "pr_number", d->pr_number);
    jw_kstr(w, "head_sha", d->head_sha);
    jw_kstr(w, "ref", d->ref);
    jw_ktime(w, "received_at", d->received_at);
    jw_kint(w, "payload_bytes", (int64_t)d->payload_bytes);
    jw_kstr(w, "status", d->status);
    jw_kbool(w, "recovered", d->redelivery_asks > 0);
}

void ddoc_write_job(jw *w, const ddoc_job *j, ddoc_view v)
{
    bool hud = v == DDOC_HUD;
    jw_obj(w);
    jw_kint(w, "id", j->id);
    jw_kstr(w, "kind", j->kind);
    jw_kstr(w, "target", j->target);
    jw_kstr(w, "state", j->state);
    if (hud)
        jw_kstr(w, "dispatch_state", ob_state_label(ob_state_parse(j->state), j->attempts));
    jw_kint(w, "attempts", j->attempts);
    jw_key(w, "last_status");
    j->last_status ? jw_int(w, j->last_status) : jw_null(w);
    jw_kstr(w, "last_error", j->last_error);
    jw_kstr(w, "note", j->note);
    if (hud)
        jw_ktime(w, "created_at", j->created_at);
    jw_key(w, "next_attempt_at");
    if (!hud || ob_state_parse(j->state) == OB_STATE_QUEUED)
        jw_time(w, j->next_attempt_at);
    else
        jw_null(w);
    jw_ktime(w, "done_at", j->done_at);
    if (j->dep_repo) { /* a paired dispatch row (§3.13) */
        jw_key(w, "depends_on");
        jw_obj(w);
        jw_kstr(w, "repository", j->dep_repo);
        jw_kint(w, "number", j->dep_number);
        jw_kstr(w, "head_sha", j->dep_head_sha);
        jw_kstr(w, "head_ref", j->dep_head_ref);
        jw_kstr(w, "clone_url", j->dep_clone_url);
        jw_kstr(w, "problem", j->dep_problem);
        jw_obj_end(w);
    }
    if (j->ended) { /* a dispatch row a newer one ended (§3.12) */
        jw_key(w, "ended");
        jw_obj(w);
        jw_kstr(w, "reason", j->ended);
        jw_kstr(w, "by", j->ended_by);
        jw_obj_end(w);
    }
    if (hud && ob_kind_parse(j->kind) == OB_KIND_CHECK_RUN) {
        jw_key(w, ob_kind_name(OB_KIND_CHECK_RUN));
        jw_obj(w);
        jw_kstr(w, "name", j->check_name);
        jw_kstr(w, "status", j->check_status);
        jw_kstr(w, "conclusion", j->check_conclusion);
        jw_obj_end(w);
    }
    if (!hud) {
        jw_key(w, "body");
        j->body ? jw_strn(w, j->body, j->body_len) : jw_null(w);
    }
    jw_obj_end(w);
}

void ddoc_write(jw *w, const ddoc_delivery *d, ddoc_view v)
{
    jw_obj(w);
    if (v == DDOC_ADMIN) {
        jw_key(w, "delivery");
        jw_obj(w);
    }
    ddoc_write_head(w, d);
    if (v == DDOC_ADMIN)
        jw_obj_end(w);
    jw_key(w, "outbox");
    jw_arr(w);
    for (size_t i = 0; i < d->n_jobs; i++)
        ddoc_write_job(w, &d->jobs[i], v);
    jw_arr_end(w);
    jw_obj_end(w);
}

/* ---- the admin documents ---- */

typedef struct admin_ctx {
    const crcr_config *cfg; /* NULL: dry-run bodies are not rebuilt */
    arena *a;
    ddoc_delivery *d;
    bool have_delivery, nomem;
    char *payload; /* what a dry-run dispatch's request is rebuilt from (owned, see ddoc_admin) */
    size_t payload_len;
} admin_ctx;

/* c->payload is owned by the context and freed by ddoc_admin. */
static void admin_delivery(void *ctx, const store_delivery_row *r, const char *payload, size_t n)
{
    admin_ctx *c = ctx;
    ddoc_copy_delivery(c->a, c->d, r);
    c->have_delivery = true;
    if (!c->cfg || c->payload)
        return;
    c->payload = malloc(n + 1);
    if (!c->payload) {
        c->nomem = true;
        return;
    }
    if (n)
        memcpy(c->payload, payload, n);
    c->payload[n] = '\0';
    c->payload_len = n;
}

/* A dry-run dispatch row stores no request (outbox.c; its body is its Depends-On record): its
 * request is rebuilt here by the rule the worker sends with (dispatch_row_body). NULL when it
 * cannot be (the row then shows "body": null); else a copy owned by the arena. */
static const char *dry_run_body(const admin_ctx *c, const store_job_row *j, size_t *len)
{
    if (!c->cfg || !c->payload || ob_kind_parse(j->kind) != OB_KIND_DISPATCH ||
        ob_state_parse(j->state) != OB_STATE_DRY_RUN)
        return NULL;
    dispatch_src src = {
        .event = c->d->event,
        .delivery_id = c->d->delivery_id,
        .payload = c->payload,
        .payload_len = c->payload_len,
        .target = j->target,
        .head_sha = c->d->head_sha,
        .pr_number = c->d->pr_number,
        .pair = j->body,
        .pair_len = j->body_len,
    };
    dispatch_output out;
    dispatch_output_init(&out);
    char err[256];
    const char *body = NULL;
    if (dispatch_row_body(c->cfg, &src, &out, err, sizeof(err)) == CRCR_OK) {
        body = text_dup(c->a, buf_cstr(&out.body), out.body.len);
        *len = out.body.len;
    }
    dispatch_output_free(&out);
    return body;
}

static void admin_job(void *ctx, const store_job_row *j)
{
    admin_ctx *c = ctx;
    if (!c->have_delivery || !ddoc_add_job(c->a, c->d, j, DDOC_ADMIN)) {
        c->nomem = true;
        return;
    }
    size_t len = 0;
    const char *body = dry_run_body(c, j, &len);
    if (body) {
        c->d->jobs[c->d->n_jobs - 1].body = body;
        c->d->jobs[c->d->n_jobs - 1].body_len = len;
    }
}

/* The copies live in an arena of this call's own (at most DDOC_ADMIN_MAX bytes). */
crcr_err ddoc_admin(store *st, const crcr_config *cfg, const char *id, buf_t *out)
{
    arena a;
    arena_init(&a, DDOC_ADMIN_MAX);
    ddoc_delivery d;
    memset(&d, 0, sizeof(d));
    admin_ctx c = {.cfg = cfg, .a = &a, .d = &d};
    crcr_err e = store_get_delivery(st, id, admin_delivery, admin_job, &c);
    free(c.payload);
    if (!e && (c.nomem || a.oom || !c.have_delivery))
        e = CRCR_E_NOMEM;
    if (!e) {
        jw w;
        jw_init(&w, out);
        ddoc_write(&w, &d, DDOC_ADMIN);
        e = w.err;
    }
    ddoc_free_jobs(&d);
    arena_free(&a);
    return e;
}

static int list_row(void *ctx, const store_delivery_row *r)
{
    jw *w = ctx;
    ddoc_delivery d;
    memset(&d, 0, sizeof(d));
    head_of(&d, r);
    jw_obj(w);
    ddoc_write_head(w, &d);
    jw_obj_end(w);
    return w->err != CRCR_OK;
}

crcr_err ddoc_admin_list(store *st, const store_filter *f, buf_t *out)
{
    jw w;
    jw_init(&w, out);
    jw_arr(&w);
    crcr_err e = store_list_deliveries(st, f, list_row, &w);
    jw_arr_end(&w);
    return e ? e : w.err;
}

/* ---- as jv documents, for the admin API and `crcr deliveries` ---- */

/* The documents are written by delivery_doc.c and handed on as a jv, so that the admin API and
 * `crcr deliveries` print them as they print any document (jv_dump). Text that jansson cannot
 * read back (not UTF-8) fails the document as out of memory, as building it with jansson did. */
static crcr_err parse_doc(const buf_t *b, jv **out)
{
    *out = jv_parse(buf_cstr(b), b->len, NULL, 0);
    return *out ? CRCR_OK : CRCR_E_NOMEM;
}

/* *out is a new reference owned by the caller (jv_free). */
crcr_err ddoc_admin_jv(store *st, const crcr_config *cfg, const char *id, jv **out)
{
    *out = NULL;
    buf_t b;
    buf_init(&b, DDOC_ADMIN_MAX);
    crcr_err e = ddoc_admin(st, cfg, id, &b);
    if (!e)
        e = parse_doc(&b, out);
    buf_free(&b);
    return e;
}

/* *out is a new reference owned by the caller (jv_free). */
crcr_err ddoc_admin_list_jv(store *st, const store_filter *f, jv **out)
{
    *out = NULL;
    buf_t b;
    buf_init(&b, DDOC_ADMIN_MAX);
    crcr_err e = ddoc_admin_list(st, f, &b);
    if (!e)
        e = parse_doc(&b, out);
    buf_free(&b);
    return e;
}

/* ---- the reconciler's records ---- */

/* What became of a record (delivery_doc.h). */
static const char *redelivery_state(const store_redelivery_row *r)
{
    if (r->received_at > 0)
        return "recovered";
    if (!r->last_result)
        return "asking";
    return r->last_status == 202 ? "asked" : "refused";
}

static void redelivery_row(void *ctx, const store_redelivery_row *r)
{
    jw *w = ctx;
    jw_obj(w);
    jw_kstr(w, "guid", r->guid);
    jw_kstr(w, "event", r->event);
    jw_kstr(w, "action", r->action);
    jw_key(w, "hook_delivery_id");
    r->hook_id > 0 ? jw_int(w, r->hook_id) : jw_null(w);
    jw_kint(w, "asks", r->attempts);
    jw_kint(w, "max_asks", RC_MAX_ASKS);
    jw_ktime(w, "first_asked_at", r->first_asked_at);
    jw_ktime(w, "last_asked_at", r->last_asked_at);
    jw_key(w, "last_status");
    r->last_status ? jw_int(w, r->last_status) : jw_null(w);
    jw_kstr(w, "last_result", r->last_result);
    jw_kstr(w, "state", redelivery_state(r));
    jw_ktime(w, "received_at", r->received_at);
    jw_obj_end(w);
}

/* *out is a new reference owned by the caller (jv_free). */
crcr_err ddoc_redeliveries_jv(store *st, int limit, bool pending_only, jv **out)
{
    *out = NULL;
    buf_t b;
    buf_init(&b, DDOC_ADMIN_MAX);
    jw w;
    jw_init(&w, &b);
    jw_arr(&w);
    crcr_err e = store_redelivery_list(st, limit, pending_only, redelivery_row, &w);
    jw_arr_end(&w);
    if (!e)
        e = w.err;
    if (!e)
        e = parse_doc(&b, out);
    buf_free(&b);
    return e;
}
