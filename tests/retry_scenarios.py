"""Scripted runs of Retry.call_with_retry that record every observable event.

A scenario says what each successive do() call does, how is_retryable
answers, whether fail raises, and which backoff the Retry holds.  `run`
plays it on one implementation (redis-py or the C extension) and returns
the list of events: reset, each do, is_retryable, fail with its arguments,
compute with its argument, each sleep with its delay, and the outcome.
The same scenario must give the same list on both sides.
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
    retry = impl.retry.Retry(make_backoff(impl, scenario, events), scenario.retries)
    calls = iter(scenario.script)
    raised = []
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
        kwargs["is_retryable"] = is_retryable
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
