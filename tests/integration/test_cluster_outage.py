"""The extras in RedisCluster's own command loop, through a real outage of a
6-node cluster: a master and its replica SIGKILLed together (their slots
have no node, and once the other nodes notice, the cluster is down), both
restarted DOWN seconds later, while INCRs keep arriving at a steady rate.

Each request is one plain cluster command (INCR of one key, whose slot the
killed master serves), made by a RedisCluster whose Retry is a C Retry
with `Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.2), 10, ...)`,
under patch() (which reaches the command loop: redis_backoff_c._cluster).
Three runs, sync (a thread per request in flight) and asyncio (a task per
request): without extras, with RetryBudget(10, 0.1), with deadline=0.3.
The attempts of a command are counted where the loop makes them
(`_execute_command`, per thread or task).  In the same test:

- with the budget, the attempts per command started during the outage are
  at most a third of those without it;
- with the deadline, no command started during the outage takes longer
  than 0.3 s plus its longest attempt (and a little for the topology
  refreshes the loop runs between attempts);
- nothing acknowledged is lost, and the RetryStats of each run add up:
  every command one call, with one outcome.

redis-py 8.2 and later: 8.0/8.1's cluster loop offers no point between
attempts (test_cluster_loop_left_alone checks that patch() leaves it
alone there and that commands still work).  The outage runs take about a
minute; REDIS_BACKOFF_C_CLUSTER_OUTAGE=0 leaves them out (.ci/run makes them
on its default interpreter only).  The figures are printed.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions
from support import assert_stats_add_up
from topology import HOST, RedisCluster, command, dump_logs

import redis_backoff_c
from redis_backoff_c.backoff import ExponentialWithJitterBackoff

pytestmark = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="the C types are not built"
)

LOOP_REACHED = hasattr(redis.cluster.AbstractRedisCluster, "_retry_backoff_delay")
OUTAGE_RUNS = os.environ.get("REDIS_BACKOFF_C_CLUSTER_OUTAGE", "1") != "0"

RATE = 50  # commands a second
DURATION = 4.0  # seconds of arrivals
KILL_AT = 1.0  # seconds after the first arrival
DOWN = 2.0  # seconds the two nodes stay dead
BACKOFF = {"base": 0.01, "cap": 0.2}
RETRIES = 10
DEADLINE = 0.3
#: What a command may take beyond its deadline: under patch() every wait
#: of a command, redis-py's own pause after CLUSTERDOWN included, ends by
#: it (docs/extras.md); the rest is scheduling, 50 threads on 2 cores
#: (0.302 s alone, 0.370 s beside a full test run).
CUT_MARGIN = 0.2
#: The attempts (start, end) of the command running in this thread or task.
_attempts: contextvars.ContextVar[list[tuple[float, float]] | None] = contextvars.ContextVar(
    "cluster_attempts", default=None
)


def _record(start: float) -> None:
    mine = _attempts.get()
    if mine is not None:
        mine.append((start, time.monotonic()))


class CountingCluster(redis.cluster.RedisCluster):
    def _execute_command(self, target_node, *args, **kwargs):
        start = time.monotonic()
        try:
            return super()._execute_command(target_node, *args, **kwargs)
        finally:
            _record(start)


class CountingAsyncCluster(redis.asyncio.cluster.RedisCluster):
    async def _execute_command(self, target_node, *args, **kwargs):
        start = time.monotonic()
        try:
            return await super()._execute_command(target_node, *args, **kwargs)
        finally:
            _record(start)


@dataclass
class Request:
    index: int
    arrival: float = 0.0
    start: float = 0.0
    end: float = 0.0
    value: int | None = None
    error: str | None = None
    attempts: int = 0
    longest_attempt: float = 0.0


@dataclass
class Figures:
    label: str
    in_outage: int
    attempts_per_command: float
    longest_failing: float
    longest_attempt: float
    acked: int
    failed: int
    stats: dict

    def line(self) -> str:
        return (
            f"{self.label:<14} in-outage={self.in_outage} "
            f"attempts/command={self.attempts_per_command:.2f} "
            f"longest failing command={self.longest_failing:.3f}s "
            f"longest attempt={self.longest_attempt:.3f}s "
            f"acked={self.acked} failed={self.failed}"
        )


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster.started() as running:
        yield running


def key_and_nodes(cluster: RedisCluster) -> tuple[str, list]:
    """A key, the master serving its slot and that master's replica."""
    cluster.wait_healthy()
    master = cluster.masters()[0]
    key = cluster._key_on(master)
    return key, [master, cluster.replica_of(master)]


def inject(cluster: RedisCluster, nodes, start: float) -> list[float]:
    """In the main thread (topology.py starts servers there only): SIGKILL
    both nodes KILL_AT after `start`, restart them DOWN later, and wait
    until the cluster is healthy; returns [kill time, time both answer]."""
    time.sleep(max(0.0, start + KILL_AT - time.monotonic()))
    for node in nodes:
        cluster.kill(node)
    window = [time.monotonic()]
    time.sleep(DOWN)
    for node in nodes:
        cluster.restart(node)
    window.append(time.monotonic())
    return window


