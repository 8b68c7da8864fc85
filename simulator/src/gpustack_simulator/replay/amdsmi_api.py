"""amdsmi's interface surface, replicated: exception classes, enums, handle type, constants.

``import amdsmi`` fails on any machine without ``libamd_smi.so`` (it prints to stdout, then
raises ``KeyError`` from ``amdsmi_wrapper``), so even its exception classes cannot be imported
where CI runs. The replay stand-in and the synthetic binding therefore share this copy. Names and
values are taken from amdsmi 7.0.2 (``amdsmi_exception.py``, ``amdsmi_interface.py``,
``amdsmi_wrapper.py``) so a backend written against the real package cannot tell them apart:
the same class names and ``err_code`` behaviour, the same enum members and numbers, and
``c_void_p`` processor handles that every call checks with ``isinstance``.
"""

from __future__ import annotations

import ctypes
import types
from enum import IntEnum
from typing import Final

# -- amdsmi_status_t (amdsmi_wrapper) -------------------------------------------------------------

AMDSMI_STATUS_SUCCESS: Final = 0
AMDSMI_STATUS_INVAL: Final = 1
AMDSMI_STATUS_NOT_SUPPORTED: Final = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED: Final = 3
AMDSMI_STATUS_FAIL_LOAD_MODULE: Final = 4
AMDSMI_STATUS_FAIL_LOAD_SYMBOL: Final = 5
AMDSMI_STATUS_DRM_ERROR: Final = 6
AMDSMI_STATUS_API_FAILED: Final = 7
AMDSMI_STATUS_TIMEOUT: Final = 8
AMDSMI_STATUS_RETRY: Final = 9
AMDSMI_STATUS_NO_PERM: Final = 10
AMDSMI_STATUS_INTERRUPT: Final = 11
AMDSMI_STATUS_IO: Final = 12
AMDSMI_STATUS_ADDRESS_FAULT: Final = 13
AMDSMI_STATUS_FILE_ERROR: Final = 14
AMDSMI_STATUS_OUT_OF_RESOURCES: Final = 15
AMDSMI_STATUS_INTERNAL_EXCEPTION: Final = 16
AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS: Final = 17
AMDSMI_STATUS_INIT_ERROR: Final = 18
AMDSMI_STATUS_REFCOUNT_OVERFLOW: Final = 19
AMDSMI_STATUS_DIRECTORY_NOT_FOUND: Final = 20
AMDSMI_STATUS_BUSY: Final = 30
AMDSMI_STATUS_NOT_FOUND: Final = 31
AMDSMI_STATUS_NOT_INIT: Final = 32
AMDSMI_STATUS_NO_SLOT: Final = 33
AMDSMI_STATUS_DRIVER_NOT_LOADED: Final = 34
AMDSMI_STATUS_MORE_DATA: Final = 39
AMDSMI_STATUS_NO_DATA: Final = 40
AMDSMI_STATUS_INSUFFICIENT_SIZE: Final = 41
AMDSMI_STATUS_UNEXPECTED_SIZE: Final = 42
AMDSMI_STATUS_UNEXPECTED_DATA: Final = 43
AMDSMI_STATUS_NON_AMD_CPU: Final = 44
AMDSMI_STATUS_NO_ENERGY_DRV: Final = 45
AMDSMI_STATUS_NO_MSR_DRV: Final = 46
AMDSMI_STATUS_NO_HSMP_DRV: Final = 47
AMDSMI_STATUS_NO_HSMP_SUP: Final = 48
AMDSMI_STATUS_NO_HSMP_MSG_SUP: Final = 49
AMDSMI_STATUS_HSMP_TIMEOUT: Final = 50
AMDSMI_STATUS_NO_DRV: Final = 51
AMDSMI_STATUS_FILE_NOT_FOUND: Final = 52
AMDSMI_STATUS_ARG_PTR_NULL: Final = 53
AMDSMI_STATUS_AMDGPU_RESTART_ERR: Final = 54
AMDSMI_STATUS_SETTING_UNAVAILABLE: Final = 55
AMDSMI_STATUS_CORRUPTED_EEPROM: Final = 56
AMDSMI_STATUS_MAP_ERROR: Final = 4294967294
AMDSMI_STATUS_UNKNOWN_ERROR: Final = 4294967295

