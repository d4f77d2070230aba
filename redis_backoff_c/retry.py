"""Drop-in for ``redis.retry``: the synchronous ``Retry`` in C.

``Retry`` is registered as a virtual subclass of ``redis.retry.Retry``, so
``isinstance(retry, redis.retry.Retry)`` holds and redis-py's own ``__eq__``
accepts it.  Without the extension (see ``redis_backoff_c._impl``) it is
the pure-Python twin, a subclass of redis-py's class with the same extras.

``sleep`` is the one name ``call_with_retry`` sleeps through: the C code
looks it up here each time it sleeps (only after a failure), so a test can
patch ``redis_backoff_c.retry.sleep`` as redis-py's tests patch
``redis.retry.sleep``.  It is ``time.sleep``: the GIL is released and
Ctrl-C interrupts it.  While ``redis_backoff_c.patch()`` is active it is
``_sleep_through_redis_retry``, which calls ``redis.retry.sleep``: a test
that patches redis-py's name then reaches the C Retry too.

``call_with_retry``'s ``is_retryable`` argument is tested as the installed
redis-py tests it: ``is not None`` from redis-py 8.2 on, its truth before
(``redis_backoff_c._rules``).
"""

from time import sleep

import redis.retry as _redis_retry

from redis_backoff_c._impl import speedups
from redis_backoff_c._namespace import mirror as _mirror

if speedups is not None:
    from redis_backoff_c._speedups import Retry

    _redis_retry.Retry.register(Retry)
else:
    from redis_backoff_c._extras_py import Retry  # type: ignore[assignment]

__all__ = ["Retry", "sleep"]


def _sleep_through_redis_retry(delay: float) -> None:
    """``redis.retry.sleep(delay)``, looked up at each call: ``sleep`` here
    while patched (see the module documentation)."""
    _redis_retry.sleep(delay)


# Every other public name of the installed redis.retry: AbstractRetry, the
# errors it retries by default, redis-py 8.2's is_retryable_connect_error
# (redis_backoff_c._namespace).
_mirror(globals(), _redis_retry)
