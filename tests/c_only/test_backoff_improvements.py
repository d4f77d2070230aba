"""The C strategies' deliberate improvements over redis-py (C side only).

- failure counts past 1023, of any size, give the formula's value instead
  of OverflowError, without computing a huge power.  redis-py 8.2 does so
  itself (math.ldexp, inf on overflow) and the C types then follow its rule,
  so there these tests check the same values, and that a float count is the
  TypeError 8.2 raises;
- parameters and failure counts of the wrong type raise TypeError naming
  them, at construction for parameters;
- a readable repr().
"""

import contextlib
import math
import random
from decimal import Decimal
from fractions import Fraction

import pytest
import redis.backoff
from support import LDEXP_RULE, outcome

import redis_backoff_c.backoff as backoff
from redis_backoff_c import _rules, _speedups

JITTERED_WITH_COUNT = ["FullJitterBackoff", "EqualJitterBackoff", "ExponentialWithJitterBackoff"]
USES_FAILURES = ["ExponentialBackoff"] + JITTERED_WITH_COUNT
HUGE = [1024, 1025, 5000, 2**63, 10**30, 10**400, 1024.0, 1e300]


def test_the_rule_follows_the_installed_redis_py():
    # Decided once, at import, from the feature (not the version), in
    # redis_backoff_c._rules, and followed by the C types.
    assert _rules.LDEXP_EXPONENTIAL == hasattr(redis.backoff, "_exponential")
    delay = _speedups.ExponentialBackoff(cap=10**6, base=1).compute(3)
    assert type(delay) is (float if _rules.LDEXP_EXPONENTIAL else int)


def test_redis_py_overflows_before_8_2():
    # The premise of this module: redis-py 8.0 and 8.1 raise here, and the C
    # types do not; 8.2 caps by itself, and the C types follow it.
    if LDEXP_RULE:
        assert redis.backoff.ExponentialBackoff().compute(1024) == 0.512
    else:
        with pytest.raises(OverflowError):
            redis.backoff.ExponentialBackoff().compute(1024)


def huge_count(failures):
    """Skip nothing: a float count is the TypeError of redis-py 8.2's
    math.ldexp there, and the improvement's value under 8.0 and 8.1."""
    if LDEXP_RULE and isinstance(failures, float):
        return pytest.raises(TypeError, match="'failures' must be int, not float")
    return contextlib.nullcontext()


@pytest.mark.parametrize("failures", HUGE)
def test_exponential_returns_the_cap(failures):
    cap = 0.512
    with huge_count(failures):
        assert backoff.ExponentialBackoff(cap=cap).compute(failures) is cap


@pytest.mark.parametrize("failures", HUGE)
def test_full_jitter_draws_up_to_the_cap(failures):
    random.seed(7)
    with huge_count(failures):
        delay = backoff.FullJitterBackoff(cap=2.0).compute(failures)
        random.seed(7)
        assert delay == random.uniform(0, 2.0)


@pytest.mark.parametrize("failures", HUGE)
def test_equal_jitter_draws_from_half_the_cap(failures):
    random.seed(7)
    with huge_count(failures):
        delay = backoff.EqualJitterBackoff(cap=2.0).compute(failures)
        random.seed(7)
        assert delay == 1.0 + random.uniform(0, 1.0)


@pytest.mark.parametrize("failures", HUGE)
def test_exponential_with_jitter_is_capped(failures):
    random.seed(7)
    with huge_count(failures):
        assert backoff.ExponentialWithJitterBackoff(cap=2.0).compute(failures) == 2.0


@pytest.mark.parametrize("name", USES_FAILURES)
@pytest.mark.parametrize("failures", [f for f in HUGE if isinstance(f, int)])
def test_huge_int_counts_agree_with_redis_py_8_2(name, failures):
    # Under 8.2 the improvement is redis-py's own: the same delays.  (Under
    # 8.0 and 8.1 redis-py raises OverflowError here, or builds 2**failures.)
    if not LDEXP_RULE:
        assert backoff.ExponentialBackoff().compute(failures) == 0.512
        return
    random.seed(3)
    expected = getattr(redis.backoff, name)().compute(failures)
    random.seed(3)
    assert getattr(backoff, name)().compute(failures).hex() == expected.hex()


