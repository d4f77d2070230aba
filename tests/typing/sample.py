"""A user's program, type-checked with ``mypy --strict`` by scripts/lint.sh.

Not a test module and never run: it shows that the stubs let the C types go
where redis-py's own go, in redis.Redis and redis.asyncio.Redis.
"""

from __future__ import annotations

import redis
import redis.asyncio
import redis.backoff
import redis.retry
from redis.exceptions import ConnectionError, TimeoutError

import redis_backoff_c
from redis_backoff_c import (
    DEFAULT_BASE,
    DEFAULT_CAP,
    AbstractBackoff,
    ConstantBackoff,
    DecorrelatedJitterBackoff,
    EqualJitterBackoff,
    ExponentialBackoff,
    ExponentialWithJitterBackoff,
    FullJitterBackoff,
    NoBackoff,
    default_backoff,
)
from redis_backoff_c.asyncio.retry import Retry as AsyncRetry
from redis_backoff_c.metrics import OTelRetryMetrics, RetryStatsCollector, register_otel_metrics
from redis_backoff_c.retry import Retry


class Doubling(AbstractBackoff):
    """A user's own strategy, as with redis-py."""

    def compute(self, failures: int) -> float:
        return 0.001 * 2.0**failures


def strategies() -> list[redis.backoff.AbstractBackoff]:
    return [
        ConstantBackoff(0.1),
        NoBackoff(),
        ExponentialBackoff(),
        ExponentialBackoff(cap=DEFAULT_CAP, base=DEFAULT_BASE),
        FullJitterBackoff(1.0, 0.01),
        EqualJitterBackoff(cap=2),
        DecorrelatedJitterBackoff(base=0.5),
        ExponentialWithJitterBackoff(),
        default_backoff(),
        Doubling(),
    ]


def delays(failures: int) -> list[float]:
    decorrelated = DecorrelatedJitterBackoff()
    decorrelated.reset()
    return [decorrelated.compute(failures)] + [b.compute(failures) for b in strategies()]


def random_source() -> str:
    redis_backoff_c.set_random_source("fast", seed=42)
    redis_backoff_c.set_random_source("python")
    implementation: str = redis_backoff_c.IMPLEMENTATION
    return redis_backoff_c.get_random_source() + implementation + redis_backoff_c.__version__


def sync_client() -> redis.Redis:
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.01), 3)
    retry.update_supported_errors([OSError])
    retry.update_retries(retry.get_retries() + 1)
    as_redis_py: redis.retry.Retry = retry
    assert as_redis_py == Retry(ExponentialBackoff(), 4, (ConnectionError, TimeoutError))
    return redis.Redis(host="127.0.0.1", retry=retry)


def sync_call(client: redis.Redis) -> int:
    retry = Retry(EqualJitterBackoff(), 2)
    failures: list[Exception] = []

    def fail(error: Exception, count: int) -> None:
        failures.append(error)

    value: int = retry.call_with_retry(
        lambda: int(client.dbsize()),
        fail,
        is_retryable=lambda error: isinstance(error, ConnectionError),
        with_failure_count=True,
    )
    return value + len(failures)


def async_client() -> redis.asyncio.Redis:
    retry = AsyncRetry(FullJitterBackoff(), 3)
    retry.update_supported_errors([ConnectionError])
    return redis.asyncio.Redis(host="127.0.0.1", retry=retry)


async def async_call(client: redis.asyncio.Redis) -> bytes | str | None:
    retry = AsyncRetry(DecorrelatedJitterBackoff(), -1)

    async def do() -> bytes | str | None:
        value: bytes | str | None = await client.get("key")
        return value

    async def fail(error: Exception) -> None:
        await client.aclose()

    return await retry.call_with_retry(do, fail)


def patched_everywhere() -> int:
    report = redis_backoff_c.patch()
    assert redis_backoff_c.is_patched() == report.active
    with redis_backoff_c.patched() as again:
        count: int = again.count
    restored = redis_backoff_c.unpatch()
    return report.count + count + len(restored)


def with_extras() -> tuple[float, int]:
    budget = redis_backoff_c.RetryBudget(max_tokens=10, token_ratio=0.1)
    stats = redis_backoff_c.RetryStats()
    retry = Retry(ExponentialBackoff(), 3, deadline=0.5, budget=budget, stats=stats)
    retry.deadline = None
    aretry = AsyncRetry(FullJitterBackoff(), 3, budget=budget, stats=stats)
    assert aretry.budget is retry.budget
    redis_backoff_c.patch(deadline=1.0, budget=budget, stats=stats)
    redis_backoff_c.unpatch()
    snapshot = stats.snapshot()
    calls: int = snapshot["calls"]
    slept: float = snapshot["slept_seconds"]
    return budget.tokens + slept, calls + stats.retries


def with_a_checker() -> tuple[Retry, AsyncRetry]:
    """redis-py 8.2's is_retryable, on both Retry types."""

    def connection_only(error: Exception) -> bool:
        return isinstance(error, ConnectionError)

    retry = Retry(ExponentialBackoff(), 3, (ConnectionError,), connection_only)
    retry.is_retryable = None
    retry._is_retryable = connection_only
    aretry = AsyncRetry(NoBackoff(), 1, is_retryable=connection_only, stats=None)
    checker = aretry.is_retryable
    assert checker is None or checker(ConnectionError())
    return retry, aretry


def exported(
    stats: redis_backoff_c.RetryStats,
) -> tuple[RetryStatsCollector, OTelRetryMetrics]:
    """The C RetryStats is what both exporters take, alone or by name."""
    collector = RetryStatsCollector({"cache": stats}, labels={"service": "api"})
    with register_otel_metrics(stats, attributes={"service.name": "api"}) as registration:
        names: tuple[str, ...] = registration.instrument_names
    assert names
    return collector, registration
