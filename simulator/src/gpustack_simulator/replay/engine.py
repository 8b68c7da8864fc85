"""The replay engine: answers a binding's calls from a recording, the way the binding would.

Call identity is the function plus its arguments, with handles spelled by ref. A call the
recording lacks raises the binding's own function-not-found error — never a default value, which
would let a backend silently read a figure nobody recorded. Time-dependent answers step by the
time elapsed since the replayed init, holding the last value (or wrapping, if the recording
loops); scripted faults overlay both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import msgspec

from gpustack_simulator.recording import Call, Recording, Step, call_key, canonical
from gpustack_simulator.replay.codec import Codec

Clock = Callable[[], float]


class Replayer:
    """Answers one library's calls from a recording; shared by the stand-in's functions."""

    def __init__(
        self,
        recording: Recording,
        codec: Codec,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.recording = recording
        self.library = recording.library(codec.library_id)
        self.codec = codec
        self._clock = clock or time.monotonic
        self._started = self._clock()
        self._calls: dict[str, Call] = {call_key(call): call for call in self.library.calls}
        self._lock = threading.Lock()
        self._handles: dict[str, object] = {}
        self._refs: dict[Hashable, str] = {}
        self.calls_made = 0

    # -- time ----------------------------------------------------------------------------

    def restart_clock(self) -> None:
        """Recorded time counts from init; a replayed init restarts it."""
        self._started = self._clock()

    def elapsed(self) -> float:
        """Seconds since the replayed init, wrapped if the recording loops."""
        t = self._clock() - self._started
        loop = self.recording.loop_seconds
        return t % loop if loop else t

    # -- handles --------------------------------------------------------------------------

    def handle(self, ref: str) -> object:
        """The live handle object for a ref, minted once and reused."""
        with self._lock:
            handle = self._handles.get(ref)
            if handle is None:
                handle = self.codec.make_handle(ref)
                self._handles[ref] = handle
                self._refs[self.codec.handle_key(handle)] = ref
            return handle

    def ref_of(self, handle: object) -> str:
        """The ref of a handle this replay minted; anything else is an invalid argument."""
        ref = self._refs.get(self.codec.handle_key(handle))
        if ref is None:
            raise ValueError(f"{self.codec.library_id}: handle {handle!r} was not issued here")
        return ref

    # -- calls ----------------------------------------------------------------------------

    def invoke(self, fn: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """Answer one call as the binding would: its return value or its exception."""
        self.calls_made += 1
        if fn in self.codec.init_functions:
            self.restart_clock()
        encoded_args = [self.codec.encode(a, self.ref_of) for a in args]
        encoded_kwargs = {k: self.codec.encode(v, self.ref_of) for k, v in kwargs.items()}
        rule = self.codec.filters.get(fn)
        lookup = list(encoded_args)
        if rule is not None and rule.arg < len(lookup):
            lookup[rule.arg] = None
        call = self._calls.get(canonical([fn, lookup, encoded_kwargs]))
        if call is None:
            raise self.codec.missing(fn)
        t = self.elapsed()
        for fault in self.recording.faults:
            if (
                fault.fn == fn
                and fault.start <= t < fault.end
                and (fault.args is None or canonical(list(fault.args)) == canonical(encoded_args))
            ):
                raise self.codec.error(fault.raises)
        ret, raises = _answer_at(call, t)
        if raises is not None:
            raise self.codec.error(raises)
        if call.filter is not None:
            threshold = encoded_args[call.filter.arg]
            rows = [row for row in ret if row[call.filter.field] > threshold]
            if not rows and call.filter.empty_raises is not None:
                raise self.codec.error(call.filter.empty_raises)
            ret = rows
        return self.decode(ret)

    def decode(self, value: Any) -> Any:
        """Rebuild recorded values as the binding's own objects."""
        if isinstance(value, dict):
            if set(value) == {"_handle"}:
                return self.handle(str(value["_handle"]))
            if "_type" in value:
                return self.codec.build(str(value["_type"]), value)
            return {k: self.decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.decode(item) for item in value]
        return value


def _answer_at(call: Call, t: float) -> tuple[Any, Any]:
    """The answer in force at ``t``: a series holds its last step, and starts at its first."""
    if not call.series:
        return call.ret, call.raises
    current: Step = call.series[0]
    for step in call.series:
        if step.t > t:
            break
        current = step
    return (None if current.ret is msgspec.UNSET else current.ret), current.raises
