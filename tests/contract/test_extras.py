"""The opt-in extras of both Retry types (redis-py has none):
Retry(..., *, deadline=, budget=, stats=), RetryBudget (gRFC A6 retry
throttling) and RetryStats.

Every rule of issue 13 is a test here, run over the C types and their
pure-Python twin (redis_backoff_c._extras_py, what the package gives
without the extension) through the `extras` fixture of conftest.py, and on
the sync Retry and the asyncio one through the `flavor` fixture, which
drives call_with_retry the same way on both (the asyncio one inside
asyncio.run)."""

import asyncio
import copy
import gc
import math
import pickle
import sys
import threading
import time
import weakref
from unittest import mock

import pytest
import redis.exceptions
import redis.retry
from leakcheck import assert_no_leak
from support import EXTRAS, FLAVORS, assert_outcomes_add_up, assert_stats_add_up, never

import redis_backoff_c
import redis_backoff_c.asyncio.retry as async_retry_module
import redis_backoff_c.retry as retry_module
from redis_backoff_c import _call_deadline, _impl
from redis_backoff_c.backoff import ConstantBackoff, ExponentialBackoff, NoBackoff

CE = redis.exceptions.ConnectionError
STAT_KEYS = [
    "calls",
    "attempts",
    "successes",
    "failed_attempts",
    "retries",
    "give_ups_exhausted",
    "give_ups_not_retryable",
    "give_ups_deadline",
    "give_ups_budget",
    "give_ups_may_have_run",
    "unhandled_errors",
    "aborted",
    "slept_seconds",
]


def counters(stats):
    """The snapshot without slept_seconds (the time actually slept, which
    a test's sleep that returns at once makes about 0), and that time."""
    snapshot = stats.snapshot()
    slept = snapshot.pop("slept_seconds")
    assert 0.0 <= slept
    return snapshot, slept


class ExtrasFlavor:
    """support.Flavor's way of running call_with_retry (plain `do` and
    `fail`, wrapped in coroutines for asyncio), over the extras' Retry
    types (the C ones or the twin), with the backoff's sleeps recorded in
    `slept`, and slept only when `real_sleep` is set."""

    def __init__(self, name, monkeypatch, extras):
        self.name = name
        self.runner = FLAVORS[name]
        self.slept = []
        self.real_sleep = False
        if name == "sync":
            self.Retry = extras.Retry

            def sleep(delay):
                self.slept.append(delay)
                if self.real_sleep:
                    time.sleep(delay)

            monkeypatch.setattr(retry_module, "sleep", sleep)
        else:
            self.Retry = extras.AsyncRetry

            async def asleep(delay):
                self.slept.append(delay)
                if self.real_sleep:
                    await asyncio.sleep(delay)

            monkeypatch.setattr(async_retry_module, "sleep", asleep)

    def call(self, retry, do, fail=None, **kwargs):
        return self.runner.call(retry, do, fail or (lambda error: None), **kwargs)


@pytest.fixture(params=["sync", "asyncio"])
def flavor(request, monkeypatch, extras):
    return ExtrasFlavor(request.param, monkeypatch, extras)


def failing(errors, then=None):
    """do(): raises each of `errors` in turn (instances), then returns
    `then`; .attempts counts its calls, .raised the errors raised."""

    def do():
        do.attempts += 1
        if errors:
            error = errors.pop(0)
            do.raised.append(error)
            raise error
        return then

    do.attempts = 0
    do.raised = []
    return do


def always_failing(error_type=CE, pause=0.0):
    def do():
        do.attempts += 1
        do.starts.append(time.monotonic())
        if pause:
            time.sleep(pause)
        error = error_type(f"attempt {do.attempts}")
        do.raised.append(error)
        raise error

    do.attempts = 0
    do.raised = []
    do.starts = []
    return do


# ---------------------------------------------------------------- construction


def test_extras_default_to_none_and_are_keyword_only(flavor, extras):
    retry = flavor.Retry(NoBackoff(), 3)
    assert (retry.deadline, retry.budget, retry.stats) == (None, None, None)
    # Four positional parameters: redis-py 8.2's is_retryable is the fourth.
    with pytest.raises(TypeError, match="at most 4 positional"):
        flavor.Retry(NoBackoff(), 3, (CE,), None, 1.0)
    budget, stats = extras.RetryBudget(10, 0.1), extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, (CE,), deadline=0.5, budget=budget, stats=stats)
    assert retry.deadline == 0.5
    assert retry.budget is budget
    assert retry.stats is stats
    assert retry._supported_errors == (CE,)


@pytest.mark.parametrize("deadline", [0.25, 1, 2**70, True, math.inf])
def test_deadline_accepts_positive_reals_and_keeps_the_object(flavor, deadline):
    retry = flavor.Retry(NoBackoff(), 1, deadline=deadline)
    assert retry.deadline is deadline


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1", TypeError),
        (b"1", TypeError),
        ([1], TypeError),
        (0, ValueError),
        (-1.5, ValueError),
        (False, ValueError),
        (math.nan, ValueError),
    ],
)
def test_bad_deadline_is_refused_naming_it(flavor, value, error):
    with pytest.raises(error, match="'deadline'"):
        flavor.Retry(NoBackoff(), 1, deadline=value)
    retry = flavor.Retry(NoBackoff(), 1, deadline=1.0)
    with pytest.raises(error, match="deadline"):
        retry.deadline = value
    assert retry.deadline == 1.0


@pytest.mark.parametrize("name", ["budget", "stats"])
@pytest.mark.parametrize("value", [1, "budget", object(), "RetryBudget", "RetryStats"])
def test_budget_and_stats_must_be_their_type(flavor, extras, name, value):
    if value in ("RetryBudget", "RetryStats"):
        value = getattr(extras, value)  # the class itself
    with pytest.raises(TypeError, match=f"'{name}'"):
        flavor.Retry(NoBackoff(), 1, **{name: value})
    retry = flavor.Retry(NoBackoff(), 1)
    with pytest.raises(TypeError, match=name):
        setattr(retry, name, value)
    assert getattr(retry, name) is None


def test_a_bad_extra_sets_none_of_them(flavor, extras):
    budget = extras.RetryBudget(10, 0.1)
    with pytest.raises(TypeError, match="'stats'"):
        flavor.Retry(NoBackoff(), 1, deadline=1.0, budget=budget, stats=budget)


def test_extras_are_writable_and_none_unsets_them(flavor, extras):
    retry = flavor.Retry(NoBackoff(), 1)
    budget, stats = extras.RetryBudget(4, 1), extras.RetryStats()
    retry.deadline, retry.budget, retry.stats = 2, budget, stats
    assert (retry.deadline, retry.budget, retry.stats) == (2, budget, stats)
    retry.deadline = retry.budget = retry.stats = None
    assert (retry.deadline, retry.budget, retry.stats) == (None, None, None)
    assert retry == flavor.Retry(NoBackoff(), 1)
    for name in ("deadline", "budget", "stats"):
        with pytest.raises(AttributeError, match="cannot delete"):
            delattr(retry, name)


def test_subclass_init_takes_the_extras(flavor, extras):
    class Sub(flavor.Retry):
        pass

    stats = extras.RetryStats()
    retry = Sub(NoBackoff(), 2, stats=stats, deadline=3)
    assert (retry.stats, retry.deadline, retry.budget) == (stats, 3, None)
    retry.__init__(NoBackoff(), 2)  # __init__ again: the extras given now, none
    assert (retry.stats, retry.deadline) == (None, None)
    with pytest.raises(TypeError, match="at most 4 positional"):
        Sub(NoBackoff(), 2, (CE,), None, 3)
    retry = Sub(NoBackoff(), 2, (CE,), never, stats=stats)
    assert (retry.is_retryable, retry.stats) == (never, stats)
    retry.__init__(NoBackoff(), 2)  # as redis-py's __init__: the checker given now, none
    assert retry.is_retryable is None


# ---------------------------------------------------------------- ==, hash, repr


def test_equality_includes_the_extras(flavor, extras):
    budget, stats = extras.RetryBudget(10, 0.1), extras.RetryStats()
    make = flavor.Retry
    base = make(ExponentialBackoff(), 3, deadline=0.5, budget=budget, stats=stats)
    assert base == make(ExponentialBackoff(), 3, deadline=0.5, budget=budget, stats=stats)
    assert base == make(ExponentialBackoff(), 3, deadline=1 / 2, budget=budget, stats=stats)
    # the deadline by value, budget and stats by identity
    assert base != make(ExponentialBackoff(), 3, deadline=0.6, budget=budget, stats=stats)
    assert base != make(
        ExponentialBackoff(), 3, deadline=0.5, budget=extras.RetryBudget(10, 0.1), stats=stats
    )
    assert base != make(
        ExponentialBackoff(), 3, deadline=0.5, budget=budget, stats=extras.RetryStats()
    )
    assert base != make(ExponentialBackoff(), 3, budget=budget, stats=stats)
    assert make(ExponentialBackoff(), 3) != base
    assert not (base == make(ExponentialBackoff(), 3))
    # the redis-py fields still count
    assert base != make(ExponentialBackoff(), 4, deadline=0.5, budget=budget, stats=stats)


def test_hash_keeps_redis_pys_formula(flavor, extras):
    budget = extras.RetryBudget(10, 0.1)
    retry = flavor.Retry(ExponentialBackoff(), 3, (CE,), deadline=0.5, budget=budget)
    assert hash(retry) == hash((ExponentialBackoff(), 3, frozenset((CE,))))
    assert hash(retry) == hash(flavor.Retry(ExponentialBackoff(), 3, (CE,)))


def test_without_extras_it_still_equals_redis_pys_retry(flavor, extras):
    family = redis.retry.Retry if flavor.name == "sync" else redis.asyncio.retry.Retry
    ours = flavor.Retry(NoBackoff(), 3, (CE,))
    theirs = family(redis.backoff.NoBackoff(), 3, (CE,))
    assert ours == theirs and theirs == ours
    assert hash(ours) == hash(theirs)
    ours.stats = extras.RetryStats()
    assert ours != theirs  # ours has counters, theirs has none


