"""The committed kubelet API modules are exactly what ``just proto`` generates from the protos."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from gpustack_kube.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from gpustack_kube.kubeletapi import podresources_v1_pb2 as pr

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "packages/kube/proto/generate.py"
COMMITTED = ROOT / "packages/kube/src"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kubeletapi_generate", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerating_reproduces_the_committed_modules(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev group) is not installed")
    written: list[Path] = _generator().generate(tmp_path)
    assert len(written) == 6
    for fresh in written:
        committed = COMMITTED / fresh.relative_to(tmp_path)
        assert committed.is_file(), f"{committed} is missing: run `just proto` and commit it"
        assert fresh.read_text() == committed.read_text(), (
            f"{committed.name} is stale: run `just proto` and commit the result"
        )


def test_the_wire_names_are_the_kubelets() -> None:
    services = {
        s.full_name: [m.name for m in s.methods]
        for module in (dp, pr)
        for s in module.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": [
            "GetDevicePluginOptions",
            "ListAndWatch",
            "GetPreferredAllocation",
            "Allocate",
            "PreStartContainer",
        ],
        "v1.PodResourcesLister": ["List", "GetAllocatableResources", "Get"],
    }
    fields = dp.ContainerAllocateResponse.DESCRIPTOR.fields_by_number
    assert {n: f.name for n, f in fields.items()} == {
        1: "envs",
        2: "mounts",
        3: "devices",
        4: "annotations",
        5: "cdi_devices",
    }
    register = dp.RegisterRequest.DESCRIPTOR.fields_by_number
    assert {n: f.name for n, f in register.items()} == {
        1: "version",
        2: "endpoint",
        3: "resource_name",
        4: "options",
    }
    containers = pr.ContainerResources.DESCRIPTOR.fields_by_number
    assert sorted(containers) == [1, 2, 3, 4, 5]
    assert pr.ContainerDevices.DESCRIPTOR.fields_by_name["device_ids"].number == 2
