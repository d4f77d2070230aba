"""The edges of compute()'s direct path, differentially.

Each compute() method first tries a direct path for the common call,
compute(n) with one positional exact int in [-1022, 1023] on float cap and
base, while base * 2**n is finite; every other input is handed to the
general path.  These tests put redis-py and the C types side by side on the
inputs at that border (infinities, NaN, -0.0, huge and tiny floats, int,
bool and subclassed parameters; negative, huge, bool, float and subclassed
counts; a keyword; a subclass of the strategy), and check the direct path
against the general path on the fast random source, which redis-py lacks:
compute(n) against compute(failures=n), the keyword taking the general
path, from the same seed.
"""

import math
import random
from decimal import Decimal
from fractions import Fraction
from unittest import mock

import pytest
import redis.backoff as reference
from support import ALL, CAPPED, LDEXP_RULE, outcome

import redis_backoff_c
import redis_backoff_c.backoff as c_backoff


class Float(float):
    pass


class Int(int):
    pass


PARAMETERS = [
    0.512,
    0.008,
    1.0,
    0.0,
    -0.0,
    -0.5,
    math.inf,
    -math.inf,
    math.nan,
    1e308,
    5e-324,
    2.0**-1022,
    3,
    0,
    2**60,
    -7,
    True,
    Float(0.25),
    Int(2),
]
COUNTS = [
    3,
    0,
    1,
    -1,
    -1022,
    -1023,
    -1074,
    -1100,
    1023,
    1024,
    2**30 - 1,
    2**30,
    2**31,
    2**64,
    -(2**64),
    True,
    False,
    3.0,
    -0.0,
    1023.5,
    Int(3),
    Float(3.0),
]
SEED = 20261206


def strategy(module, name, cap, base):
    cls = getattr(module, name)
    if name == "NoBackoff":
        return cls()
    if name == "ConstantBackoff":
        return cls(cap)
    return cls(cap, base)


def compute_outcome(backoff, count, seed, **keyword):
    random.seed(seed)
    if keyword:
        return outcome(lambda: backoff.compute(failures=count))
    return outcome(lambda: backoff.compute(count))


def askable(count):
    """Whether redis-py can be asked: 8.0 and 8.1 build the exact int
    2**count first, which for a count past a few thousand takes minutes and
    gigabytes (the C side's answer there is test_past_1023_differential's)."""
    return LDEXP_RULE or not (isinstance(count, int) and count > 20000)


def comparable(expected, actual):
    """redis-py's outcome and ours agree, but where redis-py 8.0 or 8.1
    raises OverflowError (a count past 1023 with a float), which the C side
    replaces by the formula's value (test_past_1023_differential.py)."""
    if not LDEXP_RULE and expected == ("raised", OverflowError):
        return True
    return expected == actual


BASES = [0.008, 1e308, -1e308, -0.0, math.nan, math.inf, 3, Float(0.5)]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("cap", PARAMETERS, ids=repr)
def test_edges_against_redis_py(name, cap):
    for base in BASES if name in CAPPED else BASES[:1]:
        for count in filter(askable, COUNTS):
            expected = compute_outcome(strategy(reference, name, cap, base), count, SEED)
            actual = compute_outcome(strategy(c_backoff, name, cap, base), count, SEED)
            assert comparable(expected, actual), (base, count, expected, actual)


@pytest.mark.parametrize("name", CAPPED)
@pytest.mark.parametrize("count", list(filter(askable, COUNTS)), ids=repr)
def test_counts_in_sequence_against_redis_py(name, count):
    """The same object over several calls (DecorrelatedJitter's state, the
    random stream) with the edge count between common ones."""
    results = []
    for module in (reference, c_backoff):
        backoff = strategy(module, name, 0.512, 0.008)
        random.seed(SEED)
        results.append([outcome(lambda n=n: backoff.compute(n)) for n in (3, count, 5, count, 1)])
    if not LDEXP_RULE and ("raised", OverflowError) in results[0]:
        stop = results[0].index(("raised", OverflowError))
        results = [steps[:stop] for steps in results]
    assert results[0] == results[1]


@pytest.mark.parametrize("name", CAPPED)
def test_a_strategy_subclass_takes_the_general_path_alike(name):
    class Mine(getattr(c_backoff, name)):
        pass

    class Theirs(getattr(reference, name)):
        pass

    for count in filter(askable, COUNTS):
        expected = compute_outcome(Theirs(0.512, 0.008), count, SEED)
        actual = compute_outcome(Mine(0.512, 0.008), count, SEED)
        assert comparable(expected, actual), (count, expected, actual)


@pytest.mark.parametrize("name", CAPPED)
def test_an_overridden_compute_is_honoured(name):
    class Mine(getattr(c_backoff, name)):
        def compute(self, failures):
            return ("mine", failures)

    assert Mine().compute(3) == ("mine", 3)
    assert redis_backoff_c.Retry(Mine(), 1)._backoff.compute(2) == ("mine", 2)


