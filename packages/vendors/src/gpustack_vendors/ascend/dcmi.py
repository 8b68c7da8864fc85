# The library's C names, spelled as its header spells them (a binding, not our API):
# ruff: noqa: N801
"""A ctypes binding for Huawei Ascend DCMI (``libdcmi.so``), declaring only what the backend calls.

gpustack's ``pydcmi`` passes a single ``dcmi_proc_mem_info`` to ``dcmi_get_device_resource_info``
(room for one row) while the library writes every process it finds, so it is not usable for
per-process figures; hence this binding. Facts are taken from ``dcmi_interface_api.h`` (driver
25.x, as vendored by gpustack-operator and MindCluster) and Huawei's DCMI API reference:

- Every function returns ``int``: ``0`` is success, failures are negative (``-8001`` …
  ``-8255``). Devices are addressed by a ``(card_id, device_id)`` pair; there are no handles.
- Memory figures (``dcmi_hbm_info``, ``dcmi_get_memory_info_stru``) are in MB, which DCMI means
  as MiB (a 64 GB 910B reports 65536); power is in 0.1 W; temperature in °C.
- ``dcmi_get_device_resource_info(card, device, proc_info[], &proc_num)`` reports each process's
  memory **in bytes**. ``proc_num`` is **output-only**: the library ignores what the caller
  passes, writes every process it has into ``proc_info`` and overwrites ``proc_num`` with the
  real count, measured to write past a short buffer. The reference documents "up to 32"
  processes, so :meth:`Dcmi.dcmi_get_device_resource_info` sizes its buffer for that maximum plus
  a guard tail it owns, and reports a count above the maximum — or any write into the guard — as
  a truncated list (:data:`DCMI_ERROR_LIST_TRUNCATED`) rather than as the rows that fitted.

Importing this module loads nothing: the library is opened only by :func:`load_library`, so
hosts without Ascend drivers can import the backend, and the replay simulator can hand
:class:`Dcmi` a fake library with the same C ABI instead.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, Final

from gpustack_vendors.bindings.calls import CLibrary, StatusError
from gpustack_vendors.bindings.loader import LibraryNotFound, open_first, returning, with_override

# -- return codes ----------------------------------------------------------------------------------

DCMI_SUCCESS: Final = 0
DCMI_ERROR_INVALID_PARAMETER: Final = -8001
DCMI_ERROR_OPER_NOT_PERMITTED: Final = -8002
DCMI_ERROR_MEM_OPERATE_FAIL: Final = -8003
DCMI_ERROR_SECURE_FUN_FAIL: Final = -8004
DCMI_ERROR_INNER_ERR: Final = -8005
DCMI_ERROR_TIME_OUT: Final = -8006
DCMI_ERROR_INVALID_DEVICE_ID: Final = -8007
DCMI_ERROR_DEVICE_NOT_EXIST: Final = -8008
DCMI_ERROR_IOCTL_FAIL: Final = -8009
DCMI_ERROR_SEND_MSG_FAIL: Final = -8010
DCMI_ERROR_RECV_MSG_FAIL: Final = -8011
DCMI_ERROR_NOT_REDAY: Final = -8012
"""Spelled as the header spells it."""
DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER: Final = -8013
DCMI_ERROR_RESET_FAIL: Final = -8015
DCMI_ERROR_ABORT_OPERATE: Final = -8016
DCMI_ERROR_IS_UPGRADING: Final = -8017
DCMI_ERROR_RESOURCE_OCCUPIED: Final = -8020
DCMI_ERROR_CONFIG_INFO_NOT_EXIST: Final = -8023
DCMI_ERROR_NOT_SUPPORT: Final = -8255

# Binding-made codes. The first three are gpustack ``pydcmi``'s, kept so logs read the same; the
# library has no code for either of the last two, which only this binding can detect.
DCMI_ERROR_UNINITIALIZED: Final = -99997
DCMI_ERROR_FUNCTION_NOT_FOUND: Final = -99998
"""Raised for a symbol the loaded library lacks (see :class:`Dcmi`)."""
DCMI_ERROR_LIBRARY_NOT_FOUND: Final = -99999
DCMI_ERROR_LIST_TRUNCATED: Final = -99996
"""The library reported more processes than the documented maximum, or wrote past its count."""
DCMI_ERROR_UNEXPECTED_COUNT: Final = -99995
"""The library reported a negative process count."""

_STATUS_TEXT: Final[dict[int, tuple[str, str]]] = {
    DCMI_SUCCESS: ("DCMI_SUCCESS", "success"),
    DCMI_ERROR_INVALID_PARAMETER: ("DCMI_ERROR_INVALID_PARAMETER", "invalid parameter"),
    DCMI_ERROR_OPER_NOT_PERMITTED: ("DCMI_ERROR_OPER_NOT_PERMITTED", "operation not permitted"),
    DCMI_ERROR_MEM_OPERATE_FAIL: ("DCMI_ERROR_MEM_OPERATE_FAIL", "memory operation failed"),
    DCMI_ERROR_SECURE_FUN_FAIL: ("DCMI_ERROR_SECURE_FUN_FAIL", "secure function failed"),
    DCMI_ERROR_INNER_ERR: ("DCMI_ERROR_INNER_ERR", "internal error"),
    DCMI_ERROR_TIME_OUT: ("DCMI_ERROR_TIME_OUT", "timed out"),
    DCMI_ERROR_INVALID_DEVICE_ID: ("DCMI_ERROR_INVALID_DEVICE_ID", "invalid device id"),
    DCMI_ERROR_DEVICE_NOT_EXIST: ("DCMI_ERROR_DEVICE_NOT_EXIST", "device does not exist"),
    DCMI_ERROR_IOCTL_FAIL: ("DCMI_ERROR_IOCTL_FAIL", "ioctl failed"),
    DCMI_ERROR_SEND_MSG_FAIL: ("DCMI_ERROR_SEND_MSG_FAIL", "sending a message failed"),
    DCMI_ERROR_RECV_MSG_FAIL: ("DCMI_ERROR_RECV_MSG_FAIL", "receiving a message failed"),
    DCMI_ERROR_NOT_REDAY: ("DCMI_ERROR_NOT_REDAY", "device not ready"),
    DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER: (
        "DCMI_ERROR_NOT_SUPPORT_IN_CONTAINER",
        "not supported in a container",
    ),
    DCMI_ERROR_RESET_FAIL: ("DCMI_ERROR_RESET_FAIL", "reset failed"),
    DCMI_ERROR_ABORT_OPERATE: ("DCMI_ERROR_ABORT_OPERATE", "operation aborted"),
    DCMI_ERROR_IS_UPGRADING: ("DCMI_ERROR_IS_UPGRADING", "device is upgrading"),
    DCMI_ERROR_RESOURCE_OCCUPIED: ("DCMI_ERROR_RESOURCE_OCCUPIED", "resource occupied"),
    DCMI_ERROR_CONFIG_INFO_NOT_EXIST: ("DCMI_ERROR_CONFIG_INFO_NOT_EXIST", "no such configuration"),
    DCMI_ERROR_NOT_SUPPORT: ("DCMI_ERROR_NOT_SUPPORT", "not supported"),
    DCMI_ERROR_UNINITIALIZED: ("DCMI_ERROR_UNINITIALIZED", "library not initialized"),
    DCMI_ERROR_FUNCTION_NOT_FOUND: ("DCMI_ERROR_FUNCTION_NOT_FOUND", "symbol not in the library"),
    DCMI_ERROR_LIBRARY_NOT_FOUND: ("DCMI_ERROR_LIBRARY_NOT_FOUND", "library not found"),
    DCMI_ERROR_LIST_TRUNCATED: (
        "DCMI_ERROR_LIST_TRUNCATED",
        "more processes than the documented maximum: the list would be incomplete",
    ),
    DCMI_ERROR_UNEXPECTED_COUNT: ("DCMI_ERROR_UNEXPECTED_COUNT", "negative process count"),
}

# -- enums and limits ------------------------------------------------------------------------------

DCMI_UNIT_TYPE_NPU: Final = 0
DCMI_UNIT_TYPE_MCU: Final = 1
DCMI_UNIT_TYPE_CPU: Final = 2
DCMI_DIE_TYPE_NDIE: Final = 0
DCMI_DIE_TYPE_VDIE: Final = 1
DCMI_INPUT_TYPE_AICORE: Final = 2
DCMI_MAIN_CMD_VDEV_MNG: Final = 52
DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE: Final = 0
DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE: Final = 1

DCMI_HEALTH_OK: Final = 0
DCMI_HEALTH_MINOR: Final = 1
"""``dcmi_get_device_health``: 0 normal, 1 minor alarm, 2 major, 3 critical."""

MAX_PROC_NUM: Final = 32
""""Number of processes, up to 32" (DCMI API reference, ``dcmi_get_device_resource_info``)."""
GUARD_ROWS: Final = 32
"""Rows past :data:`MAX_PROC_NUM` the binding owns, so an overrun lands in its own memory."""
CARD_LIST_LEN: Final = 64
"""``dcmi_get_card_list`` capacity offered first (``pydcmi`` offers 64)."""

MAX_CHIP_NAME_LEN: Final = 32
DIE_ID_COUNT: Final = 5
DCMI_VDEV_RES_NAME_LEN: Final = 16
DCMI_VDEV_SIZE: Final = 20
DCMI_VDEV_FOR_RESERVE: Final = 32
DCMI_SOC_SPLIT_MAX: Final = 32
DRIVER_VERSION_LEN: Final = 64

# -- structs ---------------------------------------------------------------------------------------
# Field order and widths are the ABI. ``unsigned char name[N]`` is declared ``c_char * N`` (the
# same bytes) so names read as text. Bare annotations type the fields for mypy without shadowing
# the descriptors ctypes builds from ``_fields_``.


class dcmi_chip_info_v2(ctypes.Structure):
    """``dcmi_get_device_chip_info_v2``: chip type/name/version, AI core count, NPU name."""

    _fields_ = (
        ("chip_type", ctypes.c_char * MAX_CHIP_NAME_LEN),
        ("chip_name", ctypes.c_char * MAX_CHIP_NAME_LEN),
        ("chip_ver", ctypes.c_char * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", ctypes.c_uint),
        ("npu_name", ctypes.c_char * MAX_CHIP_NAME_LEN),
    )
    chip_type: bytes
    chip_name: bytes
    chip_ver: bytes
    aicore_cnt: int
    npu_name: bytes


class dcmi_pcie_info_all(ctypes.Structure):
    """``dcmi_get_device_pcie_info_v2``: IDs and the bus address."""

    _fields_ = (
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_char * 32),
    )
    venderid: int
    subvenderid: int
    deviceid: int
    subdeviceid: int
    domain: int
    bdf_busid: int
    bdf_deviceid: int
    bdf_funcid: int
    reserve: bytes


class dcmi_die_id(ctypes.Structure):
    """``dcmi_get_device_die(_v2)``: five words identifying the die."""

    _fields_ = (("soc_die", ctypes.c_uint * DIE_ID_COUNT),)
    soc_die: Any


class dcmi_hbm_info(ctypes.Structure):
    """``dcmi_get_device_hbm_info``: sizes in MB (MiB), temperature °C, bandwidth %."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),
    )
    memory_size: int
    freq: int
    memory_usage: int
    temp: int
    bandwith_util_rate: int


