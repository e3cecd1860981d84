/*
 * dispatch.c - builds the repository_dispatch request body (dispatch.h; relay.md §2 and §5.2).
 *
 * Fast path (the common case): the body is concatenated around the webhook bytes, which are copied
 * verbatim. No JSON is parsed, so a downstream receives exactly what GitHub signed, as the
 * upstream relay does.
 *
 * Slow path, only when that body would exceed the budget: the payload is parsed, trimmed in fixed
 * steps and re-serialised after each step that removed something, until the whole body fits:
 *   1. payload.pull_request.body
 *   2. "_links" members and string "*_url" members, anywhere, except always-kept fields
 *   3. objects under "user" / "owner" / "sender", anywhere, reduced to {login, id, type}
 *   4. payload.repository reduced to its identity fields
 *   5. pull_request.labels[] reduced to {name}, pull_request.{head,base}.repo to
 *      {full_name, id, name}
 * Each step that removed something adds one entry to client_payload.trimmed, in step order. The
 * fields in kept_paths[] are never removed, and steps 2 and 3 do not look inside them either, so
 * their values stay whole whatever they hold. Before step 1 the compact re-serialisation
 * alone is tried (a pretty-printed or escape-heavy payload may fit without losing anything); if it
 * fits, the body carries "trimmed":[] so a downstream can still tell the bytes were re-encoded.
 * The result depends only on the input: jansson keeps object members in document order and the
 * steps visit them in that order.
 *
 * Why hand-written: jansson has no path-based pruning, and the rules are specific to the shape of
 * GitHub's pull_request and push payloads.
 */
#include "dispatch.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

#include "cbtoken.h"
#include "depends_on.h"
#include "json.h"
#include "crcr_limits.h"

/* Longest callback_token accepted (the relay's own HMAC token is well under 200 bytes). */
#define DISPATCH_CALLBACK_TOKEN_MAX 1024u
/* Longest client_payload.depends_on object (depends_on.h: its fields' caps, quoted). */
#define DISPATCH_DEPENDS_ON_MAX 4096u
/* Cap of trimmed_note: every step's entry joined, with room to spare. */
#define DISPATCH_NOTE_MAX 512u
/* Cap of the envelope pieces around the payload (quoted ids and token, trimmed array). */
#define DISPATCH_ENVELOPE_MAX 8192u
/* Longest key path compared with kept_paths[]; a longer path cannot be one of them. */
#define DISPATCH_PATH_MAX 256u
/* Cap of the list of member names collected for deletion in one object. */
#define DISPATCH_DOOMED_MAX (64u * 1024u * 1024u)
/* Trimming steps (and so entries in client_payload.trimmed) at most. */
#define DISPATCH_MAX_ENTRIES 8u

/* Fields no step may remove, as paths from the payload root ("[]": every array element). */
static const char *const kept_paths[] = {
    "action",
    "number",
    "pull_request.number",
    "pull_request.state",
    "pull_request.merged",
    "pull_request.head.sha",
    "pull_request.head.ref",
    "pull_request.head.repo.full_name",
    "pull_request.base.sha",
    "pull_request.base.ref",
    "pull_request.labels[].name",
    "pull_request.draft",
    "pull_request.html_url",
    "repository.full_name",
    "ref",
    "before",
    "after",
    "deleted",
    "created",
    "forced",
};

static const char *const person_keys[] = {"user", "owner", "sender"};
static const char *const person_keep[] = {"login", "id", "type"};
static const char *const repository_keep[] = {"id",      "node_id", "name",          "full_name",
                                              "private", "owner",   "default_branch"};
static const char *const label_keep[] = {"name"};
static const char *const pr_repo_keep[] = {"full_name", "id", "name"};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The keys from the payload root to the value being visited; NULL marks an array element. */
typedef struct {
    const char *seg[CRCR_JSON_MAX_DEPTH + 2];
    unsigned depth;
} key_path;

/* The entries of client_payload.trimmed, in step order. Strings are static. */
typedef struct {
    const char *entry[DISPATCH_MAX_ENTRIES];
    size_t n;
} trim_list;

/* Prepares an empty output; allocates nothing. The buffers are owned by `o` from then on and are
 * released by dispatch_output_free(). */
