"""Admission webhooks registered with the cluster stand-in, called over real HTTPS.

A webhook server (quart-trio under hypercorn, its certificate from a trustme CA) runs in the
test's nursery; configurations are registered through the API with ``gpustack_kube``'s client,
and writes are made with that client and with real ``kubectl``. The server records every
``AdmissionReview`` it receives, so "not called" is counted, not assumed. Expected wording is
kube-apiserver's (``k8s.io/apiserver`` webhook errors): a denial is ``<resource> "<name>" is
forbidden: admission webhook "<webhook>" denied the request: <message>`` with code 403 when the
webhook names none; an unreachable webhook under ``failurePolicy: Fail`` is a 500
``Internal error occurred: failed calling webhook "<webhook>": …``.

The last tests are kubectl's reads the issue names (``get -o yaml``, ``get -w``) and the
kubelet summary of a Pod created with kubectl.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
import yaml
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import request
from quart_trio import QuartTrio

from gpustack_kube.client import ApiError, Conflict, KubeClient
from gpustack_kube.config import parse_kubeconfig
from gpustack_simulator.cluster.server import RunningCluster
from gpustack_simulator.testing import cluster_standin
from patience import HANG

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed here")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PODS = "/api/v1/namespaces/default/pods"
POD_CREATE = [
    {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
]
SERVICE_NAME = "hooks.gpustack-system.svc"


@dataclass
class Review:
    """One AdmissionReview the webhook server received."""

    path: str
    query: dict[str, str]
    request: dict[str, Any]


@dataclass
class WebhookServer:
    """The test's webhook endpoint: where it listens, the CA that signed it, what it saw."""

    base: str
    port: int
    ca_bundle: str
    reviews: list[Review] = field(default_factory=list)

    def url(self, path: str) -> str:
        """The ``clientConfig.url`` of one behaviour."""
        return f"{self.base}{path}"

    def client(self, path: str) -> dict[str, str]:
        """A ``clientConfig`` naming one behaviour's URL and the CA that signed the server."""
        return {"url": self.url(path), "caBundle": self.ca_bundle}

    def seen(self, path: str) -> list[Review]:
        """The reviews one behaviour received."""
        return [r for r in self.reviews if r.path == path]


def _annotation(req: Mapping[str, Any], key: str) -> str | None:
    obj = req.get("object") or req.get("oldObject") or {}
    value = (obj.get("metadata") or {}).get("annotations", {}).get(key)
    return None if value is None else str(value)


