"""The coroutine protocol of what call_with_retry returns: send, throw,
close, awaiting twice, re-entry, finalization.

redis-py returns a native coroutine, the C side its own awaitable; where
the two must behave alike the test runs on both (`impl`), and what only
the C object has is tested on the C side alone (`c_impl`).
"""

import asyncio
import gc
import re
import warnings

import pytest
import redis.exceptions
from support import run_on, suspend

import redis_backoff_c

ConnectionError_ = redis.exceptions.ConnectionError


class Log:
    """do/fail callables that block at a bare yield and record what they see."""

    def __init__(self, fail_count=0):
        self.events = []
        self.fail_count = fail_count

    async def do(self):
        self.events.append("do")
        try:
            await suspend()
        except BaseException as error:
            self.events.append(("do got", type(error).__name__))
            raise
        finally:
            self.events.append("do finally")
        if self.fail_count > 0:
            self.fail_count -= 1
            raise ConnectionError_("down")
        return "done"

    async def fail(self, error):
        self.events.append("fail")
        try:
            await suspend()
        except BaseException as error:
            self.events.append(("fail got", type(error).__name__))
            raise


def new_call(impl, log, retries=3):
    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), retries)
    return retry.call_with_retry(log.do, log.fail)


def finish(awaitable, *, sends=10):
    """Send None until it returns; its result."""
    for _ in range(sends):
        try:
            awaitable.send(None)
        except StopIteration as stop:
            return stop.value
    raise AssertionError("did not finish")


def test_protocol_methods_exist(impl):
    awaitable = new_call(impl, Log())
    assert awaitable.__await__() is not None
    for name in ("send", "throw", "close"):
        assert callable(getattr(awaitable, name))
    awaitable.close()


def test_not_an_iterator_until_awaited(impl):
    # As a coroutine: next() and iter() raise TypeError; what __await__()
    # returns iterates.
    awaitable = new_call(impl, Log())
    with pytest.raises(TypeError, match="is not an iterator"):
        next(awaitable)
    with pytest.raises(TypeError, match="is not iterable"):
        iter(awaitable)
    iterator = awaitable.__await__()
    assert iter(iterator) is iterator
    assert next(iterator) is None  # suspended in do()
    with pytest.raises(StopIteration) as stop:
        next(iterator)
    assert stop.value.value == "done"


@pytest.mark.async_design("awaitable")
def test_await_returns_an_iterator_over_itself(c_impl):
    awaitable = new_call(c_impl, Log())
    assert awaitable.__await__() is awaitable
    assert iter(awaitable) is awaitable
    assert next(awaitable) is None  # suspended in do()
    with pytest.raises(StopIteration) as stop:
        next(awaitable)
    assert stop.value.value == "done"


def test_awaiting_twice_is_an_error(impl):
    async def main():
        awaitable = new_call(impl, Log())
        assert await awaitable == "done"
        with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
            await awaitable

    run_on("asyncio", main())


def test_send_after_done_and_throw_after_done(impl):
    awaitable = new_call(impl, Log())
    assert finish(awaitable) == "done"
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        awaitable.send(None)
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        awaitable.throw(ValueError("late"))
    assert awaitable.close() is None


def test_send_non_none_at_start(impl):
    log = Log()
    awaitable = new_call(impl, log)
    with pytest.raises(TypeError, match="non-None value to a just-started"):
        awaitable.send(1)
    assert log.events == []
    assert finish(awaitable) == "done"  # still startable


def test_send_value_reaches_the_awaited_object(impl):
    received = []

    class Echo:
        def __await__(self):
            received.append((yield "first"))
            return received[-1]

    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)

    async def fail(error):
        pass

    awaitable = retry.call_with_retry(Echo, fail)
    assert awaitable.send(None) == "first"
    with pytest.raises(StopIteration) as stop:
        awaitable.send("value")
    assert stop.value.value == "value" and received == ["value"]


def test_throw_into_fresh(impl):
    log = Log()
    awaitable = new_call(impl, log)
    error = ValueError("early")
    with pytest.raises(ValueError) as info:
        awaitable.throw(error)
    assert info.value is error and log.events == []
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        awaitable.send(None)


