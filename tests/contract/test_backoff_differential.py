"""Differential property tests: the C strategies against redis-py itself.

Random parameters, failure counts and seeds; after the same random.seed()
both sides must give the same values, bit for bit and of the same type.
Under redis-py 8.0 and 8.1, where redis-py raises OverflowError (a failure
count past 1023 with a float base), the C side returns a value instead:
that deliberate improvement is checked in test_backoff_improvements.py, and
the comparison stops there because the two sides then draw different
amounts of randomness.  Under 8.2 (math.ldexp, inf on overflow) there is
nothing left to improve: the outcomes, exceptions included, are the same.
"""

import random

import redis.backoff as reference
from hypothesis import HealthCheck, given, settings, strategies as st
from support import CAPPED, EXPONENTIAL, LDEXP_RULE, outcome

import redis_backoff_c.backoff as c_backoff

floats = st.floats(allow_nan=True, allow_infinity=True)
positive_floats = st.floats(min_value=0.0, max_value=1e6, exclude_min=True)
parameters = st.one_of(
    positive_floats,
    floats,
    st.integers(min_value=-(2**60), max_value=2**60),
    st.fractions(max_denominator=1000),
    st.booleans(),
)
# Counts from -1100 to 1100: past 1023 redis-py raises OverflowError for a
# float base; larger counts are the C side's improvement (see
# test_backoff_improvements.py), and with an int base redis-py would build
# a huge int for them.
failure_counts = st.one_of(
    st.integers(min_value=-5, max_value=40),
    st.integers(min_value=-1100, max_value=1100),
    st.booleans(),
    st.floats(min_value=-1100, max_value=1100),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), -0.0]),
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run_sequence(module, name, cap, base, failures, seed):
    backoff = getattr(module, name)(cap, base)
    random.seed(seed)
    results = []
    for count in failures:
        results.append(outcome(lambda: backoff.compute(count)))
    return results


def assert_same_until_overflow(expected, actual, base):
    """Equal outcomes up to redis-py's first OverflowError (8.0, 8.1), or
    equal outcomes (8.2).

    The C side's improvement covers a positive base, where base * 2**failures
    is past the cap and the formula has a value. With a base of zero or
    below (or NaN) the product heads to -inf instead, no float holds it, and
    OverflowError stays an honest answer on the C side too.
    """
    if LDEXP_RULE:
        assert actual == expected
        return
    for ref, mine in zip(expected, actual):
        if ref == ("raised", OverflowError):
            if base > 0:
                assert mine[0] == "value", "the C side must not raise OverflowError"
            else:
                assert mine[0] == "value" or mine == ref
            return
        assert mine == ref


@SETTINGS
@given(
    name=st.sampled_from(CAPPED),
    cap=parameters,
    base=parameters,
    failures=st.lists(failure_counts, min_size=1, max_size=8),
    seed=st.integers(min_value=0, max_value=2**64),
)
def test_compute_is_bit_identical(name, cap, base, failures, seed):
    expected = run_sequence(reference, name, cap, base, failures, seed)
    actual = run_sequence(c_backoff, name, cap, base, failures, seed)
    assert_same_until_overflow(expected, actual, base)


@SETTINGS
@given(
    name=st.sampled_from(CAPPED),
    cap=positive_floats,
    base=positive_floats,
    failures=st.lists(st.integers(min_value=0, max_value=1023), min_size=1, max_size=20),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_typical_configurations_are_bit_identical(name, cap, base, failures, seed):
    assert run_sequence(c_backoff, name, cap, base, failures, seed) == run_sequence(
        reference, name, cap, base, failures, seed
    )


# The exponential rule over its whole domain under redis-py 8.2: math.ldexp
# takes any int count at once (it clamps it) and any real number as base,
# through float() (a huge int overflows there, and _exponential makes that
# inf too).  Under 8.0 and 8.1, which build the exact int 2**failures, the
# old rule's domain, as test_compute_is_bit_identical checks it.
if LDEXP_RULE:
    rule_reals = st.one_of(
        parameters,
        st.integers(min_value=-(2**2000), max_value=2**2000),
        st.sampled_from([10**400, -(10**400), 2**1024, -(2**1024), 2**53 + 1]),
        st.fractions(),
        st.decimals(),
        st.decimals(min_value=-100, max_value=100, places=3),
    )
    rule_counts = st.one_of(
        st.integers(min_value=-1200, max_value=1200),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63, -(2**63) - 1]),
        st.sampled_from([10**400, -(10**400), True, False]),
        st.floats(min_value=-1100, max_value=1100),  # TypeError, as in 8.2
        st.decimals(min_value=-10, max_value=10, places=1),  # TypeError too
    )
else:
    rule_reals = parameters
    rule_counts = failure_counts


@SETTINGS
@given(
    name=st.sampled_from(EXPONENTIAL),
    cap=rule_reals,
    base=rule_reals,
    failures=st.lists(rule_counts, min_size=1, max_size=6),
    seed=st.integers(min_value=0, max_value=2**64),
)
def test_exponential_rule_matches_installed_redis_py(name, cap, base, failures, seed):
    expected = run_sequence(reference, name, cap, base, failures, seed)
    actual = run_sequence(c_backoff, name, cap, base, failures, seed)
    assert_same_until_overflow(expected, actual, base)


@SETTINGS
@given(
    cap=parameters,
    base=parameters,
    previous=parameters,
    computes=st.integers(min_value=1, max_value=6),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_decorrelated_state_is_identical(cap, base, previous, computes, seed):
    results = []
    for module in (reference, c_backoff):
        backoff = module.DecorrelatedJitterBackoff(cap, base)
        backoff._previous_backoff = previous
        random.seed(seed)
        steps = [outcome(lambda: backoff.compute(1)) for _ in range(computes)]
        steps.append(outcome(lambda: backoff._previous_backoff))
        backoff.reset()
        steps.append(outcome(lambda: backoff._previous_backoff))
        results.append(steps)
    assert results[0] == results[1]


@SETTINGS
@given(
    name=st.sampled_from(CAPPED),
    cap=parameters,
    base=parameters,
    other_cap=parameters,
    other_base=parameters,
)
def test_equality_and_hash_agree(name, cap, base, other_cap, other_base):
    ref = getattr(reference, name)
    mine = getattr(c_backoff, name)
    assert (mine(cap, base) == mine(other_cap, other_base)) == (
        ref(cap, base) == ref(other_cap, other_base)
    )
    assert (mine(cap, base) == ref(other_cap, other_base)) == (
        ref(cap, base) == ref(other_cap, other_base)
    )
    assert hash(mine(cap, base)) == hash(ref(cap, base))


@SETTINGS
@given(backoff=parameters | st.fractions(), other=parameters)
def test_constant_agrees(backoff, other):
    assert hash(c_backoff.ConstantBackoff(backoff)) == hash(reference.ConstantBackoff(backoff))
    assert (c_backoff.ConstantBackoff(backoff) == reference.ConstantBackoff(other)) == (
        reference.ConstantBackoff(backoff) == reference.ConstantBackoff(other)
    )
    assert c_backoff.ConstantBackoff(backoff).compute(3) is backoff