def test_repr_shows_the_extras_that_are_set(flavor, extras):
    retry = flavor.Retry(NoBackoff(), 3, (CE,))
    plain = repr(retry)
    assert "deadline" not in plain and "budget" not in plain and "stats" not in plain
    retry.deadline = 0.25
    assert repr(retry) == plain[:-1] + ", deadline=0.25)"
    retry.budget = extras.RetryBudget(10, 0.1)
    assert repr(retry).endswith(
        ", deadline=0.25, budget=RetryBudget(max_tokens=10, token_ratio=0.1, tokens=10.0))"
    )
    retry.deadline = None
    retry.stats = extras.RetryStats()
    text = repr(retry)
    assert ", deadline=" not in text
    assert text.endswith(", stats=" + repr(retry.stats) + ")")


# ---------------------------------------------------------------- copies, pickle


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copies_share_the_budget_and_the_stats(flavor, extras, copier):
    budget, stats = extras.RetryBudget(10, 0.1), extras.RetryStats()
    retry = flavor.Retry(ExponentialBackoff(), 3, deadline=0.5, budget=budget, stats=stats)
    twin = copier(retry)
    assert twin is not retry and twin == retry
    assert twin.budget is budget and twin.stats is stats and twin.deadline == 0.5
    twin.deadline = 1.0  # the copy's own attribute
    assert retry.deadline == 0.5
    flavor.call(twin, failing([CE("x")], then=1))
    assert stats.attempts == 2 and budget.tokens == 9.1


def test_deepcopy_in_a_memo_shares_too(flavor, extras):
    budget = extras.RetryBudget(10, 0.1)
    retries = [flavor.Retry(NoBackoff(), 1, budget=budget) for _ in range(2)]
    copies = copy.deepcopy(retries)
    assert all(c.budget is budget for c in copies)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_carries_the_extras_by_value(flavor, extras, protocol):
    budget, stats = extras.RetryBudget(10, 0.5), extras.RetryStats()
    retry = flavor.Retry(ExponentialBackoff(), 3, deadline=0.5, budget=budget, stats=stats)
    flavor.call(retry, failing([CE("a"), CE("b")], then=1))
    twin = pickle.loads(pickle.dumps(retry, protocol))
    assert type(twin) is type(retry)
    assert twin.deadline == 0.5
    assert twin.budget is not budget and twin.stats is not stats
    assert (
        repr(twin.budget)
        == repr(budget)
        == ("RetryBudget(max_tokens=10, token_ratio=0.5, tokens=8.5)")
    )
    assert twin.stats.snapshot() == stats.snapshot()
    # One pickle, one budget: Retries pickled together share theirs again.
    a, b = pickle.loads(pickle.dumps([retry, copy.copy(retry)], protocol))
    assert a.budget is b.budget and a.stats is b.stats and a == b


def test_pickle_of_a_plain_retry_has_no_extras_state(flavor):
    retry = flavor.Retry(NoBackoff(), 1)
    state = retry.__reduce__()[2]
    assert "deadline" not in state and "budget" not in state and "stats" not in state


# ---------------------------------------------------------------- the deadline


def test_gives_up_before_a_sleep_that_would_reach_the_deadline(flavor):
    retry = flavor.Retry(ConstantBackoff(0.3), 10, deadline=0.2)
    do = always_failing()
    failed = []
    with pytest.raises(CE) as raised:
        flavor.call(retry, do, failed.append)
    assert do.attempts == 1
    assert flavor.slept == []
    assert raised.value is do.raised[-1]  # the error being handled, as is
    assert failed == do.raised  # fail() ran for it, as before a last retry


def test_sleeps_while_the_sleep_ends_before_the_deadline(flavor):
    flavor.real_sleep = True
    retry = flavor.Retry(ConstantBackoff(0.04), 100, deadline=0.3)
    do = always_failing()
    start = time.monotonic()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    elapsed = time.monotonic() - start
    assert raised.value is do.raised[-1]
    # Never slept past it.  The timed span also holds asyncio.run's own
    # start and end, and a sleep may overrun its delay on a loaded machine
    # or a sanitizer build (CI's ASan stage once read 0.3085 s): less than
    # one more backoff of slack; the count below catches an extra sleep.
    assert elapsed < 0.3 + 0.04
    # 0.3 / 0.04: at most 7 sleeps fit; on a loaded machine fewer
    assert 1 <= len(flavor.slept) <= 7
    # An attempt follows each sleep, unless the sleep overran into the
    # deadline (a loaded machine, a sanitizer build): then none starts.
    assert len(flavor.slept) <= do.attempts <= len(flavor.slept) + 1


def test_never_starts_an_attempt_after_the_deadline(flavor):
    retry = flavor.Retry(NoBackoff(), 100, deadline=0.1)
    do = always_failing(pause=0.04)
    start = time.monotonic()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    assert raised.value is do.raised[-1]
    # attempts start at 0, 0.04, 0.08 (+ overheads): none at or after 0.1.
    # Each start is read where the attempt begins (the call's own start
    # comes a little before its clock's), not from the call's end: on a
    # loaded machine a 0.04 s sleep can overrun (CI once read 0.203 s for
    # the whole call, with every attempt started in time).
    assert 1 <= do.attempts <= 3
    assert all(attempt - start < 0.1 for attempt in do.starts), do.starts


@pytest.fixture
def bound_deadlines():
    """The loops end by the command's deadline (redis_backoff_c._call_deadline),
    as while patch() is active, for the test's length."""
    _call_deadline.bind(True)
    try:
        yield _call_deadline.CALL_DEADLINE
    finally:
        _call_deadline.bind(False)


def call_under(var, command_deadline, flavor, retry):
    """A call of an always failing do() while `var` (CALL_DEADLINE) holds
    `command_deadline` (seconds from now); the do() and the error raised."""
    token = var.set(time.monotonic() + command_deadline)
    try:
        do = always_failing()
        with pytest.raises(CE) as raised:
            flavor.call(retry, do)
    finally:
        var.reset(token)
    return do, raised.value


def test_a_command_deadline_in_the_context_ends_the_call_earlier(flavor, bound_deadlines):
    retry = flavor.Retry(ConstantBackoff(10), 5, deadline=100)
    do, raised = call_under(bound_deadlines, 5, flavor, retry)
    # The sleep of 10 would reach the command's end (in 5 s), not the
    # Retry's own (in 100 s): given up before it, with the error handled.
    assert do.attempts == 1 and flavor.slept == []
    assert raised is do.raised[-1]


def test_a_later_command_deadline_leaves_the_call_its_own(flavor, bound_deadlines):
    retry = flavor.Retry(ConstantBackoff(10), 5, deadline=100)
    do, _ = call_under(bound_deadlines, 1000, flavor, retry)
    # The sleeps (not waited: the clock stands still) fit in its own 100 s.
    assert do.attempts == 6 and flavor.slept == [10] * 5


def test_a_command_deadline_is_read_only_for_a_retry_with_a_deadline(flavor, bound_deadlines):
    do, _ = call_under(bound_deadlines, -1, flavor, flavor.Retry(ConstantBackoff(10), 2))
    assert do.attempts == 3 and flavor.slept == [10, 10]


def test_a_command_deadline_is_not_read_unless_bound(flavor):
    """Without patch(), nothing carries a command's deadline: the loops
    keep their own, whatever the variable holds."""
    retry = flavor.Retry(ConstantBackoff(10), 5, deadline=100)
    do, _ = call_under(_call_deadline.CALL_DEADLINE, -1, flavor, retry)
    assert do.attempts == 6 and flavor.slept == [10] * 5


def test_a_command_that_may_block_forever_sets_no_deadline():
    assert _call_deadline._enter(0.3, math.inf) is None
    assert _call_deadline.CALL_DEADLINE.get(None) is None
    token = _call_deadline._enter(0.3, 5.0)
    try:
        assert 5.2 < _call_deadline.CALL_DEADLINE.get() - time.monotonic() <= 5.3
        inner = _call_deadline._enter(60, math.inf)  # inside it: the outer's
        assert inner is not None
        assert _call_deadline.CALL_DEADLINE.get() - time.monotonic() <= 5.3
        _call_deadline.CALL_DEADLINE.reset(inner)
    finally:
        _call_deadline.CALL_DEADLINE.reset(token)


def test_a_command_cut_before_it_was_written_did_not_run():
    """The write the deadline stops before a byte went out: the policy of
    at most once may retry it (an error from nowhere it knows would be
    marked as may have run)."""
    from redis_backoff_c import writes

    error = _call_deadline._cut_before_send()
    assert isinstance(error, redis.exceptions.TimeoutError)
    assert _call_deadline.not_sent(error)
    assert writes._judge(error) is False and not redis_backoff_c.may_have_run(error)
    assert writes._judge(redis.exceptions.TimeoutError("elsewhere")) is True


def test_a_pause_of_redis_py_ends_by_the_command_deadline():
    """redis-py's cluster module pauses inside an attempt (0.25 s after
    CLUSTERDOWN): under the bounds it sleeps up to the deadline, then the
    attempt's own error is raised; without a deadline it sleeps whole."""
    paced = _call_deadline._PacedTime(time)
    assert paced.monotonic is time.monotonic and paced.__name__ == "time"
    slept = []
    with mock.patch("time.sleep", slept.append):
        paced.sleep(0.25)  # no deadline: the pause asked for
        token = _call_deadline.CALL_DEADLINE.set(time.monotonic() + 0.1)
        try:
            paced.sleep(0.01)  # before it: whole
            paced.sleep(0.25)  # past it, outside a handler: up to it
            error = redis.exceptions.ClusterDownError("CLUSTERDOWN")
            try:
                raise error
            except redis.exceptions.ClusterDownError:
                with pytest.raises(redis.exceptions.ClusterDownError) as raised:
                    paced.sleep(0.25)
        finally:
            _call_deadline.CALL_DEADLINE.reset(token)
    assert raised.value is error
    assert slept[:2] == [0.25, 0.01]
    assert all(0.09 < seconds <= 0.1 for seconds in slept[2:]) and len(slept) == 4


def test_a_pause_of_redis_py_asyncio_ends_by_the_command_deadline():
    paced = _call_deadline._PacedAsyncio(asyncio)
    assert paced.Lock is asyncio.Lock

    async def main():
        token = _call_deadline.CALL_DEADLINE.set(time.monotonic() + 0.05)
        try:
            start = time.monotonic()
            assert await paced.sleep(0, "zero") == "zero"
            assert await paced.sleep(5, "cut") == "cut"  # up to the deadline
            assert 0.04 < time.monotonic() - start < 1.0
            error = redis.exceptions.ClusterDownError("CLUSTERDOWN")
            try:
                raise error
            except redis.exceptions.ClusterDownError:
                with pytest.raises(redis.exceptions.ClusterDownError) as raised:
                    await paced.sleep(5)
            assert raised.value is error and time.monotonic() - start < 1.0
        finally:
            _call_deadline.CALL_DEADLINE.reset(token)

    asyncio.run(main())


