"""A ninth manufacturer is its package plus one table row (issue #32, item 1).

The fixture adds ``acme``: a row in :data:`gpustack_core.manufacturers.MANUFACTURERS` and a
tiny vendor package (a library whose init answers, a backend over it, one registry entry).
Every place that used to keep its own copy of a manufacturer fact must now see acme's row with
nothing else changed; each expected value below is written from the row, by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpustack_cli.simulator_cmds import recordable
from gpustack_core import manufacturers
from gpustack_core.capacity import node_capacity
from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    PhysicalProfile,
    PhysicalSliced,
)
from gpustack_core.features import Card as FeatureCard
from gpustack_core.features import groups_from_cards
from gpustack_core.instance import Resources
from gpustack_core.kueueconfig import excluded_prefixes, transformations
from gpustack_core.manufacturers import DRI, DeviceNode, Maker
from gpustack_core.modes import AllocationMode, Manufacturer, sliced_cores_resource
from gpustack_core.podmatch import asks_expression, default_bases_json, folded_expression
from gpustack_core.requests import is_accelerator_resource, parse_pod, selects
from gpustack_core.resourceconfig import configured_bases, names_with
from gpustack_core.resources import ResourceNames
from gpustack_devicemanager.deviceplugin import injection
from gpustack_devicemanager.deviceplugin.injection import Card, device_nodes
from gpustack_simulator.scenario.builders import pci_present_label
from gpustack_vendors import loading, registry
from gpustack_vendors.model import CardSample, Detection, DeviceProcesses, PartitionSample
from gpustack_vendors.registry import Bindings, Library, Vendor
from gpustack_worker.instances.render import accelerator_limits

ACME = Maker(
    name="acme",
    resource_base="acme.example/npu",
    pci_vendor_ids=("acce",),
    library="ACMESML",
    logical_slices=8,
    partition_kind="slab",
    runtime_class="acme",
    library_nodes=(DeviceNode("/dev/acme_ctl"), DeviceNode("/dev/acme{index}")),
    container_nodes=(
        DeviceNode("/dev/acme_ctl"),
        DeviceNode("/dev/acme{index}"),
        DeviceNode(DRI, directory=True),
    ),
    privileged=True,
    privileged_why="test fixture",
    chart_hint="in the Helm chart, install the acme runtime",
)


class AcmeSml:
    """The fixture's library: it initialises and reports no card."""

    def __init__(self) -> None:
        self.initialised = False

    def acme_init(self) -> None:
        self.initialised = True


class AcmeBackend:
    """A backend over :class:`AcmeSml`, shaped as every backend is."""

    manufacturer = "acme"

    def __init__(self, library: AcmeSml) -> None:
        library.acme_init()
        self.library = library

    def detect(self) -> Detection:
        return Detection("acme", ())

    def sample(self) -> list[CardSample]:
        return []

    def processes(self, device_ids: Sequence[str]) -> dict[str, DeviceProcesses]:
        return {}

    def partitions(self, partition_ids: Sequence[str]) -> dict[str, PartitionSample]:
        return {}

    def close(self) -> None:
        self.library.initialised = False


def _build(bindings: Bindings) -> AcmeBackend:
    library: AcmeSml = bindings["acmesml"]
    return AcmeBackend(library)


ACME_VENDOR = Vendor(
    manufacturer="acme",
    libraries=(
        Library[AcmeSml](
            id="acmesml", soname="libacmesml.so", module=__name__, dist="test", load=AcmeSml
        ),
    ),
    build=_build,
    init_failure="ACMESML did not initialise",
    init_errors=(RuntimeError,),
)


@pytest.fixture
def acme(monkeypatch: pytest.MonkeyPatch) -> None:
    """acme's row and registry entry, added after every module here was imported.

    So each place below is shown to read the table when it is asked, not when it was imported.
    The one exception left is the CLI's ``--help`` text (``device-manager detect
    --manufacturer``, ``simulator record``): typer fixes an option's help when the command is
    defined, at ``gpustack_cli.main``'s import, and it lists the rows then. A real new row is in
    the table before anything imports, so its help lists it; only this fixture's late row is
    missing there, and what the commands accept (``recordable()``) is read at the call.
    """
    monkeypatch.setitem(manufacturers.MANUFACTURERS, "acme", ACME)
    monkeypatch.setitem(registry.VENDORS, "acme", ACME_VENDOR)


@pytest.mark.usefixtures("acme")
def test_every_core_derivation_sees_the_row() -> None:
    assert ResourceNames.of("acme").sliced == "acme.example/npu.sliced"
    assert sliced_cores_resource("acme") == "acme.example/npu.sliced.cores-percentage"
    assert names_with({})[-1] == ResourceNames(base="acme.example/npu", manufacturer="acme")
    assert '"acme": "acme.example/npu"' in default_bases_json()
    assert configured_bases({"GPUSTACK_ACME_ACCELERATABLE_RESOURCE_NAME": "x.example/y"}) == {
        "acme": "x.example/y"
    }
    grouped = groups_from_cards(
        "acme", [FeatureCard("a-0", 0, "Acme N1", 1024, None, "1.0", "1.0")]
    )
    sliced = grouped.groups[0].accelerators[0].status.logical_sliced
    assert sliced is not None
    assert sliced.count == 8
    assert manufacturers.runtime_class("acme") == "acme"  # the Instance controller's lookup
    assert manufacturers.device_access()["acme"] == {
        "privileged": True,
        "mounts": [{"path": "/dev/acme_ctl", "type": "CharDevice"}],
    }


