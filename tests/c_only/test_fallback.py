"""Without the C extension the package still imports and gives redis-py's
own strategies under the same names, and the extras' pure-Python twin
(RetryBudget, RetryStats, and Retry types with deadline=, budget=, stats=),
warns once, and says so.

Each case runs in a fresh interpreter, since the choice is made once, at
the first import."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import redis_backoff_c
from redis_backoff_c import _impl

# The ways the extension can be unavailable, each set up before the first
# import of the package, and the reason the warning must name.
CAUSES = {
    "disabled": ("", "REDIS_BACKOFF_C_DISABLE is set"),
    "import-error": (
        "sys.modules['redis_backoff_c._speedups'] = None",
        "the C extension could not be imported",
    ),
    "not-cpython": (
        "import types\n"
        "sys.implementation = types.SimpleNamespace(\n"
        "    **{**vars(sys.implementation), 'name': 'pypy'})",
        "the C extension needs CPython, this is pypy",
    ),
}

# The drop-in modules and their redis-py counterparts.
MODULES = {
    "redis_backoff_c.backoff": "redis.backoff",
    "redis_backoff_c.retry": "redis.retry",
    "redis_backoff_c.asyncio.retry": "redis.asyncio.retry",
}

PROBE = """
import importlib, json, sys, warnings
{setup}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import redis_backoff_c
    import redis_backoff_c.backoff
    importlib.import_module({module!r})
