"""Every vendor's surface against the replay stand-ins handed to its backend, at run time.

mypy checks each stand-in against its surface statically (the replay builders pass them where
the surface is expected); this is the same promise checked on the live objects, so a stand-in
that lacks a call the backend's surface declares, or takes other parameters, fails here too:

- every member a surface declares is on the replay stand-in built from a committed recording,
  a call as a callable whose parameters (names, order, count) match the surface's;
- every call a surface declares is one the stand-in records and replays (its ``FUNCTIONS``), so
  the recorder's proxy and the recording validator know it;
- every call the backend makes through a committed recording is one its surface declares
  (the surface is the backend's calls, not a guess at them);
- the synthesizer's NVML and AMD SMI answer every call of their surface.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pynvml
import pytest

from gpustack_simulator.recorder import exercise
from gpustack_simulator.recording import Recording, load_recording
from gpustack_simulator.replay import (
    amdsmi_standin,
    cndev_standin,
    dcmi_standin,
    hgml_standin,
    hygon_standin,
    ixml_standin,
    mxsml_standin,
    pynvml_standin,
    rocm_smi_standin,
)
from gpustack_simulator.replay.standins import replay_bindings
from gpustack_simulator.synth import amdsmi as synth_amdsmi
from gpustack_simulator.synth import nvml as synth_nvml
from gpustack_simulator.synth.amd_nodes import NODES as AMD_NODES
from gpustack_simulator.synth.nvidia_nodes import NODES as NVML_NODES
from gpustack_simulator.synth.timeline import VirtualClock
from gpustack_vendors.amd.surface import AmdRocmSmiSurface, AmdSmiSurface
from gpustack_vendors.ascend.surface import DcmiSurface
from gpustack_vendors.cambricon.surface import CndevSurface
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.hygon.surface import HyDmiSurface, HygonRocmSmiSurface
from gpustack_vendors.iluvatar.surface import IxmlSurface
from gpustack_vendors.metax.surface import MxsmlSurface
from gpustack_vendors.nvidia.surface import NvmlSurface
from gpustack_vendors.protocol import Backend
from gpustack_vendors.registry import VENDORS as REGISTRY
from gpustack_vendors.registry import Bindings
from gpustack_vendors.thead.surface import HgmlSurface

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings"

Build = Callable[[Recording, VirtualClock], object]


@dataclass(frozen=True)
class Seam:
    """One library a backend is handed: its surface and the replay stand-in for it."""

    vendor: str
    library: str
    surface: type
    build: Build
    """The stand-in the replay hands the backend, built from one of the vendor's recordings."""
    replayed: Collection[str]
    """The calls the stand-in records and replays."""


SEAMS = (
    Seam(
        "nvidia",
        "pynvml",
        NvmlSurface,
        lambda r, c: pynvml_standin.build_module(r, clock=c),
        frozenset(name for name in dir(pynvml) if name.startswith("nvml")),
    ),
    Seam(
        "amd",
        "amdsmi",
        AmdSmiSurface,
        lambda r, c: amdsmi_standin.build_module(r, clock=c),
        amdsmi_standin.FUNCTIONS,
    ),
    Seam(
        "amd",
        "rocm_smi",
        AmdRocmSmiSurface,
        lambda r, c: rocm_smi_standin.build_binding(r, clock=c),
        rocm_smi_standin.FUNCTIONS,
    ),
    Seam(
        "hygon",
        "rocm_smi",
        HygonRocmSmiSurface,
        lambda r, c: hygon_standin.build_rocm_smi(r, clock=c),
        hygon_rocm_smi.FUNCTIONS,
    ),
    Seam(
        "hygon",
        "hydmi_mig",
        HyDmiSurface,
        lambda r, c: hygon_standin.build_hydmi(r, clock=c),
        hydmi.FUNCTIONS,
    ),
    Seam(
        "ascend",
        "dcmi",
        DcmiSurface,
        lambda r, c: dcmi_standin.build_binding(r, clock=c),
        dcmi_standin.FUNCTIONS,
    ),
    Seam(
        "thead",
        "hgml",
        HgmlSurface,
        lambda r, c: hgml_standin.build_binding(r, clock=c),
        hgml_standin.FUNCTIONS,
    ),
    Seam(
        "cambricon",
        "cndev",
        CndevSurface,
        lambda r, c: cndev_standin.build_binding(r, clock=c),
        cndev_standin.FUNCTIONS,
    ),
    Seam(
        "iluvatar",
        "ixml",
        IxmlSurface,
        lambda r, c: ixml_standin.build_binding(r, clock=c),
        ixml_standin.FUNCTIONS,
    ),
    Seam(
        "metax",
        "mxsml",
        MxsmlSurface,
        lambda r, c: mxsml_standin.build_binding(r, clock=c),
        mxsml_standin.FUNCTIONS,
    ),
)

