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

The figures are printed.  Sync (a thread pool) and asyncio (tasks).
"""

import asyncio
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

from redis_backoff_c import RetryBudget, RetryStats
from redis_backoff_c.asyncio.retry import Retry as AsyncRetry
from redis_backoff_c.backoff import ExponentialWithJitterBackoff
from redis_backoff_c.retry import Retry

DEADLINE = 0.3
# One connection per request in flight: a request must never fail for want
# of one (redis-py's pools stop at 100 by default).
MAX_CONNECTIONS = 2000
RUNS = {
    "no extras": {},
    "budget 10/0.1": {"budget": lambda: RetryBudget(max_tokens=10, token_ratio=0.1)},
    "deadline 0.3": {"deadline": lambda: DEADLINE},
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


def run_sync(server, label, extras):
    counter = PortCounter()
    connection_class, _ = counting_connection_classes(counter)
    stats = RetryStats()
    retry = Retry(ExponentialWithJitterBackoff(**BACKOFF), RETRIES, stats=stats, **extras)
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
        fault = strike(server, outage)
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


def run_asyncio(server, label, extras):
    counter = PortCounter()
    _, connection_class = counting_connection_classes(counter)
    stats = RetryStats()
    retry = AsyncRetry(ExponentialWithJitterBackoff(**BACKOFF), RETRIES, stats=stats, **extras)
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
        fault = strike(server, outage)
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
    results = {}
    for label, extras in RUNS.items():
        results[label] = run(server, label, {name: make() for name, make in extras.items()})
    plain, budget, deadline = results.values()
    with capsys.disabled():
        print(f"\n[{flavor}] {RATE} req/s for {DURATION} s, server down for about "
              f"{budget.outage_requests / RATE:.1f} s")  # fmt: skip
        for result in results.values():
            print(f"[{flavor}] {result.line()}")
            print(f"[{flavor}]   stats {result.stats}")
    assert budget.attempts_per_request * 5 <= plain.attempts_per_request
    assert budget.port_attempts_per_second * 5 <= plain.port_attempts_per_second
    assert budget.stats["give_ups_budget"] > 0
    for result in results.values():
        assert result.recovery <= 1.0, result.line()
        assert result.acknowledged > 0
    assert deadline.max_outage_call <= DEADLINE + CONNECT_TIMEOUT, deadline.line()
    assert deadline.stats["give_ups_deadline"] > 0
    # without a deadline, calls spend much longer retrying through the outage
    assert plain.max_outage_call > 2 * DEADLINE, plain.line()


def test_sync_outage_budget_and_deadline(redis_server, capsys):
    check_outage(run_sync, redis_server, "sync", capsys)


def test_asyncio_outage_budget_and_deadline(redis_server, capsys):
    check_outage(run_asyncio, redis_server, "asyncio", capsys)