def test_a_paced_module_is_the_module_to_whoever_patches_it():
    """A test that patches redis.cluster.time.sleep (or .monotonic) while
    the bounds are installed changes the time module, as it would without
    them; the paced sleep calls whatever the module holds."""
    paced = _call_deadline._PacedTime(time)
    real = time.sleep
    with mock.patch.object(paced, "sleep") as fake:
        assert time.sleep is fake
        paced.sleep(3)
    assert time.sleep is real
    fake.assert_called_once_with(3)


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        (("GET", "k"), 0.0),
        (("BLPOP", "a", "b", 5), 5.0),
        ((b"brpop", b"a", b"2.5"), 2.5),
        (("BLPOP", "a", 0), math.inf),
        (("BLMOVE", "a", "b", "LEFT", "RIGHT", 1), 1.0),
        (("BLMPOP", 3, 1, "a", "LEFT"), 3.0),
        (("BZMPOP", 0.5, 1, "z", "MIN"), 0.5),
        (("XREAD", "COUNT", 1, "STREAMS", "s", "$"), 0.0),
        (("XREAD", "BLOCK", 1500, "STREAMS", "s", "$"), 1.5),
        (("XREADGROUP", "GROUP", "g", "c", "BLOCK", 0, "STREAMS", "s", ">"), math.inf),
        (("WAIT", 1, 200), 0.2),
        (("WAITAOF", 1, 0, 0), math.inf),
        (("BLPOP", "a", "soon"), math.inf),  # unreadable: the wait may be long
    ],
)
def test_a_blocking_command_extends_the_deadline_by_its_wait(args, seconds):
    assert _call_deadline._block_seconds(args) == seconds


def test_the_context_variable_is_refused_unless_a_context_variable():
    speedups = _impl.speedups
    if speedups is None:
        pytest.skip("the C extension is not in use")
    with pytest.raises(TypeError, match="ContextVar and a callable"):
        speedups._set_call_deadline(object(), print)
    with pytest.raises(TypeError, match="ContextVar and a callable"):
        speedups._set_call_deadline(_call_deadline.CALL_DEADLINE, None)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        speedups._set_call_deadline(None)


def test_the_deadline_is_per_call(flavor):
    retry = flavor.Retry(NoBackoff(), 100, deadline=0.05)
    with pytest.raises(CE):
        flavor.call(retry, always_failing(pause=0.03))
    time.sleep(0.06)  # past the first call's deadline
    do = failing([CE("a"), CE("b")], then="ok")
    assert flavor.call(retry, do) == "ok"
    assert do.attempts == 3


def test_without_a_deadline_the_retries_rule(flavor):
    retry = flavor.Retry(ConstantBackoff(10), 2)
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 3 and flavor.slept == [10, 10]


def test_a_deadline_set_during_a_call_applies_from_the_next(flavor):
    retry = flavor.Retry(ConstantBackoff(5), 2)

    def fail(error):
        retry.deadline = 0.001

    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do, fail)
    assert do.attempts == 3  # the call started without a deadline
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 1


def test_a_deadline_changed_between_calls_applies_to_the_next(flavor):
    # Back to back, mostly within one tick of the coarse clock: the next
    # call's deadline is the new one's (the coroutine design hands the same
    # float to calls whose deadlines are equal, never to others).
    retry = flavor.Retry(ConstantBackoff(5), 2, deadline=100)
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 3 and flavor.slept == [5, 5]
    retry.deadline = 1
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 1  # a 5 s sleep would reach the 1 s deadline
    retry.deadline = 100
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 3


def test_reset_that_remakes_the_deadline_between_calls(flavor, extras):
    # The coroutine design keeps the last deadline float in the Retry's
    # extras block: reset() frees that block (every extra unset) and makes
    # a new one with another deadline, after a call that left a float in
    # it.  The call uses the new deadline (the sanitizer stage checks the
    # freed block is not read).
    class RemakingBackoff(ConstantBackoff):
        def reset(self):
            if self.deadline is not None:
                retry.deadline = retry.stats = None
                retry.deadline = self.deadline

    backoff = RemakingBackoff(5)
    backoff.deadline = None
    retry = flavor.Retry(backoff, 2, (CE,), deadline=100, stats=extras.RetryStats())
    assert flavor.call(retry, lambda: "ok") == "ok"
    backoff.deadline = 1
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 1  # a 5 s sleep would reach the new 1 s deadline
    assert retry.stats is None and retry.deadline == 1


def test_retries_exhausted_still_raise_before_the_deadline(flavor):
    retry = flavor.Retry(NoBackoff(), 2, deadline=100)
    do = always_failing()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    assert do.attempts == 3 and raised.value is do.raised[-1]


# ---------------------------------------------------------------- the budget


def test_budget_attributes_are_read_only(extras):
    budget = extras.RetryBudget(max_tokens=10, token_ratio=0.1)
    assert budget.max_tokens == 10 and budget.token_ratio == 0.1
    assert budget.tokens == 10.0  # starts full
    for name in ("max_tokens", "token_ratio", "tokens"):
        with pytest.raises(AttributeError):
            setattr(budget, name, 1)
    assert repr(budget) == "RetryBudget(max_tokens=10, token_ratio=0.1, tokens=10.0)"


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"max_tokens": "10", "token_ratio": 0.1}, TypeError, "max_tokens"),
        ({"max_tokens": None, "token_ratio": 0.1}, TypeError, "max_tokens"),
        ({"max_tokens": 10, "token_ratio": "0.1"}, TypeError, "token_ratio"),
        ({"max_tokens": 0, "token_ratio": 0.1}, ValueError, "max_tokens"),
        ({"max_tokens": -3, "token_ratio": 0.1}, ValueError, "max_tokens"),
        ({"max_tokens": math.inf, "token_ratio": 0.1}, ValueError, "max_tokens"),
        ({"max_tokens": math.nan, "token_ratio": 0.1}, ValueError, "max_tokens"),
        ({"max_tokens": 10, "token_ratio": 0}, ValueError, "token_ratio"),
        ({"max_tokens": 10, "token_ratio": -0.1}, ValueError, "token_ratio"),
        ({"max_tokens": 10, "token_ratio": math.inf}, ValueError, "token_ratio"),
    ],
)
def test_bad_budget_parameters_are_refused_naming_them(extras, kwargs, error, name):
    with pytest.raises(error, match=f"'{name}'"):
        extras.RetryBudget(**kwargs)
    with pytest.raises(error, match=f"'{name}'"):
        extras.RetryBudget(*kwargs.values())


def test_budget_signature(extras):
    with pytest.raises(TypeError, match="missing required argument 'token_ratio'"):
        extras.RetryBudget(10)
    with pytest.raises(TypeError, match="unexpected keyword"):
        extras.RetryBudget(10, 0.1, tokens=3)
    with pytest.raises(TypeError):

        class Sub(extras.RetryBudget):  # final: a subclass could not change its rules
            pass


def test_each_failed_attempt_takes_a_token_and_a_success_gives_the_ratio(flavor, extras):
    budget = extras.RetryBudget(10, 0.25)
    retry = flavor.Retry(NoBackoff(), 10, budget=budget)
    assert flavor.call(retry, failing([CE("a"), CE("b")], then="ok")) == "ok"
    assert budget.tokens == 10 - 2 + 0.25
    assert flavor.call(retry, failing([], then="ok")) == "ok"
    assert budget.tokens == 10 - 2 + 0.5
    for _ in range(20):  # never above max_tokens
        flavor.call(retry, failing([], then="ok"))
    assert budget.tokens == 10.0


def test_a_retry_needs_more_than_half_the_tokens(flavor, extras):
    budget = extras.RetryBudget(10, 0.1)
    retry = flavor.Retry(NoBackoff(), 100, budget=budget)
    do = always_failing()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    # tokens 10 -> 9 .. 5 after five failures; at 5 (not above 5) no retry
    assert do.attempts == 5
    assert budget.tokens == 5.0
    assert raised.value is do.raised[-1]


def test_the_first_attempt_is_never_refused_and_tokens_stay_at_or_above_zero(flavor, extras):
    budget = extras.RetryBudget(4, 0.1)
    retry = flavor.Retry(NoBackoff(), 100, budget=budget)
    for _ in range(10):
        do = always_failing()
        with pytest.raises(CE):
            flavor.call(retry, do)
        assert do.attempts >= 1
    assert budget.tokens == 0.0
    do = failing([], then="up")
    assert flavor.call(retry, do) == "up" and do.attempts == 1
    assert budget.tokens == pytest.approx(0.1)
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 1 and budget.tokens == 0.0


def test_errors_passed_through_take_no_token(flavor, extras):
    budget = extras.RetryBudget(10, 0.1)
    retry = flavor.Retry(NoBackoff(), 3, (CE,), budget=budget)
    with pytest.raises(KeyError):
        flavor.call(retry, failing([KeyError("k")]))
    assert budget.tokens == 10.0


def test_a_supported_error_refused_by_is_retryable_takes_its_token(flavor, extras):
    budget = extras.RetryBudget(10, 0.1)
    retry = flavor.Retry(NoBackoff(), 3, budget=budget)
    with pytest.raises(CE):
        flavor.call(retry, failing([CE("x")]), is_retryable=lambda error: False)
    assert budget.tokens == 9.0


def test_one_budget_is_shared_by_retries_of_both_kinds(flavor, extras):
    budget = extras.RetryBudget(6, 1)
    sync_retry = extras.Retry(NoBackoff(), 100, budget=budget)
    retry = flavor.Retry(NoBackoff(), 100, budget=budget)
    with pytest.raises(CE):
        sync_retry.call_with_retry(always_failing(), lambda error: None)
    assert budget.tokens == 3.0
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 1  # already at half: no retry for this Retry either


def test_budget_pickles_by_value(extras):
    budget = extras.RetryBudget(10, 0.1)
    retry = extras.Retry(NoBackoff(), 100, budget=budget)
    retry.call_with_retry(failing([CE("a"), CE("b"), CE("c")], then=1), lambda error: None)
    assert budget.tokens == pytest.approx(7.1)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        twin = pickle.loads(pickle.dumps(budget, protocol))
        assert twin is not budget and repr(twin) == repr(budget)
    with pytest.raises(ValueError, match="state"):
        budget.__setstate__(11.0)
    with pytest.raises(TypeError):
        budget.__setstate__("3")