_STATUS_INFO: Final[dict[int, str]] = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED: (
        "AMDSMI_STATUS_NOT_YET_IMPLEMENTED - Feature not yet implemented"
    ),
    AMDSMI_STATUS_FAIL_LOAD_MODULE: "AMDSMI_STATUS_FAIL_LOAD_MODULE - Fail to load lib",
    AMDSMI_STATUS_FAIL_LOAD_SYMBOL: "AMDSMI_STATUS_FAIL_LOAD_SYMBOL - Fail to load symbol",
    AMDSMI_STATUS_DRM_ERROR: "AMDSMI_STATUS_DRM_ERROR - Error when called libdrm",
    AMDSMI_STATUS_API_FAILED: "AMDSMI_STATUS_API_FAILED - API call failed",
    AMDSMI_STATUS_TIMEOUT: "AMDSMI_STATUS_TIMEOUT - Timeout in API call",
    AMDSMI_STATUS_RETRY: "AMDSMI_STATUS_RETRY - Retry operation",
    AMDSMI_STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    AMDSMI_STATUS_INTERRUPT: "AMDSMI_STATUS_INTERRUPT - Interrupt ocurred during execution",
    AMDSMI_STATUS_IO: "AMDSMI_STATUS_IO - I/O Error",
    AMDSMI_STATUS_ADDRESS_FAULT: "AMDSMI_STATUS_ADDRESS_FAULT - Bad address",
    AMDSMI_STATUS_FILE_ERROR: "AMDSMI_STATUS_FILE_ERROR - Error opening file",
    AMDSMI_STATUS_OUT_OF_RESOURCES: "AMDSMI_STATUS_OUT_OF_RESOURCES - Not enough memory",
    AMDSMI_STATUS_INTERNAL_EXCEPTION: "AMDSMI_STATUS_INTERNAL_EXCEPTION -  Internal error",
    AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS: "AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS - Out of bounds",
    AMDSMI_STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    AMDSMI_STATUS_BUSY: "AMDSMI_STATUS_BUSY - Device busy",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    AMDSMI_STATUS_NO_SLOT: "AMDSMI_STATUS_NO_SLOT - No more free slot",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
    AMDSMI_STATUS_NO_DATA: "AMDSMI_STATUS_NO_DATA - No data was found for given input",
    AMDSMI_STATUS_INSUFFICIENT_SIZE: (
        "AMDSMI_STATUS_INSUFFICIENT_SIZE - Insufficient size for operation"
    ),
    AMDSMI_STATUS_UNEXPECTED_SIZE: (
        "AMDSMI_STATUS_UNEXPECTED_SIZE - unexpected size of data was read"
    ),
    AMDSMI_STATUS_UNEXPECTED_DATA: (
        "AMDSMI_STATUS_UNEXPECTED_DATA - The data read or provided was unexpected"
    ),
    AMDSMI_STATUS_AMDGPU_RESTART_ERR: (
        "AMDSMI_STATUS_AMDGPU_RESTART_ERR - AMDGPU restart failed, please check dmsg for errors"
    ),
    AMDSMI_STATUS_SETTING_UNAVAILABLE: (
        "AMDSMI_STATUS_SETTING_UNAVAILABLE - Setting is not available"
    ),
}
_UNKNOWN_INFO: Final = "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"

# -- handles and sizes ----------------------------------------------------------------------------

amdsmi_processor_handle = ctypes.c_void_p
"""``ctypes.POINTER(None)`` in ``amdsmi_wrapper``, which *is* ``c_void_p``."""
amdsmi_socket_handle = ctypes.c_void_p
processor_handle = ctypes.c_void_p
"""The annotation alias ``amdsmi_interface`` uses."""

MAX_NUM_PROCESSES: Final = 1024
AMDSMI_MAX_STRING_LENGTH: Final = 256
AMDSMI_MAX_DEVICES: Final = 32
AMDSMI_GPU_UUID_SIZE: Final = 38

# -- exceptions (amdsmi_exception) ----------------------------------------------------------------


class AmdSmiException(Exception):  # noqa: N818 - amdsmi's own name
    """Base smi exception class."""


