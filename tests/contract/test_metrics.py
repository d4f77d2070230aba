"""redis_backoff_c.metrics: RetryStats exported to Prometheus and to
OpenTelemetry, checked against the real libraries (prometheus_client's
CollectorRegistry, the OpenTelemetry SDK's MeterProvider with an
InMemoryMetricReader behind redis-py's own observability), never stand-ins.

The counts come from real call_with_retry calls on a Retry with stats=,
ending in every outcome a different number of times (OUTCOME_RUNS), so an
exported value that went to the wrong counter or reason cannot pass.  Each
test runs over the C types and their pure-Python twin (the `extras`
fixture).  What only a missing library or a redis-py without observability
can show runs in a subprocess where that module cannot be imported."""

import subprocess
import sys
import textwrap
import threading
import time
import uuid

import opentelemetry.metrics
import prometheus_client
import pytest
import redis
import redis.exceptions
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, Sum
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from redis.observability import OTelConfig, get_observability_instance, reset_observability_instance
from redis.observability.attributes import AttributeBuilder
from redis.observability.metrics import RedisMetricsCollector
from support import STATS_OUTCOMES, assert_outcomes_add_up

from redis_backoff_c import metrics
from redis_backoff_c.backoff import ConstantBackoff, NoBackoff
from redis_backoff_c.metrics import OTEL_REASON, RetryStatsCollector, register_otel_metrics

CE = redis.exceptions.ConnectionError
REASONS = ["exhausted", "not_retryable", "deadline", "budget", "may_have_run"]
# The counters exported one to one, by their snapshot key.
PLAIN = ["calls", "attempts", "successes", "failed_attempts", "retries", "unhandled_errors"]
PLAIN += ["aborted"]
# The instruments on redis-py's meter, and their units.
OTEL_UNITS = {
    "redis.client.retry.calls": "{call}",
    "redis.client.retry.attempts": "{attempt}",
    "redis.client.retry.successes": "{call}",
    "redis.client.retry.failed_attempts": "{attempt}",
    "redis.client.retry.retries": "{attempt}",
    "redis.client.retry.give_ups": "{call}",
    "redis.client.retry.unhandled_errors": "{error}",
    "redis.client.retry.aborted": "{call}",
    "redis.client.retry.sleep_time": "s",
}
# How many calls end in each outcome: all different, so that a value
# exported under the wrong name or reason shows.
OUTCOME_RUNS = dict(zip(STATS_OUTCOMES, range(2, 2 + len(STATS_OUTCOMES))))


class Aborting(Exception):
    """Raised by a fail() to abort the call."""


def ignore(error):
    return None


def abort(error):
    raise Aborting(str(error))


def failing(times, then="ok", error=CE):
    """do(): raises `error` `times` times, then returns `then`."""
    left = [times]

    def do():
        if left[0] > 0:
            left[0] -= 1
            raise error("down")
        return then

    return do


def always(error=CE):
    return failing(10**9, error=error)


def outcome_calls(extras, stats):
    """Outcome name -> a real call_with_retry that ends in it."""
    retry = extras.Retry
    return {
        # two failures, two 1 ms sleeps, then the value
        "successes": lambda: retry(ConstantBackoff(0.001), 3, stats=stats).call_with_retry(
            failing(2), ignore
        ),
        "give_ups_exhausted": lambda: retry(NoBackoff(), 2, stats=stats).call_with_retry(
            always(), ignore
        ),
        "give_ups_not_retryable": lambda: retry(NoBackoff(), 5, stats=stats).call_with_retry(
            always(), ignore, is_retryable=lambda error: False
        ),
        # the 10 s sleep would reach the deadline: given up before it
        "give_ups_deadline": lambda: retry(
            ConstantBackoff(10), 5, deadline=0.05, stats=stats
        ).call_with_retry(always(), ignore),
        # 2 tokens, 1 left after the failure: a retry needs more than 1
        "give_ups_budget": lambda: retry(
            NoBackoff(), 5, budget=extras.RetryBudget(2, 0.1), stats=stats
        ).call_with_retry(always(), ignore),
        # a do() that is not redis-py's may have run on the server
        "give_ups_may_have_run": lambda: retry(
            NoBackoff(), 5, stats=stats, writes="at-most-once"
        ).call_with_retry(always(), ignore),
        "unhandled_errors": lambda: retry(NoBackoff(), 5, stats=stats).call_with_retry(
            always(KeyError), ignore
        ),
        "aborted": lambda: retry(NoBackoff(), 5, stats=stats).call_with_retry(always(), abort),
    }


