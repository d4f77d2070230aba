"""A subclass's own state protocol, as redis-py honours it: a Retry (sync and
asyncio) or strategy subclass that overrides ``__getstate__`` or
``__setstate__`` gets them called by copy.copy, copy.deepcopy and pickle,
and a subclass that puts a field in ``__slots__`` works as it does on
redis-py's classes.  Each test runs on both implementations; the C side
must give redis-py's result."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest

# Pickle protocols 4 and 5: 0-2 store socket.timeout, one of the default
# supported errors, as OSError (for Python 2), which changes redis-py's Retry.
COPIES = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    **{f"pickle{p}": (lambda p: lambda o: pickle.loads(pickle.dumps(o, p)))(p) for p in (4, 5)},
}

# Classes are made at module level (pickle finds them by name), one per
# implementation and base.
_CLASSES: dict[tuple[str, str, str], type] = {}


def _base(impl, base: str) -> type:
    if base == "Retry":
        return impl.retry.Retry
    if base == "AsyncRetry":
        return impl.asyncio_retry.Retry
    return getattr(impl.backoff, base)


def _make(impl, base: str, kind: str) -> type:
    key = (impl.name, base, kind)
    if key in _CLASSES:
        return _CLASSES[key]
    namespace = dict(KINDS[kind])
    name = f"{kind}_{base}_{impl.name.replace('-', '_')}"
    namespace["__qualname__"] = name
    namespace["__module__"] = __name__
    cls = type(name, (_base(impl, base),), namespace)
    globals()[name] = cls
    _CLASSES[key] = cls
    return cls


def _dict_minus_lock_getstate(self):
    state = self.__dict__.copy() if hasattr(self, "__dict__") else {}
    state.pop("lock", None)
    return state


def _dict_update_setstate(self, state):
    self.__dict__.update(state)
    self.lock = threading.Lock()


def _rewriting_setstate(self, state):
    state = dict(state)
    if "_retries" in state:
        state["_retries"] = 7
    if "_cap" in state:
        state["_cap"] = 2.5
    self.__dict__.update(state)


def _pair_getstate(self):
    return (dict(self.__dict__), {})


KINDS = {
    # The common one: leave out what does not pickle, build it again.
    "lock": {"__getstate__": _dict_minus_lock_getstate, "__setstate__": _dict_update_setstate},
    # A __setstate__ that changes a field on its way in.
    "rewrite": {"__setstate__": _rewriting_setstate},
    # A (dict, slots) pair and no __setstate__: the default protocol applies it.
    "pair": {"__getstate__": _pair_getstate},
}


def _instance(impl, base: str, cls: type, lock: bool = True):
    if base in ("Retry", "AsyncRetry"):
        obj = cls(impl.backoff.ExponentialBackoff(cap=1.5, base=0.25), 4)
    elif base == "ConstantBackoff":
        obj = cls(0.75)
    else:
        obj = cls(cap=1.5, base=0.25)
    if lock:
        obj.lock = threading.Lock()
    obj.label = "mine"
    return obj


def _fields(obj) -> dict:
    names = ("_backoff", "_retries", "_cap", "_base", "label")
    fields = {name: getattr(obj, name) for name in names if hasattr(obj, name)}
    if "_backoff" in fields and not isinstance(fields["_backoff"], float):
        fields["_backoff"] = (type(fields["_backoff"]).__name__, fields["_backoff"]._cap)
    if hasattr(obj, "get_retries"):
        fields["get_retries()"] = obj.get_retries()
    return fields


BASES = ["Retry", "AsyncRetry", "ExponentialBackoff", "ConstantBackoff", "FullJitterBackoff"]


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("base", BASES)
def test_getstate_and_setstate_are_honoured(both_sides, base, how):
    def play(impl):
        original = _instance(impl, base, _make(impl, base, "lock"))
        made = COPIES[how](original)
        assert made is not original
        assert isinstance(made.lock, type(threading.Lock()))
        if how != "copy":
            assert made.lock is not original.lock
        return _fields(made), made == original

    both_sides(play)


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("base", ["Retry", "AsyncRetry", "ExponentialBackoff"])
@pytest.mark.parametrize("kind", ["rewrite", "pair"])
def test_a_state_of_the_subclass_own(both_sides, base, how, kind):
    def play(impl):
        made = COPIES[how](_instance(impl, base, _make(impl, base, kind), lock=False))
        return _fields(made)

    both_sides(play)


def _slotted(impl, base: str) -> type:
    key = (impl.name, base, "slots")
    if key not in _CLASSES:
        name = f"slots_{base}_{impl.name.replace('-', '_')}"
        field = "_backoff" if base in ("Retry", "AsyncRetry") else "_cap"
        cls = type(
            name,
            (_base(impl, base),),
            {"__slots__": (field, "extra"), "__qualname__": name, "__module__": __name__},
        )
        globals()[name] = cls
        _CLASSES[key] = cls
    return _CLASSES[key]


@pytest.mark.parametrize("how", list(COPIES))
@pytest.mark.parametrize("base", ["Retry", "AsyncRetry", "ExponentialBackoff"])
def test_a_field_in_slots(both_sides, base, how):
    def play(impl):
        cls = _slotted(impl, base)
        if base in ("Retry", "AsyncRetry"):
            obj = cls(impl.backoff.ExponentialBackoff(cap=1.5, base=0.25), 4)
        else:
            obj = cls(cap=1.5, base=0.25)
        obj.extra = 11
        made = COPIES[how](obj)
        computed = [obj.compute(3), made.compute(3)] if hasattr(obj, "compute") else None
        return _fields(obj), _fields(made), made.extra, made == obj, computed

    both_sides(play)


@pytest.fixture
def both_sides():
    from support import both

    return both
