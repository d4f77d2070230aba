"""Shared fixtures.

`impl` runs a test once against the redis-py reference and once against the
C extension: every behaviour the two share is written once and checked on
both sides.  A test that passes on only one side has found a bug.  `extras`
does the same for what redis-py lacks (deadline, budget, stats): the C
types and their pure-Python twin.

`flavor` runs a test once with the sync Retry and once with the asyncio
one (support.Flavor: the Retry class of `impl` in that flavor, and a way to
run call_with_retry to its end): what both Retry types share is written
once and runs over flavor x implementation.
"""

import os
import random

import pytest
import redis
from support import EXTRAS, FLAVORS, IMPLEMENTATIONS, patch_sleep

import redis_backoff_c


@pytest.fixture(params=sorted(IMPLEMENTATIONS), ids=str)
def impl(request):
    """The implementation under test: .backoff, .retry, .asyncio_retry."""
    return IMPLEMENTATIONS[request.param]


@pytest.fixture(params=list(FLAVORS), ids=str)
def flavor(request):
    """The flavor of Retry under test (sync, asyncio): .Retry(impl),
    .call(retry, do, fail, ...), .patch_sleep(impl, monkeypatch)."""
    return FLAVORS[request.param]


@pytest.fixture
def reference():
    """redis-py itself, to compare the C side against."""
    return IMPLEMENTATIONS["redis-py"]


@pytest.fixture
def c_impl():
    """The C extension alone, for its deliberate improvements."""
    return IMPLEMENTATIONS["c"]


@pytest.fixture(params=sorted(EXTRAS), ids=str)
def extras(request):
    """The extras under test, "c" (the C types) or "py" (their pure-Python
    twin): .RetryBudget, .RetryStats, .Retry, .AsyncRetry."""
    side = EXTRAS[request.param]
    if side is None:
        pytest.skip(f"the C extension is not in use: {redis_backoff_c._impl.FALLBACK_REASON}")
    return side


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
def writes_table(monkeypatch):
    """redis_backoff_c.writes, its command table restored after the test
    (add_read_only(), add_safe_to_repeat() and add_last_writer_wins() change
    it for the whole process)."""
    from redis_backoff_c import writes

    for name in ("_read_only", "_safe", "_containers"):
        monkeypatch.setattr(writes, name, type(getattr(writes, name))(getattr(writes, name)))
    for name in ("READ_ONLY", "SAFE_TO_REPEAT"):
        monkeypatch.setattr(writes, name, getattr(writes, name))
    return writes


@pytest.fixture
def sleeps(impl, monkeypatch):
    """The delays `impl`'s Retry would have slept, in order; nothing sleeps."""
    return patch_sleep(impl, monkeypatch)


# REDIS_BACKOFF_C_C_SIDE_ONLY=1 leaves out the tests that `impl` runs on
# redis-py's side and `extras` on the pure-Python twin's (reported as
# deselected): CI sets it where the suite already ran on both sides on the
# same CPython and redis-py, and only our C code is the question (ASan and
# UBSan, the debug build's refleak runs, the installed wheel; .ci/run).
C_SIDE_ONLY = os.environ.get("REDIS_BACKOFF_C_C_SIDE_ONLY", "0") != "0"


def pytest_report_header(config):
    return (
        f"redis_backoff_c implementation: {redis_backoff_c.IMPLEMENTATION}, "
        f"asyncio design: {async_design()}, redis-py {redis.__version__}"
        + (", C side only (REDIS_BACKOFF_C_C_SIDE_ONLY)" if C_SIDE_ONLY else "")
    )


def async_design():
    """Which design serves the asyncio call_with_retry in this process."""
    import redis_backoff_c.asyncio.retry

    return redis_backoff_c.asyncio.retry.DESIGN


def pytest_collection_modifyitems(config, items):
    """A test marked async_design(name) checks what only that design has
    (the C awaitable's own protocol object, or the coroutine's checks when
    awaited).  Where the other design serves, it does not apply here; the
    subprocess runs of tests/c_only/test_async_designs.py cover it.
    Under REDIS_BACKOFF_C_C_SIDE_ONLY the other sides are deselected."""
    if C_SIDE_ONLY:
        kept, other_sides = [], []
        for item in items:
            params = item.callspec.params if hasattr(item, "callspec") else {}
            if params.get("impl") == "redis-py" or params.get("extras") == "py":
                other_sides.append(item)
            else:
                kept.append(item)
        if other_sides:
            config.hook.pytest_deselected(items=other_sides)
            items[:] = kept
    design = async_design()
    for item in items:
        marker = item.get_closest_marker("async_design")
        if marker is not None and marker.args[0] != design:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{marker.args[0]} design only; this process uses {design} "
                    "(run by tests/c_only/test_async_designs.py)"
                )
            )
