"""Python code called from inside the C code calls back into it, or changes
the objects it is working on: a fail callback calling call_with_retry on
the same Retry, replacing _backoff or _supported_errors, re-running
__init__; a compute override that raises; the parameters' own __eq__,
__hash__ or __repr__, or a replaced random.uniform, assigning the
attributes being read.  No crash (the sanitizer run checks the memory
accesses), and the same observable result as redis-py wherever it gives
one.  tests/contract/test_retry.py covers the simpler cases of the same kind."""

import gc
import random

import pytest
from support import LDEXP_RULE, Conn, both, patch_sleep


def fresh(value):
    """A float object of its own (not shared with any constant), so that
    dropping the last reference to it frees it."""
    return float(str(value))


def outcome_with_message(call):
    try:
        return ("value", call())
    except Exception as error:  # noqa: BLE001 - the type is the outcome
        return ("raised", type(error).__name__, str(error))


# ---- strategies: parameters whose methods assign the attributes ----


def test_eq_where_the_first_comparison_replaces_the_second_parameter():
    def play(impl):
        class Base(float):
            def __eq__(self, other):
                strategy._cap = fresh(0.3)  # frees the cap being compared next
                return True

            __hash__ = float.__hash__

        strategy = impl.backoff.ExponentialBackoff(fresh(3.75), Base(0.5))
        results = []
        for cap in (3.75, 0.3):
            strategy._cap = fresh(3.75)
            results.append(strategy == impl.backoff.ExponentialBackoff(cap, 0.5))
        return results

    assert both(play) == [False, True]  # the second field is read after the first ==


def test_eq_where_the_other_sides_field_replaces_ours():
    def play(impl):
        class Theirs(float):
            def __eq__(self, other):
                mine._cap = fresh(9.0)
                mine._base = fresh(9.0)
                return NotImplemented

            __hash__ = float.__hash__

        mine = impl.backoff.FullJitterBackoff(fresh(1.0), fresh(0.5))
        theirs = impl.backoff.FullJitterBackoff(Theirs(1.0), Theirs(0.5))
        return [
            outcome_with_message(lambda: mine == theirs),
            outcome_with_message(lambda: theirs == mine),
        ]

    both(play)


def test_constant_eq_where_the_comparison_replaces_the_delay():
    def play(impl):
        class Delay(float):
            def __eq__(self, other):
                strategy._backoff = fresh(2.5)
                return True

            __hash__ = float.__hash__

        strategy = impl.backoff.ConstantBackoff(Delay(1.0))
        other = impl.backoff.ConstantBackoff(fresh(7.0))
        return [strategy == other, strategy == other, strategy._backoff]

    both(play)


def test_hash_where_hashing_the_base_replaces_the_cap():
    def play(impl):
        class Base(float):
            def __hash__(self):
                strategy._cap = fresh(0.3)
                return 12345

        strategy = impl.backoff.EqualJitterBackoff(fresh(3.75), Base(0.5))
        first = hash(strategy)  # of (base, the old cap): read before hashing
        return [first, hash(strategy)]

    both(play)


def test_repr_where_a_parameters_repr_replaces_the_others(c_impl):
    class Cap(float):
        def __repr__(self):
            strategy._base = fresh(0.3)
            strategy._cap = fresh(0.4)
            return "Cap()"

    strategy = c_impl.backoff.ExponentialBackoff(Cap(2.0), fresh(3.75))
    assert repr(strategy) == "ExponentialBackoff(cap=Cap(), base=3.75)"
    assert repr(strategy) == "ExponentialBackoff(cap=0.4, base=0.3)"

    class Delay(float):
        def __repr__(self):
            constant._backoff = fresh(0.5)
            return "Delay()"

    constant = c_impl.backoff.ConstantBackoff(Delay(1.0))
    assert repr(constant) == "ConstantBackoff(backoff=Delay())"
    assert repr(constant) == "ConstantBackoff(backoff=0.5)"


