"""A fake ``libhgml.so`` at the C ABI, for :class:`~gpustack_vendors.thead.hgml.Hgml`.

HGML copies NVML's conventions, and a replay at the binding's Python surface would skip the
binding's half of them: the probe-then-fill size negotiation of the process calls, the
versioned struct header of ``hgmlDeviceGetProcessesUtilizationInfo`` (its ``version`` checked,
its ``processSamplesCount`` in/out), and handles written through ``hgmlDevice_t *``. This fake
takes the binding's ctypes arguments, writes through its pointers and returns NVML's codes the
way the library does, so the real binding runs on top.

What to answer comes from a callback speaking the binding's Python results (``answer(method,
args)``, under the binding's method names, :data:`~gpustack_vendors.thead.hgml.SYMBOLS`
backwards); handles are passed through as the ``c_hgmlDevice_t`` objects the binding holds.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final

from gpustack_simulator.replay import cabi
from gpustack_vendors.thead.hgml import (
    HGML_ERROR_ARGUMENT_VERSION_MISMATCH,
    HGML_ERROR_INSUFFICIENT_SIZE,
    HGML_ERROR_INVALID_ARGUMENT,
    HGML_ERROR_NOT_FOUND,
    HGML_SUCCESS,
    SYMBOLS,
    HGMLError,
    c_hgmlDevice_t,
    c_hgmlMemory_t,
    c_hgmlProcessesUtilizationInfo_t,
    c_hgmlProcessInfo_t,
    c_hgmlProcessUtilizationInfo_v1_t,
    c_hgmlProcessUtilizationSample_t,
    c_hgmlUtilization_t,
    hgmlPciInfo_t,
    hgmlProcessesUtilizationInfo_v1,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(binding_method, args)``: that method's Python result, or raise ``HGMLError``."""

METHODS: Final[dict[str, str]] = {symbol: method for method, symbol in SYMBOLS.items()}
"""C symbol → the binding method it serves."""

_UINT_MAX = (1 << 32) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _object(pointer: object) -> Any:
    """The ctypes object a ``byref``/pointer argument designates, to read and write in place."""
    obj = getattr(pointer, "_obj", None)
    if obj is not None:
        return obj
    if isinstance(pointer, ctypes._Pointer):
        return pointer.contents
    return pointer


