"""Unit presets: the walkthrough's and the reference table's values, never the module's own.

``shared/spec/instancetype-walkthrough.md``: A10G 8/64Gi/100Gi, T4 8/32Gi/100Gi, the generic CPU
pool 1/2Gi/100Gi, an unrecognised accelerator 4/16Gi (§4). ``shared/reference/instancetypes.md``
"Unit presets" names the tiers and example families.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpustack_core.instancetype import UnitResources
from gpustack_core.presets import FAMILIES, Tier, family_key, tier_of, unit_preset


def units(cpu: str, ram: str) -> UnitResources:
    return UnitResources(cpu=cpu, ram=ram, local_storage="100Gi")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("nvidia-a10g", units("8", "64Gi")),  # the walkthrough's A10G row
        ("nvidia-tesla-t4", units("8", "32Gi")),  # the walkthrough's T4 row
        (None, units("1", "2Gi")),  # the generic CPU pool
        ("", units("1", "2Gi")),
        ("acme-mystery-9000", units("4", "16Gi")),  # §4: an unrecognised accelerator
    ],
)
def test_the_walkthroughs_presets(key: str | None, expected: UnitResources) -> None:
    assert unit_preset(key) == expected


@pytest.mark.parametrize(
    ("key", "tier"),
    [
        ("nvidia-a10g", "medium"),
        ("nvidia-t4", "small"),
        ("nvidia-h100", "xlarge"),
        ("nvidia-h200", "xlarge"),
        ("nvidia-b200", "xlarge"),
        ("nvidia-a100-80gb", "large"),
        ("nvidia-l4", "small"),
        ("nvidia-l40s", "large"),
        ("amd-mi300x", "xlarge"),
        ("amd-mi210", "large"),
        ("ascend-910b", "medium"),
        ("ascend-910b3", "medium"),
        ("ascend-310p", "medium"),
        ("hygon-k100", "large"),
        ("hygon-bw1000", "xlarge"),
        ("metax-mxc500", "medium"),
        ("metax-mxc550", "large"),
        ("metax-mxc588", "large"),
        ("metax-mxc600", "large"),
        ("cambricon-mlu370", "medium"),
        ("iluvatar-bi-v150", "medium"),
        ("thead-ppu-zw810e", "medium"),
    ],
)
def test_the_references_examples(key: str, tier: str) -> None:
    assert tier_of(key) == tier


@pytest.mark.parametrize(
    ("key", "tier"),
    [
        ("nvidia-tesla-t4", "small"),  # a brand line is not the family
        ("nvidia-a100-sxm4-80gb", "large"),  # nor a form factor
        ("nvidia-a100-pcie-40gb", "medium"),
        ("nvidia-h100-80gb-hbm3", "xlarge"),  # a longer name of a listed family
        ("nvidia-a100", "medium"),  # any A100 whose name carries no capacity
        ("hygon-k100_ai", "large"),  # Hygon's K100_AI
        ("nvidia-l40", "medium"),  # not claimed by nvidia-l4: prefixes end at a word
        ("nvidia-l40s", "large"),
        ("nvidia-a10", "medium"),
    ],
)
def test_a_family_is_matched_by_whole_words(key: str, tier: str) -> None:
    assert tier_of(key) == tier


def test_the_tier_table() -> None:
    expected = {
        "fallback": ("4", "16Gi"),
        "small": ("8", "32Gi"),
        "medium": ("8", "64Gi"),
        "large": ("12", "128Gi"),
        "xlarge": ("12", "192Gi"),
    }
    family = {"small": "nvidia-t4", "medium": "nvidia-a10g", "large": "amd-mi210"}
    family |= {"xlarge": "nvidia-h100", "fallback": "nobody-nothing"}
    for tier, (cpu, ram) in expected.items():
        assert unit_preset(family[tier]) == units(cpu, ram), tier


def test_every_family_key_is_already_normalised() -> None:
    # A table key with a brand word in it could never be matched.
    assert all(family_key(key) == key for key in FAMILIES)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", max_size=60))
def test_any_key_gets_a_tier_with_100gi_of_storage(key: str) -> None:
    preset = unit_preset(key)
    assert preset.local_storage == "100Gi"
    assert tier_of(key) in set(Tier)