class AmdSmiLibraryException(AmdSmiException):
    """A non-success status; ``err_code`` is its absolute value, as amdsmi stores it."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.set_err_info()

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        """The full text, or only the status name when ``detailed`` is false."""
        if detailed:
            return self.err_info
        return str(self.err_info).split(" - ")[0]

    def get_error_code(self) -> int:
        """The numeric status (positive)."""
        return self.err_code

    def set_err_info(self) -> None:
        """Translate the code into amdsmi's text for it."""
        self.err_info = _STATUS_INFO.get(self.err_code, _UNKNOWN_INFO)


class AmdSmiRetryException(AmdSmiLibraryException):
    """``AMDSMI_STATUS_RETRY``; amdsmi raises it with no arguments."""

    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    """``AMDSMI_STATUS_TIMEOUT``; amdsmi raises it with no arguments."""

    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    """An argument of the wrong type, caught before the library is called (no status code)."""

    def __init__(self, receivedValue: object, expectedType: object, msg: str | None = None) -> None:  # noqa: N803
        super().__init__(msg)
        self.err_code = None
        self.actualType = type(receivedValue)
        self.expectedType = expectedType
        self.set_err_msg()
        if msg is not None:
            self.err_msg = msg

    def set_err_msg(self) -> None:
        """The mismatch in amdsmi's wording."""
        self.err_msg = (
            "Invalid parameter:\n"
            f"Actual type: {self.actualType}\n"
            f"Expected type: {self.expectedType}"
        )

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiKeyException(AmdSmiException):
    """A dictionary key amdsmi expected is missing."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.set_err_msg()

    def set_err_msg(self) -> None:
        """The missing key in amdsmi's wording."""
        self.err_msg = "Key " + self.key + " is missing from dictionary"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiBdfFormatException(AmdSmiException):
    """A bus id string that is not ``[dddd:]bb:dd.f``."""

    def __init__(self, bdf: object) -> None:
        super().__init__()
        self.bdf = bdf

    def __str__(self) -> str:
        return (
            f"Wrong BDF format: {self.bdf}. \n"
            "BDF string should be: <domain>:<bus>:<device>.<function>\n"
            " or <bus>:<device>.<function> in hexcode format."
        )


def check_res(ret_code: int) -> None:
    """``amdsmi_interface._check_res``: RETRY and TIMEOUT get their own subclasses."""
    if ret_code == AMDSMI_STATUS_RETRY:
        raise AmdSmiRetryException
    if ret_code == AMDSMI_STATUS_TIMEOUT:
        raise AmdSmiTimeoutException
    if ret_code != AMDSMI_STATUS_SUCCESS:
        raise AmdSmiLibraryException(ret_code)


# -- enums (amdsmi_interface) ---------------------------------------------------------------------


class AmdSmiInitFlags(IntEnum):
    """``amdsmi_init`` flags; the backend initialises GPUs only."""

    INIT_ALL_PROCESSORS = 4294967295
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiTemperatureType(IntEnum):
    """Temperature sensors; ``JUNCTION`` is an alias of ``HOTSPOT`` (both 1), as in amdsmi."""

    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7
    GPUBOARD_NODE_RETIMER_X = 100
    GPUBOARD_NODE_OAM_X_IBC = 101
    GPUBOARD_NODE_OAM_X_IBC_2 = 102
    GPUBOARD_NODE_OAM_X_VDD18_VR = 103
    GPUBOARD_NODE_OAM_X_04_HBM_B_VR = 104
    GPUBOARD_NODE_OAM_X_04_HBM_D_VR = 105
    GPUBOARD_NODE_LAST = 149
    GPUBOARD_VDDCR_VDD0 = 150
    GPUBOARD_VDDCR_VDD1 = 151
    GPUBOARD_VDDCR_VDD2 = 152
    GPUBOARD_VDDCR_VDD3 = 153
    GPUBOARD_VDDCR_SOC_A = 154
    GPUBOARD_VDDCR_SOC_C = 155
    GPUBOARD_VDDCR_SOCIO_A = 156
    GPUBOARD_VDDCR_SOCIO_C = 157
    GPUBOARD_VDD_085_HBM = 158
    GPUBOARD_VDDCR_11_HBM_B = 159
    GPUBOARD_VDDCR_11_HBM_D = 160
    GPUBOARD_VDD_USR = 161
    GPUBOARD_VDDIO_11_E32 = 162
    GPUBOARD_VR_LAST = 199
    BASEBOARD_UBB_FPGA = 200
    BASEBOARD_UBB_FRONT = 201
    BASEBOARD_UBB_BACK = 202
    BASEBOARD_UBB_OAM7 = 203
    BASEBOARD_UBB_IBC = 204
    BASEBOARD_UBB_UFPGA = 205
    BASEBOARD_UBB_OAM1 = 206
    BASEBOARD_OAM_0_1_HSC = 207
    BASEBOARD_OAM_2_3_HSC = 208
    BASEBOARD_OAM_4_5_HSC = 209
    BASEBOARD_OAM_6_7_HSC = 210
    BASEBOARD_UBB_FPGA_0V72_VR = 211
    BASEBOARD_UBB_FPGA_3V3_VR = 212
    BASEBOARD_RETIMER_0_1_2_3_1V2_VR = 213
    BASEBOARD_RETIMER_4_5_6_7_1V2_VR = 214
    BASEBOARD_RETIMER_0_1_0V9_VR = 215
    BASEBOARD_RETIMER_2_3_0V9_VR = 217
    BASEBOARD_RETIMER_6_7_0V9_VR = 218
    BASEBOARD_OAM_0_1_2_3_3V3_VR = 219
    BASEBOARD_OAM_4_5_6_7_3V3_VR = 220
    BASEBOARD_IBC_HSC = 221
    BASEBOARD_IBC = 222
    BASEBOARD_LAST = 249
    BASEBOARD__MAX = 249


