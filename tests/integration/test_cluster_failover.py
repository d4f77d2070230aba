"""Redis Cluster through a real failover: a master SIGKILLed mid-stream,
its replica promoted, with the C Retry (given explicitly, or everywhere by
patch()) and, in the same test, redis-py's own Retry as the reference.

What the C types do here: a plain cluster command loops on
`retry.get_retries()` (redis-py 8.1: without a backoff; 8.2: sleeping the
Retry's backoff, and, patched, with the Retry's extras: the patched runs
count in a RetryStats), re-reading the topology after a
connection error; a MULTI/EXEC pipeline runs under `retry.call_with_retry`
on a `copy()` of the cluster's Retry with `update_supported_errors()`, and
sleeps its backoff; every node connection connects under
`Retry(NoBackoff(), 0)`.  A third of the stream goes through such a
pipeline, so the C loop and backoff are exercised, not only the count.
"""

from __future__ import annotations

import platform
import sys
import time

import pytest
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.backoff
import redis.cluster
import redis.retry
from failover import (
    AFTER,
    WARMUP,
    Tally,
    assert_nothing_lost,
    async_stream,
    run_with_failover,
    sync_stream,
)
from support import assert_stats_add_up
from topology import HOST, RedisCluster, dump_logs

import redis_backoff_c
import redis_backoff_c.asyncio.retry
import redis_backoff_c.backoff
import redis_backoff_c.retry

pytestmark = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="the C types are not built"
)

# Each side is bounded on its own terms, never against another failover's
# count: the errors that reach the caller (each a RedisError) are at most
# this fraction of the commands it had acknowledged.  A Retry that gives up
# early fails about every third command while a master is down (its third
# of the keys), one per millisecond or so: errors near half the
# acknowledgements.  One that uses its 10 retries spends about 2 s in
# backoff per error, so even a failover slowed to 45 s on a busy machine
# gives a few dozen errors against some 200 acknowledgements.
ERROR_FRACTION = 0.2

# redis-py 8.2's cluster loop has the point between attempts that patch()
# wraps; 8.0/8.1's has none (its retries are not counted, a documented limit).
CLUSTER_LOOP_COUNTED = hasattr(redis.cluster.AbstractRedisCluster, "_retry_backoff_delay")

# Explicit policy for the transaction path: backoff delays 16 ms to 256 ms,
# 10 retries (about 2 s, longer than a failover on loopback).
CAP, BASE, RETRIES = 0.256, 0.016, 10


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster.started() as running:
        yield running


def fail_over(cluster: RedisCluster, tally: Tally, workload) -> None:
    """Run `workload` while a master (a different one each time) is
    SIGKILLed and its replica promoted; then bring the old master back as a
    replica and wait until the cluster is healthy again."""
    cluster.wait_healthy()
    masters = cluster.masters()
    master = masters[fail_over.turn % len(masters)]
    fail_over.turn += 1
    replica = cluster.replica_of(master)

    def kill_and_wait() -> None:
        cluster.kill(master)
        cluster.wait_failover(replica)

    try:
        run_with_failover(tally, workload, kill_and_wait)
    except BaseException:
        dump_logs(cluster.nodes)
        raise
    finally:
        if not master.running:
            cluster.restart(master)
        cluster.wait_healthy()


fail_over.turn = 0


def read_counters(cluster: RedisCluster, tally: Tally) -> dict[str, int]:
    reader = redis.cluster.RedisCluster(host=HOST, port=cluster.ports[0])
    try:
        return dict(zip(tally.keys, reader.mget_nonatomic(tally.keys)))
    finally:
        reader.close()


