"""A ready ``on_retry`` / ``on_give_up`` hook that writes to :mod:`logging`,
rate-limited so that an outage does not flood the log.

::

    from redis_backoff_c.log import RetryLogger

    log = RetryLogger()
    retry = Retry(ExponentialBackoff(), 3, on_retry=log, on_give_up=log)

One record per retry and per give-up, on the ``redis_backoff_c`` logger by
default, at WARNING for a retry and ERROR for a give-up::

    retry after attempt <n> failed, in <delay> s: <error class>: <error text>
    gave up after attempt <n> (<reason>): <error class>: <error text>

for example (one line each)::

    retry after attempt 1 failed, in 0.016 s: redis.exceptions.ConnectionError:
        Error 111 connecting to localhost:6379. Connection refused.
    gave up after attempt 4 (exhausted): redis.exceptions.ConnectionError:
        Error 111 connecting to localhost:6379. Connection refused.
        [12 more like this suppressed over 9.8 s]

Each record also carries the fields as attributes (``extra=``), all named
``retry_*`` (:data:`EXTRA_FIELDS`), for a structured formatter or a log
search.

The rate limit is a token bucket per kind of line: the event (retry or give
up), the give-up's reason and the error's class.  A bucket holds ``burst``
tokens and gets one back every ``interval`` seconds; a line takes one, and
a line that finds none is suppressed and counted.  The next line written
for that kind says how many were suppressed and over how long (from the
first of them to that line), in its text and in its fields.  Retries and
give-ups never share a bucket, so a flood of retries cannot hide a give-up.
A suppressed line costs a dictionary look-up under a lock: no formatting.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = ["DEFAULT_RATE_LIMIT", "EXTRA_FIELDS", "RateLimit", "RetryLogger"]

#: The attributes each record gets (``extra=``): "retry" or "give_up"; the
#: event's attempt; the delay about to be slept (retry) or None; the reason
#: (give-up) or None; the error's qualified class name and its text; how
#: many lines of this kind were suppressed since the last one written, and
#: over how many seconds (0 and 0.0 when none were).
EXTRA_FIELDS: Final = (
    "retry_event",
    "retry_attempt",
    "retry_delay",
    "retry_reason",
    "retry_error_type",
    "retry_error",
    "retry_suppressed",
    "retry_suppressed_seconds",
)

# A table of buckets larger than this is swept of the buckets that are
# back to full with nothing suppressed (a fresh bucket is the same): a
# program raising errors of ever new classes must not grow it forever.
_SWEEP_AT: Final = 1024


class _Event(Protocol):
    """What the hooks are given: the twin's RetryEvent or the C types'
    (a tuple with named fields either way), read by attribute only."""

    @property
    def attempt(self) -> int: ...
    @property
    def error(self) -> BaseException: ...
    @property
    def delay(self) -> float | None: ...
    @property
    def reason(self) -> str | None: ...


@dataclass(frozen=True)
class RateLimit:
    """At most ``burst`` lines of one kind at once, then one more every
    ``interval`` seconds."""

    burst: int = 5
    interval: float = 10.0

    def __post_init__(self) -> None:
        burst, interval = self.burst, self.interval
        # bool is an int, and True lines a second is a mistake, not a setting.
        if isinstance(burst, bool) or not isinstance(burst, int):
            raise TypeError(f"RateLimit burst must be an int, not {type(burst).__name__}")
        if burst < 1:
            raise ValueError(f"RateLimit burst must be >= 1, not {burst!r}")
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise TypeError(f"RateLimit interval must be seconds, not {type(interval).__name__}")
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"RateLimit interval must be > 0 and finite, not {interval!r}")


#: 5 lines of a kind at once, then one every 10 s: a Redis restart of a few
#: seconds writes a handful of lines per kind, not one per retry.
DEFAULT_RATE_LIMIT: Final = RateLimit()


class _Bucket:
    """One kind of line's tokens, and what it suppressed since its last line."""

    __slots__ = ("since", "stamp", "suppressed", "tokens")

    def __init__(self, tokens: float, now: float) -> None:
        self.tokens = tokens
        self.stamp = now  # when `tokens` was last brought up to date
        self.suppressed = 0
        self.since = now  # when the first of `suppressed` was

    def refill(self, now: float, limit: RateLimit) -> None:
        # max(): an injected clock that steps back must not take tokens.
        elapsed = max(0.0, now - self.stamp)
        self.tokens = min(float(limit.burst), self.tokens + elapsed / limit.interval)
        self.stamp = now