VENDORS = ("nvidia", "amd", "hygon", "ascend", "thead", "cambricon", "iluvatar", "metax")


def recordings(vendor: str) -> list[Path]:
    return sorted((RECORDINGS / vendor).glob("*.yaml"))


# -- reading a Protocol ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    name: str
    call: inspect.Signature | None
    """The call's signature without ``self``; ``None`` for an attribute (a read-only property)."""


def members(surface: type) -> list[Member]:
    """What ``surface`` declares, its bases' included (``typing.get_protocol_members`` is 3.13)."""
    found: dict[str, Member] = {}
    for cls in reversed(surface.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property):
                found[name] = Member(name, None)
            elif inspect.isfunction(value):
                signature = inspect.signature(value)
                params = list(signature.parameters.values())[1:]  # self
                found[name] = Member(name, signature.replace(parameters=params))
        for name in getattr(cls, "__annotations__", {}):
            if not name.startswith("_"):
                found.setdefault(name, Member(name, None))
    return sorted(found.values(), key=lambda m: m.name)


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def mismatches(surface: type, standin: object, *, names: bool = True) -> list[str]:
    """How ``standin`` falls short of ``surface``: a missing member or a call it cannot take.

    ``names``: also hold each positional parameter to the surface's name for it.
    """
    problems: list[str] = []
    for member in members(surface):
        if not hasattr(standin, member.name):
            problems.append(f"{member.name}: missing")
            continue
        if member.call is None:
            continue
        value = getattr(standin, member.name)
        if not callable(value):
            problems.append(f"{member.name}: not callable")
            continue
        try:
            theirs = inspect.signature(value)
        except (TypeError, ValueError):  # a builtin without a signature: only callability
            continue
        found = _call_mismatches(member.call, theirs, names=names)
        problems.extend(f"{member.name}: {p}" for p in found)
    return problems


def _call_mismatches(
    ours: inspect.Signature, theirs: inspect.Signature, *, names: bool
) -> Iterator[str]:
    """Whether every call the surface allows (positionally, as backends call) is accepted."""
    kinds = {p.kind for p in theirs.parameters.values()}
    variadic = inspect.Parameter.VAR_POSITIONAL in kinds
    wanted = [p for p in ours.parameters.values() if p.kind in _POSITIONAL]
    given = [p for p in theirs.parameters.values() if p.kind in _POSITIONAL]
    if len(given) < len(wanted) and not variadic:
        yield f"takes {len(given)} arguments, the surface passes up to {len(wanted)}"
    required = [p for p in given if p.default is inspect.Parameter.empty]
    least = sum(1 for p in wanted if p.default is inspect.Parameter.empty)
    if len(required) > least:
        yield f"requires {len(required)} arguments, the surface may pass only {least}"
    for mine, its in zip(wanted, given, strict=False):
        if names and mine.name != its.name:
            yield f"argument {its.name!r} where the surface names {mine.name!r}"


# -- the checks ----------------------------------------------------------------------------------


def _seam_cases() -> list[Any]:
    return [
        pytest.param(seam, path, id=f"{seam.vendor}-{seam.library}-{path.stem}")
        for seam in SEAMS
        for path in recordings(seam.vendor)
    ]


def test_every_vendor_has_a_surface_and_recordings() -> None:
    assert {seam.vendor for seam in SEAMS} == set(VENDORS)
    assert all(recordings(vendor) for vendor in VENDORS)
    assert all(members(seam.surface) for seam in SEAMS)


@pytest.mark.parametrize(("seam", "path"), _seam_cases())
def test_the_replay_standin_has_every_call_of_the_surface(seam: Seam, path: Path) -> None:
    recording = load_recording(path)
    if seam.library == "hydmi_mig" and hygon_standin.dmi_missing(recording):
        pytest.skip("this recording has no libhydmi_mig: the backend is handed None")
    standin = seam.build(recording, VirtualClock())
    assert mismatches(seam.surface, standin) == []


