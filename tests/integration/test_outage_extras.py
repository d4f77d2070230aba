"""The extras through a real outage: a retry budget cuts the load a dead
server receives, a deadline bounds every call, and neither loses anything.

Open-loop INCRs (outage.py says how the load, the fault and the counting
work) through one client, three times on the same server: with no extras,
with RetryBudget(max_tokens=10, token_ratio=0.1), and with deadline=0.3;
each run kills the server in the middle and restarts it.  In the same test:

- with the budget, the connect attempts per request arriving during the
  outage, and per second reaching the server's port, are at least 5x fewer
  than without it;
- after the restart, every request succeeds again within 1 s, in each run;
- with the deadline, no call made during the outage lasts longer than
  0.3 s plus one connect timeout;
- no acknowledged INCR is lost.

The budget and deadline runs are made with the C types and again with
their pure-Python twin (redis_backoff_c._extras_py), each against the same
baseline; REDIS_BACKOFF_C_OUTAGE_TWIN=0 leaves the twin's runs out (.ci/run
makes them on its default interpreter only: about 9 s a flavor).

The figures are printed.  Sync (a thread pool) and asyncio (tasks).
"""

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor

import redis
import redis.asyncio
from incr_stream import redis_server as redis_server  # the fixture
from outage import (
    BACKOFF,
    CONNECT_TIMEOUT,
    DURATION,
    RATE,
    RETRIES,
    SOCKET_TIMEOUT,
    Outage,
    PortCounter,
    Request,
    assert_nothing_acknowledged_lost,
    begin_request,
    counting_connection_classes,
    figures,
    strike,
)
from support import EXTRAS

import redis_backoff_c
from redis_backoff_c.backoff import ExponentialWithJitterBackoff

DEADLINE = 0.3
# One connection per request in flight: a request must never fail for want
# of one (redis-py's pools stop at 100 by default).
MAX_CONNECTIONS = 2000
# The extras' sides: the C types (when the extension is in use) and the twin.
SIDES = [side for side in EXTRAS.values() if side is not None]
if os.environ.get("REDIS_BACKOFF_C_OUTAGE_TWIN", "1") == "0" and len(SIDES) > 1:
    SIDES = [side for side in SIDES if side.name != "py"]
RUNS = {
    "budget 10/0.1": lambda side: {"budget": side.RetryBudget(max_tokens=10, token_ratio=0.1)},
    "deadline 0.3": lambda side: {"deadline": DEADLINE},
}


def _requests():
    return [Request(index, 0.0) for index in range(int(RATE * DURATION))]


def _serve(request, call):
    mine = begin_request()
    request.start = time.monotonic()
    try:
        request.value = call()
    except redis.exceptions.RedisError as error:
        request.error = type(error).__name__
    finally:
        request.end = time.monotonic()
        request.connects = len(mine)


def run_sync(server, label, side, extras, holed=False):
    counter = PortCounter()
    connection_class, _ = counting_connection_classes(counter)
    stats = side.RetryStats()
    retry = side.Retry(ExponentialWithJitterBackoff(**BACKOFF), RETRIES, stats=stats, **extras)
    pool = redis.ConnectionPool(
        connection_class=connection_class,
        host="127.0.0.1",
        port=server.port,
        retry=retry,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=SOCKET_TIMEOUT,
        max_connections=MAX_CONNECTIONS,
    )
    client = redis.Redis(connection_pool=pool)
    key = f"counter:sync:{label}"
    client.ping()
    requests = _requests()
    outage = Outage()
    with ThreadPoolExecutor(max_workers=800) as executor:
        outage.start = time.monotonic()
        fault = strike(server, outage, holed)
        for request in requests:
            request.arrival = outage.start + request.index / RATE
            delay = request.arrival - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            executor.submit(_serve, request, lambda: client.incr(key))
        fault.join()
    assert not outage.error, outage.error
    final = int(client.get(key))
    client.close()
    pool.disconnect()
    assert_nothing_acknowledged_lost(requests, final)
    return figures(label, requests, outage, counter, stats)


