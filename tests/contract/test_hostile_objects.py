"""Legal Python objects that mutate or free what the C code is working on.

A user's object can run Python code in the middle of any C operation: a
value's __del__ when a field is replaced, a dict key's __eq__ and __hash__
when the pickle state is built, a subclass's __getattribute__ when its slots
and __dict__ are read, a value's __deepcopy__ during copy.deepcopy.  Each
scenario below drives every copy, deepcopy, pickle, __reduce__,
__setstate__ and attribute-store path of a subclass of one of the seven
strategies or of either Retry type with one such object, which reassigns
every field of the object under operation (freeing the old values), clears
its extras, __dict__ and slot names.

Each scenario runs in a fresh interpreter, so that a crash fails one test
and not the run, once on redis-py and once on the C types: redis-py shows
that the scenario is legal Python it survives; the C side must survive it
too (the sanitizer stage runs this module under ASan and UBSan) and, where
the outcome is Python's own semantics rather than an implementation's
timing, give redis-py's result.

The regression tests at the end are the defects found by a probe of the C
code, each of which crashed (or gave a wrong value) before its fix.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from support import ALL, IMPLEMENTATIONS

SIDES = sorted(IMPLEMENTATIONS)
RETRY_KINDS = ["Retry", "AsyncRetry"]
KINDS = [*ALL, *RETRY_KINDS]

# Everything a scenario needs, in the fresh interpreter: the side's modules
# (argv[1]), the class under test (argv[2]), its fields and fresh values.
PRELUDE = textwrap.dedent(
    """
    import copy, gc, pickle, sys
    SIDE, KIND = sys.argv[1], sys.argv[2]
    if SIDE == "c":
        import redis_backoff_c.backoff as B
        import redis_backoff_c.retry as R
        import redis_backoff_c.asyncio.retry as AR
        import redis_backoff_c as EXTRAS
    else:
        import redis.backoff as B
        import redis.retry as R
        import redis.asyncio.retry as AR
        EXTRAS = None
    from redis.exceptions import ConnectionError as Conn, TimeoutError as Tmo

    def fresh(x):
        # A float of its own, freed when its last reference goes.
        return float(str(x))

    def fresh_int(x):
        return int(str(x))

    if KIND == "Retry":
        BASE, FIELDS = R.Retry, ("_backoff", "_retries", "_supported_errors")
        ARGS = lambda: (B.ExponentialBackoff(fresh(2.5), fresh(0.5)), fresh_int(3))
    elif KIND == "AsyncRetry":
        BASE, FIELDS = AR.Retry, ("_backoff", "_retries", "_supported_errors")
        ARGS = lambda: (B.ExponentialBackoff(fresh(2.5), fresh(0.5)), fresh_int(3))
    elif KIND in ("ConstantBackoff", "NoBackoff"):
        BASE, FIELDS = getattr(B, KIND), ("_backoff",)
        ARGS = (lambda: (fresh(0.75),)) if KIND == "ConstantBackoff" else (lambda: ())
    else:
        BASE, FIELDS = getattr(B, KIND), ("_cap", "_base")
        ARGS = lambda: (fresh(2.5), fresh(0.5))
    IS_RETRY = KIND in ("Retry", "AsyncRetry")
    # A subclass with slots and a __dict__ (redis-py's classes have one).
    WITH_DICT = () if BASE.__dictoffset__ else ("__dict__",)

    def scrambled(name, n):
        # The value scramble() gives field `name`, fresh each time.
        if name == "_backoff" and IS_RETRY:
            return B.ConstantBackoff(fresh(0.125 * n))
        if name == "_retries":
            return fresh_int(10**20 + n)
        if name == "_supported_errors":
            return (Tmo,)
        return fresh(0.125 * n)

    def scramble(obj, n=1):
        # Reassigns every field (the old values are freed), clears the
        # extras, the __dict__ and the slots: whatever the C code holds of
        # them is gone afterwards.  (redis-py's fields live in the
        # __dict__: cleared first, then set.)
        d = getattr(obj, "__dict__", None)
        if d is not None:
            d.clear()
        for name in FIELDS:
            setattr(obj, name, scrambled(name, n))
        if EXTRAS is not None and IS_RETRY:
            obj.deadline = obj.budget = obj.stats = None
        for name in list(getattr(type(obj), "__slots__", ())):
            if name != "__dict__":
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
        names = type(obj).__dict__.get("__slotnames__")
        if isinstance(names, list):
            names.clear()
        # Reuse the memory just freed, so that a stale pointer reads garbage.
        junk.append([fresh(n + i / 7) for i in range(64)])
        junk.append([fresh_int(10**20 + i) for i in range(64)])

    junk = []

    def describe(value):
        # What a value is, the same for both sides' objects (their reprs
        # differ): a strategy by its type and fields, else its repr.
        if isinstance(value, B.AbstractBackoff):
            names = ("_backoff",) if hasattr(value, "_backoff") else ("_cap", "_base")
            return (type(value).__name__, *(repr(getattr(value, n)) for n in names))
        return repr(value)

    def fields(obj):
        return tuple(describe(getattr(obj, name)) for name in FIELDS)

    def report(op, call):
        try:
            result = call()
        except Exception as error:
            print(op, "raised", type(error).__name__)
            return None
        print(op, "ok")
        return result

    def add_extras(obj):
        if EXTRAS is not None and IS_RETRY:
            obj.deadline = fresh(1.5)
            obj.budget = EXTRAS.RetryBudget(10, 0.1)
            obj.stats = EXTRAS.RetryStats()
    """
)


def run_scenario(side, kind, body, design=None, malloc="debug"):
    """Runs PRELUDE + body in a fresh interpreter; its stdout lines."""
    # The debug allocator fills freed memory with a pattern, so that a
    # stale pointer read crashes in a normal build too; a stale write shows
    # best with pymalloc (malloc=None), which hands the block out again.
    # The sanitizer stage sets PYTHONMALLOC=malloc for ASan: kept.
    env = dict(os.environ)
    if malloc is not None:
        env.setdefault("PYTHONMALLOC", malloc)
    if design is not None:
        env["REDIS_BACKOFF_C_ASYNC_DESIGN"] = design
    code = PRELUDE + textwrap.dedent(body) + "\nprint('done')\n"
    # Not -I, which would ignore PYTHONMALLOC: -s, and a working directory
    # with no redis_backoff_c/ of a checkout to shadow the installed one.
    result = subprocess.run(
        [sys.executable, "-s", "-c", code, side, kind],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"{side} {kind}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    lines = result.stdout.splitlines()
    assert lines and lines[-1] == "done", result.stdout + result.stderr
    return lines


def operations(lines):
    """The lines report() printed: one per operation that finished, with
    "ok" or "raised <type>"."""
    return [line for line in lines if line.split()[-1] == "ok" or " raised " in line]


def on_both_sides(kind, body):
    """The scenario on redis-py and on the C types: both survive it; the
    lines it prints, one per operation, say what each side did."""
    return {side: run_scenario(side, kind, body) for side in SIDES}


# ---- __del__ of a field's old value -------------------------------------

DEL_SCENARIO = """
class Sub(BASE):
    pass

