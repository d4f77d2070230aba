"""Scripted runs of call_with_retry that record every observable event, on
either flavor of Retry (sync or asyncio) and either implementation.

A scenario says what each successive do() call does, how is_retryable
(the call's) and the Retry's own checker (redis-py 8.2) answer, whether fail
raises or replaces the Retry's checker, which backoff the Retry holds, and,
for the asyncio flavor, what kind of awaitable do and fail return.  `play`
runs it and returns the list of events, in one format for both flavors:

    ("reset", tag)                       the backoff's reset
    ("do", step)                         each do() call ("ok" or a key of ERRORS)
    (checker, error, is_last)            each checker call: "is_retryable"
                                         (the call's), "own_checker",
                                         "new_checker" (set by fail)
    ("fail", error, is_last, *count)     each fail() call
    ("compute", tag, failures)           the backoff's compute
    ("sleep", delay)                     each sleep
    ("return", result)                   the outcome: a result ...
    ("raise", error, is_last, context, context_is_last)   ... or an exception

where an error is (type name, message), and is_last says whether it is the
very object do() raised last.  The same scenario must give the same list on
both implementations; a scenario of plain do/fail gives the same list on
both flavors, wherever the two Retry types share the behaviour.
"""

from __future__ import annotations

import asyncio
import random
import socket
from dataclasses import dataclass

import redis.exceptions
from redis.backoff import AbstractBackoff
from support import FLAVORS, FalsyChecker, run_on, suspend


class SubConnectionError(redis.exceptions.ConnectionError):
    """A subclass of a supported error: retried too."""


