"""A deadline that bounds the whole call, carried to the sockets (patch()).

A ``Retry`` with ``deadline=d`` stops retrying once ``d`` seconds have
passed, but redis-py's sockets know nothing of it: an attempt waits out its
own connect or socket timeout, and a pool checkout its own.  While
:func:`redis_backoff_c.patch` is active, a command of a client whose Retry
has a deadline ends within it, whatever the network does:

- The command's entry (``execute_command`` of ``Redis``, ``PubSub`` and
  ``RedisCluster``; ``execute`` and ``immediate_execute_command`` of the
  pipelines; sync and asyncio) puts the time the call must end by
  (monotonic seconds) into the context variable :data:`CALL_DEADLINE`, for
  its whole run: pool checkout, connect, every attempt.  A call inside
  another (a connect's own retries, the sentinels asked for a master's
  address) ends by the earlier of the two.
- The retry loop of either Retry type reads it when its Retry has a
  deadline, and ends by the earlier of its own and this one (so its
  backoff sleeps never reach past the command's end).
- Each wait reads the time left: a connect (the connection's
  ``socket_connect_timeout``), a blocking pool's checkout (its ``timeout``),
  a write and a read (the socket's timeout; asyncio: the connection's
  ``socket_timeout``) wait no longer than the lesser of their own timeout
  and the time left.  When one runs out, redis-py's own error follows, as
  for its own timeout, and redis-py drops the connection, so the cut
  reply is never read by a later command (dropped here too when a read
  was asked not to).  A command whose deadline has passed before its
  write is not written: a ``TimeoutError`` that marks it as not sent
  (under ``writes="at-most-once"`` it did not run).
- Blocking commands: their own blocking time extends the deadline
  (``BLPOP k 5`` with ``deadline=0.3`` may wait 5.3 s; a block of 0,
  forever, leaves the waits unbounded), as go-redis extends its read
  timeout: the program asked for the wait.  Retrying still stops at the
  deadline.
- redis-py's own pauses inside a cluster command (0.25 s after
  CLUSTERDOWN, 0.05 s after TRYAGAIN, a pipeline's backoff) end by the
  deadline too, with the attempt's error (:class:`_PacedModule`).
- Pub/sub's reads of messages (``listen``, ``get_message``) are not
  commands: no deadline bounds them.

Nothing of this runs for a Retry without a deadline but one context
variable read per command.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import sys
import time
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import redis.exceptions

#: When the command running in this context must end (time.monotonic()
#: seconds), or unset.
CALL_DEADLINE: Final[contextvars.ContextVar[float]] = contextvars.ContextVar(
    "redis_backoff_c.call_deadline"
)

#: The least timeout a wait gets past its deadline: whatever has already
#: arrived is still taken, nothing more is waited for.
_LEAST: Final = 1e-6
_WRAPS: Final = "_redis_backoff_c_wraps"
_NOT_SENT: Final = "_redis_backoff_c_not_sent"
_monotonic = time.monotonic


_BOUNDS: Final = "_redis_backoff_c_bounds"


def _mark(wrapper: Callable[..., Any], wrapped: Callable[..., Any]) -> None:
    setattr(wrapper, _WRAPS, wrapped)
    setattr(wrapper, _BOUNDS, True)


def in_chain(function: object, marker: str) -> bool:
    """Is `function`, or one it wraps (patch()'s wrappers name what they
    wrap in ``_redis_backoff_c_wraps``), marked with `marker`?"""
    seen = 0
    while function is not None and seen < 16:
        if getattr(function, marker, False) is True:
            return True
        function = getattr(function, _WRAPS, None)
        seen += 1
    return False


def not_sent(error: BaseException) -> bool:
    """True for the error of a command cut before any of it was written."""
    return getattr(error, _NOT_SENT, False) is True


def _time_left(at: float) -> float:
    return max(at - _monotonic(), _LEAST)


def _lesser(own: Any, at: float) -> Any:
    """The lesser of a timeout (None: none) and the time left to `at`."""
    left = _time_left(at)
    return left if own is None or own > left else own


def _cut_before_send() -> redis.exceptions.TimeoutError:
    error = redis.exceptions.TimeoutError(
        "Timeout writing to socket: the call's deadline had passed, nothing was sent"
    )
    setattr(error, _NOT_SENT, True)
    return error


# --- Blocking commands: their blocking time extends the deadline ----------


def _number(value: Any) -> float | None:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def _last(args: Sequence[Any]) -> float | None:
    return _number(args[-1])


def _second(args: Sequence[Any]) -> float | None:
    return _number(args[1]) if len(args) > 1 else None


def _ms_at(index: int) -> Callable[[Sequence[Any]], float | None]:
    def block(args: Sequence[Any]) -> float | None:
        ms = _number(args[index]) if len(args) > index else None
        return None if ms is None else ms / 1000.0

    return block


#: What a reader gives for a form of the command that does not block.
_NO_WAIT: Final = -1.0


def _after_block(args: Sequence[Any]) -> float | None:
    # XREAD [COUNT n] [BLOCK ms] STREAMS ...: without BLOCK, no wait.
    for index, word in enumerate(args[:-1]):
        if isinstance(word, (str, bytes)) and word.upper() in ("BLOCK", b"BLOCK"):
            ms = _number(args[index + 1])
            return None if ms is None else ms / 1000.0
    return _NO_WAIT


#: Each blocking command's wait, read from its arguments (name first):
#: seconds (0: forever, as the server reads it), _NO_WAIT, or None when
#: it cannot be read.
_BLOCKING: Final[dict[str, Callable[[Sequence[Any]], float | None]]] = {
    "BLPOP": _last,
    "BRPOP": _last,
    "BZPOPMIN": _last,
    "BZPOPMAX": _last,
    "BRPOPLPUSH": _last,
    "BLMOVE": _last,
    "BLMPOP": _second,
    "BZMPOP": _second,
    "XREAD": _after_block,
    "XREADGROUP": _after_block,
    "WAIT": _ms_at(2),
    "WAITAOF": _ms_at(3),
}


def _block_seconds(args: Sequence[Any]) -> float:
    """How long the command may block by its own arguments: 0.0 for a
    command that does not block, inf for one that may block forever (or
    whose wait cannot be read)."""
    if not args:
        return 0.0
    name = args[0]
    if type(name) is not str:
        if not isinstance(name, (str, bytes)):
            return 0.0
        name = name.decode("latin-1") if isinstance(name, bytes) else str(name)
    reader = _BLOCKING.get(name.upper())
    if reader is None:
        return 0.0
    seconds = reader(args)
    if seconds == _NO_WAIT:
        return 0.0
    return math.inf if not seconds else seconds


def _pipeline_block_seconds(pipeline: Any) -> float:
    """A pipeline's commands block in turn; in a transaction none blocks."""
    if getattr(pipeline, "transaction", False) or getattr(pipeline, "explicit_transaction", False):
        return 0.0
    total = 0.0
    for item in getattr(pipeline, "command_stack", ()):
        args = getattr(item, "args", None)  # a cluster pipeline's command object
        if args is None and isinstance(item, tuple) and item:
            args = item[0]  # (args, options)
        if isinstance(args, tuple):
            total += _block_seconds(args)
    return total