def bomb_for(name, target):
    # A value for field `name` whose __del__, when the field lets it go,
    # scrambles the object (None: no such value for that field).
    if name == "_backoff" and IS_RETRY:
        class V(B.NoBackoff):
            def __del__(self):
                scramble(target, 2)
        return V()
    if name == "_retries":
        class V(int):
            def __del__(self):
                scramble(target, 2)
        return V(4)
    if name == "_supported_errors":
        return None
    class V(float):
        def __del__(self):
            scramble(target, 2)
    return V(0.375)

for name in FIELDS:
    for op in ("setattr", "__setstate__", "__init__"):
        obj = Sub(*ARGS())
        add_extras(obj)
        bomb = bomb_for(name, obj)
        if bomb is None:
            continue
        setattr(obj, name, bomb)
        del bomb
        if op == "setattr":
            report(f"{name} {op}", lambda: setattr(obj, name, scrambled(name, 5)))
        elif op == "__setstate__":
            state = {name: scrambled(name, 5)}
            report(f"{name} {op}", lambda: obj.__setstate__(state))
        else:
            report(f"{name} {op}", lambda: obj.__init__(*ARGS()))
        gc.collect()
        print(name, op, fields(obj))
        if IS_RETRY:
            print(name, op, "get_retries", obj.get_retries())
