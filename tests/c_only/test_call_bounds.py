"""csrc/call_bounds.c: the C wrappers patch() puts on redis-py's sync
command entries and connection waits while it bounds them by the
command's deadline.  Each makes the common call itself and hands the rest
to the Python wrapper (`slow`); here, with stand-ins for the client, the
connection and the socket, each path is shown to reach the one it should,
with the socket's timeout and the context variable as _call_deadline's
Python wrappers leave them (tests/integration/test_deadline_whole_call.py
runs both against a real server)."""

from __future__ import annotations

import inspect
import math
import sys
import time

import pytest
import redis.exceptions
from leakcheck import assert_no_leak

from redis_backoff_c import _call_deadline, _impl
from redis_backoff_c.backoff import ConstantBackoff
from redis_backoff_c.retry import Retry

speedups = _impl.speedups
pytestmark = pytest.mark.skipif(speedups is None, reason="the C extension is not in use")
ENTRY, CONNECT, SEND, READ, ASYNC_ENTRY, ASYNC_WAIT = range(6)
LOWERED = "_redis_backoff_c_lowered"


@pytest.fixture
def bound():
    """The bounds installed (the C loops and wrappers read the variable)."""
    _call_deadline.bind(True)
    try:
        yield _call_deadline.CALL_DEADLINE
    finally:
        _call_deadline.bind(False)


def under(var, seconds, call):
    token = var.set(time.monotonic() + seconds)
    try:
        return call()
    finally:
        var.reset(token)


class Calls:
    """The original and the slow function, each noting its calls."""

    def __init__(self, result="original"):
        self.seen = []
        self.result = result

    def original(self, owner, *args, **kwargs):
        self.seen.append(("original", args, kwargs))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result

    def slow(self, owner, *args, **kwargs):
        self.seen.append(("slow", args, kwargs))
        return "slow"

    def took(self):
        return [seen[0] for seen in self.seen]


def method_of(kind, calls, extra=None):
    """A class whose method `m` is the C wrapper of `kind`."""
    wrapper = speedups._CallBound(kind, calls.original, calls.slow, extra)
    return type("Owner", (), {"m": wrapper})


class Socket:
    def __init__(self, timeout=None):
        self.timeout = timeout
        self.set = []

    def gettimeout(self):
        return self.timeout

    def settimeout(self, value):
        self.set.append(value)
        self.timeout = value


# --- The type ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        (6, print, print, None),
        (-1, print, print, None),
        (ENTRY, print, print, None),  # an entry needs the blocking names
        (READ, print, print, None),  # a read needs on_cut
        (SEND, print, print, print),
        (SEND, 1, print, None),
        (SEND, print, "slow", None),
    ],
)
def test_a_bound_is_refused_bad_arguments(args):
    with pytest.raises(TypeError, match=r"_CallBound\(kind, original, slow, extra\)"):
        speedups._CallBound(*args)


def test_a_bound_takes_no_keywords_and_needs_its_owner():
    with pytest.raises(TypeError, match="no keyword arguments"):
        speedups._CallBound(kind=SEND, original=print, slow=print, extra=None)
    with pytest.raises(TypeError, match="client or connection first"):
        speedups._CallBound(SEND, print, print, None)()


def test_a_bound_looks_like_the_function_it_wraps():
    def read_response(self):
        """redis-py's read."""

    wrapper = speedups._CallBound(SEND, read_response, print, None)
    assert wrapper.__wrapped__ is read_response
    assert wrapper._redis_backoff_c_wraps is read_response
    assert wrapper._redis_backoff_c_bounds is True
    assert wrapper.__name__ == "read_response" and wrapper.__doc__ == "redis-py's read."
    assert wrapper.__qualname__ == read_response.__qualname__
    assert _call_deadline.in_chain(wrapper, "_redis_backoff_c_bounds")


def test_the_constants_are_the_python_wrappers():
    least, drift, never_waits = speedups._BOUNDS_CONSTANTS
    assert least == _call_deadline._LEAST
    assert drift == _call_deadline._DRIFT
    assert never_waits == _call_deadline._NEVER_WAITS


