"""Prometheus remote write 1.0: the ``WriteRequest`` a receiver accepts, as bytes.

The MetricAccess controller copies a tenant's slice into the tenant's own Prometheus
(docs/multi-tenant-metrics.md, "Deliver"). Remote write 1.0 is a snappy-compressed
(:mod:`gpustack_core.snappy`) protobuf ``prometheus.WriteRequest`` POSTed with the headers in
:data:`HEADERS`. The four messages it needs are tiny, so they are encoded here by hand rather
than generated: the wire format is varints and length-prefixed fields, pure arithmetic::

    message WriteRequest { repeated TimeSeries timeseries = 1; }
    message TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
    message Label        { string name = 1; string value = 2; }
    message Sample       { double value = 1; int64 timestamp = 2; }   // milliseconds

Labels go out sorted by name (the receiver expects a series' labels sorted; an unsorted set
would be a different series to it) and ``__name__`` is one of them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gpustack_core.snappy import compress

CONTENT_TYPE: Final = "application/x-protobuf"
HEADERS: Final = {
    "Content-Type": CONTENT_TYPE,
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
"""What remote write 1.0 says a sender sends with every request."""

_VARINT: Final = 0
_FIXED64: Final = 1
_BYTES: Final = 2


@dataclass(frozen=True)
class Series:
    """One series to write: its labels (``__name__`` among them) and ``(ms, value)`` samples."""

    labels: Mapping[str, str]
    samples: Sequence[tuple[int, float]]


def _varint(n: int) -> bytes:
    if n < 0:  # int64 on the wire: two's complement in ten bytes
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _bytes_field(field: int, payload: bytes) -> bytes:
    return _key(field, _BYTES) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _bytes_field(1, name.encode()) + _bytes_field(2, value.encode())


def _sample(timestamp_ms: int, value: float) -> bytes:
    return _key(1, _FIXED64) + struct.pack("<d", value) + _key(2, _VARINT) + _varint(timestamp_ms)


def _series(series: Series) -> bytes:
    parts = [_bytes_field(1, _label(k, series.labels[k])) for k in sorted(series.labels)]
    parts += [_bytes_field(2, _sample(ts, v)) for ts, v in series.samples]
    return b"".join(parts)


def write_request(series: Iterable[Series]) -> bytes:
    """The uncompressed protobuf ``WriteRequest`` carrying ``series``."""
    return b"".join(_bytes_field(1, _series(s)) for s in series)


def body(series: Iterable[Series]) -> bytes:
    """The request body: the ``WriteRequest``, snappy block-compressed."""
    return compress(write_request(series))
