"""The asyncio Retry's own contract, run on redis-py and on the C type alike.

What both Retry flavors share is tested once over flavor x implementation
(test_call_with_retry.py, test_retry_object.py).  Here: what only the
asyncio Retry has.  Every call_with_retry scenario records its full event
sequence (see scenarios.py) and must match what redis-py's coroutine
records for the same scenario, on the same loop (by hand, asyncio, uvloop),
with do and fail returning coroutines, other awaitables or futures; then
results carried by StopIteration, exc_info across awaits, cancellation and
timeouts, tasks.
"""

import asyncio
import sys

import pytest
import redis.asyncio.retry
import redis.exceptions
import redis.retry
from scenarios import ERRORS, RecordingBackoff, Scenario, play
from support import REDIS_PY_HAS_CHECKER, never, run_on, side_without_checker, suspend

import redis_backoff_c

LOOPS = ["hand", "asyncio", "uvloop"]

# (id, scenario): what do() does each call, and how the rest answers.
SCENARIOS = [
    ("success", Scenario(("ok",))),
    ("one-failure", Scenario(("conn", "ok"))),
    ("timeout-then-ok", Scenario(("timeout", "timeout", "ok"))),
    ("subclass-retried", Scenario(("sub", "ok"))),
    ("exhausted-3", Scenario(("conn",) * 5, retries=3)),
    ("retries-0", Scenario(("conn", "ok"), retries=0)),
    ("retries-1-ok", Scenario(("conn", "ok"), retries=1)),
    ("retries-1-exhausted", Scenario(("conn", "conn", "ok"), retries=1)),
    ("forever", Scenario(("conn",) * 7 + ("ok",), retries=-1)),
    ("foreign", Scenario(("conn", "foreign"))),
    ("keyboard-interrupt", Scenario(("conn", "kbi"))),
    ("system-exit", Scenario(("exit",))),
    ("is-retryable-true", Scenario(("conn", "conn", "ok"), is_retryable=(True,))),
    ("is-retryable-false", Scenario(("conn", "ok"), is_retryable=(False,))),
    ("is-retryable-false-2nd", Scenario(("conn",) * 3 + ("ok",), is_retryable=(1, 0))),
    ("is-retryable-raises", Scenario(("conn", "ok"), is_retryable=("raise",))),
    ("is-retryable-truthy", Scenario(("conn", "ok"), is_retryable=([1],))),
    ("with-count", Scenario(("conn", "conn", "ok"), with_failure_count=True)),
    ("with-count-false", Scenario(("conn", "ok"), with_failure_count=False)),
    ("fail-raises-1st", Scenario(("conn", "ok"), fail_raises_at=1)),
    ("fail-raises-2nd", Scenario(("conn",) * 3, fail_raises_at=2)),
    ("fail-raises-last", Scenario(("conn", "conn"), retries=1, fail_raises_at=2)),
    ("zero-delay", Scenario(("conn", "conn", "ok"), delays=(0, 0.0))),
    ("negative-delay", Scenario(("conn", "ok"), delays=(-1,))),
    ("mixed-delays", Scenario(("conn",) * 4 + ("ok",), delays=(0.5, 0, 2))),
    ("exponential-c-fast-path", Scenario(("conn",) * 3 + ("ok",), backoff="exponential")),
    ("exponential-exhausted", Scenario(("conn",) * 4, retries=2, backoff="exponential")),
    ("no-backoff", Scenario(("conn", "ok"), backoff="none")),
    ("do-object", Scenario(("conn", "ok"), do_kind="object")),
    ("fail-object", Scenario(("conn", "ok"), fail_kind="object")),
    ("fail-not-awaitable", Scenario(("conn", "ok"), fail_kind="none")),
    ("fail-object-raises", Scenario(("conn", "ok"), fail_kind="object", fail_raises_at=1)),
]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("scenario", [s for _, s in SCENARIOS], ids=[i for i, _ in SCENARIOS])
def test_scenario_matches_redis_py(impl, reference, scenario, loop, monkeypatch):
    assert play("asyncio", impl, scenario, monkeypatch, loop) == play(
        "asyncio", reference, scenario, monkeypatch, loop
    )