void dispatch_output_init(dispatch_output *o)
{
    buf_init(&o->body, CRCR_DISPATCH_BUDGET_DEFAULT);
    o->trimmed = false;
    buf_init(&o->trimmed_note, DISPATCH_NOTE_MAX);
}

/* Releases the buffers owned by `o` (not `o` itself). Accepts NULL and an output never built. */
void dispatch_output_free(dispatch_output *o)
{
    if (!o)
        return;
    buf_free(&o->body);
    buf_free(&o->trimmed_note);
    o->trimmed = false;
}

static void set_err(char *err, size_t errsz, const char *msg)
{
    if (err && errsz)
        snprintf(err, errsz, "%s", msg);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

static bool in_list(const char *key, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(key, list[i]) == 0)
            return true;
    }
    return false;
}

/* Writes the dotted form of `p` followed by `key` ("pull_request.labels[].name") into `out`.
 * False when it does not fit, in which case it is longer than any kept path. */
static bool path_string(const key_path *p, const char *key, char *out, size_t outsz)
{
    size_t len = 0;
    for (unsigned i = 0; i <= p->depth; i++) {
        const char *s = i < p->depth ? p->seg[i] : key;
        size_t n = s ? strlen(s) : 2;
        bool dot = s && len > 0;
        if (len + n + (dot ? 1 : 0) >= outsz)
            return false;
        if (dot)
            out[len++] = '.';
        memcpy(out + len, s ? s : "[]", n);
        len += n;
    }
    out[len] = '\0';
    return true;
}

/* True when the member `key` of the object at `p` is itself a kept field. */
static bool is_kept(const key_path *p, const char *key)
{
    char s[DISPATCH_PATH_MAX];
    if (!path_string(p, key, s, sizeof(s)))
        return false;
    return in_list(s, kept_paths, NELEM(kept_paths));
}

/* True when some kept field lies strictly inside the member `key` of the object at `p`. */
static bool holds_kept(const key_path *p, const char *key)
{
    char s[DISPATCH_PATH_MAX];
    if (!path_string(p, key, s, sizeof(s)))
        return false;
    size_t n = strlen(s);
    for (size_t i = 0; i < NELEM(kept_paths); i++) {
        const char *k = kept_paths[i];
        if (strncmp(k, s, n) == 0 && (k[n] == '.' || k[n] == '['))
            return true;
    }
    return false;
}

/* Deletes every member named in `names` (NUL-separated, `names->len` bytes) from `obj`, which
 * releases its reference to each removed value. `names` stays owned by the caller. */
static crcr_err delete_names(jv *obj, const buf_t *names)
{
    for (size_t off = 0; off < names->len;) {
        const char *name = names->data + off;
        crcr_err err = jv_del(obj, name);
        if (err && err != CRCR_E_NOT_FOUND)
            return err;
        off += strlen(name) + 1;
    }
    return CRCR_OK;
}

/*
 * Reduces `obj` in place to the members named in keep[0..n), in that order, when it has any other
 * member (an object holding only kept members is left as it is). Sets *changed when something was
 * removed. The kept values are moved, not copied; `obj` stays owned by its container.
 */
static crcr_err reduce_obj(jv *obj, const char *const *keep, size_t n, bool *changed)
{
    bool extra = false;
    for (void *it = jv_iter(obj); it && !extra; it = jv_iter_next(obj, it))
        extra = !in_list(jv_iter_key(it), keep, n);
    if (!extra)
        return CRCR_OK;

    jv *vals[8] = {NULL};
    if (n > NELEM(vals))
        return CRCR_E_INVALID;
    for (size_t i = 0; i < n; i++) {
        jv *v = jv_get(obj, keep[i]);
        vals[i] = v ? jv_ref(v) : NULL;
    }
    buf_t names;
    buf_init(&names, DISPATCH_DOOMED_MAX);
    crcr_err err = CRCR_OK;
    for (void *it = jv_iter(obj); it && !err; it = jv_iter_next(obj, it)) {
        const char *k = jv_iter_key(it);
        err = buf_append(&names, k, strlen(k) + 1);
    }
    if (!err)
        err = delete_names(obj, &names);
    buf_free(&names);
    for (size_t i = 0; i < n; i++) {
        if (!vals[i])
            continue;
        if (!err)
            err = jv_set(obj, keep[i], vals[i]); /* steals the reference, also on failure */
        else
            jv_free(vals[i]);
    }
    if (!err)
        *changed = true;
    return err;
}

