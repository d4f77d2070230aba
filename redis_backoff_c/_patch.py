"""``patch()`` and ``unpatch()``: the C types inside a running redis-py.

``redis_backoff_c.patch()`` makes every redis-py client in the process use the
C strategies and Retry classes, with no other change to the program::

    import redis, redis_backoff_c

    redis_backoff_c.patch()
    r = redis.Redis()            # r.get_retry() is a C Retry, same parameters

``unpatch()`` puts every object it replaced back (the very same objects), and
``patched()`` is the context-manager form, for tests.

What patch() replaces
---------------------

Each redis-py original is mapped to its replacement in the drop-in modules:
the seven strategies of ``redis.backoff`` to ``redis_backoff_c.backoff``,
``redis.retry.Retry`` to ``redis_backoff_c.retry.Retry`` and
``redis.asyncio.retry.Retry`` to ``redis_backoff_c.asyncio.retry.Retry``. An
original whose drop-in module cannot be imported, or gives back redis-py's own
class, has no replacement: it stays, and the report lists it in ``missing``.

In every module named ``redis`` or ``redis.*`` in ``sys.modules``, patch()
replaces:

- module globals bound to an original class (``redis.client.Retry``, the
  names in ``redis.backoff`` themselves, ...), and class attributes bound to one;
- the objects redis-py built at import time, where they are held: module
  globals, class attributes, the defaults of functions and methods
  (``__defaults__`` and ``__kwdefaults__``, through ``functools.wraps``
  wrappers, static and class methods and properties), and the defaults of
  dataclass fields. Each is replaced by an equal C object (checked with ``==``)
  built with the same parameters; one object held in several places becomes
  one C object held in the same places. A redis-py Retry that has no C
  replacement (none today; a future class without one) keeps its identity and gets
  a C strategy as its ``_backoff``.

So ``redis.Redis()`` with no ``retry`` argument runs a C Retry holding a C
``ExponentialWithJitterBackoff`` with redis-py's default parameters, and every
Retry that redis-py builds at run time (``Retry(NoBackoff(), 1)`` in
``Connection``) is built from the C classes.

redis-py 8.2's asyncio clients, cluster, connections and pools pass the
retry they are given through ``redis.asyncio.retry._to_async_retry``. It keeps
an asyncio Retry, the C one included (its ``call_with_retry`` is a coroutine
function to ``inspect``), so a patched asyncio client runs the C Retry it was
given, extras and all. It converts a synchronous Retry, with redis-py's
``UserWarning``, into the ``Retry`` its module names: while patched, a C
asyncio Retry with the same backoff, retries, errors and ``is_retryable``,
and, since redis-py copies only those four, patch() puts in every name bound
to ``_to_async_retry`` a wrapper that also gives the converted Retry the
extras of the C Retry it came from (the same deadline, budget and stats
objects); unpatch() puts redis-py's function back.

redis-py 8.2's ``RedisCluster`` (sync and asyncio) retries a plain command
in a loop of its own; patch() wraps its ``execute_command`` and
``AbstractRedisCluster._retry_backoff_delay`` so that the extras of a C
Retry apply there too, and its ``__init__`` so that a cluster built without
``retry=`` gets patch()'s extras (see ``redis_backoff_c._cluster``); unpatch()
puts redis-py's functions back.  redis-py 8.0/8.1's loop is left alone.

redis-py's own ``__eq__`` methods find their class through their module's
global (``isinstance(other, Retry)``), which now names the C class. So that
two redis-py objects built before patch() still compare equal, patch() gives
each original class that defines such an ``__eq__`` a copy of it that sees the
original class under that name; unpatch() puts the original function back.

The extras: ``patch(deadline=, budget=, stats=, writes=, on_retry=, on_give_up=)``
-----------------------------------------------------------------------------------

``patch(budget=RetryBudget(10, 0.1), stats=RetryStats())`` gives the C Retry
objects that patch() installs in place of redis-py's defaults (the
``retry=`` default of ``redis.Redis.__init__`` and of
``redis.asyncio.Redis.__init__``, and every other Retry default found as
above) these extras, the same objects in all of them: since redis-py
deep-copies a client's Retry into each connection, and a deep copy of a C
Retry keeps its budget and stats, every client built with the default Retry
shares one budget and one set of counters. ``deadline`` (seconds) bounds
each call_with_retry of those Retries, and ``writes="at-most-once"`` makes
them retry no attempt that may have run on the server
(:mod:`redis_backoff_c.writes`); ``on_retry`` and ``on_give_up`` are called
for their retries and give-ups (:mod:`redis_backoff_c.hooks`). A Retry the program passes itself
keeps its own extras; so do the default Retries of a redis module imported
after patch() (``redis.http``, ``redis.multidb``: built from the C class,
without extras). The Retries redis-py builds at run time
(``Retry(NoBackoff(), 1)`` for a connection given ``retry=None``) have none.

A repeated patch() that is given extras sets them (all six, None unsetting
one) on every default Retry it installed; one given none leaves them as they
are. unpatch() puts redis-py's own objects back, which have no extras.

Modules imported later
----------------------

Importing ``redis_backoff_c`` imports ``redis``, which imports most of
redis-py (client, connection, cluster, sentinel, the asyncio twins). The rest
(``redis.http``, ``redis.multidb``, a module of a future redis-py) may be
imported after patch(). patch() installs an import hook (a finder at the front
of ``sys.meta_path``) that treats each ``redis.*`` module when it has finished
executing, exactly as patch() treats the modules already imported. Such a
module mostly binds the C classes by itself already, since it imports them from
patched modules; unpatch() gives it redis-py's classes and equal redis-py
objects. patch() never imports a redis-py module that the program did not.

Idempotent, thread-safe, reported
---------------------------------

patch() and unpatch() take one lock (and the import hook takes it too). A
second patch() replaces nothing new and says so. patch() returns a
:class:`PatchReport`: which originals are mapped to which replacement, which
have none, and every location it replaced. unpatch() returns the locations it
restored; it restores a location only if it still holds what patch() put there
(a value the program set since is left alone).

Without the C extension
-----------------------

In the fallback (see ``redis_backoff_c._impl``) the drop-in modules give
redis-py's own classes, so there is nothing to put in: patch() is a no-op that
returns a report with ``implementation == "python"``, ``active == False`` and
the reason in ``missing``; ``is_patched()`` stays False. A program that calls
patch() at start-up keeps running, on redis-py's classes, as the package's
import already warned.

Limits
------

- A name bound before patch() outside redis-py keeps its object:
  ``from redis.retry import Retry`` or ``from redis import default_backoff``
  in the program's own modules, a class attribute, a default argument, a
  Retry stored in the program's own objects. Only ``redis`` and ``redis.*``
  modules are changed.
- Objects redis-py built before patch() and that are not import-time
  defaults keep their type: a client or connection created before patch()
  keeps its redis-py Retry (it keeps working; ``set_retry`` changes it). A
  subclass of a redis-py class (redis-py's own or the program's) is never
  replaced, nor an instance of one.
- Defaults held elsewhere than listed above are not found: a closure cell, a
  ``functools.partial``, a container (list, dict) in a global.
- After patch(), ``redis.retry.Retry`` is the C class: code that subclasses
  it then subclasses the C type; ``isinstance(old, redis.retry.Retry)`` is
  False for a redis-py Retry built before patch() (the C objects remain
  instances of the redis-py classes, as virtual subclasses, so the other
  direction holds).
- pickle finds a class by its module and name. While patched, a redis-py
  object built before patch() cannot be pickled (``PicklingError``: its class
  is no longer ``redis.backoff.ExponentialBackoff``); data pickled from
  redis-py objects unpickles to the C objects. After unpatch() both work as
  before.
- unpatch() turns the C objects that redis-py built as defaults *while*
  patched (in a module imported after patch()) into equal redis-py objects:
  there was no earlier object to restore. It does so for any C strategy or
  Retry it finds in those places of a ``redis.*`` module, and for names there
  bound to a C class, whoever put them there.
- The drop-in modules are imported by patch() (``redis_backoff_c.retry``,
  ``redis_backoff_c.asyncio.retry``) when their redis-py module is imported;
  importing ``redis_backoff_c`` itself imports ``redis`` (hence client,
  connection, cluster, sentinel and ``redis.asyncio``), so "patch() before
  import redis" means patch() before the modules ``import redis`` leaves out.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis_backoff_c._speedups import RetryBudget, RetryEvent, RetryStats

__all__ = ["PatchReport", "is_patched", "patch", "patched", "unpatch"]

#: The redis-py modules that define the originals, with the names patched in
#: each and the drop-in module that holds their replacements.
_SOURCES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "redis.backoff",
        "redis_backoff_c.backoff",
        (
            "ConstantBackoff",
            "NoBackoff",
            "ExponentialBackoff",
            "FullJitterBackoff",
            "EqualJitterBackoff",
            "DecorrelatedJitterBackoff",
            "ExponentialWithJitterBackoff",
        ),
    ),
    ("redis.retry", "redis_backoff_c.retry", ("Retry",)),
    ("redis.asyncio.retry", "redis_backoff_c.asyncio.retry", ("Retry",)),
)

_RETRY_NAMES = frozenset({"redis.retry.Retry", "redis.asyncio.retry.Retry"})


@dataclasses.dataclass(frozen=True)
class PatchReport:
    """What one call of :func:`patch` did, and the state it left."""

    #: "c", or "python" in the fallback (then patch() did nothing).
    implementation: str
    #: True when the C types are patched in after this call.
    active: bool
    #: Each redis-py original (qualified name) mapped to its replacement.
    classes: Mapping[str, str]
    #: The originals left in place, each with the reason.
    missing: Mapping[str, str]
    #: The locations this call replaced ("redis.client.Retry",
    #: "redis.client.Redis.__init__(retry=)", ...). Empty on a repeated call.
    replaced: tuple[str, ...]
    #: False on the call that patched, True on a repeated one.
    already_patched: bool

    @property
    def count(self) -> int:
        """How many locations this call replaced."""
        return len(self.replaced)


@dataclasses.dataclass
class _Record:
    """One replacement: ``setattr(target, key, new)`` where it held ``old``."""

    target: object
    key: str
    old: object
    new: object
    label: str


class _State:
    def __init__(self) -> None:
        self.active = False
        #: original class -> replacement, and the reverse, for the sources seen.
        self.forward: dict[type, type] = {}
        self.backward: dict[type, type] = {}
        #: qualified name of each original -> the original class.
        self.originals: dict[str, type] = {}
        self.missing: dict[str, str] = {}
        self.records: list[_Record] = []
        #: id(old object) -> (old, new): one old object gives one new object.
        self.memo: dict[int, tuple[object, object]] = {}
        self.finder: _Finder | None = None
        #: originals whose ``__eq__`` got a copy (see _keep_equality).
        self.equality_kept: set[type] = set()
        #: the extras the installed default Retry objects carry.
        self.extras: dict[str, object] = dict.fromkeys(_EXTRAS)
        #: redis-py 8.2's _to_async_retry, keeping the extras (one wrapper).
        self.conversion: Callable[[Any], Any] | None = None
        #: the deadline's bounds are installed (_install_bounds).
        self.bounded = False


_EXTRAS = ("deadline", "budget", "stats", "writes", "on_retry", "on_give_up")

_lock = threading.RLock()
_state = _State()


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _import_dropin(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _dropins() -> dict[str, types.ModuleType | None]:
    """The drop-in modules whose redis-py source module is imported.

    Imported before the lock is taken: importing takes the import system's
    module locks, which another thread's import may hold while its hook waits
    for ours.
    """
    return {
        dropin: _import_dropin(dropin) for source, dropin, _ in _SOURCES if source in sys.modules
    }


def _register_source(
    source: str, dropin_name: str, names: Sequence[str], dropin: types.ModuleType | None
) -> None:
    """Map the originals of one imported source module to their replacements."""
    module = sys.modules[source]
    for name in names:
        qualified = f"{source}.{name}"
        if qualified in _state.originals:
            continue
        original = vars(module).get(name)
        if not isinstance(original, type):
            continue
        if original in _state.backward:  # already the C class: patched before us
            continue
        _state.originals[qualified] = original
        replacement = getattr(dropin, name, None) if dropin is not None else None
        if dropin is None:
            _state.missing[qualified] = f"{dropin_name} cannot be imported"
        elif not isinstance(replacement, type) or replacement is original:
            _state.missing[qualified] = f"{dropin_name}.{name} is redis-py's own class"
        else:
            _state.forward[original] = replacement
            _state.backward[replacement] = original
            _state.missing.pop(qualified, None)


# --- Building an equal object of the other implementation -----------------

_STATE_ATTRIBUTES = ("_backoff", "_cap", "_base", "_previous_backoff")


def _build_backoff(target: type, old: Any) -> Any:
    """A ``target`` strategy with the parameters and state of ``old``."""
    name = target.__name__
    if name == "NoBackoff":
        new = target()
    elif name == "ConstantBackoff":
        new = target(old._backoff)
    else:
        new = target(cap=old._cap, base=old._base)
    for attribute in _STATE_ATTRIBUTES:
        if hasattr(old, attribute) and getattr(new, attribute, None) is not getattr(old, attribute):
            setattr(new, attribute, getattr(old, attribute))
    return new


def _convert(old: object, mapping: Mapping[type, type]) -> object:
    """An object of ``mapping[type(old)]`` equal to ``old``, or ``old`` itself
    when there is none (not an exact original type, no replacement, or the
    copy does not compare equal)."""
    target = mapping.get(type(old))
    if target is None:
        return old
    memo = _state.memo.get(id(old))
    if memo is not None and memo[0] is old:
        return memo[1]
    new: Any
    try:
        if hasattr(old, "_retries"):  # a Retry
            new = _build_retry(target, old, mapping)
        else:
            new = _build_backoff(target, old)
        plain = _without_extras(old)
        equal = bool(new == plain) and bool(plain == new)
    except Exception:
        return old
    if not equal or type(new) is not target:
        return old
    if mapping is _state.forward and _has_extras(new):
        _set_extras(new, _state.extras)
    _state.memo[id(old)] = (old, new)
    return new


def _build_retry(target: type, old: Any, mapping: Mapping[type, type]) -> Any:
    """A ``target`` Retry with the parameters of ``old``, its backoff converted."""
    arguments = (_convert(old._backoff, mapping), old._retries, old._supported_errors)
    # redis-py 8.2's checker (Retry(..., is_retryable=)), which its __eq__
    # compares: passed only when set, since earlier releases take no such
    # argument and have no such attribute.
    checker = getattr(old, "_is_retryable", None)
    if checker is not None:
        return target(*arguments, is_retryable=checker)
    return target(*arguments)


def _has_extras(obj: object) -> bool:
    """Is ``obj`` a C Retry (which has the extras' attributes)?"""
    return all(hasattr(type(obj), name) for name in _EXTRAS)


def _extra(retry: object, name: str) -> object:
    """The extra `name` of a C Retry, None when not set (writes reads
    "at-least-once" then, redis-py's behaviour)."""
    value = getattr(retry, name)
    return None if name == "writes" and value == "at-least-once" else value


def _without_extras(obj: object) -> object:
    """``obj``, or a shallow copy of it without extras when it has some:
    what redis-py's equal object is compared against."""
    if not _has_extras(obj) or all(_extra(obj, name) is None for name in _EXTRAS):
        return obj
    plain = copy.copy(obj)
    _set_extras(plain, dict.fromkeys(_EXTRAS))
    return plain


def _set_extras(retry: object, extras: Mapping[str, object]) -> None:
    for name in _EXTRAS:
        setattr(retry, name, extras[name])


def _checked_extras(given: tuple[object, ...]) -> dict[str, object]:
    """The extras for patch() (`given` in _EXTRAS' order), checked as
    Retry() checks them (TypeError or ValueError naming the parameter,
    before anything is patched)."""
    from redis_backoff_c._impl import speedups

    extras = dict(zip(_EXTRAS, given))
    if speedups is not None:
        try:
            checked = speedups.Retry(None, 0, **extras)
        except (TypeError, ValueError) as error:
            raise type(error)(str(error).replace("Retry()", "patch()", 1)) from None
        extras["writes"] = _extra(checked, "writes")
    return extras


def _installed_retries() -> list[object]:
    """The C Retry objects patch() installed in place of redis-py's."""
    return [new for _, new in _state.memo.values() if _has_extras(new)]


def _replacement(value: object, mapping: Mapping[type, type]) -> object:
    """What ``value`` becomes: the mapped class, an equal converted object, or
    ``value`` itself."""
    if isinstance(value, type):
        return mapping.get(value, value)
    return _convert(value, mapping)


def _retry_types(mapping: Mapping[type, type]) -> tuple[type, ...]:
    """The Retry classes (either side) that stay when converting with ``mapping``."""
    kept = []
    for qualified in _RETRY_NAMES:
        original = _state.originals.get(qualified)
        if original is None:
            continue
        kept.append(original)
        replacement = _state.forward.get(original)
        if replacement is not None:
            kept.append(replacement)
    return tuple(cls for cls in kept if cls not in mapping)


# --- Finding and replacing ------------------------------------------------


class _Sweep:
    """One pass over modules, replacing with ``mapping``, recording each change."""

    def __init__(self, mapping: Mapping[type, type], records: list[_Record]) -> None:
        self.mapping = mapping
        self.records = records
        self.kept_retries = _retry_types(mapping)
        self.seen: set[int] = set()

    def _set(self, target: object, key: str, old: object, new: object, label: str) -> None:
        setattr(target, key, new)
        self.records.append(_Record(target, key, old, new, label))

    def _value(self, target: object, key: str, value: object, label: str) -> None:
        """Replace ``target.key`` (holding ``value``) if it has a replacement."""
        new = _replacement(value, self.mapping)
        if new is not value:
            self._set(target, key, value, new, label)
        else:
            self._inner_backoff(value, label)

    def _inner_backoff(self, value: object, label: str) -> None:
        """A Retry that stays (no replacement) gets a converted ``_backoff``."""
        if type(value) not in self.kept_retries or id(value) in self.seen:
            return
        self.seen.add(id(value))
        backoff = getattr(value, "_backoff", None)
        new = _convert(backoff, self.mapping)
        if new is not backoff:
            self._set(value, "_backoff", backoff, new, f"{label}._backoff")

    def module(self, module: types.ModuleType) -> None:
        name = module.__name__
        for key, value in list(vars(module).items()):
            self._value(module, key, value, f"{name}.{key}")
            if isinstance(value, type) and value.__module__ == name:
                self.cls(value)
            elif isinstance(value, types.FunctionType) and value.__module__ == name:
                self.function(value, f"{name}.{value.__qualname__}")

    def cls(self, cls: type) -> None:
        if id(cls) in self.seen:
            return
        self.seen.add(id(cls))
        where = _qualname(cls)
        for key, value in list(vars(cls).items()):
            if key == "__dataclass_fields__" and isinstance(value, dict):
                for field_name, field in value.items():
                    if isinstance(field, dataclasses.Field):
                        self._value(
                            field,
                            "default",
                            field.default,
                            f"{where}.__dataclass_fields__[{field_name!r}].default",
                        )
                continue
            self._value(cls, key, value, f"{where}.{key}")
            for function in _functions_of(value):
                self.function(function, f"{where}.{key}")
            if (
                isinstance(value, type)
                and value.__module__ == cls.__module__
                and value.__qualname__.startswith(cls.__qualname__ + ".")
            ):
                self.cls(value)

    def function(self, function: types.FunctionType, label: str) -> None:
        for current in _wrapped_chain(function):
            if id(current) in self.seen:
                continue
            self.seen.add(id(current))
            self._defaults(current, label)
            self._kwdefaults(current, label)

    def _defaults(self, function: types.FunctionType, label: str) -> None:
        defaults = function.__defaults__
        if not defaults:
            return
        code = function.__code__
        names = code.co_varnames[: code.co_argcount][-len(defaults) :]
        new = list(defaults)
        changed = []
        for index, value in enumerate(defaults):
            here = f"{label}({names[index]}=)" if index < len(names) else f"{label}[{index}]"
            replaced = _replacement(value, self.mapping)
            if replaced is not value:
                new[index] = replaced
                changed.append(here)
            else:
                self._inner_backoff(value, here)
        if changed:
            self._set(function, "__defaults__", defaults, tuple(new), ", ".join(changed))

    def _kwdefaults(self, function: types.FunctionType, label: str) -> None:
        kwdefaults = function.__kwdefaults__
        if not kwdefaults:
            return
        new = dict(kwdefaults)
        changed = []
        for key, value in kwdefaults.items():
            here = f"{label}({key}=)"
            replaced = _replacement(value, self.mapping)
            if replaced is not value:
                new[key] = replaced
                changed.append(here)
            else:
                self._inner_backoff(value, here)
        if changed:
            self._set(function, "__kwdefaults__", kwdefaults, new, ", ".join(changed))


def _functions_of(value: object) -> Iterator[types.FunctionType]:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        for accessor in (value.fget, value.fset, value.fdel):
            if isinstance(accessor, types.FunctionType):
                yield accessor
    elif isinstance(value, types.FunctionType):
        yield value


def _wrapped_chain(function: types.FunctionType) -> Iterator[types.FunctionType]:
    """``function`` and the functions it wraps (``functools.wraps``)."""
    seen: set[int] = set()
    current: object = function
    while isinstance(current, types.FunctionType) and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = getattr(current, "__wrapped__", None)


def _redis_modules(only: str | None = None) -> list[types.ModuleType]:
    names = sorted(
        name
        for name in list(sys.modules)
        if (name == "redis" or name.startswith("redis.")) and (only is None or name == only)
    )
    return [
        module for name in names if isinstance(module := sys.modules.get(name), types.ModuleType)
    ]


def _keep_equality(records: list[_Record]) -> None:
    """Give each original class whose ``__eq__`` looks its own name up in its
    module a copy of that ``__eq__`` that sees the original under the name."""
    by_module: dict[str, dict[str, type]] = {}
    for qualified, original in _state.originals.items():
        if original in _state.forward:
            source, _, name = qualified.rpartition(".")
            by_module.setdefault(source, {})[name] = original
    for module_name, names in by_module.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        namespace: dict[str, Any] | None = None
        for original in names.values():
            eq = vars(original).get("__eq__")
            if original in _state.equality_kept:
                continue
            if not isinstance(eq, types.FunctionType) or eq.__globals__ is not vars(module):
                continue
            if not set(eq.__code__.co_names) & set(names):
                continue
            if namespace is None:
                namespace = dict(vars(module))
                namespace.update(names)
            copy = types.FunctionType(
                eq.__code__, namespace, eq.__name__, eq.__defaults__, eq.__closure__
            )
            copy.__kwdefaults__ = eq.__kwdefaults__
            copy.__qualname__ = eq.__qualname__
            copy.__doc__ = eq.__doc__
            copy.__dict__.update(eq.__dict__)
            copy.__wrapped__ = eq  # type: ignore[attr-defined]
            original.__eq__ = copy  # type: ignore[method-assign]
            _state.equality_kept.add(original)
            records.append(_Record(original, "__eq__", eq, copy, f"{_qualname(original)}.__eq__"))


def _patch_modules(modules: list[types.ModuleType]) -> list[_Record]:
    records: list[_Record] = []
    sweep = _Sweep(_state.forward, records)
    for module in modules:
        sweep.module(module)
        _keep_extras_through_conversion(module, records)
        _count_cluster_commands(module, records)
        if _state.bounded:
            _bound_waits(module.__name__, records)
    _keep_equality(records)
    _state.records.extend(records)
    return records


def _conversion_keeping_extras(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """redis-py 8.2's ``_to_async_retry``, and then the extras (deadline,
    budget, stats: the same objects) of the sync C Retry it converted set on
    the asyncio C Retry it made, which redis-py builds from four fields."""

    @functools.wraps(convert)
    def to_async_retry(retry: Any) -> Any:
        converted = convert(retry)
        if converted is not retry and _has_extras(retry) and _has_extras(converted):
            _set_extras(converted, {name: _extra(retry, name) for name in _EXTRAS})
        return converted

    to_async_retry._redis_backoff_c_converts = convert  # type: ignore[attr-defined]
    return to_async_retry


def _keep_extras_through_conversion(module: types.ModuleType, records: list[_Record]) -> None:
    """Each name bound to redis.asyncio.retry._to_async_retry in `module`
    (the module itself and those that imported it by name) gets the
    conversion that keeps the extras, one wrapper for all of them."""
    original = getattr(sys.modules.get("redis.asyncio.retry"), "_to_async_retry", None)
    if original is None or getattr(original, "_redis_backoff_c_converts", None) is not None:
        return
    for name, value in list(vars(module).items()):
        if value is original:
            if _state.conversion is None:
                _state.conversion = _conversion_keeping_extras(original)
            setattr(module, name, _state.conversion)
            label = f"{module.__name__}.{name}"
            records.append(_Record(module, name, original, _state.conversion, label))


def _give_default_extras(retry: object) -> None:
    """A default Retry built at run time from the C class (RedisCluster's):
    patch()'s extras, unless it has some."""
    if not _has_extras(retry) or not any(value is not None for value in _state.extras.values()):
        return
    if all(_extra(retry, name) is None for name in _EXTRAS):
        _set_extras(retry, _state.extras)


def _count_cluster_commands(module: types.ModuleType, records: list[_Record]) -> None:
    """redis-py 8.2's cluster command loop (RedisCluster.execute_command and
    AbstractRedisCluster._retry_backoff_delay) gets the extras of a C Retry
    (see redis_backoff_c._cluster)."""
    from redis_backoff_c import _cluster, _pipeline_writes

    changes = _cluster.patch_module(module, _give_default_extras)
    if module.__name__ in _cluster.MODULES:
        changes += _pipeline_writes.patches()
    for target, key, old, new in changes:
        setattr(target, key, new)
        records.append(_Record(target, key, old, new, f"{_qualname(target)}.{key}"))


def _install_bounds() -> list[_Record]:
    """The deadline's bounds in the redis modules imported (and, through the
    import hook, those imported later), once a Retry with a deadline
    exists: patch() calls this then, or _call_deadline.saw_deadline() when
    the first one is made; unpatch() takes them out."""
    from redis_backoff_c import _call_deadline

    records: list[_Record] = []
    with _lock:
        if _state.bounded:
            return records
        for module in _redis_modules():
            _bound_waits(module.__name__, records)
        _state.records.extend(records)
        _state.bounded = True
        _call_deadline.bind(True)
    return records


def _bound_waits(module_name: str, records: list[_Record]) -> None:
    """A call with a deadline ends within it (redis_backoff_c._call_deadline):
    the entries of redis-py's commands set it, its waits read it.  After
    _count_cluster_commands, whose RedisCluster.execute_command sets it
    itself."""
    from redis_backoff_c import _call_deadline

    for target, key, old, new in _call_deadline.patches(module_name):
        setattr(target, key, new)
        owner = _qualname(target) if isinstance(target, type) else module_name
        records.append(_Record(target, key, old, new, f"{owner}.{key}"))


# --- The import hook ------------------------------------------------------


class _Loader(importlib.abc.Loader):
    """Wraps a redis module's loader for one import: runs it, then patches."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        spec.loader = self._loader
        created: types.ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: types.ModuleType) -> None:
        # The module runs, and stays, with its own loader.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _imported(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` while patched: finds ``redis.*`` modules
    through the other finders and wraps their loader."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "redis" and not fullname.startswith("redis."):
            return None
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, _Finder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec: importlib.machinery.ModuleSpec | None = find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader)
            return spec
        return None


def _imported(module: types.ModuleType) -> None:
    """A redis module has just run while patched: treat it as patch() would."""
    name = module.__name__
    sources = [entry for entry in _SOURCES if entry[0] == name]
    dropins = {dropin: _import_dropin(dropin) for _, dropin, _ in sources}
    with _lock:
        if not _state.active:
            return
        for source, dropin, names in sources:
            _register_source(source, dropin, names, dropins[dropin])
        _patch_modules([module])
        _follow_redis_sleep(dropins)


# --- The public functions -------------------------------------------------


def _fallback_patch(extras: dict[str, object]) -> PatchReport:
    """patch() without the C extension: no class is replaced (the report
    says why), but ``writes="at-most-once"`` still installs what the
    twin's at-most-once Retry needs from redis-py: the check of a held
    connection before each write, and the cluster pipelines' ledger (see
    redis_backoff_c.writes), in the redis modules imported by then;
    unpatch() takes them out."""
    from redis_backoff_c import _call_deadline, _pipeline_writes
    from redis_backoff_c._impl import FALLBACK_REASON

    reason = f"the C extension is not in use: {FALLBACK_REASON}"
    records: list[_Record] = []
    with _lock:
        if extras["writes"] is not None and not _state.records:
            records = _guard_writes()  # recorded in _state already
            for target, key, old, new in _pipeline_writes.patches():
                setattr(target, key, new)
                record = _Record(target, key, old, new, f"{_qualname(target)}.{key}")
                records.append(record)
                _state.records.append(record)
        if extras["deadline"] is not None or _call_deadline.deadline_seen():
            records.extend(_install_bounds())
        elif not _state.bounded:
            _call_deadline.on_first = _install_bounds
    return PatchReport(
        implementation="python",
        active=False,
        classes={},
        missing={f"{source}.{name}": reason for source, _, names in _SOURCES for name in names},
        replaced=tuple(record.label for record in records),
        already_patched=False,
    )


def patch(
    deadline: float | None = None,
    budget: RetryBudget | None = None,
    stats: RetryStats | None = None,
    writes: str | None = None,
    on_retry: Callable[[RetryEvent], object] | None = None,
    on_give_up: Callable[[RetryEvent], object] | None = None,
) -> PatchReport:
    """Put the C strategies and Retry classes into redis-py, everywhere it
    holds them, and keep doing so for redis modules imported later.

    ``deadline``, ``budget`` (a :class:`RetryBudget`), ``stats`` (a
    :class:`RetryStats`), ``writes`` (``"at-most-once"``: see
    :mod:`redis_backoff_c.writes`), ``on_retry`` and ``on_give_up`` (see
    :mod:`redis_backoff_c.hooks`): the extras the default Retry objects it
    installs carry, shared by every client built with them (see the module
    documentation).

    Idempotent. Returns a :class:`PatchReport`. Without the C extension, a
    no-op (the report says why). See the module documentation for what is
    replaced and the limits.
    """
    from redis_backoff_c import _call_deadline
    from redis_backoff_c._impl import speedups

    given = (deadline, budget, stats, writes, on_retry, on_give_up)
    extras = _checked_extras(given)
    if speedups is None:
        return _fallback_patch(extras)
    dropins = _dropins()
    with _lock:
        already = _state.active
        # writes="at-least-once" counts as given too.
        if not already or any(value is not None for value in given):
            _state.extras = extras
            for retry in _installed_retries():
                _set_extras(retry, extras)
        for source, dropin, names in _SOURCES:
            if source in sys.modules:
                _register_source(source, dropin, names, dropins.get(dropin))
        records = _patch_modules(_redis_modules())
        if _state.extras["deadline"] is not None or _call_deadline.deadline_seen():
            records += _install_bounds()
        elif not _state.bounded:
            _call_deadline.on_first = _install_bounds
        if _state.extras["writes"] is not None:
            records += _guard_writes()
        if not already:
            records += _follow_redis_sleep(dropins)
            finder = _Finder()
            sys.meta_path.insert(0, finder)
            _state.finder = finder
            _state.active = True
        return PatchReport(
            implementation="c",
            active=True,
            classes={
                qualified: _qualname(_state.forward[original])
                for qualified, original in _state.originals.items()
                if original in _state.forward
            },
            missing=dict(_state.missing),
            replaced=tuple(record.label for record in records),
            already_patched=already,
        )


def _guard_writes() -> list[_Record]:
    """Under writes="at-most-once", redis-py's send_packed_command (sync and
    asyncio) checks a held connection for EOF before it writes (see
    redis_backoff_c.writes); unpatch() puts redis-py's back."""
    from redis_backoff_c import writes

    records = []
    for target, key, old, new in writes._guards():
        setattr(target, key, new)
        records.append(_Record(target, key, old, new, f"{_qualname(target)}.{key}"))
    _state.records.extend(records)
    return records


