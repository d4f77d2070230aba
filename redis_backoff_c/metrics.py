"""Export ``RetryStats`` counters to Prometheus and to OpenTelemetry.

A :class:`~redis_backoff_c.RetryStats` counts what ``call_with_retry`` did
(calls, attempts, retries, give-ups by reason, seconds slept); nothing reads
it but the program.  This module hands those counters to the two usual
metrics systems, reading ``snapshot()`` when they collect, so counting stays
what it is (a few ns in C) and exporting costs only at scrape time:

- :class:`RetryStatsCollector`, a ``prometheus_client`` custom collector:
  ``registry.register(RetryStatsCollector(stats))``;
- :func:`register_otel_metrics`, observable counters on the meter of
  redis-py's own OpenTelemetry integration (``redis.observability``), once
  the program has enabled it: the retry counters go where redis-py's
  ``redis.client.*`` metrics go, under the same instrumentation scope.

Neither library is a dependency of the package: importing this module
imports neither, and each export raises ImportError naming the package to
install when its library is missing (the extras ``redis-backoff-c[prometheus]``
and ``redis-backoff-c[otel]``).

Both exports take one ``RetryStats``, or a mapping of names to ``RetryStats``
(one per client, say), whose name becomes a label (Prometheus) or an
attribute (OpenTelemetry): one exporter serves them all, since a registry
refuses two collectors of the same metric names.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
    from opentelemetry.util.types import AttributeValue
    from prometheus_client.metrics_core import CounterMetricFamily

__all__ = [
    "GIVE_UP_REASONS",
    "OTEL_PREFIX",
    "OTEL_REASON",
    "PROMETHEUS_PREFIX",
    "OTelRetryMetrics",
    "RetryStatsCollector",
    "SupportsSnapshot",
    "register_otel_metrics",
]

#: Every Prometheus metric name starts with this and ``_``.
PROMETHEUS_PREFIX: Final = "redis_backoff_c"
#: Every OpenTelemetry instrument name starts with this and ``.``: redis-py's
#: own names are ``redis.client.<area>.<what>`` (``redis.client.errors``,
#: ``redis.client.csc.requests``), and the retries are one more area.
OTEL_PREFIX: Final = "redis.client.retry"
#: The values of the give-ups' reason (the Prometheus label ``reason``, the
#: OpenTelemetry attribute :data:`OTEL_REASON`), in the order of the
#: snapshot's ``give_ups_*`` keys.
GIVE_UP_REASONS: Final = ("exhausted", "not_retryable", "deadline", "budget", "may_have_run")
#: The give-ups' reason attribute, named as redis-py names its reasons
#: (``redis.client.csc.reason``, ``redis.client.connection.close.reason``).
OTEL_REASON: Final = f"{OTEL_PREFIX}.reason"

_PROMETHEUS_MISSING: Final = (
    "RetryStatsCollector needs prometheus_client: pip install prometheus_client "
    "(or redis-backoff-c[prometheus])"
)
_OTEL_MISSING: Final = (
    "register_otel_metrics needs the OpenTelemetry API: pip install opentelemetry-api "
    "(or redis-backoff-c[otel]); redis-py's observability needs the SDK too "
    "(pip install 'redis[otel]')"
)
_NOT_ENABLED: Final = (
    "redis-py's OpenTelemetry observability is not enabled, and register_otel_metrics "
    "puts the retry counters on its meter. Enable it first, once at start-up:\n"
    "\n"
    "    from opentelemetry import metrics\n"
    "    from opentelemetry.sdk.metrics import MeterProvider\n"
    "    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))\n"
    "    from redis.observability import OTelConfig, get_observability_instance\n"
    "    get_observability_instance().init(OTelConfig())\n"
    "\n"
    "(OTelConfig(metric_groups=[]) enables it without any of redis-py's own metrics.)"
)

# A Prometheus label name as every version of the exposition formats takes it
# (prometheus_client's legacy rule; names starting with __ are reserved).
_LABEL_NAME: Final = re.compile(r"(?!__)[a-zA-Z_][a-zA-Z0-9_]*\Z")


class SupportsSnapshot(Protocol):
    """What the exporters read: ``RetryStats`` (the C type or its pure-Python
    twin), or any object whose ``snapshot()`` gives the same keys."""

    def snapshot(self) -> Mapping[str, Any]: ...


StatsArgument = SupportsSnapshot | Mapping[str, SupportsSnapshot]


@dataclass(frozen=True)
class _Family:
    """One exported counter: its names in both systems, and the snapshot
    keys it reads, each with its ``reason`` (None but for the give-ups)."""

    prometheus: str
    otel: str
    otel_unit: str
    prometheus_unit: str
    description: str
    keys: tuple[tuple[str | None, str], ...]

    @property
    def by_reason(self) -> bool:
        return self.keys[0][0] is not None


def _plain(name: str, unit: str, description: str) -> _Family:
    return _Family(
        f"{PROMETHEUS_PREFIX}_{name}",
        f"{OTEL_PREFIX}.{name}",
        unit,
        "",
        description,
        ((None, name),),
    )


_FAMILIES: Final = (
    _plain("calls", "{call}", "call_with_retry calls started"),
    _plain("attempts", "{attempt}", "attempts of do() that ended (returned or raised)"),
    _plain("successes", "{call}", "calls whose do() returned"),
    _plain("failed_attempts", "{attempt}", "attempts that raised a supported error"),
    _plain("retries", "{attempt}", "attempts after a call's first"),
    _Family(
        f"{PROMETHEUS_PREFIX}_give_ups",
        f"{OTEL_PREFIX}.give_ups",
        "{call}",
        "",
        "calls that gave up: raised a supported error without retrying it, by reason",
        tuple((reason, f"give_ups_{reason}") for reason in GIVE_UP_REASONS),
    ),
    _plain(
        "unhandled_errors",
        "{error}",
        "errors of do() passed through unhandled (not supported errors)",
    ),
    _plain(
        "aborted",
        "{call}",
        "calls ended by an exception from fail(), a checker, compute() or the sleep, "
        "or cancelled while fail() or the sleep was awaited",
    ),
    _Family(
        f"{PROMETHEUS_PREFIX}_slept_seconds",
        f"{OTEL_PREFIX}.sleep_time",
        "s",
        "seconds",
        "seconds of backoff sleep actually slept",
        ((None, "slept_seconds"),),
    ),
)


def _is_stats(value: object) -> TypeGuard[SupportsSnapshot]:
    return callable(getattr(value, "snapshot", None))


def _sources(stats: StatsArgument) -> tuple[tuple[str | None, SupportsSnapshot], ...]:
    """The counters to export, each with its name (None for a lone one).

    A mapping is copied: the set of counters is fixed at construction, so
    that a scrape never iterates a dict the program is changing."""
    if _is_stats(stats):
        return ((None, stats),)
    if not isinstance(stats, Mapping):
        raise TypeError(
            "stats must be a RetryStats or a mapping of names to RetryStats, "
            f"not {type(stats).__name__}"
        )
    if not stats:
        raise ValueError("stats is an empty mapping: there is nothing to export")
    sources = []
    for name, value in stats.items():
        if not isinstance(name, str):
            raise TypeError(f"the names of stats must be str, not {type(name).__name__}")
        if not _is_stats(value):
            raise TypeError(f"stats[{name!r}] must be a RetryStats, not {type(value).__name__}")
        sources.append((name, value))
    return tuple(sources)


# --- Prometheus ---------------------------------------------------------------


def _counter_family_type() -> type[CounterMetricFamily]:
    try:
        from prometheus_client.metrics_core import CounterMetricFamily
    except ImportError as error:
        raise ImportError(_PROMETHEUS_MISSING) from error
    return CounterMetricFamily


def _check_label_name(name: object, what: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not _LABEL_NAME.match(name):
        raise ValueError(f"{what} {name!r} is not a Prometheus label name")
    return name


def _constant_labels(labels: Mapping[str, str] | None, taken: tuple[str, ...]) -> dict[str, str]:
    checked: dict[str, str] = {}
    for name, value in (labels or {}).items():
        _check_label_name(name, "a label name")
        if name in taken:
            raise ValueError(f"the label {name!r} is the collector's own: pick another name")
        if not isinstance(value, str):
            raise TypeError(
                f"the value of label {name!r} must be a str, not {type(value).__name__}"
            )
        checked[name] = value
    return checked


class RetryStatsCollector:
    """RetryStatsCollector(stats, *, labels=None, stats_label="stats")

    A ``prometheus_client`` custom collector of ``RetryStats`` counters,
    registered as any other: ``REGISTRY.register(RetryStatsCollector(stats))``.

    ``stats``: one ``RetryStats``, or a mapping of names to ``RetryStats``
    whose name is the value of the label ``stats_label``.  ``labels``:
    constant labels put on every sample (``{"service": "api"}``).

    Each metric is a counter named ``redis_backoff_c_<counter>`` (exposed
    with ``_total``); the five give-up counters are one metric,
    ``redis_backoff_c_give_ups``, with a label ``reason``.  Each scrape reads
    each ``RetryStats`` once (``snapshot()``, one consistent reading), so its
    outcomes add up to its calls.  ``describe()`` lists the metrics without
    reading anything, so registering reads nothing either."""

    def __init__(
        self,
        stats: StatsArgument,
        *,
        labels: Mapping[str, str] | None = None,
        stats_label: str = "stats",
    ) -> None:
        self._family_type = _counter_family_type()
        self._sources = _sources(stats)
        named = self._sources[0][0] is not None
        if named:
            _check_label_name(stats_label, "stats_label")
            if stats_label == "reason":
                raise ValueError("stats_label 'reason' is the give-ups' own label")
        taken = ("reason", stats_label) if named else ("reason",)
        constant = _constant_labels(labels, taken)
        self._constant, self._stats_label = constant, stats_label if named else None
        self._label_names = [*constant, *([stats_label] if named else [])]
        # The label values of each source, in self._label_names' order.
        self._label_values = [
            [*constant.values(), *([name] if name is not None else [])] for name, _ in self._sources
        ]

    def _empty_families(self) -> list[CounterMetricFamily]:
        return [
            self._family_type(
                family.prometheus,
                family.description,
                labels=[*self._label_names, *(["reason"] if family.by_reason else [])],
                unit=family.prometheus_unit,
            )
            for family in _FAMILIES
        ]

    def describe(self) -> Iterator[CounterMetricFamily]:
        """The metrics, without samples: what a registry checks for clashes."""
        return iter(self._empty_families())

    def collect(self) -> Iterator[CounterMetricFamily]:
        """The metrics, from one ``snapshot()`` of each ``RetryStats``."""
        readings = [stats.snapshot() for _, stats in self._sources]
        families = self._empty_families()
        for metric, family in zip(families, _FAMILIES):
            for values, snapshot in zip(self._label_values, readings):
                for reason, key in family.keys:
                    labels = [*values, reason] if reason else values
                    metric.add_metric(labels, snapshot[key])
        return iter(families)

    def __repr__(self) -> str:
        names = [name for name, _ in self._sources if name is not None] or "one RetryStats"
        return (
            f"RetryStatsCollector(stats={names}, labels={self._constant}, "
            f"stats_label={self._stats_label!r})"
        )


# --- OpenTelemetry, through redis-py's observability --------------------------


def _redis_py_meter_provider() -> MeterProvider:
    """The MeterProvider redis-py's observability records its metrics
    through; RuntimeError while that observability is not enabled."""
    import redis

    try:
        from redis.observability.config import TelemetryOption
        from redis.observability.providers import get_observability_instance
    except ImportError as error:
        raise ImportError(
            f"redis-py {redis.__version__} has no OpenTelemetry observability "
            "(redis.observability, in redis-py 8.0 and later): register_otel_metrics "
            "needs it; RetryStatsCollector exports to Prometheus without it"
        ) from error
    manager = get_observability_instance().get_provider_manager()
    if manager is None or TelemetryOption.METRICS not in manager.config.enabled_telemetry:
        raise RuntimeError(_NOT_ENABLED)
    # redis-py's own check: a RuntimeError of its own when no MeterProvider is set.
    provider: MeterProvider | None = manager.get_meter_provider()
    if provider is None:
        raise RuntimeError(_NOT_ENABLED)
    return provider


def _redis_py_meter(provider: MeterProvider) -> Meter:
    """The meter redis-py's recorder records on: its name and version."""
    from redis.observability.metrics import RedisMetricsCollector

    return provider.get_meter(RedisMetricsCollector.METER_NAME, RedisMetricsCollector.METER_VERSION)


