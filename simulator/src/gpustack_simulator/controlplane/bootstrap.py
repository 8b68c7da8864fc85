"""What a cluster administrator installs before the daemons start: the chart's objects, users.

The chart is rendered with helm exactly as ``helm install`` would (same release name and
namespace), and every object that configures the API server is applied as rendered: CRDs,
ServiceAccounts, ClusterRoles, Roles and their bindings, the APIService, the webhook
configurations, the Services, the Settings. What needs a kubelet and an image (Deployments,
DaemonSets, the PodDisruptionBudget) is not applied; those daemons run as local processes with
the credentials the chart gives their ServiceAccounts, rendered with one value of their own:
``deviceManager.kubeletAccess=proxy`` (:data:`VALUES`), because the simulated Device Managers
read their node's kubelet summary through the API server's node proxy, where the node agent
answers it, and the chart's default (``direct``) grants only ``nodes/stats``. Three edits are
made, each because this machine has no Service network:

- the worker's Service becomes an ``ExternalName`` naming the loopback address the worker
  listens on, on the worker's port (kube-aggregator and the webhook dispatcher dial
  ``<externalName>:<port>`` and still verify ``<service>.<namespace>.svc``);
- the APIService and webhooks point at that port and carry the worker's CA as ``caBundle``
  (the chart fills it from its generated Secret or cert-manager, neither of which runs here).

Scenario users get static tokens (``--token-auth-file``) and their scenario rules as RBAC
ClusterRoles and (Role)Bindings, so the real authorizer decides for them too.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpustack_simulator.scenario.schema import MASTERS, Rule, UserDoc

RELEASE = "gpustack-operator"
WORKER_SERVICE = "gpustack-operator-worker"
VALUES = ("--set", "deviceManager.kubeletAccess=proxy")
"""The values ``helm template`` is given: how the simulated daemons reach their kubelets."""
APPLIED_KINDS = frozenset(
    {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "Service",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)
"""What of the rendered chart is applied: the API server's configuration, no workloads."""
SKIPPED_SECRETS = frozenset({"gpustack-operator-worker-generated-tls"})
"""The chart's self-generated worker TLS: the worker here uses the run's own pair."""
AFTER_SCENARIO = frozenset({f"{RELEASE}-device-manager-allocation-record"})
"""Admission policies applied only once the scenario's Pods exist: the allocation-record policy
refuses anyone but the Device Manager a Pod created with its grant annotation, and a scenario's
running Pods are created by the administrator with the grants they already hold (a cluster
where the Pods were granted before the policy was installed)."""


def after_scenario(
    objects: Iterable[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``objects`` split in two: those to apply now, and the :data:`AFTER_SCENARIO` policies."""
    now: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []
    for obj in objects:
        held = str(obj.get("kind", "")).startswith("ValidatingAdmissionPolicy") and (
            obj.get("metadata", {}).get("name") in AFTER_SCENARIO
        )
        (later if held else now).append(dict(obj))
    return now, later


class BootstrapError(Exception):
    """A render or an apply failed; the message has the tool's own words."""


def render_chart(helm: Path, chart: Path, namespace: str) -> list[dict[str, Any]]:
    """``helm template`` of the chart (CRDs included), as a list of objects."""
    done = subprocess.run(
        [
            str(helm),
            "template",
            RELEASE,
            str(chart),
            "--namespace",
            namespace,
            "--include-crds",
            *VALUES,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BootstrapError(f"helm template failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if isinstance(d, dict)]


def for_this_machine(
    objects: Iterable[Mapping[str, Any]],
    *,
    worker_port: int,
    worker_ca: bytes,
    worker_host: str = "127.0.0.1",
) -> list[dict[str, Any]]:
    """The rendered objects to apply, with the worker reached at ``worker_host:worker_port``."""
    bundle = base64.b64encode(worker_ca).decode()
    kept: list[dict[str, Any]] = []
    for original in objects:
        obj: dict[str, Any] = yaml.safe_load(yaml.safe_dump(dict(original)))  # a deep copy
        kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
        if kind not in APPLIED_KINDS or (kind == "Secret" and name in SKIPPED_SECRETS):
            continue
        if kind == "Service" and name == WORKER_SERVICE:
            obj["spec"] = {
                "type": "ExternalName",
                "externalName": worker_host,
                "ports": [{"name": "https", "port": worker_port, "protocol": "TCP"}],
            }
        elif kind == "APIService":
            service = obj["spec"].setdefault("service", {})
            service["port"] = worker_port
            obj["spec"]["caBundle"] = bundle
            obj["spec"].pop("insecureSkipTLSVerify", None)
            obj.get("metadata", {}).get("annotations", {}).pop(
                "cert-manager.io/inject-ca-from", None
            )
        elif kind in {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}:
            obj.get("metadata", {}).get("annotations", {}).pop(
                "cert-manager.io/inject-ca-from", None
            )
            for webhook in obj.get("webhooks") or ():
                client = webhook.setdefault("clientConfig", {})
                if "service" in client:
                    client["service"]["port"] = worker_port
                client["caBundle"] = bundle
        kept.append(obj)
    return kept


def _rule(rule: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiGroups": list(rule.api_groups),
        "resources": list(rule.resources),
        "verbs": list(rule.verbs),
    }
    if rule.resource_names:
        out["resourceNames"] = list(rule.resource_names)
    return out


def user_rbac(users: Sequence[UserDoc], skip: Iterable[str]) -> list[dict[str, Any]]:
    """Each user's scenario rules as a ClusterRole, bound cluster-wide or per namespace."""
    skipped = set(skip)
    objects: list[dict[str, Any]] = []
    for user in users:
        if user.name in skipped or MASTERS in user.groups or not user.rules:
            continue
        cluster = [r for r in user.rules if not r.namespaces]
        role = f"gpustack-simulator:user:{user.name}"
        subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user.name}]
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        if cluster:
            objects.append(_cluster_role(role, cluster))
            objects.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": role},
                    "roleRef": ref,
                    "subjects": subject,
                }
            )
        namespaces = sorted({ns for r in user.rules for ns in r.namespaces})
        for namespace in namespaces:
            scoped = [r for r in user.rules if namespace in r.namespaces]
            name = f"{role}:{namespace}"
            objects.append(_cluster_role(name, scoped))
            objects.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": namespace},
                    "roleRef": {**ref, "name": name},
                    "subjects": subject,
                }
            )
    return objects