def run_asyncio(server, label, side, extras, holed=False):
    counter = PortCounter()
    _, connection_class = counting_connection_classes(counter)
    stats = side.RetryStats()
    retry = side.AsyncRetry(ExponentialWithJitterBackoff(**BACKOFF), RETRIES, stats=stats, **extras)
    key = f"counter:asyncio:{label}"
    requests = _requests()
    outage = Outage()

    async def serve(client, request):
        mine = begin_request()  # this task's own context
        request.start = time.monotonic()
        try:
            request.value = await client.incr(key)
        except redis.exceptions.RedisError as error:
            request.error = type(error).__name__
        finally:
            request.end = time.monotonic()
            request.connects = len(mine)

    async def main():
        pool = redis.asyncio.ConnectionPool(
            connection_class=connection_class,
            host="127.0.0.1",
            port=server.port,
            retry=retry,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            max_connections=MAX_CONNECTIONS,
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        await client.ping()
        tasks = []
        outage.start = time.monotonic()
        fault = strike(server, outage, holed)
        for request in requests:
            request.arrival = outage.start + request.index / RATE
            delay = request.arrival - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(serve(client, request)))
        await asyncio.gather(*tasks)
        await asyncio.get_running_loop().run_in_executor(None, fault.join)
        final = int(await client.get(key))
        await client.aclose()
        await pool.disconnect()
        return final

    final = asyncio.run(main())
    assert not outage.error, outage.error
    assert_nothing_acknowledged_lost(requests, final)
    return figures(label, requests, outage, counter, stats)


def check_outage(run, server, flavor, capsys):
    # One baseline, without extras, on the first side; then each side's
    # budget and deadline runs.
    baseline = SIDES[0]
    results = {"no extras": run(server, f"no extras {baseline.name}", baseline, {})}
    for side in SIDES:
        for label, extras in RUNS.items():
            results[f"{label} ({side.name})"] = run(
                server, f"{label} {side.name}", side, extras(side)
            )
    plain = next(iter(results.values()))
    with capsys.disabled():
        print(f"\n[{flavor}] {RATE} req/s for {DURATION} s, server down for about "
              f"{plain.outage_requests / RATE:.1f} s")  # fmt: skip
        for result in results.values():
            print(f"[{flavor}] {result.line()}")
            print(f"[{flavor}]   stats {result.stats}")
    for result in results.values():
        assert result.recovery <= 1.0, result.line()
        assert result.acknowledged > 0
    # without a deadline, calls spend much longer retrying through the outage
    assert plain.max_outage_call > 2 * DEADLINE, plain.line()
    for side in SIDES:
        budget = results[f"budget 10/0.1 ({side.name})"]
        deadline = results[f"deadline 0.3 ({side.name})"]
        assert budget.attempts_per_request * 5 <= plain.attempts_per_request, budget.line()
        assert budget.port_attempts_per_second * 5 <= plain.port_attempts_per_second
        assert budget.stats["give_ups_budget"] > 0
        assert deadline.max_outage_call <= DEADLINE + CONNECT_TIMEOUT, deadline.line()
        assert deadline.stats["give_ups_deadline"] > 0


def test_sync_outage_budget_and_deadline(redis_server, capsys):
    check_outage(run_sync, redis_server, "sync", capsys)


def test_asyncio_outage_budget_and_deadline(redis_server, capsys):
    check_outage(run_asyncio, redis_server, "asyncio", capsys)


# --- The port a black hole while the server is down -----------------------
#
# Connects hang (until CONNECT_TIMEOUT, 1 s) instead of being refused.  The
# deadline alone bounds the retrying: a call ends about one connect timeout
# after it.  Under patch() it bounds the connect too: no call lasts longer
# than the deadline (plus a margin for a loaded machine: 800 threads on two
# cores read 0.302-0.304 s alone, 0.452 s and 0.475 s beside other jobs).
HOLED_MARGIN = 0.3


def check_holed_outage(run, server, flavor, capsys):
    side = EXTRAS["c"] or EXTRAS["py"]
    results = {"no extras": run(server, f"holed, no extras {side.name}", side, {}, holed=True)}
    results["deadline"] = run(
        server, f"holed, deadline 0.3 {side.name}", side, {"deadline": DEADLINE}, holed=True
    )
    with redis_backoff_c.patched():
        results["patched"] = run(
            server, f"holed, deadline 0.3, patch() {side.name}", side,
            {"deadline": DEADLINE}, holed=True,
        )  # fmt: skip
    with capsys.disabled():
        for result in results.values():
            print(f"[{flavor}] {result.line()}")
    for result in results.values():
        assert result.recovery <= 1.0, result.line()
    # without a deadline, calls wait out connect timeouts through the outage
    assert results["no extras"].max_outage_call > CONNECT_TIMEOUT, results["no extras"].line()
    # the deadline alone: the retrying stops, the last connect runs its time
    assert results["deadline"].max_outage_call <= DEADLINE + CONNECT_TIMEOUT + HOLED_MARGIN
    # under patch(): the connects end at the deadline too
    assert results["patched"].max_outage_call <= DEADLINE + HOLED_MARGIN, results["patched"].line()


def test_sync_holed_outage_deadline(redis_server, capsys):
    check_holed_outage(run_sync, redis_server, "sync", capsys)


def test_asyncio_holed_outage_deadline(redis_server, capsys):
    check_holed_outage(run_asyncio, redis_server, "asyncio", capsys)