def test_without_the_bounds_every_kind_calls_the_original():
    kinds = (
        (ENTRY, frozenset()), (CONNECT, None), (SEND, None), (READ, print),
        (ASYNC_ENTRY, None), (ASYNC_WAIT, None),
    )  # fmt: skip
    for kind, extra in kinds:
        calls = Calls()
        owner = method_of(kind, calls, extra)()
        owner._sock = None
        assert owner.m("GET", "k", keyword=1) == "original"
        assert calls.seen == [("original", ("GET", "k"), {"keyword": 1})]


# --- The entry -----------------------------------------------------------


class Pool:
    def __init__(self, retry):
        self.connection_kwargs = {"retry": retry}


def client_of(calls, retry, connection=None):
    cls = method_of(ENTRY, calls, frozenset(_call_deadline._BLOCKING))
    client = cls()
    client.connection = connection
    client.connection_pool = Pool(retry)
    return client


def test_an_entry_with_a_deadline_sets_it_for_the_call(bound):
    seen = []
    calls = Calls()
    calls.original = lambda client, *args: seen.append(bound.get() - time.monotonic())
    client = client_of(calls, Retry(ConstantBackoff(0), 1, deadline=5))
    client.m("GET", "k")
    assert len(seen) == 1 and 4.9 < seen[0] <= 5.0
    assert bound.get(None) is None  # reset after


def test_an_entry_with_an_infinite_deadline_sets_none(bound):
    seen = []
    calls = Calls()
    calls.original = lambda client, *args: seen.append(bound.get(None))
    client = client_of(calls, Retry(ConstantBackoff(0), 1, deadline=math.inf))
    client.m("GET", "k")
    assert seen == [None]


def test_an_entry_inside_an_earlier_deadline_keeps_it(bound):
    seen = []
    calls = Calls()
    calls.original = lambda client, *args: seen.append(bound.get() - time.monotonic())
    client = client_of(calls, Retry(ConstantBackoff(0), 1, deadline=5))
    under(bound, 1.0, lambda: client.m("GET", "k"))
    assert 0.9 < seen[0] <= 1.0


def test_an_entry_resets_the_deadline_when_the_command_fails(bound):
    error = redis.exceptions.ConnectionError("gone")
    calls = Calls(error)
    client = client_of(calls, Retry(ConstantBackoff(0), 1, deadline=5))
    with pytest.raises(redis.exceptions.ConnectionError) as raised:
        client.m("SET", "k", "v")
    assert raised.value is error and bound.get(None) is None


@pytest.mark.parametrize(
    ("retry", "args", "took"),
    [
        (Retry(ConstantBackoff(0), 1), ("GET", "k"), "original"),  # no deadline
        (None, ("GET", "k"), "original"),
        (Retry(ConstantBackoff(0), 1, deadline=5), ("BLPOP", "k", 5), "slow"),
        (Retry(ConstantBackoff(0), 1, deadline=5), ("get", "k"), "slow"),
        (Retry(ConstantBackoff(0), 1, deadline=5), (b"GET", "k"), "slow"),
        (Retry(ConstantBackoff(0), 1, deadline=5), (), "slow"),
        (redis.retry.Retry(ConstantBackoff(0), 1), ("GET", "k"), "slow"),  # not ours
    ],
)
def test_an_entry_leaves_to_python_what_it_does_not_read(bound, retry, args, took):
    calls = Calls()
    client = client_of(calls, retry)
    client.m(*args)
    assert calls.took() == [took]


def test_an_entry_reads_the_held_connections_retry(bound):
    class Connection:
        retry = Retry(ConstantBackoff(0), 1)

    calls = Calls()
    client = client_of(calls, Retry(ConstantBackoff(0), 1, deadline=5), Connection())
    client.m("GET", "k")
    assert calls.took() == ["original"]  # the held connection's: no deadline


