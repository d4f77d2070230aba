"""The hardening checks of test_gc.py, test_threads.py, test_reentrancy.py
and test_fuzz.py for the asyncio Retry: cycles through it are collected;
threads each running an event loop share one; callbacks that re-enter it or
change it mid-call behave as redis-py's coroutine does; arbitrary arguments
give only clean exceptions."""

import asyncio
import gc
import random
import sys
import threading
import weakref

import pytest
import redis.asyncio.retry
import redis.backoff
import redis.exceptions
from hypothesis import HealthCheck, given, settings, strategies as st
from support import Conn, both, ignore_failure, suspend

import redis_backoff_c.asyncio.retry as async_module
import redis_backoff_c.backoff as backoff
from redis_backoff_c.asyncio.retry import Retry


def finish(awaitable):
    try:
        while True:
            awaitable.send(None)
    except StopIteration as stop:
        return ("value", stop.value)
    except Exception as error:  # noqa: BLE001 - the outcome
        return ("raised", type(error).__name__, str(error))


def flaky(times, result="ok"):
    left = [times]

    async def do():
        await suspend()
        if left[0]:
            left[0] -= 1
            raise Conn("down")
        return result

    return do


# ---- GC ----


def test_strategy_subclass_referring_to_its_async_retry():
    def build():
        strategy = type("Sub", (backoff.ExponentialBackoff,), {})()
        retry = Retry(strategy, 3)
        strategy.retry = retry
        return [weakref.ref(strategy)]

    refs = build()
    gc.collect()
    assert [ref() for ref in refs] == [None]


def test_suspended_awaitable_whose_do_closure_holds_the_retry():
    def build():
        strategy = type("Sub", (backoff.NoBackoff,), {})()
        retry = Retry(strategy, 3)

        async def do():
            await suspend()
            return retry

        awaitable = retry.call_with_retry(do, ignore_failure)
        awaitable.send(None)  # suspended inside do(): the awaitable holds do
        strategy.awaitable = awaitable  # retry -> strategy -> awaitable -> do -> retry
        return weakref.ref(strategy)

    ref = build()
    gc.collect()
    assert ref() is None


# ---- threads ----


def test_threads_with_their_own_loops_share_one_retry(monkeypatch):
    delays = []

    async def record(delay):
        delays.append(delay)  # list.append: atomic

    monkeypatch.setattr(async_module, "sleep", record)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    retry = Retry(backoff.DecorrelatedJitterBackoff(0.512, 0.008), 5)
    errors = []
    calls = 1500

    async def many(index):
        for i in range(calls):
            result = await retry.call_with_retry(flaky(2, (index, i)), ignore_failure)
            if result != (index, i):
                raise AssertionError(result)

    def work(index):
        try:
            asyncio.run(many(index))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    assert len(delays) == 8 * calls * 2
    assert all(0.008 <= delay <= 0.512 for delay in delays)


# ---- reentrancy ----


def play_async(impl, monkeypatch, action, script):
    events = []

    async def sleep(delay):
        events.append(("sleep", delay))

    monkeypatch.setattr(impl.asyncio_retry, "sleep", sleep)
    retry = impl.asyncio_retry.Retry(impl.backoff.ExponentialBackoff(1.0, 0.25), 3)
    steps = iter(script)

    async def do():
        step = next(steps)
        events.append(("do", step))
        await suspend()
        if step == "conn":
            raise Conn(step)
        return step

    async def fail(error, count):
        events.append(("fail", count))
        await action(retry, count, events)

    events.append(finish(retry.call_with_retry(do, fail, with_failure_count=True)))
    return events


async def nested_call(retry, count, events):
    if count == 1:
        events.append(("nested", await retry.call_with_retry(flaky(1, "inner"), ignore_failure)))


async def replace_everything(retry, count, events):
    if count == 1:
        retry._backoff = type(retry._backoff)(0.5, 0.5)  # the old one is freed
        retry._supported_errors = (KeyError, Conn)
        retry.update_retries(1)
        gc.collect()


