"""What inspect, and redis-py's asyncio clients through it, see of the
asyncio Retry's call_with_retry, on redis-py and on the C type alike.

redis-py 8.2's asyncio clients (client, cluster, connection and pools,
multidb) pass every retry through redis.asyncio.retry._to_async_retry,
which keeps a retry only when inspect.iscoroutinefunction(
type(retry).call_with_retry) is true, and converts any other retry to the
Retry that module names, with a UserWarning.  redis-py's call_with_retry is
an ``async def``; the C one must look like one to inspect on both of its
designs (redis_backoff_c.asyncio.retry.DESIGN), whatever it is underneath,
and must still be callable every way an ``async def`` method is.
tests/c_only/test_async_designs.py runs this file on the other design.
"""

import asyncio
import contextlib
import inspect
import pickle
import warnings

import pytest
import redis.asyncio
import redis.asyncio.retry
import redis.exceptions
from support import Conn

import redis_backoff_c
import redis_backoff_c.asyncio.retry

# redis-py 8.2 added _to_async_retry; before it, the asyncio clients took
# any retry as given, which test_asyncio_clients_keep_the_retry checks on
# every release.
to_async_retry = getattr(redis.asyncio.retry, "_to_async_retry", None)
needs_to_async_retry = pytest.mark.skipif(
    to_async_retry is None,
    reason="redis-py < 8.2 has no _to_async_retry: its asyncio clients keep any retry",
)


def shape(signature):
    """The parameters' names, kinds and defaults.  Not their annotations:
    each side spells its own types (its own TypeVar, for one)."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def new_retry(side, retries=2):
    return side.asyncio_retry.Retry(side.backoff.NoBackoff(), retries)


def introspection(side):
    Retry = side.asyncio_retry.Retry
    bound = new_retry(side).call_with_retry
    return {
        "class": inspect.iscoroutinefunction(Retry.call_with_retry),
        "type(retry)": inspect.iscoroutinefunction(type(bound.__self__).call_with_retry),
        "bound": inspect.iscoroutinefunction(bound),
        "signature": shape(inspect.signature(Retry.call_with_retry)),
        "bound signature": shape(inspect.signature(bound)),
        "name": Retry.call_with_retry.__name__,
        "qualname": Retry.call_with_retry.__qualname__,
        "bound method": inspect.ismethod(bound),
    }


def test_call_with_retry_is_a_coroutine_function(impl, reference):
    seen = introspection(impl)
    assert seen["class"] and seen["type(retry)"] and seen["bound"]
    assert seen == introspection(reference)


def test_call_with_retry_has_a_docstring(impl):
    assert "do" in impl.asyncio_retry.Retry.call_with_retry.__doc__


def test_unbound_call_with_retry_pickles_by_reference(impl):
    method = impl.asyncio_retry.Retry.call_with_retry
    assert pickle.loads(pickle.dumps(method)) is method


# ---------------------------------------------------------------------------
# Called every way an async def method can be


class Flaky:
    """do(): ConnectionError once, then "ok"; fail() records its arguments."""

    def __init__(self):
        self.events = []

    async def do(self):
        self.events.append("do")
        if self.events.count("do") == 1:
            raise Conn("down")
        return "ok"

    async def fail(self, error, *count):
        self.events.append(("fail", type(error).__name__, *count))


def call_forms(Retry, retry, flaky):
    do, fail = flaky.do, flaky.fail
    return {
        "bound": lambda: retry.call_with_retry(do, fail),
        "bound object kept": lambda: (lambda method: method(do, fail))(retry.call_with_retry),
        "unbound": lambda: Retry.call_with_retry(retry, do, fail),
        "unbound, every argument": lambda: Retry.call_with_retry(retry, do, fail, None, True),
        "unbound, keywords": lambda: Retry.call_with_retry(
            retry, do=do, fail=fail, with_failure_count=True
        ),
        "self by keyword": lambda: Retry.call_with_retry(self=retry, do=do, fail=fail),
        "through __get__": lambda: inspect.getattr_static(Retry, "call_with_retry").__get__(
            retry, Retry
        )(do, fail),
        "star-args": lambda: Retry.call_with_retry(*(retry, do), **{"fail": fail}),
    }


FORMS = list(call_forms(None, None, Flaky()))


def form_outcome(side, form, subclass=False):
    Retry = side.asyncio_retry.Retry
    if subclass:
        Retry = type("SubRetry", (Retry,), {})
    retry = Retry(side.backoff.NoBackoff(), 2)
    flaky = Flaky()

    async def run():
        return await call_forms(Retry, retry, flaky)[form]()

    return asyncio.run(run()), flaky.events


@pytest.mark.parametrize("subclass", [False, True], ids=["Retry", "subclass"])
@pytest.mark.parametrize("form", FORMS)
def test_every_call_form_runs_the_retry(impl, reference, form, subclass):
    seen = form_outcome(impl, form, subclass)
    assert seen[0] == "ok"
    assert seen == form_outcome(reference, form, subclass)


# ---------------------------------------------------------------------------
# redis-py 8.2's _to_async_retry


def patched_or_not(patched):
    return redis_backoff_c.patched() if patched else contextlib.nullcontext()


@needs_to_async_retry
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_to_async_retry_keeps_an_asyncio_retry(impl, patched):
    retry = new_retry(impl)
    with patched_or_not(patched), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert to_async_retry(retry) is retry


@needs_to_async_retry
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_to_async_retry_converts_a_sync_retry(impl, reference, patched):
    backoff = impl.backoff.ExponentialBackoff(cap=1, base=0.01)
    retry = impl.retry.Retry(backoff, 4, (Conn, OSError))
    # The conversion builds the Retry that redis.asyncio.retry names: its
    # own, or ours while patched.
    expected = redis_backoff_c.asyncio.retry.Retry if patched else reference.asyncio_retry.Retry
    with patched_or_not(patched):
        with pytest.warns(UserWarning, match="A synchronous redis.retry.Retry was passed"):
            converted = to_async_retry(retry)
    assert type(converted) is expected
    assert converted._backoff is backoff
    assert converted._retries == 4
    assert set(converted._supported_errors) == {Conn, OSError}
    assert converted._is_retryable is None


@needs_to_async_retry
@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_to_async_retry_keeps_the_sync_retry_checker(impl, reference, patched):
    def checker(error):
        return True

    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1, is_retryable=checker)
    with patched_or_not(patched):
        with pytest.warns(UserWarning):
            converted = to_async_retry(retry)
    assert converted._is_retryable is checker


@needs_to_async_retry
def test_to_async_retry_leaves_other_objects(impl):
    other = object()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert to_async_retry(other) is other
        assert to_async_retry(None) is None


@pytest.mark.parametrize("patched", [False, True], ids=["unpatched", "patched"])
def test_asyncio_clients_keep_the_retry(impl, patched):
    # Every redis-py release: a client, a pool and a connection given an
    # asyncio Retry hold it (or an equal copy of it), and nothing warns.
    # Nothing connects here.
    retry = new_retry(impl, retries=3)
    other = new_retry(impl, retries=5)
    with patched_or_not(patched), warnings.catch_warnings():
        warnings.simplefilter("error")
        client = redis.asyncio.Redis(retry=retry)
        pool = redis.asyncio.ConnectionPool(retry=retry)
        connection = redis.asyncio.Connection(retry=retry)
        client.set_retry(other)
        held = [client.get_retry(), pool.connection_kwargs["retry"], connection.retry]
    assert [type(kept) for kept in held] == [type(retry)] * 3
    assert held == [other, retry, retry]