class ErrorLog:
    """Per command that raised: how many retries redis-py's cluster loop
    made for it (its `_retry_backoff_delay` calls, counted on every side;
    not for a transaction, which retries under call_with_retry, nor on
    redis-py 8.0/8.1, whose loop has no such point) and the seconds since
    the master was killed.  The stream sends one command at a time, so the
    calls since a command started are its own."""

    def __init__(self, monkeypatch) -> None:
        self.retries = 0
        self.tally: Tally | None = None
        self.failed: dict[int, tuple[BaseException, str, float]] = {}
        abstract = redis.cluster.AbstractRedisCluster
        original = vars(abstract).get("_retry_backoff_delay")
        if isinstance(original, staticmethod):
            delay = original.__func__

            def counting(retry, failures):
                self.retries += 1
                return delay(retry, failures)

            # Under patch() its wrapper wraps this one, and is undone first.
            monkeypatch.setattr(abstract, "_retry_backoff_delay", staticmethod(counting))
        self.counted = isinstance(original, staticmethod)

    def command(self, run, tally: Tally, transaction: bool):
        """`run()`, as the stream's command: its error recorded."""
        self.retries = 0
        try:
            return run()
        except Exception as error:
            self._record(error, tally, transaction)
            raise

    async def async_command(self, run, tally: Tally, transaction: bool):
        self.retries = 0
        try:
            return await run()
        except Exception as error:
            self._record(error, tally, transaction)
            raise

    def _record(self, error: BaseException, tally: Tally, transaction: bool) -> None:
        since_kill = time.monotonic() - tally.kill_time if tally.kill_time else float("nan")
        if transaction:
            kind = "transaction"  # its retries are call_with_retry's: on_give_up's below
        else:
            kind = f"loop retries={self.retries if self.counted else '?'}"
        self.failed[id(error)] = (error, kind, since_kill)

    def lines(self, tally: Tally, give_ups: dict[int, tuple[int, str]]) -> list[str]:
        """One line per error of `tally`: time since the kill, the cluster
        loop's retries, the patched run's give-up (retries, reason) when
        on_give_up saw that error, and the error."""
        out = []
        for error in tally.errors:
            _, kind, since_kill = self.failed.get(id(error), (error, "?", float("nan")))
            line = f"    t={since_kill:+7.3f} s  {kind}"
            if id(error) in give_ups:
                attempt, reason = give_ups[id(error)]
                line += f"  on_give_up: {attempt - 1} retries, {reason}"
            out.append(f"{line}  {type(error).__name__}: {error}"[:200])
        return out


def finish(cluster, tally: Tally) -> Tally:
    """The counters read back, for assert_nothing_lost once everything is
    printed."""
    tally.final = read_counters(cluster, tally)  # type: ignore[attr-defined]
    return tally


def report(flavor: str, tallies, log: ErrorLog, stats, hooks: HookCounts) -> None:
    """Everything a failure needs, printed before any assertion: the
    versions, the asyncio design, each side's summary and errors (time since
    the kill, retries), the patched run's stats and hooks."""
    print(
        f"\n[{flavor}] CPython {platform.python_version()} ({sys.version.split()[0]}), "
        f"redis-py {redis.__version__}, asyncio design {redis_backoff_c.asyncio.retry.DESIGN}, "
        f"cluster loop counted: {CLUSTER_LOOP_COUNTED}"
    )
    give_ups = {id(event.error): (event.attempt, event.reason) for event in hooks.events}
    for tally in tallies:
        print(tally.summary())
        print("\n".join(log.lines(tally, give_ups)) or "    (no errors)")
    print(
        f"[{flavor}] patched run's stats: {stats.snapshot()}; hooks: {hooks.retries} on_retry, "
        f"{hooks.give_ups} on_give_up, reasons {sorted({e.reason for e in hooks.events})}"
    )


def assert_side_bounded(tally: Tally) -> None:
    """Errors reaching the caller are RedisErrors, and a small fraction of
    the side's own acknowledgements (ERROR_FRACTION)."""
    import redis.exceptions

    for error in tally.errors:
        assert isinstance(error, redis.exceptions.RedisError), repr(error)
    assert len(tally.errors) <= ERROR_FRACTION * tally.count, tally.summary()


