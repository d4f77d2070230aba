"""POLICY expressions: parsed with ast, never evaluated.

Allowed: calls of the package's constructors (Retry, the seven strategies,
default_backoff, and RetryBudget once it exists) with positional or keyword
arguments that are numbers (``-`` allowed in front), ``None``, or such calls.
Anything else (names, attributes, strings, operators, ``__import__('os')``)
raises PolicyError naming what is not allowed; nothing is run.
"""

from __future__ import annotations

import ast
from typing import Any

import redis_backoff_c
from redis_backoff_c.plan._policy import STRATEGY_NAMES

__all__ = ["MAX_POLICY_LENGTH", "PolicyError", "allowed_constructors", "parse_policy"]

MAX_POLICY_LENGTH = 2000


class PolicyError(ValueError):
    """A POLICY expression the planner does not accept."""


def allowed_constructors() -> dict[str, Any]:
    names = ["Retry", *STRATEGY_NAMES, "default_backoff", "RetryBudget"]
    return {
        name: getattr(redis_backoff_c, name) for name in names if hasattr(redis_backoff_c, name)
    }


def _where(node: ast.AST) -> str:
    return f"column {getattr(node, 'col_offset', 0) + 1}"


def _value(node: ast.expr, constructors: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        raise PolicyError(
            f"{_where(node)}: {value!r} is not allowed: only numbers, None and "
            f"the package's constructors"
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        if isinstance(operand, ast.Constant) and isinstance(operand.value, (int, float)):
            if not isinstance(operand.value, bool):
                number = operand.value
                return -number if isinstance(node.op, ast.USub) else number
        raise PolicyError(f"{_where(node)}: a sign is allowed only in front of a number")
    if isinstance(node, ast.Call):
        return _call(node, constructors)
    raise PolicyError(
        f"{_where(node)}: {ast.unparse(node)!r} is not allowed: only numbers, None and "
        f"the package's constructors ({', '.join(sorted(constructors))})"
    )


def _call(node: ast.Call, constructors: dict[str, Any]) -> Any:
    if not isinstance(node.func, ast.Name) or node.func.id not in constructors:
        name = ast.unparse(node.func)
        raise PolicyError(
            f"{_where(node)}: {name!r} is not one of the package's constructors "
            f"({', '.join(sorted(constructors))}); nothing was evaluated"
        )
    args = []
    for argument in node.args:
        if isinstance(argument, ast.Starred):
            raise PolicyError(f"{_where(argument)}: '*' arguments are not allowed")
        args.append(_value(argument, constructors))
    kwargs: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise PolicyError(f"{_where(keyword.value)}: '**' arguments are not allowed")
        kwargs[keyword.arg] = _value(keyword.value, constructors)
    constructor = constructors[node.func.id]
    try:
        return constructor(*args, **kwargs)
    except (TypeError, ValueError, OverflowError) as error:
        raise PolicyError(f"{ast.unparse(node)}: {error}") from None


def parse_policy(text: str) -> Any:
    """The object a POLICY expression describes, built from the package's
    constructors only.  A bare strategy is not a policy: wrap it in Retry."""
    if not isinstance(text, str):
        raise TypeError(f"policy must be a str, not {type(text).__name__}")
    if len(text) > MAX_POLICY_LENGTH:
        raise PolicyError(f"policy is longer than {MAX_POLICY_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as error:
        raise PolicyError(f"not a valid expression: {error.msg}") from None
    except (RecursionError, MemoryError):
        raise PolicyError("policy is nested too deeply") from None
    constructors = allowed_constructors()
    try:
        result = _value(tree.body, constructors)
    except RecursionError:
        raise PolicyError("policy is nested too deeply") from None
    if not hasattr(result, "_backoff"):
        raise PolicyError(
            f"POLICY must be a Retry(...), got {type(result).__name__}; "
            f"for example Retry({text.strip()}, 3)"
        )
    return result
