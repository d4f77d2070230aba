"""Generated hostile programs: hypothesis writes the reentrancy tests.

tests/contract/test_reentrancy.py and test_hostile_objects.py hold the
hostile cases someone thought of.  Here hypothesis draws programs that
nobody wrote by hand: a Retry of either flavor over any strategy, a
sequence of outcomes for do(), and a list of mutations, each fired once
from one hook of the running call: do() itself, fail(), the is_retryable
checker, the backoff sleep, or the __del__ of a parameter object that the
program leaves in a field, which runs whenever that field is next replaced
(often in the middle of another mutation).  The mutations are what a user
may legally do to a Retry while it runs: replace its backoff, retries,
errors, own checker, the backoff's parameters or (C types) the extras,
run __init__ again, copy, deep-copy,
pickle, compare and hash it, call it again from inside itself, collect
garbage, raise.  An asyncio call is driven by hand and may be thrown a
CancelledError or closed at any of its suspensions.

What must hold, on redis-py and on the C types alike: the process does not
crash (the sanitizer stage runs this module under ASan and UBSan), no
SystemError comes out of the call or of a __del__, and afterwards the Retry
still works: it has a repr, equals itself, and returns what a clean do()
returns.  REDIS_BACKOFF_C_CHAOS_EXAMPLES sets the number of programs per
side and flavor (default 60) for a longer campaign.
"""

import asyncio
import copy
import gc
import os
import pickle
import random
import sys

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from support import ALL, FLAVORS, REDIS_PY_HAS_CHECKER, SIDES, Conn, UserError, suspend

import redis_backoff_c