@asynccontextmanager
async def webhook_server(tmp_path: Path) -> AsyncIterator[WebhookServer]:
    """Serve the behaviours below over HTTPS for the duration of the block.

    ``/mutate`` adds the label ``admitted-by=mutator``; ``/scale`` sets ``spec.replicas`` to
    100; ``/count-labels`` records the number of labels in the annotation ``test/labels``;
    ``/warn`` allows with two warnings; ``/allow`` allows; ``/deny`` denies
    with message ``no thanks`` and the code/reason the object's ``test/deny-code`` and
    ``test/deny-reason`` annotations name (none by default); ``/slow`` allows after the
    seconds in ``test/slow``.
    """
    app = QuartTrio("test-webhooks")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", SERVICE_NAME)
    pem = tmp_path / "webhook.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    server = WebhookServer("", 0, base64.b64encode(ca.cert_pem.bytes()).decode())

    @app.route("/<behaviour>", methods=["POST"])
    async def review(behaviour: str) -> Any:
        body = await request.get_json()
        req = body["request"]
        server.reviews.append(Review(f"/{behaviour}", dict(request.args), req))
        response: dict[str, Any] = {"uid": req["uid"], "allowed": True}
        if behaviour == "mutate":
            labels = (req["object"].get("metadata") or {}).get("labels")
            op = (
                {"op": "add", "path": "/metadata/labels/admitted-by", "value": "mutator"}
                if labels
                else {"op": "add", "path": "/metadata/labels", "value": {"admitted-by": "mutator"}}
            )
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps([op]).encode()).decode()
        elif behaviour == "count-labels":
            meta = req["object"].get("metadata") or {}
            counted = {
                **(meta.get("annotations") or {}),
                "test/labels": str(len(meta.get("labels") or {})),
            }
            op = {"op": "add", "path": "/metadata/annotations", "value": counted}
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps([op]).encode()).decode()
        elif behaviour == "warn":
            response["warnings"] = ["think twice", 'a "quoted" word']
        elif behaviour == "scale":
            op = {"op": "replace", "path": "/spec/replicas", "value": 100}
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps([op]).encode()).decode()
        elif behaviour == "deny":
            status: dict[str, Any] = {"message": "no thanks"}
            if (code := _annotation(req, "test/deny-code")) is not None:
                status["code"] = int(code)
            if (reason := _annotation(req, "test/deny-reason")) is not None:
                status["reason"] = reason
            response = {"uid": req["uid"], "allowed": False, "status": status}
        elif behaviour == "slow":
            await trio.sleep(float(_annotation(req, "test/slow") or "3"))
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.certfile = config.keyfile = str(pem)
    config.accesslog = config.errorlog = None
    config.graceful_timeout = 0.5
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(
                app, config, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        server.base = binds[0].replace("http://", "https://")
        server.port = int(server.base.rsplit(":", 1)[1])
        try:
            yield server
        finally:
            stop.set()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[RunningCluster]:
    async with cluster_standin("nvidia-mixed", tmp_path) as running:
        yield running


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[WebhookServer]:
    async with webhook_server(tmp_path) as server:
        yield server


@pytest.fixture
async def kube(cluster: RunningCluster) -> AsyncIterator[KubeClient]:
    async with KubeClient(parse_kubeconfig(cluster.kubeconfig)) as client:
        yield client


def webhook(
    name: str,
    client: Mapping[str, Any],
    *,
    rules: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One webhook entry; ``extra`` adds or overrides fields (failurePolicy, selectors, …)."""
    return {
        "name": name,
        "clientConfig": dict(client),
        "rules": rules if rules is not None else POD_CREATE,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **extra,
    }


async def register(
    kube: KubeClient, kind: str, name: str, *webhooks: dict[str, Any]
) -> dict[str, Any]:
    plural = kind.lower() + "s"
    return await kube.create(
        f"{ADMISSION}/{plural}",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "webhooks": list(webhooks),
        },
    )


def pod(name: str, namespace: str = "default", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- registration --------------------------------------------------------------------------------


async def test_a_configuration_is_stored_with_the_v1_defaults(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    created = await register(
        kube,
        "ValidatingWebhookConfiguration",
        "defaults",
        webhook("a.example.test", hooks.client("/allow")),
    )
    entry = created["webhooks"][0]
    assert entry["failurePolicy"] == "Fail"
    assert entry["timeoutSeconds"] == 10
    assert entry["matchPolicy"] == "Equivalent"
    assert entry["namespaceSelector"] == {}
    assert entry["objectSelector"] == {}
    assert entry["rules"][0]["scope"] == "*"
    listed = await kube.get(f"{ADMISSION}/validatingwebhookconfigurations")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["defaults"]


async def test_an_invalid_configuration_is_refused_with_its_field_paths(kube: KubeClient) -> None:
    with pytest.raises(ApiError) as caught:
        await register(
            kube,
            "MutatingWebhookConfiguration",
            "broken",
            webhook(
                "short",
                {"url": "http://127.0.0.1:1/x"},
                timeoutSeconds=31,
                admissionReviewVersions=["v1beta1"],
            ),
        )
    assert caught.value.status == 422
    message = caught.value.message
    assert "webhooks[0].name" in message
    assert "webhooks[0].clientConfig.url" in message
    assert "'https' is the only allowed" in message
    assert "webhooks[0].timeoutSeconds: Invalid value: 31" in message
    assert "webhooks[0].admissionReviewVersions" in message


# -- mutation and denial -------------------------------------------------------------------------


async def test_a_mutating_patch_is_applied_and_the_review_carries_the_request(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "labeller",
        webhook("label.example.test", hooks.client("/mutate")),
    )
    created = await kube.create(PODS, pod("mutated", labels={"app": "x"}))
    assert created["metadata"]["labels"] == {"app": "x", "admitted-by": "mutator"}
    stored = await kube.get(f"{PODS}/mutated")
    assert stored["metadata"]["labels"]["admitted-by"] == "mutator"
    [seen] = hooks.seen("/mutate")
    assert seen.query == {"timeout": "10s"}
    req = seen.request
    assert req["operation"] == "CREATE"
    assert req["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert req["requestKind"] == req["kind"]
    assert req["requestResource"] == req["resource"]
    assert (req["name"], req["namespace"]) == ("mutated", "default")
    assert req["userInfo"]["username"] == "admin"
    assert req["object"]["metadata"]["labels"] == {"app": "x"}  # before its own patch
    assert req["oldObject"] is None
    assert req["dryRun"] is False
    assert req["options"]["kind"] == "CreateOptions"


async def test_mutations_are_validated_against_the_crd_schema(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.test"},
        "spec": {
            "group": "example.test",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"replicas": {"type": "integer", "maximum": 10}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    await kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    rules = [
        {
            "operations": ["CREATE"],
            "apiGroups": ["example.test"],
            "apiVersions": ["*"],
            "resources": ["widgets"],
        }
    ]
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "labeller",
        webhook("scale.example.test", hooks.client("/scale"), rules=rules),
    )
    widget = {
        "apiVersion": "example.test/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"replicas": 2},
    }
    path = "/apis/example.test/v1/namespaces/default/widgets"
    with pytest.raises(ApiError) as caught:
        # The webhook's 100 replicas are more than the schema's maximum of 10.
        await kube.create(path, widget)
    assert caught.value.status == 422
    assert "spec.replicas" in caught.value.message
    await kube.delete(f"{ADMISSION}/mutatingwebhookconfigurations/labeller")
    created = await kube.create(path, widget)  # the same request is valid unmutated
    assert created["spec"] == {"replicas": 2}
    assert len(hooks.seen("/scale")) == 1


async def test_a_denial_reaches_the_client_with_the_webhook_status(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "gate",
        webhook("deny.example.test", hooks.client("/deny")),
    )
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("plain"))
    assert (caught.value.status, caught.value.reason) == (403, "Forbidden")
    assert caught.value.message == (
        'pods "plain" is forbidden: admission webhook "deny.example.test" denied the request: '
        "no thanks"
    )
    with pytest.raises(ApiError) as caught:
        await kube.create(
            PODS,
            pod("coded", annotations={"test/deny-code": "422", "test/deny-reason": "Invalid"}),
        )
    assert (caught.value.status, caught.value.reason) == (422, "Invalid")
    assert 'admission webhook "deny.example.test" denied the request: no thanks' in (
        caught.value.message
    )
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("success-code", annotations={"test/deny-code": "200"}))
    assert caught.value.status == 400  # a refusal never leaves with a success code
    listed = await kube.get(PODS)
    assert not {"plain", "coded"} & {p["metadata"]["name"] for p in listed["items"]}


@needs_kubectl
async def test_kubectl_registers_the_webhook_and_prints_the_denial(
    cluster: RunningCluster, hooks: WebhookServer, tmp_path: Path
) -> None:
    configuration = tmp_path / "gate.yaml"
    configuration.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "gate"},
                "webhooks": [webhook("deny.example.test", hooks.client("/deny"))],
            }
        )
    )
    await _kubectl(cluster, "apply", "--validate=false", "-f", str(configuration))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod("via-kubectl")))
    assert KUBECTL is not None
    done = await trio.run_process(
        [
            KUBECTL,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "apply",
            "--validate=false",
            "-f",
            str(manifest),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode != 0
    stderr = done.stderr.decode()
    assert "Error from server (Forbidden)" in stderr
    assert 'admission webhook "deny.example.test" denied the request: no thanks' in stderr
    listed = await trio.run_process(
        [
            KUBECTL,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "get",
            "validatingwebhookconfigurations",
            "-o",
            "name",
        ],
        capture_stdout=True,
    )
    assert listed.stdout.decode().split() == [
        "validatingwebhookconfiguration.admissionregistration.k8s.io/gate"
    ]


async def test_validating_webhooks_see_the_mutated_object_and_updates_and_deletes(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    every = [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "labeller",
        webhook("label.example.test", hooks.client("/mutate")),
    )
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "watcher",
        webhook("allow.example.test", hooks.client("/allow"), rules=every),
    )
    created = await kube.create(PODS, pod("seen"))
    await kube.patch(f"{PODS}/seen", {"metadata": {"labels": {"tier": "gold"}}})
    await kube.delete(f"{PODS}/seen", grace_period_seconds=0)
    create, update, delete = (r.request for r in hooks.seen("/allow"))
    assert create["operation"] == "CREATE"
    assert create["object"]["metadata"]["labels"] == {"admitted-by": "mutator"}
    assert create["object"]["metadata"]["uid"] == created["metadata"]["uid"]
    assert update["operation"] == "UPDATE"
    assert update["options"]["kind"] == "PatchOptions"
    assert update["object"]["metadata"]["labels"]["tier"] == "gold"
    assert "tier" not in update["oldObject"]["metadata"]["labels"]
    assert delete["operation"] == "DELETE"
    assert delete["object"] is None
    assert delete["oldObject"]["metadata"]["name"] == "seen"
    assert delete["options"]["kind"] == "DeleteOptions"
    assert delete["options"]["gracePeriodSeconds"] == 0


async def test_a_dry_run_is_admitted_and_stores_nothing(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "labeller",
        webhook("label.example.test", hooks.client("/mutate")),
    )
    would = await kube.create(PODS, pod("dry"), params={"dryRun": "All"})
    assert would["metadata"]["labels"] == {"admitted-by": "mutator"}
    assert would["metadata"]["uid"]
    [seen] = hooks.seen("/mutate")
    assert seen.request["dryRun"] is True
    assert seen.request["options"]["dryRun"] == ["All"]
    listed = await kube.get(PODS)
    assert "dry" not in {p["metadata"]["name"] for p in listed["items"]}
    real = await kube.create(PODS, pod("kept"))
    kept = await kube.delete(f"{PODS}/kept", params={"dryRun": "All"})
    assert kept["metadata"]["uid"] == real["metadata"]["uid"]
    assert (await kube.get(f"{PODS}/kept"))["metadata"]["uid"] == real["metadata"]["uid"]
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("odd"), params={"dryRun": "Some"})
    assert caught.value.status == 422


@needs_kubectl
async def test_kubectl_server_side_dry_run(cluster: RunningCluster, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod("rehearsed")))
    shown = await _kubectl(
        cluster, "create", "--validate=false", "--dry-run=server", "-f", str(manifest)
    )
    assert shown.strip() == "pod/rehearsed created (server dry run)"
    listed = await _kubectl(cluster, "get", "pods", "-n", "default", "-o", "name")
    assert "pod/rehearsed" not in listed


@pytest.mark.parametrize(("policy", "calls", "counted"), [("Never", 1, "0"), ("IfNeeded", 2, "1")])
async def test_reinvocation_if_needed_sees_a_later_webhooks_change(
    kube: KubeClient, hooks: WebhookServer, policy: str, calls: int, counted: str
) -> None:
    # Configurations run in name order: the counter first, then the labeller changes the object.
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "a-counter",
        webhook("count.example.test", hooks.client("/count-labels"), reinvocationPolicy=policy),
    )
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "b-labeller",
        webhook("label.example.test", hooks.client("/mutate")),
    )
    created = await kube.create(PODS, pod("counted"))
    assert created["metadata"]["labels"] == {"admitted-by": "mutator"}
    assert created["metadata"]["annotations"]["test/labels"] == counted
    assert len(hooks.seen("/count-labels")) == calls
    assert len(hooks.seen("/mutate")) == 1


async def test_webhook_warnings_reach_the_client_as_warning_headers(
    cluster: RunningCluster, hooks: WebhookServer, kube: KubeClient
) -> None:
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "warner",
        webhook("warn.example.test", hooks.client("/warn")),
    )
    config = parse_kubeconfig(cluster.kubeconfig)
    async with httpx.AsyncClient(
        base_url=config.server,
        verify=config.ssl_context(),
        headers={"Authorization": f"Bearer {config.token}"},
    ) as http:
        answer = await http.post(PODS, json=pod("warned"))
    assert answer.status_code == 201
    assert answer.headers.get_list("Warning") == [
        '299 - "think twice"',
        '299 - "a \\"quoted\\" word"',
    ]


@needs_kubectl
async def test_kubectl_prints_webhook_warnings(
    cluster: RunningCluster, hooks: WebhookServer, kube: KubeClient, tmp_path: Path
) -> None:
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "warner",
        webhook("warn.example.test", hooks.client("/warn")),
    )
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod("warned-kubectl")))
    assert KUBECTL is not None
    done = await trio.run_process(
        [
            KUBECTL,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "create",
            "--validate=false",
            "-f",
            str(manifest),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode().splitlines() == [
        "Warning: think twice",
        'Warning: a "quoted" word',
    ]


# -- failure policy, certificates, timeouts ------------------------------------------------------


async def test_an_unreachable_webhook_fails_the_write_under_fail_and_not_under_ignore(
    kube: KubeClient,
) -> None:
    port = closed_port()
    url = f"https://127.0.0.1:{port}/down"
    await register(
        kube, "ValidatingWebhookConfiguration", "strict", webhook("down.example.test", {"url": url})
    )
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("refused"))
    assert (caught.value.status, caught.value.reason) == (500, "InternalError")
    assert caught.value.message == (
        'Internal error occurred: failed calling webhook "down.example.test": failed to call '
        f'webhook: Post "{url}?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection '
        "refused"
    )
    await kube.delete(f"{ADMISSION}/validatingwebhookconfigurations/strict")
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "lenient",
        webhook("down.example.test", {"url": url}, failurePolicy="Ignore"),
    )
    created = await kube.create(PODS, pod("let-through"))
    assert created["metadata"]["name"] == "let-through"


async def test_a_certificate_the_ca_bundle_does_not_vouch_for_is_refused(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    other = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "wrong-ca",
        webhook("allow.example.test", {"url": hooks.url("/allow"), "caBundle": other}),
    )
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("untrusted"))
    assert caught.value.status == 500
    assert caught.value.message.startswith(
        'Internal error occurred: failed calling webhook "allow.example.test": failed to call '
        f'webhook: Post "{hooks.url("/allow")}?timeout=10s": tls: failed to verify certificate: '
    )
    assert hooks.reviews == []  # the handshake failed before any review was sent


async def test_the_timeout_is_honoured(kube: KubeClient, hooks: WebhookServer) -> None:
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "slow",
        webhook("slow.example.test", hooks.client("/slow"), timeoutSeconds=1),
    )
    started = trio.current_time()
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("late", annotations={"test/slow": "60"}))
    elapsed = trio.current_time() - started
    # Cut at the 1 s timeout, not after the webhook's 60 s: the upper bound only tells the two
    # apart, with room for a loaded machine.
    assert 1.0 <= elapsed < 30
    assert caught.value.status == 500
    assert caught.value.message.endswith(
        f'Post "{hooks.url("/slow")}?timeout=1s": context deadline exceeded'
    )
    [seen] = hooks.seen("/slow")
    assert seen.query == {"timeout": "1s"}


# -- who is called --------------------------------------------------------------------------------


async def test_rules_and_selectors_that_do_not_match_send_no_review(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    configmaps = [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["configmaps"],
        }
    ]
    status_only = [
        {
            "operations": ["UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods/status"],
        }
    ]
    deletes = [
        {"operations": ["DELETE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}
    ]
    cluster_scoped = [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["*"],
            "scope": "Cluster",
        }
    ]
    allow = hooks.client("/allow")
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "narrow",
        webhook("configmaps.example.test", allow, rules=configmaps),
        webhook("status.example.test", allow, rules=status_only),
        webhook("deletes.example.test", allow, rules=deletes),
        webhook("cluster.example.test", allow, rules=cluster_scoped),
        webhook(
            "labelled.example.test",
            allow,
            objectSelector={"matchLabels": {"admit": "yes"}},
        ),
        webhook(
            "guarded-ns.example.test",
            allow,
            namespaceSelector={
                "matchExpressions": [{"key": "admission", "operator": "In", "values": ["on"]}]
            },
        ),
        webhook(
            "team-a.example.test",
            allow,
            namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
        ),
    )

    await kube.create(PODS, pod("unlabelled"))
    assert hooks.reviews == []  # no rule, selector or scope selects a plain Pod in default

    await kube.patch(f"{PODS}/unlabelled/status", {"status": {"message": "x"}})
    await kube.create(PODS, pod("labelled", labels={"admit": "yes"}))
    await kube.create(
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "guarded", "labels": {"admission": "on"}},
        },
    )
    await kube.create("/api/v1/namespaces/guarded/pods", pod("inside", "guarded"))
    await kube.create("/api/v1/namespaces/team-a/pods", pod("team-pod", "team-a"))
    await kube.delete(f"{PODS}/unlabelled", grace_period_seconds=0)
    names = [(r.request["operation"], r.request["name"]) for r in hooks.reviews]
    assert names == [
        ("UPDATE", "unlabelled"),  # status.example.test: pods/status only
        ("CREATE", "labelled"),  # labelled.example.test: objectSelector
        ("CREATE", "guarded"),  # cluster.example.test: the Namespace is cluster-scoped
        ("CREATE", "inside"),  # guarded-ns.example.test: the namespace's own label
        ("CREATE", "team-pod"),  # team-a.example.test: kubernetes.io/metadata.name
        ("DELETE", "unlabelled"),  # deletes.example.test
    ]
    assert hooks.reviews[0].request["subResource"] == "status"


# -- clientConfig.service ------------------------------------------------------------------------


async def test_a_service_reference_is_resolved_through_its_endpoints(
    kube: KubeClient, hooks: WebhookServer
) -> None:
    await kube.create(
        "/api/v1/namespaces/gpustack-system/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "hooks", "namespace": "gpustack-system"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": hooks.port}]},
        },
    )
    await kube.create(
        "/api/v1/namespaces/gpustack-system/endpoints",
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "hooks", "namespace": "gpustack-system"},
            "subsets": [
                {
                    "addresses": [{"ip": "127.0.0.1"}],
                    "ports": [{"name": "https", "port": hooks.port}],
                }
            ],
        },
    )
    service = {"namespace": "gpustack-system", "name": "hooks", "path": "/mutate"}
    await register(
        kube,
        "MutatingWebhookConfiguration",
        "by-service",
        webhook("svc.example.test", {"service": service, "caBundle": hooks.ca_bundle}),
    )
    created = await kube.create(PODS, pod("via-service"))
    assert created["metadata"]["labels"] == {"admitted-by": "mutator"}
    assert len(hooks.seen("/mutate")) == 1


async def test_a_service_reference_can_be_mapped_by_the_stand_in(
    cluster: RunningCluster, kube: KubeClient, hooks: WebhookServer
) -> None:
    cluster.state.webhook_services[("gpustack-system", "hooks", 8443)] = f"127.0.0.1:{hooks.port}"
    service = {"namespace": "gpustack-system", "name": "hooks", "port": 8443, "path": "/deny"}
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "mapped",
        webhook("svc.example.test", {"service": service, "caBundle": hooks.ca_bundle}),
    )
    with pytest.raises(ApiError) as caught:
        await kube.create(PODS, pod("mapped"))
    assert caught.value.status == 403
    assert len(hooks.seen("/deny")) == 1


# -- the commit re-checks what admission may have let move ---------------------------------------


async def test_an_update_whose_object_moved_during_admission(
    cluster: RunningCluster, kube: KubeClient, hooks: WebhookServer
) -> None:
    updates = [
        {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
    ]
    created = await kube.create(PODS, pod("racing", annotations={"test/slow": "1"}))
    await register(
        kube,
        "ValidatingWebhookConfiguration",
        "slow",
        webhook("slow.example.test", hooks.client("/slow"), rules=updates),
    )

    async def reviewed(count: int) -> None:
        with trio.fail_after(HANG):
            while len(hooks.seen("/slow")) < count:
                await trio.sleep(0.01)

    def bump(value: str) -> None:
        def mutate(obj: dict[str, Any]) -> None:
            obj["metadata"].setdefault("labels", {})["bumped"] = value

        cluster.state.store.update("Pod", "default", "racing", mutate)

    # With the resourceVersion it read, the writer gets the 409 the moved object deserves.
    stale = {**created, "metadata": {**created["metadata"], "labels": {"mine": "1"}}}
    async with trio.open_nursery() as nursery:
        failures: list[ApiError] = []

        async def put() -> None:
            try:
                await kube.update(f"{PODS}/racing", stale)
            except Conflict as exc:
                failures.append(exc)

        nursery.start_soon(put)
        await reviewed(1)  # the PUT is inside its validating webhook now
        bump("1")
    assert [f.status for f in failures] == [409]
    assert "the object has been modified" in failures[0].message

    # Without one, the patch is re-applied over the moved object and admitted again.
    before = len(hooks.seen("/slow"))
    async with trio.open_nursery() as nursery:
        result: list[dict[str, Any]] = []

        async def patch() -> None:
            result.append(
                await kube.patch(f"{PODS}/racing", {"metadata": {"labels": {"mine": "2"}}})
            )

        nursery.start_soon(patch)
        await reviewed(before + 1)  # the patch is inside its validating webhook now
        bump("2")
    assert result[0]["metadata"]["labels"] == {"bumped": "2", "mine": "2"}
    assert len(hooks.seen("/slow")) - before == 2


# -- kubectl reads and the kubelet summary --------------------------------------------------------


async def _kubectl(cluster: RunningCluster, *args: str) -> str:
    assert KUBECTL is not None
    done = await trio.run_process(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def _summary_pods(kube: KubeClient, node: str) -> dict[str, dict[str, Any]]:
    summary = await kube.get(f"/api/v1/nodes/{node}/proxy/stats/summary")
    return {f"{p['podRef']['namespace']}/{p['podRef']['name']}": p for p in summary["pods"]}


@needs_kubectl
async def test_a_pod_created_with_kubectl_is_in_its_nodes_summary_while_it_runs(
    cluster: RunningCluster, kube: KubeClient, tmp_path: Path
) -> None:
    node = "gpu-node-1"
    before = await _summary_pods(kube, node)
    manifest = tmp_path / "pod.yaml"
    body = pod("summarised")
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    manifest.write_text(yaml.safe_dump(body))
    await _kubectl(cluster, "apply", "--validate=false", "-f", str(manifest))
    shown = json.loads(await _kubectl(cluster, "get", "pod", "summarised", "-o", "json"))
    assert shown["status"]["phase"] == "Running"
    pods = await _summary_pods(kube, node)
    entry = pods["default/summarised"]
    assert entry["podRef"]["uid"] == shown["metadata"]["uid"]
    assert [c["name"] for c in entry["containers"]] == ["app"]
    assert entry["cpu"]["usageNanoCores"] == 0
    assert entry["memory"]["workingSetBytes"] == 0
    assert entry["ephemeral-storage"]["usedBytes"] == 0
    assert set(pods) - {"default/summarised"} == set(before)  # scenario Pods keep theirs
    await _kubectl(cluster, "delete", "pod", "summarised", "--wait=true", "--timeout=10s")
    assert "default/summarised" not in await _summary_pods(kube, node)


@needs_kubectl
async def test_kubectl_get_pods_as_yaml(cluster: RunningCluster) -> None:
    shown = yaml.safe_load(await _kubectl(cluster, "get", "pods", "-A", "-o", "yaml"))
    assert shown["kind"] == "List"
    names = {p["metadata"]["name"] for p in shown["items"]}
    assert "llama-70b" in names
    assert all(p["kind"] == "Pod" for p in shown["items"])


@needs_kubectl
async def test_kubectl_get_pods_watch_prints_a_new_pod(
    cluster: RunningCluster, kube: KubeClient
) -> None:
    assert KUBECTL is not None
    command = [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), "get", "pods", "-w"]
    with subprocess.Popen(
        [*command, "-n", "default"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        assert process.stdout is not None
        stdout = process.stdout

        def line_with_watched() -> str:
            for line in stdout:
                if line.startswith("watched"):
                    return line
            return ""

        try:
            await trio.sleep(1.0)  # let it list and open its watch
            await kube.create(PODS, pod("watched"))
            with trio.fail_after(HANG):
                line = await trio.to_thread.run_sync(line_with_watched, abandon_on_cancel=True)
        finally:
            process.terminate()
    assert line.split()[0] == "watched"