def _redis_py_base_attributes() -> dict[str, AttributeValue]:
    """redis-py's attributes of every metric: ``db.system`` and
    ``redis.client.library``."""
    from redis.observability.attributes import AttributeBuilder

    return dict(AttributeBuilder.build_base_attributes())


def _attribute_key(attributes: Mapping[str, AttributeValue]) -> tuple[tuple[str, str], ...]:
    # Values may be lists (unhashable): their repr identifies them well enough.
    return tuple(sorted((name, repr(value)) for name, value in attributes.items()))


class _MeterInstruments:
    """The retry instruments of one meter, and the registrations they serve.

    An SDK meter creates an instrument of a name once: a second
    ``create_observable_counter`` of the name returns the first instrument
    and drops the new callbacks.  So the instruments are created once per
    meter, and each registration adds its counters to what their callbacks
    read.

    The SDK calls the callbacks one after the other at each collection.  The
    first callback of a collection reads every ``snapshot()`` and the others
    answer from that reading, so one collection exports one consistent
    reading of each ``RetryStats``.  A collection starts where a callback
    comes back for a second time: every instrument has answered from the
    reading since it was taken."""

    def __init__(self, meter: Meter) -> None:
        from opentelemetry.metrics import Observation

        self._observation = Observation
        self._lock = threading.Lock()
        self._registrations: list[OTelRetryMetrics] = []
        self._readings: list[tuple[Mapping[str, AttributeValue], Mapping[str, Any]]] | None = None
        self._served: set[str] = set()
        for family in _FAMILIES:
            meter.create_observable_counter(
                family.otel,
                callbacks=[self._callback(family)],
                unit=family.otel_unit,
                description=family.description,
            )

    def _callback(self, family: _Family) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return self._observe(family)

        return observe

    def _observe(self, family: _Family) -> list[Observation]:
        with self._lock:
            if self._readings is None or family.otel in self._served:
                self._readings = [
                    (attributes, stats.snapshot())
                    for registration in self._registrations
                    for attributes, stats in registration._sources
                ]
                self._served = set()
            self._served.add(family.otel)
            readings = self._readings
        return [
            self._observation(
                snapshot[key],
                {**attributes, OTEL_REASON: reason} if reason else attributes,
            )
            for attributes, snapshot in readings
            for reason, key in family.keys
        ]

    def add(self, registration: OTelRetryMetrics) -> None:
        with self._lock:
            used = {
                _attribute_key(attributes)
                for other in self._registrations
                for attributes, _ in other._sources
            }
            for attributes, _ in registration._sources:
                if _attribute_key(attributes) in used:
                    raise ValueError(
                        "these attributes are already registered on redis-py's meter: "
                        f"{dict(attributes)!r}; give each RetryStats its own "
                        "(a name in a mapping, or attributes=)"
                    )
            self._registrations.append(registration)

    def remove(self, registration: OTelRetryMetrics) -> None:
        with self._lock:
            if registration in self._registrations:
                self._registrations.remove(registration)


