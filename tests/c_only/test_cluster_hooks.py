"""The extras in redis-py's cluster command loop (redis_backoff_c._cluster and
csrc/cluster.c): the C hooks' argument checks, and the accounting of the
patched loop, driven by a loop that calls the hook as redis-py 8.2's
RedisCluster.execute_command does (after a failure it retries, inside its
``except`` block).  The real loop, through a real 6-node cluster, is
tests/integration/test_cluster_outage.py's."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys
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
    from redis_backoff_c import _cluster, _speedups
    from redis_backoff_c._speedups import (
        _cluster_begin,
        _cluster_delay,
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
        (lambda r: _cluster_failed(r), TypeError, "takes 2 arguments"),
        (lambda r: _cluster_failed(object(), Conn()), TypeError, "'retry' must be a C Retry"),
        (lambda r: _cluster_delay(r, 0.0), TypeError, "takes 3 arguments"),
        (lambda r: _cluster_delay(object(), 0.0, 0.0), TypeError, "'retry' must be a C Retry"),
        (lambda r: _cluster_delay(r, "0", 0.0), TypeError, "'deadline_at' must be a float"),
        (lambda r: _cluster_delay(r, 0.0, "x"), TypeError, "must be real number"),
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

    assert _cluster_failed(retry, Conn()) == 0  # go on
    assert _cluster_delay(retry, time.monotonic() + 10.0, Seconds(1)) == 0.5
    assert retry.stats is None and stats.failed_attempts == 1
    # The same for the slept time of _cluster_retried.
    retry.stats = stats
    assert _cluster_retried(retry, Seconds(1)) is None
    assert retry.stats is None and stats.retries == 0 and stats.slept_seconds == 0.0


# --- the patched loop ---------------------------------------------------------


class Unreachable(Exception):
    pass


class Loop:
    """RedisCluster.execute_command's retry loop, as redis-py 8.2 writes it:
    1 + get_retries() attempts, the error types it retries, the backoff
    hook inside its handler, then the sleep; at the top of each attempt
    after a failure, an error instead of the retry when a topology refresh
    since reached no node (raised from the failure: the attempts numbered
    in `unreachable_at`)."""

    ERRORS_ALLOW_RETRY = (ConnectionError, TimeoutError)

    def __init__(self, retry, outcomes, sleep=time.sleep, unreachable_at=()):
        self.retry = retry
        # Per attempt: a value, an error to raise, or a callable that
        # returns or raises.
        self.outcomes = list(outcomes)
        self.sleep = sleep
        self.unreachable_at = unreachable_at
        self.attempts = 0

    def attempt(self):
        self.attempts += 1
        outcome = self.outcomes.pop(0)
        if callable(outcome) and not isinstance(outcome, BaseException):
            outcome = outcome()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def execute_command(self, *args):
        retries = self.retry.get_retries()
        failures = 0
        last_error = None
        for _ in range(1 + retries):
            if last_error is not None and self.attempts + 1 in self.unreachable_at:
                raise Unreachable("no node reached") from last_error
            try:
                return self.attempt()
            except Exception as error:
                if retries > 0 and type(error) in self.ERRORS_ALLOW_RETRY:
                    retries -= 1
                    failures += 1
                    last_error = error
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
    EXECUTE = _cluster.sync_command(Loop.execute_command)


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


class AsyncLoop(Loop):
    """The asyncio RedisCluster.execute_command's loop, as Loop's."""

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


if redis_backoff_c.IMPLEMENTATION == "c":
    ASYNC_EXECUTE = _cluster._async_execute(AsyncLoop.execute_command, _cluster._errors_allow_retry)


def test_asyncio_loop_counts_per_task():
    """Two commands at once in two tasks: each hook call finds its own."""
    stats = RetryStats()
    events = []
    retry = redis_backoff_c.asyncio.retry.Retry(
        ConstantBackoff(0.001),
        3,
        stats=stats,
        on_retry=lambda e: events.append(("retry", e.attempt, e.reason)),
        on_give_up=lambda e: events.append(("give_up", e.attempt, e.reason)),
    )

    async def main():
        first = AsyncLoop(retry, [ConnectionError(), 1])
        second = AsyncLoop(retry, [ConnectionError()] * 4)
        return await asyncio.gather(
            ASYNC_EXECUTE(first), ASYNC_EXECUTE(second), return_exceptions=True
        )

    first, second = asyncio.run(main())
    assert first == 1 and isinstance(second, ConnectionError)
    snapshot = assert_adds_up(stats, 2)
    assert snapshot["successes"] == 1 and snapshot["give_ups_exhausted"] == 1
    assert snapshot["retries"] == 1 + 3
    assert sorted(events) == sorted(
        [("retry", 1, None)] * 2
        + [("retry", 2, None), ("retry", 3, None)]
        + [("give_up", 4, "exhausted")]
    )


# Give-ups of each kind in the cluster loop: (backoff, retries, extras, the
# attempts' outcomes, made anew for each run: an error raised again keeps
# its traceback and context, which grow from run to run, and refleak.py
# counts them as a leak).
GIVE_UPS = {
    "exhausted": (NoBackoff(), 1, dict, lambda: [ConnectionError("1"), ConnectionError("2")]),
    "budget": (
        NoBackoff(),
        10,
        lambda: {"budget": RetryBudget(2, 0.1)},
        lambda: [ConnectionError("1"), 1],
    ),
    "deadline": (
        ConstantBackoff(60.0),
        10,
        lambda: {"deadline": 1.0},
        lambda: [ConnectionError("1"), 1],
    ),
    "may_have_run": (
        NoBackoff(),
        10,
        lambda: {"writes": "at-most-once"},
        lambda: [ConnectionError("1"), 1],
    ),
}


@pytest.mark.parametrize("caller_handling", [False, True])
@pytest.mark.parametrize("reason", sorted(GIVE_UPS))
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_a_keyboard_interrupt_in_on_give_up_has_the_error_as_context(
    flavor, reason, caller_handling
):
    """on_give_up raising KeyboardInterrupt in the patched cluster loop: its
    __context__ is the error the command gave up with, as call_with_retry
    chains it (issue 38: None through the sync C method, and through the
    asyncio wrapper for the give-ups it decides after its handler), also
    when the command runs inside the caller's own `except` block."""
    backoff, retries, make_extras, make_attempts = GIVE_UPS[reason]
    extras, attempts = make_extras(), make_attempts()
    told = []

    def interrupt(event):
        told.append(event)
        raise KeyboardInterrupt(reason)

    retry_type = redis_backoff_c.Retry if flavor == "sync" else redis_backoff_c.asyncio.retry.Retry
    retry = retry_type(backoff, retries, stats=RetryStats(), on_give_up=interrupt, **extras)
    if flavor == "sync":
        command = lambda: run(Loop(retry, list(attempts)))  # noqa: E731
    else:
        command = lambda: asyncio.run(ASYNC_EXECUTE(AsyncLoop(retry, list(attempts))))  # noqa: E731
    with pytest.raises(KeyboardInterrupt) as raised:
        if caller_handling:
            try:
                raise ValueError("the caller's own")
            except ValueError:
                command()
        else:
            command()
    assert [event.reason for event in told] == [reason]
    assert isinstance(told[0].error, ConnectionError)
    assert raised.value.__context__ is told[0].error