@pytest.mark.parametrize(
    "name", ["FullJitterBackoff", "EqualJitterBackoff", "DecorrelatedJitterBackoff"]
)
def test_replaced_uniform_assigning_the_parameters(c_impl, monkeypatch, name):
    # The C strategies read their parameters once per compute() and own them
    # (a deliberate choice: redis-py reads _cap again after uniform()); what
    # matters here is that the objects freed by the assignment are not used.
    strategy = getattr(c_impl.backoff, name)(fresh(0.75), fresh(0.25))

    def uniform(a, b):
        strategy._cap = fresh(0.5)
        strategy._base = fresh(0.125)
        if name == "DecorrelatedJitterBackoff":
            strategy._previous_backoff = fresh(0.1)
        gc.collect()
        return (a + b) / 2

    monkeypatch.setattr(random, "uniform", uniform)
    for failures in range(6):
        strategy._cap, strategy._base = fresh(0.75), fresh(0.25)
        delay = strategy.compute(failures)
        assert 0 <= delay <= 0.75


def test_failures_whose_conversion_assigns_the_parameters(c_impl):
    class Failures:
        def __float__(self):
            strategy._base = fresh(0.5)
            strategy._cap = fresh(0.5)
            return 3.0

        def __index__(self):
            return 3

    for name in ("ExponentialBackoff", "FullJitterBackoff", "ExponentialWithJitterBackoff"):
        strategy = getattr(c_impl.backoff, name)(4, 1)  # the generic path
        if LDEXP_RULE:
            # redis-py 8.2's math.ldexp takes an int count and converts
            # nothing: a TypeError before any Python code runs.
            with pytest.raises(TypeError, match="'failures' must be int"):
                strategy.compute(Failures())
            assert strategy._cap == 4
            continue
        # 2 ** Failures() is a TypeError, as in redis-py, which converts
        # nothing first (the magnitude check reads only ints and Fractions):
        # no __float__ runs and the parameters stay.
        with pytest.raises(TypeError, match="pow"):
            strategy.compute(Failures())
        assert strategy._cap == 4


def test_base_whose_conversion_assigns_the_parameters():
    # redis-py 8.2's math.ldexp converts the base with float(), running its
    # __float__, which here frees the base being converted and the cap
    # (8.0 and 8.1 multiply instead: a TypeError on both sides).
    def play(impl):
        results = []
        for name in ("ExponentialBackoff", "FullJitterBackoff", "EqualJitterBackoff"):

            class Base:
                def __float__(self):
                    strategy._base = fresh(0.5)
                    strategy._cap = fresh(0.25)
                    gc.collect()
                    return 1.0

            strategy = getattr(impl.backoff, name)(fresh(4.0), Base())
            random.seed(1)
            results.append(outcome_with_message(lambda: strategy.compute(3)))
            base = strategy._base  # Base() itself under 8.0 and 8.1
            results.append((strategy._cap, base if isinstance(base, float) else "Base"))
        return results

    both(play)


# ---- Retry: callbacks that re-enter or change it ----


def run_retry(impl, monkeypatch, backoff, retries, script, fail_action=None, **kwargs):
    """call_with_retry on a Retry over `backoff`, with a do() that plays
    `script` ("conn" raises ConnectionError, anything else is returned) and a
    fail() that records and then runs fail_action(retry, count, events)."""
    events = []
    patch_sleep(impl, monkeypatch, events)
    retry = impl.retry.Retry(backoff, retries)
    steps = iter(script)

    def do():
        step = next(steps)
        events.append(("do", step))
        if step == "conn":
            raise Conn(f"conn {len(events)}")
        return step

    def fail(error, count):
        events.append(("fail", str(error), count))
        if fail_action is not None:
            fail_action(retry, count, events)

    events.append(
        outcome_with_message(
            lambda: retry.call_with_retry(do, fail, with_failure_count=True, **kwargs)
        )
    )
    return events


