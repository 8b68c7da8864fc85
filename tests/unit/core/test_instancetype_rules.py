"""The InstanceType webhook's rules: defaulting from the catalog flavor, validation, immutability.

The nodes are the walkthrough's four (``test_pools``: its labels, letter for letter). Expected
descriptors are copied from the walkthrough's §1 YAML of the derived A10G type (the flavor the
§4 custom type references; both in ``walkthrough_expected``), the entrance of ``a10g-12c128g``
from the reference note (``shared/reference/instancetypes.md``; ``CUSTOM_ENTRANCE``); messages
are apimachinery's field-error wording.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_pools import DEVICES, NODES, PLATFORM, profiles

from gpustack_core.decoding import convert
from gpustack_core.derive import feature_of
from gpustack_core.instancetype import Feature, InstanceTypeSpec, UnitResources
from gpustack_core.instancetype_rules import (
    IMMUTABLE_DETAIL,
    carried,
    defaulted,
    immutable_errors,
    labels_patch,
    platforms,
    spec_errors,
    spec_patch,
    stamped_labels,
)
from gpustack_core.pools import flavors
from walkthrough_expected import A10G_TYPE, CUSTOM_ENTRANCE, CUSTOM_TYPE

A10G_FEATURE = feature_of(DEVICES, "nvidia-a10g")


def spec_of(raw: dict[str, Any]) -> InstanceTypeSpec:
    return convert(raw, InstanceTypeSpec, what="spec")


def custom() -> dict[str, Any]:
    """§4's type, a copy of its own to change."""
    return copy.deepcopy(CUSTOM_TYPE)


