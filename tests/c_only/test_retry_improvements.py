"""The C Retry's deliberate improvements over redis-py (the C side only).

Bad input is refused where it is given, with a TypeError naming the
parameter, where redis-py would accept it and fail later (or never); and
repr() says what the Retry holds.
"""

import asyncio
import copy
import pickle

import pytest
import redis.exceptions
from support import DEFAULT_ERRORS, LDEXP_RULE, REDIS_PY_HAS_CHECKER

import redis_backoff_c._speedups as speedups
import redis_backoff_c.retry as retry_module


class Index:
    """Not an int, but usable as one."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value

    def __eq__(self, other):
        return self.value == other

    def __hash__(self):
        return hash(self.value)


@pytest.fixture
def Retry(c_impl):
    return c_impl.retry.Retry


@pytest.fixture
def backoff(c_impl):
    return c_impl.backoff.NoBackoff()


@pytest.mark.parametrize("retries", ["3", 3.0, None, [3], b"3"])
def test_retries_must_be_int_like(Retry, backoff, retries):
    with pytest.raises(TypeError, match="'retries'"):
        Retry(backoff, retries)
    with pytest.raises(TypeError, match="'retries'"):
        Retry(backoff=backoff, retries=retries)
    retry = Retry(backoff, 1)
    with pytest.raises(TypeError, match="'value'"):
        retry.update_retries(retries)
    with pytest.raises(TypeError, match="_retries"):
        retry._retries = retries
    assert retry._retries == 1


@pytest.mark.parametrize("retries", [True, False, 0, -5, 2**100, -(2**100), Index(2)])
def test_int_like_retries_are_accepted_and_kept(Retry, backoff, retries, monkeypatch, c_impl):
    retry = Retry(backoff, retries)
    assert retry._retries is retries
    assert retry.get_retries() is retries
    calls = []

    def do():
        calls.append(1)
        if len(calls) > 5:
            return "stop"
        raise redis.exceptions.ConnectionError()

    monkeypatch.setattr(c_impl.retry, "sleep", lambda d: None)
    try:
        retry.call_with_retry(do, lambda e: None)
    except redis.exceptions.ConnectionError:
        pass
    value = int(retries.__index__())
    expected = 6 if value < 0 or value >= 5 else value + 1
    assert len(calls) == expected


@pytest.mark.parametrize(
    "errors",
    [(KeyError, 3), (int,), ("ConnectionError",), (None,), 5, KeyError],
)
def test_supported_errors_must_be_exception_classes(Retry, backoff, errors):
    with pytest.raises(TypeError, match="'supported_errors'"):
        Retry(backoff, 1, errors)
    retry = Retry(backoff, 1)
    with pytest.raises(TypeError, match="'specified_errors'"):
        retry.update_supported_errors(errors if not isinstance(errors, tuple) else list(errors))
    with pytest.raises(TypeError, match="_supported_errors"):
        retry._supported_errors = errors
    assert retry._supported_errors == DEFAULT_ERRORS


def test_supported_errors_any_iterable_becomes_a_tuple(Retry, backoff):
    retry = Retry(backoff, 1, [KeyError, ValueError])
    assert retry._supported_errors == (KeyError, ValueError)
    retry._supported_errors = iter([IndexError])
    assert retry._supported_errors == (IndexError,)
    retry._supported_errors = (BaseException,)  # allowed, as in redis-py's except clause
    assert retry._supported_errors == (BaseException,)


@pytest.mark.parametrize("which", ["do", "fail"])
def test_do_and_fail_must_be_callable(Retry, backoff, which):
    retry = Retry(backoff, 1)
    args = {"do": lambda: 1, "fail": lambda e: None, which: "not callable"}
    with pytest.raises(TypeError, match=f"'{which}'"):
        retry.call_with_retry(**args)


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("checker", [3, "check", b"", object()])
def test_the_retrys_checker_must_be_callable_or_none(c_impl, backoff, flavor, checker):
    """redis-py 8.2 takes anything and fails at the first supported error
    with "'int' object is not callable"; the C Retry says so at once."""
    Retry = c_impl.retry.Retry if flavor == "sync" else c_impl.asyncio_retry.Retry
    with pytest.raises(TypeError, match="'is_retryable' must be callable or None"):
        Retry(backoff, 1, (), checker)
    with pytest.raises(TypeError, match="'is_retryable'"):
        Retry(backoff, 1, is_retryable=checker)
    retry = Retry(backoff, 1, is_retryable=print)
    for name in ("is_retryable", "_is_retryable"):
        with pytest.raises(TypeError, match=f"Retry.{name}"):
            setattr(retry, name, checker)
    assert retry.is_retryable is print
    for callable_ in (print, len, type, lambda e: 1, Index, None):
        retry.is_retryable = callable_
        assert retry._is_retryable is callable_


def test_attributes_cannot_be_deleted(Retry, backoff):
    retry = Retry(backoff, 1)
    for name in ("_backoff", "_retries", "_supported_errors", "_is_retryable", "is_retryable"):
        with pytest.raises(AttributeError):
            delattr(retry, name)


def test_call_with_retry_argument_errors(Retry, backoff):
    retry = Retry(backoff, 1)
    with pytest.raises(TypeError):
        retry.call_with_retry(lambda: 1)
    with pytest.raises(TypeError):
        retry.call_with_retry(lambda: 1, print, None, False, "extra")
    with pytest.raises(TypeError, match="unexpected keyword"):
        retry.call_with_retry(lambda: 1, print, retries=3)
    assert retry.call_with_retry(fail=print, do=lambda: 7, with_failure_count=True) == 7


def test_repr_is_readable(c_impl, Retry):
    retry = Retry(c_impl.backoff.ExponentialBackoff(), 3, (KeyError,))
    assert repr(retry) == (
        "Retry(ExponentialBackoff(cap=0.512, base=0.008), 3, "
        "supported_errors=(<class 'KeyError'>,))"
    )
    retry.is_retryable = len  # shown only when set, after the redis-py parameters
    assert repr(retry) == (
        "Retry(ExponentialBackoff(cap=0.512, base=0.008), 3, "
        "supported_errors=(<class 'KeyError'>,), is_retryable=<built-in function len>)"
    )


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_default_errors_survive_every_pickle_protocol(c_impl, Retry, protocol):
    """redis-py's Retry comes back from protocols 0-2 with OSError instead of
    socket.timeout (pickle's Python 2 name mapping); the default errors are
    not written into the C Retry's pickle, so they come back as they were."""
    retry = Retry(c_impl.backoff.ExponentialBackoff(), 3)
    twin = pickle.loads(pickle.dumps(retry, protocol))
    assert twin == retry
    assert twin._supported_errors == DEFAULT_ERRORS


def test_object_made_by_new_alone_is_sound(Retry):
    retry = Retry.__new__(Retry)
    assert retry.is_retryable is None
    assert retry._backoff is None
    assert retry._retries == 0
    assert retry._supported_errors == DEFAULT_ERRORS
    assert copy.deepcopy(retry) == retry
    with pytest.raises(AttributeError):
        retry.call_with_retry(lambda: 1, print)  # None has no reset(), as in redis-py


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_both_rules_for_the_calls_is_retryable(c_impl, backoff, flavor, monkeypatch):
    """The rule for call_with_retry's is_retryable argument is redis-py's
    installed one (set at import); each is here by the private switch:
    redis-py 8.2's `is not None` calls a checker that is false as a truth
    value, 8.0/8.1's truthiness skips it."""

    class Falsy:
        def __init__(self):
            self.calls = 0

        def __call__(self, error):
            self.calls += 1
            return False

        def __len__(self):
            return 0

    Retry = c_impl.retry.Retry if flavor == "sync" else c_impl.asyncio_retry.Retry
    retry = Retry(backoff, 2)

    def outcome(checker):
        attempts = []

        def do():
            attempts.append(1)
            raise redis.exceptions.ConnectionError()

        async def ado():
            do()

        async def afail(error):
            pass

        with pytest.raises(redis.exceptions.ConnectionError):
            if flavor == "sync":
                retry.call_with_retry(do, lambda e: None, checker)
            else:
                asyncio.run(retry.call_with_retry(ado, afail, checker))
        return len(attempts)

    monkeypatch.setattr(retry_module, "sleep", lambda delay: None)
    try:
        speedups._set_release_rules(LDEXP_RULE, True)
        checker = Falsy()
        assert (outcome(checker), checker.calls) == (1, 1)
        speedups._set_release_rules(LDEXP_RULE, False)
        checker = Falsy()
        assert (outcome(checker), checker.calls) == (3, 0)
    finally:
        speedups._set_release_rules(LDEXP_RULE, REDIS_PY_HAS_CHECKER)
    checker = Falsy()
    assert outcome(checker) == (1 if REDIS_PY_HAS_CHECKER else 3)
