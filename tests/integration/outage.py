"""An open-loop workload through a real outage, for the extras' tests
(test_outage_extras.py), sync and asyncio.

Requests arrive at a fixed rate (RATE a second for DURATION seconds),
each served concurrently (a thread of a large pool, or an asyncio task),
whether or not earlier ones failed: that is the load a retry budget exists
to protect a server from.  Each request is one INCR through one client
whose Retry is `Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.2), 10,
...)`.  KILL_AT seconds in, redis-server is SIGKILLed; DOWN seconds later it
is restarted on the same port and data (AOF, fsync always), and
`server.start()` returns once it answers PING: the outage is [kill, up).

What reaches the server's port is counted at the client: every TCP connect
attempt that redis-py's Connection makes (`_connect`, which redis-py itself
retries with the same Retry, nested inside the command's call_with_retry).
While the server is down every attempt is a connect attempt, refused.  Each
request counts its own (a context variable: per thread, per task).
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis.asyncio.connection
import redis.connection

# 100 a second, not 200: without a budget every request retries about ten
# times through the outage, and on a loaded 2-CPU machine 2,000 connects a
# second starve the asyncio event loop, which then retries slower than its
# policy and makes the no-budget baseline look better than it is.
RATE = 100  # requests a second
DURATION = 4.6  # seconds of arrivals
KILL_AT = 1.2  # seconds after the first arrival
DOWN = 2.0  # seconds the server stays dead
CONNECT_TIMEOUT = 1.0  # socket_connect_timeout of the client
SOCKET_TIMEOUT = 2.0
BACKOFF = {"base": 0.01, "cap": 0.2}
RETRIES = 10

#: The connect attempts of the request running in this thread or task.
_attempts: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar(
    "attempts", default=None
)


class PortCounter:
    """Every connect attempt of the client, with its time."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.lock = threading.Lock()

    def record(self) -> None:
        now = time.monotonic()
        with self.lock:
            self.times.append(now)
        mine = _attempts.get()
        if mine is not None:
            mine.append(now)

    def between(self, start: float, end: float) -> int:
        return sum(1 for t in self.times if start <= t < end)


def counting_connection_classes(counter: PortCounter):
    """Connection classes (sync, asyncio) that count each connect attempt."""

    class CountingConnection(redis.connection.Connection):
        def _connect(self):
            counter.record()
            return super()._connect()

    class CountingAsyncConnection(redis.asyncio.connection.Connection):
        async def _connect(self):
            counter.record()
            return await super()._connect()

    return CountingConnection, CountingAsyncConnection


@dataclass
class Request:
    index: int
    arrival: float  # when it was due (open loop)
    start: float = 0.0  # when the call began
    end: float = 0.0
    value: int | None = None  # INCR's reply: acknowledged
    error: str | None = None
    connects: int = 0


def begin_request() -> list[float]:
    """In the thread or task serving a request: start counting its connects."""
    mine: list[float] = []
    _attempts.set(mine)
    return mine


@dataclass
class Outage:
    """The times of the fault, set by the fault thread."""

    start: float = 0.0
    kill: float = 0.0
    up: float = 0.0
    error: list[BaseException] = field(default_factory=list)


@contextlib.contextmanager
def black_hole(port: int) -> Iterator[None]:
    """The port listens and never accepts, its backlog full: a connect to
    it waits until its own timeout (the SYNs are dropped)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(0)
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def strike(server, outage: Outage, holed: bool = False) -> threading.Thread:
    """Start the fault thread: SIGKILL at KILL_AT, restart DOWN later; with
    `holed`, the port is a black hole while the server is down (connects
    hang) instead of refusing connections."""

    def run() -> None:
        try:
            time.sleep(max(0.0, outage.start + KILL_AT - time.monotonic()))
            server.kill()
            outage.kill = time.monotonic()
            with black_hole(server.port) if holed else contextlib.nullcontext():
                time.sleep(max(0.0, outage.kill + DOWN - time.monotonic()))
            server.start()
            outage.up = time.monotonic()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            outage.error.append(error)

    thread = threading.Thread(target=run, name="outage")
    thread.start()
    return thread


@dataclass
class Figures:
    label: str
    requests: int
    outage_requests: int
    attempts_per_request: float  # mean connects of a request arriving in the outage
    port_attempts_per_second: float  # connect attempts in the outage, a second
    max_outage_call: float  # the longest call that started in the outage
    recovery: float  # seconds from `up` until every later request succeeds
    acknowledged: int
    failed: int
    stats: dict

    def line(self) -> str:
        return (
            f"{self.label:<22} requests={self.requests} in-outage={self.outage_requests} "
            f"attempts/request={self.attempts_per_request:.2f} "
            f"port attempts/s={self.port_attempts_per_second:.0f} "
            f"longest outage call={self.max_outage_call:.3f}s "
            f"recovery={self.recovery:.3f}s acked={self.acknowledged} failed={self.failed}"
        )


def figures(label, requests, outage: Outage, counter: PortCounter, stats) -> Figures:
    during = [r for r in requests if outage.kill <= r.arrival < outage.up]
    after_up = sorted((r for r in requests if r.arrival >= outage.up), key=lambda r: r.arrival)
    # The first arrival after `up` from which every request succeeded.
    recovered_at = None
    for r in reversed(after_up):
        if r.error is not None:
            break
        recovered_at = r.arrival
    recovery = (recovered_at - outage.up) if recovered_at is not None else float("inf")
    return Figures(
        label=label,
        requests=len(requests),
        outage_requests=len(during),
        attempts_per_request=statistics.fmean(r.connects for r in during),
        port_attempts_per_second=counter.between(outage.kill, outage.up)
        / (outage.up - outage.kill),
        max_outage_call=max(r.end - r.start for r in during),
        recovery=max(0.0, recovery),
        acknowledged=sum(r.value is not None for r in requests),
        failed=sum(r.error is not None for r in requests),
        stats=stats.snapshot(),
    )


def assert_nothing_acknowledged_lost(requests, final: int) -> None:
    """Each acknowledged INCR survived the SIGKILL (appendfsync always):
    had one been lost, the counter would have fallen back and a later INCR
    would have returned a value already acknowledged; and the counter
    holds at least every acknowledged increment."""
    acked = [r.value for r in requests if r.value is not None]
    assert len(set(acked)) == len(acked), "an acknowledged INCR was lost"
    assert final >= max(acked)
    assert final >= len(acked)
    # every request ended one way or the other
    assert all((r.value is None) != (r.error is None) for r in requests)
