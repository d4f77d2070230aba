"""redis_backoff_c.patch() / unpatch(): the C types inside redis-py, and back.

Every test leaves redis-py unpatched (the ``_always_unpatch`` fixture), so
the rest of the suite, which compares against pure redis-py, never sees a
patched redis-py whatever the order the tests run in.

Without the C extension patch() is a no-op: those runs check only that.
"""

import copy
import importlib
import inspect
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import types

import pytest
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.backoff
import redis.client
import redis.connection
import redis.exceptions
import redis.retry
from support import ORIGINAL_ASYNC_RETRY, ORIGINAL_RETRY

import redis_backoff_c
import redis_backoff_c.backoff

STRATEGIES = (
    "ConstantBackoff",
    "NoBackoff",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
)


def _dropin(module_name, original):
    """The C class of a drop-in module, or None when there is none yet."""
    if redis_backoff_c.IMPLEMENTATION != "c":
        return None
    try:
        cls = importlib.import_module(module_name).Retry
    except ImportError:
        return None
    return None if cls is original else cls


# The redis-py originals, taken before any test patches anything.
ORIGINAL = {name: getattr(redis.backoff, name) for name in STRATEGIES}
C = {name: getattr(redis_backoff_c.backoff, name) for name in STRATEGIES}
C_RETRY = _dropin("redis_backoff_c.retry", ORIGINAL_RETRY)
C_ASYNC_RETRY = _dropin("redis_backoff_c.asyncio.retry", ORIGINAL_ASYNC_RETRY)

needs_c = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="patch() is a no-op without the C extension"
)
pytestmark = needs_c


@pytest.fixture(autouse=True)
def _always_unpatch():
    assert not redis_backoff_c.is_patched(), "a test before this one left redis-py patched"
    yield
    redis_backoff_c.unpatch()
    assert not redis_backoff_c.is_patched()
    assert redis.backoff.ExponentialBackoff is ORIGINAL["ExponentialBackoff"]
    assert redis.retry.Retry is ORIGINAL_RETRY


def _unwrapped(function):
    return inspect.unwrap(function)


def _default(function, name):
    """The default of parameter ``name``, looked up where Python keeps it."""
    return inspect.signature(_unwrapped(function)).parameters[name].default


def _redis_module_names():
    return sorted(n for n in list(sys.modules) if n == "redis" or n.startswith("redis."))


