"""The declarative list of benchmark cases.

A case names the sides it times (each built lazily by a factory that may
raise :class:`Unavailable`) and the rows it reports.  A row compares two
sides (or three, for an overhead above a reference); its target is one of
the project's performance targets (docs/performance.md).
"""

import asyncio
import copy
import gc
import importlib
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio.retry
import redis.backoff
import redis.exceptions
import redis.retry

import redis_backoff_c
import redis_backoff_c.backoff

from . import _timing
from ._timing import Side, Unavailable, stmt_side

SEED = 20250101  # random.seed and the fast source, before every timing
FAILURES = 3  # the argument of every timed compute()

STRATEGIES = (
    "ConstantBackoff",
    "NoBackoff",
    "ExponentialBackoff",
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
)
JITTERED = (
    "FullJitterBackoff",
    "EqualJitterBackoff",
    "DecorrelatedJitterBackoff",
    "ExponentialWithJitterBackoff",
)
ARGS = {"ConstantBackoff": (0.5,)}  # the others are built with their defaults

# The project's performance targets (docs/performance.md, "Against the
# targets", states each with its reason; the same page prints each row's
# verdict).  Some depend on the CPython version:
# targets(version) gives them for any version, the names below for this one.
# Rows at the interpreter's floor are judged against the floor, not
# redis-py: ExponentialBackoff.compute (default source) and the jittered
# ones with the fast source must be within the floor target of a bound
# builtin method call taking no argument, (3).bit_length() (a one-argument
# one, ().count(3), is reported beside it); the jittered ones on the
# default source, which call into `random` as redis-py must, by their time
# above one random.random() call.  Memory: a deep-copied strategy (what
# each connection holds) no more than a tuple of its fields; fresh objects
# are reported with no target.


def targets(version):
    """The targets for CPython ``version`` (a (major, minor) tuple): each is
    set against a floor timed in the same run (docs/performance.md states
    them with their reasons)."""
    old = version < (3, 12)
    return {
        # C compute within 1.5x of the floor (a builtin method call); 2x on
        # 3.10 (no call specialisation); DecorrelatedJitter, which reads and
        # stores its previous delay, 1.75x (2.25x)
        "floor": 2.0 if version < (3, 11) else 1.5,
        "floor_decorrelated": 2.25 if version < (3, 11) else 1.75,
        # every ratio against redis-py: never below parity, judged by the
        # lower quartile (the end-to-end rows by their median)
        "parity": 0.95,
        # sync success: the overhead above do() within 2x of a C method
        # taking the same two arguments, d.get(do, fail)
        "sync_success_floor": 2.0,
        # asyncio success: the C awaitable (3.10, 3.11) no dearer than the
        # bare `return await do()` coroutine; from 3.12 (a native
        # coroutine), within 1.15x of that coroutine with redis-py's
        # signature, the least a drop-in costs
        "async_floor": 1.0 if old else None,
        "async_signature_floor": None if old else 1.15,
        "retry_ops": 3.0,  # Retry(ExponentialBackoff(), 3) construction, ==, hash
        "deepcopy": 10.0,
        # a deep-copied strategy: no more bytes than a tuple of its fields
        "memory_copy_floor": 1.0,
        # extras on the success path, ns above the plain C Retry: budget +
        # stats, and with the deadline
        "extras_sync": 10.0,
        "extras_sync_deadline": 20.0,
        # SET+GET on loopback under patch(): with a deadline / without
        "e2e_deadline": 0.98,
        "extras_async": 10.0 if old else 20.0,
        "extras_async_deadline": 20.0 if old else 25.0,
        # writes="at-most-once" on the success path (it acts only on a
        # failure), ns above the plain C Retry
        "writes_sync": 10.0,
        "writes_async": 10.0 if old else 20.0,
        # what patch() adds to a successful cluster command (ns): never
        # slower than unpatched redis-py by more than this
        "cluster_plain": 50.0,
        "extras_cluster": 300.0,
        # on_retry and on_give_up: set, on the success path (which calls
        # neither), ns above the plain C Retry; on a retry, the cost above
        # the same call without them within 1.5x of the hook's call as
        # Python code makes it, its event included (the row is the
        # difference of two ~1.3 us timings: its spread is wide)
        "hooks_success": 10.0,
        "hooks_retry_floor": 1.5,
    }


TARGETS = targets(sys.version_info[:2])
PARITY = TARGETS["parity"]


def floor_target(name):
    """The compute target of strategy `name` against the floor."""
    return TARGETS["floor_decorrelated" if name == "DecorrelatedJitterBackoff" else "floor"]


#: How many fields each C strategy holds, for the tuple its memory is set
#: against (the cap and the base; the delay; plus the previous delay).
FIELDS = {
    "ConstantBackoff": 1,
    "NoBackoff": 1,
    "DecorrelatedJitterBackoff": 3,
}