# --- The command's entry: the deadline set for its whole run -------------


def _enter(seconds: Any, block: float) -> contextvars.Token[float] | None:
    """The command's deadline set (the Token to reset it with), unless it
    has none after all: a command that may block forever, in no other."""
    at = _monotonic() + float(seconds) + block
    outer = CALL_DEADLINE.get(None)
    if outer is not None and outer < at:
        at = outer
    if at == math.inf:
        return None
    return CALL_DEADLINE.set(at)


def enter_cluster_command(client: Any, *args: Any) -> contextvars.Token[float] | None:
    """RedisCluster's execute_command, patched in C (csrc/cluster.c) or in
    Python (redis_backoff_c._cluster), calls this when the cluster's Retry
    has a deadline: the command's deadline is set; the Token to reset it
    with, or None when there is none after all."""
    seconds = getattr(_cluster_retry(client), "deadline", None)
    if seconds is None:
        return None
    return _enter(seconds, _block_seconds(args))


def _client_retry(client: Any) -> Any:
    """The Retry a client's command runs under: its held connection's, or
    the one its pool gives each connection."""
    connection = getattr(client, "connection", None)
    if connection is not None:
        return getattr(connection, "retry", None)
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    return kwargs.get("retry") if isinstance(kwargs, dict) else None


