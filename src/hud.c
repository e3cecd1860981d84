/* hud.c - the HUD pages and API (issue 5); no routes yet. */
#include "hud.h"

size_t hud_routes(struct crcr_app *app, http_route *out, size_t max)
{
    (void)app;
    (void)out;
    (void)max;
    return 0;
}
