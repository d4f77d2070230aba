"""The pure-Python twin of the C extras: ``RetryBudget``, ``RetryStats``, and
the sync and asyncio ``Retry`` types with ``deadline=``, ``budget=`` and
``stats=``.

Without the C extension (``REDIS_BACKOFF_C_DISABLE=1``, another interpreter,
an install without a compiler) these are what ``redis_backoff_c.RetryBudget``,
``RetryStats``, ``redis_backoff_c.retry.Retry`` and
``redis_backoff_c.asyncio.retry.Retry`` are, so code written for the package
keeps working where it falls back (as MarkupSafe and multidict ship a Python
twin of their C code).  With the extension the C types are used, and this
module is imported only by the tests, which run the extras' contract over
both: the twin is the executable specification of the C extras
(``csrc/extras.c`` and its units).

What it shares with the C types:

- ``RetryBudget(max_tokens, token_ratio)``: gRFC A6 retry throttling.  The
  bucket starts full; an attempt that fails with a supported error takes one
  token (never below 0); a successful ``call_with_retry`` puts
  ``token_ratio`` back (never above ``max_tokens``); a retry needs more than
  ``max_tokens / 2`` tokens.  Final; pickled by value.
- ``RetryStats()``: the same counters, ``snapshot()`` keys in the same order,
  ``reset()``; pickled by value.
- ``Retry`` (a subclass of ``redis.retry.Retry``) and ``AsyncRetry`` (of
  ``redis.asyncio.retry.Retry``): redis-py's parameters, redis-py 8.2's
  ``is_retryable`` checker whatever redis-py is installed, and the
  keyword-only extras, checked with the same errors and messages.
  ``call_with_retry`` runs redis-py's loop with the extras' hooks at the
  points where the C loop has them (``csrc/retry_core.h`` lists them): the
  deadline on the monotonic clock, fixed when the call starts, never slept
  past, no attempt started after it; budget and stats read when each hook
  runs.  ``==`` includes the extras (the deadline by value, budget and stats
  by identity); ``hash`` keeps redis-py's formula; ``repr`` shows the extras
  set; ``copy.copy`` and ``copy.deepcopy`` share the budget and the stats;
  pickle carries them by value.

Budget and stats take a lock for every change, so they are safe under
threads on any interpreter.  The sync ``Retry`` sleeps through
``redis_backoff_c.retry.sleep`` and the asyncio one awaits
``redis_backoff_c.asyncio.retry.sleep``, looked up at each sleep, as the C
types do.

Differences that remain, by design of a Python subclass: the twin's
parameters other than the extras are redis-py's (no early type checks of
``retries`` or ``supported_errors``, which are stored as given), and since
the twin is a real subclass of redis-py's ``Retry``, ``redis_py_retry ==
twin_with_extras`` asks the twin first (Python tries a subclass's reflected
``__eq__`` first) and is false, where for the C types it is true.

The package mirrors the C units, module for unit: ``args`` (csrc/args.c's
checks), ``budget``, ``stats``, ``deadline``, ``writes``, ``hooks``, and
this ``__init__``, the twin of csrc/extras.c, which ties them to the two
Retry types.
"""

from __future__ import annotations

import copy
import importlib
import socket
import sys
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, NoReturn, TypeVar

import redis.asyncio.retry
import redis.exceptions
import redis.retry
from redis.backoff import AbstractBackoff

from redis_backoff_c import _call_deadline
from redis_backoff_c._extras_py.args import _bind, _check_callable, _positive
from redis_backoff_c._extras_py.budget import RetryBudget
from redis_backoff_c._extras_py.deadline import _DeadlineSteps
from redis_backoff_c._extras_py.hooks import RetryEvent, _check_hook, _hook_property, _HooksSteps
from redis_backoff_c._extras_py.stats import STAT_NAMES as STAT_NAMES, RetryStats
from redis_backoff_c._extras_py.writes import _checked_writes
from redis_backoff_c._rules import RETRY_CHECKER
from redis_backoff_c.writes import AT_LEAST_ONCE, _judge as _writes_judge