# --- the cluster loop counts as call_with_retry does --------------------------


class Slow:
    """An attempt that takes `seconds`, then raises `error`."""

    def __init__(self, seconds, error):
        self.seconds, self.error = seconds, error

    def __call__(self):
        time.sleep(self.seconds)
        raise self.error


class RaisingCompute(ConstantBackoff):
    def compute(self, failures):
        raise ZeroDivisionError("compute")


class HugeCompute(ConstantBackoff):
    def compute(self, failures):
        return 10**400  # no float: converting it raises OverflowError


def interrupted(delay):
    raise KeyboardInterrupt


def returns_early(delay):
    pass


Conn, Timeout = ConnectionError, TimeoutError
# name: (backoff, retries, extras, the attempts' outcomes (made anew for
# each run: an error raised again grows its traceback), sleep, the call's
# is_retryable for call_with_retry / the attempts that reach no node for the
# cluster loop)
SCENARIOS = {
    "success": (ConstantBackoff(0.001), 5, {}, lambda: [Conn(), Timeout(), 7], None, ()),
    "exhausted": (NoBackoff(), 2, {}, lambda: [Conn("1"), Conn("2"), Conn("3")], None, ()),
    "checker": (NoBackoff(), 3, {}, lambda: [Conn(), 1], None, (2,)),
    "budget": (NoBackoff(), 10, {"budget": (2, 0.1)}, lambda: [Conn(), 1], None, ()),
    "deadline-before-sleep": (
        ConstantBackoff(0.3),
        10,
        {"deadline": 0.5},
        lambda: [Conn() for _ in range(11)],
        None,
        (),
    ),
    "deadline-without-sleep": (
        NoBackoff(),
        10,
        {"deadline": 0.15},
        lambda: [Slow(0.1, Conn()) for _ in range(11)],
        None,
        (),
    ),
    "compute-raises": (RaisingCompute(0), 3, {}, lambda: [Conn(), 1], None, ()),
    "compute-no-float": (HugeCompute(0), 3, {}, lambda: [Conn(), 1], None, ()),
    "sleep-interrupted": (ConstantBackoff(10.0), 3, {}, lambda: [Conn(), 1], interrupted, ()),
    "sleep-returns-early": (
        ConstantBackoff(10.0),
        3,
        {},
        lambda: [Conn(), KeyError("k")],
        returns_early,
        (),
    ),
    "unhandled": (NoBackoff(), 3, {}, lambda: [KeyError("k")], None, ()),
}


