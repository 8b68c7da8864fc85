"""Regenerate the synthesized recordings: ``python -m gpustack_simulator.synth.write DIR``.

Each node is driven through the **recorder** exactly as a real card would be — the unchanged
backend over a binding — so a synthesized recording has the same shape and the same calls as a
recorded one; only the binding underneath is made of public facts instead of silicon. For AMD
that includes our real ROCm SMI binding, running over the fake C library as it does in replay.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path

from gpustack_simulator.recorder import RecordingProxy, assemble, exercise
from gpustack_simulator.recording import (
    Binding,
    Context,
    Library,
    ProcEntry,
    Provenance,
    dump_recording,
)
from gpustack_simulator.redact import returned_pids
from gpustack_simulator.replay.amdsmi_standin import AmdsmiCodec
from gpustack_simulator.replay.pynvml_standin import PynvmlCodec
from gpustack_simulator.replay.rocm_smi_lib import FakeRocmSmiLib
from gpustack_simulator.replay.rocm_smi_standin import RocmSmiCodec, as_module
from gpustack_simulator.synth import amdsmi, nvml
from gpustack_simulator.synth.amd_nodes import NODES as AMD_NODES
from gpustack_simulator.synth.amdsmi import AmdNode
from gpustack_simulator.synth.ascend_nodes import NODES as ASCEND_NODES
from gpustack_simulator.synth.ascend_nodes import ascend_recording
from gpustack_simulator.synth.cambricon_nodes import NODES as CAMBRICON_NODES
from gpustack_simulator.synth.cambricon_nodes import cambricon_recording
from gpustack_simulator.synth.hygon_nodes import NODES as HYGON_NODES
from gpustack_simulator.synth.hygon_nodes import hygon_recording
from gpustack_simulator.synth.iluvatar_nodes import NODES as ILUVATAR_NODES
from gpustack_simulator.synth.iluvatar_nodes import iluvatar_recording
from gpustack_simulator.synth.metax_nodes import NODES as METAX_NODES
from gpustack_simulator.synth.metax_nodes import metax_recording
from gpustack_simulator.synth.nvidia_nodes import NODES
from gpustack_simulator.synth.nvml import Node
from gpustack_simulator.synth.thead_nodes import NODES as THEAD_NODES
from gpustack_simulator.synth.thead_nodes import thead_recording
from gpustack_simulator.synth.timeline import NodeSpec, VirtualClock
from gpustack_vendors.amd import AmdBackend
from gpustack_vendors.bindings.rocm_smi import RocmSmi
from gpustack_vendors.nvidia import NvidiaBackend


def pod_cgroup(pid: int) -> str:
    """A cgroup v2 line for a PID inside a (synthetic) Pod container, stable per PID."""
    pod = f"{pid:08x}-1111-4222-8333-{pid:012x}"
    container = f"{pid:016x}" * 4
    return (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope"
    )


def _synthesized(
    *,
    vendor: str,
    description: str,
    sources: Sequence[str],
    libraries: Sequence[Library],
    node: dict[str, str],
    pids: Iterable[int],
    loop_seconds: float,
) -> str:
    """The part every vendor shares: provenance, a Pod cgroup per PID, and the YAML.

    Only the PIDs the libraries returned get a ``/proc`` entry, as the recorder reads ``/proc``
    for those alone (a process the library does not list is one nobody could have recorded).
    """
    listed = returned_pids(libraries)
    recording = assemble(
        vendor=vendor,
        description=description,
        provenance=Provenance(
            kind="synthesized", sources=tuple(sources), recorder="gpustack_simulator.synth"
        ),
        libraries=libraries,
        node={**node, "cgroup": "v2", "pidNamespace": "host"},
        context=Context(
            procs={
                str(pid): ProcEntry(cgroup=pod_cgroup(pid), comm="python")
                for pid in sorted(set(pids) & listed)
            }
        ),
        loop_seconds=loop_seconds,
    )
    return dump_recording(recording)


def nvidia_recording(spec: NodeSpec[Node]) -> str:
    """Drive the NVIDIA backend over the synthetic NVML and return the recording's YAML."""
    clock = VirtualClock()
    module = nvml.build(spec.node, clock)
    proxy = RecordingProxy(module, PynvmlCodec(module), clock=clock)
    exercise(NvidiaBackend(proxy), samples=spec.samples, interval=spec.interval, sleep=clock.sleep)
    return _synthesized(
        vendor="nvidia",
        description=spec.description,
        sources=spec.sources,
        libraries=[
            proxy.library(
                "pynvml",
                Binding(module="pynvml", dist="nvidia-ml-py", version=version("nvidia-ml-py")),
            )
        ],
        node={"driver": spec.node.driver},
        pids=(proc.pid for card in spec.node.cards for proc in card.procs),
        loop_seconds=spec.samples * spec.interval,
    )


def amd_recording(spec: NodeSpec[AmdNode]) -> str:
    """Drive the AMD backend over synthetic AMD SMI and ROCm SMI; both land in one recording."""
    clock = VirtualClock()
    amd = RecordingProxy(amdsmi.build(spec.node, clock), AmdsmiCodec(), clock=clock)
    rocm_binding = RocmSmi(FakeRocmSmiLib(amdsmi.RocmAnswers(spec.node, clock)))
    rocm = RecordingProxy(as_module(rocm_binding), RocmSmiCodec(), clock=clock)
    exercise(
        AmdBackend(amd, rocm, clock=clock),
        samples=spec.samples,
        interval=spec.interval,
        sleep=clock.sleep,
    )
    vendors_version = version("gpustack-vendors")
    return _synthesized(
        vendor="amd",
        description=spec.description,
        sources=spec.sources,
        libraries=[
            amd.library(
                "amdsmi", Binding(module="amdsmi", dist="amdsmi", version=version("amdsmi"))
            ),
            rocm.library(
                "rocm_smi",
                Binding(
                    module="gpustack_vendors.bindings.rocm_smi",
                    dist="gpustack-vendors",
                    version=vendors_version,
                ),
            ),
        ],
        node={"driver": spec.node.driver, "rocm": spec.node.rocm},
        pids=(proc.pid for card in spec.node.cards for proc in card.procs),
        loop_seconds=spec.samples * spec.interval,
    )


def main(argv: list[str]) -> int:
    """Write every synthesized recording under ``DIR/<vendor>/``."""
    out = Path(argv[0]) if argv else Path("recordings")
    written = [(out / "nvidia" / spec.file, nvidia_recording(spec)) for spec in NODES]
    written += [(out / "amd" / spec.file, amd_recording(spec)) for spec in AMD_NODES]
    written += [(out / "hygon" / spec.file, hygon_recording(spec)) for spec in HYGON_NODES]
    written += [(out / "ascend" / spec.file, ascend_recording(spec)) for spec in ASCEND_NODES]
    written += [(out / "thead" / spec.file, thead_recording(spec)) for spec in THEAD_NODES]
    written += [
        (out / "cambricon" / spec.file, cambricon_recording(spec, _synthesized))
        for spec in CAMBRICON_NODES
    ]
    written += [
        (out / "metax" / spec.file, metax_recording(spec, _synthesized)) for spec in METAX_NODES
    ]
    written += [
        (out / "iluvatar" / spec.file, iluvatar_recording(spec, _synthesized))
        for spec in ILUVATAR_NODES
    ]
    for path, text in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
