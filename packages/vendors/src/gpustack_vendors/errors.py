"""Library error codes → the spec's reasons, by **numeric code**, never by message text.

Message texts change between driver releases (pynvml prints "NVML Error with code N" for codes
it has no name for); the codes are the ABI.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpustack_core.reasons import QueryReason

U = QueryReason.UNSUPPORTED
P = QueryReason.PERMISSION
T = QueryReason.TRANSIENT_DRIVER_ERROR
X = QueryReason.TRUNCATED

NVML: Mapping[int, QueryReason] = {
    3: U,  # NOT_SUPPORTED
    13: U,  # FUNCTION_NOT_FOUND
    25: U,  # ARGUMENT_VERSION_MISMATCH
    4: P,  # NO_PERMISSION
    10: T,  # TIMEOUT
    19: T,  # IN_USE
    27: T,  # NOT_READY
    7: X,  # INSUFFICIENT_SIZE
}
NVML_FATAL = frozenset({15, 16, 17})
"""GPU_IS_LOST, RESET_REQUIRED, OPERATING_SYSTEM: the card itself is unhealthy."""

AMDSMI: Mapping[int, QueryReason] = {
    # Checked against ``amdsmi_status_t`` as amdsmi 7.0.2's ``amdsmi_wrapper`` spells it; the
    # Python binding raises ``AmdSmiLibraryException`` with ``err_code = abs(status)``.
    2: U,  # AMDSMI_STATUS_NOT_SUPPORTED
    3: U,  # AMDSMI_STATUS_NOT_YET_IMPLEMENTED
    5: U,  # AMDSMI_STATUS_FAIL_LOAD_SYMBOL: this library lacks the entry point (as NVML's 13)
    10: P,  # AMDSMI_STATUS_NO_PERM
    8: T,  # AMDSMI_STATUS_TIMEOUT (raised as AmdSmiTimeoutException)
    9: T,  # AMDSMI_STATUS_RETRY (raised as AmdSmiRetryException)
    11: T,  # AMDSMI_STATUS_INTERRUPT
    30: T,  # AMDSMI_STATUS_BUSY
    41: X,  # AMDSMI_STATUS_INSUFFICIENT_SIZE
    15: X,  # AMDSMI_STATUS_OUT_OF_RESOURCES: the process-list buffer was too small
}

ROCM_SMI: Mapping[int, QueryReason] = {
    # Checked against ``rsmi_status_t`` in ``gpustack_vendors.bindings.rocm_smi``.
    2: U,  # RSMI_STATUS_NOT_SUPPORTED
    9: U,  # RSMI_STATUS_NOT_YET_IMPLEMENTED
    22: U,  # RSMI_STATUS_FAIL_LOAD_SYMBOL: our binding's code for a symbol the library lacks
    4: P,  # RSMI_STATUS_PERMISSION
    16: T,  # RSMI_STATUS_BUSY
    12: T,  # RSMI_STATUS_INTERRUPT
    11: X,  # RSMI_STATUS_INSUFFICIENT_SIZE: the binding gave up on a list that kept growing
}


def reason(table: Mapping[int, QueryReason], code: int) -> QueryReason:
    """The reason for a code; anything unlisted failed this pass and is retried next time."""
    return table.get(code, QueryReason.TRANSIENT_DRIVER_ERROR)
