"""python -m redis_backoff_c.plan and its API (our own feature).

The closed forms are checked against brute force: the same strategy objects
(redis-py's and ours, through the `impl` fixture) run `compute(1..R)` many
times from a seeded source, and every exact figure must agree with that
sample within the tolerance each test states.  Everything is seeded, so a
run is reproducible; nothing here times anything (the speed targets are
measured and reported, not asserted).
"""

import bisect
import inspect
import json
import math
import os
import random
import statistics
import subprocess
import sys

import pytest
import redis
import redis.backoff
import redis.retry
from support import IMPLEMENTATIONS

import redis_backoff_c
from redis_backoff_c import plan
from redis_backoff_c.plan import _cli
from redis_backoff_c.plan._laws import laws_for
from redis_backoff_c.plan._policy import known_kind, parameters
from redis_backoff_c.plan._stats import quantile

BRUTE = 20_000  # brute-force runs per check
SAMPLES = 20_000  # describe()'s own samples where it samples

# (strategy, kwargs): parameters below, across and past the cap.
CLOSED = [
    ("ConstantBackoff", {"backoff": 0.25}),
    ("NoBackoff", {}),
    ("ExponentialBackoff", {}),
    ("ExponentialBackoff", {"cap": 1, "base": 0.01}),
    ("FullJitterBackoff", {}),
    ("FullJitterBackoff", {"cap": 2.0, "base": 0.05}),
    ("EqualJitterBackoff", {}),
    ("EqualJitterBackoff", {"cap": 0.3, "base": 0.02}),
    ("ExponentialWithJitterBackoff", {}),
    ("ExponentialWithJitterBackoff", {"cap": 1, "base": 0.01}),
    ("ExponentialWithJitterBackoff", {"cap": 0.05, "base": 0.04}),
]
RETRIES = 10


def make_retry(impl, name, kwargs, retries=RETRIES):
    return impl.retry.Retry(getattr(impl.backoff, name)(**kwargs), retries)


def brute_force(strategy, failures, runs=BRUTE, seed=7):
    """runs x (reset(); compute(1..failures)), drawn from a seeded random
    module and fast source: the ground truth the closed forms must match."""
    random.seed(seed)
    if redis_backoff_c.IMPLEMENTATION == "c":
        redis_backoff_c.set_random_source("fast", seed=seed)
    try:
        rows = []
        for _ in range(runs):
            strategy.reset()
            rows.append([strategy.compute(n) for n in range(1, failures + 1)])
    finally:
        redis_backoff_c.set_random_source("python")
    return rows


def agree(exact, sample, spread):
    """An exact mean against a sample's: within 6 standard errors (a
    seeded sample, so a pass or a failure is reproducible), plus rounding."""
    tolerance = 6 * spread / math.sqrt(len(sample)) + 1e-12
    return abs(exact - statistics.fmean(sample)) <= tolerance


# -- closed forms against brute force ------------------------------------


@pytest.mark.parametrize(("name", "kwargs"), CLOSED, ids=lambda v: str(v))
def test_closed_forms_match_brute_force_per_failure(impl, name, kwargs):
    retry = make_retry(impl, name, kwargs)
    result = plan.describe(retry, samples=SAMPLES, seed=1)
    rows = brute_force(getattr(impl.backoff, name)(**kwargs), RETRIES)
    strategy = retry._backoff
    laws = laws_for(name, parameters(strategy, known_kind(strategy)), RETRIES)
    assert [entry.failure for entry in result.per_failure] == list(range(1, RETRIES + 1))
    for entry, column in zip(result.per_failure, zip(*rows)):
        figures, column = entry.delay, sorted(column)
        # Every per-failure figure of these strategies is exact.
        assert figures.exact == frozenset(plan._stats.FIELDS)
        width = figures.max - figures.min
        law = laws[entry.failure - 1]
        # Every draw lies in [min, max], and those are the law's 0- and
        # 1-quantiles (tight bounds, checked below against the sample).
        assert figures.min <= column[0] and column[-1] <= figures.max
        assert (law.quantile(0.0), law.quantile(1.0)) == (figures.min, figures.max)
        assert agree(figures.mean, column, statistics.pstdev(column))
        assert (figures.p50, figures.p99) == (law.quantile(0.5), law.quantile(0.99))
        # The whole law: Kolmogorov-Smirnov distance between the sample's
        # CDF and the exact one, on a grid of 401 points, under the critical
        # value at level 1e-4, sqrt(-ln(0.5e-4) / 2) / sqrt(N) = 2.23 / sqrt(N)
        # (some 400 columns are checked; a wrong law is off by far more).
        grid = [figures.min + width * i / 400 for i in range(401)]
        distance = max(
            abs(bisect.bisect_right(column, t) / len(column) - cdf(law, t)) for t in grid
        )
        assert distance <= 2.23 / math.sqrt(len(column)), (distance, entry)


