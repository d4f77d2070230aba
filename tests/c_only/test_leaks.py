"""Every path through the C strategies, run thousands of times, leaves no
object, memory or reference behind (C side only; see leakcheck.py for the
measures).  Error paths are run as often as the good ones: a reference
dropped on the way out of an error is the usual leak."""

import copy
import pickle
import random
from decimal import Decimal
from fractions import Fraction

import pytest
import redis.backoff
from leakcheck import assert_no_leak, calls_raising
from support import ALL, CAPPED, LDEXP_RULE, UserError

import redis_backoff_c
import redis_backoff_c.backoff as backoff


def make(name, *args):
    cls = getattr(backoff, name)
    if name == "NoBackoff":
        return cls()
    if name == "ConstantBackoff":
        return cls(*(args[:1] or (0.25,)))
    return cls(*args)


class Real:
    """A real number by __float__ alone: the generic paths."""

    def __init__(self, value):
        self.value = value

    def __float__(self):
        return float(self.value)


class RaisingFloat:
    def __float__(self):
        raise UserError("__float__")


@pytest.fixture(params=["python", "fast"])
def source(request):
    if request.param == "fast":
        redis_backoff_c.set_random_source("fast", seed=1)
    return request.param


# ---- compute ----

# Failure counts through every branch: small ints (inline), bools, floats,
# huge and very negative ints (no power computed), floats past 1024, nan.
FAILURES = [0, 3, True, 2.5, 1023, 1024, 10**30, -(10**30), 2**70, 1e300, float("nan"), -5]


@pytest.mark.parametrize("name", ALL)
def test_compute_fast_paths(name, source):
    strategy = make(name)
    failures = list(FAILURES)

    def run():
        for count in failures:
            try:
                strategy.compute(count)
            except TypeError:
                # redis-py 8.2's rule (math.ldexp) takes int counts only.
                if not (LDEXP_RULE and isinstance(count, float) and name in CAPPED):
                    raise

    assert_no_leak(run, watched=[strategy, *failures[-6:]])


@pytest.mark.parametrize("name", CAPPED)
@pytest.mark.parametrize(
    "cap, base",
    [
        (4, 1),  # int parameters
        (Fraction(1, 2), Fraction(1, 100)),
        (Decimal("0.5"), Decimal("0.01")),
        (0.512, -1),  # a bound past the float range for huge counts
        (float("inf"), 3),
    ],
    ids=["int", "fraction", "decimal", "negative", "inf-cap"],
)
def test_compute_generic_paths(name, cap, base, source):
    strategy = make(name, cap, base)
    failures = [0, 3, 1100, 10**30, -(10**30), Fraction(7, 2), 2.5]

    def run():
        for count in failures:
            try:
                strategy.compute(count)
            except (TypeError, ArithmeticError):
                pass  # Decimal * float is a TypeError in redis-py too
        strategy.reset()  # _previous_backoff may be the cap object itself

    assert_no_leak(run, calls=300, watched=[strategy, cap, base, *failures[3:]])


@pytest.mark.parametrize("name", ["ExponentialBackoff", "FullJitterBackoff", "EqualJitterBackoff"])
@pytest.mark.parametrize("failures", [None, "3", [3], 3j, object()])
def test_compute_wrong_failure_types(name, failures):
    strategy = make(name)
    assert_no_leak(calls_raising(TypeError, strategy.compute, failures), watched=[failures])


@pytest.mark.parametrize("name", CAPPED)
def test_compute_with_raising_parameters(name):
    strategy = make(name, RaisingFloat(), RaisingFloat())

    def run():
        try:
            strategy.compute(3)
        except (UserError, TypeError):
            pass

    assert_no_leak(run)


@pytest.mark.parametrize("name", ALL)
def test_compute_argument_errors(name):
    strategy = make(name)
    assert_no_leak(calls_raising(TypeError, strategy.compute))
    assert_no_leak(calls_raising(TypeError, strategy.compute, 1, 2))
    assert_no_leak(calls_raising(TypeError, strategy.compute, 1, failures=2))
    assert_no_leak(calls_raising(TypeError, strategy.compute, nope=2))
    assert_no_leak(lambda: strategy.compute(failures=3))


