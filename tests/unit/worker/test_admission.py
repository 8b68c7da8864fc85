"""The Pod admission webhook at the ASGI seam: reviews in, reviews out, as kube-apiserver sees it.

The app is the worker's own (``build_app``, the guard included); only the cluster is a mock
transport serving ``Devices`` objects. Authentication is a stub that fails the test if called:
kube-apiserver presents no credential to a webhook. Patches are applied with the stand-in's
RFC 6902 implementation, not the webhook's, and the result must pass the validating webhook.
Expected units are the fold's definition computed by hand (see ``tests/unit/core/test_requests``).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack_core.requests import QUEUE_NAME_LABEL
from gpustack_kube.client import KubeClient
from gpustack_kube.config import KubeConfig
from gpustack_simulator.cluster.patch import json_patch
from gpustack_worker.admission import (
    DEVICES,
    MAX_REVIEW_BYTES,
    AdmissionWebhook,
    DevicesCache,
    ReviewError,
    decode_review,
)
from gpustack_worker.api import Surface, build_app
from gpustack_worker.authz import Authorizer
from gpustack_worker.subresource import Sources
from gpustack_worker.summaries import SummaryCache

MIG_PROFILES = [
    {"name": "1g.10gb", "memoryMib": 9856, "count": 7},
    {"name": "3g.40gb", "memoryMib": 40448, "count": 2},
]


def devices(
    name: str, manufacturer: str, memory: int, cards: int, mig: bool = False
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if mig:
        status = {"physicalSliced": {"profiles": MIG_PROFILES, "count": 2}}
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": name},
        "spec": {
            "groups": [
                {
                    "id": f"{name}-{manufacturer}",
                    "manufacturer": manufacturer,
                    "memory": memory,
                    "accelerators": [
                        {"id": f"{name}-{i}", "index": i, "status": status} for i in range(cards)
                    ],
                }
            ]
        },
    }


CLUSTER = [
    devices("gpu-1", "nvidia", 81559, 2, mig=True),  # H100 80GB HBM3 in MIG mode
    devices("gpu-2", "nvidia", 24564, 1),  # A10
]


class _NoAuthentication:
    async def authenticate(self, chain: Any, headers: Any) -> Any:
        raise AssertionError("a webhook call must not be authenticated")


async def _never(path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    raise AssertionError("a webhook call must not be authorized")


class Cluster:
    """The mock API server: answers the Devices list (or fails it), counting reads."""

    def __init__(self, items: Sequence[dict[str, Any]] | None = None, status: int = 200) -> None:
        self.items = list(CLUSTER if items is None else items)
        self.status = status
        self.reads = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "GET"
        assert request.url.path == DEVICES.path()
        self.reads += 1
        if self.status != 200:
            return httpx.Response(self.status, json={"kind": "Status", "message": "boom"})
        return httpx.Response(200, json={"kind": "DevicesList", "items": self.items})


async def post(
    cluster: Cluster,
    path: str,
    body: bytes,
    *,
    method: str = "POST",
    content_length: int | None = None,
) -> tuple[int, bytes]:
    """One request through the worker's app, the body delivered as hypercorn would."""
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    client = KubeClient(config, transport=httpx.MockTransport(cluster))
    length = len(body) if content_length is None else content_length
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"gpustack-operator-worker.gpustack-system.svc:443"),
            (b"content-type", b"application/json"),
            (b"content-length", str(length).encode()),
        ],
        "client": ("10.0.0.1", 40000),
        "server": ("10.0.0.2", 31443),
        "extensions": {},
    }
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with trio.open_nursery() as nursery:

        async def no_summary(node: str) -> Any:
            raise AssertionError("the webhook reads no kubelet")

        surface = Surface(
            sources=Sources(client, SummaryCache(no_summary, nursery)),
            authenticator=_NoAuthentication,  # type: ignore[arg-type]
            authorizer=Authorizer(_never, nursery),
            admission=AdmissionWebhook(DevicesCache(client)),
        )
        app: Any = build_app(surface)  # driven as hypercorn drives it, raw ASGI
        await app(scope, receive, send)
        await client.aclose()
        nursery.cancel_scope.cancel()
    start = next(m for m in sent if m["type"] == "http.response.start")
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return int(start["status"]), out


