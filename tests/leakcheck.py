"""Leak checks for the hardening tests: run a path many times and show that
nothing it allocates stays alive.

Three measures, the best the interpreter offers:

- ``sys.gettotalrefcount()`` on a debug build: any reference leaked, even to
  an immortal or cached object;
- ``sys.getallocatedblocks()`` with pymalloc (a release build): every object
  leaked, GC-tracked or not (floats and ints are not in gc.get_objects());
- tracemalloc's traced memory otherwise (PYTHONMALLOC=malloc, as under the
  sanitizers and valgrind, where getallocatedblocks() is 0).

And ``sys.getrefcount`` of the objects a path is handed, so that a reference
leaked to a parameter (which allocates nothing) is caught on every build.

A leak of one block a call shows as thousands of blocks after thousands of
calls; the noise of the interpreter's own caches is a few blocks, and is
shaken off by retrying: a real leak grows on every attempt.
"""

import gc
import os
import sys
import tracemalloc

# REDIS_BACKOFF_C_LEAK_SCALE scales every count of calls (a leak of one
# object a call shows at any scale; under tracemalloc there is a floor).
SCALE = float(os.environ.get("REDIS_BACKOFF_C_LEAK_SCALE", "1"))
CALLS = 1000
ATTEMPTS = 4
# A leak of one object a call is `calls` blocks (references on a debug
# build), or at least 16 bytes a call: the slack is a fifth of an object a
# call, five times under the smallest leak.  Caches move the count by tens
# to about 150 over 1000 calls without a leak (CI's 3.14d once read
# [62, 59, 52, 135] for test_leaks_async.py's method forms, which pass alone
# and beside the other leak tests), hence not less.
BLOCKS_PER_CALL_SLACK = 0.2
# Under tracemalloc, memory kept by the interpreter's free lists (tuples,
# floats, frames) and caches is still traced, and moves by up to ~15 bytes a
# call over a few hundred calls: at least MIN_CALLS_TRACED calls an attempt,
# more attempts, and 12 bytes a call of slack, below the smallest object
# (16 bytes; a float is 24, each C strategy 32 or more).
BYTES_PER_CALL_SLACK = 12
# A watched object's reference count may move by a few while the paths run
# without any leak: on CPython 3.10, ints and floats are shared with the
# interpreter's caches (a small int held by hundreds of places gains one when
# a cache keeps a result). A reference leaked on a path is one a call, so at
# least 50 over a measure: a few are noise, never a leak.
REF_SLACK = 5
BYTE_ATTEMPTS = 8
WARM_UP_TRACED = 3000
MIN_CALLS_TRACED = 500


def _measure(generation):
    # The collector is off while a path runs, so the objects it made are in
    # the youngest generation: collecting that one is cheap next to a full
    # collection of the test session's heap, and finds nearly all cyclic
    # garbage (not all: copy.deepcopy leaves cycles that only a full
    # collection frees, for redis-py's objects as for ours). A path whose
    # memory grows is measured again with full collections before failing.
    gc.collect(generation)
    if hasattr(sys, "gettotalrefcount"):
        return "references", sys.gettotalrefcount()
    blocks = sys.getallocatedblocks()
    if blocks:
        return "blocks", blocks
    return "bytes", tracemalloc.get_traced_memory()[0]


def _growth(run, calls, generation):
    kind, before = _measure(generation)
    for _ in range(calls):
        run()
    kind, after = _measure(generation)
    return kind, after - before


def assert_no_leak(run, calls=CALLS, watched=()):
    """Run `run()` `calls` times (after a warm-up) and fail if live objects,
    memory or the reference counts of `watched` objects grow."""
    calls = max(50, int(calls * SCALE))
    started_tracing = False
    if not hasattr(sys, "gettotalrefcount") and not sys.getallocatedblocks():
        if not tracemalloc.is_tracing():
            tracemalloc.start()
            started_tracing = True
    if tracemalloc.is_tracing():
        calls = max(calls, MIN_CALLS_TRACED)
    was_enabled = gc.isenabled()
    gc.collect()
    # Everything alive now (the test session's heap) moves to the permanent
    # generation, so the full collections below look only at what the path
    # made: the same verdicts, in a fraction of the time.
    gc.freeze()
    gc.disable()
    try:
        warm_up = calls // 20 + 10  # caches, interned names, free lists
        if tracemalloc.is_tracing():
            # Traced memory includes the interpreter's free lists (up to
            # 2000 tuples of each size...), which take thousands of calls
            # to fill: pickle.loads of a Retry grows for ~3000 calls.
            warm_up = max(warm_up, WARM_UP_TRACED)
        for _ in range(warm_up):
            run()
        # Shared singletons (small ints, True, None) are referenced from
        # everywhere: only objects of the test's own are watched.
        watched = [obj for obj in watched if sys.getrefcount(obj) < 1000]
        gc.collect(0)
        counts = [sys.getrefcount(obj) for obj in watched]
        growths = []
        attempts = BYTE_ATTEMPTS if tracemalloc.is_tracing() else ATTEMPTS
        generation = 0
        for _ in range(attempts):
            kind, growth = _growth(run, calls, generation)
            growths.append(growth)
            slack = (BYTES_PER_CALL_SLACK if kind == "bytes" else BLOCKS_PER_CALL_SLACK) * calls
            if growth <= slack:
                break
            generation = 2
        else:
            raise AssertionError(f"{kind} grew on every attempt of {calls} calls: {growths}")
        gc.collect(generation)
        after = [sys.getrefcount(obj) for obj in watched]
        grown = [(b, a) for b, a in zip(counts, after, strict=True) if a - b > REF_SLACK]
        assert not grown, f"references to the watched objects grew: {counts} -> {after}"
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
        if started_tracing:
            tracemalloc.stop()


def calls_raising(exceptions, func, *args, **kwargs):
    """A function that calls func(*args, **kwargs) and requires it to raise
    one of `exceptions` (a path that must fail cleanly)."""

    def run():
        try:
            func(*args, **kwargs)
        except exceptions:
            return
        raise AssertionError(f"{func!r} did not raise {exceptions}")

    return run
