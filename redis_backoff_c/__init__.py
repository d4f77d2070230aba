"""redis-py's backoff strategies and Retry, rebuilt in C.

Change one import::

    from redis_backoff_c import Retry, ExponentialBackoff

or call :func:`redis_backoff_c.patch` once at start-up.

Without the C extension (another interpreter, a failed build, or
``REDIS_BACKOFF_C_DISABLE=1``) the same names are redis-py's own classes,
one RuntimeWarning says why, and ``IMPLEMENTATION`` is "python".
"""

from redis_backoff_c._impl import (
    IMPLEMENTATION,
    RetryBudget,
    RetryEvent,
    RetryStats,
    get_random_source,
    set_random_source,
)
from redis_backoff_c._patch import PatchReport, is_patched, patch, patched, unpatch
from redis_backoff_c.backoff import (
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
from redis_backoff_c.retry import Retry
from redis_backoff_c.writes import may_have_run

__version__ = "0.1.0"

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
    "PatchReport",
    "Retry",
    "RetryBudget",
    "RetryEvent",
    "RetryStats",
    "__version__",
    "default_backoff",
    "get_random_source",
    "is_patched",
    "may_have_run",
    "patch",
    "patched",
    "set_random_source",
    "unpatch",
]
