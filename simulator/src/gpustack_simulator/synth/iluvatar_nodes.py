"""The Iluvatar nodes we synthesize, behind IXML's C ABI (sources in the provenance).

:class:`IxmlAnswers` is the answer source for
:class:`~gpustack_simulator.replay.ixml_lib.FakeIxmlLib`, so synthesizing a recording runs our
real IXML binding (handle pointers, the process list's probe and fill) exactly as replaying it
does. Units are NVML's: bytes, mW, °C. An idle card answers the process list ``NOT_FOUND``, as
the operator's adapter expects IXML to.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Final

from gpustack_simulator.synth.timeline import NodeSpec, Steps, VirtualClock, const
from gpustack_vendors.iluvatar import ixml
from gpustack_vendors.iluvatar.ixml import (
    IXML_HEALTH_OK,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_TEMPERATURE_GPU,
    IXMLError,
    ixmlDevice_t,
)

MIB: Final = 1 << 20
GIB: Final = 1 << 30


@dataclass(frozen=True)
class IluvatarProc:
    """A compute process on one card and the bytes it holds."""

    pid: int
    used_bytes: Steps[int]


@dataclass(frozen=True)
class IluvatarCard:
    """One Iluvatar GPU as IXML reports it."""

    uuid: str
    name: str
    bus_id: str
    pci_device_id: int
    total_bytes: int
    reserved_bytes: int
    used_bytes: Steps[int]
    gpu_percent: Steps[int]
    memory_percent: Steps[int]
    celsius: Steps[int]
    power_mw: Steps[int]
    procs: tuple[IluvatarProc, ...] = ()


@dataclass(frozen=True)
class IluvatarNode:
    """Driver version, the CUDA level CoreX is compatible with (NVML-encoded), the cards."""

    driver: str
    cuda: int
    cards: tuple[IluvatarCard, ...]


@dataclass
class IxmlAnswers:
    """IXML's answers for ``node``, in the binding's Python terms, for ``FakeIxmlLib``.

    Each card's handle is the address of a buffer kept alive here, so the same card always
    answers with the same pointer, as the library does.
    """

    node: IluvatarNode
    clock: VirtualClock
    _targets: list[ctypes.Array[ctypes.c_char]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._targets = [ctypes.create_string_buffer(1) for _ in self.node.cards]

    def __call__(self, name: str, args: tuple[object, ...]) -> object:
        """One C call's answer; a handle this library never issued is ``INVALID_ARGUMENT``."""
        t = self.clock()
        if name in {"nvmlInit_v2", "nvmlShutdown"}:
            return None
        if name == "nvmlSystemGetDriverVersion":
            return self.node.driver
        if name == "nvmlSystemGetCudaDriverVersion":
            return self.node.cuda
        if name == "nvmlDeviceGetCount_v2":
            return len(self.node.cards)
        if name == "nvmlDeviceGetHandleByIndex_v2":
            index = args[0]
            if not isinstance(index, int) or not 0 <= index < len(self.node.cards):
                raise IXMLError(NVML_ERROR_INVALID_ARGUMENT)
            return ixmlDevice_t(ctypes.addressof(self._targets[index]))
        card = self._card(args[0])
        return self._per_card(name, card, args[1:], t)

    def _card(self, handle: object) -> IluvatarCard:
        address = handle.value if isinstance(handle, ixmlDevice_t) else None
        for target, card in zip(self._targets, self.node.cards, strict=True):
            if ctypes.addressof(target) == address:
                return card
        raise IXMLError(NVML_ERROR_INVALID_ARGUMENT)

    def _per_card(
        self, name: str, card: IluvatarCard, rest: tuple[object, ...], t: float
    ) -> object:
        used = card.used_bytes.at(t)
        if name == "nvmlDeviceGetUUID":
            return card.uuid
        if name == "nvmlDeviceGetName":
            return card.name
        if name == "nvmlDeviceGetPciInfo_v3":
            return _pci(card)
        if name == "nvmlDeviceGetMemoryInfo_v2":
            free = card.total_bytes - card.reserved_bytes - used
            return ixml.c_nvmlMemory_v2_t(
                ixml.nvmlMemory_v2, card.total_bytes, card.reserved_bytes, free, used
            )
        if name == "nvmlDeviceGetMemoryInfo":
            return ixml.c_nvmlMemory_t(card.total_bytes, card.total_bytes - used, used)
        if name == "nvmlDeviceGetUtilizationRates":
            return ixml.c_nvmlUtilization_t(card.gpu_percent.at(t), card.memory_percent.at(t))
        if name == "nvmlDeviceGetTemperature":
            if rest != (NVML_TEMPERATURE_GPU,):
                raise IXMLError(NVML_ERROR_NOT_SUPPORTED)
            return card.celsius.at(t)
        if name == "nvmlDeviceGetPowerUsage":
            return card.power_mw.at(t)
        if name == "ixmlDeviceGetHealth":
            return IXML_HEALTH_OK
        if name == "nvmlDeviceGetComputeRunningProcesses":
            if not card.procs:
                raise IXMLError(NVML_ERROR_NOT_FOUND)  # an idle card: no compute process
            return [ixml.c_nvmlProcessInfo_v1_t(p.pid, p.used_bytes.at(t)) for p in card.procs]
        raise AttributeError(name)


