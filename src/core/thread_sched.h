/*
 * thread_sched.h - how the relay's threads ask the scheduler for what their work needs.
 *
 * Two kinds of thread: the GitHub client's loop, whose short turns every GitHub request waits for,
 * asks for a short time slice (thread_sched_short_slice); the threads that work through queues
 * (the HTTP server's I/O threads and handler pools, the outbox workers) are marked as throughput
 * work (thread_sched_batch). Neither needs a privilege; where the kernel refuses or does not know
 * a request, the thread keeps the default and nothing else changes.
 */
#ifndef CRCR_THREAD_SCHED_H
#define CRCR_THREAD_SCHED_H

#include <stdbool.h>

/* Marks the calling thread SCHED_BATCH, keeping its nice value: woken, it does not preempt the
 * thread running on its CPU, it waits for that thread's slice to end or for it to sleep. Returns
 * whether the kernel took it. */
bool thread_sched_batch(void);

/* Asks for a time slice of `ns` nanoseconds for the calling thread (Linux 6.12+ EEVDF, a
 * SCHED_OTHER thread's sched_attr.sched_runtime; the kernel accepts 0.1 ms to 100 ms), keeping
 * SCHED_OTHER and its nice value. Returns whether the kernel took it (older kernels refuse). */
bool thread_sched_short_slice(unsigned long long ns);

#endif