warned = [
    {{"category": w.category.__name__, "message": str(w.message), "filename": w.filename}}
    for w in caught if "redis_backoff_c" in str(w.message)
]
ours, theirs = importlib.import_module({module!r}), importlib.import_module({reference!r})
public = getattr(ours, "__all__", None) or ["Retry"]
print(json.dumps({{
    "implementation": redis_backoff_c.IMPLEMENTATION,
    "warned": warned,
    "public": public,
    "not_redis_py": [n for n in public if getattr(ours, n) is not getattr(theirs, n)],
    # The package re-exports redis.backoff's names (Retry is the sync one).
    "package_not_redis_py": [
        n for n in public
        if {module!r} == "redis_backoff_c.backoff"
        and getattr(redis_backoff_c, n) is not getattr(theirs, n)
    ],
    "random_source": redis_backoff_c.get_random_source(),
    "delay": redis_backoff_c.ExponentialBackoff(cap=1, base=0.25).compute(2),
}}))
"""


def probe(tmp_path, cause, module="redis_backoff_c.backoff"):
    setup, _ = CAUSES[cause]
    env = dict(os.environ)
    env.pop("REDIS_BACKOFF_C_DISABLE", None)
    if cause == "disabled":
        env["REDIS_BACKOFF_C_DISABLE"] = "1"
    code = PROBE.format(setup=setup, module=module, reference=MODULES[module])
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_fallback_gives_redis_py_backoff_and_warns_once(tmp_path, cause):
    result = probe(tmp_path, cause)
    assert result["implementation"] == "python"
    assert len(result["public"]) == 11
    assert result["not_redis_py"] == []
    assert result["package_not_redis_py"] == []
    assert result["random_source"] == "python"
    assert result["delay"] == 1.0
    [warning] = result["warned"]
    assert warning["category"] == "RuntimeWarning"
    assert CAUSES[cause][1] in warning["message"]
    # It points at the user's import statement, not at the package's insides.
    assert warning["filename"] == "<string>"


@pytest.mark.parametrize("module", ["redis_backoff_c.retry", "redis_backoff_c.asyncio.retry"])
def test_fallback_gives_the_twin_retry(tmp_path, module):
    """Retry is the pure-Python twin there: redis-py's class, subclassed
    with the extras (the rest of the module is redis-py's)."""
    result = probe(tmp_path, "disabled", module)
    assert result["implementation"] == "python"
    assert "Retry" in result["public"]
    assert result["not_redis_py"] == ["Retry"]
    assert len(result["warned"]) == 1


# Issue 25's case: code written for the package, run where it falls back.
EXTRAS_PROBE = """
import asyncio, json, pickle, warnings
warnings.simplefilter("ignore")
import redis.asyncio.retry, redis.exceptions, redis.retry
import redis_backoff_c
from redis_backoff_c import Retry, RetryBudget, RetryStats, NoBackoff
from redis_backoff_c.asyncio.retry import Retry as AsyncRetry

budget, stats = RetryBudget(10, 0.1), RetryStats()
retry = Retry(NoBackoff(), 3, deadline=1.0, budget=budget, stats=stats)
async_retry = AsyncRetry(NoBackoff(), 3, deadline=1.0, budget=budget, stats=stats)
errors = [redis.exceptions.ConnectionError("down")]

def do():
    if errors:
        raise errors.pop()
    return "up"

async def ado():
    return "up"

print(json.dumps({
    "implementation": redis_backoff_c.IMPLEMENTATION,
    "sync": retry.call_with_retry(do, lambda error: None),
    "asyncio": asyncio.run(async_retry.call_with_retry(ado, lambda error: None)),
    "subclasses": [isinstance(retry, redis.retry.Retry),
                   isinstance(async_retry, redis.asyncio.retry.Retry)],
    "names": [repr(type(obj)) for obj in (budget, stats, retry, async_retry)],
    "pickled": repr(pickle.loads(pickle.dumps(retry))),
    "stats": stats.snapshot(),
    "tokens": budget.tokens,
}))
"""


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_fallback_keeps_the_extras(tmp_path, cause):
    setup, _ = CAUSES[cause]
    env = dict(os.environ)
    env.pop("REDIS_BACKOFF_C_DISABLE", None)
    if cause == "disabled":
        env["REDIS_BACKOFF_C_DISABLE"] = "1"
    done = subprocess.run(
        [sys.executable, "-I", "-c", "import sys\n" + setup + "\n" + EXTRAS_PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["implementation"] == "python"
    assert result["sync"] == result["asyncio"] == "up"
    assert result["subclasses"] == [True, True]
    # The twin under the public names of the C types.
    assert result["names"] == [
        "<class 'redis_backoff_c.RetryBudget'>",
        "<class 'redis_backoff_c.RetryStats'>",
        "<class 'redis_backoff_c.retry.Retry'>",
        "<class 'redis_backoff_c.asyncio.retry.Retry'>",
    ]
    assert result["pickled"].endswith(
        "deadline=1.0, budget=RetryBudget(max_tokens=10, token_ratio=0.1, tokens=9.2), "
        "stats=RetryStats(calls=2, attempts=3, successes=2, failed_attempts=1, retries=1, "
        "give_ups_exhausted=0, give_ups_not_retryable=0, give_ups_deadline=0, "
        "give_ups_budget=0, give_ups_may_have_run=0, unhandled_errors=0, aborted=0, "
        "slept_seconds=0.0))"
    )
    assert result["tokens"] == 10 - 1 + 0.1 + 0.1


def test_without_the_cause_there_is_no_fallback(tmp_path):
    if os.environ.get("REDIS_BACKOFF_C_DISABLE", "") not in ("", "0"):
        pytest.skip("REDIS_BACKOFF_C_DISABLE is set in this run")
    env = dict(os.environ, REDIS_BACKOFF_C_DISABLE="0")
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import redis_backoff_c; print(redis_backoff_c.IMPLEMENTATION)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout.strip()) == (0, "c"), done.stderr


# set_random_source in the fallback: the same argument errors as the C
# function, and "fast", which needs the C generator, refused clearly.
SOURCE_ERRORS = [
    (("python",), {"seed": 1}, ValueError),
    (("nonsense",), {}, ValueError),
    ((1,), {}, TypeError),
]


def fallback_set_random_source(*args, **kwargs):
    return _impl._python_set_random_source(*args, **kwargs)


@pytest.mark.parametrize("args, kwargs, error", SOURCE_ERRORS)
@pytest.mark.parametrize(
    "function",
    [redis_backoff_c.set_random_source, fallback_set_random_source],
    ids=["active", "fallback"],
)
def test_set_random_source_argument_errors(function, args, kwargs, error):
    with pytest.raises(error, match="set_random_source"):
        function(*args, **kwargs)


def test_fallback_refuses_the_fast_source():
    with pytest.raises(RuntimeError, match="'fast' random source needs the C extension"):
        _impl._python_set_random_source("fast", seed=3)
    _impl._python_set_random_source("python")
    assert _impl._python_get_random_source() == "python"


def _checkout_copy(tmp_path):
    """A source checkout's package: the installed package's Python files,
    without the compiled extension, in a directory of its own."""
    installed = os.path.dirname(redis_backoff_c.__file__)
    checkout = tmp_path / "checkout"
    shutil.copytree(
        installed,
        checkout / "redis_backoff_c",
        ignore=shutil.ignore_patterns("_speedups*", "__pycache__"),
    )
    return installed, checkout


def test_a_checkout_that_shadows_the_install_says_so(tmp_path):
    # `python -m ...` in a source checkout: the working directory comes
    # first on sys.path, and its package has no compiled extension.
    if _impl.IMPLEMENTATION != "c":
        pytest.skip("this run has no installed extension to shadow")
    installed, checkout = _checkout_copy(tmp_path)
    env = dict(os.environ)
    env.pop("REDIS_BACKOFF_C_DISABLE", None)
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import redis_backoff_c\n"
        "print(redis_backoff_c.__file__)\n"
        "print(redis_backoff_c.IMPLEMENTATION)\n"
        "print([str(w.message) for w in caught if 'redis_backoff_c' in str(w.message)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    imported, implementation, warned = done.stdout.splitlines()
    assert imported.startswith(str(checkout))
    assert implementation == "python"
    assert "shadows the installed one in " + installed in warned
    assert "python -I" in warned


def test_the_benchmark_refuses_to_compare_redis_py_with_itself(tmp_path):
    env = dict(os.environ, REDIS_BACKOFF_C_DISABLE="1")
    done = subprocess.run(
        [sys.executable, "-I", "-m", "redis_backoff_c.bench", "--tiny"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "the extension is not in use: REDIS_BACKOFF_C_DISABLE is set" in done.stderr
    assert done.stdout == ""
