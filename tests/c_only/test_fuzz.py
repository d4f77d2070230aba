"""Arbitrary objects thrown at every constructor, attribute setter and
method of the C types, beside redis-py's: strings, None, huge ints, NaN and
infinities, negatives, bools, Fractions, Decimals, complex numbers, lists,
and objects whose __float__, __index__, __eq__ or __hash__ raise.

- Only clean exceptions ever come out (TypeError, ValueError, ArithmeticError
  with OverflowError and decimal's signals, the user's own exception, and
  AttributeError/RecursionError where redis-py raises them too): never a
  crash, never SystemError.
- Wherever redis-py returns a value, the C side returns an equal one: the
  same type, floats bit for bit, after seeding `random` identically.
- Where the C side deliberately differs, its behaviour is asserted: a
  parameter that is not a real number is a TypeError at construction or
  assignment (redis-py takes anything and fails later, or never); under
  redis-py 8.0 and 8.1 a failure count past 1023 gives a value where
  redis-py raises OverflowError.  Under 8.2 (math.ldexp, inf on overflow)
  the exponential strategies raise exactly where redis-py does, with the
  same exception type.
"""

import copy
import math
import pickle
import random
from decimal import Decimal

import pytest
import redis.backoff
import redis.exceptions
import redis.retry
from hypothesis import HealthCheck, given, settings, strategies as st
from support import CAPPED, EXPONENTIAL, LDEXP_RULE, Conn, UserError

import redis_backoff_c.backoff as c_backoff
import redis_backoff_c.retry as c_retry

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class FloatLike:
    """A real number by __float__ (picklable: a module-level class)."""

    def __init__(self, value=0.5):
        self.value = value

    def __float__(self):
        return float(self.value)

    def __repr__(self):
        return f"FloatLike({self.value!r})"


class IndexLike:
    def __init__(self, value=3):
        self.value = value

    def __index__(self):
        return self.value

    def __repr__(self):
        return f"IndexLike({self.value!r})"


class RaisingFloat(FloatLike):
    def __float__(self):
        raise UserError("__float__")


class RaisingIndex(IndexLike):
    def __index__(self):
        raise UserError("__index__")


class RaisingEq(FloatLike):
    def __eq__(self, other):
        raise UserError("__eq__")

    def __lt__(self, other):
        raise UserError("__lt__")

    __gt__ = __lt__

    def __hash__(self):
        return 1


class RaisingHash(FloatLike):
    def __hash__(self):
        raise UserError("__hash__")


class ReturningWeird(float):
    """A float subclass whose comparisons return non-bools."""

    def __lt__(self, other):
        return "yes"

    def __gt__(self, other):
        return []

    def __eq__(self, other):
        return NotImplemented

    __hash__ = float.__hash__


HOSTILE = [
    FloatLike(0.25),
    FloatLike(float("nan")),
    IndexLike(3),
    IndexLike(-(10**30)),
    RaisingFloat(),
    RaisingIndex(),
    RaisingEq(),
    RaisingHash(),
    ReturningWeird(0.5),
    object(),
    [1.0],
    (0.5,),
    {"a": 1},
    1j,
    b"1",
    Decimal("sNaN"),
    Decimal("NaN"),
    Decimal("-Infinity"),
]


def pick(items):
    """sampled_from, without hashing the items (hypothesis hashes what it
    samples from, and some of these refuse)."""
    return st.integers(min_value=0, max_value=len(items) - 1).map(items.__getitem__)


numbers = st.one_of(
    st.floats(),  # NaN and the infinities included
    st.floats(min_value=-2, max_value=2),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(2**2000), max_value=2**2000),
    st.booleans(),
    st.fractions(min_value=-100, max_value=100, max_denominator=1000),
    st.decimals(min_value=-100, max_value=100, places=4),
)
anything = st.one_of(
    numbers,
    st.none(),
    st.text(max_size=3),
    pick(HOSTILE),
)
# Failure counts redis-py can compute with in no time: its 2**failures is an
# exact int, so the ints and Fractions stay below 2**15 in size.
failure_counts = st.one_of(
    st.integers(min_value=-5, max_value=40),
    st.integers(min_value=-20000, max_value=20000),
    st.floats(),
    st.booleans(),
    st.fractions(min_value=-2000, max_value=2000, max_denominator=50),
    st.decimals(min_value=-2000, max_value=2000, places=2),
    st.none(),
    st.text(max_size=2),
    pick(HOSTILE),
)

CLEAN = (TypeError, ValueError, ArithmeticError, UserError)