def make_retry(backoff, retries, extras):
    """The Retry, and the list its on_retry and on_give_up append
    (kind, attempt, delay, reason) to."""
    budget = extras.get("budget", (100, 0.5))
    events = []
    retry = redis_backoff_c.Retry(
        backoff,
        retries,
        supported_errors=(Conn, Timeout),
        stats=RetryStats(),
        budget=RetryBudget(*budget),
        deadline=extras.get("deadline"),
        on_retry=lambda e: events.append(("retry", e.attempt, e.delay, e.reason)),
        on_give_up=lambda e: events.append(("give_up", e.attempt, e.delay, e.reason)),
    )
    return retry, events


def outcome_of(run_it):
    try:
        return "returned", run_it()
    except BaseException as error:  # KeyboardInterrupt too
        return "raised", type(error).__name__


def with_call_with_retry(scenario, monkeypatch):
    backoff, retries, extras, outcomes, sleep, unreachable_at = scenario
    retry, events = make_retry(backoff, retries, extras)
    if sleep is not None:
        monkeypatch.setattr(redis_backoff_c.retry, "sleep", sleep)
    loop = Loop(retry, outcomes())
    do = loop.attempt
    # What the cluster loop's top-of-attempt check does, as a checker.
    checker = (lambda error: False) if unreachable_at else None
    outcome = outcome_of(lambda: retry.call_with_retry(do, lambda error: None, checker))
    monkeypatch.undo()
    return outcome, retry, events


def with_cluster_loop(scenario):
    backoff, retries, extras, outcomes, sleep, unreachable_at = scenario
    retry, events = make_retry(backoff, retries, extras)
    loop = Loop(retry, outcomes(), sleep or time.sleep, unreachable_at)
    return outcome_of(lambda: run(loop)), retry, events


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_cluster_loop_counts_as_call_with_retry(name, monkeypatch):
    """The same policy and the same attempts through call_with_retry and
    through the patched cluster loop: the same outcome, the same counters
    (slept_seconds within scheduling noise), the same budget left and the
    same calls of on_retry and on_give_up."""
    expected, reference, expected_events = with_call_with_retry(SCENARIOS[name], monkeypatch)
    outcome, retry, events = with_cluster_loop(SCENARIOS[name])
    want, got = reference.stats.snapshot(), retry.stats.snapshot()
    assert_stats_add_up(got)
    assert got.pop("slept_seconds") == pytest.approx(want.pop("slept_seconds"), abs=0.05)
    assert got == want
    assert retry.budget.tokens == reference.budget.tokens
    if name == "checker":
        # The loop raises what it raises instead of the retry, which it had
        # decided on: one retry announced, then the give-up.
        assert expected == ("raised", "ConnectionError") and outcome == ("raised", "Unreachable")
        assert expected_events == [("give_up", 1, None, "not_retryable")]
        assert events == [("retry", 1, 0, None), ("give_up", 1, None, "not_retryable")]
    else:
        assert outcome == expected
        assert events == expected_events


