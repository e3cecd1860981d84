/*
 * clock.h - the one time source of crcr: wall time for stored timestamps, monotonic time for
 * intervals, and a test control that moves both.
 *
 * Every timer of the relay (sweeper, token expiry, retry backoff, rate windows, leases, the
 * reconciler, the allowlist TTL) reads these two functions, so a test can move time instead of
 * waiting for it. The control exists only in a build configured with CRCR_TEST_HOOKS=ON (the
 * test build of scripts/build.sh; the Debian package, the container and the benchmarks build
 * without it) and is reachable only through the environment of the process, never from the
 * network: `CRCR_TEST_CLOCK_FILE=PATH` names a file whose first 8 bytes are a signed, native
 * byte order offset in milliseconds that is added to both clocks. The test writes the file (it
 * is mapped, so a write is seen at once by every process that mapped it: two relays and the
 * commands run against their store move together). A binary built without the hooks refuses
 * to start when the variable is set, so a test cannot silently run on the real clock.
 *
 * What stays on the real clock on purpose (clock_real_mono_us): log timestamps, the HTTP server's
 * request and header deadlines (real time is their subject: a client that is slow in real time),
 * libcurl's transfer timers (http_loop), the waits of the PostgreSQL pool, and the few
 * milliseconds an outbox claim waits for GitHub's answers to free more job slots (outbox.c).
 */
#ifndef CRCR_CLOCK_H
#define CRCR_CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Milliseconds since the Unix epoch (CLOCK_REALTIME, plus the test offset). */
int64_t clock_now_ms(void);
/* Milliseconds on CLOCK_MONOTONIC (plus the test offset), for measuring intervals. */
int64_t clock_mono_ms(void);
/* Microseconds on CLOCK_MONOTONIC without the test offset: for what stays on the real clock. */
int64_t clock_real_mono_us(void);
/* Formats an epoch-ms time as ISO-8601 UTC "2026-11-30T01:02:03Z" into out (>= 21 bytes). */
void clock_iso8601(int64_t ms, char *out, unsigned outsz);

/* Longest real-time wait of a timer loop while the test control is on, so that moved time is
 * noticed within it. */
#define CLOCK_TEST_SLICE_MS 20

/* Maps CRCR_TEST_CLOCK_FILE when it is set. Returns 0 (also when it is not set), or -1 with a
 * message in err: the file cannot be mapped, or this build has no test hooks. Call once, before
 * any thread starts. */
int clock_test_control_init(char *err, size_t errsz);
/* True when the test control is on (a mapped offset file). */
bool clock_test_control_on(void);
/* A timer's wait, in real milliseconds, for a deadline `ms` away on these clocks: `ms` itself,
 * or at most CLOCK_TEST_SLICE_MS while the test control is on. */
int64_t clock_wait_ms(int64_t ms);
/* Sleeps until clock_mono_ms() reaches `deadline_ms`: on the real clock, that long; while the
 * test control is on, in slices of CLOCK_TEST_SLICE_MS, so that a moved clock ends the sleep.
 * For loops that wait out a delay of their own (the retries of `crcr report`). */
void clock_sleep_until(int64_t deadline_ms);
/* True when this binary was built with the test hooks (`crcr version` says so). */
bool clock_test_hooks_built(void);
#ifdef CRCR_TEST_HOOKS
/* Unit tests: moves this process's clocks by `ms` from the real ones (replaces a mapped file). */
void clock_test_set_offset_ms(int64_t ms);
#endif

#endif
