"""Quantities as kube-apiserver writes them back (apimachinery's canonical form).

The expected spellings are the real server's: each was read back from kube-apiserver v1.37.2
(a Pod created with ``--dry-run=server`` on ``simulator up --control-plane real``, the value as
its ``cpu`` limit), and the differential suite holds the stand-in to the same.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.quantity import canonical_quantity, parse_quantity


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("320000", "320k"),
        ("1600000", "1600k"),
        ("6400k", "6400k"),
        ("128", "128"),
        ("100", "100"),
        ("64Gi", "64Gi"),
        ("68719476736", "68719476736"),
        ("8000m", "8"),
        ("0.5", "500m"),
        ("1.5", "1500m"),
        ("1.5Gi", "1536Mi"),
        ("512Ki", "512Ki"),
        ("1e3", "1e3"),
        ("2e4", "20e3"),
        ("0", "0"),
        ("0Gi", "0"),
    ],
)
def test_canonical_spellings(written: str, stored: str) -> None:
    assert canonical_quantity(written) == stored


@given(
    st.integers(min_value=0, max_value=10**15),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti"]),
)
def test_canonical_form_keeps_the_value_and_is_a_fixed_point(number: int, suffix: str) -> None:
    written = f"{number}{suffix}"
    stored = canonical_quantity(written)
    assert parse_quantity(stored) == parse_quantity(written)
    assert canonical_quantity(stored) == stored


def test_finer_than_a_nano_rounds_up_as_the_server_parses() -> None:
    assert parse_quantity(canonical_quantity("0.0000000001")) == Fraction(1, 10**9)