def run_outcomes(extras, stats, runs=OUTCOME_RUNS):
    """Run the real calls, runs[outcome] of each; check that the stats
    counted exactly those outcomes; return the snapshot."""
    calls = outcome_calls(extras, stats)
    before = stats.snapshot()
    for name, times in runs.items():
        for _ in range(times):
            try:
                calls[name]()
            except (CE, KeyError, Aborting):
                pass
    snapshot = stats.snapshot()
    assert {name: snapshot[name] - before[name] for name in STATS_OUTCOMES} == {
        name: runs.get(name, 0) for name in STATS_OUTCOMES
    }
    assert_outcomes_add_up(snapshot)
    return snapshot


class CountingStats:
    """A RetryStats read through: counts the snapshot() calls."""

    def __init__(self, stats):
        self.stats = stats
        self.reads = 0

    def snapshot(self):
        self.reads += 1
        return self.stats.snapshot()


def outcomes_of(exported):
    """calls minus the outcomes, from exported values keyed like a snapshot."""
    return exported["calls"] - sum(exported[name] for name in STATS_OUTCOMES)


class Hammer:
    """One thread running real call_with_retry calls (successes, exhausted
    give-ups, errors passed through) until stopped: at any instant at most
    one call is counted without its outcome."""

    def __init__(self, extras, stats):
        self.retry = extras.Retry(NoBackoff(), 1, stats=stats)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self):
        dos = [failing(0), always(), always(KeyError)]
        n = 0
        while not self.stop.is_set() and n < 1_000_000:
            try:
                self.retry.call_with_retry(dos[n % 3], ignore)
            except (CE, KeyError):
                pass
            n += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


# ---------------------------------------------------------------- Prometheus


def scrape(registry):
    """One scrape of `registry`, as Prometheus reads it (the text exposition,
    parsed): {labels other than reason: {snapshot key: value}}."""
    text = prometheus_client.generate_latest(registry).decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels)
            key = sample.name.removeprefix("redis_backoff_c_").removesuffix("_total")
            if key == "give_ups":
                key = f"give_ups_{labels.pop('reason')}"
            named = values.setdefault(tuple(sorted(labels.items())), {})
            assert key not in named, sample
            named[key] = sample.value
    return values


def sample_values(registry, labels=None):
    """The same through registry.get_sample_value (a collection for each)."""
    labels = labels or {}
    value = registry.get_sample_value
    values = {name: value(f"redis_backoff_c_{name}_total", labels) for name in PLAIN}
    for reason in REASONS:
        values[f"give_ups_{reason}"] = value(
            "redis_backoff_c_give_ups_total", {**labels, "reason": reason}
        )
    values["slept_seconds"] = value("redis_backoff_c_slept_seconds_total", labels)
    return values


def test_prometheus_exports_every_counter_of_real_calls(extras):
    stats = extras.RetryStats()
    registry = prometheus_client.CollectorRegistry()
    registry.register(RetryStatsCollector(stats))
    snapshot = run_outcomes(extras, stats)
    assert snapshot["slept_seconds"] >= 0.001 * 2 * OUTCOME_RUNS["successes"]
    assert scrape(registry) == {(): snapshot}
    assert sample_values(registry) == snapshot
    # counters, live: the next scrape shows the calls made since
    again = run_outcomes(extras, stats, {"give_ups_budget": 1, "successes": 1})
    assert again["give_ups_budget"] == snapshot["give_ups_budget"] + 1
    assert scrape(registry) == {(): again}


