"""The sync Retry's shared contract, run on redis-py and on the C type alike.

call_with_retry scenarios are played on both sides and their full event
sequences compared (see retry_scenarios.py); the rest of the API is checked
on each side through the `impl` fixture and across sides.
"""

import copy
import gc
import itertools
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
import weakref

import pytest
import redis
import redis.asyncio.retry
import redis.backoff
import redis.exceptions
import redis.retry
from retry_scenarios import (
    FailError,
    RecordingBackoff,
    RetryableError,
    Scenario,
    ScriptExhausted,
    run,
)
from support import (
    IMPLEMENTATIONS,
    REDIS_PY_HAS_CHECKER,
    patch_sleep,
    side_without_checker,
)

DEFAULT_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, socket.timeout)


def other_side(impl):
    return IMPLEMENTATIONS["c" if impl.name == "redis-py" else "redis-py"]


def both_sides_agree(monkeypatch, scenario):
    """Play the scenario on both sides; return redis-py's events after
    checking the C side recorded the very same ones.  A scenario with the
    Retry's own checker, under a redis-py without one (before 8.2),
    is played on the C side alone, which must end the call; the tests
    that spell out sequences then check what it recorded."""
    if scenario.needs_checker and not REDIS_PY_HAS_CHECKER:
        actual = run(IMPLEMENTATIONS["c"], monkeypatch, scenario)
        assert actual[-1][0] in ("return", "raise"), scenario
        return actual
    expected = run(IMPLEMENTATIONS["redis-py"], monkeypatch, scenario)
    actual = run(IMPLEMENTATIONS["c"], monkeypatch, scenario)
    assert actual == expected, scenario
    return expected


# ---- call_with_retry: the full event sequence, both sides ----

SCRIPTS = [
    ("ok",),
    ("conn", "ok"),
    ("conn", "timeout", "socket", "ok"),
    ("sub", "conn", "sub", "conn", "ok"),
    ("conn",) * 5 + ("ok",),
    ("conn",) * 7 + ("foreign",),
    ("foreign",),
    ("conn", "foreign"),
    ("kbi",),
    ("conn", "kbi"),
    ("timeout", "exit"),
]
IS_RETRYABLE = [None, (True,) * 8, (False,), (True, False), (True, 0, True), (1, "raise")]
FAIL_RAISES = [None, 1, 2]
BACKOFFS = [
    ("recording", (0.25,)),
    ("recording", (0, 0.5, -1)),  # a delay <= 0 is not slept
    ("constant", (0.125,)),
    ("none", (0,)),
    ("exponential", (0,)),
    ("jitter", (0,)),
]


@pytest.mark.parametrize("retries", [-1, 0, 1, 3])
@pytest.mark.parametrize("script", SCRIPTS, ids="-".join)
def test_call_with_retry_same_events(monkeypatch, retries, script):
    """Every combination of is_retryable, with_failure_count, a raising
    fail and backoff, for this script and retry count."""
    for is_retryable, with_count, fail_raises, (backoff, delays) in itertools.product(
        IS_RETRYABLE, [None, False, True], FAIL_RAISES, BACKOFFS
    ):
        scenario = Scenario(
            script=script,
            retries=retries,
            is_retryable=is_retryable,
            with_failure_count=with_count,
            fail_raises_at=fail_raises,
            backoff=backoff,
            delays=delays,
        )
        events = both_sides_agree(monkeypatch, scenario)
        assert events[-1][0] in ("return", "raise")
        assert "ScriptExhausted" not in events[-1]


def test_reference_sequence_is_what_the_contract_says(monkeypatch):
    """One sequence spelled out, so the comparison above compares the right
    thing: reset once, do, is_retryable, fail, compute, sleep, ..."""
    events = both_sides_agree(
        monkeypatch,
        Scenario(
            script=("conn", "timeout", "ok"),
            retries=3,
            is_retryable=(True, True),
            with_failure_count=True,
            delays=(0.25, 0),
        ),
    )
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("is_retryable", "conn #1", True),
        ("fail", ("error", "conn #1", True), 1),
        ("compute", "backoff", 1),
        ("sleep", 0.25),
        ("do", "timeout"),
        ("is_retryable", "timeout #2", True),
        ("fail", ("error", "timeout #2", True), 2),
        ("compute", "backoff", 2),
        ("do", "ok"),
        ("return", "result"),
    ]


def test_retries_exhausted_raises_the_last_error_itself(monkeypatch):
    events = both_sides_agree(monkeypatch, Scenario(script=("conn",) * 3, retries=1))
    assert events[-1] == ("raise", "ConnectionError", "conn #2", True, None, None)
    assert [e[0] for e in events].count("fail") == 2
    assert [e[0] for e in events].count("compute") == 1


