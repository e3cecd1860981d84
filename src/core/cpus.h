/*
 * cpus.h - how many CPUs this process may use: the scheduler affinity mask, narrowed by a cgroup
 * CPU quota (v2 `cpu.max`, or v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`), rounded up. Thread and
 * connection-pool defaults follow it, so that a container limited to 2 CPUs on a 64-CPU node
 * sizes itself for 2 (docs/deployment.md has the formula).
 */
#ifndef CRCR_CPUS_H
#define CRCR_CPUS_H

/* The CPUs of this process (at least 1). */
unsigned cpus_available(void);

/* The same computation over explicit inputs, for tests: `affinity` CPUs, the text of
 * /proc/self/cgroup, and the cgroup file system mounted at `cgroup_root` ("/sys/fs/cgroup"). */
unsigned cpus_compute(unsigned affinity, const char *proc_cgroup, const char *cgroup_root);

#endif
