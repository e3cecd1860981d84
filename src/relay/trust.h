/*
 * trust.h - repository identities pinned at their first callback (issue 12, contract §6
 * `crcr trust`): what an operator sees and resets.
 *
 * The OIDC `repository` claim is a name; names can change hands (a deleted and re-created
 * repository, an organisation name released and claimed by someone else). The first accepted
 * callback of a repository records its immutable `repository_id` and `repository_owner_id`
 * (callback.c, store_identity_pin); a later token with the same name and other ids is refused
 * with 403 until an operator, having checked who owns the name now, resets the pin:
 *
 *   crcr trust list [--config FILE]                 the pins, one per line
 *   crcr trust reset OWNER/REPO [--config FILE]     forget one (the next callback pins again)
 *
 * and the same over the admin API (ops.c): GET /api/v1/admin/trust and
 * POST /api/v1/admin/trust/OWNER/REPO/reset.
 */
#ifndef CRCR_TRUST_H
#define CRCR_TRUST_H

#include "buf.h"
#include "err.h"
#include "store.h"

/* Appends {"pins":[{"repo":..,"repository_id":..,"owner_id":..,"pinned_at":"ISO-8601"},..]}. */
crcr_err trust_doc(store *st, buf_t *out);

#endif