@dataclass
class Row:
    """One line of the table.

    kind: "ratio"    num / den, higher is better (redis-py time / C time)
          "overhead" (num - base) / (den - base): the cost above `base`
          "floor"    num / den, lower is better (C fast compute / floor)
          "memory"   num / den in bytes per object, higher is better
          "peer"     (num - base) / (den - base), a peer library's overhead
                     against ours, no target
          "single"   one side alone (a reference figure)
          "delta"    den - num in ns, lower is better (the cost of extras)
          "above"    (num - base) / den, lower is better: the C cost above
                     a base, against a floor (sync success above do(),
                     against d.get(do, fail); a jittered compute above
                     random.random(), against the floor)
    """

    name: str
    kind: str = "ratio"
    num: str = "redis-py"
    den: str = "c"
    base: str | None = None
    target: float | None = None
    # "median", or "q1": the lower quartile of the paired values must meet
    # the target (the parity rule: never below parity, noise aside)
    judge: str = "median"


@dataclass
class MemSide:
    label: str
    make: Callable[[], object]


@dataclass
class Case:
    name: str
    section: str
    sides: dict[str, Callable]  # label -> factory(stack) -> Side | MemSide
    rows: list[Row]
    note: str = ""
    kind: str = "time"  # or "memory"
    min_time_scale: float = 1.0
    repeats_scale: float = 1.0
    context: Callable | None = None  # factory(stack): entered around the case


# ---------------------------------------------------------------- helpers


def c_retry_module():
    return _optional_module("redis_backoff_c.retry")


def c_async_retry_module():
    return _optional_module("redis_backoff_c.asyncio.retry")


def _optional_module(name):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name in (name, name.rpartition(".")[0]):
            raise Unavailable(f"{name} not built") from None
        raise Unavailable(f"{name} failed to import: {error}") from None
    except ImportError as error:
        raise Unavailable(f"{name} failed to import: {error}") from None


def _python_source():
    redis_backoff_c.set_random_source("python")
    random.seed(SEED)


def _fast_source():
    redis_backoff_c.set_random_source("fast", seed=SEED)


def _do():
    return 1


def _fail(error):
    return None


def _do_raise():
    raise redis.exceptions.ConnectionError("bench")


async def _ado():
    return 1


async def _afail(error):
    return None


async def _ado_raise():
    raise redis.exceptions.ConnectionError("bench")


def _no_sleep(*args):
    return None