def _functions(value):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        found = [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    else:
        found = [value] if isinstance(value, types.FunctionType) else []
    for function in found:
        while isinstance(function, types.FunctionType):
            yield function
            function = getattr(function, "__wrapped__", None)


def snapshot():
    """Every object patch() may replace, keyed by where it is: module
    globals, class attributes, defaults of functions and methods, dataclass
    field defaults, and the ``_backoff`` of each Retry held as a default."""
    state = {}
    classes = []
    for name in _redis_module_names():
        module = sys.modules[name]
        for key, value in list(vars(module).items()):
            state[("global", name, key)] = value
            if isinstance(value, type) and value.__module__ == name:
                classes.append(value)
            for function in _functions(value):
                state[("defaults", function)] = function.__defaults__
                state[("kwdefaults", function)] = function.__kwdefaults__
    seen = set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for key, value in list(vars(cls).items()):
            state[("attr", cls, key)] = value
            for function in _functions(value):
                state[("defaults", function)] = function.__defaults__
                state[("kwdefaults", function)] = function.__kwdefaults__
            if isinstance(value, type) and value.__qualname__.startswith(cls.__qualname__ + "."):
                classes.append(value)
        for field_name, field in getattr(cls, "__dataclass_fields__", {}).items():
            state[("field", cls, field_name)] = field.default
    for key, value in list(state.items()):
        for held in [value] if key[0] != "defaults" else list(value or ()):
            if hasattr(held, "_retries") and hasattr(held, "_backoff"):
                state[("retry._backoff", id(held))] = held._backoff
        if key[0] == "kwdefaults":
            for held in (value or {}).values():
                if hasattr(held, "_retries") and hasattr(held, "_backoff"):
                    state[("retry._backoff", id(held))] = held._backoff
    return state


def assert_same(before, after):
    changed = [key for key, value in before.items() if key in after and after[key] is not value]
    assert changed == []


# --- What patch() replaces --------------------------------------------------


def test_report():
    report = redis_backoff_c.patch()
    assert report.implementation == "c"
    assert report.active is True
    assert report.already_patched is False
    expected = {f"redis.backoff.{name}": f"redis_backoff_c.{name}" for name in STRATEGIES}
    assert {k: v for k, v in report.classes.items() if k.startswith("redis.backoff.")} == expected
    for qualified, c_class in (
        ("redis.retry.Retry", C_RETRY),
        ("redis.asyncio.retry.Retry", C_ASYNC_RETRY),
    ):
        assert c_class is not None, f"the C extension gives no replacement for {qualified}"
        assert report.classes[qualified] == f"{c_class.__module__}.{c_class.__qualname__}"
        assert qualified not in report.missing
    assert report.count == len(report.replaced) > 0
    assert "redis.backoff.ExponentialWithJitterBackoff" in report.replaced
    assert "redis.client.ExponentialWithJitterBackoff" in report.replaced
    assert redis_backoff_c.is_patched()


def test_the_seven_strategies_in_redis_backoff():
    redis_backoff_c.patch()
    for name in STRATEGIES:
        assert getattr(redis.backoff, name) is C[name]
        assert getattr(redis.backoff, name) is not ORIGINAL[name]
    # redis-py's own helper builds from the module's global, so it now gives C.
    assert type(redis.backoff.default_backoff()) is C["EqualJitterBackoff"]
    assert type(redis.default_backoff()) is C["EqualJitterBackoff"]


def test_no_redis_module_keeps_a_name_bound_to_an_original():
    originals = {*ORIGINAL.values(), ORIGINAL_RETRY, ORIGINAL_ASYNC_RETRY}
    bound_before = [
        (name, key)
        for name in _redis_module_names()
        for key, value in vars(sys.modules[name]).items()
        if isinstance(value, type) and value in originals
    ]
    assert ("redis.client", "ExponentialWithJitterBackoff") in bound_before
    assert ("redis.connection", "NoBackoff") in bound_before
    redis_backoff_c.patch()
    left = [
        (name, key)
        for name in _redis_module_names()
        for key, value in vars(sys.modules[name]).items()
        if isinstance(value, type) and value in originals
    ]
    assert left == []


def test_retry_names():
    redis_backoff_c.patch()
    for module in (redis.retry, redis.client, redis.connection, sys.modules["redis.cluster"]):
        assert module.Retry is C_RETRY
    assert redis.connection.NoBackoff is C["NoBackoff"]


def test_async_retry_names():
    redis_backoff_c.patch()
    for name in ("redis.asyncio.retry", "redis.asyncio.client", "redis.asyncio.connection"):
        assert sys.modules[name].Retry is C_ASYNC_RETRY
    assert redis.asyncio.connection.NoBackoff is C["NoBackoff"]


# --- Defaults built at import time, and what clients build -------------------


def _assert_c_equal(new, old):
    """``new`` is the C counterpart of redis-py's ``old``: equal, both ways."""
    assert new == old and old == new
    assert hash(new) == hash(old)
    assert new._retries == old._retries
    assert set(new._supported_errors) == set(old._supported_errors)
    assert type(new._backoff) is C[type(old._backoff).__name__]
    assert new._backoff == old._backoff


def test_default_retry_of_redis_init_has_a_c_backoff():
    before = _default(redis.client.Redis.__init__, "retry")
    assert type(before) is ORIGINAL_RETRY
    redis_backoff_c.patch()
    after = _default(redis.client.Redis.__init__, "retry")
    assert type(after._backoff) is C["ExponentialWithJitterBackoff"]
    assert after == before
    assert after._backoff._cap == before._backoff._cap
    assert after._backoff._base == before._backoff._base


def test_default_retry_of_redis_init_is_a_c_retry():
    before = _default(redis.client.Redis.__init__, "retry")
    redis_backoff_c.patch()
    after = _default(redis.client.Redis.__init__, "retry")
    assert type(after) is C_RETRY
    _assert_c_equal(after, before)


def test_redis_client_and_its_connections_run_a_c_retry():
    expected = redis.Redis().get_retry()  # what unpatched redis-py builds
    assert type(expected) is ORIGINAL_RETRY
    redis_backoff_c.patch()
    client = redis.Redis()
    _assert_c_equal(client.get_retry(), expected)
    assert type(client.get_retry()) is C_RETRY
    connection = client.connection_pool.make_connection()
    assert type(connection.retry) is C_RETRY
    _assert_c_equal(connection.retry, expected)


@pytest.mark.parametrize("retry_on_timeout", [True, False])
def test_connection_without_a_retry(retry_on_timeout):
    expected = redis.connection.Connection(retry_on_timeout=retry_on_timeout).retry
    redis_backoff_c.patch()
    retry = redis.connection.Connection(retry_on_timeout=retry_on_timeout).retry
    assert type(retry) is C_RETRY
    assert type(retry._backoff) is C["NoBackoff"]
    _assert_c_equal(retry, expected)


def test_async_default_retry_has_a_c_backoff():
    before = _default(redis.asyncio.client.Redis.__init__, "retry")
    redis_backoff_c.patch()
    after = _default(redis.asyncio.client.Redis.__init__, "retry")
    assert type(after._backoff) is C["ExponentialWithJitterBackoff"]
    assert after._backoff == before._backoff


def test_asyncio_redis_runs_a_c_retry():
    expected = redis.asyncio.Redis().get_retry()
    assert type(expected) is ORIGINAL_ASYNC_RETRY
    redis_backoff_c.patch()
    client = redis.asyncio.Redis()
    assert type(client.get_retry()) is C_ASYNC_RETRY
    _assert_c_equal(client.get_retry(), expected)
    connection = client.connection_pool.make_connection()
    assert type(connection.retry) is C_ASYNC_RETRY
    _assert_c_equal(connection.retry, expected)


@pytest.mark.parametrize("retry_on_timeout", [True, False])
def test_asyncio_connection_without_a_retry(retry_on_timeout):
    expected = redis.asyncio.Connection(retry_on_timeout=retry_on_timeout).retry
    redis_backoff_c.patch()
    retry = redis.asyncio.Connection(retry_on_timeout=retry_on_timeout).retry
    assert type(retry) is C_ASYNC_RETRY
    _assert_c_equal(retry, expected)


# redis-py 8.2 added both: a checker on the Retry (is_retryable=), and
# _to_async_retry, through which its asyncio clients pass every retry.
HAS_CHECKER = "is_retryable" in inspect.signature(ORIGINAL_RETRY.__init__).parameters
CONVERTS = hasattr(redis.asyncio.retry, "_to_async_retry")
ORIGINAL_TO_ASYNC_RETRY = getattr(redis.asyncio.retry, "_to_async_retry", None)


@pytest.mark.parametrize("where", ["Redis", "ConnectionPool", "set_retry"])
def test_asyncio_client_given_a_sync_retry(where, recwarn):
    redis_backoff_c.patch()
    given = redis.retry.Retry(redis.backoff.NoBackoff(), 2)  # the C sync Retry, patched
    assert type(given) is C_RETRY
    if where == "Redis":
        held = redis.asyncio.Redis(retry=given).get_retry()
    elif where == "ConnectionPool":
        held = redis.asyncio.ConnectionPool(retry=given).connection_kwargs["retry"]
    else:
        client = redis.asyncio.Redis()
        client.set_retry(given)
        held = client.get_retry()
    warned = [w for w in recwarn if "synchronous redis.retry.Retry" in str(w.message)]
    if CONVERTS:
        # 8.2 converts it, with its warning, into the Retry that
        # redis.asyncio.retry names: ours, while patched.
        assert [w.category for w in warned] == [UserWarning]
        assert type(held) is C_ASYNC_RETRY
        assert type(held._backoff) is C["NoBackoff"] and held._retries == 2
        assert set(held._supported_errors) == set(given._supported_errors)
    else:
        # Before 8.2 the asyncio clients keep whatever retry they are given.
        assert warned == []
        assert type(held) is C_RETRY and held == given


@pytest.mark.parametrize("where", ["Redis", "ConnectionPool", "set_retry"])
def test_a_sync_retry_converted_for_an_asyncio_client_keeps_its_extras(where, recwarn):
    # redis-py 8.2 builds the asyncio Retry from four fields; while patched
    # the conversion also carries the extras: the same objects.
    redis_backoff_c.patch()
    budget, stats = redis_backoff_c.RetryBudget(10, 0.1), redis_backoff_c.RetryStats()
    given = redis.retry.Retry(
        redis.backoff.NoBackoff(), 2, deadline=1.5, budget=budget, stats=stats
    )
    if where == "Redis":
        held = redis.asyncio.Redis(retry=given).get_retry()
    elif where == "ConnectionPool":
        held = redis.asyncio.ConnectionPool(retry=given).connection_kwargs["retry"]
    else:
        client = redis.asyncio.Redis()
        client.set_retry(given)
        held = client.get_retry()
    assert held.budget is budget and held.stats is stats and held.deadline == 1.5
    if CONVERTS:
        assert type(held) is C_ASYNC_RETRY
    redis_backoff_c.unpatch()
    assert getattr(redis.asyncio.retry, "_to_async_retry", None) is ORIGINAL_TO_ASYNC_RETRY


def test_asyncio_client_keeps_a_c_asyncio_retry(recwarn):
    # Kept, not converted: a conversion would build a Retry without the
    # extras (the client holds a copy, which shares them).
    redis_backoff_c.patch()
    stats = redis_backoff_c.RetryStats()
    given = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 2, stats=stats)
    assert type(given) is C_ASYNC_RETRY
    held = redis.asyncio.Redis(retry=given).get_retry()
    assert type(held) is C_ASYNC_RETRY and held == given and held.stats is stats
    assert [w for w in recwarn if "synchronous" in str(w.message)] == []


