"""Helpers shared by the test modules: the two implementations, the
strategy name lists, a sleep patch, and the small helpers more than one test
module uses (exceptions, checkers, an outcome recorder, asyncio drivers).
Test modules import them from here (`from support import ...`); conftest.py
holds only fixtures and hooks.  A helper used by two test modules is
written here once, not in each."""

import ast
import asyncio
import importlib
import socket
import types
from types import SimpleNamespace

import redis.asyncio.retry
import redis.backoff
import redis.exceptions
import redis.retry

from redis_backoff_c import _rules

# The installed redis-py's rules, as the package decided them
# (redis_backoff_c._rules).  Without the checker (redis-py 8.0, 8.1) the
# redis-py side has none to compare ours with: tests of the checker then
# check the C side, and that redis-py indeed has none (side_without_checker).
REDIS_PY_HAS_CHECKER = _rules.RETRY_CHECKER


def _load(side):
    if side == "redis-py":
        names = {
            "backoff": "redis.backoff",
            "retry": "redis.retry",
            "asyncio_retry": "redis.asyncio.retry",
        }
    else:
        names = {
            "backoff": "redis_backoff_c.backoff",
            "retry": "redis_backoff_c.retry",
            "asyncio_retry": "redis_backoff_c.asyncio.retry",
        }
    modules = {key: importlib.import_module(name) for key, name in names.items()}
    return SimpleNamespace(name=side, **modules)


IMPLEMENTATIONS = {side: _load(side) for side in ("redis-py", "c")}
# The two sides in the order differential tests play them: redis-py first.
SIDES = [IMPLEMENTATIONS["redis-py"], IMPLEMENTATIONS["c"]]


def other_side(impl):
    """The implementation that `impl` is not."""
    return IMPLEMENTATIONS["c" if impl.name == "redis-py" else "redis-py"]


def both(play):
    """play(impl) on both sides; the C side must give redis-py's result,
    which is returned."""
    expected, actual = (play(impl) for impl in SIDES)
    assert actual == expected
    return expected


# redis-py's classes as imported before any test could patch them
# (redis_backoff_c.patch() replaces the module attributes).
ORIGINAL_RETRY = redis.retry.Retry
ORIGINAL_ASYNC_RETRY = redis.asyncio.retry.Retry


def _load_extras(side):
    """The extras of one side: the C types ("c") or their pure-Python twin
    ("py", redis_backoff_c._extras_py, what the package gives without the
    extension).  None for "c" when the extension is not in use."""
    if side == "py":
        from redis_backoff_c import _extras_py as module

        retry, async_retry = module.Retry, module.AsyncRetry
    else:
        import redis_backoff_c as module

        if module.IMPLEMENTATION != "c":
            return None
        retry = importlib.import_module("redis_backoff_c.retry").Retry
        async_retry = importlib.import_module("redis_backoff_c.asyncio.retry").Retry
    return SimpleNamespace(
        name=side,
        RetryBudget=module.RetryBudget,
        RetryStats=module.RetryStats,
        Retry=retry,
        AsyncRetry=async_retry,
    )


# The extras (deadline, budget, stats; redis-py has none) on both sides:
# the C types and the pure-Python twin, which is their executable
# specification.  The `extras` fixture runs a test over both.
EXTRAS = {side: _load_extras(side) for side in ("c", "py")}

# RetryStats' outcome counters: every call that ends lands in exactly one.
STATS_OUTCOMES = (
    "successes",
    "give_ups_exhausted",
    "give_ups_not_retryable",
    "give_ups_deadline",
    "give_ups_budget",
    "give_ups_may_have_run",
    "unhandled_errors",
    "aborted",
)


def assert_outcomes_add_up(snapshot):
    """A RetryStats snapshot's calls are its outcomes."""
    assert snapshot["calls"] == sum(snapshot[name] for name in STATS_OUTCOMES), snapshot