def test_retries_zero_fails_once_and_never_computes(monkeypatch):
    events = both_sides_agree(monkeypatch, Scenario(script=("conn",), retries=0))
    assert [e[0] for e in events] == ["reset", "do", "fail", "raise"]


def test_retries_negative_retries_until_success(monkeypatch):
    events = both_sides_agree(monkeypatch, Scenario(script=("conn",) * 50 + ("ok",), retries=-1))
    assert events[-1] == ("return", "result")
    assert [e for e in events if e[0] == "compute"][-1] == ("compute", "backoff", 50)


def test_foreign_error_and_keyboard_interrupt_pass_untouched(monkeypatch):
    for error in ("foreign", "kbi", "exit"):
        events = both_sides_agree(monkeypatch, Scenario(script=(error,)))
        assert [e[0] for e in events] == ["reset", "do", "raise"]  # fail not called
        assert events[-1][3] is True and events[-1][4] is None  # same object, no context


def test_script_guard_is_real(monkeypatch):
    """A runaway loop shows up as ScriptExhausted rather than hanging."""
    events = both_sides_agree(monkeypatch, Scenario(script=("conn",) * 2, retries=-1))
    assert events[-1][1] == ScriptExhausted.__name__


# ---- the error that comes out: traceback and __context__ ----


def _raiser():
    raise redis.exceptions.ConnectionError("deep")


def _do_through_frames():
    _raiser()


def _own_frames(error):
    return [f.name for f in traceback.extract_tb(error.__traceback__) if f.filename == __file__]


@pytest.mark.parametrize("how", ["exhausted", "not retryable", "rejected by the Retry's checker"])
def test_reraised_error_keeps_the_frames_of_do(impl, sleeps, how):
    own = {}
    if how.startswith("rejected"):
        if side_without_checker(impl):
            return
        own["is_retryable"] = lambda e: False
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1 if how == "exhausted" else 5, **own)
    is_retryable = (lambda e: False) if how == "not retryable" else None
    with pytest.raises(redis.exceptions.ConnectionError) as info:
        retry.call_with_retry(_do_through_frames, lambda e: None, is_retryable)
    frames = _own_frames(info.value)
    assert frames[-2:] == ["_do_through_frames", "_raiser"]
    assert frames[0] == "test_reraised_error_keeps_the_frames_of_do"


class _ComputeError(Exception):
    pass


class _RaisingCompute(RecordingBackoff):
    def compute(self, failures):
        raise _ComputeError(failures)


@pytest.mark.parametrize(
    "culprit",
    ["fail", "is_retryable", "compute", "sleep", "own checker", "fail after a rejection"],
)
def test_callback_error_has_the_handled_error_as_context(impl, monkeypatch, culprit):
    seen = []
    backoff = _RaisingCompute([]) if culprit == "compute" else impl.backoff.ConstantBackoff(0.5)
    own = {}
    if culprit in ("own checker", "fail after a rejection"):
        if side_without_checker(impl):
            return

        def own_checker(e):
            seen.append(sys.exc_info()[1])
            if culprit == "own checker":
                raise RetryableError("in the Retry's checker")
            return False

        own["is_retryable"] = own_checker
    retry = impl.retry.Retry(backoff, 3, **own)

    def fake_sleep(delay):
        seen.append(sys.exc_info()[1])
        raise _ComputeError("sleep")

    monkeypatch.setattr(impl.retry, "sleep", fake_sleep)
    error = redis.exceptions.TimeoutError("handled")

    def do():
        raise error

    def fail(e):
        seen.append(sys.exc_info()[1])  # inside the `except` block
        if culprit in ("fail", "fail after a rejection"):
            raise FailError("in fail")

    def is_retryable(e):
        seen.append(sys.exc_info()[1])
        if culprit == "is_retryable":
            raise RetryableError("in is_retryable")
        return True

    with pytest.raises(Exception) as info:
        retry.call_with_retry(do, fail, is_retryable)
    assert info.value is not error
    assert info.value.__context__ is error
    assert all(e is error for e in seen) and seen
    assert sys.exc_info() == (None, None, None)  # the handled exception is restored


def test_handled_exception_outside_is_restored(impl, sleeps):
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 2)
    attempts = iter([True, False])

    def do():
        if next(attempts):
            raise redis.exceptions.ConnectionError("x")
        return sys.exc_info()[1]

    try:
        raise KeyError("outer")
    except KeyError as outer:
        inside = retry.call_with_retry(do, lambda e: None)
        assert sys.exc_info()[1] is outer
        assert inside is outer  # do() runs outside the retry's handling, as in redis-py


# ---- reentrancy: fail changes the Retry, or uses it ----


