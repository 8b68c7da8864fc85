"""Per-manufacturer resource names configurable by the environment (issue #31, item 1).

The reference operator renames the extended resource a manufacturer is allocated by with
``GPUSTACK_<MANUFACTURER>_ACCELERATABLE_RESOURCE_NAME`` (``shared/reference/instancetypes.md``,
"Device-plugin safeguards"; ``GPUSTACK_<MFR>_RESOURCE_NAME`` in ``operator.md``), so a cluster
running another plugin for ``nvidia.com/gpu`` keeps both. Expected names are written out.
"""

from __future__ import annotations

import pytest

from gpustack_core.kueueconfig import resources
from gpustack_core.resourceconfig import configured_bases, configured_names


def test_the_reference_variable_renames_every_derived_name() -> None:
    names = configured_names({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "gpustack.ai/nv"})
    nvidia = next(n for n in names if n.manufacturer == "nvidia")
    amd = next(n for n in names if n.manufacturer == "amd")
    assert (nvidia.exclusive, nvidia.shared, nvidia.sliced_units, nvidia.partitioned) == (
        "gpustack.ai/nv",
        "gpustack.ai/nv.shared",
        "gpustack.ai/nv.sliced.units",
        "gpustack.ai/nv.partitioned",
    )
    assert nvidia.visibility == "device.gpustack.ai/nvidia.visibility"  # not base-derived
    assert amd.base == "amd.com/gpu"


def test_the_older_spelling_is_read_and_the_reference_one_wins() -> None:
    assert configured_bases({"GPUSTACK_AMD_RESOURCE_NAME": "example.com/amd"}) == {
        "amd": "example.com/amd"
    }
    both = {
        "GPUSTACK_AMD_RESOURCE_NAME": "example.com/old",
        "GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "example.com/new",
    }
    assert configured_bases(both) == {"amd": "example.com/new"}
    assert configured_bases({"GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": ""}) == {}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("gpu", "not a qualified name"),
        ("Example.com/gpu", "not a qualified name"),
        ("example.com/", "not a qualified name"),
        ("example.com/gpu'", "not a qualified name"),
        ("kubernetes.io/gpu", "reserved"),
        ("node.k8s.io/gpu", "reserved"),
        ("example.com/" + "g" * 40, "too long"),
    ],
)
def test_a_bad_name_is_refused_naming_the_variable(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as caught:
        configured_bases({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": value})
    assert str(caught.value).startswith(f"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME={value!r}")
    assert "\n" not in str(caught.value)


def test_two_manufacturers_on_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="would share one resource name") as caught:
        configured_bases({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "amd.com/gpu"})
    assert str(caught.value) == (
        "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME='amd.com/gpu': nvidia and amd would share"
        " one resource name; each manufacturer needs a base of its own"
    )


def test_kueues_block_follows_the_override() -> None:
    block = resources(
        configured_names({"GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "gpustack.ai/nv"})
    )
    inputs = {t["input"] for t in block["transformations"]}
    assert {"gpustack.ai/nv", "gpustack.ai/nv.shared", "gpustack.ai/nv.sliced.units"} <= inputs
    assert not any(i.startswith("nvidia.com/gpu") for i in inputs)
