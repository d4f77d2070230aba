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
- every command of the attempt is read-only or safe to repeat.  The rule:
  the server's ``readonly`` flag is the only one that makes a command safe
  to retry (:data:`READ_ONLY`, generated from ``COMMAND`` of the Redis
  version in :data:`REDIS_VERSION`); every other command needs an entry in
  :data:`SAFE_TO_REPEAT`, with its reason: running it again leaves what
  running it once leaves, and replies as it would have, even when another
  client wrote in between (so no conditional write, and no plain ``SET``
  unless the program opts in to "last writer wins" with
  :func:`add_last_writer_wins`);
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

from redis_backoff_c import _call_deadline, _commands

__all__ = [
    "AT_LEAST_ONCE",
    "AT_MOST_ONCE",
    "READ_ONLY",
    "REDIS_VERSION",
    "SAFE_TO_REPEAT",
    "add_last_writer_wins",
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
#: Containers named by added entries ("FT.CONFIG" of "FT.CONFIG GET") that
#: the server's table does not have.
_containers: set[str] = set()

#: Commands flagged ``readonly`` by the server (its COMMAND reply, the
#: Redis version in :data:`REDIS_VERSION`), and those added with
#: :func:`add_read_only`.  ``readonly`` is the only flag of the server's
#: that makes a command safe to retry.
READ_ONLY: frozenset[str] = frozenset(_read_only)
#: Every other command that is safe to retry, with the reason for each:
#: reads of the server's own state (no key, so no ``readonly`` flag),
#: commands that set the connection's state to the same again, reads whose
#: writing form is left out by a condition (``SORT`` without ``STORE``),
#: and those added (:func:`add_safe_to_repeat`, :func:`add_last_writer_wins`).
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
#
# The rule.  After an attempt that may have run, a command is retried when
# it is read-only or safe to repeat, and only then:
#
# - Read-only: the server's ``readonly`` flag (its COMMAND reply, in
#   _commands.READ_ONLY, which scripts/gen_commands.py writes from a real
#   redis-server).  The server gives it to the commands that read keys and
#   write none.  No other flag says that a command writes nothing: ``fast``,
#   ``loading``, ``stale``, ``admin``, ``noscript``, ``pubsub`` say when or
#   by whom it may run, not what it does; and a command that touches no key
#   (PING, INFO, CONFIG GET, ROLE) carries no ``readonly``, though it
#   writes nothing.
# - Safe to repeat: every other command needs an entry in SAFE_TO_REPEAT,
#   with its reason (and, where only some of its forms are, a condition on
#   its arguments).  "Safe to repeat" means: running it again leaves what
#   running it once leaves, and replies as it would have, even when another
#   client wrote in between.  The entries here, by kind: commands with no
#   effect; commands that set the connection's own state, the same again;
#   reads of the server's own state (none carries the ``write`` flag); and
#   reads flagged ``write`` for a form that stores (SORT ... STORE), listed
#   with a condition that leaves that form out.  The integration tests check
#   each kind against the COMMAND reply of the server they run.
#
# So not repeated, whatever the server's flags: a conditional write (SET NX,
# EXPIREAT NX/XX/GT/LT: the repeat replies 0 where the first run set it; an
# EXPIREAT in the past deletes the key, the repeat replies 0); a write of a
# value another client may have changed meanwhile (SET, MSET, SETEX,
# PSETEX: the repeat overwrites that client's write; a program that accepts
# "last writer wins" says so with add_last_writer_wins()); and WAIT and
# WAITAOF, which write nothing but answer for the writes made earlier on
# the same connection.  Their retry runs on a new connection.  The server
# waits for the replication offset of the connection's last write, which on
# current servers moves only when one of its commands is propagated: a new
# connection, which has written nothing, waits for nothing, and its WAIT
# replies at once with every connected replica as acknowledging, whatever
# became of the lost connection's writes.  (redis-server 7.0 moves it after
# every command, so there a retry after redis-py's handshake does wait;
# sent first on a connection, WAIT 1 500 replies 1 at once even there.)


def _key(name: object) -> str:
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    if not isinstance(name, str):
        raise TypeError(f"a command name must be a str, not {type(name).__name__}")
    return "|".join(name.upper().split())


def _container_of(key: str) -> None:
    # An added "NAME|SUB" (of a module's command, say) makes NAME a container
    # that _command_key splits.  Called with _lock held.
    container, bar, _ = key.partition("|")
    if bar and container not in _commands.CONTAINERS:
        _containers.add(container)


def add_read_only(*names: str) -> None:
    """Treat these commands as read-only (a module's commands, say):
    ``add_read_only("JSON.GET", "FT.CONFIG GET")``.  A name of two words
    is a subcommand: it matches ``("FT.CONFIG", "GET", ...)`` as well as
    ``("FT.CONFIG GET", ...)``."""
    global READ_ONLY
    keys = [_key(name) for name in names]
    with _lock:
        for key in keys:
            _container_of(key)
        _read_only.update(keys)
        READ_ONLY = frozenset(_read_only)


def add_safe_to_repeat(
    name: str, reason: str, when: Callable[[Sequence[Any]], bool] | None = None
) -> None:
    """Treat the write ``name`` as safe to repeat (running it again leaves
    what running it once leaves, and replies the same, even when another
    client wrote in between), for ``reason``; ``when(args)`` may narrow it
    to some of its forms.  ``args`` is the whole command, name first, as
    redis-py sends it: a name given with arguments in one string
    (``"CONFIG GET"``) split into words.  A name of two words is a
    subcommand, as in :func:`add_read_only`."""
    global SAFE_TO_REPEAT
    if not isinstance(reason, str) or not reason:
        raise ValueError("add_safe_to_repeat() argument 'reason' must be a non-empty str")
    if when is not None and not callable(when):
        raise TypeError("add_safe_to_repeat() argument 'when' must be callable or None")
    key = _key(name)
    with _lock:
        _container_of(key)
        _safe[key] = (reason, when)
        SAFE_TO_REPEAT = MappingProxyType({k: r for k, (r, _) in _safe.items()})


def _word(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.upper() if isinstance(value, str) else None


def _split(args: Sequence[Any]) -> Sequence[Any]:
    """The command as redis-py sends it: its first argument, when a str or
    bytes of several words ("CONFIG GET", "SET k v NX"), split into them."""
    head = args[0]
    if isinstance(head, (str, bytes)):
        words = head.split()
        if len(words) > 1:
            return (*words, *args[1:])
    return args


def _command_key(args: Sequence[Any]) -> str | None:
    """The table's name for a command (``"CONFIG|GET"`` for a subcommand),
    or None when its name is no str or bytes."""
    if not args:
        return None
    args = _split(args)
    name = _word(args[0])
    name = name.strip() if name is not None else None
    if not name:
        return None
    server_container = name in _commands.CONTAINERS
    if len(args) > 1 and (server_container or name in _containers):
        sub = _word(args[1])
        if sub:
            key = f"{name}|{sub}"
            # A container of the program's own ("FT.CONFIG") may be added
            # whole as well: its subcommands that are not added are it.
            if server_container or key in _read_only or key in _safe:
                return key
    return name


def is_safe_to_repeat(args: Sequence[Any]) -> bool:
    """Is the command ``args`` (name first, as redis-py's execute_command
    takes it) read-only, or safe to repeat?"""
    key = _command_key(args)
    if key is None:
        return False
    if key in _read_only:
        return True
    entry = _safe.get(key)
    if entry is None:
        return False
    condition = entry[1]
    return condition is None or bool(condition(_split(args)))


def _plain_set(args: Sequence[Any]) -> bool:
    # SET key value [EX s | PX ms | EXAT | PXAT | KEEPTTL]: not with NX, XX,
    # GET or a compare (IFEQ...): a repeat replies otherwise than the first
    # run.  A value spelled "nx" counts too (it errs towards raising).
    return not any(_word(arg) in _CONDITIONAL_SET for arg in args[3:])


def _no_store(args: Sequence[Any]) -> bool:
    # SORT, GEORADIUS, GEORADIUSBYMEMBER without STORE or STOREDIST: a read.
    # A pattern or member spelled "store" counts too (it errs towards raising).
    return not any(_word(arg) in _STORE for arg in args[2:])


_CONDITIONAL_SET: Final = frozenset({"NX", "XX", "GET", "IFEQ", "IFNE", "IFDEQ", "IFDNE"})
_STORE: Final = frozenset({"STORE", "STOREDIST"})
_Entry = tuple[str, str, Callable[[Sequence[Any]], bool] | None]

#: No effect, or the connection's own state set to the same again.
_SAME_AGAIN: Final[tuple[_Entry, ...]] = (
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
    ("SCRIPT|LOAD", "loads the same script, same SHA1", None),
)

#: Reads of the server's own state: they touch no key, so the server leaves
#: them without the readonly flag, yet they write nothing.
_STATE_READS: Final[tuple[_Entry, ...]] = tuple(
    (name, reason, None)
    for reason, names in (
        ("reads the server's state", "INFO ROLE LASTSAVE CLIENT|LIST"),
        ("reads the server's clock", "TIME"),
        ("reads the configuration", "CONFIG|GET"),
        (
            "reads the connection's state",
            "CLIENT|INFO CLIENT|GETNAME CLIENT|ID CLIENT|GETREDIR CLIENT|TRACKINGINFO",
        ),
        (
            "reads the command table",
            "COMMAND COMMAND|INFO COMMAND|DOCS COMMAND|COUNT COMMAND|LIST "
            "COMMAND|GETKEYS COMMAND|GETKEYSANDFLAGS",
        ),
        ("reads the script cache", "SCRIPT|EXISTS"),
        ("reads the loaded functions", "FUNCTION|LIST FUNCTION|DUMP FUNCTION|STATS"),
        (
            "reads the channels and their subscribers",
            "PUBSUB|CHANNELS PUBSUB|NUMSUB PUBSUB|NUMPAT PUBSUB|SHARDCHANNELS PUBSUB|SHARDNUMSUB",
        ),
        ("reads the slow log", "SLOWLOG|GET SLOWLOG|LEN"),
        (
            "reads the latency monitor",
            "LATENCY|LATEST LATENCY|HISTORY LATENCY|DOCTOR LATENCY|GRAPH LATENCY|HISTOGRAM",
        ),
        ("reads the memory's state", "MEMORY|STATS MEMORY|DOCTOR MEMORY|MALLOC-STATS"),
        ("reads the users and their rules", "ACL|WHOAMI ACL|LIST ACL|GETUSER ACL|USERS ACL|CAT"),
        (
            "reads the cluster's state",
            "CLUSTER|INFO CLUSTER|NODES CLUSTER|SLOTS CLUSTER|SHARDS CLUSTER|MYID "
            "CLUSTER|KEYSLOT CLUSTER|COUNTKEYSINSLOT CLUSTER|GETKEYSINSLOT CLUSTER|LINKS",
        ),
    )
    for name in names.split()
)

#: Flagged write for a form that stores its result: without it, a read.
_READS_UNLESS_STORED: Final[tuple[_Entry, ...]] = (
    ("SORT", "reads, without STORE", _no_store),
    ("GEORADIUS", "reads, without STORE or STOREDIST", _no_store),
    ("GEORADIUSBYMEMBER", "reads, without STORE or STOREDIST", _no_store),
)

for _name, _reason, _when in (*_SAME_AGAIN, *_STATE_READS, *_READS_UNLESS_STORED):
    add_safe_to_repeat(_name, _reason, _when)

# How the reason of every entry add_last_writer_wins() adds begins.
_LWW_REASON: Final = (
    "last writer wins: a repeat can overwrite another client's write made in between"
)
_LAST_WRITER_WINS: Final[tuple[_Entry, ...]] = (
    ("SET", " (plain SET only: not with NX, XX, GET or IFEQ...)", _plain_set),
    ("MSET", "", None),
    ("SETEX", " (its TTL counted from the repeat)", None),
    ("PSETEX", " (its TTL counted from the repeat)", None),
)


def add_last_writer_wins() -> None:
    """Repeat plain ``SET`` (not with ``NX``, ``XX``, ``GET`` or a
    comparison such as ``IFEQ``), ``MSET``, ``SETEX`` and ``PSETEX`` after
    an attempt that may have run, as redis-py does.

    Not the default, because "last writer wins": when our ``SET k A`` loses
    its reply and another client runs ``SET k B`` before the retry, the
    retry makes it ``A`` again, and the other client's write is lost with
    no error anywhere.  With no other writer of those keys, or where the
    newest value does not matter, the repeat is harmless, and a program
    that says so here gets the retry instead of the marked error.  For the
    whole process, from the call on; each entry's reason in
    :data:`SAFE_TO_REPEAT` says "last writer wins: a repeat can overwrite
    another client's write made in between"."""
    for name, detail, when in _LAST_WRITER_WINS:
        add_safe_to_repeat(name, _LWW_REASON + detail, when)


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
    if _call_deadline.not_sent(error):
        return False  # cut by the call's deadline before it was written
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
    send_packed_command._redis_backoff_c_guard = True  # type: ignore[attr-defined]
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
    send_packed_command._redis_backoff_c_guard = True  # type: ignore[attr-defined]
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
        if send is None or _call_deadline.in_chain(send, "_redis_backoff_c_guard"):
            continue
        changes.append((cls, "send_packed_command", send, guard(send)))  # type: ignore[arg-type]
    return changes
