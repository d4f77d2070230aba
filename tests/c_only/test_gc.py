"""Reference cycles through the C objects are found and freed by the cyclic
garbage collector (C side only): every C type traverses the objects it
holds and clears them.

Each test builds a cycle, drops it, runs gc.collect() and proves that the
objects are gone: through a weak reference, or by counting the live
instances of an exact C type (which takes no weak references)."""

import gc
import weakref

import pytest
import redis.exceptions
from support import ALL, CAPPED

import redis_backoff_c.backoff as backoff
import redis_backoff_c.retry as retry_module
from redis_backoff_c.retry import Retry


class Number(float):
    """A real number that can hold a reference (and be weakly referenced)."""


def instances(cls):
    return sum(1 for obj in gc.get_objects() if type(obj) is cls)


def new(name):
    cls = getattr(backoff, name)
    return cls(0.5) if name == "ConstantBackoff" else cls()


def assert_collected(ref):
    gc.collect()
    assert ref() is None, "the cycle was not collected"


@pytest.mark.parametrize("name", ALL)
def test_subclass_referring_to_itself(name):
    cls = type("Sub", (getattr(backoff, name),), {})
    strategy = cls(0.5) if name == "ConstantBackoff" else cls()
    strategy.me = strategy
    ref = weakref.ref(strategy)
    del strategy
    assert_collected(ref)


@pytest.mark.parametrize("name", ["ConstantBackoff"] + CAPPED)
def test_cycle_through_a_parameter_of_an_exact_type(name):
    cls = getattr(backoff, name)
    gc.collect()
    before = instances(cls)
    number = Number(0.25)
    strategy = cls(number) if name == "ConstantBackoff" else cls(number, number)
    number.strategy = strategy  # strategy -> _cap/_base/_backoff -> number -> strategy
    ref = weakref.ref(number)
    del strategy, number
    assert_collected(ref)
    assert instances(cls) == before


def test_cycle_through_previous_backoff():
    cls = backoff.DecorrelatedJitterBackoff
    gc.collect()
    before = instances(cls)
    strategy = cls()
    number = Number(0.0)
    strategy._previous_backoff = number
    number.strategy = strategy
    ref = weakref.ref(number)
    del strategy, number
    assert_collected(ref)
    assert instances(cls) == before


def test_finaliser_in_a_cycle_may_use_the_strategy():
    seen = []

    class Finalised(Number):
        def __del__(self):
            seen.append(self.strategy.compute(3))

    number = Finalised(0.5)
    number.strategy = backoff.ExponentialBackoff(number, 0.01)
    del number
    gc.collect()
    assert seen == [0.08]


class PicklableSub(backoff.ExponentialBackoff):
    pass


def test_copies_of_a_cycle_are_collected():
    import copy
    import pickle

    strategy = PicklableSub(1.0, 0.5)
    strategy.me = strategy
    copies = [copy.copy(strategy), copy.deepcopy(strategy), pickle.loads(pickle.dumps(strategy))]
    assert copies[1].me is copies[1]
    refs = [weakref.ref(obj) for obj in [strategy, *copies]]
    del strategy, copies
    gc.collect()
    assert [ref() for ref in refs] == [None] * 4


# ---- through the Retry ----


def test_strategy_subclass_referring_to_its_retry():
    strategy = type("Sub", (backoff.ExponentialBackoff,), {})()
    retry = Retry(strategy, 3)
    strategy.retry = retry  # retry -> _backoff -> strategy -> retry
    refs = [weakref.ref(retry), weakref.ref(strategy)]
    del strategy, retry
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_supported_error_class_referring_to_its_retry():
    error = type("Failure", (redis.exceptions.ConnectionError,), {})
    retry = Retry(backoff.NoBackoff(), 3, (error,))
    error.retry = retry  # retry -> _supported_errors -> class -> retry
    refs = [weakref.ref(retry), weakref.ref(error)]
    del error, retry
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_do_closure_referring_to_the_retry(monkeypatch):
    monkeypatch.setattr(retry_module, "sleep", lambda delay: None)

    def build():
        sub = type("RetryWithState", (Retry,), {})
        retry = sub(backoff.ExponentialBackoff(), 2)
        retry.errors = []

        def do():
            # The closure holds the Retry; the errors, kept by the Retry,
            # hold this frame through their tracebacks.
            raise redis.exceptions.ConnectionError(retry)

        retry.do = do
        with pytest.raises(redis.exceptions.ConnectionError):
            retry.call_with_retry(do, retry.errors.append)
        assert len(retry.errors) == 3
        return [weakref.ref(retry), weakref.ref(do)]

    refs = build()
    gc.collect()
    assert [ref() for ref in refs] == [None, None]


def test_retry_of_exact_type_in_a_cycle():
    def build():
        strategy = type("Sub", (backoff.NoBackoff,), {})()
        retry = Retry(strategy, 1)
        strategy.retry = retry

        def do():
            return retry

        strategy.do = do
        assert retry.call_with_retry(do, print) is retry
        return weakref.ref(strategy)

    gc.collect()
    before = instances(Retry)
    ref = build()
    assert_collected(ref)
    assert instances(Retry) == before


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_checker_referring_to_its_retry(flavor):
    from redis_backoff_c.asyncio.retry import Retry as AsyncRetry

    cls = Retry if flavor == "sync" else AsyncRetry

    def build():
        retry = cls(backoff.NoBackoff(), 3)

        def checker(error):  # retry -> _is_retryable -> closure -> retry
            return retry is not None

        retry.is_retryable = checker
        assert checker in gc.get_referents(retry)
        return weakref.ref(checker)

    gc.collect()
    before = instances(cls)
    assert_collected(build())
    assert instances(cls) == before


def test_a_hook_referring_to_its_retry():
    """on_retry holds its Retry (a bound method of an object that holds it):
    the block's traverse visits the hooks."""

    class Owner:
        def hook(self, event):
            pass

    owner = Owner()
    owner.retry = Retry(backoff.NoBackoff(), 1, on_retry=owner.hook, on_give_up=owner.hook)
    ref = weakref.ref(owner)
    del owner
    assert_collected(ref)


def test_a_second_module_instance_is_freed_after_a_hook_ran():
    """The event a hook let go waits for reuse holding no reference (not even
    to its type): the module of a second _speedups instance (as a
    subinterpreter has) is still collected."""
    import importlib.util

    spec = importlib.util.find_spec("redis_backoff_c._speedups")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failed = []

    def do():
        if not failed:
            failed.append(1)
            raise redis.exceptions.ConnectionError("once")
        return 1

    retry = module.Retry(backoff.NoBackoff(), 1, on_retry=lambda event: None)
    assert retry.call_with_retry(do, lambda error: None) == 1
    ref = weakref.ref(module)
    del module, retry, spec
    assert_collected(ref)