"""


@pytest.mark.parametrize("kind", KINDS)
def test_del_of_a_replaced_value_scrambles_the_object(kind):
    lines = on_both_sides(kind, DEL_SCENARIO)
    # Python's order: the field is written, then the old value's __del__
    # runs and its writes win.  Both sides end with the same fields.
    # (redis-py's classes have no __setstate__: ours do, and survive.)
    setstate = [line for line in lines["c"] if line.endswith("__setstate__ ok")]
    assert len(setstate) == len(_fields(kind)) - (kind in RETRY_KINDS)
    for side in SIDES:
        lines[side] = [line for line in lines[side] if "__setstate__" not in line]
    assert lines["c"] == lines["redis-py"]


# ---- __eq__ and __hash__ of keys in the pickle state --------------------

EQ_SCENARIO = """
NAMES = [*FIELDS, "_is_retryable", "deadline", "budget", "stats", "a"]

class Key(str):
    # An attribute name that hashes as one of the state's own keys;
    # comparing with it scrambles the object.
    def __hash__(self):
        return hash(str(self)[len("key_"):])
    def __eq__(self, other):
        scramble(TARGET, 3)
        return str.__eq__(self, other)

class Sub(BASE):
    pass

for name in NAMES:
    for op in ("copy", "deepcopy", "__reduce_ex__", "pickle"):
        TARGET = obj = Sub(*ARGS())
        add_extras(obj)
        obj.__dict__[Key("key_" + name)] = fresh(1.25)
        if op == "copy":
            result = report(f"{name} {op}", lambda: copy.copy(obj))
        elif op == "deepcopy":
            result = report(f"{name} {op}", lambda: copy.deepcopy(obj))
        elif op == "__reduce_ex__":
            result = report(f"{name} {op}", lambda: obj.__reduce_ex__(2))
            if result is not None:
                print(name, op, sorted(repr(k) for k in result[2] if isinstance(k, str))
                      if isinstance(result[2], dict) else type(result[2]).__name__)
            continue
        else:
            result = report(f"{name} {op}", lambda: pickle.loads(pickle.dumps(obj, 4)))
        if result is not None:
            assert type(result) is Sub
            gc.collect()
            repr(fields(result))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_eq_of_a_state_key_scrambles_the_object(kind):
    lines = on_both_sides(kind, EQ_SCENARIO)
    # Which operation runs a key's __eq__ is the implementation's choice
    # (redis-py's pickle state is the __dict__ itself): both sides finish
    # every operation.
    for side, side_lines in lines.items():
        assert len(operations(side_lines)) == 4 * (len(_fields(kind)) + 5), (side, side_lines)


def _fields(kind):
    if kind in RETRY_KINDS:
        return ("_backoff", "_retries", "_supported_errors")
    if kind in ("ConstantBackoff", "NoBackoff"):
        return ("_backoff",)
    return ("_cap", "_base")


# ---- __getattribute__ of a subclass with __slots__ ----------------------

