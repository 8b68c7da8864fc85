"""Device nodes and privilege per manufacturer (issue #31, item 4).

The chart mounts what each manufacturer's library needs and runs privileged where the vendor's
own exporter does, from ``manufacturers/device-access.json``; that file is generated from the
core table (:mod:`gpustack_core.manufacturers`), and every rendered DaemonSet is compared with
the table's row, not with the file.
"""

from __future__ import annotations

from typing import Any

import pytest
from chart_helm import CHART, find, needs_helm, render

from gpustack_core.manufacturers import Maker, device_access_json, with_backend

DM = "gpustack-operator-device-manager"
BACKENDS = [row.name for row in with_backend()]


def test_the_charts_device_access_is_the_core_table() -> None:
    path = CHART / "manufacturers" / "device-access.json"
    assert path.read_text() == device_access_json(), (
        "regenerate: .venv/bin/python -c 'from gpustack_core.manufacturers import "
        'device_access_json as m; open("clusters/chart/manufacturers/device-access.json", "w")'
        ".write(m())'"
    )


def _enabled(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "deviceManager": {
            "manufacturers": {name: {"enabled": True, "nodeSelector": {"gpu": name}, **extra}}
        }
    }


def _pod(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "DaemonSet", f"{DM}-{name}")["spec"]["template"]["spec"]
    return spec


def _device_mounts(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(hostPath, type, mountPath)`` of every host-dev-* volume, in order."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = pod["containers"][0]["volumeMounts"]
    return [
        (
            volumes[m["name"]]["hostPath"]["path"],
            volumes[m["name"]]["hostPath"]["type"],
            m["mountPath"],
        )
        for m in mounts
        if m["name"].startswith("host-dev-")
    ]


def _expected(row: Maker) -> list[tuple[str, str, str]]:
    if row.nodes_from_runtime:
        return []
    return [
        (n.path, "Directory" if n.directory else "CharDevice", n.path)
        for n in row.library_nodes
        if "{index}" not in n.path
    ]


@needs_helm
@pytest.mark.parametrize("row", with_backend(), ids=BACKENDS)
def test_each_manufacturer_gets_its_rows_devices_and_privilege(row: Maker) -> None:
    pod = _pod(render(_enabled(row.name)), row.name)
    context = pod["containers"][0]["securityContext"]
    assert context["privileged"] is row.privileged
    # The API server refuses allowPrivilegeEscalation: false beside privileged: true.
    assert ("allowPrivilegeEscalation" in context) is not row.privileged
    assert _device_mounts(pod) == _expected(row)


@needs_helm
def test_the_defaults_mount_amds_kfd_and_dri_and_nothing_for_nvidia() -> None:
    objects = render()
    amd, nvidia = _pod(objects, "amd"), _pod(objects, "nvidia")
    assert _device_mounts(amd) == [
        ("/dev/kfd", "CharDevice", "/dev/kfd"),
        ("/dev/dri", "Directory", "/dev/dri"),
    ]
    assert amd["containers"][0]["securityContext"]["privileged"] is True
    assert _device_mounts(nvidia) == []
    assert nvidia["containers"][0]["securityContext"]["privileged"] is False


@needs_helm
def test_privilege_can_be_turned_off_and_the_mounts_stay() -> None:
    pod = _pod(render(_enabled("ascend", privileged=False)), "ascend")
    context = pod["containers"][0]["securityContext"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert [m[0] for m in _device_mounts(pod)] == [
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    ]


@needs_helm
def test_a_simulated_manufacturer_needs_neither() -> None:
    objects = render({"simulate": {"cambricon": {"recording": "cambricon/x.yaml"}}})
    pod = _pod(objects, "cambricon")
    assert pod["containers"][0]["securityContext"]["privileged"] is False
    assert _device_mounts(pod) == []