# One _MeterInstruments per MeterProvider (by identity, the provider kept
# alive with it).  By provider, not by meter: the API's stand-in provider (the
# global one before the program sets it) gives a new stand-in meter at each
# get_meter(), all of them the same SDK meter once it is set.
_meters: dict[int, tuple[MeterProvider, _MeterInstruments]] = {}
_meters_lock = threading.Lock()


def _instruments_of(provider: MeterProvider) -> _MeterInstruments:
    with _meters_lock:
        entry = _meters.get(id(provider))
        if entry is None:
            entry = (provider, _MeterInstruments(_redis_py_meter(provider)))
            _meters[id(provider)] = entry
        return entry[1]


class OTelRetryMetrics:
    """What :func:`register_otel_metrics` registered: ``unregister()`` takes
    its ``RetryStats`` out of the instruments (they observe nothing of them
    from the next collection on).  Also a context manager that unregisters on
    exit."""

    #: The names of the instruments, in the order they were created.
    instrument_names: Final = tuple(family.otel for family in _FAMILIES)

    def __init__(
        self,
        instruments: _MeterInstruments,
        sources: tuple[tuple[Mapping[str, AttributeValue], SupportsSnapshot], ...],
    ) -> None:
        self._instruments = instruments
        self._sources = sources

    @property
    def attributes(self) -> list[dict[str, AttributeValue]]:
        """The attributes of each registered ``RetryStats`` (those of the
        give-ups add :data:`OTEL_REASON`)."""
        return [dict(attributes) for attributes, _ in self._sources]

    def unregister(self) -> None:
        """Stop exporting these ``RetryStats``; a second call does nothing."""
        self._instruments.remove(self)

    def __enter__(self) -> OTelRetryMetrics:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.unregister()