def _cluster_retry(cluster: Any) -> Any:
    """RedisCluster's own Retry (an asyncio cluster pipeline: its client's)."""
    retry = getattr(cluster, "retry", None)
    if retry is not None:
        return retry
    client = getattr(cluster, "cluster_client", None) or getattr(cluster, "_client", None)
    return getattr(client, "retry", None)


def _command_block(_self: Any, args: tuple[Any, ...]) -> float:
    return _block_seconds(args)


def _pipeline_block(pipeline: Any, _args: tuple[Any, ...]) -> float:
    return _pipeline_block_seconds(pipeline)


def _sync_entry(
    method: Callable[..., Any],
    retry_of: Callable[[Any], Any],
    block_of: Callable[[Any, tuple[Any, ...]], float],
) -> Callable[..., Any]:
    @functools.wraps(method)
    def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not bound:
            return method(self, *args, **kwargs)
        seconds = getattr(retry_of(self), "deadline", None)
        if seconds is None:
            return method(self, *args, **kwargs)
        token = _enter(seconds, block_of(self, args))
        if token is None:
            return method(self, *args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        finally:
            CALL_DEADLINE.reset(token)

    _mark(entry, method)
    return entry


def _async_entry(
    method: Callable[..., Any],
    retry_of: Callable[[Any], Any],
    block_of: Callable[[Any, tuple[Any, ...]], float],
) -> Callable[..., Any]:
    @functools.wraps(method)
    async def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not bound:
            return await method(self, *args, **kwargs)
        seconds = getattr(retry_of(self), "deadline", None)
        if seconds is None:
            return await method(self, *args, **kwargs)
        token = _enter(seconds, block_of(self, args))
        if token is None:
            return await method(self, *args, **kwargs)
        try:
            return await method(self, *args, **kwargs)
        finally:
            CALL_DEADLINE.reset(token)

    _mark(entry, method)
    return entry


# --- The waits: connect, write, read, pool checkout ----------------------


def _sync_connect(connect: Callable[..., Any]) -> Callable[..., Any]:
    # The TCP (or Unix, TLS) connect waits socket_connect_timeout, read by
    # redis-py's _connect() as it connects: bounded here for this
    # connection, which no other thread uses while it connects.
    @functools.wraps(connect)
    def connect_check_health(self: Any, *args: Any, **kwargs: Any) -> Any:
        at = CALL_DEADLINE.get(None)
        if at is None or getattr(self, "_sock", None) is not None:
            return connect(self, *args, **kwargs)
        own = self.socket_connect_timeout
        bounded = _lesser(own, at)
        self.socket_connect_timeout = bounded
        try:
            return connect(self, *args, **kwargs)
        finally:
            if self.socket_connect_timeout == bounded:
                self.socket_connect_timeout = own

    _mark(connect_check_health, connect)
    return connect_check_health


def _async_connect(connect: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(connect)
    async def connect_check_health(self: Any, *args: Any, **kwargs: Any) -> Any:
        at = CALL_DEADLINE.get(None)
        if at is None or self.is_connected:
            return await connect(self, *args, **kwargs)
        own = self.socket_connect_timeout
        bounded = _lesser(own, at)
        self.socket_connect_timeout = bounded
        try:
            return await connect(self, *args, **kwargs)
        finally:
            if self.socket_connect_timeout == bounded:
                self.socket_connect_timeout = own

    _mark(connect_check_health, connect)
    return connect_check_health


#: A socket whose timeout is within this of the time left keeps it: each
#: change is a system call, so a client with a deadline leaves its sockets
#: at about the time left, changed when it drifts further, and puts back
#: the socket's own timeout when a wait without a deadline comes (a wait
#: may so end up to this much early or late).
_DRIFT: Final = 0.005
#: A write this small never waits: the socket's send buffer (hundreds of
#: KiB on Linux) takes it whole, whatever the server does, unless earlier
#: bytes filled it, and redis-py reads every reply before it writes again.
_NEVER_WAITS: Final = 64 * 1024
#: The connection's attribute naming the socket whose timeout a deadline
#: lowered.
_LOWERED: Final = "_redis_backoff_c_lowered"


def _put_back(connection: Any) -> None:
    """A wait without a deadline on a connection whose socket's timeout a
    deadline lowered: the socket's own timeout again."""
    sock = connection.__dict__.pop(_LOWERED, None)
    if sock is not None and sock is connection._sock:
        sock.settimeout(connection.socket_timeout)


def _bound_socket(connection: Any, sock: Any, at: float) -> None:
    """The socket's timeout: the lesser of the connection's own and the
    time left (within _DRIFT).  A socket no deadline lowered has the
    connection's own timeout (redis-py sets it, and puts it back after
    each check for pending data): when that is within the time left there
    is nothing to do, and redis-py's socket_timeout property is not read
    (csrc/call_bounds.c's socket_within, the same rule)."""
    left = at - _monotonic()
    if left < _LEAST:
        left = _LEAST
    current = sock.gettimeout()
    if _LOWERED not in connection.__dict__ and current is not None and current <= left:
        return
    own = connection.socket_timeout
    if own is not None and own <= left:
        if current != own:
            sock.settimeout(own)
        connection.__dict__.pop(_LOWERED, None)
        return
    if current is None or not -_DRIFT <= current - left <= _DRIFT:
        sock.settimeout(left)
    connection.__dict__[_LOWERED] = sock


def _bounded_sync_io(
    connection: Any, at: float, io: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """Run one write or read, io(connection, *args, **kwargs), on the
    connection's socket, its timeout bounded by the time left; a wait the
    deadline cut short drops the connection, whatever the read was asked."""
    sock = connection._sock
    _bound_socket(connection, sock, at)
    try:
        return io(connection, *args, **kwargs)
    except BaseException as error:
        _after_cut(connection, sock, error)
        raise


def _after_cut(connection: Any, sock: Any, error: BaseException) -> None:
    """A write or read on `sock` failed with `error`: when it timed out (or
    the socket failed) while a deadline lowered the socket's timeout, the
    connection is dropped, so that no later command reads the cut reply."""
    if (
        isinstance(error, (redis.exceptions.TimeoutError, OSError))
        and connection._sock is sock
        and connection.__dict__.get(_LOWERED) is sock
    ):
        connection.disconnect()


def _size(command: Any) -> int:
    if isinstance(command, (bytes, str, memoryview)):
        return len(command)
    size = 0
    for item in command:
        size += len(item)
    return size


def _sync_send(send: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send)
    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> Any:
        at = CALL_DEADLINE.get(None)
        if at is None:
            if _LOWERED in self.__dict__:
                _put_back(self)
            return send(self, command, check_health)
        if at <= _monotonic():
            raise _cut_before_send()
        if self._sock is None:
            self.connect_check_health(check_health=False)
        if _size(command) < _NEVER_WAITS:
            return send(self, command, check_health)
        return _bounded_sync_io(self, at, send, (command, check_health), {})

    _mark(send_packed_command, send)
    return send_packed_command


def _sync_read(read: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(read)
    def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        at = CALL_DEADLINE.get(None)
        if at is None:
            if _LOWERED in self.__dict__:
                _put_back(self)
            return read(self, *args, **kwargs)
        if self._sock is None:
            return read(self, *args, **kwargs)
        return _bounded_sync_io(self, at, read, args, kwargs)

    _mark(read_response, read)
    return read_response


async def _bounded_async_io(connection: Any, at: float, io: Callable[[], Any]) -> Any:
    """asyncio: redis-py reads the connection's socket_timeout when a write
    or read starts; this task holds the connection, so it is bounded for
    this one."""
    own = connection.socket_timeout
    bounded = _lesser(own, at)
    if bounded is own:
        return await io()
    connection.socket_timeout = bounded
    try:
        return await io()
    except (redis.exceptions.TimeoutError, OSError, asyncio.TimeoutError):
        if connection.is_connected:
            await connection.disconnect(nowait=True)
        raise
    finally:
        if connection.socket_timeout == bounded:
            connection.socket_timeout = own


def _async_send(send: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send)
    async def send_packed_command(self: Any, command: Any, check_health: bool = True) -> Any:
        at = CALL_DEADLINE.get(None)
        if at is None:
            return await send(self, command, check_health)
        if at <= _monotonic():
            raise _cut_before_send()
        if not self.is_connected:
            await self.connect_check_health(check_health=False)
        return await _bounded_async_io(self, at, lambda: send(self, command, check_health))

    _mark(send_packed_command, send)
    return send_packed_command


def _async_read(read: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(read)
    async def read_response(self: Any, *args: Any, **kwargs: Any) -> Any:
        at = CALL_DEADLINE.get(None)
        if at is None:
            return await read(self, *args, **kwargs)
        return await _bounded_async_io(self, at, lambda: read(self, *args, **kwargs))

    _mark(read_response, read)
    return read_response


class _PoolTimeout:
    """A blocking pool's ``timeout``, read by redis-py as a checkout starts
    to wait: the lesser of the pool's own and the time left to the
    deadline in effect in the reading thread or task.  The pool is shared,
    so the bound is in the reading, never stored."""

    def __get__(self, pool: Any, owner: type | None = None) -> Any:
        if pool is None:
            return self
        try:
            own = pool.__dict__["timeout"]
        except KeyError:
            raise AttributeError("timeout") from None
        at = CALL_DEADLINE.get(None)
        return own if at is None else _lesser(own, at)

    def __set__(self, pool: Any, value: Any) -> None:
        pool.__dict__["timeout"] = value

    def __delete__(self, pool: Any) -> None:
        del pool.__dict__["timeout"]


# --- redis-py's own pauses in its cluster loops ----------------------------


def _paced_sleep(sleep: Callable[[float], None], seconds: Any) -> None:
    """time.sleep(seconds) for redis-py's cluster module: a pause that would
    reach past the deadline of the command running sleeps up to it, then
    raises the error being handled (the attempt's own), or, outside an
    except block, returns, and what follows finds no time left."""
    at = CALL_DEADLINE.get(None)
    number = _number(seconds)
    if at is None or number is None or number == 0:
        return sleep(seconds)
    left = at - _monotonic()
    if number < left:
        return sleep(seconds)
    sleep(max(left, 0.0))
    pending = sys.exc_info()[1]
    if pending is not None:
        raise pending
    return None


def _paced_async_sleep(sleep: Callable[..., Any], delay: Any, result: Any = None) -> Any:
    """asyncio.sleep(delay, result) for redis-py's asyncio cluster module,
    as _paced_sleep; the error being handled is read here, in the caller's
    except block, before anything is awaited."""
    at = CALL_DEADLINE.get(None)
    number = _number(delay)
    if at is None or number is None or number == 0:
        return sleep(delay, result)
    left = at - _monotonic()
    if number < left:
        return sleep(delay, result)
    return _sleep_then_raise(sleep, max(left, 0.0), result, sys.exc_info()[1])


async def _sleep_then_raise(
    sleep: Callable[..., Any], seconds: float, result: Any, pending: BaseException | None
) -> Any:
    await sleep(seconds)
    if pending is not None:
        raise pending
    return result


class _PacedSleep:
    """The ``sleep`` of a :class:`_PacedModule`: the module's own, as
    it is when read (a mock put on ``time.sleep`` included), paced by the
    deadline.  A data descriptor, so it comes before the module's
    namespace; set and deleted there, as on the module itself."""

    def __init__(self, paced: Callable[..., Any]) -> None:
        self.paced = paced

    def __get__(self, module: Any, owner: type | None = None) -> Any:
        if module is None:
            return self
        return functools.partial(self.paced, vars(module)["sleep"])

    def __set__(self, module: Any, value: Any) -> None:
        vars(module)["sleep"] = value

    def __delete__(self, module: Any) -> None:
        del vars(module)["sleep"]


class _PacedModule:
    """What redis-py's cluster modules name ``time`` (sync) and ``asyncio``
    while the bounds are installed: the module itself, its namespace
    shared (this object's ``__dict__`` is the module's), but for its
    ``sleep``.  redis-py pauses inside a cluster command's attempt (0.25 s
    after CLUSTERDOWN, 0.05 s after TRYAGAIN, a pipeline's backoff): those
    pauses end by the command's deadline."""

    def __init__(self, module: types.ModuleType) -> None:
        self.__dict__ = vars(module)

    def __repr__(self) -> str:
        return f"<{vars(self)['__name__']} paced by the call's deadline>"


class _PacedTime(_PacedModule):
    sleep = _PacedSleep(_paced_sleep)


class _PacedAsyncio(_PacedModule):
    sleep = _PacedSleep(_paced_async_sleep)


#: (module, the name it gives a module whose sleep it calls, the stand-in).
_PAUSES: Final = (
    ("redis.cluster", "time", _PacedTime),
    ("redis.asyncio.cluster", "asyncio", _PacedAsyncio),
)


# --- What patch() installs ------------------------------------------------

_Change = tuple[object, str, object, object]

#: (module, class, method, wrapper maker, extra arguments).
_ENTRIES: Final = (
    ("redis.client", "Redis", "execute_command", _sync_entry, (_client_retry, _command_block)),
    ("redis.client", "PubSub", "execute_command", _sync_entry, (_client_retry, _command_block)),
    ("redis.client", "Pipeline", "execute", _sync_entry, (_client_retry, _pipeline_block)),
    (
        "redis.client",
        "Pipeline",
        "immediate_execute_command",
        _sync_entry,
        (_client_retry, _command_block),
    ),
    (
        "redis.cluster",
        "RedisCluster",
        "execute_command",
        _sync_entry,
        (_cluster_retry, _command_block),
    ),
    ("redis.cluster", "ClusterPipeline", "execute", _sync_entry, (_cluster_retry, _pipeline_block)),
    ("redis.connection", "AbstractConnection", "connect_check_health", _sync_connect, ()),
    ("redis.connection", "AbstractConnection", "send_packed_command", _sync_send, ()),
    ("redis.connection", "AbstractConnection", "read_response", _sync_read, ()),
    (
        "redis.asyncio.client",
        "Redis",
        "execute_command",
        _async_entry,
        (_client_retry, _command_block),
    ),
    (
        "redis.asyncio.client",
        "PubSub",
        "execute_command",
        _async_entry,
        (_client_retry, _command_block),
    ),
    ("redis.asyncio.client", "Pipeline", "execute", _async_entry, (_client_retry, _pipeline_block)),
    (
        "redis.asyncio.client",
        "Pipeline",
        "immediate_execute_command",
        _async_entry,
        (_client_retry, _command_block),
    ),
    (
        "redis.asyncio.cluster",
        "RedisCluster",
        "execute_command",
        _async_entry,
        (_cluster_retry, _command_block),
    ),
    (
        "redis.asyncio.cluster",
        "ClusterPipeline",
        "execute",
        _async_entry,
        (_cluster_retry, _pipeline_block),
    ),
    ("redis.asyncio.connection", "AbstractConnection", "connect_check_health", _async_connect, ()),
    ("redis.asyncio.connection", "AbstractConnection", "send_packed_command", _async_send, ()),
    ("redis.asyncio.connection", "AbstractConnection", "read_response", _async_read, ()),
)
_POOLS: Final = ("redis.connection", "redis.asyncio.connection")


#: The entries and waits whose common calls csrc/call_bounds.c makes (its
#: RBC_BOUND_* kinds): (module, class, method) -> kind.
_IN_C: Final = {
    ("redis.client", "Redis", "execute_command"): 0,
    ("redis.client", "PubSub", "execute_command"): 0,
    ("redis.client", "Pipeline", "immediate_execute_command"): 0,
    ("redis.connection", "AbstractConnection", "connect_check_health"): 1,
    ("redis.connection", "AbstractConnection", "send_packed_command"): 2,
    ("redis.connection", "AbstractConnection", "read_response"): 3,
    ("redis.asyncio.client", "Redis", "execute_command"): 4,
    ("redis.asyncio.client", "PubSub", "execute_command"): 4,
    ("redis.asyncio.client", "Pipeline", "immediate_execute_command"): 4,
    ("redis.asyncio.connection", "AbstractConnection", "connect_check_health"): 5,
    ("redis.asyncio.connection", "AbstractConnection", "send_packed_command"): 5,
    ("redis.asyncio.connection", "AbstractConnection", "read_response"): 5,
}
#: False to keep the Python wrappers where the C ones would go (the tests
#: run both); read when patch() installs the bounds.
use_c = True


def _in_c(key: tuple[str, str, str], old: Any, wrapper: Any) -> Any:
    """The C wrapper of `old` for `key` (its common calls without a Python
    frame, the rest handed to `wrapper`), or `wrapper` itself without the
    extension."""
    from redis_backoff_c._impl import speedups

    kind = _IN_C.get(key)
    if kind is None or speedups is None or not use_c:
        return wrapper
    extra = {0: frozenset(_BLOCKING), 3: _after_cut}.get(kind)
    return speedups._CallBound(kind, old, wrapper, extra)


def patches(module_name: str) -> list[_Change]:
    """(class, name, old, new) for what bounds a call by its deadline in
    the redis module `module_name`, when imported and not yet wrapped."""
    module = sys.modules.get(module_name)
    if module is None:
        return []
    changes: list[_Change] = []
    for source, class_name, name, make, extra in _ENTRIES:
        if source != module_name:
            continue
        cls = getattr(module, class_name, None)
        old = vars(cls).get(name) if isinstance(cls, type) else None
        if old is None or in_chain(old, _BOUNDS):
            continue
        if class_name == "RedisCluster" and hasattr(old, _WRAPS):
            continue  # redis_backoff_c._cluster's, which sets the deadline itself
        wrapper = _in_c((source, class_name, name), old, make(old, *extra))
        changes.append((cls, name, old, wrapper))
    for source, name, paced in _PAUSES:
        held = vars(module).get(name) if source == module_name else None
        if isinstance(held, types.ModuleType):
            changes.append((module, name, held, paced(held)))
    if module_name in _POOLS:
        cls = getattr(module, "BlockingConnectionPool", None)
        if isinstance(cls, type) and not isinstance(vars(cls).get("timeout"), _PoolTimeout):
            changes.append((cls, "timeout", vars(cls).get("timeout"), _PoolTimeout()))
    return changes


def modules() -> Iterable[str]:
    """The redis modules :func:`patches` changes."""
    return sorted({entry[0] for entry in _ENTRIES})


#: True while patch() bounds the waits: the retry loops then end by the
#: command's deadline too (the twin reads this; the C one is told by bind()).
bound = False
#: Whether a Retry (C or twin) was ever given a deadline in this process;
#: and what patch() asks to run when the first one is (it installs the
#: bounds then: a process without deadlines pays nothing for them).
seen = False
on_first: Callable[[], object] | None = None


def saw_deadline() -> None:
    """A Retry was given a deadline: the C types call this (once) and the
    twin (each time, until one was seen)."""
    global seen, on_first
    seen = True
    install, on_first = on_first, None
    if install is not None:
        install()


def deadline_seen() -> bool:
    from redis_backoff_c._impl import speedups

    return seen or (speedups is not None and speedups._deadline_seen())


def bind(active: bool) -> None:
    """patch() (True) and unpatch() (False): the retry loops of both Retry
    types end by the deadline in CALL_DEADLINE, or no longer read it."""
    global bound
    from redis_backoff_c._impl import speedups

    bound = active
    if speedups is not None:
        if active:
            speedups._set_call_deadline(CALL_DEADLINE, enter_cluster_command)
        else:
            speedups._set_call_deadline(None, None)


def reached_after(delay: float) -> bool:
    """A loop of redis-py's own (a cluster pipeline's) is about to sleep
    `delay` seconds: True when the sleep would reach the deadline of the
    command running in this context."""
    at = CALL_DEADLINE.get(None)
    return at is not None and _monotonic() + max(delay, 0.0) >= at


def command_deadline(deadline_at: float) -> float:
    """The twin's loop: the earlier of its own deadline and the command's."""
    if not bound:
        return deadline_at
    outer = CALL_DEADLINE.get(None)
    return outer if outer is not None and outer < deadline_at else deadline_at


__all__ = [
    "CALL_DEADLINE",
    "bind",
    "command_deadline",
    "deadline_seen",
    "enter_cluster_command",
    "modules",
    "not_sent",
    "patches",
    "reached_after",
    "saw_deadline",
]
