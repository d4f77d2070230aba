# redis_backoff_c.asyncio.retry: the asyncio Retry, redis-py's API.
#
# Retry is the C type, declared in _speedups.pyi (as AsyncRetry, its name
# there) as a subclass of redis.asyncio.retry.Retry: at run time it is a
# virtual subclass of it, so redis.asyncio.Redis(retry=...) accepts it in a
# type checker as it does at run time.  `sleep` is asyncio.sleep, the one
# name call_with_retry awaits its backoff through.
from asyncio import sleep as sleep
from typing import Literal

from redis.exceptions import ConnectionError as ConnectionError, TimeoutError as TimeoutError

# redis.asyncio.retry's other public names, redis-py's own objects at run
# time (redis_backoff_c._namespace).
from redis.retry import AbstractRetry as AbstractRetry

from redis_backoff_c._speedups import AsyncRetry as Retry

# Which design serves call_with_retry on this interpreter ("python" without
# the extension); see the module's docstring.
DESIGN: Literal["awaitable", "coroutine", "python"]

__all__ = ["Retry", "sleep"]