def test_asyncio_tasks_share_one_budget(extras):
    budget, stats = extras.RetryBudget(10, 0.1), extras.RetryStats()
    retry = extras.AsyncRetry(NoBackoff(), 100, budget=budget, stats=stats)

    async def do():
        await asyncio.sleep(0)
        raise CE("down")

    async def fail(error):
        await asyncio.sleep(0)

    async def one():
        try:
            await retry.call_with_retry(do, fail)
        except CE:
            return "gave up"

    async def main():
        return await asyncio.gather(*(one() for _ in range(50)))

    assert asyncio.run(main()) == ["gave up"] * 50
    assert budget.tokens == 0.0
    # every call made its first attempt; only a few retries got through
    assert stats.calls == 50 and stats.attempts < 50 + 10
    assert stats.give_ups_budget == 50


# ---------------------------------------------------------------- threads


def test_threads_hammering_one_budget_keep_it_in_range(extras):
    max_tokens = 5
    budget = extras.RetryBudget(max_tokens, 0.7)
    stats = extras.RetryStats()
    retry = extras.Retry(NoBackoff(), 3, budget=budget, stats=stats)
    stop = threading.Event()
    seen = []
    errors = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def watch():
        while not stop.is_set():
            seen.append(budget.tokens)

    def hammer(index):
        try:
            for i in range(3000):
                if (i + index) % 3:
                    try:
                        retry.call_with_retry(always_failing(), lambda error: None)
                    except CE:
                        pass
                else:
                    retry.call_with_retry(lambda: i, lambda error: None)
                seen.append(budget.tokens)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    watcher = threading.Thread(target=watch)
    try:
        watcher.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        watcher.join()
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert len(seen) > 24000
    assert all(0.0 <= tokens <= max_tokens for tokens in seen)
    assert min(seen) == 0.0 and max(seen) > max_tokens / 2  # both bounds were reached
    snapshot = stats.snapshot()
    assert snapshot["calls"] == 8 * 3000
    assert snapshot["successes"] == 8000
    assert snapshot["attempts"] == snapshot["successes"] + snapshot["failed_attempts"]
    assert snapshot["attempts"] == snapshot["calls"] + snapshot["retries"]
    gave_up = snapshot["give_ups_exhausted"] + snapshot["give_ups_budget"]
    assert gave_up == 16000


# ---------------------------------------------------------------- stats


def test_stats_start_at_zero_and_snapshot_is_a_dict(extras):
    stats = extras.RetryStats()
    snapshot = stats.snapshot()
    assert list(snapshot) == STAT_KEYS
    assert snapshot == dict.fromkeys(STAT_KEYS, 0)
    assert isinstance(snapshot["slept_seconds"], float)
    assert all(getattr(stats, key) == 0 for key in STAT_KEYS)
    with pytest.raises(TypeError):
        extras.RetryStats(1)
    with pytest.raises(AttributeError):
        stats.calls = 3
    assert repr(stats).startswith("RetryStats(calls=0, attempts=0, ")


def test_stats_count_every_outcome(flavor, extras):
    stats = extras.RetryStats()
    retry = flavor.Retry(ConstantBackoff(0.5), 2, (CE,), stats=stats)
    assert flavor.call(retry, failing([], then=1)) == 1  # success at once
    assert flavor.call(retry, failing([CE("a")], then=2)) == 2  # one retry
    with pytest.raises(CE):  # exhausted
        flavor.call(retry, always_failing())
    with pytest.raises(CE):  # not retryable
        flavor.call(retry, always_failing(), is_retryable=lambda error: False)
    with pytest.raises(KeyError):  # passed through
        flavor.call(retry, failing([KeyError("k")]))
    retry.deadline = 0.1
    with pytest.raises(CE):  # the deadline: the 0.5 s sleep would reach it
        flavor.call(retry, always_failing())
    retry.deadline = None
    retry.budget = extras.RetryBudget(2, 0.1)
    with pytest.raises(CE):  # the budget: 2 -> 1, not above 1
        flavor.call(retry, always_failing())
    snapshot, slept = counters(stats)
    assert snapshot == {
        "calls": 7,
        "attempts": 1 + 2 + 3 + 1 + 1 + 1 + 1,
        "successes": 2,
        "failed_attempts": 1 + 3 + 1 + 1 + 1,
        "retries": 1 + 2,
        "give_ups_exhausted": 1,
        "give_ups_not_retryable": 1,
        "give_ups_deadline": 1,
        "give_ups_budget": 1,
        "give_ups_may_have_run": 0,
        "unhandled_errors": 1,
        "aborted": 0,
    }
    assert_outcomes_add_up(stats.snapshot())
    assert flavor.slept == [0.5] * 3
    assert slept < 0.25  # the three sleeps returned at once
    stats.reset()
    assert stats.snapshot() == dict.fromkeys(STAT_KEYS, 0)


def test_extras_set_by_reset_apply_to_that_call(flavor, extras):
    # The extras are read once reset() has returned, on the sync loop and
    # on both asyncio designs (the coroutine design read them before).
    stats = extras.RetryStats()

    class SettingBackoff(ConstantBackoff):
        def reset(self):
            retry.stats = stats

    retry = flavor.Retry(SettingBackoff(0), 2, (CE,))
    assert flavor.call(retry, failing([CE("a")], then=1)) == 1
    snapshot = stats.snapshot()
    assert (snapshot["calls"], snapshot["attempts"], snapshot["successes"]) == (1, 2, 1)
    assert snapshot["retries"] == 1


def test_stats_count_a_rejection_by_the_retrys_checker(flavor, extras):
    """The Retry's own checker (redis-py 8.2's is_retryable) said no: a
    give-up counted as not retryable once fail() has returned, as the
    exhausted ones are; a fail() that raises ends the call without one."""
    stats, budget = extras.RetryStats(), extras.RetryBudget(10, 0.1)
    failed = []
    retry = flavor.Retry(ConstantBackoff(0.5), 3, is_retryable=never, stats=stats, budget=budget)
    with pytest.raises(CE):
        flavor.call(retry, always_failing(), failed.append)
    assert len(failed) == 1 and flavor.slept == []

    def raising_fail(error):
        raise KeyError("fail")

    with pytest.raises(KeyError):
        flavor.call(retry, always_failing(), raising_fail)
    checked = []
    retry.is_retryable = lambda error: checked.append(error) or len(checked) < 2
    with pytest.raises(CE):
        flavor.call(retry, always_failing(), is_retryable=lambda error: True)
    snapshot, slept = counters(stats)
    assert snapshot == {
        **dict.fromkeys(STAT_KEYS[:-1], 0),
        "calls": 3,
        "attempts": 1 + 1 + 2,
        "failed_attempts": 1 + 1 + 2,
        "retries": 1,
        "give_ups_not_retryable": 1 + 1,
        "aborted": 1,  # the fail() that raised
    }
    assert_outcomes_add_up(stats.snapshot())
    assert budget.tokens == 10 - 4  # each failed attempt took its token


def test_a_checker_with_a_deadline(flavor):
    """The checker's no raises at once, well before the deadline; a yes
    leaves the deadline to decide."""
    retry = flavor.Retry(ConstantBackoff(0.5), 100, deadline=0.1, is_retryable=never)
    do = always_failing()
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 1 and flavor.slept == []
    retry.is_retryable = lambda error: True
    with pytest.raises(CE):
        flavor.call(retry, do)
    assert do.attempts == 2 and flavor.slept == []  # the 0.5 s sleep would reach it


def test_the_checker_with_the_extras_in_eq_repr_copies(flavor, extras):
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, (CE,), never, deadline=0.5, stats=stats)
    assert retry == flavor.Retry(NoBackoff(), 3, (CE,), never, deadline=0.5, stats=stats)
    assert retry != flavor.Retry(NoBackoff(), 3, (CE,), deadline=0.5, stats=stats)
    assert repr(retry).endswith(f", is_retryable={never!r}, deadline=0.5, stats={stats!r})")
    for twin in (copy.copy(retry), copy.deepcopy(retry)):
        assert twin == retry and twin.is_retryable is never and twin.stats is stats
    twin = pickle.loads(pickle.dumps(retry))
    assert twin.is_retryable is never and twin.deadline == 0.5


def test_stats_count_a_deadline_reached_after_the_sleep(flavor, extras):
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 100, deadline=0.05, stats=stats)
    with pytest.raises(CE):
        flavor.call(retry, always_failing(pause=0.03))
    snapshot = stats.snapshot()
    assert snapshot["give_ups_deadline"] == 1
    assert snapshot["attempts"] == snapshot["retries"] + 1 == snapshot["failed_attempts"]


def test_stats_pickle_by_value(extras):
    stats = extras.RetryStats()
    retry = extras.Retry(NoBackoff(), 1, stats=stats)
    retry.call_with_retry(lambda: 1, lambda error: None)
    twin = pickle.loads(pickle.dumps(stats))
    assert twin is not stats and twin.snapshot() == stats.snapshot()
    with pytest.raises(TypeError):
        twin.__setstate__({"calls": "many"})