class AmdSmiTemperatureMetric(IntEnum):
    """Which reading of a sensor (``amdsmi_get_temp_metric`` answers it in °C)."""

    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8
    CRIT_MIN = 9
    CRIT_MIN_HYST = 10
    OFFSET = 11
    LOWEST = 12
    HIGHEST = 13


class AmdSmiMemoryType(IntEnum):
    """Memory pools of ``amdsmi_get_gpu_memory_total``/``…_usage`` (answers in bytes)."""

    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiProcessorType(IntEnum):
    """Kinds of processor handle."""

    UNKNOWN = 0
    AMDSMI_PROCESSOR_TYPE_AMD_GPU = 1
    AMDSMI_PROCESSOR_TYPE_AMD_CPU = 2
    AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU = 3
    AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU = 4


EXCEPTIONS: Final = (
    AmdSmiException,
    AmdSmiLibraryException,
    AmdSmiRetryException,
    AmdSmiTimeoutException,
    AmdSmiParameterException,
    AmdSmiKeyException,
    AmdSmiBdfFormatException,
)
ENUMS: Final = (
    AmdSmiInitFlags,
    AmdSmiTemperatureType,
    AmdSmiTemperatureMetric,
    AmdSmiMemoryType,
    AmdSmiProcessorType,
)


def wrapper_module() -> types.ModuleType:
    """A stand-in for ``amdsmi.amdsmi_wrapper``: the status codes and the handle types."""
    module = types.ModuleType("amdsmi.amdsmi_wrapper", doc="status codes and handle types")
    for name, value in globals().items():
        if name.startswith("AMDSMI_STATUS_"):
            setattr(module, name, value)
    module.__dict__.update(
        amdsmi_processor_handle=amdsmi_processor_handle, amdsmi_socket_handle=amdsmi_socket_handle
    )
    return module


def install(module: object) -> None:
    """Give a module (or a stand-in object) amdsmi's names other than its functions.

    Those are its exceptions, enums and constants.
    """
    for item in (*EXCEPTIONS, *ENUMS):
        setattr(module, item.__name__, item)
    vars(module).update(
        processor_handle=processor_handle,
        MAX_NUM_PROCESSES=MAX_NUM_PROCESSES,
        AMDSMI_GPU_UUID_SIZE=AMDSMI_GPU_UUID_SIZE,
        amdsmi_wrapper=wrapper_module(),
    )


def expect_handle(value: object) -> None:
    """Every amdsmi call taking a processor handle checks its type first."""
    if not isinstance(value, amdsmi_processor_handle):
        raise AmdSmiParameterException(value, amdsmi_processor_handle)


def expect(value: object, enum: type[IntEnum]) -> None:
    """Enum arguments must be members of amdsmi's enum, not bare ints."""
    if not isinstance(value, enum):
        raise AmdSmiParameterException(value, enum)
