"""The C Retry inside redis-py, against a real redis-server and real faults.

A client counts with INCR while the server is SIGKILLed and restarted, or
while its connection is killed with CLIENT KILL.  Every command must
complete (the Retry absorbs the faults) and no acknowledged write may be
lost.  What is provable, with one client sending one command at a time:

- redis-server fsyncs every write to its append-only file before replying
  (appendfsync always), so each acknowledged INCR survives a SIGKILL: had
  one been lost, the counter would fall back and a later reply would not
  exceed it.  So the acknowledged values strictly increase, and the
  counter read at the end equals the last one.
- A fault can strike after the server applied an INCR but before the
  client read the reply; the retry then applies it again.  So at most one
  value is skipped per fault: len(acked) <= final <= len(acked) + faults.
"""

import threading
import time

import pytest
import redis
import redis.retry
from redis_server import RedisServer

import redis_backoff_c.retry
from redis_backoff_c.backoff import ExponentialBackoff
from redis_backoff_c.retry import Retry

# Retries cover a restart: the delays add up to about 1 s (and connecting
# retries with the same policy inside each attempt), the server is down
# for about 0.1 s plus its start-up.
FAULT_RETRY = (ExponentialBackoff(cap=0.256, base=0.016), 6)


@pytest.fixture
def redis_server(tmp_path):
    """A running redis-server (AOF, fsync always) on a free loopback port,
    data in a fresh directory; stopped after the test.  (Here rather than
    in a conftest.py: tests import the top conftest by name.)"""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


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
    """INCR until `faults(mark, progressed)`, run in a thread, is done;
    returns the replies and, for each fault, the number of replies before
    it.  `faults` calls mark() at each fault and progressed() to wait for
    the client to be back at work."""
    acked = []
    marks = []
    done = threading.Event()
    failure = []

    def progressed(count=20, timeout=5.0):
        """Wait until `count` more INCRs were acknowledged since the last
        fault (or the start): the client recovered before the next fault."""
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

    thread = threading.Thread(target=fault_loop)
    thread.start()
    try:
        while not done.is_set():
            acked.append(client.incr("counter"))
    finally:
        done.wait()
        thread.join()
    assert not failure, failure
    return acked, marks


def assert_nothing_lost(client, acked, marks, fault_count):
    assert len(marks) == fault_count
    # The stream went on between faults: every fault fell inside it.
    bounds = [0, *marks, len(acked)]
    assert all(b > a for a, b in zip(bounds, bounds[1:], strict=False)), bounds
    assert all(b > a for a, b in zip(acked, acked[1:], strict=False)), (
        "an acknowledged INCR was lost"
    )
    final = int(client.get("counter"))
    assert final == acked[-1]
    assert len(acked) <= final <= len(acked) + fault_count


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
    assert_nothing_lost(client, acked, marks, kills)
    client.close()


def test_connection_killed_loses_no_acknowledged_write(redis_server, slept):
    # One connection, used without the pool's check for a closed socket
    # before each command, so each kill reaches the Retry as an error.
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
    assert_nothing_lost(client, acked, marks, kills)
    admin.close()
    client.close()