@pytest.mark.skipif(not HAS_CHECKER, reason="redis-py < 8.2: a Retry has no is_retryable")
def test_a_default_retry_keeps_its_checker():
    def checker(error):
        return True

    old = ORIGINAL_RETRY(ORIGINAL["NoBackoff"](), 2, is_retryable=checker)
    probe = _probe_module({"CHECKED": old, "plain": ORIGINAL_RETRY(ORIGINAL["NoBackoff"](), 2)})
    try:
        redis_backoff_c.patch()
        assert type(probe.CHECKED) is C_RETRY and probe.CHECKED._is_retryable is checker
        assert probe.CHECKED == old and old == probe.CHECKED
        assert type(probe.plain) is C_RETRY and probe.plain._is_retryable is None
        redis_backoff_c.unpatch()
        assert probe.CHECKED is old
    finally:
        redis_backoff_c.unpatch()
        del sys.modules[probe.__name__]


# --- unpatch(), idempotency, the context manager -----------------------------


def test_unpatch_restores_every_object():
    before = snapshot()
    report = redis_backoff_c.patch()
    patched = snapshot()
    changed = {key for key, value in before.items() if patched.get(key, value) is not value}
    assert len(changed) >= len(STRATEGIES)
    restored = redis_backoff_c.unpatch()
    assert sorted(restored) == sorted(report.replaced)
    assert_same(before, snapshot())
    for name in STRATEGIES:
        assert getattr(redis.backoff, name) is ORIGINAL[name]
    assert redis.retry.Retry is ORIGINAL_RETRY
    assert redis.asyncio.retry.Retry is ORIGINAL_ASYNC_RETRY
    assert redis.client.Retry is ORIGINAL_RETRY
    assert redis.client.ExponentialWithJitterBackoff is ORIGINAL["ExponentialWithJitterBackoff"]
    assert not any(type(f).__name__ == "_Finder" for f in sys.meta_path)


