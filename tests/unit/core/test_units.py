"""Rounding rules: the spec's numbers, and exactness over the whole non-negative range."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.units import (
    UNITS_PER_ACCELERATOR,
    bytes_to_mib,
    ceil_div,
    ceil_fraction,
    nanocores_to_millicores,
    percent_of,
    restate_against_cap,
    seconds_of,
    slice_memory_mib,
)

U64 = st.integers(min_value=0, max_value=2**64)


@pytest.mark.parametrize(
    ("measured_bytes", "mib"),
    [
        (585_728, 1),  # idle working set: truncation read 0 ("broken"), the spec reads 1
        (20_480, 1),  # ephemeral-storage usedBytes of an idle Pod
        (12_288, 1),  # rootfs usedBytes of an idle Pod
        (0, 0),  # measured nothing is the one way to read 0
        (1 << 20, 1),
        ((1 << 20) + 1, 2),
    ],
)
def test_bytes_round_up_to_mib(measured_bytes: int, mib: int) -> None:
    assert bytes_to_mib(measured_bytes) == mib


def test_nanocores_round_up_to_millicores() -> None:
    assert nanocores_to_millicores(0) == 0
    assert nanocores_to_millicores(1) == 1
    assert nanocores_to_millicores(998_319_366) == 999
    assert nanocores_to_millicores(2_000_000) == 2


@given(U64, st.integers(min_value=1, max_value=2**64))
def test_ceil_div_is_the_exact_rational_ceiling(numerator: int, denominator: int) -> None:
    expected = -((-Fraction(numerator, denominator)).__floor__())
    assert ceil_div(numerator, denominator) == expected


@given(U64)
def test_ceil_div_near_u64_max_does_not_wrap(offset: int) -> None:
    # (n + d - 1) // d in 64-bit arithmetic wraps here; ours must not.
    n = 2**64 - 1 - (offset % 1000)
    assert ceil_div(n, 2**20) * 2**20 >= n
    assert (ceil_div(n, 2**20) - 1) * 2**20 < n


@pytest.mark.parametrize(("n", "d"), [(1, 0), (1, -1), (-1, 1)])
def test_ceil_div_rejects_out_of_domain(n: int, d: int) -> None:
    with pytest.raises(ValueError, match="ceil_div"):
        ceil_div(n, d)


@given(st.fractions())
def test_ceil_fraction_clamps_negatives_and_rounds_up(value: Fraction) -> None:
    result = ceil_fraction(value)
    if value <= 0:
        assert result == 0
    else:
        assert result - 1 < value <= result


def test_slice_restated_against_its_cap() -> None:
    # The spec's worked example: a 25 % slice measuring 11 % of the card reads 44.
    assert restate_against_cap(11, 25) == 44
    # Saturating a fifth of a card reads 100, not 20.
    assert restate_against_cap(20, 20) == 100
    # Bursting past the cap reads above 100: not clamped.
    assert restate_against_cap(30, 25) == 120
    # No cap stated, or the whole card: passed through.
    assert restate_against_cap(37, 0) == 37
    assert restate_against_cap(37, 100) == 37


@given(st.integers(min_value=0, max_value=100))
def test_a_five_percent_cap_only_yields_multiples_of_twenty(measured: int) -> None:
    assert restate_against_cap(measured, 5) % 20 == 0


@given(st.integers(min_value=0, max_value=100), st.integers(min_value=1, max_value=99))
def test_restatement_is_the_ceiling_of_the_ratio(measured: int, cap: int) -> None:
    result = restate_against_cap(measured, cap)
    assert result >= Fraction(measured * 100, cap) > result - 1


def test_slice_memory_quota() -> None:
    # A quarter of an 80 GiB H100 (81559 MiB as NVML reports it).
    assert slice_memory_mib(400_000, 81_559) == 20_389
    # A vanishingly small grant still reads 1, never 0.
    assert slice_memory_mib(1, 81_559) == 1
    # Units are clamped to one whole card.
    assert slice_memory_mib(UNITS_PER_ACCELERATOR * 3, 81_559) == 81_559
    # Nothing stated: no units, or a card that did not say its memory.
    assert slice_memory_mib(0, 81_559) is None
    assert slice_memory_mib(400_000, 0) is None


@given(st.integers(min_value=1, max_value=UNITS_PER_ACCELERATOR), U64.filter(bool))
def test_slice_quota_never_exceeds_the_card(units: int, card: int) -> None:
    quota = slice_memory_mib(units, card)
    assert quota is not None
    assert 1 <= quota <= card


def test_percent_of_is_not_clamped() -> None:
    assert percent_of(0, 100) == 0
    assert percent_of(1, 80_000) == 1  # a non-zero share never reads idle
    assert percent_of(150, 100) == 150
    assert percent_of(5, 0) is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("15s", 15.0), ("500ms", 0.5), ("1m", 60.0), ("1h", 3600.0), ("2", 2.0)]
)
def test_durations_as_period_flags_take_them(text: str, seconds: float) -> None:
    assert seconds_of(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["0s", "-1s", "15 minutes", "", "1d"])
def test_a_non_duration_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="is not a positive duration"):
        seconds_of(text)
