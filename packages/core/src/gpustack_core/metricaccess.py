"""A MetricAccess's declared slice: what each ``spec.metrics`` entry is, and the query it becomes.

``observability.gpustack.ai/v1`` MetricAccess (docs/multi-tenant-metrics.md, "Deliver") names
the series a tenant wants copied into its own Prometheus. Each entry is one of three things,
told apart here once so the admission webhook and the controller cannot disagree:

- an **exact** metric name (``gpustack_instance_memory_used_bytes``);
- a **regex** over metric names (``gpustack_instance_(cpu|memory)_.*``), RE2 syntax, fully
  anchored as Prometheus anchors it;
- a PromQL **selector** (``{__name__=~"gpustack_.*", instance="x"}`` or ``name{…}``): only an
  instant vector selector, no function, range, offset or operator.

Anything else is refused with one line saying why. Each entry becomes a list of matchers, and
the slice is queried as one range selector per entry; with ``metricIsolation`` a
``namespace="<source>"`` matcher is added to each (the isolating proxy adds it again). A
selector naming a namespace other than the source, or naming it by a regex or a negative
match, is refused: a declared slice never reaches past its source.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from gpustack_core.names import dns1123_label_problem

GROUP: Final = "observability.gpustack.ai"
VERSION: Final = "v1"
KIND: Final = "MetricAccess"
PLURAL: Final = "metricaccesses"
NAMESPACE_LABEL: Final = "namespace"
"""The series label that says which tenant a series belongs to (the exporter's and kube's)."""
MAX_METRICS: Final = 64
MAX_ENTRY: Final = 1024
MIN_INTERVAL: Final = 5.0
MAX_INTERVAL: Final = 3600.0
DEFAULT_WRITE_PATH: Final = "/api/v1/write"

_METRIC_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_DURATION: Final = re.compile(r"([0-9]+)(ms|s|m|h)")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_RE2_UNSUPPORTED: Final = re.compile(r"\(\?[=!<]|\\[1-9]|\(\?P=")
"""Lookarounds and backreferences: Python's ``re`` takes them, Prometheus' RE2 refuses them."""
_OPS: Final = ("=~", "!~", "!=", "=")


class Kind(StrEnum):
    """What a ``spec.metrics`` entry was read as."""

    EXACT = "exact"
    REGEX = "regex"
    SELECTOR = "selector"


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``name op "value"``."""

    name: str
    op: str
    value: str

    def render(self) -> str:
        """PromQL text; the value escaped as a double-quoted Go string."""
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op}"{escaped}"'


@dataclass(frozen=True)
class Entry:
    """One declared entry: as written, what it was read as, and its matchers."""

    text: str
    kind: Kind
    matchers: tuple[Matcher, ...]

    def selector(self, namespace: str | None) -> str:
        """The instant-vector selector, with ``namespace="<namespace>"`` added when given."""
        matchers = [m for m in self.matchers if not (namespace and m.name == NAMESPACE_LABEL)]
        if namespace:
            matchers.append(Matcher(NAMESPACE_LABEL, "=", namespace))
        return "{" + ",".join(m.render() for m in matchers) + "}"


class MetricsError(ValueError):
    """An entry that cannot be taken; the message is one line naming the entry."""


def _regex_problem(pattern: str) -> str | None:
    if _RE2_UNSUPPORTED.search(pattern):
        return "lookarounds and backreferences are not RE2 (Prometheus' regex syntax)"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"not a regex: {exc}"
    return None