class dcmi_get_memory_info_stru(ctypes.Structure):
    """``dcmi_get_device_memory_info_v3``: DDR parts (310P) answer here; sizes in MB (MiB)."""

    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),
        ("memory_available", ctypes.c_ulonglong),
        ("freq", ctypes.c_uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", ctypes.c_uint),
        ("reserve", ctypes.c_char * 60),
    )
    memory_size: int
    memory_available: int
    freq: int
    hugepagesize: int
    hugepages_total: int
    hugepages_free: int
    utiliza: int
    reserve: bytes


class dcmi_proc_mem_info(ctypes.Structure):
    """One process: its host PID and the device memory it holds, in bytes."""

    _fields_ = (
        ("proc_id", ctypes.c_int),
        ("proc_mem_usage", ctypes.c_ulong),
    )
    proc_id: int
    proc_mem_usage: int


class dcmi_base_resource(ctypes.Structure):
    """The base block of a vNPU resource description."""

    _fields_ = (
        ("token", ctypes.c_ulonglong),
        ("token_max", ctypes.c_ulonglong),
        ("task_timeout", ctypes.c_ulonglong),
        ("vfg_id", ctypes.c_uint),
        ("vip_mode", ctypes.c_ubyte),
        ("reserved", ctypes.c_char * (DCMI_VDEV_FOR_RESERVE - 1)),
    )
    token: int
    token_max: int
    task_timeout: int
    vfg_id: int
    vip_mode: int
    reserved: bytes


