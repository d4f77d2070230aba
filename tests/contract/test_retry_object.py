"""The Retry object, both flavors alike: construction, attributes, ==, hash,
isinstance, copy, deepcopy, pickle, and the Retry's own checker.

Every test runs over flavor (the sync Retry, the asyncio one) x
implementation (redis-py, the C type), or over flavor with both sides
compared.  The two flavors differ in data alone here: their default
supported errors (the sync Retry adds socket.timeout) and the redis-py
class they stand in for.
"""

import copy
import gc
import itertools
import pickle
import weakref

import pytest
import redis.backoff
import redis.exceptions
import redis.retry
from scenarios import RecordingBackoff
from support import (
    FLAVORS,
    IMPLEMENTATIONS,
    REDIS_PY_HAS_CHECKER,
    CallableChecker,
    always,
    never,
    side_without_checker,
)

# ---- construction and attributes ----


def test_constructor_defaults_positional_and_keywords(flavor, impl):
    Retry = flavor.Retry(impl)
    backoff = impl.backoff.NoBackoff()
    retry = Retry(backoff, 3)
    assert retry._backoff is backoff
    assert retry._retries == 3 and retry.get_retries() == 3
    assert type(retry._supported_errors) is tuple
    assert retry._supported_errors == flavor.default_errors
    keywords = Retry(retries=2, backoff=backoff, supported_errors=(KeyError,))
    assert (keywords._retries, keywords._supported_errors) == (2, (KeyError,))
    assert Retry(backoff, -1, (OSError,))._supported_errors == (OSError,)
    with pytest.raises(TypeError):
        Retry(backoff)
    with pytest.raises(TypeError):  # four from redis-py 8.2 on (is_retryable), never five
        Retry(backoff, 1, (), None, 4)


def test_attributes_writable_with_effect(flavor, impl, monkeypatch):
    sleeps = flavor.patch_sleep(impl, monkeypatch)
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 0)
    retry._retries = 2
    retry._backoff = impl.backoff.ConstantBackoff(0.5)
    retry._supported_errors = (KeyError,)
    assert retry.get_retries() == 2
    calls = []

    def do():
        calls.append(1)
        raise KeyError("k")

    with pytest.raises(KeyError):
        flavor.call(retry, do, lambda e: None)
    assert len(calls) == 3
    assert sleeps == [("sleep", 0.5), ("sleep", 0.5)]
    retry._supported_errors = (ValueError,)
    with pytest.raises(KeyError):
        flavor.call(retry, do, lambda e: None)
    assert len(calls) == 4


def test_get_and_update_retries(flavor, impl):
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 3)
    assert retry.get_retries() == 3
    assert retry.update_retries(-1) is None
    assert retry.get_retries() == -1 and retry._retries == -1
    retry.update_retries(value=7)
    assert retry.get_retries() == 7


@pytest.mark.parametrize(
    "start, added",
    [
        ("defaults", [KeyError]),
        ("defaults", (ConnectionResetError, redis.exceptions.ConnectionError)),
        ((KeyError,), []),
        ((), [ValueError, ValueError, KeyError]),
        ((OSError, KeyError), iter([IndexError])),
    ],
)
def test_update_supported_errors_matches_redis_py_exactly(flavor, start, added):
    added = list(added)
    if start == "defaults":
        start = flavor.default_errors
    results = []
    for side in ("redis-py", "c"):
        retry = flavor.Retry(IMPLEMENTATIONS[side])(redis.backoff.NoBackoff(), 1, start)
        assert retry.update_supported_errors(iter(added)) is None
        results.append(retry._supported_errors)
    assert type(results[1]) is tuple
    assert results[1] == results[0]  # the same set insertions, the same order


def test_update_supported_errors_keyword(flavor, impl):
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 1, (KeyError,))
    retry.update_supported_errors(specified_errors=[KeyError, ValueError])
    assert type(retry._supported_errors) is tuple
    assert set(retry._supported_errors) == {KeyError, ValueError}


def test_call_with_retry_keywords(flavor, impl):
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 2)
    seen = []

    def do():
        raise redis.exceptions.ConnectionError("x")

    def fail(error, failures):
        seen.append(failures)

    with pytest.raises(redis.exceptions.ConnectionError):
        flavor.finish(
            retry.call_with_retry(
                do=flavor.wrap(do),
                fail=flavor.wrap(fail),
                is_retryable=None,
                with_failure_count=True,
            )
        )
    assert seen == [1, 2, 3]


# ---- ==, hash, isinstance ----