def test_split_command_pipeline_retries_count_as_the_commands():
    """A split multi-shard command retries in its own pipeline, inside the
    command, through the same hook with the same Retry: one call, and the
    pipeline's retries are the command's."""
    stats = RetryStats()
    retry = redis_backoff_c.Retry(NoBackoff(), 3, stats=stats)

    class SplitLoop(Loop):
        def execute_command(self, *args):
            # The pipeline's loop (redis-py's _send_cluster_commands retry).
            failures = 0
            while True:
                try:
                    return self.attempt()
                except Exception as error:
                    if failures < 3 and type(error) in self.ERRORS_ALLOW_RETRY:
                        failures += 1
                        HOOK(self.retry, failures)
                        continue
                    raise

    execute = _cluster.sync_command(SplitLoop.execute_command)
    assert execute(SplitLoop(retry, [ConnectionError(), ConnectionError(), 5]), "MGET") == 5
    snapshot = assert_adds_up(stats, 1)
    assert (snapshot["successes"], snapshot["retries"]) == (1, 2)


def test_pending_asyncio_command_destroyed_elsewhere_reports_nothing_of_ours():
    """A pending asyncio cluster command whose task is destroyed: its
    coroutine is closed by the collector, in another context, and the
    command's context variable is left alone there (no ValueError about a
    Token from a different Context)."""
    import gc
    import sys

    retry = redis_backoff_c.asyncio.retry.Retry(ConstantBackoff(60.0), 3, stats=RetryStats())

    class AsyncLoop(Loop):
        async def execute_command(self, *args):
            try:
                self.attempt()
            except Exception:
                await asyncio.sleep(HOOK(self.retry, 1))
            return 1

    execute = _cluster._async_execute(AsyncLoop.execute_command, _cluster._errors_allow_retry)
    unraisable = []
    loop = asyncio.new_event_loop()
    task = loop.create_task(execute(AsyncLoop(retry, [ConnectionError()]), "GET"))
    loop.run_until_complete(asyncio.sleep(0.01))
    assert not task.done()  # in the backoff sleep
    loop.close()
    previous, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        del task
        gc.collect()
    finally:
        sys.unraisablehook = previous
    ours = [u for u in unraisable if isinstance(u.exc_value, ValueError)]
    assert ours == []
    # It ended while sleeping: one call, aborted.
    snapshot = assert_adds_up(retry.stats, 1)
    assert snapshot["aborted"] == 1, snapshot


def test_first_attempt_never_counted_twice_when_the_delay_does_not_convert():
    """Finding of the second probe: compute() returning what float() refuses
    counted the failed attempt twice (calls 1, attempts 2, retries 0)."""
    stats = RetryStats()
    retry = redis_backoff_c.Retry(HugeCompute(0), 3, stats=stats)
    with pytest.raises(OverflowError):
        run(Loop(retry, [ConnectionError(), 1]))
    snapshot = assert_adds_up(stats, 1)
    assert (snapshot["attempts"], snapshot["failed_attempts"], snapshot["aborted"]) == (1, 1, 1)


# --- the C method patch() installs (_ClusterCommand) ---------------------------


class Client:
    """A cluster client whose command loop records its calls."""

    def __init__(self, retry):
        self.retry = retry
        self.calls = []

    def execute_command(self, *args, **kwargs):
        """Send a command (the docstring the C method shows)."""
        self.calls.append((args, kwargs))
        return "sent"


def test_the_c_method_is_a_method_that_stands_for_redis_pys():
    import inspect

    method = _cluster.sync_command(Client.execute_command)
    patched = type("Patched", (Client,), {"execute_command": method})
    assert patched.execute_command is method
    assert method.__wrapped__ is Client.execute_command
    assert method._redis_backoff_c_wraps is Client.execute_command
    assert method.__name__ == "execute_command"
    assert method.__qualname__ == "Client.execute_command"
    assert method.__doc__ == Client.execute_command.__doc__
    assert inspect.signature(method) == inspect.signature(Client.execute_command)
    client = patched(redis_backoff_c.Retry(NoBackoff(), 1))
    assert client.execute_command("GET", "k", keys=["k"]) == "sent"
    assert patched.execute_command(client, "SET", "k", 1) == "sent"
    bound = client.execute_command
    assert bound.__self__ is client and bound("PING") == "sent"
    assert client.calls == [(("GET", "k"), {"keys": ["k"]}), (("SET", "k", 1), {}), (("PING",), {})]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the marker inspect reads is 3.12's")