class dcmi_computing_resource(ctypes.Structure):
    """The computing block: AI cores (``aic``, a float), memory in MB, per-vNPU figures."""

    _fields_ = (
        ("aic", ctypes.c_float),
        ("aiv", ctypes.c_float),
        ("dsa", ctypes.c_ushort),
        ("rtsq", ctypes.c_ushort),
        ("acsq", ctypes.c_ushort),
        ("cdqm", ctypes.c_ushort),
        ("c_core", ctypes.c_ushort),
        ("ffts", ctypes.c_ushort),
        ("sdma", ctypes.c_ushort),
        ("pcie_dma", ctypes.c_ushort),
        ("memory_size", ctypes.c_ulonglong),
        ("event_id", ctypes.c_uint),
        ("notify_id", ctypes.c_uint),
        ("stream_id", ctypes.c_uint),
        ("model_id", ctypes.c_uint),
        ("topic_schedule_aicpu", ctypes.c_ushort),
        ("host_ctrl_cpu", ctypes.c_ushort),
        ("host_aicpu", ctypes.c_ushort),
        ("device_aicpu", ctypes.c_ushort),
        ("topic_ctrl_cpu_slot", ctypes.c_ushort),
        ("vdev_aicore_utilization", ctypes.c_uint),
        ("vdev_memory_total", ctypes.c_ulonglong),
        ("vdev_memory_free", ctypes.c_ulonglong),
        ("reserved", ctypes.c_char * (DCMI_VDEV_FOR_RESERVE - DCMI_VDEV_SIZE)),
    )
    aic: float
    memory_size: int
    vdev_aicore_utilization: int
    vdev_memory_total: int
    vdev_memory_free: int