def assert_stats_add_up(snapshot):
    """The outcomes add up, and so do the attempts: each call's first one
    and its retries, each a success, a failed attempt or an unhandled error."""
    assert_outcomes_add_up(snapshot)
    assert snapshot["attempts"] == snapshot["calls"] + snapshot["retries"], snapshot
    failed = snapshot["failed_attempts"] + snapshot["unhandled_errors"]
    assert snapshot["attempts"] == snapshot["successes"] + failed, snapshot


# The seven strategies by name, in redis.backoff's order, grouped by formula:
# the jittered ones draw from a random source, the capped ones take
# (cap, base), all take compute(failures).
JITTERED = [
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
]
CAPPED = ["ExponentialBackoff", *JITTERED]
ALL = ["ConstantBackoff", "NoBackoff", *CAPPED]
# The capped strategies whose formula is base * 2**failures.
EXPONENTIAL = [name for name in CAPPED if name != "DecorrelatedJitterBackoff"]

Conn = redis.exceptions.ConnectionError
# What each Retry retries when not told: the sync one adds socket.timeout.
DEFAULT_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, socket.timeout)
ASYNC_DEFAULT_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class UserError(Exception):
    """Raised by a test's own hostile or failing objects."""


def outcome(call):
    """What a call gives: its value and type (floats bit for bit), or the
    type of what it raised."""
    try:
        value = call()
    except Exception as error:  # noqa: BLE001 - the type is the outcome
        return ("raised", type(error))
    if isinstance(value, float):
        return ("value", float, value.hex())
    return ("value", type(value), value)


# ---- checkers: the Retry's own is_retryable, and the call's ----


def always(error):
    return True


def never(error):
    return False


class CallableChecker:
    """A checker object: equal by its answer, unhashable (the Retry's hash
    must not hash it), deep-copied by copy.deepcopy."""

    __hash__ = None

    def __init__(self, answer):
        self.answer = answer

    def __call__(self, error):
        return self.answer

    def __eq__(self, other):
        return isinstance(other, CallableChecker) and other.answer == self.answer


class FalsyChecker:
    """A call-time is_retryable whose truth is false: redis-py 8.2 calls it
    (`is not None`), 8.0 and 8.1 do not (`is_retryable and ...`)."""

    def __init__(self, function):
        self.function = function

    def __call__(self, error):
        return self.function(error)

    def __bool__(self):
        return False


# ---- asyncio: suspending, driving, running ----


@types.coroutine
def suspend():
    """Give control back once: to the event loop (as asyncio.sleep(0)), or
    to the hand driver."""
    yield


async def ignore_failure(error, *count):
    """An asyncio fail() that does nothing."""
    return None


def drive(coroutine):
    """Run a coroutine that only ever yields None, without an event loop."""
    while True:
        try:
            coroutine.send(None)
        except StopIteration as stop:
            return stop.value


def new_loop(kind):
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_on(kind, coroutine):
    """Run `coroutine` to its end on a fresh loop of `kind` ("asyncio",
    "uvloop"), or by hand ("hand")."""
    if kind == "hand":
        return drive(coroutine)
    loop = new_loop(kind)
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


def patch_sleep(impl, monkeypatch, record=None):
    """Replace the sleep that `impl`'s sync Retry sleeps through
    (redis.retry.sleep, redis_backoff_c.retry.sleep) by one that records
    its delay in `record` (a list, returned) instead of sleeping."""
    record = [] if record is None else record
    monkeypatch.setattr(impl.retry, "sleep", lambda delay: record.append(("sleep", delay)))
    return record


# redis-py 8.2's math.ldexp exponential, or 8.0/8.1's base * 2**failures
# in Python's numbers (redis_backoff_c._rules).
LDEXP_RULE = _rules.LDEXP_EXPONENTIAL


def exponential(x, failures):
    """base * 2**failures as the installed redis-py computes it."""
    if LDEXP_RULE:
        return redis.backoff._exponential(x, failures)
    return x * 2**failures