def test_an_entry_of_an_unusual_client_is_pythons(bound):
    calls = Calls()
    client = method_of(ENTRY, calls, frozenset())()  # no connection attribute
    client.m("GET", "k")
    assert calls.took() == ["slow"]


def test_an_entry_passes_on_what_reading_the_client_raised(bound):
    class Client:
        m = speedups._CallBound(ENTRY, print, print, frozenset())

        @property
        def connection(self):
            raise KeyError("connection")

    with pytest.raises(KeyError, match="connection"):
        Client().m("GET", "k")


# --- asyncio: redis-py's coroutine function unless a deadline ------------


def test_an_asyncio_entry_calls_the_original_without_a_deadline(bound):
    calls = Calls()
    cls = method_of(ASYNC_ENTRY, calls)
    client = cls()
    client.connection = None
    client.connection_pool = Pool(Retry(ConstantBackoff(0), 1))
    client.m("GET", "k")
    client.connection_pool = Pool(Retry(ConstantBackoff(0), 1, deadline=5))
    client.m("GET", "k")  # the deadline is set for the coroutine's run: Python's
    assert calls.took() == ["original", "slow"]


def test_an_asyncio_wait_is_pythons_under_a_deadline(bound):
    calls = Calls()
    connection = method_of(ASYNC_WAIT, calls)()
    connection.m(b"x")
    under(bound, 5, lambda: connection.m(b"x"))
    assert calls.took() == ["original", "slow"]


@pytest.mark.skipif(sys.version_info < (3, 12), reason="inspect reads the marker from 3.12")
@pytest.mark.parametrize("kind", [ASYNC_ENTRY, ASYNC_WAIT])
def test_an_asyncio_kind_is_a_coroutine_function(kind):
    async def read_response(self):
        pass

    wrapper = speedups._CallBound(kind, read_response, read_response, None)
    assert inspect.iscoroutinefunction(wrapper)
    assert not hasattr(speedups._CallBound(SEND, print, print, None), "_is_coroutine_marker")


# --- The waits -----------------------------------------------------------


def connection_of(kind, calls, sock, socket_timeout=None, extra=None):
    connection = method_of(kind, calls, extra)()
    connection._sock = sock
    connection.socket_timeout = socket_timeout
    return connection


def test_a_connect_is_pythons_only_when_it_connects_under_a_deadline(bound):
    calls = Calls()
    connected = connection_of(CONNECT, calls, Socket())
    idle = connection_of(CONNECT, calls, None)
    under(bound, 5, connected.m)
    under(bound, 5, idle.m)
    idle.m()
    assert calls.took() == ["original", "slow", "original"]


@pytest.mark.parametrize(
    ("command", "seconds", "sock", "took"),
    [
        ([b"*1\r\n", b"$4\r\nPING\r\n"], 5, Socket(), "original"),
        (b"*1\r\n$4\r\nPING\r\n", 5, Socket(), "original"),
        ([b"x" * (64 * 1024)], 5, Socket(), "slow"),  # it may wait
        ([b"x", memoryview(b"y")], 5, Socket(), "original"),
        ([b"x", memoryview(b"y" * (64 * 1024))], 5, Socket(), "slow"),
        ([b"x", memoryview(b"yyyy").cast("I")], 5, Socket(), "slow"),  # not bytes
        ([b"x", bytearray(b"y")], 5, Socket(), "slow"),
        ("PING", 5, Socket(), "slow"),
        ([b"PING"], -1, Socket(), "slow"),  # past: cut before it is written
        ([b"PING"], 5, None, "slow"),  # not connected
    ],
)
def test_a_write_under_a_deadline(bound, command, seconds, sock, took):
    calls = Calls()
    connection = connection_of(SEND, calls, sock)
    under(bound, seconds, lambda: connection.m(command, check_health=False))
    assert calls.took() == [took]
    assert calls.seen[0][1:] == ((command,), {"check_health": False})