def _reentrant_events(impl, monkeypatch, action):
    events = []
    patch_sleep(impl, monkeypatch, events)
    retry = impl.retry.Retry(RecordingBackoff(events, (0.5,), "first"), 3)
    script = iter(["conn", "conn", "timeout", "ok", "ok", "ok"])

    def do():
        step = next(script)
        events.append(("do", step))
        if step == "ok":
            return "result"
        raise redis.exceptions.ConnectionError(step)

    def fail(error, count):
        events.append(("fail", str(error), count))
        if count == 1:
            action(retry, events)

    try:
        events.append(("return", retry.call_with_retry(do, fail, with_failure_count=True)))
    except Exception as error:
        events.append(("raise", type(error).__name__, str(error)))
    events.append(("retries", retry.get_retries(), retry._supported_errors))
    return events


def _update_retries(retry, events):
    retry.update_retries(1)


def _new_backoff(retry, events):
    retry._backoff = RecordingBackoff(events, (0.75,), "second")


def _new_errors(retry, events):
    retry._supported_errors = (KeyError,)


def _update_errors(retry, events):
    retry.update_supported_errors([KeyError])


def _nested_call(retry, events):
    def inner_fail(error):
        events.append(("inner fail", str(error)))

    def inner_do():
        events.append(("inner do",))
        raise redis.exceptions.TimeoutError("inner")

    retry.update_retries(1)
    try:
        retry.call_with_retry(inner_do, inner_fail)
    except redis.exceptions.TimeoutError as error:
        events.append(("inner raise", str(error)))
    retry.update_retries(3)


def _drop_everything(retry, events):
    # Replace every attribute the loop is using: the loop must hold its own
    # references (no crash) and read the new ones.
    retry._backoff = RecordingBackoff(events, (0,), "third")
    retry._supported_errors = (redis.exceptions.ConnectionError,)
    retry._retries = 5
    gc.collect()


@pytest.mark.parametrize(
    "action",
    [_update_retries, _new_backoff, _new_errors, _update_errors, _nested_call, _drop_everything],
)
def test_fail_that_changes_or_reuses_the_retry(monkeypatch, action):
    expected = _reentrant_events(IMPLEMENTATIONS["redis-py"], monkeypatch, action)
    actual = _reentrant_events(IMPLEMENTATIONS["c"], monkeypatch, action)
    assert actual[:-1] == expected[:-1]
    # The final tuple of update_supported_errors is a set's order: equal as sets.
    assert actual[-1][:2] == expected[-1][:2]
    assert set(actual[-1][2]) == set(expected[-1][2])


# ---- sleeping ----


def test_sleep_is_the_patchable_module_name(impl, monkeypatch):
    assert impl.retry.sleep is time.sleep
    slept = patch_sleep(impl, monkeypatch)
    retry = impl.retry.Retry(impl.backoff.ConstantBackoff(3600), 2)
    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(_raiser, lambda e: None)
    assert slept == [("sleep", 3600), ("sleep", 3600)]


def test_real_sleep_releases_the_gil(impl):
    retry = impl.retry.Retry(impl.backoff.ConstantBackoff(0.2), 1)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        start = time.monotonic()
        with pytest.raises(redis.exceptions.ConnectionError):
            retry.call_with_retry(_raiser, lambda e: None)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        thread.join()
    assert elapsed >= 0.2
    assert len([t for t in ticks if start < t < start + elapsed]) >= 5


def test_ctrl_c_interrupts_the_sleep(impl):
    retry = impl.retry.Retry(impl.backoff.ConstantBackoff(30), 1)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            retry.call_with_retry(_raiser, lambda e: None)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 10
    assert isinstance(info.value.__context__, redis.exceptions.ConnectionError)


# ---- backoffs: any object with reset()/compute() ----


def test_python_subclass_overriding_compute_is_honoured(impl, sleeps):
    class Doubling(impl.backoff.ExponentialBackoff):
        resets = 0

        def reset(self):
            type(self).resets += 1

        def compute(self, failures):
            return 2 * super().compute(failures)

    retry = impl.retry.Retry(Doubling(cap=10, base=1.0), 2)
    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(_raiser, lambda e: None)
    assert sleeps == [("sleep", 4.0), ("sleep", 8.0)]
    assert Doubling.resets == 1


@pytest.mark.parametrize("side_of_backoff", ["redis-py", "c"])
def test_backoff_of_either_side_works(impl, sleeps, side_of_backoff):
    backoffs = IMPLEMENTATIONS[side_of_backoff].backoff
    retry = impl.retry.Retry(backoffs.ExponentialBackoff(cap=1.0, base=0.125), 3)
    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(_raiser, lambda e: None)
    assert sleeps == [("sleep", 0.25), ("sleep", 0.5), ("sleep", 1.0)]


