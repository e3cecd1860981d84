/*
 * thread_sched.c - SCHED_BATCH for queue workers, a short slice for the GitHub loop; see
 * thread_sched.h.
 *
 * Why SCHED_BATCH: on 2 CPUs the relay's threads hand each webhook on several times (an HTTP I/O
 * thread, a handler, the group commit, an outbox worker, the GitHub loop), and with both CPUs
 * busy each hand-over woke a thread that preempted the one running, which then waited to run on:
 * in the App-mode ingest (bench, c64, 4 targets) 6.2 context switches per webhook, 2.7 of them
 * involuntary, with the kernel's scheduling and wake-up work about a sixth of the relay's samples
 * (on this paravirtualised host the interrupt enabling around them alone was 10 %). A woken
 * SCHED_BATCH thread does not preempt: it runs when the running thread sleeps or its slice ends,
 * so the threads that work through queues finish what they hold and the woken one then finds
 * more queued. The same load with the queue workers marked: 4.2-5.1 switches per webhook, and
 * the dry-run ingest's 3.5-5.2 became 2.3-2.5 (bench/RESULTS.md has the series). An idle CPU
 * still runs a woken thread at once: latency changes only when both CPUs are busy (the warm
 * fan-out to 100 repositories answered in the same 104-107 ms).
 */
#define _GNU_SOURCE /* SCHED_BATCH */
#include "thread_sched.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

bool thread_sched_batch(void)
{
    /* The nice value is not a parameter of sched_setscheduler: Linux keeps it for SCHED_BATCH. */
    struct sched_param sp = {.sched_priority = 0};
    return pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp) == 0;
}

/* struct sched_attr of sched_setattr(2), its first version (48 bytes): glibc 2.36 has neither
 * the call nor the type, and <linux/sched/types.h> clashes with <sched.h>. */
typedef struct sched_attr_v1 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
} sched_attr_v1;

bool thread_sched_short_slice(unsigned long long ns)
{
#ifdef SYS_sched_setattr
    sched_attr_v1 a = {.size = sizeof(a), .policy = SCHED_OTHER, .runtime = ns};
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, 0); /* this thread's (Linux: per thread) */
    if (errno == 0)
        a.nice = nice;
    return syscall(SYS_sched_setattr, 0, &a, 0) == 0;
#else
    (void)ns;
    return false;
#endif
}
