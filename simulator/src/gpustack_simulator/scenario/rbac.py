"""RBAC as the API server's authorizer decides it, and the users every scenario carries.

The stand-in authorizes every request and answers SubjectAccessReviews from these rules, so a
daemon that needs a permission its chart does not grant fails here as it would on a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpustack_core import contract
from gpustack_core.instance_metrics import API_GROUP
from gpustack_simulator.scenario.schema import MASTERS, SYSTEM_NAMESPACE, Rule, UserDoc


def _rule_matches(
    rule: Rule, verb: str, group: str, resource: str, subresource: str, namespace: str, name: str
) -> bool:
    """Kubernetes' ``RuleAllows``: a rule on ``instances`` never grants ``instances/metrics``."""
    if rule.namespaces and namespace not in rule.namespaces:
        return False
    if "*" not in rule.verbs and verb not in rule.verbs:
        return False
    if "*" not in rule.api_groups and group not in rule.api_groups:
        return False
    combined = f"{resource}/{subresource}" if subresource else resource
    resource_ok = any(
        spelled in {"*", combined} or (subresource != "" and spelled == f"*/{subresource}")
        for spelled in rule.resources
    )
    if not resource_ok:
        return False
    return not rule.resource_names or name in rule.resource_names


def allowed(
    users_rules: Mapping[str, Sequence[Rule]],
    user: str,
    groups: Sequence[str],
    *,
    verb: str,
    group: str,
    resource: str,
    subresource: str = "",
    namespace: str = "",
    name: str = "",
) -> tuple[bool, str]:
    """Decide a SubjectAccessReview; the string is the review's ``reason``.

    Rules are additive and there is no deny, exactly as RBAC: the first rule that matches
    allows, and ``system:masters`` is allowed everything without any rule, as the API server's
    superuser group is. The denial reason names what was asked, so a failing test says which
    permission the scenario's user lacked.
    """
    if MASTERS in groups:
        return True, f'allowed: user "{user}" is in group "{MASTERS}"'
    for index, rule in enumerate(users_rules.get(user, ())):
        if _rule_matches(rule, verb, group, resource, subresource, namespace, name):
            return True, f'allowed by rule {index} of user "{user}"'
    what = f"{resource}/{subresource}" if subresource else resource
    where = f' in namespace "{namespace}"' if namespace else ""
    return False, (
        f'user "{user}" has no rule allowing "{verb}" on "{what}" in API group "{group}"{where}'
    )


def _rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], **kw: Any) -> Rule:
    return Rule(api_groups=tuple(groups), resources=tuple(resources), verbs=tuple(verbs), **kw)


def _daemon_rules() -> tuple[Rule, ...]:
    """What the worker and the Device Manager call, and nothing else.

    The chart grants the same narrow roles; the stand-in grants only what the daemons use so a
    new, unreviewed call shows up as a 403 in a test rather than passing unnoticed.
    """
    read = ("get", "list", "watch")
    return (
        _rule([""], ["pods"], read),
        # The Device Manager's device plugin writes each Pod's allocation annotation.
        _rule([""], ["pods"], ["patch"]),
        _rule([""], ["nodes"], ["get", "list", "watch"]),
        _rule([""], ["nodes/proxy"], ["get"]),
        # Publishing node features (the NodeFeatures in the system namespace) and Devices.
        _rule(
            ["nfd.k8s-sigs.io"],
            ["nodefeatures"],
            ["get", "create", "update"],
            namespaces=(SYSTEM_NAMESPACE,),
        ),
        _rule([API_GROUP], ["devices"], ["get", "create", "update"]),
        _rule([API_GROUP], ["devices/status"], ["update"]),
        _rule([""], ["configmaps"], ["get"], namespaces=("kube-system",)),
        _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
        _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
        _rule(["metrics.k8s.io"], ["pods"], ["get", "list"]),
        _rule([API_GROUP], ["instances"], read),
        _rule([API_GROUP], ["instances/metrics"], ["get"]),
    )


