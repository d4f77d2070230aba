"""Property-based differential test: random call_with_retry scenarios give
the same event sequence on redis-py's coroutine and on the C awaitable.

The Retry's own checker (redis-py 8.2), which a fail call may replace, is
drawn where redis-py has one to compare with; before 8.2 the scenarios leave
it out (the contract tests check the C side's checker there)."""

import pytest
from async_scenarios import ERRORS, Scenario, play
from hypothesis import HealthCheck, given, settings, strategies as st
from support import REDIS_PY_HAS_CHECKER

steps = st.sampled_from(["ok", "conn", "timeout", "sub", "foreign", "kbi"])
verdicts = st.lists(st.sampled_from([True, False, 1, 0, "raise"]), min_size=1, max_size=4).map(
    tuple
)

scenarios = st.builds(
    Scenario,
    script=st.lists(steps, min_size=1, max_size=8).map(tuple),
    retries=st.integers(-1, 4),
    is_retryable=st.none() | verdicts,
    with_failure_count=st.none() | st.booleans(),
    fail_raises_at=st.none() | st.integers(1, 4),
    delays=st.lists(st.sampled_from([0, 0.0, 0.5, 1, -1, 2.5]), min_size=1, max_size=3).map(tuple),
    do_kind=st.sampled_from(["coroutine", "object"]),
    fail_kind=st.sampled_from(["coroutine", "object", "none"]),
    backoff=st.sampled_from(["recording", "recording", "exponential", "none"]),
    own_checker=st.none() | verdicts if REDIS_PY_HAS_CHECKER else st.none(),
    fail_sets_checker_at=st.none() | st.integers(1, 3) if REDIS_PY_HAS_CHECKER else st.none(),
    new_checker=st.none() | verdicts,
    falsy_call_checker=st.booleans(),
)


# The fixtures are plain module namespaces, the same for every example.
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scenario=scenarios)
def test_random_scenarios_match_redis_py(reference, c_impl, scenario):
    with pytest.MonkeyPatch.context() as monkeypatch:
        theirs = play(reference, scenario, monkeypatch)
        ours = play(c_impl, scenario, monkeypatch)
    assert ours == theirs


def test_error_keys_are_known():
    assert set(ERRORS) >= {"conn", "timeout", "sub", "foreign", "kbi"}
