"""The strategies' shared contract, run on redis-py and on the C types alike."""

import copy
import math
import pickle
import random

import pytest
import redis.backoff
from support import ALL, CAPPED, LDEXP_RULE, exponential, other_side, outcome

import redis_backoff_c.backoff


def make(impl, name, *args, **kwargs):
    return getattr(impl.backoff, name)(*args, **kwargs)


def default_instance(impl, name):
    if name == "ConstantBackoff":
        return make(impl, name, 0.25)
    return make(impl, name)


# ---- constructors and attributes ----


def test_module_constants(impl):
    assert impl.backoff.DEFAULT_CAP == 0.512
    assert impl.backoff.DEFAULT_BASE == 0.008
    assert impl.backoff.AbstractBackoff is redis.backoff.AbstractBackoff
    assert isinstance(impl.backoff.default_backoff(), impl.backoff.EqualJitterBackoff)
    assert impl.backoff.default_backoff() == impl.backoff.EqualJitterBackoff()


@pytest.mark.parametrize("name", CAPPED)
def test_capped_defaults_positional_and_keywords(impl, name):
    default = make(impl, name)
    assert (default._cap, default._base) == (0.512, 0.008)
    positional = make(impl, name, 2.0, 0.5)
    assert (positional._cap, positional._base) == (2.0, 0.5)
    keywords = make(impl, name, base=0.5, cap=2.0)
    assert (keywords._cap, keywords._base) == (2.0, 0.5)
    only_base = make(impl, name, base=0.25)
    assert (only_base._cap, only_base._base) == (0.512, 0.25)


def test_decorrelated_starts_at_zero(impl):
    backoff = make(impl, "DecorrelatedJitterBackoff")
    assert backoff._previous_backoff == 0
    assert type(backoff._previous_backoff) is int


def test_constant_requires_its_delay(impl):
    with pytest.raises(TypeError):
        make(impl, "ConstantBackoff")
    assert make(impl, "ConstantBackoff", 1.5)._backoff == 1.5
    assert make(impl, "ConstantBackoff", backoff=1.5)._backoff == 1.5


def test_no_backoff_takes_nothing(impl):
    assert make(impl, "NoBackoff")._backoff == 0
    with pytest.raises(TypeError):
        make(impl, "NoBackoff", 1)


@pytest.mark.parametrize("name", CAPPED)
def test_too_many_arguments(impl, name):
    with pytest.raises(TypeError):
        make(impl, name, 1.0, 2.0, 3.0)
    with pytest.raises(TypeError):
        make(impl, name, 1.0, cap=2.0)
    with pytest.raises(TypeError):
        make(impl, name, nope=1.0)


@pytest.mark.parametrize("name", CAPPED)
def test_writing_parameters_changes_compute(impl, name):
    backoff = make(impl, name)
    backoff._cap = 0.1
    backoff._base = 0.1
    assert (backoff._cap, backoff._base) == (0.1, 0.1)
    for failures in range(1, 6):
        assert backoff.compute(failures) <= 0.1


def test_writing_constant_changes_compute(impl):
    backoff = make(impl, "ConstantBackoff", 1)
    backoff._backoff = 7.5
    assert backoff.compute(1) == 7.5


def test_writing_previous_backoff_changes_decorrelated(impl):
    backoff = make(impl, "DecorrelatedJitterBackoff", cap=100.0, base=1.0)
    backoff._previous_backoff = 10.0
    random.seed(3)
    delay = backoff.compute(1)
    random.seed(3)
    assert delay == random.uniform(1.0, 30.0)
    assert backoff._previous_backoff == delay


# ---- compute ----


@pytest.mark.parametrize("failures", [0, 1, 2, 5, 6, 7, 10, 30, 1023, -1, -3, -1074, -2000])
def test_exponential_formula(impl, failures):
    backoff = make(impl, "ExponentialBackoff", cap=0.512, base=0.008)
    assert backoff.compute(failures) == min(0.512, exponential(0.008, failures))


