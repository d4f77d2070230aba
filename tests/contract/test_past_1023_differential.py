"""Failure counts past 1023 with exact numbers: the C strategies against
redis-py, differentially.

Under redis-py 8.0 and 8.1 (base * 2**failures with Python numbers) the C
types replace redis-py's OverflowError, and only it, with the formula's
value: where redis-py returns a value the C side returns an equal one of the
same type (an exact int 2**16384 under an infinite cap too); where it raises
anything else (a Decimal bound meeting random.uniform's float: TypeError),
the same exception type; where it raises OverflowError, the value of
`formula()` below.  Under 8.2 (math.ldexp, inf on overflow) there is no
OverflowError to replace: the outcomes are simply redis-py's.
"""

import math
import random
from decimal import Decimal
from fractions import Fraction

import redis.backoff as reference
from hypothesis import HealthCheck, given, settings, strategies as st
from support import CAPPED, LDEXP_RULE, outcome

import redis_backoff_c.backoff as c_backoff

exact_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.decimals(allow_nan=False),
    st.fractions(max_denominator=10**6),
    st.sampled_from([math.inf, -math.inf, 0.512, 1e308, 0.0, -0.0]),
)
counts = st.one_of(
    st.integers(min_value=1000, max_value=20000), st.sampled_from([1023, 1024, 16384])
)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def in_float_range(value):
    """An int or Fraction past the float range as the float infinity of its
    sign, as the formula gives it in floats; anything else as it is."""
    if isinstance(value, (int, Fraction)):
        try:
            float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return value


def overflowing(x):
    """x * 2**failures in floats once 2**failures is past every float."""
    if not x:
        return x
    return math.inf if x > 0 else -math.inf


def formula(name, cap, base, failures):
    """The documented value where redis-py 8.0 and 8.1 raise OverflowError:
    redis-py's expression with each overflowing step given its value in
    floats."""
    if name == "ExponentialWithJitterBackoff":
        jittered = random.random() * base
        try:
            scaled = jittered * 2**failures
        except OverflowError:
            scaled = overflowing(jittered)
        return min(cap, scaled)
    try:
        scaled = base * 2**failures
    except OverflowError:
        scaled = overflowing(base)
    high = min(cap, scaled)
    if name == "ExponentialBackoff":
        return high
    if name == "FullJitterBackoff":
        return random.uniform(0, in_float_range(high))
    try:
        temp = high / 2
    except OverflowError:
        temp = in_float_range(high) / 2
    temp = in_float_range(temp)
    return temp + random.uniform(0, temp)


def compute(module, name, cap, base, failures, seed):
    strategy = getattr(module, name)(cap, base)
    random.seed(seed)
    return outcome(lambda: strategy.compute(failures))


@SETTINGS
@given(
    name=st.sampled_from(CAPPED),
    cap=exact_numbers,
    base=exact_numbers,
    failures=counts,
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_only_overflow_error_is_replaced(name, cap, base, failures, seed):
    theirs = compute(reference, name, cap, base, failures, seed)
    mine = compute(c_backoff, name, cap, base, failures, seed)
    if theirs == ("raised", OverflowError):
        assert not LDEXP_RULE  # 8.2 has no OverflowError left to replace
        random.seed(seed)
        theirs = outcome(lambda: formula(name, cap, base, failures))
    assert mine == theirs


def test_the_known_cases():
    # Regressions: each once differed from redis-py 8.0 and 8.1.
    cases = [
        ("ExponentialBackoff", math.inf, 1, 16384),
        ("EqualJitterBackoff", math.inf, 1, 1024),
        ("ExponentialBackoff", 0.5, False, 16384),
        ("ExponentialBackoff", math.inf, Decimal(1), 16384),
        ("ExponentialBackoff", Decimal("inf"), Decimal(1), 16384),
        ("FullJitterBackoff", math.inf, Decimal(1), 16384),
        ("EqualJitterBackoff", math.inf, Decimal(1), 16384),
    ]
    for name, cap, base, failures in cases:
        assert compute(c_backoff, name, cap, base, failures, 7) == compute(
            reference, name, cap, base, failures, 7
        )


USES_FAILURES = [
    "ExponentialBackoff",
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "ExponentialWithJitterBackoff",
]


@settings(max_examples=50, deadline=None)
@given(
    name=st.sampled_from(USES_FAILURES),
    cap=st.one_of(
        st.floats(min_value=0, max_value=1e308), st.integers(0, 2**1000), st.fractions(min_value=0)
    ),
    base=st.one_of(
        st.integers(1, 2**70), st.just(True), st.fractions(min_value=Fraction(1, 10**6))
    ),
    failures=st.sampled_from([10**9, 2**63, 10**30, 10**400]),
)
def test_huge_counts_stay_cheap(name, cap, base, failures):
    # redis-py 8.0 and 8.1 would build 2**failures (never finishing) only to
    # take the finite cap; the C side compares magnitudes instead.  Under
    # 8.2, math.ldexp is cheap: the outcome is redis-py's.
    if LDEXP_RULE:
        assert compute(c_backoff, name, cap, base, failures, 3) == compute(
            reference, name, cap, base, failures, 3
        )
        return
    strategy = getattr(c_backoff, name)(cap, base)
    delay = strategy.compute(failures)
    if name == "ExponentialBackoff":
        assert delay is cap
    else:
        assert delay is cap or 0 <= delay <= float(cap)
