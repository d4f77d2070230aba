"""call_with_retry's event sequences, both Retry flavors alike.

Each scenario (see scenarios.py) is played on the sync and on the asyncio
Retry (`flavor`); on each flavor, redis-py and the C type must record the
very same events, sleeps and outcome included.  The sequences spelled out
below are checked over flavor x implementation.  What only the asyncio
Retry has (awaitable kinds, event loops, futures, cancellation) is in
test_async_retry.py.
"""

import itertools

import pytest
from scenarios import Scenario, ScriptExhausted, play
from support import IMPLEMENTATIONS, REDIS_PY_HAS_CHECKER, side_without_checker


def both_sides_agree(flavor, monkeypatch, scenario):
    """Play the scenario on both sides; return redis-py's events after
    checking the C side recorded the very same ones.  A scenario with the
    Retry's own checker, under a redis-py without one (before 8.2),
    is played on the C side alone, which must end the call."""
    if scenario.needs_checker and not REDIS_PY_HAS_CHECKER:
        actual = play(flavor, IMPLEMENTATIONS["c"], scenario, monkeypatch)
        assert actual[-1][0] in ("return", "raise"), scenario
        return actual
    expected = play(flavor, IMPLEMENTATIONS["redis-py"], scenario, monkeypatch)
    actual = play(flavor, IMPLEMENTATIONS["c"], scenario, monkeypatch)
    assert actual == expected, scenario
    return expected


def spelled_out(flavor, impl, monkeypatch, scenario):
    """The events of `scenario` on `impl`, for a test that spells them out;
    None where redis-py has no checker and the scenario needs one (the
    test has nothing to check on that side)."""
    if scenario.needs_checker and side_without_checker(impl):
        return None
    return play(flavor, impl, scenario, monkeypatch)


def error(kind, number):
    """A do() error as the events describe it: (type name, message)."""
    names = {"conn": "ConnectionError", "timeout": "TimeoutError", "socket": "TimeoutError"}
    return (names[kind], f"{kind} #{number}")


# ---- the full event sequence, both sides, each flavor ----

SCRIPTS = [
    ("ok",),
    ("conn", "ok"),
    ("conn", "timeout", "socket", "ok"),
    ("sub", "conn", "sub", "conn", "ok"),
    ("conn",) * 5 + ("ok",),
    ("conn",) * 7 + ("foreign",),
    ("foreign",),
    ("conn", "foreign"),
    ("kbi",),
    ("conn", "kbi"),
    ("timeout", "exit"),
]
IS_RETRYABLE = [None, (True,) * 8, (False,), (True, False), (True, 0, True), (1, "raise")]
FAIL_RAISES = [None, 1, 2]
BACKOFFS = [
    ("recording", (0.25,)),
    ("recording", (0, 0.5, -1)),  # a delay <= 0 is not slept
    ("constant", (0.125,)),
    ("none", (0,)),
    ("exponential", (0,)),
    ("jitter", (0,)),
]


@pytest.mark.parametrize("retries", [-1, 0, 1, 3])
@pytest.mark.parametrize("script", SCRIPTS, ids="-".join)
def test_call_with_retry_same_events(flavor, monkeypatch, retries, script):
    """Every combination of is_retryable, with_failure_count, a raising
    fail and backoff, for this script and retry count."""
    for is_retryable, with_count, fail_raises, (backoff, delays) in itertools.product(
        IS_RETRYABLE, [None, False, True], FAIL_RAISES, BACKOFFS
    ):
        scenario = Scenario(
            script=script,
            retries=retries,
            is_retryable=is_retryable,
            with_failure_count=with_count,
            fail_raises_at=fail_raises,
            backoff=backoff,
            delays=delays,
        )
        events = both_sides_agree(flavor, monkeypatch, scenario)
        assert events[-1][0] in ("return", "raise")
        assert "ScriptExhausted" not in str(events[-1])


def test_event_sequence_spelled_out(flavor, impl, monkeypatch):
    """One sequence spelled out, so the comparisons compare the right
    thing: reset once, do, is_retryable, fail, compute, sleep (a delay of
    0 is not slept), ..."""
    events = spelled_out(
        flavor,
        impl,
        monkeypatch,
        Scenario(
            script=("conn", "timeout", "ok"),
            retries=3,
            is_retryable=(True, True),
            with_failure_count=True,
            delays=(0.25, 0),
        ),
    )
    conn, timeout = error("conn", 1), error("timeout", 2)
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("is_retryable", conn, True),
        ("fail", conn, True, 1),
        ("compute", "backoff", 1),
        ("sleep", 0.25),
        ("do", "timeout"),
        ("is_retryable", timeout, True),
        ("fail", timeout, True, 2),
        ("compute", "backoff", 2),
        ("do", "ok"),
        ("return", "result #3"),
    ]