def test_throw_supported_error_at_do_is_retried(impl):
    log = Log()
    awaitable = new_call(impl, log)
    awaitable.send(None)  # in do()
    awaitable.throw(ConnectionError_("thrown"))  # do re-raises it: retried
    assert log.events == ["do", ("do got", "ConnectionError"), "do finally", "fail"]
    assert finish(awaitable) == "done"


def test_throw_foreign_error_at_fail_propagates_with_context(impl):
    log = Log(fail_count=1)
    awaitable = new_call(impl, log)
    awaitable.send(None)
    awaitable.send(None)  # do raised, now in fail
    assert log.events[-1] == "fail"
    thrown = KeyError("thrown")
    with pytest.raises(KeyError) as info:
        awaitable.throw(thrown)
    assert info.value is thrown
    assert isinstance(thrown.__context__, ConnectionError_)
    assert log.events[-1] == ("fail got", "KeyError")


def test_throw_class_and_value_forms(impl):
    log = Log()
    awaitable = new_call(impl, log)
    awaitable.send(None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12: (typ, val, tb)
        with pytest.raises(ValueError, match="as value"):
            awaitable.throw(ValueError, "as value")


def test_throw_bad_arguments(c_impl):
    awaitable = new_call(c_impl, Log())
    with pytest.raises(TypeError):
        awaitable.throw()
    with pytest.raises(TypeError):
        awaitable.throw(1)
    with pytest.raises(TypeError):
        awaitable.throw(ValueError("x"), 1)
    awaitable.close()


def test_close_fresh_then_done(impl):
    log = Log()
    awaitable = new_call(impl, log)
    assert awaitable.close() is None
    assert log.events == []
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        awaitable.send(None)


@pytest.mark.parametrize("where", ["do", "fail"])
def test_close_mid_await_closes_the_awaited_object(impl, where):
    log = Log(fail_count=1)
    awaitable = new_call(impl, log)
    awaitable.send(None)
    if where == "fail":
        awaitable.send(None)
    assert awaitable.close() is None
    expected = ("do got", "GeneratorExit") if where == "do" else ("fail got", "GeneratorExit")
    assert expected in log.events
    with pytest.raises(RuntimeError, match="cannot reuse already awaited"):
        awaitable.send(None)


def test_reentry_is_an_error(impl):
    holder = {}
    seen = []

    async def do():
        try:
            holder["awaitable"].send(None)
        except ValueError as error:
            seen.append(str(error))
        return "ok"

    async def fail(error):
        pass

    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)
    holder["awaitable"] = retry.call_with_retry(do, fail)
    assert finish(holder["awaitable"]) == "ok"
    assert seen and "already executing" in seen[0]


def test_stop_iteration_from_do_becomes_runtime_error(impl):
    def do():
        raise StopIteration("escaped")

    async def fail(error):
        pass

    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)
    with pytest.raises(RuntimeError, match="raised StopIteration") as info:
        retry.call_with_retry(do, fail).send(None)
    assert isinstance(info.value.__cause__, StopIteration)


def await_error(obj):
    """The interpreter's own TypeError message for `await obj` (CPython
    3.14 reworded it: "'int' object can't be awaited")."""

    async def probe():
        await obj

    coroutine = probe()
    try:
        coroutine.send(None)
    except TypeError as error:
        return str(error)
    finally:
        coroutine.close()
    raise AssertionError(f"{obj!r} was awaited")


def test_not_awaitable_do_result(impl):
    async def fail(error):
        pass

    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)
    with pytest.raises(TypeError, match=f"^{re.escape(await_error(42))}$"):
        retry.call_with_retry(lambda: 42, fail).send(None)


class BadAwait:
    """__await__ returns what it was given (no iterator); counts its calls."""

    def __init__(self, returns):
        self.returns, self.calls = returns, 0

    def __await__(self):
        self.calls += 1
        return self.returns


async def _coroutine():
    pass


@pytest.mark.parametrize("returns", ["int", "coroutine"])
def test_await_returning_no_iterator(impl, returns):
    """do()'s awaitable whose __await__ returns no iterator: the TypeError
    the running interpreter gives for that `await` (3.15 reworded it), and
    __await__ called once."""

    async def fail(error):
        pass

    result = 5 if returns == "int" else _coroutine()
    reference = BadAwait(result)
    expected = await_error(reference)
    bad = BadAwait(result)
    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        retry.call_with_retry(lambda: bad, fail).send(None)
    assert bad.calls == 1
    if returns == "coroutine":
        result.close()


