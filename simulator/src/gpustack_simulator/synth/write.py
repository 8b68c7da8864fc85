"""Regenerate the synthesized recordings: ``python -m gpustack_simulator.synth.write DIR``.

Each node is recorded by **the recorder** (:func:`gpustack_simulator.capture.record`), exactly
as ``simulator record`` records a real card: the vendor registry builds the unchanged backend
over recording proxies and the recorder exercises it. Only the bindings underneath differ: a
synthetic library made of public facts instead of silicon, and for our own ctypes bindings the
real binding over its fake C library (as in replay).

:data:`SYNTHESIS` is the simulator's synthesis counterpart of the vendor registry, keyed by the
same manufacturer tokens and library ids (``gpustack_vendors.registry.VENDORS``; replay's is
``gpustack_simulator.replay.standins.STANDINS``). It is a table of its own because building the
synthetic nodes takes seconds of import that a replay must not pay.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import msgspec

from gpustack_simulator.capture import Host, dist_version, record
from gpustack_simulator.recording import ProcEntry, Provenance, dump_recording
from gpustack_simulator.replay.cndev_lib import FakeCndevLib
from gpustack_simulator.replay.dcmi_lib import FakeDcmiLib
from gpustack_simulator.replay.hgml_lib import FakeHgmlLib
from gpustack_simulator.replay.hydmi_lib import FakeHyDmiLib
from gpustack_simulator.replay.hygon_rocm_smi_lib import FakeHygonRocmSmiLib
from gpustack_simulator.replay.ixml_lib import FakeIxmlLib
from gpustack_simulator.replay.mxsml_lib import FakeMxsmlLib
from gpustack_simulator.replay.rocm_smi_lib import FakeRocmSmiLib
from gpustack_simulator.synth import amdsmi, hygon, nvml
from gpustack_simulator.synth.amd_nodes import NODES as AMD_NODES
from gpustack_simulator.synth.amdsmi import AmdNode
from gpustack_simulator.synth.ascend_nodes import NODES as ASCEND_NODES
from gpustack_simulator.synth.cambricon_nodes import NODES as CAMBRICON_NODES
from gpustack_simulator.synth.cambricon_nodes import CambriconNode, CndevAnswers
from gpustack_simulator.synth.dcmi import AscendNode, DcmiAnswers
from gpustack_simulator.synth.hgml import HgmlAnswers, PpuNode
from gpustack_simulator.synth.hygon import HygonNode
from gpustack_simulator.synth.hygon_nodes import NODES as HYGON_NODES
from gpustack_simulator.synth.iluvatar_nodes import NODES as ILUVATAR_NODES
from gpustack_simulator.synth.iluvatar_nodes import IluvatarNode, IxmlAnswers
from gpustack_simulator.synth.metax_nodes import NODES as METAX_NODES
from gpustack_simulator.synth.metax_nodes import MetaxNode, MxsmlAnswers
from gpustack_simulator.synth.nvidia_nodes import NODES
from gpustack_simulator.synth.nvml import Node
from gpustack_simulator.synth.thead_nodes import NODES as THEAD_NODES
from gpustack_simulator.synth.timeline import NodeSpec, VirtualClock
from gpustack_vendors.ascend.dcmi import Dcmi
from gpustack_vendors.bindings.rocm_smi import RocmSmi
from gpustack_vendors.cambricon.cndev import Cndev
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon.hydmi import HyDmiMig
from gpustack_vendors.hygon.rocm_smi import HygonRocmSmi
from gpustack_vendors.iluvatar.ixml import Ixml
from gpustack_vendors.metax.mxsml import Mxsml
from gpustack_vendors.registry import Bindings
from gpustack_vendors.thead.hgml import Hgml

N = TypeVar("N")
SYNTHESIZED_AT: Final = datetime(2026, 1, 1, tzinfo=UTC)
"""Never written (the provenance of a synthesized file has no date); the recorder asks."""


def pod_cgroup(pid: int) -> str:
    """A cgroup v2 line for a PID inside a (synthetic) Pod container, stable per PID."""
    pod = f"{pid:08x}-1111-4222-8333-{pid:012x}"
    container = f"{pid:016x}" * 4
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope"
    )


@dataclass(frozen=True)
class Synthesis(Generic[N]):
    """How one manufacturer's nodes are synthesized."""

    nodes: Sequence[NodeSpec[N]]
    """The nodes written under ``recordings/<manufacturer>/``."""
    bindings: Callable[[N, VirtualClock], Bindings]
    """The node's synthetic libraries, by the registry's library ids."""
    facts: Callable[[N], Mapping[str, str]]
    """The node facts a reader of the file wants (driver and stack versions)."""
    pids: Callable[[N], Iterable[int]]
    """The processes running on the node: each listed one gets a Pod's ``/proc`` entry."""


def _nvidia(node: Node, clock: VirtualClock) -> Bindings:
    return Bindings(opened={"pynvml": nvml.build(node, clock)})


def _amd(node: AmdNode, clock: VirtualClock) -> Bindings:
    return Bindings(
        opened={
            "amdsmi": amdsmi.build(node, clock),
            "rocm_smi": RocmSmi(FakeRocmSmiLib(amdsmi.RocmAnswers(node, clock))),
        }
    )


