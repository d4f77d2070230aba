"""writes="at-most-once" in a 6-node Redis Cluster, through a real fault: the
node that owns the key is busy (another client's DEBUG SLEEP holds it for
0.3 s), so the command waits behind it and the client's read times out,
while the server still runs the command once the node wakes.  This is how
a slow server makes a retried write run twice in production.

redis-py's own Retry (the reference, unpatched): INCR runs twice.  Under
patch(writes="at-most-once") on redis-py 8.2, whose cluster loop patch()
wraps (sync and asyncio): the INCR runs once and the caller gets the
marked TimeoutError; a GET through the same fault is retried and returns
the value.  redis-py 8.0/8.1's cluster loop has no point to hook: there
the policy does not reach the cluster's own retries (a documented limit),
and the test checks that the patched cluster still works.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import redis.asyncio.cluster
import redis.cluster
from support import ORIGINAL_ASYNC_RETRY, ORIGINAL_RETRY, assert_stats_add_up
from topology import HOST, RedisCluster

import redis_backoff_c
import redis_backoff_c.asyncio.retry
import redis_backoff_c.retry
from redis_backoff_c.backoff import ConstantBackoff

pytestmark = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="the C types are not built"
)

CLUSTER_LOOP_HOOKED = hasattr(redis.cluster.AbstractRedisCluster, "_retry_backoff_delay")

# A retry waits out the busy node, so that the topology refresh the
# timeout asks for finds every node answering.
RETRY_AFTER = 0.5

KEY = "{amo}n"
BUSY_SECONDS = 0.3  # well under the cluster's node timeout (1 s)
READ_TIMEOUT = 0.1


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster.started() as running:
        yield running


@pytest.fixture
def server(cluster):
    """A client of the cluster, with redis-py's Retry, for what it holds."""
    client = redis.cluster.RedisCluster(host=HOST, port=cluster.ports[0], socket_timeout=5)
    client.delete(KEY)
    yield client
    client.close()


def keep_busy(cluster):
    """Hold the key's node busy for BUSY_SECONDS (DEBUG SLEEP, from a
    client of its own, in a thread); return once it is, and the thread."""
    finder = redis.cluster.RedisCluster(host=HOST, port=cluster.ports[0], socket_timeout=5)
    port = finder.get_node_from_key(KEY).port
    finder.close()
    owner = redis.Redis(host=HOST, port=port, socket_timeout=5)
    owner.ping()  # connected: the DEBUG SLEEP is the next thing it sends
    started = threading.Event()

    def run():
        started.set()
        owner.execute_command("DEBUG", "SLEEP", BUSY_SECONDS)
        owner.close()

    thread = threading.Thread(target=run)
    thread.start()
    started.wait()
    wait_busy(port)
    return thread


def wait_busy(port):
    """Until a PING to the node at `port` gets no answer in 20 ms: the node
    is asleep."""
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        with socket.create_connection((HOST, port), timeout=1.0) as probe:
            probe.sendall(b"PING\r\n")
            probe.settimeout(0.02)
            try:
                probe.recv(64)
            except TimeoutError:
                return
        time.sleep(0.005)
    raise AssertionError("DEBUG SLEEP never held the node")


def make_client(flavor, cluster, **options):
    options = {"host": HOST, "port": cluster.ports[0], "socket_timeout": READ_TIMEOUT, **options}
    if flavor == "sync":
        return redis.cluster.RedisCluster(**options)
    return redis.asyncio.cluster.RedisCluster(**options)


def through_fault(flavor, cluster, client, method, *args):
    """client.method(*args) while the key's node is busy, on connections
    made before (so the command, not a handshake, meets the fault): the
    result, or the exception raised.  The client is closed after.
    `method` is a name, or a function of the client (a coroutine function
    for asyncio) that runs the command."""
    everywhere = redis.cluster.RedisCluster.ALL_NODES
    run = method if callable(method) else lambda client: getattr(client, method)(*args)
    if flavor == "sync":
        try:
            client.ping(target_nodes=everywhere)
            busy = keep_busy(cluster)
            try:
                return run(client)
            except Exception as error:
                return error
            finally:
                busy.join()
        finally:
            client.close()

    async def main():
        try:
            await client.ping(target_nodes=everywhere)
            busy = keep_busy(cluster)
            try:
                return await run(client)
            except Exception as error:
                return error
            finally:
                await asyncio.to_thread(busy.join)
        finally:
            await client.aclose()

    return asyncio.run(main())


def report(capsys, text):
    with capsys.disabled():
        print(f"\n    at-most-once (cluster): {text}", end="")


