"""A TCP proxy on loopback between a redis-py client and a real redis-server,
that injects faults on cue: for the at-most-once tests.

    proxy = FaultProxy(server.port)     # listens on 127.0.0.1:proxy.port
    with proxy:                         # start() ... stop()
        client = redis.Redis(port=proxy.port)
        proxy.drop_after_request()      # the next request runs, its reply is lost
        proxy.refuse(True)              # connects are refused (ECONNREFUSED)
        proxy.refuse(False)             # ... and accepted again, same port
        proxy.close_all()               # every client connection closed now
        proxy.requests, proxy.commands  # what the clients have sent so far

Each client connection gets a connection of its own to the server (1:1):
when the proxy closes one side it closes the other (a client whose
connection to the server cannot be made is closed at once).  Sync and asyncio
clients alike connect to it as to a server.  Threads and non-blocking
sockets: one thread accepts, one thread per client connection moves the
bytes both ways (through buffers, so that neither direction can block the
other).

What a request is
-----------------

A request is everything a client sends before it waits for a reply: a
request begins with the first bytes the client sends on a connection, or
the first it sends after the server has sent reply bytes on it; every byte
the client sends before the server's next reply bytes belongs to the same
request.  One command is one request; so is a pipeline or a MULTI/EXEC
transaction, which redis-py writes in one go before it reads (were the
server to start replying while the client is still writing a very large
pipeline, the rest would count as a second request).  ``commands`` counts
the RESP commands themselves (each array, or inline command, the client
sent), whatever the requests they came in.

The rule is about bytes on the wire, so two commands that a client sends in
two writes without reading in between (redis-py's handshake on connect:
CLIENT SETINFO twice) are one request unless the server's reply to the
first reaches the proxy before the second command does: arm
``drop_after_request`` once the client is connected (after a PING, say),
when what it counts is exact.

``drop_after_request(n)``: the next ``n`` requests (of any connection) are
dropped.  The proxy forwards such a request to the server, throws away
every byte the server replies, and forwards (as part of the same request)
anything more the client sends meanwhile.  Once the server has replied at
least one byte and neither side has sent anything for ``QUIET`` seconds
(50 ms: the server has executed the whole request, the EXEC of a
transaction included, whose reply comes last), it closes the client's
connection (the client reads EOF, having seen none of the reply) and its
connection to the server.  A request the server never replies to (a
blocking command that does not return) is never dropped.
"""

from __future__ import annotations

import math
import select
import socket
import threading
import time
from types import TracebackType

import pytest

__all__ = ["QUIET", "FaultProxy"]

#: How long both sides of a dropped request must stay silent, after the
#: server's first reply byte, before the proxy closes the connection.
QUIET = 0.05

_HOST = "127.0.0.1"
_CHUNK = 65536
# A buffer this full stops the proxy reading from the side that fills it.
_HIGH_WATER = 1 << 20


def _wait(
    readers: list[socket.socket], writers: list[socket.socket], timeout_ms: int | None
) -> tuple[set[socket.socket], set[socket.socket]]:
    """poll(): which of `readers` can be read (or are at EOF, or failed: a
    recv() will tell) and which of `writers` can be written, waiting at most
    `timeout_ms` (None: until one can)."""
    poller = select.poll()
    masks: dict[socket.socket, int] = {}
    for sock in readers:
        masks[sock] = masks.get(sock, 0) | select.POLLIN
    for sock in writers:
        masks[sock] = masks.get(sock, 0) | select.POLLOUT
    by_fd = {}
    for sock, mask in masks.items():
        poller.register(sock, mask)
        by_fd[sock.fileno()] = sock
    readable: set[socket.socket] = set()
    writable: set[socket.socket] = set()
    for fd, events in poller.poll(timeout_ms):
        sock = by_fd[fd]
        if events & select.POLLOUT:
            writable.add(sock)
        if events & (select.POLLIN | select.POLLHUP | select.POLLERR) and sock in readers:
            readable.add(sock)
        elif events & (select.POLLHUP | select.POLLERR) and sock in writers:
            writable.add(sock)  # send() raises the error
    return readable, writable