EXAMPLES = int(os.environ.get("REDIS_BACKOFF_C_CHAOS_EXAMPLES", "60"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
MAX_ATTEMPTS = 40  # do() succeeds from then on, so that no program runs forever
MAX_DEPTH = 2  # nested call_with_retry on the same Retry, at most this deep

HOOKS = ["do", "fail", "is_retryable", "sleep", "del"]
MUTATIONS = [
    "replace_backoff",
    "set_retries",
    "set_errors",
    "update_errors",
    "update_retries",
    "reinit",
    "set_parameters",
    "reset_backoff",
    "copies",
    "compare",
    "nested",
    "gc",
    "raise",
    "arm_bomb",
    "set_checker",
    "set_extras",
]
OUTCOMES = ["conn", "value", "ok"]


# The types of the exceptions that left a bomb's __del__ (which Python
# would report as unraisable): none may be a SystemError.
ESCAPED_FROM_DEL: list[type] = []


class Fuse:
    """Mixed into a number: a parameter that runs a mutation when it is
    freed.  Copies are the bomb itself (deepcopy) or a plain number
    (pickle)."""

    world = None
    mutation = None

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (self.plain, (self.plain(self),))

    def __del__(self):
        world, self.world = self.world, None
        if world is None or world.done:
            return
        try:
            world.mutate(self.mutation, hook="del")
        except Exception as error:  # noqa: BLE001 - recorded, checked by the test
            ESCAPED_FROM_DEL.append(type(error))


class FloatBomb(Fuse, float):
    plain = float


class IntBomb(Fuse, int):
    plain = int


def armed(cls, value, world, mutation):
    bomb = cls(value)
    bomb.world, bomb.mutation = world, mutation
    return bomb


def retry_every_error(error):
    """A Retry's own checker, picklable (a module-level function)."""
    return True


def retry_no_error(error):
    return False


class World:
    """One program running against one implementation and flavor."""

    def __init__(self, impl, flavor, kind, program, outcomes):
        self.impl, self.flavor, self.kind = impl, flavor, kind
        self.pending = {hook: [m for h, m in program if h == hook] for hook in HOOKS}
        self.outcomes = list(outcomes)
        self.attempts = 0
        self.depth = 0
        self.done = False  # set at the end: bombs still alive do nothing
        self.trace = []  # what the call did, in order, for the differential test
        self.planted = 0
        self.retry = flavor.Retry(impl)(self.strategy(kind), 2)
        for mutation in self.pending.pop("del"):
            self.plant(mutation)

    # ---- building blocks ----

    def strategy(self, kind, cap=0.5, base=0.01):
        backoff = self.impl.backoff
        if kind == "NoBackoff":
            return backoff.NoBackoff()
        if kind == "ConstantBackoff":
            return backoff.ConstantBackoff(cap)
        return getattr(backoff, kind)(cap=cap, base=base)

    def plant(self, mutation):
        """Leave a bomb in a field, by turns the Retry's retries and a
        parameter of its backoff: it fires when the field is next replaced
        or its object freed."""
        self.planted += 1
        retry, backoff = self.retry, self.retry._backoff
        if self.planted % 2:
            retry._retries = armed(IntBomb, 2, self, mutation)
        elif hasattr(backoff, "_cap"):
            backoff._cap = armed(FloatBomb, 0.25, self, mutation)
        else:
            backoff._backoff = armed(FloatBomb, 0.25, self, mutation)

    def fire(self, hook):
        """The next mutation waiting at `hook`, run now."""
        waiting = self.pending.get(hook)
        if waiting:
            self.mutate(waiting.pop(0), hook)

    # ---- the mutations ----

    def mutate(self, mutation, hook):
        event(f"{mutation} from {hook}")
        retry = self.retry
        if mutation == "replace_backoff":
            retry._backoff = self.strategy(ALL[self.attempts % len(ALL)])
        elif mutation == "set_retries":
            retry._retries = [0, 1, 3, -1][self.attempts % 4]
        elif mutation == "set_errors":
            retry._supported_errors = [(Conn,), (ValueError, Conn), ()][self.attempts % 3]
        elif mutation == "update_errors":
            retry.update_supported_errors([ValueError])
        elif mutation == "update_retries":
            retry.update_retries(self.attempts % 3)
        elif mutation == "reinit":
            retry.__init__(self.strategy(self.kind), 1)
        elif mutation == "set_parameters":
            backoff = retry._backoff
            if hasattr(backoff, "_cap"):
                backoff._cap, backoff._base = float(str(0.3)), float(str(0.02))
        elif mutation == "reset_backoff":
            retry._backoff.reset()
        elif mutation == "copies":
            for clone in (copy.copy(retry), copy.deepcopy(retry)):
                assert type(clone) is type(retry)
            clone = pickle.loads(pickle.dumps(retry))
            assert type(clone) is type(retry)
            # A budget or stats travels by value, and compares by identity.
            if getattr(retry, "budget", None) is None and getattr(retry, "stats", None) is None:
                assert clone == retry
        elif mutation == "compare":
            repr(retry)
            hash(retry)
            _ = retry == copy.copy(retry)
        elif mutation == "gc":
            gc.collect()
        elif mutation == "raise":
            raise UserError(f"raised from {hook}")
        elif mutation == "arm_bomb":
            self.plant(MUTATIONS[self.attempts % len(MUTATIONS)])
        elif mutation == "set_checker" and REDIS_PY_HAS_CHECKER:
            # The Retry's own checker (redis-py 8.2): by turns none, one that
            # retries, one that refuses.
            retry.is_retryable = [None, retry_every_error, retry_no_error][self.attempts % 3]
        elif mutation == "set_extras" and self.impl.name == "c":
            # The C types' extras (redis-py has none): by turns all of them,
            # a budget alone, none.
            turn = self.attempts % 3
            retry.deadline = 30.0 if turn == 0 else None
            retry.budget = redis_backoff_c.RetryBudget(10, 0.1) if turn < 2 else None
            retry.stats = redis_backoff_c.RetryStats() if turn == 0 else None
        elif mutation == "nested" and self.depth < MAX_DEPTH and self.flavor.name == "sync":
            self.depth += 1
            try:
                self.call(lambda: "nested", lambda error, *count: None)
            except (Conn, ValueError, UserError):
                pass
            finally:
                self.depth -= 1

    async def mutate_async(self, hook):
        """An asyncio hook: a nested call is awaited, then it suspends."""
        waiting = self.pending.get(hook)
        if waiting and waiting[0] == "nested" and self.depth < MAX_DEPTH:
            waiting.pop(0)
            self.depth += 1
            try:
                await self.retry.call_with_retry(self.async_do_ok, self.async_fail_quiet)
            except (Conn, ValueError, UserError):
                pass
            finally:
                self.depth -= 1
        self.fire(hook)
        await suspend()

    # ---- the call's own callables ----

    def do(self):
        self.attempts += 1
        self.fire("do")
        outcome = self.outcomes.pop(0) if self.outcomes else "ok"
        self.trace.append(("do", outcome))
        if outcome == "ok" or self.attempts > MAX_ATTEMPTS:
            return "done"
        raise Conn("down") if outcome == "conn" else ValueError("not retried")

    def fail(self, error, *count):
        self.trace.append(("fail", type(error).__name__, count))
        self.fire("fail")

    def is_retryable(self, error):
        self.trace.append(("is_retryable", type(error).__name__))
        self.fire("is_retryable")
        return True

    def sleep(self, delay):
        self.trace.append(("sleep", delay))
        self.fire("sleep")

    async def async_do(self):
        await self.mutate_async("do")
        return self.do()

    async def async_fail(self, error, *count):
        await self.mutate_async("fail")

    async def async_do_ok(self):
        return "nested"

    async def async_fail_quiet(self, error, *count):
        return None

    def call(self, do, fail, **options):
        return self.retry.call_with_retry(do, fail, **options)


def drive(coroutine, throw_at, close):
    """Send None until it ends; at the suspension numbered throw_at, throw a
    CancelledError into it (or close it)."""
    steps = 0
    while True:
        try:
            if throw_at is not None and steps == throw_at:
                if close:
                    coroutine.close()
                    return "closed"
                coroutine.throw(asyncio.CancelledError())
            else:
                coroutine.send(None)
        except StopIteration as stop:
            return stop.value
        steps += 1


PROGRAMS = st.lists(st.tuples(st.sampled_from(HOOKS), st.sampled_from(MUTATIONS)), max_size=6)
CALLS = {
    "kind": st.sampled_from(ALL),
    "outcomes": st.lists(st.sampled_from(OUTCOMES), max_size=6),
    "checker": st.booleans(),
    "with_failure_count": st.booleans(),
    "throw_at": st.none() | st.integers(0, 6),
    "close": st.booleans(),
}


def run_program(
    impl, flavor, kind, program, outcomes, checker, with_failure_count, throw_at, close
):
    """The program's call on `impl`, to its end: (the World, what the call
    gave: ("returned", value) or ("raised", type name, message))."""
    world = World(impl, flavor, kind, program, outcomes)
    options = {"with_failure_count": with_failure_count}
    if checker:
        options["is_retryable"] = world.is_retryable
    sleep_module = flavor.retry_module(impl)
    previous_sleep = sleep_module.sleep
    try:
        if flavor.name == "sync":
            sleep_module.sleep = world.sleep
            try:
                return world, ("returned", world.call(world.do, world.fail, **options))
            except (Conn, ValueError, UserError) as error:
                return world, ("raised", type(error).__name__, str(error))

        async def sleep(delay):
            world.trace.append(("sleep", delay))
            await world.mutate_async("sleep")

        sleep_module.sleep = sleep
        coroutine = world.call(world.async_do, world.async_fail, **options)
        try:
            return world, ("returned", drive(coroutine, throw_at, close))
        except (Conn, ValueError, UserError, asyncio.CancelledError) as error:
            return world, ("raised", type(error).__name__, str(error))
    finally:
        sleep_module.sleep = previous_sleep


@pytest.mark.parametrize("flavor_name", sorted(FLAVORS))
@SETTINGS
@given(program=PROGRAMS, **CALLS)
def test_a_generated_program_leaves_a_working_retry(impl, flavor_name, program, **call):
    flavor = FLAVORS[flavor_name]
    ESCAPED_FROM_DEL.clear()
    unraisable = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda report: unraisable.append(report.exc_type)
    try:
        world, _ = run_program(impl, flavor, program=program, **call)
        # What the program left still works.
        world.pending = {}
        repr(world.retry)
        assert world.retry == world.retry
        clean = flavor.call(world.retry, lambda: "clean", lambda error, *count: None)
        assert clean == "clean"
        world.done = True
        del world
        gc.collect()
    finally:
        sys.unraisablehook = previous_hook
    assert SystemError not in unraisable + ESCAPED_FROM_DEL, (unraisable, ESCAPED_FROM_DEL)


# The mutations whose effects are the same on both sides at the same point
# of the call: no bomb (when a field's old value is freed depends on who
# else holds it), no gc.collect(), no extras (redis-py has none).
DETERMINISTIC = [m for m in MUTATIONS if m not in ("arm_bomb", "gc", "set_extras")]
DETERMINISTIC_PROGRAMS = st.lists(
    st.tuples(st.sampled_from([h for h in HOOKS if h != "del"]), st.sampled_from(DETERMINISTIC)),
    max_size=6,
)


@pytest.mark.parametrize("flavor_name", sorted(FLAVORS))
@SETTINGS
@given(program=DETERMINISTIC_PROGRAMS, seed=st.integers(0, 2**32 - 1), **CALLS)
def test_a_generated_program_runs_as_on_redis_py(flavor_name, program, seed, **call):
    flavor = FLAVORS[flavor_name]
    runs = []
    for impl in SIDES:
        random.seed(seed)
        world, outcome = run_program(impl, flavor, program=program, **call)
        retry = world.retry
        after = (
            type(retry._backoff).__name__,
            retry._retries,
            sorted(error.__name__ for error in retry._supported_errors),
        )
        runs.append((outcome, world.trace, after))
    assert runs[1] == runs[0]
