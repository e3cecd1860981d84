/* opts.c - command-line options; see opts.h. */
#include "opts.h"

#include <string.h>

int opts_take(int argc, char **argv, int *i, const char *name, const char **out)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *out = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *out = argv[++*i];
    return 1;
}
