"""A round's families, rendered per format on demand, and how a scrape picks its format."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import trio
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from gpustack_devicemanager.incremental import (
    Body,
    FamilyState,
    Piece,
    Renderer,
    openmetrics_pieces,
    text_pieces,
)

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


class Rendered:
    """A round's exposition: each format rendered when first asked for, then kept.

    Rendering is incremental across rounds (:mod:`gpustack_devicemanager.incremental`): the
    ``renderer`` keeps what the last render made, so only changed families cost anything.
    One thread at a time renders with a given renderer (:meth:`ExpositionHolder.prepare`).
    """

    def __init__(self, families: Sequence[Family], renderer: Renderer | None = None) -> None:
        self.families = families
        self._renderer = renderer if renderer is not None else Renderer()
        self._lines: list[tuple[FamilyState, Piece]] | None = None
        self._client: tuple[bytes, bytes] | None = None
        self._bodies: dict[bool, Body] = {}

    def body(self, openmetrics: bool) -> Body:
        """One format's body (its ``ETag`` made; identity and gzip bytes on first use)."""
        found = self._bodies.get(openmetrics)
        if found is not None:
            return found
        if self._lines is None and self._client is None:
            self._lines = self._renderer.pieces(
                [(f.name, f.documentation, f.labels, f.samples) for f in self.families]
            )
            if self._lines is None:
                self._client = _render_with_client(self.families)
        if self._client is not None:
            pieces = [Piece(self._client[1 if openmetrics else 0])]
        elif openmetrics:
            pieces = openmetrics_pieces(self._lines or [])
        else:
            pieces = text_pieces(self._lines or [])
        made = self._bodies[openmetrics] = Body(pieces)
        return made

    def ready(self, openmetrics: bool, gzipped: bool) -> bool:
        """Whether a scrape of this format and encoding only hands over bytes made already."""
        found = self._bodies.get(openmetrics)
        if found is None:
            return False
        return found.made(gzipped)

    def make(self, openmetrics: bool, gzipped: bool) -> None:
        """Make what such a scrape serves (in a worker thread: tens of ms at the bound)."""
        body = self.body(openmetrics)
        if gzipped:
            body.gzipped  # noqa: B018 - made and kept (cached_property)
        else:
            body.identity  # noqa: B018

    @property
    def text_body(self) -> Body:
        """The classic text exposition."""
        return self.body(False)

    @property
    def openmetrics_body(self) -> Body:
        """The OpenMetrics exposition."""
        return self.body(True)

    @property
    def text(self) -> bytes:
        """The classic text exposition, uncompressed."""
        return self.text_body.identity

    @property
    def openmetrics(self) -> bytes:
        """The OpenMetrics exposition, uncompressed."""
        return self.openmetrics_body.identity


def render(families: Sequence[Family]) -> Rendered:
    """A round on its own (no earlier round to build on); formats are rendered when read."""
    return Rendered(families)


def _render_with_client(families: Sequence[Family]) -> tuple[bytes, bytes]:
    """prometheus_client's own encoders: the reference the direct renderer must equal."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_RoundCollector(families))
    return generate_text(registry), generate_openmetrics(registry)  # type: ignore[no-untyped-call]


_go_float: Callable[[float], str] = floatToGoString
"""Go's float formatting as the client writes it (``+Inf``, ``NaN``, ``1e+06``); untyped there."""