class _Reader:
    """A cursor over one selector's text (PromQL's lexer, for the selector subset only)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n":
            self.pos += 1

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        if self.peek() != char:
            found = self.text[self.pos : self.pos + 10] or "the end"
            raise MetricsError(f"expected {char!r} at column {self.pos + 1}, found {found!r}")
        self.pos += 1

    def name(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip()
        match = pattern.match(self.text, self.pos)
        if match is None:
            raise MetricsError(f"expected a {what} at column {self.pos + 1}")
        self.pos = match.end()
        return match.group()

    def op(self) -> str:
        self.skip()
        for op in _OPS:
            if self.text.startswith(op, self.pos):
                self.pos += len(op)
                return op
        raise MetricsError(f"expected one of = != =~ !~ at column {self.pos + 1}")

    def string(self) -> str:
        quote = self.peek()
        if quote not in {'"', "'", "`"}:
            raise MetricsError(f"expected a quoted string at column {self.pos + 1}")
        self.pos += 1
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'"}
        while self.pos < len(self.text):
            char = self.text[self.pos]
            self.pos += 1
            if char == quote:
                return "".join(out)
            if char == "\\" and quote != "`":
                if self.pos >= len(self.text) or self.text[self.pos] not in escapes:
                    raise MetricsError(f"unsupported escape at column {self.pos}")
                out.append(escapes[self.text[self.pos]])
                self.pos += 1
            else:
                out.append(char)
        raise MetricsError("unterminated string")


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """The matchers of an instant vector selector ``[name]{l op "v", …}``; anything else refused."""
    reader = _Reader(text)
    matchers: list[Matcher] = []
    if reader.peek() != "{":
        matchers.append(Matcher("__name__", "=", reader.name(_METRIC_NAME, "metric name")))
    reader.expect("{")
    while reader.peek() != "}":
        label = reader.name(_LABEL_NAME, "label name")
        op = reader.op()
        value = reader.string()
        if op in {"=~", "!~"} and (why := _regex_problem(value)):
            raise MetricsError(f"{label}{op}: {why}")
        matchers.append(Matcher(label, op, value))
        if reader.peek() == ",":
            reader.pos += 1
        elif reader.peek() != "}":
            raise MetricsError(f"expected ',' or '}}' at column {reader.pos + 1}")
    reader.expect("}")
    if reader.peek():
        rest = reader.text[reader.pos : reader.pos + 12]
        raise MetricsError(
            f"only a plain selector is taken (no range, offset, function or operator): {rest!r}"
        )
    names = [m for m in matchers if m.name == "__name__"]
    if len([m for m in matchers if m.name == "__name__" and m.op == "="]) > 1:
        raise MetricsError("names the metric twice")
    if not any(_matches_something(m) for m in names):
        raise MetricsError("a selector must name its metrics with __name__ = or =~ (or a name)")
    return tuple(matchers)


def _matches_something(m: Matcher) -> bool:
    """A positive ``__name__`` matcher that does not also match the empty name."""
    if m.op == "=":
        return m.value != ""
    return m.op == "=~" and re.fullmatch(m.value, "") is None


def classify(text: str) -> Entry:
    """What one ``spec.metrics`` entry is; :class:`MetricsError` with one line if none."""
    if not text.strip():
        raise MetricsError("an empty entry")
    if len(text) > MAX_ENTRY:
        raise MetricsError(f"longer than {MAX_ENTRY} characters")
    if _METRIC_NAME.fullmatch(text):
        return Entry(text, Kind.EXACT, (Matcher("__name__", "=", text),))
    if "{" in text:
        return Entry(text, Kind.SELECTOR, parse_selector(text))
    if any(c.isspace() for c in text) or '"' in text:
        raise MetricsError("neither a metric name, a regex over names, nor a selector")
    if why := _regex_problem(text):
        raise MetricsError(why)
    if re.fullmatch(text, "") is not None:
        raise MetricsError("a regex that matches the empty name matches every metric")
    return Entry(text, Kind.REGEX, (Matcher("__name__", "=~", text),))


def namespace_problem(entry: Entry, source: str) -> str | None:
    """Why ``entry`` reaches past ``source`` (a ``namespace`` matcher other than ``="source"``)."""
    for m in entry.matchers:
        if m.name == NAMESPACE_LABEL and not (m.op == "=" and m.value == source):
            return f"its {m.render()} names other namespaces than the source {source!r}"
    return None


def parse_interval(text: str) -> float:
    """``30s``, ``1m``, ``1m30s``: seconds, within [:data:`MIN_INTERVAL`, :data:`MAX_INTERVAL`]."""
    parts = list(_DURATION.finditer(text))
    if not text or "".join(p.group() for p in parts) != text:
        raise MetricsError(f"interval {text!r} is not a duration like 30s, 1m or 1m30s")
    seconds = sum(int(p.group(1)) * _UNIT_SECONDS[p.group(2)] for p in parts)
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise MetricsError(
            f"interval {text!r} is outside {MIN_INTERVAL:g}s..{MAX_INTERVAL / 60:g}m"
        )
    return seconds


@dataclass(frozen=True)
class Target:
    """The tenant's Prometheus: a Service, its port, its namespace, the write path."""

    service: str
    port: int
    namespace: str
    path: str
    extra_labels: Mapping[str, str]