@pytest.fixture
def fast_source():
    redis_backoff_c.set_random_source("fast", seed=1)
    yield
    redis_backoff_c.set_random_source("python")


@pytest.mark.usefixtures("fast_source")
@pytest.mark.parametrize("name", CAPPED)
@pytest.mark.parametrize("cap", PARAMETERS, ids=repr)
def test_direct_path_matches_general_path_on_the_fast_source(name, cap):
    for base in BASES:
        for count in filter(askable, COUNTS):
            results = []
            for keyword in ({}, {"failures": True}):
                backoff = strategy(c_backoff, name, cap, base)
                redis_backoff_c.set_random_source("fast", seed=SEED)
                steps = [compute_outcome(backoff, count, SEED, **keyword) for _ in range(3)]
                if name == "DecorrelatedJitterBackoff":
                    steps.append(outcome(lambda b=backoff: b._previous_backoff))
                results.append(steps)
            assert results[0] == results[1], (base, count)


@pytest.mark.parametrize("name", CAPPED)
@pytest.mark.parametrize(
    "draw", [0.75, 1, Fraction(1, 3), Decimal("0.5")], ids=["float", "int", "Fraction", "Decimal"]
)
def test_replaced_random_functions_are_called_alike(name, draw):
    """A replaced random.random or random.uniform is handed to the general
    path, which calls it as redis-py does, whatever it returns."""
    results = []
    for module in (reference, c_backoff):
        backoff = strategy(module, name, 0.512, 0.008)
        calls = []

        def uniform(a, b):
            calls.append(("uniform", a, b))
            return draw

        def replaced_random():
            calls.append(("random",))
            return draw

        with mock.patch("random.random", replaced_random), mock.patch("random.uniform", uniform):
            steps = [outcome(lambda n=n: backoff.compute(n)) for n in (3, 0, 3)]
        results.append((steps, [tuple(map(repr, call)) for call in calls]))
    assert results[0] == results[1]


# ---- DecorrelatedJitter's previous delay, kept in one float ----
#
# Where the old previous delay is a float that nothing else refers to, the
# C type writes the new delay into it instead of freeing it and making
# another.  What a program can see must not change: the values (redis-py's,
# bit for bit, from the same seed), the delay and _previous_backoff being
# one object, and every delay or previous delay a program still holds
# keeping its value.

DROPPED_COUNTS = (3, 3, 0, 7, 1, 3, 12, 2)


def dropped_delays(backoff):
    """Each delay read once and dropped, so that the next compute() finds
    its previous delay referred to by the strategy alone."""
    return [outcome(lambda n=n: backoff.compute(n)) for n in DROPPED_COUNTS]


@pytest.mark.parametrize("cap, base", [(0.512, 0.008), (0.05, 0.008), (10.0, 1)], ids=repr)
def test_decorrelated_dropped_delays_against_redis_py(cap, base):
    results = []
    for module in (reference, c_backoff):
        backoff = module.DecorrelatedJitterBackoff(cap, base)
        random.seed(SEED)
        results.append(dropped_delays(backoff) + [outcome(lambda: backoff._previous_backoff)])
    assert results[0] == results[1]


@pytest.mark.usefixtures("fast_source")
@pytest.mark.parametrize("cap, base", [(0.512, 0.008), (0.05, 0.008), (10.0, 1)], ids=repr)
def test_decorrelated_dropped_delays_match_held_ones_on_the_fast_source(cap, base):
    """The fast source, which redis-py lacks: delays dropped as they come
    against delays all held (so that no previous delay is ever written
    into), from the same seed."""
    backoff = c_backoff.DecorrelatedJitterBackoff(cap, base)
    redis_backoff_c.set_random_source("fast", seed=SEED)
    dropped = dropped_delays(backoff)
    backoff.reset()
    redis_backoff_c.set_random_source("fast", seed=SEED)
    held = [backoff.compute(n) for n in DROPPED_COUNTS]
    assert dropped == [outcome(lambda d=delay: d) for delay in held]


def use_source(source):
    if source == "fast":
        redis_backoff_c.set_random_source("fast", seed=SEED)
    else:
        redis_backoff_c.set_random_source("python")


@pytest.mark.parametrize("source", ["python", "fast"])
def test_decorrelated_held_delays_keep_their_values(source):
    use_source(source)
    try:
        for module in (reference, c_backoff):
            backoff = module.DecorrelatedJitterBackoff(10.0, 0.008)
            random.seed(SEED)
            delay = backoff.compute(3)
            assert delay is backoff._previous_backoff
            value = delay.hex()
            previous = backoff._previous_backoff
            for n in DROPPED_COUNTS:
                new = backoff.compute(n)
                assert new is backoff._previous_backoff
                assert new is not delay
                assert delay.hex() == value and previous is delay
                del new
            # A previous delay given by the program, held or not.
            mine = float("0.25")
            backoff._previous_backoff = mine
            backoff.compute(3)
            assert mine.hex() == (0.25).hex()
            backoff._previous_backoff = float("0.25")
            assert backoff.compute(3) is backoff._previous_backoff
    finally:
        redis_backoff_c.set_random_source("python")