@pytest.mark.parametrize("seam", SEAMS, ids=lambda s: f"{s.vendor}-{s.library}")
def test_every_call_of_the_surface_is_recorded_and_replayed(seam: Seam) -> None:
    calls = {m.name for m in members(seam.surface) if m.call is not None}
    assert sorted(calls - set(seam.replayed)) == []


def calls(surface: type) -> list[str]:
    return [m.name for m in members(surface) if m.call is not None]


def test_the_synthetic_bindings_answer_every_call_of_the_surface() -> None:
    """The synthesizer's NVML and AMD SMI (what ``synth.write`` records through) are fakes too.

    Each call must be synthesized, not left to the real package (NVML) or to a stub that
    raises (AMD SMI). Their parameter names are their own: backends call positionally.
    """
    for nvml_spec in NVML_NODES:
        nvml = synth_nvml.build(nvml_spec.node, VirtualClock())
        assert mismatches(NvmlSurface, nvml, names=False) == []
        assert [n for n in calls(NvmlSurface) if getattr(nvml, n) is getattr(pynvml, n)] == []
    for amd_spec in AMD_NODES:
        amdsmi = synth_amdsmi.build(amd_spec.node, VirtualClock())
        assert mismatches(AmdSmiSurface, amdsmi, names=False) == []
        answers = synth_amdsmi._Functions(amd_spec.node, VirtualClock())
        assert [n for n in calls(AmdSmiSurface) if not callable(getattr(answers, n, None))] == []


class _Traced:
    """A binding passed through, remembering every name the backend reads on it."""

    def __init__(self, target: object, seen: set[str]) -> None:
        self._target = target
        self._seen = seen

    def __getattr__(self, name: str) -> Any:
        self._seen.add(name)
        return getattr(self._target, name)


def _traced_backend(vendor: str, recording: Recording, seen: dict[str, set[str]]) -> Backend:
    """The vendor's backend over its replay stand-ins, each wrapped in a :class:`_Traced`."""
    clock = VirtualClock()
    built = {
        seam.library: seam.build(recording, clock)
        for seam in SEAMS
        if seam.vendor == vendor
        and not (seam.library == "hydmi_mig" and hygon_standin.dmi_missing(recording))
    }
    traced: dict[str, object] = {
        name: _Traced(binding, seen.setdefault(name, set())) for name, binding in built.items()
    }
    replayed = replay_bindings(recording, clock=clock)
    return REGISTRY[vendor].build(Bindings(opened=traced, absent=replayed.absent, clock=clock))


@pytest.mark.parametrize("vendor", VENDORS)
def test_the_backend_calls_nothing_its_surface_does_not_declare(vendor: str) -> None:
    seen: dict[str, set[str]] = {}
    for path in recordings(vendor):
        recording = load_recording(path)
        backend = _traced_backend(vendor, recording, seen)
        exercise(backend, samples=2, interval=15.0, sleep=VirtualClock().sleep)
    for seam in (s for s in SEAMS if s.vendor == vendor):
        declared = {m.name for m in members(seam.surface)}
        assert sorted(seen.get(seam.library, set()) - declared) == [], seam.library


# -- the check itself -----------------------------------------------------------------------------


class _Surface(Protocol):
    @property
    def VERSION(self) -> int: ...  # noqa: N802 - a vendor's constant

    def open(self) -> None: ...
    def read(self, device: int, sensor: int = ...) -> int: ...


class _Complete:
    VERSION = 1

    def open(self) -> None: ...
    def read(self, device: int, sensor: int = 0) -> int:
        return device + sensor


class _LacksACall:
    VERSION = 1

    def open(self) -> None: ...


class _OtherParameters:
    VERSION = 1

    def open(self, flags: int) -> None: ...
    def read(self, index: int) -> int:
        return index


def test_the_check_finds_a_missing_call_and_other_parameters() -> None:
    assert mismatches(_Surface, _Complete()) == []
    assert mismatches(_Surface, _LacksACall()) == ["read: missing"]
    assert mismatches(_Surface, _OtherParameters()) == [
        "open: requires 1 arguments, the surface may pass only 0",
        "read: takes 1 arguments, the surface passes up to 2",
        "read: argument 'index' where the surface names 'device'",
    ]
    assert mismatches(_Surface, object()) == [
        "VERSION: missing",
        "open: missing",
        "read: missing",
    ]