def review_body(pod: dict[str, Any], uid: str = "7d3c-1", operation: str = "CREATE") -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": operation,
                "namespace": "team-a",
                "name": pod["metadata"].get("name", ""),
                "object": pod,
                "userInfo": {"username": "alice"},
                "dryRun": False,
            },
        }
    ).encode()


def pod(
    *limits: dict[str, str], node: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": "busybox", "resources": {"limits": dict(lim)}}
        for i, lim in enumerate(limits)
    ]
    spec: dict[str, Any] = {"containers": containers}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels or {}},
        "spec": spec,
    }


async def mutate(p: dict[str, Any], cluster: Cluster | None = None) -> dict[str, Any]:
    status, body = await post(cluster or Cluster(), "/mutate-v1-pod", review_body(p))
    assert status == 200, body
    review = json.loads(body)
    assert review["apiVersion"] == "admission.k8s.io/v1"
    assert review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == "7d3c-1"
    response: dict[str, Any] = review["response"]
    return response


async def validate(p: dict[str, Any], cluster: Cluster | None = None) -> dict[str, Any]:
    status, body = await post(cluster or Cluster(), "/validate-v1-pod", review_body(p))
    assert status == 200, body
    response: dict[str, Any] = json.loads(body)["response"]
    assert "patch" not in response
    return response


