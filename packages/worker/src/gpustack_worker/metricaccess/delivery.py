"""One delivery: read a declared slice from the cluster Prometheus, remote-write it to the tenant.

Reading: each entry of the spec becomes a range selector over the last interval
(``{…}[<interval>s]`` evaluated now), which returns the raw samples with their own timestamps
and names — the slice copied, not re-sampled. With ``metricIsolation`` the read goes through
the isolating proxy (prom-label-proxy) with ``namespace=<source>``, and the selector carries the
same matcher; any series that still comes back with another namespace is dropped and counted,
never delivered (an upstream answer is not trusted blindly).

Writing: remote write 1.0 (:mod:`gpustack_core.remotewrite`) to the target's URL. Samples at or
before a series' high-water mark (what the last delivery already wrote) are left out, so a
receiver never sees one out of order; the marks live in memory, and after a restart the first
delivery repeats the window's samples, which a Prometheus takes as harmless duplicates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from gpustack_core import remotewrite
from gpustack_core.metricaccess import NAMESPACE_LABEL, Spec, Target

SeriesKey = tuple[tuple[str, str], ...]
Resolve = Callable[[Target], str]
"""A target → the base URL its Service answers at."""
MAX_ANSWER: Final = 64 << 20


class DeliveryError(Exception):
    """A delivery that did not happen; the message is the status's ``lastError``."""


@dataclass(frozen=True)
class Delivered:
    """What one delivery wrote (and what it refused to)."""

    series: int
    samples: int
    foreign: int
    """Series the read returned with another namespace: dropped."""


def in_cluster(target: Target) -> str:
    """The Service's cluster DNS name: ``http://<svc>.<ns>.svc:<port>``."""
    return f"http://{target.service}.{target.namespace}.svc:{target.port}"


def _matrix(answer: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
    data = answer.get("data")
    if answer.get("status") != "success" or not isinstance(data, Mapping):
        raise DeliveryError(f"{what}: {str(answer.get('error') or 'not a success')[:200]}")
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise DeliveryError(f"{what}: the answer is not a matrix")
    return [r for r in data["result"] if isinstance(r, dict)]


def _samples(values: object) -> list[tuple[int, float]]:
    out = []
    for pair in values if isinstance(values, list) else ():
        if isinstance(pair, list) and len(pair) == 2:
            try:
                out.append((round(float(pair[0]) * 1000), float(pair[1])))
            except (TypeError, ValueError):
                continue
    return out


async def read_slice(
    http: httpx.AsyncClient, base: str, spec: Spec, now: float
) -> tuple[list[remotewrite.Series], int]:
    """The slice's raw samples of the last interval, and how many foreign series were dropped."""
    namespace = spec.source if spec.isolation else None
    window = max(1, math.ceil(spec.interval))
    found: dict[SeriesKey, remotewrite.Series] = {}
    foreign = 0
    for entry in spec.entries:
        params = {"query": f"{entry.selector(namespace)}[{window}s]", "time": f"{now:.3f}"}
        if namespace:
            params[NAMESPACE_LABEL] = namespace
        try:
            response = await http.get(f"{base}/api/v1/query", params=params)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"reading {entry.text!r}: {type(exc).__name__}") from exc
        try:
            answer = response.json()
        except ValueError as exc:
            raise DeliveryError(f"reading {entry.text!r}: HTTP {response.status_code}") from exc
        for result in _matrix(answer, f"reading {entry.text!r}"):
            labels = {str(k): str(v) for k, v in (result.get("metric") or {}).items()}
            if namespace and labels.get(NAMESPACE_LABEL) != namespace:
                foreign += 1
                continue
            key = tuple(sorted(labels.items()))
            found[key] = remotewrite.Series(labels, _samples(result.get("values")))
    return list(found.values()), foreign


def fresh(
    series: list[remotewrite.Series],
    marks: MutableMapping[SeriesKey, int],
    extra: Mapping[str, str],
) -> list[remotewrite.Series]:
    """Only samples newer than each series' mark, and the marks moved on.

    ``extra`` labels are added where the series has none of that name (its own label wins).
    """
    out = []
    for s in series:
        key = tuple(sorted(s.labels.items()))
        mark = marks.get(key, -(1 << 62))
        samples = sorted(p for p in s.samples if p[0] > mark)
        if not samples:
            continue
        marks[key] = samples[-1][0]
        out.append(remotewrite.Series({**extra, **s.labels}, samples))
    return out


async def write(http: httpx.AsyncClient, url: str, series: list[remotewrite.Series]) -> None:
    """One remote-write request; anything but a 2xx is a :class:`DeliveryError`."""
    try:
        response = await http.post(
            url, content=remotewrite.body(series), headers=remotewrite.HEADERS
        )
    except httpx.HTTPError as exc:
        raise DeliveryError(f"writing to {url}: {type(exc).__name__}") from exc
    if not 200 <= response.status_code < 300:
        line = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
        raise DeliveryError(f"writing to {url}: HTTP {response.status_code} {line}".rstrip())