FUTURE_SCENARIOS = [
    Scenario(("conn", "ok"), do_kind="future"),
    Scenario(("conn", "timeout", "foreign"), do_kind="future"),
    Scenario(("conn", "ok"), fail_kind="future"),
    Scenario(("conn", "ok"), fail_kind="future", fail_raises_at=1),
]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("scenario", FUTURE_SCENARIOS)
def test_futures_match_redis_py(impl, reference, scenario, loop, monkeypatch):
    assert play("asyncio", impl, scenario, monkeypatch, loop) == play(
        "asyncio", reference, scenario, monkeypatch, loop
    )


def test_exhausted_raises_the_same_error_with_do_frames(impl, monkeypatch):
    monkeypatch.setattr(impl.asyncio_retry, "sleep", lambda delay: suspend())
    raised = []

    async def do():
        await suspend()
        raised.append(redis.exceptions.ConnectionError(len(raised)))
        raise raised[-1]

    async def fail(error):
        pass

    async def main():
        retry = impl.asyncio_retry.Retry(impl.backoff.ConstantBackoff(1), 2)
        with pytest.raises(redis.exceptions.ConnectionError) as info:
            await retry.call_with_retry(do, fail)
        return info.value

    error = run_on("asyncio", main())
    assert error is raised[-1] and len(raised) == 3
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-1] == "do"


# ---- results carried by StopIteration ----


@pytest.mark.parametrize(
    "result",
    [None, 0, (1, 2), (), ((),), StopIteration(5), ValueError("v"), [1]],
    ids=repr,
)
def test_result_returned_as_is(impl, result):
    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)

    async def do():
        return result

    async def fail(error):
        pass

    awaitable = retry.call_with_retry(do, fail)
    with pytest.raises(StopIteration) as info:
        awaitable.send(None)
    assert info.value.value is result
    assert run_on("asyncio", retry.call_with_retry(do, fail)) is result


# ---- __context__ of errors raised while handling one ----


def test_compute_raising_has_the_error_as_context(impl):
    class Broken(RecordingBackoff):
        def compute(self, failures):
            raise ArithmeticError("compute")

    captured = []

    async def do():
        captured.append(redis.exceptions.ConnectionError("x"))
        raise captured[-1]

    async def fail(error):
        pass

    async def main():
        retry = impl.asyncio_retry.Retry(Broken([]), 3)
        with pytest.raises(ArithmeticError) as info:
            await retry.call_with_retry(do, fail)
        assert info.value.__context__ is captured[0]

    run_on("asyncio", main())


def test_fail_sees_the_error_in_exc_info(impl, monkeypatch):
    seen = []

    async def fail(error):
        seen.append(sys.exc_info()[1] is error)
        await suspend()
        seen.append(sys.exc_info()[1] is error)

    async def do():
        if not seen:
            raise redis.exceptions.ConnectionError()
        return "ok"

    async def main():
        retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1)
        assert sys.exc_info()[1] is None
        assert await retry.call_with_retry(do, fail) == "ok"
        assert sys.exc_info()[1] is None

    run_on("asyncio", main())
    assert seen == [True, True]


# ---- cancellation at each await point, timeouts ----


