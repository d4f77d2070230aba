"""The writes policy, the twin of csrc/writes.c: the value a Retry's
``writes`` takes.  Its step after fail() (``_Extras._may_have_run``) stays
in the package's ``__init__``, whose ``_writes_judge`` the tests replace."""

from __future__ import annotations

from redis_backoff_c.writes import AT_LEAST_ONCE, AT_MOST_ONCE

__all__: list[str] = []


def _checked_writes(owner: str, name: str, value: object) -> str | None:
    """The writes policy as stored: None for redis-py's "at-least-once" (or
    None), "at-most-once" for that; TypeError or ValueError otherwise."""
    if value is None:
        return None
    if type(value) is not str:
        raise TypeError(
            f"{owner}() argument '{name}' must be a str or None, not {type(value).__name__}"
        )
    if value == AT_MOST_ONCE:
        return AT_MOST_ONCE
    if value == AT_LEAST_ONCE:
        return None
    raise ValueError(
        f"{owner}() argument '{name}' must be 'at-least-once' or 'at-most-once', not {value!r}"
    )