@pytest.mark.parametrize(
    "failures",
    [True, False, 2.5, 0.0, -0.5, 3.0, float("inf"), float("-inf"), float("nan"), -0.0],
)
def test_exponential_unusual_failure_counts(impl, failures):
    # A float count: redis-py 8.0 and 8.1 compute 2**failures (NaN's min()
    # gives the cap), 8.2's math.ldexp raises TypeError.  Bools are ints.
    backoff = make(impl, "ExponentialBackoff", cap=0.512, base=0.008)
    assert outcome(lambda: backoff.compute(failures)) == outcome(
        lambda: min(0.512, exponential(0.008, failures))
    )


def test_exponential_with_int_parameters_follows_the_rule(impl):
    # redis-py 8.0 and 8.1 keep ints int (1 * 2**3 == 8); 8.2's math.ldexp
    # gives a float.  Either way min() returns the cap object itself.
    backoff = make(impl, "ExponentialBackoff", cap=100, base=1)
    assert outcome(lambda: backoff.compute(3)) == outcome(lambda: min(100, exponential(1, 3)))
    assert type(backoff.compute(3)) is (float if LDEXP_RULE else int)
    assert backoff.compute(10) == 100
    assert type(backoff.compute(10)) is int


def test_compute_returns_the_cap_object(impl):
    cap = 3.25
    backoff = make(impl, "ExponentialBackoff", cap=cap, base=1.0)
    assert backoff.compute(5) is cap


def test_compute_accepts_keyword(impl):
    assert make(impl, "ExponentialBackoff").compute(failures=2) == 0.032


def test_constant_returns_its_object(impl):
    delay = 0.125
    backoff = make(impl, "ConstantBackoff", delay)
    assert backoff.compute(1) is delay
    assert backoff.compute(10**40) is delay
    assert make(impl, "NoBackoff").compute(3) == 0


@pytest.mark.parametrize("failures", [0, 1, 3, 6, 9, 40])
def test_full_jitter_draws_uniform(impl, failures):
    backoff = make(impl, "FullJitterBackoff", cap=0.512, base=0.008)
    random.seed(failures)
    delay = backoff.compute(failures)
    random.seed(failures)
    assert delay == random.uniform(0, min(0.512, exponential(0.008, failures)))


@pytest.mark.parametrize("failures", [0, 1, 3, 6, 9, 40])
def test_equal_jitter_draws_half_plus_uniform(impl, failures):
    backoff = make(impl, "EqualJitterBackoff", cap=0.512, base=0.008)
    random.seed(failures)
    delay = backoff.compute(failures)
    random.seed(failures)
    half = min(0.512, exponential(0.008, failures)) / 2
    assert delay == half + random.uniform(0, half)


@pytest.mark.parametrize("failures", [0, 1, 3, 6, 9, 40])
def test_exponential_with_jitter_scales_random(impl, failures):
    backoff = make(impl, "ExponentialWithJitterBackoff", cap=0.512, base=0.008)
    random.seed(failures)
    delay = backoff.compute(failures)
    random.seed(failures)
    assert delay == min(0.512, exponential(random.random() * 0.008, failures))


def test_decorrelated_sequence_and_reset(impl):
    backoff = make(impl, "DecorrelatedJitterBackoff", cap=1.0, base=0.01)
    random.seed(11)
    delays = [backoff.compute(n) for n in range(1, 8)]
    random.seed(11)
    previous, expected = 0, []
    for _ in range(7):
        previous = min(1.0, random.uniform(0.01, max(0.01, previous * 3)))
        expected.append(previous)
    assert delays == expected
    assert backoff._previous_backoff == delays[-1]
    backoff.reset()
    assert backoff._previous_backoff == 0


def test_decorrelated_ignores_failures(impl):
    backoff = make(impl, "DecorrelatedJitterBackoff")
    random.seed(1)
    first = backoff.compute(None)
    backoff.reset()
    random.seed(1)
    assert backoff.compute("anything") == first


def test_reset_is_harmless_elsewhere(impl):
    for name in ALL:
        backoff = default_instance(impl, name)
        assert backoff.reset() is None


