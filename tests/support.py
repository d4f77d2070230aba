"""Helpers shared by the test modules: the two implementations, the
strategy name lists, and a sleep patch.  Test modules import them from here
(`from support import ...`); conftest.py holds only fixtures and hooks."""

import importlib
from types import SimpleNamespace

import redis.backoff
import redis.retry

from redis_backoff_c import _rules

# The installed redis-py's rules, as the package decided them
# (redis_backoff_c._rules).  Without the checker (redis-py 8.0, 8.1) the
# redis-py side has none to compare ours with: tests of the checker then
# check the C side, and that redis-py indeed has none (side_without_checker).
REDIS_PY_HAS_CHECKER = _rules.RETRY_CHECKER


def _load(side):
    if side == "redis-py":
        names = {
            "backoff": "redis.backoff",
            "retry": "redis.retry",
            "asyncio_retry": "redis.asyncio.retry",
        }
    else:
        names = {
            "backoff": "redis_backoff_c.backoff",
            "retry": "redis_backoff_c.retry",
            "asyncio_retry": "redis_backoff_c.asyncio.retry",
        }
    modules = {key: importlib.import_module(name) for key, name in names.items()}
    return SimpleNamespace(name=side, **modules)


IMPLEMENTATIONS = {side: _load(side) for side in ("redis-py", "c")}


def _load_extras(side):
    """The extras of one side: the C types ("c") or their pure-Python twin
    ("py", redis_backoff_c._extras_py, what the package gives without the
    extension).  None for "c" when the extension is not in use."""
    if side == "py":
        from redis_backoff_c import _extras_py as module

        retry, async_retry = module.Retry, module.AsyncRetry
    else:
        import redis_backoff_c as module

        if module.IMPLEMENTATION != "c":
            return None
        retry = importlib.import_module("redis_backoff_c.retry").Retry
        async_retry = importlib.import_module("redis_backoff_c.asyncio.retry").Retry
    return SimpleNamespace(
        name=side,
        RetryBudget=module.RetryBudget,
        RetryStats=module.RetryStats,
        Retry=retry,
        AsyncRetry=async_retry,
    )


# The extras (deadline, budget, stats; redis-py has none) on both sides:
# the C types and the pure-Python twin, which is their executable
# specification.  The `extras` fixture runs a test over both.
EXTRAS = {side: _load_extras(side) for side in ("c", "py")}

# The seven strategies by name, in redis.backoff's order, grouped by formula:
# the jittered ones draw from a random source, the capped ones take
# (cap, base), all take compute(failures).
JITTERED = [
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
]
CAPPED = ["ExponentialBackoff", *JITTERED]
ALL = ["ConstantBackoff", "NoBackoff", *CAPPED]


def patch_sleep(impl, monkeypatch, record=None):
    """Replace the sleep that `impl`'s sync Retry sleeps through
    (redis.retry.sleep, redis_backoff_c.retry.sleep) by one that records
    its delay in `record` (a list, returned) instead of sleeping."""
    record = [] if record is None else record
    monkeypatch.setattr(impl.retry, "sleep", lambda delay: record.append(("sleep", delay)))
    return record


# redis-py 8.2's math.ldexp exponential, or 8.0/8.1's base * 2**failures
# in Python's numbers (redis_backoff_c._rules).
LDEXP_RULE = _rules.LDEXP_EXPONENTIAL


def exponential(x, failures):
    """base * 2**failures as the installed redis-py computes it."""
    if LDEXP_RULE:
        return redis.backoff._exponential(x, failures)
    return x * 2**failures


def side_without_checker(impl):
    """True for a redis-py that has no Retry checker (before 8.2), after
    checking that it indeed takes none: a test of the checker then has
    nothing more to check on that side, whose redis-py has no checker to
    compare with."""
    if impl.name != "redis-py" or REDIS_PY_HAS_CHECKER:
        return False
    backoff = impl.backoff.NoBackoff()
    for retry_module in (impl.retry, impl.asyncio_retry):
        try:
            retry_module.Retry(backoff, 1, is_retryable=lambda error: True)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{retry_module.__name__}.Retry took is_retryable")
        assert not hasattr(retry_module.Retry(backoff, 1), "is_retryable")
    return True
