"""A fake ``libmxsml`` at the C ABI, for :class:`~gpustack_vendors.metax.mxsml.Mxsml`.

The real binding runs on top, so its size handling meets MXSML's conventions, hazards included:

- ``mxSmlGetDeviceCount`` returns the count itself (no status).
- ``mxSmlGetBoardPowerInfo``: a buffer smaller than the rail list (a size-0 probe included) answers
  ``INSUFFICIENT_SIZE`` with ``*size`` set to the rails held; a board with no rails answers the
  probe ``SUCCESS`` with size 0 (the answer ``pymxsml`` raises as ``MXSMLError(0)``).
- ``mxSmlGetSingleGpuProcess_v3``: a **size-0** call answers ``SUCCESS`` with ``*count`` set to the
  list's length and writes no row; a buffer smaller than the list is filled to capacity and, with
  ``truncation="silent"`` (the default), answered ``SUCCESS`` with ``*count`` = rows written — the
  silent truncation a reader must guard against. ``truncation="insufficient"`` answers
  ``INSUFFICIENT_SIZE`` with ``*count`` set to the list's length instead.
- Strings are written NUL-terminated into the caller's buffer; one that does not fit answers
  ``INSUFFICIENT_SIZE``.

Every C call asks ``answer`` once, so an answer that changes between calls reproduces a list
growing between two reads.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from typing import Any, Literal

from gpustack_simulator.replay import cabi
from gpustack_vendors.metax import mxsml
from gpustack_vendors.metax.mxsml import (
    MXSML_ERROR_INSUFFICIENT_SIZE,
    MXSML_ERROR_INVALID_INPUT,
    MXSML_SUCCESS,
    MXSMLError,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(binding_method, args)``: that method's Python result, or raise ``MXSMLError``."""

Truncation = Literal["silent", "insufficient"]

_I32 = (-(1 << 31), (1 << 31) - 1)