@pytest.mark.parametrize("action", [nested_call, replace_everything])
def test_fail_reenters_or_changes_the_async_retry(action, monkeypatch):
    both(lambda impl: play_async(impl, monkeypatch, action, ["conn", "conn", "conn", "ok"]))


def test_async_compute_override_that_raises(monkeypatch):
    class Broken(Exception):
        pass

    def play(impl):
        class Raising(impl.backoff.ExponentialBackoff):
            def compute(self, failures):
                raise Broken("compute")

        retry = impl.asyncio_retry.Retry(Raising(), 3)
        awaitable = retry.call_with_retry(flaky(5), ignore_failure)
        try:
            while True:
                awaitable.send(None)
        except Broken as error:
            return (str(error), type(error.__context__).__name__)

    assert both(play) == ("compute", "ConnectionError")


# ---- fuzz ----

anything = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=3),
    st.booleans(),
    st.sampled_from([Conn, KeyError, int, Conn("x"), object(), (Conn,), [Conn], b"x"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    backoff_arg=st.one_of(
        st.sampled_from([("C", "ExponentialBackoff"), ("C", "NoBackoff")]), anything
    ),
    retries=st.one_of(st.integers(min_value=-2, max_value=3), anything),
    errors=st.one_of(st.none(), anything, st.lists(anything, max_size=2)),
    failures=st.integers(min_value=0, max_value=4),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_async_retry_takes_anything(backoff_arg, retries, errors, failures, seed):
    def play(retry_module, backoff_module):
        if isinstance(backoff_arg, tuple) and backoff_arg[:1] == ("C",):
            strategy = getattr(backoff_module, backoff_arg[1])()
        else:
            strategy = backoff_arg
        kwargs = {} if errors is None else {"supported_errors": errors}
        try:
            retry = retry_module.Retry(strategy, retries, **kwargs)
        except (TypeError, ValueError, OverflowError) as error:
            return ("construction raised", type(error).__name__)
        random.seed(seed)
        return finish(retry.call_with_retry(flaky(failures), ignore_failure))

    with pytest.MonkeyPatch.context() as monkeypatch:

        async def sleep(delay):
            return None

        monkeypatch.setattr(redis.asyncio.retry, "sleep", sleep)
        monkeypatch.setattr(async_module, "sleep", sleep)
        expected = play(redis.asyncio.retry, redis.backoff)
        actual = play(async_module, backoff)
    if actual[0] == "construction raised":
        assert actual[1] == "TypeError"  # the documented early TypeError
    elif expected[0] == "value":
        assert actual == expected


class HostileNames(type):
    """A metaclass whose __module__, read when the interpreter is asked
    for the TypeError of an `await` (redis_backoff_c._rules.await_error),
    changes the Retry running the call, or raises."""

    retry = None
    raises = False

    @property
    def __module__(cls):
        retry = HostileNames.retry
        retry._backoff, retry._retries = backoff.NoBackoff(), -1
        retry._supported_errors = ()
        if HostileNames.raises:
            raise KeyError("module")
        return "hostile"


class BadAwait(metaclass=HostileNames):
    def __await__(self):
        return 5  # no iterator


@pytest.mark.parametrize("raises", [False, True])
def test_await_error_whose_type_names_change_the_retry(raises):
    """The failure loop awaits fail()'s result in C on both designs; the
    TypeError for a result that cannot be awaited runs Python code that
    changes the Retry: the call raises that error (or the one the names
    raised) and the Retry works after."""
    retry = Retry(backoff.ConstantBackoff(0), 3)
    HostileNames.retry, HostileNames.raises = retry, raises

    async def fail(error):
        return None

    def do():
        raise Conn("down")

    expected = KeyError if raises else TypeError
    with pytest.raises(expected):
        asyncio.run(retry.call_with_retry(do, lambda error: BadAwait()))
    assert retry._retries == -1 and retry._supported_errors == ()

    async def ok():
        return 7

    assert asyncio.run(retry.call_with_retry(ok, fail)) == 7
    gc.collect()