class dcmi_media_resource(ctypes.Structure):
    """The media block of a vNPU resource description."""

    _fields_ = (
        ("jpegd", ctypes.c_float),
        ("jpege", ctypes.c_float),
        ("vpc", ctypes.c_float),
        ("vdec", ctypes.c_float),
        ("pngd", ctypes.c_float),
        ("venc", ctypes.c_float),
        ("reserved", ctypes.c_char * DCMI_VDEV_FOR_RESERVE),
    )


class dcmi_vdev_query_info(ctypes.Structure):
    """One vNPU: its template name, state and resources."""

    _fields_ = (
        ("name", ctypes.c_char * DCMI_VDEV_RES_NAME_LEN),
        ("status", ctypes.c_uint),
        ("is_container_used", ctypes.c_uint),
        ("vfid", ctypes.c_uint),
        ("vfg_id", ctypes.c_uint),
        ("container_id", ctypes.c_ulonglong),
        ("base", dcmi_base_resource),
        ("computing", dcmi_computing_resource),
        ("media", dcmi_media_resource),
    )
    name: bytes
    status: int
    is_container_used: int
    computing: dcmi_computing_resource


class dcmi_vdev_query_stru(ctypes.Structure):
    """``GET_VDEV_RESOURCE``: ``vdev_id`` is the input, ``query_info`` the answer."""

    _fields_ = (
        ("vdev_id", ctypes.c_uint),
        ("query_info", dcmi_vdev_query_info),
    )
    vdev_id: int
    query_info: dcmi_vdev_query_info


