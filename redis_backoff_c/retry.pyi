# redis_backoff_c.retry: the synchronous Retry, redis-py's API.
#
# Retry is the C type, declared in _speedups.pyi as a subclass of
# redis.retry.Retry: at run time it is a virtual subclass of it, so
# redis.Redis(retry=...) accepts it in a type checker as it does at run time.
# `sleep` is time.sleep, the one name call_with_retry sleeps through.
from time import sleep as sleep

# redis.retry's other public names, redis-py's own objects at run time
# (redis_backoff_c._namespace); is_retryable_connect_error is redis-py 8.2's.
from redis.exceptions import ConnectionError as ConnectionError, TimeoutError as TimeoutError
from redis.retry import (
    AbstractRetry as AbstractRetry,
    is_retryable_connect_error as is_retryable_connect_error,
)

from redis_backoff_c._speedups import Retry as Retry

__all__ = ["Retry", "sleep"]
