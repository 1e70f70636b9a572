"""What /metrics shows, rendered by prometheus-client.

Two kinds of numbers:

- counters and gauges kept as plain numbers by whoever counts them (the process, each
  background loop): a `MetricSource` hands them over as `Sample`s, exported under their
  names, unlabelled, as before. A new loop adds its stats object to the sources the app
  collects (api.app); nothing else lists those names;
- histograms of how long things take, observed where they happen through the functions
  below (`observe_*`), one per histogram, so callers never touch prometheus-client.

Label values come from fixed sets (reason codes, step names, outcomes) or are bounded
(`BoundedLabel`: GraphQL operation names past the first MAX_OPERATION_NAMES are
"other"), so a client cannot grow /metrics without end. spacedock serves from one
process per replica; no multiprocess mode is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

MetricKind = Literal["counter", "gauge"]

# Each histogram's `_created` series says when the process started; the process
# collector says that already.
disable_created_metrics()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Sample:
    name: str
    kind: MetricKind
    help: str
    value: int | float


class MetricSource(Protocol):
    def samples(self) -> list[Sample]:
        """The source's current values, one sample per metric."""
        ...


class BoundedLabel:
    """A label whose values come from outside (a client's operation names): the first
    `cap` distinct values are kept, later ones and any longer than `max_chars` are
    `overflow`."""

    def __init__(self, cap: int, overflow: str = "other", max_chars: int = 64) -> None:
        self.cap = cap
        self.overflow = overflow
        self.max_chars = max_chars
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.cap or len(value) > self.max_chars:
            return self.overflow
        self._seen.add(value)
        return value


# -- histograms ----------------------------------------------------------------
# Seconds, from a cached read (~1 ms) to a probe's or a cloud call's timeout.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Steps that wait on clusters and clouds, and app revisions that roll out, take longer.
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
MAX_OPERATION_NAMES = 200
UNNAMED_OPERATION = "unnamed"

REQUEST_DURATION = Histogram(
    "spacedock_graphql_request_duration_seconds",
    "GraphQL requests (HTTP) and query or mutation operations (WebSocket), from the request "
    "to its answer sent, by operation name, type (query, mutation; none: no operation ran) "
    "and transport.",
    ["operation", "type", "transport"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
PROBE_DURATION = Histogram(
    "spacedock_probe_duration_seconds",
    "Probes, credential lookup included, by outcome: the reason code (PROBE_OK, TLS, TIMEOUT…).",
    ["outcome"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
RECONCILE_STEP_DURATION = Histogram(
    "spacedock_reconcile_step_duration_seconds",
    "CloudSpace reconcile steps, by step and outcome (done, wait, failed).",
    ["step", "outcome"],
    buckets=SLOW_BUCKETS,
    registry=None,
)
FANOUT_DURATION = Histogram(
    "spacedock_fanout_delivery_seconds",
    "Handing one subscription event to every member of its group, from the event's result "
    "to the last member's frame sent.",
    buckets=LATENCY_BUCKETS,
    registry=None,
)
APP_REVISION_DURATION = Histogram(
    "spacedock_app_revision_duration_seconds",
    "App revisions, from their start to their outcome, by outcome.",
    ["outcome"],
    buckets=SLOW_BUCKETS,
    registry=None,
)
HISTOGRAMS = (
    REQUEST_DURATION,
    PROBE_DURATION,
    RECONCILE_STEP_DURATION,
    FANOUT_DURATION,
    APP_REVISION_DURATION,
)
OPERATION_NAMES = BoundedLabel(MAX_OPERATION_NAMES)
APP_REVISION_OUTCOMES = BoundedLabel(16)


def operation_label(name: str | None) -> str:
    """A GraphQL operation's name as /metrics labels it."""
    return UNNAMED_OPERATION if not name else OPERATION_NAMES(name)


# The request histogram's series by labels: `labels()` checks and converts its arguments
# under a lock on every call, and every request observes one. Bounded as the labels are
# (MAX_OPERATION_NAMES names).
_request_series: dict[tuple[str, str, str], Histogram] = {}


def observe_request(seconds: float, operation: str, operation_type: str, transport: str) -> None:
    """`operation`: an `operation_label`, or core.common.request_scope.UNKNOWN_OPERATION."""
    labels = (operation, operation_type, transport)
    series = _request_series.get(labels)
    if series is None:
        series = _request_series[labels] = REQUEST_DURATION.labels(*labels)
    series.observe(seconds)


def observe_probe(seconds: float, outcome: str) -> None:
    """`outcome`: a StatusReasonCode's value (PROBE_OK or the failure's)."""
    PROBE_DURATION.labels(outcome).observe(seconds)


def observe_reconcile_step(seconds: float, step: str, outcome: str) -> None:
    RECONCILE_STEP_DURATION.labels(step, outcome).observe(seconds)


def observe_fanout(seconds: float) -> None:
    FANOUT_DURATION.observe(seconds)


def observe_app_revision(seconds: float, outcome: str) -> None:
    """One app revision's duration, from its start to `outcome` (a fixed word such as
    READY or FAILED, never an id: past 16 distinct outcomes the label is "other")."""
    APP_REVISION_DURATION.labels(APP_REVISION_OUTCOMES(outcome)).observe(seconds)


# -- exposition ------------------------------------------------------------------
class _Sources:
    """The sources' samples as metric families, read at each scrape."""

    def __init__(self, sources: Callable[[], Iterable[MetricSource]]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self._sources():
            for sample in source.samples():
                family: Metric
                if sample.kind == "counter":
                    family = CounterMetricFamily(sample.name, sample.help, value=sample.value)
                else:
                    family = GaugeMetricFamily(sample.name, sample.help, value=sample.value)
                yield family


class Exposition:
    """Everything /metrics renders for one app: the process (CPU, memory, file
    descriptors, garbage collection), the histograms and the sources' samples."""

    def __init__(self, sources: Iterable[MetricSource]) -> None:
        listed = list(sources)
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        for histogram in HISTOGRAMS:
            self.registry.register(histogram)
        self.registry.register(_Sources(lambda: listed))

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The text for a scraper's Accept header (Prometheus text, or OpenMetrics when
        asked for), and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
