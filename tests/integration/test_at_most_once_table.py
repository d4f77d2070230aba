"""writes="at-most-once" and its command table (redis_backoff_c.writes),
through real faults: the fault proxy loses a reply (fault_proxy.py), the
server in front of it says how many times it ran the command (INFO
commandstats) and what it holds afterwards.

Each case runs with redis-py's own Retry beside the policy (on the C Retry
and its pure-Python twin), sync and asyncio, and prints what each side
gave the caller:

- a conditional expiration (EXPIREAT NX, PEXPIREAT in the past) is not
  repeated: redis-py's Retry returns False though the first run set the
  expiry (or deleted the key); the policy raises the marked error;
- SET is not repeated unless the program opts in to "last writer wins"
  (writes.add_last_writer_wins()): with another client's SET in between,
  redis-py's Retry overwrites it; the policy raises the marked error; the
  opt-in repeats it as redis-py does;
- reads the server leaves without the readonly flag (ROLE, LASTSAVE, SORT
  without STORE) are retried and return, as with redis-py's Retry; SORT
  with STORE, and WAIT, are not.
"""

from __future__ import annotations

import time

import pytest
import redis
import redis.backoff
from fault_proxy import proxy as proxy  # the fixture
from incr_stream import redis_server as redis_server  # the fixture
from support import assert_stats_add_up
from test_at_most_once import (
    SIDES,
    clients as clients,  # the fixture
    make_retry,
    report,
    server as server,  # the fixture
    stats_of,
)

import redis_backoff_c
from redis_backoff_c.backoff import NoBackoff


def runs(server, command):
    """How many times the server ran `command` (INFO commandstats)."""
    stats = server.info("commandstats").get(f"cmdstat_{command.lower()}")
    return stats["calls"] if stats else 0


def through_a_lost_reply(side, flavor, proxy, clients, operation, backoff=None):
    """`operation` run by a client of `side` and `flavor` (retries: 3)
    whose first request after connecting has its reply lost; returns
    ("returned", value) or ("raised", error), the error marked may-have-run
    when the policy raised it, and the stats adding up."""
    stats = stats_of(side)
    extras = {"stats": stats} if stats is not None else {}
    retry = make_retry(side, flavor, backoff or NoBackoff(), 3, **extras)
    client = clients(flavor, proxy.port, retry)
    assert client.run(lambda c: c.ping())  # connected: the command is what gets dropped
    proxy.drop_after_request(1)
    try:
        outcome = ("returned", client.run(operation))
    except redis.ConnectionError as error:
        assert side != "redis-py", error
        assert redis_backoff_c.may_have_run(error)
        outcome = ("raised", error)
    assert proxy.dropped == 1
    if stats is not None:
        assert_stats_add_up(stats.snapshot())
        assert stats.give_ups_may_have_run == (outcome[0] == "raised")
    return outcome


def over(name, cases, ids=None):
    """The test over every side, each of `cases` (its argument `name`),
    and both flavors."""

    def parametrize(test):
        test = pytest.mark.parametrize("side", SIDES)(test)
        test = pytest.mark.parametrize(name, list(cases), ids=ids)(test)
        return pytest.mark.parametrize("flavor", ["sync", "asyncio"])(test)

    return parametrize


def said(outcome):
    kind, value = outcome
    return f"returned {value!r}" if kind == "returned" else "raised the marked error"


# ------------------------------------------- 3: conditional expirations

AN_HOUR = 3600


def expireat_nx(client):
    return client.expireat("e", int(time.time()) + AN_HOUR, nx=True)


def pexpireat_past(client):
    return client.pexpireat("e", 1000)  # 1970: the first run deletes the key


EXPIRATIONS = {
    # name: (operation, command, what the first run left)
    "EXPIREAT NX": (expireat_nx, "EXPIREAT", lambda s: f"TTL {s.ttl('e')} s"),
    "PEXPIREAT in the past": (pexpireat_past, "PEXPIREAT", lambda s: f"exists {s.exists('e')}"),
}


