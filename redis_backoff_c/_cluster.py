"""The extras (deadline, budget, stats) in redis-py's cluster command loop.

redis-py 8.2's ``RedisCluster.execute_command`` (sync and asyncio) retries a
command in a loop of its own, not through ``Retry.call_with_retry``: it
makes up to ``1 + retry.get_retries()`` attempts and, after each failure it
retries, asks ``_retry_backoff_delay(retry, failures)`` for the backoff to
sleep.  While :func:`redis_backoff_c.patch` is active, both are wrapped
(:func:`patch_module`), so that a cluster whose Retry is a C Retry with
extras gets them in that loop as ``call_with_retry`` has them:

- each command is one call in ``stats``, with its attempts, its retries and
  one outcome: success, give-up (retries exhausted, budget, deadline, or
  ``not_retryable`` when the loop gave up between attempts because a
  topology refresh reached no node), an unhandled error (one the loop does
  not retry), or ``aborted`` (``compute()`` raised, or the command ended
  during the backoff sleep, e.g. cancelled); ``slept_seconds`` adds the
  backoff the loop slept;
- a cluster built without ``retry=`` gets the extras given to patch(), as
  the other default Retry objects do;
- the budget takes a token per failed attempt it retries, refills on
  success, and is asked before each retry;
- the deadline (from the command's first attempt) refuses a retry whose
  attempt would start at or past it (after the backoff sleep, if any);
- ``on_retry`` is called before each backoff sleep of a retry the loop
  makes, ``on_give_up`` when the command raises after a give-up (retries
  exhausted, budget, deadline, may have run, or ``not_retryable`` as
  above), with the error the caller gets (:mod:`redis_backoff_c.hooks`).

In the order of ``call_with_retry``: the failed attempt is counted and the
budget asked before the backoff is computed, the deadline after.  The
retries of a split multi-shard command's own pipeline, inside the command,
go through the same hook with the same Retry: they count as the command's.

When the budget or the deadline refuses a retry, the command raises what
redis-py raises after its last retry (the attempt's error, or the
``RedisClusterUnreachableError`` it becomes while no node is reachable).

A cluster whose Retry has no extras (or is not a C Retry) runs redis-py's
loop untouched: ``execute_command`` is a C method (``_ClusterCommand``)
that reads ``self.retry`` and calls redis-py's function directly, with no
Python frame of ours; only a C Retry with extras goes through the wrapper
below.  redis-py 8.0 and
8.1 have no ``_retry_backoff_delay``: their loop never sleeps and offers no
point between attempts, so nothing is wrapped there and the cluster's own
retries carry no extras (the connections' and pipelines' call_with_retry
still do).

The command in progress is held in a context variable (per thread, per
asyncio task), so that the hook, called inside the loop's ``except`` block,
finds the command it belongs to.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from redis_backoff_c import _call_deadline, hooks as _hooks
from redis_backoff_c._speedups import (
    RetryEvent,
    _cluster_begin,
    _cluster_delay,
    _cluster_ended,
    _cluster_failed,
    _cluster_retried,
    _ClusterCommand,
)

__all__ = ["patch_module"]

# _cluster_ended's outcomes and _cluster_failed's answers (csrc/cluster.h).
SUCCEEDED, EXHAUSTED, UNHANDLED, NOT_RETRYABLE, ABORTED = range(5)
GO_ON, GIVE_UP_BUDGET, GIVE_UP_MAY_HAVE_RUN = range(3)

#: The redis-py modules whose RedisCluster runs the command loop.
MODULES = ("redis.cluster", "redis.asyncio.cluster")


class _GaveUp(Exception):
    """Raised by the hook, inside the loop's handler of the attempt's error
    (its ``__context__``), when the budget or the deadline refuses the
    retry; the wrapper raises what redis-py would raise instead.  Its one
    argument is the reason (redis_backoff_c.hooks.REASONS)."""


class _MayHaveRun(_GaveUp):
    """The same, under writes="at-most-once" for an attempt that may have
    run: the wrapper raises the attempt's error itself, marked."""


