/* cbtoken.c - callback tokens; see cbtoken.h. */
#include "cbtoken.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "buf.h"
#include "crcr_limits.h"

static const char KEY_LABEL[] = "crcr callback token key v1";

void cbtoken_make(const char *secret, const char *delivery_id, const char *repo,
                  const char *head_sha, int64_t pr_number, char out[CBTOKEN_SIZE])
{
    cbtoken_make_pair(secret, delivery_id, repo, head_sha, pr_number, 0, NULL, out);
}

void cbtoken_make_pair(const char *secret, const char *delivery_id, const char *repo,
                       const char *head_sha, int64_t pr_number, int64_t pair_number,
                       const char *pair_sha, char out[CBTOKEN_SIZE])
{
    unsigned char key[32], mac[32];
    unsigned int klen = 0, mlen = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)KEY_LABEL,
         sizeof(KEY_LABEL) - 1, key, &klen);
    char lower[CRCR_REPO_NAME_MAX];
    size_t n = 0;
    for (; repo[n] && n + 1 < sizeof(lower); n++)
        lower[n] = (char)tolower((unsigned char)repo[n]);
    lower[n] = '\0';
    buf_t m;
    buf_init(&m, 4096);
    buf_printf(&m, "v1\n%s\n%s\n%s\n%lld", delivery_id, lower, head_sha ? head_sha : "",
               (long long)pr_number);
    if (pair_number > 0)
        buf_printf(&m, "\npair\n%lld\n%s", (long long)pair_number, pair_sha ? pair_sha : "");
    HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)buf_cstr(&m), m.len, mac, &mlen);
    buf_free(&m);
    memcpy(out, "v1.", 3);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 3 + 2 * i, 3, "%02x", mac[i]);
    OPENSSL_cleanse(key, sizeof(key));
}

bool cbtoken_verify(const char *secret, const char *previous, const char *token,
                    const char *delivery_id, const char *repo, const char *head_sha,
                    int64_t pr_number)
{
    return cbtoken_verify_pair(secret, previous, token, delivery_id, repo, head_sha, pr_number, 0,
                               NULL);
}

bool cbtoken_verify_pair(const char *secret, const char *previous, const char *token,
                         const char *delivery_id, const char *repo, const char *head_sha,
                         int64_t pr_number, int64_t pair_number, const char *pair_sha)
{
    if (!token || strlen(token) != CBTOKEN_SIZE - 1)
        return false;
    char want[CBTOKEN_SIZE];
    bool ok = false;
    if (secret) {
        cbtoken_make_pair(secret, delivery_id, repo, head_sha, pr_number, pair_number, pair_sha,
                          want);
        ok = CRYPTO_memcmp(want, token, CBTOKEN_SIZE - 1) == 0;
    }
    if (!ok && previous) {
        cbtoken_make_pair(previous, delivery_id, repo, head_sha, pr_number, pair_number, pair_sha,
                          want);
        ok = CRYPTO_memcmp(want, token, CBTOKEN_SIZE - 1) == 0;
    }
    return ok;
}