class dcmi_soc_total_resource(ctypes.Structure):
    """``GET_TOTAL_RESOURCE``: how many vNPUs the chip is split into, and their ids."""

    _fields_ = (
        ("vdev_num", ctypes.c_uint),
        ("vdev_id", ctypes.c_uint * DCMI_SOC_SPLIT_MAX),
        ("vfg_num", ctypes.c_uint),
        ("vfg_bitmap", ctypes.c_uint),
        ("base", dcmi_base_resource),
        ("computing", dcmi_computing_resource),
        ("media", dcmi_media_resource),
    )
    vdev_num: int
    vdev_id: Any
    computing: dcmi_computing_resource


# -- errors ----------------------------------------------------------------------------------------


def status_name(value: int) -> str:
    """The header's name for a return code, from a static table (never from the library)."""
    entry = _STATUS_TEXT.get(value)
    return entry[0] if entry else f"DCMI_ERROR_{value}"


class DCMIError(StatusError):
    """A non-zero DCMI return code; consumers branch on :attr:`value`, never on the text.

    One class for every code, as ``pydcmi``'s base class; ``args`` is ``(value, function)`` so
    the exception pickles and copies without losing the code.
    """

    status_name = staticmethod(status_name)

    def describe(self) -> str:
        """The header's name, the value and what it means (or that the code is unknown)."""
        entry = _STATUS_TEXT.get(self.value)
        if entry is None:
            return f"unknown DCMI code {self.value}"
        return f"{entry[0]} ({self.value}): {entry[1]}"


class DcmiLibraryNotFound(LibraryNotFound):
    """No candidate path could be opened; the message names every path and why each failed."""


# -- the wrapper -----------------------------------------------------------------------------------

_Status = Callable[..., int]


def _text(buffer: ctypes.Array[ctypes.c_char]) -> str:
    return buffer.value.decode("utf-8", errors="replace")


