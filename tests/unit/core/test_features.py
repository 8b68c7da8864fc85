"""Node feature labels: the walkthrough's node-a10g letter for letter, and always-valid labels.

Expected values are the walkthrough's (``shared/spec/instancetype-walkthrough.md``, "1. Initial
state", Node) or computed here independently of the module under test.
"""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gpustack_core import features
from gpustack_core.features import Card, Partition

A10G_WALKTHROUGH = Card(
    id="GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575",
    index=0,
    name="NVIDIA A10G",
    memory_mib=24 * 1024,
    cores=10240,
    driver_version="580.159.03",
    runtime_version="13.0",
    compute_capability="8.6",
)

WALKTHROUGH_A10G_LABELS = {
    "feature.gpustack.ai/acceleratable": "true",
    "acceleratable.feature.gpustack.ai/nvidia": "true",
    "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.memory": "24Gi",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.cores": "10240",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.family": "Ampere",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.product": "NVIDIA-A10G",
    "acceleratable.feature.gpustack.ai/nvidia-a10g.comcap": "8.6",
    "acceleratable.feature.gpustack.ai/nvidia.driver-version": "580.159.03",
    "acceleratable.feature.gpustack.ai/nvidia.runtime-version": "13.0",
}

# Kubernetes' own label grammar, written out again here rather than imported.
VALUE = re.compile(r"^$|^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


def valid_value(value: str) -> bool:
    return len(value) <= 63 and bool(VALUE.match(value))


def valid_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (
        0 < len(name) <= 63
        and bool(VALUE.match(name))
        and (not prefix or re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", prefix) is not None)
    )


def test_walkthrough_a10g_labels_letter_for_letter() -> None:
    grouped = features.groups_from_cards("nvidia", [A10G_WALKTHROUGH])
    assert grouped.skipped == ()
    assert features.acceleratable_labels(grouped.groups) == WALKTHROUGH_A10G_LABELS


def test_walkthrough_a10g_group_spec() -> None:
    (group,) = features.groups_from_cards("nvidia", [A10G_WALKTHROUGH]).groups
    assert (group.id, group.manufacturer, group.name) == ("a10g", "nvidia", "NVIDIA A10G")
    assert (group.memory, group.cores, group.family) == (24576, 10240, "Ampere")
    (card,) = group.accelerators
    assert card.id == "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"
    assert card.status.logical_sliced is not None
    assert card.status.logical_sliced.count == 128
    assert card.status.physical_sliced is None


def test_tesla_t4_keys() -> None:
    t4 = [
        Card(
            f"GPU-{i}",
            i,
            "Tesla T4",
            16 * 1024,
            2560,
            "580.159.03",
            "13.0",
            compute_capability="7.5",
        )
        for i in range(4)
    ]
    labels = features.acceleratable_labels(features.groups_from_cards("nvidia", t4).groups)
    key = "acceleratable.feature.gpustack.ai/nvidia-tesla-t4"
    assert labels[key + ".product"] == "Tesla-T4"
    assert labels[key + ".count"] == "4"
    assert labels[key + ".memory"] == "16Gi"
    assert labels[key + ".family"] == "Turing"


def test_absent_figures_have_no_label() -> None:
    card = Card("GPU-x", 0, "NVIDIA A10G", 0, None, "", "")
    labels = features.acceleratable_labels(features.groups_from_cards("nvidia", [card]).groups)
    key = "acceleratable.feature.gpustack.ai/nvidia-a10g"
    assert labels == {
        "feature.gpustack.ai/acceleratable": "true",
        "acceleratable.feature.gpustack.ai/nvidia": "true",
        key: "true",
        key + ".count": "1",
        key + ".product": "NVIDIA-A10G",
    }


def test_a_card_without_a_usable_name_is_skipped_with_a_reason() -> None:
    named = Card("GPU-a", 0, "NVIDIA A10G", 24576, 10240, "580.159.03", "13.0")
    unnamed = Card("GPU-b", 1, "(®)", 24576, 10240, "580.159.03", "13.0")
    grouped = features.groups_from_cards("nvidia", [named, unnamed])
    assert [g.id for g in grouped.groups] == ["a10g"]
    (reason,) = grouped.skipped
    assert "GPU-b" in reason
    assert "'(®)'" in reason


def test_no_cards_no_labels() -> None:
    assert features.acceleratable_labels(features.groups_from_cards("nvidia", []).groups) == {}


def test_two_products_of_one_manufacturer_are_two_groups() -> None:
    cards = [
        Card("GPU-a", 1, "Tesla T4", 15360, 2560, "d", "r"),
        Card("GPU-b", 0, "NVIDIA A10G", 23028, 9216, "d", "r"),
    ]
    groups = features.groups_from_cards("nvidia", cards).groups
    assert [(g.id, [a.index for a in g.accelerators]) for g in groups] == [
        ("a10g", [0]),
        ("tesla-t4", [1]),
    ]


def test_partitions_become_physical_profiles() -> None:
    card = Card(
        "GPU-m",
        0,
        "NVIDIA H100 80GB HBM3",
        81559,
        16896,
        "535.183.01",
        "12.2",
        partitions=(
            Partition("3g.40gb", 40448),
            Partition("1g.10gb", 9856),
            Partition("1g.10gb", 9856),
        ),
    )
    (group,) = features.groups_from_cards("nvidia", [card]).groups
    assert group.id == "h100-80gb-hbm3"
    physical = group.accelerators[0].status.physical_sliced
    assert physical is not None
    assert physical.count == 3
    assert [(p.name, p.count, p.memory_mib) for p in physical.profiles] == [
        ("1g.10gb", 2, 9856),
        ("3g.40gb", 1, 40448),
    ]


def test_logical_slices_per_manufacturer() -> None:
    expected = {"nvidia": 128, "ascend": 63, "cambricon": 16, "metax": 16, "hygon": 4, "amd": None}
    for manufacturer, count in expected.items():
        card = Card("c", 0, "Some Card", 1024, None, "", "")
        (group,) = features.groups_from_cards(manufacturer, [card]).groups
        logical = group.accelerators[0].status.logical_sliced
        assert (logical.count if logical else None) == count, manufacturer


def test_memory_quantity_rounding() -> None:
    # Nearest whole unit, halves up: computed by hand from MiB.
    assert features.binary_quantity(24576) == "24Gi"
    assert features.binary_quantity(23028) == "22Gi"  # 22.49 GiB
    assert features.binary_quantity(23552) == "23Gi"  # 23.0 GiB
    assert features.binary_quantity(23040) == "23Gi"  # 22.5 GiB rounds up
    assert features.binary_quantity(81559) == "80Gi"  # 79.65 GiB
    assert features.binary_quantity(512) == "512Mi"
    assert features.binary_quantity(1536 * 1024) == "2Ti"  # 1.5 TiB


def test_nvidia_family_table() -> None:
    table = {
        "8.6": "Ampere",
        "8.0": "Ampere",
        "7.5": "Turing",
        "7.0": "Volta",
        "9.0": "Hopper",
        "8.9": "Ada",
        "12.0": "Blackwell",
        "6.1": "Pascal",
    }
    for capability, family in table.items():
        assert features.nvidia_family(capability) == family, capability
    assert features.nvidia_family("2.1") is None
    assert features.nvidia_family("eight") is None
    assert features.family_of("amd", "8.6") is None


def test_cpu_keys_of_the_walkthrough() -> None:
    assert features.general_key("AMD EPYC 7R32", "AMD") == "amd-epyc-7r32"
    assert features.general_key("AMD EPYC 7R13 Processor", "AMD") == "amd-epyc-7r13"
    assert (
        features.general_key("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "Intel")
        == "intel-xeon-platinum-8259cl"
    )
    assert features.general_labels("AMD EPYC 7R32", "AMD", 4) == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
    }


def test_cpu_key_without_a_model_or_vendor() -> None:
    assert features.general_key(None, "AMD") == "amd"
    assert features.general_key("AMD EPYC 7R32", None) == "generic-amd-epyc-7r32"
    assert features.general_labels(None, None, None) == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/generic": "true",
    }


def test_slug_drops_the_manufacturer_as_a_whole_word_only() -> None:
    assert features.slug("NVIDIA A10G", prefix="nvidia") == "a10g"
    assert features.slug("NVIDIAX 1", prefix="nvidia") == "nvidiax-1"
    assert features.slug("  --Tesla   T4--  ") == "tesla-t4"


names = st.text(alphabet=st.characters(codec="utf-8", blacklist_categories=["Cs"]), max_size=200)


@given(names)
def test_label_value_is_always_valid(text: str) -> None:
    assert valid_value(features.label_value(text))


@given(names, st.sampled_from(["nvidia", "amd", "ascend", "cambricon", "metax", "hygon", "thead"]))
def test_derived_labels_are_always_valid(name: str, manufacturer: str) -> None:
    card = Card("c", 0, name, 24576, 10, name, name, compute_capability=name[:8])
    labels = features.acceleratable_labels(features.groups_from_cards(manufacturer, [card]).groups)
    assert all(valid_key(k) and valid_value(v) for k, v in labels.items()), labels
    assert features.unknown_reason(labels) is None


@given(names, names, st.integers(min_value=-2, max_value=10_000))
def test_cpu_labels_are_always_valid(name: str, vendor: str, cores: int) -> None:
    labels = features.general_labels(name, vendor, cores)
    assert all(valid_key(k) and valid_value(v) for k, v in labels.items()), labels


def test_guard_names_the_bad_label() -> None:
    assert "not a valid Kubernetes label value" in str(features.unknown_reason({"a/b": "-x"}))
    assert "not a valid Kubernetes label key" in str(features.unknown_reason({"a/-b": "x"}))


def test_a_long_cpu_vendor_still_makes_a_valid_key() -> None:
    labels = features.general_labels("X" * 80, "V" * 80, 8)
    assert all(valid_key(k) and valid_value(v) for k, v in labels.items()), labels
