"""C objects alive when the interpreter ends (C side only).

At exit, the interpreter's last collections free what is left in reference
cycles, the extension's module among it.  Our heap types hold the module
(PyType_GetModule), but a type's clear drops that reference first, so the
module and its state can be freed while an object of ours in a cycle is
still to be finalized or deallocated.  Each program below leaves such an
object behind and exits; it must exit cleanly.

In a release build a use-after-free may pass unseen: CI's sanitizer stage
(scripts/sanitize.sh) runs these programs under AddressSanitizer, whose
environment the subprocesses inherit, and fails on any report.
"""

import os
import subprocess
import sys
import textwrap

import pytest

# An asyncio call_with_retry suspended in its backoff sleep, kept in a
# cycle: `hold` names what the cycle holds.
SUSPENDED = """
import types
import redis_backoff_c.asyncio.retry as async_retry
from redis_backoff_c.backoff import ConstantBackoff

@types.coroutine
def sleep(delay):
    yield

async_retry.sleep = sleep

async def do():
    raise KeyError

async def fail(error):
    pass

coro = async_retry.Retry(ConstantBackoff(1), 3, supported_errors=(KeyError,)).call_with_retry(
    do, fail
)
coro.send(None)

class Holder:
    pass

holder = Holder()
holder.held = {hold}  # first: the dict is cleared in order
holder.cycle = holder
del coro  # the cycle holds the only reference
print(async_retry.DESIGN, type(holder.held).__name__)
"""

# Objects that run our C code from a __del__ while the last collections
# clear a cycle (the descriptor of the awaitable design, a strategy, a
# Retry): each either works or raises, never reads freed memory.
DEL_DURING_CLEAR = """
import redis_backoff_c.asyncio.retry as async_retry
from redis_backoff_c.backoff import ExponentialBackoff
from redis_backoff_c.retry import Retry

class Sub(ExponentialBackoff):
    pass

class Caller:
    def __init__(self):
        self.method = vars(async_retry.Retry)["call_with_retry"]
        self.retry = async_retry.Retry(Sub(), 1)
        self.sync = Retry(ExponentialBackoff(), 1)

    def __del__(self):
        for attempt in (
            lambda: self.method(self.retry, lambda: None, lambda error: None).close(),
            lambda: self.retry._backoff.compute(3),
            lambda: self.sync.call_with_retry(lambda: 1, lambda error: None),
            lambda: self.retry == self.sync,
        ):
            try:
                attempt()
            except Exception:
                pass

class Holder:
    pass

for _ in range(20):
    holder = Holder()
    holder.cycle = holder
    holder.caller = Caller()
    holder.types = (async_retry.Retry, Sub)
print("ok")
"""


def run(program, design, tmp_path):
    # A script file, not -c: the order in which the last collections free
    # things differs, and the freed state is read only in this one.
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(program))
    env = {**os.environ, "REDIS_BACKOFF_C_ASYNC_DESIGN": design}
    return subprocess.run(
        [sys.executable, "-I", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_clean_exit(result):
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Error" not in result.stderr, result.stderr[-4000:]
    assert "Exception ignored" not in result.stderr, result.stderr[-4000:]


@pytest.mark.parametrize(
    "design, hold, held_type",
    [
        # The C awaitable itself.
        ("awaitable", "coro", "CallWithRetry"),
        # The native coroutine, awaiting _async_caught's C awaitable.
        ("coroutine", "coro", "coroutine"),
        # That C awaitable alone.
        ("coroutine", "coro.cr_await", "CallWithRetry"),
    ],
)
def test_a_suspended_call_in_a_cycle_at_exit(design, hold, held_type, tmp_path):
    result = run(SUSPENDED.format(hold=hold), design, tmp_path)
    assert_clean_exit(result)
    # The program got where it should: suspended, holding what it names.
    assert result.stdout.split() == [design, held_type]


@pytest.mark.parametrize("design", ["awaitable", "coroutine"])
def test_our_objects_used_from_a_del_at_exit(design, tmp_path):
    result = run(DEL_DURING_CLEAR, design, tmp_path)
    assert_clean_exit(result)
    assert result.stdout.strip() == "ok"
