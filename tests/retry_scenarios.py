"""Scripted runs of Retry.call_with_retry that record every observable event.

A scenario says what each successive do() call does, how is_retryable
(the call's) and the Retry's own checker (redis-py 8.2) answer, whether fail
raises or replaces the Retry's checker, and which backoff the Retry holds.
`run` plays it on one implementation (redis-py or the C extension) and
returns the list of events: reset, each do, each checker call, fail with its
arguments, compute with its argument, each sleep with its delay, and the
outcome.  The same scenario must give the same list on both sides.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass

import redis.exceptions
from redis.backoff import AbstractBackoff
from support import patch_sleep


class SubConnectionError(redis.exceptions.ConnectionError):
    """A subclass of a supported error: retried too."""


ERRORS = {
    "conn": redis.exceptions.ConnectionError,
    "timeout": redis.exceptions.TimeoutError,
    "socket": socket.timeout,
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


def scripted_checker(name, verdicts, events, raised):
    """A checker that records ("<name>", error, is-the-last-raised) and
    answers `verdicts` in turn (True once they run out; "raise" raises)."""
    answers = iter(verdicts)

    def checker(error):
        verdict = next(answers, True)
        events.append((name, str(error), error is raised[-1]))
        if verdict == "raise":
            raise RetryableError(name)
        return verdict

    return checker


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
    # None: not passed; otherwise the verdict of each call, in order
    # ("raise" makes is_retryable itself raise).
    is_retryable: tuple[object, ...] | None = None
    with_failure_count: bool | None = None  # None: not passed
    fail_raises_at: int | None = None  # 1-based index of the fail call that raises
    backoff: str = "recording"  # recording, constant, none, exponential, jitter
    delays: tuple[float, ...] = (0.25,)
    # The Retry's own checker (redis-py 8.2's is_retryable=): None for none,
    # otherwise its verdicts, in order, as for is_retryable.
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


def make_backoff(impl, scenario, events):
    b = impl.backoff
    return {
        "recording": lambda: RecordingBackoff(events, scenario.delays),
        "constant": lambda: b.ConstantBackoff(scenario.delays[0]),
        "none": b.NoBackoff,
        "exponential": lambda: b.ExponentialBackoff(cap=1.0, base=0.01),
        "jitter": lambda: b.DecorrelatedJitterBackoff(cap=1.0, base=0.01),
    }[scenario.backoff]()


def describe_error(error, last_raised):
    context = error.__context__
    return (
        "raise",
        type(error).__name__,
        str(error),
        error is last_raised,
        type(context).__name__ if context is not None else None,
        context is last_raised if context is not None else None,
    )


def run(impl, monkeypatch, scenario, seed=1234):
    """Play `scenario` on `impl`; return the recorded events."""
    events = []
    patch_sleep(impl, monkeypatch, events)
    raised = []
    own = {}
    if scenario.own_checker is not None:
        own["is_retryable"] = scripted_checker("own_checker", scenario.own_checker, events, raised)
    retry = impl.retry.Retry(make_backoff(impl, scenario, events), scenario.retries, **own)
    calls = iter(scenario.script)
    verdicts = iter(scenario.is_retryable or ())
    fail_calls = [0]

    def do():
        try:
            step = next(calls)
        except StopIteration:
            raise ScriptExhausted(len(scenario.script)) from None
        events.append(("do", step))
        if step == "ok":
            return "result"
        error = ERRORS[step](f"{step} #{len(raised) + 1}")
        raised.append(error)
        raise error

    def fail(*args):
        fail_calls[0] += 1
        events.append(("fail", *[describe_arg(a) for a in args]))
        if fail_calls[0] == scenario.fail_sets_checker_at:
            retry.is_retryable = (
                None
                if scenario.new_checker is None
                else scripted_checker("new_checker", scenario.new_checker, events, raised)
            )
        if fail_calls[0] == scenario.fail_raises_at:
            raise FailError(f"fail #{fail_calls[0]}")

    def describe_arg(arg):
        if isinstance(arg, BaseException):
            return ("error", str(arg), arg is raised[-1])
        return arg

    def is_retryable(error):
        verdict = next(verdicts, True)
        events.append(("is_retryable", str(error), error is raised[-1]))
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
    random.seed(seed)
    try:
        result = retry.call_with_retry(do, fail, **kwargs)
    except BaseException as error:  # KeyboardInterrupt and SystemExit too
        events.append(describe_error(error, raised[-1] if raised else None))
    else:
        events.append(("return", result))
    return events
