"""The chart, rendered: what each object must say for the daemons, the aggregator and RBAC.

Simulation mode is rendered from clusters/kind/values-simulate.yaml, the values the kind e2e
installs; real-hardware mode from the chart's defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
import yaml
from chart_helm import (
    CHART,
    KIND_VALUES,
    NAMESPACE,
    PRODUCTION_VALUES,
    REPO,
    find,
    helm,
    needs_helm,
    of_kind,
    render,
    render_fails,
)

from gpustack_cli.main import app
from gpustack_core.manufacturers import maker
from gpustack_devicemanager.daemon import ServeOptions
from gpustack_devicemanager.exporter import COMPONENT, COMPONENT_LABEL, MANUFACTURER_LABEL
from gpustack_simulator.recording import load_recording
from gpustack_vendors.bindings.rocm_smi import DEFAULT_PATHS as ROCM_SMI_PATHS

pytestmark = needs_helm

WORKER = "gpustack-operator-worker"
DM = "gpustack-operator-device-manager"
SPEC_SCRAPERS = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
]
PART_OF = "app.kubernetes.io/part-of"


def simulation() -> list[dict[str, Any]]:
    return render(files=(KIND_VALUES,))


def container(workload: dict[str, Any]) -> dict[str, Any]:
    [found] = workload["spec"]["template"]["spec"]["containers"]
    assert isinstance(found, dict)
    return found


def flags(args: list[str]) -> dict[str, str | None]:
    """``--name=value`` / ``--name`` arguments as a mapping (positional words skipped)."""
    out: dict[str, str | None] = {}
    for arg in args:
        if arg.startswith("--"):
            name, sep, value = arg.partition("=")
            out[name] = value if sep else None
    return out


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def _all_labelled(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, str]]]:
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        yield where, obj["metadata"].get("labels", {})
        template = obj.get("spec", {}).get("template")
        if isinstance(template, dict):
            yield f"{where} template", template["metadata"].get("labels", {})


# -- lint ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [None, KIND_VALUES, PRODUCTION_VALUES],
    ids=["defaults", "kind-simulation", "production"],
)
def test_helm_lint_strict(values: Any) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        args += ["-f", str(values)]
    done = helm(*args)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the Device Manager DaemonSets -----------------------------------------------------------


def test_simulation_renders_one_daemonset_per_manufacturer_replaying_its_recording() -> None:
    simulated = yaml.safe_load(KIND_VALUES.read_text())["simulate"]
    daemonsets = {d["metadata"]["name"]: d for d in of_kind(simulation(), "DaemonSet")}
    assert set(daemonsets) == {f"{DM}-{m}" for m in simulated}
    for manufacturer, entry in simulated.items():
        ds = daemonsets[f"{DM}-{manufacturer}"]
        pod = ds["spec"]["template"]
        args = container(ds)["args"]
        assert args[:2] == ["device-manager", "serve"]
        given = flags(args)
        assert given["--manufacturer"] == manufacturer
        assert given["--simulate"] == f"/app/recordings/{entry['recording']}"
        # Replayed rows are bound to the live processes of the Pods holding the devices.
        assert "--bind-replayed-pids" in given
        # The file ships in the image (recordings/ → /app/recordings) and is that vendor's.
        recording = REPO / "recordings" / entry["recording"]
        assert load_recording(recording).vendor == manufacturer
        # Simulation nodes are chosen by label.
        assert pod["spec"]["nodeSelector"] == {"gpustack.ai/simulate": manufacturer}
        # No vendor runtime on a node without the hardware.
        assert "runtimeClassName" not in pod["spec"]
        assert "NVIDIA_VISIBLE_DEVICES" not in env(container(ds))


def _check_device_manager(ds: dict[str, Any], manufacturer: str) -> None:
    pod = ds["spec"]["template"]
    labels = {COMPONENT_LABEL: COMPONENT, MANUFACTURER_LABEL: manufacturer}
    assert labels.items() <= ds["metadata"]["labels"].items()
    assert labels.items() <= pod["metadata"]["labels"].items()
    assert labels.items() <= ds["spec"]["selector"]["matchLabels"].items()
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["hostPID"] is True
    assert pod["spec"]["serviceAccountName"] == DM
    c = container(ds)
    variables = env(c)
    assert variables["KUBERNETES_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert variables["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert variables["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    secure_port = {f.name: f.default for f in dataclasses.fields(ServeOptions)}["secure_port"]
    assert c["ports"] == [{"name": "https", "containerPort": secure_port, "protocol": "TCP"}]
    assert flags(c["args"])["--secure-port"] == str(secure_port)
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        assert c[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    # Root, and said why in the template: hostPID plus every tenant's /proc and vendor rows.
    assert pod["spec"]["securityContext"]["runAsUser"] == 0
    # Privileged as the manufacturer's row says (docs/deploy.md, "Device nodes and privilege");
    # escalation is off wherever it is not (the API server refuses false beside privileged).
    simulated = "--bind-replayed-pids" in c["args"]
    row = maker(manufacturer)
    assert row is not None
    privileged = row.privileged and not simulated
    assert c["securityContext"]["privileged"] is privileged
    if not privileged:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # Root without any capability: /proc/<pid>/cgroup, stat and comm are world-readable.
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_simulated_device_managers_carry_the_production_shape() -> None:
    for ds in of_kind(simulation(), "DaemonSet"):
        _check_device_manager(ds, ds["metadata"]["labels"][MANUFACTURER_LABEL])


def test_named_capabilities_are_added_to_every_device_manager_and_others_refused() -> None:
    objects = render({"deviceManager": {"capabilities": ["SYS_PTRACE"]}})
    for ds in of_kind(objects, "DaemonSet"):
        assert container(ds)["securityContext"]["capabilities"] == {
            "drop": ["ALL"],
            "add": ["SYS_PTRACE"],
        }
    assert "capabilities" in render_fails({"deviceManager": {"capabilities": ["SYS_ADMIN"]}})


def test_real_hardware_device_managers_select_their_nodes_and_open_the_library() -> None:
    daemonsets = {d["metadata"]["name"]: d for d in of_kind(render(), "DaemonSet")}
    assert set(daemonsets) == {f"{DM}-nvidia", f"{DM}-amd"}
    for manufacturer in ("nvidia", "amd"):
        ds = daemonsets[f"{DM}-{manufacturer}"]
        _check_device_manager(ds, manufacturer)
        assert "--simulate" not in flags(container(ds)["args"])
        assert "--bind-replayed-pids" not in flags(container(ds)["args"])  # real hardware
    nvidia = daemonsets[f"{DM}-nvidia"]
    assert "nodeSelector" not in nvidia["spec"]["template"]["spec"]
    assert _selected_by(nvidia) == {
        "nvidia.com/gpu.present",  # GPU Feature Discovery, the GPU Operator's
        "feature.node.kubernetes.io/pci-10de.present",  # NFD, vendor-only PCI labels
        "feature.node.kubernetes.io/pci-0302_10de.present",  # NFD's default class_vendor
        "feature.node.kubernetes.io/pci-0300_10de.present",
    }
    assert env(container(nvidia))["NVIDIA_VISIBLE_DEVICES"] == "all"
    amd = daemonsets[f"{DM}-amd"]
    assert _selected_by(amd) == {
        "feature.node.kubernetes.io/amd-gpu",
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-0380_1002.present",
        "feature.node.kubernetes.io/pci-0300_1002.present",
        "feature.node.kubernetes.io/pci-1200_1002.present",
    }


def _selected_by(daemonset: dict[str, Any]) -> set[str]:
    """The label keys of a DaemonSet's required node affinity, one ORed term each = "true"."""
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    keys = set()
    for term in terms:
        [expression] = term["matchExpressions"]  # one label per term: any one suffices
        assert expression["operator"] == "In"
        assert expression["values"] == ["true"]
        keys.add(expression["key"])
    assert len(keys) == len(terms)
    return keys