def test_the_asyncio_c_method_is_a_coroutine_function():
    import inspect

    async def execute(self, *args):
        return args

    method = _speedups._ClusterCommand(execute, _cluster._async_execute(execute, tuple), None, None)
    assert inspect.iscoroutinefunction(method)
    assert not hasattr(_cluster.sync_command(execute), "_is_coroutine_marker")
    client = Client(redis_backoff_c.asyncio.retry.Retry(NoBackoff(), 1))
    assert asyncio.run(method(client, "GET", "k")) == ("GET", "k")


@pytest.mark.parametrize(
    "args",
    [
        (),
        (len,),
        (len, None, None, None),  # neither the asyncio nor the sync form
        (len, len, None, len),
        (1, None, contextvars.ContextVar("v"), len),
        (len, None, object(), len),
    ],
)
def test_the_c_method_refuses_bad_arguments(args):
    with pytest.raises(TypeError, match="_ClusterCommand"):
        _speedups._ClusterCommand(*args)
    with pytest.raises(TypeError, match="keyword"):
        _speedups._ClusterCommand(len, None, contextvars.ContextVar("v"), len, x=1)


def test_the_c_method_counts_only_a_c_retry_with_extras():
    method = _cluster.sync_command(Client.execute_command)
    stats = RetryStats()
    for retry in (object(), redis_backoff_c.Retry(NoBackoff(), 1)):
        assert method(Client(retry), "GET") == "sent"
    assert method(Client(redis_backoff_c.Retry(NoBackoff(), 1, stats=stats)), "GET") == "sent"
    assert_adds_up(stats, 1)

    class NoRetry:
        execute_command = method

        def __init__(self):
            self.calls = []

    # No retry attribute: redis-py's function runs (and meets it if it reads it).
    assert NoRetry().execute_command("GET") == "sent"

    class RaisingRetry(NoRetry):
        @property
        def retry(self):
            raise KeyError("retry")

    # A retry that raises otherwise: raised, as redis-py's self.retry would.
    with pytest.raises(KeyError, match="retry"):
        RaisingRetry().execute_command("GET")
    with pytest.raises(TypeError, match="client as first argument"):
        method()


def test_an_on_error_that_returns_no_exception():
    import contextvars as cv

    def on_error(client, pending, error):
        return "not an exception"

    method = _speedups._ClusterCommand(Loop.execute_command, None, cv.ContextVar("c"), on_error)
    retry = redis_backoff_c.Retry(NoBackoff(), 1, stats=RetryStats())
    with pytest.raises(TypeError, match="on_error\\(\\) must return an exception, not str"):
        method(Loop(retry, [KeyError("k")]), "GET")


def test_a_retry_that_frees_the_method_while_it_is_read():
    """Reading self.retry replaces the class attribute holding the only
    reference to the C method (and unsets the extras): the call goes on
    with what it holds, and counts nothing it cannot."""
    stats = RetryStats()
    retry = redis_backoff_c.Retry(NoBackoff(), 1, stats=stats)

    class Hostile(Client):
        @property
        def retry(self):
            type(self).execute_command = Client.execute_command
            gc.collect()
            return retry

    Hostile.execute_command = _cluster.sync_command(Client.execute_command)
    client = Hostile.__new__(Hostile)
    client.calls = []
    assert client.execute_command("GET") == "sent"
    assert Hostile.execute_command is Client.execute_command
    assert_adds_up(stats, 1)


def test_the_c_method_leaks_nothing():
    from leakcheck import assert_no_leak

    method = _cluster.sync_command(Loop.execute_command)
    stats = RetryStats()
    plain = redis_backoff_c.Retry(NoBackoff(), 2)
    counted = redis_backoff_c.Retry(NoBackoff(), 2, stats=stats, budget=RetryBudget(100, 100))

    def run_all():
        assert method(Loop(plain, [1]), "GET") == 1
        assert method(Loop(counted, [ConnectionError(), 2]), "GET") == 2
        with pytest.raises(KeyError):
            method(Loop(counted, [KeyError("k")]), "GET")

    assert_no_leak(run_all, watched=[method, plain, counted])


def test_the_c_method_in_a_cycle_is_collected():
    import weakref

    class Owner:
        pass

    def make():
        owner = Owner()

        def execute(self, *args):
            return owner  # the method reaches the owner through the closure

        owner.method = _cluster.sync_command(execute)
        return weakref.ref(owner)

    alive = make()
    gc.collect()
    assert alive() is None