@pytest.mark.skipif(
    not CLUSTER_LOOP_HOOKED,
    reason="redis-py 8.0/8.1's loop retries at once, without a backoff, and re-reads the "
    "topology from the busy node: what the fault does there depends on timing (and the "
    "policy does not reach that loop: docs/at-most-once.md)",
)
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_redis_py_runs_the_write_twice(flavor, cluster, server, capsys):
    cls = ORIGINAL_RETRY if flavor == "sync" else ORIGINAL_ASYNC_RETRY
    retry = cls(ConstantBackoff(RETRY_AFTER), 1)
    client = make_client(flavor, cluster, retry=retry)
    through_fault(flavor, cluster, client, "incr", KEY)
    runs = int(server.get(KEY) or 0)
    assert runs == 2
    report(capsys, f"redis-py {flavor} INCR: the server ran it {runs} time(s)")


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_at_most_once_runs_it_once(flavor, cluster, server, capsys):
    stats = redis_backoff_c.RetryStats()
    with redis_backoff_c.patched(writes="at-most-once", stats=stats):
        client = make_client(flavor, cluster)  # the default Retry, with patch()'s extras
        if CLUSTER_LOOP_HOOKED:
            assert client.retry.writes == "at-most-once"
        outcome = through_fault(flavor, cluster, client, "incr", KEY)
    runs = int(server.get(KEY) or 0)
    if CLUSTER_LOOP_HOOKED:
        assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
        assert redis_backoff_c.may_have_run(outcome)
        assert runs == 1
        assert stats.give_ups_may_have_run == 1
    else:
        # redis-py 8.1: its loop retries as it always has; nothing breaks.
        assert isinstance(outcome, (int, redis.exceptions.RedisError)), outcome
        assert runs >= 1
    assert_stats_add_up(stats.snapshot())
    report(capsys, f"patch(writes='at-most-once') {flavor} INCR: the server ran it {runs} time(s)")


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_at_most_once_retries_a_read(flavor, cluster, server):
    server.set(KEY, "41")
    stats = redis_backoff_c.RetryStats()
    with redis_backoff_c.patched(writes="at-most-once", stats=stats):
        module = redis_backoff_c.retry if flavor == "sync" else redis_backoff_c.asyncio.retry
        retry = module.Retry(ConstantBackoff(RETRY_AFTER), 2, writes="at-most-once", stats=stats)
        client = make_client(flavor, cluster, retry=retry)
        outcome = through_fault(flavor, cluster, client, "get", KEY)
    assert outcome == b"41"
    if CLUSTER_LOOP_HOOKED:
        assert stats.retries >= 1 and stats.give_ups_may_have_run == 0
    assert_stats_add_up(stats.snapshot())


# redis-py 8.0/8.1: the cluster's default Retry gets no extras from patch()
# and its loop is not hooked (docs/at-most-once.md: not covered there).
PIPELINES_HOOKED = pytest.mark.skipif(
    not CLUSTER_LOOP_HOOKED, reason="redis-py 8.0/8.1's cluster is not covered (documented)"
)


def pipeline_incr(flavor):
    """A cluster pipeline of one INCR of KEY, as a function of the client."""
    if flavor == "sync":

        def run(client):
            pipe = client.pipeline()
            pipe.incr(KEY)
            return pipe.execute()

        return run

    async def run_async(client):
        pipe = client.pipeline()
        pipe.incr(KEY)
        return await pipe.execute()

    return run_async


@pytest.mark.skipif(not CLUSTER_LOOP_HOOKED, reason="redis-py 8.2's cluster pipeline")
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_redis_py_runs_a_pipelined_write_twice(flavor, cluster, server, capsys):
    cls = ORIGINAL_RETRY if flavor == "sync" else ORIGINAL_ASYNC_RETRY
    client = make_client(flavor, cluster, retry=cls(ConstantBackoff(RETRY_AFTER), 1))
    outcome = through_fault(flavor, cluster, client, pipeline_incr(flavor))
    runs = int(server.get(KEY) or 0)
    report(
        capsys, f"redis-py {flavor} pipeline INCR: {outcome!r}, the server ran it {runs} time(s)"
    )
    assert runs == 2


@PIPELINES_HOOKED
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_at_most_once_runs_a_pipelined_write_once(flavor, cluster, server, capsys):
    stats = redis_backoff_c.RetryStats()
    with redis_backoff_c.patched(writes="at-most-once", stats=stats):
        client = make_client(flavor, cluster)
        outcome = through_fault(flavor, cluster, client, pipeline_incr(flavor))
    runs = int(server.get(KEY) or 0)
    report(
        capsys,
        f"patch(writes='at-most-once') {flavor} pipeline INCR: {outcome!r}, "
        f"the server ran it {runs} time(s)",
    )
    assert runs == 1
    assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
    assert redis_backoff_c.may_have_run(outcome)


@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_at_most_once_retries_a_pipelined_read(flavor, cluster, server):
    server.set(KEY, "41")

    def pipeline_get(client):
        pipe = client.pipeline()
        pipe.get(KEY)
        return pipe.execute()

    async def pipeline_get_async(client):
        pipe = client.pipeline()
        pipe.get(KEY)
        return await pipe.execute()

    with redis_backoff_c.patched(writes="at-most-once"):
        client = make_client(flavor, cluster)
        run = pipeline_get if flavor == "sync" else pipeline_get_async
        outcome = through_fault(flavor, cluster, client, run)
    assert outcome == [b"41"]