@pytest.mark.parametrize("source", ["python", "fast"])
def test_decorrelated_cap_is_never_written_into(source):
    """The cap becomes the previous delay whenever it wins; the next
    compute() must leave it alone (its field refers to it too)."""
    use_source(source)
    try:
        cap = float("0.01")
        backoff = c_backoff.DecorrelatedJitterBackoff(cap, 0.008)
        del cap
        random.seed(SEED)
        results = [backoff.compute(3) is backoff._cap for _ in range(50)]
        assert any(results) and not all(results)
        assert backoff._cap.hex() == (0.01).hex()
    finally:
        redis_backoff_c.set_random_source("python")


@pytest.mark.parametrize("source", ["python", "fast"])
def test_decorrelated_previous_read_beside_compute(source):
    """The previous delay read in the same expression as the next compute(),
    held only by the interpreter's stack while compute() runs, keeps its
    value (redis-py beside us on the default source)."""
    use_source(source)
    try:
        results = []
        for module in (reference, c_backoff) if source == "python" else (c_backoff,):
            backoff = module.DecorrelatedJitterBackoff(10.0, 0.008)
            random.seed(SEED)
            backoff.compute(3)
            pairs = [(backoff._previous_backoff, backoff.compute(n)) for n in DROPPED_COUNTS]
            assert all(old is not new for old, new in pairs)
            assert all(pairs[i][1] is pairs[i + 1][0] for i in range(len(pairs) - 1))
            results.append([(old.hex(), new.hex()) for old, new in pairs])
        assert results[0] == results[-1]
    finally:
        redis_backoff_c.set_random_source("python")


# ---- The delay float the module keeps for the direct paths ----
#
# A direct path returns one float the module keeps, its value rewritten,
# while nothing else holds it (the caller dropped the last delay it was
# given).  Again nothing a program can see may change: the values, bit for
# bit (redis-py's from the same seed, with the delays dropped), and every
# delay a program still holds, by a name, in a container or on the
# interpreter's stack, keeping its value.  Counts 20 and 30 reach the cap.

KEPT_COUNTS = (3, 3, 0, 7, 1, 20, 3, 12, 2, 30, 5)


def kept_run(module, name, source, shape):
    """The outcomes of KEPT_COUNTS, each count asked twice, on a new
    strategy from SEED: `shape` "dropped" reads each delay once and drops
    it, "held" keeps them all in a list, "paired" asks each count's two in
    one expression, the first held only by the stack while the second is
    computed."""
    backoff = strategy(module, name, 0.512, 0.008)
    use_source(source)
    random.seed(SEED)
    if shape == "dropped":
        return [outcome(lambda n=n: backoff.compute(n)) for n in KEPT_COUNTS for _ in "ab"]
    if shape == "held":
        delays = [backoff.compute(n) for n in KEPT_COUNTS for _ in "ab"]
    else:
        pairs = [(backoff.compute(n), backoff.compute(n)) for n in KEPT_COUNTS]
        assert all(a is not b for a, b in pairs if a is not backoff._cap)
        delays = [delay for pair in pairs for delay in pair]
    return [outcome(lambda d=delay: d) for delay in delays]


@pytest.mark.parametrize("source", ["python", "fast"])
@pytest.mark.parametrize("name", CAPPED)
def test_dropped_delays_match_held_ones(name, source):
    """Dropped, held and paired delays from the same seed: the same values;
    on the default source, redis-py's too."""
    try:
        runs = [kept_run(c_backoff, name, source, shape) for shape in ("dropped", "held", "paired")]
        if source == "python":
            runs.append(kept_run(reference, name, source, "dropped"))
        assert all(run == runs[0] for run in runs), runs
    finally:
        redis_backoff_c.set_random_source("python")


@pytest.mark.parametrize("source", ["python", "fast"])
@pytest.mark.parametrize("name", CAPPED)
def test_a_held_delay_is_never_written_into(name, source):
    """A delay a program holds keeps its value and identity whatever the
    strategies compute after it, this one or another of the module's; on
    the default source redis-py's alike (the fast source is ours alone)."""
    use_source(source)
    try:
        for module in (reference, c_backoff) if source == "python" else (c_backoff,):
            backoff = strategy(module, name, 10.0, 0.25)
            other = module.FullJitterBackoff(10.0, 0.25)
            delay = backoff.compute(3)
            value = delay.hex()
            box = [backoff.compute(2)]
            boxed = box[0].hex()
            for n in KEPT_COUNTS:
                backoff.compute(n)
                other.compute(n)
                assert delay.hex() == value and box[0].hex() == boxed
            assert backoff.compute(3) is not delay
    finally:
        redis_backoff_c.set_random_source("python")
