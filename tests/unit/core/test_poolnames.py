"""The chain's names, the entrance hash and credits: every expected value is the walkthrough's.

Names and LocalQueue hashes are copied from ``shared/spec/instancetype-walkthrough.md`` (§1's and
§5's tables, in ``walkthrough_expected``) and ``shared/reference/instancetypes.md``; the FNV-1a
vectors are the algorithm's published test vectors, not outputs of the module.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core import contract
from gpustack_core.poolnames import (
    PoolIdentity,
    credits,
    credits_resource,
    entrance_name,
    flavor_name,
    fnv1a64,
)
from walkthrough_expected import CUSTOM_ENTRANCE, RECORDED_CUSTOM_ENTRANCE, SECTION_5_ROWS

WALKTHROUGH_ENTRANCES = {
    # §5's table: §1's three types and the five CPU-aware ones, NAME and ENTRANCE.
    **{name: entrance for name, entrance, *_ in (row.split() for row in SECTION_5_ROWS)},
    # a custom type, by the reference's current rule (the walkthrough's §4 shows an older hash)
    "a10g-12c128g": CUSTOM_ENTRANCE,
}


@pytest.mark.parametrize(("queue", "entrance"), WALKTHROUGH_ENTRANCES.items())
def test_the_entrance_is_the_walkthroughs(queue: str, entrance: str) -> None:
    assert entrance_name(queue) == entrance


def test_the_walkthroughs_section_4_hash_is_not_the_current_rule() -> None:
    # Recorded in docs/instancetypes.md: no spelling of the name reproduces it.
    assert entrance_name("a10g-12c128g") != RECORDED_CUSTOM_ENTRANCE


@pytest.mark.parametrize(
    ("text", "digest"),
    [("", 0xCBF29CE484222325), ("a", 0xAF63DC4C8601EC8C), ("foobar", 0x85944171F73967E8)],
)
def test_fnv1a64_published_vectors(text: str, digest: int) -> None:
    assert fnv1a64(text) == digest


@given(st.text(max_size=300))
def test_an_entrance_is_always_a_31_character_label_value(name: str) -> None:
    entrance = entrance_name(name)
    assert len(entrance) == 31
    assert entrance.startswith("gpustack-fnv64-")
    assert all(c in "0123456789abcdef" for c in entrance[15:])


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("amd-epyc-7r13", None, "linux", "amd64", 16), "gpustack--amd-epyc-7r13-linux-amd64-16c"),
        (
            ("amd-epyc-7r32", "nvidia-a10g", "linux", "amd64", 1),
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
        ),
        (
            ("intel-xeon-platinum-8259cl", "nvidia-tesla-t4", "linux", "amd64", 4),
            "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d",
        ),
        (
            ("intel-xeon-platinum-8259cl", None, "linux", "amd64", 48),
            "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c",
        ),
    ],
)
def test_flavor_names(args: tuple[str, str | None, str, str, int], name: str) -> None:
    assert flavor_name(*args) == name


@pytest.mark.parametrize(
    ("pool", "name", "catalog"),
    [
        (
            PoolIdentity("generic", "", "linux", "amd64"),
            "gpustack--generic-linux-amd64",
            "gpustack--generic",
        ),
        (
            PoolIdentity("generic", "nvidia-a10g", "linux", "amd64"),
            "gpustack--nvidia-a10g-linux-amd64",
            "gpustack--nvidia-a10g",
        ),
        (
            PoolIdentity("amd-epyc-7r32", "nvidia-a10g", "linux", "amd64"),
            "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64",
            "gpustack--amd-epyc-7r32--nvidia-a10g",
        ),
        (
            PoolIdentity("amd-epyc-7r13", "", "linux", "amd64"),
            "gpustack--amd-epyc-7r13-linux-amd64",
            "gpustack--amd-epyc-7r13",
        ),
        (  # an empty CPU key is the generic one, as the defaulting webhook spells it
            PoolIdentity("", "nvidia-tesla-t4", "linux", "amd64"),
            "gpustack--nvidia-tesla-t4-linux-amd64",
            "gpustack--nvidia-tesla-t4",
        ),
    ],
)
def test_pool_and_catalog_names(pool: PoolIdentity, name: str, catalog: str) -> None:
    assert (pool.name, pool.catalog) == (name, catalog)


def test_credits_are_one_point_six_million_per_accelerator() -> None:
    assert credits_resource("nvidia") == "credits.gpustack.ai/nvidia"
    assert credits(1) == 1_600_000  # the walkthrough's 1600k
    assert credits(5) == 8_000_000
    assert credits(0) == 0
    with pytest.raises(ValueError, match="-1 accelerators"):
        credits(-1)


def test_the_chain_contract_names() -> None:
    assert contract.CREDITS_PREFIX == "credits.gpustack.ai/"
    assert contract.NODE_DEVICES_CHECK == "gpustack-node-devices"
    assert contract.RESOURCE_TYPE_LABEL == "resource.gpustack.ai/type"
    assert contract.DERIVED_FROM_NODE_LABEL == "schedule.gpustack.ai/derived-from-node"
    assert (contract.OS_LABEL, contract.ARCH_LABEL) == ("kubernetes.io/os", "kubernetes.io/arch")
