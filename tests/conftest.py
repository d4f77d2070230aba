"""Shared fixtures.

`impl` runs a test once against the redis-py reference and once against the
C extension: every behaviour the two share is written once and checked on
both sides.  A test that passes on only one side has found a bug.
"""

import importlib
import random
from types import SimpleNamespace

import pytest

import redis_backoff_c


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
    modules = {}
    for key, name in names.items():
        try:
            modules[key] = importlib.import_module(name)
        except ImportError:
            # A module not written yet: tests that need it fail loudly
            # through the attribute access below, never skip.
            modules[key] = None
    return SimpleNamespace(name=side, **modules)


IMPLEMENTATIONS = {side: _load(side) for side in ("redis-py", "c")}

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


@pytest.fixture(params=sorted(IMPLEMENTATIONS), ids=str)
def impl(request):
    """The implementation under test: .backoff, .retry, .asyncio_retry."""
    return IMPLEMENTATIONS[request.param]


@pytest.fixture
def reference():
    """redis-py itself, to compare the C side against."""
    return IMPLEMENTATIONS["redis-py"]


@pytest.fixture
def c_impl():
    """The C extension alone, for its deliberate improvements."""
    return IMPLEMENTATIONS["c"]


@pytest.fixture(autouse=True)
def _python_random_source():
    """Every test starts on the default random source, with random's
    global state restored afterwards."""
    state = random.getstate()
    redis_backoff_c.set_random_source("python")
    yield
    redis_backoff_c.set_random_source("python")
    random.setstate(state)


def patch_sleep(impl, monkeypatch, record=None):
    """Replace the sleep that `impl`'s sync Retry sleeps through
    (redis.retry.sleep, redis_backoff_c.retry.sleep) by one that records
    its delay in `record` (a list, returned) instead of sleeping."""
    record = [] if record is None else record
    monkeypatch.setattr(impl.retry, "sleep", lambda delay: record.append(("sleep", delay)))
    return record


@pytest.fixture
def sleeps(impl, monkeypatch):
    """The delays `impl`'s Retry would have slept, in order; nothing sleeps."""
    return patch_sleep(impl, monkeypatch)


def pytest_report_header(config):
    return f"redis_backoff_c implementation: {redis_backoff_c.IMPLEMENTATION}"