class Cancellation:
    """A scenario that blocks at one await point until cancelled, recording
    what each awaited object saw."""

    def __init__(self, impl, where, monkeypatch, rejecting=False):
        self.impl = impl
        self.where = where
        self.rejecting = rejecting  # the Retry's checker says no
        self.events = []
        self.started = None
        self.errors = []
        monkeypatch.setattr(impl.asyncio_retry, "sleep", self.sleep)

    async def block(self, name):
        self.started.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError as error:
            self.events.append((name, "cancelled", sys.exc_info()[1] is error))
            raise
        finally:
            self.events.append((name, "finally"))

    async def do(self):
        self.events.append(("do",))
        if self.where == "do":
            await self.block("do")
        self.errors.append(redis.exceptions.ConnectionError("down"))
        raise self.errors[-1]

    async def fail(self, error):
        self.events.append(("fail",))
        if self.where == "fail":
            await self.block("fail")

    async def sleep(self, delay):
        self.events.append(("sleep", delay))
        await self.block("sleep")

    async def run(self):
        self.started = asyncio.Event()
        own = {"is_retryable": lambda error: False} if self.rejecting else {}
        retry = self.impl.asyncio_retry.Retry(self.impl.backoff.ConstantBackoff(1), 3, **own)
        task = asyncio.ensure_future(retry.call_with_retry(self.do, self.fail))
        await self.started.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as error:
            context = error.__context__
            self.events.append(("outcome", "cancelled", task.cancelled()))
            self.events.append(
                (
                    "context",
                    type(context).__name__,
                    bool(self.errors) and context is self.errors[-1],
                )
            )
        return self.events


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("where", ["do", "fail", "sleep"])
def test_cancellation_reaches_the_awaited_object(impl, reference, where, loop, monkeypatch):
    events = run_on(loop, Cancellation(impl, where, monkeypatch).run())
    expected = run_on(loop, Cancellation(reference, where, monkeypatch).run())
    assert events == expected
    assert (where, "finally") in events
    assert ("outcome", "cancelled", True) in events


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_wait_for_times_out_during_backoff(impl, loop):
    events = []

    async def do():
        events.append("do")
        raise redis.exceptions.TimeoutError("slow")

    async def fail(error):
        events.append("fail")

    async def main():
        retry = impl.asyncio_retry.Retry(impl.backoff.ConstantBackoff(30), 3)
        start = asyncio.get_running_loop().time()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(retry.call_with_retry(do, fail), 0.05)
        return asyncio.get_running_loop().time() - start

    elapsed = run_on(loop, main())
    assert events == ["do", "fail"]
    assert elapsed < 5


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_create_task_and_gather(impl, loop, monkeypatch):
    monkeypatch.setattr(impl.asyncio_retry, "sleep", lambda delay: asyncio.sleep(0))
    attempts = {}

    def make_do(key):
        async def do():
            attempts[key] = attempts.get(key, 0) + 1
            await asyncio.sleep(0)
            if attempts[key] <= key % 3:
                raise redis.exceptions.ConnectionError(key)
            return key * 10

        return do

    async def fail(error):
        await asyncio.sleep(0)

    async def main():
        retry = impl.asyncio_retry.Retry(impl.backoff.ExponentialBackoff(), 3)
        tasks = [asyncio.create_task(retry.call_with_retry(make_do(k), fail)) for k in range(5)]
        gathered = await asyncio.gather(
            *(retry.call_with_retry(make_do(k), fail) for k in range(5, 10))
        )
        return [await t for t in tasks] + gathered

    assert run_on(loop, main()) == [k * 10 for k in range(10)]


# ---- repr (the C type alone) ----
#
# The Retry object (construction, attributes, ==, hash, copies, its
# checker) is tested with the sync one's, over flavor x implementation, in
# test_retry_object.py.


def test_repr_names_the_parameters(c_impl):
    retry = c_impl.asyncio_retry.Retry(c_impl.backoff.NoBackoff(), 3)
    errors = retry._supported_errors
    assert repr(retry) == f"Retry(NoBackoff(), 3, supported_errors={errors!r})"


def test_errors_module_is_the_one_reference():
    assert ERRORS["conn"] is redis.exceptions.ConnectionError


# ---- the Retry's own checker: redis-py 8.2's is_retryable ----
#
# On redis-py 8.2 the C side's events are compared with redis-py's.  Before
# 8.2 redis-py has no checker to compare with: the C side, which takes one
# whatever redis-py is installed, must end each call, and the sequences
# spelled out below are checked on it.