def _pair(flavor, side, backoff=("ExponentialBackoff", ()), retries=3, errors=None):
    impl = IMPLEMENTATIONS[side]
    args = (getattr(impl.backoff, backoff[0])(*backoff[1]), retries)
    if errors == "reversed defaults":
        errors = tuple(reversed(flavor.default_errors))
    elif errors == "defaults twice":
        errors = flavor.default_errors * 2
    if errors is not None:
        args += (errors,)
    return flavor.Retry(impl)(*args)


VARIANTS = [
    {},
    {"retries": 4},
    {"retries": -1},
    {"backoff": ("ExponentialBackoff", (1.0,))},
    {"backoff": ("ExponentialBackoff", (2, 0.5))},
    {"backoff": ("ConstantBackoff", (0,))},
    {"backoff": ("NoBackoff", ())},
    {"errors": (KeyError,)},
    {"errors": (OSError, ValueError)},
    {"errors": (ValueError, OSError)},
    {"errors": "reversed defaults"},
    {"errors": "defaults twice"},
]


@pytest.mark.parametrize("left_side", ["redis-py", "c"])
@pytest.mark.parametrize("right_side", ["redis-py", "c"])
def test_equality_and_hash_across_sides(flavor, left_side, right_side):
    for a, b in itertools.product(VARIANTS, repeat=2):
        left, right = _pair(flavor, left_side, **a), _pair(flavor, right_side, **b)
        reference = _pair(flavor, "redis-py", **a) == _pair(flavor, "redis-py", **b)
        assert (left == right) is reference, (a, b)
        assert (right == left) is reference, (a, b)
        assert (left != right) is (not reference), (a, b)
        if reference:
            assert hash(left) == hash(right)
        assert hash(left) == hash(_pair(flavor, "redis-py", **a))


def test_hash_is_redis_py_formula(flavor, impl):
    backoff = impl.backoff.ExponentialBackoff()
    retry = flavor.Retry(impl)(backoff, 3, (KeyError, ValueError))
    assert hash(retry) == hash((backoff, 3, frozenset((KeyError, ValueError))))
    retry._supported_errors = (IndexError,)
    retry._retries = 5
    assert hash(retry) == hash((backoff, 5, frozenset((IndexError,))))
    default = flavor.Retry(impl)(backoff, 2)
    assert hash(default) == hash((backoff, 2, frozenset(flavor.default_errors)))


def test_equality_with_foreign_types(flavor, impl):
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 1, (OSError,))
    assert retry.__eq__(object()) is NotImplemented
    assert retry.__eq__(3) is NotImplemented
    assert retry != 3 and retry != "Retry"
    assert retry == retry
    # The other flavor's Retry, of either side, is never equal.
    for side in IMPLEMENTATIONS.values():
        other = flavor.other.Retry(side)(impl.backoff.NoBackoff(), 1, (OSError,))
        assert retry.__eq__(other) is NotImplemented
        assert retry != other and other != retry
        assert not (retry == other) and not (other == retry)


def test_equality_result_is_and_of_the_fields(flavor, impl):
    Retry = flavor.Retry(impl)

    class Weird:
        def __eq__(self, other):
            return "truthy"

        __hash__ = object.__hash__

    left = Retry(Weird(), 1)
    right = Retry(Weird(), 1, (KeyError,))
    assert (left == right) is False  # the error sets decide
    right._supported_errors = left._supported_errors
    assert (left == right) is True

    class Falsy(Weird):
        def __eq__(self, other):
            return 0

    assert (Retry(Falsy(), 1) == left) == 0


def test_isinstance_of_the_redis_py_class(flavor, impl):
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 1)
    assert isinstance(retry, flavor.redis_py_class)
    assert not isinstance(retry, flavor.other.redis_py_class)
    if flavor.name == "sync":
        assert isinstance(retry, redis.retry.AbstractRetry)


# ---- copy, deepcopy, pickle ----


def _rich_retry(flavor, impl):
    backoff = impl.backoff.DecorrelatedJitterBackoff(2.0, 0.25)
    return flavor.Retry(impl)(backoff, -1, (KeyError,))


@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_copies(flavor, impl, how):
    retry = _rich_retry(flavor, impl)
    retry._backoff._previous_backoff = 1.5
    twin = getattr(copy, how)(retry)
    assert type(twin) is type(retry)
    assert twin == retry and hash(twin) == hash(retry)
    assert twin._supported_errors is retry._supported_errors
    assert (twin._backoff is retry._backoff) is (how == "copy")
    assert twin._backoff == retry._backoff
    assert twin._backoff._previous_backoff == 1.5
    twin._retries = 9
    assert retry._retries == -1
    default = flavor.Retry(impl)(impl.backoff.ExponentialBackoff(2, 0.5), 3)
    assert getattr(copy, how)(default)._supported_errors == flavor.default_errors