def test_monkeypatched_uniform_takes_effect(impl, monkeypatch):
    calls = []

    def fake_uniform(a, b):
        calls.append((a, b))
        return b

    monkeypatch.setattr(random, "uniform", fake_uniform)
    assert make(impl, "FullJitterBackoff").compute(2) == 0.032
    assert make(impl, "EqualJitterBackoff").compute(2) == 0.032
    decorrelated = make(impl, "DecorrelatedJitterBackoff")
    assert decorrelated.compute(1) == 0.008
    assert decorrelated.compute(2) == 0.024
    assert calls == [(0, 0.032), (0, 0.016), (0.008, 0.008), (0.008, 0.024)]
    assert [type(a) for a, _ in calls] == [int, int, float, float]


def test_monkeypatched_random_takes_effect(impl, monkeypatch):
    monkeypatch.setattr(random, "random", lambda: 0.5)
    assert make(impl, "ExponentialWithJitterBackoff").compute(3) == 0.5 * 0.008 * 8


def test_monkeypatched_random_may_return_any_number(impl, monkeypatch):
    from fractions import Fraction

    # Python arithmetic on it: Fraction(2) under redis-py 8.0 and 8.1, the
    # float 2.0 from 8.2's math.ldexp.
    monkeypatch.setattr(random, "random", lambda: Fraction(1, 2))
    delay = make(impl, "ExponentialWithJitterBackoff", cap=10, base=1).compute(2)
    assert delay == 2 and type(delay) is (float if LDEXP_RULE else Fraction)
    assert outcome(lambda: delay) == outcome(lambda: min(10, exponential(Fraction(1, 2), 2)))


def test_failing_random_propagates(impl, monkeypatch):
    def broken():
        raise RuntimeError("entropy gone")

    monkeypatch.setattr(random, "random", broken)
    with pytest.raises(RuntimeError, match="entropy gone"):
        make(impl, "ExponentialWithJitterBackoff").compute(1)
    monkeypatch.setattr(random, "uniform", lambda a, b: broken())
    for name in ("FullJitterBackoff", "EqualJitterBackoff", "DecorrelatedJitterBackoff"):
        with pytest.raises(RuntimeError, match="entropy gone"):
            make(impl, name).compute(1)


def test_fraction_parameters_follow_the_rule(impl):
    # Exact Fractions under redis-py 8.0 and 8.1, floats from 8.2's
    # math.ldexp; the cap, when chosen, is the Fraction itself.
    from fractions import Fraction

    backoff = make(impl, "ExponentialBackoff", cap=Fraction(1, 3), base=Fraction(1, 100))
    expected = min(Fraction(1, 3), exponential(Fraction(1, 100), 2))
    assert outcome(lambda: backoff.compute(2)) == outcome(lambda: expected)
    assert backoff.compute(2) == (0.04 if LDEXP_RULE else Fraction(4, 100))
    assert backoff.compute(10) == Fraction(1, 3)
    assert type(backoff.compute(10)) is Fraction


# ---- equality and hashing ----


@pytest.mark.parametrize("name", CAPPED)
def test_capped_equality_and_hash(impl, name):
    a = make(impl, name, 1.0, 0.1)
    assert a == make(impl, name, 1.0, 0.1)
    assert not (a != make(impl, name, 1.0, 0.1))
    assert a != make(impl, name, 1.0, 0.2)
    assert a != make(impl, name, 2.0, 0.1)
    assert hash(a) == hash(make(impl, name, 1.0, 0.1)) == hash((0.1, 1.0))
    assert a.__eq__(object()) is NotImplemented
    assert a != 1.0 and a != None  # noqa: E711


@pytest.mark.parametrize("name", CAPPED)
def test_strategies_of_different_kinds_differ(impl, name):
    for other in CAPPED:
        if other != name:
            assert make(impl, name) != make(impl, other)


def test_hash_matches_tuple_hash_for_unusual_values(impl):
    for cap, base in [(-1, -1.0), (2**70, 0.5), (True, False), (float("inf"), 0.0)]:
        assert hash(make(impl, "ExponentialBackoff", cap, base)) == hash((base, cap))


def test_constant_equality_and_hash(impl):
    assert make(impl, "ConstantBackoff", 0) == make(impl, "NoBackoff")
    assert make(impl, "NoBackoff") == make(impl, "ConstantBackoff", 0)
    assert make(impl, "ConstantBackoff", 1) != make(impl, "NoBackoff")
    assert hash(make(impl, "ConstantBackoff", 2.5)) == hash((2.5,))
    assert hash(make(impl, "NoBackoff")) == hash((0,))
    assert make(impl, "ConstantBackoff", 0) != make(impl, "ExponentialBackoff")