def _hygon(node: HygonNode, clock: VirtualClock) -> Bindings:
    opened: dict[str, object] = {
        "rocm_smi": HygonRocmSmi(FakeHygonRocmSmiLib(hygon.RocmAnswers(node, clock)))
    }
    absent: dict[str, BaseException] = {}
    if node.mig is None:  # a DTK without libhydmi_mig: recorded as not loaded
        absent["hydmi_mig"] = hydmi.HyDmiLibraryNotFound(hydmi.LIBRARY_NAME, [])
    else:
        answers = hygon.HydmiAnswers(node, clock)
        opened["hydmi_mig"] = HyDmiMig(FakeHyDmiLib(answers), registry=answers)
    return Bindings(opened=opened, absent=absent)


def _ascend(node: AscendNode, clock: VirtualClock) -> Bindings:
    return Bindings(opened={"dcmi": Dcmi(FakeDcmiLib(DcmiAnswers(node, clock)))})


def _thead(node: PpuNode, clock: VirtualClock) -> Bindings:
    return Bindings(opened={"hgml": Hgml(FakeHgmlLib(HgmlAnswers(node, clock)))})


def _cambricon(node: CambriconNode, clock: VirtualClock) -> Bindings:
    return Bindings(opened={"cndev": Cndev(FakeCndevLib(CndevAnswers(node, clock)))})


def _iluvatar(node: IluvatarNode, clock: VirtualClock) -> Bindings:
    return Bindings(opened={"ixml": Ixml(FakeIxmlLib(IxmlAnswers(node, clock)))})


def _metax(node: MetaxNode, clock: VirtualClock) -> Bindings:
    return Bindings(opened={"mxsml": Mxsml(FakeMxsmlLib(MxsmlAnswers(node, clock)))})


def _card_pids(node: Any) -> Iterable[int]:
    return (proc.pid for card in node.cards for proc in card.procs)


SYNTHESIS: Final[Mapping[str, Synthesis[Any]]] = {
    "nvidia": Synthesis[Node](NODES, _nvidia, lambda n: {"driver": n.driver}, _card_pids),
    "amd": Synthesis[AmdNode](
        AMD_NODES, _amd, lambda n: {"driver": n.driver, "rocm": n.rocm}, _card_pids
    ),
    "hygon": Synthesis[HygonNode](HYGON_NODES, _hygon, lambda n: {"dtk": n.dtk}, _card_pids),
    "ascend": Synthesis[AscendNode](
        ASCEND_NODES, _ascend, lambda n: {"driver": n.driver}, lambda n: n.pids()
    ),
    "thead": Synthesis[PpuNode](
        THEAD_NODES, _thead, lambda n: {"driver": n.driver}, lambda n: n.pids()
    ),
    "cambricon": Synthesis[CambriconNode](
        CAMBRICON_NODES,
        _cambricon,
        lambda n: {"driver": ".".join(str(part) for part in n.driver)},
        _card_pids,
    ),
    "iluvatar": Synthesis[IluvatarNode](
        ILUVATAR_NODES, _iluvatar, lambda n: {"driver": n.driver}, _card_pids
    ),
    "metax": Synthesis[MetaxNode](
        METAX_NODES,
        _metax,
        lambda n: {"driver": n.driver, "maca": n.maca},
        lambda n: (proc.pid for proc in n.procs),
    ),
}
"""Every manufacturer of the vendor registry, by the same token: its synthetic nodes."""


def synthesize(manufacturer: str, spec: NodeSpec[Any]) -> str:
    """Record ``spec``'s synthetic node through the recorder; the recording's YAML.

    The provenance is ``synthesized`` with the spec's public sources, and each process the
    libraries list runs in a Pod (:func:`pod_cgroup`): a process the library does not list gets
    no ``/proc`` entry, as nobody could have recorded one.
    """
    synthesis = SYNTHESIS[manufacturer]
    running = set(synthesis.pids(spec.node))
    clock = VirtualClock()
    recording = record(
        manufacturer,
        samples=spec.samples,
        interval=spec.interval,
        description=spec.description,
        open_bindings=lambda entry: synthesis.bindings(spec.node, clock),
        host=Host(
            read_proc=lambda pid: (
                ProcEntry(cgroup=pod_cgroup(pid), comm="python") if pid in running else None
            ),
            dist_version=dist_version,
            now=lambda: SYNTHESIZED_AT,
            cgroup="v2",
            names=(),
        ),
        clock=clock,
        sleep=clock.sleep,
        redacted=False,
    )
    recording = msgspec.structs.replace(
        recording,
        provenance=Provenance(
            kind="synthesized", sources=tuple(spec.sources), recorder="gpustack_simulator.synth"
        ),
        node={**synthesis.facts(spec.node), "cgroup": "v2", "pidNamespace": "host"},
    )
    return dump_recording(recording)


def main(argv: list[str]) -> int:
    """Write every synthesized recording under ``DIR/<manufacturer>/``."""
    out = Path(argv[0]) if argv else Path("recordings")
    for manufacturer, synthesis in SYNTHESIS.items():
        for spec in synthesis.nodes:
            path = out / manufacturer / spec.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(synthesize(manufacturer, spec))
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
