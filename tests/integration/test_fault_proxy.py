"""The fault proxy (fault_proxy.py) against a real redis-server, and the
problem the at-most-once policy is to fix, shown through it: a retried
write whose first attempt ran on the server runs twice.

The raw-socket tests speak RESP themselves, so that what the proxy counts
and drops is exactly what they sent (redis-py adds a handshake on connect).
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import redis
import redis.asyncio
import redis.asyncio.retry
import redis.backoff
import redis.retry
from fault_proxy import proxy as proxy  # the fixture
from incr_stream import redis_server as redis_server  # the fixture

TIMEOUT = 5.0


@pytest.fixture
def server_client(redis_server):
    """A client of the server itself, past the proxy."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=TIMEOUT)
    yield client
    client.close()


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg.encode()))
    return b"".join(out)


class Raw:
    """A client socket that sends RESP commands and reads one-line replies."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.stream = self.sock.makefile("rb")

    def send(self, *commands):
        """All the commands in one write (as a pipeline is sent)."""
        self.sock.sendall(b"".join(encode(*command) for command in commands))

    def line(self):
        return self.stream.readline()

    def close(self):
        self.stream.close()
        self.sock.close()


@pytest.fixture
def raw(proxy):
    opened = []

    def connect():
        opened.append(Raw(proxy.port))
        return opened[-1]

    yield connect
    for conn in opened:
        conn.close()


def test_forwards_commands(proxy, server_client):
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=TIMEOUT)
    assert client.set("key", "value")
    assert client.get("key") == b"value"
    with client.pipeline() as pipe:
        assert pipe.incr("n").incr("n").get("n").execute() == [1, 2, b"2"]
    assert server_client.get("key") == b"value"
    assert proxy.connections == 1
    client.close()


def test_counts_requests_and_commands(proxy, raw):
    conn = raw()
    conn.send(("PING",))
    assert conn.line() == b"+PONG\r\n"
    conn.send(("SET", "a", "1"), ("INCR", "a"), ("PING",))  # one write: one request
    assert [conn.line() for _ in range(3)] == [b"+OK\r\n", b":2\r\n", b"+PONG\r\n"]
    conn.sock.sendall(b"PING\r\n")  # an inline command counts too
    assert conn.line() == b"+PONG\r\n"
    assert (proxy.requests, proxy.commands) == (3, 5)


def test_drop_after_request_runs_the_write_and_closes(proxy, raw, server_client):
    conn = raw()
    conn.send(("PING",))
    assert conn.line() == b"+PONG\r\n"
    proxy.drop_after_request()
    conn.send(("INCR", "n"))
    assert conn.line() == b""  # EOF: no reply
    assert server_client.get("n") == b"1"  # but the INCR ran
    assert (proxy.dropped, proxy.requests, proxy.commands) == (1, 2, 2)
    # Armed for one request only: the next connection is served.
    again = raw()
    again.send(("INCR", "n"))
    assert again.line() == b":2\r\n"
    assert proxy.dropped == 1


def test_a_transaction_is_one_request(proxy, raw, server_client):
    proxy.drop_after_request(1)
    conn = raw()
    conn.send(("MULTI",), ("INCR", "t"), ("INCR", "t"), ("EXEC",))
    assert conn.line() == b""
    assert server_client.get("t") == b"2"  # the whole transaction ran
    assert (proxy.dropped, proxy.requests, proxy.commands) == (1, 1, 4)


def test_a_redis_py_transaction_runs_and_its_reply_is_lost(proxy, server_client):
    no_retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=no_retry, socket_timeout=TIMEOUT)
    assert client.ping()  # connected: the handshake is not what gets dropped
    proxy.drop_after_request(1)
    with client.pipeline(transaction=True) as pipe:
        pipe.incr("t").incr("t").incr("t")
        with pytest.raises(redis.ConnectionError):
            pipe.execute()
    assert server_client.get("t") == b"3"
    assert proxy.dropped == 1
    client.close()


def test_drops_the_next_n_requests_of_any_connection(proxy, raw, server_client):
    proxy.drop_after_request(2)
    for _ in range(2):
        conn = raw()
        conn.send(("INCR", "n"))
        assert conn.line() == b""
    conn = raw()
    conn.send(("INCR", "n"))
    assert conn.line() == b":3\r\n"
    assert proxy.dropped == 2


def test_refuse(proxy, raw):
    proxy.refuse(True)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT)
    client = redis.Redis(
        host="127.0.0.1",
        port=proxy.port,
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
        socket_timeout=TIMEOUT,
    )
    with pytest.raises(redis.ConnectionError):
        client.ping()
    proxy.refuse(False)  # the same port again
    conn = raw()
    conn.send(("PING",))
    assert conn.line() == b"+PONG\r\n"
    assert client.ping()
    client.close()


def test_refuse_leaves_open_connections_alone(proxy, raw):
    conn = raw()
    conn.send(("PING",))  # served: the proxy has accepted the connection
    assert conn.line() == b"+PONG\r\n"
    proxy.refuse(True)
    conn.send(("PING",))
    assert conn.line() == b"+PONG\r\n"


def test_close_all(proxy, raw):
    conns = [raw() for _ in range(3)]
    for conn in conns:
        conn.send(("PING",))
        assert conn.line() == b"+PONG\r\n"
    proxy.close_all()
    for conn in conns:
        assert conn.line() == b""  # EOF
    conn = raw()  # still listening
    conn.send(("PING",))
    assert conn.line() == b"+PONG\r\n"
    assert proxy.connections == 4


def test_asyncio_client(proxy, server_client):
    async def main():
        no_retry = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=proxy.port, retry=no_retry, socket_timeout=TIMEOUT
        )
        try:
            assert await client.set("key", "value")
            assert await client.get("key") == b"value"
            proxy.drop_after_request(1)
            with pytest.raises(redis.ConnectionError):
                await client.incr("n")
        finally:
            await client.aclose()

    asyncio.run(main())
    assert server_client.get("n") == b"1"
    assert proxy.dropped == 1


# The problem: redis-py's Retry retries a write whose reply was lost, though
# it ran. redis.retry.Retry and redis.backoff are looked up when the test
# runs: under `pytest --redis-backoff-c` (patch()) they are the C classes,
# which by default retry exactly as redis-py's do, and the write runs twice
# just the same.


def test_retry_runs_a_write_twice(proxy, server_client):
    retry = redis.retry.Retry(redis.backoff.ExponentialBackoff(), 3)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=retry, socket_timeout=TIMEOUT)
    assert client.ping()
    proxy.drop_after_request(1)
    assert client.incr("n") == 2  # the client saw one INCR ...
    assert server_client.get("n") == b"2"  # ... the server ran two
    assert proxy.dropped == 1
    assert proxy.connections == 2  # the retry reconnected
    client.close()


def test_asyncio_retry_runs_a_write_twice(proxy, server_client):
    async def main():
        retry = redis.asyncio.retry.Retry(redis.backoff.ExponentialBackoff(), 3)
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=proxy.port, retry=retry, socket_timeout=TIMEOUT
        )
        try:
            assert await client.ping()
            proxy.drop_after_request(1)
            return await client.incr("n")
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 2
    assert server_client.get("n") == b"2"
    assert proxy.dropped == 1