def serve_started(request: Request) -> list[tuple[float, float]]:
    mine: list[tuple[float, float]] = []
    _attempts.set(mine)
    request.start = time.monotonic()
    return mine


def serve_ended(request: Request, mine: list[tuple[float, float]]) -> None:
    request.end = time.monotonic()
    request.attempts = len(mine)
    request.longest_attempt = max((end - start for start, end in mine), default=0.0)


def retry_for(flavor: str, extras: dict):
    module = redis_backoff_c if flavor == "sync" else redis_backoff_c.asyncio.retry
    return module.Retry(ExponentialWithJitterBackoff(**BACKOFF), RETRIES, **extras)


def run_with_outage(cluster: RedisCluster, nodes, load) -> list[float]:
    """`load(start)` in a thread (it makes the requests, arriving from
    `start` on), the outage in this one."""
    failure: list[BaseException] = []
    start = time.monotonic() + 0.1

    def run() -> None:
        try:
            load(start)
        except BaseException as error:  # noqa: BLE001 - raised below
            failure.append(error)

    thread = threading.Thread(target=run, name="cluster-load")
    thread.start()
    try:
        window = inject(cluster, nodes, start)
    finally:
        thread.join()
    if failure:
        raise failure[0]
    cluster.wait_healthy()
    return window


#: What a request may end with: redis-py's errors, and the cluster's own
#: RedisClusterUnreachableError (not a RedisError), which its topology
#: refresh raises when it reaches no node: with deadline=0.3 under
#: patch(), in the time left (docs/extras.md).
CLIENT_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)


def run_sync(cluster: RedisCluster, label: str, extras: dict) -> Figures:
    key, nodes = key_and_nodes(cluster)
    stats = redis_backoff_c.RetryStats()
    client = CountingCluster(
        host=HOST,
        port=next(p for p in cluster.ports if p not in {n.port for n in nodes}),
        retry=retry_for("sync", {"stats": stats, **extras}),
        socket_timeout=2,
        socket_connect_timeout=1,
    )
    requests = [Request(index) for index in range(int(RATE * DURATION))]

    def serve(request: Request) -> None:
        mine = serve_started(request)
        try:
            request.value = client.incr(key)
        except CLIENT_ERRORS as error:
            request.error = type(error).__name__
        finally:
            serve_ended(request, mine)

    def load(start: float) -> None:
        with ThreadPoolExecutor(max_workers=300) as executor:
            for request in requests:
                request.arrival = start + request.index / RATE
                time.sleep(max(0.0, request.arrival - time.monotonic()))
                executor.submit(serve, request)

    try:
        client.ping()
        stats.reset()  # the requests' commands only
        window = run_with_outage(cluster, nodes, load)
    finally:
        client.close()
    return figures(label, requests, window, final_value(nodes[0], key), stats)


def run_asyncio(cluster: RedisCluster, label: str, extras: dict) -> Figures:
    key, nodes = key_and_nodes(cluster)
    stats = redis_backoff_c.RetryStats()
    requests = [Request(index) for index in range(int(RATE * DURATION))]
    port = next(p for p in cluster.ports if p not in {n.port for n in nodes})

    async def serve(client, request: Request) -> None:
        mine = serve_started(request)
        try:
            request.value = await client.incr(key)
        except CLIENT_ERRORS as error:
            request.error = type(error).__name__
        finally:
            serve_ended(request, mine)

    async def main(start: float) -> None:
        client = CountingAsyncCluster(
            host=HOST,
            port=port,
            retry=retry_for("asyncio", {"stats": stats, **extras}),
            socket_timeout=2,
            socket_connect_timeout=1,
        )
        try:
            await client.initialize()
            await client.ping()
            stats.reset()  # the requests' commands only
            tasks = []
            for request in requests:
                request.arrival = start + request.index / RATE
                await asyncio.sleep(max(0.0, request.arrival - time.monotonic()))
                tasks.append(asyncio.create_task(serve(client, request)))
            await asyncio.gather(*tasks)
        finally:
            await client.aclose()

    window = run_with_outage(cluster, nodes, lambda start: asyncio.run(main(start)))
    return figures(label, requests, window, final_value(nodes[0], key), stats)


def final_value(master, key: str) -> int:
    """The key's value, read from the master that serves it (the same node
    after the outage: its replica died with it, so nothing failed over)."""
    value = command(master.port, "GET", key)
    return int(value) if value is not None else 0


