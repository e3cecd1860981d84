/* cli_allowlist.c - `crcr allowlist check FILE`: the parse of allowlist.h with FILE:LINE:COL
 * messages, or a summary of the levels. */
#include "allowlist.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "cli.h"
#include "crcr_limits.h"

/* Repos listed per level by `crcr allowlist check` before "... and N more". */
#define ALLOWLIST_SUMMARY_MAX 25u

static void print_oncalls(FILE *f, const allowlist_entry *e)
{
    if (!e->n_oncalls)
        return;
    fputs("  oncalls: ", f);
    for (size_t i = 0; i < e->n_oncalls; i++)
        fprintf(f, "%s%s", i ? ", " : "", e->oncalls[i]);
}

static void print_summary(FILE *f, const char *file, const allowlist *al)
{
    fprintf(f, "%s: OK, %zu repo%s\n", file, allowlist_count(al),
            allowlist_count(al) == 1 ? "" : "s");
    for (int l = 1; l <= 4; l++) {
        size_t count = 0;
        for (size_t i = 0; i < allowlist_count(al); i++)
            count += allowlist_at(al, i)->level == (crcr_level)l;
        if (l == 3)
            fprintf(f, "L3: %zu repo%s in %zu device%s\n", count, count == 1 ? "" : "s",
                    allowlist_device_count(al), allowlist_device_count(al) == 1 ? "" : "s");
        else
            fprintf(f, "L%d: %zu repo%s\n", l, count, count == 1 ? "" : "s");
        size_t shown = 0;
        const char *device = NULL;
        for (size_t i = 0; i < allowlist_count(al) && shown < ALLOWLIST_SUMMARY_MAX; i++) {
            const allowlist_entry *e = allowlist_at(al, i);
            if (e->level != (crcr_level)l)
                continue;
            if (e->device && e->device != device) {
                device = e->device;
                fprintf(f, "  %s (label ciflow/crcr/%s):\n", device, device);
            }
            fprintf(f, "%s  %s", e->device ? "  " : "", e->repo);
            print_oncalls(f, e);
            fputc('\n', f);
            shown++;
        }
        if (count > shown)
            fprintf(f, "  ... and %zu more\n", count - shown);
    }
}

int allowlist_check_main(int argc, char **argv)
{
    if (argc != 2 || !argv || !argv[0] || strcmp(argv[0], "check") != 0 || !argv[1] ||
        !argv[1][0] || argv[1][0] == '-') {
        if (argc >= 1 && argv && argv[0] && strcmp(argv[0], "check") != 0)
            fprintf(stderr, "crcr allowlist: unknown verb '%s'\n", argv[0]);
        else if (argc >= 2 && argv[1][0] == '-')
            fprintf(stderr, "crcr allowlist check: unknown option '%s'\n", argv[1]);
        else if (argc > 2)
            fprintf(stderr, "crcr allowlist check: unexpected argument '%s'\n", argv[2]);
        fputs("usage: crcr allowlist check FILE\n", stderr);
        return 2;
    }
    const char *file = argv[1];
    buf_t text, errors;
    /* One byte over the limit, so that the parser reports an oversize file. */
    buf_init(&text, CRCR_ALLOWLIST_MAX_BYTES + 1u);
    buf_init(&errors, 1024u * 1024u);
    crcr_err rc = buf_read_file(file, CRCR_ALLOWLIST_MAX_BYTES + 1u, &text);
    if (rc) {
        fprintf(stderr, "%s: cannot read: %s\n", file,
                rc == CRCR_E_IO ? strerror(errno) : crcr_strerror(rc));
        buf_free(&text);
        return 1;
    }
    allowlist *al = NULL;
    rc = allowlist_parse(text.data, text.len, &al, &errors);
    buf_free(&text);
    if (rc) {
        const char *s = buf_cstr(&errors);
        if (!*s)
            fprintf(stderr, "%s:1:1: %s\n", file, crcr_strerror(rc));
        while (*s) {
            const char *nl = strchr(s, '\n');
            size_t n = nl ? (size_t)(nl - s) : strlen(s);
            fprintf(stderr, "%s:%.*s\n", file, (int)n, s);
            s += n + (nl ? 1 : 0);
        }
        buf_free(&errors);
        return 1;
    }
    buf_free(&errors);
    print_summary(stdout, file, al);
    allowlist_free(al);
    return 0;
}