def test_deepcopy_keeps_shared_backoff_shared(flavor, impl):
    backoff = impl.backoff.ExponentialBackoff()
    retries = [flavor.Retry(impl)(backoff, 1), flavor.Retry(impl)(backoff, 2)]
    copied = copy.deepcopy(retries)
    assert copied[0]._backoff is copied[1]._backoff
    assert copied[0]._backoff is not backoff


def test_deepcopy_of_a_cycle_through_the_backoff(flavor, impl):
    backoff = RecordingBackoff([])
    retry = flavor.Retry(impl)(backoff, 1)
    backoff.owner = retry
    twin = copy.deepcopy(retry)
    assert twin._backoff.owner is twin
    assert twin._backoff is not backoff


def test_deepcopy_of_a_user_backoff(flavor, impl):
    events = []
    retry = flavor.Retry(impl)(RecordingBackoff(events, (0.5, 1.0)), 2)
    twin = copy.deepcopy(retry)
    assert twin._backoff is not retry._backoff
    assert twin._backoff.delays == (0.5, 1.0)
    assert twin._backoff.events is not events


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(flavor, impl, protocol):
    retry = _rich_retry(flavor, impl)
    twin = pickle.loads(pickle.dumps(retry, protocol))
    assert type(twin) is type(retry)
    assert twin == retry and hash(twin) == hash(retry)
    assert twin._supported_errors == retry._supported_errors
    # Before protocol 3, pickle writes socket.timeout (a default of the sync
    # Retry) as OSError.
    if protocol >= 3 or flavor.name == "asyncio":
        default = flavor.Retry(impl)(impl.backoff.ExponentialBackoff(2, 0.5), 3)
        assert pickle.loads(pickle.dumps(default, protocol)) == default


def test_garbage_cycle_through_the_backoff_is_collected(flavor, impl):
    class Holder(RecordingBackoff):
        pass

    backoff = Holder([])
    retry = flavor.Retry(impl)(backoff, 1)
    backoff.retry = retry
    ref = weakref.ref(retry)
    del retry, backoff
    gc.collect()
    assert ref() is None


def test_subclass_with_own_init_copies_and_pickles(flavor, impl):
    subclass = _subclass(flavor, impl)
    retry = subclass(5)
    retry.note = ["a"]
    for twin in (copy.copy(retry), copy.deepcopy(retry), pickle.loads(pickle.dumps(retry))):
        assert type(twin) is subclass
        assert twin == retry
        assert twin.note == ["a"]
        assert twin._retries == 5
    assert copy.deepcopy(retry).note is not retry.note
    assert copy.copy(retry).note is retry.note


def _subclass(flavor, impl):
    class FiveRetries(flavor.Retry(impl)):
        def __init__(self, retries):
            super().__init__(impl.backoff.NoBackoff(), retries)

    name = f"FiveRetries_{flavor.name}_{impl.name.replace('-', '_')}"
    FiveRetries.__qualname__ = FiveRetries.__name__ = name
    globals()[name] = FiveRetries  # where pickle finds it
    return FiveRetries


# ---- the Retry's own checker: redis-py 8.2's is_retryable ----
#
# Before redis-py 8.2 the redis-py side has no checker (side_without_checker
# checks that, and the test has nothing more to check on that side); the C
# side takes one whatever redis-py is installed.


def test_checker_constructor_and_attributes(flavor, impl):
    if side_without_checker(impl):
        return
    Retry = flavor.Retry(impl)
    backoff = impl.backoff.NoBackoff()
    plain = Retry(backoff, 1)
    assert plain.is_retryable is None and plain._is_retryable is None
    positional = Retry(backoff, 1, (KeyError,), never)
    assert positional.is_retryable is never and positional._is_retryable is never
    assert positional._supported_errors == (KeyError,)
    keyword = Retry(backoff, 2, is_retryable=always)
    assert keyword._is_retryable is always
    assert keyword._supported_errors == flavor.default_errors
    keyword.is_retryable = None
    assert keyword._is_retryable is None
    keyword._is_retryable = never
    assert keyword.is_retryable is never
    with pytest.raises(AttributeError):
        del keyword.is_retryable


def test_checker_set_on_the_retry_takes_effect(flavor, impl, monkeypatch):
    if side_without_checker(impl):
        return
    sleeps = flavor.patch_sleep(impl, monkeypatch)
    retry = flavor.Retry(impl)(impl.backoff.ConstantBackoff(0.5), 3)
    calls = []

    def do():
        calls.append(1)
        raise redis.exceptions.ConnectionError("x")

    retry.is_retryable = never
    with pytest.raises(redis.exceptions.ConnectionError):
        flavor.call(retry, do, lambda e: None)
    assert len(calls) == 1 and sleeps == []
    retry._is_retryable = None
    with pytest.raises(redis.exceptions.ConnectionError):
        flavor.call(retry, do, lambda e: None)
    assert len(calls) == 5 and len(sleeps) == 3


