"""A fake of Hygon's ``librocm_smi64`` fork at the C ABI: AMD's fake plus the card-level symbols.

The process calls, their list convention and the statuses are the base fake's
(:class:`~gpustack_simulator.replay.rocm_smi_lib.FakeRocmSmiLib`); this adds what
:class:`~gpustack_vendors.hygon.rocm_smi.HygonRocmSmi` reads on top: scalars written
through their out-pointers, strings copied into the caller's buffer as ``src/rocm_smi.cc`` does
(truncated to the length given, always NUL-terminated).
"""

from __future__ import annotations

import ctypes

from gpustack_simulator.replay import cabi
from gpustack_simulator.replay.rocm_smi_lib import FakeRocmSmiLib
from gpustack_vendors.bindings.rocm_smi import RSMI_STATUS_INVALID_ARGS, RSMI_STATUS_SUCCESS

_LIMITS = {
    "u32": (0, 0xFFFFFFFF),
    "u64": (0, 0xFFFFFFFFFFFFFFFF),
    "i64": (-(1 << 63), (1 << 63) - 1),
}


def _fits(value: object, kind: str, what: str) -> int:
    low, high = _LIMITS[kind]
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what}: {value!r} does not fit the C type ({kind})")
    return value


class FakeHygonRocmSmiLib(FakeRocmSmiLib):
    """The symbols :class:`HygonRocmSmi` uses, answered by ``answer`` (see the base class)."""

    def _scalar_out(self, name: str, args: tuple[object, ...], out: object, kind: str) -> int:
        if out is None:
            return RSMI_STATUS_INVALID_ARGS
        status, value = self._ask(name, args)
        if status == RSMI_STATUS_SUCCESS:
            cabi.target(out)[0] = _fits(value, kind, name)
        return status

    def _string_out(self, name: str, args: tuple[object, ...], buffer: object, size: object) -> int:
        length = cabi.scalar(size)
        if not isinstance(buffer, ctypes.Array) or length <= 0:
            return RSMI_STATUS_INVALID_ARGS
        status, value = self._ask(name, args)
        if status == RSMI_STATUS_SUCCESS:
            if not isinstance(value, str):
                raise TypeError(f"{name}: answer must be a string, got {value!r}")
            data = value.encode()[: length - 1] + b"\0"
            ctypes.memmove(buffer, data, len(data))
        return status

    def rsmi_dev_unique_id_get(self, dv_ind: object, unique_id: object) -> int:
        """``rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t *id)``."""
        return self._scalar_out("rsmi_dev_unique_id_get", (cabi.scalar(dv_ind),), unique_id, "u64")

    def rsmi_dev_name_get(self, dv_ind: object, name: object, length: object) -> int:
        """``rsmi_dev_name_get(uint32_t dv_ind, char *name, size_t len)``."""
        return self._string_out("rsmi_dev_name_get", (cabi.scalar(dv_ind),), name, length)

    def rsmi_dev_memory_total_get(self, dv_ind: object, mem_type: object, total: object) -> int:
        """``rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t, uint64_t *total)``."""
        args = (cabi.scalar(dv_ind), cabi.scalar(mem_type))
        return self._scalar_out("rsmi_dev_memory_total_get", args, total, "u64")

    def rsmi_dev_memory_usage_get(self, dv_ind: object, mem_type: object, used: object) -> int:
        """``rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t, uint64_t *used)``."""
        args = (cabi.scalar(dv_ind), cabi.scalar(mem_type))
        return self._scalar_out("rsmi_dev_memory_usage_get", args, used, "u64")

    def rsmi_dev_busy_percent_get(self, dv_ind: object, percent: object) -> int:
        """``rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent)``."""
        return self._scalar_out("rsmi_dev_busy_percent_get", (cabi.scalar(dv_ind),), percent, "u32")

    def rsmi_dev_temp_metric_get(
        self, dv_ind: object, sensor: object, metric: object, value: object
    ) -> int:
        """``rsmi_dev_temp_metric_get(uint32_t, uint32_t sensor, metric, int64_t *value)``."""
        args = (cabi.scalar(dv_ind), cabi.scalar(sensor), cabi.scalar(metric))
        return self._scalar_out("rsmi_dev_temp_metric_get", args, value, "i64")

    def rsmi_dev_power_ave_get(self, dv_ind: object, sensor: object, power: object) -> int:
        """``rsmi_dev_power_ave_get(uint32_t dv_ind, uint32_t sensor_ind, uint64_t *power)``."""
        args = (cabi.scalar(dv_ind), cabi.scalar(sensor))
        return self._scalar_out("rsmi_dev_power_ave_get", args, power, "u64")

    def rsmi_version_str_get(self, component: object, buffer: object, length: object) -> int:
        """``rsmi_version_str_get(rsmi_sw_component_t, char *ver_str, uint32_t len)``."""
        return self._string_out("rsmi_version_str_get", (cabi.scalar(component),), buffer, length)