def test_event_sequence_without_is_retryable(flavor, impl, monkeypatch):
    events = spelled_out(
        flavor, impl, monkeypatch, Scenario(("conn", "timeout", "ok"), with_failure_count=True)
    )
    conn, timeout = error("conn", 1), error("timeout", 2)
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("fail", conn, True, 1),
        ("compute", "backoff", 1),
        ("sleep", 0.25),
        ("do", "timeout"),
        ("fail", timeout, True, 2),
        ("compute", "backoff", 2),
        ("sleep", 0.25),
        ("do", "ok"),
        ("return", "result #3"),
    ]


def test_retries_exhausted_raises_the_last_error_itself(flavor, monkeypatch):
    events = both_sides_agree(flavor, monkeypatch, Scenario(script=("conn",) * 3, retries=1))
    assert events[-1] == ("raise", error("conn", 2), True, None, False)
    assert [e[0] for e in events].count("fail") == 2
    assert [e[0] for e in events].count("compute") == 1


def test_retries_zero_fails_once_and_never_computes(flavor, monkeypatch):
    events = both_sides_agree(flavor, monkeypatch, Scenario(script=("conn",), retries=0))
    assert [e[0] for e in events] == ["reset", "do", "fail", "raise"]


def test_retries_negative_retries_until_success(flavor, monkeypatch):
    scenario = Scenario(script=("conn",) * 50 + ("ok",), retries=-1)
    events = both_sides_agree(flavor, monkeypatch, scenario)
    assert events[-1] == ("return", "result #51")
    assert [e for e in events if e[0] == "compute"][-1] == ("compute", "backoff", 50)


def test_foreign_error_and_keyboard_interrupt_pass_untouched(flavor, monkeypatch):
    for kind in ("foreign", "kbi", "exit"):
        events = both_sides_agree(flavor, monkeypatch, Scenario(script=(kind,)))
        assert [e[0] for e in events] == ["reset", "do", "raise"]  # fail not called
        assert events[-1][2] is True and events[-1][3] is None  # same object, no context


def test_script_guard_is_real(flavor, monkeypatch):
    """A runaway loop shows up as ScriptExhausted rather than hanging."""
    events = both_sides_agree(flavor, monkeypatch, Scenario(script=("conn",) * 2, retries=-1))
    assert events[-1][1][0] == ScriptExhausted.__name__


def test_fail_raising_has_the_error_as_context(flavor, impl, monkeypatch):
    events = spelled_out(flavor, impl, monkeypatch, Scenario(("conn", "ok"), fail_raises_at=1))
    assert events[-1] == ("raise", ("FailError", "fail #1"), False, error("conn", 1), True)


# ---- the Retry's own checker: redis-py 8.2's is_retryable ----
#
# On redis-py 8.2 every comparison here compares the two sides; before 8.2
# the redis-py side has no checker (side_without_checker checks that), and
# the C side, which takes one whatever redis-py is installed, is checked
# against the sequences spelled out.

CHECKER_SCRIPTS = [
    ("conn", "ok"),
    ("conn", "timeout", "socket", "ok"),
    ("conn",) * 5,
    ("foreign",),
    ("conn", "foreign"),
    ("sub", "kbi"),
]
OWN_CHECKERS = [(False,), (True, False), (True, True, 0), (True, "raise"), ([],), (True,) * 8]
CALL_CHECKERS = [None, (True,) * 8, (False,), (True, False)]


@pytest.mark.parametrize("retries", [0, 3])
@pytest.mark.parametrize("script", CHECKER_SCRIPTS, ids="-".join)
def test_own_checker_same_events(flavor, monkeypatch, retries, script):
    """Every combination of the Retry's checker with the call's, a failure
    count, a raising fail and the backoff, for this script."""
    for own, call_checker, with_count, fail_raises, (backoff, delays) in itertools.product(
        OWN_CHECKERS, CALL_CHECKERS, [None, False, True], [None, 1, 2], BACKOFFS[:3]
    ):
        scenario = Scenario(
            script=script,
            retries=retries,
            own_checker=own,
            is_retryable=call_checker,
            with_failure_count=with_count,
            fail_raises_at=fail_raises,
            backoff=backoff,
            delays=delays,
        )
        events = both_sides_agree(flavor, monkeypatch, scenario)
        assert "ScriptExhausted" not in str(events[-1])