def _cluster_role(name: str, rules: Sequence[Rule]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [_rule(r) for r in rules],
    }


def token_file(users: Sequence[UserDoc], tokens: Mapping[str, str]) -> str:
    """``--token-auth-file`` lines: ``token,user,uid,"group1,group2"``."""
    lines = []
    for user in users:
        token = tokens[user.name]
        groups = ",".join(g for g in user.groups if g != "system:authenticated")
        lines.append(f'{token},{user.name},{user.name},"{groups}"')
    return "\n".join(lines) + "\n"


def namespace(name: str) -> dict[str, Any]:
    """A Namespace object."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


class Kubectl:
    """The real kubectl, as the administrator (a client certificate in system:masters)."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Run ``kubectl args…``; ``BootstrapError`` with its stderr when it fails."""
        done = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise BootstrapError(f"kubectl {' '.join(args[:3])} failed: {done.stderr.strip()}")
        return done.stdout

    def apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        """Server-side apply, as one field manager (large CRDs fit no annotation)."""
        if not objects:
            return
        stream = yaml.safe_dump_all([dict(o) for o in objects], sort_keys=False)
        self(
            "apply", "--server-side", "--force-conflicts", "--field-manager=gpustack-bootstrap",
            "-f", "-", stdin=stream,
        )  # fmt: skip

    def apply_each(self, objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Apply one object at a time; ``kind/namespace/name`` → the server's refusal, if any.

        For the scenario's own objects: the stand-in takes what a scenario pre-renders as
        given, the real server runs its validation and webhooks on each, and one refusal must
        not cost the rest.
        """
        refused: dict[str, str] = {}
        for obj in objects:
            meta = obj.get("metadata") or {}
            key = f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"
            try:
                self.apply([obj])
            except BootstrapError as exc:
                refused[key] = str(exc).split("failed: ", 1)[-1]
        return refused

    def create_token(
        self, namespace: str, account: str, duration: str = "24h", *, pod: str | None = None
    ) -> str:
        """A bound ServiceAccount token from the TokenRequest API (``kubectl create token``).

        With ``pod``, bound to that Pod of ``namespace``, as the kubelet mounts a Pod's token:
        kube-apiserver then adds the Pod's node to the user (``authentication.kubernetes.io/
        node-name``), which the chart's own-node policy checks the Device Manager's patches by.
        """
        args = ["create", "token", account, "-n", namespace, f"--duration={duration}"]
        if pod is not None:
            uid = self("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.metadata.uid}")
            args += ["--bound-object-kind=Pod", f"--bound-object-name={pod}",
                     f"--bound-object-uid={uid.strip()}"]  # fmt: skip
        return self(*args).strip()
