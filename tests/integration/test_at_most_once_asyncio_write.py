"""writes="at-most-once" and an asyncio write that times out (issue 37,
finding 2), against a real redis-server.

A sync ``sendall`` that fails has not sent the rest of the command, and the
server runs no command it has not read whole.  asyncio is different: what
the socket did not take waits in the transport's buffer, and closing the
connection (redis-py disconnects on the timeout) still flushes it, so the
server reads the whole command and runs it.  The case: a 32 MiB ``APPEND``
with ``socket_timeout=0.2`` while another client holds the server in
``DEBUG SLEEP 0.5``: the write cannot finish in time.  On CPython 3.10 and
3.11 the write's ``drain()`` times out; from 3.12 ``writelines`` buffers
the whole command without waiting and the reply times out instead.  Either
way redis-py's own Retry runs the append twice, and the policy once, with
the marked ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio
from incr_stream import redis_server as redis_server  # the fixture
from support import EXTRAS, ORIGINAL_ASYNC_RETRY

import redis_backoff_c
from redis_backoff_c.backoff import ConstantBackoff

CHUNK = 32 * 1024 * 1024
SLEEP = 0.5
TIMEOUT = 0.2


def hold_busy(port):
    """DEBUG SLEEP from a client of its own, in a thread; returns once the
    command is sent, with the thread."""
    owner = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
    owner.ping()
    sent = threading.Event()

    def run():
        sent.set()
        owner.execute_command("DEBUG", "SLEEP", SLEEP)
        owner.close()

    thread = threading.Thread(target=run)
    thread.start()
    sent.wait()
    return thread


def settled(server):
    """Until the length of "big" stops changing (1 s at most)."""
    last, deadline = -1, time.monotonic() + 1.0
    while time.monotonic() < deadline:
        length = server.strlen("big")
        if length == last and length:
            return
        last = length
        time.sleep(0.1)


@pytest.mark.parametrize("side", ["redis-py", "c", "py"])
def test_an_asyncio_write_that_times_out_runs_once(side, redis_server, capsys):
    if side == "redis-py":
        retry = ORIGINAL_ASYNC_RETRY(ConstantBackoff(SLEEP + 0.3), 1)
    else:
        if EXTRAS[side] is None:
            pytest.skip("the C extension is not in use")
        retry = EXTRAS[side].AsyncRetry(ConstantBackoff(SLEEP + 0.3), 1, writes="at-most-once")
    server = redis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=10)
    server.delete("big")

    async def main():
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=redis_server.port, socket_timeout=TIMEOUT, retry=retry
        )
        try:
            await client.ping()  # connected: the APPEND meets the busy server
            busy = await asyncio.to_thread(hold_busy, redis_server.port)
            await asyncio.sleep(0.05)  # the server is in DEBUG SLEEP
            try:
                return await client.append("big", b"x" * CHUNK)
            except Exception as error:
                return error
            finally:
                await asyncio.to_thread(busy.join)
                # The loop keeps running while the transport flushes what
                # it buffered, and the server reads and runs it.
                await asyncio.to_thread(settled, server)
        finally:
            await client.aclose()

    outcome = asyncio.run(main())
    runs = round(server.strlen("big") / CHUNK)
    server.close()
    with capsys.disabled():
        print(
            f"\n    at-most-once: {side} asyncio APPEND 32 MiB timed out: ran {runs} time(s)",
            end="",
        )
    if side == "redis-py":
        assert runs == 2, outcome
        return
    assert runs == 1, outcome
    assert isinstance(outcome, redis.exceptions.TimeoutError), outcome
    assert redis_backoff_c.may_have_run(outcome)
