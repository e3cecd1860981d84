/* ops.c - metrics and admin endpoints (issue 7); no routes yet. */
#include "ops.h"

size_t ops_routes(struct crcr_app *app, http_route *out, size_t max)
{
    (void)app;
    (void)out;
    (void)max;
    return 0;
}