def applied(p: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    out: dict[str, Any] = json_patch(copy.deepcopy(p), ops)
    return out


SLICED = "nvidia.com/gpu.sliced"


# -- the patch --------------------------------------------------------------------------------


async def test_percentage_slice_is_folded_and_then_validates() -> None:
    p = pod({SLICED: "1", "nvidia.com/gpu.sliced.memory-percentage": "25"})
    response = await mutate(p, Cluster(items=[]))  # a percentage needs no Devices
    mutated = applied(p, response)
    limits = mutated["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu.sliced.units"] == "400000"  # 25 × 16,000
    assert limits["nvidia.com/gpu.sliced.cores-percentage"] == "100"
    assert (await validate(mutated))["allowed"] is True


async def test_percentage_slice_reads_no_devices() -> None:
    cluster = Cluster()
    await mutate(pod({SLICED: "1", "nvidia.com/gpu.sliced.memory-percentage": "5"}), cluster)
    assert cluster.reads == 0


async def test_mib_slice_folds_against_the_pinned_node() -> None:
    p = pod({SLICED: "1", "nvidia.com/gpu.sliced.memory-mib": "20000"}, node="gpu-1")
    mutated = applied(p, await mutate(p))
    # ⌈20000 × 1,600,000 / 81,559⌉
    assert (
        mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"]
        == "392355"
    )
    assert (await validate(mutated))["allowed"] is True


async def test_mib_slice_folds_against_the_smallest_card_unpinned() -> None:
    p = pod({SLICED: "1", "nvidia.com/gpu.sliced.memory-mib": "20000"})
    mutated = applied(p, await mutate(p))
    # ⌈20000 × 1,600,000 / 24,564⌉ (the A10)
    assert (
        mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"]
        == "1302720"
    )


async def test_pin_to_an_unknown_name_falls_back_to_the_cluster() -> None:
    p = pod({SLICED: "1", "nvidia.com/gpu.sliced.memory-mib": "20000"}, node="renamed-host")
    mutated = applied(p, await mutate(p))
    assert (
        mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.sliced.units"]
        == "1302720"
    )


async def test_partition_profile_folds_its_memory() -> None:
    p = pod({"nvidia.com/gpu.partitioned": "1", "nvidia.com/gpu.partitioned.mig-1g.10gb": "1"})
    mutated = applied(p, await mutate(p))
    # ⌈9856 × 1,600,000 / 81,559⌉
    assert (
        mutated["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.partitioned.units"]
        == "193353"
    )
    assert (await validate(mutated))["allowed"] is True


async def test_requests_get_the_fold_too() -> None:
    p = pod({SLICED: "1", "nvidia.com/gpu.sliced.memory-percentage": "50"})
    p["spec"]["containers"][0]["resources"]["requests"] = {
        SLICED: "1",
        "nvidia.com/gpu.sliced.memory-percentage": "50",
    }
    mutated = applied(p, await mutate(p))
    requests = mutated["spec"]["containers"][0]["resources"]["requests"]
    assert requests["nvidia.com/gpu.sliced.units"] == "800000"
    assert (await validate(mutated))["allowed"] is True


async def test_unselected_pods_pass_untouched_and_read_nothing() -> None:
    cluster = Cluster()
    response = await mutate(pod({"cpu": "1"}), cluster)
    assert response == {"uid": "7d3c-1", "allowed": True}
    queued = pod({"cpu": "1"}, labels={QUEUE_NAME_LABEL: "gpustack-fnv64-1"})
    assert await mutate(queued, cluster) == {"uid": "7d3c-1", "allowed": True}
    assert cluster.reads == 0


async def test_only_creates_are_judged() -> None:
    p = pod({SLICED: "1"})  # would be refused on CREATE
    status, body = await post(Cluster(), "/mutate-v1-pod", review_body(p, operation="UPDATE"))
    assert status == 200
    assert json.loads(body)["response"] == {"uid": "7d3c-1", "allowed": True}


async def test_devices_are_cached_across_reviews() -> None:
    cluster = Cluster()
    config = KubeConfig("https://api.invalid", None, None, None, False, "default")
    async with KubeClient(config, transport=httpx.MockTransport(cluster)) as client:
        webhook = AdmissionWebhook(DevicesCache(client))
        p = pod({"nvidia.com/gpu": "1"})
        for _ in range(3):
            status, _body = await webhook.handle("/mutate-v1-pod", review_body(p))
            assert status == 200
    assert cluster.reads == 1


# -- denials: every rule ----------------------------------------------------------------------

P = "nvidia.com/gpu.sliced.memory-percentage"
MIB = "nvidia.com/gpu.sliced.memory-mib"
PART = "nvidia.com/gpu.partitioned"
DENIALS: list[tuple[str, list[dict[str, str]], str | None, str]] = [
    ("not-an-integer", [{"nvidia.com/gpu": "1.5"}], None, "must be a positive integer"),
    (
        "sliced-one",
        [{SLICED: "2", P: "50"}],
        None,
        "a logical slice request is always a single accelerator",
    ),
    ("sliced-memory", [{SLICED: "1"}], None, "must set nvidia.com/gpu.sliced.memory-percentage or"),
    ("both-memories", [{SLICED: "1", P: "5", MIB: "5"}], None, "cannot set both"),
    ("percentage", [{SLICED: "1", P: "101"}], None, "must be a percentage from 1 to 100"),
    (
        "cores",
        [{SLICED: "1", P: "1", "nvidia.com/gpu.sliced.cores-percentage": "101"}],
        None,
        "must be a percentage from 1 to 100",
    ),
    (
        "sliced-units",
        [{SLICED: "1", P: "1", "nvidia.com/gpu.sliced.units": "1"}],
        None,
        "webhook-derived, never set by hand",
    ),
    (
        "partitioned-units",
        [{PART: "1", PART + ".mig-1g.10gb": "1", PART + ".units": "9"}],
        None,
        "webhook-derived, never set by hand",
    ),
    (
        "partitioned-one",
        [{PART: "2", PART + ".mig-1g.10gb": "1"}],
        None,
        "a partition request is always a single accelerator",
    ),
    ("profile-required", [{PART: "1"}], None, "must name a profile"),
    (
        "one-profile",
        [{PART: "1", PART + ".mig-1g.10gb": "1", PART + ".mig-3g.40gb": "1"}],
        None,
        "names exactly one profile",
    ),
    (
        "profile-unknown",
        [{PART: "1", PART + ".mig-7g.80gb": "1"}],
        "gpu-1",
        "profile '7g.80gb' is not offered by the nvidia cards in node gpu-1; "
        "offered: 1g.10gb, 3g.40gb",
    ),
    (
        "profile-on-a-card-without-it",
        [{PART: "1", PART + ".mig-1g.10gb": "1"}],
        "gpu-2",
        "lists nvidia partition profiles",
    ),
    (
        "no-partitioning",
        [{"amd.com/gpu.partitioned": "1"}],
        None,
        "amd accelerators have no hardware partitioning",
    ),
    (
        "two-modes",
        [{"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"}],
        None,
        "a container may request one mode of nvidia accelerators",
    ),
    (
        "two-modes-pod",
        [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.shared": "1"}],
        None,
        "in one mode only, found [Exclusive Shared]",
    ),
    (
        "shared-too-many",
        [{"nvidia.com/gpu.shared": "3"}],
        None,
        "no node in the cluster has more than 2 nvidia accelerators",
    ),
    (
        "shared-too-many-pinned",
        [{"nvidia.com/gpu.shared": "2"}],
        "gpu-2",
        "no node in node gpu-2 has more than 1 nvidia accelerators",
    ),
    (
        "visibility-alone",
        [{"device.gpustack.ai/nvidia.visibility": "1"}],
        None,
        "no sibling container requests one",
    ),
    (
        "mib-above-card",
        [{SLICED: "1", MIB: "30000"}],
        "gpu-2",
        "more than the memory of any nvidia card in node gpu-2 (24564 MiB)",
    ),
    (
        "two-slices",
        [{SLICED: "1", P: "5"}, {SLICED: "1", P: "5"}],
        None,
        "at most one container may request a nvidia slice or partition",
    ),
    ("companion-alone", [{P: "5"}], None, 'only meaningful beside nvidia.com/gpu.sliced: "1"'),
]


@pytest.mark.parametrize(
    ("limits", "node", "message"), [d[1:] for d in DENIALS], ids=[d[0] for d in DENIALS]
)
async def test_every_rule_is_denied_with_its_message(
    limits: list[dict[str, str]], node: str | None, message: str
) -> None:
    for path in ("/mutate-v1-pod", "/validate-v1-pod"):
        status, body = await post(Cluster(), path, review_body(pod(*limits, node=node)))
        assert status == 200
        response = json.loads(body)["response"]
        assert response["uid"] == "7d3c-1"
        assert response["allowed"] is False
        assert response["status"]["code"] == 403
        assert message in response["status"]["message"], response["status"]["message"]
        assert "\n" not in response["status"]["message"]
        assert "patch" not in response


async def test_requests_beside_limits_must_match() -> None:
    p = pod({"nvidia.com/gpu": "2"})
    p["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "1"}
    response = await mutate(p)
    assert response["allowed"] is False
    assert 'must equal its limit "2"' in response["status"]["message"]


async def test_init_and_sidecar_rules() -> None:
    p = pod({"nvidia.com/gpu": "1"})
    p["spec"]["initContainers"] = [
        {"name": "log", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    response = await mutate(p)
    assert (
        "a restartable init container (a native sidecar) may not request"
        in response["status"]["message"]
    )
    p["spec"]["initContainers"][0].pop("restartPolicy")
    response = await mutate(p)
    assert "must all sit in one container group" in response["status"]["message"]


async def test_unfolded_slice_is_refused_by_the_validator() -> None:
    response = await validate(pod({SLICED: "1", P: "25"}))
    assert response["allowed"] is False
    assert "folded by the mutating webhook and missing" in response["status"]["message"]


async def test_mib_without_devices_is_refused_and_percentage_still_folds() -> None:
    none = Cluster(items=[devices("cpu-only", "amd", 16368, 1)])
    response = await mutate(pod({SLICED: "1", MIB: "1000"}), none)
    assert "no Devices object lists a nvidia card's memory" in response["status"]["message"]
    response = await mutate(pod({SLICED: "1", P: "10"}), none)
    assert response["allowed"] is True


async def test_unreadable_devices_refuse_only_what_needs_them() -> None:
    broken = Cluster(status=500)
    response = await mutate(pod({SLICED: "1", MIB: "1000"}), broken)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("reading the Devices objects failed:")
    assert (await mutate(pod({"nvidia.com/gpu": "8"}), broken))["allowed"] is True  # unchecked


# -- the envelope -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "AdmissionReview: not valid JSON"),
        (b"[]", "AdmissionReview: Expected `object`"),
        (
            b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{}}}',
            "expected apiVersion admission.k8s.io/v1",
        ),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"","kind":{}}}',
            "request.uid must be 1 to 128 characters",
        ),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
            "missing required field `request`",
        ),
        (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE"}}',
            "a Pod CREATE review carries no request.object",
        ),
    ],
)
async def test_malformed_reviews_are_400_with_one_line(body: bytes, message: str) -> None:
    status, answer = await post(Cluster(), "/mutate-v1-pod", body)
    assert status == 400
    text = answer.decode()
    assert message in text
    assert text.count("\n") == 1
    assert text.endswith("\n")


