"""Every path through the C asyncio Retry and its awaitable, run thousands
of times, leaves no object, memory or reference behind (C side only; see
leakcheck.py).  Most paths drive the awaitable by hand (send/throw/close),
which is what an event loop does, without the loop's own allocations;
cancellation of a real task runs on one event loop kept for the test."""

import asyncio
import copy
import pickle
import warnings

import pytest
from leakcheck import assert_no_leak
from support import Conn, UserError, ignore_failure, suspend

import redis_backoff_c.asyncio.retry as async_module
import redis_backoff_c.backoff as backoff
from redis_backoff_c.asyncio.retry import Retry


async def no_sleep(delay):
    return None


@pytest.fixture(autouse=True)
def _no_sleeping(monkeypatch):
    monkeypatch.setattr(async_module, "sleep", no_sleep)


def finish(awaitable):
    """Drive `awaitable` to its end by hand: ("value", v) or ("raised", e)."""
    try:
        while True:
            awaitable.send(None)
    except StopIteration as stop:
        return ("value", stop.value)
    except BaseException as error:  # noqa: BLE001 - the outcome
        return ("raised", type(error))


def flaky(times, error=Conn, suspending=False):
    """An async do() that raises `error` `times` times (per rewind), then
    returns "ok"."""
    state = {"left": times}

    async def do():
        if suspending:
            await suspend()
        if state["left"]:
            state["left"] -= 1
            raise error("down")
        return "ok"

    do.rewind = lambda: state.update(left=times)
    return do


STRATEGIES = {
    "no-backoff": lambda: backoff.NoBackoff(),
    "exponential": lambda: backoff.ExponentialBackoff(),  # "sleeps" (patched)
    "decorrelated": lambda: backoff.DecorrelatedJitterBackoff(),
    "subclass": lambda: type("Sub", (backoff.EqualJitterBackoff,), {})(),
}


@pytest.fixture(params=sorted(STRATEGIES))
def strategy(request):
    return STRATEGIES[request.param]()


@pytest.mark.parametrize("suspending", [False, True])
def test_success(strategy, suspending):
    retry = Retry(strategy, 3)
    do = flaky(0, suspending=suspending)
    assert_no_leak(
        lambda: finish(retry.call_with_retry(do, ignore_failure)) == ("value", "ok"),
        watched=[retry, do],
    )


@pytest.mark.parametrize("suspending", [False, True])
def test_failures_then_success(strategy, suspending):
    retry = Retry(strategy, 5)
    do = flaky(3, suspending=suspending)

    def run():
        do.rewind()
        assert finish(retry.call_with_retry(do, ignore_failure, None, True)) == ("value", "ok")

    assert_no_leak(run, watched=[retry, strategy])


def test_exhausted_not_retryable_unsupported():
    retry = Retry(backoff.NoBackoff(), 2)
    always = flaky(10**9)
    other = flaky(10**9, UserError)

    def not_retryable(error):
        return False

    def run():
        assert finish(retry.call_with_retry(always, ignore_failure)) == ("raised", Conn)
        assert finish(retry.call_with_retry(always, ignore_failure, not_retryable)) == (
            "raised",
            Conn,
        )
        assert finish(retry.call_with_retry(other, ignore_failure)) == ("raised", UserError)

    assert_no_leak(run, watched=[retry, always, other])


@pytest.mark.parametrize("suspending", [False, True])
def test_rejected_by_the_retrys_checker(suspending):
    async def blocking_fail(error, *count):
        if suspending:
            await suspend()

    def never(error):
        return False

    rejecting = Retry(backoff.NoBackoff(), 3, is_retryable=never)
    accepting = Retry(backoff.NoBackoff(), 2, is_retryable=lambda error: True)
    always = flaky(10**9, suspending=suspending)

    def run():
        assert finish(rejecting.call_with_retry(always, blocking_fail)) == ("raised", Conn)
        outcome = finish(rejecting.call_with_retry(always, blocking_fail, None, True))
        assert outcome == ("raised", Conn)
        outcome = finish(accepting.call_with_retry(always, blocking_fail, never))
        assert outcome == ("raised", Conn)

    assert_no_leak(run, watched=[rejecting, accepting, always, never])


