# redis_backoff_c.asyncio.retry: the asyncio Retry, redis-py's API.
#
# Declared as a subclass of redis.asyncio.retry.Retry (a virtual subclass at
# run time), so redis.asyncio.Redis(retry=...) accepts it.
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import redis.asyncio.retry
from redis.backoff import AbstractBackoff
from redis.exceptions import RedisError

_T = TypeVar("_T")

class Retry(redis.asyncio.retry.Retry):
    _backoff: AbstractBackoff
    _retries: int
    _supported_errors: tuple[type[RedisError], ...]
    def __init__(
        self,
        backoff: AbstractBackoff,
        retries: int,
        supported_errors: tuple[type[RedisError], ...] = ...,
    ) -> None: ...
    def get_retries(self) -> int: ...
    def update_retries(self, value: int) -> None: ...
    def update_supported_errors(self, specified_errors: Iterable[type[RedisError]]) -> None: ...
    # redis-py's is an ``async def``; ours returns a C awaitable, which the
    # stub promises as Awaitable, not Coroutine: hence the override ignore.
    def call_with_retry(  # type: ignore[override]
        self,
        do: Callable[[], Awaitable[_T]],
        fail: Callable[[Exception], Any] | Callable[[Exception, int], Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> Awaitable[_T]: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
