"""describe(): how long a Retry can block one call that fails every attempt."""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from redis_backoff_c._impl import IMPLEMENTATION, get_random_source, set_random_source
from redis_backoff_c.plan._laws import DelayLaw, laws_for
from redis_backoff_c.plan._policy import (
    budget_of,
    deadline_of,
    describe_policy,
    known_kind,
    parameters,
    retries_of,
)
from redis_backoff_c.plan._stats import FIELDS, Figures, exact_sum, sampled_figures

__all__ = [
    "DEFAULT_HORIZON",
    "Description",
    "FailureFigures",
    "describe",
    "format_seconds",
    "sample_totals",
    "seeded_sources",
]

#: Failures described for a Retry that retries forever (retries < 0).
DEFAULT_HORIZON = 20
#: Most draws (failures x samples) one describe() makes before refusing.
MAX_DRAWS = 50_000_000
#: Most failures one describe() lists (a table of a million rows helps nobody).
MAX_FAILURES = 100_000


@dataclass(frozen=True)
class FailureFigures:
    """The delay after the ``failure``-th failed attempt."""

    failure: int
    delay: Figures

    def as_dict(self) -> dict[str, float | int]:
        return {"failure": self.failure, **self.delay.as_dict()}


@dataclass(frozen=True)
class Description:
    """What describe() found.  All times in seconds.

    ``total`` is the time a call that fails every attempt blocks:
    ``(failures + 1) * attempt_time`` plus the delays it sleeps, truncated by
    ``deadline`` when there is one.
    """

    policy: str
    attempt_time: float
    deadline: float | None
    retries: int
    failures: int
    samples: int
    per_failure: tuple[FailureFigures, ...]
    total: Figures
    notes: tuple[str, ...] = field(default=())
    label: str = ""  # the name tables and the verdict give; policy when empty

    @property
    def name(self) -> str:
        return self.label or self.policy

    def shifted(self, attempt_time: float, label: str = "") -> Description:
        """The same policy with another attempt time, without a deadline:
        every total moves by (failures + 1) times the difference, exactly,
        and the delays do not change (so no new sample is drawn)."""
        if self.deadline is not None:
            raise ValueError("shifted() cannot move totals truncated by a deadline")
        step = (self.failures + 1) * (attempt_time - self.attempt_time)
        total = self.total
        moved = Figures(
            total.min + step,
            total.mean + step,
            total.max + step,
            total.p50 + step,
            total.p99 + step,
            exact=total.exact,
        )
        return replace(self, attempt_time=attempt_time, total=moved, label=label or self.label)

    def to_json(self) -> dict[str, Any]:
        """The issue's schema: policy, attempt_time, per_failure, total."""
        return {
            "policy": self.policy,
            "attempt_time": self.attempt_time,
            "per_failure": [entry.as_dict() for entry in self.per_failure],
            "total": self.total.as_dict(),
        }

    def verdict(self) -> str:
        """One line: worst case, typical (median) and p99 of the total."""
        total = self.total
        worst = "at most" if "max" in total.exact else "in the worst case sampled"
        return (
            f"{self.name}: a call that fails every attempt blocks {worst} "
            f"{format_seconds(total.max)}, typically {format_seconds(total.p50)}, "
            f"p99 {format_seconds(total.p99)}"
        )


def format_seconds(value: float) -> str:
    """Seconds for a table: "5.26 s", "19.8 ms", "0", "1e+300 s", "inf s" (past a float)."""
    if not math.isfinite(value):
        return "n/a" if math.isnan(value) else f"{value} s"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6:  # 11 days and more: no row of digits
        return f"{value:.2g} s"
    if magnitude >= 100:
        return f"{value:.0f} s"
    if magnitude >= 1:
        return f"{value:.2f} s"
    if magnitude >= 0.1:
        return f"{value * 1000:.0f} ms"
    if magnitude >= 0.001:
        return f"{value * 1000:.3g} ms"
    return f"{value * 1e6:.3g} µs"


@contextmanager
def seeded_sources(seed: int | None) -> Iterator[None]:
    """Draw from seeded generators, and leave the user's as they were.

    Our strategies draw from the package's fast source, switched on and
    seeded here; redis-py's and user strategies from the random module,
    reseeded here and restored to its exact state afterwards.  The package's
    source goes back to the one in use; a "fast" source that was in use
    before is reseeded from os.urandom (its stream position cannot be read).
    Not thread-safe: both sources are process-wide.
    """
    state = random.getstate()
    previous = get_random_source()
    random.seed(seed)
    if IMPLEMENTATION == "c":
        set_random_source("fast", seed=seed)
    try:
        yield
    finally:
        random.setstate(state)
        if IMPLEMENTATION == "c":
            set_random_source(previous)


