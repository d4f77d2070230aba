"""Drop-in for ``redis.asyncio.retry``: the asyncio ``Retry`` in C.

``Retry.call_with_retry`` returns a C awaitable (it speaks the coroutine
protocol: ``__await__``, ``send``, ``throw``, ``close``) that awaits
``do()``, ``fail(...)`` and ``sleep(delay)`` in redis-py's order.
``Retry`` is registered as a virtual subclass of
``redis.asyncio.retry.Retry``, so ``isinstance`` holds and redis-py's own
``__eq__`` accepts it.  Without the extension (see
``redis_backoff_c._impl``) it is redis-py's class.

``sleep`` is the one name the backoff is awaited through: the C code looks
it up here each time it sleeps (only after a failure), so a test can patch
``redis_backoff_c.asyncio.retry.sleep`` as redis-py's tests patch
``redis.asyncio.retry.sleep``.  It is ``asyncio.sleep``.
"""

from asyncio import sleep

import redis.asyncio.retry as _redis_asyncio_retry

from redis_backoff_c._impl import speedups

if speedups is not None:
    from redis_backoff_c._speedups import AsyncRetry as Retry

    _redis_asyncio_retry.Retry.register(Retry)
else:
    from redis.asyncio.retry import Retry

__all__ = ["Retry", "sleep"]
