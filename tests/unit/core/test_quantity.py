"""Kubernetes quantity grammar, exactly."""

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.quantity import QuantityError, cpu_to_millicores, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("250m", Fraction(1, 4)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1e3", Fraction(1000)),
        ("1.5", Fraction(3, 2)),
        ("1.5Mi", Fraction(3 * 2**19)),
        ("704595n", Fraction(704595, 10**9)),
        ("801112Ki", Fraction(801112 * 1024)),
        ("100M", Fraction(10**8)),
        ("1E-3", Fraction(1, 1000)),
        ("+5", Fraction(5)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("-250m", Fraction(-1, 4)),
        ("12u", Fraction(12, 10**6)),
        (3, Fraction(3)),
        (0.1, Fraction(1, 10)),
    ],
)
def test_parses_exactly(text: str | int | float, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_negative_cpu_clamps_to_zero() -> None:
    # metrics.k8s.io has served -250m; a fixed-width consumer wrapped it to ~1.8e19.
    assert cpu_to_millicores(parse_quantity("-250m")) == 0
    assert cpu_to_millicores(parse_quantity("250m")) == 250
    assert cpu_to_millicores(parse_quantity("704595n")) == 1


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "empty"),
        ("abc", "not of the form"),
        ("1Ki2", "not of the form"),
        ("1KI", "not of the form"),
        ("1e", "not of the form"),
        ("--1", "not of the form"),
        ("1e999", "exponent 999 is out of range"),
        ("1" * 80, "longer than"),
        (True, "boolean"),
        (float("nan"), "not a finite number"),
    ],
)
def test_rejects_with_the_reason(text: str | float, complaint: str) -> None:
    with pytest.raises(QuantityError, match=complaint):
        parse_quantity(text)


@given(st.text(max_size=30))
def test_fuzz_never_raises_anything_but_quantity_error(text: str) -> None:
    try:
        result = parse_quantity(text)
    except QuantityError:
        return
    assert isinstance(result, Fraction)


SUFFIXES = {"": 0, "k": 3, "M": 6, "G": 9, "m": -3, "n": -9, "u": -6}


@given(
    st.decimals(min_value=0, max_value=10**12, places=3, allow_nan=False, allow_infinity=False),
    st.sampled_from(sorted(SUFFIXES)),
)
def test_decimal_suffixes_scale_by_powers_of_ten(number: Decimal, suffix: str) -> None:
    text = f"{number:f}{suffix}"
    assert parse_quantity(text) == Fraction(number) * Fraction(10) ** SUFFIXES[suffix]


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=6))
def test_binary_suffixes_scale_by_powers_of_1024(number: int, power: int) -> None:
    suffix = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power - 1]
    assert parse_quantity(f"{number}{suffix}") == number * 1024**power
