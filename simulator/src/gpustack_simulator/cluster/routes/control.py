"""The simulator's own control surface: the clock, faults and a state readout."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec
from quart import Response, request

from gpustack_core.status import StatusError
from gpustack_simulator.cluster.routes.base import Caller, RouteBase, json_response
from gpustack_simulator.cluster.state import (
    NODE,
    ClockRangeError,
)
from gpustack_simulator.scenario import MASTERS, Fault, FaultDoc

B = TypeVar("B")


class ClockAdvance(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """``POST /simulator/v1/clock``'s body."""

    advance_seconds: float


class ControlRoutes(RouteBase):
    """Tests and ``simulator up`` move time and break sources through these."""

    def _master(self, caller: Caller) -> None:
        """The control surface moves time and breaks sources: the cluster admin's alone."""
        if MASTERS not in caller.groups:
            raise StatusError(
                403,
                f'User "{caller.name}" cannot use the simulator control endpoints: they are '
                f'open to group "{MASTERS}" only',
            )

    async def _control_body(self, kind: type[B], what: str) -> B:
        raw = await request.get_data(as_text=False)
        data = raw if isinstance(raw, bytes) else raw.encode()
        try:
            return msgspec.json.decode(data, type=kind)
        except msgspec.ValidationError as exc:
            raise StatusError(400, f"the {what} is malformed: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise StatusError(400, f"the {what} is not JSON: {exc}") from exc

    async def control_clock(self, caller: Caller) -> Response:
        """Advance scenario time (``system:masters`` only)."""
        self.require_method("POST")
        self._master(caller)
        body = await self._control_body(ClockAdvance, "clock request")
        try:
            self.state.clock.advance(body.advance_seconds)
        except ClockRangeError as exc:
            raise StatusError(400, str(exc)) from exc
        return json_response({"now": self.state.clock()})

    async def control_faults(self, caller: Caller) -> Response:
        """Add a fault (POST) or clear them all (DELETE); answers the faults in force."""
        self.require_method("POST", "DELETE")
        self._master(caller)
        if request.method == "DELETE":
            self.state.clear_faults()
        else:
            doc = await self._control_body(FaultDoc, "fault")
            problems = self._fault_problems(doc)
            if problems:
                raise StatusError(400, "the fault is malformed: " + "; ".join(problems))
            self.state.add_fault(Fault(doc.kind, doc.node, doc.start, doc.end))
        return json_response({"faults": [_fault(f) for f in self.state.faults]})

    def _fault_problems(self, doc: FaultDoc) -> list[str]:
        """The checks a scenario's ``faults`` entry gets, with the same wording."""
        problems = [
            f"{name}: {value} is not a finite number of seconds"
            for name, value in (("from", doc.start), ("to", doc.end))
            if value is not None and not math.isfinite(value)
        ]
        if doc.node is not None and self.state.store.get(NODE, "", doc.node) is None:
            problems.append(f"node: unknown node {doc.node!r}")
        if doc.kind == "metrics-api-absent" and doc.node is not None:
            problems.append("node: metrics.k8s.io is cluster-wide; it has no node")
        if doc.end is not None and doc.end <= doc.start:
            problems.append(f"to: {doc.end} must be after 'from' ({doc.start})")
        return problems

    async def control_state(self, caller: Caller) -> Response:
        """Scenario time, the faults and the worker URL, for tests that assert on them."""
        self.require_method("GET")
        self._master(caller)
        return json_response(
            {
                "now": self.state.clock(),
                "faults": [_fault(f) for f in self.state.faults],
                "worker": self.state.worker_url,
            }
        )


def _fault(fault: Fault) -> dict[str, Any]:
    """A fault spelled as a scenario's ``faults`` entry is."""
    return {"kind": fault.kind, "node": fault.node, "from": fault.start, "to": fault.end}