def _follow_redis_sleep(dropins: dict[str, types.ModuleType | None]) -> list[_Record]:
    """The drop-in retry modules' ``sleep`` becomes a function that calls
    redis-py's ``sleep`` global, looked up at each call, so that
    ``mock.patch("redis.retry.sleep")`` reaches the C Retry as it reaches
    redis-py's; unpatch() puts the drop-ins' own back."""
    import asyncio
    import time

    # A drop-in's sleep that a test has already replaced stays as it is.
    records: list[_Record] = []
    defaults = {"redis_backoff_c.retry": time.sleep, "redis_backoff_c.asyncio.retry": asyncio.sleep}
    for name, default in defaults.items():
        dropin = dropins.get(name)
        follower = getattr(dropin, "_sleep_through_redis_retry", None)
        if dropin is None or follower is None or dropin.sleep is not default:
            continue
        dropin.sleep = follower  # type: ignore[attr-defined]
        records.append(_Record(dropin, "sleep", default, follower, f"{name}.sleep"))
    _state.records.extend(records)
    return records


def unpatch() -> tuple[str, ...]:
    """Undo :func:`patch`: every location it replaced holds its original
    object again (the same object), redis modules imported while patched get
    redis-py's classes and equal redis-py objects, and the import hook goes.

    Returns the locations restored; a no-op when not patched.
    """
    from redis_backoff_c import _call_deadline

    with _lock:
        if not _state.active and not _state.records:
            return ()  # (without the extension, patch(writes=) leaves records)
        if _state.finder is not None and _state.finder in sys.meta_path:
            sys.meta_path.remove(_state.finder)
        _call_deadline.bind(False)
        _call_deadline.on_first = None
        restored: list[str] = []
        for record in reversed(_state.records):
            if _current(record.target, record.key) is record.new:
                if record.old is None and isinstance(record.target, type):
                    delattr(record.target, record.key)  # it had none of its own
                else:
                    setattr(record.target, record.key, record.old)
                restored.append(record.label)
        # What redis-py built from the C classes while patched: no earlier
        # object to restore, so an equal redis-py one.
        _state.memo.clear()
        leftovers: list[_Record] = []
        sweep = _Sweep(_state.backward, leftovers)
        for module in _redis_modules():
            sweep.module(module)
        restored.extend(record.label for record in leftovers)
        _state.__init__()  # type: ignore[misc]
        return tuple(restored)


def _current(target: object, key: str) -> object:
    if isinstance(target, type):
        return vars(target).get(key)
    return getattr(target, key, None)


def is_patched() -> bool:
    """True between a :func:`patch` that put the C types in and :func:`unpatch`."""
    with _lock:
        return _state.active


@contextmanager
def patched(
    deadline: float | None = None,
    budget: RetryBudget | None = None,
    stats: RetryStats | None = None,
    writes: str | None = None,
    on_retry: Callable[[RetryEvent], object] | None = None,
    on_give_up: Callable[[RetryEvent], object] | None = None,
) -> Iterator[PatchReport]:
    """``with patched() as report:``: patch() on entry, unpatch() on exit,
    unless it was already patched on entry (then it stays patched).  The
    extras are passed to patch()."""
    was_patched = is_patched()
    report = patch(deadline, budget, stats, writes, on_retry, on_give_up)
    try:
        yield report
    finally:
        if not was_patched:
            unpatch()
