"""Scripted runs of the asyncio Retry.call_with_retry that record every event.

A scenario says what each successive do() call does, how is_retryable
(the call's) and the Retry's own checker (redis-py 8.2) answer, whether fail
raises or replaces the Retry's checker, what kind of awaitable do and fail
return, and the backoff.  `play` runs it on one implementation (redis-py's
coroutine or the C awaitable), on an event loop or driven by hand, and
returns the events: reset, each do, is_retryable, fail with its
arguments, compute with its argument, each sleep with its delay, and the
outcome (the result, or the exception: its type and message, whether it
is the very object do() raised last, and its __context__).  The same
scenario must give the same list on both sides.
"""

from __future__ import annotations

import asyncio
import types
from dataclasses import dataclass

import redis.exceptions
from redis.backoff import AbstractBackoff


class SubConnectionError(redis.exceptions.ConnectionError):
    """A subclass of a supported error: retried too."""


ERRORS = {
    "conn": redis.exceptions.ConnectionError,
    "timeout": redis.exceptions.TimeoutError,
    "sub": SubConnectionError,
    "foreign": ValueError,
    "kbi": KeyboardInterrupt,
    "exit": SystemExit,
}


class ScriptExhausted(Exception):
    """do() was called more often than the scenario allows: a runaway loop."""


class FailError(RuntimeError):
    """What fail raises when the scenario says so."""


class RetryableError(RuntimeError):
    """What is_retryable raises when the scenario says so."""


class FalsyChecker:
    """A call-time is_retryable whose truth is false: redis-py 8.2 calls it
    (`is not None`), 8.0 and 8.1 do not (`is_retryable and ...`)."""

    def __init__(self, function):
        self.function = function

    def __call__(self, error):
        return self.function(error)

    def __bool__(self):
        return False


def cycling_checker(name, verdicts, events):
    """A checker that records ("<name>", error) and answers `verdicts` in
    turn, cycling ("raise" raises)."""
    count = [0]

    def checker(error):
        verdict = verdicts[count[0] % len(verdicts)]
        count[0] += 1
        events.append((name, describe(error)))
        if verdict == "raise":
            raise RetryableError(name)
        return verdict

    return checker


class RecordingBackoff(AbstractBackoff):
    """A user-written backoff: records reset/compute, returns scripted delays."""

    def __init__(self, events, delays=(0.25,)):
        self.events = events
        self.delays = delays

    def reset(self):
        self.events.append(("reset",))

    def compute(self, failures):
        self.events.append(("compute", failures))
        return self.delays[(failures - 1) % len(self.delays)]


@types.coroutine
def suspend():
    """Give control back once: to the event loop (as asyncio.sleep(0)), or
    to the hand driver."""
    yield


class AwaitableObject:
    """Not a coroutine: an object whose __await__ is a generator."""

    def __init__(self, body):
        self.body = body

    def __await__(self):
        yield
        return self.body()


@dataclass(frozen=True)
class Scenario:
    script: tuple[str, ...]  # each do() call: "ok" or a key of ERRORS
    retries: int = 3
    # None: not passed; otherwise the verdict of each call, in order
    # ("raise" makes is_retryable itself raise).
    is_retryable: tuple[object, ...] | None = None
    with_failure_count: bool | None = None  # None: not passed
    fail_raises_at: int | None = None  # 1-based index of the fail call that raises
    delays: tuple[float, ...] = (0.25,)
    # What do() and fail() return: "coroutine", "object" (with __await__),
    # "future" (needs a loop), "none" (fail only: not awaitable).
    do_kind: str = "coroutine"
    fail_kind: str = "coroutine"
    backoff: str = "recording"  # recording, exponential (C fast path), none
    # The Retry's own checker (redis-py 8.2's is_retryable=): None for none,
    # otherwise its verdicts, cycling, as for is_retryable.
    own_checker: tuple[object, ...] | None = None
    # The fail call (1-based) that sets retry.is_retryable, and to what: None,
    # or a new checker answering `new_checker`.
    fail_sets_checker_at: int | None = None
    new_checker: tuple[object, ...] | None = None
    # The call's is_retryable (when given) is a FalsyChecker.
    falsy_call_checker: bool = False

    @property
    def needs_checker(self):
        """Does it use the Retry's own checker, which redis-py has from 8.2?"""
        return self.own_checker is not None or self.fail_sets_checker_at is not None


