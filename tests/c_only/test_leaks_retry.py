"""Every path through the C sync Retry, run thousands of times, leaves no
object, memory or reference behind (C side only; see leakcheck.py)."""

import copy
import pickle
import socket

import pytest
import redis.backoff
import redis.exceptions
from leakcheck import assert_no_leak, calls_raising
from support import REDIS_PY_HAS_CHECKER, UserError

import redis_backoff_c
import redis_backoff_c.backoff as backoff
import redis_backoff_c.retry as retry_module
from redis_backoff_c.retry import Retry


@pytest.fixture(autouse=True)
def _no_sleeping(monkeypatch):
    monkeypatch.setattr(retry_module, "sleep", lambda delay: None)


def failing(times, error=redis.exceptions.ConnectionError):
    """A do() that raises `error` `times` times, then returns "ok"; reset by
    calling .rewind()."""
    state = {"left": times}

    def do():
        if state["left"]:
            state["left"] -= 1
            raise error("down")
        return "ok"

    do.rewind = lambda: state.update(left=times)
    return do


STRATEGIES = {
    "no-backoff": lambda: backoff.NoBackoff(),
    "exponential": lambda: backoff.ExponentialBackoff(),  # sleeps (patched)
    "decorrelated": lambda: backoff.DecorrelatedJitterBackoff(),
    "redis-py": lambda: redis.backoff.ExponentialBackoff(),  # the Python path
    "subclass": lambda: type("Sub", (backoff.EqualJitterBackoff,), {})(),
}


@pytest.fixture(params=sorted(STRATEGIES))
def strategy(request):
    return STRATEGIES[request.param]()


def test_success(strategy):
    retry = Retry(strategy, 3)
    result = object()
    fail = lambda error: None  # noqa: E731
    assert_no_leak(lambda: retry.call_with_retry(lambda: result, fail), watched=[retry, result])


def test_failures_then_success(strategy):
    retry = Retry(strategy, 5)
    do = failing(3)
    errors = []

    def run():
        do.rewind()
        assert retry.call_with_retry(do, errors.append) == "ok"
        errors.clear()

    assert_no_leak(run, watched=[retry, strategy])


def test_failure_count_passed(strategy):
    retry = Retry(strategy, 5)
    do = failing(3)
    counts = []

    def run():
        do.rewind()
        retry.call_with_retry(do, lambda error, count: counts.append(count), None, True)
        counts.clear()

    assert_no_leak(run, watched=[retry])


def test_retries_exhausted(strategy):
    retry = Retry(strategy, 2)
    do = failing(10**9, socket.timeout)

    def run():
        try:
            retry.call_with_retry(do, lambda error: None)
        except TimeoutError:  # socket.timeout is an alias
            return
        raise AssertionError("no error")

    assert_no_leak(run, watched=[retry, strategy])


def test_not_retryable():
    retry = Retry(backoff.NoBackoff(), 3)
    do = failing(10**9)
    predicate = lambda error: False  # noqa: E731
    assert_no_leak(
        calls_raising(
            redis.exceptions.ConnectionError, retry.call_with_retry, do, print, predicate
        ),
        watched=[retry, predicate],
    )


@pytest.mark.parametrize("with_failure_count", [False, True])
def test_rejected_by_the_retrys_checker(with_failure_count):
    checker = lambda error: False  # noqa: E731
    retry = Retry(backoff.NoBackoff(), 3, is_retryable=checker)
    do = failing(10**9)
    counts = []

    def fail(error, *count):
        counts.append(count)

    def run():
        try:
            retry.call_with_retry(do, fail, None, with_failure_count)
        except redis.exceptions.ConnectionError:
            counts.clear()
            return
        raise AssertionError("no error")

    assert_no_leak(run, watched=[retry, checker])


def test_the_retrys_checker_then_the_calls():
    retry = Retry(backoff.NoBackoff(), 3, is_retryable=lambda error: True)
    do = failing(10**9)
    predicate = lambda error: False  # noqa: E731
    assert_no_leak(
        calls_raising(
            redis.exceptions.ConnectionError, retry.call_with_retry, do, print, predicate
        ),
        watched=[retry, predicate],
    )


def test_the_retrys_checker_or_fail_raising():
    def checker(error):
        raise UserError("checker")

    def fail(error):
        raise UserError("fail")

    raising = Retry(backoff.NoBackoff(), 3, is_retryable=checker)
    rejecting = Retry(backoff.NoBackoff(), 3, is_retryable=lambda error: False)
    do = failing(10**9)
    assert_no_leak(calls_raising(UserError, raising.call_with_retry, do, print))
    assert_no_leak(calls_raising(UserError, rejecting.call_with_retry, do, fail))


def test_fail_replacing_the_checker():
    retry = Retry(backoff.NoBackoff(), 3)
    do = failing(10**9)

    def fail(error):
        retry.is_retryable = lambda error: False  # a new one each time

    def run():
        retry.is_retryable = None
        try:
            retry.call_with_retry(do, fail)
        except redis.exceptions.ConnectionError:
            return
        raise AssertionError("no error")

    assert_no_leak(run, watched=[retry])


def test_unsupported_error_passes_through():
    retry = Retry(backoff.NoBackoff(), 3)
    assert_no_leak(
        calls_raising(UserError, retry.call_with_retry, failing(10**9, UserError), print)
    )


