"""The same requests of the stand-in and of kube-apiserver, answers reduced to what must agree.

Each :class:`Case` is a short script of raw HTTP requests in a scratch namespace — the ones the
stand-in used to get wrong, and the API semantics our daemons rely on. An answer is reduced to
what two servers built by different people must still share (:func:`reduce`): the status code,
the ``Status`` reason and the set of ``(field, error type)`` pairs of a validation refusal, and
for a success the fields the case names (a label, a quantity, the number of list items…),
never free text, timestamps or UIDs.

``golden/kube-apiserver-<version>.json`` holds the real server's reduced answers, recorded by
``./dev e2e-real`` with ``GPUSTACK_RECORD_GOLDEN=1``; the main suite holds the stand-in to them,
and the real-control-plane run holds the real server to them too, so a Kubernetes upgrade that
changes an answer shows up as a diff rather than as drift in the stand-in.
"""

from __future__ import annotations

import json
import re
import ssl
from dataclasses import dataclass, field
from typing import Any

import httpx

JSON = "application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

_FIELD_ERROR = re.compile(
    r"(?:^|: |\[|, )(?P<field>[a-zA-Z][\w.\[\]/\-]*): (?P<type>Invalid value|Required value|"
    r"Duplicate value|Forbidden|Unsupported value|Too long|Too many|Not found)"
)


@dataclass(frozen=True)
class Step:
    """One request; ``keep`` picks what of a success must agree (dotted paths, ``#len``)."""

    method: str
    path: str
    body: Any = None
    content_type: str = JSON
    params: dict[str, str] = field(default_factory=dict)
    keep: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    """A named script; ``{ns}`` in paths and bodies is the scratch namespace."""

    name: str
    steps: tuple[Step, ...]


def _dig(value: Any, path: str) -> Any:
    """``a.b.0.c`` into nested objects; ``x#len`` is the length of ``x``; absent is ``None``."""
    length = path.endswith("#len")
    trimmed = path.removesuffix("#len")
    for spelled in trimmed.split(".") if trimmed else []:
        part = spelled.replace("\u2024", ".")
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    if length:
        return len(value) if isinstance(value, list | dict | str) else None
    return value


_ONE_OF = re.compile(r'"(?P<field>[a-zA-Z][\w.\[\]/\-]*)" must validate one and only one schema')


def field_errors(message: str) -> list[tuple[str, str]]:
    """The ``(field, error type)`` pairs a kube-apiserver validation message names.

    Besides ``<field>: <type>: …`` the OpenAPI schema validator words a ``oneOf`` failure as
    ``"<field>" must validate one and only one schema (oneOf)``: reported as type ``oneOf``.
    """
    found = {(m["field"], m["type"]) for m in _FIELD_ERROR.finditer(message)}
    found |= {(m["field"], "oneOf") for m in _ONE_OF.finditer(message)}
    return sorted(found)


def reduce(response: httpx.Response, keep: tuple[str, ...]) -> dict[str, Any]:
    """What of an answer two API servers must share."""
    try:
        body = response.json()
    except ValueError:
        body = None
    reduced: dict[str, Any] = {"code": response.status_code}
    if response.status_code >= 400:
        status = body if isinstance(body, dict) else {}
        reduced["reason"] = status.get("reason")
        errors = field_errors(str(status.get("message", "")))
        if errors:
            reduced["fields"] = [list(e) for e in errors]
        return reduced
    for path in keep:
        reduced[keep_key(path)] = _dig(body, path)
    return reduced


def _anonymous(answers: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The scratch namespace's name written back as ``{ns}``: answers of any run compare."""
    return list(json.loads(json.dumps(answers).replace(namespace, "{ns}")))


def _substitute(value: Any, namespace: str) -> Any:
    text = json.dumps(value).replace("{ns}", namespace)
    return json.loads(text)


def keep_key(path: str) -> str:
    """A ``keep`` path with its literal-dot stand-ins (``\u2024``), as the golden file has it."""
    return path.replace("\u2024", ".")


async def run_case(
    case: Case, server: str, context: ssl.SSLContext, token: str, namespace: str
) -> list[dict[str, Any]]:
    """Every step's reduced answer, in order."""
    answers = []
    async with httpx.AsyncClient(
        base_url=server,
        verify=context,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        trust_env=False,
    ) as client:
        for step in case.steps:
            if step.body is None:
                content = None
            elif isinstance(step.body, str):
                content = step.body.replace("{ns}", namespace)
            else:
                content = json.dumps(_substitute(step.body, namespace))
            response = await client.request(
                step.method,
                step.path.replace("{ns}", namespace),
                content=content,
                params=step.params,
                headers={"Content-Type": step.content_type} if content is not None else {},
            )
            answers.append(reduce(response, step.keep))
    return _anonymous(answers, namespace)


def cm(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def pod(name: str, **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", **container}]},
    }


def instance(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name},
        "spec": {"image": "ubuntu:24.04", **spec},
    }


CMS = "/api/v1/namespaces/{ns}/configmaps"
PODS = "/api/v1/namespaces/{ns}/pods"
SERVICES = "/api/v1/namespaces/{ns}/services"
INSTANCES = "/apis/worker.gpustack.ai/v1alpha1/namespaces/{ns}/instances"
PORT = [{"port": 80, "protocol": "TCP"}]


def _service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"ports": PORT}}  # fmt: skip