class _Command:
    """One cluster command with extras, in progress."""

    __slots__ = ("retry", "deadline_at", "failures", "error", "sleep_started", "delay", "counted")
    # Set by the hook, with `error`, for the failure it retries.
    failures: int
    sleep_started: float
    delay: float

    def __init__(self, retry: Any, deadline_at: float) -> None:
        # What a command that succeeds at once needs (see above for the rest).
        self.retry = retry
        self.deadline_at = deadline_at
        #: The error of the last failed attempt the loop retries, while that
        #: retry is pending (its attempt not yet seen).
        self.error: BaseException | None = None
        #: Its outcome is counted already (the hook saw compute() raise).
        self.counted = False
        #: The loop's failure count at its last retry (none yet: 0).
        self.failures = 0

    def retry_made(self) -> None:
        """The pending retry's attempt has run: count it, and its sleep."""
        if self.error is not None:
            self.error = None
            slept = min(time.monotonic() - self.sleep_started, self.delay)
            _cluster_retried(self.retry, slept)

    def aborted(self) -> None:
        """compute() or the delay raised in the hook, as they abort a
        call_with_retry: the command ends with that exception."""
        self.error = None
        self.counted = True
        _cluster_ended(self.retry, ABORTED)

    def succeeded(self) -> None:
        if self.error is not None:
            self.retry_made()
        _cluster_ended(self.retry, SUCCEEDED)

    def ended(self, error: BaseException, retried: tuple[type, ...]) -> None:
        """The command raised `error` (not a give-up of the extras')."""
        if self.counted:
            return
        pending = self.error
        if pending is not None and error is not pending:
            if error.__cause__ is pending:
                # The loop gave up before the retry's attempt: a refresh
                # since the failure reached no node (redis-py's
                # _error_instead_of_retry, raised from the failure).
                _cluster_ended(self.retry, NOT_RETRYABLE)
                self.gave_up("not_retryable", error, self.failures)
                return
            if self._raised_in_sleep(error, pending):
                _cluster_ended(self.retry, ABORTED)
                return
        self.retry_made()
        cause = error.__cause__ if error.__suppress_context__ else None
        if type(error) in retried or type(cause) in retried:
            _cluster_ended(self.retry, EXHAUSTED)
            self.gave_up("exhausted", error, self.failures + 1)
        else:
            _cluster_ended(self.retry, UNHANDLED)

    def gave_up(self, reason: str, error: BaseException, attempt: int) -> None:
        """on_give_up(event), with the error the command raises."""
        hook = self.retry.on_give_up
        if hook is not None:
            _hooks._call(hook, RetryEvent(attempt, error, None, reason))

    def _raised_in_sleep(self, error: BaseException, pending: BaseException) -> bool:
        """Was `error` raised into the backoff sleep after `pending`?  The
        loop sleeps in its handler of the failure, so what is raised there
        (a cancellation, Ctrl-C) has the failure as context, and the next
        attempt's error has not.  close() is the exception: CPython closes
        the awaited coroutines first and raises a new GeneratorExit here,
        with no context, so the clock tells whether the sleep had ended."""
        if isinstance(error, GeneratorExit):
            return time.monotonic() - self.sleep_started < self.delay
        return _raised_while_handling(error, pending)


def _raised_while_handling(error: BaseException, handled: BaseException) -> bool:
    """Was `error` raised while `handled` was being handled (directly, or
    through the few exceptions between them that asyncio's cancellation
    chains on some versions)?"""
    context = error.__context__
    for _ in range(8):
        if context is None:
            return False
        if context is handled:
            return True
        context = context.__context__
    return False


#: The command in progress: a _Command, or, set by the sync C method
#: (csrc/cluster.c) and until an attempt fails, (retry, deadline_at).
_command: contextvars.ContextVar[_Command | tuple[Any, float] | None] = contextvars.ContextVar(
    "redis_backoff_c_cluster_command", default=None
)


def _forget(command: _Command, token: contextvars.Token[Any]) -> None:
    """The command is over: the variable back to what it was, in the
    context it was set in.  A pending asyncio command whose coroutine is
    destroyed is closed from another context (the collector's), where
    there is nothing of it to undo."""
    if _command.get() is command:
        _command.reset(token)


