"""Drop-in for ``redis.asyncio.retry``: the asyncio ``Retry`` in C.

``Retry.call_with_retry(do, fail)`` returns a coroutine-like object that
awaits ``do()``, ``fail(...)`` and ``sleep(delay)`` in redis-py's order.
Two designs keep that contract; the faster one on the running CPython is
chosen here, at import, and named by ``DESIGN``:

- ``"awaitable"`` (CPython 3.10, 3.11, and 3.15 on): a C object that
  speaks the coroutine protocol (``__await__``, ``send``, ``throw``,
  ``close``) and runs the whole loop, ``await do()`` included, in C.
- ``"coroutine"`` (CPython 3.12 to 3.14): a native ``async def``
  (``redis_backoff_c.asyncio._coroutine``) whose success path is the
  interpreter's own ``await do()``; reset, the decisions and the failure
  loop are in C.  On 3.12 to 3.14 the interpreter awaits only a native
  coroutine without a ``StopIteration`` per result, which is what the C
  awaitable pays there; on 3.15 the C awaitable is the faster again (1.33x
  to 1.37x redis-py's success path against 1.01x, failure 1.16x against
  1.00x: docs/performance.md).

``REDIS_BACKOFF_C_ASYNC_DESIGN=awaitable`` (or ``coroutine``) overrides the
choice, for testing both designs on one interpreter.

In both designs ``inspect.iscoroutinefunction(Retry.call_with_retry)`` is
true and ``inspect.signature`` gives redis-py's parameters, as for redis-py's
``async def``: redis-py 8.2's asyncio clients keep a retry only then (their
``_to_async_retry`` converts any other one to redis-py's ``Retry``).  The
awaitable design's C method (``csrc/async_method.c``) borrows, for inspect,
the code object, defaults and annotations of the coroutine design's
``async def`` while it is called as any C method.

``Retry`` is registered as a virtual subclass of
``redis.asyncio.retry.Retry``, so ``isinstance`` holds and redis-py's own
``__eq__`` accepts it.  Without the extension (see
``redis_backoff_c._impl``) it is the pure-Python twin, a subclass of
redis-py's class with the same extras, whose ``call_with_retry`` is an
``async def`` (``DESIGN`` is then "python").

``sleep`` is the one name the backoff is awaited through: the C code looks
it up here each time it sleeps (only after a failure), so a test can patch
``redis_backoff_c.asyncio.retry.sleep`` as redis-py's tests patch
``redis.asyncio.retry.sleep``.  It is ``asyncio.sleep``.  While
``redis_backoff_c.patch()`` is active it is ``_sleep_through_redis_retry``,
which returns ``redis.asyncio.retry.sleep(delay)``, the awaitable awaited: a
test that patches redis-py's name then reaches the C Retry too.
"""

import os
import sys
from asyncio import sleep
from collections.abc import Awaitable

import redis.asyncio.retry as _redis_asyncio_retry

from redis_backoff_c._impl import speedups
from redis_backoff_c._namespace import mirror as _mirror

# DESIGN is ours, not redis-py's: left out of __all__, which mirrors
# redis.asyncio.retry's names.
__all__ = ["Retry", "sleep"]


def _choose_design() -> str:
    forced = os.environ.get("REDIS_BACKOFF_C_ASYNC_DESIGN", "")
    if forced in ("awaitable", "coroutine"):
        return forced
    if forced:
        raise ValueError(
            f"REDIS_BACKOFF_C_ASYNC_DESIGN must be 'awaitable' or 'coroutine', not {forced!r}"
        )
    # Measured (callgrind and scripts/bench-matrix.sh): docs/architecture.md.
    return "coroutine" if (3, 12) <= sys.version_info < (3, 15) else "awaitable"


def _sleep_through_redis_retry(delay: float) -> Awaitable[None]:
    """``redis.asyncio.retry.sleep(delay)``, looked up at each call, and not
    awaited here: ``sleep`` here while patched (see the module documentation)."""
    return _redis_asyncio_retry.sleep(delay)  # type: ignore[no-any-return]


if speedups is not None:
    from redis_backoff_c._speedups import AsyncRetry as Retry

    #: "awaitable" or "coroutine": which design serves call_with_retry here.
    DESIGN: str = _choose_design()
    from redis_backoff_c.asyncio._coroutine import call_with_retry

    # Where pickle (by reference) and introspection find it: Retry's module.
    call_with_retry.__module__ = __name__
    if DESIGN == "coroutine":
        Retry.call_with_retry = call_with_retry  # type: ignore[method-assign]
    else:
        # The C method answers inspect as this async def does: see below.
        vars(Retry)["call_with_retry"]._present_as(call_with_retry)
    _redis_asyncio_retry.Retry.register(Retry)
else:
    from redis_backoff_c._extras_py import AsyncRetry as Retry  # type: ignore[assignment]

    DESIGN = "python"

# Every other public name of the installed redis.asyncio.retry
# (redis_backoff_c._namespace).
_mirror(globals(), _redis_asyncio_retry)
