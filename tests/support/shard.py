"""shard - runs one part of an end-to-end suite, so that ctest can run the parts of a long suite
side by side (CMakeLists.txt registers e2e.<suite>.<k>of<n>).

    python3 -m shard test_callback 2 3          # the classes of shard 2 of 3
    python3 -m shard test_multi_instance 4 5 --by-test

The suite's test classes (or, with --by-test, its tests) are sorted by name and dealt out in
turn, so every test of the module lands in exactly one shard whatever is added to it later, and
a class's tests stay together (its setUpClass runs once). Runs like `python3 -m unittest -v`.
"""

import sys
import unittest


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


def select(module, k, n, by_test=False):
    """The tests of shard `k` (1-based) of `n` of `module`, as a TestSuite."""
    tests = list(_flatten(unittest.defaultTestLoader.loadTestsFromName(module)))

    def key(t):
        return t.id() if by_test else type(t).__module__ + "." + type(t).__qualname__

    units = sorted({key(t) for t in tests})
    mine = {u for i, u in enumerate(units) if i % n == k - 1}
    return unittest.TestSuite([t for t in tests if key(t) in mine])


def main(argv):
    by_test = "--by-test" in argv
    args = [a for a in argv if a != "--by-test"]
    if len(args) != 3:
        sys.exit("usage: python3 -m shard MODULE K N [--by-test]")
    module, k, n = args[0], int(args[1]), int(args[2])
    if not 1 <= k <= n:
        sys.exit("shard: K must be 1..N")
    suite = select(module, k, n, by_test)
    print("shard %d of %d of %s: %d test(s)" % (k, n, module, suite.countTestCases()),
          file=sys.stderr)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