@over("expiration", EXPIRATIONS)
def test_a_conditional_expiration_whose_reply_is_lost(
    side, expiration, flavor, proxy, server, clients, capsys
):
    # The first run sets the expiry (or deletes the key) and replies 1; the
    # reply is lost; a repeat replies 0, and the caller would read False.
    operation, command, left = EXPIRATIONS[expiration]
    server.set("e", "v")
    outcome = through_a_lost_reply(side, flavor, proxy, clients, operation)
    if side == "redis-py":
        assert outcome == ("returned", False)  # though the first run did it
        assert runs(server, command) == 2
    else:
        assert outcome[0] == "raised"
        assert runs(server, command) == 1
    if expiration == "EXPIREAT NX":
        assert server.ttl("e") > AN_HOUR - 60
    else:
        assert server.exists("e") == 0
    report(
        capsys,
        f"{side} {flavor} {expiration}: {said(outcome)}; the server ran it "
        f"{runs(server, command)} time(s), {left(server)}",
    )


# ------------------------------------------ 4: SET, last writer wins


class AnotherWriter(redis.backoff.AbstractBackoff):
    """A backoff of 0 s that, before the first retry, has another client
    SET the key: the write "in between" of last writer wins."""

    def __init__(self, server):
        self.server = server
        self.wrote = False

    def compute(self, failures):
        self.write()
        return 0

    def write(self):
        if not self.wrote:
            self.wrote = True
            self.server.set("k", "B")

    def reset(self):
        pass

    def __deepcopy__(self, memo):
        return self  # redis-py copies the Retry it is given: one writer all the same


@over("opt_in", [False, True], ids=["default", "last-writer-wins"])
def test_a_set_whose_reply_is_lost_with_another_writer(
    side, opt_in, flavor, proxy, server, clients, writes_table, capsys
):
    # Our SET k A loses its reply; another client runs SET k B; a retry
    # makes it A again, and B is lost with no error anywhere.
    if side == "redis-py" and opt_in:
        pytest.skip("redis-py's Retry has no policy to opt in to")
    if opt_in:
        writes_table.add_last_writer_wins()
    writer = AnotherWriter(server)
    outcome = through_a_lost_reply(
        side, flavor, proxy, clients, lambda c: c.set("k", "A"), backoff=writer
    )
    writer.write()  # not retried: the other client writes after the error
    if side == "redis-py" or opt_in:
        assert outcome == ("returned", True)
        assert server.get("k") == b"A"  # the retry overwrote B
        assert runs(server, "SET") == 3  # ours twice, the other client's once
    else:
        assert outcome[0] == "raised"
        assert server.get("k") == b"B"  # the other client's write stands
        assert runs(server, "SET") == 2
    name = f"{side} + add_last_writer_wins()" if opt_in else side
    report(
        capsys,
        f"{name} {flavor} SET k A, another client's SET k B in between: {said(outcome)}; "
        f"k = {server.get('k').decode()}",
    )


# ----------------------------- 8: reads without the server's readonly flag


def sort(client):
    return client.sort("l")


def sort_store(client):
    return client.sort("l", store="sorted")


READS = {
    # name: (operation, command, retried under the policy)
    "ROLE": (lambda c: c.role(), "ROLE", True),
    "LASTSAVE": (lambda c: c.lastsave(), "LASTSAVE", True),
    "SORT": (sort, "SORT", True),
    "SORT ... STORE": (sort_store, "SORT", False),
    # WAIT writes nothing, but answers for the writes made earlier on the
    # same connection; the retry's new connection has made none (see
    # writes.py's command table).  Not retried.
    "WAIT": (lambda c: c.wait(0, 0), "WAIT", False),
}


@over("read", READS)
def test_a_read_without_the_readonly_flag_whose_reply_is_lost(
    side, read, flavor, proxy, server, clients, capsys
):
    operation, command, retried = READS[read]
    server.rpush("l", 3, 1, 2)
    outcome = through_a_lost_reply(side, flavor, proxy, clients, operation)
    if side == "redis-py" or retried:
        assert outcome[0] == "returned"
        assert runs(server, command) == 2
        if read == "SORT":
            assert outcome[1] == [b"1", b"2", b"3"]
        if read == "ROLE":
            assert outcome[1][0] in ("master", b"master")
    else:
        assert outcome[0] == "raised"
        assert runs(server, command) == 1
    if read == "SORT ... STORE":
        assert server.lrange("sorted", 0, -1) == [b"1", b"2", b"3"]
    shown = said(outcome) if read in ("SORT", "WAIT") else outcome[0]
    report(
        capsys,
        f"{side} {flavor} {read}: {shown}; the server ran it {runs(server, command)} time(s)",
    )