def cdf(law, t):
    """P(delay <= t) under the law: written from the formulas, apart from
    the planner's quantile code."""
    if law.kind == "point":
        return 1.0 if t >= law.low else 0.0
    if law.kind == "uniform":
        return min(1.0, max(0.0, (t - law.low) / (law.high - law.low)))
    assert law.kind == "capped_uniform"
    return 1.0 if t >= law.cap else max(0.0, t / law.scale)


@pytest.mark.parametrize(("name", "kwargs"), CLOSED, ids=lambda v: str(v))
def test_closed_form_totals_match_brute_force(impl, name, kwargs):
    attempt_time = 0.05
    retry = make_retry(impl, name, kwargs)
    result = plan.describe(retry, attempt_time=attempt_time, samples=SAMPLES, seed=2)
    offset = (RETRIES + 1) * attempt_time
    totals = sorted(offset + sum(row) for row in brute_force(retry._backoff, RETRIES, seed=3))
    total = result.total
    assert {"min", "mean", "max"} <= total.exact
    assert total.min <= totals[0] and totals[-1] <= total.max + 1e-9
    assert agree(total.mean, totals, statistics.pstdev(totals))
    # p50/p99 of a sum are sampled (exact only when the sum is a constant):
    # two independent 20,000-draw samples agree to 2% of the spread.
    width = total.max - total.min
    for q, figure in ((0.5, total.p50), (0.99, total.p99)):
        assert abs(quantile(totals, q) - figure) <= 0.02 * width + 1e-9
    if width == 0:
        assert total.exact == frozenset(plan._stats.FIELDS)


def test_exponential_with_jitter_mean_past_the_cap(impl):
    """min(cap, U*x) has mean x/2 for x <= cap, cap - cap**2/(2x) past it."""
    cap, base = 1.0, 0.01
    result = plan.describe(
        make_retry(impl, "ExponentialWithJitterBackoff", {"cap": cap, "base": base})
    )
    for entry in result.per_failure:
        x = base * 2**entry.failure
        expected = x / 2 if x <= cap else cap - cap**2 / (2 * x)
        assert entry.delay.mean == pytest.approx(expected, rel=1e-12)
        assert entry.delay.max == min(cap, x)
        assert entry.delay.p99 == pytest.approx(min(cap, 0.99 * x), rel=1e-12)


def test_deterministic_policies_are_exact_and_unsampled(impl):
    retry = impl.retry.Retry(impl.backoff.ExponentialBackoff(cap=1, base=0.01), 10)
    result = plan.describe(retry, attempt_time=0.5)
    expected = 11 * 0.5 + sum(min(1, 0.01 * 2**n) for n in range(1, 11))
    assert result.samples == 0
    assert result.total.exact == frozenset(plan._stats.FIELDS)
    for name in plan._stats.FIELDS:
        assert getattr(result.total, name) == pytest.approx(expected, rel=1e-12)


def test_decorrelated_jitter_is_sampled_within_exact_bounds(impl):
    strategy = impl.backoff.DecorrelatedJitterBackoff(cap=1, base=0.01)
    result = plan.describe(impl.retry.Retry(strategy, 8), samples=SAMPLES, seed=4)
    rows = brute_force(impl.backoff.DecorrelatedJitterBackoff(cap=1, base=0.01), 8)
    high = 0.0
    for entry, column in zip(result.per_failure, zip(*rows)):
        high = min(1, max(0.01, 3 * high))
        assert (entry.delay.min, entry.delay.max) == (0.01, high)
        assert {"min", "max"} <= entry.delay.exact
        assert min(column) >= entry.delay.min and max(column) <= entry.delay.max
        if entry.failure > 1:
            assert "mean" not in entry.delay.exact
            assert agree(entry.delay.mean, column, 2 * statistics.pstdev(column))
    totals = [sum(row) for row in rows]
    assert result.total.min <= min(totals) and max(totals) <= result.total.max
    assert agree(result.total.mean, totals, 2 * statistics.pstdev(totals))


def test_decorrelated_jitter_state_of_the_users_object_is_untouched(impl):
    strategy = impl.backoff.DecorrelatedJitterBackoff()
    strategy._previous_backoff = 0.123
    plan.describe(impl.retry.Retry(strategy, 5), samples=1000, seed=1)
    assert strategy._previous_backoff == 0.123