/* Step 2, recursively: removes "_links" members and string "*_url" members that are not kept.
 * Removed values are released; the names to delete are copied into a temporary buffer first
 * because members cannot be deleted while their object is being iterated. */
static crcr_err strip_links_urls(jv *v, key_path *p, bool *links, bool *urls)
{
    if (p->depth >= NELEM(p->seg) - 1)
        return CRCR_OK; /* unreachable: jv_parse bounds the depth */
    crcr_err err = CRCR_OK;
    if (jv_is_arr(v)) {
        p->seg[p->depth++] = NULL;
        for (size_t i = 0; i < jv_arr_len(v) && !err; i++)
            err = strip_links_urls(jv_arr_at(v, i), p, links, urls);
        p->depth--;
        return err;
    }
    if (!jv_is_obj(v))
        return CRCR_OK;

    buf_t doomed;
    buf_init(&doomed, DISPATCH_DOOMED_MAX);
    for (void *it = jv_iter(v); it && !err; it = jv_iter_next(v, it)) {
        const char *key = jv_iter_key(it);
        jv *val = jv_iter_val(it);
        if (is_kept(p, key))
            continue; /* kept fields are left whole, inside too */
        bool is_links = strcmp(key, "_links") == 0;
        bool is_url = !is_links && jv_is_str(val) && ends_with(key, "_url");
        if (is_links || is_url) {
            err = buf_append(&doomed, key, strlen(key) + 1);
            *(is_links ? links : urls) = true;
        } else {
            p->seg[p->depth++] = key;
            err = strip_links_urls(val, p, links, urls);
            p->depth--;
        }
    }
    if (!err)
        err = delete_names(v, &doomed);
    buf_free(&doomed);
    return err;
}

/* Step 3, recursively: reduces every object under a person key to person_keep. */
static crcr_err reduce_people(jv *v, key_path *p, bool *changed)
{
    if (p->depth >= NELEM(p->seg) - 1)
        return CRCR_OK; /* unreachable: jv_parse bounds the depth */
    crcr_err err = CRCR_OK;
    if (jv_is_arr(v)) {
        p->seg[p->depth++] = NULL;
        for (size_t i = 0; i < jv_arr_len(v) && !err; i++)
            err = reduce_people(jv_arr_at(v, i), p, changed);
        p->depth--;
        return err;
    }
    if (!jv_is_obj(v))
        return CRCR_OK;
    for (void *it = jv_iter(v); it && !err; it = jv_iter_next(v, it)) {
        const char *key = jv_iter_key(it);
        jv *val = jv_iter_val(it);
        if (is_kept(p, key))
            continue; /* kept fields are left whole, inside too */
        if (jv_is_obj(val) && in_list(key, person_keys, NELEM(person_keys)) &&
            !holds_kept(p, key)) {
            /* Edits the member's value in place; the object being iterated keeps its keys. */
            err = reduce_obj(val, person_keep, NELEM(person_keep), changed);
        } else {
            p->seg[p->depth++] = key;
            err = reduce_people(val, p, changed);
            p->depth--;
        }
    }
    return err;
}

/* Applies step `step` (1-5) to `root` and appends its entries to `tl` when it removed something. */
static crcr_err apply_step(int step, jv *root, trim_list *tl)
{
    key_path p = {.depth = 0};
    bool a = false, b = false;
    crcr_err err = CRCR_OK;
    jv *pr = jv_get(root, "pull_request");
    switch (step) {
    case 1:
        if (jv_is_obj(pr) && jv_get(pr, "body")) {
            err = jv_del(pr, "body");
            a = !err;
        }
        if (a)
            tl->entry[tl->n++] = "payload.pull_request.body";
        break;
    case 2:
        err = strip_links_urls(root, &p, &a, &b);
        if (!err && a)
            tl->entry[tl->n++] = "payload.**._links";
        if (!err && b)
            tl->entry[tl->n++] = "payload.**.*_url";
        break;
    case 3:
        err = reduce_people(root, &p, &a);
        if (!err && a)
            tl->entry[tl->n++] = "payload.**.{user,owner,sender}";
        break;
    case 4: {
        jv *repo = jv_get(root, "repository");
        if (jv_is_obj(repo))
            err = reduce_obj(repo, repository_keep, NELEM(repository_keep), &a);
        if (!err && a)
            tl->entry[tl->n++] = "payload.repository";
        break;
    }
    case 5: {
        jv *labels = jv_get(pr, "labels");
        for (size_t i = 0; i < jv_arr_len(labels) && !err; i++) {
            jv *l = jv_arr_at(labels, i);
            if (jv_is_obj(l))
                err = reduce_obj(l, label_keep, NELEM(label_keep), &a);
        }
        static const char *const sides[] = {"head", "base"};
        for (size_t i = 0; i < NELEM(sides) && !err; i++) {
            jv *repo = jv_get(jv_get(pr, sides[i]), "repo");
            if (jv_is_obj(repo))
                err = reduce_obj(repo, pr_repo_keep, NELEM(pr_repo_keep), &a);
        }
        if (!err && a)
            tl->entry[tl->n++] = "payload.pull_request.{head,base}.repo,labels";
        break;
    }
    default:
        break;
    }
    return err;
}

