"""Drop-in for ``redis.backoff``: the seven strategies as C types.

Each C type is registered as a virtual subclass of its redis-py namesake,
so ``isinstance(ExponentialBackoff(), redis.backoff.ExponentialBackoff)``
and ``isinstance(..., redis.backoff.AbstractBackoff)`` hold, and redis-py's
own ``__eq__`` accepts our objects as ours accept theirs.  Without the
extension (see ``redis_backoff_c._impl``) these are redis-py's classes.
"""

import redis.backoff as _redis_backoff
from redis.backoff import AbstractBackoff

from redis_backoff_c._impl import speedups
from redis_backoff_c._namespace import mirror as _mirror

if speedups is not None:
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
    )

    for _cls in (
        ConstantBackoff,
        NoBackoff,
        ExponentialBackoff,
        FullJitterBackoff,
        EqualJitterBackoff,
        DecorrelatedJitterBackoff,
        ExponentialWithJitterBackoff,
    ):
        getattr(_redis_backoff, _cls.__name__).register(_cls)
    del _cls

    def default_backoff() -> EqualJitterBackoff:
        """The strategy redis-py uses when none is given: EqualJitterBackoff()."""
        return EqualJitterBackoff()

else:
    from redis.backoff import (
        DEFAULT_BASE,
        DEFAULT_CAP,
        ConstantBackoff,
        DecorrelatedJitterBackoff,
        EqualJitterBackoff,
        ExponentialBackoff,
        ExponentialWithJitterBackoff,
        FullJitterBackoff,
        NoBackoff,
        default_backoff,
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

# Every other public name of the installed redis.backoff (redis_backoff_c._namespace).
_mirror(globals(), _redis_backoff)
