"""A vendor backend over replay stand-ins: the same backend class a GPU node runs."""

from __future__ import annotations

import time

from gpustack_simulator.recording import Recording
from gpustack_simulator.replay import amdsmi_standin, pynvml_standin, rocm_smi_standin
from gpustack_simulator.replay.cndev_standin import replay_backend as replay_cambricon
from gpustack_simulator.replay.dcmi_standin import replay_backend as replay_ascend
from gpustack_simulator.replay.engine import Clock
from gpustack_simulator.replay.hgml_standin import replay_backend as replay_thead
from gpustack_simulator.replay.hygon_standin import replay_backend as replay_hygon
from gpustack_simulator.replay.ixml_standin import replay_backend as replay_iluvatar
from gpustack_simulator.replay.mxsml_standin import replay_backend as replay_metax
from gpustack_vendors.amd import AmdBackend
from gpustack_vendors.nvidia import NvidiaBackend
from gpustack_vendors.protocol import Backend


class UnsupportedRecording(ValueError):  # noqa: N818 - names the case, like LibraryUnavailable
    """No stand-in exists for the recording's vendor."""


def replay_backend(recording: Recording, *, clock: Clock | None = None) -> Backend:
    """Hand the vendor's backend stand-ins built from ``recording`` instead of real bindings.

    AMD reads two libraries, so its recording holds both (``amdsmi`` and ``rocm_smi``); the
    backend's own clock (AMD's 1 s rule between process lists) is the replay's clock, so a test
    that moves replay time moves that rule too.
    """
    if recording.vendor == "nvidia":
        return NvidiaBackend(pynvml_standin.build_module(recording, clock=clock))
    if recording.vendor == "amd":
        return AmdBackend(
            amdsmi_standin.build_module(recording, clock=clock),
            rocm_smi_standin.build_binding(recording, clock=clock),
            clock=time.monotonic if clock is None else clock,
        )
    if recording.vendor == "hygon":
        return replay_hygon(recording, clock=clock)
    if recording.vendor == "ascend":
        return replay_ascend(recording, clock=clock)
    if recording.vendor == "thead":
        return replay_thead(recording, clock=clock)
    if recording.vendor == "cambricon":
        return replay_cambricon(recording, clock=clock)
    if recording.vendor == "metax":
        return replay_metax(recording, clock=clock)
    if recording.vendor == "iluvatar":
        return replay_iluvatar(recording, clock=clock)
    raise UnsupportedRecording(f"no replay for vendor {recording.vendor!r} yet")
