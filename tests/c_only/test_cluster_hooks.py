"""The extras in redis-py's cluster command loop (redis_backoff_c._cluster and
csrc/cluster.c): the C hooks' argument checks, and the accounting of the
patched loop, driven by a loop that calls the hook as redis-py 8.2's
RedisCluster.execute_command does (after a failure it retries, inside its
``except`` block).  The real loop, through a real 6-node cluster, is
tests/integration/test_cluster_outage.py's."""

from __future__ import annotations

import asyncio
import time

import pytest
from support import assert_stats_add_up

import redis_backoff_c
from redis_backoff_c import RetryBudget, RetryStats
from redis_backoff_c.backoff import ConstantBackoff, NoBackoff

pytestmark = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="the C types are not built"
)

if redis_backoff_c.IMPLEMENTATION == "c":
    from redis_backoff_c import _cluster
    from redis_backoff_c._speedups import (
        _cluster_begin,
        _cluster_ended,
        _cluster_failed,
        _cluster_retried,
    )


def assert_adds_up(stats: RetryStats, calls: int) -> dict:
    snapshot = stats.snapshot()
    assert snapshot["calls"] == calls
    assert_stats_add_up(snapshot)
    return snapshot


# --- the C hooks ----------------------------------------------------------


def test_begin_counts_only_a_c_retry_with_extras():
    assert _cluster_begin(object()) is None
    assert _cluster_begin(redis_backoff_c.Retry(NoBackoff(), 1)) is None
    stats = RetryStats()
    assert _cluster_begin(redis_backoff_c.Retry(NoBackoff(), 1, stats=stats)) == 0.0
    before = time.monotonic()
    async_retry = redis_backoff_c.asyncio.retry.Retry(NoBackoff(), 1, deadline=5.0, stats=stats)
    deadline_at = _cluster_begin(async_retry)
    assert before + 4.9 < deadline_at < time.monotonic() + 5.1
    assert stats.calls == 2


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda r: _cluster_failed(r, 0.0), TypeError, "takes 3 arguments"),
        (lambda r: _cluster_failed(object(), 0.0, 0.0), TypeError, "'retry' must be a C Retry"),
        (lambda r: _cluster_failed(r, "0", 0.0), TypeError, "'deadline_at' must be a float"),
        (lambda r: _cluster_failed(r, 0.0, "x"), TypeError, "must be real number"),
        (lambda r: _cluster_retried(r, None), TypeError, "'slept' must be a float"),
        (lambda r: _cluster_ended(r, 9), ValueError, "'outcome' must be 0 to 4"),
        (lambda r: _cluster_ended(r, "0"), ValueError, "'outcome' must be 0 to 4"),
        (lambda r: _cluster_ended(r), TypeError, "takes 2 arguments"),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    retry = redis_backoff_c.Retry(NoBackoff(), 1, stats=RetryStats(), deadline=1.0)
    with pytest.raises(error, match=message):
        call(retry)


def test_delay_whose_float_drops_the_extras():
    """The delay's __float__ unsets the extras the hook is running: the
    hook reads them again, and nothing is written to a freed block."""
    stats = RetryStats()
    retry = redis_backoff_c.Retry(NoBackoff(), 3, deadline=10.0, stats=stats)

    class Delay(float):
        def __float__(self):
            retry.deadline = None
            retry.stats = None
            return 0.5

    class Seconds(int):
        def __float__(self):
            return float(Delay(0.5))

    assert _cluster_failed(retry, time.monotonic() + 10.0, Seconds(1)) == 0
    assert retry.stats is None and stats.failed_attempts == 1
    # The same for the slept time of _cluster_retried.
    retry.stats = stats
    assert _cluster_retried(retry, Seconds(1)) is None
    assert retry.stats is None and stats.retries == 0 and stats.slept_seconds == 0.0


# --- the patched loop ---------------------------------------------------------


class Loop:
    """RedisCluster.execute_command's retry loop, as redis-py 8.2 writes it:
    1 + get_retries() attempts, the error types it retries, the backoff
    hook inside its handler, then the sleep."""

    ERRORS_ALLOW_RETRY = (ConnectionError, TimeoutError)

    def __init__(self, retry, outcomes, sleep=time.sleep):
        self.retry = retry
        self.outcomes = list(outcomes)  # per attempt: a value, or an error to raise
        self.sleep = sleep
        self.attempts = 0

    def attempt(self):
        self.attempts += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def execute_command(self, *args):
        retries = self.retry.get_retries()
        failures = 0
        for _ in range(1 + retries):
            try:
                return self.attempt()
            except Exception as error:
                if retries > 0 and type(error) in self.ERRORS_ALLOW_RETRY:
                    retries -= 1
                    failures += 1
                    delay = HOOK(self.retry, failures)
                    if delay > 0:
                        self.sleep(delay)
                    continue
                raise