@pytest.mark.usefixtures("acme")
def test_the_vendor_package_the_daemon_and_the_simulator_see_it(tmp_path: Path) -> None:
    assert ACME_VENDOR.partition_kind == "slab"
    assert ACME_VENDOR.resources.base == "acme.example/npu"
    assert loading.chart_hint("acme") == "in the Helm chart, install the acme runtime"
    backend = registry.start(ACME_VENDOR, registry.open_bindings(ACME_VENDOR))
    assert backend.detect() == Detection("acme", ())
    assert "acme" in recordable()
    assert pci_present_label("acme") == "feature.node.kubernetes.io/pci-acce.present"
    dev, sysfs = tmp_path / "dev", tmp_path / "sys"
    drm = sysfs / "bus" / "pci" / "devices" / "0000:05:00.0" / "drm"
    for name in ("card3", "renderD131"):
        (drm / name).mkdir(parents=True)
    cards = [Card("a-1", 1, pci_bus_id="0000:05:00.0")]
    assert [n.path for n in device_nodes("acme", cards, dev, sysfs)] == [
        f"{dev}/acme_ctl",
        f"{dev}/acme1",
        f"{dev}/dri/card3",
        f"{dev}/dri/renderD131",
    ]
    # The runtime's variables are a Device Manager table of their own; acme has none yet.
    with pytest.raises(KeyError, match="acme"):
        injection.vendor("acme")


BASE = "acme.example/npu"
"""acme's row's resource base, written out: every name below is spelled from it by hand."""


def _pod(limits: dict[str, str]) -> dict[str, object]:
    return {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}


@pytest.mark.usefixtures("acme")
def test_the_default_names_are_the_table_at_the_call() -> None:
    """Where no names are passed (the Pod webhook's and Kueue's defaults, the webhook's CEL),
    acme's are among them. These read ``requests.DEFAULT_NAMES``, a tuple taken at import,
    which a row added later never reached."""
    assert is_accelerator_resource(f"{BASE}.sliced")
    assert is_accelerator_resource("device.gpustack.ai/acme.visibility")
    assert selects(_pod({BASE: "1"}))
    [container] = parse_pod(_pod({BASE: "2"}))
    [request] = container.requests
    assert (request.names.base, request.mode, request.count) == (
        BASE,
        AllocationMode.EXCLUSIVE,
        2,
    )
    assert f"'{BASE}'" in asks_expression()
    assert f"'{BASE}.sliced'" in folded_expression()
    assert {
        "input": BASE,
        "strategy": "Replace",
        "outputs": {"credits.gpustack.ai/acme": "1600000"},
    } in (transformations())
    assert f"{BASE}.sliced.memory-percentage" in excluded_prefixes()


@pytest.mark.usefixtures("acme")
def test_the_partition_word_is_the_table_at_the_call() -> None:
    """acme partitions into ``slab``s: every place that spells or reads a partition resource
    says ``slab`` (these read ``resources.PARTITION_KINDS``, a dict taken at import, and
    refused acme's partitions as "no hardware partitioning")."""
    [container] = parse_pod(_pod({f"{BASE}.partitioned": "1", f"{BASE}.partitioned.slab-2c": "1"}))
    [request] = container.requests
    assert (request.mode, request.partition_kind, request.partition_profile) == (
        AllocationMode.PARTITIONED,
        "slab",
        "2c",
    )
    assert f"{BASE}.partitioned.slab-" in excluded_prefixes()
    assert {
        "input": f"{BASE}.partitioned.units",
        "strategy": "Replace",
        "outputs": {"credits.gpustack.ai/acme": "1"},
    } in (transformations())
    card = AcceleratorSpec(
        id="a-0",
        index=0,
        status=AcceleratorStatus(
            physical_sliced=PhysicalSliced(profiles=(PhysicalProfile(name="2c", count=3),), count=3)
        ),
    )
    offered = node_capacity([GroupSpec(id="n1", manufacturer="acme", accelerators=(card,))])
    assert offered[f"{BASE}.partitioned.slab-2c"] == 3
    assert offered[f"{BASE}.partitioned.units"] == 1_600_000
    limits = accelerator_limits(
        Resources(accelerator=1, accelerator_partitioned_profile="2c"), ResourceNames.of("acme")
    )
    assert limits == {f"{BASE}.partitioned": "1", f"{BASE}.partitioned.slab-2c": "1"}


def test_without_the_row_nothing_knows_acme() -> None:
    with pytest.raises(ValueError, match="acme"):
        ResourceNames.of("acme")
    assert device_nodes("acme", [Card("a-1", 1)]) == []
    assert "acme" not in recordable()
    assert not is_accelerator_resource(f"{BASE}.sliced")
    assert not selects(_pod({BASE: "1"}))
    assert f"'{BASE}'" not in asks_expression()


def test_every_name_code_spells_has_a_row() -> None:
    # Manufacturer.NVIDIA and its kin are names for code; their facts are the table's rows.
    assert [m.value for m in Manufacturer] == [
        name for name in manufacturers.MANUFACTURERS if name != "acme"
    ]
