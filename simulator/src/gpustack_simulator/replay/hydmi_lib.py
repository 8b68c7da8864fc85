"""A fake ``libhydmi_mig`` at the C ABI, for :class:`~gpustack_vendors.hygon.hydmi.HyDmiMig`.

Like the ROCm SMI fake, it sits below our binding so the binding's own ctypes code runs in
replay: it takes the binding's arguments (handles as ``c_void_p``, ``byref`` out-parameters,
``c_uint`` scalars, the PCI address as bytes), writes through the out-parameters and returns
``nvmlReturn_t`` codes. What to answer comes from a callback speaking the binding's Python
results, so a recording holds what a backend saw, not C-level traffic.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from typing import Any

from gpustack_simulator.replay import cabi
from gpustack_vendors.hygon.hydmi import (
    DMI_ERROR_INVALID_ARGUMENT,
    DMI_SUCCESS,
    HyDmiError,
    dmiGpuInstanceInfo_t,
    dmiGpuInstanceProfileInfo_t,
    dmiMemory_t,
    dmiUtilization_t,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(symbol, args)``: the binding method's Python result, or raise ``HyDmiError``.

Handles in ``args`` arrive as ``ctypes.c_void_p``; a handle result is a ``c_void_p`` (or an
``int`` address) whose value is written to the caller's out-parameter."""

_U32_MAX = 0xFFFFFFFF


def _handle(arg: object) -> ctypes.c_void_p:
    """A handle argument, always as a fresh ``c_void_p`` carrying the address."""
    value = getattr(arg, "value", arg)
    if value is not None and not isinstance(value, int):
        raise TypeError(f"expected a handle, got {arg!r}")
    return ctypes.c_void_p(value)


def _address(value: object, what: str) -> int:
    address = getattr(value, "value", value)
    if not isinstance(address, int) or address <= 0:
        raise TypeError(f"{what}: answer must be a live handle, got {value!r}")
    return address


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or not 0 <= value <= _U32_MAX:
        raise ValueError(f"{what}: {value!r} does not fit an unsigned int")
    return value


