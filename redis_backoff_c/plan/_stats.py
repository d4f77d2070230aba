"""The five figures the planner reports for a distribution, and how a sample becomes them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["FIELDS", "Figures", "exact_sum", "quantile", "sampled_figures"]

#: The figures, in the order the table and the JSON give them.
FIELDS = ("min", "mean", "max", "p50", "p99")


@dataclass(frozen=True)
class Figures:
    """min, mean, max, median and 99th percentile of one quantity, in seconds.

    ``exact`` names the figures computed in closed form; the others are
    estimates from a sample.  ``max`` of a jittered delay is the supremum of
    its range (``random()`` never returns 1.0).
    """

    min: float
    mean: float
    max: float
    p50: float
    p99: float
    exact: frozenset[str] = field(default=frozenset(FIELDS))

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in FIELDS}


def exact_sum(values: Iterable[float]) -> float:
    """math.fsum, except where a partial sum overflows a float: there the
    true sum of these (non-negative) figures is past the largest float too,
    and the answer is inf, as float arithmetic gives it."""
    values = list(values)
    try:
        return math.fsum(values)
    except OverflowError:
        return sum(values)


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted data, interpolated linearly between order
    statistics (numpy's default, "type 7")."""
    if not ordered:
        raise ValueError("quantile of no data")
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    weight = position - low
    if ordered[low] == ordered[high]:  # also where both are inf (inf - inf is nan)
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * weight


def sampled_figures(values: list[float]) -> Figures:
    """All five figures estimated from a sample (sorted in place)."""
    values.sort()
    return Figures(
        min=values[0],
        mean=_mean(values),
        max=values[-1],
        p50=quantile(values, 0.50),
        p99=quantile(values, 0.99),
        exact=frozenset(),
    )


def _mean(values: list[float]) -> float:
    try:
        return math.fsum(values) / len(values)
    except OverflowError:  # each value finite, their sum not: average the shares
        return math.fsum(value / len(values) for value in values)