def test_unpatch_restores_the_defaults_by_identity():
    init = _unwrapped(redis.client.Redis.__init__)
    async_init = _unwrapped(redis.asyncio.client.Redis.__init__)
    defaults, kwdefaults = init.__defaults__, async_init.__kwdefaults__
    retry, async_retry = _default(init, "retry"), _default(async_init, "retry")
    backoff, async_backoff = retry._backoff, async_retry._backoff
    eq = vars(ORIGINAL["ExponentialBackoff"])["__eq__"]
    redis_backoff_c.patch()
    redis_backoff_c.unpatch()
    assert init.__defaults__ is defaults
    assert async_init.__kwdefaults__ is kwdefaults
    assert _default(init, "retry") is retry and retry._backoff is backoff
    assert _default(async_init, "retry") is async_retry and async_retry._backoff is async_backoff
    assert vars(ORIGINAL["ExponentialBackoff"])["__eq__"] is eq


def test_patch_is_idempotent():
    first = redis_backoff_c.patch()
    state = snapshot()
    second = redis_backoff_c.patch()
    assert second.already_patched is True and second.replaced == () and second.count == 0
    assert second.classes == first.classes
    assert_same(state, snapshot())
    assert sum(type(f).__name__ == "_Finder" for f in sys.meta_path) == 1
    assert redis_backoff_c.unpatch() != ()
    assert redis_backoff_c.unpatch() == ()


def test_unpatch_without_patch_is_a_no_op():
    before = snapshot()
    assert redis_backoff_c.unpatch() == ()
    assert_same(before, snapshot())


def test_context_manager():
    before = snapshot()
    with redis_backoff_c.patched() as report:
        assert report.active and redis_backoff_c.is_patched()
        assert redis.backoff.NoBackoff is C["NoBackoff"]
    assert not redis_backoff_c.is_patched()
    assert_same(before, snapshot())


def test_context_manager_restores_on_error():
    with pytest.raises(ZeroDivisionError), redis_backoff_c.patched():
        1 / 0  # noqa: B018
    assert not redis_backoff_c.is_patched()
    assert redis.backoff.NoBackoff is ORIGINAL["NoBackoff"]


def test_context_manager_inside_a_patch_leaves_it_patched():
    redis_backoff_c.patch()
    with redis_backoff_c.patched() as report:
        assert report.already_patched
    assert redis_backoff_c.is_patched()
    assert redis.backoff.NoBackoff is C["NoBackoff"]


def test_concurrent_patch_and_unpatch():
    before = snapshot()
    errors = []
    barrier = threading.Barrier(4)

    def work():
        try:
            barrier.wait()
            for _ in range(5):
                redis_backoff_c.patch()
                redis_backoff_c.unpatch()
                redis_backoff_c.patch()
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert redis_backoff_c.is_patched()
    assert redis.backoff.NoBackoff is C["NoBackoff"]
    redis_backoff_c.unpatch()
    assert_same(before, snapshot())


