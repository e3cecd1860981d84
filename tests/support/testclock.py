"""The relay's clock as a test moves it (src/core/clock.h).

A crcr built with CRCR_TEST_HOOKS=ON (scripts/build.sh does) adds the offset stored in the file
named by CRCR_TEST_CLOCK_FILE to its wall and monotonic clocks: sweeper, token expiry, retry
backoff, rate windows, leases, the reconciler and the allowlist TTL all read them. The file is
mapped by the relay, so `advance()` is seen at once by every process started with it (two relays
on one store, the CLI run against their store); test doubles that judge times (the fake GitHub's
JWT checks, the OIDC issuer's token times) take the same clock through `now()`.

    clock = TestClock()               # or TestClock(directory) for the file's place
    gh = FakeGitHub(..., clock=clock)
    relay = Relay(clock=clock)        # or Relay() and relay.clock
    clock.advance(6 * 3600)           # six hours later, for the relay and the doubles

The relay's timer loops wait at most 20 ms of real time while the control is on, so a moved
clock is seen within that. To await an event that needs a timer to run out, give
waiting.wait_until the clock and a step.
"""
import mmap
import os
import shutil
import struct
import tempfile
import time

_FMT = "=q"  # native byte order, signed 64-bit milliseconds, as clock.c reads it


class TestClock:
    def __init__(self, directory=None):
        """The offset file goes into `directory`, or into a temp dir of its own (removed by
        close()) when none is given."""
        self._own_dir = None
        if directory is None:
            directory = self._own_dir = tempfile.mkdtemp(prefix="crcr-clock-")
        self.path = os.path.join(directory, "clock.offset")
        with open(self.path, "wb") as f:
            f.write(struct.pack(_FMT, 0))
        self._fd = os.open(self.path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, struct.calcsize(_FMT))

    @property
    def offset_ms(self):
        return struct.unpack_from(_FMT, self._map, 0)[0]

    def advance(self, seconds):
        """Moves the clock forward by `seconds` (a float) for every process that uses it."""
        self.set_offset_ms(self.offset_ms + int(round(seconds * 1000)))

    def set_offset_ms(self, ms):
        self._map[0:8] = struct.pack(_FMT, int(ms))

    def now(self):
        """Seconds since the epoch on the moved clock (time.time() plus the offset)."""
        return time.time() + self.offset_ms / 1000.0

    def env(self):
        return {"CRCR_TEST_CLOCK_FILE": self.path}

    def close(self):
        try:
            self._map.close()
            os.close(self._fd)
        except (OSError, ValueError):
            pass
        if self._own_dir:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None