def test_threads_counting_into_one_stats(extras):
    stats = extras.RetryStats()
    retry = extras.Retry(NoBackoff(), 1, stats=stats)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def work():
        for _ in range(5000):
            retry.call_with_retry(lambda: 1, lambda error: None)
            try:
                retry.call_with_retry(always_failing(), lambda error: None)
            except CE:
                pass

    threads = [threading.Thread(target=work) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    n = 6 * 5000
    assert stats.snapshot() == {
        **dict.fromkeys(STAT_KEYS, 0),
        "calls": 2 * n,
        "attempts": 3 * n,
        "successes": n,
        "failed_attempts": 2 * n,
        "retries": n,
        "give_ups_exhausted": n,
        "slept_seconds": 0.0,
    }


# ---------------------------------------------------------------- GC, leaks


def test_a_retry_with_extras_in_a_cycle_is_collected(flavor, extras):
    class Sub(flavor.Retry):
        pass

    budget, stats = extras.RetryBudget(10, 0.1), extras.RetryStats()
    # Compared with the counts before the Retry held them, not with 2:
    # CPython 3.14 passes a local to getrefcount without a reference of its
    # own (LOAD_FAST_BORROW), so the same state reads 1 there.
    before = sys.getrefcount(budget), sys.getrefcount(stats)
    retry = Sub(NoBackoff(), 1, deadline=1.0, budget=budget, stats=stats)
    retry.me = retry
    ref = weakref.ref(retry)
    del retry
    gc.collect()
    assert ref() is None
    assert (sys.getrefcount(budget), sys.getrefcount(stats)) == before


def test_no_leak_on_the_paths_with_extras(extras):
    budget, stats = extras.RetryBudget(10, 0.1), extras.RetryStats()
    retry = extras.Retry(NoBackoff(), 2, deadline=10.0, budget=budget, stats=stats)

    def run():
        retry.call_with_retry(lambda: 1, lambda error: None)
        try:
            retry.call_with_retry(always_failing(), lambda error: None)
        except CE:
            pass
        copy.deepcopy(retry)
        budget.tokens  # noqa: B018 - the getter
        stats.snapshot()
        repr(retry)

    assert_no_leak(run, watched=[retry, budget, stats])


def test_top_level_exports():
    """The package gives the C types, or the twin without the extension."""
    side = EXTRAS["c"] if redis_backoff_c.IMPLEMENTATION == "c" else EXTRAS["py"]
    assert redis_backoff_c.RetryBudget is side.RetryBudget
    assert redis_backoff_c.RetryStats is side.RetryStats
    assert retry_module.Retry is side.Retry
    assert async_retry_module.Retry is side.AsyncRetry
    assert "RetryBudget" in redis_backoff_c.__all__ and "RetryStats" in redis_backoff_c.__all__


# ---------------------------------------------------------------- reentrancy


def test_fail_callback_changing_the_extras_mid_call(flavor, extras):
    first, second = extras.RetryStats(), extras.RetryStats()
    budget = extras.RetryBudget(10, 0.1)
    retry = flavor.Retry(NoBackoff(), 3, budget=budget, stats=first)
    calls = []

    def fail(error):
        calls.append(error)
        if len(calls) == 1:
            retry.stats = second
            retry.budget = None
        elif len(calls) == 2:
            retry.stats = None  # the Retry is plain again
            retry.deadline = 5.0

    do = failing([CE("a"), CE("b"), CE("c")], then="done")
    assert flavor.call(retry, do, fail) == "done"
    assert first.snapshot()["failed_attempts"] == 1 and first.calls == 1
    assert second.snapshot()["failed_attempts"] == 1 and second.retries == 1
    assert budget.tokens == 9.0  # only the first failure was under the budget


@pytest.mark.parametrize("failures", [0, 1, 4], ids=["ok", "retried", "exhausted"])
def test_a_call_that_starts_plain_stays_plain(flavor, extras, failures):
    """Extras set on a Retry during a call that started without any apply
    from the next call: that one is counted in full or not at all, on every
    asyncio design as on the sync loop (the second probe: stats set in the
    first do() counted its attempt on one design and not on the other)."""
    retry = flavor.Retry(NoBackoff(), 2, (CE,))
    stats, budget = extras.RetryStats(), extras.RetryBudget(10, 0.5)
    # Errors made here: one raised again in another run would grow its
    # traceback (scripts/refleak.py).
    do = failing([CE(str(n)) for n in range(failures)], then="done")

    def set_extras_then_do():
        retry.stats, retry.budget, retry.deadline = stats, budget, 0.000001
        return do()

    if failures > 2:
        with pytest.raises(CE):
            flavor.call(retry, set_extras_then_do)
    else:
        assert flavor.call(retry, set_extras_then_do) == "done"
    assert do.attempts == min(failures, 2) + 1  # the deadline set did not apply
    assert counters(stats) == (dict.fromkeys(STAT_KEYS[:-1], 0), 0.0)
    assert budget.tokens == 10
    # The next call starts with them.
    retry.deadline = None
    assert flavor.call(retry, failing([CE("x")], then=2)) == 2
    snapshot, _ = counters(stats)
    assert (snapshot["calls"], snapshot["attempts"], snapshot["successes"]) == (1, 2, 1)
    assert budget.tokens == 9.5


class Delay:
    """A delay whose __float__ takes the Retry's extras away."""

    def __init__(self, retry, seconds):
        self.retry, self.seconds = retry, seconds

    def __float__(self):
        self.retry.stats = None
        self.retry.deadline = None
        return self.seconds

    def __gt__(self, other):
        return self.seconds > other


class DelayBackoff:
    def __init__(self):
        self.retry = None

    def reset(self):
        pass

    def compute(self, failures):
        return Delay(self.retry, 0.01)


def test_a_delay_whose_float_changes_the_extras(flavor, extras):
    backoff = DelayBackoff()
    retry = flavor.Retry(backoff, 2, deadline=10.0, stats=extras.RetryStats())
    backoff.retry = retry
    do = failing([CE("a"), CE("b")], then="ok")
    assert flavor.call(retry, do) == "ok"
    assert retry.stats is None and do.attempts == 3


@pytest.mark.parametrize("raises", [False, True], ids=["returns", "raises"])
def test_a_sleep_that_takes_the_extras_away(flavor, extras, raises, monkeypatch):
    """The backoff sleep unsets every extra (freeing the C block) and
    allocates over it: slept_seconds and the outcome are read from the
    Retry as it is after the sleep, not from what it held before."""
    stats = extras.RetryStats()
    retry = flavor.Retry(
        ConstantBackoff(0.01), 2, deadline=10.0, budget=extras.RetryBudget(10, 0.1), stats=stats
    )
    junk = []

    def take_away():
        retry.deadline = retry.budget = retry.stats = None
        junk.extend(flavor.Retry(NoBackoff(), 1, deadline=5.0) for _ in range(32))
        if raises:
            raise KeyError("sleep")

    if flavor.name == "sync":
        monkeypatch.setattr(retry_module, "sleep", lambda delay: take_away())
    else:

        async def asleep(delay):
            take_away()

        monkeypatch.setattr(async_retry_module, "sleep", asleep)
    do = failing([CE("a")], then="ok")
    if raises:
        with pytest.raises(KeyError):
            flavor.call(retry, do)
    else:
        assert flavor.call(retry, do) == "ok"
    snapshot, slept = counters(stats)
    # Counted while the stats were set: the call and its failed attempt.
    assert (snapshot["calls"], snapshot["failed_attempts"], snapshot["retries"]) == (1, 1, 0)
    assert slept == 0.0 and retry.stats is None


# ---------------------------------------------------------------- outcomes add up


class Raising(ConstantBackoff):
    """compute() raises: the call is aborted."""

    def compute(self, failures):
        raise KeyError("compute")


@pytest.mark.parametrize("where", ["fail", "own checker", "call checker", "compute", "sleep"])
def test_a_callback_that_raises_aborts_the_call_once(flavor, extras, where, monkeypatch):
    stats = extras.RetryStats()
    backoff = Raising(0.01) if where == "compute" else ConstantBackoff(0.01)
    retry = flavor.Retry(backoff, 3, (CE,), stats=stats)
    fail = None
    kwargs = {}
    if where == "fail":

        def fail(error):
            raise KeyError("fail")

    elif where == "own checker":
        retry.is_retryable = lambda error: 1 / 0
    elif where == "call checker":
        kwargs["is_retryable"] = lambda error: 1 / 0
    elif where == "sleep":
        if flavor.name == "sync":
            monkeypatch.setattr(retry_module, "sleep", lambda delay: {}["sleep"])
        else:

            async def asleep(delay):
                raise KeyError("sleep")

            monkeypatch.setattr(async_retry_module, "sleep", asleep)
    with pytest.raises((KeyError, ZeroDivisionError)):
        flavor.call(retry, always_failing(), fail, **kwargs)
    snapshot, _ = counters(stats)
    assert snapshot["calls"] == 1 and snapshot["aborted"] == 1
    assert_outcomes_add_up(stats.snapshot())


def test_slept_seconds_is_the_time_actually_slept(flavor, extras):
    stats = extras.RetryStats()
    retry = flavor.Retry(ConstantBackoff(0.05), 2, (CE,), stats=stats)
    flavor.real_sleep = True
    assert flavor.call(retry, failing([CE("a"), CE("b")], then=1)) == 1
    _, slept = counters(stats)
    assert flavor.slept == [0.05, 0.05]
    assert 0.09 <= slept < 0.5


@pytest.mark.parametrize("where", ["fail", "sleep"])
def test_a_cancelled_call_is_aborted_and_counts_the_sleep_it_had(extras, where):
    """A 10 s sleep (or a fail()) cancelled after about 50 ms: the call
    lands in `aborted`, and slept_seconds counts about 0.05 s, not 10."""
    import redis_backoff_c.asyncio.retry as async_module

    stats = extras.RetryStats()
    retry = extras.AsyncRetry(ConstantBackoff(10), 3, (CE,), stats=stats)

    async def do():
        raise CE("down")

    async def fail(error):
        if where == "fail":
            await asyncio.sleep(10)

    async def main():
        task = asyncio.ensure_future(retry.call_with_retry(do, fail))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    assert async_module.sleep is asyncio.sleep
    asyncio.run(main())
    snapshot, slept = counters(stats)
    assert snapshot["calls"] == 1 and snapshot["aborted"] == 1
    assert_outcomes_add_up(stats.snapshot())
    if where == "sleep":
        assert 0.03 <= slept < 1.0
    else:
        assert slept == 0.0


def test_outcomes_add_up_under_threads(extras):
    stats = extras.RetryStats()
    retry = extras.Retry(NoBackoff(), 1, (CE,), stats=stats)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def raising_fail(error):
        raise KeyError("fail")

    def work(seed):
        for i in range(2000):
            kind = (i + seed) % 4
            try:
                if kind == 0:
                    retry.call_with_retry(lambda: 1, lambda error: None)
                elif kind == 1:
                    retry.call_with_retry(always_failing(), lambda error: None)
                elif kind == 2:
                    retry.call_with_retry(always_failing(), raising_fail)
                else:
                    retry.call_with_retry(failing([KeyError("k")]), lambda error: None)
            except (CE, KeyError):
                pass

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    snapshot, _ = counters(stats)
    n = 6 * 2000 // 4
    assert snapshot["calls"] == 4 * n
    assert (snapshot["successes"], snapshot["give_ups_exhausted"]) == (n, n)
    assert (snapshot["aborted"], snapshot["unhandled_errors"]) == (n, n)
    assert_outcomes_add_up(stats.snapshot())


# ------------------------------------------------- writes="at-most-once"
# The policy itself (what it retries, how it marks and counts) over the C
# types and the twin; what it reads from redis-py's frames is proven against
# a real redis-server in tests/integration/test_at_most_once.py.


def test_writes_is_at_least_once_unless_set(flavor, extras):
    retry = flavor.Retry(NoBackoff(), 3)
    assert retry.writes == "at-least-once"
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once")
    assert retry.writes == "at-most-once"
    retry.writes = "at-least-once"
    assert retry.writes == "at-least-once"
    assert retry == flavor.Retry(NoBackoff(), 3)  # nothing left set
    retry.writes = "at-most-once"
    retry.writes = None
    assert retry.writes == "at-least-once"
    assert flavor.Retry(NoBackoff(), 3, writes=None).writes == "at-least-once"
    with pytest.raises(AttributeError, match="cannot delete attribute 'writes'"):
        del retry.writes


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (1, TypeError, "Retry() argument 'writes' must be a str or None, not int"),
        (b"at-most-once", TypeError, "argument 'writes' must be a str or None, not bytes"),
        (
            "at_most_once",
            ValueError,
            "must be 'at-least-once' or 'at-most-once', not 'at_most_once'",
        ),
        ("AT-MOST-ONCE", ValueError, "must be 'at-least-once' or 'at-most-once'"),
    ],
)
def test_writes_refuses_other_values(flavor, extras, value, error, message):
    with pytest.raises(error) as raised:
        flavor.Retry(NoBackoff(), 3, writes=value)
    assert message in str(raised.value)
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once")
    with pytest.raises(error, match="Retry.writes"):
        retry.writes = value
    assert retry.writes == "at-most-once"  # unchanged


