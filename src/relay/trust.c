/* trust.c - `crcr trust` and the pins' JSON document; see trust.h. */
#include "trust.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "json.h"
#include "crcr_limits.h"

typedef struct doc_ctx {
    buf_t *out;
    size_t n;
    crcr_err err;
} doc_ctx;

static void add_pin(void *vctx, const store_identity_row *r)
{
    doc_ctx *c = vctx;
    char when[40];
    clock_iso8601(r->pinned_at, when, sizeof(when));
    buf_t *b = c->out;
    /* Every append counts: a document cut in the middle must not pass as whole. */
    crcr_err e = buf_puts(b, c->n++ ? ",{\"repo\":" : "{\"repo\":");
    if (!e)
        e = jv_quote(b, r->repo, strlen(r->repo));
    if (!e)
        e = buf_puts(b, ",\"repository_id\":");
    if (!e)
        e = jv_quote(b, r->repository_id, strlen(r->repository_id));
    if (!e)
        e = buf_puts(b, ",\"owner_id\":");
    if (!e)
        e = jv_quote(b, r->owner_id, strlen(r->owner_id));
    if (!e)
        e = buf_puts(b, ",\"pinned_at\":");
    if (!e)
        e = jv_quote(b, when, strlen(when));
    if (!e)
        e = buf_putc(b, '}');
    if (e && !c->err)
        c->err = e;
}

crcr_err trust_doc(store *st, buf_t *out)
{
    doc_ctx c = {.out = out};
    buf_puts(out, "{\"pins\":[");
    crcr_err e = store_identity_list(st, add_pin, &c);
    if (!e)
        e = c.err;
    if (!e)
        e = buf_puts(out, "]}");
    return e;
}
