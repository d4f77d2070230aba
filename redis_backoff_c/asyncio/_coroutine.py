"""The native-coroutine design of the asyncio ``Retry.call_with_retry``.

On the CPythons where it is the faster of the two designs (see
``redis_backoff_c.asyncio.retry``), this ``async def`` is the C ``Retry``
type's ``call_with_retry``.  Its success path is the interpreter's own
``await do()``, which CPython 3.12 and later run without leaving the
interpreter or raising ``StopIteration``; everything else is C:
``_async_begin`` resets the backoff (and, for a ``Retry`` with a deadline,
budget or stats, counts the call and returns its deadline, or True), and on
a supported error ``_async_caught`` returns
the C awaitable of the failure loop (the checkers, ``fail``, the retries
limit, ``compute``, the sleep, ``do()`` again, the extras' accounting),
started from the error caught here.  With extras, ``_async_succeeded`` and
``_async_unhandled`` count how the first ``do()`` ended: one C call more
than a plain ``Retry`` pays.

``_async_begin`` takes the ``Retry`` alone: a one-argument C function is
the cheapest call CPython makes (about 4% of the whole call on 3.12 and
3.13 against the five-argument one it replaced).  So ``do`` and ``fail``
are checked where redis-py's coroutine meets them: ``do`` when it is called
(a ``TypeError`` from calling it is renamed for ``do`` if ``do`` is not
callable), ``fail`` when the failure loop calls it.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis_backoff_c._speedups import (
    AsyncRetry,
    _async_begin,
    _async_caught,
    _async_check_do,
    _async_close_context,
    _async_succeeded,
    _async_unhandled,
)

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
    started = _async_begin(self)
    if started is None:
        try:
            return await do()
        except self._supported_errors as error:
            failing = _async_caught(self, error, do, fail, is_retryable, with_failure_count, None)
        except TypeError:
            _async_check_do(do)
            raise
    else:
        # Deadline, budget or stats: the same, and how the first do() ended
        # is counted (close() at the await too, as in the C awaitable).
        try:
            result: _T = await do()
        except self._supported_errors as error:
            failing = _async_caught(
                self, error, do, fail, is_retryable, with_failure_count, started
            )
        except BaseException as error:
            _async_unhandled(self)
            if isinstance(error, TypeError):
                _async_check_do(do)
            raise
        else:
            _async_succeeded(self)
            return result
    # The failure loop is awaited after the handler: do() on a retry raises
    # with no __context__, as redis-py calls it in its try block.  close()
    # there makes CPython close the loop and raise GeneratorExit in this
    # frame, which handles no exception: the error that fail() or the sleep
    # was handling becomes its __context__, as in redis-py's coroutine,
    # whose awaits of them are inside its handler.
    try:
        result = await failing
    except GeneratorExit as exit_raised:
        if exit_raised.__context__ is None:
            exit_raised.__context__ = _async_close_context(failing)
        raise
    return result


# The name redis-py's coroutine has: "coroutine 'Retry.call_with_retry' was
# never awaited", and in reprs and tracebacks.
call_with_retry.__qualname__ = "Retry.call_with_retry"