def _private_copy(strategy: Any) -> Any:
    """A copy to sample, so the user's object keeps its state; the object
    itself when it cannot be copied."""
    try:
        return copy.deepcopy(strategy)
    except Exception:
        return strategy


def _slept(delay: float) -> float:
    """Time call_with_retry sleeps for a delay: only a delay > 0 is slept."""
    return delay if delay > 0 else 0.0


def _blocked_until_deadline(
    delays: list[float], attempt_time: float, deadline: float | None
) -> float:
    """Time one call blocks: attempts of attempt_time, each failure followed
    by its delay.  With a deadline, the call never sleeps past it and never
    starts an attempt at or after it: it gives up at once when the next
    sleep would reach the deadline."""
    now = attempt_time
    for delay in delays:
        sleep = _slept(delay)
        if deadline is not None and now + sleep >= deadline:
            return now
        now += sleep + attempt_time
    return now


def _figures_from_laws(laws: list[DelayLaw], offset: float) -> tuple[Figures, bool]:
    """min/mean/max of a sum of independent delays plus offset, exactly;
    mean only when every law has one.  The bool says the sum is a constant."""
    low = offset + exact_sum(law.low for law in laws)
    high = offset + exact_sum(law.high for law in laws)
    means = [law.mean for law in laws]
    constant = all(law.degenerate for law in laws)
    if all(mean is not None for mean in means):
        mean = offset + exact_sum(m for m in means if m is not None)
        exact = {"min", "max", "mean"}
    else:
        mean = math.nan
        exact = {"min", "max"}
    if constant:
        return Figures(low, low, low, low, low), True
    return Figures(low, mean, high, math.nan, math.nan, exact=frozenset(exact)), False


def _merge(exact: Figures, sampled: Figures) -> Figures:
    """exact's figures where it has them, the sample's elsewhere."""
    values = {name: getattr(exact if name in exact.exact else sampled, name) for name in FIELDS}
    return Figures(**values, exact=exact.exact)


def _law_figures(law: DelayLaw) -> Figures:
    p50, p99 = law.quantile(0.5), law.quantile(0.99)
    if law.mean is None or p50 is None or p99 is None:
        return Figures(
            law.low, math.nan, law.high, math.nan, math.nan, exact=frozenset({"min", "max"})
        )
    return Figures(law.low, law.mean, law.high, p50, p99)


def _check_arguments(
    attempt_time: float, samples: int, horizon: int, deadline: float | None
) -> None:
    if not (isinstance(attempt_time, (int, float)) and math.isfinite(attempt_time)):
        raise TypeError(f"attempt_time must be a finite number of seconds, not {attempt_time!r}")
    if attempt_time < 0:
        raise ValueError(f"attempt_time must be >= 0, not {attempt_time!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an int >= 1, not {samples!r}")
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ValueError(f"horizon must be an int >= 0, not {horizon!r}")
    if deadline is not None and not (deadline > 0):
        raise ValueError(f"deadline must be > 0 seconds or None, not {deadline!r}")