@pytest.mark.parametrize("new_checker", [None, (False,), (True, False), ("raise",)])
@pytest.mark.parametrize("own", [None, (True,) * 8, (True, False)])
@pytest.mark.parametrize("fail_raises", [None, 1, 2])
def test_fail_that_replaces_the_checker(flavor, monkeypatch, new_checker, own, fail_raises):
    """fail() sets retry.is_retryable: the next error meets the new one
    (the checker is read when each error is handled)."""
    for at, with_count in itertools.product([1, 2], [None, True]):
        scenario = Scenario(
            script=("conn", "timeout", "conn", "ok"),
            own_checker=own,
            fail_sets_checker_at=at,
            new_checker=new_checker,
            with_failure_count=with_count,
            fail_raises_at=fail_raises,
        )
        both_sides_agree(flavor, monkeypatch, scenario)


def test_rejection_spelled_out(flavor, impl, monkeypatch):
    """The checker says no to the second error: fail gets the count it
    would have had, the call's is_retryable is not asked, nothing is
    computed, and the error itself is raised, without a context."""
    events = spelled_out(
        flavor,
        impl,
        monkeypatch,
        Scenario(
            script=("conn", "timeout", "ok"),
            own_checker=(True, False),
            is_retryable=(True, True),
            with_failure_count=True,
        ),
    )
    if events is None:
        return
    conn, timeout = error("conn", 1), error("timeout", 2)
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("own_checker", conn, True),
        ("is_retryable", conn, True),
        ("fail", conn, True, 1),
        ("compute", "backoff", 1),
        ("sleep", 0.25),
        ("do", "timeout"),
        ("own_checker", timeout, True),
        ("fail", timeout, True, 2),
        ("raise", timeout, True, None, False),
    ]


def test_rejection_without_failure_count_and_raising_fail(flavor, impl, monkeypatch):
    events = spelled_out(
        flavor, impl, monkeypatch, Scenario(script=("conn", "ok"), own_checker=(False,))
    )
    if events is None:
        return
    conn = error("conn", 1)
    assert events == [
        ("reset", "backoff"),
        ("do", "conn"),
        ("own_checker", conn, True),
        ("fail", conn, True),
        ("raise", conn, True, None, False),
    ]
    events = spelled_out(
        flavor,
        impl,
        monkeypatch,
        Scenario(script=("conn", "ok"), own_checker=(False,), fail_raises_at=1),
    )
    assert events[-3:] == [
        ("own_checker", conn, True),
        ("fail", conn, True),
        ("raise", ("FailError", "fail #1"), False, conn, True),
    ]


def test_checker_not_asked_about_foreign_errors(flavor, monkeypatch):
    scenario = Scenario(script=("foreign",), own_checker=(False,))
    events = both_sides_agree(flavor, monkeypatch, scenario)
    assert [e[0] for e in events] == ["reset", "do", "raise"]


def test_checker_raising_has_the_error_as_context(flavor, monkeypatch):
    events = both_sides_agree(
        flavor,
        monkeypatch,
        Scenario(script=("conn", "ok"), own_checker=("raise",), is_retryable=(True,)),
    )
    assert events[-2:] == [
        ("own_checker", error("conn", 1), True),
        ("raise", ("RetryableError", "own_checker"), False, error("conn", 1), True),
    ]


def test_checker_set_to_none_by_fail(flavor, monkeypatch):
    events = both_sides_agree(
        flavor,
        monkeypatch,
        Scenario(
            script=("conn", "conn", "ok"),
            own_checker=(True, False),
            fail_sets_checker_at=1,
            new_checker=None,
        ),
    )
    assert [e[0] for e in events].count("own_checker") == 1
    assert events[-1] == ("return", "result #3")


def test_checker_set_by_fail_after_a_rejection(flavor, monkeypatch):
    """fail runs before the rejected error is raised: what it sets is there
    for the next call_with_retry."""
    events = both_sides_agree(
        flavor,
        monkeypatch,
        Scenario(
            script=("conn", "ok"),
            own_checker=(False,),
            fail_sets_checker_at=1,
            new_checker=(True,),
        ),
    )
    assert events[-1] == ("raise", error("conn", 1), True, None, False)


def test_call_checker_rule_follows_redis_py(flavor, impl, monkeypatch):
    """A call-time is_retryable that is false as a truth value: redis-py 8.2
    calls it (`is not None`), 8.0 and 8.1 skip it (`is_retryable and`).
    Both sides follow the redis-py installed."""
    scenario = Scenario(script=("conn", "ok"), is_retryable=(False,), falsy_call_checker=True)
    events = spelled_out(flavor, impl, monkeypatch, scenario)
    conn = error("conn", 1)
    if REDIS_PY_HAS_CHECKER:
        assert events[-2:] == [("is_retryable", conn, True), ("raise", conn, True, None, False)]
    else:
        assert "is_retryable" not in [e[0] for e in events]
        assert events[-1] == ("return", "result #2")
