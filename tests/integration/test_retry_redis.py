"""The C Retry inside redis-py, against a real redis-server and real faults.

A client counts with INCR while the server is SIGKILLed and restarted, or
while its connection is killed with CLIENT KILL.  Every command must
complete (the Retry absorbs the faults) and no acknowledged write may be
lost: incr_stream.py says what that means and why it is provable.
"""

import time

import pytest
import redis
import redis.retry
from incr_stream import (
    FAULT_RETRIES,
    assert_nothing_lost,
    fault_backoff,
    kill_and_restart,
    kill_connections,
    redis_server as redis_server,  # the fixture
    run_with_faults,
)

import redis_backoff_c.retry
from redis_backoff_c.backoff import ExponentialBackoff
from redis_backoff_c.retry import Retry


@pytest.fixture
def slept(monkeypatch):
    """The delays the C Retry slept (really: time.sleep), to show it was
    the one that absorbed the faults."""
    delays = []

    def counting_sleep(delay):
        delays.append(delay)
        time.sleep(delay)

    monkeypatch.setattr(redis_backoff_c.retry, "sleep", counting_sleep)
    return delays


def make_client(server, retry, **options):
    return redis.Redis(
        host="127.0.0.1",
        port=server.port,
        retry=retry,
        socket_timeout=5,
        socket_connect_timeout=1,
        **options,
    )


def test_client_with_c_retry_serves_commands(redis_server):
    retry = Retry(ExponentialBackoff(), 3)
    client = make_client(redis_server, retry)
    assert isinstance(client.get_retry(), Retry)
    assert client.ping()
    assert client.set("key", "value")
    assert client.get("key") == b"value"
    assert [client.incr("n") for _ in range(3)] == [1, 2, 3]
    with client.pipeline() as pipe:
        assert pipe.incr("n").get("n").execute() == [4, b"4"]
    connection = client.connection_pool.get_connection()
    try:
        assert type(connection.retry) is Retry  # a deep copy, still the C type
        assert connection.retry == retry
    finally:
        client.connection_pool.release(connection)
    client.close()


def run_incr_stream(client, faults):
    def stream(acked, done):
        while not done.is_set():
            acked.append(client.incr("counter"))

    return run_with_faults(stream, faults)


def test_server_killed_and_restarted_loses_no_acknowledged_write(redis_server, slept):
    client = make_client(redis_server, Retry(fault_backoff(), FAULT_RETRIES))
    kills = 4
    acked, marks = run_incr_stream(client, kill_and_restart(redis_server, kills))
    assert redis_server.starts == kills + 1
    assert len(slept) >= kills
    assert_nothing_lost(client, acked, marks, kills)
    client.close()


def test_connection_killed_loses_no_acknowledged_write(redis_server, slept):
    # One connection, used without the pool's check for a closed socket
    # before each command, so each kill reaches the Retry as an error.
    client = make_client(
        redis_server, Retry(fault_backoff(), FAULT_RETRIES), single_connection_client=True
    )
    admin = redis.Redis(host="127.0.0.1", port=redis_server.port)
    killed = []
    kills = 5
    acked, marks = run_incr_stream(client, kill_connections(admin, kills, killed))
    assert killed == [1] * kills  # the client's connection, every time
    assert len(slept) >= kills
    assert_nothing_lost(client, acked, marks, kills)
    admin.close()
    client.close()
