"""The native-coroutine design of the asyncio ``Retry.call_with_retry``.

On the CPythons where it is the faster of the two designs (see
``redis_backoff_c.asyncio.retry``), this ``async def`` is the C ``Retry``
type's ``call_with_retry``.  Its success path is the interpreter's own
``await do()``, which CPython 3.12 and later run without leaving the
interpreter or raising ``StopIteration``; everything else is C:
``_async_begin`` checks ``do`` and ``fail`` and resets the backoff (or, for a
``Retry`` with a deadline, budget or stats, returns the C awaitable of the
whole call, which keeps their accounting), and on a
supported error ``_async_caught`` returns the C awaitable of the failure
loop (the checkers, ``fail``, the retries limit, ``compute``, the sleep,
``do()`` again), started from the error caught here.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis_backoff_c._speedups import AsyncRetry, _async_begin, _async_caught

__all__ = ["call_with_retry"]

_T = TypeVar("_T")


async def call_with_retry(
    self: AsyncRetry,
    do: Callable[[], Awaitable[_T]],
    fail: Callable[..., Any],
    is_retryable: Callable[[Exception], bool] | None = None,
    with_failure_count: bool = False,
) -> _T:
    """Await do(); on an error in _supported_errors, await fail(error) (or
    fail(error, failures)), await redis_backoff_c.asyncio.retry.sleep(
    _backoff.compute(failures)) and await do() again, up to _retries times
    (forever when < 0); then raise the error.  When the Retry's own checker
    (self.is_retryable) is set and returns false for the error, fail() is
    awaited (failures + 1 as its count) and the error raised; then a false
    is_retryable(error) raises it at once (the argument is combined with the
    Retry's checker by AND)."""
    whole = _async_begin(self, do, fail, is_retryable, with_failure_count)
    if whole is not None:  # deadline, budget or stats: all in C
        result: _T = await whole
        return result
    try:
        return await do()
    except self._supported_errors as error:
        failing = _async_caught(self, error, do, fail, is_retryable, with_failure_count)
    result = await failing
    return result


# The name redis-py's coroutine has: "coroutine 'Retry.call_with_retry' was
# never awaited", and in reprs and tracebacks.
call_with_retry.__qualname__ = "Retry.call_with_retry"