@dataclass(frozen=True)
class Spec:
    """A MetricAccess's spec, every part checked."""

    source: str
    isolation: bool
    entries: tuple[Entry, ...]
    enabled: bool
    interval: float
    target: Target | None


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise MetricsError(f"{where}.{key} must be a string")
    return value


def _target(raw: object, own_namespace: str) -> Target:
    if not isinstance(raw, Mapping):
        raise MetricsError("spec.remoteWrite.target must be an object")
    prom = raw.get("prometheus")
    if raw.get("type", "prometheus") != "prometheus" or not isinstance(prom, Mapping):
        raise MetricsError("spec.remoteWrite.target: only type prometheus, with a prometheus block")
    where = "spec.remoteWrite.target.prometheus"
    service = _str(prom, "serviceName", where)
    namespace = prom.get("namespace", own_namespace)
    for what, value in (("serviceName", service), ("namespace", namespace)):
        if not isinstance(value, str):
            raise MetricsError(f"{where}.{what} must be a string")
        if why := dns1123_label_problem(value):
            raise MetricsError(f"{where}.{what}: {why}")
    port = prom.get("servicePort")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise MetricsError(f"{where}.servicePort must be a port number 1-65535")
    path = prom.get("path", DEFAULT_WRITE_PATH)
    if not isinstance(path, str) or not path.startswith("/") or "?" in path or "#" in path:
        raise MetricsError(f"{where}.path must be an absolute path without query or fragment")
    labels = raw.get("extraLabels") or {}
    if not isinstance(labels, Mapping):
        raise MetricsError("spec.remoteWrite.target.extraLabels must be a map of strings")
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
            raise MetricsError(f"extraLabels: {name!r} is not a label name one may set")
        if name == NAMESPACE_LABEL or not isinstance(value, str):
            raise MetricsError(f"extraLabels: {name!r} must be a string and not the namespace")
    return Target(service, port, str(namespace), path, dict(labels))


def spec_from_object(obj: Mapping[str, Any]) -> Spec:
    """The checked spec of a MetricAccess object; :class:`MetricsError` names the first fault."""
    meta = obj.get("metadata") or {}
    own = str(meta.get("namespace") or "")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise MetricsError("spec must be an object")
    source = spec.get("source", own)
    if not isinstance(source, str) or (why := dns1123_label_problem(source)):
        raise MetricsError(f"spec.source: {why if isinstance(source, str) else 'not a string'}")
    isolation = spec.get("metricIsolation", True)
    if not isinstance(isolation, bool):
        raise MetricsError("spec.metricIsolation must be true or false")
    raw_metrics = spec.get("metrics")
    if not isinstance(raw_metrics, Sequence) or isinstance(raw_metrics, str) or not raw_metrics:
        raise MetricsError("spec.metrics must list at least one entry")
    if len(raw_metrics) > MAX_METRICS:
        raise MetricsError(f"spec.metrics lists more than {MAX_METRICS} entries")
    entries = []
    for i, text in enumerate(raw_metrics):
        if not isinstance(text, str):
            raise MetricsError(f"spec.metrics[{i}] must be a string")
        try:
            entry = classify(text)
        except MetricsError as exc:
            raise MetricsError(f"spec.metrics[{i}] {text[:80]!r}: {exc}") from None
        if why := namespace_problem(entry, source):
            raise MetricsError(f"spec.metrics[{i}] {text[:80]!r}: {why}")
        entries.append(entry)
    rw = spec.get("remoteWrite") or {}
    if not isinstance(rw, Mapping):
        raise MetricsError("spec.remoteWrite must be an object")
    enabled = rw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise MetricsError("spec.remoteWrite.enabled must be true or false")
    interval = parse_interval(str(rw.get("interval", "30s")))
    target = _target(rw.get("target"), own) if enabled or "target" in rw else None
    return Spec(source, isolation, tuple(entries), enabled, interval, target)