def _backoff_delay(original: Callable[[Any, int], float]) -> Callable[[Any, int], float]:
    """``_retry_backoff_delay`` that also runs the extras of the command in
    progress: called by the loop, in its handler of the failed attempt.
    The failure is counted and the budget asked before the backoff is
    computed, and the deadline after, as call_with_retry does them."""

    @functools.wraps(original)
    def retry_backoff_delay(retry: Any, failures: int) -> float:
        value = _command.get()
        if isinstance(value, tuple):
            # The C method's command (csrc/cluster.c), at its first failure.
            command: _Command | None = _Command(*value)
            _command.set(command)
        else:
            command = value
        if command is None or command.retry is not retry:
            # A cluster pipeline's loop: no extras counted, but a deadline
            # that the sleep would reach ends it, with the error it had.
            delay = original(retry, failures)
            if _call_deadline.bound and _call_deadline.reached_after(delay):
                raise sys.exc_info()[1]  # type: ignore[misc]
            return delay
        command.retry_made()
        command.failures = failures
        error = sys.exc_info()[1]
        assert error is not None  # called in the loop's handler of the failure
        verdict = _cluster_failed(retry, error)
        if verdict == GIVE_UP_MAY_HAVE_RUN:
            raise _MayHaveRun("may_have_run")
        if verdict == GIVE_UP_BUDGET:
            raise _GaveUp("budget")
        try:
            delay = original(retry, failures)
            seconds = _cluster_delay(retry, command.deadline_at, delay if delay > 0 else None)
            # As call_with_retry: on_retry once the sleep is allowed, or at
            # once when there is none (its deadline check comes after).
            hook = retry.on_retry if seconds is not None or not delay > 0 else None
            if hook is not None:
                _hooks._call(hook, RetryEvent(failures, error, delay, None))
        except BaseException:
            command.aborted()
            raise
        if seconds is None:
            raise _GaveUp("deadline")
        command.error = sys.exc_info()[1]
        command.sleep_started = time.monotonic()
        command.delay = seconds
        return delay

    retry_backoff_delay._redis_backoff_c_wraps = original  # type: ignore[attr-defined]
    return retry_backoff_delay


def _error_after_last_retry(client: Any, error: BaseException) -> BaseException:
    """What redis-py's loop raises when it gives up on `error`."""
    to_raise = getattr(sys.modules.get("redis.cluster"), "_error_to_raise", None)
    if to_raise is None or not isinstance(error, Exception):
        return error
    nodes_manager = getattr(client, "nodes_manager", None)
    raised: BaseException = to_raise(
        getattr(nodes_manager, "_last_refresh_unreachable_args", None), error
    )
    return raised


def _give_up_metric(command: _Command, error: BaseException) -> dict[str, Any] | None:
    """The arguments of the error metric redis-py records when its loop
    gives up on `error` (None when it records none)."""
    if not hasattr(error, "connection"):
        return None
    return {
        "error": error,
        "connection": error.connection,
        "retry_attempts": command.failures,
        "is_internal": False,
    }


def _command_failed(client: Any, pending: Any, error: BaseException) -> BaseException:
    """The sync C method's error path (csrc/cluster.c), called after the
    command raised `error`, with what the context variable held at its end:
    counts the outcome and returns the exception to raise (redis-py's give-
    up for a _GaveUp, the attempt's own error for a _MayHaveRun, else
    `error` itself), as the asyncio wrapper below does in its handlers."""
    if pending is None:
        return error
    command = pending if isinstance(pending, _Command) else _Command(*pending)
    if not isinstance(error, _GaveUp):
        command.ended(error, _errors_allow_retry(client))
        return error
    gave_up = error.__context__
    assert gave_up is not None
    metric = _give_up_metric(command, gave_up)
    if metric is not None:
        client._record_error_metric(**metric)
    raised = gave_up if isinstance(error, _MayHaveRun) else _error_after_last_retry(client, gave_up)
    command.gave_up(error.args[0], raised, command.failures)
    return raised


def sync_command(execute: Callable[..., Any]) -> Any:
    """What patch() puts in redis.cluster.RedisCluster.execute_command: the
    C method, which runs the hooks itself (see csrc/cluster.c)."""
    return _ClusterCommand(execute, None, _command, _command_failed)