/* Appends `,"trimmed":[...]` for `tl` to `out`. */
static crcr_err put_trimmed(buf_t *out, const trim_list *tl)
{
    crcr_err err = buf_puts(out, ",\"trimmed\":[");
    for (size_t i = 0; i < tl->n && !err; i++) {
        if (i)
            err = buf_putc(out, ',');
        if (!err)
            err = jv_quote(out, tl->entry[i], strlen(tl->entry[i]));
    }
    if (!err)
        err = buf_putc(out, ']');
    return err;
}

/*
 * A cap that jansson's compact output of a document parsed from `n` bytes can never reach.
 * Strings, keys, integers and literals never grow (escapes are re-emitted at most as long as
 * they were read, whitespace is dropped); a real grows at most from 3 bytes ("0.1") to the 19-24
 * of "%.17g", under 7x once the separator that must follow it is counted.
 *
 * Why it matters: jansson 2.14 ignores a failing write callback while it writes an object *key*
 * and carries on, so a dump into a buffer capped at the budget can drop a long key and still
 * report success. With a cap that is never hit, only the size comparison below decides.
 */
static size_t dump_cap(size_t n)
{
    if (n > (SIZE_MAX - DISPATCH_ENVELOPE_MAX) / 8)
        return SIZE_MAX / 2;
    return n * 7 + DISPATCH_ENVELOPE_MAX;
}

/*
 * Serialises the candidate body: `root` into `scratch` and tail + trimmed array + "}}" into
 * `suffix` (both reset first). When head + scratch + suffix fits the budget, copies the body into
 * `out` and returns CRCR_OK; otherwise returns CRCR_E_TOO_LARGE with the size in *total.
 */
static crcr_err try_fit(const buf_t *head, const buf_t *tail, const jv *root, const trim_list *tl,
                        buf_t *scratch, buf_t *suffix, buf_t *out, size_t *total)
{
    buf_reset(scratch);
    buf_reset(suffix);
    crcr_err err = jv_dump(root, scratch);
    if (!err)
        err = buf_append(suffix, tail->data, tail->len);
    if (!err)
        err = put_trimmed(suffix, tl);
    if (!err)
        err = buf_puts(suffix, "}}");
    if (err)
        return err == CRCR_E_TOO_LARGE ? CRCR_E_NOMEM : err; /* the caps are never reached */
    *total = head->len + scratch->len + suffix->len;
    if (*total > out->max)
        return CRCR_E_TOO_LARGE;
    buf_reset(out);
    err = buf_append(out, head->data, head->len);
    if (!err)
        err = buf_append(out, scratch->data, scratch->len);
    if (!err)
        err = buf_append(out, suffix->data, suffix->len);
    return err;
}

/* The slow path: parse, trim, re-serialise until the body fits. `out` was reset by the caller
 * and its body's cap is the budget. */
