"""Both designs of the asyncio call_with_retry, on this interpreter.

The package picks one design per CPython at import (see
redis_backoff_c.asyncio.retry); the rest of the suite tests that one.  Here
the other one is forced with REDIS_BACKOFF_C_ASYNC_DESIGN in a fresh
interpreter, and every asyncio test runs against it too, so that whichever
design a version picks has passed the whole asyncio contract everywhere.
"""

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import redis_backoff_c.asyncio.retry as async_retry

TESTS = Path(__file__).resolve().parents[1]
ASYNC_TESTS = [
    "contract/test_async_retry.py",
    "contract/test_async_retry_protocol.py",
    # What both flavors share, run over flavor (its sync tests run too).
    "contract/test_call_with_retry.py",
    "contract/test_call_with_retry_differential.py",
    "contract/test_retry_object.py",
    "contract/test_async_retry_introspection.py",
    "contract/test_reentrancy.py",
    "contract/test_chaos.py",
    "c_only/test_hardening_async.py",
    "c_only/test_async_method.py",
    "c_only/test_leaks_async.py",
    "contract/test_extras.py",
    "integration/test_asyncio_redis.py",
]


def design_in_subprocess(value):
    env = {**os.environ, "REDIS_BACKOFF_C_ASYNC_DESIGN": value}
    return subprocess.run(
        [sys.executable, "-I", "-c", "import redis_backoff_c.asyncio.retry as m; print(m.DESIGN)"],
        env=env,
        capture_output=True,
        text=True,
    )


def test_default_design_follows_the_version():
    expected = "coroutine" if (3, 12) <= sys.version_info < (3, 15) else "awaitable"
    if os.environ.get("REDIS_BACKOFF_C_ASYNC_DESIGN"):
        expected = os.environ["REDIS_BACKOFF_C_ASYNC_DESIGN"]
    assert async_retry.DESIGN == expected
    # An async def to inspect on both designs (redis-py 8.2's asyncio
    # clients keep a retry only then): the awaitable one's C method says so
    # (csrc/async_method.c).
    method = vars(async_retry.Retry)["call_with_retry"]
    assert inspect.isfunction(method) == (expected == "coroutine")
    assert inspect.iscoroutinefunction(async_retry.Retry.call_with_retry)


@pytest.mark.parametrize("value", ["awaitable", "coroutine"])
def test_design_can_be_forced(value):
    result = design_in_subprocess(value)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == value


def test_unknown_design_is_refused():
    result = design_in_subprocess("fast")
    assert result.returncode != 0
    assert "REDIS_BACKOFF_C_ASYNC_DESIGN must be 'awaitable' or 'coroutine'" in result.stderr


@pytest.mark.parametrize("design", ["awaitable", "coroutine"])
def test_every_asyncio_test_passes_with_each_design(design):
    if design == async_retry.DESIGN:
        pytest.skip(f"{design} is this process's design: the suite itself runs these tests")
    env = {**os.environ, "REDIS_BACKOFF_C_ASYNC_DESIGN": design}
    result = subprocess.run(
        [sys.executable, "-I", "-m", "pytest", "-p", "no:cacheprovider", "-x"]
        + [str(TESTS / name) for name in ASYNC_TESTS],
        env=env,
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"asyncio design: {design}" in result.stdout
    assert " passed" in result.stdout