@PIPELINES_HOOKED
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_at_most_once_pipeline_replies_without_raising(flavor, cluster, server, capsys):
    """raise_on_error=False: the INCR's marked error stands in the reply
    list; the GET after it (safe to repeat) is left to redis-py: the sync
    pipeline sends it again and it answers, the asyncio one retries nothing
    without raise_on_error and returns its error, unmarked."""

    def run(client):
        pipe = client.pipeline()
        pipe.incr(KEY)
        pipe.get(KEY)
        return pipe.execute(raise_on_error=False)

    async def run_async(client):
        pipe = client.pipeline()
        pipe.incr(KEY)
        pipe.get(KEY)
        return await pipe.execute(raise_on_error=False)

    with redis_backoff_c.patched(writes="at-most-once"):
        client = make_client(flavor, cluster)
        outcome = through_fault(flavor, cluster, client, run if flavor == "sync" else run_async)
    runs = int(server.get(KEY) or 0)
    report(capsys, f"patch(writes='at-most-once') {flavor} pipeline INCR, GET: {outcome!r}")
    assert runs == 1
    assert isinstance(outcome, list) and len(outcome) == 2, outcome
    assert isinstance(outcome[0], redis.exceptions.TimeoutError)
    assert redis_backoff_c.may_have_run(outcome[0])
    if flavor == "sync":
        assert outcome[1] == b"1"
    else:
        assert isinstance(outcome[1], redis.exceptions.ConnectionError), outcome[1]
        assert not redis_backoff_c.may_have_run(outcome[1])


@PIPELINES_HOOKED
@pytest.mark.parametrize("flavor", ["sync", "asyncio"])
def test_at_most_once_pipeline_error_is_annotated(flavor, cluster, server):
    """The error raised names the command, as redis-py's pipeline does."""
    with redis_backoff_c.patched(writes="at-most-once"):
        client = make_client(flavor, cluster)
        outcome = through_fault(flavor, cluster, client, pipeline_incr(flavor))
    assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
    assert "Command # 1 (INCRBY {amo}n 1) of pipeline caused error" in str(outcome), str(outcome)


def slot_keys(cluster):
    """Two keys whose slots live on different masters, the first on the
    node keep_busy() holds busy (KEY's)."""
    finder = redis.cluster.RedisCluster(host=HOST, port=cluster.ports[0], socket_timeout=5)
    try:
        busy = finder.get_node_from_key(KEY).name
        other = next(
            f"{{o{i}}}k" for i in range(1000) if finder.get_node_from_key(f"{{o{i}}}k").name != busy
        )
        return finder.get_node_from_key(other).port, other
    finally:
        finder.close()


def dels_on(port):
    """How many DELs the node at `port` has run (commandstats)."""
    node = redis.Redis(host=HOST, port=port, socket_timeout=5)
    try:
        stats = node.info("commandstats").get("cmdstat_del", {})
        return int(stats.get("calls", 0))
    finally:
        node.close()


@pytest.mark.skipif(not CLUSTER_LOOP_HOOKED, reason="redis-py 8.2's cluster loop")
@pytest.mark.parametrize("side", ["redis-py", "policy"])
def test_a_multi_shard_write_is_judged_per_node(side, cluster, server, capsys):
    """DEL of two keys on two masters (redis-py 8.2 splits it by slot), the
    first master busy: the other runs its part at once, the busy one's read
    times out and the node runs it when it wakes.  redis-py 8.2 keeps the answered node's reply and
    sends again only the failed part: the busy node runs it twice with
    redis-py's Retry; under the policy once, and the caller gets the
    marked error.  The answered node runs its part once either way."""
    other_port, other_key = slot_keys(cluster)
    finder = redis.cluster.RedisCluster(host=HOST, port=cluster.ports[0], socket_timeout=5)
    busy_port = finder.get_node_from_key(KEY).port
    finder.close()
    server.set(KEY, "1")
    server.set(other_key, "2")
    before = {busy_port: dels_on(busy_port), other_port: dels_on(other_port)}
    if side == "redis-py":
        client = make_client("sync", cluster, retry=ORIGINAL_RETRY(ConstantBackoff(RETRY_AFTER), 1))
        outcome = through_fault("sync", cluster, client, "delete", KEY, other_key)
    else:
        with redis_backoff_c.patched(writes="at-most-once"):
            client = make_client("sync", cluster)
            outcome = through_fault("sync", cluster, client, "delete", KEY, other_key)
    runs = {port: dels_on(port) - count for port, count in before.items()}
    report(
        capsys,
        f"{side} DEL over two masters, one busy: {outcome!r}; "
        f"busy node ran it {runs[busy_port]} time(s), the other {runs[other_port]}",
    )
    assert runs[other_port] == 1
    if side == "redis-py":
        assert runs[busy_port] == 2
    else:
        assert runs[busy_port] == 1
        assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
        assert redis_backoff_c.may_have_run(outcome)