def _pci(card: IluvatarCard) -> ixml.c_nvmlPciInfo_t:
    domain, bus, rest = card.bus_id.split(":")
    device, _ = rest.split(".")
    info = ixml.c_nvmlPciInfo_t()
    info.busIdLegacy = f"{int(domain, 16):04X}:{bus.upper()}:{device.upper()}.0".encode()
    info.domain = int(domain, 16)
    info.bus = int(bus, 16)
    info.device = int(device, 16)
    info.pciDeviceId = (card.pci_device_id << 16) | 0x1E3E
    info.pciSubSystemId = (card.pci_device_id << 16) | 0x1E3E
    info.busId = f"{int(domain, 16):08X}:{bus.upper()}:{device.upper()}.0".encode()
    return info


RUNTIME_TEST = (
    "github.com/gpustack/runtime @88026d62a1c1 (Apache-2.0): "
    "tests/gpustack_runtime/detector/test_iluvatar.py (Iluvatar BI-V150, 32 GiB through "
    "nvmlDeviceGetMemoryInfo_v2 with a v1 fallback, driver 4.2.0, CUDA 10020, 55 C, 90 W, "
    "utilization 37 %, IXML_HEALTH_OK = 0)"
)
PYIXML = (
    "github.com/gpustack/runtime gpustack_runtime/detector/pyixml: a copy of pynvml loading "
    "libixml.so from $COREX_HOME (default /usr/local/corex); NVML codes and structs"
)
OPERATOR_IXML = (
    "github.com/gpustack/gpustack-operator binding/ixml/library_device.go and "
    "pkg/devicemanager/detector/iluvatar/process.go: nvmlDeviceGetComputeRunningProcesses with "
    "nvmlProcessInfo_v1_t rows in bytes; NOT_FOUND is an idle card; no per-process utilization"
)
PCI_VENDOR = "shared/reference/operator.md §6: Iluvatar PCI vendor 0x1e3e"

WARM_UP = 30.0
"""When the workload on card 0 starts its kernel: samples at 0 and 15 s see it idle."""

HELD = 12 * GIB
SECOND = 1536 * MIB
BASE_USED = 384 * MIB


def bi_v150_node() -> IluvatarNode:
    """Two BI-V150 cards: card 0 carries a job (idle, then busy at 30 s) and a second tenant."""
    busy = IluvatarCard(
        uuid="GPU-1b7e3c52-9a04-4f6d-b8e1-37c2d5a90f46",
        name="Iluvatar BI-V150",
        bus_id="0000:3b:00.0",
        pci_device_id=0x0002,
        total_bytes=32 * GIB,
        reserved_bytes=256 * MIB,
        used_bytes=const(BASE_USED + HELD + SECOND),
        gpu_percent=Steps(((0.0, 0), (WARM_UP, 64))),
        memory_percent=Steps(((0.0, 0), (WARM_UP, 22))),
        celsius=Steps(((0.0, 41), (WARM_UP, 55))),
        power_mw=Steps(((0.0, 62_000), (WARM_UP, 148_500))),
        procs=(
            IluvatarProc(7101, const(HELD)),
            IluvatarProc(7102, const(SECOND)),
        ),
    )
    idle = IluvatarCard(
        uuid="GPU-e40a9d17-5c3b-4e82-9f16-a8d3c07b5e21",
        name="Iluvatar BI-V150",
        bus_id="0000:5e:00.0",
        pci_device_id=0x0002,
        total_bytes=32 * GIB,
        reserved_bytes=256 * MIB,
        used_bytes=const(BASE_USED),
        gpu_percent=const(0),
        memory_percent=const(0),
        celsius=const(38),
        power_mw=const(58_000),
    )
    return IluvatarNode(driver="4.2.0", cuda=10020, cards=(busy, idle))


NODES = (
    NodeSpec[IluvatarNode](
        "bi-v150.yaml",
        "2x Iluvatar BI-V150 (32 GiB each; CoreX driver 4.2.0, CUDA 10.2 level): on card 0 a "
        "process holds 12 GiB idle, then runs at 64 % while power rises 62 -> 148.5 W, beside a "
        "1.5 GiB tenant; card 1 is idle and answers the process list NOT_FOUND; IXML serves no "
        "per-process utilization",
        (RUNTIME_TEST, PYIXML, OPERATOR_IXML, PCI_VENDOR),
        bi_v150_node(),
    ),
)
