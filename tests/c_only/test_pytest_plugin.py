"""The pytest plugin: `pytest --redis-backoff-c` (or `redis_backoff_c = true`
in the ini file) runs a suite with patch() applied for the whole session and
reports at the end whether the C types were in use.

Each case runs a small sample suite with pytester in a subprocess (a fresh
interpreter, the installed package and its pytest11 entry point), since the
plugin patches the process it runs in."""

import os

import pytest
from support import conftest_imports

import redis_backoff_c

pytest_plugins = ["pytester"]

# A sample suite: its conftest.py binds redis-py's Retry name when pytest
# imports it (before any test), and says whether redis_backoff_c was
# imported by then; its tests look at what a client gets.  What the conftest
# binds, the tests read from the sample's support module, sample_support.py
# (test modules import helpers from a support module, never from conftest).
SAMPLE_SUPPORT = """
# What the sample's test modules share; conftest.py sets it when pytest
# imports the conftest, before any test module.
BOUND_AT_CONFTEST = None  # redis-py's Retry name, as bound in conftest.py
"""

CONFTEST = """
import sys

IMPORTED_AT_CONFTEST = "redis_backoff_c" in sys.modules
print("conftest: redis_backoff_c imported:", IMPORTED_AT_CONFTEST)

import sample_support
from redis.retry import Retry

sample_support.BOUND_AT_CONFTEST = Retry
"""

SAMPLE = """
import redis
import redis.asyncio
import sample_support


def describe(obj):
    return type(obj).__module__ + "." + type(obj).__qualname__


def test_sync_client():
    retry = redis.Redis().get_retry()
    print("sync:", describe(retry), describe(retry._backoff))


def test_asyncio_client():
    retry = redis.asyncio.Redis().get_retry()
    print("asyncio:", describe(retry))


def test_bound_at_conftest():
    print("bound:", sample_support.BOUND_AT_CONFTEST.__module__)
"""

C_SIDE = [
    "sync: redis_backoff_c.retry.Retry redis_backoff_c.ExponentialWithJitterBackoff",
    "asyncio: redis_backoff_c.asyncio.retry.Retry",
    "bound: redis_backoff_c.retry",
]
REDIS_PY_SIDE = [
    "sync: redis.retry.Retry redis.backoff.ExponentialWithJitterBackoff",
    "asyncio: redis.asyncio.retry.Retry",
    "bound: redis.retry",
]
IN_USE = "redis_backoff_c: the C types were in use for the whole session"

needs_c = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="the C extension is not in use"
)


@pytest.fixture
def sample(pytester, monkeypatch):
    monkeypatch.delenv("REDIS_BACKOFF_C_DISABLE", raising=False)
    pytester.makepyfile(sample_support=SAMPLE_SUPPORT)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_sample=SAMPLE)
    return pytester


def test_the_sample_tests_import_nothing_from_conftest():
    # What they share, they take from sample_support.py, as ours do from
    # tests/support.py.
    assert conftest_imports(SAMPLE, "test_sample.py") == []
    assert "import sample_support" in SAMPLE and "import sample_support" in CONFTEST


def run(pytester, *args):
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=3)
    return result


def test_without_the_option_nothing_is_loaded_or_changed(sample):
    result = run(sample)
    result.stdout.fnmatch_lines(["conftest: redis_backoff_c imported: False"])
    result.stdout.fnmatch_lines([f"*{line}*" for line in REDIS_PY_SIDE])
    result.stdout.no_fnmatch_line("*redis_backoff_c:*")


def test_the_option_is_listed_in_help(pytester):
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*--redis-backoff-c*", "*redis_backoff_c (bool)*"])


@needs_c
def test_the_option_patches_before_the_first_conftest(sample):
    result = run(sample, "--redis-backoff-c")
    result.stdout.fnmatch_lines(["conftest: redis_backoff_c imported: True"])
    result.stdout.fnmatch_lines([f"*{line}*" for line in C_SIDE])
    result.stdout.fnmatch_lines(
        [
            "redis_backoff_c: patch() applied for the session (* locations replaced)",
            "*-- redis_backoff_c --*",
            IN_USE,
            "redis_backoff_c: patch() replaced * locations in redis-py (-v lists them)",
            "redis_backoff_c: classes: *redis.retry.Retry -> redis_backoff_c.retry.Retry*",
        ]
    )


@needs_c
def test_the_ini_option_and_quiet_verbose_reports(sample):
    sample.makeini("[pytest]\nredis_backoff_c = true\n")
    quiet = run(sample, "-q")
    quiet.stdout.fnmatch_lines([f"*{line}*" for line in C_SIDE])
    quiet.stdout.fnmatch_lines([IN_USE])  # the summary is shown under -q too
    verbose = run(sample, "-v")
    verbose.stdout.fnmatch_lines([IN_USE, "redis_backoff_c:   redis.client.Redis.__init__(retry=)"])


@needs_c
def test_an_unpatch_during_the_run_is_reported(sample):
    sample.makepyfile(
        test_zz_unpatch="""
import redis_backoff_c

def test_unpatch():
    redis_backoff_c.unpatch()
"""
    )
    result = sample.runpytest_subprocess("-s", "-p", "no:cacheprovider", "--redis-backoff-c")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "redis_backoff_c: the C types were NOT in use for the whole session: "
            "redis_backoff_c.unpatch() was called during the run"
        ]
    )
    result.stdout.no_fnmatch_line(IN_USE)


def test_without_the_extension_it_says_why(sample, monkeypatch):
    monkeypatch.setenv("REDIS_BACKOFF_C_DISABLE", "1")
    result = run(sample, "--redis-backoff-c", "-W", "ignore::RuntimeWarning")
    result.stdout.fnmatch_lines([f"*{line}*" for line in REDIS_PY_SIDE])
    result.stdout.fnmatch_lines(
        [
            "redis_backoff_c: the C types were NOT in use: patch() could not apply them: "
            "the C extension is not in use: REDIS_BACKOFF_C_DISABLE is set"
        ]
    )


def test_the_entry_point_module_imports_only_pytest():
    """What every pytest run loads: no redis, no redis_backoff_c."""
    import subprocess
    import sys

    code = (
        "import sys, redis_backoff_c_pytest\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'redis_backoff_c')))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "REDIS_BACKOFF_C_DISABLE": "1"},
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "[]", "")
