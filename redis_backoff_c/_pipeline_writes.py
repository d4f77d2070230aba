"""At most once in redis-py's cluster pipelines (sync and asyncio).

redis-py 8.2 sends a cluster pipeline in batches, one per node, and re-sends
a failed command outside ``call_with_retry``: the sync pipeline sends each
failed command again through ``RedisCluster.execute_command`` and, when an
error is raised, its loop (``send_cluster_commands``) sends every command
that has an error again; the asyncio one (``PipelineStrategy.execute``)
sends again every command that has an error.  A command whose reply was
lost ran on the node, and would run twice.  The sync pipeline also writes
the error of the first lost reply over the replies already read, so the
commands before it would run twice too.

While :func:`redis_backoff_c.patch` is active, a pipeline whose cluster's
Retry is ``writes="at-most-once"`` keeps a ledger (a context variable, set
for one ``execute``) of the commands that may have run:

- a node's batch whose write failed after its connection was made (sync: a
  part of it may be on the server; asyncio: the transport still flushes
  what it buffered), or whose reply was lost from a command on: each such
  command that is not safe to repeat (:func:`redis_backoff_c.writes.is_safe_to_repeat`)
  may have run.  Its error is marked (:func:`redis_backoff_c.may_have_run`),
  and the command holds a stand-in (:class:`_MayHaveRun`, a ``RedisError``
  that no retry of redis-py's takes for one of its own) while the pipeline
  runs, so that nothing sends it again;
- the sync commands answered before a lost reply keep their replies;
- a batch that failed while connecting sent nothing: it is retried as
  redis-py retries it.

When the pipeline ends, each command gets its error back, in the reply
list or raised (the first error in the pipeline's order, annotated as
redis-py annotates it).  Commands that are safe to repeat are retried as
redis-py retries them.  Nothing changes for a pipeline whose Retry is not
at-most-once: the wrappers look at the ledger and call redis-py's.
"""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions

from redis_backoff_c import writes

__all__ = ["patches"]

_FAILED = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

#: id(command) -> (command, its marked error), for the pipeline running.
_Ledger = dict[int, tuple[Any, BaseException]]
_ledger: contextvars.ContextVar[_Ledger | None] = contextvars.ContextVar(
    "redis_backoff_c_pipeline_ledger", default=None
)


class _MayHaveRun(redis.exceptions.RedisError):
    """A command's result while the pipeline runs, in place of an error
    that may have run: an error still (no reply callback is applied to it),
    yet none that redis-py retries or sends again."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(*error.args)
        self.error = error


class _Hidden:
    """A settled command's result while redis-py's loop runs the pipeline
    again for the others: an answer, so that it is not sent again."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _at_most_once(retry: object) -> bool:
    return getattr(retry, "writes", None) == writes.AT_MOST_ONCE


def _nothing_sent(error: BaseException) -> bool:
    """The error came while connecting: nothing of the batch was sent."""
    return writes._Attempt(error).phase == writes._BEFORE


def _settle(command: Any, error: BaseException, ledger: _Ledger) -> bool:
    """`command` was written and its reply lost: when it is not safe to
    repeat, mark `error`, put the stand-in in its result, and say so."""
    args = getattr(command, "args", None)
    if isinstance(args, tuple) and writes.is_safe_to_repeat(args):
        return False
    writes._mark(error)
    ledger[id(command)] = (command, error)
    command.result = _MayHaveRun(error)
    return True


# --- sync: redis.cluster's NodeCommands and PipelineStrategy ---------------


