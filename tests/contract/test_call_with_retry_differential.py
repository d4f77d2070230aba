"""Differential property test: random call_with_retry scenarios, C vs
redis-py, on each Retry flavor (sync, asyncio).

Hypothesis draws the do() script, retries, is_retryable answers (the
call's, and the Retry's own checker's, which a fail call may replace),
with_failure_count, a raising fail, the backoff and its delays, and, for
the asyncio flavor, what kind of awaitable do and fail return; both sides
must record the same events (see scenarios.py), sleeps and outcome
included.

redis-py has the Retry's own checker from 8.2 on: before, the scenarios
leave it out (there is nothing to compare with; the contract tests check
the C side's checker there).
"""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scenarios import ERRORS, Scenario, play
from support import IMPLEMENTATIONS, REDIS_PY_HAS_CHECKER

steps = st.sampled_from(["ok"] + sorted(ERRORS))
retryable_errors = st.sampled_from(["conn", "timeout", "socket", "sub"])

verdicts = st.lists(st.sampled_from([True, False, 0, 1, "raise"])).map(tuple)
# The Retry's checker, and the fail call that replaces it (and with what):
# only where redis-py has one to compare with.
own_checkers = st.none() | verdicts if REDIS_PY_HAS_CHECKER else st.none()
replacing_fail = st.none() | st.integers(min_value=1, max_value=4)


def scenarios(flavor):
    """Scenarios for the Retry of `flavor`: the same draws for both, and
    the kinds of awaitable for the asyncio one."""
    kinds = {}
    if flavor.name == "asyncio":
        kinds = {
            "do_kind": st.sampled_from(["coroutine", "object"]),
            "fail_kind": st.sampled_from(["coroutine", "object", "none"]),
        }
    return st.builds(
        Scenario,
        script=st.lists(retryable_errors, max_size=8).flatmap(
            lambda head: st.tuples(*[st.just(s) for s in head], steps)
        ),
        retries=st.integers(min_value=-3, max_value=6),
        is_retryable=st.none() | verdicts,
        with_failure_count=st.sampled_from([None, False, True, 0, "yes"]),
        fail_raises_at=st.none() | st.integers(min_value=1, max_value=6),
        backoff=st.sampled_from(["recording", "constant", "none", "exponential", "jitter"]),
        delays=st.lists(
            st.sampled_from([0, 0.0, -1, 0.5, 1, 2, 2.5, 1e-9]), min_size=1, max_size=3
        ).map(tuple),
        own_checker=own_checkers,
        fail_sets_checker_at=replacing_fail if REDIS_PY_HAS_CHECKER else st.none(),
        new_checker=st.none() | verdicts,
        falsy_call_checker=st.booleans(),
        **kinds,
    )


# The flavor fixture is a plain object, the same for every example.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), seed=st.integers(min_value=0, max_value=2**32))
def test_same_events_on_both_sides(flavor, data, seed):
    scenario = data.draw(scenarios(flavor), label="scenario")
    with pytest.MonkeyPatch.context() as patch:
        expected = play(flavor, IMPLEMENTATIONS["redis-py"], scenario, patch, seed=seed)
    with pytest.MonkeyPatch.context() as patch:
        actual = play(flavor, IMPLEMENTATIONS["c"], scenario, patch, seed=seed)
    assert actual == expected


def test_error_keys_are_known():
    assert set(ERRORS) >= {"conn", "timeout", "socket", "sub", "foreign", "kbi", "exit"}
