"""Flavors, queues, derived types and the catalog from the walkthrough's four nodes.

The nodes' labels are the walkthrough's (``shared/spec/instancetype-walkthrough.md``, "The
cluster" and §1's Node); every expected name, label, spec and table row is copied from its §1,
§2 and §5 — the YAML blocks verbatim, once, in ``walkthrough_expected`` — never produced by the
module under test.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gpustack_core.decoding import convert
from gpustack_core.derive import (
    catalog,
    cluster_queue,
    derived_instance_type,
    enriched_spec,
    feature_of,
    identity_of,
    member_nodes,
    members,
    node_cores,
    pools,
)
from gpustack_core.devices import AcceleratorSpec, AcceleratorStatus, GroupSpec, LogicalSliced
from gpustack_core.instancetype import InstanceType, InstanceTypeSpec
from gpustack_core.poolnames import PoolIdentity
from gpustack_core.pools import (
    NodeProfile,
    flavors,
    node_labels_of,
    node_profile,
    node_profile_of,
    pinned_flavor_labels,
    resource_flavor,
    steered,
)
from gpustack_core.views import cpu_view
from walkthrough_expected import (
    A10G_FLAVOR,
    A10G_QUEUE,
    A10G_TYPE,
    AWARE_QUEUE,
    CATALOG_A10G,
    CPU_FLAVOR,
    CUSTOM_TYPE,
    SECTION_1_CATALOG,
    SECTION_1_FLAVORS,
    SECTION_1_QUEUE_ROWS,
    SECTION_1_ROWS,
    SECTION_5_CATALOG,
    SECTION_5_ROWS,
    names,
)

G = "general.feature.gpustack.ai/"
A = "acceleratable.feature.gpustack.ai/"
PLATFORM = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
CPU_NAMES = {
    "node-cpu": "AMD EPYC 7R13 Processor",
    "node-a10g": "AMD EPYC 7R32",
    "node-t4-a": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    "node-t4-b": "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
}


def cpu(vendor: str, key: str, cores: int) -> dict[str, str]:
    return {G + vendor: "true", G + key: "true", f"{G}{key}.count": str(cores)}


def nvidia(
    key: str, count: int, memory: str, cores: str, product: str, family: str
) -> dict[str, str]:
    return {
        "feature.gpustack.ai/acceleratable": "true",
        A + "nvidia": "true",
        A + key: "true",
        f"{A}{key}.count": str(count),
        f"{A}{key}.memory": memory,
        f"{A}{key}.cores": cores,
        f"{A}{key}.family": family,
        f"{A}{key}.product": product,
        A + "nvidia.driver-version": "580.159.03",
        A + "nvidia.runtime-version": "13.0",
    }


T4 = ("nvidia-tesla-t4", "16Gi", "2560", "Tesla-T4", "Turing")
NODES = {
    "node-cpu": {**PLATFORM, "gpustack.ai/managed": "true", **cpu("amd", "amd-epyc-7r13", 16)},
    "node-a10g": {  # §1's Node, label for label
        **PLATFORM,
        "gpustack.ai/managed": "true",
        **cpu("amd", "amd-epyc-7r32", 4),
        **nvidia("nvidia-a10g", 1, "24Gi", "10240", "NVIDIA-A10G", "Ampere"),
        A + "nvidia-a10g.comcap": "8.6",
    },
    "node-t4-a": {
        **PLATFORM,
        "gpustack.ai/managed": "true",
        **cpu("intel", "intel-xeon-platinum-8259cl", 4),
        **nvidia(T4[0], 1, *T4[1:]),
    },
    "node-t4-b": {
        **PLATFORM,
        "gpustack.ai/managed": "true",
        **cpu("intel", "intel-xeon-platinum-8259cl", 48),
        **nvidia(T4[0], 4, *T4[1:]),
    },
}


def profiles(nodes: dict[str, dict[str, str]] = NODES) -> list[NodeProfile]:
    found = []
    for name, labels in nodes.items():
        profile = node_profile(
            name, labels, {"feature.gpustack.ai/cpu-name": CPU_NAMES.get(name, "")}
        )
        if profile.profile is not None:
            found.append(profile.profile)
    return found


def card(card_id: str) -> AcceleratorSpec:
    sliced = LogicalSliced(count=128, cores_percentage_overcommit=True)
    return AcceleratorSpec(id=card_id, index=0, status=AcceleratorStatus(logical_sliced=sliced))


T4_B_NODE_LABELS = {
    **PLATFORM,
    "gpustack.ai/managed": "true",
    G + "intel-xeon-platinum-8259cl": "true",
    A + "nvidia-tesla-t4": "true",
    A + "nvidia-tesla-t4.count": "4",
}
"""The ``spec.nodeLabels`` of node-t4-b's T4 flavor (``…-4d``), in the form §1 shows the A10G's."""

DEVICES = (
    GroupSpec(id="a10g", manufacturer="nvidia", accelerators=(card("GPU-a"),)),
    GroupSpec(id="tesla-t4", manufacturer="nvidia", accelerators=(card("GPU-t"),)),
)


def without_kind(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


# -- §1: flavors -------------------------------------------------------------------------------


def test_section_1_seven_flavors() -> None:
    assert [f.name for f in flavors(profiles())] == SECTION_1_FLAVORS


@pytest.mark.parametrize("expected", [A10G_FLAVOR, CPU_FLAVOR], ids=["a10g", "cpu"])
def test_section_1_flavor_objects_are_the_walkthroughs(expected: dict[str, Any]) -> None:
    (found,) = [f for f in flavors(profiles()) if f.name == expected["metadata"]["name"]]
    written = resource_flavor(found)
    assert written["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert written["kind"] == "ResourceFlavor"
    assert without_kind(written) == without_kind(expected)


def test_a_flavor_pools_every_node_of_its_keys() -> None:
    t4 = [f for f in flavors(profiles()) if f.accelerator is not None and f.name.endswith("-1d")]
    assert [(f.name, f.nodes, f.capacity) for f in t4] == [
        ("gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d", ("node-a10g",), 1),
        ("gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d", ("node-t4-a",), 1),
    ]
    twin = {**NODES, "node-t4-c": NODES["node-t4-a"]}
    (pooled,) = [f for f in flavors(profiles(twin)) if f.name.endswith("tesla-t4-linux-amd64-1d")]
    assert (pooled.nodes, pooled.capacity) == (("node-t4-a", "node-t4-c"), 2)
    labels = resource_flavor(pooled)["metadata"]["labels"]
    assert labels[A + "nvidia-tesla-t4.capacity"] == "2"  # nodes × count
    assert labels[A + "nvidia-tesla-t4.count"] == "1"


# -- §1: queues, types, catalog ----------------------------------------------------------------


def test_section_1_three_queues_and_types() -> None:
    found = pools(flavors(profiles()), aware=False)
    assert [p.name for p in found] == names(SECTION_1_QUEUE_ROWS)


def test_section_1_a10g_cluster_queue() -> None:
    found = pools(flavors(profiles()), aware=False)
    pool = PoolIdentity("generic", "nvidia-a10g", "linux", "amd64")
    written = cluster_queue(pool, found[pool], admission_check=True)
    # The walkthrough trims the spec; Kueue needs the empty selector to admit from any
    # namespace (its default selects none), so it is the one field the recording omits.
    assert written["spec"].pop("namespaceSelector") == {}
    assert without_kind(written) == without_kind(A10G_QUEUE)
    assert written["kind"] == "ClusterQueue"


def test_the_check_is_referenced_only_when_asked_and_only_on_accelerated_queues() -> None:
    found = pools(flavors(profiles()), aware=False)
    a10g = PoolIdentity("generic", "nvidia-a10g", "linux", "amd64")
    assert (
        "admissionChecksStrategy"
        not in cluster_queue(a10g, found[a10g], admission_check=False)["spec"]
    )
    generic = PoolIdentity("generic", "", "linux", "amd64")
    cpu_queue = cluster_queue(generic, found[generic], admission_check=True)
    assert "admissionChecksStrategy" not in cpu_queue["spec"]
    (group,) = cpu_queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu"]
    # Smallest per-node count first; each flavor's quota its cores.
    assert [(f["name"], f["resources"][0]["nominalQuota"]) for f in group["flavors"]] == [
        ("gpustack--amd-epyc-7r32-linux-amd64-4c", "4"),
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c", "4"),
        ("gpustack--amd-epyc-7r13-linux-amd64-16c", "16"),
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c", "48"),
    ]
    assert cpu_queue["metadata"]["labels"]["feature.gpustack.ai/acceleratable"] == "false"


def test_the_t4_queue_holds_credits_for_five_cards() -> None:
    found = pools(flavors(profiles()), aware=False)
    t4 = PoolIdentity("generic", "nvidia-tesla-t4", "linux", "amd64")
    (group,) = cluster_queue(t4, found[t4], admission_check=True)["spec"]["resourceGroups"]
    assert [f["resources"][0]["nominalQuota"] for f in group["flavors"]] == ["1600k", "6400k"]


def test_a_pool_without_flavors_has_no_resource_groups() -> None:
    pool = PoolIdentity("generic", "nvidia-a10g", "linux", "amd64")
    assert cluster_queue(pool, (), admission_check=True)["spec"]["resourceGroups"] == []


def test_section_1_derived_a10g_instance_type() -> None:
    found = pools(flavors(profiles()), aware=False)
    pool = PoolIdentity("generic", "nvidia-a10g", "linux", "amd64")
    derived = derived_instance_type(pool, found[pool], feature_of(DEVICES, "nvidia-a10g"))
    recorded = {k: v for k, v in A10G_TYPE.items() if k != "status"}  # the spec's, not the view
    assert derived == convert(recorded, InstanceType, what="walkthrough")
    assert msgspec.to_builtins(derived)["metadata"]["labels"] == A10G_TYPE["metadata"]["labels"]


@pytest.mark.parametrize(
    ("pool", "unit"),
    [
        (PoolIdentity("generic", "", "linux", "amd64"), ("1", "2Gi", "100Gi")),
        (PoolIdentity("generic", "nvidia-tesla-t4", "linux", "amd64"), ("8", "32Gi", "100Gi")),
    ],
)
def test_section_1_presets_of_the_other_types(pool: PoolIdentity, unit: tuple[str, ...]) -> None:
    found = pools(flavors(profiles()), aware=False)
    derived = derived_instance_type(pool, found[pool], feature_of(DEVICES, pool.accelerator_group))
    units = derived.spec.unit_resources
    assert (units.cpu, units.ram, units.local_storage) == unit


def cells(entries: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    return [
        (
            e.metadata.name,
            e.spec.general_group,
            e.spec.accelerator_group,
            e.spec.acceleratable,
            e.spec.manufacturer,
            e.spec.product,
            e.spec.memory or "",
            e.spec.cores or "",
            e.spec.sliceable,
        )
        for e in entries
    ]


def test_section_1_catalog() -> None:
    entries = catalog(flavors(profiles()), aware=False, groups=DEVICES)
    assert cells(entries) == SECTION_1_CATALOG
    encoded = msgspec.to_builtins(entries[1])
    assert encoded == without_kind(CATALOG_A10G)  # §1's InstanceTypeFlavor YAML: no labels
    assert msgspec.to_builtins(entries[0])["spec"]["acceleratable"] is False  # written, not omitted


def test_sliceability_unknown_without_devices() -> None:
    entries = catalog(flavors(profiles()), aware=False)
    assert [e.spec.sliceable for e in entries] == [None, None, None]


# -- §2: a node leaves management --------------------------------------------------------------


def test_section_2_an_unmanaged_node_leaves_its_flavors_and_the_cpu_pool() -> None:
    unmanaged = {**NODES, "node-a10g": {**NODES["node-a10g"], "gpustack.ai/managed": "false"}}
    assert node_profile("node-a10g", unmanaged["node-a10g"]).profile is None
    left = flavors(profiles(unmanaged))
    assert [f.name for f in left] == [n for n in SECTION_1_FLAVORS if "amd-epyc-7r32" not in n]
    a10g = PoolIdentity("generic", "nvidia-a10g", "linux", "amd64")
    assert members(a10g, left) == ()
    generic = PoolIdentity("generic", "", "linux", "amd64")
    # The generic CPU cell: 48/72 before, 48/68 after (onceMaxRequest/remaining, in cores).
    before = cpu_view(node_cores(members(generic, flavors(profiles()))))
    after = cpu_view(node_cores(members(generic, left)))
    assert (before.once_max_request, before.remaining) == (48_000, 72_000)
    assert (after.once_max_request, after.remaining) == (48_000, 68_000)


# -- §5: CPU-manufacturer awareness -------------------------------------------------------------


def test_section_5_flavors_are_unchanged_and_the_pools_split() -> None:
    found = flavors(profiles())
    assert len(found) == 7  # kubectl get resourceflavor --no-headers | wc -l
    aware = pools(found, aware=True)
    # §5's rows but the collapsed ones §1 printed.
    assert [p.name for p in aware] == [
        n for n in names(SECTION_5_ROWS) if n not in names(SECTION_1_ROWS)
    ]
    cells_5 = {p.name: cpu_view(node_cores(m)) for p, m in aware.items() if not p.acceleratable}
    assert {n: (v.once_max_request // 1000, v.remaining // 1000) for n, v in cells_5.items()} == {
        "gpustack--amd-epyc-7r13-linux-amd64": (16, 16),
        "gpustack--amd-epyc-7r32-linux-amd64": (4, 4),
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64": (48, 52),
    }


def test_section_5_aware_queue_carries_the_cpu_key() -> None:
    aware = pools(flavors(profiles()), aware=True)
    pool = PoolIdentity("amd-epyc-7r32", "nvidia-a10g", "linux", "amd64")
    written = cluster_queue(pool, aware[pool], admission_check=True)
    assert written["metadata"]["labels"] == AWARE_QUEUE["metadata"]["labels"]


def test_section_5_the_collapsed_types_still_find_their_flavors() -> None:
    # Kept after the flip (create-only): their identity still selects every CPU's flavors.
    found = flavors(profiles())
    t4 = identity_of(
        InstanceTypeSpec(
            acceleratable=True,
            accelerator_group="nvidia-tesla-t4",
            general_group="generic",
            os="linux",
            arch="amd64",
        )
    )
    assert member_nodes(members(t4, found)) == ("node-t4-a", "node-t4-b")


def test_section_5_catalog() -> None:
    entries = catalog(flavors(profiles()), aware=True, groups=DEVICES)
    assert cells(entries) == sorted(SECTION_5_CATALOG)  # by name; the walkthrough's CPU first


def test_section_5_aware_types_presets() -> None:
    aware = pools(flavors(profiles()), aware=True)
    units = {
        p.name: derived_instance_type(p, m, feature_of(DEVICES, p.accelerator_group)).spec
        for p, m in aware.items()
    }
    assert units["gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"].general_group == (
        "amd-epyc-7r32"
    )
    assert units["gpustack--amd-epyc-7r13-linux-amd64"].unit_resources.cpu == "1"
    assert (
        units[
            "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64"
        ].unit_resources.ram
        == "32Gi"
    )


# -- §4: a custom type is enriched from its pool ------------------------------------------------


def test_section_4_a_custom_type_is_enriched_and_keeps_its_units() -> None:
    custom = convert(CUSTOM_TYPE["spec"], InstanceTypeSpec, what="a10g-12c128g")
    pool = identity_of(custom)
    assert pool.name == "gpustack--nvidia-a10g-linux-amd64"  # a sibling of the derived pool
    found = members(pool, flavors(profiles()))
    spec = enriched_spec(custom, found, feature_of(DEVICES, "nvidia-a10g"))
    assert (spec.general_group, spec.manufacturer, spec.product, spec.family) == (
        "generic",
        "nvidia",
        "NVIDIA-A10G",
        "Ampere",
    )
    assert (spec.memory, spec.cores, spec.feature.logical_sliced.max_size) == ("24Gi", "10240", 128)
    assert (spec.unit_resources.cpu, spec.unit_resources.ram) == ("12", "128Gi")


# -- bad and partial labels ---------------------------------------------------------------------


def test_a_bad_count_is_left_out_with_its_reason() -> None:
    labels = {
        **NODES["node-t4-b"],
        f"{A}nvidia-tesla-t4.count": "four",
        f"{G}intel-xeon-platinum-8259cl.count": "-1",
    }
    found = node_profile("node-t4-b", labels)
    assert found.profile is not None
    assert found.profile.accelerators == ()
    assert found.profile.cores is None
    assert found.skipped == (
        "node node-t4-b: label general.feature.gpustack.ai/intel-xeon-platinum-8259cl.count="
        "'-1' is not a positive count; ignored",
        "node node-t4-b: label acceleratable.feature.gpustack.ai/nvidia-tesla-t4.count='four' "
        "is not a positive count; ignored",
    )
    assert flavors([found.profile]) == ()  # no count, no name: no flavor


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({**PLATFORM, **cpu("amd", "amd-epyc-7r13", 16)}, "not managed"),
        ({"gpustack.ai/managed": "true", **cpu("amd", "amd-epyc-7r13", 16)}, "no kubernetes.io/os"),
        ({**PLATFORM, "gpustack.ai/managed": "true"}, "no general.feature.gpustack.ai/<CPU key>"),
    ],
)
def test_a_node_outside_every_pool_says_why(labels: dict[str, str], why: str) -> None:
    found = node_profile("n", labels)
    assert found.profile is None
    assert why in found.skipped[0]


def test_a_node_object_is_read_as_its_labels() -> None:
    obj = {
        "metadata": {
            "name": "node-cpu",
            "labels": NODES["node-cpu"],
            "annotations": {"feature.gpustack.ai/cpu-name": "AMD EPYC 7R13 Processor"},
        }
    }
    found = node_profile_of(obj).profile
    assert found is not None
    assert (found.general_key, found.cores, found.cpu_manufacturer) == ("amd-epyc-7r13", 16, "amd")
    assert found.cpu_product == "AMD EPYC 7R13 Processor"
    assert node_profile_of({"metadata": "nonsense"}).profile is None


def test_without_mixed_on_node_cpu_flavors_skip_accelerated_nodes() -> None:
    found = flavors(profiles(), mixed_on_node=False)
    cpu_only = [f for f in found if f.accelerator is None]
    assert [f.name for f in cpu_only] == ["gpustack--amd-epyc-7r13-linux-amd64-16c"]
    node_labels = resource_flavor(cpu_only[0])["spec"]["nodeLabels"]
    assert node_labels["feature.gpustack.ai/cpu-only"] == "true"


def test_a_pinned_node_names_the_flavor_it_forms_for_the_pool() -> None:
    """§6 pins pinned-demo (the T4 type) to node-t4-b: the Pod's selector must name node-t4-b's
    flavor (§1's nodeLabels form, count 4), not node-t4-a's, which Kueue lists first."""

    def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
        annotations = {"feature.gpustack.ai/cpu-name": CPU_NAMES[name]}
        return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}

    t4b = node("node-t4-b", NODES["node-t4-b"])
    assert pinned_flavor_labels(t4b, "nvidia-tesla-t4") == T4_B_NODE_LABELS
    # The CPU pool: the node's cores flavor (§1's CPU flavor form).
    assert pinned_flavor_labels(node("node-cpu", NODES["node-cpu"]), None) == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gpustack.ai/managed": "true",
        G + "amd-epyc-7r13": "true",
        G + "amd-epyc-7r13.count": "16",
    }
    # No flavor of that pool on the node, or the node unmanaged: nothing beyond the hostname.
    assert pinned_flavor_labels(t4b, "nvidia-a10g") == {}
    assert pinned_flavor_labels(node("node-cpu", NODES["node-cpu"]), "nvidia-tesla-t4") == {}
    gone = node("node-t4-b", {**NODES["node-t4-b"], "gpustack.ai/managed": "false"})
    assert pinned_flavor_labels(gone, "nvidia-tesla-t4") == {}


def test_steering_names_the_flavors_with_a_node_that_fits_and_only_some() -> None:
    """The T4 pool's two flavors (§1: node-t4-a's 1d listed first, node-t4-b's 4d)."""
    t4 = [f for f in flavors(profiles()) if f.accelerator and f.accelerator.key == T4[0]]
    by_node = {f.nodes: f for f in t4}
    assert set(by_node) == {("node-t4-a",), ("node-t4-b",)}
    assert steered(t4, {"node-t4-b"}) == (by_node[("node-t4-b",)],)
    assert node_labels_of(by_node[("node-t4-b",)]) == T4_B_NODE_LABELS
    assert steered(t4, {"node-t4-a", "node-t4-b"}) == ()  # every flavor can: nothing to steer
    assert steered(t4, set()) == ()  # none can now: unsteered, the check's Retry says why
    assert steered(t4, {"node-cpu"}) == ()  # a node of no member flavor counts for nothing
