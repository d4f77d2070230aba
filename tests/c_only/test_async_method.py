"""The C asyncio Retry's call_with_retry as an object (C side only).

In the awaitable design it is an async_method (csrc/async_method.c): a C
method that the interpreter calls as it calls a method_descriptor, and that
answers inspect from the coroutine design's ``async def`` (its "template"),
so that redis-py 8.2's _to_async_retry keeps our Retry.  The shared
behaviour (inspect, the call forms, _to_async_retry) is in
tests/contract/test_async_retry_introspection.py; here, what only ours has.
"""

import asyncio
import inspect
import pickle
import pydoc

import pytest
import redis.asyncio.retry
import redis.exceptions
from support import ignore_failure

import redis_backoff_c.asyncio._coroutine as coroutine_design
import redis_backoff_c.asyncio.retry as async_module
import redis_backoff_c.backoff as backoff
import redis_backoff_c.retry
from redis_backoff_c.asyncio.retry import Retry

awaitable_only = pytest.mark.async_design("awaitable")

# Py_TPFLAGS_METHOD_DESCRIPTOR (Include/object.h): the interpreter calls
# such a descriptor unbound, meth(obj, *args), without a bound method.
METHOD_DESCRIPTOR = 1 << 17


async def do():
    return "ok"


def run(awaitable_factory):
    async def main():
        return await awaitable_factory()

    return asyncio.run(main())


@pytest.mark.parametrize(
    "self",
    [
        1,
        redis_backoff_c.retry.Retry(backoff.NoBackoff(), 1),
        redis.asyncio.retry.Retry(backoff.NoBackoff(), 1),
    ],
    ids=["int", "sync C Retry", "redis-py asyncio Retry"],
)
def test_unbound_call_refuses_another_self(self):
    # TypeError at the call (the C method) or when awaited (the coroutine
    # design's checks): either way, from the await expression.
    with pytest.raises(TypeError):
        run(lambda: Retry.call_with_retry(self, do, ignore_failure))


def test_unbound_call_without_self_is_a_type_error():
    with pytest.raises(TypeError):
        run(lambda: Retry.call_with_retry())
    with pytest.raises(TypeError):
        run(lambda: Retry.call_with_retry(do=do, fail=ignore_failure))


def test_unknown_keyword_is_a_type_error():
    retry = Retry(backoff.NoBackoff(), 1)
    with pytest.raises(TypeError, match="nope"):
        run(lambda: Retry.call_with_retry(retry, do, ignore_failure, nope=1))
    with pytest.raises(TypeError):
        run(lambda: Retry.call_with_retry(retry, do, ignore_failure, self=retry))


def test_help_renders():
    assert "call_with_retry" in pydoc.render_doc(Retry)


@awaitable_only
def test_the_method_is_a_c_method_descriptor():
    method = vars(Retry)["call_with_retry"]
    assert not inspect.isfunction(method)
    assert type(method).__flags__ & METHOD_DESCRIPTOR
    assert inspect.ismethoddescriptor(method)
    with pytest.raises(TypeError):
        type(method)()
    assert method.__get__(None, Retry) is method
    retry = Retry(backoff.NoBackoff(), 1)
    bound = method.__get__(retry, Retry)
    assert inspect.ismethod(bound) and bound.__func__ is method and bound.__self__ is retry
    assert retry.call_with_retry == bound
    assert method.__objclass__ is Retry
    assert method.__module__ == "redis_backoff_c.asyncio.retry"
    assert repr(method) == (
        "<async method 'call_with_retry' of 'redis_backoff_c.asyncio.retry.Retry' objects>"
    )


@awaitable_only
def test_the_method_answers_inspect_from_its_async_def():
    method = vars(Retry)["call_with_retry"]
    template = coroutine_design.call_with_retry
    assert method.__code__ is template.__code__
    assert method.__defaults__ == template.__defaults__ == (None, False)
    assert method.__kwdefaults__ is None
    assert method.__annotations__ == template.__annotations__
    assert method.__globals__ is template.__globals__
    assert method.__doc__ == template.__doc__
    assert (method.__name__, method.__qualname__) == ("call_with_retry", "Retry.call_with_retry")


@awaitable_only
@pytest.mark.parametrize(
    "template",
    [lambda self: None, len, "call_with_retry"],
    ids=["def", "builtin", "str"],
)
def test_present_as_takes_only_an_async_def(template):
    method = vars(Retry)["call_with_retry"]
    with pytest.raises(TypeError, match="async def"):
        method._present_as(template)
    assert method.__code__ is coroutine_design.call_with_retry.__code__


@awaitable_only
def test_the_method_pickles_as_a_reference():
    method = vars(Retry)["call_with_retry"]
    assert method.__reduce__() == (getattr, (Retry, "call_with_retry"))
    retry = Retry(backoff.NoBackoff(), 1)
    copy = pickle.loads(pickle.dumps(retry.call_with_retry))
    assert copy.__func__ is method and copy.__self__ == retry


def test_design_still_runs_calls():
    # The method object changed, not what a call does: one success and one
    # retried failure, through the design in use.
    retry = Retry(backoff.NoBackoff(), 2)
    attempts = []

    async def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise redis.exceptions.ConnectionError("down")
        return async_module.DESIGN

    assert run(lambda: retry.call_with_retry(flaky, ignore_failure)) == async_module.DESIGN
    assert len(attempts) == 2