def _delay(retry, failures):
    backoff = retry._backoff
    if failures == 1:
        backoff.reset()
    return backoff.compute(failures)


if redis_backoff_c.IMPLEMENTATION == "c":
    HOOK = _cluster._backoff_delay(_delay)
    EXECUTE = _cluster._sync_execute(Loop.execute_command, _cluster._errors_allow_retry)


def run(loop):
    return EXECUTE(loop, "GET", "k")


def test_success_after_retries_is_one_call():
    stats = RetryStats()
    budget = RetryBudget(10, 0.5)
    loop = Loop(
        redis_backoff_c.Retry(ConstantBackoff(0.001), 5, stats=stats, budget=budget),
        [ConnectionError("a"), TimeoutError("b"), 7],
    )
    assert run(loop) == 7
    snapshot = assert_adds_up(stats, 1)
    assert (snapshot["successes"], snapshot["failed_attempts"], snapshot["retries"]) == (1, 2, 2)
    assert 0.002 <= snapshot["slept_seconds"] < 0.5
    assert budget.tokens == 8.5  # two taken, 0.5 back


def test_exhausted_unhandled_and_plain():
    stats = RetryStats()
    retry = redis_backoff_c.Retry(NoBackoff(), 2, stats=stats)
    last = ConnectionError("last")
    with pytest.raises(ConnectionError) as raised:
        run(Loop(retry, [ConnectionError(), ConnectionError(), last]))
    assert raised.value is last
    with pytest.raises(KeyError):
        run(Loop(retry, [ConnectionError(), KeyError("x")]))
    snapshot = assert_adds_up(stats, 2)
    assert snapshot["give_ups_exhausted"] == 1 and snapshot["unhandled_errors"] == 1
    # Without extras the loop is redis-py's, untouched and uncounted.
    plain = redis_backoff_c.Retry(NoBackoff(), 2)
    assert run(Loop(plain, [ConnectionError(), 3])) == 3


def test_budget_refuses_the_retry_with_the_attempts_error():
    stats = RetryStats()
    budget = RetryBudget(2, 0.1)  # retries need more than 1 token left
    retry = redis_backoff_c.Retry(NoBackoff(), 10, stats=stats, budget=budget)
    refused = ConnectionError("refused")
    loop = Loop(retry, [refused, 1])
    with pytest.raises(ConnectionError) as raised:
        run(loop)
    assert raised.value is refused and loop.attempts == 1
    snapshot = assert_adds_up(stats, 1)
    assert snapshot["give_ups_budget"] == 1 and snapshot["retries"] == 0


def test_deadline_refuses_a_sleep_that_would_reach_it():
    stats = RetryStats()
    retry = redis_backoff_c.Retry(ConstantBackoff(0.2), 10, stats=stats, deadline=0.5)
    loop = Loop(retry, [ConnectionError()] * 11)
    start = time.monotonic()
    with pytest.raises(ConnectionError):
        run(loop)
    assert time.monotonic() - start < 0.5
    snapshot = assert_adds_up(stats, 1)
    assert snapshot["give_ups_deadline"] == 1 and loop.attempts == 3


def test_interrupted_in_the_sleep_is_aborted():
    stats = RetryStats()
    retry = redis_backoff_c.Retry(ConstantBackoff(10.0), 3, stats=stats)

    def sleep(delay):
        time.sleep(0.01)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(Loop(retry, [ConnectionError(), 1], sleep=sleep))
    snapshot = assert_adds_up(stats, 1)
    assert snapshot["aborted"] == 1 and snapshot["retries"] == 0


def test_asyncio_loop_counts_per_task():
    """Two commands at once in two tasks: each hook call finds its own."""
    stats = RetryStats()
    retry = redis_backoff_c.asyncio.retry.Retry(ConstantBackoff(0.001), 3, stats=stats)

    class AsyncLoop(Loop):
        async def execute_command(self, *args):
            retries, failures = self.retry.get_retries(), 0
            for _ in range(1 + retries):
                try:
                    await asyncio.sleep(0)
                    return self.attempt()
                except Exception as error:
                    if retries > 0 and type(error) in self.ERRORS_ALLOW_RETRY:
                        retries -= 1
                        failures += 1
                        await asyncio.sleep(HOOK(self.retry, failures))
                        continue
                    raise

    execute = _cluster._async_execute(AsyncLoop.execute_command, _cluster._errors_allow_retry)

    async def main():
        first = AsyncLoop(retry, [ConnectionError(), 1])
        second = AsyncLoop(retry, [ConnectionError()] * 4)
        return await asyncio.gather(execute(first), execute(second), return_exceptions=True)

    first, second = asyncio.run(main())
    assert first == 1 and isinstance(second, ConnectionError)
    snapshot = assert_adds_up(stats, 2)
    assert snapshot["successes"] == 1 and snapshot["give_ups_exhausted"] == 1
    assert snapshot["retries"] == 1 + 3
