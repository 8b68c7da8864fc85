"""The direct renderer writes exactly what prometheus_client writes, in both formats."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_devicemanager.exposition import Family, _render_direct, _render_with_client

LABEL_NAMES = st.lists(
    st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True).filter(
        lambda n: not n.startswith("__")
    ),
    max_size=5,
    unique=True,
)
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**60), max_value=2**60).map(float),
    st.sampled_from([0.0, -0.0, 1e6, 1234567.0, 1e21, 0.1, 100.0]),
)
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30
) | st.sampled_from(['a"b', "back\\slash", "new\nline", "", "Sliced"])


@st.composite
def families(draw: st.DrawFn) -> list[Family]:
    found: list[Family] = []
    names = draw(
        st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True), unique=True, max_size=4)
    )
    for name in names:
        labels = tuple(draw(LABEL_NAMES))
        family = Family(name, draw(TEXT), labels)
        seen: set[tuple[str, ...]] = set()
        for _ in range(draw(st.integers(min_value=0, max_value=6))):
            values = tuple(draw(TEXT) for _ in labels)
            if values in seen:
                continue  # one series per label set, as a round builds them
            seen.add(values)
            family.add(values, draw(VALUES))
        found.append(family)
    return found


@settings(max_examples=300, deadline=None)
@given(families())
def test_byte_for_byte_what_the_client_writes(round_families: list[Family]) -> None:
    direct = _render_direct(round_families)
    assert direct is not None
    assert direct == _render_with_client(round_families)


def test_a_name_outside_the_legacy_set_falls_back_to_the_client() -> None:
    assert _render_direct([Family("gpu.temperature", "x", ())]) is None
    assert _render_direct([Family("job:gpu_memory:sum", "x", ())]) is None
    assert _render_direct([Family("ok", "x", ("bad-label",))]) is None


def test_special_values_as_go_writes_them() -> None:
    family = Family("g", "doc", ("a",))
    for i, value in enumerate([math.inf, -math.inf, math.nan, 1e21, 5.0]):
        family.add((str(i),), value)
    text, _ = _render_direct([family]) or (b"", b"")
    assert b'g{a="0"} +Inf\n' in text
    assert b'g{a="1"} -Inf\n' in text
    assert b'g{a="2"} NaN\n' in text
    assert b'g{a="3"} 1e+21\n' in text
    assert b'g{a="4"} 5.0\n' in text


def test_a_round_at_the_bound_is_the_clients_too() -> None:
    """10k series of the exporter's widest family (speed: ``./dev bench``, never asserted)."""
    labels = ("namespace", "instance_name", "instance_uid", "node", "id", "index")
    family = Family("gpustack_instance_accelerator_memory_used_mib", "doc", (*labels, "mode"))
    for i in range(10_000):
        values = (
            f"team-{i % 40}",
            f"inst-{i}",
            f"uid-{i}",
            f"node-{i % 9}",
            f"GPU-{i}",
            str(i % 8),
        )
        family.add((*values, "Sliced"), float(i))
    assert _render_direct([family]) == _render_with_client([family])
