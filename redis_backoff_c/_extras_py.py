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
both: the twin is the executable specification of ``csrc/extras.c``.

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
"""

from __future__ import annotations

import copy
import importlib
import socket
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Final, NoReturn, TypeVar, final

import redis.asyncio.retry
import redis.exceptions
import redis.retry
from redis.backoff import AbstractBackoff

from redis_backoff_c import hooks as _hooks
from redis_backoff_c._rules import RETRY_CHECKER
from redis_backoff_c.writes import AT_LEAST_ONCE, AT_MOST_ONCE, _judge as _writes_judge

__all__ = ["AsyncRetry", "Retry", "RetryBudget", "RetryEvent", "RetryStats"]

RetryEvent = _hooks.RetryEvent

_T = TypeVar("_T")

#: The counters of RetryStats, in snapshot() order (then slept_seconds).
STAT_NAMES: Final = (
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
)

# How call_with_retry tests its is_retryable argument: redis_backoff_c._rules.
_CHECKER_NOT_NONE: Final = RETRY_CHECKER


# --- Arguments, checked as csrc/args.c checks them ------------------------


def _bind(
    owner: str,
    names: tuple[str, ...],
    positional: int,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> list[Any]:
    """The values of ``names`` from a call, with the C binder's messages."""
    if len(args) > positional:
        plural = "" if positional == 1 else "s"
        raise TypeError(
            f"{owner}() takes at most {positional} positional argument{plural} ({len(args)} given)"
        )
    values: dict[str, Any] = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{owner}() got an unexpected keyword argument '{key}'")
        if key in values:
            raise TypeError(f"{owner}() got multiple values for argument '{key}'")
        values[key] = value
    for index, name in enumerate(names):
        if name not in values:
            if name not in defaults:
                raise TypeError(f"{owner}() missing required argument '{name}' (pos {index + 1})")
            values[name] = defaults[name]
    return [values[name] for name in names]


def _is_real(value: object) -> bool:
    kind = type(value)
    return (
        isinstance(value, (int, float)) or hasattr(kind, "__float__") or hasattr(kind, "__index__")
    )


def _real(owner: str, name: str, value: object) -> float:
    if not _is_real(value):
        raise TypeError(
            f"{owner}() argument '{name}' must be a real number, not {type(value).__name__}"
        )
    return float(value)  # type: ignore[arg-type]


def _positive(owner: str, name: str, value: object, allow_infinite: bool) -> float:
    number = _real(owner, name, value)
    if not number > 0.0 or (not allow_infinite and number == float("inf")):
        finite = "" if allow_infinite else "finite "
        raise ValueError(
            f"{owner}() argument '{name}' must be a {finite}positive number, not {value!r}"
        )
    return number


# --- RetryBudget ------------------------------------------------------------