# --- Objects built before patch(), and the documented limits -----------------


def test_objects_built_before_patch_keep_working(monkeypatch):
    backoff = redis.backoff.ExponentialBackoff(cap=1.0, base=0.5)
    retry = redis.retry.Retry(backoff, 3)
    same = copy.deepcopy(retry)
    redis_backoff_c.patch()
    # redis-py's __eq__ still recognises its own objects (see _keep_equality).
    assert retry == same and backoff == same._backoff
    assert retry == copy.deepcopy(retry)
    for name in STRATEGIES:
        args = (0.25,) if name == "ConstantBackoff" else ()
        old, new = ORIGINAL[name](*args), C[name](*args)
        assert old == ORIGINAL[name](*args)
        assert old == new and new == old
    # And it still retries as redis-py does.
    slept = []
    monkeypatch.setattr(redis.retry, "sleep", slept.append)
    calls = []

    def do():
        calls.append(None)
        raise redis.exceptions.ConnectionError("down")

    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(do, lambda error: None)
    assert len(calls) == 4
    assert slept == [backoff.compute(n) for n in (1, 2, 3)]


def test_a_name_bound_by_a_from_import_before_patch_keeps_its_object():
    from redis.backoff import ExponentialBackoff as bound_before

    redis_backoff_c.patch()
    from redis.backoff import ExponentialBackoff as bound_after

    assert bound_before is ORIGINAL["ExponentialBackoff"]
    assert bound_after is C["ExponentialBackoff"]


def test_pickle_while_patched():
    """Documented: pickle looks classes up by name, and the names are C."""
    old = ORIGINAL["ExponentialBackoff"](cap=2.0, base=0.5)
    data = pickle.dumps(ORIGINAL_RETRY(old, 3))
    redis_backoff_c.patch()
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(old)
    loaded = pickle.loads(data)
    assert type(loaded._backoff) is C["ExponentialBackoff"]
    if C_RETRY is not None:
        assert type(loaded) is C_RETRY
    assert loaded == ORIGINAL_RETRY(old, 3)
    redis_backoff_c.unpatch()
    assert pickle.loads(pickle.dumps(old)) == old


def test_subclasses_are_left_alone():
    class Mine(ORIGINAL["ExponentialBackoff"]):
        pass

    probe = _probe_module({"mine": Mine(), "mine_class": Mine})
    try:
        redis_backoff_c.patch()
        assert type(probe.mine) is Mine and probe.mine_class is Mine
    finally:
        redis_backoff_c.unpatch()
        del sys.modules[probe.__name__]


# --- Where defaults can be held: a probe module named redis.* ----------------


def _probe_module(namespace):
    module = types.ModuleType("redis._rbc_patch_probe")
    module.__dict__.update(namespace)
    sys.modules[module.__name__] = module
    return module


def _build_probe():
    module = types.ModuleType("redis._rbc_patch_probe")
    shared = ORIGINAL_RETRY(ORIGINAL["ExponentialBackoff"](cap=2.0, base=0.25), 5)
    source = """
import dataclasses, functools
from redis.backoff import DecorrelatedJitterBackoff, NoBackoff, ConstantBackoff
from redis.retry import Retry

GLOBAL = DecorrelatedJitterBackoff(cap=3.0, base=0.5)
GLOBAL._previous_backoff = 1.25

def decorate(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper

def plain(backoff=ConstantBackoff(0.125), *, retry=SHARED):
    return backoff, retry

class Holder:
    backoff_class = NoBackoff
    attribute = SHARED

    @decorate
    def __init__(self, retry=SHARED):
        self.retry = retry

    @staticmethod
    def static(backoff=NoBackoff()):
        return backoff

    @classmethod
    def klass(cls, *, backoff=NoBackoff()):
        return backoff

    @property
    def prop(self, backoff=NoBackoff()):
        return backoff

    class Inner:
        inner = ConstantBackoff(7)

@dataclasses.dataclass
class Config:
    retry: Retry = SHARED
"""
    module.__dict__["SHARED"] = shared
    sys.modules[module.__name__] = module
    exec(compile(source, "<redis._rbc_patch_probe>", "exec"), module.__dict__)
    # What the source defines belongs to the probe (its __name__); what it
    # imported keeps its own module.
    assert module.Holder.__module__ == module.plain.__module__ == module.__name__
    assert module.Retry.__module__ == "redis.retry"
    return module


@pytest.fixture
def probe():
    module = _build_probe()
    yield module
    redis_backoff_c.unpatch()
    del sys.modules[module.__name__]