def _checked(value: object, low: int, high: int, what: str) -> int:
    """Refuse values the C type cannot hold: ctypes would truncate them without a word."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what}: {value!r} does not fit the C type ({low} … {high})")
    return value


class FakeHgmlLib:
    """The ``libhgml`` symbols :class:`Hgml` uses, answered by ``answer``.

    Each C call asks ``answer`` once, probes included, so an ``answer`` returning a longer list
    on its next call makes a list grow between probe and fill. An ``HGMLError`` from ``answer``
    becomes the returned code. Symbols in ``missing`` (and any symbol not defined here) raise
    ``AttributeError`` on lookup, as ``ctypes.CDLL`` does. ``calls`` logs every C call.
    """

    def __init__(self, answer: Answer, *, missing: Collection[str] = ()) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("hgml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"libhgml.so: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, symbol: str, args: tuple[object, ...]) -> tuple[int, object]:
        self.calls.append(symbol)
        try:
            return HGML_SUCCESS, self.answer(METHODS[symbol], args)
        except HGMLError as exc:
            return exc.value, None

    def _scalar_out(
        self,
        symbol: str,
        args: tuple[object, ...],
        out: object,
        low: int = 0,
        high: int = _UINT_MAX,
    ) -> int:
        if out is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, args)
        if status == HGML_SUCCESS:
            cabi.target(out)[0] = _checked(value, low, high, symbol)
        return status

    def _struct_out(
        self, symbol: str, args: tuple[object, ...], out: object, struct: type[ctypes.Structure]
    ) -> int:
        if out is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, args)
        if status == HGML_SUCCESS:
            if not isinstance(value, struct):
                raise TypeError(f"{symbol}: answer must be a {struct.__name__}, got {value!r}")
            cabi.target(out)[0] = value
        return status

    def _string_out(
        self, symbol: str, args: tuple[object, ...], buffer: object, length: object
    ) -> int:
        """NVML's string convention: a buffer too short for the text (and its NUL) is refused."""
        if buffer is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, args)
        if status != HGML_SUCCESS:
            return status
        if not isinstance(value, str):
            raise TypeError(f"{symbol}: answer must be a str, got {value!r}")
        encoded = value.encode() + b"\0"
        target = _object(buffer)
        if len(encoded) > min(cabi.scalar(length), ctypes.sizeof(target)):
            return HGML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(ctypes.addressof(target), encoded, len(encoded))
        return HGML_SUCCESS

    def _handle_out(self, symbol: str, args: tuple[object, ...], out: object) -> int:
        if out is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, args)
        if status == HGML_SUCCESS:
            if not isinstance(value, c_hgmlDevice_t):
                raise TypeError(f"{symbol}: answer must be a c_hgmlDevice_t, got {value!r}")
            cabi.target(out)[0] = value
        return status

    # -- library ----------------------------------------------------------------------------------

    def hgmlInitWithFlags(self, flags: object) -> int:
        """``hgmlInitWithFlags(unsigned int flags)``; the binding passes 0."""
        if cabi.scalar(flags) != 0:
            return HGML_ERROR_INVALID_ARGUMENT
        status, _ = self._ask("hgmlInitWithFlags", ())
        return status

    def hgmlShutdown(self) -> int:
        """``hgmlShutdown(void)``."""
        status, _ = self._ask("hgmlShutdown", ())
        return status

    def hgmlSystemGetDriverVersion(self, version: object, length: object) -> int:
        """``hgmlSystemGetDriverVersion(char *version, unsigned int length)``."""
        return self._string_out("hgmlSystemGetDriverVersion", (), version, length)

    def hgmlSystemGetHggcDriverVersion(self, version: object) -> int:
        """``hgmlSystemGetHggcDriverVersion(int *version)``."""
        return self._scalar_out("hgmlSystemGetHggcDriverVersion", (), version, _INT_MIN, _INT_MAX)

    # -- devices ----------------------------------------------------------------------------------

    def hgmlDeviceGetCount_v2(self, count: object) -> int:
        """``hgmlDeviceGetCount_v2(unsigned int *deviceCount)``."""
        return self._scalar_out("hgmlDeviceGetCount_v2", (), count)

    def hgmlDeviceGetHandleByIndex_v2(self, index: object, device: object) -> int:
        """``hgmlDeviceGetHandleByIndex_v2(unsigned int, hgmlDevice_t *)``."""
        return self._handle_out("hgmlDeviceGetHandleByIndex_v2", (cabi.scalar(index),), device)

    def hgmlDeviceGetUUID(self, device: object, uuid: object, length: object) -> int:
        """``hgmlDeviceGetUUID(hgmlDevice_t, char *uuid, unsigned int length)``."""
        return self._string_out("hgmlDeviceGetUUID", (device,), uuid, length)

    def hgmlDeviceGetName(self, device: object, name: object, length: object) -> int:
        """``hgmlDeviceGetName(hgmlDevice_t, char *name, unsigned int length)``."""
        return self._string_out("hgmlDeviceGetName", (device,), name, length)

    def hgmlDeviceGetPciInfo_v3(self, device: object, pci: object) -> int:
        """``hgmlDeviceGetPciInfo_v3(hgmlDevice_t, hgmlPciInfo_t *pci)``."""
        return self._struct_out("hgmlDeviceGetPciInfo_v3", (device,), pci, hgmlPciInfo_t)

    def hgmlDeviceGetNumGpuCores(self, device: object, cores: object) -> int:
        """``hgmlDeviceGetNumGpuCores(hgmlDevice_t, unsigned int *numCores)``."""
        return self._scalar_out("hgmlDeviceGetNumGpuCores", (device,), cores)

    def hgmlDeviceGetMemoryInfo(self, device: object, memory: object) -> int:
        """``hgmlDeviceGetMemoryInfo(hgmlDevice_t, hgmlMemory_t *memory)``."""
        return self._struct_out("hgmlDeviceGetMemoryInfo", (device,), memory, c_hgmlMemory_t)

    def hgmlDeviceGetUtilizationRates(self, device: object, util: object) -> int:
        """``hgmlDeviceGetUtilizationRates(hgmlDevice_t, hgmlUtilization_t *)``."""
        name = "hgmlDeviceGetUtilizationRates"
        return self._struct_out(name, (device,), util, c_hgmlUtilization_t)

    def hgmlDeviceGetTemperature(self, device: object, sensor: object, temp: object) -> int:
        """``hgmlDeviceGetTemperature(hgmlDevice_t, sensors, unsigned int *)``."""
        return self._scalar_out("hgmlDeviceGetTemperature", (device, cabi.scalar(sensor)), temp)

    def hgmlDeviceGetPowerUsage(self, device: object, power: object) -> int:
        """``hgmlDeviceGetPowerUsage(hgmlDevice_t, unsigned int *power)`` (mW)."""
        return self._scalar_out("hgmlDeviceGetPowerUsage", (device,), power)

    # -- MIG --------------------------------------------------------------------------------------

    def hgmlDeviceGetMigMode(self, device: object, current: object, pending: object) -> int:
        """``hgmlDeviceGetMigMode(hgmlDevice_t, unsigned int *, unsigned int *)``."""
        symbol = "hgmlDeviceGetMigMode"
        if current is None or pending is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, (device,))
        if status == HGML_SUCCESS:
            modes = cabi.rows(symbol, value, int)
            if len(modes) != 2:
                raise TypeError(f"{symbol}: answer must be [current, pending], got {value!r}")
            cabi.target(current)[0] = _checked(modes[0], 0, _UINT_MAX, symbol)
            cabi.target(pending)[0] = _checked(modes[1], 0, _UINT_MAX, symbol)
        return status

    def hgmlDeviceGetMaxMigDeviceCount(self, device: object, count: object) -> int:
        """``hgmlDeviceGetMaxMigDeviceCount(hgmlDevice_t, unsigned int *count)``."""
        return self._scalar_out("hgmlDeviceGetMaxMigDeviceCount", (device,), count)

    def hgmlDeviceGetMigDeviceHandleByIndex(
        self, device: object, index: object, mig: object
    ) -> int:
        """``hgmlDeviceGetMigDeviceHandleByIndex(hgmlDevice_t, unsigned, hgmlDevice_t *)``.

        An empty slot answers ``NOT_FOUND``.
        """
        symbol = "hgmlDeviceGetMigDeviceHandleByIndex"
        return self._handle_out(symbol, (device, cabi.scalar(index)), mig)

    # -- processes --------------------------------------------------------------------------------

    def hgmlDeviceGetComputeRunningProcesses_v3(
        self, device: object, count: object, infos: object
    ) -> int:
        """``(hgmlDevice_t, unsigned int *infoCount, hgmlProcessInfo_t *infos)``.

        NULL buffer: ``SUCCESS`` with 0 when there are none, else ``INSUFFICIENT_SIZE`` with the
        count. A buffer shorter than the list: ``INSUFFICIENT_SIZE`` with the count, nothing
        written. Otherwise every row, the count set to it.
        """
        symbol = "hgmlDeviceGetComputeRunningProcesses_v3"
        if count is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, (device,))
        if status != HGML_SUCCESS:
            return status
        rows = cabi.rows(symbol, value, c_hgmlProcessInfo_t)
        return _fill(rows, infos, cabi.target(count), empty_probe=HGML_SUCCESS)

    def hgmlDeviceGetProcessUtilization(
        self, device: object, samples: object, count: object, last_seen: object
    ) -> int:
        """``(hgmlDevice_t, hgmlProcessUtilizationSample_t *, unsigned *count, u64 lastSeen)``.

        No sample newer than ``lastSeenTimeStamp`` is ``NOT_FOUND``.
        """
        symbol = "hgmlDeviceGetProcessUtilization"
        if count is None:
            return HGML_ERROR_INVALID_ARGUMENT
        status, value = self._ask(symbol, (device, cabi.scalar(last_seen)))
        if status != HGML_SUCCESS:
            return status
        rows = cabi.rows(symbol, value, c_hgmlProcessUtilizationSample_t)
        return _fill(rows, samples, cabi.target(count), empty_probe=HGML_ERROR_NOT_FOUND)

    def hgmlDeviceGetProcessesUtilizationInfo(self, device: object, info: object) -> int:
        """``(hgmlDevice_t, hgmlProcessesUtilizationInfo_t *)``: the versioned call.

        The header's ``version`` must be ``_v1``; ``processSamplesCount`` is the array's capacity
        going in and the sample count coming out; a NULL ``procUtilArray`` is the probe.
        """
        symbol = "hgmlDeviceGetProcessesUtilizationInfo"
        if info is None:
            return HGML_ERROR_INVALID_ARGUMENT
        header = _object(info)
        if not isinstance(header, c_hgmlProcessesUtilizationInfo_t):
            raise TypeError(f"{symbol}: expected a c_hgmlProcessesUtilizationInfo_t, got {info!r}")
        if header.version != hgmlProcessesUtilizationInfo_v1:
            self.calls.append(symbol)
            return HGML_ERROR_ARGUMENT_VERSION_MISMATCH
        status, value = self._ask(symbol, (device, int(header.lastSeenTimeStamp)))
        if status != HGML_SUCCESS:
            return status
        rows = cabi.rows(symbol, value, c_hgmlProcessUtilizationInfo_v1_t)
        if not rows:
            return HGML_ERROR_NOT_FOUND
        if not header.procUtilArray or header.processSamplesCount < len(rows):
            header.processSamplesCount = len(rows)
            return HGML_ERROR_INSUFFICIENT_SIZE
        for i, row in enumerate(rows):
            header.procUtilArray[i] = row
        header.processSamplesCount = len(rows)
        return HGML_SUCCESS


def _fill(rows: Sequence[Any], buffer: object, count: Any, *, empty_probe: int) -> int:
    """NVML's list convention: probe with NULL, fill a buffer of ``*count`` rows."""
    if buffer is None:
        count[0] = len(rows)
        if not rows:
            return empty_probe
        return HGML_ERROR_INSUFFICIENT_SIZE
    capacity = int(count[0])
    if capacity < len(rows):
        count[0] = len(rows)
        return HGML_ERROR_INSUFFICIENT_SIZE
    target = cabi.target(buffer)
    for i, row in enumerate(rows):
        target[i] = row
    count[0] = len(rows)
    if not rows and empty_probe == HGML_ERROR_NOT_FOUND:
        return HGML_ERROR_NOT_FOUND
    return HGML_SUCCESS
