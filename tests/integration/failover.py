"""A stream of INCRs through a real failover, and what it may not lose.

Shared by the Cluster and Sentinel failover tests, sync and asyncio.  One
client sends one command at a time (INCR on keys spread over the keyspace,
some of them inside a MULTI/EXEC pipeline) while another thread SIGKILLs a
master, waits until the topology has promoted its replica, and waits for
the client to make progress again.

What is provable (topology.py says why an acknowledged write reaches the
replica before the client sees the reply):

- for each key, the acknowledged values strictly increase, and the value
  read at the end is at least the last one: nothing acknowledged was lost;
- the INCRs applied (the sum of the counters) are at least the
  acknowledged ones and at most one more per kill: only the command in
  flight when the master died can have been applied without its reply
  reaching the client (and then applied again by a retry).

Errors that reach the caller are counted, not fatal to the stream: during
a failover some are expected (a plain cluster command retries in its own
loop, without backoff under redis-py 8.1, see docs/cluster-sentinel.md),
and the tests compare their number with
redis-py's own Retry in the same scenario.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

# Keys over the whole keyspace: enough that every master owns many.
KEY_COUNT = 240
# Acknowledged commands before the kill, and after the failover completed.
WARMUP = 100
AFTER = 100
# A workload that makes no progress for this long has failed.
WORKLOAD_TIMEOUT = 30.0


@dataclass
class Tally:
    label: str
    keys: list[str] = field(default_factory=list)
    acked: dict[str, list[int]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    count: int = 0  # acknowledged commands
    longest_stall: float = 0.0  # seconds between two acknowledgements, at most
    failover_seconds: float = 0.0
    kill_time: float = 0.0
    kills: int = 0
    _last: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        # Fresh keys for each run: their counters start at zero.
        self.keys = [f"{self.label}:{time.monotonic_ns()}:{n}" for n in range(KEY_COUNT)]

    def ack(self, key: str, value: int) -> None:
        now = time.monotonic()
        self.longest_stall = max(self.longest_stall, now - self._last)
        self._last = now
        self.acked.setdefault(key, []).append(value)
        self.count += 1

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        messages: dict[str, int] = {}
        for error in self.errors:
            kinds[type(error).__name__] = kinds.get(type(error).__name__, 0) + 1
            message = f"{type(error).__name__}: {error}"[:120]
            messages[message] = messages.get(message, 0) + 1
        # The commonest messages: a failure in CI says which path failed.
        commonest = sorted(messages.items(), key=lambda item: -item[1])[:3]
        return (
            f"{self.label}: acknowledged {self.count}, errors {len(self.errors)} {kinds or ''}, "
            f"longest stall {self.longest_stall * 1000:.0f} ms, "
            f"failover {self.failover_seconds:.2f} s"
            + "".join(f"\n  {count} x {message}" for message, count in commonest)
        )


def run_with_failover(tally: Tally, workload, kill_and_wait) -> None:
    """Run `workload(tally, done)` in this thread until `done` is set,
    while another thread waits for WARMUP acknowledgements, calls
    `kill_and_wait()` (SIGKILL a master, return once the topology has
    failed over) and waits for AFTER more."""
    done = threading.Event()
    failure: list[BaseException] = []

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + WORKLOAD_TIMEOUT
        while tally.count < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{tally.label}: stuck at {tally.count} acknowledgements, "
                    f"errors {tally.errors[-3:]}"
                )
            time.sleep(0.005)

    def conductor() -> None:
        try:
            wait_for(WARMUP)
            start = tally.kill_time = time.monotonic()
            kill_and_wait()
            tally.kills += 1
            tally.failover_seconds = time.monotonic() - start
            wait_for(tally.count + AFTER)
        except BaseException as error:  # reported by the main thread
            failure.append(error)
        finally:
            done.set()

    thread = threading.Thread(target=conductor, name=f"failover-{tally.label}")
    thread.start()
    try:
        workload(tally, done)
    finally:
        done.set()
        thread.join()
    if failure:
        raise failure[0]


def sync_stream(incr, transaction):
    """A workload: INCR the keys in turn with `incr(key)`, every third
    through `transaction(key)` (a one-key MULTI/EXEC pipeline); errors are
    counted and the stream goes on."""

    def workload(tally: Tally, done: threading.Event) -> None:
        n = 0
        while not done.is_set():
            key = tally.keys[n % KEY_COUNT]
            try:
                value = transaction(key) if n % 3 == 2 else incr(key)
            except Exception as error:
                tally.errors.append(error)
            else:
                tally.ack(key, int(value))
            n += 1

    return workload


def async_stream(make_client, incr, transaction, cleanup=None):
    """sync_stream for asyncio: `make_client()` is awaited inside the
    event loop that runs the stream; `incr(client, key)`,
    `transaction(client, key)` and `cleanup(client)` (awaited at the end,
    before the client is closed) are coroutine functions."""

    def workload(tally: Tally, done: threading.Event) -> None:
        async def main() -> None:
            client = await make_client()
            try:
                n = 0
                while not done.is_set():
                    key = tally.keys[n % KEY_COUNT]
                    try:
                        if n % 3 == 2:
                            value = await transaction(client, key)
                        else:
                            value = await incr(client, key)
                    except Exception as error:
                        tally.errors.append(error)
                        await asyncio.sleep(0)
                    else:
                        tally.ack(key, int(value))
                    n += 1
            finally:
                if cleanup is not None:
                    await cleanup(client)
                await client.aclose()

        asyncio.run(main())

    return workload


def assert_nothing_lost(tally: Tally, final: dict[str, int]) -> None:
    """`final`: every key of the tally's counter read after the failover
    (None or 0 where never written)."""
    assert tally.kills == 1
    final = {key: int(final.get(key) or 0) for key in tally.keys}
    for key, values in tally.acked.items():
        assert all(b > a for a, b in zip(values, values[1:])), (
            f"{tally.label}: {key} went back: {values}"
        )
        assert final[key] >= values[-1], (
            f"{tally.label}: {key} acknowledged {values[-1]}, reads {final[key]}: a write was lost"
        )
    applied = sum(final.values())
    assert tally.count <= applied <= tally.count + tally.kills, (tally.count, applied)


def assert_errors_bounded(tally: Tally, reference: Tally, slack: int) -> None:
    """Errors reaching the caller are RedisErrors, no more than the
    reference's in the same scenario plus `slack`."""
    import redis.exceptions

    for error in tally.errors:
        assert isinstance(error, redis.exceptions.RedisError), repr(error)
    assert len(tally.errors) <= len(reference.errors) + slack, (
        tally.summary(),
        reference.summary(),
    )