class _CommandCounter:
    """Counts the RESP commands in a client's byte stream, fed in chunks:
    arrays of bulk strings (``*2\\r\\n$3\\r\\nGET\\r\\n$1\\r\\nk\\r\\n``, what
    clients send) and inline commands (``PING\\r\\n``).  On bytes that are
    neither, it stops counting (`broken`) rather than guess."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.broken = False

    def feed(self, data: bytes) -> int:
        """Add `data`; return how many commands it completed."""
        if self.broken:
            return 0
        self._buffer += data
        done = 0
        while self._buffer:
            end = self._command_end()
            if end is None:
                break
            if end < 0:
                self.broken = True
                self._buffer.clear()
                break
            command = bytes(self._buffer[:end])
            del self._buffer[:end]
            # An empty array, or an empty line, is no command (the server skips it).
            if command.startswith(b"*"):
                done += not command.startswith((b"*0\r", b"*-"))
            else:
                done += bool(command.strip())
        return done

    def _command_end(self) -> int | None:
        """The length of the first complete command in the buffer, None if
        it is not complete yet, -1 if it is not RESP."""
        buffer = self._buffer
        if buffer[:1] != b"*":
            newline = buffer.find(b"\n")
            return None if newline < 0 else newline + 1
        line_end = buffer.find(b"\r\n")
        if line_end < 0:
            return None
        try:
            count = int(buffer[1:line_end])
        except ValueError:
            return -1
        position = line_end + 2
        for _ in range(max(count, 0)):
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            if buffer[position : position + 1] != b"$":
                return -1
            try:
                length = int(buffer[position + 1 : line_end])
            except ValueError:
                return -1
            position = line_end + 2 + max(length, 0) + 2
            if position > len(buffer):
                return None
        return position


class _Link:
    """One client connection and its connection to the server, served by a
    thread of its own."""

    def __init__(self, proxy: FaultProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.aborted = False
        self.thread = threading.Thread(target=self._run, name="fault-proxy-link", daemon=True)

    def abort(self) -> None:
        """Close both connections now, from another thread: shutdown() wakes
        the link's poll(); its thread closes the sockets."""
        self.aborted = True
        for sock in (self.client, self.upstream):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _run(self) -> None:
        try:
            try:
                self.upstream = socket.create_connection(
                    (_HOST, self.proxy.upstream_port), timeout=5
                )
            except OSError:
                return
            if self.aborted:  # close_all() came before the upstream existed
                return
            self._pump(self.client, self.upstream)
        except OSError:
            pass  # a reset, or a socket shut down by abort(): the link ends
        finally:
            for sock in (self.client, self.upstream):
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    sock.close()
            self.proxy._forget(self)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        client.setblocking(False)
        upstream.setblocking(False)
        counter = _CommandCounter()
        to_server = bytearray()
        to_client = bytearray()
        client_open = upstream_open = True
        in_request = False  # client bytes seen since the server's last reply bytes
        dropping = False  # the current request is being dropped
        replied = False  # ... and the server has replied to it
        last = 0.0  # when either side last sent bytes (while dropping)

        while not self.aborted:
            if not client_open and not to_server:
                return  # the client is gone, and all it sent was forwarded
            if not upstream_open and not to_client:
                return  # the server is gone, and all it sent was delivered
            readers = []
            if client_open and len(to_server) < _HIGH_WATER:
                readers.append(client)
            if upstream_open and len(to_client) < _HIGH_WATER:
                readers.append(upstream)
            writers = []
            if to_server and upstream_open:
                writers.append(upstream)
            if to_client and client_open:
                writers.append(client)
            timeout = None
            if dropping and replied:
                timeout = max(0, math.ceil((last + QUIET - time.monotonic()) * 1000))
            readable, writable = _wait(readers, writers, timeout)

            if client in readable:
                data = client.recv(_CHUNK)
                if not data:
                    client_open = False
                    to_client.clear()
                else:
                    if not in_request:
                        in_request = True
                        dropping = self.proxy._new_request()
                    self.proxy._count_commands(counter.feed(data))
                    to_server += data
                    last = time.monotonic()
            if upstream in readable:
                data = upstream.recv(_CHUNK)
                if not data:
                    upstream_open = False
                elif dropping:
                    replied = True
                    last = time.monotonic()
                else:
                    in_request = False
                    to_client += data
            if upstream in writable:
                del to_server[: upstream.send(to_server)]
            if client in writable:
                del to_client[: client.send(to_client)]

            if dropping and replied and not to_server and time.monotonic() >= last + QUIET:
                self.proxy._dropped_one()
                return
            if dropping and not upstream_open:
                return  # the server went away before replying: the client sees EOF too