def test_prometheus_exposition_is_counters_ending_in_total(extras):
    stats = extras.RetryStats()
    registry = prometheus_client.CollectorRegistry()
    registry.register(RetryStatsCollector(stats))
    snapshot = run_outcomes(extras, stats)
    text = prometheus_client.generate_latest(registry).decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    expected = {f"redis_backoff_c_{name}" for name in [*PLAIN, "give_ups", "slept_seconds"]}
    assert set(families) == expected
    assert {family.type for family in families.values()} == {"counter"}
    samples = {
        (sample.name, sample.labels.get("reason")): sample.value
        for family in families.values()
        for sample in family.samples
    }
    assert len(samples) == len(PLAIN) + len(REASONS) + 1
    for reason in REASONS:
        got = samples["redis_backoff_c_give_ups_total", reason]
        assert got == snapshot[f"give_ups_{reason}"]
    assert samples["redis_backoff_c_calls_total", None] == snapshot["calls"]
    line = f'redis_backoff_c_give_ups_total{{reason="budget"}} {float(snapshot["give_ups_budget"])}'
    assert line in text.splitlines()
    # OpenMetrics states the unit of the seconds
    openmetrics = generate_openmetrics(registry).decode().splitlines()
    assert "# UNIT redis_backoff_c_slept_seconds seconds" in openmetrics


def test_prometheus_several_stats_by_name_with_constant_labels(extras):
    cache, sessions = extras.RetryStats(), extras.RetryStats()
    registry = prometheus_client.CollectorRegistry()
    collector = RetryStatsCollector(
        {"cache": cache, "sessions": sessions}, labels={"service": "api"}, stats_label="client"
    )
    registry.register(collector)
    in_cache = run_outcomes(extras, cache)
    in_sessions = run_outcomes(extras, sessions, {"give_ups_deadline": 1, "aborted": 3})
    assert in_cache != in_sessions
    assert scrape(registry) == {
        (("client", "cache"), ("service", "api")): in_cache,
        (("client", "sessions"), ("service", "api")): in_sessions,
    }
    assert sample_values(registry, {"service": "api", "client": "sessions"}) == in_sessions
    # One collector for all of them: a registry refuses a second one of the
    # same names.
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(RetryStatsCollector(extras.RetryStats()))
    assert "client" in repr(collector) and "cache" in repr(collector)


def test_prometheus_reads_each_stats_once_per_scrape_and_not_to_register(extras):
    first, second = CountingStats(extras.RetryStats()), CountingStats(extras.RetryStats())
    # auto_describe=True, as prometheus_client's default REGISTRY: a collector
    # without describe() would be collected at registration.
    registry = prometheus_client.CollectorRegistry(auto_describe=True)
    registry.register(RetryStatsCollector({"first": first, "second": second}))
    assert (first.reads, second.reads) == (0, 0)
    run_outcomes(extras, first.stats)
    prometheus_client.generate_latest(registry)
    assert (first.reads, second.reads) == (1, 1)
    registry.get_sample_value("redis_backoff_c_calls_total", {"stats": "first"})
    assert (first.reads, second.reads) == (2, 2)


def test_prometheus_scrapes_one_consistent_reading_while_calls_run(extras):
    stats = extras.RetryStats()
    registry = prometheus_client.CollectorRegistry()
    registry.register(RetryStatsCollector(stats))
    in_flight = set()
    with Hammer(extras, stats):
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            in_flight.add(outcomes_of(scrape(registry)[()]))
    assert in_flight <= {0, 1}
    assert scrape(registry)[()]["calls"] > 100


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"labels": {"1st": "x"}}, ValueError, "not a Prometheus label name"),
        ({"labels": {"__name": "x"}}, ValueError, "not a Prometheus label name"),
        ({"labels": {"reason": "x"}}, ValueError, "collector's own"),
        ({"labels": {"stats": "x"}, "named": True}, ValueError, "collector's own"),
        ({"labels": {"client": 1}}, TypeError, "must be a str"),
        ({"stats_label": "reason", "named": True}, ValueError, "give-ups' own"),
        ({"stats_label": "a-b", "named": True}, ValueError, "not a Prometheus label name"),
    ],
)
def test_prometheus_refuses_bad_labels_at_construction(extras, kwargs, error, match):
    kwargs = dict(kwargs)
    stats = extras.RetryStats()
    if kwargs.pop("named", False):
        stats = {"a": stats}
    with pytest.raises(error, match=match):
        RetryStatsCollector(stats, **kwargs)


