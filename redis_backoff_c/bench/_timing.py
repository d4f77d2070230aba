"""The timing core: sides, calibration, interleaved repeats, statistics.

A *side* is one implementation of one operation (redis-py's, ours, a peer's,
or a reference such as calling ``do()`` directly).  ``Side.run(number)``
performs the operation ``number`` times and returns the seconds it took;
statement sides use :class:`timeit.Timer`, so the timed loop is timeit's own
(garbage collector off while timing, as timeit does).  In-process sides are
timed with the process's CPU time by default (see CLOCKS).

All sides of one case are timed *interleaved*: every repeat times each side
once, and the order of the sides alternates from one repeat to the next, so a
slow patch of the machine hits every side alike.  Results are the median over
repeats, with the interquartile range and min-max as the spread.
"""

import gc
import statistics
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field

CLOCKS = {
    # CPU time of this process: on a shared machine, time during which other
    # processes hold the CPU is not counted, only what the operation costs.
    "cpu": time.process_time,
    # Wall clock, as timeit's default.
    "wall": time.perf_counter,
}
#: The clock of the in-process sides; set_clock() changes it.  End-to-end
#: sides wait on a server, and always use the wall clock.
clock = CLOCKS["cpu"]


def set_clock(name):
    global clock
    clock = CLOCKS[name]


class Unavailable(Exception):
    """A side that cannot run on this machine; the message says why."""


@dataclass
class Side:
    label: str
    #: run(number) -> seconds taken for `number` operations
    run: Callable[[int], float]
    #: called before every timing, outside the timed region (seeding, ...)
    before: Callable[[], None] | None = None


def stmt_side(label, stmt, ns, before=None):
    """A side timing the statement `stmt` with timeit.

    The names in `ns` become local variables of timeit's loop function, so
    looking them up costs the same on every side.
    """
    setup = "\n".join(f"{name} = _ns[{name!r}]" for name in ns)
    timer = timeit.Timer(stmt, setup, timer=clock, globals={"_ns": ns})
    return Side(label, timer.timeit, before)


@dataclass
class Stats:
    """Per-operation figures of one side over the repeats."""

    number: int
    samples: list[float]  # one value per repeat, in repeat order

    @property
    def median(self):
        return statistics.median(self.samples)

    @property
    def q1(self):
        return quartiles(self.samples)[0]

    @property
    def q3(self):
        return quartiles(self.samples)[1]

    def as_dict(self, unit):
        return {
            "unit": unit,
            "median": self.median,
            "q1": self.q1,
            "q3": self.q3,
            "min": min(self.samples),
            "max": max(self.samples),
            "repeats": len(self.samples),
            "number": self.number,
            "samples": list(self.samples),
        }


def quartiles(values):
    """(Q1, Q3) of `values`; both the value itself when there is one."""
    values = list(values)
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def calibrate(side, min_time):
    """A `number` of operations that makes one timing last about `min_time`,
    found as timeit.Timer.autorange does (1, 2, 5, 10, 20, 50, ... until a
    tenth of the target is reached), then scaled up to the target."""
    number, i = 1, 0
    while True:
        if side.before:
            side.before()
        taken = side.run(number)
        if taken >= min_time / 10 or number >= 10**8:
            break
        number = (1, 2, 5)[(i + 1) % 3] * 10 ** ((i + 1) // 3)
        i += 1
    return max(1, int(number * min_time / max(taken, 1e-9)))


def time_interleaved(sides: dict[str, Side], repeats, min_time, progress=None):
    """Time every side `repeats` times, interleaved; return {label: Stats}
    with seconds per operation."""
    gc.collect()  # once per case: a full collection takes milliseconds
    numbers = {label: calibrate(side, min_time) for label, side in sides.items()}
    samples = {label: [] for label in sides}
    order = list(sides)
    for r in range(repeats):
        for label in order if r % 2 == 0 else reversed(order):
            side = sides[label]
            if side.before:
                side.before()
            samples[label].append(side.run(numbers[label]) / numbers[label])
        if progress:
            progress(r + 1, repeats)
    return {label: Stats(numbers[label], samples[label]) for label in sides}


def measure_memory(make, n, repeats):
    """Bytes per object that `make()` returns, measured with tracemalloc
    over `n` objects kept alive together; `repeats` measurements, as Stats.

    The list holding the objects is allocated before the measurement starts,
    garbage is collected before it ends, and the same loop run with a maker
    that allocates nothing is subtracted (the loop's own leftovers, such as
    its counter), after a warm-up, so only the objects and whatever they own
    are counted: the figures come out exact.
    """
    import tracemalloc

    samples = []
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        # Warm-up, discarded: the first run also pays one-time costs.
        _allocated(make, n, tracemalloc)
        if n not in _baselines:
            _allocated(_nothing, n, tracemalloc)
            _baselines[n] = _allocated(_nothing, n, tracemalloc)
        baseline = _baselines[n]
        for _ in range(repeats):
            samples.append((_allocated(make, n, tracemalloc) - baseline) / n)
    finally:
        if started:
            tracemalloc.stop()
    return Stats(n, samples)


_baselines = {}  # n -> bytes the measuring loop itself leaves


def _nothing():
    return None


def _allocated(make, n, tracemalloc):
    keep = [None] * n
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        keep[i] = make()
    # Garbage made on the way (copy.deepcopy leaves some for the cycle
    # collector) is not part of the objects.
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


@dataclass
class Clock:
    """Wall-clock of the whole run, for progress lines."""

    start: float = field(default_factory=time.perf_counter)

    def elapsed(self):
        return time.perf_counter() - self.start