def test_fail_calls_call_with_retry_on_the_same_retry_recursively(monkeypatch):
    depth = []

    def nested(retry, count, events):
        if len(depth) < 25:
            depth.append(count)
            inner = iter(["conn", "inner ok"])

            def do():
                step = next(inner)
                if step == "conn":
                    raise Conn("inner")
                return step

            events.append(("nested", len(depth), retry.call_with_retry(do, nested_fail)))

    def nested_fail(error):
        nested(current[0], 0, events_of[0])

    current, events_of = [None], [None]

    def play(impl):
        depth.clear()

        def action(retry, count, events):
            current[0], events_of[0] = retry, events
            nested(retry, count, events)

        return run_retry(
            impl,
            monkeypatch,
            impl.backoff.ExponentialBackoff(),
            3,
            ["conn", "conn", "done"],
            action,
        )

    events = both(play)
    assert events[-1] == ("value", "done")
    assert len(depth) == 25


def test_unbounded_recursion_through_fail_is_a_clean_recursion_error(monkeypatch):
    def play(impl):
        def fail(error):
            retry.call_with_retry(do, fail)

        def do():
            raise Conn("always")

        patch_sleep(impl, monkeypatch)
        retry = impl.retry.Retry(impl.backoff.NoBackoff(), 3)
        return outcome_with_message(lambda: retry.call_with_retry(do, fail))[:2]

    assert both(play) == ("raised", "RecursionError")


def test_do_calls_call_with_retry_on_the_same_retry(monkeypatch):
    def play(impl):
        events = []
        patch_sleep(impl, monkeypatch, events)
        retry = impl.retry.Retry(impl.backoff.ConstantBackoff(0.5), 2)
        outer = iter(["conn", "nest", "conn", "ok"])

        def inner_do():
            events.append("inner do")
            raise Conn("inner")

        def do():
            step = next(outer)
            events.append(("do", step))
            if step == "conn":
                raise Conn(step)
            if step == "nest":
                # The nested call exhausts its retries and raises out of
                # the outer do(): a supported error for the outer loop.
                retry.call_with_retry(inner_do, lambda e: events.append(("inner fail", str(e))))
            return step

        events.append(
            outcome_with_message(lambda: retry.call_with_retry(do, lambda e: events.append(str(e))))
        )
        return events

    both(play)


@pytest.mark.parametrize("what", ["backoff", "errors", "retries", "init", "everything"])
def test_fail_replaces_what_the_loop_uses(monkeypatch, what):
    # The replaced objects are referenced by the Retry alone (a plain C
    # strategy on the fast path, a fresh tuple): the loop must not use them
    # once freed, and must read the new ones as redis-py does.
    def play(impl):
        def action(retry, count, events):
            if count != 1:
                return
            if what in ("backoff", "everything"):
                retry._backoff = impl.backoff.ConstantBackoff(0.25)
            if what in ("errors", "everything"):
                retry._supported_errors = (KeyError, Conn)
            if what in ("retries", "everything"):
                retry.update_retries(1)
            if what == "init":
                retry.__init__(impl.backoff.ConstantBackoff(0.125), 4, (Conn,))
            gc.collect()

        strategy = impl.backoff.DecorrelatedJitterBackoff(fresh(0.75), fresh(0.25))
        random.seed(11)
        return run_retry(impl, monkeypatch, strategy, 3, ["conn", "conn", "conn", "ok"], action)

    both(play)


def test_is_retryable_replaces_errors_and_backoff(monkeypatch):
    def play(impl):
        events = []
        patch_sleep(impl, monkeypatch, events)
        retry = impl.retry.Retry(impl.backoff.ExponentialBackoff(fresh(1.0), fresh(0.5)), 5)
        script = iter(["conn", "conn", "ok"])

        def do():
            step = next(script)
            if step == "conn":
                raise Conn(step)
            return step

        def is_retryable(error):
            retry._supported_errors = (Conn,)  # a new tuple: the old one freed
            retry._backoff = impl.backoff.ConstantBackoff(fresh(0.5))
            gc.collect()
            events.append("asked")
            return True

        events.append(
            outcome_with_message(lambda: retry.call_with_retry(do, events.append, is_retryable))
        )
        return [e if isinstance(e, (str, tuple)) else str(e) for e in events]

    both(play)