CHECKER_VARIANTS = [None, always, never, CallableChecker(1), CallableChecker(2)]


def _with_checker(flavor, side, checker, retries=3):
    impl = IMPLEMENTATIONS[side]
    own = {} if checker is None else {"is_retryable": checker}
    return flavor.Retry(impl)(impl.backoff.ExponentialBackoff(), retries, **own)


@pytest.mark.parametrize("left_side", ["redis-py", "c"])
@pytest.mark.parametrize("right_side", ["redis-py", "c"])
def test_checker_in_equality_not_in_hash(flavor, left_side, right_side):
    """== compares the checkers with == (after the other fields), hash
    leaves them out (an unhashable checker is fine).  Before redis-py 8.2 a
    redis-py Retry has no checker to compare with: ours sees None in
    it, while its __eq__ ignores ours, as it ignores the extras."""
    if not REDIS_PY_HAS_CHECKER and "redis-py" in (left_side, right_side):
        theirs = _with_checker(flavor, "redis-py", None)
        ours = _with_checker(flavor, "c", never)
        assert (ours == theirs) is False and (theirs == ours) is True
        plain = _with_checker(flavor, "c", None)
        assert plain == theirs and theirs == plain
        return
    for a, b in itertools.product(CHECKER_VARIANTS, repeat=2):
        if REDIS_PY_HAS_CHECKER:
            reference = _with_checker(flavor, "redis-py", a) == _with_checker(flavor, "redis-py", b)
        else:
            reference = a == b
        left, right = _with_checker(flavor, left_side, a), _with_checker(flavor, right_side, b)
        assert (left == right) is reference, (a, b)
        assert (right == left) is reference, (a, b)
        assert (left != right) is (not reference), (a, b)
        assert hash(left) == hash((left._backoff, 3, frozenset(flavor.default_errors)))
    left = _with_checker(flavor, left_side, never)
    assert left != _with_checker(flavor, right_side, never, retries=4)


def test_checker_equality_keeps_the_value_of_and(flavor, impl):
    if side_without_checker(impl):
        return

    class Odd:
        def __call__(self, error):
            return True

        def __eq__(self, other):
            return "yes"

    Retry = flavor.Retry(impl)
    left = Retry(impl.backoff.NoBackoff(), 1, is_retryable=Odd())
    right = Retry(impl.backoff.NoBackoff(), 1, is_retryable=Odd())
    assert left.__eq__(right) == "yes"
    right._retries = 2
    assert left.__eq__(right) is False  # `and` stops before the checkers


@pytest.mark.parametrize("checker", [never, CallableChecker(0)], ids=["function", "object"])
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_checker_copies(flavor, impl, checker, how):
    if side_without_checker(impl):
        return
    retry = flavor.Retry(impl)(impl.backoff.ExponentialBackoff(2, 0.5), 2, (KeyError,), checker)
    if how == "pickle":
        twin = pickle.loads(pickle.dumps(retry))
    else:
        twin = getattr(copy, how)(retry)
    assert type(twin) is type(retry)
    assert twin == retry and hash(twin) == hash(retry)
    assert twin._is_retryable == checker
    # A function is copied as itself; a checker object is copied by deepcopy
    # and pickle (as redis-py's instance __dict__ is).
    same = how == "copy" or checker is never
    assert (twin._is_retryable is checker) is same


def test_deepcopy_of_a_cycle_through_the_checker(flavor, impl):
    if side_without_checker(impl):
        return
    owner = CallableChecker(True)
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 1, is_retryable=owner)
    owner.retry = retry
    twin = copy.deepcopy(retry)
    assert twin._is_retryable is not owner
    assert twin._is_retryable.retry is twin


def test_garbage_cycle_through_the_checker_is_collected(flavor, impl):
    if side_without_checker(impl):
        return

    class Holder:
        def check(self, error):
            return True

    holder = Holder()
    retry = flavor.Retry(impl)(impl.backoff.NoBackoff(), 1, is_retryable=holder.check)
    holder.retry = retry
    ref = weakref.ref(retry)
    del retry, holder
    gc.collect()
    assert ref() is None


def test_flavors_are_the_two_retry_types():
    """The flavor fixture's two sides: what the tests above run over."""
    for impl in IMPLEMENTATIONS.values():
        assert FLAVORS["sync"].Retry(impl) is impl.retry.Retry
        assert FLAVORS["asyncio"].Retry(impl) is impl.asyncio_retry.Retry