@pytest.mark.parametrize(
    ("stats", "error"),
    [({}, ValueError), (None, TypeError), ({1: None}, TypeError), ({"a": 3}, TypeError)],
)
def test_exporters_refuse_what_is_not_retry_stats(stats, error):
    with pytest.raises(error):
        RetryStatsCollector(stats)
    with pytest.raises(error):
        register_otel_metrics(stats)


# ------------------------------------------------------------- OpenTelemetry

_reader = []


def sdk_reader():
    """The InMemoryMetricReader of the process's global MeterProvider, set
    here once: OpenTelemetry lets a process set it only once, and redis-py's
    observability uses the global one."""
    if not _reader:
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        opentelemetry.metrics.set_meter_provider(provider)
        if opentelemetry.metrics.get_meter_provider() is not provider:
            raise RuntimeError("another global MeterProvider was set before this test module's")
        _reader.append(reader)
    return _reader[0]


def reset_redis_py_observability():
    """redis-py's observability as a test found it: off, and no recorder
    keeping the collector it resolved while it was on (redis-py 8.1's init()
    does not reset them; 8.2's does)."""
    reset_observability_instance()
    for name in ("redis.observability.recorder", "redis.asyncio.observability.recorder"):
        module = sys.modules.get(name)
        if module is not None:
            module.reset_collector()


@pytest.fixture
def observability():
    """redis-py's observability enabled as its documentation says: the
    global MeterProvider set, then init(OTelConfig()).  Gives the reader."""
    reader = sdk_reader()
    reset_redis_py_observability()
    get_observability_instance().init(OTelConfig())
    yield reader
    reset_redis_py_observability()


def otel_collect(reader, run):
    """One collection: the points of this test's registrations (attribute
    test.run == run), keyed like a snapshot ({stats name: {key: value}}),
    and each instrument's (scope, unit, kind) seen."""
    data = reader.get_metrics_data()
    values, instruments = {}, {}
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attributes = dict(point.attributes)
                    if attributes.get("test.run") != run:
                        continue
                    instruments[metric.name] = (
                        (scope.scope.name, scope.scope.version),
                        metric.unit,
                        type(metric.data),
                        metric.data.is_monotonic,
                        metric.data.aggregation_temporality,
                    )
                    key = snapshot_key(metric.name, attributes.get(OTEL_REASON))
                    named = values.setdefault(attributes.get("redis.client.retry.stats"), {})
                    assert key not in named, (metric.name, attributes)
                    named[key] = (point.value, attributes)
    return values, instruments


def snapshot_key(instrument, reason):
    """The snapshot key an instrument's point stands for."""
    assert instrument.startswith("redis.client.retry.")
    name = instrument[len("redis.client.retry.") :]
    if name == "give_ups":
        assert reason in REASONS
        return f"give_ups_{reason}"
    assert reason is None
    return {"sleep_time": "slept_seconds"}.get(name, name)


def values_only(points):
    return {key: value for key, (value, _) in points.items()}


def test_otel_exports_every_counter_on_redis_pys_meter(extras, observability):
    stats, run = extras.RetryStats(), uuid.uuid4().hex
    registration = register_otel_metrics(stats, attributes={"test.run": run})
    try:
        snapshot = run_outcomes(extras, stats)
        values, instruments = otel_collect(observability, run)
        assert set(values) == {None}
        assert values_only(values[None]) == snapshot
        # every point carries redis-py's base attributes, then the user's
        base = AttributeBuilder.build_base_attributes()
        assert base["db.system"] == "redis"
        for key, (_, attributes) in values[None].items():
            reason = {OTEL_REASON: key[len("give_ups_") :]} if key.startswith("give_ups_") else {}
            assert attributes == {**base, "test.run": run, **reason}
        # observable counters on redis-py's meter: cumulative monotonic sums
        scope = (RedisMetricsCollector.METER_NAME, RedisMetricsCollector.METER_VERSION)
        cumulative = AggregationTemporality.CUMULATIVE
        assert instruments == {
            name: (scope, unit, Sum, True, cumulative) for name, unit in OTEL_UNITS.items()
        }
        assert sorted(registration.instrument_names) == sorted(OTEL_UNITS)
        # live: the next collection has the calls made since
        again = run_outcomes(extras, stats, {"give_ups_not_retryable": 1})
        assert values_only(otel_collect(observability, run)[0][None]) == again
    finally:
        registration.unregister()
    assert otel_collect(observability, run)[0] == {}
    registration.unregister()  # a second time does nothing


