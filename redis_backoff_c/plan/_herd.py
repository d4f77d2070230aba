"""The herd simulator: N clients whose calls start during an outage.

The server refuses every attempt until ``outage`` seconds, then serves at
most ``capacity`` attempts per second, counted in 10 ms bins (first come,
first served within a bin); an attempt past the capacity fails like a
refused connection.  Each client runs one call as ``call_with_retry`` would:
reset() its own copy of the policy's strategy, attempt, and on a failure
count it, give up past ``retries`` (or the deadline, or the budget), else
sleep ``compute(failures)`` (a delay > 0) and attempt again.  An attempt
takes ``attempt_time`` seconds.

A budget (gRFC A6 retry throttling: tokens start at ``max_tokens``; each
failed attempt takes one, each success gives back ``token_ratio``, a retry
is allowed only while tokens > max_tokens / 2) is one budget shared by all
N callers, as N threads or tasks sharing one ``redis.Redis`` share the
Retry's budget.
"""

from __future__ import annotations

import copy
import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

from redis_backoff_c.plan._describe import seeded_sources
from redis_backoff_c.plan._policy import (
    budget_of,
    deadline_of,
    describe_policy,
    known_kind,
    retries_of,
)

__all__ = ["BIN", "CAPACITY_BIN", "HerdReport", "simulate_herd"]

#: Width of the bins the report counts attempts in (seconds).
BIN = 0.1
#: Width of the bins the server's capacity is counted in (seconds).
CAPACITY_BIN = 0.01
#: Attempts after which a simulation stops (a policy that never waits).
MAX_ATTEMPTS = 10_000_000


@dataclass(frozen=True)
class HerdReport:
    policy: str
    clients: int
    outage: float
    capacity: float
    attempt_time: float
    total_attempts: int
    peak_after_recovery: int  # most attempts in one 100 ms bin after the outage
    succeeded: int
    gave_up: int
    unfinished: int  # still retrying when the simulation stopped
    last_finished: float  # when the last call that ended (success or give-up) ended
    attempts_per_bin: tuple[int, ...]  # attempts in each 100 ms bin from 0
    budget: tuple[float, float] | None = None
    deadline: float | None = None
    truncated: bool = False
    kind: str | None = None  # the strategy's name when it is one of the seven
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "clients": self.clients,
            "outage": self.outage,
            "capacity": self.capacity,
            "attempt_time": self.attempt_time,
            "deadline": self.deadline,
            "budget": list(self.budget) if self.budget else None,
            "total_attempts": self.total_attempts,
            "peak_attempts_per_100ms_after_recovery": self.peak_after_recovery,
            "succeeded": self.succeeded,
            "gave_up": self.gave_up,
            "unfinished": self.unfinished,
            "last_finished": self.last_finished,
            "attempts_per_100ms": list(self.attempts_per_bin),
            "truncated": self.truncated,
        }


class _Capacity:
    """How many attempts each 10 ms bin after the outage may serve: the
    fractional part carries over, so 150/s serves 1 or 2 a bin, 150 a second."""

    def __init__(self, outage: float, per_second: float) -> None:
        self.outage = outage
        self.per_bin = per_second * CAPACITY_BIN
        self.served: dict[int, int] = {}

    def admit(self, when: float) -> bool:
        if when < self.outage:
            return False
        index = math.floor((when - self.outage) / CAPACITY_BIN)
        allowed = math.floor(self.per_bin * (index + 1)) - math.floor(self.per_bin * index)
        served = self.served.get(index, 0)
        if served >= allowed:
            return False
        self.served[index] = served + 1
        return True


class _Budget:
    def __init__(self, max_tokens: float, token_ratio: float) -> None:
        self.max_tokens = max_tokens
        self.ratio = token_ratio
        self.tokens = max_tokens

    def failed(self) -> bool:
        """One failed attempt; True when a retry is still allowed."""
        self.tokens = max(0.0, self.tokens - 1)
        return self.tokens > self.max_tokens / 2

    def succeeded(self) -> None:
        self.tokens = min(self.max_tokens, self.tokens + self.ratio)


