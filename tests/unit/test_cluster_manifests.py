"""The committed cluster manifests say what the docs and the daemon say they do."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack_devicemanager.daemon import ServeOptions
from gpustack_devicemanager.exporter import COMPONENT, COMPONENT_LABEL

SERVICE = Path(__file__).resolve().parents[2] / "clusters" / "device-manager-service.yaml"


@pytest.fixture(scope="module")
def service() -> dict[str, Any]:
    document = yaml.safe_load(SERVICE.read_text())
    assert isinstance(document, dict)
    return document


def _default_secure_port() -> int:
    defaults = {f.name: f.default for f in dataclasses.fields(ServeOptions)}
    port = defaults["secure_port"]
    assert isinstance(port, int)
    return port


def test_service_identity_and_routing(service: dict[str, Any]) -> None:
    assert service["apiVersion"] == "v1"
    assert service["kind"] == "Service"
    assert service["metadata"]["name"] == "gpustack-operator-device-manager"
    assert service["metadata"]["namespace"] == "gpustack-system"
    # The same label the exporter's role rule finds Device Manager Pods by.
    assert service["spec"]["selector"] == {COMPONENT_LABEL: COMPONENT}
    assert service["spec"]["ports"] == [
        {"name": "https", "protocol": "TCP", "port": 443, "targetPort": "https"}
    ]


def test_prometheus_annotations(service: dict[str, Any]) -> None:
    annotations = service["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "32443",
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "https",
    }
    # Kubernetes annotations are strings: an unquoted `true` or 32443 would be refused.
    assert all(isinstance(v, str) for v in annotations.values())
    # The secure port, not the Service's 443: the daemon's own default.
    assert annotations["prometheus.io/port"] == str(_default_secure_port())


def test_the_specs_relabelling_lands_on_the_secure_port(service: dict[str, Any]) -> None:
    """The reference configuration's address rule, applied as Prometheus does (full match)."""
    port = service["metadata"]["annotations"]["prometheus.io/port"]
    endpoint = f"10.0.0.11:{service['spec']['ports'][0]['port']}"
    match = re.fullmatch(r"([^:]+)(?::\d+)?;(\d+)", f"{endpoint};{port}")
    assert match is not None
    assert match.expand(r"\1:\2") == "10.0.0.11:32443"


def test_kubernetes_validate_accepts_the_service(service: dict[str, Any]) -> None:
    # kubernetes-validate is in the dev group: validated offline against the bundled schemas.
    with warnings.catch_warnings():
        # Older releases import pkg_resources and distutils, which warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        utils = pytest.importorskip(
            "kubernetes_validate.utils", reason="kubernetes-validate is not installed"
        )
        version = str(utils.latest_version())
        utils.validate(service, version, strict=True)
