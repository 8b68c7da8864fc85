"""The pure pieces several backends share, checked on their own."""

from __future__ import annotations

from types import SimpleNamespace

from gpustack_core.reasons import QueryReason
from gpustack_vendors.answers import (
    c_text,
    memory_only,
    per_device,
    unknown_device,
    unknown_memory_only,
    unsupported_partitions,
)
from gpustack_vendors.detected import Detected
from gpustack_vendors.model import DeviceProcesses, PartitionSample, ProcessRow
from gpustack_vendors.nvml_shaped import (
    cuda_style_version,
    mig_profile,
    newest_sm_util,
    sized_or_none,
)


def test_cuda_style_version_and_mig_profile() -> None:
    assert cuda_style_version(12040) == "12.4"
    assert cuda_style_version(10020) == "10.2"
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert mig_profile("PPU-ZW810E") == ""


def test_newest_sm_util_keeps_each_pid_newest_sample() -> None:
    samples = [
        SimpleNamespace(pid=1, timeStamp=10, smUtil=5),
        SimpleNamespace(pid=1, timeStamp=30, smUtil=70),
        SimpleNamespace(pid=1, timeStamp=20, smUtil=9),
        SimpleNamespace(pid=2, timeStamp=5, smUtil=0),
    ]
    assert newest_sm_util(samples) == {1: 70, 2: 0}


def test_sized_or_none_reads_the_not_available_value_as_absent() -> None:
    assert sized_or_none(2**64 - 1, 2**64 - 1) is None
    assert sized_or_none(4096, 2**64 - 1) == 4096


def test_per_device_answers_every_requested_id() -> None:
    def read(device_id: str, handle: int) -> DeviceProcesses:
        return memory_only(device_id, [ProcessRow(handle, 1, None)])

    got = per_device(["a", "b"], {"a": 0}, read, unknown_memory_only)
    assert got["a"] == DeviceProcesses(
        "a", rows=(ProcessRow(0, 1, None),), cores_reason=QueryReason.UNSUPPORTED
    )
    assert got["b"] == DeviceProcesses(
        "b",
        memory_reason=QueryReason.TRANSIENT_DRIVER_ERROR,
        cores_reason=QueryReason.UNSUPPORTED,
    )
    assert per_device(["c"], {}, read) == {"c": unknown_device("c")}


def test_unsupported_partitions_and_c_text() -> None:
    assert unsupported_partitions(["p"]) == {
        "p": PartitionSample("p", "", None, None, None, *[QueryReason.UNSUPPORTED] * 2)
    }
    assert c_text(b"GPU-1\0junk") == "GPU-1"
    assert c_text("GPU-2") == "GPU-2"


def test_detected_detects_once_on_first_use() -> None:
    calls: list[int] = []

    def detect() -> None:
        calls.append(1)
        detected.remember({"GPU-0": 0}, {"MIG-0": "GPU-0"})

    detected: Detected[int, str] = Detected(detect)
    assert detected.both() == ({"GPU-0": 0}, {"MIG-0": "GPU-0"})
    assert detected.cards() == {"GPU-0": 0}
    assert calls == [1]
