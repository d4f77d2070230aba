"""Property-based differential test: random call_with_retry scenarios give
the same event sequence on redis-py's coroutine and on the C awaitable."""

import pytest
from async_scenarios import ERRORS, Scenario, play
from hypothesis import HealthCheck, given, settings, strategies as st

steps = st.sampled_from(["ok", "conn", "timeout", "sub", "foreign", "kbi"])

scenarios = st.builds(
    Scenario,
    script=st.lists(steps, min_size=1, max_size=8).map(tuple),
    retries=st.integers(-1, 4),
    is_retryable=st.none()
    | st.lists(st.sampled_from([True, False, 1, 0, "raise"]), min_size=1, max_size=4).map(tuple),
    with_failure_count=st.none() | st.booleans(),
    fail_raises_at=st.none() | st.integers(1, 4),
    delays=st.lists(st.sampled_from([0, 0.0, 0.5, 1, -1, 2.5]), min_size=1, max_size=3).map(tuple),
    do_kind=st.sampled_from(["coroutine", "object"]),
    fail_kind=st.sampled_from(["coroutine", "object", "none"]),
    backoff=st.sampled_from(["recording", "recording", "exponential", "none"]),
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