def patch_sleeps(stack):
    """Make every Retry's sleep a no-op while the case runs."""
    modules = [redis.retry, redis.asyncio.retry]
    for name in ("redis_backoff_c.retry", "redis_backoff_c.asyncio.retry"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            pass
    for module in modules:
        old = module.__dict__.get("sleep")
        module.sleep = _no_sleep
        if old is None:
            stack.callback(delattr, module, "sleep")
        else:
            stack.callback(setattr, module, "sleep", old)


def async_side(label, loop, body, clock=None):
    """A side that times `number` awaits inside one coroutine, run once on
    `loop` per timing, so entering the loop is amortised over `number`."""
    clock = clock or _timing.clock

    def run(number):
        coro = body(number)
        enabled = gc.isenabled()
        gc.disable()  # as timeit does for the synchronous sides
        try:
            start = clock()
            loop.run_until_complete(coro)
            return clock() - start
        finally:
            if enabled:
                gc.enable()

    return Side(label, run)


def _strategy(module, name):
    return getattr(module, name)(*ARGS.get(name, ()))


PY = redis.backoff
C = redis_backoff_c.backoff


# ------------------------------------------------------------------ cases


def compute_cases():
    cases = []
    for name in STRATEGIES:
        sides = {
            "redis-py": lambda st, n=name: stmt_side(
                "redis-py", f"f({FAILURES})", {"f": _strategy(PY, n).compute}, before=_python_source
            ),
            "c": lambda st, n=name: stmt_side(
                "c", f"f({FAILURES})", {"f": _strategy(C, n).compute}, before=_python_source
            ),
            "c-fast": lambda st, n=name: stmt_side(
                "c-fast", f"f({FAILURES})", {"f": _strategy(C, n).compute}, before=_fast_source
            ),
        }
        rows = [
            Row(f"{name}.compute({FAILURES})", target=PARITY, judge="q1"),
            Row(
                f"{name}.compute({FAILURES}) [fast source]",
                den="c-fast",
                target=PARITY,
                judge="q1",
            ),
        ]
        if name in JITTERED or name == "ExponentialBackoff":
            # The C compute at the floor: the fast source for the jittered
            # ones, the default one for ExponentialBackoff (it draws nothing).
            c_side = "c" if name == "ExponentialBackoff" else "c-fast"
            tag = "" if name == "ExponentialBackoff" else " [fast]"
            sides["floor"] = lambda st: _floor_side()
            sides["floor-1"] = lambda st: _one_argument_floor_side()
            rows.append(
                Row(
                    f"{name}.compute({FAILURES}){tag} vs floor",
                    kind="floor",
                    num=c_side,
                    den="floor",
                    target=floor_target(name),
                )
            )
            # Beside it, no target: a builtin taking one argument, as
            # compute does (METH_O, the cheapest way to take one).
            rows.append(
                Row(
                    f"{name}.compute({FAILURES}){tag} vs one-argument floor",
                    kind="floor",
                    num=c_side,
                    den="floor-1",
                )
            )
        if name == "DecorrelatedJitterBackoff":
            # Beside it, no target: the same call with base = cap, so that
            # the cap wins every draw.  The formula runs whole; only the
            # coin toss of `temp < cap` (the cap wins one draw in three with
            # the defaults), which no predictor can learn, is gone: what is
            # left above the other jittered rows is that branch.
            sides["c-fast-cap"] = lambda st, n=name: stmt_side(
                "c-fast-cap",
                f"f({FAILURES})",
                {"f": _cap_always_wins(n).compute},
                before=_fast_source,
            )
            rows.append(
                Row(
                    f"{name}.compute({FAILURES}) [fast] vs floor, base = cap",
                    kind="floor",
                    num="c-fast-cap",
                    den="floor",
                )
            )
        if name in JITTERED:
            # The default source: what C adds above the random.random()
            # call that redis-py makes too, against the floor.
            sides["random"] = lambda st: stmt_side(
                "random", "f()", {"f": random.random}, before=_python_source
            )
            rows.append(
                Row(
                    f"{name}.compute({FAILURES}) above random.random(), vs floor",
                    kind="above",
                    num="c",
                    base="random",
                    den="floor",
                    target=floor_target(name),
                )
            )
        cases.append(Case(f"compute/{name}", "compute", sides, rows))
    cases[0].note = (
        f"compute({FAILURES}) called through a bound method, as the floor is; "
        "C rows use the default source (the random module, seeded) and the "
        "fast C source (seeded); the floor, and random.random() for the "
        "jittered ones, are timed interleaved in each case"
    )
    return cases


def _cap_always_wins(name):
    # A C strategy `name` whose base is its cap: every draw is at least the
    # cap, which then wins.
    strategy = _strategy(C, name)
    return type(strategy)(strategy._cap, strategy._cap)


def _floor_side():
    # The floor the compute targets are set against: a bound builtin
    # method call that takes no argument, (3).bit_length().  Other builtins
    # move it both ways (callgrind, 3.12: the one-argument ().count(3) is
    # about 30% cheaper, math.fabs(3), which also returns a new float, about
    # 10% dearer than compute(3)).
    return stmt_side("floor", "f()", {"f": (3).bit_length})


def _one_argument_floor_side():
    # A bound builtin method taking one argument, as compute(3) does:
    # ().count(3), a METH_O method.
    return stmt_side("floor-1", f"f({FAILURES})", {"f": ().count})


def floor_case():
    return Case(
        "floor",
        "floor",
        {
            "floor": lambda st: _floor_side(),
            "floor-attr": lambda st: stmt_side("floor-attr", "x.bit_length()", {"x": 3}),
            "floor-1": lambda st: _one_argument_floor_side(),
        },
        [
            Row("floor: f() with f = (3).bit_length", kind="single", num="floor"),
            Row("floor, attribute form: x.bit_length()", kind="single", num="floor-attr"),
            Row(
                f"one-argument floor: f({FAILURES}) with f = ().count",
                kind="single",
                num="floor-1",
            ),
        ],
        note=(
            "a bound builtin method call taking no argument, (3).bit_length(): the first form "
            f"is the one the vs floor rows use; ().count({FAILURES}), a METH_O builtin taking "
            "one argument as compute does, is reported beside it (vs one-argument floor rows, "
            "no target)"
        ),
    )


def construction_cases():
    cases = []
    for name in STRATEGIES:
        args = ", ".join(map(repr, ARGS.get(name, ())))
        sides = {
            side: lambda st, m=module, n=name, side=side, a=args: stmt_side(
                side, f"cls({a})", {"cls": getattr(m, n)}
            )
            for side, module in (("redis-py", PY), ("c", C))
        }
        cases.append(Case(f"construct/{name}", "construction", sides, [Row(f"{name}({args})")]))

    def retry_side(side, st):
        if side == "redis-py":
            R, B = redis.retry.Retry, PY.ExponentialBackoff
        else:
            R, B = c_retry_module().Retry, C.ExponentialBackoff
        return stmt_side(side, "R(B(), 3)", {"R": R, "B": B})

    cases.append(
        Case(
            "construct/Retry",
            "construction",
            {s: lambda st, s=s: retry_side(s, st) for s in ("redis-py", "c")},
            [Row("Retry(ExponentialBackoff(), 3)", target=TARGETS["retry_ops"])],
            note="Retry construction includes building its ExponentialBackoff",
        )
    )
    return cases


def _retry(side, backoff="ExponentialBackoff", retries=3):
    if side == "redis-py":
        return redis.retry.Retry(getattr(PY, backoff)(), retries)
    return c_retry_module().Retry(getattr(C, backoff)(), retries)


def _async_retry(side, backoff="ExponentialBackoff", retries=3):
    if side == "redis-py":
        return redis.asyncio.retry.Retry(getattr(PY, backoff)(), retries)
    return c_async_retry_module().Retry(getattr(C, backoff)(), retries)


def eq_hash_cases():
    cases = []
    for op, stmt in (("eq", "a == b"), ("hash", "h(a)")):
        for name in STRATEGIES:
            sides = {
                side: lambda st, m=module, n=name, side=side, s=stmt: stmt_side(
                    side, s, {"a": _strategy(m, n), "b": _strategy(m, n), "h": hash}
                )
                for side, module in (("redis-py", PY), ("c", C))
            }
            label = f"{name} == {name}" if op == "eq" else f"hash({name})"
            cases.append(Case(f"{op}/{name}", op, sides, [Row(label)]))
        sides = {
            side: lambda st, side=side, s=stmt: stmt_side(
                side, s, {"a": _retry(side), "b": _retry(side), "h": hash}
            )
            for side in ("redis-py", "c")
        }
        label = "Retry == Retry" if op == "eq" else "hash(Retry)"
        cases.append(Case(f"{op}/Retry", op, sides, [Row(label, target=TARGETS["retry_ops"])]))
    cases[0].note = "two distinct, equal objects of the same implementation"
    return cases


def deepcopy_case():
    return Case(
        "deepcopy/Retry",
        "copy",
        {
            side: lambda st, side=side: stmt_side(
                side, "dc(r)", {"dc": copy.deepcopy, "r": _retry(side)}
            )
            for side in ("redis-py", "c")
        },
        [Row("copy.deepcopy(Retry(ExponentialBackoff(), 3))", target=TARGETS["deepcopy"])],
        note="redis-py deep-copies the Retry of every connection",
    )


def sync_retry_cases():
    def side(label, st):
        if label == "do":
            return stmt_side("do", "do()", {"do": _do})
        if label == "d.get":
            # The floor: a C method taking the same two arguments.
            return stmt_side("d.get", "d.get(do, fail)", {"d": {}, "do": _do, "fail": _fail})
        return stmt_side(
            label, "r.call_with_retry(do, fail)", {"r": _retry(label), "do": _do, "fail": _fail}
        )

    def fail_side(label, st):
        stmt = "try:\n    r.call_with_retry(do, fail)\nexcept E:\n    pass"
        return stmt_side(
            label,
            stmt,
            {
                "r": _retry(label, "NoBackoff", 3),
                "do": _do_raise,
                "fail": _fail,
                "E": redis.exceptions.ConnectionError,
            },
        )

    return [
        Case(
            "call_with_retry/success",
            "sync Retry",
            {s: lambda st, s=s: side(s, st) for s in ("do", "d.get", "redis-py", "c")},
            [
                Row(
                    "call_with_retry success (Retry(ExponentialBackoff(), 3))",
                    target=PARITY,
                    judge="q1",
                ),
                Row(
                    "  overhead above calling do() directly",
                    kind="overhead",
                    base="do",
                ),
                Row("  do() alone: a Python function returning 1", kind="single", num="do"),
                Row("  the floor: d.get(do, fail), a C method", kind="single", num="d.get"),
                Row(
                    "call_with_retry success above do(), vs d.get(do, fail)",
                    kind="above",
                    num="c",
                    base="do",
                    den="d.get",
                    target=TARGETS["sync_success_floor"],
                ),
            ],
            note="r.call_with_retry(do, fail), do a Python function that "
            "returns at once; overhead = t(call_with_retry) - t(do()); the "
            "floor, d.get(do, fail), is a C method taking the same two arguments",
        ),
        Case(
            "call_with_retry/failure",
            "sync Retry",
            {s: lambda st, s=s: fail_side(s, st) for s in ("redis-py", "c")},
            [
                Row(
                    "call_with_retry failure (NoBackoff, 3 retries)",
                    target=PARITY,
                    judge="q1",
                )
            ],
            note="do raises ConnectionError on all 4 attempts, the last one "
            "is caught by the timed statement; sleep patched to a no-op "
            "on both sides (NoBackoff never sleeps anyway)",
            context=patch_sleeps,
        ),
    ]


def _extras(kind):
    """The opt-in extras of a timed Retry: none, budget and stats, or all three."""
    if kind == "c":
        return {}
    if kind == "c+at-most-once":
        return {"writes": "at-most-once"}
    extras = {"budget": redis_backoff_c.RetryBudget(10, 0.1), "stats": redis_backoff_c.RetryStats()}
    if kind == "c+deadline":
        extras["deadline"] = 10.0
    return extras


EXTRAS_SIDES = ("c", "c+budget+stats", "c+deadline", "c+at-most-once")
EXTRAS_NOTE = (
    "the same successful call on the C Retry without extras and with "
    "budget=RetryBudget(10, 0.1) and stats=RetryStats() (and deadline=10.0), "
    "or with writes='at-most-once' alone: "
    "the difference of the paired timings (the two time columns: plain C, C with extras)"
)


def _extras_rows(prefix, plain, deadline, writes):
    return [
        Row(
            f"{prefix} + budget + stats, ns above plain C",
            kind="delta",
            num="c",
            den="c+budget+stats",
            target=plain,
        ),
        Row(
            f"{prefix} + deadline + budget + stats, ns above plain C",
            kind="delta",
            num="c",
            den="c+deadline",
            target=deadline,
        ),
        Row(
            f"{prefix} + writes='at-most-once', ns above plain C",
            kind="delta",
            num="c",
            den="c+at-most-once",
            target=writes,
        ),
    ]


def sync_extras_case():
    def side(label, st):
        r = c_retry_module().Retry(C.ExponentialBackoff(), 3, **_extras(label))
        return stmt_side(label, "r.call_with_retry(do, fail)", {"r": r, "do": _do, "fail": _fail})

    return Case(
        "call_with_retry/success extras",
        "sync Retry",
        {s: lambda st, s=s: side(s, st) for s in EXTRAS_SIDES},
        _extras_rows(
            "call_with_retry success",
            TARGETS["extras_sync"],
            TARGETS["extras_sync_deadline"],
            TARGETS["writes_sync"],
        ),
        note=EXTRAS_NOTE,
    )


def _noop_hook(event):
    return None


def _do_every_other():
    """do(): raises ConnectionError on every other call, so that each
    call_with_retry makes one retry and then returns 1."""
    failed = [False]

    def do():
        failed[0] = not failed[0]
        if failed[0]:
            raise redis.exceptions.ConnectionError("bench")
        return 1

    return do


def hooks_case():
    hooks = {"on_retry": _noop_hook, "on_give_up": _noop_hook}

    def side(label, st):
        if label == "hook(event)":
            # The floor: the hook's call as Python code makes it, its event
            # included: hook(RetryEvent(attempt, error, delay, None)).
            return stmt_side(
                label,
                "h(E(1, e, 0, None))",
                {
                    "h": _noop_hook,
                    "E": redis_backoff_c.RetryEvent,
                    "e": redis.exceptions.ConnectionError(),
                },
            )
        if label.startswith("success"):
            extras = hooks if label.endswith("+hooks") else {}
            r = c_retry_module().Retry(C.ExponentialBackoff(), 3, **extras)
            return stmt_side(
                label, "r.call_with_retry(do, fail)", {"r": r, "do": _do, "fail": _fail}
            )
        if label == "redis-py":
            r = redis.retry.Retry(redis.backoff.NoBackoff(), 3)
        else:
            extras = hooks if label == "c+hooks" else {}
            r = c_retry_module().Retry(C.NoBackoff(), 3, **extras)
        return stmt_side(
            label, "r.call_with_retry(do, fail)", {"r": r, "do": _do_every_other(), "fail": _fail}
        )

    labels = ("success", "success+hooks", "redis-py", "c", "c+hooks", "hook(event)")
    return Case(
        "call_with_retry/retry hooks",
        "sync Retry",
        {s: lambda st, s=s: side(s, st) for s in labels},
        [
            Row(
                "call_with_retry success, on_retry + on_give_up set, ns above plain C",
                kind="delta",
                num="success",
                den="success+hooks",
                target=TARGETS["hooks_success"],
            ),
            Row(
                "one retry, hooks unset (C vs redis-py)",
                num="redis-py",
                den="c",
                target=PARITY,
                judge="q1",
            ),
            Row(
                "  the floor: hook(RetryEvent(1, error, 0, None)) in Python",
                kind="single",
                num="hook(event)",
            ),
            Row(
                "one retry, on_retry called: ns above unset, vs hook(event)",
                kind="above",
                num="c+hooks",
                base="c",
                den="hook(event)",
                target=TARGETS["hooks_retry_floor"],
            ),
        ],
        note=(
            "do() fails every other call: each call_with_retry makes one retry "
            "(NoBackoff, so no sleep) and returns; the C Retry without hooks, "
            "and with on_retry and on_give_up set to a Python function that "
            "returns None (called once per call, with a RetryEvent it makes)"
        ),
        context=patch_sleeps,
    )


class _StubCluster:
    """A cluster client whose command loop is a function returning 1: what
    patch()'s wrapper of RedisCluster.execute_command adds is all that a
    timing of it shows (redis_backoff_c._cluster)."""

    def __init__(self, retry):
        self.retry = retry

    def execute_command(self, *args, **kwargs):
        return 1


def cluster_command_case():
    from redis_backoff_c import _cluster

    # The stub as patch() leaves RedisCluster: its execute_command replaced.
    patched = type(
        "_PatchedStubCluster",
        (_StubCluster,),
        {"execute_command": _cluster.sync_command(_StubCluster.execute_command)},
    )

    def side(label, st):
        retry = c_retry_module().Retry(C.ExponentialBackoff(), 3, **_extras(label))
        client = (_StubCluster if label == "unpatched" else patched)(retry)
        return stmt_side(label, "c.execute_command('GET', 'k')", {"c": client})

    return Case(
        "cluster command/success extras",
        "sync Retry",
        {s: lambda st, s=s: side(s, st) for s in ("unpatched", "c", "c+budget+stats")},
        [
            Row(
                "cluster command success, patched, no extras: ns above unpatched",
                kind="delta",
                num="unpatched",
                den="c",
                target=TARGETS["cluster_plain"],
            ),
            Row(
                "cluster command success, patched, budget + stats: ns above unpatched",
                kind="delta",
                num="unpatched",
                den="c+budget+stats",
                target=TARGETS["extras_cluster"],
            ),
        ],
        note=(
            "what patch() adds to RedisCluster.execute_command (redis-py 8.2's command "
            "loop, here a stub returning 1) for a cluster whose Retry is a C Retry "
            "without extras, and with budget and stats: the difference of the paired timings"
        ),
    )


def async_extras_case(session):
    def side(label, st):
        loop = session.loop()
        r = c_async_retry_module().Retry(C.ExponentialBackoff(), 3, **_extras(label))

        async def body(n):
            for _ in range(n):
                await r.call_with_retry(_ado, _afail)

        return async_side(label, loop, body)

    return Case(
        "async call_with_retry/success extras",
        "asyncio Retry",
        {s: lambda st, s=s: side(s, st) for s in EXTRAS_SIDES},
        _extras_rows(
            "async call_with_retry success",
            TARGETS["extras_async"],
            TARGETS["extras_async_deadline"],
            TARGETS["writes_async"],
        ),
        note=EXTRAS_NOTE + f" ({session.loop_name} event loop)",
    )


class _BareRetry:
    """The least any native coroutine call_with_retry can cost: the floor
    of the asyncio success rows."""

    async def call_with_retry(self, do, fail):
        return await do()


class _BareRetryWithSignature:
    """The same with redis-py's signature: the least a drop-in native
    coroutine can cost.  Its two defaults make CPython call it through a
    slower path (CALL_PY_WITH_DEFAULTS on 3.12, CALL_PY_GENERAL on 3.13)
    than the two-argument floor (CALL_PY_EXACT_ARGS)."""

    async def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        return await do()


def async_retry_cases(session):
    def success(label, st):
        loop = session.loop()
        if label == "do":

            async def body(n):
                for _ in range(n):
                    await _ado()
        elif label in ("wrapper", "wrapper+signature"):
            r = _BareRetry() if label == "wrapper" else _BareRetryWithSignature()

            async def body(n):
                for _ in range(n):
                    await r.call_with_retry(_ado, _afail)
        else:
            r = _async_retry(label)

            async def body(n):
                for _ in range(n):
                    await r.call_with_retry(_ado, _afail)

        return async_side(label, loop, body)

    def failure(label, st):
        loop = session.loop()
        r = _async_retry(label, "NoBackoff", 3)
        E = redis.exceptions.ConnectionError

        async def body(n):
            for _ in range(n):
                try:
                    await r.call_with_retry(_ado_raise, _afail)
                except E:
                    pass

        return async_side(label, loop, body)

    included = (
        "one op = one `await r.call_with_retry(do, fail)` in a for loop of "
        "a coroutine (creating and awaiting do()'s coroutine included); the "
        "loop is entered once per timing of N ops, so its cost is amortised"
    )
    return [
        Case(
            "async call_with_retry/success",
            "asyncio Retry",
            {
                s: lambda st, s=s: success(s, st)
                for s in ("do", "wrapper", "wrapper+signature", "redis-py", "c")
            },
            [
                Row("async call_with_retry success", target=PARITY, judge="q1"),
                Row("  overhead above awaiting do() directly", kind="overhead", base="do"),
                Row("  await do() alone: an async def returning 1", kind="single", num="do"),
                Row(
                    "  the floor: async def call_with_retry(self, do, fail): return await do()",
                    kind="single",
                    num="wrapper",
                ),
                Row(
                    "async call_with_retry success vs the bare async def",
                    kind="floor",
                    num="c",
                    den="wrapper",
                    target=TARGETS["async_floor"],
                ),
                Row(
                    "  the same with redis-py's signature (is_retryable=None, "
                    "with_failure_count=False)",
                    kind="single",
                    num="wrapper+signature",
                ),
                Row(
                    "async call_with_retry success vs the bare async def with redis-py's signature",
                    kind="floor",
                    num="c",
                    den="wrapper+signature",
                    target=TARGETS["async_signature_floor"],
                ),
            ],
            note=included + f" ({session.loop_name} event loop)",
        ),
        Case(
            "async call_with_retry/failure",
            "asyncio Retry",
            {s: lambda st, s=s: failure(s, st) for s in ("redis-py", "c")},
            [
                Row(
                    "async call_with_retry failure (NoBackoff, 3 retries)",
                    target=PARITY,
                    judge="q1",
                )
            ],
            note="do raises ConnectionError on all 4 attempts; asyncio.sleep "
            "patched to a no-op on both sides (never reached)",
            context=patch_sleeps,
        ),
    ]


def memory_cases():
    def fresh(module, name):
        return lambda st: MemSide("fresh", lambda: _strategy(module, name))

    def copied(module, name):
        def factory(st):
            original = _strategy(module, name)
            # A deepcopy materialises the original's __dict__ on CPython 3.11;
            # do that first so only the copies are counted.
            copy.deepcopy(original)
            return MemSide("copy", lambda: copy.deepcopy(original))

        return factory

    def fields_tuple(name):
        # The floor: a tuple of as many references as the strategy holds
        # (a new one each time: tuple() of a list is never cached).
        fields = [0.5] * FIELDS.get(name, 2)
        return lambda st: MemSide("tuple", lambda: tuple(fields))

    cases = []
    for name in STRATEGIES:
        cases.append(
            Case(
                f"memory/{name}",
                "memory",
                {
                    "redis-py": fresh(PY, name),
                    "c": fresh(C, name),
                    "redis-py copy": copied(PY, name),
                    "c copy": copied(C, name),
                    "tuple": fields_tuple(name),
                },
                [
                    Row(f"{name}: bytes per object, fresh", kind="memory"),
                    Row(
                        f"{name}: bytes per object, deep-copied",
                        kind="memory",
                        num="redis-py copy",
                        den="c copy",
                    ),
                    Row(
                        f"{name}: deep-copied, vs a tuple of its {FIELDS.get(name, 2)} fields",
                        kind="floor",
                        num="c copy",
                        den="tuple",
                        target=TARGETS["memory_copy_floor"],
                    ),
                ],
                kind="memory",
            )
        )
    cases[0].note = (
        "tracemalloc, bytes retained per object over N objects kept alive "
        "(attribute storage included; attribute values are shared floats); "
        "deep-copied = copy.deepcopy of one object, as redis-py does for each "
        "connection (on CPython 3.11 the redis-py copy carries a __dict__)"
    )

    def retry_fresh(side):
        def factory(st):
            _retry(side)  # Unavailable here, not inside the measurement
            return MemSide("fresh", lambda: _retry(side))

        return factory

    def retry_copied(side):
        def factory(st):
            original = _retry(side)
            copy.deepcopy(original)
            return MemSide("copy", lambda: copy.deepcopy(original))

        return factory

    cases.append(
        Case(
            "memory/Retry",
            "memory",
            {
                "redis-py": retry_fresh("redis-py"),
                "c": retry_fresh("c"),
                "redis-py copy": retry_copied("redis-py"),
                "c copy": retry_copied("c"),
            },
            [
                Row("Retry(ExponentialBackoff(), 3): bytes, fresh", kind="memory"),
                Row(
                    "Retry(ExponentialBackoff(), 3): bytes, deep-copied",
                    kind="memory",
                    num="redis-py copy",
                    den="c copy",
                ),
            ],
            kind="memory",
            note="a Retry with its backoff; no target",
        )
    )
    return cases


def peer_case():
    """A successful call wrapped by each retry library, beside do() alone."""
    E = redis.exceptions.ConnectionError

    def ours(label, st):
        return stmt_side(
            label, "r.call_with_retry(do, fail)", {"r": _retry(label), "do": _do, "fail": _fail}
        )

    def tenacity_decorator(st):
        tenacity = _peer("tenacity")
        wrapped = tenacity.retry(
            stop=tenacity.stop_after_attempt(4),
            wait=tenacity.wait_exponential(multiplier=0.008, max=0.512),
            retry=tenacity.retry_if_exception_type(E),
            reraise=True,
        )(_do)
        return stmt_side("tenacity @retry", "w()", {"w": wrapped})

    def tenacity_retrying(st):
        tenacity = _peer("tenacity")
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(4),
            wait=tenacity.wait_exponential(multiplier=0.008, max=0.512),
            retry=tenacity.retry_if_exception_type(E),
            reraise=True,
        )
        return stmt_side("tenacity Retrying", "retrying(do)", {"retrying": retrying, "do": _do})

    def _stamina(st):
        stamina = _peer("stamina")
        stamina.instrumentation.set_on_retry_hooks([])  # no logging/metrics
        st.callback(stamina.instrumentation.set_on_retry_hooks, None)
        return stamina, dict(on=E, attempts=4, timeout=None, wait_initial=0.008, wait_max=0.512)

    def stamina_decorator(st):
        stamina, params = _stamina(st)
        return stmt_side("stamina @retry", "w()", {"w": stamina.retry(**params)(_do)})

    def stamina_context(st):
        stamina, params = _stamina(st)
        stmt = "for attempt in ctx(**params):\n    with attempt:\n        do()"
        return stmt_side(
            "stamina retry_context",
            stmt,
            {"ctx": stamina.retry_context, "params": params, "do": _do},
        )

    def backoff_decorator(st):
        backoff = _peer("backoff")
        wrapped = backoff.on_exception(
            backoff.expo, E, max_tries=4, factor=0.008, max_value=0.512, logger=None
        )(_do)
        return stmt_side("backoff @on_exception", "w()", {"w": wrapped})

    sides = {
        "do": lambda st: stmt_side("do", "do()", {"do": _do}),
        "redis-py": lambda st: ours("redis-py", st),
        "c": lambda st: ours("c", st),
        "tenacity @retry": tenacity_decorator,
        "tenacity Retrying": tenacity_retrying,
        "stamina @retry": stamina_decorator,
        "stamina retry_context": stamina_context,
        "backoff @on_exception": backoff_decorator,
    }
    names = {"redis-py": "redis-py Retry", "c": "redis_backoff_c Retry (ours)"}
    rows = [
        Row(names.get(label, label), kind="peer", num=label, base="do")
        for label in sides
        if label != "do"
    ]
    rows.append(Row("do() alone (not an overhead: its whole time)", kind="single", num="do"))
    return Case(
        "peers/success",
        "peers",
        sides,
        rows,
        note="per-call overhead above do() of a successful call; 4 attempts "
        "at most, exponential waits 8 ms..512 ms (never reached); "
        "stamina's retry hooks switched off, backoff's logger off",
    )


