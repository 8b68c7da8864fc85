"""Rendering a round's families once, in both exposition formats, for bytes-only scrapes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry

from gpustack_devicemanager.encoded import Encoded

TEXT = CONTENT_TYPE_LATEST


@dataclass
class Family:
    """One gauge family and its samples, in the order they were added."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, values: tuple[str, ...], value: float) -> None:
        """Add one sample; the label values line up with ``labels``."""
        self.samples.append((values, value))


class _RoundCollector(Collector):
    def __init__(self, families: Sequence[Family]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        metrics: list[Metric] = []
        for family in self.families:
            gauge = GaugeMetricFamily(family.name, family.documentation, labels=family.labels)
            for values, value in family.samples:
                gauge.add_metric(list(values), value)
            metrics.append(gauge)
        return metrics


@dataclass(frozen=True)
class Rendered:
    """A round's exposition in both formats, each also gzipped once."""

    text_body: Encoded
    openmetrics_body: Encoded

    @property
    def text(self) -> bytes:
        """The classic text exposition, uncompressed."""
        return self.text_body.identity

    @property
    def openmetrics(self) -> bytes:
        """The OpenMetrics exposition, uncompressed."""
        return self.openmetrics_body.identity


def render(families: Sequence[Family]) -> Rendered:
    """Render and compress once; scrapes choose a format and an encoding and write bytes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RoundCollector(families))
    return Rendered(
        Encoded.of(generate_text(registry)),
        Encoded.of(generate_openmetrics(registry)),  # type: ignore[no-untyped-call]
    )


class ExpositionHolder:
    """The latest rendered round; before the first, an empty exposition."""

    def __init__(self) -> None:
        self.current = render(())

    def publish(self, rendered: Rendered) -> None:
        """Swap in a round's bytes atomically."""
        self.current = rendered

    def negotiate(self, accept: str) -> tuple[Encoded, str]:
        """The body and content type for a scrape's ``Accept`` header."""
        if "application/openmetrics-text" in accept:
            return self.current.openmetrics_body, OPENMETRICS
        return self.current.text_body, TEXT