CHECKER_SCENARIOS = [
    ("rejected-1st", Scenario(("conn", "ok"), own_checker=(False,))),
    ("rejected-2nd", Scenario(("conn", "timeout", "ok"), own_checker=(True, False))),
    (
        "rejected-with-count",
        Scenario(("conn",) * 3, own_checker=(1, 1, 0), with_failure_count=True),
    ),
    ("accepted", Scenario(("conn", "conn", "ok"), own_checker=(True,))),
    ("then-call-checker", Scenario(("conn", "ok"), own_checker=(True,), is_retryable=(False,))),
    ("before-call-checker", Scenario(("conn", "ok"), own_checker=(False,), is_retryable=(True,))),
    ("both-say-yes", Scenario(("conn", "timeout", "ok"), own_checker=(1,), is_retryable=(1,))),
    ("checker-raises", Scenario(("conn", "ok"), own_checker=("raise",))),
    ("falsy-verdict", Scenario(("conn", "ok"), own_checker=([],))),
    ("foreign-not-asked", Scenario(("foreign",), own_checker=(False,))),
    ("exhausted", Scenario(("conn",) * 3, retries=1, own_checker=(True,))),
    ("fail-raises", Scenario(("conn", "ok"), own_checker=(False,), fail_raises_at=1)),
    ("fail-object", Scenario(("conn", "ok"), own_checker=(False,), fail_kind="object")),
    ("fail-not-awaitable", Scenario(("conn", "ok"), own_checker=(False,), fail_kind="none")),
    ("do-object", Scenario(("conn", "ok"), own_checker=(False,), do_kind="object")),
    ("c-fast-path", Scenario(("conn",) * 3, own_checker=(1, 0), backoff="exponential")),
    (
        "fail-clears-checker",
        Scenario(("conn", "conn", "ok"), own_checker=(True, False), fail_sets_checker_at=1),
    ),
    (
        "fail-sets-rejecting",
        Scenario(("conn", "conn", "ok"), fail_sets_checker_at=1, new_checker=(False,)),
    ),
    (
        "fail-replaces-after-rejection",
        Scenario(("conn", "ok"), own_checker=(False,), fail_sets_checker_at=1, new_checker=(1,)),
    ),
    (
        "fail-sets-raising",
        Scenario(("conn", "timeout", "ok"), fail_sets_checker_at=1, new_checker=("raise",)),
    ),
]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(
    "scenario", [s for _, s in CHECKER_SCENARIOS], ids=[i for i, _ in CHECKER_SCENARIOS]
)
def test_checker_scenario_matches_redis_py(c_impl, reference, scenario, loop, monkeypatch):
    ours = play("asyncio", c_impl, scenario, monkeypatch, loop)
    if REDIS_PY_HAS_CHECKER:
        assert ours == play("asyncio", reference, scenario, monkeypatch, loop)
    else:
        assert side_without_checker(reference)
        assert ours[-1][0] in ("return", "raise")
        assert "ScriptExhausted" not in str(ours[-1])


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_checker_with_futures_matches_redis_py(c_impl, reference, loop, monkeypatch):
    scenario = Scenario(("conn", "ok"), own_checker=(False,), fail_kind="future")
    ours = play("asyncio", c_impl, scenario, monkeypatch, loop)
    if REDIS_PY_HAS_CHECKER:
        assert ours == play("asyncio", reference, scenario, monkeypatch, loop)
    assert ours[-2:] == [
        ("fail", ("ConnectionError", "conn #1"), True),
        ("raise", ("ConnectionError", "conn #1"), True, None, False),
    ]


def test_rejected_error_keeps_the_frames_of_do(impl):
    if side_without_checker(impl):
        return
    raised = []

    async def do():
        await suspend()
        raised.append(redis.exceptions.ConnectionError("down"))
        raise raised[-1]

    async def fail(error):
        await suspend()

    async def main():
        retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 3, is_retryable=lambda e: 0)
        with pytest.raises(redis.exceptions.ConnectionError) as info:
            await retry.call_with_retry(do, fail)
        return info.value

    error = run_on("asyncio", main())
    assert error is raised[0] and len(raised) == 1
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "do"


