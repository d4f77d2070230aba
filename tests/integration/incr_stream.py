"""A stream of INCRs through real faults, and what it may and may not lose.

Shared by the sync and the asyncio integration tests.  A client counts with
INCR while another thread strikes faults (SIGKILL and restart of the
server, or CLIENT KILL of the client's connection).  What is provable, with
one client sending one command at a time:

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
from redis_server import RedisServer

from redis_backoff_c.backoff import ExponentialBackoff

# Retries cover a restart: the delays add up to about 1 s (and connecting
# retries with the same policy inside each attempt), the server is down
# for about 0.1 s plus its start-up.
FAULT_BACKOFF = {"cap": 0.256, "base": 0.016}
FAULT_RETRIES = 6


def fault_backoff():
    return ExponentialBackoff(**FAULT_BACKOFF)


def run_with_faults(stream, faults):
    """Run `stream(acked, done)` in this thread, which appends each
    acknowledged reply to `acked` until `done` is set, while
    `faults(mark, progressed)` runs in another thread; returns the replies
    and, for each fault, the number of replies before it.  `faults` calls
    mark() at each fault and progressed() to wait for the client to be
    back at work."""
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
        stream(acked, done)
    finally:
        done.wait()
        thread.join()
    assert not failure, failure
    return acked, marks


def kill_and_restart(server, kills, down=0.1):
    """Faults: SIGKILL the server, leave it down for `down` seconds, restart
    it on the same port and data; `kills` times."""

    def faults(mark, progressed):
        for _ in range(kills):
            progressed()
            server.kill()
            mark()
            time.sleep(down)
            server.start()
        progressed()

    return faults


def kill_connections(admin, kills, killed):
    """Faults: CLIENT KILL every normal connection but the admin's own,
    `kills` times; appends how many each kill hit to `killed`."""

    def faults(mark, progressed):
        for _ in range(kills):
            progressed()
            killed.append(admin.client_kill_filter(_type="normal", skipme=True))
            mark()
        progressed()

    return faults


def assert_nothing_lost(client, acked, marks, fault_count):
    """The replies and the final counter, read with a sync `client`, prove
    that every fault was absorbed and no acknowledged write was lost."""
    assert len(marks) == fault_count
    # The stream went on between faults: every fault fell inside it.
    bounds = [0, *marks, len(acked)]
    assert all(b > a for a, b in zip(bounds, bounds[1:])), bounds
    assert all(b > a for a, b in zip(acked, acked[1:])), "an acknowledged INCR was lost"
    final = int(client.get("counter"))
    assert final == acked[-1]
    assert len(acked) <= final <= len(acked) + fault_count


@pytest.fixture
def redis_server(tmp_path):
    """A running redis-server (AOF, fsync always) on a free loopback port,
    data in a fresh directory; stopped after the test."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