class Dcmi(CLibrary):
    """Pythonic calls over a ``libdcmi`` object: a ``ctypes.CDLL`` or a fake with its C ABI.

    Symbols are looked up per call, so a library lacking one (an older driver) still serves the
    others; a missing symbol raises ``DCMIError(DCMI_ERROR_FUNCTION_NOT_FOUND)``, the code
    ``pydcmi`` uses for it, rather than ``NOT_SUPPORT``, which would blame the device.
    """

    error = DCMIError
    missing_symbol = DCMI_ERROR_FUNCTION_NOT_FOUND

    def _struct(self, name: str, struct: ctypes.Structure, *leading: object) -> None:
        self._call(name, *leading, ctypes.byref(struct))

    # -- library and enumeration ------------------------------------------------------------------

    def dcmi_init(self) -> None:
        """Initialise the library."""
        self._call("dcmi_init")

    def dcmi_get_driver_version(self) -> str:
        """The driver version string (``25.2.0``)."""
        buffer = ctypes.create_string_buffer(DRIVER_VERSION_LEN)
        self._call("dcmi_get_driver_version", buffer, DRIVER_VERSION_LEN)
        return _text(buffer)

    def dcmi_get_card_list(self) -> list[int]:
        """Card ids, in the library's order.

        ``card_num`` comes back as the full count while at most ``list_len`` ids are written, so
        a count past the capacity is retried once with room for all of them.
        """
        capacity = CARD_LIST_LEN
        for _ in range(2):
            count = ctypes.c_int(0)
            cards = (ctypes.c_int * capacity)()
            self._call("dcmi_get_card_list", ctypes.byref(count), cards, capacity)
            if 0 <= count.value <= capacity:
                return [int(cards[i]) for i in range(count.value)]
            capacity = max(count.value, capacity)
        raise DCMIError(DCMI_ERROR_LIST_TRUNCATED, "dcmi_get_card_list")

    def dcmi_get_device_num_in_card(self, card_id: int) -> int:
        """How many devices (chips) the card holds."""
        count = ctypes.c_int(0)
        self._call("dcmi_get_device_num_in_card", card_id, ctypes.byref(count))
        return count.value

    def dcmi_get_device_type(self, card_id: int, device_id: int) -> int:
        """``DCMI_UNIT_TYPE_NPU`` (0), ``MCU`` (1) or ``CPU`` (2)."""
        unit = ctypes.c_uint(0)
        self._call("dcmi_get_device_type", card_id, device_id, ctypes.byref(unit))
        return unit.value

    def dcmi_get_device_logic_id(self, card_id: int, device_id: int) -> int:
        """The logic id ``npu-smi`` and ``ASCEND_VISIBLE_DEVICES`` use (note the C order)."""
        logic = ctypes.c_int(0)
        self._call("dcmi_get_device_logic_id", ctypes.byref(logic), card_id, device_id)
        return logic.value

    # -- identity ---------------------------------------------------------------------------------

    def dcmi_get_device_die_v2(self, card_id: int, device_id: int, die_type: int) -> dcmi_die_id:
        """The die id of ``DCMI_DIE_TYPE_NDIE`` or ``VDIE``."""
        die = dcmi_die_id()
        self._struct("dcmi_get_device_die_v2", die, card_id, device_id, die_type)
        return die

    def dcmi_get_device_die(self, card_id: int, device_id: int) -> dcmi_die_id:
        """The die id, from drivers without the ``_v2`` call."""
        die = dcmi_die_id()
        self._struct("dcmi_get_device_die", die, card_id, device_id)
        return die

    def dcmi_get_device_chip_info_v2(self, card_id: int, device_id: int) -> dcmi_chip_info_v2:
        """Chip type, name (``910B2``), version and AI core count."""
        info = dcmi_chip_info_v2()
        self._struct("dcmi_get_device_chip_info_v2", info, card_id, device_id)
        return info

    def dcmi_get_device_pcie_info_v2(self, card_id: int, device_id: int) -> dcmi_pcie_info_all:
        """PCI ids and address."""
        info = dcmi_pcie_info_all()
        self._struct("dcmi_get_device_pcie_info_v2", info, card_id, device_id)
        return info

    def dcmi_get_device_health(self, card_id: int, device_id: int) -> int:
        """0 normal, 1 minor alarm, 2 major alarm, 3 critical alarm."""
        health = ctypes.c_uint(0)
        self._call("dcmi_get_device_health", card_id, device_id, ctypes.byref(health))
        return health.value

    # -- figures ----------------------------------------------------------------------------------

    def dcmi_get_device_hbm_info(self, card_id: int, device_id: int) -> dcmi_hbm_info:
        """HBM size and usage in MB; DDR parts answer ``NOT_SUPPORT``."""
        info = dcmi_hbm_info()
        self._struct("dcmi_get_device_hbm_info", info, card_id, device_id)
        return info

    def dcmi_get_device_memory_info_v3(
        self, card_id: int, device_id: int
    ) -> dcmi_get_memory_info_stru:
        """Memory size and what is available, in MB."""
        info = dcmi_get_memory_info_stru()
        self._struct("dcmi_get_device_memory_info_v3", info, card_id, device_id)
        return info

    def dcmi_get_device_utilization_rate(
        self, card_id: int, device_id: int, input_type: int
    ) -> int:
        """Utilization of one unit (``DCMI_INPUT_TYPE_AICORE``), in percent."""
        rate = ctypes.c_uint(0)
        self._call(
            "dcmi_get_device_utilization_rate", card_id, device_id, input_type, ctypes.byref(rate)
        )
        return rate.value

    def dcmi_get_device_temperature(self, card_id: int, device_id: int) -> int:
        """Chip temperature in °C."""
        temperature = ctypes.c_int(0)
        self._call("dcmi_get_device_temperature", card_id, device_id, ctypes.byref(temperature))
        return temperature.value

    def dcmi_get_device_power_info(self, card_id: int, device_id: int) -> int:
        """Board power in units of 0.1 W."""
        power = ctypes.c_int(0)
        self._call("dcmi_get_device_power_info", card_id, device_id, ctypes.byref(power))
        return power.value

    # -- processes --------------------------------------------------------------------------------

    def dcmi_get_device_resource_info(
        self, card_id: int, device_id: int
    ) -> list[dcmi_proc_mem_info]:
        """Every process on the device with its memory in bytes, or ``LIST_TRUNCATED``.

        The count argument is output-only, so the buffer is sized to the documented maximum plus
        a guard tail and pre-filled with a sentinel row. A count above the maximum, or a sentinel
        overwritten at or past the reported count, means the library had more rows than this read
        accepts (or contradicts itself): a partial list is never returned as a complete one.
        """
        name = "dcmi_get_device_resource_info"
        capacity = MAX_PROC_NUM + GUARD_ROWS
        buffer = (dcmi_proc_mem_info * capacity)()
        sentinel = dcmi_proc_mem_info(_SENTINEL_PID, _SENTINEL_MEMORY)
        for i in range(capacity):
            buffer[i] = sentinel
        count = ctypes.c_int(capacity)  # ignored by the library; passed as what we can hold
        self._call(name, card_id, device_id, buffer, ctypes.byref(count))
        written = count.value
        if written < 0:
            raise DCMIError(DCMI_ERROR_UNEXPECTED_COUNT, name)
        if written > MAX_PROC_NUM or any(
            _written(buffer[i]) for i in range(min(written, capacity), capacity)
        ):
            raise DCMIError(DCMI_ERROR_LIST_TRUNCATED, name)
        return [dcmi_proc_mem_info.from_buffer_copy(buffer[i]) for i in range(written)]

    # -- vNPUs ------------------------------------------------------------------------------------

    def dcmi_get_vdev_total_resource(self, card_id: int, device_id: int) -> dcmi_soc_total_resource:
        """The chip's vNPU split: ``vdev_num`` and ``vdev_id[]`` (``dcmi_get_device_info``)."""
        total = dcmi_soc_total_resource()
        self._device_info(card_id, device_id, DCMI_VMNG_SUB_CMD_GET_TOTAL_RESOURCE, total)
        return total

    def dcmi_get_vdev_resource(
        self, card_id: int, device_id: int, vdev_id: int
    ) -> dcmi_vdev_query_stru:
        """One vNPU's template and resources; ``vdev_id`` goes in through the buffer."""
        query = dcmi_vdev_query_stru()
        query.vdev_id = vdev_id
        self._device_info(card_id, device_id, DCMI_VMNG_SUB_CMD_GET_VDEV_RESOURCE, query)
        return query

    def _device_info(
        self, card_id: int, device_id: int, sub_cmd: int, buffer: ctypes.Structure
    ) -> None:
        """``dcmi_get_device_info(card, device, main_cmd, sub_cmd, void *buf, unsigned *size)``.

        ``size`` is in/out: the buffer's size going in, what was written coming out. A library
        claiming to have written more than the buffer holds has overrun it: refused.
        """
        name = "dcmi_get_device_info"
        size = ctypes.c_uint(ctypes.sizeof(buffer))
        self._call(
            name,
            card_id,
            device_id,
            DCMI_MAIN_CMD_VDEV_MNG,
            sub_cmd,
            ctypes.byref(buffer),
            ctypes.byref(size),
        )
        if size.value > ctypes.sizeof(buffer):
            raise DCMIError(DCMI_ERROR_LIST_TRUNCATED, name)