GETATTRIBUTE_SCENARIO = """
class Name(str):
    pass

class Sub(BASE):
    __slots__ = ("a", "b", *WITH_DICT)
    def __getattribute__(self, name):
        if name in ("a", "b", "__dict__") and type(self).armed:
            type(self).armed = False
            scramble(self, 4)
        return BASE.__getattribute__(self, name)

for op in ("copy", "deepcopy", "__reduce_ex__", "pickle"):
    Sub.__slotnames__ = [Name("a" * 1), Name("b")]
    obj = Sub(*ARGS())
    add_extras(obj)
    obj.a, obj.b = fresh(1.5), [fresh(2.5)]
    obj.extra = fresh(3.5)
    Sub.armed = True
    if op == "copy":
        result = report(op, lambda: copy.copy(obj))
    elif op == "deepcopy":
        result = report(op, lambda: copy.deepcopy(obj))
    elif op == "__reduce_ex__":
        report(op, lambda: obj.__reduce_ex__(2))
        continue
    else:
        Sub.__module__ = "__main__"
        result = report(op, lambda: pickle.loads(pickle.dumps(obj, 4)))
    if result is not None:
        Sub.armed = False
        assert type(result) is Sub
        gc.collect()
        repr(fields(result))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_getattribute_scrambles_the_object_while_its_slots_are_read(kind):
    lines = on_both_sides(kind, GETATTRIBUTE_SCENARIO)
    for side, side_lines in lines.items():
        ops = [line.split()[0] for line in operations(side_lines)]
        assert ops == ["copy", "deepcopy", "__reduce_ex__", "pickle"], (side, side_lines)


# ---- __deepcopy__ of a value: scrambles the original and the copy --------

DEEPCOPY_SCENARIO = """
class Sub(BASE):
    __slots__ = ("a", *WITH_DICT)

class Hook:
    # Deep-copying it scrambles the object being copied and, through the
    # memo, the copy being built.
    def __deepcopy__(self, memo):
        scramble(TARGET, 6)
        partial = memo.get(id(TARGET))
        if partial is not None and partial is not TARGET:
            scramble(partial, 7)
        return fresh(8.5)

for where in ("__dict__", "slot", "both"):
    TARGET = obj = Sub(*ARGS())
    add_extras(obj)
    if where in ("__dict__", "both"):
        obj.hook = Hook()
    if where in ("slot", "both"):
        obj.a = Hook()
    result = report(where, lambda: copy.deepcopy(obj))
    if result is not None:
        assert type(result) is Sub
        gc.collect()
        repr(fields(result))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_deepcopy_of_a_value_scrambles_the_object_and_its_copy(kind):
    lines = on_both_sides(kind, DEEPCOPY_SCENARIO)
    for side, side_lines in lines.items():
        assert [line.split()[0] for line in side_lines[:-1]] == ["__dict__", "slot", "both"], (
            side,
            side_lines,
        )


# ---- call_with_retry: fail() frees what the loop holds, both designs ----

CALL_SCENARIO = """
import asyncio

class Sub(BASE):
    pass

obj = Sub(B.ConstantBackoff(0), 2)
add_extras(obj)
if EXTRAS is not None:
    obj.deadline = None  # no sleeping past it; the budget and stats stay
attempts = []

class Count(int):
    def __del__(self):
        # Every field reassigned, the old values freed, in the middle of
        # fail(): the loop must go on with what the object now holds.
        obj._backoff = B.NoBackoff()
        obj._retries = 3
        obj._supported_errors = (Tmo, Conn)
        junk.append([fresh_int(10**20 + i) for i in range(64)])

obj._retries = Count(2)

def fail(error, *rest):
    obj._retries = 4  # frees Count(2), whose __del__ scrambles obj

if KIND == "AsyncRetry":
    async def do():
        attempts.append(1)
        raise Conn("down")
    async def afail(error, *rest):
        fail(error)
    def call():
        return asyncio.run(obj.call_with_retry(do, afail))
else:
    def do():
        attempts.append(1)
        raise Conn("down")
    def call():
        return obj.call_with_retry(do, fail)
report("call", call)
print("attempts", len(attempts), "get_retries", obj.get_retries())
"""


@pytest.mark.parametrize(
    ("kind", "design"),
    [("Retry", None), ("AsyncRetry", "awaitable"), ("AsyncRetry", "coroutine")],
)
def test_fail_frees_the_retries_value_the_loop_reads(kind, design):
    expected = run_scenario("redis-py", kind, CALL_SCENARIO)
    assert run_scenario("c", kind, CALL_SCENARIO, design) == expected


# ---- regressions: the defects of the probe, each crashed before its fix --


