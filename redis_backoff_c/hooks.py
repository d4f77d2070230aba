"""``on_retry`` and ``on_give_up``: a callable the retry loop calls with a
:class:`~redis_backoff_c.RetryEvent` for each retry it is about to make and for each call
that gives up.

Both ``Retry`` types take them as keyword arguments, as attributes, and
:func:`redis_backoff_c.patch` gives them to every default Retry::

    def on_retry(event):
        print(f"retry {event.attempt} in {event.delay:.3f}s: {event.error!r}")

    retry = Retry(ExponentialBackoff(), 3, on_retry=on_retry, on_give_up=print)

When they are called:

- ``on_retry(event)``: after a failed attempt the loop will retry, once
  everything has said yes (the checkers, ``fail``, the writes policy, the
  retries limit, the budget, the deadline), just before the backoff sleep;
  ``event.delay`` is the delay about to be slept (0 when there is none)
  and ``event.reason`` is None.
- ``on_give_up(event)``: once per call that raises an error the loop
  caught, with ``event.reason`` naming why (:data:`REASONS`); the error is
  raised right after.  ``event.delay`` is None.

``event.attempt`` counts the failed attempts of the call so far, this one
included.  A call that succeeds calls neither; an error the Retry does not
catch (not in ``supported_errors``) is no give-up and calls neither.

A hook that raises does not change what the loop does: its exception
(an ``Exception``) is logged on the ``redis_backoff_c`` logger, at ERROR
with its traceback, and the loop goes on as if the hook had returned.  A
``KeyboardInterrupt`` or ``SystemExit`` raised in a hook is not swallowed:
it ends the call, as it would in the backoff sleep.

Hooks are called inline, on the thread (or event loop) of the call: keep
them short, and never block in the asyncio one.  They compare by identity
in ``==``, are shared by ``copy.copy`` and ``copy.deepcopy`` of a Retry, and
are pickled with it (a lambda cannot be).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Final, NamedTuple

__all__ = ["REASONS", "RetryEvent"]

#: ``on_give_up``'s reasons, as :class:`~redis_backoff_c.RetryStats` counts them
#: (``give_ups_<reason>``): the retries limit was reached; a checker said
#: the error is not retryable; the call's deadline; the budget refused the
#: retry; under ``writes="at-most-once"``, the attempt may have run.
REASONS: Final = ("exhausted", "not_retryable", "deadline", "budget", "may_have_run")

_logger = logging.getLogger("redis_backoff_c")


class RetryEvent(NamedTuple):
    """What a hook is told (the pure-Python twin's; the C types hand their
    own tuple type with the same fields, redis_backoff_c.RetryEvent)."""

    #: Failed attempts of the call so far, this one included.
    attempt: int
    #: The error of the failed attempt.
    error: BaseException
    #: on_retry: the delay about to be slept, as the backoff computed it.
    delay: float | None = None
    #: on_give_up: why (one of REASONS); None for on_retry.
    reason: str | None = None


def _hook_failed(hook: object, error: BaseException) -> None:
    """A hook raised ``error`` (an Exception): the loop goes on, and the
    error goes to the log, where a program's own errors go.  The C types
    call this too (``_speedups._set_hook_reporter``)."""
    _logger.error(
        "redis_backoff_c: the retry hook %r raised; the loop went on as if it had returned",
        hook,
        exc_info=(type(error), error, error.__traceback__),
    )


def _chain(raised: BaseException, error: BaseException) -> None:
    """``error`` as the context of ``raised``, as CPython chains an
    exception raised while another is handled: where error's own context
    chain reaches ``raised``, it is cut first, so that no loop is made (the
    C types' ``chain_to_error``, csrc/extras.c)."""
    link, seen = error, {id(error)}
    while (context := link.__context__) is not None:
        if context is raised:
            link.__context__ = None
            break
        if id(context) in seen:
            break  # a loop already there: every link was checked
        seen.add(id(context))
        link = context
    raised.__context__ = error


def _call(hook: Callable[[Any], object], event: Any) -> None:
    """``hook(event)`` for the twin and the cluster loop (whose events are
    the C types' RetryEvent), as the C loop calls it: an Exception is
    reported and swallowed, anything else (a KeyboardInterrupt) propagates
    with the event's error as its context, as if that error were being
    handled when the hook ran (the cluster loop calls some give-ups after
    its handler): unless what it raised has a context of its own."""
    handled = sys.exc_info()[1]
    try:
        hook(event)
    except Exception as error:
        _hook_failed(hook, error)
    except BaseException as raised:
        given = event[1]
        context = raised.__context__
        if raised is not given and (context is None or context is handled):
            _chain(raised, given)
        raise