def test_decorrelated_jitter_is_reset_once_per_call(impl, sleeps):
    backoff = impl.backoff.DecorrelatedJitterBackoff(cap=100.0, base=1.0)
    retry = impl.retry.Retry(backoff, 2)
    backoff._previous_backoff = 50
    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(_raiser, lambda e: None)
    first = sleeps[0][1]
    assert 1.0 <= first <= 3.0  # from 0 after reset, not from 50


# ---- construction and attributes ----


def test_constructor_defaults_positional_and_keywords(impl):
    backoff = impl.backoff.NoBackoff()
    retry = impl.retry.Retry(backoff, 3)
    assert retry._backoff is backoff
    assert retry._retries == 3
    assert retry._supported_errors == DEFAULT_ERRORS
    keywords = impl.retry.Retry(retries=2, backoff=backoff, supported_errors=(KeyError,))
    assert (keywords._retries, keywords._supported_errors) == (2, (KeyError,))
    assert impl.retry.Retry(backoff, -1, (OSError,))._supported_errors == (OSError,)
    with pytest.raises(TypeError):
        impl.retry.Retry(backoff)
    with pytest.raises(TypeError):  # four from redis-py 8.2 on (is_retryable), never five
        impl.retry.Retry(backoff, 1, (), None, 4)


def test_attributes_writable_with_effect(impl, sleeps):
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 0)
    retry._retries = 2
    retry._backoff = impl.backoff.ConstantBackoff(0.5)
    retry._supported_errors = (KeyError,)
    assert retry.get_retries() == 2
    calls = []

    def do():
        calls.append(1)
        raise KeyError("k")

    with pytest.raises(KeyError):
        retry.call_with_retry(do, lambda e: None)
    assert len(calls) == 3
    assert sleeps == [("sleep", 0.5), ("sleep", 0.5)]
    retry._supported_errors = (ValueError,)
    with pytest.raises(KeyError):
        retry.call_with_retry(do, lambda e: None)
    assert len(calls) == 4


def test_get_and_update_retries(impl):
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 3)
    assert retry.get_retries() == 3
    assert retry.update_retries(-1) is None
    assert retry.get_retries() == -1 and retry._retries == -1
    retry.update_retries(value=7)
    assert retry.get_retries() == 7


@pytest.mark.parametrize(
    "start, added",
    [
        (DEFAULT_ERRORS, [KeyError]),
        (DEFAULT_ERRORS, (ConnectionResetError, redis.exceptions.ConnectionError)),
        ((KeyError,), []),
        ((), [ValueError, ValueError, KeyError]),
        ((OSError, KeyError), iter([IndexError])),
    ],
)
def test_update_supported_errors_matches_redis_py_exactly(start, added):
    added = list(added)
    results = []
    for side in ("redis-py", "c"):
        retry = IMPLEMENTATIONS[side].retry.Retry(redis.backoff.NoBackoff(), 1, start)
        assert retry.update_supported_errors(iter(added)) is None
        results.append(retry._supported_errors)
    assert type(results[1]) is tuple
    assert results[1] == results[0]  # the same set insertions, the same order


def test_update_supported_errors_keyword(impl):
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1, (KeyError,))
    retry.update_supported_errors(specified_errors=[KeyError, ValueError])
    assert set(retry._supported_errors) == {KeyError, ValueError}


# ---- ==, hash, isinstance ----


def _pair(side, backoff=("ExponentialBackoff", ()), retries=3, errors=None):
    impl = IMPLEMENTATIONS[side]
    args = (getattr(impl.backoff, backoff[0])(*backoff[1]), retries)
    if errors is not None:
        args += (errors,)
    return impl.retry.Retry(*args)


VARIANTS = [
    {},
    {"retries": 4},
    {"retries": -1},
    {"backoff": ("ExponentialBackoff", (1.0,))},
    {"backoff": ("ConstantBackoff", (0,))},
    {"backoff": ("NoBackoff", ())},
    {"errors": (KeyError,)},
    {"errors": tuple(reversed(DEFAULT_ERRORS))},
    {"errors": DEFAULT_ERRORS + DEFAULT_ERRORS},
]


@pytest.mark.parametrize("left_side", ["redis-py", "c"])
@pytest.mark.parametrize("right_side", ["redis-py", "c"])
def test_equality_and_hash_across_sides(left_side, right_side):
    for a, b in itertools.product(VARIANTS, repeat=2):
        left, right = _pair(left_side, **a), _pair(right_side, **b)
        reference = _pair("redis-py", **a) == _pair("redis-py", **b)
        assert (left == right) is reference, (a, b)
        assert (right == left) is reference, (a, b)
        assert (left != right) is (not reference), (a, b)
        if reference:
            assert hash(left) == hash(right)
        assert hash(left) == hash(_pair("redis-py", **a))