def test_writes_in_eq_repr_copies_and_pickle(flavor, extras):
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once")
    assert retry != flavor.Retry(NoBackoff(), 3)
    assert retry == flavor.Retry(NoBackoff(), 3, writes="at-most-once")
    assert hash(retry) == hash(flavor.Retry(NoBackoff(), 3))  # redis-py's formula
    assert repr(retry).endswith(", writes='at-most-once')")
    assert "writes" not in repr(flavor.Retry(NoBackoff(), 3))
    for twin in (copy.copy(retry), copy.deepcopy(retry), pickle.loads(pickle.dumps(retry))):
        assert twin.writes == "at-most-once"
        assert twin == retry


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_of_every_field_and_every_extra(flavor, extras, protocol):
    # The largest state a Retry has: its four fields, the errors not the
    # default, and the four extras.
    retry = flavor.Retry(
        NoBackoff(),
        1,
        supported_errors=(ValueError,),
        is_retryable=never,
        deadline=1.0,
        budget=extras.RetryBudget(10, 0.1),
        stats=extras.RetryStats(),
        writes="at-most-once",
    )
    twin = pickle.loads(pickle.dumps(retry, protocol))
    assert twin.writes == "at-most-once" and twin.deadline == 1.0
    assert twin.budget.max_tokens == 10 and twin.stats.calls == 0
    assert twin._supported_errors == (ValueError,) and twin.is_retryable is never


def test_at_most_once_raises_what_may_have_run(flavor, extras):
    # A do() that is not redis-py's says nothing of where it failed: under
    # at-most-once its failure may have run, so it is raised at once, after
    # fail(), marked and counted.
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once", stats=stats)
    do = always_failing()
    failed = []
    with pytest.raises(CE) as raised:
        flavor.call(retry, do, lambda error, count: failed.append(count), with_failure_count=True)
    assert do.attempts == 1
    assert failed == [1]
    assert raised.value is do.raised[0]
    assert redis_backoff_c.may_have_run(raised.value)
    if sys.version_info >= (3, 11):
        assert any("may have run" in note for note in raised.value.__notes__)
    snapshot = stats.snapshot()
    assert snapshot["give_ups_may_have_run"] == 1
    assert snapshot["failed_attempts"] == 1 and snapshot["retries"] == 0
    assert_outcomes_add_up(snapshot)
    # redis-py's policy retries the same failures, and marks nothing.
    retry.writes = "at-least-once"
    do = always_failing()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    assert do.attempts == 4
    assert not redis_backoff_c.may_have_run(raised.value)
    assert stats.give_ups_exhausted == 1
    assert_outcomes_add_up(stats.snapshot())


def test_at_most_once_retries_what_the_server_refused(flavor, extras):
    # -LOADING: the server refused the command, which did not run.
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once", stats=stats)
    do = failing([redis.exceptions.BusyLoadingError("LOADING"), CE("gone")], then=7)
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    assert do.attempts == 2  # the refusal retried, the connection error not
    assert redis_backoff_c.may_have_run(raised.value)
    assert not redis_backoff_c.may_have_run(do.raised[0])
    assert stats.retries == 1 and stats.give_ups_may_have_run == 1
    assert_outcomes_add_up(stats.snapshot())


def test_at_most_once_retries_a_refused_connection(flavor, extras):
    # redis-py's own connection to a port where nothing listens: the
    # command was never sent, so it is retried until retries run out.
    import redis.asyncio.connection
    import redis.connection
    from redis_server import free_port

    port = free_port()
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 2, writes="at-most-once", stats=stats)
    attempts = []
    with pytest.raises(CE) as raised:
        if flavor.name == "sync":
            connection = redis.connection.Connection(port=port, retry=None)

            def do():
                attempts.append(1)
                return connection.send_command("INCR", "n")

            retry.call_with_retry(do, lambda error: None)
        else:
            connection = redis.asyncio.connection.Connection(port=port, retry=None)

            async def fail(error):
                pass

            def do_async():
                attempts.append(1)
                return connection.send_command("INCR", "n")

            asyncio.run(retry.call_with_retry(do_async, fail))
    assert len(attempts) == 3
    assert not redis_backoff_c.may_have_run(raised.value)
    assert stats.give_ups_exhausted == 1 and stats.give_ups_may_have_run == 0
    assert_outcomes_add_up(stats.snapshot())


def test_a_call_that_starts_at_least_once_stays_so(flavor, extras):
    # As every extra: set during a call that started without extras, the
    # policy waits for the next call.
    retry = flavor.Retry(NoBackoff(), 2)

    def fail(error):
        retry.writes = "at-most-once"

    do = always_failing()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do, fail)
    assert do.attempts == 3
    assert not redis_backoff_c.may_have_run(raised.value)


@pytest.fixture
def judge(extras, monkeypatch):
    """Replace the judge of `extras`' side: judge(function)."""
    from redis_backoff_c import _extras_py, writes

    def replace(function):
        if extras.name == "c":
            redis_backoff_c._impl.speedups._set_writes_judge(function)
        else:
            monkeypatch.setattr(_extras_py, "_writes_judge", function)

    yield replace
    if extras.name == "c":
        redis_backoff_c._impl.speedups._set_writes_judge(writes._judge)


def test_a_judge_that_raises_aborts_the_call(flavor, extras, judge):
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once", stats=stats)

    def raising(error):
        raise KeyError("judge")

    judge(raising)
    with pytest.raises(KeyError, match="judge") as raised:
        flavor.call(retry, always_failing())
    assert isinstance(raised.value.__context__, CE)
    assert stats.aborted == 1
    assert_outcomes_add_up(stats.snapshot())


def test_a_judge_that_changes_the_retry(flavor, extras, judge):
    # The judge runs Python code: the extras are read again after it.
    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, writes="at-most-once", stats=stats, deadline=30.0)

    def changing(error):
        retry.stats = None
        retry.deadline = None
        retry.writes = None
        gc.collect()
        return True

    judge(changing)
    with pytest.raises(CE):
        flavor.call(retry, always_failing())
    assert retry.stats is None and retry.writes == "at-least-once"
    assert stats.give_ups_may_have_run == 0  # the stats were gone when it counted
    assert stats.calls == 1 and stats.failed_attempts == 1


# ---------------------------------------------------------- the command table


@pytest.mark.parametrize(
    ("args", "safe"),
    [
        (("GET", "k"), True),
        ((b"get", b"k"), True),
        (("HGETALL", "h"), True),
        (("OBJECT ENCODING", "k"), True),
        (("OBJECT", "ENCODING", "k"), True),
        (("CONFIG SET", "maxmemory", "1"), False),
        (("CONFIG GET", "maxmemory"), True),  # no readonly flag: on the safe list
        (("INFO", "server"), True),
        (("INCR", "n"), False),
        (("LPUSH", "l", "x"), False),
        (("BLPOP", "l", 0), False),
        (("EVAL", "return 1", 0), False),
        (("PUBLISH", "c", "m"), False),
        # last writer wins: not by default (add_last_writer_wins())
        (("SET", "k", "v"), False),
        (("MSET", "k", "v"), False),
        (("SETEX", "k", 10, "v"), False),
        (("PSETEX", "k", 10, "v"), False),
        # conditional: the repeat replies 0 where the first run set it
        (("EXPIREAT", "k", 1, "NX"), False),
        (("EXPIREAT", "k", 1), False),
        (("PEXPIREAT", "k", 1), False),
        # reads the server leaves without the readonly flag
        (("ROLE",), True),
        (("LASTSAVE",), True),
        (("SCRIPT", "EXISTS", "abc"), True),
        (("SCRIPT", "FLUSH"), False),
        (("PUBSUB NUMSUB", "c"), True),
        (("SLOWLOG", "GET", 10), True),
        (("SLOWLOG", "RESET"), False),
        (("LATENCY", "HISTORY", "command"), True),
        (("LATENCY", "RESET"), False),
        (("MEMORY", "STATS"), True),
        (("MEMORY", "PURGE"), False),
        (("ACL", "WHOAMI"), True),
        (("ACL", "SETUSER", "u"), False),
        (("CLUSTER", "NODES"), True),
        (("cluster slots",), True),
        (("CLUSTER", "RESET"), False),
        (("CLIENT", "TRACKINGINFO"), True),
        (("COMMAND", "GETKEYS", "SET", "k", "v"), True),
        (("FUNCTION", "DUMP"), True),
        (("FUNCTION", "FLUSH"), False),
        # they answer for the lost connection's writes: a new one has none
        (("WAIT", 1, 0), False),
        (("WAITAOF", 1, 0, 0), False),
        # reads unless they store
        (("SORT", "l"), True),
        (("SORT", "l", "BY", "w_*", "GET", "#", "DESC"), True),
        (("SORT", "l", "STORE", "dst"), False),
        ((b"sort", b"l", b"store", b"dst"), False),
        (("SORT l STORE dst",), False),  # redis-py splits a name of several words
        (("SORT", "store"), True),  # a key named "store"
        (("GEORADIUS", "g", 0, 0, 1, "km"), True),
        (("GEORADIUS", "g", 0, 0, 1, "km", "STOREDIST", "d"), False),
        (("GEORADIUSBYMEMBER", "g", "m", 1, "km", "STORE", "d"), False),
        (("GEORADIUSBYMEMBER", "g", "m", 1, "km", "WITHDIST"), True),
        (("PING",), True),
        (("SUBSCRIBE", "c"), True),
        (("NO-SUCH-COMMAND",), False),
        ((), False),
        ((3, "k"), False),
    ],
)
def test_which_commands_are_safe_to_repeat(args, safe):
    from redis_backoff_c import writes

    assert writes.is_safe_to_repeat(args) is safe