def test_every_kind_of_holder(probe):
    before = snapshot()
    shared = probe.SHARED
    redis_backoff_c.patch()
    new_shared = probe.SHARED
    assert type(new_shared._backoff) is C["ExponentialBackoff"]
    assert new_shared == shared and new_shared._retries == 5
    if C_RETRY is not None:
        assert type(new_shared) is C_RETRY
        # One object held in several places stays one object.
        assert probe.Holder.attribute is new_shared
        assert _default(probe.Holder.__init__, "retry") is new_shared
        assert probe.plain.__kwdefaults__["retry"] is new_shared
        assert probe.Config.retry is new_shared
        assert probe.Config.__dataclass_fields__["retry"].default is new_shared
        assert _default(probe.Config.__init__, "retry") is new_shared
        assert probe.Config().retry is new_shared
    else:
        assert new_shared is shared  # the Retry stays; its backoff is C
    assert type(probe.GLOBAL) is C["DecorrelatedJitterBackoff"]
    assert probe.GLOBAL._previous_backoff == 1.25 and probe.GLOBAL._cap == 3.0
    assert type(probe.plain()[0]) is C["ConstantBackoff"] and probe.plain()[0]._backoff == 0.125
    assert probe.Holder.backoff_class is C["NoBackoff"]
    assert type(probe.Holder.static()) is C["NoBackoff"]
    assert type(probe.Holder.klass()) is C["NoBackoff"]
    assert type(vars(probe.Holder)["prop"].fget.__defaults__[0]) is C["NoBackoff"]
    assert type(probe.Holder.Inner.inner) is C["ConstantBackoff"]
    redis_backoff_c.unpatch()
    assert_same(before, snapshot())
    assert probe.SHARED is shared and shared._backoff.__class__ is ORIGINAL["ExponentialBackoff"]


# --- Fresh interpreters: import order, the import hook, the fallback ---------