def _check(clients: int, outage: float, capacity: float, attempt_time: float) -> None:
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise ValueError(f"clients must be an int >= 1, not {clients!r}")
    for name, value in (("outage", outage), ("capacity", capacity), ("attempt_time", attempt_time)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")


def simulate_herd(
    retry: object,
    clients: int,
    outage: float,
    capacity: float,
    *,
    attempt_time: float = 0.001,
    spread: float = 0.0,
    deadline: float | None = None,
    budget: tuple[float, float] | None = None,
    until: float | None = None,
    seed: int | None = None,
    label: str | None = None,
) -> HerdReport:
    """Run the herd.  Calls start at times uniform on ``[0, spread)`` (all at
    0 by default: the synchronised worst case).  ``deadline`` and ``budget``
    default to the Retry's own when it has them.  The run stops when every
    call has ended or at ``until`` (default: outage + 120 s)."""
    _check(clients, outage, capacity, attempt_time)
    strategy = getattr(retry, "_backoff", None)
    if strategy is None or not callable(getattr(strategy, "compute", None)):
        raise TypeError(f"simulate_herd() needs a Retry, not {type(retry).__name__}")
    retries = retries_of(retry)
    deadline = deadline if deadline is not None else deadline_of(retry)
    budget = budget if budget is not None else budget_of(retry)
    stop = until if until is not None else outage + 120.0
    starts = random.Random(seed)
    server = _Capacity(outage, capacity)
    tokens = _Budget(*budget) if budget is not None else None

    strategies: list[Any] = []
    failures = [0] * clients
    started = [0.0] * clients
    queue: list[tuple[float, int]] = []
    for client in range(clients):
        own = copy.deepcopy(strategy)
        strategies.append(own)
        when = starts.random() * spread if spread > 0 else 0.0
        started[client] = when
        queue.append((when, client))
    heapq.heapify(queue)

    per_bin: dict[int, int] = {}
    attempts = succeeded = gave_up = 0
    last = 0.0
    truncated = False
    with seeded_sources(seed):
        for own in strategies:
            own.reset()
        while queue:
            when, client = heapq.heappop(queue)
            if when > stop:
                heapq.heappush(queue, (when, client))
                break
            if attempts >= MAX_ATTEMPTS:
                heapq.heappush(queue, (when, client))
                truncated = True
                break
            attempts += 1
            index = math.floor(when / BIN)
            per_bin[index] = per_bin.get(index, 0) + 1
            done = when + attempt_time
            if server.admit(when):
                succeeded += 1
                last = max(last, done)
                if tokens is not None:
                    tokens.succeeded()
                continue
            failures[client] += 1
            allowed = tokens.failed() if tokens is not None else True
            if not allowed or (0 <= retries < failures[client]):
                gave_up += 1
                last = max(last, done)
                continue
            delay = float(strategies[client].compute(failures[client]))
            sleep = delay if delay > 0 else 0.0
            if deadline is not None and done + sleep >= started[client] + deadline:
                gave_up += 1
                last = max(last, done)
                continue
            heapq.heappush(queue, (done + sleep, client))

    recovery = math.floor(outage / BIN + 1e-9)
    bins = tuple(per_bin.get(i, 0) for i in range(max(per_bin, default=-1) + 1))
    peak = max(bins[recovery:], default=0)
    notes = []
    if truncated:
        notes.append(f"stopped after {MAX_ATTEMPTS} attempts")
    return HerdReport(
        policy=label or describe_policy(retry),
        clients=clients,
        outage=float(outage),
        capacity=float(capacity),
        attempt_time=float(attempt_time),
        total_attempts=attempts,
        peak_after_recovery=peak,
        succeeded=succeeded,
        gave_up=gave_up,
        unfinished=len(queue),
        last_finished=last,
        attempts_per_bin=bins,
        budget=budget,
        deadline=deadline,
        truncated=truncated,
        kind=known_kind(strategy),
        notes=tuple(notes),
    )