@pytest.mark.parametrize(
    "name", ["FullJitterBackoff", "EqualJitterBackoff", "DecorrelatedJitterBackoff"]
)
def test_compute_with_a_replaced_uniform(name, monkeypatch):
    strategy = make(name)
    monkeypatch.setattr(random, "uniform", lambda a, b: (a + b) / 2)
    assert_no_leak(lambda: strategy.compute(3), watched=[strategy])

    def raising(a, b):
        raise UserError("uniform")

    monkeypatch.setattr(random, "uniform", raising)
    assert_no_leak(calls_raising(UserError, strategy.compute, 3))


@pytest.mark.parametrize("replacement", ["fraction", "raising", "float"])
def test_compute_with_a_replaced_random(replacement, monkeypatch):
    strategy = backoff.ExponentialWithJitterBackoff()

    def raising():
        raise UserError("random")

    if replacement == "fraction":
        monkeypatch.setattr(random, "random", lambda: Fraction(1, 3))
        run = lambda: strategy.compute(3)  # noqa: E731
    elif replacement == "raising":
        monkeypatch.setattr(random, "random", raising)
        run = calls_raising(UserError, strategy.compute, 3)
    else:
        monkeypatch.setattr(random, "random", lambda: 0.5)
        run = lambda: strategy.compute(3)  # noqa: E731
    assert_no_leak(run, watched=[strategy])


def test_compute_without_uniform_in_the_random_module(monkeypatch):
    strategy = backoff.FullJitterBackoff(cap=4, base=1)  # the generic path looks it up
    monkeypatch.delattr(random, "uniform")
    assert_no_leak(calls_raising(AttributeError, strategy.compute, 3))


def test_decorrelated_state_and_reset():
    strategy = backoff.DecorrelatedJitterBackoff()

    def run():
        strategy.compute(1)
        strategy.compute(2)
        strategy.reset()

    assert_no_leak(run, watched=[strategy])


# ---- construction and attributes ----


@pytest.mark.parametrize("name", CAPPED)
def test_construction(name):
    cls = getattr(backoff, name)
    cap, base = 1.5, Fraction(1, 7)
    assert_no_leak(lambda: cls(), watched=[cls])
    assert_no_leak(lambda: cls(cap, base), watched=[cap, base])
    assert_no_leak(lambda: cls(cap=cap, base=base), watched=[cap, base])
    assert_no_leak(lambda: cls.__new__(cls))


@pytest.mark.parametrize("name", CAPPED)
def test_construction_errors(name):
    cls = getattr(backoff, name)
    bad = object()
    for args, kwargs in [
        ((bad,), {}),
        ((1.0, bad), {}),
        ((1.0, 2.0, 3.0), {}),
        ((), {"cap": 1.0, "nope": 2}),
        ((1.0,), {"cap": 2.0}),
        (("1",), {}),
    ]:
        assert_no_leak(calls_raising(TypeError, cls, *args, **kwargs), calls=500, watched=[bad])


def test_constant_construction_and_errors():
    value = 0.75
    assert_no_leak(lambda: backoff.ConstantBackoff(value), watched=[value])
    assert_no_leak(lambda: backoff.ConstantBackoff(backoff=value), watched=[value])
    assert_no_leak(calls_raising(TypeError, backoff.ConstantBackoff))
    assert_no_leak(calls_raising(TypeError, backoff.ConstantBackoff, "1"))
    assert_no_leak(calls_raising(TypeError, backoff.ConstantBackoff, 1, 2))
    assert_no_leak(lambda: backoff.NoBackoff())
    assert_no_leak(calls_raising(TypeError, backoff.NoBackoff, 1))
    assert_no_leak(calls_raising(TypeError, backoff.NoBackoff, x=1))


@pytest.mark.parametrize("name", CAPPED)
def test_subclass_construction(name):
    # Subclasses go through tp_new and tp_init, not the vectorcall.
    cls = type("Sub", (getattr(backoff, name),), {})
    cap = 2.5
    assert_no_leak(lambda: cls(cap), watched=[cap])
    assert_no_leak(calls_raising(TypeError, cls, "x"))
    assert_no_leak(calls_raising(TypeError, cls, 1, 2, 3))


@pytest.mark.parametrize("name", CAPPED)
def test_attributes(name):
    strategy = make(name)
    value = 0.3
    names = ["_cap", "_base"] + (["_previous_backoff"] if "Decorrelated" in name else [])

    def run():
        for attribute in names:
            setattr(strategy, attribute, value)
            getattr(strategy, attribute)

    assert_no_leak(run, watched=[value, strategy])
    for attribute in names:
        assert_no_leak(calls_raising(TypeError, setattr, strategy, attribute, "1"))
        assert_no_leak(calls_raising(AttributeError, delattr, strategy, attribute))


