"""writes="at-most-once" through real faults: a redis-server behind the
fault proxy (fault_proxy.py), which on cue forwards a request and drops the
client's connection before the reply, or refuses connections.

Each case runs on both sides: redis-py's own Retry (the write runs twice:
the problem is real on the installed redis-py) and the policy, on the C
Retry and its pure-Python twin (the server runs it once, the caller gets the
marked error), in both flavors, sync and asyncio.  Each prints how many
times the server ran the write, so that the CI log shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest
import redis
import redis.asyncio
from fault_proxy import proxy as proxy  # the fixture
from incr_stream import redis_server as redis_server  # the fixture
from support import EXTRAS, ORIGINAL_ASYNC_RETRY, ORIGINAL_RETRY, assert_stats_add_up

import redis_backoff_c
from redis_backoff_c.backoff import ConstantBackoff, NoBackoff

TIMEOUT = 5.0

# The sides: redis-py's Retry, and the policy on the C Retry and the twin.
SIDES = ["redis-py", "c", "py"]


@pytest.fixture
def server(redis_server):
    """A client of the server itself, past the proxy: what the server holds."""
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=TIMEOUT)
    yield client
    client.close()


def make_retry(side, flavor, backoff, retries, **extras):
    """`side`'s Retry class of `flavor`: redis-py's (no extras), or the
    policy's (writes="at-most-once", with `extras`)."""
    if side == "redis-py":
        cls = ORIGINAL_RETRY if flavor == "sync" else ORIGINAL_ASYNC_RETRY
        return cls(backoff, retries)
    types = EXTRAS[side]
    if types is None:
        pytest.skip("the C extension is not in use")
    cls = types.Retry if flavor == "sync" else types.AsyncRetry
    return cls(backoff, retries, writes="at-most-once", **extras)


def stats_of(side):
    return None if side == "redis-py" else EXTRAS[side].RetryStats()


class Client:
    """A redis-py client of `flavor` on `port`, driven the same way from
    sync code: .run(lambda c: c.incr("n")) returns the result (an asyncio
    client's coroutine is run to its end on the client's own loop)."""

    def __init__(self, flavor, port, retry, **options):
        self.flavor = flavor
        options = {"host": "127.0.0.1", "port": port, "retry": retry, **options}
        if flavor == "sync":
            self.client = redis.Redis(socket_timeout=TIMEOUT, **options)
        else:
            self.loop = asyncio.new_event_loop()
            self.client = redis.asyncio.Redis(socket_timeout=TIMEOUT, **options)

    def run(self, operation):
        if self.flavor == "sync":
            return operation(self.client)

        async def main():
            return await operation(self.client)

        return self.loop.run_until_complete(main())

    def close(self):
        if self.flavor == "sync":
            self.client.close()
        else:
            self.loop.run_until_complete(self.client.aclose())
            self.loop.close()


@pytest.fixture
def clients():
    made = []

    def make(*args, **kwargs):
        made.append(Client(*args, **kwargs))
        return made[-1]

    yield make
    for client in made:
        client.close()


def report(capsys, text):
    with capsys.disabled():
        print(f"\n    at-most-once: {text}", end="")


# What each write is, and how many times the server ran it (read from what
# the server holds afterwards).  A pipeline's commands are queued by sync
# calls in both flavors; execute() is the call that runs it.
def incr(client):
    return client.incr("n")


def lpush(client):
    return client.lpush("list", "x")


def pipeline(client):
    pipe = client.pipeline(transaction=False)
    pipe.incr("p").incr("p")
    return pipe.execute()


def transaction(client):
    pipe = client.pipeline(transaction=True)
    pipe.incr("t").incr("t")
    return pipe.execute()