def apply_adds(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` on object members, written here from the RFC (the patch is the
    subject under test, its application is not)."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        at = out
        for part in parents:
            at = at[part]
        at[last] = op["value"]
    return out


# -- defaulting -------------------------------------------------------------------------------


def test_the_section_4_type_is_enriched_as_the_derived_a10g_type_is() -> None:
    spec, warnings = defaulted(spec_of(custom()["spec"]), flavors(profiles()), A10G_FEATURE)
    assert warnings == []
    expected = A10G_TYPE["spec"] | {"unitResources": CUSTOM_TYPE["spec"]["unitResources"]}
    assert spec == spec_of(expected)


def test_the_patch_turns_the_written_object_into_the_defaulted_one() -> None:
    obj = custom()
    spec, _ = defaulted(spec_of(obj["spec"]), flavors(profiles()), A10G_FEATURE)
    patch = spec_patch(obj["spec"], spec_of(obj["spec"]), spec)
    assert {op["path"] for op in patch} == {
        f"/spec/{f}"
        for f in ("generalGroup", "manufacturer", "product", "family", "memory", "cores", "feature")
    }
    patched = apply_adds(obj, patch)
    assert spec_of(patched["spec"]) == spec
    assert patched["spec"]["unitResources"] == custom()["spec"]["unitResources"]  # kept
    # Nothing to add to a spec that already says everything.
    derived = spec_of(A10G_TYPE["spec"])
    assert spec_patch(A10G_TYPE["spec"], derived, derived) == []
    # No spec at all: the whole of it.
    assert apply_adds({"metadata": {}}, spec_patch(None, InstanceTypeSpec(), spec))["spec"] == (
        msgspec.to_builtins(spec)
    )


def test_labels_are_the_pools_and_the_entrance_of_the_types_own_name() -> None:
    labels = stamped_labels("a10g-12c128g", spec_of(custom()["spec"]))
    assert labels == {
        **PLATFORM,
        "feature.gpustack.ai/acceleratable": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "schedule.gpustack.ai/queue-entrance": CUSTOM_ENTRANCE,
    }
    # A derived type's stamp is its §1 labels but the provenance label (its creator's claim).
    derived = stamped_labels(A10G_TYPE["metadata"]["name"], spec_of(A10G_TYPE["spec"]))
    recorded = dict(A10G_TYPE["metadata"]["labels"])
    del recorded["schedule.gpustack.ai/derived-from-node"]
    assert derived == recorded


def test_the_labels_patch_escapes_the_keys_and_keeps_other_labels() -> None:
    obj = {"metadata": {"name": "x", "labels": {"team": "ml", "kubernetes.io/os": "linux"}}}
    stamp = {"kubernetes.io/os": "linux", "schedule.gpustack.ai/queue-entrance": "gpustack-fnv64-1"}
    patch = labels_patch(obj["metadata"]["labels"], stamp)
    assert patch == [
        {
            "op": "add",
            "path": "/metadata/labels/schedule.gpustack.ai~1queue-entrance",
            "value": "gpustack-fnv64-1",
        }
    ]
    assert apply_adds(obj, patch)["metadata"]["labels"] == {"team": "ml", **stamp}
    bare: dict[str, Any] = {"metadata": {"name": "x"}}
    assert apply_adds(bare, labels_patch(None, stamp))["metadata"]["labels"] == stamp


def test_the_platform_is_defaulted_only_when_one_offers_the_pool() -> None:
    no_platform = {k: v for k, v in custom()["spec"].items() if k not in ("os", "arch")}
    spec, warnings = defaulted(spec_of(no_platform), flavors(profiles()), A10G_FEATURE)
    assert (spec.os, spec.arch) == ("linux", "amd64")
    assert spec.product == "NVIDIA-A10G"
    assert warnings == []
    arm = {**NODES, "node-a10g-arm": {**NODES["node-a10g"], "kubernetes.io/arch": "arm64"}}
    offered = flavors(profiles(arm))
    assert platforms(spec_of(no_platform), offered) == [("linux", "amd64"), ("linux", "arm64")]
    spec, warnings = defaulted(spec_of(no_platform), offered, A10G_FEATURE)
    assert (spec.os, spec.arch, spec.product) == ("", "", "")
    assert warnings == [
        "spec.os and spec.arch are not both set and the pool is offered on linux/amd64, "
        "linux/arm64: the type selects no flavor until it names one platform (delete it and "
        "create it again)"
    ]
    # One of them stated picks the other.
    spec, warnings = defaulted(spec_of({**no_platform, "arch": "arm64"}), offered, A10G_FEATURE)
    assert (spec.os, spec.arch, warnings) == ("linux", "arm64", [])


def test_an_accelerator_no_node_offers_is_kept_as_written_with_a_warning() -> None:
    written = spec_of({**custom()["spec"], "acceleratorGroup": "nvidia-h200"})
    spec, warnings = defaulted(written, flavors(profiles()), Feature())
    assert msgspec.structs.replace(spec, general_group="") == written
    assert warnings == [
        "no managed node offers nvidia-h200 on linux/amd64 now: the type's descriptors are "
        "left as written and its pool is empty until one does"
    ]


def test_what_the_author_states_is_kept() -> None:
    stated = {
        **custom()["spec"],
        "product": "A10G-custom",
        "feature": {"logicalSliced": {"maxSize": 4}},
    }
    spec, _ = defaulted(spec_of(stated), flavors(profiles()), A10G_FEATURE)
    assert spec.product == "A10G-custom"
    assert msgspec.to_builtins(spec.feature) == {"logicalSliced": {"maxSize": 4}}
    assert spec.family == "Ampere"  # what it left out is still filled


def test_a_cpu_type_gets_the_generic_group_and_no_accelerator_descriptors() -> None:
    spec, warnings = defaulted(
        spec_of({"acceleratable": False, "os": "linux", "arch": "amd64"}),
        flavors(profiles()),
        A10G_FEATURE,
    )
    assert (spec.general_group, spec.manufacturer, spec.feature) == ("generic", "", Feature())
    assert warnings == []


# -- validation -------------------------------------------------------------------------------


def messages(spec: dict[str, Any]) -> list[str]:
    return [str(e) for e in spec_errors(spec_of(spec))]


def test_the_walkthrough_types_are_valid() -> None:
    assert messages(custom()["spec"]) == []
    assert messages(A10G_TYPE["spec"]) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"acceleratorGroup": ""},
            "spec.acceleratorGroup: Required value: an acceleratable InstanceType names its "
            "accelerator key, the catalog's acceleratorGroup (kubectl get instancetypeflavor), "
            "e.g. nvidia-a10g",
        ),
        (
            {"acceleratable": False},
            "spec.acceleratorGroup: Forbidden: a CPU InstanceType (acceleratable: false) names "
            "no accelerator key: set acceleratable: true to pool those accelerators",
        ),
        (
            {"acceleratorGroup": "NVIDIA_A10G"},
            'spec.acceleratorGroup: Invalid value: "NVIDIA_A10G": a lowercase RFC 1123 label '
            "must consist of lower case alphanumeric characters or '-', and must start and end "
            "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
        (
            {"generalGroup": "amd.epyc"},
            'spec.generalGroup: Invalid value: "amd.epyc": must not contain dots',
        ),
        (
            {"unitResources": {"cpu": "0"}},
            'spec.unitResources.cpu: Invalid value: "0": must be greater than 0',
        ),
        (
            {"unitResources": {"ram": "-1Gi"}},
            'spec.unitResources.ram: Invalid value: "-1Gi": must be greater than 0',
        ),
        (
            {"unitResources": {"cpu": "1e12"}},
            'spec.unitResources.cpu: Invalid value: "1e12": must be no more than 65536 cores: '
            "no node holds more",
        ),
        (
            {"unitResources": {"localStorage": "2Ei"}},
            'spec.unitResources.localStorage: Invalid value: "2Ei": must be no more than 1Ei: '
            "no node holds more",
        ),
        (
            {"memory": "0"},
            'spec.memory: Invalid value: "0": must be greater than 0',
        ),
        (
            {"feature": {"logicalSliced": {"memoryPercentageStep": 101}}},
            "spec.feature.logicalSliced.memoryPercentageStep: Invalid value: 101: must be no "
            "more than 100: a slice's memory is a percentage of the card's",
        ),
    ],
)
def test_a_wrong_field_is_named_as_kube_apiserver_names_it(
    change: dict[str, Any], expected: str
) -> None:
    assert messages({**custom()["spec"], **change}) == [expected]


def test_os_and_arch_are_label_values() -> None:
    found = messages({**custom()["spec"], "os": "linux/", "arch": "x" * 64})
    assert [m.split(":", 1)[0] for m in found] == ["spec.os", "spec.arch"]
    assert "must be no more than 63 characters" in found[1]


# -- immutability -----------------------------------------------------------------------------


def test_only_display_name_and_inactive_may_change() -> None:
    old = spec_of(A10G_TYPE["spec"])
    renamed = msgspec.structs.replace(old, display_name="A10G, one card", inactive=True)
    assert immutable_errors(renamed, old) == []
    resized = spec_of({**A10G_TYPE["spec"], "unitResources": {"cpu": "12"}, "os": "windows"})
    assert [str(e) for e in immutable_errors(resized, old)] == [
        f"spec.os: Forbidden: {IMMUTABLE_DETAIL}",
        f"spec.unitResources: Forbidden: {IMMUTABLE_DETAIL}",
    ]
    assert IMMUTABLE_DETAIL == (
        "field is immutable after creation (only displayName and inactive may change): to "
        "re-size or re-point a pool, delete the InstanceType and create it again"
    )


def test_an_update_leaving_defaulted_fields_out_keeps_them() -> None:
    stored, _ = defaulted(spec_of(custom()["spec"]), flavors(profiles()), A10G_FEATURE)
    rewritten = spec_of({**custom()["spec"], "displayName": "big A10G"})  # the manifest again
    kept = carried(rewritten, stored)
    assert immutable_errors(kept, stored) == []
    assert kept == msgspec.structs.replace(stored, display_name="big A10G")
    partial = spec_of({**custom()["spec"], "unitResources": {"cpu": "12"}})
    assert carried(partial, stored).unit_resources == stored.unit_resources
    # A value written differently is not carried over: it is a change, and refused.
    moved = carried(spec_of({**custom()["spec"], "product": "other"}), stored)
    assert [e.field for e in immutable_errors(moved, stored)] == ["spec.product"]
    # displayName and inactive are the author's to clear.
    named = msgspec.structs.replace(stored, display_name="x", inactive=True)
    cleared = carried(spec_of(custom()["spec"]), named)
    assert (cleared.display_name, cleared.inactive) == ("", False)


QUANTITY = st.sampled_from(["1", "8", "12", "64Gi", "100Gi", "500m"])
TEXT = st.sampled_from(["", "nvidia", "linux", "amd64", "Ampere", "NVIDIA-A10G"])
SPECS = st.builds(
    InstanceTypeSpec,
    display_name=TEXT,
    acceleratable=st.booleans(),
    accelerator_group=TEXT,
    general_group=TEXT,
    os=TEXT,
    arch=TEXT,
    manufacturer=TEXT,
    product=TEXT,
    family=TEXT,
    memory=st.none() | QUANTITY,
    cores=st.none() | QUANTITY,
    unit_resources=st.builds(
        UnitResources,
        cpu=st.none() | QUANTITY,
        ram=st.none() | QUANTITY,
        local_storage=st.none() | QUANTITY,
    ),
    inactive=st.booleans(),
)


@given(old=SPECS, name=TEXT, inactive=st.booleans())
def test_a_bare_update_of_the_mutable_fields_is_never_refused(
    old: InstanceTypeSpec, name: str, inactive: bool
) -> None:
    """Whatever is stored, an update naming only the mutable fields (and the flag it must
    repeat) carries the rest and changes nothing immutable."""
    bare = InstanceTypeSpec(display_name=name, inactive=inactive, acceleratable=old.acceleratable)
    kept = carried(bare, old)
    assert immutable_errors(kept, old) == []
    assert (kept.display_name, kept.inactive) == (name, inactive)


@given(old=SPECS, new=SPECS)
def test_an_update_is_refused_exactly_when_an_immutable_field_moves(
    old: InstanceTypeSpec, new: InstanceTypeSpec
) -> None:
    kept = carried(new, old)
    moved = msgspec.structs.replace(kept, display_name="", inactive=False) != (
        msgspec.structs.replace(old, display_name="", inactive=False)
    )
    assert bool(immutable_errors(kept, old)) == moved
