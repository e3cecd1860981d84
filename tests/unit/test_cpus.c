/* Unit tests for cpus.c: the CPU count follows affinity and cgroup quotas. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpus.h"

static char g_root[256];

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s%s", g_root, rel);
    /* make the parent directories */
    for (char *p = path + strlen(g_root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    snprintf(g_root, sizeof(g_root), "/tmp/crcr-cpus-XXXXXX");
    return mkdtemp(g_root) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", g_root);
    return system(cmd) == 0 ? 0 : -1;
}

static void no_quota_means_the_affinity(void **state)
{
    assert_int_equal(cpus_compute(64, NULL, g_root), 64);
    put("/relay/cpu.max", "max 100000\n");
    assert_int_equal(cpus_compute(64, "0::/relay\n", g_root), 64);
    assert_int_equal(cpus_compute(0, NULL, g_root), 1); /* never 0 */
}

static void a_v2_quota_narrows_and_rounds_up(void **state)
{
    put("/kubepods/pod1/relay/cpu.max", "150000 100000\n");
    assert_int_equal(cpus_compute(64, "0::/kubepods/pod1/relay\n", g_root), 2);
    /* A tighter limit up the tree wins. */
    put("/kubepods/pod1/cpu.max", "100000 100000\n");
    assert_int_equal(cpus_compute(64, "0::/kubepods/pod1/relay\n", g_root), 1);
    /* The affinity is tighter than the quota. */
    assert_int_equal(cpus_compute(1, "0::/kubepods/pod1/relay\n", g_root), 1);
    /* Other lines (v1 controllers) are skipped. */
    assert_int_equal(
        cpus_compute(64, "12:cpuset:/\n3:memory:/x\n0::/kubepods/pod1/relay\n", g_root), 1);
}

static void a_v1_quota_counts_too(void **state)
{
    put("/cpu/cpu.cfs_quota_us", "300000\n");
    put("/cpu/cpu.cfs_period_us", "100000\n");
    assert_int_equal(cpus_compute(16, "4:cpu,cpuacct:/docker/abc\n", g_root), 3);
    put("/cpu/cpu.cfs_quota_us", "-1\n"); /* unlimited */
    assert_int_equal(cpus_compute(16, "4:cpu,cpuacct:/docker/abc\n", g_root), 16);
}

static void this_process_has_at_least_one(void **state)
{
    unsigned n = cpus_available();
    assert_true(n >= 1);
    assert_true(n <= (unsigned)sysconf(_SC_NPROCESSORS_CONF) || n <= 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(no_quota_means_the_affinity, setup, teardown),
        cmocka_unit_test_setup_teardown(a_v2_quota_narrows_and_rounds_up, setup, teardown),
        cmocka_unit_test_setup_teardown(a_v1_quota_counts_too, setup, teardown),
        cmocka_unit_test(this_process_has_at_least_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
