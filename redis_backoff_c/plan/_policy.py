"""What the planner reads from a Retry and its strategy, for any implementation.

A Retry is anything with redis-py's ``_backoff`` and ``_retries`` (ours, the
asyncio one, redis-py's, a subclass).  A strategy is *known* when its exact
type is one of the seven, ours or redis-py's: then its parameters are read
from ``_cap``/``_base``/``_backoff`` and the closed forms apply.  A subclass
may override ``compute``, so it is sampled like any user strategy.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import redis.backoff

from redis_backoff_c import backoff as _ours

__all__ = [
    "STRATEGY_NAMES",
    "budget_of",
    "deadline_of",
    "describe_policy",
    "describe_strategy",
    "known_kind",
    "parameters",
    "retries_of",
]

STRATEGY_NAMES = (
    "ConstantBackoff",
    "NoBackoff",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
)

_KIND_OF_TYPE: dict[type, str] = {}
for _name in STRATEGY_NAMES:
    _KIND_OF_TYPE[getattr(redis.backoff, _name)] = _name
    _KIND_OF_TYPE[getattr(_ours, _name)] = _name


def known_kind(strategy: object) -> str | None:
    """The strategy's name if its exact type is one of the seven, else None."""
    return _KIND_OF_TYPE.get(type(strategy))


def _real(value: object) -> float | None:
    """value as a float if it is a finite, non-negative real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    if math.isfinite(number) and number >= 0:
        return number
    return None


def parameters(strategy: object, kind: str) -> dict[str, float] | None:
    """The strategy's parameters as floats, or None when one is not a finite,
    non-negative real (a closed form then would not describe what compute()
    does, so the strategy is sampled instead)."""
    names = ("_backoff",) if kind in ("ConstantBackoff", "NoBackoff") else ("_cap", "_base")
    found: dict[str, float] = {}
    for name in names:
        value = _real(getattr(strategy, name, None))
        if value is None:
            return None
        found[name.lstrip("_")] = value
    return found


def retries_of(retry: object) -> int:
    getter = getattr(retry, "get_retries", None)
    value = getter() if callable(getter) else getattr(retry, "_retries", None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"describe() argument 'retry' must be a Retry with an int number of retries, "
            f"got {type(retry).__name__} with retries {value!r}"
        )
    return value


def deadline_of(retry: object) -> float | None:
    """The Retry's own deadline, once the deadline feature exists; else None."""
    value = getattr(retry, "deadline", None)
    if value is None:
        value = getattr(retry, "_deadline", None)
    return None if value is None else float(value)


def budget_of(retry: object) -> tuple[float, float] | None:
    """(max_tokens, token_ratio) of the Retry's RetryBudget, once that exists."""
    budget: Any = getattr(retry, "budget", None)
    if budget is None:
        budget = getattr(retry, "_budget", None)
    if budget is None:
        return None
    tokens = getattr(budget, "max_tokens", None)
    ratio = getattr(budget, "token_ratio", None)
    if tokens is None or ratio is None:
        return None
    return float(tokens), float(ratio)


def _number(value: object) -> str:
    return repr(value) if isinstance(value, (int, float)) else str(value)


def describe_strategy(strategy: object) -> str:
    kind = known_kind(strategy)
    if kind == "NoBackoff":
        return "NoBackoff()"
    if kind == "ConstantBackoff":
        return f"ConstantBackoff({_number(getattr(strategy, '_backoff', '?'))})"
    if kind is not None:
        cap = _number(getattr(strategy, "_cap", "?"))
        base = _number(getattr(strategy, "_base", "?"))
        return f"{kind}(cap={cap}, base={base})"
    return repr(strategy)


def describe_policy(retry: object) -> str:
    """A readable one-line form of a Retry, the same for ours and redis-py's."""
    strategy = getattr(retry, "_backoff", None)
    retries = getattr(retry, "_retries", "?")
    text = f"Retry({describe_strategy(strategy)}, {retries}"
    deadline = deadline_of(retry)
    if deadline is not None:
        text += f", deadline={deadline!r}"
    budget = budget_of(retry)
    if budget is not None:
        text += f", budget=RetryBudget({budget[0]!r}, {budget[1]!r})"
    return text + ")"