ERRORS = {
    "conn": redis.exceptions.ConnectionError,
    "timeout": redis.exceptions.TimeoutError,
    "socket": socket.timeout,  # retried by default by the sync Retry only
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


class RecordingBackoff(AbstractBackoff):
    """A user-written backoff: records reset/compute, returns scripted delays."""

    def __init__(self, events, delays=(0.25,), tag="backoff"):
        self.events = events
        self.delays = delays
        self.tag = tag

    def reset(self):
        self.events.append(("reset", self.tag))

    def compute(self, failures):
        self.events.append(("compute", self.tag, failures))
        return self.delays[(failures - 1) % len(self.delays)]


@dataclass(frozen=True)
class Scenario:
    script: tuple[str, ...]  # each do() call: "ok" or a key of ERRORS
    retries: int = 3
    # None: not passed; otherwise the verdict of each call, in order, True
    # once they run out ("raise" makes is_retryable itself raise).
    is_retryable: tuple[object, ...] | None = None
    with_failure_count: object = None  # None: not passed
    fail_raises_at: int | None = None  # 1-based index of the fail call that raises
    backoff: str = "recording"  # recording, constant, none, exponential, jitter
    delays: tuple[float, ...] = (0.25,)
    # The Retry's own checker (redis-py 8.2's is_retryable=): None for none,
    # otherwise its verdicts, as for is_retryable.
    own_checker: tuple[object, ...] | None = None
    # The fail call (1-based) that sets retry.is_retryable, and to what: None,
    # or a new checker answering `new_checker`.
    fail_sets_checker_at: int | None = None
    new_checker: tuple[object, ...] | None = None
    # The call's is_retryable (when given) is a FalsyChecker.
    falsy_call_checker: bool = False
    # asyncio flavor only: what do() and fail() return, "coroutine", "object"
    # (with __await__), "future" (needs a loop), "none" (fail only: not
    # awaitable).  The sync flavor plays the default alone.
    do_kind: str = "coroutine"
    fail_kind: str = "coroutine"

    @property
    def needs_checker(self):
        """Does it use the Retry's own checker, which redis-py has from 8.2?"""
        return self.own_checker is not None or self.fail_sets_checker_at is not None


def describe(error):
    if error is None:
        return None
    return (type(error).__name__, str(error))


def scripted_checker(name, verdicts, events, raised):
    """A checker that records (name, error, is-the-last-raised) and answers
    `verdicts` in turn (True once they run out; "raise" raises)."""
    answers = iter(verdicts)

    def checker(error):
        verdict = next(answers, True)
        events.append((name, describe(error), error is raised[-1]))
        if verdict == "raise":
            raise RetryableError(name)
        return verdict

    return checker


def make_backoff(impl, scenario, events):
    b = impl.backoff
    return {
        "recording": lambda: RecordingBackoff(events, scenario.delays),
        "constant": lambda: b.ConstantBackoff(scenario.delays[0]),
        "none": b.NoBackoff,
        "exponential": lambda: b.ExponentialBackoff(cap=1.0, base=0.01),
        "jitter": lambda: b.DecorrelatedJitterBackoff(cap=1.0, base=0.01),
    }[scenario.backoff]()


class AwaitableObject:
    """Not a coroutine: an object whose __await__ is a generator."""

    def __init__(self, body):
        self.body = body

    def __await__(self):
        yield
        return self.body()


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


def play(flavor, impl, scenario, monkeypatch, loop="hand", seed=1234):
    """Play `scenario` on `impl`'s Retry of `flavor` (a support.Flavor or
    its name); return the recorded events.  The asyncio flavor runs on a
    fresh loop of `loop` ("asyncio", "uvloop") or by hand ("hand"); the sync
    one ignores it."""
    flavor = FLAVORS[flavor] if isinstance(flavor, str) else flavor
    sync = flavor.name == "sync"
    if sync:
        assert scenario.do_kind == scenario.fail_kind == "coroutine", scenario
    events = []
    flavor.patch_sleep(impl, monkeypatch, events)
    raised = []
    own = {}
    if scenario.own_checker is not None:
        own["is_retryable"] = scripted_checker("own_checker", scenario.own_checker, events, raised)
    retry = flavor.Retry(impl)(make_backoff(impl, scenario, events), scenario.retries, **own)
    calls = iter(scenario.script)
    count = {"do": 0, "fail": 0}

    def do():
        count["do"] += 1
        step = next(calls, None)
        if step is None:
            raise ScriptExhausted(count["do"])
        events.append(("do", step))
        number = count["do"]

        def body():
            if step == "ok":
                return f"result #{number}"
            error = ERRORS[step](f"{step} #{number}")
            raised.append(error)
            raise error

        return body() if sync else _wrap(scenario.do_kind, body)

    def fail(error, *rest):
        count["fail"] += 1
        number = count["fail"]
        events.append(("fail", describe(error), error is raised[-1], *rest))
        if number == scenario.fail_sets_checker_at:
            retry.is_retryable = (
                None
                if scenario.new_checker is None
                else scripted_checker("new_checker", scenario.new_checker, events, raised)
            )

        def body():
            if number == scenario.fail_raises_at:
                raise FailError(f"fail #{number}")

        return body() if sync else _wrap(scenario.fail_kind, body)

    kwargs = {}
    if scenario.is_retryable is not None:
        checker = scripted_checker("is_retryable", scenario.is_retryable, events, raised)
        kwargs["is_retryable"] = FalsyChecker(checker) if scenario.falsy_call_checker else checker
    if scenario.with_failure_count is not None:
        kwargs["with_failure_count"] = scenario.with_failure_count

    def record(error):
        last = raised[-1] if raised else None
        context = error.__context__
        events.append(
            (
                "raise",
                describe(error),
                error is last,
                describe(context),
                context is not None and context is last,
            )
        )

    random.seed(seed)
    if sync:
        try:
            events.append(("return", retry.call_with_retry(do, fail, **kwargs)))
        except BaseException as error:  # noqa: BLE001 - KeyboardInterrupt and SystemExit too
            record(error)
        return events

    async def main():
        try:
            events.append(("return", await retry.call_with_retry(do, fail, **kwargs)))
        except BaseException as error:  # noqa: BLE001 - recording every outcome
            record(error)

    run_on(loop, main())
    return events