def register_otel_metrics(
    stats: StatsArgument,
    *,
    attributes: Mapping[str, AttributeValue] | None = None,
    stats_attribute: str = f"{OTEL_PREFIX}.stats",
) -> OTelRetryMetrics:
    """Observe ``RetryStats`` counters with OpenTelemetry, on redis-py's meter.

    redis-py's observability must be enabled first
    (``redis.observability.get_observability_instance().init(OTelConfig())``,
    after setting the global MeterProvider): the counters become observable
    counters (asynchronous instruments, read at each collection) on the meter
    redis-py records its own metrics on (scope ``redis-py``), named
    ``redis.client.retry.<counter>``, with redis-py's attributes of every
    metric (``db.system``, ``redis.client.library``) and ``attributes``.
    The give-ups are one instrument, ``redis.client.retry.give_ups``, with an
    attribute ``redis.client.retry.reason``.  ``stats``: one ``RetryStats``, or a mapping of
    names to ``RetryStats`` whose name is the value of ``stats_attribute``.

    RuntimeError when redis-py's observability is not enabled (the counters
    would otherwise go to a meter that redis-py's own metrics do not use, or
    to none); ImportError without the OpenTelemetry API, or with a redis-py
    that has no observability.  ``OTelConfig``'s metric groups choose
    redis-py's own metrics, not these: calling this function asks for them.

    Several calls may register several ``RetryStats``, each with attributes
    of its own (ValueError for an attribute set already registered).  Returns
    an :class:`OTelRetryMetrics` whose ``unregister()`` stops exporting them."""
    try:
        import opentelemetry.metrics  # noqa: F401 - only to say what is missing
    except ImportError as error:
        raise ImportError(_OTEL_MISSING) from error
    sources = _sources(stats)
    extra = dict(attributes or {})
    for name in extra:
        if not isinstance(name, str) or not name:
            raise TypeError(f"attribute names must be non-empty str, not {name!r}")
    named = sources[0][0] is not None
    if named and (not isinstance(stats_attribute, str) or not stats_attribute):
        raise TypeError(f"stats_attribute must be a non-empty str, not {stats_attribute!r}")
    for own in (OTEL_REASON, *([stats_attribute] if named else [])):
        if own in extra:
            raise ValueError(f"the attribute {own!r} is the exporter's own: pick another name")
    provider = _redis_py_meter_provider()
    base = {**_redis_py_base_attributes(), **extra}
    registration = OTelRetryMetrics(
        _instruments_of(provider),
        tuple(
            ({**base, stats_attribute: name} if name is not None else base, value)
            for name, value in sources
        ),
    )
    registration._instruments.add(registration)
    return registration