@pytest.mark.parametrize("name", USES_FAILURES)
@pytest.mark.parametrize("base", [2, Fraction(1, 100), True])
def test_huge_counts_with_non_float_bases_give_the_cap(name, base):
    # Without the guard an int base would make Python build 2**(10**30).
    strategy = getattr(backoff, name)(cap=4, base=base)
    for failures in (10**30, 10**6, 2000):
        delay = strategy.compute(failures)
        assert 0 <= delay <= 4


@pytest.mark.parametrize("name", ["FullJitterBackoff", "EqualJitterBackoff"])
@pytest.mark.parametrize(
    "cap, base, failures",
    [
        (0.512, -1, 2000),  # a negative int base: the bound is a huge negative int
        (0.512, Fraction(-1, 3), 1100),  # the same with a Fraction
        (math.inf, 1, 2000),  # an infinite cap keeps the huge int bound
        (2**3000, 1, 2000),  # so does an int cap past the float range
        (0.512, -1, 10**6),
    ],
)
def test_exact_bounds_past_the_float_range_draw_in_floats(name, cap, base, failures):
    # Regression: the bound min(cap, base * 2**failures) was an exact int or
    # Fraction past the float range, and random.uniform (or `/ 2`) raised
    # OverflowError from the C side for failures >= 1024.  The formula in
    # floats gives the infinity of the bound's sign.
    if LDEXP_RULE:
        # redis-py 8.2's exponential is a float, +inf past the range whatever
        # the base's sign, so the bound is that float or the cap object, as
        # redis-py passes it (an int cap past the float range then raises
        # OverflowError in random.uniform, there as here).
        for seed in range(5):
            random.seed(seed)
            expected = outcome(lambda: getattr(redis.backoff, name)(cap, base).compute(failures))
            random.seed(seed)
            assert outcome(lambda: getattr(backoff, name)(cap, base).compute(failures)) == expected
        return
    sign = 1 if base > 0 else -1
    for seed in range(5):
        random.seed(seed)
        delay = getattr(backoff, name)(cap, base).compute(failures)
        assert delay == sign * math.inf


def test_exact_bounds_inside_the_float_range_are_kept():
    # A bound that converts to a float is passed on unchanged, as redis-py does.
    for name in ("FullJitterBackoff", "EqualJitterBackoff"):
        for base in (-1, Fraction(-1, 3), 3):
            random.seed(1)
            mine = getattr(backoff, name)(math.inf, base).compute(1000)
            random.seed(1)
            theirs = getattr(redis.backoff, name)(math.inf, base).compute(1000)
            assert mine == theirs


def test_zero_base_stays_zero_for_huge_counts():
    assert backoff.ExponentialBackoff(base=0.0).compute(10**30) == 0.0
    assert backoff.FullJitterBackoff(base=0.0).compute(10**30) == 0.0


def test_very_negative_counts_give_zero():
    for failures in (-(10**400), -(10**30), -5000, -1e300):
        with huge_count(failures):
            assert backoff.ExponentialBackoff().compute(failures) == 0.0


def test_retrying_forever_keeps_producing_delays():
    # A Retry with retries=-1 calls compute with ever larger counts.
    strategies = [getattr(backoff, name)() for name in USES_FAILURES]
    for failures in range(1000, 1200):
        for strategy in strategies:
            assert 0 <= strategy.compute(failures) <= 0.512


# ---- types ----


@pytest.mark.parametrize("name", USES_FAILURES + ["DecorrelatedJitterBackoff"])
@pytest.mark.parametrize("parameter", ["cap", "base"])
@pytest.mark.parametrize("value", ["1", None, b"1", [1], 1j, object()])
def test_wrong_parameter_type_names_it(name, parameter, value):
    with pytest.raises(TypeError, match=f"'{parameter}'"):
        getattr(backoff, name)(**{parameter: value})