def assert_failover(cluster, flavor: str, tallies, log: ErrorLog, stats, hooks) -> None:
    """The report, then: nothing lost on any side, each side bounded on its
    own terms, the patched run's counters and hooks."""
    report(flavor, tallies, log, stats, hooks)
    for tally in tallies:
        try:
            assert_nothing_lost(tally, tally.final)
        except AssertionError:
            dump_logs(cluster.nodes)
            raise
    for tally in tallies:
        assert_side_bounded(tally)
    assert_failover_counted(stats, hooks)


# --- sync ---------------------------------------------------------------


def sync_client(cluster: RedisCluster, retry=None) -> redis.cluster.RedisCluster:
    options = {} if retry is None else {"retry": retry}
    return redis.cluster.RedisCluster(
        host=HOST, port=cluster.ports[0], socket_timeout=2, socket_connect_timeout=1, **options
    )


def sync_run(
    cluster: RedisCluster, label: str, client: redis.cluster.RedisCluster, log: ErrorLog
) -> Tally:
    def incr(key):
        return log.command(lambda: client.incr(key), tally, transaction=False)

    def transaction(key):
        def run():
            with client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                return pipe.execute()[0]

        return log.command(run, tally, transaction=True)

    tally = Tally(label)
    try:
        fail_over(cluster, tally, sync_stream(incr, transaction))
    finally:
        client.close()
    return finish(cluster, tally)


def assert_sync_c_types(client: redis.cluster.RedisCluster, nodes_too: bool) -> None:
    assert type(client.retry) is redis_backoff_c.retry.Retry
    pipe = client.pipeline(transaction=True)
    assert type(pipe._execution_strategy._retry) is redis_backoff_c.retry.Retry
    if nodes_too:
        for node in client.get_nodes():
            assert type(node.redis_connection.get_retry()) is redis_backoff_c.retry.Retry


def policy(retry_module, backoff_module, **extras):
    """The explicit policy, built from the modules given (looked up when
    called: under patch(), redis.retry and redis.backoff hold the C types)."""
    backoff = backoff_module.ExponentialBackoff(cap=CAP, base=BASE)
    return retry_module.Retry(backoff, RETRIES, **extras)


class HookCounts:
    """on_retry and on_give_up of the patched run's Retry: how often each
    was called (by the client's loops, the cluster's and the pipelines')."""

    def __init__(self):
        self.retries = 0
        self.give_ups = 0
        self.events = []  # on_give_up's, their errors kept alive

    def on_retry(self, event):
        self.retries += 1

    def on_give_up(self, event):
        self.give_ups += 1
        self.events.append(event)

    def extras(self):
        return {"on_retry": self.on_retry, "on_give_up": self.on_give_up}


def assert_failover_counted(stats, hooks: HookCounts) -> None:
    """The patched run's RetryStats: every command and transaction counted
    once, with one outcome, and (redis-py 8.2 and later, whose cluster loop
    patch() reaches, see redis_backoff_c._cluster) the failover's retries.
    No give-up but "exhausted" (no budget, deadline or at-most-once is set,
    and a refresh that reaches no node would be a not_retryable).  The
    hooks were called for each give-up, and for each retry (one whose
    sleep was interrupted is announced, not counted a retry: aborted)."""
    snapshot = stats.snapshot()
    assert_stats_add_up(snapshot)
    give_ups = sum(value for name, value in snapshot.items() if name.startswith("give_ups_"))
    assert give_ups == snapshot["give_ups_exhausted"], snapshot
    assert {event.reason for event in hooks.events} <= {"exhausted"}
    assert hooks.give_ups == give_ups, (hooks.give_ups, snapshot)
    assert snapshot["retries"] <= hooks.retries <= snapshot["retries"] + snapshot["aborted"]
    if not CLUSTER_LOOP_COUNTED:
        # Only the transactions (a third of the stream) are counted.
        assert snapshot["successes"] >= 1, snapshot
        return
    assert snapshot["successes"] >= WARMUP + AFTER, snapshot
    assert snapshot["failed_attempts"] > 0, snapshot
    assert snapshot["retries"] > 0, snapshot