def _run(code, **env):
    environment = {**os.environ, **env}
    result = subprocess.run(
        # -I: the installed package, never the checkout in the working directory.
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


HOOK_PROBE = """
import importlib, inspect, json, sys
import redis_backoff_c
import redis_backoff_c.backoff as cb
{before}
assert "redis.http.http_client" not in sys.modules
report = redis_backoff_c.patch()
module = importlib.import_module("redis.http.http_client")
init = inspect.unwrap(module.HttpClient.__init__)
retry = inspect.signature(init).parameters["retry"].default
patched = {{
    "retry": type(retry).__module__ + "." + type(retry).__qualname__,
    "backoff": type(retry._backoff).__module__ + "." + type(retry._backoff).__qualname__,
    "binding": module.ExponentialWithJitterBackoff is cb.ExponentialWithJitterBackoff,
    "loader": type(module.__loader__).__name__,
    "spec_loader": type(module.__spec__.loader).__name__,
}}
restored = redis_backoff_c.unpatch()
import redis.backoff, redis.retry
retry_after = inspect.signature(init).parameters["retry"].default
print(json.dumps({{
    "patched": patched,
    "restored_here": [r for r in restored if r.startswith("redis.http.")],
    "after_retry": type(retry_after) is redis.retry.Retry,
    "after_backoff": type(retry_after._backoff) is redis.backoff.ExponentialWithJitterBackoff,
    "after_binding": (
        module.ExponentialWithJitterBackoff is redis.backoff.ExponentialWithJitterBackoff
    ),
    "equal": retry_after == retry and retry == retry_after,
    "hooks": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "_Finder"],
}}))
"""


@pytest.mark.parametrize("before", ["", "import redis.client, redis.asyncio"])
def test_a_redis_module_imported_after_patch(before):
    """redis.http is not imported by ``import redis``: the import hook
    treats it when it is imported after patch()."""
    result = _run(HOOK_PROBE.format(before=before))
    patched = result["patched"]
    assert patched["backoff"] == "redis_backoff_c.ExponentialWithJitterBackoff"
    if C_RETRY is not None:
        assert patched["retry"] == f"{C_RETRY.__module__}.{C_RETRY.__qualname__}"
    assert patched["binding"] is True
    # The module keeps its real loader, not the hook's wrapper.
    assert patched["loader"] == patched["spec_loader"] == "SourceFileLoader"
    assert result["restored_here"]
    assert result["after_retry"] and result["after_backoff"] and result["after_binding"]
    assert result["equal"]
    assert result["hooks"] == []


def test_after_unpatch_the_hook_is_gone():
    result = _run(
        """
import inspect, json, sys
import redis_backoff_c
redis_backoff_c.patch(); redis_backoff_c.unpatch()
import redis.http.http_client as module, redis.backoff, redis.retry
init = inspect.unwrap(module.HttpClient.__init__)
retry = inspect.signature(init).parameters["retry"].default
print(json.dumps([type(retry) is redis.retry.Retry,
                  type(retry._backoff) is redis.backoff.ExponentialWithJitterBackoff]))
"""
    )
    assert result == [True, True]


def test_fallback_patch_is_a_no_op():
    result = _run(
        """
import json, sys, warnings
warnings.simplefilter("ignore")
import redis.backoff, redis.retry
originals = (redis.backoff.ExponentialBackoff, redis.retry.Retry)
hooks = list(sys.meta_path)
import redis_backoff_c
report = redis_backoff_c.patch()
print(json.dumps({
    "implementation": report.implementation,
    "active": report.active,
    "replaced": list(report.replaced),
    "classes": dict(report.classes),
    "missing": sorted(report.missing),
    "reason": sorted(set(report.missing.values())),
    "is_patched": redis_backoff_c.is_patched(),
    "same": (redis.backoff.ExponentialBackoff, redis.retry.Retry) == originals,
    "hooks": sys.meta_path == hooks,
    "unpatch": list(redis_backoff_c.unpatch()),
}))
""",
        REDIS_BACKOFF_C_DISABLE="1",
    )
    assert result["implementation"] == "python"
    assert result["active"] is False and result["is_patched"] is False
    assert result["replaced"] == [] and result["classes"] == {}
    assert "redis.retry.Retry" in result["missing"]
    assert "redis.backoff.ExponentialBackoff" in result["missing"]
    assert len(result["reason"]) == 1 and "REDIS_BACKOFF_C_DISABLE" in result["reason"][0]
    assert result["same"] and result["hooks"]
    assert result["unpatch"] == []


def test_exported():
    for name in ("patch", "unpatch", "patched", "is_patched", "PatchReport"):
        assert name in redis_backoff_c.__all__
        assert getattr(redis_backoff_c, name) is getattr(
            importlib.import_module("redis_backoff_c._patch"), name
        )


# --- patch(deadline=, budget=, stats=) -------------------------------------


def _extras(retry):
    return (retry.deadline, retry.budget, retry.stats)


def test_patch_gives_the_default_retries_the_extras():
    budget, stats = redis_backoff_c.RetryBudget(10, 0.1), redis_backoff_c.RetryStats()
    before = _default(redis.client.Redis.__init__, "retry")
    async_before = _default(redis.asyncio.client.Redis.__init__, "retry")
    redis_backoff_c.patch(deadline=2.5, budget=budget, stats=stats)
    sync_default = _default(redis.client.Redis.__init__, "retry")
    async_default = _default(redis.asyncio.client.Redis.__init__, "retry")
    assert _extras(sync_default) == (2.5, budget, stats)
    assert _extras(async_default) == (2.5, budget, stats)
    # what redis-py's own object was, apart from the extras
    plain = copy.copy(sync_default)
    plain.deadline = plain.budget = plain.stats = None
    _assert_c_equal(plain, before)
    # every client and connection built from the defaults shares them
    for client in (redis.Redis(), redis.asyncio.Redis()):
        connection = client.connection_pool.make_connection()
        assert _extras(connection.retry) == (2.5, budget, stats)
    redis_backoff_c.unpatch()
    assert _default(redis.client.Redis.__init__, "retry") is before
    assert _default(redis.asyncio.client.Redis.__init__, "retry") is async_before
    assert not hasattr(type(before), "budget")


def test_patched_client_counts_and_honours_the_deadline():
    stats = redis_backoff_c.RetryStats()
    with redis_backoff_c.patched(deadline=0.2, stats=stats):
        client = redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=0.5)
        start = time.monotonic()
        with pytest.raises(redis.exceptions.ConnectionError):
            client.ping()
        elapsed = time.monotonic() - start
        client.close()
    # redis-py's default: 10 retries, up to 1 s apart; the deadline cut it
    assert elapsed < 0.2 + 0.5 + 0.2
    snapshot = stats.snapshot()
    assert snapshot["calls"] >= 1 and snapshot["failed_attempts"] >= 2
    assert snapshot["give_ups_deadline"] >= 1


def test_repeated_patch_with_extras_sets_them_without_leaves_them():
    budget, other = redis_backoff_c.RetryBudget(10, 0.1), redis_backoff_c.RetryBudget(4, 1)
    redis_backoff_c.patch(budget=budget)
    default = _default(redis.client.Redis.__init__, "retry")
    report = redis_backoff_c.patch()
    assert report.already_patched and report.count == 0
    assert default.budget is budget  # no extras given: kept
    redis_backoff_c.patch(budget=other, deadline=1)
    assert _default(redis.client.Redis.__init__, "retry") is default
    assert _extras(default) == (1, other, None)
    assert _extras(_default(redis.asyncio.client.Redis.__init__, "retry")) == (1, other, None)