def test_the_table_can_be_extended(writes_table):
    writes = writes_table
    assert not writes.is_safe_to_repeat(("JSON.GET", "k"))
    writes.add_read_only("json.get", b"FT.SEARCH")
    assert writes.is_safe_to_repeat(("JSON.GET", "k")) and "FT.SEARCH" in writes.READ_ONLY
    writes.add_safe_to_repeat("HSET", "the same fields again", lambda args: len(args) == 4)
    assert writes.is_safe_to_repeat(("HSET", "h", "f", "v"))
    assert not writes.is_safe_to_repeat(("HSET", "h", "f", "v", "g", "w"))
    assert writes.is_safe_to_repeat(("HSET h", "f", "v"))  # the condition gets the words
    assert writes.SAFE_TO_REPEAT["HSET"] == "the same fields again"
    with pytest.raises(ValueError, match="'reason' must be a non-empty str"):
        writes.add_safe_to_repeat("X", "")
    with pytest.raises(TypeError, match="'when' must be callable"):
        writes.add_safe_to_repeat("X", "why", when=1)
    with pytest.raises(TypeError, match="a command name must be a str"):
        writes.add_read_only(3)
    for name, reason in writes.SAFE_TO_REPEAT.items():
        assert name not in writes.READ_ONLY and reason, name


def test_a_subcommand_of_a_module_can_be_added(writes_table):
    # A module's container (FT.CONFIG) is none of the server's: its
    # subcommand, added as "NAME SUB", matches the command however redis-py
    # is given it.
    writes = writes_table
    forms = [("FT.CONFIG", "GET", "TIMEOUT"), (b"ft.config", b"get", b"*"), ("ft.config get", "*")]
    assert not any(writes.is_safe_to_repeat(args) for args in forms)
    writes.add_read_only("FT.CONFIG GET")
    assert all(writes.is_safe_to_repeat(args) for args in forms)
    assert "FT.CONFIG|GET" in writes.READ_ONLY
    assert not writes.is_safe_to_repeat(("FT.CONFIG", "SET", "TIMEOUT", "1"))
    assert not writes.is_safe_to_repeat(("FT.CONFIG",))
    writes.add_safe_to_repeat("X.STATE SHOW", "reads the module's state")
    assert writes.is_safe_to_repeat(("X.STATE", "show")) and "X.STATE|SHOW" in writes.SAFE_TO_REPEAT
    assert not writes.is_safe_to_repeat(("X.STATE", "RESET"))
    # A container added whole as well: its other subcommands are it.
    writes.add_read_only("FT.INFO", "FT.INFO EXTRA")
    assert writes.is_safe_to_repeat(("FT.INFO", "idx"))
    assert writes.is_safe_to_repeat(("FT.INFO", "extra"))


def test_last_writer_wins_is_an_opt_in(writes_table):
    writes = writes_table
    plain = [
        ("SET", "k", "v"),
        ("SET", "k", "v", "EX", 10),
        ("MSET", "a", "1", "b", "2"),
        ("SETEX", "k", 10, "v"),
        ("PSETEX", "k", 10, "v"),
        ("SET k v",),
    ]
    conditional = [
        ("SET", "k", "v", "NX"),
        ("SET", "k", "v", b"get"),
        ("SET", "k", "v", "IFEQ", "w"),
        ("SET k v XX",),
        ("MSETNX", "a", "1"),
        ("EXPIREAT", "k", 1),
    ]
    assert not any(writes.is_safe_to_repeat(args) for args in plain + conditional)
    assert "add_last_writer_wins" in writes.__all__
    writes.add_last_writer_wins()
    assert all(writes.is_safe_to_repeat(args) for args in plain)
    assert not any(writes.is_safe_to_repeat(args) for args in conditional)
    for name in ("SET", "MSET", "SETEX", "PSETEX"):
        assert writes.SAFE_TO_REPEAT[name].startswith(
            "last writer wins: a repeat can overwrite another client's write made in between"
        ), name


# ------------------------------------------------- on_retry and on_give_up


def recording_hooks():
    """on_retry and on_give_up appending ("retry" | "give_up", event) to one list."""
    events = []
    return (
        events,
        (lambda event: events.append(("retry", event))),
        (lambda event: events.append(("give_up", event))),
    )


def summary(events):
    """(kind, attempt, delay, reason) of each recorded event."""
    return [(kind, e.attempt, e.delay, e.reason) for kind, e in events]


def test_a_retry_and_an_exhausted_give_up_call_the_hooks(flavor, extras):
    events, on_retry, on_give_up = recording_hooks()
    stats = extras.RetryStats()
    retry = flavor.Retry(
        ConstantBackoff(0.25), 2, stats=stats, on_retry=on_retry, on_give_up=on_give_up
    )
    do = always_failing()
    with pytest.raises(CE) as raised:
        flavor.call(retry, do)
    assert summary(events) == [
        ("retry", 1, 0.25, None),
        ("retry", 2, 0.25, None),
        ("give_up", 3, None, "exhausted"),
    ]
    assert events[-1][1].error is raised.value  # the error the caller gets
    assert all(isinstance(e.error, CE) for _, e in events)
    assert flavor.slept == [0.25, 0.25]  # each on_retry came before its sleep
    assert_stats_add_up(stats.snapshot())
    event = events[0][1]
    assert tuple(event) == (event.attempt, event.error, event.delay, event.reason)


def test_an_unhandled_error_after_a_retry_is_no_give_up(flavor, extras):
    """A call that retried once, then met an error it does not catch: no
    give-up (on either asyncio design, whose caught path starts the call
    with nothing recorded)."""
    events, on_retry, on_give_up = recording_hooks()
    retry = flavor.Retry(NoBackoff(), 3, on_retry=on_retry, on_give_up=on_give_up)
    for error in (KeyError("not supported"), ValueError("nor this")):
        with pytest.raises(type(error)):
            flavor.call(retry, failing([CE("first"), error]))
    assert summary(events) == [("retry", 1, 0, None)] * 2


def test_the_events_hash_as_their_tuples(flavor, extras):
    """Equal to the tuple of their fields, and hashed as it (a tuple caches
    its hash from 3.14: an event made, or reused, must not carry one)."""
    kept, seen = [], []
    retry = flavor.Retry(
        NoBackoff(),
        3,
        on_retry=kept.append,
        on_give_up=lambda event: seen.append((hash(event), hash(tuple(event)), tuple(event))),
    )
    for _ in range(3):
        with pytest.raises(CE):
            flavor.call(retry, always_failing())
    for event in kept:
        assert event == tuple(event) and hash(event) == hash(tuple(event))
    assert len(seen) == 3 and all(a == b for a, b, _ in seen)
    assert [t[0] for _, _, t in seen] == [4, 4, 4]


def test_a_hook_that_raises_the_error_it_was_given(flavor, extras):
    """A BaseException retried (in supported_errors) and raised again by
    on_retry: the call ends with it, never its own context."""

    class Stop(BaseException):
        pass

    def raise_it(event):
        raise event.error

    retry = flavor.Retry(NoBackoff(), 3, supported_errors=(Stop,), on_retry=raise_it)
    with pytest.raises(Stop) as raised:
        flavor.call(retry, failing([Stop()]))
    assert raised.value.__context__ is not raised.value


def test_a_success_and_an_unhandled_error_call_neither_hook(flavor, extras):
    events, on_retry, on_give_up = recording_hooks()
    retry = flavor.Retry(NoBackoff(), 3, on_retry=on_retry, on_give_up=on_give_up)
    assert flavor.call(retry, failing([], then="ok")) == "ok"
    with pytest.raises(KeyError):
        flavor.call(retry, failing([KeyError("not a supported error")]))
    assert flavor.call(retry, failing([CE("once")], then="ok")) == "ok"
    assert summary(events) == [("retry", 1, 0, None)]  # NoBackoff: no sleep, a retry all the same
    assert flavor.slept == []


@pytest.mark.parametrize("checker", ["own", "call"])
def test_a_not_retryable_error_gives_up_at_its_attempt(flavor, extras, checker):
    events, on_retry, on_give_up = recording_hooks()
    rejected = CE("rejected")
    own = (lambda error: error is not rejected) if checker == "own" else None
    retry = flavor.Retry(NoBackoff(), 5, is_retryable=own, on_retry=on_retry, on_give_up=on_give_up)
    kwargs = {"is_retryable": lambda error: error is not rejected} if checker == "call" else {}
    with pytest.raises(CE) as raised:
        flavor.call(retry, failing([CE("first"), rejected]), **kwargs)
    assert raised.value is rejected
    assert summary(events) == [("retry", 1, 0, None), ("give_up", 2, None, "not_retryable")]
    assert events[-1][1].error is rejected


def test_the_budget_and_the_deadline_give_up_with_their_reason(flavor, extras):
    events, on_retry, on_give_up = recording_hooks()
    budget = extras.RetryBudget(2, 0.1)  # one failed attempt leaves 1 token: at half, no retry
    retry = flavor.Retry(NoBackoff(), 5, budget=budget, on_give_up=on_give_up)
    with pytest.raises(CE):
        flavor.call(retry, always_failing())
    retry = flavor.Retry(ConstantBackoff(60), 5, deadline=1.0, on_give_up=on_give_up)
    with pytest.raises(CE):
        flavor.call(retry, always_failing())  # a 60 s sleep would pass the deadline
    assert summary(events) == [("give_up", 1, None, "budget"), ("give_up", 1, None, "deadline")]
    assert flavor.slept == []


