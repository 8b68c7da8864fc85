"""A stand-in for ``pynvml`` (nvidia-ml-py) that answers from a recording.

It carries the real module's constants, struct classes and exception classes, so a backend
sees exactly the types the real binding returns: ``c_nvmlMemory_t`` structs, friendly objects
for process lists, ``c_nvmlDevice_t`` handles, and ``NVMLError`` subclasses built from codes.
Only the ``nvml*`` functions are replaced.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pynvml

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Clock, Replayer

LIBRARY_ID = "pynvml"

_NOT_FOUND = Raises(type="NVMLError_NotFound", code=pynvml.NVML_ERROR_NOT_FOUND)


class PynvmlCodec:
    """pynvml's values: ctypes structs, friendly objects, pointer handles, ``NVMLError``."""

    library_id = LIBRARY_ID
    init_functions = frozenset({"nvmlInit", "nvmlInitWithFlags"})
    filters: Mapping[str, RowFilter] = {
        # Rows newer than the caller's lastSeenTimeStamp; none at all is NOT_FOUND.
        "nvmlDeviceGetProcessUtilization": RowFilter(
            arg=1, field="timeStamp", empty_raises=_NOT_FOUND
        ),
    }

    def __init__(self, module: types.ModuleType = pynvml) -> None:
        self.module = module
        self._keepalive: list[object] = []

    def encode(self, value: object, handle_ref: HandleRef) -> Any:
        """Structs with every field; friendly objects as their attribute dict."""
        if isinstance(value, self.module.nvmlFriendlyObject):
            body = {k: encode_ctypes(v, handle_ref, self) for k, v in vars(value).items()}
            return {"_type": "friendly", **body}
        return encode_ctypes(value, handle_ref, self)

    def build(self, type_name: str, fields: Mapping[str, Any]) -> object:
        """Rebuild with the binding's own class of that name."""
        body = {k: v for k, v in fields.items() if k != "_type"}
        if type_name == "friendly":
            return self.module.nvmlFriendlyObject(body)
        cls = getattr(self.module, type_name, None)
        if not (isinstance(cls, type) and issubclass(cls, ctypes.Structure)):
            raise KeyError(f"pynvml has no struct {type_name!r}")
        struct = cls()
        fill_struct(struct, body, self)
        return struct

    def error(self, raises: Raises) -> BaseException:
        """``NVMLError(code)`` picks the matching subclass itself."""
        return self.module.NVMLError(raises.code)  # type: ignore[no-any-return]

    def describe_error(self, exc: BaseException) -> Raises | None:
        """Only ``NVMLError`` is the binding's; its ``.value`` is the code."""
        if isinstance(exc, self.module.NVMLError):
            return Raises(type=type(exc).__name__, code=int(exc.value))
        return None

    def missing(self, fn: str) -> BaseException:
        """What pynvml raises for a symbol the library lacks."""
        return self.module.NVMLError(self.module.NVML_ERROR_FUNCTION_NOT_FOUND)  # type: ignore[no-any-return]

    def is_handle(self, value: object) -> bool:
        """Device handles are ``c_nvmlDevice_t`` (a pointer to an opaque struct)."""
        return isinstance(value, self.module.c_nvmlDevice_t)

    def handle_key(self, handle: object) -> Hashable:
        """NVML hands back the same pointer for the same device; the address is its identity."""
        return ctypes.cast(handle, ctypes.c_void_p).value  # type: ignore[arg-type]

    def make_handle(self, ref: str) -> object:
        """A distinct live pointer per ref, kept alive as long as the codec."""
        target = self.module.struct_c_nvmlDevice_t()
        self._keepalive.append(target)
        return ctypes.pointer(target)

    def name_handle(self, fn: str, args: Sequence[Any], position: int | None) -> str:
        """``gpu<index>`` for cards, ``<parent>/mig<slot>`` for MIG devices."""
        if fn == "nvmlDeviceGetHandleByIndex" and args:
            return f"gpu{args[0]}"
        if fn == "nvmlDeviceGetMigDeviceHandleByIndex" and len(args) == 2:
            parent = args[0]["_handle"] if isinstance(args[0], dict) else args[0]
            return f"{parent}/mig{args[1]}"
        return f"{fn}({','.join(map(str, args))})"


def build_module(recording: Recording, *, clock: Clock | None = None) -> types.ModuleType:
    """A module object with pynvml's interface, answering from ``recording``."""
    codec = PynvmlCodec()
    replayer = Replayer(recording, codec, clock=clock)
    module = types.ModuleType("pynvml", doc=f"replay of {recording.description}")
    for name in dir(pynvml):
        if name.startswith("__"):
            continue
        value = getattr(pynvml, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            setattr(module, name, _replaying(replayer, name))
        else:
            setattr(module, name, value)
    module.__dict__["__replayer__"] = replayer
    return module


def _replaying(replayer: Replayer, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return replayer.invoke(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call