def test_abandoned_suspended_awaitable_is_closed_by_gc(impl):
    log = Log()
    awaitable = new_call(impl, log)
    awaitable.send(None)
    log.cycle = awaitable  # a cycle: awaitable -> do (bound) -> log -> awaitable
    events = log.events
    del awaitable, log
    gc.collect()
    assert ("do got", "GeneratorExit") in events and "do finally" in events


def test_never_awaited_warns(impl):
    with pytest.warns(RuntimeWarning, match="was never awaited"):
        new_call(impl, Log())
        gc.collect()


def test_cr_running_and_cr_await(c_impl):
    log = Log()
    awaitable = new_call(c_impl, log)
    assert awaitable.cr_running is False and awaitable.cr_await is None
    awaitable.send(None)
    assert awaitable.cr_await is not None
    awaitable.close()
    assert awaitable.cr_await is None


def test_is_a_coroutine_for_asyncio(impl):
    import collections.abc

    awaitable = new_call(impl, Log())
    assert isinstance(awaitable, collections.abc.Coroutine)
    assert asyncio.iscoroutine(awaitable)
    awaitable.close()


@pytest.mark.async_design("awaitable")
def test_arguments_checked_at_call(c_impl):
    retry = c_impl.asyncio_retry.Retry(c_impl.backoff.NoBackoff(), 1)
    with pytest.raises(TypeError, match="'do' must be callable"):
        retry.call_with_retry(1, lambda e: None)
    with pytest.raises(TypeError, match="'fail' must be callable"):
        retry.call_with_retry(lambda: None, None)
    with pytest.raises(TypeError):
        retry.call_with_retry(lambda: None)
    with pytest.raises(TypeError):
        retry.call_with_retry(lambda: None, lambda e: None, nope=1)


@pytest.mark.async_design("coroutine")
def test_arguments_checked_where_they_are_first_called(c_impl):
    # The coroutine design's call only creates the coroutine, and meets do
    # and fail where redis-py's coroutine does: do at its first call, fail
    # at the first failure; each TypeError names the argument.
    retry = c_impl.asyncio_retry.Retry(c_impl.backoff.NoBackoff(), 1)
    with_extras = c_impl.asyncio_retry.Retry(
        c_impl.backoff.NoBackoff(), 1, stats=redis_backoff_c.RetryStats()
    )
    for each in (retry, with_extras):
        coro = each.call_with_retry(1, lambda e: None)
        with pytest.raises(TypeError, match="argument 'do' must be callable, not int"):
            coro.send(None)

        async def fails():
            raise redis.exceptions.ConnectionError("down")

        coro = each.call_with_retry(fails, None)
        with pytest.raises(TypeError, match="argument 'fail' must be callable, not NoneType"):
            coro.send(None)

        async def returns():
            return "done"

        # A fail that is never called is never checked, as in redis-py.
        assert run_on("hand", each.call_with_retry(returns, None)) == "done"

        # do's own TypeError passes through untouched.
        async def raises_type_error():
            raise TypeError("do's own")

        coro = each.call_with_retry(raises_type_error, lambda e: None)
        with pytest.raises(TypeError, match="^do's own$"):
            coro.send(None)
    assert with_extras.stats.snapshot()["unhandled_errors"] == 2
    with pytest.raises(TypeError):
        retry.call_with_retry(lambda: None)
    with pytest.raises(TypeError):
        retry.call_with_retry(lambda: None, lambda e: None, nope=1)


# The C awaitable's own tp_traverse; a native coroutine's is the
# interpreter's (on 3.10 its referents are its frame, not the locals).
@pytest.mark.async_design("awaitable")
def test_gc_sees_what_the_awaitable_holds_and_it_lets_go_when_done(c_impl):
    log = Log()
    awaitable = new_call(c_impl, log)
    assert gc.is_tracked(awaitable)
    awaitable.send(None)  # suspended in do(): holds do, fail, the Retry, do's coroutine
    held = gc.get_referents(awaitable)
    assert any(getattr(r, "__self__", None) is log for r in held)
    assert any(type(r).__name__ == "coroutine" for r in held)
    awaitable.close()
    held = gc.get_referents(awaitable)
    assert not any(getattr(r, "__self__", None) is log for r in held)
    assert not any(type(r).__name__ == "coroutine" for r in held)


