/* ids.c - identifier rules; see ids.h. */
#include "ids.h"

#include <string.h>

#include "crcr_limits.h"

static bool alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int ids_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool ids_delivery_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n >= CRCR_DELIVERY_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!alnum(c) && c != '-' && c != '_' && c != '.' && c != ':')
            return false;
    }
    return true;
}

bool ids_run_id_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= CRCR_RUN_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    }
    return true;
}

bool ids_owner_valid(const char *s, size_t n)
{
    if (n == 0 || n > 39)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!alnum(s[i]) && s[i] != '-')
            return false;
    }
    return true;
}

bool ids_repo_name_valid(const char *s, size_t n)
{
    if (n == 0 || n > 100 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    }
    return true;
}

bool ids_full_name_valid(const char *s)
{
    const char *slash = s ? strchr(s, '/') : NULL;
    if (!slash)
        return false;
    return ids_owner_valid(s, (size_t)(slash - s)) &&
           ids_repo_name_valid(slash + 1, strlen(slash + 1));
}

bool ids_sha_valid(const char *s)
{
    size_t n = 0;
    for (; s && s[n]; n++) {
        if (ids_hex_value(s[n]) < 0)
            return false;
    }
    return n == 40 || n == 64;
}

bool ids_decimal(const char *s, size_t n, size_t max_digits, int64_t *out)
{
    if (n == 0 || n > max_digits || max_digits > IDS_DECIMAL_DIGITS_MAX)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

bool ids_pr_number(const char *s, size_t n, int64_t *out)
{
    int64_t v = 0;
    if (!ids_decimal(s, n, IDS_PR_DIGITS_MAX, &v) || v <= 0)
        return false;
    *out = v;
    return true;
}