# -- what describe() samples, and how ------------------------------------


class Counting(redis.backoff.AbstractBackoff):
    """A user's own strategy: 0.1 s times the failure count."""

    def __init__(self):
        self.calls = 0
        self.resets = 0

    def reset(self):
        self.resets += 1

    def compute(self, failures):
        self.calls += 1
        return 0.1 * failures

    def __deepcopy__(self, memo):
        return self  # so the test can count the calls on this object


def test_user_strategy_is_sampled_through_its_compute(impl):
    strategy = Counting()
    result = plan.describe(impl.retry.Retry(strategy, 4), samples=500, seed=1)
    assert strategy.calls == 500 * 4 and strategy.resets == 500
    assert [e.delay.mean for e in result.per_failure] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert result.total.max == pytest.approx(1.0)
    assert result.total.exact == frozenset()  # sampled, though it is a constant


def test_subclass_overriding_compute_is_not_taken_for_its_base(impl):
    class Halved(impl.backoff.ExponentialBackoff):
        def compute(self, failures):
            return super().compute(failures) / 2

    result = plan.describe(impl.retry.Retry(Halved(cap=1, base=0.01), 3), samples=100)
    assert [e.delay.max for e in result.per_failure] == pytest.approx([0.01, 0.02, 0.04])


def test_negative_and_odd_parameters_are_sampled_not_closed(impl):
    retry = impl.retry.Retry(impl.backoff.ConstantBackoff(-1), 3)
    result = plan.describe(retry, attempt_time=0.5, samples=50)
    assert result.per_failure[0].delay.mean == -1  # what compute returns ...
    assert result.total.max == 2.0  # ... but a delay <= 0 is not slept


def test_seeded_describe_is_reproducible_and_leaves_the_sources_alone(impl):
    retry = make_retry(impl, "DecorrelatedJitterBackoff", {})
    random.seed(99)
    state = random.getstate()
    first = plan.describe(retry, samples=2000, seed=5)
    assert random.getstate() == state
    assert redis_backoff_c.get_random_source() == "python"
    assert plan.describe(retry, samples=2000, seed=5) == first
    assert plan.describe(retry, samples=2000, seed=6) != first


def test_our_strategies_sample_from_the_fast_source(c_impl, monkeypatch):
    """Ours draw from the seeded fast source: the random module is not used."""
    calls = []
    monkeypatch.setattr(random, "random", lambda: calls.append(1) or 0.5)
    retry = c_impl.retry.Retry(c_impl.backoff.DecorrelatedJitterBackoff(), 5)
    plan.describe(retry, samples=1000, seed=1)
    assert calls == []


def test_retry_forever_is_described_to_the_horizon(impl):
    retry = make_retry(impl, "FullJitterBackoff", {}, retries=-1)
    result = plan.describe(retry, samples=1000, seed=1, horizon=7)
    assert result.failures == 7 and len(result.per_failure) == 7
    assert any("forever" in note for note in result.notes)


def test_zero_retries(impl):
    result = plan.describe(make_retry(impl, "FullJitterBackoff", {}, retries=0), attempt_time=2)
    assert result.per_failure == ()
    assert result.total.max == result.total.p99 == 2.0


def test_deadline_truncates_the_total(impl):
    """ConstantBackoff(1), attempts of 0.25 s: attempts run 0-0.25, 1.25-1.5,
    2.5-2.75, ...  With a deadline of 2.4 s the sleep after the second
    (1.5 + 1 >= 2.4) would reach it: the call gives up at 1.5 s.  With 2.6 s
    the third attempt starts before the deadline (2.5) and ends past it
    (2.75); the call gives up then."""
    retry = make_retry(impl, "ConstantBackoff", {"backoff": 1}, retries=5)
    result = plan.describe(retry, attempt_time=0.25, deadline=2.4)
    assert result.total.max == result.total.p50 == 1.5
    assert plan.describe(retry, attempt_time=0.25, deadline=2.6).total.max == 2.75
    assert plan.describe(retry, attempt_time=0.25).total.max == 6 * 0.25 + 5


def test_deadline_of_a_retry_that_has_one_is_read():
    """Once Retry(deadline=...) exists its value is used; a stand-in here."""

    class WithDeadline(redis.retry.Retry):
        deadline = 2.4

    retry = WithDeadline(redis.backoff.ConstantBackoff(1), 5)
    result = plan.describe(retry, attempt_time=0.25)
    assert result.deadline == 2.4 and result.total.max == 1.5
    assert "deadline=2.4" in result.policy