static crcr_err build_trimmed(const dispatch_input *in, size_t budget, const buf_t *head,
                              const buf_t *tail, dispatch_output *out, char *err, size_t errsz)
{
    char perr[160];
    jv *root = jv_parse(in->payload, in->payload_len, perr, sizeof(perr));
    if (!root) {
        if (err && errsz)
            snprintf(err, errsz, "dispatch payload must be trimmed but is not valid JSON: %s",
                     perr);
        return CRCR_E_INVALID;
    }
    if (!jv_is_obj(root)) {
        jv_free(root);
        set_err(err, errsz, "dispatch payload must be trimmed but is not a JSON object");
        return CRCR_E_INVALID;
    }

    buf_t scratch, suffix;
    buf_init(&scratch, dump_cap(in->payload_len));
    buf_init(&suffix, DISPATCH_ENVELOPE_MAX);
    trim_list tl = {.n = 0};
    size_t total = 0;
    crcr_err rc = try_fit(head, tail, root, &tl, &scratch, &suffix, &out->body, &total);
    for (int step = 1; step <= 5 && rc == CRCR_E_TOO_LARGE; step++) {
        size_t before = tl.n;
        rc = apply_step(step, root, &tl);
        if (!rc && tl.n > before)
            rc = try_fit(head, tail, root, &tl, &scratch, &suffix, &out->body, &total);
        else if (!rc)
            rc = CRCR_E_TOO_LARGE; /* nothing removed: the size is unchanged */
    }
    buf_free(&scratch);
    buf_free(&suffix);
    jv_free(root);

    if (rc == CRCR_E_TOO_LARGE) {
        if (err && errsz)
            snprintf(err, errsz,
                     "dispatch body is %zu bytes after trimming, over the budget of %zu bytes",
                     total, budget);
        return CRCR_E_PERMANENT;
    }
    if (rc) {
        set_err(err, errsz, "dispatch body: out of memory while trimming");
        return rc;
    }
    for (size_t i = 0; i < tl.n && !rc; i++) {
        if (i)
            rc = buf_putc(&out->trimmed_note, ' ');
        if (!rc)
            rc = buf_puts(&out->trimmed_note, tl.entry[i]);
    }
    if (!rc)
        out->trimmed = true;
    return rc;
}

static bool len_ok(const char *s, size_t max, bool may_be_empty)
{
    if (!s)
        return false;
    size_t n = strnlen(s, max + 1);
    return n <= max && (may_be_empty || n > 0);
}

/*
 * Fills `out` (initialised by dispatch_output_init; its previous content is released) and returns
 * CRCR_OK, or leaves it empty and returns an error with the reason in `err`. The input is only
 * read. A budget of 0 means CRCR_DISPATCH_BUDGET_DEFAULT.
 */
crcr_err dispatch_build(const dispatch_input *in, dispatch_output *out, char *err, size_t errsz)
{
    if (err && errsz)
        err[0] = '\0';
    size_t budget = in->budget ? in->budget : CRCR_DISPATCH_BUDGET_DEFAULT;
    buf_free(&out->body);
    buf_init(&out->body, budget);
    buf_free(&out->trimmed_note);
    buf_init(&out->trimmed_note, DISPATCH_NOTE_MAX);
    out->trimmed = false;

    if (!len_ok(in->event, CRCR_EVENT_NAME_MAX, false) ||
        !len_ok(in->delivery_id, CRCR_DELIVERY_ID_MAX, false) ||
        (in->callback_token && !len_ok(in->callback_token, DISPATCH_CALLBACK_TOKEN_MAX, true)) ||
        (in->depends_on && !len_ok(in->depends_on, DISPATCH_DEPENDS_ON_MAX, false)) ||
        !in->payload || in->payload_len == 0) {
        set_err(err, errsz,
                "dispatch input: missing or oversized event, delivery id, callback "
                "token or payload");
        return CRCR_E_INVALID;
    }

    /* head = {"event_type":E,"client_payload":{"event_type":E,"delivery_id":D,"payload":
     * tail = [,"depends_on":P][,"callback_token":T]  (the trimmed array and "}}" follow it) */
    buf_t head, tail;
    buf_init(&head, DISPATCH_ENVELOPE_MAX);
    buf_init(&tail, DISPATCH_ENVELOPE_MAX);
    size_t elen = strlen(in->event);
    crcr_err rc = buf_puts(&head, "{\"event_type\":");
    if (!rc)
        rc = jv_quote(&head, in->event, elen);
    if (!rc)
        rc = buf_puts(&head, ",\"client_payload\":{\"event_type\":");
    if (!rc)
        rc = jv_quote(&head, in->event, elen);
    if (!rc)
        rc = buf_puts(&head, ",\"delivery_id\":");
    if (!rc)
        rc = jv_quote(&head, in->delivery_id, strlen(in->delivery_id));
    if (!rc)
        rc = buf_puts(&head, ",\"payload\":");
    if (!rc && in->depends_on) {
        rc = buf_puts(&tail, ",\"depends_on\":");
        if (!rc)
            rc = buf_puts(&tail, in->depends_on);
    }
    if (!rc && in->callback_token) {
        rc = buf_puts(&tail, ",\"callback_token\":");
        if (!rc)
            rc = jv_quote(&tail, in->callback_token, strlen(in->callback_token));
    }
    if (rc) {
        set_err(err, errsz, "dispatch envelope: out of memory");
    } else if (in->payload_len <= budget && head.len + tail.len + 2 <= budget - in->payload_len) {
        /* Fast path: verbatim payload, no JSON parsing. Fits the cap by the check above; made
         * in one allocation of its size, not grown through doubling reallocations. */
        rc = buf_ensure(&out->body, head.len + in->payload_len + tail.len + 2);
        if (!rc)
            rc = buf_append(&out->body, head.data, head.len);
        if (!rc)
            rc = buf_append(&out->body, in->payload, in->payload_len);
        if (!rc)
            rc = buf_append(&out->body, tail.data, tail.len);
        if (!rc)
            rc = buf_puts(&out->body, "}}");
        if (rc)
            set_err(err, errsz, "dispatch body: out of memory");
    } else {
        rc = build_trimmed(in, budget, &head, &tail, out, err, errsz);
    }
    buf_free(&head);
    buf_free(&tail);
    if (rc) {
        buf_reset(&out->body);
        buf_reset(&out->trimmed_note);
        out->trimmed = false;
    }
    return rc;
}

