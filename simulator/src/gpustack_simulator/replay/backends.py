"""A vendor backend over replay stand-ins: the same backend class a GPU node runs.

Which libraries a vendor has and how its backend is built from them is the vendor registry's
(:data:`gpustack_vendors.registry.VENDORS`); the stand-ins answering from the recording are
:data:`gpustack_simulator.replay.standins.STANDINS`'.
"""

from __future__ import annotations

from gpustack_simulator.recording import Recording
from gpustack_simulator.replay.engine import Clock
from gpustack_simulator.replay.standins import STANDINS, replay_bindings
from gpustack_vendors.protocol import Backend
from gpustack_vendors.registry import VENDORS


class UnsupportedRecording(ValueError):  # noqa: N818 - names the case, like LibraryUnavailable
    """No stand-in exists for the recording's vendor."""


def replay_backend(recording: Recording, *, clock: Clock | None = None) -> Backend:
    """Hand the vendor's backend stand-ins built from ``recording`` instead of real bindings.

    AMD reads two libraries, so its recording holds both (``amdsmi`` and ``rocm_smi``); the
    backend's own clock (AMD's 1 s rule between process lists) is the replay's clock, so a test
    that moves replay time moves that rule too. Hygon's optional ``libhydmi_mig``, recorded as
    not loaded, is handed as ``None`` with the recorded reason.
    """
    entry = VENDORS.get(recording.vendor)
    if entry is None or recording.vendor not in STANDINS:
        raise UnsupportedRecording(f"no replay for vendor {recording.vendor!r} yet")
    return entry.build(replay_bindings(recording, clock=clock))