def test_callbacks_raising():
    retry = Retry(backoff.NoBackoff(), 3)
    do = failing(10**9)

    def fail(error):
        raise UserError("fail")

    def predicate(error):
        raise UserError("is_retryable")

    assert_no_leak(calls_raising(UserError, retry.call_with_retry, do, fail))
    assert_no_leak(calls_raising(UserError, retry.call_with_retry, do, print, predicate))


def test_compute_raising():
    class Broken(backoff.ExponentialBackoff):
        def compute(self, failures):
            raise UserError("compute")

    retry = Retry(Broken(), 3)
    assert_no_leak(calls_raising(UserError, retry.call_with_retry, failing(10**9), lambda e: None))


def test_sleep_raising(monkeypatch):
    def sleep(delay):
        raise UserError("sleep")

    monkeypatch.setattr(retry_module, "sleep", sleep)
    retry = Retry(backoff.ExponentialBackoff(), 3)
    assert_no_leak(calls_raising(UserError, retry.call_with_retry, failing(10**9), lambda e: None))


def test_call_argument_errors():
    retry = Retry(backoff.NoBackoff(), 3)
    assert_no_leak(calls_raising(TypeError, retry.call_with_retry, 1, print))
    assert_no_leak(calls_raising(TypeError, retry.call_with_retry, print))
    assert_no_leak(calls_raising(TypeError, retry.call_with_retry, print, print, nope=1))


def test_construction_and_errors():
    strategy = backoff.ExponentialBackoff()
    errors = (UserError, KeyError)
    assert_no_leak(lambda: Retry(strategy, 3), watched=[strategy])
    assert_no_leak(lambda: Retry(strategy, -1, errors), watched=[strategy, errors])
    assert_no_leak(lambda: Retry(backoff=strategy, retries=2, supported_errors=errors))
    assert_no_leak(calls_raising(TypeError, Retry, strategy, "3"))
    assert_no_leak(calls_raising(TypeError, Retry, strategy, 3, (1,)))
    assert_no_leak(calls_raising(TypeError, Retry, strategy, 3, 5))
    assert_no_leak(calls_raising(TypeError, Retry, strategy))
    assert_no_leak(calls_raising(TypeError, Retry, strategy, 3, errors, 4))
    assert_no_leak(calls_raising(TypeError, Retry, strategy, 3, errors, None, 4))
    assert_no_leak(lambda: Retry(strategy, 3, errors, print), watched=[strategy, errors])
    assert_no_leak(lambda: Retry(strategy, 3, is_retryable=print, stats=None))


def test_methods_and_attributes():
    retry = Retry(backoff.NoBackoff(), 3)
    strategy = backoff.ConstantBackoff(1)
    errors = [UserError, KeyError]

    def run():
        retry.get_retries()
        retry.update_retries(5)
        retry.update_supported_errors(errors)
        retry._supported_errors = (KeyError,)
        retry._backoff = strategy
        retry._retries = 4
        retry._backoff  # noqa: B018
        retry._supported_errors  # noqa: B018
        retry.is_retryable = checker
        retry._is_retryable = checker
        retry.is_retryable  # noqa: B018
        retry._is_retryable = None

    checker = lambda error: True  # noqa: E731
    assert_no_leak(run, watched=[retry, strategy, checker])
    assert_no_leak(calls_raising(TypeError, setattr, retry, "is_retryable", 5))
    assert_no_leak(calls_raising(TypeError, retry.update_supported_errors, [1]))
    assert_no_leak(calls_raising(TypeError, retry.update_retries, "x"))


def checker(error):
    """A module-level checker: it pickles."""
    return True


class CheckerObject:
    """A checker object: deepcopy copies it."""

    def __call__(self, error):
        return True


@pytest.mark.parametrize(
    "own", [None, checker, CheckerObject()], ids=["none", "function", "object"]
)
def test_copy_pickle_eq_hash_repr(own):
    retry = Retry(backoff.ExponentialBackoff(), 3, is_retryable=own)
    same = Retry(backoff.ExponentialBackoff(), 3, is_retryable=own)
    theirs = redis.retry.Retry(redis.backoff.ExponentialBackoff(), 3)
    if own is not None and REDIS_PY_HAS_CHECKER:
        theirs.is_retryable = own
    data = pickle.dumps(retry)

    def run():
        copy.copy(retry)
        copy.deepcopy(retry)
        pickle.loads(data)
        pickle.dumps(retry)
        assert retry == same
        assert (retry == theirs) is (own is None or REDIS_PY_HAS_CHECKER)
        assert retry != 3
        hash(retry)
        repr(retry)

    assert_no_leak(run, calls=400, watched=[retry, same, theirs])


def test_at_most_once():
    # The judge reads the failure's traceback and marks the error: a may-
    # have-run give-up, a refusal retried, and the policy set and unset.
    stats = redis_backoff_c.RetryStats()
    retry = Retry(backoff.NoBackoff(), 2, writes="at-most-once", stats=stats)
    may_have_run = failing(10**9)
    refused = failing(1, redis.exceptions.BusyLoadingError)

    def run():
        try:
            retry.call_with_retry(may_have_run, lambda error: None)
        except redis.exceptions.ConnectionError as error:
            assert redis_backoff_c.may_have_run(error)
        refused.rewind()
        assert retry.call_with_retry(refused, lambda error: None) == "ok"
        retry.writes = None
        retry.writes = "at-most-once"

    assert_no_leak(run, watched=[retry, stats])