def describe(
    retry: object,
    attempt_time: float = 0.0,
    samples: int = 100_000,
    seed: int | None = None,
    horizon: int = DEFAULT_HORIZON,
    deadline: float | None = None,
    *,
    label: str | None = None,
) -> Description:
    """Describe the delays of ``retry`` and the time a call that fails every
    attempt blocks.

    ``retry`` is any Retry (ours, asyncio, redis-py's).  ``attempt_time`` is
    what one failed attempt costs (0 for a refused connection, the connect
    timeout for an unreachable host).  For ``retries < 0`` the first
    ``horizon`` failures are described.  ``deadline`` (seconds, or the
    Retry's own ``deadline`` when it has one) truncates the total.  Figures
    with a closed form are exact; the rest come from ``samples`` runs of a
    copy of the strategy object itself, drawn from sources seeded by ``seed``
    (see :func:`seeded_sources`).
    """
    strategy = getattr(retry, "_backoff", None)
    if strategy is None or not callable(getattr(strategy, "compute", None)):
        raise TypeError(
            f"describe() argument 'retry' must be a Retry with a backoff strategy, "
            f"not {type(retry).__name__}"
        )
    retries = retries_of(retry)
    if deadline is None:
        deadline = deadline_of(retry)
    attempt_time = float(attempt_time) if isinstance(attempt_time, int) else attempt_time
    _check_arguments(attempt_time, samples, horizon, deadline)
    failures = retries if retries >= 0 else horizon
    if failures > MAX_FAILURES:
        raise ValueError(
            f"describing {failures} failures is more than {MAX_FAILURES}: "
            f"lower the retries (or the horizon)"
        )
    notes: list[str] = []
    if retries < 0:
        notes.append(f"retries={retries} retries forever: the first {failures} failures described")
    if budget_of(retry) is not None:
        notes.append("the retry budget depends on other calls and is not modelled here")

    kind = known_kind(strategy)
    params = parameters(strategy, kind) if kind is not None else None
    laws = laws_for(kind, params, failures) if kind is not None and params is not None else None
    offset = (failures + 1) * attempt_time

    exact_total: Figures | None = None
    constant = False
    per_failure_exact: list[Figures] | None = None
    if laws is not None:
        per_failure_exact = [_law_figures(law) for law in laws]
        if deadline is None:
            exact_total, constant = _figures_from_laws(laws, offset)
        elif all(law.degenerate for law in laws):
            value = _blocked_until_deadline([law.low for law in laws], attempt_time, deadline)
            exact_total, constant = Figures(value, value, value, value, value), True

    need_rows = per_failure_exact is None or any(
        len(f.exact) < len(FIELDS) for f in per_failure_exact
    )
    if constant and not need_rows:
        assert exact_total is not None
        return Description(
            policy=describe_policy(retry),
            label=label or "",
            attempt_time=attempt_time,
            deadline=deadline,
            retries=retries,
            failures=failures,
            samples=0,
            per_failure=_per_failure(per_failure_exact or []),
            total=exact_total,
            notes=tuple(notes),
        )

    if failures * samples > MAX_DRAWS:
        raise ValueError(
            f"describing {failures} failures with {samples} samples takes "
            f"{failures * samples} draws, over {MAX_DRAWS}: lower samples or horizon"
        )
    sampler = _private_copy(strategy)
    with seeded_sources(seed):
        if need_rows or deadline is not None:
            rows = _sample_rows(sampler, failures, samples)
            totals = _totals_of_rows(rows, attempt_time, deadline, nonnegative=laws is not None)
        else:
            rows = []
            totals = _sample_totals(sampler, failures, samples, offset)
    total = sampled_figures(totals)
    if exact_total is not None:
        total = _merge(exact_total, total)
    if per_failure_exact is not None and not need_rows:
        per_failure = per_failure_exact
    else:
        columns = [sampled_figures(list(column)) for column in zip(*rows)] if failures else []
        if per_failure_exact is not None:
            columns = [_merge(e, s) for e, s in zip(per_failure_exact, columns)]
        per_failure = columns
    return Description(
        policy=describe_policy(retry),
        label=label or "",
        attempt_time=attempt_time,
        deadline=deadline,
        retries=retries,
        failures=failures,
        samples=samples,
        per_failure=_per_failure(per_failure),
        total=total,
        notes=tuple(notes),
    )


def _per_failure(figures: list[Figures]) -> tuple[FailureFigures, ...]:
    return tuple(FailureFigures(n, f) for n, f in enumerate(figures, start=1))


def _sample_rows(strategy: Any, failures: int, samples: int) -> list[list[float]]:
    """samples runs of reset() then compute(1..failures), as call_with_retry
    makes them."""
    reset: Callable[[], object] = getattr(strategy, "reset", lambda: None)
    compute: Callable[[int], Any] = strategy.compute
    counts = range(1, failures + 1)
    rows: list[list[float]] = []
    append = rows.append
    for _ in range(samples):
        reset()
        append(list(map(compute, counts)))
    if failures and not all(type(d) is float for d in rows[0]):
        rows = [[float(d) for d in row] for row in rows]
    return rows


def _sample_totals(strategy: Any, failures: int, samples: int, offset: float) -> list[float]:
    """Totals only, for a stateless known strategy with non-negative delays:
    sum(map(compute, ...)) keeps the loop in C."""
    compute = strategy.compute
    counts = range(1, failures + 1)
    return [offset + sum(map(compute, counts)) for _ in range(samples)]


def sample_totals(
    retry: object,
    attempt_time: float = 0.0,
    samples: int = 20_000,
    seed: int | None = None,
    horizon: int = DEFAULT_HORIZON,
    deadline: float | None = None,
) -> list[float]:
    """A sample of the total a call that fails every attempt blocks (for charts)."""
    strategy = _private_copy(getattr(retry, "_backoff", None))
    retries = retries_of(retry)
    failures = retries if retries >= 0 else horizon
    if deadline is None:
        deadline = deadline_of(retry)
    with seeded_sources(seed):
        rows = _sample_rows(strategy, failures, samples)
    return _totals_of_rows(rows, attempt_time, deadline, nonnegative=False)


def _totals_of_rows(
    rows: list[list[float]], attempt_time: float, deadline: float | None, *, nonnegative: bool
) -> list[float]:
    """Each row's total; without a deadline, a plain sum when every delay is
    known to be >= 0 (the closed-form strategies), else only delays > 0."""
    if deadline is not None:
        return [_blocked_until_deadline(row, attempt_time, deadline) for row in rows]
    offset = (len(rows[0]) + 1) * attempt_time if rows else attempt_time
    if nonnegative:
        return [offset + sum(row) for row in rows]
    return [offset + sum(d for d in row if d > 0) for row in rows]