def describe(error):
    if error is None:
        return None
    return (type(error).__name__, str(error))


def make_backoff(impl, scenario, events):
    if scenario.backoff == "exponential":
        return impl.backoff.ExponentialBackoff(cap=1.0, base=0.01)
    if scenario.backoff == "none":
        return impl.backoff.NoBackoff()
    return RecordingBackoff(events, scenario.delays)


def _wrap(kind, body):
    """An awaitable of `kind` whose awaited result is body()."""
    if kind == "coroutine":

        async def coroutine():
            await suspend()
            return body()

        return coroutine()
    if kind == "object":
        return AwaitableObject(body)
    if kind == "future":
        future = asyncio.get_running_loop().create_future()
        try:
            future.set_result(body())
        except BaseException as error:  # noqa: BLE001 - the future carries it
            future.set_exception(error)
        return future
    assert kind == "none"
    body()
    return None


async def scenario_coroutine(impl, scenario, events):
    """The scenario as one coroutine; records into `events`."""
    backoff = make_backoff(impl, scenario, events)
    own = {}
    if scenario.own_checker is not None:
        own["is_retryable"] = cycling_checker("own_checker", scenario.own_checker, events)
    retry = impl.asyncio_retry.Retry(backoff, scenario.retries, **own)
    script = iter(scenario.script)
    count = {"do": 0, "fail": 0, "is_retryable": 0}
    raised = []

    def do_body():
        step = next(script, None)
        count["do"] += 1
        if step is None:
            raise ScriptExhausted(count["do"])
        if step == "ok":
            return ("result", count["do"])
        error = ERRORS[step](f"do {count['do']}")
        raised.append(error)
        raise error

    def do():
        events.append(("do",))
        return _wrap(scenario.do_kind, do_body)

    def fail(error, *failures):
        count["fail"] += 1
        events.append(("fail", describe(error), error is raised[-1], *failures))
        if count["fail"] == scenario.fail_sets_checker_at:
            retry.is_retryable = (
                None
                if scenario.new_checker is None
                else cycling_checker("new_checker", scenario.new_checker, events)
            )

        def body():
            if count["fail"] == scenario.fail_raises_at:
                raise FailError(f"fail {count['fail']}")

        return _wrap(scenario.fail_kind, body)

    def is_retryable(error):
        verdict = scenario.is_retryable[count["is_retryable"] % len(scenario.is_retryable)]
        count["is_retryable"] += 1
        events.append(("is_retryable", describe(error)))
        if verdict == "raise":
            raise RetryableError("is_retryable")
        return verdict

    kwargs = {}
    if scenario.is_retryable is not None:
        kwargs["is_retryable"] = (
            FalsyChecker(is_retryable) if scenario.falsy_call_checker else is_retryable
        )
    if scenario.with_failure_count is not None:
        kwargs["with_failure_count"] = scenario.with_failure_count
    try:
        result = await retry.call_with_retry(do, fail, **kwargs)
    except BaseException as error:  # noqa: BLE001 - recording every outcome
        context = error.__context__
        events.append(
            (
                "raise",
                describe(error),
                bool(raised) and error is raised[-1],
                describe(context),
                bool(raised) and context is raised[-1],
            )
        )
    else:
        events.append(("return", result))


def patch_async_sleep(impl, monkeypatch, events):
    """Make `impl`'s asyncio Retry sleep through a recorder that yields once
    instead of waiting."""

    async def recording_sleep(delay):
        events.append(("sleep", delay))
        await suspend()

    monkeypatch.setattr(impl.asyncio_retry, "sleep", recording_sleep)


def drive(coroutine):
    """Run a coroutine that only ever yields None, without an event loop."""
    while True:
        try:
            coroutine.send(None)
        except StopIteration as stop:
            return stop.value


def new_loop(kind):
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_on(kind, coroutine):
    """Run `coroutine` to its end on a fresh loop of `kind`, or by hand."""
    if kind == "hand":
        return drive(coroutine)
    loop = new_loop(kind)
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def play(impl, scenario, monkeypatch, loop="hand"):
    events = []
    patch_async_sleep(impl, monkeypatch, events)
    run_on(loop, scenario_coroutine(impl, scenario, events))
    return events