def test_hash_is_redis_py_formula(impl):
    backoff = impl.backoff.ExponentialBackoff()
    retry = impl.retry.Retry(backoff, 3, (KeyError, ValueError))
    assert hash(retry) == hash((backoff, 3, frozenset((KeyError, ValueError))))
    retry._supported_errors = (IndexError,)
    retry._retries = 5
    assert hash(retry) == hash((backoff, 5, frozenset((IndexError,))))


def test_equality_with_foreign_types(impl):
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1)
    assert retry.__eq__(object()) is NotImplemented
    assert retry.__eq__(3) is NotImplemented
    assert retry != 3 and retry != "Retry"
    asyncio_retry = redis.asyncio.retry.Retry(impl.backoff.NoBackoff(), 1)
    assert retry.__eq__(asyncio_retry) is NotImplemented
    assert retry != asyncio_retry
    assert retry == retry


def test_equality_result_is_and_of_the_fields(impl):
    class Weird:
        def __eq__(self, other):
            return "truthy"

        __hash__ = object.__hash__

    left = impl.retry.Retry(Weird(), 1)
    right = impl.retry.Retry(Weird(), 1, (KeyError,))
    assert (left == right) is False  # the error sets decide
    right._supported_errors = left._supported_errors
    assert (left == right) is True

    class Falsy(Weird):
        def __eq__(self, other):
            return 0

    assert (impl.retry.Retry(Falsy(), 1) == left) == 0


def test_package_exports_the_sync_retry():
    import redis_backoff_c
    import redis_backoff_c.retry

    assert redis_backoff_c.Retry is redis_backoff_c.retry.Retry
    assert redis_backoff_c.Retry is not redis.retry.Retry  # the C type, here


def test_isinstance_of_redis_retry(impl):
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1)
    assert isinstance(retry, redis.retry.Retry)
    assert isinstance(retry, redis.retry.AbstractRetry)
    assert not isinstance(retry, redis.asyncio.retry.Retry)


def test_redis_client_accepts_and_deep_copies_it(impl):
    retry = impl.retry.Retry(impl.backoff.ExponentialBackoff(), 3)
    client = redis.Redis(port=1, retry=retry, retry_on_error=[KeyError])
    connection = client.connection_pool.make_connection()
    assert type(connection.retry) is type(retry)
    assert connection.retry is not retry
    assert connection.retry._backoff is not retry._backoff
    assert connection.retry._backoff == retry._backoff
    assert KeyError in connection.retry._supported_errors
    assert KeyError not in retry._supported_errors
    client.close()


# ---- copy, deepcopy, pickle ----


def _rich_retry(impl):
    return impl.retry.Retry(impl.backoff.DecorrelatedJitterBackoff(2.0, 0.25), -1, (KeyError,))


@pytest.mark.parametrize("how", ["copy", "deepcopy"])
def test_copies(impl, how):
    retry = _rich_retry(impl)
    retry._backoff._previous_backoff = 1.5
    twin = getattr(copy, how)(retry)
    assert type(twin) is type(retry)
    assert twin == retry and hash(twin) == hash(retry)
    assert twin._supported_errors is retry._supported_errors
    assert (twin._backoff is retry._backoff) is (how == "copy")
    assert twin._backoff._previous_backoff == 1.5
    twin._retries = 9
    assert retry._retries == -1


def test_deepcopy_keeps_shared_backoff_shared(impl):
    backoff = impl.backoff.ExponentialBackoff()
    retries = [impl.retry.Retry(backoff, 1), impl.retry.Retry(backoff, 2)]
    copied = copy.deepcopy(retries)
    assert copied[0]._backoff is copied[1]._backoff
    assert copied[0]._backoff is not backoff


def test_deepcopy_of_a_cycle_through_the_backoff(impl):
    backoff = RecordingBackoff([])
    retry = impl.retry.Retry(backoff, 1)
    backoff.owner = retry
    twin = copy.deepcopy(retry)
    assert twin._backoff.owner is twin
    assert twin._backoff is not backoff


def test_deepcopy_of_a_user_backoff(impl):
    events = []
    retry = impl.retry.Retry(RecordingBackoff(events, (0.5, 1.0)), 2)
    twin = copy.deepcopy(retry)
    assert twin._backoff is not retry._backoff
    assert twin._backoff.delays == (0.5, 1.0)
    assert twin._backoff.events is not events


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(impl, protocol):
    retry = _rich_retry(impl)
    twin = pickle.loads(pickle.dumps(retry, protocol))
    assert type(twin) is type(retry)
    assert twin == retry
    if protocol >= 3:  # before 3, pickle writes socket.timeout as OSError
        default = impl.retry.Retry(impl.backoff.ExponentialBackoff(), 3)
        assert pickle.loads(pickle.dumps(default, protocol)) == default