__all__ = ["AsyncRetry", "Retry", "RetryBudget", "RetryEvent", "RetryStats"]

_T = TypeVar("_T")

# How call_with_retry tests its is_retryable argument: redis_backoff_c._rules.
_CHECKER_NOT_NONE: Final = RETRY_CHECKER


# --- The Retry types --------------------------------------------------------

_EXTRAS: Final = ("deadline", "budget", "stats", "writes", "on_retry", "on_give_up")
_INIT_NAMES: Final = ("backoff", "retries", "supported_errors", "is_retryable", *_EXTRAS)
# The extras a copy shares with its original rather than deep-copies.
_SHARED: Final = ("budget", "stats", "on_retry", "on_give_up")


def _check_shared(owner: str, name: str, value: object, kind: type) -> None:
    """budget or stats: None, or exactly ``kind`` (the types are final)."""
    if value is not None and type(value) is not kind:
        raise TypeError(
            f"{owner}() argument '{name}' must be a {kind.__name__} or None, "
            f"not {type(value).__name__}"
        )


class _Extras(_DeadlineSteps, _HooksSteps):
    """What both twin Retry types add to redis-py's: the extras' attributes
    and checks, ``==``, ``repr``, ``deepcopy``, and the hooks of
    ``call_with_retry`` (the points of ``csrc/retry_core.h``).

    The extras live in the instance ``__dict__`` under their own names, and
    only while set: a plain Retry's ``__dict__`` (its pickle state) is
    redis-py's.  The properties below, data descriptors, take precedence."""

    _backoff: AbstractBackoff
    _retries: int
    _supported_errors: tuple[type[Exception], ...]
    _is_retryable: Callable[[Exception], bool] | None
    _DEFAULT_ERRORS: ClassVar[tuple[type[Exception], ...]]
    _FAMILY: ClassVar[type]

    def _init(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        owner = "Retry"  # as the C types name themselves, subclasses too
        backoff, retries, errors, checker, deadline, budget, stats, writes, on_retry, on_give_up = (
            _bind(
                owner,
                _INIT_NAMES,
                4,
                args,
                kwargs,
                {
                    "supported_errors": self._DEFAULT_ERRORS,
                    "is_retryable": None,
                    "deadline": None,
                    "budget": None,
                    "stats": None,
                    "writes": None,
                    "on_retry": None,
                    "on_give_up": None,
                },
            )
        )
        if deadline is not None:
            _positive(owner, "deadline", deadline, True)
            if not _call_deadline.seen:
                _call_deadline.saw_deadline()
        _check_shared(owner, "budget", budget, RetryBudget)
        _check_shared(owner, "stats", stats, RetryStats)
        writes = _checked_writes(owner, "writes", writes)
        _check_hook(owner, "on_retry", on_retry)
        _check_hook(owner, "on_give_up", on_give_up)
        # redis-py's own __init__ for its parameters; the checker is 8.2's,
        # set here whatever redis-py is installed (8.0/8.1 take none).
        family: Any = self._FAMILY
        family.__init__(self, backoff, retries, errors)
        self._is_retryable = checker
        # __init__ again on an object: the extras are the ones given now.
        state = vars(self)
        given = (deadline, budget, stats, writes, on_retry, on_give_up)
        for name, value in zip(_EXTRAS, given):
            if value is None:
                state.pop(name, None)
            else:
                state[name] = value

    # -- the attributes

    @property
    def is_retryable(self) -> Callable[[Exception], bool] | None:
        """The Retry's own checker (redis-py 8.2's), applied with supported_errors."""
        return self._is_retryable

    @is_retryable.setter
    def is_retryable(self, value: Callable[[Exception], bool] | None) -> None:
        self._is_retryable = value

    def _get(self, name: str) -> Any:
        return vars(self).get(name)

    def _store(self, name: str, value: object) -> None:
        if value is None:
            vars(self).pop(name, None)
        else:
            vars(self)[name] = value

    @property
    def deadline(self) -> float | None:
        """Seconds one call_with_retry may take (monotonic clock), or None."""
        return self._get("deadline")  # type: ignore[no-any-return]

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        if value is not None:
            _positive("Retry.deadline", "value", value, True)
        self._store("deadline", value)
        if value is not None and not _call_deadline.seen:
            _call_deadline.saw_deadline()

    @deadline.deleter
    def deadline(self) -> NoReturn:
        raise AttributeError("cannot delete attribute 'deadline'")

    @property
    def budget(self) -> RetryBudget | None:
        """The RetryBudget shared by the copies of this Retry, or None."""
        return self._get("budget")  # type: ignore[no-any-return]

    @budget.setter
    def budget(self, value: RetryBudget | None) -> None:
        _check_shared("Retry.budget", "value", value, RetryBudget)
        self._store("budget", value)

    @budget.deleter
    def budget(self) -> NoReturn:
        raise AttributeError("cannot delete attribute 'budget'")

    @property
    def stats(self) -> RetryStats | None:
        """The RetryStats shared by the copies of this Retry, or None."""
        return self._get("stats")  # type: ignore[no-any-return]

    @stats.setter
    def stats(self, value: RetryStats | None) -> None:
        _check_shared("Retry.stats", "value", value, RetryStats)
        self._store("stats", value)

    @stats.deleter
    def stats(self) -> NoReturn:
        raise AttributeError("cannot delete attribute 'stats'")

    @property
    def writes(self) -> str:
        """'at-least-once' (redis-py's: every supported error is retried) or
        'at-most-once' (a failed attempt that may have run is not retried)."""
        policy: str | None = self._get("writes")
        return policy or AT_LEAST_ONCE

    @writes.setter
    def writes(self, value: str | None) -> None:
        self._store("writes", _checked_writes("Retry.writes", "value", value))

    @writes.deleter
    def writes(self) -> NoReturn:
        raise AttributeError("cannot delete attribute 'writes'")

    on_retry = _hook_property(
        "on_retry", "Called with a RetryEvent before each retry (redis_backoff_c.hooks)."
    )
    on_give_up = _hook_property(
        "on_give_up", "Called with a RetryEvent when a call gives up (redis_backoff_c.hooks)."
    )

    def _has_extras(self) -> bool:
        state = vars(self)
        return any(name in state for name in _EXTRAS)

    # -- ==, hash, repr, deepcopy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._FAMILY):
            return NotImplemented
        theirs: Any = other
        result = (
            self._backoff == theirs._backoff
            and self._retries == theirs._retries
            and set(self._supported_errors) == set(theirs._supported_errors)
            and self._is_retryable == getattr(theirs, "_is_retryable", None)
        )
        mine = isinstance(other, _Extras)
        if result and (self._has_extras() or (mine and theirs._has_extras())):
            # The extras too, when either side has some (redis-py's Retry
            # and the C one have none here): the deadline by value, the
            # others by identity.
            other_extras = theirs if mine else None

            def extra(retry: _Extras | None, name: str) -> Any:
                return None if retry is None else retry._get(name)

            if extra(self, "writes") != extra(other_extras, "writes"):
                return False
            for name in _SHARED:
                if extra(self, name) is not extra(other_extras, name):
                    return False
            a, b = extra(self, "deadline"), extra(other_extras, "deadline")
            if a is None or b is None:
                return a is b
            return bool(a == b)
        return result

    def __hash__(self) -> int:
        return hash((self._backoff, self._retries, frozenset(self._supported_errors)))

    def __repr__(self) -> str:
        text = (
            f"{type(self).__name__}({self._backoff!r}, {self._retries!r}, "
            f"supported_errors={self._supported_errors!r}"
        )
        if self._is_retryable is not None:
            text += f", is_retryable={self._is_retryable!r}"
        for name in _EXTRAS:
            value = self._get(name)
            if value is not None:
                text += f", {name}={value!r}"
        return text + ")"

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # A deep copy of everything but the budget, the stats and the hooks,
        # which the copy shares: redis-py deep-copies a client's Retry into
        # each connection, and a client has one budget, one set of counters
        # and one logger.
        cls = type(self)
        twin = cls.__new__(cls)
        memo[id(self)] = twin
        state = vars(twin)
        for key, value in vars(self).items():
            state[key] = value if key in _SHARED else copy.deepcopy(value, memo)
        return twin

    # -- the hooks of call_with_retry (csrc/extras.h)

    # Each hook takes `counted`, fixed when the call starts: whether the
    # Retry had extras then.  A call that started without them is plain to
    # its end, whatever is set during it (csrc/extras.h's rbc_call_extras).

    def _extras(self, counted: bool) -> Mapping[str, Any]:
        """Where the call's hooks find the extras: the Retry's now, or none."""
        return vars(self) if counted else _NO_EXTRAS

    def _succeeded(self, counted: bool) -> None:
        state = self._extras(counted)
        stats: RetryStats | None = state.get("stats")
        if stats is not None:
            stats._count(RetryStats.ATTEMPTS, RetryStats.SUCCESSES)
        budget: RetryBudget | None = state.get("budget")
        if budget is not None:
            budget._give()

    def _catches(self, counted: bool, error: BaseException) -> bool:
        """Does ``except self._supported_errors`` catch ``error``?  Counts
        the attempt (failed, taking a token, or passed through)."""
        caught = isinstance(error, self._supported_errors)
        state = self._extras(counted)
        stats: RetryStats | None = state.get("stats")
        if stats is not None:
            stats._count(
                RetryStats.ATTEMPTS,
                RetryStats.FAILED_ATTEMPTS if caught else RetryStats.UNHANDLED,
            )
        budget: RetryBudget | None = state.get("budget")
        if caught and budget is not None:
            budget._take()
        return caught

    def _gave_up_not_retryable(self, counted: bool) -> None:
        stats: RetryStats | None = self._extras(counted).get("stats")
        if stats is not None:
            stats._count(RetryStats.GIVE_UPS_NOT_RETRYABLE)

    def _own_checker_allows(self, error: Exception) -> bool:
        checker = self._is_retryable
        return checker is None or bool(checker(error))

    def _call_checker_allows(
        self, counted: bool, is_retryable: Callable[[Exception], bool] | None, error: Exception
    ) -> bool:
        """The call's is_retryable, tested as the installed redis-py tests it."""
        present = is_retryable is not None if _CHECKER_NOT_NONE else bool(is_retryable)
        if present and not is_retryable(error):  # type: ignore[misc]
            self._gave_up_not_retryable(counted)
            return False
        return True

    def _may_have_run(self, counted: bool, error: BaseException) -> bool:
        """After fail(): under writes="at-most-once", True when the failed
        attempt may have run on the server (the error is marked; the give-up
        counted), so that it is raised instead of retried."""
        if self._extras(counted).get("writes") is None:
            return False
        if not _writes_judge(error):
            return False
        # The judge ran Python code: read the stats again.
        stats: RetryStats | None = self._extras(counted).get("stats")
        if stats is not None:
            stats._count(RetryStats.GIVE_UPS_MAY_HAVE_RUN)
        return True

    def _refuse_retry(self, counted: bool, failures: int) -> str | None:
        """After fail(): why the error must be raised now ("exhausted", or
        "budget" when it is at or below half), counted; None to go on."""
        exhausted = self._retries >= 0 and failures > self._retries
        state = self._extras(counted)
        stats: RetryStats | None = state.get("stats")
        if exhausted:
            if stats is not None:
                stats._count(RetryStats.GIVE_UPS_EXHAUSTED)
            return "exhausted"
        budget: RetryBudget | None = state.get("budget")
        if budget is not None and not budget.tokens > budget._threshold:
            if stats is not None:
                stats._count(RetryStats.GIVE_UPS_BUDGET)
            return "budget"
        return None

    def _after_fail(self, counted: bool, failures: int, error: BaseException) -> str | None:
        """After fail(), the give-ups in the loop's order: the writes
        policy, the retries limit, the budget.  Why, or None to go on."""
        if self._may_have_run(counted, error):
            return "may_have_run"
        return self._refuse_retry(counted, failures)

    def _aborted(self, counted: bool) -> None:
        """The call ended with an exception from fail(), a checker,
        compute() or the sleep, or thrown in while they were awaited."""
        stats: RetryStats | None = self._extras(counted).get("stats")
        if stats is not None:
            stats._count(RetryStats.ABORTED)


#: The extras of a call that started without any (see _Extras._extras).
_NO_EXTRAS: Mapping[str, Any] = types.MappingProxyType({})


def _module(name: str) -> Any:
    module = sys.modules.get(name)
    return module if module is not None else importlib.import_module(name)


def _sync_sleep(delay: Any) -> None:
    """``redis_backoff_c.retry.sleep(delay)``, looked up now."""
    _module("redis_backoff_c.retry").sleep(delay)


def _async_sleep(delay: Any) -> Awaitable[Any]:
    """``redis_backoff_c.asyncio.retry.sleep(delay)``, looked up now."""
    return _module("redis_backoff_c.asyncio.retry").sleep(delay)  # type: ignore[no-any-return]


class Retry(_Extras, redis.retry.Retry):
    """Retry(backoff, retries, supported_errors=..., is_retryable=None, *,
          deadline=None, budget=None, stats=None, writes='at-least-once',
          on_retry=None, on_give_up=None)

    redis-py's Retry with the opt-in extras: ``deadline`` bounds one call
    (seconds), ``budget`` (RetryBudget) throttles retries, ``stats``
    (RetryStats) counts, ``writes="at-most-once"`` retries no attempt that
    may have run on the server, ``on_retry`` and ``on_give_up`` are called
    with a RetryEvent (redis_backoff_c.hooks).  The pure-Python twin of the
    C type."""

    _DEFAULT_ERRORS = (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        socket.timeout,
    )
    _FAMILY = redis.retry.Retry
    __hash__ = _Extras.__hash__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._init(args, kwargs)

    def call_with_retry(
        self,
        do: Callable[[], _T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> _T:
        """Return do(); on an error in _supported_errors, call fail(error) (or
        fail(error, failures)), sleep _backoff.compute(failures) seconds through
        redis_backoff_c.retry.sleep and call do() again, up to _retries times
        (forever when < 0); then raise the error.  The deadline, the budget
        and the stats decide and count as in the C Retry."""
        _check_callable(do, "do")
        _check_callable(fail, "fail")
        backoff: Any = self._backoff
        backoff.reset()
        counted, deadline_at = self._begin()
        failures = 0
        while True:
            try:
                result = do()
            except BaseException as error:
                if not self._catches(counted, error):
                    raise
                # `reason`: the call gives up (its outcome counted) and the
                # error is re-raised; any exception from here aborts it.
                reason: str | None = "not_retryable"
                try:
                    if not self._own_checker_allows(error):  # type: ignore[arg-type]
                        if with_failure_count:
                            fail(error, failures + 1)
                        else:
                            fail(error)
                        self._gave_up_not_retryable(counted)
                    elif self._call_checker_allows(counted, is_retryable, error):  # type: ignore[arg-type]
                        failures += 1
                        if with_failure_count:
                            fail(error, failures)
                        else:
                            fail(error)
                        reason = self._after_fail(counted, failures, error)
                        if reason is None:
                            delay = self._backoff.compute(failures)
                            if delay > 0 and not self._before_sleep(counted, deadline_at, delay):
                                reason = "deadline"
                            else:
                                self._retrying(counted, error, failures, delay)
                                if delay > 0:
                                    started = self._sleep_started(counted)
                                    try:
                                        _sync_sleep(delay)
                                    finally:
                                        self._sleep_ended(counted, started)
                                if not self._before_retry(counted, deadline_at):
                                    reason = "deadline"
                except BaseException:
                    self._aborted(counted)
                    raise
                if reason is not None:
                    # A not_retryable error was never counted in failures.
                    attempt = failures + 1 if reason == "not_retryable" else failures
                    self._gave_up(counted, reason, error, attempt)
                    raise
            else:
                self._succeeded(counted)
                return result


class AsyncRetry(_Extras, redis.asyncio.retry.Retry):
    """Retry(backoff, retries, supported_errors=..., is_retryable=None, *,
          deadline=None, budget=None, stats=None, writes='at-least-once',
          on_retry=None, on_give_up=None)

    redis-py's asyncio Retry with the opt-in extras (see the sync Retry).
    The pure-Python twin of the C type."""

    _DEFAULT_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
    _FAMILY = redis.asyncio.retry.Retry
    __hash__ = _Extras.__hash__

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._init(args, kwargs)

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[_T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> _T:
        """Await do(); on an error in _supported_errors, await fail(error) (or
        fail(error, failures)), await redis_backoff_c.asyncio.retry.sleep(
        _backoff.compute(failures)) and await do() again, up to _retries
        times (forever when < 0); then raise the error.  The deadline, the
        budget and the stats decide and count as in the C Retry."""
        _check_callable(do, "do")
        _check_callable(fail, "fail")
        backoff: Any = self._backoff
        backoff.reset()
        counted, deadline_at = self._begin()
        failures = 0
        while True:
            try:
                result = await do()
            except BaseException as error:
                if not self._catches(counted, error):
                    raise
                # As in the sync Retry: a `reason` re-raises the error, any
                # exception from here aborts the call.
                reason: str | None = "not_retryable"
                try:
                    if not self._own_checker_allows(error):  # type: ignore[arg-type]
                        if with_failure_count:
                            await fail(error, failures + 1)
                        else:
                            await fail(error)
                        self._gave_up_not_retryable(counted)
                    elif self._call_checker_allows(counted, is_retryable, error):  # type: ignore[arg-type]
                        failures += 1
                        if with_failure_count:
                            await fail(error, failures)
                        else:
                            await fail(error)
                        reason = self._after_fail(counted, failures, error)
                        if reason is None:
                            delay = self._backoff.compute(failures)
                            if delay > 0 and not self._before_sleep(counted, deadline_at, delay):
                                reason = "deadline"
                            else:
                                self._retrying(counted, error, failures, delay)
                                if delay > 0:
                                    started = self._sleep_started(counted)
                                    try:
                                        await _async_sleep(delay)
                                    finally:
                                        self._sleep_ended(counted, started)
                                if not self._before_retry(counted, deadline_at):
                                    reason = "deadline"
                except BaseException:
                    self._aborted(counted)
                    raise
                if reason is not None:
                    # A not_retryable error was never counted in failures.
                    attempt = failures + 1 if reason == "not_retryable" else failures
                    self._gave_up(counted, reason, error, attempt)
                    raise
            else:
                self._succeeded(counted)
                return result


# The asyncio Retry is named "Retry" as the C one is (in repr and messages);
# its __qualname__ stays, for pickle to find it here.  Without the extension
# redis_backoff_c._impl gives the four their public module and names.
AsyncRetry.__name__ = "Retry"
AsyncRetry.call_with_retry.__qualname__ = "Retry.call_with_retry"
