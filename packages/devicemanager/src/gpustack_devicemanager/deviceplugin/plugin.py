"""One device-plugin gRPC service: the tokens of one (manufacturer, mode) resource.

The service runs on gRPC's worker threads. Device lists and preferences are computed from the
shared :class:`~.state.PluginState` right there (pure core calls under its lock); ``Allocate``
is handed to an injected callable — in the daemon, a bridge into the trio loop where the Pod
is identified, the node-wide lock taken and the annotation written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import grpc

from gpustack_core.allocator import health, preferred
from gpustack_core.modes import AllocationMode
from gpustack_core.tokens import FUNGIBLE, parse_token_id
from gpustack_devicemanager.deviceplugin.state import PluginState
from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from gpustack_kube.kubeletapi.api import HEALTHY, UNHEALTHY

log = logging.getLogger("gpustack.devicemanager.deviceplugin")

WATCH_POLL_SECONDS = 1.0
"""How often an idle ListAndWatch stream checks that the kubelet is still listening."""

PREFERRING = FUNGIBLE | {AllocationMode.SHARED, AllocationMode.SLICED}
"""Modes that offer ``GetPreferredAllocation``: the fungible pools pack, Shared needs its
shares on distinct cards and Sliced a card with units left, which the kubelet only knows if it
asks."""


MAX_REFUSAL_CHARS = 1024
"""A refusal's message is cut to this length (the rest counted). The kubelet logs it and writes
it into the Pod's status, and its words can echo the request: the IDs are already cut where
they are quoted (:func:`gpustack_core.tokens.listed`), this bounds everything else."""


def bounded(message: str) -> str:
    """``message`` at most :data:`MAX_REFUSAL_CHARS` long."""
    if len(message) <= MAX_REFUSAL_CHARS:
        return message
    tail = f"… ({len(message)} characters)"
    return message[: MAX_REFUSAL_CHARS - len(tail)] + tail


class AllocationRefusedError(Exception):
    """An allocation the plugin will not make; ``code`` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.code = code
        self.message = message


Allocating = Callable[[AllocationMode, dp.AllocateRequest], dp.AllocateResponse]
"""Allocate one request in one mode; raises :class:`AllocationRefusedError`."""


class ResourcePlugin:
    """The ``DevicePlugin`` service of one resource (``nvidia.com/gpu.sliced``)."""

    def __init__(
        self,
        resource: str,
        mode: AllocationMode,
        state: PluginState,
        allocating: Allocating,
    ) -> None:
        self.resource = resource
        self.mode = mode
        self.state = state
        self._allocating = allocating

    def devices(self) -> list[dp.Device]:
        """Every token of this mode with its health, in pool order."""
        answer: list[dp.Device] = []
        for node in self.state.nodes():
            numa = {
                card.id: int(card.topology.numa_affinity)
                for card in node.group.accelerators
                if card.topology is not None and card.topology.numa_affinity.isdigit()
            }
            for token_id, ok in health(node, self.mode).items():
                device = dp.Device(ID=token_id, health=HEALTHY if ok else UNHEALTHY)
                card = parse_token_id(token_id).accelerator
                if card in numa:
                    device.topology.nodes.add(ID=numa[card])
                answer.append(device)
        return answer

    def options(self) -> dp.DevicePluginOptions:
        """No PreStartContainer; a preferred allocation where the plugin has a preference."""
        return dp.DevicePluginOptions(
            pre_start_required=False,
            get_preferred_allocation_available=self.mode in PREFERRING,
        )

    def list_and_watch(self, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:
        """The list now, then again whenever a token's health changes, until the call ends."""
        sent: list[tuple[str, str]] | None = None
        seen = -1
        while context.is_active() and not self.state.closed:
            generation = self.state.generation
            if generation != seen:
                seen = generation
                devices = self.devices()
                spelled = [(d.ID, d.health) for d in devices]
                if spelled != sent:
                    sent = spelled
                    unhealthy = sum(1 for _, h in spelled if h == UNHEALTHY)
                    log.info(
                        "%s: advertising %d devices (%d unhealthy)",
                        self.resource,
                        len(spelled),
                        unhealthy,
                    )
                    yield dp.ListAndWatchResponse(devices=devices)
            self.state.wait_changed(seen, WATCH_POLL_SECONDS)

    def preferred_allocation(
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        """Per container: the IDs the allocator would pick (packing, distinct shared cards)."""
        response = dp.PreferredAllocationResponse()
        nodes = {node.group.id: node for node in self.state.nodes()}
        for ask in request.container_requests:
            chosen: list[str] = []
            for group_id, node in nodes.items():
                available = [i for i in ask.available_deviceIDs if i.startswith(f"{group_id}:")]
                if not available:
                    continue
                chosen = preferred(
                    node,
                    self.mode,
                    available,
                    list(ask.must_include_deviceIDs),
                    ask.allocation_size,
                    self.state.slice_units if self.mode is AllocationMode.SLICED else None,
                )
                if len(chosen) >= ask.allocation_size:
                    break
            response.container_responses.add(deviceIDs=chosen)
        return response

    def allocate(
        self, request: dp.AllocateRequest, context: grpc.ServicerContext
    ) -> dp.AllocateResponse:
        """Delegate to the allocating callable; a refusal aborts the call with its status."""
        try:
            return self._allocating(self.mode, request)
        except AllocationRefusedError as exc:
            log.warning("%s: allocation refused: %s", self.resource, exc.message)
            context.abort(exc.code, exc.message)
            raise  # abort raises; this line only tells the type checker