class FaultProxy:
    """A TCP proxy from 127.0.0.1:`port` to the server on 127.0.0.1:`upstream_port`.

    The listening socket is bound when the proxy is made (so `port` is
    known at once); connections are served from start() to stop().  The
    counters are totals over every connection since the proxy was made."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._lock = threading.Condition()
        self._listener: socket.socket | None = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._wake_read, self._wake_write = socket.socketpair()
        self._acceptor: threading.Thread | None = None
        self._links: set[_Link] = set()
        self._refusing = False
        self._stopping = False
        self._drops = 0
        self._requests = 0
        self._commands = 0
        self._connections = 0
        self._dropped = 0
        self._listen_error: OSError | None = None

    # -- the API ------------------------------------------------------------

    def start(self) -> None:
        """Serve connections (in a thread of the proxy's own)."""
        with self._lock:
            if self._acceptor is not None:
                raise RuntimeError("the proxy was started already")
            self._acceptor = threading.Thread(
                target=self._accept_loop, name="fault-proxy-accept", daemon=True
            )
        self._acceptor.start()

    def stop(self) -> None:
        """Stop listening and close every connection; the proxy is done."""
        with self._lock:
            self._stopping = True
        self._wake()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self.close_all()
        self._wake_read.close()
        self._wake_write.close()

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def drop_after_request(self, n: int = 1) -> None:
        """Drop the next `n` requests: each runs on the server, its reply is
        thrown away and its client connection closed (see the module's
        docstring).  0 disarms; a new call replaces the count left."""
        if n < 0:
            raise ValueError("n must be 0 or more")
        with self._lock:
            self._drops = n

    def refuse(self, refusing: bool) -> None:
        """While True, nothing listens on `port`: a connect gets
        ECONNREFUSED (ConnectionRefusedError).  False listens again on the
        same port.  Connections already served are left alone (close_all()
        closes them); one the kernel had completed but the proxy not yet
        accepted is reset with the listening socket.  Returns once the
        change is in effect."""
        with self._lock:
            if self._acceptor is None or self._stopping:
                raise RuntimeError("refuse() needs a started proxy")
            self._refusing = refusing
            self._listen_error = None
            self._wake()
            if not self._lock.wait_for(
                lambda: (self._listener is None) == refusing or self._listen_error is not None,
                timeout=5,
            ):
                raise RuntimeError("the proxy's acceptor did not answer")
            if self._listen_error is not None:
                raise self._listen_error

    def close_all(self) -> None:
        """Close every open client connection, and its connection to the
        server, now (as a server restart would).  Returns once they are
        closed: the clients' next read sees EOF."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.abort()
        for link in links:
            link.thread.join(timeout=5)

    @property
    def requests(self) -> int:
        """How many requests the clients have sent (see the module's docstring)."""
        with self._lock:
            return self._requests

    @property
    def commands(self) -> int:
        """How many RESP commands the clients have sent."""
        with self._lock:
            return self._commands

    @property
    def connections(self) -> int:
        """How many client connections the proxy has accepted."""
        with self._lock:
            return self._connections

    @property
    def dropped(self) -> int:
        """How many requests drop_after_request() has dropped so far."""
        with self._lock:
            return self._dropped

    # -- inside -------------------------------------------------------------

    @staticmethod
    def _listen(port: int) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((_HOST, port))
            listener.listen(64)
        except OSError:
            listener.close()
            raise
        return listener

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass

    def _accept_loop(self) -> None:
        """Owns the listening socket: accepts, and closes or reopens it as
        refuse() asks (so that no other thread closes a socket it waits on)."""
        while True:
            with self._lock:
                if self._stopping:
                    return
                if self._refusing and self._listener is not None:
                    self._listener.close()
                    self._listener = None
                elif not self._refusing and self._listener is None:
                    try:
                        self._listener = self._listen(self.port)
                        self._listen_error = None
                    except OSError as error:  # the port was taken meanwhile
                        self._listen_error = error
                self._lock.notify_all()
                listener = self._listener
            waiting: list[socket.socket] = [self._wake_read]
            if listener is not None:
                waiting.append(listener)
            readable, _ = _wait(waiting, [], None)
            if self._wake_read in readable:
                self._wake_read.recv(4096)
            if listener is not None and listener in readable:
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                link = _Link(self, client)
                with self._lock:
                    if self._stopping or self._refusing:
                        client.close()
                        continue
                    self._links.add(link)
                    self._connections += 1
                    # Started under the lock: close_all() joins only started threads.
                    link.thread.start()

    def _new_request(self) -> bool:
        """A request begins: count it; True when it is to be dropped."""
        with self._lock:
            self._requests += 1
            if self._drops > 0:
                self._drops -= 1
                return True
            return False

    def _count_commands(self, count: int) -> None:
        if count:
            with self._lock:
                self._commands += count

    def _dropped_one(self) -> None:
        with self._lock:
            self._dropped += 1

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)


@pytest.fixture
def proxy(redis_server: object) -> object:
    """A FaultProxy in front of the test's redis-server (the redis_server
    fixture of incr_stream), stopped after the test."""
    with FaultProxy(redis_server.port) as running:  # type: ignore[attr-defined]
        yield running