bool dispatch_row_verbatim(const crcr_config *cfg, const dispatch_src *src)
{
    if ((src->pair && src->pair_len) || !src->payload || src->payload_len == 0 ||
        !len_ok(src->event, CRCR_EVENT_NAME_MAX, false) ||
        !len_ok(src->delivery_id, CRCR_DELIVERY_ID_MAX, false))
        return false;
    size_t budget = cfg->dispatch_budget ? cfg->dispatch_budget : CRCR_DISPATCH_BUDGET_DEFAULT;
    /* dispatch_build's head and tail at their longest: every character of the event (twice)
     * and of the delivery id quoted as \u00XX, the callback token (hex) as it is. */
    static const char fixed[] = "{\"event_type\":,\"client_payload\":{\"event_type\":,"
                                "\"delivery_id\":,\"payload\":,\"callback_token\":}}";
    size_t envelope = sizeof(fixed) - 1 + 2 * (6 * strlen(src->event) + 2) +
                      (6 * strlen(src->delivery_id) + 2) + (CBTOKEN_SIZE - 1 + 2);
    return src->payload_len <= budget && envelope <= budget - src->payload_len;
}

crcr_err dispatch_row_body(const crcr_config *cfg, const dispatch_src *src, dispatch_output *out,
                           char *err, size_t errsz)
{
    depends_on_pair pair;
    buf_t dep;
    buf_init(&dep, DISPATCH_DEPENDS_ON_MAX);
    bool paired = depends_on_record_parse(src->pair, src->pair_len, &pair) && pair.resolved &&
                  depends_on_payload(&pair, &dep) == CRCR_OK;
    char token[CBTOKEN_SIZE];
    cbtoken_make_pair(cfg->app_secret ? cfg->app_secret : "",
                      src->delivery_id ? src->delivery_id : "", src->target, src->head_sha,
                      src->pr_number, paired ? pair.number : 0, paired ? pair.head_sha : NULL,
                      token);
    dispatch_input in = {
        .event = src->event ? src->event : "",
        .delivery_id = src->delivery_id ? src->delivery_id : "",
        .payload = src->payload,
        .payload_len = src->payload_len,
        .callback_token = token,
        .depends_on = paired ? buf_cstr(&dep) : NULL,
        .budget = cfg->dispatch_budget,
    };
    crcr_err e = dispatch_build(&in, out, err, errsz);
    OPENSSL_cleanse(token, sizeof(token));
    buf_free(&dep);
    return e;
}
