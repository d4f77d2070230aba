"""The rules of the installed redis-py release and of the running
interpreter, decided once, here.

redis-py 8.2 changed two things the C types must follow, and the package
follows whichever 8.x is installed.  Each rule is decided from the feature
that carries it, never from the version string, once, when this module is
imported; ``redis_backoff_c._impl`` hands both to the C extension right
after importing it (``_speedups._set_release_rules``), and the tests read
them from here.

``LDEXP_EXPONENTIAL``
    8.2 computes the exponential strategies' ``base * 2**failures`` as
    ``redis.backoff._exponential``: ``math.ldexp``, ``inf`` past the largest
    float, a ``TypeError`` for a float count.  8.0 and 8.1 compute it with
    Python's numbers (an ``int`` or ``Fraction`` stays one).

``RETRY_CHECKER``
    8.2 gave ``Retry`` its own ``is_retryable`` checker and, with it, made
    ``call_with_retry`` test its ``is_retryable`` argument with ``is not
    None``; 8.0 and 8.1 have no checker and test the argument's truth.  The
    C types accept and apply their own checker whatever the release.

The C awaitable of the asyncio ``Retry`` says and does what the running
interpreter's own coroutines say and do, decided by asking the interpreter
(never from its version), and handed over by ``_impl`` too
(``_speedups._set_interpreter_rules``):

``STOP_CHAINS_RESULT``, ``STOP_CHAINS_NONE``
    Whether a coroutine's ``send()`` that returns a value (other than
    ``None``; ``None``) inside an ``except`` block raises its
    ``StopIteration`` with the handled exception as ``__context__``: both
    up to CPython 3.13; 3.14 stopped chaining a value.

:func:`await_error`
    Raises the ``TypeError`` with which ``await obj`` fails here (CPython
    3.14 and 3.15 reworded those messages).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import redis.backoff
import redis.retry

__all__ = [
    "LDEXP_EXPONENTIAL",
    "RETRY_CHECKER",
    "STOP_CHAINS_NONE",
    "STOP_CHAINS_RESULT",
    "await_error",
]

LDEXP_EXPONENTIAL: bool = hasattr(redis.backoff, "_exponential")
RETRY_CHECKER: bool = hasattr(redis.retry.AbstractRetry, "is_retryable")


def _stop_chains(result: object) -> bool:
    async def returns() -> object:
        return result

    coroutine = returns()
    try:
        raise LookupError("handled")
    except LookupError as handled:
        try:
            coroutine.send(None)
        except StopIteration as stop:
            return stop.__context__ is handled
    raise AssertionError("the coroutine did not return")  # pragma: no cover


STOP_CHAINS_RESULT: bool = _stop_chains(5)
STOP_CHAINS_NONE: bool = _stop_chains(None)

_NOTHING: Any = object()


def _run_to_first_await(coroutine: Coroutine[Any, Any, Any]) -> None:
    try:
        coroutine.send(None)
    finally:
        coroutine.close()


def await_error(obj: object, await_result: object = _NOTHING) -> None:
    """Raise the ``TypeError`` of ``await obj`` on this interpreter: `obj`
    cannot be awaited, or (``await_result`` given) its ``__await__()``
    returned ``await_result``, which is no iterator.  ``__await__`` is not
    called again: a stand-in with the same type names returns the result."""
    target = obj
    if await_result is not _NOTHING:
        cls = type(obj)
        stand_in = type(
            cls.__name__,
            (),
            {
                "__await__": lambda self: await_result,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
            },
        )
        target = stand_in()

    async def awaits() -> None:
        await target  # type: ignore[misc]

    _run_to_first_await(awaits())
    raise AssertionError(f"{obj!r} could be awaited")  # pragma: no cover
