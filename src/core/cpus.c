/* cpus.c - CPUs available to this process; see cpus.h. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "cpus.h"

#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Longest cgroup path and file read here. */
#define CPUS_PATH_MAX 1024
#define CPUS_FILE_MAX 4096

/* Reads a small text file into buf (NUL-terminated); false when it cannot. */
static bool read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

/* CPUs allowed by a quota of `quota` per `period` (rounded up), 0 for none. */
static unsigned from_quota(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long n = (quota + period - 1) / period;
    return n > 0 && n < 100000 ? (unsigned)n : 0;
}

/* The cgroup v2 path of this process ("0::/path" line), into out; false when there is none. */
static bool v2_path(const char *proc_cgroup, char *out, size_t cap)
{
    for (const char *line = proc_cgroup; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 3 && strncmp(line, "0::", 3) == 0 && len - 3 < cap) {
            memcpy(out, line + 3, len - 3);
            out[len - 3] = '\0';
            return true;
        }
        line = end ? end + 1 : NULL;
    }
    return false;
}

static unsigned quota_cpus(const char *proc_cgroup, const char *root)
{
    char path[CPUS_PATH_MAX + 64], rel[CPUS_PATH_MAX], text[CPUS_FILE_MAX];
    if (proc_cgroup && v2_path(proc_cgroup, rel, sizeof(rel))) {
        /* v2: "max 100000" (no quota) or "QUOTA PERIOD"; the nearest limit up the tree wins. */
        unsigned best = 0;
        for (;;) {
            snprintf(path, sizeof(path), "%s%s/cpu.max", root, strcmp(rel, "/") ? rel : "");
            long long quota = 0, period = 0;
            if (read_small(path, text, sizeof(text)) && strncmp(text, "max", 3) != 0) {
                char *end = NULL;
                quota = strtoll(text, &end, 10);
                period = end ? strtoll(end, NULL, 10) : 0;
                unsigned n = from_quota(quota, period);
                if (n && (!best || n < best))
                    best = n;
            }
            char *slash = strrchr(rel, '/');
            if (!slash || slash == rel)
                break;
            *slash = '\0';
        }
        if (best)
            return best;
    }
    /* v1 (the cpu controller mounted on its own). */
    long long quota = 0, period = 0;
    snprintf(path, sizeof(path), "%s/cpu/cpu.cfs_quota_us", root);
    if (read_small(path, text, sizeof(text)))
        quota = strtoll(text, NULL, 10);
    snprintf(path, sizeof(path), "%s/cpu/cpu.cfs_period_us", root);
    if (read_small(path, text, sizeof(text)))
        period = strtoll(text, NULL, 10);
    return from_quota(quota, period);
}

unsigned cpus_compute(unsigned affinity, const char *proc_cgroup, const char *cgroup_root)
{
    unsigned n = affinity ? affinity : 1;
    unsigned q = quota_cpus(proc_cgroup, cgroup_root);
    return q && q < n ? q : n;
}

unsigned cpus_available(void)
{
    cpu_set_t set;
    unsigned affinity = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        affinity = (unsigned)CPU_COUNT(&set);
    if (!affinity) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        affinity = n > 0 ? (unsigned)n : 1;
    }
    char proc[CPUS_FILE_MAX];
    bool have = read_small("/proc/self/cgroup", proc, sizeof(proc));
    return cpus_compute(affinity, have ? proc : NULL, "/sys/fs/cgroup");
}
