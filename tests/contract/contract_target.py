"""The handle every contract test gets (kept apart from conftest so tests can import it)."""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_kube.client import KubeClient


@dataclass
class Target:
    """What each contract test gets: a client with write access and its own namespace."""

    client: KubeClient
    namespace: str
    simulated: bool