@final
class RetryBudget:
    """RetryBudget(max_tokens, token_ratio)

    Retry throttling as gRPC's (gRFC A6), shared by every Retry that holds
    it: the bucket starts with max_tokens tokens; each attempt that fails
    with a supported error takes one (never below 0); each call_with_retry
    that succeeds puts token_ratio back (never above max_tokens). A retry
    is allowed only while more than max_tokens / 2 tokens are left; a
    call's first attempt is never refused."""

    __slots__ = ("_lock", "_max_tokens", "_token_ratio", "_max", "_ratio", "_tokens", "_threshold")

    _lock: threading.Lock
    _max_tokens: float
    _token_ratio: float
    _max: float
    _ratio: float
    _tokens: float
    _threshold: float

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        # As the C type: final, so that a subclass cannot change its rules.
        raise TypeError("type 'RetryBudget' is not an acceptable base type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        max_tokens, token_ratio = _bind(
            "RetryBudget", ("max_tokens", "token_ratio"), 2, args, kwargs, {}
        )
        maximum = _positive("RetryBudget", "max_tokens", max_tokens, False)
        ratio = _positive("RetryBudget", "token_ratio", token_ratio, False)
        self._lock = threading.Lock()
        self._max_tokens = max_tokens
        self._token_ratio = token_ratio
        self._max = maximum
        self._ratio = ratio
        self._tokens = maximum  # gRFC A6: the bucket starts full
        self._threshold = maximum / 2.0

    @property
    def max_tokens(self) -> float:
        """the size of the bucket (read-only)"""
        return self._max_tokens

    @property
    def token_ratio(self) -> float:
        """tokens a successful call_with_retry puts back (read-only)"""
        return self._token_ratio

    @property
    def tokens(self) -> float:
        """the tokens in the bucket now, in [0, max_tokens]"""
        with self._lock:
            return self._tokens

    @property
    def retry_allowed(self) -> bool:
        """whether a retry would be allowed now: tokens > max_tokens / 2"""
        return self.tokens > self._threshold

    def _take(self) -> None:
        """A failed attempt: one token less, never below 0."""
        with self._lock:
            self._tokens = max(self._tokens - 1.0, 0.0)

    def _give(self) -> None:
        """A successful call: token_ratio back, never above max_tokens."""
        with self._lock:
            self._tokens = min(self._tokens + self._ratio, self._max)

    def __repr__(self) -> str:
        return (
            f"RetryBudget(max_tokens={self._max_tokens!r}, "
            f"token_ratio={self._token_ratio!r}, tokens={self.tokens!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by value: (RetryBudget, (max_tokens, token_ratio), tokens).
        return (type(self), (self._max_tokens, self._token_ratio), self.tokens)

    def __setstate__(self, state: float) -> None:
        tokens = _real("RetryBudget.__setstate__", "state", state)
        if not 0.0 <= tokens <= self._max:
            raise ValueError(
                "RetryBudget.__setstate__() argument 'state' must be a token count "
                f"in [0, max_tokens], not {state!r}"
            )
        with self._lock:
            self._tokens = tokens


# --- RetryStats -------------------------------------------------------------


class _Counter:
    """A read-only counter attribute of RetryStats."""

    def __init__(self, index: int, doc: str) -> None:
        self.index = index
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: RetryStats | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        with instance._lock:
            return instance._counts[self.index]

    def __set__(self, instance: RetryStats, value: object) -> NoReturn:
        raise AttributeError(f"attribute '{self.name}' of 'RetryStats' objects is not writable")


@final
class RetryStats:
    """RetryStats()

    Counters of call_with_retry, shared by every Retry that holds them:
    calls, attempts, successes, failed attempts, retries, give-ups by
    reason, errors passed through, and seconds of backoff slept."""

    __slots__ = ("_lock", "_counts", "_slept")

    _lock: threading.Lock
    _counts: list[int]
    _slept: float

    calls = _Counter(0, "call_with_retry calls started")
    attempts = _Counter(1, "do() attempts that ended (returned or raised)")
    successes = _Counter(2, "calls whose do() returned")
    failed_attempts = _Counter(3, "attempts that raised a supported error")
    retries = _Counter(4, "attempts after a call's first")
    give_ups_exhausted = _Counter(5, "calls that raised: retries exhausted")
    give_ups_not_retryable = _Counter(6, "calls that raised: is_retryable(error) was false")
    give_ups_deadline = _Counter(7, "calls that raised: the deadline")
    give_ups_budget = _Counter(8, "calls that raised: the budget refused")
    give_ups_may_have_run = _Counter(
        9, 'calls that raised: writes="at-most-once" and the attempt may have run'
    )
    unhandled_errors = _Counter(
        10, "errors of do() passed through unhandled (not supported errors)"
    )
    aborted = _Counter(
        11,
        "calls ended by an exception from fail(), a checker, compute() or the sleep, "
        "or cancelled or closed while fail() or the sleep was awaited",
    )

    # The indexes above, by name, for the hooks.
    CALLS: ClassVar[int] = 0
    ATTEMPTS: ClassVar[int] = 1
    SUCCESSES: ClassVar[int] = 2
    FAILED_ATTEMPTS: ClassVar[int] = 3
    RETRIES: ClassVar[int] = 4
    GIVE_UPS_EXHAUSTED: ClassVar[int] = 5
    GIVE_UPS_NOT_RETRYABLE: ClassVar[int] = 6
    GIVE_UPS_DEADLINE: ClassVar[int] = 7
    GIVE_UPS_BUDGET: ClassVar[int] = 8
    GIVE_UPS_MAY_HAVE_RUN: ClassVar[int] = 9
    UNHANDLED: ClassVar[int] = 10
    ABORTED: ClassVar[int] = 11

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("type 'RetryStats' is not an acceptable base type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError("RetryStats() takes no arguments")
        self._lock = threading.Lock()
        self._counts = [0] * len(STAT_NAMES)
        self._slept = 0.0

    @property
    def slept_seconds(self) -> float:
        """seconds of backoff slept (the delays computed)"""
        with self._lock:
            return self._slept

    def _count(self, *indexes: int) -> None:
        with self._lock:
            for index in indexes:
                self._counts[index] += 1

    def _add_slept(self, seconds: float) -> None:
        with self._lock:
            self._slept += seconds

    def snapshot(self) -> dict[str, Any]:
        """The counters now, as a dict (one consistent reading)."""
        with self._lock:
            counts, slept = list(self._counts), self._slept
        result: dict[str, Any] = dict(zip(STAT_NAMES, counts))
        result["slept_seconds"] = float(slept)
        return result

    def reset(self) -> None:
        """Set every counter to 0."""
        with self._lock:
            self._counts = [0] * len(STAT_NAMES)
            self._slept = 0.0

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in self.snapshot().items())
        return f"RetryStats({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled by value: (RetryStats, (), snapshot()).
        return (type(self), (), self.snapshot())

    def __setstate__(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise TypeError(
                f"RetryStats.__setstate__() argument must be a dict, not {type(state).__name__}"
            )
        counts = []
        for name in STAT_NAMES:
            value = state.get(name, 0)
            if not isinstance(value, int):
                raise TypeError(
                    f"RetryStats state '{name}' must be an int, not {type(value).__name__}"
                )
            if not 0 <= value < 2**64:
                raise OverflowError(f"RetryStats state '{name}' out of range: {value!r}")
            counts.append(value)
        slept = state.get("slept_seconds")
        seconds = 0.0 if slept is None else _real("RetryStats.__setstate__", "slept_seconds", slept)
        with self._lock:
            self._counts = counts
            self._slept = seconds


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


def _checked_writes(owner: str, name: str, value: object) -> str | None:
    """The writes policy as stored: None for redis-py's "at-least-once" (or
    None), "at-most-once" for that; TypeError or ValueError otherwise."""
    if value is None:
        return None
    if type(value) is not str:
        raise TypeError(
            f"{owner}() argument '{name}' must be a str or None, not {type(value).__name__}"
        )
    if value == AT_MOST_ONCE:
        return AT_MOST_ONCE
    if value == AT_LEAST_ONCE:
        return None
    raise ValueError(
        f"{owner}() argument '{name}' must be 'at-least-once' or 'at-most-once', not {value!r}"
    )


def _check_hook(owner: str, name: str, value: Any) -> None:
    """on_retry or on_give_up: None, or a callable."""
    if value is not None and not callable(value):
        raise TypeError(
            f"{owner}() argument '{name}' must be callable or None, not {type(value).__name__}"
        )


def _hook_property(name: str, doc: str) -> Any:
    """The attribute on_retry or on_give_up (`name`) of the twin Retry: None
    or a callable, stored in the instance __dict__ while set; not deleted."""

    def get(self: _Extras) -> Callable[[RetryEvent], object] | None:
        return self._get(name)  # type: ignore[no-any-return]

    def set_(self: _Extras, value: Callable[[RetryEvent], object] | None) -> None:
        _check_hook(f"Retry.{name}", "value", value)
        self._store(name, value)

    def delete(self: _Extras) -> NoReturn:
        raise AttributeError(f"cannot delete attribute '{name}'")

    return property(get, set_, delete, doc)


def _check_callable(obj: Any, name: str) -> None:
    if not callable(obj):
        raise TypeError(
            f"call_with_retry() argument '{name}' must be callable, not {type(obj).__name__}"
        )


class _Extras:
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

    def _begin(self) -> tuple[bool, float | None]:
        """Once, after reset(): counts the call; whether it is counted, and
        its deadline (when it must end, monotonic seconds) or None."""
        state = vars(self)
        stats: RetryStats | None = state.get("stats")
        if stats is not None:
            stats._count(RetryStats.CALLS)
        deadline = state.get("deadline")
        deadline_at = None if deadline is None else time.monotonic() + float(deadline)
        return self._has_extras(), deadline_at

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

    def _retrying(self, counted: bool, error: BaseException, attempt: int, delay: Any) -> None:
        """on_retry(event), just before the backoff sleep (redis_backoff_c.hooks)."""
        hook = self._extras(counted).get("on_retry")
        if hook is not None:
            _hooks._call(hook, RetryEvent(attempt, error, delay, None))

    def _gave_up(self, counted: bool, reason: str, error: BaseException, attempt: int) -> None:
        """on_give_up(event), just before the error is raised."""
        hook = self._extras(counted).get("on_give_up")
        if hook is not None:
            _hooks._call(hook, RetryEvent(attempt, error, None, reason))

    def _before_sleep(self, counted: bool, deadline_at: float | None, delay: Any) -> bool:
        """Before sleeping ``delay`` (> 0): False to give up, because the
        sleep would reach the call's deadline."""
        state = self._extras(counted)
        if deadline_at is None and state.get("stats") is None:
            return True
        seconds = float(delay)
        # The delay's __float__ may have changed the extras: read them again.
        stats: RetryStats | None = self._extras(counted).get("stats")
        if deadline_at is not None and time.monotonic() + seconds >= deadline_at:
            if stats is not None:
                stats._count(RetryStats.GIVE_UPS_DEADLINE)
            return False
        return True

    def _sleep_started(self, counted: bool) -> float | None:
        """The clock when a backoff sleep starts, when there are stats."""
        return time.monotonic() if self._extras(counted).get("stats") is not None else None

    def _sleep_ended(self, counted: bool, started: float | None) -> None:
        """slept_seconds adds the time the sleep actually took."""
        stats: RetryStats | None = self._extras(counted).get("stats")
        if started is not None and stats is not None:
            stats._add_slept(max(0.0, time.monotonic() - started))

    def _aborted(self, counted: bool) -> None:
        """The call ended with an exception from fail(), a checker,
        compute() or the sleep, or thrown in while they were awaited."""
        stats: RetryStats | None = self._extras(counted).get("stats")
        if stats is not None:
            stats._count(RetryStats.ABORTED)

    def _before_retry(self, counted: bool, deadline_at: float | None) -> bool:
        """Before each attempt after the first: False to give up, because
        the deadline has passed; else the retry is counted."""
        stats: RetryStats | None = self._extras(counted).get("stats")
        if deadline_at is not None and time.monotonic() >= deadline_at:
            if stats is not None:
                stats._count(RetryStats.GIVE_UPS_DEADLINE)
            return False
        if stats is not None:
            stats._count(RetryStats.RETRIES)
        return True


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
