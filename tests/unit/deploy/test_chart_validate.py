"""Every rendered manifest validates strictly for Kubernetes 1.30–1.33; the chart's CRD and
values schema are the ones the repository holds.

``kubernetes-validate`` bundles the built-in kinds' schemas, APIService (apiregistration.k8s.io)
and CustomResourceDefinition included. cert-manager's Certificate and Issuer are not built in:
they are checked for their group and kind only, and no other unknown kind is accepted.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from chart_helm import (
    CHART,
    KIND_VALUES,
    KUBERNETES,
    PRODUCTION_VALUES,
    REPO,
    needs_helm,
    render,
    render_fails,
)

from gpustack_core.modes import Manufacturer
from gpustack_vendors.loading import LibraryUnavailableError, open_backend

CRD_NAMES = (
    "devices.worker.gpustack.ai.yaml",
    "instances.worker.gpustack.ai.yaml",
    "instancetypeflavors.worker.gpustack.ai.yaml",
    "instancetypes.worker.gpustack.ai.yaml",
)
OPTIONAL_CRD_NAMES = ("metricaccesses.observability.gpustack.ai.yaml",)
"""Installed by a template only when its feature is on (``multiTenantMetrics.enabled``)."""
CERT_MANAGER = {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "Issuer")}
VALUE_SETS: dict[str, tuple[dict[str, Any], tuple[Path, ...]]] = {
    "defaults": ({}, ()),
    "kind-simulation": ({}, (KIND_VALUES,)),
    "production": ({}, (PRODUCTION_VALUES,)),
    "network-policy": (
        {
            "deviceManager": {
                "networkPolicy": {
                    "enabled": True,
                    "scrapers": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                            }
                        },
                        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                    ],
                    "extraIngress": [
                        {
                            "from": [{"ipBlock": {"cidr": "172.18.0.0/16"}}],
                            "ports": [{"protocol": "TCP", "port": 32443}],
                        }
                    ],
                }
            }
        },
        (KIND_VALUES,),
    ),
    "tls-and-extras": (
        {
            "imagePullSecrets": [{"name": "registry"}],
            "worker": {
                "logJson": True,
                "replicas": 2,
                "tls": {"secretName": "worker-tls", "caBundle": "Q0E="},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "podAnnotations": {"a": "b"},
            },
            "deviceManager": {
                "tls": {"secretName": "dm-tls"},
                "tolerations": [{"operator": "Exists"}],
                "priorityClassName": "system-node-critical",
                "manufacturers": {
                    "nvidia": {"runtimeClassName": "nvidia"},
                    "amd": {
                        "extraVolumes": [{"name": "rocm", "hostPath": {"path": "/opt/rocm"}}],
                        "extraVolumeMounts": [
                            {"name": "rocm", "mountPath": "/opt/rocm", "readOnly": True}
                        ],
                    },
                },
            },
        },
        (),
    ),
    "cert-manager": ({"worker": {"tls": {"certManager": {"enabled": True}}}}, ()),
    "multi-tenant-metrics": (
        {
            "multiTenantMetrics": {
                "enabled": True,
                "prometheusURL": "http://prometheus-operated.monitoring.svc:9090",
                "unisolatedDelivery": True,
                "tolerations": [{"operator": "Exists"}],
                "grafanaDatasources": {
                    "tenants": [{"namespace": "gpu-team", "tokenEnv": "GPU_TEAM_METRICS_TOKEN"}]
                },
            }
        },
        (),
    ),
}


@pytest.fixture(scope="module")
def kubernetes_validate() -> ModuleType:
    with warnings.catch_warnings():
        # Older releases import pkg_resources and distutils, which warn on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        module: ModuleType = pytest.importorskip("kubernetes_validate")
    return module


@needs_helm
@pytest.mark.parametrize("kubernetes", KUBERNETES)
@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_rendered_manifests_validate_strictly(
    kubernetes_validate: ModuleType, kubernetes: str, values: str
) -> None:
    overrides, files = VALUE_SETS[values]
    objects = render(
        overrides, files=files, extra=("--include-crds", "--kube-version", f"{kubernetes}.0")
    )
    kinds = {o["kind"] for o in objects}
    assert {"CustomResourceDefinition", "APIService", "DaemonSet", "Deployment"} <= kinds
    unknown = set()
    for obj in objects:
        try:
            assert kubernetes_validate.validate(obj, kubernetes, strict=True) == kubernetes
        except kubernetes_validate.SchemaNotFoundError:
            unknown.add((obj["apiVersion"], obj["kind"]))
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {where}: {exc.message}")
    assert unknown <= CERT_MANAGER, f"kinds kubernetes-validate does not know: {unknown}"
    if values == "cert-manager":
        assert unknown == CERT_MANAGER


def test_strict_validation_would_catch_a_misspelt_field(kubernetes_validate: ModuleType) -> None:
    service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1.worker.gpustack.ai"},
        "spec": {"group": "worker.gpustack.ai", "version": "v1", "versionPriorty": 200},
    }
    with pytest.raises(kubernetes_validate.ValidationError, match="versionPriorty"):
        kubernetes_validate.validate(service, KUBERNETES[0], strict=True)


# -- the CRD -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CRD_NAMES)
def test_the_charts_crd_is_the_repositorys_byte_for_byte(name: str) -> None:
    source = REPO / "clusters" / "crds" / name
    copy = CHART / "crds" / name
    assert not copy.is_symlink(), "helm packages a symlink's target only on some platforms"
    assert copy.read_bytes() == source.read_bytes(), (
        f"{copy.relative_to(REPO)} differs from {source.relative_to(REPO)}: run `just chart-crds`"
    )


def test_the_chart_ships_exactly_the_repositorys_crds() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(CRD_NAMES)
    assert sorted(p.name for p in (REPO / "clusters" / "crds").iterdir()) == sorted(
        (*CRD_NAMES, *OPTIONAL_CRD_NAMES)
    )
    optional = sorted(p.name for p in (CHART / "optional-crds").iterdir())
    assert optional == sorted(OPTIONAL_CRD_NAMES)


@needs_helm
def test_the_crd_ships_only_with_include_crds() -> None:
    assert all(o["kind"] != "CustomResourceDefinition" for o in render())
    crds = [o for o in render(extra=("--include-crds",)) if o["kind"] == "CustomResourceDefinition"]
    expected = [yaml.safe_load((REPO / "clusters" / "crds" / n).read_text()) for n in CRD_NAMES]
    key = lambda o: o["metadata"]["name"]  # noqa: E731
    assert sorted(crds, key=key) == sorted(expected, key=key)


# -- values.schema.json --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    document = json.loads((CHART / "values.schema.json").read_text())
    assert isinstance(document, dict)
    return document


@pytest.mark.parametrize(
    "path",
    [CHART / "values.yaml", KIND_VALUES, PRODUCTION_VALUES],
    ids=["defaults", "kind", "production"],
)
def test_the_shipped_values_meet_the_schema(schema: dict[str, Any], path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load(path.read_text()))


def test_every_key_of_the_default_values_is_in_the_schema(schema: dict[str, Any]) -> None:
    """``additionalProperties: false`` would reject the defaults' own keys if the two drifted;
    this names the drifted key instead."""

    def walk(values: Any, node: dict[str, Any], where: str) -> None:
        if not isinstance(values, dict) or "properties" not in node:
            return
        for key, value in values.items():
            assert key in node["properties"], f"{where}.{key} is not in values.schema.json"
            walk(value, node["properties"][key], f"{where}.{key}")

    walk(yaml.safe_load((CHART / "values.yaml").read_text()), schema, "values")


def _has_backend(manufacturer: str) -> bool:
    """Whether the image can open ``manufacturer`` at all: a missing library still counts."""
    try:
        open_backend(manufacturer).close()
    except LibraryUnavailableError as exc:
        return "no backend for manufacturer" not in str(exc)
    return True


def test_the_schema_names_the_manufacturers_the_daemons_have_a_backend_for(
    schema: dict[str, Any],
) -> None:
    known = sorted(m.value for m in Manufacturer if _has_backend(m.value))
    assert "mthreads" not in known  # a wire name without a backend: refused, not crash-looping
    assert sorted(schema["properties"]["simulate"]["propertyNames"]["enum"]) == known
    manufacturers = schema["properties"]["deviceManager"]["properties"]["manufacturers"]
    assert sorted(manufacturers["propertyNames"]["enum"]) == known


@needs_helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"deviceManager": {"networkPolicy": {"enable": True}}}, "enable"),
        ({"simulate": {"nvida": {"recording": "nvidia/t4.yaml"}}}, "nvida"),
        ({"worker": {"logLevel": "verbose"}}, "logLevel"),
        ({"deviceManager": {"monitorPeriod": "fast"}}, "fast"),
        ({"simulate": {"nvidia": {"recording": "/abs.yaml"}}}, "/abs.yaml"),
    ],
)
def test_helm_refuses_values_the_schema_does_not_allow(
    values: dict[str, Any], message: str
) -> None:
    assert message in render_fails(values)