def test_a_wait_without_a_deadline_is_pythons_when_a_timeout_is_to_put_back(bound):
    for kind, extra in ((SEND, None), (READ, _call_deadline._after_cut)):
        calls = Calls()
        connection = connection_of(kind, calls, Socket(), None, extra)
        connection.m(b"x")
        connection.__dict__[LOWERED] = connection._sock
        connection.m(b"x")
        assert calls.took() == ["original", "slow"]


def test_a_read_keeps_the_socket_near_the_time_left(bound):
    calls = Calls()
    sock = Socket()
    connection = connection_of(READ, calls, sock, None, _call_deadline._after_cut)
    assert under(bound, 2.0, connection.m) == "original"
    assert len(sock.set) == 1 and 1.9 < sock.set[0] <= 2.0
    assert connection.__dict__[LOWERED] is sock
    under(bound, 2.0, connection.m)  # within the drift: left as it is
    assert len(sock.set) == 1
    under(bound, 1.0, connection.m)
    assert len(sock.set) == 2 and 0.9 < sock.set[1] <= 1.0


def test_a_read_whose_own_timeout_comes_first_puts_it_back(bound):
    calls = Calls()
    sock = Socket(timeout=3.0)
    connection = connection_of(READ, calls, sock, 0.5, _call_deadline._after_cut)
    connection.__dict__[LOWERED] = sock
    under(bound, 2.0, connection.m)
    assert sock.set == [0.5] and LOWERED not in connection.__dict__
    under(bound, 2.0, connection.m)
    assert sock.set == [0.5]


@pytest.mark.parametrize("sock", [None, "missing"])
def test_a_read_not_connected(bound, sock):
    calls = Calls()
    connection = connection_of(READ, calls, sock, None, _call_deadline._after_cut)
    if sock == "missing":
        del connection._sock
    under(bound, 2.0, connection.m)
    assert calls.took() == ["original" if sock is None else "slow"]


def test_a_read_with_an_unusual_own_timeout_is_pythons(bound):
    calls = Calls()
    connection = connection_of(READ, calls, Socket(), "2", _call_deadline._after_cut)
    under(bound, 2.0, connection.m)
    assert calls.took() == ["slow"] and connection._sock.set == []


def test_a_read_the_deadline_cut_drops_the_connection(bound):
    error = redis.exceptions.TimeoutError("Timeout reading from socket")
    calls = Calls(error)
    sock = Socket()
    connection = connection_of(READ, calls, sock, None, _call_deadline._after_cut)
    dropped = []
    connection.disconnect = lambda: dropped.append(True)
    with pytest.raises(redis.exceptions.TimeoutError) as raised:
        under(bound, 0.5, connection.m)
    assert raised.value is error and dropped == [True]


def test_a_read_that_failed_otherwise_keeps_the_connection(bound):
    error = redis.exceptions.ResponseError("ERR")
    calls = Calls(error)
    connection = connection_of(READ, calls, Socket(), None, _call_deadline._after_cut)
    connection.disconnect = lambda: pytest.fail("dropped")
    with pytest.raises(redis.exceptions.ResponseError):
        under(bound, 0.5, connection.m)


def reader_of(use_c, calls, socket_timeout):
    """A connection whose read is the C wrapper (use_c) or the Python one
    it hands the rest to, either way over `calls.original`."""
    slow = _call_deadline._sync_read(calls.original)
    if use_c:
        read = speedups._CallBound(READ, calls.original, slow, _call_deadline._after_cut)
    else:
        read = slow
    connection = type("Connection", (), {"m": read})()
    connection._sock = Socket()
    connection.socket_timeout = socket_timeout
    return connection


@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
def test_a_drop_that_fails_raises_its_error_chained_as_in_an_except_block(bound, use_c):
    """The drop runs as in the Python wrapper's except block: the read's
    error is the one handled, and what the drop raises chains to it."""
    error = redis.exceptions.TimeoutError("cut")
    connection = reader_of(use_c, Calls(error), None)
    handled = []

    def disconnect():
        handled.append(sys.exc_info()[1])
        try:
            raise KeyError("inner")
        except KeyError:
            raise OSError("close failed")  # noqa: B904 (its context: the KeyError)

    connection.disconnect = disconnect
    with pytest.raises(OSError, match="close failed") as raised:
        under(bound, 0.5, connection.m)
    assert handled == [error]
    inner = raised.value.__context__
    assert isinstance(inner, KeyError) and inner.__context__ is error


