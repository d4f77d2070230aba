"""Closed forms: the exact distribution of each known strategy's n-th delay.

With ``x = base * 2**n`` and ``m = min(cap, x)`` (redis-py's formulas, and
``uniform(a, b) == a + (b - a) * random()`` with ``random()`` in ``[0, 1)``):

- ConstantBackoff(c), NoBackoff: always ``c`` (0);
- ExponentialBackoff: always ``m``;
- FullJitterBackoff: uniform on ``[0, m]``;
- EqualJitterBackoff: uniform on ``[m/2, m]``;
- ExponentialWithJitterBackoff: ``min(cap, U * x)``, uniform on ``[0, x]``
  while ``x <= cap``; past the cap it has an atom at ``cap`` and its mean is
  ``cap - cap**2 / (2x)``; its q-quantile is ``min(cap, q * x)``;
- DecorrelatedJitterBackoff depends on its own history: only its bounds are
  exact (``min(cap, base)`` below; above, ``h_n = min(cap, max(base, 3 h_{n-1}))``
  from ``h_0 = 0``); its mean and percentiles are sampled.

``max`` of a jittered delay is the supremum of its range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DelayLaw", "laws_for"]


@dataclass(frozen=True)
class DelayLaw:
    """One delay's distribution.  ``mean`` and the quantile are None where
    only the bounds are known exactly (DecorrelatedJitterBackoff)."""

    low: float
    high: float
    mean: float | None
    kind: str  # "point", "uniform", "capped_uniform" (min(cap, U*x)), "bounds"
    scale: float = 0.0  # x for "capped_uniform"
    cap: float = 0.0

    @property
    def degenerate(self) -> bool:
        return self.kind == "point"

    def quantile(self, q: float) -> float | None:
        if self.kind == "point":
            return self.low
        if self.kind == "uniform":
            return self.low + q * (self.high - self.low)
        if self.kind == "capped_uniform":
            return min(self.cap, q * self.scale)
        return None


def _scaled(base: float, failures: int) -> float:
    """base * 2**failures, +inf where redis-py's float conversion overflows."""
    try:
        return math.ldexp(base, failures)
    except OverflowError:
        return math.inf if base > 0 else 0.0


def _point(value: float) -> DelayLaw:
    return DelayLaw(value, value, value, "point")


def _uniform(low: float, high: float) -> DelayLaw:
    if low == high:
        return _point(low)
    return DelayLaw(low, high, (low + high) / 2, "uniform")


def _capped_uniform(scale: float, cap: float) -> DelayLaw:
    if scale <= cap:
        return _uniform(0.0, scale)
    # 0 * inf cannot occur: scale > cap >= 0.  Where cap * cap overflows (a
    # cap past 1e154), the same quantity without the overflowing product.
    square = cap * cap
    mean = cap - (square / (2 * scale) if math.isfinite(square) else cap * (cap / (2 * scale)))
    return DelayLaw(0.0, cap, mean, "capped_uniform", scale=scale, cap=cap)


def laws_for(kind: str, params: dict[str, float], failures: int) -> list[DelayLaw]:
    """The laws of delays 1..failures of a known strategy after reset()."""
    if kind in ("ConstantBackoff", "NoBackoff"):
        return [_point(params["backoff"])] * failures
    cap, base = params["cap"], params["base"]
    laws: list[DelayLaw] = []
    high = 0.0
    for n in range(1, failures + 1):
        scaled = _scaled(base, n)
        top = min(cap, scaled)
        if kind == "ExponentialBackoff":
            laws.append(_point(top))
        elif kind == "FullJitterBackoff":
            laws.append(_uniform(0.0, top))
        elif kind == "EqualJitterBackoff":
            laws.append(_uniform(top / 2, top))
        elif kind == "ExponentialWithJitterBackoff":
            laws.append(_capped_uniform(scaled, cap))
        elif kind == "DecorrelatedJitterBackoff":
            high = min(cap, max(base, 3 * high))
            low = min(cap, base)
            laws.append(_point(low) if low == high else DelayLaw(low, high, None, "bounds"))
        else:  # pragma: no cover - the caller passes known kinds only
            raise ValueError(f"no closed form for {kind}")
    return laws
