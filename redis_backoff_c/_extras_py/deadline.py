"""The deadline and the clock, the twin of csrc/deadline.c: the steps of
call_with_retry that fix a call's deadline, give up rather than pass it,
and measure the time each backoff sleep took (slept_seconds)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from redis_backoff_c import _call_deadline
from redis_backoff_c._extras_py.stats import RetryStats

__all__: list[str] = []


class _DeadlineSteps:
    """The deadline's steps of the twin Retry types' call_with_retry
    (mixed into redis_backoff_c._extras_py._Extras)."""

    if TYPE_CHECKING:

        def _extras(self, counted: bool) -> Mapping[str, Any]: ...

        def _has_extras(self) -> bool: ...

    def _begin(self) -> tuple[bool, float | None]:
        """Once, after reset(): counts the call; whether it is counted, and
        its deadline (when it must end, monotonic seconds) or None."""
        state = vars(self)
        stats: RetryStats | None = state.get("stats")
        if stats is not None:
            stats._count(RetryStats.CALLS)
        deadline = state.get("deadline")
        deadline_at = None
        if deadline is not None:
            deadline_at = _call_deadline.command_deadline(time.monotonic() + float(deadline))
        return self._has_extras(), deadline_at

    def _before_sleep(self, counted: bool, deadline_at: float | None, delay: Any) -> bool:
        """Before sleeping ``delay`` (> 0): False to give up, because the
        sleep would reach the call's deadline."""
        state = self._extras(counted)
        if deadline_at is None and state.get("stats") is None:
            return True
        seconds = float(delay)
        # The delay's __float__ may have changed the extras: read them again.
        stats: RetryStats | None = self._extras(counted).get("stats")
        if deadline_at is not None and time.monotonic() + seconds >= deadline_at:
            if stats is not None:
                stats._count(RetryStats.GIVE_UPS_DEADLINE)
            return False
        return True

    def _sleep_started(self, counted: bool) -> float | None:
        """The clock when a backoff sleep starts, when there are stats."""
        return time.monotonic() if self._extras(counted).get("stats") is not None else None

    def _sleep_ended(self, counted: bool, started: float | None) -> None:
        """slept_seconds adds the time the sleep actually took."""
        stats: RetryStats | None = self._extras(counted).get("stats")
        if started is not None and stats is not None:
            stats._add_slept(max(0.0, time.monotonic() - started))

    def _before_retry(self, counted: bool, deadline_at: float | None) -> bool:
        """Before each attempt after the first: False to give up, because
        the deadline has passed; else the retry is counted."""
        stats: RetryStats | None = self._extras(counted).get("stats")
        if deadline_at is not None and time.monotonic() >= deadline_at:
            if stats is not None:
                stats._count(RetryStats.GIVE_UPS_DEADLINE)
            return False
        if stats is not None:
            stats._count(RetryStats.RETRIES)
        return True
