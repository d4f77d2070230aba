"""The sync Retry's shared contract, run on redis-py and on the C type alike.

What both Retry flavors share is tested once over flavor x implementation:
call_with_retry's event sequences in test_call_with_retry.py, the Retry
object (construction, attributes, ==, hash, copies, its checker) in
test_retry_object.py.  Here: what only the sync Retry does (its tracebacks
and handled exceptions, a fail that reenters it, time.sleep, backoff
objects, redis-py's sync clients), on each side (`impl`) and across sides.
"""

import gc
import os
import signal
import sys
import threading
import time
import traceback

import pytest
import redis
import redis.backoff
import redis.exceptions
from scenarios import FailError, RecordingBackoff, RetryableError
from support import IMPLEMENTATIONS, patch_sleep, side_without_checker

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


# ---- sync only: the package export, redis-py clients ----


def test_package_exports_the_sync_retry():
    import redis_backoff_c
    import redis_backoff_c.retry

    assert redis_backoff_c.Retry is redis_backoff_c.retry.Retry
    assert redis_backoff_c.Retry is not redis.retry.Retry  # the C type, here


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