def test_every_never_awaited_one_warns_after_reuse(impl):
    # Finished, closed and finalized awaitables come and go before each
    # never-awaited one: each of those still warns exactly once.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(40):
            finish(new_call(impl, Log()))
            new_call(impl, Log()).close()
            suspended = new_call(impl, Log())
            suspended.send(None)
            del suspended  # finalized: closed
            new_call(impl, Log())
            gc.collect(0)
    never = [w for w in caught if "was never awaited" in str(w.message)]
    assert len(never) == 40


@pytest.mark.parametrize("kind", ["do", "fail"])
def test_generator_based_awaitables_do_not_grow_memory(c_impl, kind):
    # Awaiting objects whose __await__ is a generator, in the scenario
    # harness: looking their code flags up by attribute name once made this
    # grow by a small object per run (seen with tracemalloc, 3.11).
    import tracemalloc

    from scenarios import Scenario, play

    scenario = Scenario(("conn", "ok"), **{f"{kind}_kind": "object"})

    def runs(count):
        for _ in range(count):
            with pytest.MonkeyPatch.context() as monkeypatch:
                play("asyncio", c_impl, scenario, monkeypatch)

    runs(20)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        runs(300)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 8_000, grown


@pytest.mark.parametrize("results", [(1, 2, True, None, 1, False), ("a", 300, (1,), 0)])
def test_stop_iterations_held_at_once_keep_their_own_args(impl, results):
    """Each return's StopIteration is StopIteration(result) (StopIteration()
    for None, as a coroutine's send raises it), however many earlier ones
    are still held, and as the interpreter consumes others in between (the C
    side reuses a singleton result's args tuple once nothing holds it)."""
    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)

    async def fail(error):
        pass

    def returning(value):
        async def do():
            return value

        return do

    async def awaited(value):
        return await retry.call_with_retry(returning(value), fail)

    held = []
    for value in results:
        assert run_on("asyncio", awaited(value)) == value
        awaitable = retry.call_with_retry(returning(value), fail)
        with pytest.raises(StopIteration) as stop:
            awaitable.send(None)
        held.append((value, stop.value))
        assert run_on("asyncio", awaited(value)) == value
    for value, stop in held:
        assert type(stop) is StopIteration
        assert stop.value is value
        assert stop.args == (() if value is None else (value,))
        assert stop.__context__ is None and stop.__cause__ is None


@pytest.mark.async_design("awaitable")
def test_next_raises_stop_iteration_with_the_result(c_impl):
    retry = c_impl.asyncio_retry.Retry(c_impl.backoff.NoBackoff(), 1)

    async def fail(error):
        pass

    held = []
    for value in (1, None, 7, 1):

        async def do(value=value):
            return value

        with pytest.raises(StopIteration) as stop:
            next(retry.call_with_retry(do, fail).__await__())
        held.append((value, stop.value))
    for value, stop in held:
        assert stop.value is value and stop.args == (() if value is None else (value,))


@pytest.mark.parametrize("value", [5, None, "text"])
def test_stop_iteration_from_send_chains_the_handled_exception(impl, value):
    """send() inside an `except` block raises the StopIteration with the
    handled exception as __context__ where a coroutine's send does: always
    up to 3.13; from 3.14 on only for a None result (a StopIteration(value)
    is raised with PyErr_SetRaisedException, which does not chain)."""
    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)

    async def do():
        return value

    native = do()
    try:
        raise KeyError("native")
    except KeyError as native_handled:
        try:
            native.send(None)
        except StopIteration as stop:
            chains = stop.__context__ is native_handled

    async def fail(error):
        pass

    awaitable = retry.call_with_retry(do, fail)
    handled = KeyError("handled")
    try:
        raise handled
    except KeyError:
        try:
            awaitable.send(None)
        except StopIteration as stop:
            caught = stop
    assert caught.value is value and caught.args == (() if value is None else (value,))
    assert caught.__context__ is (handled if chains else None)
    assert not caught.__suppress_context__
