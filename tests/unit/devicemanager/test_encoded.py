"""Bodies encoded once: gzip that inflates to the same bytes, tags that name the content."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_devicemanager.encoded import Encoded, accepts_gzip


@given(st.binary(max_size=4096))
def test_gzip_inflates_to_the_identity_bytes(body: bytes) -> None:
    encoded = Encoded.of(body)
    assert gzip.decompress(encoded.gzipped) == body
    assert Encoded.of(body) == encoded  # deterministic: mtime is not in the bytes


def test_the_tag_changes_with_the_content_only() -> None:
    a, b = Encoded.of(b'{"a":1}'), Encoded.of(b'{"a":2}')
    assert a.etag != b.etag
    assert a.etag == Encoded.of(b'{"a":1}').etag
    assert a.etag.startswith('"')
    assert a.etag.endswith('"')


def test_if_none_match() -> None:
    encoded = Encoded.of(b"x")
    assert encoded.matches(encoded.etag)
    assert encoded.matches(f'"other", {encoded.etag}')
    assert encoded.matches(f"W/{encoded.etag}")  # weak comparison, as RFC 9110 has for GET
    assert encoded.matches("*")
    assert not encoded.matches('"other"')
    assert not encoded.matches("")


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [
        ("gzip", True),
        ("gzip, deflate", True),  # what httpx and Prometheus send
        ("deflate, gzip;q=0.5", True),
        ("GZIP", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0", False),
        ("*", True),
        ("*, gzip;q=0", False),
        ("identity", False),
        ("", False),
        ("br", False),
        ("gzip;q=bogus", False),
    ],
)
def test_accept_encoding(header: str, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


def test_exposition_text_compresses_well() -> None:
    """A Prometheus text body of 10k series shrinks by far more than the scrape-size goal."""
    lines = [
        f'gpustack_instance_accelerator_memory_used_mib{{namespace="team-{i % 50}",'
        f'name="instance-{i}",mode="Sliced",node="gpu-node-{i % 7}"}} {i * 37 % 40960}'
        for i in range(10_000)
    ]
    body = ("\n".join(lines) + "\n").encode()
    encoded = Encoded.of(body)
    assert len(encoded.gzipped) * 8 < len(body)