def test_constant_checks_its_delay():
    with pytest.raises(TypeError, match="'backoff'"):
        backoff.ConstantBackoff("0.1")


@pytest.mark.parametrize("name", USES_FAILURES)
@pytest.mark.parametrize("value", [None, "3", [3], 3j, object()])
def test_wrong_failure_count_type_names_it(name, value):
    with pytest.raises(TypeError, match="'failures'"):
        getattr(backoff, name)().compute(value)


@pytest.mark.parametrize("name", USES_FAILURES)
@pytest.mark.parametrize("value", [2.0, Fraction(3), Decimal(3), -0.5])
def test_real_but_not_int_failure_counts(name, value):
    # redis-py 8.2's math.ldexp takes ints only, and so do the C types
    # there, with a TypeError naming the argument; under 8.0 and 8.1 the C
    # side computes 2**failures as redis-py does.
    if LDEXP_RULE:
        with pytest.raises(TypeError, match=r"compute\(\) argument 'failures' must be int"):
            getattr(backoff, name)().compute(value)
        with pytest.raises(TypeError):
            getattr(redis.backoff, name)().compute(value)
        return
    random.seed(5)
    expected = outcome(lambda: getattr(redis.backoff, name)().compute(value))
    random.seed(5)
    assert outcome(lambda: getattr(backoff, name)().compute(value)) == expected


@pytest.mark.parametrize("attribute", ["_cap", "_base"])
def test_setting_a_wrong_type_names_the_attribute(attribute):
    strategy = backoff.ExponentialBackoff()
    with pytest.raises(TypeError, match=attribute):
        setattr(strategy, attribute, "1")
    assert getattr(strategy, attribute) in (0.512, 0.008)
    with pytest.raises(TypeError, match="_previous_backoff"):
        backoff.DecorrelatedJitterBackoff()._previous_backoff = None
    with pytest.raises(TypeError, match="_backoff"):
        backoff.ConstantBackoff(1)._backoff = None


def test_attributes_cannot_be_deleted():
    with pytest.raises(AttributeError):
        del backoff.ExponentialBackoff()._cap


class Seconds:
    """A user type with __float__ only."""

    def __float__(self):
        return 0.25


@pytest.mark.parametrize("value", [1, 0.5, True, Fraction(1, 4), Decimal("0.25"), Seconds()])
def test_any_real_number_is_accepted_and_kept(value):
    strategy = backoff.ExponentialBackoff(cap=value, base=value)
    assert strategy._cap is value and strategy._base is value
    assert backoff.ConstantBackoff(value).compute(1) is value


def test_wrong_argument_count_is_a_type_error():
    with pytest.raises(TypeError):
        backoff.ExponentialBackoff().compute()
    with pytest.raises(TypeError):
        backoff.ExponentialBackoff().compute(1, 2)
    with pytest.raises(TypeError):
        backoff.ExponentialBackoff().compute(fails=1)


# ---- repr ----


def test_repr():
    assert repr(backoff.ExponentialBackoff()) == "ExponentialBackoff(cap=0.512, base=0.008)"
    assert repr(backoff.FullJitterBackoff(1, 0.5)) == "FullJitterBackoff(cap=1, base=0.5)"
    assert repr(backoff.DecorrelatedJitterBackoff()) == (
        "DecorrelatedJitterBackoff(cap=0.512, base=0.008)"
    )
    assert repr(backoff.ConstantBackoff(0.1)) == "ConstantBackoff(backoff=0.1)"
    assert repr(backoff.NoBackoff()) == "NoBackoff()"

    class Mine(backoff.EqualJitterBackoff):
        pass

    assert repr(Mine(cap=2.0)) == "Mine(cap=2.0, base=0.008)"


def test_objects_made_by_new_alone_are_usable():
    for cls in (backoff.ExponentialBackoff, backoff.DecorrelatedJitterBackoff):
        strategy = cls.__new__(cls)
        assert strategy == cls()
        assert math.isfinite(strategy.compute(1))
    assert backoff.ConstantBackoff.__new__(backoff.ConstantBackoff).compute(1) == 0
