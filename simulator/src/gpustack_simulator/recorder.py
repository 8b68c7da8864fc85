"""The recorder: wraps a real binding, lets the backend drive it, and writes what it answered.

The proxy sits where the backend's binding module would be, so what gets recorded is exactly
the set of calls the backend makes, with their real arguments — not a guess at what a backend
might need. Observations are then compressed per call: an answer that never changed is
static, one that did becomes a time series.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gpustack_simulator.recording import (
    Binding,
    Call,
    Context,
    HandleOrigin,
    Library,
    Load,
    Provenance,
    Raises,
    Recording,
    Step,
    canonical,
)
from gpustack_simulator.replay.codec import Codec
from gpustack_simulator.replay.engine import Clock
from gpustack_vendors.model import Detection
from gpustack_vendors.protocol import Backend


@dataclass
class Observation:
    """One call as it happened."""

    fn: str
    args: list[Any]
    kwargs: dict[str, Any]
    t: float
    ret: Any = msgspec.UNSET
    raises: Raises | None = None


@dataclass
class RecordingProxy:
    """A module-like object recording every binding function the backend calls through it."""

    module: object
    """The binding's functions as attributes: a module, or a stand-in shaped like one."""
    codec: Codec
    clock: Clock = time.monotonic
    observations: list[Observation] = field(default_factory=list)
    handles: dict[str, HandleOrigin] = field(default_factory=dict)
    _refs: dict[Hashable, str] = field(default_factory=dict)
    _started: float | None = None

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.module, name)
        if not callable(value) or isinstance(value, type) or name.startswith("_"):
            return value
        recorder = self

        def call(*args: Any, **kwargs: Any) -> Any:
            return recorder._record(name, value, args, kwargs)

        call.__name__ = name
        return call

    def _ref(self, handle: object) -> str:
        ref = self._refs.get(self.codec.handle_key(handle))
        if ref is None:
            raise ValueError(f"{self.codec.library_id}: a handle was used before it was obtained")
        return ref

    def _record(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if name in self.codec.init_functions or self._started is None:
            self._started = self.clock()
        encoded_args = [self.codec.encode(a, self._ref) for a in args]
        encoded_kwargs = {k: self.codec.encode(v, self._ref) for k, v in kwargs.items()}
        t = round(self.clock() - self._started, 3)
        observation = Observation(name, encoded_args, encoded_kwargs, t)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            described = self.codec.describe_error(exc)
            if described is None:
                raise
            observation.raises = described
            self.observations.append(observation)
            raise
        self._name_new_handles(name, encoded_args, result)
        observation.ret = self.codec.encode(result, self._ref)
        self.observations.append(observation)
        return result

    def _name_new_handles(self, fn: str, args: list[Any], result: Any) -> None:
        items: Iterable[tuple[int | None, Any]] = (
            enumerate(result) if isinstance(result, list | tuple) else [(None, result)]
        )
        for position, item in items:
            if not self.codec.is_handle(item):
                continue
            key = self.codec.handle_key(item)
            if key in self._refs:
                continue  # the same device reached another way (by UUID, by bus id)
            ref = self.codec.name_handle(fn, args, position)
            self._refs[key] = ref
            self.handles[ref] = HandleOrigin(fn=fn, args=tuple(args), position=position)

    def library(self, library_id: str, binding: Binding) -> Library:
        """Compress the observations into one library entry."""
        return Library(
            id=library_id,
            binding=binding,
            load=Load(ok=True),
            handles=dict(sorted(self.handles.items())),
            calls=tuple(compress(self.observations, self.codec)),
        )


def compress(observations: Sequence[Observation], codec: Codec) -> list[Call]:
    """Group observations per call identity: unchanged answers are static, others a series."""
    grouped: dict[str, list[Observation]] = {}
    for obs in observations:
        args = list(obs.args)
        rule = codec.filters.get(obs.fn)
        if rule is not None and rule.arg < len(args):
            args[rule.arg] = None
        grouped.setdefault(canonical([obs.fn, args, obs.kwargs]), []).append(obs)
    calls: list[Call] = []
    for group in grouped.values():
        first = group[0]
        answers = [(o.t, _answer(o)) for o in group]
        steps: list[tuple[float, tuple[str, Any, Raises | None]]] = []
        for t, answer in answers:
            if not steps or steps[-1][1][0] != answer[0]:
                steps.append((t, answer))
        rule = codec.filters.get(first.fn)
        common: dict[str, Any] = {
            "fn": first.fn,
            "args": tuple(first.args),
            "kwargs": first.kwargs,
            "filter": rule,
        }
        if len(steps) == 1:
            _, (_, ret, raises) = steps[0]
            calls.append(Call(**common, ret=ret, raises=raises))
        else:
            calls.append(
                Call(
                    **common,
                    series=tuple(
                        Step(t=t, ret=ret, raises=raises) for t, (_, ret, raises) in steps
                    ),
                )
            )
    return calls


def _answer(obs: Observation) -> tuple[str, Any, Raises | None]:
    if obs.raises is not None:
        return canonical(["raises", obs.raises.code]), msgspec.UNSET, obs.raises
    return canonical(["ret", obs.ret]), obs.ret, None


def assemble(
    *,
    vendor: str,
    description: str,
    provenance: Provenance,
    libraries: Sequence[Library],
    node: dict[str, str] | None = None,
    context: Context | None = None,
    loop_seconds: float | None = None,
) -> Recording:
    """Put recorded libraries and their node facts into one document."""
    return Recording(
        schema="accel-recording/v1",
        vendor=vendor,
        description=description,
        provenance=provenance,
        libraries=tuple(libraries),
        node=node or {},
        loop_seconds=loop_seconds,
        context=context or Context(),
    )


def exercise(
    backend: Backend,
    *,
    samples: int,
    interval: float,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[int], None] | None = None,
) -> Detection:
    """Make every call a Device Manager makes: detect once, then monitor-style passes.

    Each pass samples the cards, reads per-process rows of every device and reads every
    partition on its own handle — a superset of any one real pass, so a replay can answer
    whatever the Device Manager later asks. Returns the detection (versions and card names
    for a recording's provenance).
    """
    detection = backend.detect()
    devices = [device.id for device in detection.devices]
    partitions = [p.id for device in detection.devices for p in device.partitions]
    for index in range(samples):
        if index:
            sleep(interval)
        backend.sample()
        backend.processes(devices)
        backend.partitions(partitions)
        if progress is not None:
            progress(index + 1)
    backend.close()
    return detection