def test_deadline_with_jitter_is_sampled(impl):
    retry = make_retry(impl, "FullJitterBackoff", {"cap": 1, "base": 0.1})
    result = plan.describe(retry, deadline=1.0, samples=5000, seed=1)
    assert result.total.exact == frozenset()
    assert 0 <= result.total.min <= result.total.max < 1.0


def test_asyncio_retry_is_described(impl):
    retry = impl.asyncio_retry.Retry(impl.backoff.ExponentialBackoff(), 3)
    assert plan.describe(retry).total.max == pytest.approx(0.016 + 0.032 + 0.064)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"attempt_time": -1}, ValueError),
        ({"attempt_time": "1"}, TypeError),
        ({"samples": 0}, ValueError),
        ({"horizon": -1}, ValueError),
        ({"deadline": 0}, ValueError),
    ],
)
def test_bad_arguments(kwargs, error):
    retry = redis.retry.Retry(redis.backoff.FullJitterBackoff(), 3)
    with pytest.raises(error):
        plan.describe(retry, **kwargs)
    with pytest.raises(TypeError, match="retry"):
        plan.describe(object())


def test_too_much_work_is_refused_not_run():
    retry = redis.retry.Retry(redis.backoff.FullJitterBackoff(), 10**4)
    with pytest.raises(ValueError, match="draws"):
        plan.describe(retry)
    retry = redis.retry.Retry(redis.backoff.ExponentialBackoff(), 10**12)
    with pytest.raises(ValueError, match="failures"):
        plan.describe(retry)


# -- the POLICY parser ----------------------------------------------------


def test_policy_builds_the_package_objects():
    retry = plan.parse_policy("Retry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10)")
    assert isinstance(retry, redis_backoff_c.Retry)
    assert retry == redis.retry.Retry(redis.backoff.ExponentialWithJitterBackoff(1, 0.01), 10)
    assert plan.parse_policy("Retry(NoBackoff(), -1)").get_retries() == -1
    assert plan.parse_policy(" Retry(default_backoff(), +3) ")._retries == 3


