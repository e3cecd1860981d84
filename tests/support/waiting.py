"""waiting - the one polling helper of the end-to-end suites (Python 3 stdlib only).

Tests await events (a request reached a fake, a row changed state, a metric moved), never a
stretch of real time. `wait_until` polls a predicate; its `timeout` only bounds how long a broken
relay can keep a test waiting, it is never what makes a test pass. When the event needs one of the
relay's timers to run out (a retry backoff, a lease, the sweeper's period, a TTL), the test moves
the relay's clock (testclock.TestClock) instead of waiting: pass `clock` and `step` and every poll
that finds the event missing moves the clock `step` seconds forward, so the timers fire at the
speed of the polls, whatever they are set to.

    r = wait_until(lambda: gh.dispatches(), 10)                        # an event
    wait_until(lambda: row_sent(), 10, clock=relay.clock, step=1.0)    # ... across a backoff

A predicate that runs a process (the CLI, psql) costs tens of ms of CPU per poll: poll it every
0.1 s (`interval`), not at the 50 ms default.

CRCR_TEST_TIMEOUT_SCALE (a number >= 1; scripts/test.sh sets 3 for a sanitizer build) stretches
every bound (`scaled`): a sanitizer build on a loaded 2-core machine does the same work several
times slower, and a bound only ends a broken test.
"""

import os
import time


def _scale():
    try:
        return max(1.0, float(os.environ.get("CRCR_TEST_TIMEOUT_SCALE") or 1))
    except ValueError:
        return 1.0


SCALE = _scale()


def scaled(seconds):
    """A bound of `seconds` as this run stretches it (CRCR_TEST_TIMEOUT_SCALE)."""
    return seconds * SCALE


def wait_until(pred, timeout=10.0, interval=0.05, clock=None, step=0.0):
    """Polls pred() until it returns a truthy value, which is returned. After `timeout` seconds
    of real time (stretched by CRCR_TEST_TIMEOUT_SCALE) returns the last (falsy) value instead.
    With `clock` and `step`, each poll that finds pred() falsy first moves `clock` forward by
    `step` seconds."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        if clock is not None and step:
            clock.advance(step)
        time.sleep(interval)
