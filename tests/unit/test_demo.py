"""The embedded demo: the real core's figures for every shape of Instance the spec names."""

import json

import pytest

from gpustack_core.decoding import ContractError
from gpustack_simulator.demo import DemoRow, demo_metrics, load_demo


@pytest.fixture(scope="module")
def rows() -> dict[str, DemoRow]:
    return {row.metrics.metadata.name: row for row in demo_metrics(load_demo())}


def test_every_instance_answers(rows: dict[str, DemoRow]) -> None:
    assert set(rows) == {
        "llama-70b",
        "qwen-7b",
        "embed-small",
        "rocm-bench",
        "notebook",
        "pending-train",
        "archived-job",
    }


def test_exclusive_h100(rows: dict[str, DemoRow]) -> None:
    sample = rows["llama-70b"].metrics.sample
    # 8 cores main; the init container's 2 cores are excluded.
    assert sample.cpu_total_milli_cores == 8000
    # 6,213,456,789 nanocores rounds up to 6214 millicores.
    assert sample.cpu_used_milli_cores == 6214
    # 48 GiB + 12,345 B of working set rounds up to 49153 MiB.
    assert sample.memory_used_mib == 49153
    [entry] = sample.accelerators or []
    assert (entry.mode, entry.memory_used_mib, entry.memory_total_mib) == (
        "Exclusive",
        61234,
        81559,
    )
    assert rows["llama-70b"].indexes[entry.id] == ("nvidia", 0)


def test_sliced_quarter_card(rows: dict[str, DemoRow]) -> None:
    [entry] = rows["qwen-7b"].metrics.sample.accelerators or []  # the sshd sidecar adds none
    assert entry.mode == "Sliced"
    assert entry.memory_total_mib == 20389
    assert entry.memory_used_mib == 19876
    assert entry.cores_utilization_percent == 44  # 11 % of the card against a 25 % cap


def test_idle_mig_partition(rows: dict[str, DemoRow]) -> None:
    [entry] = rows["embed-small"].metrics.sample.accelerators or []
    assert entry.id.startswith("MIG-")
    assert entry.memory_total_mib == 9856
    assert entry.memory_used_mib == 0
    assert entry.cores_utilization_percent is None
    assert any("unsupported" in note for note in rows["embed-small"].notes)


def test_amd_read_from_its_own_device_manager(rows: dict[str, DemoRow]) -> None:
    [entry] = rows["rocm-bench"].metrics.sample.accelerators or []
    assert entry.id == "0000:8a:00.0"
    assert rows["rocm-bench"].indexes[entry.id] == ("amd", 0)


def test_cpu_only_tiny_working_set_reads_one(rows: dict[str, DemoRow]) -> None:
    sample = rows["notebook"].metrics.sample
    assert sample.memory_used_mib == 1  # 585,728 B
    assert sample.storage_used_mib == 1  # 20,480 B
    assert sample.accelerators == []


def test_never_started_and_stopped_read_zeros(rows: dict[str, DemoRow]) -> None:
    for name, cpu_total in (("pending-train", 16000), ("archived-job", 2000)):
        sample = rows[name].metrics.sample
        assert sample.cpu_total_milli_cores == cpu_total
        assert (sample.cpu_used_milli_cores, sample.memory_used_mib, sample.storage_used_mib) == (
            0,
            0,
            0,
        )
        assert sample.accelerators is None


def test_malformed_demo_document_names_the_field() -> None:
    with pytest.raises(ContractError, match=r"demo document .*\$\.node"):
        load_demo(json.dumps({"description": "x", "node": 5}).encode())