def test_otel_instruments_sit_beside_redis_pys_own_metrics(extras, observability):
    # redis-py records its own counters on the meter it resolves; ours are
    # under the same instrumentation scope of the same reader.
    from redis.observability import recorder

    stats, run = extras.RetryStats(), uuid.uuid4().hex
    with register_otel_metrics(stats, attributes={"test.run": run}):
        recorder.record_error_count(error_type=CE("down"), is_internal=True)
        data = observability.get_metrics_data()
    scopes = {
        scope.scope.name: {metric.name for metric in scope.metrics}
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
    }
    names = scopes[RedisMetricsCollector.METER_NAME]
    assert "redis.client.errors" in names
    assert "redis.client.retry.calls" in names


def test_otel_several_stats_by_name_and_several_registrations(extras, observability):
    cache, sessions, lone = extras.RetryStats(), extras.RetryStats(), extras.RetryStats()
    run = uuid.uuid4().hex
    named = register_otel_metrics(
        {"cache": cache, "sessions": sessions}, attributes={"test.run": run}
    )
    other = register_otel_metrics(lone, attributes={"test.run": run, "client": "lone"})
    try:
        # the same attributes again would be two series in one
        with pytest.raises(ValueError, match="already registered"):
            register_otel_metrics(cache, attributes={"test.run": run, "client": "lone"})
        in_cache = run_outcomes(extras, cache)
        in_sessions = run_outcomes(extras, sessions, {"successes": 1, "give_ups_budget": 4})
        in_lone = run_outcomes(extras, lone, {"unhandled_errors": 5})
        values, _ = otel_collect(observability, run)
        assert set(values) == {"cache", "sessions", None}
        assert values_only(values["cache"]) == in_cache
        assert values_only(values["sessions"]) == in_sessions
        assert values_only(values[None]) == in_lone
        assert {a.get("client") for _, a in values[None].values()} == {"lone"}
        assert named.attributes[0]["redis.client.retry.stats"] == "cache"
    finally:
        named.unregister()
    assert set(otel_collect(observability, run)[0]) == {None}
    other.unregister()


def test_otel_reads_each_stats_once_per_collection(extras, observability):
    counting, run = CountingStats(extras.RetryStats()), uuid.uuid4().hex
    with register_otel_metrics({"c": counting}, attributes={"test.run": run}):
        assert counting.reads == 0
        for collections in (1, 2, 3):
            run_outcomes(extras, counting.stats, {"successes": 1})
            values, _ = otel_collect(observability, run)
            assert values_only(values["c"]) == counting.stats.snapshot()
            assert counting.reads == collections


def test_otel_collects_one_consistent_reading_while_calls_run(extras, observability):
    stats, run = extras.RetryStats(), uuid.uuid4().hex
    in_flight = set()
    with register_otel_metrics(stats, attributes={"test.run": run}), Hammer(extras, stats):
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            in_flight.add(outcomes_of(values_only(otel_collect(observability, run)[0][None])))
    assert in_flight <= {0, 1}
    assert stats.calls > 100


def test_otel_exports_with_none_of_redis_pys_own_metric_groups(extras):
    # OTelConfig's metric groups choose redis-py's metrics; calling
    # register_otel_metrics asks for these.
    reader, run = sdk_reader(), uuid.uuid4().hex
    reset_redis_py_observability()
    get_observability_instance().init(OTelConfig(metric_groups=[]))
    try:
        stats = extras.RetryStats()
        with register_otel_metrics(stats, attributes={"test.run": run}):
            snapshot = run_outcomes(extras, stats, {"give_ups_exhausted": 2})
            assert values_only(otel_collect(reader, run)[0][None]) == snapshot
    finally:
        reset_redis_py_observability()


