"""``gpustack-operator device-manager detect`` for Hygon: a clear refusal, and a replayed node."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpustack_cli.main import app
from gpustack_simulator.replay.hygon_rocm_smi_lib import FakeHygonRocmSmiLib
from gpustack_vendors.bindings import rocm_smi
from gpustack_vendors.bindings.rocm_smi import ROCMSMIError
from gpustack_vendors.hygon import hydmi
from gpustack_vendors.hygon import rocm_smi as hygon_rocm_smi
from gpustack_vendors.hygon.backend import HygonBackend
from gpustack_vendors.hygon.hydmi import HyDmiLibraryNotFound
from gpustack_vendors.hygon.rocm_smi import HygonRocmSmi
from gpustack_vendors.loading import LibraryUnavailableError, open_backend

RECORDINGS = Path(__file__).resolve().parents[3] / "recordings" / "hygon"
runner = CliRunner()


def _loadable(path: str) -> bool:
    try:
        ctypes.CDLL(path)
    except OSError:
        return False
    return True


@pytest.fixture
def no_hygon_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCM_SMI_LIB", raising=False)
    monkeypatch.delenv("HYDMI_MIG_LIB", raising=False)
    if any(_loadable(path) for path in hygon_rocm_smi.DEFAULT_PATHS):
        pytest.skip("this machine has a ROCm SMI library on the search path")


@pytest.mark.usefixtures("no_hygon_library")
def test_detect_without_the_library_exits_non_zero_with_one_line_naming_it() -> None:
    result = runner.invoke(app, ["device-manager", "detect", "--manufacturer", "hygon"])
    assert result.exit_code == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("device-manager detect: hygon: librocm_smi64.so could not be loaded.")
    for path in hygon_rocm_smi.DEFAULT_PATHS:
        assert f"{path} (" in line  # every path searched, each with why it failed


@pytest.mark.usefixtures("no_hygon_library")
def test_open_backend_refuses_with_the_same_message() -> None:
    with pytest.raises(LibraryUnavailableError, match=r"/opt/hyhal/lib/librocm_smi64\.so\.2"):
        open_backend("hygon")


def test_detect_simulated_mig_node_lists_cards_and_their_partitions() -> None:
    result = runner.invoke(
        app, ["device-manager", "detect", "--simulate", str(RECORDINGS / "bw-c3000-mig.yaml")]
    )
    assert result.exit_code == 0, result.output
    document = yaml.safe_load(result.stdout)
    assert document["manufacturer"] == "hygon"
    card0, card1 = document["devices"]
    assert (card0["id"], card0["pci_bus_id"], card0["cores"]) == (
        "GPU-72a1c4e9b3d07b23",
        "0000:1b:00.0",
        80,
    )
    assert [(p["profile"], p["memory_mib"], p["cores"]) for p in card0["partitions"]] == [
        ("2g.15gb", 16380, 20)
    ] * 4
    assert all(p["id"].startswith("MIG-") for p in card0["partitions"])
    assert all(p["parent_id"] == card0["id"] for p in card0["partitions"])
    assert [p["profile"] for p in card1["partitions"]] == ["4g.31gb"]


@pytest.mark.parametrize("name", ["bw-c3000.yaml", "k100-ai.yaml"])
def test_detect_simulated_whole_card_nodes_list_cards_without_partitions(name: str) -> None:
    result = runner.invoke(
        app,
        [
            "device-manager",
            "detect",
            "--manufacturer",
            "hygon",
            "--simulate",
            str(RECORDINGS / name),
        ],
    )
    assert result.exit_code == 0, result.output
    devices = yaml.safe_load(result.stdout)["devices"]
    assert devices
    assert all(d["id"].startswith("GPU-") and d["partitions"] == [] for d in devices)
    assert all(d["memory_mib"] == 65520 for d in devices)


def _fake_rocm_smi(init: object = None) -> HygonRocmSmi:
    answers = {
        "rsmi_init": init,
        "rsmi_num_monitor_devices": 0,
        "rsmi_version_str_get": ROCMSMIError(rocm_smi.RSMI_STATUS_NOT_SUPPORTED),
    }

    def answer(name: str, args: tuple[object, ...]) -> object:
        value = answers[name]
        if isinstance(value, BaseException):
            raise value
        return value

    return HygonRocmSmi(FakeHygonRocmSmiLib(answer))


def test_a_node_without_the_mig_library_still_opens_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hygon_rocm_smi, "load_library", _fake_rocm_smi)

    def no_mig() -> object:
        raise HyDmiLibraryNotFound(
            "libhydmi_mig.so.1", [("/opt/hyhal/lib/libhydmi_mig.so.1", "absent")]
        )

    monkeypatch.setattr(hydmi, "load_library", no_mig)
    backend = open_backend("hygon")
    assert isinstance(backend, HygonBackend)
    [note] = backend.detect().notes
    assert "libhydmi_mig.so.1 could not be loaded" in note
    assert "/opt/hyhal/lib/libhydmi_mig.so.1" in note


def test_a_library_that_will_not_initialise_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        hygon_rocm_smi,
        "load_library",
        lambda: _fake_rocm_smi(ROCMSMIError(rocm_smi.RSMI_STATUS_INIT_ERROR)),
    )
    with pytest.raises(LibraryUnavailableError, match="hygon: ROCm SMI did not initialise"):
        open_backend("hygon")
