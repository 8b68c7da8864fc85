"""Snappy block format and the remote-write 1.0 WriteRequest, against independent oracles.

The golden blocks were produced by the reference Go encoder (``github.com/golang/snappy`` v0.0.4,
``snappy.Encode``): our decoder must read them. Our encoder's blocks differ from Go's (a valid
block is not unique), so they are checked by round trip and by the fact that Go's decoder read
them (done once by hand; the integration test then has a real Prometheus accept them). The
WriteRequest is decoded with the protobuf runtime from a descriptor of ``prompb``'s messages
written out here, not with our encoder's own reading of the format.
"""

from __future__ import annotations

import contextlib
import math

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core import remotewrite, snappy

GO_GOLDEN = {
    b"": "00",
    b"a": "010061",
    b"abcdabcdabcdabcd": "103c61626364616263646162636461626364",
    b"x" * 100: "640078fe01008a0100",
    b"gpustack_instance_" * 20: "e80244677075737461636b5f696e7374616e63655ffe1200fe1200fe1200fe1200"
    "fe1200561200",
}


@pytest.mark.parametrize("plain", list(GO_GOLDEN), ids=lambda b: f"{len(b)}B")
def test_decodes_the_reference_encoders_blocks(plain: bytes) -> None:
    assert snappy.decompress(bytes.fromhex(GO_GOLDEN[plain])) == plain


@settings(max_examples=300)
@given(st.binary(max_size=4096) | st.text(alphabet="ab_c", max_size=3000).map(str.encode))
def test_round_trip(plain: bytes) -> None:
    assert snappy.decompress(snappy.compress(plain)) == plain


def test_repetitive_input_is_compressed() -> None:
    plain = b"gpustack_instance_memory_used_bytes" * 400
    assert len(snappy.compress(plain)) < len(plain) // 10


@pytest.mark.parametrize(
    ("block", "why"),
    [
        (b"", "empty block"),
        (b"\xff\xff\xff\xff\xff\xff", "not a varint"),
        (b"\x05\x10abc", "runs past the block"),
        (b"\x04\x0dab", "reaches before the start"),  # copy before anything was written
        (b"\x02\x08abc", "past its declared length"),
        (b"\x05\x08abc", "not the declared 5"),
        (b"\x03\xf0", "cut short"),
    ],
)
def test_malformed_blocks_say_why(block: bytes, why: str) -> None:
    with pytest.raises(snappy.SnappyError, match=why):
        snappy.decompress(block)


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_refuse_cleanly(block: bytes) -> None:
    with contextlib.suppress(snappy.SnappyError):
        snappy.decompress(block, limit=1 << 16)


def test_declared_length_over_limit_is_refused_first() -> None:
    with pytest.raises(snappy.SnappyError, match="over the limit"):
        snappy.decompress(b"\xff\xff\x03", limit=1024)


def _prompb() -> type:
    """prompb's four messages, described field by field as prometheus/prompb/types.proto has."""
    f = descriptor_pb2.FileDescriptorProto(name="rw_test.proto", package="prometheus")
    opt, rep = (
        descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    t = descriptor_pb2.FieldDescriptorProto
    for name, fields in {
        "Label": [("name", 1, t.TYPE_STRING, opt, ""), ("value", 2, t.TYPE_STRING, opt, "")],
        "Sample": [("value", 1, t.TYPE_DOUBLE, opt, ""), ("timestamp", 2, t.TYPE_INT64, opt, "")],
        "TimeSeries": [
            ("labels", 1, t.TYPE_MESSAGE, rep, ".prometheus.Label"),
            ("samples", 2, t.TYPE_MESSAGE, rep, ".prometheus.Sample"),
        ],
        "WriteRequest": [("timeseries", 1, t.TYPE_MESSAGE, rep, ".prometheus.TimeSeries")],
    }.items():
        msg = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            field = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("prometheus.WriteRequest"))


def test_write_request_decodes_with_the_protobuf_runtime() -> None:
    series = [
        remotewrite.Series(
            {"namespace": "a", "__name__": "gpustack_instance_up", "instance": "x"},
            [(1_700_000_000_000, 1.0), (1_700_000_030_000, 0.5)],
        ),
        remotewrite.Series({"__name__": "m", "z": "ü"}, [(-5, -math.inf)]),
    ]
    decoded = _prompb()()
    decoded.ParseFromString(snappy.decompress(remotewrite.body(series)))
    first, second = decoded.timeseries
    assert [(lbl.name, lbl.value) for lbl in first.labels] == [
        ("__name__", "gpustack_instance_up"),
        ("instance", "x"),
        ("namespace", "a"),
    ]
    assert [(s.timestamp, s.value) for s in first.samples] == [
        (1_700_000_000_000, 1.0),
        (1_700_000_030_000, 0.5),
    ]
    assert [(lbl.name, lbl.value) for lbl in second.labels] == [("__name__", "m"), ("z", "ü")]
    assert [(s.timestamp, s.value) for s in second.samples] == [(-5, -math.inf)]


def test_headers_are_remote_write_1_0s() -> None:
    assert remotewrite.HEADERS["Content-Encoding"] == "snappy"
    assert remotewrite.HEADERS["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert remotewrite.HEADERS["Content-Type"] == "application/x-protobuf"