class FakeMxsmlLib:
    """The ``libmxsml`` symbols :class:`~gpustack_vendors.metax.mxsml.Mxsml` uses.

    An ``MXSMLError`` from ``answer`` becomes the returned status. Symbols in ``missing`` (and any
    not defined here) raise ``AttributeError`` on lookup, as ``ctypes.CDLL`` does. ``calls`` logs
    every C call; ``capacities`` logs the ``*count`` each process-list call was given.
    """

    def __init__(
        self,
        answer: Answer,
        *,
        missing: Collection[str] = (),
        truncation: Truncation = "silent",
    ) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.truncation = truncation
        self.calls: list[str] = []
        self.capacities: list[int] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("mxSml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"libmxsml.so: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, name: str, args: tuple[object, ...]) -> tuple[int, object]:
        self.calls.append(name)
        try:
            return MXSML_SUCCESS, self.answer(name, args)
        except MXSMLError as exc:
            return exc.value, None

    def _int_out(self, name: str, args: tuple[object, ...], out: object) -> int:
        if out is None:
            return MXSML_ERROR_INVALID_INPUT
        status, value = self._ask(name, args)
        if status == MXSML_SUCCESS:
            if not isinstance(value, int) or not _I32[0] <= value <= _I32[1]:
                raise ValueError(f"{name}: {value!r} does not fit a C int")
            cabi.target(out)[0] = value
        return status

    def _text_out(self, name: str, args: tuple[object, ...], buffer: object, size: object) -> int:
        if buffer is None or size is None:
            return MXSML_ERROR_INVALID_INPUT
        status, value = self._ask(name, args)
        if status != MXSML_SUCCESS:
            return status
        if not isinstance(value, str):
            raise TypeError(f"{name}: answer must be a str, got {value!r}")
        encoded = value.encode()
        size_ref = cabi.target(size)
        if len(encoded) + 1 > int(size_ref[0]):
            size_ref[0] = len(encoded) + 1
            return MXSML_ERROR_INSUFFICIENT_SIZE
        ctypes.memmove(buffer, encoded + b"\0", len(encoded) + 1)  # type: ignore[arg-type]
        size_ref[0] = len(encoded)
        return MXSML_SUCCESS

    def _struct_out(
        self, name: str, args: tuple[object, ...], out: object, cls: type[ctypes.Structure]
    ) -> int:
        if out is None:
            return MXSML_ERROR_INVALID_INPUT
        status, value = self._ask(name, args)
        if status == MXSML_SUCCESS:
            if not isinstance(value, cls):
                raise TypeError(f"{name}: answer must be a {cls.__name__}, got {value!r}")
            cabi.target(out)[0] = value
        return status

    # -- scalars, strings, structs -----------------------------------------------------------------

    def mxSmlInit(self) -> int:
        """``mxSmlInit(void)``."""
        status, _ = self._ask("mxSmlInit", ())
        return status

    def mxSmlGetDeviceCount(self) -> int:
        """The count itself (an ``unsigned int``), never a status; 0 when the answer fails."""
        status, value = self._ask("mxSmlGetDeviceCount", ())
        if status != MXSML_SUCCESS:
            return 0
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"mxSmlGetDeviceCount: {value!r} is not a count")
        return value

    def mxSmlGetMacaVersion(self, buffer: object, size: object) -> int:
        """``mxSmlGetMacaVersion(char *version, unsigned int *size)``."""
        return self._text_out("mxSmlGetMacaVersion", (), buffer, size)

    def mxSmlGetDeviceVersion(
        self, device: object, unit: object, buffer: object, size: object
    ) -> int:
        """``mxSmlGetDeviceVersion(unsigned dev, mxSmlVersionUnit_t, char *, unsigned *)``."""
        return self._text_out(
            "mxSmlGetDeviceVersion", (cabi.scalar(device), cabi.scalar(unit)), buffer, size
        )

    def mxSmlGetDeviceInfo(self, device: object, info: object) -> int:
        """``mxSmlGetDeviceInfo(unsigned deviceId, mxSmlDeviceInfo_t *)``."""
        return self._struct_out(
            "mxSmlGetDeviceInfo", (cabi.scalar(device),), info, mxsml.mxSmlDeviceInfo_t
        )

    def mxSmlGetMemoryInfo(self, device: object, info: object) -> int:
        """``mxSmlGetMemoryInfo(unsigned deviceId, mxSmlMemoryInfo_t *)``, KiB."""
        return self._struct_out(
            "mxSmlGetMemoryInfo", (cabi.scalar(device),), info, mxsml.mxSmlMemoryInfo_t
        )

    def mxSmlGetDeviceIpUsage(self, device: object, ip: object, usage: object) -> int:
        """``mxSmlGetDeviceIpUsage(unsigned deviceId, mxSmlUsageIp_t, int *usage)``."""
        return self._int_out("mxSmlGetDeviceIpUsage", (cabi.scalar(device), cabi.scalar(ip)), usage)

    def mxSmlGetTemperatureInfo(self, device: object, sensor: object, value: object) -> int:
        """``mxSmlGetTemperatureInfo(unsigned deviceId, mxSmlTemperatureSensors_t, int *)``."""
        return self._int_out(
            "mxSmlGetTemperatureInfo", (cabi.scalar(device), cabi.scalar(sensor)), value
        )

    # -- lists -----------------------------------------------------------------------------------

    def mxSmlGetBoardPowerInfo(self, device: object, size: object, rails: object) -> int:
        """``mxSmlGetBoardPowerInfo(unsigned, unsigned *size, mxSmlBoardWayElectricInfo_t *)``."""
        name = "mxSmlGetBoardPowerInfo"
        if size is None or rails is None:
            return MXSML_ERROR_INVALID_INPUT
        status, value = self._ask(name, (cabi.scalar(device),))
        if status != MXSML_SUCCESS:
            return status
        listed = cabi.rows(name, value, mxsml.mxSmlBoardWayElectricInfo_t)
        size_ref = cabi.target(size)
        if int(size_ref[0]) < len(listed):
            size_ref[0] = len(listed)
            return MXSML_ERROR_INSUFFICIENT_SIZE
        target = cabi.target(rails)
        for i, rail in enumerate(listed):
            target[i] = rail
        size_ref[0] = len(listed)
        return MXSML_SUCCESS

    def mxSmlGetSingleGpuProcess_v3(self, device: object, count: object, rows: object) -> int:
        """``mxSmlGetSingleGpuProcess_v3(unsigned, unsigned *count, mxSmlProcessInfo_v3_t *)``."""
        name = "mxSmlGetSingleGpuProcess_v3"
        if count is None or rows is None:
            return MXSML_ERROR_INVALID_INPUT
        count_ref = cabi.target(count)
        capacity = int(count_ref[0])
        self.capacities.append(capacity)
        status, value = self._ask(name, (cabi.scalar(device),))
        if status != MXSML_SUCCESS:
            return status
        listed = cabi.rows(name, value, mxsml.mxSmlProcessInfo_v3_t)
        if capacity == 0:
            count_ref[0] = len(listed)  # the count, and no row: SUCCESS does not mean "complete"
            return MXSML_SUCCESS
        target = cabi.target(rows)
        for i, row in enumerate(listed[:capacity]):
            target[i] = row
        if len(listed) > capacity and self.truncation == "insufficient":
            count_ref[0] = len(listed)
            return MXSML_ERROR_INSUFFICIENT_SIZE
        count_ref[0] = min(len(listed), capacity)
        return MXSML_SUCCESS