HOSTILE = [
    "__import__('os').system('touch {marker}')",
    "open('{marker}', 'w')",
    "Retry(ExponentialBackoff(cap=open('{marker}', 'w')), 3)",
    "Retry(ConstantBackoff(0), 3).__class__",
    "Retry(ConstantBackoff(x), 3)",
    "Retry(ConstantBackoff('{marker}'), 3)",
    "Retry(ConstantBackoff(1 + 1), 3)",
    "Retry(ConstantBackoff((lambda: 0)()), 3)",
    "Retry(ConstantBackoff([0][0]), 3)",
    "Retry(*[ConstantBackoff(0), 3])",
    "Retry(**{{'backoff': NoBackoff(), 'retries': 3}})",
    "Retry(ConstantBackoff(-open), 3)",
    "Retry(ConstantBackoff(True), 3)",
    "redis_backoff_c.Retry(NoBackoff(), 3)",
    "[Retry(NoBackoff(), 3) for _ in ()]",
    "Retry(NoBackoff(), 3); import os",
    "x := Retry(NoBackoff(), 3)",
    "(" * 200 + "1" + ")" * 200,
    "Retry(" * 5000 + ")" * 5000,
    "Retry(NoBackoff(), 3)" + " " * 3000,
    "ExponentialBackoff()",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_policies_are_rejected_unevaluated(text, tmp_path):
    marker = tmp_path / "evaluated"
    with pytest.raises(plan.PolicyError):
        plan.parse_policy(text.format(marker=marker))
    assert not marker.exists()


def test_rejection_names_what_is_not_allowed():
    with pytest.raises(plan.PolicyError, match="__import__.*not one of the package's constructors"):
        plan.parse_policy("__import__('os')")
    with pytest.raises(plan.PolicyError, match="must be a Retry"):
        plan.parse_policy("ExponentialBackoff()")
    with pytest.raises(plan.PolicyError, match="cap"):
        plan.parse_policy("Retry(ExponentialBackoff(cap=None), 3)")


def run_command(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-I", "-m", "redis_backoff_c.plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def test_command_rejects_a_hostile_policy(tmp_path):
    marker = tmp_path / "evaluated"
    done = run_command(f"__import__('os').system('touch {marker}')")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "POLICY rejected" in done.stderr and "__import__" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()


# -- the command: table, verdict, JSON, plot -----------------------------


def test_command_prints_table_and_verdict(capsys):
    assert _cli.main(["Retry(FullJitterBackoff(cap=1, base=0.01), 4)", "--samples", "2000"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "policy: Retry(FullJitterBackoff(cap=1, base=0.01), 4)"
    assert lines[2].split() == ["failure", "min", "mean", "max", "p50", "p99"]
    assert [line.split()[0] for line in lines[3:8]] == ["1", "2", "3", "4", "total"]
    verdict = [line for line in lines if line.startswith("verdict: ")]
    assert len(verdict) == 1
    assert "at most 300 ms" in verdict[0] and "typically" in verdict[0] and "p99" in verdict[0]


def test_json_follows_the_schema(tmp_path):
    path = tmp_path / "plan.json"
    code = _cli.main(
        [
            "Retry(EqualJitterBackoff(), 3)",
            "--attempt-time",
            "0.5",
            "--json",
            str(path),
            "--samples",
            "1000",
            "--seed",
            "1",
        ]
    )
    assert code == 0
    data = json.loads(path.read_text())
    assert set(data) == {"policy", "attempt_time", "per_failure", "total"}
    assert data["policy"] == "Retry(EqualJitterBackoff(cap=0.512, base=0.008), 3)"
    assert data["attempt_time"] == 0.5
    assert [set(e) for e in data["per_failure"]] == [
        {"failure", "min", "mean", "max", "p50", "p99"}
    ] * 3
    assert [e["failure"] for e in data["per_failure"]] == [1, 2, 3]
    assert set(data["total"]) == {"min", "mean", "max", "p50", "p99"}
    assert all(isinstance(v, float) for v in data["total"].values())
    assert data["total"]["max"] == pytest.approx(4 * 0.5 + 0.016 + 0.032 + 0.064)


def test_json_of_compare_is_a_list(tmp_path):
    path = tmp_path / "plan.json"
    args = ["Retry(NoBackoff(), 2)", "--compare", "Retry(ConstantBackoff(1), 2)"]
    assert _cli.main([*args, "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert [d["total"]["max"] for d in data] == [0.0, 2.0]


def test_redis_defaults_are_read_from_redis_py(capsys, tmp_path):
    path = tmp_path / "defaults.json"
    assert _cli.main(["--redis-defaults", "--samples", "2000", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    parameters = inspect.signature(redis.Redis.__init__).parameters
    retry = parameters["retry"].default
    connect = parameters["socket_connect_timeout"].default
    policy = plan._policy.describe_policy(retry)
    assert f"redis-py {redis.__version__} redis.Redis defaults: retry={policy}" in out
    refused, unreachable = json.loads(path.read_text())
    assert refused["policy"] == unreachable["policy"] == policy
    assert (refused["attempt_time"], unreachable["attempt_time"]) == (0.0, connect)
    expected = plan.describe(retry, samples=2000)
    assert refused["total"]["max"] == expected.total.max
    assert unreachable["total"]["max"] == pytest.approx(
        expected.total.max + (retry.get_retries() + 1) * connect
    )


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")  # in the test extra: never skipped by scripts/test.sh
    path = tmp_path / "plan.png"
    args = ["Retry(DecorrelatedJitterBackoff(), 4)", "--compare", "Retry(NoBackoff(), 2)"]
    assert _cli.main([*args, "--samples", "500", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    herd = tmp_path / "herd.png"
    args = ["Retry(ExponentialBackoff(), 3)", "--herd", "50", "--outage", "1", "--capacity", "100"]
    assert _cli.main([*args, "--plot", str(herd)]) == 0
    assert herd.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_needs_a_policy_and_whole_herd_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        _cli.main([])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        _cli.main(["Retry(NoBackoff(), 1)", "--herd", "10"])
    assert "go together" in capsys.readouterr().err


# -- the herd simulator ---------------------------------------------------


def constant(seconds, retries):
    return redis_backoff_c.Retry(redis_backoff_c.ConstantBackoff(seconds), retries)


def test_herd_served_within_capacity():
    """10 clients, ConstantBackoff(0.5): attempts at 0 and 0.5 are refused,
    at 1.0 the server is back and serves 10 per 10 ms bin: all succeed."""
    report = plan.simulate_herd(constant(0.5, 3), 10, outage=1.0, capacity=1000, attempt_time=0)
    assert (report.total_attempts, report.succeeded, report.gave_up) == (30, 10, 0)
    assert report.last_finished == 1.0 and report.peak_after_recovery == 10
    assert report.attempts_per_bin[0] == 10 and report.attempts_per_bin[5] == 10
    assert report.attempts_per_bin[10] == 10 and sum(report.attempts_per_bin) == 30


def test_herd_attempts_past_capacity_fail_like_refused():
    """Capacity 500/s is 5 per 10 ms bin: 5 of the 10 fail at 1.0 and
    succeed on their retry at 1.5."""
    report = plan.simulate_herd(constant(0.5, 3), 10, outage=1.0, capacity=500, attempt_time=0)
    assert (report.total_attempts, report.succeeded, report.gave_up) == (35, 10, 0)
    assert report.last_finished == 1.5


def test_herd_gives_up_past_retries():
    report = plan.simulate_herd(constant(0.1, 2), 20, outage=5, capacity=100, attempt_time=0.01)
    assert (report.total_attempts, report.succeeded, report.gave_up) == (60, 0, 20)
    assert report.last_finished == pytest.approx(3 * 0.01 + 2 * 0.1)
    assert report.peak_after_recovery == 0


def test_herd_deadline():
    retry = constant(1, 10)
    report = plan.simulate_herd(retry, 5, outage=60, capacity=100, attempt_time=0, deadline=2.5)
    # attempts at 0, 1, 2; the sleep to 3 would reach the deadline
    assert (report.total_attempts, report.gave_up) == (15, 5)
    assert report.last_finished == 2


def test_herd_shared_budget():
    """gRFC A6 with 10 tokens: each failure takes one; retries stop once
    tokens <= 5.  100 clients fail at 0: the first 4 failures leave 9..6
    tokens (retries allowed), the 5th leaves 5 and every later one gives up;
    the 4 retries fail too and give up."""
    report = plan.simulate_herd(
        constant(0.1, 10), 100, outage=5, capacity=100, attempt_time=0, budget=(10, 0.1)
    )
    assert (report.total_attempts, report.succeeded, report.gave_up) == (104, 0, 100)
    assert report.budget == (10, 0.1)


def test_herd_runs_the_strategy_objects():
    strategy = Counting()
    retry = redis.retry.Retry(strategy, 3)
    report = plan.simulate_herd(retry, 7, outage=10, capacity=100, attempt_time=0)
    assert strategy.calls == 7 * 3  # one compute per failure that is retried
    assert report.total_attempts == 28 and report.gave_up == 7


def test_herd_retry_forever_stops_at_until():
    retry = constant(0.5, -1)
    report = plan.simulate_herd(retry, 3, outage=100, capacity=0, attempt_time=0, until=10)
    assert report.unfinished == 3 and report.succeeded == report.gave_up == 0
    assert report.total_attempts == 3 * 21  # 0, 0.5, ..., 10.0


def test_herd_shows_or_reports_the_jitter_finding():
    """1000 synchronised clients against a 2 s outage and 2000 attempts/s:
    plain exponential backoff retries in lockstep (all 1000 in one bin);
    each jittered strategy spreads them and needs fewer attempts."""
    policies = ["ExponentialBackoff", "ExponentialWithJitterBackoff", "EqualJitterBackoff"]
    reports = [
        plan.simulate_herd(
            redis_backoff_c.Retry(getattr(redis_backoff_c, name)(cap=1, base=0.01), 10),
            1000,
            outage=2,
            capacity=2000,
            seed=1,
        )
        for name in policies
    ]
    plain, *jittered = reports
    assert plain.peak_after_recovery == 1000
    for report in jittered:
        assert report.peak_after_recovery < plain.peak_after_recovery / 4
        assert report.total_attempts < plain.total_attempts
        assert report.succeeded > plain.succeeded
    finding = plan.aws_finding(reports).splitlines()
    assert len(finding) == 2 and all("finding holds" in line for line in finding)


def test_jitter_finding_reported_honestly_when_absent():
    """With capacity to serve the whole herd at once nothing contends: plain
    backoff does as well, and the verdict says the finding does not hold."""
    reports = [
        plan.simulate_herd(
            redis_backoff_c.Retry(getattr(redis_backoff_c, name)(cap=1, base=0.01), 10),
            100,
            outage=1,
            capacity=100_000,
            seed=1,
        )
        for name in ("ExponentialBackoff", "FullJitterBackoff")
    ]
    (line,) = plan.aws_finding(reports).splitlines()
    assert "does NOT hold" in line


def test_herd_command_and_json(tmp_path, capsys):
    path = tmp_path / "herd.json"
    args = [
        "Retry(ExponentialBackoff(), 3)",
        "--compare",
        "Retry(FullJitterBackoff(), 3)",
        "--herd",
        "200",
        "--outage",
        "0.5",
        "--capacity",
        "1000",
        "--seed",
        "3",
        "--json",
        str(path),
    ]
    assert _cli.main(args) == 0
    out = capsys.readouterr().out
    assert "200 clients" in out and "AWS's jitter finding" in out
    data = json.loads(path.read_text())
    assert len(data) == 2
    assert {"total_attempts", "peak_attempts_per_100ms_after_recovery", "gave_up"} <= set(data[0])
    assert sum(data[0]["attempts_per_100ms"]) == data[0]["total_attempts"]
    assert data[0]["succeeded"] + data[0]["gave_up"] + data[0]["unfinished"] == 200


def test_herd_budget_option(capsys):
    args = ["Retry(NoBackoff(), 5)", "--herd", "10", "--outage", "1", "--capacity", "10"]
    assert _cli.main([*args, "--budget", "4,0.5"]) == 0
    with pytest.raises(SystemExit):
        _cli.main([*args, "--budget", "four"])
    assert "MAX_TOKENS,TOKEN_RATIO" in capsys.readouterr().err


# -- without the C extension ----------------------------------------------


def test_plan_runs_without_the_extension():
    env = {**os.environ, "REDIS_BACKOFF_C_DISABLE": "1"}
    done = run_command("Retry(FullJitterBackoff(), 3)", "--samples", "1000", env=env)
    assert done.returncode == 0, done.stderr
    assert "verdict: Retry(FullJitterBackoff(cap=0.512, base=0.008), 3)" in done.stdout


def test_both_implementations_are_described_alike():
    ours, theirs = (
        plan.describe(make_retry(IMPLEMENTATIONS[side], "EqualJitterBackoff", {}), samples=10)
        for side in ("c", "redis-py")
    )
    assert ours.policy == theirs.policy
    assert ours.per_failure == theirs.per_failure


def test_shifted_moves_totals_exactly():
    retry = redis.retry.Retry(redis.backoff.FullJitterBackoff(cap=1, base=0.01), 5)
    first = plan.describe(retry, samples=1000, seed=1)
    moved = first.shifted(2.0, label="slow")
    assert moved.label == "slow" and moved.per_failure == first.per_failure
    assert moved.total.max == pytest.approx(first.total.max + 6 * 2.0)
    assert moved.total.p50 == pytest.approx(first.total.p50 + 6 * 2.0)
    again = plan.describe(retry, attempt_time=2.0, samples=1000, seed=1)
    assert again.total.p99 == pytest.approx(moved.total.p99)
    with pytest.raises(ValueError):
        plan.describe(retry, samples=10, deadline=1).shifted(1.0)


# -- the extras (deadline=, budget=) of our Retry --------------------------


def test_deadline_and_budget_of_our_retry_are_read():
    text = "Retry(ConstantBackoff(1), 5, deadline=2.4, budget=RetryBudget(10, 0.1))"
    retry = plan.parse_policy(text)
    assert retry.deadline == 2.4 and retry.budget.max_tokens == 10
    result = plan.describe(retry, attempt_time=0.25)
    assert result.total.max == 1.5  # as test_deadline_truncates_the_total
    assert any("budget" in note for note in result.notes)
    report = plan.simulate_herd(retry, 100, outage=5, capacity=100, attempt_time=0)
    assert report.budget == (10.0, 0.1) and report.deadline == 2.4
    assert (report.total_attempts, report.gave_up) == (104, 100)  # as test_herd_shared_budget


def test_jitter_finding_compares_like_with_like():
    def run(name, **extras):
        strategy = getattr(redis_backoff_c, name)(cap=1, base=0.01)
        retry = redis_backoff_c.Retry(strategy, 10, **extras)
        return plan.simulate_herd(retry, 1000, outage=2, capacity=2000, seed=1)

    budget = redis_backoff_c.RetryBudget(100, 0.1)
    reports = [
        run("ExponentialBackoff"),
        run("ExponentialBackoff", budget=budget),
        run("EqualJitterBackoff"),
    ]
    (line,) = plan.aws_finding(reports).splitlines()
    assert f"vs {reports[0].total_attempts:,}" in line and "holds" in line


# -- rough edges a new user hit (issue 24): one line and exit 2, no traceback


def one_line_error(done):
    """The command failed with status 2 and one line on stderr, no traceback."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr.strip()


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_output_in_a_missing_directory_is_one_line(option, tmp_path):
    path = tmp_path / "no-such-dir" / "out.file"
    done = run_command("Retry(ExponentialBackoff(), 3)", option, str(path))
    line = one_line_error(done)
    assert line.startswith(f"error: {option} {path}: no such directory")
    assert done.stdout == ""  # refused before any work
    assert not path.parent.exists()


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_output_that_is_a_directory_is_one_line(option, tmp_path):
    done = run_command("Retry(ExponentialBackoff(), 3)", option, str(tmp_path))
    line = one_line_error(done)
    assert line == f"error: {option} {tmp_path}: is a directory; give a file name"
    assert list(tmp_path.iterdir()) == []
    assert not tmp_path.with_suffix(".png").exists()  # matplotlib would add .png


def test_output_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    # The path passes the checks and then cannot be opened (removed meanwhile,
    # or a permission the check could not see): still one line and 2.
    def refuse(path, payload):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(_cli, "_write_json", refuse)
    path = tmp_path / "plan.json"
    assert _cli.main(["Retry(NoBackoff(), 1)", "--json", str(path)]) == 2
    assert capsys.readouterr().err == f"error: cannot write {path}: Permission denied\n"


def test_plot_without_matplotlib_is_one_line_naming_the_extra(tmp_path):
    # A child process whose matplotlib import fails, as where it is not installed.
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from redis_backoff_c.plan import main\n"
        f"sys.exit(main(['Retry(NoBackoff(), 1)', '--plot', {str(tmp_path / 'p.png')!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    line = one_line_error(done)
    assert "--plot needs matplotlib" in line and "redis-backoff-c[bench]" in line
    assert done.stdout == ""  # said before describing anything
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize(
    "name",
    [
        "ExponentialBackoff",
        "FullJitterBackoff",
        "EqualJitterBackoff",
        "ExponentialWithJitterBackoff",
    ],
)
def test_totals_past_the_largest_float_are_inf_not_an_overflow_error(name):
    # Ten delays of 1e308 s add up past the largest float: the answer in
    # floats is inf (it was OverflowError: intermediate overflow in fsum).
    done = run_command(f"Retry({name}(cap=1e308, base=1e308), 10)", "--seed", "1")
    assert done.returncode == 0, done.stderr
    assert "n/a" not in done.stdout
    (verdict,) = [line for line in done.stdout.splitlines() if line.startswith("verdict: ")]
    assert verdict.endswith("blocks at most inf s, typically inf s, p99 inf s")
    described = plan.describe(
        redis_backoff_c.Retry(getattr(redis_backoff_c, name)(cap=1e308, base=1e308), 10),
        samples=1000,
        seed=1,
    )
    assert described.total.max == math.inf
    assert described.per_failure[-1].delay.max == 1e308
    # Every delay's mean is a finite number of seconds, exact or sampled.
    assert all(math.isfinite(entry.delay.mean) for entry in described.per_failure)


def test_exponential_with_jitter_mean_with_a_cap_whose_square_overflows():
    (law,) = laws_for("ExponentialWithJitterBackoff", {"cap": 1e300, "base": 1e300}, 1)
    # x = 2e300 > cap: mean = cap - cap**2 / (2x) = 1e300 - 1e300 / 4
    assert law.mean == pytest.approx(0.75e300)


def test_huge_figures_are_printed_short():
    assert plan._describe.format_seconds(1e300) == "1e+300 s"
    assert plan._describe.format_seconds(math.inf) == "inf s"
    assert plan._describe.format_seconds(5.26) == "5.26 s"
    done = run_command(
        "Retry(ExponentialBackoff(), 3)", "--herd", "5", "--outage", "1e300", "--capacity", "10"
    )
    assert done.returncode == 0, done.stderr
    assert "outage 1e+300 s," in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) < 200


def test_no_unexplained_lines_and_the_herd_peak_is_explained(capsys):
    args = ["Retry(NoBackoff(), 2)", "--herd", "20", "--outage", "0.5", "--capacity", "100"]
    assert _cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    # No bare "(0.01 s)" line closes the run any more.
    assert not any(line.startswith("(") and line.endswith(" s)") for line in lines)
    header = lines[1].split()
    assert "peak/100ms*" in header
    assert lines[-1].startswith("* peak/100ms: the most attempts in one 100 ms bin")
    assert "(500 ms) on" in lines[-1]
    assert "peak/100ms*" in _cli.build_parser().format_help()
    assert _cli.main(["Retry(NoBackoff(), 2)"]) == 0
    assert capsys.readouterr().out.splitlines()[-2].startswith("verdict: ")
