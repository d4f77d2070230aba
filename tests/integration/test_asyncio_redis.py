"""The C asyncio Retry inside redis.asyncio, against a real redis-server.

An asyncio client counts with INCR while another thread SIGKILLs and
restarts the server, or kills the client's connection with CLIENT KILL.
Every command must complete (the C awaitable absorbs the faults, awaiting
fail and the backoff sleep) and no acknowledged write may be lost; the
reasoning, and the check, are those of test_retry_redis.py.
"""

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio
from test_retry_redis import (
    FAULT_RETRY,
    assert_nothing_lost,
    redis_server as redis_server,  # the fixture, shared
)

import redis_backoff_c.asyncio.retry
from redis_backoff_c.asyncio.retry import Retry


@pytest.fixture
def slept(monkeypatch):
    """The delays the C asyncio Retry awaited (really, with asyncio.sleep)."""
    delays = []

    async def counting_sleep(delay):
        delays.append(delay)
        await asyncio.sleep(delay)

    monkeypatch.setattr(redis_backoff_c.asyncio.retry, "sleep", counting_sleep)
    return delays


def make_client(server, retry, **options):
    return redis.asyncio.Redis(
        host="127.0.0.1",
        port=server.port,
        retry=retry,
        socket_timeout=5,
        socket_connect_timeout=1,
        **options,
    )


def test_asyncio_client_with_c_retry_serves_commands(redis_server):
    async def main():
        retry = Retry(FAULT_RETRY[0], 3)
        client = make_client(redis_server, retry)
        assert isinstance(client.get_retry(), Retry)
        assert await client.ping()
        assert await client.set("key", "value")
        assert await client.get("key") == b"value"
        assert await asyncio.gather(*(client.incr("n") for _ in range(3))) is not None
        assert await client.get("n") == b"3"
        async with client.pipeline() as pipe:
            assert await pipe.incr("n").get("n").execute() == [4, b"4"]
        connection = await client.connection_pool.get_connection()
        try:
            assert type(connection.retry) is Retry  # a deep copy, still the C type
            assert connection.retry == retry
        finally:
            await client.connection_pool.release(connection)
        await client.aclose()

    asyncio.run(main())


def run_incr_stream(client, faults):
    """INCR from the event loop until `faults(mark, progressed)`, run in a
    thread, is done; returns the replies and, for each fault, the number of
    replies before it (as test_retry_redis.run_incr_stream).  Closes the
    client."""
    acked = []
    marks = []
    done = threading.Event()
    failure = []

    def progressed(count=20, timeout=5.0):
        start = marks[-1] if marks else 0
        deadline = time.monotonic() + timeout
        while len(acked) < start + count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no progress in {timeout}s after fault {len(marks)}")
            time.sleep(0.005)

    def fault_loop():
        try:
            faults(lambda: marks.append(len(acked)), progressed)
        except BaseException as error:  # reported by the main thread
            failure.append(error)
        finally:
            done.set()

    async def stream():
        try:
            while not done.is_set():
                acked.append(await client.incr("counter"))
        finally:
            await client.aclose()  # inside the loop that owns the connection

    thread = threading.Thread(target=fault_loop)
    thread.start()
    try:
        asyncio.run(stream())
    finally:
        done.wait()
        thread.join()
    assert not failure, failure
    return acked, marks


def sync_reader(server):
    """assert_nothing_lost reads the final counter with a synchronous client."""
    return redis.Redis(host="127.0.0.1", port=server.port)


def test_server_killed_and_restarted_loses_no_acknowledged_write(redis_server, slept):
    client = make_client(redis_server, Retry(*FAULT_RETRY))
    kills = 4

    def faults(mark, progressed):
        for _ in range(kills):
            progressed()
            redis_server.kill()
            mark()
            time.sleep(0.1)
            redis_server.start()
        progressed()

    acked, marks = run_incr_stream(client, faults)
    assert redis_server.starts == kills + 1
    assert len(slept) >= kills
    with sync_reader(redis_server) as reader:
        assert_nothing_lost(reader, acked, marks, kills)


def test_connection_killed_loses_no_acknowledged_write(redis_server, slept):
    client = make_client(redis_server, Retry(*FAULT_RETRY), single_connection_client=True)
    admin = redis.Redis(host="127.0.0.1", port=redis_server.port)
    killed = []
    kills = 5

    def faults(mark, progressed):
        for _ in range(kills):
            progressed()
            killed.append(admin.client_kill_filter(_type="normal", skipme=True))
            mark()
        progressed()

    acked, marks = run_incr_stream(client, faults)
    assert killed == [1] * kills  # the client's connection, every time
    assert len(slept) >= kills
    with sync_reader(redis_server) as reader:
        assert_nothing_lost(reader, acked, marks, kills)
    admin.close()
