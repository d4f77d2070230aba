"""The C asyncio Retry inside redis.asyncio, against a real redis-server.

An asyncio client counts with INCR while another thread SIGKILLs and
restarts the server, or kills the client's connection with CLIENT KILL.
Every command must complete (the C awaitable absorbs the faults, awaiting
fail and the backoff sleep) and no acknowledged write may be lost; the
reasoning, and the check, are in incr_stream.py.
"""

import asyncio

import pytest
import redis
import redis.asyncio
from incr_stream import (
    FAULT_RETRIES,
    assert_nothing_lost,
    fault_backoff,
    kill_and_restart,
    kill_connections,
    redis_server as redis_server,  # the fixture
    run_with_faults,
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
        retry = Retry(fault_backoff(), 3)
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
    """As in test_retry_redis.py, from an event loop; closes the client."""

    def stream(acked, done):
        async def incr_until_done():
            try:
                while not done.is_set():
                    acked.append(await client.incr("counter"))
            finally:
                await client.aclose()  # inside the loop that owns the connection

        asyncio.run(incr_until_done())

    return run_with_faults(stream, faults)


def sync_reader(server):
    """assert_nothing_lost reads the final counter with a synchronous client."""
    return redis.Redis(host="127.0.0.1", port=server.port)


def test_server_killed_and_restarted_loses_no_acknowledged_write(redis_server, slept):
    client = make_client(redis_server, Retry(fault_backoff(), FAULT_RETRIES))
    kills = 4
    acked, marks = run_incr_stream(client, kill_and_restart(redis_server, kills))
    assert redis_server.starts == kills + 1
    assert len(slept) >= kills
    with sync_reader(redis_server) as reader:
        assert_nothing_lost(reader, acked, marks, kills)


def test_connection_killed_loses_no_acknowledged_write(redis_server, slept):
    client = make_client(
        redis_server, Retry(fault_backoff(), FAULT_RETRIES), single_connection_client=True
    )
    admin = redis.Redis(host="127.0.0.1", port=redis_server.port)
    killed = []
    kills = 5
    acked, marks = run_incr_stream(client, kill_connections(admin, kills, killed))
    assert killed == [1] * kills  # the client's connection, every time
    assert len(slept) >= kills
    with sync_reader(redis_server) as reader:
        assert_nothing_lost(reader, acked, marks, kills)
    admin.close()
