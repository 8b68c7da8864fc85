"""A fake ``libdcmi.so`` at the C ABI, for :class:`~gpustack_vendors.ascend.dcmi.Dcmi`.

Replaying at the binding's Python surface would skip the binding's own buffer handling, and on
DCMI that is where the danger is: ``dcmi_get_device_resource_info``'s process count is
output-only, so the library writes every process it has into the caller's buffer whatever size
it was given, and overwrites the count with the real one. This fake does exactly that, so the
real binding code runs on top of it and its guard tail is exercised.

Writes are confined to the memory the caller's ctypes object actually owns — a fake must not
corrupt the process running it — and every row the real library would have written past that is
recorded in :attr:`FakeDcmiLib.overruns`, so a test can see that a buffer was too small for what
DCMI would have written there.

What to answer comes from a callback speaking the binding's Python results (``answer(method,
args)``): the ``(card, device)`` ints and a method's return value, so a recording needs only
what a backend saw. ``dcmi_get_device_info`` is one C symbol serving several binding methods; it
asks under the method's name (``dcmi_get_vdev_total_resource``, ``dcmi_get_vdev_resource``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Collection
from typing import Any

from gpustack_simulator.replay import cabi
from gpustack_vendors.ascend.dcmi import (
    DCMI_ERROR_INVALID_PARAMETER,
    DCMI_ERROR_NOT_SUPPORT,
    DCMI_MAIN_CMD_VDEV_MNG,
    DCMI_SUCCESS,
    DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE,
    DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE,
    DCMIError,
    dcmi_chip_info_v2,
    dcmi_die_id,
    dcmi_get_memory_info_stru,
    dcmi_hbm_info,
    dcmi_pcie_info_all,
    dcmi_proc_mem_info,
    dcmi_soc_total_resource,
    dcmi_vdev_query_stru,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(binding_method, args)``: that method's Python result, or raise ``DCMIError``."""

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_UINT_MAX = (1 << 32) - 1


def memory_of(arg: object) -> tuple[int, int]:
    """``(address, size)`` of the memory a pointer argument designates, as far as ctypes knows.

    The binding passes arrays, ``ctypes.byref`` objects and pointers; a plain address carries no
    size, so it is refused rather than written through blindly.
    """
    obj = getattr(arg, "_obj", None)
    if obj is not None:
        return ctypes.addressof(obj), ctypes.sizeof(obj)
    if isinstance(arg, ctypes._Pointer):
        target = arg.contents
        return ctypes.addressof(target), ctypes.sizeof(target)
    if isinstance(arg, ctypes.Array | ctypes.Structure):
        return ctypes.addressof(arg), ctypes.sizeof(arg)
    raise TypeError(f"cannot tell the size of the buffer behind {arg!r}")


