"""At-most-once writes: never retry an attempt that may have run on the server.

redis-py retries a command whose connection failed, whatever the command.
When the connection dies after the request was written, the server may have
run it, and the retry runs it again: ``INCR`` counts twice, ``LPUSH`` pushes
twice, a transaction commits twice, and the caller sees one success.  A
``Retry`` built with ``writes="at-most-once"`` (or every default Retry after
``patch(writes="at-most-once")``) retries a failed attempt only when it
cannot have run or running it again changes nothing:

- nothing of the command was written: the connection was refused, the
  connection's handshake failed, the write of a single command or of a
  MULTI/EXEC transaction failed before its last byte (the server runs no
  command it has not read whole, and drops a transaction without its EXEC),
  or the server refused it (``LOADING``, ``CLUSTERDOWN``, ``TRYAGAIN``,
  ``MOVED``, ``READONLY``, ``OOM``, ``NOPERM``, ``EXECABORT``...);
- every command of the attempt is read-only (the server's own flag, in
  :data:`READ_ONLY`, generated from ``COMMAND`` of the Redis version in
  :data:`REDIS_VERSION`) or safe to repeat (:data:`SAFE_TO_REPEAT`, each
  with its reason);
- the attempt only read (a pub/sub client waiting for messages).

Every other failure is raised at once, as the error it is (``except
ConnectionError`` still catches it), after ``fail()`` ran as for any
failure, counted in ``RetryStats.give_ups_may_have_run``, and marked:
:func:`redis_backoff_c.may_have_run` is true for it (and Python 3.11+ shows a note in its
traceback).  Whether it ran is not known; read back (``GET`` the counter),
or write in a form that is safe to repeat (see docs/at-most-once.md).

How the attempt is read: from the error's traceback, on the failure path
only (the success path costs nothing).  The frames of redis-py's own
functions tell which command the attempt ran (``_send_command_parse_response``
and the cluster's ``_execute_command`` hold its arguments, a pipeline's
``_execute_pipeline`` or ``_execute_transaction`` its commands) and where it
failed: connecting (``connect``, ``check_health``...), writing
(``send_packed_command``) or reading the reply (``read_response``,
``parse_response``).  A ``do`` that is not redis-py's, or a redis-py whose
functions are named otherwise, gives nothing to read: such a failure may
have run, and is not retried.  So the policy can only err towards raising.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType, MappingProxyType, TracebackType
from typing import Any, Final

import redis
import redis.exceptions

from redis_backoff_c import _commands

__all__ = [
    "AT_LEAST_ONCE",
    "AT_MOST_ONCE",
    "READ_ONLY",
    "REDIS_VERSION",
    "SAFE_TO_REPEAT",
    "add_read_only",
    "add_safe_to_repeat",
    "is_safe_to_repeat",
    "may_have_run",
]

AT_LEAST_ONCE: Final = "at-least-once"
AT_MOST_ONCE: Final = "at-most-once"

#: The Redis version :data:`READ_ONLY` was generated from.
REDIS_VERSION: Final = _commands.REDIS_VERSION

_lock = threading.Lock()
_read_only: set[str] = set(_commands.READ_ONLY)
#: name -> (reason, condition on the command's arguments or None).
_safe: dict[str, tuple[str, Callable[[Sequence[Any]], bool] | None]] = {}

#: Commands flagged read-only: the server's metadata, and those added.
READ_ONLY: frozenset[str] = frozenset(_read_only)
#: Writes that are safe to repeat, with the reason for each.
SAFE_TO_REPEAT: Mapping[str, str] = MappingProxyType({})

_MARK: Final = "_redis_backoff_c_may_have_run"
_NOTE: Final = (
    "redis_backoff_c: not retried (writes='at-most-once'): the command may have run on the server"
)


def may_have_run(error: BaseException) -> bool:
    """True when ``error`` ended a call under ``writes="at-most-once"``
    because its attempt may have run on the server (and was not retried)."""
    return getattr(error, _MARK, False) is True


# --- The command table --------------------------------------------------


def _key(name: object) -> str:
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    if not isinstance(name, str):
        raise TypeError(f"a command name must be a str, not {type(name).__name__}")
    return "|".join(name.upper().split())


def add_read_only(*names: str) -> None:
    """Treat these commands as read-only (a module's commands, say):
    ``add_read_only("JSON.GET", "CONFIG GET")``."""
    global READ_ONLY
    keys = [_key(name) for name in names]
    with _lock:
        _read_only.update(keys)
        READ_ONLY = frozenset(_read_only)


def add_safe_to_repeat(
    name: str, reason: str, when: Callable[[Sequence[Any]], bool] | None = None
) -> None:
    """Treat the write ``name`` as safe to repeat (running it twice leaves
    what running it once leaves, and replies the same), for ``reason``;
    ``when(args)`` (the whole command, name first) may narrow it to some
    of its forms."""
    global SAFE_TO_REPEAT
    if not isinstance(reason, str) or not reason:
        raise ValueError("add_safe_to_repeat() argument 'reason' must be a non-empty str")
    if when is not None and not callable(when):
        raise TypeError("add_safe_to_repeat() argument 'when' must be callable or None")
    key = _key(name)
    with _lock:
        _safe[key] = (reason, when)
        SAFE_TO_REPEAT = MappingProxyType({k: r for k, (r, _) in _safe.items()})


def _word(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.upper() if isinstance(value, str) else None


def _command_key(args: Sequence[Any]) -> str | None:
    """The table's name for a command (``"CONFIG|GET"`` for a subcommand),
    or None when its name is no str or bytes."""
    if not args:
        return None
    head = _word(args[0])
    if head is None:
        return None
    words = head.split()
    if not words:
        return None
    if words[0] in _commands.CONTAINERS:
        sub = words[1] if len(words) > 1 else (_word(args[1]) if len(args) > 1 else None)
        if sub:
            return f"{words[0]}|{sub}"
    return words[0]


def is_safe_to_repeat(args: Sequence[Any]) -> bool:
    """Is the command ``args`` (name first, as redis-py's execute_command
    takes it) read-only, or a write that is safe to repeat?"""
    key = _command_key(args)
    if key is None:
        return False
    if key in _read_only:
        return True
    entry = _safe.get(key)
    if entry is None:
        return False
    condition = entry[1]
    return condition is None or bool(condition(args))


def _plain_set(args: Sequence[Any]) -> bool:
    # SET key value [EX s | PX ms | EXAT | PXAT | KEEPTTL]: the same value
    # again.  Not with NX, XX, GET or a compare (IFEQ...): a repeat replies
    # otherwise than the first run.
    return not any(_word(arg) in _CONDITIONAL_SET for arg in args[3:])


_CONDITIONAL_SET: Final = frozenset({"NX", "XX", "GET", "IFEQ", "IFNE", "IFDEQ", "IFDNE"})

for _name, _reason, _when in (
    ("PING", "no effect", None),
    ("ECHO", "no effect", None),
    ("SELECT", "sets the connection's database: the same again", None),
    ("AUTH", "authenticates the connection again", None),
    ("HELLO", "sets the connection's protocol again", None),
    ("CLIENT|SETNAME", "names the connection again", None),
    ("CLIENT|SETINFO", "sets the connection's library info again", None),
    ("WATCH", "watching a key again changes nothing", None),
    ("UNWATCH", "no watch is left either way", None),
    ("SUBSCRIBE", "subscribing again changes nothing", None),
    ("PSUBSCRIBE", "subscribing again changes nothing", None),
    ("SSUBSCRIBE", "subscribing again changes nothing", None),
    ("UNSUBSCRIBE", "unsubscribing again changes nothing", None),
    ("PUNSUBSCRIBE", "unsubscribing again changes nothing", None),
    ("SUNSUBSCRIBE", "unsubscribing again changes nothing", None),
    ("SET", "sets the same value again (not with NX, XX, GET or IFEQ...)", _plain_set),
    ("MSET", "sets the same values again", None),
    ("SETEX", "sets the same value again (its TTL counted from the repeat)", None),
    ("PSETEX", "sets the same value again (its TTL counted from the repeat)", None),
    ("EXPIREAT", "the same absolute expiry again", None),
    ("PEXPIREAT", "the same absolute expiry again", None),
    ("SCRIPT|LOAD", "loads the same script, same SHA1", None),
    # reads of the server's own state: no key, so the server's flags leave
    # them without "readonly", yet they write nothing
    ("INFO", "reads the server's state", None),
    ("TIME", "reads the server's clock", None),
    ("CONFIG|GET", "reads the configuration", None),
    ("CLIENT|LIST", "reads the server's state", None),
    ("CLIENT|INFO", "reads the connection's state", None),
    ("CLIENT|GETNAME", "reads the connection's name", None),
    ("CLIENT|ID", "reads the connection's id", None),
    ("COMMAND", "reads the command table", None),
    ("COMMAND|INFO", "reads the command table", None),
    ("COMMAND|DOCS", "reads the command table", None),
    ("COMMAND|COUNT", "reads the command table", None),
    ("FUNCTION|LIST", "reads the loaded functions", None),
):
    add_safe_to_repeat(_name, _reason, _when)


# --- Reading the attempt from the traceback ------------------------------

# The roles of redis-py's functions in an attempt, by name (in redis-py's
# own files only: a program's function of the same name means nothing).
_COMMAND, _PIPELINE, _TRANSACTION = "command", "pipeline", "transaction"
_BEFORE, _SEND, _READ, _READS_ONLY, _CLUSTER_LOOP = (
    "before",
    "send",
    "read",
    "reads-only",
    "cluster-loop",
)
_ROLES: Final[Mapping[str, str]] = {
    # what the attempt runs: the frame holds its arguments
    "_send_command_parse_response": _COMMAND,  # Redis, asyncio Redis, a pipeline's WATCH...
    "_execute_command": _COMMAND,  # RedisCluster: (target_node, *args)
    "_execute_pipeline": _PIPELINE,
    "_execute_transaction": _TRANSACTION,
    # where it failed
    "connect": _BEFORE,
    "connect_check_health": _BEFORE,
    "_connect": _BEFORE,
    "on_connect": _BEFORE,
    "on_connect_check_health": _BEFORE,
    "check_health": _BEFORE,
    "get_connection": _BEFORE,
    # Sentinel's connect: asking the sentinels for the address, connecting
    "_connect_retry": _BEFORE,
    "get_master_address": _BEFORE,
    "rotate_slaves": _BEFORE,
    "discover_master": _BEFORE,
    "discover_slaves": _BEFORE,
    "send_packed_command": _SEND,
    "send_command": _SEND,
    "read_response": _READ,
    "parse_response": _READ,
    # an attempt that only reads: pub/sub's reads, a health check's PING
    "try_read": _READS_ONLY,
    "_send_ping": _READS_ONLY,
    # RedisCluster's own retry loop (its execute_command): it writes only
    # through _execute_command or a pipeline
    "execute_command": _CLUSTER_LOOP,
}
_CLUSTER_FILES: Final = ("cluster.py",)

#: Replies by which the server refused a command it did not run, and
#: errors raised before a command was sent.
_REFUSED: Final = tuple(
    getattr(redis.exceptions, name)
    for name in (
        "BusyLoadingError",
        "ClusterDownError",
        "TryAgainError",
        "AskError",
        "ReadOnlyError",
        "OutOfMemoryError",
        "NoPermissionError",
        "AuthenticationError",
        "AuthorizationError",
        "MaxConnectionsError",
        "MaxClientsReachedError",
        "SlotNotCoveredError",
        "RedisClusterUnreachableError",
    )
    if hasattr(redis.exceptions, name)
)
_REDIS_DIR: Final = os.path.dirname(os.path.abspath(redis.__file__)) + os.sep
#: The error a master that turns into a replica unblocks its blocked
#: clients with: the blocking command did nothing.
_UNBLOCKED_BY_DEMOTION: Final = (
    "UNBLOCKED force unblock from blocking operation, instance state changed"
)


def _refused(error: BaseException) -> bool:
    """The server refused the command with a reply, and did not run it:
    the reply's error, or the ConnectionError redis-py's own code rewraps
    it in (Sentinel's connection turns a demoted master's ``READONLY``,
    and the ``UNBLOCKED`` a demotion ends a blocking command with, into
    ``ConnectionError("The previous master is now a slave")``)."""
    if isinstance(error, _REFUSED):
        return True
    reply = error.__context__
    if not isinstance(error, redis.exceptions.ConnectionError) or reply is None:
        return False
    if not (
        isinstance(reply, _REFUSED)
        or (
            isinstance(reply, redis.exceptions.ResponseError)
            and str(reply).startswith(_UNBLOCKED_BY_DEMOTION)
        )
    ):
        return False
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_REDIS_DIR)


def _role(frame: FrameType) -> str | None:
    code = frame.f_code
    role = _ROLES.get(code.co_name)
    if role is None or not os.path.abspath(code.co_filename).startswith(_REDIS_DIR):
        return None
    if role == _CLUSTER_LOOP and os.path.basename(code.co_filename) not in _CLUSTER_FILES:
        return None
    return role


def _frames(tb: TracebackType | None) -> Iterable[FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _local(frame: FrameType, name: str) -> Any:
    try:
        return frame.f_locals.get(name)
    except Exception:  # a frame whose locals cannot be read: nothing known
        return None


def _commands_of(frame: FrameType, role: str) -> list[Sequence[Any]] | None:
    """The commands (each its arguments, name first) an entry frame runs."""
    if role == _COMMAND or role == _SEND:
        args = _local(frame, "args")
        return [args] if isinstance(args, tuple) and args else None
    commands = _local(frame, "commands")
    if not isinstance(commands, (list, tuple)):
        return None
    found: list[Sequence[Any]] = []
    for item in commands:
        args = getattr(item, "args", None)  # a cluster pipeline's command object
        if args is None and isinstance(item, tuple) and item:
            args = item[0]  # (args, options)
        if not isinstance(args, tuple):
            return None
        found.append(args)
    return found


class _Attempt:
    """What the traceback tells of the failed attempt."""

    __slots__ = ("entry", "commands", "phase", "first", "buffered")

    def __init__(self, error: BaseException) -> None:
        self.entry: str | None = None
        self.commands: list[Sequence[Any]] | None = None
        self.phase: str | None = None
        self.first: str | None = None
        # The write that failed was asyncio's: what the socket did not take
        # waits in the transport's buffer, and closing the connection
        # flushes it, so the server may read the whole command after all.
        self.buffered = False
        for index, frame in enumerate(_frames(error.__traceback__)):
            role = _role(frame)
            if role is None:
                continue
            if self.first is None:
                self.first = role if index == 0 else "inner"
            if role in (_COMMAND, _PIPELINE, _TRANSACTION):
                if self.entry is None and self.phase is None:
                    self.entry = role
                    self.commands = _commands_of(frame, role)
            elif role == _BEFORE:
                self.phase = _BEFORE  # connecting or checking: nothing sent
                return
            elif role == _SEND:
                if self.entry is None and self.phase is None:
                    self.entry = _COMMAND
                    self.commands = _commands_of(frame, _SEND)
                self.phase = _SEND  # a deeper connect makes it _BEFORE
                self.buffered = bool(frame.f_code.co_flags & inspect.CO_COROUTINE)
            elif role == _READ:
                if self.phase is None:
                    self.phase = _READ
                return
            elif role == _READS_ONLY and self.entry is None and self.phase is None:
                self.phase = _READS_ONLY
                return


def _attempt_may_have_run(error: BaseException) -> bool:
    attempt = _Attempt(error)
    if attempt.phase in (_BEFORE, _READS_ONLY):
        return False
    if attempt.first == _READ:
        return False  # do() itself is a read: it wrote nothing
    if attempt.entry in (None, _COMMAND) and _refused(error):
        return False
    if attempt.entry == _TRANSACTION and isinstance(error, redis.exceptions.ExecAbortError):
        return False
    if attempt.commands is not None and all(is_safe_to_repeat(c) for c in attempt.commands):
        return False
    if attempt.phase == _SEND and attempt.entry in (_COMMAND, _TRANSACTION):
        # written in part: a command runs only once read whole (not so in
        # asyncio, where the rest is still sent)
        return attempt.buffered
    if attempt.entry is None and attempt.phase is None and attempt.first == _CLUSTER_LOOP:
        return False  # the cluster loop failed before it sent anything
    return True


def _judge(error: BaseException) -> bool:
    """The hook of both Retry types (set into the C module at import): True
    when the failed attempt may have run, the error marked so."""
    if not _attempt_may_have_run(error):
        return False
    _mark(error)
    return True


def _mark(error: BaseException) -> None:
    """Mark `error` as ending a call whose attempt may have run."""
    try:
        setattr(error, _MARK, True)
        if sys.version_info >= (3, 11) and _NOTE not in getattr(error, "__notes__", ()):
            error.add_note(_NOTE)
    except (AttributeError, TypeError):
        pass  # an error that takes no attribute: raised unmarked, still not retried


# --- Before a write: a connection the server has closed ------------------
#
# A server restart closes every connection; the next write on one of them
# goes out, the read meets EOF, and the failure may have run: it would be
# raised.  redis-py's pool checks a connection for EOF when it hands it out
# (ConnectionPool.get_connection), so a pooled client's command goes out on
# a fresh connection.  A connection held across commands (a client built
# with single_connection_client=True, pub/sub, a pipeline that WATCHes)
# gets no such check: patch(writes="at-most-once") wraps redis-py's
# send_packed_command, sync and asyncio, so that a connection whose Retry
# is at-most-once is checked the same way before each write (a non-blocking
# look, can_read(0): EOF means the peer has closed it) and, when closed,
# disconnected, so the write connects anew.  Data waiting on it (a push
# message) is left for its reader.


def _at_most_once(connection: Any) -> bool:
    return getattr(getattr(connection, "retry", None), "writes", None) == AT_MOST_ONCE


def _sync_guard(send: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(send)
    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> Any:
        if getattr(self, "_sock", None) is not None and _at_most_once(self):
            try:
                self.can_read(timeout=0)
            except (redis.exceptions.ConnectionError, OSError):
                self.disconnect()  # closed by the peer: the write reconnects
        return send(self, command, check_health)

    send_packed_command._redis_backoff_c_wraps = send  # type: ignore[attr-defined]
    return send_packed_command


def _async_guard(send: Callable[..., Any]) -> Callable[..., Any]:
    # The stream's own state: EOF read (at_eof(): the peer closed, nothing
    # left to read) or a reset (exception()).  redis-py's can_read() says
    # so differently from one release to the next (8.1: True, 8.2: raises).
    @functools.wraps(send)
    async def send_packed_command(self: Any, command: Any, check_health: bool = True) -> Any:
        reader = getattr(self, "_reader", None)
        if (
            reader is not None
            and (reader.at_eof() or reader.exception() is not None)
            and _at_most_once(self)
        ):
            await self.disconnect(nowait=True)  # closed by the peer: the write reconnects
        return await send(self, command, check_health)

    send_packed_command._redis_backoff_c_wraps = send  # type: ignore[attr-defined]
    return send_packed_command


def _guards() -> list[tuple[type, str, object, object]]:
    """For patch(writes="at-most-once"): (class, name, old, new) for the
    send_packed_command of redis-py's AbstractConnection, sync and asyncio
    (those imported, not wrapped already)."""
    changes: list[tuple[type, str, object, object]] = []
    for module_name, guard in (
        ("redis.connection", _sync_guard),
        ("redis.asyncio.connection", _async_guard),
    ):
        cls = getattr(sys.modules.get(module_name), "AbstractConnection", None)
        send = vars(cls).get("send_packed_command") if isinstance(cls, type) else None
        if send is None or hasattr(send, "_redis_backoff_c_wraps"):
            continue
        changes.append((cls, "send_packed_command", send, guard(send)))  # type: ignore[arg-type]
    return changes
