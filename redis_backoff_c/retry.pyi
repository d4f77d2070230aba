# redis_backoff_c.retry: the synchronous Retry, redis-py's API.
#
# Retry is the C type, declared in _speedups.pyi as a subclass of
# redis.retry.Retry: at run time it is a virtual subclass of it, so
# redis.Redis(retry=...) accepts it in a type checker as it does at run time.
# `sleep` is time.sleep, the one name call_with_retry sleeps through.
from time import sleep as sleep

from redis_backoff_c._speedups import Retry as Retry

__all__ = ["Retry", "sleep"]
