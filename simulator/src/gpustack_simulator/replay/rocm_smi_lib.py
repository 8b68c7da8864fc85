"""A fake ``librocm_smi64`` at the C ABI, for :class:`~gpustack_vendors.bindings.rocm_smi.RocmSmi`.

Replaying at the binding's Python surface would skip the binding's own size negotiation, the
part most likely to break silently (a truncated process list reads as free memory). So this fake
sits one level lower: it takes the binding's ctypes arguments, writes through its pointers and
returns status codes the way ``src/rocm_smi.cc`` does, and the real binding code runs on top.

What to answer comes from a callback speaking the binding's Python results, so a recording needs
only the values a backend saw, not C-level traffic.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from gpustack_simulator.replay import cabi
from gpustack_vendors.bindings.rocm_smi import (
    RSMI_STATUS_INSUFFICIENT_SIZE,
    RSMI_STATUS_INVALID_ARGS,
    RSMI_STATUS_SUCCESS,
    ROCMSMIError,
    rsmi_process_info_t,
)

Answer = Callable[[str, tuple[object, ...]], object]
"""``answer(binding_method, args)``: that method's Python result, or raise ``ROCMSMIError``."""

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF


def _checked(value: object, limit: int, what: str) -> int:
    """Refuse values the C type cannot hold: ctypes would truncate them without a word."""
    if not isinstance(value, int) or not 0 <= value <= limit:
        raise ValueError(f"{what}: {value!r} does not fit the C type (0 … {limit})")
    return value


class FakeRocmSmiLib:
    """The ``librocm_smi64`` symbols :class:`RocmSmi` uses, answered by ``answer``.

    Each function calls ``answer`` once per C call, probes included, so an ``answer`` that
    returns a longer list on its next call makes the list grow between probe and fill exactly as
    a process starting mid-call would. A ``ROCMSMIError`` from ``answer`` becomes the returned
    status. Symbols in ``missing`` (and any symbol not defined here) raise ``AttributeError`` on
    lookup, as ``ctypes.CDLL`` does for an undefined symbol, so the binding's missing-symbol path
    runs. ``calls`` logs every C call by symbol name, for tests and replay diagnostics.
    """

    def __init__(self, answer: Answer, *, missing: Collection[str] = ()) -> None:
        self.answer = answer
        self.missing = frozenset(missing)
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("rsmi_") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"librocm_smi64.so: undefined symbol: {name}")
        return object.__getattribute__(self, name)

    def _ask(self, name: str, args: tuple[object, ...]) -> tuple[int, object]:
        """Record the call and ask ``answer``; an ROCm SMI error becomes its status."""
        self.calls.append(name)
        try:
            return RSMI_STATUS_SUCCESS, self.answer(name, args)
        except ROCMSMIError as exc:
            return exc.value, None

    # -- scalars ---------------------------------------------------------------------------------

    def rsmi_init(self, init_flags: object) -> int:
        """``rsmi_init(uint64_t init_flags)``."""
        status, _ = self._ask("rsmi_init", (cabi.scalar(init_flags),))
        return status

    def rsmi_shut_down(self) -> int:
        """``rsmi_shut_down(void)``."""
        status, _ = self._ask("rsmi_shut_down", ())
        return status

    def rsmi_num_monitor_devices(self, num_devices: object) -> int:
        """``rsmi_num_monitor_devices(uint32_t *num_devices)``."""
        if num_devices is None:
            return RSMI_STATUS_INVALID_ARGS
        status, value = self._ask("rsmi_num_monitor_devices", ())
        if status == RSMI_STATUS_SUCCESS:
            cabi.target(num_devices)[0] = _checked(value, _U32_MAX, "rsmi_num_monitor_devices")
        return status

    def rsmi_dev_pci_id_get(self, dv_ind: object, bdfid: object) -> int:
        """``rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid)``."""
        if bdfid is None:
            return RSMI_STATUS_INVALID_ARGS
        status, value = self._ask("rsmi_dev_pci_id_get", (cabi.scalar(dv_ind),))
        if status == RSMI_STATUS_SUCCESS:
            cabi.target(bdfid)[0] = _checked(value, _U64_MAX, "rsmi_dev_pci_id_get")
        return status

    def rsmi_compute_process_info_by_device_get(
        self, pid: object, dv_ind: object, proc: object
    ) -> int:
        """``rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv_ind, *proc)``."""
        if proc is None:
            return RSMI_STATUS_INVALID_ARGS
        name = "rsmi_compute_process_info_by_device_get"
        status, value = self._ask(name, (cabi.scalar(pid), cabi.scalar(dv_ind)))
        if status == RSMI_STATUS_SUCCESS:
            if not isinstance(value, rsmi_process_info_t):
                raise TypeError(f"{name}: answer must be an rsmi_process_info_t, got {value!r}")
            cabi.target(proc)[0] = value
        return status

    # -- lists -----------------------------------------------------------------------------------

    def rsmi_compute_process_info_get(self, procs: object, num_items: object) -> int:
        """``rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items)``."""
        name = "rsmi_compute_process_info_get"
        if num_items is None:
            return RSMI_STATUS_INVALID_ARGS
        status, value = self._ask(name, ())
        if status != RSMI_STATUS_SUCCESS:
            return status
        rows = cabi.rows(name, value, rsmi_process_info_t)
        return _fill(rows, procs, num_items)

    def rsmi_compute_process_gpus_get(
        self, pid: object, dv_indices: object, num_devices: object
    ) -> int:
        """``rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices, uint32_t *num)``."""
        name = "rsmi_compute_process_gpus_get"
        if num_devices is None:
            return RSMI_STATUS_INVALID_ARGS
        status, value = self._ask(name, (cabi.scalar(pid),))
        if status != RSMI_STATUS_SUCCESS:
            return status
        rows = [_checked(index, _U32_MAX, name) for index in cabi.rows(name, value, int)]
        return _fill(rows, dv_indices, num_devices)


def _fill(rows: Sequence[Any], buffer: object, count: object) -> int:
    """The list convention of ``src/rocm_smi.cc``, shared by both list calls.

    NULL buffer: write the full count, ``SUCCESS``. Otherwise write up to the capacity passed in
    ``*count``; if the list is longer, leave ``*count`` at the capacity (the rows written) and
    return ``INSUFFICIENT_SIZE``; if not, set ``*count`` to the rows written.
    """
    count_ref = cabi.target(count)
    if buffer is None:
        count_ref[0] = len(rows)
        return RSMI_STATUS_SUCCESS
    capacity = int(count_ref[0])
    target = cabi.target(buffer)
    for i, row in enumerate(rows[:capacity]):
        target[i] = row
    if capacity < len(rows):
        return RSMI_STATUS_INSUFFICIENT_SIZE
    count_ref[0] = len(rows)
    return RSMI_STATUS_SUCCESS
