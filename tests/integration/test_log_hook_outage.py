"""The logging hook through a real outage (issue 32): one Redis restart
must not write a line per retry.

A sync redis.Redis client whose Retry has a RetryLogger as on_retry and
on_give_up sends INCRs at RATE a second (open loop: each on a thread of a
pool, whether or not the earlier ones failed), while redis-server is
stopped, left down DOWN seconds and started again on the same port.  Each
event goes to two RetryLoggers at once, one with the default rate limit and
one without, so both see the very same events.  The test prints how many
lines each wrote, and checks:

- without the limit, every retry and give-up is a line (RetryStats counts
  them), hundreds of them;
- with it, no kind of line (event, reason, error class) has more lines
  than its burst plus the tokens refilled while the load ran;
- so the limited count is small and the unlimited one many times larger.

Run over the C types and their pure-Python twin (the `extras` fixture).
"""

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import redis
from incr_stream import redis_server as redis_server  # the fixture

from redis_backoff_c.backoff import ExponentialBackoff
from redis_backoff_c.log import DEFAULT_RATE_LIMIT, RetryLogger

RATE = 100  # requests a second
UP_BEFORE = 0.5  # seconds of load before the stop
DOWN = 2.0  # seconds the server stays down
UP_AFTER = 1.0  # seconds of load after it is back
# About 0.15 s of retrying a request through the outage: 0.02 + 0.04 + 0.08.
BACKOFF = {"cap": 0.1, "base": 0.01}
RETRIES = 3
LIMITED = "redis_backoff_c.outage.limited"
UNLIMITED = "redis_backoff_c.outage.unlimited"


class Outage(threading.Thread):
    """Stops the server UP_BEFORE seconds in, starts it DOWN seconds later."""

    def __init__(self, server):
        super().__init__(name="outage")
        self.server = server
        self.error = None
        self.down = self.up = None

    def run(self):
        try:
            time.sleep(UP_BEFORE)
            self.server.stop()
            self.down = time.monotonic()
            time.sleep(DOWN)
            self.server.start()
            self.up = time.monotonic()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def send_through_outage(client, outage):
    """INCRs at RATE a second until UP_AFTER seconds after the restart;
    the outcome of each, in the order they were sent ("ok" or the error's
    class name)."""
    outcomes = {}

    def request(index):
        try:
            client.incr("log-hook-outage")
            outcomes[index] = "ok"
        except redis.exceptions.RedisError as error:
            outcomes[index] = type(error).__name__

    with ThreadPoolExecutor(max_workers=200) as pool:
        start = time.monotonic()
        outage.start()
        index = 0
        while not load_is_over(outage):
            time.sleep(max(0.0, start + index / RATE - time.monotonic()))
            pool.submit(request, index)
            index += 1
        outage.join()
    assert outage.error is None, outage.error
    return [outcomes[i] for i in range(index)]


def load_is_over(outage):
    if outage.is_alive():
        return False
    return outage.error is not None or time.monotonic() >= outage.up + UP_AFTER


def kinds(records):
    return {(r.retry_event, r.retry_reason, r.retry_error_type) for r in records}


def test_the_rate_limit_keeps_an_outage_to_a_few_lines(extras, redis_server, caplog, capsys):
    caplog.set_level(logging.DEBUG, logger="redis_backoff_c")
    limited = RetryLogger(LIMITED)
    unlimited = RetryLogger(UNLIMITED, rate_limit=None)

    def log(event):
        limited(event)
        unlimited(event)

    stats = extras.RetryStats()
    retry = extras.Retry(
        ExponentialBackoff(**BACKOFF), RETRIES, on_retry=log, on_give_up=log, stats=stats
    )
    client = redis.Redis(
        host="127.0.0.1",
        port=redis_server.port,
        retry=retry,
        socket_connect_timeout=1.0,
        socket_timeout=1.0,
        max_connections=1000,
    )
    client.ping()
    began = time.monotonic()
    outcomes = send_through_outage(client, Outage(redis_server))
    elapsed = time.monotonic() - began
    client.close()

    lines = {name: [r for r in caplog.records if r.name == name] for name in (LIMITED, UNLIMITED)}
    n_limited, n_unlimited = len(lines[LIMITED]), len(lines[UNLIMITED])
    failed = len(outcomes) - outcomes.count("ok")
    with capsys.disabled():
        print(
            f"\n[log hook] outage {DOWN} s at {RATE} req/s ({extras.name}): "
            f"{n_limited} lines with the rate limit, {n_unlimited} without "
            f"({len(outcomes)} requests, {failed} failed, {len(kinds(lines[UNLIMITED]))} kinds)"
        )

    recovered = outcomes[-RATE // 2 :]  # the last half second
    assert recovered == ["ok"] * len(recovered), "the client did not recover"
    assert failed > 0, "no request saw the outage"
    # Without the limit, one line per event, none lost under threads.
    snapshot = stats.snapshot()
    gave_up = sum(v for k, v in snapshot.items() if k.startswith("give_ups_"))
    assert n_unlimited == snapshot["retries"] + gave_up, snapshot
    # With it, at most each kind's burst and its refills while the load ran.
    limit = DEFAULT_RATE_LIMIT
    per_kind = limit.burst + int(elapsed / limit.interval)
    assert n_limited <= len(kinds(lines[UNLIMITED])) * per_kind
    assert kinds(lines[LIMITED]) == kinds(lines[UNLIMITED])  # no kind hidden
    assert n_unlimited >= 10 * n_limited