@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
def test_a_huge_int_timeout_is_read_as_python_reads_it(bound, use_c):
    connection = reader_of(use_c, Calls(), 10**400)
    under(bound, 1.0, connection.m)
    assert len(connection._sock.set) == 1 and 0.9 < connection._sock.set[0] <= 1.0


@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
def test_a_read_whose_socket_is_within_the_time_left_reads_nothing_more(bound, use_c):
    """The socket's timeout as redis-py left it (no note: no deadline
    lowered it) within the time left: nothing is set or noted, and the
    connection's socket_timeout, a Python property in redis-py, is not
    read.  Beyond the time left, or with the note, it is read again."""
    reads = []

    def make(timeout):
        connection = reader_of(use_c, Calls(), None)
        del connection.socket_timeout
        type(connection).socket_timeout = property(lambda self: reads.append(timeout) or timeout)
        connection._sock.timeout = timeout
        return connection

    connection = make(1.5)
    assert under(bound, 2.0, connection.m) == "original"
    assert reads == [] and connection._sock.set == [] and LOWERED not in connection.__dict__
    connection = make(3.0)
    under(bound, 2.0, connection.m)
    assert reads == [3.0] and connection.__dict__[LOWERED] is connection._sock
    under(bound, 2.0, connection.m)  # noted: the own timeout is read
    assert reads == [3.0, 3.0]
    connection = make(None)
    under(bound, 2.0, connection.m)
    assert reads[-1] is None and 1.9 < connection._sock.set[0] <= 2.0


class HostileSocket(Socket):
    """A socket whose gettimeout() gives no number, or raises (a new
    error each time: one instance raised again would carry every earlier
    traceback, which the refleak runs would count as a leak)."""

    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    def gettimeout(self):
        if isinstance(self.answer, type):
            raise self.answer("gettimeout")
        return self.answer


@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
@pytest.mark.parametrize(
    "answer, raised",
    [("5", TypeError), (ValueError, ValueError)],
    ids=["str", "raises"],
)
def test_a_socket_whose_timeout_is_unreadable_fails_the_read_alike(bound, use_c, answer, raised):
    """The read does not run, and the error is the socket's (or Python's
    for a comparison of a str with a float), from the C wrapper as from
    the Python one; nothing is set or noted."""
    calls = Calls()
    connection = reader_of(use_c, calls, None)
    connection._sock = HostileSocket(answer)
    with pytest.raises(raised):
        under(bound, 2.0, connection.m)
    assert calls.took() == [] and connection._sock.set == [] and LOWERED not in connection.__dict__


# --- References ----------------------------------------------------------


def test_no_path_leaks(bound):
    entry_calls, read_calls, send_calls = Calls(), Calls(), Calls()
    failing_calls = Calls()
    client = client_of(entry_calls, Retry(ConstantBackoff(0), 1, deadline=5))
    reader = connection_of(READ, read_calls, Socket(), None, _call_deadline._after_cut)
    writer = connection_of(SEND, send_calls, Socket())
    failing = connection_of(READ, failing_calls, Socket(), None, _call_deadline._after_cut)
    failing.disconnect = lambda: None

    def run():
        client.m("GET", "k")
        client.m("BLPOP", "k", 1)
        under(bound, 2.0, reader.m)
        reader.m()
        under(bound, 2.0, lambda: writer.m([b"PING"]))
        failing_calls.result = redis.exceptions.TimeoutError("cut")  # a new one each time
        try:
            under(bound, 2.0, failing.m)
        except redis.exceptions.TimeoutError:
            pass
        for calls in (entry_calls, read_calls, send_calls, failing_calls):
            calls.seen.clear()
        for connection in (reader, writer, failing):
            connection._sock.set.clear()

    assert_no_leak(run)