_SENTINEL_PID: Final = -1
_SENTINEL_MEMORY: Final = ctypes.c_ulong(-1).value


def _written(row: dcmi_proc_mem_info) -> bool:
    return bool(row.proc_id != _SENTINEL_PID or row.proc_mem_usage != _SENTINEL_MEMORY)


def die_words(die: dcmi_die_id) -> tuple[int, ...]:
    """The die id's five words."""
    return tuple(int(word) for word in die.soc_die)


def pci_address(info: dcmi_pcie_info_all) -> str:
    """``dddd:bb:dd.f`` from the PCIe info's fields."""
    return f"{info.domain:04x}:{info.bdf_busid:02x}:{info.bdf_deviceid:02x}.{info.bdf_funcid:x}"


# -- loading ---------------------------------------------------------------------------------------

LIBRARY_NAME: Final = "libdcmi.so"

DEFAULT_PATHS: Final[tuple[str, ...]] = (
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/dcmi/libdcmi.so",
    LIBRARY_NAME,  # whatever the dynamic linker's search path finds
)
"""Tried in order after ``$DCMI_LIB``: the driver's install path, the standalone DCMI package,
then the linker's search path (``pydcmi``'s list, absolute paths first)."""

_i = ctypes.c_int
_u = ctypes.c_uint
_P = ctypes.POINTER