def figures(label, requests, window, final, stats) -> Figures:
    kill, up = window
    during = [r for r in requests if kill <= r.arrival < up]
    failing = [r for r in during if r.error is not None]
    acked = [r.value for r in requests if r.value is not None]
    # Nothing acknowledged lost (appendfsync always on every node): each
    # acknowledged INCR returned a value of its own, all of them at most
    # what the key holds now.
    assert len(set(acked)) == len(acked), "an acknowledged INCR was lost"
    assert acked and final >= max(acked) and final >= len(acked)
    assert all((r.value is None) != (r.error is None) for r in requests)
    snapshot = stats.snapshot()
    assert snapshot["calls"] == len(requests), snapshot
    assert_stats_add_up(snapshot)
    return Figures(
        label=label,
        in_outage=len(during),
        attempts_per_command=statistics.fmean(r.attempts for r in during),
        longest_failing=max((r.end - r.start for r in failing), default=0.0),
        longest_attempt=max((r.longest_attempt for r in failing), default=0.0),
        acked=len(acked),
        failed=len(requests) - len(acked),
        stats=snapshot,
    )


def check_outage(run, cluster, flavor: str, capsys) -> None:
    results = {}
    try:
        results["no extras"] = run(cluster, "no extras", {})
        results["budget"] = run(
            cluster, "budget 10/0.1", {"budget": redis_backoff_c.RetryBudget(10, 0.1)}
        )
        results["deadline"] = run(cluster, "deadline 0.3", {"deadline": DEADLINE})
    except BaseException:
        dump_logs(cluster.nodes)
        raise
    finally:
        for node in cluster.nodes:
            if not node.running:
                cluster.restart(node)
    with capsys.disabled():
        print(f"\n[cluster {flavor}] {RATE} commands/s for {DURATION} s, a master and its "
              f"replica down for {DOWN} s")  # fmt: skip
        for result in results.values():
            print(f"[cluster {flavor}] {result.line()}")
            print(f"[cluster {flavor}]   stats {result.stats}")
    plain, budget, deadline = results["no extras"], results["budget"], results["deadline"]
    assert plain.stats["retries"] > 0 and plain.stats["failed_attempts"] > 0, plain.line()
    assert plain.in_outage > 0 and budget.in_outage > 0
    assert budget.attempts_per_command * 3 <= plain.attempts_per_command, budget.line()
    assert budget.stats["give_ups_budget"] > 0, budget.stats
    assert deadline.stats["give_ups_deadline"] > 0, deadline.stats
    # Without the deadline a failing command retries far longer.
    assert plain.longest_failing > 2 * DEADLINE, plain.line()
    assert deadline.longest_failing <= DEADLINE + CUT_MARGIN, deadline.line()


needs_loop = pytest.mark.skipif(
    not LOOP_REACHED, reason="redis-py before 8.2: its cluster loop has no point between attempts"
)
needs_runs = pytest.mark.skipif(
    not OUTAGE_RUNS, reason="REDIS_BACKOFF_C_CLUSTER_OUTAGE=0 (made on one interpreter in CI)"
)


@needs_loop
@needs_runs
def test_sync_cluster_outage_budget_and_deadline(cluster, capsys):
    with redis_backoff_c.patched():
        check_outage(run_sync, cluster, "sync", capsys)


@needs_loop
@needs_runs
def test_asyncio_cluster_outage_budget_and_deadline(cluster, capsys):
    with redis_backoff_c.patched():
        check_outage(run_asyncio, cluster, "asyncio", capsys)


def test_cluster_loop_left_alone_or_counted(cluster):
    """patch() wraps the loop where redis-py 8.2 offers the point between
    attempts, and leaves 8.0/8.1's alone; either way a command works and is
    counted at most as the release allows."""
    stats = redis_backoff_c.RetryStats()
    with redis_backoff_c.patched(stats=stats) as report:
        # The loop's own wrapper (redis_backoff_c._cluster); on 8.0/8.1 the
        # deadline's entry may wrap execute_command too, once a Retry with
        # a deadline exists (redis_backoff_c._call_deadline), which counts
        # nothing.
        execute = vars(redis.cluster.RedisCluster)["execute_command"]
        wrapped = "redis.cluster.RedisCluster.execute_command" in report.replaced and not getattr(
            execute, "_redis_backoff_c_bounds", False
        )
        assert wrapped == LOOP_REACHED
        client = redis.cluster.RedisCluster(host=HOST, port=cluster.ports[0])
        try:
            # The default Retry, built by the cluster from the C class.
            assert type(client.retry) is redis_backoff_c.Retry
            assert (client.retry.stats is stats) == LOOP_REACHED
            assert client.set("left-alone", 1) is True
            with pytest.raises(redis.exceptions.ResponseError):
                client.execute_command("GET", "left-alone", "extra")
        finally:
            client.close()
    snapshot = stats.snapshot()
    if LOOP_REACHED:
        assert snapshot["successes"] >= 1 and snapshot["unhandled_errors"] == 1, snapshot
    else:
        assert snapshot["calls"] == 0, snapshot
    # unpatch() put redis-py's own back.
    assert not hasattr(redis.cluster.RedisCluster.execute_command, "_redis_backoff_c_wraps")