def test_the_retrys_checker_or_its_fail_raising():
    def raising_checker(error):
        raise UserError("checker")

    async def raising_fail(error):
        raise UserError("fail")

    raising = Retry(backoff.NoBackoff(), 3, is_retryable=raising_checker)
    rejecting = Retry(backoff.NoBackoff(), 3, is_retryable=lambda error: False)
    always = flaky(10**9)

    def run():
        assert finish(raising.call_with_retry(always, ignore_failure)) == ("raised", UserError)
        assert finish(rejecting.call_with_retry(always, raising_fail)) == ("raised", UserError)
        # print's None cannot be awaited: TypeError
        assert finish(rejecting.call_with_retry(always, print)) == ("raised", TypeError)

    assert_no_leak(run, watched=[raising, rejecting, always])


def test_fail_replacing_the_checker():
    retry = Retry(backoff.NoBackoff(), 3)
    always = flaky(10**9)

    async def replacing_fail(error):
        retry.is_retryable = lambda error: False  # a new one each time

    def run():
        retry.is_retryable = None
        assert finish(retry.call_with_retry(always, replacing_fail)) == ("raised", Conn)

    assert_no_leak(run, watched=[retry, always])


def test_callbacks_and_compute_raising():
    retry = Retry(backoff.NoBackoff(), 3)
    always = flaky(10**9)

    async def raising_fail(error):
        raise UserError("fail")

    def raising_predicate(error):
        raise UserError("is_retryable")

    class Broken(backoff.ExponentialBackoff):
        def compute(self, failures):
            raise UserError("compute")

    broken = Retry(Broken(), 3)

    async def raising_sleep(delay):
        raise UserError("sleep")

    sleepy = Retry(backoff.ConstantBackoff(1), 3)

    def run():
        assert finish(retry.call_with_retry(always, raising_fail)) == ("raised", UserError)
        assert finish(retry.call_with_retry(always, ignore_failure, raising_predicate)) == (
            "raised",
            UserError,
        )
        assert finish(broken.call_with_retry(always, ignore_failure)) == ("raised", UserError)
        # Assigned directly: monkeypatch would record every call (the
        # autouse fixture restores the module at the end).
        async_module.sleep = raising_sleep
        assert finish(sleepy.call_with_retry(always, ignore_failure)) == ("raised", UserError)
        async_module.sleep = no_sleep

    assert_no_leak(run)


def test_argument_errors():
    retry = Retry(backoff.NoBackoff(), 3)

    def run():
        for args, kwargs in [
            ((1, ignore_failure), {}),
            ((ignore_failure,), {}),
            ((ignore_failure, ignore_failure), {"nope": 1}),
        ]:
            # At the call (the awaitable design) or when awaited (the
            # coroutine design, where the call only creates the coroutine).
            try:
                outcome = finish(retry.call_with_retry(*args, **kwargs))
            except TypeError:
                continue
            if outcome != ("raised", TypeError):
                raise AssertionError(f"no TypeError: {outcome}")

    assert_no_leak(run)


def test_every_form_of_the_method_call():
    # The awaitable design's call_with_retry is a C descriptor
    # (csrc/async_method.c): unbound calls, self by keyword, a subclass's
    # instance, the refusals, __get__ and what inspect reads from it.
    retry = Retry(backoff.NoBackoff(), 3)
    sub = type("SubRetry", (Retry,), {})(backoff.NoBackoff(), 3)
    do = flaky(0)
    method = Retry.call_with_retry

    def refused(*args, **kwargs):
        try:
            outcome = finish(method(*args, **kwargs))
        except TypeError:
            return
        if outcome != ("raised", TypeError):
            raise AssertionError(f"no TypeError: {outcome}")

    def run():
        ok = ("value", "ok")
        assert finish(method(retry, do, ignore_failure)) == ok
        assert finish(method(retry, do=do, fail=ignore_failure, with_failure_count=True)) == ok
        assert finish(method(self=retry, do=do, fail=ignore_failure)) == ok
        assert finish(method(sub, do, ignore_failure)) == ok
        assert (
            finish(retry.call_with_retry.__func__.__get__(retry, Retry)(do, ignore_failure)) == ok
        )
        refused(1, do, ignore_failure)
        refused()
        refused(do=do, fail=ignore_failure)
        refused(retry, do, ignore_failure, nope=1)
        for name in ("__code__", "__defaults__", "__annotations__", "__name__", "__qualname__"):
            getattr(method, name)
        pickle.loads(pickle.dumps(method))

    assert_no_leak(run, watched=[retry, sub, do])