@pytest.mark.parametrize("name", ALL)
def test_equal_across_implementations_both_ways(impl, name):
    mine = default_instance(impl, name)
    theirs = default_instance(other_side(impl), name)
    assert mine == theirs and theirs == mine
    assert not (mine != theirs) and not (theirs != mine)
    assert hash(mine) == hash(theirs)
    if name in CAPPED:
        changed = getattr(other_side(impl).backoff, name)(cap=9.0)
        assert mine != changed and changed != mine


@pytest.mark.parametrize("name", ALL)
def test_isinstance_of_redis_py_classes(impl, name):
    backoff = default_instance(impl, name)
    assert isinstance(backoff, redis.backoff.AbstractBackoff)
    assert isinstance(backoff, getattr(redis.backoff, name))
    assert isinstance(backoff, getattr(impl.backoff, name))
    if name == "NoBackoff":
        assert isinstance(backoff, redis.backoff.ConstantBackoff)
        assert isinstance(backoff, impl.backoff.ConstantBackoff)


# ---- copy and pickle ----


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    "how", ["copy", "deepcopy"] + [f"pickle{p}" for p in range(pickle.HIGHEST_PROTOCOL + 1)]
)
def test_copies_are_equal_and_of_the_same_type(impl, name, how):
    original = default_instance(impl, name)
    if how == "copy":
        clone = copy.copy(original)
    elif how == "deepcopy":
        clone = copy.deepcopy(original)
    else:
        clone = pickle.loads(pickle.dumps(original, protocol=int(how[len("pickle") :])))
    assert clone is not original
    assert type(clone) is type(original)
    assert clone == original


def test_copies_keep_decorrelated_state(impl):
    backoff = make(impl, "DecorrelatedJitterBackoff")
    backoff.compute(1)
    backoff.compute(2)
    copiers = (copy.copy, copy.deepcopy, lambda b: pickle.loads(pickle.dumps(b)))
    for copier in copiers:
        clone = copier(backoff)
        assert clone._previous_backoff == backoff._previous_backoff
        random.seed(4)
        expected = backoff.compute(3)
        random.seed(4)
        assert clone.compute(3) == expected


def test_copies_keep_unusual_parameters(impl):
    from fractions import Fraction

    backoff = make(impl, "ExponentialBackoff", cap=Fraction(1, 3), base=2)
    clone = pickle.loads(pickle.dumps(backoff))
    assert clone._cap == Fraction(1, 3) and type(clone._base) is int


# ---- subclassing ----


def test_python_subclass_overrides_win(impl):
    class Doubling(impl.backoff.ExponentialBackoff):
        def compute(self, failures):
            return 2 * super().compute(failures)

    backoff = Doubling(cap=10.0, base=1.0)
    assert backoff.compute(2) == 8.0
    assert isinstance(backoff, redis.backoff.AbstractBackoff)
    assert backoff == impl.backoff.ExponentialBackoff(cap=10.0, base=1.0)


class FixedCapRedisPy(redis.backoff.ExponentialBackoff):
    def __init__(self, cap):
        super().__init__(cap=cap, base=0.001)


class FixedCapC(redis_backoff_c.backoff.ExponentialBackoff):
    def __init__(self, cap):
        super().__init__(cap=cap, base=0.001)


FIXED_CAP = {"redis-py": FixedCapRedisPy, "c": FixedCapC}


def test_subclass_with_its_own_init_copies_and_pickles(impl):
    backoff = FIXED_CAP[impl.name](0.25)
    backoff.note = "kept"
    for clone in (copy.deepcopy(backoff), pickle.loads(pickle.dumps(backoff))):
        assert type(clone) is type(backoff)
        assert clone._cap == 0.25 and clone._base == 0.001 and clone.note == "kept"


def test_delays_are_finite_and_non_negative(impl):
    for name in ALL:
        backoff = default_instance(impl, name)
        for failures in range(0, 40):
            delay = backoff.compute(failures)
            assert math.isfinite(delay) and 0 <= delay <= 0.512