# The strategies that use the failure count: redis-py 8.2's rule for them.


def is_real(value):
    """The C side's rule for parameters: an int or float, or an object whose
    type has __float__ or __index__."""
    if isinstance(value, (int, float)):
        return True
    return hasattr(type(value), "__float__") or hasattr(type(value), "__index__")


def clean_outcome(call, clean=CLEAN):
    """("value", v) or ("raised", type); anything but a clean exception
    fails the test."""
    try:
        return ("value", call())
    except clean as error:
        return ("raised", type(error))


def same(a, b):
    """Equal as the contract means it: same type; floats bit for bit (NaN's
    sign bit too); Decimals by their text; else the same object or ==."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex() if not math.isnan(a) else math.isnan(b)
    if isinstance(a, Decimal):
        return str(a) == str(b)
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - unequal when it cannot say
        return False


def assert_agrees(reference, mine, what):
    if reference[0] == "value":
        assert mine[0] == "value", f"{what}: redis-py returned {reference[1]!r}, C {mine!r}"
        assert same(reference[1], mine[1]), f"{what}: redis-py {reference[1]!r}, C {mine[1]!r}"


def compute_both(ref, mine, failures, seed):
    random.seed(seed)
    expected = clean_outcome(lambda: ref.compute(failures))
    random.seed(seed)
    actual = clean_outcome(lambda: mine.compute(failures))
    return expected, actual


# ---- constructors and compute ----


@SETTINGS
@given(
    name=st.sampled_from(CAPPED),
    cap=anything,
    base=anything,
    failures=st.lists(failure_counts, min_size=1, max_size=3),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_capped_constructors_and_compute(name, cap, base, failures, seed):
    ref = getattr(redis.backoff, name)(cap, base)
    made = clean_outcome(lambda: getattr(c_backoff, name)(cap, base))
    if not (is_real(cap) and is_real(base)):
        assert made == ("raised", TypeError)  # the documented early TypeError
        return
    assert made[0] == "value", made
    mine = made[1]
    for count in failures:
        expected, actual = compute_both(ref, mine, count, seed)
        assert_agrees(expected, actual, f"{name}({cap!r}, {base!r}).compute({count!r})")
        if LDEXP_RULE and name in EXPONENTIAL and expected[0] == "raised":
            assert actual == expected, f"{name}({cap!r}, {base!r}).compute({count!r})"
        if expected[0] == "raised" and actual[0] == "value":
            # C gives a value only where redis-py overflows, or where the
            # count is a real number redis-py's ** cannot take.
            assert expected[1] in (OverflowError, TypeError) or isinstance(count, Decimal), (
                expected,
                actual,
            )
        if name == "DecorrelatedJitterBackoff" and expected[0] == "value":
            assert same(ref._previous_backoff, mine._previous_backoff)
    repr(mine)


@SETTINGS
@given(backoff=anything, failures=failure_counts)
def test_constant_constructor_and_compute(backoff, failures):
    made = clean_outcome(lambda: c_backoff.ConstantBackoff(backoff))
    if not is_real(backoff):
        assert made == ("raised", TypeError)
        return
    assert made[1].compute(failures) is backoff
    assert redis.backoff.ConstantBackoff(backoff).compute(failures) is backoff
    repr(made[1])


@SETTINGS
@given(args=st.lists(anything, max_size=3), kwargs=st.dictionaries(st.text(max_size=6), anything))
def test_constructors_take_any_arguments_cleanly(args, kwargs):
    for name in CAPPED + ["ConstantBackoff", "NoBackoff"]:
        cls = getattr(c_backoff, name)
        clean_outcome(lambda cls=cls: cls(*args, **kwargs))
        sub = type("Sub", (cls,), {})
        clean_outcome(lambda sub=sub: sub(*args, **kwargs))


@SETTINGS
@given(
    count=st.one_of(
        st.integers(min_value=1024, max_value=10**40),
        st.floats(min_value=1024, max_value=1e308),
        st.just(10**400),
    ),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_huge_failure_counts_give_values(count, seed):
    # The documented improvement, C side only (redis-py 8.0 and 8.1 would
    # overflow or build a huge int; 8.2 gives these values too, for an int
    # count, and raises TypeError for a float one, as the C types then do).
    for name in CAPPED:
        random.seed(seed)
        if LDEXP_RULE and isinstance(count, float) and name in EXPONENTIAL:
            with pytest.raises(TypeError, match="'failures'"):
                getattr(c_backoff, name)().compute(count)
            continue
        delay = getattr(c_backoff, name)().compute(count)
        assert 0 <= delay <= 0.512


# ---- attributes ----


@SETTINGS
@given(
    name=st.sampled_from(CAPPED + ["ConstantBackoff"]),
    attribute=st.sampled_from(["_cap", "_base", "_previous_backoff", "_backoff"]),
    value=anything,
    failures=failure_counts,
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_attribute_setters(name, attribute, value, failures, seed):
    args = (0.25,) if name == "ConstantBackoff" else ()
    ref = getattr(redis.backoff, name)(*args)
    mine = getattr(c_backoff, name)(*args)
    exists = hasattr(mine, attribute)
    result = clean_outcome(lambda: setattr(mine, attribute, value), CLEAN + (AttributeError,))
    if not exists:
        assert result == ("raised", AttributeError)  # no __dict__: as with __slots__
        return
    if not is_real(value):
        assert result == ("raised", TypeError)
        return
    assert result == ("value", None)
    assert getattr(mine, attribute) is value
    setattr(ref, attribute, value)
    expected, actual = compute_both(ref, mine, failures, seed)
    assert_agrees(expected, actual, f"{name}.{attribute} = {value!r}; compute({failures!r})")
    if LDEXP_RULE and name in EXPONENTIAL and expected[0] == "raised":
        assert actual == expected, f"{name}.{attribute} = {value!r}; compute({failures!r})"
    assert clean_outcome(lambda: delattr(mine, attribute), (AttributeError,)) == (
        "raised",
        AttributeError,
    )


# ---- ==, hash, copy, pickle ----


reals = st.one_of(numbers, pick([h for h in HOSTILE if is_real(h)]))


@SETTINGS
@given(
    name=st.sampled_from(CAPPED + ["ConstantBackoff"]),
    first=st.tuples(reals, reals),
    second=st.tuples(reals, reals),
)
def test_eq_and_hash(name, first, second):
    def make(module, params):
        return getattr(module, name)(*params[: 1 if name == "ConstantBackoff" else 2])

    ref_a, ref_b = make(redis.backoff, first), make(redis.backoff, second)
    mine_a, mine_b = make(c_backoff, first), make(c_backoff, second)
    expected = clean_outcome(lambda: ref_a == ref_b)
    for actual in (
        clean_outcome(lambda: mine_a == mine_b),
        clean_outcome(lambda: mine_a == ref_b),
        clean_outcome(lambda: ref_a == mine_b),
    ):
        assert_agrees(expected, actual, "==")
        if expected[0] == "raised":
            assert actual == expected
    expected_ne = clean_outcome(lambda: ref_a != ref_b)
    assert_agrees(expected_ne, clean_outcome(lambda: mine_a != mine_b), "!=")
    expected_hash = clean_outcome(lambda: hash(ref_a))
    assert clean_outcome(lambda: hash(mine_a)) == expected_hash
    assert clean_outcome(lambda: mine_a == 1) == clean_outcome(lambda: ref_a == 1)
    assert clean_outcome(lambda: mine_a == "x") == ("value", False)


@SETTINGS
@given(
    name=st.sampled_from(CAPPED + ["ConstantBackoff", "NoBackoff"]), params=st.tuples(reals, reals)
)
def test_copy_and_pickle(name, params):
    count = {"NoBackoff": 0, "ConstantBackoff": 1}.get(name, 2)
    mine = getattr(c_backoff, name)(*params[:count])
    shallow = copy.copy(mine)
    assert type(shallow) is type(mine)
    for attribute in ("_cap", "_base", "_backoff", "_previous_backoff"):
        if hasattr(mine, attribute):
            assert getattr(shallow, attribute) is getattr(mine, attribute)
    deep = clean_outcome(lambda: copy.deepcopy(mine))
    assert deep[0] == "value" and type(deep[1]) is type(mine)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = clean_outcome(
            lambda protocol=protocol: pickle.dumps(mine, protocol), CLEAN + (pickle.PicklingError,)
        )
        if data[0] == "value":
            assert type(pickle.loads(data[1])) is type(mine)


@SETTINGS
@given(
    state=st.one_of(
        anything, st.dictionaries(st.sampled_from(["_cap", "_base", "_backoff", "x"]), anything)
    )
)
def test_setstate_takes_anything_cleanly(state):
    for name in ("ExponentialBackoff", "ConstantBackoff", "DecorrelatedJitterBackoff"):
        strategy = getattr(c_backoff, name).__new__(getattr(c_backoff, name))
        clean_outcome(
            lambda strategy=strategy: strategy.__setstate__(state), CLEAN + (AttributeError,)
        )
        repr(strategy)
        clean_outcome(lambda strategy=strategy: strategy.compute(1))


# ---- the random source ----


@SETTINGS
@given(args=st.lists(st.one_of(anything, st.sampled_from(["python", "fast"])), max_size=3))
def test_set_random_source_takes_anything_cleanly(args):
    import redis_backoff_c

    clean_outcome(lambda: redis_backoff_c.set_random_source(*args))
    assert redis_backoff_c.get_random_source() in ("python", "fast")
    c_backoff.FullJitterBackoff().compute(3)
    redis_backoff_c.set_random_source("python")


# ---- Retry ----

error_entries = st.one_of(
    st.sampled_from([Conn, redis.exceptions.TimeoutError, KeyError, Exception, BaseException]),
    anything,
    st.just(Conn("an instance, not a class")),
    st.just(int),
)


def play_retry(module, backoff_module, backoff, retries, errors, script, monkeypatch):
    events = []
    monkeypatch.setattr(module, "sleep", lambda delay: events.append(("sleep", delay)))
    kwargs = {} if errors is None else {"supported_errors": errors}
    made = clean_outcome(lambda: module.Retry(backoff, retries, **kwargs))
    if made[0] == "raised":
        return made, events
    retry = made[1]
    steps = iter(script)

    def do():
        step = next(steps, "ok")
        events.append(("do", step))
        if step == "conn":
            raise Conn("down")
        if step == "key":
            raise KeyError("key")
        return step

    result = clean_outcome(
        lambda: retry.call_with_retry(do, lambda e, n: events.append(("fail", n)), None, True),
        CLEAN + (AttributeError, KeyError, Conn),
    )
    return (made[0], result), events


@SETTINGS
@given(
    backoff=st.one_of(
        st.sampled_from(
            ["NoBackoff", "ConstantBackoff", "ExponentialBackoff", "DecorrelatedJitterBackoff"]
        ),
        anything,
    ),
    retries=st.one_of(st.integers(min_value=-3, max_value=4), anything),
    errors=st.one_of(
        st.none(), st.tuples(error_entries), st.lists(error_entries, max_size=2), error_entries
    ),
    script=st.lists(st.sampled_from(["conn", "key", "ok"]), max_size=5),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_retry_takes_anything(backoff, retries, errors, script, seed):
    with pytest.MonkeyPatch.context() as monkeypatch:

        def strategy(module):
            if isinstance(backoff, str) and hasattr(module, backoff):
                cls = getattr(module, backoff)
                return cls(0.25) if backoff == "ConstantBackoff" else cls()
            return backoff

        random.seed(seed)
        expected, ref_events = play_retry(
            redis.retry,
            redis.backoff,
            strategy(redis.backoff),
            retries,
            errors,
            script,
            monkeypatch,
        )
        random.seed(seed)
        actual, c_events = play_retry(
            c_retry, c_backoff, strategy(c_backoff), retries, errors, script, monkeypatch
        )
    if actual[0] == "raised":
        # The documented early TypeError: retries not an int, or an entry of
        # supported_errors that is not an exception class; or the user's
        # own error from the __index__ of `retries`, which C calls there.
        assert actual[1] is TypeError or (actual[1] is UserError and isinstance(retries, IndexLike))
        return
    # Constructed on both sides: the same events and the same result
    # wherever redis-py returns one.
    if expected[1][0] == "value":
        assert actual[1][0] == "value" and same(expected[1][1], actual[1][1])
        assert c_events == ref_events


@SETTINGS
@given(retries=anything, errors=st.one_of(anything, st.lists(error_entries, max_size=3)))
def test_retry_methods_take_anything_cleanly(retries, errors):
    retry = c_retry.Retry(c_backoff.NoBackoff(), 3)
    clean_outcome(lambda: retry.update_retries(retries))
    clean_outcome(lambda: retry.update_supported_errors(errors))
    clean_outcome(lambda: setattr(retry, "_supported_errors", errors))
    clean_outcome(lambda: setattr(retry, "_retries", retries))
    clean_outcome(lambda: setattr(retry, "_backoff", errors))
    assert isinstance(retry._supported_errors, tuple)
    retry.get_retries()
    clean_outcome(lambda: hash(retry))
    clean_outcome(lambda: retry == c_retry.Retry(c_backoff.NoBackoff(), 3))
    repr(retry)
    clean_outcome(lambda: copy.deepcopy(retry))
    clean_outcome(
        lambda: pickle.loads(pickle.dumps(retry)), CLEAN + (pickle.PicklingError, AttributeError)
    )