def _peer(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise Unavailable(f"{name} not installed (pip install 'redis-backoff-c[bench]')") from None


def e2e_cases(session):
    def sync_side(label, st, key_prefix="redis_backoff_c:bench"):
        c_retry_module()  # before starting a server for nothing
        url = session.redis_url()
        if label == "redis-py":
            retry = redis.retry.Retry(PY.ExponentialBackoff(), 3)
        else:
            # "c+deadline": under patch(), the deadline bounds every wait
            # of the command (its entry and each wait read it).
            extras = {"deadline": 10.0} if label == "c+deadline" else {}
            retry = c_retry_module().Retry(C.ExponentialBackoff(), 3, **extras)
        client = redis.Redis.from_url(url, retry=retry)
        st.callback(client.close)
        key = f"{key_prefix}:{label}"
        client.set(key, b"x" * 16)

        def run(number):
            set_, get = client.set, client.get
            start = time.perf_counter()
            for _ in range(number):
                set_(key, b"x" * 16)
                get(key)
            return time.perf_counter() - start

        return Side(label, run)

    def patched(stack):
        redis_backoff_c.patch()
        stack.callback(redis_backoff_c.unpatch)

    def async_client_side(label, st):
        c_async_retry_module()
        url = session.redis_url()
        loop = session.loop()
        if label == "redis-py":
            retry = redis.asyncio.retry.Retry(PY.ExponentialBackoff(), 3)
        else:
            retry = c_async_retry_module().Retry(C.ExponentialBackoff(), 3)
        client = redis.asyncio.Redis.from_url(url, retry=retry)
        st.callback(lambda: loop.run_until_complete(client.aclose()))
        key = f"redis_backoff_c:bench:async:{label}"
        loop.run_until_complete(client.set(key, b"x" * 16))

        async def body(n):
            for _ in range(n):
                await client.set(key, b"x" * 16)
                await client.get(key)

        return async_side(label, loop, body, clock=time.perf_counter)

    note = (
        "one op = SET + GET on loopback (two round trips) through one "
        "client with Retry(ExponentialBackoff(), 3), redis-py's or ours; "
        "wall clock, whatever --clock says (the server's time counts)"
    )
    return [
        Case(
            "e2e/sync",
            "end-to-end",
            {s: lambda st, s=s: sync_side(s, st) for s in ("redis-py", "c")},
            [Row("redis.Redis SET+GET")],
            note=note,
            min_time_scale=3.0,
            repeats_scale=2.0,
        ),
        Case(
            "e2e/asyncio",
            "end-to-end",
            {s: lambda st, s=s: async_client_side(s, st) for s in ("redis-py", "c")},
            [Row("redis.asyncio.Redis SET+GET")],
            note=f"as above, {session.loop_name} event loop",
            min_time_scale=3.0,
            repeats_scale=2.0,
        ),
        Case(
            "e2e/sync-deadline",
            "end-to-end",
            {
                s: lambda st, s=s: sync_side(s, st, "redis_backoff_c:bench:patched")
                for s in ("c", "c+deadline")
            },
            [
                Row(
                    "redis.Redis SET+GET under patch(): no deadline / deadline=10",
                    num="c",
                    den="c+deadline",
                    target=TARGETS["e2e_deadline"],
                )
            ],
            note=(
                "as above, both sides under patch(), our Retry without and with "
                "deadline=10: the deadline bounds every wait of the command "
                "(docs/extras.md); the target: within 2%"
            ),
            context=patched,
            min_time_scale=3.0,
            repeats_scale=2.0,
        ),
    ]


def all_cases(session):
    return [
        *compute_cases(),
        floor_case(),
        *construction_cases(),
        *eq_hash_cases(),
        deepcopy_case(),
        *sync_retry_cases(),
        sync_extras_case(),
        hooks_case(),
        cluster_command_case(),
        *async_retry_cases(session),
        async_extras_case(session),
        *memory_cases(),
        peer_case(),
        *e2e_cases(session),
    ]


def new_event_loop(name):
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise SystemExit(
                "--loop uvloop: uvloop is not installed (pip install 'redis-backoff-c[bench]')"
            ) from None
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()