def test_checker_and_fail_see_the_error_in_exc_info(impl):
    if side_without_checker(impl):
        return
    seen = []

    def checker(error):
        seen.append(sys.exc_info()[1] is error)
        return False

    async def fail(error):
        seen.append(sys.exc_info()[1] is error)
        await suspend()
        seen.append(sys.exc_info()[1] is error)

    async def do():
        raise redis.exceptions.ConnectionError()

    async def main():
        retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 1, is_retryable=checker)
        with pytest.raises(redis.exceptions.ConnectionError):
            await retry.call_with_retry(do, fail)
        assert sys.exc_info()[1] is None

    run_on("asyncio", main())
    assert seen == [True, True, True]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_cancellation_in_the_fail_of_a_rejection(impl, reference, loop, monkeypatch):
    """Cancelled while awaiting fail() after the checker's no: the
    cancellation reaches fail and comes out, the error as its context."""
    if side_without_checker(impl):
        return
    events = run_on(loop, Cancellation(impl, "fail", monkeypatch, rejecting=True).run())
    assert ("fail", "cancelled", True) in events
    assert ("outcome", "cancelled", True) in events
    # Before 8.2, redis-py has no checker: its cancellation in the fail() of
    # an ordinary retry is the same sequence (the error handled, fail awaited
    # in the except block; the outcome's context is CPython's to choose).
    expected = Cancellation(reference, "fail", monkeypatch, rejecting=REDIS_PY_HAS_CHECKER).run()
    assert events == run_on(loop, expected)


def test_repr_shows_a_checker(c_impl):
    retry = c_impl.asyncio_retry.Retry(c_impl.backoff.NoBackoff(), 3, is_retryable=never)
    errors = retry._supported_errors
    assert repr(retry) == (
        f"Retry(NoBackoff(), 3, supported_errors={errors!r}, is_retryable={never!r})"
    )


@pytest.mark.parametrize("thrown", [KeyError, asyncio.CancelledError])
def test_throw_into_the_fail_of_a_rejection(impl, thrown):
    """An exception thrown in while fail() is awaited after the checker's
    no: fail swallowing it lets the rejected error be raised; one it lets
    out comes out instead, the error as its context."""
    if side_without_checker(impl):
        return
    events = []
    raised = []

    async def do():
        raised.append(redis.exceptions.ConnectionError("down"))
        raise raised[-1]

    async def fail(error):
        try:
            await suspend()
        except KeyError as swallowed:
            events.append(type(swallowed).__name__)

    retry = impl.asyncio_retry.Retry(impl.backoff.NoBackoff(), 3, is_retryable=lambda e: False)
    awaitable = retry.call_with_retry(do, fail)
    awaitable.send(None)  # suspended in fail()
    with pytest.raises((redis.exceptions.ConnectionError, thrown)) as info:
        awaitable.throw(thrown("in"))
    if thrown is KeyError:
        assert events == ["KeyError"]
        assert info.value is raised[0] and info.value.__context__ is None
    else:
        assert type(info.value) is thrown and info.value.__context__ is raised[0]
    with pytest.raises(RuntimeError):
        awaitable.send(None)  # done


@pytest.mark.parametrize("stats", [False, True], ids=["plain", "stats"])
@pytest.mark.parametrize("where", ["fail", "sleep"])
@pytest.mark.parametrize("thrown", [GeneratorExit, asyncio.CancelledError, KeyError])
def test_thrown_in_while_handling_has_the_error_as_context(impl, where, thrown, stats, monkeypatch):
    """close() (GeneratorExit) or any exception thrown in while fail() or
    the backoff sleep is awaited comes out with the error being handled as
    its __context__, as from inside redis-py's `except` block (the
    coroutine design awaits them outside its handler, and once lost it for
    close()).  With stats (the C types' extra; redis-py has none) too."""
    raised = []

    async def do():
        raised.append(redis.exceptions.ConnectionError("down"))
        raise raised[-1]

    async def fail(error):
        if where == "fail":
            await suspend()

    async def sleep(delay):
        await suspend()

    monkeypatch.setattr(impl.asyncio_retry, "sleep", sleep)
    retry = impl.asyncio_retry.Retry(impl.backoff.ConstantBackoff(1), 3)
    if stats and impl.name == "c":
        retry.stats = redis_backoff_c.RetryStats()
    awaitable = retry.call_with_retry(do, fail)
    awaitable.send(None)  # suspended in fail() or in the sleep
    with pytest.raises(thrown) as info:
        awaitable.throw(thrown("in") if thrown is not GeneratorExit else thrown)
    assert info.value.__context__ is raised[0]
