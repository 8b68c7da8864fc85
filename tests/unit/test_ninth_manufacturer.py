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
from gpustack_core.features import Card as FeatureCard
from gpustack_core.features import groups_from_cards
from gpustack_core.manufacturers import DRI, DeviceNode, Maker
from gpustack_core.modes import Manufacturer, sliced_cores_resource
from gpustack_core.podmatch import default_bases_json
from gpustack_core.resourceconfig import configured_bases, names_with
from gpustack_core.resources import ResourceNames
from gpustack_devicemanager.deviceplugin import injection
from gpustack_devicemanager.deviceplugin.injection import Card, device_nodes
from gpustack_simulator.scenario.builders import pci_present_label
from gpustack_vendors import loading, registry
from gpustack_vendors.model import CardSample, Detection, DeviceProcesses, PartitionSample
from gpustack_vendors.registry import Bindings, Library, Vendor

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


def test_without_the_row_nothing_knows_acme() -> None:
    with pytest.raises(ValueError, match="acme"):
        ResourceNames.of("acme")
    assert device_nodes("acme", [Card("a-1", 1)]) == []
    assert "acme" not in recordable()


def test_every_name_code_spells_has_a_row() -> None:
    # Manufacturer.NVIDIA and its kin are names for code; their facts are the table's rows.
    assert [m.value for m in Manufacturer] == [
        name for name in manufacturers.MANUFACTURERS if name != "acme"
    ]