def test_garbage_cycle_through_the_backoff_is_collected(impl):
    class Holder(RecordingBackoff):
        pass

    backoff = Holder([])
    retry = impl.retry.Retry(backoff, 1)
    backoff.retry = retry
    ref = weakref.ref(retry)
    del retry, backoff
    gc.collect()
    assert ref() is None


def test_subclass_with_own_init_copies_and_pickles(impl):
    subclass = _subclass(impl)
    retry = subclass(5)
    retry.note = ["a"]
    for twin in (copy.copy(retry), copy.deepcopy(retry), pickle.loads(pickle.dumps(retry))):
        assert type(twin) is subclass
        assert twin == retry
        assert twin.note == ["a"]
        assert twin._retries == 5
    assert copy.deepcopy(retry).note is not retry.note
    assert copy.copy(retry).note is retry.note


def _subclass(impl):
    class FiveRetries(impl.retry.Retry):
        def __init__(self, retries):
            super().__init__(impl.backoff.NoBackoff(), retries)

    FiveRetries.__qualname__ = FiveRetries.__name__ = f"FiveRetries_{impl.name.replace('-', '_')}"
    globals()[FiveRetries.__name__] = FiveRetries
    return FiveRetries


# ---- the Retry's own checker: redis-py 8.2's is_retryable ----
#
# On redis-py 8.2 every test here compares the two sides; before 8.2 the
# redis-py side has no checker (side_without_checker checks that), and
# the C side, which takes one whatever redis-py is installed, is checked
# against the sequences spelled out.

CHECKER_SCRIPTS = [
    ("conn", "ok"),
    ("conn", "timeout", "socket", "ok"),
    ("conn",) * 5,
    ("foreign",),
    ("conn", "foreign"),
    ("sub", "kbi"),
]
OWN_CHECKERS = [(False,), (True, False), (True, True, 0), (True, "raise"), ([],), (True,) * 8]
CALL_CHECKERS = [None, (True,) * 8, (False,), (True, False)]


@pytest.mark.parametrize("retries", [0, 3])
@pytest.mark.parametrize("script", CHECKER_SCRIPTS, ids="-".join)
def test_own_checker_same_events(monkeypatch, retries, script):
    """Every combination of the Retry's checker with the call's, a failure
    count, a raising fail and the backoff, for this script."""
    for own, call_checker, with_count, fail_raises, (backoff, delays) in itertools.product(
        OWN_CHECKERS, CALL_CHECKERS, [None, False, True], [None, 1, 2], BACKOFFS[:3]
    ):
        scenario = Scenario(
            script=script,
            retries=retries,
            own_checker=own,
            is_retryable=call_checker,
            with_failure_count=with_count,
            fail_raises_at=fail_raises,
            backoff=backoff,
            delays=delays,
        )
        events = both_sides_agree(monkeypatch, scenario)
        assert "ScriptExhausted" not in events[-1]


@pytest.mark.parametrize("new_checker", [None, (False,), (True, False), ("raise",)])
@pytest.mark.parametrize("own", [None, (True,) * 8, (True, False)])
@pytest.mark.parametrize("fail_raises", [None, 1, 2])
def test_fail_that_replaces_the_checker(monkeypatch, new_checker, own, fail_raises):
    """fail() sets retry.is_retryable: the next error meets the new one
    (the checker is read when each error is handled)."""
    for at, with_count in itertools.product([1, 2], [None, True]):
        scenario = Scenario(
            script=("conn", "timeout", "conn", "ok"),
            own_checker=own,
            fail_sets_checker_at=at,
            new_checker=new_checker,
            with_failure_count=with_count,
            fail_raises_at=fail_raises,
        )
        both_sides_agree(monkeypatch, scenario)


def test_rejection_spelled_out(monkeypatch):
    """The checker says no to the second error: fail gets the count it
    would have had, the call's is_retryable is not asked, nothing is
    computed, and the error itself is raised, without a context."""
    events = both_sides_agree(
        monkeypatch,
        Scenario(
            script=("conn", "timeout", "ok"),
            own_checker=(True, False),
            is_retryable=(True, True),
            with_failure_count=True,
        ),
    )
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("own_checker", "conn #1", True),
        ("is_retryable", "conn #1", True),
        ("fail", ("error", "conn #1", True), 1),
        ("compute", "backoff", 1),
        ("sleep", 0.25),
        ("do", "timeout"),
        ("own_checker", "timeout #2", True),
        ("fail", ("error", "timeout #2", True), 2),
        ("raise", "TimeoutError", "timeout #2", True, None, None),
    ]