def test_slot_names_list_emptied_while_a_slot_is_read():
    # csrc/slots.c held a borrowed item of the slot-names list across the
    # attribute read and the deepcopy.
    body = """
    class Name(str):
        pass
    class S(BASE):
        __slots__ = ("a",)
        def __getattribute__(self, name):
            if name == "a":
                S.__slotnames__.clear()   # the list held the last reference
                return 1
            return BASE.__getattribute__(self, name)
    for op in (copy.copy, copy.deepcopy, lambda o: o.__reduce_ex__(2)):
        S.__slotnames__ = [Name("a")]
        obj = S(*ARGS())
        report("op", lambda: op(obj))   # CPython's own reduce raises RuntimeError
    """
    for side in SIDES:
        for kind in ("Retry", "AsyncRetry", "ExponentialBackoff", "ConstantBackoff"):
            assert len(operations(run_scenario(side, kind, body))) == 3


def test_deadline_replaced_while_its_old_value_clears_the_extras(c_impl):
    # csrc/extras.c wrote deadline_seconds into the extras block that the
    # old deadline's __del__ had freed.
    body = """
    r = R.Retry(B.NoBackoff(), 1)
    class D(float):
        def __del__(self):
            r.deadline = None                       # frees the extras block
            junk.extend(fresh(i + 0.5) for i in range(8))   # and reuses it
    r.deadline = D(1.0)
    r.deadline = 2.0
    print(r.deadline, r.budget, r.stats)
    r.deadline = 3.0
    print(r.deadline)
    """
    assert run_scenario("c", "Retry", body, malloc=None)[:2] == ["None None None", "3.0"]


@pytest.mark.parametrize("collides_with", ["_backoff", "_retries", "deadline", "budget"])
def test_reduce_state_holds_the_fields_taken_before_any_key_compares(c_impl, collides_with):
    # __reduce__ held the extras block and the _retries value read before
    # inserting into a state dict whose key's __eq__ freed them.
    body = f"""
    class S(R.Retry):
        pass
    budget, stats = EXTRAS.RetryBudget(10, 0.1), EXTRAS.RetryStats()
    r = S(B.NoBackoff(), fresh_int(10**20 + 12345), deadline=1.5, budget=budget, stats=stats)
    class K:
        def __hash__(self):
            return hash({collides_with!r})
        def __eq__(self, other):
            r.deadline = r.budget = r.stats = None
            r._retries = 3
            junk.extend(fresh_int(10**20 + i) for i in range(64))
            junk.append(R.Retry(B.NoBackoff(), 1, deadline=5.0))
            return False
    r.__dict__[K()] = 1
    state = r.__reduce__()[2]
    print(state["_retries"], state.get("deadline"), state.get("budget") is budget,
          state.get("stats") is stats)
    """
    assert run_scenario("c", "Retry", body)[0] == f"{10**20 + 12345} 1.5 True True"


def test_old_retries_value_that_sets_retries_again():
    # store_retries wrote the C copy of _retries after the old value's
    # __del__ had set another: get_retries() said 5, the loop made 2
    # attempts.
    body = """
    r = R.Retry(B.NoBackoff(), 1)
    class N(int):
        def __del__(self):
            r._retries = 5
    r._retries = N(1)
    r.update_retries(1)
    attempts = []
    def do():
        attempts.append(1)
        raise Conn("down")
    report("call", lambda: r.call_with_retry(do, lambda error: None))
    print(r.get_retries(), len(attempts))
    """
    expected = run_scenario("redis-py", "Retry", body)
    assert expected[:2] == ["call raised ConnectionError", "5 6"]
    assert run_scenario("c", "Retry", body) == expected


def test_memo_key_whose_eq_frees_the_field_being_deep_copied():
    # deepcopy_field used the copy's field, borrowed, after looking it up
    # in the memo, where a colliding key's __eq__ had freed it.
    body = """
    class S(BASE):
        pass
    r = S(*ARGS())
    backoff_id = id(r._backoff)
    fired = []
    class K:
        def __hash__(self):
            return backoff_id   # the key the memo is asked for
        def __eq__(self, other):
            if not fired:
                fired.append(1)
                memo[id(r)]._backoff = None   # the copy's reference
                r._backoff = None             # and the original's
            return False
    memo = {K(): None}
    report("deepcopy", lambda: copy.deepcopy(r, memo))
    print(bool(fired))
    """
    for kind in RETRY_KINDS:
        lines = run_scenario("c", kind, body)
        assert lines[:2] == ["deepcopy ok", "True"]


