/*
 * cli_config.c - `crcr config [--config FILE] [--check]`.
 *
 * Without --check it prints the effective configuration (config_describe: secrets as
 * (set)/(unset)) and checks nothing beyond what loading itself refuses; it says so on stderr.
 * With --check it runs what `crcr serve` checks before it listens, and lists every problem at
 * once instead of the first: every value (config_check), the settings serve requires
 * (config_require_serve), and the local files serve loads at start - ALLOWLIST_FILE and
 * CI_PROVIDERS_FILE, parsed by the same document sources as serve's - and, for an absolute
 * sqlite: path, that its directory exists (serve creates the file, never the directory).
 * Nothing is fetched (ALLOWLIST_URL, CI_PROVIDERS_URL) and no store is opened or created.
 *
 * Like `crcr serve`, it reads a file only with --config (no default file: it shows what serve
 * with the same arguments would use); the environment overrides the file.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ci_providers.h"

static const char USAGE[] = "usage: crcr config [--config FILE] [--check]\n";

/* Longest directory of a SQLite store that is looked at (PATH_MAX on Linux). */
#define CLI_CONFIG_DIR_MAX 4096u

/* Problems found so far, printed as they come (config_problem_fn). */
typedef struct check_ctx {
    unsigned n;
} check_ctx;

static void print_problem(void *ctx, const char *problem)
{
    check_ctx *c = ctx;
    fprintf(stderr, "crcr: %s\n", problem);
    c->n++;
}

/* Loads the document source `src` (a local file) as serve does at start. Returns its count of
 * entries (allowlist repos, mapped pipelines) or -1 after reporting `var`: the reason. */
static long load_file_source(doc_source *src, const char *var, const char *err_new, check_ctx *c)
{
    char err[512] = "";
    if (!src) {
        fprintf(stderr, "crcr: %s: %s\n", var, err_new[0] ? err_new : "out of memory");
        c->n++;
        return -1;
    }
    if (allowlist_source_load(src, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, "crcr: %s: %s\n", var, err);
        c->n++;
        return -1;
    }
    allowlist_status st;
    allowlist_source_status(src, &st);
    return (long)st.repos;
}

/* An absolute sqlite: store path whose directory does not exist is a problem. */
static void check_store_dir(const crcr_config *cfg, check_ctx *c)
{
    const char *uri = cfg->store_uri;
    if (!uri || strncmp(uri, "sqlite:", 7) != 0 || uri[7] != '/')
        return;
    const char *path = uri + 7;
    const char *slash = strrchr(path, '/');
    char dir[CLI_CONFIG_DIR_MAX];
    size_t n = (size_t)(slash - path);
    if (n == 0 || n >= sizeof(dir))
        return;
    memcpy(dir, path, n);
    dir[n] = '\0';
    struct stat st;
    int se = stat(dir, &st) == 0 ? 0 : errno;
    if (!se && S_ISDIR(st.st_mode))
        return;
    if (se == EACCES)
        fprintf(stderr,
                "crcr: CRCR_STORE: this user may not look into %s (run the check as "
                "root or as the relay's user)\n",
                dir);
    else
        fprintf(stderr,
                "crcr: CRCR_STORE: the directory %s does not exist (crcr serve creates the "
                "store file, not its directory)\n",
                dir);
    c->n++;
}

/* --check: every problem on stderr and exit 2, or a summary on stdout and exit 0. */
static int check(const char *file)
{
    check_ctx c = {0};
    crcr_config cfg;
    config_check(&cfg, file, config_getenv, NULL, print_problem, &c);
    cli_config_unreadable_hint(file);
    long repos = -1, pipelines = -1;
    if (cfg.allowlist_file) {
        char err[512] = "";
        allowlist_source *src = allowlist_source_new(&cfg, NULL, err, sizeof(err));
        repos = load_file_source(src, "ALLOWLIST_FILE", err, &c);
        allowlist_source_free(src);
    }
    if (cfg.ci_providers_file) {
        char err[512] = "";
        doc_source *src = ci_providers_source_new(&cfg, NULL, err, sizeof(err));
        pipelines = load_file_source(src, "CI_PROVIDERS_FILE", err, &c);
        allowlist_source_free(src);
    }
    check_store_dir(&cfg, &c);

    const char *what = file ? file : "the environment";
    if (c.n > 0) {
        fprintf(stderr, "crcr config: %u problem%s in %s%s: crcr serve would not start\n", c.n,
                c.n == 1 ? "" : "s", what, file ? " and the environment" : "");
        config_free(&cfg);
        return 2;
    }
    printf("crcr config: %s%s: complete, crcr serve would start with it\n", what,
           file ? " and the environment" : "");
    printf("  mode       %s\n", cfg.dry_run ? "dry-run (no GITHUB_APP_ID and private key: "
                                              "verified and stored, nothing sent to GitHub)"
                                            : "github-app");
    printf("  upstream   %s\n", cfg.upstream_repo);
    if (cfg.allowlist_file)
        printf("  allowlist  %s (%ld repo%s)\n", cfg.allowlist_file, repos, repos == 1 ? "" : "s");
    else
        printf("  allowlist  %s (fetched at start, not by this check)\n", cfg.allowlist_url);
    if (cfg.ci_providers_file)
        printf("  providers  %s (%ld pipeline%s)\n", cfg.ci_providers_file, pipelines,
               pipelines == 1 ? "" : "s");
    else if (cfg.ci_providers_url)
        printf("  providers  %s (fetched at start, not by this check)\n", cfg.ci_providers_url);
    buf_t b;
    buf_init(&b, 8192);
    config_redact_store(cfg.store_uri, &b);
    printf("  store      %s (not opened by this check)\n", buf_cstr(&b));
    buf_free(&b);
    printf("  listen     %s:%d\n", cfg.listen_host, cfg.listen_port);
    printf("  callbacks  callback_token %s\n",
           cfg.callback_token == CRCR_CB_TOKEN_REQUIRED ? "required" : "optional");
    config_free(&cfg);
    return 0;
}

/* Without --check: the values, and a word that they were not checked. */
static int describe(const char *file)
{
    crcr_config cfg;
    char err[512] = "";
    if (config_load(&cfg, file, config_getenv, NULL, err, sizeof(err)) != CRCR_OK) {
        fprintf(stderr, "crcr: %s\n", err);
        cli_config_unreadable_hint(file);
        return 2;
    }
    buf_t b;
    buf_init(&b, 64 * 1024);
    config_describe(&cfg, &b);
    fputs(buf_cstr(&b), stdout);
    fflush(stdout);
    buf_free(&b);
    config_free(&cfg);
    fprintf(stderr,
            "crcr config: the values of %s%s; not checked for what crcr serve requires: "
            "crcr config --check%s%s lists every problem\n",
            file ? file : "the environment", file ? " and the environment" : "",
            file ? " --config " : "", file ? file : "");
    return 0;
}

int config_main(int argc, char **argv)
{
    const char *given = NULL;
    bool do_check = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) {
            do_check = true;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc && !given) {
            given = argv[++i];
        } else {
            if (strcmp(argv[i], "--config") == 0)
                fprintf(stderr, "crcr config: --config %s\n",
                        given ? "given twice" : "needs a value");
            else
                fprintf(stderr, "crcr config: unknown %s '%s'\n",
                        argv[i][0] == '-' ? "option" : "argument", argv[i]);
            fputs(USAGE, stderr);
            return 2;
        }
    }
    return do_check ? check(given) : describe(given);
}
