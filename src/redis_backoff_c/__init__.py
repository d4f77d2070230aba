"""redis-py's backoff strategies and Retry, rebuilt in C.

Change one import::

    from redis_backoff_c import Retry, ExponentialBackoff

or call :func:`redis_backoff_c.patch` once at start-up.
"""
from redis_backoff_c._speedups import (
    DEFAULT_BASE,
    DEFAULT_CAP,
    ConstantBackoff,
    DecorrelatedJitterBackoff,
    EqualJitterBackoff,
    ExponentialBackoff,
    ExponentialWithJitterBackoff,
    FullJitterBackoff,
    NoBackoff,
    get_random_source,
    set_random_source,
)
from redis_backoff_c.backoff import AbstractBackoff, default_backoff

__version__ = "0.1.0"

#: Which implementation is active: "c" for the extension.
IMPLEMENTATION = "c"

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
    "IMPLEMENTATION",
    "NoBackoff",
    "default_backoff",
    "get_random_source",
    "set_random_source",
]
