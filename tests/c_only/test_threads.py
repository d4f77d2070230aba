"""Eight threads sharing one strategy (or one Retry) for tens of thousands
of calls each: no crash, no exception, and every delay within its
formula's range, with both random sources (C side only).

The GIL makes each compute() atomic as long as it runs no Python code; the
switch interval is shortened so that threads interleave as often as they
can between (and, on the generic paths, inside) calls."""

import random
import sys
import threading

import pytest
import redis.exceptions

import redis_backoff_c
import redis_backoff_c.backoff as backoff
import redis_backoff_c.retry as retry_module
from redis_backoff_c.retry import Retry

THREADS = 8
CAP, BASE = 0.512, 0.008


@pytest.fixture(autouse=True)
def _switch_often():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


@pytest.fixture(params=["python", "fast"])
def source(request):
    if request.param == "fast":
        redis_backoff_c.set_random_source("fast", seed=2024)
    else:
        random.seed(2024)
    return request.param


def run_threads(target, count=THREADS):
    """Run target(index) in `count` threads started together; re-raise the
    first exception any of them raised."""
    errors = []
    barrier = threading.Barrier(count)

    def wrapper(index):
        try:
            barrier.wait()
            target(index)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=wrapper, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def flaky(times, result, error=redis.exceptions.ConnectionError):
    """A do() that raises `error` `times` times, then returns `result`."""
    left = [times]

    def do():
        if left[0]:
            left[0] -= 1
            raise error("down")
        return result

    return do


def top(failures):
    return min(CAP, BASE * 2**failures)


# The range of compute(failures) for each strategy at CAP, BASE.
RANGES = {
    "ConstantBackoff": lambda n: (0.25, 0.25),
    "NoBackoff": lambda n: (0, 0),
    "ExponentialBackoff": lambda n: (top(n), top(n)),
    "FullJitterBackoff": lambda n: (0.0, top(n)),
    "EqualJitterBackoff": lambda n: (top(n) / 2, top(n)),
    "DecorrelatedJitterBackoff": lambda n: (BASE, CAP),
    "ExponentialWithJitterBackoff": lambda n: (0.0, top(n)),
}


def make(name):
    cls = getattr(backoff, name)
    if name == "ConstantBackoff":
        return cls(0.25)
    if name == "NoBackoff":
        return cls()
    return cls(CAP, BASE)


def test_shared_decorrelated_jitter(source):
    strategy = backoff.DecorrelatedJitterBackoff(CAP, BASE)

    def work(index):
        compute, reset = strategy.compute, strategy.reset
        for i in range(20000):
            delay = compute(i)
            if not BASE <= delay <= CAP:
                raise AssertionError(f"delay {delay!r} out of [{BASE}, {CAP}]")
            if i % 97 == index:
                reset()

    run_threads(work)
    assert BASE <= strategy._previous_backoff <= CAP


@pytest.mark.parametrize("name", sorted(RANGES))
def test_each_strategy_shared(name, source):
    strategy = make(name)
    bounds = [RANGES[name](n) for n in range(12)]

    def work(index):
        compute = strategy.compute
        for i in range(20000):
            n = (i + index) % 12
            delay = compute(n)
            low, high = bounds[n]
            if not low <= delay <= high:
                raise AssertionError(f"compute({n}) = {delay!r} out of [{low}, {high}]")

    run_threads(work)


@pytest.mark.parametrize("name", ["FullJitterBackoff", "DecorrelatedJitterBackoff"])
def test_parameters_replaced_while_others_compute(name, source):
    # One thread keeps replacing _cap and _base (floats, then ints and
    # Fractions for the generic path); seven compute. Each compute owns the
    # parameters it read, so a delay is within the range of one of the
    # configurations (all within [0, 1]).
    from fractions import Fraction

    strategy = getattr(backoff, name)(CAP, BASE)
    configurations = [(CAP, BASE), (1, Fraction(1, 100)), (0.25, 0.001), (Fraction(1, 2), 0)]
    done = threading.Event()

    def work(index):
        if index == 0:
            for i in range(20000):
                strategy._cap, strategy._base = configurations[i % len(configurations)]
            done.set()
            return
        while not done.is_set():
            for n in range(10):
                delay = strategy.compute(n)
                if not 0 <= delay <= 1:
                    raise AssertionError(f"compute({n}) = {delay!r} out of [0, 1]")

    run_threads(work)


def test_random_source_switched_while_others_compute():
    strategy = backoff.EqualJitterBackoff(CAP, BASE)
    done = threading.Event()

    def work(index):
        if index == 0:
            for i in range(5000):
                if i % 2:
                    redis_backoff_c.set_random_source("fast", seed=i)
                else:
                    redis_backoff_c.set_random_source("python")
            done.set()
            return
        while not done.is_set():
            for n in range(10):
                delay = strategy.compute(n)
                if not top(n) / 2 <= delay <= top(n):
                    raise AssertionError(f"compute({n}) = {delay!r}")

    run_threads(work)


def test_shared_retry(source, monkeypatch):
    # A shared Retry over a shared DecorrelatedJitterBackoff: each call
    # resets the strategy that other threads are drawing from; every delay
    # stays within [BASE, CAP], every call gets its result after exactly
    # its two failures.
    delays = []
    monkeypatch.setattr(retry_module, "sleep", delays.append)  # list.append: atomic
    retry = Retry(backoff.DecorrelatedJitterBackoff(CAP, BASE), 5)
    calls = 2000

    def work(index):
        for i in range(calls):
            failures = []
            result = retry.call_with_retry(
                flaky(2, (index, i)),
                lambda error, count, seen=failures: seen.append(count),
                None,
                True,
            )
            if result != (index, i) or failures != [1, 2]:
                raise AssertionError(f"{result!r} after {failures!r}")

    run_threads(work)
    assert len(delays) == THREADS * calls * 2
    assert all(BASE <= delay <= CAP for delay in delays)


def test_shared_retry_with_updates():
    # Threads call a shared Retry while one keeps updating its retries,
    # supported errors and backoff.
    retry = Retry(backoff.NoBackoff(), 3)
    done = threading.Event()

    def work(index):
        if index == 0:
            for i in range(3000):
                retry.update_retries(3 + i % 3)
                retry.update_supported_errors([redis.exceptions.TimeoutError])
                retry._supported_errors = (redis.exceptions.ConnectionError, KeyError)
                retry._backoff = backoff.ConstantBackoff(0) if i % 2 else backoff.NoBackoff()
            done.set()
            return
        while not done.is_set():
            assert retry.call_with_retry(flaky(1, "ok"), lambda error: None) == "ok"

    run_threads(work)


def test_checker_replaced_while_others_call():
    # Threads call a shared Retry while one keeps replacing its checker
    # (by a new function each time, which only the Retry holds, or None):
    # each error meets whichever checker the Retry holds then, and a call
    # ends with its result (no checker, or a yes) or the error (a no),
    # after fail() ran for it.
    retry = Retry(backoff.NoBackoff(), 3)
    done = threading.Event()

    def work(index):
        if index == 0:
            for i in range(5000):
                verdict = bool(i % 3)
                retry.is_retryable = None if i % 5 == 0 else (lambda error, v=verdict: v)
            done.set()
            return
        while not done.is_set():
            fails = []
            try:
                result = retry.call_with_retry(flaky(1, "ok"), fails.append)
            except redis.exceptions.ConnectionError:
                result = "raised"
            if result not in ("ok", "raised") or len(fails) != 1:
                raise AssertionError(f"{result!r} after {len(fails)} fail calls")

    run_threads(work)