_SIGNATURES: Final = returning(
    ctypes.c_int,
    {
        "dcmi_init": (),
        "dcmi_get_driver_version": (ctypes.c_char_p, _u),
        "dcmi_get_card_list": (_P(_i), _P(_i), _i),
        "dcmi_get_device_num_in_card": (_i, _P(_i)),
        "dcmi_get_device_type": (_i, _i, _P(_u)),
        "dcmi_get_device_logic_id": (_P(_i), _i, _i),
        "dcmi_get_device_die_v2": (_i, _i, _i, _P(dcmi_die_id)),
        "dcmi_get_device_die": (_i, _i, _P(dcmi_die_id)),
        "dcmi_get_device_chip_info_v2": (_i, _i, _P(dcmi_chip_info_v2)),
        "dcmi_get_device_pcie_info_v2": (_i, _i, _P(dcmi_pcie_info_all)),
        "dcmi_get_device_health": (_i, _i, _P(_u)),
        "dcmi_get_device_hbm_info": (_i, _i, _P(dcmi_hbm_info)),
        "dcmi_get_device_memory_info_v3": (_i, _i, _P(dcmi_get_memory_info_stru)),
        "dcmi_get_device_utilization_rate": (_i, _i, _i, _P(_u)),
        "dcmi_get_device_temperature": (_i, _i, _P(_i)),
        "dcmi_get_device_power_info": (_i, _i, _P(_i)),
        "dcmi_get_device_resource_info": (_i, _i, _P(dcmi_proc_mem_info), _P(_i)),
        "dcmi_get_device_info": (_i, _i, _i, _u, ctypes.c_void_p, _P(_u)),
    },
)


def candidate_paths() -> tuple[str, ...]:
    """``$DCMI_LIB`` if set, then :data:`DEFAULT_PATHS`."""
    return with_override("DCMI_LIB", DEFAULT_PATHS)


def load_library(paths: Sequence[str] | None = None) -> Dcmi:
    """Open DCMI from the first path that loads; ``paths`` replaces the default search.

    The caller still calls :meth:`Dcmi.dcmi_init`. A miss names the library and every path tried.
    """
    lib = open_first(
        candidate_paths() if paths is None else paths,
        library=LIBRARY_NAME,
        not_found=DcmiLibraryNotFound,
        signatures=_SIGNATURES,
    )
    return Dcmi(lib)