class FakeHyDmiLib:
    """The ``libhydmi_mig`` symbols :class:`HyDmiMig` uses, answered by ``answer``.

    A ``HyDmiError`` from ``answer`` becomes the returned status. Symbols in ``missing`` (and any
    symbol not defined here) raise ``AttributeError`` on lookup, as ``ctypes.CDLL`` does, so the
    binding's missing-symbol path runs. ``calls`` logs every C call by symbol name.
    """

    def __init__(self, answer: Answer, *, missing: Collection[str] = ()) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"libhydmi_mig.so.1: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, name: str, args: tuple[object, ...]) -> tuple[int, object]:
        self.calls.append(name)
        try:
            return DMI_SUCCESS, self.answer(name, args)
        except HyDmiError as exc:
            return exc.value, None

    def _uint_out(self, name: str, args: tuple[object, ...], out: object) -> int:
        if out is None:
            return DMI_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status == DMI_SUCCESS:
            cabi.target(out)[0] = _count(value, name)
        return status

    def _handle_out(self, name: str, args: tuple[object, ...], out: object) -> int:
        if out is None:
            return DMI_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status == DMI_SUCCESS:
            cabi.target(out)[0] = _address(value, name)
        return status

    def _struct_out(
        self, name: str, args: tuple[object, ...], out: object, struct: type[ctypes.Structure]
    ) -> int:
        if out is None:
            return DMI_ERROR_INVALID_ARGUMENT
        status, value = self._ask(name, args)
        if status == DMI_SUCCESS:
            if not isinstance(value, struct):
                raise TypeError(f"{name}: answer must be a {struct.__name__}, got {value!r}")
            cabi.target(out)[0] = value
        return status

    # -- system ----------------------------------------------------------------------------------

    def nvmlGetSystemMigMode(self, current: object, pending: object) -> int:
        """``nvmlGetSystemMigMode(unsigned int *current, unsigned int *pending)``."""
        if current is None or pending is None:
            return DMI_ERROR_INVALID_ARGUMENT
        status, value = self._ask("nvmlGetSystemMigMode", ())
        if status == DMI_SUCCESS:
            if not isinstance(value, tuple | list) or len(value) != 2:
                raise TypeError(f"nvmlGetSystemMigMode: answer must be a pair, got {value!r}")
            cabi.target(current)[0] = _count(value[0], "nvmlGetSystemMigMode")
            cabi.target(pending)[0] = _count(value[1], "nvmlGetSystemMigMode")
        return status

    def nvmlDeviceGetCount(self, count: object) -> int:
        """``nvmlDeviceGetCount(unsigned int *count)``."""
        return self._uint_out("nvmlDeviceGetCount", (), count)

    # -- cards -----------------------------------------------------------------------------------

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: object, device: object) -> int:
        """``nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)``."""
        if not isinstance(bus_id, bytes):
            return DMI_ERROR_INVALID_ARGUMENT
        return self._handle_out("nvmlDeviceGetHandleByPciBusId", (bus_id.decode(),), device)

    def nvmlDeviceGetIndex(self, device: object, index: object) -> int:
        """``nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)``."""
        return self._uint_out("nvmlDeviceGetIndex", (_handle(device),), index)

    def nvmlDeviceGetMaxMigDeviceCount(self, device: object, count: object) -> int:
        """``nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)``."""
        return self._uint_out("nvmlDeviceGetMaxMigDeviceCount", (_handle(device),), count)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: object, profile: object, info: object
    ) -> int:
        """``…GetGpuInstanceProfileInfo(nvmlDevice_t, unsigned int profile, *info)``."""
        name = "nvmlDeviceGetGpuInstanceProfileInfo"
        return self._struct_out(
            name, (_handle(device), cabi.scalar(profile)), info, dmiGpuInstanceProfileInfo_t
        )

    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, device: object, index: object, mig: object
    ) -> int:
        """``…GetMigDeviceHandleByIndex(nvmlDevice_t, unsigned int index, nvmlDevice_t *)``."""
        name = "nvmlDeviceGetMigDeviceHandleByIndex"
        return self._handle_out(name, (_handle(device), cabi.scalar(index)), mig)

    def nvmlDeviceGetGpuInstanceById(self, device: object, gi_id: object, instance: object) -> int:
        """``…GetGpuInstanceById(nvmlDevice_t, unsigned int id, nvmlGpuInstance_t *)``."""
        name = "nvmlDeviceGetGpuInstanceById"
        return self._handle_out(name, (_handle(device), cabi.scalar(gi_id)), instance)

    def nvmlGpuInstanceGetInfo(self, instance: object, info: object) -> int:
        """``nvmlGpuInstanceGetInfo(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t *info)``."""
        return self._struct_out(
            "nvmlGpuInstanceGetInfo", (_handle(instance),), info, dmiGpuInstanceInfo_t
        )

    # -- MIG devices -----------------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceId(self, device: object, value: object) -> int:
        """``nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)``."""
        return self._uint_out("nvmlDeviceGetGpuInstanceId", (_handle(device),), value)

    def nvmlDeviceGetComputeInstanceId(self, device: object, value: object) -> int:
        """``nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)``."""
        return self._uint_out("nvmlDeviceGetComputeInstanceId", (_handle(device),), value)

    def nvmlDeviceGetMemoryInfo(self, device: object, memory: object) -> int:
        """``nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)``."""
        return self._struct_out("nvmlDeviceGetMemoryInfo", (_handle(device),), memory, dmiMemory_t)

    def nvmlDeviceGetUtilizationRates(self, device: object, rates: object) -> int:
        """``nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *rates)``."""
        name = "nvmlDeviceGetUtilizationRates"
        return self._struct_out(name, (_handle(device),), rates, dmiUtilization_t)