@pytest.mark.parametrize("where", ["do", "fail", "sleep", "fail of a rejection"])
@pytest.mark.parametrize("how", ["throw", "close"])
def test_thrown_into_and_closed_at_each_await(where, how, monkeypatch):
    # What a cancellation does to the awaitable: CancelledError thrown in
    # at the await point (or GeneratorExit by close()), which must reach
    # the awaited object and come out.
    async def blocking_fail(error):
        if where.startswith("fail"):
            await suspend()

    async def blocking_sleep(delay):
        await suspend()

    monkeypatch.setattr(async_module, "sleep", blocking_sleep)
    own = {"is_retryable": lambda error: False} if where == "fail of a rejection" else {}
    retry = Retry(backoff.ConstantBackoff(1) if where == "sleep" else backoff.NoBackoff(), 3, **own)
    do = flaky(0 if where == "do" else 1, suspending=where == "do")

    def run():
        do.rewind()
        awaitable = retry.call_with_retry(do, blocking_fail)
        awaitable.send(None)  # now suspended in do(), fail() or sleep()
        if how == "close":
            awaitable.close()
            return
        try:
            awaitable.throw(asyncio.CancelledError())
        except asyncio.CancelledError:
            return
        raise AssertionError("not cancelled")

    assert_no_leak(run, watched=[retry, do])


def test_never_awaited():
    retry = Retry(backoff.NoBackoff(), 3)
    do = flaky(0)

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            retry.call_with_retry(do, ignore_failure)

    assert_no_leak(run, watched=[retry, do])


def test_task_cancellation_on_an_event_loop():
    loop = asyncio.new_event_loop()
    retry = Retry(backoff.NoBackoff(), 3)

    async def do():
        await asyncio.get_running_loop().create_future()

    async def one():
        task = loop.create_task(retry.call_with_retry(do, ignore_failure))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("not cancelled")

    try:
        assert_no_leak(lambda: loop.run_until_complete(one()), calls=500, watched=[retry])
    finally:
        loop.close()


def test_construction_methods_copies():
    strategy = backoff.ExponentialBackoff()
    errors = (UserError, KeyError)
    retry = Retry(strategy, 3)
    same = Retry(backoff.ExponentialBackoff(), 3)

    def run():
        Retry(strategy, -1, errors)
        Retry(strategy, -1, errors, print)
        try:
            Retry(strategy, "3")
        except TypeError:
            pass
        try:
            Retry(strategy, 3, errors, 3)
        except TypeError:
            pass
        with_checker = Retry(strategy, 3, is_retryable=print)
        with_checker.is_retryable = None
        with_checker._is_retryable = print
        copy.copy(with_checker)
        copy.deepcopy(with_checker)
        assert with_checker != retry
        hash(with_checker)
        repr(with_checker)
        retry.update_retries(4)
        retry.update_supported_errors([KeyError])
        retry.get_retries()
        copy.copy(retry)
        copy.deepcopy(retry)
        pickle.loads(pickle.dumps(retry))
        assert retry == same or retry != same
        hash(retry)
        repr(retry)

    assert_no_leak(run, calls=500, watched=[strategy, errors, retry])


def test_at_most_once():
    retry = Retry(backoff.NoBackoff(), 2, writes="at-most-once")
    always = flaky(10**9)

    def run():
        assert finish(retry.call_with_retry(always, ignore_failure)) == ("raised", Conn)

    assert_no_leak(run, watched=[retry, always])
