"""A fake ``libcndev`` at the C ABI, for :class:`~gpustack_vendors.cambricon.cndev.Cndev`.

Replaying at the binding's Python surface would skip the binding's own code that is most likely
to break silently: the version stamping and the ``INSUFFICIENT_SPACE`` loop of the process lists.
So this fake takes the binding's ctypes arguments, writes through its pointers and returns
``cndevRet_t`` codes the way ``cndev.h`` documents, and the real binding runs on top:

- a versioned struct whose ``version`` is not one the header defines (1 … 6) is refused with
  ``CNDEV_ERROR_UNSUPPORTED_API_VERSION`` before anything is asked;
- a process list longer than the caller's ``*count`` writes nothing, sets ``*count`` to the rows
  held at that moment and answers ``CNDEV_ERROR_INSUFFICIENT_SPACE``; the list is asked again on
  every C call, so an ``answer`` that grows between calls reproduces a process starting mid-read;
- ``cndevGetCardNameStringByDevId`` returns a ``const char *`` (``bytes``) or NULL (``None``).

What to answer comes from a callback speaking the binding's Python results, so a recording holds
only the values a backend saw.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from typing import Any

from gpustack_simulator.replay import cabi
from gpustack_vendors.cambricon import cndev
from gpustack_vendors.cambricon.cndev import (
    CNDEV_ERROR_INSUFFICIENT_SPACE,
    CNDEV_ERROR_INVALID_ARGUMENT,
    CNDEV_ERROR_UNSUPPORTED_API_VERSION,
    CNDEV_SUCCESS,
    CNDevError,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(binding_method, args)``: that method's Python result, or raise ``CNDevError``."""

VERSIONS = range(cndev.CNDEV_VERSION_1, cndev.CNDEV_VERSION_6 + 1)
"""The struct versions ``cndev.h`` defines."""

_I32 = (-(1 << 31), (1 << 31) - 1)
_U32 = (0, (1 << 32) - 1)


def _checked(value: object, bounds: tuple[int, int], what: str) -> int:
    """Refuse values the C type cannot hold: ctypes would truncate them without a word."""
    low, high = bounds
    if not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what}: {value!r} does not fit the C type ({low} … {high})")
    return value