def test_per_manufacturer_settings_reach_only_that_daemonset() -> None:
    objects = render(
        {
            "deviceManager": {
                "tolerations": [{"operator": "Exists"}],
                "manufacturers": {
                    "nvidia": {"runtimeClassName": "nvidia"},
                    "amd": {
                        "extraVolumes": [{"name": "rocm", "hostPath": {"path": "/opt/rocm"}}],
                        "extraVolumeMounts": [
                            {"name": "rocm", "mountPath": "/opt/rocm", "readOnly": True}
                        ],
                    },
                },
            }
        }
    )
    nvidia = find(objects, "DaemonSet", f"{DM}-nvidia")["spec"]["template"]["spec"]
    amd = find(objects, "DaemonSet", f"{DM}-amd")["spec"]["template"]["spec"]
    assert nvidia["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in amd
    assert {"name": "rocm", "hostPath": {"path": "/opt/rocm"}} in amd["volumes"]
    assert all(v["name"] != "rocm" for v in nvidia["volumes"])
    # Every Device Manager's tolerations, then the manufacturer's own.
    assert nvidia["tolerations"] == [
        {"operator": "Exists"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert amd["tolerations"] == [
        {"operator": "Exists"},
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]


@pytest.mark.parametrize("recording", ["/etc/passwd.yaml", "../../etc/x.yaml"])
def test_a_recording_outside_the_images_recordings_is_refused(recording: str) -> None:
    stderr = render_fails({"simulate": {"nvidia": {"recording": recording}}})
    assert "recording" in stderr


def test_every_flag_the_chart_passes_is_a_real_option() -> None:
    """A renamed CLI flag must break this test, not the rollout."""
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    worker_command = root.commands["worker"]
    dm_group = root.commands["device-manager"]
    assert isinstance(dm_group, typer.core.TyperGroup)
    serve = dm_group.commands["serve"]
    options = {
        # Both spellings of a boolean pair: --x and --no-x (secondary_opts).
        "worker": {o for p in worker_command.params for o in (*p.opts, *p.secondary_opts)},
        "device-manager": {o for p in serve.params for o in (*p.opts, *p.secondary_opts)},
    }
    full = {
        "worker": {"logJson": True, "tls": {"secretName": "w", "caBundle": "Zm9v"}},
        "deviceManager": {"logJson": True, "tls": {"secretName": "d"}},
        "kubelet": {"access": "direct", "port": 10250, "insecureTLS": True},
    }
    plugin_off = {"deviceManager": {"devicePlugin": {"enabled": False}}}
    for objects in (simulation(), render(full), render(plugin_off)):
        for workload in of_kind(objects, "DaemonSet") + of_kind(objects, "Deployment"):
            args = container(workload)["args"]
            assert set(flags(args)) <= options[args[0]], (workload["metadata"]["name"], args)


def _kubelet_rules(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """ClusterRole name → the kubelet's node subresources it grants (not ``nodes/status``,
    which the API server serves: the worker's node-capacity patch)."""
    return {
        role["metadata"]["name"]: {
            r
            for rule in role["rules"]
            for r in rule.get("resources", ())
            if r.startswith("nodes/") and r != "nodes/status"
        }
        for role in of_kind(objects, "ClusterRole")
        if role["metadata"]["name"] in {WORKER, "gpustack-operator-device-manager"}
    }


def test_kubelet_access_chooses_the_grant_and_the_flags_together() -> None:
    """proxy grants nodes/proxy only; direct grants nodes/stats only, and says so on argv.

    By default (issue #31, item 5) the Device Manager reads its own kubelet directly
    (nodes/stats: no token on a GPU node reaches every kubelet's exec) and the worker through
    the API server; each daemon's value switches its own grant and flags.
    """
    dm_role = "gpustack-operator-device-manager"
    defaults = render()
    assert _kubelet_rules(defaults) == {WORKER: {"nodes/proxy"}, dm_role: {"nodes/stats"}}
    for daemonset in of_kind(defaults, "DaemonSet"):
        given = flags(container(daemonset)["args"])
        assert given["--kubelet-access"] == "direct"
        assert given["--kubelet-port"] == "10250"
        assert "--kubelet-insecure-tls" not in given
    assert flags(container(find(defaults, "Deployment", WORKER))["args"])["--kubelet-access"] == (
        "proxy"
    )
    proxied = render({"deviceManager": {"kubeletAccess": "proxy"}})
    assert _kubelet_rules(proxied) == {WORKER: {"nodes/proxy"}, dm_role: {"nodes/proxy"}}
    for daemonset in of_kind(proxied, "DaemonSet"):
        given = flags(container(daemonset)["args"])
        assert given["--kubelet-access"] == "proxy"
        assert "--kubelet-port" not in given
    direct = render({"kubelet": {"access": "direct", "insecureTLS": True}})
    rules = _kubelet_rules(direct)
    assert len(rules) == 2
    assert all(grants == {"nodes/stats"} for grants in rules.values())
    for workload in of_kind(direct, "DaemonSet") + of_kind(direct, "Deployment"):
        given = flags(container(workload)["args"])
        assert given["--kubelet-access"] == "direct"
        assert given["--kubelet-port"] == "10250"
        assert "--kubelet-insecure-tls" in given
    for daemonset in of_kind(direct, "DaemonSet"):
        env = {e["name"]: e for e in container(daemonset)["env"]}
        assert env["KUBERNETES_NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    worker = flags(container(find(direct, "Deployment", WORKER))["args"])
    assert worker["--device-manager-monitor-period"] == "15s"
    render_fails({"kubelet": {"access": "sideways"}})
    render_fails({"deviceManager": {"kubeletAccess": "sideways"}})


# -- the worker ------------------------------------------------------------------------------


def test_the_worker_runs_as_non_root_and_serves_behind_443() -> None:
    objects = simulation()
    deployment = find(objects, "Deployment", WORKER)
    pod = deployment["spec"]["template"]
    c = container(deployment)
    assert c["args"][0] == "worker"
    given = flags(c["args"])
    assert given["--secure-port"] == "31443"
    assert given["--system-namespace"] == NAMESPACE
    # The admission webhook (on by default) needs a verifiable certificate: the chart issues it.
    assert given["--cert-dir"] == "/etc/gpustack-operator/tls"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] != 0
    assert "hostPID" not in pod["spec"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        assert c[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    service = find(objects, "Service", WORKER)
    [port] = service["spec"]["ports"]
    assert (port["port"], port["protocol"]) == (443, "TCP")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports[port["targetPort"]] == 31443
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert pod["spec"]["serviceAccountName"] == WORKER


def test_the_apiservice_skips_verification_of_the_self_signed_worker() -> None:
    # Self-signed at every start only with the admission webhook off (test_chart_admission.py
    # covers the default, a chart-issued certificate the aggregator verifies).
    objects = render({"worker": {"admissionWebhook": {"enabled": False}}}, files=(KIND_VALUES,))
    spec = find(objects, "APIService", "v1.worker.gpustack.ai")["spec"]
    assert spec["group"] == "worker.gpustack.ai"
    assert spec["version"] == "v1"
    assert spec["service"] == {"name": WORKER, "namespace": NAMESPACE, "port": 443}
    assert spec["groupPriorityMinimum"] == 1000
    assert spec["versionPriority"] == 200  # above the CRD's own v1alpha1 (100)
    assert spec["insecureSkipTLSVerify"] is True
    assert "caBundle" not in spec
    service = find(objects, "Service", spec["service"]["name"])
    assert spec["service"]["port"] in {p["port"] for p in service["spec"]["ports"]}


def test_a_serving_certificate_and_its_ca_make_the_aggregator_verify() -> None:
    objects = render({"worker": {"tls": {"secretName": "worker-tls", "caBundle": "Q0E="}}})
    spec = find(objects, "APIService", "v1.worker.gpustack.ai")["spec"]
    assert spec["caBundle"] == "Q0E="
    assert "insecureSkipTLSVerify" not in spec
    deployment = find(objects, "Deployment", WORKER)
    c = container(deployment)
    assert flags(c["args"])["--cert-dir"] == "/etc/gpustack-operator/tls"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "worker-tls"
    assert {"name": "tls", "mountPath": "/etc/gpustack-operator/tls", "readOnly": True} in c[
        "volumeMounts"
    ]


def test_cert_manager_issues_the_certificate_and_injects_its_ca() -> None:
    objects = render({"worker": {"tls": {"certManager": {"enabled": True}}}})
    service = find(objects, "APIService", "v1.worker.gpustack.ai")
    assert "insecureSkipTLSVerify" not in service["spec"]
    assert service["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{WORKER}"
    }
    certificate = find(objects, "Certificate", WORKER)
    assert f"{WORKER}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    issuer = find(objects, "Issuer", f"{WORKER}-selfsigned")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    volumes = find(objects, "Deployment", WORKER)["spec"]["template"]["spec"]["volumes"]
    secrets = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    assert secrets == {certificate["spec"]["secretName"]}


def test_a_ca_bundle_without_a_serving_certificate_is_refused() -> None:
    stderr = render_fails({"worker": {"tls": {"caBundle": "Q0E="}}})
    assert "caBundle" in stderr


# -- RBAC ------------------------------------------------------------------------------------


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _binds(binding: dict[str, Any], role_kind: str, role: str, account: str) -> None:
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": role_kind,
        "name": role,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]


def test_the_workers_rbac() -> None:
    objects = simulation()
    # Exactly the worker's calls (tests/integration/test_chart_least_privilege.py derives them
    # from a recorded run); the Device Manager Pods are listed in the release namespace only.
    assert _grants(find(objects, "ClusterRole", WORKER)) == {
        ("", "pods", "get"),
        ("", "nodes/proxy", "get"),
        ("metrics.k8s.io", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("worker.gpustack.ai", "instances", "get"),
        ("worker.gpustack.ai", "instances", "list"),
        ("worker.gpustack.ai", "instances", "watch"),
        # Writes through v1, made with the worker's account once the caller was authorized.
        ("worker.gpustack.ai", "instances", "create"),
        ("worker.gpustack.ai", "instances", "update"),
        ("worker.gpustack.ai", "instances", "patch"),
        ("worker.gpustack.ai", "instances", "delete"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        # Node capacity: the Devices by informer, each Node's companion resources patched.
        ("worker.gpustack.ai", "devices", "list"),
        ("worker.gpustack.ai", "devices", "watch"),
        ("", "nodes/status", "patch"),
    }
    features = find(objects, "Role", f"{WORKER}:nodefeatures")
    assert features["metadata"]["namespace"] == NAMESPACE
    assert _grants(features) == {
        ("nfd.k8s-sigs.io", "nodefeatures", verb) for verb in ("get", "create", "update")
    }
    _binds(
        find(objects, "RoleBinding", f"{WORKER}:nodefeatures"),
        "Role",
        features["metadata"]["name"],
        WORKER,
    )
    listing = find(objects, "Role", f"{WORKER}:device-managers")
    assert listing["metadata"]["namespace"] == NAMESPACE
    assert _grants(listing) == {("", "pods", "list"), ("", "pods", "watch")}
    _binds(
        find(objects, "RoleBinding", f"{WORKER}:device-managers"),
        "Role",
        listing["metadata"]["name"],
        WORKER,
    )
    _binds(find(objects, "ClusterRoleBinding", WORKER), "ClusterRole", WORKER, WORKER)
    _binds(
        find(objects, "ClusterRoleBinding", f"{WORKER}:auth-delegator"),
        "ClusterRole",
        "system:auth-delegator",
        WORKER,
    )
    reader = find(objects, "RoleBinding", f"{WORKER}:auth-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    _binds(reader, "Role", "extension-apiserver-authentication-reader", WORKER)
    find(objects, "ServiceAccount", WORKER)


def test_the_device_managers_rbac() -> None:
    objects = simulation()
    assert _grants(find(objects, "ClusterRole", DM)) == {
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "nodes/stats", "get"),  # its own kubelet, read directly (not nodes/proxy)
        ("", "nodes", "get"),
        ("worker.gpustack.ai", "devices", "get"),
        ("worker.gpustack.ai", "devices", "create"),
        ("worker.gpustack.ai", "devices", "update"),
        ("worker.gpustack.ai", "devices/status", "update"),
        ("worker.gpustack.ai", "instances", "get"),  # the exporter's current incarnations
        ("", "pods", "get"),  # the device plugin reads the Pod it allocates for
        ("", "pods", "patch"),  # and writes the allocation annotation on it
    }
    _binds(find(objects, "ClusterRoleBinding", DM), "ClusterRole", DM, DM)
    off = render({"deviceManager": {"devicePlugin": {"enabled": False}}}, files=(KIND_VALUES,))
    assert ("", "pods", "patch") not in _grants(find(off, "ClusterRole", DM))
    # Its NodeFeature is written in the release namespace only: a Role, not a ClusterRole.
    features = f"{DM}:nodefeatures"
    assert _grants(find(objects, "Role", features)) == {
        ("nfd.k8s-sigs.io", "nodefeatures", verb) for verb in ("get", "create", "update")
    }
    _binds(find(objects, "RoleBinding", features), "Role", features, DM)
    find(objects, "ServiceAccount", DM)


def test_the_device_managers_pod_patches_are_bound_to_its_node() -> None:
    """Issue #31, item 5: RBAC grants patch on every Pod; the policy narrows it to its node."""
    name = f"{DM}-own-node"
    policy = find(render(), "ValidatingAdmissionPolicy", name)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
    ]
    assert spec["matchConditions"] == [
        {
            "name": "device-manager",
            "expression": f"request.userInfo.username == 'system:serviceaccount:{NAMESPACE}:{DM}'",
        }
    ]
    [variable] = spec["variables"]
    assert (
        "request.userInfo.extra['authentication.kubernetes.io/node-name']"
        in (variable["expression"])
    )
    assert [v["expression"] for v in spec["validations"]] == [
        "variables.node != ''",
        "has(oldObject.spec.nodeName) && oldObject.spec.nodeName == variables.node",
    ]
    assert {v["reason"] for v in spec["validations"]} == {"Forbidden"}
    binding = find(render(), "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    # No Pod patches without the device plugin, and the policy can be left out.
    for values in (
        {"deviceManager": {"devicePlugin": {"enabled": False}}},
        {"deviceManager": {"devicePlugin": {"ownNodePolicy": False}}},
    ):
        names = {(o["kind"], o["metadata"]["name"]) for o in render(values)}
        assert ("ValidatingAdmissionPolicy", name) not in names
        assert ("ValidatingAdmissionPolicyBinding", name) not in names


def test_reading_metrics_is_aggregated_into_view_edit_and_admin() -> None:
    role = find(simulation(), "ClusterRole", "gpustack-operator-instances-reader")
    labels = role["metadata"]["labels"]
    for default in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{default}"] == "true"
    # The subresource is its own rule, written with the slash; `get instances` grants nothing
    # of it (docs/worker.md, the spec's "Scoping and authorization").
    assert {
        "apiGroups": ["worker.gpustack.ai"],
        "resources": ["instances/metrics"],
        "verbs": ["get"],
    } in role["rules"]
    assert _grants(role) == {
        ("worker.gpustack.ai", "instances", "get"),
        ("worker.gpustack.ai", "instances", "list"),
        ("worker.gpustack.ai", "instances", "watch"),
        ("worker.gpustack.ai", "instances/metrics", "get"),
    }


# -- the Device Manager Service and the NetworkPolicy --------------------------------------


def test_the_device_manager_service_carries_the_scrape_annotations() -> None:
    service = find(simulation(), "Service", DM)
    assert service["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "32443",
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "https",
    }
    assert service["spec"]["selector"] == {COMPONENT_LABEL: COMPONENT}
    for ds in of_kind(simulation(), "DaemonSet"):
        labels = ds["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()


def test_clusters_device_manager_service_yaml_is_the_charts_service() -> None:
    """The standalone manifest other tests and docs read is the chart's object, defaults."""
    committed = yaml.safe_load((REPO / "clusters" / "device-manager-service.yaml").read_text())
    rendered = find(render(), "Service", DM)
    assert rendered["spec"] == committed["spec"]
    for key in ("name", "namespace", "annotations"):
        assert rendered["metadata"][key] == committed["metadata"][key], key
    assert committed["metadata"]["labels"].items() <= rendered["metadata"]["labels"].items()


def test_the_network_policy_is_off_by_default() -> None:
    assert of_kind(simulation(), "NetworkPolicy") == []
    assert of_kind(render(), "NetworkPolicy") == []


def test_the_network_policy_admits_the_worker_and_each_scraper_on_the_secure_port_only() -> None:
    values = {
        "deviceManager": {
            "networkPolicy": {
                "enabled": True,
                "scrapers": [
                    *SPEC_SCRAPERS,
                    {
                        "namespaceSelector": {"matchLabels": {"team": "observability"}},
                        "podSelector": {"matchLabels": {"app": "vmagent"}},
                    },
                ],
            }
        }
    }
    objects = render(values, files=(KIND_VALUES,))
    [policy] = of_kind(objects, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == NAMESPACE
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert "egress" not in spec
    # Every manufacturer's Device Manager, and nothing else.
    selector = spec["podSelector"]["matchLabels"]
    for ds in of_kind(objects, "DaemonSet"):
        assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    worker_labels = find(objects, "Deployment", WORKER)["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= worker_labels.items()
    [rule] = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 32443}]
    worker_peer, *scrapers = rule["from"]
    assert set(worker_peer) == {"podSelector"}  # this namespace's worker Pods
    assert worker_peer["podSelector"]["matchLabels"].items() <= worker_labels.items()
    assert scrapers == values["deviceManager"]["networkPolicy"]["scrapers"]


def test_the_specs_example_and_extra_ingress_render_verbatim() -> None:
    extra = [{"from": [{"ipBlock": {"cidr": "172.18.0.0/16"}}], "ports": [{"port": 32443}]}]
    objects = render(
        {
            "deviceManager": {
                "networkPolicy": {"enabled": True, "scrapers": SPEC_SCRAPERS, "extraIngress": extra}
            }
        }
    )
    [policy] = of_kind(objects, "NetworkPolicy")
    first, *rest = policy["spec"]["ingress"]
    assert first["from"][1:] == SPEC_SCRAPERS
    assert first["ports"] == [{"protocol": "TCP", "port": 32443}]
    assert rest == extra


def test_a_different_secure_port_moves_everything_that_names_it() -> None:
    objects = render({"deviceManager": {"securePort": 9443, "networkPolicy": {"enabled": True}}})
    service = find(objects, "Service", DM)
    assert service["metadata"]["annotations"]["prometheus.io/port"] == "9443"
    [policy] = of_kind(objects, "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9443}]
    for ds in of_kind(objects, "DaemonSet"):
        c = container(ds)
        assert c["ports"][0]["containerPort"] == 9443
        assert flags(c["args"])["--secure-port"] == "9443"


# -- everything --------------------------------------------------------------------------------


def test_no_object_claims_to_be_part_of_an_instance() -> None:
    """``app.kubernetes.io/part-of`` names an Instance's UID on its Pods: the daemons' own
    Pods must never carry it."""
    for objects in (simulation(), render()):
        for where, labels in _all_labelled(objects):
            assert PART_OF not in labels, where


def test_every_namespaced_object_follows_the_release_namespace() -> None:
    objects = render(files=(KIND_VALUES,), extra=("--namespace", "gpu-ops"))
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    policy = find(objects, "ValidatingAdmissionPolicy", f"{DM}-own-node")
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        f"request.userInfo.username == 'system:serviceaccount:gpu-ops:{DM}'"
    )
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None, obj["metadata"]["name"]
        elif obj["metadata"]["name"] == f"{WORKER}:auth-reader":
            assert namespace == "kube-system"
        else:
            assert namespace == "gpu-ops", f"{obj['kind']}/{obj['metadata']['name']}"
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "gpu-ops"
    assert find(objects, "APIService", "v1.worker.gpustack.ai")["spec"]["service"]["namespace"] == (
        "gpu-ops"
    )
    worker = container(find(objects, "Deployment", WORKER))
    assert flags(worker["args"])["--system-namespace"] == "gpu-ops"


# -- production defaults -----------------------------------------------------------------------


def _pod(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, kind, name)["spec"]["template"]["spec"]
    return spec


def _tolerates(pod: dict[str, Any], key: str, effect: str) -> bool:
    """Kubernetes' ToleratesTaint for a taint ``key`` with any value."""
    return any(
        t.get("effect", effect) == effect
        and (
            (t.get("operator") == "Exists" and t.get("key", key) == key)
            or (t.get("key") == key and t.get("operator", "Equal") == "Equal" and "value" in t)
        )
        for t in pod.get("tolerations", [])
    )


def test_the_default_render_tolerates_each_manufacturers_gpu_taint_and_no_other() -> None:
    objects = render()
    nvidia = _pod(objects, "DaemonSet", f"{DM}-nvidia")
    amd = _pod(objects, "DaemonSet", f"{DM}-amd")
    assert _tolerates(nvidia, "nvidia.com/gpu", "NoSchedule")
    assert _tolerates(amd, "amd.com/gpu", "NoSchedule")
    assert not _tolerates(nvidia, "amd.com/gpu", "NoSchedule")
    assert not _tolerates(amd, "nvidia.com/gpu", "NoSchedule")
    assert not _tolerates(nvidia, "nvidia.com/gpu", "NoExecute")


def test_the_default_render_sets_the_priority_classes() -> None:
    objects = render()
    assert _pod(objects, "Deployment", WORKER)["priorityClassName"] == "system-cluster-critical"
    for ds in of_kind(objects, "DaemonSet"):
        assert ds["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"


def test_the_worker_runs_two_replicas_spread_with_a_disruption_budget() -> None:
    objects = render()
    deployment = find(objects, "Deployment", WORKER)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    pdb = find(objects, "PodDisruptionBudget", WORKER)
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    [term] = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    recreate = render({"worker": {"updateStrategy": {"type": "Recreate"}}})
    assert find(recreate, "Deployment", WORKER)["spec"]["strategy"] == {"type": "Recreate"}
    # One replica: no budget, which would block every drain.
    assert not of_kind(render({"worker": {"replicas": 1}}), "PodDisruptionBudget")


def test_pod_labels_annotations_and_update_strategy_reach_the_pods() -> None:
    objects = render(
        {
            "worker": {"podLabels": {"team": "a"}},
            "deviceManager": {
                "podLabels": {"team": "b"},
                "updateStrategy": {"type": "OnDelete"},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["gpu"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            },
        }
    )
    worker = find(objects, "Deployment", WORKER)["spec"]["template"]["metadata"]["labels"]
    assert worker["team"] == "a"
    for ds in of_kind(objects, "DaemonSet"):
        assert ds["spec"]["template"]["metadata"]["labels"]["team"] == "b"
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
        assert "nodeAffinity" in ds["spec"]["template"]["spec"]["affinity"]
        # The selector labels stay the chart's: a pod label never changes which Pods it owns.
        assert "team" not in ds["spec"]["selector"]["matchLabels"]


def test_mthreads_is_refused_it_has_no_backend() -> None:
    stderr = render_fails(
        {
            "deviceManager": {
                "manufacturers": {"mthreads": {"enabled": True, "nodeSelector": {"a": "b"}}}
            }
        }
    )
    assert "mthreads" in stderr


@pytest.mark.parametrize("manufacturer", ["hygon", "ascend"])
def test_an_enabled_manufacturer_without_any_node_selection_is_refused(manufacturer: str) -> None:
    stderr = render_fails({"deviceManager": {"manufacturers": {manufacturer: {"enabled": True}}}})
    assert f"/deviceManager/manufacturers/{manufacturer}" in stderr
    assert "nodeSelector" in stderr
    # A node affinity selects nodes too.
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
            }
        }
    }
    objects = render(
        {
            "deviceManager": {
                "manufacturers": {manufacturer: {"enabled": True, "affinity": affinity}}
            }
        }
    )
    assert _pod(objects, "DaemonSet", f"{DM}-{manufacturer}")["affinity"] == affinity


def _library_mount(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    volumes = [v for v in pod["volumes"] if v["name"] == "vendor-library"]
    mounts = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "vendor-library"]
    if not volumes and not mounts:
        return None
    [volume], [mount] = volumes, mounts
    return volume, mount


def test_amd_mounts_the_hosts_rocm_read_only_where_the_bindings_look() -> None:
    amd = _pod(render(), "DaemonSet", f"{DM}-amd")
    found = _library_mount(amd)
    assert found is not None
    volume, mount = found
    assert volume["hostPath"] == {"path": "/opt/rocm", "type": "Directory"}
    assert mount == {"name": "vendor-library", "mountPath": "/opt/rocm", "readOnly": True}
    # The binding's own default search path lies under the mount.
    assert any(p.startswith(mount["mountPath"] + "/") for p in ROCM_SMI_PATHS)
    # NVIDIA's library comes from the container toolkit: nothing is mounted.
    assert _library_mount(_pod(render(), "DaemonSet", f"{DM}-nvidia")) is None


def test_the_configured_library_path_is_mounted_and_not_in_simulation() -> None:
    objects = render(
        {"deviceManager": {"manufacturers": {"amd": {"libraryPath": "/usr/lib/rocm"}}}}
    )
    found = _library_mount(_pod(objects, "DaemonSet", f"{DM}-amd"))
    assert found is not None
    assert found[0]["hostPath"]["path"] == found[1]["mountPath"] == "/usr/lib/rocm"
    simulated = render({"simulate": {"amd": {"recording": "amd/rx7800xt.yaml"}}})
    assert _library_mount(_pod(simulated, "DaemonSet", f"{DM}-amd")) is None
    assert "libraryPath" in render_fails(
        {"deviceManager": {"manufacturers": {"amd": {"libraryPath": "opt/rocm"}}}}
    )


# -- Prometheus Operator ---------------------------------------------------------------------


def test_no_monitor_objects_by_default() -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PodMonitor"}


@pytest.mark.parametrize(
    ("kind", "key"), [("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")]
)
def test_a_monitor_scrapes_every_device_manager_over_https(kind: str, key: str) -> None:
    objects = render(
        {
            "monitoring": {
                key: {
                    "enabled": True,
                    "labels": {"release": "kube-prometheus-stack"},
                    "interval": "15s",
                    "relabelings": [{"action": "labeldrop", "regex": "pod"}],
                }
            }
        }
    )
    monitor = find(objects, kind, DM)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    # It selects exactly what the Service (or the Pods) carry, and nothing else.
    if kind == "ServiceMonitor":
        targets = [find(objects, "Service", DM)["metadata"]["labels"]]
        [endpoint] = monitor["spec"]["endpoints"]
        port_names = {p["name"] for p in find(objects, "Service", DM)["spec"]["ports"]}
    else:
        targets = [
            d["spec"]["template"]["metadata"]["labels"] for d in of_kind(objects, "DaemonSet")
        ]
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        port_names = {
            p["name"] for d in of_kind(objects, "DaemonSet") for p in container(d)["ports"]
        }
    assert all(selector.items() <= labels.items() for labels in targets)
    assert (
        not selector.items()
        <= find(objects, "Deployment", WORKER)["spec"]["template"]["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert endpoint["port"] in port_names
    assert (endpoint["scheme"], endpoint["path"], endpoint["interval"]) == (
        "https",
        "/metrics",
        "15s",
    )
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert endpoint["relabelings"] == [{"action": "labeldrop", "regex": "pod"}]
    assert "honorLabels" not in endpoint


def test_a_monitor_verifies_with_the_given_ca() -> None:
    objects = render(
        {
            "monitoring": {
                "serviceMonitor": {
                    "enabled": True,
                    "tls": {"caSecret": {"name": "dm-ca"}, "serverName": "dm"},
                }
            }
        }
    )
    [endpoint] = find(objects, "ServiceMonitor", DM)["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "dm-ca", "key": "ca.crt"}},
        "serverName": "dm",
    }


def test_both_monitors_at_once_are_refused() -> None:
    stderr = render_fails(
        {"monitoring": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}}
    )
    assert "enable one" in stderr


def test_both_daemons_learn_their_pod_ip_for_the_certificate() -> None:
    objects = render()
    for workload in of_kind(objects, "DaemonSet") + of_kind(objects, "Deployment"):
        env_vars = {e["name"]: e for e in container(workload).get("env", [])}
        assert env_vars["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_the_device_plugin_mounts_the_kubelets_sockets() -> None:
    (daemonset, *_) = [o for o in simulation() if o["kind"] == "DaemonSet"]
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert "--device-plugin" in container["args"]
    assert "--kube-socket=/var/lib/kubelet/device-plugins/kubelet.sock" in container["args"]
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in container["args"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["device-plugins"] == "/var/lib/kubelet/device-plugins"
    assert mounts["pod-resources"] == "/var/lib/kubelet/pod-resources"
    volumes = {v["name"]: v.get("hostPath") for v in spec["volumes"]}
    assert volumes["device-plugins"] == {"path": "/var/lib/kubelet/device-plugins",
                                         "type": "Directory"}  # fmt: skip
    off = render({"deviceManager": {"devicePlugin": {"enabled": False}}}, files=(KIND_VALUES,))
    (daemonset, *_) = [o for o in off if o["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert "--no-device-plugin" in container["args"]
    assert "device-plugins" not in {m["name"] for m in container["volumeMounts"]}