def _sync_write(write: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(write)
    def wrapper(self: Any) -> None:
        ledger = _ledger.get()
        write(self)
        if ledger is None:
            return
        for command in self.commands:
            error = command.result
            if isinstance(error, _FAILED) and not _nothing_sent(error):
                _settle(command, error, ledger)

    wrapper._redis_backoff_c_wraps = write  # type: ignore[attr-defined]
    return wrapper


def _sync_read(read: Callable[[Any], None]) -> Callable[[Any], None]:
    @functools.wraps(read)
    def wrapper(self: Any) -> None:
        ledger = _ledger.get()
        if ledger is None:
            return read(self)
        # The commands read, in order, and the answers they got: redis-py
        # writes a lost reply's error over every command of the batch.
        pending = [c for c in self.commands if not isinstance(c.result, BaseException)]
        answers: list[Any] = []
        parse = self.parse_response

        def recording(connection: Any, command_name: Any, **options: Any) -> Any:
            try:
                answer = parse(connection, command_name, **options)
            except _FAILED:
                raise
            except redis.exceptions.RedisError as error:
                answers.append(error)  # the server's error reply: an answer
                raise
            answers.append(answer)
            return answer

        self.parse_response = recording
        try:
            read(self)
        finally:
            self.parse_response = parse
        for index, command in enumerate(pending):
            if index < len(answers):
                command.result = answers[index]
            elif isinstance(command.result, _FAILED):
                _settle(command, command.result, ledger)

    wrapper._redis_backoff_c_wraps = read  # type: ignore[attr-defined]
    return wrapper


def _sync_send(send: Callable[..., Any]) -> Callable[..., Any]:
    """PipelineStrategy._send_cluster_commands: one pass over the commands
    left; the settled ones are hidden from it."""

    @functools.wraps(send)
    def wrapper(
        self: Any,
        stack: Sequence[Any],
        raise_on_error: bool = True,
        allow_redirections: bool = True,
    ) -> Any:
        ledger = _ledger.get()
        if not ledger:
            return send(self, stack, raise_on_error, allow_redirections)
        with _hidden(ledger):
            return send(self, stack, raise_on_error, allow_redirections)

    wrapper._redis_backoff_c_wraps = send  # type: ignore[attr-defined]
    return wrapper


def _sync_pipeline(send: Callable[..., Any]) -> Callable[..., Any]:
    """PipelineStrategy.send_cluster_commands: the whole pipeline, with its
    retries; the ledger lives for it."""

    @functools.wraps(send)
    def wrapper(
        self: Any,
        stack: Sequence[Any],
        raise_on_error: bool = True,
        allow_redirections: bool = True,
    ) -> Any:
        if not _at_most_once(getattr(self._pipe, "retry", None)) or _ledger.get() is not None:
            return send(self, stack, raise_on_error, allow_redirections)
        with _Run() as run:
            run.response = send(self, stack, raise_on_error, allow_redirections)
        return _finish(stack, run, raise_on_error, self.annotate_exception)

    wrapper._redis_backoff_c_wraps = send  # type: ignore[attr-defined]
    return wrapper


# --- asyncio: redis.asyncio.cluster's ClusterNode and PipelineStrategy -----


def _async_node(execute_pipeline: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(execute_pipeline)
    async def wrapper(self: Any, commands: Sequence[Any]) -> Any:
        ledger = _ledger.get()
        if ledger is None:
            return await execute_pipeline(self, commands)
        try:
            failed = await execute_pipeline(self, commands)
        except _FAILED as error:
            if _nothing_sent(error):
                raise
            # The transport may still flush the batch: each command may have run.
            settled = [_settle(command, error, ledger) for command in commands]
            if not all(settled):
                raise  # the others are safe to repeat: retried as redis-py does
            return True
        if failed:
            for command in commands:
                if isinstance(command.result, _FAILED):
                    _settle(command, command.result, ledger)
        return failed

    wrapper._redis_backoff_c_wraps = execute_pipeline  # type: ignore[attr-defined]
    return wrapper


def _async_pass(execute: Callable[..., Any]) -> Callable[..., Any]:
    """PipelineStrategy._execute: one pass; the settled commands hidden."""

    @functools.wraps(execute)
    async def wrapper(
        self: Any,
        client: Any,
        stack: Sequence[Any],
        raise_on_error: bool = True,
        allow_redirections: bool = True,
    ) -> Any:
        ledger = _ledger.get()
        if not ledger:
            return await execute(self, client, stack, raise_on_error, allow_redirections)
        with _hidden(ledger):
            return await execute(self, client, stack, raise_on_error, allow_redirections)

    wrapper._redis_backoff_c_wraps = execute  # type: ignore[attr-defined]
    return wrapper


def _async_pipeline(execute: Callable[..., Any]) -> Callable[..., Any]:
    """PipelineStrategy.execute: the whole pipeline, with its retries."""

    @functools.wraps(execute)
    async def wrapper(
        self: Any, raise_on_error: bool = True, allow_redirections: bool = True
    ) -> Any:
        client = getattr(self._pipe, "cluster_client", None)
        if not _at_most_once(getattr(client, "retry", None)) or _ledger.get() is not None:
            return await execute(self, raise_on_error, allow_redirections)
        stack = list(self._command_queue)  # execute() empties the queue
        with _Run() as run:
            run.response = await execute(self, raise_on_error, allow_redirections)
        return _finish(stack, run, raise_on_error, _annotate_async)

    wrapper._redis_backoff_c_wraps = execute  # type: ignore[attr-defined]
    return wrapper


def _annotate_async(error: BaseException, number: int, args: Sequence[Any]) -> None:
    # As redis.asyncio.cluster's PipelineStrategy annotates the error it raises.
    module = sys.modules.get("redis.asyncio.cluster")
    command_text = getattr(module, "command_text", None)
    truncate_text = getattr(module, "truncate_text", None)
    text = " ".join(map(str, args))
    if command_text is not None and truncate_text is not None:
        text = truncate_text(command_text(args))
    first = error.args[0] if error.args else type(error).__name__
    error.args = (f"Command # {number} ({text}) of pipeline caused error: {first}",) + error.args[
        1:
    ]


# --- shared ---------------------------------------------------------------


class _hidden:
    """While redis-py runs a pass, the settled commands hold an answer
    (:class:`_Hidden`), not an error; after it, their stand-in again."""

    def __init__(self, ledger: _Ledger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        for command, error in self.ledger.values():
            command.result = _Hidden(error)

    def __exit__(self, *exc_info: object) -> None:
        for command, error in self.ledger.values():
            if isinstance(command.result, _Hidden):
                command.result = _MayHaveRun(error)


class _Run:
    """One pipeline's execute(): its ledger set for it, and what redis-py
    returned or raised (held, for :func:`_finish`)."""

    def __init__(self) -> None:
        self.ledger: _Ledger = {}
        self.response: Any = None
        self.raised: BaseException | None = None

    def __enter__(self) -> _Run:
        self.token = _ledger.set(self.ledger)
        return self

    def __exit__(self, kind: object, raised: BaseException | None, tb: object) -> bool:
        _ledger.reset(self.token)
        self.raised = raised
        return True  # _finish raises it, or the error that came first


def _finish(
    stack: Sequence[Any],
    run: _Run,
    raise_on_error: bool,
    annotate: Callable[[BaseException, int, Sequence[Any]], None],
) -> Any:
    """After the pipeline: each settled command's result is its error
    again; then redis-py's outcome, with the settled errors in it: the
    first error in the pipeline's order raised (annotated as redis-py
    annotates it), or the reply list."""
    ledger, response, raised = run.ledger, run.response, run.raised
    if not ledger:
        if raised is not None:
            raise raised
        return response
    for command, error in ledger.values():
        command.result = error
    for command in stack:  # a command sent to several nodes: a copy settled
        if isinstance(command.result, (_MayHaveRun, _Hidden)):
            command.result = command.result.error
    if raised is not None and not isinstance(raised, Exception):
        raise raised  # KeyboardInterrupt, a cancellation: as it is
    if raised is None and not raise_on_error:
        return _restored(response)
    settled = {id(error) for _, error in ledger.values()}
    for command in sorted(stack, key=lambda c: c.position):
        if id(command.result) in settled:
            annotate(command.result, command.position + 1, command.args)
            raise command.result
        if raised is not None and command.result is raised:
            break
    if raised is not None:
        raise raised.error if isinstance(raised, _MayHaveRun) else raised
    return _restored(response)


def _restored(response: Any) -> Any:
    """The reply list with each settled command's error in its place."""
    if not isinstance(response, list):
        return response
    return [r.error if isinstance(r, (_MayHaveRun, _Hidden)) else r for r in response]


def patches() -> list[tuple[type, str, object, object]]:
    """(class, name, old, new) for the cluster pipelines of the redis-py
    modules imported (8.2's layout; nothing for another, or when wrapped)."""
    found: list[tuple[type, str, object, object]] = []
    plan = (
        ("redis.cluster", "NodeCommands", "write", _sync_write),
        ("redis.cluster", "NodeCommands", "read", _sync_read),
        ("redis.cluster", "PipelineStrategy", "_send_cluster_commands", _sync_send),
        ("redis.cluster", "PipelineStrategy", "send_cluster_commands", _sync_pipeline),
        ("redis.asyncio.cluster", "ClusterNode", "execute_pipeline", _async_node),
        ("redis.asyncio.cluster", "PipelineStrategy", "_execute", _async_pass),
        ("redis.asyncio.cluster", "PipelineStrategy", "execute", _async_pipeline),
    )
    for module_name, class_name, name, wrap in plan:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        function = vars(cls).get(name) if isinstance(cls, type) else None
        if function is None or hasattr(function, "_redis_backoff_c_wraps"):
            continue
        found.append((cls, name, function, wrap(function)))  # type: ignore[arg-type]
    return found
