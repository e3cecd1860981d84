/*
 * gh_contents.h - one file of a GitHub repository, named by a blob URL
 * (https://github.com/<owner>/<repo>/blob/<ref>/<path>, or https://HOST/... on GitHub Enterprise
 * Server, whose API is https://HOST/api/v3) and read through the contents API
 * GET {GITHUB_API_URL}/repos/<owner>/<repo>/contents/<path>?ref=<ref> (JSON answer, base64
 * content) with If-None-Match. Used by the allowlist and the CI providers map
 * (allowlist_source.h).
 */
#ifndef CRCR_GH_CONTENTS_H
#define CRCR_GH_CONTENTS_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"
#include "github.h"

/* Longest blob URL looked at, and longest path inside the repo (GitHub's own limit on a path is
 * 4096 bytes). */
#define GH_BLOB_URL_MAX 2048u
#define GH_BLOB_PATH_MAX 1024u
/* Longest ETag sent back in If-None-Match. */
#define GH_CONTENTS_ETAG_MAX 256u

/* Checks that `url` (given in variable `var`, named in the messages) is a GitHub blob URL and
 * splits it into owner/repo, the ref and the path (decoded; caller buffers). 0 on success, -1 with
 * a message in err otherwise. The URL is echoed in the message unless it might hold
 * credentials. */
int gh_blob_url_parse(const char *var, const char *url, char *owner_repo, size_t orsz, char *ref,
                      size_t refsz, char *path, size_t pathsz, char *err, size_t errsz);

/* The same for blob URLs on the web host `web_url` (config_web_url: https://HOST on GitHub
 * Enterprise Server; NULL: https://github.com). Scheme, host and port must be the web host's. */
int gh_blob_url_parse_on(const char *var, const char *url, const char *web_url, char *owner_repo,
                         size_t orsz, char *ref, size_t refsz, char *path, size_t pathsz, char *err,
                         size_t errsz);

typedef enum { GH_CONTENTS_NEW, GH_CONTENTS_UNCHANGED, GH_CONTENTS_FAILED } gh_contents_result;

/* One read. Strings are borrowed for the call. */
typedef struct gh_contents_req {
    gh_client *gh;
    bool anonymous; /* no installation token (dry-run); else one, anonymous after a
                       refused token (the file is public upstream) */
    const char *owner_repo, *ref, *path;
    const char *if_none_match;  /* the ETag of the copy in hand, or NULL/"" */
    size_t max;                 /* largest file: a larger one comes as max + 1 bytes (the caller's
                                   parser then reports the size) */
    const char *fallback_event; /* log event when the token is refused and the read retried */
} gh_contents_req;

/* Reads the file into `text` (GH_CONTENTS_NEW, with its ETag in `etag`), or learns that it did
 * not change (304: GH_CONTENTS_UNCHANGED), or fails with *rc and a reason in `why`. */
gh_contents_result gh_contents_fetch(const gh_contents_req *q, buf_t *text, char *etag,
                                     size_t etagsz, crcr_err *rc, char *why, size_t whysz);

#endif