WRITES = {
    "INCR": (incr, lambda server: int(server.get("n") or 0)),
    "LPUSH": (lpush, lambda server: server.llen("list")),
    "pipeline of INCRs": (pipeline, lambda server: int(server.get("p") or 0) // 2),
    "MULTI/EXEC": (transaction, lambda server: int(server.get("t") or 0) // 2),
}


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("side", SIDES)
def test_a_write_whose_reply_is_lost(side, write, flavor, proxy, server, clients, capsys):
    operation, executions = WRITES[write]
    stats = stats_of(side)
    extras = {"stats": stats} if stats is not None else {}
    client = clients(flavor, proxy.port, make_retry(side, flavor, NoBackoff(), 3, **extras))
    assert client.run(lambda c: c.ping())  # connected: the write is what gets dropped
    proxy.drop_after_request(1)
    if side == "redis-py":
        client.run(operation)  # returns: one call, and ...
        assert executions(server) == 2  # ... the server ran it twice
    else:
        with pytest.raises(redis.ConnectionError) as raised:
            client.run(operation)
        assert redis_backoff_c.may_have_run(raised.value)
        assert executions(server) == 1
        snapshot = stats.snapshot()
        assert snapshot["give_ups_may_have_run"] == 1
        assert_stats_add_up(snapshot)
        # The client goes on: the next call runs on a new connection.
        assert client.run(lambda c: c.ping())
    assert proxy.dropped == 1
    report(capsys, f"{side} {flavor} {write}: the server ran it {executions(server)} time(s)")


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("side", ["c", "py"])
def test_reads_are_retried(side, flavor, proxy, server, clients):
    stats = stats_of(side)
    client = clients(flavor, proxy.port, make_retry(side, flavor, NoBackoff(), 3, stats=stats))
    server.set("k", "v")
    server.hset("h", mapping={"a": "1"})
    assert client.run(lambda c: c.ping())
    for read, expected in [
        (lambda c: c.get("k"), b"v"),
        (lambda c: c.hgetall("h"), {b"a": b"1"}),
        (lambda c: c.mget("k", "missing"), [b"v", None]),
    ]:
        proxy.drop_after_request(1)
        assert client.run(read) == expected
    snapshot = stats.snapshot()
    assert snapshot["retries"] == 3 and snapshot["give_ups_may_have_run"] == 0
    assert_stats_add_up(snapshot)
    assert proxy.dropped == 3


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("side", ["c", "py"])
def test_a_write_is_retried_while_connections_are_refused(
    side, flavor, proxy, server, clients, capsys
):
    # The server down (connections refused), then up: nothing was sent, so
    # the write is retried, and runs once.
    stats = stats_of(side)
    retry = make_retry(side, flavor, ConstantBackoff(0.05), 40, stats=stats)
    client = clients(flavor, proxy.port, retry)
    proxy.refuse(True)
    threading.Timer(0.3, proxy.refuse, (False,)).start()
    started = time.monotonic()
    assert client.run(incr) == 1
    assert time.monotonic() - started >= 0.25
    assert server.get("n") == b"1"
    snapshot = stats.snapshot()
    assert snapshot["retries"] >= 1 and snapshot["give_ups_may_have_run"] == 0
    assert_stats_add_up(snapshot)
    report(capsys, f"{side} {flavor} INCR while refused: the server ran it 1 time(s)")


def restart(client, server):
    """SIGKILL and start the server (same port; the AOF keeps what was
    acknowledged), while an asyncio client's loop runs, as a program's
    does."""

    def kill_and_start():
        server.kill()
        server.start()

    if client.flavor == "sync":
        kill_and_start()
    else:
        client.run(lambda c: asyncio.to_thread(kill_and_start))


# patch(writes="at-most-once") makes redis-py's send_packed_command check a
# connection for EOF before the write ("guarded"): a pooled client (whose
# pool checks it too on redis-py 8.2, and not on 8.1's asyncio pool while
# maintenance notifications are on) and a single-connection client.
# Without it ("unguarded"), a single connection's write goes out on the
# dead connection and may have run, so it is raised.
CONNECTIONS = {
    "pooled": (False, True),
    "single": (True, True),
    "single-unguarded": (True, False),
}


@pytest.mark.parametrize("connection", list(CONNECTIONS))
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
@pytest.mark.parametrize("side", ["c", "py"])
def test_a_restart_between_two_writes(
    side, flavor, connection, redis_server, server, clients, capsys
):
    single, guarded = CONNECTIONS[connection]
    if guarded and redis_backoff_c.IMPLEMENTATION != "c":
        pytest.skip("patch() is a no-op without the C extension")
    stats = stats_of(side)
    retry = make_retry(side, flavor, ConstantBackoff(0.05), 20, stats=stats)
    with contextlib.ExitStack() as stack:
        if guarded:
            stack.enter_context(redis_backoff_c.patched(writes="at-most-once"))
        client = clients(flavor, redis_server.port, retry, single_connection_client=single)
        assert client.run(incr) == 1
        restart(client, redis_server)
        if not guarded and single:
            with pytest.raises(redis.ConnectionError) as raised:
                client.run(incr)
            assert redis_backoff_c.may_have_run(raised.value)
            outcome = f"raised, may have run; n = {int(server.get('n'))}"
        else:
            assert client.run(incr) == 2
            assert server.get("n") == b"2"
            assert stats.give_ups_may_have_run == 0
            outcome = "n = 2, no error"
    assert_stats_add_up(stats.snapshot())
    report(capsys, f"{side} {flavor} {connection} restart between two INCRs: {outcome}")


@pytest.mark.parametrize("side", SIDES)
def test_a_blocking_pop_whose_reply_is_lost(side, proxy, server, clients, capsys):
    # BLPOP pops: a write.  redis-py's Retry pops again, finds the list
    # empty and returns None after its timeout: the element is gone and
    # the caller never sees it.  The policy raises the marked error.
    stats = stats_of(side)
    extras = {"stats": stats} if stats is not None else {}
    client = clients("sync", proxy.port, make_retry(side, "sync", NoBackoff(), 3, **extras))
    assert client.run(lambda c: c.ping())
    server.rpush("queue", "job")
    proxy.drop_after_request(1)
    if side == "redis-py":
        assert client.run(lambda c: c.blpop(["queue"], timeout=1)) is None
    else:
        with pytest.raises(redis.ConnectionError) as raised:
            client.run(lambda c: c.blpop(["queue"], timeout=1))
        assert redis_backoff_c.may_have_run(raised.value)
        assert_stats_add_up(stats.snapshot())
    assert server.llen("queue") == 0  # popped once, either way
    seen = "saw None" if side == "redis-py" else "got the marked error"
    report(capsys, f"{side} BLPOP: popped once, the caller {seen}")


@pytest.mark.parametrize("side", ["c", "py"])
def test_pub_sub_reads_are_retried(side, proxy, server):
    # A subscriber's connection dies: its read is retried (it wrote
    # nothing), redis-py reconnects and subscribes again, and the next
    # message arrives.
    stats = stats_of(side)
    retry = make_retry(side, "sync", ConstantBackoff(0.05), 10, stats=stats)
    client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=retry, socket_timeout=TIMEOUT)
    pubsub = client.pubsub()
    try:
        pubsub.subscribe("news")
        assert pubsub.get_message(timeout=TIMEOUT)["type"] == "subscribe"
        proxy.close_all()
        # The read meets EOF, is retried after the reconnect and resubscribe.
        assert pubsub.get_message(timeout=TIMEOUT)["type"] == "subscribe"
        server.publish("news", "hello")
        message = pubsub.get_message(timeout=TIMEOUT)
        assert message["type"] == "message" and message["data"] == b"hello"
    finally:
        pubsub.close()
        client.close()
    snapshot = stats.snapshot()
    assert snapshot["give_ups_may_have_run"] == 0 and snapshot["retries"] >= 1
    assert_stats_add_up(snapshot)


# Without the C extension (issue 37, finding 7): patch(writes=) installs the
# check of a held connection all the same, for the twin's Retry.  A fresh
# interpreter, since the choice of implementation is made at first import.
FALLBACK_PROBE = """
import asyncio, json, sys, warnings
warnings.simplefilter("ignore")
import redis, redis.asyncio
import redis_backoff_c
from redis_backoff_c import ConstantBackoff, Retry
from redis_backoff_c.asyncio.retry import Retry as AsyncRetry

port, flavor, guarded = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
report = redis_backoff_c.patch(writes="at-most-once") if guarded else None
admin = redis.Redis(port=port)
admin.delete("n")

def kill_clients():
    admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

def outcome(call):
    try:
        return call()
    except redis.ConnectionError as error:
        return "marked" if redis_backoff_c.may_have_run(error) else "error"

if flavor == "sync":
    retry = Retry(ConstantBackoff(0.05), 5, writes="at-most-once")
    client = redis.Redis(port=port, retry=retry, single_connection_client=True)
    first = client.incr("n")
    kill_clients()
    second = outcome(lambda: client.incr("n"))
else:
    async def main():
        retry = AsyncRetry(ConstantBackoff(0.05), 5, writes="at-most-once")
        client = redis.asyncio.Redis(port=port, retry=retry, single_connection_client=True)
        first = await client.incr("n")
        kill_clients()
        await asyncio.sleep(0.1)  # the loop sees the EOF
        try:
            second = await client.incr("n")
        except redis.ConnectionError as error:
            second = "marked" if redis_backoff_c.may_have_run(error) else "error"
        await client.aclose()
        return first, second
    first, second = asyncio.run(main())
print(json.dumps({
    "implementation": redis_backoff_c.IMPLEMENTATION,
    "replaced": list(report.replaced) if report else [],
    "first": first, "second": second, "n": int(admin.get("n")),
    "unpatched": list(redis_backoff_c.unpatch()),
}))
"""


@pytest.mark.parametrize("guarded", [False, True], ids=["no patch", "patch(writes=)"])
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_without_the_extension_patch_checks_held_connections(
    flavor, guarded, redis_server, tmp_path, capsys
):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "REDIS_BACKOFF_C_DISABLE": "1"}
    probe = tmp_path / "probe.py"
    probe.write_text(FALLBACK_PROBE)
    ran = subprocess.run(
        [sys.executable, "-I", str(probe), str(redis_server.port), flavor, str(int(guarded))],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    report(
        capsys,
        f"twin (no C) {flavor} single connection, killed between two INCRs, "
        f"{'with' if guarded else 'without'} patch(writes=): "
        f"second {found['second']}, n = {found['n']}",
    )
    assert found["implementation"] == "python"
    assert found["first"] == 1
    if guarded:
        assert found["second"] == 2 and found["n"] == 2
        assert any("send_packed_command" in label for label in found["replaced"])
        assert sorted(found["unpatched"]) == sorted(found["replaced"])
    else:
        assert found["second"] == "marked" and found["n"] == 1