def _async_execute(
    execute: Callable[..., Any], retried: Callable[[Any], tuple[type, ...]]
) -> Callable[..., Any]:
    @functools.wraps(execute)
    async def execute_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        retry = self.retry
        deadline_at = _cluster_begin(retry)  # None: no extras, nothing to count
        if deadline_at is None:
            return await execute(self, *args, **kwargs)
        command = _Command(retry, deadline_at)
        token = _command.set(command)
        entered = None
        try:
            if _call_deadline.bound:
                entered = _call_deadline.enter_cluster_command(self, *args)
            result = await execute(self, *args, **kwargs)
        except _GaveUp as gave_up:
            error = gave_up.__context__
            may_have_run = isinstance(gave_up, _MayHaveRun)
            reason = gave_up.args[0]
        except BaseException as error:
            command.ended(error, retried(self))
            raise
        else:
            command.succeeded()
            return result
        finally:
            if entered is not None:
                _call_deadline.CALL_DEADLINE.reset(entered)
            _forget(command, token)
        assert error is not None
        metric = _give_up_metric(command, error)
        if metric is not None:
            await self._record_error_metric(**metric)
        raised = error if may_have_run else _error_after_last_retry(self, error)
        command.gave_up(reason, raised, command.failures)
        raise raised

    execute_command._redis_backoff_c_wraps = execute  # type: ignore[attr-defined]
    return execute_command


def _init_with_default_extras(
    init: Callable[..., None], give_extras: Callable[[object], None]
) -> Callable[..., None]:
    """RedisCluster.__init__, then, when no ``retry`` was given (the
    cluster built its default Retry, from the C class while patched),
    patch()'s extras given to that Retry, as to the other defaults."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            given = signature.bind(self, *args, **kwargs).arguments.get("retry")
        except TypeError:
            return
        if not given:
            give_extras(getattr(self, "retry", None))

    __init__._redis_backoff_c_wraps = init  # type: ignore[attr-defined]
    return __init__


def _errors_allow_retry(client: Any) -> tuple[type, ...]:
    return tuple(getattr(type(client), "ERRORS_ALLOW_RETRY", ()))


def patch_module(
    module: types.ModuleType, give_extras: Callable[[object], None]
) -> list[tuple[type, str, object, object]]:
    """The replacements for `module` (redis.cluster or redis.asyncio.cluster
    of redis-py 8.2 or later): (class, name, old, new) for its RedisCluster's
    ``execute_command`` and ``__init__`` (which calls ``give_extras`` with
    the default Retry it built) and, in redis.cluster, AbstractRedisCluster's
    ``_retry_backoff_delay``; none for another module or an earlier
    release, or when they are wrapped already."""
    if module.__name__ not in MODULES:
        return []
    abstract = getattr(sys.modules.get("redis.cluster"), "AbstractRedisCluster", None)
    hook = vars(abstract).get("_retry_backoff_delay") if abstract is not None else None
    if not isinstance(hook, staticmethod):
        return []
    changes: list[tuple[type, str, object, object]] = []
    if module.__name__ == "redis.cluster" and not hasattr(hook.__func__, "_redis_backoff_c_wraps"):
        assert abstract is not None
        changes.append(
            (abstract, "_retry_backoff_delay", hook, staticmethod(_backoff_delay(hook.__func__)))
        )
    cluster = getattr(module, "RedisCluster", None)
    if not isinstance(cluster, type):
        return changes
    execute = vars(cluster).get("execute_command")
    if execute is None or hasattr(execute, "_redis_backoff_c_wraps"):
        return changes
    # In C: a cluster whose Retry has no extras goes straight to redis-py's.
    # The asyncio one too from 3.12, where inspect.iscoroutinefunction()
    # reads its marker; before, the `async def` wrapper (that function
    # tells a coroutine function by its code alone).
    if module.__name__ == "redis.cluster":
        wrapper = sync_command(execute)
    else:
        wrapper = _async_execute(execute, _errors_allow_retry)
        if sys.version_info >= (3, 12):
            wrapper = _ClusterCommand(execute, wrapper, None, None)
    changes.append((cluster, "execute_command", execute, wrapper))
    init = vars(cluster).get("__init__")
    if init is not None and not hasattr(init, "_redis_backoff_c_wraps"):
        changes.append((cluster, "__init__", init, _init_with_default_extras(init, give_extras)))
    return changes