def _worker_rules() -> tuple[Rule, ...]:
    """The daemons' reads, plus what only the worker writes: its controller and its webhook."""
    read = ("get", "list", "watch")
    return (
        *_daemon_rules(),
        # The Pod admission webhook's fold reads the cards' memory.
        _rule([API_GROUP], ["devices"], ["list"]),
        # Node capacity: the companion resources patched into each Node's status from its
        # Devices (gpustack_worker.nodecapacity), both read by informers.
        _rule([API_GROUP], ["devices"], ["watch"]),
        _rule([""], ["nodes/status"], ["patch"]),
        # The Instance controller: the Pods, Services and policies it renders, the Instances'
        # stop and status, their types, Events, its Lease and the operator Settings.
        _rule([""], ["pods"], ["create", "delete"]),
        _rule([""], ["services"], [*read, "create", "patch", "delete"]),
        _rule(["networking.k8s.io"], ["networkpolicies"], [*read, "create", "update", "delete"]),
        _rule([API_GROUP], ["instances"], ["patch"]),
        _rule([API_GROUP], ["instances/status"], ["patch"]),
        # Writes of Instances through v1, after the caller's SubjectAccessReview.
        _rule([API_GROUP], ["instances"], ["create", "update", "delete"]),
        _rule([API_GROUP], ["instancetypes"], read),
        # Events: posted, and counted again (count, lastTimestamp) when a refusal repeats.
        _rule([""], ["events"], ["create", "patch"]),
        _rule(["node.k8s.io"], ["runtimeclasses"], ["list"]),
        # The gpustack-node-devices AdmissionCheck (gpustack_worker.admissioncheck): its object
        # and Active condition, the Workloads' check entries, the flavors' nodeLabels, the
        # Devices ledgers read uncached (list), and the per-card fit labels on Nodes.
        _rule(["kueue.x-k8s.io"], ["admissionchecks"], ["list", "watch", "create"]),
        _rule(["kueue.x-k8s.io"], ["admissionchecks/status"], ["patch"]),
        _rule(["kueue.x-k8s.io"], ["workloads", "resourceflavors"], ["list", "watch"]),
        _rule(["kueue.x-k8s.io"], ["workloads/status"], ["patch"]),
        _rule([""], ["nodes"], ["patch"]),
        # Where Kueue runs: a Pod is queued only where its LocalQueue exists, and its Workload
        # says why it waits (gpustack_worker.instances.kueue).
        _rule(["kueue.x-k8s.io"], ["localqueues", "workloads"], ["list", "watch"]),
        _rule(
            ["coordination.k8s.io"],
            ["leases"],
            ["get", "create", "update"],
            namespaces=(SYSTEM_NAMESPACE,),
        ),
        # The operator Settings: the Secret gpustack-settings followed (one object, by name) and
        # seeded (create cannot be narrowed to a name), and the deprecated ConfigMap followed.
        _rule(
            [""],
            ["secrets"],
            ["list", "watch", "patch"],
            namespaces=(SYSTEM_NAMESPACE,),
            resource_names=("gpustack-settings",),
        ),
        _rule([""], ["secrets"], ["create"], namespaces=(SYSTEM_NAMESPACE,)),
        # The InstanceType chain (gpustack_worker.instancetypes): its informers, the types it
        # authors and their status, the catalog, and the operator's own Kueue objects; one
        # AdmissionCheck read by name (the chart's instancetypes.yaml).
        _rule([API_GROUP], ["instancetypes"], ["create"]),
        _rule([API_GROUP], ["instancetypes/status"], ["patch"]),
        _rule([API_GROUP], ["instancetypeflavors"], ["list", "watch", "create", "patch", "delete"]),
        _rule([""], ["namespaces"], ["list", "watch"]),
        _rule(
            ["kueue.x-k8s.io"],
            ["resourceflavors", "clusterqueues"],
            ["list", "watch", "create", "patch", "delete"],
        ),
        _rule(["kueue.x-k8s.io"], ["localqueues"], ["list", "watch", "create", "delete"]),
        _rule(
            ["kueue.x-k8s.io"],
            ["admissionchecks"],
            ["get"],
            resource_names=(contract.NODE_DEVICES_CHECK,),
        ),
        _rule(
            [""],
            ["configmaps"],
            ["list", "watch"],
            namespaces=(SYSTEM_NAMESPACE,),
            resource_names=("gpustack-operator-settings",),
        ),
    )


def builtin_users() -> tuple[UserDoc, ...]:
    """The users every scenario has, each shaped after a question a test asks of RBAC."""
    service = ("system:serviceaccounts", f"system:serviceaccounts:{SYSTEM_NAMESPACE}")
    return (
        # Bound both ways, as a kubeadm admin is: a review naming the user without its groups
        # (a SubjectAccessReview carries only what the caller put in it) is still allowed.
        UserDoc(
            name="admin",
            groups=(MASTERS, "system:authenticated"),
            rules=(_rule(["*"], ["*"], ["*"]),),
        ),
        UserDoc(
            name="no-metrics",
            groups=("system:authenticated",),
            rules=(_rule([API_GROUP], ["instances"], ["get", "list", "watch"]),),
        ),
        UserDoc(
            name="device-manager",
            groups=(*service, "system:authenticated"),
            rules=_daemon_rules(),
        ),
        UserDoc(name="worker", groups=(*service, "system:authenticated"), rules=_worker_rules()),
        # What Prometheus' `kubernetes_sd_configs` (role: endpoints) lists and watches, and
        # nothing else: a scrape setup reaching for more shows up as a 403.
        UserDoc(
            name="prometheus",
            groups=(
                "system:serviceaccounts",
                "system:serviceaccounts:monitoring",
                "system:authenticated",
            ),
            rules=(_rule([""], ["pods", "services", "endpoints"], ("get", "list", "watch")),),
        ),
    )
