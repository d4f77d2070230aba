"""Every public name of redis-py's module, importable from ours.

``redis_backoff_c.backoff``, ``redis_backoff_c.retry`` and
``redis_backoff_c.asyncio.retry`` stand in for ``redis.backoff``,
``redis.retry`` and ``redis.asyncio.retry``: code that imports any public
name from redis-py's module must find it in ours.  Ours define the names
they reimplement; every other public name of the installed release (its
own classes and functions, the exceptions and constants it exposes, such
as ``AbstractRetry`` or redis-py 8.2's ``is_retryable_connect_error``) is
taken from redis-py's module as it is, by ``mirror``, so a name a later
release adds is there too.  Modules, ``typing`` constructs and type
variables are imports of redis-py's, not its API, and are left out.
"""

from __future__ import annotations

import types
import typing
from collections.abc import MutableMapping
from typing import Any


def public_names(module: types.ModuleType) -> list[str]:
    """The public API of one of redis-py's modules, by the rule above."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, (types.ModuleType, typing.TypeVar)):
            continue
        if getattr(value, "__module__", None) in ("typing", "collections.abc", "abc"):
            continue
        if getattr(typing, name, None) is value:  # TYPE_CHECKING
            continue
        names.append(name)
    return sorted(names)


def mirror(namespace: MutableMapping[str, Any], module: types.ModuleType) -> list[str]:
    """Set in ``namespace`` (a module's globals) each public name of
    ``module`` that it does not define; returns the names set."""
    added = []
    for name in public_names(module):
        if name not in namespace:
            namespace[name] = getattr(module, name)
            added.append(name)
    return added