class _Limiter:
    """The buckets of one RetryLogger, under one lock: the hooks run on
    every thread that calls Redis, and on event loops."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.clock = clock
        self.lock = threading.Lock()
        self.buckets: dict[Hashable, _Bucket] = {}
        self.sweep_at = _SWEEP_AT

    def admit(self, key: Hashable) -> tuple[int, float] | None:
        """None to suppress the line; else how many lines of `key` were
        suppressed before it and over how many seconds."""
        with self.lock:
            # Read under the lock: the buckets' times then only move forward.
            now = self.clock()
            bucket = self.buckets.get(key)
            if bucket is None:
                bucket = self._new_bucket(key, now)
            else:
                bucket.refill(now, self.limit)
            if bucket.tokens < 1.0:
                if bucket.suppressed == 0:
                    bucket.since = now
                bucket.suppressed += 1
                return None
            bucket.tokens -= 1.0
            suppressed, bucket.suppressed = bucket.suppressed, 0
            return suppressed, (now - bucket.since if suppressed else 0.0)

    def _new_bucket(self, key: Hashable, now: float) -> _Bucket:
        if len(self.buckets) >= self.sweep_at:
            self._sweep(now)
        bucket = self.buckets[key] = _Bucket(float(self.limit.burst), now)
        return bucket

    def _sweep(self, now: float) -> None:
        for key, bucket in list(self.buckets.items()):
            bucket.refill(now, self.limit)
            if bucket.suppressed == 0 and bucket.tokens >= self.limit.burst:
                del self.buckets[key]
        # What is left is in use: the next sweep waits until the table has
        # doubled, so that sweeping stays cheap per new key.
        self.sweep_at = max(_SWEEP_AT, 2 * len(self.buckets))


def _type_name(error: BaseException) -> str:
    """The error's class as a log search knows it: redis.exceptions.ConnectionError,
    and TimeoutError rather than builtins.TimeoutError."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _error_text(error: BaseException) -> str:
    """str(error), and something to show even when its __str__ fails: the
    line is still worth writing."""
    try:
        return str(error)
    except Exception:
        return f"<unprintable {type(error).__name__}>"


def _one_line(text: str) -> str:
    # One event, one line: a multi-line error text (a script's error) must
    # not split the record in a line-oriented log.
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _seconds(delay: object) -> float | None:
    """The delay as a float for the line and the field, whatever number type
    the backoff returned; None if it is not one."""
    try:
        return float(delay)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def _level(name: str, value: int | str) -> int:
    """A level as logging takes it, a number or a registered name ("INFO"),
    checked now rather than failing at each event."""
    if isinstance(value, str):
        number = logging.getLevelName(value)  # a registered name gives its number
        if not isinstance(number, int):
            raise ValueError(f"{name} {value!r} is not a logging level name")
        return number
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or a level name, not {type(value).__name__}")
    return value