class FakeCndevLib:
    """The ``libcndev`` symbols :class:`~gpustack_vendors.cambricon.cndev.Cndev` uses.

    Each C call asks ``answer`` once (refused calls ask nothing). A ``CNDevError`` from ``answer``
    becomes the returned status. Symbols in ``missing`` (and any not defined here) raise
    ``AttributeError`` on lookup, as ``ctypes.CDLL`` does. ``calls`` logs every C call.
    """

    def __init__(self, answer: Answer, *, missing: Collection[str] = ()) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("cndev") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"libcndev.so: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, name: str, args: tuple[object, ...]) -> tuple[int, object]:
        self.calls.append(name)
        try:
            return CNDEV_SUCCESS, self.answer(name, args)
        except CNDevError as exc:
            return exc.value, None

    def _struct(
        self, name: str, pointer: object, cls: type[ctypes.Structure], args: tuple[object, ...]
    ) -> int:
        """One struct out-parameter: check its version (if it has one), ask, write the answer."""
        if pointer is None:
            return CNDEV_ERROR_INVALID_ARGUMENT
        target = cabi.target(pointer)
        versioned = any(spec[0] == "version" for spec in cls._fields_)
        version = int(target[0].version) if versioned else None
        if version is not None and version not in VERSIONS:
            self.calls.append(name)
            return CNDEV_ERROR_UNSUPPORTED_API_VERSION
        status, value = self._ask(name, args if version is None else (*args, version))
        if status != CNDEV_SUCCESS:
            return status
        if not isinstance(value, cls):
            raise TypeError(f"{name}: answer must be a {cls.__name__}, got {value!r}")
        target[0] = value
        if version is not None:
            target[0].version = version  # an input the library leaves as the caller set it
        return status

    # -- library ---------------------------------------------------------------------------------

    def cndevInit(self, reserved: object) -> int:
        """``cndevInit(int reserved)``."""
        status, _ = self._ask("cndevInit", (cabi.scalar(reserved),))
        return status

    def cndevRelease(self) -> int:
        """``cndevRelease(void)``."""
        status, _ = self._ask("cndevRelease", ())
        return status

    def cndevGetDeviceCount(self, card_info: object) -> int:
        """``cndevGetDeviceCount(cndevCardInfo_t *cardNum)``: ``number`` out, ``version`` in."""
        if card_info is None:
            return CNDEV_ERROR_INVALID_ARGUMENT
        target = cabi.target(card_info)
        version = int(target[0].version)
        if version not in VERSIONS:
            self.calls.append("cndevGetDeviceCount")
            return CNDEV_ERROR_UNSUPPORTED_API_VERSION
        status, value = self._ask("cndevGetDeviceCount", (version,))
        if status == CNDEV_SUCCESS:
            target[0].number = _checked(value, _U32, "cndevGetDeviceCount")
        return status

    def cndevGetDeviceHandleByIndex(self, index: object, handle: object) -> int:
        """``cndevGetDeviceHandleByIndex(int index, cndevDevice_t *handle)``."""
        if handle is None:
            return CNDEV_ERROR_INVALID_ARGUMENT
        status, value = self._ask("cndevGetDeviceHandleByIndex", (cabi.scalar(index),))
        if status == CNDEV_SUCCESS:
            cabi.target(handle)[0] = _checked(value, _I32, "cndevGetDeviceHandleByIndex")
        return status

    # -- per device ------------------------------------------------------------------------------

    def cndevGetUUID(self, uuid: object, device: object) -> int:
        """``cndevGetUUID(cndevUUID_t *uuidInfo, cndevDevice_t device)``."""
        return self._struct("cndevGetUUID", uuid, cndev.cndevUUID_t, (cabi.scalar(device),))

    def cndevGetCardNameStringByDevId(self, device: object) -> bytes | None:
        """``const char *cndevGetCardNameStringByDevId(cndevDevice_t device)``; NULL on failure."""
        status, value = self._ask("cndevGetCardNameStringByDevId", (cabi.scalar(device),))
        if status != CNDEV_SUCCESS:
            return None
        if not isinstance(value, str):
            raise TypeError(f"cndevGetCardNameStringByDevId: answer must be a str, got {value!r}")
        return value.encode()

    def cndevGetPCIeInfoV2(self, info: object, device: object) -> int:
        """``cndevGetPCIeInfoV2(cndevPCIeInfoV2_t *, cndevDevice_t)``; no version field."""
        return self._struct(
            "cndevGetPCIeInfoV2", info, cndev.cndevPCIeInfoV2_t, (cabi.scalar(device),)
        )

    def cndevGetMemoryUsageV2(self, info: object, device: object) -> int:
        """``cndevGetMemoryUsageV2(cndevMemoryInfoV2_t *, cndevDevice_t)``; no version field."""
        return self._struct(
            "cndevGetMemoryUsageV2", info, cndev.cndevMemoryInfoV2_t, (cabi.scalar(device),)
        )

    def cndevGetVersionInfo(self, info: object, device: object) -> int:
        """``cndevGetVersionInfo(cndevVersionInfo_t *, cndevDevice_t)``."""
        return self._struct(
            "cndevGetVersionInfo", info, cndev.cndevVersionInfo_t, (cabi.scalar(device),)
        )

    def cndevGetCardHealthState(self, info: object, device: object) -> int:
        """``cndevGetCardHealthState(cndevCardHealthState_t *, cndevDevice_t)``."""
        return self._struct(
            "cndevGetCardHealthState", info, cndev.cndevCardHealthState_t, (cabi.scalar(device),)
        )

    def cndevGetDeviceUtilizationInfo(self, info: object, device: object) -> int:
        """``cndevGetDeviceUtilizationInfo(cndevUtilizationInfo_t *, cndevDevice_t)``."""
        return self._struct(
            "cndevGetDeviceUtilizationInfo",
            info,
            cndev.cndevUtilizationInfo_t,
            (cabi.scalar(device),),
        )

    def cndevGetTemperatureInfo(self, info: object, device: object) -> int:
        """``cndevGetTemperatureInfo(cndevTemperatureInfo_t *, cndevDevice_t)``."""
        return self._struct(
            "cndevGetTemperatureInfo", info, cndev.cndevTemperatureInfo_t, (cabi.scalar(device),)
        )

    def cndevGetDevicePowerInfo(self, info: object, device: object) -> int:
        """``cndevGetDevicePowerInfo(cndevDevicePowerInfo_t *, cndevDevice_t)``; no version."""
        return self._struct(
            "cndevGetDevicePowerInfo", info, cndev.cndevDevicePowerInfo_t, (cabi.scalar(device),)
        )

    # -- process lists ---------------------------------------------------------------------------

    def cndevGetProcessInfo(self, count: object, rows: object, device: object) -> int:
        """``cndevGetProcessInfo(unsigned *infoCount, cndevProcessInfo_t *, cndevDevice_t)``."""
        return self._list("cndevGetProcessInfo", cndev.cndevProcessInfo_t, count, rows, device)

    def cndevGetProcessUtilization(self, count: object, rows: object, device: object) -> int:
        """``cndevGetProcessUtilization(unsigned *, cndevProcessUtilization_t *, device)``."""
        return self._list(
            "cndevGetProcessUtilization", cndev.cndevProcessUtilization_t, count, rows, device
        )

    def _list(
        self,
        name: str,
        row_type: type[ctypes.Structure],
        count: object,
        rows: object,
        device: object,
    ) -> int:
        """CNDev's list convention (see the module docstring)."""
        if count is None or rows is None:
            return CNDEV_ERROR_INVALID_ARGUMENT
        count_ref = cabi.target(count)
        buffer = cabi.target(rows)
        version = int(buffer[0].version)
        if version not in VERSIONS:
            self.calls.append(name)
            return CNDEV_ERROR_UNSUPPORTED_API_VERSION
        status, value = self._ask(name, (cabi.scalar(device), version))
        if status != CNDEV_SUCCESS:
            return status
        listed = cabi.rows(name, value, row_type)
        capacity = int(count_ref[0])
        if len(listed) > capacity:
            count_ref[0] = len(listed)
            return CNDEV_ERROR_INSUFFICIENT_SPACE
        for i, row in enumerate(listed):
            buffer[i] = row
            buffer[i].version = version
        count_ref[0] = len(listed)
        return CNDEV_SUCCESS
