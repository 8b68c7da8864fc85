"""A stand-in for ``pynvml`` (nvidia-ml-py) that answers from a recording.

It carries the real module's constants, struct classes and exception classes, so a backend
sees exactly the types the real binding returns: ``c_nvmlMemory_t`` structs, friendly objects
for process lists, ``c_nvmlDevice_t`` handles, and ``NVMLError`` subclasses built from codes.
Only the ``nvml*`` functions are replaced; those the NVIDIA backend calls are typed methods of
:class:`PynvmlStandin`, checked by mypy against the backend's surface.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

import pynvml

from gpustack_simulator.recording import Raises, Recording, RowFilter
from gpustack_simulator.replay.codec import HandleRef, encode_ctypes, fill_struct
from gpustack_simulator.replay.engine import Clock, Replayer
from gpustack_vendors.nvidia.surface import (
    NvmlMemory,
    NvmlPciInfo,
    NvmlProcessInfo,
    NvmlProcessUtilizationSample,
    NvmlUtilization,
)

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


class PynvmlStandin:
    """pynvml's interface answering from a recording.

    The calls of :class:`~gpustack_vendors.nvidia.surface.NvmlSurface` are typed methods here,
    so mypy checks this stand-in against the surface the NVIDIA backend declares; every other
    ``nvml*`` function and every constant, struct and exception class of the real module is an
    attribute, as on ``pynvml`` itself. The answers are the binding's own values.
    """

    NVML_TEMPERATURE_GPU: int = pynvml.NVML_TEMPERATURE_GPU
    NVML_ERROR_NOT_FOUND: int = pynvml.NVML_ERROR_NOT_FOUND
    NVMLError: type[Exception] = pynvml.NVMLError

    def __init__(self, replayer: Replayer, doc: str) -> None:
        self.__name__ = "pynvml"
        self.__doc__ = doc
        self._replayer = replayer
        self.__dict__["__replayer__"] = replayer
        typed = set(dir(type(self)))
        for name in dir(pynvml):
            if name.startswith("__") or name in typed:
                continue
            value = getattr(pynvml, name)
            if name.startswith("nvml") and callable(value) and not isinstance(value, type):
                setattr(self, name, _replaying(replayer, name))
            else:
                setattr(self, name, value)

    def _call(self, name: str, *args: object) -> Any:
        return self._replayer.invoke(name, args, {})

    def nvmlInit(self) -> None:
        self._call("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return cast("str", self._call("nvmlSystemGetDriverVersion"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return cast("int", self._call("nvmlSystemGetCudaDriverVersion"))

    def nvmlDeviceGetCount(self) -> int:
        return cast("int", self._call("nvmlDeviceGetCount"))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return cast("object", self._call("nvmlDeviceGetHandleByIndex", index))

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return cast("str", self._call("nvmlDeviceGetUUID", handle))

    def nvmlDeviceGetName(self, handle: object) -> str:
        return cast("str", self._call("nvmlDeviceGetName", handle))

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> NvmlMemory:
        return cast("NvmlMemory", self._call("nvmlDeviceGetMemoryInfo", handle))

    def nvmlDeviceGetNumGpuCores(self, device: object) -> int:
        return cast("int", self._call("nvmlDeviceGetNumGpuCores", device))

    def nvmlDeviceGetPciInfo(self, handle: object) -> NvmlPciInfo:
        return cast("NvmlPciInfo", self._call("nvmlDeviceGetPciInfo", handle))

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        return cast("tuple[int, int]", self._call("nvmlDeviceGetCudaComputeCapability", handle))

    def nvmlDeviceGetMigMode(self, device: object) -> Sequence[int]:
        return cast("Sequence[int]", self._call("nvmlDeviceGetMigMode", device))

    def nvmlDeviceGetMaxMigDeviceCount(self, device: object) -> int:
        return cast("int", self._call("nvmlDeviceGetMaxMigDeviceCount", device))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: object, index: int) -> object:
        return cast("object", self._call("nvmlDeviceGetMigDeviceHandleByIndex", device, index))

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> NvmlUtilization:
        return cast("NvmlUtilization", self._call("nvmlDeviceGetUtilizationRates", handle))

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        return cast("int", self._call("nvmlDeviceGetTemperature", handle, sensor))

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return cast("int", self._call("nvmlDeviceGetPowerUsage", handle))

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> Sequence[NvmlProcessInfo]:
        return cast(
            "Sequence[NvmlProcessInfo]", self._call("nvmlDeviceGetComputeRunningProcesses", handle)
        )

    def nvmlDeviceGetProcessUtilization(
        self, handle: object, timeStamp: int
    ) -> Sequence[NvmlProcessUtilizationSample]:
        return cast(
            "Sequence[NvmlProcessUtilizationSample]",
            self._call("nvmlDeviceGetProcessUtilization", handle, timeStamp),
        )


def build_module(recording: Recording, *, clock: Clock | None = None) -> PynvmlStandin:
    """An object with pynvml's interface (a module's attributes), answering from ``recording``."""
    replayer = Replayer(recording, PynvmlCodec(), clock=clock)
    return PynvmlStandin(replayer, f"replay of {recording.description}")


def _replaying(replayer: Replayer, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return replayer.invoke(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call