@pytest.mark.parametrize("config", [None, OTelConfig(enabled_telemetry=[])], ids=["off", "empty"])
def test_otel_refuses_while_redis_pys_observability_is_off(extras, config):
    reset_redis_py_observability()
    if config is not None:
        get_observability_instance().init(config)
    try:
        with pytest.raises(RuntimeError, match="observability is not enabled") as raised:
            register_otel_metrics(extras.RetryStats())
        assert "get_observability_instance().init(OTelConfig())" in str(raised.value)
    finally:
        reset_redis_py_observability()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"attributes": {OTEL_REASON: "x"}}, ValueError, "exporter's own"),
        ({"attributes": {"redis.client.retry.stats": "x"}, "named": True}, ValueError, "own"),
        ({"attributes": {"c": "x"}, "stats_attribute": "c", "named": True}, ValueError, "own"),
        ({"attributes": {1: "x"}}, TypeError, "attribute names"),
        ({"stats_attribute": "", "named": True}, TypeError, "stats_attribute"),
    ],
)
def test_otel_refuses_bad_attributes(extras, observability, kwargs, error, match):
    kwargs = dict(kwargs)
    stats = extras.RetryStats()
    if kwargs.pop("named", False):
        stats = {"a": stats}
    with pytest.raises(error, match=match):
        register_otel_metrics(stats, **kwargs)


# ------------------------------------------- without a library, in a subprocess


def run_without(modules, code):
    """Run `code` in a fresh interpreter (the installed package, -I) where
    importing any of `modules` raises ImportError, as where it is not
    installed; return its stdout."""
    prelude = f"import sys\nfor name in {modules!r}:\n    sys.modules[name] = None\n"
    result = subprocess.run(
        [sys.executable, "-I", "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_the_module_imports_without_either_library_and_each_export_says_what_to_install():
    out = run_without(
        ["prometheus_client", "opentelemetry"],
        """
        import redis_backoff_c
        from redis_backoff_c import metrics
        for export in (metrics.RetryStatsCollector, metrics.register_otel_metrics):
            try:
                export(redis_backoff_c.RetryStats())
            except ImportError as error:
                print(type(error).__name__, error)
        """,
    )
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert "pip install prometheus_client" in lines[0]
    assert "redis-backoff-c[prometheus]" in lines[0]
    assert "pip install opentelemetry-api" in lines[1]
    assert "redis-backoff-c[otel]" in lines[1]


def test_a_redis_py_without_observability_gets_an_import_error_naming_it():
    # Every redis-py the package supports (8.0 to 8.2) has redis.observability;
    # one without it (blocked here after redis is imported, since redis-py's
    # own modules import it) must get a clear error, not an AttributeError.
    out = run_without(
        [],
        """
        import redis
        from redis_backoff_c import RetryStats, metrics
        for name in [n for n in sys.modules if n.startswith("redis.observability")]:
            sys.modules[name] = None
        try:
            metrics.register_otel_metrics(RetryStats())
        except ImportError as error:
            print(error)
        """,
    )
    assert f"redis-py {redis.__version__} has no OpenTelemetry observability" in out
    assert "RetryStatsCollector" in out


def test_registrations_made_before_the_meter_provider_is_set_all_report():
    # redis-py accepts observability enabled before the global MeterProvider
    # is set (OpenTelemetry's stand-in provider is not its NoOp one): each
    # get_meter() is then a new stand-in meter, and once the provider is set
    # the instruments made on each are the same SDK instruments, which keep
    # only the first callbacks.  Both registrations must still report.
    out = run_without(
        [],
        """
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from redis.observability import OTelConfig, get_observability_instance
        from redis_backoff_c import NoBackoff, Retry, RetryStats
        from redis_backoff_c.metrics import register_otel_metrics

        get_observability_instance().init(OTelConfig())
        first, second = RetryStats(), RetryStats()
        register_otel_metrics(first, attributes={"which": "first"})
        register_otel_metrics(second, attributes={"which": "second"})
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        Retry(NoBackoff(), 1, stats=second).call_with_retry(lambda: 1, lambda error: None)
        for resource in reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "redis.client.retry.calls":
                        for point in metric.data.data_points:
                            print(point.attributes["which"], point.value)
        """,
    )
    assert sorted(out.split("\n")) == ["", "first 0", "second 1"]


def test_the_module_names_what_it_exports():
    assert set(metrics.__all__) <= set(dir(metrics))
    assert metrics.GIVE_UP_REASONS == tuple(REASONS)
    assert metrics.OTEL_REASON == "redis.client.retry.reason"