def test_plain_patch_installs_plain_retries():
    redis_backoff_c.patch()
    assert _extras(_default(redis.client.Redis.__init__, "retry")) == (None, None, None)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"deadline": "1"}, TypeError, "deadline"),
        ({"deadline": 0}, ValueError, "deadline"),
        ({"budget": 10}, TypeError, "budget"),
        ({"stats": object()}, TypeError, "stats"),
        ({"writes": "at_most_once"}, ValueError, "writes"),
        ({"writes": 1}, TypeError, "writes"),
        ({"on_retry": 1}, TypeError, "on_retry"),
        ({"on_give_up": "print"}, TypeError, "on_give_up"),
    ],
)
def test_patch_refuses_bad_extras_before_patching(kwargs, error, name):
    with pytest.raises(error, match=rf"patch\(\) argument '{name}'"):
        redis_backoff_c.patch(**kwargs)
    assert not redis_backoff_c.is_patched()


def _closed_port():
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_patch_writes_at_most_once():
    import redis.asyncio.connection
    import redis.connection

    sync_send = vars(redis.connection.AbstractConnection)["send_packed_command"]
    async_send = vars(redis.asyncio.connection.AbstractConnection)["send_packed_command"]
    report = redis_backoff_c.patch(writes="at-most-once")
    for client in (redis.Redis(), redis.asyncio.Redis()):
        assert client.get_retry().writes == "at-most-once"
        connection = client.connection_pool.make_connection()
        assert connection.retry.writes == "at-most-once"  # the deep copy keeps it
    # the check before a write on a held connection (redis_backoff_c.writes)
    # over the deadline's bound of the write (redis_backoff_c._call_deadline)
    guarded = vars(redis.connection.AbstractConnection)["send_packed_command"]
    assert guarded._redis_backoff_c_guard is True
    assert guarded._redis_backoff_c_wraps._redis_backoff_c_wraps is sync_send
    async_guarded = vars(redis.asyncio.connection.AbstractConnection)["send_packed_command"]
    assert async_guarded._redis_backoff_c_guard is True
    assert async_guarded._redis_backoff_c_wraps._redis_backoff_c_wraps is async_send
    assert "redis.connection.AbstractConnection.send_packed_command" in report.replaced
    # patch() given the extras again sets them; at-least-once unsets it
    redis_backoff_c.patch(writes="at-least-once")
    assert redis.Redis().get_retry().writes == "at-least-once"
    assert _default(redis.client.Redis.__init__, "retry").writes == "at-least-once"
    redis_backoff_c.unpatch()
    assert vars(redis.connection.AbstractConnection)["send_packed_command"] is sync_send
    assert vars(redis.asyncio.connection.AbstractConnection)["send_packed_command"] is async_send


def test_plain_patch_leaves_the_writes_alone():
    import redis.connection

    send = vars(redis.connection.AbstractConnection)["send_packed_command"]
    redis_backoff_c.patch()
    assert redis.Redis().get_retry().writes == "at-least-once"
    # The deadline's bound of the write (redis_backoff_c._call_deadline),
    # right over redis-py's: no EOF check of the writes' policy.
    patched = vars(redis.connection.AbstractConnection)["send_packed_command"]
    assert patched._redis_backoff_c_bounds is True
    assert not hasattr(patched, "_redis_backoff_c_guard")
    assert patched._redis_backoff_c_wraps is send


def test_patched_client_calls_the_hooks():
    """patch(on_retry=, on_give_up=): the default Retry of every client and
    connection carries them, and a real connection failure calls them."""
    events = []

    def on_retry(event):
        events.append(("retry", event.attempt, type(event.error).__name__))

    def on_give_up(event):
        events.append(("give_up", event.attempt, event.reason))

    with redis_backoff_c.patched(on_retry=on_retry, on_give_up=on_give_up):
        client = redis.Redis(host="127.0.0.1", port=_closed_port(), socket_connect_timeout=0.5)
        retry = client.connection_pool.make_connection().retry
        assert (retry.on_retry, retry.on_give_up) == (on_retry, on_give_up)
        retry.update_retries(2)  # this connection's copy only
        client.get_retry().update_retries(2)
        with pytest.raises(redis.exceptions.ConnectionError):
            client.ping()
        client.close()
    assert not hasattr(_default(redis.client.Redis.__init__, "retry"), "on_retry")  # redis-py's
    retries = [e for e in events if e[0] == "retry"]
    assert retries and all(kind == "ConnectionError" for _, _, kind in retries)
    assert events[-1] == ("give_up", 3, "exhausted")
