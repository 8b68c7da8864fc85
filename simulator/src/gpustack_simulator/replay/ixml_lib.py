"""A fake ``libixml`` at the C ABI, for :class:`~gpustack_vendors.iluvatar.ixml.Ixml`.

IXML copies NVML, so this fake answers the way ``nvml.h`` documents, and the real binding runs on
top:

- device handles are opaque pointers: ``nvmlDeviceGetHandleByIndex_v2`` writes the address of the
  answer's ``ixmlDevice_t`` through the caller's ``void **``;
- strings are written NUL-terminated into the caller's buffer, ``INSUFFICIENT_SIZE`` if they do not
  fit its length;
- ``nvmlDeviceGetMemoryInfo_v2`` refuses a struct not stamped ``nvmlMemory_v2`` with
  ``ARGUMENT_VERSION_MISMATCH``;
- ``nvmlDeviceGetComputeRunningProcesses`` answers a NULL-buffer probe with the count and
  ``INSUFFICIENT_SIZE`` (``SUCCESS`` when there is none), and a buffer smaller than the list with
  ``INSUFFICIENT_SIZE`` and the size it needs now. ``null_probe_success=True`` answers the probe
  ``SUCCESS`` with a non-zero count instead, as NVIDIA's ``nvml-mock`` does.

Every C call asks ``answer`` once, so an answer that changes between calls reproduces a process
list growing between the probe and the fill.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from typing import Any

from gpustack_simulator.replay import cabi
from gpustack_vendors.iluvatar import ixml
from gpustack_vendors.iluvatar.ixml import (
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_SUCCESS,
    IXMLError,
    ixmlDevice_t,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(binding_method, args)``: that method's Python result, or raise ``IXMLError``."""

_U32 = (0, (1 << 32) - 1)
_I32 = (-(1 << 31), (1 << 31) - 1)
_U64 = (0, (1 << 64) - 1)


def _device(arg: object) -> ixmlDevice_t | None:
    """The handle argument as the binding's handle type (``None`` for NULL)."""
    if isinstance(arg, ixmlDevice_t):
        return arg if arg.value else None
    address = getattr(arg, "value", arg)
    return ixmlDevice_t(address) if isinstance(address, int) and address else None


def _checked(value: object, bounds: tuple[int, int], what: str) -> int:
    low, high = bounds
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what}: {value!r} does not fit the C type ({low} … {high})")
    return value