def test_memo_key_whose_eq_frees_the_keep_alive_list():
    # memo_store appended to the memo's keep-alive list after giving up
    # its own reference to it; a colliding key's __eq__ had the memo drop it.
    body = """
    r = R.Retry(B.ExponentialBackoff(), 3)
    calls = []
    class D:
        def __del__(self):
            memo.pop(id(memo), None)         # the memo's reference to the list
    class K:
        def __hash__(self):
            return id(memo)                  # the keep-alive list's key
        def __eq__(self, other):
            calls.append(1)
            if len(calls) == 2:
                memo[id(memo)] = D()
            return False
    memo = {}
    memo[K()] = None
    copied = report("deepcopy", lambda: copy.deepcopy(r, memo))
    print(copied == r)
    """
    # How often a dict store compares with the colliding key (and so
    # whether D's entry is the one left in the memo for copy's own
    # _keep_alive) depends on the dict's internals: either side copies or
    # raises AttributeError, and survives (the previous code crashed here).
    for side in SIDES:
        assert len(operations(run_scenario(side, "Retry", body))) == 1


def test_stats_state_whose_float_empties_the_state(c_impl):
    # RetryStats.__setstate__ converted slept_seconds borrowed from the
    # state dict that its own __float__ emptied.
    body = """
    class F:
        def __float__(self):
            state.clear()   # the dict held the only other reference
            return 1        # not a float: the error names the type
    state = {"slept_seconds": F()}
    report("setstate", lambda: EXTRAS.RetryStats().__setstate__(state))
    state = {"slept_seconds": 2.5}
    stats = EXTRAS.RetryStats()
    stats.__setstate__(state)
    print(stats.snapshot()["slept_seconds"])
    """
    assert run_scenario("c", "Retry", body)[:2] == ["setstate raised TypeError", "2.5"]


@pytest.mark.parametrize("kind", RETRY_KINDS)
def test_deep_copied_retries_value_is_the_one_the_loop_uses(impl, kind):
    # The copy kept the original's C value of _retries beside the deep
    # copy's own object: get_retries() said 3, the loop made 2 attempts.
    import copy

    class Count(int):
        def __deepcopy__(self, memo):
            return Count(int(self) + 2)

    cls = impl.retry.Retry if kind == "Retry" else impl.asyncio_retry.Retry
    copied = copy.deepcopy(cls(impl.backoff.NoBackoff(), Count(1), (ValueError,)))
    assert copied.get_retries() == 3
    attempts = []

    def do():
        attempts.append(1)
        raise ValueError("down")

    if kind == "Retry":
        with pytest.raises(ValueError):
            copied.call_with_retry(do, lambda error: None)
    else:
        import asyncio

        async def ado():
            do()

        async def afail(error):
            pass

        with pytest.raises(ValueError):
            asyncio.run(copied.call_with_retry(ado, afail))
    assert len(attempts) == 4


def test_eq_reads_each_pair_when_the_comparison_reaches_it(impl):
    # == read every field before comparing the first pair; redis-py's
    # `and` reads each pair only when it gets there.
    class Backoff:
        def __eq__(self, other):
            target._retries = 99  # assigned by the first comparison
            return True

        __hash__ = object.__hash__

        def reset(self):
            pass

        def compute(self, failures):
            return 0

    first = impl.retry.Retry(Backoff(), 3)
    target = impl.retry.Retry(Backoff(), 3)
    assert (first == target) is False


def test_update_supported_errors_reads_the_errors_before_the_argument(impl):
    # The argument was iterated first, and the _supported_errors it
    # assigned were then joined; redis-py joins the ones it had.
    retry = impl.retry.Retry(impl.backoff.NoBackoff(), 1, (OSError,))

    def added():
        retry._supported_errors = (KeyError,)
        yield ValueError

    retry.update_supported_errors(added())
    assert sorted(c.__name__ for c in retry._supported_errors) == ["OSError", "ValueError"]
