"""Sentinel through a real failover: `Sentinel(...).master_for(...)` counts
with INCR while the master is SIGKILLed and the sentinels promote the
replica, with redis-py's Retry (the reference), the C Retry given
explicitly, and redis-py's own names under patch(), in one test.

Here the Retry does all the work: a command that meets the dead master
fails with ConnectionError, its connection's Retry backs off and retries,
and each reconnection asks the sentinels for the master's address
(MasterNotFoundError, a ConnectionError, until they have failed over).
"""

from __future__ import annotations

import sys

import pytest
import redis
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.retry
import redis.sentinel
from failover import (
    Tally,
    assert_errors_bounded,
    assert_nothing_lost,
    async_stream,
    run_with_failover,
    sync_stream,
)
from topology import SENTINEL_SERVICE, RedisSentinel, command, dump_logs

import redis_backoff_c
import redis_backoff_c.asyncio.retry
import redis_backoff_c.backoff
import redis_backoff_c.retry

pytestmark = pytest.mark.skipif(
    redis_backoff_c.IMPLEMENTATION != "c", reason="the C types are not built"
)

# Delays of 100 ms doubling to 400 ms, 9 retries: about 3.1 s, as long as
# a failover here.  It does not ride the failover out, whatever the budget:
# in redis-py 8.1 a connection that lost its socket reconnects to the
# address it had (send_packed_command calls connect_check_health, not the
# sentinel-aware connect()), so the command in flight when the master dies
# retries against the dead address until its Retry gives up, and reaches
# the caller as a ConnectionError; the next command takes a connection
# from the pool, which asks the sentinels.  A second error comes when the
# sentinels are slower than one budget.  The reference shows the same.
CAP, BASE, RETRIES = 0.4, 0.05, 9
ERROR_SLACK = 2


@pytest.fixture(scope="module")
def sentinel_setup():
    with RedisSentinel.started() as running:
        yield running


def policy(retry_module, backoff_module):
    """The policy, built from the modules given (looked up when called:
    under patch(), redis.retry and redis.backoff hold the C types)."""
    return retry_module.Retry(backoff_module.ExponentialBackoff(cap=CAP, base=BASE), RETRIES)


def fail_over(setup: RedisSentinel, tally: Tally, workload) -> None:
    setup.wait_healthy()
    master = setup.master()

    def kill_and_wait() -> None:
        master.kill()
        setup.wait_failover(master)

    try:
        run_with_failover(tally, workload, kill_and_wait)
    except BaseException:
        dump_logs(setup.data + setup.sentinels)
        raise
    finally:
        if not master.running:
            setup.restart_as_replica(master)
        setup.wait_healthy()


def finish(setup: RedisSentinel, tally: Tally) -> Tally:
    port = setup.master().port
    final = {}
    for key in tally.keys:
        value = command(port, "GET", key)
        final[key] = 0 if value is None else int(value)  # type: ignore[arg-type]
    try:
        assert_nothing_lost(tally, final)
    except AssertionError:
        print(tally.summary(), file=sys.stderr)
        dump_logs(setup.data + setup.sentinels)
        raise
    print(tally.summary())
    return tally


def sentinel_options() -> dict:
    return {"socket_timeout": 1, "socket_connect_timeout": 1}


# --- sync ---------------------------------------------------------------


def sync_run(setup: RedisSentinel, label: str, retry, check=None) -> Tally:
    sentinel = redis.sentinel.Sentinel(setup.sentinel_addresses, **sentinel_options())
    client = sentinel.master_for(SENTINEL_SERVICE, retry=retry, **sentinel_options())
    client.ping()
    if check is not None:
        check(sentinel, client)

    def incr(key):
        return client.incr(key)

    def transaction(key):
        with client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            return pipe.execute()[0]

    tally = Tally(label)
    try:
        fail_over(setup, tally, sync_stream(incr, transaction))
    finally:
        client.close()
        for each in sentinel.sentinels:
            each.close()
    return finish(setup, tally)


def assert_sync_c_types(sentinel, client, sentinels_too: bool) -> None:
    connection = client.connection_pool.get_connection()
    try:
        assert type(connection.retry) is redis_backoff_c.retry.Retry
    finally:
        client.connection_pool.release(connection)
    if sentinels_too:  # the clients Sentinel made for each sentinel, default Retry
        for each in sentinel.sentinels:
            assert type(each.get_retry()) is redis_backoff_c.retry.Retry


def test_sync_master_for_through_failover(sentinel_setup):
    reference = sync_run(sentinel_setup, "redis-py Retry", policy(redis.retry, redis.backoff))
    explicit = sync_run(
        sentinel_setup,
        "C Retry",
        policy(redis_backoff_c.retry, redis_backoff_c.backoff),
        check=lambda sentinel, client: assert_sync_c_types(sentinel, client, False),
    )
    with redis_backoff_c.patched():
        patched = sync_run(
            sentinel_setup,
            "patched",
            policy(redis.retry, redis.backoff),
            check=lambda sentinel, client: assert_sync_c_types(sentinel, client, True),
        )
    assert_errors_bounded(explicit, reference, ERROR_SLACK)
    assert_errors_bounded(patched, reference, ERROR_SLACK)


# --- asyncio ------------------------------------------------------------


def async_run(setup: RedisSentinel, label: str, make_retry, check=None) -> Tally:
    """`make_retry()` and `check(sentinel, client)` run inside the loop."""
    made = []

    async def make_client():
        sentinel = redis.asyncio.sentinel.Sentinel(setup.sentinel_addresses, **sentinel_options())
        client = sentinel.master_for(SENTINEL_SERVICE, retry=make_retry(), **sentinel_options())
        made.append(sentinel)
        await client.ping()
        if check is not None:
            await check(sentinel, client)
        return client

    async def incr(client, key):
        return await client.incr(key)

    async def transaction(client, key):
        async with client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            return (await pipe.execute())[0]

    async def close_sentinels(client):
        for each in made[0].sentinels:
            await each.aclose()

    tally = Tally(label)
    fail_over(setup, tally, async_stream(make_client, incr, transaction, close_sentinels))
    return finish(setup, tally)


def assert_async_c_types(sentinels_too: bool):
    async def check(sentinel, client) -> None:
        connection = await client.connection_pool.get_connection()
        try:
            assert type(connection.retry) is redis_backoff_c.asyncio.retry.Retry
        finally:
            await client.connection_pool.release(connection)
        if sentinels_too:
            for each in sentinel.sentinels:
                assert type(each.get_retry()) is redis_backoff_c.asyncio.retry.Retry

    return check


def test_asyncio_master_for_through_failover(sentinel_setup):
    reference = async_run(
        sentinel_setup, "redis-py asyncio Retry", lambda: policy(redis.asyncio.retry, redis.backoff)
    )
    explicit = async_run(
        sentinel_setup,
        "C asyncio Retry",
        lambda: policy(redis_backoff_c.asyncio.retry, redis_backoff_c.backoff),
        check=assert_async_c_types(False),
    )
    with redis_backoff_c.patched():
        patched = async_run(
            sentinel_setup,
            "patched asyncio",
            lambda: policy(redis.asyncio.retry, redis.backoff),
            check=assert_async_c_types(True),
        )
    assert_errors_bounded(explicit, reference, ERROR_SLACK)
    assert_errors_bounded(patched, reference, ERROR_SLACK)
