"""Reading a recording's raw answers independently of the replay engine, for expectations."""

from __future__ import annotations

from typing import Any

import msgspec

from gpustack_simulator.recording import Call


def ret_at(call: Call, t: float) -> Any:
    """The recorded return value at ``t``; ``None`` where the call raised."""
    ret = call.ret
    if call.series:
        current = call.series[0]
        for step in call.series:
            if step.t <= t:
                current = step
        ret = current.ret
    return None if ret is msgspec.UNSET else ret