def test_compute_override_that_raises(monkeypatch):
    class Broken(Exception):
        pass

    def play(impl):
        class Raising(impl.backoff.ExponentialBackoff):
            def compute(self, failures):
                raise Broken(f"compute({failures})")

        patch_sleep(impl, monkeypatch)
        retry = impl.retry.Retry(Raising(), 3)

        def do():
            raise Conn("down")

        with pytest.raises(Broken) as caught:
            retry.call_with_retry(do, lambda error: None)
        context = caught.value.__context__
        return (str(caught.value), type(context).__name__, str(context))

    assert both(play) == ("compute(1)", "ConnectionError", "down")


def test_replaced_uniform_replaces_the_retrys_backoff(c_impl, monkeypatch):
    # The plain C strategy computes on the Retry's fast path; the replaced
    # random.uniform drops the Retry's only reference to it mid-compute.
    delays = patch_sleep(c_impl, monkeypatch)
    retry = c_impl.retry.Retry(c_impl.backoff.DecorrelatedJitterBackoff(), 3)

    def uniform(a, b):
        retry._backoff = c_impl.backoff.DecorrelatedJitterBackoff()
        gc.collect()
        return 0.375

    monkeypatch.setattr(random, "uniform", uniform)
    script = iter(["conn", "conn", "ok"])

    def do():
        if next(script) == "conn":
            raise Conn("down")
        return "ok"

    assert retry.call_with_retry(do, lambda error: None) == "ok"
    assert delays == [("sleep", 0.375), ("sleep", 0.375)]


def test_retry_eq_hash_repr_with_backoffs_that_replace_the_retrys_fields():
    def play(impl):
        class Sneaky(impl.backoff.ConstantBackoff):
            def __eq__(self, other):
                retry._backoff = impl.backoff.ConstantBackoff(fresh(1.0))
                retry._supported_errors = (KeyError,)
                gc.collect()
                return True

            def __hash__(self):
                retry._backoff = impl.backoff.ConstantBackoff(fresh(2.0))
                retry._supported_errors = (ValueError,)
                gc.collect()
                return 7

        retry = impl.retry.Retry(Sneaky(fresh(0.5)), 3, (Conn,))
        other = impl.retry.Retry(impl.backoff.ConstantBackoff(0.5), 3, (KeyError,))
        results = [outcome_with_message(lambda: retry == other)]
        retry._backoff = Sneaky(fresh(0.5))
        results.append(
            outcome_with_message(lambda: hash(retry) == hash((7, 3, frozenset((Conn,)))))
        )
        retry._backoff = Sneaky(fresh(0.5))
        repr(retry) if impl.name == "c" else None
        return results

    both(play)


def test_retry_hash_where_hashing_an_error_class_replaces_the_errors():
    # A metaclass __hash__ runs while hash(retry) builds the frozenset of
    # _supported_errors, and replaces them: that hash describes the old
    # tuple, the next one the new tuple (redis-py builds the set each time;
    # the C side must not cache the stale set).
    def play(impl):
        class Meta(type):
            def __hash__(cls):
                retry._supported_errors = (KeyError,)
                return type.__hash__(cls)

        class Odd(Exception, metaclass=Meta):
            pass

        backoff = impl.backoff.NoBackoff()
        retry = impl.retry.Retry(backoff, 1, (Odd,))
        first, second = hash(retry), hash(retry)
        # (Hashing Odd below runs Meta.__hash__ again: after both hashes.)
        return [
            second == hash((backoff, 1, frozenset((KeyError,)))),
            first == hash((backoff, 1, frozenset((Odd,)))),
            retry._supported_errors == (KeyError,),
        ]

    assert both(play) == [True, True, True]
