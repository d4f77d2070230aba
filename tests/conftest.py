"""Shared fixtures.

`impl` runs a test once against the redis-py reference and once against the
C extension: every behaviour the two share is written once and checked on
both sides.  A test that passes on only one side has found a bug.
"""

import random

import pytest
from support import IMPLEMENTATIONS, patch_sleep

import redis_backoff_c


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


@pytest.fixture
def sleeps(impl, monkeypatch):
    """The delays `impl`'s Retry would have slept, in order; nothing sleeps."""
    return patch_sleep(impl, monkeypatch)


def pytest_report_header(config):
    return f"redis_backoff_c implementation: {redis_backoff_c.IMPLEMENTATION}"
