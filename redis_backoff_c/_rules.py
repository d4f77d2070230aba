"""The rules of the installed redis-py release, decided once, here.

redis-py 8.2 changed two things the C types must follow, and the package
follows whichever 8.x is installed.  Each rule is decided from the feature
that carries it, never from the version string, once, when this module is
imported; ``redis_backoff_c._impl`` hands both to the C extension right
after importing it (``_speedups._set_release_rules``), and the tests read
them from here.

``LDEXP_EXPONENTIAL``
    8.2 computes the exponential strategies' ``base * 2**failures`` as
    ``redis.backoff._exponential``: ``math.ldexp``, ``inf`` past the largest
    float, a ``TypeError`` for a float count.  8.0 and 8.1 compute it with
    Python's numbers (an ``int`` or ``Fraction`` stays one).

``RETRY_CHECKER``
    8.2 gave ``Retry`` its own ``is_retryable`` checker and, with it, made
    ``call_with_retry`` test its ``is_retryable`` argument with ``is not
    None``; 8.0 and 8.1 have no checker and test the argument's truth.  The
    C types accept and apply their own checker whatever the release.
"""

from __future__ import annotations

import redis.backoff
import redis.retry

__all__ = ["LDEXP_EXPONENTIAL", "RETRY_CHECKER"]

LDEXP_EXPONENTIAL: bool = hasattr(redis.backoff, "_exponential")
RETRY_CHECKER: bool = hasattr(redis.retry.AbstractRetry, "is_retryable")
