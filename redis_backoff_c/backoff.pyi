from redis.backoff import AbstractBackoff as AbstractBackoff

from redis_backoff_c._speedups import (
    DEFAULT_BASE as DEFAULT_BASE,
    DEFAULT_CAP as DEFAULT_CAP,
    ConstantBackoff as ConstantBackoff,
    DecorrelatedJitterBackoff as DecorrelatedJitterBackoff,
    EqualJitterBackoff as EqualJitterBackoff,
    ExponentialBackoff as ExponentialBackoff,
    ExponentialWithJitterBackoff as ExponentialWithJitterBackoff,
    FullJitterBackoff as FullJitterBackoff,
    NoBackoff as NoBackoff,
)

__all__ = [
    "AbstractBackoff",
    "ConstantBackoff",
    "DEFAULT_BASE",
    "DEFAULT_CAP",
    "DecorrelatedJitterBackoff",
    "EqualJitterBackoff",
    "ExponentialBackoff",
    "ExponentialWithJitterBackoff",
    "FullJitterBackoff",
    "NoBackoff",
    "default_backoff",
]

def default_backoff() -> EqualJitterBackoff: ...