def test_rejection_without_failure_count_and_raising_fail(monkeypatch):
    events = both_sides_agree(monkeypatch, Scenario(script=("conn", "ok"), own_checker=(False,)))
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("own_checker", "conn #1", True),
        ("fail", ("error", "conn #1", True)),
        ("raise", "ConnectionError", "conn #1", True, None, None),
    ]
    events = both_sides_agree(
        monkeypatch, Scenario(script=("conn", "ok"), own_checker=(False,), fail_raises_at=1)
    )
    assert events[-2:] == [
        ("fail", ("error", "conn #1", True)),
        ("raise", "FailError", "fail #1", False, "ConnectionError", True),
    ]


def test_checker_not_asked_about_foreign_errors(monkeypatch):
    events = both_sides_agree(monkeypatch, Scenario(script=("foreign",), own_checker=(False,)))
    assert [e[0] for e in events] == ["reset", "do", "raise"]


def test_checker_raising_has_the_error_as_context(monkeypatch):
    events = both_sides_agree(
        monkeypatch, Scenario(script=("conn", "ok"), own_checker=("raise",), is_retryable=(True,))
    )
    assert events[-2:] == [
        ("own_checker", "conn #1", True),
        ("raise", "RetryableError", "own_checker", False, "ConnectionError", True),
    ]


def test_checker_set_to_none_by_fail(monkeypatch):
    events = both_sides_agree(
        monkeypatch,
        Scenario(
            script=("conn", "conn", "ok"),
            own_checker=(True, False),
            fail_sets_checker_at=1,
            new_checker=None,
        ),
    )
    assert [e[0] for e in events].count("own_checker") == 1
    assert events[-1] == ("return", "result")


def test_checker_set_by_fail_after_a_rejection(monkeypatch):
    """fail runs before the rejected error is raised: what it sets is there
    for the next call_with_retry."""
    events = both_sides_agree(
        monkeypatch,
        Scenario(
            script=("conn", "ok"),
            own_checker=(False,),
            fail_sets_checker_at=1,
            new_checker=(True,),
        ),
    )
    assert events[-1] == ("raise", "ConnectionError", "conn #1", True, None, None)


def test_call_checker_rule_follows_redis_py(monkeypatch):
    """A call-time is_retryable that is false as a truth value: redis-py 8.2
    calls it (`is not None`), 8.0 and 8.1 skip it (`is_retryable and`).
    Both sides follow the redis-py installed."""
    events = both_sides_agree(
        monkeypatch,
        Scenario(script=("conn", "ok"), is_retryable=(False,), falsy_call_checker=True),
    )
    if REDIS_PY_HAS_CHECKER:
        assert events[-2:] == [
            ("is_retryable", "conn #1", True),
            ("raise", "ConnectionError", "conn #1", True, None, None),
        ]
    else:
        assert "is_retryable" not in [e[0] for e in events]
        assert events[-1] == ("return", "result")


def _always(error):
    return True


def _never(error):
    return False


class CallableChecker:
    """A checker object: equal by its answer, unhashable (the Retry's hash
    must not hash it), deep-copied by copy.deepcopy."""

    __hash__ = None

    def __init__(self, answer):
        self.answer = answer

    def __call__(self, error):
        return self.answer

    def __eq__(self, other):
        return isinstance(other, CallableChecker) and other.answer == self.answer


def test_checker_constructor_and_attributes(impl):
    if side_without_checker(impl):
        return
    backoff = impl.backoff.NoBackoff()
    plain = impl.retry.Retry(backoff, 1)
    assert plain.is_retryable is None and plain._is_retryable is None
    positional = impl.retry.Retry(backoff, 1, (KeyError,), _never)
    assert positional.is_retryable is _never and positional._is_retryable is _never
    assert positional._supported_errors == (KeyError,)
    keyword = impl.retry.Retry(backoff, 2, is_retryable=_always)
    assert keyword._is_retryable is _always and keyword._supported_errors == DEFAULT_ERRORS
    keyword.is_retryable = None
    assert keyword._is_retryable is None
    keyword._is_retryable = _never
    assert keyword.is_retryable is _never
    with pytest.raises(AttributeError):
        del keyword.is_retryable


def test_checker_set_on_the_retry_takes_effect(impl, sleeps):
    if side_without_checker(impl):
        return
    retry = impl.retry.Retry(impl.backoff.ConstantBackoff(0.5), 3)
    calls = []

    def do():
        calls.append(1)
        raise redis.exceptions.ConnectionError("x")

    retry.is_retryable = _never
    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(do, lambda e: None)
    assert len(calls) == 1 and sleeps == []
    retry._is_retryable = None
    with pytest.raises(redis.exceptions.ConnectionError):
        retry.call_with_retry(do, lambda e: None)
    assert len(calls) == 5 and len(sleeps) == 3


CHECKER_VARIANTS = [None, _always, _never, CallableChecker(1), CallableChecker(2)]


