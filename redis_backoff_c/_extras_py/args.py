"""The arguments of the twin's types, checked as csrc/args.c checks them
(the binding of a signature, real numbers, callables)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__: list[str] = []


def _bind(
    owner: str,
    names: tuple[str, ...],
    positional: int,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> list[Any]:
    """The values of ``names`` from a call, with the C binder's messages."""
    if len(args) > positional:
        plural = "" if positional == 1 else "s"
        raise TypeError(
            f"{owner}() takes at most {positional} positional argument{plural} ({len(args)} given)"
        )
    values: dict[str, Any] = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{owner}() got an unexpected keyword argument '{key}'")
        if key in values:
            raise TypeError(f"{owner}() got multiple values for argument '{key}'")
        values[key] = value
    for index, name in enumerate(names):
        if name not in values:
            if name not in defaults:
                raise TypeError(f"{owner}() missing required argument '{name}' (pos {index + 1})")
            values[name] = defaults[name]
    return [values[name] for name in names]


def _is_real(value: object) -> bool:
    kind = type(value)
    return (
        isinstance(value, (int, float)) or hasattr(kind, "__float__") or hasattr(kind, "__index__")
    )


def _real(owner: str, name: str, value: object) -> float:
    if not _is_real(value):
        raise TypeError(
            f"{owner}() argument '{name}' must be a real number, not {type(value).__name__}"
        )
    return float(value)  # type: ignore[arg-type]


def _positive(owner: str, name: str, value: object, allow_infinite: bool) -> float:
    number = _real(owner, name, value)
    if not number > 0.0 or (not allow_infinite and number == float("inf")):
        finite = "" if allow_infinite else "finite "
        raise ValueError(
            f"{owner}() argument '{name}' must be a {finite}positive number, not {value!r}"
        )
    return number


def _check_callable(obj: Any, name: str) -> None:
    if not callable(obj):
        raise TypeError(
            f"call_with_retry() argument '{name}' must be callable, not {type(obj).__name__}"
        )