def side_without_checker(impl):
    """True for a redis-py that has no Retry checker (before 8.2), after
    checking that it indeed takes none: a test of the checker then has
    nothing more to check on that side, whose redis-py has no checker to
    compare with."""
    if impl.name != "redis-py" or REDIS_PY_HAS_CHECKER:
        return False
    backoff = impl.backoff.NoBackoff()
    for retry_module in (impl.retry, impl.asyncio_retry):
        try:
            retry_module.Retry(backoff, 1, is_retryable=lambda error: True)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{retry_module.__name__}.Retry took is_retryable")
        assert not hasattr(retry_module.Retry(backoff, 1), "is_retryable")
    return True


# ---- the two flavors of Retry: sync and asyncio ----


class Flavor:
    """One flavor of Retry (sync or asyncio), for tests written once and
    run over flavor x implementation.

    .retry_module(impl) and .Retry(impl) give `impl`'s module and class of
    this flavor; .call(retry, do, fail, ...) runs retry.call_with_retry to
    its end with plain functions do and fail (the asyncio flavor turns them
    into coroutine functions and runs the awaitable with asyncio.run);
    .patch_sleep records the delays slept instead of sleeping."""

    def __init__(self, name, attribute, redis_py_class, default_errors):
        self.name = name
        self.attribute = attribute  # impl.retry or impl.asyncio_retry
        self.redis_py_class = redis_py_class
        self.default_errors = default_errors

    def __repr__(self):
        return self.name

    @property
    def other(self):
        return FLAVORS["asyncio" if self.name == "sync" else "sync"]

    def retry_module(self, impl):
        return getattr(impl, self.attribute)

    def Retry(self, impl):  # noqa: N802 - it gives a class
        return self.retry_module(impl).Retry

    def wrap(self, function):
        """`function` as this flavor's do/fail: itself (sync), or a
        coroutine function returning what it returns (asyncio)."""
        if self.name == "sync" or function is None:
            return function

        async def wrapped(*args):
            return function(*args)

        return wrapped

    def call(self, retry, do, fail, *args, **kwargs):
        """retry.call_with_retry(do, fail, *args, **kwargs) to its end, with
        do and fail plain functions (wrapped for the asyncio flavor)."""
        return self.finish(retry.call_with_retry(self.wrap(do), self.wrap(fail), *args, **kwargs))

    def finish(self, returned):
        """What call_with_retry returned, run to its end: the result itself
        (sync), or the awaitable awaited in asyncio.run (asyncio)."""
        if self.name == "sync":
            return returned

        async def main():
            return await returned

        return asyncio.run(main())

    def patch_sleep(self, impl, monkeypatch, record=None):
        """Replace the sleep that `impl`'s Retry of this flavor sleeps
        through by one that appends ("sleep", delay) to `record` (a list,
        returned): the sync one returns at once, the asyncio one gives
        control back once (suspend)."""
        if self.name == "sync":
            return patch_sleep(impl, monkeypatch, record)
        record = [] if record is None else record

        async def recording_sleep(delay):
            record.append(("sleep", delay))
            await suspend()

        monkeypatch.setattr(impl.asyncio_retry, "sleep", recording_sleep)
        return record


FLAVORS = {
    "sync": Flavor("sync", "retry", ORIGINAL_RETRY, DEFAULT_ERRORS),
    "asyncio": Flavor("asyncio", "asyncio_retry", ORIGINAL_ASYNC_RETRY, ASYNC_DEFAULT_ERRORS),
}


def conftest_imports(source, where):
    """Each `import conftest` or `from conftest import ...` in the Python
    `source`, as "where:line: statement": test modules take shared helpers
    from here, never from a conftest.py (tests/c_only/test_layers.py scans
    the tests, test_pytest_plugin.py its sample suite)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        if any(m == "conftest" or m.startswith("conftest.") for m in modules):
            found.append(f"{where}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found