_METRIC_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""Colons are legal in metric names, but the client's OpenMetrics encoder rewrites them in
sample names; a family with one goes to the client, whose output stays the reference."""
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _render_direct(families: Sequence[Family]) -> tuple[bytes, bytes] | None:
    """Both expositions in one pass, byte for byte what prometheus_client writes for gauges.

    The client builds a sample object, a label dict and a sorted item list per series; at the
    bound (~10k series a round) that was most of a round's CPU. Here each family sorts its
    label names once, each distinct label value is escaped once, and the sample lines are
    shared by both formats (they differ only in ``# HELP`` escaping and ``# EOF``). Names
    outside the legacy character set (never ours) fall back to the client (``None``).
    """
    text: list[str] = []
    openmetrics: list[str] = []
    escaped: dict[str, str] = {}
    for family in families:
        if not _METRIC_NAME.fullmatch(family.name) or not all(
            _LABEL_NAME.fullmatch(label) for label in family.labels
        ):
            return None
        name = family.name
        order = sorted(range(len(family.labels)), key=lambda i: family.labels[i])
        keys = [f'{family.labels[i]}="' for i in order]
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        text.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
        quoted = doc.replace('"', r"\"")
        openmetrics.append(f"# HELP {name} {quoted}\n# TYPE {name} gauge\n")
        lines: list[str] = []
        for values, value in family.samples:
            if keys:
                parts = []
                for key, i in zip(keys, order, strict=True):
                    raw = values[i]
                    done = escaped.get(raw)
                    if done is None:
                        done = escaped[raw] = _escape_value(raw)
                    parts.append(key + done + '"')
                lines.append(f"{name}{{{','.join(parts)}}} {_go_float(value)}\n")
            else:
                lines.append(f"{name} {_go_float(value)}\n")
        text.extend(lines)
        openmetrics.extend(lines)
    openmetrics.append("# EOF\n")
    return "".join(text).encode(), "".join(openmetrics).encode()


class ExpositionHolder:
    """The latest round; before the first, an empty exposition.

    A round is published as families and rendered per format when a scrape first asks for it
    (:meth:`prepare`), so a round nobody scrapes renders nothing and a format nobody asks for
    is never made. Later scrapes of the round only hand over the bytes made for the first.
    """

    def __init__(self) -> None:
        self._renderer = Renderer()
        self.current = Rendered((), self._renderer)
        self._making = trio.Lock()

    def publish(self, families: Sequence[Family]) -> None:
        """Swap in a round's families atomically; its bytes are made on demand."""
        self.current = Rendered(families, self._renderer)

    def negotiate(self, accept: str) -> tuple[Body, str]:
        """The body and content type for a scrape's ``Accept`` header (made here if need be)."""
        if prefers_openmetrics(accept):
            return self.current.openmetrics_body, OPENMETRICS
        return self.current.text_body, TEXT

    async def prepare(self, accept: str, *, gzipped: bool) -> tuple[Body, str]:
        """Like :meth:`negotiate`, making a format's bytes off the event loop the first time.

        Scrapes that arrive while it is being made wait for it rather than make it again; one
        render at a time also keeps the renderer's state to one thread.
        """
        current = self.current
        openmetrics = prefers_openmetrics(accept)
        if not current.ready(openmetrics, gzipped):
            async with self._making:
                if not current.ready(openmetrics, gzipped):
                    await trio.to_thread.run_sync(current.make, openmetrics, gzipped)
        return current.body(openmetrics), OPENMETRICS if openmetrics else TEXT


def _media_ranges(accept: str) -> list[tuple[str, float]]:
    """``Accept`` as (media range, quality) pairs; a malformed ``q`` counts as refusal."""
    ranges: list[tuple[str, float]] = []
    for part in accept.split(","):
        media, *params = part.split(";")
        media = media.strip().lower()
        if not media:
            continue
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = min(1.0, max(0.0, float(value.strip())))
                except ValueError:
                    quality = 0.0
        ranges.append((media, quality))
    return ranges


def _quality(ranges: Sequence[tuple[str, float]], media: str) -> tuple[int, float] | None:
    """The most specific range matching ``media``: (2 exact, 1 ``type/*``, 0 ``*/*``, quality).

    RFC 9110 §12.5.1: the most specific range decides; ``None`` when no range matches.
    """
    kind = media.split("/", 1)[0]
    best: tuple[int, float] | None = None
    for candidate, quality in ranges:
        if candidate == media:
            specificity = 2
        elif candidate == f"{kind}/*":
            specificity = 1
        elif candidate == "*/*":
            specificity = 0
        else:
            continue
        if best is None or specificity > best[0] or (specificity == best[0] and quality > best[1]):
            best = (specificity, quality)
    return best


def prefers_openmetrics(accept: str) -> bool:
    """Whether a scrape's ``Accept`` asks for OpenMetrics over the classic text format.

    Prometheus lists both with q-values and picks by them, so a substring test is wrong both
    ways: ``application/openmetrics-text;q=0`` means *not* OpenMetrics, and a client that ranks
    ``text/plain`` above it wants text. OpenMetrics is chosen only when it is acceptable
    (``q > 0``) and ranked above text, or equal to it when named outright (a bare ``*/*``,
    as curl sends, keeps the classic text). Anything else — no header, neither acceptable —
    gets text, as ``prometheus_client`` does, rather than a 406 a scraper records as a failure.
    """
    ranges = _media_ranges(accept)
    openmetrics = _quality(ranges, "application/openmetrics-text")
    if openmetrics is None or openmetrics[1] <= 0:
        return False
    text = _quality(ranges, "text/plain")
    if text is None or openmetrics[1] > text[1]:
        return True
    return openmetrics[1] == text[1] and openmetrics[0] == 2