def test_an_attempt_that_may_have_run_gives_up_with_its_reason(flavor, extras):
    events, on_retry, on_give_up = recording_hooks()
    retry = flavor.Retry(
        NoBackoff(), 5, writes="at-most-once", on_retry=on_retry, on_give_up=on_give_up
    )
    # Raised by no redis-py frame: nothing says where it failed, so it may have run.
    with pytest.raises(CE):
        flavor.call(retry, always_failing())
    assert summary(events) == [("give_up", 1, None, "may_have_run")]


def test_a_hook_that_raises_changes_nothing_and_is_logged(flavor, extras, caplog):
    def broken(event):
        raise ValueError(f"broken hook at attempt {event.attempt}")

    plain_stats, hooked_stats = extras.RetryStats(), extras.RetryStats()
    plain = flavor.Retry(ConstantBackoff(0.5), 2, stats=plain_stats)
    hooked = flavor.Retry(
        ConstantBackoff(0.5), 2, stats=hooked_stats, on_retry=broken, on_give_up=broken
    )
    outcomes = []
    for retry in (plain, hooked):
        do = always_failing()
        with caplog.at_level("ERROR", logger="redis_backoff_c"):
            with pytest.raises(CE) as raised:
                flavor.call(retry, do)
        outcomes.append((do.attempts, type(raised.value), str(raised.value)))
    assert outcomes[0] == outcomes[1]
    assert flavor.slept == [0.5, 0.5, 0.5, 0.5]
    assert counters(plain_stats)[0] == counters(hooked_stats)[0]
    reports = [r for r in caplog.records if r.name == "redis_backoff_c"]
    assert [str(r.exc_info[1]) for r in reports] == [
        "broken hook at attempt 1",
        "broken hook at attempt 2",
        "broken hook at attempt 3",
    ]
    assert all(r.levelname == "ERROR" and "broken" in r.getMessage() for r in reports)


def test_a_keyboard_interrupt_in_a_hook_ends_the_call(flavor, extras):
    def interrupt(event):
        raise KeyboardInterrupt

    stats = extras.RetryStats()
    retry = flavor.Retry(NoBackoff(), 3, stats=stats, on_retry=interrupt)
    with pytest.raises(KeyboardInterrupt) as raised:
        flavor.call(retry, always_failing())
    assert isinstance(raised.value.__context__, CE)
    assert stats.aborted == 1  # as if interrupted in its sleep
    retry = flavor.Retry(NoBackoff(), 0, stats=stats, on_give_up=interrupt)
    with pytest.raises(KeyboardInterrupt) as raised:
        flavor.call(retry, always_failing())
    assert isinstance(raised.value.__context__, CE)
    assert stats.give_ups_exhausted == 1 and stats.aborted == 1  # the give-up stays counted
    assert_stats_add_up(stats.snapshot())


def context_chain(exception, limit=20):
    """`exception` and its __context__s, in order; fails on a loop."""
    chain = [exception]
    while chain[-1].__context__ is not None:
        chain.append(chain[-1].__context__)
        assert len(chain) <= limit and len(set(map(id, chain))) == len(chain), chain
    return chain


def throw_without_chaining(exception):
    """Raise `exception` as generator.throw() does: without Python's own
    chaining, so its __context__ stays what it was."""

    def generator():
        yield

    started = generator()
    next(started)
    started.throw(exception)


@pytest.mark.parametrize("hook", ["on_retry", "on_give_up"])
def test_a_hook_that_raises_an_exception_already_on_the_errors_chain(flavor, extras, hook):
    """The hook raises (without Python's chaining) a KeyboardInterrupt that
    is the error's own __context__: no loop.  Both sides do as CPython's
    chaining would: the error becomes its context, and the error's chain
    is cut where it reached it (issue 38)."""
    interrupt = KeyboardInterrupt("on the error's chain")
    errors = []

    def do():
        try:
            raise interrupt
        except KeyboardInterrupt:
            errors.append(CE("raised while handling the interrupt"))
            raise errors[-1]  # noqa: B904 - the implicit chaining is the point

    retry = flavor.Retry(
        NoBackoff(),
        0 if hook == "on_give_up" else 3,
        **{hook: lambda event: throw_without_chaining(interrupt)},
    )
    with pytest.raises(KeyboardInterrupt) as raised:
        flavor.call(retry, do)
    assert raised.value is interrupt
    assert context_chain(interrupt) == [interrupt, errors[0]]
    assert errors[0].__context__ is None


def test_a_hook_exception_with_a_context_keeps_it(flavor, extras):
    """What the hook raises with a context of its own keeps it; one raised
    with Python's chaining has the error as context, on both sides."""
    own_context = ValueError("the hook's own")
    interrupt = KeyboardInterrupt("with a context")
    interrupt.__context__ = own_context

    retry = flavor.Retry(NoBackoff(), 0, on_give_up=lambda event: throw_without_chaining(interrupt))
    with pytest.raises(KeyboardInterrupt) as raised:
        flavor.call(retry, always_failing())
    assert context_chain(raised.value) == [interrupt, own_context]

    def chained(event):
        try:
            raise interrupt
        except KeyboardInterrupt as caught:
            raise KeyboardInterrupt("chained") from caught

    retry = flavor.Retry(NoBackoff(), 0, on_give_up=chained)
    with pytest.raises(KeyboardInterrupt) as raised:
        flavor.call(retry, always_failing())
    chain = context_chain(raised.value)
    assert chain[1] is interrupt and isinstance(chain[2], CE)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_event_pickles_with_every_protocol(extras, protocol):
    """A RetryEvent round-trips through pickle and copy on both sides, at
    every protocol (issue 38: the C type refused 0 and 1)."""
    events, on_retry, on_give_up = recording_hooks()
    retry = extras.Retry(NoBackoff(), 1, on_retry=on_retry, on_give_up=on_give_up)
    with pytest.raises(CE):
        retry.call_with_retry(always_failing(), lambda error: None)
    assert len(events) == 2
    for _, event in events:
        for twin in (
            pickle.loads(pickle.dumps(event, protocol)),
            copy.copy(event),
            copy.deepcopy(event),
        ):
            assert type(twin) is type(event)
            assert (twin.attempt, twin.delay, twin.reason) == (
                event.attempt,
                event.delay,
                event.reason,
            )
            assert type(twin.error) is CE and twin.error.args == event.error.args
            assert len(twin) == 4


def test_a_hook_that_changes_the_retry_it_runs_under(flavor, extras):
    """A hook that drops the hooks, or every extra, of its Retry: the call
    goes on with what the Retry holds at each step, and nothing breaks."""
    seen = []
    retry = None

    def drop_everything(event):
        seen.append(event.attempt)
        retry.on_retry = None
        retry.on_give_up = None
        retry.stats = None

    stats = extras.RetryStats()
    retry = flavor.Retry(
        NoBackoff(), 3, stats=stats, on_retry=drop_everything, on_give_up=drop_everything
    )
    with pytest.raises(CE):
        flavor.call(retry, always_failing())
    assert seen == [1]
    assert retry.on_retry is None and retry.stats is None
    assert stats.calls == 1 and stats.give_ups_exhausted == 0  # counted while it was set


def test_the_hooks_as_parameters_and_attributes(flavor, extras):
    def hook(event):
        pass

    for name in ("on_retry", "on_give_up"):
        with pytest.raises(
            TypeError, match=rf"Retry\(\) argument '{name}' must be callable or None, not int"
        ):
            flavor.Retry(NoBackoff(), 1, **{name: 3})
        retry = flavor.Retry(NoBackoff(), 1, **{name: hook})
        assert getattr(retry, name) is hook
        assert retry != flavor.Retry(NoBackoff(), 1)
        assert retry == flavor.Retry(NoBackoff(), 1, **{name: hook})
        assert retry != flavor.Retry(NoBackoff(), 1, **{name: lambda event: None})  # by identity
        assert hash(retry) == hash(flavor.Retry(NoBackoff(), 1))
        assert f", {name}={hook!r})" in repr(retry)
        for twin in (copy.copy(retry), copy.deepcopy(retry)):
            assert getattr(twin, name) is hook  # shared, never deep-copied
        with pytest.raises(TypeError, match=rf"Retry.{name}\(\) argument 'value' must be callable"):
            setattr(retry, name, "print")
        with pytest.raises(AttributeError):
            delattr(retry, name)
        setattr(retry, name, None)
        assert getattr(retry, name) is None and retry == flavor.Retry(NoBackoff(), 1)


def test_the_hooks_travel_in_a_pickle(flavor, extras):
    retry = flavor.Retry(NoBackoff(), 1, on_retry=print, on_give_up=len)
    # From protocol 3: before it, pickle writes TimeoutError (a default
    # supported error) as OSError, for Python 2.
    for protocol in range(3, pickle.HIGHEST_PROTOCOL + 1):
        twin = pickle.loads(pickle.dumps(retry, protocol))
        assert twin.on_retry is print and twin.on_give_up is len and twin == retry


def test_the_events_type(extras):
    """A tuple with the four named fields: the C types' own tuple type
    (redis_backoff_c.RetryEvent), the twin's NamedTuple."""
    events, on_retry, on_give_up = recording_hooks()
    retry = extras.Retry(NoBackoff(), 1, on_retry=on_retry, on_give_up=on_give_up)
    with pytest.raises(CE):
        retry.call_with_retry(always_failing(), lambda error: None)
    from redis_backoff_c import hooks

    expected = (
        redis_backoff_c._impl.speedups.RetryEvent if extras is EXTRAS["c"] else hooks.RetryEvent
    )
    for _, event in events:
        assert type(event) is expected
        assert isinstance(event, tuple) and len(event) == 4
    assert [e.reason for _, e in events] == [None, "exhausted"]
    assert events[1][1].reason in hooks.REASONS


def test_a_failure_loop_with_hooks_leaks_nothing(flavor, extras):
    def hook(event):
        pass

    retry = flavor.Retry(NoBackoff(), 2, on_retry=hook, on_give_up=hook)

    def run():
        with pytest.raises(CE):
            flavor.call(retry, always_failing())

    assert_no_leak(run, watched=(hook,))