def test_sync_through_failover(cluster, monkeypatch):
    """redis-py's Retry, then the C Retry given explicitly, then redis-py's
    own names under patch(): the same stream, a master killed in each."""
    log = ErrorLog(monkeypatch)
    reference = sync_run(
        cluster, "redis-py Retry", sync_client(cluster, policy(redis.retry, redis.backoff)), log
    )

    client = sync_client(cluster, policy(redis_backoff_c.retry, redis_backoff_c.backoff))
    assert_sync_c_types(client, nodes_too=False)
    explicit = sync_run(cluster, "C Retry", client, log)

    stats, hooks = redis_backoff_c.RetryStats(), HookCounts()
    with redis_backoff_c.patched():
        client = sync_client(
            cluster, policy(redis.retry, redis.backoff, stats=stats, **hooks.extras())
        )
        client.ping()  # connects to a node: its Retry(NoBackoff(), 0) exists
        assert_sync_c_types(client, nodes_too=True)
        patched = sync_run(cluster, "patched", client, log)

    assert_failover(cluster, "sync", (reference, explicit, patched), log, stats, hooks)


# --- asyncio ------------------------------------------------------------


def async_run(cluster: RedisCluster, label: str, make_retry, log: ErrorLog, check=None) -> Tally:
    """`make_retry()` runs inside the event loop (None: redis-py's default);
    `check(client)` too, once the client is connected."""

    async def make_client():
        retry = make_retry()
        options = {} if retry is None else {"retry": retry}
        client = redis.asyncio.cluster.RedisCluster(
            host=HOST, port=cluster.ports[0], socket_timeout=2, socket_connect_timeout=1, **options
        )
        await client.initialize()
        await client.ping()
        if check is not None:
            check(client)
        return client

    async def incr(client, key):
        return await log.async_command(lambda: client.incr(key), tally, transaction=False)

    async def transaction(client, key):
        async def run():
            async with client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                return (await pipe.execute())[0]

        return await log.async_command(run, tally, transaction=True)

    tally = Tally(label)
    fail_over(cluster, tally, async_stream(make_client, incr, transaction))
    return finish(cluster, tally)


def assert_async_c_types(client, nodes_too: bool) -> None:
    assert type(client.retry) is redis_backoff_c.asyncio.retry.Retry
    pipe = client.pipeline(transaction=True)
    assert type(pipe._execution_strategy._retry) is redis_backoff_c.asyncio.retry.Retry
    if nodes_too:
        connections = [c for node in client.get_nodes() for c in node._connections]
        assert connections
        for connection in connections:
            assert type(connection.retry) is redis_backoff_c.asyncio.retry.Retry


def test_asyncio_through_failover(cluster, monkeypatch):
    import redis.asyncio.retry as redis_async_retry

    log = ErrorLog(monkeypatch)
    reference = async_run(
        cluster, "redis-py asyncio Retry", lambda: policy(redis_async_retry, redis.backoff), log
    )
    explicit = async_run(
        cluster,
        "C asyncio Retry",
        lambda: policy(redis_backoff_c.asyncio.retry, redis_backoff_c.backoff),
        log,
        check=lambda client: assert_async_c_types(client, nodes_too=False),
    )
    stats, hooks = redis_backoff_c.RetryStats(), HookCounts()
    with redis_backoff_c.patched():
        patched = async_run(
            cluster,
            "patched asyncio",
            lambda: policy(redis.asyncio.retry, redis.backoff, stats=stats, **hooks.extras()),
            log,
            check=lambda client: assert_async_c_types(client, nodes_too=True),
        )
    assert_failover(cluster, "asyncio", (reference, explicit, patched), log, stats, hooks)