CASES: tuple[Case, ...] = (
    Case("two volume mounts at one path", (
        Step("POST", PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mounts"},
                            "spec": {"containers": [{"name": "main", "image": "busybox",
                                                     "volumeMounts": [
                                                         {"name": "a", "mountPath": "/data"},
                                                         {"name": "b", "mountPath": "/data"}]}],
                                     "volumes": [{"name": "a", "emptyDir": {}},
                                                 {"name": "b", "emptyDir": {}}]}}),
    )),
    Case("a Service name of 70 characters", (Step("POST", SERVICES, _service("a" * 70)),)),
    Case("a Service name with dots", (Step("POST", SERVICES, _service("a.b")),)),
    Case("a Pod name in capitals", (Step("POST", PODS, pod("Mixed")),)),
    Case("a label value with a slash", (
        Step("POST", CMS, cm("slash", labels={"x": "a/b"})),
    )),
    Case("a fractional extended resource", (
        Step("POST", PODS, pod("frac", resources={"limits": {"example.com/foo": "500m"}})),
    )),
    Case("quantities come back canonical, requests default to limits", (
        Step("POST", PODS, pod("quant", resources={"limits": {
            "cpu": "0.5", "memory": "1.5Gi", "example.com/units": "320000"}}),
            keep=("spec.containers.0.resources.limits.cpu",
                  "spec.containers.0.resources.limits.memory",
                  "spec.containers.0.resources.limits.example\u2024com/units",
                  "spec.containers.0.resources.requests.cpu",
                  "status.qosClass")),
    )),
    Case("a Pod's resources are immutable", (
        Step("POST", PODS, pod("immut", resources={"limits": {"cpu": "1", "memory": "1Gi"}})),
        Step("PATCH", PODS + "/immut", {"spec": {"containers": [
            {"name": "main", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}},
            content_type=STRATEGIC),
    )),
    Case("a Namespace cannot rename itself by label", (
        Step("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "{ns}-x",
                          "labels": {"kubernetes.io/metadata.name": "kube-system"}}},
             keep=("metadata.labels.kubernetes\u2024io/metadata\u2024name",)),
        Step("DELETE", "/api/v1/namespaces/{ns}-x"),
    )),
    Case("create twice, get the missing, update stale", (
        Step("POST", CMS, cm("twice", k="1"), keep=("data.k",)),
        Step("POST", CMS, cm("twice", k="1")),
        Step("GET", CMS + "/missing"),
        Step("PUT", CMS + "/twice", cm("twice", k="2") | {"metadata": {
            "name": "twice", "resourceVersion": "1"}}),
    )),
    Case("bodies that are not what the verb takes", (
        Step("POST", CMS, cm("bodies", k="1")),
        Step("PATCH", CMS + "/bodies", [], content_type=MERGE),
        Step("PATCH", CMS + "/bodies", {"op": "replace"}, content_type=JSON_PATCH),
        Step("POST", CMS, "{"),
        Step("PATCH", CMS + "/bodies", {"data": {"k": "2"}}, content_type="text/plain"),
    )),
    # Labelled: kube-controller-manager publishes kube-root-ca.crt into every namespace.
    Case("lists in pages", (
        Step("POST", CMS, cm("p1", labels={"page": "x"})),
        Step("POST", CMS, cm("p2", labels={"page": "x"})),
        Step("POST", CMS, cm("p3", labels={"page": "x"})),
        Step("GET", CMS, params={"limit": "2", "labelSelector": "page=x"},
             keep=("items#len", "items.0.metadata.name", "items.1.metadata.name")),
    )),
    Case("a delete whose precondition names another UID", (
        Step("POST", CMS, cm("pre")),
        Step("DELETE", CMS + "/pre", {"kind": "DeleteOptions", "apiVersion": "v1",
                                      "preconditions": {"uid": "00000000-0000-0000-0000-0000"}}),
    )),
    Case("a dry run stores nothing", (
        Step("POST", CMS, cm("dry"), params={"dryRun": "All"}, keep=("metadata.name",)),
        Step("GET", CMS + "/dry"),
    )),
    Case("an Instance volume with two sources (the CRD's oneOf)", (
        Step("POST", INSTANCES, instance("twosrc", additionalVolumes=[{
            "mountPath": "/mnt/x", "configMap": {"name": "a"}, "secret": {"name": "b"}}])),
    )),
    Case("an Instance with one port twice (the CRD's list-map keys)", (
        Step("POST", INSTANCES, instance("dupport", ports=[
            {"port": 22, "protocol": "TCP"}, {"port": 22, "protocol": "TCP"}])),
    )),
    Case("an Instance field the CRD does not know, strictly", (
        Step("POST", INSTANCES, instance("unknown", bogus=True),
             params={"fieldValidation": "Strict"}),
    )),
)  # fmt: skip
"""``\u2024`` (one-dot leader) in a ``keep`` path stands for a literal dot in a key."""
