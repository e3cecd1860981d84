/*
 * json_select_bench.c - CPU time of jv_parse() against jv_parse_select() on one webhook body.
 *
 * Not a test: it prints figures and never fails on them (bench/RESULTS.md, "JSON: selective
 * parse", has the command). Usage: json_select_bench FILE [ITERATIONS] (default 2000).
 * The selection is webhook_handle()'s. The two parsers run in alternating rounds of a tenth of
 * the iterations each, so that load from other work on the machine hits both alike; the figure
 * per parser is its total process CPU time divided by its iterations, and the fastest round is
 * printed too. The result of each parser is checked against the other before timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "webhook.h"

#define BENCH_MAX_FILE (64u * 1024u * 1024u)
#define BENCH_ROUNDS 10

#define paths webhook_json_paths
#define N_PATHS webhook_json_paths_n

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads the file into a malloc'ed buffer (caller frees), NULL on error or past BENCH_MAX_FILE. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = malloc(BENCH_MAX_FILE);
    size_t n = b ? fread(b, 1, BENCH_MAX_FILE, f) : 0;
    int full = b && !feof(f);
    fclose(f);
    if (!b || full) {
        free(b);
        return NULL;
    }
    *len = n;
    return b;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [ITERATIONS]\n", argv[0]);
        return 2;
    }
    long iters = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
    if (iters < BENCH_ROUNDS)
        iters = BENCH_ROUNDS;
    size_t len = 0;
    char *text = slurp(argv[1], &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    jv *full = jv_parse(text, len, NULL, 0);
    jv *sel = jv_parse_select(text, len, paths, N_PATHS, NULL, 0);
    if (!full || !sel) {
        fprintf(stderr, "%s does not parse\n", argv[1]);
        return 2;
    }
    for (size_t k = 0; k < N_PATHS; k++) {
        const jv *a = jv_path(full, paths[k]), *b = jv_path(sel, paths[k]);
        if ((a || b) && !jv_equal(a, b)) {
            fprintf(stderr, "path %s differs\n", paths[k]);
            return 1;
        }
    }
    jv_free(full);
    jv_free(sel);

    long per_round = iters / BENCH_ROUNDS;
    double total[2] = {0, 0}, best[2] = {1e9, 1e9};
    for (int r = 0; r < BENCH_ROUNDS; r++) {
        for (int which = 0; which < 2; which++) {
            double t0 = cpu_now();
            for (long i = 0; i < per_round; i++) {
                jv *v = which ? jv_parse_select(text, len, paths, N_PATHS, NULL, 0)
                              : jv_parse(text, len, NULL, 0);
                jv_free(v);
            }
            double dt = cpu_now() - t0;
            total[which] += dt;
            if (dt < best[which])
                best[which] = dt;
        }
    }
    long n = per_round * BENCH_ROUNDS;
    double us[2] = {total[0] / (double)n * 1e6, total[1] / (double)n * 1e6};
    printf("file %s, %zu bytes, %ld iterations each\n", argv[1], len, n);
    printf("jv_parse         %8.1f us/parse (best round %.1f)\n", us[0],
           best[0] / (double)per_round * 1e6);
    printf("jv_parse_select  %8.1f us/parse (best round %.1f)\n", us[1],
           best[1] / (double)per_round * 1e6);
    printf("ratio            %8.1fx\n", us[0] / us[1]);
    free(text);
    return 0;
}
