/* clock.h - the two clocks crcr uses: wall time for stored timestamps, monotonic for timeouts. */
#ifndef CRCR_CLOCK_H
#define CRCR_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
int64_t clock_now_ms(void);
/* Milliseconds on CLOCK_MONOTONIC, for measuring intervals. */
int64_t clock_mono_ms(void);
/* Formats an epoch-ms time as ISO-8601 UTC "2026-11-30T01:02:03Z" into out (>= 21 bytes). */
void clock_iso8601(int64_t ms, char *out, unsigned outsz);

#endif
