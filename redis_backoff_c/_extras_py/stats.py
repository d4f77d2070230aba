"""RetryStats, the twin of csrc/stats.c: counters shared by the copies of
a Retry."""

from __future__ import annotations

import threading
from typing import Any, ClassVar, Final, NoReturn, final

from redis_backoff_c._extras_py.args import _real

__all__ = ["STAT_NAMES", "RetryStats"]

#: The counters of RetryStats, in snapshot() order (then slept_seconds).
STAT_NAMES: Final = (
    "calls",
    "attempts",
    "successes",
    "failed_attempts",
    "retries",
    "give_ups_exhausted",
    "give_ups_not_retryable",
    "give_ups_deadline",
    "give_ups_budget",
    "give_ups_may_have_run",
    "unhandled_errors",
    "aborted",
)


class _Counter:
    """A read-only counter attribute of RetryStats."""

    def __init__(self, index: int, doc: str) -> None:
        self.index = index
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: RetryStats | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        with instance._lock:
            return instance._counts[self.index]

    def __set__(self, instance: RetryStats, value: object) -> NoReturn:
        raise AttributeError(f"attribute '{self.name}' of 'RetryStats' objects is not writable")


@final
class RetryStats:
    """RetryStats()

    Counters of call_with_retry, shared by every Retry that holds them:
    calls, attempts, successes, failed attempts, retries, give-ups by
    reason, errors passed through, and seconds of backoff slept."""

    __slots__ = ("_lock", "_counts", "_slept")

    _lock: threading.Lock
    _counts: list[int]
    _slept: float

    calls = _Counter(0, "call_with_retry calls started")
    attempts = _Counter(1, "do() attempts that ended (returned or raised)")
    successes = _Counter(2, "calls whose do() returned")
    failed_attempts = _Counter(3, "attempts that raised a supported error")
    retries = _Counter(4, "attempts after a call's first")
    give_ups_exhausted = _Counter(5, "calls that raised: retries exhausted")
    give_ups_not_retryable = _Counter(6, "calls that raised: is_retryable(error) was false")
    give_ups_deadline = _Counter(7, "calls that raised: the deadline")
    give_ups_budget = _Counter(8, "calls that raised: the budget refused")
    give_ups_may_have_run = _Counter(
        9, 'calls that raised: writes="at-most-once" and the attempt may have run'
    )
    unhandled_errors = _Counter(
        10, "errors of do() passed through unhandled (not supported errors)"
    )
    aborted = _Counter(
        11,
        "calls ended by an exception from fail(), a checker, compute() or the sleep, "
        "or cancelled or closed while fail() or the sleep was awaited",
    )

    # The indexes above, by name, for the hooks.
    CALLS: ClassVar[int] = 0
    ATTEMPTS: ClassVar[int] = 1
    SUCCESSES: ClassVar[int] = 2
    FAILED_ATTEMPTS: ClassVar[int] = 3
    RETRIES: ClassVar[int] = 4
    GIVE_UPS_EXHAUSTED: ClassVar[int] = 5
    GIVE_UPS_NOT_RETRYABLE: ClassVar[int] = 6
    GIVE_UPS_DEADLINE: ClassVar[int] = 7
    GIVE_UPS_BUDGET: ClassVar[int] = 8
    GIVE_UPS_MAY_HAVE_RUN: ClassVar[int] = 9
    UNHANDLED: ClassVar[int] = 10
    ABORTED: ClassVar[int] = 11

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("type 'RetryStats' is not an acceptable base type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError("RetryStats() takes no arguments")
        self._lock = threading.Lock()
        self._counts = [0] * len(STAT_NAMES)
        self._slept = 0.0

    @property
    def slept_seconds(self) -> float:
        """seconds of backoff slept (the delays computed)"""
        with self._lock:
            return self._slept

    def _count(self, *indexes: int) -> None:
        with self._lock:
            for index in indexes:
                self._counts[index] += 1

    def _add_slept(self, seconds: float) -> None:
        with self._lock:
            self._slept += seconds

    def snapshot(self) -> dict[str, Any]:
        """The counters now, as a dict (one consistent reading)."""
        with self._lock:
            counts, slept = list(self._counts), self._slept
        result: dict[str, Any] = dict(zip(STAT_NAMES, counts))
        result["slept_seconds"] = float(slept)
        return result

    def reset(self) -> None:
        """Set every counter to 0."""
        with self._lock:
            self._counts = [0] * len(STAT_NAMES)
            self._slept = 0.0

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in self.snapshot().items())
        return f"RetryStats({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by value: (RetryStats, (), snapshot()).
        return (type(self), (), self.snapshot())

    def __setstate__(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise TypeError(
                f"RetryStats.__setstate__() argument must be a dict, not {type(state).__name__}"
            )
        counts = []
        for name in STAT_NAMES:
            value = state.get(name, 0)
            if not isinstance(value, int):
                raise TypeError(
                    f"RetryStats state '{name}' must be an int, not {type(value).__name__}"
                )
            if not 0 <= value < 2**64:
                raise OverflowError(f"RetryStats state '{name}' out of range: {value!r}")
            counts.append(value)
        slept = state.get("slept_seconds")
        seconds = 0.0 if slept is None else _real("RetryStats.__setstate__", "slept_seconds", slept)
        with self._lock:
            self._counts = counts
            self._slept = seconds