async def test_body_is_bounded() -> None:
    status, answer = await post(
        Cluster(), "/validate-v1-pod", b"{}", content_length=MAX_REVIEW_BYTES + 1
    )
    assert status == 413
    assert answer == f"AdmissionReview: body larger than {MAX_REVIEW_BYTES} bytes\n".encode()


async def test_only_post() -> None:
    status, answer = await post(Cluster(), "/mutate-v1-pod", b"", method="GET")
    assert status == 405
    assert b"accepts POST only (GET)" in answer


async def test_other_kinds_are_allowed_untouched() -> None:
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "operation": "CREATE",
                "object": {},
            },
        }
    ).encode()
    status, answer = await post(Cluster(), "/mutate-v1-pod", body)
    assert status == 200
    assert json.loads(answer)["response"] == {"uid": "u", "allowed": True}


# -- fuzzing the decoder ----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
REQUESTS = st.fixed_dictionaries(
    {},
    optional={
        "uid": st.one_of(st.text(max_size=140), JSON),
        "kind": st.one_of(st.just({"group": "", "version": "v1", "kind": "Pod"}), JSON),
        "operation": st.one_of(st.sampled_from(["CREATE", "UPDATE", "DELETE"]), JSON),
        "object": st.one_of(st.just(pod({SLICED: "1"})), JSON),
        "namespace": JSON,
    },
)
REVIEWS = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.one_of(st.just("admission.k8s.io/v1"), JSON),
        "kind": st.one_of(st.just("AdmissionReview"), JSON),
        "request": st.one_of(REQUESTS, JSON),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(REVIEWS.map(lambda r: json.dumps(r).encode()), st.binary(max_size=200)))
def test_decoder_raises_only_review_errors(body: bytes) -> None:
    message, uid = "", "-"
    try:
        uid = decode_review(body).uid
    except ReviewError as exc:
        message = str(exc)
    assert "\n" not in message
    assert uid


@settings(max_examples=60, deadline=None)
@given(REVIEWS.map(lambda r: json.dumps(r).encode()))
async def test_no_review_makes_the_webhook_fail(body: bytes) -> None:
    for path in ("/mutate-v1-pod", "/validate-v1-pod"):
        status, answer = await post(Cluster(), path, body)
        assert status in (200, 400), answer
        if status == 200:
            assert json.loads(answer)["response"]["uid"]