class FakeIxmlLib:
    """The ``libixml`` symbols :class:`~gpustack_vendors.iluvatar.ixml.Ixml` uses.

    An ``IXMLError`` from ``answer`` becomes the returned status. Symbols in ``missing`` (and any
    not defined here) raise ``AttributeError`` on lookup, as ``ctypes.CDLL`` does. ``calls`` logs
    every C call.
    """

    def __init__(
        self,
        answer: Answer,
        *,
        missing: Collection[str] = (),
        null_probe_success: bool = False,
    ) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.null_probe_success = null_probe_success
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith(("nvml", "ixml")) and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"libixml.so: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, name: str, args: tuple[object, ...]) -> tuple[int, object]:
        self.calls.append(name)
        try:
            return NVML_SUCCESS, self.answer(name, args)
        except IXMLError as exc:
            return exc.value, None

    def _scalar_out(
        self, name: str, args: tuple[object, ...], out: object, bounds: tuple[int, int]
    ) -> int:
        if out is None:
            return NVML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status == NVML_SUCCESS:
            cabi.target(out)[0] = _checked(value, bounds, name)
        return status

    def _text_out(self, name: str, args: tuple[object, ...], buffer: object, length: object) -> int:
        if buffer is None:
            return NVML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status != NVML_SUCCESS:
            return status
        if not isinstance(value, str):
            raise TypeError(f"{name}: answer must be a str, got {value!r}")
        encoded = value.encode()
        if len(encoded) + 1 > cabi.scalar(length):
            return NVML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buffer, encoded + b"\0", len(encoded) + 1)  # type: ignore[arg-type]
        return NVML_SUCCESS

    def _struct_out(
        self, name: str, args: tuple[object, ...], out: object, cls: type[ctypes.Structure]
    ) -> int:
        if out is None:
            return NVML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status == NVML_SUCCESS:
            if not isinstance(value, cls):
                raise TypeError(f"{name}: answer must be a {cls.__name__}, got {value!r}")
            cabi.target(out)[0] = value
        return status

    # -- library ---------------------------------------------------------------------------------

    def nvmlInit_v2(self) -> int:
        """``nvmlInit_v2(void)``."""
        status, _ = self._ask("nvmlInit_v2", ())
        return status

    def nvmlShutdown(self) -> int:
        """``nvmlShutdown(void)``."""
        status, _ = self._ask("nvmlShutdown", ())
        return status

    def nvmlSystemGetDriverVersion(self, buffer: object, length: object) -> int:
        """``nvmlSystemGetDriverVersion(char *version, unsigned int length)``."""
        return self._text_out("nvmlSystemGetDriverVersion", (), buffer, length)

    def nvmlSystemGetCudaDriverVersion(self, version: object) -> int:
        """``nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)``."""
        return self._scalar_out("nvmlSystemGetCudaDriverVersion", (), version, _I32)

    def nvmlDeviceGetCount_v2(self, count: object) -> int:
        """``nvmlDeviceGetCount_v2(unsigned int *deviceCount)``."""
        return self._scalar_out("nvmlDeviceGetCount_v2", (), count, _U32)

    def nvmlDeviceGetHandleByIndex_v2(self, index: object, device: object) -> int:
        """``nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)``."""
        if device is None:
            return NVML_ERROR_INVALID_ARGUMENT
        status, value = self._ask("nvmlDeviceGetHandleByIndex_v2", (cabi.scalar(index),))
        if status == NVML_SUCCESS:
            if not isinstance(value, ixmlDevice_t) or not value.value:
                raise TypeError(f"nvmlDeviceGetHandleByIndex_v2: not a handle: {value!r}")
            cabi.target(device)[0] = value.value
        return status

    # -- per device ------------------------------------------------------------------------------

    @staticmethod
    def _per_device(device: object, *rest: object) -> tuple[object, ...] | None:
        handle = _device(device)
        return None if handle is None else (handle, *rest)

    def nvmlDeviceGetUUID(self, device: object, buffer: object, length: object) -> int:
        """``nvmlDeviceGetUUID(nvmlDevice_t, char *uuid, unsigned int length)``."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._text_out("nvmlDeviceGetUUID", args, buffer, length)

    def nvmlDeviceGetName(self, device: object, buffer: object, length: object) -> int:
        """``nvmlDeviceGetName(nvmlDevice_t, char *name, unsigned int length)``."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._text_out("nvmlDeviceGetName", args, buffer, length)

    def nvmlDeviceGetPciInfo_v3(self, device: object, info: object) -> int:
        """``nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *)``."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._struct_out("nvmlDeviceGetPciInfo_v3", args, info, ixml.c_nvmlPciInfo_t)

    def nvmlDeviceGetMemoryInfo_v2(self, device: object, info: object) -> int:
        """``nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *)``; version checked."""
        name = "nvmlDeviceGetMemoryInfo_v2"
        args = self._per_device(device)
        if args is None or info is None:
            return NVML_ERROR_INVALID_ARGUMENT
        target = cabi.target(info)
        if int(target[0].version) != ixml.nvmlMemory_v2:
            self.calls.append(name)
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        status = self._struct_out(name, args, info, ixml.c_nvmlMemory_v2_t)
        if status == NVML_SUCCESS:
            target[0].version = ixml.nvmlMemory_v2
        return status

    def nvmlDeviceGetMemoryInfo(self, device: object, info: object) -> int:
        """``nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *)``."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._struct_out("nvmlDeviceGetMemoryInfo", args, info, ixml.c_nvmlMemory_t)

    def nvmlDeviceGetUtilizationRates(self, device: object, info: object) -> int:
        """``nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t *)``."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._struct_out(
            "nvmlDeviceGetUtilizationRates", args, info, ixml.c_nvmlUtilization_t
        )

    def nvmlDeviceGetTemperature(self, device: object, sensor: object, value: object) -> int:
        """``nvmlDeviceGetTemperature(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *)``."""
        args = self._per_device(device, cabi.scalar(sensor))
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._scalar_out("nvmlDeviceGetTemperature", args, value, _U32)

    def nvmlDeviceGetPowerUsage(self, device: object, value: object) -> int:
        """``nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int *power)``, mW."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._scalar_out("nvmlDeviceGetPowerUsage", args, value, _U32)

    def ixmlDeviceGetHealth(self, device: object, value: object) -> int:
        """``ixmlDeviceGetHealth(nvmlDevice_t, unsigned long long *health)``."""
        args = self._per_device(device)
        if args is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return self._scalar_out("ixmlDeviceGetHealth", args, value, _U64)

    def nvmlDeviceGetComputeRunningProcesses(
        self, device: object, count: object, infos: object
    ) -> int:
        """``nvmlDeviceGetComputeRunningProcesses(device, unsigned *, nvmlProcessInfo_t *)``."""
        name = "nvmlDeviceGetComputeRunningProcesses"
        args = self._per_device(device)
        if args is None or count is None:
            return NVML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status != NVML_SUCCESS:
            return status
        listed = cabi.rows(name, value, ixml.c_nvmlProcessInfo_v1_t)
        count_ref = cabi.target(count)
        if infos is None:
            count_ref[0] = len(listed)
            if not listed or self.null_probe_success:
                return NVML_SUCCESS
            return NVML_ERROR_INSUFFICIENT_SIZE
        if int(count_ref[0]) < len(listed):
            count_ref[0] = len(listed)
            return NVML_ERROR_INSUFFICIENT_SIZE
        target = cabi.target(infos)
        for i, row in enumerate(listed):
            target[i] = row
        count_ref[0] = len(listed)
        return NVML_SUCCESS