class RetryLogger:
    """A callable for both hooks, ``on_retry=`` and ``on_give_up=``: writes
    one record per event to ``logger`` (a Logger or a logger's name), at
    ``retry_level`` for a retry and ``give_up_level`` for a give-up (a
    number or a level's name), at most as often as ``rate_limit`` allows per
    kind of line (None: every line).  ``clock`` gives the rate limit's time
    in seconds; it must not go back (time.monotonic, or a test's own).

    Thread-safe; one instance may serve every Retry of a program, sync and
    asyncio.  It never raises into the retry loop: an error from logging
    itself is printed to stderr, as :meth:`logging.Handler.handleError`
    does for a failing handler, and the loop goes on."""

    def __init__(
        self,
        logger: logging.Logger | str = "redis_backoff_c",
        *,
        retry_level: int | str = logging.WARNING,
        give_up_level: int | str = logging.ERROR,
        rate_limit: RateLimit | None = DEFAULT_RATE_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise TypeError(f"rate_limit must be a RateLimit or None, not {rate_limit!r}")
        self._logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self._retry_level = _level("retry_level", retry_level)
        self._give_up_level = _level("give_up_level", give_up_level)
        self._rate_limit = rate_limit
        self._clock = clock
        self._limiter = None if rate_limit is None else _Limiter(rate_limit, clock)

    @property
    def logger(self) -> logging.Logger:
        return self._logger

    @property
    def retry_level(self) -> int:
        return self._retry_level

    @property
    def give_up_level(self) -> int:
        return self._give_up_level

    @property
    def rate_limit(self) -> RateLimit | None:
        return self._rate_limit

    def __repr__(self) -> str:
        return (
            f"RetryLogger({self._logger.name!r}, "
            f"retry_level={logging.getLevelName(self._retry_level)}, "
            f"give_up_level={logging.getLevelName(self._give_up_level)}, "
            f"rate_limit={self._rate_limit!r})"
        )

    def __call__(self, event: _Event) -> None:
        try:
            self._log(event)
        except Exception:
            self._logging_failed()

    def _log(self, event: _Event) -> None:
        reason = event.reason
        give_up = reason is not None
        level = self._give_up_level if give_up else self._retry_level
        # The cheap refusals first: a level nobody listens to, then the limit.
        if not self._logger.isEnabledFor(level):
            return
        suppressed, over = 0, 0.0
        if self._limiter is not None:
            admitted = self._limiter.admit((give_up, reason, type(event.error)))
            if admitted is None:
                return
            suppressed, over = admitted
        self._write(level, event, suppressed, over)

    def _write(self, level: int, event: _Event, suppressed: int, over: float) -> None:
        error = event.error
        type_name = _type_name(error)
        text = _error_text(error)
        delay = _seconds(event.delay) if event.reason is None else None
        extra = {
            "retry_event": "retry" if event.reason is None else "give_up",
            "retry_attempt": event.attempt,
            "retry_delay": delay,
            "retry_reason": event.reason,
            "retry_error_type": type_name,
            "retry_error": text,
            "retry_suppressed": suppressed,
            "retry_suppressed_seconds": over,
        }
        what = f"{type_name}: {_one_line(text)}" if text else type_name
        message, args = _template(event, delay, what, suppressed, over)
        self._logger.log(level, message, *args, extra=extra)

    def _logging_failed(self) -> None:
        # Not raised, and not logged again (the logger is what failed):
        # printed as logging prints a failing handler's error.
        if logging.raiseExceptions and sys.stderr is not None:
            try:
                sys.stderr.write("--- redis_backoff_c.log.RetryLogger: logging failed ---\n")
                traceback.print_exc(file=sys.stderr)
            except Exception:
                pass

    # Pickled with the Retry that holds it: its settings, not its lock nor
    # its counts (a copy in another process starts with full buckets).
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_limiter"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        limit = self._rate_limit
        self._limiter = None if limit is None else _Limiter(limit, self._clock)


def _template(
    event: _Event, delay: float | None, what: str, suppressed: int, over: float
) -> tuple[str, tuple[object, ...]]:
    """The record's message and its arguments, `what` being the error's
    class and text.  A fixed template per kind of line with the values as
    arguments: tools that group records by their msg see one group per
    kind, not one per port or attempt."""
    if event.reason is None:
        message = "retry after attempt %d failed, in %s s: %s"
        args: tuple[object, ...] = (event.attempt, _delay_text(delay), what)
    else:
        message = "gave up after attempt %d (%s): %s"
        args = (event.attempt, event.reason, what)
    if suppressed:
        message += " [%d more like this suppressed over %.1f s]"
        args += (suppressed, over)
    return message, args


def _delay_text(delay: float | None) -> str:
    return "?" if delay is None else f"{delay:.3f}"