def test_constant_attribute():
    strategy = backoff.ConstantBackoff(1)
    value = 0.3

    def run():
        strategy._backoff = value
        return strategy._backoff

    assert_no_leak(run, watched=[value])
    assert_no_leak(calls_raising(TypeError, setattr, strategy, "_backoff", None))
    assert_no_leak(calls_raising(AttributeError, delattr, strategy, "_backoff"))


# ---- copy, pickle, ==, hash, repr ----


@pytest.mark.parametrize("name", ALL)
def test_copy_and_pickle(name):
    strategy = make(name)
    dumps = [pickle.dumps(strategy, protocol) for protocol in range(pickle.HIGHEST_PROTOCOL + 1)]

    def run():
        copy.copy(strategy)
        copy.deepcopy(strategy)
        for data in dumps:
            pickle.loads(data)
        pickle.dumps(strategy)

    assert_no_leak(run, calls=500, watched=[strategy])


@pytest.mark.parametrize("name", CAPPED)
def test_copy_of_a_subclass_with_a_dict(name):
    cls = type("Sub", (getattr(backoff, name),), {})
    strategy = cls(1.0, 0.5)
    strategy.extra = [1, 2, 3]
    assert_no_leak(lambda: copy.deepcopy(strategy), calls=500, watched=[strategy])


def test_setstate_errors():
    strategy = backoff.ExponentialBackoff()
    assert_no_leak(calls_raising(TypeError, strategy.__setstate__, None))
    assert_no_leak(calls_raising(TypeError, strategy.__setstate__, {"_cap": "x"}))
    assert_no_leak(calls_raising(AttributeError, strategy.__setstate__, {"nope": 1}))


@pytest.mark.parametrize("name", CAPPED)
def test_equality_and_hash(name):
    mine = make(name, 1.0, 0.5)
    same = make(name, 1.0, 0.5)
    other = make(name, 2.0, 0.5)
    theirs = getattr(redis.backoff, name)(1.0, 0.5)

    def run():
        assert mine == same
        assert mine != other
        assert mine == theirs
        assert theirs == mine
        assert mine != 3
        assert not (mine == "x")
        hash(mine)

    assert_no_leak(run, watched=[mine, same, other, theirs])


def test_equality_and_hash_errors():
    class RaisingEq(Real):
        def __eq__(self, other):
            raise UserError("eq")

        def __hash__(self):
            raise UserError("hash")

    mine = backoff.ExponentialBackoff(RaisingEq(1), RaisingEq(2))
    other = backoff.ExponentialBackoff(RaisingEq(1), RaisingEq(2))
    assert_no_leak(calls_raising(UserError, mine.__eq__, other))
    assert_no_leak(calls_raising(UserError, hash, mine))
    constant = backoff.ConstantBackoff(RaisingEq(1))
    assert_no_leak(calls_raising(UserError, constant.__eq__, backoff.ConstantBackoff(RaisingEq(2))))
    assert_no_leak(calls_raising(UserError, hash, constant))


@pytest.mark.parametrize("name", ALL)
def test_repr(name):
    strategy = make(name)
    assert_no_leak(lambda: repr(strategy), watched=[strategy])


# ---- the random source ----


def test_set_random_source():
    seed = 2**200 + 12345

    def run():
        redis_backoff_c.set_random_source("fast", seed=seed)
        redis_backoff_c.set_random_source("fast", 7)
        redis_backoff_c.set_random_source("fast")
        redis_backoff_c.get_random_source()
        redis_backoff_c.set_random_source("python")
        redis_backoff_c.set_random_source(name="python", seed=None)

    assert_no_leak(run, calls=500, watched=[seed])


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        ((), {}, TypeError),
        ((1,), {}, TypeError),
        (("slow",), {}, ValueError),
        (("python", 1), {}, ValueError),
        (("fast", "1"), {}, TypeError),
        (("fast", 1.5), {}, TypeError),
        (("fast",), {"nope": 1}, TypeError),
        (("fast", 1), {"seed": 2}, TypeError),
    ],
)
def test_set_random_source_errors(args, kwargs, error):
    assert_no_leak(calls_raising(error, redis_backoff_c.set_random_source, *args, **kwargs))


def test_the_check_catches_a_leak_of_one_object_a_call():
    kept = []
    with pytest.raises(AssertionError, match="grew"):
        assert_no_leak(lambda: kept.append(object()))
