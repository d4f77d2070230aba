"""Decides, once, which implementation the package gives.

``speedups`` is the C extension module, or ``None`` when it cannot be used:
``REDIS_BACKOFF_C_DISABLE`` is set (to anything but "" or "0"), the
interpreter is not CPython, or importing ``_speedups`` raised ImportError.
Then the drop-in modules give redis-py's own strategies under the same
names, and the extras' pure-Python twin (``redis_backoff_c._extras_py``:
``RetryBudget``, ``RetryStats``, and the sync and asyncio ``Retry``, subclasses
of redis-py's with ``deadline=``, ``budget=`` and ``stats=``); one
RuntimeWarning names the reason, and ``IMPLEMENTATION`` is "python".

Every drop-in module follows the same pattern (``redis_backoff_c.retry``)::

    import redis.retry
    from redis_backoff_c._impl import speedups

    if speedups is not None:
        Retry = speedups.Retry
        redis.retry.Retry.register(Retry)
    else:
        from redis_backoff_c._extras_py import Retry

and the package re-exports it with one line in ``__init__.py``.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import warnings
from types import ModuleType
from typing import Literal

__all__ = [
    "FALLBACK_REASON",
    "IMPLEMENTATION",
    "RetryBudget",
    "RetryEvent",
    "RetryStats",
    "get_random_source",
    "set_random_source",
    "speedups",
]


def _has_extension_file(package_dir: str) -> bool:
    return any(
        os.path.exists(os.path.join(package_dir, "_speedups" + suffix))
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _shadowed_install(package_dir: str) -> str | None:
    """Another redis_backoff_c further down sys.path that has the extension.

    The usual case: ``python -m ...`` run in a source checkout puts the
    working directory first on sys.path, so the checkout's package, which has
    no compiled extension, hides the installed one."""
    for entry in sys.path:
        candidate = os.path.join(os.path.abspath(entry or os.curdir), "redis_backoff_c")
        if os.path.normcase(candidate) != os.path.normcase(package_dir) and (
            _has_extension_file(candidate)
        ):
            return candidate
    return None


def _missing_extension_reason() -> str:
    package_dir = os.path.dirname(os.path.abspath(__file__))
    installed = _shadowed_install(package_dir)
    if installed is not None:
        return (
            f"the redis_backoff_c imported from {package_dir} has no C extension and "
            f"shadows the installed one in {installed} (the working directory comes "
            "first on sys.path: run from another directory, or with python -I)"
        )
    # Installed without it: setup.py falls back to the pure-Python package
    # when the extension cannot be built.
    return "the C extension is not installed (its build failed or was skipped)"


def _load() -> tuple[ModuleType | None, str | None]:
    if os.environ.get("REDIS_BACKOFF_C_DISABLE", "") not in ("", "0"):
        return None, "REDIS_BACKOFF_C_DISABLE is set"
    if sys.implementation.name != "cpython":
        return None, f"the C extension needs CPython, this is {sys.implementation.name}"
    try:
        from redis_backoff_c import _speedups
    except ImportError as error:
        if not _has_extension_file(os.path.dirname(os.path.abspath(__file__))):
            return None, _missing_extension_reason()
        return None, f"the C extension could not be imported: {error}"
    from redis_backoff_c import _rules

    _speedups._set_release_rules(_rules.LDEXP_EXPONENTIAL, _rules.RETRY_CHECKER)
    _speedups._set_interpreter_rules(
        _rules.STOP_CHAINS_RESULT, _rules.STOP_CHAINS_NONE, _rules.await_error
    )
    from redis_backoff_c import writes

    _speedups._set_writes_judge(writes._judge)
    from redis_backoff_c import hooks

    _speedups._set_hook_reporter(hooks._hook_failed)
    from redis_backoff_c import _call_deadline

    _speedups._set_deadline_hook(_call_deadline.saw_deadline)
    from redis_backoff_c import _substate

    # The types a program may subclass (the strategies and both Retry types).
    _substate.install(
        [t for t in vars(_speedups).values() if isinstance(t, type) and t.__flags__ & _BASETYPE]
    )
    return _speedups, None


_BASETYPE = 1 << 10  # Py_TPFLAGS_BASETYPE


speedups, FALLBACK_REASON = _load()

#: "c" when the extension is in use, "python" in the fallback.
IMPLEMENTATION: Literal["c", "python"] = "c" if speedups is not None else "python"

if speedups is None:
    warnings.warn(
        "redis_backoff_c is using its pure-Python fallback (redis-py's own strategies, "
        f"the extras' Python twin): {FALLBACK_REASON}",
        RuntimeWarning,
        stacklevel=3,  # the import statement that first imported the package
    )


def _python_set_random_source(name: str, seed: int | None = None) -> None:
    """The fallback's set_random_source: only "python", the random module."""
    if not isinstance(name, str):
        raise TypeError(
            f"set_random_source() argument 'name' must be str, not {type(name).__name__}"
        )
    if name == "fast":
        raise RuntimeError(
            "the 'fast' random source needs the C extension, which is not in use "
            f"({FALLBACK_REASON})"
        )
    if name != "python":
        raise ValueError(
            f"set_random_source() argument 'name' must be 'python' or 'fast', not {name!r}"
        )
    if seed is not None:
        raise ValueError(
            "set_random_source('python') takes no seed: seed the random module with random.seed()"
        )


def _python_get_random_source() -> str:
    """The fallback's get_random_source: always "python"."""
    return "python"


if speedups is not None:
    from redis_backoff_c._speedups import get_random_source, set_random_source
else:
    set_random_source = _python_set_random_source
    get_random_source = _python_get_random_source


if speedups is not None:
    from redis_backoff_c._speedups import RetryBudget, RetryEvent, RetryStats
else:
    # The extras without the extension: the pure-Python twin, under the
    # public names the C types have (so that pickles travel both ways).
    from redis_backoff_c import _extras_py
    from redis_backoff_c._extras_py import (  # type: ignore[assignment]
        RetryBudget,
        RetryEvent,
        RetryStats,
    )

    for _twin, _module, _name in (
        (_extras_py.RetryBudget, "redis_backoff_c", "RetryBudget"),
        (_extras_py.RetryStats, "redis_backoff_c", "RetryStats"),
        (_extras_py.Retry, "redis_backoff_c.retry", "Retry"),
        (_extras_py.AsyncRetry, "redis_backoff_c.asyncio.retry", "Retry"),
    ):
        _twin.__module__ = _module
        _twin.__qualname__ = _name
    del _twin, _module, _name