def _with_checker(side, checker, retries=3):
    impl = IMPLEMENTATIONS[side]
    own = {} if checker is None else {"is_retryable": checker}
    return impl.retry.Retry(impl.backoff.ExponentialBackoff(), retries, **own)


@pytest.mark.parametrize("left_side", ["redis-py", "c"])
@pytest.mark.parametrize("right_side", ["redis-py", "c"])
def test_checker_in_equality_not_in_hash(left_side, right_side):
    """== compares the checkers with == (after the other fields), hash
    leaves them out (an unhashable checker is fine).  Before redis-py 8.2 a
    redis-py Retry has no checker to compare with: ours sees None in
    it, while its __eq__ ignores ours, as it ignores the extras."""
    if not REDIS_PY_HAS_CHECKER and "redis-py" in (left_side, right_side):
        theirs = _with_checker("redis-py", None)
        ours = _with_checker("c", _never)
        assert (ours == theirs) is False and (theirs == ours) is True
        assert _with_checker("c", None) == theirs and theirs == _with_checker("c", None)
        return
    for a, b in itertools.product(CHECKER_VARIANTS, repeat=2):
        if REDIS_PY_HAS_CHECKER:
            reference = _with_checker("redis-py", a) == _with_checker("redis-py", b)
        else:
            reference = a == b
        left, right = _with_checker(left_side, a), _with_checker(right_side, b)
        assert (left == right) is reference, (a, b)
        assert (right == left) is reference, (a, b)
        assert (left != right) is (not reference), (a, b)
        assert hash(left) == hash((left._backoff, 3, frozenset(DEFAULT_ERRORS)))
    assert _with_checker(left_side, _never) != _with_checker(right_side, _never, retries=4)


def test_checker_equality_keeps_the_value_of_and(impl):
    if side_without_checker(impl):
        return

    class Odd:
        def __call__(self, error):
            return True

        def __eq__(self, other):
            return "yes"

    left = impl.retry.Retry(impl.backoff.NoBackoff(), 1, is_retryable=Odd())
    right = impl.retry.Retry(impl.backoff.NoBackoff(), 1, is_retryable=Odd())
    assert left.__eq__(right) == "yes"
    right._retries = 2
    assert left.__eq__(right) is False  # `and` stops before the checkers


@pytest.mark.parametrize("checker", [_never, CallableChecker(0)], ids=["function", "object"])
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_checker_copies(impl, checker, how):
    if side_without_checker(impl):
        return
    retry = impl.retry.Retry(impl.backoff.ExponentialBackoff(), 2, (KeyError,), checker)
    if how == "pickle":
        twin = pickle.loads(pickle.dumps(retry))
    else:
        twin = getattr(copy, how)(retry)
    assert type(twin) is type(retry)
    assert twin == retry and hash(twin) == hash(retry)
    assert twin._is_retryable == checker
    # A function is copied as itself; a checker object is copied by deepcopy
    # and pickle (as redis-py's instance __dict__ is).
    same = how == "copy" or checker is _never
    assert (twin._is_retryable is checker) is same


def test_deepcopy_of_a_cycle_through_the_checker(impl):
    if side_without_checker(impl):
        return
    owner = CallableChecker(True)
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1, is_retryable=owner)
    owner.retry = retry
    twin = copy.deepcopy(retry)
    assert twin._is_retryable is not owner
    assert twin._is_retryable.retry is twin


def test_garbage_cycle_through_the_checker_is_collected(impl):
    if side_without_checker(impl):
        return

    class Holder:
        def check(self, error):
            return True

    holder = Holder()
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1, is_retryable=holder.check)
    holder.retry = retry
    ref = weakref.ref(retry)
    del retry, holder
    gc.collect()
    assert ref() is None


def _missing_socket_checker(error):
    """Retry nothing that failed because the socket path does not exist."""
    cause = error.__cause__ or error.__context__
    return not isinstance(cause, FileNotFoundError)


def test_client_gives_up_at_once_on_a_checker_no(impl, sleeps, tmp_path):
    """A redis-py client deep-copies the Retry, checker included, into its
    connections and runs its commands through it: the checker's no stops
    the retries (redis-py 8.2's use case, a missing Unix socket)."""
    if side_without_checker(impl):
        return
    path = str(tmp_path / "missing.sock")
    for checker, expected_sleeps in ((_missing_socket_checker, 0), (None, 3)):
        sleeps.clear()
        own = {} if checker is None else {"is_retryable": checker}
        retry = impl.retry.Retry(impl.backoff.ConstantBackoff(0.01), 3, **own)
        client = redis.Redis(unix_socket_path=path, retry=retry)
        try:
            with pytest.raises(redis.exceptions.ConnectionError):
                client.ping()
        finally:
            client.close()
        assert len(sleeps) == expected_sleeps
