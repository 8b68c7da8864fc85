"""Figures outside what a card can physically show are absent, with ``invalid_data`` noted.

The bounds are the ones docs/device-manager.md states ("Figures the readers refuse"): memory
0 .. the card's total (a total above 0 and at most 4 TiB), whole-card percentages 0 .. 100,
temperature −273 .. 200 °C, power 0 .. 5000 W, floats finite. The expected values below are
those numbers, not the module's constants.
"""

import math

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from test_grants import card, grant, snapshot

from gpustack_core.grants import resolve
from gpustack_core.modes import AllocationMode

EXCLUSIVE = AllocationMode.EXCLUSIVE


def resolved(**figures: object) -> tuple[dict[str, object], list[str]]:
    """The Exclusive entry's wire form and the notes, for a card with these figures."""
    result = resolve(
        [grant(EXCLUSIVE)], {"nvidia": snapshot(card(**figures))}, pod_uid="p", cores_caps={}
    )
    [entry] = result.accelerators
    wire: dict[str, object] = msgspec.to_builtins(entry.metrics)
    return wire, result.notes


def test_every_sound_figure_stands() -> None:
    wire, notes = resolved()
    assert notes == []
    assert wire["temperatureCelsius"] == 70
    assert wire["powerUsageWatts"] == 400.5
    assert wire["memoryTotalMiB"] == 81_559


def test_the_issues_examples_are_dropped_and_noted() -> None:
    wire, notes = resolved(
        temperature=10**6, power_usage=-35.5, cores_utilization=-5, memory_usage=-1
    )
    for field in (
        "temperatureCelsius",
        "powerUsageWatts",
        "coresUtilizationPercent",
        "memoryUsedMiB",
    ):
        assert field not in wire, field
    assert len(notes) == 1
    for what in ("temperature", "power", "cores", "memory"):
        assert f"{what}: invalid_data" in notes[0], notes


def test_a_card_total_beyond_four_tebibytes_is_dropped() -> None:
    wire, notes = resolved(memory=10**15)
    assert "memoryTotalMiB" not in wire
    assert "memory total: invalid_data" in notes[0]
    wire, notes = resolved(memory=4 * 1024 * 1024)
    assert wire["memoryTotalMiB"] == 4 * 1024 * 1024
    assert notes == []


def test_a_negative_total_is_dropped_and_zero_is_just_unstated() -> None:
    wire, notes = resolved(memory=-1)
    assert "memoryTotalMiB" not in wire
    assert "invalid_data" in notes[0]
    wire, notes = resolved(memory=0)
    assert "memoryTotalMiB" not in wire
    assert notes == []  # "not stated" is the snapshot's own meaning of 0


def test_not_a_number_is_no_reading() -> None:
    for value in (math.nan, math.inf, -math.inf):
        wire, notes = resolved(power_usage=value)
        assert "powerUsageWatts" not in wire
        assert "power: invalid_data" in notes[0]


def test_the_edges_are_inclusive() -> None:
    for figures, field, value in (
        ({"temperature": 200}, "temperatureCelsius", 200),
        ({"temperature": -273}, "temperatureCelsius", -273),
        ({"power_usage": 0.0}, "powerUsageWatts", 0.0),
        ({"power_usage": 5000.0}, "powerUsageWatts", 5000.0),
        ({"cores_utilization": 100}, "coresUtilizationPercent", 100),
        ({"cores_utilization": 0}, "coresUtilizationPercent", 0),
        ({"memory_usage": 0}, "memoryUsedMiB", 0),
    ):
        wire, notes = resolved(**figures)
        assert wire[field] == value, figures
        assert notes == [], figures
    for figures, field in (
        ({"temperature": 201}, "temperatureCelsius"),
        ({"temperature": -274}, "temperatureCelsius"),
        ({"power_usage": 5000.5}, "powerUsageWatts"),
        ({"power_usage": -0.1}, "powerUsageWatts"),
        ({"cores_utilization": 101}, "coresUtilizationPercent"),
    ):
        wire, notes = resolved(**figures)
        assert field not in wire, figures
        assert "invalid_data" in notes[0], figures


@given(
    temperature=st.integers(),
    power=st.floats(allow_nan=True, allow_infinity=True),
    cores=st.integers(),
    used=st.integers(),
    total=st.integers(min_value=-(2**40), max_value=2**60),
)
def test_whatever_a_snapshot_says_a_published_figure_is_physical(
    temperature: int, power: float, cores: int, used: int, total: int
) -> None:
    wire, _ = resolved(
        temperature=temperature,
        power_usage=power,
        cores_utilization=cores,
        memory_usage=used,
        memory=total,
    )
    if "temperatureCelsius" in wire:
        assert -273 <= wire["temperatureCelsius"] <= 200  # type: ignore[operator]
    if "powerUsageWatts" in wire:
        assert 0 <= wire["powerUsageWatts"] <= 5000  # type: ignore[operator]
    if "coresUtilizationPercent" in wire:
        assert 0 <= wire["coresUtilizationPercent"] <= 100  # type: ignore[operator]
    if "memoryTotalMiB" in wire:
        assert 0 < wire["memoryTotalMiB"] <= 4 * 1024 * 1024  # type: ignore[operator]
    if "memoryUsedMiB" in wire:
        ceiling = wire.get("memoryTotalMiB", 4 * 1024 * 1024)
        assert 0 <= wire["memoryUsedMiB"] <= ceiling  # type: ignore[operator]