def _checked(value: object, low: int, high: int, what: str) -> int:
    """Refuse values the C type cannot hold: ctypes would truncate them without a word."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what}: {value!r} does not fit the C type ({low} … {high})")
    return value


class FakeDcmiLib:
    """The ``libdcmi`` symbols :class:`Dcmi` uses, answered by ``answer``.

    Each C call asks ``answer`` once; a ``DCMIError`` from it becomes the returned code. Symbols
    in ``missing`` (and any symbol not defined here) raise ``AttributeError`` on lookup, as
    ``ctypes.CDLL`` does. ``calls`` logs every C call by symbol; ``overruns`` logs
    ``(symbol, rows the caller had room for, rows the library wrote)`` for every write the real
    library would have made past the caller's buffer.
    """

    def __init__(self, answer: Answer, *, missing: Collection[str] = ()) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.calls: list[str] = []
        self.overruns: list[tuple[str, int, int]] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("dcmi_") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"libdcmi.so: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, symbol: str, method: str, args: tuple[object, ...]) -> tuple[int, object]:
        self.calls.append(symbol)
        try:
            return DCMI_SUCCESS, self.answer(method, args)
        except DCMIError as exc:
            return exc.value, None

    def _scalar_out(
        self, name: str, args: tuple[object, ...], out: object, low: int, high: int
    ) -> int:
        if out is None:
            return DCMI_ERROR_INVALID_PARAMETER
        status, value = self._ask(name, name, args)
        if status == DCMI_SUCCESS:
            cabi.target(out)[0] = _checked(value, low, high, name)
        return status

    def _struct_out(
        self, name: str, args: tuple[object, ...], out: object, struct: type[ctypes.Structure]
    ) -> int:
        if out is None:
            return DCMI_ERROR_INVALID_PARAMETER
        status, value = self._ask(name, name, args)
        if status == DCMI_SUCCESS:
            if not isinstance(value, struct):
                raise TypeError(f"{name}: answer must be a {struct.__name__}, got {value!r}")
            cabi.target(out)[0] = value
        return status

    # -- library and enumeration ------------------------------------------------------------------

    def dcmi_init(self) -> int:
        """``dcmi_init(void)``."""
        status, _ = self._ask("dcmi_init", "dcmi_init", ())
        return status

    def dcmi_get_driver_version(self, driver_ver: object, length: object) -> int:
        """``dcmi_get_driver_version(char *driver_ver, unsigned int len)``."""
        name = "dcmi_get_driver_version"
        if driver_ver is None:
            return DCMI_ERROR_INVALID_PARAMETER
        status, value = self._ask(name, name, ())
        if status != DCMI_SUCCESS:
            return status
        if not isinstance(value, str):
            raise TypeError(f"{name}: answer must be a str, got {value!r}")
        encoded = value.encode() + b"\0"
        address, size = memory_of(driver_ver)
        if len(encoded) > min(cabi.scalar(length), size):
            return DCMI_ERROR_INVALID_PARAMETER
        ctypes.memmove(address, encoded, len(encoded))
        return DCMI_SUCCESS

    def dcmi_get_card_list(self, card_num: object, card_list: object, list_len: object) -> int:
        """``dcmi_get_card_list(int *card_num, int *card_list, int list_len)``.

        Writes at most ``list_len`` ids and reports the full count in ``card_num``.
        """
        name = "dcmi_get_card_list"
        if card_num is None or card_list is None:
            return DCMI_ERROR_INVALID_PARAMETER
        status, value = self._ask(name, name, ())
        if status != DCMI_SUCCESS:
            return status
        cards = [_checked(card, 0, _INT_MAX, name) for card in cabi.rows(name, value, int)]
        address, size = memory_of(card_list)
        room = min(cabi.scalar(list_len), size // ctypes.sizeof(ctypes.c_int))
        for i, card in enumerate(cards[:room]):
            ctypes.c_int.from_address(address + i * ctypes.sizeof(ctypes.c_int)).value = card
        cabi.target(card_num)[0] = len(cards)
        return DCMI_SUCCESS

    def dcmi_get_device_num_in_card(self, card_id: object, device_num: object) -> int:
        """``dcmi_get_device_num_in_card(int card_id, int *device_num)``."""
        args = (cabi.scalar(card_id),)
        return self._scalar_out("dcmi_get_device_num_in_card", args, device_num, 0, _INT_MAX)

    def dcmi_get_device_type(self, card_id: object, device_id: object, unit: object) -> int:
        """``dcmi_get_device_type(int card_id, int device_id, enum dcmi_unit_type *type)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._scalar_out("dcmi_get_device_type", args, unit, 0, _UINT_MAX)

    def dcmi_get_device_logic_id(self, logic_id: object, card_id: object, device_id: object) -> int:
        """``dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._scalar_out("dcmi_get_device_logic_id", args, logic_id, 0, _INT_MAX)

    # -- identity ---------------------------------------------------------------------------------

    def dcmi_get_device_die_v2(
        self, card_id: object, device_id: object, die_type: object, die: object
    ) -> int:
        """``dcmi_get_device_die_v2(int, int, enum dcmi_die_type, struct dcmi_die_id *)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id), cabi.scalar(die_type))
        return self._struct_out("dcmi_get_device_die_v2", args, die, dcmi_die_id)

    def dcmi_get_device_die(self, card_id: object, device_id: object, die: object) -> int:
        """``dcmi_get_device_die(int card_id, int device_id, struct dcmi_die_id *die_id)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._struct_out("dcmi_get_device_die", args, die, dcmi_die_id)

    def dcmi_get_device_chip_info_v2(self, card_id: object, device_id: object, info: object) -> int:
        """``dcmi_get_device_chip_info_v2(int, int, struct dcmi_chip_info_v2 *)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._struct_out("dcmi_get_device_chip_info_v2", args, info, dcmi_chip_info_v2)

    def dcmi_get_device_pcie_info_v2(self, card_id: object, device_id: object, info: object) -> int:
        """``dcmi_get_device_pcie_info_v2(int, int, struct dcmi_pcie_info_all *)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._struct_out("dcmi_get_device_pcie_info_v2", args, info, dcmi_pcie_info_all)

    def dcmi_get_device_health(self, card_id: object, device_id: object, health: object) -> int:
        """``dcmi_get_device_health(int card_id, int device_id, unsigned int *health)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._scalar_out("dcmi_get_device_health", args, health, 0, _UINT_MAX)

    # -- figures ----------------------------------------------------------------------------------

    def dcmi_get_device_hbm_info(self, card_id: object, device_id: object, info: object) -> int:
        """``dcmi_get_device_hbm_info(int, int, struct dcmi_hbm_info *)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._struct_out("dcmi_get_device_hbm_info", args, info, dcmi_hbm_info)

    def dcmi_get_device_memory_info_v3(
        self, card_id: object, device_id: object, info: object
    ) -> int:
        """``dcmi_get_device_memory_info_v3(int, int, struct dcmi_get_memory_info_stru *)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        name = "dcmi_get_device_memory_info_v3"
        return self._struct_out(name, args, info, dcmi_get_memory_info_stru)

    def dcmi_get_device_utilization_rate(
        self, card_id: object, device_id: object, input_type: object, rate: object
    ) -> int:
        """``dcmi_get_device_utilization_rate(int, int, int input_type, unsigned int *)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id), cabi.scalar(input_type))
        return self._scalar_out("dcmi_get_device_utilization_rate", args, rate, 0, _UINT_MAX)

    def dcmi_get_device_temperature(self, card_id: object, device_id: object, temp: object) -> int:
        """``dcmi_get_device_temperature(int card_id, int device_id, int *temperature)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._scalar_out("dcmi_get_device_temperature", args, temp, _INT_MIN, _INT_MAX)

    def dcmi_get_device_power_info(self, card_id: object, device_id: object, power: object) -> int:
        """``dcmi_get_device_power_info(int card_id, int device_id, int *power)``."""
        args = (cabi.scalar(card_id), cabi.scalar(device_id))
        return self._scalar_out("dcmi_get_device_power_info", args, power, _INT_MIN, _INT_MAX)

    # -- processes --------------------------------------------------------------------------------

    def dcmi_get_device_resource_info(
        self, card_id: object, device_id: object, proc_info: object, proc_num: object
    ) -> int:
        """``dcmi_get_device_resource_info(int, int, struct dcmi_proc_mem_info *, int *)``.

        As measured on hardware: the incoming ``*proc_num`` is ignored, every row is written
        from ``proc_info[0]`` on, and ``*proc_num`` is overwritten with the real count.
        """
        name = "dcmi_get_device_resource_info"
        if proc_info is None or proc_num is None:
            return DCMI_ERROR_INVALID_PARAMETER
        status, value = self._ask(name, name, (cabi.scalar(card_id), cabi.scalar(device_id)))
        if status != DCMI_SUCCESS:
            return status
        rows = cabi.rows(name, value, dcmi_proc_mem_info)
        address, size = memory_of(proc_info)
        width = ctypes.sizeof(dcmi_proc_mem_info)
        room = size // width
        for i, row in enumerate(rows[:room]):
            ctypes.memmove(address + i * width, ctypes.addressof(row), width)
        if len(rows) > room:
            self.overruns.append((name, room, len(rows)))
        cabi.target(proc_num)[0] = len(rows)
        return DCMI_SUCCESS

    # -- vNPUs ------------------------------------------------------------------------------------

    def dcmi_get_device_info(
        self,
        card_id: object,
        device_id: object,
        main_cmd: object,
        sub_cmd: object,
        buf: object,
        size: object,
    ) -> int:
        """``dcmi_get_device_info(card, device, main_cmd, sub_cmd, void *buf, unsigned *size)``.

        Only the vNPU sub-commands are answered; anything else is ``NOT_SUPPORT``. ``*size`` is
        in/out: a buffer declared smaller than the answer is refused with ``INVALID_PARAMETER``
        before anything is written; on success it holds what was written.
        """
        symbol = "dcmi_get_device_info"
        if buf is None or size is None:
            return DCMI_ERROR_INVALID_PARAMETER
        card, device = cabi.scalar(card_id), cabi.scalar(device_id)
        main, sub = cabi.scalar(main_cmd), cabi.scalar(sub_cmd)
        address, physical = memory_of(buf)
        declared = min(int(cabi.target(size)[0]), physical)
        expected: type[ctypes.Structure]
        args: tuple[int, ...] = ()
        if main == DCMI_MAIN_CMD_VDEV_MNG and sub == DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE:
            method, expected = "dcmi_get_vdev_total_resource", dcmi_soc_total_resource
        elif main == DCMI_MAIN_CMD_VDEV_MNG and sub == DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE:
            method, expected = "dcmi_get_vdev_resource", dcmi_vdev_query_stru
            if declared < ctypes.sizeof(ctypes.c_uint):
                return DCMI_ERROR_INVALID_PARAMETER
            args = (int(ctypes.c_uint.from_address(address).value),)  # vdev_id goes in first
        else:
            self.calls.append(symbol)
            return DCMI_ERROR_NOT_SUPPORT
        if declared < ctypes.sizeof(expected):
            self.calls.append(symbol)
            return DCMI_ERROR_INVALID_PARAMETER
        status, value = self._ask(symbol, method, (card, device, *args))
        if status != DCMI_SUCCESS:
            return status
        if not isinstance(value, expected):
            raise TypeError(f"{method}: answer must be a {expected.__name__}, got {value!r}")
        ctypes.memmove(address, ctypes.addressof(value), ctypes.sizeof(expected))
        cabi.target(size)[0] = ctypes.sizeof(expected)
        return DCMI_SUCCESS
