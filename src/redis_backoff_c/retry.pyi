# redis_backoff_c.retry: the synchronous Retry, redis-py's API.
#
# Declared as a subclass of redis.retry.Retry: at run time the C type is a
# virtual subclass of it, so redis.Redis(retry=...) accepts it in a type
# checker as it does at run time.
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import redis.retry
from redis.backoff import AbstractBackoff

_T = TypeVar("_T")

class Retry(redis.retry.Retry):
    _backoff: AbstractBackoff
    _retries: int
    _supported_errors: tuple[type[Exception], ...]
    def __init__(
        self,
        backoff: AbstractBackoff,
        retries: int,
        supported_errors: tuple[type[Exception], ...] = ...,
    ) -> None: ...
    def get_retries(self) -> int: ...
    def update_retries(self, value: int) -> None: ...
    def update_supported_errors(self, specified_errors: Iterable[type[Exception]]) -> None: ...
    def call_with_retry(
        self,
        do: Callable[[], _T],
        fail: Callable[[Exception], Any] | Callable[[Exception, int], Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> _T: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
